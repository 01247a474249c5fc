/*
 * test_gguf_inspect.c — `tern inspect --model FILE.gguf` (tern_gguf_describe)
 * end to end: llama.cpp's vocab-only llama-spm.gguf as text and JSON, a
 * file whose architecture has no config, a malformed file (exit 1, one line
 * naming it), SmolLM2 when present; and `tern generate` on a GGUF without
 * weights naming the tensor it lacks.
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static int tern_run(const char *args, char **out, char **err)
{
    struct tern_str cmd = {0};
    tern_str_appendf(&cmd, "'%s' %s", TERN_BIN, args);
    int rc = tu_run(cmd.data, out, err);
    tern_str_deinit(&cmd);
    return rc;
}

static void expect_lines(const char *out, const char *const *lines)
{
    for (; *lines; lines++)
        if (!strstr(out, *lines)) fail_msg("no '%s' in:\n%s", *lines, out);
}

static void test_llama_spm(void **state)
{
    (void)state;
    char *out, *err, args[1024];
    char *path = tu_data_file("peer-tests/tokenizer-cases/llama-spm.gguf");
    snprintf(args, sizeof args, "inspect --model '%s'", path);
    assert_int_equal(tern_run(args, &out, &err), 0);
    static const char *const want[] = {"(GGUF v3, alignment 32)\n",
                                       "name             llama-spm\n",
                                       "architecture     llama (LlamaForCausalLM)\n",
                                       "tensors          0\n",
                                       "layers           32\n",
                                       "hidden / ff      4096 / 11008\n",
                                       "heads / kv / dim 32 / 32 / 128\n",
                                       "vocab            32000\n",
                                       "context length   4096\n",
                                       "tokenizer        llama (pre default), 32000 tokens\n",
                                       "chat template    no\n",
                                       NULL};
    expect_lines(out, want);
    tern_free(out);
    tern_free(err);
    snprintf(args, sizeof args, "inspect --model '%s' --json", path);
    assert_int_equal(tern_run(args, &out, &err), 0);
    json_error_t jerr;
    json_t *o = json_loads(out, 0, &jerr);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "format")), "gguf");
    assert_string_equal(json_string_value(json_object_get(o, "hf_architecture")),
                        "LlamaForCausalLM");
    assert_int_equal(json_integer_value(json_object_get(o, "n_layers")), 32);
    assert_int_equal(json_integer_value(json_object_get(o, "n_tokens")), 32000);
    assert_true(json_is_false(json_object_get(o, "has_chat_template")));
    json_decref(o);
    tern_free(out);
    tern_free(err);
    /* the model commands load a GGUF: this vocabulary-only one has no weights */
    snprintf(args, sizeof args, "generate --model '%s' --ids 1", path);
    assert_int_equal(tern_run(args, &out, &err), 1);
    assert_non_null(
        strstr(err, "llama-spm.gguf: no embedding tensor 'token_embd.weight' "
                    "(model.embed_tokens.weight)\n"));
    tern_free(out);
    tern_free(err);
    tern_free(path);
}

static void test_no_config_and_bad(void **state)
{
    (void)state;
    char *out, *err, args[1024];
    char *path = tu_fixture("../fuzz/corpus/gguf/valid_meta.gguf");
    snprintf(args, sizeof args, "inspect --model '%s'", path);
    assert_int_equal(tern_run(args, &out, &err), 0);
    static const char *const want[] = {
        "architecture     llama\n",          "tensors          2: F32 1, Q8_0 1\n",
        "config           none: ",           "'llama.block_count' is missing",
        "tokenizer        none, 0 tokens\n", NULL};
    expect_lines(out, want);
    tern_free(out);
    tern_free(err);
    tern_free(path);
    path = tu_fixture("../fuzz/corpus/gguf/bad_truncated.gguf");
    snprintf(args, sizeof args, "inspect --model '%s'", path);
    assert_int_equal(tern_run(args, &out, &err), 1);
    assert_non_null(strstr(err, "bad_truncated.gguf"));
    assert_int_equal(strchr(err, '\n') - err, (long)strlen(err) - 1); /* one line */
    tern_free(out);
    tern_free(err);
    tern_free(path);
}

static void test_smollm2(void **state)
{
    (void)state;
    char *path = tu_smollm2_gguf();
    if (!path) return;
    char *out, *err, args[1024];
    snprintf(args, sizeof args, "inspect --model '%s'", path);
    assert_int_equal(tern_run(args, &out, &err), 0);
    static const char *const want[] = {
        "architecture     llama (LlamaForCausalLM)\n",
        "parameters       134.515 M\n",
        "tensors          272: Q4_1 210, F32 61, Q8_0 1\n",
        "heads / kv / dim 9 / 3 / 64\n",
        "tied embeddings  yes\n",
        "tokenizer        gpt2 (pre smollm), 49152 tokens, 48900 merges\n",
        "chat template    yes\n",
        NULL};
    expect_lines(out, want);
    tern_free(out);
    tern_free(err);
    tern_free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_spm),
        cmocka_unit_test(test_no_config_and_bad),
        cmocka_unit_test(test_smollm2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
