/*
 * test_quant.c — the MLX affine format against MLX itself:
 *
 * 1. tests/fixtures/quant/cases.safetensors holds mx.quantize / mx.dequantize
 *    of a [4, 128] matrix (with a constant group, a zero group, exact rint
 *    ties and an outlier) for every bits x group size in bf16 and a few in
 *    f16 / f32: tern_quant_affine_row must give the same weight, scales and
 *    biases bytes, and tern_quant_dequant_row the same values (to the
 *    rounding of MLX's half-precision arithmetic).
 * 2. `tern_quantize` on each quantized fixture's source model, with the
 *    recipe in its golden/meta.json, must give every tensor of mlx-lm's
 *    converter output byte for byte (names, dtypes, shapes, data), and the
 *    same config.json quantization block.
 */
#include "testutil.h"

#include "io/config.h"
#include "io/safetensors.h"
#include "tensor/quant.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A view whose data is an aligned copy (MLX does not pad its headers, so
 * mapped tensors may be misaligned); free v->data with tern_free. */
static void view_of(struct tern_st_file *f, const char *name, struct tern_tensor_view *v)
{
    const struct tern_st_header *h = tern_st_file_header(f);
    const struct tern_st_entry *e = tern_st_header_find(h, name);
    if (!e) fail_msg("cases: no tensor '%s'", name);
    tern_st_file_view(f, (size_t)(e - h->entries), v);
    void *copy = tern_malloc(v->n_bytes);
    memcpy(copy, v->data, v->n_bytes);
    v->data = copy;
}

static void check_case(struct tern_st_file *f, const char *dt, int bits, int g)
{
    char k[64];
    struct tern_tensor_view w, q, s, b, deq;
    snprintf(k, sizeof k, "%s.w", dt);
    view_of(f, k, &w);
#define GET(suffix, v) (snprintf(k, sizeof k, "%s.b%dg%d." suffix, dt, bits, g), view_of(f, k, v))
    GET("weight", &q);
    GET("scales", &s);
    GET("biases", &b);
    GET("deq", &deq);
#undef GET
    int64_t rows = w.shape[0], n = w.shape[1], ng = n / g, words = n * bits / 32;
    float row[128], sc[4], bi[4], out[128];
    uint32_t qw[128];
    uint8_t sb[16], bb[16];
    double max_rel = 0;
    for (int64_t r = 0; r < rows; r++) {
        tern_to_f32(w.dtype, (const char *)w.data + (size_t)(r * n) * tern_dtype_size(w.dtype), row,
                    (size_t)n);
        tern_quant_affine_row(row, n, bits, g, qw, sc, bi);
        size_t es = tern_dtype_size(s.dtype);
        for (int64_t j = 0; j < ng; j++) {
            tern_quant_store_half(s.dtype, sb, j, sc[j]);
            tern_quant_store_half(s.dtype, bb, j, bi[j]);
        }
        if (memcmp(qw, (const uint32_t *)q.data + r * words, (size_t)words * 4))
            fail_msg("%s b%d g%d row %lld: packed weights differ from mx.quantize", dt, bits, g,
                     (long long)r);
        if (memcmp(sb, (const char *)s.data + (size_t)(r * ng) * es, (size_t)ng * es) ||
            memcmp(bb, (const char *)b.data + (size_t)(r * ng) * es, (size_t)ng * es))
            fail_msg("%s b%d g%d row %lld: scales/biases differ from mx.quantize", dt, bits, g,
                     (long long)r);
        tern_quant_dequant_row((const uint32_t *)q.data + r * words,
                               (const char *)s.data + (size_t)(r * ng) * es,
                               (const char *)b.data + (size_t)(r * ng) * es, s.dtype, n, bits, g,
                               out);
        const float *ref = (const float *)deq.data + r * n;
        float bias_f[4];
        tern_to_f32(b.dtype, (const char *)b.data + (size_t)(r * ng) * es, bias_f, (size_t)ng);
        for (int64_t i = 0; i < n; i++) {
            /* MLX computes scale * q + bias in the scales' dtype: at most two
             * roundings, each half an ulp of |scale * q| or of the result. */
            double mag = fabs(out[i]) + 2.0 * fabs(bias_f[i / g]) + fabs(ref[i]);
            double d = fabs((double)out[i] - ref[i]) / fmax(mag, 1e-30);
            if (d > max_rel) max_rel = d;
        }
    }
    tern_free((void *)w.data);
    tern_free((void *)q.data);
    tern_free((void *)s.data);
    tern_free((void *)b.data);
    tern_free((void *)deq.data);
    double tol = s.dtype == TERN_DTYPE_BF16 ? 0x1p-8 : s.dtype == TERN_DTYPE_F16 ? 0x1p-11 : 1e-7;
    if (max_rel > tol) fail_msg("%s b%d g%d: dequantized error %.2e > %.2e", dt, bits, g, max_rel, tol);
}

static void test_mx_cases(void **state)
{
    (void)state;
    char *path = tu_fixture("quant/cases.safetensors");
    struct tern_st_file *f = NULL;
    if (tern_st_file_open(path, &f) != TERN_OK) fail_msg("%s", tern_last_error());
    static const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    int n = 0;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 3; j++, n++) check_case(f, "bfloat16", bits[i], groups[j]);
    const char *dts[] = {"float16", "float32"};
    for (int d = 0; d < 2; d++) {
        check_case(f, dts[d], 4, 64);
        check_case(f, dts[d], 3, 32);
        check_case(f, dts[d], 8, 128);
        n += 3;
    }
    printf("  %d mx.quantize cases byte-identical\n", n);
    tern_st_file_close(f);
    tern_free(path);
}

/* Every tensor of file a equals the one of the same name in file b. */
static void same_tensors(const char *a_path, const char *b_path)
{
    struct tern_st_file *a = NULL, *b = NULL;
    if (tern_st_file_open(a_path, &a) != TERN_OK || tern_st_file_open(b_path, &b) != TERN_OK)
        fail_msg("%s", tern_last_error());
    const struct tern_st_header *ha = tern_st_file_header(a), *hb = tern_st_file_header(b);
    if (ha->n_entries != hb->n_entries)
        fail_msg("%s has %zu tensors, mlx-lm wrote %zu", a_path, ha->n_entries, hb->n_entries);
    for (size_t i = 0; i < ha->n_entries; i++) {
        struct tern_tensor_view va, vb;
        tern_st_file_view(a, i, &va);
        tern_st_file_view(b, i, &vb);
        bool same = !strcmp(va.name, vb.name) && va.dtype == vb.dtype && va.n_dims == vb.n_dims &&
                    !memcmp(va.shape, vb.shape, sizeof(int64_t) * (size_t)va.n_dims) &&
                    va.n_bytes == vb.n_bytes && !memcmp(va.data, vb.data, va.n_bytes);
        if (!same) fail_msg("%s: tensor '%s' differs from mlx-lm's '%s'", a_path, va.name, vb.name);
    }
    tern_st_file_close(a);
    tern_st_file_close(b);
}

static void quantize_like(const char *dir)
{
    char *meta_path = tern_path_join(dir, "golden/meta.json");
    struct tern_json_doc meta = {0};
    if (tern_json_doc_load(meta_path, &meta) != TERN_OK) fail_msg("%s", tern_last_error());
    const json_t *q = json_object_get(meta.root, "quantization"), *ov = json_object_get(meta.root, "override");
    if (json_is_false(json_object_get(meta.root, "tern_quantize"))) {
        /* mlx-lm stacked the experts and quantized the routers by its model's own
         * predicate: tern quantize writes one tensor per source tensor */
        printf("  %-20s (made by mlx-lm's MoE conversion; tern quantize does not stack experts)\n",
               strrchr(dir, '/') + 1);
        tern_json_doc_deinit(&meta);
        tern_free(meta_path);
        return;
    }
    struct tern_quantize_params p = tern_quantize_default_params();
    p.bits = (int32_t)json_integer_value(json_object_get(q, "bits"));
    p.group_size = (int32_t)json_integer_value(json_object_get(q, "group_size"));
    struct tern_quantize_override o[16];
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)ov, key, val)
    {
        assert_true(p.n_overrides < 16);
        o[p.n_overrides++] = (struct tern_quantize_override){
            .module = key, .bits = (int32_t)json_integer_value(json_object_get(val, "bits")),
            .group_size = (int32_t)json_integer_value(json_object_get(val, "group_size"))};
    }
    p.overrides = o;
    char *src = tu_fixture(json_string_value(json_object_get(meta.root, "source")) + strlen("tests/fixtures/"));
    char *tmp = tu_temp_dir("quant"), *out = tern_path_join(tmp, "out");
    if (tern_quantize(src, out, &p) != TERN_OK) fail_msg("%s: %s", dir, tern_last_error());
    char *a = tern_path_join(out, "model.safetensors"), *b = tern_path_join(dir, "model.safetensors");
    same_tensors(a, b);
    char *ca = tern_path_join(out, "config.json"), *cb = tern_path_join(dir, "config.json");
    struct tern_json_doc ja = {0}, jb = {0};
    assert_int_equal(tern_json_doc_load(ca, &ja), TERN_OK);
    assert_int_equal(tern_json_doc_load(cb, &jb), TERN_OK);
    assert_true(json_equal(json_object_get(ja.root, "quantization"), json_object_get(jb.root, "quantization")));
    assert_true(json_equal(json_object_get(ja.root, "quantization_config"),
                           json_object_get(jb.root, "quantization_config")));
    printf("  %-20s tern quantize == mlx-lm convert, every tensor\n", strrchr(dir, '/') + 1);
    tern_json_doc_deinit(&ja);
    tern_json_doc_deinit(&jb);
    tern_free(ca);
    tern_free(cb);
    tern_free(a);
    tern_free(b);
    tern_free(out);
    tern_free(tmp);
    tern_free(src);
    tern_json_doc_deinit(&meta);
    tern_free(meta_path);
}

static void test_tern_quantize(void **state)
{
    (void)state;
    char *root = tu_fixture("quant");
    DIR *d = opendir(root);
    assert_non_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *dir = tern_path_join(root, de->d_name), *m = tern_path_join(dir, "golden/meta.json");
        if (tern_file_exists(m)) {
            quantize_like(dir);
            n++;
        }
        tern_free(m);
        tern_free(dir);
    }
    closedir(d);
    assert_true(n >= 7);
    tern_free(root);
}

static void test_bad_params(void **state)
{
    (void)state;
    struct tern_quantize_params p = tern_quantize_default_params();
    p.bits = 7;
    char *src = tu_fixture("models/tiny-llama");
    assert_int_equal(tern_quantize(src, "/nonexistent/x", &p), TERN_E_INVALID_ARG);
    p.bits = 4;
    p.mode = "mxfp4";
    assert_int_equal(tern_quantize(src, "/nonexistent/x", &p), TERN_E_UNSUPPORTED);
    tern_free(src);
}

/* The `tern quantize` command: output opens, bad bits name themselves. */
static void test_cli(void **state)
{
    (void)state;
    char *src = tu_fixture("models/tiny-qwen2"), *tmp = tu_temp_dir("quant-cli");
    char *dst = tern_path_join(tmp, "q8");
    struct tern_str cmd = {0};
    tern_str_appendf(&cmd, "'%s' quantize --model '%s' --out '%s' --bits 8 --group-size 32 "
                     "--keep lm_head --override model.layers.0.mlp.up_proj=4:32",
                     TERN_BIN, src, dst);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd.data, &out, &err);
    if (rc != 0) fail_msg("tern quantize: rc %d: %s", rc, err);
    struct tern_model *m = NULL;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CPU;
    if (tern_model_open(dst, &mp, &m) != TERN_OK) fail_msg("%s", tern_last_error());
    struct tern_model_info in;
    tern_model_get_info(m, &in);
    assert_true(in.dtype[0] == 'q');
    tern_model_close(m);
    tern_free(out);
    tern_free(err);
    tern_str_clear(&cmd);
    tern_str_appendf(&cmd, "'%s' quantize --model '%s' --out '%s/x' --bits 7", TERN_BIN, src, tmp);
    rc = tu_run(cmd.data, &out, &err);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "bits 7"));
    tern_free(out);
    tern_free(err);
    tern_str_deinit(&cmd);
    tern_free(dst);
    tern_free(tmp);
    tern_free(src);
}

/* Loads llama-q4g64's weights with an edited config.json (jansson edit of
 * the quantization block); returns the status and copies the message. */
static enum tern_status open_with(const char *what, void (*edit)(json_t *q), char *msg, size_t len)
{
    char *src = tu_fixture("quant/llama-q4g64"), *tmp = tu_temp_dir(what);
    char *cfg_src = tern_path_join(src, "config.json"), *cfg_dst = tern_path_join(tmp, "config.json");
    char *st_src = tern_path_join(src, "model.safetensors"), *st_dst = tern_path_join(tmp, "model.safetensors");
    assert_int_equal(symlink(st_src, st_dst), 0);
    json_t *root = json_load_file(cfg_src, 0, NULL);
    assert_non_null(root);
    edit(json_object_get(root, "quantization"));
    json_object_set(root, "quantization_config", json_object_get(root, "quantization"));
    assert_int_equal(json_dump_file(root, cfg_dst, 0), 0);
    json_decref(root);
    struct tern_model *m = NULL;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CPU;
    enum tern_status st = tern_model_open(tmp, &mp, &m);
    snprintf(msg, len, "%s", st == TERN_OK ? "" : tern_last_error());
    tern_model_close(m);
    remove(st_dst);
    remove(cfg_dst);
    remove(tmp);
    tern_free(src), tern_free(tmp), tern_free(cfg_src), tern_free(cfg_dst), tern_free(st_src),
        tern_free(st_dst);
    return st;
}

static void bits8(json_t *q) { json_object_set_new(q, "bits", json_integer(8)); }
static void group32(json_t *q) { json_object_set_new(q, "group_size", json_integer(32)); }
static void bits7(json_t *q) { json_object_set_new(q, "bits", json_integer(7)); }
static void mxfp4(json_t *q) { json_object_set_new(q, "mode", json_string("mxfp4")); }
static void embed_off(json_t *q) { json_object_set_new(q, "model.embed_tokens", json_false()); }
static void dense_override(json_t *q)
{
    json_t *o = json_object();
    json_object_set_new(o, "bits", json_integer(4));
    json_object_set_new(o, "group_size", json_integer(64));
    json_object_set_new(q, "model.layers.0.mlp.down_proj", o); /* 176 inputs: left dense by mlx-lm */
}

/* Validation: each broken config is refused with a message naming the tensor or key. */
static void test_load_errors(void **state)
{
    (void)state;
    struct {
        const char *tag;
        void (*edit)(json_t *);
        enum tern_status st;
        const char *needle;
    } cases[] = {
        {"bits8", bits8, TERN_E_FORMAT, "model.embed_tokens.weight' has shape [384, 8], config expects [384, 16]"},
        {"group32", group32, TERN_E_FORMAT, "model.embed_tokens.scales' has shape [384, 1], config expects [384, 2]"},
        {"bits7", bits7, TERN_E_UNSUPPORTED, "7 bits"},
        {"mxfp4", mxfp4, TERN_E_UNSUPPORTED, "mode"},
        {"embedoff", embed_off, TERN_E_FORMAT, "'model.embed_tokens' is quantized (has .scales)"},
        {"dense", dense_override, TERN_E_FORMAT, "no 'model.layers.0.mlp.down_proj.scales'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[512];
        enum tern_status st = open_with(cases[i].tag, cases[i].edit, msg, sizeof msg);
        printf("  %-9s -> %s\n", cases[i].tag, msg);
        assert_int_equal(st, cases[i].st);
        if (!strstr(msg, cases[i].needle)) fail_msg("%s: '%s' lacks '%s'", cases[i].tag, msg, cases[i].needle);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_mx_cases),
                                       cmocka_unit_test(test_tern_quantize),
                                       cmocka_unit_test(test_bad_params), cmocka_unit_test(test_cli),
                                       cmocka_unit_test(test_load_errors)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
