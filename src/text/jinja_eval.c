/*
 * jinja_eval.c — evaluates parsed templates: scopes (for-loop iterations and
 * macro calls open one; if blocks do not), expressions with Python
 * semantics, statements, macros and call blocks, loop objects, and the
 * bounds that keep a hostile template finite (steps, depth, output, memory).
 * Arithmetic and comparison live in jinja_ops.c. Depends on jinja.h.
 */
#include "text/jinja.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { X_OK = 0, X_ERR = -1, X_BREAK = 1, X_CONTINUE = 2 };

struct jscope {
    struct jscope *parent;
    struct jdict *vars;
};

/* Arithmetic and comparisons (jinja_ops.c). */
int jinja_binop(struct jrt *rt, int op, struct jv a, struct jv b, struct jv *out);
int jinja_unary(struct jrt *rt, int op, struct jv a, struct jv *out);
int jinja_cmp_op(struct jrt *rt, const char *op, struct jv a, struct jv b, bool *out);
int jinja_slice(struct jrt *rt, struct jv obj, struct jv *start, struct jv *stop, struct jv *step,
                struct jv *out);
int jinja_undef_fail(struct jrt *rt, struct jv u);

/* ------------------------------------------------------------ errors */

int jrt_fail(struct jrt *rt, const char *fmt, ...)
{
    if (rt->err) return -1;
    struct tern_str s = {0};
    va_list ap;
    va_start(ap, fmt);
    char buf[512];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    tern_str_appendz(&s, buf);
    rt->err = s.data ? s.data : tern_strdup("error");
    rt->err_line = rt->line;
    return -1;
}

int jrt_oom(struct jrt *rt)
{
    if (!rt->err) rt->err_limit = true;
    return jrt_fail(rt, "out of memory (the template needs more than the render limit)");
}

int jrt_defer(struct jrt *rt, const char **err)
{
    if (!rt->err || rt->err_limit) return -1;
    struct jstr *s = jstr_new(&rt->arena, rt->err, strlen(rt->err));
    if (!s) return jrt_oom(rt);
    tern_free(rt->err);
    rt->err = NULL;
    *err = s->data;
    return 0;
}

struct jv jinja_undef(struct jrt *rt, const char *fmt, ...)
{
    struct jv v = jv_undef();
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    v.u.s = jstr_new(&rt->arena, buf, strlen(buf));
    return v;
}

/* ------------------------------------------------------------ scopes */

struct jscope *jscope_new(struct jrt *rt, struct jscope *parent)
{
    struct jscope *s = jarena_alloc(&rt->arena, sizeof(*s));
    if (!s || !(s->vars = jdict_new(&rt->arena, 0))) return NULL;
    s->parent = parent;
    return s;
}

int jscope_set(struct jrt *rt, struct jscope *s, const char *name, struct jv v)
{
    long i = jdict_find_str(s->vars, name, strlen(name));
    if (i >= 0) {
        s->vars->vals[i] = v;
        return 0;
    }
    struct jv key;
    if (jv_str(&rt->arena, name, strlen(name), &key) || jdict_set(&rt->arena, s->vars, key, v))
        return jrt_oom(rt);
    return 0;
}

bool jscope_get(struct jscope *s, const char *name, struct jv *out)
{
    size_t len = strlen(name);
    for (; s; s = s->parent) {
        long i = jdict_find_str(s->vars, name, len);
        if (i >= 0) {
            *out = s->vars->vals[i];
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------ helpers */

struct jv *jargs_get(struct jargs *args, size_t i, const char *name)
{
    if (i < args->n_pos) return &args->pos[i];
    for (size_t k = 0; name && k < args->n_kw; k++)
        if (strcmp(args->kw_names[k], name) == 0) return &args->kw[k];
    return NULL;
}

int jinja_to_str(struct jrt *rt, struct jv v, struct jv *out)
{
    if (v.kind == JV_STR) {
        *out = v;
        return 0;
    }
    struct tern_str s = {0};
    if (jv_append_str(&s, v) || jv_str(&rt->arena, s.data ? s.data : "", s.len, out)) {
        tern_str_deinit(&s);
        return jrt_oom(rt);
    }
    tern_str_deinit(&s);
    return 0;
}

static int out_append(struct jrt *rt, const char *p, size_t n)
{
    if (rt->out->len + n > JINJA_MAX_OUTPUT)
        return jrt_fail(rt, "output larger than %zu bytes", (size_t)JINJA_MAX_OUTPUT);
    return tern_str_append(rt->out, p, n) ? jrt_oom(rt) : 0;
}

static int out_value(struct jrt *rt, struct jv v)
{
    if (v.kind == JV_STR) return out_append(rt, v.u.s->data, v.u.s->len);
    size_t before = rt->out->len;
    if (jv_append_str(rt->out, v)) return jrt_oom(rt);
    if (rt->out->len > JINJA_MAX_OUTPUT) {
        rt->out->len = before;
        return jrt_fail(rt, "output larger than %zu bytes", (size_t)JINJA_MAX_OUTPUT);
    }
    return 0;
}

static int step(struct jrt *rt, const struct jnode *n)
{
    rt->line = n->line;
    if (++rt->steps > JINJA_MAX_STEPS) {
        if (!rt->err) rt->err_limit = true;
        return jrt_fail(rt, "template takes too long (more than %d steps)", JINJA_MAX_STEPS);
    }
    return 0;
}

/* ------------------------------------------------------------ attribute access */

int jinja_getattr(struct jrt *rt, struct jv obj, const char *name, size_t len, struct jv *out)
{
    if (obj.kind == JV_UNDEF) return jinja_undef_fail(rt, obj);
    bool found = false;
    if (obj.kind == JV_NS) {
        long i = jdict_find_str(obj.u.d, name, len);
        *out = i >= 0 ? obj.u.d->vals[i] : jinja_undef(rt, "'Namespace' has no attribute '%s'", name);
        return 0;
    }
    if (jinja_method(rt, obj, name, out, &found)) return -1;
    if (found) return 0;
    if (obj.kind == JV_DICT) {
        long i = jdict_find_str(obj.u.d, name, len);
        if (i >= 0) {
            *out = obj.u.d->vals[i];
            return 0;
        }
    }
    const char *tn = obj.kind == JV_NONE ? "None" : NULL;
    if (tn)
        *out = jinja_undef(rt, "None has no attribute '%s'", name);
    else
        *out = jinja_undef(rt, "'%s object' has no attribute '%s'", jv_type_name(obj), name);
    return 0;
}

static int index_of(struct jv idx, size_t n, int64_t *out)
{
    if (idx.kind != JV_INT && idx.kind != JV_BOOL) return -1;
    int64_t i = idx.kind == JV_BOOL ? idx.u.b : idx.u.i;
    if (i < 0) i += (int64_t)n;
    if (i < 0 || i >= (int64_t)n) return 1;
    *out = i;
    return 0;
}

int jinja_getitem(struct jrt *rt, struct jv obj, struct jv key, struct jv *out)
{
    if (obj.kind == JV_UNDEF) return jinja_undef_fail(rt, obj);
    int64_t i;
    if (obj.kind == JV_DICT || obj.kind == JV_NS) {
        long k = jdict_find(obj.u.d, key);
        if (k >= 0) {
            *out = obj.u.d->vals[k];
            return 0;
        }
    } else if (obj.kind == JV_LIST) {
        if (index_of(key, obj.u.l->n, &i) == 0) {
            *out = obj.u.l->items[i];
            return 0;
        }
    } else if (obj.kind == JV_STR) {
        size_t n = jutf8_len(obj.u.s->data, obj.u.s->len);
        if (index_of(key, n, &i) == 0) {
            size_t off = jutf8_offset(obj.u.s->data, obj.u.s->len, (size_t)i);
            size_t end = jutf8_offset(obj.u.s->data, obj.u.s->len, (size_t)i + 1);
            return jv_str(&rt->arena, obj.u.s->data + off, end - off, out) ? jrt_oom(rt) : 0;
        }
    }
    if (key.kind == JV_STR) return jinja_getattr(rt, obj, key.u.s->data, key.u.s->len, out);
    struct tern_str k = {0};
    jv_append_repr(&k, key);
    if (obj.kind == JV_NONE)
        *out = jinja_undef(rt, "None has no attribute %s", k.data ? k.data : "");
    else
        *out = jinja_undef(rt, "'%s object' has no attribute %s", jv_type_name(obj),
                           k.data ? k.data : "");
    tern_str_deinit(&k);
    return 0;
}

int jinja_gen(struct jrt *rt, const char *type, const char *func, struct jlist *items,
              const char *err, struct jv *out)
{
    struct jgen *g = jarena_alloc(&rt->arena, sizeof(*g));
    if (!g || (!items && !(items = jlist_new(&rt->arena, 0)))) return jrt_oom(rt);
    g->items = items;
    g->type = type;
    g->func = func;
    g->err = err;
    out->kind = JV_GEN;
    out->flags = 0;
    out->u.g = g;
    return 0;
}

int jinja_iterate(struct jrt *rt, struct jv v, struct jlist **out)
{
    switch (v.kind) {
    case JV_UNDEF: *out = jlist_new(&rt->arena, 0); break;
    case JV_LIST: *out = v.u.l; return 0;
    case JV_GEN: { /* a view of the remaining items; the generator is spent */
        struct jgen *g = v.u.g;
        struct jlist *l = jlist_new(&rt->arena, 0);
        if (!l) return jrt_oom(rt);
        l->items = g->items->items + g->pos;
        l->n = l->cap = g->items->n - g->pos;
        g->pos = g->items->n;
        if (g->err) return jrt_fail(rt, "%s", g->err);
        *out = l;
        return 0;
    }
    case JV_DICT: {
        struct jlist *l = jlist_new(&rt->arena, v.u.d->n);
        if (!l) return jrt_oom(rt);
        for (size_t i = 0; i < v.u.d->n; i++) l->items[i] = v.u.d->keys[i];
        l->n = v.u.d->n;
        *out = l;
        return 0;
    }
    case JV_STR: {
        struct jlist *l = jlist_new(&rt->arena, 0);
        size_t i = 0, adv;
        if (!l) return jrt_oom(rt);
        while (i < v.u.s->len) {
            jutf8_decode(v.u.s->data + i, v.u.s->len - i, &adv);
            struct jv c;
            if (jv_str(&rt->arena, v.u.s->data + i, adv, &c) || jlist_push(&rt->arena, l, c))
                return jrt_oom(rt);
            i += adv;
        }
        *out = l;
        return 0;
    }
    default: return jrt_fail(rt, "'%s' object is not iterable", jv_type_name(v));
    }
    return *out ? 0 : jrt_oom(rt);
}

/* ------------------------------------------------------------ expressions */

static int eval(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv *out);
static int exec_body(struct jrt *rt, struct jscope *s, const struct jnode *body);

/* Evaluates call-style arguments of node n into args (arena). */
static int eval_args(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jargs *args,
                     size_t extra_kw)
{
    memset(args, 0, sizeof(*args));
    args->pos = jarena_alloc(&rt->arena, (n->n + 1) * sizeof(struct jv));
    args->kw = jarena_alloc(&rt->arena, (n->n2 + extra_kw + 1) * sizeof(struct jv));
    args->kw_names = jarena_alloc(&rt->arena, (n->n2 + extra_kw + 1) * sizeof(char *));
    if (!args->pos || !args->kw || !args->kw_names) return jrt_oom(rt);
    for (size_t i = 0; i < n->n; i++)
        if (eval(rt, s, n->list[i], &args->pos[i])) return -1;
    args->n_pos = n->n;
    for (size_t i = 0; i < n->n2; i++) {
        if (eval(rt, s, n->list2[i], &args->kw[i])) return -1;
        args->kw_names[i] = n->names[i];
    }
    args->n_kw = n->n2;
    return 0;
}

/* Filter node over an optional injected base value (filter/set blocks). */
static int eval_filter(struct jrt *rt, struct jscope *s, const struct jnode *n,
                       const struct jv *base, struct jv *out)
{
    struct jv v;
    if (!n->a) {
        v = *base;
    } else if (n->a->type == JN_FILTER && base) {
        if (eval_filter(rt, s, n->a, base, &v)) return -1;
    } else if (eval(rt, s, n->a, &v)) {
        return -1;
    }
    struct jargs args;
    if (eval_args(rt, s, n, &args, 0)) return -1;
    rt->line = n->line;
    return jinja_filter(rt, n->str, v, &args, out);
}

static int eval_compare(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv *out)
{
    struct jv left;
    if (eval(rt, s, n->a, &left)) return -1;
    for (size_t i = 0; i < n->n; i++) {
        struct jv right;
        bool r;
        if (eval(rt, s, n->list[i], &right)) return -1;
        rt->line = n->line;
        if (jinja_cmp_op(rt, n->names[i], left, right, &r)) return -1;
        if (!r) {
            *out = jv_bool(false);
            return 0;
        }
        left = right;
    }
    *out = jv_bool(true);
    return 0;
}

static int eval_seq(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv *out)
{
    struct jlist *l = jlist_new(&rt->arena, n->n);
    if (!l) return jrt_oom(rt);
    for (size_t i = 0; i < n->n; i++)
        if (eval(rt, s, n->list[i], &l->items[i])) return -1;
    l->n = n->n;
    out->kind = JV_LIST;
    out->flags = n->type == JN_TUPLE ? JV_F_TUPLE : 0;
    out->u.l = l;
    return 0;
}

static int eval_dict(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv *out)
{
    struct jdict *d = jdict_new(&rt->arena, n->n);
    if (!d) return jrt_oom(rt);
    for (size_t i = 0; i < n->n; i++) {
        struct jv k, v;
        if (eval(rt, s, n->list[i], &k) || eval(rt, s, n->list2[i], &v)) return -1;
        if (k.kind == JV_LIST && !(k.flags & JV_F_TUPLE))
            return jrt_fail(rt, "unhashable type: 'list'");
        if (k.kind == JV_DICT) return jrt_fail(rt, "unhashable type: 'dict'");
        if (jdict_set(&rt->arena, d, k, v)) return jrt_oom(rt);
    }
    out->kind = JV_DICT;
    out->flags = 0;
    out->u.d = d;
    return 0;
}

static int eval_call(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv *out)
{
    struct jv callee;
    struct jargs args;
    if (eval(rt, s, n->a, &callee) || eval_args(rt, s, n, &args, 0)) return -1;
    rt->line = n->line;
    return jinja_call(rt, callee, &args, out);
}

static int eval_test(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv *out)
{
    struct jv v;
    struct jargs args;
    bool r;
    if (eval(rt, s, n->a, &v) || eval_args(rt, s, n, &args, 0)) return -1;
    rt->line = n->line;
    if (jinja_test(rt, n->str, v, &args, &r)) return -1;
    *out = jv_bool(n->op ? !r : r);
    return 0;
}

static int eval_name(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv *out)
{
    if (!jscope_get(s, n->str, out)) *out = jinja_undef(rt, "'%s' is undefined", n->str);
    return 0;
}

static int eval_slice(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv *out)
{
    struct jv obj, parts[3];
    const struct jnode *pn[3] = {n->b, n->c, n->d};
    if (eval(rt, s, n->a, &obj)) return -1;
    for (int k = 0; k < 3; k++)
        if (pn[k] && eval(rt, s, pn[k], &parts[k])) return -1;
    rt->line = n->line;
    return jinja_slice(rt, obj, pn[0] ? &parts[0] : NULL, pn[1] ? &parts[1] : NULL,
                       pn[2] ? &parts[2] : NULL, out);
}

static int eval_inner(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv *out)
{
    struct jv a, b;
    switch (n->type) {
    case JN_LIT: *out = n->lit; return 0;
    case JN_NAME: return eval_name(rt, s, n, out);
    case JN_LIST:
    case JN_TUPLE: return eval_seq(rt, s, n, out);
    case JN_DICT: return eval_dict(rt, s, n, out);
    case JN_ATTR:
        if (eval(rt, s, n->a, &a)) return -1;
        rt->line = n->line;
        return jinja_getattr(rt, a, n->str, n->str_len, out);
    case JN_ITEM:
        if (eval(rt, s, n->a, &a) || eval(rt, s, n->b, &b)) return -1;
        rt->line = n->line;
        return jinja_getitem(rt, a, b, out);
    case JN_SLICE: return eval_slice(rt, s, n, out);
    case JN_CALL: return eval_call(rt, s, n, out);
    case JN_FILTER: return eval_filter(rt, s, n, NULL, out);
    case JN_TEST: return eval_test(rt, s, n, out);
    case JN_BINOP:
        if (eval(rt, s, n->a, &a) || eval(rt, s, n->b, &b)) return -1;
        rt->line = n->line;
        return jinja_binop(rt, n->op, a, b, out);
    case JN_CONCAT:
        if (eval(rt, s, n->a, &a) || eval(rt, s, n->b, &b)) return -1;
        if (jinja_to_str(rt, a, &a) || jinja_to_str(rt, b, &b)) return -1;
        return jinja_binop(rt, '+', a, b, out);
    case JN_UNARY:
        if (eval(rt, s, n->a, &a)) return -1;
        rt->line = n->line;
        if (n->op == '!') {
            *out = jv_bool(!jv_truthy(a));
            return 0;
        }
        return jinja_unary(rt, n->op, a, out);
    case JN_AND:
    case JN_OR:
        if (eval(rt, s, n->a, &a)) return -1;
        if (jv_truthy(a) == (n->type == JN_OR)) {
            *out = a;
            return 0;
        }
        return eval(rt, s, n->b, out);
    case JN_COND:
        if (eval(rt, s, n->a, &a)) return -1;
        if (jv_truthy(a)) return eval(rt, s, n->b, out);
        if (n->c) return eval(rt, s, n->c, out);
        *out = jinja_undef(rt, "the inline if-expression evaluated to false and no else section was defined.");
        return 0;
    case JN_COMPARE: return eval_compare(rt, s, n, out);
    default: return jrt_fail(rt, "internal: statement used as expression");
    }
}

static int eval(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv *out)
{
    if (step(rt, n)) return -1;
    if (++rt->depth > JINJA_MAX_DEPTH * 4) {
        rt->depth--;
        return jrt_fail(rt, "expression nested too deeply");
    }
    int rc = eval_inner(rt, s, n, out);
    rt->depth--;
    return rc;
}

/* ------------------------------------------------------------ macros */

/* Renders `body` into a fresh buffer and returns it as a string value. */
static int capture(struct jrt *rt, struct jscope *s, const struct jnode *body, struct jv *out)
{
    struct tern_str buf = {0};
    struct tern_str *saved = rt->out;
    rt->out = &buf;
    int rc = exec_body(rt, s, body);
    rt->out = saved;
    if (rc == X_OK && jv_str(&rt->arena, buf.data ? buf.data : "", buf.len, out)) rc = jrt_oom(rt);
    tern_str_deinit(&buf);
    if (rc == X_BREAK || rc == X_CONTINUE) return jrt_fail(rt, "break or continue outside a loop");
    return rc;
}

/* Extra positional/keyword arguments become `varargs` / `kwargs` when the macro
 * reads them, as jinja2 does; otherwise they are an error. */
static int macro_extras(struct jrt *rt, struct jfunc *fn, struct jscope *s, struct jargs *args,
                        struct jv *caller)
{
    const struct jnode *m = fn->macro;
    struct jlist *va = jlist_new(&rt->arena, 0);
    struct jdict *kw = jdict_new(&rt->arena, 0);
    if (!va || !kw) return jrt_oom(rt);
    if (args->n_pos > m->n_names && !fn->varargs)
        return jrt_fail(rt, "macro '%s' takes not more than %zu argument(s)", fn->name, m->n_names);
    for (size_t i = m->n_names; i < args->n_pos; i++)
        if (jlist_push(&rt->arena, va, args->pos[i])) return jrt_oom(rt);
    for (size_t k = 0; k < args->n_kw; k++) {
        bool known = strcmp(args->kw_names[k], "caller") == 0;
        if (known) *caller = args->kw[k];
        for (size_t p = 0; p < m->n_names && !known; p++)
            known = strcmp(m->names[p], args->kw_names[k]) == 0;
        if (known) continue;
        if (!fn->kwargs)
            return jrt_fail(rt, "macro '%s' takes no keyword argument '%s'", fn->name,
                            args->kw_names[k]);
        struct jv key;
        if (jv_str(&rt->arena, args->kw_names[k], strlen(args->kw_names[k]), &key) ||
            jdict_set(&rt->arena, kw, key, args->kw[k]))
            return jrt_oom(rt);
    }
    struct jv vv = {JV_LIST, JV_F_TUPLE, {0}}, kv = {JV_DICT, 0, {0}};
    vv.u.l = va;
    kv.u.d = kw;
    if (fn->varargs && jscope_set(rt, s, "varargs", vv)) return -1;
    if (fn->kwargs && jscope_set(rt, s, "kwargs", kv)) return -1;
    return 0;
}

static int call_macro(struct jrt *rt, struct jfunc *fn, struct jargs *args, struct jv *out)
{
    const struct jnode *m = fn->macro;
    struct jscope *s = jscope_new(rt, fn->closure);
    if (!s) return jrt_oom(rt);
    struct jv caller = fn->caller;
    if (macro_extras(rt, fn, s, args, &caller)) return -1;
    for (size_t p = 0; p < m->n_names; p++) {
        struct jv *v = jargs_get(args, p, NULL);
        struct jv val;
        for (size_t k = 0; !v && k < args->n_kw; k++)
            if (strcmp(m->names[p], args->kw_names[k]) == 0) v = &args->kw[k];
        if (v) val = *v;
        else if (m->list2[p] && eval(rt, s, m->list2[p], &val)) return -1;
        else if (!m->list2[p]) val = jinja_undef(rt, "parameter '%s' was not provided", m->names[p]);
        if (jscope_set(rt, s, m->names[p], val)) return -1;
    }
    if (caller.kind != JV_UNDEF && jscope_set(rt, s, "caller", caller)) return -1;
    if (++rt->depth > JINJA_MAX_DEPTH) {
        rt->depth--;
        return jrt_fail(rt, "maximum recursion depth exceeded (macro '%s')", fn->name);
    }
    int rc = capture(rt, s, m->c, out);
    rt->depth--;
    return rc;
}

int jinja_call(struct jrt *rt, struct jv callee, struct jargs *args, struct jv *out)
{
    if (callee.kind == JV_UNDEF) return jinja_undef_fail(rt, callee);
    if (callee.kind != JV_FUNC) return jrt_fail(rt, "'%s' object is not callable", jv_type_name(callee));
    struct jfunc *fn = callee.u.fn;
    if (fn->macro) return call_macro(rt, fn, args, out);
    return fn->call(rt, fn, args, out);
}

/* Whether any expression under n reads variable `name`. */
static bool reads_name(const struct jnode *n, const char *name, int depth)
{
    if (!n || depth > JINJA_MAX_DEPTH * 4) return false;
    if (n->type == JN_NAME && strcmp(n->str, name) == 0) return true;
    if (reads_name(n->a, name, depth + 1) || reads_name(n->b, name, depth + 1) ||
        reads_name(n->c, name, depth + 1) || reads_name(n->d, name, depth + 1))
        return true;
    for (size_t i = 0; i < n->n; i++)
        if (reads_name(n->list[i], name, depth + 1)) return true;
    for (size_t i = 0; i < n->n2; i++)
        if (reads_name(n->list2[i], name, depth + 1)) return true;
    return false;
}

static int make_macro(struct jrt *rt, struct jscope *s, const struct jnode *n, const char *name,
                      struct jv *out)
{
    struct jfunc *fn = jarena_alloc(&rt->arena, sizeof(*fn));
    if (!fn) return jrt_oom(rt);
    fn->name = name;
    fn->macro = (struct jnode *)n;
    fn->closure = s;
    fn->caller = jv_undef();
    fn->varargs = reads_name(n->c, "varargs", 0);
    fn->kwargs = reads_name(n->c, "kwargs", 0);
    out->kind = JV_FUNC;
    out->flags = 0;
    out->u.fn = fn;
    return 0;
}

/* ------------------------------------------------------------ statements */

static int exec_node(struct jrt *rt, struct jscope *s, const struct jnode *n);

/* Binds for/set targets: one name, or a tuple unpacked from an iterable. */
static int bind(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv v)
{
    if (!n->op) return jscope_set(rt, s, n->names[0], v);
    struct jlist *items;
    if (jinja_iterate(rt, v, &items)) return -1;
    if (items->n != n->n_names)
        return jrt_fail(rt, items->n > n->n_names ? "too many values to unpack (expected %zu)"
                                                  : "not enough values to unpack (expected %zu)",
                        n->n_names);
    for (size_t i = 0; i < n->n_names; i++)
        if (jscope_set(rt, s, n->names[i], items->items[i])) return -1;
    return 0;
}

static int loop_cycle(struct jrt *rt, struct jfunc *fn, struct jargs *args, struct jv *out)
{
    if (args->n_pos == 0) return jrt_fail(rt, "no items for cycling given");
    *out = args->pos[fn->self.u.i % (int64_t)args->n_pos];
    return 0;
}

static int set_key(struct jrt *rt, struct jdict *d, const char *k, struct jv v)
{
    struct jv key;
    if (jv_str(&rt->arena, k, strlen(k), &key) || jdict_set(&rt->arena, d, key, v))
        return jrt_oom(rt);
    return 0;
}

/* The `loop` object of iteration i of n. */
static int make_loop(struct jrt *rt, struct jlist *items, size_t i, struct jv *out)
{
    size_t n = items->n;
    struct jdict *d = jdict_new(&rt->arena, 16);
    struct jfunc *cyc = jarena_alloc(&rt->arena, sizeof(*cyc));
    if (!d || !cyc) return jrt_oom(rt);
    cyc->name = "cycle";
    cyc->call = loop_cycle;
    cyc->self = jv_int((int64_t)i);
    struct jv fv = {JV_FUNC, 0, {0}};
    fv.u.fn = cyc;
    if (set_key(rt, d, "index0", jv_int((int64_t)i)) ||
        set_key(rt, d, "index", jv_int((int64_t)i + 1)) ||
        set_key(rt, d, "revindex", jv_int((int64_t)(n - i))) ||
        set_key(rt, d, "revindex0", jv_int((int64_t)(n - i - 1))) ||
        set_key(rt, d, "first", jv_bool(i == 0)) || set_key(rt, d, "last", jv_bool(i + 1 == n)) ||
        set_key(rt, d, "length", jv_int((int64_t)n)) || set_key(rt, d, "depth", jv_int(1)) ||
        set_key(rt, d, "depth0", jv_int(0)) ||
        set_key(rt, d, "previtem",
                i > 0 ? items->items[i - 1] : jinja_undef(rt, "there is no previous item")) ||
        set_key(rt, d, "nextitem",
                i + 1 < n ? items->items[i + 1] : jinja_undef(rt, "there is no next item")) ||
        set_key(rt, d, "cycle", fv))
        return -1;
    out->kind = JV_DICT;
    out->flags = 0;
    out->u.d = d;
    return 0;
}

static int exec_for(struct jrt *rt, struct jscope *s, const struct jnode *n)
{
    struct jv seq;
    struct jlist *items;
    if (eval(rt, s, n->a, &seq) || jinja_iterate(rt, seq, &items)) return X_ERR;
    if (n->b) { /* `for x in y if cond`: filter first, so loop.* counts kept items */
        struct jlist *kept = jlist_new(&rt->arena, items->n);
        if (!kept) return jrt_oom(rt);
        for (size_t i = 0; i < items->n; i++) {
            struct jscope *t = jscope_new(rt, s);
            struct jv c;
            if (!t) return jrt_oom(rt);
            if (bind(rt, t, n, items->items[i]) || eval(rt, t, n->b, &c)) return X_ERR;
            if (jv_truthy(c)) kept->items[kept->n++] = items->items[i];
        }
        items = kept;
    }
    for (size_t i = 0; i < items->n; i++) {
        struct jscope *it = jscope_new(rt, s);
        struct jv loop;
        if (!it) return jrt_oom(rt);
        if (bind(rt, it, n, items->items[i]) || make_loop(rt, items, i, &loop) ||
            jscope_set(rt, it, "loop", loop))
            return X_ERR;
        int rc = exec_body(rt, it, n->c);
        if (rc == X_ERR) return X_ERR;
        if (rc == X_BREAK) break;
    }
    if (items->n == 0 && n->d) return exec_body(rt, s, n->d);
    return X_OK;
}

static int assign(struct jrt *rt, struct jscope *s, const struct jnode *n, struct jv v)
{
    if (n->op != 2) return bind(rt, s, n, v);
    struct jv ns;
    if (!jscope_get(s, n->str, &ns) || ns.kind != JV_NS)
        return jrt_fail(rt, "cannot assign attribute on non-namespace object");
    if (n->names[0][0] == '_')
        return jrt_fail(rt, "Chat templates cannot store underscore-prefixed attributes on a "
                            "namespace, but got '%s'. Please rename the attribute.",
                        n->names[0]);
    struct jv key;
    if (jv_str(&rt->arena, n->names[0], strlen(n->names[0]), &key) ||
        jdict_set(&rt->arena, ns.u.d, key, v))
        return jrt_oom(rt);
    return 0;
}

static int exec_callblock(struct jrt *rt, struct jscope *s, const struct jnode *n)
{
    const struct jnode *call = n->a;
    struct jv caller, callee, result;
    struct jargs args;
    if (make_macro(rt, s, n, "caller", &caller)) return X_ERR;
    if (eval(rt, s, call->a, &callee) || eval_args(rt, s, call, &args, 1)) return X_ERR;
    args.kw_names[args.n_kw] = "caller";
    args.kw[args.n_kw++] = caller;
    rt->line = n->line;
    if (jinja_call(rt, callee, &args, &result)) return X_ERR;
    return out_value(rt, result);
}

static int exec_node(struct jrt *rt, struct jscope *s, const struct jnode *n)
{
    struct jv v;
    if (step(rt, n)) return X_ERR;
    switch (n->type) {
    case JN_BODY: return exec_body(rt, s, n);
    case JN_TEXT: return out_append(rt, n->str, n->str_len);
    case JN_OUTPUT:
        if (eval(rt, s, n->a, &v)) return X_ERR;
        return out_value(rt, v);
    case JN_IF:
        if (eval(rt, s, n->a, &v)) return X_ERR;
        if (jv_truthy(v)) return exec_body(rt, s, n->b);
        return n->c ? exec_node(rt, s, n->c) : X_OK;
    case JN_FOR: return exec_for(rt, s, n);
    case JN_SET:
        if (eval(rt, s, n->a, &v)) return X_ERR;
        return assign(rt, s, n, v);
    case JN_SETBLOCK:
        if (capture(rt, s, n->c, &v)) return X_ERR;
        if (n->a && eval_filter(rt, s, n->a, &v, &v)) return X_ERR;
        return assign(rt, s, n, v);
    case JN_MACRO:
        if (make_macro(rt, s, n, n->str, &v)) return X_ERR;
        return jscope_set(rt, s, n->str, v);
    case JN_CALLBLOCK: return exec_callblock(rt, s, n);
    case JN_FILTERBLOCK:
        if (capture(rt, s, n->c, &v) || eval_filter(rt, s, n->a, &v, &v)) return X_ERR;
        return out_value(rt, v);
    case JN_BREAK: return X_BREAK;
    case JN_CONTINUE: return X_CONTINUE;
    default:
        if (eval(rt, s, n, &v)) return X_ERR;
        return X_OK;
    }
}

static int exec_body(struct jrt *rt, struct jscope *s, const struct jnode *body)
{
    if (++rt->depth > JINJA_MAX_DEPTH * 4) {
        rt->depth--;
        return jrt_fail(rt, "blocks nested too deeply");
    }
    int rc = X_OK;
    for (size_t i = 0; i < body->n && rc == X_OK; i++) rc = exec_node(rt, s, body->list[i]);
    rt->depth--;
    return rc;
}

int jinja_render(struct jrt *rt, struct jnode *body, struct jdict *ctx)
{
    struct jscope *g = jscope_new(rt, NULL), *top;
    if (!g) return jrt_oom(rt);
    if (jinja_add_globals(rt, g)) return -1;
    for (size_t i = 0; i < ctx->n; i++) {
        if (ctx->keys[i].kind != JV_STR) continue;
        if (jscope_set(rt, g, ctx->keys[i].u.s->data, ctx->vals[i])) return -1;
    }
    rt->globals = g;
    if (!(top = jscope_new(rt, g))) return jrt_oom(rt);
    int rc = exec_body(rt, top, body);
    if (rc == X_BREAK || rc == X_CONTINUE) return jrt_fail(rt, "break or continue outside a loop");
    return rc == X_OK ? 0 : -1;
}
