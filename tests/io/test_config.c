/*
 * test_config.c — JSON documents and the typed config getters: values read
 * back, and errors that name the file and the key.
 */
#include "st_build.h"
#include "io/config.h"

#include <string.h>

static const char *CFG =
    "{\n"
    "  \"hidden_size\": 4096,\n"
    "  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_theta\": 1000000,\n"
    "  \"max_position_embeddings\": 32768.0,\n"
    "  \"model_type\": \"llama\",\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"sliding_window\": null,\n"
    "  \"bad_int\": 1.5,\n"
    "  \"name\": \"x\",\n"
    "  \"rope_scaling\": {\"factor\": 8, \"rope_type\": \"llama3\", \"orig\": 8192, \"bad\": "
    "\"s\"},\n"
    "  \"list\": [1, 2]\n"
    "}\n";

static void parse(struct tern_json_doc *d)
{
    assert_int_equal(tern_json_doc_parse(CFG, strlen(CFG), "config.json", d), TERN_OK);
}

static void test_values(void **state)
{
    struct tern_json_doc d;
    parse(&d);
    int64_t i;
    double f;
    const char *s;
    bool b;
    assert_int_equal(tern_cfg_int(&d, "hidden_size", &i), TERN_OK);
    assert_int_equal(i, 4096);
    assert_int_equal(tern_cfg_int(&d, "max_position_embeddings", &i), TERN_OK);
    assert_int_equal(i, 32768);
    assert_int_equal(tern_cfg_float(&d, "rms_norm_eps", &f), TERN_OK);
    assert_true(f == 1e-06);
    assert_int_equal(tern_cfg_float(&d, "rope_theta", &f), TERN_OK); /* JSON integer */
    assert_true(f == 1000000.0);
    assert_int_equal(tern_cfg_string(&d, "model_type", &s), TERN_OK);
    assert_string_equal(s, "llama");
    assert_int_equal(tern_cfg_bool_opt(&d, "tie_word_embeddings", true, &b), TERN_OK);
    assert_false(b);
    assert_int_equal(tern_cfg_bool_opt(&d, "absent", true, &b), TERN_OK);
    assert_true(b);
    assert_int_equal(tern_cfg_int_opt(&d, "sliding_window", -1, &i), TERN_OK); /* null */
    assert_int_equal(i, -1);
    assert_int_equal(tern_cfg_int_opt(&d, "hidden_size", -1, &i), TERN_OK);
    assert_int_equal(i, 4096);
    assert_int_equal(tern_cfg_float_opt(&d, "absent", 0.25, &f), TERN_OK);
    assert_true(f == 0.25);
    assert_int_equal(tern_cfg_string_opt(&d, "absent", "silu", &s), TERN_OK);
    assert_string_equal(s, "silu");

    const json_t *rs = json_object_get(d.root, "rope_scaling");
    assert_int_equal(tern_cfg_obj_float_opt(&d, rs, "rope_scaling", "factor", 1.0, &f), TERN_OK);
    assert_true(f == 8.0);
    assert_int_equal(tern_cfg_obj_string_opt(&d, rs, "rope_scaling", "rope_type", NULL, &s),
                     TERN_OK);
    assert_string_equal(s, "llama3");
    assert_int_equal(tern_cfg_obj_int_opt(&d, rs, "rope_scaling", "orig", 0, &i), TERN_OK);
    assert_int_equal(i, 8192);
    assert_int_equal(tern_cfg_obj_int_opt(&d, rs, "rope_scaling", "absent", 7, &i), TERN_OK);
    assert_int_equal(i, 7);
    /* an absent or null sub-object gives defaults */
    assert_int_equal(tern_cfg_obj_float_opt(&d, NULL, "rope_scaling", "factor", 1.5, &f), TERN_OK);
    assert_true(f == 1.5);
    assert_int_equal(tern_cfg_obj_float_opt(&d, json_object_get(d.root, "sliding_window"),
                                            "sliding_window", "factor", 2.5, &f),
                     TERN_OK);
    assert_true(f == 2.5);
    tern_json_doc_deinit(&d);
    tern_json_doc_deinit(&d); /* idempotent */
}

static void test_missing_keys(void **state)
{
    struct tern_json_doc d;
    parse(&d);
    int64_t i;
    double f;
    const char *s;
    assert_int_equal(tern_cfg_int(&d, "num_attention_heads", &i), TERN_E_NOT_FOUND);
    assert_string_equal(tern_last_error(), "config.json: key 'num_attention_heads' is missing");
    stb_expect(tern_cfg_float(&d, "norm_eps", &f), TERN_E_NOT_FOUND, "config.json",
               "'norm_eps' is missing", NULL);
    stb_expect(tern_cfg_string(&d, "arch", &s), TERN_E_NOT_FOUND, "config.json",
               "'arch' is missing", NULL);
    tern_json_doc_deinit(&d);
}

static void test_mistyped_keys(void **state)
{
    struct tern_json_doc d;
    parse(&d);
    int64_t i = 99;
    double f;
    const char *s;
    bool b;
    assert_int_equal(tern_cfg_int(&d, "model_type", &i), TERN_E_FORMAT);
    assert_string_equal(tern_last_error(),
                        "config.json: key 'model_type' must be an integer, got string");
    assert_int_equal(i, 99);
    stb_expect(tern_cfg_int(&d, "bad_int", &i), TERN_E_FORMAT, "config.json",
               "key 'bad_int' must be an integer, got 1.5", NULL);
    stb_expect(tern_cfg_int(&d, "sliding_window", &i), TERN_E_FORMAT, "config.json",
               "key 'sliding_window' must be an integer, got null", NULL);
    stb_expect(tern_cfg_int_opt(&d, "list", 0, &i), TERN_E_FORMAT, "config.json",
               "key 'list' must be an integer, got array", NULL);
    stb_expect(tern_cfg_float(&d, "model_type", &f), TERN_E_FORMAT, "config.json",
               "key 'model_type' must be a number, got string", NULL);
    stb_expect(tern_cfg_float_opt(&d, "tie_word_embeddings", 0, &f), TERN_E_FORMAT, "config.json",
               "key 'tie_word_embeddings' must be a number, got false", NULL);
    stb_expect(tern_cfg_string(&d, "hidden_size", &s), TERN_E_FORMAT, "config.json",
               "key 'hidden_size' must be a string, got 4096", NULL);
    stb_expect(tern_cfg_string_opt(&d, "rope_scaling", NULL, &s), TERN_E_FORMAT, "config.json",
               "key 'rope_scaling' must be a string, got object", NULL);
    stb_expect(tern_cfg_bool_opt(&d, "name", false, &b), TERN_E_FORMAT, "config.json",
               "key 'name' must be a boolean, got string", NULL);
    const json_t *rs = json_object_get(d.root, "rope_scaling");
    stb_expect(tern_cfg_obj_float_opt(&d, rs, "rope_scaling", "bad", 0, &f), TERN_E_FORMAT,
               "config.json", "key 'rope_scaling.bad' must be a number, got string", NULL);
    stb_expect(tern_cfg_obj_int_opt(&d, rs, "rope_scaling", "rope_type", 0, &i), TERN_E_FORMAT,
               "config.json", "key 'rope_scaling.rope_type' must be an integer", NULL);
    stb_expect(tern_cfg_obj_string_opt(&d, json_object_get(d.root, "list"), "list", "x", NULL, &s),
               TERN_E_FORMAT, "config.json", "key 'list' must be an object, got array", NULL);
    tern_json_doc_deinit(&d);
}

static void test_bad_json(void **state)
{
    struct tern_json_doc d;
    const char *bad = "{\n  \"a\": 1,\n  \"b\": }\n";
    stb_expect(tern_json_doc_parse(bad, strlen(bad), "config.json", &d), TERN_E_FORMAT,
               "config.json: invalid JSON at line 3 column", NULL);
    assert_null(d.root);
    stb_expect(tern_json_doc_parse("[1]", 3, "config.json", &d), TERN_E_FORMAT,
               "config.json: top level must be a JSON object, got array", NULL);
    stb_expect(tern_json_doc_parse("", 0, "gen.json", &d), TERN_E_FORMAT,
               "gen.json: invalid JSON at line", NULL);
}

static void test_load_file(void **state)
{
    char *path = tu_write_temp("config.json", CFG, strlen(CFG));
    struct tern_json_doc d;
    assert_int_equal(tern_json_doc_load(path, &d), TERN_OK);
    assert_string_equal(d.path, path);
    int64_t i;
    stb_expect(tern_cfg_int(&d, "vocab_size", &i), TERN_E_NOT_FOUND, path, "'vocab_size'", NULL);
    tern_json_doc_deinit(&d);
    stb_remove(path);
    path = tu_write_temp("config.json", "{\"a\": [1,", 9);
    stb_expect(tern_json_doc_load(path, &d), TERN_E_FORMAT, path, "invalid JSON", NULL);
    stb_remove(path);
    stb_expect(tern_json_doc_load("/nonexistent/config.json", &d), TERN_E_IO,
               "/nonexistent/config.json", NULL);
}

static void test_huge_integer(void **state)
{
    /* tokenizer_config.json files carry model_max_length = int(1e30) */
    const char *t = "{\"model_max_length\": 1000000000000000019884624838656, \"n\": 7}";
    struct tern_json_doc d;
    assert_int_equal(tern_json_doc_parse(t, strlen(t), "tokenizer_config.json", &d), TERN_OK);
    double f;
    int64_t i;
    assert_int_equal(tern_cfg_float(&d, "model_max_length", &f), TERN_OK);
    assert_true(f == 1e30);
    assert_int_equal(tern_cfg_int(&d, "n", &i), TERN_OK); /* read back as a real, still 7 */
    assert_int_equal(i, 7);
    stb_expect(tern_cfg_int(&d, "model_max_length", &i), TERN_E_FORMAT, "tokenizer_config.json",
               "'model_max_length' must be an integer", NULL);
    tern_json_doc_deinit(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),        cmocka_unit_test(test_missing_keys),
        cmocka_unit_test(test_mistyped_keys), cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_load_file),     cmocka_unit_test(test_huge_integer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
