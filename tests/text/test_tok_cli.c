/*
 * test_tok_cli.c — `tern tokenize` / `tern detokenize` end to end with the
 * shared Qwen3 and Mistral tokenizers: plain and --json output,
 * --add-special, --skip-special, and one-line errors with a non-zero exit for
 * a missing directory, junk ids and out-of-range ids.
 */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

static int run(const char *stdin_text, const char *args, char **out, char **err)
{
    struct tern_str cmd = {0};
    tern_str_appendf(&cmd, "printf '%s' | %s %s", stdin_text, TERN_BIN, args);
    int rc = tu_run(cmd.data, out, err);
    tern_str_deinit(&cmd);
    return rc;
}

static void test_cli(void **state)
{
    (void)state;
    char *qwen = tu_tokenizer_dir("qwen3"), *mistral = tu_tokenizer_dir("mistral");
    char args[1024], *out, *err;
    snprintf(args, sizeof args, "tokenize --tokenizer %s", qwen);
    assert_int_equal(run("Hello world", args, &out, &err), 0);
    assert_string_equal(out, "9707 1879\n");
    tern_free(out);
    tern_free(err);
    snprintf(args, sizeof args, "tokenize --tokenizer %s --json", qwen);
    assert_int_equal(run(" Hello\\n", args, &out, &err), 0);
    assert_string_equal(out, "{\"ids\": [21927, 198], \"tokens\": [\"\xC4\xA0Hello\", \"\xC4\x8A\"]}\n");
    tern_free(out);
    tern_free(err);
    snprintf(args, sizeof args, "tokenize --tokenizer %s --add-special", mistral);
    assert_int_equal(run("Hello world", args, &out, &err), 0);
    assert_string_equal(out, "1 22557 1526\n");
    tern_free(out);
    tern_free(err);
    snprintf(args, sizeof args, "detokenize --tokenizer %s", mistral);
    assert_int_equal(run("1 22557 1526", args, &out, &err), 0);
    assert_string_equal(out, "<s> Hello world");
    tern_free(out);
    tern_free(err);
    snprintf(args, sizeof args, "detokenize --tokenizer %s --skip-special", mistral);
    assert_int_equal(run("1,22557,1526", args, &out, &err), 0);
    assert_string_equal(out, "Hello world");
    tern_free(out);
    tern_free(err);
    /* errors: one line on stderr, non-zero exit */
    const char *bad[][2] = {{"1 x", "non-negative integer"}, {"1 32000", "out of range"}};
    for (int i = 0; i < 2; i++) {
        assert_int_not_equal(run(bad[i][0], args, &out, &err), 0);
        assert_non_null(strstr(err, bad[i][1]));
        assert_int_equal(strchr(err, '\n') - err, (long)strlen(err) - 1);
        tern_free(out);
        tern_free(err);
    }
    assert_int_not_equal(run("hi", "tokenize --tokenizer /nonexistent/dir", &out, &err), 0);
    assert_non_null(strstr(err, "/nonexistent/dir/tokenizer.json"));
    tern_free(out);
    tern_free(err);
    tern_free(qwen);
    tern_free(mistral);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cli)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
