/*
 * jinja_value.c — the arena and the value model of the template interpreter:
 * strings, lists, insertion-ordered dicts, Python truthiness and equality,
 * Python's str()/repr() (including float repr), and UTF-8 helpers.
 * Depends on base/ only.
 */
#include "text/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ arena */

struct jarena_chunk {
    struct jarena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *jarena_alloc(struct jarena *a, size_t n_bytes)
{
    n_bytes = (n_bytes + 15) & ~(size_t)15;
    if (n_bytes == 0) n_bytes = 16;
    if (a->cap_bytes && (n_bytes > a->cap_bytes || a->used_bytes > a->cap_bytes - n_bytes))
        return NULL;
    struct jarena_chunk *c = a->head;
    if (!c || c->cap - c->used < n_bytes) {
        size_t cap = n_bytes > 65536 ? n_bytes : 65536;
        c = malloc(sizeof(*c) + cap);
        if (!c) return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n_bytes;
    a->used_bytes += n_bytes;
    memset(p, 0, n_bytes);
    return p;
}

void jarena_deinit(struct jarena *a)
{
    struct jarena_chunk *c = a->head;
    while (c) {
        struct jarena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used_bytes = 0;
}

/* ------------------------------------------------------------ containers */

struct jstr *jstr_new(struct jarena *a, const char *p, size_t n)
{
    struct jstr *s = jstr_alloc(a, n);
    if (s && n) memcpy(s->data, p, n);
    return s;
}

struct jstr *jstr_alloc(struct jarena *a, size_t n)
{
    if (n > JINJA_MAX_OUTPUT) return NULL;
    struct jstr *s = jarena_alloc(a, sizeof(*s) + n + 1); /* zeroed: NUL-terminated */
    if (!s) return NULL;
    s->len = n;
    return s;
}

int jv_str(struct jarena *a, const char *p, size_t n, struct jv *out)
{
    struct jstr *s = jstr_new(a, p, n);
    if (!s) return -1;
    out->kind = JV_STR;
    out->flags = 0;
    out->u.s = s;
    return 0;
}

struct jlist *jlist_new(struct jarena *a, size_t cap)
{
    struct jlist *l = jarena_alloc(a, sizeof(*l));
    if (!l) return NULL;
    if (cap) {
        l->items = jarena_alloc(a, cap * sizeof(struct jv));
        if (!l->items) return NULL;
        l->cap = cap;
    }
    return l;
}

int jlist_push(struct jarena *a, struct jlist *l, struct jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct jv *items = jarena_alloc(a, cap * sizeof(struct jv));
        if (!items) return -1;
        if (l->n) memcpy(items, l->items, l->n * sizeof(struct jv));
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = v;
    return 0;
}

struct jdict *jdict_new(struct jarena *a, size_t cap)
{
    struct jdict *d = jarena_alloc(a, sizeof(*d));
    if (!d) return NULL;
    if (cap) {
        d->keys = jarena_alloc(a, cap * sizeof(struct jv));
        d->vals = jarena_alloc(a, cap * sizeof(struct jv));
        if (!d->keys || !d->vals) return NULL;
        d->cap = cap;
    }
    return d;
}

long jdict_find(const struct jdict *d, struct jv key)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->keys[i], key)) return (long)i;
    return -1;
}

long jdict_find_str(const struct jdict *d, const char *key, size_t len)
{
    for (size_t i = 0; i < d->n; i++) {
        const struct jv *k = &d->keys[i];
        if (k->kind == JV_STR && k->u.s->len == len && memcmp(k->u.s->data, key, len) == 0)
            return (long)i;
    }
    return -1;
}

int jdict_set(struct jarena *a, struct jdict *d, struct jv key, struct jv val)
{
    long i = jdict_find(d, key);
    if (i >= 0) {
        d->vals[i] = val;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        struct jv *keys = jarena_alloc(a, cap * sizeof(struct jv));
        struct jv *vals = jarena_alloc(a, cap * sizeof(struct jv));
        if (!keys || !vals) return -1;
        if (d->n) {
            memcpy(keys, d->keys, d->n * sizeof(struct jv));
            memcpy(vals, d->vals, d->n * sizeof(struct jv));
        }
        d->keys = keys;
        d->vals = vals;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return 0;
}

/* ------------------------------------------------------------ semantics */

bool jv_truthy(struct jv v)
{
    switch (v.kind) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true; /* namespaces, functions, generators */
    }
}

bool jv_is_number(struct jv v)
{
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

double jv_as_double(struct jv v)
{
    if (v.kind == JV_INT) return (double)v.u.i;
    if (v.kind == JV_FLOAT) return v.u.f;
    if (v.kind == JV_BOOL) return v.u.b ? 1.0 : 0.0;
    return 0.0;
}

#define MAX_VALUE_DEPTH 500 /* values nest deeper only when a template builds them so */

static bool equal_depth(struct jv a, struct jv b, int depth);

bool jv_equal(struct jv a, struct jv b) { return equal_depth(a, b, 0); }

static bool equal_depth(struct jv a, struct jv b, int depth)
{
    if (depth > MAX_VALUE_DEPTH) return false;
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t x = a.kind == JV_BOOL ? a.u.b : a.u.i;
            int64_t y = b.kind == JV_BOOL ? b.u.b : b.u.i;
            return x == y;
        }
        return jv_as_double(a) == jv_as_double(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR:
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->data, b.u.s->data, a.u.s->len) == 0;
    case JV_LIST:
        if ((a.flags & JV_F_TUPLE) != (b.flags & JV_F_TUPLE)) return false;
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_depth(a.u.l->items[i], b.u.l->items[i], depth + 1)) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            long j = jdict_find(b.u.d, a.u.d->keys[i]);
            if (j < 0 || !equal_depth(a.u.d->vals[i], b.u.d->vals[j], depth + 1)) return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_GEN: return a.u.g == b.u.g;
    default: return false;
    }
}

const char *jv_type_name(struct jv v)
{
    switch (v.kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return (v.flags & JV_F_TUPLE) ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "function";
    case JV_GEN: return v.u.g->type;
    }
    return "object";
}

/* ------------------------------------------------------------ printing */

void jv_format_float(double f, char buf[40])
{
    if (isnan(f)) {
        strcpy(buf, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(buf, f < 0 ? "-inf" : "inf");
        return;
    }
    /* Shortest %.Ne that reads back to the same double. */
    char e[40];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, f);
        if (strtod(e, NULL) == f) break;
    }
    if (prec == 17) snprintf(e, sizeof(e), "%.16e", f);
    /* e = [-]d[.ddd]e[+-]XX: split into digits and exponent. */
    char digits[24];
    int nd = 0;
    const char *p = e;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    digits[nd] = 0;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = 0;
    char *o = buf;
    if (neg) *o++ = '-';
    if (exp10 >= -5 + 1 && exp10 < 16) {
        if (exp10 < 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -exp10 - 1; i++) *o++ = '0';
            memcpy(o, digits, (size_t)nd);
            o += nd;
        } else {
            for (int i = 0; i <= exp10; i++) *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > exp10 + 1) {
                memcpy(o, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
                o += nd - exp10 - 1;
            } else {
                *o++ = '0';
            }
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)(nd - 1));
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
}

/* Python's repr() of a str: single quotes unless the text has ' and no ". */
static int append_str_repr(struct tern_str *out, const char *p, size_t n)
{
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    if (tern_str_appendc(out, q)) return -1;
    size_t i = 0;
    while (i < n) {
        size_t run = i; /* plain printable ASCII goes in one piece */
        while (run < n && p[run] >= 0x20 && p[run] < 0x7f && p[run] != q && p[run] != '\\') run++;
        if (run > i) {
            if (tern_str_append(out, p + i, run - i)) return -1;
            if (out->len > JINJA_MAX_OUTPUT) return -1;
            i = run;
            continue;
        }
        size_t adv;
        uint32_t cp = jutf8_decode(p + i, n - i, &adv);
        char buf[16];
        const char *esc = NULL;
        if (cp == (uint32_t)q || cp == '\\') {
            buf[0] = '\\';
            buf[1] = (char)cp;
            buf[2] = 0;
            esc = buf;
        } else if (cp == '\n') esc = "\\n";
        else if (cp == '\r') esc = "\\r";
        else if (cp == '\t') esc = "\\t";
        else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
            snprintf(buf, sizeof(buf), "\\x%02x", cp);
            esc = buf;
        } else if (cp == 0xad || cp == 0x2028 || cp == 0x2029 || (cp >= 0xd800 && cp < 0xe000)) {
            snprintf(buf, sizeof(buf), "\\u%04x", cp);
            esc = buf;
        }
        if (esc ? tern_str_appendz(out, esc) : tern_str_append(out, p + i, adv)) return -1;
        i += adv;
    }
    return tern_str_appendc(out, q) ? -1 : 0;
}

static int append_str_depth(struct tern_str *out, struct jv v, int depth);

static int append_repr_depth(struct tern_str *out, struct jv v, int depth)
{
    if (v.kind == JV_STR) return append_str_repr(out, v.u.s->data, v.u.s->len);
    if (v.kind == JV_UNDEF) return tern_str_appendz(out, "Undefined") ? -1 : 0;
    return append_str_depth(out, v, depth);
}

int jv_append_repr(struct tern_str *out, struct jv v) { return append_repr_depth(out, v, 0); }
int jv_append_str(struct tern_str *out, struct jv v) { return append_str_depth(out, v, 0); }

static int append_seq(struct tern_str *out, struct jv v, int depth)
{
    bool tuple = v.flags & JV_F_TUPLE;
    if (tern_str_appendc(out, tuple ? '(' : '[')) return -1;
    for (size_t i = 0; i < v.u.l->n; i++) {
        if (out->len > JINJA_MAX_OUTPUT) return -1; /* callers report it as too large */
        if (i && tern_str_appendz(out, ", ")) return -1;
        if (append_repr_depth(out, v.u.l->items[i], depth + 1)) return -1;
    }
    if (tuple && v.u.l->n == 1 && tern_str_appendc(out, ',')) return -1;
    return tern_str_appendc(out, tuple ? ')' : ']') ? -1 : 0;
}

static int append_dict(struct tern_str *out, const struct jdict *d, int depth)
{
    if (tern_str_appendc(out, '{')) return -1;
    for (size_t i = 0; i < d->n; i++) {
        if (out->len > JINJA_MAX_OUTPUT) return -1;
        if (i && tern_str_appendz(out, ", ")) return -1;
        if (append_repr_depth(out, d->keys[i], depth + 1) || tern_str_appendz(out, ": ") ||
            append_repr_depth(out, d->vals[i], depth + 1))
            return -1;
    }
    return tern_str_appendc(out, '}') ? -1 : 0;
}

static int append_str_depth(struct tern_str *out, struct jv v, int depth)
{
    char buf[64];
    enum tern_status st = TERN_OK;
    if (depth > MAX_VALUE_DEPTH) return tern_str_appendz(out, "...") ? -1 : 0;
    switch (v.kind) {
    case JV_UNDEF: return 0;
    case JV_NONE: st = tern_str_appendz(out, "None"); break;
    case JV_BOOL: st = tern_str_appendz(out, v.u.b ? "True" : "False"); break;
    case JV_INT: st = tern_str_appendf(out, "%lld", (long long)v.u.i); break;
    case JV_FLOAT:
        jv_format_float(v.u.f, buf);
        st = tern_str_appendz(out, buf);
        break;
    case JV_STR: st = tern_str_append(out, v.u.s->data, v.u.s->len); break;
    case JV_LIST: return append_seq(out, v, depth);
    case JV_DICT: return append_dict(out, v.u.d, depth);
    case JV_NS:
        if (tern_str_appendz(out, "<Namespace ")) return -1;
        if (append_dict(out, v.u.d, depth)) return -1;
        st = tern_str_appendc(out, '>');
        break;
    case JV_FUNC:
        st = tern_str_appendf(out, "<function %s>", v.u.fn->name ? v.u.fn->name : "?");
        break;
    case JV_GEN: /* Python's repr without the address */
        if (v.u.g->func) st = tern_str_appendf(out, "<%s object %s>", v.u.g->type, v.u.g->func);
        else st = tern_str_appendf(out, "<%s object>", v.u.g->type);
        break;
    }
    return st == TERN_OK ? 0 : -1;
}

/* ------------------------------------------------------------ UTF-8 */

uint32_t jutf8_decode(const char *p, size_t n, size_t *adv)
{
    const unsigned char *s = (const unsigned char *)p;
    unsigned char c = s[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (len > n) len = 1;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) len = 1;
    *adv = len;
    switch (len) {
    case 2: return ((uint32_t)(c & 0x1f) << 6) | (s[1] & 0x3f);
    case 3: return ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
    case 4:
        return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
               ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
    default: return c;
    }
}

int jutf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

size_t jutf8_len(const char *p, size_t n)
{
    size_t count = 0, i = 0, adv;
    while (i < n) {
        jutf8_decode(p + i, n - i, &adv);
        i += adv;
        count++;
    }
    return count;
}

size_t jutf8_offset(const char *p, size_t n, size_t idx)
{
    size_t i = 0, adv;
    while (i < n && idx > 0) {
        jutf8_decode(p + i, n - i, &adv);
        i += adv;
        idx--;
    }
    return i;
}

bool jpy_isspace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202f || cp == 0x205f || cp == 0x3000;
}
