/*
 * test_server_text.c — the server's text pipeline (server/text_pipe.c,
 * server/toolcall.c): stop strings, the reasoning splitter (<think> and
 * Gemma 4's thought channel) and the tool-call parser (Hermes, Qwen3.5 XML,
 * Llama 3, Gemma 4), fed whole, character by character and in every chunk
 * size. Each
 * case asserts the exact result, and that every split gives the same result
 * (which is what makes streamed and non-streamed responses agree).
 */
#include "testutil.h"

#include "server.h"

#include <stdlib.h>
#include <string.h>

struct out {
    struct srv_buf content, reasoning;
    struct srv_tool_call *calls;
    int n_calls;
    bool stopped;
};

static void out_free(struct out *o)
{
    srv_buf_free(&o->content);
    srv_buf_free(&o->reasoning);
    for (int i = 0; i < o->n_calls; i++) srv_tool_call_free(&o->calls[i]);
    free(o->calls);
    memset(o, 0, sizeof *o);
}

struct pipe_cfg {
    char *stops[4];
    int n_stops;
    bool reason, tools;
    enum srv_reason_fmt think_open;
    const char *tools_json;
};

/* Runs `text` through stop -> reasoning -> tools in pieces of `chunk` bytes
 * (0 = all at once), as gen.c does. */
static void run_pipe(const struct pipe_cfg *cfg, const char *text, size_t chunk, struct out *o)
{
    memset(o, 0, sizeof *o);
    struct srv_stop st;
    struct srv_reason rs;
    struct srv_tools tl;
    json_t *tools = cfg->tools_json ? json_loads(cfg->tools_json, 0, NULL) : NULL;
    assert_true(srv_stop_init(&st, cfg->stops, cfg->n_stops));
    srv_reason_init(&rs, cfg->reason, cfg->think_open);
    srv_tools_init(&tl, cfg->tools, tools, 42);
    size_t n = strlen(text), step = chunk ? chunk : (n ? n : 1);
    for (size_t i = 0; i <= n && !o->stopped; i += step) {
        bool end = i + step >= n;
        size_t len = end ? n - i : step;
        struct srv_buf safe = {0}, r = {0}, c = {0};
        if (len) o->stopped = srv_stop_push(&st, text + i, len, &safe);
        bool fin = end || o->stopped;
        if (fin && srv_stop_flush(&st, &safe)) o->stopped = true;
        if (safe.len) srv_reason_push(&rs, safe.p, safe.len, &r, &c);
        if (fin) srv_reason_flush(&rs, &r, &c);
        if (c.len) assert_true(srv_tools_push(&tl, c.p, c.len, &o->content, &o->calls, &o->n_calls));
        if (fin) assert_true(srv_tools_flush(&tl, &o->content, &o->calls, &o->n_calls));
        srv_buf_add(&o->reasoning, r.p ? r.p : "", r.len);
        srv_buf_free(&safe);
        srv_buf_free(&r);
        srv_buf_free(&c);
        if (fin) break;
    }
    srv_buf_add(&o->content, "", 0);
    srv_buf_add(&o->reasoning, "", 0);
    srv_stop_deinit(&st);
    srv_reason_deinit(&rs);
    srv_tools_deinit(&tl);
    json_decref(tools);
}

/* Checks the whole-text result against the expectation, then every chunk size. */
static void check(const struct pipe_cfg *cfg, const char *text, const char *content,
                  const char *reasoning, int n_calls, const char *const *names,
                  const char *const *args)
{
    struct out whole;
    run_pipe(cfg, text, 0, &whole);
    assert_string_equal(whole.content.p, content);
    assert_string_equal(whole.reasoning.p, reasoning);
    assert_int_equal(whole.n_calls, n_calls);
    for (int i = 0; i < n_calls; i++) {
        assert_string_equal(whole.calls[i].name, names[i]);
        assert_string_equal(whole.calls[i].arguments, args[i]);
        assert_int_equal(strncmp(whole.calls[i].id, "call_", 5), 0);
        assert_int_equal(strlen(whole.calls[i].id), 29);
    }
    for (size_t chunk = 1; chunk <= strlen(text); chunk++) {
        struct out o;
        run_pipe(cfg, text, chunk, &o);
        assert_string_equal(o.content.p, content);
        assert_string_equal(o.reasoning.p, reasoning);
        assert_int_equal(o.n_calls, n_calls);
        for (int i = 0; i < n_calls; i++) {
            assert_string_equal(o.calls[i].name, names[i]);
            assert_string_equal(o.calls[i].arguments, args[i]);
        }
        assert_int_equal(o.stopped, whole.stopped);
        out_free(&o);
    }
    out_free(&whole);
}

/* --------------------------------------------------------------- stop strings */

static void test_stop_across_pieces(void **state)
{
    struct pipe_cfg c = {.stops = {"END"}, .n_stops = 1};
    check(&c, "Hello world, END here", "Hello world, ", "", 0, NULL, NULL);
    /* a false start that is not a stop is emitted in full */
    check(&c, "The ENd of ENDING", "The ENd of ", "", 0, NULL, NULL);
    struct pipe_cfg multi = {.stops = {"STOP", "YD", "\n\n"}, .n_stops = 3};
    check(&multi, "abcXYdefSTOP", "abcXYdef", "", 0, NULL, NULL);
    check(&multi, "line one\n\nline two", "line one", "", 0, NULL, NULL);
    check(&multi, "no stop at all", "no stop at all", "", 0, NULL, NULL);
    /* overlapping stops: the earliest-starting one wins however the text is split */
    struct pipe_cfg over = {.stops = {"</tool_call>", "a"}, .n_stops = 2};
    check(&over, "xy}</tool_call>", "xy}", "", 0, NULL, NULL);
    struct pipe_cfg over2 = {.stops = {"abcd", "bc"}, .n_stops = 2};
    check(&over2, "zzabcx", "zza", "", 0, NULL, NULL);
    check(&over2, "zzabcd", "zz", "", 0, NULL, NULL);
    struct pipe_cfg utf = {.stops = {"\xc3\xa9t\xc3\xa9"}, .n_stops = 1};
    check(&utf, "un \xc3\xa9t\xc3\xa9 chaud", "un ", "", 0, NULL, NULL);
}

/* Streaming holds back only what could still begin a stop string. */
static void test_stop_holdback(void **state)
{
    char *stops[] = {"ENDX", "zz"};
    struct srv_stop st;
    assert_true(srv_stop_init(&st, stops, 2));
    struct srv_buf out = {0};
    assert_false(srv_stop_push(&st, "abc EN", 6, &out));
    assert_string_equal(out.p, "abc "); /* "EN" held */
    assert_false(srv_stop_push(&st, "D", 1, &out));
    assert_string_equal(out.p, "abc ");
    assert_false(srv_stop_push(&st, ".z", 2, &out));
    assert_string_equal(out.p, "abc END."); /* "z" held */
    assert_true(srv_stop_push(&st, "z tail", 6, &out));
    assert_string_equal(out.p, "abc END.");
    assert_true(srv_stop_push(&st, "more", 4, &out)); /* stays stopped */
    srv_stop_flush(&st, &out);
    assert_string_equal(out.p, "abc END.");
    srv_buf_free(&out);
    srv_stop_deinit(&st);
}

/* ----------------------------------------------------------------- reasoning */

static void test_reasoning(void **state)
{
    struct pipe_cfg c = {.reason = true};
    check(&c, "<think>\nI think so.\n</think>\n\nThe answer.", "The answer.", "I think so.", 0, NULL, NULL);
    check(&c, "  <think>a b</think>c", "c", "a b", 0, NULL, NULL);
    check(&c, "Plain answer with <think> later", "Plain answer with <think> later", "", 0, NULL, NULL);
    check(&c, "<think>never closed  \n", "", "never closed", 0, NULL, NULL);
    check(&c, "<thinking>", "<thinking>", "", 0, NULL, NULL);
    check(&c, "<thin", "<thin", "", 0, NULL, NULL);
    struct pipe_cfg open = {.reason = true, .think_open = SRV_RF_THINK};
    check(&open, "\nstep one\nstep two\n</think>\n\nDone", "Done", "step one\nstep two", 0, NULL, NULL);
    check(&open, "no close", "", "no close", 0, NULL, NULL);
    struct pipe_cfg off = {.reason = false};
    check(&off, "<think>x</think>y", "<think>x</think>y", "", 0, NULL, NULL);
    /* a stop string inside the reasoning ends everything */
    struct pipe_cfg stop = {.reason = true, .stops = {"STOP"}, .n_stops = 1};
    check(&stop, "<think>abc STOP def</think>ghi", "", "abc", 0, NULL, NULL);
}

/* Gemma 4: <|channel>thought\n...<channel|> */
static void test_reasoning_gemma(void **state)
{
    struct pipe_cfg c = {.reason = true};
    check(&c, "<|channel>thought\nI think so.\n<channel|>The answer.", "The answer.", "I think so.",
          0, NULL, NULL);
    /* the empty channel a non-thinking turn opens with */
    check(&c, "<|channel>thought\n<channel|>Hi there", "Hi there", "", 0, NULL, NULL);
    check(&c, "\n<|channel>thought\nmulti\nline\n<channel|>\n\nDone\n", "Done\n", "multi\nline", 0,
          NULL, NULL);
    check(&c, "<|channel>thought\nnever closed \n", "", "never closed", 0, NULL, NULL);
    /* another channel, a partial tag, a tag later in the text: content */
    check(&c, "<|channel>analysis x<channel|>y", "<|channel>analysis x<channel|>y", "", 0, NULL,
          NULL);
    check(&c, "<|chan", "<|chan", "", 0, NULL, NULL);
    check(&c, "Text <|channel>thought\nx<channel|>", "Text <|channel>thought\nx<channel|>", "", 0,
          NULL, NULL);
    /* the other family's closing tag does not end the block */
    check(&c, "<|channel>thought\na </think> b<channel|>c", "c", "a </think> b", 0, NULL, NULL);
    /* the generation prompt opened the channel (thinking enabled) */
    struct pipe_cfg open = {.reason = true, .think_open = SRV_RF_GEMMA4};
    check(&open, "\nstep one\nstep two\n<channel|>Done", "Done", "step one\nstep two", 0, NULL,
          NULL);
    check(&open, "a </think> b", "", "a </think> b", 0, NULL, NULL);
    struct pipe_cfg off = {.reason = false};
    check(&off, "<|channel>thought\nx<channel|>y", "<|channel>thought\nx<channel|>y", "", 0, NULL,
          NULL);
}

/* ---------------------------------------------------------------- tool calls */

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"zip\":{\"type\":\"string\"}}}}}]";

static void test_tools_hermes(void **state)
{
    struct pipe_cfg c = {.tools = true, .tools_json = TOOLS};
    const char *n1[] = {"get_weather"}, *a1[] = {"{\"city\":\"Paris\"}"};
    check(&c, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
          "", "", 1, n1, a1);
    check(&c, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
              "\"Paris\"}}\n</tool_call>",
          "Let me check.", "", 1, n1, a1);
    const char *n2[] = {"get_weather", "get_time"};
    const char *a2[] = {"{\"city\":\"Paris\"}", "{}"};
    check(&c, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
              "</tool_call>\n<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>\n",
          "", "", 2, n2, a2);
    /* arguments given as a JSON string */
    check(&c, "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}</tool_call>",
          "", "", 1, n1, a1);
    /* unterminated at the end of the output, but complete JSON */
    check(&c, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", "", "", 1,
          n1, a1);
}

static void test_tools_literal(void **state)
{
    struct pipe_cfg c = {.tools = true, .tools_json = TOOLS};
    const char *t1 = "Use the <tool_call> tag like <tool_call>not json</tool_call> ok";
    check(&c, t1, t1, "", 0, NULL, NULL);
    check(&c, "<tool_call>{\"name\": 3}</tool_call>", "<tool_call>{\"name\": 3}</tool_call>", "", 0,
          NULL, NULL);
    check(&c, "text then <tool_call>{\"name\": \"f\", \"argu", "text then <tool_call>{\"name\": \"f\", \"argu",
          "", 0, NULL, NULL);
    check(&c, "{\"foo\": 1}", "{\"foo\": 1}", "", 0, NULL, NULL);
    check(&c, "ends with space \n", "ends with space \n", "", 0, NULL, NULL);
    check(&c, "<tool_", "<tool_", "", 0, NULL, NULL);
    /* a valid call after an invalid one */
    const char *n1[] = {"get_weather"}, *a1[] = {"{\"city\":\"Oslo\"}"};
    check(&c, "a <tool_call>bad</tool_call> b <tool_call>{\"name\": \"get_weather\", \"arguments\": "
              "{\"city\": \"Oslo\"}}</tool_call>",
          "a <tool_call>bad</tool_call> b", "", 1, n1, a1);
    struct pipe_cfg off = {.tools = false};
    const char *t2 = "<tool_call>{\"name\": \"get_weather\"}</tool_call>";
    check(&off, t2, t2, "", 0, NULL, NULL);
}

static void test_tools_xml(void **state)
{
    struct pipe_cfg c = {.tools = true, .tools_json = TOOLS};
    const char *n1[] = {"get_weather"};
    const char *a1[] = {"{\"city\":\"Paris\",\"days\":3,\"zip\":\"75001\"}"};
    check(&c, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
              "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n75001\n</parameter>\n</function>\n"
              "</tool_call>",
          "", "", 1, n1, a1);
    const char *a2[] = {"{\"note\":\"multi\\nline\"}"};
    check(&c, "<tool_call><function=get_weather><parameter=note>multi\nline</parameter></function></tool_call>",
          "", "", 1, n1, a2);
    check(&c, "<tool_call><function=get_weather><parameter=city>x</function></tool_call>",
          "<tool_call><function=get_weather><parameter=city>x</function></tool_call>", "", 0, NULL, NULL);
}

static void test_tools_llama(void **state)
{
    struct pipe_cfg c = {.tools = true, .tools_json = TOOLS};
    const char *n1[] = {"get_weather"}, *a1[] = {"{\"city\":\"Paris\"}"};
    check(&c, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", "", 1, n1, a1);
    check(&c, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", "",
          1, n1, a1);
    const char *n2[] = {"get_weather", "get_weather"};
    const char *a2[] = {"{\"city\":\"Paris\"}", "{\"city\":\"Rome\"}"};
    check(&c, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": "
              "\"get_weather\", \"parameters\": {\"city\": \"Rome\"}}",
          "", "", 2, n2, a2);
    check(&c, "{\"name\": \"get_weather\"} trailing words", "{\"name\": \"get_weather\"} trailing words", "",
          0, NULL, NULL);
}

/* Gemma 4: <|tool_call>call:NAME{key:value,...}<tool_call|> */
static void test_tools_gemma(void **state)
{
    struct pipe_cfg c = {.tools = true, .tools_json = TOOLS};
    const char *n1[] = {"get_weather"}, *a1[] = {"{\"city\":\"Paris\"}"};
    check(&c, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>", "", "", 1, n1,
          a1);
    /* every kind of value; keys and numbers as written */
    const char *a2[] = {
        "{\"a\":1,\"b\":-2.5e3,\"c\":true,\"d\":false,\"e\":null,\"f\":null,\"g\":[1,\"x\","
        "{\"h\":\"y\"},[],{}],\"i\":{\"j\":{\"k\":0.1}},\"zip\":\"01234\",\"s\":\"bare words\"}"};
    check(
        &c,
        "<|tool_call>call:get_weather{a:1,b:-2.5e3,c:true,d:false,e:None,f:null,g:[1,<|\"|>x<|\"|>,"
        "{h:<|\"|>y<|\"|>},[],{}],i:{j:{k:0.1}},zip:01234,s:bare words}<tool_call|>",
        "", "", 1, n1, a2);
    /* strings are verbatim between <|"|>: quotes, braces, commas, newlines */
    const char *a3[] = {"{\"note\":\"He said \\\"hi\\\", {ok}: "
                        "[yes]\\nnext\",\"empty\":\"\",\"\u00fcnit\":\"\u00b0C\"}"};
    check(&c,
          "<|tool_call>call:get_weather{note:<|\"|>He said \"hi\", {ok}: "
          "[yes]\nnext<|\"|>,empty:<|\"|><|\"|>,"
          "\u00fcnit:<|\"|>\u00b0C<|\"|>}<tool_call|>",
          "", "", 1, n1, a3);
    /* whitespace, a trailing comma, quoted keys and JSON strings are read too */
    const char *a4[] = {"{\"a\":1,\"b\":\"x\",\"c d\":\"q\"}"};
    check(&c,
          "<|tool_call>call:get_weather{ a : 1 ,\n b : <|\"|>x<|\"|>, <|\"|>c d<|\"|>:\"q\", "
          "}<tool_call|>",
          "", "", 1, n1, a4);
    /* text before, several calls, whitespace around them dropped */
    const char *n3[] = {"get_weather", "get_weather", "get_time"};
    const char *a5[] = {"{\"city\":\"Paris\"}", "{\"city\":\"Rome\"}", "{}"};
    check(&c,
          "Let me check.\n<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>"
          "<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}<tool_call|>\n"
          "<|tool_call>call:get_time{}<tool_call|>\n",
          "Let me check.", "", 3, n3, a5);
    /* the output ended before <tool_call|>, the call complete: still a call */
    check(&c, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}", "", "", 1, n1, a1);
    /* a Hermes call and a Gemma call in one output */
    const char *n2[] = {"get_weather", "get_time"},
               *a6[] = {"{\"city\":\"Paris\"}", "{\"tz\":\"CET\"}"};
    check(
        &c,
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>\n"
        "<|tool_call>call:get_time{tz:<|\"|>CET<|\"|>}<tool_call|>",
        "", "", 2, n2, a6);
}

static void test_tools_gemma_literal(void **state)
{
    struct pipe_cfg c = {.tools = true, .tools_json = TOOLS};
    static const char *const bad[] = {
        "<|tool_call>call:get_weather{city:<|\"|>Paris}<tool_call|>",  /* unterminated string */
        "<|tool_call>get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>", /* no call: */
        "<|tool_call>call:{a:1}<tool_call|>",                          /* no name */
        "<|tool_call>call:get weather{a:1}<tool_call|>",               /* space in the name */
        "<|tool_call>call:f{a:1<tool_call|>",                          /* object not closed */
        "<|tool_call>call:f{a:[1,2}<tool_call|>",                      /* array not closed */
        "<|tool_call>call:f{a:1} extra<tool_call|>",                   /* text after the object */
        "<|tool_call>call:f{:1}<tool_call|>",                          /* empty key */
        "<|tool_call>call:f{a}<tool_call|>",                           /* key without value */
        "<|tool_call>call:f{a:}<tool_call|>",                          /* empty value */
        "<|tool_call>call:f{a:1,,b:2}<tool_call|>",                    /* empty member */
        "<|tool_call>call:f{a:1,a:2}<tool_call|>",                     /* a key twice */
        "<|tool_call>call:f<tool_call|>",                              /* no arguments */
        "<|tool_call>not a call at all<tool_call|>",
        "say <|tool_call>call:get_weather{city:<|\"|>Par", /* the output ended mid-call */
        "<|tool_",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        check(&c, bad[i], bad[i], "", 0, NULL, NULL);
    /* a valid call after an invalid one */
    const char *n1[] = {"get_weather"}, *a1[] = {"{\"city\":\"Oslo\"}"};
    check(&c,
          "a <|tool_call>bad<tool_call|> b "
          "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|>",
          "a <|tool_call>bad<tool_call|> b", "", 1, n1, a1);
    /* tools off: all text */
    struct pipe_cfg off = {.tools = false};
    const char *t = "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|>";
    check(&off, t, t, "", 0, NULL, NULL);
}

static void test_tools_with_reasoning(void **state)
{
    struct pipe_cfg c = {.tools = true, .tools_json = TOOLS, .reason = true};
    const char *n1[] = {"get_weather"}, *a1[] = {"{\"city\":\"Paris\"}"};
    /* a call inside <think> stays reasoning; the one after it is a call */
    check(&c, "<think>maybe <tool_call>{\"name\": \"x\"}</tool_call></think>\n\n<tool_call>{\"name\": "
              "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>",
          "", "maybe <tool_call>{\"name\": \"x\"}</tool_call>", 1, n1, a1);
    struct pipe_cfg stop = {.tools = true, .tools_json = TOOLS, .stops = {"</tool_call>"}, .n_stops = 1};
    check(&stop, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>x",
          "", "", 1, n1, a1);
    /* Gemma 4: thought, then the call; a call inside the thought stays reasoning */
    check(&c,
          "<|channel>thought\nNeed <|tool_call>call:x{}<tool_call|> data.\n<channel|>"
          "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
          "", "Need <|tool_call>call:x{}<tool_call|> data.", 1, n1, a1);
    struct pipe_cfg gstop = {
        .tools = true, .tools_json = TOOLS, .stops = {"<tool_call|>"}, .n_stops = 1};
    check(&gstop, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>more", "", "", 1,
          n1, a1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_across_pieces),  cmocka_unit_test(test_stop_holdback),
        cmocka_unit_test(test_reasoning),           cmocka_unit_test(test_tools_hermes),
        cmocka_unit_test(test_tools_literal),       cmocka_unit_test(test_tools_xml),
        cmocka_unit_test(test_tools_llama),         cmocka_unit_test(test_tools_with_reasoning),
        cmocka_unit_test(test_reasoning_gemma),     cmocka_unit_test(test_tools_gemma),
        cmocka_unit_test(test_tools_gemma_literal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
