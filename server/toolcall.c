/*
 * toolcall.c — turns a model's content text into OpenAI tool calls,
 * incrementally. Four output forms are recognised:
 *
 *   Hermes / Qwen 2.5-3:  <tool_call>{"name": "f", "arguments": {...}}</tool_call>
 *   Qwen3.5 (XML):        <tool_call><function=f><parameter=p>v</parameter></function></tool_call>
 *   Llama 3.x:            {"name": "f", "parameters": {...}} [; {...}]   (the whole output,
 *                         possibly after <|python_tag|>)
 *   Gemma 4:              <|tool_call>call:f{city:<|"|>Paris<|"|>,days:3}<tool_call|>
 *
 * Text that is not a call passes through as content; a <tool_call> or
 * <|tool_call> block that does not parse is passed through literally. The
 * parser only decides at tag boundaries, so the result does not depend on how
 * the text was split into pieces. Depends on jansson and libc.
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

static const char CALL_OPEN[] = "<tool_call>";
static const char CALL_CLOSE[] = "</tool_call>";
static const char PY_TAG[] = "<|python_tag|>";
static const char G_OPEN[] = "<|tool_call>";
static const char G_CLOSE[] = "<tool_call|>";
static const char G_QUOTE[] = "<|\"|>";

enum { T_START, T_TEXT, T_CALL, T_JSON, T_GCALL };

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static const char *find_mem(const char *h, size_t hn, const char *needle)
{
    size_t nn = strlen(needle);
    if (hn < nn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == needle[0] && !memcmp(h + i, needle, nn)) return h + i;
    return NULL;
}

static uint64_t next_rand(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void srv_tool_make_id(char id[32], uint64_t *rng)
{
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    memcpy(id, "call_", 5);
    for (int i = 0; i < 24; i++) id[5 + i] = al[next_rand(rng) % (sizeof al - 1)];
    id[29] = '\0';
}

void srv_tool_call_free(struct srv_tool_call *c)
{
    free(c->name);
    free(c->arguments);
    c->name = c->arguments = NULL;
}

/* ------------------------------------------------------------ block parsers */

/* Arguments value -> compact JSON object text. Strings holding JSON objects
 * are accepted (some models quote their arguments). */
static char *args_text(json_t *a)
{
    if (!a || json_is_null(a)) return strdup("{}");
    if (json_is_string(a)) {
        json_t *inner = json_loads(json_string_value(a), 0, NULL);
        if (!inner) return NULL;
        char *s = json_is_object(inner) ? json_dumps(inner, JSON_COMPACT) : NULL;
        json_decref(inner);
        return s;
    }
    if (!json_is_object(a)) return NULL;
    return json_dumps(a, JSON_COMPACT);
}

/* {"name": ..., "arguments"|"parameters": {...}} -> name, arguments. */
static bool parse_call_object(json_t *o, char **name, char **arguments)
{
    if (!json_is_object(o)) return false;
    json_t *n = json_object_get(o, "name");
    if (!json_is_string(n) || json_string_length(n) == 0) return false;
    json_t *a = json_object_get(o, "arguments");
    if (!a) a = json_object_get(o, "parameters");
    char *args = args_text(a);
    if (!args) return false;
    *name = strdup(json_string_value(n));
    *arguments = args;
    if (!*name) {
        free(args);
        return false;
    }
    return true;
}

/* The JSON Schema type of tool `fn`'s parameter `p`, or NULL. */
static const char *param_type(const json_t *tools, const char *fn, const char *p)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        json_t *f = json_object_get(t, "function");
        const char *n = json_string_value(json_object_get(f, "name"));
        if (!n || strcmp(n, fn)) continue;
        json_t *props = json_object_get(json_object_get(f, "parameters"), "properties");
        json_t *ty = json_object_get(json_object_get(props, p), "type");
        return json_string_value(ty);
    }
    return NULL;
}

/* A parameter value: strings stay strings (as the schema says, or when the
 * schema is silent); other schema types are read as JSON when they parse. */
static json_t *xml_value(const char *v, size_t n, const char *type)
{
    if (n && v[0] == '\n') v++, n--;
    if (n && v[n - 1] == '\n') n--;
    if (type && strcmp(type, "string")) {
        json_t *j = json_loadb(v, n, JSON_DECODE_ANY, NULL);
        if (j) return j;
    }
    return json_stringn(v, n);
}

/* <function=NAME> (<parameter=P>value</parameter>)* [</function>] */
static bool parse_xml(const char *s, size_t len, const json_t *tools, char **name, char **arguments)
{
    const char *end = s + len, *p = s + 10; /* after "<function=" */
    const char *gt = memchr(p, '>', (size_t)(end - p));
    if (!gt || gt == p) return false;
    char *fn = strndup(p, (size_t)(gt - p));
    json_t *args = json_object();
    if (!fn || !args) goto fail;
    p = gt + 1;
    for (;;) {
        while (p < end && is_space(*p)) p++;
        if (p == end) break;
        if ((size_t)(end - p) >= 11 && !memcmp(p, "</function>", 11)) {
            p += 11;
            while (p < end && is_space(*p)) p++;
            if (p != end) goto fail;
            break;
        }
        if ((size_t)(end - p) < 11 || memcmp(p, "<parameter=", 11)) goto fail;
        p += 11;
        const char *pg = memchr(p, '>', (size_t)(end - p));
        if (!pg || pg == p) goto fail;
        char *pname = strndup(p, (size_t)(pg - p));
        if (!pname) goto fail;
        const char *v = pg + 1;
        const char *ve = find_mem(v, (size_t)(end - v), "</parameter>");
        if (!ve) {
            free(pname);
            goto fail;
        }
        json_t *val = xml_value(v, (size_t)(ve - v), tools ? param_type(tools, fn, pname) : NULL);
        int rc = val ? json_object_set_new(args, pname, val) : -1;
        free(pname);
        if (rc) goto fail;
        p = ve + 12;
    }
    *arguments = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    if (!*arguments) {
        free(fn);
        return false;
    }
    *name = fn;
    return true;
fail:
    free(fn);
    json_decref(args);
    return false;
}

bool srv_tool_parse_block(const char *s, size_t len, const json_t *tools, char **name,
                          char **arguments)
{
    while (len && is_space(*s)) s++, len--;
    while (len && is_space(s[len - 1])) len--;
    if (len >= 10 && !memcmp(s, "<function=", 10)) return parse_xml(s, len, tools, name, arguments);
    json_t *o = json_loadb(s, len, 0, NULL);
    if (!o) return false;
    bool ok = parse_call_object(o, name, arguments);
    json_decref(o);
    return ok;
}

/* ------------------------------------------------------------ Gemma 4 calls */

/* Gemma 4 writes a call as its chat template renders one (format_argument
 * with escape_keys=False), read here as:
 *
 *   body   := ws "call:" NAME "{" members? "}" ws
 *   members:= member ("," member)* ","?
 *   member := ws key ws ":" ws value ws
 *   key    := bare text up to ":" | <|"|>text<|"|> | "json string"
 *   value  := <|"|>any text<|"|> | "{" members? "}" | "[" values? "]"
 *           | true | false | null | None | number | "json string"
 *           | other bare text (taken as a string)
 *
 * The template prints keys bare, strings between <|"|> tokens (verbatim:
 * quotes, braces and newlines included), booleans as true/false, None as
 * None (null in later revisions) and numbers as Python prints them. Output is
 * compact JSON; numbers keep their text. */

#define G_MAX_DEPTH 64

struct gparse {
    const char *p, *end;
    struct srv_buf *out;
    int depth;
};

static bool g_at(const struct gparse *g, const char *lit)
{
    size_t n = strlen(lit);
    return (size_t)(g->end - g->p) >= n && !memcmp(g->p, lit, n);
}

static void g_ws(struct gparse *g)
{
    while (g->p < g->end && is_space(*g->p)) g->p++;
}

/* Appends s[0..n) as a JSON string; false when it is not valid UTF-8. */
static bool g_emit_string(struct srv_buf *out, const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(j);
    bool ok = t && srv_buf_adds(out, t);
    free(t);
    return ok;
}

/* A <|"|>...<|"|> string or a "JSON string" at g->p: its text (the JSON form
 * decoded) appended to out as a JSON string. */
static bool g_string(struct gparse *g, struct srv_buf *out)
{
    if (g_at(g, G_QUOTE)) {
        const char *s = g->p + sizeof G_QUOTE - 1;
        const char *e = find_mem(s, (size_t)(g->end - s), G_QUOTE);
        if (!e) return false;
        g->p = e + sizeof G_QUOTE - 1;
        return g_emit_string(out, s, (size_t)(e - s));
    }
    json_error_t err;
    json_t *j =
        json_loadb(g->p, (size_t)(g->end - g->p), JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, &err);
    bool ok = json_is_string(j) && g_emit_string(out, json_string_value(j), json_string_length(j));
    json_decref(j);
    if (ok) g->p += err.position;
    return ok;
}

/* True when s[0..n) is a JSON number (-?int frac? exp?). */
static bool is_json_number(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i == n || s[i] < '0' || s[i] > '9') return false;
    if (s[i] == '0') {
        i++;
    } else {
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && s[i] == '.') {
        if (++i == n || s[i] < '0' || s[i] > '9') return false;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        if (++i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i == n || s[i] < '0' || s[i] > '9') return false;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    return i == n;
}

static bool g_value(struct gparse *g);

/* "{" members? "}" or "[" values? "]" at g->p. */
static bool g_container(struct gparse *g, bool object)
{
    char close = object ? '}' : ']';
    if (++g->depth > G_MAX_DEPTH) return false;
    g->p++;
    srv_buf_adds(g->out, object ? "{" : "[");
    bool first = true;
    for (;;) {
        g_ws(g);
        if (g->p == g->end) return false;
        if (*g->p == close) break;
        if (!first) srv_buf_adds(g->out, ",");
        first = false;
        if (object) {
            if (g_at(g, G_QUOTE) || *g->p == '"') {
                if (!g_string(g, g->out)) return false;
                g_ws(g);
                if (g->p == g->end || *g->p != ':') return false;
            } else {
                const char *k = g->p;
                while (g->p < g->end && *g->p != ':' && !strchr("{}[],\"", *g->p)) g->p++;
                if (g->p == g->end || *g->p != ':') return false;
                const char *ke = g->p;
                while (ke > k && is_space(ke[-1])) ke--;
                if (ke == k || find_mem(k, (size_t)(ke - k), G_QUOTE)) return false;
                if (!g_emit_string(g->out, k, (size_t)(ke - k))) return false;
            }
            g->p++; /* ':' */
            srv_buf_adds(g->out, ":");
        }
        if (!g_value(g)) return false;
        g_ws(g);
        if (g->p < g->end && *g->p == ',') {
            g->p++;
            continue;
        }
        if (g->p == g->end || *g->p != close) return false;
    }
    g->p++;
    g->depth--;
    return srv_buf_adds(g->out, object ? "}" : "]");
}

static bool g_value(struct gparse *g)
{
    g_ws(g);
    if (g->p == g->end) return false;
    if (*g->p == '{') return g_container(g, true);
    if (*g->p == '[') return g_container(g, false);
    if (g_at(g, G_QUOTE) || *g->p == '"') return g_string(g, g->out);
    const char *v = g->p;
    while (g->p < g->end && !strchr(",}]", *g->p) && !g_at(g, G_QUOTE)) g->p++;
    const char *ve = g->p;
    while (ve > v && is_space(ve[-1])) ve--;
    size_t n = (size_t)(ve - v);
    if (n == 0) return false;
    static const char *const lits[][2] = {{"true", "true"}, {"false", "false"}, {"null", "null"},
                                          {"True", "true"}, {"False", "false"}, {"None", "null"}};
    for (size_t i = 0; i < sizeof lits / sizeof lits[0]; i++)
        if (n == strlen(lits[i][0]) && !memcmp(v, lits[i][0], n))
            return srv_buf_adds(g->out, lits[i][1]);
    if (is_json_number(v, n)) return srv_buf_add(g->out, v, n);
    return g_emit_string(g->out, v, n);
}

bool srv_tool_parse_gemma(const char *s, size_t len, char **name, char **arguments)
{
    const char *p = s, *end = s + len;
    while (p < end && is_space(*p)) p++;
    while (end > p && is_space(end[-1])) end--;
    if ((size_t)(end - p) < 5 || memcmp(p, "call:", 5)) return false;
    p += 5;
    const char *n = p;
    while (p < end && *p != '{' && !is_space(*p) && !strchr("<>}\"", *p)) p++;
    if (p == n || p == end || *p != '{') return false;
    struct srv_buf out = {0};
    struct gparse g = {.p = p, .end = end, .out = &out};
    if (!g_container(&g, true) || g.p != end || !out.p) {
        srv_buf_free(&out);
        return false;
    }
    /* What was written is JSON by construction; checked all the same, which
     * also refuses a key given twice and an allocation that failed midway
     * (integers past 64 bits are JSON too). */
    json_t *chk = json_loads(out.p, JSON_DECODE_INT_AS_REAL | JSON_REJECT_DUPLICATES, NULL);
    bool ok = json_is_object(chk);
    json_decref(chk);
    *name = ok ? strndup(n, (size_t)(p - n)) : NULL;
    if (!*name) {
        srv_buf_free(&out);
        return false;
    }
    *arguments = out.p; /* NUL-terminated by srv_buf_add */
    return true;
}

static bool push_call(struct srv_tool_call **calls, int *n_calls, char *name, char *args,
                      uint64_t *rng)
{
    struct srv_tool_call *a = realloc(*calls, (size_t)(*n_calls + 1) * sizeof *a);
    if (!a) {
        free(name);
        free(args);
        return false;
    }
    *calls = a;
    struct srv_tool_call *c = &a[(*n_calls)++];
    srv_tool_make_id(c->id, rng);
    c->name = name;
    c->arguments = args;
    return true;
}

bool srv_tool_parse_llama(const char *s, size_t len, struct srv_tool_call **calls, int *n_calls,
                          uint64_t *rng)
{
    const char *p = s, *end = s + len;
    while (p < end && is_space(*p)) p++;
    if ((size_t)(end - p) >= sizeof PY_TAG - 1 && !memcmp(p, PY_TAG, sizeof PY_TAG - 1))
        p += sizeof PY_TAG - 1;
    struct srv_tool_call *got = NULL;
    int n = 0;
    for (;;) {
        while (p < end && (is_space(*p) || *p == ';')) p++;
        if (p == end) break;
        json_error_t e;
        json_t *o = json_loadb(p, (size_t)(end - p), JSON_DISABLE_EOF_CHECK, &e);
        if (!o) goto fail;
        char *name, *args;
        bool ok = parse_call_object(o, &name, &args);
        json_decref(o);
        if (!ok || !push_call(&got, &n, name, args, rng)) goto fail;
        p += e.position;
    }
    if (n == 0) goto fail;
    *calls = got;
    *n_calls = n;
    return true;
fail:
    for (int i = 0; i < n; i++) srv_tool_call_free(&got[i]);
    free(got);
    return false;
}

/* -------------------------------------------------------- incremental parser */

void srv_tools_init(struct srv_tools *t, bool enabled, const json_t *tools, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->enabled = enabled;
    t->tools = tools;
    t->rng = seed;
    t->state = T_START;
}

/* Emits content s[0..n) minus its trailing whitespace, which goes to t->ws
 * (it is dropped if a call follows, emitted if text follows). */
static void emit_text(struct srv_tools *t, const char *s, size_t n, struct srv_buf *content)
{
    size_t e = n;
    while (e > 0 && is_space(s[e - 1])) e--;
    if (e > 0) {
        srv_buf_add(content, t->ws.p ? t->ws.p : "", t->ws.len);
        srv_buf_consume(&t->ws, t->ws.len);
        srv_buf_add(content, s, e);
    }
    srv_buf_add(&t->ws, s + e, n - e);
}

/* Decides a <tool_call> / <|tool_call> block body p[0..n): a call (held
 * whitespace before it dropped, *called set), or literal content (the opening
 * tag and the body; the caller adds the closing tag). False on out of memory. */
static bool take_block(struct srv_tools *t, const char *p, size_t n, bool gemma,
                       struct srv_buf *content, struct srv_tool_call **calls, int *n_calls,
                       bool *called)
{
    char *name, *args;
    bool ok = gemma ? srv_tool_parse_gemma(p, n, &name, &args)
                    : srv_tool_parse_block(p, n, t->tools, &name, &args);
    *called = ok;
    if (ok) {
        if (!push_call(calls, n_calls, name, args, &t->rng)) return false;
        t->n_calls++;
    } else {
        srv_buf_add(content, t->ws.p ? t->ws.p : "", t->ws.len);
        srv_buf_adds(content, gemma ? G_OPEN : CALL_OPEN);
        srv_buf_add(content, p, n);
    }
    srv_buf_consume(&t->ws, t->ws.len);
    return true;
}

static bool tools_step(struct srv_tools *t, struct srv_buf *content, struct srv_tool_call **calls,
                       int *n_calls)
{
    for (;;) {
        const char *p = t->hold.p;
        size_t n = t->hold.len;
        if (t->state == T_START) {
            size_t k = 0;
            while (k < n && is_space(p[k])) k++;
            if (k == n) return true;
            size_t rest = n - k, tl = sizeof PY_TAG - 1;
            if (p[k] == '{' || (rest >= tl && !memcmp(p + k, PY_TAG, tl))) {
                t->state = T_JSON;
                return true;
            }
            if (rest < tl && !memcmp(p + k, PY_TAG, rest)) return true;
            t->state = T_TEXT;
        }
        if (t->state == T_JSON) return true;
        if (t->state == T_TEXT) {
            const char *m = find_mem(p, n, CALL_OPEN), *g = find_mem(p, n, G_OPEN);
            bool gemma = g && (!m || g < m);
            if (gemma) m = g;
            if (!m) {
                size_t keep = srv_partial_suffix(p, n, CALL_OPEN),
                       kg = srv_partial_suffix(p, n, G_OPEN);
                if (kg > keep) keep = kg;
                emit_text(t, p, n - keep, content);
                srv_buf_consume(&t->hold, n - keep);
                return true;
            }
            emit_text(t, p, (size_t)(m - p), content);
            srv_buf_consume(&t->hold, (size_t)(m - p) + strlen(gemma ? G_OPEN : CALL_OPEN));
            t->state = gemma ? T_GCALL : T_CALL;
            continue;
        }
        /* T_CALL / T_GCALL: wait for the closing tag, then decide. */
        bool gemma = t->state == T_GCALL;
        const char *close = gemma ? G_CLOSE : CALL_CLOSE;
        const char *m = find_mem(p, n, close);
        if (!m) return true;
        size_t body = (size_t)(m - p), cl = strlen(close);
        bool called;
        if (!take_block(t, p, body, gemma, content, calls, n_calls, &called)) return false;
        if (!called) srv_buf_add(content, p + body, cl);
        srv_buf_consume(&t->hold, body + cl);
        t->state = T_TEXT;
    }
}

bool srv_tools_push(struct srv_tools *t, const char *text, size_t len, struct srv_buf *content,
                    struct srv_tool_call **calls, int *n_calls)
{
    if (!t->enabled) return srv_buf_add(content, text, len);
    if (!srv_buf_add(&t->hold, text, len)) return false;
    return tools_step(t, content, calls, n_calls);
}

bool srv_tools_flush(struct srv_tools *t, struct srv_buf *content, struct srv_tool_call **calls,
                     int *n_calls)
{
    if (!t->enabled) return true;
    const char *p = t->hold.p ? t->hold.p : "";
    size_t n = t->hold.len;
    bool ok = true;
    if (t->state == T_JSON) {
        struct srv_tool_call *got = NULL;
        int ng = 0;
        if (srv_tool_parse_llama(p, n, &got, &ng, &t->rng)) {
            for (int i = 0; i < ng && ok; i++) {
                ok = push_call(calls, n_calls, got[i].name, got[i].arguments, &t->rng);
                if (ok) memcpy((*calls)[*n_calls - 1].id, got[i].id, sizeof got[i].id);
            }
            t->n_calls += ng;
            free(got);
        } else {
            srv_buf_add(content, p, n);
        }
    } else if (t->state == T_CALL || t->state == T_GCALL) {
        /* the output ended inside a block: a complete call still counts */
        bool called;
        ok = take_block(t, p, n, t->state == T_GCALL, content, calls, n_calls, &called);
    } else {
        /* T_START / T_TEXT: held whitespace and any partial tag are text. */
        struct srv_buf tail = {0};
        srv_buf_add(&tail, t->ws.p ? t->ws.p : "", t->ws.len);
        srv_buf_add(&tail, p, n);
        size_t e = tail.len;
        if (t->n_calls > 0)
            while (e > 0 && is_space(tail.p[e - 1])) e--;
        srv_buf_add(content, tail.p ? tail.p : "", e);
        srv_buf_free(&tail);
    }
    srv_buf_consume(&t->hold, t->hold.len);
    srv_buf_consume(&t->ws, t->ws.len);
    return ok;
}

void srv_tools_deinit(struct srv_tools *t)
{
    srv_buf_free(&t->hold);
    srv_buf_free(&t->ws);
}
