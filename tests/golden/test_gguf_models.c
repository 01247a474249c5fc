/*
 * test_gguf_models.c — small llama models written as GGUF files here (KBs
 * of blocks each: hidden 256, 4 heads of 64 over 2 kv heads, ff 512, vocab
 * 64, 2 layers), run through tern_model_open on the CPU:
 *
 *   - for each of Q8_0, Q4_0, Q4_1, Q4_K, Q6_K (every linear and the
 *     embedding of that type), and a model mixing them with an untied head:
 *     every position's logits are bitwise those of the same model
 *     dequantized to F32 and written as a safetensors snapshot in Hugging
 *     Face row order (the GGUF's q / k rows are in llama.cpp's order, as its
 *     converter permutes them): the ggml matmul and get_rows dequantize a
 *     row and dot it in the dense path's order, and the un-permutation is
 *     exact. The dequantization itself is checked against gguf-py in
 *     tests/quant/test_ggml_quant.c.
 *     Prefill in one chunk, in chunks of 3 and one token at a time agree
 *     bitwise (batch invariance).
 *   - with TERN_GGML_BF16=1 (what a backend without ggml kernels gets):
 *     bitwise the snapshot of the BF16-rounded dequantized weights.
 *   - bad files: a missing tensor, a wrong shape, a block-type norm, a type
 *     tern cannot dequantize, an unsupported architecture, a missing key, a
 *     file that is not GGUF: one-line errors naming the tensor or key.
 */
#include "../io/gguf_build.h"
#include "../io/st_build.h"
#include "tensor/ggml_quant.h"
#include "tern.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { E = 256, NH = 4, NKV = 2, HD = 64, FF = 512, V = 64, NL = 2 };

/* Options of a built model. */
struct opts {
    uint32_t type;          /* the linears' ggml type */
    bool mixed;             /* types rotate over the tensors; an untied output.weight */
    const char *arch;       /* general.architecture (default llama) */
    const char *omit;       /* a GGUF tensor left out */
    const char *short_rows; /* a GGUF tensor with half its rows */
    const char *norm_q8;    /* a norm written as Q8_0 */
    const char *iq2;        /* a linear written as IQ2_XXS (no dequantizer) */
    const char *omit_key;   /* a metadata key left out */
};

struct build {
    const struct opts *o;
    uint64_t rng;
    struct gb g;
    struct tern_str gdata;           /* the GGUF's data section */
    struct tern_str hdr, hdr_bf;     /* safetensors headers (F32, BF16 weights) */
    struct tern_str sdata, sdata_bf; /* their data */
    int n_tensors;
};

static uint8_t rbyte(struct build *b)
{
    return (uint8_t)((tu_frand(&b->rng) + 1.0f) * 127.99f);
}

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = tern_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* One random block of `type` whose values are a few hundredths: random
 * bytes, with the scales set small. */
static void rand_block(struct build *b, uint32_t type, uint8_t *p, int bytes)
{
    for (int i = 0; i < bytes; i++) p[i] = rbyte(b);
    float r = tu_frand(&b->rng);
    switch (type) {
    case TERN_GGML_Q8_0:
        put_f16(p, 5e-4f * (1.0f + 0.5f * r));
        break;
    case TERN_GGML_Q4_0:
        put_f16(p, 8e-3f * (1.0f + 0.5f * r));
        break;
    case TERN_GGML_Q4_1:
        put_f16(p, 8e-3f * (1.0f + 0.5f * r));
        put_f16(p + 2, -0.06f * (1.0f + 0.5f * r));
        break;
    case TERN_GGML_Q4_K:
        put_f16(p, 1e-4f * (1.0f + 0.5f * r));
        put_f16(p + 2, 1e-3f * (1.0f + 0.5f * r));
        break;
    case TERN_GGML_Q6_K:
        put_f16(p + 208, 2e-5f * (1.0f + 0.5f * r));
        break;
    default:
        break;
    }
}

/* Appends a safetensors entry (name, dtype, shape, bytes) to a header and data. */
static void st_entry(struct tern_str *hdr, struct tern_str *data, const char *name,
                     const char *dtype, int64_t rows, int64_t cols, const void *bytes, size_t n)
{
    tern_str_appendf(hdr, "%s\"%s\": {\"dtype\": \"%s\", \"shape\": [%lld%s",
                     hdr->len > 1 ? ", " : "", name, dtype, (long long)rows, cols ? ", " : "");
    if (cols) tern_str_appendf(hdr, "%lld", (long long)cols);
    tern_str_appendf(hdr, "], \"data_offsets\": [%zu, %zu]}", data->len, data->len + n);
    tern_str_append(data, bytes, n);
}

/* The GGUF row that holds Hugging Face row r of a q / k weight
 * (convert_hf_to_gguf.py's permute: GGUF row h*hd + 2i + a holds HF row
 * h*hd + a*hd/2 + i). */
static int64_t gguf_row(int64_t r)
{
    int64_t h = r / HD, i = r % HD, a = i / (HD / 2);
    return h * HD + 2 * (i % (HD / 2)) + a;
}

/* Adds a tensor [rows, cols] (cols 0: a vector) of ggml `type` to the GGUF
 * and its dequantized values to both snapshots. */
static void add(struct build *b, const char *gname, const char *hfname, int64_t rows, int64_t cols,
                uint32_t type)
{
    const struct opts *o = b->o;
    bool vec = cols == 0;
    int64_t n_cols = vec ? rows : cols, n_rows = vec ? 1 : rows;
    if (o->omit && !strcmp(o->omit, gname)) return;
    if (o->norm_q8 && !strcmp(o->norm_q8, gname)) type = TERN_GGML_Q8_0;
    if (o->iq2 && !strcmp(o->iq2, gname)) type = TERN_GGML_IQ2_XXS;
    int64_t g_rows = o->short_rows && !strcmp(o->short_rows, gname) ? n_rows / 2 : n_rows;
    uint64_t rb;
    assert_true(tern_ggml_row_bytes(type, n_cols, &rb));
    const struct tern_ggml_traits *t = tern_ggml_type_traits(type);
    uint8_t *blocks = tern_malloc((size_t)(rb * (uint64_t)n_rows));
    float *f = tern_calloc((size_t)(n_rows * n_cols), sizeof *f);
    uint16_t *bf = tern_malloc((size_t)(n_rows * n_cols) * 2);
    assert_true(blocks && f && bf);
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *row = blocks + r * (int64_t)rb;
        if (type == TERN_GGML_F32) {
            for (int64_t i = 0; i < n_cols; i++) {
                float v = 1.0f + 0.1f * tu_frand(&b->rng);
                memcpy(row + 4 * i, &v, 4);
            }
        } else {
            for (int64_t k = 0; k < n_cols / t->block; k++)
                rand_block(b, type, row + k * t->block_bytes, t->block_bytes);
        }
        if (t->dequant) assert_true(tern_ggml_dequant_row(type, row, f + r * n_cols, n_cols));
    }
    for (int64_t i = 0; i < n_rows * n_cols; i++) bf[i] = tern_f32_to_bf16(f[i]);
    /* GGUF: q / k rows in llama.cpp's order */
    bool rope = strstr(gname, "attn_q.") || strstr(gname, "attn_k.");
    uint8_t *grows = tern_malloc((size_t)(rb * (uint64_t)n_rows));
    for (int64_t r = 0; r < n_rows; r++)
        memcpy(grows + (rope ? gguf_row(r) : r) * (int64_t)rb, blocks + r * (int64_t)rb, rb);
    int64_t ne[2] = {n_cols, g_rows};
    gb_tensor(&b->g, gname, vec ? 1 : 2, ne, type, b->gdata.len);
    tern_str_append(&b->gdata, (const char *)grows, (size_t)(rb * (uint64_t)g_rows));
    while (b->gdata.len % 32) tern_str_append(&b->gdata, "", 1);
    /* snapshots: Hugging Face order; norms stay F32 in both */
    bool norm = vec || type == TERN_GGML_F32;
    size_t nb = (size_t)(n_rows * n_cols);
    st_entry(&b->hdr, &b->sdata, hfname, "F32", rows, vec ? 0 : cols, f, nb * 4);
    if (norm)
        st_entry(&b->hdr_bf, &b->sdata_bf, hfname, "F32", rows, vec ? 0 : cols, f, nb * 4);
    else
        st_entry(&b->hdr_bf, &b->sdata_bf, hfname, "BF16", rows, cols, bf, nb * 2);
    tern_free(blocks);
    tern_free(grows);
    tern_free(f);
    tern_free(bf);
    b->n_tensors++;
}

static const uint32_t mix[] = {TERN_GGML_Q8_0, TERN_GGML_Q4_0, TERN_GGML_Q4_1, TERN_GGML_Q4_K,
                               TERN_GGML_Q6_K};

static uint32_t linear_type(struct build *b)
{
    return b->o->mixed ? mix[b->n_tensors % 5] : b->o->type;
}

static void kv_u32(struct build *b, const char *arch, const char *key, uint32_t v)
{
    char k[96];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (!b->o->omit_key || strcmp(b->o->omit_key, k)) gb_kv_u32(&b->g, k, v);
}

/* Writes the GGUF (returns its path) and, when dir_f32 / dir_bf16 are not
 * NULL, the two snapshots (their directories). */
static char *build_model(const struct opts *o, char **dir_f32, char **dir_bf16)
{
    struct build b = {.o = o, .rng = 0x1234567 + o->type * 77 + o->mixed};
    const char *arch = o->arch ? o->arch : "llama";
    gb_begin(&b.g, 3);
    gb_kv_str(&b.g, "general.architecture", arch);
    kv_u32(&b, arch, "block_count", NL);
    kv_u32(&b, arch, "embedding_length", E);
    kv_u32(&b, arch, "feed_forward_length", FF);
    kv_u32(&b, arch, "attention.head_count", NH);
    kv_u32(&b, arch, "attention.head_count_kv", NKV);
    kv_u32(&b, arch, "context_length", 256);
    char k[96];
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch);
    gb_kv_f32(&b.g, k, 1e-5f);
    snprintf(k, sizeof k, "%s.rope.freq_base", arch);
    gb_kv_f32(&b.g, k, 10000.0f);
    tern_str_appendz(&b.hdr, "{");
    tern_str_appendz(&b.hdr_bf, "{");
    add(&b, "token_embd.weight", "model.embed_tokens.weight", V, E, linear_type(&b));
    for (int l = 0; l < NL; l++) {
        static const struct {
            const char *g, *h;
            int64_t rows, cols;
        } parts[] = {
            {"attn_norm", "input_layernorm", E, 0},
            {"attn_q", "self_attn.q_proj", NH * HD, E},
            {"attn_k", "self_attn.k_proj", NKV * HD, E},
            {"attn_v", "self_attn.v_proj", NKV * HD, E},
            {"attn_output", "self_attn.o_proj", E, NH * HD},
            {"ffn_norm", "post_attention_layernorm", E, 0},
            {"ffn_gate", "mlp.gate_proj", FF, E},
            {"ffn_up", "mlp.up_proj", FF, E},
            {"ffn_down", "mlp.down_proj", E, FF},
        };
        for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) {
            char gn[64], hn[96];
            snprintf(gn, sizeof gn, "blk.%d.%s.weight", l, parts[p].g);
            snprintf(hn, sizeof hn, "model.layers.%d.%s.weight", l, parts[p].h);
            add(&b, gn, hn, parts[p].rows, parts[p].cols,
                parts[p].cols ? linear_type(&b) : TERN_GGML_F32);
        }
    }
    add(&b, "output_norm.weight", "model.norm.weight", E, 0, TERN_GGML_F32);
    if (o->mixed) add(&b, "output.weight", "lm_head.weight", V, E, TERN_GGML_Q6_K);
    tern_str_appendz(&b.hdr, "}");
    tern_str_appendz(&b.hdr_bf, "}");
    gb_align(&b.g, 32);
    gb_raw(&b.g, b.gdata.data, b.gdata.len);
    size_t len;
    uint8_t *img = gb_end(&b.g, &len);
    char *path = tu_write_temp("m.gguf", img, len);
    tern_free(img);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
             "\"num_hidden_layers\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, "
             "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"vocab_size\": %d, "
             "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
             "\"tie_word_embeddings\": %s}",
             NL, E, FF, NH, NKV, V, o->mixed ? "false" : "true");
    struct tern_str *hdrs[2] = {&b.hdr, &b.hdr_bf}, *datas[2] = {&b.sdata, &b.sdata_bf};
    char **dirs[2] = {dir_f32, dir_bf16};
    for (int i = 0; i < 2; i++) {
        if (!dirs[i]) continue;
        *dirs[i] = tu_temp_dir(i ? "gguf-bf16" : "gguf-f32");
        stb_write_in(*dirs[i], "config.json", cfg, strlen(cfg));
        stb_write_st_in(*dirs[i], "model.safetensors", hdrs[i]->data, datas[i]->data,
                        datas[i]->len);
    }
    tern_str_deinit(&b.gdata);
    for (int i = 0; i < 2; i++) {
        tern_str_deinit(hdrs[i]);
        tern_str_deinit(datas[i]);
    }
    return path;
}

static const int32_t prompt[] = {1, 5, 9, 33, 2, 63, 17};
enum { NP = sizeof prompt / sizeof prompt[0] };

/* Every position's logits of `path` on the CPU (chunks of 3, KV blocks of 4). */
static float *logits_of(const char *path, char *dtype, size_t cap)
{
    struct tern_model *m = NULL;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CPU;
    if (tern_model_open(path, &mp, &m) != TERN_OK) fail_msg("%s: %s", path, tern_last_error());
    struct tern_model_info in;
    tu_ok(tern_model_get_info(m, &in));
    assert_int_equal(in.vocab_size, V);
    assert_int_equal(in.n_params, (int64_t)V * E * (in.tied_embeddings ? 1 : 2) +
                                      NL * (2 * E + 2 * (int64_t)NH * HD * E +
                                            2 * (int64_t)NKV * HD * E + 3 * (int64_t)FF * E) +
                                      E);
    snprintf(dtype, cap, "%s", in.dtype);
    float *l = tu_model_logits(m, prompt, NP, V, 3, 4);
    /* batch invariance: one token at a time, and the whole prompt at once */
    for (int chunk = 1; chunk <= NP; chunk += NP - 1) {
        float *c = tu_model_logits(m, prompt, NP, V, chunk, 4);
        if (memcmp(c, l, sizeof(float) * NP * V))
            fail_msg("%s: logits in chunks of %d differ from chunks of 3", path, chunk);
        tern_free(c);
    }
    tern_model_close(m);
    return l;
}

static void check_same(const char *what, const float *got, const float *want)
{
    float lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < NP * V; i++) {
        if (!isfinite(got[i])) fail_msg("%s: logit %d is %g", what, i, got[i]);
        lo = fminf(lo, got[i]);
        hi = fmaxf(hi, got[i]);
    }
    if (!(hi - lo > 1e-3f)) fail_msg("%s: logits span only [%g, %g]", what, lo, hi);
    for (int i = 0; i < NP * V; i++)
        if (memcmp(&got[i], &want[i], 4))
            fail_msg("%s: logit %d (position %d) is %.9g, the dequantized model's %.9g", what, i,
                     i / V, got[i], want[i]);
}

static void check_model(const struct opts *o, const char *name)
{
    char *f32_dir, *bf16_dir, dt[32], dt_ref[32];
    char *path = build_model(o, &f32_dir, &bf16_dir);
    float *got = logits_of(path, dt, sizeof dt);
    float *want = logits_of(f32_dir, dt_ref, sizeof dt_ref);
    printf("  %-6s dtype %-5s logits[0][0..2] %.6f %.6f %.6f\n", name, dt, got[0], got[1], got[2]);
    if (!o->mixed) assert_string_equal(dt, tern_ggml_type_name(o->type));
    assert_string_equal(dt_ref, "f32");
    check_same(name, got, want);
    tern_free(got);
    tern_free(want);
    /* what a backend without ggml kernels runs: the BF16-rounded weights */
    setenv("TERN_GGML_BF16", "1", 1);
    got = logits_of(path, dt, sizeof dt);
    unsetenv("TERN_GGML_BF16");
    want = logits_of(bf16_dir, dt_ref, sizeof dt_ref);
    assert_string_equal(dt, "bf16");
    check_same(name, got, want);
    tern_free(got);
    tern_free(want);
    stb_remove(path);
    stb_remove_dir(f32_dir);
    stb_remove_dir(bf16_dir);
}

static void test_types(void **state)
{
    (void)state;
    static const uint32_t types[] = {TERN_GGML_Q8_0, TERN_GGML_Q4_0, TERN_GGML_Q4_1, TERN_GGML_Q4_K,
                                     TERN_GGML_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        struct opts o = {.type = types[i]};
        check_model(&o, tern_ggml_type_name(types[i]));
    }
    struct opts o = {.mixed = true};
    check_model(&o, "mixed");
}

/* tern_model_open of a bad file: status and the message's parts. */
static void expect_bad(const struct opts *o, enum tern_status want, const char *a, const char *b)
{
    char *path = build_model(o, NULL, NULL);
    struct tern_model *m = NULL;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CPU;
    stb_expect(tern_model_open(path, &mp, &m), want, "m.gguf", a, b, NULL);
    assert_null(m);
    stb_remove(path);
}

static void test_bad(void **state)
{
    (void)state;
    struct opts o = {.type = TERN_GGML_Q4_0, .omit = "blk.1.ffn_up.weight"};
    expect_bad(&o, TERN_E_NOT_FOUND,
               "tensor 'blk.1.ffn_up.weight' (model.layers.1.mlp.up_proj.weight)", "not found");
    o = (struct opts){.type = TERN_GGML_Q8_0, .short_rows = "blk.0.attn_v.weight"};
    expect_bad(&o, TERN_E_FORMAT,
               "tensor 'blk.0.attn_v.weight' (model.layers.0.self_attn.v_proj.weight) has shape "
               "[64, 256]",
               "config expects [128, 256]");
    o = (struct opts){.type = TERN_GGML_Q4_1, .norm_q8 = "blk.1.ffn_norm.weight"};
    expect_bad(&o, TERN_E_FORMAT, "tensor 'blk.1.ffn_norm.weight'",
               "has ggml type Q8_0, which this layer cannot use");
    o = (struct opts){.type = TERN_GGML_Q4_K, .iq2 = "blk.0.ffn_down.weight"};
    expect_bad(&o, TERN_E_UNSUPPORTED, "tensor 'blk.0.ffn_down.weight'",
               "has ggml type IQ2_XXS, which tern cannot dequantize");
    o = (struct opts){.type = TERN_GGML_Q8_0, .arch = "gpt2"};
    expect_bad(&o, TERN_E_UNSUPPORTED, "general.architecture 'gpt2' is not supported", NULL);
    o = (struct opts){.type = TERN_GGML_Q8_0, .omit_key = "llama.feed_forward_length"};
    expect_bad(&o, TERN_E_NOT_FOUND, "'llama.feed_forward_length'", NULL);
    /* a regular file that is not GGUF */
    char *path = tu_write_temp("x.gguf", "not a model", 11);
    struct tern_model *m = NULL;
    stb_expect(tern_model_open(path, NULL, &m), TERN_E_FORMAT, "x.gguf", "not GGUF", NULL);
    stb_remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
