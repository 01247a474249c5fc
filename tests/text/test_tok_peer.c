/*
 * test_tok_peer.c — llama.cpp's tokenizer test cases (tests/fixtures/data/
 * peer-tests/tokenizer-cases) against the real tokenizers: qwen2 cases with
 * the Qwen3 tokenizer, llama-bpe cases with Llama 3.1. Inputs are separated
 * by "\n__ggml_vocab_test__\n" (llama.cpp's test-tokenizer-0 split), expected
 * ids one line per case. Skips when the shared data is absent.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEP "\n__ggml_vocab_test__\n"

static void run_cases(const char *tok_name, const char *cases)
{
    char *dir = tu_tokenizer_dir(tok_name);
    struct tern_tokenizer *tok = NULL;
    uint64_t t0 = tern_now_ns();
    if (tern_tokenizer_open(dir, &tok) != TERN_OK) fail_msg("%s", tern_last_error());
    print_message("%s: loaded in %.1f ms\n", tok_name, (tern_now_ns() - t0) / 1e6);
    char path[512];
    char *inp = NULL, *exp = NULL;
    size_t inp_len, exp_len;
    snprintf(path, sizeof path, "%s/peer-tests/tokenizer-cases/%s.inp", TERN_DATA, cases);
    assert_int_equal(tern_file_read(path, &inp, &inp_len), TERN_OK);
    snprintf(path, sizeof path, "%s/peer-tests/tokenizer-cases/%s.out", TERN_DATA, cases);
    assert_int_equal(tern_file_read(path, &exp, &exp_len), TERN_OK);
    int n_cases = 0, n_fail = 0;
    char *p = inp, *line = exp;
    for (;;) {
        char *sep = strstr(p, SEP);
        if (!sep) break;
        char *eol = strchr(line, '\n');
        assert_non_null(eol);
        *eol = '\0';
        int32_t *ids;
        size_t n;
        assert_int_equal(tern_tokenize(tok, p, (size_t)(sep - p), false, &ids, &n), TERN_OK);
        struct tern_str got = {0};
        for (size_t i = 0; i < n; i++) tern_str_appendf(&got, " %d", ids[i]);
        const char *want = line;
        if (strcmp(got.data ? got.data : "", want) != 0 &&
            !(n == 0 && strspn(want, " ") == strlen(want))) {
            n_fail++;
            print_message("%s case %d: '%.*s'\n  want:%s\n  got: %s\n", cases, n_cases,
                          (int)(sep - p), p, want, got.data ? got.data : "");
        }
        tern_str_deinit(&got);
        tern_free_buf(ids);
        n_cases++;
        p = sep + strlen(SEP);
        line = eol + 1;
    }
    print_message("%s: %d/%d cases pass\n", cases, n_cases - n_fail, n_cases);
    tern_free(inp);
    tern_free(exp);
    tern_tokenizer_close(tok);
    tern_free(dir);
    assert_int_equal(n_fail, 0);
}

static void test_qwen2(void **state)
{
    (void)state;
    run_cases("qwen3", "qwen2");
}

static void test_llama_bpe(void **state)
{
    (void)state;
    run_cases("llama3_1", "llama-bpe");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_llama_bpe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
