/*
 * cuda_common.cuh — device helpers shared by the kernel files: element
 * loads/stores by run-time dtype, warp and block reductions, launch checks,
 * and tk_launch, the launcher with programmatic dependent launch (PDL).
 * CUDA C++ only (included by *.cu). Depends on cuda_kernels.h.
 */
#ifndef TERN_CUDA_COMMON_CUH
#define TERN_CUDA_COMMON_CUH

#include "backend/cuda/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utility>

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

/* The shared-memory address of p, for PTX operands. */
static __device__ __forceinline__ uint32_t tk_smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

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

/* ---- programmatic dependent launch (Hopper) ----
 *
 * A kernel launched by tk_launch may start while the kernel before it on
 * the stream is still running (once every block of that one has called
 * tk_pdl_launch or exited), so its blocks are resident and its prologue done
 * when the previous kernel ends. The contract every kernel launched this way
 * keeps:
 *   - before tk_pdl_wait it touches only data no earlier kernel writes
 *     (weights, norms, rope tables): no activation, cache or batch array
 *     read, and no write at all;
 *   - tk_pdl_wait (griddepcontrol.wait) returns once the previous kernel has
 *     completed and its writes are visible (so, transitively, all earlier
 *     work);
 *   - tk_pdl_launch (griddepcontrol.launch_dependents) comes after the wait,
 *     never before: triggering early would let the whole graph cascade into
 *     blocks that sit waiting.
 * Launched without the attribute (a kernel in a file that does not use
 * tk_launch) the two instructions are no-ops and the stream orders kernels
 * as usual. Works under stream capture (CUDA >= 12.3):
 * the graph keeps programmatic edges. */
static __device__ __forceinline__ void tk_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void tk_pdl_launch(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* kernel<<<grid, block, smem, st>>>(args...), with the PDL attribute.
 * Returns the launch's error (cudaPeekAtLastError semantics are
 * the caller's: this returns cudaLaunchKernelEx's status). */
template <typename... KArgs, typename... Args>
static cudaError_t tk_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t st, Args &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

/* A 16-byte load of data read once (weights): through the non-coherent
 * path, not kept in L1. */
static __device__ __forceinline__ uint4 tk_ld_stream(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* The end of a warp-per-rows GEMV: acc[r][t] (output row row0 + r, token t)
 * summed over the warp's lanes by tk_warp_sum, + bias[row], stored by lane
 * (r * NT + t) % 32 to y[t * ys + row0 + r] (rows >= out are skipped). */
template <int R, int NT>
static __device__ __forceinline__ void tk_warp_rows_store(float (&acc)[R][NT], int lane,
                                                           int64_t row0, int64_t out,
                                                           const void *bias, int bdt, void *y,
                                                           int ydt, int64_t ys)
{
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = tk_warp_sum(acc[r][t]);
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (lane == (r * NT + t) % 32 && row0 + r < out) {
                float v = acc[r][t];
                if (bias) v += tk_ld(bias, bdt, row0 + r);
                tk_st(y, ydt, t * ys + row0 + r, v);
            }
}

static inline __host__ __device__ int64_t tk_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

#endif /* TERN_CUDA_COMMON_CUH */
