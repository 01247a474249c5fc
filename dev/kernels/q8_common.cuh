/*
 * q8_common.cuh — the record layout's device pieces that the 4-bit GEMV labs
 * share (q8_lab.cu, persist_lab.cu): a record is one 16-row tile's 64-k
 * group, 512 bytes of mma.m16n8k16 A fragments (lane L's 16 bytes at 16 L,
 * word s = k-step s, k_i = 64 G + 16 t + 4 s + i) followed by the 8
 * (scale, bias) words of rows g / g + 8 (q8_lab.cu's header has the nibble
 * map). q8_group folds one record into a lane's 4 sums; q8_bulk / q8_wait /
 * q8_arrive drive cp.async.bulk copies into shared memory through mbarriers
 * (q8_group and q8_wait are the library's, cuda_step.cuh; q8_smem is
 * tk_smem_u32, cuda_common.cuh).
 * Kernel lab code, not part of the library. Include after
 * backend/cuda/cuda_qmma.cuh (tk_mma_bf16).
 */
#ifndef TERN_DEV_Q8_COMMON_CUH
#define TERN_DEV_Q8_COMMON_CUH

#include "backend/cuda/cuda_step.cuh"

#define REC 36 /* uint4 per record: 32 lanes x 16 bytes + 8 x 8 bytes of scale/bias */

/* One record into a lane's 4 sums: the library's (cuda_step.cuh), with
 * kc = {magic 0x43004300, ...} as a kernel argument. */
static __device__ __forceinline__ void q8_group(const uint4 w, const uint4 xa, const uint4 xb,
                                                uint2 sbv, const uint4 kc, float *acc)
{
    st_group(w, xa, xb, sbv, kc.x, acc);
}

/* (x & 0x000F000F) | m in one LOP3 (m in a register). */
static __device__ __forceinline__ uint32_t q8_lop(uint32_t x, uint32_t m)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;" : "=r"(d) : "r"(x), "r"(m));
    return d;
}

/* q8_group with the group's sum of x given (XS: the sum made once per op, not by a second MMA per record). */
static __device__ __forceinline__ void q8_group_xs(const uint4 w, const uint4 xa, const uint4 xb,
                                                   uint2 sbv, float Xg, const uint4 kc, float *acc)
{
    float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint32_t ww[4] = {w.x, w.y, w.z, w.w};
    const uint32_t xr[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
    for (int s = 0; s < 4; s++) {
        uint32_t v = ww[s];
        tk_mma_bf16(cg, q8_lop(v, kc.x), q8_lop(v >> 4, kc.x), q8_lop(v >> 8, kc.x),
                    q8_lop(v >> 12, kc.x), xr[2 * s], xr[2 * s + 1]);
    }
    float s0 = __uint_as_float(sbv.x << 16), s1 = __uint_as_float(sbv.x & 0xffff0000u);
    float o0 = fmaf(-128.0f, s0, __uint_as_float(sbv.y << 16)) * Xg;
    float o1 = fmaf(-128.0f, s1, __uint_as_float(sbv.y & 0xffff0000u)) * Xg;
    acc[0] = fmaf(s0, cg[0], acc[0] + o0);
    acc[1] = fmaf(s0, cg[1], acc[1] + o0);
    acc[2] = fmaf(s1, cg[2], acc[2] + o1);
    acc[3] = fmaf(s1, cg[3], acc[3] + o1);
}

#define q8_smem tk_smem_u32

static __device__ __forceinline__ void q8_bulk(uint32_t dst, const void *src, uint32_t bytes,
                                               uint32_t bar)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

#define q8_wait st_wait

/* One arrival on an mbarrier (a consumer releasing a ring stage). */
static __device__ __forceinline__ void q8_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* kc of q8_group: {magic 0x43004300, ...} as kernel arguments. */
static const uint4 KC = {0x43004300u, 1u << 28, 1u << 24, 1u << 20};

#endif /* TERN_DEV_Q8_COMMON_CUH */
