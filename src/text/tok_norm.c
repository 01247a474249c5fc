/*
 * tok_norm.c — normalizers (NFC/NFKC/NFD/NFKD through utf8proc, Prepend,
 * Replace, Strip, Lowercase; a Sequence is flattened at load) and the
 * String/Regex patterns shared with the pre-tokenizers and decoders (PCRE2
 * with JIT, UTF + Unicode properties). Inputs are valid UTF-8 (the encoder
 * sanitizes first), so matching skips PCRE2's UTF check.
 * Depends on tok_internal.h, PCRE2, utf8proc.
 */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------ patterns */

enum tern_status tok_pattern_compile(struct tok_pattern *p, const char *what)
{
    int err;
    PCRE2_SIZE at;
    p->re = pcre2_compile((PCRE2_SPTR)p->str, p->len, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
    if (!p->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return tern_error(TERN_E_UNSUPPORTED, "%s: regex '%s' at %zu: %s", what, p->str,
                          (size_t)at, (const char *)msg);
    }
    pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    return TERN_OK;
}

void tok_pattern_deinit(struct tok_pattern *p)
{
    tern_free(p->str);
    if (p->re) pcre2_code_free(p->re);
    memset(p, 0, sizeof *p);
}

enum tern_status tok_rx_init(struct tok_rx *rx)
{
    memset(rx, 0, sizeof *rx);
    return TERN_OK;
}

static bool rx_ready(struct tok_rx *rx)
{
    if (rx->md) return true;
    rx->md = pcre2_match_data_create(1, NULL);
    rx->mc = pcre2_match_context_create(NULL);
    rx->js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!rx->md || !rx->mc) return false;
    if (rx->js) pcre2_jit_stack_assign(rx->mc, NULL, rx->js);
    return true;
}

void tok_rx_deinit(struct tok_rx *rx)
{
    if (rx->md) pcre2_match_data_free(rx->md);
    if (rx->mc) pcre2_match_context_free(rx->mc);
    if (rx->js) pcre2_jit_stack_free(rx->js);
    memset(rx, 0, sizeof *rx);
}

bool tok_pattern_next(const struct tok_pattern *p, struct tok_rx *rx, const char *s, size_t len,
                      size_t from, size_t *ms, size_t *me)
{
    if (from > len) return false;
    if (!p->is_regex) {
        if (p->len == 0 || len - from < p->len) return false;
        const char *hit = memmem(s + from, len - from, p->str, p->len);
        if (!hit) return false;
        *ms = (size_t)(hit - s);
        *me = *ms + p->len;
        return true;
    }
    if (!rx_ready(rx)) return false;
    int rc = pcre2_match(p->re, (PCRE2_SPTR)s, len, from, PCRE2_NO_UTF_CHECK, rx->md, rx->mc);
    if (rc <= 0) return false;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rx->md);
    *ms = ov[0];
    *me = ov[1];
    return true;
}

/* ------------------------------------------------------------ normalizers */

static bool all_ascii(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

static enum tern_status unicode_form(int flags, const char *s, size_t len, struct tern_str *out)
{
    /* ASCII never composes with what follows it, so only runs of non-ASCII
     * (with the one character before them, a possible base) go to utf8proc */
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && (unsigned char)s[j] < 0x80) j++;
        size_t start = (j > i && j < len) ? j - 1 : j;
        TERN_TRY(tern_str_append(out, s + i, start - i));
        if (j >= len) break;
        size_t k = j;
        while (k < len && (unsigned char)s[k] >= 0x80) k++;
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s + start,
                                          (utf8proc_ssize_t)(k - start), &dst, flags);
        if (n < 0) return tern_error(TERN_E_FORMAT, "normalizer: %s", utf8proc_errmsg(n));
        enum tern_status st = tern_str_append(out, (const char *)dst, (size_t)n);
        free(dst);
        TERN_TRY(st);
        i = k;
    }
    return TERN_OK;
}

static enum tern_status replace_all(const struct tok_pattern *p, struct tok_rx *rx,
                                    const char *content, size_t clen, const char *s, size_t len,
                                    struct tern_str *out)
{
    size_t at = 0, ms, me;
    while (at <= len && tok_pattern_next(p, rx, s, len, at, &ms, &me)) {
        TERN_TRY(tern_str_append(out, s + at, ms - at));
        TERN_TRY(tern_str_append(out, content, clen));
        if (me == ms) { /* empty match: keep one character and move on */
            if (ms >= len) {
                at = len;
                break;
            }
            int l = tok_utf8_len((const unsigned char *)s + ms, len - ms);
            me = ms + (size_t)(l ? l : 1);
            TERN_TRY(tern_str_append(out, s + ms, me - ms));
        }
        at = me;
    }
    return at < len ? tern_str_append(out, s + at, len - at) : TERN_OK;
}

static size_t ws_prefix(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        int l = tok_utf8_len((const unsigned char *)s + i, len - i);
        if (!l || !tok_cp_is_whitespace(tok_utf8_decode((const unsigned char *)s + i, l))) break;
        i += (size_t)l;
    }
    return i;
}

static size_t ws_suffix_start(const char *s, size_t len)
{
    size_t end = len;
    while (end > 0) {
        size_t b = end - 1;
        while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
        int l = tok_utf8_len((const unsigned char *)s + b, end - b);
        if (!l || !tok_cp_is_whitespace(tok_utf8_decode((const unsigned char *)s + b, l))) break;
        end = b;
    }
    return end;
}

static enum tern_status lowercase(const char *s, size_t len, struct tern_str *out)
{
    TERN_TRY(tern_str_reserve(out, out->len + len + 8));
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            TERN_TRY(tern_str_appendc(out, (char)(c >= 'A' && c <= 'Z' ? c + 32 : c)));
            i++;
            continue;
        }
        int l = tok_utf8_len((const unsigned char *)s + i, len - i);
        if (!l) l = 1;
        char buf[4];
        int n = tok_utf8_encode(utf8proc_tolower(tok_utf8_decode((const unsigned char *)s + i, l)),
                                buf);
        TERN_TRY(tern_str_append(out, buf, (size_t)n));
        i += (size_t)l;
    }
    return TERN_OK;
}

enum tern_status tok_norm_apply(const struct tok_norm *n, struct tok_rx *rx, const char *s,
                                size_t len, struct tern_str *out)
{
    switch (n->type) {
    case TOK_NORM_NFC:
    case TOK_NORM_NFKC:
    case TOK_NORM_NFD:
    case TOK_NORM_NFKD: {
        if (all_ascii(s, len)) return tern_str_append(out, s, len);
        int f = UTF8PROC_STABLE;
        f |= (n->type == TOK_NORM_NFC || n->type == TOK_NORM_NFKC) ? UTF8PROC_COMPOSE
                                                                    : UTF8PROC_DECOMPOSE;
        if (n->type == TOK_NORM_NFKC || n->type == TOK_NORM_NFKD) f |= UTF8PROC_COMPAT;
        return unicode_form(f, s, len, out);
    }
    case TOK_NORM_PREPEND:
        if (len > 0) TERN_TRY(tern_str_append(out, n->content, n->content_len));
        return tern_str_append(out, s, len);
    case TOK_NORM_REPLACE: return replace_all(&n->pat, rx, n->content, n->content_len, s, len, out);
    case TOK_NORM_STRIP: {
        size_t a = n->left ? ws_prefix(s, len) : 0;
        size_t b = n->right ? ws_suffix_start(s, len) : len;
        return tern_str_append(out, s + a, b > a ? b - a : 0);
    }
    case TOK_NORM_LOWERCASE: return lowercase(s, len, out);
    }
    return tern_error(TERN_E_INTERNAL, "normalizer: unknown type");
}

enum tern_status tok_normalize(const struct tern_tokenizer *tok, struct tok_rx *rx, const char *s,
                               size_t len, struct tern_str *out)
{
    if (tok->n_norms == 0) return tern_str_append(out, s, len);
    if (tok->n_norms == 1) return tok_norm_apply(&tok->norms[0], rx, s, len, out);
    struct tern_str a = {0}, b = {0};
    enum tern_status st = tern_str_append(&a, s, len);
    for (int i = 0; i < tok->n_norms && !st; i++) {
        tern_str_clear(&b);
        st = tok_norm_apply(&tok->norms[i], rx, a.data ? a.data : "", a.len, &b);
        struct tern_str t = a;
        a = b;
        b = t;
    }
    if (!st) st = tern_str_append(out, a.data ? a.data : "", a.len);
    tern_str_deinit(&a);
    tern_str_deinit(&b);
    return st;
}
