/*
 * testutil.c — see testutil.h.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "tern.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void tu_npy_load(const char *path, struct tu_npy *out)
{
    memset(out, 0, sizeof *out);
    char *buf = NULL;
    size_t len = 0;
    if (tern_file_read(path, &buf, &len) != TERN_OK) fail_msg("%s", tern_last_error());
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) fail_msg("%s: not a .npy file", path);
    int major = (unsigned char)buf[6];
    size_t hlen, hoff;
    if (major == 1) {
        hlen = (unsigned char)buf[8] | ((size_t)(unsigned char)buf[9] << 8);
        hoff = 10;
    } else {
        hlen = (unsigned char)buf[8] | ((size_t)(unsigned char)buf[9] << 8) |
               ((size_t)(unsigned char)buf[10] << 16) | ((size_t)(unsigned char)buf[11] << 24);
        hoff = 12;
    }
    char *h = tern_strndup(buf + hoff, hlen);
    const char *d = strstr(h, "'descr': '");
    if (!d) fail_msg("%s: no descr", path);
    memcpy(out->dtype, d + 10, 3);
    if (strstr(h, "'fortran_order': True")) fail_msg("%s: fortran order", path);
    const char *s = strstr(h, "'shape': (");
    if (!s) fail_msg("%s: no shape", path);
    s += 10;
    out->n = 1;
    while (*s && *s != ')') {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s) break;
        out->shape[out->n_dims++] = v;
        out->n *= (size_t)v;
        s = end;
        while (*s == ',' || *s == ' ') s++;
    }
    size_t esz = out->dtype[2] - '0';
    if (hoff + hlen + out->n * esz > len) fail_msg("%s: truncated", path);
    out->data = tern_malloc(out->n * esz + 1);
    memcpy(out->data, buf + hoff + hlen, out->n * esz);
    tern_free(h);
    tern_free(buf);
}

void tu_golden_npy(const char *dir, const char *file, struct tu_npy *out)
{
    struct tern_str s = {0};
    tern_str_appendf(&s, "%s/golden/%s", dir, file);
    tu_npy_load(s.data, out);
    tern_str_deinit(&s);
}

void tu_npy_free(struct tu_npy *a)
{
    tern_free(a->data);
    a->data = NULL;
}

double tu_max_rel_err(const float *a, const float *b, size_t n)
{
    double max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double r = fabs((double)b[i]);
        if (r > max_ref) max_ref = r;
        double df = fabs((double)a[i] - (double)b[i]);
        if (df > max_diff) max_diff = df;
    }
    return max_diff / (max_ref > 1e-30 ? max_ref : 1e-30);
}

char *tu_fixture(const char *rel)
{
    const char *env = getenv("TERN_TEST_FIXTURES"); /* as tu_fixture_dirs: another machine's copy */
    return tern_path_join(env ? env : TERN_FIXTURES, rel);
}

static char *slurp_fd(FILE *f)
{
    struct tern_str s = {0};
    char buf[4096];
    size_t n;
    tern_str_reserve(&s, 0);
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) tern_str_append(&s, buf, n);
    return tern_str_take(&s);
}

int tu_run(const char *cmd, char **out, char **err)
{
    char errpath[] = "/tmp/tern-test-err-XXXXXX";
    int fd = mkstemp(errpath);
    if (fd < 0) return -1;
    close(fd);
    struct tern_str full = {0};
    tern_str_appendf(&full, "%s 2>%s", cmd, errpath);
    FILE *p = popen(full.data, "r");
    tern_str_deinit(&full);
    if (!p) return -1;
    char *o = slurp_fd(p);
    int rc = pclose(p);
    char *e = NULL;
    size_t elen;
    if (tern_file_read(errpath, &e, &elen) != TERN_OK) e = tern_strdup("");
    unlink(errpath);
    if (out) *out = o;
    else tern_free(o);
    if (err) *err = e;
    else tern_free(e);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

char *tu_data_file(const char *rel)
{
    char *src = NULL;
    struct tern_str s = {0};
    tern_str_appendf(&s, "%s/%s.xz", TERN_DATA, rel);
    src = tern_str_take(&s);
    if (!tern_file_exists(src)) fail_msg("fixture data missing: %s", src);
    struct tern_str dst = {0};
    tern_str_appendf(&dst, "%s/data/%s", TERN_BUILD_DIR, rel);
    char *path = tern_str_take(&dst);
    if (!tern_file_exists(path)) {
        struct tern_str cmd = {0};
        char *slash = strrchr(path, '/');
        *slash = '\0';
        tern_str_appendf(&cmd, "mkdir -p '%s' && xz -dc '%s' > '%s/.tmp.%d' && mv '%s/.tmp.%d' '%s/%s'",
                         path, src, path, (int)getpid(), path, (int)getpid(), path, slash + 1);
        *slash = '/';
        int rc = system(cmd.data);
        tern_str_deinit(&cmd);
        if (rc != 0) fail_msg("could not decompress %s", src);
    }
    tern_free(src);
    return path;
}

char *tu_tokenizer_dir(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer_config.json", name);
    tern_free(tu_data_file(rel));
    snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer.json", name);
    char *path = tu_data_file(rel);
    *strrchr(path, '/') = '\0';
    return path;
}

char *tu_temp_dir(const char *tag)
{
    struct tern_str s = {0};
    tern_str_appendf(&s, "/tmp/tern-%s-XXXXXX", tag);
    char *p = tern_str_take(&s);
    if (!mkdtemp(p)) fail_msg("mkdtemp failed");
    return p;
}

char *tu_write_temp(const char *name, const void *data, size_t len)
{
    char *dir = tu_temp_dir("file");
    char *path = tern_path_join(dir, name);
    tern_free(dir);
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot write %s", path);
    fwrite(data, 1, len, f);
    fclose(f);
    return path;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int tu_fixture_dirs(const char *sub, const char *marker, char ***dirs)
{
    const char *env = getenv("TERN_TEST_FIXTURES");
    char *root = env ? tern_path_join(env, sub) : tern_path_join(TERN_FIXTURES, sub);
    DIR *d = opendir(root);
    if (!d) fail_msg("no fixtures at %s", root);
    char **names = NULL;
    size_t cap = 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *dir = tern_path_join(root, de->d_name);
        char *m = tern_path_join(dir, marker);
        if (tern_file_exists(m)) {
            void *arr = names;
            if (tern_grow(&arr, &cap, (size_t)n + 1, sizeof *names) != TERN_OK)
                fail_msg("out of memory");
            names = arr;
            names[n++] = dir;
        } else {
            tern_free(dir);
        }
        tern_free(m);
    }
    closedir(d);
    tern_free(root);
    if (n) qsort(names, (size_t)n, sizeof *names, by_name);
    *dirs = names;
    return n;
}

void tu_ok(enum tern_status st)
{
    if (st != TERN_OK) fail_msg("%s: %s", tern_status_str(st), tern_last_error());
}

float tu_frand(uint64_t *rng)
{
    uint64_t r = *rng;
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    *rng = r;
    return (float)((r >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

uint64_t tu_seed(void)
{
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u + 12345u;
    if (getenv("TERN_TEST_SEED")) seed = strtoull(getenv("TERN_TEST_SEED"), NULL, 10);
    printf("seed %llu (TERN_TEST_SEED to repeat)\n", (unsigned long long)seed);
    return seed;
}

void tu_backends_create(struct tern_backend **cpu, struct tern_backend **gpu,
                        struct tern_backend **gpu_det)
{
    *cpu = *gpu = *gpu_det = NULL;
    struct tern_backend_params p = {.device = TERN_DEVICE_CPU};
    tu_ok(tern_backend_create(&p, cpu));
    if (!tern_backend_cuda_available()) {
        printf("skipped: no CUDA device\n");
        return;
    }
    p.device = TERN_DEVICE_CUDA;
    tu_ok(tern_backend_create(&p, gpu));
    p.deterministic = true;
    tu_ok(tern_backend_create(&p, gpu_det));
}

void tu_backends_destroy(struct tern_backend *cpu, struct tern_backend *gpu,
                         struct tern_backend *gpu_det)
{
    if (gpu_det) tern_backend_destroy(gpu_det);
    if (gpu) tern_backend_destroy(gpu);
    if (cpu) tern_backend_destroy(cpu);
}

float *tu_download_f32(struct tern_backend *be, const struct tern_dtensor *t)
{
    size_t n = tern_dtensor_numel(t), es = tern_dtype_size(t->dtype);
    void *b = tern_malloc(n * es + 1);
    float *f = tern_malloc(n * sizeof *f + 1);
    tu_ok(be->ops->download(be, b, t, n * es));
    tern_to_f32(t->dtype, b, f, n);
    tern_free(b);
    return f;
}

struct tern_engine *tu_model_engine(struct tern_model *m, int max_batch_tokens, int block_size)
{
    struct tern_engine_params ep = tern_engine_default_params();
    ep.max_seqs = 1;
    ep.max_batch_tokens = max_batch_tokens;
    ep.block_size = block_size;
    ep.max_context = 256;
    struct tern_engine *e = NULL;
    if (tern_engine_create(m, &ep, &e) != TERN_OK) fail_msg("engine: %s", tern_last_error());
    return e;
}

float *tu_model_logits(struct tern_model *m, const int32_t *ids, int n, int V, int chunk,
                       int block_size)
{
    struct tern_engine *e = tu_model_engine(m, chunk, block_size);
    float *out = tern_malloc((size_t)n * (size_t)V * sizeof(float));
    assert_non_null(out);
    if (tern_logits(e, ids, n, out) != TERN_OK) fail_msg("logits: %s", tern_last_error());
    tern_engine_destroy(e);
    return out;
}

int32_t *tu_model_greedy(struct tern_model *m, const int32_t *ids, int n, int G)
{
    struct tern_engine *e = tu_model_engine(m, 2048, 16);
    int32_t *gen = tern_malloc((size_t)G * sizeof(int32_t)), n_gen = 0;
    assert_non_null(gen);
    if (tern_generate_greedy(e, ids, n, G, false, gen, &n_gen) != TERN_OK)
        fail_msg("generate: %s", tern_last_error());
    assert_int_equal(n_gen, G);
    tern_engine_destroy(e);
    return gen;
}

char *tu_smollm2_gguf(void)
{
    const char *env = getenv("TERN_SMOLLM2_GGUF");
    struct tern_str s = {0};
    if (env && *env) {
        tern_str_appendz(&s, env);
    } else {
        const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (cache && *cache)
            tern_str_appendf(&s, "%s/tern/", cache);
        else
            tern_str_appendf(&s, "%s/.cache/tern/", home ? home : ".");
        tern_str_appendz(&s, "SmolLM2-135M-Instruct.Q4_1.gguf");
    }
    char *path = tern_str_take(&s);
    if (tern_file_exists(path)) return path;
    printf("skipped: %s is absent (tools/fetch_smollm2_gguf.sh fetches it, or set "
           "TERN_SMOLLM2_GGUF)\n",
           path);
    tern_free(path);
    return NULL;
}
