/*
 * cuda_common.cuh — device helpers shared by the kernel files: element
 * loads/stores by run-time dtype, warp and block reductions, launch checks.
 * CUDA C++ only (included by *.cu). Depends on cuda_kernels.h.
 */
#ifndef TERN_CUDA_COMMON_CUH
#define TERN_CUDA_COMMON_CUH

#include "backend/cuda/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

/* Loads element i of a float array of run-time dtype (F32 / F16 / BF16). */
static __device__ __forceinline__ float tk_ld(const void *p, int dt, int64_t i)
{
    if (dt == TK_BF16) return __bfloat162float(((const bf16 *)p)[i]);
    if (dt == TK_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

static __device__ __forceinline__ void tk_st(void *p, int dt, int64_t i, float v)
{
    if (dt == TK_BF16) ((bf16 *)p)[i] = __float2bfloat16(v);
    else if (dt == TK_F16) ((__half *)p)[i] = __float2half(v);
    else ((float *)p)[i] = v;
}

/* Typed access for kernels templated on the activation type. */
static __device__ __forceinline__ float tk_f(float v) { return v; }
static __device__ __forceinline__ float tk_f(bf16 v) { return __bfloat162float(v); }
template <typename T> static __device__ __forceinline__ T tk_from(float v);
template <> __device__ __forceinline__ float tk_from<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 tk_from<bf16>(float v) { return __float2bfloat16(v); }

static __device__ __forceinline__ float tk_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float tk_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. `red` is 32 floats of shared memory. Fixed order. */
static __device__ __forceinline__ float tk_block_sum(float v, float *red)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = tk_warp_sum(v);
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = lane < n_warps ? red[lane] : 0.0f;
    return tk_warp_sum(s);
}

static inline __host__ __device__ int64_t tk_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

#endif /* TERN_CUDA_COMMON_CUH */
