/*
 * test_ggml_quant.c — ggml's tensor types (tensor/ggml_quant.h):
 *
 *   - the trait table against ggml's block sizes;
 *   - row dequantization bit for bit against gguf-py's dequantize on random
 *     blocks of every type (tests/fixtures/gguf/quant_blocks.gguf, made by
 *     tools/make_gguf_fixtures.py: "raw.TYPE" rows and "want.TYPE" floats),
 *     read through the GGUF reader;
 *   - the dot products bit for bit against the CPU backend's 16-lane dot of
 *     the dequantized row;
 *   - every tensor of SmolLM2-135M-Instruct Q4_1 against a hash of gguf-py's
 *     dequantization (tests/fixtures/gguf/smollm2_dequant.json), when the
 *     file is present.
 */
#include "testutil.h"
#include "backend/cpu/cpu_quant.h"
#include "io/config.h"
#include "io/gguf.h"

#include <stdio.h>
#include <string.h>

static void test_traits(void **state)
{
    (void)state;
    static const struct {
        uint32_t id;
        const char *name;
        int block, bytes;
        bool dq;
    } want[] = {
        {0, "F32", 1, 4, true},          {1, "F16", 1, 2, true},
        {2, "Q4_0", 32, 18, true},       {3, "Q4_1", 32, 20, true},
        {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
        {8, "Q8_0", 32, 34, true},       {10, "Q2_K", 256, 84, true},
        {11, "Q3_K", 256, 110, true},    {12, "Q4_K", 256, 144, true},
        {13, "Q5_K", 256, 176, true},    {14, "Q6_K", 256, 210, true},
        {20, "IQ4_NL", 32, 18, true},    {23, "IQ4_XS", 256, 136, true},
        {30, "BF16", 1, 2, true},        {15, "Q8_K", 256, 292, false},
        {16, "IQ2_XXS", 256, 66, false}, {39, "MXFP4", 32, 17, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct tern_ggml_traits *t = tern_ggml_type_traits(want[i].id);
        assert_non_null(t);
        assert_string_equal(t->name, want[i].name);
        assert_int_equal(t->block, want[i].block);
        assert_int_equal(t->block_bytes, want[i].bytes);
        assert_int_equal(t->dequant, want[i].dq);
    }
    assert_null(tern_ggml_type_traits(4));
    assert_null(tern_ggml_type_traits(9));
    assert_string_equal(tern_ggml_type_name(9999), "?");
    uint64_t b;
    assert_true(tern_ggml_row_bytes(TERN_GGML_Q4_K, 512, &b)), assert_int_equal(b, 288);
    assert_false(tern_ggml_row_bytes(TERN_GGML_Q4_K, 300, &b));
    assert_false(tern_ggml_row_bytes(4, 32, &b));
    enum tern_dtype dt;
    assert_true(tern_ggml_type_dtype(TERN_GGML_BF16, &dt)), assert_int_equal(dt, TERN_DTYPE_BF16);
    assert_false(tern_ggml_type_dtype(TERN_GGML_Q8_0, &dt));
    float out[32];
    assert_false(tern_ggml_dequant_row(TERN_GGML_Q8_K, "", out, 0));
    assert_false(tern_ggml_dequant_row(TERN_GGML_Q8_0, "", out, 31));
}

static void test_random_blocks(void **state)
{
    (void)state;
    char *path = tu_fixture("gguf/quant_blocks.gguf");
    struct tern_gguf *g;
    tu_ok(tern_gguf_open(path, &g));
    uint64_t seed = tu_seed();
    int n_types = 0;
    for (size_t k = 0; k < tern_gguf_n_tensors(g); k++) {
        const struct tern_gguf_tensor *raw = tern_gguf_tensor_at(g, k);
        if (strncmp(raw->name, "raw.", 4)) continue;
        char name[64];
        snprintf(name, sizeof name, "want.%s", raw->name + 4);
        const struct tern_gguf_tensor *want = tern_gguf_find_tensor(g, name);
        assert_non_null(want);
        assert_string_equal(tern_ggml_type_name(raw->type), raw->name + 4);
        assert_int_equal(want->type, TERN_GGML_F32);
        int64_t n = raw->ne[0], rows = raw->ne[1];
        assert_int_equal(want->ne[0], n), assert_int_equal(want->ne[1], rows);
        uint64_t row_bytes;
        assert_true(tern_ggml_row_bytes(raw->type, n, &row_bytes));
        float got[256], ref[256], x[256];
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *src = (const uint8_t *)raw->data + r * (int64_t)row_bytes;
            memcpy(ref, (const uint8_t *)want->data + r * n * 4, (size_t)n * 4);
            assert_true(tern_ggml_dequant_row(raw->type, src, got, n));
            for (int64_t i = 0; i < n; i++)
                if (memcmp(&got[i], &ref[i], 4))
                    fail_msg("%s row %lld value %lld: %.9g, gguf-py %.9g", raw->name, (long long)r,
                             (long long)i, got[i], ref[i]);
            /* the dot is the CPU backend's dot of x with the dequantized row */
            for (int64_t i = 0; i < n; i++) x[i] = tu_frand(&seed);
            float d, want_d = tern_cpu_dot_f32(x, ref, n);
            assert_true(tern_ggml_dot_row(raw->type, src, x, n, &d));
            if (memcmp(&d, &want_d, 4))
                fail_msg("%s row %lld: dot %.9g, want %.9g", raw->name, (long long)r, d, want_d);
        }
        n_types++;
    }
    assert_int_equal(n_types, 15);
    tern_gguf_close(g);
    tern_free(path);
}

/* The dot over rows of several blocks (and a plain row of odd length) in one
 * call equals the lane-order dot of the whole dequantized row. */
static void test_dot_long_rows(void **state)
{
    (void)state;
    uint64_t seed = tu_seed();
    static const uint32_t types[] = {TERN_GGML_Q4_0, TERN_GGML_Q6_K, TERN_GGML_F16, TERN_GGML_F32};
    static const int64_t lens[] = {32 * 37, 256 * 5, 1001, 17};
    for (int k = 0; k < 4; k++) {
        int64_t n = lens[k];
        uint64_t bytes;
        assert_true(tern_ggml_row_bytes(types[k], n, &bytes));
        uint8_t *row = tern_malloc(bytes);
        float *w = tern_malloc((size_t)n * 4), *x = tern_malloc((size_t)n * 4);
        for (uint64_t i = 0; i < bytes; i++) row[i] = (uint8_t)(tu_frand(&seed) * 127.0f + 128.0f);
        /* keep every f16 finite: scales of the block types, all values of F16 */
        const struct tern_ggml_traits *t = tern_ggml_type_traits(types[k]);
        for (uint64_t b = 0; b < bytes; b += (uint64_t)t->block_bytes) {
            if (types[k] == TERN_GGML_Q4_0) row[b + 1] &= 0x3b;
            if (types[k] == TERN_GGML_Q6_K) row[b + 209] &= 0x3b;
            if (types[k] == TERN_GGML_F16) row[b + 1] &= 0x3b;
            if (types[k] == TERN_GGML_F32) row[b + 3] &= 0x3f;
        }
        for (int64_t i = 0; i < n; i++) x[i] = tu_frand(&seed);
        assert_true(tern_ggml_dequant_row(types[k], row, w, n));
        float d, want_d = tern_cpu_dot_f32(x, w, n);
        assert_true(tern_ggml_dot_row(types[k], row, x, n, &d));
        if (memcmp(&d, &want_d, 4))
            fail_msg("%s n=%lld: dot %.9g, want %.9g", t->name, (long long)n, d, want_d);
        tern_free(row);
        tern_free(w);
        tern_free(x);
    }
}

/* sum_i bits(x_i) * (2 i + 1) mod 2^64, as tools/make_gguf_fixtures.py. */
static uint64_t value_hash(const float *x, int64_t n, int64_t base, uint64_t h)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        h += (uint64_t)u * (uint64_t)(2 * (base + i) + 1);
    }
    return h;
}

static void test_smollm2(void **state)
{
    (void)state;
    char *path = tu_smollm2_gguf();
    if (!path) return;
    struct tern_gguf *g;
    tu_ok(tern_gguf_open(path, &g));
    char *jpath = tu_fixture("gguf/smollm2_dequant.json");
    char *text;
    size_t len;
    tu_ok(tern_file_read(jpath, &text, &len));
    json_error_t err;
    json_t *cases = json_loadb(text, len, 0, &err);
    assert_non_null(cases);
    assert_int_equal(json_array_size(cases), tern_gguf_n_tensors(g));
    float *row = tern_malloc(49152 * sizeof *row);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        const struct tern_gguf_tensor *t = tern_gguf_find_tensor(g, name);
        assert_non_null(t);
        assert_string_equal(tern_ggml_type_name(t->type),
                            json_string_value(json_object_get(c, "type")));
        uint64_t row_bytes, h = 0;
        assert_true(tern_ggml_row_bytes(t->type, t->ne[0], &row_bytes));
        int64_t rows = tern_gguf_tensor_numel(t) / t->ne[0];
        for (int64_t r = 0; r < rows; r++) {
            assert_true(tern_ggml_dequant_row(
                t->type, (const uint8_t *)t->data + r * (int64_t)row_bytes, row, t->ne[0]));
            h = value_hash(row, t->ne[0], r * t->ne[0], h);
        }
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
        if (strcmp(hex, json_string_value(json_object_get(c, "hash"))))
            fail_msg("%s (%s): hash %s, gguf-py %s", name, tern_ggml_type_name(t->type), hex,
                     json_string_value(json_object_get(c, "hash")));
    }
    print_message("smollm2: %zu tensors dequantized as gguf-py does\n", json_array_size(cases));
    json_decref(cases);
    tern_free(row);
    tern_free(text);
    tern_free(jpath);
    tern_gguf_close(g);
    tern_free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits),
        cmocka_unit_test(test_random_blocks),
        cmocka_unit_test(test_dot_long_rows),
        cmocka_unit_test(test_smollm2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
