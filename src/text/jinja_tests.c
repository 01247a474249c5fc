/*
 * jinja_tests.c — jinja2's builtin tests (`x is defined`, `x is divisibleby 3`,
 * ...), with Python's type rules (bool counts as a number, strings are
 * sequences). Depends on jinja.h.
 */
#include "text/jinja.h"

#include <math.h>
#include <string.h>

int jinja_cmp_op(struct jrt *rt, const char *op, struct jv a, struct jv b, bool *out);
int jinja_str_case(struct jrt *rt, struct jv s, int mode, struct jv *out);

static int arg0(struct jrt *rt, struct jargs *a, const char *test, struct jv *out)
{
    struct jv *v = jargs_get(a, 0, NULL);
    if (!v) return jrt_fail(rt, "test '%s' needs an argument", test);
    *out = *v;
    return 0;
}

static int case_test(struct jrt *rt, struct jv v, int mode, bool *out)
{
    struct jv s, low, up;
    if (jinja_to_str(rt, v, &s) || jinja_str_case(rt, s, 'L', &low) || jinja_str_case(rt, s, 'U', &up))
        return -1;
    bool cased = !jv_equal(low, up);
    *out = cased && jv_equal(s, mode == 'L' ? low : up);
    return 0;
}

static const char *const cmp_tests[][2] = {
    {"eq", "=="}, {"equalto", "=="}, {"==", "=="}, {"ne", "!="}, {"!=", "!="},
    {"lt", "<"},  {"lessthan", "<"}, {"<", "<"},   {"gt", ">"},  {"greaterthan", ">"},
    {">", ">"},   {"le", "<="},      {"<=", "<="}, {"ge", ">="}, {">=", ">="},
};

static const char *const simple_tests[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
    "iterable", "sequence", "boolean", "true", "false", "odd", "even", "callable",
    "lower", "upper", "escaped", "divisibleby", "in", "sameas", "filter", "test", NULL,
};

bool jinja_has_test(const char *name)
{
    for (size_t i = 0; i < sizeof(cmp_tests) / sizeof(cmp_tests[0]); i++)
        if (strcmp(cmp_tests[i][0], name) == 0) return true;
    for (int i = 0; simple_tests[i]; i++)
        if (strcmp(simple_tests[i], name) == 0) return true;
    return false;
}

static int int_test(struct jrt *rt, const char *name, struct jv v, bool *out)
{
    if (v.kind != JV_INT && v.kind != JV_BOOL && v.kind != JV_FLOAT) {
        if (v.kind == JV_UNDEF) return jrt_fail(rt, "%s", v.u.s ? v.u.s->data : "undefined");
        return jrt_fail(rt, "unsupported operand type(s) for %%: '%s' and 'int'", jv_type_name(v));
    }
    double x = jv_as_double(v);
    int64_t i = v.kind == JV_INT ? v.u.i : (int64_t)x;
    if (v.kind == JV_FLOAT) *out = fmod(fabs(x), 2.0) == (name[0] == 'o' ? 1.0 : 0.0);
    else *out = (i % 2 != 0) == (name[0] == 'o');
    return 0;
}

int jinja_test(struct jrt *rt, const char *name, struct jv v, struct jargs *a, bool *out)
{
    struct jv b;
    for (size_t i = 0; i < sizeof(cmp_tests) / sizeof(cmp_tests[0]); i++) {
        if (strcmp(cmp_tests[i][0], name) != 0) continue;
        if (arg0(rt, a, name, &b)) return -1;
        return jinja_cmp_op(rt, cmp_tests[i][1], v, b, out);
    }
    enum jv_kind k = v.kind;
    if (!strcmp(name, "defined")) *out = k != JV_UNDEF;
    else if (!strcmp(name, "undefined")) *out = k == JV_UNDEF;
    else if (!strcmp(name, "none")) *out = k == JV_NONE;
    else if (!strcmp(name, "string")) *out = k == JV_STR;
    else if (!strcmp(name, "number")) *out = k == JV_INT || k == JV_FLOAT || k == JV_BOOL;
    else if (!strcmp(name, "integer")) *out = k == JV_INT;
    else if (!strcmp(name, "float")) *out = k == JV_FLOAT;
    else if (!strcmp(name, "mapping")) *out = k == JV_DICT;
    else if (!strcmp(name, "iterable"))
        *out = k == JV_UNDEF || k == JV_STR || k == JV_LIST || k == JV_DICT || k == JV_GEN;
    else if (!strcmp(name, "sequence")) /* len() and [] work: Undefined has both */
        *out = k == JV_UNDEF || k == JV_STR || k == JV_LIST || k == JV_DICT;
    else if (!strcmp(name, "boolean")) *out = k == JV_BOOL;
    else if (!strcmp(name, "true")) *out = k == JV_BOOL && v.u.b;
    else if (!strcmp(name, "false")) *out = k == JV_BOOL && !v.u.b;
    else if (!strcmp(name, "callable")) /* Undefined has __call__ */
        *out = k == JV_FUNC || k == JV_UNDEF;
    else if (!strcmp(name, "escaped")) *out = false;
    else if (!strcmp(name, "odd") || !strcmp(name, "even")) return int_test(rt, name, v, out);
    else if (!strcmp(name, "lower")) return case_test(rt, v, 'L', out);
    else if (!strcmp(name, "upper")) return case_test(rt, v, 'U', out);
    else if (!strcmp(name, "filter") || !strcmp(name, "test")) { /* `value in env.filters` */
        if (jinja_check_hashable(rt, v)) return -1;
        *out = k == JV_STR &&
               (name[0] == 'f' ? jinja_has_filter(v.u.s->data) : jinja_has_test(v.u.s->data));
    } else if (!strcmp(name, "divisibleby")) {
        if (arg0(rt, a, name, &b)) return -1;
        if ((k != JV_INT && k != JV_BOOL) || (b.kind != JV_INT && b.kind != JV_BOOL))
            return jrt_fail(rt, "divisibleby needs integers");
        int64_t x = k == JV_BOOL ? v.u.b : v.u.i, y = b.kind == JV_BOOL ? b.u.b : b.u.i;
        if (y == 0) return jrt_fail(rt, "integer division or modulo by zero");
        *out = y == -1 || x % y == 0;
    } else if (!strcmp(name, "in")) {
        if (arg0(rt, a, name, &b)) return -1;
        return jinja_cmp_op(rt, "in", v, b, out);
    } else if (!strcmp(name, "sameas")) {
        if (arg0(rt, a, name, &b)) return -1;
        *out = v.kind == b.kind &&
               (k == JV_NONE || k == JV_UNDEF || (k == JV_BOOL && v.u.b == b.u.b) ||
                ((k == JV_STR || k == JV_LIST || k == JV_DICT || k == JV_NS || k == JV_FUNC ||
                  k == JV_GEN) &&
                 v.u.l == b.u.l) ||
                (k == JV_INT && v.u.i == b.u.i && v.u.i >= -5 && v.u.i <= 256));
    } else {
        return jrt_fail(rt, "No test named '%s'.", name);
    }
    return 0;
}
