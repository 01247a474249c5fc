/*
 * cmd_bench.c — `tern bench`: model load time, prefill and decode speed of one
 * sequence, with the memory-bandwidth floor for decode on the CPU. Prints a
 * table, or JSON with --json. Built on the public API.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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
        double t0 = now_s();
        memcpy(b, a, n);
        t[r] = now_s() - t0;
    }
    volatile char sink = b[n / 2];
    (void)sink;
    free(a);
    free(b);
    return 2.0 * (double)n / median(t, 5);
}

struct bench_opts {
    const char *model;
    long long prompt_len, gen, reps;
    enum tern_device device;
    bool json;
};

static int parse(int argc, char **argv, struct bench_opts *o)
{
    o->model = NULL;
    o->prompt_len = 512;
    o->gen = 128;
    o->reps = 3;
    o->device = TERN_DEVICE_CPU;
    o->json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: tern bench --model DIR [--prompt-len N] [--gen N] [--reps N]\n"
                   "                  [--device cpu|cuda] [--json]\n"
                   "Measures load time, prefill tok/s, time to first token and decode tok/s.\n");
            return 0;
        } else if (!strcmp(a, "--model") && v) o->model = argv[++i];
        else if (!strcmp(a, "--prompt-len") && v) {
            if (!cli_parse_int("bench", a, argv[++i], 1, 1 << 20, &o->prompt_len)) return 2;
        } else if (!strcmp(a, "--gen") && v) {
            if (!cli_parse_int("bench", a, argv[++i], 1, 1 << 20, &o->gen)) return 2;
        } else if (!strcmp(a, "--reps") && v) {
            if (!cli_parse_int("bench", a, argv[++i], 1, 1000, &o->reps)) return 2;
        } else if (!strcmp(a, "--device") && v) {
            if (!cli_parse_device("bench", argv[++i], &o->device)) return 2;
        } else if (!strcmp(a, "--json")) o->json = true;
        else return cli_usage("bench", "unknown or incomplete option '%s'", a);
    }
    if (!o->model) return cli_usage("bench", "--model DIR is required");
    return -1;
}

int tern_cmd_bench(int argc, char **argv)
{
    struct bench_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    rc = 0;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = o.device;
    mp.progress = !o.json && isatty(STDERR_FILENO);
    struct tern_model *m = NULL;
    struct tern_engine *e = NULL;
    int32_t *ids = NULL, *out = NULL;
    double t0 = now_s();
    enum tern_status st = tern_model_open(o.model, &mp, &m);
    if (st != TERN_OK) return cli_fail("bench", NULL, st);
    double load_s = now_s() - t0;
    struct tern_model_info in;
    tern_model_get_info(m, &in);
    struct tern_engine_params ep = tern_engine_default_params();
    ep.max_seqs = 1;
    ep.max_context = (int32_t)(o.prompt_len + o.gen + 1);
    if ((st = tern_engine_create(m, &ep, &e)) != TERN_OK) {
        rc = cli_fail("bench", "engine", st);
        goto done;
    }
    ids = malloc((size_t)o.prompt_len * sizeof *ids);
    out = malloc((size_t)(o.gen + 1) * sizeof *out);
    if (!ids || !out) {
        rc = cli_fail("bench", "out of memory", TERN_E_NO_MEMORY);
        goto done;
    }
    uint32_t x = 12345;
    for (long long i = 0; i < o.prompt_len; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)((x >> 8) % (uint32_t)in.vocab_size);
    }
    double *tp = calloc((size_t)o.reps, sizeof *tp), *tg = calloc((size_t)o.reps, sizeof *tg);
    int32_t n_out;
    if (!tp || !tg) {
        free(tp);
        free(tg);
        rc = cli_fail("bench", "out of memory", TERN_E_NO_MEMORY);
        goto done;
    }
    /* warm-up, then median of reps */
    st = tern_generate_greedy(e, ids, (int32_t)o.prompt_len, 2, false, out, &n_out);
    for (long long r = 0; st == TERN_OK && r < o.reps; r++) {
        double a = now_s();
        st = tern_generate_greedy(e, ids, (int32_t)o.prompt_len, 1, false, out, &n_out);
        tp[r] = now_s() - a;
        if (st != TERN_OK) break;
        a = now_s();
        st = tern_generate_greedy(e, ids, (int32_t)o.prompt_len, (int32_t)o.gen + 1, false, out,
                                  &n_out);
        tg[r] = now_s() - a;
    }
    if (st != TERN_OK) {
        free(tp);
        free(tg);
        rc = cli_fail("bench", NULL, st);
        goto done;
    }
    double ttft = median(tp, (int)o.reps);
    double total = median(tg, (int)o.reps);
    free(tp);
    free(tg);
    double prefill_tps = (double)o.prompt_len / ttft;
    double decode_tps = (double)o.gen / (total - ttft);
    double bw = o.device == TERN_DEVICE_CPU ? host_bandwidth() : 0;
    /* Decode reads every weight once per token; bw counts bytes read + written. */
    double floor_tps = bw > 0 ? bw / (double)in.weight_bytes : 0;
    if (o.json) {
        printf("{\"model\": \"%s\", \"architecture\": \"%s\", \"dtype\": \"%s\", \"n_params\": %lld, "
               "\"weight_bytes\": %lld, \"device\": \"%s\", \"load_s\": %.4f, \"prompt_len\": %lld, "
               "\"gen\": %lld, \"prefill_tok_s\": %.2f, \"ttft_ms\": %.3f, \"decode_tok_s\": %.2f, "
               "\"host_copy_bw_gb_s\": %.2f, \"decode_floor_tok_s\": %.2f}\n",
               o.model, in.architecture, in.dtype, (long long)in.n_params,
               (long long)in.weight_bytes, o.device == TERN_DEVICE_CUDA ? "cuda" : "cpu", load_s,
               o.prompt_len, o.gen, prefill_tps, ttft * 1e3, decode_tps, bw / 1e9, floor_tps);
    } else {
        printf("model         %s (%s, %s, %.1f M params, %.1f MB)\n", o.model, in.architecture,
               in.dtype, (double)in.n_params / 1e6, (double)in.weight_bytes / 1e6);
        printf("%-22s %12s\n", "metric", "value");
        printf("%-22s %12.3f\n", "load (s)", load_s);
        printf("%-22s %12.1f\n", "prefill (tok/s)", prefill_tps);
        printf("%-22s %12.2f\n", "TTFT (ms)", ttft * 1e3);
        printf("%-22s %12.2f\n", "decode (tok/s)", decode_tps);
        if (floor_tps > 0) {
            printf("%-22s %12.2f\n", "decode floor (tok/s)", floor_tps);
            printf("%-22s %11.0f%%\n", "decode / floor", 100.0 * decode_tps / floor_tps);
        }
    }
done:
    free(ids);
    free(out);
    tern_engine_destroy(e);
    tern_model_close(m);
    return rc;
}
