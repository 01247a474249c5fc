/*
 * jinja_filters.c — jinja2's builtin filters and tests as chat templates use
 * them, with transformers' tojson (json.dumps, ensure_ascii=False). Names
 * are looked up in two tables at the bottom of the file. String case
 * mapping of the str methods lives in jinja_methods.c. Depends on jinja.h.
 */
#include "text/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Helpers shared with jinja_methods.c. */
int jinja_str_strip(struct jrt *rt, struct jv s, struct jv *chars, int sides, struct jv *out);
int jinja_str_case(struct jrt *rt, struct jv s, int mode, struct jv *out);
int jinja_str_splitlines(struct jrt *rt, struct jv s, bool keepends, struct jlist **out);
int jinja_str_replace(struct jrt *rt, struct jv s, struct jv old, struct jv new_, int64_t count,
                      struct jv *out);
int jinja_binop(struct jrt *rt, int op, struct jv a, struct jv b, struct jv *out);
int jinja_undef_fail(struct jrt *rt, struct jv u);

typedef int (*filter_fn)(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out);

static struct jv list_value(struct jlist *l, bool tuple)
{
    struct jv v = {JV_LIST, tuple ? JV_F_TUPLE : 0, {0}};
    v.u.l = l;
    return v;
}

/* soft_str(): str(v); an undefined, even a sandbox-refused one, is "". */
static int want_str(struct jrt *rt, struct jv v, struct jv *out)
{
    return jinja_to_str(rt, v, out);
}

/* The input of a filter that jinja2 writes as a generator: its items, and the
 * error iterating it raises, which jinja2 raises only once the result is
 * consumed (`5|select` is a generator; `5|select|list` fails). A generator
 * input is consumed, its own pending error carried over. */
static int gen_input(struct jrt *rt, struct jv v, struct jlist **items, const char **err)
{
    char buf[128];
    *err = NULL;
    switch (v.kind) {
    case JV_GEN:
        *err = v.u.g->err;
        v.u.g->err = NULL;
        return jinja_iterate(rt, v, items);
    case JV_UNDEF:
    case JV_STR:
    case JV_LIST:
    case JV_DICT: return jinja_iterate(rt, v, items);
    default: break;
    }
    snprintf(buf, sizeof buf, "'%s' object is not iterable", jv_type_name(v));
    struct jstr *e = jstr_new(&rt->arena, buf, strlen(buf));
    if (!e || !(*items = jlist_new(&rt->arena, 0))) return jrt_oom(rt);
    *err = e->data;
    return 0;
}

static bool arg_bool(struct jargs *a, size_t i, const char *name, bool def)
{
    struct jv *v = jargs_get(a, i, name);
    return v ? jv_truthy(*v) : def;
}

static int f_length(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    switch (v.kind) {
    case JV_UNDEF: *out = jv_int(0); return 0;
    case JV_STR: *out = jv_int((int64_t)jutf8_len(v.u.s->data, v.u.s->len)); return 0;
    case JV_LIST: *out = jv_int((int64_t)v.u.l->n); return 0;
    case JV_DICT: *out = jv_int((int64_t)v.u.d->n); return 0;
    default: return jrt_fail(rt, "object of type '%s' has no len()", jv_type_name(v));
    }
}

/* next(iter(seq)): takes one item of a generator, leaving the rest. */
static int f_first(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jlist *l;
    if (v.kind == JV_GEN) {
        struct jgen *g = v.u.g;
        if (g->pos < g->items->n) {
            *out = g->items->items[g->pos++];
            return 0;
        }
        if (g->err) return jrt_fail(rt, "%s", g->err);
        *out = jinja_undef(rt, "No first item, sequence was empty.");
        return 0;
    }
    if (jinja_iterate(rt, v, &l)) return -1;
    *out = l->n ? l->items[0] : jinja_undef(rt, "No first item, sequence was empty.");
    return 0;
}

/* next(iter(reversed(seq))): generators and None are not reversible. */
static int f_last(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jlist *l;
    if (v.kind != JV_STR && v.kind != JV_LIST && v.kind != JV_DICT && v.kind != JV_UNDEF)
        return jrt_fail(rt, "'%s' object is not reversible", jv_type_name(v));
    if (jinja_iterate(rt, v, &l)) return -1;
    *out = l->n ? l->items[l->n - 1] : jinja_undef(rt, "No last item, sequence was empty.");
    return 0;
}

/* Looks up "a.b.0"-style attributes as jinja's make_attrgetter does. */
static int get_attr_path(struct jrt *rt, struct jv v, struct jv attr, struct jv *out)
{
    if (attr.kind != JV_STR) return jinja_getitem(rt, v, attr, out);
    const char *p = attr.u.s->data, *end = p + attr.u.s->len;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
        struct jv key;
        char *e;
        long long idx = strtoll(p, &e, 10);
        if (n && e == p + n) key = jv_int(idx);
        else if (jv_str(&rt->arena, p, n, &key)) return jrt_oom(rt);
        if (jinja_getitem(rt, v, key, &v)) return -1;
        if (!dot) break;
        p = dot + 1;
    }
    *out = v;
    return 0;
}

static int f_join(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jlist *l;
    struct jv *sep = jargs_get(a, 0, "d"), *attr = jargs_get(a, 1, "attribute");
    struct tern_str s = {0};
    if (jinja_iterate(rt, v, &l)) return -1;
    for (size_t i = 0; i < l->n; i++) {
        struct jv item = l->items[i];
        if (attr && get_attr_path(rt, item, *attr, &item)) goto fail;
        if ((i && sep && jv_append_str(&s, *sep)) || jv_append_str(&s, item)) goto oom;
        if (s.len > JINJA_MAX_OUTPUT) goto oom;
    }
    if (jv_str(&rt->arena, s.data ? s.data : "", s.len, out)) goto oom;
    tern_str_deinit(&s);
    return 0;
oom:
    jrt_oom(rt);
fail:
    tern_str_deinit(&s);
    return -1;
}

static int shift_args(struct jrt *rt, struct jargs *a, size_t k, struct jargs *rest)
{
    *rest = *a;
    rest->n_pos = a->n_pos > k ? a->n_pos - k : 0;
    rest->pos = a->pos + (a->n_pos > k ? k : a->n_pos);
    return 0;
}

/* map, select, reject, selectattr, rejectattr: `if value:` guards them in
 * jinja2, so a false input (none, undefined, 0, empty) gives an empty
 * generator without looking at the arguments. Their work is done at once,
 * but an error it meets (a bad argument, an attribute of an undefined) is
 * kept in the generator and raised only if it is consumed that far, as
 * jinja2's lazy generators do: `{% if tools|selectattr('function.name') %}`
 * renders where `|list` would fail. */
static int f_map(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jlist *l, *r;
    const char *err;
    if (!jv_truthy(v)) return jinja_gen(rt, "generator", "sync_do_map", NULL, NULL, out);
    if (gen_input(rt, v, &l, &err)) return -1;
    if (!(r = jlist_new(&rt->arena, l->n))) return jrt_oom(rt);
    struct jv *attr = jargs_get(a, a->n_pos, "attribute"), *def = jargs_get(a, a->n_pos, "default");
    struct jargs rest;
    if (!attr && a->n_pos == 0) jrt_fail(rt, "map requires a filter argument");
    else if (!attr && a->pos[0].kind != JV_STR) jrt_fail(rt, "map filter name must be a string");
    shift_args(rt, a, 1, &rest);
    for (size_t i = 0; i < l->n && !rt->err; i++) {
        struct jv item = l->items[i];
        if (attr) {
            if (get_attr_path(rt, item, *attr, &item)) break;
            if (item.kind == JV_UNDEF && def) item = *def;
        } else if (jinja_filter(rt, a->pos[0].u.s->data, item, &rest, &item)) {
            break;
        }
        r->items[r->n++] = item;
    }
    if (rt->err && jrt_defer(rt, &err)) return -1;
    return jinja_gen(rt, "generator", "sync_do_map", r, err, out);
}

/* select/reject/selectattr/rejectattr. */
static int select_common(struct jrt *rt, struct jv v, struct jargs *a, bool attr, bool keep,
                         struct jv *out)
{
    struct jlist *l, *r;
    const char *err, *test = NULL;
    if (!jv_truthy(v)) return jinja_gen(rt, "generator", "select_or_reject", NULL, NULL, out);
    if (gen_input(rt, v, &l, &err)) return -1;
    if (!(r = jlist_new(&rt->arena, l->n))) return jrt_oom(rt);
    size_t k = attr ? 1 : 0;
    if (attr && a->n_pos < 1) jrt_fail(rt, "Missing parameter for attribute name");
    else if (a->n_pos > k && a->pos[k].kind != JV_STR) jrt_fail(rt, "test name must be a string");
    else if (a->n_pos > k) test = a->pos[k].u.s->data;
    struct jargs rest;
    shift_args(rt, a, k + 1, &rest);
    for (size_t i = 0; i < l->n && !rt->err; i++) {
        struct jv item = l->items[i];
        bool ok;
        if (attr && get_attr_path(rt, item, a->pos[0], &item)) break;
        if (test) {
            if (jinja_test(rt, test, item, &rest, &ok)) break;
        } else {
            ok = jv_truthy(item);
        }
        if (ok == keep) r->items[r->n++] = l->items[i];
    }
    if (rt->err && jrt_defer(rt, &err)) return -1;
    return jinja_gen(rt, "generator", "select_or_reject", r, err, out);
}

static int f_select(struct jrt *rt, struct jv v, struct jargs *a, struct jv *o) { return select_common(rt, v, a, false, true, o); }
static int f_reject(struct jrt *rt, struct jv v, struct jargs *a, struct jv *o) { return select_common(rt, v, a, false, false, o); }
static int f_selectattr(struct jrt *rt, struct jv v, struct jargs *a, struct jv *o) { return select_common(rt, v, a, true, true, o); }
static int f_rejectattr(struct jrt *rt, struct jv v, struct jargs *a, struct jv *o) { return select_common(rt, v, a, true, false, o); }

/* The (key, value) tuples of a dict, as a list. */
static int dict_pairs(struct jrt *rt, struct jv v, struct jlist **out)
{
    struct jlist *r;
    if (!(r = jlist_new(&rt->arena, v.u.d->n))) return jrt_oom(rt);
    for (size_t i = 0; i < v.u.d->n; i++) {
        struct jlist *pair = jlist_new(&rt->arena, 2);
        if (!pair) return jrt_oom(rt);
        pair->items[0] = v.u.d->keys[i];
        pair->items[1] = v.u.d->vals[i];
        pair->n = 2;
        r->items[r->n++] = list_value(pair, true);
    }
    *out = r;
    return 0;
}

/* A generator: empty for undefined, failing when consumed for a non-mapping. */
static int f_items(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jlist *r = NULL;
    if (v.kind == JV_DICT && dict_pairs(rt, v, &r)) return -1;
    const char *err =
        v.kind == JV_DICT || v.kind == JV_UNDEF ? NULL : "Can only get item pairs from a mapping.";
    return jinja_gen(rt, "generator", "do_items", r, err, out);
}

static int f_trim(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    if (want_str(rt, v, &v)) return -1;
    return jinja_str_strip(rt, v, jargs_get(a, 0, "chars"), 3, out);
}

static int f_case(struct jrt *rt, struct jv v, int mode, struct jv *out)
{
    if (want_str(rt, v, &v)) return -1;
    return jinja_str_case(rt, v, mode, out);
}
static int f_upper(struct jrt *rt, struct jv v, struct jargs *a, struct jv *o) { return f_case(rt, v, 'U', o); }
static int f_lower(struct jrt *rt, struct jv v, struct jargs *a, struct jv *o) { return f_case(rt, v, 'L', o); }
static int f_capitalize(struct jrt *rt, struct jv v, struct jargs *a, struct jv *o) { return f_case(rt, v, 'C', o); }
static int f_title(struct jrt *rt, struct jv v, struct jargs *a, struct jv *o) { return f_case(rt, v, 'J', o); }

static int f_replace(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jv *old = jargs_get(a, 0, "old"), *nw = jargs_get(a, 1, "new"), *cnt = jargs_get(a, 2, "count");
    struct jv so, sn;
    if (!old || !nw) return jrt_fail(rt, "replace needs old and new");
    if (want_str(rt, v, &v) || want_str(rt, *old, &so) || want_str(rt, *nw, &sn)) return -1;
    int64_t count = cnt && cnt->kind == JV_INT ? cnt->u.i : -1;
    return jinja_str_replace(rt, v, so, sn, count, out);
}

static int f_default(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jv *def = jargs_get(a, 0, "default_value");
    bool boolean = arg_bool(a, 1, "boolean", false);
    if (v.kind == JV_UNDEF || (boolean && !jv_truthy(v))) {
        if (def) *out = *def;
        else if (jv_str(&rt->arena, "", 0, out)) return jrt_oom(rt);
        return 0;
    }
    *out = v;
    return 0;
}

static int f_list(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jlist *l, *r;
    if (jinja_iterate(rt, v, &l)) return -1;
    if (!(r = jlist_new(&rt->arena, l->n))) return jrt_oom(rt);
    for (size_t i = 0; i < l->n; i++) r->items[i] = l->items[i];
    r->n = l->n;
    *out = list_value(r, false);
    return 0;
}

static int f_string(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    return want_str(rt, v, out);
}

/* int(value), else int(float(value)), else the default; Undefined's
 * __int__ raises, so an undefined fails. */
static int f_int(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jv *def = jargs_get(a, 0, "default");
    struct jv *base = jargs_get(a, 1, "base");
    if (v.kind == JV_UNDEF) return jinja_undef_fail(rt, v);
    *out = def ? *def : jv_int(0);
    if (v.kind == JV_INT) *out = v;
    else if (v.kind == JV_BOOL) *out = jv_int(v.u.b);
    else if (v.kind == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) *out = jv_int((int64_t)v.u.f);
    else if (v.kind == JV_STR) {
        char *e;
        int b = base && base->kind == JV_INT ? (int)base->u.i : 10;
        const char *p = v.u.s->data;
        while (*p == ' ' || *p == '\t' || *p == '\n') p++;
        long long x = strtoll(p, &e, b);
        while (*e == ' ' || *e == '\t' || *e == '\n') e++;
        if (e != p && *e == 0) {
            *out = jv_int(x);
        } else {
            double f = strtod(p, &e);
            while (*e == ' ' || *e == '\t' || *e == '\n') e++;
            if (e != p && *e == 0 && isfinite(f) && fabs(f) < 9.2e18) *out = jv_int((int64_t)f);
        }
    }
    return 0;
}

static int f_float(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jv *def = jargs_get(a, 0, "default");
    if (v.kind == JV_UNDEF) return jinja_undef_fail(rt, v); /* Undefined.__float__ raises */
    *out = def ? *def : jv_float(0.0);
    if (jv_is_number(v)) *out = jv_float(jv_as_double(v));
    else if (v.kind == JV_STR) {
        char *e;
        double f = strtod(v.u.s->data, &e);
        if (e != v.u.s->data && *e == 0) *out = jv_float(f);
    }
    return 0;
}

static int f_round(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jv *prec = jargs_get(a, 0, "precision"), *method = jargs_get(a, 1, "method");
    int p = prec && prec->kind == JV_INT ? (int)prec->u.i : 0;
    if (!jv_is_number(v)) return jrt_fail(rt, "type %s doesn't define __round__ method", jv_type_name(v));
    double x = jv_as_double(v), m = pow(10.0, p);
    const char *how = method && method->kind == JV_STR ? method->u.s->data : "common";
    if (strcmp(how, "ceil") == 0) *out = jv_float(ceil(x * m) / m);
    else if (strcmp(how, "floor") == 0) *out = jv_float(floor(x * m) / m);
    else if (strcmp(how, "common") == 0) {
        if (v.kind != JV_FLOAT) { /* Python's round() keeps ints ints */
            *out = jv_int(v.kind == JV_BOOL ? v.u.b : v.u.i);
            return 0;
        }
        char buf[400];
        if (p < 0 || p > 30 || !isfinite(x)) *out = jv_float(round(x * m) / m);
        else {
            snprintf(buf, sizeof(buf), "%.*f", p, x); /* correctly rounded, half to even */
            *out = jv_float(strtod(buf, NULL));
        }
    } else {
        return jrt_fail(rt, "method must be 'common', 'ceil' or 'floor'");
    }
    return 0;
}

static int f_tojson(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jv *ind = jargs_get(a, 1, "indent"), *seps = jargs_get(a, 2, "separators");
    bool sort = arg_bool(a, 3, "sort_keys", false);
    int indent = -1;
    if (ind && ind->kind == JV_INT) indent = ind->u.i < 0 ? 0 : ind->u.i > 64 ? 64 : (int)ind->u.i;
    const char *item_sep = indent >= 0 ? "," : ", ", *key_sep = ": ";
    if (seps && seps->kind == JV_LIST && seps->u.l->n == 2 && seps->u.l->items[0].kind == JV_STR &&
        seps->u.l->items[1].kind == JV_STR) {
        item_sep = seps->u.l->items[0].u.s->data;
        key_sep = seps->u.l->items[1].u.s->data;
    }
    struct tern_str s = {0};
    int rc = jinja_tojson(rt, v, indent, item_sep, key_sep, sort, &s);
    if (!rc && jv_str(&rt->arena, s.data ? s.data : "", s.len, out)) rc = jrt_oom(rt);
    tern_str_deinit(&s);
    return rc;
}

/* Markup(v) is a str: `none|safe` is "None". */
static int f_safe(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    return want_str(rt, v, out);
}

static int f_escape(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct tern_str s = {0};
    if (want_str(rt, v, &v)) return -1;
    for (size_t i = 0; i < v.u.s->len; i++) {
        char c = v.u.s->data[i];
        const char *r = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;"
                      : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        if (r ? tern_str_appendz(&s, r) : tern_str_appendc(&s, c)) goto oom;
    }
    if (jv_str(&rt->arena, s.data ? s.data : "", s.len, out)) goto oom;
    tern_str_deinit(&s);
    return 0;
oom:
    tern_str_deinit(&s);
    return jrt_oom(rt);
}

/* Sort key: the attribute (if any), lowercased when not case sensitive. */
static int sort_key(struct jrt *rt, struct jv item, struct jv *attr, bool cs, struct jv *out)
{
    if (attr && get_attr_path(rt, item, *attr, &item)) return -1;
    if (!cs && item.kind == JV_STR) return jinja_str_case(rt, item, 'L', out);
    *out = item;
    return 0;
}

/* Stable merge sort of (key, value) pairs by key; fails on incomparable keys. */
static int merge_sort(struct jrt *rt, struct jv *keys, struct jv *vals, size_t n, bool reverse)
{
    if (n < 2) return 0;
    size_t h = n / 2;
    if (merge_sort(rt, keys, vals, h, reverse) || merge_sort(rt, keys + h, vals + h, n - h, reverse))
        return -1;
    struct jv *tk = jarena_alloc(&rt->arena, n * sizeof(struct jv));
    struct jv *tv = jarena_alloc(&rt->arena, n * sizeof(struct jv));
    if (!tk || !tv) return jrt_oom(rt);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c;
        if (jinja_compare(rt, keys[j], keys[i], &c)) return -1;
        bool take_right = reverse ? c > 0 : c < 0;
        if (take_right) tk[k] = keys[j], tv[k++] = vals[j++];
        else tk[k] = keys[i], tv[k++] = vals[i++];
    }
    while (i < h) tk[k] = keys[i], tv[k++] = vals[i++];
    while (j < n) tk[k] = keys[j], tv[k++] = vals[j++];
    memcpy(keys, tk, n * sizeof(struct jv));
    memcpy(vals, tv, n * sizeof(struct jv));
    return 0;
}

static int f_sort(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jlist *l, *r;
    bool reverse = arg_bool(a, 0, "reverse", false), cs = arg_bool(a, 1, "case_sensitive", false);
    struct jv *attr = jargs_get(a, 2, "attribute");
    if (jinja_iterate(rt, v, &l)) return -1;
    struct jv *keys = jarena_alloc(&rt->arena, (l->n + 1) * sizeof(struct jv));
    if (!keys || !(r = jlist_new(&rt->arena, l->n))) return jrt_oom(rt);
    for (size_t i = 0; i < l->n; i++) {
        r->items[i] = l->items[i];
        if (sort_key(rt, l->items[i], attr, cs, &keys[i])) return -1;
    }
    r->n = l->n;
    if (merge_sort(rt, keys, r->items, r->n, reverse)) return -1;
    *out = list_value(r, false);
    return 0;
}

static int f_dictsort(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    bool cs = arg_bool(a, 0, "case_sensitive", false), reverse = arg_bool(a, 2, "reverse", false);
    struct jv *by = jargs_get(a, 1, "by");
    int pos = by && by->kind == JV_STR && strcmp(by->u.s->data, "value") == 0 ? 1 : 0;
    struct jlist *r;
    if (v.kind == JV_UNDEF) return jinja_undef_fail(rt, v); /* value.items() */
    if (v.kind != JV_DICT)
        return jrt_fail(rt, "'%s' object has no attribute 'items'", jv_type_name(v));
    if (dict_pairs(rt, v, &r)) return -1;
    *out = list_value(r, false);
    struct jv *keys = jarena_alloc(&rt->arena, (r->n + 1) * sizeof(struct jv));
    if (!keys) return jrt_oom(rt);
    for (size_t i = 0; i < r->n; i++)
        if (sort_key(rt, r->items[i].u.l->items[pos], NULL, cs, &keys[i])) return -1;
    return merge_sort(rt, keys, r->items, r->n, reverse);
}

static int f_unique(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jlist *l, *r;
    const char *err;
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    struct jv *attr = jargs_get(a, 1, "attribute");
    if (gen_input(rt, v, &l, &err)) return -1;
    struct jv *seen = jarena_alloc(&rt->arena, (l->n + 1) * sizeof(struct jv));
    if (!seen || !(r = jlist_new(&rt->arena, l->n))) return jrt_oom(rt);
    for (size_t i = 0; i < l->n; i++) {
        struct jv k;
        bool dup = false;
        /* jinja2 keeps the keys in a set */
        if (sort_key(rt, l->items[i], attr, cs, &k) || jinja_check_hashable(rt, k)) {
            if (jrt_defer(rt, &err)) return -1;
            break;
        }
        for (size_t j = 0; j < r->n && !dup; j++) dup = jv_equal(seen[j], k);
        if (!dup) {
            seen[r->n] = k;
            r->items[r->n++] = l->items[i];
        }
    }
    return jinja_gen(rt, "generator", "sync_do_unique", r, err, out);
}

/* A string reversed; reversed(value) for what Python can reverse (an
 * iterator); else list(value) reversed (a list). */
static int f_reverse(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jv step = jv_int(-1), r;
    struct jlist *l;
    int jinja_slice(struct jrt *, struct jv, struct jv *, struct jv *, struct jv *, struct jv *);
    if (v.kind == JV_STR) return jinja_slice(rt, v, NULL, NULL, &step, out);
    bool tuple = v.flags & JV_F_TUPLE;
    const char *type = v.kind == JV_LIST  ? (tuple ? "reversed" : "list_reverseiterator")
                     : v.kind == JV_DICT  ? "dict_reversekeyiterator"
                     : v.kind == JV_UNDEF ? "reversed"
                                          : NULL;
    if (!type && v.kind != JV_GEN) return jrt_fail(rt, "argument must be iterable");
    if (jinja_iterate(rt, v, &l) || jinja_slice(rt, list_value(l, false), NULL, NULL, &step, &r))
        return -1;
    if (!type) {
        *out = r;
        return 0;
    }
    return jinja_gen(rt, type, NULL, r.u.l, NULL, out);
}

static int f_indent(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jv *w = jargs_get(a, 0, "width");
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    struct tern_str ind = {0}, s = {0};
    struct jlist *lines;
    int64_t width = w && (w->kind == JV_INT) ? w->u.i : 4;
    if (w && w->kind == JV_STR) tern_str_append(&ind, w->u.s->data, w->u.s->len);
    else
        for (int64_t i = 0; i < width && i < 1024; i++) tern_str_appendc(&ind, ' ');
    if (v.kind != JV_STR) { /* `s += "\n"` comes first */
        if (v.kind == JV_UNDEF) jinja_undef_fail(rt, v);
        else jrt_fail(rt, "unsupported operand type(s) for +=: '%s' and 'str'", jv_type_name(v));
        goto fail;
    }
    struct jv nl, withnl;
    if (jv_str(&rt->arena, "\n", 1, &nl) || jinja_binop(rt, '+', v, nl, &withnl) ||
        jinja_str_splitlines(rt, withnl, false, &lines))
        goto fail;
    const char *pre = ind.data ? ind.data : "";
    if (first && tern_str_appendz(&s, pre)) goto oom;
    for (size_t i = 0; i < lines->n; i++) {
        struct jstr *line = lines->items[i].u.s;
        if (i && tern_str_appendc(&s, '\n')) goto oom;
        if (i && (blank || line->len) && tern_str_appendz(&s, pre)) goto oom;
        if (tern_str_append(&s, line->data, line->len)) goto oom;
    }
    if (jv_str(&rt->arena, s.data ? s.data : "", s.len, out)) goto oom;
    tern_str_deinit(&ind);
    tern_str_deinit(&s);
    return 0;
oom:
    jrt_oom(rt);
fail:
    tern_str_deinit(&ind);
    tern_str_deinit(&s);
    return -1;
}

static int f_wordcount(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    if (want_str(rt, v, &v)) return -1;
    int64_t n = 0;
    bool in = false;
    for (size_t i = 0; i < v.u.s->len; i++) {
        unsigned char c = (unsigned char)v.u.s->data[i];
        bool w = c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
        if (w && !in) n++;
        in = w;
    }
    *out = jv_int(n);
    return 0;
}

static int minmax(struct jrt *rt, struct jv v, struct jargs *a, int sign, struct jv *out)
{
    struct jlist *l;
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    struct jv *attr = jargs_get(a, 1, "attribute"), best_key = jv_undef();
    if (jinja_iterate(rt, v, &l)) return -1;
    *out = jinja_undef(rt, "No aggregated item, sequence was empty.");
    for (size_t i = 0; i < l->n; i++) {
        struct jv k;
        int c = 0;
        if (sort_key(rt, l->items[i], attr, cs, &k)) return -1;
        if (i && jinja_compare(rt, k, best_key, &c)) return -1;
        if (i == 0 || c * sign > 0) {
            best_key = k;
            *out = l->items[i];
        }
    }
    return 0;
}
static int f_min(struct jrt *rt, struct jv v, struct jargs *a, struct jv *o) { return minmax(rt, v, a, -1, o); }
static int f_max(struct jrt *rt, struct jv v, struct jargs *a, struct jv *o) { return minmax(rt, v, a, 1, o); }

static int f_sum(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jlist *l;
    struct jv *attr = jargs_get(a, 0, "attribute"), *start = jargs_get(a, 1, "start");
    if (jinja_iterate(rt, v, &l)) return -1;
    *out = start ? *start : jv_int(0);
    for (size_t i = 0; i < l->n; i++) {
        struct jv item = l->items[i];
        if (attr && get_attr_path(rt, item, *attr, &item)) return -1;
        if (jinja_binop(rt, '+', *out, item, out)) return -1;
    }
    return 0;
}

static int f_abs(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    if (v.kind == JV_INT || v.kind == JV_BOOL) {
        int64_t x = v.kind == JV_BOOL ? v.u.b : v.u.i;
        if (x == INT64_MIN) return jrt_fail(rt, "integer overflow");
        *out = jv_int(x < 0 ? -x : x);
    } else if (v.kind == JV_FLOAT) {
        *out = jv_float(fabs(v.u.f));
    } else {
        return jrt_fail(rt, "bad operand type for abs(): '%s'", jv_type_name(v));
    }
    return 0;
}

/* jinja2's do_batch step by step: a new batch starts when the current one
 * holds exactly `linecount` items (so 0 starts with an empty batch, and a
 * negative count never splits); the last is padded with fill_with. */
static int f_batch(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jlist *l, *r, *cur;
    const char *err;
    struct jv *cnt = jargs_get(a, 0, "linecount"), *fill = jargs_get(a, 1, "fill_with");
    if (!cnt) return jrt_fail(rt, "batch needs a linecount");
    if (gen_input(rt, v, &l, &err)) return -1;
    if (!(r = jlist_new(&rt->arena, 0)) || !(cur = jlist_new(&rt->arena, 0))) return jrt_oom(rt);
    for (size_t i = 0; i < l->n; i++) {
        if (jv_equal(jv_int((int64_t)cur->n), *cnt)) {
            if (jlist_push(&rt->arena, r, list_value(cur, false)) ||
                !(cur = jlist_new(&rt->arena, 0)))
                return jrt_oom(rt);
        }
        if (jlist_push(&rt->arena, cur, l->items[i])) return jrt_oom(rt);
    }
    if (cur->n) {
        int c = 0;
        while (fill && fill->kind != JV_NONE) { /* len(tmp) < linecount */
            if (jinja_compare(rt, jv_int((int64_t)cur->n), *cnt, &c)) return -1;
            if (c >= 0) break;
            if (jlist_push(&rt->arena, cur, *fill)) return jrt_oom(rt);
        }
        if (jlist_push(&rt->arena, r, list_value(cur, false))) return jrt_oom(rt);
    }
    return jinja_gen(rt, "generator", "do_batch", r, err, out);
}

static int f_center(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jv *w = jargs_get(a, 0, "width");
    int64_t width = w && w->kind == JV_INT ? w->u.i : 80;
    if (want_str(rt, v, &v)) return -1;
    int64_t n = (int64_t)jutf8_len(v.u.s->data, v.u.s->len);
    if (width > 1 << 20) width = 1 << 20;
    if (width <= n) {
        *out = v;
        return 0;
    }
    int64_t pad = width - n, left = pad / 2 + (pad & width & 1);
    struct tern_str s = {0};
    for (int64_t i = 0; i < left; i++) tern_str_appendc(&s, ' ');
    tern_str_append(&s, v.u.s->data, v.u.s->len);
    for (int64_t i = 0; i < pad - left; i++) tern_str_appendc(&s, ' ');
    int rc = jv_str(&rt->arena, s.data ? s.data : "", s.len, out);
    tern_str_deinit(&s);
    return rc ? jrt_oom(rt) : 0;
}

static int f_format(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jlist *l = jlist_new(&rt->arena, a->n_pos);
    if (!l) return jrt_oom(rt);
    for (size_t i = 0; i < a->n_pos; i++) l->items[i] = a->pos[i];
    l->n = a->n_pos;
    if (want_str(rt, v, &v)) return -1;
    return jinja_binop(rt, '%', v, list_value(l, true), out);
}

/* An attribute only: a dict's keys are items, not attributes, so
 * `{'a': 1}|attr('a')` is undefined while `|attr('items')` is the method. */
static int f_attr(struct jrt *rt, struct jv v, struct jargs *a, struct jv *out)
{
    struct jv *name = jargs_get(a, 0, "name");
    bool found;
    if (!name || name->kind != JV_STR) return jrt_fail(rt, "attr needs a name");
    if (v.kind != JV_DICT) return jinja_getattr(rt, v, name->u.s->data, name->u.s->len, out);
    if (jinja_method(rt, v, name->u.s->data, out, &found)) return -1;
    if (!found) *out = jinja_undef(rt, "'dict object' has no attribute '%s'", name->u.s->data);
    return 0;
}

static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {
    {"length", f_length}, {"count", f_length}, {"first", f_first}, {"last", f_last},
    {"join", f_join}, {"map", f_map}, {"select", f_select}, {"reject", f_reject},
    {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"items", f_items},
    {"trim", f_trim}, {"upper", f_upper}, {"lower", f_lower}, {"capitalize", f_capitalize},
    {"title", f_title}, {"replace", f_replace}, {"default", f_default}, {"d", f_default},
    {"list", f_list}, {"string", f_string}, {"int", f_int}, {"float", f_float},
    {"round", f_round}, {"tojson", f_tojson}, {"safe", f_safe}, {"escape", f_escape},
    {"e", f_escape}, {"forceescape", f_escape}, {"unique", f_unique}, {"sort", f_sort},
    {"dictsort", f_dictsort}, {"reverse", f_reverse}, {"indent", f_indent},
    {"wordcount", f_wordcount}, {"min", f_min}, {"max", f_max}, {"sum", f_sum}, {"abs", f_abs},
    {"batch", f_batch}, {"center", f_center}, {"format", f_format}, {"attr", f_attr},
};

bool jinja_has_filter(const char *name)
{
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++)
        if (strcmp(filters[i].name, name) == 0) return true;
    return false;
}

int jinja_filter(struct jrt *rt, const char *name, struct jv v, struct jargs *args, struct jv *out)
{
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++)
        if (strcmp(filters[i].name, name) == 0) return filters[i].fn(rt, v, args, out);
    return jrt_fail(rt, "No filter named '%s'.", name);
}
