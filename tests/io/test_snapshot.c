/*
 * test_snapshot.c — snapshot directories: a single model.safetensors, a
 * sharded snapshot with its index, unused-tensor reporting, and the errors
 * of an index that disagrees with its shards.
 */
#include "st_build.h"
#include "io/safetensors.h"

#include <stdio.h>
#include <string.h>

/* Shard 1 holds a [2] f32 and b [1] i32; shard 2 holds c [3] u8. */
static const char *SHARD1_HDR =
    "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
    " \"b\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [8, 12]}}";
static const char *SHARD2_HDR =
    "{\"c\": {\"dtype\": \"U8\", \"shape\": [3], \"data_offsets\": [0, 3]}}";
static const float A_VALS[2] = {0.5f, -7.0f};
static const int32_t B_VAL = -42;
static const uint8_t C_VALS[3] = {1, 2, 255};

static char *make_sharded(const char *index_json)
{
    char *dir = tu_temp_dir("snap");
    uint8_t d1[12];
    memcpy(d1, A_VALS, 8);
    memcpy(d1 + 8, &B_VAL, 4);
    stb_write_st_in(dir, "model-00001-of-00002.safetensors", SHARD1_HDR, d1, sizeof d1);
    stb_write_st_in(dir, "model-00002-of-00002.safetensors", SHARD2_HDR, C_VALS, 3);
    stb_write_in(dir, "model.safetensors.index.json", index_json, strlen(index_json));
    return dir;
}

static const char *GOOD_INDEX = "{\"metadata\": {\"total_size\": 15}, \"weight_map\": {"
                                "\"c\": \"model-00002-of-00002.safetensors\","
                                "\"a\": \"model-00001-of-00002.safetensors\","
                                "\"b\": \"model-00001-of-00002.safetensors\"}}";

static void test_single_file(void **state)
{
    char *dir = tu_temp_dir("snap1");
    uint8_t d1[12];
    memcpy(d1, A_VALS, 8);
    memcpy(d1 + 8, &B_VAL, 4);
    stb_write_st_in(dir, "model.safetensors", SHARD1_HDR, d1, sizeof d1);
    struct tern_snapshot *s = NULL;
    assert_int_equal(tern_snapshot_open(dir, &s), TERN_OK);
    assert_string_equal(tern_snapshot_dir(s), dir);
    assert_int_equal(tern_snapshot_n_tensors(s), 2);
    assert_true(tern_snapshot_has(s, "a"));
    assert_false(tern_snapshot_has(s, "zz"));

    struct tern_tensor_view v;
    tern_snapshot_tensor_at(s, 1, &v);
    assert_string_equal(v.name, "b");
    size_t n;
    const char **unused = tern_snapshot_unused(s, &n);
    assert_int_equal(n, 2); /* has() and tensor_at() do not mark */
    tern_free(unused);

    assert_int_equal(tern_snapshot_get(s, "b", &v), TERN_OK);
    int32_t b;
    memcpy(&b, v.data, 4);
    assert_int_equal(b, B_VAL);
    unused = tern_snapshot_unused(s, &n);
    assert_int_equal(n, 1);
    assert_string_equal(unused[0], "a");
    assert_null(unused[1]);
    tern_free(unused);

    stb_expect(tern_snapshot_get(s, "model.norm.weight", &v), TERN_E_NOT_FOUND, dir,
               "tensor 'model.norm.weight' not found", NULL);
    tern_snapshot_close(s);
    tern_snapshot_close(NULL);
    stb_remove_dir(dir);
}

static void test_sharded(void **state)
{
    char *dir = make_sharded(GOOD_INDEX);
    struct tern_snapshot *s = NULL;
    assert_int_equal(tern_snapshot_open(dir, &s), TERN_OK);
    assert_int_equal(tern_snapshot_n_tensors(s), 3);
    struct tern_tensor_view v;
    for (size_t i = 0; i < 3; i++) {
        tern_snapshot_tensor_at(s, i, &v);
        assert_int_equal(v.name[0], "abc"[i]);
    }
    assert_int_equal(tern_snapshot_get(s, "c", &v), TERN_OK);
    assert_int_equal(v.dtype, TERN_DTYPE_U8);
    assert_int_equal(v.shape[0], 3);
    assert_memory_equal(v.data, C_VALS, 3);
    assert_int_equal(tern_snapshot_get(s, "a", &v), TERN_OK);
    float a[2];
    memcpy(a, v.data, 8);
    assert_memory_equal(a, A_VALS, 8);

    size_t n;
    const char **unused = tern_snapshot_unused(s, &n);
    assert_int_equal(n, 1);
    assert_string_equal(unused[0], "b");
    tern_free(unused);
    assert_int_equal(tern_snapshot_get(s, "b", &v), TERN_OK);
    unused = tern_snapshot_unused(s, &n);
    assert_int_equal(n, 0);
    assert_null(unused[0]);
    tern_free(unused);
    tern_snapshot_close(s);
    stb_remove_dir(dir);
}

static void test_index_missing_shard(void **state)
{
    char *dir = make_sharded("{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
                             " \"d\": \"model-00003-of-00003.safetensors\"}}");
    struct tern_snapshot *s = (struct tern_snapshot *)1;
    stb_expect(tern_snapshot_open(dir, &s), TERN_E_NOT_FOUND, "model.safetensors.index.json",
               "shard 'model-00003-of-00003.safetensors'", "missing", NULL);
    assert_null(s);
    stb_remove_dir(dir);
}

static void test_index_tensor_absent(void **state)
{
    char *dir = make_sharded("{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
                             " \"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}");
    struct tern_snapshot *s;
    stb_expect(tern_snapshot_open(dir, &s), TERN_E_FORMAT, "model-00002-of-00002.safetensors",
               "tensor 'lm_head.weight'", "absent", NULL);
    stb_remove_dir(dir);
}

static void test_index_wrong_shard(void **state)
{
    /* c lives in shard 2 but the index puts it in shard 1 */
    char *dir = make_sharded("{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
                             " \"c\": \"model-00001-of-00002.safetensors\","
                             " \"x\": \"model-00002-of-00002.safetensors\"}}");
    struct tern_snapshot *s;
    stb_expect(tern_snapshot_open(dir, &s), TERN_E_FORMAT, "model-00002-of-00002.safetensors",
               "tensor 'c'", "assigns it to 'model-00001-of-00002.safetensors'", NULL);
    stb_remove_dir(dir);
}

static void test_index_unlisted_tensor_ignored(void **state)
{
    /* b is in shard 1 but not in the index: not exposed */
    char *dir = make_sharded("{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
                             " \"c\": \"model-00002-of-00002.safetensors\"}}");
    struct tern_snapshot *s;
    assert_int_equal(tern_snapshot_open(dir, &s), TERN_OK);
    assert_int_equal(tern_snapshot_n_tensors(s), 2);
    assert_false(tern_snapshot_has(s, "b"));
    tern_snapshot_close(s);
    stb_remove_dir(dir);
}

static void test_bad_index(void **state)
{
    struct tern_snapshot *s;
    char *dir = make_sharded("{\"weight_map\": [}");
    stb_expect(tern_snapshot_open(dir, &s), TERN_E_FORMAT, "model.safetensors.index.json",
               "invalid JSON at line 1", NULL);
    stb_remove_dir(dir);
    dir = make_sharded("{\"metadata\": {}}");
    stb_expect(tern_snapshot_open(dir, &s), TERN_E_FORMAT, "model.safetensors.index.json",
               "key 'weight_map' is missing", NULL);
    stb_remove_dir(dir);
    dir = make_sharded("{\"weight_map\": {\"a\": 3}}");
    stb_expect(tern_snapshot_open(dir, &s), TERN_E_FORMAT, "model.safetensors.index.json",
               "weight_map['a']", "got integer", NULL);
    stb_remove_dir(dir);
    dir = make_sharded("{\"weight_map\": {\"a\": \"../model-00001-of-00002.safetensors\"}}");
    stb_expect(tern_snapshot_open(dir, &s), TERN_E_FORMAT, "model.safetensors.index.json",
               "weight_map['a']", NULL);
    stb_remove_dir(dir);
    /* a malformed shard: the shard's own error, naming it */
    dir = make_sharded(GOOD_INDEX);
    stb_write_in(dir, "model-00002-of-00002.safetensors", "\x01\x00", 2);
    stb_expect(tern_snapshot_open(dir, &s), TERN_E_FORMAT, "model-00002-of-00002.safetensors",
               "too short", NULL);
    stb_remove_dir(dir);
}

static void test_no_weights(void **state)
{
    char *dir = tu_temp_dir("snapempty");
    struct tern_snapshot *s;
    stb_expect(tern_snapshot_open(dir, &s), TERN_E_NOT_FOUND, dir, "no model.safetensors", NULL);
    stb_remove_dir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_file),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_index_missing_shard),
        cmocka_unit_test(test_index_tensor_absent),
        cmocka_unit_test(test_index_wrong_shard),
        cmocka_unit_test(test_index_unlisted_tensor_ignored),
        cmocka_unit_test(test_bad_index),
        cmocka_unit_test(test_no_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
