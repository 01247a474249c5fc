/*
 * engine.h — the struct behind struct tern_engine.
 */
#ifndef TERN_ENGINE_H
#define TERN_ENGINE_H

#include "api/api.h"

/* Host-side batch arrays, sized at creation (no allocation per step). */
struct tern_host_batch {
    int32_t *ids, *pos, *slots;     /* [max_batch_tokens] */
    int32_t *qstart;                /* [max_seqs + 1] */
    int32_t *seqlen;                /* [max_seqs] */
    int32_t *lidx;                  /* [max_logits] */
    int32_t *btable;                /* [max_seqs, max_blocks_per_seq] */
    int32_t *out_ids;               /* [max_logits] */
};

struct tern_engine {
    struct tern_model *model; /* borrowed */
    struct tern_engine_params p;
    int32_t max_context;
    int32_t max_blocks_per_seq;
    int32_t max_logits;
    int32_t n_blocks;
    struct tern_kv_cache kv;
    struct tern_fwd fwd;
    struct tern_host_batch hb;
};

enum tern_status tern_engine_host_batch_init(struct tern_engine *e);
void tern_engine_host_batch_deinit(struct tern_engine *e);

#endif
