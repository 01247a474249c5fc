/*
 * req_responses.c — OpenAI Responses request bodies (/v1/responses) parsed
 * and validated into the server's one request model, struct srv_req, with
 * the messages in the chat template's form:
 *
 *   instructions                       -> a leading system message (n_head = 1)
 *   input "text"                       -> a user message
 *   {role, content: string | [input_text | output_text]} -> that message
 *   {type: function_call, call_id, name, arguments} -> an assistant tool call
 *                                         (consecutive calls share one message)
 *   {type: function_call_output, call_id, output}   -> a tool message
 *   {type: reasoning, content: [reasoning_text]}    -> the next assistant
 *                                         message's reasoning_content
 *   tools [{type: function, name, parameters}]      -> chat-form tools
 *   reasoning.effort none / minimal | low...        -> enable_thinking 0 | 1
 *
 * The fields the response object repeats (instructions, tools, tool_choice,
 * temperature, ...) are kept in r->echo. previous_response_id is only
 * recorded: the caller prepends the stored conversation. A pure function
 * over bytes, unit-tested and fuzzed. Depends on jansson, libc.
 */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A content string or an array of text parts (input_text, output_text,
 * text), joined with newlines. New reference, or NULL with *err. */
static json_t *content_text(json_t *c, const char *where, struct srv_err *err)
{
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        srv_err_set(err, 400, where, "'%s' must be a string or an array of content parts", where);
        return NULL;
    }
    struct srv_buf b = {0};
    srv_buf_add(&b, "", 0);
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p)
    {
        const char *ty = json_string_value(json_object_get(p, "type"));
        json_t *tx = json_object_get(p, "text");
        if (!ty || (strcmp(ty, "input_text") && strcmp(ty, "output_text") && strcmp(ty, "text")) ||
            !json_is_string(tx)) {
            srv_err_set(err, 400, where, "'%s[%zu]': content type '%.40s' is not supported (text only)",
                        where, i, ty ? ty : "(none)");
            srv_buf_free(&b);
            return NULL;
        }
        if (i > 0) srv_buf_add(&b, "\n", 1);
        srv_buf_add(&b, json_string_value(tx), json_string_length(tx));
    }
    json_t *s = json_stringn(b.p, b.len);
    srv_buf_free(&b);
    if (!s) srv_err_set(err, 400, where, "'%s' is not valid UTF-8", where);
    return s;
}

/* The assistant message that a function_call item joins: the last message
 * when it is an assistant's, else a new one. */
static json_t *assistant_for_call(json_t *msgs, json_t **reasoning)
{
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *role = json_string_value(json_object_get(last, "role"));
    if (!(role && !strcmp(role, "assistant") && !*reasoning)) {
        last = json_pack("{s:s, s:n}", "role", "assistant", "content");
        if (*reasoning) json_object_set_new(last, "reasoning_content", *reasoning);
        *reasoning = NULL;
        json_array_append_new(msgs, last);
    }
    if (!json_object_get(last, "tool_calls")) json_object_set_new(last, "tool_calls", json_array());
    return last;
}

static bool input_item(json_t *it, size_t i, json_t *msgs, json_t **reasoning, struct srv_err *err)
{
    char where[64];
    snprintf(where, sizeof where, "input[%zu]", i);
    if (!json_is_object(it)) {
        srv_err_set(err, 400, where, "'%s' must be an object", where);
        return false;
    }
    const char *ty = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!ty || !strcmp(ty, "message")) {
        static const char *roles[] = {"user", "assistant", "system", "developer"};
        int rk = -1;
        for (int k = 0; role && k < 4; k++)
            if (!strcmp(role, roles[k])) rk = k;
        if (rk < 0) {
            snprintf(where, sizeof where, "input[%zu].role", i);
            srv_err_set(err, 400, where, "'%s' must be one of user, assistant, system, developer", where);
            return false;
        }
        snprintf(where, sizeof where, "input[%zu].content", i);
        json_t *t = content_text(json_object_get(it, "content"), where, err);
        if (!t) return false;
        json_t *m = json_pack("{s:s, s:o}", "role", rk == 3 ? "system" : role, "content", t);
        if (rk == 1 && *reasoning) {
            json_object_set_new(m, "reasoning_content", *reasoning);
            *reasoning = NULL;
        }
        json_array_append_new(msgs, m);
        return true;
    }
    if (!strcmp(ty, "function_call")) {
        json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
        json_t *args = json_object_get(it, "arguments");
        json_t *a = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
        if (!json_is_string(id) || !json_is_string(name) || !json_is_object(a)) {
            json_decref(a);
            srv_err_set(err, 400, where,
                        "'%s' must be {\"type\": \"function_call\", \"call_id\": ..., \"name\": ..., "
                        "\"arguments\": \"{...}\"} with arguments a JSON object's text",
                        where);
            return false;
        }
        json_t *m = assistant_for_call(msgs, reasoning);
        json_array_append_new(json_object_get(m, "tool_calls"),
                              json_pack("{s:O, s:s, s:{s:O, s:o}}", "id", id, "type", "function",
                                        "function", "name", name, "arguments", a));
        return true;
    }
    if (!strcmp(ty, "function_call_output")) {
        json_t *id = json_object_get(it, "call_id");
        snprintf(where, sizeof where, "input[%zu].output", i);
        if (!json_is_string(id)) {
            snprintf(where, sizeof where, "input[%zu].call_id", i);
            srv_err_set(err, 400, where, "'%s' must be a string", where);
            return false;
        }
        json_t *t = content_text(json_object_get(it, "output"), where, err);
        if (!t) return false;
        json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id,
                                              "content", t));
        return true;
    }
    if (!strcmp(ty, "reasoning")) {
        /* the text of its reasoning_text parts; summaries are not model input */
        struct srv_buf b = {0};
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(it, "content"), k, p)
        {
            const char *tx = json_string_value(json_object_get(p, "text"));
            if (tx) srv_buf_adds(&b, tx);
        }
        json_decref(*reasoning);
        *reasoning = b.len ? json_stringn(b.p, b.len) : NULL;
        srv_buf_free(&b);
        return true;
    }
    srv_err_set(err, 400, where, "'%s': item type '%.40s' is not supported", where, ty);
    return false;
}

static bool parse_input(json_t *root, struct srv_req *r, struct srv_err *err)
{
    json_t *ins = json_object_get(root, "instructions");
    if (ins && !json_is_null(ins)) {
        if (!json_is_string(ins)) {
            srv_err_set(err, 400, "instructions", "'instructions' must be a string");
            return false;
        }
        json_array_append_new(r->messages, json_pack("{s:s, s:O}", "role", "system", "content", ins));
        r->n_head = 1;
    }
    json_t *in = json_object_get(root, "input");
    if (json_is_string(in)) {
        json_array_append_new(r->messages, json_pack("{s:s, s:O}", "role", "user", "content", in));
        return true;
    }
    if (!json_is_array(in) || json_array_size(in) == 0) {
        srv_err_set(err, 400, "input", "'input' must be a string or a non-empty array of items%s",
                    in ? "" : " (missing)");
        return false;
    }
    json_t *reasoning = NULL;
    size_t i;
    json_t *it;
    json_array_foreach(in, i, it) if (!input_item(it, i, r->messages, &reasoning, err))
    {
        json_decref(reasoning);
        return false;
    }
    json_decref(reasoning);
    return true;
}

static bool parse_tools(json_t *root, struct srv_req *r, struct srv_err *err)
{
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            srv_err_set(err, 400, "tools", "'tools' must be an array");
            return false;
        }
        json_t *out = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t)
        {
            char where[48];
            snprintf(where, sizeof where, "tools[%zu]", i);
            const char *ty = json_string_value(json_object_get(t, "type"));
            json_t *name = json_object_get(t, "name"), *params = json_object_get(t, "parameters");
            if (!ty || strcmp(ty, "function")) {
                srv_err_set(err, 400, where, "'%s': tool type '%.40s' is not supported (function tools only)",
                            where, ty ? ty : "(none)");
                json_decref(out);
                return false;
            }
            if (!json_is_string(name) || (params && !json_is_object(params) && !json_is_null(params))) {
                srv_err_set(err, 400, where,
                            "'%s' must be {\"type\": \"function\", \"name\": ..., \"parameters\": {...}}",
                            where);
                json_decref(out);
                return false;
            }
            json_t *fn = json_pack("{s:O}", "name", name);
            if (json_is_object(params)) json_object_set(fn, "parameters", params);
            json_t *desc = json_object_get(t, "description");
            if (json_is_string(desc)) json_object_set(fn, "description", desc);
            json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
        if (json_array_size(out)) r->tools = out;
        else json_decref(out);
    }
    r->tool_choice = SRV_TC_AUTO;
    json_t *tc = json_object_get(root, "tool_choice");
    if (!tc || json_is_null(tc)) return true;
    const char *s = json_string_value(tc);
    const char *name = json_string_value(json_object_get(tc, "name"));
    const char *ty = json_string_value(json_object_get(tc, "type"));
    if (s && !strcmp(s, "none")) r->tool_choice = SRV_TC_NONE;
    else if (s && !strcmp(s, "auto")) r->tool_choice = SRV_TC_AUTO;
    else if (s && !strcmp(s, "required")) r->tool_choice = SRV_TC_REQUIRED;
    else if (ty && !strcmp(ty, "function") && name) {
        r->tool_choice = SRV_TC_NAMED;
        r->tool_name = strdup(name);
    } else {
        srv_err_set(err, 400, "tool_choice",
                    "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                    "{\"type\": \"function\", \"name\": ...}");
        return false;
    }
    return srv_check_tool_choice(r, "tool_choice", err);
}

static bool parse_options(json_t *root, struct srv_req *r, struct srv_err *err)
{
    bool has;
    long long x;
    if (!srv_get_num(root, "temperature", 0, 2, false, &r->has_temperature, &r->temperature, err) ||
        !srv_get_num(root, "top_p", 0, 1, true, &r->has_top_p, &r->top_p, err) ||
        !srv_get_int(root, "max_output_tokens", 1, INT32_MAX, &has, &x, err) ||
        !srv_get_bool(root, "stream", &r->stream, err))
        return false;
    r->max_tokens = has ? (int32_t)x : 0;
    r->store = true;
    if (!srv_get_bool(root, "store", &r->store, err)) return false;
    json_t *prev = json_object_get(root, "previous_response_id");
    if (prev && !json_is_null(prev)) {
        if (!json_is_string(prev) || json_string_length(prev) == 0 || json_string_length(prev) > 128) {
            srv_err_set(err, 400, "previous_response_id", "'previous_response_id' must be a response id");
            return false;
        }
        r->previous_id = strdup(json_string_value(prev));
    }
    r->enable_thinking = -1;
    json_t *re = json_object_get(root, "reasoning");
    json_t *effort = json_object_get(re, "effort");
    if (re && !json_is_null(re) && (!json_is_object(re) || (effort && !json_is_null(effort) && !json_is_string(effort)))) {
        srv_err_set(err, 400, "reasoning.effort", "'reasoning' must be {\"effort\": \"none\" | \"low\" | ...}");
        return false;
    }
    const char *e = json_string_value(effort);
    if (e) r->enable_thinking = strcmp(e, "none") && strcmp(e, "minimal");
    json_t *fmt = json_object_get(json_object_get(root, "text"), "format");
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (fmt && !json_is_null(fmt) && (!ft || strcmp(ft, "text"))) {
        srv_err_set(err, 400, "text.format", "'text.format' type '%.40s' is not supported (only \"text\")",
                    ft ? ft : "(none)");
        return false;
    }
    if (json_is_true(json_object_get(root, "background"))) {
        srv_err_set(err, 400, "background", "'background' responses are not supported");
        return false;
    }
    json_t *md = json_object_get(root, "metadata");
    if (md && !json_is_null(md) && !json_is_object(md)) {
        srv_err_set(err, 400, "metadata", "'metadata' must be an object");
        return false;
    }
    return true;
}

/* The request fields the response object repeats, with OpenAI's defaults. */
static json_t *echo_of(json_t *root, const struct srv_req *r)
{
#define OR(key, dflt) (json_object_get(root, key) && !json_is_null(json_object_get(root, key)) \
                           ? json_incref(json_object_get(root, key)) : (dflt))
    json_t *e = json_object();
    json_object_set_new(e, "instructions", OR("instructions", json_null()));
    json_object_set_new(e, "max_output_tokens", OR("max_output_tokens", json_null()));
    json_object_set_new(e, "previous_response_id", OR("previous_response_id", json_null()));
    json_object_set_new(e, "temperature", OR("temperature", json_real(1.0)));
    json_object_set_new(e, "top_p", OR("top_p", json_real(1.0)));
    json_object_set_new(e, "tool_choice", OR("tool_choice", json_string("auto")));
    json_object_set_new(e, "tools", OR("tools", json_array()));
    json_object_set_new(e, "parallel_tool_calls", OR("parallel_tool_calls", json_true()));
    json_object_set_new(e, "metadata", OR("metadata", json_object()));
    json_object_set_new(e, "user", OR("user", json_null()));
    json_object_set_new(e, "store", json_boolean(r->store));
    json_object_set_new(e, "truncation", json_string("disabled"));
    json_object_set_new(e, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    json_t *effort = json_object_get(json_object_get(root, "reasoning"), "effort");
    json_object_set_new(e, "reasoning", json_pack("{s:O, s:n}", "effort", effort ? effort : json_null(),
                                                  "summary"));
#undef OR
    return e;
}

bool srv_responses_parse(const char *body, size_t len, struct srv_req *r, struct srv_err *err)
{
    memset(r, 0, sizeof *r);
    r->kind = SRV_CHAT;
    r->api = SRV_API_RESPONSES;
    r->n = 1;
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        srv_err_set(err, 400, NULL, "invalid JSON body: %s at line %d column %d (byte %d)", je.text,
                    je.line, je.column, je.position);
        return false;
    }
    bool ok = false;
    if (!json_is_object(root)) {
        srv_err_set(err, 400, NULL, "the request body must be a JSON object, got %s",
                    srv_json_type_name(root));
        goto done;
    }
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_string(model) && !json_is_null(model)) {
        srv_err_set(err, 400, "model", "'model' must be a string");
        goto done;
    }
    r->messages = json_array();
    ok = r->messages && parse_input(root, r, err) && parse_tools(root, r, err) &&
         parse_options(root, r, err);
    if (ok) r->echo = echo_of(root, r);
done:
    json_decref(root);
    if (!ok) srv_req_free(r);
    return ok;
}
