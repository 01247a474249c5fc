/*
 * test_moe_layouts.c — one model's experts in each published layout give
 * the same model: tiny-qwen3-moe's per-expert tensors (as transformers saves
 * them) rewritten as Hugging Face's fused 3-D tensors (mlp.experts.gate_up_proj
 * [E, 2I, H], mlp.experts.down_proj [E, H, I]) and as mlx-lm's stacks
 * (mlp.switch_mlp.{gate,up,down}_proj.weight [E, out, in]) give logits
 * bitwise equal to the original's on the CPU, every tensor bound. And snapshots that get the
 * experts wrong are one-line errors naming what is wrong: a missing expert
 * tensor, one expert stored unlike the others, a top-k above the expert
 * count.
 */
#include "testutil.h"

#include "io/safetensors.h"
#include "st_build.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define SRC "models/tiny-qwen3-moe"

/* A snapshot being written: tensors, each with its bytes. */
struct out_t {
    char name[160];
    enum tern_dtype dt;
    int nd;
    int64_t shape[3];
    unsigned char *data;
    size_t n;
};

struct writer {
    struct out_t t[256];
    int n;
};

static struct out_t *add(struct writer *w, const char *name, enum tern_dtype dt, int nd,
                         const int64_t *shape)
{
    assert_true(w->n < 256);
    struct out_t *o = &w->t[w->n++];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->dt = dt;
    o->nd = nd;
    memcpy(o->shape, shape, sizeof(int64_t) * (size_t)nd);
    o->n = (size_t)tern_shape_numel(shape, nd) * tern_dtype_size(dt);
    o->data = tern_calloc(1, o->n);
    return o;
}

/* The safetensors name of a dtype ("BF16", ...). */
static const char *st_dtype(enum tern_dtype dt)
{
    return dt == TERN_DTYPE_F32 ? "F32" : dt == TERN_DTYPE_F16 ? "F16" : "BF16";
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = tern_malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Writes the tensors (freed) as dir/model.safetensors with the source's
 * config.json (with `edit` applied: key -> integer) and
 * generation_config.json. */
static void write_snapshot(struct writer *w, const char *dir, const char *src,
                           const char *edit_key, int edit_val)
{
    json_t *h = json_object();
    size_t off = 0;
    for (int i = 0; i < w->n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < w->t[i].nd; d++) json_array_append_new(shape, json_integer(w->t[i].shape[d]));
        json_object_set_new(h, w->t[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", st_dtype(w->t[i].dt),
                                      "shape", shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + w->t[i].n)));
        off += w->t[i].n;
    }
    char *hdr = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    unsigned char *data = tern_malloc(off ? off : 1);
    off = 0;
    for (int i = 0; i < w->n; i++) {
        memcpy(data + off, w->t[i].data, w->t[i].n);
        off += w->t[i].n;
        tern_free(w->t[i].data);
    }
    w->n = 0;
    stb_write_st_in(dir, "model.safetensors", hdr, data, off);
    free(hdr);
    tern_free(data);
    const char *files[2] = {"config.json", "generation_config.json"};
    for (int i = 0; i < 2; i++) {
        char *p = tern_path_join(src, files[i]);
        size_t n;
        char *b = read_all(p, &n);
        if (i == 0 && edit_key) {
            json_t *cfg = json_loads(b, 0, NULL);
            json_object_set_new(cfg, edit_key, json_integer(edit_val));
            tern_free(b);
            char *s = json_dumps(cfg, 0);
            json_decref(cfg);
            n = strlen(s);
            b = tern_malloc(n + 1);
            memcpy(b, s, n + 1);
            free(s);
        }
        stb_write_in(dir, files[i], b, n);
        tern_free(b);
        tern_free(p);
    }
}

enum layout { PER_EXPERT, FUSED, SWITCH };

/* The source's tensors in `layout`; `mangle` breaks it: 1 drops expert 3's
 * up_proj of layer 0, 2 stores expert 5's gate_proj of layer 2 as F32. */
static void rewrite(const char *src, const char *dir, enum layout layout, int mangle,
                    const char *edit_key, int edit_val)
{
    char *path = tern_path_join(src, "model.safetensors");
    struct tern_st_file *f;
    tu_ok(tern_st_file_open(path, &f));
    const struct tern_st_header *hd = tern_st_file_header(f);
    struct writer *w = tern_calloc(1, sizeof *w);
    enum { E = 8, I = 32, H = 64 };
    struct out_t *gu[3] = {0}, *dn[3] = {0}, *g[3] = {0}, *u[3] = {0};
    for (size_t i = 0; i < hd->n_entries; i++) {
        struct tern_tensor_view v;
        tern_st_file_view(f, i, &v);
        int l, e, n = 0;
        char part[16];
        if (sscanf(v.name, "model.layers.%d.mlp.experts.%d.%15[a-z]_proj.weight%n", &l, &e, part,
                   &n) != 3 || v.name[n] || layout == PER_EXPERT) {
            if (mangle == 1 && !strcmp(v.name, "model.layers.0.mlp.experts.3.up_proj.weight"))
                continue;
            bool f32 = mangle == 2 && !strcmp(v.name, "model.layers.2.mlp.experts.5.gate_proj.weight");
            struct out_t *o = add(w, v.name, f32 ? TERN_DTYPE_F32 : v.dtype, v.n_dims, v.shape);
            if (f32) tern_to_f32(v.dtype, v.data, (float *)o->data, v.n_bytes / 2);
            else memcpy(o->data, v.data, v.n_bytes);
            continue;
        }
        assert_true(l >= 0 && l < 3 && e >= 0 && e < E && v.dtype == TERN_DTYPE_BF16);
        char name[160];
        bool down = !strcmp(part, "down"), up = !strcmp(part, "up");
        if (layout == FUSED) {
            if (!gu[l]) {
                snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj", l);
                gu[l] = add(w, name, TERN_DTYPE_BF16, 3, (int64_t[]){E, 2 * I, H});
                snprintf(name, sizeof name, "model.layers.%d.mlp.experts.down_proj", l);
                dn[l] = add(w, name, TERN_DTYPE_BF16, 3, (int64_t[]){E, H, I});
            }
            size_t at = down ? (size_t)e * H * I * 2 : ((size_t)e * 2 * I + (up ? I : 0)) * H * 2;
            memcpy((down ? dn[l] : gu[l])->data + at, v.data, v.n_bytes);
        } else {
            if (!g[l]) {
                const char *parts[3] = {"gate", "up", "down"};
                struct out_t **dst[3] = {&g[l], &u[l], &dn[l]};
                for (int k = 0; k < 3; k++) {
                    snprintf(name, sizeof name, "model.layers.%d.mlp.switch_mlp.%s_proj.weight", l,
                             parts[k]);
                    *dst[k] = add(w, name, TERN_DTYPE_BF16, 3,
                                  k == 2 ? (int64_t[]){E, H, I} : (int64_t[]){E, I, H});
                }
            }
            memcpy((down ? dn[l] : up ? u[l] : g[l])->data + (size_t)e * v.n_bytes, v.data,
                   v.n_bytes);
        }
    }
    write_snapshot(w, dir, src, edit_key, edit_val);
    tern_free(w);
    tern_st_file_close(f);
    tern_free(path);
}

static float *logits_of(const char *dir, const struct tu_npy *prompt, int V)
{
    struct tern_model *m = NULL;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CPU;
    if (tern_model_open(dir, &mp, &m) != TERN_OK) fail_msg("%s: %s", dir, tern_last_error());
    struct tern_model_info in;
    tu_ok(tern_model_get_info(m, &in));
    assert_int_equal(in.n_unused_tensors, 0); /* every expert tensor bound */
    assert_int_equal(in.n_experts, 8);
    assert_int_equal(in.n_experts_used, 2);
    float *l = tu_model_logits(m, prompt->data, (int)prompt->n, V, 64, 16);
    tern_model_close(m);
    return l;
}

static void test_layouts(void **state)
{
    (void)state;
    char *src = tu_fixture(SRC);
    struct tu_npy prompt, golden;
    tu_golden_npy(src, "prompt.npy", &prompt);
    tu_golden_npy(src, "logits.npy", &golden);
    int V = (int)golden.shape[1], n = (int)prompt.n;
    float *ref = logits_of(src, &prompt, V);
    const char *names[] = {"per-expert", "fused", "switch_mlp"};
    for (int layout = PER_EXPERT; layout <= SWITCH; layout++) {
        char *dir = tu_temp_dir("moe-layout");
        rewrite(src, dir, (enum layout)layout, 0, NULL, 0);
        float *l = logits_of(dir, &prompt, V);
        printf("  %-10s max rel err vs transformers %.2e\n", names[layout],
               tu_max_rel_err(l, golden.data, (size_t)n * V));
        assert_memory_equal(l, ref, sizeof(float) * (size_t)n * V);
        tern_free(l);
        stb_remove_dir(dir);
    }
    tern_free(ref);
    tu_npy_free(&prompt);
    tu_npy_free(&golden);
    tern_free(src);
}

static void expect_error(const char *dir, const char *want1, const char *want2)
{
    struct tern_model *m = NULL;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = TERN_DEVICE_CPU;
    enum tern_status st = tern_model_open(dir, &mp, &m);
    assert_int_not_equal(st, TERN_OK);
    const char *msg = tern_last_error();
    printf("  error: %s\n", msg);
    assert_non_null(strstr(msg, want1));
    assert_non_null(strstr(msg, want2));
    assert_null(strchr(msg, '\n'));
}

static void test_bad_experts(void **state)
{
    (void)state;
    char *src = tu_fixture(SRC);
    char *dir = tu_temp_dir("moe-bad");
    rewrite(src, dir, PER_EXPERT, 1, NULL, 0);
    expect_error(dir, "model.layers.0.mlp.experts.3.up_proj.weight", "not found");
    rewrite(src, dir, PER_EXPERT, 2, NULL, 0);
    expect_error(dir, "model.layers.2.mlp.experts.5.gate_proj", "unlike the other experts");
    rewrite(src, dir, SWITCH, 0, "num_experts_per_tok", 9);
    expect_error(dir, "num_experts_per_tok 9", "num_experts 8");
    rewrite(src, dir, FUSED, 0, "moe_intermediate_size", 16);
    expect_error(dir, "model.layers.0.mlp.experts.gate_up_proj", "[8, 64, 64], config expects "
                 "[8, 32, 64]");
    stb_remove_dir(dir);
    tern_free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_bad_experts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
