/*
 * lab_common.cuh — the helpers the standalone GEMV labs share (q6_lab.cu,
 * q8_lab.cu): a checked CUDA call, random device fills, the device copy
 * rate (read + write), median CUDA-event timing of launches that cycle
 * through weight copies, a max relative error, and a random 4-bit weight. Kernel lab code, not
 * part of the library. Include after the library sources a lab includes.
 */
#ifndef TERN_DEV_LAB_COMMON_CUH
#define TERN_DEV_LAB_COMMON_CUH

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* p[i] = (hash(i, seed) & mask) | orv for n 32-bit words. */
static __global__ void k_lab_fill(uint32_t *p, size_t n, uint32_t seed, uint32_t mask,
                                  uint32_t orv)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
        p[i] = (h & mask) | orv;
    }
}

static void fill(void *p, size_t bytes, uint32_t seed, uint32_t mask, uint32_t orv)
{
    k_lab_fill<<<1024, 256>>>((uint32_t *)p, bytes / 4, seed, mask, orv);
    CK(cudaGetLastError());
}

/* Device-to-device copy rate in GB/s (bytes read + written), median of 9. */
static double copy_rate(void)
{
    size_t n = 512ull << 20;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> v;
    for (int i = 0; i < 9; i++) {
        CK(cudaEventRecord(e0));
        CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        v.push_back(ms);
    }
    std::sort(v.begin(), v.end());
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return 2.0 * n / (v[4] * 1e-3) / 1e9;
}

/* fn(copy index) enqueues one launch; 3 warm-ups, then the median of 9
 * samples of 20 launches cycling through n_copies weight copies: us per launch. */
template <typename F> static double time_us(int n_copies, F fn)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) fn(i % n_copies);
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    std::vector<float> v;
    int k = 0;
    for (int s = 0; s < 9; s++) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < 20; i++) fn(k++ % n_copies);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        v.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(v.begin(), v.end());
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return v[4] * 1e3 / 20;
}

/* A random 4-bit g64 weight [out, in] in MLX's layout on the device: packed
 * words, BF16 scales in [2^-7, 2^-6) and biases +-[2^-4, 2^-3); seeds sq,
 * sq + 100, sq + 200. */
static void lab_q4_alloc(size_t out, size_t in, uint32_t sq, void **q, void **s, void **b)
{
    size_t qb = out * in / 2, sbb = out * (in / 64) * 2;
    CK(cudaMalloc(q, qb));
    CK(cudaMalloc(s, sbb));
    CK(cudaMalloc(b, sbb));
    fill(*q, qb, sq, 0xffffffffu, 0);
    fill(*s, sbb, sq + 100, 0x007F007Fu, 0x3C003C00u);
    fill(*b, sbb, sq + 200, 0x807F807Fu, 0x3D803D80u);
}

static std::vector<float> get(const float *d, size_t n)
{
    std::vector<float> h(n);
    CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
    return h;
}

/* max |a - b| / max |b| */
static double rel(const std::vector<float> &a, const std::vector<float> &b)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < a.size(); i++) {
        md = std::max(md, (double)fabsf(a[i] - b[i]));
        mr = std::max(mr, (double)fabsf(b[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

#endif /* TERN_DEV_LAB_COMMON_CUH */
