/*
 * test_embed.c — embedding requests through the public API on the CPU,
 * against tests/fixtures/models/tiny-qwen3-embed (a Qwen3-Embedding-style
 * snapshot, tools/make_embed_fixture.py) and its transformers goldens:
 * the snapshot's pooling read from its sentence-transformers files, the
 * inputs' ids, last-token vectors within 1e-4, Matryoshka truncation, mean
 * pooling without the prompt (a variant written beside the fixture), batch
 * invariance (alone, all at once beside generation requests, other prefill
 * chunk sizes, prefix-cache hits: bitwise), a headless variant (no lm_head),
 * and the errors (not an embedding model, modules tern does not run, bad
 * dimensions, inputs too long, unknown prompts).
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define E 64
#define MAX_IN 8

struct golden {
    int n;
    char *text[MAX_IN];
    const char *prompt[MAX_IN]; /* NULL: none */
    int32_t ids[MAX_IN][128];
    int n_ids[MAX_IN];
    float last[MAX_IN][E], last16[MAX_IN][16], mean[MAX_IN][E];
    int mean_skip[MAX_IN];
    json_t *root;
};

static void floats(const json_t *a, float *out, int n)
{
    assert_int_equal((int)json_array_size(a), n);
    for (int i = 0; i < n; i++) out[i] = (float)json_number_value(json_array_get(a, (size_t)i));
}

static void golden_load(struct golden *g)
{
    memset(g, 0, sizeof *g);
    char *path = tu_fixture("models/tiny-qwen3-embed/golden/embeddings.json");
    json_error_t err;
    g->root = json_load_file(path, 0, &err);
    if (!g->root) fail_msg("%s: %s", path, err.text);
    tern_free(path);
    const json_t *in = json_object_get(g->root, "inputs");
    g->n = (int)json_array_size(in);
    assert_true(g->n >= 4 && g->n <= MAX_IN);
    for (int i = 0; i < g->n; i++) {
        const json_t *r = json_array_get(in, (size_t)i), *ids = json_object_get(r, "ids");
        g->text[i] = (char *)json_string_value(json_object_get(r, "text"));
        g->prompt[i] = json_string_value(json_object_get(r, "prompt_name"));
        g->n_ids[i] = (int)json_array_size(ids);
        assert_true(g->n_ids[i] <= 128);
        for (int k = 0; k < g->n_ids[i]; k++)
            g->ids[i][k] = (int32_t)json_integer_value(json_array_get(ids, (size_t)k));
        floats(json_object_get(r, "last"), g->last[i], E);
        floats(json_object_get(r, "last16"), g->last16[i], 16);
        floats(json_object_get(r, "mean"), g->mean[i], E);
        g->mean_skip[i] = (int)json_integer_value(json_object_get(r, "mean_skip"));
    }
}

static struct tern_model *open_dir(const char *dir)
{
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CPU;
    struct tern_model *m = NULL;
    if (tern_model_open(dir, &mp, &m) != TERN_OK) fail_msg("%s: %s", dir, tern_last_error());
    return m;
}

static struct tern_model *open_fixture(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s", name);
    char *dir = tu_fixture(rel);
    struct tern_model *m = open_dir(dir);
    tern_free(dir);
    return m;
}

static struct tern_engine *engine_with(struct tern_model *m, int max_batch_tokens, int max_seqs)
{
    struct tern_engine_params p = tern_engine_default_params();
    p.max_batch_tokens = max_batch_tokens;
    p.max_seqs = max_seqs;
    p.max_context = 128;
    p.block_size = 4;
    p.kv_bytes = 16 << 20;
    struct tern_engine *e = NULL;
    if (tern_engine_create(m, &p, &e) != TERN_OK) fail_msg("%s", tern_last_error());
    return e;
}

static struct tern_request embed_req(const int32_t *ids, int n)
{
    struct tern_request r = {0};
    r.ids = ids;
    r.n_ids = n;
    r.embed = true;
    return r;
}

static struct tern_stream *submit(struct tern_engine *e, const struct tern_request *r)
{
    struct tern_stream *s = NULL;
    if (tern_engine_submit(e, r, &s) != TERN_OK) fail_msg("submit: %s", tern_last_error());
    return s;
}

/* Reads an embedding stream to its end: the vector into out (n values). */
static void read_vec(struct tern_stream *s, float *out, int n, int n_prompt)
{
    struct tern_event ev;
    for (;;) {
        enum tern_status st = tern_stream_next(s, 30000, &ev);
        if (st != TERN_OK) fail_msg("stream_next: %d %s", st, tern_last_error());
        assert_int_equal(ev.type, TERN_EVENT_DONE); /* no TOKEN events */
        if (ev.final) break;
    }
    if (ev.status != TERN_OK) fail_msg("embedding failed: %s", ev.error);
    assert_int_equal(ev.finish, TERN_FINISH_STOP);
    assert_int_equal(ev.n_embedding, n);
    assert_int_equal(ev.prompt_tokens, n_prompt);
    assert_int_equal(ev.completion_tokens, 0);
    memcpy(out, ev.embedding, (size_t)n * sizeof(float));
    tern_stream_destroy(s);
}

static void embed_one(struct tern_engine *e, const struct tern_request *r, float *out, int n)
{
    read_vec(submit(e, r), out, n, r->n_ids);
}

static double worst_err; /* the largest error check_close saw */

static void check_close(const float *got, const float *want, int n, const char *what)
{
    double err = tu_max_rel_err(got, want, (size_t)n);
    if (err > worst_err) worst_err = err;
    if (err > 1e-4) fail_msg("%s: max relative error %.3g > 1e-4", what, err);
}

/* A snapshot variant in a new temp dir: every file of the fixture linked,
 * then `files` (name, content pairs, NULL-terminated) written over them. */
static char *variant(const char *const *files)
{
    char *src = tu_fixture("models/tiny-qwen3-embed");
    char tmpl[] = "/tmp/tern-embed-XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    static const char *const link[] = {"config.json", "model.safetensors", "tokenizer.json",
                                       "tokenizer_config.json", "config_sentence_transformers.json",
                                       "modules.json", "1_Pooling"};
    char a[512], b[512];
    for (size_t i = 0; i < sizeof link / sizeof link[0]; i++) {
        snprintf(a, sizeof a, "%s/%s", src, link[i]);
        snprintf(b, sizeof b, "%s/%s", dir, link[i]);
        assert_int_equal(symlink(a, b), 0);
    }
    for (int i = 0; files && files[i]; i += 2) {
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        if (strchr(files[i], '/')) { /* a file in a folder of its own */
            char d[512];
            snprintf(d, sizeof d, "%s/%.*s", dir, (int)(strchr(files[i], '/') - files[i]), files[i]);
            unlink(d);
            mkdir(d, 0755);
        }
        unlink(b);
        FILE *f = fopen(b, "w");
        assert_non_null(f);
        fputs(files[i + 1], f);
        fclose(f);
    }
    tern_free(src);
    return tern_strdup(dir);
}

static void variant_free(char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    tern_free(dir);
}

/* The snapshot's files read as sentence-transformers reads them, its inputs
 * tokenized as it does, and the vectors within 1e-4 of transformers'. */
static void test_golden(void **state)
{
    (void)state;
    struct golden g;
    golden_load(&g);
    struct tern_model *m = open_fixture("tiny-qwen3-embed");
    struct tern_embed_info info;
    tu_ok(tern_model_embed_info(m, &info));
    assert_int_equal(info.pooling, TERN_POOLING_LAST);
    assert_true(info.normalize);
    assert_true(info.include_prompt);
    assert_int_equal(info.dim, E);
    assert_int_equal(info.n_prompts, 2);
    assert_null(info.default_prompt);
    bool has_query = false;
    for (int i = 0; i < info.n_prompts; i++)
        if (!strcmp(info.prompt_names[i], "query"))
            has_query = !strncmp(info.prompts[i], "Instruct: ", 10) &&
                        strstr(info.prompts[i], "\nQuery:") != NULL;
    assert_true(has_query);
    struct tern_engine *e = engine_with(m, 16, 8); /* the long input in 16-token chunks */
    struct tern_stream *ss[MAX_IN];
    for (int i = 0; i < g.n; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        int32_t skip = -1;
        tu_ok(tern_embed_tokenize(m, g.text[i], strlen(g.text[i]), g.prompt[i], &ids, &n, &skip));
        assert_int_equal((int)n, g.n_ids[i]);
        assert_memory_equal(ids, g.ids[i], n * sizeof(int32_t));
        assert_int_equal(skip, 0); /* include_prompt: nothing left out */
        struct tern_request r = embed_req(ids, (int)n);
        ss[i] = submit(e, &r); /* all at once */
        tern_free_buf(ids);
    }
    for (int i = 0; i < g.n; i++) {
        float v[E], v16[16];
        read_vec(ss[i], v, E, g.n_ids[i]);
        check_close(v, g.last[i], E, g.text[i]);
        double norm = 0;
        for (int k = 0; k < E; k++) norm += (double)v[k] * v[k];
        assert_true(norm > 1 - 1e-5 && norm < 1 + 1e-5);
        struct tern_request r = embed_req(g.ids[i], g.n_ids[i]);
        r.dimensions = 16;
        embed_one(e, &r, v16, 16);
        check_close(v16, g.last16[i], 16, "dimensions 16");
    }
    printf("  %d inputs: max relative error %.2g against transformers\n", g.n, worst_err);
    tern_engine_destroy(e);
    tern_model_close(m);
    json_decref(g.root);
}

/* Every vector of the `g.n` inputs, for one way of running them. */
struct vecs {
    float v[MAX_IN][E];
};

/* A vector does not depend on what runs beside it: alone, all at once with
 * generation requests, in 5-token chunks over 3 slots, and again
 * (prefix-cache hits): bitwise the same. */
static void invariance(struct tern_model *m, const struct golden *g, const struct tern_request *proto,
                       const float (*want)[E])
{
    struct vecs alone, together, chunked, again;
    struct tern_engine *e = engine_with(m, 64, 8);
    for (int i = 0; i < g->n; i++) {
        struct tern_request r = *proto;
        r.ids = g->ids[i];
        r.n_ids = g->n_ids[i];
        r.pool_skip = proto->pool_skip ? g->mean_skip[i] : 0;
        embed_one(e, &r, alone.v[i], E);
        check_close(alone.v[i], want[i], E, g->text[i]);
    }
    tern_engine_destroy(e);
    int32_t gen_ids[12];
    for (int k = 0; k < 12; k++) gen_ids[k] = 5 + 3 * k;
    for (int pass = 0; pass < 2; pass++) {
        e = pass ? engine_with(m, 5, 3) : engine_with(m, 64, 8);
        for (int rep = 0; rep < (pass ? 1 : 2); rep++) {
            struct tern_stream *gen[2], *ss[MAX_IN];
            for (int k = 0; k < 2; k++) {
                struct tern_request r = {0};
                r.ids = gen_ids;
                r.n_ids = 12 - 4 * k;
                r.sampling = tern_sampling_default_params();
                r.sampling.max_tokens = 6;
                r.sampling.ignore_eos = true;
                gen[k] = submit(e, &r);
            }
            for (int i = 0; i < g->n; i++) {
                struct tern_request r = *proto;
                r.ids = g->ids[i];
                r.n_ids = g->n_ids[i];
                r.pool_skip = proto->pool_skip ? g->mean_skip[i] : 0;
                ss[i] = submit(e, &r);
            }
            struct vecs *out = pass ? &chunked : rep ? &again : &together;
            for (int i = 0; i < g->n; i++) read_vec(ss[i], out->v[i], E, g->n_ids[i]);
            for (int k = 0; k < 2; k++) {
                struct tern_event ev;
                int n_tok = 0;
                while (tern_stream_next(gen[k], 30000, &ev) == TERN_OK && !ev.final)
                    n_tok += ev.type == TERN_EVENT_TOKEN;
                assert_int_equal(ev.status, TERN_OK);
                assert_int_equal(n_tok, 6);
                tern_stream_destroy(gen[k]);
            }
        }
        tern_engine_destroy(e);
    }
    assert_memory_equal(&alone, &together, sizeof(float) * E * (size_t)g->n);
    assert_memory_equal(&alone, &again, sizeof(float) * E * (size_t)g->n);
    assert_memory_equal(&alone, &chunked, sizeof(float) * E * (size_t)g->n);
}

static void test_batch_invariance(void **state)
{
    (void)state;
    struct golden g;
    golden_load(&g);
    struct tern_model *m = open_fixture("tiny-qwen3-embed");
    struct tern_request proto = embed_req(NULL, 0);
    invariance(m, &g, &proto, (const float(*)[E])g.last);
    tern_model_close(m);
    json_decref(g.root);
}

static const char MEAN_POOLING[] =
    "{\"word_embedding_dimension\": 64, \"pooling_mode_cls_token\": false, "
    "\"pooling_mode_mean_tokens\": true, \"pooling_mode_max_tokens\": false, "
    "\"pooling_mode_mean_sqrt_len_tokens\": false, \"pooling_mode_weightedmean_tokens\": false, "
    "\"pooling_mode_lasttoken\": false, \"include_prompt\": false}";
static const char TWO_MODULES[] =
    "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": "
    "\"sentence_transformers.models.Transformer\"}, {\"idx\": 1, \"name\": \"1\", \"path\": "
    "\"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}]";

/* The same snapshot with a mean-pooling config that leaves the prompt out
 * and no Normalize module: the prompt's length as sentence-transformers
 * counts it, the means within 1e-4, batch and chunk invariant (the sums
 * run in position order whatever the chunks). */
static void test_mean_pooling(void **state)
{
    (void)state;
    struct golden g;
    golden_load(&g);
    const char *files[] = {"1_Pooling/config.json", MEAN_POOLING, "modules.json", TWO_MODULES,
                           NULL};
    char *dir = variant(files);
    struct tern_model *m = open_dir(dir);
    struct tern_embed_info info;
    tu_ok(tern_model_embed_info(m, &info));
    assert_int_equal(info.pooling, TERN_POOLING_MEAN);
    assert_false(info.normalize);
    assert_false(info.include_prompt);
    for (int i = 0; i < g.n; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        int32_t skip = -1;
        tu_ok(tern_embed_tokenize(m, g.text[i], strlen(g.text[i]), g.prompt[i], &ids, &n, &skip));
        assert_int_equal((int)n, g.n_ids[i]);
        assert_int_equal(skip, g.mean_skip[i]);
        tern_free_buf(ids);
    }
    bool some_skip = false;
    for (int i = 0; i < g.n; i++) some_skip |= g.mean_skip[i] > 0;
    assert_true(some_skip);
    struct tern_request proto = embed_req(NULL, 0);
    proto.pool_skip = 1; /* invariance() takes each input's skip */
    invariance(m, &g, &proto, (const float(*)[E])g.mean);
    tern_model_close(m);
    variant_free(dir);
    json_decref(g.root);
}

/* A plain model: no embedding pooling of its own (the reason names
 * modules.json), but an explicit pooling works on it; tiny-qwen3 holds the
 * fixture's weights under "model.", so the vectors are the fixture's. */
static void test_plain_model(void **state)
{
    (void)state;
    struct golden g;
    golden_load(&g);
    struct tern_model *m = open_fixture("tiny-qwen3");
    struct tern_embed_info info;
    assert_int_equal(tern_model_embed_info(m, &info), TERN_E_UNSUPPORTED);
    assert_non_null(strstr(tern_last_error(), "modules.json"));
    struct tern_engine *e = engine_with(m, 64, 4);
    struct tern_request r = embed_req(g.ids[0], g.n_ids[0]);
    struct tern_stream *s = NULL;
    assert_int_equal(tern_engine_submit(e, &r, &s), TERN_E_UNSUPPORTED);
    assert_non_null(strstr(tern_last_error(), "not an embedding model"));
    assert_null(s);
    r.pooling = TERN_POOLING_LAST;
    r.normalize = true;
    float v[E];
    embed_one(e, &r, v, E);
    check_close(v, g.last[0], E, "explicit pooling");
    tern_engine_destroy(e);
    tern_model_close(m);
    json_decref(g.root);
}

/* Qwen3-Embedding-8B's layout: tie_word_embeddings false and no lm_head.
 * It loads, embeds, and refuses generation and logits. */
static void test_headless(void **state)
{
    (void)state;
    struct golden g;
    golden_load(&g);
    char *src = tu_fixture("models/tiny-qwen3-embed/config.json");
    FILE *f = fopen(src, "r");
    assert_non_null(f);
    char cfg[4096];
    size_t n = fread(cfg, 1, sizeof cfg - 1, f);
    fclose(f);
    tern_free(src);
    cfg[n] = '\0';
    char *tie = strstr(cfg, "\"tie_word_embeddings\": true");
    assert_non_null(tie);
    char untied[4200];
    tie += strlen("\"tie_word_embeddings\": ");
    snprintf(untied, sizeof untied, "%.*sfalse%s", (int)(tie - cfg), cfg, tie + 4);
    const char *files[] = {"config.json", untied, NULL};
    char *dir = variant(files);
    struct tern_model *m = open_dir(dir);
    struct tern_model_info in;
    tu_ok(tern_model_get_info(m, &in));
    assert_false(in.tied_embeddings);
    struct tern_engine *e = engine_with(m, 64, 4);
    float v[E];
    struct tern_request r = embed_req(g.ids[0], g.n_ids[0]);
    embed_one(e, &r, v, E);
    check_close(v, g.last[0], E, "headless");
    r.embed = false;
    r.sampling = tern_sampling_default_params();
    struct tern_stream *s = NULL;
    assert_int_equal(tern_engine_submit(e, &r, &s), TERN_E_UNSUPPORTED);
    assert_non_null(strstr(tern_last_error(), "lm_head"));
    float *logits = malloc(sizeof(float) * 384 * 4);
    assert_int_equal(tern_logits(e, g.ids[0], 4, logits), TERN_E_UNSUPPORTED);
    free(logits);
    tern_engine_destroy(e);
    tern_model_close(m);
    variant_free(dir);
    json_decref(g.root);
}

/* Snapshots tern does not run as embedding models open, with the reason. */
static void test_unsupported_configs(void **state)
{
    (void)state;
    static const struct {
        const char *file, *content, *reason;
    } cases[] = {
        {"modules.json",
         "[{\"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"}, {\"path\": "
         "\"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}, {\"path\": "
         "\"2_Dense\", \"type\": \"sentence_transformers.models.Dense\"}]",
         "sentence_transformers.models.Dense"},
        {"modules.json", "{\"not\": \"a list\"}", "not a JSON array"},
        {"modules.json", "[{\"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"}]",
         "no Pooling module"},
        {"1_Pooling/config.json", "{\"pooling_mode_max_tokens\": true}", "'max'"},
        {"1_Pooling/config.json", "{\"pooling_mode\": \"weightedmean\"}", "'weightedmean'"},
        {"1_Pooling/config.json",
         "{\"pooling_mode_lasttoken\": true, \"pooling_mode_cls_token\": true}", "several"},
        {"1_Pooling/config.json", "{\"word_embedding_dimension\": 32, \"pooling_mode\": \"cls\"}",
         "hidden_size 64"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *files[] = {cases[c].file, cases[c].content, NULL};
        char *dir = variant(files);
        struct tern_model *m = open_dir(dir);
        struct tern_embed_info info;
        assert_int_equal(tern_model_embed_info(m, &info), TERN_E_UNSUPPORTED);
        if (!strstr(tern_last_error(), cases[c].reason))
            fail_msg("case %zu: '%s' does not say '%s'", c, tern_last_error(), cases[c].reason);
        tern_model_close(m);
        variant_free(dir);
    }
    /* sentence-transformers 6's own keys */
    const char *files[] = {"1_Pooling/config.json",
                           "{\"embedding_dimension\": 64, \"pooling_mode\": \"cls\", "
                           "\"include_prompt\": true}", NULL};
    char *dir = variant(files);
    struct tern_model *m = open_dir(dir);
    struct tern_embed_info info;
    tu_ok(tern_model_embed_info(m, &info));
    assert_int_equal(info.pooling, TERN_POOLING_CLS);
    tern_model_close(m);
    variant_free(dir);
}

/* Bad requests are refused at submit, naming what was wrong. */
static void test_errors(void **state)
{
    (void)state;
    struct tern_model *m = open_fixture("tiny-qwen3-embed");
    struct tern_engine *e = engine_with(m, 64, 4);
    int32_t ids[130];
    for (int i = 0; i < 130; i++) ids[i] = 10 + i % 300;
    struct tern_stream *s = NULL;
    struct tern_request r = embed_req(ids, 0);
    assert_int_equal(tern_engine_submit(e, &r, &s), TERN_E_INVALID_ARG);
    assert_non_null(strstr(tern_last_error(), "empty"));
    r.n_ids = 129; /* the context is 128 */
    assert_int_equal(tern_engine_submit(e, &r, &s), TERN_E_CAPACITY);
    assert_non_null(strstr(tern_last_error(), "128"));
    r.n_ids = 5;
    r.dimensions = 65;
    assert_int_equal(tern_engine_submit(e, &r, &s), TERN_E_INVALID_ARG);
    assert_non_null(strstr(tern_last_error(), "dimensions"));
    r.dimensions = 0;
    ids[2] = 384;
    assert_int_equal(tern_engine_submit(e, &r, &s), TERN_E_INVALID_ARG);
    assert_non_null(strstr(tern_last_error(), "vocabulary"));
    int32_t *t = NULL;
    size_t n = 0;
    int32_t skip = 0;
    assert_int_equal(tern_embed_tokenize(m, "x", 1, "passage", &t, &n, &skip), TERN_E_INVALID_ARG);
    assert_non_null(strstr(tern_last_error(), "'query'"));
    assert_null(t);
    tu_ok(tern_embed_tokenize(m, "x", 1, "", &t, &n, &skip)); /* "": no prompt */
    assert_int_equal(t[n - 1], 1);                             /* <|endoftext|> appended */
    tern_free_buf(t);
    tern_engine_destroy(e);
    tern_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),         cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_mean_pooling),   cmocka_unit_test(test_plain_model),
        cmocka_unit_test(test_headless),       cmocka_unit_test(test_unsupported_configs),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
