/*
 * http.c — the HTTP side of `tern serve` over libmicrohttpd: one thread per
 * connection (HTTP/1.1 keep-alive), body reading with a size limit, API-key
 * check (Authorization: Bearer or x-api-key), routing, errors in each API's
 * shape (Anthropic's on /v1/messages*, OpenAI's elsewhere), the SSE content
 * reader, and the stored Responses (GET / DELETE /v1/responses/{id},
 * previous_response_id).
 *
 * Blocking is done on the connection's own thread: a non-streaming request
 * waits in the access handler, a streaming one in the content reader, both
 * on tern_stream_next with a short timeout. Between waits the socket is
 * polled (MSG_PEEK), so a client that goes away is noticed within ~50 ms in
 * every phase (queued, prefill, decode) and its request is cancelled.
 * Depends on server.h (include/tern.h, jansson), libmicrohttpd, POSIX.
 */
#include "server.h"

#ifdef TERN_HAVE_MHD

#include <microhttpd.h>

#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 50

struct srv_active {
    struct srv_gen *gen;
    struct srv_active *prev, *next;
};

/* Per request (MHD's con_cls). */
struct hreq {
    struct srv *s;
    enum srv_route route;
    struct srv_buf body;
    bool too_large;
    bool inflight; /* counted in s->inflight until the response is sent */
    char rid[160]; /* SRV_R_RESPONSE_ID: the id in the path */
};

/* The API whose error shape a route answers with. */
static enum srv_api api_of(enum srv_route r)
{
    if (r == SRV_R_MESSAGES || r == SRV_R_COUNT_TOKENS) return SRV_API_MESSAGES;
    if (r == SRV_R_RESPONSES || r == SRV_R_RESPONSE_ID) return SRV_API_RESPONSES;
    return SRV_API_CHAT;
}

static bool is_post_route(enum srv_route r)
{
    return r == SRV_R_CHAT || r == SRV_R_COMPLETIONS || r == SRV_R_TOKENIZE ||
           r == SRV_R_DETOKENIZE || r == SRV_R_MESSAGES || r == SRV_R_COUNT_TOKENS ||
           r == SRV_R_RESPONSES || r == SRV_R_EMBEDDINGS;
}

/* A streaming response's state, owned by the MHD response. */
struct sse {
    struct srv *s;
    struct srv_gen *gen;
    struct srv_active node;
    MHD_socket fd;
    bool finished;
    int64_t last_out_ns;
};

void srv_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------- responses */

static void count(struct srv *s, enum srv_route r, int status)
{
    pthread_mutex_lock(&s->metrics_lock);
    srv_metrics_count(&s->metrics, r, status);
    pthread_mutex_unlock(&s->metrics_lock);
}

/* Queues `body` (malloc'd, taken) with `status`; extra header pairs end in NULL. */
static enum MHD_Result respond(struct MHD_Connection *c, struct hreq *h, int status,
                               const char *ctype, char *body, const char *hk, const char *hv)
{
    if (!body) {
        status = 500;
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                      "\"param\":null,\"code\":null}}");
        ctype = "application/json";
        hk = NULL;
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hk) MHD_add_response_header(r, hk, hv);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    count(h->s, h->route, status);
    return ret;
}

static enum MHD_Result respond_json(struct MHD_Connection *c, struct hreq *h, int status, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return respond(c, h, status, "application/json", s, NULL, NULL);
}

static enum MHD_Result respond_err(struct MHD_Connection *c, struct hreq *h, const struct srv_err *e)
{
    const char *hk = NULL, *hv = NULL;
    if (e->http == 401) hk = "WWW-Authenticate", hv = "Bearer";
    if (e->http == 429 || e->http == 503) hk = "Retry-After", hv = "1";
    if (e->http == 405)
        hk = "Allow", hv = is_post_route(h->route)              ? "POST"
                           : h->route == SRV_R_RESPONSE_ID ? "GET, DELETE"
                                                           : "GET";
    return respond(c, h, e->http, "application/json", srv_err_body(e, api_of(h->route)), hk, hv);
}

static enum MHD_Result fail(struct MHD_Connection *c, struct hreq *h, int http, const char *param,
                            const char *msg)
{
    struct srv_err e;
    srv_err_set(&e, http, param, "%s", msg);
    if (http == 413) e.code = "request_too_large";
    if (http == 401) e.code = "invalid_api_key";
    return respond_err(c, h, &e);
}

/* ------------------------------------------------------------------ utils */

/* Constant-time comparison of the presented key with the configured one
 * (time depends only on the configured key's length). */
static bool key_ok(const char *given, const char *want)
{
    size_t lg = strlen(given), lw = strlen(want);
    volatile unsigned char d = (unsigned char)(lg != lw);
    for (size_t i = 0; i < lw; i++) d |= (unsigned char)(want[i] ^ (i < lg ? given[i] : 0));
    return d == 0;
}

static bool authorized(struct srv *s, struct MHD_Connection *c)
{
    if (!s->o.api_key || !s->o.api_key[0]) return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    bool bearer = a && !strncasecmp(a, "Bearer ", 7);
    bool ok = key_ok(bearer ? a + 7 : "", s->o.api_key); /* compare even when malformed */
    bool xok = key_ok(x ? x : "", s->o.api_key);
    return (bearer && ok) || (x && xok);
}

static bool client_gone(MHD_socket fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        char ch;
        ssize_t n = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0;
    }
    return false;
}

static MHD_socket conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : MHD_INVALID_SOCKET;
}

static enum srv_route route_of(const char *url, char *rid, size_t cap)
{
    static const char RESP[] = "/v1/responses/";
    if (!strncmp(url, RESP, sizeof RESP - 1) && url[sizeof RESP - 1] &&
        !strchr(url + sizeof RESP - 1, '/') && strlen(url + sizeof RESP - 1) < cap) {
        snprintf(rid, cap, "%s", url + sizeof RESP - 1);
        return SRV_R_RESPONSE_ID;
    }
    static const struct {
        const char *path;
        enum srv_route r;
    } t[] = {{"/v1/chat/completions", SRV_R_CHAT}, {"/v1/completions", SRV_R_COMPLETIONS},
             {"/v1/models", SRV_R_MODELS},         {"/health", SRV_R_HEALTH},
             {"/metrics", SRV_R_METRICS},          {"/tokenize", SRV_R_TOKENIZE},
             {"/detokenize", SRV_R_DETOKENIZE},    {"/v1/messages", SRV_R_MESSAGES},
             {"/v1/messages/count_tokens", SRV_R_COUNT_TOKENS},
             {"/v1/responses", SRV_R_RESPONSES},   {"/v1/embeddings", SRV_R_EMBEDDINGS}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(url, t[i].path)) return t[i].r;
    return SRV_R_OTHER;
}

static void active_add(struct srv *s, struct srv_active *n)
{
    pthread_mutex_lock(&s->active_lock);
    n->prev = NULL;
    n->next = s->active;
    if (s->active) s->active->prev = n;
    s->active = n;
    if (s->cancelling) srv_gen_cancel(n->gen);
    pthread_mutex_unlock(&s->active_lock);
}

static void active_del(struct srv *s, struct srv_active *n)
{
    pthread_mutex_lock(&s->active_lock);
    if (n->prev) n->prev->next = n->next;
    else if (s->active == n) s->active = n->next;
    if (n->next) n->next->prev = n->prev;
    n->prev = n->next = NULL;
    pthread_mutex_unlock(&s->active_lock);
}

void srv_cancel_all(struct srv *s)
{
    pthread_mutex_lock(&s->active_lock);
    s->cancelling = true;
    for (struct srv_active *n = s->active; n; n = n->next) srv_gen_cancel(n->gen);
    pthread_mutex_unlock(&s->active_lock);
}

static void disconnected(struct srv *s)
{
    pthread_mutex_lock(&s->metrics_lock);
    s->metrics.disconnects++;
    pthread_mutex_unlock(&s->metrics_lock);
}

/* -------------------------------------------------------------- generation */

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct sse *x = cls;
    for (;;) {
        struct srv_buf *b = srv_gen_sse(x->gen);
        if (b->len) {
            size_t n = b->len < max ? b->len : max;
            memcpy(buf, b->p, n);
            srv_buf_consume(b, n);
            x->last_out_ns = now_ns();
            return (ssize_t)n;
        }
        if (x->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (srv_gen_pump(x->gen, WAIT_MS)) {
            x->finished = true;
            continue;
        }
        if (client_gone(x->fd)) return MHD_CONTENT_READER_END_WITH_ERROR; /* sse_free cancels */
        if (now_ns() - x->last_out_ns > (int64_t)x->s->o.keepalive_ms * 1000000)
            srv_buf_adds(b, ": keep-alive\n\n"); /* long prefill or queue wait */
    }
}

static void sse_free(void *cls)
{
    struct sse *x = cls;
    if (!x->finished) { /* MHD gave up on the connection (a failed send) */
        srv_gen_cancel(x->gen);
        disconnected(x->s);
    }
    active_del(x->s, &x->node);
    srv_gen_destroy(x->gen); /* cancels if still running */
    free(x);
}

/* Non-streaming: wait here for the end, watching the socket. */
static enum MHD_Result finish_blocking(struct MHD_Connection *c, struct hreq *h, struct srv_gen *g)
{
    struct srv *s = h->s;
    struct srv_active node = {.gen = g};
    active_add(s, &node);
    MHD_socket fd = conn_fd(c);
    bool gone = false;
    while (!srv_gen_pump(g, WAIT_MS)) {
        if (fd != MHD_INVALID_SOCKET && client_gone(fd)) {
            gone = true;
            srv_gen_cancel(g);
            break;
        }
    }
    active_del(s, &node);
    enum MHD_Result ret;
    if (gone) {
        disconnected(s);
        count(s, h->route, 499);
        ret = MHD_NO; /* closes the connection */
    } else {
        int http = 500;
        char *body = srv_gen_result(g, &http);
        ret = respond(c, h, http, "application/json", body, NULL, NULL);
    }
    srv_gen_destroy(g);
    return ret;
}

static enum MHD_Result start_stream(struct MHD_Connection *c, struct hreq *h, struct srv_gen *g)
{
    struct sse *x = calloc(1, sizeof *x);
    struct MHD_Response *r = NULL;
    if (x) r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, x, sse_free);
    if (!r) {
        free(x);
        srv_gen_destroy(g);
        return fail(c, h, 500, NULL, "out of memory");
    }
    x->s = h->s;
    x->gen = g;
    x->node.gen = g;
    x->fd = conn_fd(c);
    x->last_out_ns = now_ns();
    active_add(h->s, &x->node);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r); /* sse_free runs when MHD is done with it */
    count(h->s, h->route, 200);
    return ret;
}

/* previous_response_id: the stored conversation goes between the
 * instructions and the new input. */
static bool continue_conversation(struct srv *s, struct srv_req *r, struct srv_err *err)
{
    json_t *conv = NULL;
    if (!srv_store_get(s->mc.store, r->previous_id, (int64_t)time(NULL), NULL, &conv)) {
        srv_err_set(err, 404, "previous_response_id",
                    "previous response '%.100s' was not found (never stored, deleted or expired)",
                    r->previous_id);
        return false;
    }
    json_t *msgs = json_array();
    for (int i = 0; i < r->n_head; i++) json_array_append(msgs, json_array_get(r->messages, (size_t)i));
    json_array_extend(msgs, conv);
    for (size_t i = (size_t)r->n_head; i < json_array_size(r->messages); i++)
        json_array_append(msgs, json_array_get(r->messages, i));
    json_decref(conv);
    json_decref(r->messages);
    r->messages = msgs;
    return true;
}

static enum MHD_Result do_generate(struct MHD_Connection *c, struct hreq *h)
{
    struct srv *s = h->s;
    struct srv_parse_opts po = {.vocab_size = s->mc.vocab_size, .max_n = 16};
    struct srv_req req;
    struct srv_err err;
    const char *body = h->body.p ? h->body.p : "";
    bool parsed = h->route == SRV_R_MESSAGES    ? srv_messages_parse(body, h->body.len, false, &req, &err)
                  : h->route == SRV_R_RESPONSES ? srv_responses_parse(body, h->body.len, &req, &err)
                  : srv_req_parse(h->route == SRV_R_CHAT ? SRV_CHAT : SRV_COMPLETION, body,
                                  h->body.len, &po, &req, &err);
    if (!parsed) return respond_err(c, h, &err);
    if (req.previous_id && !continue_conversation(s, &req, &err)) {
        srv_req_free(&req);
        return respond_err(c, h, &err);
    }
    int now = atomic_fetch_add(&s->inflight, 1) + 1;
    /* the state read again: shutdown may have begun after dispatch's check,
     * and its drain may have seen nothing in flight (it stores the state,
     * then reads the count) */
    bool stopping = atomic_load(&s->state) != SRV_READY;
    if (stopping || (s->o.max_concurrent > 0 && now > s->o.max_concurrent)) {
        atomic_fetch_sub(&s->inflight, 1);
        srv_req_free(&req);
        if (stopping) {
            srv_err_set(&err, 503, NULL, "the server is shutting down");
        } else {
            pthread_mutex_lock(&s->metrics_lock);
            s->metrics.rejected_capacity++;
            pthread_mutex_unlock(&s->metrics_lock);
            srv_err_set(&err, 429, NULL, "the server is at its limit of %d concurrent requests; retry later",
                        s->o.max_concurrent);
        }
        return respond_err(c, h, &err);
    }
    h->inflight = true; /* on_completed gives it back once the response is out */
    if (s->o.test_admit_delay_ms > 0) srv_sleep_ms(s->o.test_admit_delay_ms);
    int32_t *ids = NULL, n_ids = 0;
    enum srv_reason_fmt think_open = SRV_RF_NONE;
    char *prefill = NULL;
    if (!srv_prompt_build(&s->mc, &req, &ids, &n_ids, &think_open, &prefill, &err)) {
        srv_req_free(&req);
        return respond_err(c, h, &err);
    }
    struct srv_gen_params gp = {.ids = ids, .n_ids = n_ids, .think_open = think_open,
                                .prefill = prefill, .always_usage = s->o.always_usage};
    if (s->n_script > 0) {
        unsigned k = atomic_fetch_add(&s->script_next, 1) % (unsigned)s->n_script;
        gp.forced = s->script[k];
        gp.n_forced = s->script_n[k];
    }
    struct srv_gen *g = srv_gen_create(&s->mc, &req, &gp, &err);
    free(ids);
    free(prefill);
    srv_req_free(&req); /* no-op unless create failed before taking it */
    if (!g) return respond_err(c, h, &err);
    return srv_gen_streaming(g) ? start_stream(c, h, g) : finish_blocking(c, h, g);
}

/* POST /v1/embeddings: every input submitted at once; waits here for the
 * vectors, watching the socket as a non-streaming generation does. */
static enum MHD_Result do_embeddings(struct MHD_Connection *c, struct hreq *h)
{
    struct srv *s = h->s;
    struct srv_parse_opts po = {.vocab_size = s->mc.vocab_size, .max_n = 1};
    struct srv_embed_req req;
    struct srv_err err;
    if (!srv_embed_parse(h->body.p ? h->body.p : "", h->body.len, &po, &req, &err))
        return respond_err(c, h, &err);
    int now = atomic_fetch_add(&s->inflight, 1) + 1;
    h->inflight = true; /* on_completed gives it back */
    if (atomic_load(&s->state) != SRV_READY ||
        (s->o.max_concurrent > 0 && now > s->o.max_concurrent)) {
        srv_embed_req_free(&req);
        if (atomic_load(&s->state) != SRV_READY)
            srv_err_set(&err, 503, NULL, "the server is shutting down");
        else
            srv_err_set(&err, 429, NULL, "the server is at its limit of %d concurrent requests; "
                        "retry later", s->o.max_concurrent);
        return respond_err(c, h, &err);
    }
    struct srv_embed *x = srv_embed_create(&s->mc, &req, &err);
    if (!x) return respond_err(c, h, &err);
    MHD_socket fd = conn_fd(c);
    while (!srv_embed_pump(x, WAIT_MS)) {
        if (fd != MHD_INVALID_SOCKET && client_gone(fd)) {
            srv_embed_destroy(x); /* cancels what is still running */
            disconnected(s);
            count(s, h->route, 499);
            return MHD_NO;
        }
    }
    int http = 500;
    char *body = srv_embed_result(x, &http);
    srv_embed_destroy(x);
    return respond(c, h, http, "application/json", body, NULL, NULL);
}

/* ---------------------------------------------------------- other routes */

/* Raw text -> ids without special tokens (the /tokenize add_special_tokens=false case). */
static bool tokenize_plain(const struct srv *s, const char *text, int32_t **ids, int32_t *n,
                           struct srv_err *err)
{
    int32_t *t = NULL;
    size_t tn = 0;
    if (!s->mc.tok || tern_tokenize(s->mc.tok, text, strlen(text), false, &t, &tn) != TERN_OK) {
        srv_err_set(err, 400, "prompt", "tokenization failed: %s", tern_last_error());
        return false;
    }
    *ids = malloc((tn ? tn : 1) * sizeof *t);
    if (*ids) memcpy(*ids, t, tn * sizeof *t);
    *n = (int32_t)tn;
    tern_free_buf(t);
    return *ids != NULL;
}

static enum MHD_Result do_tokenize(struct MHD_Connection *c, struct hreq *h)
{
    struct srv *s = h->s;
    struct srv_err err;
    json_t *root = json_loadb(h->body.p ? h->body.p : "", h->body.len, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return fail(c, h, 400, NULL, "the body must be a JSON object {\"prompt\": \"...\"}");
    }
    int32_t *ids = NULL, n = 0;
    enum srv_reason_fmt think;
    bool ok;
    struct srv_req req;
    memset(&req, 0, sizeof req);
    struct srv_parse_opts po = {.vocab_size = s->mc.vocab_size, .max_n = 16};
    if (json_object_get(root, "messages")) {
        ok = srv_req_parse(SRV_CHAT, h->body.p, h->body.len, &po, &req, &err) &&
             srv_prompt_build(&s->mc, &req, &ids, &n, &think, NULL, &err);
    } else {
        json_t *p = json_object_get(root, "prompt");
        if (!json_is_string(p)) {
            srv_err_set(&err, 400, "prompt", "'prompt' must be a string");
            ok = false;
        } else if (json_is_false(json_object_get(root, "add_special_tokens"))) {
            ok = tokenize_plain(s, json_string_value(p), &ids, &n, &err);
        } else {
            req.kind = SRV_COMPLETION;
            req.prompt = strdup(json_string_value(p));
            ok = req.prompt && srv_prompt_build(&s->mc, &req, &ids, &n, &think, NULL, &err);
        }
    }
    json_decref(root);
    srv_req_free(&req);
    if (!ok) {
        free(ids);
        return respond_err(c, h, &err);
    }
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    free(ids);
    return respond_json(c, h, 200, json_pack("{s:o, s:i, s:i}", "tokens", a, "count", n,
                                             "max_model_len", s->mc.context_length));
}

static enum MHD_Result do_detokenize(struct MHD_Connection *c, struct hreq *h)
{
    struct srv *s = h->s;
    json_t *root = json_loadb(h->body.p ? h->body.p : "", h->body.len, 0, NULL);
    json_t *t = json_object_get(root, "tokens");
    if (!json_is_array(t)) {
        json_decref(root);
        return fail(c, h, 400, "tokens", "'tokens' must be an array of token ids");
    }
    size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; ids && i < n; i++) {
        json_t *v = json_array_get(t, i);
        long long id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= s->mc.vocab_size) {
            free(ids);
            json_decref(root);
            return fail(c, h, 400, "tokens", "'tokens' holds a value that is not a token id of this model");
        }
        ids[i] = (int32_t)id;
    }
    json_decref(root);
    char *text = NULL;
    size_t len = 0;
    if (!ids || !s->mc.tok || tern_detokenize(s->mc.tok, ids, n, false, &text, &len) != TERN_OK) {
        free(ids);
        return fail(c, h, 400, "tokens", "these tokens cannot be decoded by this model's tokenizer");
    }
    free(ids);
    json_t *o = json_pack("{s:s%}", "prompt", text, len);
    tern_free_buf(text);
    if (!o) return fail(c, h, 400, "tokens", "these tokens do not decode to valid UTF-8");
    return respond_json(c, h, 200, o);
}

/* POST /v1/messages/count_tokens: the prompt's length as a Messages request. */
static enum MHD_Result do_count_tokens(struct MHD_Connection *c, struct hreq *h)
{
    struct srv *s = h->s;
    struct srv_req req;
    struct srv_err err;
    int32_t *ids = NULL, n = 0;
    enum srv_reason_fmt think;
    if (!srv_messages_parse(h->body.p ? h->body.p : "", h->body.len, true, &req, &err))
        return respond_err(c, h, &err);
    bool ok = srv_prompt_build(&s->mc, &req, &ids, &n, &think, NULL, &err);
    srv_req_free(&req);
    free(ids);
    if (!ok) return respond_err(c, h, &err);
    return respond_json(c, h, 200, json_pack("{s:i}", "input_tokens", n));
}

/* GET / DELETE /v1/responses/{id}. */
static enum MHD_Result do_response_id(struct MHD_Connection *c, struct hreq *h, const char *method)
{
    struct srv *s = h->s;
    json_t *resp = NULL;
    bool found = !strcmp(method, "DELETE")
                     ? srv_store_delete(s->mc.store, h->rid)
                     : srv_store_get(s->mc.store, h->rid, (int64_t)time(NULL), &resp, NULL);
    if (!found) {
        struct srv_err e;
        srv_err_set(&e, 404, NULL, "response '%.100s' was not found (never stored, deleted or expired)",
                    h->rid);
        return respond_err(c, h, &e);
    }
    if (resp) return respond_json(c, h, 200, resp);
    return respond_json(c, h, 200, json_pack("{s:s, s:s, s:b}", "id", h->rid, "object", "response",
                                             "deleted", 1));
}

static enum MHD_Result do_models(struct MHD_Connection *c, struct hreq *h)
{
    struct srv *s = h->s;
    return respond_json(c, h, 200,
                        json_pack("{s:s, s:[{s:s, s:s, s:i, s:s, s:i}]}", "object", "list", "data",
                                  "id", s->mc.model_name, "object", "model", "created", 0,
                                  "owned_by", "tern", "max_model_len", s->mc.context_length));
}

static enum MHD_Result do_metrics(struct MHD_Connection *c, struct hreq *h)
{
    struct srv *s = h->s;
    struct tern_engine_stats es;
    bool have = atomic_load(&s->state) == SRV_READY && s->mc.engine &&
                tern_engine_get_stats(s->mc.engine, &es) == TERN_OK;
    struct srv_buf b = {0};
    count(s, h->route, 200); /* counted before formatting, so it shows itself */
    pthread_mutex_lock(&s->metrics_lock);
    srv_metrics_format(&s->metrics, have ? &es : NULL, atomic_load(&s->inflight), &b);
    pthread_mutex_unlock(&s->metrics_lock);
    struct MHD_Response *r = MHD_create_response_from_buffer(b.len, b.p, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        srv_buf_free(&b);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* ----------------------------------------------------------------- handler */

/* Checks that need only the headers. Returns MHD_YES/NO when it responded,
 * or -1 to go on reading the body. */
static int check_headers(struct MHD_Connection *c, struct hreq *h, const char *method)
{
    struct srv *s = h->s;
    if (h->route == SRV_R_HEALTH) {
        if (strcmp(method, "GET") && strcmp(method, "HEAD")) return fail(c, h, 405, NULL, "use GET");
        int st = atomic_load(&s->state);
        if (st == SRV_READY) return respond_json(c, h, 200, json_pack("{s:s}", "status", "ok"));
        struct srv_err e;
        srv_err_set(&e, 503, NULL, "%s", st == SRV_LOADING ? "the model is loading" : "the server is shutting down");
        return respond_err(c, h, &e);
    }
    if (!authorized(s, c))
        return fail(c, h, 401, NULL, "invalid or missing API key (Authorization: Bearer ... or x-api-key)");
    if (h->route == SRV_R_OTHER) return fail(c, h, 404, NULL, "no such route");
    bool post = !strcmp(method, "POST");
    if (h->route == SRV_R_RESPONSE_ID) {
        if (strcmp(method, "GET") && strcmp(method, "DELETE"))
            return fail(c, h, 405, NULL, "this route takes GET or DELETE");
    } else if (is_post_route(h->route) != post) {
        return fail(c, h, 405, NULL, post ? "this route takes GET" : "this route takes POST");
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->o.max_body_bytes) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", s->o.max_body_bytes);
        return fail(c, h, 413, NULL, msg);
    }
    return -1;
}

static enum MHD_Result dispatch(struct MHD_Connection *c, struct hreq *h, const char *method)
{
    struct srv *s = h->s;
    if (h->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", s->o.max_body_bytes);
        return fail(c, h, 413, NULL, msg);
    }
    if (h->route == SRV_R_METRICS) return do_metrics(c, h);
    int st = atomic_load(&s->state);
    if (st != SRV_READY) {
        struct srv_err e;
        srv_err_set(&e, 503, NULL, "%s", st == SRV_LOADING ? "the model is loading" : "the server is shutting down");
        return respond_err(c, h, &e);
    }
    switch (h->route) {
    case SRV_R_CHAT:
    case SRV_R_COMPLETIONS:
    case SRV_R_MESSAGES:
    case SRV_R_RESPONSES: return do_generate(c, h);
    case SRV_R_COUNT_TOKENS: return do_count_tokens(c, h);
    case SRV_R_RESPONSE_ID: return do_response_id(c, h, method);
    case SRV_R_TOKENIZE: return do_tokenize(c, h);
    case SRV_R_DETOKENIZE: return do_detokenize(c, h);
    case SRV_R_MODELS: return do_models(c, h);
    case SRV_R_EMBEDDINGS: return do_embeddings(c, h);
    default: return fail(c, h, 404, NULL, "no such route");
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct srv *s = cls;
    struct hreq *h = *con_cls;
    if (!h) {
        h = calloc(1, sizeof *h);
        if (!h) return MHD_NO;
        h->s = s;
        h->route = route_of(url, h->rid, sizeof h->rid);
        *con_cls = h;
        int r = check_headers(c, h, method);
        if (r >= 0) {
            h->too_large = true; /* responded: ignore any body */
            return (enum MHD_Result)r;
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!h->too_large && h->body.len + *upload_size <= s->o.max_body_bytes)
            srv_buf_add(&h->body, upload, *upload_size);
        else
            h->too_large = true;
        *upload_size = 0;
        return MHD_YES;
    }
    return dispatch(c, h, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct hreq *h = *con_cls;
    if (!h) return;
    if (h->inflight) atomic_fetch_sub(&h->s->inflight, 1);
    srv_buf_free(&h->body);
    free(h);
    *con_cls = NULL;
}

bool srv_http_start(struct srv *s, int *port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", s->o.port);
    if (getaddrinfo(s->o.host, ps, &hints, &ai) || !ai) {
        fprintf(stderr, "tern serve: cannot resolve host '%s'\n", s->o.host);
        return false;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->mhd = MHD_start_daemon(flags, (uint16_t)s->o.port, NULL, NULL, on_request, s,
                              MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED,
                              on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT, 0u,
                              MHD_OPTION_CONNECTION_LIMIT, 4096u, MHD_OPTION_LISTEN_BACKLOG_SIZE,
                              1024u, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->mhd) {
        fprintf(stderr, "tern serve: cannot listen on %s:%d (in use, or not permitted)\n", s->o.host,
                s->o.port);
        return false;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? di->port : s->o.port;
    return true;
}

void srv_http_quiesce(struct srv *s)
{
    if (!s->mhd) return;
    MHD_socket l = MHD_quiesce_daemon(s->mhd);
    if (l != MHD_INVALID_SOCKET) close(l);
}

void srv_http_stop(struct srv *s)
{
    if (s->mhd) MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
}

#endif /* TERN_HAVE_MHD */
