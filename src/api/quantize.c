/*
 * quantize.c — `tern_quantize` (include/tern.h): a bf16/f16/f32 snapshot to
 * MLX affine quantized safetensors, the way mlx-lm's converter writes it.
 *
 * The plan (quantize_plan.c) lists the output tensors; this file computes and
 * writes them shard by shard. Each safetensors header is compact JSON,
 * `__metadata__` {"format": "mlx"} first, then the tensors sorted by name
 * (MLX's writer does the same), padded with spaces to 8 bytes so U32 data
 * stays aligned. A quantized weight is computed once, rows in parallel
 * (tern_quant_affine_row: MLX's algorithm bit for bit), and its weight,
 * scales and biases written one after the other. MLX orders the data section
 * by a hash table, so files match MLX's tensor for tensor, byte for byte, but
 * not as whole files. Then config.json with mlx-lm's `quantization` and
 * `quantization_config` blocks, model.safetensors.index.json, and copies of
 * the tokenizer, template and generation files.
 *
 * Depends on io/ (snapshot, config), tensor/quant.h, jansson.
 */
#include "api/quantize_plan.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef _OPENMP
#include <omp.h>
#endif

struct qt_writer {
    struct tern_snapshot *snap;
    const struct qt_plan *plan;
    const char *out_dir;
    bool progress;
    uint64_t t0, done_bytes;
    void *buf[3]; /* weight, scales, biases of the quantized tensor being written */
    size_t buf_src;
};

struct tern_quantize_params tern_quantize_default_params(void)
{
    struct tern_quantize_params p = {.bits = 4, .group_size = 64, .mode = "affine"};
    return p;
}

static enum tern_status check_params(const struct tern_quantize_params *p)
{
    if (p->mode && strcmp(p->mode, "affine"))
        return tern_error(TERN_E_UNSUPPORTED, "quantize: mode '%s' (only \"affine\")", p->mode);
    if (!tern_quant_bits_ok(p->bits) || !tern_quant_group_ok(p->group_size))
        return tern_error(TERN_E_INVALID_ARG,
                          "quantize: bits %d, group_size %d (bits 2, 3, 4, 5, 6, 8; group_size "
                          "32, 64, 128)",
                          p->bits, p->group_size);
    for (int32_t i = 0; i < p->n_overrides; i++) {
        const struct tern_quantize_override *o = &p->overrides[i];
        if (!o->module || (o->bits && (!tern_quant_bits_ok(o->bits) ||
                                       !tern_quant_group_ok(o->group_size))))
            return tern_error(TERN_E_INVALID_ARG, "quantize: override %d ('%s'): bits %d, "
                              "group_size %d", i, o->module ? o->module : "(null)", o->bits,
                              o->group_size);
    }
    return TERN_OK;
}

static void progress(struct qt_writer *w, size_t add)
{
    w->done_bytes += add;
    if (!w->progress) return;
    double secs = (double)(tern_now_ns() - w->t0) / 1e9;
    double frac = w->plan->src_bytes ? (double)w->done_bytes / (double)w->plan->src_bytes : 1.0;
    int bar = (int)(frac * 30.0 + 0.5);
    fprintf(stderr, "\rquantizing [%.*s%*s] %5.1f%%  %.2f / %.2f GB  %.1f s", bar,
            "##############################", 30 - bar, "", 100.0 * frac,
            (double)w->done_bytes / 1e9, (double)w->plan->src_bytes / 1e9, secs);
}

/* One row of a source tensor as float32, rounded through the target dtype
 * (mlx-lm casts the weights before quantizing them). The mapped data may be
 * misaligned (MLX writes unpadded headers), so it is copied into `raw`
 * (n * 4 bytes) first. */
static void load_row(const struct tern_tensor_view *v, enum tern_dtype target, int64_t row,
                     int64_t n, void *raw, float *dst)
{
    size_t es = tern_dtype_size(v->dtype);
    memcpy(raw, (const char *)v->data + (size_t)(row * n) * es, (size_t)n * es);
    tern_to_f32(v->dtype, raw, dst, (size_t)n);
    if (target == v->dtype || target == TERN_DTYPE_F32) return;
    for (int64_t i = 0; i < n; i++)
        dst[i] = target == TERN_DTYPE_BF16 ? tern_bf16_to_f32(tern_f32_to_bf16(dst[i]))
                                           : tern_f16_to_f32(tern_f32_to_f16(dst[i]));
}

static enum tern_status quantize_tensor(struct qt_writer *w, const struct qt_out *o,
                                       enum tern_dtype sdt)
{
    struct tern_tensor_view v;
    tern_snapshot_tensor_at(w->snap, o->src, &v);
    int64_t rows = v.shape[0], in = v.shape[1], ng = in / o->group_size;
    int64_t words = in * o->bits / 32;
    for (int i = 0; i < 3; i++) tern_free(w->buf[i]);
    w->buf[0] = tern_malloc((size_t)(rows * words) * 4);
    w->buf[1] = tern_malloc((size_t)(rows * ng) * tern_dtype_size(sdt));
    w->buf[2] = tern_malloc((size_t)(rows * ng) * tern_dtype_size(sdt));
    int n_thr = 1;
#ifdef _OPENMP
    n_thr = tern_default_threads();
#endif
    size_t stride = (size_t)(2 * in + 2 * ng); /* row, raw copy, scales, biases */
    float *work = tern_malloc((size_t)n_thr * stride * sizeof(float));
    if (!w->buf[0] || !w->buf[1] || !w->buf[2] || !work) {
        tern_free(work);
        return tern_error(TERN_E_NO_MEMORY, "quantize: out of memory for '%s'", o->name);
    }
#pragma omp parallel num_threads(n_thr)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *row = work + (size_t)tid * stride, *raw = row + in, *s = raw + in, *b = s + ng;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            load_row(&v, sdt, r, in, raw, row);
            tern_quant_affine_row(row, in, o->bits, o->group_size,
                                  (uint32_t *)w->buf[0] + r * words, s, b);
            for (int64_t g = 0; g < ng; g++) {
                tern_quant_store_half(sdt, w->buf[1], r * ng + g, s[g]);
                tern_quant_store_half(sdt, w->buf[2], r * ng + g, b[g]);
            }
        }
    }
    tern_free(work);
    w->buf_src = o->src;
    return TERN_OK;
}

static enum tern_status write_all(FILE *f, const void *p, size_t n, const char *path)
{
    if (n && fwrite(p, 1, n, f) != n)
        return tern_error(TERN_E_IO, "%s: write failed: %s", path, strerror(errno));
    return TERN_OK;
}

/* A copied tensor, cast to the output dtype in row-sized pieces when needed. */
static enum tern_status write_copy(struct qt_writer *w, const struct qt_out *o, FILE *f,
                                   const char *path)
{
    struct tern_tensor_view v;
    tern_snapshot_tensor_at(w->snap, o->src, &v);
    if (v.dtype == o->dtype) return write_all(f, v.data, v.n_bytes, path);
    size_t n = (size_t)tern_shape_numel(v.shape, v.n_dims), chunk = 1u << 16;
    float *tmp = tern_malloc(chunk * sizeof(float));
    void *out = tern_malloc(chunk * 4);
    enum tern_status st = tmp && out ? TERN_OK : TERN_E_NO_MEMORY;
    for (size_t i = 0; st == TERN_OK && i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        size_t es = tern_dtype_size(v.dtype);
        memcpy(out, (const char *)v.data + i * es, k * es); /* aligned copy first */
        tern_to_f32(v.dtype, out, tmp, k);
        for (size_t j = 0; j < k; j++) tern_quant_store_half(o->dtype, out, (int64_t)j, tmp[j]);
        st = write_all(f, out, k * tern_dtype_size(o->dtype), path);
    }
    tern_free(tmp);
    tern_free(out);
    return st;
}

static enum tern_status write_tensor(struct qt_writer *w, size_t i, FILE *f, const char *path)
{
    const struct qt_out *o = &w->plan->outs[i];
    if (o->kind == QT_COPY) {
        TERN_TRY(write_copy(w, o, f, path));
        struct tern_tensor_view v;
        tern_snapshot_tensor_at(w->snap, o->src, &v);
        progress(w, v.n_bytes);
        return TERN_OK;
    }
    if (o->kind == QT_WEIGHT || !w->buf[0] || w->buf_src != o->src) {
        size_t si = o->kind == QT_WEIGHT ? i + 1 : o->kind == QT_SCALES ? i : i - 1;
        TERN_TRY(quantize_tensor(w, o, w->plan->outs[si].dtype));
    }
    TERN_TRY(write_all(f, w->buf[o->kind - QT_WEIGHT], o->n_bytes, path));
    if (o->kind == QT_WEIGHT) {
        struct tern_tensor_view v;
        tern_snapshot_tensor_at(w->snap, o->src, &v);
        progress(w, v.n_bytes);
    }
    return TERN_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const struct qt_out *const *)a)->name, (*(const struct qt_out *const *)b)->name);
}

/* The header JSON of shard `shard`: metadata, then tensors sorted by name. */
static enum tern_status shard_header(const struct qt_plan *plan, int shard, struct tern_str *h)
{
    const struct qt_out **sorted = tern_calloc(plan->n_outs, sizeof *sorted);
    if (!sorted) return TERN_E_NO_MEMORY;
    size_t n = 0;
    for (size_t i = 0; i < plan->n_outs; i++)
        if (plan->outs[i].shard == shard) sorted[n++] = &plan->outs[i];
    qsort(sorted, n, sizeof *sorted, by_name);
    enum tern_status st = tern_str_appendz(h, "{\"__metadata__\":{\"format\":\"mlx\"}");
    for (size_t i = 0; st == TERN_OK && i < n; i++) {
        const struct qt_out *o = sorted[i];
        const char *dt = o->dtype == TERN_DTYPE_U32    ? "U32"
                         : o->dtype == TERN_DTYPE_BF16 ? "BF16"
                         : o->dtype == TERN_DTYPE_F16  ? "F16"
                         : o->dtype == TERN_DTYPE_F32  ? "F32"
                         : o->dtype == TERN_DTYPE_I32  ? "I32"
                         : o->dtype == TERN_DTYPE_I64  ? "I64"
                         : o->dtype == TERN_DTYPE_U8   ? "U8"
                                                       : "I8";
        st = tern_str_appendf(h, ",\"%s\":{\"data_offsets\":[%llu,%llu],\"dtype\":\"%s\",\"shape\":[",
                              o->name, (unsigned long long)o->offset,
                              (unsigned long long)(o->offset + o->n_bytes), dt);
        for (int d = 0; st == TERN_OK && d < o->n_dims; d++)
            st = tern_str_appendf(h, "%s%lld", d ? "," : "", (long long)o->shape[d]);
        if (st == TERN_OK) st = tern_str_appendz(h, "]}");
    }
    if (st == TERN_OK) st = tern_str_appendc(h, '}');
    while (st == TERN_OK && h->len % 8) st = tern_str_appendc(h, ' ');
    tern_free(sorted);
    return st;
}

static enum tern_status write_shard(struct qt_writer *w, int shard)
{
    char name[64];
    tern_qt_shard_name(w->plan, shard, name, sizeof name);
    char *path = tern_path_join(w->out_dir, name);
    struct tern_str h = {0};
    FILE *f = path ? fopen(path, "wb") : NULL;
    enum tern_status st = TERN_OK;
    if (!f) {
        st = tern_error(TERN_E_IO, "%s: cannot create: %s", path ? path : name, strerror(errno));
        goto fail;
    }
    st = shard_header(w->plan, shard, &h);
    uint64_t hl = h.len;
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(hl >> (8 * i));
    if (st == TERN_OK) st = write_all(f, le, 8, path);
    if (st == TERN_OK) st = write_all(f, h.data, h.len, path);
    for (size_t i = 0; st == TERN_OK && i < w->plan->n_outs; i++)
        if (w->plan->outs[i].shard == shard) st = write_tensor(w, i, f, path);
    if (fclose(f) != 0 && st == TERN_OK)
        st = tern_error(TERN_E_IO, "%s: close failed: %s", path, strerror(errno));
fail:
    tern_str_deinit(&h);
    tern_free(path);
    return st;
}

/* config.json: the source's, plus mlx-lm's quantization blocks (defaults, then
 * one {group_size, bits} per overridden module; modules kept dense are not
 * listed: loaders tell them by their missing `.scales`). */
static enum tern_status write_config(const struct tern_json_doc *cfg,
                                     const struct tern_quantize_params *p, const char *out_dir)
{
    json_t *root = json_deep_copy(cfg->root), *q = json_object();
    char *path = tern_path_join(out_dir, "config.json");
    enum tern_status st = root && q && path ? TERN_OK : TERN_E_NO_MEMORY;
    if (st == TERN_OK) {
        json_object_set_new(q, "group_size", json_integer(p->group_size));
        json_object_set_new(q, "bits", json_integer(p->bits));
        json_object_set_new(q, "mode", json_string("affine"));
        for (int32_t i = 0; i < p->n_overrides; i++) {
            const struct tern_quantize_override *o = &p->overrides[i];
            if (!o->bits) continue;
            json_t *e = json_object();
            json_object_set_new(e, "group_size", json_integer(o->group_size));
            json_object_set_new(e, "bits", json_integer(o->bits));
            json_object_set_new(q, o->module, e);
        }
        json_object_set(root, "quantization", q);
        json_object_set_new(root, "quantization_config", json_deep_copy(q));
        if (json_dump_file(root, path, JSON_INDENT(4) | JSON_SORT_KEYS) != 0)
            st = tern_error(TERN_E_IO, "%s: cannot write", path);
    }
    json_decref(q);
    json_decref(root);
    tern_free(path);
    return st;
}

/* model.safetensors.index.json, as mlx-lm writes it. */
static enum tern_status write_index(const struct qt_plan *plan, const char *out_dir)
{
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    char *path = tern_path_join(out_dir, "model.safetensors.index.json");
    enum tern_status st = root && meta && map && path ? TERN_OK : TERN_E_NO_MEMORY;
    if (st == TERN_OK) {
        json_object_set_new(meta, "total_size", json_integer((json_int_t)plan->total_bytes));
        json_object_set_new(meta, "total_parameters", json_integer(plan->n_params));
        for (size_t i = 0; i < plan->n_outs; i++) {
            char name[64];
            tern_qt_shard_name(plan, plan->outs[i].shard, name, sizeof name);
            json_object_set_new(map, plan->outs[i].name, json_string(name));
        }
        json_object_set(root, "metadata", meta);
        json_object_set(root, "weight_map", map);
        if (json_dump_file(root, path, JSON_INDENT(4) | JSON_SORT_KEYS) != 0)
            st = tern_error(TERN_E_IO, "%s: cannot write", path);
    }
    json_decref(meta);
    json_decref(map);
    json_decref(root);
    tern_free(path);
    return st;
}

/* Tokenizer, template and generation files: every top-level regular file but
 * the weights, their index, config.json and other checkpoint formats. */
static bool copied(const char *n)
{
    static const char *const skip_ext[] = {".safetensors", ".bin", ".pth", ".pt", ".gguf", ".h5",
                                           ".msgpack", ".onnx"};
    if (n[0] == '.' || !strcmp(n, "config.json") || !strcmp(n, "model.safetensors.index.json"))
        return false;
    size_t len = strlen(n);
    for (size_t i = 0; i < sizeof skip_ext / sizeof *skip_ext; i++) {
        size_t k = strlen(skip_ext[i]);
        if (len >= k && !strcmp(n + len - k, skip_ext[i])) return false;
    }
    return true;
}

static enum tern_status copy_file(const char *src, const char *dst)
{
    char *data = NULL;
    size_t len = 0;
    TERN_TRY(tern_file_read(src, &data, &len));
    FILE *f = fopen(dst, "wb");
    enum tern_status st = f ? write_all(f, data, len, dst)
                            : tern_error(TERN_E_IO, "%s: cannot create: %s", dst, strerror(errno));
    if (f && fclose(f) != 0 && st == TERN_OK) st = tern_error(TERN_E_IO, "%s: close failed", dst);
    tern_free(data);
    return st;
}

static enum tern_status copy_side_files(const char *in_dir, const char *out_dir)
{
    DIR *d = opendir(in_dir);
    if (!d) return tern_error(TERN_E_IO, "%s: cannot list: %s", in_dir, strerror(errno));
    enum tern_status st = TERN_OK;
    struct dirent *e;
    while (st == TERN_OK && (e = readdir(d))) {
        if (!copied(e->d_name)) continue;
        char *src = tern_path_join(in_dir, e->d_name), *dst = tern_path_join(out_dir, e->d_name);
        struct stat sb;
        if (!src || !dst) st = TERN_E_NO_MEMORY;
        else if (stat(src, &sb) == 0 && S_ISREG(sb.st_mode)) st = copy_file(src, dst);
        tern_free(src);
        tern_free(dst);
    }
    closedir(d);
    return st;
}

static enum tern_status make_out_dir(const char *dir)
{
    if (mkdir(dir, 0755) == 0) return TERN_OK;
    if (errno != EEXIST) return tern_error(TERN_E_IO, "%s: cannot create: %s", dir, strerror(errno));
    DIR *d = opendir(dir);
    if (!d) return tern_error(TERN_E_IO, "%s: exists and is not a directory", dir);
    struct dirent *e;
    bool empty = true;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = false;
    closedir(d);
    if (!empty) return tern_error(TERN_E_INVALID_ARG, "%s: output directory is not empty", dir);
    return TERN_OK;
}

enum tern_status tern_quantize(const char *model_dir, const char *out_dir,
                               const struct tern_quantize_params *params)
{
    if (!model_dir || !out_dir || !params)
        return tern_error(TERN_E_INVALID_ARG, "quantize: model_dir, out_dir and params are needed");
    TERN_TRY(check_params(params));
    struct tern_snapshot *snap = NULL;
    struct tern_json_doc cfg = {0};
    struct qt_plan plan = {0};
    struct qt_writer w = {0};
    char *cfg_path = tern_path_join(model_dir, "config.json");
    enum tern_status st = cfg_path ? tern_json_doc_load(cfg_path, &cfg) : TERN_E_NO_MEMORY;
    if (st == TERN_OK) st = tern_snapshot_open(model_dir, &snap);
    if (st == TERN_OK) st = tern_qt_plan_build(snap, &cfg, params, &plan);
    if (st == TERN_OK) st = make_out_dir(out_dir);
    w = (struct qt_writer){.snap = snap, .plan = &plan, .out_dir = out_dir,
                           .progress = params->progress, .t0 = tern_now_ns()};
    for (int i = 0; st == TERN_OK && i < plan.n_shards; i++) st = write_shard(&w, i);
    if (w.progress) fputc('\n', stderr);
    if (st == TERN_OK) st = write_index(&plan, out_dir);
    if (st == TERN_OK) st = write_config(&cfg, params, out_dir);
    if (st == TERN_OK) st = copy_side_files(model_dir, out_dir);
    for (int i = 0; i < 3; i++) tern_free(w.buf[i]);
    tern_qt_plan_deinit(&plan);
    tern_snapshot_close(snap);
    tern_json_doc_deinit(&cfg);
    tern_free(cfg_path);
    return st;
}
