/*
 * defaults.c — default parameter structs of the public API, and tern_free_buf.
 */
#include "base/base.h"

struct tern_model_params tern_model_default_params(void)
{
    struct tern_model_params p = {0};
    p.device = TERN_DEVICE_AUTO;
    p.device_index = 0;
    p.progress = false;
    return p;
}

struct tern_engine_params tern_engine_default_params(void)
{
    struct tern_engine_params p = {0};
    p.max_seqs = 16;
    p.max_batch_tokens = 2048;
    p.max_context = 0;
    p.block_size = 16;
    p.kv_bytes = 0;
    p.kv_fraction = 0.9;
    p.n_threads = 0;
    p.deterministic = false;
    return p;
}

void tern_free_buf(void *p)
{
    tern_free(p);
}
