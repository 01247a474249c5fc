/*
 * backend.c — backend registry and helpers shared by every implementation.
 */
#include "backend/backend.h"

enum tern_status tern_backend_cpu_create(const struct tern_backend_params *params,
                                         struct tern_backend **out);
#ifdef TERN_HAVE_CUDA
enum tern_status tern_backend_cuda_create(const struct tern_backend_params *params,
                                          struct tern_backend **out);
int tern_backend_cuda_device_count(void);
#endif

bool tern_backend_cuda_available(void)
{
#ifdef TERN_HAVE_CUDA
    return tern_backend_cuda_device_count() > 0;
#else
    return false;
#endif
}

enum tern_status tern_backend_create(const struct tern_backend_params *params,
                                     struct tern_backend **out)
{
    *out = NULL;
    switch (params->device) {
    case TERN_DEVICE_CPU:
        return tern_backend_cpu_create(params, out);
    case TERN_DEVICE_CUDA:
#ifdef TERN_HAVE_CUDA
        if (tern_backend_cuda_device_count() <= 0)
            return tern_error(TERN_E_DEVICE, "device cuda: no CUDA device is visible");
        return tern_backend_cuda_create(params, out);
#else
        return tern_error(TERN_E_UNSUPPORTED,
                          "device cuda: this build of tern has no CUDA backend (-DTERN_CUDA=ON)");
#endif
    case TERN_DEVICE_AUTO:
#ifdef TERN_HAVE_CUDA
        if (tern_backend_cuda_device_count() > 0) {
            struct tern_backend_params p = *params;
            p.device = TERN_DEVICE_CUDA;
            return tern_backend_cuda_create(&p, out);
        }
#endif
        return tern_backend_cpu_create(params, out);
    }
    return tern_error(TERN_E_INVALID_ARG, "device: unknown device %d", (int)params->device);
}

bool tern_backend_ggml_ok(const struct tern_backend *be, uint32_t ggml_type)
{
    return be->ops->ggml_type_ok && be->ops->ggml_type_ok(be, ggml_type);
}

void tern_backend_destroy(struct tern_backend *be)
{
    if (be) be->ops->destroy(be);
}

enum tern_status tern_dtensor_alloc(struct tern_backend *be, enum tern_dtype dtype, int n_dims,
                                    const int64_t *shape, struct tern_dtensor *out)
{
    memset(out, 0, sizeof *out);
    if (n_dims < 1 || n_dims > TERN_MAX_DIMS)
        return tern_error(TERN_E_INVALID_ARG, "tensor rank %d out of range", n_dims);
    out->dtype = dtype;
    out->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++) out->shape[i] = shape[i];
    return be->ops->buf_alloc(be, tern_dtensor_bytes(out), &out->buf);
}

void tern_dtensor_free(struct tern_backend *be, struct tern_dtensor *t)
{
    if (t->buf) be->ops->buf_free(be, t->buf);
    t->buf = NULL;
}

struct tern_dtensor tern_dtensor_rows(const struct tern_dtensor *t, int64_t row0, int64_t n_rows)
{
    struct tern_dtensor v = *t;
    size_t row_bytes = tern_dtensor_bytes(t) / (size_t)(t->shape[0] ? t->shape[0] : 1);
    v.offset += (size_t)row0 * row_bytes;
    v.shape[0] = n_rows;
    return v;
}
