/*
 * toolcall.c — turns a model's content text into OpenAI tool calls,
 * incrementally. Three output forms are recognised:
 *
 *   Hermes / Qwen 2.5-3:  <tool_call>{"name": "f", "arguments": {...}}</tool_call>
 *   Qwen3.5 (XML):        <tool_call><function=f><parameter=p>v</parameter></function></tool_call>
 *   Llama 3.x:            {"name": "f", "parameters": {...}} [; {...}]   (the whole output,
 *                         possibly after <|python_tag|>)
 *
 * Text that is not a call passes through as content; a <tool_call> block
 * that does not parse is passed through literally. The parser only decides at
 * tag boundaries, so the result does not depend on how the text was split
 * into pieces. Depends on jansson and libc.
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

static const char CALL_OPEN[] = "<tool_call>";
static const char CALL_CLOSE[] = "</tool_call>";
static const char PY_TAG[] = "<|python_tag|>";

enum { T_START, T_TEXT, T_CALL, T_JSON };

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
            const char *m = find_mem(p, n, CALL_OPEN);
            if (!m) {
                size_t keep = srv_partial_suffix(p, n, CALL_OPEN);
                emit_text(t, p, n - keep, content);
                srv_buf_consume(&t->hold, n - keep);
                return true;
            }
            emit_text(t, p, (size_t)(m - p), content);
            srv_buf_consume(&t->hold, (size_t)(m - p) + sizeof CALL_OPEN - 1);
            t->state = T_CALL;
            continue;
        }
        /* T_CALL: wait for the closing tag, then decide. */
        const char *m = find_mem(p, n, CALL_CLOSE);
        if (!m) return true;
        size_t body = (size_t)(m - p);
        char *name, *args;
        if (srv_tool_parse_block(p, body, t->tools, &name, &args)) {
            if (!push_call(calls, n_calls, name, args, &t->rng)) return false;
            t->n_calls++;
            srv_buf_consume(&t->ws, t->ws.len);
        } else {
            srv_buf_add(content, t->ws.p ? t->ws.p : "", t->ws.len);
            srv_buf_consume(&t->ws, t->ws.len);
            srv_buf_adds(content, CALL_OPEN);
            srv_buf_add(content, p, body + sizeof CALL_CLOSE - 1);
        }
        srv_buf_consume(&t->hold, body + sizeof CALL_CLOSE - 1);
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
    } else if (t->state == T_CALL) {
        char *name, *args;
        if (srv_tool_parse_block(p, n, t->tools, &name, &args)) {
            ok = push_call(calls, n_calls, name, args, &t->rng);
            t->n_calls++;
        } else {
            srv_buf_add(content, t->ws.p ? t->ws.p : "", t->ws.len);
            srv_buf_adds(content, CALL_OPEN);
            srv_buf_add(content, p, n);
        }
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
