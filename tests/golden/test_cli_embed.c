/*
 * test_cli_embed.c — `tern embed` end to end on tiny-qwen3-embed: --input
 * and stdin lines, --json in OpenAI's shape, --prompt, --dimensions, the
 * vectors against the transformers goldens (within 1e-4), and the errors
 * (a model that is not an embedding model, an unknown prompt, no input).
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int tern_run(const char *args, char **out, char **err)
{
    struct tern_str cmd = {0};
    tern_str_appendf(&cmd, "'%s' %s", TERN_BIN, args);
    int rc = tu_run(cmd.data, out, err);
    tern_str_deinit(&cmd);
    return rc;
}

/* Golden input i's field `key` (a float array) and its text / prompt name. */
static json_t *golden(void)
{
    char *path = tu_fixture("models/tiny-qwen3-embed/golden/embeddings.json");
    json_error_t e;
    json_t *g = json_load_file(path, 0, &e);
    if (!g) fail_msg("%s: %s", path, e.text);
    tern_free(path);
    return g;
}

static const json_t *input(const json_t *g, size_t i)
{
    return json_array_get(json_object_get(g, "inputs"), i);
}

static void close_to(const json_t *got, const json_t *want, const char *what)
{
    size_t n = json_array_size(want);
    assert_int_equal(json_array_size(got), n);
    float a[64], b[64];
    assert_true(n <= 64);
    for (size_t k = 0; k < n; k++) {
        a[k] = (float)json_number_value(json_array_get(got, k));
        b[k] = (float)json_number_value(json_array_get(want, k));
    }
    double err = tu_max_rel_err(a, b, n);
    if (err > 1e-4) fail_msg("%s: max relative error %.3g", what, err);
}

static void test_json_and_lines(void **state)
{
    (void)state;
    json_t *g = golden();
    char *dir = tu_fixture("models/tiny-qwen3-embed"), *out, *err, args[2048];
    const char *t0 = json_string_value(json_object_get(input(g, 0), "text"));
    const char *t1 = json_string_value(json_object_get(input(g, 1), "text"));
    snprintf(args, sizeof args, "embed --device cpu --model '%s' --input '%s' --input '%s' --json",
             dir, t0, t1);
    assert_int_equal(tern_run(args, &out, &err), 0);
    json_t *o = json_loads(out, 0, NULL);
    if (!o) fail_msg("not JSON: %s", out);
    assert_string_equal(json_string_value(json_object_get(o, "object")), "list");
    const json_t *data = json_object_get(o, "data");
    assert_int_equal(json_array_size(data), 2);
    int64_t tokens = 0;
    for (size_t i = 0; i < 2; i++) {
        const json_t *d = json_array_get(data, i);
        assert_int_equal(json_integer_value(json_object_get(d, "index")), (json_int_t)i);
        close_to(json_object_get(d, "embedding"), json_object_get(input(g, i), "last"), "--json");
        tokens += (int64_t)json_array_size(json_object_get(input(g, i), "ids"));
    }
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "usage"),
                                                        "prompt_tokens")), tokens);
    assert_non_null(strstr(err, "tern embed: 2 inputs"));
    tern_free(out);
    tern_free(err);
    /* the same inputs as stdin lines (an empty line skipped): the same values as text */
    char path[] = "/tmp/tern-embed-in-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "%s\n\n%s\r\n", t0, t1);
    fclose(f);
    snprintf(args, sizeof args, "embed --device cpu --model '%s' < '%s'", dir, path);
    assert_int_equal(tern_run(args, &out, &err), 0);
    unlink(path);
    char *line = out;
    for (size_t i = 0; i < 2; i++) {
        const json_t *want = json_object_get(json_array_get(data, i), "embedding");
        for (size_t k = 0; k < json_array_size(want); k++) {
            char *end;
            double v = strtod(line, &end);
            assert_true(end != line);
            assert_true((float)v == (float)json_number_value(json_array_get(want, k)));
            line = end;
        }
        assert_true(*line == '\n');
        line++;
    }
    assert_true(*line == '\0');
    tern_free(out);
    tern_free(err);
    json_decref(o);
    tern_free(dir);
    json_decref(g);
}

static void test_prompt_and_dimensions(void **state)
{
    (void)state;
    json_t *g = golden();
    char *dir = tu_fixture("models/tiny-qwen3-embed"), *out, *err, args[2048];
    for (size_t i = 0; i < json_array_size(json_object_get(g, "inputs")); i++) {
        const json_t *in = input(g, i);
        const char *text = json_string_value(json_object_get(in, "text"));
        const char *pn = json_string_value(json_object_get(in, "prompt_name"));
        if (!pn || !*text) continue;
        snprintf(args, sizeof args, "embed --device cpu --model '%s' --input '%s' --prompt %s "
                 "--json", dir, text, pn);
        assert_int_equal(tern_run(args, &out, &err), 0);
        json_t *o = json_loads(out, 0, NULL);
        assert_non_null(o);
        const json_t *d = json_array_get(json_object_get(o, "data"), 0);
        close_to(json_object_get(d, "embedding"), json_object_get(in, "last"), pn);
        json_decref(o);
        tern_free(out);
        tern_free(err);
    }
    const json_t *in = input(g, 0);
    snprintf(args, sizeof args, "embed --device cpu --model '%s' --input '%s' --dimensions 16 "
             "--json", dir, json_string_value(json_object_get(in, "text")));
    assert_int_equal(tern_run(args, &out, &err), 0);
    json_t *o = json_loads(out, 0, NULL);
    assert_non_null(o);
    close_to(json_object_get(json_array_get(json_object_get(o, "data"), 0), "embedding"),
             json_object_get(in, "last16"), "--dimensions 16");
    json_decref(o);
    tern_free(out);
    tern_free(err);
    tern_free(dir);
    json_decref(g);
}

static void test_errors(void **state)
{
    (void)state;
    char *dir = tu_fixture("models/tiny-qwen3-embed"), *plain = tu_fixture("models/tiny-qwen3");
    char *out, *err, args[2048];
    snprintf(args, sizeof args, "embed --device cpu --model '%s' --input hello", plain);
    assert_int_equal(tern_run(args, &out, &err), 1);
    assert_non_null(strstr(err, "no modules.json"));
    assert_string_equal(out, "");
    tern_free(out);
    tern_free(err);
    snprintf(args, sizeof args, "embed --device cpu --model '%s' --input hello --prompt passage",
             dir);
    assert_int_equal(tern_run(args, &out, &err), 1);
    assert_non_null(strstr(err, "'query'"));
    tern_free(out);
    tern_free(err);
    snprintf(args, sizeof args, "embed --device cpu --model '%s' < /dev/null", dir);
    assert_int_equal(tern_run(args, &out, &err), 2);
    assert_non_null(strstr(err, "no input"));
    tern_free(out);
    tern_free(err);
    snprintf(args, sizeof args, "embed --device cpu --model '%s' --input x --dimensions 65", dir);
    assert_int_equal(tern_run(args, &out, &err), 1);
    assert_non_null(strstr(err, "dimensions"));
    tern_free(out);
    tern_free(err);
    tern_free(dir);
    tern_free(plain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_and_lines),
        cmocka_unit_test(test_prompt_and_dimensions),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
