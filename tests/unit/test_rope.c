/*
 * test_rope.c — the rope kinds whose frequencies depend on the context
 * (longrope, dynamic NTK) against transformers 5.24's
 * ROPE_INIT_FUNCTIONS["longrope" / "dynamic"] (values printed by it, float32),
 * and their config.json forms (Phi 3's "su", its legacy "yarn" with
 * factors, a top-level original_max_position_embeddings winning over the
 * rope object's, lists of the wrong length named in the error).
 */
#include "testutil.h"

#include "model/arch.h"

#include <math.h>
#include <string.h>

static void expect_freqs(const char *what, const float *got, const double *want, int n)
{
    for (int i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > 1e-6 * fabs(want[i]))
            fail_msg("%s: inv_freq[%d] = %.9g, transformers %.9g", what, i, got[i], want[i]);
}

static const float SHORT[8] = {1.0f, 1.05f, 1.1f, 1.2f, 1.4f, 1.6f, 2.0f, 2.5f};
static const float LONG[8] = {2.0f, 2.0f, 3.0f, 4.0f, 6.0f, 8.0f, 12.0f, 16.0f};

static void test_longrope(void **state)
{
    /* head_dim 16, theta 1e4, original 256, max 1024: factor 4 */
    struct tern_rope_cfg rc = {.kind = TERN_ROPE_LONGROPE, .theta = 1e4, .factor = 4.0,
                               .partial_rotary_factor = 1.0, .original_max_pos = 256,
                               .max_pos = 1024, .n_factors = 8};
    memcpy(rc.short_factor, SHORT, sizeof SHORT);
    memcpy(rc.long_factor, LONG, sizeof LONG);
    static const double want_short[8] = {1.0, 0.3011693060398102, 0.09090909361839294,
                                         0.02635231241583824, 0.0071428571827709675,
                                         0.0019764236640185118, 0.0005000000237487257,
                                         0.0001264911115868017};
    static const double want_long[8] = {0.5, 0.15811388194561005, 0.03333333507180214,
                                        0.007905694656074047, 0.0016666667070239782,
                                        0.00039528473280370235, 8.333333244081587e-05,
                                        1.9764236640185118e-05};
    float inv[8], ms;
    assert_true(tern_rope_cfg_by_context(&rc));
    tern_rope_inv_freq(&rc, 16, 16, 256, inv, &ms); /* a context of original_max: short */
    expect_freqs("longrope, context 256", inv, want_short, 8);
    assert_true(fabsf(ms - 1.118033988749895f) < 1e-6f); /* sqrt(1 + ln 4 / ln 256) */
    tern_rope_inv_freq(&rc, 16, 16, 257, inv, &ms);
    expect_freqs("longrope, context 257", inv, want_long, 8);
    rc.longrope_attention_factor = 1.5; /* given: used as it is */
    tern_rope_inv_freq(&rc, 16, 16, 257, inv, &ms);
    assert_true(ms == 1.5f);
}

static void test_dynamic(void **state)
{
    /* head_dim 16, theta 1e4, factor 4, max_position_embeddings 64 */
    struct tern_rope_cfg rc = {.kind = TERN_ROPE_DYNAMIC, .theta = 1e4, .factor = 4.0,
                               .partial_rotary_factor = 1.0, .original_max_pos = 64, .max_pos = 64};
    static const double want64[8] = {1.0, 0.3162277638912201, 0.10000000149011612,
                                     0.03162277862429619, 0.009999999776482582,
                                     0.003162277862429619, 0.0010000000474974513,
                                     0.0003162277862429619};
    static const double want256[8] = {1.0, 0.21921244263648987, 0.048054102808237076,
                                      0.010534058324992657, 0.0023091966286301613,
                                      0.0005062046693637967, 0.00011096637172158808,
                                      2.432521250739228e-05};
    float inv[8], ms;
    tern_rope_inv_freq(&rc, 16, 16, 64, inv, &ms);
    expect_freqs("dynamic, context 64", inv, want64, 8);
    tern_rope_inv_freq(&rc, 16, 16, 256, inv, &ms);
    expect_freqs("dynamic, context 256", inv, want256, 8);
    assert_true(ms == 1.0f);
}

/* Reads the rope of a config.json text. */
static enum tern_status read(const char *text, struct tern_rope_cfg *rc)
{
    json_error_t je;
    struct tern_json_doc d = {json_loads(text, 0, &je), (char *)"config.json"};
    assert_non_null(d.root);
    enum tern_status st = tern_rope_cfg_read(&d, NULL, "rope_theta", 1e4, rc);
    json_decref(d.root);
    return st;
}

static void test_config_forms(void **state)
{
    struct tern_rope_cfg rc;
    tu_ok(read("{\"max_position_embeddings\": 1024, \"original_max_position_embeddings\": 256, "
               "\"rope_scaling\": {\"type\": \"su\", \"short_factor\": [1, 2], "
               "\"long_factor\": [3, 4], \"original_max_position_embeddings\": 512}}", &rc));
    assert_int_equal(rc.kind, TERN_ROPE_LONGROPE);
    assert_int_equal(rc.n_factors, 2);
    assert_int_equal(rc.original_max_pos, 256); /* the top-level key wins */
    assert_true(rc.factor == 4.0);              /* max / original */
    assert_true(rc.long_factor[1] == 4.0f);
    tu_ok(read("{\"rope_scaling\": {\"type\": \"yarn\", \"short_factor\": [1], "
               "\"long_factor\": [3], \"factor\": 2.0}}", &rc));
    assert_int_equal(rc.kind, TERN_ROPE_LONGROPE);
    assert_true(rc.factor == 2.0);
    tu_ok(read("{\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}", &rc));
    assert_int_equal(rc.kind, TERN_ROPE_DYNAMIC);
    assert_true(tern_rope_cfg_by_context(&rc));
    assert_int_equal(read("{\"rope_scaling\": {\"rope_type\": \"longrope\", \"short_factor\": [1, 2],"
                          " \"long_factor\": [3]}}", &rc),
                     TERN_E_FORMAT);
    assert_non_null(strstr(tern_last_error(), "rope_scaling.long_factor has 1 entries"));
    assert_int_equal(read("{\"rope_scaling\": {\"rope_type\": \"longrope\", \"short_factor\": [1, -2],"
                          " \"long_factor\": [3, 4]}}", &rc),
                     TERN_E_FORMAT);
    assert_non_null(strstr(tern_last_error(), "rope_scaling.short_factor[1]"));
    assert_int_equal(read("{\"rope_scaling\": {\"rope_type\": \"longrope\"}}", &rc), TERN_E_FORMAT);
    assert_non_null(strstr(tern_last_error(), "rope_scaling.short_factor"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_longrope),
        cmocka_unit_test(test_dynamic),
        cmocka_unit_test(test_config_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
