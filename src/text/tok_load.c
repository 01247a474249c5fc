/*
 * tok_load.c — tern_tokenizer_open: reads tokenizer.json (model, added
 * tokens, normalizer, pre-tokenizer, post-processor, decoder) and
 * tokenizer_config.json (bos/eos tokens, add_bos_token/add_eos_token), and
 * builds the lookup tables encoding needs. Components outside the supported
 * set fail with TERN_E_UNSUPPORTED "unsupported <component> '<type>'".
 * Also the small accessors of the public API. Depends on jansson,
 * tok_json.c (vocab/merges fast path), tok_map.c, tok_encode.c (tries).
 */
#include "text/tok_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

struct loader {
    struct tern_tokenizer *tok;
    const char *path;
};

static const char *jstr(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(json_t *o, const char *key, bool dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static enum tern_status unsupported(struct loader *l, const char *what, json_t *o)
{
    const char *t = jstr(o, "type");
    return tern_error(TERN_E_UNSUPPORTED, "%s: unsupported %s '%s'", l->path, what,
                      t ? t : "(no type)");
}

/* Appends one zeroed element; capacity doubles at powers of two. */
static enum tern_status grow(void **arr, int *n, size_t elem)
{
    size_t have = (size_t)*n;
    if (have == 0 || (have & (have - 1)) == 0) {
        void *p = tern_realloc_array(*arr, have ? have * 2 : 4, elem);
        if (!p) return TERN_E_NO_MEMORY;
        *arr = p;
    }
    memset((char *)*arr + have * elem, 0, elem);
    (*n)++;
    return TERN_OK;
}

/* ------------------------------------------------------------ patterns */

static enum tern_status load_pattern(struct loader *l, json_t *o, struct tok_pattern *p,
                                     const char *what)
{
    json_t *pat = json_object_get(o, "pattern");
    const char *s = jstr(pat, "String");
    const char *r = jstr(pat, "Regex");
    if (!s && !r)
        return tern_error(TERN_E_FORMAT, "%s: %s without a String or Regex pattern", l->path, what);
    p->is_regex = r != NULL;
    p->str = tern_strdup(s ? s : r);
    if (!p->str) return TERN_E_NO_MEMORY;
    p->len = strlen(p->str);
    if (!p->is_regex) return TERN_OK;
    return tern_error_prefix(tok_pattern_compile(p, what), "%s", l->path);
}

static enum tern_status copy_char(struct loader *l, json_t *o, const char *key, char *dst,
                                  size_t *len, const char *dflt)
{
    const char *s = jstr(o, key);
    if (!s) s = dflt;
    size_t n = strlen(s);
    if (n == 0 || n > 4 || tok_utf8_len((const unsigned char *)s, n) != (int)n)
        return tern_error(TERN_E_FORMAT, "%s: '%s' must be one character", l->path, key);
    memcpy(dst, s, n);
    *len = n;
    return TERN_OK;
}

static enum tok_prepend_scheme prepend_scheme(json_t *o)
{
    const char *s = jstr(o, "prepend_scheme");
    if (s && !strcmp(s, "first")) return TOK_PREPEND_FIRST;
    if (s && !strcmp(s, "never")) return TOK_PREPEND_NEVER;
    if (!s && !jbool(o, "add_prefix_space", true)) return TOK_PREPEND_NEVER;
    return TOK_PREPEND_ALWAYS;
}

/* ------------------------------------------------------------ normalizers */

static enum tern_status load_normalizer(struct loader *l, json_t *o)
{
    if (json_is_null(o) || !o) return TERN_OK;
    struct tern_tokenizer *tok = l->tok;
    const char *t = jstr(o, "type");
    if (!t) return unsupported(l, "normalizer", o);
    if (!strcmp(t, "Sequence")) {
        json_t *arr = json_object_get(o, "normalizers"), *it;
        size_t i;
        json_array_foreach(arr, i, it) TERN_TRY(load_normalizer(l, it));
        return TERN_OK;
    }
    static const struct {
        const char *name;
        enum tok_norm_type type;
    } kinds[] = {{"NFC", TOK_NORM_NFC},         {"NFKC", TOK_NORM_NFKC},
                 {"NFD", TOK_NORM_NFD},         {"NFKD", TOK_NORM_NFKD},
                 {"Prepend", TOK_NORM_PREPEND}, {"Replace", TOK_NORM_REPLACE},
                 {"Strip", TOK_NORM_STRIP},     {"Lowercase", TOK_NORM_LOWERCASE}};
    int k = -1;
    for (int i = 0; i < (int)(sizeof kinds / sizeof kinds[0]); i++)
        if (!strcmp(t, kinds[i].name)) k = i;
    if (k < 0) return unsupported(l, "normalizer", o);
    TERN_TRY(grow((void **)&tok->norms, &tok->n_norms, sizeof *tok->norms));
    struct tok_norm *n = &tok->norms[tok->n_norms - 1];
    n->type = kinds[k].type;
    const char *content = n->type == TOK_NORM_PREPEND   ? jstr(o, "prepend")
                          : n->type == TOK_NORM_REPLACE ? jstr(o, "content")
                                                        : NULL;
    if (content) {
        n->content = tern_strdup(content);
        if (!n->content) return TERN_E_NO_MEMORY;
        n->content_len = strlen(content);
    }
    if (n->type == TOK_NORM_REPLACE) TERN_TRY(load_pattern(l, o, &n->pat, "Replace normalizer"));
    n->left = jbool(o, "strip_left", true);
    n->right = jbool(o, "strip_right", true);
    return TERN_OK;
}

/* ------------------------------------------------------------ pre-tokenizers */

const char tok_gpt2_regex[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
                              "\\s+(?!\\S)|\\s+";

static enum tern_status split_behavior(struct loader *l, json_t *o, enum tok_split_behavior *b)
{
    const char *s = jstr(o, "behavior");
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    for (int i = 0; s && i < 5; i++)
        if (!strcmp(s, names[i])) {
            *b = (enum tok_split_behavior)i;
            return TERN_OK;
        }
    return tern_error(TERN_E_UNSUPPORTED, "%s: unsupported Split behavior '%s'", l->path,
                      s ? s : "(none)");
}

static enum tern_status load_pretok(struct loader *l, json_t *o)
{
    if (json_is_null(o) || !o) return TERN_OK;
    struct tern_tokenizer *tok = l->tok;
    const char *t = jstr(o, "type");
    if (t && !strcmp(t, "Sequence")) {
        json_t *arr = json_object_get(o, "pretokenizers"), *it;
        size_t i;
        json_array_foreach(arr, i, it) TERN_TRY(load_pretok(l, it));
        return TERN_OK;
    }
    if (!t || (strcmp(t, "Split") && strcmp(t, "ByteLevel") && strcmp(t, "Metaspace") &&
               strcmp(t, "Digits")))
        return unsupported(l, "pre_tokenizer", o);
    if (tok->byte_level)
        return tern_error(TERN_E_UNSUPPORTED,
                          "%s: unsupported pre_tokenizer '%s' after ByteLevel", l->path, t);
    TERN_TRY(grow((void **)&tok->pretoks, &tok->n_pretoks, sizeof *tok->pretoks));
    struct tok_pretok *p = &tok->pretoks[tok->n_pretoks - 1];
    if (!strcmp(t, "Split")) {
        p->type = TOK_PRE_SPLIT;
        p->invert = jbool(o, "invert", false);
        TERN_TRY(split_behavior(l, o, &p->behavior));
        return load_pattern(l, o, &p->pat, "Split pre_tokenizer");
    }
    if (!strcmp(t, "ByteLevel")) {
        p->type = TOK_PRE_BYTELEVEL;
        p->add_prefix_space = jbool(o, "add_prefix_space", true);
        p->use_regex = jbool(o, "use_regex", true);
        tok->byte_level = true;
        if (!p->use_regex) return TERN_OK;
        p->pat.is_regex = true;
        p->pat.str = tern_strdup(tok_gpt2_regex);
        if (!p->pat.str) return TERN_E_NO_MEMORY;
        p->pat.len = strlen(tok_gpt2_regex);
        return tok_pattern_compile(&p->pat, "ByteLevel pre_tokenizer");
    }
    if (!strcmp(t, "Metaspace")) {
        p->type = TOK_PRE_METASPACE;
        p->prepend = prepend_scheme(o);
        p->split = jbool(o, "split", true);
        return copy_char(l, o, "replacement", p->repl, &p->repl_len, "\xE2\x96\x81");
    }
    p->type = TOK_PRE_DIGITS;
    p->individual_digits = jbool(o, "individual_digits", false);
    return TERN_OK;
}

/* ------------------------------------------------------------ post-processor */

static enum tern_status push_ids(int32_t **arr, int *n, json_t *ids)
{
    size_t i;
    json_t *it;
    json_array_foreach(ids, i, it)
    {
        TERN_TRY(grow((void **)arr, n, sizeof **arr));
        (*arr)[*n - 1] = (int32_t)json_integer_value(it);
    }
    return TERN_OK;
}

static enum tern_status load_template(struct loader *l, json_t *o)
{
    struct tern_tokenizer *tok = l->tok;
    json_t *single = json_object_get(o, "single"), *specials = json_object_get(o, "special_tokens");
    json_t *it;
    size_t i;
    bool after = false;
    json_array_foreach(single, i, it)
    {
        if (json_object_get(it, "Sequence")) {
            after = true;
            continue;
        }
        const char *name = jstr(json_object_get(it, "SpecialToken"), "id");
        json_t *sp = name ? json_object_get(specials, name) : NULL;
        json_t *ids = json_object_get(sp, "ids");
        if (!json_is_array(ids))
            return tern_error(TERN_E_FORMAT, "%s: TemplateProcessing token '%s' has no ids",
                              l->path, name ? name : "?");
        if (after) TERN_TRY(push_ids(&tok->pp_post, &tok->n_pp_post, ids));
        else TERN_TRY(push_ids(&tok->pp_pre, &tok->n_pp_pre, ids));
    }
    return TERN_OK;
}

static enum tern_status load_postproc(struct loader *l, json_t *o)
{
    if (json_is_null(o) || !o) return TERN_OK;
    struct tern_tokenizer *tok = l->tok;
    const char *t = jstr(o, "type");
    if (!t) return unsupported(l, "post_processor", o);
    if (!strcmp(t, "Sequence")) {
        json_t *arr = json_object_get(o, "processors"), *it;
        size_t i;
        json_array_foreach(arr, i, it) TERN_TRY(load_postproc(l, it));
        return TERN_OK;
    }
    if (!strcmp(t, "ByteLevel")) return TERN_OK; /* only trims offsets */
    if (!strcmp(t, "TemplateProcessing")) return load_template(l, o);
    if (!strcmp(t, "RobertaProcessing") || !strcmp(t, "BertProcessing")) {
        json_t *cls = json_array_get(json_object_get(o, "cls"), 1);
        json_t *sep = json_array_get(json_object_get(o, "sep"), 1);
        if (!json_is_integer(cls) || !json_is_integer(sep))
            return tern_error(TERN_E_FORMAT, "%s: %s without cls/sep", l->path, t);
        TERN_TRY(grow((void **)&tok->pp_pre, &tok->n_pp_pre, sizeof(int32_t)));
        tok->pp_pre[tok->n_pp_pre - 1] = (int32_t)json_integer_value(cls);
        TERN_TRY(grow((void **)&tok->pp_post, &tok->n_pp_post, sizeof(int32_t)));
        tok->pp_post[tok->n_pp_post - 1] = (int32_t)json_integer_value(sep);
        return TERN_OK;
    }
    return unsupported(l, "post_processor", o);
}

/* ------------------------------------------------------------ decoders */

static enum tern_status load_decoder(struct loader *l, json_t *o)
{
    if (json_is_null(o) || !o) return TERN_OK;
    struct tern_tokenizer *tok = l->tok;
    const char *t = jstr(o, "type");
    tok->has_decoder = true;
    if (t && !strcmp(t, "Sequence")) {
        json_t *arr = json_object_get(o, "decoders"), *it;
        size_t i;
        json_array_foreach(arr, i, it) TERN_TRY(load_decoder(l, it));
        return TERN_OK;
    }
    static const char *names[] = {"ByteLevel", "Metaspace", "ByteFallback",
                                  "Fuse",      "Strip",     "Replace"};
    int k = -1;
    for (int i = 0; t && i < 6; i++)
        if (!strcmp(t, names[i])) k = i;
    if (k < 0) return unsupported(l, "decoder", o);
    TERN_TRY(grow((void **)&tok->decs, &tok->n_decs, sizeof *tok->decs));
    struct tok_dec *d = &tok->decs[tok->n_decs - 1];
    d->type = (enum tok_dec_type)k;
    if (d->type == TOK_DEC_METASPACE) {
        d->prepend_never = prepend_scheme(o) == TOK_PREPEND_NEVER;
        return copy_char(l, o, "replacement", d->repl, &d->repl_len, "\xE2\x96\x81");
    }
    if (d->type == TOK_DEC_STRIP || d->type == TOK_DEC_REPLACE) {
        const char *c = jstr(o, "content");
        d->content = tern_strdup(c ? c : "");
        if (!d->content) return TERN_E_NO_MEMORY;
        d->content_len = strlen(d->content);
        d->start = (int)json_integer_value(json_object_get(o, "start"));
        d->stop = (int)json_integer_value(json_object_get(o, "stop"));
        if (d->type == TOK_DEC_REPLACE) return load_pattern(l, o, &d->pat, "Replace decoder");
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ model */

static enum tern_status load_model(struct loader *l, json_t *m)
{
    struct tern_tokenizer *tok = l->tok;
    const char *t = jstr(m, "type");
    if ((t && strcmp(t, "BPE")) || (!t && !json_object_get(m, "merges")))
        return unsupported(l, "model", m);
    if (tok->n_model == 0)
        return tern_error(TERN_E_FORMAT, "%s: model.vocab missing or empty", l->path);
    const char *pre = jstr(m, "continuing_subword_prefix"), *suf = jstr(m, "end_of_word_suffix");
    if ((pre && *pre) || (suf && *suf))
        return tern_error(TERN_E_UNSUPPORTED, "%s: unsupported model option '%s'", l->path,
                          pre && *pre ? "continuing_subword_prefix" : "end_of_word_suffix");
    tok->byte_fallback = jbool(m, "byte_fallback", false);
    tok->fuse_unk = jbool(m, "fuse_unk", false);
    tok->ignore_merges = jbool(m, "ignore_merges", false);
    const char *unk = jstr(m, "unk_token");
    tok->unk_id = unk ? tok_vocab_find(&tok->vocab, unk, strlen(unk)) : -1;
    if (unk && tok->unk_id < 0)
        return tern_error(TERN_E_FORMAT, "%s: unk_token '%s' is not in the vocabulary", l->path, unk);
    return TERN_OK;
}

static enum tern_status load_added(struct loader *l, json_t *arr)
{
    struct tern_tokenizer *tok = l->tok;
    size_t i;
    json_t *it;
    json_array_foreach(arr, i, it)
    {
        const char *c = jstr(it, "content");
        json_t *id = json_object_get(it, "id");
        if (!c || !*c || !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= INT32_MAX)
            return tern_error(TERN_E_FORMAT, "%s: added_tokens[%zu] needs an id and content",
                              l->path, i);
        TERN_TRY(grow((void **)&tok->added, &tok->n_added, sizeof *tok->added));
        struct tok_added *a = &tok->added[tok->n_added - 1];
        a->id = (int32_t)json_integer_value(id);
        a->content = tern_strdup(c);
        if (!a->content) return TERN_E_NO_MEMORY;
        a->len = strlen(c);
        a->special = jbool(it, "special", false);
        a->lstrip = jbool(it, "lstrip", false);
        a->rstrip = jbool(it, "rstrip", false);
        a->normalized = jbool(it, "normalized", !a->special);
        a->single_word = jbool(it, "single_word", false);
        size_t have;
        const char *cur = tok_vocab_str(&tok->vocab, a->id, &have);
        if (!cur || have != a->len || memcmp(cur, c, have) != 0)
            TERN_TRY(tok_vocab_set(&tok->vocab, a->id, c, a->len));
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ tables */

/* GPT-2's byte -> char map: printable bytes map to themselves, the others to
 * U+0100 upwards in byte order. */
static int32_t byte_char(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    int n = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) n++;
    return 256 + n;
}

/* Byte-level: the raw bytes of every model token, indexed for whole-word
 * lookups on unmapped text. */
static enum tern_status build_raw(struct tern_tokenizer *tok)
{
    int32_t char_byte[324];
    memset(char_byte, 0xff, sizeof char_byte);
    for (int b = 0; b < 256; b++) char_byte[byte_char(b)] = b;
    TERN_TRY(tok_vocab_reserve(&tok->raw, tok->n_model, tok->vocab.strs_len + 1));
    char *buf = tern_malloc(tok->vocab.strs_len + 1);
    if (!buf) return TERN_E_NO_MEMORY;
    enum tern_status st = TERN_OK;
    for (int32_t id = 0; id < tok->n_model && !st; id++) {
        size_t len, n = 0;
        const unsigned char *s = (const unsigned char *)tok_vocab_str(&tok->vocab, id, &len);
        if (!s) continue;
        size_t i = 0;
        while (i < len) {
            int l = tok_utf8_len(s + i, len - i);
            int32_t cp = l ? tok_utf8_decode(s + i, l) : -1;
            if (cp < 0 || cp >= 324 || char_byte[cp] < 0) break;
            buf[n++] = (char)char_byte[cp];
            i += (size_t)l;
        }
        if (i == len) st = tok_vocab_set(&tok->raw, id, buf, n);
    }
    tern_free(buf);
    return st;
}

enum tern_status tok_build_tables(struct tern_tokenizer *tok)
{
    memset(tok->char_byte, 0xff, sizeof tok->char_byte);
    for (int b = 0; b < 256; b++) tok->char_byte[byte_char(b)] = (int16_t)b;
    for (int c = 0; c < 128; c++) {
        char ch = (char)c;
        tok->ascii_id[c] = tok_vocab_find(&tok->vocab, &ch, 1);
    }
    for (int b = 0; b < 256; b++) {
        char s[8];
        int n;
        if (tok->byte_level) n = tok_utf8_encode(byte_char(b), s);
        else n = snprintf(s, sizeof s, "<0x%02X>", b);
        tok->byte_id[b] = tok_vocab_find(&tok->vocab, s, (size_t)n);
    }
    if (tok->byte_level) TERN_TRY(build_raw(tok));
    tok->dec_bytelevel_only = tok->n_decs == 1 && tok->decs[0].type == TOK_DEC_BYTELEVEL;
    return TERN_OK;
}

enum tern_status tok_build_added(struct tern_tokenizer *tok)
{
    struct tok_rx rx = {0};
    enum tern_status st = tok_rx_init(&rx);
    struct tern_str s = {0};
    for (int i = 0; i < tok->n_added && !st; i++) {
        struct tok_added *a = &tok->added[i];
        if (!a->normalized || tok->n_norms == 0) {
            a->match = a->content;
            a->match_len = a->len;
            continue;
        }
        tern_str_clear(&s);
        st = tok_normalize(tok, &rx, a->content, a->len, &s);
        if (!st && !(a->match = tern_strndup(s.data ? s.data : "", s.len))) st = TERN_E_NO_MEMORY;
        a->match_len = s.len;
    }
    tern_str_deinit(&s);
    tok_rx_deinit(&rx);
    if (st) return st;
    tok->added_of_id = tern_malloc((size_t)tok->vocab.n * sizeof(int32_t));
    if (!tok->added_of_id) return TERN_E_NO_MEMORY;
    memset(tok->added_of_id, 0xff, (size_t)tok->vocab.n * sizeof(int32_t));
    for (int i = 0; i < tok->n_added; i++) tok->added_of_id[tok->added[i].id] = i;
    TERN_TRY(tok_trie_build(&tok->trie_raw, tok, false));
    return tok_trie_build(&tok->trie_norm, tok, true);
}

/* ------------------------------------------------------------ config */

/* A top-level value of tokenizer_config.json, parsed alone: the file can be
 * over a megabyte (added_tokens_decoder, chat templates) and only four small
 * members matter here. NULL when absent. */
static json_t *config_value(const char *buf, size_t len, const char *key)
{
    const char *v;
    size_t vlen;
    if (tok_json_top_value(buf, len, key, &v, &vlen) || !v) return NULL;
    json_error_t err;
    return json_loadb(v, vlen, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &err);
}

static int32_t config_token(struct tern_tokenizer *tok, const char *buf, size_t len,
                            const char *key)
{
    json_t *v = config_value(buf, len, key);
    const char *s = json_is_string(v) ? json_string_value(v) : jstr(v, "content");
    int32_t id = s ? tern_tokenizer_token_id(tok, s) : -1;
    json_decref(v);
    return id;
}

static bool config_bool(const char *buf, size_t len, const char *key)
{
    json_t *v = config_value(buf, len, key);
    bool b = json_is_true(v);
    json_decref(v);
    return b;
}

static enum tern_status load_config(struct tern_tokenizer *tok, const char *dir)
{
    char *path = tern_path_join(dir, "tokenizer_config.json");
    if (!path) return TERN_E_NO_MEMORY;
    tok->bos_id = tok->eos_id = -1;
    if (!tern_file_exists(path)) {
        tern_free(path);
        if (tok->n_pp_pre == 1) tok->bos_id = tok->pp_pre[0];
        return TERN_OK;
    }
    char *buf = NULL;
    size_t len = 0;
    const char *v;
    size_t vlen;
    enum tern_status st = tern_file_read(path, &buf, &len);
    if (!st && tok_json_top_value(buf, len, "bos_token", &v, &vlen))
        st = tern_error(TERN_E_FORMAT, "%s: malformed JSON", path);
    if (!st) {
        tok->bos_id = config_token(tok, buf, len, "bos_token");
        tok->eos_id = config_token(tok, buf, len, "eos_token");
        tok->add_bos = config_bool(buf, len, "add_bos_token") && tok->bos_id >= 0;
        tok->add_eos = config_bool(buf, len, "add_eos_token") && tok->eos_id >= 0;
    }
    tern_free(buf);
    tern_free(path);
    return st;
}

/* ------------------------------------------------------------ open / close */

static enum tern_status load_json(struct loader *l, char *buf, size_t len)
{
    struct tern_tokenizer *tok = l->tok;
    TERN_TRY(tok_json_scan_model(buf, len, tok, l->path));
    json_error_t err;
    json_t *root = json_loadb(buf, len, 0, &err);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return tern_error(TERN_E_FORMAT, "%s:%d: %s", l->path, err.line, err.text);
    }
    enum tern_status st = load_model(l, json_object_get(root, "model"));
    if (!st) st = load_normalizer(l, json_object_get(root, "normalizer"));
    if (!st) st = load_pretok(l, json_object_get(root, "pre_tokenizer"));
    if (!st) st = load_postproc(l, json_object_get(root, "post_processor"));
    if (!st) st = load_decoder(l, json_object_get(root, "decoder"));
    if (!st) st = tok_build_tables(tok);
    if (!st) st = load_added(l, json_object_get(root, "added_tokens"));
    for (int i = 0; !st && i < tok->n_pp_pre + tok->n_pp_post; i++) {
        int32_t id = i < tok->n_pp_pre ? tok->pp_pre[i] : tok->pp_post[i - tok->n_pp_pre];
        if (id < 0 || id >= tok->vocab.n)
            st = tern_error(TERN_E_FORMAT, "%s: post_processor id %d out of range", l->path, id);
    }
    json_decref(root);
    return st;
}

enum tern_status tern_tokenizer_open(const char *dir, struct tern_tokenizer **out)
{
    *out = NULL;
    if (!dir) return tern_error(TERN_E_INVALID_ARG, "tokenizer: no directory given");
    char *path = tern_path_join(dir, "tokenizer.json");
    char *buf = NULL;
    size_t len = 0;
    struct tern_tokenizer *tok = NULL;
    enum tern_status st = path ? TERN_OK : TERN_E_NO_MEMORY;
    if (!st && !tern_file_exists(path))
        st = tern_error(TERN_E_NOT_FOUND, "%s: no such file", path);
    if (!st) st = tern_file_read(path, &buf, &len);
    if (!st && !(tok = tern_calloc(1, sizeof *tok))) st = TERN_E_NO_MEMORY;
    if (st) goto fail;
    tok->unk_id = -1;
    struct loader l = {tok, path};
    st = load_json(&l, buf, len);
    tern_free(buf);
    buf = NULL;
    if (!st) st = load_config(tok, dir);
    if (!st) st = tok_build_added(tok);
    if (st) goto fail;
    tern_free(path);
    *out = tok;
    return TERN_OK;
fail:
    tern_free(buf);
    tern_free(path);
    tern_tokenizer_close(tok);
    return st;
}

void tern_tokenizer_close(struct tern_tokenizer *tok)
{
    if (!tok) return;
    tok_vocab_deinit(&tok->vocab);
    tok_vocab_deinit(&tok->raw);
    tok_merges_deinit(&tok->merges);
    for (int i = 0; i < tok->n_norms; i++) {
        tern_free(tok->norms[i].content);
        tok_pattern_deinit(&tok->norms[i].pat);
    }
    for (int i = 0; i < tok->n_pretoks; i++) tok_pattern_deinit(&tok->pretoks[i].pat);
    for (int i = 0; i < tok->n_decs; i++) {
        tern_free(tok->decs[i].content);
        tok_pattern_deinit(&tok->decs[i].pat);
    }
    for (int i = 0; i < tok->n_added; i++) {
        if (tok->added[i].match != tok->added[i].content) tern_free(tok->added[i].match);
        tern_free(tok->added[i].content);
    }
    tern_free(tok->norms);
    tern_free(tok->pretoks);
    tern_free(tok->decs);
    tern_free(tok->added);
    tern_free(tok->added_of_id);
    tern_free(tok->pp_pre);
    tern_free(tok->pp_post);
    tok_trie_deinit(&tok->trie_raw);
    tok_trie_deinit(&tok->trie_norm);
    tern_free(tok);
}

/* ------------------------------------------------------------ accessors */

int32_t tern_tokenizer_vocab_size(const struct tern_tokenizer *tok) { return tok->vocab.n; }
int32_t tern_tokenizer_bos_id(const struct tern_tokenizer *tok) { return tok->bos_id; }
int32_t tern_tokenizer_eos_id(const struct tern_tokenizer *tok) { return tok->eos_id; }

const char *tern_tokenizer_token(const struct tern_tokenizer *tok, int32_t id)
{
    size_t len;
    return tok_vocab_str(&tok->vocab, id, &len);
}

int32_t tern_tokenizer_token_id(const struct tern_tokenizer *tok, const char *token)
{
    if (!token) return -1;
    size_t len = strlen(token);
    for (int i = 0; i < tok->n_added; i++) /* added tokens take precedence, as in HF */
        if (tok->added[i].len == len && !memcmp(tok->added[i].content, token, len))
            return tok->added[i].id;
    return tok_vocab_find(&tok->vocab, token, len);
}

bool tern_tokenizer_is_special(const struct tern_tokenizer *tok, int32_t id)
{
    if (id < 0 || id >= tok->vocab.n || !tok->added_of_id) return false;
    int32_t a = tok->added_of_id[id];
    return a >= 0 && tok->added[a].special;
}
