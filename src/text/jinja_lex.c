/*
 * jinja_lex.c — turns template source into tokens, with jinja2's whitespace
 * rules as transformers configures them: trim_blocks (one newline after a
 * block or comment tag is dropped), lstrip_blocks (spaces and tabs before a
 * block or comment tag at the start of a line are dropped), `-` (strip all
 * whitespace on that side) and `+` (keep it). Raw blocks become data,
 * comments vanish. Newlines are normalised to \n and one trailing newline of
 * the source is dropped (keep_trailing_newline=False). Depends on jinja.h.
 */
#include "text/jinja.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lexer {
    struct jarena *a;
    const char *s; /* normalised source */
    size_t n, pos;
    int line;
    bool line_starting; /* the previous match ended with a newline */
    struct jtok *toks;
    size_t n_toks, cap;
    const char *err;
    int err_line;
};

static int lfail(struct lexer *L, const char *msg)
{
    L->err = msg;
    L->err_line = L->line;
    return -1;
}

static int push(struct lexer *L, enum jtok_type type, const char *text, size_t len, int line)
{
    if (L->n_toks == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        struct jtok *t = jarena_alloc(L->a, cap * sizeof(*t));
        if (!t) return lfail(L, "out of memory");
        if (L->n_toks) memcpy(t, L->toks, L->n_toks * sizeof(*t));
        L->toks = t;
        L->cap = cap;
    }
    struct jtok *t = &L->toks[L->n_toks++];
    memset(t, 0, sizeof(*t));
    t->type = type;
    t->line = line;
    if (text) {
        char *copy = jarena_alloc(L->a, len + 1);
        if (!copy) return lfail(L, "out of memory");
        memcpy(copy, text, len);
        t->text = copy;
        t->len = len;
    }
    return 0;
}

static void advance(struct lexer *L, size_t to)
{
    for (size_t i = L->pos; i < to; i++)
        if (L->s[i] == '\n') L->line++;
    if (to > L->pos) L->line_starting = L->s[to - 1] == '\n';
    L->pos = to;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Finds the next tag opener at or after `from`: returns its offset (or n)
 * and the kind ('{', '%', '#'). */
static size_t find_tag(const struct lexer *L, size_t from, char *kind)
{
    for (size_t i = from; i + 1 < L->n; i++) {
        if (L->s[i] == '{' && (L->s[i + 1] == '{' || L->s[i + 1] == '%' || L->s[i + 1] == '#')) {
            *kind = L->s[i + 1];
            return i;
        }
    }
    return L->n;
}

/* Emits data s[start, end) applying the strip rules of the tag that follows
 * (kind, sign is '-', '+' or 0). */
static int emit_data(struct lexer *L, size_t start, size_t end, char kind, char sign)
{
    size_t stop = end;
    if (sign == '-') {
        while (stop > start && is_ws(L->s[stop - 1])) stop--;
    } else if (sign != '+' && kind != '{' && kind != 0) {
        size_t l_pos = stop;
        while (l_pos > start && L->s[l_pos - 1] != '\n') l_pos--;
        bool all_ws = l_pos < stop;
        for (size_t i = l_pos; i < stop; i++)
            if (!is_ws(L->s[i])) all_ws = false;
        if (all_ws && (l_pos > start || L->line_starting)) stop = l_pos;
    }
    int line = L->line;
    if (stop > start && push(L, JT_DATA, L->s + start, stop - start, line)) return -1;
    advance(L, end);
    return 0;
}

/* Skips a tag's closing: `-X}` strips whitespace after, `+X}` keeps it,
 * plain block/comment ends drop one newline (trim_blocks). */
static void close_tag(struct lexer *L, size_t after, char sign, bool trim)
{
    size_t p = after;
    if (sign == '-') {
        while (p < L->n && is_ws(L->s[p])) p++;
    } else if (sign != '+' && trim && p < L->n && L->s[p] == '\n') {
        p++;
    }
    advance(L, p);
}

/* True when s[p..] starts a block tag {%[-+]? name ...; stores where the
 * word starts and ends. */
static bool block_word(const struct lexer *L, size_t p, const char *word, size_t *after)
{
    if (p + 1 >= L->n || L->s[p] != '{' || L->s[p + 1] != '%') return false;
    size_t q = p + 2;
    if (q < L->n && (L->s[q] == '-' || L->s[q] == '+')) q++;
    while (q < L->n && is_ws(L->s[q])) q++;
    size_t wl = strlen(word);
    if (q + wl > L->n || memcmp(L->s + q, word, wl) != 0) return false;
    q += wl;
    while (q < L->n && is_ws(L->s[q])) q++;
    size_t at = q;
    if (q < L->n && L->s[q] == '-') q++;
    if (q + 1 < L->n && L->s[q] == '%' && L->s[q + 1] == '}') {
        *after = at; /* at the '-' when there is one, else at "%}" */
        return true;
    }
    return false;
}

static int lex_raw(struct lexer *L, size_t body)
{
    for (size_t p = body; p + 1 < L->n; p++) {
        size_t end;
        if (!block_word(L, p, "endraw", &end)) continue;
        char sign = L->s[p + 2] == '-' || L->s[p + 2] == '+' ? L->s[p + 2] : 0;
        if (emit_data(L, L->pos, p, '%', sign)) return -1;
        char close_sign = L->s[end] == '-' ? '-' : 0;
        advance(L, close_sign ? end + 3 : end + 2);
        close_tag(L, L->pos, close_sign, true);
        return 0;
    }
    return lfail(L, "missing end of raw directive");
}

static int lex_comment(struct lexer *L, size_t open)
{
    for (size_t p = open + 2; p + 1 < L->n; p++) {
        if (L->s[p] != '#' || L->s[p + 1] != '}') continue;
        char sign = (p > open + 2 && (L->s[p - 1] == '-' || L->s[p - 1] == '+')) ? L->s[p - 1] : 0;
        advance(L, p + 2);
        close_tag(L, p + 2, sign, true);
        return 0;
    }
    return lfail(L, "missing end of comment tag");
}

static int lex_inside(struct lexer *L, bool block); /* below */

static int lex_root(struct lexer *L)
{
    while (L->pos < L->n) {
        char kind = 0;
        size_t open = find_tag(L, L->pos, &kind);
        if (open >= L->n) return emit_data(L, L->pos, L->n, 0, 0);
        char sign = open + 2 < L->n && (L->s[open + 2] == '-' || L->s[open + 2] == '+')
                        ? L->s[open + 2]
                        : 0;
        size_t raw_end;
        if (kind == '%' && block_word(L, open, "raw", &raw_end)) {
            if (emit_data(L, L->pos, open, kind, sign)) return -1;
            size_t body = L->s[raw_end] == '-' ? raw_end + 3 : raw_end + 2;
            if (L->s[raw_end] == '-')
                while (body < L->n && is_ws(L->s[body])) body++;
            advance(L, body);
            if (lex_raw(L, body)) return -1;
            continue;
        }
        if (emit_data(L, L->pos, open, kind, sign)) return -1;
        if (kind == '#') {
            if (lex_comment(L, open)) return -1;
            continue;
        }
        if (push(L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, NULL, 0, L->line)) return -1;
        advance(L, open + 2 + (sign ? 1 : 0));
        if (lex_inside(L, kind == '%')) return -1;
    }
    return 0;
}

/* Normalises \r\n and \r to \n and drops one trailing newline. */
static char *normalise(struct jarena *a, const char *src, size_t len, size_t *out_len)
{
    char *s = jarena_alloc(a, len + 1);
    if (!s) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            if (i + 1 < len && src[i + 1] == '\n') i++;
            s[n++] = '\n';
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    *out_len = n;
    return s;
}

int jinja_lex(struct jarena *a, const char *src, size_t len, struct jtok **toks, size_t *n_toks,
              const char **err, int *err_line)
{
    struct lexer L = {.a = a, .line = 1, .line_starting = true};
    L.s = normalise(a, src, len, &L.n);
    if (!L.s) {
        *err = "out of memory";
        *err_line = 0;
        return -1;
    }
    if (lex_root(&L) || push(&L, JT_EOF, NULL, 0, L.line)) {
        *err = L.err;
        *err_line = L.err_line;
        return -1;
    }
    *toks = L.toks;
    *n_toks = L.n_toks;
    return 0;
}

/* ------------------------------------------------------------ inside tags */

static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes a string literal body as Python's unicode-escape would. */
static int lex_string(struct lexer *L, char q)
{
    size_t p = L->pos + 1;
    struct tern_str buf = {0};
    int line = L->line;
    while (p < L->n && L->s[p] != q) {
        char c = L->s[p];
        if (c != '\\' || p + 1 >= L->n) {
            if (tern_str_appendc(&buf, c)) goto oom;
            p++;
            continue;
        }
        char e = L->s[p + 1];
        const char *simple = strchr("nrtabfv\\'\"\n", e);
        if (simple && e) {
            static const char map[] = "\n\r\t\a\b\f\v\\'\"";
            if (e != '\n' && tern_str_appendc(&buf, map[simple - "nrtabfv\\'\"\n" + 0]))
                goto oom;
            p += 2;
            continue;
        }
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = p + 2 + (size_t)k < L->n ? hexval(L->s[p + 2 + k]) : -1;
                if (h < 0) {
                    tern_str_deinit(&buf);
                    return lfail(L, "truncated \\x/\\u escape in a string literal");
                }
                cp = cp * 16 + (uint32_t)h;
            }
            char u[4];
            if (cp > 0x10ffff || tern_str_append(&buf, u, (size_t)jutf8_encode(cp, u))) goto oom;
            p += 2 + (size_t)digits;
            continue;
        }
        if (e >= '0' && e <= '7') {
            uint32_t cp = 0;
            size_t k = p + 1;
            for (int m = 0; m < 3 && k < L->n && L->s[k] >= '0' && L->s[k] <= '7'; m++, k++)
                cp = cp * 8 + (uint32_t)(L->s[k] - '0');
            char u[4];
            if (tern_str_append(&buf, u, (size_t)jutf8_encode(cp, u))) goto oom;
            p = k;
            continue;
        }
        if (tern_str_appendc(&buf, '\\')) goto oom; /* unknown escape: kept */
        p++;
    }
    if (p >= L->n) {
        tern_str_deinit(&buf);
        return lfail(L, "unterminated string literal");
    }
    int rc = push(L, JT_STRING, buf.data ? buf.data : "", buf.len, line);
    tern_str_deinit(&buf);
    advance(L, p + 1);
    return rc;
oom:
    tern_str_deinit(&buf);
    return lfail(L, "out of memory");
}

static int lex_number(struct lexer *L)
{
    size_t p = L->pos;
    bool is_float = false;
    char num[128];
    size_t nn = 0;
    while (p < L->n && (is_digit(L->s[p]) || (L->s[p] == '_' && p + 1 < L->n && is_digit(L->s[p + 1])))) {
        if (L->s[p] != '_' && nn < sizeof(num) - 1) num[nn++] = L->s[p];
        p++;
    }
    if (p + 1 < L->n && L->s[p] == '.' && is_digit(L->s[p + 1])) {
        is_float = true;
        num[nn < sizeof(num) - 1 ? nn++ : nn] = '.';
        p++;
        while (p < L->n && (is_digit(L->s[p]) || (L->s[p] == '_' && p + 1 < L->n && is_digit(L->s[p + 1])))) {
            if (L->s[p] != '_' && nn < sizeof(num) - 1) num[nn++] = L->s[p];
            p++;
        }
    }
    if (p < L->n && (L->s[p] == 'e' || L->s[p] == 'E')) {
        size_t q = p + 1;
        if (q < L->n && (L->s[q] == '+' || L->s[q] == '-')) q++;
        if (q < L->n && is_digit(L->s[q])) {
            is_float = true;
            while (p < q && nn < sizeof(num) - 1) num[nn++] = L->s[p++];
            while (p < L->n && is_digit(L->s[p])) {
                if (nn < sizeof(num) - 1) num[nn++] = L->s[p];
                p++;
            }
        }
    }
    num[nn] = 0;
    if (push(L, is_float ? JT_FLOAT : JT_INT, num, nn, L->line)) return -1;
    struct jtok *t = &L->toks[L->n_toks - 1];
    if (is_float) {
        t->f = strtod(num, NULL);
    } else {
        errno = 0;
        unsigned long long v = strtoull(num, NULL, 10);
        if (errno || v > INT64_MAX) return lfail(L, "integer literal too large");
        t->i = (int64_t)v;
    }
    advance(L, p);
    return 0;
}

static const char *const ops2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};
static const char ops1[] = "+-/*%~[](){}><=.:|,;";

static int lex_inside(struct lexer *L, bool block)
{
    int balance = 0;
    while (L->pos < L->n) {
        char c = L->s[L->pos];
        if (is_ws(c)) {
            size_t p = L->pos;
            while (p < L->n && is_ws(L->s[p])) p++;
            advance(L, p);
            continue;
        }
        const char *rest = L->s + L->pos;
        size_t left = L->n - L->pos;
        char closer = block ? '%' : '}';
        if (balance == 0) {
            char sign = 0;
            size_t k = 0;
            if ((c == '-' || c == '+') && left >= 3 && rest[1] == closer && rest[2] == '}') {
                sign = c;
                k = 1;
            }
            if (c == '+' && !block) sign = 0, k = 0; /* `+}}` is not an end for variables */
            if (left >= k + 2 && rest[k] == closer && rest[k + 1] == '}') {
                if (push(L, block ? JT_BLOCK_END : JT_VAR_END, NULL, 0, L->line)) return -1;
                advance(L, L->pos + k + 2);
                close_tag(L, L->pos, sign, block);
                return 0;
            }
        }
        if (is_name_start(c)) {
            size_t p = L->pos;
            while (p < L->n && (is_name_start(L->s[p]) || is_digit(L->s[p]))) p++;
            if (push(L, JT_NAME, rest, p - L->pos, L->line)) return -1;
            advance(L, p);
            continue;
        }
        if (is_digit(c)) {
            if (lex_number(L)) return -1;
            continue;
        }
        if (c == '\'' || c == '"') {
            if (lex_string(L, c)) return -1;
            continue;
        }
        size_t oplen = 0;
        for (int i = 0; ops2[i]; i++)
            if (left >= 2 && memcmp(rest, ops2[i], 2) == 0) oplen = 2;
        if (!oplen && strchr(ops1, c) && c) oplen = 1;
        if (!oplen) {
            return lfail(L, c == '\n' ? "unexpected newline" : "unexpected character in tag");
        }
        if (c == '(' || c == '[' || c == '{') balance++;
        if ((c == ')' || c == ']' || c == '}') && balance > 0) balance--;
        if (push(L, JT_OP, rest, oplen, L->line)) return -1;
        advance(L, L->pos + oplen);
    }
    return lfail(L, block ? "unexpected end of template: missing '%}'"
                          : "unexpected end of template: missing '}}'");
}
