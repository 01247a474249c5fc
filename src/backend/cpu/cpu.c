/*
 * cpu.c — the CPU backend: buffers in host memory (weights used in place from
 * the mmapped files), and the op table. The ops themselves are in
 * cpu_ops.c; this file is memory and wiring.
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_quant.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

struct tern_buf {
    void *data;
    size_t n_bytes;
    bool owned; /* false when it borrows host memory (mmapped weights) */
};

void *tern_cpu_ptr(const struct tern_dtensor *t)
{
    return t->buf ? (char *)t->buf->data + t->offset : NULL;
}

static enum tern_status cpu_buf_alloc(struct tern_backend *be, size_t n_bytes, struct tern_buf **out)
{
    struct tern_buf *b = tern_calloc(1, sizeof *b);
    if (!b) return TERN_E_NO_MEMORY;
    /* 64-byte alignment for SIMD loads. */
    size_t sz = (n_bytes + 63) & ~(size_t)63;
    if (posix_memalign(&b->data, 64, sz ? sz : 64) != 0) {
        tern_free(b);
        return tern_error(TERN_E_NO_MEMORY, "cpu: out of memory allocating %zu bytes", n_bytes);
    }
    b->n_bytes = n_bytes;
    b->owned = true;
    *out = b;
    return TERN_OK;
}

static enum tern_status cpu_buf_from_host(struct tern_backend *be, const void *data, size_t n_bytes,
                                          struct tern_buf **out)
{
    struct tern_buf *b = tern_calloc(1, sizeof *b);
    if (!b) return TERN_E_NO_MEMORY;
    b->data = (void *)data;
    b->n_bytes = n_bytes;
    b->owned = false;
    *out = b;
    return TERN_OK;
}

static void cpu_buf_free(struct tern_backend *be, struct tern_buf *b)
{
    if (!b) return;
    if (b->owned) free(b->data);
    tern_free(b);
}

static enum tern_status cpu_upload(struct tern_backend *be, const struct tern_dtensor *dst,
                                   const void *src, size_t n_bytes)
{
    if (dst->offset + n_bytes > dst->buf->n_bytes)
        return tern_error(TERN_E_INTERNAL, "cpu upload of %zu bytes past buffer end", n_bytes);
    memcpy(tern_cpu_ptr(dst), src, n_bytes);
    return TERN_OK;
}

static enum tern_status cpu_download(struct tern_backend *be, void *dst,
                                     const struct tern_dtensor *src, size_t n_bytes)
{
    if (src->offset + n_bytes > src->buf->n_bytes)
        return tern_error(TERN_E_INTERNAL, "cpu download of %zu bytes past buffer end", n_bytes);
    memcpy(dst, tern_cpu_ptr(src), n_bytes);
    return TERN_OK;
}

static enum tern_status cpu_copy(struct tern_backend *be, const struct tern_dtensor *dst,
                                 const struct tern_dtensor *src, size_t n_bytes)
{
    if (dst->offset + n_bytes > dst->buf->n_bytes || src->offset + n_bytes > src->buf->n_bytes)
        return tern_error(TERN_E_INTERNAL, "cpu copy of %zu bytes past buffer end", n_bytes);
    memmove(tern_cpu_ptr(dst), tern_cpu_ptr(src), n_bytes);
    return TERN_OK;
}

static enum tern_status cpu_mem_info(struct tern_backend *be, size_t *free_bytes, size_t *total)
{
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    long psz = sysconf(_SC_PAGESIZE);
    *total = (size_t)pages * (size_t)psz;
    *free_bytes = (size_t)avail * (size_t)psz;
    return TERN_OK;
}

static enum tern_status cpu_sync(struct tern_backend *be)
{
    return TERN_OK;
}

static void cpu_destroy(struct tern_backend *be)
{
    tern_free(be);
}

static const struct tern_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .buf_alloc = cpu_buf_alloc,
    .buf_from_host = cpu_buf_from_host,
    .buf_free = cpu_buf_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .mem_info = cpu_mem_info,
    .sync = cpu_sync,
    .get_rows = tern_cpu_get_rows,
    .rmsnorm = tern_cpu_rmsnorm,
    .add_rmsnorm = tern_cpu_add_rmsnorm,
    .layernorm = tern_cpu_layernorm,
    .matmul = tern_cpu_matmul,
    .rope = tern_cpu_rope,
    .head_rmsnorm = tern_cpu_head_rmsnorm,
    .kv_store = tern_cpu_kv_store,
    .attention = tern_cpu_attention,
    .qk_rope_store = tern_cpu_qk_rope_store,
    .silu_mul = tern_cpu_silu_mul,
    .matmul_glu = tern_cpu_matmul_glu,
    .act_mul = tern_cpu_act_mul,
    .scale = tern_cpu_scale,
    .softcap = tern_cpu_softcap,
    .add = tern_cpu_add,
    .argmax = tern_cpu_argmax,
    .moe_route = tern_cpu_moe_route,
    .moe_experts = tern_cpu_moe_experts,
    .ggml_type_ok = tern_cpu_ggml_type_ok,
};

enum tern_status tern_backend_cpu_create(const struct tern_backend_params *params,
                                         struct tern_backend **out)
{
    struct tern_backend *be = tern_calloc(1, sizeof *be);
    if (!be) return TERN_E_NO_MEMORY;
    be->ops = &cpu_ops;
    be->device = TERN_DEVICE_CPU;
    be->act_dtype = TERN_DTYPE_F32;
    be->kv_dtype = TERN_DTYPE_F32;
    be->deterministic = true;
    int n = params->n_threads;
#ifdef _OPENMP
    if (n <= 0) n = tern_default_threads();
#else
    n = 1;
#endif
    be->n_threads = n;
    *out = be;
    return TERN_OK;
}
