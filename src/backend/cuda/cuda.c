/*
 * cuda.c — the CUDA backend: context creation, device memory, uploads, and
 * the glue of the row and elementwise ops (operand checks, then a launcher
 * from cuda_kernels.h). Matmul is in cuda_matmul.c, attention and the KV
 * store in cuda_attn.c, kernels in *.cu.
 *
 * Activations and KV are BF16 here; ops also accept F32 activations where
 * that costs nothing (tests, logits). Any thread may call in: every entry
 * makes the backend's device current on it (tern_cuda_of).
 * Depends on backend/, the CUDA runtime and cuBLASLt.
 */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_quant.h"

#include <stdlib.h>
#include <string.h>

_Static_assert((int)TERN_DTYPE_F32 == (int)TK_F32 && (int)TERN_DTYPE_F16 == (int)TK_F16 &&
                   (int)TERN_DTYPE_BF16 == (int)TK_BF16,
               "cuda_kernels.h dtype codes follow enum tern_dtype");

enum tern_status tern_cuda_fail(const char *call, int err, const char *file, int line)
{
    return tern_error(TERN_E_DEVICE, "cuda: %s failed: %s (%s) at %s:%d", call,
                      cudaGetErrorString((cudaError_t)err), cudaGetErrorName((cudaError_t)err),
                      file, line);
}

enum tern_status tern_cuda_lt_fail(const char *call, int err, const char *file, int line)
{
    return tern_error(TERN_E_DEVICE, "cuda: %s failed: %s at %s:%d", call,
                      cublasLtGetStatusString((cublasStatus_t)err), file, line);
}

_Thread_local int tern_cuda_thread_device = -1;

int tern_backend_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: not sticky */
        return 0;
    }
    return n;
}

/* ------------------------------------------------------------ memory */

static enum tern_status dev_malloc(void **p, size_t n_bytes, const char *what)
{
    cudaError_t e = cudaMalloc(p, n_bytes ? n_bytes : 16);
    if (e == cudaSuccess) return TERN_OK;
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    if (e == cudaErrorMemoryAllocation)
        return tern_error(TERN_E_NO_MEMORY,
                          "cuda: out of device memory for %s: needed %zu bytes, %zu of %zu free",
                          what, n_bytes, free_b, total_b);
    return tern_cuda_fail("cudaMalloc", (int)e, __FILE__, __LINE__);
}

static enum tern_status cu_buf_alloc(struct tern_backend *be, size_t n_bytes, struct tern_buf **out)
{
    *out = NULL;
    (void)tern_cuda_of(be); /* device current on this thread */
    struct tern_buf *b = tern_calloc(1, sizeof *b);
    if (!b) return TERN_E_NO_MEMORY;
    enum tern_status st = dev_malloc(&b->ptr, n_bytes, "a buffer");
    if (st != TERN_OK) {
        tern_free(b);
        return st;
    }
    b->n_bytes = n_bytes;
    *out = b;
    return TERN_OK;
}

static void cu_buf_free(struct tern_backend *be, struct tern_buf *b)
{
    if (!b) return;
    (void)tern_cuda_of(be);
    cudaFree(b->ptr);
    tern_free(b);
}

#define PIECE ((size_t)1 << 20)

/* Host -> device through the pinned stages: the CPU fills stage i (faulting
 * in mmapped pages) while the copy engine drains the others. */
static enum tern_status staged_copy(struct tern_cuda *c, void *dst, const void *src, size_t n)
{
    size_t chunk = TERN_CUDA_STAGE_BYTES;
    for (size_t off = 0, i = 0; off < n; off += chunk, i++) {
        int k = (int)(i % TERN_CUDA_STAGES);
        size_t len = n - off < chunk ? n - off : chunk;
        TERN_CU(cudaEventSynchronize(c->stage_ev[k]));
        /* One thread's memcpy tops out near 5 GB/s; page-sized pieces in parallel. */
        const char *from = (const char *)src + off;
        char *to = c->stage[k];
        int64_t n_piece = (int64_t)((len + PIECE - 1) / PIECE);
#pragma omp parallel for schedule(static) if (n_piece > 1)
        for (int64_t p = 0; p < n_piece; p++) {
            size_t o = (size_t)p * PIECE;
            memcpy(to + o, from + o, len - o < PIECE ? len - o : PIECE);
        }
        TERN_CU(cudaMemcpyAsync((char *)dst + off, c->stage[k], len, cudaMemcpyHostToDevice,
                                c->copy_stream));
        TERN_CU(cudaEventRecord(c->stage_ev[k], c->copy_stream));
    }
    TERN_CU(cudaStreamSynchronize(c->copy_stream));
    return TERN_OK;
}

static enum tern_status cu_buf_from_host(struct tern_backend *be, const void *data, size_t n_bytes,
                                         struct tern_buf **out)
{
    TERN_TRY(cu_buf_alloc(be, n_bytes, out));
    enum tern_status st = staged_copy(tern_cuda_of(be), (*out)->ptr, data, n_bytes);
    if (st != TERN_OK) {
        cu_buf_free(be, *out);
        *out = NULL;
    }
    return st;
}

/* Small uploads (the batch arrays of every step) go through a ring of
 * pinned slots: a memcpy into the slot, then an asynchronous copy on the op
 * stream, so the driver neither stages pageable memory nor blocks. A slot is
 * reused only after its previous copy has finished (its event). Larger
 * uploads go through the weight stages (staged_copy) and wait. */
static enum tern_status cu_upload(struct tern_backend *be, const struct tern_dtensor *dst,
                                  const void *src, size_t n_bytes)
{
    struct tern_cuda *c = tern_cuda_of(be);
    if (!dst->buf || dst->offset + n_bytes > dst->buf->n_bytes)
        return tern_error(TERN_E_INTERNAL, "cuda: upload of %zu bytes past buffer end", n_bytes);
    if (n_bytes <= TERN_CUDA_UP_BYTES) {
        int k = c->up_next;
        c->up_next = (k + 1) % TERN_CUDA_UP_SLOTS;
        TERN_CU(cudaEventSynchronize(c->up_ev[k]));
        memcpy(c->up[k], src, n_bytes);
        TERN_CU(cudaMemcpyAsync(tern_cuda_ptr(dst), c->up[k], n_bytes, cudaMemcpyHostToDevice,
                                c->stream));
        TERN_CU(cudaEventRecord(c->up_ev[k], c->stream));
        return TERN_OK;
    }
    /* Large ones (weights uploaded into fused buffers at load) take the pinned
     * stages after the op stream's earlier work: a pageable copy of a 16 GB
     * model's fused q/k/v and gate/up doubled its load time (1.1 -> 2.7 s). */
    TERN_CU(cudaStreamSynchronize(c->stream));
    return staged_copy(c, tern_cuda_ptr(dst), src, n_bytes);
}

static enum tern_status cu_download(struct tern_backend *be, void *dst,
                                    const struct tern_dtensor *src, size_t n_bytes)
{
    struct tern_cuda *c = tern_cuda_of(be);
    if (!src->buf || src->offset + n_bytes > src->buf->n_bytes)
        return tern_error(TERN_E_INTERNAL, "cuda: download of %zu bytes past buffer end", n_bytes);
    TERN_CU(cudaMemcpyAsync(dst, tern_cuda_ptr(src), n_bytes, cudaMemcpyDeviceToHost, c->stream));
    TERN_CU(cudaStreamSynchronize(c->stream));
    return TERN_OK;
}

static enum tern_status cu_copy(struct tern_backend *be, const struct tern_dtensor *dst,
                                const struct tern_dtensor *src, size_t n_bytes)
{
    if (!dst->buf || !src->buf || dst->offset + n_bytes > dst->buf->n_bytes ||
        src->offset + n_bytes > src->buf->n_bytes)
        return tern_error(TERN_E_INTERNAL, "cuda: copy of %zu bytes past buffer end", n_bytes);
    TERN_CU(cudaMemcpyAsync(tern_cuda_ptr(dst), tern_cuda_ptr(src), n_bytes,
                            cudaMemcpyDeviceToDevice, tern_cuda_of(be)->stream));
    return TERN_OK;
}

static enum tern_status cu_mem_info(struct tern_backend *be, size_t *free_bytes, size_t *total)
{
    (void)tern_cuda_of(be);
    TERN_CU(cudaMemGetInfo(free_bytes, total));
    return TERN_OK;
}

static enum tern_status cu_sync(struct tern_backend *be)
{
    TERN_CU(cudaStreamSynchronize(tern_cuda_of(be)->stream));
    return TERN_OK;
}

/* ------------------------------------------------------------ operand checks */

static bool is_float(enum tern_dtype dt)
{
    return dt == TERN_DTYPE_F32 || dt == TERN_DTYPE_F16 || dt == TERN_DTYPE_BF16;
}

static bool is_act(enum tern_dtype dt)
{
    return dt == TERN_DTYPE_F32 || dt == TERN_DTYPE_BF16;
}

static enum tern_status need(bool ok, const char *op, const char *what)
{
    return ok ? TERN_OK : tern_error(TERN_E_INVALID_ARG, "cuda %s: %s", op, what);
}

static enum tern_status launched(cudaError_t e, const char *op)
{
    if (e == cudaSuccess) return TERN_OK;
    (void)cudaGetLastError();
    return tern_cuda_fail(op, (int)e, __FILE__, __LINE__);
}

/* Row count and row width of a [T, width] view (width = numel / T). */
static void rows_width(const struct tern_dtensor *t, int64_t *rows, int64_t *width)
{
    *rows = t->shape[0];
    *width = *rows ? (int64_t)tern_dtensor_numel(t) / *rows : 0;
}

/* ------------------------------------------------------------ row ops */

static enum tern_status cu_get_rows(struct tern_backend *be, const struct tern_linear *table,
                                    const struct tern_dtensor *idx, struct tern_dtensor *out)
{
    const struct tern_dtensor *w = &table->weight;
    if (table->bits != 0) return tern_cuda_get_rows_quant(be, table, idx, out);
    TERN_TRY(need(w->buf && w->n_dims == 2 && is_float(w->dtype), "get_rows",
                  "table must be a dense [rows, width] F32/F16/BF16 tensor"));
    TERN_TRY(need(idx->dtype == TERN_DTYPE_I32 && is_float(out->dtype), "get_rows",
                  "idx must be I32 and out a float tensor"));
    int64_t n = (int64_t)tern_dtensor_numel(idx), width = w->shape[1];
    TERN_TRY(need(table->in_features == width && table->out_features == w->shape[0], "get_rows",
                  "table in/out_features must match its weight's shape"));
    TERN_TRY(need((int64_t)tern_dtensor_numel(out) == n * width, "get_rows",
                  "out must hold [n_idx, width] elements"));
    return launched(tk_get_rows(tern_cuda_of(be)->stream, tern_cuda_ptr(w), (int)w->dtype,
                                w->shape[0], width, tern_cuda_ptr(idx), n, tern_cuda_ptr(out),
                                (int)out->dtype),
                    "tk_get_rows");
}

/* The residual stream may be F32 while the activations are BF16 (more exact
 * sums across layers); these say which dtype pairs the kernels take. */
static bool act_pair(enum tern_dtype wide, enum tern_dtype narrow)
{
    return is_act(wide) && (narrow == wide || (wide == TERN_DTYPE_F32 && narrow == TERN_DTYPE_BF16));
}

/* A norm's weight pointer and dtype: w's, or the backend's ones for a norm
 * without weight (a multiply by 1.0f, so the same values as none). */
static bool norm_w(struct tern_backend *be, const struct tern_dtensor *w, int64_t dim,
                   const void **ptr, int *dt)
{
    if (!w) {
        *ptr = tern_cuda_of(be)->ones;
        *dt = TERN_DTYPE_F32;
        return dim <= TERN_CUDA_ONES;
    }
    *ptr = tern_cuda_ptr(w);
    *dt = (int)w->dtype;
    return is_float(w->dtype) && (int64_t)tern_dtensor_numel(w) == dim;
}

static enum tern_status cu_rmsnorm(struct tern_backend *be, const struct tern_dtensor *x,
                                   const struct tern_dtensor *w, float eps, struct tern_dtensor *out)
{
    int64_t dim = x->shape[x->n_dims - 1], n = (int64_t)tern_dtensor_numel(x);
    const void *wp = NULL;
    int wdt = 0;
    TERN_TRY(need(act_pair(x->dtype, out->dtype) && norm_w(be, w, dim, &wp, &wdt),
                  "rmsnorm", "x and out must be F32/BF16 (the same, or F32 into BF16); w [last "
                  "dim of x]"));
    TERN_TRY(need(dim > 0 && n % dim == 0 && (int64_t)tern_dtensor_numel(out) == n, "rmsnorm",
                  "x and out must hold whole rows of w's length"));
    return launched(tk_rmsnorm(tern_cuda_of(be)->stream, tern_cuda_ptr(x), dim, tern_cuda_ptr(out),
                               dim, 0, (int)x->dtype, (int)out->dtype, n / dim, 1, dim, wp, wdt,
                               eps),
                    "tk_rmsnorm");
}

static enum tern_status cu_add_rmsnorm(struct tern_backend *be, struct tern_dtensor *residual,
                                       const struct tern_dtensor *x, const struct tern_dtensor *w,
                                       float eps, struct tern_dtensor *out)
{
    int64_t dim = x->shape[x->n_dims - 1], n = (int64_t)tern_dtensor_numel(x);
    TERN_TRY(need(is_act(x->dtype) && act_pair(residual->dtype, x->dtype) &&
                      out->dtype == x->dtype && is_float(w->dtype) &&
                      (int64_t)tern_dtensor_numel(w) == dim,
                  "add_rmsnorm", "x and out must share an F32/BF16 dtype, residual it or F32"));
    TERN_TRY(need(dim > 0 && n % dim == 0 && (int64_t)tern_dtensor_numel(residual) == n &&
                      (int64_t)tern_dtensor_numel(out) == n,
                  "add_rmsnorm", "residual, x and out must hold the same whole rows"));
    return launched(tk_add_rmsnorm(tern_cuda_of(be)->stream, tern_cuda_ptr(residual),
                                   (int)residual->dtype, tern_cuda_ptr(x), tern_cuda_ptr(out),
                                   (int)x->dtype, n / dim, dim, tern_cuda_ptr(w), (int)w->dtype,
                                   eps),
                    "tk_add_rmsnorm");
}

static enum tern_status cu_rope(struct tern_backend *be, struct tern_dtensor *x, int64_t x_col,
                                int32_t n_heads, const struct tern_dtensor *positions,
                                const struct tern_rope *rope)
{
    int64_t T, width;
    rows_width(x, &T, &width);
    TERN_TRY(need(is_act(x->dtype) && positions->dtype == TERN_DTYPE_I32 &&
                      rope->inv_freq.dtype == TERN_DTYPE_F32,
                  "rope", "x must be F32/BF16, positions I32, inv_freq F32"));
    TERN_TRY(need(rope->rotary_dim > 0 && rope->rotary_dim % 2 == 0 &&
                      rope->rotary_dim <= rope->head_dim &&
                      x_col + (int64_t)n_heads * rope->head_dim <= width &&
                      (int64_t)tern_dtensor_numel(positions) >= T,
                  "rope", "heads must fit in the row and rotary_dim be even, <= head_dim"));
    return launched(tk_rope(tern_cuda_of(be)->stream, tern_cuda_ptr(x), (int)x->dtype, width, x_col,
                            T, n_heads, rope->head_dim, rope->rotary_dim, rope->interleaved,
                            rope->mscale, tern_cuda_ptr(&rope->inv_freq),
                            tern_cuda_ptr(positions)),
                    "tk_rope");
}

static enum tern_status cu_head_rmsnorm(struct tern_backend *be, struct tern_dtensor *x,
                                        int64_t x_col, int32_t n_heads, int32_t head_dim,
                                        const struct tern_dtensor *w, float eps)
{
    int64_t T, width;
    rows_width(x, &T, &width);
    const void *wp = NULL;
    int wdt = 0;
    TERN_TRY(need(is_act(x->dtype) && norm_w(be, w, head_dim, &wp, &wdt), "head_rmsnorm",
                  "x must be F32/BF16 and w [head_dim] (or none)"));
    TERN_TRY(need(x_col + (int64_t)n_heads * head_dim <= width, "head_rmsnorm",
                  "heads must fit in the row"));
    return launched(tk_rmsnorm(tern_cuda_of(be)->stream, tern_cuda_ptr(x), width, tern_cuda_ptr(x),
                               width, x_col, (int)x->dtype, (int)x->dtype, T, n_heads, head_dim,
                               wp, wdt, eps),
                    "tk_rmsnorm");
}

static enum tern_status cu_silu_mul(struct tern_backend *be, const struct tern_dtensor *gate_up,
                                    struct tern_dtensor *out)
{
    int64_t T, ff2, To, ff;
    rows_width(gate_up, &T, &ff2);
    rows_width(out, &To, &ff);
    TERN_TRY(need(is_act(out->dtype) && gate_up->dtype == out->dtype && T == To && ff2 == 2 * ff,
                  "silu_mul", "gate_up [T, 2ff] and out [T, ff] must share an F32/BF16 dtype"));
    return launched(tk_silu_mul(tern_cuda_of(be)->stream, tern_cuda_ptr(gate_up),
                                tern_cuda_ptr(out), (int)out->dtype, T, ff),
                    "tk_silu_mul");
}

static enum tern_status cu_add(struct tern_backend *be, const struct tern_dtensor *a,
                               const struct tern_dtensor *b, struct tern_dtensor *out)
{
    size_t n = tern_dtensor_numel(a);
    TERN_TRY(need(act_pair(a->dtype, b->dtype) && out->dtype == a->dtype &&
                      tern_dtensor_numel(b) == n && tern_dtensor_numel(out) == n,
                  "add", "a, b and out must share shape and an F32/BF16 dtype (or BF16 b)"));
    return launched(tk_add(tern_cuda_of(be)->stream, tern_cuda_ptr(a), tern_cuda_ptr(b),
                           (int)b->dtype, tern_cuda_ptr(out), (int)a->dtype, (int64_t)n),
                    "tk_add");
}

static enum tern_status cu_argmax(struct tern_backend *be, const struct tern_dtensor *logits,
                                  struct tern_dtensor *out)
{
    int64_t n, vocab;
    rows_width(logits, &n, &vocab);
    TERN_TRY(need(logits->dtype == TERN_DTYPE_F32 && out->dtype == TERN_DTYPE_I32 &&
                      (int64_t)tern_dtensor_numel(out) >= n,
                  "argmax", "logits must be F32 [n, vocab] and out I32 [n]"));
    return launched(tk_argmax(tern_cuda_of(be)->stream, tern_cuda_ptr(logits), n, vocab,
                              tern_cuda_ptr(out)),
                    "tk_argmax");
}

static enum tern_status cu_sample(struct tern_backend *be, const struct tern_dtensor *logits,
                                  const struct tern_sample_io *io)
{
    int64_t n, vocab;
    rows_width(logits, &n, &vocab);
    size_t pbytes = tern_dtensor_numel(io->params) * tern_dtype_size(io->params->dtype);
    TERN_TRY(need(logits->dtype == TERN_DTYPE_F32 && io->res->dtype == TERN_DTYPE_I32 &&
                      (int64_t)tern_dtensor_numel(io->res) >= 2 * n &&
                      pbytes >= (size_t)n * sizeof(struct tern_sample_dev) &&
                      (!io->edits || (io->scratch && io->scratch->dtype == TERN_DTYPE_F32 &&
                                      (int64_t)tern_dtensor_numel(io->scratch) >= n * vocab)) &&
                      (!io->top || (int64_t)tern_dtensor_numel(io->top) >=
                                       2 * TERN_SAMPLE_DEV_MAX_TOP * n),
                  "sample", "logits F32 [n, vocab], params n tern_sample_dev, res I32 [n, 2], "
                            "scratch F32 [n, vocab] with edits, top I32 [n, 40]"));
    return launched(tk_sample(tern_cuda_of(be)->stream, tern_cuda_ptr(logits), n, vocab,
                              tern_cuda_ptr(io->params),
                              io->edits ? tern_cuda_ptr(io->edits) : NULL,
                              io->edits ? (float *)tern_cuda_ptr(io->scratch) : NULL,
                              tern_cuda_ptr(io->res), io->top ? tern_cuda_ptr(io->top) : NULL),
                    "tk_sample");
}

/* ------------------------------------------------------------ graphs */

struct tern_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

enum tern_status tern_cuda_graph_begin(struct tern_backend *be)
{
    TERN_CU(cudaStreamBeginCapture(tern_cuda_of(be)->stream, cudaStreamCaptureModeThreadLocal));
    return TERN_OK;
}

enum tern_status tern_cuda_graph_end(struct tern_backend *be, struct tern_graph **out)
{
    *out = NULL;
    cudaGraph_t graph = NULL;
    /* End the capture first, whatever happens next: the stream must leave
     * capture mode even when an op failed while recording. */
    cudaError_t e = cudaStreamEndCapture(tern_cuda_of(be)->stream, &graph);
    struct tern_graph *g = e == cudaSuccess ? tern_calloc(1, sizeof *g) : NULL;
    if (e == cudaSuccess && !g) {
        cudaGraphDestroy(graph);
        return TERN_E_NO_MEMORY;
    }
    if (g) {
        g->graph = graph;
        e = cudaGraphInstantiate(&g->exec, g->graph, 0);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        tern_cuda_graph_free(g);
        return tern_cuda_fail("cudaStreamEndCapture/cudaGraphInstantiate", (int)e, __FILE__,
                              __LINE__);
    }
    *out = g;
    return TERN_OK;
}

enum tern_status tern_cuda_graph_launch(struct tern_backend *be, struct tern_graph *g)
{
    TERN_CU(cudaGraphLaunch(g->exec, tern_cuda_of(be)->stream));
    return TERN_OK;
}

void tern_cuda_graph_free(struct tern_graph *g)
{
    if (!g) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    tern_free(g);
}

static void cu_graph_free(struct tern_backend *be, struct tern_graph *g)
{
    if (!g) return;
    (void)tern_cuda_of(be);
    tern_cuda_graph_free(g);
}

/* ------------------------------------------------------------ lifecycle */

static void cu_destroy(struct tern_backend *be)
{
    if (!be) return;
    struct tern_cuda *c = tern_cuda_of(be);
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->copy_stream) cudaStreamSynchronize(c->copy_stream);
    for (int i = 0; i < TERN_CUDA_STAGES; i++) {
        if (c->stage_ev[i]) cudaEventDestroy(c->stage_ev[i]);
        if (c->stage[i]) cudaFreeHost(c->stage[i]);
    }
    for (int i = 0; i < TERN_CUDA_UP_SLOTS; i++) {
        if (c->up_ev[i]) cudaEventDestroy(c->up_ev[i]);
        if (c->up[i]) cudaFreeHost(c->up[i]);
    }
    if (c->ev0) cudaEventDestroy(c->ev0);
    if (c->ev1) cudaEventDestroy(c->ev1);
    if (c->lt) cublasLtDestroy(c->lt);
    cudaFree(c->lt_ws);
    cudaFree(c->attn_ws);
    cudaFree(c->ones);
    if (c->copy_stream) cudaStreamDestroy(c->copy_stream);
    if (c->stream) cudaStreamDestroy(c->stream);
    tern_free(c);
}

static const struct tern_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cu_destroy,
    .buf_alloc = cu_buf_alloc,
    .buf_from_host = cu_buf_from_host,
    .buf_free = cu_buf_free,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .mem_info = cu_mem_info,
    .sync = cu_sync,
    .get_rows = cu_get_rows,
    .rmsnorm = cu_rmsnorm,
    .add_rmsnorm = cu_add_rmsnorm,
    .matmul = tern_cuda_matmul,
    .rope = cu_rope,
    .head_rmsnorm = cu_head_rmsnorm,
    .kv_store = tern_cuda_kv_store,
    .attention = tern_cuda_attention,
    .qk_rope_store = tern_cuda_qk_rope_store,
    .silu_mul = cu_silu_mul,
    .act_mul = tern_cuda_act_mul,
    .layernorm = tern_cuda_layernorm,
    .scale = tern_cuda_scale,
    .softcap = tern_cuda_softcap,
    .matmul_glu = tern_cuda_matmul_glu,
    .matmul_rope_store = tern_cuda_matmul_rope_store,
    .add = cu_add,
    .argmax = cu_argmax,
    .moe_route = tern_cuda_moe_route,
    .moe_experts = tern_cuda_moe_experts,
    .sample = cu_sample,
    .step_prepare = tern_cuda_step_prepare,
    .step_run = tern_cuda_step_run,
    .step_free = tern_cuda_step_free,
    .graph_begin = tern_cuda_graph_begin,
    .graph_end = tern_cuda_graph_end,
    .graph_launch = tern_cuda_graph_launch,
    .graph_free = cu_graph_free,
};

static enum tern_status cu_init(struct tern_cuda *c, int device)
{
    struct cudaDeviceProp prop;
    TERN_CU(cudaSetDevice(device));
    TERN_CU(cudaGetDeviceProperties(&prop, device));
    if (prop.major < 9)
        return tern_error(TERN_E_UNSUPPORTED,
                          "cuda: device %d (%s) is compute capability %d.%d; this build needs 9.0",
                          device, prop.name, prop.major, prop.minor);
    c->n_sm = prop.multiProcessorCount;
    TERN_CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    TERN_CU(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
    TERN_LT(cublasLtCreate(&c->lt));
    TERN_TRY(dev_malloc(&c->lt_ws, TERN_CUDA_LT_WS_BYTES, "the cuBLASLt workspace"));
    TERN_TRY(dev_malloc((void **)&c->attn_ws, TERN_CUDA_ATTN_WS_BYTES, "the attention workspace"));
    TERN_CU(cudaMemset(c->attn_ws, 0, TERN_CUDA_ATTN_WS_BYTES)); /* the decode split counters */
    TERN_TRY(dev_malloc((void **)&c->ones, TERN_CUDA_ONES * sizeof(float), "the norm ones"));
    {
        float *h = tern_malloc(TERN_CUDA_ONES * sizeof(float));
        if (!h) return TERN_E_NO_MEMORY;
        for (int i = 0; i < TERN_CUDA_ONES; i++) h[i] = 1.0f;
        cudaError_t e = cudaMemcpy(c->ones, h, TERN_CUDA_ONES * sizeof(float), cudaMemcpyHostToDevice);
        tern_free(h);
        TERN_CU(e);
    }
    for (int i = 0; i < TERN_CUDA_STAGES; i++) {
        TERN_CU(cudaHostAlloc(&c->stage[i], TERN_CUDA_STAGE_BYTES, cudaHostAllocDefault));
        TERN_CU(cudaEventCreateWithFlags(&c->stage_ev[i], cudaEventDisableTiming));
    }
    for (int i = 0; i < TERN_CUDA_UP_SLOTS; i++) {
        TERN_CU(cudaHostAlloc(&c->up[i], TERN_CUDA_UP_BYTES, cudaHostAllocDefault));
        TERN_CU(cudaEventCreateWithFlags(&c->up_ev[i], cudaEventDisableTiming));
    }
    TERN_CU(cudaEventCreate(&c->ev0));
    TERN_CU(cudaEventCreate(&c->ev1));
    tern_log(TERN_LOG_INFO, "cuda: device %d %s, %d SMs, %.1f GiB", device, prop.name, c->n_sm,
             (double)prop.totalGlobalMem / (1 << 30));
    return TERN_OK;
}

enum tern_status tern_backend_cuda_create(const struct tern_backend_params *params,
                                          struct tern_backend **out)
{
    *out = NULL;
    int n = tern_backend_cuda_device_count();
    if (params->device_index < 0 || params->device_index >= n)
        return tern_error(TERN_E_DEVICE, "cuda: device index %d out of range (%d visible)",
                          params->device_index, n);
    struct tern_cuda *c = tern_calloc(1, sizeof *c);
    if (!c) return TERN_E_NO_MEMORY;
    c->ops = cuda_ops;
    /* the decode step as one kernel (cuda_step.c) unless TERN_CUDA_STEP=0 */
    const char *stp = getenv("TERN_CUDA_STEP");
    if (stp && strcmp(stp, "0") == 0) c->ops.step_prepare = NULL;
    c->base.ops = &c->ops;
    c->base.device = TERN_DEVICE_CUDA;
    c->base.act_dtype = TERN_DTYPE_BF16;
    c->base.kv_dtype = TERN_DTYPE_BF16;
    c->base.n_threads = 1;
    c->base.deterministic = params->deterministic;
    c->device = params->device_index;
    enum tern_status st = cu_init(c, c->device);
    if (st != TERN_OK) {
        cu_destroy(&c->base);
        return st;
    }
    *out = &c->base;
    return TERN_OK;
}
