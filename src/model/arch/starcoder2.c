/*
 * starcoder2.c — Starcoder 2: Starcoder2ForCausalLM.
 *
 * A pre-norm block like llama's with GPT-2's parts: LayerNorms with bias
 * (norm_epsilon), biases on every linear (use_bias, on by default), a
 * non-gated MLP down(gelu_tanh(up h)) (mlp.c_fc, mlp.c_proj), the embedding
 * tied to the head by default, and, when sliding_window is set, a window on
 * every layer.
 */
#include "model/arch.h"

#include <string.h>

/* ---- 1. hyperparameters ---- */

struct starcoder2_hparams {
    bool bias;
};

static const struct tern_hparams_defaults starcoder2_defaults = {
    .max_position_embeddings = 4096, .rope_theta = 1e4, .tie_word_embeddings = true,
};

static enum tern_status read_hparams(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, void *fhp)
{
    struct starcoder2_hparams *fh = fhp;
    (void)variant;
    TERN_TRY(tern_hparams_read_common(cfg, &starcoder2_defaults, hp));
    const char *act;
    TERN_TRY(tern_cfg_string_opt(cfg, "hidden_act", "gelu_pytorch_tanh", &act));
    if (strcmp(act, "gelu_pytorch_tanh"))
        return tern_error(TERN_E_UNSUPPORTED, "%s: hidden_act '%s' is not supported "
                          "(gelu_pytorch_tanh)", cfg->path, act);
    double eps;
    TERN_TRY(tern_cfg_float_opt(cfg, "norm_epsilon", 1e-5, &eps));
    if (!(eps > 0 && eps < 1))
        return tern_error(TERN_E_FORMAT, "%s: norm_epsilon must be in (0, 1), got %g", cfg->path,
                          eps);
    hp->rms_norm_eps = (float)eps;
    hp->norm = TERN_NORM_LAYER;
    hp->norm_bias = true;
    TERN_TRY(tern_cfg_bool_opt(cfg, "use_bias", true, &fh->bias));
    int64_t sw;
    TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window", 0, &sw));
    if (sw < 0) return tern_error(TERN_E_FORMAT, "%s: sliding_window must be >= 0", cfg->path);
    /* A window as long as the context changes nothing. */
    hp->sliding_window = sw < hp->max_position_embeddings ? (int32_t)sw : 0;
    return TERN_OK;
}

/* ---- 2. tensor names ---- */

#define STARCODER2_NAMES                                                                           \
    [TT_EMBED] = "embed_tokens", [TT_NORM] = "norm.weight", [TT_NORM_BIAS] = "norm.bias",          \
    [TT_LM_HEAD] = "lm_head", [TT_ATTN_NORM] = "layers.%d.input_layernorm.weight",                 \
    [TT_ATTN_NORM_BIAS] = "layers.%d.input_layernorm.bias",                                        \
    [TT_FFN_NORM] = "layers.%d.post_attention_layernorm.weight",                                   \
    [TT_FFN_NORM_BIAS] = "layers.%d.post_attention_layernorm.bias",                                \
    [TT_Q] = "layers.%d.self_attn.q_proj", [TT_K] = "layers.%d.self_attn.k_proj",                  \
    [TT_V] = "layers.%d.self_attn.v_proj", [TT_O] = "layers.%d.self_attn.o_proj",                  \
    [TT_UP] = "layers.%d.mlp.c_fc", [TT_DOWN] = "layers.%d.mlp.c_proj"

/* ---- 3. layer plan ---- */

static void plan_layer(const struct tern_hparams *hp, const void *fhp, int variant, int32_t layer,
                       struct tern_layer_plan *p)
{
    const struct starcoder2_hparams *fh = fhp;
    (void)variant;
    tern_layer_plan_default(hp, layer, p);
    p->qkv_bias = p->o_bias = p->mlp_bias = fh->bias;
    p->mlp_plain = true;
    p->act = TERN_ACT_GELU_TANH;
    p->attn.sliding_window = hp->sliding_window;
}

const struct tern_family tern_family_starcoder2 = {
    .name = "starcoder2",
    .hparams_bytes = sizeof(struct starcoder2_hparams),
    .read_hparams = read_hparams,
    .names = {STARCODER2_NAMES},
    .plan_layer = plan_layer,
};
