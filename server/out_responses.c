/*
 * out_responses.c — a generation written as an OpenAI Responses response:
 * the response object (output items reasoning / message / function_call,
 * status, usage, and the request fields it repeats) and, when streaming, the
 * event chain
 *
 *   response.created, response.in_progress,
 *   per item: response.output_item.added,
 *     message:   response.content_part.added, response.output_text.delta*,
 *                response.output_text.done, response.content_part.done
 *     reasoning: response.content_part.added, response.reasoning_text.delta*,
 *                response.reasoning_text.done, response.content_part.done
 *     call:      response.function_call_arguments.delta, .done
 *   response.output_item.done, ...,
 *   response.completed (or response.incomplete / response.failed)
 *
 * each with its sequence_number. A finished response with store is kept in
 * the server's store together with its conversation (previous_response_id).
 * The items come from gen.c's blocks (gen_impl.h). Depends on jansson, libc.
 */
#include "gen_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void event(struct srv_gen *g, const char *type, json_t *o)
{
    if (!o) return;
    json_t *e = json_pack("{s:s, s:I}", "type", type, "sequence_number", (json_int_t)g->seq++);
    if (e) json_object_update(e, o);
    json_decref(o);
    srv_sse_event(g, type, e);
}

static json_t *part_json(const struct srv_blk *k, bool empty)
{
    json_t *text = empty ? json_string("") : srv_jstr(k->text.p, k->text.len);
    if (k->kind == SRV_BLK_REASONING)
        return json_pack("{s:s, s:o}", "type", "reasoning_text", "text", text);
    return json_pack("{s:s, s:o, s:[], s:[]}", "type", "output_text", "text", text, "annotations",
                     "logprobs");
}

static json_t *item_json(const struct srv_gen *g, int b, bool done)
{
    const struct srv_choice *c = &g->ch[0];
    const struct srv_blk *k = &c->blks[b];
    const char *status = done ? "completed" : "in_progress";
    if (k->kind == SRV_BLK_CALL) {
        const struct srv_tool_call *call = &c->calls[k->call];
        return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s}", "type", "function_call", "id", k->id,
                         "call_id", call->id, "name", call->name, "arguments",
                         done ? srv_jstr(call->arguments, strlen(call->arguments)) : json_string(""),
                         "status", status);
    }
    json_t *content = done ? json_pack("[o]", part_json(k, false)) : json_array();
    if (k->kind == SRV_BLK_REASONING)
        return json_pack("{s:s, s:s, s:[], s:o, s:s}", "type", "reasoning", "id", k->id, "summary",
                         "content", content, "status", status);
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", k->id, "status", status,
                     "role", "assistant", "content", content);
}

static json_t *usage(const struct srv_gen *g)
{
    int64_t out = srv_gen_output_tokens(g);
    return json_pack("{s:i, s:{s:i}, s:I, s:{s:i}, s:I}", "input_tokens", g->prompt_tokens,
                     "input_tokens_details", "cached_tokens", g->cached_tokens, "output_tokens",
                     (json_int_t)out, "output_tokens_details", "reasoning_tokens",
                     g->ch[0].n_reasoning_tokens, "total_tokens", (json_int_t)(out + g->prompt_tokens));
}

/* The response object; `status` "in_progress", "completed", "incomplete" or "failed". */
static json_t *response_json(struct srv_gen *g, const char *status, bool with_output)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:n, s:n, s:s}", "id", g->id, "object", "response",
                          "created_at", (json_int_t)g->created, "status", status, "error",
                          "incomplete_details", "model", g->mc->model_name);
    if (!o) return NULL;
    const char *k;
    json_t *v;
    if (g->req.echo) json_object_foreach(g->req.echo, k, v) json_object_set(o, k, v);
    json_t *output = json_array();
    for (int b = 0; with_output && b < g->ch[0].n_blks; b++)
        json_array_append_new(output, item_json(g, b, true));
    json_object_set_new(o, "output", output);
    json_object_set_new(o, "usage", with_output ? usage(g) : json_null());
    if (!strcmp(status, "incomplete"))
        json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    if (!strcmp(status, "failed"))
        json_object_set_new(o, "error", json_pack("{s:s, s:s}", "code", "server_error", "message",
                                                  g->error[0] ? g->error : tern_status_str(g->status)));
    return o;
}

void srv_resp_start(struct srv_gen *g)
{
    event(g, "response.created", json_pack("{s:o}", "response", response_json(g, "in_progress", false)));
    event(g, "response.in_progress",
          json_pack("{s:o}", "response", response_json(g, "in_progress", false)));
}

void srv_resp_blk_open(struct srv_gen *g, int b)
{
    const struct srv_blk *k = &g->ch[0].blks[b];
    event(g, "response.output_item.added",
          json_pack("{s:i, s:o}", "output_index", b, "item", item_json(g, b, false)));
    if (k->kind != SRV_BLK_CALL)
        event(g, "response.content_part.added",
              json_pack("{s:s, s:i, s:i, s:o}", "item_id", k->id, "output_index", b,
                        "content_index", 0, "part", part_json(k, true)));
}

void srv_resp_blk_delta(struct srv_gen *g, int b, const char *s, size_t n)
{
    const struct srv_blk *k = &g->ch[0].blks[b];
    if (k->kind == SRV_BLK_CALL) {
        event(g, "response.function_call_arguments.delta",
              json_pack("{s:s, s:i, s:o}", "item_id", k->id, "output_index", b, "delta", srv_jstr(s, n)));
        return;
    }
    json_t *o = json_pack("{s:s, s:i, s:i, s:o}", "item_id", k->id, "output_index", b,
                          "content_index", 0, "delta", srv_jstr(s, n));
    if (k->kind == SRV_BLK_TEXT) json_object_set_new(o, "logprobs", json_array());
    event(g, k->kind == SRV_BLK_TEXT ? "response.output_text.delta" : "response.reasoning_text.delta", o);
}

void srv_resp_blk_close(struct srv_gen *g, int b)
{
    const struct srv_blk *k = &g->ch[0].blks[b];
    if (k->kind == SRV_BLK_CALL) {
        const struct srv_tool_call *call = &g->ch[0].calls[k->call];
        event(g, "response.function_call_arguments.done",
              json_pack("{s:s, s:i, s:s, s:o}", "item_id", k->id, "output_index", b, "name",
                        call->name, "arguments", srv_jstr(call->arguments, strlen(call->arguments))));
    } else {
        json_t *o = json_pack("{s:s, s:i, s:i, s:o}", "item_id", k->id, "output_index", b,
                              "content_index", 0, "text", srv_jstr(k->text.p, k->text.len));
        if (k->kind == SRV_BLK_TEXT) json_object_set_new(o, "logprobs", json_array());
        event(g, k->kind == SRV_BLK_TEXT ? "response.output_text.done" : "response.reasoning_text.done", o);
        event(g, "response.content_part.done",
              json_pack("{s:s, s:i, s:i, s:o}", "item_id", k->id, "output_index", b,
                        "content_index", 0, "part", part_json(k, false)));
    }
    event(g, "response.output_item.done",
          json_pack("{s:i, s:o}", "output_index", b, "item", item_json(g, b, true)));
}

static const char *status_of(const struct srv_gen *g)
{
    if (g->status != TERN_OK) return "failed";
    return g->ch[0].finish == TERN_FINISH_LENGTH && g->ch[0].n_calls == 0 ? "incomplete" : "completed";
}

/* The conversation after this response: its messages (without the
 * instructions) and the output as one assistant message. */
static json_t *conversation(const struct srv_gen *g)
{
    json_t *conv = json_array();
    for (size_t i = (size_t)g->req.n_head; i < json_array_size(g->req.messages); i++)
        json_array_append(conv, json_array_get(g->req.messages, i));
    const struct srv_choice *c = &g->ch[0];
    json_t *m = json_pack("{s:s}", "role", "assistant");
    json_object_set_new(m, "content", c->content.len || !c->n_calls ? srv_jstr(c->content.p, c->content.len)
                                                                   : json_null());
    if (c->reasoning.len)
        json_object_set_new(m, "reasoning_content", srv_jstr(c->reasoning.p, c->reasoning.len));
    if (c->n_calls) {
        json_t *tc = json_array();
        for (int k = 0; k < c->n_calls; k++) {
            json_t *args = json_loads(c->calls[k].arguments, 0, NULL);
            if (!json_is_object(args)) {
                json_decref(args);
                args = json_object();
            }
            json_array_append_new(tc, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", c->calls[k].id,
                                                "type", "function", "function", "name",
                                                c->calls[k].name, "arguments", args));
        }
        json_object_set_new(m, "tool_calls", tc);
    }
    json_array_append_new(conv, m);
    return conv;
}

void srv_resp_final(struct srv_gen *g)
{
    const char *status = status_of(g);
    if (g->req.store && g->status == TERN_OK && g->mc->store)
        srv_store_put(g->mc->store, g->id, response_json(g, status, true), conversation(g),
                      (int64_t)time(NULL));
    if (!g->req.stream) return;
    const char *ev = !strcmp(status, "failed")       ? "response.failed"
                     : !strcmp(status, "incomplete") ? "response.incomplete"
                                                     : "response.completed";
    event(g, ev, json_pack("{s:o}", "response", response_json(g, status, true)));
}

json_t *srv_resp_result(struct srv_gen *g)
{
    return response_json(g, status_of(g), true);
}
