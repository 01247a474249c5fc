/*
 * olmo.c — OLMo 2 and 3: Olmo2ForCausalLM, Olmo3ForCausalLM.
 *
 * The llama block with its norms moved: no norm before the attention or the
 * MLP (the blocks read x itself), an RMSNorm after each (post_attention_,
 * post_feedforward_layernorm), and q/k RMSNorms over the whole projection,
 * all heads at once (weights [heads * head_dim], [kv_heads * head_dim]), not
 * per head. OLMo 3 adds sliding-window layers (3 of every 4 by default) and
 * a rope per layer type: full layers take rope_theta with rope_scaling,
 * sliding layers the plain rope at rope_theta.
 *
 *   variant  window                        ropes
 *   olmo2    no                            1
 *   olmo3    layer_types (S S S F ...)     2: 0 full layers, 1 sliding layers
 *
 * (transformers 5.24 reads a published OLMo 3 config.json's top-level
 * rope_theta for the full layers only and gives sliding layers its default,
 * 5e5; OLMo 3's own snapshots use 5e5 throughout, and tern, like mlx-lm,
 * reads rope_theta for both.)
 */
#include "model/arch.h"

#include <string.h>

enum { V_OLMO2, V_OLMO3 };

/* ---- 1. hyperparameters ---- */

struct olmo_hparams {
    bool bias; /* attention_bias: q, k, v and o */
};

static const struct tern_hparams_defaults olmo_defaults[] = {
    [V_OLMO2] = {.max_position_embeddings = 2048, .rms_norm_eps = 1e-5, .rope_theta = 1e4},
    [V_OLMO3] = {.max_position_embeddings = 2048, .rms_norm_eps = 1e-5, .rope_theta = 5e5},
};

/* OLMo 3's two ropes from transformers 5's nested rope_parameters, or
 * published configs' rope_theta + rope_scaling (full layers only). */
static enum tern_status read_olmo3_ropes(const struct tern_json_doc *cfg, struct tern_hparams *hp)
{
    const json_t *rp = json_object_get(cfg->root, "rope_parameters");
    bool nested = json_is_object(rp) && json_is_object(json_object_get(rp, "sliding_attention"));
    hp->n_ropes = 2;
    TERN_TRY(tern_rope_cfg_read(cfg, "full_attention", "rope_theta", 5e5, &hp->ropes[0]));
    if (nested)
        return tern_rope_cfg_read(cfg, "sliding_attention", NULL, hp->ropes[0].theta,
                                  &hp->ropes[1]);
    struct tern_rope_cfg *rc = &hp->ropes[1];
    memset(rc, 0, sizeof *rc);
    rc->kind = TERN_ROPE_DEFAULT;
    rc->factor = rc->partial_rotary_factor = 1.0;
    rc->original_max_pos = rc->max_pos = hp->max_position_embeddings;
    TERN_TRY(tern_cfg_float_opt(cfg, "rope_theta", 5e5, &rc->theta));
    if (!(rc->theta > 0))
        return tern_error(TERN_E_FORMAT, "%s: rope_theta must be positive", cfg->path);
    return TERN_OK;
}

static enum tern_status read_hparams(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, void *fhp)
{
    struct olmo_hparams *fh = fhp;
    TERN_TRY(tern_hparams_read_common(cfg, &olmo_defaults[variant], hp));
    const char *act;
    TERN_TRY(tern_cfg_string_opt(cfg, "hidden_act", "silu", &act));
    if (strcmp(act, "silu"))
        return tern_error(TERN_E_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu)",
                          cfg->path, act);
    TERN_TRY(tern_cfg_bool_opt(cfg, "attention_bias", false, &fh->bias));
    if (variant == V_OLMO2) return TERN_OK;
    int64_t sw;
    TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window", 4096, &sw));
    if (sw < 1) return tern_error(TERN_E_FORMAT, "%s: sliding_window must be >= 1", cfg->path);
    hp->sliding_window = (int32_t)sw;
    if (!hp->has_layer_types)
        for (int32_t i = 0; i < hp->num_hidden_layers; i++) hp->layer_sliding[i] = (i + 1) % 4 != 0;
    return read_olmo3_ropes(cfg, hp);
}

/* ---- 2. tensor names ---- */

#define OLMO_NAMES                                                                                 \
    [TT_EMBED] = "embed_tokens", [TT_NORM] = "norm.weight", [TT_LM_HEAD] = "lm_head",              \
    [TT_ATTN_POST_NORM] = "layers.%d.post_attention_layernorm.weight",                             \
    [TT_FFN_POST_NORM] = "layers.%d.post_feedforward_layernorm.weight",                            \
    [TT_Q] = "layers.%d.self_attn.q_proj", [TT_K] = "layers.%d.self_attn.k_proj",                  \
    [TT_V] = "layers.%d.self_attn.v_proj", [TT_O] = "layers.%d.self_attn.o_proj",                  \
    [TT_Q_NORM] = "layers.%d.self_attn.q_norm.weight",                                             \
    [TT_K_NORM] = "layers.%d.self_attn.k_norm.weight", [TT_GATE] = "layers.%d.mlp.gate_proj",      \
    [TT_UP] = "layers.%d.mlp.up_proj", [TT_DOWN] = "layers.%d.mlp.down_proj"

/* ---- 3. layer plan ---- */

static void plan_layer(const struct tern_hparams *hp, const void *fhp, int variant, int32_t layer,
                       struct tern_layer_plan *p)
{
    const struct olmo_hparams *fh = fhp;
    tern_layer_plan_default(hp, layer, p);
    p->qkv_bias = p->o_bias = fh->bias;
    p->no_input_norms = true;
    p->attn_post_norm = p->ffn_post_norm = true;
    p->qk_norm_full = true;
    if (variant == V_OLMO3 && hp->layer_sliding[layer]) {
        p->attn.sliding_window = hp->sliding_window;
        p->rope = 1;
    }
}

const struct tern_family tern_family_olmo = {
    .name = "olmo",
    .hparams_bytes = sizeof(struct olmo_hparams),
    .read_hparams = read_hparams,
    .names = {OLMO_NAMES},
    .plan_layer = plan_layer,
};
