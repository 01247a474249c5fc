/*
 * cuda_attn_decode.cu — attention for sequences with one query token
 * (flash-decoding) over the paged KV cache.
 *
 * Pass 1, k_attn_decode: one block per (split, kv head, sequence). The block
 * takes the G = n_heads / n_kv_heads query heads that share the kv head (so
 * each K/V row is read once for all of them) and the KV positions
 * [split * split_len, (split + 1) * split_len) of its sequence, clipped to
 * the causal range and the sliding window. Its 4 warps take 4 tokens each in
 * turn; lane l holds dims [l * D/32, (l + 1) * D/32) of q, k, v, so a K or V
 * row is one coalesced warp load. Scores live in log2 units (scale * log2 e
 * folded into q) for exp2f. The warps' online-softmax states are merged in
 * shared memory and the block writes (m, l, unnormalised acc) per head.
 *
 * Pass 2, k_attn_combine: per (head, sequence) merges the splits in index
 * order (fixed order: the result depends only on the sequence and on
 * split_len, which the glue keeps independent of the batch in deterministic
 * mode) and writes the BF16 output row.
 *
 * Workspace layout (floats): m, l: [S, H, n_splits]; acc: [S, H, n_splits, D].
 * Depends on cuda_common.cuh.
 */
#include "backend/cuda/cuda_common.cuh"

#define DEC_WARPS 4
#define DEC_UNROLL 4
#define LOG2E 1.4426950408889634f

/* Loads EPL consecutive bf16 as floats (EPL = 2, 4, 8). */
template <int EPL> static __device__ __forceinline__ void ld_row(const bf16 *p, float *f)
{
    if (EPL == 8) {
        uint4 u = *(const uint4 *)p;
        uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __uint_as_float(w[i] << 16);
            f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    } else if (EPL == 4) {
        uint2 u = *(const uint2 *)p;
        f[0] = __uint_as_float(u.x << 16);
        f[1] = __uint_as_float(u.x & 0xffff0000u);
        f[2] = __uint_as_float(u.y << 16);
        f[3] = __uint_as_float(u.y & 0xffff0000u);
    } else {
        uint32_t u = *(const uint32_t *)p;
        f[0] = __uint_as_float(u << 16);
        f[1] = __uint_as_float(u & 0xffff0000u);
    }
}


template <int D, int GM>
static __global__ void __launch_bounds__(DEC_WARPS * 32)
    k_attn_decode(struct tk_attn_args a, int split_len, int n_splits, float *ws)
{
    constexpr int EPL = D / 32;
    __shared__ float s_acc[DEC_WARPS][GM][D];
    __shared__ float s_m[DEC_WARPS][GM], s_l[DEC_WARPS][GM];
    tk_pdl_wait(); /* PDL (cuda_common.cuh): nothing is touched before this */
    tk_pdl_launch();
    int s = blockIdx.z, g = blockIdx.y, sp = blockIdx.x;
    int qs = a.query_start[s];
    if (a.query_start[s + 1] - qs != 1) return;
    int L = a.seq_lens[s];
    if ((int64_t)sp * split_len >= L) return; /* the combine reads only live splits */
    int G = a.n_heads / a.n_kv_heads;
    int pos = a.positions[qs];
    int hi = min(pos + 1, L);
    int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
    int k0 = max(lo, sp * split_len), k1 = min(hi, (sp + 1) * split_len);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    float qf[GM][EPL];
    float qscale = a.softcap > 0.0f ? a.scale : a.scale * LOG2E;
#pragma unroll
    for (int h = 0; h < GM; h++) {
        int hh = h < G ? h : 0;
        const bf16 *qp = (const bf16 *)a.q + (int64_t)qs * a.q_stride +
                         (int64_t)(g * G + hh) * D + lane * EPL;
        ld_row<EPL>(qp, qf[h]);
#pragma unroll
        for (int e = 0; e < EPL; e++) qf[h][e] *= qscale;
    }
    float m[GM], l[GM], acc[GM][EPL];
#pragma unroll
    for (int h = 0; h < GM; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[h][e] = 0.0f;
    }
    const bf16 *kc = (const bf16 *)a.k_cache, *vc = (const bf16 *)a.v_cache;
    const int32_t *bt = a.block_tables + (int64_t)s * a.max_blocks_per_seq;
    for (int j0 = k0 + warp * DEC_UNROLL; j0 < k1; j0 += DEC_WARPS * DEC_UNROLL) {
        float kf[DEC_UNROLL][EPL], vf[DEC_UNROLL][EPL];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            int j = j0 + u < k1 ? j0 + u : k1 - 1;
            int64_t slot = (int64_t)bt[j / a.block_size] * a.block_size + j % a.block_size;
            int64_t off = (slot * a.n_kv_heads + g) * D + lane * EPL;
            ld_row<EPL>(kc + off, kf[u]);
            ld_row<EPL>(vc + off, vf[u]);
        }
#pragma unroll
        for (int h = 0; h < GM; h++) {
            float sc[DEC_UNROLL];
            float mx = m[h];
#pragma unroll
            for (int u = 0; u < DEC_UNROLL; u++) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; e++) d = fmaf(qf[h][e], kf[u][e], d);
                d = tk_warp_sum(d);
                if (a.softcap > 0.0f) d = a.softcap * tanhf(d / a.softcap) * LOG2E;
                sc[u] = j0 + u < k1 ? d : -INFINITY;
                mx = fmaxf(mx, sc[u]);
            }
            float alpha = exp2f(m[h] - mx); /* m = -inf first: 0 */
            m[h] = mx;
            l[h] *= alpha;
#pragma unroll
            for (int e = 0; e < EPL; e++) acc[h][e] *= alpha;
#pragma unroll
            for (int u = 0; u < DEC_UNROLL; u++) {
                float p = exp2f(sc[u] - mx);
                l[h] += p;
#pragma unroll
                for (int e = 0; e < EPL; e++) acc[h][e] = fmaf(p, vf[u][e], acc[h][e]);
            }
        }
    }
    /* Merge the warps' states in warp order. */
#pragma unroll
    for (int h = 0; h < GM; h++) {
#pragma unroll
        for (int e = 0; e < EPL; e++) s_acc[warp][h][lane * EPL + e] = acc[h][e];
        if (lane == 0) {
            s_m[warp][h] = m[h];
            s_l[warp][h] = l[h];
        }
    }
    __syncthreads();
    int H = a.n_heads;
    int64_t base = ((int64_t)s * H + g * G) * n_splits + sp; /* + h * n_splits */
    float *wm = ws, *wl = ws + (int64_t)a.n_seqs * H * n_splits;
    float *wacc = ws + 2 * (int64_t)a.n_seqs * H * n_splits;
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
        int h = i / D, d = i % D;
        float M = -INFINITY;
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, s_m[w][h]);
        float Ms = M == -INFINITY ? 0.0f : M;
        float sl = 0.0f, sa = 0.0f;
        for (int w = 0; w < DEC_WARPS; w++) {
            float f = exp2f(s_m[w][h] - Ms);
            sl += s_l[w][h] * f;
            sa += s_acc[w][h][d] * f;
        }
        int64_t idx = base + (int64_t)h * n_splits;
        wacc[idx * D + d] = sa;
        if (d == 0) {
            wm[idx] = M;
            wl[idx] = sl;
        }
    }
}

template <int D>
static __global__ void k_attn_combine(struct tk_attn_args a, int split_len, int n_splits,
                                      const float *ws)
{
    tk_pdl_wait();
    tk_pdl_launch();
    int s = blockIdx.y, h = blockIdx.x, d = threadIdx.x;
    int qs = a.query_start[s];
    if (a.query_start[s + 1] - qs != 1) return;
    int H = a.n_heads;
    int n_live = (int)tk_cdiv(a.seq_lens[s], split_len);
    n_live = min(n_live, n_splits);
    const float *wm = ws, *wl = ws + (int64_t)a.n_seqs * H * n_splits;
    const float *wacc = ws + 2 * (int64_t)a.n_seqs * H * n_splits;
    int64_t base = ((int64_t)s * H + h) * n_splits;
    float M = -INFINITY;
    for (int i = 0; i < n_live; i++) M = fmaxf(M, wm[base + i]);
    float o = 0.0f;
    if (M != -INFINITY) {
        float sl = 0.0f, sa = 0.0f;
        for (int i = 0; i < n_live; i++) {
            float f = exp2f(wm[base + i] - M);
            sl += wl[base + i] * f;
            sa += wacc[(base + i) * D + d] * f;
        }
        o = sa / sl;
    }
    ((bf16 *)a.out)[(int64_t)qs * a.out_stride + (int64_t)h * D + d] = __float2bfloat16(o);
}

extern "C" size_t tk_attn_decode_ws_bytes(const struct tk_attn_args *a, int n_splits)
{
    return (size_t)a->n_seqs * a->n_heads * n_splits * (a->head_dim + 2) * sizeof(float);
}

template <int D, int GM>
static cudaError_t decode_launch(cudaStream_t st, const struct tk_attn_args *a, int split_len,
                                 int n_splits, float *ws)
{
    dim3 grid((unsigned)n_splits, (unsigned)a->n_kv_heads, (unsigned)a->n_seqs);
    return tk_launch(k_attn_decode<D, GM>, grid, DEC_WARPS * 32, 0, st, *a, split_len, n_splits,
                     ws);
}

template <int D>
static cudaError_t decode_d(cudaStream_t st, const struct tk_attn_args *a, int split_len,
                            int n_splits, float *ws)
{
    int G = a->n_heads / a->n_kv_heads;
    cudaError_t e;
    if (G <= 1) e = decode_launch<D, 1>(st, a, split_len, n_splits, ws);
    else if (G <= 2) e = decode_launch<D, 2>(st, a, split_len, n_splits, ws);
    else if (G <= 4) e = decode_launch<D, 4>(st, a, split_len, n_splits, ws);
    else if (G <= 8) e = decode_launch<D, 8>(st, a, split_len, n_splits, ws);
    else if (D <= 128 && G <= 16)
        e = decode_launch<D, D <= 128 ? 16 : 8>(st, a, split_len, n_splits, ws);
    else return cudaErrorInvalidValue;
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)a->n_heads, (unsigned)a->n_seqs);
    return tk_launch(k_attn_combine<D>, grid, D, 0, st, *a, split_len, n_splits, ws);
}

extern "C" cudaError_t tk_attn_decode(cudaStream_t st, const struct tk_attn_args *a,
                                      int split_len, int n_splits, float *ws)
{
    if (a->n_seqs <= 0 || n_splits <= 0) return cudaSuccess;
    switch (a->head_dim) {
    case 64: return decode_d<64>(st, a, split_len, n_splits, ws);
    case 128: return decode_d<128>(st, a, split_len, n_splits, ws);
    case 256: return decode_d<256>(st, a, split_len, n_splits, ws);
    default: return cudaErrorInvalidValue;
    }
}
