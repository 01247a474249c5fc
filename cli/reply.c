/*
 * reply.c — one generation through the engine's streaming API, shared by
 * `tern generate` and `tern chat`: submit, read events, hand each token's
 * text to a callback as it arrives, cancel when an interrupt flag is raised
 * (Ctrl-C), and time it for the summary line. Also the chat template
 * context as JSON (the CLI has no JSON library; strings are escaped here).
 * Depends on include/tern.h and libc.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POLL_MS 50

static bool grow_ids(struct cli_reply *r)
{
    if (r->n_ids < r->cap_ids) return true;
    int cap = r->cap_ids ? r->cap_ids * 2 : 64;
    int32_t *p = realloc(r->ids, (size_t)cap * sizeof *p);
    if (!p) return false;
    r->ids = p;
    r->cap_ids = cap;
    return true;
}

enum tern_status cli_reply_run(struct tern_engine *e, const int32_t *ids, int32_t n_ids,
                               const struct tern_sampling_params *sp, bool detokenize,
                               cli_text_fn on_text, void *ctx, volatile sig_atomic_t *interrupt,
                               struct cli_reply *r)
{
    memset(r, 0, sizeof *r);
    struct tern_request req = {0};
    req.ids = ids;
    req.n_ids = n_ids;
    req.sampling = *sp;
    req.detokenize = detokenize;
    struct tern_stream *s = NULL;
    double t0 = cli_now_s();
    enum tern_status st = tern_engine_submit(e, &req, &s);
    if (st != TERN_OK) {
        snprintf(r->error, sizeof r->error, "%s", tern_last_error());
        return st;
    }
    bool cancelled = false;
    for (;;) {
        struct tern_event ev;
        st = tern_stream_next(s, POLL_MS, &ev);
        if (st == TERN_E_NOT_FOUND) {
            if (interrupt && *interrupt && !cancelled) {
                tern_stream_cancel(s);
                cancelled = true;
            }
            continue;
        }
        if (st != TERN_OK) {
            snprintf(r->error, sizeof r->error, "%s", tern_last_error());
            break;
        }
        if (ev.type == TERN_EVENT_TOKEN) {
            if (r->n_ids == 0) r->ttft_s = cli_now_s() - t0;
            if (!grow_ids(r)) {
                tern_stream_cancel(s);
                cancelled = true;
                st = TERN_E_NO_MEMORY;
                continue;
            }
            r->ids[r->n_ids++] = ev.token;
            if (on_text && ev.text_len) on_text(ctx, ev.text, ev.text_len);
            if (interrupt && *interrupt && !cancelled) {
                tern_stream_cancel(s);
                cancelled = true;
            }
            continue;
        }
        if (!ev.final) continue;
        r->prompt_tokens = ev.prompt_tokens;
        r->cached_tokens = ev.cached_tokens;
        r->finish = ev.finish;
        r->interrupted = ev.finish == TERN_FINISH_CANCELLED;
        st = ev.status == TERN_E_CANCELLED && r->interrupted ? TERN_OK : ev.status;
        if (st != TERN_OK)
            snprintf(r->error, sizeof r->error, "%s", ev.error && *ev.error ? ev.error : tern_status_str(st));
        break;
    }
    r->total_s = cli_now_s() - t0;
    if (r->n_ids == 0) r->ttft_s = r->total_s;
    tern_stream_destroy(s);
    return st;
}

void cli_reply_free(struct cli_reply *r)
{
    free(r->ids);
    memset(r, 0, sizeof *r);
}

void cli_reply_summary(const char *cmd, const struct cli_reply *r, enum tern_device dev)
{
    int32_t computed = r->prompt_tokens - r->cached_tokens;
    double pre = r->ttft_s > 0 ? computed / r->ttft_s : 0;
    double dt = r->total_s - r->ttft_s;
    double gen = r->n_ids > 1 && dt > 0 ? (r->n_ids - 1) / dt : r->total_s > 0 ? r->n_ids / r->total_s : 0;
    fprintf(stderr,
            "tern %s: prompt %d tokens (%d cached, %.1f tok/s), generated %d tokens (%.1f tok/s), "
            "device %s%s\n",
            cmd, r->prompt_tokens, r->cached_tokens, pre, r->n_ids, gen, cli_device_name(dev),
            r->interrupted ? ", interrupted" : "");
}

/* Appends s as a JSON string literal. */
static bool put_str(char **buf, size_t *len, size_t *cap, const char *s)
{
    size_t need = *len + strlen(s) * 6 + 3;
    if (need > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < need) c *= 2;
        char *p = realloc(*buf, c);
        if (!p) return false;
        *buf = p;
        *cap = c;
    }
    char *o = *buf + *len;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            *o++ = '\\';
            *o++ = (char)*p;
        } else if (*p < 0x20) {
            o += snprintf(o, 7, "\\u%04x", *p);
        } else {
            *o++ = (char)*p;
        }
    }
    *o++ = '"';
    *o = '\0';
    *len = (size_t)(o - *buf);
    return true;
}

static bool put_raw(char **buf, size_t *len, size_t *cap, const char *s)
{
    size_t n = strlen(s);
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *p = realloc(*buf, c);
        if (!p) return false;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n + 1);
    *len += n;
    return true;
}

char *cli_chat_context(const char *const *roles, const char *const *contents, int n,
                       int enable_thinking)
{
    char *b = NULL;
    size_t len = 0, cap = 0;
    bool ok = put_raw(&b, &len, &cap, "{\"add_generation_prompt\": true, ");
    if (ok && enable_thinking >= 0)
        ok = put_raw(&b, &len, &cap, enable_thinking ? "\"enable_thinking\": true, "
                                                     : "\"enable_thinking\": false, ");
    ok = ok && put_raw(&b, &len, &cap, "\"messages\": [");
    for (int i = 0; ok && i < n; i++) {
        ok = put_raw(&b, &len, &cap, i ? ", {\"role\": " : "{\"role\": ") &&
             put_str(&b, &len, &cap, roles[i]) && put_raw(&b, &len, &cap, ", \"content\": ") &&
             put_str(&b, &len, &cap, contents[i]) && put_raw(&b, &len, &cap, "}");
    }
    ok = ok && put_raw(&b, &len, &cap, "]}");
    if (!ok) {
        free(b);
        return NULL;
    }
    return b;
}

enum tern_status cli_chat_ids(const struct tern_model *m, const char *ctx_json, int32_t **ids,
                              int32_t *n, bool *think_open)
{
    const struct tern_chat_template *t = tern_model_chat_template(m);
    const struct tern_tokenizer *tok = tern_model_tokenizer(m);
    if (!t || !tok) return TERN_E_UNSUPPORTED;
    char *text = NULL;
    size_t len = 0;
    enum tern_status st = tern_chat_template_render(t, ctx_json, &text, &len);
    if (st != TERN_OK) return st;
    if (think_open) {
        size_t e = len;
        while (e > 0 && (text[e - 1] == '\n' || text[e - 1] == ' ')) e--;
        *think_open = e >= 7 && !memcmp(text + e - 7, "<think>", 7);
    }
    int32_t *tids = NULL;
    size_t nt = 0;
    st = tern_tokenize(tok, text, len, false, &tids, &nt); /* the template wrote BOS */
    tern_free_buf(text);
    if (st != TERN_OK) return st;
    *ids = malloc((nt ? nt : 1) * sizeof **ids);
    if (!*ids) {
        tern_free_buf(tids);
        return TERN_E_NO_MEMORY;
    }
    memcpy(*ids, tids, nt * sizeof **ids);
    *n = (int32_t)nt;
    tern_free_buf(tids);
    return TERN_OK;
}
