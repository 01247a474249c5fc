/*
 * cuda_moe.c — operand checks and launches of the mixture-of-experts ops
 * (backend.h moe_route, moe_experts; kernels and what they do in
 * cuda_moe.cu). Depends on cuda_internal.h.
 */
#include "backend/cuda/cuda_internal.h"

/* The most experts moe_route takes: their probabilities fill 48 KB of
 * shared memory. */
#define MOE_MAX_EXPERTS 12288

static bool float_dt(enum tern_dtype dt)
{
    return dt == TERN_DTYPE_F32 || dt == TERN_DTYPE_F16 || dt == TERN_DTYPE_BF16;
}

static enum tern_status done(cudaError_t e, const char *op)
{
    if (e == cudaSuccess) return TERN_OK;
    (void)cudaGetLastError();
    return tern_cuda_fail(op, (int)e, __FILE__, __LINE__);
}

enum tern_status tern_cuda_moe_route(struct tern_backend *be, const struct tern_dtensor *logits,
                                     int32_t top_k, bool renorm,
                                     const struct tern_dtensor *expert_scale,
                                     struct tern_dtensor *ids, struct tern_dtensor *weights)
{
    int64_t T = logits->shape[0], E = logits->n_dims == 2 ? logits->shape[1] : 0;
    if (logits->dtype != TERN_DTYPE_F32 || ids->dtype != TERN_DTYPE_I32 ||
        weights->dtype != TERN_DTYPE_F32 || E < 1 || E > MOE_MAX_EXPERTS || top_k < 1 ||
        top_k > E || top_k > 32 || (int64_t)tern_dtensor_numel(ids) < T * top_k ||
        (int64_t)tern_dtensor_numel(weights) < T * top_k ||
        (expert_scale && ((int64_t)tern_dtensor_numel(expert_scale) != E ||
                          !float_dt(expert_scale->dtype))))
        return tern_error(TERN_E_INVALID_ARG, "cuda moe_route: logits [T, E] F32 (E <= %d), top "
                          "k <= min(E, 32) of I32 ids and F32 weights, a float [E] scale",
                          MOE_MAX_EXPERTS);
    return done(tk_moe_route(tern_cuda_of(be)->stream, tern_cuda_ptr(logits), T, (int)E, top_k,
                             renorm, expert_scale ? tern_cuda_ptr(expert_scale) : NULL,
                             expert_scale ? (int)expert_scale->dtype : 0, tern_cuda_ptr(ids),
                             tern_cuda_ptr(weights)),
                "tk_moe_route");
}

/* A stacked projection as the kernels see it; false unless it is dense
 * F32 / F16 / BF16 or MLX affine of rows x in. */
static bool moe_w(const struct tern_linear *l, int64_t rows, int64_t in, struct tk_moe_w *m)
{
    m->w = tern_cuda_ptr(&l->weight);
    m->wdt = (int)l->weight.dtype;
    m->bits = l->bits;
    m->group = l->group_size;
    m->scales = l->bits ? tern_cuda_ptr(&l->scales) : NULL;
    m->biases = l->bits ? tern_cuda_ptr(&l->biases) : NULL;
    m->sdt = l->bits ? (int)l->scales.dtype : 0;
    bool fmt = l->bits ? l->weight.dtype == TERN_DTYPE_U32 && float_dt(l->scales.dtype) &&
                             l->group_size > 0 && in % l->group_size == 0
                       : float_dt(l->weight.dtype);
    return fmt && !l->ggml_type && l->out_features == rows && l->in_features == in && m->w;
}

enum tern_status tern_cuda_moe_experts(struct tern_backend *be, const struct tern_experts *w,
                                       enum tern_glu_act act, const struct tern_moe_io *io)
{
    struct tk_moe_args a = {0};
    a.T = io->x->shape[0];
    a.k = io->ids->n_dims == 2 ? (int)io->ids->shape[1] : 0;
    a.E = w->n_experts;
    a.H = w->hidden;
    a.I = w->intermediate;
    bool ok = moe_w(&w->gate_up, (int64_t)a.E * 2 * a.I, a.H, &a.gate_up) &&
              moe_w(&w->down, (int64_t)a.E * a.H, a.I, &a.down);
    const struct tern_dtensor *fl[] = {io->x, io->act, io->out, io->shared};
    for (int i = 0; i < 4; i++) ok = ok && (!fl[i] || float_dt(fl[i]->dtype));
    if (!ok || a.k < 1 || a.k > 32 || io->ids->dtype != TERN_DTYPE_I32 ||
        io->weights->dtype != TERN_DTYPE_F32 || io->x->shape[1] != a.H ||
        (int64_t)tern_dtensor_numel(io->out) < a.T * a.H ||
        (int64_t)tern_dtensor_numel(io->weights) < a.T * a.k ||
        (int64_t)tern_dtensor_numel(io->act) < a.T * a.k * a.I ||
        (io->shared && (int64_t)tern_dtensor_numel(io->shared) < a.T * a.H) ||
        (io->shared_gate && io->shared_gate->dtype != TERN_DTYPE_F32))
        return tern_error(TERN_E_INVALID_ARG, "cuda moe_experts: operands do not fit %d experts "
                          "of [%lld, %lld] (dense or MLX affine stacks, k <= 32, float activations)",
                          a.E, (long long)a.I, (long long)a.H);
    a.x = tern_cuda_ptr(io->x);
    a.xdt = (int)io->x->dtype;
    a.ids = tern_cuda_ptr(io->ids);
    a.weights = tern_cuda_ptr(io->weights);
    a.act = act == TERN_GLU_SILU ? TK_GLU_SILU : TK_GLU_GELU_TANH;
    a.act_buf = tern_cuda_ptr(io->act);
    a.adt = (int)io->act->dtype;
    a.shared = io->shared ? tern_cuda_ptr(io->shared) : NULL;
    a.shdt = io->shared ? (int)io->shared->dtype : 0;
    a.shared_gate = io->shared && io->shared_gate ? tern_cuda_ptr(io->shared_gate) : NULL;
    a.out = tern_cuda_ptr(io->out);
    a.odt = (int)io->out->dtype;
    return done(tk_moe_experts(tern_cuda_of(be)->stream, &a), "tk_moe_experts");
}
