/*
 * cuda_matmul.c — y[:, y_col : y_col + out] = x W^T (+ bias) on the device.
 *
 * Which kernel:
 *   default mode      T <= TERN_CUDA_GEMV_MAX_T rows: the GEMV kernel
 *                     (cuda_gemv.cu), which streams W once at full bandwidth;
 *                     more rows: cuBLASLt, BF16 in, float32 accumulate, the
 *                     algorithm picked by heuristic then by timing the best
 *                     few (once per shape bucket, never while capturing a
 *                     graph) and cached in the context.
 *   deterministic     cuBLASLt for every T with one algorithm per (in, out,
 *                     dtypes), split-K 1, chosen once from a fixed reference
 *                     shape: the same kernel and reduction order for every
 *                     batch, so a row's result does not depend on the others.
 *   other dtypes      (F32/F16 weights, odd sizes) the exact generic GEMV.
 *   quantized w       (MLX affine) cuda_quant.c: the same split, with a GEMV
 *                     that dequantizes in registers and a BF16 dequantized
 *                     copy of w feeding cuBLASLt (tern_cuda_lt_bf16 below).
 *
 * Row-major y = x W^T is, in cuBLAS's column-major terms, C[out, T] =
 * op(A)[out, in] * B[in, T] with A = W viewed as [in, out] (ld in, op T),
 * B = x viewed as [in, T] (ld = x's row length), C = y viewed as [out, T]
 * with ldc = y's full width, so a column slice of y is a plain offset.
 * The bias rides in the epilogue when its dtype matches y's.
 * Depends on cuda_internal.h.
 */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_quant.h"

#include <string.h>

/* The n used to choose the single deterministic-mode algorithm. */
#define DET_REF_N 1024
#define TUNE_CANDIDATES 4
#define TUNE_REPS 3

static int ptr_align(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    int a = 256;
    while (a > 2 && u % (uintptr_t)a) a >>= 1;
    return a;
}

static int64_t n_bucket(int64_t T)
{
    if (T <= 64) return T;
    if (T <= 1024) return (T + 63) / 64 * 64;
    int64_t b = 1024;
    while (b < T) b <<= 1;
    return b;
}

static cudaDataType_t lt_type(enum tern_dtype dt)
{
    return dt == TERN_DTYPE_F32 ? CUDA_R_32F : dt == TERN_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* The operands of one product, as cuBLASLt sees them. */
struct lt_call {
    const void *x, *w, *bias;
    void *y;
    int64_t T, in, out, xs, ys;
    enum tern_dtype ydt;
    int bias_dt; /* -1: bias not in the epilogue */
    cublasLtMatmulDescOpaque_t desc;
    cublasLtMatrixLayoutOpaque_t la, lb, lc;
};

static enum tern_status lt_describe(struct lt_call *k, int64_t n)
{
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    TERN_LT(cublasLtMatmulDescInit(&k->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    TERN_LT(cublasLtMatmulDescSetAttribute(&k->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    TERN_LT(cublasLtMatmulDescSetAttribute(&k->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (k->bias_dt >= 0) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        TERN_LT(cublasLtMatmulDescSetAttribute(&k->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                               sizeof epi));
        TERN_LT(cublasLtMatmulDescSetAttribute(&k->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                               &k->bias, sizeof k->bias));
    }
    TERN_LT(cublasLtMatrixLayoutInit(&k->la, CUDA_R_16BF, (uint64_t)k->in, (uint64_t)k->out, k->in));
    TERN_LT(cublasLtMatrixLayoutInit(&k->lb, CUDA_R_16BF, (uint64_t)k->in, (uint64_t)n, k->xs));
    TERN_LT(cublasLtMatrixLayoutInit(&k->lc, lt_type(k->ydt), (uint64_t)k->out, (uint64_t)n, k->ys));
    return TERN_OK;
}

static enum tern_status lt_run(struct tern_cuda *c, struct lt_call *k,
                               const cublasLtMatmulAlgo_t *algo)
{
    float one = 1.0f, zero = 0.0f;
    TERN_LT(cublasLtMatmul(c->lt, &k->desc, &one, k->w, &k->la, k->x, &k->lb, &zero, k->y, &k->lc,
                           k->y, &k->lc, algo, c->lt_ws, TERN_CUDA_LT_WS_BYTES, c->stream));
    return TERN_OK;
}

static int splitk_of(const cublasLtMatmulAlgo_t *algo)
{
    uint32_t s = 1;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof s,
                                             &got) != CUBLAS_STATUS_SUCCESS)
        return 1;
    return (int)s;
}

/* Times each candidate (TUNE_REPS runs after one warm-up) and returns the fastest. */
static enum tern_status lt_tune(struct tern_cuda *c, struct lt_call *k,
                                const cublasLtMatmulHeuristicResult_t *res, int n_res, int *best)
{
    float best_ms = 1e30f;
    *best = 0;
    for (int i = 0; i < n_res && i < TUNE_CANDIDATES; i++) {
        if (lt_run(c, k, &res[i].algo) != TERN_OK) {
            tern_error_clear();
            continue;
        }
        TERN_CU(cudaEventRecord(c->ev0, c->stream));
        for (int r = 0; r < TUNE_REPS; r++) TERN_TRY(lt_run(c, k, &res[i].algo));
        TERN_CU(cudaEventRecord(c->ev1, c->stream));
        TERN_CU(cudaEventSynchronize(c->ev1));
        float ms = 0.0f;
        TERN_CU(cudaEventElapsedTime(&ms, c->ev0, c->ev1));
        if (ms < best_ms) {
            best_ms = ms;
            *best = i;
        }
    }
    return TERN_OK;
}

static enum tern_status lt_choose(struct tern_cuda *c, struct lt_call *k, int align,
                                  cublasLtMatmulAlgo_t *out)
{
    bool det = c->base.deterministic;
    cublasLtMatmulPreferenceOpaque_t pref;
    size_t ws = TERN_CUDA_LT_WS_BYTES;
    uint32_t al = (uint32_t)align;
    TERN_LT(cublasLtMatmulPreferenceInit(&pref));
    TERN_LT(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws));
    cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        TERN_LT(cublasLtMatmulPreferenceSetAttribute(&pref, al_attr[i], &al, sizeof al));
    if (det) TERN_TRY(lt_describe(k, DET_REF_N));
    cublasLtMatmulHeuristicResult_t res[8];
    int n_res = 0;
    TERN_LT(cublasLtMatmulAlgoGetHeuristic(c->lt, &k->desc, &k->la, &k->lb, &k->lc, &k->lc, &pref,
                                           8, res, &n_res));
    if (det) TERN_TRY(lt_describe(k, k->T));
    int pick = -1;
    if (det) {
        for (int i = 0; i < n_res && pick < 0; i++)
            if (splitk_of(&res[i].algo) == 1) pick = i;
    } else if (n_res > 0) {
        enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        TERN_CU(cudaStreamIsCapturing(c->stream, &cap));
        pick = 0;
        if (cap == cudaStreamCaptureStatusNone && n_res > 1) TERN_TRY(lt_tune(c, k, res, n_res, &pick));
    }
    if (pick < 0)
        return tern_error(TERN_E_UNSUPPORTED,
                          "cuda matmul: cuBLASLt has no algorithm for [%lld, %lld] x [%lld, %lld]^T",
                          (long long)k->T, (long long)k->in, (long long)k->out, (long long)k->in);
    *out = res[pick].algo;
    return TERN_OK;
}

static struct tern_cuda_plan *plan_find(struct tern_cuda *c, const struct tern_cuda_plan *key)
{
    for (int i = 0; i < c->n_plans; i++) {
        struct tern_cuda_plan *p = &c->plans[i];
        if (p->m == key->m && p->n_key == key->n_key && p->k == key->k && p->ldb == key->ldb &&
            p->ldc == key->ldc && p->ydt == key->ydt && p->bias_dt == key->bias_dt &&
            p->align == key->align)
            return p;
    }
    return NULL;
}

static enum tern_status lt_matmul(struct tern_cuda *c, struct lt_call *k)
{
    int align = ptr_align(k->x);
    int aw = ptr_align(k->w), ay = ptr_align(k->y);
    align = aw < align ? aw : align;
    align = ay < align ? ay : align;
    bool det = c->base.deterministic;
    struct tern_cuda_plan key = {.m = k->out, .n_key = det ? 0 : n_bucket(k->T), .k = k->in,
                                 .ldb = k->xs, .ldc = k->ys, .ydt = (int)k->ydt,
                                 .bias_dt = k->bias_dt, .align = align};
    TERN_TRY(lt_describe(k, k->T));
    struct tern_cuda_plan *p = plan_find(c, &key);
    if (!p) {
        TERN_TRY(lt_choose(c, k, align, &key.algo));
        int slot = c->n_plans < TERN_CUDA_MAX_PLANS ? c->n_plans++ : c->next_plan++;
        c->next_plan %= TERN_CUDA_MAX_PLANS;
        c->plans[slot] = key;
        p = &c->plans[slot];
    }
    if (det) {
        cublasLtMatmulHeuristicResult_t chk;
        if (cublasLtMatmulAlgoCheck(c->lt, &k->desc, &k->la, &k->lb, &k->lc, &k->lc, &p->algo,
                                    &chk) != CUBLAS_STATUS_SUCCESS)
            return tern_error(TERN_E_UNSUPPORTED,
                              "cuda matmul: the deterministic algorithm for in=%lld out=%lld does "
                              "not take %lld rows",
                              (long long)k->in, (long long)k->out, (long long)k->T);
    }
    return lt_run(c, k, &p->algo);
}

static enum tern_status check_operands(const struct tern_dtensor *x, const struct tern_linear *w,
                                       const struct tern_dtensor *y, int64_t y_col)
{
    const struct tern_dtensor *W = &w->weight;
    int64_t w_cols = w->bits ? w->in_features * w->bits / 32 : w->in_features;
    bool ok = W->buf && W->n_dims == 2 && W->shape[0] == w->out_features && W->shape[1] == w_cols &&
              x->n_dims >= 1 && y->n_dims >= 1 && x->shape[0] == y->shape[0] &&
              (!w->bits || (W->dtype == TERN_DTYPE_U32 && w->scales.buf && w->biases.buf));
    if (!ok)
        return tern_error(TERN_E_INVALID_ARG,
                          "cuda matmul: weight must be [out, in] and x, y have the same rows");
    int64_t T = x->shape[0];
    int64_t xw = T ? (int64_t)tern_dtensor_numel(x) / T : 0;
    int64_t yw = T ? (int64_t)tern_dtensor_numel(y) / T : 0;
    if (T && (xw != w->in_features || y_col < 0 || y_col + w->out_features > yw))
        return tern_error(TERN_E_INVALID_ARG,
                          "cuda matmul: x rows of %lld for in=%lld, y rows of %lld for columns "
                          "[%lld, %lld)",
                          (long long)xw, (long long)w->in_features, (long long)yw,
                          (long long)y_col, (long long)(y_col + w->out_features));
    bool fl = (x->dtype == TERN_DTYPE_F32 || x->dtype == TERN_DTYPE_BF16) &&
              (y->dtype == TERN_DTYPE_F32 || y->dtype == TERN_DTYPE_BF16) &&
              (W->dtype == TERN_DTYPE_F32 || W->dtype == TERN_DTYPE_F16 ||
               W->dtype == TERN_DTYPE_BF16 || w->bits);
    if (!fl)
        return tern_error(TERN_E_UNSUPPORTED, "cuda matmul: x %s, weight %s, y %s not supported",
                          tern_dtype_name(x->dtype), tern_dtype_name(W->dtype),
                          tern_dtype_name(y->dtype));
    return TERN_OK;
}

enum tern_status tern_cuda_matmul(struct tern_backend *be, const struct tern_dtensor *x,
                                  const struct tern_linear *w, struct tern_dtensor *y,
                                  int64_t y_col)
{
    struct tern_cuda *c = tern_cuda_of(be);
    TERN_TRY(check_operands(x, w, y, y_col));
    int64_t T = x->shape[0];
    if (T == 0) return TERN_OK;
    int64_t in = w->in_features, out = w->out_features;
    int64_t ys = (int64_t)tern_dtensor_numel(y) / T;
    const void *bias = w->bias.buf ? tern_cuda_ptr(&w->bias) : NULL;
    int bdt = bias ? (int)w->bias.dtype : 0;
    void *yp = (char *)tern_cuda_ptr(y) + (size_t)y_col * tern_dtype_size(y->dtype);
    if (w->bits) return tern_cuda_matmul_quant(c, x, w, yp, (int)y->dtype, ys);
    const void *xp = tern_cuda_ptr(x), *wp = tern_cuda_ptr(&w->weight);
    bool bf = x->dtype == TERN_DTYPE_BF16 && w->weight.dtype == TERN_DTYPE_BF16;
    bool lt = bf && in % 8 == 0 && (be->deterministic || T > TERN_CUDA_GEMV_MAX_T);
    if (!lt) {
        cudaError_t e = tk_gemv(c->stream, xp, (int)x->dtype, in, wp, (int)w->weight.dtype, bias,
                                bdt, yp, (int)y->dtype, ys, T, in, out);
        if (e != cudaSuccess) return tern_cuda_fail("tk_gemv", (int)e, __FILE__, __LINE__);
        return TERN_OK;
    }
    struct lt_call k = {.x = xp, .w = wp, .bias = bias, .y = yp, .T = T, .in = in, .out = out,
                        .xs = in, .ys = ys, .ydt = y->dtype,
                        .bias_dt = bias && bdt == (int)y->dtype ? bdt : -1};
    TERN_TRY(lt_matmul(c, &k));
    if (bias && k.bias_dt < 0) {
        cudaError_t e = tk_bias_add(c->stream, yp, (int)y->dtype, ys, bias, bdt, T, out);
        if (e != cudaSuccess) return tern_cuda_fail("tk_bias_add", (int)e, __FILE__, __LINE__);
    }
    return TERN_OK;
}

/* The GLU GEMV (silu_mul in the gate/up GEMV's epilogue) where the plain
 * path would take the fast GEMV; else matmul into gate_up, then silu_mul.
 * Both give the same bits (tk_gemv_glu), so the choice, which depends on
 * T, does not make a row depend on the batch. */
enum tern_status tern_cuda_matmul_glu(struct tern_backend *be, const struct tern_dtensor *x,
                                      const struct tern_linear *w, struct tern_dtensor *gate_up,
                                      struct tern_dtensor *act)
{
    struct tern_cuda *c = tern_cuda_of(be);
    TERN_TRY(check_operands(x, w, gate_up, 0));
    int64_t T = x->shape[0], in = w->in_features, ff = w->out_features / 2;
    if (T == 0) return TERN_OK;
    int64_t as = (int64_t)tern_dtensor_numel(act) / T;
    const void *xp = tern_cuda_ptr(x), *wp = tern_cuda_ptr(&w->weight);
    bool fused = !w->bits && !be->deterministic && T <= TERN_CUDA_GEMV_MAX_T &&
                 w->out_features % 2 == 0 && act->dtype == TERN_DTYPE_BF16 &&
                 gate_up->dtype == TERN_DTYPE_BF16 && act->shape[0] == T && as == ff &&
                 tk_gemv_fast(xp, (int)x->dtype, in, wp, (int)w->weight.dtype, in);
    if (w->bits && act->dtype == TERN_DTYPE_BF16 && gate_up->dtype == TERN_DTYPE_BF16 &&
        act->shape[0] == T && as == ff) {
        /* quantized: the GLU variant of the tensor-core GEMV where matmul would take it, bitwise */
        bool done = false;
        TERN_TRY(tern_cuda_matmul_glu_quant(c, x, w, tern_cuda_ptr(act), as, &done));
        if (done) return TERN_OK;
    }
    if (!fused) {
        TERN_TRY(tern_cuda_matmul(be, x, w, gate_up, 0));
        return be->ops->silu_mul(be, gate_up, act);
    }
    const void *bias = w->bias.buf ? tern_cuda_ptr(&w->bias) : NULL;
    cudaError_t e = tk_gemv_glu(c->stream, xp, in, wp, bias, bias ? (int)w->bias.dtype : 0,
                                tern_cuda_ptr(act), as, T, in, ff);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return tern_cuda_fail("tk_gemv_glu", (int)e, __FILE__, __LINE__);
    }
    return TERN_OK;
}

/* The 4-bit fused qkv GEMV with the rotation and cache stores in its
 * epilogue where it applies (never in deterministic mode); otherwise
 * matmul, then qk_rope_store: the same bits either way (test_quant_cuda
 * test_rope_store). */
enum tern_status tern_cuda_matmul_rope_store(struct tern_backend *be, const struct tern_dtensor *x,
                                             const struct tern_linear *w, struct tern_dtensor *qkv,
                                             const struct tern_rope *rope,
                                             const struct tern_attn_params *p,
                                             const struct tern_batch_dev *batch,
                                             struct tern_kv_layer *kv)
{
    TERN_TRY(check_operands(x, w, qkv, 0));
    if (x->shape[0] == 0) return TERN_OK;
    if (w->bits && !be->deterministic) {
        bool done = false;
        TERN_TRY(tern_cuda_matmul_rope_quant(tern_cuda_of(be), x, w, qkv, rope, p, batch, kv,
                                             &done));
        if (done) return TERN_OK;
    }
    TERN_TRY(tern_cuda_matmul(be, x, w, qkv, 0));
    return be->ops->qk_rope_store(be, qkv, NULL, NULL, 0.0f, rope, p, batch, kv);
}

enum tern_status tern_cuda_lt_bf16(struct tern_cuda *c, const void *x, int64_t xs, const void *w,
                                   const void *bias, int bdt, void *y, int ydt, int64_t ys,
                                   int64_t T, int64_t in, int64_t out)
{
    struct lt_call k = {.x = x, .w = w, .bias = bias, .y = y, .T = T, .in = in, .out = out,
                        .xs = xs, .ys = ys, .ydt = (enum tern_dtype)ydt,
                        .bias_dt = bias && bdt == ydt ? bdt : -1};
    TERN_TRY(lt_matmul(c, &k));
    if (bias && k.bias_dt < 0) {
        cudaError_t e = tk_bias_add(c->stream, y, ydt, ys, bias, bdt, T, out);
        if (e != cudaSuccess) return tern_cuda_fail("tk_bias_add", (int)e, __FILE__, __LINE__);
    }
    return TERN_OK;
}
