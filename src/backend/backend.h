/*
 * backend.h — the one op interface that model code runs on, and the ragged
 * batch that every op sees.
 *
 * A backend (CPU, or one CUDA device) owns device buffers and implements a
 * table of ops over views into them. Model code never sees a device pointer:
 * it holds `struct tern_dtensor` views and calls `be->ops->x(be, ...)`.
 * The CPU implementation (cpu/) is the readable numerical reference; the CUDA
 * one (cuda/) is fast. An op pointer left NULL means "not supported here";
 * callers check with tern_backend_supports().
 *
 * Layouts (outermost first, row-major, contiguous unless said otherwise):
 *   activations         [n_tokens, width]           in be->act_dtype
 *   residual stream     [n_tokens, hidden]          F32 (rmsnorm, add_rmsnorm and add
 *                                                   take it with act_dtype x / out)
 *   q / k / v           [n_tokens, n_heads, head_dim] (views of the qkv rows)
 *   KV cache, per layer [n_blocks, block_size, n_kv_heads, head_dim] in be->kv_dtype
 *   logits              [n_logits, vocab] float32
 *
 * The ragged batch (vLLM's shape): T tokens from S sequences, laid out
 * sequence after sequence. Sequence s owns query tokens
 * [query_start[s], query_start[s+1]); after this step it has seq_lens[s]
 * tokens in the KV cache (its context plus these queries), so its query
 * token i sits at position seq_lens[s] - q_len + i (positions[] says so
 * explicitly). Token t writes its K/V into cache slot slot_mapping[t] =
 * block * block_size + offset. Sequence s's logical block j lives in
 * physical block block_tables[s * max_blocks_per_seq + j].
 *
 *   tokens      | s0 q0 q1 q2 | s1 q0 | s2 q0 q1 |
 *   query_start   0           3       4          6
 *
 * Depends on base/ and tensor/.
 */
#ifndef TERN_BACKEND_H
#define TERN_BACKEND_H

#include "base/base.h"
#include "tensor/tensor.h"

struct tern_backend;
struct tern_buf;   /* a device allocation, owned by the backend that made it */
struct tern_graph; /* a captured sequence of ops (backends with graph_begin only) */

/* A view into a backend buffer. Contiguous, row-major. */
struct tern_dtensor {
    struct tern_buf *buf; /* NULL = absent (e.g. no bias) */
    size_t offset;        /* bytes from the start of buf */
    enum tern_dtype dtype;
    int n_dims;
    int64_t shape[TERN_MAX_DIMS];
};

/* One linear layer, y = x W^T (+ bias), as the backend sees it.
 * Dense:     weight [out, in] in F32/F16/BF16, bits == 0, ggml_type == 0.
 * Quantized (MLX affine, see tensor/quant.h): weight [out, in*bits/32] U32,
 *            scales and biases [out, in/group_size] (F16/BF16); w = scale*q + bias.
 * ggml:      (a GGUF's block types, see tensor/ggml_quant.h) ggml_type is the
 *            block type id, weight [out, row_bytes] U8 holds each row's blocks
 *            end to end (row_bytes = tern_ggml_row_bytes(type, in)); bits == 0,
 *            no scales or biases. Only backends whose ggml_type_ok takes the
 *            type see one (the loader dequantizes it to BF16 for the others).
 * bias:      [out] additive, or buf == NULL. */
struct tern_linear {
    struct tern_dtensor weight;
    struct tern_dtensor scales;
    struct tern_dtensor biases;
    struct tern_dtensor bias;
    int32_t bits;       /* 0 = dense or ggml */
    int32_t group_size; /* quantized only */
    uint32_t ggml_type; /* a ggml block type (Q4_0 ...), or 0: not a ggml linear (plain
                         * F32 / F16 / BF16 tensors of a GGUF bind as dense) */
    int64_t in_features;
    int64_t out_features;
};

/* A llama-family decoder as step_prepare sees it: per layer the fused
 * q|k|v and gate|up linears (rows [0, ff) gate, [ff, 2 ff) up), o and
 * down, and the two RMSNorm weights; then the final norm and the head. */
struct tern_step_layer {
    const struct tern_linear *qkv, *o, *gate_up, *down;
    const struct tern_dtensor *in_norm, *post_norm;
};

struct tern_step_desc {
    int32_t n_layers;
    const struct tern_step_layer *layers;
    const struct tern_dtensor *final_norm;
    const struct tern_linear *lm_head;
    int64_t hidden, intermediate, vocab;
    float eps;
    bool qk_norm; /* head norms (unsupported by the CUDA plan) */
    const struct tern_rope *rope;
    const struct tern_attn_params *attn;
};

struct tern_step_plan; /* backend-defined */

#define TERN_MAX_KV_GROUPS 4

/* The batch on the host, as the scheduler (or a simple driver) builds it. */
struct tern_batch {
    int32_t n_tokens;           /* T */
    int32_t n_seqs;             /* S */
    int32_t max_blocks_per_seq; /* row length of block_tables */
    int32_t n_logits;           /* rows of logits wanted */
    const int32_t *token_ids;    /* [T] */
    const int32_t *positions;    /* [T] */
    const int32_t *query_start;  /* [S + 1] */
    const int32_t *seq_lens;     /* [S] */
    const int32_t *block_tables; /* [S, max_blocks_per_seq] */
    const int32_t *slot_mapping; /* [T] */
    const int32_t *logits_idx;   /* [n_logits] token rows whose logits are wanted */
    /* KV pools beyond the first (sliding-window layers keep their own, see
     * kv/kv.h): group g's block tables and slots, laid out as block_tables
     * and slot_mapping above (which are group 0's). n_kv_groups <= 1: none. */
    int32_t n_kv_groups;
    const int32_t *group_block_tables[TERN_MAX_KV_GROUPS]; /* [g] for 1 <= g < n_kv_groups */
    const int32_t *group_slot_mapping[TERN_MAX_KV_GROUPS];
};

/* The same batch as ops see it: int32 arrays in backend buffers, plus the
 * host copy and a few host-side maxima for launch configuration. Ops size
 * their launches from these maxima only (never from the device arrays), so
 * a captured graph stays valid for any batch with the same host shape:
 * max_seq_len may be an upper bound (the forward rounds it up to a bucket
 * for decode batches) and a sequence shorter than it is still exact. */
struct tern_batch_dev {
    const struct tern_batch *host;
    int32_t block_size;
    int32_t max_q_len;   /* longest query run in this batch */
    int32_t max_seq_len; /* >= every seq_lens[] in this batch */
    struct tern_dtensor token_ids, positions, query_start, seq_lens, block_tables, slot_mapping,
        logits_idx;
};

/* The activation of a gated MLP (act_mul). */
enum tern_glu_act {
    TERN_GLU_SILU,      /* x * sigmoid(x) */
    TERN_GLU_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
};

/* Rotary embedding. inv_freq holds the per-pair frequencies with any
 * rope_scaling (linear, llama3, yarn) already applied; the angle of pair i
 * at position p is p * inv_freq[i], and cos/sin are multiplied by mscale. */
struct tern_rope {
    int32_t head_dim;
    int32_t rotary_dim;        /* leading dims rotated (== head_dim for full rotary) */
    bool interleaved;          /* pairs (2i, 2i+1) (GPT-J); false = halves (HF rotate_half) */
    float mscale;              /* yarn attention factor; 1 otherwise */
    struct tern_dtensor inv_freq; /* [rotary_dim / 2] F32 */
};

struct tern_attn_params {
    int32_t n_heads;
    int32_t n_kv_heads; /* n_heads % n_kv_heads == 0 (GQA) */
    int32_t head_dim;
    float scale;            /* softmax scale, usually 1/sqrt(head_dim) */
    int32_t sliding_window; /* 0 = attend to the whole context */
    float softcap;          /* 0 = none; else logits = softcap * tanh(logits / softcap) */
};

/* The experts of one mixture-of-experts layer: E gated MLPs of one shape,
 * each projection one linear whose rows are the experts' rows end to end
 * (a [E, out, in] tensor seen as [E * out, in]; MLX affine weights quantize
 * each row on its own, so expert e of a quantized stack is simply its rows).
 *
 *   gate_up [E * 2 I, H]   expert e: gate rows [2 I e, 2 I e + I),
 *                                    up rows   [2 I e + I, 2 I (e + 1))
 *   down    [E * H, I]     expert e: rows [H e, H (e + 1))
 *
 * This is the form a grouped GEMM takes: one launch per projection over
 * the tokens sorted by expert, each group a row slice of one weight. */
struct tern_experts {
    int32_t n_experts;    /* E */
    int64_t hidden;       /* H */
    int64_t intermediate; /* I, each expert's */
    struct tern_linear gate_up;
    struct tern_linear down;
};

/* The operands of moe_experts. T tokens, each routed to k experts (the
 * columns of ids). */
struct tern_moe_io {
    const struct tern_dtensor *x;       /* [T, H] the experts' input (activation dtype) */
    const struct tern_dtensor *ids;     /* [T, k] I32 expert ids (moe_route) */
    const struct tern_dtensor *weights; /* [T, k] F32 their weights (moe_route) */
    /* A shared expert's output, added to each token's sum (Qwen2-MoE), or
     * NULL; scaled by sigmoid(shared_gate[t]) when shared_gate ([T, 1] F32
     * logits) is non-NULL. */
    const struct tern_dtensor *shared;
    const struct tern_dtensor *shared_gate;
    struct tern_dtensor *act;   /* scratch [T k, I] (activation dtype) */
    struct tern_dtensor *order; /* scratch I32 [T k + E + 1]: the (token, slot) pairs grouped by
                                 * expert, then the groups' offsets (backends that group) */
    struct tern_dtensor *out;   /* [T, H]; aliases neither x nor shared */
};

/* The KV cache of one layer. */
struct tern_kv_layer {
    struct tern_dtensor k; /* [n_blocks, block_size, n_kv_heads, head_dim] */
    struct tern_dtensor v; /* [n_blocks, block_size, n_kv_heads, head_dim] */
};

/* One row's settings for the sample op (56 bytes, device layout). */
#define TERN_SAMPLE_DEV_MAX_TOP 20
struct tern_sample_dev {
    float temperature; /* 0 = greedy (argmax of the processed row) */
    int32_t top_k;     /* <= 0 = off */
    float top_p;       /* 1 = off */
    float min_p;       /* 0 = off */
    uint64_t seed;
    uint32_t stream;
    int32_t n_top;     /* top_logprobs alternatives, 0 .. TERN_SAMPLE_DEV_MAX_TOP */
    uint64_t step;
    int32_t edit0;     /* this row's edits: edits[edit0, edit0 + n_edit) */
    int32_t n_edit;    /* 0 = the raw row is sampled as it is */
    int32_t logprob;   /* 1 = compute the token's raw logprob */
    int32_t pad;
};

/* A logit edit (penalties, logit_bias), one per distinct token of a row,
 * applied in sample/sample.h's order: repetition, then x -= sub, then
 * x += bias. */
#define TERN_SAMPLE_EDIT_REP 1u
#define TERN_SAMPLE_EDIT_SUB 2u
#define TERN_SAMPLE_EDIT_BIAS 4u
struct tern_sample_edit {
    int32_t id;
    uint32_t flags; /* TERN_SAMPLE_EDIT_* */
    float rep;      /* repetition_penalty */
    float sub;      /* frequency * count + presence */
    float bias;
};

/* The sample op's operands: n rows of logits are sampled, one
 * tern_sample_dev each. */
struct tern_sample_io {
    const struct tern_dtensor *params; /* U8, n tern_sample_dev */
    const struct tern_dtensor *edits;  /* U8 tern_sample_edit entries; NULL = no row has edits */
    struct tern_dtensor *scratch;      /* F32 [n, vocab] (rows with edits); NULL = no edits */
    struct tern_dtensor *res;          /* I32 [n, 2]: token, logprob (F32 bits) */
    struct tern_dtensor *top;          /* I32 [n, 2 * TERN_SAMPLE_DEV_MAX_TOP]: ids, then
                                        * logprobs (F32 bits); NULL = no row has n_top */
};

struct tern_backend_ops {
    const char *name;
    void (*destroy)(struct tern_backend *be);

    /* ---- memory ---- */
    enum tern_status (*buf_alloc)(struct tern_backend *be, size_t n_bytes, struct tern_buf **out);
    /* Makes a buffer holding `n_bytes` of host data. A backend that can use
     * host memory in place (CPU) may keep a borrowed pointer: the caller keeps
     * `data` alive and unchanged for the buffer's life. */
    enum tern_status (*buf_from_host)(struct tern_backend *be, const void *data, size_t n_bytes,
                                      struct tern_buf **out);
    void (*buf_free)(struct tern_backend *be, struct tern_buf *buf);
    /* Host -> device. `src` may be reused as soon as this returns; the copy
     * is ordered before every op issued after it (it need not have reached
     * the device yet: CUDA stages small uploads through pinned memory). */
    enum tern_status (*upload)(struct tern_backend *be, const struct tern_dtensor *dst,
                               const void *src, size_t n_bytes);
    enum tern_status (*download)(struct tern_backend *be, void *dst,
                                 const struct tern_dtensor *src, size_t n_bytes);
    /* Device-to-device copy of n_bytes from src to dst (views of any dtype). */
    enum tern_status (*copy)(struct tern_backend *be, const struct tern_dtensor *dst,
                             const struct tern_dtensor *src, size_t n_bytes);
    /* Free and total device memory in bytes (host RAM for the CPU). */
    enum tern_status (*mem_info)(struct tern_backend *be, size_t *free_bytes, size_t *total_bytes);
    enum tern_status (*sync)(struct tern_backend *be);

    /* ---- ops ---- */
    /* out[t] = table[idx[t]] (rows gathered, dequantized when quantized).
     * table: a linear [rows, width]; idx: [n] I32; out: [n, width]. Also used
     * to gather the hidden rows whose logits are wanted. */
    enum tern_status (*get_rows)(struct tern_backend *be, const struct tern_linear *table,
                                 const struct tern_dtensor *idx, struct tern_dtensor *out);
    /* out = x / sqrt(mean(x^2) + eps) * w, over the last dim of x.
     * x, out: [rows, dim] (out may alias x); w: [dim], or NULL for a norm
     * without weight. The last dim of x may be smaller than its row
     * (per-head norm): rows = numel / dim. */
    enum tern_status (*rmsnorm)(struct tern_backend *be, const struct tern_dtensor *x,
                                const struct tern_dtensor *w, float eps, struct tern_dtensor *out);
    /* residual += x; out = rmsnorm(residual) * w. Fused residual add + norm.
     * x and out share a dtype; residual has it too or is F32. rmsnorm's x may
     * likewise be F32 with an act_dtype out, and add's b act_dtype with F32
     * a and out. */
    enum tern_status (*add_rmsnorm)(struct tern_backend *be, struct tern_dtensor *residual,
                                    const struct tern_dtensor *x, const struct tern_dtensor *w,
                                    float eps, struct tern_dtensor *out);
    /* y[:, y_col : y_col + out] = x W^T (+ bias). x: [T, in]; y: [T, width]
     * with width >= y_col + out. float32 accumulation. y may be F32 or the
     * activation dtype. */
    enum tern_status (*matmul)(struct tern_backend *be, const struct tern_dtensor *x,
                               const struct tern_linear *w, struct tern_dtensor *y, int64_t y_col);
    /* Rotates the first rotary_dim dims of each head of x in place.
     * x: rows of [n_heads * head_dim] starting at column x_col of a
     * [T, width] tensor (so q and k can be rotated inside the qkv rows);
     * positions: [T] I32. */
    enum tern_status (*rope)(struct tern_backend *be, struct tern_dtensor *x, int64_t x_col,
                             int32_t n_heads, const struct tern_dtensor *positions,
                             const struct tern_rope *rope);
    /* out = (x - mean(x)) / sqrt(var(x) + eps) * w + b over the last dim of
     * x (LayerNorm; var the mean of squared deviations, float32), with
     * rmsnorm's shapes and dtypes; w: [dim] or NULL (no weight), b: [dim]
     * or NULL (no bias). */
    enum tern_status (*layernorm)(struct tern_backend *be, const struct tern_dtensor *x,
                                  const struct tern_dtensor *w, const struct tern_dtensor *b,
                                  float eps, struct tern_dtensor *out);
    /* Per-head RMSNorm of n_heads heads starting at column x_col of x [T,
     * width], in place; w: [head_dim] (Qwen3 q_norm/k_norm), or NULL for a
     * norm without weight (Gemma 4's v_norm). One head as wide as all of
     * them is the full-width q/k norm of OLMo 2 (w: [n_heads * head_dim]). */
    enum tern_status (*head_rmsnorm)(struct tern_backend *be, struct tern_dtensor *x,
                                     int64_t x_col, int32_t n_heads, int32_t head_dim,
                                     const struct tern_dtensor *w, float eps);
    /* Writes token t's k and v (columns k_col / v_col of qkv [T, width], each
     * n_kv_heads * head_dim wide) into slot slot_mapping[t] of the cache. */
    enum tern_status (*kv_store)(struct tern_backend *be, const struct tern_dtensor *qkv,
                                 int64_t k_col, int64_t v_col, const struct tern_batch_dev *batch,
                                 struct tern_kv_layer *kv);
    /* Causal attention of each query token over its sequence's cached K/V
     * (positions <= its own, within sliding_window if set).
     * q: columns [0, n_heads*head_dim) of qkv [T, width]; out: [T, n_heads*head_dim]. */
    enum tern_status (*attention)(struct tern_backend *be, const struct tern_dtensor *qkv,
                                  const struct tern_kv_layer *kv, const struct tern_batch_dev *batch,
                                  const struct tern_attn_params *p, struct tern_dtensor *out);
    /* optional (NULL = absent: callers issue head_rmsnorm, rope and
     * kv_store): a layer's attention prologue in one op. qkv [T, (n_heads +
     * 2 n_kv_heads) * head_dim] holds the q, k and v heads in that order
     * (p gives the counts, rope->head_dim the size). If q_norm is non-NULL,
     * the q heads get head_rmsnorm with q_norm and the k heads with k_norm
     * (eps); then q and k heads get rope at batch->positions; then k and v
     * go to the cache as kv_store(qkv, n_heads * head_dim, (n_heads +
     * n_kv_heads) * head_dim) does (slot -1 skipped). The same arithmetic as
     * that sequence of ops on the same backend (CPU: bitwise, it calls them). */
    enum tern_status (*qk_rope_store)(struct tern_backend *be, struct tern_dtensor *qkv,
                                      const struct tern_dtensor *q_norm,
                                      const struct tern_dtensor *k_norm, float eps,
                                      const struct tern_rope *rope,
                                      const struct tern_attn_params *p,
                                      const struct tern_batch_dev *batch,
                                      struct tern_kv_layer *kv);
    /* optional (NULL = absent: callers issue matmul(x, w, qkv, 0), then
     * qk_rope_store without head norms): the fused [q | k | v] projection
     * and the prologue after it in one op (w: [(n_heads + 2 n_kv_heads) *
     * head_dim, in]). The same bits in qkv and the caches as that pair of
     * ops on the same backend (CUDA rotates and stores in the 4-bit decode
     * GEMV's epilogue where it can: cuda_quant.c says when). */
    enum tern_status (*matmul_rope_store)(struct tern_backend *be, const struct tern_dtensor *x,
                                          const struct tern_linear *w, struct tern_dtensor *qkv,
                                          const struct tern_rope *rope,
                                          const struct tern_attn_params *p,
                                          const struct tern_batch_dev *batch,
                                          struct tern_kv_layer *kv);
    /* out = silu(gate) * up, where gate_up: [T, 2*ff] holds gate in columns
     * [0, ff) and up in [ff, 2ff); out: [T, ff]. */
    enum tern_status (*silu_mul)(struct tern_backend *be, const struct tern_dtensor *gate_up,
                                 struct tern_dtensor *out);
    /* optional (NULL = absent: callers issue matmul, then silu_mul):
     * act = silu_mul(x W^T (+ bias)) for w a [2 ff, in] linear whose rows
     * [0, ff) are the gate and [ff, 2 ff) the up projection (gate_up_proj).
     * Results equal matmul(x, w, gate_up, 0) then silu_mul(gate_up, act)
     * (bitwise on CPU and CUDA). gate_up [T, 2 ff] is scratch the backend
     * may write (the CPU composes through it; CUDA folds silu_mul into the
     * decode GEMV's epilogue where it can); act [T, ff]. */
    enum tern_status (*matmul_glu)(struct tern_backend *be, const struct tern_dtensor *x,
                                   const struct tern_linear *w, struct tern_dtensor *gate_up,
                                   struct tern_dtensor *act);
    /* out[t, i] = act(x[t, x_col + i]) * y[t, y_col + i] for i < out's
     * width: a gated activation whose two operands are column windows of
     * any [T, width] tensors of the activation dtype (or F32: y may be F32
     * with x and out of the activation dtype). GeGLU over a gate_up buffer
     * is x = y = gate_up, x_col 0, y_col ff. y == NULL: out = act(x), the
     * activation alone (a non-gated MLP). */
    enum tern_status (*act_mul)(struct tern_backend *be, const struct tern_dtensor *x,
                                int64_t x_col, const struct tern_dtensor *y, int64_t y_col,
                                enum tern_glu_act act, struct tern_dtensor *out);
    /* out = x * c * s[0] elementwise (s: a [1] tensor of a float dtype, or
     * NULL for 1), float32 arithmetic. x F32 or the activation dtype; out
     * the same shape in either (so it also converts; may alias x). */
    enum tern_status (*scale)(struct tern_backend *be, const struct tern_dtensor *x, float c,
                              const struct tern_dtensor *s, struct tern_dtensor *out);
    /* x = cap * tanh(x / cap) in place (logit softcapping); x F32. */
    enum tern_status (*softcap)(struct tern_backend *be, struct tern_dtensor *x, float cap);
    /* out = a + b, elementwise, same shapes (out may alias a). */
    enum tern_status (*add)(struct tern_backend *be, const struct tern_dtensor *a,
                            const struct tern_dtensor *b, struct tern_dtensor *out);
    /* optional (NULL = no mixture-of-experts layers): the router's choice.
     * For each token t: p = softmax(logits[t]) over the E experts in
     * float32; ids[t] = the top_k experts by p, highest first, an equal p
     * going to the lower expert index; weights[t, j] = p[ids[t, j]], divided
     * by the k values' sum when renorm, then times expert_scale[ids[t, j]]
     * when expert_scale ([E], a float dtype) is non-NULL. logits [T, E] F32;
     * ids [T, top_k] I32; weights [T, top_k] F32. */
    enum tern_status (*moe_route)(struct tern_backend *be, const struct tern_dtensor *logits,
                                  int32_t top_k, bool renorm,
                                  const struct tern_dtensor *expert_scale,
                                  struct tern_dtensor *ids, struct tern_dtensor *weights);
    /* optional (with moe_route): the experts' outputs, weighted and summed.
     * out[t] = sum over token t's experts e = ids[t, j] in increasing e of
     * weights[t, j] * down_e(act(gate_e x[t]) * up_e x[t]), float32 sums
     * starting from 0 (as transformers' index_add_ over experts in order),
     * then + sigmoid(shared_gate[t]) * shared[t] (io->shared). A token's
     * output depends on its own x row, ids and weights only (batch
     * invariant); how a backend groups the work (by token, or tokens
     * sorted by expert) is its own. */
    enum tern_status (*moe_experts)(struct tern_backend *be, const struct tern_experts *w,
                                    enum tern_glu_act act, const struct tern_moe_io *io);
    /* out[r] = argmax of row r of logits [n, vocab] F32 (first index on ties). */
    enum tern_status (*argmax)(struct tern_backend *be, const struct tern_dtensor *logits,
                               struct tern_dtensor *out);
    /* optional (NULL on CPU): res[r] = the token sample/sample.h's
     * sampler draws from row r of logits [n, vocab] F32 under params[r]
     * (edits, temperature or greedy, top_k, top_p, min_p, the (seed, stream,
     * step) RNG) and the raw log-softmax of it; top[r] = the n_top best raw
     * logprobs. Sums run in double in another order than the CPU's: a draw
     * can differ only when a cumulative sum is within rounding of u * z or
     * of top_p. */
    enum tern_status (*sample)(struct tern_backend *be, const struct tern_dtensor *logits,
                               const struct tern_sample_io *io);

    /* optional (NULL = no ggml block types): true when matmul and get_rows
     * take a linear of ggml block type `ggml_type` (tern_linear's ggml
     * layout) as it is. The loader dequantizes the tensors of other types
     * to BF16 at load. */
    bool (*ggml_type_ok)(const struct tern_backend *be, uint32_t ggml_type);

    /* ---- optional: the whole decode step as one op (NULL where absent) ----
     * step_prepare makes a plan that runs a model's decode step for ONE
     * sequence with one new token as a single op, or returns
     * TERN_E_UNSUPPORTED (the reason in the error text) when the model or
     * the device does not fit it; the plan may keep the weights in another
     * layout too (CUDA: cuda_step.cu's records, about the quantized weights'
     * size again). step_run: residual [1, hidden] F32 holds the token's
     * embedding on entry (and is scratch); the layers (attention over the
     * paged cache as `attention` sees it, the new token's k and v stored at
     * its slot), the final norm and the head give logits [1, vocab] F32.
     * ids (I32, NULL: none) gets the logits' argmax in element 0, the
     * `argmax` op's answer for that row, and ids_at (I32 [n], NULL: none)
     * gets it in element pos + 1 (the position the token takes) too, so a
     * decode loop can feed it back and read a run of tokens at once.
     * Not bitwise the op-by-op path (other reduction orders): callers keep
     * it out of deterministic mode. */
    enum tern_status (*step_prepare)(struct tern_backend *be, const struct tern_step_desc *d,
                                     struct tern_step_plan **out);
    enum tern_status (*step_run)(struct tern_backend *be, struct tern_step_plan *plan,
                                 struct tern_dtensor *residual, const struct tern_batch_dev *batch,
                                 struct tern_kv_layer *kv, struct tern_dtensor *logits,
                                 struct tern_dtensor *ids, struct tern_dtensor *ids_at);
    void (*step_free)(struct tern_backend *be, struct tern_step_plan *plan); /* NULL: no-op */

    /* ---- optional: capture and replay (NULL where unsupported, e.g. CPU) ----
     * Between graph_begin and graph_end the ops above (not the memory calls)
     * are recorded instead of run; graph_launch replays them with the same
     * device addresses and launch shapes, reading whatever the buffers hold
     * then. So a caller refreshes its inputs (upload) into the same buffers
     * before each launch. An op that fails while recording leaves the
     * capture open: the caller still calls graph_end (which then fails and
     * makes no graph). */
    enum tern_status (*graph_begin)(struct tern_backend *be);
    enum tern_status (*graph_end)(struct tern_backend *be, struct tern_graph **out);
    enum tern_status (*graph_launch)(struct tern_backend *be, struct tern_graph *g);
    void (*graph_free)(struct tern_backend *be, struct tern_graph *g); /* NULL g: no-op */
};

/* The common head of every backend instance; implementations embed it first. */
struct tern_backend {
    const struct tern_backend_ops *ops;
    enum tern_device device;
    enum tern_dtype act_dtype; /* activations between ops */
    enum tern_dtype kv_dtype;  /* KV cache entries */
    int32_t n_threads;         /* CPU threads for the CPU backend */
    bool deterministic;        /* fixed reduction order regardless of batch */
};

struct tern_backend_params {
    enum tern_device device;
    int device_index;
    int32_t n_threads; /* 0 = all cores */
    bool deterministic;
};

/* Creates a backend. TERN_DEVICE_AUTO picks CUDA when built with it and a
 * device is present, else the CPU. Errors name what was missing. */
enum tern_status tern_backend_create(const struct tern_backend_params *params,
                                     struct tern_backend **out);
void tern_backend_destroy(struct tern_backend *be);

/* True when be's matmul and get_rows take linears of ggml block type
 * ggml_type as they are (ops->ggml_type_ok; false where it is NULL). */
bool tern_backend_ggml_ok(const struct tern_backend *be, uint32_t ggml_type);

/* True when the build includes the CUDA backend and a device is visible. */
bool tern_backend_cuda_available(void);

/* ---- helpers over the interface ---- */

static inline size_t tern_dtensor_numel(const struct tern_dtensor *t)
{
    return (size_t)tern_shape_numel(t->shape, t->n_dims);
}

static inline size_t tern_dtensor_bytes(const struct tern_dtensor *t)
{
    return tern_dtensor_numel(t) * tern_dtype_size(t->dtype);
}

/* Allocates a fresh buffer holding exactly one tensor of the given shape. */
enum tern_status tern_dtensor_alloc(struct tern_backend *be, enum tern_dtype dtype, int n_dims,
                                    const int64_t *shape, struct tern_dtensor *out);
void tern_dtensor_free(struct tern_backend *be, struct tern_dtensor *t);
/* A view of rows [row0, row0 + n_rows) of a tensor (first dim). */
struct tern_dtensor tern_dtensor_rows(const struct tern_dtensor *t, int64_t row0, int64_t n_rows);

#endif /* TERN_BACKEND_H */
