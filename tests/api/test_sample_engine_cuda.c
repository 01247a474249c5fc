/*
 * test_sample_engine_cuda.c — through the public API on the CUDA backend,
 * seeded requests give the same tokens, logprobs and top logprobs with
 * device sampling on (the default) and off (TERN_GPU_SAMPLE=0: every
 * non-argmax row downloads its logits for the CPU sampler), in one process.
 * The requests run together (deterministic mode: batch-invariant logits)
 * and cover temperature / top_k / top_p / min_p, repetition, presence and
 * frequency penalties, logit_bias (one naming a token twice: that row falls
 * back to the CPU), greedy with logprobs, top_logprobs and n = 2. Uses the
 * tiny-qwen3 fixture; TERN_TEST_FIXTURES overrides the fixture root. Skips
 * without a CUDA device.
 */
#include "testutil.h"

#include "backend/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_REQ 7
#define GEN 24

struct out {
    int32_t ids[2][GEN];
    float lp[2][GEN];
    int32_t top[2][GEN][5];
    int n[2];
};

static void set_request(struct tern_sampling_params *s, int i, const int32_t *bias_ids,
                        const float *bias_values)
{
    *s = tern_sampling_default_params();
    s->max_tokens = GEN;
    s->ignore_eos = true;
    s->seed = 4242 + (uint64_t)i;
    s->has_seed = true;
    s->logprobs = i % 2 ? 5 : 0;
    switch (i) {
    case 0: s->temperature = 0.8f, s->top_p = 0.9f; break;
    case 1: s->temperature = 1.2f, s->top_k = 20, s->min_p = 0.05f; break;
    case 2: s->temperature = 0.7f, s->repetition_penalty = 1.3f, s->presence_penalty = 0.5f,
            s->frequency_penalty = 0.4f; break;
    case 3: s->temperature = 1.0f, s->bias_ids = bias_ids, s->bias_values = bias_values,
            s->n_bias = 2; break;
    case 4: s->temperature = 0.0f, s->repetition_penalty = 1.5f; break; /* greedy + processor */
    case 5: s->temperature = 0.9f, s->top_k = 50, s->top_p = 0.8f, s->n = 2; break;
    default: /* a bias naming one token twice: the CPU sampler's row */
        s->temperature = 1.0f, s->bias_ids = bias_ids + 2, s->bias_values = bias_values + 2;
        s->n_bias = 2;
    }
}

static void run_all(struct tern_model *m, bool gpu_sample, struct out *o)
{
    if (gpu_sample) unsetenv("TERN_GPU_SAMPLE");
    else setenv("TERN_GPU_SAMPLE", "0", 1);
    struct tern_engine_params ep = tern_engine_default_params();
    ep.max_seqs = 8;
    ep.max_context = 256;
    ep.block_size = 16;
    ep.kv_bytes = 32 << 20;
    ep.deterministic = true;
    struct tern_engine *e = NULL;
    if (tern_engine_create(m, &ep, &e) != TERN_OK) fail_msg("engine: %s", tern_last_error());
    static const int32_t bias_ids[4] = {5, 9, 17, 17};
    static const float bias_values[4] = {4.0f, -3.0f, 2.0f, 1.5f};
    struct tern_stream *ss[N_REQ];
    int32_t prompt[N_REQ][16];
    for (int i = 0; i < N_REQ; i++) {
        for (int j = 0; j < 16; j++) prompt[i][j] = (7 * j + 11 * i + 3) % 40 + 1;
        struct tern_request r = {0};
        r.ids = prompt[i];
        r.n_ids = 16;
        set_request(&r.sampling, i, bias_ids, bias_values);
        if (tern_engine_submit(e, &r, &ss[i]) != TERN_OK) fail_msg("submit: %s", tern_last_error());
    }
    memset(o, 0, sizeof(struct out) * N_REQ);
    for (int i = 0; i < N_REQ; i++) {
        struct tern_event ev;
        for (;;) {
            if (tern_stream_next(ss[i], 60000, &ev) != TERN_OK) fail_msg("%s", tern_last_error());
            if (ev.type == TERN_EVENT_TOKEN) {
                int c = ev.index, k = o[i].n[c]++;
                assert_true(k < GEN);
                o[i].ids[c][k] = ev.token;
                o[i].lp[c][k] = ev.logprob;
                for (int t = 0; t < ev.n_top && t < 5; t++) o[i].top[c][k][t] = ev.top_ids[t];
            } else if (ev.final) {
                assert_int_equal(ev.status, TERN_OK);
                break;
            }
        }
        tern_stream_destroy(ss[i]);
    }
    tern_engine_destroy(e);
    unsetenv("TERN_GPU_SAMPLE");
}

static void test_gpu_sample_engine(void **state)
{
    (void)state;
    if (!tern_backend_cuda_available()) {
        printf("skipped: no CUDA device\n");
        skip();
    }
    char *dir = tu_fixture("models/tiny-qwen3");
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CUDA;
    struct tern_model *m = NULL;
    if (tern_model_open(dir, &mp, &m) != TERN_OK) fail_msg("%s: %s", dir, tern_last_error());
    tern_free(dir);
    static struct out on[N_REQ], off[N_REQ];
    run_all(m, true, on);
    run_all(m, false, off);
    int bad = 0, distinct = 0;
    for (int i = 0; i < N_REQ; i++)
        for (int c = 0; c < (i == 5 ? 2 : 1); c++) {
            assert_int_equal(on[i].n[c], GEN);
            assert_int_equal(off[i].n[c], GEN);
            bool same = memcmp(on[i].ids[c], off[i].ids[c], sizeof on[i].ids[c]) == 0 &&
                        memcmp(on[i].lp[c], off[i].lp[c], sizeof on[i].lp[c]) == 0 &&
                        memcmp(on[i].top[c], off[i].top[c], sizeof on[i].top[c]) == 0;
            for (int k = 1; k < GEN; k++) distinct += on[i].ids[c][k] != on[i].ids[c][0];
            printf("  request %d.%d: %d tokens, device sampling %s CPU sampling (first %d %d %d)\n",
                   i, c, GEN, same ? "==" : "!=", on[i].ids[c][0], on[i].ids[c][1],
                   on[i].ids[c][2]);
            bad += !same;
        }
    tern_model_close(m);
    assert_true(distinct > 0); /* the outputs are not degenerate */
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpu_sample_engine)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
