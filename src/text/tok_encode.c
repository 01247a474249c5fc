/*
 * tok_encode.c — tern_tokenize: the encode pipeline of HF `tokenizers`.
 *
 *   text --sanitize UTF-8--> split on non-normalized added tokens (raw text)
 *        --normalize each gap--> split on normalized added tokens
 *        --pre-tokenize each gap--> BPE each piece --> post-process
 *
 * Added tokens are matched leftmost-longest (HF uses Aho-Corasick with that
 * match kind) through a byte trie, honouring single_word, lstrip and rstrip.
 * Invalid UTF-8 in the input is replaced by U+FFFD first (maximal subparts),
 * which is what a Python caller gets from bytes.decode(errors='replace').
 * Depends on tok_internal.h (normalizers, pre-tokenizers, BPE).
 */
#include "text/tok_internal.h"

#include <string.h>

/* ------------------------------------------------------------ trie */

static int32_t trie_child(const struct tok_trie *t, int32_t node, unsigned char b)
{
    uint64_t k = (((uint64_t)(uint32_t)node << 8) | b) + 1;
    for (uint32_t i = (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 40) & t->edge_mask;;
         i = (i + 1) & t->edge_mask) {
        if (t->edge_keys[i] == k) return t->edge_child[i];
        if (t->edge_keys[i] == 0) return -1;
    }
}

static enum tern_status trie_add_edge(struct tok_trie *t, int32_t node, unsigned char b,
                                      int32_t child)
{
    uint64_t k = (((uint64_t)(uint32_t)node << 8) | b) + 1;
    uint32_t i = (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 40) & t->edge_mask;
    while (t->edge_keys[i]) i = (i + 1) & t->edge_mask;
    t->edge_keys[i] = k;
    t->edge_child[i] = child;
    t->n_edges++;
    return TERN_OK;
}

enum tern_status tok_trie_build(struct tok_trie *t, const struct tern_tokenizer *tok,
                                bool normalized)
{
    memset(t, 0, sizeof *t);
    size_t total = 1;
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].normalized == normalized) total += tok->added[i].match_len;
    uint32_t slots = 16;
    while (slots < total * 2) slots <<= 1;
    t->edge_keys = tern_calloc(slots, sizeof *t->edge_keys);
    t->edge_child = tern_malloc(slots * sizeof *t->edge_child);
    t->node_tok = tern_malloc(total * sizeof *t->node_tok);
    if (!t->edge_keys || !t->edge_child || !t->node_tok) return TERN_E_NO_MEMORY;
    t->edge_mask = slots - 1;
    t->n_nodes = 1;
    t->node_tok[0] = -1;
    for (int i = 0; i < tok->n_added; i++) {
        const struct tok_added *a = &tok->added[i];
        if (a->normalized != normalized || a->match_len == 0) continue;
        int32_t node = 0;
        for (size_t j = 0; j < a->match_len; j++) {
            unsigned char b = (unsigned char)a->match[j];
            int32_t c = trie_child(t, node, b);
            if (c < 0) {
                c = t->n_nodes++;
                t->node_tok[c] = -1;
                TERN_TRY(trie_add_edge(t, node, b, c));
            }
            node = c;
        }
        if (t->node_tok[node] < 0) t->node_tok[node] = i;
        t->first[(unsigned char)a->match[0] >> 3] |= (uint8_t)(1u << (a->match[0] & 7));
    }
    return TERN_OK;
}

void tok_trie_deinit(struct tok_trie *t)
{
    tern_free(t->node_tok);
    tern_free(t->edge_keys);
    tern_free(t->edge_child);
    memset(t, 0, sizeof *t);
}

int32_t tok_trie_longest(const struct tok_trie *t, const char *s, size_t len, size_t i,
                         size_t *mlen)
{
    int32_t node = 0, best = -1;
    for (size_t j = i; j < len; j++) {
        node = trie_child(t, node, (unsigned char)s[j]);
        if (node < 0) break;
        if (t->node_tok[node] >= 0) {
            best = t->node_tok[node];
            *mlen = j + 1 - i;
        }
    }
    return best;
}

/* ------------------------------------------------------------ added tokens */

struct seg {
    size_t off, len;
    int32_t id; /* -1 for text */
};

struct segs {
    struct seg *v;
    size_t n, cap;
};

static enum tern_status segs_push(struct segs *sg, size_t off, size_t len, int32_t id)
{
    if (id < 0 && len == 0) return TERN_OK;
    TERN_TRY(tern_grow((void **)&sg->v, &sg->cap, sg->n + 1, sizeof *sg->v));
    sg->v[sg->n++] = (struct seg){off, len, id};
    return TERN_OK;
}

static int32_t cp_before(const char *s, size_t at)
{
    size_t b = at - 1;
    while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
    int l = tok_utf8_len((const unsigned char *)s + b, at - b);
    return l ? tok_utf8_decode((const unsigned char *)s + b, l) : -1;
}

static int32_t cp_at(const char *s, size_t len, size_t at, int *l)
{
    *l = tok_utf8_len((const unsigned char *)s + at, len - at);
    if (!*l) {
        *l = 1;
        return -1;
    }
    return tok_utf8_decode((const unsigned char *)s + at, *l);
}

static bool is_word_cp(int32_t c) { return c == '_' || (c >= 0 && tok_cp_is_alnum(c)); }

/* HF AddedVocabulary::find_matches over s[0..len). */
static enum tern_status split_added(const struct tern_tokenizer *tok, const struct tok_trie *t,
                                    const char *s, size_t len, struct segs *out)
{
    size_t start_off = 0, i = 0, mlen = 0;
    if (t->n_nodes <= 1) return segs_push(out, 0, len, -1);
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        if (!(t->first[c >> 3] & (1u << (c & 7)))) {
            i++;
            continue;
        }
        int32_t k = tok_trie_longest(t, s, len, i, &mlen);
        if (k < 0) {
            i++;
            continue;
        }
        const struct tok_added *a = &tok->added[k];
        size_t ms = i, me = i + mlen;
        int l;
        if (a->single_word && ((ms > 0 && is_word_cp(cp_before(s, ms))) ||
                               (me < len && is_word_cp(cp_at(s, len, me, &l))))) {
            i = me;
            continue;
        }
        if (a->lstrip) {
            size_t ns = ms;
            while (ns > start_off && tok_cp_is_whitespace(cp_before(s, ns))) {
                ns--;
                while (ns > 0 && ((unsigned char)s[ns] & 0xC0) == 0x80) ns--;
            }
            ms = ns;
        }
        if (a->rstrip)
            while (me < len && tok_cp_is_whitespace(cp_at(s, len, me, &l))) me += (size_t)l;
        TERN_TRY(segs_push(out, start_off, ms - start_off, -1));
        TERN_TRY(segs_push(out, ms, me - ms, a->id));
        start_off = i = me;
    }
    return segs_push(out, start_off, len - start_off, -1);
}

/* ------------------------------------------------------------ pipeline */

struct ctx {
    const struct tern_tokenizer *tok;
    struct tok_rx rx;
    struct tok_bpe_scratch *bpe;
    struct tern_str pool, norm;
    struct tok_pieces a, b;
    struct segs s1, s2;
    int32_t *ids;
    size_t n_ids, cap_ids;
};

static enum tern_status push_id(struct ctx *c, int32_t id)
{
    TERN_TRY(tern_grow((void **)&c->ids, &c->cap_ids, c->n_ids + 1, sizeof *c->ids));
    c->ids[c->n_ids++] = id;
    return TERN_OK;
}

/* Pre-tokenizes one normalized gap and runs the model on each piece. */
static enum tern_status encode_gap(struct ctx *c, const char *s, size_t len, bool at_start)
{
    tern_str_clear(&c->pool);
    TERN_TRY(tern_str_append(&c->pool, s, len));
    c->a.n = 0;
    if (len == 0) return TERN_OK;
    TERN_TRY(tern_grow((void **)&c->a.v, &c->a.cap, 1, sizeof *c->a.v));
    c->a.v[c->a.n++] = (struct tok_piece){0, len, at_start};
    struct tok_pieces *ps;
    TERN_TRY(tok_pretokenize(c->tok, &c->rx, &c->pool, &c->a, &c->b, &ps));
    for (size_t i = 0; i < ps->n; i++)
        TERN_TRY(tok_bpe_word(c->tok, c->bpe, c->pool.data + ps->v[i].off, ps->v[i].len, &c->ids,
                              &c->n_ids, &c->cap_ids));
    return TERN_OK;
}

static enum tern_status encode_text(struct ctx *c, const char *s, size_t len)
{
    const struct tern_tokenizer *tok = c->tok;
    c->s1.n = 0;
    TERN_TRY(split_added(tok, &tok->trie_raw, s, len, &c->s1));
    for (size_t i = 0; i < c->s1.n; i++) {
        struct seg g = c->s1.v[i];
        if (g.id >= 0) {
            TERN_TRY(push_id(c, g.id));
            continue;
        }
        tern_str_clear(&c->norm);
        TERN_TRY(tok_normalize(tok, &c->rx, s + g.off, g.len, &c->norm));
        const char *n = c->norm.data ? c->norm.data : "";
        c->s2.n = 0;
        TERN_TRY(split_added(tok, &tok->trie_norm, n, c->norm.len, &c->s2));
        for (size_t j = 0; j < c->s2.n; j++) {
            struct seg h = c->s2.v[j];
            if (h.id >= 0) TERN_TRY(push_id(c, h.id));
            else TERN_TRY(encode_gap(c, n + h.off, h.len, g.off == 0 && h.off == 0));
        }
    }
    return TERN_OK;
}

/* Post-processor ids around the sequence, then tokenizer_config's
 * add_bos_token / add_eos_token where the post-processor did not add them. */
static enum tern_status add_specials(struct ctx *c)
{
    const struct tern_tokenizer *tok = c->tok;
    bool bos = tok->add_bos && !(tok->n_pp_pre > 0 && tok->pp_pre[0] == tok->bos_id);
    bool eos = tok->add_eos && !(tok->n_pp_post > 0 && tok->pp_post[tok->n_pp_post - 1] == tok->eos_id);
    size_t pre = (size_t)tok->n_pp_pre + bos, post = (size_t)tok->n_pp_post + eos;
    if (pre + post == 0) return TERN_OK;
    TERN_TRY(tern_grow((void **)&c->ids, &c->cap_ids, c->n_ids + pre + post, sizeof *c->ids));
    if (c->n_ids) memmove(c->ids + pre, c->ids, c->n_ids * sizeof *c->ids);
    if (bos) c->ids[0] = tok->bos_id;
    if (tok->n_pp_pre) memcpy(c->ids + bos, tok->pp_pre, (size_t)tok->n_pp_pre * sizeof *c->ids);
    c->n_ids += pre;
    if (tok->n_pp_post)
        memcpy(c->ids + c->n_ids, tok->pp_post, (size_t)tok->n_pp_post * sizeof *c->ids);
    c->n_ids += (size_t)tok->n_pp_post;
    if (eos) c->ids[c->n_ids++] = tok->eos_id;
    return TERN_OK;
}

enum tern_status tern_tokenize(const struct tern_tokenizer *tok, const char *text, size_t len,
                               bool add_special, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (!tok || (!text && len)) return tern_error(TERN_E_INVALID_ARG, "tokenize: no tokenizer or text");
    struct ctx c = {.tok = tok};
    struct tern_str clean = {0};
    enum tern_status st = tok_rx_init(&c.rx);
    if (!st && !(c.bpe = tok_bpe_scratch_create())) st = TERN_E_NO_MEMORY;
    if (!st) st = tok_utf8_sanitize(text ? text : "", len, &clean);
    if (!st) st = encode_text(&c, clean.data ? clean.data : "", clean.len);
    if (!st && add_special) st = add_specials(&c);
    /* always hand back a buffer, even for no ids */
    if (!st && !c.ids && !(c.ids = tern_malloc(sizeof *c.ids))) st = TERN_E_NO_MEMORY;
    tern_str_deinit(&clean);
    tern_str_deinit(&c.pool);
    tern_str_deinit(&c.norm);
    tern_free(c.a.v);
    tern_free(c.b.v);
    tern_free(c.s1.v);
    tern_free(c.s2.v);
    tok_bpe_scratch_destroy(c.bpe);
    tok_rx_deinit(&c.rx);
    if (st) {
        tern_free(c.ids);
        return st;
    }
    *ids = c.ids;
    *n_ids = c.n_ids;
    return TERN_OK;
}
