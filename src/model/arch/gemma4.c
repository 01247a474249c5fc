/*
 * gemma4.c — Gemma 4 text models: Gemma4ForCausalLM (gemma4_text) and the
 * text towers of Gemma4ForConditionalGeneration (gemma4) and
 * Gemma4UnifiedForConditionalGeneration (gemma4_unified).
 *
 * The Gemma 3 block (four norms, q/k norms, GeGLU, sliding and full layers)
 * with Gemma 4's differences: norms multiply by w (not 1 + w), values get a
 * weightless RMSNorm (v_norm), attention is unscaled (1.0); full layers have
 * their own head_dim and kv heads (global_head_dim / num_global_key_value_heads,
 * or per_layer_config), proportional rope (only the first part of the pairs
 * rotates) and, with attention_k_eq_v, values that are the raw keys; the last
 * num_kv_shared_layers layers keep no K/V and read the last earlier layer of
 * their type (with use_double_wide_mlp, their MLP is twice as wide); every
 * layer multiplies the whole stream by a learned layer_scalar; per-layer
 * inputs (hidden_size_per_layer_input, gemma4 text only) add a small gated
 * projection per layer. With enable_moe_block every layer has experts
 * beside its MLP (the 26B-A4B): the MLP's output and the experts' (GeGLU,
 * reading their own pre-norm of the residual) are each post-normed and
 * summed before post_feedforward_layernorm; the router reads rmsnorm(x) *
 * router.scale * hidden^-1/2 of the residual, softmax over all experts,
 * top k, renormalised, times per_expert_scale (transformers'
 * Gemma4TextRouter).
 */
#include "model/arch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V_TEXT, V_WRAPPER, V_UNIFIED };

/* ---- 1. hyperparameters ---- */

struct gemma4_hparams {
    bool bias, k_eq_v, double_wide;
    struct tern_moe_plan moe; /* n_experts 0: no experts */
    int32_t n_kv_shared;
    int16_t head_dim[TERN_MAX_LAYERS]; /* per layer, after global_head_dim / per_layer_config */
    int16_t n_kv_heads[TERN_MAX_LAYERS];
};

static const struct tern_hparams_defaults gemma4_defaults[] = {
    [V_TEXT] = {30, 2304, 9216, 8, 4, 256, 262144, 131072, 1e-6, 1e4, true, 2, 1},
    [V_WRAPPER] = {30, 2304, 9216, 8, 4, 256, 262144, 131072, 1e-6, 1e4, true, 2, 1},
    [V_UNIFIED] = {30, 2304, 9216, 8, 4, 256, 262144, 262144, 1e-6, 1e4, true, 2, 1},
};

/* The two ropes from rope_parameters (the only form Gemma 4 reads): 0 for
 * sliding layers (default rope, theta 1e4), 1 for full layers
 * (proportional, factor 0.25, theta 1e6). */
static enum tern_status read_ropes(const struct tern_json_doc *cfg, struct tern_hparams *hp)
{
    static const char *const types[2] = {"sliding_attention", "full_attention"};
    const json_t *rp = json_object_get(cfg->root, "rope_parameters");
    if (rp && !json_is_null(rp) && !json_is_object(rp))
        return tern_error(TERN_E_FORMAT, "%s: rope_parameters must be an object", cfg->path);
    hp->n_ropes = 2;
    for (int r = 0; r < 2; r++) {
        struct tern_rope_cfg *rc = &hp->ropes[r];
        const json_t *sec = json_object_get(rp, types[r]);
        if (json_is_object(sec)) {
            TERN_TRY(tern_rope_cfg_read(cfg, types[r], NULL, r ? 1e6 : 1e4, rc));
            continue;
        }
        memset(rc, 0, sizeof *rc);
        rc->kind = r ? TERN_ROPE_PROPORTIONAL : TERN_ROPE_DEFAULT;
        rc->theta = r ? 1e6 : 1e4;
        rc->partial_rotary_factor = r ? 0.25 : 1.0;
        rc->factor = 1.0;
        rc->original_max_pos = hp->max_position_embeddings;
    }
    return TERN_OK;
}

/* per_layer_config: {"<layer>": {"head_dim": n, "num_key_value_heads": n}}. */
static enum tern_status read_per_layer_config(const struct tern_json_doc *cfg,
                                              const json_t *plc, const struct tern_hparams *hp,
                                              struct gemma4_hparams *fh)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)plc, k, v) {
        char *end;
        long l = strtol(k, &end, 10);
        if (*k == '\0' || *end != '\0' || l < 0 || l >= hp->num_hidden_layers || !json_is_object(v))
            return tern_error(TERN_E_FORMAT, "%s: per_layer_config key '%s' must be a layer index "
                              "below %d mapping to an object", cfg->path, k, hp->num_hidden_layers);
        const char *f;
        const json_t *fv;
        json_object_foreach((json_t *)v, f, fv) {
            int16_t *dst = !strcmp(f, "head_dim") ? &fh->head_dim[l]
                         : !strcmp(f, "num_key_value_heads") ? &fh->n_kv_heads[l] : NULL;
            if (!dst)
                return tern_error(TERN_E_UNSUPPORTED, "%s: per_layer_config.%s.%s is not "
                                  "supported (head_dim, num_key_value_heads)", cfg->path, k, f);
            if (!json_is_integer(fv) || json_integer_value(fv) < 1 || json_integer_value(fv) > 1024)
                return tern_error(TERN_E_FORMAT, "%s: per_layer_config.%s.%s must be an integer "
                                  "in [1, 1024]", cfg->path, k, f);
            *dst = (int16_t)json_integer_value(fv);
        }
    }
    return TERN_OK;
}

/* Per-layer head_dim and kv heads: per_layer_config when config.json has it,
 * else global_head_dim (default 512) on full layers, and their
 * num_global_key_value_heads only with attention_k_eq_v. */
static enum tern_status read_geometry(const struct tern_json_doc *cfg, struct tern_hparams *hp,
                                      struct gemma4_hparams *fh)
{
    for (int32_t i = 0; i < hp->num_hidden_layers; i++) {
        fh->head_dim[i] = (int16_t)hp->head_dim;
        fh->n_kv_heads[i] = (int16_t)hp->num_key_value_heads;
    }
    const json_t *plc = json_object_get(cfg->root, "per_layer_config");
    if (json_is_object(plc)) return read_per_layer_config(cfg, plc, hp, fh);
    if (plc && !json_is_null(plc))
        return tern_error(TERN_E_FORMAT, "%s: per_layer_config must be an object", cfg->path);
    int64_t ghd, gkv;
    TERN_TRY(tern_cfg_int_opt(cfg, "global_head_dim", 512, &ghd));
    TERN_TRY(tern_cfg_int_opt(cfg, "num_global_key_value_heads", hp->num_key_value_heads, &gkv));
    if (ghd < 2 || ghd > 1024 || gkv < 1 || gkv > 1024)
        return tern_error(TERN_E_FORMAT, "%s: global_head_dim %lld / num_global_key_value_heads "
                          "%lld out of range", cfg->path, (long long)ghd, (long long)gkv);
    for (int32_t i = 0; i < hp->num_hidden_layers; i++) {
        if (hp->layer_sliding[i]) continue;
        fh->head_dim[i] = (int16_t)ghd;
        if (fh->k_eq_v) fh->n_kv_heads[i] = (int16_t)gkv;
    }
    return TERN_OK;
}

/* The sharing layers' sources, checked: each reuse layer's type has an
 * earlier layer that keeps K/V. */
static enum tern_status check_sharing(const struct tern_json_doc *cfg, const struct tern_hparams *hp,
                                      const struct gemma4_hparams *fh)
{
    int32_t first = hp->num_hidden_layers - fh->n_kv_shared;
    for (int32_t i = first; i < hp->num_hidden_layers; i++) {
        int32_t j = first - 1;
        while (j >= 0 && hp->layer_sliding[j] != hp->layer_sliding[i]) j--;
        if (j < 0)
            return tern_error(TERN_E_FORMAT, "%s: num_kv_shared_layers %d: layer %d shares K/V "
                              "but no earlier layer of its type keeps them", cfg->path,
                              fh->n_kv_shared, i);
    }
    return TERN_OK;
}

static enum tern_status read_hparams(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, void *fhp)
{
    struct gemma4_hparams *fh = fhp;
    TERN_TRY(tern_hparams_read_common(cfg, &gemma4_defaults[variant], hp));
    const char *act;
    TERN_TRY(tern_cfg_string_opt(cfg, "hidden_activation", "gelu_pytorch_tanh", &act));
    if (strcmp(act, "gelu_pytorch_tanh"))
        return tern_error(TERN_E_UNSUPPORTED, "%s: hidden_activation '%s' is not supported "
                          "(gelu_pytorch_tanh)", cfg->path, act);
    bool moe;
    TERN_TRY(tern_cfg_bool_opt(cfg, "enable_moe_block", false, &moe));
    if (moe) { /* transformers' defaults are None: the keys are required */
        TERN_TRY(tern_moe_read_counts(cfg, "num_experts", -1, "top_k_experts", -1,
                                      "moe_intermediate_size", -1, &fh->moe));
        if (!fh->moe.n_experts)
            return tern_error(TERN_E_FORMAT, "%s: enable_moe_block with num_experts 0",
                              cfg->path);
        fh->moe.act = TERN_ACT_GELU_TANH;
        fh->moe.norm_topk = fh->moe.expert_scale = true;
        fh->moe.router_norm = fh->moe.own_norms = true;
    }
    const json_t *bd = json_object_get(cfg->root, "use_bidirectional_attention");
    if (json_is_true(bd) || (json_is_string(bd) && !strcmp(json_string_value(bd), "all")))
        return tern_error(TERN_E_UNSUPPORTED, "%s: use_bidirectional_attention (an embedding "
                          "model's attention) is not supported", cfg->path);
    hp->embed_scale = sqrtf((float)hp->hidden_size);
    TERN_TRY(tern_cfg_softcap(cfg, "final_logit_softcapping", 0.0, &hp->final_softcap));
    int64_t sw, n_shared;
    TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window", variant == V_UNIFIED ? 1024 : 512, &sw));
    if (sw < 1) return tern_error(TERN_E_FORMAT, "%s: sliding_window must be >= 1", cfg->path);
    hp->sliding_window = (int32_t)sw;
    if (!hp->has_layer_types) /* pattern 6 */
        for (int32_t i = 0; i < hp->num_hidden_layers; i++) hp->layer_sliding[i] = (i + 1) % 6 != 0;
    hp->layer_sliding[hp->num_hidden_layers - 1] = 0; /* transformers forces the last one full */
    TERN_TRY(tern_cfg_bool_opt(cfg, "attention_bias", false, &fh->bias));
    TERN_TRY(tern_cfg_bool_opt(cfg, "attention_k_eq_v", false, &fh->k_eq_v));
    TERN_TRY(tern_cfg_bool_opt(cfg, "use_double_wide_mlp", false, &fh->double_wide));
    TERN_TRY(tern_cfg_int_opt(cfg, "num_kv_shared_layers", 0, &n_shared));
    if (n_shared < 0 || n_shared >= hp->num_hidden_layers)
        return tern_error(TERN_E_FORMAT, "%s: num_kv_shared_layers %lld must be in [0, %d)",
                          cfg->path, (long long)n_shared, hp->num_hidden_layers);
    fh->n_kv_shared = (int32_t)n_shared;
    TERN_TRY(check_sharing(cfg, hp, fh));
    TERN_TRY(read_geometry(cfg, hp, fh));
    if (variant != V_UNIFIED) { /* per-layer inputs: an absent key means 256 */
        int64_t P = 256, PV;
        const json_t *pj = json_object_get(cfg->root, "hidden_size_per_layer_input");
        if (json_is_null(pj)) P = 0;
        else TERN_TRY(tern_cfg_int_opt(cfg, "hidden_size_per_layer_input", 256, &P));
        TERN_TRY(tern_cfg_int_opt(cfg, "vocab_size_per_layer_input", hp->vocab_size, &PV));
        if (P < 0 || P > 65536 || PV < 1 || PV > INT32_MAX)
            return tern_error(TERN_E_FORMAT, "%s: hidden_size_per_layer_input %lld / "
                              "vocab_size_per_layer_input %lld out of range", cfg->path,
                              (long long)P, (long long)PV);
        hp->per_layer_dim = (int32_t)P;
        hp->per_layer_vocab = (int32_t)PV;
    }
    return read_ropes(cfg, hp);
}

/* ---- 2. tensor names ---- */

#define GEMMA4_NAMES                                                                               \
    [TT_EMBED] = "embed_tokens", [TT_NORM] = "norm.weight", [TT_LM_HEAD] = "lm_head",              \
    [TT_EMBED_PER_LAYER] = "embed_tokens_per_layer",                                               \
    [TT_PLI_MODEL_PROJ] = "per_layer_model_projection",                                            \
    [TT_PLI_PROJ_NORM] = "per_layer_projection_norm.weight",                                       \
    [TT_ATTN_NORM] = "layers.%d.input_layernorm.weight",                                           \
    [TT_ATTN_POST_NORM] = "layers.%d.post_attention_layernorm.weight",                             \
    [TT_FFN_NORM] = "layers.%d.pre_feedforward_layernorm.weight",                                  \
    [TT_FFN_POST_NORM] = "layers.%d.post_feedforward_layernorm.weight",                            \
    [TT_Q] = "layers.%d.self_attn.q_proj", [TT_K] = "layers.%d.self_attn.k_proj",                  \
    [TT_V] = "layers.%d.self_attn.v_proj", [TT_O] = "layers.%d.self_attn.o_proj",                  \
    [TT_Q_NORM] = "layers.%d.self_attn.q_norm.weight",                                             \
    [TT_K_NORM] = "layers.%d.self_attn.k_norm.weight", [TT_GATE] = "layers.%d.mlp.gate_proj",      \
    [TT_UP] = "layers.%d.mlp.up_proj", [TT_DOWN] = "layers.%d.mlp.down_proj",                      \
    [TT_LAYER_SCALAR] = "layers.%d.layer_scalar",                                                  \
    [TT_PLI_GATE] = "layers.%d.per_layer_input_gate",                                              \
    [TT_PLI_PROJ] = "layers.%d.per_layer_projection",                                              \
    [TT_PLI_POST_NORM] = "layers.%d.post_per_layer_input_norm.weight",                             \
    [TT_ROUTER] = "layers.%d.router.proj", [TT_ROUTER_SCALE] = "layers.%d.router.scale",           \
    [TT_EXPERT_SCALE] = "layers.%d.router.per_expert_scale",                                       \
    [TT_EXPERTS_GATE_UP] = "layers.%d.experts.gate_up_proj",                                       \
    [TT_EXPERTS_DOWN] = "layers.%d.experts.down_proj",                                             \
    [TT_SWITCH_GATE] = "layers.%d.experts.switch_glu.gate_proj",                                   \
    [TT_SWITCH_UP] = "layers.%d.experts.switch_glu.up_proj",                                       \
    [TT_SWITCH_DOWN] = "layers.%d.experts.switch_glu.down_proj",                                   \
    [TT_MLP_POST_NORM] = "layers.%d.post_feedforward_layernorm_1.weight",                          \
    [TT_MOE_PRE_NORM] = "layers.%d.pre_feedforward_layernorm_2.weight",                            \
    [TT_MOE_POST_NORM] = "layers.%d.post_feedforward_layernorm_2.weight"

/* ---- 3. layer plan ---- */

static void plan_layer(const struct tern_hparams *hp, const void *fhp, int variant, int32_t layer,
                       struct tern_layer_plan *p)
{
    const struct gemma4_hparams *fh = fhp;
    (void)variant;
    tern_layer_plan_default(hp, layer, p);
    bool sliding = hp->layer_sliding[layer];
    p->attn.head_dim = fh->head_dim[layer];
    p->attn.n_kv_heads = fh->n_kv_heads[layer];
    p->attn.scale = 1.0f;
    p->attn.sliding_window = sliding ? hp->sliding_window : 0;
    p->rope = sliding ? 0 : 1;
    p->qkv_bias = p->o_bias = fh->bias;
    p->qk_norm = true;
    p->attn_post_norm = p->ffn_post_norm = true;
    p->act = TERN_ACT_GELU_TANH;
    p->layer_scalar = true;
    p->per_layer_input = hp->per_layer_dim > 0;
    if (fh->moe.n_experts) {
        p->ffn = TERN_FFN_MLP_MOE;
        p->moe = fh->moe;
    }
    int32_t first = hp->num_hidden_layers - fh->n_kv_shared;
    if (layer >= first) { /* reuse the last earlier layer of its type (checked at read) */
        int32_t j = first - 1;
        while (hp->layer_sliding[j] != hp->layer_sliding[layer]) j--;
        p->kv_source = j;
        if (fh->double_wide) p->intermediate = 2 * hp->intermediate_size;
    } else {
        p->v_norm = true;
        p->k_eq_v = fh->k_eq_v && !sliding;
    }
}

const struct tern_family tern_family_gemma4 = {
    .name = "gemma4",
    .hparams_bytes = sizeof(struct gemma4_hparams),
    .read_hparams = read_hparams,
    .names = {GEMMA4_NAMES},
    .plan_layer = plan_layer,
};
