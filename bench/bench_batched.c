/*
 * bench_batched.c — aggregate decode throughput of N concurrent requests
 * through the serving API (include/tern.h only): for each N, submit N
 * requests of PROMPT random tokens at once (greedy, ignore_eos, GEN new
 * tokens each), read every stream to its end on its own thread, and time.
 *
 *   end-to-end tok/s   N * GEN / (last token - submit)
 *   decode tok/s       tokens that arrive after every request has its first
 *                      token, over the time from then to the last token
 *                      (the steady batched-decode rate, prefill excluded)
 *
 * Each N runs once with 8 tokens to warm up (graph capture, matmul
 * algorithm choice), then once measured. A checksum of every generated id
 * (request order) is printed so that runs can be compared (graph replay on
 * or off, deterministic mode, repeated runs). One JSON line per N on stdout.
 *
 * usage: bench_batched --model DIR [--device cpu|cuda] [--prompt-len 128]
 *        [--gen 128] [--n 1,8,32,64,128] [--deterministic]
 * Built with the library (CMake target bench_batched); carried to the GPU by
 * scripts/gpu.sh.
 */
#include "tern.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

struct reader {
    struct tern_stream *s;
    int gen;
    double *t;   /* [gen] arrival time of each token */
    int32_t *ids; /* [gen] */
    int n;
    enum tern_status st;
};

static void *read_stream(void *arg)
{
    struct reader *r = arg;
    struct tern_event ev;
    for (;;) {
        enum tern_status st = tern_stream_next(r->s, -1, &ev);
        if (st != TERN_OK) {
            r->st = st;
            return NULL;
        }
        if (ev.type == TERN_EVENT_TOKEN && r->n < r->gen) {
            r->t[r->n] = now_s();
            r->ids[r->n++] = ev.token;
        }
        if (ev.type == TERN_EVENT_DONE) {
            r->st = ev.status;
            if (ev.final) return NULL;
        }
    }
}

struct result {
    double e2e_tok_s, decode_tok_s, wall_s, ttft_max_s;
    uint64_t checksum;
    int n_tokens;
};

/* Runs N requests once; fails with a message on any error. */
static int run_level(struct tern_engine *e, int N, int prompt_len, int gen, int32_t vocab,
                     struct result *out)
{
    struct reader *rd = calloc((size_t)N, sizeof *rd);
    pthread_t *th = calloc((size_t)N, sizeof *th);
    int32_t *prompt = malloc((size_t)prompt_len * sizeof *prompt);
    if (!rd || !th || !prompt) return 1;
    int rc = 0;
    double t0 = now_s();
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < prompt_len; j++)
            prompt[j] = (int32_t)((1009u * (unsigned)i + 7919u * (unsigned)j + 13u) % (unsigned)vocab);
        struct tern_request rq = {0};
        rq.ids = prompt;
        rq.n_ids = prompt_len;
        rq.sampling = tern_sampling_default_params();
        rq.sampling.max_tokens = gen;
        rq.sampling.ignore_eos = true;
        rd[i].gen = gen;
        rd[i].t = calloc((size_t)gen, sizeof(double));
        rd[i].ids = calloc((size_t)gen, sizeof(int32_t));
        if (tern_engine_submit(e, &rq, &rd[i].s) != TERN_OK) {
            fprintf(stderr, "submit %d: %s\n", i, tern_last_error());
            return 1;
        }
        pthread_create(&th[i], NULL, read_stream, &rd[i]);
    }
    double all_first = t0, end = t0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        if (rd[i].st != TERN_OK || rd[i].n != gen) {
            fprintf(stderr, "request %d: status %d, %d of %d tokens: %s\n", i, (int)rd[i].st,
                    rd[i].n, gen, tern_last_error());
            rc = 1;
        }
        if (rd[i].n > 0 && rd[i].t[0] > all_first) all_first = rd[i].t[0];
        if (rd[i].n > 0 && rd[i].t[rd[i].n - 1] > end) end = rd[i].t[rd[i].n - 1];
    }
    uint64_t h = 1469598103934665603ull;
    int after = 0, total = 0;
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < rd[i].n; k++) {
            h = (h ^ (uint64_t)(uint32_t)rd[i].ids[k]) * 1099511628211ull;
            after += rd[i].t[k] > all_first;
        }
        total += rd[i].n;
        tern_stream_destroy(rd[i].s);
        free(rd[i].t);
        free(rd[i].ids);
    }
    out->wall_s = end - t0;
    out->ttft_max_s = all_first - t0;
    out->e2e_tok_s = total / (end - t0);
    out->decode_tok_s = end > all_first ? after / (end - all_first) : 0;
    out->checksum = h;
    out->n_tokens = total;
    free(rd);
    free(th);
    free(prompt);
    return rc;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *levels = "1,8,32,64,128";
    enum tern_device dev = TERN_DEVICE_AUTO;
    int prompt_len = 128, gen = 128;
    bool det = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--deterministic")) det = true;
        else if (!v) return fprintf(stderr, "%s needs a value\n", a), 2;
        else if (!strcmp(a, "--model")) model = v, i++;
        else if (!strcmp(a, "--device")) dev = !strcmp(v, "cpu") ? TERN_DEVICE_CPU : TERN_DEVICE_CUDA, i++;
        else if (!strcmp(a, "--prompt-len")) prompt_len = atoi(v), i++;
        else if (!strcmp(a, "--gen")) gen = atoi(v), i++;
        else if (!strcmp(a, "--n")) levels = v, i++;
        else return fprintf(stderr, "unknown option %s\n", a), 2;
    }
    if (!model || prompt_len < 1 || gen < 2) {
        fprintf(stderr, "usage: bench_batched --model DIR [--device cpu|cuda] [--prompt-len N] "
                        "[--gen N] [--n 1,8,...] [--deterministic]\n");
        return 2;
    }
    int ns[16], n_levels = 0, max_n = 1;
    for (const char *p = levels; *p && n_levels < 16; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
        ns[n_levels] = atoi(p);
        if (ns[n_levels] > max_n) max_n = ns[n_levels];
        n_levels++;
    }
    struct tern_model_params mp = tern_model_default_params();
    mp.device = dev;
    struct tern_model *m = NULL;
    if (tern_model_open(model, &mp, &m) != TERN_OK) {
        fprintf(stderr, "open: %s\n", tern_last_error());
        return 1;
    }
    struct tern_model_info info;
    tern_model_get_info(m, &info);
    struct tern_engine_params ep = tern_engine_default_params();
    ep.max_seqs = max_n;
    ep.max_context = (prompt_len + gen + 15) / 16 * 16;
    ep.deterministic = det;
    struct tern_engine *e = NULL;
    if (tern_engine_create(m, &ep, &e) != TERN_OK) {
        fprintf(stderr, "engine: %s\n", tern_last_error());
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < n_levels && rc == 0; i++) {
        struct result warm, r;
        rc = run_level(e, ns[i], prompt_len, 8, info.vocab_size, &warm);
        if (rc == 0) rc = run_level(e, ns[i], prompt_len, gen, info.vocab_size, &r);
        if (rc) break;
        printf("{\"n\": %d, \"prompt_len\": %d, \"gen\": %d, \"deterministic\": %s, "
               "\"decode_tok_s\": %.1f, \"e2e_tok_s\": %.1f, \"wall_s\": %.3f, "
               "\"ttft_max_s\": %.3f, \"tokens\": %d, \"checksum\": \"%016llx\"}\n",
               ns[i], prompt_len, gen, det ? "true" : "false", r.decode_tok_s, r.e2e_tok_s,
               r.wall_s, r.ttft_max_s, r.n_tokens, (unsigned long long)r.checksum);
        fflush(stdout);
    }
    tern_engine_destroy(e);
    tern_model_close(m);
    return rc;
}
