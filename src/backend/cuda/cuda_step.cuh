/*
 * cuda_step.cuh — the record arithmetic of the decode step kernel
 * (cuda_step.cu), shared with the kernel labs that prototype it
 * (dev/kernels/q8_common.cuh): a record is one 16-row tile's 64-k group,
 * 512 bytes of mma.m16n8k16 A fragments then the 8 (scale, bias) pairs
 * (cuda_step.cu's header has the nibble map), and the ring of bulk copies
 * that brings records in. CUDA C++ only. Depends on cuda_qmma.cuh
 * (tk_mma_f16).
 */
#ifndef TERN_CUDA_STEP_CUH
#define TERN_CUDA_STEP_CUH

#include "backend/cuda/cuda_qmma.cuh"

#include <stdint.h>

/* Lane 0: the n one-arrival mbarriers at shared address bar0 (8 bytes
 * apart) of a warp's ring, ready for the bulk copies. */
static __device__ __forceinline__ void st_ring_init(uint32_t bar0, int n)
{
    for (int i = 0; i < n; i++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0 + 8 * i));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/* Lane 0: bytes from global src into shared dst, completing on mbarrier bar
 * (armed here for them), with L2 cache policy pol. */
static __device__ __forceinline__ void st_bulk(uint32_t dst, const void *src, uint32_t bytes,
                                               uint32_t bar, uint64_t pol)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
                 "[%0], [%1], %2, [%3], %4;" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar), "l"(pol)
                 : "memory");
}

/* st_bulk by one lane of a converged warp, chosen by elect.sync inside the
 * asm: every lane calls it (no divergent branch around it). */
static __device__ __forceinline__ void st_bulk_elect(uint32_t dst, const void *src, uint32_t bytes,
                                                     uint32_t bar, uint64_t pol)
{
    asm volatile("{ .reg .pred p; elect.sync _|p, 0xffffffff;\n"
                 "@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%3], %2;\n"
                 "@p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::"
                 "cache_hint [%0], [%1], %2, [%3], %4; }" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar), "l"(pol)
                 : "memory");
}

static __device__ __forceinline__ void st_wait(uint32_t bar, uint32_t parity)
{
    uint32_t ok;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!ok);
}

/* Whether the phase of parity `parity` of mbarrier bar has completed, without
 * waiting (acquire: true means the copies' bytes are visible). */
static __device__ __forceinline__ bool st_test(uint32_t bar, uint32_t parity)
{
    uint32_t ok;
    asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; "
                 "selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return ok != 0u;
}

/* Word pair (w0, w1) of a record (f16 layout, st_group1) as the A
 * registers of two k-steps: lo the low nibbles of each byte as f16
 * 1024 + q, hi the high ones as 1024 + 16 q (magic: 0x64006400). */
static __device__ __forceinline__ void st_unpack_f16(uint32_t w0, uint32_t w1, uint32_t magic,
                                                     uint32_t *lo, uint32_t *hi)
{
    const uint32_t u[4] = {w0, w0 >> 8, w1, w1 >> 8};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;" : "=r"(lo[j]) : "r"(u[j]), "r"(magic));
        asm("lop3.b32 %0, %1, 0x00F000F0, %2, 0xEA;" : "=r"(hi[j]) : "r"(u[j]), "r"(magic));
    }
}

/* A record's MMA sums c0 (even k-steps) and c1 (odd) into the lane's 2
 * sums with its (scale, bias) pairs sbv: acc += s (c0 + c1 / 16 - 1024 Y)
 * + b X (st_group1). */
static __device__ __forceinline__ void st_group_sums(const float *c0, const float *c1, uint2 sbv,
                                                     float2 XY, float *acc)
{
    const float s0 = __uint_as_float(sbv.x << 16), s1 = __uint_as_float(sbv.x & 0xffff0000u);
    const float b0 = __uint_as_float(sbv.y << 16), b1 = __uint_as_float(sbv.y & 0xffff0000u);
    const float t0 = fmaf(-1024.0f, XY.y, fmaf(c1[0], 0.0625f, c0[0]));
    const float t1 = fmaf(-1024.0f, XY.y, fmaf(c1[2], 0.0625f, c0[2]));
    acc[0] = fmaf(b0, XY.x, fmaf(s0, t0, acc[0]));
    acc[1] = fmaf(b1, XY.x, fmaf(s1, t1, acc[1]));
}

/* One record of the decode step kernel (cuda_step.cu's nibble map) into a
 * lane's 2 sums of ONE token (every B column holds it): rows g (acc[0])
 * and g + 8 (acc[1]). x is f16 (xa, xb: the lane's 16 values of the
 * group); magic is 0x64006400, f16 1024 in each half. Word pair p's low
 * nibbles of each byte, (w & 0x000F000F) | magic, are f16 1024 + q: the
 * A registers of k-step 2p; the high ones, (w & 0x00F000F0) | magic, are
 * 1024 + 16 q: those of k-step 2p + 1 (one shift per word instead of
 * three). So c0 = 1024 X_even + sum x q over the even k-steps, c1 = 1024
 * X_odd + 16 sum x q over the odd ones, and per group acc += s (c0 + c1 /
 * 16 - 1024 Y) + b X with XY = (X, Y = X_even + X_odd / 16), made once per
 * op where x is written. */
static __device__ __forceinline__ void st_group1(const uint4 w, const uint4 xa, const uint4 xb,
                                                 uint2 sbv, float2 XY, uint32_t magic, float *acc)
{
    float c0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint32_t ww[4] = {w.x, w.y, w.z, w.w};
    const uint32_t xr[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
    for (int p = 0; p < 2; p++) {
        uint32_t lo[4], hi[4];
        st_unpack_f16(ww[2 * p], ww[2 * p + 1], magic, lo, hi);
        tk_mma_f16(c0, lo[0], lo[1], lo[2], lo[3], xr[4 * p], xr[4 * p + 1]);
        tk_mma_f16(c1, hi[0], hi[1], hi[2], hi[3], xr[4 * p + 2], xr[4 * p + 3]);
    }
    st_group_sums(c0, c1, sbv, XY, acc);
}

#endif /* TERN_CUDA_STEP_CUH */
