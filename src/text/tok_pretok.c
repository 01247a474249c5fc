/*
 * tok_pretok.c — pre-tokenizers: Split (String or Regex pattern, the five
 * split behaviors, invert), ByteLevel (prefix space + GPT-2 regex; the byte
 * to char mapping itself is folded into the BPE model's tables), Metaspace
 * and Digits. Pieces are byte ranges in a pool string; a pre-tokenizer turns
 * one piece list into the next, as HF's PreTokenizedString::split does
 * (empty pieces dropped). Depends on tok_internal.h (patterns, UTF-8).
 */
#include "text/tok_internal.h"

#include <string.h>

struct span {
    size_t s, e;
    bool m; /* is a match (delimiter) */
};

struct spans {
    struct span *v;
    size_t n, cap;
};

static enum tern_status spans_push(struct spans *sp, size_t s, size_t e, bool m)
{
    if (sp->n == sp->cap) TERN_TRY(tern_grow((void **)&sp->v, &sp->cap, sp->n + 1, sizeof *sp->v));
    sp->v[sp->n++] = (struct span){s, e, m};
    return TERN_OK;
}

static enum tern_status pieces_push(struct tok_pieces *ps, size_t off, size_t len, bool at_start)
{
    if (len == 0) return TERN_OK;
    if (ps->n == ps->cap) TERN_TRY(tern_grow((void **)&ps->v, &ps->cap, ps->n + 1, sizeof *ps->v));
    ps->v[ps->n++] = (struct tok_piece){off, len, at_start};
    return TERN_OK;
}

/* Match spans of a pattern covering s[0..len) (HF Pattern::find_matches). */
static enum tern_status find_pattern(const struct tok_pattern *p, struct tok_rx *rx, const char *s,
                                     size_t len, struct spans *out)
{
    size_t prev = 0, from = 0, ms, me;
    while (from <= len && tok_pattern_next(p, rx, s, len, from, &ms, &me)) {
        if (prev < ms) TERN_TRY(spans_push(out, prev, ms, false));
        TERN_TRY(spans_push(out, ms, me, true));
        prev = me;
        from = me;
        if (me == ms) { /* empty match: step over one character */
            if (me >= len) break;
            int l = tok_utf8_len((const unsigned char *)s + me, len - me);
            from = me + (size_t)(l ? l : 1);
        }
    }
    if (prev < len) TERN_TRY(spans_push(out, prev, len, false));
    return TERN_OK;
}

/* Digits: each numeric character is a match; gaps are merged. */
static enum tern_status find_digits(const char *s, size_t len, struct spans *out)
{
    size_t last = 0, i = 0;
    while (i < len) {
        int l = tok_utf8_len((const unsigned char *)s + i, len - i);
        if (!l) l = 1;
        if (tok_cp_is_numeric(tok_utf8_decode((const unsigned char *)s + i, l))) {
            if (last < i) TERN_TRY(spans_push(out, last, i, false));
            TERN_TRY(spans_push(out, i, i + (size_t)l, true));
            last = i + (size_t)l;
        }
        i += (size_t)l;
    }
    if (last < len) TERN_TRY(spans_push(out, last, len, false));
    return TERN_OK;
}

/* Applies a split behavior to the spans and pushes the resulting pieces. */
static enum tern_status apply_behavior(enum tok_split_behavior b, struct spans *sp,
                                       const struct tok_piece *p, struct tok_pieces *out)
{
    struct span *v = sp->v;
    size_t n = 0;
    bool prev_m = false;
    if (b == TOK_SPLIT_MERGED_NEXT) { /* fold from the right, as HF does */
        for (size_t i = sp->n; i-- > 0;) {
            struct span x = v[i];
            if (x.m && !prev_m && n > 0) v[sp->n - n].s = x.s;
            else v[sp->n - 1 - n++] = (struct span){x.s, x.e, false};
            prev_m = x.m;
        }
        memmove(v, v + sp->n - n, n * sizeof *v);
    } else if (b != TOK_SPLIT_ISOLATED && b != TOK_SPLIT_REMOVED) {
        for (size_t i = 0; i < sp->n; i++) {
            struct span x = v[i];
            bool merge = b == TOK_SPLIT_MERGED_PREV ? (x.m && !prev_m) : (x.m == prev_m);
            if (merge && n > 0) v[n - 1].e = x.e;
            else v[n++] = (struct span){x.s, x.e, false};
            prev_m = x.m;
        }
    } else {
        n = sp->n;
    }
    for (size_t i = 0; i < n; i++) {
        if (b == TOK_SPLIT_REMOVED && v[i].m) continue;
        TERN_TRY(pieces_push(out, p->off + v[i].s, v[i].e - v[i].s, p->at_start && v[i].s == 0));
    }
    return TERN_OK;
}

/* Appends prefix + pool[off..off+len) to the pool as a new piece range. */
static enum tern_status pool_prefixed(struct tern_str *pool, const char *prefix, size_t plen,
                                      size_t off, size_t len, size_t *new_off)
{
    TERN_TRY(tern_str_reserve(pool, pool->len + plen + len + 1));
    *new_off = pool->len;
    memcpy(pool->data + pool->len, prefix, plen);
    memcpy(pool->data + pool->len + plen, pool->data + off, len);
    pool->len += plen + len;
    pool->data[pool->len] = '\0';
    return TERN_OK;
}

static enum tern_status metaspace(const struct tok_pretok *pt, struct tern_str *pool,
                                  struct tok_piece p, struct tok_piece *out)
{
    TERN_TRY(tern_str_reserve(pool, pool->len + pt->repl_len * (p.len + 1) + 1));
    const char *s = pool->data + p.off;
    char *o = pool->data + pool->len;
    size_t n = 0;
    bool starts = p.len >= pt->repl_len && !memcmp(s, pt->repl, pt->repl_len);
    bool starts_space = p.len > 0 && s[0] == ' ';
    bool pre = !starts && !starts_space &&
               (pt->prepend == TOK_PREPEND_ALWAYS || (pt->prepend == TOK_PREPEND_FIRST && p.at_start));
    if (pre) {
        memcpy(o, pt->repl, pt->repl_len);
        n = pt->repl_len;
    }
    for (size_t i = 0; i < p.len; i++) {
        if (s[i] == ' ') {
            memcpy(o + n, pt->repl, pt->repl_len);
            n += pt->repl_len;
        } else {
            o[n++] = s[i];
        }
    }
    *out = (struct tok_piece){pool->len, n, p.at_start};
    pool->len += n;
    pool->data[pool->len] = '\0';
    return TERN_OK;
}

static enum tern_status pretok_one(const struct tok_pretok *pt, struct tok_rx *rx,
                                   struct tern_str *pool, struct tok_piece p, struct spans *sp,
                                   struct tok_pieces *out)
{
    sp->n = 0;
    switch (pt->type) {
    case TOK_PRE_SPLIT:
        TERN_TRY(find_pattern(&pt->pat, rx, pool->data + p.off, p.len, sp));
        if (pt->invert)
            for (size_t i = 0; i < sp->n; i++) sp->v[i].m = !sp->v[i].m;
        return apply_behavior(pt->behavior, sp, &p, out);
    case TOK_PRE_BYTELEVEL:
        if (pt->add_prefix_space && pool->data[p.off] != ' ') {
            size_t off;
            TERN_TRY(pool_prefixed(pool, " ", 1, p.off, p.len, &off));
            p.off = off;
            p.len += 1;
        }
        if (!pt->use_regex) return pieces_push(out, p.off, p.len, p.at_start);
        TERN_TRY(find_pattern(&pt->pat, rx, pool->data + p.off, p.len, sp));
        return apply_behavior(TOK_SPLIT_ISOLATED, sp, &p, out);
    case TOK_PRE_METASPACE: {
        struct tok_piece q;
        TERN_TRY(metaspace(pt, pool, p, &q));
        if (!pt->split) return pieces_push(out, q.off, q.len, q.at_start);
        struct tok_pattern lit = {false, (char *)pt->repl, pt->repl_len, NULL};
        TERN_TRY(find_pattern(&lit, rx, pool->data + q.off, q.len, sp));
        return apply_behavior(TOK_SPLIT_MERGED_NEXT, sp, &q, out);
    }
    case TOK_PRE_DIGITS:
        TERN_TRY(find_digits(pool->data + p.off, p.len, sp));
        return apply_behavior(pt->individual_digits ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS, sp,
                              &p, out);
    }
    return tern_error(TERN_E_INTERNAL, "pre_tokenizer: unknown type");
}

enum tern_status tok_pretokenize(const struct tern_tokenizer *tok, struct tok_rx *rx,
                                 struct tern_str *pool, struct tok_pieces *a,
                                 struct tok_pieces *b, struct tok_pieces **out)
{
    struct spans sp = {0};
    enum tern_status st = TERN_OK;
    for (int k = 0; k < tok->n_pretoks && !st; k++) {
        b->n = 0;
        for (size_t i = 0; i < a->n && !st; i++)
            st = pretok_one(&tok->pretoks[k], rx, pool, a->v[i], &sp, b);
        struct tok_pieces t = *a;
        *a = *b;
        *b = t;
    }
    tern_free(sp.v);
    *out = a;
    return st;
}
