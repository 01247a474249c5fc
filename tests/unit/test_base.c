/*
 * test_base.c — status strings, error messages, strings, dtype conversions.
 */
#include "testutil.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_status(void **state)
{
    assert_string_equal(tern_status_str(TERN_OK), "ok");
    assert_string_equal(tern_status_str(TERN_E_FORMAT), "malformed input");
    assert_string_equal(tern_status_str((enum tern_status)999), "unknown status");
    assert_int_equal(tern_error(TERN_E_IO, "file %s: bad", "x.bin"), TERN_E_IO);
    assert_string_equal(tern_last_error(), "file x.bin: bad");
    tern_error_prefix(TERN_E_IO, "loading %d", 3);
    assert_string_equal(tern_last_error(), "loading 3: file x.bin: bad");
}

static void test_str(void **state)
{
    struct tern_str s = {0};
    for (int i = 0; i < 1000; i++) assert_int_equal(tern_str_appendf(&s, "%d,", i), TERN_OK);
    assert_true(s.len > 3000);
    assert_memory_equal(s.data, "0,1,2,", 6);
    assert_int_equal(s.data[s.len], 0);
    char *t = tern_str_take(&s);
    assert_null(s.data);
    tern_free(t);
    char *p = tern_path_join("/a/b", "c.json");
    assert_string_equal(p, "/a/b/c.json");
    tern_free(p);
}

static void test_bf16_f16(void **state)
{
    /* Round-to-nearest-even, as torch's .to(bfloat16). */
    assert_int_equal(tern_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(tern_f32_to_bf16(1.00390625f), 0x3f80); /* tie -> even */
    assert_int_equal(tern_f32_to_bf16(1.01171875f), 0x3f82); /* tie -> even (up) */
    assert_true(isnan(tern_bf16_to_f32(tern_f32_to_bf16(NAN))));
    float vals[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.1f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float back = tern_f16_to_f32(tern_f32_to_f16(vals[i]));
        assert_true(fabsf(back - vals[i]) <= fabsf(vals[i]) * 1e-3f);
    }
    assert_int_equal(tern_f32_to_f16(1e6f), 0x7c00);
    /* every f16 bit pattern that is finite round-trips exactly */
    for (uint32_t h = 0; h < 0x7c00; h++) assert_int_equal(tern_f32_to_f16(tern_f16_to_f32(h)), h);
}

/* TERN_THREADS overrides the default; junk is ignored (the physical cores). */
static void test_default_threads(void **state)
{
    (void)state;
    unsetenv("TERN_THREADS");
    int cores = tern_default_threads();
    assert_true(cores >= 1);
    setenv("TERN_THREADS", "3", 1);
    assert_int_equal(tern_default_threads(), 3);
    setenv("TERN_THREADS", "-2", 1);
    assert_int_equal(tern_default_threads(), cores);
    setenv("TERN_THREADS", "4x", 1);
    assert_int_equal(tern_default_threads(), cores);
    unsetenv("TERN_THREADS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status),
        cmocka_unit_test(test_str),
        cmocka_unit_test(test_bf16_f16),
        cmocka_unit_test(test_default_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
