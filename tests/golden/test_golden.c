/*
 * test_golden.c — every fixture model under tests/fixtures/models against
 * transformers (float32): full-sequence logits within 1e-4 relative, 32
 * greedy tokens identical, logits at each greedy step, and incremental decode
 * (one token at a time through the paged KV cache, and odd chunk sizes that
 * cross block boundaries) bitwise equal to the full-sequence forward on the
 * CPU. One loop over every architecture, as mlx-lm's test_models does.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-4

struct fixture {
    char *dir;
    struct tu_npy prompt, logits, greedy, greedy_logits;
};

static void check_fixture(const char *dir)
{
    struct fixture f = {0};
    tu_golden_npy(dir, "prompt.npy", &f.prompt);
    tu_golden_npy(dir, "logits.npy", &f.logits);
    tu_golden_npy(dir, "greedy.npy", &f.greedy);
    tu_golden_npy(dir, "greedy_logits.npy", &f.greedy_logits);
    assert_string_equal(f.prompt.dtype, "<i4");
    assert_string_equal(f.greedy.dtype, "<i4");
    assert_string_equal(f.logits.dtype, "<f4");
    int n = (int)f.prompt.n, V = (int)f.logits.shape[1], G = (int)f.greedy.n;

    struct tern_model *m = NULL;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CPU;
    if (tern_model_open(dir, &mp, &m) != TERN_OK) fail_msg("%s: %s", dir, tern_last_error());
    struct tern_model_info in;
    assert_int_equal(tern_model_get_info(m, &in), TERN_OK);
    assert_int_equal(in.vocab_size, V);
    /* A decode step reads every weight but the other rows of an untied embedding table
     * (and, with experts, fewer: those a token is routed to). */
    int64_t esz = strcmp(in.dtype, "f32") == 0 ? 4 : 2;
    int64_t dense = in.tied_embeddings ? in.weight_bytes
                                       : in.weight_bytes - (int64_t)(V - 1) * in.n_embd * esz;
    if (in.n_experts) assert_true(in.decode_bytes > 0 && in.decode_bytes < dense);
    else assert_true(in.decode_bytes == dense);

    /* 1. full-sequence logits vs transformers */
    float *full = tu_model_logits(m, f.prompt.data, n, V, 2048, 16);
    double err = tu_max_rel_err(full, f.logits.data, (size_t)n * V);
    printf("  %-40s %s  prompt logits max rel err %.2e\n", strrchr(dir, '/') + 1, in.architecture,
           err);
    if (!(err <= REL_TOL)) fail_msg("%s: logits rel err %.3e > %.0e", dir, err, REL_TOL);

    /* 2. greedy tokens identical for all steps */
    int32_t *gen = tern_malloc((size_t)G * sizeof(int32_t));
    int32_t n_gen = 0;
    struct tern_engine *e = tu_model_engine(m, 2048, 16);
    if (tern_generate_greedy(e, f.prompt.data, n, G, false, gen, &n_gen) != TERN_OK)
        fail_msg("generate: %s", tern_last_error());
    tern_engine_destroy(e);
    assert_int_equal(n_gen, G);
    for (int i = 0; i < G; i++)
        if (gen[i] != ((int32_t *)f.greedy.data)[i])
            fail_msg("%s: greedy token %d is %d, transformers gives %d", dir, i, gen[i],
                     ((int32_t *)f.greedy.data)[i]);

    /* 3. logits along the greedy continuation (positions n-1 .. n+G-2) */
    int total = n + G - 1;
    int32_t *seq = tern_malloc((size_t)total * sizeof(int32_t));
    memcpy(seq, f.prompt.data, (size_t)n * sizeof(int32_t));
    memcpy(seq + n, gen, (size_t)(G - 1) * sizeof(int32_t));
    float *all = tu_model_logits(m, seq, total, V, 2048, 16);
    err = tu_max_rel_err(all + (size_t)(n - 1) * V, f.greedy_logits.data, (size_t)G * V);
    if (!(err <= REL_TOL)) fail_msg("%s: greedy-step logits rel err %.3e", dir, err);

    /* 4. incremental decode and odd chunks == full forward, bitwise (CPU) */
    const int chunks[][2] = {{1, 16}, {5, 4}, {7, 3}};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        float *inc = tu_model_logits(m, seq, total, V, chunks[c][0], chunks[c][1]);
        if (memcmp(inc, all, (size_t)total * V * sizeof(float)) != 0)
            fail_msg("%s: chunk %d / block %d logits differ from the full forward (max rel %.3e)",
                     dir, chunks[c][0], chunks[c][1],
                     tu_max_rel_err(inc, all, (size_t)total * V));
        tern_free(inc);
    }
    tern_free(all);
    tern_free(seq);
    tern_free(gen);
    tern_free(full);
    tern_model_close(m);
    tu_npy_free(&f.prompt);
    tu_npy_free(&f.logits);
    tu_npy_free(&f.greedy);
    tu_npy_free(&f.greedy_logits);
}

static void test_all_fixtures(void **state)
{
    char **names;
    int n = tu_fixture_dirs("models", "golden/logits.npy", &names);
    assert_true(n >= 4); /* at least one per architecture */
    for (int i = 0; i < n; i++) {
        check_fixture(names[i]);
        tern_free(names[i]);
    }
    tern_free(names);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_all_fixtures)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
