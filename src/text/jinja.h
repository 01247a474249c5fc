/*
 * jinja.h — private interface of the Jinja2-subset interpreter that renders
 * chat templates the way Hugging Face transformers does (jinja2's
 * ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on).
 *
 * Pieces: an arena (every value and AST node lives in one, freed at once),
 * values (jinja_value.c: Python-like str/int/float/list/dict semantics,
 * printing as Python's str()), the lexer (jinja_lex.c), the parser
 * (jinja_parse.c, building `struct jnode` trees), the evaluator
 * (jinja_eval.c: scopes, statements, expressions), filters and tests
 * (jinja_filters.c), methods and globals (jinja_methods.c), JSON in and out
 * (jinja_json.c), operators and slicing (jinja_ops.c), tests (jinja_tests.c).
 * template.c is the public face (include/tern.h).
 * Depends on base/ and jansson.
 */
#ifndef TERN_JINJA_H
#define TERN_JINJA_H

#include "base/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------ arena */

struct jarena_chunk;
struct jarena {
    struct jarena_chunk *head;
    size_t used_bytes; /* everything handed out so far */
    size_t cap_bytes;  /* 0 = unlimited; past it allocation fails */
};

/* Returns zeroed memory or NULL (over the cap, or out of memory). */
void *jarena_alloc(struct jarena *a, size_t n_bytes);
void jarena_deinit(struct jarena *a);

/* ------------------------------------------------------------ values */

enum jv_kind {
    JV_UNDEF, /* jinja2 Undefined; `str` is the hint for errors */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* also tuples (JV_F_TUPLE) */
    JV_DICT,
    JV_NS,   /* namespace(): a mutable dict seen through attributes */
    JV_FUNC, /* builtin, bound method, macro */
    JV_GEN,  /* a one-shot iterator (what map, select, reverse... return) */
};

#define JV_F_TUPLE 1u  /* a list that is a Python tuple */
#define JV_F_UNSAFE 2u /* an undefined that errors when called (sandbox) */

struct jstr {
    size_t len;
    char data[]; /* NUL-terminated */
};
struct jlist;
struct jdict;
struct jfunc;
struct jgen;

struct jv {
    uint8_t kind;
    uint8_t flags;
    union {
        bool b;
        int64_t i;
        double f;
        struct jstr *s; /* JV_STR, and JV_UNDEF's hint (may be NULL) */
        struct jlist *l;
        struct jdict *d; /* JV_DICT, JV_NS */
        struct jfunc *fn;
        struct jgen *g;
    } u;
};

struct jlist {
    size_t n, cap;
    struct jv *items;
};

struct jdict {
    size_t n, cap;
    struct jv *keys;
    struct jv *vals;
};

/* A Python generator or iterator: the filter computes its items at once, but
 * iterating consumes them, as in jinja2 (a second `|list` is empty). It is
 * always true, has no len(), cannot be indexed, reversed or serialised. */
struct jgen {
    struct jlist *items;
    size_t pos;       /* items before pos are consumed */
    const char *type; /* Python type name: "generator", "list_reverseiterator", ... */
    const char *func; /* generator function named by repr(), NULL for iterators */
    const char *err;  /* raised once the items run out (a non-iterable input) */
};

struct jrt;
struct jargs {
    size_t n_pos;
    struct jv *pos;
    size_t n_kw;
    const char **kw_names;
    struct jv *kw;
};
typedef int (*jbuiltin_fn)(struct jrt *rt, struct jfunc *fn, struct jargs *args, struct jv *out);

struct jnode;
struct jscope;
struct jfunc {
    const char *name;
    jbuiltin_fn call;    /* builtins and bound methods */
    struct jv self;      /* bound object (methods, loop.cycle) */
    struct jnode *macro; /* macros and caller() */
    struct jscope *closure;
    struct jv caller; /* caller of a {% call %} block (JV_UNDEF when none) */
    bool varargs, kwargs; /* the macro body reads them: extra arguments land there */
};

/* Value constructors (the arena of the runtime owns all memory). */
static inline struct jv jv_undef(void) { struct jv v = {JV_UNDEF, 0, {0}}; return v; }
static inline struct jv jv_none(void) { struct jv v = {JV_NONE, 0, {0}}; return v; }
static inline struct jv jv_bool(bool b) { struct jv v = {JV_BOOL, 0, {0}}; v.u.b = b; return v; }
static inline struct jv jv_int(int64_t i) { struct jv v = {JV_INT, 0, {0}}; v.u.i = i; return v; }
static inline struct jv jv_float(double f) { struct jv v = {JV_FLOAT, 0, {0}}; v.u.f = f; return v; }

struct jstr *jstr_new(struct jarena *a, const char *p, size_t n);
/* A zero-filled string of n bytes to be written by the caller. */
struct jstr *jstr_alloc(struct jarena *a, size_t n);
int jv_str(struct jarena *a, const char *p, size_t n, struct jv *out); /* 0 ok, -1 no memory */
struct jlist *jlist_new(struct jarena *a, size_t cap);
int jlist_push(struct jarena *a, struct jlist *l, struct jv v);
struct jdict *jdict_new(struct jarena *a, size_t cap);
/* Sets key to val (replacing an equal key in place). */
int jdict_set(struct jarena *a, struct jdict *d, struct jv key, struct jv val);
/* Finds a key; returns its index or -1. */
long jdict_find(const struct jdict *d, struct jv key);
long jdict_find_str(const struct jdict *d, const char *key, size_t len);

bool jv_truthy(struct jv v);
bool jv_equal(struct jv a, struct jv b);
bool jv_is_number(struct jv v); /* int, float or bool */
double jv_as_double(struct jv v);
/* Python's type name ("str", "int", "list", "dict", "NoneType", ...). */
const char *jv_type_name(struct jv v);

/* Appends Python's str(v) / repr(v). Returns 0, or -1 when out of memory. */
int jv_append_str(struct tern_str *out, struct jv v);
int jv_append_repr(struct tern_str *out, struct jv v);
/* Python float repr: shortest round-trip digits, "1.0", "1e+16", "nan", "inf". */
void jv_format_float(double f, char buf[40]);

/* Number of code points in UTF-8 text; offset of code point `idx`. */
size_t jutf8_len(const char *p, size_t n);
size_t jutf8_offset(const char *p, size_t n, size_t idx);
/* Decodes one code point at p (n bytes left), storing its byte length. */
uint32_t jutf8_decode(const char *p, size_t n, size_t *adv);
int jutf8_encode(uint32_t cp, char out[4]);
/* Python's str.isspace() for one code point. */
bool jpy_isspace(uint32_t cp);

/* ------------------------------------------------------------ lexer */

enum jtok_type {
    JT_EOF,
    JT_DATA,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_OP,
};

struct jtok {
    enum jtok_type type;
    int line;
    const char *text; /* arena copy: data, name, decoded string, op */
    size_t len;
    int64_t i;
    double f;
};

/* Tokenises a whole template (newlines normalised, one trailing newline
 * dropped). On error, fills `err` (arena) and `*err_line`; returns -1. */
int jinja_lex(struct jarena *a, const char *src, size_t len, struct jtok **toks, size_t *n_toks,
              const char **err, int *err_line);

/* ------------------------------------------------------------ AST */

enum jnode_type {
    /* expressions */
    JN_LIT,
    JN_NAME,
    JN_LIST,
    JN_TUPLE,
    JN_DICT,
    JN_ATTR,
    JN_ITEM,
    JN_SLICE,
    JN_CALL,
    JN_FILTER,
    JN_TEST,
    JN_BINOP,
    JN_UNARY,
    JN_AND,
    JN_OR,
    JN_COND,
    JN_COMPARE,
    JN_CONCAT,
    /* statements */
    JN_BODY,
    JN_TEXT,
    JN_OUTPUT,
    JN_IF,
    JN_FOR,
    JN_SET,
    JN_SETBLOCK,
    JN_MACRO,
    JN_CALLBLOCK,
    JN_FILTERBLOCK,
    JN_BREAK,
    JN_CONTINUE,
};

/* One node type for all; which fields mean what is listed per type in
 * jinja_parse.c's header comment. */
struct jnode {
    enum jnode_type type;
    int line;
    int op;
    struct jnode *a, *b, *c, *d;
    struct jnode **list;
    size_t n;
    struct jnode **list2;
    size_t n2;
    const char **names;
    size_t n_names;
    const char *str;
    size_t str_len;
    struct jv lit;
};

/* Parses tokens into a JN_BODY. On error, fills err/err_line; returns NULL. */
struct jnode *jinja_parse(struct jarena *a, const struct jtok *toks, size_t n_toks,
                          const char **err, int *err_line);

/* ------------------------------------------------------------ runtime */

/* Limits that keep hostile templates bounded. */
#define JINJA_MAX_DEPTH 256                       /* nested macro calls / evaluation depth */
#define JINJA_MAX_STEPS 20000000                  /* evaluated nodes per render */
#define JINJA_MAX_OUTPUT ((size_t)64 << 20)       /* bytes of output and of any string */
#define JINJA_MAX_ARENA ((size_t)256 << 20)       /* bytes of values per render */
#define JINJA_MAX_RANGE 100000                    /* jinja2 sandbox's MAX_RANGE */

struct jrt {
    struct jarena arena;
    struct tern_str *out; /* current output buffer */
    struct jscope *globals;
    int depth;
    uint64_t steps;
    int line;        /* line of the node being evaluated */
    char *err;       /* message (tern_malloc) once failed */
    int err_line;
    bool err_limit;  /* err is a limit (memory, steps): never deferred */
};

/* Records a runtime error at the current line; returns -1. */
int jrt_fail(struct jrt *rt, const char *fmt, ...) TERN_PRINTF(2, 3);
/* Out of arena memory (or over the cap). */
int jrt_oom(struct jrt *rt);
/* Moves the recorded error into *err (arena) and clears it, for a generator
 * to raise later; returns -1, keeping it, when it is a limit or memory is out. */
int jrt_defer(struct jrt *rt, const char **err);

struct jscope *jscope_new(struct jrt *rt, struct jscope *parent);
int jscope_set(struct jrt *rt, struct jscope *s, const char *name, struct jv v);
bool jscope_get(struct jscope *s, const char *name, struct jv *out);

/* Renders the body with `ctx` variables (a dict). Output in rt->out. */
int jinja_render(struct jrt *rt, struct jnode *body, struct jdict *ctx);

/* Calls any callable value. */
int jinja_call(struct jrt *rt, struct jv callee, struct jargs *args, struct jv *out);
/* obj.name and obj[key] with the sandbox's rules. */
int jinja_getattr(struct jrt *rt, struct jv obj, const char *name, size_t len, struct jv *out);
int jinja_getitem(struct jrt *rt, struct jv obj, struct jv key, struct jv *out);
/* Python iteration: list items, dict keys, string characters; undefined is
 * empty; a generator yields its remaining items and is then exhausted. */
int jinja_iterate(struct jrt *rt, struct jv v, struct jlist **out);
/* A generator over `items` (NULL: none), raising `err` (arena or static) after them. */
int jinja_gen(struct jrt *rt, const char *type, const char *func, struct jlist *items,
              const char *err, struct jv *out);
/* Fails with Python's "unhashable type" unless v can be a dict key. */
int jinja_check_hashable(struct jrt *rt, struct jv v);
/* Undefined with a hint (the hint is used when it is misused). */
struct jv jinja_undef(struct jrt *rt, const char *fmt, ...) TERN_PRINTF(2, 3);
/* str(v) as a new string value. */
int jinja_to_str(struct jrt *rt, struct jv v, struct jv *out);
/* Python ordering for sort/min/max and < <= > >=: *cmp is -1/0/1. */
int jinja_compare(struct jrt *rt, struct jv a, struct jv b, int *cmp);

/* Filters and tests by name (jinja_filters.c). */
int jinja_filter(struct jrt *rt, const char *name, struct jv v, struct jargs *args,
                 struct jv *out);
int jinja_test(struct jrt *rt, const char *name, struct jv v, struct jargs *args, bool *out);
bool jinja_has_test(const char *name);
bool jinja_has_filter(const char *name);

/* Methods of str/dict/list values (bound on attribute access) and globals
 * (jinja_methods.c). `found` is false when `name` is no method of obj. */
int jinja_method(struct jrt *rt, struct jv obj, const char *name, struct jv *out, bool *found);
int jinja_add_globals(struct jrt *rt, struct jscope *s);

/* JSON (jinja_json.c). */
struct json_t;
int jinja_from_json(struct jrt *rt, const void *json, struct jv *out); /* json is a json_t * */
/* Python json.dumps(v, ensure_ascii=False, indent, separators, sort_keys). */
int jinja_tojson(struct jrt *rt, struct jv v, int indent, const char *item_sep,
                 const char *key_sep, bool sort_keys, struct tern_str *out);

/* Argument helpers: the i-th positional or the keyword `name`, else NULL. */
struct jv *jargs_get(struct jargs *args, size_t i, const char *name);

#endif /* TERN_JINJA_H */
