/*
 * tok_decode.c — ids back to text: the decoder chain of HF `tokenizers`
 * (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace; no decoder joins
 * tokens with spaces), tern_detokenize, and the streaming detokenizer.
 *
 * Decoders work on a list of token strings. A window of ids that does not
 * start the sequence is decoded with `at_start` false, which turns off the
 * rules HF applies only to the first token (Metaspace drops the replacement
 * char in token 0; Strip after Fuse strips the start of the whole text).
 *
 * The stream keeps the ids it has seen and, on each push, decodes the window
 * from `prefix` (the last point where all text was complete and handed out)
 * to the new id, and hands out the bytes past those already sent, holding
 * back an incomplete UTF-8 character at the end. Inside a run of
 * byte-fallback tokens it waits without decoding (a later invalid byte turns
 * the whole run into U+FFFD in HF). So the pieces concatenate to the
 * whole-sequence decode. Limitation: a Strip decoder with stop > 0 after
 * Fuse strips the end of the whole text, which a stream cannot know; none of
 * the supported published tokenizers use it.
 * Depends on tok_internal.h.
 */
#include "text/tok_internal.h"

#include <string.h>

struct dspan {
    size_t off, len;
};

struct dlist {
    struct tern_str buf;
    struct dspan *v;
    size_t n, cap;
};

static enum tern_status dl_push(struct dlist *l, const char *s, size_t len)
{
    TERN_TRY(tern_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v));
    l->v[l->n++] = (struct dspan){l->buf.len, len};
    return tern_str_append(&l->buf, s, len);
}

/* Opens a new token at the end of buf; the caller appends its bytes. */
static enum tern_status dl_open(struct dlist *l)
{
    TERN_TRY(tern_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v));
    l->v[l->n++] = (struct dspan){l->buf.len, 0};
    return TERN_OK;
}

static void dl_close(struct dlist *l) { l->v[l->n - 1].len = l->buf.len - l->v[l->n - 1].off; }

static void dl_clear(struct dlist *l)
{
    tern_str_clear(&l->buf);
    l->n = 0;
}

static const char *tok_str(const struct tern_tokenizer *tok, int32_t id, size_t *len)
{
    const char *s = tok_vocab_str(&tok->vocab, id, len);
    if (!s) {
        *len = 0;
        return "";
    }
    return s;
}

/* ------------------------------------------------------------ decoders */

/* Replaces invalid UTF-8 with U+FFFD, leaving an incomplete tail raw when
 * keep_tail (the stream needs to see it). */
static enum tern_status lossy(struct tern_str *s, bool keep_tail)
{
    size_t tail = keep_tail ? tok_utf8_incomplete_tail(s->data ? s->data : "", s->len) : 0;
    struct tern_str o = {0};
    TERN_TRY(tok_utf8_sanitize(s->data ? s->data : "", s->len - tail, &o));
    enum tern_status st = tern_str_append(&o, s->data + (s->len - tail), tail);
    if (st) {
        tern_str_deinit(&o);
        return st;
    }
    tern_str_deinit(s);
    *s = o;
    return TERN_OK;
}

static enum tern_status dec_bytelevel(const struct tern_tokenizer *tok, const struct dlist *in,
                                      struct dlist *out, bool keep_tail)
{
    TERN_TRY(dl_open(out));
    for (size_t i = 0; i < in->n; i++) {
        const unsigned char *s = (const unsigned char *)in->buf.data + in->v[i].off;
        size_t len = in->v[i].len, j = 0, mark = out->buf.len;
        while (j < len) {
            int l = tok_utf8_len(s + j, len - j);
            int32_t cp = l ? tok_utf8_decode(s + j, l) : -1;
            if (cp < 0 || cp >= 324 || tok->char_byte[cp] < 0) break;
            TERN_TRY(tern_str_appendc(&out->buf, (char)tok->char_byte[cp]));
            j += (size_t)l;
        }
        if (j < len) { /* a char outside the byte map: the token's own bytes */
            out->buf.len = mark;
            TERN_TRY(tern_str_append(&out->buf, (const char *)s, len));
        }
    }
    TERN_TRY(lossy(&out->buf, keep_tail));
    dl_close(out);
    return TERN_OK;
}

static int byte_token(const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEFabcdef";
    if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    const char *a = memchr(hex, s[3], 22), *b = memchr(hex, s[4], 22);
    if (!a || !b || !s[3] || !s[4]) return -1;
    int hi = (int)(a - hex), lo = (int)(b - hex);
    return ((hi >= 16 ? hi - 6 : hi) << 4) | (lo >= 16 ? lo - 6 : lo);
}

static enum tern_status flush_bytes(struct dlist *out, const unsigned char *bytes, size_t n)
{
    if (n == 0) return TERN_OK;
    size_t i = 0;
    while (i < n) {
        int l = tok_utf8_len(bytes + i, n - i);
        if (!l) break;
        i += (size_t)l;
    }
    if (i == n) return dl_push(out, (const char *)bytes, n);
    for (size_t k = 0; k < n; k++) TERN_TRY(dl_push(out, "\xEF\xBF\xBD", 3));
    return TERN_OK;
}

static enum tern_status dec_bytefallback(const struct dlist *in, struct dlist *out)
{
    unsigned char *bytes = tern_malloc(in->n + 1);
    if (!bytes) return TERN_E_NO_MEMORY;
    size_t nb = 0;
    enum tern_status st = TERN_OK;
    for (size_t i = 0; i < in->n && !st; i++) {
        const char *s = in->buf.data + in->v[i].off;
        int b = byte_token(s, in->v[i].len);
        if (b >= 0) {
            bytes[nb++] = (unsigned char)b;
            continue;
        }
        st = flush_bytes(out, bytes, nb);
        nb = 0;
        if (!st) st = dl_push(out, in->buf.data + in->v[i].off, in->v[i].len);
    }
    if (!st) st = flush_bytes(out, bytes, nb);
    tern_free(bytes);
    return st;
}

static enum tern_status dec_metaspace(const struct tok_dec *d, const struct dlist *in,
                                      struct dlist *out, bool at_start)
{
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->buf.data + in->v[i].off;
        size_t len = in->v[i].len, j = 0;
        bool drop = i == 0 && at_start && !d->prepend_never;
        TERN_TRY(dl_open(out));
        while (j < len) {
            if (len - j >= d->repl_len && !memcmp(s + j, d->repl, d->repl_len)) {
                if (!drop) TERN_TRY(tern_str_appendc(&out->buf, ' '));
                j += d->repl_len;
            } else {
                TERN_TRY(tern_str_appendc(&out->buf, s[j]));
                j++;
            }
        }
        dl_close(out);
    }
    return TERN_OK;
}

static enum tern_status dec_strip(const struct tok_dec *d, const struct dlist *in,
                                  struct dlist *out, bool strip_start)
{
    size_t cl = d->content_len;
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->buf.data + in->v[i].off;
        size_t a = 0, b = in->v[i].len;
        for (int k = 0; strip_start && k < d->start && cl && b - a >= cl && !memcmp(s + a, d->content, cl); k++)
            a += cl;
        for (int k = 0; k < d->stop && cl && b - a >= cl && !memcmp(s + b - cl, d->content, cl); k++)
            b -= cl;
        TERN_TRY(dl_push(out, s + a, b - a));
    }
    return TERN_OK;
}

static enum tern_status apply_decoder(const struct tern_tokenizer *tok, const struct tok_dec *d,
                                      struct tok_rx *rx, const struct dlist *in, struct dlist *out,
                                      bool at_start, bool *fused, bool keep_tail)
{
    switch (d->type) {
    case TOK_DEC_BYTELEVEL: *fused = true; return dec_bytelevel(tok, in, out, keep_tail);
    case TOK_DEC_METASPACE: return dec_metaspace(d, in, out, at_start);
    case TOK_DEC_BYTEFALLBACK: return dec_bytefallback(in, out);
    case TOK_DEC_FUSE:
        *fused = true;
        return in->n ? dl_push(out, in->buf.data, in->buf.len) : TERN_OK;
    case TOK_DEC_STRIP: return dec_strip(d, in, out, !*fused || at_start);
    case TOK_DEC_REPLACE:
        for (size_t i = 0; i < in->n; i++) {
            TERN_TRY(dl_open(out));
            TERN_TRY(tok_norm_apply(&(struct tok_norm){.type = TOK_NORM_REPLACE, .content = d->content,
                                                       .content_len = d->content_len, .pat = d->pat},
                                    rx, in->buf.data + in->v[i].off, in->v[i].len, &out->buf));
            dl_close(out);
        }
        return TERN_OK;
    }
    return tern_error(TERN_E_INTERNAL, "decoder: unknown type");
}

/* ------------------------------------------------------------ windows */

static enum tern_status check_ids(const struct tern_tokenizer *tok, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->vocab.n)
            return tern_error(TERN_E_INVALID_ARG, "token id %d out of range (vocab size %d)",
                              ids[i], tok->vocab.n);
    return TERN_OK;
}

/* An id inside the vocab's range that names no token (a gap in the ids,
 * which a post-processor's special_tokens may still emit): it decodes to
 * nothing, as in the tokenizers library. */
static bool id_is_gap(const struct tern_tokenizer *tok, int32_t id)
{
    return tok->vocab.off[id] == UINT32_MAX;
}

/* Decodes ids (already filtered for skip_special) into *out (replaced). */
static enum tern_status decode_window(const struct tern_tokenizer *tok, const int32_t *ids,
                                      size_t n, bool at_start, bool keep_tail, struct tern_str *out)
{
    struct dlist a = {0}, b = {0};
    struct tok_rx rx;
    enum tern_status st = tok_rx_init(&rx);
    bool fused = false;
    tern_str_clear(out);
    for (size_t i = 0; i < n && !st; i++) {
        size_t len;
        const char *s = tok_str(tok, ids[i], &len);
        if (!tok->has_decoder) {
            if ((i > 0 || !at_start) && (st = tern_str_appendc(out, ' '))) break;
            st = tern_str_append(out, s, len);
        } else {
            st = dl_push(&a, s, len);
        }
    }
    for (int k = 0; tok->has_decoder && k < tok->n_decs && !st; k++) {
        dl_clear(&b);
        st = apply_decoder(tok, &tok->decs[k], &rx, &a, &b, at_start, &fused, keep_tail);
        struct dlist t = a;
        a = b;
        b = t;
    }
    if (!st && tok->has_decoder) st = tern_str_append(out, a.buf.data ? a.buf.data : "", a.buf.len);
    if (!st && !out->data) st = tern_str_reserve(out, 1);
    if (!st && tok->has_decoder && !tok->dec_bytelevel_only) st = lossy(out, keep_tail);
    tern_str_deinit(&a.buf);
    tern_str_deinit(&b.buf);
    tern_free(a.v);
    tern_free(b.v);
    tok_rx_deinit(&rx);
    return st;
}

enum tern_status tern_detokenize(const struct tern_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                 bool skip_special, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    if (!tok || (!ids && n_ids)) return tern_error(TERN_E_INVALID_ARG, "detokenize: no tokenizer or ids");
    TERN_TRY(check_ids(tok, ids, n_ids));
    int32_t *kept = tern_malloc((n_ids + 1) * sizeof *kept);
    if (!kept) return TERN_E_NO_MEMORY;
    size_t n = 0;
    for (size_t i = 0; i < n_ids; i++)
        if (!id_is_gap(tok, ids[i]) && (!skip_special || !tern_tokenizer_is_special(tok, ids[i])))
            kept[n++] = ids[i];
    struct tern_str out = {0};
    enum tern_status st = decode_window(tok, kept, n, true, false, &out);
    tern_free(kept);
    if (st) {
        tern_str_deinit(&out);
        return st;
    }
    *len = out.len;
    *text = tern_str_take(&out);
    return TERN_OK;
}

/* ------------------------------------------------------------ stream */

struct tern_detok_stream {
    const struct tern_tokenizer *tok;
    bool skip_special, has_bytefallback;
    int32_t *ids;
    size_t n, cap;
    size_t prefix; /* the window starts here: all text before it is out */
    size_t sent;   /* bytes of the window's text already handed out */
    struct tern_str cur, piece;
};

enum tern_status tern_detok_stream_create(const struct tern_tokenizer *tok, bool skip_special,
                                          struct tern_detok_stream **out)
{
    *out = NULL;
    if (!tok) return tern_error(TERN_E_INVALID_ARG, "detok stream: no tokenizer");
    struct tern_detok_stream *s = tern_calloc(1, sizeof *s);
    if (!s) return TERN_E_NO_MEMORY;
    s->tok = tok;
    s->skip_special = skip_special;
    for (int k = 0; k < tok->n_decs; k++)
        if (tok->decs[k].type == TOK_DEC_BYTEFALLBACK) s->has_bytefallback = true;
    *out = s;
    return TERN_OK;
}

void tern_detok_stream_destroy(struct tern_detok_stream *s)
{
    if (!s) return;
    tern_free(s->ids);
    tern_str_deinit(&s->cur);
    tern_str_deinit(&s->piece);
    tern_free(s);
}

/* Decodes the window [prefix, n) and hands out what is new and complete. */
static enum tern_status stream_emit(struct tern_detok_stream *s, bool final, const char **piece,
                                    size_t *piece_len)
{
    const struct tern_tokenizer *tok = s->tok;
    *piece = "";
    *piece_len = 0;
    if (s->prefix == s->n) return TERN_OK;
    if (!final && s->has_bytefallback) { /* inside a run of <0xXX> tokens: wait */
        size_t len;
        const char *last = tok_str(tok, s->ids[s->n - 1], &len);
        if (byte_token(last, len) >= 0) return TERN_OK;
    }
    TERN_TRY(decode_window(tok, s->ids + s->prefix, s->n - s->prefix, s->prefix == 0, !final,
                           &s->cur));
    size_t tail = final ? 0 : tok_utf8_incomplete_tail(s->cur.data, s->cur.len);
    size_t end = s->cur.len - tail;
    tern_str_clear(&s->piece);
    if (end > s->sent) TERN_TRY(tern_str_append(&s->piece, s->cur.data + s->sent, end - s->sent));
    s->sent = end > s->sent ? end : s->sent;
    if (tail == 0) { /* everything is out: start a fresh window */
        s->prefix = s->n;
        s->sent = 0;
    }
    *piece = s->piece.data ? s->piece.data : "";
    *piece_len = s->piece.len;
    return TERN_OK;
}

enum tern_status tern_detok_stream_push(struct tern_detok_stream *s, int32_t id, const char **piece,
                                        size_t *piece_len)
{
    *piece = "";
    *piece_len = 0;
    TERN_TRY(check_ids(s->tok, &id, 1));
    if (id_is_gap(s->tok, id)) return TERN_OK;
    if (s->skip_special && tern_tokenizer_is_special(s->tok, id)) return TERN_OK;
    TERN_TRY(tern_grow((void **)&s->ids, &s->cap, s->n + 1, sizeof *s->ids));
    s->ids[s->n++] = id;
    return stream_emit(s, false, piece, piece_len);
}

enum tern_status tern_detok_stream_flush(struct tern_detok_stream *s, const char **piece,
                                         size_t *piece_len)
{
    return stream_emit(s, true, piece, piece_len);
}
