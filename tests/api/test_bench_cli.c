/*
 * test_bench_cli.c — `tern bench` end to end on the tiny-qwen3 fixture:
 * the concurrent mode (--concurrency 1,4 --json: every field present, times
 * and rates positive, percentiles ordered, exactly N * gen generated tokens,
 * no prefix hits among random prompts), the --shared-prefix workload (the
 * exact cached token count and hit rate, events and engine stats agreeing),
 * the table output, the single-sequence JSON keys, and exit 2 with the
 * flag named for bad flags. Runs the built `tern` (TERN_BIN); parses with
 * jansson.
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static int bench(const char *args, char **out, char **err)
{
    char *model = tu_fixture("models/tiny-qwen3");
    struct tern_str cmd = {0};
    tern_str_appendf(&cmd, "'%s' bench --model '%s' %s", TERN_BIN, model, args);
    int rc = tu_run(cmd.data, out, err);
    tern_str_deinit(&cmd);
    tern_free(model);
    return rc;
}

/* Runs bench with --json, expects exit 0, returns the parsed object. */
static json_t *bench_json(const char *args)
{
    char *out, *err;
    int rc = bench(args, &out, &err);
    if (rc != 0) fail_msg("bench %s: exit %d: %s", args, rc, err);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("bench %s: not JSON (%s): %s", args, je.text, out);
    tern_free(out);
    tern_free(err);
    return j;
}

static double num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_number(v)) fail_msg("missing number '%s'", key);
    return json_number_value(v);
}

static const char *const positive_keys[] = {
    "wall_s", "output_tok_s", "prefill_tok_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "steps",
};

/* Checks one result of N requests, `len` prompt tokens each, gen 8. */
static void check_result(const json_t *r, int n, int len)
{
    assert_int_equal((int)num(r, "concurrency"), n);
    assert_int_equal((int)num(r, "requests"), n);
    for (size_t k = 0; k < sizeof positive_keys / sizeof positive_keys[0]; k++)
        if (!(num(r, positive_keys[k]) > 0)) fail_msg("%s is not positive", positive_keys[k]);
    /* Gaps are measured where the reader gets the events: a reader that wakes
     * late reads several queued tokens at once, gaps of ~0 ms (a loaded host). */
    assert_true(num(r, "itl_p50_ms") >= 0);
    assert_true(num(r, "ttft_p50_ms") <= num(r, "ttft_p90_ms"));
    assert_true(num(r, "ttft_p90_ms") <= num(r, "ttft_p99_ms"));
    assert_true(num(r, "itl_p50_ms") <= num(r, "itl_p90_ms"));
    assert_true(num(r, "itl_p90_ms") <= num(r, "itl_p99_ms"));
    assert_int_equal((int)num(r, "generated_tokens"), n * 8);
    assert_int_equal((int)num(r, "stats_generated_tokens"), n * 8);
    assert_int_equal((int)num(r, "prompt_tokens"), n * len);
    assert_int_equal((int)num(r, "stats_prompt_tokens"), n * len);
    assert_int_equal((int)num(r, "cached_tokens"), (int)num(r, "stats_cached_tokens"));
    assert_true(num(r, "preemptions") >= 0);
    /* wall time covers the slowest request's first token */
    assert_true(num(r, "wall_s") * 1e3 >= num(r, "ttft_p99_ms"));
}

static void test_concurrent(void **state)
{
    (void)state;
    json_t *j = bench_json("--concurrency 1,4 --prompt-len 16 --gen 8 --json");
    assert_string_equal(json_string_value(json_object_get(j, "architecture")), "Qwen3ForCausalLM");
    assert_int_equal((int)num(j, "prompt_len"), 16);
    assert_int_equal((int)num(j, "gen"), 8);
    assert_true(num(j, "load_s") >= 0);
    const json_t *res = json_object_get(j, "results");
    assert_int_equal((int)json_array_size(res), 2);
    check_result(json_array_get(res, 0), 1, 16);
    check_result(json_array_get(res, 1), 4, 16);
    assert_int_equal((int)num(json_array_get(res, 1), "max_seqs"), 16);
    /* every prompt is different: nothing to share */
    for (int i = 0; i < 2; i++) {
        assert_int_equal((int)num(json_array_get(res, i), "cached_tokens"), 0);
        assert_true(num(json_array_get(res, i), "prefix_hit_rate") == 0);
    }
    json_decref(j);
}

static void test_shared_prefix(void **state)
{
    (void)state;
    /* 2 slots for 4 requests: two wait, and still find the prefix */
    json_t *j = bench_json("--concurrency 4 --prompt-len 16 --gen 8 --shared-prefix 32 "
                           "--max-seqs 2 --json");
    assert_int_equal((int)num(j, "shared_prefix"), 32);
    const json_t *r = json_array_get(json_object_get(j, "results"), 0);
    check_result(r, 4, 48);
    assert_int_equal((int)num(r, "max_seqs"), 2);
    /* the 32-token prefix is two whole 16-token blocks, cached for every request */
    assert_int_equal((int)num(r, "cached_tokens"), 4 * 32);
    assert_true(num(r, "prefix_hit_rate") > 0);
    assert_float_equal(num(r, "prefix_hit_rate"), 32.0 / 48.0, 1e-4);
    assert_float_equal(num(r, "stats_prefix_hit_rate"), 32.0 / 48.0, 1e-4);
    json_decref(j);
}

static void test_table_and_single(void **state)
{
    (void)state;
    char *out, *err;
    assert_int_equal(bench("--concurrency 2,3 --prompt-len 8 --gen 4", &out, &err), 0);
    assert_non_null(strstr(out, "conc"));
    assert_non_null(strstr(out, "TTFT ms"));
    assert_non_null(strstr(out, "\n    2 "));
    assert_non_null(strstr(out, "\n    3 "));
    tern_free(out);
    tern_free(err);
    json_t *j = bench_json("--prompt-len 16 --gen 8 --reps 1 --json");
    static const char *const keys[] = {"load_s",       "prefill_tok_s",     "ttft_ms",
                                       "decode_tok_s", "host_copy_bw_gb_s", "decode_floor_tok_s"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) assert_true(num(j, keys[k]) >= 0);
    assert_true(num(j, "decode_tok_s") > 0);
    assert_null(json_object_get(j, "results"));
    json_decref(j);
}

static void test_bad_flags(void **state)
{
    (void)state;
    static const struct {
        const char *args, *flag;
    } cases[] = {
        {"--concurrency 0", "--concurrency"},
        {"--concurrency 1,x", "--concurrency"},
        {"--concurrency 1,", "--concurrency"},
        {"--concurrency 5000", "--concurrency"},
        {"--concurrency 2 --max-seqs 0", "--max-seqs"},
        {"--concurrency 2 --shared-prefix -1", "--shared-prefix"},
        {"--concurrency 2 --reps 2", "--reps"},
        {"--shared-prefix 8", "--shared-prefix"},
        {"--max-seqs 4", "--max-seqs"},
        {"--concurrency 2 --kv-bytes 12Q", "--kv-bytes"},
        {"--concurrency 2 --kv-fraction 1.5", "--kv-fraction"},
        {"--concurrency 2 --max-batch-tokens x", "--max-batch-tokens"},
        {"--concurrency 2 --bogus", "--bogus"},
        {"--concurrency", "--concurrency"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = bench(cases[i].args, &out, &err);
        if (rc != 2 || !strstr(err, cases[i].flag))
            fail_msg("'%s': exit %d, stderr '%s'", cases[i].args, rc, err);
        assert_string_equal(out, "");
        tern_free(out);
        tern_free(err);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent),
        cmocka_unit_test(test_shared_prefix),
        cmocka_unit_test(test_table_and_single),
        cmocka_unit_test(test_bad_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
