/*
 * test_tok_gguf.c — tokenizers built from GGUF metadata (text/tok_gguf.h):
 *
 *   - llama.cpp's llama-spm cases on its llama-spm.gguf (SentencePiece:
 *     scores, byte fallback), ids and the round trip through detokenize;
 *   - llama.cpp's llama-bpe and qwen2 cases on GGUF images made here from
 *     the Llama 3.1 and Qwen3 tokenizer.json files (vocabulary, merges and
 *     token types written as convert_hf_to_gguf.py writes them, the
 *     pre-tokenizer named), and the same ids and text as the tokenizer
 *     built from tokenizer.json itself;
 *   - SmolLM2-135M-Instruct's GGUF against HF tokenizers
 *     (tests/fixtures/gguf/smollm2_tok.json, tools/make_gguf_fixtures.py)
 *     and its chat template, when the file is present;
 *   - small hand-made vocabularies: special tokens, add_bos, and the errors.
 */
#include "testutil.h"
#include "../io/gguf_build.h"
#include "io/gguf.h"
#include "text/tok_gguf.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define SEP "\n__ggml_vocab_test__\n"

static char *ids_str(const int32_t *ids, size_t n)
{
    struct tern_str s = {0};
    for (size_t i = 0; i < n; i++) tern_str_appendf(&s, " %d", ids[i]);
    return s.data ? tern_str_take(&s) : tern_strdup("");
}

/* Runs llama.cpp's cases `name` (.inp / .out) through tok; when `ref` is
 * given, its ids and decoded text must be the same too. Returns failures. */
static int run_cases(const struct tern_tokenizer *tok, const struct tern_tokenizer *ref,
                     const char *name, bool round_trip)
{
    char path[512];
    char *inp, *exp;
    size_t inp_len, exp_len;
    snprintf(path, sizeof path, "%s/peer-tests/tokenizer-cases/%s.inp", TERN_DATA, name);
    tu_ok(tern_file_read(path, &inp, &inp_len));
    snprintf(path, sizeof path, "%s/peer-tests/tokenizer-cases/%s.out", TERN_DATA, name);
    tu_ok(tern_file_read(path, &exp, &exp_len));
    int n_cases = 0, n_fail = 0;
    char *p = inp, *line = exp;
    for (char *sep; (sep = strstr(p, SEP)); p = sep + strlen(SEP), n_cases++) {
        char *eol = strchr(line, '\n');
        assert_non_null(eol);
        *eol = '\0';
        size_t len = (size_t)(sep - p), n, n_ref;
        int32_t *ids, *ids_ref;
        tu_ok(tern_tokenize(tok, p, len, false, &ids, &n));
        char *got = ids_str(ids, n);
        if (strcmp(got, line) && !(n == 0 && strspn(line, " ") == strlen(line))) {
            n_fail++;
            print_message("%s case %d '%.*s'\n  want:%s\n  got: %s\n", name, n_cases, (int)len, p,
                          line, got);
        }
        char *text;
        size_t text_len;
        tu_ok(tern_detokenize(tok, ids, n, false, &text, &text_len));
        if (round_trip && (text_len != len || memcmp(text, p, len))) {
            n_fail++;
            print_message("%s case %d: decodes to '%s'\n", name, n_cases, text);
        }
        if (ref) {
            tu_ok(tern_tokenize(ref, p, len, false, &ids_ref, &n_ref));
            char *want = ids_str(ids_ref, n_ref), *text_ref;
            size_t text_ref_len;
            tu_ok(tern_detokenize(ref, ids_ref, n_ref, false, &text_ref, &text_ref_len));
            if (strcmp(got, want) || text_len != text_ref_len || memcmp(text, text_ref, text_len)) {
                n_fail++;
                print_message("%s case %d: tokenizer.json gives%s\n", name, n_cases, want);
            }
            tern_free(want);
            tern_free_buf(text_ref);
            tern_free_buf(ids_ref);
        }
        tern_free_buf(text);
        tern_free(got);
        tern_free_buf(ids);
        line = eol + 1;
    }
    print_message("%s: %d/%d cases pass\n", name, n_cases - n_fail, n_cases);
    assert_true(n_cases > 30);
    tern_free(inp);
    tern_free(exp);
    return n_fail;
}

static void test_llama_spm(void **state)
{
    (void)state;
    struct tern_gguf *g;
    char *spm = tu_data_file("peer-tests/tokenizer-cases/llama-spm.gguf");
    tu_ok(tern_gguf_open(spm, &g));
    tern_free(spm);
    struct tern_tokenizer *tok;
    uint64_t t0 = tern_now_ns();
    tu_ok(tern_tokenizer_from_gguf(g, &tok));
    print_message("llama-spm: built in %.1f ms\n", (tern_now_ns() - t0) / 1e6);
    assert_int_equal(tern_tokenizer_vocab_size(tok), 32000);
    assert_int_equal(tern_tokenizer_bos_id(tok), 1);
    assert_int_equal(tern_tokenizer_eos_id(tok), 2);
    assert_true(tern_tokenizer_is_special(tok, 1));
    assert_false(tern_tokenizer_is_special(tok, 29871));
    assert_int_equal(tern_tokenizer_token_id(tok, "<0x0A>"), 13);
    assert_int_equal(run_cases(tok, NULL, "llama-spm", true), 0);
    /* add_bos_token is true: <s> first; special tokens in text are matched */
    int32_t *ids;
    size_t n;
    tu_ok(tern_tokenize(tok, "Hello</s>", 9, true, &ids, &n));
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 1), assert_int_equal(ids[1], 15043), assert_int_equal(ids[2], 2);
    tern_free_buf(ids);
    tern_tokenizer_close(tok);
    tern_gguf_close(g);
}

/* ---------------------------------------------------------------- GGUF from tokenizer.json */

/* A vocab-only GGUF image with what convert_hf_to_gguf.py writes for a
 * byte-level BPE tokenizer.json: every id's token (holes as [PADn], UNUSED),
 * added tokens as CONTROL (special) or USER_DEFINED, merges as "a b". */
static uint8_t *gguf_from_tokenizer_json(const char *dir, const char *pre, size_t *len)
{
    char *path = tern_path_join(dir, "tokenizer.json");
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) fail_msg("%s: %s", path, err.text);
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    json_t *added = json_object_get(root, "added_tokens");
    size_t n = 0, i;
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) if ((size_t)json_integer_value(v) + 1 > n) n =
        (size_t)json_integer_value(v) + 1;
    json_array_foreach(added, i, v)
    {
        size_t id = (size_t)json_integer_value(json_object_get(v, "id"));
        if (id + 1 > n) n = id + 1;
    }
    const char **toks = tern_calloc(n, sizeof *toks);
    int32_t *types = tern_calloc(n, sizeof *types);
    json_object_foreach(vocab, k, v)
    {
        toks[json_integer_value(v)] = k;
        types[json_integer_value(v)] = 1;
    }
    json_array_foreach(added, i, v)
    {
        size_t id = (size_t)json_integer_value(json_object_get(v, "id"));
        toks[id] = json_string_value(json_object_get(v, "content"));
        types[id] = json_is_true(json_object_get(v, "special")) ? 3 : 4;
    }
    struct gb b;
    gb_begin(&b, 3);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(&b, "tokenizer.ggml.pre", pre);
    gb_kv_arr(&b, "tokenizer.ggml.tokens", TERN_GGUF_STRING, n);
    for (size_t id = 0; id < n; id++) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%zu]", id);
        gb_str(&b, toks[id] ? toks[id] : pad);
    }
    gb_kv_arr(&b, "tokenizer.ggml.token_type", TERN_GGUF_INT32, n);
    for (size_t id = 0; id < n; id++) gb_u32(&b, (uint32_t)(types[id] ? types[id] : 5));
    gb_kv_arr(&b, "tokenizer.ggml.merges", TERN_GGUF_STRING, json_array_size(merges));
    struct tern_str m = {0};
    json_array_foreach(merges, i, v)
    {
        tern_str_clear(&m);
        if (json_is_string(v))
            tern_str_appendz(&m, json_string_value(v));
        else
            tern_str_appendf(&m, "%s %s", json_string_value(json_array_get(v, 0)),
                             json_string_value(json_array_get(v, 1)));
        gb_strn(&b, m.data, m.len);
    }
    tern_str_deinit(&m);
    gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", 1);
    tern_free(toks);
    tern_free(types);
    json_decref(root);
    tern_free(path);
    return gb_end(&b, len);
}

static void peer_from_json(const char *tok_name, const char *pre, const char *cases)
{
    char *dir = tu_tokenizer_dir(tok_name);
    size_t len;
    uint8_t *img = gguf_from_tokenizer_json(dir, pre, &len);
    struct tern_gguf *g;
    tu_ok(tern_gguf_parse(img, len, tok_name, &g));
    struct tern_tokenizer *tok, *ref;
    tu_ok(tern_tokenizer_from_gguf(g, &tok));
    tu_ok(tern_tokenizer_open(dir, &ref));
    assert_int_equal(tern_tokenizer_vocab_size(tok), tern_tokenizer_vocab_size(ref));
    assert_int_equal(run_cases(tok, ref, cases, false), 0);
    tern_tokenizer_close(tok);
    tern_tokenizer_close(ref);
    tern_gguf_close(g);
    tern_free(img);
    tern_free(dir);
}

static void test_llama_bpe(void **state)
{
    (void)state;
    peer_from_json("llama3_1", "llama-bpe", "llama-bpe");
}

static void test_qwen2(void **state)
{
    (void)state;
    peer_from_json("qwen3", "qwen2", "qwen2");
}

/* ---------------------------------------------------------------- SmolLM2 */

static void test_smollm2(void **state)
{
    (void)state;
    char *path = tu_smollm2_gguf();
    if (!path) return;
    struct tern_gguf *g;
    tu_ok(tern_gguf_open(path, &g));
    struct tern_tokenizer *tok;
    tu_ok(tern_tokenizer_from_gguf(g, &tok));
    assert_int_equal(tern_tokenizer_vocab_size(tok), 49152);
    assert_int_equal(tern_tokenizer_bos_id(tok), 1);
    assert_int_equal(tern_tokenizer_eos_id(tok), 2);
    assert_true(tern_tokenizer_is_special(tok, 2));
    char *jpath = tu_fixture("gguf/smollm2_tok.json");
    json_error_t err;
    json_t *cases = json_load_file(jpath, 0, &err);
    assert_non_null(cases);
    size_t i, n_fail = 0;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        const char *text = json_string_value(json_object_get(c, "text"));
        json_t *want = json_object_get(c, "ids");
        int32_t *ids;
        size_t n;
        tu_ok(tern_tokenize(tok, text, strlen(text), false, &ids, &n));
        bool same = n == json_array_size(want);
        for (size_t k = 0; same && k < n; k++)
            same = ids[k] == json_integer_value(json_array_get(want, k));
        if (!same) {
            char *got = ids_str(ids, n);
            print_message("smollm2 '%s': got%s (HF has %zu ids)\n", text, got,
                          json_array_size(want));
            tern_free(got);
            n_fail++;
        }
        char *back;
        size_t back_len;
        tu_ok(tern_detokenize(tok, ids, n, false, &back, &back_len));
        if (back_len != strlen(text) || memcmp(back, text, back_len)) {
            print_message("smollm2 '%s': decodes to '%s'\n", text, back);
            n_fail++;
        }
        tern_free_buf(back);
        tern_free_buf(ids);
    }
    print_message("smollm2: %zu/%zu cases as HF tokenizers\n", json_array_size(cases) - n_fail,
                  json_array_size(cases));
    assert_int_equal(n_fail, 0);
    assert_true(json_array_size(cases) > 30);

    struct tern_chat_template *t;
    tu_ok(tern_chat_template_from_gguf(g, NULL, &t));
    char *out;
    tu_ok(tern_chat_template_render(t,
                                    "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                                    "\"add_generation_prompt\": true}",
                                    &out, NULL));
    assert_string_equal(out, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                             "trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                             "<|im_start|>assistant\n");
    tern_free_buf(out);
    tern_chat_template_destroy(t);
    assert_int_equal(tern_chat_template_from_gguf(g, "tool_use", &t), TERN_E_NOT_FOUND);
    json_decref(cases);
    tern_free(jpath);
    tern_tokenizer_close(tok);
    tern_gguf_close(g);
    tern_free(path);
}

/* ---------------------------------------------------------------- small vocabularies */

/* A vocabulary of `model`: a, b, ab, Ġ (space), Ġab, <|s|> (control), <u>
 * (user-defined), [PAD7] (unused); merges "a b" and merge2; bos <|s|>,
 * add_bos_token true. */
static struct tern_gguf *small_vocab(struct gb *b, const char *model, const char *pre,
                                     const char *merge2, uint8_t **img)
{
    static const char *toks[] = {"a",
                                 "b",
                                 "ab",
                                 "\xC4\xA0",
                                 "\xC4\xA0"
                                 "ab",
                                 "<|s|>",
                                 "<u>",
                                 "[PAD7]"};
    static const uint32_t types[] = {1, 1, 1, 1, 1, 3, 4, 5};
    gb_begin(b, 3);
    gb_kv_str(b, "tokenizer.ggml.model", model);
    if (pre) gb_kv_str(b, "tokenizer.ggml.pre", pre);
    gb_kv_arr(b, "tokenizer.ggml.tokens", TERN_GGUF_STRING, 8);
    for (int i = 0; i < 8; i++) gb_str(b, toks[i]);
    gb_kv_arr(b, "tokenizer.ggml.token_type", TERN_GGUF_INT32, 8);
    for (int i = 0; i < 8; i++) gb_u32(b, types[i]);
    gb_kv_arr(b, "tokenizer.ggml.merges", TERN_GGUF_STRING, 2);
    gb_str(b, "a b");
    gb_str(b, merge2);
    gb_kv_u32(b, "tokenizer.ggml.bos_token_id", 5);
    gb_kv_bool(b, "tokenizer.ggml.add_bos_token", true);
    size_t len;
    *img = gb_end(b, &len);
    struct tern_gguf *g;
    tu_ok(tern_gguf_parse(*img, len, "small.gguf", &g));
    return g;
}

static void test_small(void **state)
{
    (void)state;
    struct gb b;
    uint8_t *img;
    struct tern_gguf *g = small_vocab(&b, "gpt2", "gpt2", "\xC4\xA0 ab", &img);
    struct tern_tokenizer *tok;
    tu_ok(tern_tokenizer_from_gguf(g, &tok));
    assert_int_equal(tern_tokenizer_vocab_size(tok), 8);
    assert_null(tern_tokenizer_token(tok, 7)); /* unused: a hole */
    assert_true(tern_tokenizer_is_special(tok, 5));
    assert_false(tern_tokenizer_is_special(tok, 6));
    int32_t *ids;
    size_t n;
    tu_ok(tern_tokenize(tok, "ab ab<|s|>b<u>", 14, true, &ids, &n));
    static const int32_t want[] = {5, 2, 4, 5, 1, 6};
    assert_int_equal(n, 6);
    assert_memory_equal(ids, want, sizeof want);
    char *text;
    size_t text_len;
    tu_ok(tern_detokenize(tok, ids, n, true, &text, &text_len));
    assert_string_equal(text, "ab abb<u>");
    tern_free_buf(text);
    tern_free_buf(ids);
    tern_tokenizer_close(tok);
    tern_gguf_close(g);
    tern_free(img);

    /* the errors name the file and the key */
    g = small_vocab(&b, "bert", "gpt2", "a b", &img);
    assert_int_equal(tern_tokenizer_from_gguf(g, &tok), TERN_E_UNSUPPORTED);
    assert_non_null(strstr(tern_last_error(), "tokenizer.ggml.model 'bert'"));
    assert_null(tok);
    tern_gguf_close(g), tern_free(img);
    g = small_vocab(&b, "gpt2", "falcon", "a b", &img);
    assert_int_equal(tern_tokenizer_from_gguf(g, &tok), TERN_E_UNSUPPORTED);
    assert_non_null(strstr(tern_last_error(), "tokenizer.ggml.pre 'falcon'"));
    tern_gguf_close(g), tern_free(img);
    g = small_vocab(&b, "gpt2", "smo\nlm", "a b", &img); /* file text stays on one line */
    assert_int_equal(tern_tokenizer_from_gguf(g, &tok), TERN_E_UNSUPPORTED);
    assert_non_null(strstr(tern_last_error(), "tokenizer.ggml.pre 'smo?lm'"));
    tern_gguf_close(g), tern_free(img);
    g = small_vocab(&b, "gpt2", "gpt2", "b a", &img); /* "ba" is no token */
    assert_int_equal(tern_tokenizer_from_gguf(g, &tok), TERN_E_FORMAT);
    assert_non_null(strstr(tern_last_error(), "small.gguf: tokenizer.ggml.merges[1] 'b a'"));
    tern_gguf_close(g), tern_free(img);
    g = small_vocab(&b, "gpt2", "gpt2", "ab", &img);
    assert_int_equal(tern_tokenizer_from_gguf(g, &tok), TERN_E_FORMAT);
    tern_gguf_close(g), tern_free(img);

    /* smollm splits digits before BPE (Hugging Face's Digits pre-tokenizer) */
    for (int k = 0; k < 2; k++) {
        gb_begin(&b, 3);
        gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
        gb_kv_str(&b, "tokenizer.ggml.pre", k ? "smollm" : "gpt2");
        gb_kv_arr(&b, "tokenizer.ggml.tokens", TERN_GGUF_STRING, 3);
        gb_str(&b, "1"), gb_str(&b, "2"), gb_str(&b, "12");
        gb_kv_arr(&b, "tokenizer.ggml.merges", TERN_GGUF_STRING, 1);
        gb_str(&b, "1 2");
        size_t dlen;
        img = gb_end(&b, &dlen);
        tu_ok(tern_gguf_parse(img, dlen, "digits.gguf", &g));
        tu_ok(tern_tokenizer_from_gguf(g, &tok));
        tu_ok(tern_tokenize(tok, "12", 2, true, &ids, &n));
        assert_int_equal(n, k ? 2 : 1);
        assert_int_equal(ids[0], k ? 0 : 2);
        tern_free_buf(ids);
        tern_tokenizer_close(tok);
        tern_gguf_close(g), tern_free(img);
    }

    gb_begin(&b, 3); /* no tokens at all */
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    size_t len;
    img = gb_end(&b, &len);
    tu_ok(tern_gguf_parse(img, len, "empty.gguf", &g));
    assert_int_equal(tern_tokenizer_from_gguf(g, &tok), TERN_E_NOT_FOUND);
    assert_non_null(strstr(tern_last_error(), "'tokenizer.ggml.tokens'"));
    struct tern_chat_template *t;
    assert_int_equal(tern_chat_template_from_gguf(g, NULL, &t), TERN_E_NOT_FOUND);
    tern_gguf_close(g), tern_free(img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_spm), cmocka_unit_test(test_llama_bpe),
        cmocka_unit_test(test_qwen2),     cmocka_unit_test(test_smollm2),
        cmocka_unit_test(test_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
