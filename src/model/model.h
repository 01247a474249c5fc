/*
 * model.h — a model as a list of layers, each planned from config.json by
 * its family; the bound weights; and the decoder forward over a ragged batch.
 *
 * A family (src/model/arch/<family>.c) says three things, in this order: its
 * hyperparameters (the config.json keys it reads on top of the shared ones),
 * its tensor names (HF and MLX layouts), and its layer plan (what each layer
 * computes: the attention's geometry, rope, window and norms, the
 * feed-forward, the extras). The forward (forward.c, blocks.c) runs any plan
 * through shared blocks; the fast paths of a backend are chosen by what a
 * plan needs (tern_model_is_plain), never by a family's name.
 *
 * The model is immutable after load; the mutable state of a forward (scratch
 * activations, KV cache) lives in a `struct tern_fwd` and a
 * `struct tern_kv_cache` owned by whoever runs it (the engine).
 *
 * Depends on io/, tensor/, backend/ (interface only).
 */
#ifndef TERN_MODEL_H
#define TERN_MODEL_H

#include "backend/backend.h"
#include "io/config.h"
#include "io/wsource.h"

struct tern_family;

/* One row of the architecture table: a config.json architectures[0] value,
 * the family that plans it, and the family's variant for it. */
struct tern_arch {
    const char *hf_name;
    const struct tern_family *family;
    int variant; /* family-defined (e.g. llama.c: which llama-like row) */
};

/* Looks up a row by HF architecture name; NULL if unknown. */
const struct tern_arch *tern_arch_find(const char *hf_name);
/* Comma-separated list of supported names, for error messages. */
const char *tern_arch_supported(void);

enum tern_rope_kind {
    TERN_ROPE_DEFAULT,
    TERN_ROPE_LINEAR,
    TERN_ROPE_LLAMA3,
    TERN_ROPE_YARN,
    TERN_ROPE_PROPORTIONAL, /* Gemma 4: the first rot/2 pairs rotate, the rest do not */
    TERN_ROPE_LONGROPE,     /* Phi 3: short or long per-pair factors, chosen by the context */
    TERN_ROPE_DYNAMIC,      /* dynamic NTK: theta grows with a context past max_position_embeddings */
};

#define TERN_ROPE_MAX_FACTORS 256

/* One rotary embedding as config.json describes it (rope_scaling or
 * rope_parameters), before frequencies are computed. */
struct tern_rope_cfg {
    enum tern_rope_kind kind;
    double theta;
    double partial_rotary_factor;
    double factor;
    double low_freq_factor, high_freq_factor; /* llama3 */
    int32_t original_max_pos;                 /* llama3, yarn */
    double yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim;
    double yarn_attention_factor; /* <= 0: derived */
    bool yarn_truncate;
    bool interleaved; /* pairs (2i, 2i + 1) rotate (GLM 4, Cohere, ERNIE 4.5); else (i, i + rot/2) */
    int32_t max_pos;  /* max_position_embeddings: longrope's implicit factor, dynamic's threshold */
    /* longrope: one factor per rotated pair; attention factor <= 0: derived */
    int32_t n_factors;
    float short_factor[TERN_ROPE_MAX_FACTORS], long_factor[TERN_ROPE_MAX_FACTORS];
    double longrope_attention_factor;
};

/* Whether a rope's frequencies depend on the context a forward state is
 * sized for (longrope, dynamic NTK): tern_rope_inv_freq's `context`. */
bool tern_rope_cfg_by_context(const struct tern_rope_cfg *rc);

#define TERN_MAX_ROPES 4
#define TERN_MAX_LAYERS 512

enum tern_act { TERN_ACT_SILU, TERN_ACT_GELU_TANH };

/* A layer's feed-forward: the dense gated MLP, a mixture of experts, or
 * both side by side (Gemma 4's MoE layers; Qwen2-MoE's shared expert). */
enum tern_ffn {
    TERN_FFN_MLP,     /* f = down(act(gate h) * (up h)) */
    TERN_FFN_MOE,     /* f = experts(h) */
    TERN_FFN_MLP_MOE, /* f = mlp(h) (gated) + experts(h), as tern_moe_plan says */
};

/* The experts of a layer (ffn TERN_FFN_MOE or TERN_FFN_MLP_MOE):
 *
 *   p = softmax(router r)            r = h, or with router_norm (Gemma 4)
 *                                    rmsnorm(x) * router_scale * hidden^-1/2
 *                                    of the residual x
 *   the top_k experts by p, their weights p (/ their sum when norm_topk)
 *   (* per_expert_scale[e] when expert_scale)
 *   experts(h) = sum of weight * down_e(act(gate_e h) * (up_e h))
 *
 * and with an MLP beside them:
 *   shared_expert  f = experts(h) + sigmoid(h shared_gate) * mlp(h)
 *                  (Qwen2-MoE: the MLP's tensors are the shared expert's)
 *   own_norms      f = norm(mlp(h), mlp_post_norm)
 *                      + norm(experts(norm(x, moe_pre_norm)), moe_post_norm)
 *                  (Gemma 4; ffn_post_norm then applies to f)
 *   neither        f = mlp(h) + experts(h) */
struct tern_moe_plan {
    int32_t n_experts, top_k;
    int64_t intermediate; /* each expert's */
    enum tern_act act;
    bool norm_topk;
    bool expert_scale;
    bool router_norm;
    bool own_norms;
    bool shared_expert;
};

/* The most experts a token may be routed to (top_k). */
#define TERN_MOE_MAX_K 32

/* The normalisation of the residual stream (input, post and final norms). */
enum tern_norm_kind {
    TERN_NORM_RMS,   /* x / rms(x) * w */
    TERN_NORM_LAYER, /* (x - mean) / std * w (+ b with norm_bias) */
};

/* What one layer computes. The layer runs
 *
 *   h = norm(x, attn_norm)                  (no_input_norms: h = x)
 *   a = o_proj(attention(q, k, v))          q/k/v from h; per plan: head norms
 *                                           (per head or full width), rope (or
 *                                           none), window, softcap, shared KV
 *   a = norm(a, attn_post_norm)             when attn_post_norm
 *   a = a * residual_scale                  when residual_scale (Granite, MiniCPM)
 *   x = x + a
 *   h = norm(x, ffn_norm)                   (no_input_norms: h = x; parallel:
 *                                           h stays the attention's input)
 *   f = down(act(gate h) * (up h))          (mlp_plain: down(act(up h)));
 *                                           ffn: the MLP, experts, or both
 *                                           (struct tern_moe_plan)
 *   f = norm(f, ffn_post_norm)              when ffn_post_norm
 *   f = f * residual_scale                  when residual_scale
 *   x = x + f
 *   x = x + per_layer_input block           when per_layer_input (Gemma 4)
 *   x = x * layer_scalar                    when layer_scalar (Gemma 4)
 */
struct tern_layer_plan {
    /* attention */
    struct tern_attn_params attn; /* heads, kv heads, head_dim, scale, window, softcap */
    int32_t rope;                 /* index into tern_hparams.ropes, or -1: no rope (NoPE) */
    bool qkv_bias, o_bias;
    bool qk_norm;      /* per-head RMSNorm of q and k (q_norm, k_norm weights) */
    bool qk_norm_full; /* RMSNorm of all of q and all of k (OLMo 2: weights [QD], [KD]) */
    bool v_norm;       /* per-head RMSNorm of v, no weight (Gemma 4) */
    bool k_eq_v;       /* no v_proj: the values are the raw key projection */
    int32_t kv_source; /* the layer whose K/V this one reads (itself unless shared) */
    /* norms around the blocks */
    bool attn_post_norm, ffn_post_norm;
    bool no_input_norms; /* the blocks read x itself: no attn_norm / ffn_norm (OLMo 2) */
    bool parallel;       /* the MLP reads the attention's input norm: x += a + f (Cohere) */
    float residual_scale; /* each block's output times this as it joins x (0: 1) */
    /* feed-forward */
    enum tern_ffn ffn;     /* TERN_FFN_MLP (0) unless the family plans experts */
    int64_t intermediate;  /* the MLP's (unused with TERN_FFN_MOE) */
    enum tern_act act;
    bool mlp_bias;
    bool mlp_plain; /* no gate: f = down(act(up h)) (Starcoder 2) */
    struct tern_moe_plan moe;
    /* extras */
    bool layer_scalar;
    bool per_layer_input;
};

/* Hyperparameters, named as in HF config.json where one exists. The
 * per-layer values live in the plans; the fields below that a plan can
 * vary hold the typical layer's value (the first layer's), for reports. */
struct tern_hparams {
    int32_t num_hidden_layers;
    int32_t hidden_size;
    int32_t intermediate_size;
    int32_t num_attention_heads;
    int32_t num_key_value_heads;
    int32_t head_dim;
    int32_t vocab_size;
    int32_t max_position_embeddings;
    float rms_norm_eps;     /* the norms' eps, whatever their kind and key */
    enum tern_norm_kind norm;
    bool norm_bias;         /* LayerNorms add a bias */
    bool tie_word_embeddings;
    float embed_scale;      /* embeddings times this (0: not scaled) */
    bool embed_scale_bf16_mlx; /* mlx-lm rounds it to bf16 (its gemma3): so do MLX snapshots */
    float final_softcap;    /* logits = c * tanh(logits / c) (0: none) */
    float logit_scale;      /* logits times this, before the softcap (0: not scaled) */
    bool norm_plus_one;     /* every RMSNorm weight applies as (1 + w) (Gemma) */
    int32_t per_layer_dim;  /* Gemma 4 per-layer inputs: width per layer (0: none) */
    int32_t per_layer_vocab; /* rows of their embedding table */
    int32_t sliding_window; /* the sliding layers' window in tokens (0: none) */
    bool has_layer_types;   /* config.json lists layer_types: layer_sliding holds it */
    uint8_t layer_sliding[TERN_MAX_LAYERS]; /* 1: layer i is a sliding-window layer */
    int32_t n_ropes;
    struct tern_rope_cfg ropes[TERN_MAX_ROPES];
    /* token ids from config.json / generation_config.json; -1 when absent */
    int32_t bos_token_id;
    int32_t eos_token_ids[8];
    int32_t n_eos;
};

/* Reads config.json's hyperparameters as the architecture's family does
 * (model.c); errors name the key. */
enum tern_status tern_hparams_read(const struct tern_json_doc *cfg, const struct tern_arch *arch,
                                   struct tern_hparams *hp);

/* Fills inv_freq[rotary_dim / 2] and the attention factor (mscale) of a
 * rope, exactly as transformers computes them (float32). `context` is the
 * sequence length the frequencies are for where they depend on it
 * (tern_rope_cfg_by_context): longrope takes its long factors when it is
 * more than original_max_position_embeddings, dynamic NTK grows theta when
 * it is more than max_position_embeddings (transformers' seq_len). */
void tern_rope_inv_freq(const struct tern_rope_cfg *rc, int32_t head_dim, int32_t rotary_dim,
                        int64_t context, float *inv_freq, float *mscale);

/* Quantization settings of one linear (MLX affine); bits == 0 for dense. */
struct tern_quant_cfg {
    int32_t bits;
    int32_t group_size;
};

/* The weights of one layer; a tensor the plan does not use has buf NULL.
 * hidden = E, q width QD = n_heads * head_dim, kv width KD = n_kv_heads *
 * head_dim, intermediate F, per-layer input width P (all per layer). */
struct tern_layer {
    struct tern_dtensor attn_norm;      /* [E] input_layernorm */
    struct tern_dtensor attn_post_norm; /* [E] */
    struct tern_dtensor ffn_norm;       /* [E] (llama: post_attention_layernorm) */
    struct tern_dtensor ffn_post_norm;  /* [E] */
    struct tern_linear q_proj;          /* [QD, E] */
    struct tern_linear k_proj;          /* [KD, E] */
    struct tern_linear v_proj;          /* [KD, E] (k_eq_v: the same as k_proj) */
    struct tern_linear o_proj;          /* [E, QD] */
    struct tern_dtensor q_norm, k_norm; /* [head_dim] (qk_norm_full: [QD], [KD]) */
    struct tern_dtensor attn_norm_bias, ffn_norm_bias; /* [E] LayerNorm biases (norm_bias) */
    struct tern_linear gate_proj;       /* [F, E] (mlp_plain: none) */
    struct tern_linear up_proj;         /* [F, E] (mlp_plain: c_fc) */
    struct tern_linear down_proj;       /* [E, F] */
    struct tern_dtensor layer_scalar;   /* [1] */
    struct tern_linear pli_gate;        /* [P, E] per_layer_input_gate */
    struct tern_linear pli_proj;        /* [E, P] per_layer_projection */
    struct tern_dtensor pli_post_norm;  /* [E] post_per_layer_input_norm */
    /* Mixture of experts (plan.ffn != TERN_FFN_MLP; N experts) */
    struct tern_linear router;         /* [N, E] */
    struct tern_dtensor router_scale;  /* [E] router_norm (Gemma 4 router.scale) */
    struct tern_dtensor expert_scale;  /* [N] per_expert_scale */
    struct tern_experts experts;       /* gate_up [N * 2 I, E], down [N * E, I] (backend.h) */
    struct tern_linear shared_gate;    /* [1, E] shared_expert_gate */
    struct tern_dtensor mlp_post_norm; /* [E] own_norms: post_feedforward_layernorm_1 */
    struct tern_dtensor moe_pre_norm;  /* [E] pre_feedforward_layernorm_2 */
    struct tern_dtensor moe_post_norm; /* [E] post_feedforward_layernorm_2 */
    /* q|k|v and gate|up in one linear each, as the snapshot stores them
     * (Phi 3: qkv_proj, gate_up_proj) or, on device backends, fused at load
     * when their formats agree (load.c); the parts above are then views of
     * its rows. weight.buf == NULL: not fused. */
    struct tern_linear qkv_proj;     /* [QD + 2 KD, E] (k_eq_v: q | k | k) */
    struct tern_linear gate_up_proj; /* [2 F, E] */
};

struct tern_weights {
    struct tern_linear embed_tokens; /* [vocab, hidden] */
    struct tern_layer *layers;       /* [num_hidden_layers] */
    struct tern_dtensor norm;        /* [hidden] */
    struct tern_dtensor norm_bias;   /* [hidden] (norm_bias) */
    struct tern_linear lm_head;      /* [vocab, hidden] (== embed_tokens when tied; weight.buf
                                      * NULL for a headless base model: no logits) */
    /* Gemma 4 per-layer inputs (per_layer_dim P, L layers) */
    struct tern_linear embed_per_layer;    /* [vocab, L P] embed_tokens_per_layer */
    struct tern_linear pli_model_proj;     /* [L P, hidden] per_layer_model_projection */
    struct tern_dtensor pli_proj_norm;     /* [P] per_layer_projection_norm */
    struct tern_buf **bufs;                /* every buffer made at load, for freeing */
    size_t n_bufs, cap_bufs;
    int64_t n_params;
    int64_t n_bytes;
    enum tern_dtype dtype; /* dominant dense dtype */
    int32_t quant_bits;    /* 0 when dense */
    uint32_t ggml_type;    /* the ggml block type most linear parameters are bound in, or 0 */
    int32_t n_unused;
    int64_t expert_bytes_idle; /* expert weight bytes a one-token step leaves unread */
};

/* The whole model as the library holds it. */
struct tern_model_core {
    const struct tern_arch *arch;
    struct tern_hparams hp;
    void *family_hp;               /* the family's own hyperparameters (arch.h), owned */
    struct tern_layer_plan *plans; /* [num_hidden_layers] */
    struct tern_backend *be;       /* owned */
    struct tern_weights w;
    /* The ropes' tables, inv_freq owned here; a rope whose frequencies
     * depend on the context (rope_by_context) has none: each forward state
     * makes its own (tern_fwd_init). */
    struct tern_rope ropes[TERN_MAX_ROPES];
    bool rope_by_context[TERN_MAX_ROPES];
    /* KV groups (model.c): the layers that own K/V, grouped by window (full
     * attention first, then each sliding window): each group is one pool of
     * blocks with its own block tables (kv/kv.h, sched/sched.h), so a
     * sliding layer holds only the blocks its window reaches. */
    int32_t n_kv_groups;
    int32_t kv_group_window[TERN_MAX_KV_GROUPS]; /* 0: full attention */
    int8_t *layer_group;                         /* [num_hidden_layers] (a sharer: its source's) */
    /* The backend's one-op decode step for a single sequence (step_prepare),
     * or NULL: the forward then runs op by op. */
    struct tern_step_plan *step;
};

/* Reads config.json (for a GGUF: the one tern_gguf_hf_config synthesizes),
 * plans the layers, binds and checks every weight of the source (an
 * unknown architecture, a missing or inconsistent key, a tensor of the
 * wrong shape or dtype: an error naming it), uploads the weights. */
enum tern_status tern_model_core_load(struct tern_wsource *ws, const struct tern_json_doc *cfg,
                                      const struct tern_backend_params *bp, bool progress,
                                      struct tern_model_core *m);
void tern_model_core_free(struct tern_model_core *m);

/* tern_model_core_load without a backend or any weight's bytes: reads
 * config.json, plans and checks the layers and ropes, and finds every
 * tensor the plans need in the source with the dtype and shape the config
 * implies (w holds their descriptions, n_unused the tensors left over).
 * The same errors as a load's; free m with tern_model_core_free. */
enum tern_status tern_model_core_check(struct tern_wsource *ws, const struct tern_json_doc *cfg,
                                       struct tern_model_core *m);

/* True when every layer is the plain llama block (pre-norm attention and
 * SwiGLU MLP, one geometry, no post norms, softcaps, scalars, window or
 * shared KV, no embedding scale): the shape the backends' whole-step
 * kernels take. */
bool tern_model_is_plain(const struct tern_model_core *m);

/* Binds and validates every tensor the plans need (presence, dtype, shape
 * against the config) and makes backend buffers for them (load.c). */
enum tern_status tern_weights_load(struct tern_model_core *m, struct tern_wsource *ws,
                                   const struct tern_json_doc *cfg, bool progress);
/* tern_weights_load's checks alone (no backend: be may be NULL in m). */
enum tern_status tern_weights_check(struct tern_model_core *m, struct tern_wsource *ws,
                                    const struct tern_json_doc *cfg);
void tern_weights_free(struct tern_backend *be, struct tern_weights *w); /* be NULL: no buffers */

/* One captured decode forward (see tern_model_forward_graph). */
struct tern_fwd_graph {
    int32_t n_tokens, n_seqs, n_logits, stride, max_seq_len; /* the launch shape */
    struct tern_graph *g;                                    /* NULL: capture failed */
};

#define TERN_FWD_MAX_GRAPHS 64

/* Scratch for forwards of up to max_tokens tokens from up to max_seqs
 * sequences of up to `context` tokens, and up to max_logits logits rows.
 * Allocated once, each buffer as wide as the widest layer needs. The ropes
 * that depend on the context (longrope, dynamic NTK) are made for
 * `context`: a forward state never mixes two tables in one cache. */
struct tern_fwd {
    int32_t max_tokens, max_seqs, max_blocks_per_seq, max_logits;
    int32_t n_groups; /* the model's KV groups */
    struct tern_dtensor residual; /* [max_tokens, hidden] F32 */
    struct tern_dtensor h;        /* [max_tokens, hidden] normed input of a block */
    struct tern_dtensor qkv;      /* [max_tokens, max (QD + 2 KD)] */
    struct tern_dtensor attn;     /* [max_tokens, max QD] */
    struct tern_dtensor proj;     /* [max_tokens, hidden] o_proj / down_proj output */
    struct tern_dtensor gate_up;  /* [max_tokens, 2 max F] */
    struct tern_dtensor act;      /* [max_tokens, max F] */
    struct tern_dtensor pli;      /* [max_tokens, L P] Gemma 4 per-layer inputs (or empty) */
    struct tern_dtensor pli_tmp;  /* [max_tokens, L P] */
    struct tern_fwd_moe {          /* mixture-of-experts layers (empty without) */
        struct tern_dtensor in;      /* [max_tokens, hidden] router / experts' input (Gemma 4) */
        struct tern_dtensor out;     /* [max_tokens, hidden] */
        struct tern_dtensor logits;  /* [max_tokens, max N] F32 router logits */
        struct tern_dtensor gate;    /* [max_tokens, 1] F32 shared expert gate logits */
        struct tern_dtensor ids;     /* [max_tokens, max top_k] I32 */
        struct tern_dtensor weights; /* [max_tokens, max top_k] F32 */
        struct tern_dtensor act;     /* [max_tokens * max top_k, max I] */
        struct tern_dtensor order;   /* I32 [max_tokens * max top_k + max N + 1] */
    } moe;
    struct tern_dtensor hl;       /* [max_logits, hidden] rows whose logits are wanted */
    struct tern_dtensor logits;   /* [max_logits, vocab] F32 */
    struct tern_dtensor ids_out;  /* [max_logits] I32 (argmax) */
    struct tern_dtensor meta;     /* I32 batch arrays at fixed offsets (forward.c, META_*) */
    /* The ropes the layers use: the model's, or for a rope that depends on
     * the context, one made for this state's context (max_blocks_per_seq *
     * block_size tokens a sequence), owned (rope_owned). */
    struct tern_rope ropes[TERN_MAX_ROPES];
    bool rope_owned[TERN_MAX_ROPES];
    int32_t *meta_host;           /* the same layout on the host, uploaded in one copy */
    struct tern_batch host_view;  /* the batch as ops see it (block tables repacked) */
    struct tern_batch_dev batch;  /* KV group 0's view (and the tokens, positions, ...) */
    /* groups >= 1: the same batch with the group's block tables and slots */
    struct tern_batch group_host[TERN_MAX_KV_GROUPS];
    struct tern_batch_dev group_batch[TERN_MAX_KV_GROUPS];
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
    /* Set by the caller before a forward: after the layers (and the
     * logits) the final norm also runs over every token's row, leaving the
     * final hidden states (what transformers calls last_hidden_state) in
     * `residual`, [n_tokens, hidden] F32 on every backend, for pooling into
     * embeddings. Such a forward runs op by op (no step op, no graph). */
    bool want_hidden;
};

enum tern_status tern_fwd_init(struct tern_model_core *m, int32_t max_tokens, int32_t max_seqs,
                               int32_t max_blocks_per_seq, int32_t max_logits, int32_t block_size,
                               int64_t context, struct tern_fwd *f);

/* Rope r's table for sequences of up to `context` tokens: the model's
 * geometry, a new inv_freq buffer (the caller frees it). */
enum tern_status tern_model_rope_make(struct tern_model_core *m, int32_t r, int64_t context,
                                      struct tern_rope *out);
void tern_fwd_deinit(struct tern_model_core *m, struct tern_fwd *f);

/* The KV cache of a model: a K and a V tensor per layer that owns its K/V
 * (a layer that shares reads its source's), over its group's pool of
 * n_blocks[group] blocks of block_size tokens; each layer's tensors have
 * its own kv heads and head_dim. */
struct tern_kv_cache {
    int32_t n_blocks[TERN_MAX_KV_GROUPS], block_size;
    struct tern_kv_layer *layers; /* [num_hidden_layers]; shared layers: zeroed */
};

/* Bytes one block of KV group g takes over its layers (K and V). */
size_t tern_kv_block_bytes(const struct tern_model_core *m, int32_t group, int32_t block_size);
enum tern_status tern_kv_cache_init(struct tern_model_core *m, const int32_t *n_blocks,
                                    int32_t block_size, struct tern_kv_cache *kv);
void tern_kv_cache_deinit(struct tern_model_core *m, struct tern_kv_cache *kv);

/* Runs the decoder over one ragged batch: writes the batch's K/V into the
 * cache and leaves logits of the rows in batch->logits_idx in f->logits
 * (device memory, [n_logits, vocab] F32), and with f->want_hidden every
 * row's final hidden state in f->residual. A model without a head takes no logits
 * rows (TERN_E_UNSUPPORTED). */
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

/* The layers and the logits over the batch already in f->batch (blocks.c):
 * only backend ops, so that it can be captured. */
enum tern_status tern_model_compute(struct tern_model_core *m, struct tern_fwd *f,
                                    struct tern_kv_cache *kv, int64_t T, int32_t n_logits);

#endif /* TERN_MODEL_H */
