/*
 * out_messages.c — a generation written as an Anthropic Messages response:
 * the message object (content blocks thinking / text / tool_use, stop_reason,
 * usage) and, when streaming, the event grammar
 *
 *   message_start, ping,
 *   (content_block_start, content_block_delta*, content_block_stop)*,
 *   message_delta (stop_reason, usage), message_stop
 *
 * as SSE "event:" + "data:" lines. The blocks come from gen.c (gen_impl.h).
 * Depends on jansson and libc.
 */
#include "gen_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "toolu_" + the call id's random part. */
static void tool_id(const struct srv_tool_call *c, char out[48])
{
    snprintf(out, 48, "toolu_%s", strncmp(c->id, "call_", 5) ? c->id : c->id + 5);
}

/* A thinking block's signature: a digest of its text. The client library
 * requires the field and sends it back with the block; it is not checked. */
static void signature(const struct srv_buf *t, char out[40])
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < t->len; i++) h = (h ^ (unsigned char)t->p[i]) * 0x100000001b3ull;
    snprintf(out, 40, "tern-%016llx", (unsigned long long)h);
}

static json_t *call_input(const struct srv_tool_call *c)
{
    json_t *in = json_loads(c->arguments, 0, NULL);
    if (!json_is_object(in)) {
        json_decref(in);
        in = json_object();
    }
    return in;
}

static const char *stop_reason(const struct srv_choice *c)
{
    if (c->n_calls > 0) return "tool_use";
    if (c->finish == TERN_FINISH_LENGTH) return "max_tokens";
    if (c->stop.matched) return "stop_sequence";
    return "end_turn";
}

static json_t *usage(const struct srv_gen *g)
{
    int32_t cached = g->cached_tokens < g->prompt_tokens ? g->cached_tokens : g->prompt_tokens;
    return json_pack("{s:i, s:I, s:i, s:i}", "input_tokens", g->prompt_tokens - cached,
                     "output_tokens", (json_int_t)srv_gen_output_tokens(g),
                     "cache_read_input_tokens", cached, "cache_creation_input_tokens", 0);
}

static json_t *block_json(const struct srv_gen *g, int b, bool empty)
{
    const struct srv_choice *c = &g->ch[0];
    const struct srv_blk *k = &c->blks[b];
    if (k->kind == SRV_BLK_CALL) {
        const struct srv_tool_call *call = &c->calls[k->call];
        char id[48];
        tool_id(call, id);
        return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", id, "name", call->name,
                         "input", empty ? json_object() : call_input(call));
    }
    const char *field = k->kind == SRV_BLK_REASONING ? "thinking" : "text";
    json_t *o = json_pack("{s:s, s:o}", "type", field,
                          field, empty ? json_string("") : srv_jstr(k->text.p, k->text.len));
    if (k->kind == SRV_BLK_REASONING) {
        char sig[40];
        signature(&k->text, sig);
        json_object_set_new(o, "signature", json_string(empty ? "" : sig));
    }
    return o;
}

void srv_msg_start(struct srv_gen *g)
{
    json_t *msg = json_pack("{s:s, s:s, s:s, s:[], s:s, s:n, s:n, s:{s:i, s:i, s:i, s:i}}", "id",
                            g->id, "type", "message", "role", "assistant", "content", "model",
                            g->mc->model_name, "stop_reason", "stop_sequence", "usage",
                            "input_tokens", g->prompt_tokens, "output_tokens", 0,
                            "cache_read_input_tokens", 0, "cache_creation_input_tokens", 0);
    srv_sse_event(g, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", msg));
    srv_sse_event(g, "ping", json_pack("{s:s}", "type", "ping"));
}

void srv_msg_blk_open(struct srv_gen *g, int b)
{
    srv_sse_event(g, "content_block_start",
                  json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", b,
                            "content_block", block_json(g, b, true)));
}

void srv_msg_blk_delta(struct srv_gen *g, int b, const char *s, size_t n)
{
    enum srv_blk_kind k = g->ch[0].blks[b].kind;
    json_t *d = k == SRV_BLK_CALL ? json_pack("{s:s, s:o}", "type", "input_json_delta",
                                              "partial_json", srv_jstr(s, n))
                : k == SRV_BLK_REASONING
                    ? json_pack("{s:s, s:o}", "type", "thinking_delta", "thinking", srv_jstr(s, n))
                    : json_pack("{s:s, s:o}", "type", "text_delta", "text", srv_jstr(s, n));
    srv_sse_event(g, "content_block_delta",
                  json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index", b, "delta", d));
}

void srv_msg_blk_close(struct srv_gen *g, int b)
{
    const struct srv_blk *k = &g->ch[0].blks[b];
    if (k->kind == SRV_BLK_REASONING) {
        char sig[40];
        signature(&k->text, sig);
        srv_sse_event(g, "content_block_delta",
                      json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", b,
                                "delta", "type", "signature_delta", "signature", sig));
    }
    srv_sse_event(g, "content_block_stop",
                  json_pack("{s:s, s:i}", "type", "content_block_stop", "index", b));
}

void srv_msg_final(struct srv_gen *g)
{
    if (!g->req.stream) return;
    if (g->status != TERN_OK) {
        struct srv_err e;
        srv_err_set(&e, 500, NULL, "generation failed: %s",
                    g->error[0] ? g->error : tern_status_str(g->status));
        char *s = srv_err_body(&e, SRV_API_MESSAGES);
        if (s) srv_buf_printf(&g->sse, "event: error\ndata: %s\n\n", s);
        free(s);
        return;
    }
    const struct srv_choice *c = &g->ch[0];
    json_t *d = json_pack("{s:s, s:o}", "stop_reason", stop_reason(c), "stop_sequence",
                          c->stop.matched && !c->n_calls ? json_string(c->stop.matched) : json_null());
    srv_sse_event(g, "message_delta",
                  json_pack("{s:s, s:o, s:o}", "type", "message_delta", "delta", d, "usage", usage(g)));
    srv_sse_event(g, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

json_t *srv_msg_result(struct srv_gen *g)
{
    const struct srv_choice *c = &g->ch[0];
    json_t *content = json_array();
    for (int b = 0; b < c->n_blks; b++) json_array_append_new(content, block_json(g, b, false));
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", g->id, "type", "message",
                     "role", "assistant", "model", g->mc->model_name, "content", content,
                     "stop_reason", stop_reason(c), "stop_sequence",
                     c->stop.matched && !c->n_calls ? json_string(c->stop.matched) : json_null(),
                     "usage", usage(g));
}
