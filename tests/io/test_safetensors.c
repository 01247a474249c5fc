/*
 * test_safetensors.c — safetensors files: a round trip of several dtypes and
 * one test per class of malformed input, each checking the status and that
 * the message names the file and the culprit.
 */
#include "st_build.h"
#include "io/safetensors.h"

#include <stdio.h>
#include <string.h>

/* Opens a file built from header + data; returns the status. */
static enum tern_status open_built(const char *name, const char *header, const void *data,
                                   size_t data_len)
{
    char *path = stb_write(name, header, data, data_len);
    struct tern_st_file *f = (struct tern_st_file *)1;
    enum tern_status st = tern_st_file_open(path, &f);
    assert_null(f);
    stb_remove(path);
    return st;
}

static void test_roundtrip(void **state)
{
    /* data section: a f32[2,3] | b bf16[4] | c u32[2,2] | d i64[] | e u8[0] | f i8[3] | g f16[1] */
    uint8_t data[24 + 8 + 16 + 8 + 3 + 2];
    float a[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-7f, -65504.0f};
    uint16_t b[4] = {0x3f80, 0xc000, 0x7f80, 0x0001};
    uint32_t c[4] = {0, 1, 0xdeadbeefu, 0xffffffffu};
    int64_t d = -1234567890123ll;
    int8_t fv[3] = {-128, 0, 127};
    uint16_t g = 0x3c00;
    memcpy(data, a, 24);
    memcpy(data + 24, b, 8);
    memcpy(data + 32, c, 16);
    memcpy(data + 48, &d, 8);
    memcpy(data + 56, fv, 3);
    memcpy(data + 59, &g, 2);
    const char *hdr =
        "{\"__metadata__\": {\"format\": \"pt\"},"
        " \"f\": {\"dtype\": \"I8\", \"shape\": [3], \"data_offsets\": [56, 59]},"
        " \"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]},"
        " \"c\": {\"dtype\": \"U32\", \"shape\": [2, 2], \"data_offsets\": [32, 48]},"
        " \"b\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [24, 32]},"
        " \"e\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [56, 56]},"
        " \"d\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [48, 56]},"
        " \"g\": {\"dtype\": \"F16\", \"shape\": [1, 1, 1, 1], \"data_offsets\": [59, 61]}}   ";
    char *path = stb_write("rt.safetensors", hdr, data, sizeof data);
    struct tern_st_file *f = NULL;
    assert_int_equal(tern_st_file_open(path, &f), TERN_OK);
    assert_string_equal(tern_st_file_path(f), path);
    const struct tern_st_header *h = tern_st_file_header(f);
    assert_int_equal(h->n_entries, 7);
    const char *names = "abcdefg";
    for (size_t i = 0; i < 7; i++) assert_int_equal(h->entries[i].name[0], names[i]);

    struct tern_tensor_view v;
    tern_st_file_view(f, 0, &v);
    assert_string_equal(v.name, "a");
    assert_int_equal(v.dtype, TERN_DTYPE_F32);
    assert_int_equal(v.n_dims, 2);
    assert_int_equal(v.shape[0], 2);
    assert_int_equal(v.shape[1], 3);
    assert_int_equal(v.n_bytes, 24);
    float a2[6];
    memcpy(a2, v.data, 24);
    assert_memory_equal(a2, a, 24);
    float af[6];
    tern_to_f32(v.dtype, v.data, af, 6);
    assert_memory_equal(af, a, 24);

    tern_st_file_view(f, 1, &v);
    assert_int_equal(v.dtype, TERN_DTYPE_BF16);
    assert_memory_equal(v.data, b, 8);
    /* views may be unaligned (the format promises nothing): copy before typed reads */
    uint16_t b2[4];
    memcpy(b2, v.data, 8);
    float bf[4];
    tern_to_f32(v.dtype, b2, bf, 4);
    assert_true(bf[0] == 1.0f && bf[1] == -2.0f);

    tern_st_file_view(f, 2, &v);
    assert_int_equal(v.dtype, TERN_DTYPE_U32);
    assert_memory_equal(v.data, c, 16);

    tern_st_file_view(f, 3, &v);
    assert_int_equal(v.dtype, TERN_DTYPE_I64);
    assert_int_equal(v.n_dims, 0);
    int64_t d2;
    memcpy(&d2, v.data, 8);
    assert_int_equal(d2, d);

    tern_st_file_view(f, 4, &v);
    assert_int_equal(v.dtype, TERN_DTYPE_U8);
    assert_int_equal(v.n_dims, 1);
    assert_int_equal(v.shape[0], 0);
    assert_int_equal(v.n_bytes, 0);

    tern_st_file_view(f, 5, &v);
    assert_int_equal(v.dtype, TERN_DTYPE_I8);
    assert_memory_equal(v.data, fv, 3);

    tern_st_file_view(f, 6, &v);
    assert_int_equal(v.dtype, TERN_DTYPE_F16);
    assert_int_equal(v.n_dims, 4);
    uint16_t g2;
    memcpy(&g2, v.data, 2);
    float gf;
    tern_to_f32(v.dtype, &g2, &gf, 1);
    assert_true(gf == 1.0f);

    assert_non_null(tern_st_header_find(h, "e"));
    assert_null(tern_st_header_find(h, "z"));
    tern_st_file_close(f);
    tern_st_file_close(NULL);
    stb_remove(path);
}

static void test_truncated(void **state)
{
    char *path = tu_write_temp("short.safetensors", "\x10\0\0", 3);
    struct tern_st_file *f;
    stb_expect(tern_st_file_open(path, &f), TERN_E_FORMAT, path, "3 bytes", "8-byte header length",
               NULL);
    stb_remove(path);
    path = tu_write_temp("empty.safetensors", "", 0);
    stb_expect(tern_st_file_open(path, &f), TERN_E_FORMAT, path, "0 bytes", NULL);
    stb_remove(path);
}

static void test_header_past_eof(void **state)
{
    uint8_t img[8 + 10] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    char *path = tu_write_temp("past.safetensors", img, sizeof img);
    struct tern_st_file *f;
    stb_expect(tern_st_file_open(path, &f), TERN_E_FORMAT, path, "header length 100",
               "past the end of the file (18 bytes)", NULL);
    stb_remove(path);
    /* absurd: 2^63 and just over 100 MB */
    uint8_t big[16] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
    path = tu_write_temp("huge.safetensors", big, sizeof big);
    stb_expect(tern_st_file_open(path, &f), TERN_E_FORMAT, path,
               "header length 9223372036854775808", "exceeds the limit", NULL);
    stb_remove(path);
    uint8_t over[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100000001 */
    path = tu_write_temp("over.safetensors", over, sizeof over);
    stb_expect(tern_st_file_open(path, &f), TERN_E_FORMAT, path, "header length 100000001", NULL);
    stb_remove(path);
}

static void test_header_not_json(void **state)
{
    stb_expect(open_built("nj.safetensors", "{\"w\": {\"dtype\": ", NULL, 0), TERN_E_FORMAT,
               "nj.safetensors", "not valid JSON at line 1", NULL);
    stb_expect(open_built("arr.safetensors", "[1, 2]", NULL, 0), TERN_E_FORMAT, "arr.safetensors",
               "must be a JSON object, got array", NULL);
    stb_expect(open_built("ent.safetensors", "{\"w\": 3}", NULL, 0), TERN_E_FORMAT,
               "ent.safetensors", "tensor 'w' must be an object, got integer", NULL);
    /* a NUL byte inside the header */
    uint8_t img[8 + 4] = {4, 0, 0, 0, 0, 0, 0, 0, '{', 0, '}', ' '};
    char *path = tu_write_temp("nul.safetensors", img, sizeof img);
    struct tern_st_file *f;
    stb_expect(tern_st_file_open(path, &f), TERN_E_FORMAT, path, "not valid JSON", NULL);
    stb_remove(path);
}

static void test_entry_missing_fields(void **state)
{
    stb_expect(open_built("m.safetensors",
                          "{\"w.weight\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", "abcd", 4),
               TERN_E_FORMAT, "m.safetensors: tensor 'w.weight' has no 'dtype'", NULL);
    stb_expect(open_built("m.safetensors",
                          "{\"w.weight\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", "abcd",
                          4),
               TERN_E_FORMAT, "m.safetensors: tensor 'w.weight' has no 'shape'", NULL);
    stb_expect(open_built("m.safetensors", "{\"w.weight\": {\"dtype\": \"F32\", \"shape\": [1]}}",
                          "abcd", 4),
               TERN_E_FORMAT, "m.safetensors: tensor 'w.weight' has no 'data_offsets'", NULL);
    stb_expect(
        open_built("m.safetensors",
                   "{\"w\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 4]}}", "abcd", 4),
        TERN_E_FORMAT, "m.safetensors", "'w'", "'dtype' must be a string, got integer", NULL);
    stb_expect(open_built("m.safetensors",
                          "{\"w\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}",
                          "abcd", 4),
               TERN_E_FORMAT, "m.safetensors", "'w'", "'shape' must be an array", NULL);
    stb_expect(open_built("m.safetensors",
                          "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}",
                          "abcd", 4),
               TERN_E_FORMAT, "m.safetensors", "'w'", "'data_offsets' must be [begin, end]", NULL);
    stb_expect(open_built("m.safetensors",
                          "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, "
                          "4.0]}}",
                          "abcd", 4),
               TERN_E_FORMAT, "m.safetensors", "'w'", "'data_offsets'", NULL);
}

static void test_unknown_dtype(void **state)
{
    char *path = stb_write(
        "dt.safetensors", "{\"w\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}",
        "abcdefgh", 8);
    struct tern_st_file *f;
    enum tern_status st = tern_st_file_open(path, &f);
    char want[512];
    snprintf(want, sizeof want, "%s: tensor 'w' has unsupported dtype 'F64'", path);
    stb_expect(st, TERN_E_UNSUPPORTED, NULL);
    assert_string_equal(tern_last_error(), want);
    stb_remove(path);
    const char *others[] = {"F8_E4M3", "BOOL", "f32", ""};
    for (size_t i = 0; i < 4; i++) {
        char hdr[256];
        snprintf(hdr, sizeof hdr,
                 "{\"t\": {\"dtype\": \"%s\", \"shape\": [1], \"data_offsets\": [0, 1]}}",
                 others[i]);
        stb_expect(open_built("dt2.safetensors", hdr, "a", 1), TERN_E_UNSUPPORTED,
                   "dt2.safetensors", "tensor 't'", "unsupported dtype", NULL);
    }
}

static void test_shape_size_mismatch(void **state)
{
    uint8_t data[16] = {0};
    stb_expect(open_built("sz.safetensors",
                          "{\"q\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, "
                          "10]}}",
                          data, 16),
               TERN_E_FORMAT, "sz.safetensors",
               "tensor 'q' has dtype BF16 and shape [2, 3] (12 bytes) but data_offsets [0, 10] "
               "span 10 bytes",
               NULL);
    stb_expect(open_built("neg.safetensors",
                          "{\"q\": {\"dtype\": \"U8\", \"shape\": [-1], \"data_offsets\": [0, 1]}}",
                          data, 16),
               TERN_E_FORMAT, "neg.safetensors", "'q'", "shape[0] must be a non-negative", NULL);
    stb_expect(open_built("r5.safetensors",
                          "{\"q\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1], \"data_offsets\": "
                          "[0, 1]}}",
                          data, 16),
               TERN_E_UNSUPPORTED, "r5.safetensors", "'q'", "rank 5", NULL);
    stb_expect(open_built("fl.safetensors",
                          "{\"q\": {\"dtype\": \"U8\", \"shape\": [1.0], \"data_offsets\": [0, "
                          "1]}}",
                          data, 16),
               TERN_E_FORMAT, "fl.safetensors", "'q'", "got real", NULL);
    /* numel * size overflows 64 bits: must not wrap to a small number */
    stb_expect(open_built("ovf.safetensors",
                          "{\"q\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296], "
                          "\"data_offsets\": [0, 0]}}",
                          data, 16),
               TERN_E_FORMAT, "ovf.safetensors", "'q'", "overflows", NULL);
    /* a zero dimension after huge ones: numel 0, no overflow */
    struct tern_st_header h;
    const char *z = "{\"q\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296, "
                    "0], \"data_offsets\": [0, 0]}}";
    assert_int_equal(tern_st_header_parse(z, strlen(z), 0, "z", &h), TERN_OK);
    assert_int_equal(h.n_entries, 1);
    tern_st_header_deinit(&h);
}

static void test_offsets_out_of_range(void **state)
{
    uint8_t data[8] = {0};
    stb_expect(open_built("oor.safetensors",
                          "{\"k\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, "
                          "12]}}",
                          data, 8),
               TERN_E_FORMAT, "oor.safetensors",
               "tensor 'k' has data_offsets [4, 12] past the end of the data section (8 bytes)",
               NULL);
    stb_expect(open_built("rev.safetensors",
                          "{\"k\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}",
                          data, 8),
               TERN_E_FORMAT, "rev.safetensors", "tensor 'k'", "begin > end", NULL);
    stb_expect(open_built("negoff.safetensors",
                          "{\"k\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, "
                          "0]}}",
                          data, 8),
               TERN_E_FORMAT, "negoff.safetensors", "tensor 'k'", "non-negative", NULL);
}

static void test_overlap(void **state)
{
    uint8_t data[16] = {0};
    stb_expect(open_built("ov.safetensors",
                          "{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                          " \"y\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]},"
                          " \"z\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [12, "
                          "16]}}",
                          data, 16),
               TERN_E_FORMAT, "ov.safetensors",
               "tensor 'y' (data_offsets [4, 12]) overlaps tensor 'x' (data_offsets [0, 8])", NULL);
    /* the same range twice */
    stb_expect(open_built("ov2.safetensors",
                          "{\"x\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]},"
                          " \"y\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}}",
                          data, 16),
               TERN_E_FORMAT, "ov2.safetensors", "overlaps", NULL);
    /* empty tensors at the same offset as others occupy no bytes: fine */
    const char *ok = "{\"x\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]},"
                     " \"e\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [2, 2]}}";
    struct tern_st_header h;
    assert_int_equal(tern_st_header_parse(ok, strlen(ok), 4, "ok", &h), TERN_OK);
    tern_st_header_deinit(&h);
}

static void test_bad_names(void **state)
{
    uint8_t data[8] = {0};
    stb_expect(open_built("dup.safetensors",
                          "{\"dupname\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, "
                          "1]},"
                          " \"dupname\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, "
                          "2]}}",
                          data, 8),
               TERN_E_FORMAT, "dup.safetensors", "dupname", "twice", NULL);
    stb_expect(open_built("empty.safetensors",
                          "{\"\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}",
                          data, 8),
               TERN_E_FORMAT, "empty.safetensors", "empty name ''", NULL);
    /* a newline inside a name cannot split the message */
    stb_expect(open_built("nl.safetensors",
                          "{\"a\\nb\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, "
                          "8]}}",
                          data, 8),
               TERN_E_UNSUPPORTED, "nl.safetensors", "'a?b'", NULL);
}

static void test_metadata(void **state)
{
    stb_expect(open_built("md.safetensors", "{\"__metadata__\": {\"format\": 1}}", NULL, 0),
               TERN_E_FORMAT, "md.safetensors", "'__metadata__' key 'format' must be a string",
               NULL);
    stb_expect(open_built("md2.safetensors", "{\"__metadata__\": []}", NULL, 0), TERN_E_FORMAT,
               "md2.safetensors", "'__metadata__' must be an object", NULL);
    /* only metadata: a valid file with no tensors */
    char *path = stb_write("md3.safetensors", "{\"__metadata__\": {}}", NULL, 0);
    struct tern_st_file *f;
    assert_int_equal(tern_st_file_open(path, &f), TERN_OK);
    assert_int_equal(tern_st_file_header(f)->n_entries, 0);
    tern_st_file_close(f);
    stb_remove(path);
}

static void test_not_a_file(void **state)
{
    struct tern_st_file *f;
    stb_expect(tern_st_file_open("/nonexistent/dir/x.safetensors", &f), TERN_E_NOT_FOUND,
               "/nonexistent/dir/x.safetensors", "cannot open", NULL);
    char *dir = tu_temp_dir("stdir");
    stb_expect(tern_st_file_open(dir, &f), TERN_E_IO, dir, "not a regular file", NULL);
    stb_remove_dir(dir);
}

static void test_image_parse(void **state)
{
    size_t len, start;
    uint8_t *img = stb_image("{\"w\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                             "\x01\x02\x03\x04", 4, &len);
    struct tern_st_header h;
    assert_int_equal(tern_st_image_parse(img, len, "mem", &h, &start), TERN_OK);
    assert_int_equal(start, len - 4);
    struct tern_tensor_view v;
    tern_st_entry_view(&h.entries[0], img + start, &v);
    int32_t x;
    memcpy(&x, v.data, 4);
    assert_int_equal(x, 0x04030201);
    tern_st_header_deinit(&h);
    stb_expect(tern_st_image_parse(img, 5, "mem", &h, &start), TERN_E_FORMAT, "mem", NULL);
    tern_free(img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_header_past_eof),
        cmocka_unit_test(test_header_not_json),
        cmocka_unit_test(test_entry_missing_fields),
        cmocka_unit_test(test_unknown_dtype),
        cmocka_unit_test(test_shape_size_mismatch),
        cmocka_unit_test(test_offsets_out_of_range),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_bad_names),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_not_a_file),
        cmocka_unit_test(test_image_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
