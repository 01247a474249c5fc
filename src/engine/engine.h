/*
 * engine.h — the struct behind struct tern_engine, shared by engine.c (the
 * handle and the solo paths), serve.c (the step loop) and stream.c (request
 * streams).
 *
 * Threads and locks:
 *   mu       guards the pending submit/cancel lists, counters and `stop`;
 *            submitters and the loop meet here (cv wakes the loop).
 *   step_mu  held for a whole step by the loop, and by the solo paths
 *            (tern_logits, tern_generate_greedy): the scheduler, the KV
 *            cache and the forward scratch are used by one step at a time.
 */
#ifndef TERN_ENGINE_H
#define TERN_ENGINE_H

#include "api/api.h"
#include "sample/sample.h"
#include "sched/sched.h"

#include <pthread.h>
#include <stdatomic.h>

/* Host-side batch arrays, sized at creation (no allocation per step). */
struct tern_host_batch {
    int32_t *ids, *pos;         /* [max_batch_tokens] */
    int32_t *slots;             /* [n_kv_groups, max_batch_tokens] */
    int32_t *qstart;            /* [max_seqs + 1] */
    int32_t *seqlen;            /* [max_seqs] */
    int32_t *lidx;              /* [max_logits] */
    int32_t *btable;            /* [n_kv_groups, max_seqs, max_blocks_per_seq] */
    int32_t *out_ids;           /* [max_logits] */
    float *logits;              /* [max_logits, vocab] downloaded for sampling */
    int32_t *sampled;           /* [max_logits] */
};

struct tern_stream;

struct tern_engine {
    struct tern_model *model; /* borrowed */
    struct tern_engine_params p;
    int32_t max_context;
    int32_t max_blocks_per_seq;
    int32_t max_logits;
    int32_t n_blocks[TERN_MAX_KV_GROUPS]; /* per KV group of the model */
    struct tern_kv_cache kv;
    struct tern_fwd fwd;
    struct tern_host_batch hb;
    struct tern_sched *sched;
    struct tern_sampler *sampler;
    /* device sampling (loop.c): state 0 = not set up yet, 1 = on, -1 = off */
    int gsamp_state;
    struct tern_dtensor gsamp_params;  /* U8 [max_logits tern_sample_dev] */
    struct tern_dtensor gsamp_res;     /* I32 [max_logits, 2] */
    struct tern_dtensor gsamp_top;     /* I32 [max_logits, 2 * TERN_SAMPLE_DEV_MAX_TOP] */
    struct tern_dtensor gsamp_edits;   /* U8 [gsamp_edit_cap tern_sample_edit], on demand */
    struct tern_dtensor gsamp_scratch; /* F32 [max_logits, vocab], on first edit */
    struct tern_sample_dev *gsamp_host; /* [max_logits] */
    int32_t *gsamp_res_host;            /* [max_logits, 2] */
    int32_t *gsamp_top_host;            /* [max_logits, 2 * TERN_SAMPLE_DEV_MAX_TOP] */
    bool *gsamp_on;                     /* [max_logits] row r drawn on the device */
    struct tern_sample_edit *gsamp_edit_host; /* [gsamp_edit_cap] */
    int64_t gsamp_edit_cap;
    int32_t *gsamp_slot;  /* [vocab] -1, or the token's edit in the row being built */
    int32_t *gsamp_count; /* [vocab] 0 between rows */

    pthread_mutex_t mu, step_mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool started, stop;
    struct tern_stream *pending_head, *pending_tail; /* submitted, not yet in the scheduler */
    struct tern_stream *cancel_head;                 /* cancel asked (linked by cancel_next) */
    struct tern_stream *live;                        /* in the scheduler (step thread only) */
    uint64_t seed_counter;
    bool locks_ready;
    struct tern_engine_stats stats; /* counters (running/waiting/kv read at get_stats) */
    /* embeddings (embed.c): final hidden rows downloaded for pooling */
    float *emb_rows;    /* [EMB_ROWS, hidden], made at the first embedding step */
};

enum tern_status tern_engine_host_batch_init(struct tern_engine *e);
void tern_engine_host_batch_deinit(struct tern_engine *e);
/* Frees what device sampling set up (loop.c). */
void tern_engine_gsample_deinit(struct tern_engine *e);
/* Stops the step loop and ends every request (cancelled). */
void tern_engine_stop_loop(struct tern_engine *e);
/* Runs one forward of a solo sequence over blocks taken from the pool. */
enum tern_status tern_engine_check_ids(struct tern_engine *e, const int32_t *ids, int32_t n);

/* Embedding requests (embed.c). */
struct tern_stream;
struct tern_sched_out;
/* Validates an embedding request at submit (ids, length, pooling, dimensions). */
enum tern_status tern_engine_embed_check(struct tern_engine *e, const struct tern_request *r);
/* Sets an embedding stream's settings from its request (after the check). */
enum tern_status tern_engine_embed_init(struct tern_engine *e, struct tern_stream *s,
                                        const struct tern_request *r);
/* Whether the planned step has an embedding entry (the forward then wants
 * the final hidden rows). */
bool tern_engine_embed_any(const struct tern_sched_out *out);
/* After the forward: pools each embedding entry's rows of f->h. */
enum tern_status tern_engine_embed_pool(struct tern_engine *e, const struct tern_sched_out *out);
/* At the end of an embedding request: makes its vector and puts it in ev. */
void tern_engine_embed_finish(struct tern_engine *e, struct tern_stream *s, struct tern_event *ev);
void tern_engine_embed_deinit(struct tern_engine *e);

#endif
