/*
 * glm4.c — GLM 4: Glm4ForCausalLM (GLM-4-0414, GLM-Z1).
 *
 * The llama block with four RMSNorms (input, post_self_attn before the
 * residual add, post_attention as the MLP's input norm, post_mlp before the
 * add), q/k/v biases (attention_bias, on by default; o has none), gate|up
 * stored as one tensor (gate_up_proj), and a partial rope (half the head by
 * default) whose pairs are interleaved (2i, 2i + 1).
 */
#include "model/arch.h"

#include <string.h>

/* ---- 1. hyperparameters ---- */

struct glm4_hparams {
    bool qkv_bias;
};

static const struct tern_hparams_defaults glm4_defaults = {
    .num_key_value_heads = 2, .head_dim = 128, .max_position_embeddings = 131072,
    .rms_norm_eps = 1.5625e-7, .rope_theta = 1e4,
};

/* partial_rotary_factor: the top-level key or the rope object's, else 0.5. */
static bool has_partial(const struct tern_json_doc *cfg)
{
    if (json_object_get(cfg->root, "partial_rotary_factor")) return true;
    const char *objs[2] = {"rope_scaling", "rope_parameters"};
    for (int i = 0; i < 2; i++) {
        const json_t *o = json_object_get(cfg->root, objs[i]);
        if (json_is_object(o) && json_object_get(o, "partial_rotary_factor")) return true;
    }
    return false;
}

static enum tern_status read_hparams(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, void *fhp)
{
    struct glm4_hparams *fh = fhp;
    (void)variant;
    TERN_TRY(tern_hparams_read_common(cfg, &glm4_defaults, hp));
    const char *act;
    TERN_TRY(tern_cfg_string_opt(cfg, "hidden_act", "silu", &act));
    if (strcmp(act, "silu"))
        return tern_error(TERN_E_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu)",
                          cfg->path, act);
    TERN_TRY(tern_cfg_bool_opt(cfg, "attention_bias", true, &fh->qkv_bias));
    if (!has_partial(cfg)) hp->ropes[0].partial_rotary_factor = 0.5;
    hp->ropes[0].interleaved = true;
    return TERN_OK;
}

/* ---- 2. tensor names ---- */

#define GLM4_NAMES                                                                                 \
    [TT_EMBED] = "embed_tokens", [TT_NORM] = "norm.weight", [TT_LM_HEAD] = "lm_head",              \
    [TT_ATTN_NORM] = "layers.%d.input_layernorm.weight",                                           \
    [TT_ATTN_POST_NORM] = "layers.%d.post_self_attn_layernorm.weight",                             \
    [TT_FFN_NORM] = "layers.%d.post_attention_layernorm.weight",                                   \
    [TT_FFN_POST_NORM] = "layers.%d.post_mlp_layernorm.weight",                                    \
    [TT_Q] = "layers.%d.self_attn.q_proj", [TT_K] = "layers.%d.self_attn.k_proj",                  \
    [TT_V] = "layers.%d.self_attn.v_proj", [TT_O] = "layers.%d.self_attn.o_proj",                  \
    [TT_GATE_UP] = "layers.%d.mlp.gate_up_proj", [TT_DOWN] = "layers.%d.mlp.down_proj"

/* ---- 3. layer plan ---- */

static void plan_layer(const struct tern_hparams *hp, const void *fhp, int variant, int32_t layer,
                       struct tern_layer_plan *p)
{
    const struct glm4_hparams *fh = fhp;
    (void)variant;
    tern_layer_plan_default(hp, layer, p);
    p->qkv_bias = fh->qkv_bias;
    p->attn_post_norm = p->ffn_post_norm = true;
}

const struct tern_family tern_family_glm4 = {
    .name = "glm4",
    .hparams_bytes = sizeof(struct glm4_hparams),
    .read_hparams = read_hparams,
    .names = {GLM4_NAMES},
    .plan_layer = plan_layer,
};
