/*
 * tok_bpe.c — the BPE model: one pre-tokenized word in, token ids out.
 *
 * A word starts as one symbol per character (per byte for byte-level
 * vocabularies, whose byte -> char mapping is folded into tok->byte_id), with
 * byte fallback (<0xXX> tokens) and unk fusing as HF's BPE::merge_word. The
 * merge loop is HF's Word::merge_all: a doubly linked list of symbols and a
 * binary min-heap of candidate merges ordered by (rank, position), stale
 * entries skipped on pop. Results for words under 256 bytes are cached per
 * call (the cache lives in the caller's scratch, so the tokenizer itself stays
 * immutable and shareable between threads).
 * Depends on tok_internal.h (vocab and merge maps).
 */
#include "text/tok_internal.h"

#include <string.h>

struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    uint32_t len;       /* bytes; 0 once merged into its left neighbour */
};

struct hent {
    uint64_t key; /* rank << 32 | pos */
    int32_t new_id;
};

struct centry {
    uint32_t koff, klen, voff, vlen;
};

#define CACHE_MAX_WORD 256
#define CACHE_MAX_ENTRIES (1u << 20)

struct tok_bpe_scratch {
    struct sym *syms;
    size_t cap_syms;
    struct hent *heap;
    size_t cap_heap;
    /* word cache: open addressing over entries */
    uint32_t *slots; /* entry index + 1, 0 = empty */
    uint32_t mask;
    struct centry *ent;
    size_t n_ent, cap_ent;
    struct tern_str keys;
    int32_t *vals;
    size_t n_vals, cap_vals;
    char tmp[16];
};

struct tok_bpe_scratch *tok_bpe_scratch_create(void)
{
    return tern_calloc(1, sizeof(struct tok_bpe_scratch));
}

void tok_bpe_scratch_destroy(struct tok_bpe_scratch *s)
{
    if (!s) return;
    tern_free(s->syms);
    tern_free(s->heap);
    tern_free(s->slots);
    tern_free(s->ent);
    tern_str_deinit(&s->keys);
    tern_free(s->vals);
    tern_free(s);
}

/* ------------------------------------------------------------ cache */

static const struct centry *cache_get(const struct tok_bpe_scratch *s, const char *w, size_t len,
                                      uint64_t h)
{
    if (!s->slots) return NULL;
    for (uint32_t i = (uint32_t)h & s->mask;; i = (i + 1) & s->mask) {
        uint32_t e = s->slots[i];
        if (!e) return NULL;
        const struct centry *c = &s->ent[e - 1];
        if (c->klen == len && !memcmp(s->keys.data + c->koff, w, len)) return c;
    }
}

static enum tern_status cache_rehash(struct tok_bpe_scratch *s, uint32_t n_slots)
{
    uint32_t *slots = tern_calloc(n_slots, sizeof *slots);
    if (!slots) return TERN_E_NO_MEMORY;
    uint32_t mask = n_slots - 1;
    for (size_t e = 0; e < s->n_ent; e++) {
        const struct centry *c = &s->ent[e];
        uint32_t i = (uint32_t)tok_hash_bytes(s->keys.data + c->koff, c->klen) & mask;
        while (slots[i]) i = (i + 1) & mask;
        slots[i] = (uint32_t)e + 1;
    }
    tern_free(s->slots);
    s->slots = slots;
    s->mask = mask;
    return TERN_OK;
}

static enum tern_status cache_put(struct tok_bpe_scratch *s, const char *w, size_t len, uint64_t h,
                                  const int32_t *ids, size_t n)
{
    if (s->n_ent >= CACHE_MAX_ENTRIES) return TERN_OK;
    if (!s->slots || (s->n_ent + 1) * 2 > (size_t)s->mask + 1)
        TERN_TRY(cache_rehash(s, s->slots ? (s->mask + 1) * 2 : 4096));
    TERN_TRY(tern_grow((void **)&s->ent, &s->cap_ent, s->n_ent + 1, sizeof *s->ent));
    TERN_TRY(tern_grow((void **)&s->vals, &s->cap_vals, s->n_vals + n, sizeof *s->vals));
    struct centry c = {(uint32_t)s->keys.len, (uint32_t)len, (uint32_t)s->n_vals, (uint32_t)n};
    TERN_TRY(tern_str_append(&s->keys, w, len));
    memcpy(s->vals + s->n_vals, ids, n * sizeof *ids);
    s->n_vals += n;
    s->ent[s->n_ent++] = c;
    uint32_t i = (uint32_t)h & s->mask;
    while (s->slots[i]) i = (i + 1) & s->mask;
    s->slots[i] = (uint32_t)s->n_ent;
    return TERN_OK;
}

/* ------------------------------------------------------------ heap */

static void heap_push(struct hent *h, size_t *n, struct hent e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].key <= e.key) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static struct hent heap_pop(struct hent *h, size_t *n)
{
    struct hent top = h[0], last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1].key < h[c].key) c++;
        if (last.key <= h[c].key) break;
        h[i] = h[c];
        i = c;
    }
    if (m > 0) h[i] = last;
    return top;
}

/* ------------------------------------------------------------ symbols */

struct word {
    struct sym *v;
    size_t n;
    int32_t unk_id;   /* pending (possibly fused) unk, -1 if none */
    uint32_t unk_len;
};

static void add_sym(struct word *w, int32_t id, uint32_t len)
{
    int32_t i = (int32_t)w->n;
    w->v[w->n++] = (struct sym){id, i - 1, i + 1, len};
}

static void flush_unk(struct word *w)
{
    if (w->unk_id >= 0) add_sym(w, w->unk_id, w->unk_len);
    w->unk_id = -1;
}

/* One character that is not in the vocabulary: byte fallback, then unk. */
static void add_unknown(const struct tern_tokenizer *tok, struct word *w, const unsigned char *c,
                        int len)
{
    if (tok->byte_fallback) {
        bool all = true;
        for (int i = 0; i < len; i++) all = all && tok->byte_id[c[i]] >= 0;
        if (all) {
            flush_unk(w);
            for (int i = 0; i < len; i++) add_sym(w, tok->byte_id[c[i]], 1);
            return;
        }
    }
    if (tok->unk_id < 0) return; /* dropped, as HF does without an unk token */
    if (w->unk_id >= 0 && tok->fuse_unk) {
        w->unk_len += (uint32_t)len;
        return;
    }
    flush_unk(w);
    w->unk_id = tok->unk_id;
    w->unk_len = (uint32_t)len;
}

static void initial_symbols(const struct tern_tokenizer *tok, struct word *w, const char *s,
                            size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        int32_t id;
        int l = 1;
        if (tok->byte_level) {
            id = tok->byte_id[u[i]];
            if (id < 0) { /* the mapped char is not in the vocabulary */
                add_unknown(tok, w, u + i, 1);
                i++;
                continue;
            }
        } else if (u[i] < 0x80) {
            id = tok->ascii_id[u[i]];
        } else {
            l = tok_utf8_len(u + i, len - i);
            if (!l) l = 1;
            id = tok_vocab_find(&tok->vocab, s + i, (size_t)l);
        }
        if (id >= 0) {
            flush_unk(w);
            add_sym(w, id, (uint32_t)l);
        } else {
            add_unknown(tok, w, u + i, l);
        }
        i += (size_t)l;
    }
    flush_unk(w);
    if (w->n > 0) w->v[w->n - 1].next = -1;
}

static void merge_all(const struct tern_tokenizer *tok, struct sym *v, size_t n, struct hent *heap)
{
    size_t nh = 0;
    int32_t rank, nid;
    for (size_t i = 0; i + 1 < n; i++)
        if (tok_merges_get(&tok->merges, v[i].id, v[i + 1].id, &rank, &nid))
            heap_push(heap, &nh, (struct hent){((uint64_t)(uint32_t)rank << 32) | i, nid});
    while (nh > 0) {
        struct hent top = heap_pop(heap, &nh);
        size_t pos = (size_t)(top.key & 0xffffffffu);
        struct sym *a = &v[pos];
        if (a->len == 0 || a->next < 0) continue;
        struct sym *b = &v[a->next];
        if (!tok_merges_get(&tok->merges, a->id, b->id, &rank, &nid) || nid != top.new_id) continue;
        a->id = nid;
        a->len += b->len;
        a->next = b->next;
        b->len = 0;
        if (a->next >= 0) v[a->next].prev = (int32_t)pos;
        if (a->prev >= 0 && tok_merges_get(&tok->merges, v[a->prev].id, a->id, &rank, &nid))
            heap_push(heap, &nh,
                      (struct hent){((uint64_t)(uint32_t)rank << 32) | (uint32_t)a->prev, nid});
        if (a->next >= 0 && tok_merges_get(&tok->merges, a->id, v[a->next].id, &rank, &nid))
            heap_push(heap, &nh, (struct hent){((uint64_t)(uint32_t)rank << 32) | pos, nid});
    }
}

static enum tern_status push_ids(int32_t **ids, size_t *n_ids, size_t *cap, const int32_t *src,
                                 size_t n)
{
    TERN_TRY(tern_grow((void **)ids, cap, *n_ids + n, sizeof **ids));
    memcpy(*ids + *n_ids, src, n * sizeof *src);
    *n_ids += n;
    return TERN_OK;
}

enum tern_status tok_bpe_word(const struct tern_tokenizer *tok, struct tok_bpe_scratch *s,
                              const char *w, size_t len, int32_t **ids, size_t *n_ids,
                              size_t *cap_ids)
{
    if (len == 0) return TERN_OK;
    if (len >= UINT32_MAX / 2) return tern_error(TERN_E_CAPACITY, "tokenize: word over 2 GiB");
    if (tok->ignore_merges) {
        int32_t id = tok_vocab_find(tok->byte_level ? &tok->raw : &tok->vocab, w, len);
        if (id >= 0) return push_ids(ids, n_ids, cap_ids, &id, 1);
    }
    uint64_t h = 0;
    if (len < CACHE_MAX_WORD) {
        h = tok_hash_bytes(w, len);
        const struct centry *c = cache_get(s, w, len, h);
        if (c) return push_ids(ids, n_ids, cap_ids, s->vals + c->voff, c->vlen);
    }
    /* at most one symbol per byte (byte fallback included) */
    TERN_TRY(tern_grow((void **)&s->syms, &s->cap_syms, len, sizeof *s->syms));
    TERN_TRY(tern_grow((void **)&s->heap, &s->cap_heap, 3 * len + 2, sizeof *s->heap));
    struct word wd = {s->syms, 0, -1, 0};
    initial_symbols(tok, &wd, w, len);
    if (wd.n == 0) return TERN_OK;
    merge_all(tok, wd.v, wd.n, s->heap);
    size_t start = *n_ids;
    TERN_TRY(tern_grow((void **)ids, cap_ids, *n_ids + wd.n, sizeof **ids));
    for (int32_t i = 0; i >= 0; i = wd.v[i].next) (*ids)[(*n_ids)++] = wd.v[i].id;
    if (len < CACHE_MAX_WORD) TERN_TRY(cache_put(s, w, len, h, *ids + start, *n_ids - start));
    return TERN_OK;
}
