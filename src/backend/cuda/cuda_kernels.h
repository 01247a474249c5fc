/*
 * cuda_kernels.h — the C-callable launchers of the CUDA kernels (the *.cu
 * files), shared by the C glue (cuda.c, cuda_matmul.c, cuda_attn.c).
 *
 * Only plain C types and the CUDA runtime's types appear here, so this header
 * compiles both as C (gcc) and as CUDA C++ (nvcc). Launchers never allocate,
 * never synchronise and never copy host data: they only enqueue kernels on
 * the given stream, so every op is CUDA-graph capturable. They return the
 * launch's cudaError_t; the glue turns it into TERN_E_DEVICE.
 *
 * Element types are passed as small ints that match enum tern_dtype's first
 * three values (F32 = 0, F16 = 1, BF16 = 2; cuda.c checks this at compile
 * time). Strides and columns are in elements.
 */
#ifndef TERN_CUDA_KERNELS_H
#define TERN_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TK_F32 = 0, TK_F16 = 1, TK_BF16 = 2 };

/* ---- elementwise and row ops (cuda_ops.cu) ---- */

/* out[t, :] = table[idx[t], :]; rows whose index is outside [0, n_table) are
 * written as zeros (the glue cannot see device indices without a sync). */
cudaError_t tk_get_rows(cudaStream_t st, const void *table, int tdt, int64_t n_table,
                        int64_t width, const int32_t *idx, int64_t n, void *out, int odt);

/* Grouped RMSNorm: for t < n_rows, h < n_groups the `dim` elements at
 * x + t * x_stride + col0 + h * dim are normalised into the same place of out
 * (out_stride); w: [dim] of dtype wdt. x has dtype adt, out odt (the same,
 * or F32 x into BF16 out: the F32 residual stream). */
cudaError_t tk_rmsnorm(cudaStream_t st, const void *x, int64_t x_stride, void *out,
                       int64_t out_stride, int64_t col0, int adt, int odt, int64_t n_rows,
                       int n_groups, int64_t dim, const void *w, int wdt, float eps);

/* res[r] += x[r]; out[r] = rmsnorm(res[r]) * w. All [rows, dim] contiguous;
 * x and out in adt, res in rdt (adt, or F32 with BF16 x/out). */
cudaError_t tk_add_rmsnorm(cudaStream_t st, void *res, int rdt, const void *x, void *out, int adt,
                           int64_t n_rows, int64_t dim, const void *w, int wdt, float eps);

/* In-place rotary embedding of n_heads heads at x + t * stride + col0. */
cudaError_t tk_rope(cudaStream_t st, void *x, int adt, int64_t stride, int64_t col0, int64_t n_tok,
                    int n_heads, int head_dim, int rotary_dim, int interleaved, float mscale,
                    const float *inv_freq, const int32_t *positions);

/* The attention prologue in one kernel: for each token t, heads
 * [0, n_heads + n_kv_heads) of the qkv row (q heads, then k heads) get the
 * per-head RMSNorm (q_norm for q heads, k_norm for k heads; skipped when
 * q_norm is NULL) and then the rotary embedding, in place, with the same
 * arithmetic and roundings as tk_rmsnorm then tk_rope; then the k heads
 * (columns k_col) and v heads (v_col) go to cache row slots[t] as
 * tk_kv_store does (skipped for slots outside [0, n_slots)). qkv and caches
 * share dtype adt. head_dim <= 256 and even (tk_qk_rope_store_fits). */
int tk_qk_rope_store_fits(int head_dim, int rotary_dim);
cudaError_t tk_qk_rope_store(cudaStream_t st, void *qkv, int adt, int64_t stride, int64_t n_tok,
                             int n_heads, int n_kv_heads, int head_dim, const void *q_norm,
                             const void *k_norm, int wdt, float eps, int rotary_dim,
                             int interleaved, float mscale, const float *inv_freq,
                             const int32_t *positions, const int32_t *slots, void *k_cache,
                             void *v_cache, int64_t n_slots);

/* Copies k and v (kv_dim elements at columns k_col / v_col of qkv rows) into
 * row slots[t] of the caches viewed as [n_slots, kv_dim]; negative or
 * out-of-range slots are skipped. qkv and caches share dtype adt. */
cudaError_t tk_kv_store(cudaStream_t st, const void *qkv, int adt, int64_t stride, int64_t k_col,
                        int64_t v_col, int64_t n_tok, const int32_t *slots, void *k_cache,
                        void *v_cache, int64_t kv_dim, int64_t n_slots);

/* out[t, i] = silu(gu[t, i]) * gu[t, ff + i]. */
cudaError_t tk_silu_mul(cudaStream_t st, const void *gate_up, void *out, int adt, int64_t n_tok,
                        int64_t ff);
/* out = a + b over n elements; a and out in adt, b in bdt (adt, or BF16
 * with F32 a/out). */
cudaError_t tk_add(cudaStream_t st, const void *a, const void *b, int bdt, void *out, int adt,
                   int64_t n);
/* out[r] = first index of the maximum of row r (F32 logits, I32 out). */
cudaError_t tk_argmax(cudaStream_t st, const float *logits, int64_t n_rows, int64_t vocab,
                      int32_t *out);
/* res[r] = {token, raw logprob bits} drawn from row r under params[r]
 * (struct tern_sample_dev, 56 bytes each; edits: struct tern_sample_edit,
 * 20 bytes; scratch [n_rows, vocab] for rows with edits); top[r] = 20 ids
 * then 20 logprob bits, or NULL (cuda_sample.cu). */
cudaError_t tk_sample(cudaStream_t st, const float *logits, int64_t n_rows, int64_t vocab,
                      const void *params, const void *edits, float *scratch, int32_t *res,
                      int32_t *top);
/* y[t, c] += bias[c] for c < n_out (y rows of stride y_stride). */
cudaError_t tk_bias_add(cudaStream_t st, void *y, int ydt, int64_t y_stride, const void *bias,
                        int bdt, int64_t n_tok, int64_t n_out);

/* ---- matrix-vector products for decode (cuda_gemv.cu) ---- */

/* y[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]), float32 accumulation.
 * The fast path (x and w BF16, in % 8 == 0, 16-byte aligned rows) streams each
 * weight row once for up to 8 tokens at a time; anything else takes a simple
 * exact path. bias may be NULL. y points at column 0 of the output slice. */
cudaError_t tk_gemv(cudaStream_t st, const void *x, int xdt, int64_t x_stride, const void *w,
                    int wdt, const void *bias, int bdt, void *y, int ydt, int64_t y_stride,
                    int64_t n_tok, int64_t in, int64_t out);
/* True when tk_gemv takes the fast path for these operands. */
int tk_gemv_fast(const void *x, int xdt, int64_t x_stride, const void *w, int wdt, int64_t in);
/* act[t, i] = silu(g) * u for i < ff, where g and u are rows i and ff + i
 * of x W^T (+ bias), W [2 ff, in] (gate rows, then up rows), each rounded
 * to BF16 first: bitwise tk_gemv into a BF16 gate_up then tk_silu_mul.
 * x, W and act BF16 with tk_gemv_fast's alignment, else
 * cudaErrorInvalidValue. */
cudaError_t tk_gemv_glu(cudaStream_t st, const void *x, int64_t x_stride, const void *w,
                        const void *bias, int bdt, void *act, int64_t act_stride, int64_t n_tok,
                        int64_t in, int64_t ff);

/* ---- attention over the paged KV cache (cuda_attn_*.cu) ---- */

struct tk_attn_args {
    const void *q;       /* qkv rows (BF16); q of head h at column h * head_dim */
    int64_t q_stride;    /* elements per qkv row */
    const void *k_cache; /* [n_blocks, block_size, n_kv_heads, head_dim] BF16 */
    const void *v_cache;
    void *out;           /* [T, n_heads * head_dim] BF16 */
    int64_t out_stride;
    const int32_t *positions, *query_start, *seq_lens, *block_tables;
    int n_seqs, max_blocks_per_seq, block_size;
    int n_heads, n_kv_heads, head_dim;
    float scale, softcap;
    int sliding_window;
    int max_q_len, max_seq_len;
};

/* Sequences with more than one query token (FlashAttention-2 style tiles on
 * mma.sync tensor cores). head_dim 64, 128 or 256. */
cudaError_t tk_attn_prefill(cudaStream_t st, const struct tk_attn_args *a);

/* Bytes of workspace the decode kernel needs for `n_splits` KV splits
 * (its first bytes are counters that must be zero when the context starts). */
size_t tk_attn_decode_ws_bytes(const struct tk_attn_args *a, int n_splits);

/* Sequences with exactly one query token: split-KV (flash-decoding), the
 * query heads of one KV group together, splits merged in index order by the
 * last block of each (kv head, sequence), in one launch. A sequence of L
 * positions takes n = max(min(n_target, cdiv(L, min_len)), cdiv(L, max_len))
 * splits (at most n_splits, the blocks launched per sequence) of cdiv(L, n)
 * positions. head_dim 64, 128 or 256; n_heads / n_kv_heads <= 16;
 * n_seqs * n_kv_heads <= 65536. */
cudaError_t tk_attn_decode(cudaStream_t st, const struct tk_attn_args *a, int min_len, int max_len,
                           int n_target, int n_splits, float *ws);

/* The elementwise ops of the non-llama blocks (cuda_elementwise.cu):
 * out[t, i] = act(x[t, xc + i]) * y[t, yc + i] over [n_tok, n] (x, y, out of
 * any float dtype; rows xw / yw wide; y NULL: act(x) alone); out = x * c
 * (* s[0]); x = cap * tanh(x / cap); a LayerNorm of n_rows rows of dim
 * values (w, b NULL: none). */
enum { TK_GLU_SILU = 0, TK_GLU_GELU_TANH = 1 };
cudaError_t tk_act_mul(cudaStream_t st, const void *x, int xdt, int64_t xw, int64_t xc,
                       const void *y, int ydt, int64_t yw, int64_t yc, void *out, int odt,
                       int64_t n_tok, int64_t n, int act);
cudaError_t tk_scale(cudaStream_t st, const void *x, int xdt, float c, const void *s, int sdt,
                     void *out, int odt, int64_t n);
cudaError_t tk_softcap(cudaStream_t st, float *x, float cap, int64_t n);
cudaError_t tk_layernorm(cudaStream_t st, const void *x, int xdt, void *out, int odt,
                         int64_t n_rows, int64_t dim, const void *w, int wdt, const void *b,
                         int bdt, float eps);

/* Any query count per sequence, any head_dim <= 1024, any GQA ratio, no
 * alignment needs: one block per (token, head), exact online softmax
 * (cuda_attn_generic.cu). For shapes the two kernels above do not take.
 * `which` picks the sequences it computes: all, only those with more than
 * one query token, or only those with exactly one. */
enum { TK_GEN_ALL = 0, TK_GEN_PREFILL = 1, TK_GEN_DECODE = 2 };
cudaError_t tk_attn_generic(cudaStream_t st, const struct tk_attn_args *a, int64_t n_tok,
                            int which);

/* ---- mixture of experts (cuda_moe.cu) ---- */

/* One stacked expert projection [rows, in] (backend.h's struct
 * tern_experts): dense (bits 0, w of dtype wdt) or MLX affine (w packed
 * U32, scales / biases of dtype sdt, bits, group). */
struct tk_moe_w {
    const void *w;
    int wdt;
    const void *scales, *biases;
    int sdt, bits, group;
};

/* moe_route: per token, the softmax of logits [T, E] (E * 4 bytes of
 * shared memory), the top k (an equal probability to the lower index),
 * renormalised when renorm, times scale[id] (dtype sdt) when scale. */
cudaError_t tk_moe_route(cudaStream_t st, const float *logits, int64_t T, int E, int k,
                         int renorm, const void *scale, int sdt, int32_t *ids, float *weights);

struct tk_moe_args {
    const void *x; /* [T, H] dtype xdt */
    int xdt;
    const int32_t *ids;    /* [T, k] */
    const float *weights;  /* [T, k] */
    int64_t T;
    int k, E;
    int64_t H, I;
    struct tk_moe_w gate_up, down; /* [E 2 I, H], [E H, I] */
    int act;                       /* TK_GLU_* */
    void *act_buf;                 /* scratch [T k, I] dtype adt */
    int adt;
    const void *shared; /* [T, H] dtype shdt, or NULL */
    int shdt;
    const float *shared_gate; /* [T] logits, or NULL */
    void *out;                /* [T, H] dtype odt */
    int odt;
};

/* moe_experts: act(gate x) * (up x) per (token, expert) into act_buf, then
 * each token's experts' down projections summed in increasing expert
 * index, plus the (gated) shared expert. */
cudaError_t tk_moe_experts(cudaStream_t st, const struct tk_moe_args *a);

#ifdef __cplusplus
}
#endif

#endif /* TERN_CUDA_KERNELS_H */
