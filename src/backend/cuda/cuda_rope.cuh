/*
 * cuda_rope.cuh — the per-head arithmetic of the attention prologue, shared
 * by every kernel that applies it (cuda_ops.cu: rope and qk_rope_store;
 * cuda_quant_mma.cu: the qkv GEMV's rotary epilogue; cuda_step.cu: the
 * decode step), so that they give the same bits: a rotary pair's cos / sin,
 * the rotation of the pair, and a head's RMSNorm over a warp's row in
 * shared memory (qk_rope_store's). The
 * multiplies and FMAs are spelled out as intrinsics because with plain
 * expressions the compiler contracted them differently in two kernels (one
 * last-bit difference on the H200). CUDA C++ only. Depends on
 * cuda_common.cuh.
 */
#ifndef TERN_CUDA_ROPE_CUH
#define TERN_CUDA_ROPE_CUH

#include "backend/cuda/cuda_common.cuh"

/* cos and sin of pair i's angle p * inv_freq[i], times mscale. */
static __device__ __forceinline__ void tk_rope_cs(float p, float inv_freq, float mscale, float &c,
                                                  float &s)
{
    sincosf(__fmul_rn(p, inv_freq), &s, &c);
    c = __fmul_rn(c, mscale);
    s = __fmul_rn(s, mscale);
}

/* The pair (x1, x2) rotated: (x1 c - x2 s, x2 c + x1 s), each rounded to T
 * (returned as floats). */
template <typename T>
static __device__ __forceinline__ void tk_rope_pair(float &x1, float &x2, float c, float s)
{
    float y1 = __fmaf_rn(x1, c, -__fmul_rn(x2, s)), y2 = __fmaf_rn(x2, c, __fmul_rn(x1, s));
    x1 = tk_f(tk_from<T>(y1));
    x2 = tk_f(tk_from<T>(y2));
}

/* 1 / rms of the head x[0, hd) for one warp: lane l sums x[l], x[l + 32],
 * ... in turn, then the lanes' sums are added (k_rmsnorm_warp's order). */
static __device__ __forceinline__ float tk_head_inv_rms(const float *x, int hd, float eps, int lane)
{
    float ss = 0.0f;
    for (int i = lane; i < hd; i += 32) ss = __fmaf_rn(x[i], x[i], ss);
    ss = tk_warp_sum(ss);
    return rsqrtf(ss / (float)hd + eps);
}

/* One normalised head value x * inv * w, rounded to T. */
template <typename T>
static __device__ __forceinline__ float tk_head_norm_val(float x, float inv, float w)
{
    return tk_f(tk_from<T>(__fmul_rn(__fmul_rn(x, inv), w)));
}

#endif /* TERN_CUDA_ROPE_CUH */
