/*
 * tok_gguf.c — tern_tokenizer_from_gguf and tern_chat_template_from_gguf
 * (tok_gguf.h): the tokenizer.json pipeline's components, set up from a
 * GGUF's tokenizer.ggml.* keys instead of read from JSON.
 *
 * GPT-2 style vocabularies carry their merges; the pre-tokenizer is named
 * (tokenizer.ggml.pre) rather than described, and each name maps to the
 * normalizer and pre-tokenizers of the Hugging Face tokenizer it was
 * converted from (the regexes are those tokenizer.json files hold).
 *
 * SentencePiece vocabularies carry scores instead of merges. llama.cpp merges
 * the adjacent pair whose concatenation is the highest-scoring token, the
 * leftmost among equal scores; that is the BPE merge loop of tok_bpe.c with
 * a merge (a, b) -> ab for every token ab that splits into two tokens a and b,
 * ranked by ab's score (equal scores, equal rank, so that position decides),
 * which is also how Hugging Face converts these vocabularies.
 *
 * Depends on tok_internal.h, io/gguf.h, io/gguf_arch.h.
 */
#include "text/tok_gguf.h"
#include "io/gguf_arch.h"
#include "text/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LLAMA3_RE                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                     \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_RE                                                                                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                          \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define SPM_SPACE "\xE2\x96\x81" /* U+2581, SentencePiece's space */

struct gload {
    const struct tern_gguf *g;
    const char *path;
    struct tern_tokenizer *tok;
    const struct tern_gguf_value *toks, *types; /* types may be NULL */
    int32_t n;
};

static int token_type(const struct gload *l, int32_t id)
{
    return l->types ? (int)tern_gguf_arr_int(l->types, (uint64_t)id) : TERN_GGUF_TOKEN_NORMAL;
}

/* ---------------------------------------------------------------- vocabulary */

static enum tern_status load_vocab(struct gload *l)
{
    struct tern_tokenizer *tok = l->tok;
    size_t bytes = 1, len;
    for (int32_t id = 0; id < l->n; id++) {
        tern_gguf_arr_str(l->toks, (uint64_t)id, &len);
        bytes += len + 1; /* each string is stored with a NUL */
    }
    if (bytes >= UINT32_MAX)
        return tern_error(TERN_E_UNSUPPORTED, "%s: the vocabulary's strings exceed 4 GiB", l->path);
    TERN_TRY(tok_vocab_reserve(&tok->vocab, l->n, bytes));
    for (int32_t id = 0; id < l->n; id++) {
        const char *s = tern_gguf_arr_str(l->toks, (uint64_t)id, &len);
        if (len == 0 || token_type(l, id) == TERN_GGUF_TOKEN_UNUSED) continue; /* a hole */
        TERN_TRY(tok_vocab_set(&tok->vocab, id, s, len));
    }
    TERN_TRY(tok_vocab_grow(&tok->vocab, l->n));
    tok->n_model = l->n;
    return TERN_OK;
}

/* Control, unknown and user-defined tokens: split off the raw text first. */
static enum tern_status load_added(struct gload *l)
{
    struct tern_tokenizer *tok = l->tok;
    int n = 0;
    for (int32_t id = 0; id < l->n; id++) {
        int t = token_type(l, id);
        n += t == TERN_GGUF_TOKEN_CONTROL || t == TERN_GGUF_TOKEN_UNKNOWN ||
             t == TERN_GGUF_TOKEN_USER_DEFINED;
    }
    if (!(tok->added = tern_calloc(n ? (size_t)n : 1, sizeof *tok->added))) return TERN_E_NO_MEMORY;
    for (int32_t id = 0; id < l->n; id++) {
        int t = token_type(l, id);
        size_t len;
        const char *s = tok_vocab_str(&tok->vocab, id, &len);
        if (!s || (t != TERN_GGUF_TOKEN_CONTROL && t != TERN_GGUF_TOKEN_UNKNOWN &&
                   t != TERN_GGUF_TOKEN_USER_DEFINED))
            continue;
        struct tok_added *a = &tok->added[tok->n_added++];
        a->id = id;
        if (!(a->content = tern_strndup(s, len))) return TERN_E_NO_MEMORY;
        a->len = len;
        a->special = t != TERN_GGUF_TOKEN_USER_DEFINED;
    }
    return TERN_OK;
}

/* ---------------------------------------------------------------- merges */

static enum tern_status load_merges(struct gload *l)
{
    struct tern_tokenizer *tok = l->tok;
    const struct tern_gguf_value *m;
    TERN_TRY(tern_gguf_get_arr(l->g, "tokenizer.ggml.merges", TERN_GGUF_STRING, &m));
    if (m->n > INT32_MAX)
        return tern_error(TERN_E_FORMAT, "%s: %llu merges", l->path, (unsigned long long)m->n);
    TERN_TRY(tok_merges_reserve(&tok->merges, (size_t)m->n + 16));
    struct tern_str ab = {0};
    enum tern_status st = TERN_OK;
    for (uint64_t r = 0; r < m->n && !st; r++) {
        size_t len;
        const char *s = tern_gguf_arr_str(m, r, &len);
        /* "a b", split at the first space after the first byte, as llama.cpp */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        size_t na = sp ? (size_t)(sp - s) : 0;
        tern_str_clear(&ab);
        if (sp && (st = tern_str_append(&ab, s, na)) == TERN_OK)
            st = tern_str_append(&ab, sp + 1, len - na - 1);
        if (st) break;
        int32_t ia = sp ? tok_vocab_find(&tok->vocab, s, na) : -1;
        int32_t ib = sp ? tok_vocab_find(&tok->vocab, sp + 1, len - na - 1) : -1;
        int32_t in = sp ? tok_vocab_find(&tok->vocab, ab.data, ab.len) : -1;
        if (ia < 0 || ib < 0 || in < 0)
            st = tern_error(TERN_E_FORMAT,
                            "%s: tokenizer.ggml.merges[%llu] '%.*s' is not two tokens whose "
                            "concatenation is a token",
                            l->path, (unsigned long long)r, (int)(len > 200 ? 200 : len), s);
        else
            st = tok_merges_add(&tok->merges, ia, ib, (int32_t)r, in);
    }
    tern_str_deinit(&ab);
    return st;
}

struct scored {
    float score;
    int32_t id;
};

static int by_score_desc(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* SentencePiece: a merge for every split of every token into two tokens,
 * ranked by the token's score, highest first, equal scores sharing a rank. */
static enum tern_status merges_from_scores(struct gload *l)
{
    struct tern_tokenizer *tok = l->tok;
    const struct tern_gguf_value *sc = NULL;
    if (tern_gguf_find(l->g, "tokenizer.ggml.scores")) {
        TERN_TRY(tern_gguf_get_arr(l->g, "tokenizer.ggml.scores", TERN_GGUF_FLOAT32, &sc));
        if (sc->n != (uint64_t)l->n)
            return tern_error(TERN_E_FORMAT,
                              "%s: tokenizer.ggml.scores has %llu entries for %d tokens", l->path,
                              (unsigned long long)sc->n, l->n);
    }
    struct scored *order = tern_malloc((size_t)(l->n ? l->n : 1) * sizeof *order);
    int32_t *rank = tern_malloc((size_t)(l->n ? l->n : 1) * sizeof *rank);
    enum tern_status st = order && rank ? TERN_OK : TERN_E_NO_MEMORY;
    for (int32_t id = 0; !st && id < l->n; id++)
        order[id] = (struct scored){sc ? (float)tern_gguf_arr_float(sc, (uint64_t)id) : 0.0f, id};
    if (!st) qsort(order, (size_t)l->n, sizeof *order, by_score_desc);
    for (int32_t i = 0, r = -1; !st && i < l->n; i++) {
        if (i == 0 || order[i].score != order[i - 1].score) r++;
        rank[order[i].id] = r;
    }
    if (!st) st = tok_merges_reserve(&tok->merges, (size_t)l->n * 4 + 16);
    for (int32_t id = 0; !st && id < l->n; id++) {
        size_t len;
        const char *s = tok_vocab_str(&tok->vocab, id, &len);
        if (!s || tok_vocab_find(&tok->vocab, s, len) != id) continue;
        for (size_t k = 1; k < len && !st; k++) {
            int32_t a = tok_vocab_find(&tok->vocab, s, k);
            int32_t b = a >= 0 ? tok_vocab_find(&tok->vocab, s + k, len - k) : -1;
            if (b >= 0) st = tok_merges_add(&tok->merges, a, b, rank[id], id);
        }
    }
    tern_free(order);
    tern_free(rank);
    return st;
}

/* ---------------------------------------------------------------- components */

static struct tok_pretok *add_pretok(struct tern_tokenizer *tok, enum tok_pretok_type type)
{
    struct tok_pretok *p = tern_realloc_array(tok->pretoks, (size_t)tok->n_pretoks + 1, sizeof *p);
    if (!p) return NULL;
    tok->pretoks = p;
    p += tok->n_pretoks++;
    memset(p, 0, sizeof *p);
    p->type = type;
    return p;
}

static enum tern_status set_regex(struct tok_pattern *pat, const char *re, const char *what)
{
    pat->is_regex = true;
    if (!(pat->str = tern_strdup(re))) return TERN_E_NO_MEMORY;
    pat->len = strlen(re);
    return tok_pattern_compile(pat, what);
}

static struct tok_norm *add_norm(struct tern_tokenizer *tok, enum tok_norm_type type,
                                 const char *content)
{
    struct tok_norm *n = tern_realloc_array(tok->norms, (size_t)tok->n_norms + 1, sizeof *n);
    if (!n) return NULL;
    tok->norms = n;
    n += tok->n_norms++;
    memset(n, 0, sizeof *n);
    n->type = type;
    if (content && !(n->content = tern_strdup(content))) return NULL;
    n->content_len = content ? strlen(content) : 0;
    return n;
}

static struct tok_dec *add_dec(struct tern_tokenizer *tok, enum tok_dec_type type)
{
    struct tok_dec *d = tern_realloc_array(tok->decs, (size_t)tok->n_decs + 1, sizeof *d);
    if (!d) return NULL;
    tok->decs = d;
    d += tok->n_decs++;
    memset(d, 0, sizeof *d);
    d->type = type;
    tok->has_decoder = true;
    return d;
}

/* The Hugging Face pre-tokenizers of a GPT-2 style vocabulary, by name. */
static enum tern_status gpt2_components(struct gload *l, const char *pre)
{
    struct tern_tokenizer *tok = l->tok;
    bool llama3 = !strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3");
    bool qwen2 = !strcmp(pre, "qwen2") || !strcmp(pre, "deepseek-r1-qwen");
    bool smollm = !strcmp(pre, "smollm");
    bool gpt2 = !*pre || !strcmp(pre, "gpt2") || !strcmp(pre, "gpt-2") || !strcmp(pre, "default");
    if (!llama3 && !qwen2 && !smollm && !gpt2)
        return tern_error(TERN_E_UNSUPPORTED,
                          "%s: tokenizer.ggml.pre '%s' is not supported (llama-bpe, llama3, qwen2, "
                          "deepseek-r1-qwen, smollm, gpt2 and default are)",
                          l->path, pre);
    if (!*pre)
        tern_log(TERN_LOG_WARN, "%s: no tokenizer.ggml.pre: using GPT-2's pre-tokenizer", l->path);
    struct tok_pretok *p;
    if (qwen2 && !add_norm(tok, TOK_NORM_NFC, NULL)) return TERN_E_NO_MEMORY;
    if (llama3 || qwen2) {
        if (!(p = add_pretok(tok, TOK_PRE_SPLIT))) return TERN_E_NO_MEMORY;
        p->behavior = TOK_SPLIT_ISOLATED;
        TERN_TRY(set_regex(&p->pat, llama3 ? LLAMA3_RE : QWEN2_RE, "tokenizer.ggml.pre"));
    }
    if (smollm) {
        if (!(p = add_pretok(tok, TOK_PRE_DIGITS))) return TERN_E_NO_MEMORY;
        p->individual_digits = true;
    }
    if (!(p = add_pretok(tok, TOK_PRE_BYTELEVEL))) return TERN_E_NO_MEMORY;
    p->use_regex = smollm || gpt2;
    if (p->use_regex) TERN_TRY(set_regex(&p->pat, tok_gpt2_regex, "tokenizer.ggml.pre"));
    tok->byte_level = true;
    tok->ignore_merges = llama3;
    bool space = false;
    TERN_TRY(tern_gguf_get_bool_opt(l->g, "tokenizer.ggml.add_space_prefix", false, &space));
    if (space && !add_norm(tok, TOK_NORM_PREPEND, " ")) return TERN_E_NO_MEMORY;
    if (!add_dec(tok, TOK_DEC_BYTELEVEL)) return TERN_E_NO_MEMORY;
    return load_merges(l);
}

/* SentencePiece as Hugging Face's Llama tokenizer.json describes it. */
static enum tern_status spm_components(struct gload *l, const struct tern_gguf_tok_ids *ids)
{
    struct tern_tokenizer *tok = l->tok;
    bool space = true;
    TERN_TRY(tern_gguf_get_bool_opt(l->g, "tokenizer.ggml.add_space_prefix", true, &space));
    if (space && !add_norm(tok, TOK_NORM_PREPEND, SPM_SPACE)) return TERN_E_NO_MEMORY;
    struct tok_norm *n = add_norm(tok, TOK_NORM_REPLACE, SPM_SPACE);
    if (!n || !(n->pat.str = tern_strdup(" "))) return TERN_E_NO_MEMORY;
    n->pat.len = 1;
    struct tok_dec *d = add_dec(tok, TOK_DEC_REPLACE);
    if (!d || !(d->pat.str = tern_strdup(SPM_SPACE)) || !(d->content = tern_strdup(" ")))
        return TERN_E_NO_MEMORY;
    d->pat.len = strlen(SPM_SPACE);
    d->content_len = 1;
    if (!add_dec(tok, TOK_DEC_BYTEFALLBACK) || !add_dec(tok, TOK_DEC_FUSE)) return TERN_E_NO_MEMORY;
    if (space) {
        if (!(d = add_dec(tok, TOK_DEC_STRIP)) || !(d->content = tern_strdup(" ")))
            return TERN_E_NO_MEMORY;
        d->content_len = 1;
        d->start = 1;
    }
    tok->byte_fallback = true;
    tok->fuse_unk = true;
    tok->unk_id = ids->unk;
    return merges_from_scores(l);
}

/* ---------------------------------------------------------------- entry points */

/* Rewrites the thread's message with control characters as '?': names taken
 * from the file (a pre-tokenizer, a merge, template text) stay on one line. */
static enum tern_status one_line(enum tern_status st)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", tern_last_error());
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return tern_error(st, "%s", buf);
}

static enum tern_status build(struct gload *l)
{
    struct tern_tokenizer *tok = l->tok;
    const char *model;
    TERN_TRY(tern_gguf_get_str(l->g, "tokenizer.ggml.model", &model, NULL));
    bool spm = !strcmp(model, "llama");
    if (!spm && strcmp(model, "gpt2"))
        return tern_error(TERN_E_UNSUPPORTED,
                          "%s: tokenizer.ggml.model '%s' is not supported (gpt2 and llama are)",
                          l->path, model);
    struct tern_gguf_tok_ids ids;
    TERN_TRY(tern_gguf_tok_ids(l->g, &ids));
    TERN_TRY(tern_gguf_get_arr(l->g, "tokenizer.ggml.tokens", TERN_GGUF_STRING, &l->toks));
    if (l->toks->n == 0 || l->toks->n > TOK_MAX_ID)
        return tern_error(TERN_E_UNSUPPORTED,
                          "%s: tokenizer.ggml.tokens holds %llu tokens (1 to %d "
                          "supported)",
                          l->path, (unsigned long long)l->toks->n, TOK_MAX_ID);
    l->n = (int32_t)l->toks->n;
    if (tern_gguf_find(l->g, "tokenizer.ggml.token_type")) {
        TERN_TRY(tern_gguf_get_arr(l->g, "tokenizer.ggml.token_type", TERN_GGUF_INT32, &l->types));
        if (l->types->n != l->toks->n)
            return tern_error(TERN_E_FORMAT,
                              "%s: tokenizer.ggml.token_type has %llu entries for %d "
                              "tokens",
                              l->path, (unsigned long long)l->types->n, l->n);
    }
    TERN_TRY(load_vocab(l));
    const char *pre = "";
    TERN_TRY(tern_gguf_get_str_opt(l->g, "tokenizer.ggml.pre", "", &pre));
    TERN_TRY(spm ? spm_components(l, &ids) : gpt2_components(l, pre));
    TERN_TRY(tok_build_tables(tok));
    TERN_TRY(load_added(l));
    tok->bos_id = ids.bos;
    tok->eos_id = ids.eos;
    tok->add_bos = ids.add_bos && ids.bos >= 0;
    tok->add_eos = ids.add_eos && ids.eos >= 0;
    return tok_build_added(tok);
}

enum tern_status tern_tokenizer_from_gguf(const struct tern_gguf *g, struct tern_tokenizer **out)
{
    *out = NULL;
    struct tern_tokenizer *tok = tern_calloc(1, sizeof *tok);
    if (!tok) return TERN_E_NO_MEMORY;
    tok->unk_id = tok->bos_id = tok->eos_id = -1;
    struct gload l = {g, tern_gguf_path(g), tok, NULL, NULL, 0};
    enum tern_status st = build(&l);
    if (st) {
        tern_tokenizer_close(tok);
        return one_line(st);
    }
    *out = tok;
    return TERN_OK;
}

enum tern_status tern_chat_template_from_gguf(const struct tern_gguf *g, const char *name,
                                              struct tern_chat_template **out)
{
    *out = NULL;
    struct tern_str key = {0};
    enum tern_status st = tern_str_appendz(&key, "tokenizer.chat_template");
    if (!st && name && strcmp(name, "default")) st = tern_str_appendf(&key, ".%s", name);
    const struct tern_gguf_value *v = st ? NULL : tern_gguf_find(g, key.data);
    const char *src = NULL;
    size_t len = 0;
    if (!st && !v)
        st = tern_error(TERN_E_NOT_FOUND, "%s: no chat template (no key '%s')", tern_gguf_path(g),
                        key.data);
    if (!st) st = tern_gguf_get_str(g, key.data, &src, &len);
    if (!st && (st = tern_chat_template_create(src, len, out)) != TERN_OK)
        tern_error_prefix(st, "%s: %s", tern_gguf_path(g), key.data);
    tern_str_deinit(&key);
    return st ? one_line(st) : TERN_OK;
}
