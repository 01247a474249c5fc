/*
 * embed_cfg.c — whether a snapshot is a sentence-transformers embedding
 * model tern runs, and how it pools, from the files such snapshots carry
 * (Qwen3-Embedding, for one):
 *
 *   modules.json                       [{"type": "...models.Transformer", "path": ""},
 *                                       {"type": "...models.Pooling", "path": "1_Pooling"},
 *                                       {"type": "...models.Normalize", "path": "2_Normalize"}]
 *   1_Pooling/config.json              {"word_embedding_dimension": 1024,
 *                                       "pooling_mode_lasttoken": true, ...,
 *                                       "include_prompt": true}
 *                                      (sentence-transformers 6: "embedding_dimension",
 *                                       "pooling_mode": "lasttoken")
 *   config_sentence_transformers.json  {"prompts": {"query": "Instruct: ...\nQuery:",
 *                                       "document": ""}, "default_prompt_name": null}
 *
 * tern runs the Transformer module (the decoder itself, at path ""), a
 * Pooling module of one mode (last token, mean, CLS) and a Normalize module;
 * any other module (Dense, LayerNorm, ...) or pooling mode makes the model
 * "not an embedding model tern runs", with the reason kept for
 * tern_model_embed_info. A snapshot without modules.json is a plain model.
 * The model opens either way: these files never stop a generation model.
 * Also tern_model_embed_info and tern_embed_tokenize of the public API.
 */
#include "api/api.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Keeps the reason the snapshot is not an embedding model tern runs. */
static enum tern_status no(struct tern_embed_cfg *c, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    c->reason = tern_strdup(buf);
    return c->reason ? TERN_OK : TERN_E_NO_MEMORY;
}

/* The class name after the last '.' of a module's type. */
static const char *class_of(const char *type)
{
    const char *dot = strrchr(type, '.');
    return dot ? dot + 1 : type;
}

static bool jtrue(const json_t *o, const char *key) { return json_is_true(json_object_get(o, key)); }

/* The pooling mode of a Pooling config (into c->pooling, or a reason).
 * sentence-transformers 6 writes "pooling_mode": "lasttoken" (or a list of
 * modes, concatenated); earlier versions one pooling_mode_* flag per mode,
 * which it reads as the modes that are true (none: mean). */
static enum tern_status pooling_mode(struct tern_embed_cfg *c, const json_t *o, const char *path)
{
    static const struct {
        const char *flag, *name;
        enum tern_pooling p;
    } modes[] = {{"pooling_mode_lasttoken", "lasttoken", TERN_POOLING_LAST},
                 {"pooling_mode_mean_tokens", "mean", TERN_POOLING_MEAN},
                 {"pooling_mode_cls_token", "cls", TERN_POOLING_CLS},
                 {"pooling_mode_max_tokens", "max", TERN_POOLING_NONE},
                 {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens", TERN_POOLING_NONE},
                 {"pooling_mode_weightedmean_tokens", "weightedmean", TERN_POOLING_NONE}};
    const json_t *pm = json_object_get(o, "pooling_mode");
    if (json_is_array(pm) && json_array_size(pm) == 1) pm = json_array_get(pm, 0);
    if (pm && !json_is_string(pm))
        return no(c, "%s: pooling_mode must be one mode (tern does not concatenate poolings)",
                  path);
    int found = -1, n_true = 0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        bool on = pm ? !strcmp(json_string_value(pm), modes[i].name) : jtrue(o, modes[i].flag);
        if (on && found < 0) found = (int)i;
        n_true += on;
    }
    if (pm && found < 0)
        return no(c, "%s: pooling_mode \"%s\" is not a pooling mode", path, json_string_value(pm));
    if (n_true > 1)
        return no(c, "%s: several pooling modes are true (tern does not concatenate poolings)",
                  path);
    if (found >= 0 && modes[found].p == TERN_POOLING_NONE)
        return no(c, "%s: pooling mode '%s' is not supported (tern pools by lasttoken, mean or "
                  "cls)", path, modes[found].name);
    c->pooling = found < 0 ? TERN_POOLING_MEAN : modes[found].p;
    return TERN_OK;
}

/* The Pooling module's config.json: one supported mode, the right width. */
static enum tern_status read_pooling(struct tern_embed_cfg *c, const char *dir, const char *sub,
                                     int32_t hidden)
{
    char rel[512];
    snprintf(rel, sizeof rel, "%s%sconfig.json", sub, *sub ? "/" : "");
    char *path = tern_path_join(dir, rel);
    if (!path) return TERN_E_NO_MEMORY;
    json_error_t jerr;
    bool exists = tern_file_exists(path);
    json_t *o = exists ? json_load_file(path, 0, &jerr) : NULL;
    enum tern_status st = TERN_OK;
    const json_t *w = json_object_get(o, "embedding_dimension");
    if (!w) w = json_object_get(o, "word_embedding_dimension");
    if (!exists)
        st = no(c, "%s: missing (modules.json names the Pooling module at '%s')", path, sub);
    else if (!json_is_object(o))
        st = no(c, "%s: not a JSON object", path);
    else if ((st = pooling_mode(c, o, path)) == TERN_OK && !c->reason) {
        if (json_is_integer(w) && json_integer_value(w) != hidden)
            st = no(c, "%s: the embedding dimension %lld is not the model's hidden_size %d", path,
                    (long long)json_integer_value(w), hidden);
        else
            c->include_prompt = !json_is_false(json_object_get(o, "include_prompt"));
    }
    json_decref(o);
    tern_free(path);
    return st;
}

/* config_sentence_transformers.json's prompts and default prompt (optional). */
static enum tern_status read_prompts(struct tern_embed_cfg *c, const char *dir)
{
    char *path = tern_path_join(dir, "config_sentence_transformers.json");
    if (!path) return TERN_E_NO_MEMORY;
    json_error_t jerr;
    json_t *o = tern_file_exists(path) ? json_load_file(path, 0, &jerr) : NULL;
    enum tern_status st = TERN_OK;
    const json_t *prompts = json_object_get(o, "prompts");
    const json_t *def = json_object_get(o, "default_prompt_name");
    if (tern_file_exists(path) && (!json_is_object(o) || (prompts && !json_is_object(prompts)) ||
                                   (def && !json_is_null(def) && !json_is_string(def)))) {
        st = no(c, "%s: expected an object with a 'prompts' object of strings and a "
                "'default_prompt_name' string or null", path);
        goto out;
    }
    size_t n = json_object_size(prompts);
    c->names = tern_calloc(n + 1, sizeof *c->names);
    c->texts = tern_calloc(n + 1, sizeof *c->texts);
    if (!c->names || !c->texts) {
        st = TERN_E_NO_MEMORY;
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)prompts, k, v) {
        if (!json_is_string(v)) {
            st = no(c, "%s: prompts.%s must be a string", path, k);
            goto out;
        }
        c->names[c->n_prompts] = tern_strdup(k);
        c->texts[c->n_prompts] = tern_strdup(json_string_value(v));
        if (!c->names[c->n_prompts++] || !c->texts[c->n_prompts - 1]) {
            st = TERN_E_NO_MEMORY;
            goto out;
        }
    }
    if (json_is_string(def)) {
        c->default_prompt = tern_strdup(json_string_value(def));
        if (!c->default_prompt) st = TERN_E_NO_MEMORY;
    }
out:
    json_decref(o);
    tern_free(path);
    return st;
}

/* modules.json: Transformer at "", one Pooling, an optional Normalize. */
static enum tern_status read_modules(struct tern_embed_cfg *c, const char *dir, int32_t hidden)
{
    char *path = tern_path_join(dir, "modules.json");
    if (!path) return TERN_E_NO_MEMORY;
    enum tern_status st = TERN_OK;
    json_t *a = NULL;
    if (!tern_file_exists(path)) {
        st = no(c, "%s: no modules.json: not a sentence-transformers embedding model", dir);
        goto out;
    }
    json_error_t jerr;
    a = json_load_file(path, 0, &jerr);
    if (!json_is_array(a)) {
        st = a ? no(c, "%s: not a JSON array of modules", path)
               : no(c, "%s: invalid JSON at line %d: %s", path, jerr.line, jerr.text);
        goto out;
    }
    const char *pool_path = NULL;
    size_t i;
    json_t *m;
    json_array_foreach(a, i, m) {
        const json_t *t = json_object_get(m, "type"), *p = json_object_get(m, "path");
        if (!json_is_string(t)) {
            st = no(c, "%s: module %zu has no 'type' string", path, i);
            goto out;
        }
        const char *cls = class_of(json_string_value(t)), *sub = json_is_string(p) ? json_string_value(p) : "";
        if (!strcmp(cls, "Transformer") && i == 0 && !*sub) continue;
        if (!strcmp(cls, "Pooling") && !pool_path) {
            pool_path = sub;
            continue;
        }
        if (!strcmp(cls, "Normalize") && pool_path) {
            c->normalize = true;
            continue;
        }
        st = no(c, "%s: module %zu is %s%s%s, which tern does not run (it runs the Transformer "
                "module at path \"\", then Pooling, then Normalize)", path, i,
                json_string_value(t), *sub ? " at " : "", sub);
        goto out;
    }
    if (!pool_path) {
        st = no(c, "%s: no Pooling module", path);
        goto out;
    }
    if ((st = read_pooling(c, dir, pool_path, hidden)) != TERN_OK || c->reason) goto out;
    st = read_prompts(c, dir);
out:
    json_decref(a);
    tern_free(path);
    return st;
}

enum tern_status tern_embed_cfg_load(const char *dir, int32_t hidden, struct tern_embed_cfg *c)
{
    memset(c, 0, sizeof *c);
    TERN_TRY(read_modules(c, dir, hidden));
    c->ok = !c->reason;
    if (c->ok) c->dim = hidden;
    else c->pooling = TERN_POOLING_NONE;
    return TERN_OK;
}

void tern_embed_cfg_free(struct tern_embed_cfg *c)
{
    for (int32_t i = 0; i < c->n_prompts; i++) {
        tern_free(c->names[i]);
        tern_free(c->texts[i]);
    }
    tern_free(c->names);
    tern_free(c->texts);
    tern_free(c->default_prompt);
    tern_free(c->reason);
    memset(c, 0, sizeof *c);
}

/* ------------------------------------------------------------- public API */

enum tern_status tern_model_embed_info(const struct tern_model *m, struct tern_embed_info *out)
{
    if (out) memset(out, 0, sizeof *out);
    if (!m || !out) return tern_error(TERN_E_INVALID_ARG, "embed_info: NULL argument");
    const struct tern_embed_cfg *c = &m->embed;
    if (!c->ok)
        return tern_error(TERN_E_UNSUPPORTED, "%s",
                          c->reason ? c->reason : "not a sentence-transformers embedding model");
    out->pooling = c->pooling;
    out->normalize = c->normalize;
    out->include_prompt = c->include_prompt;
    out->dim = c->dim;
    out->n_prompts = c->n_prompts;
    out->prompt_names = (const char *const *)c->names;
    out->prompts = (const char *const *)c->texts;
    out->default_prompt = c->default_prompt;
    return TERN_OK;
}

/* The named prompt's text; NULL name: the default prompt or "". */
static enum tern_status find_prompt(const struct tern_embed_cfg *c, const char *name,
                                    const char **text)
{
    *text = "";
    if (!name) name = c->default_prompt;
    if (!name || !*name) return TERN_OK;
    for (int32_t i = 0; i < c->n_prompts; i++)
        if (!strcmp(c->names[i], name)) {
            *text = c->texts[i];
            return TERN_OK;
        }
    char have[256] = "";
    for (int32_t i = 0; i < c->n_prompts; i++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s'%s'", i ? ", " : "",
                 c->names[i]);
    return tern_error(TERN_E_INVALID_ARG, "prompt '%s' is not one of the model's prompts (%s)",
                      name, c->n_prompts ? have : "it has none");
}

enum tern_status tern_embed_tokenize(const struct tern_model *m, const char *text, size_t len,
                                     const char *prompt_name, int32_t **ids, size_t *n_ids,
                                     int32_t *pool_skip)
{
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (pool_skip) *pool_skip = 0;
    if (!m || (!text && len) || !ids || !n_ids || !pool_skip)
        return tern_error(TERN_E_INVALID_ARG, "embed_tokenize: NULL argument");
    if (!m->tok) return tern_error(TERN_E_UNSUPPORTED, "%s: the model has no tokenizer", m->dir);
    const char *prompt = "";
    TERN_TRY(find_prompt(&m->embed, prompt_name, &prompt));
    size_t pl = strlen(prompt);
    char *all = tern_malloc(pl + len + 1);
    if (!all) return TERN_E_NO_MEMORY;
    memcpy(all, prompt, pl);
    if (len) memcpy(all + pl, text, len);
    all[pl + len] = '\0';
    enum tern_status st = tern_tokenize(m->tok, all, pl + len, true, ids, n_ids);
    tern_free(all);
    if (st != TERN_OK || !pl || m->embed.include_prompt) return st;
    /* As sentence-transformers: the prompt's length is its own tokenization
     * (special tokens added), less a trailing special token. */
    int32_t *p = NULL;
    size_t np = 0;
    if ((st = tern_tokenize(m->tok, prompt, pl, true, &p, &np)) != TERN_OK) {
        tern_free_buf(*ids);
        *ids = NULL;
        *n_ids = 0;
        return st;
    }
    bool trail = np > 0 && tern_tokenizer_is_special(m->tok, p[np - 1]);
    tern_free_buf(p);
    *pool_skip = (int32_t)np - (trail ? 1 : 0);
    return TERN_OK;
}
