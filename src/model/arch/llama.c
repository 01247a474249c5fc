/*
 * llama.c — the llama-like family: one block shape (pre-norm attention with
 * rope and GQA, pre-norm SwiGLU MLP, RMSNorms), the rows differing in
 * biases, head norms, which layers slide or skip rope, fused tensors, rope
 * layout and scalar multipliers.
 *
 *   row         biases (key)                   extras
 *   llama       attention_bias, mlp_bias       -
 *   mistral     attention_bias, mlp_bias       sliding_window on every layer
 *   qwen2       q/k/v always                   use_sliding_window: layers >= max_window_layers
 *   qwen3       attention_bias                 per-head q/k norms; windows as qwen2
 *   seed_oss    attention_bias (q/k/v, on),    head_dim 128 by default
 *               attention_out_bias, mlp_bias
 *   ernie4_5    use_bias (every linear)        interleaved rope pairs (2i, 2i + 1)
 *   smollm3     attention_bias, mlp_bias       no rope on layers no_rope_layers[i] == 0
 *                                              (every no_rope_layer_interval-th);
 *                                              use_sliding_window per layer_types
 *   granite     attention_bias, mlp_bias       embedding_multiplier, residual_multiplier,
 *                                              attention_multiplier (the softmax
 *                                              scale), logits / logits_scaling
 *   minicpm     none                           scale_emb, residual * scale_depth /
 *                                              sqrt(layers), logits / (hidden /
 *                                              dim_model_base)
 *   phi3        none                           qkv_proj and gate_up_proj stored fused;
 *                                              sliding_window on every layer; longrope
 *   mixtral     none                           experts (below); sliding_window on every layer
 *   qwen2_moe   qkv_bias (q/k/v, on)           experts; use_sliding_window: even layers
 *                                              below max_window_layers
 *   qwen3_moe   attention_bias                 experts; per-head q/k norms;
 *                                              use_sliding_window: every layer
 *
 *   experts     which layers                       router (softmax over all, float32; top k)
 *   mixtral     every layer (num_local_experts)    weights renormalised over the k
 *   qwen2_moe   not in mlp_only_layers, and        renormalised when norm_topk_prob;
 *   qwen3_moe   (i + 1) % decoder_sparse_step == 0 qwen2_moe adds a shared expert
 *                                                  times sigmoid(h shared_expert_gate)
 *
 * (layer_types, where config.json has it, says which layers slide.)
 * MiniCPM has no transformers class: mlx-lm's minicpm model is its oracle
 * (which, for tied embeddings only, leaves out the logit division that the
 * original modeling code applies; tern applies it always). Mixtral is a
 * family struct of its own only for its tensor names (block_sparse_moe.*).
 */
#include "model/arch.h"

#include <math.h>
#include <string.h>

enum {
    V_LLAMA, V_MISTRAL, V_QWEN2, V_QWEN3, V_SEED_OSS, V_ERNIE4_5, V_SMOLLM3, V_GRANITE, V_MINICPM,
    V_PHI3, V_MIXTRAL, V_QWEN2_MOE, V_QWEN3_MOE, V_N
};

/* ---- 1. hyperparameters ---- */

struct llama_hparams {
    bool qkv_bias, o_bias, mlp_bias, qk_norm;
    float attn_scale;     /* 0: head_dim^-1/2 */
    float residual_scale; /* 0: none */
    uint8_t no_rope[TERN_MAX_LAYERS]; /* 1: layer i has no rope (SmolLM3) */
    /* experts (the MoE rows): their counts and routing, and which layers have them */
    struct tern_moe_plan moe;
    int64_t shared_intermediate; /* qwen2_moe's shared expert */
    uint8_t moe_layer[TERN_MAX_LAYERS];
};

/* transformers' config defaults for the keys a snapshot may leave out
 * (0: required, or the generic default); rope_theta's is the row's. */
static const struct tern_hparams_defaults llama_defaults[V_N] = {
    [V_SEED_OSS] = {.head_dim = 128, .rms_norm_eps = 1e-6, .rope_theta = 1e4},
    [V_ERNIE4_5] = {.head_dim = 128, .rms_norm_eps = 1e-5, .rope_theta = 5e5,
                    .tie_word_embeddings = true},
    [V_SMOLLM3] = {.rms_norm_eps = 1e-6, .rope_theta = 2e6, .tie_word_embeddings = true},
    [V_GRANITE] = {.rms_norm_eps = 1e-6, .rope_theta = 1e4},
    [V_MINICPM] = {.rms_norm_eps = 1e-6, .rope_theta = 1e6}, /* mlx-lm's */
    [V_PHI3] = {.rms_norm_eps = 1e-5, .rope_theta = 1e4},
    [V_MIXTRAL] = {.rms_norm_eps = 1e-5, .rope_theta = 1e6},
};

/* A positive number from config.json (a multiplier). */
static enum tern_status positive_f(const struct tern_json_doc *cfg, const char *key, double def,
                                   double *out)
{
    TERN_TRY(tern_cfg_float_opt(cfg, key, def, out));
    if (!(*out > 0) || !isfinite(*out))
        return tern_error(TERN_E_FORMAT, "%s: %s must be a positive number, got %g", cfg->path,
                          key, *out);
    return TERN_OK;
}

/* The biases each row reads (see the table above). */
static enum tern_status read_biases(const struct tern_json_doc *cfg, int variant,
                                    struct llama_hparams *fh)
{
    bool ab = false, ob = false, mb = false;
    switch (variant) {
    case V_MINICPM:
    case V_PHI3:
    case V_MIXTRAL:
        return TERN_OK;
    case V_QWEN2_MOE: /* q/k/v only, on unless qkv_bias says otherwise */
        return tern_cfg_bool_opt(cfg, "qkv_bias", true, &fh->qkv_bias);
    case V_ERNIE4_5:
        TERN_TRY(tern_cfg_bool_opt(cfg, "use_bias", false, &ab));
        fh->qkv_bias = fh->o_bias = fh->mlp_bias = ab;
        return TERN_OK;
    case V_SEED_OSS:
        TERN_TRY(tern_cfg_bool_opt(cfg, "attention_bias", true, &ab));
        TERN_TRY(tern_cfg_bool_opt(cfg, "attention_out_bias", false, &ob));
        break;
    default:
        TERN_TRY(tern_cfg_bool_opt(cfg, "attention_bias", false, &ab));
        ob = ab;
    }
    TERN_TRY(tern_cfg_bool_opt(cfg, "mlp_bias", false, &mb));
    fh->qkv_bias = ab || variant == V_QWEN2;
    fh->o_bias = ob && variant != V_QWEN2;
    fh->mlp_bias = mb;
    return TERN_OK;
}

/* Which layers slide: Mistral and Mixtral every layer, Qwen 2/3 from
 * max_window_layers (use_sliding_window), Qwen2-MoE the even layers below
 * it and Qwen3-MoE every layer (use_sliding_window), Phi 3 every layer when
 * sliding_window is set, SmolLM3 its layer_types (use_sliding_window). */
static enum tern_status read_windows(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, const struct llama_hparams *fh)
{
    bool qwen_moe = variant == V_QWEN2_MOE || variant == V_QWEN3_MOE;
    if (variant != V_MISTRAL && variant != V_QWEN2 && variant != V_QWEN3 && variant != V_PHI3 &&
        variant != V_SMOLLM3 && variant != V_MIXTRAL && !qwen_moe)
        return TERN_OK;
    bool use = true;
    if (variant == V_QWEN2 || variant == V_QWEN3 || variant == V_SMOLLM3 || qwen_moe)
        TERN_TRY(tern_cfg_bool_opt(cfg, "use_sliding_window", false, &use));
    int64_t sw, mwl;
    TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window", 0, &sw));
    if (sw < 0) return tern_error(TERN_E_FORMAT, "%s: sliding_window must be >= 0", cfg->path);
    TERN_TRY(tern_cfg_int_opt(cfg, "max_window_layers", 28, &mwl)); /* transformers default */
    /* A window as long as the context changes nothing: no sliding layers. */
    hp->sliding_window = use && sw < hp->max_position_embeddings ? (int32_t)sw : 0;
    if (hp->has_layer_types) return TERN_OK;
    for (int32_t i = 0; i < hp->num_hidden_layers; i++)
        hp->layer_sliding[i] = variant == V_MISTRAL || variant == V_PHI3 ||
                                       variant == V_MIXTRAL || variant == V_QWEN3_MOE
                                   ? 1
                               : variant == V_SMOLLM3   ? fh->no_rope[i]
                               : variant == V_QWEN2_MOE ? (i + 1) % 2 && i < mwl
                                                        : i >= mwl;
    return TERN_OK;
}

/* SmolLM3's no_rope_layers (1: rope, 0: none), or every
 * no_rope_layer_interval-th layer without rope. */
static enum tern_status read_no_rope(const struct tern_json_doc *cfg, const struct tern_hparams *hp,
                                     struct llama_hparams *fh)
{
    const json_t *a = json_object_get(cfg->root, "no_rope_layers");
    if (!a || json_is_null(a)) {
        int64_t every;
        TERN_TRY(tern_cfg_int_opt(cfg, "no_rope_layer_interval", 4, &every));
        if (every < 1)
            return tern_error(TERN_E_FORMAT, "%s: no_rope_layer_interval must be >= 1", cfg->path);
        for (int32_t i = 0; i < hp->num_hidden_layers; i++) fh->no_rope[i] = (i + 1) % every == 0;
        return TERN_OK;
    }
    if (!json_is_array(a) || (int64_t)json_array_size(a) != hp->num_hidden_layers)
        return tern_error(TERN_E_FORMAT, "%s: no_rope_layers must list 0 or 1 for each of the %d "
                          "layers", cfg->path, hp->num_hidden_layers);
    for (int32_t i = 0; i < hp->num_hidden_layers; i++) {
        const json_t *v = json_array_get(a, (size_t)i);
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (x != 0 && x != 1 && !json_is_boolean(v))
            return tern_error(TERN_E_FORMAT, "%s: no_rope_layers[%d] must be 0 or 1", cfg->path, i);
        fh->no_rope[i] = json_is_boolean(v) ? json_is_false(v) : x == 0;
    }
    return TERN_OK;
}

/* The MoE rows' keys: the counts, the routing and the MoE layers. */
static enum tern_status read_moe(const struct tern_json_doc *cfg, int variant,
                                 const struct tern_hparams *hp, struct llama_hparams *fh)
{
    struct tern_moe_plan *mp = &fh->moe;
    mp->act = TERN_ACT_SILU;
    if (variant == V_MIXTRAL) { /* transformers: softmax, top k, renormalised */
        TERN_TRY(tern_moe_read_counts(cfg, "num_local_experts", 8, "num_experts_per_tok", 2,
                                      "intermediate_size", -1, mp));
        mp->norm_topk = true;
        memset(fh->moe_layer, mp->n_experts > 0, sizeof fh->moe_layer);
        return TERN_OK;
    }
    bool q2 = variant == V_QWEN2_MOE;
    /* published snapshots say num_experts; transformers 5 saves Qwen3-MoE's as num_local_experts */
    const char *nk = !json_object_get(cfg->root, "num_experts") &&
                             json_object_get(cfg->root, "num_local_experts")
                         ? "num_local_experts"
                         : "num_experts";
    TERN_TRY(tern_moe_read_counts(cfg, nk, q2 ? 60 : 128, "num_experts_per_tok", q2 ? 4 : 8,
                                  "moe_intermediate_size", q2 ? 1408 : 768, mp));
    TERN_TRY(tern_cfg_bool_opt(cfg, "norm_topk_prob", false, &mp->norm_topk));
    if (q2) {
        int64_t si;
        TERN_TRY(tern_cfg_int_opt(cfg, "shared_expert_intermediate_size", 5632, &si));
        if (si < 1)
            return tern_error(TERN_E_FORMAT, "%s: shared_expert_intermediate_size must be >= 1",
                              cfg->path);
        fh->shared_intermediate = si;
        mp->shared_expert = true;
    }
    int64_t step;
    TERN_TRY(tern_cfg_int_opt(cfg, "decoder_sparse_step", 1, &step));
    if (step < 1)
        return tern_error(TERN_E_FORMAT, "%s: decoder_sparse_step must be >= 1", cfg->path);
    for (int32_t i = 0; i < hp->num_hidden_layers; i++)
        fh->moe_layer[i] = mp->n_experts > 0 && (i + 1) % step == 0;
    const json_t *only = json_object_get(cfg->root, "mlp_only_layers");
    if (only && !json_is_null(only) && !json_is_array(only))
        return tern_error(TERN_E_FORMAT, "%s: mlp_only_layers must be a list of layer indices",
                          cfg->path);
    size_t i;
    const json_t *v;
    json_array_foreach(only, i, v) {
        json_int_t l = json_is_integer(v) ? json_integer_value(v) : -1;
        if (l < 0 || l >= hp->num_hidden_layers)
            return tern_error(TERN_E_FORMAT, "%s: mlp_only_layers[%zu] is not a layer index "
                              "below %d", cfg->path, i, hp->num_hidden_layers);
        fh->moe_layer[l] = 0;
    }
    return TERN_OK;
}

/* The scalar multipliers of Granite and MiniCPM. */
static enum tern_status read_scales(const struct tern_json_doc *cfg, int variant,
                                    struct tern_hparams *hp, struct llama_hparams *fh)
{
    double e, r, a, l;
    if (variant == V_GRANITE) {
        TERN_TRY(positive_f(cfg, "embedding_multiplier", 1.0, &e));
        TERN_TRY(positive_f(cfg, "residual_multiplier", 1.0, &r));
        TERN_TRY(positive_f(cfg, "attention_multiplier", 1.0, &a));
        TERN_TRY(positive_f(cfg, "logits_scaling", 1.0, &l));
        hp->embed_scale = (float)e;
        fh->residual_scale = (float)r;
        fh->attn_scale = (float)a;
        hp->logit_scale = (float)(1.0 / l);
    } else if (variant == V_MINICPM) {
        double base;
        TERN_TRY(positive_f(cfg, "scale_emb", 1.0, &e));
        TERN_TRY(positive_f(cfg, "scale_depth", 1.0, &r));
        TERN_TRY(tern_cfg_float(cfg, "dim_model_base", &base));
        if (!(base > 0))
            return tern_error(TERN_E_FORMAT, "%s: dim_model_base must be positive", cfg->path);
        hp->embed_scale = (float)e;
        fh->residual_scale = (float)(r / sqrt((double)hp->num_hidden_layers));
        hp->logit_scale = (float)(1.0 / ((double)hp->hidden_size / base));
    }
    return TERN_OK;
}

static enum tern_status read_hparams(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, void *fhp)
{
    struct llama_hparams *fh = fhp;
    TERN_TRY(tern_hparams_read_common(cfg, &llama_defaults[variant], hp));
    const char *act;
    TERN_TRY(tern_cfg_string_opt(cfg, "hidden_act", "silu", &act));
    if (strcmp(act, "silu"))
        return tern_error(TERN_E_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu)",
                          cfg->path, act);
    TERN_TRY(read_biases(cfg, variant, fh));
    fh->qk_norm = variant == V_QWEN3 || variant == V_QWEN3_MOE;
    if (variant == V_MIXTRAL || variant == V_QWEN2_MOE || variant == V_QWEN3_MOE)
        TERN_TRY(read_moe(cfg, variant, hp, fh));
    if (variant == V_ERNIE4_5) hp->ropes[0].interleaved = true;
    if (variant == V_PHI3 && hp->ropes[0].kind == TERN_ROPE_LONGROPE &&
        !json_object_get(cfg->root, "original_max_position_embeddings"))
        hp->ropes[0].original_max_pos = 4096; /* Phi3Config's, which wins over the rope's */
    if (variant == V_SMOLLM3) TERN_TRY(read_no_rope(cfg, hp, fh));
    TERN_TRY(read_scales(cfg, variant, hp, fh));
    return read_windows(cfg, variant, hp, fh);
}

/* ---- 2. tensor names ---- */

#define LLAMA_NAMES                                                                                \
    [TT_EMBED] = "embed_tokens", [TT_NORM] = "norm.weight", [TT_LM_HEAD] = "lm_head",              \
    [TT_ATTN_NORM] = "layers.%d.input_layernorm.weight",                                           \
    [TT_FFN_NORM] = "layers.%d.post_attention_layernorm.weight",                                   \
    [TT_Q] = "layers.%d.self_attn.q_proj", [TT_K] = "layers.%d.self_attn.k_proj",                  \
    [TT_V] = "layers.%d.self_attn.v_proj", [TT_O] = "layers.%d.self_attn.o_proj",                  \
    [TT_Q_NORM] = "layers.%d.self_attn.q_norm.weight",                                             \
    [TT_K_NORM] = "layers.%d.self_attn.k_norm.weight", [TT_GATE] = "layers.%d.mlp.gate_proj",      \
    [TT_UP] = "layers.%d.mlp.up_proj", [TT_DOWN] = "layers.%d.mlp.down_proj"

/* The Qwen MoE rows' experts, router and shared expert (mlx-lm stacks the
 * experts as mlp.switch_mlp). */
#define QWEN_MOE_NAMES                                                                             \
    [TT_ROUTER] = "layers.%d.mlp.gate",                                                            \
    [TT_EXPERTS_GATE_UP] = "layers.%d.mlp.experts.gate_up_proj",                                   \
    [TT_EXPERTS_DOWN] = "layers.%d.mlp.experts.down_proj",                                         \
    [TT_EXPERT_GATE] = "layers.%d.mlp.experts.%d.gate_proj",                                       \
    [TT_EXPERT_UP] = "layers.%d.mlp.experts.%d.up_proj",                                           \
    [TT_EXPERT_DOWN] = "layers.%d.mlp.experts.%d.down_proj",                                       \
    [TT_SWITCH_GATE] = "layers.%d.mlp.switch_mlp.gate_proj",                                       \
    [TT_SWITCH_UP] = "layers.%d.mlp.switch_mlp.up_proj",                                           \
    [TT_SWITCH_DOWN] = "layers.%d.mlp.switch_mlp.down_proj",                                       \
    [TT_SHARED_GATE] = "layers.%d.mlp.shared_expert.gate_proj",                                    \
    [TT_SHARED_UP] = "layers.%d.mlp.shared_expert.up_proj",                                        \
    [TT_SHARED_DOWN] = "layers.%d.mlp.shared_expert.down_proj",                                    \
    [TT_SHARED_EXPERT_GATE] = "layers.%d.mlp.shared_expert_gate"

/* Mixtral: the experts under block_sparse_moe, w1 / w3 / w2 for gate / up /
 * down (mlx-lm stacks them as block_sparse_moe.switch_mlp). */
#define MIXTRAL_NAMES                                                                              \
    [TT_ROUTER] = "layers.%d.block_sparse_moe.gate",                                               \
    [TT_EXPERT_GATE] = "layers.%d.block_sparse_moe.experts.%d.w1",                                 \
    [TT_EXPERT_UP] = "layers.%d.block_sparse_moe.experts.%d.w3",                                   \
    [TT_EXPERT_DOWN] = "layers.%d.block_sparse_moe.experts.%d.w2",                                 \
    [TT_SWITCH_GATE] = "layers.%d.block_sparse_moe.switch_mlp.gate_proj",                          \
    [TT_SWITCH_UP] = "layers.%d.block_sparse_moe.switch_mlp.up_proj",                              \
    [TT_SWITCH_DOWN] = "layers.%d.block_sparse_moe.switch_mlp.down_proj"

/* ---- 3. layer plan ---- */

static void plan_layer(const struct tern_hparams *hp, const void *fhp, int variant, int32_t layer,
                       struct tern_layer_plan *p)
{
    const struct llama_hparams *fh = fhp;
    (void)variant;
    tern_layer_plan_default(hp, layer, p);
    p->qkv_bias = fh->qkv_bias;
    p->o_bias = fh->o_bias;
    p->mlp_bias = fh->mlp_bias;
    p->qk_norm = fh->qk_norm;
    if (fh->attn_scale > 0) p->attn.scale = fh->attn_scale;
    p->residual_scale = fh->residual_scale;
    if (fh->no_rope[layer]) p->rope = -1;
    if (hp->layer_sliding[layer]) p->attn.sliding_window = hp->sliding_window;
    if (!fh->moe_layer[layer]) return;
    p->moe = fh->moe;
    p->ffn = fh->moe.shared_expert ? TERN_FFN_MLP_MOE : TERN_FFN_MOE;
    /* qwen2_moe: the MLP beside the experts is the shared expert */
    p->intermediate = fh->moe.shared_expert ? fh->shared_intermediate : 0;
}

const struct tern_family tern_family_llama = {
    .name = "llama",
    .hparams_bytes = sizeof(struct llama_hparams),
    .read_hparams = read_hparams,
    .names = {LLAMA_NAMES, QWEN_MOE_NAMES},
    .plan_layer = plan_layer,
};

/* Phi 3: the llama block with q|k|v and gate|up stored as one tensor each. */
const struct tern_family tern_family_phi3 = {
    .name = "phi3",
    .hparams_bytes = sizeof(struct llama_hparams),
    .read_hparams = read_hparams,
    .names = {LLAMA_NAMES, [TT_QKV] = "layers.%d.self_attn.qkv_proj",
              [TT_GATE_UP] = "layers.%d.mlp.gate_up_proj"},
    .plan_layer = plan_layer,
};

const struct tern_family tern_family_mixtral = {
    .name = "mixtral",
    .hparams_bytes = sizeof(struct llama_hparams),
    .read_hparams = read_hparams,
    .names = {LLAMA_NAMES, MIXTRAL_NAMES},
    .plan_layer = plan_layer,
};
