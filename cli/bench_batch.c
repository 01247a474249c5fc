/*
 * bench_batch.c — `tern bench --concurrency N[,N...]`: for each level, N
 * requests submitted at once through the serving API (tern_engine_submit),
 * greedy (or sampled: --temperature, --top-p, --top-k, request i seeded with
 * --seed + i) with ignore_eos so each generates exactly --gen tokens, each read by
 * its own thread blocking in tern_stream_next so every event is timestamped
 * when it arrives. Reports aggregate output tok/s, prefill tok/s, TTFT and
 * inter-token latency percentiles and the prefix-cache hit rate, as a table
 * row per level or one JSON object with an array of results.
 *
 * Definitions (all times on the client side, CLOCK_MONOTONIC):
 *   wall          first submit -> last final DONE event read
 *   output tok/s  TOKEN events of all requests / wall
 *   prefill tok/s (prompt - cached tokens, from the DONE events) /
 *                 (first submit -> last request's first TOKEN)
 *   TTFT          a request's submit -> its first TOKEN (p50/p90/p99 over requests)
 *   ITL           gaps between consecutive TOKEN events of one request,
 *                 pooled over all requests (p50/p90/p99)
 *   hit rate      cached / prompt tokens, from the DONE events and, as a
 *                 cross-check, from tern_engine_get_stats deltas
 * Prompts are random ids from --seed, a different stream per request so the
 * prefix cache finds nothing to share, except the --shared-prefix tokens that
 * all of them start with. Before the timed run one warm-up request (that
 * prefix, when any, then ids of its own) runs alone: it touches the weights
 * and leaves the shared prefix in the prefix cache, as a server that has seen
 * the system prompt before.
 *
 * Depends on include/tern.h (through bench.h), POSIX threads and semaphores.
 */
#include "bench.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EVENT_TIMEOUT_MS 600000 /* a request that sees no event this long has failed */
#define WARMUP_STREAM    (1LL << 40)

struct level;

/* One request: set up by the main thread, then written by its reader. */
struct breq {
    struct level *lv;
    sem_t go; /* posted once `s` is set (NULL when submit failed) */
    struct tern_stream *s;
    const int32_t *ids; /* [n_ids] */
    int32_t n_ids;
    double t_submit, t_final;
    double *t_tok; /* [gen] arrival time of each TOKEN event */
    int32_t n_tok; /* TOKEN events read (may exceed gen only on a bug) */
    int32_t prompt_tokens, cached_tokens, completion_tokens;
    enum tern_status status;
    bool finished; /* the final DONE event was read */
    char error[256];
};

/* One concurrency level's requests and their storage. */
struct level {
    int n;
    int32_t gen;
    const struct bench_opts *o; /* sampling settings */
    struct breq *reqs;  /* [n] */
    int32_t *ids;       /* [n, prefix + prompt_len] */
    double *t_tok;      /* [n, gen] */
    pthread_t *threads; /* [n] */
    int n_threads, n_sems;
    atomic_int n_done;
};

struct level_result {
    int concurrency, max_seqs;
    int64_t prompt_tokens, cached_tokens, generated_tokens;
    double wall_s, output_tok_s, prefill_tok_s;
    double ttft_ms[3], itl_ms[3]; /* p50, p90, p99 */
    double hit_rate, stats_hit_rate;
    struct tern_engine_stats d; /* deltas over the timed run (counters only) */
};

static const double pcts[3] = {0.50, 0.90, 0.99};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Linear interpolation between closest ranks (numpy's default), v sorted. */
static double percentile(const double *v, int64_t n, double p)
{
    if (n <= 0) return 0;
    double pos = p * (double)(n - 1);
    int64_t i = (int64_t)pos;
    if (i + 1 >= n) return v[n - 1];
    return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}

static void level_free(struct level *lv)
{
    for (int i = 0; i < lv->n_sems; i++) sem_destroy(&lv->reqs[i].go);
    free(lv->reqs);
    free(lv->ids);
    free(lv->t_tok);
    free(lv->threads);
    memset(lv, 0, sizeof *lv);
}

static bool level_init(struct level *lv, const struct bench_opts *o, int n, int32_t vocab)
{
    memset(lv, 0, sizeof *lv);
    lv->n = n;
    lv->gen = (int32_t)o->gen;
    lv->o = o;
    size_t len = (size_t)(o->shared_prefix + o->prompt_len);
    lv->reqs = calloc((size_t)n, sizeof *lv->reqs);
    lv->ids = malloc((size_t)n * len * sizeof *lv->ids);
    lv->t_tok = calloc((size_t)n * (size_t)o->gen, sizeof *lv->t_tok);
    lv->threads = calloc((size_t)n, sizeof *lv->threads);
    if (!lv->reqs || !lv->ids || !lv->t_tok || !lv->threads) return false;
    for (int i = 0; i < n; i++) {
        struct breq *r = &lv->reqs[i];
        int32_t *ids = lv->ids + (size_t)i * len;
        bench_random_ids(ids, o->shared_prefix, o->seed, 0, vocab);
        bench_random_ids(ids + o->shared_prefix, o->prompt_len, o->seed, i + 1, vocab);
        r->lv = lv;
        r->ids = ids;
        r->n_ids = (int32_t)len;
        r->t_tok = lv->t_tok + (size_t)i * (size_t)o->gen;
        if (sem_init(&r->go, 0, 0) != 0) return false;
        lv->n_sems++;
    }
    return true;
}

static void read_final(struct breq *r, const struct tern_event *ev, double t)
{
    r->t_final = t;
    r->finished = true;
    r->status = ev->status;
    r->prompt_tokens = ev->prompt_tokens;
    r->cached_tokens = ev->cached_tokens;
    r->completion_tokens = ev->completion_tokens;
    if (ev->status != TERN_OK)
        snprintf(r->error, sizeof r->error, "%s", ev->error ? ev->error : "");
}

static void *reader_main(void *arg)
{
    struct breq *r = arg;
    while (sem_wait(&r->go) != 0) {
    }
    while (r->s) {
        struct tern_event ev;
        enum tern_status st = tern_stream_next(r->s, EVENT_TIMEOUT_MS, &ev);
        double t = cli_now_s();
        if (st != TERN_OK) {
            r->status = st;
            snprintf(r->error, sizeof r->error, "%s",
                     st == TERN_E_NOT_FOUND ? "no event for 600 s" : tern_last_error());
            break;
        }
        if (ev.type == TERN_EVENT_TOKEN) {
            if (r->n_tok < r->lv->gen) r->t_tok[r->n_tok] = t;
            r->n_tok++;
        } else if (ev.final) {
            read_final(r, &ev, t);
            break;
        }
    }
    atomic_fetch_add(&r->lv->n_done, 1);
    return NULL;
}

static bool start_readers(struct level *lv)
{
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return false;
    pthread_attr_setstacksize(&attr, (size_t)512 << 10);
    for (int i = 0; i < lv->n; i++) {
        if (pthread_create(&lv->threads[i], &attr, reader_main, &lv->reqs[i]) != 0) break;
        lv->n_threads++;
    }
    pthread_attr_destroy(&attr);
    return lv->n_threads == lv->n;
}

/* Submits every request in order, releasing each reader as its stream
 * exists. On a failure the rest are released with no stream and the
 * submitted ones cancelled. */
static enum tern_status submit_all(struct tern_engine *e, struct level *lv, double *t0)
{
    enum tern_status st = TERN_OK;
    *t0 = cli_now_s();
    for (int i = 0; i < lv->n; i++) {
        struct breq *r = &lv->reqs[i];
        if (st == TERN_OK) {
            struct tern_request rq = {0};
            rq.ids = r->ids;
            rq.n_ids = r->n_ids;
            rq.sampling = tern_sampling_default_params();
            rq.sampling.max_tokens = lv->gen;
            rq.sampling.ignore_eos = true;
            rq.sampling.temperature = (float)lv->o->temperature;
            rq.sampling.top_p = (float)lv->o->top_p;
            rq.sampling.top_k = (int32_t)lv->o->top_k;
            rq.sampling.seed = (uint64_t)lv->o->seed + (uint64_t)i;
            rq.sampling.has_seed = true;
            r->t_submit = cli_now_s();
            st = tern_engine_submit(e, &rq, &r->s);
            if (st != TERN_OK) {
                r->status = st;
                snprintf(r->error, sizeof r->error, "submit: %s", tern_last_error());
                for (int j = 0; j < i; j++) tern_stream_cancel(lv->reqs[j].s);
            }
        }
        sem_post(&r->go);
    }
    return st;
}

/* Waits for every reader, with a progress line on a terminal. */
static void wait_all(struct tern_engine *e, struct level *lv, bool progress, double t0)
{
    struct tern_engine_stats s0, s;
    tern_engine_get_stats(e, &s0);
    while (progress && atomic_load(&lv->n_done) < lv->n) {
        struct timespec ts = {0, 250000000L};
        nanosleep(&ts, NULL);
        tern_engine_get_stats(e, &s);
        fprintf(stderr, "\rconcurrency %d: %d/%d requests done, %lld tokens, %.1f s", lv->n,
                atomic_load(&lv->n_done), lv->n,
                (long long)(s.generated_tokens - s0.generated_tokens), cli_now_s() - t0);
        fflush(stderr);
    }
    if (progress) fprintf(stderr, "\r%-72s\r", "");
    for (int i = 0; i < lv->n_threads; i++) pthread_join(lv->threads[i], NULL);
    lv->n_threads = 0;
}

/* One request alone (the shared prefix, then ids of its own), read to the end. */
static enum tern_status warm_up(struct tern_engine *e, const struct bench_opts *o, int32_t vocab)
{
    size_t len = (size_t)(o->shared_prefix + o->prompt_len);
    int32_t *ids = malloc(len * sizeof *ids);
    if (!ids) return TERN_E_NO_MEMORY;
    bench_random_ids(ids, o->shared_prefix, o->seed, 0, vocab);
    bench_random_ids(ids + o->shared_prefix, o->prompt_len, o->seed, WARMUP_STREAM, vocab);
    struct tern_request rq = {0};
    rq.ids = ids;
    rq.n_ids = (int32_t)len;
    rq.sampling = tern_sampling_default_params();
    rq.sampling.max_tokens = o->gen < 2 ? (int32_t)o->gen : 2;
    rq.sampling.ignore_eos = true;
    struct tern_stream *s = NULL;
    enum tern_status st = tern_engine_submit(e, &rq, &s);
    free(ids);
    struct tern_event ev;
    while (st == TERN_OK) {
        st = tern_stream_next(s, EVENT_TIMEOUT_MS, &ev);
        if (st == TERN_OK && ev.type == TERN_EVENT_DONE && ev.final) {
            st = ev.status;
            break;
        }
    }
    tern_stream_destroy(s);
    return st;
}

/* What went wrong in a level (the first message a request got), or NULL
 * when every request generated exactly gen tokens. */
static const char *level_error(const struct level *lv)
{
    for (int i = 0; i < lv->n; i++)
        if (lv->reqs[i].error[0]) return lv->reqs[i].error;
    for (int i = 0; i < lv->n; i++) {
        const struct breq *r = &lv->reqs[i];
        if (r->status != TERN_OK) return tern_status_str(r->status);
        if (!r->finished) return "a request ended without its final event";
        if (r->n_tok != lv->gen || r->completion_tokens != lv->gen)
            return "a request did not generate exactly --gen tokens";
    }
    return NULL;
}

/* Fills the aggregate numbers of a finished level. */
static bool summarize(const struct level *lv, double t0, const struct tern_engine_stats *s0,
                      const struct tern_engine_stats *s1, struct level_result *res)
{
    int n = lv->n, g = lv->gen;
    double *ttft = malloc((size_t)n * sizeof *ttft);
    double *itl = malloc(((size_t)n * (size_t)(g - 1) + 1) * sizeof *itl);
    if (!ttft || !itl) {
        free(ttft);
        free(itl);
        return false;
    }
    double t_end = t0, t_first_last = t0;
    int64_t n_itl = 0;
    for (int i = 0; i < n; i++) {
        const struct breq *r = &lv->reqs[i];
        res->prompt_tokens += r->prompt_tokens;
        res->cached_tokens += r->cached_tokens;
        res->generated_tokens += r->n_tok;
        ttft[i] = (r->t_tok[0] - r->t_submit) * 1e3;
        if (r->t_final > t_end) t_end = r->t_final;
        if (r->t_tok[0] > t_first_last) t_first_last = r->t_tok[0];
        for (int k = 1; k < g; k++) itl[n_itl++] = (r->t_tok[k] - r->t_tok[k - 1]) * 1e3;
    }
    qsort(ttft, (size_t)n, sizeof *ttft, cmp_double);
    qsort(itl, (size_t)n_itl, sizeof *itl, cmp_double);
    for (int k = 0; k < 3; k++) {
        res->ttft_ms[k] = percentile(ttft, n, pcts[k]);
        res->itl_ms[k] = percentile(itl, n_itl, pcts[k]);
    }
    free(ttft);
    free(itl);
    res->wall_s = t_end - t0;
    res->output_tok_s = res->wall_s > 0 ? (double)res->generated_tokens / res->wall_s : 0;
    double pre_s = t_first_last - t0;
    res->prefill_tok_s = pre_s > 0 ? (double)(res->prompt_tokens - res->cached_tokens) / pre_s : 0;
    res->hit_rate =
        res->prompt_tokens ? (double)res->cached_tokens / (double)res->prompt_tokens : 0;
    res->d.prompt_tokens = s1->prompt_tokens - s0->prompt_tokens;
    res->d.cached_prompt_tokens = s1->cached_prompt_tokens - s0->cached_prompt_tokens;
    res->d.generated_tokens = s1->generated_tokens - s0->generated_tokens;
    res->d.steps = s1->steps - s0->steps;
    res->d.preemptions = s1->preemptions - s0->preemptions;
    res->stats_hit_rate = res->d.prompt_tokens
                              ? (double)res->d.cached_prompt_tokens / (double)res->d.prompt_tokens
                              : 0;
    return true;
}

/* Timed run of one level on a warmed-up engine. Returns the exit code. */
static int timed_run(struct tern_engine *e, struct level *lv, struct level_result *res)
{
    struct tern_engine_stats s0, s1;
    tern_engine_get_stats(e, &s0);
    if (!start_readers(lv)) {
        for (int i = 0; i < lv->n; i++) sem_post(&lv->reqs[i].go); /* all with no stream */
        wait_all(e, lv, false, 0);
        return cli_fail("bench", "cannot start reader threads", TERN_E_INTERNAL);
    }
    double t0;
    submit_all(e, lv, &t0);
    wait_all(e, lv, isatty(STDERR_FILENO), t0);
    tern_engine_get_stats(e, &s1);
    for (int i = 0; i < lv->n; i++) {
        tern_stream_destroy(lv->reqs[i].s);
        lv->reqs[i].s = NULL;
    }
    const char *err = level_error(lv);
    if (err) {
        fprintf(stderr, "tern bench: concurrency %d: %s\n", lv->n, err);
        return 1;
    }
    if (!summarize(lv, t0, &s0, &s1, res))
        return cli_fail("bench", "out of memory", TERN_E_NO_MEMORY);
    return 0;
}

/* One level: a fresh engine sized for it, warm-up, timed run. */
static int run_level(const struct bench_opts *o, struct tern_model *m, int n, int32_t vocab,
                     struct level_result *res)
{
    int rc = 0;
    struct level lv;
    struct tern_engine *e = NULL;
    struct tern_engine_params ep = bench_engine_params(o);
    ep.max_seqs = (int32_t)(o->max_seqs ? o->max_seqs : n > 16 ? n : 16);
    ep.max_context = (int32_t)(o->shared_prefix + o->prompt_len + o->gen);
    memset(res, 0, sizeof *res);
    res->concurrency = n;
    res->max_seqs = ep.max_seqs;
    if (!level_init(&lv, o, n, vocab)) {
        rc = cli_fail("bench", "out of memory", TERN_E_NO_MEMORY);
        goto done;
    }
    enum tern_status st = tern_engine_create(m, &ep, &e);
    if (st != TERN_OK) {
        rc = cli_fail("bench", "engine", st);
        goto done;
    }
    if ((st = warm_up(e, o, vocab)) != TERN_OK) {
        rc = cli_fail("bench", "warm-up request", st);
        goto done;
    }
    rc = timed_run(e, &lv, res);
done:
    tern_engine_destroy(e);
    level_free(&lv);
    return rc;
}

static void print_table_head(const struct bench_opts *o, const struct tern_model_info *in,
                             double load_s)
{
    struct tern_engine_params ep = bench_engine_params(o);
    printf("model    %s (%s, %s, %.1f M params, %.1f MB), device %s, load %.3f s\n", o->model,
           in->architecture, in->dtype, (double)in->n_params / 1e6, (double)in->weight_bytes / 1e6,
           cli_device_name(in->device), load_s);
    printf("requests %lld prompt tokens", o->prompt_len);
    if (o->shared_prefix) printf(" after a shared %lld-token prefix", o->shared_prefix);
    if (o->temperature > 0.0)
        printf(", %lld generated (temperature %g, top_p %g, top_k %lld, ignore_eos)", o->gen,
               o->temperature, o->top_p, o->top_k);
    else
        printf(", %lld generated (greedy, ignore_eos)", o->gen);
    printf("; max_batch_tokens %d, block %d%s\n", ep.max_batch_tokens, ep.block_size,
           o->deterministic ? ", deterministic" : "");
    printf("%5s %6s %10s %10s %27s %27s %7s %8s\n", "", "", "output", "prefill", "TTFT ms",
           "inter-token ms", "prefix", "");
    printf("%5s %6s %10s %10s %8s %9s %8s %8s %9s %8s %7s %8s\n", "conc", "seqs", "tok/s", "tok/s",
           "p50", "p90", "p99", "p50", "p90", "p99", "hit", "wall s");
}

static void print_table_row(const struct level_result *r)
{
    printf("%5d %6d %10.1f %10.1f %8.2f %9.2f %8.2f %8.2f %9.2f %8.2f %6.1f%% %8.2f\n",
           r->concurrency, r->max_seqs, r->output_tok_s, r->prefill_tok_s, r->ttft_ms[0],
           r->ttft_ms[1], r->ttft_ms[2], r->itl_ms[0], r->itl_ms[1], r->itl_ms[2],
           100.0 * r->hit_rate, r->wall_s);
    fflush(stdout);
}

static void print_json_result(const struct level_result *r)
{
    printf("{\"concurrency\": %d, \"max_seqs\": %d, \"requests\": %d, \"prompt_tokens\": %lld, "
           "\"cached_tokens\": %lld, \"generated_tokens\": %lld, \"wall_s\": %.6f, "
           "\"output_tok_s\": %.2f, \"prefill_tok_s\": %.2f, ",
           r->concurrency, r->max_seqs, r->concurrency, (long long)r->prompt_tokens,
           (long long)r->cached_tokens, (long long)r->generated_tokens, r->wall_s, r->output_tok_s,
           r->prefill_tok_s);
    printf("\"ttft_p50_ms\": %.3f, \"ttft_p90_ms\": %.3f, \"ttft_p99_ms\": %.3f, "
           "\"itl_p50_ms\": %.3f, \"itl_p90_ms\": %.3f, \"itl_p99_ms\": %.3f, ",
           r->ttft_ms[0], r->ttft_ms[1], r->ttft_ms[2], r->itl_ms[0], r->itl_ms[1], r->itl_ms[2]);
    printf("\"prefix_hit_rate\": %.4f, \"stats_prompt_tokens\": %lld, "
           "\"stats_cached_tokens\": %lld, \"stats_generated_tokens\": %lld, "
           "\"stats_prefix_hit_rate\": %.4f, \"steps\": %lld, \"preemptions\": %lld}",
           r->hit_rate, (long long)r->d.prompt_tokens, (long long)r->d.cached_prompt_tokens,
           (long long)r->d.generated_tokens, r->stats_hit_rate, (long long)r->d.steps,
           (long long)r->d.preemptions);
}

static void print_json(const struct bench_opts *o, const struct tern_model_info *in, double load_s,
                       const struct level_result *res, int n)
{
    struct tern_engine_params ep = bench_engine_params(o);
    printf("{\"model\": ");
    bench_json_str(stdout, o->model);
    printf(", \"architecture\": ");
    bench_json_str(stdout, in->architecture);
    printf(", \"dtype\": \"%s\", \"n_params\": %lld, \"weight_bytes\": %lld, \"device\": \"%s\", "
           "\"load_s\": %.4f, \"mode\": \"concurrent\", \"prompt_len\": %lld, \"gen\": %lld, "
           "\"shared_prefix\": %lld, \"seed\": %lld, \"temperature\": %g, \"top_p\": %g, "
           "\"top_k\": %lld, \"max_batch_tokens\": %d, "
           "\"block_size\": %d, \"kv_bytes\": %lld, \"kv_fraction\": %.3f, "
           "\"deterministic\": %s, \"results\": [",
           in->dtype, (long long)in->n_params, (long long)in->weight_bytes, cli_device_name(in->device),
           load_s, o->prompt_len, o->gen, o->shared_prefix, o->seed, o->temperature, o->top_p,
           o->top_k, ep.max_batch_tokens,
           ep.block_size, (long long)ep.kv_bytes, ep.kv_fraction,
           ep.deterministic ? "true" : "false");
    for (int i = 0; i < n; i++) {
        printf(i ? ",\n  " : "\n  ");
        print_json_result(&res[i]);
    }
    printf("\n]}\n");
}

int bench_batch_run(const struct bench_opts *o, struct tern_model *m, double load_s)
{
    struct tern_model_info in;
    enum tern_status st = tern_model_get_info(m, &in);
    if (st != TERN_OK) return cli_fail("bench", NULL, st);
    struct level_result res[BENCH_MAX_LEVELS];
    if (!o->json) print_table_head(o, &in, load_s);
    for (int i = 0; i < o->n_levels; i++) {
        int rc = run_level(o, m, (int)o->levels[i], in.vocab_size, &res[i]);
        if (rc) return rc;
        if (!o->json) print_table_row(&res[i]);
    }
    if (o->json) print_json(o, &in, load_s, res, o->n_levels);
    return 0;
}
