/*
 * testutil.h — helpers shared by the tests: cmocka includes, fixture paths,
 * .npy reading, error measures, status checks, random inputs, running the
 * `tern` command, shared data.
 */
#ifndef TERN_TESTUTIL_H
#define TERN_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/base.h"

/* A float32 / int32 / int64 array read from a .npy file (C order). */
struct tu_npy {
    char dtype[8]; /* "<f4", "<i4", "<i8" */
    int n_dims;
    int64_t shape[4];
    size_t n;   /* elements */
    void *data; /* tern_free */
};

/* Loads a .npy file; fails the test on error. */
void tu_npy_load(const char *path, struct tu_npy *out);
void tu_npy_free(struct tu_npy *a);
/* Loads <fixture dir>/golden/<file>; fails the test on error. */
void tu_golden_npy(const char *dir, const char *file, struct tu_npy *out);

/* max_i |a_i - b_i| / max(max_i |b_i|, tiny): the relative error measure the
 * golden tests use (max error relative to the reference's scale). */
double tu_max_rel_err(const float *a, const float *b, size_t n);

/* Fails the test with the status and tern_last_error() unless st is TERN_OK. */
void tu_ok(enum tern_status st);

struct tern_backend;
/* The op tests' backends: the CPU reference in *cpu and, when a CUDA device
 * is present, a default and a deterministic CUDA backend in *gpu and
 * *gpu_det (else they stay NULL and "skipped: no CUDA device", the tests'
 * skip marker, is printed). Fails the test on error. */
void tu_backends_create(struct tern_backend **cpu, struct tern_backend **gpu,
                        struct tern_backend **gpu_det);
/* Destroys what tu_backends_create made (NULLs skipped). */
void tu_backends_destroy(struct tern_backend *cpu, struct tern_backend *gpu,
                         struct tern_backend *gpu_det);
struct tern_dtensor;
/* A tensor's elements downloaded and converted to floats (tern_free); fails
 * the test on error. */
float *tu_download_f32(struct tern_backend *be, const struct tern_dtensor *t);

/* One xorshift64 step of *rng, returned as a float uniform in [-1, 1)
 * (24 bits; the random inputs of the op tests). */
float tu_frand(uint64_t *rng);

/* A seed for tu_frand: from the clock, or $TERN_TEST_SEED; printed so that
 * a failing run can be repeated. */
uint64_t tu_seed(void);

/* Path under tests/fixtures (static buffer per call site is not safe: caller
 * frees with tern_free). */
char *tu_fixture(const char *rel);

/* The fixture directories under <fixtures>/<sub> that contain the file
 * `marker` (e.g. "golden/logits.npy"), sorted by name, as tern_free'd paths
 * in *dirs (free each and the array). <fixtures> is $TERN_TEST_FIXTURES when
 * set (the GPU machine keeps the tree elsewhere), else tests/fixtures.
 * Returns the count; fails the test when the folder cannot be read. */
int tu_fixture_dirs(const char *sub, const char *marker, char ***dirs);

/* Runs a shell command, capturing stdout and stderr (separately) into
 * tern_free'd strings; returns the exit status (or -1). */
int tu_run(const char *cmd, char **out, char **err);

/* Decompresses tests/fixtures/data/<rel>.xz into the build tree once and
 * returns the path of the plain file (tern_free); fails the test when the
 * file is missing. */
char *tu_data_file(const char *rel);
/* tu_data_file for tokenizers/<name>/{tokenizer.json, tokenizer_config.json};
 * returns the folder holding them (tern_free). */
char *tu_tokenizer_dir(const char *name);

/* Writes bytes to a fresh temporary file and returns its path (tern_free). */
char *tu_write_temp(const char *name, const void *data, size_t len);
/* Makes a fresh temporary directory (tern_free). */
char *tu_temp_dir(const char *tag);

/* The SmolLM2-135M-Instruct Q4_1 GGUF (98 MB, kept out of the repository;
 * tools/fetch_smollm2_gguf.sh fetches it): $TERN_SMOLLM2_GGUF, else
 * ${XDG_CACHE_HOME:-~/.cache}/tern/SmolLM2-135M-Instruct.Q4_1.gguf. NULL, with
 * a "skipped: ..." line printed, when the file is absent; else tern_free. */
char *tu_smollm2_gguf(void);

struct tern_model;
struct tern_engine;
/* An engine of one sequence over m: batches of max_batch_tokens,
 * block_size-position KV blocks, context 256. Fails the test on error. */
struct tern_engine *tu_model_engine(struct tern_model *m, int max_batch_tokens, int block_size);
/* Every position's logits [n, V] of ids through an engine of one sequence
 * (batches of `chunk` tokens, `block_size`-position KV blocks, context 256);
 * tern_free the result. Fails the test on error. */
float *tu_model_logits(struct tern_model *m, const int32_t *ids, int n, int V, int chunk,
                       int block_size);
/* The G greedy tokens after ids (one sequence, context 256); tern_free. */
int32_t *tu_model_greedy(struct tern_model *m, const int32_t *ids, int n, int G);

#endif
