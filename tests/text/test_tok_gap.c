/*
 * test_tok_gap.c — a vocab with a gap in its ids (id 2 names no token) whose
 * post-processor still emits the gap as its special token (a tokenizer.json
 * fuzz_tokenizer produced): tokenize with specials returns it,
 * tern_detokenize and the streaming detokenizer decode it to nothing (as the
 * tokenizers library does) instead of failing, and ids past the vocab stay
 * an error naming the id.
 */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

static const char TOKENIZER[] =
    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 3},"
    " \"merges\": [\"a b\"]},"
    " \"post_processor\": {\"type\": \"TemplateProcessing\","
    "  \"single\": [{\"SpecialToken\": {\"id\": \"<g>\", \"type_id\": 0}},"
    "             {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}],"
    "  \"pair\": [], \"special_tokens\": {\"<g>\": {\"id\": \"<g>\", \"ids\": [2],"
    "  \"tokens\": [\"<g>\"]}}}}";

static void test_gap(void **state)
{
    (void)state;
    char *dir = tu_temp_dir("tokgap");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(TOKENIZER, 1, sizeof TOKENIZER - 1, f);
    fclose(f);
    struct tern_tokenizer *tok;
    if (tern_tokenizer_open(dir, &tok)) fail_msg("open: %s", tern_last_error());
    assert_int_equal(tern_tokenizer_vocab_size(tok), 4);
    int32_t *ids;
    size_t n;
    assert_int_equal(tern_tokenize(tok, "ab", 2, true, &ids, &n), TERN_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 2); /* the gap, from the post-processor */
    assert_int_equal(ids[1], 3);
    char *text;
    size_t len;
    if (tern_detokenize(tok, ids, n, false, &text, &len)) fail_msg("%s", tern_last_error());
    assert_string_equal(text, "ab");
    tern_free_buf(text);
    struct tern_detok_stream *s;
    assert_int_equal(tern_detok_stream_create(tok, false, &s), TERN_OK);
    const char *p;
    size_t pl;
    assert_int_equal(tern_detok_stream_push(s, 2, &p, &pl), TERN_OK);
    assert_int_equal(pl, 0);
    assert_int_equal(tern_detok_stream_push(s, 3, &p, &pl), TERN_OK);
    assert_int_equal(pl, 2);
    assert_memory_equal(p, "ab", 2);
    assert_int_equal(tern_detok_stream_push(s, 4, &p, &pl), TERN_E_INVALID_ARG);
    assert_non_null(strstr(tern_last_error(), "token id 4 out of range"));
    tern_detok_stream_destroy(s);
    const int32_t past[2] = {3, 4};
    assert_int_equal(tern_detokenize(tok, past, 2, false, &text, &len), TERN_E_INVALID_ARG);
    assert_non_null(strstr(tern_last_error(), "token id 4 out of range (vocab size 4)"));
    tern_free_buf(ids);
    tern_tokenizer_close(tok);
    remove(path);
    remove(dir);
    tern_free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gap)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
