/*
 * kv.c — the block pool, free list, prefix cache and block tables described
 * in kv.h. All arrays are sized at creation; nothing here allocates after
 * tern_kv_create. Depends on base/ and libxxhash (<xxhash.h>).
 */
#include "kv/kv.h"

#include <string.h>
#include <xxhash.h>

struct tern_kv {
    int32_t n_blocks;
    int32_t block_size;
    int32_t window; /* 0: tables keep every block; else a query sees `window` keys */
    bool prefix_cache;

    int32_t *ref;             /* [n_blocks] */
    int32_t *prev, *next;     /* [n_blocks] free-list links, -1 = none */
    int32_t head, tail;       /* free list ends, -1 when empty */
    int32_t n_free;

    /* prefix cache: a chained hash table over the blocks themselves */
    uint8_t *cached;          /* [n_blocks] 1 = holds a key, is in a chain */
    uint64_t *key;            /* [n_blocks] */
    int32_t *parent;          /* [n_blocks] canonical parent block, -1 for the first */
    uint32_t *parent_gen;     /* [n_blocks] parent's generation when keyed */
    uint32_t *gen;            /* [n_blocks] bumped on eviction */
    int32_t *chain;           /* [n_blocks] next block in the same bucket, -1 */
    int32_t *buckets;         /* [n_buckets] first block of each bucket, -1 */
    uint64_t bucket_mask;
    int32_t *tokens;          /* [n_blocks, block_size] tokens of keyed blocks */
    int32_t n_cached;
};

/* ------------------------------------------------------------ free list */

static void list_unlink(struct tern_kv *kv, int32_t b)
{
    int32_t p = kv->prev[b], n = kv->next[b];
    if (p >= 0) kv->next[p] = n; else kv->head = n;
    if (n >= 0) kv->prev[n] = p; else kv->tail = p;
    kv->prev[b] = kv->next[b] = -1;
    kv->n_free--;
}

static void list_push_tail(struct tern_kv *kv, int32_t b)
{
    kv->prev[b] = kv->tail;
    kv->next[b] = -1;
    if (kv->tail >= 0) kv->next[kv->tail] = b; else kv->head = b;
    kv->tail = b;
    kv->n_free++;
}

static void list_push_head(struct tern_kv *kv, int32_t b)
{
    kv->next[b] = kv->head;
    kv->prev[b] = -1;
    if (kv->head >= 0) kv->prev[kv->head] = b; else kv->tail = b;
    kv->head = b;
    kv->n_free++;
}

/* ------------------------------------------------------------ hash table */

static void cache_remove(struct tern_kv *kv, int32_t b)
{
    int32_t *pp = &kv->buckets[kv->key[b] & kv->bucket_mask];
    while (*pp != b) {
        TERN_ASSERT(*pp >= 0);
        pp = &kv->chain[*pp];
    }
    *pp = kv->chain[b];
    kv->chain[b] = -1;
    kv->cached[b] = 0;
    kv->gen[b]++; /* children keyed under this incarnation can no longer match */
    kv->n_cached--;
}

static void cache_insert(struct tern_kv *kv, int32_t b, uint64_t key, int32_t parent,
                         uint32_t parent_gen, const int32_t *toks)
{
    int32_t *bucket = &kv->buckets[key & kv->bucket_mask];
    kv->key[b] = key;
    kv->parent[b] = parent;
    kv->parent_gen[b] = parent_gen;
    memcpy(kv->tokens + (size_t)b * kv->block_size, toks, sizeof(int32_t) * kv->block_size);
    kv->chain[b] = *bucket;
    *bucket = b;
    kv->cached[b] = 1;
    kv->n_cached++;
}

/* The cached block with exactly this key, content and parent, or -1. A
 * windowed pool does not hold a block's parents, so there the key (which
 * chains every earlier token) and the block's own tokens decide. */
static int32_t cache_find(const struct tern_kv *kv, uint64_t key, int32_t parent,
                          uint32_t parent_gen, const int32_t *toks)
{
    for (int32_t b = kv->buckets[key & kv->bucket_mask]; b >= 0; b = kv->chain[b]) {
        if (kv->key[b] != key) continue;
        if (!kv->window && kv->parent[b] != parent) continue;
        if (!kv->window && parent >= 0 && kv->parent_gen[b] != parent_gen) continue;
        if (memcmp(kv->tokens + (size_t)b * kv->block_size, toks,
                   sizeof(int32_t) * kv->block_size) != 0)
            continue;
        return b;
    }
    return -1;
}

static uint64_t block_key(const struct tern_kv *kv, const int32_t *toks, uint64_t parent_key)
{
    return XXH3_64bits_withSeed(toks, sizeof(int32_t) * (size_t)kv->block_size, parent_key);
}

/* ------------------------------------------------------------ pool */

enum tern_status tern_kv_create(const struct tern_kv_params *params, struct tern_kv **out)
{
    *out = NULL;
    if (params->n_blocks <= 0 || params->block_size <= 0 || params->window < 0)
        return tern_error(TERN_E_INVALID_ARG, "kv: n_blocks (%d) and block_size (%d) must be > 0, "
                          "window (%d) >= 0", params->n_blocks, params->block_size, params->window);
    struct tern_kv *kv = tern_calloc(1, sizeof *kv);
    if (!kv) return TERN_E_NO_MEMORY;
    int32_t n = params->n_blocks;
    size_t n_buckets = 16;
    while (n_buckets < (size_t)n * 2) n_buckets *= 2;
    kv->n_blocks = n;
    kv->block_size = params->block_size;
    kv->window = params->window;
    kv->prefix_cache = params->enable_prefix_cache;
    kv->bucket_mask = n_buckets - 1;
    kv->ref = tern_calloc(n, sizeof(int32_t));
    kv->prev = tern_calloc(n, sizeof(int32_t));
    kv->next = tern_calloc(n, sizeof(int32_t));
    kv->cached = tern_calloc(n, 1);
    kv->key = tern_calloc(n, sizeof(uint64_t));
    kv->parent = tern_calloc(n, sizeof(int32_t));
    kv->parent_gen = tern_calloc(n, sizeof(uint32_t));
    kv->gen = tern_calloc(n, sizeof(uint32_t));
    kv->chain = tern_calloc(n, sizeof(int32_t));
    kv->buckets = tern_calloc(n_buckets, sizeof(int32_t));
    kv->tokens = tern_calloc((size_t)n, sizeof(int32_t) * (size_t)params->block_size);
    if (!kv->ref || !kv->prev || !kv->next || !kv->cached || !kv->key || !kv->parent ||
        !kv->parent_gen || !kv->gen || !kv->chain || !kv->buckets || !kv->tokens)
        goto fail;
    for (size_t i = 0; i < n_buckets; i++) kv->buckets[i] = -1;
    kv->head = kv->tail = -1;
    for (int32_t b = 0; b < n; b++) {
        kv->chain[b] = -1;
        list_push_tail(kv, b);
    }
    *out = kv;
    return TERN_OK;
fail:
    tern_kv_destroy(kv);
    return TERN_E_NO_MEMORY;
}

void tern_kv_destroy(struct tern_kv *kv)
{
    if (!kv) return;
    tern_free(kv->ref);
    tern_free(kv->prev);
    tern_free(kv->next);
    tern_free(kv->cached);
    tern_free(kv->key);
    tern_free(kv->parent);
    tern_free(kv->parent_gen);
    tern_free(kv->gen);
    tern_free(kv->chain);
    tern_free(kv->buckets);
    tern_free(kv->tokens);
    tern_free(kv);
}

int32_t tern_kv_block_size(const struct tern_kv *kv) { return kv->block_size; }
int32_t tern_kv_window(const struct tern_kv *kv) { return kv->window; }
int32_t tern_kv_n_blocks(const struct tern_kv *kv) { return kv->n_blocks; }
int32_t tern_kv_n_free(const struct tern_kv *kv) { return kv->n_free; }
int32_t tern_kv_n_cached(const struct tern_kv *kv) { return kv->n_cached; }
int32_t tern_kv_block_ref(const struct tern_kv *kv, int32_t b) { return kv->ref[b]; }
bool tern_kv_block_is_cached(const struct tern_kv *kv, int32_t b) { return kv->cached[b] != 0; }

int32_t tern_kv_blocks_for(const struct tern_kv *kv, int32_t n_tokens)
{
    return (int32_t)(((int64_t)n_tokens + kv->block_size - 1) / kv->block_size);
}

bool tern_kv_check(const struct tern_kv *kv)
{
    int32_t n = 0, n_zero = 0, n_cached = 0;
    for (int32_t b = kv->head, p = -1; b >= 0; p = b, b = kv->next[b]) {
        if (kv->prev[b] != p || kv->ref[b] != 0 || ++n > kv->n_blocks) return false;
        if (kv->next[b] < 0 && kv->tail != b) return false;
    }
    for (int32_t b = 0; b < kv->n_blocks; b++) {
        if (kv->ref[b] < 0) return false;
        n_zero += kv->ref[b] == 0;
        n_cached += kv->cached[b];
    }
    if (n != kv->n_free || n_zero != kv->n_free || n_cached != kv->n_cached) return false;
    for (uint64_t i = 0; i <= kv->bucket_mask; i++)
        for (int32_t b = kv->buckets[i]; b >= 0; b = kv->chain[b])
            if (!kv->cached[b] || (kv->key[b] & kv->bucket_mask) != i || --n_cached < 0)
                return false;
    return n_cached == 0;
}

/* Takes the head of the free list, evicting its key if it has one. */
static int32_t block_alloc(struct tern_kv *kv)
{
    int32_t b = kv->head;
    TERN_ASSERT(b >= 0);
    list_unlink(kv, b);
    if (kv->cached[b]) cache_remove(kv, b);
    kv->ref[b] = 1;
    return b;
}

static void block_decref(struct tern_kv *kv, int32_t b)
{
    TERN_ASSERT(kv->ref[b] > 0);
    if (--kv->ref[b] > 0) return;
    if (kv->cached[b]) list_push_tail(kv, b);
    else list_push_head(kv, b);
}

static void block_incref(struct tern_kv *kv, int32_t b)
{
    if (kv->ref[b] == 0) list_unlink(kv, b);
    kv->ref[b]++;
}

/* ------------------------------------------------------------ block tables */

void tern_kv_seq_init(struct tern_kv_seq *seq, int32_t *blocks, int32_t cap)
{
    memset(seq, 0, sizeof *seq);
    seq->blocks = blocks;
    seq->cap = cap;
    seq->parent = -1;
}

/* The first block a query at position pos still reads in a windowed pool
 * (0 for a full one). */
static int32_t first_live_block(const struct tern_kv *kv, int32_t pos)
{
    int32_t lo = kv->window ? pos - kv->window + 1 : 0;
    return lo > 0 ? lo / kv->block_size : 0;
}

/* Windowed pools: the longest prefix of whole blocks (at most n_full) whose
 * last blocks, those a query right after it reads, are all cached; the
 * table holds those blocks and -1 before them. */
static int32_t match_windowed(struct tern_kv *kv, struct tern_kv_seq *seq, const int32_t *tokens,
                              int32_t n_full)
{
    int32_t bs = kv->block_size, best = 0, run = 0; /* run: cached blocks ending at j */
    uint64_t key = 0;
    for (int32_t j = 0; j < n_full; j++) {
        key = block_key(kv, tokens + (size_t)j * bs, key);
        run = cache_find(kv, key, -1, 0, tokens + (size_t)j * bs) >= 0 ? run + 1 : 0;
        int32_t need = j + 1 - first_live_block(kv, (j + 1) * bs);
        if (run >= need) best = j + 1;
    }
    key = 0;
    for (int32_t j = 0; j < best; j++) {
        const int32_t *toks = tokens + (size_t)j * bs;
        key = block_key(kv, toks, key);
        int32_t b = -1;
        if (j >= first_live_block(kv, best * bs)) {
            b = cache_find(kv, key, -1, 0, toks);
            TERN_ASSERT(b >= 0);
            block_incref(kv, b);
        }
        seq->blocks[j] = b;
    }
    seq->n_blocks = seq->n_keyed = best;
    seq->last_key = key;
    seq->n_computed = best * bs;
    return seq->n_computed;
}

int32_t tern_kv_seq_match_prefix(struct tern_kv *kv, struct tern_kv_seq *seq,
                                 const int32_t *tokens, int32_t max_tokens)
{
    TERN_ASSERT(seq->n_blocks == 0 && seq->n_computed == 0);
    if (!kv->prefix_cache) return 0;
    int32_t bs = kv->block_size;
    int32_t n_full = max_tokens > 0 ? max_tokens / bs : 0;
    if (n_full > seq->cap) n_full = seq->cap;
    if (kv->window) return match_windowed(kv, seq, tokens, n_full);
    for (int32_t j = 0; j < n_full; j++) {
        const int32_t *toks = tokens + (size_t)j * bs;
        uint64_t key = block_key(kv, toks, seq->last_key);
        int32_t b = cache_find(kv, key, seq->parent, seq->parent_gen, toks);
        if (b < 0) break;
        block_incref(kv, b);
        seq->blocks[seq->n_blocks++] = b;
        seq->n_keyed++;
        seq->last_key = key;
        seq->parent = b;
        seq->parent_gen = kv->gen[b];
    }
    seq->n_computed = seq->n_blocks * bs;
    return seq->n_computed;
}

int32_t tern_kv_seq_blocks_needed(const struct tern_kv *kv, const struct tern_kv_seq *seq,
                                  int32_t n_new)
{
    int32_t need_blocks = tern_kv_blocks_for(kv, seq->n_computed + n_new);
    int32_t n = need_blocks > seq->n_blocks ? need_blocks - seq->n_blocks : 0;
    int32_t end = need_blocks < seq->n_blocks ? need_blocks : seq->n_blocks;
    for (int32_t j = seq->n_computed / kv->block_size; j < end; j++)
        n += kv->ref[seq->blocks[j]] > 1; /* shared: copy on write */
    return n;
}

bool tern_kv_seq_reserve(struct tern_kv *kv, struct tern_kv_seq *seq, int32_t n_new,
                         struct tern_kv_copy *copies, int32_t *n_copies)
{
    if (n_new <= 0) return true;
    int32_t need_blocks = tern_kv_blocks_for(kv, seq->n_computed + n_new);
    TERN_ASSERT(need_blocks <= seq->cap);
    if (tern_kv_seq_blocks_needed(kv, seq, n_new) > kv->n_free) return false;
    int32_t end = need_blocks < seq->n_blocks ? need_blocks : seq->n_blocks;
    for (int32_t j = seq->n_computed / kv->block_size; j < end; j++) {
        int32_t src = seq->blocks[j];
        if (kv->ref[src] <= 1) continue;
        int32_t dst = block_alloc(kv);
        block_decref(kv, src);
        seq->blocks[j] = dst;
        copies[(*n_copies)++] = (struct tern_kv_copy){src, dst, 0};
    }
    while (seq->n_blocks < need_blocks) seq->blocks[seq->n_blocks++] = block_alloc(kv);
    return true;
}

/* Keys the blocks that became full (commit). */
static void key_blocks(struct tern_kv *kv, struct tern_kv_seq *seq, const int32_t *tokens)
{
    int32_t bs = kv->block_size;
    while (seq->n_keyed < seq->n_computed / bs) {
        int32_t j = seq->n_keyed;
        const int32_t *toks = tokens + (size_t)j * bs;
        uint64_t key = block_key(kv, toks, seq->last_key);
        int32_t b = seq->blocks[j];
        int32_t canon = cache_find(kv, key, seq->parent, seq->parent_gen, toks);
        if (canon < 0 && !kv->cached[b]) {
            cache_insert(kv, b, key, seq->parent, seq->parent_gen, toks);
            canon = b;
        } else if (canon < 0) {
            canon = b; /* already keyed (shared by a fork): it is the canonical one */
        }
        seq->n_keyed++;
        seq->last_key = key;
        seq->parent = canon;
        seq->parent_gen = kv->gen[canon];
    }
}

void tern_kv_seq_trim(struct tern_kv *kv, struct tern_kv_seq *seq)
{
    if (!kv->window) return;
    int32_t live = first_live_block(kv, seq->n_computed);
    for (int32_t j = 0; j < live && j < seq->n_blocks; j++) {
        if (seq->blocks[j] < 0) continue;
        block_decref(kv, seq->blocks[j]);
        seq->blocks[j] = -1;
    }
}

void tern_kv_seq_commit(struct tern_kv *kv, struct tern_kv_seq *seq, const int32_t *tokens,
                        int32_t n_new)
{
    int32_t bs = kv->block_size;
    seq->n_computed += n_new;
    TERN_ASSERT(seq->n_computed <= seq->n_blocks * bs);
    if (kv->prefix_cache) key_blocks(kv, seq, tokens);
    tern_kv_seq_trim(kv, seq);
}

void tern_kv_seq_fork(struct tern_kv *kv, const struct tern_kv_seq *src, struct tern_kv_seq *dst)
{
    TERN_ASSERT(dst->n_blocks == 0 && dst->cap >= src->n_blocks);
    int32_t *blocks = dst->blocks;
    int32_t cap = dst->cap;
    *dst = *src;
    dst->blocks = blocks;
    dst->cap = cap;
    for (int32_t j = 0; j < src->n_blocks; j++) {
        dst->blocks[j] = src->blocks[j];
        if (src->blocks[j] >= 0) block_incref(kv, src->blocks[j]);
    }
}

void tern_kv_seq_free(struct tern_kv *kv, struct tern_kv_seq *seq)
{
    for (int32_t j = seq->n_blocks - 1; j >= 0; j--)
        if (seq->blocks[j] >= 0) block_decref(kv, seq->blocks[j]);
    tern_kv_seq_init(seq, seq->blocks, seq->cap);
}
