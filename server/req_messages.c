/*
 * req_messages.c — Anthropic Messages request bodies (/v1/messages and
 * /v1/messages/count_tokens) parsed and validated into the server's one
 * request model, struct srv_req, with the messages in the chat template's
 * form:
 *
 *   system (string or text blocks)     -> a leading system message
 *   user text blocks                   -> a user message
 *   user tool_result blocks            -> tool messages (tool_call_id, content;
 *                                         is_error prefixes "Error: ")
 *   assistant text / thinking / tool_use -> one assistant message with
 *                                         content, reasoning_content, tool_calls
 *   tools[].input_schema               -> function tools' parameters
 *   tool_choice auto / any / tool / none -> auto / required / named / none
 *   thinking enabled / disabled (absent = disabled) -> enable_thinking
 *
 * Images and documents are refused with a 400 naming the block. A pure
 * function over bytes, unit-tested and fuzzed. Depends on jansson, libc.
 */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Text of a string or of an array of text blocks, joined with newlines. New
 * reference, or NULL with *err naming `where`. */
static json_t *text_of(json_t *c, const char *where, struct srv_err *err)
{
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        srv_err_set(err, 400, where, "'%s' must be a string or an array of text blocks", where);
        return NULL;
    }
    struct srv_buf b = {0};
    srv_buf_add(&b, "", 0);
    size_t i;
    json_t *blk;
    json_array_foreach(c, i, blk)
    {
        const char *ty = json_string_value(json_object_get(blk, "type"));
        json_t *tx = json_object_get(blk, "text");
        if (!ty || strcmp(ty, "text") || !json_is_string(tx)) {
            srv_err_set(err, 400, where,
                        "'%s[%zu]': block type '%.40s' is not supported here (text blocks only)",
                        where, i, ty ? ty : "(none)");
            srv_buf_free(&b);
            return NULL;
        }
        if (b.len) srv_buf_add(&b, "\n", 1);
        srv_buf_add(&b, json_string_value(tx), json_string_length(tx));
    }
    json_t *s = json_stringn(b.p, b.len);
    srv_buf_free(&b);
    if (!s) srv_err_set(err, 400, where, "'%s' is not valid UTF-8", where);
    return s;
}

static bool unsupported_block(const char *ty, const char *where, struct srv_err *err)
{
    if (!strcmp(ty, "image") || !strcmp(ty, "document"))
        srv_err_set(err, 400, where,
                    "'%s': %s blocks are not supported (this server takes text only)", where, ty);
    else
        srv_err_set(err, 400, where, "'%s': unknown content block type '%.40s'", where, ty);
    return false;
}

static bool user_blocks(json_t *content, int mi, json_t *out, struct srv_err *err)
{
    struct srv_buf text = {0};
    bool any_text = false, ok = false;
    size_t i;
    json_t *blk;
    char where[96];
    json_array_foreach(content, i, blk)
    {
        snprintf(where, sizeof where, "messages[%d].content[%zu]", mi, i);
        const char *ty = json_string_value(json_object_get(blk, "type"));
        if (!json_is_object(blk) || !ty) {
            srv_err_set(err, 400, where, "'%s' must be an object with a 'type'", where);
            goto done;
        }
        if (!strcmp(ty, "text")) {
            json_t *tx = json_object_get(blk, "text");
            if (!json_is_string(tx)) {
                srv_err_set(err, 400, where, "'%s.text' must be a string", where);
                goto done;
            }
            if (any_text) srv_buf_add(&text, "\n", 1);
            srv_buf_add(&text, json_string_value(tx), json_string_length(tx));
            any_text = true;
        } else if (!strcmp(ty, "tool_result")) {
            json_t *id = json_object_get(blk, "tool_use_id");
            if (!json_is_string(id)) {
                srv_err_set(err, 400, where, "'%s.tool_use_id' must be a string", where);
                goto done;
            }
            json_t *c = json_object_get(blk, "content");
            char cw[112];
            snprintf(cw, sizeof cw, "%s.content", where);
            json_t *t = c && !json_is_null(c) ? text_of(c, cw, err) : json_string("");
            if (!t) goto done;
            if (json_is_true(json_object_get(blk, "is_error"))) {
                struct srv_buf e = {0};
                srv_buf_adds(&e, "Error: ");
                srv_buf_add(&e, json_string_value(t), json_string_length(t));
                json_decref(t);
                t = json_stringn(e.p, e.len);
                srv_buf_free(&e);
                if (!t) goto done;
            }
            json_array_append_new(out, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id",
                                                 id, "content", t));
        } else {
            unsupported_block(ty, where, err);
            goto done;
        }
    }
    if (any_text || json_array_size(content) == 0) {
        json_t *s = json_stringn(text.p ? text.p : "", text.len);
        if (!s) {
            srv_err_set(err, 400, "messages", "'messages[%d].content' is not valid UTF-8", mi);
            goto done;
        }
        json_array_append_new(out, json_pack("{s:s, s:o}", "role", "user", "content", s));
    }
    ok = true;
done:
    srv_buf_free(&text);
    return ok;
}

static bool assistant_blocks(json_t *content, int mi, json_t *out, struct srv_err *err)
{
    struct srv_buf text = {0}, think = {0};
    json_t *calls = json_array();
    bool ok = false;
    size_t i;
    json_t *blk;
    char where[96];
    json_array_foreach(content, i, blk)
    {
        snprintf(where, sizeof where, "messages[%d].content[%zu]", mi, i);
        const char *ty = json_string_value(json_object_get(blk, "type"));
        if (!json_is_object(blk) || !ty) {
            srv_err_set(err, 400, where, "'%s' must be an object with a 'type'", where);
            goto done;
        }
        if (!strcmp(ty, "text") || !strcmp(ty, "thinking")) {
            json_t *tx = json_object_get(blk, ty);
            if (!json_is_string(tx)) {
                srv_err_set(err, 400, where, "'%s.%s' must be a string", where, ty);
                goto done;
            }
            struct srv_buf *b = ty[1] == 'e' ? &text : &think;
            srv_buf_add(b, json_string_value(tx), json_string_length(tx));
        } else if (!strcmp(ty, "redacted_thinking")) {
            continue;
        } else if (!strcmp(ty, "tool_use")) {
            json_t *id = json_object_get(blk, "id"), *name = json_object_get(blk, "name");
            json_t *input = json_object_get(blk, "input");
            if (!json_is_string(id) || !json_is_string(name) || (input && !json_is_object(input))) {
                srv_err_set(err, 400, where,
                            "'%s' must be {\"type\": \"tool_use\", \"id\": ..., \"name\": ..., "
                            "\"input\": {...}}",
                            where);
                goto done;
            }
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:o}}", "id", id, "type",
                                                   "function", "function", "name", name,
                                                   "arguments", input ? json_incref(input) : json_object()));
        } else {
            unsupported_block(ty, where, err);
            goto done;
        }
    }
    json_t *m = json_pack("{s:s}", "role", "assistant");
    json_object_set_new(m, "content", text.len || !json_array_size(calls)
                                          ? json_stringn(text.p ? text.p : "", text.len)
                                          : json_null());
    if (think.len) json_object_set_new(m, "reasoning_content", json_stringn(think.p, think.len));
    if (json_array_size(calls)) json_object_set(m, "tool_calls", calls);
    json_array_append_new(out, m);
    ok = true;
done:
    srv_buf_free(&text);
    srv_buf_free(&think);
    json_decref(calls);
    return ok;
}

static bool parse_msgs(json_t *root, struct srv_req *r, struct srv_err *err)
{
    json_t *sys = json_object_get(root, "system");
    if (sys && !json_is_null(sys)) {
        json_t *t = text_of(sys, "system", err);
        if (!t) return false;
        json_array_append_new(r->messages, json_pack("{s:s, s:o}", "role", "system", "content", t));
    }
    json_t *ms = json_object_get(root, "messages");
    if (!json_is_array(ms) || json_array_size(ms) == 0) {
        srv_err_set(err, 400, "messages", "'messages' must be a non-empty array%s",
                    ms ? "" : " (missing)");
        return false;
    }
    size_t i;
    json_t *m;
    char where[64];
    json_array_foreach(ms, i, m)
    {
        snprintf(where, sizeof where, "messages[%zu]", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *c = json_object_get(m, "content");
        if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
            snprintf(where, sizeof where, "messages[%zu].role", i);
            srv_err_set(err, 400, where, "'%s' must be \"user\" or \"assistant\"", where);
            return false;
        }
        if (json_is_string(c)) {
            json_array_append_new(r->messages, json_pack("{s:s, s:O}", "role", role, "content", c));
            continue;
        }
        if (!json_is_array(c)) {
            snprintf(where, sizeof where, "messages[%zu].content", i);
            srv_err_set(err, 400, where, "'%s' must be a string or an array of content blocks%s",
                        where, c ? "" : " (missing)");
            return false;
        }
        bool ok = role[0] == 'u' ? user_blocks(c, (int)i, r->messages, err)
                                 : assistant_blocks(c, (int)i, r->messages, err);
        if (!ok) return false;
    }
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
            const char *ty = json_string_value(json_object_get(t, "type"));
            json_t *name = json_object_get(t, "name"), *schema = json_object_get(t, "input_schema");
            json_t *desc = json_object_get(t, "description");
            char where[48];
            snprintf(where, sizeof where, "tools[%zu]", i);
            if (ty && strcmp(ty, "custom")) {
                srv_err_set(err, 400, where, "'%s': tool type '%.40s' is not supported (client tools only)",
                            where, ty);
                json_decref(out);
                return false;
            }
            if (!json_is_string(name) || !json_is_object(schema)) {
                srv_err_set(err, 400, where,
                            "'%s' must be {\"name\": ..., \"description\": ..., \"input_schema\": {...}}",
                            where);
                json_decref(out);
                return false;
            }
            json_t *fn = json_pack("{s:O, s:O}", "name", name, "parameters", schema);
            if (json_is_string(desc)) json_object_set(fn, "description", desc);
            json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
        if (json_array_size(out)) r->tools = out;
        else json_decref(out);
    }
    r->tool_choice = SRV_TC_AUTO;
    json_t *tc = json_object_get(root, "tool_choice");
    if (!tc || json_is_null(tc)) return true;
    const char *ty = json_string_value(json_object_get(tc, "type"));
    const char *name = json_string_value(json_object_get(tc, "name"));
    if (ty && !strcmp(ty, "auto")) return true;
    if (ty && !strcmp(ty, "none")) r->tool_choice = SRV_TC_NONE;
    else if (ty && !strcmp(ty, "any")) r->tool_choice = SRV_TC_REQUIRED;
    else if (ty && !strcmp(ty, "tool") && name) {
        r->tool_choice = SRV_TC_NAMED;
        r->tool_name = strdup(name);
    } else {
        srv_err_set(err, 400, "tool_choice",
                    "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or "
                    "{\"type\": \"tool\", \"name\": ...}");
        return false;
    }
    return srv_check_tool_choice(r, "tool_choice", err);
}

static bool parse_thinking(json_t *root, struct srv_req *r, struct srv_err *err)
{
    r->enable_thinking = 0;
    json_t *th = json_object_get(root, "thinking");
    if (!th || json_is_null(th)) return true;
    const char *ty = json_string_value(json_object_get(th, "type"));
    if (ty && !strcmp(ty, "disabled")) return true;
    if (ty && (!strcmp(ty, "enabled") || !strcmp(ty, "adaptive"))) {
        bool has;
        long long b;
        if (!srv_get_int(th, "budget_tokens", 1, INT32_MAX, &has, &b, err)) {
            snprintf(err->param, sizeof err->param, "thinking.budget_tokens");
            return false;
        }
        if (!has && !strcmp(ty, "enabled")) {
            srv_err_set(err, 400, "thinking.budget_tokens",
                        "'thinking.budget_tokens' is required when thinking is enabled");
            return false;
        }
        r->enable_thinking = 1;
        return true;
    }
    srv_err_set(err, 400, "thinking",
                "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or "
                "{\"type\": \"disabled\"}");
    return false;
}

static bool parse_sampling(json_t *root, struct srv_req *r, bool count_only, struct srv_err *err)
{
    bool has;
    long long x;
    if (!srv_get_num(root, "temperature", 0, 1, false, &r->has_temperature, &r->temperature, err) ||
        !srv_get_num(root, "top_p", 0, 1, true, &r->has_top_p, &r->top_p, err) ||
        !srv_get_int(root, "top_k", 0, 1 << 30, &r->has_top_k, &x, err))
        return false;
    r->top_k = r->has_top_k ? (int32_t)x : 0;
    if (!srv_get_int(root, "max_tokens", 1, INT32_MAX, &has, &x, err)) return false;
    if (!has && !count_only) {
        srv_err_set(err, 400, "max_tokens", "'max_tokens' is required");
        return false;
    }
    r->max_tokens = has ? (int32_t)x : 0;
    json_t *st = json_object_get(root, "stop_sequences");
    if (st && !json_is_null(st)) {
        if (!json_is_array(st) || json_array_size(st) > SRV_MAX_STOP) {
            srv_err_set(err, 400, "stop_sequences",
                        "'stop_sequences' must be an array of at most %d strings", SRV_MAX_STOP);
            return false;
        }
        size_t i;
        json_t *s;
        json_array_foreach(st, i, s)
        {
            if (!json_is_string(s)) {
                srv_err_set(err, 400, "stop_sequences", "'stop_sequences[%zu]' must be a string", i);
                return false;
            }
            r->stops[r->n_stops++] = strdup(json_string_value(s));
        }
    }
    json_t *md = json_object_get(root, "metadata");
    if (md && !json_is_null(md) && !json_is_object(md)) {
        srv_err_set(err, 400, "metadata", "'metadata' must be an object");
        return false;
    }
    return srv_get_bool(root, "stream", &r->stream, err);
}

bool srv_messages_parse(const char *body, size_t len, bool count_only, struct srv_req *r,
                        struct srv_err *err)
{
    memset(r, 0, sizeof *r);
    r->kind = SRV_CHAT;
    r->api = SRV_API_MESSAGES;
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
    if (model && !json_is_string(model)) {
        srv_err_set(err, 400, "model", "'model' must be a string");
        goto done;
    }
    r->messages = json_array();
    ok = r->messages && parse_msgs(root, r, err) && parse_tools(root, r, err) &&
         parse_thinking(root, r, err) && parse_sampling(root, r, count_only, err);
done:
    json_decref(root);
    if (!ok) srv_req_free(r);
    return ok;
}
