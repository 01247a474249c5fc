/*
 * cuda_attn.c — the KV store and attention ops: operand checks and the
 * choice between the two attention kernels; qk_rope_store (the attention
 * prologue in one kernel).
 *
 * One attention call serves a whole ragged batch. Sequences with more than
 * one query token (prefill chunks) go to the tensor-core prefill kernel,
 * sequences with one (decode) to the split-KV decode kernel; each kernel
 * skips the other kind, so which kernel computes a sequence depends only on
 * that sequence, never on what else is in the batch.
 *
 * Shapes those kernels do not take (head_dim other than 64/128, more than
 * 16 query heads per KV head, rows that are not 16-byte multiples) go, every
 * sequence of them, to the generic kernel (cuda_attn_generic.cu).
 *
 * Decode splits (the rule is tk_attn_decode's: the kernel sizes each
 * sequence's splits from its own length, at least DECODE_MIN_SPLIT
 * positions each, so a captured graph spreads a growing context over its
 * blocks). In deterministic mode the rule's parameters are constants (at
 * most DECODE_DET_SPLITS splits unless that makes them longer than
 * TERN_CUDA_DET_SPLIT), so a sequence's reduction order depends only on its
 * own length. In the default mode a sequence takes up to about two blocks
 * per multiprocessor over the batch (eight was measured slower: 39.7 vs
 * 30.6 us for one 8k sequence). Results may then differ in the last bits
 * between batches; they are still run-to-run reproducible for the same
 * batch. Partials and the kernel's split counters go to the context's
 * attention workspace. Depends on cuda_internal.h.
 */
#include "backend/cuda/cuda_internal.h"

#include <limits.h>

/* Fewest KV positions per decode split: one step of 8 rows for each of a
 * block's 8 warps at the 8B shape (32 was measured slower from 600 to 4096
 * positions with 4 warps: more splits to merge for no shorter pass). */
#define DECODE_MIN_SPLIT 64
/* Deterministic mode: splits per sequence before splits grow past
 * TERN_CUDA_DET_SPLIT positions. */
#define DECODE_DET_SPLITS 16
/* tk_attn_decode's counters: n_seqs * n_kv_heads at most. */
#define DECODE_MAX_COUNTERS 65536

enum tern_status tern_cuda_kv_store(struct tern_backend *be, const struct tern_dtensor *qkv,
                                    int64_t k_col, int64_t v_col,
                                    const struct tern_batch_dev *batch, struct tern_kv_layer *kv)
{
    const struct tern_dtensor *K = &kv->k;
    int64_t T = qkv->shape[0];
    if (T == 0) return TERN_OK;
    int64_t width = (int64_t)tern_dtensor_numel(qkv) / T;
    int64_t kv_dim = K->shape[2] * K->shape[3], n_slots = K->shape[0] * K->shape[1];
    bool ok = K->n_dims == 4 && kv->v.dtype == K->dtype && qkv->dtype == K->dtype &&
              (K->dtype == TERN_DTYPE_BF16 || K->dtype == TERN_DTYPE_F32) &&
              batch->slot_mapping.dtype == TERN_DTYPE_I32 && k_col >= 0 && v_col >= 0 &&
              k_col + kv_dim <= width && v_col + kv_dim <= width &&
              tern_dtensor_numel(&kv->v) == tern_dtensor_numel(K);
    if (!ok)
        return tern_error(TERN_E_INVALID_ARG,
                          "cuda kv_store: qkv [T, width] and the caches [n_blocks, block_size, "
                          "n_kv_heads, head_dim] must share a BF16/F32 dtype and k/v columns fit");
    cudaError_t e = tk_kv_store(tern_cuda_of(be)->stream, tern_cuda_ptr(qkv), (int)qkv->dtype,
                                width, k_col, v_col, T, tern_cuda_ptr(&batch->slot_mapping),
                                tern_cuda_ptr(K), tern_cuda_ptr(&kv->v), kv_dim, n_slots);
    if (e != cudaSuccess) return tern_cuda_fail("tk_kv_store", (int)e, __FILE__, __LINE__);
    return TERN_OK;
}

/* Whether tk_qk_rope_store takes the shape: head_dim <= 1024, dtypes as
 * kv_store's, norms of one float dtype, I32 batch arrays (also the
 * operands of the 4-bit qkv GEMV's rope epilogue, cuda_quant.c). */
bool tern_cuda_qkr_fits(const struct tern_dtensor *qkv, const struct tern_dtensor *q_norm,
                        const struct tern_dtensor *k_norm, const struct tern_rope *rope,
                        const struct tern_attn_params *p, const struct tern_batch_dev *batch,
                        const struct tern_kv_layer *kv)
{
    int hd = rope->head_dim;
    int64_t qd = (int64_t)p->n_heads * hd, kvd = (int64_t)p->n_kv_heads * hd;
    int64_t width = (int64_t)tern_dtensor_numel(qkv) / qkv->shape[0];
    const struct tern_dtensor *K = &kv->k;
    bool norm_ok = !q_norm || (k_norm && q_norm->dtype == k_norm->dtype &&
                               (q_norm->dtype == TERN_DTYPE_F32 || q_norm->dtype == TERN_DTYPE_F16 ||
                                q_norm->dtype == TERN_DTYPE_BF16) &&
                               tern_dtensor_numel(q_norm) == (size_t)hd &&
                               tern_dtensor_numel(k_norm) == (size_t)hd);
    return norm_ok && tk_qk_rope_store_fits(hd, rope->rotary_dim) && p->head_dim == hd &&
           K->n_dims == 4 && K->shape[2] == p->n_kv_heads && K->shape[3] == hd &&
           kv->v.dtype == K->dtype && qkv->dtype == K->dtype &&
           (K->dtype == TERN_DTYPE_BF16 || K->dtype == TERN_DTYPE_F32) &&
           tern_dtensor_numel(&kv->v) == tern_dtensor_numel(K) &&
           batch->slot_mapping.dtype == TERN_DTYPE_I32 &&
           batch->positions.dtype == TERN_DTYPE_I32 && rope->inv_freq.dtype == TERN_DTYPE_F32 &&
           width >= qd + 2 * kvd;
}

/* The fused kernel where it takes the shape (tern_cuda_qkr_fits); otherwise
 * the three ops in turn, which is what the kernel computes. */
enum tern_status tern_cuda_qk_rope_store(struct tern_backend *be, struct tern_dtensor *qkv,
                                         const struct tern_dtensor *q_norm,
                                         const struct tern_dtensor *k_norm, float eps,
                                         const struct tern_rope *rope,
                                         const struct tern_attn_params *p,
                                         const struct tern_batch_dev *batch,
                                         struct tern_kv_layer *kv)
{
    const struct tern_backend_ops *ops = be->ops;
    int hd = rope->head_dim;
    int64_t qd = (int64_t)p->n_heads * hd, kvd = (int64_t)p->n_kv_heads * hd;
    int64_t T = qkv->shape[0];
    if (T == 0) return TERN_OK;
    const struct tern_dtensor *K = &kv->k;
    if (!tern_cuda_qkr_fits(qkv, q_norm, k_norm, rope, p, batch, kv)) {
        if (q_norm) {
            TERN_TRY(ops->head_rmsnorm(be, qkv, 0, p->n_heads, hd, q_norm, eps));
            TERN_TRY(ops->head_rmsnorm(be, qkv, qd, p->n_kv_heads, hd, k_norm, eps));
        }
        TERN_TRY(ops->rope(be, qkv, 0, p->n_heads + p->n_kv_heads, &batch->positions, rope));
        return ops->kv_store(be, qkv, qd, qd + kvd, batch, kv);
    }
    int64_t width = (int64_t)tern_dtensor_numel(qkv) / T, n_slots = K->shape[0] * K->shape[1];
    cudaError_t e = tk_qk_rope_store(
        tern_cuda_of(be)->stream, tern_cuda_ptr(qkv), (int)qkv->dtype, width, T, p->n_heads,
        p->n_kv_heads, hd, q_norm ? tern_cuda_ptr(q_norm) : NULL,
        q_norm ? tern_cuda_ptr(k_norm) : NULL, q_norm ? (int)q_norm->dtype : 0, eps,
        rope->rotary_dim, rope->interleaved, rope->mscale, tern_cuda_ptr(&rope->inv_freq),
        tern_cuda_ptr(&batch->positions), tern_cuda_ptr(&batch->slot_mapping), tern_cuda_ptr(K),
        tern_cuda_ptr(&kv->v), n_slots);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return tern_cuda_fail("tk_qk_rope_store", (int)e, __FILE__, __LINE__);
    }
    return TERN_OK;
}

static enum tern_status attn_check(const struct tern_dtensor *qkv, const struct tern_kv_layer *kv,
                                   const struct tern_batch_dev *b, const struct tern_attn_params *p,
                                   const struct tern_dtensor *out)
{
    const struct tern_dtensor *K = &kv->k;
    int64_t T = qkv->shape[0];
    int64_t width = T ? (int64_t)tern_dtensor_numel(qkv) / T : 0;
    int64_t ow = T ? (int64_t)tern_dtensor_numel(out) / T : 0;
    bool ok = qkv->dtype == TERN_DTYPE_BF16 && K->dtype == TERN_DTYPE_BF16 &&
              kv->v.dtype == TERN_DTYPE_BF16 && out->dtype == TERN_DTYPE_BF16 && K->n_dims == 4 &&
              p->n_kv_heads > 0 && p->n_heads % p->n_kv_heads == 0 &&
              K->shape[2] == p->n_kv_heads && K->shape[3] == p->head_dim &&
              K->shape[1] == b->block_size && out->shape[0] == T &&
              ow >= (int64_t)p->n_heads * p->head_dim && width >= (int64_t)p->n_heads * p->head_dim;
    if (!ok)
        return tern_error(TERN_E_INVALID_ARG,
                          "cuda attention: qkv, caches and out must be BF16, caches [n_blocks, "
                          "%d, %d, %d], out [T, n_heads * head_dim]",
                          b->block_size, p->n_kv_heads, p->head_dim);
    if (p->head_dim < 1 || p->head_dim > 1024)
        return tern_error(TERN_E_UNSUPPORTED, "cuda attention: head_dim %d (at most 1024)",
                          p->head_dim);
    return TERN_OK;
}

/* Whether the tensor-core prefill kernel (prefill != 0) or the split-KV
 * decode kernel takes this shape. Depends only on the model's shapes and the
 * scratch layout, never on the batch, so a sequence's kernel (and so its
 * result) does not depend on the other sequences of the batch. */
static bool attn_fast(const struct tern_dtensor *qkv, const struct tern_attn_params *p,
                      const struct tern_dtensor *out, bool prefill)
{
    int64_t T = qkv->shape[0];
    int64_t width = (int64_t)tern_dtensor_numel(qkv) / T, ow = (int64_t)tern_dtensor_numel(out) / T;
    int group = p->n_heads / p->n_kv_heads, hd = p->head_dim;
    if (width % 8 || ow % 8 || (uintptr_t)tern_cuda_ptr(qkv) % 16 ||
        (uintptr_t)tern_cuda_ptr(out) % 16)
        return false;
    if (prefill) return hd == 64 || hd == 128 || hd == 256 || hd == 512;
    return (hd == 64 || hd == 128 || hd == 256) && group <= (hd > 128 ? 8 : 16);
}

/* The decode split rule (tk_attn_decode) and the blocks launched per
 * sequence, enough for the longest sequence max_seq_len allows. Fails only
 * in deterministic mode. */
struct decode_plan {
    int min_len, max_len, n_target, n_splits;
};

static enum tern_status decode_splits(struct tern_cuda *c, const struct tk_attn_args *a,
                                      int n_decode, struct decode_plan *dp)
{
    int64_t L = a->max_seq_len > 0 ? a->max_seq_len : 1;
    int64_t by_min = (L + DECODE_MIN_SPLIT - 1) / DECODE_MIN_SPLIT;
    if ((int64_t)a->n_seqs * a->n_kv_heads > DECODE_MAX_COUNTERS)
        return tern_error(TERN_E_CAPACITY,
                          "cuda attention: %d sequences x %d kv heads exceed the %d decode "
                          "counters", a->n_seqs, a->n_kv_heads, DECODE_MAX_COUNTERS);
    if (c->base.deterministic) {
        int64_t by_max = (L + TERN_CUDA_DET_SPLIT - 1) / TERN_CUDA_DET_SPLIT;
        int64_t n = by_min < DECODE_DET_SPLITS ? by_min : DECODE_DET_SPLITS;
        n = n > by_max ? n : by_max;
        *dp = (struct decode_plan){DECODE_MIN_SPLIT, TERN_CUDA_DET_SPLIT, DECODE_DET_SPLITS, (int)n};
        if (tk_attn_decode_ws_bytes(a, (int)n) <= TERN_CUDA_ATTN_WS_BYTES) return TERN_OK;
        return tern_error(TERN_E_CAPACITY,
                          "cuda attention: %d sequences of up to %lld tokens need %zu bytes of "
                          "decode workspace; the context has %zu",
                          a->n_seqs, (long long)L, tk_attn_decode_ws_bytes(a, (int)n),
                          TERN_CUDA_ATTN_WS_BYTES);
    }
    int64_t per = (int64_t)n_decode * a->n_kv_heads;
    int64_t n = (2 * (int64_t)c->n_sm + per - 1) / per;
    n = n < by_min ? n : by_min;
    if (n < 1) n = 1;
    while (n > 1 && tk_attn_decode_ws_bytes(a, (int)n) > TERN_CUDA_ATTN_WS_BYTES) n = (n + 1) / 2;
    *dp = (struct decode_plan){DECODE_MIN_SPLIT, INT_MAX, (int)n, (int)n};
    return TERN_OK;
}

/* The kernels' view of one attention call. */
static struct tk_attn_args attn_args(const struct tern_dtensor *qkv, const struct tern_kv_layer *kv,
                                     const struct tern_batch_dev *batch,
                                     const struct tern_attn_params *p, struct tern_dtensor *out)
{
    int64_t T = qkv->shape[0];
    return (struct tk_attn_args){
        .q = tern_cuda_ptr(qkv),
        .q_stride = (int64_t)tern_dtensor_numel(qkv) / T,
        .k_cache = tern_cuda_ptr(&kv->k),
        .v_cache = tern_cuda_ptr(&kv->v),
        .out = tern_cuda_ptr(out),
        .out_stride = (int64_t)tern_dtensor_numel(out) / T,
        .positions = tern_cuda_ptr(&batch->positions),
        .query_start = tern_cuda_ptr(&batch->query_start),
        .seq_lens = tern_cuda_ptr(&batch->seq_lens),
        .block_tables = tern_cuda_ptr(&batch->block_tables),
        .n_seqs = batch->host->n_seqs,
        .max_blocks_per_seq = batch->host->max_blocks_per_seq,
        .block_size = batch->block_size,
        .n_heads = p->n_heads,
        .n_kv_heads = p->n_kv_heads,
        .head_dim = p->head_dim,
        .scale = p->scale,
        .softcap = p->softcap,
        .sliding_window = p->sliding_window,
        .max_q_len = batch->max_q_len,
        .max_seq_len = batch->max_seq_len,
    };
}

/* The split-KV decode kernel over the batch's n_decode one-token
 * sequences. */
static enum tern_status attn_decode(struct tern_cuda *c, const struct tk_attn_args *a, int n_decode)
{
    struct decode_plan dp = {0, 0, 0, 0};
    TERN_TRY(decode_splits(c, a, n_decode, &dp));
    cudaError_t e =
        tk_attn_decode(c->stream, a, dp.min_len, dp.max_len, dp.n_target, dp.n_splits, c->attn_ws);
    if (e != cudaSuccess) return tern_cuda_fail("tk_attn_decode", (int)e, __FILE__, __LINE__);
    return TERN_OK;
}

enum tern_status tern_cuda_attention(struct tern_backend *be, const struct tern_dtensor *qkv,
                                     const struct tern_kv_layer *kv,
                                     const struct tern_batch_dev *batch,
                                     const struct tern_attn_params *p, struct tern_dtensor *out)
{
    struct tern_cuda *c = tern_cuda_of(be);
    const struct tern_batch *h = batch->host;
    if (qkv->shape[0] == 0 || h->n_seqs == 0) return TERN_OK;
    TERN_TRY(attn_check(qkv, kv, batch, p, out));
    int n_decode = 0, n_prefill = 0;
    for (int s = 0; s < h->n_seqs; s++) {
        int q = h->query_start[s + 1] - h->query_start[s];
        n_decode += q == 1;
        n_prefill += q > 1;
    }
    int64_t T = qkv->shape[0];
    struct tk_attn_args a = attn_args(qkv, kv, batch, p, out);
    bool fast_p = attn_fast(qkv, p, out, true), fast_d = attn_fast(qkv, p, out, false);
    if ((n_prefill > 0 && !fast_p) || (n_decode > 0 && !fast_d)) {
        int which = fast_p ? TK_GEN_DECODE : fast_d ? TK_GEN_PREFILL : TK_GEN_ALL;
        cudaError_t e = tk_attn_generic(c->stream, &a, T, which);
        if (e != cudaSuccess) return tern_cuda_fail("tk_attn_generic", (int)e, __FILE__, __LINE__);
    }
    if (n_prefill > 0 && fast_p) {
        cudaError_t e = tk_attn_prefill(c->stream, &a);
        if (e != cudaSuccess) return tern_cuda_fail("tk_attn_prefill", (int)e, __FILE__, __LINE__);
    }
    if (n_decode > 0 && fast_d) return attn_decode(c, &a, n_decode);
    return TERN_OK;
}
