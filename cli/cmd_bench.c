/*
 * cmd_bench.c — `tern bench`. By default: model load time, prefill and decode
 * speed of one sequence, with the memory-bandwidth floor for decode on the
 * CPU. With --concurrency: many requests at once through the serving API
 * (bench_batch.c). Parses the options of both modes. Prints a table, or JSON
 * with --json. Built on the public API (include/tern.h).
 */
#include "bench.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Host memory copy bandwidth (bytes read + written per second), median of 5. */
static double host_bandwidth(void)
{
    size_t n = (size_t)256 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    for (size_t i = 0; i < n; i += 4096) a[i] = (char)i, b[i] = 0;
    memcpy(b, a, n);
    double t[5];
    for (int r = 0; r < 5; r++) {
        double t0 = cli_now_s();
        memcpy(b, a, n);
        t[r] = cli_now_s() - t0;
    }
    volatile char sink = b[n / 2];
    (void)sink;
    free(a);
    free(b);
    return 2.0 * (double)n / median(t, 5);
}

struct tern_engine_params bench_engine_params(const struct bench_opts *o)
{
    struct tern_engine_params ep = tern_engine_default_params();
    if (o->max_batch_tokens) ep.max_batch_tokens = (int32_t)o->max_batch_tokens;
    if (o->block_size) ep.block_size = (int32_t)o->block_size;
    if (o->kv_bytes) ep.kv_bytes = o->kv_bytes;
    if (o->kv_fraction > 0) ep.kv_fraction = o->kv_fraction;
    ep.deterministic = o->deterministic;
    return ep;
}

void bench_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void bench_random_ids(int32_t *ids, long long n, long long seed, long long stream, int32_t vocab)
{
    /* splitmix64 over (seed, stream, i): independent streams from one seed */
    for (long long i = 0; i < n; i++) {
        uint64_t z = (uint64_t)seed * 0x9E3779B97F4A7C15ull +
                     (uint64_t)stream * 0xD1B54A32D192ED03ull +
                     (uint64_t)i * 0x94D049BB133111EBull + 0x2545F4914F6CDD1Dull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        ids[i] = (int32_t)(z % (uint64_t)vocab);
    }
}

static const char usage_text[] =
    "usage: tern bench --model DIR|FILE.gguf [--prompt-len N] [--gen N] [--device cpu|cuda|auto]\n"
    "                  [--json]\n"
    "  single sequence (default):  [--reps N]\n"
    "  concurrent requests:        --concurrency N[,N...] [--shared-prefix L] [--max-seqs N]\n"
    "                              [--seed N] [--temperature T] [--top-p P] [--top-k K]\n"
    "  engine:                     [--max-batch-tokens N] [--block-size N]\n"
    "                              [--kv-bytes N[K|M|G]] [--kv-fraction F] [--deterministic]\n"
    "Single sequence: load time, prefill tok/s, time to first token, decode tok/s (median of\n"
    "reps). Concurrent: per level, N greedy requests of --prompt-len random ids (after an\n"
    "L-token prefix shared by all, when --shared-prefix) each generating exactly --gen tokens,\n"
    "submitted at once: output tok/s, prefill tok/s, TTFT and inter-token latency p50/p90/p99,\n"
    "prefix-cache hit rate. --max-seqs defaults to max(N, 16). --temperature T > 0 samples\n"
    "instead (with --top-p / --top-k; request i seeded with --seed + i): on CUDA the draw runs\n"
    "on the device unless TERN_GPU_SAMPLE=0.\n";

/* Integer flags: where they go and which mode they belong to. */
enum { MODE_BOTH, MODE_SINGLE, MODE_CONC };
static const struct int_flag {
    const char *name;
    long long lo, hi;
    size_t off;
    int mode;
} int_flags[] = {
    {"--prompt-len", 1, 1 << 20, offsetof(struct bench_opts, prompt_len), MODE_BOTH},
    {"--gen", 1, 1 << 20, offsetof(struct bench_opts, gen), MODE_BOTH},
    {"--reps", 1, 1000, offsetof(struct bench_opts, reps), MODE_SINGLE},
    {"--max-batch-tokens", 1, 1 << 24, offsetof(struct bench_opts, max_batch_tokens), MODE_BOTH},
    {"--block-size", 1, 1024, offsetof(struct bench_opts, block_size), MODE_BOTH},
    {"--max-seqs", 1, 1 << 16, offsetof(struct bench_opts, max_seqs), MODE_CONC},
    {"--shared-prefix", 0, 1 << 20, offsetof(struct bench_opts, shared_prefix), MODE_CONC},
    {"--seed", 0, INT32_MAX, offsetof(struct bench_opts, seed), MODE_CONC},
    {"--top-k", 0, 1 << 24, offsetof(struct bench_opts, top_k), MODE_CONC},
};

/* "1,8,32": the concurrency levels. */
static bool parse_levels(const char *s, struct bench_opts *o)
{
    const char *p = s;
    o->n_levels = 0;
    for (;;) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 1 || v > 4096 || o->n_levels == BENCH_MAX_LEVELS) break;
        o->levels[o->n_levels++] = v;
        if (!*end) return true;
        if (*end != ',') break;
        p = end + 1;
    }
    fprintf(stderr,
            "tern bench: --concurrency expects up to %d integers in [1, 4096] separated "
            "by commas, got '%s'\n",
            BENCH_MAX_LEVELS, s);
    return false;
}

static void defaults(struct bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->prompt_len = 512;
    o->gen = 128;
    o->reps = 3;
    o->device = TERN_DEVICE_AUTO;
    o->seed = 1;
    o->top_p = 1.0;
}

/* Returns -1 to go on, else the exit code. `*only` names a flag of one mode. */
static int parse_one(int argc, char **argv, int *i, struct bench_opts *o, const char **single_only,
                     const char **conc_only)
{
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    for (size_t k = 0; k < sizeof int_flags / sizeof int_flags[0]; k++) {
        const struct int_flag *f = &int_flags[k];
        if (strcmp(a, f->name) || !v) continue;
        long long *dst = (long long *)((char *)o + f->off);
        if (!cli_parse_int("bench", a, argv[++*i], f->lo, f->hi, dst)) return 2;
        if (f->mode == MODE_SINGLE) *single_only = f->name;
        if (f->mode == MODE_CONC) *conc_only = f->name;
        return -1;
    }
    if (!strcmp(a, "--model") && v)
        o->model = argv[++*i];
    else if (!strcmp(a, "--device") && v) {
        if (!cli_parse_device("bench", argv[++*i], &o->device)) return 2;
    } else if (!strcmp(a, "--concurrency") && v) {
        if (!parse_levels(argv[++*i], o)) return 2;
    } else if (!strcmp(a, "--kv-bytes") && v) {
        if (!cli_parse_bytes("bench", a, argv[++*i], &o->kv_bytes)) return 2;
    } else if (!strcmp(a, "--kv-fraction") && v) {
        char *end;
        o->kv_fraction = strtod(argv[++*i], &end);
        if (end == v || *end || !(o->kv_fraction > 0 && o->kv_fraction <= 1)) {
            fprintf(stderr, "tern bench: --kv-fraction expects a number in (0, 1], got '%s'\n", v);
            return 2;
        }
    } else if ((!strcmp(a, "--temperature") || !strcmp(a, "--top-p")) && v) {
        bool t = a[2] == 't' && a[3] == 'e';
        if (!cli_parse_real("bench", a, argv[++*i], t ? 0.0 : 1e-6, t ? 100.0 : 1.0,
                        t ? &o->temperature : &o->top_p))
            return 2;
        *conc_only = a;
    } else if (!strcmp(a, "--json"))
        o->json = true;
    else if (!strcmp(a, "--deterministic"))
        o->deterministic = true;
    else
        return cli_usage("bench", "unknown or incomplete option '%s'", a);
    return -1;
}

static int parse(int argc, char **argv, struct bench_opts *o)
{
    defaults(o);
    const char *single_only = NULL, *conc_only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
        int rc = parse_one(argc, argv, &i, o, &single_only, &conc_only);
        if (rc >= 0) return rc;
    }
    if (!o->model) return cli_usage("bench", "--model DIR|FILE.gguf is required");
    if (o->n_levels && single_only)
        return cli_usage("bench", "%s applies to the single-sequence mode, not --concurrency",
                         single_only);
    if (!o->n_levels && conc_only) return cli_usage("bench", "%s needs --concurrency", conc_only);
    return -1;
}

struct single_result {
    double ttft_s, total_s; /* medians: prefill + 1 token, prefill + gen + 1 tokens */
};

/* Warm-up, then the median of reps of (prefill + 1 token) and (prefill + gen + 1). */
static int measure_single(const struct bench_opts *o, struct tern_model *m,
                          const struct tern_model_info *in, struct single_result *res)
{
    int rc = 0;
    struct tern_engine *e = NULL;
    struct tern_engine_params ep = bench_engine_params(o);
    ep.max_seqs = 1;
    ep.max_context = (int32_t)(o->prompt_len + o->gen + 1);
    int32_t *ids = malloc((size_t)o->prompt_len * sizeof *ids);
    int32_t *out = malloc((size_t)(o->gen + 1) * sizeof *out);
    double *tp = calloc((size_t)o->reps, sizeof *tp), *tg = calloc((size_t)o->reps, sizeof *tg);
    enum tern_status st;
    if (!ids || !out || !tp || !tg) {
        rc = cli_fail("bench", "out of memory", TERN_E_NO_MEMORY);
        goto done;
    }
    if ((st = tern_engine_create(m, &ep, &e)) != TERN_OK) {
        rc = cli_fail("bench", "engine", st);
        goto done;
    }
    uint32_t x = 12345;
    for (long long i = 0; i < o->prompt_len; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)((x >> 8) % (uint32_t)in->vocab_size);
    }
    int32_t n_out, n_ids = (int32_t)o->prompt_len;
    st = tern_generate_greedy(e, ids, n_ids, 2, false, out, &n_out);
    /* Each rep times the prompt + 1 token and the prompt + 1 + gen tokens;
     * decode is their difference. A rep whose difference noise swallowed
     * (another process took the core) is taken again, up to max(3 reps, 10)
     * tries; the medians are over the reps that counted. None: the decode
     * time is 0 (print_single reports it as not measured). */
    long long r = 0, max_tries = o->reps * 3 > 10 ? o->reps * 3 : 10;
    double tp_last = 0;
    for (long long tries = 0; st == TERN_OK && r < o->reps && tries < max_tries; tries++) {
        double a = cli_now_s();
        st = tern_generate_greedy(e, ids, n_ids, 1, false, out, &n_out);
        tp_last = cli_now_s() - a;
        if (st != TERN_OK) break;
        a = cli_now_s();
        st = tern_generate_greedy(e, ids, n_ids, (int32_t)o->gen + 1, false, out, &n_out);
        double t = cli_now_s() - a;
        if (t > tp_last) tp[r] = tp_last, tg[r] = t, r++;
    }
    if (st != TERN_OK) {
        rc = cli_fail("bench", NULL, st);
        goto done;
    }
    res->ttft_s = r ? median(tp, (int)r) : tp_last;
    res->total_s = r ? median(tg, (int)r) : tp_last;
done:
    free(ids);
    free(out);
    free(tp);
    free(tg);
    tern_engine_destroy(e);
    return rc;
}

static void print_single(const struct bench_opts *o, const struct tern_model_info *in,
                         double load_s, const struct single_result *res)
{
    double prefill_tps = (double)o->prompt_len / res->ttft_s;
    /* 0: every rep's decode time was lost in the timer's noise */
    double decode_tps =
        res->total_s > res->ttft_s ? (double)o->gen / (res->total_s - res->ttft_s) : 0.0;
    if (decode_tps == 0.0)
        fprintf(stderr, "bench: decode time not measurable (below the timing noise in every "
                        "rep); raise --gen\n");
    double bw = in->device == TERN_DEVICE_CPU ? host_bandwidth() : 0;
    /* Decode reads every weight once per token (of an untied embedding table
     * only the token's row); bw counts bytes read + written. */
    double floor_tps = bw > 0 ? bw / (double)in->decode_bytes : 0;
    if (o->json) {
        printf("{\"model\": ");
        bench_json_str(stdout, o->model);
        printf(
            ", \"architecture\": \"%s\", \"dtype\": \"%s\", \"n_params\": %lld, "
            "\"weight_bytes\": %lld, \"decode_bytes\": %lld, \"device\": \"%s\", \"load_s\": %.4f, "
            "\"prompt_len\": %lld, "
            "\"gen\": %lld, \"prefill_tok_s\": %.2f, \"ttft_ms\": %.3f, \"decode_tok_s\": %.2f, "
            "\"host_copy_bw_gb_s\": %.2f, \"decode_floor_tok_s\": %.2f}\n",
            in->architecture, in->dtype, (long long)in->n_params, (long long)in->weight_bytes,
            (long long)in->decode_bytes, cli_device_name(in->device), load_s,
            o->prompt_len, o->gen, prefill_tps, res->ttft_s * 1e3, decode_tps, bw / 1e9, floor_tps);
        return;
    }
    printf("model         %s (%s, %s, %.1f M params, %.1f MB, %.1f MB read per token)\n", o->model,
           in->architecture, in->dtype, (double)in->n_params / 1e6, (double)in->weight_bytes / 1e6,
           (double)in->decode_bytes / 1e6);
    printf("%-22s %12s\n", "metric", "value");
    printf("%-22s %12s\n", "device", cli_device_name(in->device));
    printf("%-22s %12.3f\n", "load (s)", load_s);
    printf("%-22s %12.1f\n", "prefill (tok/s)", prefill_tps);
    printf("%-22s %12.2f\n", "TTFT (ms)", res->ttft_s * 1e3);
    printf("%-22s %12.2f\n", "decode (tok/s)", decode_tps);
    if (floor_tps > 0) {
        printf("%-22s %12.2f\n", "decode floor (tok/s)", floor_tps);
        printf("%-22s %11.0f%%\n", "decode / floor", 100.0 * decode_tps / floor_tps);
    }
}

int tern_cmd_bench(int argc, char **argv)
{
    struct bench_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = o.device;
    mp.progress = !o.json && isatty(STDERR_FILENO);
    struct tern_model *m = NULL;
    double t0 = cli_now_s();
    enum tern_status st = tern_model_open(o.model, &mp, &m);
    if (st != TERN_OK) return cli_fail("bench", NULL, st);
    double load_s = cli_now_s() - t0;
    if (o.n_levels) {
        rc = bench_batch_run(&o, m, load_s);
    } else {
        struct tern_model_info in;
        struct single_result res = {0};
        tern_model_get_info(m, &in);
        rc = measure_single(&o, m, &in, &res);
        if (rc == 0) print_single(&o, &in, load_s, &res);
    }
    tern_model_close(m);
    return rc;
}
