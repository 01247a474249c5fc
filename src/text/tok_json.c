/*
 * tok_json.c — a fast path for the two huge members of tokenizer.json,
 * model.vocab (an object of token -> id, up to 262k entries) and
 * model.merges (an array of "a b" strings or [a, b] pairs, up to 515k).
 * Building a jansson tree for them costs most of the load time, so this file
 * finds them with a small skipping scanner, loads them straight into the
 * tokenizer's hash maps, and overwrites them in the buffer with "{}" / "[]"
 * and spaces so that jansson parses only the small remainder.
 * Depends on tok_internal.h (maps).
 */
#include "text/tok_internal.h"

#include <string.h>

struct scan {
    const char *p, *end;
    const char *path;
};

static void skip_ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static enum tern_status bad(struct scan *s, const char *what)
{
    return tern_error(TERN_E_FORMAT, "%s: malformed JSON near byte %zu (%s)", s->path,
                      (size_t)(s->end - s->p), what);
}

/* Skips a string starting at '"'. */
static bool skip_string(struct scan *s)
{
    s->p++;
    while (s->p < s->end) {
        const char *q = memchr(s->p, '"', (size_t)(s->end - s->p));
        if (!q) return false;
        /* count the backslashes before the quote */
        const char *b = q;
        while (b > s->p && b[-1] == '\\') b--;
        s->p = q + 1;
        if (((q - b) & 1) == 0) return true;
    }
    return false;
}

static bool skip_value(struct scan *s)
{
    int depth = 0;
    skip_ws(s);
    do {
        if (s->p >= s->end) return false;
        char c = *s->p;
        if (c == '"') {
            if (!skip_string(s)) return false;
        } else if (c == '{' || c == '[') {
            depth++;
            s->p++;
        } else if (c == '}' || c == ']') {
            depth--;
            s->p++;
        } else { /* number, literal, ',' or ':' */
            s->p++;
            while (s->p < s->end && !strchr(",}] \n\r\t", *s->p)) s->p++;
        }
        if (depth > 0) skip_ws(s);
    } while (depth > 0);
    return true;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_hex4(const char *p, const char *end, int32_t *out)
{
    if (end - p < 4) return false;
    int32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return false;
        v = v * 16 + h;
    }
    *out = v;
    return true;
}

/* Reads a string at '"' into *out (unescaped; the buffer is reused). */
static bool read_string(struct scan *s, struct tern_str *out)
{
    tern_str_clear(out);
    if (s->p >= s->end || *s->p != '"') return false;
    s->p++;
    for (;;) {
        const char *q = s->p;
        while (q < s->end && *q != '"' && *q != '\\') q++;
        if (q >= s->end) return false;
        if (tern_str_append(out, s->p, (size_t)(q - s->p)) != TERN_OK) return false;
        s->p = q + 1;
        if (*q == '"') return true;
        if (s->p >= s->end) return false;
        char e = *s->p++, c;
        switch (e) {
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case '"': case '\\': case '/': c = e; break;
        case 'u': {
            int32_t cp;
            if (!read_hex4(s->p, s->end, &cp)) return false;
            s->p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                int32_t lo;
                if (s->end - s->p >= 6 && s->p[0] == '\\' && s->p[1] == 'u' &&
                    read_hex4(s->p + 2, s->end, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    s->p += 6;
                } else {
                    cp = 0xFFFD;
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                cp = 0xFFFD;
            }
            char buf[4];
            int n = tok_utf8_encode(cp, buf);
            if (tern_str_append(out, buf, (size_t)n) != TERN_OK) return false;
            continue;
        }
        default: return false;
        }
        if (tern_str_appendc(out, c) != TERN_OK) return false;
    }
}

static bool read_int(struct scan *s, int64_t *out)
{
    skip_ws(s);
    int64_t v = 0;
    const char *start = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9' && v < INT32_MAX) v = v * 10 + (*s->p++ - '0');
    *out = v;
    return s->p > start && v < INT32_MAX;
}

/* Expects c (after whitespace); true and consumed if found. */
static bool eat(struct scan *s, char c)
{
    skip_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

/* Number of '"' in the range: sizes the hash tables before loading (an
 * oversized table costs cache misses on every lookup). */
static size_t count_quotes(const char *p, const char *end)
{
    size_t n = 0;
    while ((p = memchr(p, '"', (size_t)(end - p)))) {
        n++;
        p++;
    }
    return n;
}

static enum tern_status load_vocab(struct scan *s, struct tern_tokenizer *tok)
{
    struct tern_str key = {0};
    enum tern_status st = TERN_OK;
    size_t bytes = (size_t)(s->end - s->p);
    st = tok_vocab_reserve(&tok->vocab, (int32_t)(count_quotes(s->p, s->end) / 2 + 16), bytes);
    if (st) goto fail;
    if (!eat(s, '{')) goto malformed;
    if (eat(s, '}')) goto done;
    for (;;) {
        int64_t id;
        skip_ws(s);
        if (!read_string(s, &key) || !eat(s, ':') || !read_int(s, &id)) goto malformed;
        st = tok_vocab_set(&tok->vocab, (int32_t)id, key.data ? key.data : "", key.len);
        if (st) goto fail;
        if (eat(s, ',')) continue;
        if (eat(s, '}')) break;
        goto malformed;
    }
done:
    tern_str_deinit(&key);
    return TERN_OK;
malformed:
    st = bad(s, "model.vocab");
fail:
    tern_str_deinit(&key);
    return st;
}

static enum tern_status add_merge(struct tern_tokenizer *tok, struct tern_str *a, size_t split,
                                  int32_t rank, const char *path)
{
    const struct tok_vocab *v = &tok->vocab;
    if (!a->data || split == 0 || split == a->len)
        return tern_error(TERN_E_FORMAT, "%s: merge %d has an empty side", path, rank);
    int32_t ia = tok_vocab_find(v, a->data, split);
    int32_t ib = tok_vocab_find(v, a->data + split, a->len - split);
    int32_t in = tok_vocab_find(v, a->data, a->len);
    if (ia < 0 || ib < 0 || in < 0)
        return tern_error(TERN_E_FORMAT, "%s: merge %d ('%.*s' + '%.*s') uses a token not in the "
                          "vocabulary", path, rank, (int)split, a->data, (int)(a->len - split),
                          a->data + split);
    return tok_merges_add(&tok->merges, ia, ib, rank, in);
}

static enum tern_status load_merges(struct scan *s, struct tern_tokenizer *tok)
{
    struct tern_str a = {0}, b = {0};
    enum tern_status st = TERN_OK;
    if (!eat(s, '[')) goto malformed;
    skip_ws(s);
    bool pairs = s->p < s->end && *s->p == '[';
    st = tok_merges_reserve(&tok->merges, count_quotes(s->p, s->end) / (pairs ? 4 : 2) + 16);
    if (st) goto fail;
    if (eat(s, ']')) goto done;
    for (int32_t rank = 0;; rank++) {
        skip_ws(s);
        size_t split;
        if (s->p < s->end && *s->p == '[') { /* ["a", "b"] */
            s->p++;
            skip_ws(s);
            if (!read_string(s, &b) || !eat(s, ',')) goto malformed;
            tern_str_clear(&a);
            if (tern_str_append(&a, b.data ? b.data : "", b.len)) goto nomem;
            split = a.len;
            skip_ws(s);
            if (!read_string(s, &b) || !eat(s, ']')) goto malformed;
            if (tern_str_append(&a, b.data ? b.data : "", b.len)) goto nomem;
        } else { /* "a b" */
            if (!read_string(s, &a)) goto malformed;
            const char *sp = a.data ? memchr(a.data, ' ', a.len) : NULL;
            if (!sp) {
                st = tern_error(TERN_E_FORMAT, "%s: merge %d '%s' is not 'a b'", s->path, rank,
                                a.data ? a.data : "");
                goto fail;
            }
            split = (size_t)(sp - a.data);
            memmove(a.data + split, a.data + split + 1, a.len - split - 1);
            a.len--;
        }
        st = add_merge(tok, &a, split, rank, s->path);
        if (st) goto fail;
        if (eat(s, ',')) continue;
        if (eat(s, ']')) break;
        goto malformed;
    }
done:
    tern_str_deinit(&a);
    tern_str_deinit(&b);
    return TERN_OK;
nomem:
    st = TERN_E_NO_MEMORY;
    goto fail;
malformed:
    st = bad(s, "model.merges");
fail:
    tern_str_deinit(&a);
    tern_str_deinit(&b);
    return st;
}

/* Finds the value ranges of model.vocab and model.merges. */
static enum tern_status find_members(struct scan *s, const char **vocab, const char **vocab_end,
                                     const char **merges, const char **merges_end)
{
    struct tern_str key = {0};
    enum tern_status st = TERN_OK;
    int depth_model = 0; /* 0: top level, 1: inside "model" */
    if (!eat(s, '{')) goto malformed;
    for (;;) {
        skip_ws(s);
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            if (depth_model == 0) break;
            depth_model = 0;
            if (eat(s, ',')) continue;
            if (eat(s, '}')) break;
            goto malformed;
        }
        if (!read_string(s, &key) || !eat(s, ':')) goto malformed;
        skip_ws(s);
        const char *vstart = s->p;
        if (depth_model == 0 && key.data && !strcmp(key.data, "model") && eat(s, '{')) {
            depth_model = 1;
            continue;
        }
        if (!skip_value(s)) goto malformed;
        if (depth_model == 1 && key.data && !strcmp(key.data, "vocab") && *vstart == '{') {
            *vocab = vstart;
            *vocab_end = s->p;
        } else if (depth_model == 1 && key.data && !strcmp(key.data, "merges") && *vstart == '[') {
            *merges = vstart;
            *merges_end = s->p;
        }
        if (eat(s, ',')) continue;
        skip_ws(s);
        if (s->p < s->end && *s->p == '}') continue;
        goto malformed;
    }
    tern_str_deinit(&key);
    return TERN_OK;
malformed:
    st = bad(s, "structure");
    tern_str_deinit(&key);
    return st;
}

static void blank(char *from, const char *to, char open, char close)
{
    from[0] = open;
    from[1] = close;
    memset(from + 2, ' ', (size_t)(to - from) - 2);
}

enum tern_status tok_json_scan_model(char *buf, size_t len, struct tern_tokenizer *tok,
                                     const char *path)
{
    struct scan s = {buf, buf + len, path};
    const char *v = NULL, *ve = NULL, *m = NULL, *me = NULL;
    TERN_TRY(find_members(&s, &v, &ve, &m, &me));
    if (!v) return TERN_OK; /* not a BPE vocab object: left to the generic path */
    struct scan sv = {v, ve, path};
    TERN_TRY(load_vocab(&sv, tok));
    tok->n_model = tok->vocab.n;
    if (m) {
        struct scan sm = {m, me, path};
        TERN_TRY(load_merges(&sm, tok));
        blank(buf + (m - buf), me, '[', ']');
    }
    blank(buf + (v - buf), ve, '{', '}');
    return TERN_OK;
}

enum tern_status tok_json_top_value(const char *buf, size_t len, const char *key,
                                    const char **start, size_t *vlen)
{
    struct scan s = {buf, buf + len, "json"};
    struct tern_str k = {0};
    *start = NULL;
    *vlen = 0;
    if (!eat(&s, '{')) goto malformed;
    if (eat(&s, '}')) goto done;
    for (;;) {
        skip_ws(&s);
        if (!read_string(&s, &k) || !eat(&s, ':')) goto malformed;
        skip_ws(&s);
        const char *v = s.p;
        if (!skip_value(&s)) goto malformed;
        if (k.data && !strcmp(k.data, key)) {
            *start = v;
            *vlen = (size_t)(s.p - v);
        }
        if (eat(&s, ',')) continue;
        if (eat(&s, '}')) break;
        goto malformed;
    }
done:
    tern_str_deinit(&k);
    return TERN_OK;
malformed:
    tern_str_deinit(&k);
    return TERN_E_FORMAT;
}
