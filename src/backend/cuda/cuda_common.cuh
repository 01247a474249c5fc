/*
 * cuda_common.cuh — device helpers shared by the kernel files: element
 * loads/stores by run-time dtype, warp and block reductions, launch checks,
 * and tk_launch, the launcher with programmatic dependent launch (PDL).
 * CUDA C++ only (included by *.cu). Depends on cuda_kernels.h, cuda_epi.h.
 */
#ifndef TERN_CUDA_COMMON_CUH
#define TERN_CUDA_COMMON_CUH

#include "backend/cuda/cuda_epi.h"
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

/* out[i] = rmsnorm(x)[i] * w[i] for one row of dim values, by the whole
 * block: thread v sums x[i]^2 over i = v, v + blockDim.x, ... with fma,
 * tk_block_sum, rsqrtf(ss / dim + eps), x * inv * w rounded to TO. The
 * order k_rmsnorm_block / k_add_rmsnorm sum in with 256 threads; red: 32
 * floats of shared memory. */
template <typename T, typename TO>
static __device__ __forceinline__ void tk_rmsnorm_row(const T *xr, TO *orow, int64_t dim,
                                                      const void *w, int wdt, float eps,
                                                      float *red)
{
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = tk_f(xr[i]);
        ss = __fmaf_rn(v, v, ss);
    }
    ss = tk_block_sum(ss, red);
    float inv = rsqrtf(ss / (float)dim + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        orow[i] = tk_from<TO>(tk_f(xr[i]) * inv * tk_ld(w, wdt, i));
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
 * Launched without the attribute (TERN_CUDA_PDL=0, or a kernel in a file
 * that does not use tk_launch) the two instructions are no-ops and the
 * stream orders kernels as usual. Works under stream capture (CUDA >= 12.3):
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

/* Whether launches carry the PDL attribute: on unless TERN_CUDA_PDL=0.
 * Read once per process (a function-local static: thread-safe in C++). */
static inline bool tk_pdl_enabled(void)
{
    static const bool on = [] {
        const char *e = getenv("TERN_CUDA_PDL");
        return !(e && strcmp(e, "0") == 0);
    }();
    return on;
}

/* kernel<<<grid, block, smem, st>>>(args...), with the PDL attribute when
 * enabled. Returns the launch's error (cudaPeekAtLastError semantics are
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
    cfg.numAttrs = tk_pdl_enabled() ? 1 : 0;
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

/* ---- tk_epi: residual add + RMSNorm in a decode GEMV's epilogue ----
 *
 * struct tk_epi (cuda_epi.h) replaces the GEMV's y: each output v
 * (float, bias added) goes into the F32 residual as k_add_rmsnorm adds a
 * BF16 proj, and the last block of the grid to finish normalises the launch's
 * rows into h. The norm reproduces k_add_rmsnorm (cuda_ops.cu) exactly: 256
 * "virtual threads" (TK_EPI_THREADS), virtual thread v summing x[i]^2 over
 * i = v, v + 256, ... with fma, then tk_block_sum's butterflies over 8 warps,
 * rsqrtf(ss / dim + eps), x * inv * w rounded to BF16; a block of any size
 * dividing 256 computes these sums, so the result is bitwise matmul then
 * add_rmsnorm whatever kernel adopts it.
 *
 * How a GEMV kernel adopts it (k_gemv_bf16 in cuda_gemv.cu does, under its
 * EPI template flag):
 *   1. take `struct tk_epi epi` by value (a template flag keeps the plain
 *      kernel unchanged);
 *   2. every thread calls tk_pdl_wait(), and no thread returns early: a warp
 *      with no rows skips its work and still reaches step 4;
 *   3. store each finished output with tk_epi_store(epi, t, row, v) instead
 *      of writing y (tk_warp_rows_store takes an optional &epi and does so),
 *      better with the residual loaded early (tk_epi_load after the PDL
 *      wait, then tk_epi_store(epi, t, row, v, old));
 *   4. end with tk_epi_finish<BLOCK>(epi, n_tok) in every thread of every
 *      block (BLOCK = blockDim.x, a compile-time divisor of 256; n_tok = this
 *      launch's tokens; a 2-D/3-D grid counts all its blocks).
 * On the host: fill the struct with pointers at the launch's first token and
 * count = the backend's tern_cuda.epi_count (cuda_matmul.c's
 * tern_cuda_matmul_add_rmsnorm), one launch at a time on the stream (the
 * counter is reused: launches of 8 tokens each are fine, PDL included,
 * since a kernel touches it only after tk_pdl_wait). */
#define TK_EPI_THREADS 256 /* k_add_rmsnorm's block size: the norm's summation order */
#define TK_EPI_KMAX 16     /* elements per virtual thread kept in registers (dim <= 4096) */

/* res[t, o] (+)= v as the BF16 proj would be added, in F32. The second form
 * takes res[t, o] loaded earlier (tk_epi_load right after tk_pdl_wait, by
 * the lane that will store it): the read's latency then hides behind the
 * main loop instead of adding a memory round trip to every block's end. */
static __device__ __forceinline__ float tk_epi_load(const tk_epi &e, int64_t t, int64_t o)
{
    return e.res[t * e.res_stride + o];
}

static __device__ __forceinline__ void tk_epi_store(const tk_epi &e, int64_t t, int64_t o, float v,
                                                    float old)
{
    e.res[t * e.res_stride + o] = old + __bfloat162float(__float2bfloat16(v));
}

static __device__ __forceinline__ void tk_epi_store(const tk_epi &e, int64_t t, int64_t o, float v)
{
    tk_epi_store(e, t, o, v, tk_epi_load(e, t, o));
}

/* Sum of the 256 virtual threads' partials in sh[0, 256) as tk_block_sum
 * over a 256-thread block sums them; every thread gets it. sh: 264 floats. */
template <int BLOCK>
static __device__ __forceinline__ float tk_epi_sum256(float *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    for (int vw = warp; vw < TK_EPI_THREADS / 32; vw += BLOCK / 32) {
        float s = tk_warp_sum(sh[vw * 32 + lane]);
        if (lane == 0) sh[TK_EPI_THREADS + vw] = s;
    }
    __syncthreads();
    float s = tk_warp_sum(lane < TK_EPI_THREADS / 32 ? sh[TK_EPI_THREADS + lane] : 0.0f);
    __syncthreads(); /* sh is reused by the next row */
    return s;
}

/* This thread's norm weights for tk_epi_norm_row's register path (element
 * tid + v * BLOCK + k * 256 in wv[v][k]). */
template <int BLOCK>
static __device__ __forceinline__ void
tk_epi_norm_w(const void *w, int wdt, int64_t dim,
              float (&wv)[TK_EPI_THREADS / BLOCK][TK_EPI_KMAX])
{
#pragma unroll
    for (int v = 0; v < TK_EPI_THREADS / BLOCK; v++)
#pragma unroll
        for (int k = 0; k < TK_EPI_KMAX; k++) {
            int64_t i = threadIdx.x + v * BLOCK + (int64_t)k * TK_EPI_THREADS;
            wv[v][k] = i < dim ? tk_ld(w, wdt, i) : 0.0f;
        }
}

/* h = rmsnorm(r) * w for one row of dim floats (r written by other blocks:
 * read through L2). Registers first when dim <= TK_EPI_KMAX * 256, with the
 * norm weights already in wv (tk_epi_norm_w). */
template <int BLOCK>
static __device__ __forceinline__ void
tk_epi_norm_row(const float *r, bf16 *h, const void *w, int wdt, float eps, int64_t dim,
                float *sh, const float (&wv)[TK_EPI_THREADS / BLOCK][TK_EPI_KMAX])
{
    static_assert(TK_EPI_THREADS % BLOCK == 0, "the block must divide 256 threads");
    constexpr int V = TK_EPI_THREADS / BLOCK;
    int tid = threadIdx.x;
    if (dim <= (int64_t)TK_EPI_KMAX * TK_EPI_THREADS) {
        float a[V][TK_EPI_KMAX];
#pragma unroll
        for (int v = 0; v < V; v++)
#pragma unroll
            for (int k = 0; k < TK_EPI_KMAX; k++) {
                int64_t i = tid + v * BLOCK + (int64_t)k * TK_EPI_THREADS;
                a[v][k] = i < dim ? __ldcg(r + i) : 0.0f;
            }
#pragma unroll
        for (int v = 0; v < V; v++) {
            float ss = 0.0f;
#pragma unroll
            for (int k = 0; k < TK_EPI_KMAX; k++)
                if (tid + v * BLOCK + (int64_t)k * TK_EPI_THREADS < dim)
                    ss = __fmaf_rn(a[v][k], a[v][k], ss);
            sh[tid + v * BLOCK] = ss;
        }
        float inv = rsqrtf(tk_epi_sum256<BLOCK>(sh) / (float)dim + eps);
#pragma unroll
        for (int v = 0; v < V; v++)
#pragma unroll
            for (int k = 0; k < TK_EPI_KMAX; k++) {
                int64_t i = tid + v * BLOCK + (int64_t)k * TK_EPI_THREADS;
                if (i < dim) h[i] = __float2bfloat16(a[v][k] * inv * wv[v][k]);
            }
        return;
    }
    for (int v = tid; v < TK_EPI_THREADS; v += BLOCK) {
        float ss = 0.0f;
        for (int64_t i = v; i < dim; i += TK_EPI_THREADS) {
            float x = __ldcg(r + i);
            ss = __fmaf_rn(x, x, ss);
        }
        sh[v] = ss;
    }
    float inv = rsqrtf(tk_epi_sum256<BLOCK>(sh) / (float)dim + eps);
    for (int64_t i = tid; i < dim; i += BLOCK)
        h[i] = __float2bfloat16(__ldcg(r + i) * inv * tk_ld(w, wdt, i));
}

/* The end of a kernel with the epilogue: every thread of every block calls
 * it after its last tk_epi_store. Each block publishes its stores and counts
 * itself in; the last one normalises the launch's n_tok rows and resets the
 * counter (so graph replays find it at 0). */
template <int BLOCK>
static __device__ __forceinline__ void tk_epi_finish(const tk_epi &e, int n_tok)
{
    if (!e.norm_w) return;
    __shared__ float sh[TK_EPI_THREADS + 8];
    __shared__ unsigned is_last;
    /* Every block loads the norm weights (8 KB for the 8B's 4096) before it
     * counts itself in, so the last one has them when it learns it is last
     * (they come from DRAM after the weight stream; the count's round trip
     * hides that load). Compiled, not yet measured on a device. */
    float wv[TK_EPI_THREADS / BLOCK][TK_EPI_KMAX];
    if (e.dim <= (int64_t)TK_EPI_KMAX * TK_EPI_THREADS)
        tk_epi_norm_w<BLOCK>(e.norm_w, e.wdt, e.dim, wv);
    /* The block's residual stores, then one release (the barrier makes them
     * thread 0's; fence.acq_rel is cumulative) before the count, and one
     * acquire after it in the last block: cooperative groups' grid-sync
     * pattern (a __threadfence in every thread: 28.1 vs 27.4 us for the 8B
     * o/down GEMVs under ncu; either way the epilogue costs ~7 us more than
     * the plain GEMV's 11 / 30 us, docs/perf/cuda-model.md run 14). */
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned n_blocks = gridDim.x * gridDim.y * gridDim.z;
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        is_last = atomicAdd(e.count, 1u) == n_blocks - 1;
        if (is_last) asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
    if (!is_last) return;
    for (int t = 0; t < n_tok; t++)
        tk_epi_norm_row<BLOCK>(e.res + t * e.res_stride, (bf16 *)e.h + t * e.h_stride, e.norm_w,
                               e.wdt, e.eps, e.dim, sh, wv);
    if (threadIdx.x == 0) *e.count = 0;
}

/* The end of a warp-per-rows GEMV: acc[r][t] (output row row0 + r, token t)
 * summed over the warp's lanes by tk_warp_sum, + bias[row], stored by lane
 * (r * NT + t) % 32 to y[t * ys + row0 + r] (rows >= out are skipped), or
 * through tk_epi_store when epi is given (y unused). */
template <int R, int NT>
static __device__ __forceinline__ void tk_warp_rows_store(float (&acc)[R][NT], int lane,
                                                           int64_t row0, int64_t out,
                                                           const void *bias, int bdt, void *y,
                                                           int ydt, int64_t ys,
                                                           const tk_epi *epi = nullptr)
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
                if (epi) tk_epi_store(*epi, t, row0 + r, v);
                else tk_st(y, ydt, t * ys + row0 + r, v);
            }
}

static inline __host__ __device__ int64_t tk_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

#endif /* TERN_CUDA_COMMON_CUH */
