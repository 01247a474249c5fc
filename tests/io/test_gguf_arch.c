/*
 * test_gguf_arch.c — a GGUF as a Hugging Face snapshot (io/gguf_arch.h):
 * tensor names, the q / k row order, the synthesized config.json (read back
 * by the model's own hyperparameter reader), the view of a whole file, and
 * the special token ids; on small files made here and on SmolLM2 when
 * present.
 */
#include "gguf_build.h"
#include "st_build.h"
#include "io/gguf_arch.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

static void test_names(void **state)
{
    (void)state;
    static const char *const map[][2] = {
        {"token_embd.weight", "model.embed_tokens.weight"},
        {"output_norm.weight", "model.norm.weight"},
        {"output.weight", "lm_head.weight"},
        {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
        {"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"},
        {"blk.7.attn_q.bias", "model.layers.7.self_attn.q_proj.bias"},
        {"blk.12.attn_k.weight", "model.layers.12.self_attn.k_proj.weight"},
        {"blk.3.attn_v.weight", "model.layers.3.self_attn.v_proj.weight"},
        {"blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight"},
        {"blk.3.attn_q_norm.weight", "model.layers.3.self_attn.q_norm.weight"},
        {"blk.3.attn_k_norm.weight", "model.layers.3.self_attn.k_norm.weight"},
        {"blk.3.ffn_norm.weight", "model.layers.3.post_attention_layernorm.weight"},
        {"blk.3.ffn_gate.weight", "model.layers.3.mlp.gate_proj.weight"},
        {"blk.3.ffn_up.weight", "model.layers.3.mlp.up_proj.weight"},
        {"blk.3.ffn_down.weight", "model.layers.3.mlp.down_proj.weight"},
    };
    char buf[128];
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (!tern_gguf_hf_name(map[i][0], buf, sizeof buf)) fail_msg("%s: no name", map[i][0]);
        assert_string_equal(buf, map[i][1]);
    }
    static const char *const none[] = {"rope_freqs.weight",
                                       "blk.x.attn_q.weight",
                                       "blk.01.attn_q.weight",
                                       "blk..attn_q.weight",
                                       "blk.0.attn_q",
                                       "blk.0.ffn_gate_exps.weight",
                                       "token_embd.scales",
                                       "output",
                                       "blk.0.attn_q.weight.extra"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (tern_gguf_hf_name(none[i], buf, sizeof buf)) fail_msg("%s: named %s", none[i], buf);
    assert_false(tern_gguf_hf_name("blk.3.ffn_down.weight", buf, 20)); /* does not fit */
}

/* convert_hf_to_gguf.py's permute: reshape(n_head, 2, hd / 2, ...),
 * swapaxes(1, 2), reshape back. GGUF row h*hd + 2b + a <- HF row h*hd + a*hd/2 + b. */
static void permute_rows(const uint8_t *hf, uint8_t *gguf, int64_t n_rows, size_t row_bytes,
                         int64_t hd)
{
    for (int64_t h = 0; h < n_rows / hd; h++)
        for (int64_t a = 0; a < 2; a++)
            for (int64_t b = 0; b < hd / 2; b++)
                memcpy(gguf + (size_t)(h * hd + 2 * b + a) * row_bytes,
                       hf + (size_t)(h * hd + a * hd / 2 + b) * row_bytes, row_bytes);
}

static void test_unpermute(void **state)
{
    (void)state;
    /* 3 heads of 8, rows of 18 bytes (one Q4_0 block each) */
    enum { HD = 8, ROWS = 24, RB = 18 };
    uint8_t hf[ROWS * RB], gg[ROWS * RB], back[ROWS * RB];
    for (int i = 0; i < ROWS * RB; i++) hf[i] = (uint8_t)(i * 13 + i / RB);
    permute_rows(hf, gg, ROWS, RB, HD);
    assert_memory_not_equal(hf, gg, sizeof hf);
    tern_gguf_rows_unpermute(gg, back, ROWS, RB, HD);
    assert_memory_equal(hf, back, sizeof hf);
    /* first head: HF rows 0..7 are GGUF rows 0 2 4 6 1 3 5 7 */
    static const int64_t want[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    for (int r = 0; r < 8; r++) assert_int_equal(tern_gguf_rope_src_row(r, HD), want[r]);
    assert_int_equal(tern_gguf_rope_src_row(8 + 5, HD), 8 + 3);
}

/* ---------------------------------------------------------------- small models */

/* A two-layer model of `arch`: hidden 8, 2 heads (1 kv head) of 4, ff 16,
 * vocab 6, F32 tensors; options add output.weight, rope_freqs, a key_length. */
enum { OPT_OUTPUT = 1, OPT_ROPE_FREQS = 2, OPT_KEY_LEN = 4, OPT_BAD_KEY_LEN = 8, OPT_YARN = 16 };

struct tdef {
    const char *name;
    int64_t ne0, ne1;
};

static uint8_t *small_model(const char *arch, int opts, size_t *len)
{
    struct gb b;
    char key[96];
#define K(s) (snprintf(key, sizeof key, "%s.%s", arch, s), key)
    gb_begin(&b, 3);
    gb_kv_str(&b, "general.architecture", arch);
    gb_kv_u32(&b, K("block_count"), 2);
    gb_kv_u32(&b, K("embedding_length"), 8);
    gb_kv_u32(&b, K("feed_forward_length"), 16);
    gb_kv_u32(&b, K("attention.head_count"), 2);
    gb_kv_u32(&b, K("attention.head_count_kv"), 1);
    gb_kv_u32(&b, K("context_length"), 128);
    gb_kv_f32(&b, K("attention.layer_norm_rms_epsilon"), 1e-6f);
    gb_kv_f32(&b, K("rope.freq_base"), 5000.0f);
    if (opts & (OPT_KEY_LEN | OPT_BAD_KEY_LEN)) {
        gb_kv_u32(&b, K("attention.key_length"), 4);
        gb_kv_u32(&b, K("attention.value_length"), opts & OPT_BAD_KEY_LEN ? 8 : 4);
        gb_kv_u32(&b, K("rope.dimension_count"), 2);
    }
    if (opts & OPT_YARN) {
        gb_kv_str(&b, K("rope.scaling.type"), "yarn");
        gb_kv_f32(&b, K("rope.scaling.factor"), 4.0f);
        gb_kv_u32(&b, K("rope.scaling.original_context_length"), 32);
    }
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_arr(&b, "tokenizer.ggml.tokens", TERN_GGUF_STRING, 6);
    static const char *toks[] = {"a", "b", "<|im_end|>", "<|eot_id|>", "<s>", "<|eom_id|>"};
    for (int i = 0; i < 6; i++) gb_str(&b, toks[i]);
    gb_kv_arr(&b, "tokenizer.ggml.token_type", TERN_GGUF_INT32, 6);
    for (int i = 0; i < 6; i++) gb_u32(&b, i < 2 ? 1 : 3);
    gb_kv_u32(&b, "tokenizer.ggml.bos_token_id", 4);
    gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
    gb_kv_u32(&b, "tokenizer.ggml.eom_token_id", 5);
    gb_kv_u32(&b, "tokenizer.ggml.padding_token_id", 99); /* outside: dropped */
    /* tensors, F32, laid out back to back (every size a multiple of 32 bytes) */
    struct tdef ts[32];
    int n = 0;
    ts[n++] = (struct tdef){"token_embd.weight", 8, 6};
    ts[n++] = (struct tdef){"output_norm.weight", 8, 1};
    if (opts & OPT_OUTPUT) ts[n++] = (struct tdef){"output.weight", 8, 6};
    if (opts & OPT_ROPE_FREQS) ts[n++] = (struct tdef){"rope_freqs.weight", 8, 1};
    static char names[2][11][40];
    static const char *parts[] = {"attn_norm",   "attn_q",      "attn_k",     "attn_v",
                                  "attn_output", "ffn_norm",    "ffn_gate",   "ffn_up",
                                  "ffn_down",    "attn_q_norm", "attn_k_norm"};
    static const int64_t shp[][2] = {{8, 1},  {8, 8},  {8, 4},  {8, 4}, {8, 8}, {8, 1},
                                     {8, 16}, {8, 16}, {16, 8}, {4, 1}, {4, 1}};
    bool qk_norm = !strcmp(arch, "qwen3");
    for (int l = 0; l < 2; l++)
        for (int p = 0; p < (qk_norm ? 11 : 9); p++) {
            snprintf(names[l][p], sizeof names[l][p], "blk.%d.%s.weight", l, parts[p]);
            ts[n++] = (struct tdef){names[l][p], shp[p][0], shp[p][1]};
        }
    ts[n++] = (struct tdef){"blk.0.ffn_gate_exps.weight", 8, 1}; /* no HF name */
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        gb_tensor(&b, ts[i].name, ts[i].ne1 > 1 ? 2 : 1, ne, 0, off);
        off += (uint64_t)(ts[i].ne0 * ts[i].ne1 * 4 + 31) / 32 * 32;
    }
    gb_align(&b, 32);
    for (uint64_t i = 0; i < off / 4; i++) gb_f32(&b, (float)i);
    return gb_end(&b, len);
#undef K
}

/* Writes the image to a file and opens the view. */
static enum tern_status open_model(const char *arch, int opts, struct tern_gguf_model **m,
                                   char **path)
{
    size_t len;
    uint8_t *img = small_model(arch, opts, &len);
    *path = tu_write_temp("m.gguf", img, len);
    tern_free(img);
    return tern_gguf_model_open(*path, m);
}

static void check_hparams(const struct tern_json_doc *cfg, const char *hf_arch,
                          struct tern_hparams *hp)
{
    const json_t *a = json_array_get(json_object_get(cfg->root, "architectures"), 0);
    assert_string_equal(json_string_value(a), hf_arch);
    const struct tern_arch *arch = tern_arch_find(hf_arch);
    assert_non_null(arch);
    tu_ok(tern_hparams_read(cfg, arch, hp));
}

static void test_small_llama(void **state)
{
    (void)state;
    struct tern_gguf_model *m;
    char *path;
    tu_ok(open_model("llama", 0, &m, &path));
    struct tern_hparams hp;
    check_hparams(&m->config, "LlamaForCausalLM", &hp);
    assert_int_equal(hp.num_hidden_layers, 2), assert_int_equal(hp.hidden_size, 8);
    assert_int_equal(hp.intermediate_size, 16), assert_int_equal(hp.num_attention_heads, 2);
    assert_int_equal(hp.num_key_value_heads, 1), assert_int_equal(hp.head_dim, 4);
    assert_int_equal(hp.vocab_size, 6), assert_int_equal(hp.max_position_embeddings, 128);
    assert_true(hp.rms_norm_eps == 1e-6f), assert_true(hp.ropes[0].theta == 5000.0);
    assert_true(hp.tie_word_embeddings);
    assert_int_equal(hp.bos_token_id, 4);
    /* eos, then the <|eot_id|> control token (no eot key), then eom */
    assert_int_equal(hp.n_eos, 3);
    assert_int_equal(hp.eos_token_ids[0], 2), assert_int_equal(hp.eos_token_ids[1], 3);
    assert_int_equal(hp.eos_token_ids[2], 5);
    assert_null(json_object_get(m->config.root, "pad_token_id"));
    assert_non_null(strstr(m->config.path, "m.gguf (GGUF metadata as config.json)"));

    assert_int_equal(m->n_weights, 2 + 2 * 9), assert_int_equal(m->n_unmapped, 1);
    assert_string_equal(m->unmapped[0]->name, "blk.0.ffn_gate_exps.weight");
    const struct tern_gguf_weight *w =
        tern_gguf_model_find(m, "model.layers.1.mlp.down_proj.weight");
    assert_non_null(w);
    assert_string_equal(w->t->name, "blk.1.ffn_down.weight");
    assert_int_equal(w->n_dims, 2), assert_int_equal(w->shape[0], 8),
        assert_int_equal(w->shape[1], 16);
    assert_int_equal(w->rope_head_dim, 0);
    w = tern_gguf_model_find(m, "model.layers.0.self_attn.q_proj.weight");
    assert_int_equal(w->rope_head_dim, 4);
    w = tern_gguf_model_find(m, "model.layers.0.self_attn.k_proj.weight");
    assert_int_equal(w->rope_head_dim, 4), assert_int_equal(w->shape[0], 4);
    assert_int_equal(
        tern_gguf_model_find(m, "model.layers.0.self_attn.v_proj.weight")->rope_head_dim, 0);
    assert_null(tern_gguf_model_find(m, "lm_head.weight"));
    assert_null(tern_gguf_model_find(m, "model.layers.2.mlp.up_proj.weight"));
    tern_gguf_model_close(m);
    stb_remove(path);

    tu_ok(open_model("llama", OPT_OUTPUT | OPT_KEY_LEN | OPT_YARN, &m, &path));
    check_hparams(&m->config, "LlamaForCausalLM", &hp);
    assert_false(hp.tie_word_embeddings);
    assert_non_null(tern_gguf_model_find(m, "lm_head.weight"));
    assert_int_equal(hp.head_dim, 4);
    assert_true(hp.ropes[0].partial_rotary_factor == 0.5);
    assert_int_equal(hp.ropes[0].kind, TERN_ROPE_YARN);
    assert_true(hp.ropes[0].factor == 4.0), assert_int_equal(hp.ropes[0].original_max_pos, 32);
    tern_gguf_model_close(m);
    stb_remove(path);
}

static void test_small_qwen3(void **state)
{
    (void)state;
    struct tern_gguf_model *m;
    char *path;
    tu_ok(open_model("qwen3", 0, &m, &path));
    struct tern_hparams hp;
    check_hparams(&m->config, "Qwen3ForCausalLM", &hp);
    assert_int_equal(m->n_weights, 2 + 2 * 11);
    const struct tern_gguf_weight *w =
        tern_gguf_model_find(m, "model.layers.1.self_attn.k_norm.weight");
    assert_non_null(w), assert_int_equal(w->shape[0], 4);
    /* qwen files keep Hugging Face's row order */
    assert_int_equal(
        tern_gguf_model_find(m, "model.layers.0.self_attn.q_proj.weight")->rope_head_dim, 0);
    tern_gguf_model_close(m);
    stb_remove(path);
}

static void test_refused(void **state)
{
    (void)state;
    struct tern_gguf_model *m = (struct tern_gguf_model *)1;
    char *path;
    stb_expect(open_model("gpt2", 0, &m, &path), TERN_E_UNSUPPORTED, "m.gguf",
               "general.architecture 'gpt2'", NULL);
    assert_null(m);
    stb_remove(path);
    stb_expect(open_model("llama", OPT_ROPE_FREQS, &m, &path), TERN_E_UNSUPPORTED,
               "'rope_freqs.weight'", NULL);
    stb_remove(path);
    stb_expect(open_model("llama", OPT_BAD_KEY_LEN, &m, &path), TERN_E_UNSUPPORTED,
               "key_length 4 differs from value_length 8", NULL);
    stb_remove(path);
    struct gb b; /* a required key missing names it */
    gb_begin(&b, 3);
    gb_kv_str(&b, "general.architecture", "qwen2");
    size_t len;
    uint8_t *img = gb_end(&b, &len);
    struct tern_gguf *g;
    tu_ok(tern_gguf_parse(img, len, "k.gguf", &g));
    struct tern_json_doc cfg;
    stb_expect(tern_gguf_hf_config(g, &cfg), TERN_E_NOT_FOUND, "k.gguf", "'qwen2.block_count'",
               NULL);
    tern_gguf_close(g);
    tern_free(img);
}

static void test_smollm2(void **state)
{
    (void)state;
    char *path = tu_smollm2_gguf();
    if (!path) return;
    struct tern_gguf_model *m;
    tu_ok(tern_gguf_model_open(path, &m));
    struct tern_hparams hp;
    check_hparams(&m->config, "LlamaForCausalLM", &hp);
    assert_int_equal(hp.num_hidden_layers, 30), assert_int_equal(hp.hidden_size, 576);
    assert_int_equal(hp.intermediate_size, 1536), assert_int_equal(hp.num_attention_heads, 9);
    assert_int_equal(hp.num_key_value_heads, 3), assert_int_equal(hp.head_dim, 64);
    assert_int_equal(hp.vocab_size, 49152), assert_int_equal(hp.max_position_embeddings, 8192);
    assert_true(hp.ropes[0].theta == 100000.0), assert_true(hp.rms_norm_eps == 1e-5f);
    assert_true(hp.tie_word_embeddings);
    assert_int_equal(hp.bos_token_id, 1);
    assert_int_equal(hp.n_eos, 1), assert_int_equal(hp.eos_token_ids[0], 2);
    assert_int_equal(m->n_weights, 272), assert_int_equal(m->n_unmapped, 0);
    const struct tern_gguf_weight *w =
        tern_gguf_model_find(m, "model.layers.29.self_attn.k_proj.weight");
    assert_int_equal(w->t->type, TERN_GGML_Q4_1);
    assert_int_equal(w->shape[0], 192), assert_int_equal(w->shape[1], 576);
    assert_int_equal(w->rope_head_dim, 64);
    w = tern_gguf_model_find(m, "model.embed_tokens.weight");
    assert_int_equal(w->t->type, TERN_GGML_Q8_0), assert_int_equal(w->shape[0], 49152);
    struct tern_gguf_tok_ids ids;
    tu_ok(tern_gguf_tok_ids(m->g, &ids));
    assert_int_equal(ids.n_tokens, 49152);
    assert_int_equal(ids.bos, 1), assert_int_equal(ids.eos, 2), assert_int_equal(ids.unk, 0);
    assert_int_equal(ids.pad, 2), assert_int_equal(ids.eot, -1);
    assert_false(ids.add_bos), assert_false(ids.add_eos);
    tern_gguf_model_close(m);
    tern_free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),       cmocka_unit_test(test_unpermute),
        cmocka_unit_test(test_small_llama), cmocka_unit_test(test_small_qwen3),
        cmocka_unit_test(test_refused),     cmocka_unit_test(test_smollm2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
