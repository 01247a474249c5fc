/*
 * cuda_internal.h — the CUDA backend's private state, shared by its C glue
 * files (cuda.c: context, memory, row ops; cuda_matmul.c: cuBLASLt + GEMV
 * dispatch; cuda_attn.c: attention dispatch). Kernels live in the *.cu files
 * behind cuda_kernels.h. Depends on backend/, the CUDA runtime and cuBLASLt.
 *
 * Everything the backend touches on the device is owned by one
 * struct tern_cuda: no global state. Device memory taken at creation:
 *   lt_ws    cuBLASLt workspace             TERN_CUDA_LT_WS_BYTES
 *   attn_ws  split-KV decode partials       TERN_CUDA_ATTN_WS_BYTES
 * plus pinned host staging for weight uploads (TERN_CUDA_STAGES chunks) and
 * a ring of small pinned slots for per-step uploads (TERN_CUDA_UP_SLOTS).
 * Ops allocate nothing, never synchronise and copy no host data, so a decode
 * step can be captured into a CUDA graph.
 *
 * What the two modes guarantee:
 *   deterministic  batch invariance: a sequence's outputs are bitwise the
 *                  same alone or inside any batch (one cuBLASLt algorithm per
 *                  weight shape for every T, no split-K; fixed 256-position
 *                  decode splits; the attention kernel is picked per
 *                  sequence), and so run-to-run reproducibility.
 *   default        the same batch on the same context gives bitwise the same
 *                  result (no atomics; algorithms are cached per context).
 *                  Not batch-invariant (GEMV for T <= 8, cuBLASLt above;
 *                  decode splits sized to the batch), and a new process may
 *                  time a different cuBLASLt algorithm, so results can differ
 *                  in the last bits between processes.
 */
#ifndef TERN_BACKEND_CUDA_INTERNAL_H
#define TERN_BACKEND_CUDA_INTERNAL_H

#include "backend/backend.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_kernels.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#define TERN_CUDA_LT_WS_BYTES ((size_t)32 << 20)
#define TERN_CUDA_ATTN_WS_BYTES ((size_t)128 << 20)
#define TERN_CUDA_ONES 8192 /* the longest row a norm without weight takes */
#define TERN_CUDA_STAGES 4
#define TERN_CUDA_STAGE_BYTES ((size_t)16 << 20)
#define TERN_CUDA_UP_SLOTS 4
#define TERN_CUDA_UP_BYTES ((size_t)4 << 20)
#define TERN_CUDA_MAX_PLANS 256
/* Rows up to which matmul uses the GEMV kernel (default mode). */
#define TERN_CUDA_GEMV_MAX_T 8
/* KV positions per decode split in deterministic mode (fixed: batch-invariant). */
#define TERN_CUDA_DET_SPLIT 256

struct tern_buf {
    void *ptr;
    size_t n_bytes;
};

/* One cached cuBLASLt choice. */
struct tern_cuda_plan {
    int64_t m, n_key, k, ldb, ldc;
    int ydt, bias_dt; /* bias_dt -1: no epilogue bias */
    int align;        /* min pointer alignment in bytes */
    cublasLtMatmulAlgo_t algo;
};

struct tern_cuda {
    struct tern_backend base;
    struct tern_backend_ops ops; /* base.ops: cuda.c's table (TERN_CUDA_STEP=0: no step op) */
    int device;
    int n_sm;
    cudaStream_t stream;      /* every op runs here */
    cudaStream_t copy_stream; /* weight uploads */
    cublasLtHandle_t lt;
    void *lt_ws;
    float *attn_ws;
    float *ones;              /* [TERN_CUDA_ONES] 1.0f: the weight of a norm without one */
    void *stage[TERN_CUDA_STAGES];
    cudaEvent_t stage_ev[TERN_CUDA_STAGES];
    void *up[TERN_CUDA_UP_SLOTS]; /* pinned slots for small uploads (cu_upload) */
    cudaEvent_t up_ev[TERN_CUDA_UP_SLOTS];
    int up_next;
    cudaEvent_t ev0, ev1; /* for algorithm timing */
    struct tern_cuda_plan plans[TERN_CUDA_MAX_PLANS];
    int n_plans, next_plan;
};

/* The device last made current on this thread by tern_cuda_of (-1: none). */
extern _Thread_local int tern_cuda_thread_device;

/* The backend's context, with its device made current on the calling thread:
 * every op and memory call starts here, so the backend works from any thread
 * (the engine's step loop runs on its own). cudaSetDevice runs only when the
 * thread's device changes. */
static inline struct tern_cuda *tern_cuda_of(struct tern_backend *be)
{
    struct tern_cuda *c = (struct tern_cuda *)be;
    if (tern_cuda_thread_device != c->device && cudaSetDevice(c->device) == cudaSuccess)
        tern_cuda_thread_device = c->device;
    return c;
}

static inline void *tern_cuda_ptr(const struct tern_dtensor *t)
{
    return t->buf ? (char *)t->buf->ptr + t->offset : NULL;
}

/* Records TERN_E_DEVICE naming the call, file and line; returns it. */
enum tern_status tern_cuda_fail(const char *call, int err, const char *file, int line);
enum tern_status tern_cuda_lt_fail(const char *call, int err, const char *file, int line);

#define TERN_CU(call)                                                                              \
    do {                                                                                           \
        cudaError_t tern_cu_e_ = (call);                                                           \
        if (tern_cu_e_ != cudaSuccess)                                                             \
            return tern_cuda_fail(#call, (int)tern_cu_e_, __FILE__, __LINE__);                    \
    } while (0)

#define TERN_LT(call)                                                                              \
    do {                                                                                           \
        cublasStatus_t tern_lt_e_ = (call);                                                        \
        if (tern_lt_e_ != CUBLAS_STATUS_SUCCESS)                                                   \
            return tern_cuda_lt_fail(#call, (int)tern_lt_e_, __FILE__, __LINE__);                 \
    } while (0)

/* Op entry points (each checks its operands and returns a status). */
enum tern_status tern_cuda_matmul(struct tern_backend *be, const struct tern_dtensor *x,
                                  const struct tern_linear *w, struct tern_dtensor *y,
                                  int64_t y_col);
enum tern_status tern_cuda_attention(struct tern_backend *be, const struct tern_dtensor *qkv,
                                     const struct tern_kv_layer *kv,
                                     const struct tern_batch_dev *batch,
                                     const struct tern_attn_params *p, struct tern_dtensor *out);
enum tern_status tern_cuda_kv_store(struct tern_backend *be, const struct tern_dtensor *qkv,
                                    int64_t k_col, int64_t v_col,
                                    const struct tern_batch_dev *batch, struct tern_kv_layer *kv);
/* cuda_elementwise.c: act_mul, scale, softcap, layernorm (backend.h). */
enum tern_status tern_cuda_act_mul(struct tern_backend *be, const struct tern_dtensor *x,
                                   int64_t x_col, const struct tern_dtensor *y, int64_t y_col,
                                   enum tern_glu_act act, struct tern_dtensor *out);
enum tern_status tern_cuda_scale(struct tern_backend *be, const struct tern_dtensor *x, float c,
                                 const struct tern_dtensor *s, struct tern_dtensor *out);
enum tern_status tern_cuda_softcap(struct tern_backend *be, struct tern_dtensor *x, float cap);
enum tern_status tern_cuda_layernorm(struct tern_backend *be, const struct tern_dtensor *x,
                                     const struct tern_dtensor *w, const struct tern_dtensor *b,
                                     float eps, struct tern_dtensor *out);
/* cuda_moe.c: moe_route, moe_experts (backend.h). */
enum tern_status tern_cuda_moe_route(struct tern_backend *be, const struct tern_dtensor *logits,
                                     int32_t top_k, bool renorm,
                                     const struct tern_dtensor *expert_scale,
                                     struct tern_dtensor *ids, struct tern_dtensor *weights);
enum tern_status tern_cuda_moe_experts(struct tern_backend *be, const struct tern_experts *w,
                                       enum tern_glu_act act, const struct tern_moe_io *io);
/* The decode step as one kernel (cuda_step.c). */
enum tern_status tern_cuda_step_prepare(struct tern_backend *be, const struct tern_step_desc *d,
                                        struct tern_step_plan **out);
enum tern_status tern_cuda_step_run(struct tern_backend *be, struct tern_step_plan *p,
                                    struct tern_dtensor *residual,
                                    const struct tern_batch_dev *batch, struct tern_kv_layer *kv,
                                    struct tern_dtensor *logits, struct tern_dtensor *ids,
                                    struct tern_dtensor *ids_at);
void tern_cuda_step_free(struct tern_backend *be, struct tern_step_plan *p);
/* Whether tk_qk_rope_store takes these operands (cuda_attn.c). */
bool tern_cuda_qkr_fits(const struct tern_dtensor *qkv, const struct tern_dtensor *q_norm,
                        const struct tern_dtensor *k_norm, const struct tern_rope *rope,
                        const struct tern_attn_params *p, const struct tern_batch_dev *batch,
                        const struct tern_kv_layer *kv);
enum tern_status
tern_cuda_qk_rope_store(struct tern_backend *be, struct tern_dtensor *qkv,
                        const struct tern_dtensor *q_norm, const struct tern_dtensor *k_norm,
                        float eps, const struct tern_rope *rope, const struct tern_attn_params *p,
                        const struct tern_batch_dev *batch, struct tern_kv_layer *kv);
enum tern_status tern_cuda_matmul_rope_store(struct tern_backend *be, const struct tern_dtensor *x,
                                             const struct tern_linear *w, struct tern_dtensor *qkv,
                                             const struct tern_rope *rope,
                                             const struct tern_attn_params *p,
                                             const struct tern_batch_dev *batch,
                                             struct tern_kv_layer *kv);
enum tern_status tern_cuda_matmul_glu(struct tern_backend *be, const struct tern_dtensor *x,
                                      const struct tern_linear *w, struct tern_dtensor *gate_up,
                                      struct tern_dtensor *act);

#endif /* TERN_BACKEND_CUDA_INTERNAL_H */
