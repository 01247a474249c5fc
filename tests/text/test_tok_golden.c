/*
 * test_tok_golden.c — the four shared tokenizers (qwen3, llama3_1, gemma3,
 * mistral) against goldens from HF `tokenizers` (tools/make_tokenizer_goldens.py,
 * tests/fixtures/text/tok_goldens_<name>.jsonl): ids with and without special
 * tokens, decode with and without skip_special, and the streaming
 * detokenizer (pieces pushed one id at a time must concatenate to the whole
 * decode).
 */
#include "testutil.h"
#include "text/tok_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static void ids_from_json(json_t *arr, int32_t *out, size_t *n)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) out[(*n)++] = (int32_t)json_integer_value(v);
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

static bool check_stream(const struct tern_tokenizer *tok, const int32_t *ids, size_t n, bool skip,
                         const char *want, size_t want_len)
{
    struct tern_detok_stream *s;
    assert_int_equal(tern_detok_stream_create(tok, skip, &s), TERN_OK);
    struct tern_str all = {0};
    const char *p;
    size_t pl;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(tern_detok_stream_push(s, ids[i], &p, &pl), TERN_OK);
        assert_int_equal(tok_utf8_incomplete_tail(p, pl), 0);
        tern_str_append(&all, p, pl);
    }
    assert_int_equal(tern_detok_stream_flush(s, &p, &pl), TERN_OK);
    tern_str_append(&all, p, pl);
    bool ok = all.len == want_len && (want_len == 0 || !memcmp(all.data, want, want_len));
    if (!ok) print_message("  stream(skip=%d) got '%s'\n", skip, all.data ? all.data : "");
    tern_str_deinit(&all);
    tern_detok_stream_destroy(s);
    return ok;
}

static bool check_decode(const struct tern_tokenizer *tok, const int32_t *ids, size_t n, bool skip,
                         json_t *want_j, const struct tern_str *text)
{
    const char *want = json_is_string(want_j) ? json_string_value(want_j) : text->data;
    size_t want_len = json_is_string(want_j) ? json_string_length(want_j) : text->len;
    char *got;
    size_t len;
    assert_int_equal(tern_detokenize(tok, ids, n, skip, &got, &len), TERN_OK);
    bool ok = len == want_len && !memcmp(got, want, len);
    if (!ok) print_message("  decode(skip=%d) got '%s' want '%s'\n", skip, got, want);
    tern_free_buf(got);
    return ok && check_stream(tok, ids, n, skip, want, want_len);
}

/* Checks one golden line; returns the number of failed checks. */
static int check_case(const struct tern_tokenizer *tok, json_t *rec, int32_t *want, int32_t *all)
{
    struct tern_str raw = {0}, text = {0};
    const char *hex = json_string_value(json_object_get(rec, "hex"));
    if (hex) {
        for (size_t i = 0; hex[i] && hex[i + 1]; i += 2) {
            unsigned b;
            sscanf(hex + i, "%2x", &b);
            tern_str_appendc(&raw, (char)b);
        }
    } else {
        json_t *t = json_object_get(rec, "text");
        tern_str_append(&raw, json_string_value(t), json_string_length(t));
    }
    tok_utf8_sanitize(raw.data ? raw.data : "", raw.len, &text);
    if (!text.data) tern_str_reserve(&text, 1);
    size_t n_want = 0, n_all = 0;
    ids_from_json(json_object_get(rec, "ids"), want, &n_want);
    ids_from_json(json_object_get(rec, "pre"), all, &n_all);
    memcpy(all + n_all, want, n_want * sizeof *want);
    n_all += n_want;
    ids_from_json(json_object_get(rec, "post"), all, &n_all);
    int fails = 0;
    for (int sp = 0; sp < 2; sp++) {
        int32_t *ids;
        size_t n;
        assert_int_equal(tern_tokenize(tok, raw.data ? raw.data : "", raw.len, sp, &ids, &n), TERN_OK);
        if (!same_ids(ids, n, sp ? all : want, sp ? n_all : n_want)) {
            fails++;
            print_message("  case %d (special=%d): ids differ (%zu vs %zu)\n",
                          (int)json_integer_value(json_object_get(rec, "i")), sp, n,
                          sp ? n_all : n_want);
        }
        tern_free_buf(ids);
    }
    if (!check_decode(tok, all, n_all, false, json_object_get(rec, "decode"), &text)) fails++;
    if (!check_decode(tok, all, n_all, true, json_object_get(rec, "decode_skip"), &text)) fails++;
    tern_str_deinit(&raw);
    tern_str_deinit(&text);
    return fails;
}

static void run_golden(const char *name)
{
    char *dir = tu_tokenizer_dir(name);
    struct tern_tokenizer *tok = NULL;
    uint64_t t0 = tern_now_ns();
    if (tern_tokenizer_open(dir, &tok) != TERN_OK) fail_msg("%s", tern_last_error());
    print_message("%s: loaded in %.1f ms\n", name, (tern_now_ns() - t0) / 1e6);
    char rel[128];
    snprintf(rel, sizeof rel, "text/tok_goldens_%s.jsonl", name);
    char *path = tu_fixture(rel);
    char *buf;
    size_t len;
    assert_int_equal(tern_file_read(path, &buf, &len), TERN_OK);
    int32_t *want = tern_malloc(len * sizeof *want), *all = tern_malloc(len * sizeof *all);
    int n_cases = 0, n_bad = 0;
    for (char *line = buf; line && *line;) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = '\0';
        json_error_t err;
        json_t *rec = json_loads(line, JSON_ALLOW_NUL, &err);
        if (!rec) fail_msg("%s: %s", path, err.text);
        int f = check_case(tok, rec, want, all);
        if (f) print_message("%s case %d failed %d checks\n", name, n_cases, f);
        n_bad += f > 0;
        n_cases++;
        json_decref(rec);
        line = eol ? eol + 1 : NULL;
    }
    print_message("%s: %d/%d golden cases pass\n", name, n_cases - n_bad, n_cases);
    tern_free(want);
    tern_free(all);
    tern_free(buf);
    tern_free(path);
    tern_free(dir);
    tern_tokenizer_close(tok);
    assert_int_equal(n_bad, 0);
}

static void test_qwen3(void **state) { (void)state; run_golden("qwen3"); }
static void test_llama3_1(void **state) { (void)state; run_golden("llama3_1"); }
static void test_gemma3(void **state) { (void)state; run_golden("gemma3"); }
static void test_mistral(void **state) { (void)state; run_golden("mistral"); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_llama3_1),
        cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_mistral),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
