/*
 * test_engine.c — the serving engine through the public API on the tiny
 * fixtures: batch invariance (1 vs 16 concurrent requests, shared prefixes,
 * different prefill chunk sizes: bitwise equal tokens and logprobs on the
 * CPU), prefix-cache reuse on a multi-turn conversation, seeded sampling,
 * cancellation in every phase, up-front rejection.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GEN 24

struct run {
    int32_t ids[MAX_GEN];
    float lp[MAX_GEN];
    int32_t n;
    enum tern_finish_reason finish;
    int32_t cached;
};

static struct tern_model *open_fixture(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s", name);
    char *dir = tu_fixture(rel);
    struct tern_model *m = NULL;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CPU; /* the reference: bitwise batch invariance */
    if (tern_model_open(dir, &mp, &m) != TERN_OK) fail_msg("%s", tern_last_error());
    tern_free(dir);
    return m;
}

static struct tern_engine *engine_with(struct tern_model *m, int max_batch_tokens, int max_seqs)
{
    struct tern_engine_params p = tern_engine_default_params();
    p.max_batch_tokens = max_batch_tokens;
    p.max_seqs = max_seqs;
    p.max_context = 256;
    p.block_size = 4;
    struct tern_engine *e = NULL;
    if (tern_engine_create(m, &p, &e) != TERN_OK) fail_msg("%s", tern_last_error());
    return e;
}

/* A prompt: a shared prefix of `shared` tokens, then request-specific ones. */
static void make_prompt(int32_t *ids, int n, int shared, int which, int vocab)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(i < shared ? (i * 7 + 3) % vocab : (i * 13 + which * 31 + 5) % vocab);
}

static struct tern_stream *submit(struct tern_engine *e, const int32_t *ids, int n, int max_tokens,
                                  float temperature, uint64_t seed)
{
    struct tern_request r = {0};
    r.ids = ids;
    r.n_ids = n;
    r.sampling = tern_sampling_default_params();
    r.sampling.max_tokens = max_tokens;
    r.sampling.temperature = temperature;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = seed;
    r.sampling.has_seed = true;
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = 0;
    struct tern_stream *s = NULL;
    if (tern_engine_submit(e, &r, &s) != TERN_OK) fail_msg("submit: %s", tern_last_error());
    return s;
}

static void drain(struct tern_stream *s, struct run *out)
{
    memset(out, 0, sizeof *out);
    struct tern_event ev;
    for (;;) {
        enum tern_status st = tern_stream_next(s, 30000, &ev);
        if (st != TERN_OK) fail_msg("stream_next: %d %s", st, tern_last_error());
        if (ev.type == TERN_EVENT_TOKEN) {
            assert_true(out->n < MAX_GEN);
            out->ids[out->n] = ev.token;
            out->lp[out->n++] = ev.logprob;
        } else {
            out->finish = ev.finish;
            out->cached = ev.cached_tokens;
            assert_int_equal(ev.completion_tokens, out->n);
            if (ev.final) break;
        }
    }
    tern_stream_destroy(s);
}

/* A request's tokens and logprobs are bitwise the same alone, beside 15
 * others, and in 7-token prefill chunks with 5 slots (preemption). */
static void batch_invariance(const char *fixture)
{
    struct tern_model *m = open_fixture(fixture);
    struct tern_model_info in;
    tern_model_get_info(m, &in);
    enum { N = 16 };
    int32_t prompts[N][40];
    int lens[N];
    struct run solo[N], batched[N], chunked[N];
    for (int i = 0; i < N; i++) {
        lens[i] = 9 + (i * 5) % 30;
        make_prompt(prompts[i], lens[i], i % 2 ? 8 : 0, i, in.vocab_size);
    }
    /* alone: one request at a time, big chunks */
    struct tern_engine *e = engine_with(m, 512, 16);
    for (int i = 0; i < N; i++)
        drain(submit(e, prompts[i], lens[i], 12 + i % 5, i % 3 ? 0.8f : 0.0f, 1000 + i), &solo[i]);
    tern_engine_destroy(e);
    /* 16 at once */
    e = engine_with(m, 512, 16);
    struct tern_stream *ss[N];
    for (int i = 0; i < N; i++)
        ss[i] = submit(e, prompts[i], lens[i], 12 + i % 5, i % 3 ? 0.8f : 0.0f, 1000 + i);
    for (int i = 0; i < N; i++) drain(ss[i], &batched[i]);
    tern_engine_destroy(e);
    /* 16 at once, tiny prefill chunks (7 tokens per step) and 5 slots */
    e = engine_with(m, 7, 5);
    for (int i = 0; i < N; i++)
        ss[i] = submit(e, prompts[i], lens[i], 12 + i % 5, i % 3 ? 0.8f : 0.0f, 1000 + i);
    for (int i = 0; i < N; i++) drain(ss[i], &chunked[i]);
    tern_engine_destroy(e);
    for (int i = 0; i < N; i++) {
        assert_int_equal(solo[i].n, 12 + i % 5);
        assert_int_equal(solo[i].finish, TERN_FINISH_LENGTH);
        assert_int_equal(batched[i].n, solo[i].n);
        assert_int_equal(chunked[i].n, solo[i].n);
        assert_memory_equal(batched[i].ids, solo[i].ids, sizeof(int32_t) * (size_t)solo[i].n);
        assert_memory_equal(chunked[i].ids, solo[i].ids, sizeof(int32_t) * (size_t)solo[i].n);
        assert_memory_equal(batched[i].lp, solo[i].lp, sizeof(float) * (size_t)solo[i].n);
        assert_memory_equal(chunked[i].lp, solo[i].lp, sizeof(float) * (size_t)solo[i].n);
    }
    /* greedy requests equal the golden-checked solo greedy path */
    int32_t g[16], ng;
    e = engine_with(m, 512, 4);
    assert_int_equal(tern_generate_greedy(e, prompts[0], lens[0], 12, false, g, &ng), TERN_OK);
    tern_engine_destroy(e);
    assert_memory_equal(g, solo[0].ids, sizeof(int32_t) * 12);
    tern_model_close(m);
}

static void test_batch_invariance(void **state)
{
    /* the llama block, and the Gemma ones: sliding windows shorter than the
     * prompts (their own KV pools), per-type ropes, softcaps, Gemma 4's
     * shared K/V and per-layer inputs; experts (each token routed on its
     * own: the experts a batch's other tokens pick change nothing) */
    const char *const names[] = {"tiny-qwen3", "tiny-gemma2", "tiny-gemma3", "tiny-gemma4",
                                 "tiny-gemma4-plc", "tiny-qwen3-moe", "tiny-gemma4-moe"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) batch_invariance(names[i]);
}

/* Multi-turn prefix caching on a model with sliding-window layers: the
 * second turn reuses the first (its windowed pool still holds the blocks
 * the next query reads) and answers exactly as an engine with nothing
 * cached. */
static void test_prefix_cache_sliding(void **state)
{
    const char *const names[] = {"tiny-gemma3", "tiny-gemma4"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        struct tern_model *m = open_fixture(names[k]);
        struct tern_model_info in;
        tern_model_get_info(m, &in);
        int32_t turn1[40], turn2[80];
        make_prompt(turn1, 37, 37, 0, in.vocab_size);
        struct tern_engine *e = engine_with(m, 512, 4);
        struct run r1, r2, fresh;
        drain(submit(e, turn1, 37, 8, 0, 1), &r1);
        memcpy(turn2, turn1, sizeof(int32_t) * 37);
        memcpy(turn2 + 37, r1.ids, sizeof(int32_t) * 8);
        for (int i = 0; i < 11; i++) turn2[45 + i] = (int32_t)((50 + i) % in.vocab_size);
        drain(submit(e, turn2, 56, 6, 0.7f, 3), &r2);
        assert_int_equal(r2.cached, 44);
        tern_engine_destroy(e);
        e = engine_with(m, 512, 4);
        drain(submit(e, turn2, 56, 6, 0.7f, 3), &fresh);
        assert_int_equal(fresh.cached, 0);
        assert_int_equal(r2.n, fresh.n);
        assert_memory_equal(r2.ids, fresh.ids, sizeof(int32_t) * (size_t)fresh.n);
        assert_memory_equal(r2.lp, fresh.lp, sizeof(float) * (size_t)fresh.n);
        tern_engine_destroy(e);
        tern_model_close(m);
    }
}

/* The KV a sequence holds: full layers per token, sliding layers their
 * window only, layers that share K/V nothing (tiny-gemma4: one full layer
 * of its own, 1 kv head x 32; three sliding ones, 2 x 16, window 8 = two
 * 16-token blocks; two sharers; f32 on the CPU). */
static void test_kv_bytes(void **state)
{
    struct tern_model *m = open_fixture("tiny-gemma4");
    struct tern_model_info in;
    assert_int_equal(tern_model_get_info(m, &in), TERN_OK);
    assert_int_equal(in.kv_bytes_per_token, 2 * 1 * 32 * 4);
    assert_int_equal(in.kv_bytes_windowed, 3 * (2 * 2 * 16 * 4) * 32);
    tern_model_close(m);
    m = open_fixture("tiny-llama");
    assert_int_equal(tern_model_get_info(m, &in), TERN_OK);
    assert_int_equal(in.kv_bytes_windowed, 0);
    assert_int_equal(in.kv_bytes_per_token, 2 * in.n_layers * in.n_kv_heads * in.head_dim * 4);
    tern_model_close(m);
}

static void test_prefix_cache(void **state)
{
    struct tern_model *m = open_fixture("tiny-llama");
    struct tern_engine *e = engine_with(m, 512, 4);
    int32_t turn1[40], turn2[80];
    make_prompt(turn1, 37, 37, 0, 300);
    struct run r1, r2;
    drain(submit(e, turn1, 37, 8, 0, 1), &r1);
    assert_int_equal(r1.cached, 0);
    /* second turn: the first turn, its answer, and 11 new tokens */
    memcpy(turn2, turn1, sizeof(int32_t) * 37);
    memcpy(turn2 + 37, r1.ids, sizeof(int32_t) * 8);
    for (int i = 0; i < 11; i++) turn2[45 + i] = (int32_t)(50 + i);
    drain(submit(e, turn2, 56, 4, 0, 1), &r2);
    /* everything up to the last full block of the previous sequence's
     * computed tokens (37 + 8 - 1 = 44 computed: 11 blocks of 4) is reused */
    assert_int_equal(r2.cached, 44);
    struct tern_engine_stats st;
    assert_int_equal(tern_engine_get_stats(e, &st), TERN_OK);
    assert_int_equal(st.cached_prompt_tokens, 44);
    assert_int_equal(st.requests_finished, 2);
    tern_engine_destroy(e);
    tern_model_close(m);
}

static void test_cancel_and_reject(void **state)
{
    struct tern_model *m = open_fixture("tiny-llama");
    struct tern_engine *e = engine_with(m, 16, 2);
    int32_t p[60];
    make_prompt(p, 60, 0, 1, 300);
    /* reject up front: prompt + max_tokens over the context */
    struct tern_request r = {0};
    r.ids = p;
    r.n_ids = 60;
    r.sampling = tern_sampling_default_params();
    r.sampling.max_tokens = 250;
    struct tern_stream *s = NULL;
    assert_int_equal(tern_engine_submit(e, &r, &s), TERN_E_CAPACITY);
    assert_non_null(strstr(tern_last_error(), "256"));
    r.sampling.max_tokens = 0;
    assert_int_equal(tern_engine_submit(e, &r, &s), TERN_E_INVALID_ARG);
    r.sampling.max_tokens = 150;
    /* cancel while queued/prefilling/decoding: each gets a final CANCELLED */
    struct tern_stream *a = submit(e, p, 60, 150, 0, 1), *b = submit(e, p, 50, 150, 0, 1),
                       *c = submit(e, p, 40, 150, 0, 1);
    struct tern_event ev;
    /* let a reach decode */
    do assert_int_equal(tern_stream_next(a, 30000, &ev), TERN_OK);
    while (ev.type != TERN_EVENT_TOKEN);
    tern_stream_cancel(a);
    tern_stream_cancel(b);
    tern_stream_cancel(c);
    struct tern_stream *all[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        do assert_int_equal(tern_stream_next(all[i], 30000, &ev), TERN_OK);
        while (!(ev.type == TERN_EVENT_DONE && ev.final));
        assert_int_equal(ev.finish, TERN_FINISH_CANCELLED);
        tern_stream_destroy(all[i]);
    }
    struct tern_engine_stats st;
    for (int i = 0; i < 100; i++) {
        tern_engine_get_stats(e, &st);
        if (st.kv_blocks_used == 0 && st.running == 0) break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(st.running, 0);
    assert_int_equal(st.waiting, 0);
    assert_int_equal(st.requests_cancelled, 3);
    /* destroying a stream that is still running cancels it */
    s = submit(e, p, 30, 100, 0, 1);
    tern_stream_destroy(s);
    /* destroying the engine ends queued and running requests; their streams
     * outlive it and still get a final event */
    struct tern_stream *q[5];
    for (int i = 0; i < 5; i++) q[i] = submit(e, p, 20 + i, 100, 0, 1);
    do assert_int_equal(tern_stream_next(q[0], 30000, &ev), TERN_OK);
    while (ev.type != TERN_EVENT_TOKEN);
    tern_engine_destroy(e);
    for (int i = 0; i < 5; i++) {
        do assert_int_equal(tern_stream_next(q[i], 30000, &ev), TERN_OK);
        while (!(ev.type == TERN_EVENT_DONE && ev.final));
        assert_int_equal(ev.finish, TERN_FINISH_CANCELLED);
        tern_stream_cancel(q[i]); /* harmless after the engine is gone */
        tern_stream_destroy(q[i]);
    }
    tern_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_prefix_cache_sliding),
        cmocka_unit_test(test_kv_bytes),
        cmocka_unit_test(test_cancel_and_reject),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
