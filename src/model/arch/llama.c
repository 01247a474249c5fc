/*
 * llama.c — the llama-like family: LlamaForCausalLM (Llama 2/3.x),
 * MistralForCausalLM, Qwen2ForCausalLM (q/k/v bias) and Qwen3ForCausalLM
 * (per-head q/k norms). One block shape: pre-norm attention with rope and
 * GQA, pre-norm SwiGLU MLP; the rows differ in biases, head norms and which
 * layers slide.
 *
 *   variant     qkv bias        q/k norm   sliding window
 *   llama       attention_bias  no         no
 *   mistral     attention_bias  no         sliding_window, every layer
 *   qwen2       always          no         use_sliding_window: layers >= max_window_layers
 *   qwen3       attention_bias  yes        as qwen2
 *
 * (layer_types, where config.json has it, says which layers slide.)
 */
#include "model/arch.h"

enum { V_LLAMA, V_MISTRAL, V_QWEN2, V_QWEN3 };

/* ---- 1. hyperparameters ---- */

struct llama_hparams {
    bool qkv_bias, o_bias, mlp_bias, qk_norm;
};

static enum tern_status read_hparams(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, void *fhp)
{
    struct llama_hparams *fh = fhp;
    static const struct tern_hparams_defaults defaults = {0};
    TERN_TRY(tern_hparams_read_common(cfg, &defaults, hp));
    bool ab;
    TERN_TRY(tern_cfg_bool_opt(cfg, "attention_bias", false, &ab));
    fh->qkv_bias = ab || variant == V_QWEN2;
    fh->o_bias = ab;
    fh->qk_norm = variant == V_QWEN3;
    TERN_TRY(tern_cfg_bool_opt(cfg, "mlp_bias", false, &fh->mlp_bias));
    if (variant == V_LLAMA) return TERN_OK;
    bool use = true;
    if (variant == V_QWEN2 || variant == V_QWEN3)
        TERN_TRY(tern_cfg_bool_opt(cfg, "use_sliding_window", false, &use));
    int64_t sw, mwl;
    TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window", 0, &sw));
    if (sw < 0) return tern_error(TERN_E_FORMAT, "%s: sliding_window must be >= 0", cfg->path);
    TERN_TRY(tern_cfg_int_opt(cfg, "max_window_layers", 28, &mwl)); /* transformers default */
    /* A window as long as the context changes nothing: no sliding layers. */
    hp->sliding_window = use && sw < hp->max_position_embeddings ? (int32_t)sw : 0;
    if (!hp->has_layer_types)
        for (int32_t i = 0; i < hp->num_hidden_layers; i++)
            hp->layer_sliding[i] = variant == V_MISTRAL || i >= mwl;
    return TERN_OK;
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
    if (hp->layer_sliding[layer]) p->attn.sliding_window = hp->sliding_window;
}

const struct tern_family tern_family_llama = {
    .name = "llama",
    .hparams_bytes = sizeof(struct llama_hparams),
    .read_hparams = read_hparams,
    .names = {LLAMA_NAMES},
    .plan_layer = plan_layer,
};
