/*
 * gguf_api.c — tern_gguf_describe of the public API: a GGUF file's metadata
 * summarised for `tern inspect`, without loading any weights: the file, the
 * architecture and its sizes (through the config.json tern synthesizes from
 * the metadata, io/gguf_arch.h), tensors counted by ggml type, the tokenizer
 * kind and whether a chat template is present.
 *
 * Depends on io/gguf.h, io/gguf_arch.h, jansson.
 */
#include "io/gguf_arch.h"
#include "tern.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct summary {
    const struct tern_gguf *g;
    json_t *o; /* the facts, in print order */
    char config_error[512];
};

static void put(struct summary *s, const char *key, json_t *v)
{
    json_object_set_new(s->o, key, v ? v : json_null());
}

static const char *str_or(const struct tern_gguf *g, const char *key, const char *def)
{
    const struct tern_gguf_value *v = tern_gguf_find(g, key);
    return v && v->type == TERN_GGUF_STRING ? v->str : def;
}

/* Tensors: count, values, bytes, and a count per ggml type, most frequent
 * first ("Q4_1": 210, "F32": 61, ...). */
static void tensors(struct summary *s)
{
    enum { MAX_ID = 64 }; /* above every id of the type table */
    int64_t count[MAX_ID] = {0}, params = 0, bytes = 0;
    for (size_t i = 0; i < tern_gguf_n_tensors(s->g); i++) {
        const struct tern_gguf_tensor *t = tern_gguf_tensor_at(s->g, i);
        params += tern_gguf_tensor_numel(t);
        bytes += (int64_t)t->n_bytes;
        if (t->type < MAX_ID) count[t->type]++;
    }
    json_t *by_type = json_object();
    for (;;) {
        int best = -1;
        for (int id = 0; id < MAX_ID; id++)
            if (count[id] && (best < 0 || count[id] > count[best])) best = id;
        if (best < 0) break;
        json_object_set_new(by_type, tern_ggml_type_name((uint32_t)best),
                            json_integer(count[best]));
        count[best] = 0;
    }
    put(s, "n_tensors", json_integer((json_int_t)tern_gguf_n_tensors(s->g)));
    put(s, "tensor_types", by_type);
    put(s, "n_params", json_integer(params));
    put(s, "weight_bytes", json_integer(bytes));
}

/* Sizes from the synthesized config (an unsupported architecture leaves
 * them out and keeps the reason). */
static void sizes(struct summary *s)
{
    struct tern_json_doc cfg;
    if (tern_gguf_hf_config(s->g, &cfg) != TERN_OK) {
        snprintf(s->config_error, sizeof s->config_error, "%s", tern_last_error());
        put(s, "hf_architecture", NULL);
        put(s, "config_error", json_string(s->config_error));
        return;
    }
    static const char *const keys[][2] = {
        {"n_layers", "num_hidden_layers"},
        {"hidden_size", "hidden_size"},
        {"intermediate_size", "intermediate_size"},
        {"n_heads", "num_attention_heads"},
        {"n_kv_heads", "num_key_value_heads"},
        {"head_dim", "head_dim"},
        {"vocab_size", "vocab_size"},
        {"context_length", "max_position_embeddings"},
        {"rope_theta", "rope_theta"},
        {"tied_embeddings", "tie_word_embeddings"},
    };
    put(s, "hf_architecture",
        json_deep_copy(json_array_get(json_object_get(cfg.root, "architectures"), 0)));
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        put(s, keys[i][0], json_deep_copy(json_object_get(cfg.root, keys[i][1])));
    json_t *hd = json_object_get(s->o, "head_dim");
    json_t *h = json_object_get(s->o, "hidden_size"), *n = json_object_get(s->o, "n_heads");
    if (json_is_null(hd) && json_integer_value(n) > 0)
        put(s, "head_dim", json_integer(json_integer_value(h) / json_integer_value(n)));
    if (json_is_null(json_object_get(s->o, "n_kv_heads"))) put(s, "n_kv_heads", json_deep_copy(n));
    tern_json_doc_deinit(&cfg);
}

static void tokenizer(struct summary *s)
{
    const struct tern_gguf_value *toks = tern_gguf_find(s->g, "tokenizer.ggml.tokens");
    const struct tern_gguf_value *merges = tern_gguf_find(s->g, "tokenizer.ggml.merges");
    put(s, "tokenizer", json_string(str_or(s->g, "tokenizer.ggml.model", "none")));
    put(s, "tokenizer_pre", json_string(str_or(s->g, "tokenizer.ggml.pre", "")));
    put(s, "n_tokens",
        json_integer(toks && toks->type == TERN_GGUF_ARRAY ? (json_int_t)toks->n : 0));
    put(s, "n_merges",
        json_integer(merges && merges->type == TERN_GGUF_ARRAY ? (json_int_t)merges->n : 0));
    put(s, "has_chat_template",
        json_boolean(tern_gguf_find(s->g, "tokenizer.chat_template") != NULL));
}

static void print_text(struct summary *s, struct tern_str *out)
{
    json_t *o = s->o;
#define I(k) ((long long)json_integer_value(json_object_get(o, k)))
#define S(k) json_string_value(json_object_get(o, k))
    tern_str_appendf(out, "file             %s (GGUF v%lld, alignment %lld)\n", S("file"),
                     I("version"), I("alignment"));
    if (*S("name")) tern_str_appendf(out, "name             %s\n", S("name"));
    const char *hf = S("hf_architecture");
    if (hf)
        tern_str_appendf(out, "architecture     %s (%s)\n", S("architecture"), hf);
    else
        tern_str_appendf(out, "architecture     %s\n", S("architecture"));
    tern_str_appendf(out, "parameters       %.3f M\n", (double)I("n_params") / 1e6);
    tern_str_appendf(out, "weight bytes     %lld (%.2f MB)\n", I("weight_bytes"),
                     (double)I("weight_bytes") / 1e6);
    tern_str_appendf(out, "tensors          %lld", I("n_tensors"));
    const char *k;
    json_t *v;
    const char *sep = ":";
    json_object_foreach(json_object_get(o, "tensor_types"), k, v)
    {
        tern_str_appendf(out, "%s %s %lld", sep, k, (long long)json_integer_value(v));
        sep = ",";
    }
    tern_str_appendf(out, "\n");
    if (hf) {
        tern_str_appendf(out, "layers           %lld\n", I("n_layers"));
        tern_str_appendf(out, "hidden / ff      %lld / %lld\n", I("hidden_size"),
                         I("intermediate_size"));
        tern_str_appendf(out, "heads / kv / dim %lld / %lld / %lld\n", I("n_heads"),
                         I("n_kv_heads"), I("head_dim"));
        tern_str_appendf(out, "vocab            %lld\n", I("vocab_size"));
        if (json_object_get(o, "context_length") &&
            !json_is_null(json_object_get(o, "context_length")))
            tern_str_appendf(out, "context length   %lld\n", I("context_length"));
        if (json_is_number(json_object_get(o, "rope_theta")))
            tern_str_appendf(out, "rope theta       %g\n",
                             json_number_value(json_object_get(o, "rope_theta")));
        tern_str_appendf(out, "tied embeddings  %s\n",
                         json_is_true(json_object_get(o, "tied_embeddings")) ? "yes" : "no");
    } else {
        tern_str_appendf(out, "config           none: %s\n", s->config_error);
    }
    tern_str_appendf(out, "tokenizer        %s", S("tokenizer"));
    if (*S("tokenizer_pre")) tern_str_appendf(out, " (pre %s)", S("tokenizer_pre"));
    tern_str_appendf(out, ", %lld tokens", I("n_tokens"));
    if (I("n_merges")) tern_str_appendf(out, ", %lld merges", I("n_merges"));
    tern_str_appendf(out, "\nchat template    %s\n",
                     json_is_true(json_object_get(o, "has_chat_template")) ? "yes" : "no");
#undef I
#undef S
}

enum tern_status tern_gguf_describe(const char *path, bool json, char **out)
{
    *out = NULL;
    if (!path || !*path) return tern_error(TERN_E_INVALID_ARG, "gguf: empty path");
    struct tern_gguf *g;
    TERN_TRY(tern_gguf_open(path, &g));
    struct summary s = {g, json_object(), {0}};
    if (!s.o) {
        tern_gguf_close(g);
        return tern_error(TERN_E_NO_MEMORY, "gguf: out of memory");
    }
    put(&s, "format", json_string("gguf"));
    put(&s, "file", json_string(path));
    put(&s, "version", json_integer(tern_gguf_version(g)));
    put(&s, "alignment", json_integer(tern_gguf_alignment(g)));
    put(&s, "name", json_string(str_or(g, "general.name", "")));
    put(&s, "architecture", json_string(str_or(g, "general.architecture", "?")));
    tensors(&s);
    sizes(&s);
    tokenizer(&s);
    struct tern_str text = {0};
    enum tern_status st = TERN_OK;
    if (json) {
        char *d = json_dumps(s.o, JSON_PRESERVE_ORDER);
        if (!d || tern_str_appendz(&text, d) || tern_str_appendz(&text, "\n"))
            st = tern_error(TERN_E_NO_MEMORY, "gguf: out of memory");
        free(d);
    } else {
        print_text(&s, &text);
    }
    json_decref(s.o);
    tern_gguf_close(g);
    if (!st && !text.data) st = tern_error(TERN_E_NO_MEMORY, "gguf: out of memory");
    if (st) {
        tern_str_deinit(&text);
        return st;
    }
    *out = tern_str_take(&text);
    return TERN_OK;
}
