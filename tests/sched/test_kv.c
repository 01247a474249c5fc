/*
 * test_kv.c — the block pool alone: allocation all-or-nothing, refcounts,
 * the LRU free list, prefix-cache hits (exact, capped, across frees), and
 * copy-on-write after a fork.
 */
#include "testutil.h"

#include <string.h>

#include "kv/kv.h"

#define BS 4

static struct tern_kv *make(int n_blocks, bool cache)
{
    struct tern_kv *kv;
    struct tern_kv_params p = {n_blocks, BS, cache, 0};
    assert_int_equal(tern_kv_create(&p, &kv), TERN_OK);
    return kv;
}

/* Prefills all of tokens[0, n) into seq in one step (after any cache hit). */
static void prefill(struct tern_kv *kv, struct tern_kv_seq *seq, const int32_t *toks, int32_t n)
{
    struct tern_kv_copy cp[4];
    int32_t n_cp = 0;
    int32_t n_new = n - seq->n_computed;
    assert_true(tern_kv_seq_reserve(kv, seq, n_new, cp, &n_cp));
    assert_int_equal(n_cp, 0);
    tern_kv_seq_commit(kv, seq, toks, n_new);
    assert_true(tern_kv_check(kv));
}

static void test_alloc_and_free(void **state)
{
    (void)state;
    struct tern_kv *kv = make(8, false);
    int32_t tab[8], tab2[8];
    struct tern_kv_seq a, b;
    tern_kv_seq_init(&a, tab, 8);
    tern_kv_seq_init(&b, tab2, 8);
    struct tern_kv_copy cp[4];
    int32_t n_cp = 0;
    assert_true(tern_kv_seq_reserve(kv, &a, 10, cp, &n_cp)); /* 3 blocks */
    assert_int_equal(a.n_blocks, 3);
    assert_int_equal(tern_kv_n_free(kv), 5);
    assert_false(tern_kv_seq_reserve(kv, &b, 21, cp, &n_cp)); /* 6 blocks: all or nothing */
    assert_int_equal(b.n_blocks, 0);
    assert_int_equal(tern_kv_n_free(kv), 5);
    assert_true(tern_kv_seq_reserve(kv, &b, 20, cp, &n_cp));
    assert_int_equal(tern_kv_n_free(kv), 0);
    assert_int_equal(tern_kv_seq_slot(&a, BS, 9), a.blocks[2] * BS + 1);
    tern_kv_seq_free(kv, &a);
    tern_kv_seq_free(kv, &b);
    assert_int_equal(tern_kv_n_free(kv), 8);
    assert_true(tern_kv_check(kv));
    tern_kv_destroy(kv);
    struct tern_kv *bad;
    struct tern_kv_params p = {0, BS, true, 0};
    assert_int_equal(tern_kv_create(&p, &bad), TERN_E_INVALID_ARG);
}

static void test_prefix_hit_after_free(void **state)
{
    (void)state;
    struct tern_kv *kv = make(16, true);
    int32_t toks[14], other[14];
    for (int i = 0; i < 14; i++) toks[i] = 100 + i, other[i] = 100 + i;
    other[5] = 7; /* differs in block 1 */
    int32_t ta[8], tb[8], tc[8];
    struct tern_kv_seq a, b, c;
    tern_kv_seq_init(&a, ta, 8);
    assert_int_equal(tern_kv_seq_match_prefix(kv, &a, toks, 13), 0);
    prefill(kv, &a, toks, 14); /* 3 full blocks keyed, 1 partial */
    assert_int_equal(tern_kv_n_cached(kv), 3);
    int32_t a_blocks[4];
    memcpy(a_blocks, a.blocks, sizeof a_blocks);
    /* a live sharer: b reuses the three full blocks (cap 13 -> 3 blocks) */
    tern_kv_seq_init(&b, tb, 8);
    assert_int_equal(tern_kv_seq_match_prefix(kv, &b, toks, 13), 12);
    for (int j = 0; j < 3; j++) {
        assert_int_equal(b.blocks[j], a_blocks[j]);
        assert_int_equal(tern_kv_block_ref(kv, a_blocks[j]), 2);
    }
    tern_kv_seq_free(kv, &b);
    /* the cap: 12 tokens known -> only 2 blocks may be reused (one token must be computed) */
    tern_kv_seq_init(&b, tb, 8);
    assert_int_equal(tern_kv_seq_match_prefix(kv, &b, toks, 12 - 1), 8);
    tern_kv_seq_free(kv, &b);
    /* a different block 1 stops the match after block 0 */
    tern_kv_seq_init(&c, tc, 8);
    assert_int_equal(tern_kv_seq_match_prefix(kv, &c, other, 13), 4);
    tern_kv_seq_free(kv, &c);
    /* equal block-1 tokens under another cached parent are no hit: keys chain parents */
    int32_t d_toks[9] = {7, 7, 7, 7, 8, 8, 8, 8, 1}, td[8];
    struct tern_kv_seq d;
    tern_kv_seq_init(&d, td, 8);
    prefill(kv, &d, d_toks, 9); /* caches [7 7 7 7] and [8 8 8 8] */
    int32_t mixed[9] = {7, 7, 7, 7, 104, 105, 106, 107, 1}; /* block 1 of toks */
    tern_kv_seq_init(&c, tc, 8);
    assert_int_equal(tern_kv_seq_match_prefix(kv, &c, mixed, 8), 4);
    tern_kv_seq_free(kv, &c);
    tern_kv_seq_free(kv, &d);
    /* freed but not evicted: still a hit, and the hit takes blocks out of the free list */
    tern_kv_seq_free(kv, &a);
    assert_int_equal(tern_kv_n_free(kv), 16);
    tern_kv_seq_init(&b, tb, 8);
    assert_int_equal(tern_kv_seq_match_prefix(kv, &b, toks, 13), 12);
    assert_int_equal(tern_kv_n_free(kv), 13);
    for (int j = 0; j < 3; j++) assert_int_equal(b.blocks[j], a_blocks[j]);
    assert_true(tern_kv_check(kv));
    tern_kv_seq_free(kv, &b);
    tern_kv_destroy(kv);
}

static void test_lru_eviction(void **state)
{
    (void)state;
    struct tern_kv *kv = make(6, true);
    int32_t t1[8], t2[8];
    for (int i = 0; i < 8; i++) t1[i] = i, t2[i] = 50 + i;
    int32_t ta[6], tb[6], tc[6];
    struct tern_kv_seq a, b, c;
    tern_kv_seq_init(&a, ta, 6);
    tern_kv_seq_init(&b, tb, 6);
    prefill(kv, &a, t1, 8); /* 2 cached blocks */
    prefill(kv, &b, t2, 8); /* 2 cached blocks */
    tern_kv_seq_free(kv, &a); /* older: evicted first */
    tern_kv_seq_free(kv, &b);
    /* 2 never-used blocks go first, then a's second block, ... */
    tern_kv_seq_init(&c, tc, 6);
    struct tern_kv_copy cp[4];
    int32_t n_cp = 0;
    assert_true(tern_kv_seq_reserve(kv, &c, 3 * BS, cp, &n_cp));
    assert_int_equal(tern_kv_n_cached(kv), 3); /* a's last block was evicted */
    tern_kv_seq_free(kv, &c);
    tern_kv_seq_init(&a, ta, 6);
    assert_int_equal(tern_kv_seq_match_prefix(kv, &a, t1, 8), 4);
    tern_kv_seq_init(&b, tb, 6);
    assert_int_equal(tern_kv_seq_match_prefix(kv, &b, t2, 8), 8);
    assert_true(tern_kv_check(kv));
    tern_kv_seq_free(kv, &a);
    tern_kv_seq_free(kv, &b);
    tern_kv_destroy(kv);
}

static void test_fork_copy_on_write(void **state)
{
    (void)state;
    struct tern_kv *kv = make(8, true);
    int32_t toks[6] = {1, 2, 3, 4, 5, 6};
    int32_t ta[8], tb[8];
    struct tern_kv_seq a, b;
    tern_kv_seq_init(&a, ta, 8);
    tern_kv_seq_init(&b, tb, 8);
    prefill(kv, &a, toks, 6); /* block 0 full, block 1 holds 2 tokens */
    tern_kv_seq_fork(kv, &a, &b);
    int32_t full = a.blocks[0], part = a.blocks[1];
    assert_int_equal(tern_kv_block_ref(kv, full), 2);
    assert_int_equal(tern_kv_block_ref(kv, part), 2);
    /* b writes position 6 into the shared partial block: copy first */
    struct tern_kv_copy cp[4];
    int32_t n_cp = 0;
    assert_int_equal(tern_kv_seq_blocks_needed(kv, &b, 1), 1);
    assert_true(tern_kv_seq_reserve(kv, &b, 1, cp, &n_cp));
    assert_int_equal(n_cp, 1);
    assert_int_equal(cp[0].src, part);
    assert_int_equal(cp[0].dst, b.blocks[1]);
    assert_true(b.blocks[1] != part);
    assert_int_equal(b.blocks[0], full);
    assert_int_equal(tern_kv_block_ref(kv, part), 1);
    /* a, now the only holder, writes in place */
    n_cp = 0;
    assert_true(tern_kv_seq_reserve(kv, &a, 1, cp, &n_cp));
    assert_int_equal(n_cp, 0);
    assert_int_equal(a.blocks[1], part);
    assert_true(tern_kv_check(kv));
    tern_kv_seq_free(kv, &a);
    tern_kv_seq_free(kv, &b);
    assert_int_equal(tern_kv_n_free(kv), 8);
    tern_kv_destroy(kv);
}

/* A windowed pool (window 6, blocks of 4): commit releases the blocks no
 * later query reads; a later sequence's hit is the longest prefix whose
 * last blocks are all still cached, and stops where they were evicted. */
static void test_windowed_pool(void **state)
{
    (void)state;
    struct tern_kv *kv;
    struct tern_kv_params p = {8, BS, true, 6};
    assert_int_equal(tern_kv_create(&p, &kv), TERN_OK);
    assert_int_equal(tern_kv_window(kv), 6);
    int32_t toks[32], tab[8], tab2[8];
    for (int i = 0; i < 32; i++) toks[i] = 100 + i;
    struct tern_kv_seq a, b;
    tern_kv_seq_init(&a, tab, 8);
    tern_kv_seq_init(&b, tab2, 8);
    prefill(kv, &a, toks, 20); /* 5 blocks; the next query at 20 reads 15..20 */
    assert_int_equal(a.n_blocks, 5);
    for (int j = 0; j < 3; j++) assert_int_equal(a.blocks[j], -1);
    for (int j = 3; j < 5; j++) assert_true(a.blocks[j] >= 0);
    assert_int_equal(tern_kv_n_free(kv), 6); /* 3 released, still keyed */
    /* a hit at 16 needs blocks 2 and 3 (keys 11..15): both cached */
    assert_int_equal(tern_kv_seq_match_prefix(kv, &b, toks, 19), 16);
    assert_int_equal(b.blocks[0], -1);
    assert_int_equal(b.blocks[1], -1);
    assert_int_equal(b.blocks[2], 2);
    assert_int_equal(b.blocks[3], a.blocks[3]);
    assert_true(tern_kv_check(kv));
    tern_kv_seq_free(kv, &b);
    tern_kv_seq_free(kv, &a);
    /* allocate until block 2 is evicted (blocks 0 and 1, freed before it,
     * went first): no prefix is served any more */
    struct tern_kv_seq c;
    int32_t tab3[8];
    tern_kv_seq_init(&c, tab3, 8);
    struct tern_kv_copy cp[4];
    int32_t n_cp = 0;
    while (tern_kv_block_is_cached(kv, 2)) {
        assert_true(tern_kv_seq_reserve(kv, &c, BS, cp, &n_cp));
        c.n_computed += BS;
    }
    assert_false(tern_kv_block_is_cached(kv, 0));
    tern_kv_seq_init(&b, tab2, 8);
    assert_int_equal(tern_kv_seq_match_prefix(kv, &b, toks, 19), 0);
    tern_kv_seq_free(kv, &b);
    tern_kv_seq_free(kv, &c);
    assert_int_equal(tern_kv_n_free(kv), 8);
    assert_true(tern_kv_check(kv));
    tern_kv_destroy(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_and_free),
        cmocka_unit_test(test_prefix_hit_after_free),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_fork_copy_on_write),
        cmocka_unit_test(test_windowed_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
