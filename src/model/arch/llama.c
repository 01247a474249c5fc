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
 *
 * (layer_types, where config.json has it, says which layers slide.)
 * MiniCPM has no transformers class: mlx-lm's minicpm model is its oracle
 * (which, for tied embeddings only, leaves out the logit division that the
 * original modeling code applies; tern applies it always).
 */
#include "model/arch.h"

#include <math.h>
#include <string.h>

enum {
    V_LLAMA, V_MISTRAL, V_QWEN2, V_QWEN3, V_SEED_OSS, V_ERNIE4_5, V_SMOLLM3, V_GRANITE, V_MINICPM,
    V_PHI3, V_N
};

/* ---- 1. hyperparameters ---- */

struct llama_hparams {
    bool qkv_bias, o_bias, mlp_bias, qk_norm;
    float attn_scale;     /* 0: head_dim^-1/2 */
    float residual_scale; /* 0: none */
    uint8_t no_rope[TERN_MAX_LAYERS]; /* 1: layer i has no rope (SmolLM3) */
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
        return TERN_OK;
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

/* Which layers slide: Mistral every layer, Qwen 2/3 from max_window_layers
 * (use_sliding_window), Phi 3 every layer when sliding_window is set,
 * SmolLM3 its layer_types (use_sliding_window). */
static enum tern_status read_windows(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, const struct llama_hparams *fh)
{
    if (variant != V_MISTRAL && variant != V_QWEN2 && variant != V_QWEN3 && variant != V_PHI3 &&
        variant != V_SMOLLM3)
        return TERN_OK;
    bool use = true;
    if (variant == V_QWEN2 || variant == V_QWEN3 || variant == V_SMOLLM3)
        TERN_TRY(tern_cfg_bool_opt(cfg, "use_sliding_window", false, &use));
    int64_t sw, mwl;
    TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window", 0, &sw));
    if (sw < 0) return tern_error(TERN_E_FORMAT, "%s: sliding_window must be >= 0", cfg->path);
    TERN_TRY(tern_cfg_int_opt(cfg, "max_window_layers", 28, &mwl)); /* transformers default */
    /* A window as long as the context changes nothing: no sliding layers. */
    hp->sliding_window = use && sw < hp->max_position_embeddings ? (int32_t)sw : 0;
    if (hp->has_layer_types) return TERN_OK;
    for (int32_t i = 0; i < hp->num_hidden_layers; i++)
        hp->layer_sliding[i] = variant == V_MISTRAL || variant == V_PHI3 ? 1
                               : variant == V_SMOLLM3                    ? fh->no_rope[i]
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
    fh->qk_norm = variant == V_QWEN3;
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
}

const struct tern_family tern_family_llama = {
    .name = "llama",
    .hparams_bytes = sizeof(struct llama_hparams),
    .read_hparams = read_hparams,
    .names = {LLAMA_NAMES},
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
