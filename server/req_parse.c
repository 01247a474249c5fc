/*
 * req_parse.c — request bodies of /v1/chat/completions and /v1/completions
 * parsed and validated into struct srv_req. A plain function over bytes (no
 * HTTP, no engine), so it is unit-tested and fuzzed on its own. Every
 * failure names the offending field in OpenAI's error shape; no input makes
 * it crash. Depends on jansson and libc.
 */
#include "server.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Replaces bytes that are not valid UTF-8 (from a client's body, or cut by
 * truncation) with '?', and control characters with ' ', so that the message
 * is one line that can go into JSON. */
static void utf8_scrub(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
        bool ok = n > 0;
        for (int k = 1; ok && k < n; k++) ok = (p[k] & 0xC0) == 0x80;
        if (ok && n > 1) {
            json_t *j = json_stringn((const char *)p, (size_t)n); /* overlongs, surrogates */
            ok = j != NULL;
            json_decref(j);
        }
        if (!ok) {
            *p++ = '?';
            continue;
        }
        if (*p < 0x20) *p = ' ';
        p += n;
    }
}

void srv_err_set(struct srv_err *e, int http, const char *param, const char *fmt, ...)
{
    e->http = http;
    e->type = http == 401   ? "authentication_error"
              : http == 404 ? "not_found_error"
              : http == 429 ? "rate_limit_error"
              : http >= 500 ? "server_error"
                            : "invalid_request_error";
    e->code = NULL;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    utf8_scrub(e->message);
    utf8_scrub(e->param);
}

char *srv_err_json(const struct srv_err *e)
{
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type",
                          e->type ? e->type : "invalid_request_error", "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code ? json_string(e->code) : json_null());
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

char *srv_err_body(const struct srv_err *e, enum srv_api api)
{
    if (api != SRV_API_MESSAGES) return srv_err_json(e);
    /* Anthropic's error types by status */
    const char *ty = e->http == 401   ? "authentication_error"
                     : e->http == 403 ? "permission_error"
                     : e->http == 404 ? "not_found_error"
                     : e->http == 413 ? "request_too_large"
                     : e->http == 429 ? "rate_limit_error"
                     : e->http == 503 || e->http == 529 ? "overloaded_error"
                     : e->http >= 500 ? "api_error"
                                      : "invalid_request_error";
    json_t *o = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", ty, "message",
                          e->message);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

const char *srv_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

#define type_name srv_json_type_name

/* A number field in [lo, hi]; absent or null leaves *has false. */
bool srv_get_num(json_t *root, const char *key, double lo, double hi, bool lo_open, bool *has,
                    float *out, struct srv_err *err)
{
    json_t *v = json_object_get(root, key);
    *has = false;
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) {
        srv_err_set(err, 400, key, "'%s' must be a number, got %s", key, type_name(v));
        return false;
    }
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi || (lo_open && d == lo)) {
        srv_err_set(err, 400, key, "'%s' must be in %c%g, %g], got %g", key, lo_open ? '(' : '[',
                    lo, hi, d);
        return false;
    }
    *has = true;
    *out = (float)d;
    return true;
}

bool srv_get_int(json_t *root, const char *key, long long lo, long long hi, bool *has,
                    long long *out, struct srv_err *err)
{
    json_t *v = json_object_get(root, key);
    *has = false;
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v)) {
        srv_err_set(err, 400, key, "'%s' must be an integer, got %s", key, type_name(v));
        return false;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        srv_err_set(err, 400, key, "'%s' must be in [%lld, %lld], got %lld", key, lo, hi, x);
        return false;
    }
    *has = true;
    *out = x;
    return true;
}

bool srv_get_bool(json_t *root, const char *key, bool *out, struct srv_err *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        srv_err_set(err, 400, key, "'%s' must be a boolean, got %s", key, type_name(v));
        return false;
    }
    *out = json_is_true(v);
    return true;
}

#define get_num srv_get_num
#define get_int srv_get_int
#define get_bool srv_get_bool

/* ---------------------------------------------------------------- messages */

/* Text content: a string, or an array of {"type": "text", "text": ...} parts
 * joined with newlines. Returns a new string reference, or NULL with *err. */
static json_t *flatten_content(json_t *c, const char *where, struct srv_err *err)
{
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        srv_err_set(err, 400, where, "'%s' must be a string or an array of content parts, got %s",
                    where, type_name(c));
        return NULL;
    }
    struct srv_buf b = {0};
    size_t i;
    json_t *part;
    srv_buf_add(&b, "", 0);
    json_array_foreach(c, i, part)
    {
        const char *ty = json_string_value(json_object_get(part, "type"));
        json_t *tx = json_object_get(part, "text");
        if (!json_is_object(part) || !ty) {
            srv_err_set(err, 400, where, "'%s[%zu]' must be an object with a 'type'", where, i);
            goto fail;
        }
        if (strcmp(ty, "text") || !json_is_string(tx)) {
            srv_err_set(err, 400, where,
                        "'%s[%zu]': unsupported content part type '%.40s' (this server takes text)",
                        where, i, ty);
            goto fail;
        }
        if (i > 0) srv_buf_add(&b, "\n", 1);
        srv_buf_add(&b, json_string_value(tx), json_string_length(tx));
    }
    json_t *s = json_stringn(b.p, b.len);
    srv_buf_free(&b);
    if (!s) srv_err_set(err, 400, where, "'%s' is not valid UTF-8", where);
    return s;
fail:
    srv_buf_free(&b);
    return NULL;
}

/* An assistant message's tool_calls, with JSON-string arguments parsed into
 * objects (the form Hugging Face chat templates expect). */
static json_t *norm_tool_calls(json_t *tc, int mi, struct srv_err *err)
{
    char where[64];
    snprintf(where, sizeof where, "messages[%d].tool_calls", mi);
    if (!json_is_array(tc)) {
        srv_err_set(err, 400, where, "'%s' must be an array", where);
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(tc, i, c)
    {
        json_t *fn = json_object_get(c, "function");
        json_t *name = json_object_get(fn, "name");
        json_t *args = json_object_get(fn, "arguments");
        if (!json_is_string(name)) {
            srv_err_set(err, 400, where, "'%s[%zu].function.name' must be a string", where, i);
            goto fail;
        }
        json_t *a;
        if (json_is_string(args)) {
            a = json_loads(json_string_value(args), 0, NULL);
            if (!a) {
                srv_err_set(err, 400, where, "'%s[%zu].function.arguments' is not valid JSON",
                            where, i);
                goto fail;
            }
        } else if (json_is_object(args)) {
            a = json_incref(args);
        } else if (!args || json_is_null(args)) {
            a = json_object();
        } else {
            srv_err_set(err, 400, where, "'%s[%zu].function.arguments' must be a string", where,
                        i);
            goto fail;
        }
        json_t *id = json_object_get(c, "id");
        json_t *o = json_pack("{s:s, s:{s:O, s:o}}", "type", "function", "function", "name", name,
                              "arguments", a);
        if (!o) goto fail;
        if (json_is_string(id)) json_object_set(o, "id", id);
        json_array_append_new(out, o);
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

static json_t *norm_message(json_t *m, int i, struct srv_err *err)
{
    char where[64];
    snprintf(where, sizeof where, "messages[%d]", i);
    if (!json_is_object(m)) {
        srv_err_set(err, 400, where, "'%s' must be an object", where);
        return NULL;
    }
    const char *role = json_string_value(json_object_get(m, "role"));
    static const char *roles[] = {"system", "developer", "user", "assistant", "tool"};
    int r = -1;
    for (int k = 0; role && k < 5; k++)
        if (!strcmp(role, roles[k])) r = k;
    if (r < 0) {
        snprintf(where, sizeof where, "messages[%d].role", i);
        if (!role) srv_err_set(err, 400, where, "'%s' must be a string", where);
        else
            srv_err_set(err, 400, where,
                        "'%s': unknown role '%.40s' (system, developer, user, assistant, tool)",
                        where, role);
        return NULL;
    }
    json_t *out = json_pack("{s:s}", "role", r == 1 ? "system" : roles[r]);
    json_t *c = json_object_get(m, "content");
    json_t *tc = json_object_get(m, "tool_calls");
    snprintf(where, sizeof where, "messages[%d].content", i);
    if (!c || json_is_null(c)) {
        if (r != 3) {
            srv_err_set(err, 400, where, "'%s' is required for role '%s'", where, roles[r]);
            goto fail;
        }
        json_object_set_new(out, "content", json_null());
    } else {
        json_t *s = flatten_content(c, where, err);
        if (!s) goto fail;
        json_object_set_new(out, "content", s);
    }
    if (r == 3 && tc && !json_is_null(tc)) {
        json_t *n = norm_tool_calls(tc, i, err);
        if (!n) goto fail;
        json_object_set_new(out, "tool_calls", n);
    }
    static const char *keep[] = {"name", "tool_call_id", "reasoning_content"};
    for (int k = 0; k < 3; k++) {
        json_t *v = json_object_get(m, keep[k]);
        if (json_is_string(v)) json_object_set(out, keep[k], v);
    }
    json_t *rs = json_object_get(m, "reasoning");
    if (json_is_string(rs) && !json_object_get(out, "reasoning_content"))
        json_object_set(out, "reasoning_content", rs);
    return out;
fail:
    json_decref(out);
    return NULL;
}

static bool parse_messages(json_t *root, struct srv_req *r, struct srv_err *err)
{
    json_t *ms = json_object_get(root, "messages");
    if (!json_is_array(ms) || json_array_size(ms) == 0) {
        srv_err_set(err, 400, "messages", "'messages' must be a non-empty array%s",
                    ms ? "" : " (missing)");
        return false;
    }
    r->messages = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m)
    {
        json_t *n = norm_message(m, (int)i, err);
        if (!n) return false;
        json_array_append_new(r->messages, n);
    }
    return true;
}

/* ------------------------------------------------------------------- tools */

static bool parse_tools(json_t *root, struct srv_req *r, struct srv_err *err)
{
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            srv_err_set(err, 400, "tools", "'tools' must be an array");
            return false;
        }
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t)
        {
            const char *ty = json_string_value(json_object_get(t, "type"));
            json_t *fn = json_object_get(t, "function");
            json_t *params = json_object_get(fn, "parameters");
            if (!ty || strcmp(ty, "function") || !json_is_string(json_object_get(fn, "name")) ||
                (params && !json_is_object(params) && !json_is_null(params))) {
                srv_err_set(err, 400, "tools",
                            "'tools[%zu]' must be {\"type\": \"function\", \"function\": "
                            "{\"name\": ..., \"parameters\": {...}}}",
                            i);
                return false;
            }
        }
        if (json_array_size(tools)) r->tools = json_deep_copy(tools);
    }
    json_t *tc = json_object_get(root, "tool_choice");
    r->tool_choice = SRV_TC_AUTO;
    if (!tc || json_is_null(tc)) return true;
    const char *s = json_string_value(tc);
    if (s && !strcmp(s, "none")) r->tool_choice = SRV_TC_NONE;
    else if (s && !strcmp(s, "auto")) r->tool_choice = SRV_TC_AUTO;
    else if (s && !strcmp(s, "required")) r->tool_choice = SRV_TC_REQUIRED;
    else if (json_is_object(tc) &&
             json_is_string(json_object_get(json_object_get(tc, "function"), "name"))) {
        r->tool_choice = SRV_TC_NAMED;
        r->tool_name = strdup(json_string_value(json_object_get(json_object_get(tc, "function"), "name")));
    } else {
        srv_err_set(err, 400, "tool_choice",
                    "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                    "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        return false;
    }
    return srv_check_tool_choice(r, "tool_choice", err);
}

bool srv_check_tool_choice(struct srv_req *r, const char *param, struct srv_err *err)
{
    if (r->tool_choice != SRV_TC_NONE && !r->tools) { /* as vLLM: absent or empty tools */
        srv_err_set(err, 400, param, "'%s' is \"%s\" but no 'tools' were given", param,
                    r->tool_choice == SRV_TC_AUTO       ? "auto"
                    : r->tool_choice == SRV_TC_REQUIRED ? "required"
                                                        : "function");
        return false;
    }
    if (r->tool_choice == SRV_TC_NAMED) {
        size_t i;
        json_t *t;
        bool found = false;
        json_array_foreach(r->tools, i, t)
        {
            const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
            if (n && r->tool_name && !strcmp(n, r->tool_name)) found = true;
        }
        if (!found) {
            srv_err_set(err, 400, param, "'%s' names function '%.60s', which is not in 'tools'",
                        param, r->tool_name ? r->tool_name : "");
            return false;
        }
    }
    return true;
}

static bool parse_thinking(json_t *root, struct srv_req *r, struct srv_err *err)
{
    r->enable_thinking = -1;
    json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) {
            srv_err_set(err, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
            return false;
        }
        r->template_kwargs = json_deep_copy(kw);
        json_t *et = json_object_get(kw, "enable_thinking");
        if (json_is_boolean(et)) r->enable_thinking = json_is_true(et);
    }
    json_t *et = json_object_get(root, "enable_thinking");
    if (et && !json_is_null(et)) {
        if (!json_is_boolean(et)) {
            srv_err_set(err, 400, "enable_thinking", "'enable_thinking' must be a boolean");
            return false;
        }
        r->enable_thinking = json_is_true(et);
    }
    json_t *re = json_object_get(root, "reasoning_effort");
    if (re && !json_is_null(re)) {
        const char *s = json_string_value(re);
        if (!s) {
            srv_err_set(err, 400, "reasoning_effort", "'reasoning_effort' must be a string");
            return false;
        }
        if (!strcmp(s, "none")) r->enable_thinking = 0;
    }
    return true;
}

/* ------------------------------------------------------- sampling and misc */

static bool parse_stop(json_t *root, struct srv_req *r, struct srv_err *err)
{
    json_t *st = json_object_get(root, "stop");
    if (!st || json_is_null(st)) return true;
    if (json_is_string(st)) {
        r->stops[r->n_stops++] = strdup(json_string_value(st));
        return true;
    }
    if (!json_is_array(st) || json_array_size(st) > SRV_MAX_STOP) {
        srv_err_set(err, 400, "stop", "'stop' must be a string or an array of at most %d strings",
                    SRV_MAX_STOP);
        return false;
    }
    size_t i;
    json_t *s;
    json_array_foreach(st, i, s)
    {
        if (!json_is_string(s)) {
            srv_err_set(err, 400, "stop", "'stop[%zu]' must be a string, got %s", i, type_name(s));
            return false;
        }
        r->stops[r->n_stops++] = strdup(json_string_value(s));
    }
    return true;
}

static bool parse_bias(json_t *root, struct srv_req *r, int32_t vocab, struct srv_err *err)
{
    json_t *lb = json_object_get(root, "logit_bias");
    if (!lb || json_is_null(lb)) return true;
    if (!json_is_object(lb)) {
        srv_err_set(err, 400, "logit_bias", "'logit_bias' must be an object of token id -> bias");
        return false;
    }
    size_t n = json_object_size(lb);
    r->bias_ids = malloc((n ? n : 1) * sizeof *r->bias_ids);
    r->bias_values = malloc((n ? n : 1) * sizeof *r->bias_values);
    if (!r->bias_ids || !r->bias_values) {
        srv_err_set(err, 500, NULL, "out of memory");
        return false;
    }
    const char *k;
    json_t *v;
    json_object_foreach(lb, k, v)
    {
        char *end;
        long id = strtol(k, &end, 10);
        if (!*k || *end || id < 0 || id > INT32_MAX || (vocab > 0 && id >= vocab)) {
            srv_err_set(err, 400, "logit_bias", "'logit_bias' key '%.40s' is not a token id%s",
                        k, vocab > 0 ? " of this model's vocabulary" : "");
            return false;
        }
        double d = json_number_value(v);
        if (!json_is_number(v) || !isfinite(d) || d < -100 || d > 100) {
            srv_err_set(err, 400, "logit_bias", "'logit_bias[%s]' must be a number in [-100, 100]", k);
            return false;
        }
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias_values[r->n_bias++] = (float)d;
    }
    return true;
}

static bool parse_sampling(json_t *root, struct srv_req *r, const struct srv_parse_opts *o,
                           struct srv_err *err)
{
    bool has;
    long long x;
    if (!get_num(root, "temperature", 0, 2, false, &r->has_temperature, &r->temperature, err) ||
        !get_num(root, "top_p", 0, 1, true, &r->has_top_p, &r->top_p, err) ||
        !get_num(root, "min_p", 0, 1, false, &r->has_min_p, &r->min_p, err) ||
        !get_num(root, "presence_penalty", -2, 2, false, &r->has_presence, &r->presence_penalty, err) ||
        !get_num(root, "frequency_penalty", -2, 2, false, &r->has_frequency, &r->frequency_penalty, err) ||
        !get_num(root, "repetition_penalty", 0, 10, true, &r->has_rep, &r->repetition_penalty, err))
        return false;
    if (!get_int(root, "top_k", -1, 1 << 30, &r->has_top_k, &x, err)) return false;
    r->top_k = r->has_top_k && x > 0 ? (int32_t)x : 0;
    if (!get_int(root, "seed", INT64_MIN, INT64_MAX, &r->has_seed, &x, err)) return false;
    r->seed = (uint64_t)x;
    r->n = 1;
    if (!get_int(root, "n", 1, o->max_n > 0 ? o->max_n : 16, &has, &x, err)) return false;
    if (has) r->n = (int32_t)x;
    const char *mt = json_object_get(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (json_is_null(json_object_get(root, mt))) mt = "max_tokens";
    if (!get_int(root, mt, 1, INT32_MAX, &has, &x, err)) return false;
    r->max_tokens = has ? (int32_t)x : 0;
    if (!get_bool(root, "ignore_eos", &r->ignore_eos, err)) return false;
    return parse_stop(root, r, err) && parse_bias(root, r, o->vocab_size, err);
}

static bool parse_logprobs(json_t *root, struct srv_req *r, struct srv_err *err)
{
    bool has;
    long long x;
    if (r->kind == SRV_COMPLETION) {
        /* legacy completions: logprobs is the number of top alternatives */
        if (!get_int(root, "logprobs", 0, 20, &has, &x, err)) return false;
        r->logprobs = has;
        r->top_logprobs = has ? (int32_t)x : 0;
        return true;
    }
    if (!get_bool(root, "logprobs", &r->logprobs, err)) return false;
    if (!get_int(root, "top_logprobs", 0, 20, &has, &x, err)) return false;
    if (has && x > 0 && !r->logprobs) {
        srv_err_set(err, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        return false;
    }
    r->top_logprobs = has ? (int32_t)x : 0;
    return true;
}

static bool parse_stream(json_t *root, struct srv_req *r, struct srv_err *err)
{
    if (!get_bool(root, "stream", &r->stream, err)) return false;
    json_t *so = json_object_get(root, "stream_options");
    if (!so || json_is_null(so)) return true;
    if (!json_is_object(so)) {
        srv_err_set(err, 400, "stream_options", "'stream_options' must be an object");
        return false;
    }
    if (!r->stream) {
        srv_err_set(err, 400, "stream_options", "'stream_options' is only allowed with 'stream': true");
        return false;
    }
    json_t *iu = json_object_get(so, "include_usage");
    if (iu && !json_is_boolean(iu) && !json_is_null(iu)) {
        srv_err_set(err, 400, "stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
        return false;
    }
    r->include_usage = json_is_true(iu);
    return true;
}

static bool parse_format(json_t *root, struct srv_err *err)
{
    json_t *rf = json_object_get(root, "response_format");
    if (!rf || json_is_null(rf)) return true;
    const char *ty = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !ty) {
        srv_err_set(err, 400, "response_format", "'response_format' must be an object with a 'type'");
        return false;
    }
    if (strcmp(ty, "text")) {
        srv_err_set(err, 400, "response_format.type",
                    "'response_format.type' '%.40s' is not supported (only \"text\")", ty);
        return false;
    }
    return true;
}

static bool parse_prompt(json_t *root, struct srv_req *r, int32_t vocab, struct srv_err *err)
{
    json_t *p = json_object_get(root, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_array(p) && json_array_size(p) > 1 && !json_is_integer(json_array_get(p, 0))) {
        srv_err_set(err, 400, "prompt", "'prompt' holds several prompts; send one prompt per request");
        return false;
    }
    if (json_is_string(p)) {
        r->prompt = strdup(json_string_value(p));
        return r->prompt != NULL;
    }
    if (!json_is_array(p) || json_array_size(p) == 0 || json_array_size(p) > (1u << 24)) {
        srv_err_set(err, 400, "prompt",
                    "'prompt' must be a string or a non-empty array of token ids (one prompt)");
        return false;
    }
    r->n_prompt_ids = (int32_t)json_array_size(p);
    r->prompt_ids = malloc((size_t)r->n_prompt_ids * sizeof *r->prompt_ids);
    if (!r->prompt_ids) {
        srv_err_set(err, 500, NULL, "out of memory");
        return false;
    }
    size_t i;
    json_t *v;
    json_array_foreach(p, i, v)
    {
        long long id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id > INT32_MAX || (vocab > 0 && id >= vocab)) {
            srv_err_set(err, 400, "prompt", "'prompt[%zu]' is not a token id of this model", i);
            return false;
        }
        r->prompt_ids[i] = (int32_t)id;
    }
    return true;
}

static bool parse_completion_extras(json_t *root, struct srv_err *err)
{
    if (json_is_true(json_object_get(root, "echo"))) {
        srv_err_set(err, 400, "echo", "'echo' is not supported");
        return false;
    }
    json_t *sfx = json_object_get(root, "suffix");
    if (sfx && !json_is_null(sfx)) {
        srv_err_set(err, 400, "suffix", "'suffix' is not supported");
        return false;
    }
    return true;
}

bool srv_req_parse(enum srv_kind kind, const char *body, size_t len,
                   const struct srv_parse_opts *opts, struct srv_req *r, struct srv_err *err)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->api = kind == SRV_CHAT ? SRV_API_CHAT : SRV_API_COMPLETIONS;
    r->enable_thinking = -1;
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        srv_err_set(err, 400, NULL, "invalid JSON body: %s at line %d column %d (byte %d)", je.text,
                    je.line, je.column, je.position);
        return false;
    }
    bool ok = false;
    if (!json_is_object(root)) {
        srv_err_set(err, 400, NULL, "the request body must be a JSON object, got %s", type_name(root));
        goto done;
    }
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_string(model) && !json_is_null(model)) {
        srv_err_set(err, 400, "model", "'model' must be a string");
        goto done;
    }
    if (kind == SRV_CHAT) {
        if (!parse_messages(root, r, err) || !parse_tools(root, r, err) ||
            !parse_thinking(root, r, err) || !parse_format(root, err))
            goto done;
    } else if (!parse_prompt(root, r, opts->vocab_size, err) || !parse_completion_extras(root, err)) {
        goto done;
    }
    ok = parse_sampling(root, r, opts, err) && parse_logprobs(root, r, err) &&
         parse_stream(root, r, err);
done:
    json_decref(root);
    if (!ok) srv_req_free(r);
    return ok;
}

void srv_req_free(struct srv_req *r)
{
    json_decref(r->messages);
    json_decref(r->tools);
    json_decref(r->template_kwargs);
    free(r->tool_name);
    free(r->prompt);
    free(r->prompt_ids);
    free(r->bias_ids);
    free(r->bias_values);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->previous_id);
    json_decref(r->echo);
    memset(r, 0, sizeof *r);
}

json_t *srv_req_template_context(const struct srv_req *r, const char *bos, const char *eos)
{
    json_t *ctx = json_object();
    if (!ctx) return NULL;
    const char *k;
    json_t *v;
    if (r->template_kwargs)
        json_object_foreach(r->template_kwargs, k, v) json_object_set(ctx, k, v);
    json_object_set_new(ctx, "messages", r->messages ? json_incref(r->messages) : json_array());
    json_object_set_new(ctx, "add_generation_prompt", json_true());
    json_object_set_new(ctx, "bos_token", json_string(bos ? bos : ""));
    json_object_set_new(ctx, "eos_token", json_string(eos ? eos : ""));
    json_object_del(ctx, "tools");
    if (r->tools && r->tool_choice != SRV_TC_NONE) {
        if (r->tool_choice == SRV_TC_NAMED) {
            json_t *only = json_array();
            size_t i;
            json_t *t;
            json_array_foreach(r->tools, i, t)
            {
                const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
                if (n && !strcmp(n, r->tool_name)) json_array_append(only, t);
            }
            json_object_set_new(ctx, "tools", only);
        } else {
            json_object_set(ctx, "tools", r->tools);
        }
    }
    if (r->enable_thinking >= 0)
        json_object_set_new(ctx, "enable_thinking", json_boolean(r->enable_thinking));
    return ctx;
}
