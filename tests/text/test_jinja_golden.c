/*
 * test_jinja_golden.c — chat templates rendered byte for byte as transformers
 * renders them: every shared template (tests/fixtures/data) over
 * every conversation in tests/fixtures/templates (made by
 * tools/make_template_goldens.py), and the interpreter's feature cases
 * (unit.json), all with outputs computed by jinja2 itself. Errors the oracle
 * raised must be errors here; raise_exception messages must match.
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static json_t *load_json_flags(const char *path, size_t flags)
{
    json_error_t e;
    json_t *j = json_load_file(path, flags, &e);
    if (!j) fail_msg("%s: %s", path, e.text);
    return j;
}

static json_t *load_json(const char *path) { return load_json_flags(path, 0); }

static char *read_text(const char *path, size_t *len)
{
    char *buf = NULL;
    if (tern_file_read(path, &buf, len) != TERN_OK) return NULL;
    return buf;
}

/* Checks one render against the oracle; returns true when it matches. */
static bool check(const char *what, struct tern_chat_template *t, const char *create_err,
                  const char *ctx, const char *want, size_t want_len, const char *want_err,
                  const char *err_kind)
{
    char *out = NULL;
    size_t out_len = 0;
    enum tern_status st = TERN_E_TEMPLATE;
    if (t) st = tern_chat_template_render(t, ctx, &out, &out_len);
    const char *msg = t ? tern_last_error() : create_err;
    bool ok;
    if (want) {
        ok = st == TERN_OK && out_len == want_len && memcmp(out, want, want_len) == 0;
        if (!ok) {
            fprintf(stderr, "MISMATCH %s\n", what);
            if (st != TERN_OK) fprintf(stderr, "  error: %s\n", msg);
            else fprintf(stderr, "  want: [%.*s]\n  got:  [%.*s]\n", (int)want_len, want, (int)out_len, out);
        }
    } else {
        ok = st == TERN_E_TEMPLATE && strncmp(msg, "chat template line ", 19) == 0;
        /* raise_exception (TemplateError) messages must match exactly. */
        if (ok && err_kind && strcmp(err_kind, "TemplateError") == 0) ok = strstr(msg, want_err) != NULL;
        if (!ok)
            fprintf(stderr, "MISMATCH %s: want error [%s] (%s), got %s [%s]\n", what, want_err, err_kind,
                    tern_status_str(st), st == TERN_OK ? out : msg);
    }
    tern_free_buf(out);
    return ok;
}

static char *template_source(const char *where)
{
    if (strncmp(where, "xz:", 3) == 0) {
        char *path = tu_data_file(where + 3);
        json_t *cfg = load_json_flags(path, JSON_DECODE_INT_AS_REAL); /* huge model_max_length */
        tern_free(path);
        const char *s = json_string_value(json_object_get(cfg, "chat_template"));
        char *copy = s ? tern_strdup(s) : NULL;
        json_decref(cfg);
        return copy;
    }
    struct tern_str p = {0};
    size_t len;
    tern_str_appendf(&p, "%s/%s", TERN_DATA, where + 5);
    char *src = read_text(p.data, &len);
    if (!src) fail_msg("fixture data missing: %s", p.data);
    tern_str_deinit(&p);
    return src;
}

static void test_shared_templates(void **state)
{
    char *ipath = tu_fixture("templates/index.json");
    json_t *index = load_json(ipath);
    json_t *tmpls = json_object_get(index, "templates"), *cases = json_object_get(index, "cases");
    size_t i, k, n_ok = 0, n_all = 0, n_tmpl = 0;
    json_t *ti, *ci;
    json_array_foreach(tmpls, i, ti) {
        const char *name = json_string_value(json_object_get(ti, "name"));
        char *src = template_source(json_string_value(json_object_get(ti, "source")));
        if (!src) fail_msg("template %s: no chat_template in its source", name);
        n_tmpl++;
        struct tern_chat_template *t = NULL;
        enum tern_status st = tern_chat_template_create(src, strlen(src), &t);
        char *create_err = st == TERN_OK ? NULL : tern_strdup(tern_last_error());
        json_array_foreach(cases, k, ci) {
            const char *cname = json_string_value(ci);
            char rel[512], what[512];
            size_t ctx_len, want_len = 0;
            snprintf(rel, sizeof rel, "templates/contexts/%s.json", cname);
            char *cpath = tu_fixture(rel), *ctx = read_text(cpath, &ctx_len);
            snprintf(rel, sizeof rel, "templates/%s/%s.txt", name, cname);
            char *wpath = tu_fixture(rel), *want = read_text(wpath, &want_len);
            json_t *err = NULL;
            if (!want) {
                snprintf(rel, sizeof rel, "templates/%s/%s.err", name, cname);
                char *epath = tu_fixture(rel);
                err = load_json(epath);
                tern_free(epath);
            }
            snprintf(what, sizeof what, "%s/%s", name, cname);
            n_all++;
            n_ok += check(what, t, create_err, ctx, want ? want : NULL, want_len,
                          json_string_value(json_object_get(err, "error")),
                          json_string_value(json_object_get(err, "kind")));
            json_decref(err);
            tern_free(want);
            tern_free(wpath);
            tern_free(ctx);
            tern_free(cpath);
        }
        tern_chat_template_destroy(t);
        tern_free(create_err);
        tern_free(src);
    }
    json_decref(index);
    tern_free(ipath);
    fprintf(stderr, "shared templates: %zu templates, %zu/%zu renders match the oracle\n", n_tmpl, n_ok, n_all);
    if (n_tmpl == 0) skip();
    assert_int_equal(n_ok, n_all);
}

static void test_units(void **state)
{
    char *path = tu_fixture("templates/unit.json");
    json_t *units = load_json(path);
    size_t i, n_ok = 0;
    json_t *u;
    json_array_foreach(units, i, u) {
        const char *name = json_string_value(json_object_get(u, "name"));
        const char *src = json_string_value(json_object_get(u, "template"));
        const char *want = json_string_value(json_object_get(u, "ok"));
        char *ctx = json_dumps(json_object_get(u, "context"), JSON_COMPACT);
        struct tern_chat_template *t = NULL;
        enum tern_status st = tern_chat_template_create(src, strlen(src), &t);
        char *create_err = st == TERN_OK ? NULL : tern_strdup(tern_last_error());
        n_ok += check(name, t, create_err, ctx, want, want ? json_string_length(json_object_get(u, "ok")) : 0,
                      json_string_value(json_object_get(u, "error")),
                      json_string_value(json_object_get(u, "kind")));
        tern_chat_template_destroy(t);
        tern_free(create_err);
        free(ctx);
    }
    fprintf(stderr, "interpreter cases: %zu/%zu match the oracle\n", n_ok, json_array_size(units));
    assert_int_equal(n_ok, json_array_size(units));
    json_decref(units);
    tern_free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_shared_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
