/*
 * text_pipe.c — the pure text stages of a completion: a growable buffer, the
 * stop-string matcher and the reasoning splitter (<think>...</think> and
 * Gemma 4's <|channel>thought...<channel|>). Each stage takes text in
 * arbitrary pieces (a token's worth, a character, a whole output) and emits
 * the same concatenated result however the input was split, which is what
 * makes streamed and non-streamed responses agree. Depends on libc only.
 */
#include "server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ buffer */

bool srv_buf_add(struct srv_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

bool srv_buf_adds(struct srv_buf *b, const char *s) { return srv_buf_add(b, s, strlen(s)); }

bool srv_buf_printf(struct srv_buf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n < sizeof small) return srv_buf_add(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return false;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = srv_buf_add(b, big, (size_t)n);
    free(big);
    return ok;
}

void srv_buf_consume(struct srv_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->p, b->p + n, b->len - n);
        b->len -= n;
    }
    if (b->p) b->p[b->len] = '\0';
}

void srv_buf_free(struct srv_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

size_t srv_partial_suffix(const char *s, size_t n, const char *tag)
{
    size_t tl = strlen(tag);
    size_t max = n < tl - 1 ? n : tl - 1;
    for (size_t k = max; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

static const char *find_mem(const char *h, size_t hn, const char *needle)
{
    size_t nn = strlen(needle);
    if (nn == 0 || hn < nn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == needle[0] && !memcmp(h + i, needle, nn)) return h + i;
    return NULL;
}

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* ------------------------------------------------------------ stop strings */

bool srv_stop_init(struct srv_stop *s, char *const *stops, int n_stops)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < n_stops && i < SRV_MAX_STOP; i++) {
        if (!stops[i] || !stops[i][0]) continue; /* an empty stop never matches */
        s->stops[s->n_stops] = strdup(stops[i]);
        if (!s->stops[s->n_stops]) return false;
        s->n_stops++;
    }
    return true;
}

/* The earliest-starting full match of any stop string in s[0..n), or NULL;
 * *which is the index of the stop string that matched there. */
static const char *stop_first(const struct srv_stop *s, const char *p, size_t n, int *which)
{
    const char *first = NULL;
    for (int i = 0; i < s->n_stops; i++) {
        const char *m = find_mem(p, n, s->stops[i]);
        if (m && (!first || m < first)) {
            first = m;
            *which = i;
        }
    }
    return first;
}

static void stop_at(struct srv_stop *s, const char *first, int which, struct srv_buf *out)
{
    srv_buf_add(out, s->pending.p, (size_t)(first - s->pending.p));
    srv_buf_consume(&s->pending, s->pending.len);
    s->stopped = true;
    s->matched = s->stops[which];
}

/* The output ends at the earliest-starting stop string of the whole text. A
 * full match is acted on only once no earlier-starting stop string could
 * still complete, so the result does not depend on how text was split. */
bool srv_stop_push(struct srv_stop *s, const char *text, size_t len, struct srv_buf *out)
{
    if (s->stopped) return true;
    if (s->n_stops == 0) {
        srv_buf_add(out, text, len);
        return false;
    }
    srv_buf_add(&s->pending, text, len);
    const char *p = s->pending.p;
    size_t n = s->pending.len;
    int which = 0;
    const char *first = stop_first(s, p, n, &which);
    /* the longest tail that could still begin a stop string */
    size_t keep = 0;
    for (int i = 0; i < s->n_stops; i++) {
        size_t k = srv_partial_suffix(p, n, s->stops[i]);
        if (k > keep) keep = k;
    }
    if (first && (keep == 0 || p + n - keep >= first)) {
        stop_at(s, first, which, out);
        return true;
    }
    srv_buf_add(out, p, n - keep);
    srv_buf_consume(&s->pending, n - keep);
    return false;
}

bool srv_stop_flush(struct srv_stop *s, struct srv_buf *out)
{
    if (s->stopped) return true;
    int which = 0;
    const char *first = s->pending.len ? stop_first(s, s->pending.p, s->pending.len, &which) : NULL;
    if (first) {
        stop_at(s, first, which, out);
        return true;
    }
    srv_buf_add(out, s->pending.p ? s->pending.p : "", s->pending.len);
    srv_buf_consume(&s->pending, s->pending.len);
    return false;
}

void srv_stop_deinit(struct srv_stop *s)
{
    for (int i = 0; i < s->n_stops; i++) free(s->stops[i]);
    srv_buf_free(&s->pending);
    s->n_stops = 0;
    s->matched = NULL;
}

/* --------------------------------------------------------------- reasoning */

/* The reasoning blocks recognised, as (opening, closing) tags. Gemma 4 names
 * its channel after the opening token: `<|channel>thought\n...<channel|>`. */
static const char *const OPEN_TAG[] = {
    [SRV_RF_THINK] = "<think>", [SRV_RF_GEMMA4] = "<|channel>thought"};
static const char *const CLOSE_TAG[] = {
    [SRV_RF_THINK] = "</think>", [SRV_RF_GEMMA4] = "<channel|>"};

enum { R_START, R_REASON, R_CONTENT };

enum srv_reason_fmt srv_reason_open_at_end(const char *text, size_t len)
{
    while (len > 0 && is_space(text[len - 1])) len--;
    for (int f = SRV_RF_THINK; f <= SRV_RF_GEMMA4; f++) {
        size_t tl = strlen(OPEN_TAG[f]);
        if (len >= tl && !memcmp(text + len - tl, OPEN_TAG[f], tl)) return (enum srv_reason_fmt)f;
    }
    return SRV_RF_NONE;
}

void srv_reason_init(struct srv_reason *r, bool enabled, enum srv_reason_fmt start_inside)
{
    memset(r, 0, sizeof *r);
    r->enabled = enabled;
    bool inside = enabled && (start_inside == SRV_RF_THINK || start_inside == SRV_RF_GEMMA4);
    r->state = !enabled ? R_CONTENT : inside ? R_REASON : R_START;
    r->close = inside ? CLOSE_TAG[start_inside] : NULL;
}

/* Emits reasoning text seg[0..n), dropping leading whitespace until the first
 * non-space character of the reasoning. */
static void emit_reasoning(struct srv_reason *r, const char *seg, size_t n, struct srv_buf *out)
{
    size_t i = 0;
    if (!r->reasoning_begun) {
        while (i < n && is_space(seg[i])) i++;
        if (i < n) r->reasoning_begun = true;
    }
    srv_buf_add(out, seg + i, n - i);
}

static void emit_content(struct srv_reason *r, const char *s, size_t n, struct srv_buf *out)
{
    size_t i = 0;
    if (r->after_close) {
        while (i < n && is_space(s[i])) i++;
        if (i < n) r->after_close = false;
    }
    srv_buf_add(out, s + i, n - i);
}

/* Runs the reasoning state over what is in r->hold. */
static void reason_step(struct srv_reason *r, struct srv_buf *reasoning, struct srv_buf *content)
{
    if (r->state == R_START) {
        size_t k = 0;
        while (k < r->hold.len && is_space(r->hold.p[k])) k++;
        size_t rest = r->hold.len - k;
        bool undecided = false;
        for (int f = SRV_RF_THINK; f <= SRV_RF_GEMMA4 && r->state == R_START; f++) {
            size_t tl = strlen(OPEN_TAG[f]);
            if (rest < tl && !memcmp(r->hold.p + k, OPEN_TAG[f], rest)) undecided = true;
            if (rest >= tl && !memcmp(r->hold.p + k, OPEN_TAG[f], tl)) {
                srv_buf_consume(&r->hold, k + tl);
                r->state = R_REASON;
                r->close = CLOSE_TAG[f];
            }
        }
        if (r->state == R_START) {
            if (undecided) return;
            r->state = R_CONTENT;
        }
    }
    if (r->state == R_REASON) {
        const char *m = find_mem(r->hold.p, r->hold.len, r->close);
        if (m) {
            size_t seg = (size_t)(m - r->hold.p);
            size_t end = seg;
            while (end > 0 && is_space(r->hold.p[end - 1])) end--;
            emit_reasoning(r, r->hold.p, end, reasoning);
            srv_buf_consume(&r->hold, seg + strlen(r->close));
            r->state = R_CONTENT;
            r->after_close = true;
        } else {
            size_t keep = srv_partial_suffix(r->hold.p, r->hold.len, r->close);
            size_t end = r->hold.len - keep;
            while (end > 0 && is_space(r->hold.p[end - 1])) end--; /* may precede the close */
            emit_reasoning(r, r->hold.p, end, reasoning);
            srv_buf_consume(&r->hold, end);
            return;
        }
    }
    if (r->state == R_CONTENT && r->hold.len) {
        emit_content(r, r->hold.p, r->hold.len, content);
        srv_buf_consume(&r->hold, r->hold.len);
    }
}

void srv_reason_push(struct srv_reason *r, const char *text, size_t len, struct srv_buf *reasoning,
                     struct srv_buf *content)
{
    if (r->state == R_CONTENT && r->hold.len == 0) {
        emit_content(r, text, len, content);
        return;
    }
    srv_buf_add(&r->hold, text, len);
    reason_step(r, reasoning, content);
}

void srv_reason_flush(struct srv_reason *r, struct srv_buf *reasoning, struct srv_buf *content)
{
    if (r->state == R_REASON) {
        size_t end = r->hold.len;
        while (end > 0 && is_space(r->hold.p[end - 1])) end--;
        emit_reasoning(r, r->hold.p ? r->hold.p : "", end, reasoning);
    } else if (r->hold.len) {
        emit_content(r, r->hold.p, r->hold.len, content);
    }
    srv_buf_consume(&r->hold, r->hold.len);
}

void srv_reason_deinit(struct srv_reason *r) { srv_buf_free(&r->hold); }
