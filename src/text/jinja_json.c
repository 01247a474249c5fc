/*
 * jinja_json.c — JSON at the interpreter's edges: the render context (a
 * jansson value) becomes template values, keeping object key order; and
 * values become JSON text exactly as Python's json.dumps writes it with
 * ensure_ascii=False (transformers' tojson filter): ", " / ": " separators,
 * or "," and newline + indent when indent is given, float repr, NaN and
 * Infinity. Depends on jinja.h, jansson.
 */
#include "text/jinja.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int jinja_from_json(struct jrt *rt, const void *json, struct jv *out)
{
    const json_t *j = json;
    if (++rt->depth > JINJA_MAX_DEPTH * 4) {
        rt->depth--;
        return jrt_fail(rt, "context JSON nested too deeply");
    }
    int rc = 0;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        struct jdict *d = jdict_new(&rt->arena, json_object_size(j));
        const char *key;
        json_t *val;
        if (!d) {
            rc = jrt_oom(rt);
            break;
        }
        json_object_foreach((json_t *)j, key, val) {
            struct jv k, v;
            if (jv_str(&rt->arena, key, strlen(key), &k)) {
                rc = jrt_oom(rt);
                break;
            }
            if ((rc = jinja_from_json(rt, val, &v))) break;
            d->keys[d->n] = k; /* keys of a JSON object are distinct */
            d->vals[d->n++] = v;
        }
        out->kind = JV_DICT;
        out->flags = 0;
        out->u.d = d;
        break;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        struct jlist *l = jlist_new(&rt->arena, n);
        if (!l) {
            rc = jrt_oom(rt);
            break;
        }
        for (size_t i = 0; i < n && !rc; i++) rc = jinja_from_json(rt, json_array_get(j, i), &l->items[i]);
        l->n = n;
        out->kind = JV_LIST;
        out->flags = 0;
        out->u.l = l;
        break;
    }
    case JSON_STRING:
        if (jv_str(&rt->arena, json_string_value(j), json_string_length(j), out)) rc = jrt_oom(rt);
        break;
    case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); break;
    case JSON_REAL: *out = jv_float(json_real_value(j)); break;
    case JSON_TRUE: *out = jv_bool(true); break;
    case JSON_FALSE: *out = jv_bool(false); break;
    default: *out = jv_none(); break;
    }
    rt->depth--;
    return rc;
}

static int put_string(struct tern_str *o, const char *p, size_t n)
{
    if (tern_str_appendc(o, '"')) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                      : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (e) {
            if (tern_str_appendz(o, e)) return -1;
        } else if (c < 0x20) {
            if (tern_str_appendf(o, "\\u%04x", c)) return -1;
        } else if (tern_str_appendc(o, (char)c)) {
            return -1;
        }
    }
    return tern_str_appendc(o, '"') ? -1 : 0;
}

static int put_float(struct tern_str *o, double f)
{
    char buf[40];
    if (isnan(f)) return tern_str_appendz(o, "NaN") ? -1 : 0;
    if (isinf(f)) return tern_str_appendz(o, f < 0 ? "-Infinity" : "Infinity") ? -1 : 0;
    jv_format_float(f, buf);
    return tern_str_appendz(o, buf) ? -1 : 0;
}

struct dump {
    struct jrt *rt;
    int indent; /* -1: inline */
    const char *item_sep, *key_sep;
    bool sort_keys;
    struct tern_str *o;
};

static int newline(struct dump *D, int level)
{
    if (D->indent < 0) return 0;
    if (tern_str_appendc(D->o, '\n')) return -1;
    for (int i = 0; i < level * D->indent; i++)
        if (tern_str_appendc(D->o, ' ')) return -1;
    return 0;
}

static int dump_value(struct dump *D, struct jv v, int level);

static int key_string(struct dump *D, struct jv k)
{
    struct tern_str *o = D->o;
    switch (k.kind) {
    case JV_STR: return put_string(o, k.u.s->data, k.u.s->len);
    case JV_INT: return tern_str_appendf(o, "\"%lld\"", (long long)k.u.i) ? -1 : 0;
    case JV_BOOL: return tern_str_appendz(o, k.u.b ? "\"true\"" : "\"false\"") ? -1 : 0;
    case JV_NONE: return tern_str_appendz(o, "\"null\"") ? -1 : 0;
    case JV_FLOAT:
        if (tern_str_appendc(o, '"') || put_float(o, k.u.f)) return -1;
        return tern_str_appendc(o, '"') ? -1 : 0;
    default:
        return jrt_fail(D->rt, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

static int dump_dict(struct dump *D, const struct jdict *d, int level)
{
    struct tern_str *o = D->o;
    if (d->n == 0) return tern_str_appendz(o, "{}") ? jrt_oom(D->rt) : 0;
    size_t *order = jarena_alloc(&D->rt->arena, d->n * sizeof(size_t));
    if (!order) return jrt_oom(D->rt);
    for (size_t i = 0; i < d->n; i++) order[i] = i;
    for (size_t i = 1; D->sort_keys && i < d->n; i++) { /* insertion sort: stable */
        for (size_t j = i; j > 0; j--) {
            int c;
            if (jinja_compare(D->rt, d->keys[order[j]], d->keys[order[j - 1]], &c)) return -1;
            if (c >= 0) break;
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    }
    if (tern_str_appendc(o, '{')) return jrt_oom(D->rt);
    for (size_t i = 0; i < d->n; i++) {
        if (i && tern_str_appendz(o, D->item_sep)) return jrt_oom(D->rt);
        if (newline(D, level + 1)) return jrt_oom(D->rt);
        if (key_string(D, d->keys[order[i]]) || tern_str_appendz(o, D->key_sep)) return -1;
        if (dump_value(D, d->vals[order[i]], level + 1)) return -1;
    }
    if (newline(D, level) || tern_str_appendc(o, '}')) return jrt_oom(D->rt);
    return 0;
}

static int dump_value(struct dump *D, struct jv v, int level)
{
    struct tern_str *o = D->o;
    if (level > JINJA_MAX_DEPTH) return jrt_fail(D->rt, "value nested too deeply for tojson");
    if (o->len > JINJA_MAX_OUTPUT) return jrt_fail(D->rt, "tojson output too large");
    switch (v.kind) {
    case JV_NONE: return tern_str_appendz(o, "null") ? jrt_oom(D->rt) : 0;
    case JV_BOOL: return tern_str_appendz(o, v.u.b ? "true" : "false") ? jrt_oom(D->rt) : 0;
    case JV_INT: return tern_str_appendf(o, "%lld", (long long)v.u.i) ? jrt_oom(D->rt) : 0;
    case JV_FLOAT: return put_float(o, v.u.f) ? jrt_oom(D->rt) : 0;
    case JV_STR: return put_string(o, v.u.s->data, v.u.s->len) ? jrt_oom(D->rt) : 0;
    case JV_LIST:
        if (v.u.l->n == 0) return tern_str_appendz(o, "[]") ? jrt_oom(D->rt) : 0;
        if (tern_str_appendc(o, '[')) return jrt_oom(D->rt);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i && tern_str_appendz(o, D->item_sep)) return jrt_oom(D->rt);
            if (newline(D, level + 1)) return jrt_oom(D->rt);
            if (dump_value(D, v.u.l->items[i], level + 1)) return -1;
        }
        if (newline(D, level) || tern_str_appendc(o, ']')) return jrt_oom(D->rt);
        return 0;
    case JV_DICT: return dump_dict(D, v.u.d, level);
    default:
        return jrt_fail(D->rt, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

int jinja_tojson(struct jrt *rt, struct jv v, int indent, const char *item_sep,
                 const char *key_sep, bool sort_keys, struct tern_str *out)
{
    struct dump D = {rt, indent, item_sep, key_sep, sort_keys, out};
    return dump_value(&D, v, 0);
}
