/*
 * test_server_gemma.c — Gemma 4's chat side read back by the server: for
 * every case in tests/fixtures/templates/gemma4_calls.json (assistant tool
 * calls, with and without reasoning, rendered by jinja2 through Gemma 4's
 * published template), tern renders the same text byte for byte, and the
 * model-side part of it (what the model writes to make those calls) run
 * through the reasoning splitter and the tool-call parser, whole and in every
 * chunk size, gives back exactly those calls and that reasoning. Also: which
 * special tokens the pipeline keeps as text (srv_marker_tokens).
 */
#include "testutil.h"

#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

struct res {
    struct srv_buf content, reasoning;
    struct srv_tool_call *calls;
    int n_calls;
};

static void res_free(struct res *r)
{
    srv_buf_free(&r->content);
    srv_buf_free(&r->reasoning);
    for (int i = 0; i < r->n_calls; i++) srv_tool_call_free(&r->calls[i]);
    free(r->calls);
}

/* text in pieces of `chunk` bytes (0 = whole) through reasoning -> tools. */
static void run(const char *text, size_t chunk, struct res *r)
{
    memset(r, 0, sizeof *r);
    struct srv_reason rs;
    struct srv_tools tl;
    srv_reason_init(&rs, true, SRV_RF_NONE);
    srv_tools_init(&tl, true, NULL, 3);
    size_t n = strlen(text), step = chunk ? chunk : n;
    for (size_t i = 0; i < n; i += step) {
        struct srv_buf c = {0};
        srv_reason_push(&rs, text + i, n - i < step ? n - i : step, &r->reasoning, &c);
        if (c.len)
            assert_true(srv_tools_push(&tl, c.p, c.len, &r->content, &r->calls, &r->n_calls));
        srv_buf_free(&c);
    }
    struct srv_buf c = {0};
    srv_reason_flush(&rs, &r->reasoning, &c);
    if (c.len) assert_true(srv_tools_push(&tl, c.p, c.len, &r->content, &r->calls, &r->n_calls));
    srv_buf_free(&c);
    assert_true(srv_tools_flush(&tl, &r->content, &r->calls, &r->n_calls));
    srv_buf_add(&r->content, "", 0);
    srv_buf_add(&r->reasoning, "", 0);
    srv_reason_deinit(&rs);
    srv_tools_deinit(&tl);
}

/* The parsed calls must be the rendered ones: same names, arguments equal as
 * JSON. */
static void expect_calls(const struct res *r, json_t *want, const char *what)
{
    if (r->n_calls != (int)json_array_size(want))
        fail_msg("%s: %d calls, want %zu (content [%s])", what, r->n_calls, json_array_size(want),
                 r->content.p);
    for (int i = 0; i < r->n_calls; i++) {
        json_t *w = json_array_get(want, (size_t)i);
        assert_string_equal(r->calls[i].name, json_string_value(json_object_get(w, "name")));
        json_t *got = json_loads(r->calls[i].arguments, 0, NULL);
        if (!got || !json_equal(got, json_object_get(w, "arguments")))
            fail_msg("%s: call %d arguments %s", what, i, r->calls[i].arguments);
        json_decref(got);
    }
}

static void test_template_roundtrip(void **state)
{
    (void)state;
    char *fx = tu_fixture("templates/gemma4_calls.json");
    json_error_t e;
    json_t *root = json_load_file(fx, 0, &e);
    if (!root) fail_msg("%s: %s", fx, e.text);
    tern_free(fx);
    char path[1024];
    snprintf(path, sizeof path, "%s/peer-tests/chat-templates/%s.jinja", TERN_DATA,
             json_string_value(json_object_get(root, "template")));
    size_t src_len;
    char *src = read_file(path, &src_len);
    struct tern_chat_template *t = NULL;
    tu_ok(tern_chat_template_create(src, src_len, &t));
    free(src);
    /* the template shows Gemma 4's call format */
    assert_int_equal(srv_tool_format_detect(t, NULL), SRV_TF_GEMMA4);

    size_t i;
    json_t *c;
    int n_cases = 0;
    json_array_foreach(json_object_get(root, "cases"), i, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        char *ctx = json_dumps(json_object_get(c, "context"), JSON_COMPACT);
        char *out = NULL;
        size_t out_len = 0;
        tu_ok(tern_chat_template_render(t, ctx, &out, &out_len));
        free(ctx);
        const char *want = json_string_value(json_object_get(c, "rendered"));
        if (out_len != strlen(want) || memcmp(out, want, out_len))
            fail_msg("%s: render differs\n  want [%s]\n  got  [%.*s]", name, want, (int)out_len,
                     out);
        /* what the model writes: after its turn opens, up to the
         * <|tool_response> that ends a call turn */
        const char *open = "<|turn>model\n", *m = NULL;
        for (const char *q = strstr(out, open); q; q = strstr(q + 1, open)) m = q;
        assert_non_null(m);
        size_t tail = strlen("<|tool_response>");
        assert_true(out_len >= tail && !strcmp(out + out_len - tail, "<|tool_response>"));
        out[out_len - tail] = '\0';
        const char *model = m + strlen(open);
        assert_string_equal(model, json_string_value(json_object_get(c, "output")));
        const char *reasoning = json_string_value(json_object_get(c, "reasoning"));
        for (size_t chunk = 0; chunk <= strlen(model); chunk++) {
            struct res r;
            run(model, chunk, &r);
            char what[128];
            snprintf(what, sizeof what, "%s (chunk %zu)", name, chunk);
            assert_string_equal(r.content.p, "");
            assert_string_equal(r.reasoning.p, reasoning);
            expect_calls(&r, json_object_get(c, "calls"), what);
            res_free(&r);
        }
        tern_free_buf(out);
        n_cases++;
    }
    assert_true(n_cases >= 8);
    tern_chat_template_destroy(t);
    json_decref(root);
}

/* Numbers keep the text the model wrote (the template prints Python's). */
static void test_numbers_as_written(void **state)
{
    (void)state;
    struct res r;
    run("<|tool_call>call:add{a:1,big:12345678901234567890,d:1e-07,e:-0.0,x:0.1}<tool_call|>", 0,
        &r);
    assert_int_equal(r.n_calls, 1);
    assert_string_equal(r.calls[0].arguments,
                        "{\"a\":1,\"big\":12345678901234567890,\"d\":1e-07,\"e\":-0.0,\"x\":0.1}");
    res_free(&r);
}

/* A tokenizer whose added tokens mark some of the pipeline's markers special
 * (as Gemma 4's does) and some not: only the special ones are kept. */
static void test_marker_tokens(void **state)
{
    (void)state;
    char *src = tu_fixture("models/tiny-llama/tokenizer.json");
    json_error_t e;
    json_t *tj = json_load_file(src, 0, &e);
    if (!tj) fail_msg("%s: %s", src, e.text);
    tern_free(src);
    json_t *added = json_object_get(tj, "added_tokens");
    json_int_t next =
        (json_int_t)json_object_size(json_object_get(json_object_get(tj, "model"), "vocab"));
    size_t k;
    json_t *a;
    json_array_foreach(added, k, a)
    {
        json_int_t id = json_integer_value(json_object_get(a, "id"));
        if (id >= next) next = id + 1;
    }
    static const struct {
        const char *s;
        bool special;
    } toks[] = {{"<|tool_call>", true}, {"<tool_call|>", true}, {"<|\"|>", true},
                {"<|channel>", true},   {"<channel|>", true},   {"<turn|>", true},
                {"<think>", false},     {"</think>", false}};
    int32_t want[8];
    int n_want = 0;
    for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) {
        json_array_append_new(added,
                              json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", next,
                                        "content", toks[i].s, "single_word", 0, "lstrip", 0,
                                        "rstrip", 0, "normalized", 0, "special", toks[i].special));
        if (toks[i].special && strcmp(toks[i].s, "<turn|>")) want[n_want++] = (int32_t)next;
        next++;
    }
    char *dir = tu_temp_dir("gemma-tok");
    char *path = tern_path_join(dir, "tokenizer.json");
    assert_int_equal(json_dump_file(tj, path, 0), 0);
    json_decref(tj);
    struct tern_tokenizer *tok = NULL;
    tu_ok(tern_tokenizer_open(dir, &tok));
    int32_t ids[SRV_MAX_MARKERS];
    int n = srv_marker_tokens(tok, ids, SRV_MAX_MARKERS);
    assert_int_equal(n, n_want); /* <turn|> is no marker; <think> here is plain text */
    for (int i = 0; i < n; i++) {
        bool found = false;
        for (int j = 0; j < n_want; j++) found = found || ids[i] == want[j];
        assert_true(found);
        /* the text the pipeline gets for it is the marker itself */
        const char *s = tern_tokenizer_token(tok, ids[i]);
        assert_non_null(s);
        assert_true(!strcmp(s, "<|tool_call>") || !strcmp(s, "<tool_call|>") ||
                    !strcmp(s, "<|\"|>") || !strcmp(s, "<|channel>") || !strcmp(s, "<channel|>"));
    }
    /* the vocabulary alone tells the call format */
    assert_int_equal(srv_tool_format_detect(NULL, tok), SRV_TF_GEMMA4);
    tern_tokenizer_close(tok);
    remove(path);
    remove(dir);
    tern_free(path);
    tern_free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_roundtrip),
        cmocka_unit_test(test_numbers_as_written),
        cmocka_unit_test(test_marker_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
