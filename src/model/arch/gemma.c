/*
 * gemma.c — Gemma 1, 2 and 3: GemmaForCausalLM, Gemma2ForCausalLM,
 * Gemma3ForCausalLM and the text tower of Gemma3ForConditionalGeneration.
 *
 * One block, growing: embeddings times sqrt(hidden), (1 + w) RMSNorms,
 * GeGLU (tanh GELU), tied head; Gemma 2 adds a norm after the attention and
 * after the MLP (four norms a block), alternating sliding-window layers, an
 * attention logit softcap and a final logit softcap, and scales attention by
 * query_pre_attn_scalar; Gemma 3 adds per-head q/k norms, a 5:1 (configurable)
 * sliding pattern and a rope per layer type (global: rope_theta with its
 * scaling; local: rope_local_base_freq), and drops the attention softcap.
 *
 *   variant  norms  window             attn softcap  final softcap        q/k norm  ropes
 *   gemma    2      no                 no            no                   no        1
 *   gemma2   4      layers 0, 2, ...   yes (50)      yes (30)             no        1
 *   gemma3   4      (i + 1) % pattern  no            ForCausalLM only     yes       2
 *
 * (layer_types, where config.json has it, says which layers slide.)
 */
#include "model/arch.h"

#include <math.h>
#include <string.h>

enum { V_GEMMA, V_GEMMA2, V_GEMMA3, V_GEMMA3_MM };

/* ---- 1. hyperparameters ---- */

struct gemma_hparams {
    float attn_scale;   /* query_pre_attn_scalar^-1/2 (Gemma 1: head_dim^-1/2) */
    float attn_softcap; /* Gemma 2 */
    bool bias;          /* attention_bias: q, k, v and o */
};

/* transformers' config defaults per variant (published wrappers' text_config
 * leave many keys out). */
static const struct tern_hparams_defaults gemma_defaults[] = {
    [V_GEMMA] = {28, 3072, 24576, 16, 16, 256, 256000, 8192, 1e-6, 1e4, true, 2, 1},
    [V_GEMMA2] = {26, 2304, 9216, 8, 4, 256, 256000, 8192, 1e-6, 1e4, true, 2, 1},
    [V_GEMMA3] = {26, 2304, 9216, 8, 4, 256, 262208, 131072, 1e-6, 1e6, true, 2, 1},
    [V_GEMMA3_MM] = {26, 2304, 9216, 8, 4, 256, 262208, 131072, 1e-6, 1e6, true, 2, 1},
};

/* The MLP activation: tanh GELU is the only one Gemma publishes. */
static enum tern_status read_act(const struct tern_json_doc *cfg, int variant)
{
    /* Gemma 1 reads hidden_act (its "gelu" means the tanh form); later ones hidden_activation */
    const char *key = variant == V_GEMMA ? "hidden_act" : "hidden_activation", *act;
    TERN_TRY(tern_cfg_string_opt(cfg, key, "gelu_pytorch_tanh", &act));
    bool tanh_gelu = !strcmp(act, "gelu_pytorch_tanh") || (variant == V_GEMMA && !strcmp(act, "gelu"));
    if (!tanh_gelu)
        return tern_error(TERN_E_UNSUPPORTED, "%s: %s '%s' is not supported (gelu_pytorch_tanh)",
                          cfg->path, key, act);
    return TERN_OK;
}

/* Gemma 3's two ropes: 0 for full layers (rope_theta and its scaling), 1 for
 * sliding layers (rope_local_base_freq, never scaled), from the legacy keys or
 * transformers 5's nested rope_parameters. */
static enum tern_status read_gemma3_ropes(const struct tern_json_doc *cfg, struct tern_hparams *hp)
{
    const json_t *rp = json_object_get(cfg->root, "rope_parameters");
    bool nested = json_is_object(rp) && json_is_object(json_object_get(rp, "sliding_attention"));
    hp->n_ropes = 2;
    TERN_TRY(tern_rope_cfg_read(cfg, "full_attention", "rope_theta", 1e6, &hp->ropes[0]));
    if (nested)
        return tern_rope_cfg_read(cfg, "sliding_attention", "rope_local_base_freq", 1e4,
                                  &hp->ropes[1]);
    struct tern_rope_cfg *rc = &hp->ropes[1];
    memset(rc, 0, sizeof *rc);
    rc->kind = TERN_ROPE_DEFAULT;
    rc->factor = rc->partial_rotary_factor = 1.0;
    rc->original_max_pos = hp->max_position_embeddings;
    TERN_TRY(tern_cfg_float_opt(cfg, "rope_local_base_freq", 1e4, &rc->theta));
    if (!(rc->theta > 0))
        return tern_error(TERN_E_FORMAT, "%s: rope_local_base_freq must be positive", cfg->path);
    return TERN_OK;
}

/* Which layers slide when config.json has no layer_types. */
static enum tern_status default_layer_types(const struct tern_json_doc *cfg, int variant,
                                            struct tern_hparams *hp)
{
    if (hp->has_layer_types || variant == V_GEMMA) return TERN_OK;
    int64_t pattern = 2; /* Gemma 2: even layers slide */
    if (variant != V_GEMMA2) TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window_pattern", 6, &pattern));
    if (pattern < 1)
        return tern_error(TERN_E_FORMAT, "%s: sliding_window_pattern must be >= 1", cfg->path);
    for (int32_t i = 0; i < hp->num_hidden_layers; i++)
        hp->layer_sliding[i] = (i + 1) % pattern != 0;
    return TERN_OK;
}

static enum tern_status read_hparams(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, void *fhp)
{
    struct gemma_hparams *fh = fhp;
    TERN_TRY(tern_hparams_read_common(cfg, &gemma_defaults[variant], hp));
    TERN_TRY(read_act(cfg, variant));
    bool bidir = false;
    const json_t *bd = json_object_get(cfg->root, "use_bidirectional_attention");
    if (json_is_true(bd)) bidir = true;
    if (bidir)
        return tern_error(TERN_E_UNSUPPORTED, "%s: use_bidirectional_attention (an embedding "
                          "model's attention) is not supported", cfg->path);
    hp->norm_plus_one = true;
    hp->embed_scale = sqrtf((float)hp->hidden_size);
    hp->embed_scale_bf16_mlx = variant == V_GEMMA3 || variant == V_GEMMA3_MM;
    TERN_TRY(tern_cfg_bool_opt(cfg, "attention_bias", false, &fh->bias));
    fh->attn_scale = (float)pow((double)hp->head_dim, -0.5);
    if (variant == V_GEMMA) return TERN_OK;
    double qpas;
    TERN_TRY(tern_cfg_float_opt(cfg, "query_pre_attn_scalar", 256.0, &qpas));
    if (!(qpas > 0))
        return tern_error(TERN_E_FORMAT, "%s: query_pre_attn_scalar must be positive", cfg->path);
    fh->attn_scale = (float)pow(qpas, -0.5);
    int64_t sw;
    TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window", 4096, &sw));
    if (sw < 1) return tern_error(TERN_E_FORMAT, "%s: sliding_window must be >= 1", cfg->path);
    hp->sliding_window = (int32_t)sw;
    TERN_TRY(default_layer_types(cfg, variant, hp));
    if (variant == V_GEMMA2) {
        TERN_TRY(tern_cfg_softcap(cfg, "attn_logit_softcapping", 50.0, &fh->attn_softcap));
        return tern_cfg_softcap(cfg, "final_logit_softcapping", 30.0, &hp->final_softcap);
    }
    /* Gemma 3: the wrapper never applies a final softcap; attn softcap unused */
    if (variant == V_GEMMA3) TERN_TRY(tern_cfg_softcap(cfg, "final_logit_softcapping", 0.0,
                                                   &hp->final_softcap));
    return read_gemma3_ropes(cfg, hp);
}

/* ---- 2. tensor names ---- */

#define GEMMA_COMMON_NAMES                                                                         \
    [TT_EMBED] = "embed_tokens", [TT_NORM] = "norm.weight", [TT_LM_HEAD] = "lm_head",              \
    [TT_ATTN_NORM] = "layers.%d.input_layernorm.weight",                                           \
    [TT_Q] = "layers.%d.self_attn.q_proj", [TT_K] = "layers.%d.self_attn.k_proj",                  \
    [TT_V] = "layers.%d.self_attn.v_proj", [TT_O] = "layers.%d.self_attn.o_proj",                  \
    [TT_GATE] = "layers.%d.mlp.gate_proj", [TT_UP] = "layers.%d.mlp.up_proj",                      \
    [TT_DOWN] = "layers.%d.mlp.down_proj"

/* Gemma 1: the llama names (post_attention_layernorm is the MLP's input norm). */
#define GEMMA1_NAMES GEMMA_COMMON_NAMES, [TT_FFN_NORM] = "layers.%d.post_attention_layernorm.weight"

/* Gemma 2 and 3: post_attention_layernorm normalises the attention's output. */
#define GEMMA2_NAMES                                                                               \
    GEMMA_COMMON_NAMES, [TT_ATTN_POST_NORM] = "layers.%d.post_attention_layernorm.weight",        \
    [TT_FFN_NORM] = "layers.%d.pre_feedforward_layernorm.weight",                                  \
    [TT_FFN_POST_NORM] = "layers.%d.post_feedforward_layernorm.weight",                            \
    [TT_Q_NORM] = "layers.%d.self_attn.q_norm.weight",                                             \
    [TT_K_NORM] = "layers.%d.self_attn.k_norm.weight"

/* ---- 3. layer plan ---- */

static void plan_layer(const struct tern_hparams *hp, const void *fhp, int variant, int32_t layer,
                       struct tern_layer_plan *p)
{
    const struct gemma_hparams *fh = fhp;
    tern_layer_plan_default(hp, layer, p);
    p->act = TERN_ACT_GELU_TANH;
    p->attn.scale = fh->attn_scale;
    p->attn.softcap = fh->attn_softcap;
    p->qkv_bias = p->o_bias = fh->bias;
    if (variant == V_GEMMA) return;
    p->attn_post_norm = p->ffn_post_norm = true;
    bool sliding = hp->layer_sliding[layer];
    if (sliding) p->attn.sliding_window = hp->sliding_window;
    if (variant == V_GEMMA2) return;
    p->qk_norm = true;
    p->rope = sliding ? 1 : 0;
}

const struct tern_family tern_family_gemma = {
    .name = "gemma",
    .hparams_bytes = sizeof(struct gemma_hparams),
    .read_hparams = read_hparams,
    .names = {GEMMA1_NAMES},
    .plan_layer = plan_layer,
};

const struct tern_family tern_family_gemma2 = {
    .name = "gemma2",
    .hparams_bytes = sizeof(struct gemma_hparams),
    .read_hparams = read_hparams,
    .names = {GEMMA2_NAMES},
    .plan_layer = plan_layer,
};
