/*
 * test_server_toolchoice.c — tool_choice "required" / named enforcement
 * (server/toolchoice.c): the call format found from real chat templates (the
 * shared template corpus, the fixture, an inline Qwen3.5-style XML template)
 * and from the vocabulary; the exact prefill text for every format and
 * choice; and that prefill + the model's continuation, run through the
 * reasoning splitter and the tool-call parser as gen.c runs it (prefill as
 * one piece, then the continuation in every chunk size), gives the call the
 * whole text gives, or the literal text when the continuation is not a call.
 */
#include "testutil.h"

#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- detection */

static struct tern_chat_template *tmpl_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    struct tern_chat_template *t = NULL;
    assert_int_equal(tern_chat_template_create(buf, n, &t), TERN_OK);
    return t;
}

static void expect_file(const char *name, enum srv_tool_fmt want)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/peer-tests/chat-templates/%s.jinja", TERN_DATA, name);
    struct tern_chat_template *t = tmpl_file(path);
    assert_int_equal(srv_tool_format_detect(t, NULL), want);
    tern_chat_template_destroy(t);
}

/* Qwen3.5 writes calls as XML; a template reduced to that part. */
static const char XML_TMPL[] =
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- for tc in m.tool_calls or [] %}<tool_call>\n<function={{ tc.function.name }}>\n"
    "{%- for k, v in tc.function.arguments.items() %}<parameter={{ k }}>\n{{ v }}\n</parameter>\n"
    "{%- endfor %}</function>\n</tool_call>{%- endfor %}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}";

static void test_detect(void **state)
{
    (void)state;
    expect_file("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", SRV_TF_HERMES);
    expect_file("Qwen-Qwen2.5-7B-Instruct", SRV_TF_HERMES);
    expect_file("meta-llama-Llama-3.1-8B-Instruct", SRV_TF_LLAMA);
    expect_file("meta-llama-Llama-3.2-3B-Instruct", SRV_TF_LLAMA);
    expect_file("google-gemma-4-31B-it", SRV_TF_GEMMA4);
    expect_file("google-gemma-2-2b-it", SRV_TF_HERMES); /* shows no call: the default */

    struct tern_chat_template *t = NULL;
    assert_int_equal(tern_chat_template_create(XML_TMPL, strlen(XML_TMPL), &t), TERN_OK);
    assert_int_equal(srv_tool_format_detect(t, NULL), SRV_TF_XML);
    tern_chat_template_destroy(t);

    /* The fixture model: its template and its vocabulary (<tool_call>) agree. */
    char *dir = tu_fixture("models/tiny-llama");
    assert_int_equal(tern_chat_template_load(dir, NULL, &t), TERN_OK);
    assert_int_equal(srv_tool_format_detect(t, NULL), SRV_TF_HERMES);
    tern_chat_template_destroy(t);
    struct tern_tokenizer *tok = NULL;
    assert_int_equal(tern_tokenizer_open(dir, &tok), TERN_OK);
    assert_int_equal(srv_tool_format_detect(NULL, tok), SRV_TF_HERMES);
    tern_tokenizer_close(tok);
    tern_free(dir);

    /* A template that shows no call (nor raises): the vocabulary, then Hermes. */
    const char *plain = "{% for m in messages %}{{ m.content }}{% endfor %}";
    assert_int_equal(tern_chat_template_create(plain, strlen(plain), &t), TERN_OK);
    assert_int_equal(srv_tool_format_detect(t, NULL), SRV_TF_HERMES);
    tern_chat_template_destroy(t);
    assert_int_equal(srv_tool_format_detect(NULL, NULL), SRV_TF_HERMES);
    assert_string_equal(srv_tool_format_name(SRV_TF_XML), "qwen3.5-xml");
    assert_string_equal(srv_tool_format_name(SRV_TF_GEMMA4), "gemma4");
}

/* --------------------------------------------------------------- prefill */

static void expect_prefill(enum srv_tool_fmt f, enum srv_tool_choice c, const char *name,
                           enum srv_reason_fmt think, const char *want)
{
    char *p = srv_tool_prefill(f, c, name, think);
    if (!want) {
        assert_null(p);
        return;
    }
    assert_non_null(p);
    assert_string_equal(p, want);
    free(p);
}

static void test_prefill_text(void **state)
{
    (void)state;
    expect_prefill(SRV_TF_HERMES, SRV_TC_REQUIRED, NULL, SRV_RF_NONE, "<tool_call>\n");
    expect_prefill(SRV_TF_HERMES, SRV_TC_NAMED, "get_weather", SRV_RF_NONE,
                   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ");
    expect_prefill(SRV_TF_XML, SRV_TC_REQUIRED, NULL, SRV_RF_NONE, "<tool_call>\n<function=");
    expect_prefill(SRV_TF_XML, SRV_TC_NAMED, "get_weather", SRV_RF_NONE,
                   "<tool_call>\n<function=get_weather>\n");
    expect_prefill(SRV_TF_LLAMA, SRV_TC_REQUIRED, NULL, SRV_RF_NONE, "{\"name\": \"");
    expect_prefill(SRV_TF_LLAMA, SRV_TC_NAMED, "get_weather", SRV_RF_NONE,
                   "{\"name\": \"get_weather\", \"parameters\": ");
    /* names are JSON-escaped inside JSON */
    expect_prefill(SRV_TF_HERMES, SRV_TC_NAMED, "a\"b", SRV_RF_NONE,
                   "<tool_call>\n{\"name\": \"a\\\"b\", \"arguments\": ");
    expect_prefill(SRV_TF_GEMMA4, SRV_TC_REQUIRED, NULL, SRV_RF_NONE, "<|tool_call>call:");
    expect_prefill(SRV_TF_GEMMA4, SRV_TC_NAMED, "get_weather", SRV_RF_NONE,
                   "<|tool_call>call:get_weather{");
    /* an open reasoning block is closed first */
    expect_prefill(SRV_TF_HERMES, SRV_TC_REQUIRED, NULL, SRV_RF_THINK, "</think>\n\n<tool_call>\n");
    expect_prefill(SRV_TF_GEMMA4, SRV_TC_NAMED, "f", SRV_RF_GEMMA4,
                   "<channel|><|tool_call>call:f{");
    /* auto / none: nothing */
    expect_prefill(SRV_TF_HERMES, SRV_TC_AUTO, NULL, SRV_RF_NONE, NULL);
    expect_prefill(SRV_TF_HERMES, SRV_TC_NONE, NULL, SRV_RF_NONE, NULL);
    expect_prefill(SRV_TF_HERMES, SRV_TC_NAMED, NULL, SRV_RF_NONE, NULL);
}

/* ------------------------------------------- prefill + continuation parse */

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

/* Feeds `pieces` (NULL-terminated) through reasoning -> tools. */
static void run(const char *const *pieces, bool reason, enum srv_reason_fmt think_open,
                struct res *r)
{
    memset(r, 0, sizeof *r);
    struct srv_reason rs;
    struct srv_tools tl;
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                               "\"parameters\":{\"type\":\"object\",\"properties\":{\"days\":"
                               "{\"type\":\"integer\"}}}}}]",
                               0, NULL);
    srv_reason_init(&rs, reason, think_open);
    srv_tools_init(&tl, true, tools, 7);
    for (int i = 0;; i++) {
        struct srv_buf c = {0};
        if (pieces[i]) srv_reason_push(&rs, pieces[i], strlen(pieces[i]), &r->reasoning, &c);
        else srv_reason_flush(&rs, &r->reasoning, &c);
        if (c.len) assert_true(srv_tools_push(&tl, c.p, c.len, &r->content, &r->calls, &r->n_calls));
        srv_buf_free(&c);
        if (!pieces[i]) break;
    }
    assert_true(srv_tools_flush(&tl, &r->content, &r->calls, &r->n_calls));
    srv_buf_add(&r->content, "", 0);
    srv_buf_add(&r->reasoning, "", 0);
    srv_reason_deinit(&rs);
    srv_tools_deinit(&tl);
    json_decref(tools);
}

/* The prefill of (f, choice) then `cont` in every chunk size must give what
 * the whole text gives, and that must be `content` + one call (name, args),
 * or no call when name is NULL. */
static void check_cont(enum srv_tool_fmt f, enum srv_tool_choice choice,
                       enum srv_reason_fmt think_open, const char *cont, const char *content,
                       const char *name, const char *args)
{
    char *pf = srv_tool_prefill(f, choice, "get_weather", think_open);
    assert_non_null(pf);
    size_t pn = strlen(pf), cn = strlen(cont);
    char *whole = malloc(pn + cn + 1);
    memcpy(whole, pf, pn);
    memcpy(whole + pn, cont, cn + 1);
    for (size_t chunk = 0; chunk <= cn; chunk++) {
        const char *pieces[600];
        char *bufs[600];
        int k = 0;
        struct res r;
        if (chunk == 0) { /* the model wrote the prefill itself, as one piece */
            pieces[k++] = whole;
        } else {
            pieces[k++] = pf;
            for (size_t i = 0; i < cn && k < 598; i += chunk) {
                size_t m = cn - i < chunk ? cn - i : chunk;
                bufs[k] = strndup(cont + i, m);
                pieces[k] = bufs[k];
                k++;
            }
        }
        pieces[k] = NULL;
        run(pieces, true, think_open, &r);
        for (int i = 1; i < k; i++) free(bufs[i]);
        assert_string_equal(r.content.p, content);
        assert_string_equal(r.reasoning.p, "");
        assert_int_equal(r.n_calls, name ? 1 : 0);
        if (name) {
            assert_string_equal(r.calls[0].name, name);
            assert_string_equal(r.calls[0].arguments, args);
        }
        res_free(&r);
    }
    free(whole);
    free(pf);
}

static void test_prefill_parse(void **state)
{
    (void)state;
    /* Hermes */
    check_cont(SRV_TF_HERMES, SRV_TC_NAMED, SRV_RF_NONE, "{\"city\": \"Paris\"}}\n</tool_call>", "",
               "get_weather", "{\"city\":\"Paris\"}");
    check_cont(SRV_TF_HERMES, SRV_TC_REQUIRED, SRV_RF_NONE,
               "{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}\n</tool_call>", "",
               "get_weather", "{\"days\":2}");
    /* the closing tag never came (EOS first): the block still parses at the end */
    check_cont(SRV_TF_HERMES, SRV_TC_NAMED, SRV_RF_NONE, "{}}", "", "get_weather", "{}");
    /* an open <think> is closed by the prefill: no reasoning, the same call */
    check_cont(SRV_TF_HERMES, SRV_TC_NAMED, SRV_RF_THINK, "{\"city\": \"Oslo\"}}</tool_call>", "",
               "get_weather", "{\"city\":\"Oslo\"}");
    /* not a call: the literal text, prefill included */
    check_cont(SRV_TF_HERMES, SRV_TC_NAMED, SRV_RF_NONE, "hello",
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": hello", NULL, NULL);
    check_cont(SRV_TF_HERMES, SRV_TC_REQUIRED, SRV_RF_NONE, "I will not.</tool_call> ok",
               "<tool_call>\nI will not.</tool_call> ok", NULL, NULL);
    /* Qwen3.5 XML */
    check_cont(SRV_TF_XML, SRV_TC_NAMED, SRV_RF_NONE,
               "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</"
               "function>\n</tool_call>",
               "", "get_weather", "{\"city\":\"Paris\",\"days\":3}");
    check_cont(SRV_TF_XML, SRV_TC_REQUIRED, SRV_RF_NONE, "get_weather>\n</function>\n</tool_call>",
               "", "get_weather", "{}");
    check_cont(SRV_TF_XML, SRV_TC_NAMED, SRV_RF_NONE, "<oops>",
               "<tool_call>\n<function=get_weather>\n<oops>", NULL, NULL);
    /* Llama 3 JSON */
    check_cont(SRV_TF_LLAMA, SRV_TC_NAMED, SRV_RF_NONE, "{\"city\": \"Rome\"}}", "", "get_weather",
               "{\"city\":\"Rome\"}");
    check_cont(SRV_TF_LLAMA, SRV_TC_REQUIRED, SRV_RF_NONE, "get_weather\", \"parameters\": {}}", "",
               "get_weather", "{}");
    check_cont(SRV_TF_LLAMA, SRV_TC_NAMED, SRV_RF_NONE, "nope",
               "{\"name\": \"get_weather\", \"parameters\": nope", NULL, NULL);
    /* Gemma 4 */
    check_cont(SRV_TF_GEMMA4, SRV_TC_NAMED, SRV_RF_NONE,
               "city:<|\"|>Paris<|\"|>,days:2}<tool_call|>", "", "get_weather",
               "{\"city\":\"Paris\",\"days\":2}");
    check_cont(SRV_TF_GEMMA4, SRV_TC_REQUIRED, SRV_RF_NONE, "get_weather{}<tool_call|>", "",
               "get_weather", "{}");
    /* the model ended the turn without <tool_call|> */
    check_cont(SRV_TF_GEMMA4, SRV_TC_NAMED, SRV_RF_NONE, "days:1}", "", "get_weather",
               "{\"days\":1}");
    /* thinking was on: the prefill closes the channel; the same call, no reasoning */
    check_cont(SRV_TF_GEMMA4, SRV_TC_NAMED, SRV_RF_GEMMA4, "city:<|\"|>Oslo<|\"|>}<tool_call|>", "",
               "get_weather", "{\"city\":\"Oslo\"}");
    check_cont(SRV_TF_GEMMA4, SRV_TC_NAMED, SRV_RF_NONE, "I cannot.",
               "<|tool_call>call:get_weather{I cannot.", NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_prefill_text),
        cmocka_unit_test(test_prefill_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
