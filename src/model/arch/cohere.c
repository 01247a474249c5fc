/*
 * cohere.c — Cohere (Command R) and Cohere 2 (Command R7B, Command A):
 * CohereForCausalLM, Cohere2ForCausalLM.
 *
 * A parallel block: one LayerNorm without bias (layer_norm_eps) feeds both
 * the attention and the SwiGLU MLP, and both outputs join the residual,
 * x + a + f; rope pairs are interleaved (2i, 2i + 1); the logits are
 * multiplied by logit_scale; the head is tied by default. Cohere 2 adds
 * sliding-window layers (3 of every 4 by default, sliding_window_pattern)
 * and applies rope on those only: its full-attention layers have no
 * positional encoding. Its head_dim is always hidden_size / heads.
 *
 *   variant  window                 rope
 *   cohere   no                     every layer
 *   cohere2  layer_types (S S S F)  sliding layers only
 *
 * Cohere's use_qk_norm (per-head LayerNorms with a weight per head, Command
 * R+) is not supported: the load fails naming the key.
 */
#include "model/arch.h"

#include <string.h>

enum { V_COHERE, V_COHERE2 };

/* ---- 1. hyperparameters ---- */

struct cohere_hparams {
    bool bias; /* attention_bias: q, k, v and o */
};

static const struct tern_hparams_defaults cohere_defaults[] = {
    [V_COHERE] = {.max_position_embeddings = 8192, .rope_theta = 5e5, .tie_word_embeddings = true},
    [V_COHERE2] = {.max_position_embeddings = 8192, .rope_theta = 1e4, .tie_word_embeddings = true},
};

static enum tern_status read_hparams(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, void *fhp)
{
    struct cohere_hparams *fh = fhp;
    TERN_TRY(tern_hparams_read_common(cfg, &cohere_defaults[variant], hp));
    const char *act;
    TERN_TRY(tern_cfg_string_opt(cfg, "hidden_act", "silu", &act));
    if (strcmp(act, "silu"))
        return tern_error(TERN_E_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu)",
                          cfg->path, act);
    bool qk;
    TERN_TRY(tern_cfg_bool_opt(cfg, "use_qk_norm", false, &qk));
    if (qk)
        return tern_error(TERN_E_UNSUPPORTED, "%s: use_qk_norm (per-head LayerNorms of q and k) "
                          "is not supported", cfg->path);
    double eps, ls;
    TERN_TRY(tern_cfg_float_opt(cfg, "layer_norm_eps", 1e-5, &eps));
    if (!(eps > 0 && eps < 1))
        return tern_error(TERN_E_FORMAT, "%s: layer_norm_eps must be in (0, 1), got %g",
                          cfg->path, eps);
    hp->rms_norm_eps = (float)eps;
    hp->norm = TERN_NORM_LAYER;
    TERN_TRY(tern_cfg_float_opt(cfg, "logit_scale", 0.0625, &ls));
    if (!(ls > 0))
        return tern_error(TERN_E_FORMAT, "%s: logit_scale must be positive, got %g", cfg->path, ls);
    hp->logit_scale = (float)ls;
    TERN_TRY(tern_cfg_bool_opt(cfg, "attention_bias", false, &fh->bias));
    hp->ropes[0].interleaved = true;
    if (variant == V_COHERE) return TERN_OK;
    hp->head_dim = hp->hidden_size / hp->num_attention_heads; /* Cohere2Config's, always */
    int64_t sw, pattern;
    TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window", 4096, &sw));
    if (sw < 1) return tern_error(TERN_E_FORMAT, "%s: sliding_window must be >= 1", cfg->path);
    hp->sliding_window = (int32_t)sw;
    TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window_pattern", 4, &pattern));
    if (pattern < 1)
        return tern_error(TERN_E_FORMAT, "%s: sliding_window_pattern must be >= 1", cfg->path);
    if (!hp->has_layer_types)
        for (int32_t i = 0; i < hp->num_hidden_layers; i++)
            hp->layer_sliding[i] = (i + 1) % pattern != 0;
    return TERN_OK;
}

/* ---- 2. tensor names ---- */

#define COHERE_NAMES                                                                               \
    [TT_EMBED] = "embed_tokens", [TT_NORM] = "norm.weight", [TT_LM_HEAD] = "lm_head",              \
    [TT_ATTN_NORM] = "layers.%d.input_layernorm.weight",                                           \
    [TT_Q] = "layers.%d.self_attn.q_proj", [TT_K] = "layers.%d.self_attn.k_proj",                  \
    [TT_V] = "layers.%d.self_attn.v_proj", [TT_O] = "layers.%d.self_attn.o_proj",                  \
    [TT_GATE] = "layers.%d.mlp.gate_proj", [TT_UP] = "layers.%d.mlp.up_proj",                      \
    [TT_DOWN] = "layers.%d.mlp.down_proj"

/* ---- 3. layer plan ---- */

static void plan_layer(const struct tern_hparams *hp, const void *fhp, int variant, int32_t layer,
                       struct tern_layer_plan *p)
{
    const struct cohere_hparams *fh = fhp;
    tern_layer_plan_default(hp, layer, p);
    p->qkv_bias = p->o_bias = fh->bias;
    p->parallel = true;
    if (variant == V_COHERE) return;
    bool sliding = hp->layer_sliding[layer];
    p->attn.sliding_window = sliding ? hp->sliding_window : 0;
    p->rope = sliding ? 0 : -1;
}

const struct tern_family tern_family_cohere = {
    .name = "cohere",
    .hparams_bytes = sizeof(struct cohere_hparams),
    .read_hparams = read_hparams,
    .names = {COHERE_NAMES},
    .plan_layer = plan_layer,
};
