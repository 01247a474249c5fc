/*
 * req_embed.c — an OpenAI embeddings request body (/v1/embeddings) into
 * struct srv_embed_req, with every field checked and errors naming it
 * ("input[2]", "dimensions", ...). Pure: no model, no engine (fuzzed with
 * the other parsers).
 *
 *   input            a string, an array of strings, an array of token ids
 *                    (one input), or an array of arrays of token ids; never
 *                    empty; at most SRV_EMBED_MAX_INPUTS inputs
 *   encoding_format  "float" (default) or "base64" (little-endian float32)
 *   dimensions       an integer >= 1 (the model's width is checked later)
 *   model, user      strings (the model name is not matched: one model is served)
 *   prompt_name      tern's own: a prompt of config_sentence_transformers.json
 *                    put before text inputs ("" for none)
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

static bool opt_string(json_t *root, const char *key, const char **out, struct srv_err *err)
{
    json_t *v = json_object_get(root, key);
    *out = NULL;
    if (!v || json_is_null(v)) return true;
    if (!json_is_string(v)) {
        srv_err_set(err, 400, key, "'%s' must be a string, got %s", key, srv_json_type_name(v));
        return false;
    }
    *out = json_string_value(v);
    return true;
}

/* One token-id array input (input[i], or the whole input when i < 0). */
static bool parse_ids(const json_t *a, int i, int32_t vocab, int32_t **ids, int32_t *n,
                      struct srv_err *err)
{
    char param[48];
    if (i >= 0) snprintf(param, sizeof param, "input[%d]", i);
    else snprintf(param, sizeof param, "input");
    size_t len = json_array_size(a);
    if (len == 0) {
        srv_err_set(err, 400, param, "'%s' must not be empty", param);
        return false;
    }
    *ids = malloc(len * sizeof **ids);
    if (!*ids) {
        srv_err_set(err, 500, NULL, "out of memory");
        return false;
    }
    for (size_t k = 0; k < len; k++) {
        const json_t *v = json_array_get(a, k);
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || (vocab > 0 && id >= vocab)) {
            if (json_is_integer(v))
                srv_err_set(err, 400, param, "'%s' holds token id %lld, outside the vocabulary "
                            "[0, %d)", param, (long long)id, vocab);
            else
                srv_err_set(err, 400, param, "'%s' must hold token ids (integers), got %s at "
                            "index %zu", param, srv_json_type_name(v), k);
            return false;
        }
        (*ids)[k] = (int32_t)id;
    }
    *n = (int32_t)len;
    return true;
}

static bool alloc_inputs(struct srv_embed_req *r, size_t n, struct srv_err *err)
{
    r->texts = calloc(n, sizeof *r->texts);
    r->ids = calloc(n, sizeof *r->ids);
    r->n_ids = calloc(n, sizeof *r->n_ids);
    r->cap = (int)n;
    if (r->texts && r->ids && r->n_ids) return true;
    srv_err_set(err, 500, NULL, "out of memory");
    return false;
}

static bool parse_input(json_t *root, struct srv_embed_req *r, int32_t vocab, struct srv_err *err)
{
    json_t *in = json_object_get(root, "input");
    if (!in || json_is_null(in)) {
        srv_err_set(err, 400, "input", "'input' is required: a string, an array of strings, an "
                    "array of token ids or an array of such arrays");
        return false;
    }
    if (json_is_string(in)) {
        if (!json_string_length(in)) {
            srv_err_set(err, 400, "input", "'input' must not be an empty string");
            return false;
        }
        if (!alloc_inputs(r, 1, err) || !(r->texts[0] = strdup(json_string_value(in)))) return false;
        r->n = 1;
        return true;
    }
    if (!json_is_array(in)) {
        srv_err_set(err, 400, "input", "'input' must be a string or an array, got %s",
                    srv_json_type_name(in));
        return false;
    }
    size_t n = json_array_size(in);
    if (n == 0) {
        srv_err_set(err, 400, "input", "'input' must not be an empty array");
        return false;
    }
    if (n > SRV_EMBED_MAX_INPUTS) {
        srv_err_set(err, 400, "input", "'input' holds %zu inputs, at most %d are taken", n,
                    SRV_EMBED_MAX_INPUTS);
        return false;
    }
    const json_t *first = json_array_get(in, 0);
    if (json_is_integer(first)) { /* one input of token ids */
        if (!alloc_inputs(r, 1, err) || !parse_ids(in, -1, vocab, &r->ids[0], &r->n_ids[0], err))
            return false;
        r->n = 1;
        return true;
    }
    if (!alloc_inputs(r, n, err)) return false;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(in, i);
        char param[48];
        snprintf(param, sizeof param, "input[%zu]", i);
        if (json_is_string(first) && json_is_string(v)) {
            if (!json_string_length(v)) {
                srv_err_set(err, 400, param, "'%s' must not be an empty string", param);
                return false;
            }
            if (!(r->texts[i] = strdup(json_string_value(v)))) {
                srv_err_set(err, 500, NULL, "out of memory");
                return false;
            }
        } else if (json_is_array(first) && json_is_array(v)) {
            if (!parse_ids(v, (int)i, vocab, &r->ids[i], &r->n_ids[i], err)) return false;
        } else if (json_is_string(first) || json_is_array(first)) {
            srv_err_set(err, 400, param, "'%s' must be %s like input[0], got %s", param,
                        json_is_string(first) ? "a string" : "an array of token ids",
                        srv_json_type_name(v));
            return false;
        } else {
            srv_err_set(err, 400, param, "'%s' must be a string or an array of token ids, got %s",
                        param, srv_json_type_name(v));
            return false;
        }
        r->n = (int)i + 1;
    }
    return true;
}

bool srv_embed_parse(const char *body, size_t len, const struct srv_parse_opts *opts,
                     struct srv_embed_req *r, struct srv_err *err)
{
    memset(r, 0, sizeof *r);
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        srv_err_set(err, 400, NULL, "invalid JSON body: %s at line %d column %d (byte %d)", je.text,
                    je.line, je.column, je.position);
        return false;
    }
    bool ok = false;
    const char *fmt = NULL, *model = NULL, *user = NULL, *prompt = NULL;
    long long dims = 0;
    bool has_dims = false;
    if (!json_is_object(root)) {
        srv_err_set(err, 400, NULL, "the request body must be a JSON object, got %s",
                    srv_json_type_name(root));
        goto done;
    }
    if (!opt_string(root, "model", &model, err) || !opt_string(root, "user", &user, err) ||
        !opt_string(root, "encoding_format", &fmt, err) ||
        !opt_string(root, "prompt_name", &prompt, err) ||
        !srv_get_int(root, "dimensions", 1, 1 << 20, &has_dims, &dims, err) ||
        !parse_input(root, r, opts ? opts->vocab_size : 0, err))
        goto done;
    if (fmt && strcmp(fmt, "float") && strcmp(fmt, "base64")) {
        srv_err_set(err, 400, "encoding_format", "'encoding_format' must be \"float\" or "
                    "\"base64\", got \"%.40s\"", fmt);
        goto done;
    }
    r->base64 = fmt && !strcmp(fmt, "base64");
    r->dimensions = has_dims ? (int32_t)dims : 0;
    if (prompt && !(r->prompt_name = strdup(prompt))) {
        srv_err_set(err, 500, NULL, "out of memory");
        goto done;
    }
    ok = true;
done:
    json_decref(root);
    if (!ok) srv_embed_req_free(r);
    return ok;
}

void srv_embed_req_free(struct srv_embed_req *r)
{
    for (int i = 0; i < r->cap; i++) { /* a parse that failed part-way leaves some set */
        if (r->texts) free(r->texts[i]);
        if (r->ids) free(r->ids[i]);
    }
    free(r->texts);
    free(r->ids);
    free(r->n_ids);
    free(r->prompt_name);
    memset(r, 0, sizeof *r);
}
