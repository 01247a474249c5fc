/*
 * arch.c — the architecture table and hyperparameter reading.
 *
 * Adding a llama-like family is one row here. Hyperparameters keep their
 * config.json names; every read names the key on failure.
 */
#include "model/model.h"

#include <math.h>
#include <string.h>

static const struct tern_arch arch_table[] = {
    /* hf_name              qkv_bias qk_norm sliding use_flag tied */
    {"LlamaForCausalLM", false, false, false, false, false},
    {"MistralForCausalLM", false, false, true, false, false},
    {"Qwen2ForCausalLM", true, false, true, true, false},
    {"Qwen3ForCausalLM", false, true, true, true, false},
};

const struct tern_arch *tern_arch_find(const char *hf_name)
{
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (!strcmp(arch_table[i].hf_name, hf_name)) return &arch_table[i];
    return NULL;
}

const char *tern_arch_supported(void)
{
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";
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

/* rope_scaling (transformers 4.x) or rope_parameters (5.x). */
static enum tern_status read_rope(const struct tern_json_doc *cfg, struct tern_hparams *hp)
{
    const char *name = "rope_scaling";
    const json_t *rs = json_object_get(cfg->root, "rope_scaling");
    if (!json_is_object(rs)) {
        rs = json_object_get(cfg->root, "rope_parameters");
        name = "rope_parameters";
    }
    TERN_TRY(tern_cfg_float_opt(cfg, "rope_theta", 10000.0, &hp->rope_theta));
    TERN_TRY(tern_cfg_float_opt(cfg, "partial_rotary_factor", 1.0, &hp->partial_rotary_factor));
    hp->rope_kind = TERN_ROPE_DEFAULT;
    hp->rope_factor = 1.0;
    if (!json_is_object(rs)) return TERN_OK;
    TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "rope_theta", hp->rope_theta, &hp->rope_theta));
    TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "partial_rotary_factor",
                                    hp->partial_rotary_factor, &hp->partial_rotary_factor));
    const char *type;
    TERN_TRY(tern_cfg_obj_string_opt(cfg, rs, name, "rope_type", NULL, &type));
    if (!type) TERN_TRY(tern_cfg_obj_string_opt(cfg, rs, name, "type", "default", &type));
    TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "factor", 1.0, &hp->rope_factor));
    int64_t omp;
    TERN_TRY(tern_cfg_obj_int_opt(cfg, rs, name, "original_max_position_embeddings",
                                  hp->max_position_embeddings, &omp));
    hp->rope_original_max_pos = (int32_t)omp;
    if (!strcmp(type, "default")) {
        hp->rope_kind = TERN_ROPE_DEFAULT;
    } else if (!strcmp(type, "linear")) {
        hp->rope_kind = TERN_ROPE_LINEAR;
    } else if (!strcmp(type, "llama3")) {
        hp->rope_kind = TERN_ROPE_LLAMA3;
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "low_freq_factor", 1.0,
                                        &hp->rope_low_freq_factor));
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "high_freq_factor", 4.0,
                                        &hp->rope_high_freq_factor));
        if (hp->rope_high_freq_factor == hp->rope_low_freq_factor)
            return tern_error(TERN_E_FORMAT, "%s: %s.high_freq_factor must differ from "
                              "low_freq_factor", cfg->path, name);
    } else if (!strcmp(type, "yarn")) {
        hp->rope_kind = TERN_ROPE_YARN;
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "beta_fast", 32.0, &hp->yarn_beta_fast));
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "beta_slow", 1.0, &hp->yarn_beta_slow));
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "mscale", 0.0, &hp->yarn_mscale));
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "mscale_all_dim", 0.0,
                                        &hp->yarn_mscale_all_dim));
        TERN_TRY(tern_cfg_obj_float_opt(cfg, rs, name, "attention_factor", -1.0,
                                        &hp->yarn_attention_factor));
        const json_t *tr = json_object_get(rs, "truncate");
        hp->yarn_truncate = !json_is_false(tr);
    } else {
        return tern_error(TERN_E_UNSUPPORTED,
                          "%s: %s.rope_type '%s' is not supported (default, linear, llama3, yarn)",
                          cfg->path, name, type);
    }
    if (!(hp->rope_factor > 0))
        return tern_error(TERN_E_FORMAT, "%s: %s.factor must be positive", cfg->path, name);
    return TERN_OK;
}

enum tern_status tern_hparams_read(const struct tern_json_doc *cfg, const struct tern_arch *arch,
                                   struct tern_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    TERN_TRY(read_int(cfg, "num_hidden_layers", &hp->num_hidden_layers));
    TERN_TRY(read_int(cfg, "hidden_size", &hp->hidden_size));
    TERN_TRY(read_int(cfg, "intermediate_size", &hp->intermediate_size));
    TERN_TRY(read_int(cfg, "num_attention_heads", &hp->num_attention_heads));
    TERN_TRY(read_int_opt(cfg, "num_key_value_heads", hp->num_attention_heads,
                          &hp->num_key_value_heads));
    TERN_TRY(read_int(cfg, "vocab_size", &hp->vocab_size));
    TERN_TRY(read_int_opt(cfg, "max_position_embeddings", 4096, &hp->max_position_embeddings));
    if (hp->num_attention_heads % hp->num_key_value_heads)
        return tern_error(TERN_E_FORMAT,
                          "%s: num_attention_heads (%d) must be a multiple of "
                          "num_key_value_heads (%d)",
                          cfg->path, hp->num_attention_heads, hp->num_key_value_heads);
    int64_t hd;
    TERN_TRY(tern_cfg_int_opt(cfg, "head_dim", hp->hidden_size / hp->num_attention_heads, &hd));
    TERN_TRY(positive(cfg, "head_dim", hd, &hp->head_dim));
    if (hp->head_dim % 2)
        return tern_error(TERN_E_FORMAT, "%s: head_dim %d must be even", cfg->path, hp->head_dim);
    double eps;
    TERN_TRY(tern_cfg_float_opt(cfg, "rms_norm_eps", 1e-6, &eps));
    if (!(eps > 0 && eps < 1))
        return tern_error(TERN_E_FORMAT, "%s: rms_norm_eps must be in (0, 1), got %g", cfg->path,
                          eps);
    hp->rms_norm_eps = (float)eps;
    TERN_TRY(tern_cfg_bool_opt(cfg, "tie_word_embeddings", arch->tied_default,
                               &hp->tie_word_embeddings));
    bool ab;
    TERN_TRY(tern_cfg_bool_opt(cfg, "attention_bias", false, &ab));
    hp->attention_bias = ab || arch->qkv_bias_default;
    hp->o_bias = ab;
    TERN_TRY(tern_cfg_bool_opt(cfg, "mlp_bias", false, &hp->mlp_bias));
    if (arch->sliding_window_key) {
        bool use = true;
        if (arch->use_sliding_flag) TERN_TRY(tern_cfg_bool_opt(cfg, "use_sliding_window", false, &use));
        int64_t sw;
        TERN_TRY(tern_cfg_int_opt(cfg, "sliding_window", 0, &sw));
        if (sw < 0) return tern_error(TERN_E_FORMAT, "%s: sliding_window must be >= 0", cfg->path);
        hp->sliding_window = use && sw < hp->max_position_embeddings ? (int32_t)sw : 0;
    }
    TERN_TRY(read_rope(cfg, hp));
    int32_t rot = (int32_t)(hp->head_dim * hp->partial_rotary_factor);
    if (rot < 2 || rot > hp->head_dim || rot % 2)
        return tern_error(TERN_E_FORMAT, "%s: partial_rotary_factor %g gives rotary dim %d",
                          cfg->path, hp->partial_rotary_factor, rot);
    hp->bos_token_id = -1;
    int32_t n = 0, bos[1];
    read_token_ids(cfg->root, "bos_token_id", bos, 1, &n);
    if (n) hp->bos_token_id = bos[0];
    read_token_ids(cfg->root, "eos_token_id", hp->eos_token_ids, 8, &hp->n_eos);
    return TERN_OK;
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

void tern_rope_inv_freq(const struct tern_hparams *hp, int32_t dim, float *inv, float *mscale)
{
    int half = dim / 2;
    float base = (float)hp->rope_theta;
    *mscale = 1.0f;
    /* As transformers: base ** (arange(0, dim, 2).float() / dim), all float32. */
    for (int i = 0; i < half; i++) inv[i] = 1.0f / powf(base, (float)(2 * i) / (float)dim);
    switch (hp->rope_kind) {
    case TERN_ROPE_DEFAULT:
        break;
    case TERN_ROPE_LINEAR:
        for (int i = 0; i < half; i++) inv[i] = inv[i] / (float)hp->rope_factor;
        break;
    case TERN_ROPE_LLAMA3: {
        float factor = (float)hp->rope_factor, lo = (float)hp->rope_low_freq_factor,
              hi = (float)hp->rope_high_freq_factor, old = (float)hp->rope_original_max_pos;
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
        double factor = hp->rope_factor;
        double af = hp->yarn_attention_factor;
        if (af <= 0) {
            if (hp->yarn_mscale > 0 && hp->yarn_mscale_all_dim > 0)
                af = yarn_get_mscale(factor, hp->yarn_mscale) /
                     yarn_get_mscale(factor, hp->yarn_mscale_all_dim);
            else
                af = yarn_get_mscale(factor, 1.0);
        }
        double lo = yarn_correction_dim(hp->yarn_beta_fast, dim, hp->rope_theta,
                                        hp->rope_original_max_pos);
        double hi = yarn_correction_dim(hp->yarn_beta_slow, dim, hp->rope_theta,
                                        hp->rope_original_max_pos);
        if (hp->yarn_truncate) {
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
