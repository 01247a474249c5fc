/*
 * gen.c — one generation request from prompt to response. Builds the prompt
 * (chat template + tokenizer, or a raw completion prompt), submits it to the
 * engine, reads the stream's events and runs each completion's text through
 * the pipeline (stop strings -> reasoning -> tool calls). The same deltas
 * become SSE chunks when streaming or are accumulated into one JSON body
 * otherwise, so both forms carry the same text. Anthropic Messages and OpenAI
 * Responses read the same pipeline as ordered blocks (gen_impl.h) that
 * out_messages.c / out_responses.c format. Depends on include/tern.h,
 * jansson, pthreads, libc.
 */
#include "gen_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

json_t *srv_jstr(const char *s, size_t n)
{
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j) return j;
    struct srv_buf b = {0};
    srv_buf_add(&b, "", 0);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len && i + len <= n && json_stringn(s + i, len)) {
            json_t *t = json_stringn(s + i, len);
            json_decref(t);
            srv_buf_add(&b, s + i, len);
            i += len;
        } else {
            srv_buf_adds(&b, "\xEF\xBF\xBD");
            i++;
        }
    }
    j = json_stringn(b.p, b.len);
    srv_buf_free(&b);
    return j;
}

#define jstr srv_jstr

/* ------------------------------------------------------------------ prompt */

static bool build_chat(const struct srv_model_ctx *mc, const struct srv_req *r, char **text,
                       size_t *len, struct srv_err *err)
{
    if (!mc->tmpl) {
        srv_err_set(err, 400, "messages",
                    "this model has no chat template; use /v1/completions with a raw prompt");
        return false;
    }
    json_t *ctx = srv_req_template_context(r, mc->bos, mc->eos);
    char *cj = ctx ? json_dumps(ctx, JSON_COMPACT) : NULL;
    json_decref(ctx);
    if (!cj) {
        srv_err_set(err, 500, NULL, "out of memory");
        return false;
    }
    enum tern_status st = tern_chat_template_render(mc->tmpl, cj, text, len);
    free(cj);
    if (st != TERN_OK) {
        srv_err_set(err, 400, "messages", "the chat template failed on these messages: %s",
                    tern_last_error());
        return false;
    }
    return true;
}

/* Appends the tool_choice prefill (if any) to the rendered text *text, which
 * then becomes a malloc'd buffer (*owned). */
static bool add_prefill(const struct srv_model_ctx *mc, const struct srv_req *r,
                        enum srv_reason_fmt think_open, char **text, size_t *len, bool *owned,
                        char **prefill)
{
    if (!r->tools || (r->tool_choice != SRV_TC_REQUIRED && r->tool_choice != SRV_TC_NAMED))
        return true;
    char *pf = srv_tool_prefill(mc->tool_fmt, r->tool_choice, r->tool_name, think_open);
    struct srv_buf b = {0};
    bool ok = pf && srv_buf_add(&b, *text, *len) && srv_buf_adds(&b, pf);
    tern_free_buf(*text);
    *text = NULL;
    if (!ok) {
        free(pf);
        srv_buf_free(&b);
        return false;
    }
    *text = b.p;
    *len = b.len;
    *owned = true;
    if (prefill) *prefill = pf;
    else free(pf);
    return true;
}

bool srv_prompt_build(const struct srv_model_ctx *mc, const struct srv_req *r, int32_t **ids,
                      int32_t *n_ids, enum srv_reason_fmt *think_open, char **prefill,
                      struct srv_err *err)
{
    *ids = NULL;
    *n_ids = 0;
    *think_open = SRV_RF_NONE;
    if (prefill) *prefill = NULL;
    if (r->kind == SRV_COMPLETION && r->prompt_ids) {
        *ids = malloc((size_t)r->n_prompt_ids * sizeof **ids);
        if (!*ids) goto oom;
        memcpy(*ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof **ids);
        *n_ids = r->n_prompt_ids;
        return true;
    }
    if (!mc->tok) {
        srv_err_set(err, 400, NULL, "this model has no tokenizer; send token ids as the prompt");
        return false;
    }
    char *text = NULL;
    size_t len = 0;
    bool owned = false; /* text is malloc'd (prefilled), not the template's buffer */
    bool add_special = r->kind == SRV_COMPLETION;
    if (r->kind == SRV_CHAT) {
        if (!build_chat(mc, r, &text, &len, err)) return false;
        if (mc->reasoning) *think_open = srv_reason_open_at_end(text, len);
        if (!add_prefill(mc, r, *think_open, &text, &len, &owned, prefill)) goto oom;
    }
    int32_t *tids = NULL;
    size_t n = 0;
    enum tern_status st = r->kind == SRV_CHAT
                              ? tern_tokenize(mc->tok, text, len, false, &tids, &n)
                              : tern_tokenize(mc->tok, r->prompt, strlen(r->prompt), add_special, &tids, &n);
    if (owned) free(text);
    else tern_free_buf(text);
    if (st != TERN_OK) {
        srv_err_set(err, 400, r->kind == SRV_CHAT ? "messages" : "prompt", "tokenization failed: %s",
                    tern_last_error());
        goto fail;
    }
    if (n == 0 || n > INT32_MAX) {
        tern_free_buf(tids);
        srv_err_set(err, 400, r->kind == SRV_CHAT ? "messages" : "prompt", "the prompt is empty");
        goto fail;
    }
    *ids = malloc(n * sizeof **ids);
    if (!*ids) {
        tern_free_buf(tids);
        goto oom;
    }
    memcpy(*ids, tids, n * sizeof **ids);
    tern_free_buf(tids);
    *n_ids = (int32_t)n;
    return true;
oom:
    srv_err_set(err, 500, NULL, "out of memory");
fail:
    if (prefill) {
        free(*prefill);
        *prefill = NULL;
    }
    return false;
}

/* ------------------------------------------------------------------ create */

static bool feed(struct srv_gen *g, int i, const char *text, size_t len, bool end);

static struct tern_sampling_params sampling_of(const struct srv_model_ctx *mc, const struct srv_req *r)
{
    struct tern_sampling_params sp = tern_model_sampling_defaults(mc->model);
    if (r->has_temperature) sp.temperature = r->temperature;
    if (r->has_top_p) sp.top_p = r->top_p;
    if (r->has_top_k) sp.top_k = r->top_k;
    if (r->has_min_p) sp.min_p = r->min_p;
    if (r->has_rep) sp.repetition_penalty = r->repetition_penalty;
    if (r->has_presence) sp.presence_penalty = r->presence_penalty;
    if (r->has_frequency) sp.frequency_penalty = r->frequency_penalty;
    if (r->has_seed) {
        sp.seed = r->seed;
        sp.has_seed = true;
    }
    sp.max_tokens = r->max_tokens;
    sp.ignore_eos = r->ignore_eos;
    sp.bias_ids = r->bias_ids;
    sp.bias_values = r->bias_values;
    sp.n_bias = r->n_bias;
    sp.logprobs = r->logprobs ? r->top_logprobs : -1;
    sp.n = r->n;
    return sp;
}

/* Checks prompt + max_tokens against the context; fills max_tokens when unset. */
static bool fit_context(const struct srv_model_ctx *mc, struct srv_req *r, int32_t n_ids,
                        struct srv_err *err)
{
    int64_t ctx = mc->context_length;
    if (ctx <= 0) return true;
    const char *what = r->kind == SRV_CHAT ? (r->api == SRV_API_RESPONSES ? "input" : "messages") : "prompt";
    const char *mt = r->api == SRV_API_RESPONSES ? "max_output_tokens" : "max_tokens";
    if (n_ids >= ctx) {
        srv_err_set(err, 400, what,
                    "This model's maximum context length is %lld tokens, but the prompt has %d "
                    "tokens. Please shorten the %s.",
                    (long long)ctx, n_ids, what);
        return false;
    }
    if (r->max_tokens == 0) {
        r->max_tokens = (int32_t)(ctx - n_ids);
    } else if ((int64_t)n_ids + r->max_tokens > ctx) {
        srv_err_set(err, 400, mt,
                    "This model's maximum context length is %lld tokens. However, you requested "
                    "%lld tokens (%d in the prompt, %d for the completion). Please reduce "
                    "%s or the prompt.",
                    (long long)ctx, (long long)n_ids + r->max_tokens, n_ids, r->max_tokens, mt);
        return false;
    }
    return true;
}

struct srv_gen *srv_gen_create(const struct srv_model_ctx *mc, struct srv_req *req,
                               const struct srv_gen_params *p, struct srv_err *err)
{
    struct srv_gen *g = calloc(1, sizeof *g);
    if (!g) goto oom;
    g->mc = mc;
    g->req = *req;
    memset(req, 0, sizeof *req);
    g->n = g->req.n > 0 ? g->req.n : 1;
    g->ch = calloc((size_t)g->n, sizeof *g->ch);
    if (!g->ch) goto oom;
    if (!fit_context(mc, &g->req, p->n_ids, err)) goto fail;
    uint64_t seed = (uint64_t)now_ns() ^ (uint64_t)(uintptr_t)g;
    static const char *prefix[] = {"chatcmpl-", "cmpl-", "msg_", "resp_"};
    snprintf(g->id, sizeof g->id, "%s%016llx%08x", prefix[g->req.api],
             (unsigned long long)(seed * 0x9e3779b97f4a7c15ull), (unsigned)(seed >> 17));
    g->created = (int64_t)time(NULL);
    g->prompt_tokens = p->n_ids;
    g->usage = g->req.stream ? (g->req.include_usage || p->always_usage) : true;
    bool tools_on = g->req.tools && g->req.tool_choice != SRV_TC_NONE;
    bool reason_on = mc->reasoning && g->req.kind == SRV_CHAT;
    for (int i = 0; i < g->n; i++) {
        struct srv_choice *c = &g->ch[i];
        if (!srv_stop_init(&c->stop, g->req.stops, g->req.n_stops)) goto oom;
        srv_reason_init(&c->reason, reason_on, p->think_open);
        srv_tools_init(&c->tools, tools_on, g->req.tools, seed + (uint64_t)i * 7919);
        c->logprobs = g->req.logprobs ? json_array() : NULL;
    }
    if (g->req.stream && g->req.api == SRV_API_MESSAGES) srv_msg_start(g);
    if (g->req.stream && g->req.api == SRV_API_RESPONSES) srv_resp_start(g);
    /* The prefill is the start of every completion's text (not of its tokens). */
    for (int i = 0; p->prefill && i < g->n; i++) feed(g, i, p->prefill, strlen(p->prefill), false);
    struct tern_request tr = {0};
    tr.ids = p->ids;
    tr.n_ids = p->n_ids;
    tr.sampling = sampling_of(mc, &g->req);
    tr.detokenize = mc->tok != NULL;
    tr.forced_ids = p->forced;
    tr.n_forced = p->n_forced;
    g->submit_ns = now_ns();
    enum tern_status st = tern_engine_submit(mc->engine, &tr, &g->stream);
    if (st != TERN_OK) {
        /* The engine refuses what can never fit (the message has the numbers). */
        srv_err_set(err, st == TERN_E_CAPACITY || st == TERN_E_INVALID_ARG ? 400 : 500,
                    st == TERN_E_CAPACITY ? "max_tokens" : NULL, "%s", tern_last_error());
        goto fail;
    }
    return g;
oom:
    srv_err_set(err, 500, NULL, "out of memory");
fail:
    srv_gen_destroy(g);
    return NULL;
}

void srv_gen_cancel(struct srv_gen *g)
{
    if (g && g->stream) tern_stream_cancel(g->stream);
}

void srv_gen_destroy(struct srv_gen *g)
{
    if (!g) return;
    tern_stream_destroy(g->stream);
    for (int i = 0; g->ch && i < g->n; i++) {
        struct srv_choice *c = &g->ch[i];
        srv_stop_deinit(&c->stop);
        srv_reason_deinit(&c->reason);
        srv_tools_deinit(&c->tools);
        srv_buf_free(&c->content);
        srv_buf_free(&c->reasoning);
        for (int k = 0; k < c->n_calls; k++) srv_tool_call_free(&c->calls[k]);
        free(c->calls);
        json_decref(c->logprobs);
        for (int k = 0; k < c->n_blks; k++) srv_buf_free(&c->blks[k].text);
        free(c->blks);
    }
    free(g->ch);
    srv_req_free(&g->req);
    srv_buf_free(&g->sse);
    free(g);
}

bool srv_gen_streaming(const struct srv_gen *g) { return g->req.stream; }
struct srv_buf *srv_gen_sse(struct srv_gen *g) { return &g->sse; }

/* --------------------------------------------------------------- logprobs */

static json_t *token_entry(const struct srv_model_ctx *mc, int32_t id, float lp, bool top)
{
    char *t = NULL;
    size_t n = 0;
    if (!mc->tok || tern_detokenize(mc->tok, &id, 1, false, &t, &n) != TERN_OK) {
        t = NULL;
        n = 0;
    }
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)t[i]));
    json_t *e = json_object();
    json_object_set_new(e, "token", jstr(t ? t : "", n));
    json_object_set_new(e, "logprob", json_real(lp));
    json_object_set_new(e, "bytes", bytes);
    if (top) json_object_set_new(e, "top_logprobs", json_array());
    tern_free_buf(t);
    return e;
}

static json_t *logprob_entry(const struct srv_model_ctx *mc, const struct tern_event *ev, int n_top)
{
    json_t *e = token_entry(mc, ev->token, ev->logprob, true);
    json_t *tops = json_object_get(e, "top_logprobs");
    for (int k = 0; k < ev->n_top && k < n_top; k++)
        json_array_append_new(tops, token_entry(mc, ev->top_ids[k], ev->top_logprobs[k], false));
    return e;
}

/* Chat-style entries -> the legacy completions logprobs object. */
static json_t *legacy_logprobs(json_t *entries)
{
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t i, off = 0;
    json_t *e;
    json_array_foreach(entries, i, e)
    {
        json_t *tok = json_object_get(e, "token");
        json_array_append(toks, tok);
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *m = json_object();
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, t)
            json_object_set(m, json_string_value(json_object_get(t, "token")), json_object_get(t, "logprob"));
        json_array_append_new(tops, m);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += json_string_length(tok);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs",
                     tops, "text_offset", offs);
}

/* ------------------------------------------------------------ stream chunks */

static const char *finish_str(const struct srv_choice *c)
{
    if (c->finish == TERN_FINISH_LENGTH) return "length";
    return c->n_calls > 0 ? "tool_calls" : "stop";
}

static json_t *calls_json(const struct srv_choice *c, int from, bool with_index)
{
    json_t *a = json_array();
    for (int k = from; k < c->n_calls; k++) {
        json_t *o = json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", c->calls[k].id, "type", "function",
                              "function", "name", c->calls[k].name, "arguments",
                              jstr(c->calls[k].arguments, strlen(c->calls[k].arguments)));
        if (with_index) json_object_set_new(o, "index", json_integer(k));
        json_array_append_new(a, o);
    }
    return a;
}

static void sse_send(struct srv_gen *g, json_t *choice)
{
    bool chat = g->req.kind == SRV_CHAT;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", g->id, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)g->created, "model", g->mc->model_name, "choices", choice);
    if (g->usage) json_object_set_new(o, "usage", json_null());
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) return;
    srv_buf_printf(&g->sse, "data: %s\n\n", s);
    free(s);
}

void srv_sse_event(struct srv_gen *g, const char *name, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) return;
    srv_buf_printf(&g->sse, "event: %s\ndata: %s\n\n", name, s);
    free(s);
}

/* One chunk carrying what choice i produced just now. */
static void emit_delta(struct srv_gen *g, int i, const struct srv_buf *rs, const struct srv_buf *cs,
                       const char *finish)
{
    struct srv_choice *c = &g->ch[i];
    bool chat = g->req.kind == SRV_CHAT;
    bool has_lp = c->logprobs && json_array_size(c->logprobs) > 0;
    bool new_calls = c->n_calls > c->n_calls_sent;
    if (chat && !c->role_sent) {
        c->role_sent = true;
        sse_send(g, json_pack("{s:i, s:{s:s, s:s}, s:n, s:n}", "index", i, "delta", "role",
                              "assistant", "content", "", "logprobs", "finish_reason"));
    }
    if (!rs->len && !cs->len && !new_calls && !has_lp && !finish) return;
    json_t *lp = json_null();
    if (has_lp) {
        lp = chat ? json_pack("{s:O}", "content", c->logprobs) : legacy_logprobs(c->logprobs);
        json_array_clear(c->logprobs);
    }
    json_t *ch;
    if (chat) {
        json_t *d = json_object();
        if (rs->len) json_object_set_new(d, "reasoning_content", jstr(rs->p, rs->len));
        if (cs->len) json_object_set_new(d, "content", jstr(cs->p, cs->len));
        if (new_calls) json_object_set_new(d, "tool_calls", calls_json(c, c->n_calls_sent, true));
        ch = json_pack("{s:i, s:o, s:o}", "index", i, "delta", d, "logprobs", lp);
    } else {
        ch = json_pack("{s:i, s:o, s:o}", "index", i, "text", jstr(cs->p, cs->len), "logprobs", lp);
    }
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    c->n_calls_sent = c->n_calls;
    sse_send(g, ch);
}

/* ------------------------------------------------------------------ blocks */

static void blk_event(struct srv_gen *g, int b, int what, const char *s, size_t n)
{
    if (!g->req.stream) return;
    bool msg = g->req.api == SRV_API_MESSAGES;
    if (what == 0) msg ? srv_msg_blk_open(g, b) : srv_resp_blk_open(g, b);
    else if (what == 1) msg ? srv_msg_blk_delta(g, b, s, n) : srv_resp_blk_delta(g, b, s, n);
    else msg ? srv_msg_blk_close(g, b) : srv_resp_blk_close(g, b);
}

static void blk_close_last(struct srv_gen *g, struct srv_choice *c)
{
    if (c->n_blks == 0 || c->blk_closed) return;
    c->blk_closed = true;
    blk_event(g, c->n_blks - 1, 2, NULL, 0);
}

static struct srv_blk *blk_new(struct srv_gen *g, struct srv_choice *c, enum srv_blk_kind kind)
{
    blk_close_last(g, c);
    if (c->n_blks == c->cap_blks) {
        int cap = c->cap_blks ? c->cap_blks * 2 : 4;
        struct srv_blk *b = realloc(c->blks, (size_t)cap * sizeof *b);
        if (!b) return NULL;
        c->blks = b;
        c->cap_blks = cap;
    }
    struct srv_blk *b = &c->blks[c->n_blks++];
    memset(b, 0, sizeof *b);
    b->kind = kind;
    static const char *pre[] = {"rs_", "msg_", "fc_"};
    snprintf(b->id, sizeof b->id, "%s%s_%d", pre[kind], g->id + (g->id[0] == 'r' ? 5 : 4),
             c->n_blks - 1);
    c->blk_closed = false;
    return b;
}

/* Text for a reasoning or text block: appended to the open block of that
 * kind, or to a new one. */
static bool blk_text(struct srv_gen *g, struct srv_choice *c, enum srv_blk_kind kind,
                     const struct srv_buf *t)
{
    if (!t->len) return true;
    struct srv_blk *b = c->n_blks && !c->blk_closed && c->blks[c->n_blks - 1].kind == kind
                            ? &c->blks[c->n_blks - 1]
                            : NULL;
    if (!b) {
        if (!(b = blk_new(g, c, kind))) return false;
        blk_event(g, c->n_blks - 1, 0, NULL, 0);
    }
    if (!srv_buf_add(&b->text, t->p, t->len)) return false;
    blk_event(g, c->n_blks - 1, 1, t->p, t->len);
    return true;
}

/* What one feed produced, as blocks: reasoning, then text, then new calls
 * (each a block opened, given its arguments and closed). */
static bool blocks_push(struct srv_gen *g, int i, const struct srv_buf *rs, const struct srv_buf *cs,
                        bool fin)
{
    struct srv_choice *c = &g->ch[i];
    if (!blk_text(g, c, SRV_BLK_REASONING, rs) || !blk_text(g, c, SRV_BLK_TEXT, cs)) return false;
    for (int k = c->n_calls_sent; k < c->n_calls; k++) {
        struct srv_blk *b = blk_new(g, c, SRV_BLK_CALL);
        if (!b) return false;
        b->call = k;
        blk_event(g, c->n_blks - 1, 0, NULL, 0);
        blk_event(g, c->n_blks - 1, 1, c->calls[k].arguments, strlen(c->calls[k].arguments));
        blk_close_last(g, c);
    }
    if (fin) blk_close_last(g, c);
    return true;
}

/* Runs text through choice i's pipeline; `end` flushes every stage. Returns
 * true when a stop string matched. */
static bool feed(struct srv_gen *g, int i, const char *text, size_t len, bool end)
{
    struct srv_choice *c = &g->ch[i];
    struct srv_buf safe = {0}, rs = {0}, cs = {0}, out = {0};
    bool stopped = len ? srv_stop_push(&c->stop, text, len, &safe) : c->stop.stopped;
    bool fin = end || stopped;
    if (fin && srv_stop_flush(&c->stop, &safe)) stopped = true;
    if (safe.len) srv_reason_push(&c->reason, safe.p, safe.len, &rs, &cs);
    if (fin) srv_reason_flush(&c->reason, &rs, &cs);
    if (cs.len) srv_tools_push(&c->tools, cs.p, cs.len, &out, &c->calls, &c->n_calls);
    if (fin) srv_tools_flush(&c->tools, &out, &c->calls, &c->n_calls);
    if (g->req.tool_choice == SRV_TC_NAMED && c->n_calls > 0 && !fin) {
        /* A named function: the completion is that one call (as vLLM's
         * guided decoding gives); what the model adds after it is dropped. */
        fin = stopped = true;
        out.len = 0;
    }
    if (g->req.tool_choice == SRV_TC_NAMED) {
        while (c->n_calls > 1) srv_tool_call_free(&c->calls[--c->n_calls]);
        if (c->n_calls > 0) out.len = 0;
    }
    if (rs.len) srv_buf_add(&c->reasoning, rs.p, rs.len);
    if (out.len) srv_buf_add(&c->content, out.p, out.len);
    if (fin) {
        c->done = true;
        if (stopped) c->finish = TERN_FINISH_STOP;
    }
    if (g->req.api == SRV_API_MESSAGES || g->req.api == SRV_API_RESPONSES) {
        if (!blocks_push(g, i, &rs, &out, fin)) g->status = TERN_E_NO_MEMORY;
        c->n_calls_sent = c->n_calls;
    } else if (g->req.stream) {
        emit_delta(g, i, &rs, &out, fin ? finish_str(c) : NULL);
    }
    srv_buf_free(&safe);
    srv_buf_free(&rs);
    srv_buf_free(&cs);
    srv_buf_free(&out);
    return stopped;
}

/* -------------------------------------------------------------------- pump */

static void observe(struct srv_gen *g, struct srv_hist *h, double v)
{
    pthread_mutex_lock(g->mc->metrics_lock);
    srv_hist_observe(h, v);
    pthread_mutex_unlock(g->mc->metrics_lock);
}

/* A chat completion's text for the token: the engine's, or, for a special
 * token the pipeline parses (a reasoning or tool-call marker, which
 * detokenizing drops), the token's own string. */
static const char *token_text(const struct srv_gen *g, const struct tern_event *ev, size_t *len)
{
    *len = ev->text_len;
    if (ev->text_len || g->req.kind != SRV_CHAT) return ev->text;
    for (int i = 0; i < g->mc->n_markers; i++)
        if (g->mc->marker_ids[i] == ev->token) {
            const char *t = tern_tokenizer_token(g->mc->tok, ev->token);
            *len = t ? strlen(t) : 0;
            return t;
        }
    return ev->text;
}

static void on_token(struct srv_gen *g, const struct tern_event *ev)
{
    if (ev->index < 0 || ev->index >= g->n) return;
    struct srv_choice *c = &g->ch[ev->index];
    if (c->done) return;
    int64_t t = now_ns();
    if (c->last_ns) observe(g, &g->mc->metrics->itl, (double)(t - c->last_ns) * 1e-9);
    c->last_ns = t;
    c->n_tokens++;
    if (c->logprobs) json_array_append_new(c->logprobs, logprob_entry(g->mc, ev, g->req.top_logprobs));
    size_t len;
    const char *text = token_text(g, ev, &len);
    bool in_reasoning = c->reason.state == 1;
    bool stopped = feed(g, ev->index, text, len, false);
    if (in_reasoning || c->reason.state == 1) c->n_reasoning_tokens++;
    if (stopped) {
        bool all = true;
        for (int i = 0; i < g->n; i++) all = all && g->ch[i].done;
        if (all) tern_stream_cancel(g->stream); /* stop strings ended every completion */
    }
}

static void on_done(struct srv_gen *g, const struct tern_event *ev)
{
    if (ev->prompt_tokens > 0) g->prompt_tokens = ev->prompt_tokens;
    if (ev->cached_tokens > g->cached_tokens) g->cached_tokens = ev->cached_tokens;
    if (!g->timing_seen && ev->ttft_ns > 0) {
        g->timing_seen = true;
        observe(g, &g->mc->metrics->ttft, (double)ev->ttft_ns * 1e-9);
        observe(g, &g->mc->metrics->queue, (double)ev->queue_ns * 1e-9);
    }
    if (ev->index < 0 || ev->index >= g->n || g->ch[ev->index].done) return;
    struct srv_choice *c = &g->ch[ev->index];
    if (ev->status != TERN_OK || ev->finish == TERN_FINISH_ERROR || ev->finish == TERN_FINISH_CANCELLED) {
        if (g->status == TERN_OK) {
            g->status = ev->status != TERN_OK ? ev->status : TERN_E_CANCELLED;
            snprintf(g->error, sizeof g->error, "%s",
                     ev->error && *ev->error ? ev->error : tern_status_str(g->status));
        }
    }
    c->finish = ev->finish == TERN_FINISH_LENGTH ? TERN_FINISH_LENGTH : TERN_FINISH_STOP;
    if (c->n_tokens < ev->completion_tokens && !c->stop.stopped) c->n_tokens = ev->completion_tokens;
    feed(g, ev->index, NULL, 0, true);
}

int64_t srv_gen_output_tokens(const struct srv_gen *g)
{
    int64_t comp = 0;
    for (int i = 0; i < g->n; i++) comp += g->ch[i].n_tokens;
    return comp;
}

static json_t *usage_json(const struct srv_gen *g)
{
    int64_t comp = srv_gen_output_tokens(g);
    return json_pack("{s:i, s:I, s:I, s:{s:i}}", "prompt_tokens", g->prompt_tokens,
                     "completion_tokens", (json_int_t)comp, "total_tokens",
                     (json_int_t)(comp + g->prompt_tokens), "prompt_tokens_details",
                     "cached_tokens", g->cached_tokens);
}

static void on_final(struct srv_gen *g)
{
    observe(g, &g->mc->metrics->e2e, (double)(now_ns() - g->submit_ns) * 1e-9);
    for (int i = 0; i < g->n; i++)
        if (!g->ch[i].done) feed(g, i, NULL, 0, true);
    pthread_mutex_lock(g->mc->metrics_lock);
    srv_metrics_tokens(g->mc->metrics, srv_api_route(g->req.api), g->prompt_tokens,
                       srv_gen_output_tokens(g));
    pthread_mutex_unlock(g->mc->metrics_lock);
    if (g->req.api == SRV_API_MESSAGES) {
        srv_msg_final(g);
        return;
    }
    if (g->req.api == SRV_API_RESPONSES) {
        srv_resp_final(g);
        return;
    }
    if (!g->req.stream) return;
    if (g->status != TERN_OK) {
        struct srv_err e;
        srv_err_set(&e, 500, NULL, "generation failed: %s", g->error);
        char *s = srv_err_json(&e);
        if (s) srv_buf_printf(&g->sse, "data: %s\n\n", s);
        free(s);
    } else if (g->usage) {
        json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", g->id, "object",
                              g->req.kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion",
                              "created", (json_int_t)g->created, "model", g->mc->model_name,
                              "choices", "usage", usage_json(g));
        char *s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (s) srv_buf_printf(&g->sse, "data: %s\n\n", s);
        free(s);
    }
    srv_buf_adds(&g->sse, "data: [DONE]\n\n");
}

bool srv_gen_pump(struct srv_gen *g, int timeout_ms)
{
    if (g->final_seen) return true;
    struct tern_event ev;
    enum tern_status st = tern_stream_next(g->stream, timeout_ms, &ev);
    if (st == TERN_E_NOT_FOUND) return false;
    if (st != TERN_OK) {
        /* the final event was read already (should not happen) or a failure */
        if (g->status == TERN_OK) {
            g->status = st;
            snprintf(g->error, sizeof g->error, "%s", tern_last_error());
        }
        g->final_seen = true;
        on_final(g);
        return true;
    }
    if (ev.type == TERN_EVENT_TOKEN) {
        on_token(g, &ev);
        return false;
    }
    on_done(g, &ev);
    if (!ev.final) return false;
    g->final_seen = true;
    on_final(g);
    return true;
}

/* ------------------------------------------------------------------ result */

static json_t *chat_choice(const struct srv_gen *g, int i)
{
    const struct srv_choice *c = &g->ch[i];
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    if (c->content.len || c->n_calls == 0)
        json_object_set_new(msg, "content", jstr(c->content.p, c->content.len));
    else
        json_object_set_new(msg, "content", json_null());
    if (c->reasoning.len)
        json_object_set_new(msg, "reasoning_content", jstr(c->reasoning.p, c->reasoning.len));
    if (c->n_calls) json_object_set_new(msg, "tool_calls", calls_json(c, 0, false));
    json_t *lp = c->logprobs ? json_pack("{s:O}", "content", c->logprobs) : json_null();
    return json_pack("{s:i, s:o, s:o, s:s}", "index", i, "message", msg, "logprobs", lp,
                     "finish_reason", finish_str(c));
}

char *srv_gen_result(struct srv_gen *g, int *http)
{
    if (g->status != TERN_OK) {
        struct srv_err e;
        srv_err_set(&e, g->status == TERN_E_CANCELLED ? 503 : 500, NULL, "generation failed: %s",
                    g->error[0] ? g->error : tern_status_str(g->status));
        *http = e.http;
        return srv_err_body(&e, g->req.api);
    }
    if (g->req.api == SRV_API_MESSAGES || g->req.api == SRV_API_RESPONSES) {
        json_t *o = g->req.api == SRV_API_MESSAGES ? srv_msg_result(g) : srv_resp_result(g);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        *http = s ? 200 : 500;
        return s;
    }
    bool chat = g->req.kind == SRV_CHAT;
    json_t *choices = json_array();
    for (int i = 0; i < g->n; i++) {
        const struct srv_choice *c = &g->ch[i];
        if (chat) {
            json_array_append_new(choices, chat_choice(g, i));
        } else {
            json_t *lp = c->logprobs ? legacy_logprobs(c->logprobs) : json_null();
            json_array_append_new(choices, json_pack("{s:i, s:o, s:o, s:s}", "index", i, "text",
                                                     jstr(c->content.p, c->content.len), "logprobs",
                                                     lp, "finish_reason", finish_str(c)));
        }
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", g->id, "object",
                          chat ? "chat.completion" : "text_completion", "created",
                          (json_int_t)g->created, "model", g->mc->model_name, "choices", choices,
                          "usage", usage_json(g));
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    *http = s ? 200 : 500;
    return s;
}
