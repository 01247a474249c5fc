/*
 * quant_probe.cu — where does a 4-bit decode GEMV lose its bandwidth?
 * (kernel lab for issue 7; standalone, not part of the library)
 *
 * Every 4-bit GEMV tried on the H200 (v1 scalar float32, v4 half2, v3 tensor
 * cores) streams ~2.2 TB/s on lm_head-sized weights while v1 at 8 bits
 * streams ~4 TB/s with the same code (docs/perf/quant.md, runs 9-11). This
 * probe times kernels with v1's access pattern (a warp owns R rows, lane l
 * reads 16-byte chunks l, l+32, ... of each row) that do less and less of
 * the real work, so the step that costs the bandwidth shows itself:
 *   mode 0  weights only (XOR of the words, one store per warp)
 *   mode 1  + the scale and bias of each chunk's group (bf16 loads, as v1)
 *   mode 2  + the chunk's 32 activations (four 16-byte loads of x, as v1)
 *   mode 3  + v1's arithmetic (exponent trick, FMA per weight)
 * for R = 2, 4, 8 rows per warp and 1 or 2 chunks in flight per row, on a
 * [128256 x 4096] and a [4096 x 14336] 4-bit group-64 weight. Medians of
 * CUDA-event timings over >= 256 MB of weight copies (no L2 reuse), against
 * the device-to-device copy rate measured in the same run.
 *
 * Shared helpers: lab_common.cuh; tk_ld_stream from cuda_common.cuh.
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/quant_probe.cu -o quant_probe
 * Run:   ./quant_probe            (prints one table)
 */
#include "backend/cuda/cuda_common.cuh"
#include "lab_common.cuh"

static __device__ __forceinline__ float bf(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

template <int MODE, int R, int U>
static __global__ void __launch_bounds__(128)
    k_probe(const uint4 *q, const uint16_t *sc, const uint16_t *bi, const uint4 *x,
            int64_t n_chunks, int64_t out, float *y)
{
    int lane = threadIdx.x & 31;
    int64_t row0 = ((int64_t)blockIdx.x * 4 + (threadIdx.x >> 5)) * R;
    if (row0 >= out) return;
    int64_t n_groups = n_chunks / 2; /* 32 values per chunk, group 64 */
    float acc = 0.0f;
    uint32_t bits = 0;
    for (int64_t c0 = lane; c0 < n_chunks; c0 += 32 * U) {
        uint4 w[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++) {
                int64_t c = c0 + 32 * u;
                w[u][r] = c < n_chunks ? tk_ld_stream(q + (row0 + r) * n_chunks + c)
                                       : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t c = c0 + 32 * u;
            if (c >= n_chunks) break;
            float xf[32];
            if (MODE >= 2) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    uint4 v = __ldg(x + c * 4 + j);
                    if (MODE == 2) { /* every load used, no float work */
                        bits ^= v.x ^ v.y ^ v.z ^ v.w;
                        continue;
                    }
                    const uint32_t uu[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        xf[8 * j + 2 * k] = __uint_as_float(uu[k] << 16);
                        xf[8 * j + 2 * k + 1] = __uint_as_float(uu[k] & 0xffff0000u);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint32_t *ww = (const uint32_t *)&w[u][r];
                float s = 1.0f, b = 0.0f;
                if (MODE >= 1) {
                    int64_t gi = (row0 + r) * n_groups + c / 2;
                    s = bf(sc[gi]);
                    b = bf(bi[gi]);
                }
                if (MODE == 0) {
                    bits ^= ww[0] ^ ww[1] ^ ww[2] ^ ww[3];
                } else if (MODE == 1) {
                    bits ^= ww[0] ^ ww[1] ^ ww[2] ^ ww[3];
                    acc += s + b;
                } else if (MODE == 2) {
                    bits ^= ww[0] ^ ww[1] ^ ww[2] ^ ww[3];
                    acc += s + b;
                } else {
                    float dq = 0.0f, sx = 0.0f;
#pragma unroll
                    for (int e = 0; e < 32; e++) {
                        uint32_t qv = (ww[e / 8] >> ((e % 8) * 4)) & 15u;
                        dq = fmaf(xf[e], __uint_as_float(0x4B000000u | qv) - 8388608.0f, dq);
                        sx += xf[e];
                    }
                    acc = fmaf(s, dq, fmaf(b, sx, acc));
                }
            }
        }
    }
    acc += (float)(bits & 1u);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[row0 / R] = acc;
}

typedef void (*probe_fn)(const uint4 *, const uint16_t *, const uint16_t *, const uint4 *, int64_t,
                         int64_t, float *);

struct variant {
    const char *name;
    int mode, r, u;
    probe_fn fn;
};

#define V(M, R, U) {"m" #M " R" #R " U" #U, M, R, U, k_probe<M, R, U>}
static const variant VARIANTS[] = {
    V(0, 4, 1), V(1, 4, 1), V(2, 4, 1), V(3, 4, 1), V(0, 2, 1), V(3, 2, 1), V(0, 8, 1),
    V(3, 8, 1), V(0, 4, 2), V(1, 4, 2), V(2, 4, 2), V(3, 4, 2), V(3, 2, 2), V(0, 2, 4),
};

static float median_ms(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(void)
{
    double cgbs = copy_rate();
    printf("device copy rate %.0f GB/s (read + write)\n", cgbs);
    printf("%-8s %-16s %-12s %9s %9s %7s\n", "shape", "[out x in]", "variant", "us", "GB/s",
           "%copy");
    const int64_t shapes[2][2] = {{128256, 4096}, {4096, 14336}};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int si = 0; si < 2; si++) {
        int64_t out = shapes[si][0], in = shapes[si][1], n_chunks = in / 32;
        size_t qb = (size_t)(out * in / 2), sb = (size_t)(out * (in / 64)) * 2;
        size_t bytes = qb + 2 * sb;
        int copies = (int)std::min<size_t>(16, (((size_t)256 << 20) + bytes - 1) / bytes);
        std::vector<void *> q(copies), s(copies), b(copies);
        for (int i = 0; i < copies; i++) {
            CK(cudaMalloc(&q[i], qb));
            CK(cudaMalloc(&s[i], sb));
            CK(cudaMalloc(&b[i], sb));
            CK(cudaMemset(q[i], 0x5a, qb));
            CK(cudaMemset(s[i], 0x3c, sb)); /* bf16 0x3c3c ~ 0.0115 */
            CK(cudaMemset(b[i], 0x3c, sb));
        }
        void *x, *y;
        CK(cudaMalloc(&x, (size_t)in * 2));
        CK(cudaMemset(x, 0x3c, (size_t)in * 2));
        CK(cudaMalloc(&y, (size_t)out * 4));
        for (const variant &v : VARIANTS) {
            unsigned blocks = (unsigned)((out + 4 * v.r - 1) / (4 * v.r));
            std::vector<float> t;
            for (int k = 0; k < 12; k++) {
                CK(cudaEventRecord(e0));
                for (int rep = 0; rep < 20; rep++) {
                    int i = (k * 20 + rep) % copies;
                    v.fn<<<blocks, 128>>>((const uint4 *)q[i], (const uint16_t *)s[i],
                                          (const uint16_t *)b[i], (const uint4 *)x, n_chunks, out,
                                          (float *)y);
                }
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (k >= 2) t.push_back(ms / 20);
            }
            CK(cudaGetLastError());
            double ms = median_ms(t), gbs = (double)bytes / (ms / 1e3) / 1e9;
            printf("%-8s [%6lld x %5lld] %-12s %9.1f %9.0f %6.1f%%\n", si ? "down" : "lm_head",
                   (long long)out, (long long)in, v.name, ms * 1e3, gbs, 100 * gbs / cgbs);
        }
        for (int i = 0; i < copies; i++) cudaFree(q[i]), cudaFree(s[i]), cudaFree(b[i]);
        cudaFree(x);
        cudaFree(y);
    }
    return 0;
}
