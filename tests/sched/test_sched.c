/*
 * test_sched.c — the scheduler and KV pool driven by a fake model.
 *
 * The fake device keeps, for every KV slot, the token and position written
 * there. The fake forward writes each batch token into slot_mapping[t],
 * then, for every logits row, READS the sequence's whole context back
 * through its block table and emits next = hash(context, seq_idx) % VOCAB.
 * So a wrong block table, slot, copy-on-write or prefix-cache hit changes
 * the tokens, and every sequence's tokens must equal the oracle (the same
 * hash applied to the sequence alone): batch invariance at the scheduling
 * level. Random workloads check the pool's and the batch's invariants
 * after every step.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched.h"

#define VOCAB 50
#define STOP_ID 0
#define MAX_REQS 400
#define MAX_N 3
#define MAX_GEN 64

static uint32_t fnv(const int32_t *t, int32_t n, int32_t seq_idx)
{
    uint32_t h = 2166136261u ^ (uint32_t)seq_idx * 0x9e3779b9u;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)t[i];
        h *= 16777619u;
    }
    return h;
}

struct treq {
    uint64_t id;
    int32_t prompt[128];
    int32_t n_prompt, max_tokens, n;
    bool use_stop;
    bool cancelled, admitted;
    bool preempted[MAX_N]; /* waiting after a preemption */
    int32_t streamed[MAX_N][MAX_GEN];
    int32_t n_streamed[MAX_N];
    bool seq_done[MAX_N];
    enum tern_sched_finish reason[MAX_N];
    int32_t n_cached;
    int64_t submit_step, done_step, cancel_step;
};

struct run {
    struct tern_sched_params p;
    struct tern_sched *s;
    struct tern_sched_caps caps;
    struct tern_sched_batch_storage st;
    int32_t n_groups;
    int32_t *dev_tok[TERN_MAX_KV_GROUPS], *dev_pos[TERN_MAX_KV_GROUPS]; /* fake KV per group */
    struct treq *reqs;
    int32_t n_reqs;
    uint64_t last_admitted;
    int64_t step;
    int64_t n_computed; /* tokens run through the forward */
    int64_t n_preempted;
};

static void run_init(struct run *R, struct tern_sched_params p, struct treq *reqs)
{
    memset(R, 0, sizeof *R);
    R->p = p;
    assert_int_equal(tern_sched_create(&p, &R->s), TERN_OK);
    R->caps = tern_sched_get_caps(R->s);
    R->n_groups = R->caps.n_groups;
    R->st.token_ids = calloc(R->caps.max_tokens, 4);
    R->st.positions = calloc(R->caps.max_tokens, 4);
    R->st.slot_mapping = calloc((size_t)R->n_groups * R->caps.max_tokens, 4);
    R->st.query_start = calloc(R->caps.max_seqs + 1, 4);
    R->st.seq_lens = calloc(R->caps.max_seqs, 4);
    R->st.logits_idx = calloc(R->caps.max_seqs, 4);
    R->st.block_tables =
        calloc((size_t)R->n_groups * R->caps.max_seqs * R->caps.max_blocks_per_seq, 4);
    for (int32_t g = 0; g < R->n_groups; g++) {
        int32_t nb = tern_kv_n_blocks(tern_sched_kv_group(R->s, g));
        R->dev_tok[g] = calloc((size_t)nb * p.block_size, 4);
        R->dev_pos[g] = calloc((size_t)nb * p.block_size, 4);
    }
    R->reqs = reqs;
}

static void run_deinit(struct run *R)
{
    tern_sched_destroy(R->s);
    free(R->st.token_ids);
    free(R->st.positions);
    free(R->st.slot_mapping);
    free(R->st.query_start);
    free(R->st.seq_lens);
    free(R->st.logits_idx);
    free(R->st.block_tables);
    for (int32_t g = 0; g < R->n_groups; g++) {
        free(R->dev_tok[g]);
        free(R->dev_pos[g]);
    }
}

static struct treq *find_req(struct run *R, uint64_t id)
{
    for (int32_t i = 0; i < R->n_reqs; i++)
        if (R->reqs[i].id == id) return &R->reqs[i];
    fail_msg("unknown request id %llu", (unsigned long long)id);
    return NULL;
}

static void submit(struct run *R, struct treq *q)
{
    struct tern_sched_request rq = {q->prompt, q->n_prompt, q->max_tokens, q->n,
                                    q->use_stop ? (int32_t[]){STOP_ID} : NULL,
                                    q->use_stop ? 1 : 0, q, false};
    assert_int_equal(tern_sched_submit(R->s, &rq, &q->id), TERN_OK);
    q->submit_step = R->step;
    q->done_step = -1;
}

/* Reference counts recomputed from the block tables equal every pool's; a
 * windowed pool's tables hold no more than its window and a chunk. */
static void check_pool(struct run *R)
{
    for (int32_t g = 0; g < R->n_groups; g++) {
        struct tern_kv *kv = tern_sched_kv_group(R->s, g);
        int32_t nb = tern_kv_n_blocks(kv), w = tern_kv_window(kv), bs = R->p.block_size;
        int32_t *cnt = calloc(nb, 4);
        for (int32_t slot = 0; slot < R->p.max_seqs; slot++) {
            const struct tern_kv_seq *t = tern_sched_slot_table_group(R->s, slot, g);
            if (!t) continue;
            int32_t held = 0;
            for (int32_t j = 0; j < t->n_blocks; j++) {
                if (t->blocks[j] < 0) continue;
                cnt[t->blocks[j]]++;
                held++;
            }
            if (w) assert_true(held <= (w - 1 + R->p.max_batch_tokens) / bs + 2);
        }
        int32_t n_zero = 0;
        for (int32_t b = 0; b < nb; b++) {
            assert_int_equal(cnt[b], tern_kv_block_ref(kv, b));
            n_zero += cnt[b] == 0;
        }
        assert_int_equal(n_zero, tern_kv_n_free(kv)); /* free + used == total, no leak */
        assert_true(tern_kv_check(kv));
        free(cnt);
    }
}

/* Group g's block table row of sequence s and its slots. */
static const int32_t *group_table(const struct tern_batch *b, int32_t g, int32_t s)
{
    const int32_t *bt = g ? b->group_block_tables[g] : b->block_tables;
    return bt + (size_t)s * b->max_blocks_per_seq;
}

static const int32_t *group_slots(const struct tern_batch *b, int32_t g)
{
    return g ? b->group_slot_mapping[g] : b->slot_mapping;
}

/* Structure of the batch: token budget, positions, slots, exclusive writes. */
static void check_batch(struct run *R, const struct tern_sched_out *o, const struct tern_batch *b)
{
    int32_t bs = R->p.block_size;
    assert_true(b->n_tokens <= R->p.max_batch_tokens);
    assert_int_equal(b->n_tokens, o->n_tokens);
    assert_true(b->n_seqs <= R->p.max_seqs);
    assert_int_equal(b->query_start[0], 0);
    assert_int_equal(b->query_start[b->n_seqs], b->n_tokens);
    assert_int_equal(R->n_groups > 1 ? b->n_kv_groups : 1, R->n_groups);
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t q0 = b->query_start[s], q1 = b->query_start[s + 1];
        assert_true(q1 > q0);
        assert_int_equal(q1 - q0, o->entries[s].n_new);
        assert_int_equal(b->seq_lens[s], o->entries[s].start + o->entries[s].n_new);
        for (int32_t t = q0; t < q1; t++) {
            int32_t pos = b->seq_lens[s] - (q1 - q0) + (t - q0);
            assert_int_equal(b->positions[t], pos);
            for (int32_t g = 0; g < R->n_groups; g++) {
                struct tern_kv *kv = tern_sched_kv_group(R->s, g);
                int32_t blk = group_table(b, g, s)[pos / bs];
                const int32_t *sl = group_slots(b, g);
                assert_int_equal(sl[t], blk * bs + pos % bs);
                assert_int_equal(tern_kv_block_ref(kv, blk), 1); /* written blocks are private */
                for (int32_t u = 0; u < t; u++) assert_true(sl[u] != sl[t]);
            }
        }
    }
    for (int32_t r = 0; r < b->n_logits; r++) {
        const struct tern_sched_sample *sm = &o->samples[r];
        assert_int_equal(sm->n_generated, sm->n_tokens - sm->n_prompt);
    }
}

/* Writes K/V into every group, then reads every sampled sequence's
 * context back through its block tables (all of it from group 0, a full
 * pool; a windowed group's window) and produces its next token. */
static void fake_forward(struct run *R, const struct tern_sched_out *o, const struct tern_batch *b,
                         int32_t *sampled)
{
    int32_t bs = R->p.block_size;
    for (int32_t g = 0; g < R->n_groups; g++)
        for (int32_t t = 0; t < b->n_tokens; t++) {
            R->dev_tok[g][group_slots(b, g)[t]] = b->token_ids[t];
            R->dev_pos[g][group_slots(b, g)[t]] = b->positions[t];
        }
    R->n_computed += b->n_tokens;
    int32_t ctx[256];
    for (int32_t r = 0; r < b->n_logits; r++) {
        int32_t row = b->logits_idx[r], s = 0;
        while (b->query_start[s + 1] <= row) s++;
        assert_int_equal(row, b->query_start[s + 1] - 1);
        int32_t len = b->seq_lens[s];
        const struct tern_sched_sample *sm = &o->samples[r];
        assert_int_equal(len, sm->n_tokens);
        /* positions a windowed group 0 no longer holds: the sequence's own tokens */
        memcpy(ctx, sm->tokens, 4 * (size_t)len);
        for (int32_t g = 0; g < R->n_groups; g++) {
            int32_t w = tern_kv_window(tern_sched_kv_group(R->s, g));
            for (int32_t p = w && len > w ? len - w : 0; p < len; p++) {
                int32_t slot = group_table(b, g, s)[p / bs] * bs + p % bs;
                assert_int_equal(R->dev_pos[g][slot], p);
                assert_int_equal(R->dev_tok[g][slot], sm->tokens[p]);
                if (g == 0) ctx[p] = R->dev_tok[g][slot];
            }
        }
        sampled[r] = (int32_t)(fnv(ctx, len, sm->seq_idx) % VOCAB);
    }
}

static void apply_copies(struct run *R, const struct tern_sched_out *o)
{
    int32_t bs = R->p.block_size;
    for (int32_t i = 0; i < o->n_copies; i++) {
        int32_t g = o->copies[i].group;
        assert_true(g >= 0 && g < R->n_groups);
        memcpy(R->dev_tok[g] + o->copies[i].dst * bs, R->dev_tok[g] + o->copies[i].src * bs, bs * 4);
        memcpy(R->dev_pos[g] + o->copies[i].dst * bs, R->dev_pos[g] + o->copies[i].src * bs, bs * 4);
    }
}

static void record_finished(struct run *R, const struct tern_sched_out *o)
{
    for (int32_t i = 0; i < o->n_finished; i++) {
        const struct tern_sched_done *d = &o->finished[i];
        struct treq *q = d->user;
        assert_ptr_equal(q, find_req(R, d->req_id));
        assert_false(q->seq_done[d->seq_idx]);
        q->seq_done[d->seq_idx] = true;
        q->reason[d->seq_idx] = d->reason;
        if (d->reason == TERN_SCHED_FINISH_CANCELLED) assert_true(q->cancelled);
        /* the final tokens are the prompt plus what was streamed */
        assert_int_equal(d->n_tokens, d->n_prompt + q->n_streamed[d->seq_idx]);
        assert_memory_equal(d->tokens, q->prompt, 4 * q->n_prompt);
        if (q->n_streamed[d->seq_idx])
            assert_memory_equal(d->tokens + q->n_prompt, q->streamed[d->seq_idx],
                                4 * q->n_streamed[d->seq_idx]);
        q->n_cached = d->n_cached;
        bool all = true;
        for (int32_t k = 0; k < q->n; k++) all &= q->seq_done[k];
        assert_int_equal(d->req_done, all);
        if (all) q->done_step = R->step;
    }
}

/* FCFS: first admissions happen in submission order, and never while an
 * earlier request has a preempted sequence waiting (it goes first). */
static void check_admissions(struct run *R, const struct tern_sched_out *o)
{
    for (int32_t i = 0; i < o->n_preempted; i++) {
        struct treq *q = o->preempted[i].user;
        q->preempted[o->preempted[i].seq_idx] = true;
    }
    for (int32_t e = 0; e < o->n_entries; e++) {
        struct treq *q = o->entries[e].user;
        assert_false(q->cancelled);
        q->preempted[o->entries[e].seq_idx] = false;
        if (o->entries[e].seq_idx != 0 || q->admitted) continue;
        assert_true(q->id > R->last_admitted);
        for (int32_t i = 0; i < R->n_reqs; i++)
            if (R->reqs[i].id < q->id && !R->reqs[i].cancelled)
                for (int32_t k = 0; k < MAX_N; k++) assert_false(R->reqs[i].preempted[k]);
        R->last_admitted = q->id;
        q->admitted = true;
    }
}

static void record_samples(const struct tern_sched_out *o)
{
    for (int32_t r = 0; r < o->n_samples; r++) {
        const struct tern_sched_sample *sm = &o->samples[r];
        struct treq *q = sm->user;
        if (sm->token < 0) {
            assert_true(q->cancelled);
            continue;
        }
        assert_int_equal(sm->n_generated, q->n_streamed[sm->seq_idx]);
        q->streamed[sm->seq_idx][q->n_streamed[sm->seq_idx]++] = sm->token;
        if (sm->finish == TERN_SCHED_FINISH_STOP) assert_int_equal(sm->token, STOP_ID);
    }
}

/* One engine step; cancel_mid (a request or NULL) is cancelled after the
 * forward, before the commit. Returns the plan's token count. */
static int32_t step(struct run *R, struct treq *cancel_mid)
{
    R->step++;
    struct tern_sched_out *o = tern_sched_schedule(R->s);
    record_finished(R, o);
    check_admissions(R, o);
    R->n_preempted += o->n_preempted;
    apply_copies(R, o);
    struct tern_batch b;
    tern_sched_build_batch(R->s, &R->st, &b);
    check_batch(R, o, &b);
    int32_t sampled[64];
    fake_forward(R, o, &b, sampled);
    if (cancel_mid) { /* it may have ended at the last commit, unreported yet */
        enum tern_status st = tern_sched_cancel(R->s, cancel_mid->id);
        if (st == TERN_OK) {
            cancel_mid->cancelled = true;
            cancel_mid->cancel_step = R->step;
        } else {
            assert_int_equal(st, TERN_E_NOT_FOUND);
        }
        check_pool(R);
    }
    tern_sched_commit(R->s, sampled);
    record_samples(o);
    check_pool(R);
    return o->n_tokens;
}

/* The solo oracle: the sequence's tokens with nothing else around. */
static int32_t oracle(const struct treq *q, int32_t seq_idx, int32_t *gen)
{
    int32_t ctx[256];
    memcpy(ctx, q->prompt, 4 * q->n_prompt);
    int32_t n = q->n_prompt, g = 0;
    while (g < q->max_tokens) {
        int32_t t = (int32_t)(fnv(ctx, n, seq_idx) % VOCAB);
        ctx[n++] = t;
        gen[g++] = t;
        if (q->use_stop && t == STOP_ID) break;
    }
    return g;
}

static void check_outputs(struct run *R)
{
    for (int32_t i = 0; i < R->n_reqs; i++) {
        struct treq *q = &R->reqs[i];
        assert_true(q->done_step >= 0);
        for (int32_t k = 0; k < q->n; k++) {
            assert_true(q->seq_done[k]);
            if (q->cancelled) continue;
            int32_t want[MAX_GEN];
            int32_t n = oracle(q, k, want);
            assert_int_equal(q->n_streamed[k], n);
            assert_memory_equal(q->streamed[k], want, 4 * n);
            bool stopped = q->use_stop && want[n - 1] == STOP_ID;
            assert_int_equal(q->reason[k],
                             stopped ? TERN_SCHED_FINISH_STOP : TERN_SCHED_FINISH_LENGTH);
        }
    }
}

static uint32_t rng_next(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* A random workload: arrivals over time, shared prefixes, n > 1, random
 * cancellations (queued, prefilling, decoding, mid-step), a small pool. */
static void random_workload(uint32_t seed, int32_t n_blocks, bool prefix_cache, int32_t window)
{
    struct tern_sched_params p = {6, 24, 96, n_blocks, 4, prefix_cache, 0, {0}, {0}};
    if (window < 0) { /* one windowed pool: every layer slides alike */
        p.n_groups = 1;
        p.group_window[0] = -window;
    } else if (window) { /* a full group and a windowed one (a fifth of the blocks) */
        p.n_groups = 2;
        p.group_blocks[0] = n_blocks;
        p.group_blocks[1] = n_blocks / 5 > 14 ? n_blocks / 5 : 14;
        p.group_window[1] = window;
    }
    struct treq *reqs = calloc(MAX_REQS, sizeof *reqs);
    struct run R;
    run_init(&R, p, reqs);
    uint32_t rs = seed;
    int32_t sys[3][40];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 40; i++) sys[k][i] = 1 + (int32_t)(rng_next(&rs) % (VOCAB - 1));
    const int32_t n_total = 120;
    int64_t limit = 20000;
    while (R.step < limit) {
        if (R.n_reqs < n_total && rng_next(&rs) % 3 == 0) {
            struct treq *q = &reqs[R.n_reqs++];
            int32_t shared = (int32_t)(rng_next(&rs) % 41), k = (int32_t)(rng_next(&rs) % 3);
            q->n_prompt = 1 + (int32_t)(rng_next(&rs) % 60);
            if (shared > q->n_prompt) shared = q->n_prompt;
            for (int32_t i = 0; i < q->n_prompt; i++)
                q->prompt[i] = i < shared ? sys[k][i] : 1 + (int32_t)(rng_next(&rs) % (VOCAB - 1));
            q->max_tokens = 1 + (int32_t)(rng_next(&rs) % 30);
            q->n = rng_next(&rs) % 5 == 0 ? 2 + (int32_t)(rng_next(&rs) % 2) : 1;
            q->use_stop = rng_next(&rs) % 2;
            submit(&R, q);
        }
        struct treq *mid = NULL;
        if (R.n_reqs > 0 && rng_next(&rs) % 20 == 0) {
            struct treq *q = &reqs[rng_next(&rs) % R.n_reqs];
            if (!q->cancelled && q->done_step < 0 && tern_sched_cancel(R.s, q->id) == TERN_OK) {
                q->cancelled = true;
                q->cancel_step = R.step;
                check_pool(&R); /* freed at once */
            }
        } else if (R.n_reqs > 0 && rng_next(&rs) % 25 == 0) {
            struct treq *q = &reqs[rng_next(&rs) % R.n_reqs];
            int32_t live = 0;
            for (int32_t k = 0; k < q->n; k++) live += !q->seq_done[k];
            if (!q->cancelled && q->done_step < 0 && live == q->n) mid = q;
        }
        step(&R, mid);
        for (int32_t i = 0; i < R.n_reqs; i++) /* a cancel is reported by the next schedule */
            if (reqs[i].cancelled && R.step > reqs[i].cancel_step)
                assert_true(reqs[i].done_step >= 0);
        if (R.n_reqs == n_total && tern_sched_n_requests(R.s) == 0) break;
    }
    step(&R, NULL); /* report the last ends */
    int32_t n_cancelled = 0, n_forked = 0, n_hits = 0;
    for (int32_t i = 0; i < R.n_reqs; i++) {
        n_cancelled += reqs[i].cancelled;
        n_forked += reqs[i].n > 1;
        n_hits += reqs[i].n_cached > 0;
    }
    printf("workload seed %u pool %d window %d: %d requests (%d with n > 1, %d cancelled, %d "
           "prefix hits), %lld steps, %lld tokens computed, %lld preemptions\n",
           seed, n_blocks, window, R.n_reqs, n_forked, n_cancelled, n_hits, (long long)R.step,
           (long long)R.n_computed, (long long)R.n_preempted);
    if (prefix_cache && n_blocks >= 100) assert_true(n_hits > 0);
    assert_true(R.step < limit);
    assert_int_equal(tern_sched_n_requests(R.s), 0);
    for (int32_t g = 0; g < R.n_groups; g++) {
        struct tern_kv *kv = tern_sched_kv_group(R.s, g);
        assert_int_equal(tern_kv_n_free(kv), tern_kv_n_blocks(kv));
    }
    check_outputs(&R);
    /* the small pools must actually have exercised preemption */
    if (n_blocks <= 40) assert_true(R.n_preempted > 0);
    run_deinit(&R);
    free(reqs);
}

static void test_random_small_pool(void **state)
{
    (void)state;
    for (uint32_t seed = 1; seed <= 6; seed++) random_workload(seed * 7919u, 30, true, 0);
}

static void test_random_large_pool(void **state)
{
    (void)state;
    for (uint32_t seed = 1; seed <= 4; seed++) random_workload(seed * 104729u, 200, true, 0);
}

static void test_random_no_prefix_cache(void **state)
{
    (void)state;
    for (uint32_t seed = 1; seed <= 3; seed++) random_workload(seed * 31337u, 36, false, 0);
}

/* A full and a windowed KV group: every group's context reads back right
 * through its own tables, the windowed one holds its window only, prefix
 * hits (with the windowed pool's rules) give the solo outputs. */
static void test_random_windowed_groups(void **state)
{
    (void)state;
    for (uint32_t seed = 1; seed <= 4; seed++) random_workload(seed * 7907u, 40, true, 9);
    for (uint32_t seed = 1; seed <= 3; seed++) random_workload(seed * 6133u, 200, true, 16);
    for (uint32_t seed = 1; seed <= 2; seed++) random_workload(seed * 911u, 60, false, 5);
    /* one windowed pool too small for a whole sequence (96 tokens: 24 blocks) */
    for (uint32_t seed = 1; seed <= 2; seed++) random_workload(seed * 4099u, 14, true, -9);
}

static struct tern_sched_params small_params(int32_t n_blocks)
{
    return (struct tern_sched_params){4, 16, 64, n_blocks, 4, true, 0, {0}, {0}};
}

/* Runs until the request is done; returns the tokens computed meanwhile. */
static int64_t run_until_done(struct run *R, struct treq *q)
{
    int64_t before = R->n_computed;
    for (int i = 0; i < 500 && q->done_step < 0; i++) step(R, NULL);
    assert_true(q->done_step >= 0);
    return R->n_computed - before;
}

/* A multi-turn conversation re-prefills only its new tokens. */
static void test_multi_turn_prefix(void **state)
{
    (void)state;
    struct treq reqs[3] = {0};
    struct run R;
    run_init(&R, small_params(64), reqs);
    /* turn 1: 10 prompt tokens, 6 generated. Its K/V covers 15 tokens (the
     * last generated one is never fed back): 3 full blocks get keys. */
    struct treq *t1 = &reqs[R.n_reqs++];
    t1->n_prompt = 10;
    for (int i = 0; i < 10; i++) t1->prompt[i] = 1 + i;
    t1->max_tokens = 6;
    t1->n = 1;
    submit(&R, t1);
    assert_int_equal(run_until_done(&R, t1), 10 + 5);
    assert_int_equal(t1->n_cached, 0);
    /* turn 2 (after turn 1's blocks were freed, not evicted): its prompt is
     * turn 1's 16 tokens + 7 new = 23; 12 are cached, 11 computed + 3 decodes */
    struct treq *t2 = &reqs[R.n_reqs++];
    memcpy(t2->prompt, t1->prompt, 4 * 10);
    memcpy(t2->prompt + 10, t1->streamed[0], 4 * 6);
    for (int i = 0; i < 7; i++) t2->prompt[16 + i] = 30 + i;
    t2->n_prompt = 23;
    t2->max_tokens = 4;
    t2->n = 1;
    submit(&R, t2);
    assert_int_equal(run_until_done(&R, t2), (23 - 12) + 3);
    assert_int_equal(t2->n_cached, 12);
    /* turn 3: 27 + 5 = 32 tokens; K/V of turn 2 covered 26 -> 6 full blocks,
     * but the cap (32 - 1 = 31 tokens) allows 7; 24 are cached */
    struct treq *t3 = &reqs[R.n_reqs++];
    memcpy(t3->prompt, t2->prompt, 4 * 23);
    memcpy(t3->prompt + 23, t2->streamed[0], 4 * 4);
    for (int i = 0; i < 5; i++) t3->prompt[27 + i] = 40 + i;
    t3->n_prompt = 32;
    t3->max_tokens = 2;
    t3->n = 1;
    submit(&R, t3);
    assert_int_equal(run_until_done(&R, t3), (32 - 24) + 1);
    assert_int_equal(t3->n_cached, 24);
    step(&R, NULL);
    check_outputs(&R);
    run_deinit(&R);
}

/* The same prompt twice: the second keeps one token to compute even when
 * the prompt is exactly whole blocks. */
static void test_prefix_cap_whole_blocks(void **state)
{
    (void)state;
    struct treq reqs[2] = {0};
    struct run R;
    run_init(&R, small_params(64), reqs);
    for (int k = 0; k < 2; k++) {
        struct treq *q = &reqs[R.n_reqs++];
        q->n_prompt = 16;
        for (int i = 0; i < 16; i++) q->prompt[i] = 5 + i;
        q->max_tokens = 1;
        q->n = 1;
        submit(&R, q);
        int64_t computed = run_until_done(&R, q);
        assert_int_equal(computed, k == 0 ? 16 : 4); /* 3 blocks reused, the 4th recomputed */
        assert_int_equal(q->n_cached, k == 0 ? 0 : 12);
    }
    step(&R, NULL);
    check_outputs(&R);
    run_deinit(&R);
}

/* Cancellation while queued, while prefilling (chunked) and while decoding
 * frees the blocks at once and is reported by the next schedule. */
static void test_cancel_phases(void **state)
{
    (void)state;
    struct treq reqs[4] = {0};
    struct run R;
    struct tern_sched_params p = {2, 8, 64, 32, 4, true, 0, {0}, {0}};
    run_init(&R, p, reqs);
    for (int k = 0; k < 4; k++) {
        struct treq *q = &reqs[R.n_reqs++];
        q->n_prompt = k == 1 ? 30 : 5;
        for (int i = 0; i < q->n_prompt; i++) q->prompt[i] = 1 + (i * 7 + k) % 40;
        q->max_tokens = 20;
        q->n = 1;
        submit(&R, q);
    }
    step(&R, NULL); /* req 0 prefills 5, req 1 its first chunk of 3 */
    step(&R, NULL); /* req 0 decodes, req 1 prefills more */
    assert_int_equal(tern_sched_n_running(R.s), 2);
    int32_t free0 = tern_kv_n_free(tern_sched_kv(R.s));
    /* decoding */
    assert_int_equal(tern_sched_cancel(R.s, reqs[0].id), TERN_OK);
    reqs[0].cancelled = true;
    assert_true(tern_kv_n_free(tern_sched_kv(R.s)) > free0);
    check_pool(&R);
    /* prefilling, mid-chunk */
    assert_true(reqs[1].n_streamed[0] == 0);
    assert_int_equal(tern_sched_cancel(R.s, reqs[1].id), TERN_OK);
    reqs[1].cancelled = true;
    assert_int_equal(tern_sched_n_running(R.s), 0);
    assert_int_equal(tern_kv_n_free(tern_sched_kv(R.s)), 32);
    /* queued */
    assert_int_equal(tern_sched_cancel(R.s, reqs[3].id), TERN_OK);
    reqs[3].cancelled = true;
    assert_int_equal(tern_sched_n_waiting(R.s), 1);
    assert_int_equal(tern_sched_cancel(R.s, reqs[3].id), TERN_E_NOT_FOUND);
    step(&R, NULL);
    assert_true(reqs[0].done_step == R.step && reqs[1].done_step == R.step);
    assert_true(reqs[3].done_step == R.step);
    run_until_done(&R, &reqs[2]);
    step(&R, NULL);
    check_outputs(&R);
    assert_int_equal(tern_kv_n_free(tern_sched_kv(R.s)), 32);
    run_deinit(&R);
}

/* n > 1: the siblings share the prompt's blocks after the prefill, copy the
 * partial block on write, and each follows its own stream. */
static void test_fork(void **state)
{
    (void)state;
    struct treq reqs[1] = {0};
    struct run R;
    run_init(&R, small_params(64), reqs);
    struct treq *q = &reqs[R.n_reqs++];
    q->n_prompt = 10;
    for (int i = 0; i < 10; i++) q->prompt[i] = 3 + i;
    q->max_tokens = 8;
    q->n = 3;
    submit(&R, q);
    step(&R, NULL); /* prefill 10 of 16 budget; 3 samples from one row */
    struct tern_kv *kv = tern_sched_kv(R.s);
    assert_int_equal(tern_sched_n_running(R.s), 3);
    assert_int_equal(tern_kv_n_free(kv), 64 - 3); /* 3 blocks shared by all */
    const struct tern_kv_seq *t0 = tern_sched_slot_table(R.s, 0);
    assert_int_equal(tern_kv_block_ref(kv, t0->blocks[0]), 3);
    assert_int_equal(tern_kv_block_ref(kv, t0->blocks[2]), 3);
    struct tern_sched_out *o = tern_sched_schedule(R.s);
    /* two of the three copy the partial block; the last holder writes in place */
    assert_int_equal(o->n_copies, 2);
    assert_int_equal(o->n_entries, 3);
    apply_copies(&R, o);
    struct tern_batch b;
    tern_sched_build_batch(R.s, &R.st, &b);
    check_batch(&R, o, &b);
    int32_t sampled[8];
    R.step++;
    fake_forward(&R, o, &b, sampled);
    tern_sched_commit(R.s, sampled);
    record_samples(o);
    check_pool(&R);
    run_until_done(&R, q);
    step(&R, NULL);
    check_outputs(&R);
    int32_t g0[MAX_GEN], g1[MAX_GEN];
    oracle(q, 0, g0);
    oracle(q, 1, g1);
    assert_true(memcmp(g0, g1, 4 * 8) != 0); /* the streams differ */
    run_deinit(&R);
}

/* Runs one step of the raw scheduler (the batch built, nothing computed):
 * the samples get token 7. Returns the step's output. */
static struct tern_sched_out *raw_step(struct run *R, struct tern_batch *b)
{
    struct tern_sched_out *o = tern_sched_schedule(R->s);
    tern_sched_build_batch(R->s, &R->st, b);
    int32_t sampled[16];
    for (int32_t i = 0; i < o->n_samples; i++) sampled[i] = 7;
    tern_sched_commit(R->s, sampled);
    return o;
}

/* Prefill-only requests (embeddings): chunked like any prompt, no sample
 * rows, ended (LENGTH) by the commit that completes the prompt; a prefix
 * hit stops short of the last token, and no_prefix_cache takes none. */
static void test_prefill_only(void **state)
{
    (void)state;
    struct run R;
    struct tern_sched_params p = {4, 8, 64, 32, 4, true, 0, {0}, {0}};
    run_init(&R, p, NULL);
    int32_t prompt[20], gen_prompt[3] = {40, 41, 42};
    for (int i = 0; i < 20; i++) prompt[i] = 1 + i;
    struct tern_sched_request r = {prompt, 20, 0, 1, NULL, 0, NULL, false};
    struct tern_sched_request g = {gen_prompt, 3, 2, 1, NULL, 0, NULL, false};
    uint64_t id, gid;
    assert_int_equal(tern_sched_submit(R.s, &g, &gid), TERN_OK);
    assert_int_equal(tern_sched_submit(R.s, &r, &id), TERN_OK);
    struct tern_batch b;
    /* step 1: the generation prompt (3) and 5 of the 20; one sample row,
     * the generation's */
    struct tern_sched_out *o = raw_step(&R, &b);
    assert_int_equal(o->n_entries, 2);
    assert_int_equal(o->entries[1].n_new, 5);
    assert_int_equal(o->n_samples, 1);
    assert_int_equal(o->samples[0].req_id, gid);
    assert_int_equal(b.n_logits, 1);
    assert_int_equal(b.logits_idx[0], 2);
    int32_t done_at = 0, computed = 5;
    for (int k = 2; k < 8 && !done_at; k++) {
        o = raw_step(&R, &b);
        for (int32_t i = 0; i < o->n_samples; i++) assert_int_equal(o->samples[i].req_id, gid);
        for (int32_t i = 0; i < o->n_entries; i++)
            if (o->entries[i].req_id == id) {
                assert_int_equal(o->entries[i].start, computed);
                computed += o->entries[i].n_new;
            }
        for (int32_t i = 0; i < o->n_finished; i++)
            if (o->finished[i].req_id == id) {
                assert_int_equal(o->finished[i].reason, TERN_SCHED_FINISH_LENGTH);
                assert_int_equal(o->finished[i].n_tokens, 20);
                assert_true(o->finished[i].req_done);
                done_at = k;
            }
    }
    assert_int_equal(computed, 20);
    assert_true(done_at > 0);
    /* the same prompt again: 4 blocks cached, the last token's block computed */
    assert_int_equal(tern_sched_submit(R.s, &r, &id), TERN_OK);
    o = raw_step(&R, &b);
    assert_int_equal(o->n_entries, 1);
    assert_int_equal(o->entries[0].start, 16);
    assert_int_equal(o->entries[0].n_cached, 16);
    assert_int_equal(o->n_samples, 0);
    o = raw_step(&R, &b);
    assert_int_equal(o->n_finished, 1);
    assert_int_equal(o->finished[0].n_cached, 16);
    /* and without the prefix cache: every token computed */
    r.no_prefix_cache = true;
    assert_int_equal(tern_sched_submit(R.s, &r, &id), TERN_OK);
    o = raw_step(&R, &b);
    assert_int_equal(o->entries[0].start, 0);
    assert_int_equal(o->entries[0].n_cached, 0);
    assert_int_equal(o->entries[0].n_new, 8);
    while (tern_sched_n_requests(R.s) > 0) raw_step(&R, &b);
    assert_int_equal(tern_kv_n_free(tern_sched_kv(R.s)), 32);
    run_deinit(&R);
}

/* Requests that can never fit are rejected at submit, naming the numbers. */
static void test_submit_rejects(void **state)
{
    (void)state;
    struct tern_sched *s;
    struct tern_sched_params p = {4, 16, 64, 8, 4, true, 0, {0}, {0}};
    assert_int_equal(tern_sched_create(&p, &s), TERN_OK);
    int32_t prompt[60] = {0};
    uint64_t id;
    struct tern_sched_request r = {prompt, 40, 30, 1, NULL, 0, NULL, false};
    assert_int_equal(tern_sched_submit(s, &r, &id), TERN_E_CAPACITY);
    assert_non_null(strstr(tern_last_error(), "70"));
    assert_non_null(strstr(tern_last_error(), "64"));
    r.n_prompt = 30;
    r.max_tokens = 10; /* 40 tokens = 10 blocks > 8 in the pool */
    assert_int_equal(tern_sched_submit(s, &r, &id), TERN_E_CAPACITY);
    assert_non_null(strstr(tern_last_error(), "10 KV blocks"));
    r.n_prompt = 10;
    r.n = 5;
    assert_int_equal(tern_sched_submit(s, &r, &id), TERN_E_CAPACITY);
    r.n = 2;
    r.max_tokens = 0; /* prefill only takes one sequence */
    assert_int_equal(tern_sched_submit(s, &r, &id), TERN_E_INVALID_ARG);
    r.n = 1;
    r.max_tokens = -1;
    assert_int_equal(tern_sched_submit(s, &r, &id), TERN_E_INVALID_ARG);
    r.max_tokens = 5;
    r.n_prompt = 0;
    assert_int_equal(tern_sched_submit(s, &r, &id), TERN_E_INVALID_ARG);
    r.n_prompt = 10;
    assert_int_equal(tern_sched_submit(s, &r, &id), TERN_OK);
    assert_int_equal(id, 1);
    tern_sched_destroy(s); /* frees the queued request */
    p.max_batch_tokens = 0;
    assert_int_equal(tern_sched_create(&p, &s), TERN_E_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_submit_rejects),
        cmocka_unit_test(test_multi_turn_prefix),
        cmocka_unit_test(test_prefix_cap_whole_blocks),
        cmocka_unit_test(test_cancel_phases),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_prefill_only),
        cmocka_unit_test(test_random_small_pool),
        cmocka_unit_test(test_random_large_pool),
        cmocka_unit_test(test_random_no_prefix_cache),
        cmocka_unit_test(test_random_windowed_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
