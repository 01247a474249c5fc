/*
 * test_graph_cuda.c — decode forwards replayed from CUDA graphs give bitwise
 * the results of the same forwards run op by op, for every fixture model.
 *
 * Per fixture, on the model core (src/model/model.h): S sequences are
 * prefilled op by op, then decode batches (one query token per sequence,
 * plus one dummy sequence with slot -1 as the engine pads them) run through
 * tern_model_forward_graph with replay off and on, twice with new ids and
 * positions (the second replays the graph captured by the first, so it also
 * checks that the refreshed batch arrays are read; every KV group's pool
 * laid out alike). Logits must match bitwise, and the dummy must leave the
 * KV cache untouched. S = 3 takes the
 * GEMV path, S = 11 cuBLASLt. Then, through the public API, greedy
 * generation with TERN_CUDA_GRAPHS=0 and with replay gives the same tokens.
 * Skips without a CUDA device. TERN_TEST_FIXTURES overrides the fixture root.
 */
#include "testutil.h"

#include "api/api.h"
#include "backend/backend.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 16
#define PROMPT 21
#define MAX_S 12

struct rig {
    struct tern_model_core *m;
    struct tern_fwd f;
    struct tern_kv_cache kv;
    int32_t nb; /* blocks per sequence */
    int32_t ids[256], pos[256], slots[256], qstart[MAX_S + 2], lens[MAX_S + 1], lidx[64];
    int32_t bt[(MAX_S + 1) * 4];
};

/* A batch of S sequences (sequence s on blocks [1 + s*nb, 1 + (s+1)*nb)),
 * each with q tokens from position p0, plus a dummy (slot -1, block 0)
 * when `dummy`. Logits for the last token of every sequence. */
static struct tern_batch make_batch(struct rig *r, int S, int q, int p0, bool dummy, int salt)
{
    int t = 0;
    for (int s = 0; s < S; s++) {
        r->qstart[s] = t;
        for (int j = 0; j < q; j++, t++) {
            int p = p0 + j;
            r->ids[t] = (7 * s + 3 * p + salt) % 50 + 1;
            r->pos[t] = p;
            r->slots[t] = (1 + s * r->nb + p / BS) * BS + p % BS;
        }
        r->lens[s] = p0 + q;
        for (int b = 0; b < r->nb; b++) r->bt[s * r->nb + b] = 1 + s * r->nb + b;
        r->lidx[s] = t - 1;
    }
    int n = S;
    if (dummy) {
        r->qstart[n] = t;
        r->ids[t] = 0;
        r->pos[t] = 0;
        r->slots[t] = -1;
        r->lens[n] = 1;
        for (int b = 0; b < r->nb; b++) r->bt[n * r->nb + b] = 0;
        r->lidx[n] = t;
        t++;
        n++;
    }
    r->qstart[n] = t;
    struct tern_batch b = {t,       n,      r->nb,    n,        r->ids, r->pos, r->qstart,
                           r->lens, r->bt, r->slots, r->lidx, .n_kv_groups = r->m->n_kv_groups};
    /* every KV group's pool is laid out alike: the same tables and slots */
    for (int g = 1; g < b.n_kv_groups; g++) {
        b.group_block_tables[g] = r->bt;
        b.group_slot_mapping[g] = r->slots;
    }
    return b;
}

static float *logits_of(struct rig *r, int n)
{
    size_t bytes = (size_t)n * (size_t)r->m->hp.vocab_size * sizeof(float);
    float *h = tern_malloc(bytes);
    assert_non_null(h);
    struct tern_dtensor rows = tern_dtensor_rows(&r->f.logits, 0, n);
    assert_int_equal(r->m->be->ops->download(r->m->be, h, &rows, bytes), TERN_OK);
    return h;
}

static void *block0_k(struct rig *r, size_t *bytes)
{
    struct tern_dtensor b0 = tern_dtensor_rows(&r->kv.layers[0].k, 0, 1);
    *bytes = tern_dtensor_bytes(&b0);
    void *h = tern_malloc(*bytes);
    assert_non_null(h);
    assert_int_equal(r->m->be->ops->download(r->m->be, h, &b0, *bytes), TERN_OK);
    return h;
}

/* One decode step at position p, replay off then on: logits equal bitwise. */
static bool decode_same(struct rig *r, int S, int p, int salt, const char *name)
{
    size_t kb = 0;
    void *k_before = block0_k(r, &kb);
    struct tern_batch b = make_batch(r, S, 1, p, true, salt);
    r->f.use_graphs = false;
    assert_int_equal(tern_model_forward_graph(r->m, &r->f, &r->kv, &b, NULL), TERN_OK);
    float *ref = logits_of(r, S);
    r->f.use_graphs = true;
    if (tern_model_forward_graph(r->m, &r->f, &r->kv, &b, NULL) != TERN_OK)
        fail_msg("%s: graph forward: %s", name, tern_last_error());
    float *got = logits_of(r, S);
    size_t n = (size_t)S * (size_t)r->m->hp.vocab_size;
    bool same = memcmp(ref, got, n * sizeof(float)) == 0;
    size_t kb2 = 0;
    void *k_after = block0_k(r, &kb2);
    bool kv_same = memcmp(k_before, k_after, kb) == 0;
    printf("  %-22s S=%2d pos %d: graph %s op-by-op, dummy %s the KV cache\n", name, S, p,
           same ? "==" : "!=", kv_same ? "leaves" : "CHANGES");
    tern_free(ref);
    tern_free(got);
    tern_free(k_before);
    tern_free(k_after);
    return same && kv_same;
}

static bool check_core(struct tern_model *model, const char *name)
{
    struct rig r;
    memset(&r, 0, sizeof r);
    r.m = &model->core;
    r.nb = 4;
    int32_t blocks[TERN_MAX_KV_GROUPS];
    for (int g = 0; g < TERN_MAX_KV_GROUPS; g++) blocks[g] = 1 + MAX_S * r.nb;
    assert_int_equal(tern_kv_cache_init(r.m, blocks, BS, &r.kv), TERN_OK);
    assert_int_equal(tern_fwd_init(r.m, 256, MAX_S + 1, r.nb, 64, BS, r.nb * BS, &r.f), TERN_OK);
    if (!r.f.use_graphs) fail_msg("the CUDA backend has no graph hooks");
    bool ok = true;
    int sizes[2] = {3, MAX_S - 1};
    for (int i = 0; i < 2; i++) {
        int S = sizes[i];
        struct tern_batch pre = make_batch(&r, S, PROMPT, 0, false, 0);
        r.f.use_graphs = false;
        assert_int_equal(tern_model_forward(r.m, &r.f, &r.kv, &pre), TERN_OK);
        ok &= decode_same(&r, S, PROMPT, 1, name);     /* op by op, then captured */
        ok &= decode_same(&r, S, PROMPT + 1, 2, name); /* replayed with new arrays */
        ok &= decode_same(&r, S, PROMPT + 2, 3, name);
    }
    tern_fwd_deinit(r.m, &r.f);
    tern_kv_cache_deinit(r.m, &r.kv);
    return ok;
}

static void greedy(struct tern_model *m, bool graphs, int32_t *out, int32_t *n_out)
{
    setenv("TERN_CUDA_GRAPHS", graphs ? "1" : "0", 1);
    struct tern_engine_params ep = tern_engine_default_params();
    ep.max_seqs = 2;
    ep.block_size = BS;
    ep.max_context = 256;
    ep.kv_bytes = 16 << 20;
    struct tern_engine *e = NULL;
    assert_int_equal(tern_engine_create(m, &ep, &e), TERN_OK);
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++) prompt[i] = (5 * i + 2) % 40 + 1;
    if (tern_generate_greedy(e, prompt, PROMPT, 40, false, out, n_out) != TERN_OK)
        fail_msg("generate: %s", tern_last_error());
    tern_engine_destroy(e);
    unsetenv("TERN_CUDA_GRAPHS");
}

static bool check_fixture(const char *dir)
{
    const char *name = strrchr(dir, '/') + 1;
    struct tern_model *m = NULL;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CUDA;
    if (tern_model_open(dir, &mp, &m) != TERN_OK) fail_msg("%s: %s", dir, tern_last_error());
    bool ok = check_core(m, name);
    int32_t a[40], b[40], na = 0, nb = 0;
    greedy(m, false, a, &na);
    greedy(m, true, b, &nb);
    bool same = na == nb && memcmp(a, b, (size_t)na * sizeof a[0]) == 0;
    printf("  %-22s greedy 40 tokens: graph %s op-by-op\n", name, same ? "==" : "!=");
    tern_model_close(m);
    return ok && same;
}

static void test_graph_replay_bitwise(void **state)
{
    (void)state;
    if (!tern_backend_cuda_available()) {
        printf("skipped: no CUDA device\n");
        skip();
    }
    char **names;
    int n = tu_fixture_dirs("models", "config.json", &names);
    assert_true(n >= 1);
    int n_bad = 0;
    for (int i = 0; i < n; i++) {
        n_bad += !check_fixture(names[i]);
        tern_free(names[i]);
    }
    tern_free(names);
    if (n_bad) fail_msg("%d of %d fixtures: graph replay differs from op by op", n_bad, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_graph_replay_bitwise)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
