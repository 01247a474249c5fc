/*
 * stream_lab.cu — how fast can one persistent kernel (one 16-warp block per
 * SM, like the decode step kernel) read a 4 GB stream, by transport, with
 * no arithmetic: per-warp cp.async.bulk rings (the step kernel's: S stages
 * of CH bytes, chunk k to warp k % warps, so the grid reads a contiguous
 * window), the same with bigger chunks, 16-byte cp.async rings (LSU path
 * into shared memory), and plain ld.global.nc.v4 into registers. Tells
 * whether the step kernel's ~3.6-3.9 TB/s inside its GEMVs is the bulk
 * copies' ceiling. Prints GB/s (median of 7 after 2 warm-ups) and the
 * device-to-device copy rate (read + write) of the same run.
 *
 * nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *   dev/kernels/stream_lab.cu -o /tmp/s && /tmp/s
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_step.cuh"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#define NW 16

/* bulk rings: S stages of ch bytes per warp; evict: L2 evict_first hint */
template <int S>
static __global__ void __launch_bounds__(NW * 32, 1)
    k_bulk(const char *src, long long n_chunks, int ch, int evict, unsigned *sink)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t bars[NW][S];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long long W = (long long)gridDim.x * NW, w = (long long)blockIdx.x * NW + warp;
    uint32_t ring0 = tk_smem_u32(smem + (size_t)warp * S * ch), bar0 = tk_smem_u32(&bars[warp][0]);
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    if (lane == 0) st_ring_init(bar0, S);
    __syncwarp();
    long long issued = 0, used = 0, k_issue = w;
    auto issue = [&]() {
        if (k_issue >= n_chunks) return;
        uint32_t stg = (uint32_t)(issued % S), dst = ring0 + stg * ch, bar = bar0 + 8 * stg;
        if (evict)
            st_bulk(dst, src + k_issue * ch, (uint32_t)ch, bar, pol);
        else {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                         "r"(ch)
                         : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                         "[%0], [%1], %2, [%3];" ::"r"(dst),
                         "l"(src + k_issue * ch), "r"(ch), "r"(bar)
                         : "memory");
        }
        issued++;
        k_issue += W;
    };
    if (lane == 0)
        for (int i = 0; i < S; i++) issue();
    unsigned acc = 0;
    for (long long k = w; k < n_chunks; k += W) {
        uint32_t stg = (uint32_t)(used % S);
        st_wait(bar0 + 8 * stg, (uint32_t)((used / S) & 1));
        acc ^= ((const unsigned *)(smem + (size_t)warp * S * ch + stg * ch))[lane];
        used++;
        __syncwarp();
        if (lane == 0) issue();
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

/* 16-byte cp.async rings through the LSU: each warp S stages of ch bytes */
template <int S>
static __global__ void __launch_bounds__(NW * 32, 1)
    k_cpasync(const char *src, long long n_chunks, int ch, unsigned *sink)
{
    extern __shared__ __align__(128) unsigned char smem[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long long W = (long long)gridDim.x * NW, w = (long long)blockIdx.x * NW + warp;
    char *ring = (char *)smem + (size_t)warp * S * ch;
    long long k_issue = w;
    int issued = 0;
    auto issue = [&]() {
        if (k_issue < n_chunks) {
            char *dst = ring + (issued % S) * ch;
            for (int o = lane * 16; o < ch; o += 512)
                asm volatile(
                    "cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(tk_smem_u32(dst + o)),
                    "l"(src + k_issue * ch + o)
                    : "memory");
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
        issued++;
        k_issue += W;
    };
    for (int i = 0; i < S; i++) issue();
    unsigned acc = 0;
    int used = 0;
    for (long long k = w; k < n_chunks; k += W) {
        asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
        __syncwarp();
        acc ^= ((const unsigned *)(ring + (used % S) * ch))[lane];
        used++;
        __syncwarp();
        issue();
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

/* plain loads: each warp reads chunk k (ch bytes) as U uint4 per lane in flight */
template <int U>
static __global__ void __launch_bounds__(NW * 32, 1)
    k_ldg(const char *src, long long n_chunks, int ch, unsigned *sink)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long long W = (long long)gridDim.x * NW, w = (long long)blockIdx.x * NW + warp;
    unsigned acc = 0;
    int per = ch / 512; /* uint4 per lane per chunk */
    for (long long k = w; k < n_chunks; k += W * U) {
        uint4 v[U][4];
#pragma unroll
        for (int u = 0; u < U; u++)
            for (int i = 0; i < 4; i++)
                if (i < per && k + u * W < n_chunks)
                    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                                 : "=r"(v[u][i].x), "=r"(v[u][i].y), "=r"(v[u][i].z),
                                   "=r"(v[u][i].w)
                                 : "l"(src + (k + u * W) * ch + i * 512 + lane * 16));
                else
                    v[u][i] = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; u++)
            for (int i = 0; i < 4; i++) acc ^= v[u][i].x ^ v[u][i].w;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

static float time_it(void (*f)(void *), void *arg)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    std::vector<float> ts;
    for (int i = 0; i < 9; i++) {
        cudaEventRecord(a);
        f(arg);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        if (i >= 2) ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) printf("error %s\n", cudaGetErrorString(e)), exit(1);
    return ts[ts.size() / 2];
}

struct run {
    int kind, s, ch, evict, u;
    const char *src;
    long long bytes;
    unsigned *sink;
    int grid;
};

static void launch(void *p)
{
    run *r = (run *)p;
    long long n = r->bytes / r->ch;
    size_t sm = (size_t)NW * r->s * r->ch;
    if (r->kind == 0) {
        if (r->s == 2) {
            cudaFuncSetAttribute(k_bulk<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
            k_bulk<2><<<r->grid, NW * 32, sm>>>(r->src, n, r->ch, r->evict, r->sink);
        } else if (r->s == 4) {
            cudaFuncSetAttribute(k_bulk<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
            k_bulk<4><<<r->grid, NW * 32, sm>>>(r->src, n, r->ch, r->evict, r->sink);
        } else {
            cudaFuncSetAttribute(k_bulk<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
            k_bulk<8><<<r->grid, NW * 32, sm>>>(r->src, n, r->ch, r->evict, r->sink);
        }
    } else if (r->kind == 1) {
        cudaFuncSetAttribute(k_cpasync<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
        k_cpasync<4><<<r->grid, NW * 32, sm>>>(r->src, n, r->ch, r->sink);
    } else {
        if (r->u == 2)
            k_ldg<2><<<r->grid, NW * 32>>>(r->src, n, r->ch, r->sink);
        else
            k_ldg<4><<<r->grid, NW * 32>>>(r->src, n, r->ch, r->sink);
    }
}

static void copy(void *p)
{
    run *r = (run *)p;
    cudaMemcpyAsync((void *)r->sink, r->src, (size_t)r->bytes / 4, cudaMemcpyDeviceToDevice);
}

int main(void)
{
    int sms;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    long long bytes = 4ll << 30;
    char *src;
    unsigned *sink;
    if (cudaMalloc(&src, bytes) != cudaSuccess || cudaMalloc(&sink, bytes / 4) != cudaSuccess)
        return printf("alloc failed\n"), 1;
    cudaMemset(src, 1, bytes);
    run c = {0, 0, 0, 0, 0, src, bytes, sink, sms};
    float ms = time_it(copy, &c);
    printf("copy (read + write) %.0f GB/s\n", 2.0 * (bytes / 4) / ms / 1e6);
    run rs[] = {
        {0, 4, 2304, 1, 0}, {0, 4, 2304, 0, 0}, {0, 2, 2304, 1, 0}, {0, 8, 2304, 1, 0},
        {0, 4, 4608, 1, 0}, {0, 2, 6912, 1, 0}, {0, 4, 1152, 1, 0}, {1, 4, 2304, 0, 0},
        {2, 0, 2048, 0, 2}, {2, 0, 2048, 0, 4},
    };
    const char *names[] = {"bulk", "cp.async 16B", "ld.global.nc"};
    printf("%-14s %6s %6s %6s %4s %9s\n", "transport", "stages", "chunk", "evict", "U", "GB/s");
    for (run &r : rs) {
        r.src = src, r.bytes = bytes, r.sink = sink, r.grid = sms;
        if ((size_t)NW * r.s * r.ch > 227 * 1024) continue;
        float t = time_it(launch, &r);
        printf("%-14s %6d %6d %6d %4d %9.0f\n", names[r.kind], r.s, r.ch, r.evict, r.u,
               (double)(bytes / r.ch * r.ch) / t / 1e6);
    }
    return 0;
}
