/*
 * bench.h — `tern bench` options, shared by the single-sequence mode
 * (cmd_bench.c, the default) and the concurrent mode (bench_batch.c,
 * --concurrency). Built on include/tern.h only.
 */
#ifndef TERN_CLI_BENCH_H
#define TERN_CLI_BENCH_H

#include "cli.h"

#define BENCH_MAX_LEVELS 32

struct bench_opts {
    const char *model;
    long long prompt_len, gen, reps;
    enum tern_device device;
    bool json;
    /* engine parameters; 0 = the engine's default */
    long long max_batch_tokens, block_size, kv_bytes;
    double kv_fraction;
    bool deterministic;
    /* concurrent mode (n_levels > 0) */
    int n_levels;
    long long levels[BENCH_MAX_LEVELS]; /* concurrent requests per run */
    long long max_seqs;                 /* 0 = max(concurrency, 16) */
    long long shared_prefix;            /* tokens of system prompt every request starts with */
    long long seed;                     /* prompt ids; request i samples with seed + i */
    double temperature, top_p;          /* sampling: 0 = greedy (default); 1 = off */
    long long top_k;                    /* 0 = off */
};

/* tern_engine_default_params() with the options' engine flags applied
 * (max_seqs and max_context are left to the caller). */
struct tern_engine_params bench_engine_params(const struct bench_opts *o);

/* Writes `s` as a JSON string literal. */
void bench_json_str(FILE *f, const char *s);


/* Fills ids[0..n) with pseudo-random ids in [0, vocab) from (seed, stream):
 * the same pair always gives the same ids, different streams differ. */
void bench_random_ids(int32_t *ids, long long n, long long seed, long long stream, int32_t vocab);

/* Runs every concurrency level of `o` on the open model and prints the
 * table or JSON. Returns the exit code. */
int bench_batch_run(const struct bench_opts *o, struct tern_model *m, double load_s);

#endif
