/*
 * test_gguf.c — the GGUF reader: a round trip through a file holding every
 * value type (nested arrays too) and tensors of several types with a custom
 * alignment; versions; every prefix of a valid file rejected; and one test
 * per class of malformed input (bad counts, type ids, dims, offsets, string
 * lengths, duplicates), each checking the status and that the one-line
 * message names the file and the culprit.
 */
#include "gguf_build.h"
#include "st_build.h"
#include "io/gguf.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define U8   TERN_GGUF_UINT8
#define I8   TERN_GGUF_INT8
#define U16  TERN_GGUF_UINT16
#define I16  TERN_GGUF_INT16
#define I32  TERN_GGUF_INT32
#define F32  TERN_GGUF_FLOAT32
#define BOOL TERN_GGUF_BOOL
#define STR  TERN_GGUF_STRING
#define ARR  TERN_GGUF_ARRAY
#define U64  TERN_GGUF_UINT64
#define I64  TERN_GGUF_INT64
#define F64  TERN_GGUF_FLOAT64

/* ---------------------------------------------------------------- a valid file */

/* Metadata of every type, then tensors a (F32 [2, 3]), q (Q8_0 [2, 32]) and
 * h (F16 [5]) with alignment 64; h ends exactly at the end of the file. */
static uint8_t *valid_image(uint32_t version, size_t *len)
{
    struct gb b;
    gb_begin(&b, version);
    gb_key(&b, "t.u8", U8), gb_u8(&b, 200);
    gb_key(&b, "t.i8", I8), gb_u8(&b, (uint8_t)-5);
    gb_key(&b, "t.u16", U16), gb_u16(&b, 65535);
    gb_key(&b, "t.i16", I16), gb_u16(&b, (uint16_t)-300);
    gb_kv_u32(&b, "t.u32", 4000000000u);
    gb_kv_i32(&b, "t.i32", -2000000000);
    gb_kv_f32(&b, "t.f32", 0.5f);
    gb_kv_bool(&b, "t.bool", true);
    gb_kv_str(&b, "t.str", "hello");
    gb_key(&b, "t.u64", U64), gb_u64(&b, 1ull << 40);
    gb_key(&b, "t.i64", I64), gb_u64(&b, (uint64_t)-7);
    gb_key(&b, "t.f64", F64);
    double d = -1.25;
    gb_raw(&b, &d, 8);
    gb_kv_u32(&b, "general.alignment", 64);
    gb_kv_arr(&b, "t.arr_i32", I32, 3);
    gb_u32(&b, 1), gb_u32(&b, (uint32_t)-2), gb_u32(&b, 3);
    gb_kv_arr(&b, "t.arr_f32", F32, 2);
    gb_f32(&b, 1.5f), gb_f32(&b, -0.25f);
    gb_kv_arr(&b, "t.arr_str", STR, 3);
    gb_str(&b, "a"), gb_str(&b, ""), gb_str(&b, "xyz");
    gb_kv_arr(&b, "t.arr_bool", BOOL, 2);
    gb_u8(&b, 0), gb_u8(&b, 1);
    gb_kv_arr(&b, "t.nested", ARR, 2); /* [[1, 2], ["p", "q", "r"]] */
    gb_u32(&b, I16), gb_u64(&b, 2), gb_u16(&b, 1), gb_u16(&b, 2);
    gb_u32(&b, STR), gb_u64(&b, 3), gb_str(&b, "p"), gb_str(&b, "q"), gb_str(&b, "r");
    gb_tensor(&b, "a", 2, (int64_t[]){3, 2}, 0, 0);
    gb_tensor(&b, "q", 2, (int64_t[]){32, 2}, 8, 64);
    gb_tensor(&b, "h", 1, (int64_t[]){5}, 1, 192);
    gb_align(&b, 64);
    for (int i = 0; i < 6; i++) gb_f32(&b, (float)i - 2.5f); /* a at 0 */
    gb_align(&b, 64);
    size_t base = gb_len(&b) - 64;
    for (int i = 0; i < 68; i++) gb_u8(&b, (uint8_t)(i * 7 + 1)); /* q at 64 */
    while (gb_len(&b) - base < 192) gb_u8(&b, 0);
    for (int i = 0; i < 5; i++) gb_u16(&b, 0x3c00); /* h at 192: 1.0 */
    return gb_end(&b, len);
}

static void test_roundtrip(void **state)
{
    (void)state;
    size_t len;
    uint8_t *img = valid_image(3, &len);
    char *path = tu_write_temp("rt.gguf", img, len);
    struct tern_gguf *g = NULL;
    tu_ok(tern_gguf_open(path, &g));
    assert_string_equal(tern_gguf_path(g), path);
    assert_int_equal(tern_gguf_version(g), 3);
    assert_int_equal(tern_gguf_alignment(g), 64);
    assert_int_equal(tern_gguf_data_offset(g) % 64, 0);
    assert_int_equal(tern_gguf_n_kv(g), 18);
    assert_string_equal(tern_gguf_kv_at(g, 0)->key, "t.u8");
    assert_string_equal(tern_gguf_kv_at(g, 17)->key, "t.nested");

    int64_t i;
    double f;
    bool bo;
    const char *s;
    size_t sl;
    tu_ok(tern_gguf_get_int(g, "t.u8", &i)), assert_int_equal(i, 200);
    tu_ok(tern_gguf_get_int(g, "t.i8", &i)), assert_int_equal(i, -5);
    tu_ok(tern_gguf_get_int(g, "t.u16", &i)), assert_int_equal(i, 65535);
    tu_ok(tern_gguf_get_int(g, "t.i16", &i)), assert_int_equal(i, -300);
    tu_ok(tern_gguf_get_int(g, "t.u32", &i)), assert_int_equal(i, 4000000000ll);
    tu_ok(tern_gguf_get_int(g, "t.i32", &i)), assert_int_equal(i, -2000000000);
    tu_ok(tern_gguf_get_int(g, "t.u64", &i)), assert_int_equal(i, 1ll << 40);
    tu_ok(tern_gguf_get_int(g, "t.i64", &i)), assert_int_equal(i, -7);
    tu_ok(tern_gguf_get_float(g, "t.f32", &f)), assert_true(f == 0.5);
    tu_ok(tern_gguf_get_float(g, "t.f64", &f)), assert_true(f == -1.25);
    tu_ok(tern_gguf_get_float(g, "t.i32", &f)), assert_true(f == -2e9);
    tu_ok(tern_gguf_get_bool(g, "t.bool", &bo)), assert_true(bo);
    tu_ok(tern_gguf_get_str(g, "t.str", &s, &sl)), assert_string_equal(s, "hello");
    assert_int_equal(sl, 5);
    tu_ok(tern_gguf_get_int_opt(g, "t.none", 42, &i)), assert_int_equal(i, 42);
    tu_ok(tern_gguf_get_float_opt(g, "t.none", 2.5, &f)), assert_true(f == 2.5);
    tu_ok(tern_gguf_get_bool_opt(g, "t.none", true, &bo)), assert_true(bo);
    tu_ok(tern_gguf_get_str_opt(g, "t.none", "dflt", &s)), assert_string_equal(s, "dflt");
    tu_ok(tern_gguf_get_str_opt(g, "t.str", "dflt", &s)), assert_string_equal(s, "hello");

    const struct tern_gguf_value *a;
    tu_ok(tern_gguf_get_arr(g, "t.arr_i32", I32, &a));
    assert_int_equal(a->n, 3);
    assert_int_equal(tern_gguf_arr_int(a, 1), -2);
    assert_int_equal(tern_gguf_arr_int(a, 2), 3);
    tu_ok(tern_gguf_get_arr(g, "t.arr_f32", F32, &a));
    assert_true(tern_gguf_arr_float(a, 1) == -0.25);
    tu_ok(tern_gguf_get_arr(g, "t.arr_str", STR, &a));
    assert_int_equal(a->n, 3);
    s = tern_gguf_arr_str(a, 2, &sl);
    assert_int_equal(sl, 3), assert_memory_equal(s, "xyz", 3);
    tern_gguf_arr_str(a, 1, &sl), assert_int_equal(sl, 0);
    tu_ok(tern_gguf_get_arr(g, "t.arr_bool", BOOL, &a));
    assert_false(tern_gguf_arr_bool(a, 0)), assert_true(tern_gguf_arr_bool(a, 1));
    tu_ok(tern_gguf_get_arr(g, "t.nested", TERN_GGUF_TYPE_COUNT, &a));
    assert_int_equal(a->elem_type, ARR);
    const struct tern_gguf_value *a0 = tern_gguf_arr_arr(a, 0), *a1 = tern_gguf_arr_arr(a, 1);
    assert_int_equal(a0->elem_type, I16), assert_int_equal(tern_gguf_arr_int(a0, 1), 2);
    assert_int_equal(a1->n, 3), assert_memory_equal(tern_gguf_arr_str(a1, 2, &sl), "r", 1);

    assert_int_equal(tern_gguf_n_tensors(g), 3);
    assert_string_equal(tern_gguf_tensor_at(g, 1)->name, "q");
    const struct tern_gguf_tensor *t = tern_gguf_find_tensor(g, "a");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 2), assert_int_equal(t->ne[0], 3), assert_int_equal(t->ne[1], 2);
    assert_int_equal(t->ne[2], 1), assert_int_equal(tern_gguf_tensor_numel(t), 6);
    assert_int_equal(t->n_bytes, 24);
    float x[6];
    memcpy(x, t->data, 24);
    assert_true(x[0] == -2.5f && x[5] == 2.5f);
    t = tern_gguf_find_tensor(g, "q");
    assert_int_equal(t->type, TERN_GGML_Q8_0), assert_int_equal(t->n_bytes, 68);
    assert_int_equal(t->offset, 64),
        assert_int_equal(((const uint8_t *)t->data)[67], (67 * 7 + 1) & 255);
    t = tern_gguf_find_tensor(g, "h");
    assert_int_equal(t->n_bytes, 10);
    assert_int_equal(tern_gguf_data_offset(g) + t->offset + t->n_bytes, len);
    assert_null(tern_gguf_find_tensor(g, "nope"));
    assert_null(tern_gguf_find(g, "nope"));

    /* getter errors name the file and the key */
    stb_expect(tern_gguf_get_int(g, "t.nope", &i), TERN_E_NOT_FOUND, path, "'t.nope'", "missing",
               NULL);
    stb_expect(tern_gguf_get_int(g, "t.str", &i), TERN_E_FORMAT, path, "'t.str'", "integer",
               "string", NULL);
    stb_expect(tern_gguf_get_float(g, "t.bool", &f), TERN_E_FORMAT, "'t.bool'", "number", NULL);
    stb_expect(tern_gguf_get_bool(g, "t.u8", &bo), TERN_E_FORMAT, "'t.u8'", "bool", "u8", NULL);
    stb_expect(tern_gguf_get_str(g, "t.arr_str", &s, NULL), TERN_E_FORMAT, "'t.arr_str'",
               "array of string", NULL);
    stb_expect(tern_gguf_get_arr(g, "t.arr_str", I32, &a), TERN_E_FORMAT, "an array of i32", NULL);
    stb_expect(tern_gguf_get_arr(g, "t.u8", STR, &a), TERN_E_FORMAT, "'t.u8'", NULL);
    stb_expect(tern_gguf_get_int_opt(g, "t.f32", 0, &i), TERN_E_FORMAT, "'t.f32'", "f32", NULL);
    tern_gguf_close(g);
    stb_remove(path);

    /* the same image parsed in memory; version 2 reads the same */
    tu_ok(tern_gguf_parse(img, len, "mem", &g));
    assert_ptr_equal(tern_gguf_find_tensor(g, "h")->data, img + len - 10);
    tern_gguf_close(g);
    tern_free(img);
    img = valid_image(2, &len);
    tu_ok(tern_gguf_parse(img, len, "v2", &g));
    assert_int_equal(tern_gguf_version(g), 2);
    assert_int_equal(tern_gguf_n_tensors(g), 3);
    tern_gguf_close(g);
    tern_gguf_close(NULL);
    tern_free(img);
}

/* Every proper prefix of a valid file is rejected with a one-line message. */
static void test_truncated(void **state)
{
    (void)state;
    size_t len;
    uint8_t *img = valid_image(3, &len);
    for (size_t n = 0; n < len; n++) {
        struct tern_gguf *g = (struct tern_gguf *)1;
        enum tern_status st = tern_gguf_parse(img, n, "cut.gguf", &g);
        assert_null(g);
        if (st != TERN_E_FORMAT) fail_msg("prefix %zu of %zu: %s", n, len, tern_status_str(st));
        const char *m = tern_last_error();
        if (!strstr(m, "cut.gguf") || strchr(m, '\n')) fail_msg("prefix %zu: message '%s'", n, m);
    }
    char *path = tu_write_temp("short.gguf", img, 3);
    struct tern_gguf *g;
    stb_expect(tern_gguf_open(path, &g), TERN_E_FORMAT, path, "3 bytes", NULL);
    stb_remove(path);
    stb_expect(tern_gguf_open("/nonexistent/x.gguf", &g), TERN_E_NOT_FOUND, "/nonexistent/x.gguf",
               NULL);
    tern_free(img);
}

/* ---------------------------------------------------------------- malformed */

/* Parses b's image and checks the status and message. */
static void expect(struct gb *b, enum tern_status want, const char *s1, const char *s2)
{
    size_t len;
    uint8_t *img = gb_end(b, &len);
    struct tern_gguf *g = (struct tern_gguf *)1;
    enum tern_status st = tern_gguf_parse(img, len, "bad.gguf", &g);
    if (st == TERN_OK)
        tern_gguf_close(g);
    else
        assert_null(g);
    if (want == TERN_OK)
        assert_int_equal(st, TERN_OK);
    else
        stb_expect(st, want, "bad.gguf", s1, s2, NULL);
    tern_free(img);
}

static void test_header(void **state)
{
    (void)state;
    struct gb b;
    gb_begin(&b, 3);
    b.s.data[0] = 'X';
    expect(&b, TERN_E_FORMAT, "not a GGUF file", NULL);
    gb_begin(&b, 1);
    expect(&b, TERN_E_UNSUPPORTED, "version 1", "2 and 3");
    gb_begin(&b, 4);
    expect(&b, TERN_E_UNSUPPORTED, "version 4", NULL);
    gb_begin(&b, 3u << 24);
    expect(&b, TERN_E_UNSUPPORTED, "big-endian", NULL);
    gb_begin(&b, 3);
    gb_counts(&b, 0, 1ull << 60);
    expect(&b, TERN_E_FORMAT, "key/value pairs", "bytes left");
    gb_begin(&b, 3);
    gb_counts(&b, 1ull << 62, 0);
    expect(&b, TERN_E_FORMAT, "tensors", "bytes left");
    gb_begin(&b, 3);
    gb_counts(&b, 0, 3); /* claims three pairs, holds one */
    gb_kv_u32(&b, "general.x", 1);
    gb_raw(&b, "pad pad pad pad pad pad pad pad", 32);
    expect(&b, TERN_E_FORMAT, "past the end", NULL);
}

static void test_bad_values(void **state)
{
    (void)state;
    struct gb b;
    gb_begin(&b, 3);
    gb_key(&b, "k.bad", 13), gb_u32(&b, 0);
    expect(&b, TERN_E_FORMAT, "'k.bad'", "unknown value type id 13");
    gb_begin(&b, 3);
    gb_kv_arr(&b, "k.arr", 77, 1), gb_u32(&b, 0);
    expect(&b, TERN_E_FORMAT, "'k.arr'", "unknown type id 77");
    gb_begin(&b, 3);
    gb_kv_arr(&b, "k.arr", I32, 1000), gb_u32(&b, 1);
    expect(&b, TERN_E_FORMAT, "'k.arr'", "array of 1000 i32");
    gb_begin(&b, 3);
    gb_kv_arr(&b, "k.arr", STR, 2), gb_str(&b, "ok"), gb_u64(&b, 1ull << 40),
        gb_raw(&b, "abcdefgh", 8);
    expect(&b, TERN_E_FORMAT, "'k.arr' element 1", "length 1099511627776");
    gb_begin(&b, 3);
    gb_key(&b, "k.s", STR), gb_u64(&b, 0xffffffffffffffffull), gb_raw(&b, "abc", 3);
    expect(&b, TERN_E_FORMAT, "key 'k.s': its string value", "past the end");
    gb_begin(&b, 3); /* a key whose own length runs past the end */
    gb_counts(&b, 0, 1);
    gb_u64(&b, 1000), gb_raw(&b, "k0123456789abcdef", 17);
    expect(&b, TERN_E_FORMAT, "key 0", "length 1000");
    gb_begin(&b, 3);
    gb_kv_u32(&b, "", 1);
    expect(&b, TERN_E_FORMAT, "key 0", "empty");
    gb_begin(&b, 3);
    gb_counts(&b, 0, 1);
    gb_strn(&b, "a\0b", 3), gb_u32(&b, U8), gb_u8(&b, 1);
    expect(&b, TERN_E_FORMAT, "key 0", "NUL");
    gb_begin(&b, 3);
    gb_kv_u32(&b, "k.dup", 1), gb_kv_u32(&b, "k.dup", 2);
    expect(&b, TERN_E_FORMAT, "key 'k.dup' appears twice", NULL);
    gb_begin(&b, 3); /* arrays nested deeper than the limit */
    gb_kv_arr(&b, "k.deep", ARR, 1);
    for (int d = 0; d < TERN_GGUF_MAX_DEPTH; d++) gb_u32(&b, ARR), gb_u64(&b, 1);
    gb_u32(&b, U8), gb_u64(&b, 0);
    expect(&b, TERN_E_UNSUPPORTED, "'k.deep'", "nests arrays");
    for (int bad = 0; bad < 3; bad++) {
        gb_begin(&b, 3);
        if (bad == 0) gb_kv_u32(&b, "general.alignment", 0);
        if (bad == 1) gb_kv_u32(&b, "general.alignment", 48);
        if (bad == 2) gb_kv_str(&b, "general.alignment", "32");
        expect(&b, TERN_E_FORMAT, "'general.alignment'", "power of two");
    }
}

/* One tensor named "w" of the given type and dims at `offset`, then `data`
 * bytes of data. */
static void one_tensor(struct gb *b, uint32_t n_dims, const int64_t *ne, uint32_t type,
                       uint64_t offset, size_t data)
{
    gb_begin(b, 3);
    gb_tensor(b, "w", n_dims, ne, type, offset);
    gb_align(b, 32);
    for (size_t i = 0; i < data; i++) gb_u8(b, 0);
}

static void test_bad_tensors(void **state)
{
    (void)state;
    struct gb b;
    one_tensor(&b, 1, (int64_t[]){4}, 0, 0, 16);
    expect(&b, TERN_OK, NULL, NULL);
    one_tensor(&b, 1, (int64_t[]){4}, 4, 0, 16); /* a retired type id */
    expect(&b, TERN_E_UNSUPPORTED, "'w'", "unknown ggml type id 4");
    one_tensor(&b, 1, (int64_t[]){4}, 1000, 0, 16);
    expect(&b, TERN_E_UNSUPPORTED, "'w'", "type id 1000");
    one_tensor(&b, 5, (int64_t[]){1, 1, 1, 1, 1}, 0, 0, 16);
    expect(&b, TERN_E_FORMAT, "'w'", "5 dimensions");
    one_tensor(&b, 2, (int64_t[]){1ll << 40, 1ll << 40}, 0, 0, 16);
    expect(&b, TERN_E_FORMAT, "'w'", "overflows");
    one_tensor(&b, 4, (int64_t[]){32, 1ll << 21, 1ll << 21, 1ll << 21}, 8, 0, 16);
    expect(&b, TERN_E_FORMAT, "'w'", "overflows");
    one_tensor(&b, 1, (int64_t[]){(int64_t)(~0ull >> 1) + 0}, 0, 0, 16);
    expect(&b, TERN_E_FORMAT, "'w'", "overflows");
    gb_begin(&b, 3);
    gb_tensor(&b, "w", 1, (int64_t[]){0}, 0, 0);
    b.s.len -= 8 + 4 + 8; /* rewrite the dim as 2^64 - 1 */
    gb_u64(&b, ~0ull), gb_u32(&b, 0), gb_u64(&b, 0);
    expect(&b, TERN_E_FORMAT, "'w'", "over 2^63");
    one_tensor(&b, 1, (int64_t[]){33}, 2, 0, 64); /* Q4_0 rows of 33 */
    expect(&b, TERN_E_FORMAT, "'w'", "rows of 33");
    one_tensor(&b, 1, (int64_t[]){4}, 0, 8, 64);
    expect(&b, TERN_E_FORMAT, "'w'", "not a multiple of the alignment 32");
    one_tensor(&b, 1, (int64_t[]){4}, 0, 32, 40);
    expect(&b, TERN_E_FORMAT, "'w'", "past the end of the data section (40 bytes)");
    one_tensor(&b, 1, (int64_t[]){4}, 0, 0xffffffffffffffe0ull, 40);
    expect(&b, TERN_E_FORMAT, "'w'", "past the end");
    gb_begin(&b, 3);
    gb_tensor(&b, "w", 1, (int64_t[]){4}, 0, 0);
    gb_tensor(&b, "w", 1, (int64_t[]){4}, 0, 32);
    gb_align(&b, 32);
    for (int i = 0; i < 64; i++) gb_u8(&b, 0);
    expect(&b, TERN_E_FORMAT, "tensor 'w' appears twice", NULL);
    gb_begin(&b, 3);
    gb_tensor(&b, "w1", 1, (int64_t[]){16}, 0, 0);
    gb_tensor(&b, "w2", 1, (int64_t[]){4}, 0, 32);
    gb_align(&b, 32);
    for (int i = 0; i < 64; i++) gb_u8(&b, 0);
    expect(&b, TERN_E_FORMAT, "'w2'", "overlaps tensor 'w1'");
    gb_begin(&b, 3);
    gb_tensor(&b, "", 1, (int64_t[]){4}, 0, 0);
    expect(&b, TERN_E_FORMAT, "tensor 0", "empty");
    gb_begin(&b, 3); /* an empty tensor needs no bytes, even past the end */
    gb_tensor(&b, "e", 2, (int64_t[]){0, 7}, 12, 0);
    expect(&b, TERN_OK, NULL, NULL);
}

/* A name with a control character stays on one line in the message. */
static void test_message_one_line(void **state)
{
    (void)state;
    struct gb b;
    gb_begin(&b, 3);
    gb_tensor(&b, "bad\nname", 1, (int64_t[]){4}, 1000, 0);
    expect(&b, TERN_E_UNSUPPORTED, "bad?name", NULL);
}

/* Files written by others: llama.cpp's vocab-only llama-spm.gguf, gguf-py's
 * writer (the fuzz seeds and the quant fixture), and SmolLM2 when present. */
static void test_real_files(void **state)
{
    (void)state;
    struct tern_gguf *g = NULL;
    char *spm = tu_data_file("peer-tests/tokenizer-cases/llama-spm.gguf");
    tu_ok(tern_gguf_open(spm, &g));
    tern_free(spm);
    const char *s;
    int64_t i;
    double f;
    size_t sl;
    tu_ok(tern_gguf_get_str(g, "general.architecture", &s, NULL)), assert_string_equal(s, "llama");
    tu_ok(tern_gguf_get_str(g, "tokenizer.ggml.model", &s, NULL)), assert_string_equal(s, "llama");
    tu_ok(tern_gguf_get_int(g, "llama.context_length", &i)), assert_int_equal(i, 4096);
    tu_ok(tern_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &f));
    assert_true(f == (double)1e-5f);
    const struct tern_gguf_value *toks, *scores, *types;
    tu_ok(tern_gguf_get_arr(g, "tokenizer.ggml.tokens", STR, &toks));
    tu_ok(tern_gguf_get_arr(g, "tokenizer.ggml.scores", F32, &scores));
    tu_ok(tern_gguf_get_arr(g, "tokenizer.ggml.token_type", I32, &types));
    assert_int_equal(toks->n, 32000), assert_int_equal(scores->n, 32000);
    s = tern_gguf_arr_str(toks, 29871, &sl);
    assert_int_equal(sl, 3), assert_memory_equal(s, "\xe2\x96\x81", 3);
    s = tern_gguf_arr_str(toks, 1, &sl);
    assert_int_equal(sl, 3), assert_memory_equal(s, "<s>", 3);
    assert_true(tern_gguf_arr_float(scores, 260) == -1.0);
    assert_int_equal(tern_gguf_arr_int(types, 1), 3),
        assert_int_equal(tern_gguf_arr_int(types, 3), 6);
    assert_int_equal(tern_gguf_n_tensors(g), 0);
    tern_gguf_close(g);

    static const char *const seeds[] = {"valid_meta",    "valid_align64", "valid_vocab",
                                        "bad_truncated", "bad_v1",        "bad_count"};
    for (int k = 0; k < 6; k++) {
        char rel[64];
        snprintf(rel, sizeof rel, "../fuzz/corpus/gguf/%s.gguf", seeds[k]);
        char *path = tu_fixture(rel);
        enum tern_status st = tern_gguf_open(path, &g);
        if ((st == TERN_OK) != (k < 3)) fail_msg("%s: %s", path, tern_last_error());
        if (k == 1) assert_int_equal(tern_gguf_alignment(g), 64);
        if (k == 0) {
            const struct tern_gguf_value *n;
            tu_ok(tern_gguf_get_arr(g, "t.nested", ARR, &n));
            assert_int_equal(n->n, 3);
            assert_int_equal(tern_gguf_arr_arr(tern_gguf_arr_arr(n, 2), 0)->elem_type, F32);
            tu_ok(tern_gguf_get_str(g, "t.s", &s, NULL)), assert_string_equal(s, "h\xc3\xa9llo");
        }
        tern_gguf_close(g);
        tern_free(path);
    }

    char *path = tu_smollm2_gguf();
    if (!path) return;
    tu_ok(tern_gguf_open(path, &g));
    assert_int_equal(tern_gguf_version(g), 3);
    assert_int_equal(tern_gguf_n_kv(g), 33), assert_int_equal(tern_gguf_n_tensors(g), 272);
    const struct tern_gguf_tensor *t = tern_gguf_find_tensor(g, "token_embd.weight");
    assert_int_equal(t->type, TERN_GGML_Q8_0);
    assert_int_equal(t->ne[0], 576), assert_int_equal(t->ne[1], 49152);
    assert_int_equal(tern_gguf_data_offset(g) + t->offset, 1785664); /* as gguf-py reads it */
    t = tern_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    assert_int_equal(t->type, TERN_GGML_Q4_1), assert_int_equal(t->ne[0], 1536);
    assert_int_equal(tern_gguf_data_offset(g) + t->offset, 31868992);
    tu_ok(tern_gguf_get_str(g, "tokenizer.chat_template", &s, NULL));
    assert_non_null(strstr(s, "<|im_start|>"));
    tern_gguf_close(g);
    tern_free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),   cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_header),      cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_bad_tensors), cmocka_unit_test(test_message_one_line),
        cmocka_unit_test(test_real_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
