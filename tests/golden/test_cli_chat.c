/*
 * test_cli_chat.c — `tern chat` with stdin piped (one message a line: the
 * replies equal `tern generate --chat` for the same message, /reset forgets
 * the history, the history grows the next prompt), and `tern generate`'s
 * sampling flags (the same --seed gives the same tokens, another seed other
 * tokens, --temperature 0 is the greedy output) and their errors.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tern_run(const char *args, char **out, char **err)
{
    struct tern_str cmd = {0};
    tern_str_appendf(&cmd, "'%s' %s", TERN_BIN, args);
    int rc = tu_run(cmd.data, out, err);
    tern_str_deinit(&cmd);
    return rc;
}

/* The prompt token counts of the summary lines "tern chat: prompt N tokens". */
static int prompt_counts(const char *err, int *n, int max)
{
    int k = 0;
    for (const char *p = err; k < max && (p = strstr(p, "tern chat: prompt ")); p++)
        n[k++] = atoi(p + strlen("tern chat: prompt "));
    return k;
}

static void test_chat_piped(void **state)
{
    char *dir = tu_fixture("models/tiny-llama"), *out, *err, *gout, *gerr, args[2048];
    snprintf(args, sizeof args, "generate --device cpu --model '%s' --chat --prompt hello --max-tokens 8", dir);
    assert_int_equal(tern_run(args, &gout, &gerr), 0);
    assert_non_null(strstr(gerr, "tern generate: prompt "));
    assert_non_null(strstr(gerr, "tok/s), device cpu"));
    size_t glen = strlen(gout);
    assert_true(glen > 1 && gout[glen - 1] == '\n');

    struct tern_str full = {0};
    tern_str_appendf(&full, "printf 'hello\\n/reset\\nhello\\nand again\\n/help\\n/nope\\n/exit\\nnever read\\n' | "
                            "'%s' chat --device cpu --model '%s' --max-tokens 8",
                     TERN_BIN, dir);
    assert_int_equal(tu_run(full.data, &out, &err), 0);
    tern_str_deinit(&full);
    /* the first two replies are the generate reply; the third follows */
    assert_true(strlen(out) > 2 * glen);
    assert_memory_equal(out, gout, glen);
    assert_memory_equal(out + glen, gout, glen);
    int n[8];
    assert_int_equal(prompt_counts(err, n, 8), 3);
    assert_int_equal(n[0], n[1]);    /* /reset forgot the first exchange */
    assert_true(n[2] > n[1] + 8);    /* the third prompt holds the second exchange */
    assert_non_null(strstr(err, "/reset  forget the conversation")); /* /help */
    assert_non_null(strstr(err, "unknown command '/nope'"));
    assert_null(strstr(err, "never read"));
    tern_free(out);
    tern_free(err);
    tern_free(gout);
    tern_free(gerr);

    /* --system reaches the prompt: a longer one */
    snprintf(args, sizeof args, "printf 'hello\\n' | '%s' chat --device cpu --model '%s' --max-tokens 2 --system 'Be brief.'",
             TERN_BIN, dir);
    assert_int_equal(tu_run(args, &out, &err), 0);
    int m[2];
    assert_int_equal(prompt_counts(err, m, 2), 1);
    assert_true(m[0] > n[0]);
    tern_free(out);
    tern_free(err);
    tern_free(dir);
}

static void test_generate_sampling(void **state)
{
    char *dir = tu_fixture("models/tiny-llama"), *a, *b, *c, *greedy, *zero, *err, args[1024];
    const char *base = "generate --device cpu --model '%s' --ids '1 2 3 4' --max-tokens 12 --no-eos";
    char fmt[512];
    snprintf(fmt, sizeof fmt, "%s %%s", base);
    snprintf(args, sizeof args, fmt, dir, "--temperature 1.0 --top-p 0.95 --top-k 50 --seed 7");
    assert_int_equal(tern_run(args, &a, &err), 0);
    tern_free(err);
    assert_int_equal(tern_run(args, &b, &err), 0);
    tern_free(err);
    assert_string_equal(a, b); /* the same seed, the same tokens */
    snprintf(args, sizeof args, fmt, dir, "--temperature 1.0 --top-p 0.95 --top-k 50 --seed 8");
    assert_int_equal(tern_run(args, &c, &err), 0);
    tern_free(err);
    assert_string_not_equal(a, c);
    snprintf(args, sizeof args, fmt, dir, "");
    assert_int_equal(tern_run(args, &greedy, &err), 0);
    tern_free(err);
    snprintf(args, sizeof args, fmt, dir, "--temperature 0 --seed 9 --repetition-penalty 1 --min-p 0");
    assert_int_equal(tern_run(args, &zero, &err), 0);
    tern_free(err);
    assert_string_equal(greedy, zero);
    assert_string_not_equal(a, greedy);
    tern_free(a);
    tern_free(b);
    tern_free(c);
    tern_free(greedy);
    tern_free(zero);
    /* bad values and misplaced flags: exit 2 naming the flag */
    static const char *bad[][2] = {{"--temperature hot", "--temperature"},
                                   {"--top-p 0", "--top-p"},
                                   {"--top-k -1", "--top-k"},
                                   {"--system hi", "--system"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, fmt, dir, bad[i][0]);
        assert_int_equal(tern_run(args, &a, &err), 2);
        if (!strstr(err, bad[i][1])) fail_msg("'%s': stderr '%s'", bad[i][0], err);
        tern_free(a);
        tern_free(err);
    }
    snprintf(args, sizeof args, "inspect --model '%s' --temperature 1", dir);
    assert_int_equal(tern_run(args, &a, &err), 2);
    assert_non_null(strstr(err, "--temperature"));
    tern_free(a);
    tern_free(err);
    tern_free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_piped),
        cmocka_unit_test(test_generate_sampling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
