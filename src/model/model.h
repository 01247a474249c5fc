/*
 * model.h — architectures as descriptor rows, hyperparameters read from
 * config.json, the bound weights, and the decoder forward over a ragged batch.
 *
 * An architecture is a row in arch.c (feature flags over one shared decoder
 * block), not a file of forward code. The model is immutable after load; the
 * mutable state of a forward (scratch activations, KV cache) lives in a
 * `struct tern_fwd` owned by whoever runs it (the engine).
 *
 * Depends on io/, tensor/, backend/ (interface only).
 */
#ifndef TERN_MODEL_H
#define TERN_MODEL_H

#include "backend/backend.h"
#include "io/config.h"
#include "io/safetensors.h"

/* What distinguishes one llama-like family from another. */
struct tern_arch {
    const char *hf_name;    /* config.json architectures[0] */
    bool qkv_bias_default;  /* q/k/v projections carry a bias (Qwen2) */
    bool qk_norm;           /* per-head RMSNorm of q and k before RoPE (Qwen3) */
    bool sliding_window_key; /* honours config.sliding_window (Mistral) */
    bool use_sliding_flag;  /* sliding window only when config.use_sliding_window (Qwen2) */
    bool tied_default;      /* tie_word_embeddings when the key is absent */
};

/* Looks up a row by HF architecture name; NULL if unknown. */
const struct tern_arch *tern_arch_find(const char *hf_name);
/* Comma-separated list of supported names, for error messages. */
const char *tern_arch_supported(void);

enum tern_rope_kind { TERN_ROPE_DEFAULT, TERN_ROPE_LINEAR, TERN_ROPE_LLAMA3, TERN_ROPE_YARN };

/* Hyperparameters, named as in HF config.json where one exists. */
struct tern_hparams {
    int32_t num_hidden_layers;
    int32_t hidden_size;
    int32_t intermediate_size;
    int32_t num_attention_heads;
    int32_t num_key_value_heads;
    int32_t head_dim;
    int32_t vocab_size;
    int32_t max_position_embeddings;
    float rms_norm_eps;
    bool tie_word_embeddings;
    bool attention_bias; /* q/k/v (and o, for Llama's attention_bias) biases */
    bool o_bias;
    bool mlp_bias;
    int32_t sliding_window; /* 0 = off */
    /* rope */
    enum tern_rope_kind rope_kind;
    double rope_theta;
    double partial_rotary_factor;
    double rope_factor;
    double rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    int32_t rope_original_max_pos;                      /* llama3, yarn */
    double yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim;
    double yarn_attention_factor; /* <= 0: derived */
    bool yarn_truncate;
    /* token ids from config.json / generation_config.json; -1 when absent */
    int32_t bos_token_id;
    int32_t eos_token_ids[8];
    int32_t n_eos;
};

/* Reads and checks the hyperparameters; errors name the key. */
enum tern_status tern_hparams_read(const struct tern_json_doc *cfg, const struct tern_arch *arch,
                                   struct tern_hparams *hp);

/* Fills inv_freq[rotary_dim / 2] and the attention factor (mscale) for the
 * configured rope variant, exactly as transformers computes them. */
void tern_rope_inv_freq(const struct tern_hparams *hp, int32_t rotary_dim, float *inv_freq,
                        float *mscale);

/* Quantization settings of one linear (MLX affine); bits == 0 for dense. */
struct tern_quant_cfg {
    int32_t bits;
    int32_t group_size;
};

struct tern_layer {
    struct tern_dtensor input_layernorm;          /* [hidden] */
    struct tern_dtensor post_attention_layernorm; /* [hidden] */
    struct tern_linear q_proj;                    /* [n_heads * head_dim, hidden] */
    struct tern_linear k_proj;                    /* [n_kv_heads * head_dim, hidden] */
    struct tern_linear v_proj;                    /* [n_kv_heads * head_dim, hidden] */
    struct tern_linear o_proj;                    /* [hidden, n_heads * head_dim] */
    struct tern_dtensor q_norm, k_norm;           /* [head_dim] (qk_norm only) */
    struct tern_linear gate_proj;                 /* [intermediate, hidden] */
    struct tern_linear up_proj;                   /* [intermediate, hidden] */
    struct tern_linear down_proj;                 /* [hidden, intermediate] */
    /* Device backends: q|k|v and gate|up in one linear each when their
     * formats agree (load.c); the parts above are then views of its rows.
     * weight.buf == NULL: not fused. */
    struct tern_linear qkv_proj;     /* [(n_heads + 2 n_kv_heads) * head_dim, hidden] */
    struct tern_linear gate_up_proj; /* [2 * intermediate, hidden] */
};

struct tern_weights {
    struct tern_linear embed_tokens; /* [vocab, hidden] */
    struct tern_layer *layers;       /* [num_hidden_layers] */
    struct tern_dtensor norm;        /* [hidden] */
    struct tern_linear lm_head;      /* [vocab, hidden] (== embed_tokens when tied) */
    struct tern_buf **bufs;          /* every buffer made at load, for freeing */
    size_t n_bufs, cap_bufs;
    int64_t n_params;
    int64_t n_bytes;
    enum tern_dtype dtype; /* dominant dense dtype */
    int32_t quant_bits;    /* 0 when dense */
    int32_t n_unused;
};

/* Binds and validates every tensor the architecture needs (presence, dtype,
 * shape against the config) and makes backend buffers for them. Reports
 * unused tensors at info level and counts them. */
enum tern_status tern_weights_load(struct tern_backend *be, struct tern_snapshot *snap,
                                   const struct tern_json_doc *cfg, const struct tern_arch *arch,
                                   const struct tern_hparams *hp, bool progress,
                                   struct tern_weights *w);
void tern_weights_free(struct tern_backend *be, struct tern_weights *w);

/* The whole model as the library holds it. */
struct tern_model_core {
    const struct tern_arch *arch;
    struct tern_hparams hp;
    struct tern_backend *be; /* owned */
    struct tern_weights w;
    struct tern_rope rope; /* inv_freq buffer owned here */
    struct tern_attn_params attn;
    /* The backend's one-op decode step for a single sequence (step_prepare),
     * or NULL: the forward then runs op by op. */
    struct tern_step_plan *step;
};

enum tern_status tern_model_core_load(struct tern_snapshot *snap, const struct tern_json_doc *cfg,
                                      const struct tern_backend_params *bp, bool progress,
                                      struct tern_model_core *m);
void tern_model_core_free(struct tern_model_core *m);

/* One captured decode forward (see tern_model_forward_graph). */
struct tern_fwd_graph {
    int32_t n_tokens, n_seqs, n_logits, stride, max_seq_len; /* the launch shape */
    struct tern_graph *g;                                    /* NULL: capture failed */
};

#define TERN_FWD_MAX_GRAPHS 64

/* Scratch for forwards of up to max_tokens tokens from up to max_seqs
 * sequences, and up to max_logits logits rows. Allocated once. */
struct tern_fwd {
    int32_t max_tokens, max_seqs, max_blocks_per_seq, max_logits;
    struct tern_dtensor residual; /* [max_tokens, hidden] F32 */
    struct tern_dtensor h;        /* [max_tokens, hidden] normed input of a block */
    struct tern_dtensor qkv;      /* [max_tokens, (n_heads + 2 n_kv) * head_dim] */
    struct tern_dtensor attn;     /* [max_tokens, n_heads * head_dim] */
    struct tern_dtensor proj;     /* [max_tokens, hidden] o_proj / down_proj output */
    struct tern_dtensor gate_up;  /* [max_tokens, 2 * intermediate] */
    struct tern_dtensor act;      /* [max_tokens, intermediate] */
    struct tern_dtensor hl;       /* [max_logits, hidden] rows whose logits are wanted */
    struct tern_dtensor logits;   /* [max_logits, vocab] F32 */
    struct tern_dtensor ids_out;  /* [max_logits] I32 (argmax) */
    struct tern_dtensor meta;     /* I32 batch arrays at fixed offsets (forward.c, META_*) */
    int32_t *meta_host;           /* the same layout on the host, uploaded in one copy */
    struct tern_batch host_view;  /* the batch as ops see it (block tables repacked) */
    struct tern_batch_dev batch;
    /* Decode graphs (backends with graph_begin): one per launch shape. */
    bool use_graphs;              /* false: decode batches run op by op (same results) */
    int32_t n_graphs;
    struct tern_fwd_graph graphs[TERN_FWD_MAX_GRAPHS];
    /* [max_blocks_per_seq * block_size + 1] I32: a decode's tokens by the
     * position they take (the step op's argmax writes element pos + 1) */
    struct tern_dtensor ids_at;
    /* The last forward ran as the backend's step op (one sequence, one
     * token, one logits row), which left its row's argmax in
     * batch.token_ids[0] (the next step's input: pass &batch.token_ids as
     * ids_dev) and in ids_at[pos + 1]: no argmax op is needed. */
    bool argmax_fused;
};

enum tern_status tern_fwd_init(struct tern_model_core *m, int32_t max_tokens, int32_t max_seqs,
                               int32_t max_blocks_per_seq, int32_t max_logits, int32_t block_size,
                               struct tern_fwd *f);
void tern_fwd_deinit(struct tern_model_core *m, struct tern_fwd *f);

/* The KV cache of a model: one K and one V tensor per layer over a pool of
 * n_blocks blocks of block_size tokens. */
struct tern_kv_cache {
    int32_t n_blocks, block_size;
    struct tern_kv_layer *layers; /* [num_hidden_layers] */
};

/* Bytes one block takes over all layers (K and V). */
size_t tern_kv_block_bytes(const struct tern_model_core *m, int32_t block_size);
enum tern_status tern_kv_cache_init(struct tern_model_core *m, int32_t n_blocks,
                                    int32_t block_size, struct tern_kv_cache *kv);
void tern_kv_cache_deinit(struct tern_model_core *m, struct tern_kv_cache *kv);

/* Runs the decoder over one ragged batch: writes the batch's K/V into the
 * cache and leaves logits of the rows in batch->logits_idx in f->logits
 * (device memory, [n_logits, vocab] F32). */
enum tern_status tern_model_forward(struct tern_model_core *m, struct tern_fwd *f,
                                    struct tern_kv_cache *kv, const struct tern_batch *batch);

/* The same, with the batch's token ids taken from a device tensor (I32,
 * n_tokens entries) instead of batch->token_ids: decode can then feed the
 * previous step's argmax back without a host round trip. ids_dev ==
 * &f->batch.token_ids says they are there already (after a forward with
 * f->argmax_fused): neither copied nor uploaded. */
enum tern_status tern_model_forward_ids(struct tern_model_core *m, struct tern_fwd *f,
                                        struct tern_kv_cache *kv, const struct tern_batch *batch,
                                        const struct tern_dtensor *ids_dev);

/* tern_model_forward_ids for decode batches (one query token per sequence),
 * through a CUDA graph where the backend has graph hooks and f->use_graphs:
 * the layers are captured once per launch shape (n_tokens, n_seqs, n_logits
 * and the bucket of the longest sequence) and replayed after the batch
 * arrays are uploaded to the same device addresses. The first batch of a
 * shape runs op by op (which also picks the matmul algorithms) and is then
 * captured; later ones replay. Results are bitwise those of
 * tern_model_forward_ids: the ops, shapes and addresses are the same. Other
 * batches (prefill chunks, no graph hooks) simply run op by op.
 * The caller keeps n_tokens in few distinct values (the engine pads decode
 * batches to buckets) so that few graphs are made. */
enum tern_status tern_model_forward_graph(struct tern_model_core *m, struct tern_fwd *f,
                                          struct tern_kv_cache *kv,
                                          const struct tern_batch *batch,
                                          const struct tern_dtensor *ids_dev);

/* Rounds a decode batch's longest sequence up to its bucket (a power of two,
 * at least 256, at most `cap`): decode launches are sized from the bucket. */
int32_t tern_fwd_seq_bucket(int32_t max_seq_len, int32_t cap);

#endif /* TERN_MODEL_H */
