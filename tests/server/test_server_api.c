/*
 * test_server_api.c — the Anthropic Messages and OpenAI Responses request
 * parsers (server/req_messages.c, server/req_responses.c) onto the one
 * request model, the errors in each API's shape, the Responses store's count
 * and age limits (server/resp_store.c), the stop matcher's record of which
 * stop string matched, and the per-route token counters. No engine and no
 * HTTP.
 */
#include "testutil.h"

#include "server.h"

#include <stdlib.h>
#include <string.h>

static json_t *msg(const struct srv_req *r, size_t i) { return json_array_get(r->messages, i); }

static const char *field(const struct srv_req *r, size_t i, const char *key)
{
    return json_string_value(json_object_get(msg(r, i), key));
}

static bool mparse(const char *body, struct srv_req *r, struct srv_err *e)
{
    return srv_messages_parse(body, strlen(body), false, r, e);
}

/* A 400 naming `param` with `needle` in the message, in Anthropic's shape. */
static void mbad(const char *body, const char *param, const char *needle)
{
    struct srv_req r;
    struct srv_err e;
    if (mparse(body, &r, &e)) fail_msg("accepted: %s", body);
    assert_int_equal(e.http, 400);
    assert_string_equal(e.param, param ? param : "");
    if (!strstr(e.message, needle)) fail_msg("message '%s' lacks '%s'", e.message, needle);
    char *j = srv_err_body(&e, SRV_API_MESSAGES);
    json_t *o = json_loads(j, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(o, "type")), "error");
    json_t *err = json_object_get(o, "error");
    assert_string_equal(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(err, "message")), e.message);
    assert_int_equal(json_object_size(err), 2);
    json_decref(o);
    free(j);
}

static void test_messages_full(void **state)
{
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":64,\"system\":[{\"type\":\"text\",\"text\":\"be brief\"},"
        "{\"type\":\"text\",\"text\":\"be kind\"}],\"messages\":["
        "{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"s\"},"
        "{\"type\":\"text\",\"text\":\"checking\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"w\","
        "\"input\":{\"city\":\"Paris\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":"
        "[{\"type\":\"text\",\"text\":\"sunny\"}]},{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\","
        "\"content\":\"boom\",\"is_error\":true},{\"type\":\"text\",\"text\":\"thanks\"}]}],"
        "\"tools\":[{\"name\":\"w\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"tool\",\"name\":\"w\"},\"temperature\":0.5,\"top_p\":0.9,\"top_k\":7,"
        "\"stop_sequences\":[\"END\"],\"metadata\":{\"user_id\":\"u\"},\"stream\":true,"
        "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}";
    struct srv_req r;
    struct srv_err e;
    assert_true(mparse(body, &r, &e));
    assert_int_equal(r.api, SRV_API_MESSAGES);
    assert_int_equal(r.kind, SRV_CHAT);
    assert_int_equal(json_array_size(r.messages), 6);
    assert_string_equal(field(&r, 0, "role"), "system");
    assert_string_equal(field(&r, 0, "content"), "be brief\nbe kind");
    assert_string_equal(field(&r, 1, "content"), "weather?");
    assert_string_equal(field(&r, 2, "role"), "assistant");
    assert_string_equal(field(&r, 2, "content"), "checking");
    assert_string_equal(field(&r, 2, "reasoning_content"), "hmm");
    json_t *tc = json_array_get(json_object_get(msg(&r, 2), "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(tc, "id")), "toolu_1");
    json_t *fn = json_object_get(tc, "function");
    assert_string_equal(json_string_value(json_object_get(fn, "name")), "w");
    assert_string_equal(json_string_value(json_object_get(json_object_get(fn, "arguments"), "city")), "Paris");
    assert_string_equal(field(&r, 3, "role"), "tool");
    assert_string_equal(field(&r, 3, "tool_call_id"), "toolu_1");
    assert_string_equal(field(&r, 3, "content"), "sunny");
    assert_string_equal(field(&r, 4, "content"), "Error: boom");
    assert_string_equal(field(&r, 5, "role"), "user");
    assert_string_equal(field(&r, 5, "content"), "thanks");
    json_t *t0 = json_object_get(json_array_get(r.tools, 0), "function");
    assert_string_equal(json_string_value(json_object_get(t0, "name")), "w");
    assert_string_equal(json_string_value(json_object_get(t0, "description")), "d");
    assert_true(json_is_object(json_object_get(t0, "parameters")));
    assert_int_equal(r.tool_choice, SRV_TC_NAMED);
    assert_string_equal(r.tool_name, "w");
    assert_true(r.has_temperature && r.temperature == 0.5f && r.has_top_p && r.has_top_k);
    assert_int_equal(r.top_k, 7);
    assert_int_equal(r.max_tokens, 64);
    assert_int_equal(r.n_stops, 1);
    assert_string_equal(r.stops[0], "END");
    assert_true(r.stream);
    assert_int_equal(r.enable_thinking, 1);
    assert_int_equal(r.n, 1);
    srv_req_free(&r);

    /* defaults: thinking off, tool_choice auto, "any" is required */
    assert_true(mparse("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, &e));
    assert_int_equal(r.enable_thinking, 0);
    assert_int_equal(r.tool_choice, SRV_TC_AUTO);
    assert_null(r.tools);
    assert_false(r.stream);
    srv_req_free(&r);
    assert_true(mparse("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":"
                       "[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"any\"}}", &r, &e));
    assert_int_equal(r.tool_choice, SRV_TC_REQUIRED);
    srv_req_free(&r);
    /* count_tokens needs no max_tokens */
    const char *ct = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    assert_true(srv_messages_parse(ct, strlen(ct), true, &r, &e));
    srv_req_free(&r);
}

static void test_messages_errors(void **state)
{
#define U "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
    mbad("{" U "}", "max_tokens", "'max_tokens' is required");
    mbad("{\"max_tokens\":0," U "}", "max_tokens", "max_tokens");
    mbad("{\"max_tokens\":5}", "messages", "non-empty array (missing)");
    mbad("{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages[0].role",
         "\"user\" or \"assistant\"");
    mbad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
         "messages[0].content[0]", "image blocks are not supported");
    mbad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}",
         "messages[0].content[0]", "tool_use_id");
    mbad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
         "\"t\",\"content\":[{\"type\":\"image\"}]}]}]}",
         "messages[0].content[0].content", "text blocks only");
    mbad("{\"max_tokens\":5," U ",\"temperature\":1.5}", "temperature", "[0, 1]");
    mbad("{\"max_tokens\":5," U ",\"top_k\":-1}", "top_k", "top_k");
    mbad("{\"max_tokens\":5," U ",\"system\":5}", "system", "string or an array of text blocks");
    mbad("{\"max_tokens\":5," U ",\"stop_sequences\":\"x\"}", "stop_sequences", "array");
    mbad("{\"max_tokens\":5," U ",\"tools\":[{\"name\":\"f\"}]}", "tools[0]", "input_schema");
    mbad("{\"max_tokens\":5," U ",\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"s\"}]}", "tools[0]",
         "not supported");
    mbad("{\"max_tokens\":5," U ",\"tool_choice\":{\"type\":\"any\"}}", "tool_choice", "no 'tools'");
    mbad("{\"max_tokens\":5," U ",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":"
         "\"tool\",\"name\":\"g\"}}", "tool_choice", "'g'");
    mbad("{\"max_tokens\":5," U ",\"thinking\":{\"type\":\"enabled\"}}", "thinking.budget_tokens", "required");
    mbad("{\"max_tokens\":5," U ",\"thinking\":{\"type\":\"on\"}}", "thinking", "enabled");
    mbad("{\"max_tokens\":5," U ",\"metadata\":[]}", "metadata", "object");
    mbad("[1]", NULL, "JSON object");
    mbad("{\"max_tokens\":5," U ",}", NULL, "invalid JSON");
#undef U
}

static void test_error_shapes(void **state)
{
    static const struct { int http; const char *type; } t[] = {
        {401, "authentication_error"}, {404, "not_found_error"}, {413, "request_too_large"},
        {429, "rate_limit_error"},     {500, "api_error"},       {503, "overloaded_error"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        struct srv_err e;
        srv_err_set(&e, t[i].http, NULL, "m");
        char *j = srv_err_body(&e, SRV_API_MESSAGES);
        json_t *o = json_loads(j, 0, NULL);
        assert_string_equal(json_string_value(json_object_get(json_object_get(o, "error"), "type")), t[i].type);
        json_decref(o);
        free(j);
        j = srv_err_body(&e, SRV_API_RESPONSES); /* OpenAI's shape */
        o = json_loads(j, 0, NULL);
        assert_non_null(json_object_get(json_object_get(o, "error"), "param"));
        json_decref(o);
        free(j);
    }
}

static bool rparse(const char *body, struct srv_req *r, struct srv_err *e)
{
    return srv_responses_parse(body, strlen(body), r, e);
}

static void rbad(const char *body, const char *param, const char *needle)
{
    struct srv_req r;
    struct srv_err e;
    if (rparse(body, &r, &e)) fail_msg("accepted: %s", body);
    assert_int_equal(e.http, 400);
    assert_string_equal(e.param, param ? param : "");
    if (!strstr(e.message, needle)) fail_msg("message '%s' lacks '%s'", e.message, needle);
}

static void test_responses_full(void **state)
{
    const char *body =
        "{\"model\":\"m\",\"instructions\":\"be brief\",\"input\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"weather?\"}]},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\","
        "\"text\":\"think\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"w\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},"
        "{\"type\":\"function_call\",\"call_id\":\"call_2\",\"name\":\"w\",\"arguments\":\"{}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"sunny\"},"
        "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"ok\"}]},"
        "{\"role\":\"developer\",\"content\":\"rules\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"w\",\"description\":\"d\",\"parameters\":{\"type\":\"object\"},"
        "\"strict\":true}],\"tool_choice\":{\"type\":\"function\",\"name\":\"w\"},\"max_output_tokens\":99,"
        "\"temperature\":0.7,\"top_p\":0.5,\"reasoning\":{\"effort\":\"low\"},\"store\":false,"
        "\"previous_response_id\":\"resp_x\",\"stream\":true,\"metadata\":{\"k\":\"v\"},"
        "\"text\":{\"format\":{\"type\":\"text\"}}}";
    struct srv_req r;
    struct srv_err e;
    assert_true(rparse(body, &r, &e));
    assert_int_equal(r.api, SRV_API_RESPONSES);
    assert_int_equal(r.n_head, 1);
    assert_int_equal(json_array_size(r.messages), 6);
    assert_string_equal(field(&r, 0, "role"), "system");
    assert_string_equal(field(&r, 0, "content"), "be brief");
    assert_string_equal(field(&r, 1, "content"), "weather?");
    assert_string_equal(field(&r, 2, "role"), "assistant");
    assert_true(json_is_null(json_object_get(msg(&r, 2), "content")));
    assert_string_equal(field(&r, 2, "reasoning_content"), "think");
    json_t *calls = json_object_get(msg(&r, 2), "tool_calls");
    assert_int_equal(json_array_size(calls), 2); /* consecutive calls share one message */
    json_t *fn = json_object_get(json_array_get(calls, 0), "function");
    assert_string_equal(json_string_value(json_object_get(json_object_get(fn, "arguments"), "city")), "Paris");
    assert_string_equal(field(&r, 3, "role"), "tool");
    assert_string_equal(field(&r, 3, "tool_call_id"), "call_1");
    assert_string_equal(field(&r, 4, "content"), "ok");
    assert_string_equal(field(&r, 5, "role"), "system");
    assert_int_equal(r.tool_choice, SRV_TC_NAMED);
    assert_string_equal(r.tool_name, "w");
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(r.tools, 0), "function"), "description")), "d");
    assert_int_equal(r.max_tokens, 99);
    assert_true(r.has_temperature && r.has_top_p && r.stream);
    assert_false(r.store);
    assert_string_equal(r.previous_id, "resp_x");
    assert_int_equal(r.enable_thinking, 1);
    assert_string_equal(json_string_value(json_object_get(r.echo, "instructions")), "be brief");
    assert_int_equal(json_integer_value(json_object_get(r.echo, "max_output_tokens")), 99);
    assert_false(json_is_true(json_object_get(r.echo, "store")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.echo, "reasoning"), "effort")), "low");
    srv_req_free(&r);

    assert_true(rparse("{\"input\":\"hi\",\"reasoning\":{\"effort\":\"none\"}}", &r, &e));
    assert_int_equal(json_array_size(r.messages), 1);
    assert_int_equal(r.n_head, 0);
    assert_true(r.store); /* the default */
    assert_int_equal(r.enable_thinking, 0);
    assert_true(json_is_array(json_object_get(r.echo, "tools")));
    srv_req_free(&r);
    assert_true(rparse("{\"input\":\"hi\"}", &r, &e));
    assert_int_equal(r.enable_thinking, -1); /* the model's default */
    srv_req_free(&r);
}

static void test_responses_errors(void **state)
{
    rbad("{}", "input", "(missing)");
    rbad("{\"input\":[]}", "input", "non-empty");
    rbad("{\"input\":5}", "input", "string or");
    rbad("{\"input\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "input[0].role", "user, assistant");
    rbad("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}", "input[0].content",
         "'input_image' is not supported");
    rbad("{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"[1]\"}]}",
         "input[0]", "JSON object");
    rbad("{\"input\":[{\"type\":\"function_call_output\",\"output\":\"x\"}]}", "input[0].call_id", "string");
    rbad("{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input[0]", "'item_reference'");
    rbad("{\"input\":\"x\",\"instructions\":5}", "instructions", "string");
    rbad("{\"input\":\"x\",\"tools\":[{\"type\":\"file_search\"}]}", "tools[0]", "function tools only");
    rbad("{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", "tools[0]", "name");
    rbad("{\"input\":\"x\",\"tool_choice\":\"required\"}", "tool_choice", "no 'tools'");
    rbad("{\"input\":\"x\",\"tool_choice\":7}", "tool_choice", "must be");
    rbad("{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens", "max_output_tokens");
    rbad("{\"input\":\"x\",\"temperature\":3}", "temperature", "[0, 2]");
    rbad("{\"input\":\"x\",\"store\":1}", "store", "boolean");
    rbad("{\"input\":\"x\",\"previous_response_id\":5}", "previous_response_id", "response id");
    rbad("{\"input\":\"x\",\"reasoning\":{\"effort\":5}}", "reasoning.effort", "effort");
    rbad("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\"}}}", "text.format", "json_object");
    rbad("{\"input\":\"x\",\"background\":true}", "background", "not supported");
}

static void test_store(void **state)
{
    struct srv_store *s = srv_store_create(2, 100);
    assert_non_null(s);
    assert_true(srv_store_put(s, "a", json_pack("{s:s}", "id", "a"), json_array(), 1000));
    assert_true(srv_store_put(s, "b", json_pack("{s:s}", "id", "b"), json_array(), 1010));
    json_t *resp = NULL, *conv = NULL;
    assert_true(srv_store_get(s, "a", 1020, &resp, &conv));
    assert_string_equal(json_string_value(json_object_get(resp, "id")), "a");
    assert_true(json_is_array(conv));
    json_decref(resp);
    json_decref(conv);
    assert_true(srv_store_put(s, "c", json_object(), json_array(), 1020)); /* over the count: a goes */
    assert_int_equal(srv_store_count(s), 2);
    assert_false(srv_store_get(s, "a", 1020, NULL, NULL));
    assert_true(srv_store_get(s, "b", 1110, NULL, NULL));
    assert_false(srv_store_get(s, "b", 1111, NULL, NULL)); /* over the age */
    assert_int_equal(srv_store_count(s), 1);
    assert_true(srv_store_delete(s, "c"));
    assert_false(srv_store_delete(s, "c"));
    assert_int_equal(srv_store_count(s), 0);
    srv_store_destroy(s);
    s = srv_store_create(0, 100); /* keeps nothing */
    assert_false(srv_store_put(s, "a", json_object(), json_array(), 0));
    srv_store_destroy(s);
    srv_store_destroy(NULL);
}

static void test_stop_matched(void **state)
{
    char *stops[] = {"zeta", "a gam", ""};
    struct srv_stop st;
    struct srv_buf out = {0};
    assert_true(srv_stop_init(&st, stops, 3));
    const char *text = "alpha beta gamma";
    bool hit = false;
    for (size_t i = 0; text[i] && !hit; i++) hit = srv_stop_push(&st, text + i, 1, &out);
    assert_true(hit);
    assert_string_equal(out.p, "alpha bet");
    assert_string_equal(st.matched, "a gam");
    srv_stop_deinit(&st);
    srv_buf_free(&out);
    assert_true(srv_stop_init(&st, stops, 3));
    assert_false(srv_stop_push(&st, "no stop", 7, &out));
    srv_stop_flush(&st, &out);
    assert_null(st.matched);
    srv_stop_deinit(&st);
    srv_buf_free(&out);
}

static void test_route_tokens(void **state)
{
    struct srv_metrics m;
    srv_metrics_init(&m);
    srv_metrics_tokens(&m, srv_api_route(SRV_API_MESSAGES), 10, 3);
    srv_metrics_tokens(&m, srv_api_route(SRV_API_RESPONSES), 7, 2);
    srv_metrics_tokens(&m, srv_api_route(SRV_API_MESSAGES), 5, 1);
    srv_metrics_count(&m, SRV_R_RESPONSE_ID, 404);
    struct srv_buf b = {0};
    assert_true(srv_metrics_format(&m, NULL, 0, &b));
    assert_non_null(strstr(b.p, "tern_route_prompt_tokens_total{route=\"/v1/messages\"} 15\n"));
    assert_non_null(strstr(b.p, "tern_route_generation_tokens_total{route=\"/v1/messages\"} 4\n"));
    assert_non_null(strstr(b.p, "tern_route_generation_tokens_total{route=\"/v1/responses\"} 2\n"));
    assert_non_null(strstr(b.p, "tern_http_requests_total{route=\"/v1/responses/{id}\",status=\"404\"} 1\n"));
    srv_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages_full),  cmocka_unit_test(test_messages_errors),
        cmocka_unit_test(test_error_shapes),   cmocka_unit_test(test_responses_full),
        cmocka_unit_test(test_responses_errors), cmocka_unit_test(test_store),
        cmocka_unit_test(test_stop_matched),   cmocka_unit_test(test_route_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
