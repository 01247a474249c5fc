/*
 * lat_lab.cu — kernel lab for issue 7: the latencies that the decode step
 * kernel's phase chains are made of, so that a phase's SASS can be costed
 * before device time is spent on it. The phases are short dependent chains
 * between block barriers (docs/perf/quant.md, session 12: with no weight
 * stream and no arithmetic they take as long as with both), e.g. the
 * attention's q . k is two chains of four mma.sync, its softmax two
 * 5-level shuffle trees. Here one block per SM (1 or 16 warps, every warp
 * running the same chain) times a chain of 64 dependent instructions of
 * each kind with clock64: mma.sync m16n8k16 bf16 and f16 (the accumulator
 * carried), shfl.sync.bfly, ld.shared (pointer chase), ex2.approx, fma,
 * a block barrier (16 warps), an L2 load (ld.global.cg pointer chase over
 * lines written before, 64 KB: L2 hits), and the globaltimer read. Prints
 * cycles per instruction, median over the SMs.
 * Run: ./lat_lab
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/lat_lab.cu -o lat_lab
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>

enum { CHAIN = 64, NK = 9 };
static const char *names[NK] = {"mma.sync bf16",   "mma.sync f16",    "shfl.bfly",
                                "ld.shared chase", "ex2.approx",      "fma",
                                "bar.sync",        "ld.global.cg L2", "globaltimer"};

/* Kind K's chain once; returns cycles per instruction (thread 0's view). */
template <int K>
static __device__ __forceinline__ float chain(uint32_t *sh, const uint32_t *gl, float seed,
                                              uint32_t &sink)
{
    uint32_t a0 = __float_as_uint(seed), a1 = a0 ^ 1u, a2 = a0 ^ 2u, a3 = a0 ^ 3u, b0 = a0, b1 = a1;
    float c[4] = {seed, seed, seed, seed};
    uint32_t u = (uint32_t)threadIdx.x & 31u;
    float f = seed + (float)threadIdx.x; /* not warp-uniform: shuffles stay */
    unsigned long long t = 0;
    __syncthreads();
    long long t0 = clock64();
#pragma unroll
    for (int i = 0; i < CHAIN; i++) {
        if (K == 0)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                         "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        if (K == 1)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                         "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        if (K == 2) f = __shfl_xor_sync(0xffffffffu, f, 1 << (i % 5));
        if (K == 3) u = sh[u];
        if (K == 4) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(f));
        if (K == 5) asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(f));
        if (K == 6) __syncthreads();
        if (K == 7) asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(u) : "l"(gl + u));
        if (K == 8) {
            unsigned long long v;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
            t += v;
        }
    }
    long long t1 = clock64();
    sink ^= u ^ __float_as_uint(f + c[0] + c[1] + c[2] + c[3]) ^ (uint32_t)t;
    return (float)(t1 - t0) / CHAIN;
}

__global__ void k_lat(float *out, uint32_t *sink_out, const uint32_t *gl, float seed)
{
    __shared__ uint32_t sh[1024];
    for (int i = threadIdx.x; i < 1024; i += blockDim.x) sh[i] = (i * 37u + 11u) & 1023u;
    __syncthreads();
    uint32_t sink = 0;
    float r[NK];
#pragma unroll 1
    for (int rep = 0; rep < 2; rep++) { /* the second: warm */
        r[0] = chain<0>(sh, gl, seed, sink), r[1] = chain<1>(sh, gl, seed, sink);
        r[2] = chain<2>(sh, gl, seed, sink), r[3] = chain<3>(sh, gl, seed, sink);
        r[4] = chain<4>(sh, gl, seed, sink), r[5] = chain<5>(sh, gl, seed, sink);
        r[6] = chain<6>(sh, gl, seed, sink), r[7] = chain<7>(sh, gl, seed, sink);
        r[8] = chain<8>(sh, gl, seed, sink);
    }
    if (threadIdx.x == 0)
        for (int k = 0; k < NK; k++) out[blockIdx.x * NK + k] = r[k];
    sink_out[blockIdx.x * blockDim.x + threadIdx.x] = sink;
}

int main()
{
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const int nl = 64 * 1024 / 4; /* the L2 chase: 64 KB, one hop per 128-byte line */
    std::vector<uint32_t> h(nl);
    for (int i = 0; i < nl; i++) h[i] = (uint32_t)((i + 32 * 97) % nl);
    uint32_t *gl, *sink;
    float *out;
    cudaMalloc(&gl, nl * 4), cudaMalloc(&sink, (size_t)sms * 512 * 4);
    cudaMalloc(&out, (size_t)sms * NK * 4);
    cudaMemcpy(gl, h.data(), nl * 4, cudaMemcpyHostToDevice);
    printf("lat_lab: %d SMs, one block each; cycles per dependent instruction, median over SMs\n",
           sms);
    printf("%-18s %10s %10s\n", "kind", "1 warp", "16 warps");
    float res[2][NK];
    const int warps[2] = {1, 16};
    for (int w = 0; w < 2; w++) {
        k_lat<<<sms, 32 * warps[w]>>>(out, sink, gl, 1.0001f);
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) {
            fprintf(stderr, "lat_lab: %s\n", cudaGetErrorString(e));
            return 1;
        }
        std::vector<float> o((size_t)sms * NK);
        cudaMemcpy(o.data(), out, o.size() * 4, cudaMemcpyDeviceToHost);
        for (int k = 0; k < NK; k++) {
            std::vector<float> v;
            for (int b = 0; b < sms; b++) v.push_back(o[b * NK + k]);
            std::sort(v.begin(), v.end());
            res[w][k] = v[sms / 2];
        }
    }
    for (int k = 0; k < NK; k++) printf("%-18s %10.1f %10.1f\n", names[k], res[0][k], res[1][k]);
    return 0;
}
