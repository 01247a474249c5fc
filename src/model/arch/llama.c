/*
 * llama.c — the llama-like family: LlamaForCausalLM (Llama 2/3.x),
 * MistralForCausalLM, Qwen2ForCausalLM (q/k/v bias) and Qwen3ForCausalLM
 * (per-head q/k norms), and their mixture-of-experts rows:
 * MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM. One block
 * shape: pre-norm attention with rope and GQA, then a pre-norm SwiGLU MLP
 * or SwiGLU experts; the rows differ in biases, head norms, which layers
 * slide, and which layers have experts and how they are routed.
 *
 *   variant     qkv bias        q/k norm   sliding window
 *   llama       attention_bias  no         no
 *   mistral     attention_bias  no         sliding_window, every layer
 *   qwen2       always          no         use_sliding_window: layers >= max_window_layers
 *   qwen3       attention_bias  yes        as qwen2
 *   mixtral     no              no         sliding_window, every layer
 *   qwen2_moe   qkv_bias (true) no         use_sliding_window: even layers < max_window_layers
 *   qwen3_moe   attention_bias  yes        use_sliding_window: every layer
 *
 *   experts     which layers                       router (softmax over all, float32; top k)
 *   mixtral     every layer (num_local_experts)    weights renormalised over the k
 *   qwen2_moe   not in mlp_only_layers, and        renormalised when norm_topk_prob;
 *   qwen3_moe   (i + 1) % decoder_sparse_step == 0 qwen2_moe adds a shared expert
 *                                                  times sigmoid(h shared_expert_gate)
 *
 * (layer_types, where config.json has it, says which layers slide.)
 * Mixtral is its own family struct only because its tensors have other
 * names (block_sparse_moe.experts.N.w1 ...).
 */
#include "model/arch.h"

#include <string.h>

enum { V_LLAMA, V_MISTRAL, V_QWEN2, V_QWEN3, V_MIXTRAL, V_QWEN2_MOE, V_QWEN3_MOE };

/* ---- 1. hyperparameters ---- */

struct llama_hparams {
    bool qkv_bias, o_bias, mlp_bias, qk_norm;
    /* experts (the MoE rows): their counts and routing, and which layers have them */
    struct tern_moe_plan moe;
    int64_t shared_intermediate; /* qwen2_moe's shared expert */
    uint8_t moe_layer[TERN_MAX_LAYERS];
};

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
    TERN_TRY(tern_moe_read_counts(cfg, nk, q2 ? 60 : 128, "num_experts_per_tok",
                                  q2 ? 4 : 8, "moe_intermediate_size", q2 ? 1408 : 768, mp));
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

/* Which layers slide: mistral and mixtral every layer, qwen3_moe every
 * layer when use_sliding_window, qwen2 and qwen3 from max_window_layers
 * on, qwen2_moe the even layers below it (transformers' rules). */
static enum tern_status read_sliding(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp)
{
    bool qwen = variant == V_QWEN2 || variant == V_QWEN3 || variant == V_QWEN2_MOE ||
                variant == V_QWEN3_MOE;
    bool use = true;
    if (qwen) TERN_TRY(tern_cfg_bool_opt(cfg, "use_sliding_window", false, &use));
    int64_t sw, mwl;
    TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window", 0, &sw));
    if (sw < 0) return tern_error(TERN_E_FORMAT, "%s: sliding_window must be >= 0", cfg->path);
    TERN_TRY(tern_cfg_int_opt(cfg, "max_window_layers", 28, &mwl)); /* transformers default */
    /* A window as long as the context changes nothing: no sliding layers. */
    hp->sliding_window = use && sw < hp->max_position_embeddings ? (int32_t)sw : 0;
    if (hp->has_layer_types) return TERN_OK;
    for (int32_t i = 0; i < hp->num_hidden_layers; i++) {
        bool all = variant == V_MISTRAL || variant == V_MIXTRAL || variant == V_QWEN3_MOE;
        hp->layer_sliding[i] = all                      ? 1
                               : variant == V_QWEN2_MOE ? (i + 1) % 2 && i < mwl
                                                        : i >= mwl;
    }
    return TERN_OK;
}

static enum tern_status read_hparams(const struct tern_json_doc *cfg, int variant,
                                     struct tern_hparams *hp, void *fhp)
{
    struct llama_hparams *fh = fhp;
    static const struct tern_hparams_defaults defaults = {0};
    TERN_TRY(tern_hparams_read_common(cfg, &defaults, hp));
    bool ab, qb;
    TERN_TRY(tern_cfg_bool_opt(cfg, "attention_bias", false, &ab));
    TERN_TRY(tern_cfg_bool_opt(cfg, "qkv_bias", true, &qb)); /* qwen2_moe's key */
    fh->qkv_bias = variant == V_QWEN2_MOE ? qb : variant != V_MIXTRAL && (ab || variant == V_QWEN2);
    fh->o_bias = variant != V_MIXTRAL && variant != V_QWEN2_MOE && ab;
    fh->qk_norm = variant == V_QWEN3 || variant == V_QWEN3_MOE;
    TERN_TRY(tern_cfg_bool_opt(cfg, "mlp_bias", false, &fh->mlp_bias));
    if (variant >= V_MIXTRAL) {
        fh->mlp_bias = false;
        TERN_TRY(read_moe(cfg, variant, hp, fh));
    }
    if (variant == V_LLAMA) return TERN_OK;
    return read_sliding(cfg, variant, hp);
}

/* ---- 2. tensor names ---- */

#define LLAMA_ATTN_NAMES                                                                           \
    [TT_EMBED] = "embed_tokens", [TT_NORM] = "norm.weight", [TT_LM_HEAD] = "lm_head",              \
    [TT_ATTN_NORM] = "layers.%d.input_layernorm.weight",                                           \
    [TT_FFN_NORM] = "layers.%d.post_attention_layernorm.weight",                                   \
    [TT_Q] = "layers.%d.self_attn.q_proj", [TT_K] = "layers.%d.self_attn.k_proj",                  \
    [TT_V] = "layers.%d.self_attn.v_proj", [TT_O] = "layers.%d.self_attn.o_proj",                  \
    [TT_Q_NORM] = "layers.%d.self_attn.q_norm.weight",                                             \
    [TT_K_NORM] = "layers.%d.self_attn.k_norm.weight"

#define LLAMA_NAMES                                                                                \
    LLAMA_ATTN_NAMES, [TT_GATE] = "layers.%d.mlp.gate_proj", [TT_UP] = "layers.%d.mlp.up_proj",    \
    [TT_DOWN] = "layers.%d.mlp.down_proj", [TT_ROUTER] = "layers.%d.mlp.gate",                     \
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
    LLAMA_ATTN_NAMES, [TT_ROUTER] = "layers.%d.block_sparse_moe.gate",                             \
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
    .names = {LLAMA_NAMES},
    .plan_layer = plan_layer,
};

const struct tern_family tern_family_mixtral = {
    .name = "mixtral",
    .hparams_bytes = sizeof(struct llama_hparams),
    .read_hparams = read_hparams,
    .names = {MIXTRAL_NAMES},
    .plan_layer = plan_layer,
};
