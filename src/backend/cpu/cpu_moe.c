/*
 * cpu_moe.c — the CPU reference of the mixture-of-experts ops (backend.h:
 * moe_route, moe_experts).
 *
 * moe_route: a float32 softmax per token, the top k by repeated maximum
 * (strictly greater wins, so an equal probability goes to the lower expert
 * index), renormalised and scaled as asked.
 *
 * moe_experts groups the work as a grouped GEMM would: the (token, slot)
 * pairs are sorted by expert (a stable counting sort into io->order), then
 * for each expert its weight rows are read (dequantized) once and dotted
 * with every pair routed to it. Each dot product is tern_cpu_dot_f32's
 * fixed 16-lane sum over one token's own row, and a token's outputs are
 * accumulated over its experts in increasing expert index (the loop order),
 * so what a token gets never depends on the other tokens of the batch.
 * Depends on cpu.h, cpu_quant.h.
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many multiply-adds the expert loops run on one thread. */
#define MOE_PAR_MIN 262144.0

enum tern_status tern_cpu_moe_route(struct tern_backend *be, const struct tern_dtensor *logits,
                                    int32_t top_k, bool renorm,
                                    const struct tern_dtensor *expert_scale,
                                    struct tern_dtensor *ids, struct tern_dtensor *weights)
{
    (void)be;
    if (logits->dtype != TERN_DTYPE_F32 || ids->dtype != TERN_DTYPE_I32 ||
        weights->dtype != TERN_DTYPE_F32 || logits->n_dims != 2)
        return tern_error(TERN_E_INVALID_ARG, "cpu moe_route: logits [T, E] f32, ids i32 and "
                          "weights f32 expected");
    int64_t T = logits->shape[0], E = logits->shape[1];
    if (top_k < 1 || top_k > E || (int64_t)tern_dtensor_numel(ids) < T * top_k ||
        (int64_t)tern_dtensor_numel(weights) < T * top_k)
        return tern_error(TERN_E_INVALID_ARG, "cpu moe_route: top_k %d of %lld experts, ids / "
                          "weights too small for %lld tokens", top_k, (long long)E, (long long)T);
    if (expert_scale && (int64_t)tern_dtensor_numel(expert_scale) != E)
        return tern_error(TERN_E_INVALID_ARG, "cpu moe_route: expert_scale has %zu values, %lld "
                          "experts", tern_dtensor_numel(expert_scale), (long long)E);
    const float *lg = tern_cpu_ptr(logits);
    int32_t *id = tern_cpu_ptr(ids);
    float *wt = tern_cpu_ptr(weights);
    float *p = tern_malloc((size_t)E * 2 * sizeof *p), *sc = p + E;
    if (!p) return TERN_E_NO_MEMORY;
    if (expert_scale) tern_to_f32(expert_scale->dtype, tern_cpu_ptr(expert_scale), sc, (size_t)E);
    for (int64_t t = 0; t < T; t++) {
        const float *l = lg + t * E;
        float mx = l[0], sum = 0.0f;
        for (int64_t e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int64_t e = 0; e < E; e++) sum += p[e] = expf(l[e] - mx);
        for (int64_t e = 0; e < E; e++) p[e] /= sum;
        int32_t *ti = id + t * top_k;
        float *tw = wt + t * top_k, ksum = 0.0f;
        for (int32_t j = 0; j < top_k; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                bool taken = false;
                for (int32_t i = 0; i < j && !taken; i++) taken = ti[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            ti[j] = (int32_t)best;
            tw[j] = p[best];
            ksum += p[best];
        }
        for (int32_t j = 0; j < top_k; j++) {
            if (renorm) tw[j] /= ksum;
            if (expert_scale) tw[j] *= sc[ti[j]];
        }
    }
    tern_free(p);
    return TERN_OK;
}

/* Row `row` of a stacked linear as float32 (dequantized, or widened). */
static void row_f32(const struct tern_linear *w, int64_t row, float *out)
{
    if (w->bits) {
        tern_cpu_dequant_row(w, row, out);
        return;
    }
    size_t es = tern_dtype_size(w->weight.dtype);
    const char *base = tern_cpu_ptr(&w->weight);
    tern_to_f32(w->weight.dtype, base + (size_t)(row * w->in_features) * es, out,
                (size_t)w->in_features);
}

static enum tern_status check_stack(const struct tern_linear *w, int64_t rows, int64_t in,
                                    const char *what)
{
    bool dense = w->weight.dtype == TERN_DTYPE_F32 || w->weight.dtype == TERN_DTYPE_F16 ||
                 w->weight.dtype == TERN_DTYPE_BF16;
    if (w->ggml_type || (!w->bits && !dense) || w->out_features != rows || w->in_features != in)
        return tern_error(TERN_E_INVALID_ARG, "cpu moe_experts: %s is not a [%lld, %lld] dense "
                          "or MLX affine linear", what, (long long)rows, (long long)in);
    return TERN_OK;
}

static enum tern_status check_io(const struct tern_experts *w, const struct tern_moe_io *io,
                                 int64_t *T, int64_t *k)
{
    int64_t E = w->n_experts, H = w->hidden, I = w->intermediate;
    TERN_TRY(check_stack(&w->gate_up, E * 2 * I, H, "gate_up"));
    TERN_TRY(check_stack(&w->down, E * H, I, "down"));
    *T = io->x->shape[0];
    *k = io->ids->n_dims == 2 ? io->ids->shape[1] : 0;
    const struct tern_dtensor *f32[] = {io->x, io->weights, io->act, io->out};
    for (size_t i = 0; i < sizeof f32 / sizeof f32[0]; i++)
        if (f32[i]->dtype != TERN_DTYPE_F32)
            return tern_error(TERN_E_INVALID_ARG, "cpu moe_experts: operands must be f32");
    if (*k < 1 || io->ids->dtype != TERN_DTYPE_I32 || io->x->shape[1] != H ||
        (int64_t)tern_dtensor_numel(io->out) < *T * H ||
        (int64_t)tern_dtensor_numel(io->weights) < *T * *k ||
        (int64_t)tern_dtensor_numel(io->act) < *T * *k * I ||
        (int64_t)tern_dtensor_numel(io->order) < *T * *k + E + 1 ||
        (io->shared && (int64_t)tern_dtensor_numel(io->shared) < *T * H))
        return tern_error(TERN_E_INVALID_ARG, "cpu moe_experts: operand shapes do not fit %lld "
                          "tokens of %lld experts each", (long long)*T, (long long)*k);
    const int32_t *ids = tern_cpu_ptr(io->ids);
    for (int64_t i = 0; i < *T * *k; i++)
        if (ids[i] < 0 || ids[i] >= E)
            return tern_error(TERN_E_INVALID_ARG, "cpu moe_experts: expert id %d out of [0, %lld)",
                              ids[i], (long long)E);
    return TERN_OK;
}

/* The pairs p = t k + j grouped by expert, in increasing p within a group:
 * order[0, T k) the pairs, order[T k + e] the start of expert e's group. */
static void group_pairs(const int32_t *ids, int64_t n_pairs, int64_t E, int32_t *order,
                        int32_t *next)
{
    int32_t *off = order + n_pairs;
    memset(off, 0, (size_t)(E + 1) * sizeof *off);
    for (int64_t p = 0; p < n_pairs; p++) off[ids[p] + 1]++;
    for (int64_t e = 0; e < E; e++) off[e + 1] += off[e];
    memcpy(next, off, (size_t)E * sizeof *next);
    for (int64_t p = 0; p < n_pairs; p++) order[next[ids[p]]++] = (int32_t)p;
}

enum tern_status tern_cpu_moe_experts(struct tern_backend *be, const struct tern_experts *w,
                                      enum tern_glu_act act, const struct tern_moe_io *io)
{
    int64_t T, k, E = w->n_experts, H = w->hidden, I = w->intermediate;
    TERN_TRY(check_io(w, io, &T, &k));
    const int32_t *ids = tern_cpu_ptr(io->ids);
    int32_t *order = tern_cpu_ptr(io->order), *off = order + T * k;
    const float *x = tern_cpu_ptr(io->x), *wt = tern_cpu_ptr(io->weights);
    float *a = tern_cpu_ptr(io->act), *out = tern_cpu_ptr(io->out);
    int n_threads = be->n_threads > 0 ? be->n_threads : 1;
    int64_t width = 2 * H > I ? 2 * H : I; /* a gate and an up row, or a down row */
    float *rows = tern_malloc(((size_t)n_threads * (size_t)width + (size_t)E) * sizeof *rows);
    if (!rows) return TERN_E_NO_MEMORY;
    group_pairs(ids, T * k, E, order, (int32_t *)(rows + (size_t)n_threads * (size_t)width));
    memset(out, 0, (size_t)(T * H) * sizeof *out);
    double work = (double)T * (double)k * 3.0 * (double)H * (double)I;
#pragma omp parallel num_threads(n_threads) if (work > MOE_PAR_MIN)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *g = rows + (size_t)tid * (size_t)width, *u = g + H;
        /* act[p] = act(x[t] gate_e) * (x[t] up_e) for every pair p = (t, j) */
        for (int64_t e = 0; e < E; e++) {
            if (off[e] == off[e + 1]) continue;
#pragma omp for schedule(static)
            for (int64_t o = 0; o < I; o++) {
                row_f32(&w->gate_up, 2 * I * e + o, g);
                row_f32(&w->gate_up, 2 * I * e + I + o, u);
                for (int32_t q = off[e]; q < off[e + 1]; q++) {
                    const float *xt = x + (order[q] / k) * H;
                    a[(int64_t)order[q] * I + o] = tern_cpu_glu_act(act, tern_cpu_dot_f32(xt, g, H)) *
                                                   tern_cpu_dot_f32(xt, u, H);
                }
            }
        }
        /* out[t] += weight * down_e(act[p]), experts in increasing order */
        for (int64_t e = 0; e < E; e++) {
            if (off[e] == off[e + 1]) continue;
#pragma omp for schedule(static)
            for (int64_t o = 0; o < H; o++) {
                row_f32(&w->down, H * e + o, g);
                for (int32_t q = off[e]; q < off[e + 1]; q++) {
                    int64_t p = order[q];
                    float y = tern_cpu_dot_f32(a + p * I, g, I);
                    out[(p / k) * H + o] += wt[p] * y;
                }
            }
        }
    }
    tern_free(rows);
    if (!io->shared) return TERN_OK;
    const float *sh = tern_cpu_ptr(io->shared);
    const float *sg = io->shared_gate ? tern_cpu_ptr(io->shared_gate) : NULL;
    for (int64_t t = 0; t < T; t++) {
        float s = sg ? 1.0f / (1.0f + expf(-sg[t])) : 1.0f;
        for (int64_t i = 0; i < H; i++) out[t * H + i] += s * sh[t * H + i];
    }
    return TERN_OK;
}
