/*
 * test_cli_model.c — the `tern` model commands end to end on a fixture, and
 * every bad-input class of model loading: each must exit non-zero with one
 * line naming the culprit, and never crash.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIX "tiny-qwen3"

static char *fixture_dir(void)
{
    return tu_fixture("models/" FIX);
}

/* Runs `tern <args>`, returns the exit code and the outputs. */
static int tern_run(const char *args, char **out, char **err)
{
    struct tern_str cmd = {0};
    tern_str_appendf(&cmd, "'%s' %s", TERN_BIN, args);
    int rc = tu_run(cmd.data, out, err);
    tern_str_deinit(&cmd);
    return rc;
}

static void test_inspect(void **state)
{
    char *dir = fixture_dir(), *out, *err, args[1024];
    snprintf(args, sizeof args, "inspect --model '%s' --json", dir);
    assert_int_equal(tern_run(args, &out, &err), 0);
    assert_non_null(strstr(out, "\"architecture\": \"Qwen3ForCausalLM\""));
    assert_non_null(strstr(out, "\"supported\": true, \"family\": \"llama\""));
    assert_non_null(strstr(out, "\"unused_tensors\": 0"));
    assert_true(strstr(out, "\"device\": \"cpu\"") || strstr(out, "\"device\": \"cuda\""));
    tern_free(out);
    tern_free(err);
    /* a model tern does not run: what it is and the first unsupported feature on stdout,
     * the reason as the one error line, exit 1 */
    char *tmp = tu_temp_dir("unsupported"), cmd[2048];
    snprintf(cmd, sizeof cmd, "cp -r '%s'/. '%s'/ && sed -i 's/\"hidden_act\": \"silu\"/"
             "\"hidden_act\": \"gelu\"/' '%s'/config.json", dir, tmp, tmp);
    assert_int_equal(system(cmd), 0);
    snprintf(args, sizeof args, "inspect --model '%s'", tmp);
    assert_int_equal(tern_run(args, &out, &err), 1);
    assert_non_null(strstr(out, "architecture     Qwen3ForCausalLM (qwen3)\nsupported        no\n"
                                "unsupported      "));
    assert_non_null(strstr(out, "hidden_act 'gelu' is not supported"));
    assert_non_null(strstr(err, "hidden_act 'gelu' is not supported"));
    tern_free(out);
    tern_free(err);
    snprintf(args, sizeof args, "inspect --model '%s' --json", tmp);
    assert_int_equal(tern_run(args, &out, &err), 1);
    assert_non_null(strstr(out, "\"supported\": false, \"unsupported\": \""));
    tern_free(out);
    tern_free(err);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
    tern_free(tmp);
    tern_free(dir);
}

static void test_generate_matches_golden(void **state)
{
    char *dir = fixture_dir(), *out, *err, args[2048];
    struct tu_npy prompt, greedy;
    char *p = tern_path_join(dir, "golden/prompt.npy");
    tu_npy_load(p, &prompt);
    tern_free(p);
    p = tern_path_join(dir, "golden/greedy.npy");
    tu_npy_load(p, &greedy);
    tern_free(p);
    struct tern_str ids = {0}, want = {0};
    for (size_t i = 0; i < prompt.n; i++) tern_str_appendf(&ids, "%s%d", i ? " " : "", ((int32_t *)prompt.data)[i]);
    for (size_t i = 0; i < 8; i++) tern_str_appendf(&want, "%s%d", i ? " " : "", ((int32_t *)greedy.data)[i]);
    snprintf(args, sizeof args, "generate --device cpu --model '%s' --ids '%s' --max-tokens 8 --no-eos", dir,
             ids.data);
    assert_int_equal(tern_run(args, &out, &err), 0);
    assert_memory_equal(out, want.data, want.len);
    tern_free(out);
    tern_free(err);
    /* logits to .npy, read back, equal to the golden within tolerance */
    char *tmp = tu_temp_dir("logits");
    char *npy = tern_path_join(tmp, "l.npy");
    snprintf(args, sizeof args, "logits --device cpu --model '%s' --ids '%s' --out '%s'", dir, ids.data, npy);
    assert_int_equal(tern_run(args, &out, &err), 0);
    struct tu_npy got, gold;
    tu_npy_load(npy, &got);
    p = tern_path_join(dir, "golden/logits.npy");
    tu_npy_load(p, &gold);
    tern_free(p);
    assert_int_equal(got.n, gold.n);
    assert_true(tu_max_rel_err(got.data, gold.data, got.n) <= 1e-4);
    tu_npy_free(&got);
    tu_npy_free(&gold);
    tu_npy_free(&prompt);
    tu_npy_free(&greedy);
    tern_str_deinit(&ids);
    tern_str_deinit(&want);
    tern_free(out);
    tern_free(err);
    tern_free(npy);
    tern_free(tmp);
    tern_free(dir);
}

/* Copies the fixture into a temp dir, applies a shell edit, runs inspect and
 * checks exit != 0 and that stderr is one line containing `needle`. */
static void expect_bad(const char *edit, const char *needle)
{
    char *src = fixture_dir(), *tmp = tu_temp_dir("bad"), *out, *err;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp -r '%s'/. '%s'/ && cd '%s' && %s", src, tmp, tmp, edit);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "inspect --model '%s'", tmp);
    int rc = tern_run(cmd, &out, &err);
    if (rc == 0 || !strstr(err, needle))
        fail_msg("edit [%s]: exit %d, stderr '%s' lacks '%s'", edit, rc, err, needle);
    /* one line, no crash signature */
    char *nl = strchr(err, '\n');
    assert_true(nl == NULL || nl[1] == '\0');
    assert_true(rc == 1);
    tern_free(out);
    tern_free(err);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
    tern_free(tmp);
    tern_free(src);
}

static void test_bad_inputs(void **state)
{
    expect_bad("rm config.json", "config.json");
    expect_bad("printf '{\"hidden_size\": 64,' > config.json", "config.json");
    expect_bad("sed -i 's/Qwen3ForCausalLM/FooForCausalLM/' config.json", "FooForCausalLM");
    expect_bad("sed -i 's/\"hidden_size\"/\"hidden_sizeX\"/' config.json", "hidden_size");
    expect_bad("sed -i 's/\"num_hidden_layers\": [0-9]*/\"num_hidden_layers\": \"two\"/' config.json",
               "num_hidden_layers");
    expect_bad("truncate -s 100 model.safetensors", "model.safetensors");
    expect_bad("printf '\\377\\377\\377\\377\\000\\000\\000\\000' | dd of=model.safetensors bs=1 "
               "count=8 conv=notrunc 2>/dev/null",
               "model.safetensors");
    expect_bad("rm model.safetensors", "safetensors");
    /* more layers than layer_types lists: the key is named */
    expect_bad("sed -i 's/\"num_hidden_layers\": \\([0-9]*\\)/\"num_hidden_layers\": 9/' config.json",
               "key 'layer_types' has 3 entries, num_hidden_layers is 9");
    /* more layers than the file holds: a missing tensor is named */
    expect_bad("sed -i 's/\"num_hidden_layers\": \\([0-9]*\\)/\"num_hidden_layers\": 9/; "
               "/\"layer_types\"/,/]/d' config.json",
               "model.layers.3.");
    /* a layer type tern does not know */
    expect_bad("sed -i '0,/\"full_attention\"/s//\"linear_attention\"/' config.json",
               "layer_types[0] is 'linear_attention'");
    /* a shape the file does not hold */
    expect_bad("sed -i 's/\"intermediate_size\": [0-9]*/\"intermediate_size\": 8/' config.json",
               "gate_proj.weight' has shape [192, 64], config expects [8, 64]");
}

static void test_bad_cli_args(void **state)
{
    char *out, *err;
    assert_int_equal(tern_run("generate --model /nonexistent --ids '1 2'", &out, &err), 1);
    assert_non_null(strstr(err, "/nonexistent"));
    tern_free(out);
    tern_free(err);
    char *dir = fixture_dir(), args[1024];
    snprintf(args, sizeof args, "generate --model '%s' --ids '1 x 2'", dir);
    assert_int_equal(tern_run(args, &out, &err), 2);
    assert_non_null(strstr(err, "--ids"));
    tern_free(out);
    tern_free(err);
    snprintf(args, sizeof args, "generate --model '%s' --ids '1 99999999'", dir);
    assert_int_equal(tern_run(args, &out, &err), 1);
    assert_non_null(strstr(err, "99999999"));
    tern_free(out);
    tern_free(err);
    snprintf(args, sizeof args, "generate --model '%s' --ids '1' --max-tokens -3", dir);
    assert_int_equal(tern_run(args, &out, &err), 2);
    tern_free(out);
    tern_free(err);
    assert_int_equal(tern_run("frobnicate", &out, &err), 2);
    tern_free(out);
    tern_free(err);
    tern_free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inspect),
        cmocka_unit_test(test_generate_matches_golden),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_bad_cli_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
