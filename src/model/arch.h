/*
 * arch.h — what a model family provides, and the config.json readers the
 * families share.
 *
 * A family lives in src/model/arch/<family>.c with three parts, always in
 * this order:
 *
 *   1. hyperparameters  read_hparams: the shared config.json keys
 *                       (tern_hparams_read_common) and the family's own, with
 *                       errors that name the key;
 *   2. tensor names     names: each canonical tensor's name under the text
 *                       model's prefix ("layers.%d.self_attn.q_proj"; linears
 *                       without ".weight"); the loader finds the prefix
 *                       ("model.", "model.language_model.",
 *                       "language_model.model.") and MLX's quantized
 *                       ".scales" / ".biases" beside each linear;
 *   3. layer plan       plan_layer: what layer i computes
 *                       (struct tern_layer_plan).
 *
 * The blocks a plan is run with (attention, MLP, norms, rope kinds) are
 * shared: model/blocks.c. Depends on model.h.
 */
#ifndef TERN_MODEL_ARCH_H
#define TERN_MODEL_ARCH_H

#include "model/model.h"

/* Canonical tensors. Model-level ones first, then per-layer ones (names
 * with "%d" for the layer index). */
enum tern_tensor_kind {
    TT_EMBED,           /* linear [vocab, hidden] */
    TT_NORM,            /* [hidden] the final norm */
    TT_LM_HEAD,         /* linear [vocab, hidden]; name relative to the wrapper, not the model */
    TT_EMBED_PER_LAYER, /* linear [vocab, L P] */
    TT_PLI_MODEL_PROJ,  /* linear [L P, hidden] */
    TT_PLI_PROJ_NORM,   /* [P] */
    TT_ATTN_NORM,
    TT_ATTN_POST_NORM,
    TT_FFN_NORM,
    TT_FFN_POST_NORM,
    TT_Q,
    TT_K,
    TT_V,
    TT_O,
    TT_Q_NORM,
    TT_K_NORM,
    TT_GATE,
    TT_UP,
    TT_DOWN,
    TT_LAYER_SCALAR,
    TT_PLI_GATE,
    TT_PLI_PROJ,
    TT_PLI_POST_NORM,
    TT_NORM_BIAS,      /* [hidden] LayerNorm biases (norm_bias) */
    TT_ATTN_NORM_BIAS,
    TT_FFN_NORM_BIAS,
    TT_QKV,            /* linear [QD + 2 KD, hidden]: q | k | v as one tensor (Phi 3) */
    TT_GATE_UP,        /* linear [2 F, hidden]: gate | up as one tensor (Phi 3, GLM 4) */
    /* mixture of experts (load_moe.c); the experts come in one of three
     * layouts, and a family names each it can meet */
    TT_ROUTER,          /* linear [N, hidden] */
    TT_ROUTER_SCALE,    /* [hidden] (Gemma 4 router.scale) */
    TT_EXPERT_SCALE,    /* [N] (Gemma 4 router.per_expert_scale) */
    TT_EXPERTS_GATE_UP, /* Hugging Face fused: [N, 2 I, hidden] (gate rows, then up rows) */
    TT_EXPERTS_DOWN,    /* Hugging Face fused: [N, hidden, I] */
    TT_EXPERT_GATE,     /* Hugging Face per expert: linear [I, hidden]; "%d" layer, then expert */
    TT_EXPERT_UP,
    TT_EXPERT_DOWN,     /* linear [hidden, I] */
    TT_SWITCH_GATE,     /* MLX stacked (switch_mlp / switch_glu): linear [N, I, hidden] */
    TT_SWITCH_UP,
    TT_SWITCH_DOWN,     /* [N, hidden, I] */
    TT_SHARED_GATE,     /* Qwen2-MoE's shared expert: the MLP's tensors in an MoE layer */
    TT_SHARED_UP,
    TT_SHARED_DOWN,
    TT_SHARED_EXPERT_GATE, /* linear [1, hidden] */
    TT_MLP_POST_NORM,   /* [hidden] Gemma 4 post_feedforward_layernorm_1 */
    TT_MOE_PRE_NORM,    /* [hidden] pre_feedforward_layernorm_2 */
    TT_MOE_POST_NORM,   /* [hidden] post_feedforward_layernorm_2 */
    TT_N
};

struct tern_family {
    const char *name;     /* for messages: "llama", "gemma", "gemma4" */
    size_t hparams_bytes; /* size of the family's own hyperparameter struct (fh) */
    /* 1. config.json into hp (the shared keys through
     * tern_hparams_read_common, with the family's defaults) and the
     * family's own struct fh (zeroed, hparams_bytes). */
    enum tern_status (*read_hparams)(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, void *fh);
    /* 2. Tensor names (NULL: the family has no such tensor). Where a
     * family names TT_QKV or TT_GATE_UP and the snapshot has that tensor,
     * it is bound as the fused linear (the parts become views of its rows);
     * otherwise the parts are read by their own names. */
    const char *names[TT_N];
    /* 3. Layer i's plan, from the hyperparameters alone. */
    void (*plan_layer)(const struct tern_hparams *hp, const void *fh, int variant, int32_t layer,
                       struct tern_layer_plan *p);
};

extern const struct tern_family tern_family_llama;
extern const struct tern_family tern_family_mixtral; /* llama.c's rows, Mixtral's names */
extern const struct tern_family tern_family_gemma;  /* Gemma 1 */
extern const struct tern_family tern_family_gemma2; /* Gemma 2, 3 */
extern const struct tern_family tern_family_gemma4;
extern const struct tern_family tern_family_phi3; /* llama.c's rows, fused tensors */
extern const struct tern_family tern_family_olmo;
extern const struct tern_family tern_family_glm4;
extern const struct tern_family tern_family_starcoder2;
extern const struct tern_family tern_family_cohere;

/* A family's defaults for the shared keys (transformers' config class
 * defaults), for keys a snapshot may leave out (multimodal wrappers'
 * text_config do). 0 / false: the key is required (numbers), or the
 * generic default (head_dim hidden / heads, eps 1e-6, rope_theta 1e4,
 * max_position_embeddings 4096, kv heads = heads). */
struct tern_hparams_defaults {
    int32_t num_hidden_layers, hidden_size, intermediate_size, num_attention_heads;
    int32_t num_key_value_heads, head_dim, vocab_size, max_position_embeddings;
    double rms_norm_eps, rope_theta;
    bool tie_word_embeddings;
    int32_t bos_token_id, eos_token_id; /* 0: none */
};

/* The keys every family shares: num_hidden_layers, hidden_size,
 * intermediate_size, num_attention_heads, num_key_value_heads, head_dim,
 * vocab_size, max_position_embeddings, rms_norm_eps, tie_word_embeddings,
 * the main rope as ropes[0] (theta key rope_theta),
 * layer_types (has_layer_types, layer_sliding: "sliding_attention" or
 * "full_attention", anything else an error naming the entry) and bos/eos
 * ids. */
enum tern_status tern_hparams_read_common(const struct tern_json_doc *cfg,
                                          const struct tern_hparams_defaults *d,
                                          struct tern_hparams *hp);

/* Reads a rope from config.json: rope_scaling (transformers 4) or
 * rope_parameters (5); `section` non-NULL reads rope_parameters[section]
 * (transformers 5 keeps one per layer type there: "full_attention",
 * "sliding_attention"); theta_key names the top-level theta key for that
 * rope ("rope_theta", "rope_local_base_freq"), theta_def its default;
 * theta_key NULL: no top-level key counts (theta and partial_rotary_factor
 * come from the rope object or the defaults). */
enum tern_status tern_rope_cfg_read(const struct tern_json_doc *cfg, const char *section,
                                    const char *theta_key, double theta_def,
                                    struct tern_rope_cfg *rc);


/* A softcap key (attn_logit_softcapping, final_logit_softcapping): def when
 * absent, 0 (none) when null, else a positive value. */
enum tern_status tern_cfg_softcap(const struct tern_json_doc *cfg, const char *key, double def,
                                  float *out);

/* A family's expert counts into mp: n_key (experts), k_key (experts per
 * token), i_key (each expert's intermediate size), each with its default
 * (< 0: required). 0 experts means none (the layers stay dense); otherwise
 * 1 <= per token <= experts, or an error naming the keys. */
enum tern_status tern_moe_read_counts(const struct tern_json_doc *cfg, const char *n_key,
                                      int64_t n_def, const char *k_key, int64_t k_def,
                                      const char *i_key, int64_t i_def, struct tern_moe_plan *mp);

/* A plan's attention defaults from the common hyperparameters: heads, kv
 * heads, head_dim, scale 1/sqrt(head_dim), rope 0, no window, the layer's own
 * K/V, SwiGLU of intermediate_size. */
void tern_layer_plan_default(const struct tern_hparams *hp, int32_t layer,
                             struct tern_layer_plan *p);

#endif /* TERN_MODEL_ARCH_H */
