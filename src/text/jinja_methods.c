/*
 * jinja_methods.c — Python methods that templates call on values
 * (str.strip/split/startswith/format/..., dict.get/items/keys/values), the
 * sandbox's refusal of mutating methods (list.append, dict.update, ...:
 * ImmutableSandboxedEnvironment), and the globals transformers provides:
 * range (capped at jinja2's MAX_RANGE), dict, namespace, raise_exception,
 * strftime_now. Case mapping uses utf8proc. Depends on jinja.h, utf8proc.
 */
#include "text/jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

/* ------------------------------------------------------------ string helpers */

static int set_str(struct jrt *rt, struct tern_str *s, struct jv *out)
{
    int rc = jv_str(&rt->arena, s->data ? s->data : "", s->len, out);
    tern_str_deinit(s);
    return rc ? jrt_oom(rt) : 0;
}

static bool in_chars(uint32_t cp, const struct jv *chars)
{
    if (!chars || chars->kind != JV_STR) return jpy_isspace(cp);
    const char *p = chars->u.s->data;
    size_t n = chars->u.s->len, i = 0, adv;
    while (i < n) {
        if (jutf8_decode(p + i, n - i, &adv) == cp) return true;
        i += adv;
    }
    return false;
}

/* sides: 1 = left, 2 = right, 3 = both. */
int jinja_str_strip(struct jrt *rt, struct jv s, struct jv *chars, int sides, struct jv *out)
{
    const char *p = s.u.s->data;
    size_t n = s.u.s->len, lo = 0, hi = n, adv;
    if (chars && chars->kind == JV_NONE) chars = NULL;
    if (chars && chars->kind != JV_STR) return jrt_fail(rt, "strip arg must be None or str");
    if (sides & 1)
        while (lo < n && in_chars(jutf8_decode(p + lo, n - lo, &adv), chars)) lo += adv;
    if (sides & 2) {
        while (hi > lo) {
            size_t st = hi - 1;
            while (st > lo && ((unsigned char)p[st] & 0xc0) == 0x80) st--;
            if (!in_chars(jutf8_decode(p + st, hi - st, &adv), chars)) break;
            hi = st;
        }
    }
    return jv_str(&rt->arena, p + lo, hi - lo, out) ? jrt_oom(rt) : 0;
}

static bool is_cased_letter(uint32_t cp)
{
    return utf8proc_tolower((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp ||
           utf8proc_toupper((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp;
}

static bool title_sep(uint32_t cp)
{
    return jpy_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
}

/* mode: 'U' upper, 'L' lower, 'C' capitalize, 'T' str.title, 'J' jinja's title filter,
 * 'S' swapcase. */
int jinja_str_case(struct jrt *rt, struct jv s, int mode, struct jv *out)
{
    struct tern_str t = {0};
    const char *p = s.u.s->data;
    size_t n = s.u.s->len, i = 0, adv;
    bool prev_cased = false, start = true;
    while (i < n) {
        uint32_t cp = jutf8_decode(p + i, n - i, &adv);
        utf8proc_int32_t c = (utf8proc_int32_t)cp, r = c;
        switch (mode) {
        case 'U': r = utf8proc_toupper(c); break;
        case 'L': r = utf8proc_tolower(c); break;
        case 'C': r = i == 0 ? utf8proc_totitle(c) : utf8proc_tolower(c); break;
        case 'T':
            r = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c);
            prev_cased = is_cased_letter(cp);
            break;
        case 'J':
            if (title_sep(cp)) {
                start = true;
            } else {
                r = start ? utf8proc_toupper(c) : utf8proc_tolower(c);
                start = false;
            }
            break;
        case 'S':
            r = utf8proc_toupper(c) != c ? utf8proc_toupper(c) : utf8proc_tolower(c);
            break;
        }
        char buf[4];
        if (cp > 0x10ffff || (adv == 1 && cp >= 0x80)) {
            if (tern_str_append(&t, p + i, adv)) goto oom;
        } else if (tern_str_append(&t, buf, (size_t)jutf8_encode((uint32_t)r, buf))) {
            goto oom;
        }
        i += adv;
    }
    return set_str(rt, &t, out);
oom:
    tern_str_deinit(&t);
    return jrt_oom(rt);
}

/* Python's str.splitlines boundaries. */
static size_t line_break(const char *p, size_t n, size_t i, size_t *adv)
{
    uint32_t cp = jutf8_decode(p + i, n - i, adv);
    if (cp == '\r' && i + 1 < n && p[i + 1] == '\n') {
        *adv = 2;
        return 1;
    }
    return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d ||
           cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

int jinja_str_splitlines(struct jrt *rt, struct jv s, bool keepends, struct jlist **out)
{
    struct jlist *l = jlist_new(&rt->arena, 0);
    const char *p = s.u.s->data;
    size_t n = s.u.s->len, i = 0, start = 0, adv;
    if (!l) return jrt_oom(rt);
    while (i < n) {
        if (line_break(p, n, i, &adv)) {
            struct jv line;
            if (jv_str(&rt->arena, p + start, (keepends ? i + adv : i) - start, &line) ||
                jlist_push(&rt->arena, l, line))
                return jrt_oom(rt);
            start = i + adv;
        }
        i += adv;
    }
    if (start < n) {
        struct jv line;
        if (jv_str(&rt->arena, p + start, n - start, &line) || jlist_push(&rt->arena, l, line))
            return jrt_oom(rt);
    }
    *out = l;
    return 0;
}

int jinja_str_replace(struct jrt *rt, struct jv s, struct jv old, struct jv new_, int64_t count,
                      struct jv *out)
{
    struct tern_str t = {0};
    const char *p = s.u.s->data, *o = old.u.s->data;
    size_t n = s.u.s->len, on = old.u.s->len, i = 0, adv;
    int64_t done = 0;
    if (on == 0) { /* Python inserts `new` between characters and at both ends */
        while (i <= n) {
            if ((count < 0 || done < count) && tern_str_append(&t, new_.u.s->data, new_.u.s->len))
                goto oom;
            if (t.len > JINJA_MAX_OUTPUT) goto oom;
            done++;
            if (i == n) break;
            jutf8_decode(p + i, n - i, &adv);
            if (tern_str_append(&t, p + i, adv)) goto oom;
            i += adv;
        }
        return set_str(rt, &t, out);
    }
    while (i < n) {
        if ((count < 0 || done < count) && i + on <= n && memcmp(p + i, o, on) == 0) {
            if (tern_str_append(&t, new_.u.s->data, new_.u.s->len)) goto oom;
            i += on;
            done++;
        } else {
            if (tern_str_appendc(&t, p[i])) goto oom;
            i++;
        }
        if (t.len > JINJA_MAX_OUTPUT) goto oom;
    }
    return set_str(rt, &t, out);
oom:
    tern_str_deinit(&t);
    return jrt_oom(rt);
}

/* ------------------------------------------------------------ str methods */

static struct jv *need_str_arg(struct jrt *rt, struct jargs *a, size_t i, const char *m)
{
    struct jv *v = jargs_get(a, i, NULL);
    if (!v || v->kind != JV_STR) {
        jrt_fail(rt, "str.%s() needs a string argument", m);
        return NULL;
    }
    return v;
}

static int str_split(struct jrt *rt, struct jv s, struct jargs *a, struct jv *out)
{
    struct jv *sep = jargs_get(a, 0, "sep"), *maxv = jargs_get(a, 1, "maxsplit");
    int64_t maxsplit = maxv && maxv->kind == JV_INT ? maxv->u.i : -1;
    struct jlist *l = jlist_new(&rt->arena, 0);
    const char *p = s.u.s->data;
    size_t n = s.u.s->len, i = 0, adv;
    struct jv piece;
    if (!l) return jrt_oom(rt);
    if (sep && sep->kind == JV_NONE) sep = NULL;
    if (sep && sep->kind != JV_STR) return jrt_fail(rt, "must be str or None, not %s", jv_type_name(*sep));
    if (sep && sep->u.s->len == 0) return jrt_fail(rt, "empty separator");
    if (!sep) {
        for (;;) {
            while (i < n && jpy_isspace(jutf8_decode(p + i, n - i, &adv))) i += adv;
            if (i >= n) break;
            size_t st = i;
            if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
                size_t e = n;
                while (e > st && jpy_isspace((unsigned char)p[e - 1])) e--;
                i = e;
            } else {
                while (i < n && !jpy_isspace(jutf8_decode(p + i, n - i, &adv))) i += adv;
            }
            if (jv_str(&rt->arena, p + st, i - st, &piece) || jlist_push(&rt->arena, l, piece))
                return jrt_oom(rt);
        }
    } else {
        const char *q = sep->u.s->data;
        size_t qn = sep->u.s->len, st = 0;
        while (i + qn <= n) {
            if ((maxsplit < 0 || (int64_t)l->n < maxsplit) && memcmp(p + i, q, qn) == 0) {
                if (jv_str(&rt->arena, p + st, i - st, &piece) || jlist_push(&rt->arena, l, piece))
                    return jrt_oom(rt);
                i += qn;
                st = i;
            } else {
                i++;
            }
        }
        if (jv_str(&rt->arena, p + st, n - st, &piece) || jlist_push(&rt->arena, l, piece))
            return jrt_oom(rt);
    }
    out->kind = JV_LIST;
    out->flags = 0;
    out->u.l = l;
    return 0;
}

static bool affix(struct jv s, struct jv x, bool end)
{
    if (x.kind != JV_STR || x.u.s->len > s.u.s->len) return false;
    size_t off = end ? s.u.s->len - x.u.s->len : 0;
    return memcmp(s.u.s->data + off, x.u.s->data, x.u.s->len) == 0;
}

static int str_affix(struct jrt *rt, struct jv s, struct jargs *a, bool end, struct jv *out)
{
    struct jv *x = jargs_get(a, 0, NULL);
    bool r = false;
    if (!x) return jrt_fail(rt, "%s() takes at least 1 argument", end ? "endswith" : "startswith");
    if (x->kind == JV_LIST && (x->flags & JV_F_TUPLE)) {
        for (size_t i = 0; i < x->u.l->n && !r; i++) r = affix(s, x->u.l->items[i], end);
    } else if (x->kind == JV_STR) {
        r = affix(s, *x, end);
    } else {
        return jrt_fail(rt, "%s first arg must be str or a tuple of str, not %s",
                        end ? "endswith" : "startswith", jv_type_name(*x));
    }
    *out = jv_bool(r);
    return 0;
}

static int str_find(struct jrt *rt, struct jv s, struct jargs *a, bool reverse, struct jv *out)
{
    struct jv *x = need_str_arg(rt, a, 0, reverse ? "rfind" : "find");
    if (!x) return -1;
    const char *p = s.u.s->data;
    size_t n = s.u.s->len, m = x->u.s->len;
    long found = -1;
    for (size_t i = 0; i + m <= n; i++) {
        if (memcmp(p + i, x->u.s->data, m) == 0) {
            found = (long)i;
            if (!reverse) break;
        }
    }
    *out = jv_int(found < 0 ? -1 : (int64_t)jutf8_len(p, (size_t)found));
    return 0;
}

static int str_count(struct jrt *rt, struct jv s, struct jargs *a, struct jv *out)
{
    struct jv *x = need_str_arg(rt, a, 0, "count");
    if (!x) return -1;
    size_t n = s.u.s->len, m = x->u.s->len;
    int64_t c = 0;
    if (m == 0) c = (int64_t)jutf8_len(s.u.s->data, n) + 1;
    else
        for (size_t i = 0; i + m <= n;)
            if (memcmp(s.u.s->data + i, x->u.s->data, m) == 0) c++, i += m;
            else i++;
    *out = jv_int(c);
    return 0;
}

static int str_join(struct jrt *rt, struct jv s, struct jargs *a, struct jv *out)
{
    struct jv *x = jargs_get(a, 0, NULL);
    struct jlist *l;
    struct tern_str t = {0};
    if (!x) return jrt_fail(rt, "join() takes exactly one argument");
    if (jinja_iterate(rt, *x, &l)) return -1;
    for (size_t i = 0; i < l->n; i++) {
        if (l->items[i].kind != JV_STR) {
            tern_str_deinit(&t);
            return jrt_fail(rt, "sequence item %zu: expected str instance, %s found", i,
                            jv_type_name(l->items[i]));
        }
        if ((i && tern_str_append(&t, s.u.s->data, s.u.s->len)) ||
            tern_str_append(&t, l->items[i].u.s->data, l->items[i].u.s->len) ||
            t.len > JINJA_MAX_OUTPUT) {
            tern_str_deinit(&t);
            return jrt_oom(rt);
        }
    }
    return set_str(rt, &t, out);
}

/* str.format through jinja2's sandboxed formatter: {} {0} {name}; no specs. */
static int str_format(struct jrt *rt, struct jv s, struct jargs *a, struct jv *out)
{
    struct tern_str t = {0};
    const char *p = s.u.s->data;
    size_t n = s.u.s->len, auto_idx = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if ((c == '{' || c == '}') && i + 1 < n && p[i + 1] == c) {
            tern_str_appendc(&t, c);
            i++;
            continue;
        }
        if (c != '{') {
            if (c == '}') goto bad;
            tern_str_appendc(&t, c);
            continue;
        }
        const char *close = memchr(p + i, '}', n - i);
        if (!close) goto bad;
        size_t fl = (size_t)(close - (p + i + 1));
        const char *field = p + i + 1;
        if (memchr(field, ':', fl) || memchr(field, '!', fl) || memchr(field, '.', fl) ||
            memchr(field, '[', fl)) {
            tern_str_deinit(&t);
            return jrt_fail(rt, "str.format: format specs are not supported");
        }
        struct jv *v = NULL;
        if (fl == 0) v = jargs_get(a, auto_idx++, NULL);
        else if (field[0] >= '0' && field[0] <= '9') v = jargs_get(a, (size_t)atoi(field), NULL);
        else
            for (size_t k = 0; k < a->n_kw; k++)
                if (strlen(a->kw_names[k]) == fl && memcmp(a->kw_names[k], field, fl) == 0) v = &a->kw[k];
        if (!v) {
            tern_str_deinit(&t);
            return jrt_fail(rt, "str.format: missing argument for '{%.*s}'", (int)fl, field);
        }
        if (jv_append_str(&t, *v)) goto bad;
        i += fl + 1;
    }
    return set_str(rt, &t, out);
bad:
    tern_str_deinit(&t);
    return jrt_fail(rt, "str.format: malformed format string");
}

static int str_pad(struct jrt *rt, struct jv s, struct jargs *a, int how, struct jv *out)
{
    struct jv *w = jargs_get(a, 0, NULL), *fill = jargs_get(a, 1, NULL);
    if (!w || w->kind != JV_INT) return jrt_fail(rt, "padding needs an integer width");
    const char *f = fill && fill->kind == JV_STR ? fill->u.s->data : " ";
    size_t fl = fill && fill->kind == JV_STR ? fill->u.s->len : 1;
    int64_t len = (int64_t)jutf8_len(s.u.s->data, s.u.s->len), width = w->u.i;
    if (width > 1 << 20) width = 1 << 20;
    int64_t pad = width > len ? width - len : 0;
    int64_t left = how == 'l' ? 0 : how == 'r' ? pad : pad / 2 + (pad & width & 1);
    struct tern_str t = {0};
    for (int64_t i = 0; i < left; i++) tern_str_append(&t, f, fl);
    tern_str_append(&t, s.u.s->data, s.u.s->len);
    for (int64_t i = 0; i < pad - left; i++) tern_str_append(&t, f, fl);
    return set_str(rt, &t, out);
}

static int str_is(struct jrt *rt, struct jv s, const char *m, struct jv *out)
{
    const char *p = s.u.s->data;
    size_t n = s.u.s->len, i = 0, adv;
    bool ok = n > 0, cased = false;
    while (i < n && ok) {
        uint32_t cp = jutf8_decode(p + i, n - i, &adv);
        const utf8proc_property_t *pr = utf8proc_get_property((utf8proc_int32_t)cp);
        int cat = pr->category;
        bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        if (!strcmp(m, "isdigit") || !strcmp(m, "isnumeric") || !strcmp(m, "isdecimal")) ok = digit;
        else if (!strcmp(m, "isalpha")) ok = alpha;
        else if (!strcmp(m, "isalnum")) ok = alpha || digit;
        else if (!strcmp(m, "isspace")) ok = jpy_isspace(cp);
        else if (!strcmp(m, "islower")) {
            if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) ok = false;
            if (cat == UTF8PROC_CATEGORY_LL) cased = true;
        } else if (!strcmp(m, "isupper")) {
            if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) ok = false;
            if (cat == UTF8PROC_CATEGORY_LU) cased = true;
        }
        i += adv;
    }
    if (!strcmp(m, "islower") || !strcmp(m, "isupper")) ok = ok && cased;
    *out = jv_bool(ok);
    (void)rt;
    return 0;
}

static int str_method(struct jrt *rt, struct jfunc *fn, struct jargs *a, struct jv *out)
{
    struct jv s = fn->self;
    const char *m = fn->name;
    if (!strcmp(m, "strip")) return jinja_str_strip(rt, s, jargs_get(a, 0, NULL), 3, out);
    if (!strcmp(m, "lstrip")) return jinja_str_strip(rt, s, jargs_get(a, 0, NULL), 1, out);
    if (!strcmp(m, "rstrip")) return jinja_str_strip(rt, s, jargs_get(a, 0, NULL), 2, out);
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) return str_split(rt, s, a, out);
    if (!strcmp(m, "startswith")) return str_affix(rt, s, a, false, out);
    if (!strcmp(m, "endswith")) return str_affix(rt, s, a, true, out);
    if (!strcmp(m, "upper")) return jinja_str_case(rt, s, 'U', out);
    if (!strcmp(m, "lower")) return jinja_str_case(rt, s, 'L', out);
    if (!strcmp(m, "title")) return jinja_str_case(rt, s, 'T', out);
    if (!strcmp(m, "capitalize")) return jinja_str_case(rt, s, 'C', out);
    if (!strcmp(m, "swapcase")) return jinja_str_case(rt, s, 'S', out);
    if (!strcmp(m, "find")) return str_find(rt, s, a, false, out);
    if (!strcmp(m, "rfind")) return str_find(rt, s, a, true, out);
    if (!strcmp(m, "count")) return str_count(rt, s, a, out);
    if (!strcmp(m, "join")) return str_join(rt, s, a, out);
    if (!strcmp(m, "format")) return str_format(rt, s, a, out);
    if (!strcmp(m, "center")) return str_pad(rt, s, a, 'c', out);
    if (!strcmp(m, "ljust")) return str_pad(rt, s, a, 'l', out);
    if (!strcmp(m, "rjust")) return str_pad(rt, s, a, 'r', out);
    if (!strcmp(m, "replace")) {
        struct jv *o = need_str_arg(rt, a, 0, m), *nw = o ? need_str_arg(rt, a, 1, m) : NULL;
        struct jv *c = jargs_get(a, 2, "count");
        if (!nw) return -1;
        return jinja_str_replace(rt, s, *o, *nw, c && c->kind == JV_INT ? c->u.i : -1, out);
    }
    if (!strcmp(m, "splitlines")) {
        struct jv *k = jargs_get(a, 0, "keepends");
        struct jlist *l;
        if (jinja_str_splitlines(rt, s, k && jv_truthy(*k), &l)) return -1;
        out->kind = JV_LIST;
        out->flags = 0;
        out->u.l = l;
        return 0;
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        struct jv *x = need_str_arg(rt, a, 0, m);
        if (!x) return -1;
        bool end = m[6] == 's';
        if (!affix(s, *x, end)) {
            *out = s;
            return 0;
        }
        size_t off = end ? 0 : x->u.s->len;
        return jv_str(&rt->arena, s.u.s->data + off, s.u.s->len - x->u.s->len, out) ? jrt_oom(rt) : 0;
    }
    return str_is(rt, s, m, out);
}

/* ------------------------------------------------------------ dict methods */

static int dict_method(struct jrt *rt, struct jfunc *fn, struct jargs *a, struct jv *out)
{
    struct jdict *d = fn->self.u.d;
    const char *m = fn->name;
    if (!strcmp(m, "get")) {
        struct jv *k = jargs_get(a, 0, NULL), *def = jargs_get(a, 1, NULL);
        if (!k) return jrt_fail(rt, "get expected at least 1 argument, got 0");
        long i = jdict_find(d, *k);
        *out = i >= 0 ? d->vals[i] : def ? *def : jv_none();
        return 0;
    }
    struct jlist *l = jlist_new(&rt->arena, d->n);
    if (!l) return jrt_oom(rt);
    for (size_t i = 0; i < d->n; i++) {
        if (m[0] == 'k') l->items[i] = d->keys[i];
        else if (m[0] == 'v') l->items[i] = d->vals[i];
        else if (m[0] == 'c') continue;
        else {
            struct jlist *pair = jlist_new(&rt->arena, 2);
            if (!pair) return jrt_oom(rt);
            pair->items[0] = d->keys[i];
            pair->items[1] = d->vals[i];
            pair->n = 2;
            l->items[i].kind = JV_LIST;
            l->items[i].flags = JV_F_TUPLE;
            l->items[i].u.l = pair;
        }
    }
    if (m[0] == 'c') { /* copy */
        struct jdict *c = jdict_new(&rt->arena, d->n);
        if (!c) return jrt_oom(rt);
        for (size_t i = 0; i < d->n; i++)
            if (jdict_set(&rt->arena, c, d->keys[i], d->vals[i])) return jrt_oom(rt);
        *out = fn->self;
        out->u.d = c;
        return 0;
    }
    l->n = d->n;
    out->kind = JV_LIST;
    out->flags = 0;
    out->u.l = l;
    return 0;
}

static int list_method(struct jrt *rt, struct jfunc *fn, struct jargs *a, struct jv *out)
{
    struct jlist *l = fn->self.u.l;
    struct jv *x = jargs_get(a, 0, NULL);
    if (!strcmp(fn->name, "copy")) {
        struct jlist *c = jlist_new(&rt->arena, l->n);
        if (!c) return jrt_oom(rt);
        memcpy(c->items, l->items, l->n * sizeof(struct jv));
        c->n = l->n;
        *out = fn->self;
        out->u.l = c;
        return 0;
    }
    if (!x) return jrt_fail(rt, "%s() takes exactly one argument", fn->name);
    int64_t count = 0, idx = -1;
    for (size_t i = 0; i < l->n; i++) {
        if (!jv_equal(l->items[i], *x)) continue;
        count++;
        if (idx < 0) idx = (int64_t)i;
    }
    if (!strcmp(fn->name, "count")) *out = jv_int(count);
    else if (idx < 0) return jrt_fail(rt, "value is not in list");
    else *out = jv_int(idx);
    return 0;
}

static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower",
    "title", "capitalize", "swapcase", "find", "rfind", "count", "join", "format", "center",
    "ljust", "rjust", "replace", "splitlines", "removeprefix", "removesuffix", "isdigit",
    "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace", "islower", "isupper", NULL};
static const char *const dict_methods[] = {"get", "items", "keys", "values", "copy", NULL};
static const char *const dict_unsafe[] = {"pop", "popitem", "setdefault", "update", "clear", NULL};
static const char *const list_methods[] = {"index", "count", "copy", NULL};
static const char *const list_unsafe[] = {"append", "clear", "pop", "reverse", "insert",
                                          "sort", "extend", "remove", NULL};

static const char *find_name(const char *const *names, const char *name)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], name) == 0) return names[i];
    return NULL;
}

int jinja_method(struct jrt *rt, struct jv obj, const char *name, struct jv *out, bool *found)
{
    const char *m = NULL;
    jbuiltin_fn call = NULL;
    *found = false;
    if (obj.kind == JV_STR) m = find_name(str_methods, name), call = str_method;
    else if (obj.kind == JV_DICT) m = find_name(dict_methods, name), call = dict_method;
    else if (obj.kind == JV_LIST) m = find_name(list_methods, name), call = list_method;
    if (!m) {
        const char *const *unsafe = obj.kind == JV_DICT ? dict_unsafe
                                  : obj.kind == JV_LIST && !(obj.flags & JV_F_TUPLE) ? list_unsafe
                                                                                     : NULL;
        if (unsafe && find_name(unsafe, name)) {
            *out = jinja_undef(rt, "access to attribute '%s' of '%s' object is unsafe.", name,
                               jv_type_name(obj));
            out->flags |= JV_F_UNSAFE;
            *found = true;
        }
        return 0;
    }
    struct jfunc *fn = jarena_alloc(&rt->arena, sizeof(*fn));
    if (!fn) return jrt_oom(rt);
    fn->name = m;
    fn->call = call;
    fn->self = obj;
    out->kind = JV_FUNC;
    out->flags = 0;
    out->u.fn = fn;
    *found = true;
    return 0;
}

/* ------------------------------------------------------------ globals */

static int g_range(struct jrt *rt, struct jfunc *fn, struct jargs *a, struct jv *out)
{
    int64_t v[3] = {0, 0, 1};
    if (a->n_pos < 1 || a->n_pos > 3) return jrt_fail(rt, "range expected 1 to 3 arguments");
    for (size_t i = 0; i < a->n_pos; i++) {
        if (a->pos[i].kind != JV_INT && a->pos[i].kind != JV_BOOL)
            return jrt_fail(rt, "'%s' object cannot be interpreted as an integer",
                            jv_type_name(a->pos[i]));
        v[a->n_pos == 1 ? 1 : i] = a->pos[i].kind == JV_BOOL ? a->pos[i].u.b : a->pos[i].u.i;
    }
    if (v[2] == 0) return jrt_fail(rt, "range() arg 3 must not be zero");
    double count = v[2] > 0 ? ((double)v[1] - (double)v[0]) / (double)v[2]
                            : ((double)v[0] - (double)v[1]) / (double)-v[2];
    if (count > JINJA_MAX_RANGE)
        return jrt_fail(rt, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                        JINJA_MAX_RANGE);
    struct jlist *l = jlist_new(&rt->arena, count > 0 ? (size_t)count + 1 : 0);
    if (!l) return jrt_oom(rt);
    for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2]) l->items[l->n++] = jv_int(x);
    out->kind = JV_LIST;
    out->flags = 0;
    out->u.l = l;
    return 0;
}

/* dict(...) and namespace(...): a mapping or pairs, then keyword arguments. */
static int g_dict(struct jrt *rt, struct jfunc *fn, struct jargs *a, struct jv *out)
{
    bool ns = fn->name[0] == 'n';
    struct jdict *d = jdict_new(&rt->arena, 0);
    if (!d) return jrt_oom(rt);
    if (a->n_pos > 1) return jrt_fail(rt, "%s expected at most 1 argument", fn->name);
    if (a->n_pos == 1) {
        struct jv src = a->pos[0];
        if (src.kind == JV_DICT || src.kind == JV_NS) {
            for (size_t i = 0; i < src.u.d->n; i++)
                if (jdict_set(&rt->arena, d, src.u.d->keys[i], src.u.d->vals[i])) return jrt_oom(rt);
        } else {
            struct jlist *l;
            if (jinja_iterate(rt, src, &l)) return -1;
            for (size_t i = 0; i < l->n; i++) {
                struct jlist *pair;
                if (jinja_iterate(rt, l->items[i], &pair)) return -1;
                if (pair->n != 2) return jrt_fail(rt, "dictionary update sequence element has wrong length");
                if (jdict_set(&rt->arena, d, pair->items[0], pair->items[1])) return jrt_oom(rt);
            }
        }
    }
    for (size_t k = 0; k < a->n_kw; k++) {
        struct jv key;
        if (jv_str(&rt->arena, a->kw_names[k], strlen(a->kw_names[k]), &key) ||
            jdict_set(&rt->arena, d, key, a->kw[k]))
            return jrt_oom(rt);
    }
    for (size_t i = 0; ns && i < d->n; i++)
        if (d->keys[i].kind == JV_STR && d->keys[i].u.s->data[0] == '_')
            return jrt_fail(rt, "Chat templates cannot store underscore-prefixed attributes on a "
                                "namespace, but got '%s'. Please rename the attribute.",
                            d->keys[i].u.s->data);
    out->kind = ns ? JV_NS : JV_DICT;
    out->flags = 0;
    out->u.d = d;
    return 0;
}

static int g_raise(struct jrt *rt, struct jfunc *fn, struct jargs *a, struct jv *out)
{
    struct jv *msg = jargs_get(a, 0, "message");
    struct tern_str s = {0};
    if (msg && jv_append_str(&s, *msg)) return jrt_oom(rt);
    jrt_fail(rt, "%s", s.data ? s.data : "");
    tern_str_deinit(&s);
    return -1;
}

static int g_strftime_now(struct jrt *rt, struct jfunc *fn, struct jargs *a, struct jv *out)
{
    struct jv *f = jargs_get(a, 0, "format");
    if (!f || f->kind != JV_STR) return jrt_fail(rt, "strftime_now needs a format string");
    time_t now = time(NULL);
    struct tm tm;
    char buf[512];
    localtime_r(&now, &tm);
    size_t n = f->u.s->len ? strftime(buf, sizeof(buf), f->u.s->data, &tm) : 0;
    return jv_str(&rt->arena, buf, n, out) ? jrt_oom(rt) : 0;
}

int jinja_add_globals(struct jrt *rt, struct jscope *s)
{
    static const struct {
        const char *name;
        jbuiltin_fn fn;
    } g[] = {{"range", g_range}, {"dict", g_dict}, {"namespace", g_dict},
             {"raise_exception", g_raise}, {"strftime_now", g_strftime_now}};
    for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
        struct jfunc *fn = jarena_alloc(&rt->arena, sizeof(*fn));
        if (!fn) return jrt_oom(rt);
        fn->name = g[i].name;
        fn->call = g[i].fn;
        struct jv v = {JV_FUNC, 0, {0}};
        v.u.fn = fn;
        if (jscope_set(rt, s, g[i].name, v)) return -1;
    }
    return 0;
}
