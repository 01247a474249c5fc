/*
 * fuzz_request.c — libFuzzer target: arbitrary bytes as the body of a
 * /v1/chat/completions or /v1/completions request (the first byte picks
 * which), through the server's JSON -> request validation
 * (server/req_parse.c), the chat template context it builds, and then the
 * text pipeline (stop strings, <think> splitter, tool-call parser) over the
 * bytes after the first NUL (the model's "output"; the body itself when there
 * is none) with the request's own stop strings and tools, in two splits that
 * must agree. Errors must be 400-class with a one-line message.
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct res {
    struct srv_buf content, reasoning;
    struct srv_tool_call *calls;
    int n_calls;
};

static void pipe_run(const struct srv_req *r, const char *t, size_t n, size_t step, struct res *o)
{
    struct srv_stop st;
    struct srv_reason rs;
    struct srv_tools tl;
    memset(o, 0, sizeof *o);
    srv_stop_init(&st, r->stops, r->n_stops);
    srv_reason_init(&rs, true, r->n % 2 == 0);
    srv_tools_init(&tl, r->tools != NULL, r->tools, 1);
    bool stopped = false;
    for (size_t i = 0; i < n && !stopped; i += step) {
        size_t len = i + step < n ? step : n - i;
        struct srv_buf safe = {0}, c = {0};
        stopped = srv_stop_push(&st, t + i, len, &safe);
        if (safe.len) srv_reason_push(&rs, safe.p, safe.len, &o->reasoning, &c);
        if (c.len) srv_tools_push(&tl, c.p, c.len, &o->content, &o->calls, &o->n_calls);
        srv_buf_free(&safe);
        srv_buf_free(&c);
    }
    struct srv_buf safe = {0}, c = {0};
    if (!stopped) srv_stop_flush(&st, &safe);
    if (safe.len) srv_reason_push(&rs, safe.p, safe.len, &o->reasoning, &c);
    srv_reason_flush(&rs, &o->reasoning, &c);
    if (c.len) srv_tools_push(&tl, c.p, c.len, &o->content, &o->calls, &o->n_calls);
    srv_tools_flush(&tl, &o->content, &o->calls, &o->n_calls);
    srv_buf_add(&o->content, "", 0);
    srv_buf_add(&o->reasoning, "", 0);
    srv_buf_free(&safe);
    srv_buf_free(&c);
    srv_stop_deinit(&st);
    srv_reason_deinit(&rs);
    srv_tools_deinit(&tl);
}

static void res_free(struct res *o)
{
    srv_buf_free(&o->content);
    srv_buf_free(&o->reasoning);
    for (int i = 0; i < o->n_calls; i++) srv_tool_call_free(&o->calls[i]);
    free(o->calls);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    enum srv_kind kind = data[0] & 1 ? SRV_COMPLETION : SRV_CHAT;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    const char *nul = memchr(body, '\0', len);
    const char *out = nul ? nul + 1 : body;
    size_t out_len = nul ? len - (size_t)(out - body) : len;
    if (nul) len = (size_t)(nul - body);
    struct srv_parse_opts po = {.vocab_size = 384, .max_n = 16};
    struct srv_req r;
    struct srv_err e;
    if (!srv_req_parse(kind, body, len, &po, &r, &e)) {
        if (e.http != 400 && e.http != 500) abort();
        if (strchr(e.message, '\n')) abort();
        char *j = srv_err_json(&e);
        if (!j) abort();
        free(j);
        return 0;
    }
    json_t *ctx = srv_req_template_context(&r, "<s>", "</s>");
    char *cj = ctx ? json_dumps(ctx, JSON_COMPACT) : NULL;
    if (!cj) abort();
    free(cj);
    json_decref(ctx);
    struct res a, b;
    pipe_run(&r, out, out_len, out_len ? out_len : 1, &a);
    pipe_run(&r, out, out_len, 1 + data[0] % 7, &b);
    if (strcmp(a.content.p, b.content.p) || strcmp(a.reasoning.p, b.reasoning.p) || a.n_calls != b.n_calls)
        abort();
    for (int i = 0; i < a.n_calls; i++)
        if (strcmp(a.calls[i].name, b.calls[i].name) || strcmp(a.calls[i].arguments, b.calls[i].arguments))
            abort();
    res_free(&a);
    res_free(&b);
    srv_req_free(&r);
    return 0;
}
