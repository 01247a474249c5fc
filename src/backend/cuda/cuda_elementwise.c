/*
 * cuda_elementwise.c — operand checks and launches of the elementwise ops
 * the non-llama blocks need (backend.h act_mul, scale, softcap, layernorm; kernels in
 * cuda_elementwise.cu). Depends on cuda_internal.h.
 */
#include "backend/cuda/cuda_internal.h"

static bool act_dt(enum tern_dtype dt)
{
    return dt == TERN_DTYPE_F32 || dt == TERN_DTYPE_BF16;
}

static enum tern_status done(cudaError_t e, const char *op)
{
    if (e == cudaSuccess) return TERN_OK;
    (void)cudaGetLastError();
    return tern_cuda_fail(op, (int)e, __FILE__, __LINE__);
}

static int64_t width_of(const struct tern_dtensor *t)
{
    return t->shape[0] ? (int64_t)tern_dtensor_numel(t) / t->shape[0] : 0;
}

enum tern_status tern_cuda_act_mul(struct tern_backend *be, const struct tern_dtensor *x,
                                   int64_t x_col, const struct tern_dtensor *y, int64_t y_col,
                                   enum tern_glu_act act, struct tern_dtensor *out)
{
    int64_t T = out->shape[0], n = width_of(out), xw = width_of(x), yw = y ? width_of(y) : 0;
    if (!act_dt(x->dtype) || !act_dt(out->dtype) || x->shape[0] < T || x_col < 0 ||
        x_col + n > xw ||
        (y && (!act_dt(y->dtype) || y->shape[0] < T || y_col < 0 || y_col + n > yw)))
        return tern_error(TERN_E_INVALID_ARG, "cuda act_mul: F32/BF16 operands whose column "
                          "windows [%lld, +%lld) and [%lld, +%lld) fit rows of %lld and %lld",
                          (long long)x_col, (long long)n, (long long)y_col, (long long)n,
                          (long long)xw, (long long)yw);
    return done(tk_act_mul(tern_cuda_of(be)->stream, tern_cuda_ptr(x), (int)x->dtype, xw, x_col,
                           y ? tern_cuda_ptr(y) : NULL, y ? (int)y->dtype : 0, yw, y_col,
                           tern_cuda_ptr(out),
                           (int)out->dtype, T, n,
                           act == TERN_GLU_SILU ? TK_GLU_SILU : TK_GLU_GELU_TANH),
                "tk_act_mul");
}

enum tern_status tern_cuda_scale(struct tern_backend *be, const struct tern_dtensor *x, float c,
                                 const struct tern_dtensor *s, struct tern_dtensor *out)
{
    int64_t n = (int64_t)tern_dtensor_numel(x);
    bool s_ok = !s || (tern_dtensor_numel(s) >= 1 &&
                       (s->dtype == TERN_DTYPE_F32 || s->dtype == TERN_DTYPE_BF16 ||
                        s->dtype == TERN_DTYPE_F16));
    if (!act_dt(x->dtype) || !act_dt(out->dtype) || (int64_t)tern_dtensor_numel(out) != n || !s_ok)
        return tern_error(TERN_E_INVALID_ARG, "cuda scale: x and out F32/BF16 of one size, s a "
                          "float [1]");
    return done(tk_scale(tern_cuda_of(be)->stream, tern_cuda_ptr(x), (int)x->dtype, c,
                         s ? tern_cuda_ptr(s) : NULL, s ? (int)s->dtype : 0, tern_cuda_ptr(out),
                         (int)out->dtype, n),
                "tk_scale");
}

/* Float weights of dim elements, or none. */
static bool vec_ok(const struct tern_dtensor *v, int64_t dim)
{
    return !v || ((v->dtype == TERN_DTYPE_F32 || v->dtype == TERN_DTYPE_BF16 ||
                   v->dtype == TERN_DTYPE_F16) &&
                  (int64_t)tern_dtensor_numel(v) == dim);
}

enum tern_status tern_cuda_layernorm(struct tern_backend *be, const struct tern_dtensor *x,
                                     const struct tern_dtensor *w, const struct tern_dtensor *b,
                                     float eps, struct tern_dtensor *out)
{
    int64_t dim = x->shape[x->n_dims - 1], n = (int64_t)tern_dtensor_numel(x);
    if (!act_dt(x->dtype) || !act_dt(out->dtype) || dim < 1 || n % dim ||
        (int64_t)tern_dtensor_numel(out) != n || !vec_ok(w, dim) || !vec_ok(b, dim))
        return tern_error(TERN_E_INVALID_ARG, "cuda layernorm: x and out F32/BF16 of whole rows, "
                          "w and b float [%lld] or none", (long long)dim);
    return done(tk_layernorm(tern_cuda_of(be)->stream, tern_cuda_ptr(x), (int)x->dtype,
                             tern_cuda_ptr(out), (int)out->dtype, n / dim, dim,
                             w ? tern_cuda_ptr(w) : NULL, w ? (int)w->dtype : 0,
                             b ? tern_cuda_ptr(b) : NULL, b ? (int)b->dtype : 0, eps),
                "tk_layernorm");
}

enum tern_status tern_cuda_softcap(struct tern_backend *be, struct tern_dtensor *x, float cap)
{
    if (x->dtype != TERN_DTYPE_F32 || !(cap > 0))
        return tern_error(TERN_E_INVALID_ARG, "cuda softcap: x must be F32 and cap positive");
    return done(tk_softcap(tern_cuda_of(be)->stream, tern_cuda_ptr(x), cap,
                           (int64_t)tern_dtensor_numel(x)),
                "tk_softcap");
}
