/*
 * template.c — the public chat-template API of include/tern.h: compiles a
 * template (jinja_lex + jinja_parse into an arena the template owns), finds a
 * model's template (chat_template.jinja first, as transformers does, else
 * tokenizer_config.json's chat_template: a string or a list of named
 * templates), and renders it with the variables of a JSON object.
 * Rendering never changes the template, so one template may be rendered from
 * several threads at once. Depends on jinja.h, jansson.
 */
#include "text/jinja.h"

#include <jansson.h>
#include <string.h>

struct tern_chat_template {
    struct jarena arena; /* tokens, AST and literals */
    struct jnode *body;
};

enum tern_status tern_chat_template_create(const char *source, size_t len,
                                           struct tern_chat_template **out)
{
    *out = NULL;
    if (!source) return tern_error(TERN_E_INVALID_ARG, "chat template: no source");
    struct tern_chat_template *t = tern_calloc(1, sizeof(*t));
    if (!t) return TERN_E_NO_MEMORY;
    t->arena.cap_bytes = JINJA_MAX_ARENA;
    struct jtok *toks;
    size_t n_toks;
    const char *err = NULL;
    int line = 0;
    if (jinja_lex(&t->arena, source, len, &toks, &n_toks, &err, &line) == 0)
        t->body = jinja_parse(&t->arena, toks, n_toks, &err, &line);
    if (!t->body) {
        enum tern_status st = tern_error(TERN_E_TEMPLATE, "chat template line %d: %s", line,
                                         err ? err : "syntax error");
        tern_chat_template_destroy(t);
        return st;
    }
    *out = t;
    return TERN_OK;
}

void tern_chat_template_destroy(struct tern_chat_template *t)
{
    if (!t) return;
    jarena_deinit(&t->arena);
    tern_free(t);
}

/* Picks the template text out of tokenizer_config.json's chat_template. */
static enum tern_status pick_template(const char *path, json_t *ct, const char *name,
                                      const char **src)
{
    if (json_is_string(ct)) {
        *src = json_string_value(ct);
        return TERN_OK;
    }
    const char *want = name ? name : "default";
    if (json_is_array(ct)) {
        size_t i;
        json_t *item;
        json_array_foreach(ct, i, item) {
            const char *n = json_string_value(json_object_get(item, "name"));
            const char *tx = json_string_value(json_object_get(item, "template"));
            if (n && tx && strcmp(n, want) == 0) {
                *src = tx;
                return TERN_OK;
            }
        }
        return tern_error(TERN_E_NOT_FOUND, "%s: no chat template named '%s'", path, want);
    }
    return tern_error(TERN_E_NOT_FOUND, "%s: the model has no chat template", path);
}

enum tern_status tern_chat_template_load(const char *dir, const char *name,
                                         struct tern_chat_template **out)
{
    *out = NULL;
    if (!dir) return tern_error(TERN_E_INVALID_ARG, "chat template: no model directory");
    enum tern_status st;
    char *path = tern_path_join(dir, "chat_template.jinja");
    char *text = NULL;
    size_t len = 0;
    json_t *cfg = NULL;
    if (!path) return TERN_E_NO_MEMORY;
    if (tern_file_exists(path)) {
        st = tern_file_read(path, &text, &len);
        if (st == TERN_OK) st = tern_chat_template_create(text, len, out);
        goto done;
    }
    tern_free(path);
    if (!(path = tern_path_join(dir, "tokenizer_config.json"))) return TERN_E_NO_MEMORY;
    if (!tern_file_exists(path)) {
        st = tern_error(TERN_E_NOT_FOUND, "%s: no chat_template.jinja or tokenizer_config.json", dir);
        goto done;
    }
    json_error_t jerr;
    cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &jerr);
    if (!cfg) {
        st = tern_error(TERN_E_FORMAT, "%s: line %d: %s", path, jerr.line, jerr.text);
        goto done;
    }
    const char *src = NULL;
    st = pick_template(path, json_object_get(cfg, "chat_template"), name, &src);
    if (st == TERN_OK) st = tern_chat_template_create(src, strlen(src), out);
done:
    if (st != TERN_OK && st != TERN_E_NO_MEMORY) tern_error_prefix(st, "%s", path);
    json_decref(cfg);
    tern_free(text);
    tern_free(path);
    return st;
}

enum tern_status tern_chat_template_render(const struct tern_chat_template *t,
                                           const char *context_json, char **out, size_t *out_len)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !context_json) return tern_error(TERN_E_INVALID_ARG, "chat template: nothing to render");
    json_error_t jerr;
    json_t *ctx = json_loads(context_json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!ctx) return tern_error(TERN_E_FORMAT, "chat template context: line %d: %s", jerr.line, jerr.text);
    if (!json_is_object(ctx)) {
        json_decref(ctx);
        return tern_error(TERN_E_FORMAT, "chat template context: expected a JSON object");
    }
    struct tern_str buf = {0};
    struct jrt rt = {.out = &buf};
    rt.arena.cap_bytes = JINJA_MAX_ARENA;
    struct jv vars;
    enum tern_status st = TERN_OK;
    int rc = jinja_from_json(&rt, ctx, &vars);
    json_decref(ctx);
    if (rc == 0) rc = jinja_render(&rt, t->body, vars.u.d);
    if (rc != 0) {
        st = tern_error(TERN_E_TEMPLATE, "chat template line %d: %s", rt.err_line,
                        rt.err ? rt.err : "render failed");
        tern_str_deinit(&buf);
    } else if (!buf.data && tern_str_reserve(&buf, 1) != TERN_OK) {
        st = TERN_E_NO_MEMORY;
    } else {
        if (out_len) *out_len = buf.len;
        *out = tern_str_take(&buf);
    }
    tern_free(rt.err);
    jarena_deinit(&rt.arena);
    return st;
}
