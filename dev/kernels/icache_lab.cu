/*
 * icache_lab.cu — kernel lab for issue 7: what does straight-line code cost
 * when it runs once, cold in the instruction caches? The decode step
 * kernel's phases (norm, x copies, attention, merge, epilogues) each run
 * once per layer between GEMV loops, and their steps take 0.4-1.2 us for
 * a few hundred instructions of work, even when run twice in a row
 * (TERN_CUDA_STEP_TUNE=4096, docs/perf/quant.md session 11). Here one
 * 16-warp block per SM (as the kernel) runs bodies of S independent FMAs
 * (4 chains per thread) once after a 128 KB body of other code (evicting
 * the SM's instruction caches), then again at once (warm), for S of 1, 4,
 * 16 and 64 KB of code. Prints cycles per instruction of the body (each
 * SM sub-partition issues its 4 warps' copies: ~4 when warm) and the cost
 * of a cold 128-byte line, median over the SMs. Then bodies of 64
 * segments of 4 FMAs, each jumping over 1 or 4 KB of code not run (as the
 * phases' branches do): cycles per cold segment (the "line" column); and
 * a capacity sweep (16 such segments after E KB of other code). Findings
 * (call 9, docs/perf/quant.md session 11): straight code runs nearly as
 * fast cold (the fetch streams it), but every taken jump to a line not in
 * the first level costs ~60 cycles more from the second (code run within
 * ~32-128 KB) and ~230-270 more from L2 (past ~128-192 KB), GPU idle.
 * (The bodies inline: one copy each, run twice by a loop that is not
 * unrolled; no calls, whose reference arguments went through the stack.)
 * Run: ./icache_lab
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/icache_lab.cu -o icache_lab
 */
#include <algorithm>
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>

#define F1                                                                                         \
    asm volatile("fma.rn.f32 %0, %0, %4, %5;\n\tfma.rn.f32 %1, %1, %4, %5;\n\t"                    \
                 "fma.rn.f32 %2, %2, %4, %5;\n\tfma.rn.f32 %3, %3, %4, %5;"                        \
                 : "+f"(a), "+f"(b), "+f"(c), "+f"(d)                                              \
                 : "f"(m), "f"(n));
#define F4   F1 F1 F1 F1
#define F16  F4 F4 F4 F4
#define F64  F16 F16 F16 F16 /* 256 instructions: 4 KB */
#define F256 F64 F64 F64 F64 /* 16 KB */

enum { NB = 6 }; /* bodies: 4 straight, 2 of 64 segments jumping over code */
static const int body_instr[NB] = {64, 256, 1024, 4096, 256, 256}; /* FMAs run */
static const int body_kb[NB] = {1, 4, 16, 64, 65, 260};            /* code */
#define SEG1                                                                                       \
    F1 if (n > 1e30f)                                                                              \
    {                                                                                              \
        F16                                                                                        \
    } /* 4 FMAs run, a jump over 1 KB */
#define SEG4                                                                                       \
    F1 if (n > 1e30f)                                                                              \
    {                                                                                              \
        F64                                                                                        \
    } /* a jump over 4 KB */
#define SEGS(x)  x x x x x x x x x x x x x x x x
#define SEG64(x) SEGS(x) SEGS(x) SEGS(x) SEGS(x)

/* t[block][0: cold, 1: warm] in cycles for body K (inline: one copy of its
 * code, run in reps 1 and 2 of a loop that is not unrolled) */
template <int K>
static __global__ void __launch_bounds__(512, 1) k_lab(long long *t, float *sink, float m, float n)
{
    float a = threadIdx.x, b = a + 1, c = a + 2, d = a + 3;
#pragma unroll 1
    for (int rep = 0; rep < 3; rep++) { /* 0: evict, 1: cold, 2: warm */
        __syncthreads();
        long long t0 = clock64();
        if (rep == 0) {
            F256 F256 F256 F256 F256 F256 F256 F256 /* 128 KB */
        } else if constexpr (K == 0) {
            F16
        } else if constexpr (K == 1) {
            F64
        } else if constexpr (K == 2) {
            F256
        } else if constexpr (K == 3) {
            F256 F256 F256 F256
        } else if constexpr (K == 4) {
            SEG64(SEG1)
        } else {
            SEG64(SEG4)
        }
        __syncthreads();
        if (rep > 0 && threadIdx.x == 0) t[blockIdx.x * 2 + rep - 1] = clock64() - t0;
    }
    sink[blockIdx.x * blockDim.x + threadIdx.x] = a + b + c + d;
}

/* The capacity sweep: 16 segments jumping over 1 KB each (17 KB of code)
 * after E KB of other straight code: t[block][0: cold, 1: warm] */
template <int E>
static __global__ void __launch_bounds__(512, 1) k_cap(long long *t, float *sink, float m, float n)
{
    float a = threadIdx.x, b = a + 1, c = a + 2, d = a + 3;
#pragma unroll 1
    for (int rep = 0; rep < 3; rep++) {
        __syncthreads();
        long long t0 = clock64();
        if (rep == 0) {
            if constexpr (E >= 16) {
                F256
            }
            if constexpr (E >= 32) {
                F256
            }
            if constexpr (E >= 64) {
                F256 F256
            }
            if constexpr (E >= 96) {
                F256 F256
            }
            if constexpr (E >= 128) {
                F256 F256
            }
            if constexpr (E >= 192) {
                F256 F256 F256 F256
            }
        } else {
            SEGS(SEG1)
        }
        __syncthreads();
        if (rep > 0 && threadIdx.x == 0) t[blockIdx.x * 2 + rep - 1] = clock64() - t0;
    }
    sink[blockIdx.x * blockDim.x + threadIdx.x] = a + b + c + d;
}

static void run_cap(int k, int nsm, long long *t, float *sink)
{
    const float m = 1.0000001f, n = 1e-7f;
    if (k == 0) k_cap<16><<<nsm, 512>>>(t, sink, m, n);
    if (k == 1) k_cap<32><<<nsm, 512>>>(t, sink, m, n);
    if (k == 2) k_cap<64><<<nsm, 512>>>(t, sink, m, n);
    if (k == 3) k_cap<96><<<nsm, 512>>>(t, sink, m, n);
    if (k == 4) k_cap<128><<<nsm, 512>>>(t, sink, m, n);
    if (k == 5) k_cap<192><<<nsm, 512>>>(t, sink, m, n);
}

template <int K> static void run_body(int nsm, long long *t, float *sink)
{
    k_lab<K><<<nsm, 512>>>(t, sink, 1.0000001f, 1e-7f);
}

int main()
{
    int dev = 0, nsm = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev);
    long long *t;
    float *sink;
    cudaMalloc(&t, (size_t)nsm * 2 * sizeof *t);
    cudaMalloc(&sink, (size_t)nsm * 512 * sizeof *sink);
    std::vector<long long> h((size_t)nsm * 2);
    printf("one 16-warp block per SM (%d), bodies of independent FMAs run after 128 KB of other "
           "code\n",
           nsm);
    printf("%-8s %-8s %12s %12s %14s\n", "code KB", "launch", "cold cyc/ins", "warm cyc/ins",
           "cold cyc/line");
    for (int launch = 0; launch < 3; launch++) { /* 0: code from DRAM; then from L2 */
        for (int k = 0; k < NB; k++) {
            if (k == 0) run_body<0>(nsm, t, sink);
            if (k == 1) run_body<1>(nsm, t, sink);
            if (k == 2) run_body<2>(nsm, t, sink);
            if (k == 3) run_body<3>(nsm, t, sink);
            if (k == 4) run_body<4>(nsm, t, sink);
            if (k == 5) run_body<5>(nsm, t, sink);
            if (cudaDeviceSynchronize() != cudaSuccess) {
                printf("launch failed: %s\n", cudaGetErrorString(cudaGetLastError()));
                return 1;
            }
            cudaMemcpy(h.data(), t, (size_t)nsm * 2 * sizeof h[0], cudaMemcpyDeviceToHost);
            std::vector<double> cold, warm;
            for (int s = 0; s < nsm; s++) {
                cold.push_back((double)h[(size_t)s * 2]);
                warm.push_back((double)h[(size_t)s * 2 + 1]);
            }
            std::sort(cold.begin(), cold.end());
            std::sort(warm.begin(), warm.end());
            double c = cold[nsm / 2], w = warm[nsm / 2], ni = body_instr[k];
            /* 16 bytes per instruction: 8 per 128-byte line */
            printf("%-8d %-8d %12.2f %12.2f %14.1f\n", body_kb[k], launch, c / ni, w / ni,
                   (c - w) / (k < 4 ? ni / 8.0 : 64.0));
        }
    }
    printf("16 segments (17 KB) after E KB of other code: cycles per segment, cold / warm\n");
    for (int k = 0; k < 6; k++) {
        static const int E[6] = {16, 32, 64, 96, 128, 192};
        for (int rep = 0; rep < 2; rep++) { /* the second launch: code from L2 */
            run_cap(k, nsm, t, sink);
            if (cudaDeviceSynchronize() != cudaSuccess) return 1;
        }
        cudaMemcpy(h.data(), t, (size_t)nsm * 2 * sizeof h[0], cudaMemcpyDeviceToHost);
        std::vector<double> cold, warm;
        for (int s = 0; s < nsm; s++)
            cold.push_back((double)h[2 * s]), warm.push_back((double)h[2 * s + 1]);
        std::sort(cold.begin(), cold.end());
        std::sort(warm.begin(), warm.end());
        printf("E %3d KB: %7.1f / %7.1f\n", E[k], cold[nsm / 2] / 16.0, warm[nsm / 2] / 16.0);
    }
    return 0;
}
