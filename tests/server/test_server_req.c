/*
 * test_server_req.c — request parsing and validation (server/req_parse.c),
 * the chat template context it builds, the error JSON shape, and the
 * Prometheus text of server/metrics.c. No engine and no HTTP.
 */
#include "testutil.h"

#include "server.h"

#include <stdlib.h>
#include <string.h>

static const struct srv_parse_opts OPTS = {.vocab_size = 384, .max_n = 8};

static bool parse(enum srv_kind k, const char *body, struct srv_req *r, struct srv_err *e)
{
    return srv_req_parse(k, body, strlen(body), &OPTS, r, e);
}

/* Expects a 400 naming `param` (NULL = none) with `needle` in the message. */
static void bad(enum srv_kind k, const char *body, const char *param, const char *needle)
{
    struct srv_req r;
    struct srv_err e;
    if (parse(k, body, &r, &e)) fail_msg("accepted: %s", body);
    assert_int_equal(e.http, 400);
    assert_string_equal(e.param, param ? param : "");
    if (!strstr(e.message, needle)) fail_msg("message '%s' lacks '%s'", e.message, needle);
    char *j = srv_err_json(&e);
    json_t *o = json_loads(j, 0, NULL);
    json_t *err = json_object_get(o, "error");
    assert_non_null(json_string_value(json_object_get(err, "message")));
    assert_string_equal(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    assert_true(param ? json_is_string(json_object_get(err, "param")) : json_is_null(json_object_get(err, "param")));
    assert_non_null(json_object_get(err, "code"));
    json_decref(o);
    free(j);
}

static void test_chat_full(void **state)
{
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":"
        "\"be brief\"},{\"type\":\"text\",\"text\":\"and kind\"}]},{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}}]},{\"role\":\"tool\","
        "\"tool_call_id\":\"call_1\",\"content\":\"42\"}],\"temperature\":0.5,\"top_p\":0.9,\"top_k\":"
        "40,\"min_p\":0.05,\"presence_penalty\":0.1,\"frequency_penalty\":-0.2,\"repetition_penalty\":"
        "1.1,\"seed\":7,\"n\":2,\"max_completion_tokens\":9,\"stop\":[\"x\",\"yy\"],\"logprobs\":true,"
        "\"top_logprobs\":3,\"logit_bias\":{\"5\":-100,\"17\":2.5},\"stream\":true,\"stream_options\":"
        "{\"include_usage\":true},\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"parameters\":{}}}],\"tool_choice\":\"auto\",\"response_format\":{\"type\":\"text\"},"
        "\"chat_template_kwargs\":{\"enable_thinking\":false,\"custom\":1},\"user\":\"u\"}";
    struct srv_req r;
    struct srv_err e;
    assert_true(parse(SRV_CHAT, body, &r, &e));
    assert_true(r.has_temperature && r.temperature == 0.5f);
    assert_true(r.has_top_p && r.top_p == 0.9f);
    assert_int_equal(r.top_k, 40);
    assert_true(r.has_seed && r.seed == 7);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.max_tokens, 9);
    assert_int_equal(r.n_stops, 2);
    assert_string_equal(r.stops[1], "yy");
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 3);
    assert_int_equal(r.n_bias, 2);
    assert_true(r.stream && r.include_usage);
    assert_int_equal(r.enable_thinking, 0);
    assert_int_equal(r.tool_choice, SRV_TC_AUTO);
    json_t *m0 = json_array_get(r.messages, 0);
    assert_string_equal(json_string_value(json_object_get(m0, "content")), "be brief\nand kind");
    json_t *tc = json_array_get(json_object_get(json_array_get(r.messages, 2), "tool_calls"), 0);
    json_t *args = json_object_get(json_object_get(tc, "function"), "arguments");
    assert_true(json_is_object(args)); /* parsed for the template */
    assert_int_equal(json_integer_value(json_object_get(args, "a")), 1);
    json_t *ctx = srv_req_template_context(&r, "<s>", "</s>");
    assert_true(json_is_true(json_object_get(ctx, "add_generation_prompt")));
    assert_string_equal(json_string_value(json_object_get(ctx, "bos_token")), "<s>");
    assert_true(json_is_false(json_object_get(ctx, "enable_thinking")));
    assert_int_equal(json_integer_value(json_object_get(ctx, "custom")), 1);
    assert_int_equal(json_array_size(json_object_get(ctx, "tools")), 1);
    json_decref(ctx);
    srv_req_free(&r);
}

static void test_chat_defaults(void **state)
{
    struct srv_req r;
    struct srv_err e;
    assert_true(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"developer\",\"content\":\"x\"},{\"role\":\"user\",\"content\":\"y\"}],\"reasoning_effort\":\"none\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"none\"}", &r, &e));
    assert_false(r.has_temperature || r.has_top_p || r.has_seed || r.logprobs || r.stream);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.max_tokens, 0);
    assert_int_equal(r.enable_thinking, 0);
    assert_string_equal(json_string_value(json_object_get(json_array_get(r.messages, 0), "role")), "system");
    json_t *ctx = srv_req_template_context(&r, "", "");
    assert_null(json_object_get(ctx, "tools")); /* tool_choice none hides them */
    json_decref(ctx);
    srv_req_free(&r);
    assert_true(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"y\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", &r, &e));
    assert_int_equal(r.tool_choice, SRV_TC_NAMED);
    ctx = srv_req_template_context(&r, "", "");
    assert_int_equal(json_array_size(json_object_get(ctx, "tools")), 1);
    json_decref(ctx);
    srv_req_free(&r);
}

static void test_chat_errors(void **state)
{
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    char b[512];
#define WITH(extra) (snprintf(b, sizeof b, "{%s,%s}", m, extra), b)
    bad(SRV_CHAT, "{\"messages\": [", NULL, "invalid JSON body");
    bad(SRV_CHAT, "{\"messages\": [}", NULL, "column");
    bad(SRV_CHAT, "[1,2]", NULL, "must be a JSON object");
    bad(SRV_CHAT, "{}", "messages", "'messages' must be a non-empty array");
    bad(SRV_CHAT, "{\"messages\":[]}", "messages", "non-empty");
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages[0].role", "unknown role 'wizard'");
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "required");
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content", "string or an array");
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}", "messages[0].content", "unsupported content part type 'image_url'");
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{bad\"}}]}]}", "messages[0].tool_calls", "not valid JSON");
    bad(SRV_CHAT, WITH("\"temperature\":\"hot\""), "temperature", "must be a number, got string");
    bad(SRV_CHAT, WITH("\"temperature\":2.5"), "temperature", "[0, 2]");
    bad(SRV_CHAT, WITH("\"temperature\":-0.1"), "temperature", "got -0.1");
    bad(SRV_CHAT, WITH("\"top_p\":0"), "top_p", "(0, 1]");
    bad(SRV_CHAT, WITH("\"top_p\":1.5"), "top_p", "(0, 1]");
    bad(SRV_CHAT, WITH("\"min_p\":2"), "min_p", "[0, 1]");
    bad(SRV_CHAT, WITH("\"presence_penalty\":3"), "presence_penalty", "[-2, 2]");
    bad(SRV_CHAT, WITH("\"frequency_penalty\":-3"), "frequency_penalty", "[-2, 2]");
    bad(SRV_CHAT, WITH("\"repetition_penalty\":0"), "repetition_penalty", "(0, 10]");
    bad(SRV_CHAT, WITH("\"top_k\":1.5"), "top_k", "integer");
    bad(SRV_CHAT, WITH("\"n\":0"), "n", "[1, 8]");
    bad(SRV_CHAT, WITH("\"n\":99"), "n", "[1, 8]");
    bad(SRV_CHAT, WITH("\"max_tokens\":0"), "max_tokens", "[1,");
    bad(SRV_CHAT, WITH("\"max_tokens\":\"ten\""), "max_tokens", "integer");
    bad(SRV_CHAT, WITH("\"max_completion_tokens\":-5"), "max_completion_tokens", "[1,");
    bad(SRV_CHAT, WITH("\"stop\":5"), "stop", "string or an array");
    bad(SRV_CHAT, WITH("\"stop\":[\"a\",1]"), "stop", "'stop[1]' must be a string");
    bad(SRV_CHAT, WITH("\"logit_bias\":{\"abc\":1}"), "logit_bias", "not a token id");
    bad(SRV_CHAT, WITH("\"logit_bias\":{\"999\":1}"), "logit_bias", "vocabulary");
    bad(SRV_CHAT, WITH("\"logit_bias\":{\"5\":101}"), "logit_bias", "[-100, 100]");
    bad(SRV_CHAT, WITH("\"top_logprobs\":3"), "top_logprobs", "needs 'logprobs'");
    bad(SRV_CHAT, WITH("\"logprobs\":true,\"top_logprobs\":21"), "top_logprobs", "[0, 20]");
    bad(SRV_CHAT, WITH("\"logprobs\":1"), "logprobs", "boolean");
    bad(SRV_CHAT, WITH("\"stream\":\"yes\""), "stream", "boolean");
    bad(SRV_CHAT, WITH("\"stream_options\":{\"include_usage\":true}"), "stream_options", "only allowed");
    bad(SRV_CHAT, WITH("\"response_format\":{\"type\":\"json_object\"}"), "response_format.type", "not supported");
    bad(SRV_CHAT, WITH("\"tools\":{}"), "tools", "must be an array");
    bad(SRV_CHAT, WITH("\"tools\":[{\"type\":\"retrieval\"}]"), "tools", "'tools[0]'");
    bad(SRV_CHAT, WITH("\"tool_choice\":\"required\""), "tool_choice", "no 'tools'");
    bad(SRV_CHAT, WITH("\"tool_choice\":\"auto\""), "tool_choice", "\"auto\" but no 'tools'");
    bad(SRV_CHAT, WITH("\"tools\":[],\"tool_choice\":\"required\""), "tool_choice", "\"required\" but no 'tools'");
    bad(SRV_CHAT, WITH("\"tools\":[],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"),
        "tool_choice", "\"function\" but no 'tools'");
    bad(SRV_CHAT, WITH("\"tool_choice\":\"sometimes\""), "tool_choice", "must be");
    struct srv_req ok_none;
    struct srv_err ok_err;
    assert_true(parse(SRV_CHAT, WITH("\"tools\":[],\"tool_choice\":\"none\""), &ok_none, &ok_err));
    srv_req_free(&ok_none);
    bad(SRV_CHAT, WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}"), "tool_choice", "'g'");
    bad(SRV_CHAT, WITH("\"chat_template_kwargs\":[1]"), "chat_template_kwargs", "object");
    bad(SRV_CHAT, WITH("\"model\":5"), "model", "string");
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":1,\"n\":2}", NULL, "duplicate");
#undef WITH
}

static void test_completion(void **state)
{
    struct srv_req r;
    struct srv_err e;
    assert_true(parse(SRV_COMPLETION, "{\"prompt\":\"once upon\",\"max_tokens\":4,\"logprobs\":2}", &r, &e));
    assert_string_equal(r.prompt, "once upon");
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 2);
    srv_req_free(&r);
    assert_true(parse(SRV_COMPLETION, "{\"prompt\":[0,5,17]}", &r, &e));
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 17);
    srv_req_free(&r);
    assert_true(parse(SRV_COMPLETION, "{\"prompt\":[\"x\"]}", &r, &e));
    assert_string_equal(r.prompt, "x");
    srv_req_free(&r);
    bad(SRV_COMPLETION, "{}", "prompt", "must be a string");
    bad(SRV_COMPLETION, "{\"prompt\":[]}", "prompt", "non-empty");
    bad(SRV_COMPLETION, "{\"prompt\":[1,400]}", "prompt", "'prompt[1]' is not a token id");
    bad(SRV_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt", "one prompt");
    bad(SRV_COMPLETION, "{\"prompt\":\"a\",\"echo\":true}", "echo", "not supported");
    bad(SRV_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":true}", "logprobs", "integer");
}

/* Odd bytes never crash the parser and always yield a reasoned 400. */
static void test_garbage(void **state)
{
    const char *cases[] = {"", "\0", "nul", "{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}",
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"temperature\":1e999}",
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"seed\":1e30}"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct srv_req r;
        struct srv_err e;
        if (srv_req_parse(SRV_CHAT, cases[i], strlen(cases[i]), &OPTS, &r, &e)) srv_req_free(&r);
        else assert_int_equal(e.http, 400);
    }
}

static void test_metrics_text(void **state)
{
    struct srv_metrics m;
    srv_metrics_init(&m);
    srv_metrics_count(&m, SRV_R_CHAT, 200);
    srv_metrics_count(&m, SRV_R_CHAT, 200);
    srv_metrics_count(&m, SRV_R_OTHER, 404);
    srv_metrics_count(&m, SRV_R_CHAT, 418);
    srv_hist_observe(&m.ttft, 0.003);
    srv_hist_observe(&m.ttft, 100.0);
    struct tern_engine_stats es = {.running = 2, .waiting = 3, .kv_blocks_total = 10, .kv_blocks_used = 4,
                                   .kv_blocks_free = 6, .preemptions = 1, .cached_prompt_tokens = 32};
    struct srv_buf b = {0};
    assert_true(srv_metrics_format(&m, &es, 5, &b));
    assert_non_null(strstr(b.p, "tern_http_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 2\n"));
    assert_non_null(strstr(b.p, "tern_http_requests_total{route=\"other\",status=\"404\"} 1\n"));
    assert_non_null(strstr(b.p, "tern_http_requests_total{route=\"/v1/chat/completions\",status=\"other\"} 1\n"));
    assert_non_null(strstr(b.p, "tern_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n"));
    assert_non_null(strstr(b.p, "tern_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"));
    assert_non_null(strstr(b.p, "tern_time_to_first_token_seconds_bucket{le=\"80\"} 1\n"));
    assert_non_null(strstr(b.p, "tern_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
    assert_non_null(strstr(b.p, "tern_time_to_first_token_seconds_count 2\n"));
    assert_non_null(strstr(b.p, "tern_kv_blocks_free 6\n"));
    assert_non_null(strstr(b.p, "tern_requests_waiting 3\n"));
    assert_non_null(strstr(b.p, "tern_prefix_cache_hit_tokens_total 32\n"));
    assert_non_null(strstr(b.p, "tern_requests_inflight 5\n"));
    srv_buf_free(&b);
    assert_true(srv_metrics_format(&m, NULL, 0, &b)); /* while loading: server counters only */
    assert_null(strstr(b.p, "tern_kv_blocks_free"));
    srv_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_full),  cmocka_unit_test(test_chat_defaults),
        cmocka_unit_test(test_chat_errors), cmocka_unit_test(test_completion),
        cmocka_unit_test(test_garbage),    cmocka_unit_test(test_metrics_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
