/*
 * cuda_attn_generic.cu — a simple, exact attention kernel for the shapes the
 * tensor-core kernels do not take (head_dim other than 64/128, large GQA
 * ratios, rows that are not 16-byte multiples): the small models of the test
 * fixtures, and any model whose head size is unusual.
 *
 * One block of TK_GEN_THREADS threads per (query token, query head). The
 * block walks its sequence's KV positions [lo, pos] in tiles of
 * TK_GEN_THREADS positions, in increasing order (the same order as the CPU
 * reference, and independent of the rest of the batch):
 *
 *   thread j of the tile:  s_j = softcap(q . k_j * scale)      (into smem)
 *   block:                 m' = max(m, max_j s_j); corr = exp(m - m')
 *   thread d:              acc_d = acc_d * corr + sum_j exp(s_j - m') v_j,d
 *                          for d = tid, tid + 256, ... < head_dim
 *
 * head_dim <= TK_GEN_MAX_HD (1024: Gemma 4's global layers have 512).
 * Scalar BF16 loads only, so no alignment is needed. Slow (no tensor cores, K read once per query head),
 * but correct at every shape. Depends on cuda_common.cuh.
 */
#include "backend/cuda/cuda_common.cuh"

#define TK_GEN_THREADS 256
#define TK_GEN_MAX_HD 1024
#define TK_GEN_PER (TK_GEN_MAX_HD / TK_GEN_THREADS) /* dims a thread accumulates */

/* The sequence holding query token t: the last s with query_start[s] <= t. */
static __device__ int seq_of(const int32_t *query_start, int n_seqs, int t)
{
    int lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (query_start[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static __global__ void __launch_bounds__(TK_GEN_THREADS)
    k_attn_generic(struct tk_attn_args a, int which)
{
    tk_pdl_wait(); /* PDL (cuda_common.cuh): nothing is touched before this */
    tk_pdl_launch();
    __shared__ float q_s[TK_GEN_MAX_HD];
    __shared__ float p_s[TK_GEN_THREADS];
    __shared__ float red[32];
    int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, hd = a.head_dim;
    int s = seq_of(a.query_start, a.n_seqs, t);
    int q_len = a.query_start[s + 1] - a.query_start[s];
    if ((which == TK_GEN_PREFILL && q_len == 1) || (which == TK_GEN_DECODE && q_len != 1)) return;
    int kvh = h / (a.n_heads / a.n_kv_heads);
    const bf16 *q = (const bf16 *)a.q + (int64_t)t * a.q_stride + (int64_t)h * hd;
    for (int d = tid; d < hd; d += TK_GEN_THREADS) q_s[d] = __bfloat162float(q[d]);
    int pos = a.positions[t];
    int lo = a.sliding_window > 0 ? pos - a.sliding_window + 1 : 0;
    if (lo < 0) lo = 0;
    const int32_t *bt = a.block_tables + (int64_t)s * a.max_blocks_per_seq;
    const bf16 *kc = (const bf16 *)a.k_cache, *vc = (const bf16 *)a.v_cache;
    float m = -INFINITY, l = 0.0f, acc[TK_GEN_PER] = {0.0f, 0.0f, 0.0f, 0.0f};
    __syncthreads();
    for (int j0 = lo; j0 <= pos; j0 += TK_GEN_THREADS) {
        int j = j0 + tid;
        float sc = -INFINITY;
        if (j <= pos) {
            int64_t slot = (int64_t)bt[j / a.block_size] * a.block_size + j % a.block_size;
            const bf16 *k = kc + (slot * a.n_kv_heads + kvh) * hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++) dot += q_s[d] * __bfloat162float(k[d]);
            sc = dot * a.scale;
            if (a.softcap > 0) sc = a.softcap * tanhf(sc / a.softcap);
        }
        /* block max of the tile's scores */
        float mx = tk_warp_max(sc);
        if (tid % 32 == 0) red[tid / 32] = mx;
        __syncthreads();
        mx = red[0];
        for (int w = 1; w < TK_GEN_THREADS / 32; w++) mx = fmaxf(mx, red[w]);
        float m_new = fmaxf(m, mx);
        float corr = expf(m - m_new);
        float e = j <= pos ? expf(sc - m_new) : 0.0f;
        p_s[tid] = e;
        __syncthreads();
        float tile_sum = 0.0f;
        int n = pos - j0 + 1 < TK_GEN_THREADS ? pos - j0 + 1 : TK_GEN_THREADS;
#pragma unroll
        for (int k = 0; k < TK_GEN_PER; k++) acc[k] *= corr;
        for (int i = 0; i < n; i++) {
            tile_sum += p_s[i];
            int jj = j0 + i;
            int64_t slot = (int64_t)bt[jj / a.block_size] * a.block_size + jj % a.block_size;
            const bf16 *v = vc + (slot * a.n_kv_heads + kvh) * hd;
#pragma unroll
            for (int k = 0; k < TK_GEN_PER; k++) {
                int d = tid + k * TK_GEN_THREADS;
                if (d < hd) acc[k] += p_s[i] * __bfloat162float(v[d]);
            }
        }
        l = l * corr + tile_sum;
        m = m_new;
        __syncthreads(); /* p_s and red are rewritten by the next tile */
    }
    bf16 *o = (bf16 *)a.out + (int64_t)t * a.out_stride + (int64_t)h * hd;
#pragma unroll
    for (int k = 0; k < TK_GEN_PER; k++) {
        int d = tid + k * TK_GEN_THREADS;
        if (d < hd) o[d] = __float2bfloat16(l > 0 ? acc[k] / l : 0.0f);
    }
}

extern "C" cudaError_t tk_attn_generic(cudaStream_t st, const struct tk_attn_args *a,
                                       int64_t n_tok, int which)
{
    if (a->head_dim < 1 || a->head_dim > TK_GEN_MAX_HD) return cudaErrorInvalidValue;
    if (n_tok == 0) return cudaSuccess;
    dim3 grid((unsigned)n_tok, (unsigned)a->n_heads);
    return tk_launch(k_attn_generic, grid, TK_GEN_THREADS, 0, st, *a, which);
}
