/*
 * jinja_parse.c — recursive-descent parser from tokens to `struct jnode`
 * trees, following jinja2's grammar and operator precedence:
 *   condexpr: or ('if' or ('else' condexpr)?)*
 *   or/and/not, compare (== != < <= > >= in, not in; chained),
 *   + -, ~, * / // %, **, unary - +, primary + postfix (. [] ()) + filters/tests.
 *
 * Field use per node type:
 *   LIT lit | NAME str | LIST, TUPLE list | DICT list=keys list2=values
 *   ATTR a.str | ITEM a[b] | SLICE a[b:c:d] (each may be NULL)
 *   CALL a(list, names=list2) | FILTER a|str(args as CALL; a NULL in filter
 *   blocks) | TEST a is [not: op=1] str(args) | BINOP a op b (op: + - * / %
 *   'F' floordiv 'P' pow) | CONCAT a~b | UNARY op a (op: - + !)
 *   AND, OR a b | COND b if a else c | COMPARE a (names[i] list[i])...
 *   BODY list | TEXT str | OUTPUT a | IF a then b else c (BODY or IF)
 *   FOR names (op=1 tuple) in a if b: c else d
 *   SET names (op=1 tuple; op=2 str.names[0] namespace attr) = a
 *   SETBLOCK target as SET, body c, filter chain a | MACRO str(names=list2) c
 *   CALLBLOCK a, caller params names=list2, body c | FILTERBLOCK a c
 * Depends on jinja.h.
 */
#include "text/jinja.h"

#include <stdio.h>
#include <string.h>

#define MAX_NEST 200

struct parser {
    struct jarena *a;
    const struct jtok *t;
    size_t n, i;
    int depth;
    const char *err;
    int err_line;
    char errbuf[160];
};

static const struct jtok *cur(struct parser *P) { return &P->t[P->i < P->n ? P->i : P->n - 1]; }
static const struct jtok *peek(struct parser *P, size_t k)
{
    return &P->t[P->i + k < P->n ? P->i + k : P->n - 1];
}
static void next(struct parser *P)
{
    if (P->i < P->n - 1) P->i++;
}

static bool tok_is(const struct jtok *t, enum jtok_type type, const char *text)
{
    if (t->type != type) return false;
    return !text || (t->len == strlen(text) && memcmp(t->text, text, t->len) == 0);
}
static bool is_op(struct parser *P, const char *op) { return tok_is(cur(P), JT_OP, op); }
static bool is_name(struct parser *P, const char *name) { return tok_is(cur(P), JT_NAME, name); }

static void *pfail(struct parser *P, const char *fmt, const char *arg)
{
    if (!P->err) {
        snprintf(P->errbuf, sizeof(P->errbuf), fmt, arg);
        P->err = P->errbuf;
        P->err_line = cur(P)->line;
    }
    return NULL;
}

static const char *tok_desc(const struct jtok *t)
{
    switch (t->type) {
    case JT_EOF: return "end of template";
    case JT_DATA: return "template data";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    default: return t->text ? t->text : "?";
    }
}

static bool expect_op(struct parser *P, const char *op)
{
    if (is_op(P, op)) {
        next(P);
        return true;
    }
    char m[64];
    snprintf(m, sizeof(m), "expected '%s', got '%%s'", op);
    pfail(P, m, tok_desc(cur(P)));
    return false;
}

static struct jnode *node(struct parser *P, enum jnode_type type)
{
    struct jnode *n = jarena_alloc(P->a, sizeof(*n));
    if (!n) return pfail(P, "out of memory%s", "");
    n->type = type;
    n->line = cur(P)->line;
    return n;
}

/* A growable array of node pointers (or name pointers) in the arena. */
static bool vpush(struct parser *P, void ***arr, size_t *n, size_t *cap, void *item)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        void **na = jarena_alloc(P->a, c * sizeof(void *));
        if (!na) return pfail(P, "out of memory%s", ""), false;
        if (*n) memcpy(na, *arr, *n * sizeof(void *));
        *arr = na;
        *cap = c;
    }
    (*arr)[(*n)++] = item;
    return true;
}

static const char *tok_name(struct parser *P)
{
    if (cur(P)->type != JT_NAME) return pfail(P, "expected a name, got '%s'", tok_desc(cur(P)));
    const char *s = cur(P)->text;
    next(P);
    return s;
}

static struct jnode *parse_expr(struct parser *P);
static struct jnode *parse_or(struct parser *P);
static struct jnode *parse_unary(struct parser *P, bool with_filter);
static struct jnode *parse_primary(struct parser *P);
static struct jnode *parse_postfix(struct parser *P, struct jnode *n, bool with_filter);

/* ( args ) with positional and keyword arguments, after the '('. */
static bool parse_args(struct parser *P, struct jnode *call)
{
    size_t cap1 = 0, cap2 = 0, capn = 0, nn = 0;
    if (!expect_op(P, "(")) return false;
    while (!is_op(P, ")")) {
        if (call->n || call->n2) {
            if (!expect_op(P, ",")) return false;
            if (is_op(P, ")")) break;
        }
        if (cur(P)->type == JT_NAME && tok_is(peek(P, 1), JT_OP, "=")) {
            const char *name = cur(P)->text;
            next(P);
            next(P);
            struct jnode *v = parse_expr(P);
            if (!v || !vpush(P, (void ***)&call->list2, &call->n2, &cap2, v) ||
                !vpush(P, (void ***)&call->names, &nn, &capn, (void *)name))
                return false;
            call->n_names = nn;
        } else {
            if (call->n2) return pfail(P, "positional argument after keyword argument%s", ""), false;
            struct jnode *v = parse_expr(P);
            if (!v || !vpush(P, (void ***)&call->list, &call->n, &cap1, v)) return false;
        }
    }
    next(P);
    return true;
}

static struct jnode *parse_filter_name(struct parser *P, struct jnode *n)
{
    const char *name = tok_name(P);
    if (!name) return NULL;
    while (is_op(P, ".")) { /* dotted filter names: keep the last part */
        next(P);
        name = tok_name(P);
        if (!name) return NULL;
    }
    n->str = name;
    if (is_op(P, "(") && !parse_args(P, n)) return NULL;
    return n;
}

static struct jnode *parse_filter(struct parser *P, struct jnode *value)
{
    struct jnode *f = node(P, JN_FILTER);
    if (!f) return NULL;
    f->a = value;
    return parse_filter_name(P, f);
}

static struct jnode *parse_test(struct parser *P, struct jnode *value)
{
    struct jnode *t = node(P, JN_TEST);
    if (!t) return NULL;
    t->a = value;
    if (is_name(P, "not")) {
        next(P);
        t->op = 1;
    }
    const char *name = tok_name(P);
    if (!name) return NULL;
    t->str = name;
    const struct jtok *c = cur(P);
    if (is_op(P, "(")) {
        if (!parse_args(P, t)) return NULL;
    } else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT ||
                c->type == JT_FLOAT || tok_is(c, JT_OP, "[") || tok_is(c, JT_OP, "{")) &&
               !tok_is(c, JT_NAME, "else") && !tok_is(c, JT_NAME, "or") &&
               !tok_is(c, JT_NAME, "and")) {
        /* As jinja2: any other name is taken as the argument (so `x is defined if y`
         * is a syntax error there too). */
        struct jnode *arg = parse_postfix(P, parse_primary(P), false);
        if (!arg) return NULL;
        size_t cap = 0;
        if (!vpush(P, (void ***)&t->list, &t->n, &cap, arg)) return NULL;
    }
    return t;
}

/* Subscript after '[': index or slice. */
static struct jnode *parse_subscript(struct parser *P, struct jnode *obj)
{
    struct jnode *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    bool slice = false;
    while (!is_op(P, "]")) {
        if (is_op(P, ":")) {
            slice = true;
            if (++k > 2) return pfail(P, "too many ':' in a slice%s", "");
            next(P);
            continue;
        }
        if (parts[k]) return pfail(P, "expected ']' in a subscript, got '%s'", tok_desc(cur(P)));
        parts[k] = parse_expr(P);
        if (!parts[k]) return NULL;
    }
    next(P);
    struct jnode *n = node(P, slice ? JN_SLICE : JN_ITEM);
    if (!n) return NULL;
    n->a = obj;
    n->b = parts[0];
    if (!slice && !parts[0]) return pfail(P, "empty subscript%s", "");
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static struct jnode *parse_postfix(struct parser *P, struct jnode *n, bool with_filter)
{
    while (n) {
        if (is_op(P, ".")) {
            next(P);
            struct jnode *a = node(P, JN_ATTR);
            if (!a) return NULL;
            a->a = n;
            if (cur(P)->type == JT_INT) { /* x.0 → item 0 */
                a->type = JN_ITEM;
                struct jnode *k = node(P, JN_LIT);
                if (!k) return NULL;
                k->lit = jv_int(cur(P)->i);
                a->b = k;
                next(P);
            } else {
                a->str = tok_name(P);
                if (!a->str) return NULL;
                a->str_len = strlen(a->str);
            }
            n = a;
        } else if (is_op(P, "[")) {
            next(P);
            n = parse_subscript(P, n);
        } else if (is_op(P, "(")) {
            struct jnode *c = node(P, JN_CALL);
            if (!c) return NULL;
            c->a = n;
            if (!parse_args(P, c)) return NULL;
            n = c;
        } else if (with_filter && is_op(P, "|")) {
            next(P);
            n = parse_filter(P, n);
        } else if (with_filter && is_name(P, "is")) {
            next(P);
            n = parse_test(P, n);
        } else {
            break;
        }
    }
    return n;
}

static struct jnode *parse_seq(struct parser *P, enum jnode_type type, const char *close)
{
    struct jnode *n = node(P, type);
    size_t cap = 0, cap2 = 0;
    if (!n) return NULL;
    next(P);
    while (!is_op(P, close)) {
        if (n->n && !expect_op(P, ",")) return NULL;
        if (is_op(P, close)) break;
        struct jnode *v = parse_expr(P);
        if (!v) return NULL;
        if (type == JN_DICT) {
            if (!expect_op(P, ":")) return NULL;
            struct jnode *val = parse_expr(P);
            if (!val || !vpush(P, (void ***)&n->list2, &n->n2, &cap2, val)) return NULL;
        }
        if (!vpush(P, (void ***)&n->list, &n->n, &cap, v)) return NULL;
    }
    next(P);
    return n;
}

static struct jnode *parse_primary(struct parser *P)
{
    const struct jtok *t = cur(P);
    struct jnode *n;
    if (t->type == JT_NAME) {
        static const char *const consts[] = {"true", "True", "false", "False", "none", "None"};
        for (int k = 0; k < 6; k++) {
            if (strcmp(t->text, consts[k]) == 0) {
                n = node(P, JN_LIT);
                if (!n) return NULL;
                n->lit = k < 2 ? jv_bool(true) : k < 4 ? jv_bool(false) : jv_none();
                next(P);
                return n;
            }
        }
        n = node(P, JN_NAME);
        if (!n) return NULL;
        n->str = t->text;
        next(P);
        return n;
    }
    if (t->type == JT_STRING) {
        struct tern_str s = {0};
        while (cur(P)->type == JT_STRING) { /* adjacent literals concatenate */
            if (tern_str_append(&s, cur(P)->text, cur(P)->len)) {
                tern_str_deinit(&s);
                return pfail(P, "out of memory%s", "");
            }
            next(P);
        }
        n = node(P, JN_LIT);
        if (!n || jv_str(P->a, s.data ? s.data : "", s.len, &n->lit)) {
            tern_str_deinit(&s);
            return n ? pfail(P, "out of memory%s", "") : NULL;
        }
        tern_str_deinit(&s);
        return n;
    }
    if (t->type == JT_INT || t->type == JT_FLOAT) {
        n = node(P, JN_LIT);
        if (!n) return NULL;
        n->lit = t->type == JT_INT ? jv_int(t->i) : jv_float(t->f);
        next(P);
        return n;
    }
    if (tok_is(t, JT_OP, "(")) {
        next(P);
        if (is_op(P, ")")) { /* empty tuple */
            next(P);
            return node(P, JN_TUPLE);
        }
        struct jnode *e = parse_expr(P);
        if (!e) return NULL;
        if (is_op(P, ",")) {
            struct jnode *tup = node(P, JN_TUPLE);
            size_t cap = 0;
            if (!tup || !vpush(P, (void ***)&tup->list, &tup->n, &cap, e)) return NULL;
            while (is_op(P, ",")) {
                next(P);
                if (is_op(P, ")")) break;
                struct jnode *v = parse_expr(P);
                if (!v || !vpush(P, (void ***)&tup->list, &tup->n, &cap, v)) return NULL;
            }
            e = tup;
        }
        return expect_op(P, ")") ? e : NULL;
    }
    if (tok_is(t, JT_OP, "[")) return parse_seq(P, JN_LIST, "]");
    if (tok_is(t, JT_OP, "{")) return parse_seq(P, JN_DICT, "}");
    return pfail(P, "unexpected '%s'", tok_desc(t));
}

static struct jnode *parse_unary(struct parser *P, bool with_filter)
{
    if (++P->depth > MAX_NEST) return pfail(P, "expression nested too deeply%s", "");
    struct jnode *n;
    if (is_op(P, "-") || is_op(P, "+")) {
        char op = cur(P)->text[0];
        next(P);
        n = node(P, JN_UNARY);
        if (!n) return NULL;
        n->op = op;
        n->a = parse_unary(P, false);
        if (!n->a) return NULL;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n, with_filter);
    P->depth--;
    return n;
}

static struct jnode *binop(struct parser *P, enum jnode_type type, int op, struct jnode *l,
                           struct jnode *r)
{
    if (!l || !r) return NULL;
    struct jnode *n = node(P, type);
    if (!n) return NULL;
    n->op = op;
    n->a = l;
    n->b = r;
    n->line = l->line;
    return n;
}

static struct jnode *parse_pow(struct parser *P)
{
    struct jnode *l = parse_unary(P, true);
    while (l && is_op(P, "**")) {
        next(P);
        l = binop(P, JN_BINOP, 'P', l, parse_unary(P, true));
    }
    return l;
}

static struct jnode *parse_math2(struct parser *P)
{
    struct jnode *l = parse_pow(P);
    while (l && (is_op(P, "*") || is_op(P, "/") || is_op(P, "//") || is_op(P, "%"))) {
        int op = cur(P)->len == 2 ? 'F' : cur(P)->text[0];
        next(P);
        l = binop(P, JN_BINOP, op, l, parse_pow(P));
    }
    return l;
}

static struct jnode *parse_concat(struct parser *P)
{
    struct jnode *l = parse_math2(P);
    while (l && is_op(P, "~")) {
        next(P);
        l = binop(P, JN_CONCAT, '~', l, parse_math2(P));
    }
    return l;
}

static struct jnode *parse_math1(struct parser *P)
{
    struct jnode *l = parse_concat(P);
    while (l && (is_op(P, "+") || is_op(P, "-"))) {
        int op = cur(P)->text[0];
        next(P);
        l = binop(P, JN_BINOP, op, l, parse_concat(P));
    }
    return l;
}

static struct jnode *parse_compare(struct parser *P)
{
    struct jnode *l = parse_math1(P);
    if (!l) return NULL;
    struct jnode *cmp = NULL;
    size_t cap = 0, capn = 0, nn = 0;
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">=", NULL};
    for (;;) {
        const char *op = NULL;
        for (int k = 0; ops[k]; k++)
            if (is_op(P, ops[k])) op = ops[k];
        if (op) {
            next(P);
        } else if (is_name(P, "in")) {
            op = "in";
            next(P);
        } else if (is_name(P, "not") && tok_is(peek(P, 1), JT_NAME, "in")) {
            op = "notin";
            next(P);
            next(P);
        } else {
            break;
        }
        if (!cmp) {
            cmp = node(P, JN_COMPARE);
            if (!cmp) return NULL;
            cmp->a = l;
            cmp->line = l->line;
        }
        struct jnode *r = parse_math1(P);
        if (!r || !vpush(P, (void ***)&cmp->list, &cmp->n, &cap, r) ||
            !vpush(P, (void ***)&cmp->names, &nn, &capn, (void *)op))
            return NULL;
        cmp->n_names = nn;
    }
    return cmp ? cmp : l;
}

static struct jnode *parse_not(struct parser *P)
{
    if (is_name(P, "not")) {
        if (++P->depth > MAX_NEST) return pfail(P, "expression nested too deeply%s", "");
        next(P);
        struct jnode *n = node(P, JN_UNARY);
        if (!n) return NULL;
        n->op = '!';
        n->a = parse_not(P);
        P->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(P);
}

static struct jnode *parse_and(struct parser *P)
{
    struct jnode *l = parse_not(P);
    while (l && is_name(P, "and")) {
        next(P);
        l = binop(P, JN_AND, 0, l, parse_not(P));
    }
    return l;
}

static struct jnode *parse_or(struct parser *P)
{
    struct jnode *l = parse_and(P);
    while (l && is_name(P, "or")) {
        next(P);
        l = binop(P, JN_OR, 0, l, parse_and(P));
    }
    return l;
}

static struct jnode *parse_expr(struct parser *P)
{
    if (++P->depth > MAX_NEST) return pfail(P, "expression nested too deeply%s", "");
    struct jnode *e = parse_or(P);
    while (e && is_name(P, "if")) {
        next(P);
        struct jnode *c = node(P, JN_COND);
        if (!c) return NULL;
        c->b = e;
        c->a = parse_or(P);
        if (!c->a) return NULL;
        if (is_name(P, "else")) {
            next(P);
            c->c = parse_expr(P);
            if (!c->c) return NULL;
        }
        e = c;
    }
    P->depth--;
    return e;
}

/* Expression or bare tuple `a, b` (as in {{ a, b }} and set values). */
static struct jnode *parse_tuple_expr(struct parser *P, bool condexpr)
{
    struct jnode *e = condexpr ? parse_expr(P) : parse_or(P);
    if (!e || !is_op(P, ",")) return e;
    struct jnode *tup = node(P, JN_TUPLE);
    size_t cap = 0;
    if (!tup || !vpush(P, (void ***)&tup->list, &tup->n, &cap, e)) return NULL;
    while (is_op(P, ",")) {
        next(P);
        if (cur(P)->type == JT_VAR_END || cur(P)->type == JT_BLOCK_END || is_name(P, "in")) break;
        struct jnode *v = condexpr ? parse_expr(P) : parse_or(P);
        if (!v || !vpush(P, (void ***)&tup->list, &tup->n, &cap, v)) return NULL;
    }
    return tup;
}

/* ------------------------------------------------------------ statements */

static struct jnode *parse_body(struct parser *P, const char *const *ends);

static bool expect_block_end(struct parser *P)
{
    if (cur(P)->type == JT_BLOCK_END) {
        next(P);
        return true;
    }
    pfail(P, "expected end of statement block, got '%s'", tok_desc(cur(P)));
    return false;
}

/* Consumes `{% name %}` that closes a body (the parser stands on `{%`). */
static bool end_tag(struct parser *P, const char *name)
{
    next(P);
    if (!is_name(P, name)) return pfail(P, "expected end tag, got '%s'", tok_desc(cur(P))), false;
    next(P);
    return expect_block_end(P);
}

/* Targets of for/set: `a`, `a, b`, `(a, b)`; op=1 on the node when a tuple. */
static bool parse_targets(struct parser *P, struct jnode *n)
{
    size_t cap = 0;
    bool paren = is_op(P, "(");
    if (paren) next(P);
    do {
        if (n->n_names) {
            next(P);
            n->op = 1;
        }
        const char *name = tok_name(P);
        if (!name || !vpush(P, (void ***)&n->names, &n->n_names, &cap, (void *)name)) return false;
    } while (is_op(P, ","));
    if (paren) {
        n->op = 1;
        return expect_op(P, ")");
    }
    return true;
}

static struct jnode *parse_for(struct parser *P)
{
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const ends2[] = {"endfor", NULL};
    struct jnode *n = node(P, JN_FOR);
    if (!n || !parse_targets(P, n)) return NULL;
    if (!is_name(P, "in")) return pfail(P, "expected 'in' in a for loop, got '%s'", tok_desc(cur(P)));
    next(P);
    n->a = parse_tuple_expr(P, false);
    if (!n->a) return NULL;
    if (is_name(P, "if")) {
        next(P);
        n->b = parse_tuple_expr(P, true);
        if (!n->b) return NULL;
    }
    if (is_name(P, "recursive")) return pfail(P, "recursive loops are not supported%s", "");
    if (!expect_block_end(P) || !(n->c = parse_body(P, ends))) return NULL;
    if (tok_is(peek(P, 1), JT_NAME, "else")) {
        next(P);
        next(P);
        if (!expect_block_end(P) || !(n->d = parse_body(P, ends2))) return NULL;
    }
    return end_tag(P, "endfor") ? n : NULL;
}

static struct jnode *parse_if(struct parser *P)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    struct jnode *n = node(P, JN_IF);
    if (!n || !(n->a = parse_tuple_expr(P, true)) || !expect_block_end(P) ||
        !(n->b = parse_body(P, ends)))
        return NULL;
    const struct jtok *t = peek(P, 1);
    if (tok_is(t, JT_NAME, "elif")) {
        next(P);
        next(P);
        n->c = parse_if(P); /* consumes the endif */
        return n->c ? n : NULL;
    }
    if (tok_is(t, JT_NAME, "else")) {
        next(P);
        next(P);
        if (!expect_block_end(P) || !(n->c = parse_body(P, ends2))) return NULL;
    }
    return end_tag(P, "endif") ? n : NULL;
}

/* Filter chain `name(args)|name...` over a NULL base (set and filter blocks). */
static struct jnode *parse_filter_chain(struct parser *P)
{
    struct jnode *f = parse_filter(P, NULL);
    while (f && is_op(P, "|")) {
        next(P);
        f = parse_filter(P, f);
    }
    return f;
}

static struct jnode *parse_set(struct parser *P)
{
    static const char *const ends[] = {"endset", NULL};
    struct jnode *n = node(P, JN_SET);
    size_t cap = 0;
    if (!n) return NULL;
    if (cur(P)->type == JT_NAME && tok_is(peek(P, 1), JT_OP, ".")) {
        n->op = 2;
        n->str = tok_name(P);
        next(P);
        const char *attr = tok_name(P);
        if (!attr || !vpush(P, (void ***)&n->names, &n->n_names, &cap, (void *)attr)) return NULL;
    } else if (!parse_targets(P, n)) {
        return NULL;
    }
    if (is_op(P, "=")) {
        next(P);
        n->a = parse_tuple_expr(P, true);
        return n->a && expect_block_end(P) ? n : NULL;
    }
    n->type = JN_SETBLOCK;
    if (is_op(P, "|")) {
        next(P);
        if (!(n->a = parse_filter_chain(P))) return NULL;
    }
    if (!expect_block_end(P) || !(n->c = parse_body(P, ends))) return NULL;
    return end_tag(P, "endset") ? n : NULL;
}

/* ( a, b=default, ... ) of macros and call blocks. */
static bool parse_params(struct parser *P, struct jnode *n)
{
    size_t cap = 0, cap2 = 0;
    if (!expect_op(P, "(")) return false;
    while (!is_op(P, ")")) {
        if (n->n_names && !expect_op(P, ",")) return false;
        const char *name = tok_name(P);
        struct jnode *def = NULL;
        if (!name) return false;
        if (is_op(P, "=")) {
            next(P);
            if (!(def = parse_expr(P))) return false;
        }
        if (!vpush(P, (void ***)&n->names, &n->n_names, &cap, (void *)name) ||
            !vpush(P, (void ***)&n->list2, &n->n2, &cap2, def))
            return false;
    }
    next(P);
    return true;
}

static struct jnode *parse_macro(struct parser *P)
{
    static const char *const ends[] = {"endmacro", NULL};
    struct jnode *n = node(P, JN_MACRO);
    if (!n || !(n->str = tok_name(P)) || !parse_params(P, n) || !expect_block_end(P) ||
        !(n->c = parse_body(P, ends)))
        return NULL;
    return end_tag(P, "endmacro") ? n : NULL;
}

static struct jnode *parse_call_block(struct parser *P)
{
    static const char *const ends[] = {"endcall", NULL};
    struct jnode *n = node(P, JN_CALLBLOCK);
    if (!n) return NULL;
    if (is_op(P, "(") && !parse_params(P, n)) return NULL;
    n->a = parse_expr(P);
    if (!n->a) return NULL;
    if (n->a->type != JN_CALL) return pfail(P, "expected a call in a call block%s", "");
    if (!expect_block_end(P) || !(n->c = parse_body(P, ends))) return NULL;
    return end_tag(P, "endcall") ? n : NULL;
}

static struct jnode *parse_statement(struct parser *P)
{
    if (cur(P)->type != JT_NAME) return pfail(P, "expected a tag name, got '%s'", tok_desc(cur(P)));
    const char *kw = cur(P)->text;
    next(P);
    if (strcmp(kw, "for") == 0) return parse_for(P);
    if (strcmp(kw, "if") == 0) return parse_if(P);
    if (strcmp(kw, "set") == 0) return parse_set(P);
    if (strcmp(kw, "macro") == 0) return parse_macro(P);
    if (strcmp(kw, "call") == 0) return parse_call_block(P);
    if (strcmp(kw, "break") == 0 || strcmp(kw, "continue") == 0) {
        struct jnode *n = node(P, kw[0] == 'b' ? JN_BREAK : JN_CONTINUE);
        return n && expect_block_end(P) ? n : NULL;
    }
    if (strcmp(kw, "filter") == 0) {
        static const char *const ends[] = {"endfilter", NULL};
        struct jnode *n = node(P, JN_FILTERBLOCK);
        if (!n || !(n->a = parse_filter_chain(P)) || !expect_block_end(P) ||
            !(n->c = parse_body(P, ends)))
            return NULL;
        return end_tag(P, "endfilter") ? n : NULL;
    }
    if (strcmp(kw, "generation") == 0) { /* transformers' AssistantTracker: plain body */
        static const char *const ends[] = {"endgeneration", NULL};
        struct jnode *n;
        if (!expect_block_end(P) || !(n = parse_body(P, ends))) return NULL;
        return end_tag(P, "endgeneration") ? n : NULL;
    }
    P->i--;
    return pfail(P, "encountered unknown tag '%s'", kw);
}

static bool in_list(const struct jtok *t, const char *const *ends)
{
    for (int k = 0; ends && ends[k]; k++)
        if (tok_is(t, JT_NAME, ends[k])) return true;
    return false;
}

static struct jnode *parse_body(struct parser *P, const char *const *ends)
{
    if (++P->depth > MAX_NEST) return pfail(P, "blocks nested too deeply%s", "");
    struct jnode *body = node(P, JN_BODY);
    size_t cap = 0;
    if (!body) return NULL;
    for (;;) {
        const struct jtok *t = cur(P);
        struct jnode *n = NULL;
        if (t->type == JT_EOF) {
            if (ends) return pfail(P, "unexpected end of template, expected '%s'", ends[0]);
            break;
        }
        if (t->type == JT_DATA) {
            n = node(P, JN_TEXT);
            if (!n) return NULL;
            n->str = t->text;
            n->str_len = t->len;
            next(P);
        } else if (t->type == JT_VAR_BEGIN) {
            next(P);
            n = node(P, JN_OUTPUT);
            if (!n || !(n->a = parse_tuple_expr(P, true))) return NULL;
            if (cur(P)->type != JT_VAR_END)
                return pfail(P, "expected '}}', got '%s'", tok_desc(cur(P)));
            next(P);
        } else if (t->type == JT_BLOCK_BEGIN) {
            if (in_list(peek(P, 1), ends)) break;
            next(P);
            n = parse_statement(P);
            if (!n) return NULL;
        } else {
            return pfail(P, "unexpected '%s'", tok_desc(t));
        }
        if (!vpush(P, (void ***)&body->list, &body->n, &cap, n)) return NULL;
    }
    P->depth--;
    return body;
}

struct jnode *jinja_parse(struct jarena *a, const struct jtok *toks, size_t n_toks,
                          const char **err, int *err_line)
{
    struct parser P = {.a = a, .t = toks, .n = n_toks};
    struct jnode *body = parse_body(&P, NULL);
    if (!body) {
        *err = P.err ? jstr_new(a, P.err, strlen(P.err))->data : "parse error";
        *err_line = P.err_line;
    }
    return body;
}
