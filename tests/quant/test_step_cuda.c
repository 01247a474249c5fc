/*
 * test_step_cuda.c — the decode step as one kernel (step_prepare /
 * step_run, cuda_step.cu) against the op-by-op CUDA forward and the CPU.
 * The model: the tiny-llama-yarn fixture (3 layers, hidden 64, ff 192,
 * head_dim 16, YaRN rope with mscale != 1) quantized by `tern quantize` to
 * 4 bits, group 64, which the kernel takes. One token per forward (chunk 1)
 * makes every position a one-sequence decode step: contexts of 1 to 150
 * positions over 16-position KV blocks, so both the one-split attention
 * (<= 64 positions) and the merged splits run. Checks:
 *   - the plan exists for this model (and not with TERN_CUDA_STEP=0);
 *   - every position's logits within STEP_REL of the op-by-op forward's and
 *     within CUDA_REL of the CPU's (the kernel sums in other orders than
 *     either: BF16 activations, F32 sums);
 *   - the argmax agrees with the op-by-op forward wherever its top-2 gap is
 *     at least TIE;
 *   - a second run of the same tokens gives bitwise the same logits, and
 *     so does the instrumented kernel (TERN_CUDA_STEP_STAMPS=FILE), which
 *     writes FILE (a header and a row per op and block) and FILE.gaps (a
 *     line per launch) when the model closes;
 *   - greedy generation (captured graphs) matches the op-by-op path up to
 *     the first near-tie;
 *   - the kernel's own argmax (fed back on the device): greedy tokens from
 *     a one-token prompt are exactly the first argmax of the same
 *     launches' logits, and the serving loop's tokens are the same.
 * Then a wider model the test writes itself (test_step_wide: the 8B's head
 * shape, several warps per tile) against the op-by-op forward, and the same
 * model with layer 1's post-attention norm and the final norm weights at
 * 40000 (test_step_f16_range: gate_up, down and lm_head inputs beyond f16's
 * 65504, which the kernel's f16 MMAs must scale: x times 2^-e, the sums
 * scaled back; no softmax after them, so the two paths' rounding
 * differences stay small), and the wide model over a context long enough
 * for several 64-position attention passes per split before the merge
 * (test_step_long).
 * Skips (and says so) without a CUDA device.
 */
#include "testutil.h"

#include "api/api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STEP_REL 2e-2
#define CUDA_REL 5e-2
#define TIE      1e-2
#define N_POS    150

static char qdir[256], wdir[256], hdir[256];

static struct tern_model *open_dir(const char *dir, enum tern_device dev, bool step)
{
    struct tern_model_params mp = tern_model_default_params();
    mp.device = dev;
    if (!step) setenv("TERN_CUDA_STEP", "0", 1);
    struct tern_model *m = NULL;
    enum tern_status st = tern_model_open(dir, &mp, &m);
    unsetenv("TERN_CUDA_STEP");
    if (st != TERN_OK) fail_msg("%s: %s", dir, tern_last_error());
    return m;
}

static struct tern_model *open_on(enum tern_device dev, bool step)
{
    return open_dir(qdir, dev, step);
}

/* (top - second) / max |row| */
static double top2_gap(const float *row, int V, int *arg)
{
    float top = -INFINITY, second = -INFINITY, amax = 0.0f;
    for (int v = 0; v < V; v++) {
        if (row[v] > top)
            second = top, top = row[v], *arg = v;
        else if (row[v] > second)
            second = row[v];
        if (fabsf(row[v]) > amax) amax = fabsf(row[v]);
    }
    return amax > 0 ? (top - second) / amax : 0.0;
}

/* Positions (of n) where b's argmax is a's, failing at any whose a top-2
 * gap is at least TIE; *close counts the near-ties skipped. */
static int argmax_agree(const float *a, const float *b, int n, int V, int *close)
{
    int agree = 0;
    *close = 0;
    for (int i = 0; i < n; i++) {
        int ra = 0, rb = 0;
        double gap = top2_gap(a + (size_t)i * V, V, &ra);
        top2_gap(b + (size_t)i * V, V, &rb);
        if (gap < TIE) {
            ++*close;
            continue;
        }
        if (ra != rb) fail_msg("position %d: argmax %d, op-by-op %d (gap %.2e)", i, rb, ra, gap);
        agree++;
    }
    return agree;
}

/* Lines of the file at path (-1: it cannot be read). */
static long count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long n = 0;
    for (int ch; (ch = fgetc(f)) != EOF;) n += ch == '\n';
    fclose(f);
    return n;
}

/* The argmax op's answer on the host: the first index of the maximum, NaN
 * never winning, 0 for an all-NaN row. */
static int first_argmax(const float *row, int V)
{
    int bi = -1;
    for (int v = 0; v < V; v++)
        if (!isnan(row[v]) && (bi < 0 || row[v] > row[bi])) bi = v;
    return bi < 0 ? 0 : bi;
}

/* The step op's own argmax (written by its last block into the next step's
 * token ids and ids_at): greedy generation from a one-token prompt, every
 * token from a step launch, must be exactly the first argmax of the same
 * launches' logits (tokens fed back one at a time), and the serving loop
 * (one request, greedy) must give the same tokens. */
#define FUSED_G 48
static void fused_check(struct tern_model *stp, int V, const char *what)
{
    int32_t p0 = 13, seq[FUSED_G];
    int32_t *g = tu_model_greedy(stp, &p0, 1, FUSED_G);
    seq[0] = p0;
    memcpy(seq + 1, g, (FUSED_G - 1) * sizeof(int32_t));
    float *l = tu_model_logits(stp, seq, FUSED_G, V, 1, 16);
    for (int j = 0; j < FUSED_G; j++) {
        int want = first_argmax(l + (size_t)j * V, V);
        if (g[j] != want)
            fail_msg("%s: greedy token %d is %d, its logits' first argmax %d", what, j, g[j], want);
    }
    struct tern_engine *e = tu_model_engine(stp, 2048, 16);
    struct tern_request r = {0};
    r.ids = &p0;
    r.n_ids = 1;
    r.sampling = tern_sampling_default_params();
    r.sampling.max_tokens = FUSED_G;
    r.sampling.ignore_eos = true;
    struct tern_stream *s = NULL;
    if (tern_engine_submit(e, &r, &s) != TERN_OK) fail_msg("submit: %s", tern_last_error());
    int n = 0;
    for (;;) {
        struct tern_event ev;
        if (tern_stream_next(s, 60000, &ev) != TERN_OK) fail_msg("%s", tern_last_error());
        if (ev.type == TERN_EVENT_TOKEN) {
            assert_true(n < FUSED_G);
            if (ev.token != g[n])
                fail_msg("%s: serving loop token %d is %d, greedy %d", what, n, ev.token, g[n]);
            n++;
        } else if (ev.final) {
            assert_int_equal(ev.status, TERN_OK);
            break;
        }
    }
    assert_int_equal(n, FUSED_G);
    printf("  %s: %d greedy tokens = their logits' argmax = the serving loop's\n", what, n);
    tern_stream_destroy(s);
    tern_engine_destroy(e);
    tern_free(l);
    tern_free(g);
}

static void test_step_logits(void **state)
{
    (void)state;
    if (!qdir[0]) skip();
    struct tern_model *ops = open_on(TERN_DEVICE_CUDA, false);
    struct tern_model *stp = open_on(TERN_DEVICE_CUDA, true);
    struct tern_model *cpu = open_on(TERN_DEVICE_CPU, true);
    assert_null(ops->core.step);
    if (!stp->core.step) fail_msg("no decode step plan for %s", qdir);
    int V = (int)stp->core.hp.vocab_size;
    int32_t ids[N_POS];
    for (int i = 0; i < N_POS; i++) ids[i] = (int32_t)(((int64_t)i * 7919 + 13) % V);
    float *a = tu_model_logits(ops, ids, N_POS, V, 1, 16),
          *b = tu_model_logits(stp, ids, N_POS, V, 1, 16);
    float *c = tu_model_logits(cpu, ids, N_POS, V, 1, 16);
    double e_ops = tu_max_rel_err(b, a, (size_t)N_POS * V);
    double e_cpu = tu_max_rel_err(b, c, (size_t)N_POS * V);
    double e_ref = tu_max_rel_err(a, c, (size_t)N_POS * V);
    printf("  step vs op-by-op %.2e, vs CPU %.2e (op-by-op vs CPU %.2e), %d positions\n", e_ops,
           e_cpu, e_ref, N_POS);
    if (!(e_ops <= STEP_REL)) fail_msg("step logits vs op-by-op: rel err %.3e", e_ops);
    if (!(e_cpu <= CUDA_REL)) fail_msg("step logits vs CPU: rel err %.3e", e_cpu);
    int close = 0, agree = argmax_agree(a, b, N_POS, V, &close);
    printf("  argmax equal at %d positions (%d near-ties not compared)\n", agree, close);
    /* deterministic: every sum in a fixed order (tile parts in warp order,
     * splits merged in split order, no float atomics), so a second run of
     * the same tokens gives the same bits */
    float *b2 = tu_model_logits(stp, ids, N_POS, V, 1, 16);
    size_t diff = 0;
    for (size_t i = 0; i < (size_t)N_POS * V; i++) diff += memcmp(&b[i], &b2[i], sizeof *b) != 0;
    if (diff)
        fail_msg("step logits differ between two runs at %zu of %zu", diff, (size_t)N_POS * V);
    tern_free(b2);
    /* the instrumented kernel: the same logits, and its stamps on close */
    char stamps[300], gaps[320];
    snprintf(stamps, sizeof stamps, "%s.stamps.csv", qdir);
    snprintf(gaps, sizeof gaps, "%s.gaps", stamps);
    setenv("TERN_CUDA_STEP_STAMPS", stamps, 1);
    struct tern_model *ins = open_on(TERN_DEVICE_CUDA, true);
    unsetenv("TERN_CUDA_STEP_STAMPS");
    if (!ins->core.step) fail_msg("no decode step plan with stamps");
    float *d = tu_model_logits(ins, ids, N_POS, V, 1, 16);
    if (memcmp(d, b, (size_t)N_POS * V * sizeof *b) != 0)
        fail_msg("the instrumented step kernel's logits differ from the plain one's");
    tern_free(d);
    tern_model_close(ins);
    long n_ops = 4L * stp->core.hp.num_hidden_layers + 1, rows = count_lines(stamps) - 1;
    long n_gaps = count_lines(gaps);
    printf("  stamped: logits bitwise the plain kernel's; %ld stamp rows, %ld launch gaps\n", rows,
           n_gaps);
    if (rows < n_ops || rows % n_ops != 0)
        fail_msg("%s: %ld rows, not one per op (%ld) and block", stamps, rows, n_ops);
    if (n_gaps < N_POS / 2) fail_msg("%s: %ld launch gaps for %d steps", gaps, n_gaps, N_POS);
    /* greedy generation: the decode loop's captured graphs */
    int32_t *ga = tu_model_greedy(ops, ids, 8, 48), *gb = tu_model_greedy(stp, ids, 8, 48);
    int same = 0;
    while (same < 48 && ga[same] == gb[same]) same++;
    printf("  greedy: %d of 48 tokens equal before the paths part\n", same);
    if (same < 48) { /* only at a near-tie of the op-by-op logits */
        int n = 8 + same;
        int32_t *seq = tern_malloc((size_t)n * sizeof(int32_t));
        memcpy(seq, ids, 8 * sizeof(int32_t));
        memcpy(seq + 8, ga, (size_t)same * sizeof(int32_t));
        float *la = tu_model_logits(ops, seq, n, V, 1, 16);
        int arg = 0;
        double gap = top2_gap(la + (size_t)(n - 1) * V, V, &arg);
        if (gap >= TIE)
            fail_msg("greedy token %d: %d vs op-by-op %d (gap %.2e)", same, gb[same], ga[same],
                     gap);
        tern_free(la);
        tern_free(seq);
    }
    tern_free(ga);
    tern_free(gb);
    fused_check(stp, V, "tiny model");
    tern_free(a);
    tern_free(b);
    tern_free(c);
    tern_model_close(cpu);
    tern_model_close(stp);
    tern_model_close(ops);
}

/* A wider model, written here with random BF16 weights and quantized:
 * hidden 1024, ff 2816 (down's 44 groups: 4 warps per tile, slices of 11
 * records, a short last chunk), 8 q heads on 2 kv heads of 128 (G = 4, the
 * 8B's), llama3 rope, 2 layers, vocab 2048; qkv / o / gate_up / lm_head
 * take 16 warps per tile, so the tile sums of several warps run. */
#define W_E 1024
#define W_F 2816
#define W_V 2048
#define W_L 2

struct st_out {
    FILE *f;
    char hdr[8192];
    size_t hlen, off;
};

static void st_add(struct st_out *o, const char *name, int64_t r, int64_t c)
{
    size_t n = (size_t)(r * (c ? c : 1)) * 2;
    int k =
        c ? snprintf(
                o->hdr + o->hlen, sizeof o->hdr - o->hlen,
                "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]}",
                o->hlen > 1 ? "," : "", name, (long long)r, (long long)c, o->off, o->off + n)
          : snprintf(o->hdr + o->hlen, sizeof o->hdr - o->hlen,
                     "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld],\"data_offsets\":[%zu,%zu]}",
                     o->hlen > 1 ? "," : "", name, (long long)r, o->off, o->off + n);
    o->hlen += (size_t)k;
    o->off += n;
}

/* Every tensor's name and shape, in file order (pass 0: header, 1: data);
 * big: layer 1's post-attention norm and the final norm weights 40000. */
static void wide_tensors(struct st_out *o, int pass, uint64_t *rng, bool big)
{
    char name[128];
    struct {
        const char *n;
        int64_t r, c;
        float amp, base;
    } per[] = {{"self_attn.q_proj.weight", 8 * 128, W_E, 0.05f, 0},
               {"self_attn.k_proj.weight", 2 * 128, W_E, 0.05f, 0},
               {"self_attn.v_proj.weight", 2 * 128, W_E, 0.05f, 0},
               {"self_attn.o_proj.weight", W_E, 8 * 128, 0.03f, 0},
               {"mlp.gate_proj.weight", W_F, W_E, 0.05f, 0},
               {"mlp.up_proj.weight", W_F, W_E, 0.05f, 0},
               {"mlp.down_proj.weight", W_E, W_F, 0.03f, 0},
               {"input_layernorm.weight", W_E, 0, 0.2f, 1},
               {"post_attention_layernorm.weight", W_E, 0, 0.2f, 1}};
    struct {
        const char *n;
        int64_t r, c;
        float amp, base;
    } top[] = {{"model.embed_tokens.weight", W_V, W_E, 1.0f, 0},
               {"model.norm.weight", W_E, 0, 0.2f, 1},
               {"lm_head.weight", W_V, W_E, 0.05f, 0}};
    for (int t = 0; t < 3 + W_L * 9; t++) {
        const char *n;
        int64_t r, c;
        float amp, base;
        if (t < 3) {
            n = top[t].n, r = top[t].r, c = top[t].c, amp = top[t].amp, base = top[t].base;
            if (big && t == 1) base = 40000.0f;
            snprintf(name, sizeof name, "%s", n);
        } else {
            int l = (t - 3) / 9, k = (t - 3) % 9;
            r = per[k].r, c = per[k].c, amp = per[k].amp, base = per[k].base;
            if (big && l == 1 && k == 8) base = 40000.0f;
            snprintf(name, sizeof name, "model.layers.%d.%s", l, per[k].n);
        }
        if (pass == 0) {
            st_add(o, name, r, c);
            continue;
        }
        size_t n_el = (size_t)(r * (c ? c : 1));
        for (size_t i = 0; i < n_el; i++) {
            float v = base + amp * tu_frand(rng);
            uint32_t u;
            memcpy(&u, &v, 4);
            uint16_t h = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            fwrite(&h, 2, 1, o->f);
        }
    }
}

static bool write_wide(const char *dir, bool big)
{
    char path[300];
    if (mkdir(dir, 0755) != 0) return false;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fprintf(
        f,
        "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":%d,"
        "\"intermediate_size\":%d,\"num_attention_heads\":8,\"num_key_value_heads\":2,"
        "\"head_dim\":128,\"num_hidden_layers\":%d,\"vocab_size\":%d,\"rms_norm_eps\":1e-5,"
        "\"rope_theta\":500000.0,\"max_position_embeddings\":4096,\"rope_scaling\":{\"factor\":8.0,"
        "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":"
        "1024,\"rope_type\":\"llama3\"},\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\"}"
        "\n",
        W_E, W_F, W_L, W_V);
    fclose(f);
    struct st_out o = {.hdr = "{", .hlen = 1};
    uint64_t rng = 12345;
    wide_tensors(&o, 0, &rng, big);
    o.hdr[o.hlen++] = '}';
    while (o.hlen % 8) o.hdr[o.hlen++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    o.f = fopen(path, "wb");
    if (!o.f) return false;
    uint64_t hl = o.hlen;
    fwrite(&hl, 8, 1, o.f);
    fwrite(o.hdr, 1, o.hlen, o.f);
    wide_tensors(&o, 1, &rng, big);
    return fclose(o.f) == 0;
}

/* The step against the op-by-op forward on the model in dir, and its
 * argmax position by position. */
static void wide_check(const char *dir, const char *what)
{
    struct tern_model *ops = open_dir(dir, TERN_DEVICE_CUDA, false);
    struct tern_model *stp = open_dir(dir, TERN_DEVICE_CUDA, true);
    if (!stp->core.step) fail_msg("no decode step plan for %s", dir);
    int V = W_V;
    int32_t ids[N_POS];
    for (int i = 0; i < N_POS; i++) ids[i] = (int32_t)(((int64_t)i * 7919 + 13) % V);
    float *a = tu_model_logits(ops, ids, N_POS, V, 1, 16),
          *b = tu_model_logits(stp, ids, N_POS, V, 1, 16);
    double e_ops = tu_max_rel_err(b, a, (size_t)N_POS * V);
    printf("  %s: step vs op-by-op %.2e over %d positions\n", what, e_ops, N_POS);
    if (!(e_ops <= STEP_REL)) fail_msg("%s: step logits vs op-by-op: rel err %.3e", what, e_ops);
    int close = 0, agree = argmax_agree(a, b, N_POS, V, &close);
    printf("  %s: argmax equal at %d (%d near-ties)\n", what, agree, close);
    fused_check(stp, V, what);
    tern_free(a);
    tern_free(b);
    tern_model_close(stp);
    tern_model_close(ops);
}

static void test_step_wide(void **state)
{
    (void)state;
    if (!wdir[0]) skip();
    wide_check(wdir, "wide model");
}

static void test_step_f16_range(void **state)
{
    (void)state;
    if (!hdir[0]) skip();
    wide_check(hdir, "wide model, inputs beyond f16");
}

/* Logits of every position of ids (n tokens), one token per step, with
 * room for n positions (tu_model_logits' engine holds 256). */
static float *long_logits(struct tern_model *m, const int32_t *ids, int n, int V)
{
    struct tern_engine_params ep = tern_engine_default_params();
    ep.max_seqs = 1;
    ep.max_batch_tokens = 1;
    ep.block_size = 16;
    ep.max_context = n;
    struct tern_engine *e = NULL;
    if (tern_engine_create(m, &ep, &e) != TERN_OK) fail_msg("engine: %s", tern_last_error());
    float *out = tern_malloc((size_t)n * (size_t)V * sizeof(float));
    assert_non_null(out);
    if (tern_logits(e, ids, n, out) != TERN_OK) fail_msg("logits: %s", tern_last_error());
    tern_engine_destroy(e);
    return out;
}

/* The wide model (G = 4, head_dim 128: at most 16 attention splits per kv
 * head, tk_step_merge_floats) over N_LONG positions: beyond 16 x 64 each
 * split runs several 64-position passes into its online softmax before
 * the merge. Every position's logits against the op-by-op forward. */
#define N_LONG 1100
static void test_step_long(void **state)
{
    (void)state;
    if (!wdir[0]) skip();
    struct tern_model *ops = open_dir(wdir, TERN_DEVICE_CUDA, false);
    struct tern_model *stp = open_dir(wdir, TERN_DEVICE_CUDA, true);
    if (!stp->core.step) fail_msg("no decode step plan for %s", wdir);
    int V = W_V;
    int32_t *ids = tern_malloc(N_LONG * sizeof(int32_t));
    for (int i = 0; i < N_LONG; i++) ids[i] = (int32_t)(((int64_t)i * 7919 + 13) % V);
    float *a = long_logits(ops, ids, N_LONG, V), *b = long_logits(stp, ids, N_LONG, V);
    double e_ops = tu_max_rel_err(b, a, (size_t)N_LONG * V);
    printf("  long context: step vs op-by-op %.2e over %d positions\n", e_ops, N_LONG);
    if (!(e_ops <= STEP_REL))
        fail_msg("long context: step logits vs op-by-op: rel err %.3e", e_ops);
    int close = 0, agree = argmax_agree(a, b, N_LONG, V, &close);
    printf("  long context: argmax equal at %d (%d near-ties)\n", agree, close);
    tern_free(a);
    tern_free(b);
    tern_free(ids);
    tern_model_close(stp);
    tern_model_close(ops);
}

static int setup(void **state)
{
    (void)state;
    if (!tern_backend_cuda_available()) {
        printf("skipped: no CUDA device\n");
        return 0;
    }
    char tmpl[] = "/tmp/tern-step-XXXXXX";
    if (!mkdtemp(tmpl)) return 1;
    snprintf(qdir, sizeof qdir, "%s/q4", tmpl);
    char wide[300];
    snprintf(wide, sizeof wide, "%s/wide", tmpl);
    snprintf(wdir, sizeof wdir, "%s/wide-q4", tmpl);
    char huge[300];
    snprintf(huge, sizeof huge, "%s/huge", tmpl);
    snprintf(hdir, sizeof hdir, "%s/huge-q4", tmpl);
    char *src = tu_fixture("models/tiny-llama-yarn");
    struct tern_quantize_params qp = tern_quantize_default_params();
    enum tern_status st = tern_quantize(src, qdir, &qp);
    tern_free(src);
    if (st == TERN_OK && !write_wide(wide, false)) st = tern_error(TERN_E_IO, "writing %s", wide);
    if (st == TERN_OK) st = tern_quantize(wide, wdir, &qp);
    if (st == TERN_OK && !write_wide(huge, true)) st = tern_error(TERN_E_IO, "writing %s", huge);
    if (st == TERN_OK) st = tern_quantize(huge, hdir, &qp);
    if (st != TERN_OK) {
        printf("quantize: %s\n", tern_last_error());
        return 1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (qdir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%.*s'", (int)(strrchr(qdir, '/') - qdir), qdir);
        if (system(cmd) != 0) return 1;
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_logits), cmocka_unit_test(test_step_wide),
        cmocka_unit_test(test_step_f16_range), cmocka_unit_test(test_step_long)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
