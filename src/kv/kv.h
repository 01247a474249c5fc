/*
 * kv.h — paged KV-cache bookkeeping: a pool of fixed-size blocks with
 * reference counts, an LRU free list, per-sequence block tables with
 * copy-on-write, and a prefix cache keyed by block-content hashes.
 *
 * Pure bookkeeping: no tensors, no device. The engine owns the K/V tensors
 * ([n_blocks, block_size, n_kv_heads, head_dim] per layer) and performs the
 * block copies this module asks for. Depends on base/ and libxxhash.
 *
 * The pool (vLLM v1 block_pool.py, in C):
 *
 *   ref[b]    how many block tables hold block b; ref == 0 <=> b is in the
 *             free list.
 *   free list doubly linked, in eviction order:
 *
 *       head -> [uncached freed] ... [cached, least recently freed] ... [cached, newest] <- tail
 *
 *             Allocation pops the head. A freed block that carries a prefix
 *             key goes to the tail (it stays reusable by key until it reaches
 *             the head and is evicted); a freed block without a key goes to
 *             the head (nothing to keep). A sequence frees its blocks last
 *             first, so a prompt's tail blocks are evicted before its head.
 *
 * A block table (struct tern_kv_seq) maps a sequence's logical block j
 * (token positions [j*block_size, (j+1)*block_size)) to a physical block:
 *
 *   position p  ->  slot blocks[p / block_size] * block_size + p % block_size
 *
 * Prefix cache: when a block is FULL of computed tokens it gets a key
 *   key_j = XXH3_64bits_withSeed(tokens of block j, key_{j-1})   (key_{-1} = 0)
 * and is entered in a hash table key -> block. A new sequence walks its
 * tokens block by block and reuses every block found (incref; a block found
 * in the free list is taken out of it). A hit is exact, not just a hash
 * match: the block's tokens are compared, and its parent must be the very
 * block the sequence matched for j-1 in the same incarnation (a generation
 * counter per block changes on eviction), so a 64-bit collision can never
 * give a sequence wrong K/V.
 *
 * Windowed pools (sliding-window layers, window W): a query at position p
 * reads keys (p - W, p] only, so once n tokens are computed the blocks
 * wholly before position n - W + 1 are dead: tern_kv_seq_trim (which commit
 * calls) releases them and leaves -1 in their table entries, so a
 * sequence holds about W / block_size blocks whatever its length. Freed
 * keyed blocks stay reusable like any other. A prefix hit in a windowed pool
 * is the longest whole-block prefix whose last blocks (those the next query
 * reads) are all cached; it matches by the chained key and the block's own
 * tokens (its parents may be gone), so a wrong hit needs a 64-bit collision
 * of the chain and identical tokens in the block.
 *
 * Lifecycle of a sequence, as the scheduler drives it:
 *
 *   tern_kv_seq_init(seq, storage)            empty table, caller's storage
 *   tern_kv_seq_match_prefix(kv, seq, toks)   reuse cached full blocks
 *   loop: tern_kv_seq_reserve(kv, seq, n)     blocks for the next n tokens (+ CoW copies)
 *         ... engine writes K/V of those n tokens ...
 *         tern_kv_seq_commit(kv, seq, toks, n) n tokens computed; full blocks get keys
 *   tern_kv_seq_fork(kv, src, dst)            n > 1: share every block (refcount)
 *   tern_kv_seq_free(kv, seq)                 release (finish, cancel, preempt)
 *
 * Not thread-safe: one thread (the engine's step loop) drives a pool.
 */
#ifndef TERN_KV_H
#define TERN_KV_H

#include "base/base.h"

struct tern_kv;

struct tern_kv_params {
    int32_t n_blocks;         /* blocks in the pool (the engine derives it from memory) */
    int32_t block_size;       /* tokens per block, e.g. 16 */
    bool enable_prefix_cache; /* false: no keys, no reuse; freed blocks are plain free */
    int32_t window;           /* 0: a full-attention pool; else the keys a query at
                               * position p reads are (p - window, p] (sliding layers) */
};

/* One block copy the engine must perform on the device (every layer of the
 * pool's group, K and V, the whole block) before running the step that
 * asked for it. */
struct tern_kv_copy {
    int32_t src;
    int32_t dst;
    int32_t group; /* which pool (the scheduler's KV group; 0 for a lone pool) */
};

/* A sequence's block table. Storage for `blocks` belongs to the caller
 * (sized at creation, so no allocation per step); the fields are read-only
 * outside kv.c. */
struct tern_kv_seq {
    int32_t *blocks;    /* [cap] physical block of logical block j, j < n_blocks
                         * (-1: released by a windowed pool) */
    int32_t cap;        /* capacity of blocks[] (max blocks per sequence) */
    int32_t n_blocks;   /* blocks held */
    int32_t n_computed; /* tokens whose K/V are in the cache (positions [0, n_computed)) */
    int32_t n_keyed;    /* leading full blocks whose prefix key has been computed */
    uint64_t last_key;  /* key of block n_keyed - 1 (0 when n_keyed == 0) */
    int32_t parent;     /* canonical cached block holding that key, or -1 */
    uint32_t parent_gen;
};

/* Creates a pool of params->n_blocks free blocks. TERN_E_INVALID_ARG when a
 * size is not positive. */
enum tern_status tern_kv_create(const struct tern_kv_params *params, struct tern_kv **out);
void tern_kv_destroy(struct tern_kv *kv);

int32_t tern_kv_block_size(const struct tern_kv *kv);
int32_t tern_kv_window(const struct tern_kv *kv);
int32_t tern_kv_n_blocks(const struct tern_kv *kv);
/* Free blocks, counting cached ones that can still be evicted. */
int32_t tern_kv_n_free(const struct tern_kv *kv);
/* Blocks that currently hold a prefix key (in use or free). */
int32_t tern_kv_n_cached(const struct tern_kv *kv);
/* Reference count of block b (0 = free). */
int32_t tern_kv_block_ref(const struct tern_kv *kv, int32_t b);
/* True when block b holds a prefix key. */
bool tern_kv_block_is_cached(const struct tern_kv *kv, int32_t b);
/* Blocks needed to hold n_tokens tokens: ceil(n_tokens / block_size). */
int32_t tern_kv_blocks_for(const struct tern_kv *kv, int32_t n_tokens);
/* Checks the pool's internal invariants (free list links and length agree
 * with ref == 0, hash chains agree with the cached flags). For tests. */
bool tern_kv_check(const struct tern_kv *kv);

/* Prepares an empty table over caller storage blocks[cap]. */
void tern_kv_seq_init(struct tern_kv_seq *seq, int32_t *blocks, int32_t cap);

/* For an EMPTY table: reuses the longest run of cached full blocks that
 * match tokens[0, n) block by block, but only whole blocks inside the first
 * `max_tokens` tokens (the scheduler passes n - 1 so that at least the last
 * token is computed and has logits). Takes a reference on each block found
 * and sets n_computed to the number of tokens reused, which it returns
 * (a multiple of block_size; 0 when the prefix cache is off). A windowed
 * pool takes only the blocks the next query reads (see above). */
int32_t tern_kv_seq_match_prefix(struct tern_kv *kv, struct tern_kv_seq *seq,
                                 const int32_t *tokens, int32_t max_tokens);

/* Makes positions [n_computed, n_computed + n_new) writable: allocates the
 * blocks they need (evicting cached free blocks from the head of the free
 * list as needed), and replaces any block in that range that is shared
 * (ref > 1) by a private copy, appending (src, dst) to copies[*n_copies]
 * (room for at least 2 entries is enough; the caller must perform them
 * before the step). All or nothing: returns false and changes nothing when
 * the pool has too few free blocks (a scheduling outcome, not an error). */
bool tern_kv_seq_reserve(struct tern_kv *kv, struct tern_kv_seq *seq, int32_t n_new,
                         struct tern_kv_copy *copies, int32_t *n_copies);

/* Blocks tern_kv_seq_reserve(seq, n_new) would take from the free list. */
int32_t tern_kv_seq_blocks_needed(const struct tern_kv *kv, const struct tern_kv_seq *seq,
                                  int32_t n_new);

/* Records that the K/V of the next n_new tokens are now written:
 * n_computed += n_new. Each block that became full gets its prefix key and,
 * when no identical block is cached yet, enters the prefix cache. `tokens`
 * is the sequence's whole token array (at least n_computed + n_new long). */
void tern_kv_seq_commit(struct tern_kv *kv, struct tern_kv_seq *seq, const int32_t *tokens,
                        int32_t n_new);

/* Windowed pools: releases the blocks no later query reads (see above);
 * a no-op for full pools. tern_kv_seq_commit calls it. */
void tern_kv_seq_trim(struct tern_kv *kv, struct tern_kv_seq *seq);

/* Makes dst (an initialised, empty table with cap >= src->n_blocks) share all
 * of src's blocks (each gets one more reference). The first write into a
 * shared partial block copies it (see tern_kv_seq_reserve). */
void tern_kv_seq_fork(struct tern_kv *kv, const struct tern_kv_seq *src, struct tern_kv_seq *dst);

/* Drops the table's references (last block first) and empties it. Blocks
 * whose count reaches zero go to the free list; keyed ones stay reusable. */
void tern_kv_seq_free(struct tern_kv *kv, struct tern_kv_seq *seq);

/* The cache slot of position pos (< n_blocks * block_size) of a sequence. */
static inline int32_t tern_kv_seq_slot(const struct tern_kv_seq *seq, int32_t block_size,
                                       int32_t pos)
{
    return seq->blocks[pos / block_size] * block_size + pos % block_size;
}

#endif /* TERN_KV_H */
