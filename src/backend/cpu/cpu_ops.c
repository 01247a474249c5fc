/*
 * cpu_ops.c — the CPU reference ops: float32 activations, float32
 * accumulation, OpenMP across rows.
 *
 * Batch invariance is a property of this file: every output element is
 * computed by the same sequence of float operations whatever else is in the
 * batch (no BLAS whose blocking depends on the row count, fixed-lane dot
 * products, per-query attention with a fixed KV order). Solo and batched runs
 * are therefore bitwise identical.
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_quant.h"

#include <math.h>
#include <string.h>

#define DOT_LANES 16

/* Below this many multiply-adds an op runs on one thread. */
#define TERN_CPU_PAR_MIN 262144.0

/* Fixed-order dot products: DOT_LANES independent accumulators (which the
 * compiler vectorises without reassociation), reduced pairwise; AVX-512 /
 * AVX2 clones where the CPU has them, with the same bits (base.h). */
static float reduce_lanes(float *acc)
{
    for (int w = DOT_LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

TERN_SIMD_CLONES float tern_cpu_dot_f32(const float *a, const float *b, int64_t n)
{
    float acc[DOT_LANES] = {0};
    int64_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++) acc[j] += a[i + j] * b[i + j];
    for (int j = 0; i + j < n; j++) acc[j] += a[i + j] * b[i + j];
    return reduce_lanes(acc);
}

TERN_SIMD_CLONES static float dot_bf16(const float *a, const uint16_t *b, int64_t n)
{
    float acc[DOT_LANES] = {0};
    int64_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++) acc[j] += a[i + j] * tern_bf16_to_f32(b[i + j]);
    for (int j = 0; i + j < n; j++) acc[j] += a[i + j] * tern_bf16_to_f32(b[i + j]);
    return reduce_lanes(acc);
}

TERN_SIMD_CLONES static float dot_f16(const float *a, const uint16_t *b, int64_t n)
{
    float acc[DOT_LANES] = {0};
    int64_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++) acc[j] += a[i + j] * tern_f16_to_f32(b[i + j]);
    for (int j = 0; i + j < n; j++) acc[j] += a[i + j] * tern_f16_to_f32(b[i + j]);
    return reduce_lanes(acc);
}

static enum tern_status check_f32(const struct tern_dtensor *t, const char *op, const char *what)
{
    if (t->dtype != TERN_DTYPE_F32)
        return tern_error(TERN_E_UNSUPPORTED, "cpu %s: %s must be f32, got %s", op, what,
                          tern_dtype_name(t->dtype));
    return TERN_OK;
}

static int64_t last_dim(const struct tern_dtensor *t)
{
    return t->shape[t->n_dims - 1];
}

/* Loads n values of a float-dtype weight vector into f32. */
static void load_row(const struct tern_dtensor *t, int64_t off, int64_t n, float *dst)
{
    const char *base = tern_cpu_ptr(t);
    tern_to_f32(t->dtype, base + (size_t)off * tern_dtype_size(t->dtype), dst, (size_t)n);
}

/* ------------------------------------------------------------ get_rows */

enum tern_status tern_cpu_get_rows(struct tern_backend *be, const struct tern_linear *table,
                                   const struct tern_dtensor *idx, struct tern_dtensor *out)
{
    TERN_TRY(check_f32(out, "get_rows", "out"));
    int64_t n = idx->shape[0], width = table->in_features, rows = table->out_features;
    const int32_t *ids = tern_cpu_ptr(idx);
    float *o = tern_cpu_ptr(out);
    for (int64_t r = 0; r < n; r++)
        if (ids[r] < 0 || ids[r] >= rows)
            return tern_error(TERN_E_INVALID_ARG, "token id %d out of range [0, %lld)", ids[r],
                              (long long)rows);
    if (table->ggml_type) TERN_TRY(tern_cpu_check_ggml(table, "get_rows"));
    for (int64_t r = 0; r < n; r++) {
        if (table->bits || table->ggml_type) tern_cpu_dequant_row(table, ids[r], o + r * width);
        else load_row(&table->weight, (int64_t)ids[r] * width, width, o + r * width);
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ norms */

static void rmsnorm_row(const float *x, const float *w, float eps, int64_t n, float *out)
{
    /* HF: x * rsqrt(mean(x^2) + eps) * w, in float32. */
    float acc[DOT_LANES] = {0};
    int64_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++) acc[j] += x[i + j] * x[i + j];
    for (int j = 0; i + j < n; j++) acc[j] += x[i + j] * x[i + j];
    float ms = reduce_lanes(acc) / (float)n;
    float r = 1.0f / sqrtf(ms + eps);
    if (!w) {
        for (i = 0; i < n; i++) out[i] = x[i] * r;
        return;
    }
    for (i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

/* Norm weights are tiny: convert to f32 on the stack-free path (NULL: a
 * norm without weight). */
static enum tern_status norm_weight(const struct tern_dtensor *w, int64_t dim, float **out)
{
    *out = NULL;
    if (!w) return TERN_OK;
    if (tern_dtensor_numel(w) != (size_t)dim)
        return tern_error(TERN_E_INVALID_ARG, "rmsnorm weight has %zu elements, dim is %lld",
                          tern_dtensor_numel(w), (long long)dim);
    if (w->dtype == TERN_DTYPE_F32) {
        *out = tern_cpu_ptr(w);
        return TERN_OK;
    }
    *out = tern_malloc((size_t)dim * sizeof(float));
    if (!*out) return TERN_E_NO_MEMORY;
    load_row(w, 0, dim, *out);
    return TERN_OK;
}

static void norm_weight_done(const struct tern_dtensor *w, float *wf)
{
    if (w && w->dtype != TERN_DTYPE_F32) tern_free(wf);
}

enum tern_status tern_cpu_rmsnorm(struct tern_backend *be, const struct tern_dtensor *x,
                                  const struct tern_dtensor *w, float eps, struct tern_dtensor *out)
{
    TERN_TRY(check_f32(x, "rmsnorm", "x"));
    TERN_TRY(check_f32(out, "rmsnorm", "out"));
    int64_t dim = last_dim(x), rows = (int64_t)tern_dtensor_numel(x) / dim;
    float *wf;
    TERN_TRY(norm_weight(w, dim, &wf));
    const float *xp = tern_cpu_ptr(x);
    float *op = tern_cpu_ptr(out);
#pragma omp parallel for num_threads(be->n_threads) if (rows > 4)
    for (int64_t r = 0; r < rows; r++) rmsnorm_row(xp + r * dim, wf, eps, dim, op + r * dim);
    norm_weight_done(w, wf);
    return TERN_OK;
}

enum tern_status tern_cpu_add_rmsnorm(struct tern_backend *be, struct tern_dtensor *residual,
                                      const struct tern_dtensor *x, const struct tern_dtensor *w,
                                      float eps, struct tern_dtensor *out)
{
    TERN_TRY(check_f32(residual, "add_rmsnorm", "residual"));
    TERN_TRY(check_f32(x, "add_rmsnorm", "x"));
    TERN_TRY(check_f32(out, "add_rmsnorm", "out"));
    int64_t dim = last_dim(x), rows = (int64_t)tern_dtensor_numel(x) / dim;
    float *wf;
    TERN_TRY(norm_weight(w, dim, &wf));
    float *rp = tern_cpu_ptr(residual), *op = tern_cpu_ptr(out);
    const float *xp = tern_cpu_ptr(x);
#pragma omp parallel for num_threads(be->n_threads) if (rows > 4)
    for (int64_t r = 0; r < rows; r++) {
        float *rr = rp + r * dim;
        for (int64_t i = 0; i < dim; i++) rr[i] += xp[r * dim + i];
        rmsnorm_row(rr, wf, eps, dim, op + r * dim);
    }
    norm_weight_done(w, wf);
    return TERN_OK;
}

/* (x - mean) / sqrt(var + eps) * w + b as Cohere's and PyTorch's
 * LayerNorm, in float32; sums in the fixed lane order. */
static void layernorm_row(const float *x, const float *w, const float *b, float eps, int64_t n,
                          float *out)
{
    float acc[DOT_LANES] = {0};
    int64_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++) acc[j] += x[i + j];
    for (int j = 0; i + j < n; j++) acc[j] += x[i + j];
    float mean = reduce_lanes(acc) / (float)n;
    float acc2[DOT_LANES] = {0};
    for (i = 0; i + DOT_LANES <= n; i += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++) {
            float d = x[i + j] - mean;
            acc2[j] += d * d;
        }
    for (int j = 0; i + j < n; j++) {
        float d = x[i + j] - mean;
        acc2[j] += d * d;
    }
    float r = 1.0f / sqrtf(reduce_lanes(acc2) / (float)n + eps);
    for (i = 0; i < n; i++) {
        float y = (x[i] - mean) * r;
        if (w) y = w[i] * y;
        out[i] = b ? y + b[i] : y;
    }
}

enum tern_status tern_cpu_layernorm(struct tern_backend *be, const struct tern_dtensor *x,
                                    const struct tern_dtensor *w, const struct tern_dtensor *b,
                                    float eps, struct tern_dtensor *out)
{
    TERN_TRY(check_f32(x, "layernorm", "x"));
    TERN_TRY(check_f32(out, "layernorm", "out"));
    int64_t dim = last_dim(x), rows = (int64_t)tern_dtensor_numel(x) / dim;
    if (tern_dtensor_numel(out) != tern_dtensor_numel(x))
        return tern_error(TERN_E_INVALID_ARG, "layernorm: out has %zu elements, x %zu",
                          tern_dtensor_numel(out), tern_dtensor_numel(x));
    float *wf, *bf;
    TERN_TRY(norm_weight(w, dim, &wf));
    enum tern_status st = norm_weight(b, dim, &bf);
    if (st != TERN_OK) {
        norm_weight_done(w, wf);
        return st;
    }
    const float *xp = tern_cpu_ptr(x);
    float *op = tern_cpu_ptr(out);
#pragma omp parallel for num_threads(be->n_threads) if (rows > 4)
    for (int64_t r = 0; r < rows; r++) layernorm_row(xp + r * dim, wf, bf, eps, dim, op + r * dim);
    norm_weight_done(w, wf);
    norm_weight_done(b, bf);
    return TERN_OK;
}

enum tern_status tern_cpu_head_rmsnorm(struct tern_backend *be, struct tern_dtensor *x,
                                       int64_t x_col, int32_t n_heads, int32_t head_dim,
                                       const struct tern_dtensor *w, float eps)
{
    TERN_TRY(check_f32(x, "head_rmsnorm", "x"));
    int64_t width = last_dim(x), T = x->shape[0];
    if (x_col + (int64_t)n_heads * head_dim > width)
        return tern_error(TERN_E_INVALID_ARG, "head_rmsnorm: heads past the row end");
    float *wf;
    TERN_TRY(norm_weight(w, head_dim, &wf));
    float *xp = tern_cpu_ptr(x);
#pragma omp parallel for num_threads(be->n_threads) if (T > 4)
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < n_heads; h++) {
            float *v = xp + t * width + x_col + (int64_t)h * head_dim;
            rmsnorm_row(v, wf, eps, head_dim, v);
        }
    norm_weight_done(w, wf);
    return TERN_OK;
}

/* ------------------------------------------------------------ matmul */

static float dense_dot(const struct tern_linear *w, const float *x, int64_t o)
{
    int64_t in = w->in_features;
    const char *base = tern_cpu_ptr(&w->weight);
    switch (w->weight.dtype) {
    case TERN_DTYPE_BF16:
        return dot_bf16(x, (const uint16_t *)base + o * in, in);
    case TERN_DTYPE_F16:
        return dot_f16(x, (const uint16_t *)base + o * in, in);
    default:
        return tern_cpu_dot_f32(x, (const float *)base + o * in, in);
    }
}

enum tern_status tern_cpu_matmul(struct tern_backend *be, const struct tern_dtensor *x,
                                 const struct tern_linear *w, struct tern_dtensor *y, int64_t y_col)
{
    TERN_TRY(check_f32(x, "matmul", "x"));
    TERN_TRY(check_f32(y, "matmul", "y"));
    int64_t T = x->shape[0], in = w->in_features, out = w->out_features, width = last_dim(y);
    if (last_dim(x) != in)
        return tern_error(TERN_E_INVALID_ARG, "matmul: x has %lld columns, weight expects %lld",
                          (long long)last_dim(x), (long long)in);
    if (y_col + out > width || y->shape[0] < T)
        return tern_error(TERN_E_INVALID_ARG, "matmul: output slice past y's bounds");
    if (w->ggml_type) TERN_TRY(tern_cpu_check_ggml(w, "matmul"));
    else if (!w->bits && w->weight.dtype != TERN_DTYPE_F32 && w->weight.dtype != TERN_DTYPE_F16 &&
             w->weight.dtype != TERN_DTYPE_BF16)
        return tern_error(TERN_E_UNSUPPORTED, "cpu matmul: weight dtype %s",
                          tern_dtype_name(w->weight.dtype));
    const float *xp = tern_cpu_ptr(x);
    float *yp = tern_cpu_ptr(y);
    float *bias = NULL;
    if (w->bias.buf) {
        bias = tern_malloc((size_t)out * sizeof(float));
        if (!bias) return TERN_E_NO_MEMORY;
        load_row(&w->bias, 0, out, bias);
    }
    if (w->bits || w->ggml_type) {
        enum tern_status st = tern_cpu_matmul_quant(be, xp, T, w, yp, width, y_col);
        if (st != TERN_OK) {
            tern_free(bias);
            return st;
        }
    } else {
        /* Each weight row is read once and stays in L1 while every token uses it.
         * Small products stay on one thread: a parallel region costs more than
         * they do, and far more when another process holds a core. */
        double work = (double)T * (double)in * (double)out;
#pragma omp parallel for num_threads(be->n_threads) schedule(static) if (work > TERN_CPU_PAR_MIN)
        for (int64_t o = 0; o < out; o++)
            for (int64_t t = 0; t < T; t++) yp[t * width + y_col + o] = dense_dot(w, xp + t * in, o);
    }
    if (bias)
        for (int64_t t = 0; t < T; t++)
            for (int64_t o = 0; o < out; o++) yp[t * width + y_col + o] += bias[o];
    tern_free(bias);
    return TERN_OK;
}

/* ------------------------------------------------------------ rope */

enum tern_status tern_cpu_rope(struct tern_backend *be, struct tern_dtensor *x, int64_t x_col,
                               int32_t n_heads, const struct tern_dtensor *positions,
                               const struct tern_rope *rope)
{
    TERN_TRY(check_f32(x, "rope", "x"));
    int64_t width = last_dim(x), T = x->shape[0];
    int hd = rope->head_dim, rot = rope->rotary_dim, half = rot / 2;
    if (x_col + (int64_t)n_heads * hd > width)
        return tern_error(TERN_E_INVALID_ARG, "rope: heads past the row end");
    const float *inv = tern_cpu_ptr(&rope->inv_freq);
    const int32_t *pos = tern_cpu_ptr(positions);
    float *xp = tern_cpu_ptr(x);
#pragma omp parallel for num_threads(be->n_threads) if (T > 4)
    for (int64_t t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            /* As HF: angle in float32, cos/sin scaled by the attention factor. */
            float ang = (float)pos[t] * inv[i];
            float c = cosf(ang) * rope->mscale, s = sinf(ang) * rope->mscale;
            for (int h = 0; h < n_heads; h++) {
                float *v = xp + t * width + x_col + (int64_t)h * hd;
                int i0 = rope->interleaved ? 2 * i : i;
                int i1 = rope->interleaved ? 2 * i + 1 : i + half;
                float a = v[i0], b = v[i1];
                v[i0] = a * c - b * s;
                v[i1] = b * c + a * s;
            }
        }
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ KV cache + attention */

enum tern_status tern_cpu_kv_store(struct tern_backend *be, const struct tern_dtensor *qkv,
                                   int64_t k_col, int64_t v_col,
                                   const struct tern_batch_dev *batch, struct tern_kv_layer *kv)
{
    TERN_TRY(check_f32(qkv, "kv_store", "qkv"));
    TERN_TRY(check_f32(&kv->k, "kv_store", "k cache"));
    int64_t width = last_dim(qkv);
    int64_t row = kv->k.shape[2] * kv->k.shape[3]; /* n_kv_heads * head_dim */
    int64_t n_slots = kv->k.shape[0] * kv->k.shape[1];
    const int32_t *slots = tern_cpu_ptr(&batch->slot_mapping);
    const float *q = tern_cpu_ptr(qkv);
    float *kc = tern_cpu_ptr(&kv->k), *vc = tern_cpu_ptr(&kv->v);
    for (int64_t t = 0; t < batch->host->n_tokens; t++) {
        int64_t s = slots[t];
        if (s < 0) continue; /* padding token */
        if (s >= n_slots)
            return tern_error(TERN_E_INTERNAL, "kv_store: slot %lld past the pool (%lld slots)",
                              (long long)s, (long long)n_slots);
        memcpy(kc + s * row, q + t * width + k_col, (size_t)row * sizeof(float));
        memcpy(vc + s * row, q + t * width + v_col, (size_t)row * sizeof(float));
    }
    return TERN_OK;
}

/* One query head against its sequence's cache, online softmax over KV
 * positions in increasing order (a fixed order: batch-invariant). */
static void attend_one(const float *q, const struct tern_kv_layer *kv, const int32_t *btable,
                       int32_t block_size, int64_t kvh, int32_t lo, int32_t hi,
                       const struct tern_attn_params *p, float *acc, float *out)
{
    int hd = p->head_dim;
    int64_t n_kv = kv->k.shape[2];
    const float *kc = tern_cpu_ptr(&kv->k), *vc = tern_cpu_ptr(&kv->v);
    float m = -INFINITY, l = 0.0f;
    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    for (int32_t j = lo; j <= hi; j++) {
        int64_t slot = (int64_t)btable[j / block_size] * block_size + j % block_size;
        const float *k = kc + (slot * n_kv + kvh) * hd;
        const float *v = vc + (slot * n_kv + kvh) * hd;
        float s = tern_cpu_dot_f32(q, k, hd) * p->scale;
        if (p->softcap > 0) s = p->softcap * tanhf(s / p->softcap);
        float m_new = s > m ? s : m;
        float corr = expf(m - m_new), e = expf(s - m_new);
        l = l * corr + e;
        for (int d = 0; d < hd; d++) acc[d] = acc[d] * corr + e * v[d];
        m = m_new;
    }
    float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int d = 0; d < hd; d++) out[d] = acc[d] * inv;
}

enum tern_status tern_cpu_attention(struct tern_backend *be, const struct tern_dtensor *qkv,
                                    const struct tern_kv_layer *kv,
                                    const struct tern_batch_dev *batch,
                                    const struct tern_attn_params *p, struct tern_dtensor *out)
{
    TERN_TRY(check_f32(qkv, "attention", "qkv"));
    TERN_TRY(check_f32(out, "attention", "out"));
    const struct tern_batch *b = batch->host;
    int64_t width = last_dim(qkv), owidth = last_dim(out);
    int hd = p->head_dim, H = p->n_heads, group = p->n_heads / p->n_kv_heads;
    if (hd > 1024) return tern_error(TERN_E_UNSUPPORTED, "cpu attention: head_dim %d > 1024", hd);
    const float *qp = tern_cpu_ptr(qkv);
    float *op = tern_cpu_ptr(out);
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t q0 = b->query_start[s], q1 = b->query_start[s + 1];
        const int32_t *bt = b->block_tables + (int64_t)s * b->max_blocks_per_seq;
#pragma omp parallel for collapse(2) num_threads(be->n_threads) schedule(static) \
    if ((double)(q1 - q0) * H * (double)b->seq_lens[s] * hd > TERN_CPU_PAR_MIN)
        for (int32_t t = q0; t < q1; t++)
            for (int h = 0; h < H; h++) {
                float acc[1024];
                int32_t pos = b->positions[t];
                int32_t lo = p->sliding_window > 0 ? pos - p->sliding_window + 1 : 0;
                if (lo < 0) lo = 0;
                attend_one(qp + (int64_t)t * width + (int64_t)h * hd, kv, bt, batch->block_size,
                           h / group, lo, pos, p, acc, op + (int64_t)t * owidth + (int64_t)h * hd);
            }
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ elementwise */

enum tern_status tern_cpu_silu_mul(struct tern_backend *be, const struct tern_dtensor *gate_up,
                                   struct tern_dtensor *out)
{
    TERN_TRY(check_f32(gate_up, "silu_mul", "gate_up"));
    TERN_TRY(check_f32(out, "silu_mul", "out"));
    int64_t ff = last_dim(out), T = out->shape[0];
    if (last_dim(gate_up) != 2 * ff)
        return tern_error(TERN_E_INVALID_ARG, "silu_mul: gate_up width %lld != 2 * %lld",
                          (long long)last_dim(gate_up), (long long)ff);
    const float *g = tern_cpu_ptr(gate_up);
    float *o = tern_cpu_ptr(out);
#pragma omp parallel for num_threads(be->n_threads) if (T > 4)
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < ff; i++) {
            float a = g[t * 2 * ff + i], u = g[t * 2 * ff + ff + i];
            o[t * ff + i] = a / (1.0f + expf(-a)) * u;
        }
    return TERN_OK;
}

static float act_f(enum tern_glu_act act, float a)
{
    if (act == TERN_GLU_SILU) return a / (1.0f + expf(-a));
    /* transformers' gelu_pytorch_tanh, in float32 */
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    return 0.5f * a * (1.0f + tanhf(k * (a + 0.044715f * a * a * a)));
}

float tern_cpu_glu_act(enum tern_glu_act act, float a)
{
    return act_f(act, a);
}

enum tern_status tern_cpu_act_mul(struct tern_backend *be, const struct tern_dtensor *x,
                                  int64_t x_col, const struct tern_dtensor *y, int64_t y_col,
                                  enum tern_glu_act act, struct tern_dtensor *out)
{
    TERN_TRY(check_f32(x, "act_mul", "x"));
    if (y) TERN_TRY(check_f32(y, "act_mul", "y"));
    TERN_TRY(check_f32(out, "act_mul", "out"));
    int64_t n = last_dim(out), T = out->shape[0], xw = last_dim(x), yw = y ? last_dim(y) : 0;
    if (x->shape[0] < T || x_col < 0 || x_col + n > xw ||
        (y && (y->shape[0] < T || y_col < 0 || y_col + n > yw)))
        return tern_error(TERN_E_INVALID_ARG, "act_mul: column windows past the operands");
    const float *xp = tern_cpu_ptr(x), *yp = y ? tern_cpu_ptr(y) : NULL;
    float *o = tern_cpu_ptr(out);
#pragma omp parallel for num_threads(be->n_threads) if (T > 4)
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < n; i++) {
            float a = act_f(act, xp[t * xw + x_col + i]);
            o[t * n + i] = yp ? a * yp[t * yw + y_col + i] : a;
        }
    return TERN_OK;
}

enum tern_status tern_cpu_scale(struct tern_backend *be, const struct tern_dtensor *x, float c,
                                const struct tern_dtensor *s, struct tern_dtensor *out)
{
    TERN_TRY(check_f32(x, "scale", "x"));
    TERN_TRY(check_f32(out, "scale", "out"));
    size_t n = tern_dtensor_numel(x);
    if (tern_dtensor_numel(out) != n)
        return tern_error(TERN_E_INVALID_ARG, "scale: out has %zu elements, x %zu",
                          tern_dtensor_numel(out), n);
    float k = c;
    if (s) {
        float sv;
        load_row(s, 0, 1, &sv);
        k = c == 1.0f ? sv : c * sv;
    }
    const float *xp = tern_cpu_ptr(x);
    float *o = tern_cpu_ptr(out);
    for (size_t i = 0; i < n; i++) o[i] = xp[i] * k;
    return TERN_OK;
}

enum tern_status tern_cpu_softcap(struct tern_backend *be, struct tern_dtensor *x, float cap)
{
    TERN_TRY(check_f32(x, "softcap", "x"));
    size_t n = tern_dtensor_numel(x);
    float *xp = tern_cpu_ptr(x);
    for (size_t i = 0; i < n; i++) xp[i] = tanhf(xp[i] / cap) * cap;
    return TERN_OK;
}

enum tern_status tern_cpu_add(struct tern_backend *be, const struct tern_dtensor *a,
                              const struct tern_dtensor *b, struct tern_dtensor *out)
{
    TERN_TRY(check_f32(a, "add", "a"));
    TERN_TRY(check_f32(b, "add", "b"));
    TERN_TRY(check_f32(out, "add", "out"));
    size_t n = tern_dtensor_numel(a);
    const float *ap = tern_cpu_ptr(a), *bp = tern_cpu_ptr(b);
    float *o = tern_cpu_ptr(out);
    for (size_t i = 0; i < n; i++) o[i] = ap[i] + bp[i];
    return TERN_OK;
}

enum tern_status tern_cpu_argmax(struct tern_backend *be, const struct tern_dtensor *logits,
                                 struct tern_dtensor *out)
{
    TERN_TRY(check_f32(logits, "argmax", "logits"));
    int64_t V = last_dim(logits), n = logits->shape[0];
    const float *l = tern_cpu_ptr(logits);
    int32_t *o = tern_cpu_ptr(out);
    for (int64_t r = 0; r < n; r++) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (l[r * V + i] > l[r * V + best]) best = i;
        o[r] = (int32_t)best;
    }
    return TERN_OK;
}
