/*
 * test_attn_fused_cuda.c — qk_rope_store_attention on CUDA (backend.h). For
 * a batch whose every sequence has one query token the decode attention
 * folds the prologue in (head norms, rope, K/V store: cuda_attn_decode.cu);
 * it must give bitwise the attention output and the caches of
 * qk_rope_store then attention on CUDA, and leave qkv as it was (which
 * shows that the fused kernel ran); it must be close to the CPU's ops.
 * Cases: GQA 1..16, head_dim 64/128/256, with and without the Qwen3 head
 * norms, partial and interleaved rotary, sliding window, softcap,
 * sequences of 1..2101 positions in one batch, a slot -1 sequence (stores
 * nothing, reads the stale row), in both modes; a sequence alone vs inside
 * the batch (deterministic mode: bitwise); one graph replayed over growing
 * contexts (block and split boundaries crossed) == the eager unfused ops at
 * every step; a prefill + decode batch and TERN_CUDA_FUSE_OPS without
 * "qka" take the unfused ops (== them, qkv rotated). The fused kernel is
 * opt-in (TERN_CUDA_FUSE_OPS names "qka"): the test names it. Without a
 * CUDA device every test is skipped. Depends on the CPU and CUDA backends.
 */
#include "testutil.h"

#include "backend/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS       16
#define MAX_SEQS 8
#define MAX_T    32

static struct tern_backend *cpu, *gpu, *gpu_det;
static uint64_t rng;

static float *rand_vec(size_t n, float scale)
{
    float *v = tern_malloc(n * sizeof *v + 1);
    for (size_t i = 0; i < n; i++)
        v[i] = tern_bf16_to_f32(tern_f32_to_bf16(tu_frand(&rng) * scale));
    return v;
}

/* Uploads v into t (F32, BF16 or I32): floats, or int32_t for I32. */
static void put(struct tern_backend *be, const struct tern_dtensor *t, const void *v)
{
    size_t n = tern_dtensor_numel(t), es = tern_dtype_size(t->dtype);
    uint16_t *b = tern_malloc(n * es + 1);
    if (t->dtype == TERN_DTYPE_BF16)
        for (size_t i = 0; i < n; i++) b[i] = tern_f32_to_bf16(((const float *)v)[i]);
    else
        memcpy(b, v, n * es);
    tu_ok(be->ops->upload(be, t, b, n * es));
    tern_free(b);
}

/* A device tensor of dtype dt holding v (put). */
static struct tern_dtensor up(struct tern_backend *be, enum tern_dtype dt, int nd,
                              const int64_t *shape, const void *v)
{
    struct tern_dtensor t;
    tu_ok(tern_dtensor_alloc(be, dt, nd, shape, &t));
    put(be, &t, v);
    return t;
}

/* The model side of a case. */
struct shape {
    int H, KVH, D, rot, inter, norm, window;
    float softcap, mscale;
};

/* A batch over a shuffled block pool, and every input on the host. */
struct world {
    struct shape sh;
    int n_seqs, n_tok, n_blocks, max_blocks, max_len;
    int32_t tok[MAX_T], pos[MAX_T], slots[MAX_T], qs[MAX_SEQS + 1], lens[MAX_SEQS];
    int32_t *tables; /* [n_seqs, max_blocks] */
    float *qkv;      /* [n_tok, width] */
    float *k0, *v0;  /* [n_blocks * BS, KVH * D]: the caches before the step */
    float *qn, *kn, *inv;
};

static int64_t width_of(const struct shape *s)
{
    return (int64_t)(s->H + 2 * s->KVH) * s->D;
}
static int64_t kvd_of(const struct shape *s)
{
    return (int64_t)s->KVH * s->D;
}

/* Sequence s has ctx[s] cached positions and q_len[s] new tokens; its
 * tokens store nothing when neg[s] (slot -1). */
static void world_init(struct world *w, const struct shape *sh, int n, const int *ctx,
                       const int *q_len, const int *neg)
{
    memset(w, 0, sizeof *w);
    w->sh = *sh;
    w->n_seqs = n;
    for (int s = 0; s < n; s++) {
        int nb = (ctx[s] + q_len[s] + BS - 1) / BS;
        w->n_blocks += nb;
        w->max_blocks = nb > w->max_blocks ? nb : w->max_blocks;
    }
    w->n_blocks += 3;
    int32_t *perm = tern_malloc(sizeof(int32_t) * (size_t)w->n_blocks);
    for (int i = 0; i < w->n_blocks; i++) perm[i] = i;
    for (int i = w->n_blocks - 1; i > 0; i--) {
        tu_frand(&rng);
        int j = (int)((rng >> 17) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    w->tables = tern_calloc((size_t)(n * w->max_blocks), sizeof(int32_t));
    for (int s = 0, k = 0; s < n; s++) {
        int L = ctx[s] + q_len[s];
        for (int j = 0; j < (L + BS - 1) / BS; j++) w->tables[s * w->max_blocks + j] = perm[k++];
        w->qs[s] = w->n_tok;
        w->lens[s] = L;
        w->max_len = L > w->max_len ? L : w->max_len;
        for (int p = ctx[s]; p < L; p++, w->n_tok++) {
            w->tok[w->n_tok] = 1;
            w->pos[w->n_tok] = p;
            w->slots[w->n_tok] = neg[s] ? -1 : w->tables[s * w->max_blocks + p / BS] * BS + p % BS;
        }
    }
    w->qs[n] = w->n_tok;
    tern_free(perm);
    size_t nc = (size_t)(w->n_blocks * BS * kvd_of(sh));
    w->qkv = rand_vec((size_t)(w->n_tok * width_of(sh)), 2.0f);
    w->k0 = rand_vec(nc, 1.0f), w->v0 = rand_vec(nc, 1.0f);
    w->qn = rand_vec((size_t)sh->D, 1.5f), w->kn = rand_vec((size_t)sh->D, 1.5f);
    w->inv = tern_malloc(sizeof(float) * (size_t)(sh->rot / 2));
    for (int i = 0; i < sh->rot / 2; i++) w->inv[i] = powf(500000.0f, -2.0f * i / sh->rot);
}

static void world_free(struct world *w)
{
    float *f[7] = {w->qkv, w->k0, w->v0, w->qn, w->kn, w->inv, NULL};
    for (int i = 0; f[i]; i++) tern_free(f[i]);
    tern_free(w->tables);
}

/* A world's inputs on one backend. */
struct dev {
    struct tern_batch h;
    struct tern_batch_dev b;
    struct tern_dtensor qkv, out, qn, kn;
    struct tern_kv_layer kv;
    struct tern_rope rope;
    struct tern_attn_params p;
};

/* Uploads w to be; max_seq_len > 0: the launch bound (the forward's bucket). */
static void dev_init(struct tern_backend *be, const struct world *w, int max_seq_len, struct dev *d)
{
    const struct shape *sh = &w->sh;
    int64_t T = w->n_tok, qs[2] = {T, width_of(sh)}, os[2] = {T, (int64_t)sh->H * sh->D};
    int64_t cs[4] = {w->n_blocks, BS, sh->KVH, sh->D}, hs[1] = {sh->D}, fs[1] = {sh->rot / 2};
    int64_t ts[1] = {T}, ss[1] = {w->n_seqs}, q1[1] = {w->n_seqs + 1};
    int64_t bts[1] = {(int64_t)w->n_seqs * w->max_blocks};
    enum tern_dtype at = be->act_dtype, kt = be->kv_dtype, i32 = TERN_DTYPE_I32;
    float *nan = tern_malloc(sizeof(float) * (size_t)(os[0] * os[1]) + 1);
    for (int64_t i = 0; i < os[0] * os[1]; i++) nan[i] = NAN;
    d->qkv = up(be, at, 2, qs, w->qkv);
    d->out = up(be, at, 2, os, nan);
    tern_free(nan);
    d->kv = (struct tern_kv_layer){.k = up(be, kt, 4, cs, w->k0), .v = up(be, kt, 4, cs, w->v0)};
    d->qn = up(be, TERN_DTYPE_BF16, 1, hs, w->qn);
    d->kn = up(be, TERN_DTYPE_BF16, 1, hs, w->kn);
    d->rope = (struct tern_rope){.head_dim = sh->D,
                                 .rotary_dim = sh->rot,
                                 .interleaved = sh->inter,
                                 .mscale = sh->mscale,
                                 .inv_freq = up(be, TERN_DTYPE_F32, 1, fs, w->inv)};
    d->p = (struct tern_attn_params){.n_heads = sh->H,
                                     .n_kv_heads = sh->KVH,
                                     .head_dim = sh->D,
                                     .scale = 1.0f / sqrtf((float)sh->D),
                                     .sliding_window = sh->window,
                                     .softcap = sh->softcap};
    d->h = (struct tern_batch){.n_tokens = w->n_tok,
                               .n_seqs = w->n_seqs,
                               .max_blocks_per_seq = w->max_blocks,
                               .token_ids = w->tok,
                               .positions = w->pos,
                               .query_start = w->qs,
                               .seq_lens = w->lens,
                               .block_tables = w->tables,
                               .slot_mapping = w->slots};
    int max_q = 1;
    for (int s = 0; s < w->n_seqs; s++)
        if (w->qs[s + 1] - w->qs[s] > max_q) max_q = w->qs[s + 1] - w->qs[s];
    d->b =
        (struct tern_batch_dev){.host = &d->h,
                                .block_size = BS,
                                .max_q_len = max_q,
                                .max_seq_len = max_seq_len > w->max_len ? max_seq_len : w->max_len,
                                .token_ids = up(be, i32, 1, ts, w->tok),
                                .positions = up(be, i32, 1, ts, w->pos),
                                .query_start = up(be, i32, 1, q1, w->qs),
                                .seq_lens = up(be, i32, 1, ss, w->lens),
                                .block_tables = up(be, i32, 1, bts, w->tables),
                                .slot_mapping = up(be, i32, 1, ts, w->slots)};
}

static void dev_free(struct tern_backend *be, struct dev *d)
{
    struct tern_dtensor *t[] = {&d->qkv,
                                &d->out,
                                &d->qn,
                                &d->kn,
                                &d->kv.k,
                                &d->kv.v,
                                &d->rope.inv_freq,
                                &d->b.token_ids,
                                &d->b.positions,
                                &d->b.query_start,
                                &d->b.seq_lens,
                                &d->b.block_tables,
                                &d->b.slot_mapping};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) tern_dtensor_free(be, t[i]);
}

/* One step on d: the fused op, or qk_rope_store then attention. */
static void dev_step(struct tern_backend *be, struct dev *d, bool fused, bool norm)
{
    const struct tern_dtensor *qn = norm ? &d->qn : NULL, *kn = norm ? &d->kn : NULL;
    if (fused) {
        assert_non_null(be->ops->qk_rope_store_attention);
        tu_ok(be->ops->qk_rope_store_attention(be, &d->qkv, qn, kn, 1e-6f, &d->rope, &d->p, &d->b,
                                               &d->kv, &d->out));
        return;
    }
    tu_ok(be->ops->qk_rope_store(be, &d->qkv, qn, kn, 1e-6f, &d->rope, &d->p, &d->b, &d->kv));
    tu_ok(be->ops->attention(be, &d->qkv, &d->kv, &d->b, &d->p, &d->out));
}

/* What a step left: out, the caches and qkv, as floats. */
struct res {
    float *out, *k, *v, *qkv;
};

static struct res run(struct tern_backend *be, const struct world *w, bool fused, int max_seq_len)
{
    struct dev d;
    dev_init(be, w, max_seq_len, &d);
    dev_step(be, &d, fused, w->sh.norm);
    tu_ok(be->ops->sync(be));
    struct res r = {tu_download_f32(be, &d.out), tu_download_f32(be, &d.kv.k),
                    tu_download_f32(be, &d.kv.v), tu_download_f32(be, &d.qkv)};
    dev_free(be, &d);
    return r;
}

static void res_free(struct res *r)
{
    tern_free(r->out), tern_free(r->k), tern_free(r->v), tern_free(r->qkv);
}

/* Bitwise equality of n floats (NaN = NaN). */
static void same(const char *what, const char *name, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0 && !(isnan(a[i]) && isnan(b[i])))
            fail_msg("%s: %s differ at %zu (%.9g vs %.9g)", name, what, i, a[i], b[i]);
}

static void world_name(const struct world *w, const char *tag, char *buf, size_t n)
{
    const struct shape *s = &w->sh;
    snprintf(buf, n, "%s H %d KV %d D %d rot %d%s%s window %d softcap %g", tag, s->H, s->KVH, s->D,
             s->rot, s->inter ? " inter" : "", s->norm ? " norm" : "", s->window,
             (double)s->softcap);
}

/* On be: fused == unfused bitwise (out, caches); qkv untouched by the
 * fused kernel when expect_fused, else rotated as by the unfused ops. */
static struct res check_fused(struct tern_backend *be, const struct world *w, bool expect_fused,
                              const char *name)
{
    struct res f = run(be, w, true, 0), u = run(be, w, false, 0);
    size_t no = (size_t)w->n_tok * (size_t)(w->sh.H * w->sh.D);
    size_t nc = (size_t)(w->n_blocks * BS * kvd_of(&w->sh));
    size_t nq = (size_t)w->n_tok * (size_t)width_of(&w->sh);
    same("out (fused vs unfused)", name, f.out, u.out, no);
    same("k cache (fused vs unfused)", name, f.k, u.k, nc);
    same("v cache (fused vs unfused)", name, f.v, u.v, nc);
    same(expect_fused ? "qkv (fused kernel vs input)" : "qkv (fallback vs unfused)", name, f.qkv,
         expect_fused ? w->qkv : u.qkv, nq);
    res_free(&u);
    return f;
}

/* Sequence s of w as a batch of its own, over the same pool and caches
 * (borrows w's arrays: not freed). */
static void world_pick(const struct world *w, int s, struct world *o)
{
    *o = *w;
    int t0 = w->qs[s], n = w->qs[s + 1] - t0;
    o->n_seqs = 1, o->n_tok = n, o->max_len = w->lens[s];
    o->tables = w->tables + (size_t)s * (size_t)w->max_blocks;
    o->qkv = w->qkv + (int64_t)t0 * width_of(&w->sh);
    o->qs[0] = 0, o->qs[1] = n, o->lens[0] = w->lens[s];
    memcpy(o->tok, w->tok + t0, sizeof(int32_t) * (size_t)n);
    memcpy(o->pos, w->pos + t0, sizeof(int32_t) * (size_t)n);
    memcpy(o->slots, w->slots + t0, sizeof(int32_t) * (size_t)n);
}

static void run_case(const struct shape *sh, int n, const int *ctx, const int *neg)
{
    int q1[MAX_SEQS] = {1, 1, 1, 1, 1, 1, 1, 1};
    struct world w;
    world_init(&w, sh, n, ctx, q1, neg);
    char name[128];
    world_name(&w, "decode", name, sizeof name);
    struct res g = check_fused(gpu, &w, true, name);
    struct res dt = check_fused(gpu_det, &w, true, name);
    struct res c = run(cpu, &w, false, 0);
    size_t no = (size_t)w.n_tok * (size_t)(sh->H * sh->D);
    double e1 = tu_max_rel_err(g.out, c.out, no), e2 = tu_max_rel_err(dt.out, c.out, no);
    printf("  %s: fused == unfused (both modes); vs CPU %.2e / %.2e\n", name, e1, e2);
    if (!(e1 < 2e-2) || !(e2 < 2e-2)) fail_msg("%s: too far from the CPU", name);
    size_t hw = (size_t)(sh->H * sh->D);
    for (int s = 0; s < n; s++) { /* deterministic mode: alone == inside the batch */
        struct world one;
        world_pick(&w, s, &one);
        struct res a = run(gpu_det, &one, true, 0);
        same("out (alone vs in the batch)", name, a.out, dt.out + (size_t)s * hw, hw);
        res_free(&a);
    }
    res_free(&g), res_free(&dt), res_free(&c);
    world_free(&w);
}

static void test_decode(void **state)
{
    (void)state;
    if (!gpu) skip();
    /* lengths 1, 6, 64, 65, 201, 576, 1001, 2101; the third stores nothing */
    int ctx[8] = {0, 5, 63, 64, 200, 575, 1000, 2100}, neg[8] = {0, 0, 1, 0, 0, 0, 0, 0};
    int ctx4[4] = {40, 17, 300, 2}, neg4[4] = {0, 1, 0, 0};
    struct shape cs[] = {
        {32, 8, 128, 128, 0, 0, 0, 0.0f, 1.0f}, /* Llama-3.1-8B */
        {32, 8, 64, 64, 0, 1, 0, 0.0f, 1.0f},   /* Qwen3-style head norms */
        {16, 2, 128, 64, 1, 1, 0, 0.0f, 0.9f},  /* partial, interleaved, mscale */
        {8, 8, 64, 64, 0, 1, 37, 30.0f, 1.0f},  /* sliding window, softcap */
        {64, 4, 128, 128, 0, 0, 0, 0.0f, 1.0f}, /* 16 q heads per kv head */
        {8, 4, 256, 256, 0, 1, 0, 0.0f, 1.0f},  /* head_dim 256 */
        {16, 2, 256, 128, 0, 0, 0, 0.0f, 1.1f}, /* head_dim 256, 8 per kv head */
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        if (k < 4)
            run_case(&cs[k], 8, ctx, neg);
        else
            run_case(&cs[k], 4, ctx4, neg4);
    }
}

/* A prefill + decode batch, and a decode batch with "qka" left out of
 * TERN_CUDA_FUSE_OPS: the op issues the unfused ops. */
static void test_fallback(void **state)
{
    (void)state;
    if (!gpu) skip();
    struct shape sh = {16, 4, 128, 128, 0, 1, 0, 0.0f, 1.0f};
    int ctx[3] = {30, 0, 100}, ql[3] = {1, 5, 1}, neg[3] = {0, 0, 0}, q1[3] = {1, 1, 1};
    struct world w;
    world_init(&w, &sh, 3, ctx, ql, neg);
    struct res r = check_fused(gpu, &w, false, "prefill + decode batch");
    res_free(&r);
    world_free(&w);
    world_init(&w, &sh, 3, ctx, q1, neg);
    setenv("TERN_CUDA_FUSE_OPS", "qkr,glu", 1);
    r = check_fused(gpu, &w, false, "TERN_CUDA_FUSE_OPS=qkr,glu");
    setenv("TERN_CUDA_FUSE_OPS", "qkr,qka,glu", 1);
    res_free(&r);
    world_free(&w);
    printf("  prefill + decode batch, and \"qka\" off: == the unfused ops\n");
}

/* The inputs of the step where sequence s has ctx0[s] + k cached
 * positions: its position, length and slot, and fresh q/k/v rows. */
static void step_inputs(struct world *w, const int *ctx0, int k)
{
    for (int s = 0; s < w->n_seqs; s++) {
        int p = ctx0[s] + k;
        w->pos[s] = p, w->lens[s] = p + 1;
        w->slots[s] = w->tables[s * w->max_blocks + p / BS] * BS + p % BS;
    }
    size_t n = (size_t)(w->n_tok * width_of(&w->sh));
    float *q = rand_vec(n, 2.0f);
    memcpy(w->qkv, q, sizeof(float) * n);
    tern_free(q);
}

static void dev_put(struct tern_backend *be, const struct world *w, struct dev *d)
{
    put(be, &d->qkv, w->qkv);
    put(be, &d->b.positions, w->pos);
    put(be, &d->b.seq_lens, w->lens);
    put(be, &d->b.slot_mapping, w->slots);
}

/* The fused op captured at step 0 and replayed as three contexts grow by
 * one position a step (block boundaries 16 and 256, the 64-position split
 * boundary crossed), launched for a 1024 bucket; at every step out and the
 * caches == the eager unfused ops on a second set of buffers. */
static void replay(struct tern_backend *be)
{
    enum { N = 5 };
    struct shape sh = {32, 8, 128, 128, 0, 1, 0, 0.0f, 1.0f};
    int ctx0[3] = {62, 14, 254}, full[3] = {62 + N, 14 + N, 254 + N}, q1[3] = {1, 1, 1};
    int neg[3] = {0, 0, 0};
    struct world w;
    world_init(&w, &sh, 3, full, q1, neg);
    struct dev f, u;
    dev_init(be, &w, 1024, &f);
    dev_init(be, &w, 1024, &u);
    struct tern_graph *g = NULL;
    size_t no = (size_t)(3 * sh.H * sh.D), nc = (size_t)(w.n_blocks * BS * kvd_of(&sh));
    for (int k = 0; k < N; k++) {
        step_inputs(&w, ctx0, k);
        dev_put(be, &w, &f);
        dev_put(be, &w, &u);
        if (k == 0) {
            tu_ok(be->ops->graph_begin(be));
            dev_step(be, &f, true, true);
            tu_ok(be->ops->graph_end(be, &g));
        }
        tu_ok(be->ops->graph_launch(be, g));
        dev_step(be, &u, false, true);
        tu_ok(be->ops->sync(be));
        struct res a = {tu_download_f32(be, &f.out), tu_download_f32(be, &f.kv.k),
                        tu_download_f32(be, &f.kv.v), NULL};
        struct res b = {tu_download_f32(be, &u.out), tu_download_f32(be, &u.kv.k),
                        tu_download_f32(be, &u.kv.v), NULL};
        char name[64];
        snprintf(name, sizeof name, "graph replay %d (%s)", k,
                 be->deterministic ? "deterministic" : "default");
        same("out (replayed fused vs eager unfused)", name, a.out, b.out, no);
        same("k cache (replayed fused vs eager unfused)", name, a.k, b.k, nc);
        same("v cache (replayed fused vs eager unfused)", name, a.v, b.v, nc);
        res_free(&a), res_free(&b);
    }
    be->ops->graph_free(be, g);
    dev_free(be, &f), dev_free(be, &u);
    world_free(&w);
}

static void test_replay(void **state)
{
    (void)state;
    if (!gpu) skip();
    replay(gpu);
    replay(gpu_det);
    printf("  one captured fused op replayed over 5 growing steps == the eager unfused ops\n");
}

static int group_setup(void **state)
{
    (void)state;
    rng = tu_seed();
    setenv("TERN_CUDA_FUSE_OPS", "qkr,qka,glu", 1); /* the fused kernel is opt-in */
    tu_backends_create(&cpu, &gpu, &gpu_det);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    tu_backends_destroy(cpu, gpu, gpu_det);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_decode),
                                       cmocka_unit_test(test_fallback),
                                       cmocka_unit_test(test_replay)};
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
