/*
 * stream.h — a request's stream: its settings (engine thread), and a queue of
 * events from the engine thread to the reader.
 *
 * Lifetime: two references, the reader's (dropped by tern_stream_destroy)
 * and the engine's (dropped after the final DONE event is queued, or at
 * once when the request is rejected). The last one frees.
 */
#ifndef TERN_ENGINE_STREAM_H
#define TERN_ENGINE_STREAM_H

#include "engine/engine.h"

/* One queued event with its own copies of text and logprobs. */
struct tern_ev_node {
    struct tern_event ev;
    char *text;
    char *error;
    int32_t top_ids[TERN_SAMPLE_MAX_TOP_LOGPROBS];
    float top_lp[TERN_SAMPLE_MAX_TOP_LOGPROBS];
    struct tern_ev_node *next;
};

struct tern_stream {
    struct tern_engine *engine;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct tern_ev_node *head, *tail;
    struct tern_ev_node *current; /* handed to the reader, freed at its next call */
    bool final_queued, final_read;
    int refs; /* guarded by mu */
    atomic_bool cancel_asked;

    /* ---- engine thread only ---- */
    struct tern_stream *next;        /* pending list (engine->mu) */
    struct tern_stream *cancel_next; /* cancel list (engine->mu) */
    bool in_cancel_list;             /* engine->mu */
    bool submitted;                  /* in the scheduler */
    struct tern_stream *live_prev, *live_next; /* engine->live list while submitted */
    uint64_t req_id;
    int32_t *prompt;
    int32_t n_prompt;
    struct tern_sampling_params sp;
    struct tern_sample_params sample;
    int32_t *stop_ids, *bias_ids, *forced;
    float *bias_values;
    int32_t n_forced;
    bool detokenize;
    struct tern_detok_stream **detok; /* [n] */
    int32_t n_live;                   /* completions not yet DONE */
    uint64_t t_submit, t_admit, t_first;
    /* an embedding request (embed.c) */
    bool embed;
    enum tern_pooling pooling; /* resolved: LAST, MEAN or CLS */
    bool normalize;
    int32_t dims, pool_skip;
    double *acc;   /* [hidden] the pooled row (LAST, CLS) or the sum of the rows (MEAN) */
    int32_t n_acc; /* rows in acc */
    float *vec;    /* [dims] the vector, made when the request ends */
};

/* Queues an event (copying text/error); wakes the reader. */
void tern_stream_push(struct tern_stream *s, const struct tern_event *ev, const char *text,
                      size_t text_len, const char *error);
/* Drops one reference; frees on the last. */
void tern_stream_unref(struct tern_stream *s);

#endif
