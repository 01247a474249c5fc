/*
 * test_model_check.c — tern_model_check (a model's support, decided without
 * loading its weights): every fixture under tests/fixtures/models and
 * tests/fixtures/quant is supported with its family named and no tensor
 * left over (but a multimodal wrapper's other towers); and copies of fixtures with one config.json key or tensor
 * edited are refused with a reason that names that key or tensor, the same
 * reason tern_model_open gives.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_all(const char *sub, const char *marker)
{
    char **dirs;
    int n = tu_fixture_dirs(sub, marker, &dirs);
    assert_true(n >= 4);
    for (int i = 0; i < n; i++) {
        struct tern_model_support sup;
        if (tern_model_check(dirs[i], &sup) != TERN_OK) fail_msg("%s: %s", dirs[i], tern_last_error());
        if (!sup.supported) fail_msg("%s: not supported: %s", dirs[i], sup.reason);
        assert_true(sup.family[0] != '\0');
        assert_true(sup.architecture[0] != '\0');
        /* a multimodal wrapper's vision and audio towers are left over */
        if (!strstr(sup.architecture, "ConditionalGeneration") && sup.n_unused_tensors != 0)
            fail_msg("%s: %d tensors unused", dirs[i], sup.n_unused_tensors);
        tern_free(dirs[i]);
    }
    tern_free(dirs);
}

static void test_fixtures_supported(void **state)
{
    check_all("models", "golden/logits.npy");
    check_all("quant", "golden/logits.npy");
}

/* A copy of fixture `fix` with `edit` (a shell command run in it) applied:
 * tern_model_check runs, says unsupported, and its reason holds `needle`;
 * tern_model_open fails with the same message. */
static void expect_refused(const char *fix, const char *edit, const char *needle)
{
    char *src = tu_fixture(fix), *tmp = tu_temp_dir("check"), cmd[4096];
    snprintf(cmd, sizeof cmd, "cp -r '%s'/. '%s'/ && cd '%s' && %s", src, tmp, tmp, edit);
    assert_int_equal(system(cmd), 0);
    struct tern_model_support sup;
    if (tern_model_check(tmp, &sup) != TERN_OK) fail_msg("[%s] %s", edit, tern_last_error());
    if (sup.supported || !strstr(sup.reason, needle))
        fail_msg("[%s]: supported %d, reason '%s' lacks '%s'", edit, sup.supported, sup.reason,
                 needle);
    struct tern_model *m = NULL;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CPU;
    assert_int_not_equal(tern_model_open(tmp, &mp, &m), TERN_OK);
    assert_true(strncmp(tern_last_error(), sup.reason, sizeof sup.reason - 1) == 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
    tern_free(tmp);
    tern_free(src);
}

static void test_refusals(void **state)
{
    expect_refused("models/tiny-phi3", "sed -i 's/Phi3ForCausalLM/PhiMoEForCausalLM/' config.json",
                   "architecture 'PhiMoEForCausalLM' is not supported");
    /* longrope factors of the wrong length for the rotary dim (12: 6 pairs) */
    expect_refused("models/tiny-phi3", "sed -i '0,/\"long_factor\": \\[/s//\"long_factor\": [1.0, /' "
                   "config.json", "long_factor");
    expect_refused("models/tiny-phi3", "sed -i 's/\"partial_rotary_factor\": 0.75/"
                   "\"partial_rotary_factor\": 0.625/' config.json",
                   "short_factor have 6 entries, the rotary dim 10 needs 5");
    expect_refused("models/tiny-olmo2", "sed -i 's/\"rope_scaling\": null/\"rope_scaling\": "
                   "{\"rope_type\": \"mrope\"}/' config.json",
                   "rope_scaling.rope_type 'mrope' is not supported");
    expect_refused("models/tiny-glm4", "sed -i 's/\"hidden_act\": \"silu\"/\"hidden_act\": "
                   "\"relu2\"/' config.json", "hidden_act 'relu2'");
    expect_refused("models/tiny-cohere", "sed -i 's/\"use_qk_norm\": false/\"use_qk_norm\": true/' "
                   "config.json", "use_qk_norm");
    expect_refused("models/tiny-smollm3", "sed -i '0,/\"no_rope_layers\": \\[/s//\"no_rope_layers\": "
                   "[2, /' config.json", "no_rope_layers");
    expect_refused("models/tiny-granite", "sed -i 's/\"residual_multiplier\": 0.5/"
                   "\"residual_multiplier\": -1/' config.json", "residual_multiplier");
    expect_refused("models/tiny-minicpm", "sed -i '/dim_model_base/d' config.json",
                   "dim_model_base");
    expect_refused("models/tiny-starcoder2", "sed -i 's/\"norm_epsilon\": 1e-05/"
                   "\"norm_epsilon\": 0/' config.json", "norm_epsilon");
    /* a tensor the plan needs, absent: its name (Phi 3's fused q|k|v) */
    expect_refused("models/tiny-phi3",
                   "sed -i 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 3/' config.json",
                   "model.layers.2.");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures_supported),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
