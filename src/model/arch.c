/*
 * arch.c — the architecture table, and the config.json readers and rope
 * frequencies the families share (arch.h).
 *
 * Adding a llama-like family is a row here (and in llama.c's variants); a
 * family with real differences is a file under arch/. Hyperparameters keep
 * their config.json names; every read names the key on failure.
 */
#include "model/arch.h"

#include <math.h>
#include <string.h>

/* The variants, in each family file's order: arch/llama.c, arch/gemma.c,
 * arch/gemma4.c, arch/olmo.c, arch/cohere.c (glm4.c and starcoder2.c have
 * one). */
enum {
    V_LLAMA, V_MISTRAL, V_QWEN2, V_QWEN3, V_SEED_OSS, V_ERNIE4_5, V_SMOLLM3, V_GRANITE, V_MINICPM,
    V_PHI3, V_MIXTRAL, V_QWEN2_MOE, V_QWEN3_MOE
};
enum { V_GEMMA, V_GEMMA2, V_GEMMA3, V_GEMMA3_MM };
enum { V_GEMMA4_TEXT, V_GEMMA4_WRAPPER, V_GEMMA4_UNIFIED };
enum { V_OLMO2, V_OLMO3 };
enum { V_COHERE, V_COHERE2 };

static const struct tern_arch arch_table[] = {
    {"LlamaForCausalLM", &tern_family_llama, V_LLAMA},
    {"MistralForCausalLM", &tern_family_llama, V_MISTRAL},
    {"Qwen2ForCausalLM", &tern_family_llama, V_QWEN2},
    {"Qwen3ForCausalLM", &tern_family_llama, V_QWEN3},
    {"MixtralForCausalLM", &tern_family_mixtral, V_MIXTRAL},
    {"Qwen2MoeForCausalLM", &tern_family_llama, V_QWEN2_MOE},
    {"Qwen3MoeForCausalLM", &tern_family_llama, V_QWEN3_MOE},
    {"SeedOssForCausalLM", &tern_family_llama, V_SEED_OSS},
    {"Ernie4_5ForCausalLM", &tern_family_llama, V_ERNIE4_5},
    {"SmolLM3ForCausalLM", &tern_family_llama, V_SMOLLM3},
    {"GraniteForCausalLM", &tern_family_llama, V_GRANITE},
    {"MiniCPMForCausalLM", &tern_family_llama, V_MINICPM},
    {"Phi3ForCausalLM", &tern_family_phi3, V_PHI3},
    {"Olmo2ForCausalLM", &tern_family_olmo, V_OLMO2},
    {"Olmo3ForCausalLM", &tern_family_olmo, V_OLMO3},
    {"Glm4ForCausalLM", &tern_family_glm4, 0},
    {"Starcoder2ForCausalLM", &tern_family_starcoder2, 0},
    {"CohereForCausalLM", &tern_family_cohere, V_COHERE},
    {"Cohere2ForCausalLM", &tern_family_cohere, V_COHERE2},
    {"GemmaForCausalLM", &tern_family_gemma, V_GEMMA},
    {"Gemma2ForCausalLM", &tern_family_gemma2, V_GEMMA2},
    {"Gemma3ForCausalLM", &tern_family_gemma2, V_GEMMA3},
    {"Gemma3ForConditionalGeneration", &tern_family_gemma2, V_GEMMA3_MM},
    {"Gemma4ForCausalLM", &tern_family_gemma4, V_GEMMA4_TEXT},
    {"Gemma4ForConditionalGeneration", &tern_family_gemma4, V_GEMMA4_WRAPPER},
    {"Gemma4UnifiedForConditionalGeneration", &tern_family_gemma4, V_GEMMA4_UNIFIED},
};

const struct tern_arch *tern_arch_find(const char *hf_name)
{
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (!strcmp(arch_table[i].hf_name, hf_name)) return &arch_table[i];
    return NULL;
}

const char *tern_arch_supported(void)
{
    static char list[2048];
    if (!list[0]) {
        size_t k = 0;
        for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "",
                                  arch_table[i].hf_name);
    }
    return list;
}

static enum tern_status positive(const struct tern_json_doc *cfg, const char *key, int64_t v,
                                 int32_t *out)
{
    if (v <= 0 || v > INT32_MAX)
        return tern_error(TERN_E_FORMAT, "%s: key '%s' must be a positive integer, got %lld",
                          cfg->path, key, (long long)v);
    *out = (int32_t)v;
    return TERN_OK;
}

static enum tern_status read_int(const struct tern_json_doc *cfg, const char *key, int32_t *out)
{
    int64_t v;
    TERN_TRY(tern_cfg_int(cfg, key, &v));
    return positive(cfg, key, v, out);
}

static enum tern_status read_int_opt(const struct tern_json_doc *cfg, const char *key,
                                     int64_t def, int32_t *out)
{
    int64_t v;
    TERN_TRY(tern_cfg_int_opt(cfg, key, def, &v));
    return positive(cfg, key, v, out);
}

/* bos/eos: an int, a list of ints, or null. */
static void read_token_ids(const json_t *root, const char *key, int32_t *ids, int32_t cap,
                           int32_t *n)
{
    const json_t *v = json_object_get(root, key);
    if (json_is_integer(v)) {
        if (*n < cap) ids[(*n)++] = (int32_t)json_integer_value(v);
    } else if (json_is_array(v)) {
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e) if (json_is_integer(e) && *n < cap) ids[(*n)++] =
            (int32_t)json_integer_value(e);
    }
}

enum tern_status tern_cfg_softcap(const struct tern_json_doc *cfg, const char *key, double def,
                                  float *out)
{
    double v;
    const json_t *j = json_object_get(cfg->root, key);
    if (j && json_is_null(j)) {
        *out = 0;
        return TERN_OK;
    }
    TERN_TRY(tern_cfg_float_opt(cfg, key, def, &v));
    if (v < 0) return tern_error(TERN_E_FORMAT, "%s: %s must be positive, got %g", cfg->path, key, v);
    *out = (float)v;
    return TERN_OK;
}

/* longrope's per-pair factors: key `key` of the rope object, a list of
 * positive numbers (its length is checked against the rotary dim when the
 * model plans its ropes). */
static enum tern_status read_factors(const struct tern_json_doc *cfg, const json_t *rs,
                                     const char *name, const char *key, float *out, int32_t *n)
{
    const json_t *a = json_object_get(rs, key);
    if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > TERN_ROPE_MAX_FACTORS)
        return tern_error(TERN_E_FORMAT, "%s: %s.%s must be a list of 1 to %d numbers (longrope)",
                          cfg->path, name, key, TERN_ROPE_MAX_FACTORS);
    if (*n && (size_t)*n != json_array_size(a))
        return tern_error(TERN_E_FORMAT, "%s: %s.%s has %zu entries, short_factor %d", cfg->path,
                          name, key, json_array_size(a), *n);
    *n = (int32_t)json_array_size(a);
    for (int32_t i = 0; i < *n; i++) {
        const json_t *v = json_array_get(a, (size_t)i);
        double x = json_number_value(v);
        if (!json_is_number(v) || !(x > 0))
            return tern_error(TERN_E_FORMAT, "%s: %s.%s[%d] must be a positive number", cfg->path,
                              name, key, i);
        out[i] = (float)x;
    }
    return TERN_OK;
}

/* longrope (Phi 3's "su"; its legacy "yarn" when the object carries
 * long_factor, which real YaRN configs never do). factor absent: derived
 * from max_position_embeddings / original_max_position_embeddings. */
static enum tern_status read_longrope(const struct tern_json_doc *cfg, const json_t *rs,
                                      const char *name, struct tern_rope_cfg *rc)
{
    rc->kind = TERN_ROPE_LONGROPE;
    TERN_TRY(read_factors(cfg, rs, name, "short_factor", rc->short_factor, &rc->n_factors));
    TERN_TRY(read_factors(cfg, rs, name, "long_factor", rc->long_factor, &rc->n_factors));
    TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "factor", -1.0, &rc->factor));
    if (rc->factor < 0) rc->factor = (double)rc->max_pos / rc->original_max_pos;
    return tern_cfg_obj_float_opt(cfg, rs, name, "attention_factor", -1.0,
                                  &rc->longrope_attention_factor);
}

bool tern_rope_cfg_by_context(const struct tern_rope_cfg *rc)
{
    return rc->kind == TERN_ROPE_LONGROPE || rc->kind == TERN_ROPE_DYNAMIC;
}

enum tern_status tern_rope_cfg_read(const struct tern_json_doc *cfg, const char *section,
                                    const char *theta_key, double theta_def,
                                    struct tern_rope_cfg *rc)
{
    memset(rc, 0, sizeof *rc);
    char name[96];
    const char *base = "rope_scaling";
    const json_t *rs = json_object_get(cfg->root, "rope_scaling");
    if (!json_is_object(rs)) {
        rs = json_object_get(cfg->root, "rope_parameters");
        base = "rope_parameters";
    }
    snprintf(name, sizeof name, "%s", base);
    if (section && json_is_object(rs) && !strcmp(base, "rope_parameters")) {
        const json_t *sub = json_object_get(rs, section);
        snprintf(name, sizeof name, "%s.%s", base, section);
        /* transformers 5 nests one rope per layer type; a flat object serves all */
        if (json_is_object(sub)) rs = sub;
        else snprintf(name, sizeof name, "%s", base);
    }
    rc->theta = theta_def;
    rc->partial_rotary_factor = 1.0;
    if (theta_key) { /* the top-level keys, unless the family reads the rope object alone */
        TERN_TRY(tern_cfg_float_opt(cfg, theta_key, theta_def, &rc->theta));
        TERN_TRY(tern_cfg_float_opt(cfg, "partial_rotary_factor", 1.0,
                                    &rc->partial_rotary_factor));
    }
    rc->kind = TERN_ROPE_DEFAULT;
    rc->factor = 1.0;
    int64_t max_pos, top_omp;
    TERN_TRY(tern_cfg_int_opt(cfg, "max_position_embeddings", 4096, &max_pos));
    rc->original_max_pos = rc->max_pos = (int32_t)max_pos;
    /* A top-level original_max_position_embeddings wins over the rope
     * object's for the kinds that read it (transformers' standardize_rope_params). */
    TERN_TRY(tern_cfg_int_opt(cfg, "original_max_position_embeddings", 0, &top_omp));
    if (top_omp < 0 || top_omp > INT32_MAX)
        return tern_error(TERN_E_FORMAT, "%s: original_max_position_embeddings must be positive",
                          cfg->path);
    if (!json_is_object(rs)) return TERN_OK;
    TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "rope_theta", rc->theta, &rc->theta));
    TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "partial_rotary_factor",
                                    rc->partial_rotary_factor, &rc->partial_rotary_factor));
    const char *type;
    TERN_TRY(tern_cfg_obj_string_opt(cfg, rs, name, "rope_type", NULL, &type));
    if (!type) TERN_TRY(tern_cfg_obj_string_opt(cfg, rs, name, "type", "default", &type));
    TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "factor", 1.0, &rc->factor));
    int64_t omp;
    TERN_TRY(tern_cfg_obj_int_opt(cfg, rs, name, "original_max_position_embeddings", max_pos,
                                  &omp));
    if (top_omp > 0) omp = top_omp;
    if (omp < 1 || omp > INT32_MAX)
        return tern_error(TERN_E_FORMAT, "%s: %s.original_max_position_embeddings must be "
                          "positive", cfg->path, name);
    rc->original_max_pos = (int32_t)omp;
    bool has_long = json_object_get(rs, "long_factor") != NULL;
    if (!strcmp(type, "longrope") || !strcmp(type, "su") || (!strcmp(type, "yarn") && has_long)) {
        TERN_TRY(read_longrope(cfg, rs, name, rc));
    } else if (!strcmp(type, "dynamic")) {
        rc->kind = TERN_ROPE_DYNAMIC;
    } else if (!strcmp(type, "default")) {
        rc->kind = TERN_ROPE_DEFAULT;
    } else if (!strcmp(type, "linear")) {
        rc->kind = TERN_ROPE_LINEAR;
    } else if (!strcmp(type, "proportional")) {
        rc->kind = TERN_ROPE_PROPORTIONAL;
    } else if (!strcmp(type, "llama3")) {
        rc->kind = TERN_ROPE_LLAMA3;
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "low_freq_factor", 1.0,
                                        &rc->low_freq_factor));
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "high_freq_factor", 4.0,
                                        &rc->high_freq_factor));
        if (rc->high_freq_factor == rc->low_freq_factor)
            return tern_error(TERN_E_FORMAT, "%s: %s.high_freq_factor must differ from "
                              "low_freq_factor", cfg->path, name);
    } else if (!strcmp(type, "yarn")) {
        rc->kind = TERN_ROPE_YARN;
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "beta_fast", 32.0, &rc->yarn_beta_fast));
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "beta_slow", 1.0, &rc->yarn_beta_slow));
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "mscale", 0.0, &rc->yarn_mscale));
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "mscale_all_dim", 0.0,
                                        &rc->yarn_mscale_all_dim));
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "attention_factor", -1.0,
                                        &rc->yarn_attention_factor));
        const json_t *tr = json_object_get(rs, "truncate");
        rc->yarn_truncate = !json_is_false(tr);
    } else {
        return tern_error(TERN_E_UNSUPPORTED,
                          "%s: %s.rope_type '%s' is not supported (default, linear, llama3, yarn, "
                          "longrope, dynamic, proportional)", cfg->path, name, type);
    }
    if (!(rc->factor > 0))
        return tern_error(TERN_E_FORMAT, "%s: %s.factor must be positive", cfg->path, name);
    if (!(rc->theta > 0))
        return tern_error(TERN_E_FORMAT, "%s: %s rope_theta must be positive", cfg->path, name);
    return TERN_OK;
}

/* layer_types: one "sliding_attention" or "full_attention" per layer. */
static enum tern_status read_layer_types(const struct tern_json_doc *cfg, struct tern_hparams *hp)
{
    const json_t *lt = json_object_get(cfg->root, "layer_types");
    if (!lt || json_is_null(lt)) return TERN_OK;
    if (!json_is_array(lt))
        return tern_error(TERN_E_FORMAT, "%s: key 'layer_types' must be a list of strings",
                          cfg->path);
    if ((int64_t)json_array_size(lt) != hp->num_hidden_layers)
        return tern_error(TERN_E_FORMAT, "%s: key 'layer_types' has %zu entries, "
                          "num_hidden_layers is %d", cfg->path, json_array_size(lt),
                          hp->num_hidden_layers);
    for (int32_t i = 0; i < hp->num_hidden_layers; i++) {
        const json_t *v = json_array_get(lt, (size_t)i);
        const char *s = json_string_value(v);
        if (s && !strcmp(s, "sliding_attention")) hp->layer_sliding[i] = 1;
        else if (!s || strcmp(s, "full_attention"))
            return tern_error(TERN_E_UNSUPPORTED, "%s: layer_types[%d] is %s%s%s "
                              "(sliding_attention or full_attention)", cfg->path, i,
                              s ? "'" : "", s ? s : tern_json_type_name(v), s ? "'" : "");
    }
    hp->has_layer_types = true;
    return TERN_OK;
}

/* A key with a default when d > 0, required otherwise. */
static enum tern_status read_int_def(const struct tern_json_doc *cfg, const char *key, int64_t d,
                                     int32_t *out)
{
    return d > 0 ? read_int_opt(cfg, key, d, out) : read_int(cfg, key, out);
}

enum tern_status tern_hparams_read_common(const struct tern_json_doc *cfg,
                                          const struct tern_hparams_defaults *d,
                                          struct tern_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    TERN_TRY(read_int_def(cfg, "num_hidden_layers", d->num_hidden_layers, &hp->num_hidden_layers));
    if (hp->num_hidden_layers > TERN_MAX_LAYERS)
        return tern_error(TERN_E_UNSUPPORTED, "%s: num_hidden_layers %d is more than %d",
                          cfg->path, hp->num_hidden_layers, TERN_MAX_LAYERS);
    TERN_TRY(read_int_def(cfg, "hidden_size", d->hidden_size, &hp->hidden_size));
    TERN_TRY(read_int_def(cfg, "intermediate_size", d->intermediate_size, &hp->intermediate_size));
    TERN_TRY(read_int_def(cfg, "num_attention_heads", d->num_attention_heads,
                          &hp->num_attention_heads));
    TERN_TRY(read_int_opt(cfg, "num_key_value_heads",
                          d->num_key_value_heads ? d->num_key_value_heads : hp->num_attention_heads,
                          &hp->num_key_value_heads));
    TERN_TRY(read_int_def(cfg, "vocab_size", d->vocab_size, &hp->vocab_size));
    TERN_TRY(read_int_opt(cfg, "max_position_embeddings",
                          d->max_position_embeddings ? d->max_position_embeddings : 4096,
                          &hp->max_position_embeddings));
    if (hp->num_attention_heads % hp->num_key_value_heads)
        return tern_error(TERN_E_FORMAT,
                          "%s: num_attention_heads (%d) must be a multiple of "
                          "num_key_value_heads (%d)",
                          cfg->path, hp->num_attention_heads, hp->num_key_value_heads);
    int64_t hd;
    TERN_TRY(tern_cfg_int_opt(cfg, "head_dim",
                              d->head_dim ? d->head_dim : hp->hidden_size / hp->num_attention_heads,
                              &hd));
    TERN_TRY(positive(cfg, "head_dim", hd, &hp->head_dim));
    if (hp->head_dim % 2)
        return tern_error(TERN_E_FORMAT, "%s: head_dim %d must be even", cfg->path, hp->head_dim);
    double eps;
    TERN_TRY(tern_cfg_float_opt(cfg, "rms_norm_eps", d->rms_norm_eps > 0 ? d->rms_norm_eps : 1e-6,
                                &eps));
    if (!(eps > 0 && eps < 1))
        return tern_error(TERN_E_FORMAT, "%s: rms_norm_eps must be in (0, 1), got %g", cfg->path,
                          eps);
    hp->rms_norm_eps = (float)eps;
    TERN_TRY(tern_cfg_bool_opt(cfg, "tie_word_embeddings", d->tie_word_embeddings,
                               &hp->tie_word_embeddings));
    hp->n_ropes = 1;
    TERN_TRY(tern_rope_cfg_read(cfg, NULL, "rope_theta", d->rope_theta > 0 ? d->rope_theta : 1e4,
                                &hp->ropes[0]));
    TERN_TRY(read_layer_types(cfg, hp));
    hp->bos_token_id = -1;
    int32_t n = 0, bos[1];
    read_token_ids(cfg->root, "bos_token_id", bos, 1, &n);
    if (n) hp->bos_token_id = bos[0];
    else if (d->bos_token_id > 0) hp->bos_token_id = d->bos_token_id;
    read_token_ids(cfg->root, "eos_token_id", hp->eos_token_ids, 8, &hp->n_eos);
    if (!hp->n_eos && d->eos_token_id > 0) hp->eos_token_ids[hp->n_eos++] = d->eos_token_id;
    return TERN_OK;
}

static enum tern_status read_count(const struct tern_json_doc *cfg, const char *key, int64_t def,
                                   int64_t *out)
{
    if (def < 0) TERN_TRY(tern_cfg_int(cfg, key, out));
    else TERN_TRY(tern_cfg_int_opt(cfg, key, def, out));
    if (*out < 0 || *out > INT32_MAX)
        return tern_error(TERN_E_FORMAT, "%s: key '%s' must be a non-negative integer, got %lld",
                          cfg->path, key, (long long)*out);
    return TERN_OK;
}

enum tern_status tern_moe_read_counts(const struct tern_json_doc *cfg, const char *n_key,
                                      int64_t n_def, const char *k_key, int64_t k_def,
                                      const char *i_key, int64_t i_def, struct tern_moe_plan *mp)
{
    int64_t n, k, i;
    TERN_TRY(read_count(cfg, n_key, n_def, &n));
    mp->n_experts = (int32_t)n;
    if (!n) return TERN_OK;
    TERN_TRY(read_count(cfg, k_key, k_def, &k));
    TERN_TRY(read_count(cfg, i_key, i_def, &i));
    if (k < 1 || k > n || k > TERN_MOE_MAX_K || i < 1)
        return tern_error(TERN_E_FORMAT, "%s: %s %lld must be in [1, %s %lld] and at most %d, "
                          "%s %lld at least 1", cfg->path, k_key, (long long)k, n_key,
                          (long long)n, TERN_MOE_MAX_K, i_key, (long long)i);
    mp->top_k = (int32_t)k;
    mp->intermediate = i;
    return TERN_OK;
}

void tern_layer_plan_default(const struct tern_hparams *hp, int32_t layer,
                             struct tern_layer_plan *p)
{
    memset(p, 0, sizeof *p);
    p->attn.n_heads = hp->num_attention_heads;
    p->attn.n_kv_heads = hp->num_key_value_heads;
    p->attn.head_dim = hp->head_dim;
    p->attn.scale = 1.0f / sqrtf((float)hp->head_dim);
    p->kv_source = layer;
    p->intermediate = hp->intermediate_size;
    p->act = TERN_ACT_SILU;
}

/* ---------------------------------------------------------------- rope */

static double yarn_get_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double n_rot, int dim, double base, double max_pos)
{
    return (dim * log(max_pos / (n_rot * 2 * M_PI))) / (2 * log(base));
}

void tern_rope_inv_freq(const struct tern_rope_cfg *rc, int32_t head_dim, int32_t dim,
                        int64_t context, float *inv, float *mscale)
{
    int half = dim / 2;
    float base = (float)rc->theta;
    *mscale = 1.0f;
    /* As transformers: base ** (arange(0, dim, 2).float() / dim), all float32. */
    for (int i = 0; i < half; i++) inv[i] = 1.0f / powf(base, (float)(2 * i) / (float)dim);
    switch (rc->kind) {
    case TERN_ROPE_DEFAULT:
        break;
    case TERN_ROPE_PROPORTIONAL: {
        /* The whole head rotates as pairs (i, i + head_dim / 2); the first
         * partial_rotary_factor * head_dim / 2 pairs at base ** (-2 i /
         * head_dim), the rest not at all (frequency 0). `dim` is head_dim. */
        int rot_pairs = (int)(rc->partial_rotary_factor * head_dim) / 2;
        for (int i = 0; i < half; i++)
            inv[i] = i < rot_pairs ? 1.0f / powf(base, (float)(2 * i) / (float)head_dim) : 0.0f;
        for (int i = 0; i < half; i++) inv[i] = inv[i] / (float)rc->factor;
        break;
    }
    case TERN_ROPE_LINEAR:
        for (int i = 0; i < half; i++) inv[i] = inv[i] / (float)rc->factor;
        break;
    case TERN_ROPE_LONGROPE: {
        /* 1 / (ext_i * base ** (2 i / dim)), ext the long factors past the
         * original context; the attention factor from `factor`. */
        const float *ext = context > rc->original_max_pos ? rc->long_factor : rc->short_factor;
        for (int i = 0; i < half; i++)
            inv[i] = 1.0f / (ext[i] * powf(base, (float)(2 * i) / (float)dim));
        double af = rc->longrope_attention_factor;
        if (af <= 0)
            af = rc->factor <= 1.0 ? 1.0
                                   : sqrt(1.0 + log(rc->factor) / log((double)rc->original_max_pos));
        *mscale = (float)af;
        break;
    }
    case TERN_ROPE_DYNAMIC: {
        /* Past max_position_embeddings theta grows with the length, in
         * float32 as transformers computes it from a tensor length. */
        if (context <= rc->max_pos) break;
        float f = (float)rc->factor;
        float grow = f * (float)context / (float)rc->max_pos - (f - 1.0f);
        float b = base * powf(grow, (float)dim / (float)(dim - 2));
        for (int i = 0; i < half; i++) inv[i] = 1.0f / powf(b, (float)(2 * i) / (float)dim);
        break;
    }
    case TERN_ROPE_LLAMA3: {
        float factor = (float)rc->factor, lo = (float)rc->low_freq_factor,
              hi = (float)rc->high_freq_factor, old = (float)rc->original_max_pos;
        float lo_wl = old / lo, hi_wl = old / hi;
        for (int i = 0; i < half; i++) {
            float wl = 2.0f * (float)M_PI / inv[i];
            float f = wl > lo_wl ? inv[i] / factor : inv[i];
            float smooth = (old / wl - lo) / (hi - lo);
            float smoothed = (1.0f - smooth) * f / factor + smooth * f;
            bool medium = !(wl < hi_wl) && !(wl > lo_wl);
            inv[i] = medium ? smoothed : f;
        }
        break;
    }
    case TERN_ROPE_YARN: {
        double factor = rc->factor;
        double af = rc->yarn_attention_factor;
        if (af <= 0) {
            if (rc->yarn_mscale > 0 && rc->yarn_mscale_all_dim > 0)
                af = yarn_get_mscale(factor, rc->yarn_mscale) /
                     yarn_get_mscale(factor, rc->yarn_mscale_all_dim);
            else
                af = yarn_get_mscale(factor, 1.0);
        }
        double lo = yarn_correction_dim(rc->yarn_beta_fast, dim, rc->theta,
                                        rc->original_max_pos);
        double hi = yarn_correction_dim(rc->yarn_beta_slow, dim, rc->theta,
                                        rc->original_max_pos);
        if (rc->yarn_truncate) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        if (lo < 0) lo = 0;
        if (hi > dim - 1) hi = dim - 1;
        if (lo == hi) hi += 0.001;
        for (int i = 0; i < half; i++) {
            float pos_freq = powf(base, (float)(2 * i) / (float)dim);
            float extra = 1.0f / pos_freq;
            float inter = 1.0f / ((float)factor * pos_freq);
            float ramp = ((float)i - (float)lo) / ((float)hi - (float)lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float ef = 1.0f - ramp;
            inv[i] = inter * (1.0f - ef) + extra * ef;
        }
        *mscale = (float)af;
        break;
    }
    }
}
