/*
 * cuda_ops.cu — the row and elementwise kernels: embedding gather, RMSNorm
 * (plain, fused residual add, per head), rotary embedding, KV store, SiLU
 * gate, add, argmax, bias add, and the fused attention prologue (q/k head
 * norm + rope + KV store; its per-head arithmetic is cuda_rope.cuh's). Every
 * kernel is launched with tk_launch (PDL: it waits for the previous kernel
 * before touching anything). Kernels that touch activations are templated
 * on the activation type (float or bf16) and accumulate in float; every
 * reduction has a fixed order, independent of the number of rows, so these
 * ops are batch-invariant.
 * Depends on cuda_common.cuh, cuda_rope.cuh.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_rope.cuh"

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

/* ------------------------------------------------------------ get_rows */

static __global__ void k_get_rows(const void *table, int tdt, int64_t n_table, int64_t width,
                                  const int32_t *idx, void *out, int odt)
{
    tk_pdl_wait();
    tk_pdl_launch();
    int64_t t = blockIdx.x;
    int64_t r = idx[t];
    bool ok = r >= 0 && r < n_table;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
        float v = ok ? tk_ld(table, tdt, r * width + c) : 0.0f;
        tk_st(out, odt, t * width + c, v);
    }
}

extern "C" cudaError_t tk_get_rows(cudaStream_t st, const void *table, int tdt, int64_t n_table,
                                   int64_t width, const int32_t *idx, int64_t n, void *out, int odt)
{
    cudaError_t e = cudaSuccess;
    if (n <= 0) return cudaSuccess;
    e = tk_launch(k_get_rows, (unsigned)n, 256, 0, st, table, tdt, n_table, width, idx, out, odt);
    return e;
}

/* ------------------------------------------------------------ rmsnorm */

/* One warp per (row, group): for small dims (per-head norms). */
template <typename T, typename TO>
static __global__ void k_rmsnorm_warp(const T *x, int64_t xs, TO *out, int64_t os, int64_t col0,
                                      int64_t n_rows, int n_groups, int64_t dim, const void *w,
                                      int wdt, float eps)
{
    tk_pdl_wait();
    tk_pdl_launch();
    int64_t gid = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (gid >= n_rows * n_groups) return;
    int64_t row = gid / n_groups, g = gid % n_groups;
    const T *xr = x + row * xs + col0 + g * dim;
    TO *orow = out + row * os + col0 + g * dim;
    float ss = 0.0f;
    for (int64_t i = lane; i < dim; i += 32) {
        float v = tk_f(xr[i]);
        ss += v * v;
    }
    ss = tk_warp_sum(ss);
    float inv = rsqrtf(ss / (float)dim + eps);
    for (int64_t i = lane; i < dim; i += 32)
        orow[i] = tk_from<TO>(tk_f(xr[i]) * inv * tk_ld(w, wdt, i));
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

/* The register path of the block norms: this thread's norm weights
 * (element threadIdx.x + k blockDim.x, k < PER; 0 past dim), loaded before
 * the PDL wait since no kernel writes them; then, after the block sum,
 * out[i] = a[k] * inv * w[k] for the same elements. */
template <int PER, int N>
static __device__ __forceinline__ void norm_w_regs(const void *w, int wdt, int64_t dim, float (&wv)[N])
{
#pragma unroll
    for (int k = 0; k < PER; k++) {
        int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        wv[k] = i < dim ? tk_ld(w, wdt, i) : 0.0f;
    }
}

template <int PER, int N, typename TO>
static __device__ __forceinline__ void norm_store_regs(TO *orow, const float (&a)[N], float inv,
                                                       const float (&wv)[N], int64_t dim)
{
#pragma unroll
    for (int k = 0; k < PER; k++) {
        int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        if (i < dim) orow[i] = tk_from<TO>(a[k] * inv * wv[k]);
    }
}

/* One block per (row, group): for hidden-size norms. PER > 0 (dim <= PER *
 * blockDim.x): each thread loads its norm weights (before the PDL wait) and
 * its elements into registers first, so all loads are in flight together,
 * and writes from them (out may alias x: every read precedes the block sum);
 * the sums are the loop's (PER = 0), in the same order. */
template <typename T, typename TO, int PER>
static __global__ void k_rmsnorm_block(const T *x, int64_t xs, TO *out, int64_t os, int64_t col0,
                                       int n_groups, int64_t dim, const void *w, int wdt, float eps)
{
    __shared__ float red[32];
    int64_t row = blockIdx.x / n_groups, g = blockIdx.x % n_groups;
    const T *xr = x + row * xs + col0 + g * dim;
    TO *orow = out + row * os + col0 + g * dim;
    float ss = 0.0f;
    if (PER > 0) {
        float a[PER > 0 ? PER : 1], wv[PER > 0 ? PER : 1];
        norm_w_regs<PER>(w, wdt, dim, wv);
        tk_pdl_wait();
        tk_pdl_launch();
#pragma unroll
        for (int k = 0; k < PER; k++) {
            int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            a[k] = i < dim ? tk_f(xr[i]) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < PER; k++)
            if (threadIdx.x + (int64_t)k * blockDim.x < dim) ss = __fmaf_rn(a[k], a[k], ss);
        ss = tk_block_sum(ss, red);
        norm_store_regs<PER>(orow, a, rsqrtf(ss / (float)dim + eps), wv, dim);
        return;
    }
    tk_pdl_wait();
    tk_pdl_launch();
    tk_rmsnorm_row(xr, orow, dim, w, wdt, eps, red);
}

template <typename T, typename TO>
static cudaError_t rmsnorm_t(cudaStream_t st, const void *x, int64_t xs, void *out, int64_t os,
                             int64_t col0, int64_t n_rows, int n_groups, int64_t dim, const void *w,
                             int wdt, float eps)
{
    cudaError_t e = cudaSuccess;
    int64_t n = n_rows * n_groups;
    if (n <= 0) return cudaSuccess;
    if (dim <= 512) {
        e = tk_launch(k_rmsnorm_warp<T, TO>, (unsigned)tk_cdiv(n, 8), 256, 0, st, (const T *)x, xs,
                      (TO *)out, os, col0, n_rows, n_groups, dim, w, wdt, eps);
    } else if (dim <= 16 * 256) {
        e = tk_launch(k_rmsnorm_block<T, TO, 16>, (unsigned)n, 256, 0, st, (const T *)x, xs,
                      (TO *)out, os, col0, n_groups, dim, w, wdt, eps);
    } else if (dim <= 32 * 256) {
        e = tk_launch(k_rmsnorm_block<T, TO, 32>, (unsigned)n, 256, 0, st, (const T *)x, xs,
                      (TO *)out, os, col0, n_groups, dim, w, wdt, eps);
    } else {
        e = tk_launch(k_rmsnorm_block<T, TO, 0>, (unsigned)n, 256, 0, st, (const T *)x, xs,
                      (TO *)out, os, col0, n_groups, dim, w, wdt, eps);
    }
    return e;
}

extern "C" cudaError_t tk_rmsnorm(cudaStream_t st, const void *x, int64_t x_stride, void *out,
                                  int64_t out_stride, int64_t col0, int adt, int odt,
                                  int64_t n_rows, int n_groups, int64_t dim, const void *w, int wdt,
                                  float eps)
{
    if (adt == TK_BF16)
        return rmsnorm_t<bf16, bf16>(st, x, x_stride, out, out_stride, col0, n_rows, n_groups, dim,
                                     w, wdt, eps);
    if (odt == TK_BF16)
        return rmsnorm_t<float, bf16>(st, x, x_stride, out, out_stride, col0, n_rows, n_groups, dim,
                                      w, wdt, eps);
    return rmsnorm_t<float, float>(st, x, x_stride, out, out_stride, col0, n_rows, n_groups, dim, w,
                                   wdt, eps);
}

/* residual (TR) += x (T), then the norm of the stored residual into out (T).
 * PER > 0 (dim <= PER * blockDim.x): each thread first loads all its
 * elements and norm weights into registers, so the loads are in flight
 * together (the plain loop has to reload after each residual store, which
 * may alias x: one memory round trip per element of a 256-thread row); the
 * sums are the same, in the same order, as the loop's (PER = 0). The norm
 * weights are loaded before the PDL wait. */
template <typename TR, typename T, int PER>
static __global__ void k_add_rmsnorm(TR *res, const T *x, T *out, int64_t dim, const void *w,
                                     int wdt, float eps)
{
    __shared__ float red[32];
    int64_t row = blockIdx.x;
    TR *rr = res + row * dim;
    const T *xr = x + row * dim;
    T *orow = out + row * dim;
    float ss = 0.0f;
    if (PER > 0) {
        float a[PER > 0 ? PER : 1], b[PER > 0 ? PER : 1], wv[PER > 0 ? PER : 1];
        norm_w_regs<PER>(w, wdt, dim, wv);
        tk_pdl_wait();
        tk_pdl_launch();
#pragma unroll
        for (int k = 0; k < PER; k++) {
            int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            a[k] = i < dim ? tk_f(rr[i]) : 0.0f;
            b[k] = i < dim ? tk_f(xr[i]) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < PER; k++) {
            int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            if (i < dim) {
                TR sum = tk_from<TR>(a[k] + b[k]);
                rr[i] = sum;
                a[k] = tk_f(sum);
                ss = __fmaf_rn(a[k], a[k], ss);
            }
        }
        ss = tk_block_sum(ss, red);
        norm_store_regs<PER>(orow, a, rsqrtf(ss / (float)dim + eps), wv, dim);
        return;
    }
    tk_pdl_wait();
    tk_pdl_launch();
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        TR s = tk_from<TR>(tk_f(rr[i]) + tk_f(xr[i]));
        rr[i] = s;
        float v = tk_f(s);
        ss = __fmaf_rn(v, v, ss);
    }
    ss = tk_block_sum(ss, red);
    float inv = rsqrtf(ss / (float)dim + eps);
    /* Each thread rereads only the elements it wrote itself. */
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        orow[i] = tk_from<T>(tk_f(rr[i]) * inv * tk_ld(w, wdt, i));
}

template <typename TR, typename T>
static cudaError_t add_rmsnorm_t(cudaStream_t st, void *res, const void *x, void *out,
                                 int64_t n_rows, int64_t dim, const void *w, int wdt, float eps)
{
    unsigned g = (unsigned)n_rows;
    if (dim <= 16 * 256)
        return tk_launch(k_add_rmsnorm<TR, T, 16>, g, 256, 0, st, (TR *)res, (const T *)x,
                         (T *)out, dim, w, wdt, eps);
    if (dim <= 32 * 256)
        return tk_launch(k_add_rmsnorm<TR, T, 32>, g, 256, 0, st, (TR *)res, (const T *)x,
                         (T *)out, dim, w, wdt, eps);
    return tk_launch(k_add_rmsnorm<TR, T, 0>, g, 256, 0, st, (TR *)res, (const T *)x, (T *)out,
                     dim, w, wdt, eps);
}

extern "C" cudaError_t tk_add_rmsnorm(cudaStream_t st, void *res, int rdt, const void *x, void *out,
                                      int adt, int64_t n_rows, int64_t dim, const void *w, int wdt,
                                      float eps)
{
    if (n_rows <= 0) return cudaSuccess;
    if (rdt == TK_F32 && adt == TK_BF16)
        return add_rmsnorm_t<float, bf16>(st, res, x, out, n_rows, dim, w, wdt, eps);
    if (adt == TK_BF16)
        return add_rmsnorm_t<bf16, bf16>(st, res, x, out, n_rows, dim, w, wdt, eps);
    return add_rmsnorm_t<float, float>(st, res, x, out, n_rows, dim, w, wdt, eps);
}

/* ------------------------------------------------------------ rope */

/* A rope pair (x1, x2) rotated by angle p * inv_freq, each rounded to T
 * (cuda_rope.cuh: the rope kernel and qk_rope_store share this arithmetic). */
template <typename T>
static __device__ __forceinline__ void rope_rot(float &x1, float &x2, float p, float inv_freq,
                                                float mscale)
{
    float c, s;
    tk_rope_cs(p, inv_freq, mscale, c, s);
    tk_rope_pair<T>(x1, x2, c, s);
}

/* One thread per (token, head, pair). */
template <typename T>
static __global__ void k_rope(T *x, int64_t stride, int64_t col0, int64_t n_tok, int n_heads,
                              int head_dim, int rotary_dim, int interleaved, float mscale,
                              const float *inv_freq, const int32_t *pos)
{
    tk_pdl_wait();
    tk_pdl_launch();
    int half = rotary_dim / 2;
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_tok * n_heads * half) return;
    int i = (int)(id % half);
    int64_t th = id / half;
    int h = (int)(th % n_heads);
    int64_t t = th / n_heads;
    T *hp = x + t * stride + col0 + (int64_t)h * head_dim;
    int i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
    float x1 = tk_f(hp[i1]), x2 = tk_f(hp[i2]);
    rope_rot<T>(x1, x2, (float)pos[t], inv_freq[i], mscale);
    hp[i1] = tk_from<T>(x1);
    hp[i2] = tk_from<T>(x2);
}

extern "C" cudaError_t tk_rope(cudaStream_t st, void *x, int adt, int64_t stride, int64_t col0,
                               int64_t n_tok, int n_heads, int head_dim, int rotary_dim,
                               int interleaved, float mscale, const float *inv_freq,
                               const int32_t *positions)
{
    cudaError_t e = cudaSuccess;
    int64_t n = n_tok * n_heads * (rotary_dim / 2);
    if (n <= 0) return cudaSuccess;
    unsigned blocks = (unsigned)tk_cdiv(n, 256);
    if (adt == TK_BF16)
        e = tk_launch(k_rope<bf16>, blocks, 256, 0, st, (bf16 *)x, stride, col0, n_tok, n_heads,
                      head_dim, rotary_dim, interleaved, mscale, inv_freq, positions);
    else
        e = tk_launch(k_rope<float>, blocks, 256, 0, st, (float *)x, stride, col0, n_tok, n_heads,
                      head_dim, rotary_dim, interleaved, mscale, inv_freq, positions);
    return e;
}

/* ------------------------------------------------------------ kv_store */

/* Copies in units of V (uint4 when rows allow 16-byte access, else the element). */
template <typename V>
static __global__ void k_kv_store(const V *qkv, int64_t stride, int64_t k_col, int64_t v_col,
                                  int64_t n_tok, const int32_t *slots, V *kc, V *vc, int64_t kv_dim,
                                  int64_t n_slots)
{
    tk_pdl_wait();
    tk_pdl_launch();
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_tok * kv_dim) return;
    int64_t t = id / kv_dim, e = id % kv_dim;
    int64_t slot = slots[t];
    if (slot < 0 || slot >= n_slots) return;
    kc[slot * kv_dim + e] = qkv[t * stride + k_col + e];
    vc[slot * kv_dim + e] = qkv[t * stride + v_col + e];
}

extern "C" cudaError_t tk_kv_store(cudaStream_t st, const void *qkv, int adt, int64_t stride,
                                   int64_t k_col, int64_t v_col, int64_t n_tok,
                                   const int32_t *slots, void *k_cache, void *v_cache,
                                   int64_t kv_dim, int64_t n_slots)
{
    cudaError_t e = cudaSuccess;
    if (n_tok <= 0) return cudaSuccess;
    int64_t es = adt == TK_F32 ? 4 : 2;
    int64_t per = 16 / es; /* elements per uint4 */
    bool vec = stride % per == 0 && k_col % per == 0 && v_col % per == 0 && kv_dim % per == 0 &&
               ((uintptr_t)qkv | (uintptr_t)k_cache | (uintptr_t)v_cache) % 16 == 0;
    if (vec) {
        int64_t n = n_tok * (kv_dim / per);
        e = tk_launch(k_kv_store<uint4>, (unsigned)tk_cdiv(n, 256), 256, 0, st, (const uint4 *)qkv,
                      stride / per, k_col / per, v_col / per, n_tok, slots, (uint4 *)k_cache,
                      (uint4 *)v_cache, kv_dim / per, n_slots);
    } else if (es == 2) {
        int64_t n = n_tok * kv_dim;
        e = tk_launch(k_kv_store<uint16_t>, (unsigned)tk_cdiv(n, 256), 256, 0, st,
                      (const uint16_t *)qkv, stride, k_col, v_col, n_tok, slots,
                      (uint16_t *)k_cache, (uint16_t *)v_cache, kv_dim, n_slots);
    } else {
        int64_t n = n_tok * kv_dim;
        e = tk_launch(k_kv_store<float>, (unsigned)tk_cdiv(n, 256), 256, 0, st, (const float *)qkv,
                      stride, k_col, v_col, n_tok, slots, (float *)k_cache, (float *)v_cache,
                      kv_dim, n_slots);
    }
    return e;
}

/* ------------------------------------------------------------ qk_rope_store */

#define QRS_WARPS 8
#define QRS_MAX_D 1024

/* One warp per (token, head) over the q, k and v heads of the qkv row. A q
 * or k head goes through the warp's shared row: per-head RMSNorm (the sums
 * in k_rmsnorm_warp's order, rounded to T as it stores), then the rotary
 * pairs (k_rope's arithmetic, rounded to T), then back to qkv and, for a k
 * head, to its cache row. A v head is copied to its cache row. */
template <typename T>
static __global__ void __launch_bounds__(QRS_WARPS * 32)
    k_qk_rope_store(T *qkv, int64_t stride, int64_t n_tok, int n_heads, int n_kv, int hd,
                    const void *q_norm, const void *k_norm, int wdt, float eps, int rot,
                    int interleaved, float mscale, const float *inv_freq, const int32_t *pos,
                    const int32_t *slots, T *kc, T *vc, int64_t n_slots)
{
    __shared__ float sh[QRS_WARPS][QRS_MAX_D];
    tk_pdl_wait();
    tk_pdl_launch();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int per_tok = n_heads + 2 * n_kv;
    int64_t gid = (int64_t)blockIdx.x * QRS_WARPS + warp;
    if (gid >= n_tok * per_tok) return;
    int64_t t = gid / per_tok;
    int j = (int)(gid % per_tok);
    T *hp = qkv + t * stride + (int64_t)j * hd;
    int64_t slot = slots[t], kv_dim = (int64_t)n_kv * hd;
    bool store = slot >= 0 && slot < n_slots;
    if (j >= n_heads + n_kv) { /* a v head */
        if (!store) return;
        T *dst = vc + slot * kv_dim + (int64_t)(j - n_heads - n_kv) * hd;
        for (int i = lane; i < hd; i += 32) dst[i] = hp[i];
        return;
    }
    float *x = sh[warp];
    for (int i = lane; i < hd; i += 32) x[i] = tk_f(hp[i]);
    if (q_norm) {
        const void *w = j < n_heads ? q_norm : k_norm;
        float inv = tk_head_inv_rms(x, hd, eps, lane);
        for (int i = lane; i < hd; i += 32) x[i] = tk_head_norm_val<T>(x[i], inv, tk_ld(w, wdt, i));
    }
    __syncwarp();
    int half = rot / 2;
    for (int i = lane; i < half; i += 32) {
        int i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
        rope_rot<T>(x[i1], x[i2], (float)pos[t], inv_freq[i], mscale);
    }
    __syncwarp();
    bool to_cache = j >= n_heads && store;
    T *dst = to_cache ? kc + slot * kv_dim + (int64_t)(j - n_heads) * hd : hp;
    for (int i = lane; i < hd; i += 32) {
        T v = tk_from<T>(x[i]);
        hp[i] = v;
        if (to_cache) dst[i] = v;
    }
}

extern "C" int tk_qk_rope_store_fits(int head_dim, int rotary_dim)
{
    return head_dim > 0 && head_dim <= QRS_MAX_D && rotary_dim > 0 && rotary_dim % 2 == 0 &&
           rotary_dim <= head_dim;
}

extern "C" cudaError_t tk_qk_rope_store(cudaStream_t st, void *qkv, int adt, int64_t stride,
                                        int64_t n_tok, int n_heads, int n_kv_heads, int head_dim,
                                        const void *q_norm, const void *k_norm, int wdt, float eps,
                                        int rotary_dim, int interleaved, float mscale,
                                        const float *inv_freq, const int32_t *positions,
                                        const int32_t *slots, void *k_cache, void *v_cache,
                                        int64_t n_slots)
{
    if (n_tok <= 0) return cudaSuccess;
    if (!tk_qk_rope_store_fits(head_dim, rotary_dim)) return cudaErrorInvalidValue;
    int64_t warps = n_tok * (n_heads + 2 * n_kv_heads);
    unsigned blocks = (unsigned)tk_cdiv(warps, QRS_WARPS);
    if (adt == TK_BF16)
        return tk_launch(k_qk_rope_store<bf16>, blocks, QRS_WARPS * 32, 0, st, (bf16 *)qkv, stride,
                         n_tok, n_heads, n_kv_heads, head_dim, q_norm, k_norm, wdt, eps,
                         rotary_dim, interleaved, mscale, inv_freq, positions, slots,
                         (bf16 *)k_cache, (bf16 *)v_cache, n_slots);
    return tk_launch(k_qk_rope_store<float>, blocks, QRS_WARPS * 32, 0, st, (float *)qkv, stride,
                     n_tok, n_heads, n_kv_heads, head_dim, q_norm, k_norm, wdt, eps, rotary_dim,
                     interleaved, mscale, inv_freq, positions, slots, (float *)k_cache,
                     (float *)v_cache, n_slots);
}

/* ------------------------------------------------------------ silu_mul, add */

template <typename T>
static __global__ void k_silu_mul(const T *gu, T *out, int64_t n_tok, int64_t ff)
{
    tk_pdl_wait();
    tk_pdl_launch();
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_tok * ff) return;
    int64_t t = id / ff, i = id % ff;
    float g = tk_f(gu[t * 2 * ff + i]), u = tk_f(gu[t * 2 * ff + ff + i]);
    out[id] = tk_from<T>(g / (1.0f + expf(-g)) * u);
}

extern "C" cudaError_t tk_silu_mul(cudaStream_t st, const void *gate_up, void *out, int adt,
                                   int64_t n_tok, int64_t ff)
{
    cudaError_t e = cudaSuccess;
    int64_t n = n_tok * ff;
    if (n <= 0) return cudaSuccess;
    unsigned blocks = (unsigned)tk_cdiv(n, 256);
    if (adt == TK_BF16)
        e = tk_launch(k_silu_mul<bf16>, blocks, 256, 0, st, (const bf16 *)gate_up, (bf16 *)out,
                      n_tok, ff);
    else
        e = tk_launch(k_silu_mul<float>, blocks, 256, 0, st, (const float *)gate_up, (float *)out,
                      n_tok, ff);
    return e;
}

template <typename T, typename TB>
static __global__ void k_add(const T *a, const TB *b, T *out, int64_t n)
{
    tk_pdl_wait();
    tk_pdl_launch();
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id < n) out[id] = tk_from<T>(tk_f(a[id]) + tk_f(b[id]));
}

extern "C" cudaError_t tk_add(cudaStream_t st, const void *a, const void *b, int bdt, void *out,
                              int adt, int64_t n)
{
    cudaError_t e = cudaSuccess;
    if (n <= 0) return cudaSuccess;
    unsigned blocks = (unsigned)tk_cdiv(n, 256);
    if (adt == TK_BF16)
        e = tk_launch(k_add<bf16, bf16>, blocks, 256, 0, st, (const bf16 *)a, (const bf16 *)b,
                      (bf16 *)out, n);
    else if (bdt == TK_BF16)
        e = tk_launch(k_add<float, bf16>, blocks, 256, 0, st, (const float *)a, (const bf16 *)b,
                      (float *)out, n);
    else
        e = tk_launch(k_add<float, float>, blocks, 256, 0, st, (const float *)a, (const float *)b,
                      (float *)out, n);
    return e;
}

/* ------------------------------------------------------------ argmax
 *
 * One cluster of AM_CLUSTER blocks per row (thread block clusters, sm_90):
 * block r of the cluster scans every AM_CLUSTER-th stretch of the row with
 * 16-byte loads, reduces to one (value, index) in shared memory, and block 0
 * reduces the cluster's through distributed shared memory. (value, index)
 * pairs are totally ordered (larger value, then smaller index; NaN never
 * wins), so the result is the first index of the maximum whatever the
 * reduction order; an all-NaN row gives 0. No workspace: graph-safe. */

#define AM_CLUSTER 8
#define AM_THREADS 1024
#define AM_VEC 4 /* float4 loads in flight per thread */

static __device__ __forceinline__ void better(float &bv, int64_t &bi, float v, int64_t i)
{
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

/* This thread's best of the row's elements it scans (the cluster's threads
 * take float4 c = t, t + nt, ... when the row is 16-byte aligned). */
static __device__ __forceinline__ void argmax_scan(const float *row, int64_t vocab, bool vec,
                                                   int64_t t, int64_t nt, float &bv, int64_t &bi)
{
    if (!vec) {
        for (int64_t i = t; i < vocab; i += nt) better(bv, bi, row[i], i);
        return;
    }
    const float4 *r4 = (const float4 *)row;
    int64_t n4 = vocab / 4;
    for (int64_t c = t; c < n4; c += AM_VEC * nt) {
        float4 v[AM_VEC];
#pragma unroll
        for (int k = 0; k < AM_VEC; k++)
            if (c + k * nt < n4) v[k] = r4[c + k * nt];
#pragma unroll
        for (int k = 0; k < AM_VEC; k++)
            if (c + k * nt < n4) {
                int64_t i = (c + k * nt) * 4;
                better(bv, bi, v[k].x, i);
                better(bv, bi, v[k].y, i + 1);
                better(bv, bi, v[k].z, i + 2);
                better(bv, bi, v[k].w, i + 3);
            }
    }
}

static __global__ void __cluster_dims__(AM_CLUSTER, 1, 1) __launch_bounds__(AM_THREADS)
    k_argmax(const float *logits, int64_t vocab, int32_t *out)
{
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    tk_pdl_wait();
    tk_pdl_launch();
    cg::cluster_group cl = cg::this_cluster();
    int rank = (int)cl.block_rank();
    const float *row = logits + (int64_t)blockIdx.y * vocab;
    float bv = -INFINITY;
    int64_t bi = vocab; /* "none yet": loses every tie */
    bool vec = vocab % 4 == 0 && (uintptr_t)logits % 16 == 0;
    argmax_scan(row, vocab, vec, (int64_t)rank * blockDim.x + threadIdx.x,
                (int64_t)AM_CLUSTER * blockDim.x, bv, bi);
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, bv, o);
        int64_t j = __shfl_xor_sync(0xffffffffu, bi, o);
        better(bv, bi, v, j);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) better(bv, bi, sv[w], si[w]);
        sv[0] = bv;
        si[0] = bi;
    }
    cl.sync(); /* every block's (sv[0], si[0]) is written */
    if (rank == 0 && threadIdx.x == 0) {
        bv = -INFINITY;
        bi = vocab;
        for (int r = 0; r < AM_CLUSTER; r++)
            better(bv, bi, *cl.map_shared_rank(&sv[0], r), *cl.map_shared_rank(&si[0], r));
        out[blockIdx.y] = (int32_t)(bi < vocab ? bi : 0); /* all NaN: 0 */
    }
    cl.sync(); /* the other blocks' shared memory lives until block 0 has read it */
}

extern "C" cudaError_t tk_argmax(cudaStream_t st, const float *logits, int64_t n_rows,
                                 int64_t vocab, int32_t *out)
{
    cudaError_t e = cudaSuccess;
    for (int64_t r = 0; r < n_rows && e == cudaSuccess; r += 65535) { /* grid.y <= 65535 */
        int64_t n = n_rows - r < 65535 ? n_rows - r : 65535;
        e = tk_launch(k_argmax, dim3(AM_CLUSTER, (unsigned)n), AM_THREADS, 0, st,
                      logits + r * vocab, vocab, out + r);
    }
    return e;
}

/* ------------------------------------------------------------ bias add */

static __global__ void k_bias_add(void *y, int ydt, int64_t ys, const void *bias, int bdt,
                                  int64_t n_out)
{
    tk_pdl_wait();
    tk_pdl_launch();
    int64_t t = blockIdx.y;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < n_out;
         c += (int64_t)gridDim.x * blockDim.x)
        tk_st(y, ydt, t * ys + c, tk_ld(y, ydt, t * ys + c) + tk_ld(bias, bdt, c));
}

extern "C" cudaError_t tk_bias_add(cudaStream_t st, void *y, int ydt, int64_t y_stride,
                                   const void *bias, int bdt, int64_t n_tok, int64_t n_out)
{
    cudaError_t e = cudaSuccess;
    if (n_tok <= 0 || n_out <= 0) return cudaSuccess;
    dim3 grid((unsigned)(tk_cdiv(n_out, 256) < 64 ? tk_cdiv(n_out, 256) : 64), (unsigned)n_tok);
    e = tk_launch(k_bias_add, grid, 256, 0, st, y, ydt, y_stride, bias, bdt, n_out);
    return e;
}
