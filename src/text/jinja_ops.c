/*
 * jinja_ops.c — Python's operators for template values: + - * / // % **,
 * unary minus, comparisons (== != < <= > >= in, not in), ordering, slicing
 * with steps, and the errors an Undefined raises when misused.
 * Integers are 64-bit; where Python would grow a big integer we fail cleanly.
 * Depends on jinja.h.
 */
#include "text/jinja.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int jinja_undef_fail(struct jrt *rt, struct jv u)
{
    if (u.flags & JV_F_UNSAFE)
        return jrt_fail(rt, "%s", u.u.s ? u.u.s->data : "access to an unsafe attribute");
    return jrt_fail(rt, "%s", u.u.s ? u.u.s->data : "value is undefined");
}

static int type_error(struct jrt *rt, const char *op, struct jv a, struct jv b)
{
    if (a.kind == JV_UNDEF) return jinja_undef_fail(rt, a);
    if (b.kind == JV_UNDEF) return jinja_undef_fail(rt, b);
    return jrt_fail(rt, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
                    jv_type_name(b));
}

static int64_t as_int(struct jv v) { return v.kind == JV_BOOL ? (int64_t)v.u.b : v.u.i; }

static int repeat(struct jrt *rt, struct jv seq, int64_t times, struct jv *out)
{
    if (times < 0) times = 0;
    if (seq.kind == JV_STR) {
        size_t n = seq.u.s->len;
        if (n && (uint64_t)times > JINJA_MAX_OUTPUT / n) return jrt_fail(rt, "string too long");
        struct jstr *s = jstr_alloc(&rt->arena, n * (size_t)times);
        if (!s) return jrt_oom(rt);
        for (int64_t i = 0; i < times; i++) memcpy(s->data + (size_t)i * n, seq.u.s->data, n);
        out->kind = JV_STR;
        out->flags = 0;
        out->u.s = s;
        return 0;
    }
    size_t n = seq.u.l->n;
    if (n && (uint64_t)times > (JINJA_MAX_OUTPUT / 16) / n) return jrt_fail(rt, "list too long");
    struct jlist *l = jlist_new(&rt->arena, n * (size_t)times);
    if (!l) return jrt_oom(rt);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < n; k++) l->items[l->n++] = seq.u.l->items[k];
    *out = seq;
    out->u.l = l;
    return 0;
}

static int concat(struct jrt *rt, struct jv a, struct jv b, struct jv *out)
{
    if (a.kind == JV_STR) {
        size_t n = a.u.s->len + b.u.s->len;
        if (n > JINJA_MAX_OUTPUT) return jrt_fail(rt, "string too long");
        struct jstr *s = jstr_alloc(&rt->arena, n);
        if (!s) return jrt_oom(rt);
        memcpy(s->data, a.u.s->data, a.u.s->len);
        memcpy(s->data + a.u.s->len, b.u.s->data, b.u.s->len);
        out->kind = JV_STR;
        out->flags = 0;
        out->u.s = s;
        return 0;
    }
    struct jlist *l = jlist_new(&rt->arena, a.u.l->n + b.u.l->n);
    if (!l) return jrt_oom(rt);
    for (size_t i = 0; i < a.u.l->n; i++) l->items[l->n++] = a.u.l->items[i];
    for (size_t i = 0; i < b.u.l->n; i++) l->items[l->n++] = b.u.l->items[i];
    *out = a;
    out->u.l = l;
    return 0;
}

static double py_fmod(double a, double b)
{
    double m = fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return m;
}

static int int_op(struct jrt *rt, int op, int64_t x, int64_t y, struct jv *out)
{
    int64_t r = 0;
    bool ovf = false;
    switch (op) {
    case '+': ovf = __builtin_add_overflow(x, y, &r); break;
    case '-': ovf = __builtin_sub_overflow(x, y, &r); break;
    case '*': ovf = __builtin_mul_overflow(x, y, &r); break;
    case 'F':
    case '%':
        if (y == 0) return jrt_fail(rt, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
            ovf = op == 'F';
            r = 0;
            break;
        }
        r = op == 'F' ? x / y : x % y;
        if (op == 'F' && (x % y != 0) && ((x < 0) != (y < 0))) r--;
        if (op == '%' && r != 0 && ((r < 0) != (y < 0))) r += y;
        break;
    case 'P':
        if (y < 0) {
            *out = jv_float(pow((double)x, (double)y));
            return 0;
        }
        r = 1;
        for (int64_t i = 0; i < y && !ovf; i++) {
            ovf = __builtin_mul_overflow(r, x, &r);
            if (r == 0 || r == 1) break;
        }
        break;
    }
    if (ovf) return jrt_fail(rt, "integer overflow (values beyond 64 bits are not supported)");
    *out = jv_int(r);
    return 0;
}

static int float_op(struct jrt *rt, int op, double x, double y, struct jv *out)
{
    double r = 0;
    switch (op) {
    case '+': r = x + y; break;
    case '-': r = x - y; break;
    case '*': r = x * y; break;
    case '/':
        if (y == 0) return jrt_fail(rt, "division by zero");
        r = x / y;
        break;
    case 'F':
        if (y == 0) return jrt_fail(rt, "float floor division by zero");
        r = floor(x / y);
        break;
    case '%':
        if (y == 0) return jrt_fail(rt, "float modulo");
        r = py_fmod(x, y);
        break;
    case 'P': r = pow(x, y); break;
    }
    *out = jv_float(r);
    return 0;
}

static int str_format_percent(struct jrt *rt, struct jv fmt, struct jv arg, struct jv *out);

int jinja_binop(struct jrt *rt, int op, struct jv a, struct jv b, struct jv *out)
{
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    const char *opname = op == '+' ? names[0] : op == '-' ? names[1] : op == '*' ? names[2]
                       : op == '/' ? names[3] : op == 'F' ? names[4] : op == '%' ? names[5]
                                                                     : names[6];
    if (jv_is_number(a) && jv_is_number(b)) {
        if (op != '/' && a.kind != JV_FLOAT && b.kind != JV_FLOAT)
            return int_op(rt, op, as_int(a), as_int(b), out);
        return float_op(rt, op, jv_as_double(a), jv_as_double(b), out);
    }
    if (op == '+' && a.kind == JV_STR && b.kind == JV_STR) return concat(rt, a, b, out);
    if (op == '+' && a.kind == JV_LIST && b.kind == JV_LIST &&
        (a.flags & JV_F_TUPLE) == (b.flags & JV_F_TUPLE))
        return concat(rt, a, b, out);
    if (op == '*' && (a.kind == JV_STR || a.kind == JV_LIST) && (b.kind == JV_INT || b.kind == JV_BOOL))
        return repeat(rt, a, as_int(b), out);
    if (op == '*' && (b.kind == JV_STR || b.kind == JV_LIST) && (a.kind == JV_INT || a.kind == JV_BOOL))
        return repeat(rt, b, as_int(a), out);
    if (op == '%' && a.kind == JV_STR) return str_format_percent(rt, a, b, out);
    if (op == '+' && a.kind == JV_STR && b.kind != JV_UNDEF)
        return jrt_fail(rt, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    return type_error(rt, opname, a, b);
}

int jinja_unary(struct jrt *rt, int op, struct jv a, struct jv *out)
{
    if (a.kind == JV_INT || a.kind == JV_BOOL) {
        int64_t x = as_int(a);
        if (op == '-' && x == INT64_MIN) return jrt_fail(rt, "integer overflow");
        *out = jv_int(op == '-' ? -x : x);
        return 0;
    }
    if (a.kind == JV_FLOAT) {
        *out = jv_float(op == '-' ? -a.u.f : a.u.f);
        return 0;
    }
    if (a.kind == JV_UNDEF) return jinja_undef_fail(rt, a);
    return jrt_fail(rt, "bad operand type for unary %c: '%s'", op, jv_type_name(a));
}

int jinja_compare(struct jrt *rt, struct jv a, struct jv b, int *cmp)
{
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t x = as_int(a), y = as_int(b);
            *cmp = x < y ? -1 : x > y;
        } else {
            double x = jv_as_double(a), y = jv_as_double(b);
            *cmp = x < y ? -1 : x > y;
        }
        return 0;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->data, b.u.s->data, n);
        if (c == 0) c = a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
        *cmp = c < 0 ? -1 : c > 0;
        return 0;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST && (a.flags & JV_F_TUPLE) == (b.flags & JV_F_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->items[i], b.u.l->items[i])) continue;
            if (++rt->depth > JINJA_MAX_DEPTH * 4) {
                rt->depth--;
                return jrt_fail(rt, "values nested too deeply to compare");
            }
            int rc = jinja_compare(rt, a.u.l->items[i], b.u.l->items[i], cmp);
            rt->depth--;
            return rc;
        }
        *cmp = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return 0;
    }
    if (a.kind == JV_UNDEF) return jinja_undef_fail(rt, a);
    if (b.kind == JV_UNDEF) return jinja_undef_fail(rt, b);
    return jrt_fail(rt, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
                    jv_type_name(b));
}

static int check_hashable(struct jrt *rt, struct jv v, int depth)
{
    if (v.kind == JV_DICT || (v.kind == JV_LIST && !(v.flags & JV_F_TUPLE)))
        return jrt_fail(rt, "unhashable type: '%s'", jv_type_name(v));
    if (v.kind != JV_LIST) return 0;
    if (depth > JINJA_MAX_DEPTH) return jrt_fail(rt, "tuple nested too deeply to hash");
    for (size_t i = 0; i < v.u.l->n; i++)
        if (check_hashable(rt, v.u.l->items[i], depth + 1)) return -1;
    return 0;
}

int jinja_check_hashable(struct jrt *rt, struct jv v)
{
    return check_hashable(rt, v, 0);
}

static int contains(struct jrt *rt, struct jv item, struct jv seq, bool *out)
{
    switch (seq.kind) {
    case JV_GEN: { /* consumes up to the first equal item, as Python does */
        struct jgen *g = seq.u.g;
        *out = false;
        while (g->pos < g->items->n && !*out) *out = jv_equal(item, g->items->items[g->pos++]);
        if (!*out && g->err) return jrt_fail(rt, "%s", g->err);
        return 0;
    }
    case JV_UNDEF: *out = false; return 0;
    case JV_STR:
        if (item.kind != JV_STR)
            return jrt_fail(rt, "'in <string>' requires string as left operand, not %s",
                            jv_type_name(item));
        *out = item.u.s->len == 0 ||
               memmem(seq.u.s->data, seq.u.s->len, item.u.s->data, item.u.s->len) != NULL;
        return 0;
    case JV_LIST:
        *out = false;
        for (size_t i = 0; i < seq.u.l->n && !*out; i++) *out = jv_equal(item, seq.u.l->items[i]);
        return 0;
    case JV_DICT:
    case JV_NS:
        if (jinja_check_hashable(rt, item)) return -1;
        *out = jdict_find(seq.u.d, item) >= 0;
        return 0;
    default:
        return jrt_fail(rt, "argument of type '%s' is not iterable", jv_type_name(seq));
    }
}

int jinja_cmp_op(struct jrt *rt, const char *op, struct jv a, struct jv b, bool *out)
{
    int c;
    if (strcmp(op, "==") == 0) *out = jv_equal(a, b);
    else if (strcmp(op, "!=") == 0) *out = !jv_equal(a, b);
    else if (strcmp(op, "in") == 0) return contains(rt, a, b, out);
    else if (strcmp(op, "notin") == 0) {
        if (contains(rt, a, b, out)) return -1;
        *out = !*out;
    } else {
        if (jinja_compare(rt, a, b, &c)) return -1;
        if (strcmp(op, "<") == 0) *out = c < 0;
        else if (strcmp(op, "<=") == 0) *out = c <= 0;
        else if (strcmp(op, ">") == 0) *out = c > 0;
        else *out = c >= 0;
    }
    return 0;
}

/* ------------------------------------------------------------ slicing */

static int slice_index(struct jrt *rt, struct jv *v, int64_t *out)
{
    if (!v || v->kind == JV_NONE) return 1;
    if (v->kind != JV_INT && v->kind != JV_BOOL)
        return jrt_fail(rt, "slice indices must be integers or None");
    *out = as_int(*v);
    return 0;
}

/* Python's slice.indices(): fills start/stop/step and the element count. */
static int slice_bounds(struct jrt *rt, size_t len, struct jv *start, struct jv *stop,
                        struct jv *step, int64_t *b, int64_t *st, size_t *count)
{
    int64_t n = (int64_t)len, s = 1, lo = 0, hi = 0;
    int r = slice_index(rt, step, &s);
    if (r < 0) return -1;
    if (s == 0) return jrt_fail(rt, "slice step cannot be zero");
    int64_t def_lo = s > 0 ? 0 : n - 1, def_hi = s > 0 ? n : -1;
    if ((r = slice_index(rt, start, &lo)) < 0) return -1;
    if (r) lo = def_lo;
    else {
        if (lo < 0) lo += n;
        if (lo < 0) lo = s > 0 ? 0 : -1;
        if (lo > n) lo = s > 0 ? n : n - 1;
        if (lo == n && s < 0) lo = n - 1;
    }
    if ((r = slice_index(rt, stop, &hi)) < 0) return -1;
    if (r) hi = def_hi;
    else {
        if (hi < 0) hi += n;
        if (hi < 0) hi = s > 0 ? 0 : -1;
        if (hi > n) hi = n;
    }
    int64_t cnt = 0;
    if (s > 0 && hi > lo) cnt = (hi - lo + s - 1) / s;
    if (s < 0 && lo > hi) cnt = (lo - hi + (-s) - 1) / (-s);
    *b = lo;
    *st = s;
    *count = (size_t)cnt;
    return 0;
}

int jinja_slice(struct jrt *rt, struct jv obj, struct jv *start, struct jv *stop, struct jv *step,
                struct jv *out)
{
    int64_t b, s;
    size_t cnt;
    if (obj.kind == JV_UNDEF) return jinja_undef_fail(rt, obj);
    if (obj.kind == JV_LIST) {
        if (slice_bounds(rt, obj.u.l->n, start, stop, step, &b, &s, &cnt)) return -1;
        struct jlist *l = jlist_new(&rt->arena, cnt);
        if (!l) return jrt_oom(rt);
        for (size_t i = 0; i < cnt; i++) l->items[i] = obj.u.l->items[b + (int64_t)i * s];
        l->n = cnt;
        *out = obj;
        out->u.l = l;
        return 0;
    }
    if (obj.kind == JV_STR) {
        const char *p = obj.u.s->data;
        size_t n = obj.u.s->len, ncp = jutf8_len(p, n);
        if (slice_bounds(rt, ncp, start, stop, step, &b, &s, &cnt)) return -1;
        size_t *offs = jarena_alloc(&rt->arena, (ncp + 1) * sizeof(size_t));
        if (!offs) return jrt_oom(rt);
        for (size_t i = 0, o = 0; i <= ncp; i++) {
            offs[i] = o;
            size_t adv = 0;
            if (o < n) jutf8_decode(p + o, n - o, &adv);
            o += adv;
        }
        struct tern_str t = {0};
        for (size_t i = 0; i < cnt; i++) {
            int64_t k = b + (int64_t)i * s;
            if (tern_str_append(&t, p + offs[k], offs[k + 1] - offs[k])) {
                tern_str_deinit(&t);
                return jrt_oom(rt);
            }
        }
        int rc = jv_str(&rt->arena, t.data ? t.data : "", t.len, out);
        tern_str_deinit(&t);
        return rc ? jrt_oom(rt) : 0;
    }
    return jrt_fail(rt, "'%s' object is not subscriptable", jv_type_name(obj));
}

/* ------------------------------------------------------------ "%s" % x */

/* One %-conversion: flags, width, precision and type as Python's printf-style
 * formatting takes them (s r d i f F e E g G x X o c). */
static int format_one(struct jrt *rt, struct tern_str *t, const char *spec, size_t spec_len,
                      char conv, struct jv v)
{
    char fmt[40], buf[512];
    if (spec_len > 20) return jrt_fail(rt, "format spec too long");
    if (conv == 's' || conv == 'r') {
        struct tern_str s = {0};
        if (conv == 's' ? jv_append_str(&s, v) : jv_append_repr(&s, v)) return jrt_oom(rt);
        snprintf(fmt, sizeof fmt, "%%%.*ss", (int)spec_len, spec);
        int n = snprintf(NULL, 0, fmt, s.data ? s.data : "");
        char *o = n >= 0 ? tern_malloc((size_t)n + 1) : NULL;
        if (o) snprintf(o, (size_t)n + 1, fmt, s.data ? s.data : "");
        int rc = o && tern_str_appendz(t, o) == TERN_OK ? 0 : jrt_oom(rt);
        tern_free(o);
        tern_str_deinit(&s);
        return rc;
    }
    if (!jv_is_number(v))
        return jrt_fail(rt, "%%%c format: a real number is required, not %s", conv, jv_type_name(v));
    if (strchr("dioxXc", conv)) {
        int64_t x = v.kind == JV_FLOAT ? (int64_t)v.u.f : as_int(v);
        char c = conv == 'i' ? 'd' : conv;
        snprintf(fmt, sizeof fmt, "%%%.*sll%c", (int)spec_len, spec, c == 'c' ? 'd' : c);
        snprintf(buf, sizeof buf, fmt, (long long)x);
    } else {
        snprintf(fmt, sizeof fmt, "%%%.*s%c", (int)spec_len, spec, conv);
        snprintf(buf, sizeof buf, fmt, jv_as_double(v));
    }
    return tern_str_appendz(t, buf) ? jrt_oom(rt) : 0;
}

static int str_format_percent(struct jrt *rt, struct jv fmt, struct jv arg, struct jv *out)
{
    struct tern_str t = {0};
    size_t ai = 0;
    bool tuple = arg.kind == JV_LIST && (arg.flags & JV_F_TUPLE);
    const char *p = fmt.u.s->data;
    size_t n = fmt.u.s->len;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%' || i + 1 >= n) {
            if (tern_str_appendc(&t, p[i])) goto oom;
            continue;
        }
        size_t st = ++i;
        while (i < n && strchr("-+ #0123456789.", p[i])) i++;
        if (i >= n) goto bad_spec;
        char c = p[i];
        if (c == '%') {
            if (tern_str_appendc(&t, '%')) goto oom;
            continue;
        }
        if (!strchr("srdifFeEgGxXoc", c)) goto bad_spec;
        struct jv v;
        if (tuple) {
            if (ai >= arg.u.l->n) goto bad;
            v = arg.u.l->items[ai++];
        } else {
            if (ai++ > 0) goto bad;
            v = arg;
        }
        if (format_one(rt, &t, p + st, i - st, c, v)) {
            tern_str_deinit(&t);
            return -1;
        }
    }
    if (tuple ? ai != arg.u.l->n : ai == 0) goto bad;
    if (jv_str(&rt->arena, t.data ? t.data : "", t.len, out)) goto oom;
    tern_str_deinit(&t);
    return 0;
bad_spec:
    tern_str_deinit(&t);
    return jrt_fail(rt, "unsupported format character in %% formatting");
bad:
    tern_str_deinit(&t);
    return jrt_fail(rt, "not all arguments converted during string formatting");
oom:
    tern_str_deinit(&t);
    return jrt_oom(rt);
}
