/*
 * sched.h — continuous batching: request queues, admission, chunked prefill,
 * preemption by recompute, n > 1 forks, and the ragged batch of each step.
 *
 * The scheduler knows nothing of models or devices; it owns the KV block
 * pool's bookkeeping (kv/kv.h) and emits plain data (vLLM v1's
 * SchedulerOutput). Depends on base/, kv/ and backend/backend.h (only for
 * the plain `struct tern_batch` it fills).
 *
 * The engine's step loop:
 *
 *   tern_sched_submit(s, &req, &id)            any time; rejects what can never fit
 *   loop:
 *     out = tern_sched_schedule(s)              plan one step (no allocation)
 *     for out->finished[]: report and release the engine's per-request state
 *     for out->copies[]:   copy block src -> dst on the device (the group's layers, K and V)
 *     tern_sched_build_batch(s, &storage, &batch)  token ids, positions, block tables, ...
 *     forward(batch) -> logits [batch.n_logits, vocab]
 *     for out->samples[r]: sampled[r] = sample(logits row r, out->samples[r] context)
 *     tern_sched_commit(s, sampled)             KV computed, tokens appended, stops decided
 *     for out->samples[r]: stream samples[r].token unless .finish says it was dropped
 *   tern_sched_cancel(s, id)                   any time between calls; frees at once
 *
 * Policy, per step (token budget max_batch_tokens, at most max_seqs running):
 *   1. running sequences that decode (one new token each), oldest first;
 *   2. running sequences still prefilling (or recomputing after preemption)
 *      get the largest chunk the budget allows (chunked prefill);
 *   3. if nothing was preempted in this step, waiting sequences are admitted
 *      in strict FCFS order (the queue head blocks the rest: no starvation),
 *      reusing prefix-cached blocks, while slots, budget and blocks last.
 *   When a running sequence cannot get its blocks, the most recently admitted
 *   running sequence is preempted (all its blocks freed, re-queued at the
 *   FRONT of the waiting queue keeping its generated tokens; it later
 *   recomputes prompt + generated, mostly from the prefix cache); if it is
 *   itself the most recent, it is the one preempted.
 *
 * Who decides the end of a sequence: the scheduler, at commit, from the
 * request's stop_ids (the stop token is appended to the tokens, reported in
 * samples[r].token with finish == TERN_SCHED_FINISH_STOP; whether to show it
 * is the front end's choice) and max_tokens (TERN_SCHED_FINISH_LENGTH). Stop
 * strings are text, so the engine decides them and calls tern_sched_stop.
 *
 * Sequence identity: a request with n completions has n sequences,
 * seq_idx 0 .. n-1. Sequence 0 prefills the prompt; when its prompt is
 * complete the others are forked from it (sharing every block; the partial
 * last block is copied on its first write) and all n sample their first
 * token from the same logits row (out->samples has n entries with the same
 * batch row). The sampler should use (seed, seq_idx) as its RNG stream and
 * samples[r].n_generated as the counter, which makes tokens independent of
 * batching and of preemption.
 *
 * Call order: every schedule is followed by exactly one commit before the
 * next schedule (a plan whose commit is skipped is simply re-planned, but
 * its samples are lost). Build the batch right after schedule: cancel and
 * stop may come at any point between the calls except between schedule and
 * build_batch (a cancelled sequence has no block table to put in a batch).
 * Blocks freed by a cancel during the forward are not handed out again
 * before the next schedule, so an in-flight forward never sees them reused.
 *
 * Not thread-safe: the engine calls everything from its step-loop thread.
 */
#ifndef TERN_SCHED_H
#define TERN_SCHED_H

#include "backend/backend.h"
#include "base/base.h"
#include "kv/kv.h"

struct tern_sched;

struct tern_sched_params {
    int32_t max_seqs;         /* sequences running at once (KV slots) */
    int32_t max_batch_tokens; /* tokens per step, decode and prefill together */
    int32_t max_context;      /* prompt + generated tokens per sequence */
    int32_t n_blocks;         /* KV blocks in the pool (from the engine's memory budget) */
    int32_t block_size;       /* tokens per KV block */
    bool enable_prefix_cache;
    /* KV groups: layers whose K/V live differently (sliding windows) keep a
     * pool of their own, and every sequence a block table in each. 0: one
     * full pool of n_blocks; 1: one pool of n_blocks with window
     * group_window[0] (every layer slides alike). Otherwise group g has
     * group_blocks[g] blocks (group 0 too: n_blocks is then ignored) and
     * window group_window[g] (0: full attention; kv/kv.h windowed pools). A
     * sequence runs only when every group has its blocks; its cached prefix
     * is the longest every group can serve. */
    int32_t n_groups;
    int32_t group_blocks[TERN_MAX_KV_GROUPS];
    int32_t group_window[TERN_MAX_KV_GROUPS];
};

/* What a request asks for. Arrays are copied at submit.
 *
 * A prefill-only request (max_tokens 0, n 1: an embedding) is scheduled
 * like any prompt but has no sample row: it ends with
 * TERN_SCHED_FINISH_LENGTH at the commit that completes its prompt, its
 * full blocks left in the prefix cache. Its last prompt token is always
 * computed (a prefix hit stops short of it); with no_prefix_cache every
 * prompt token is, also after a preemption (pooling over all of them). */
struct tern_sched_request {
    const int32_t *prompt;   /* [n_prompt] token ids, n_prompt >= 1 */
    int32_t n_prompt;
    int32_t max_tokens;      /* >= 1 tokens to generate per sequence; 0: prefill only */
    int32_t n;               /* completions (>= 1, <= max_seqs; 1 when prefill only) */
    const int32_t *stop_ids; /* [n_stop] a sampled id in this set ends the sequence */
    int32_t n_stop;
    void *user;              /* the engine's per-request state, handed back in outputs */
    bool no_prefix_cache;    /* admitted without prefix-cache hits */
};

enum tern_sched_finish {
    TERN_SCHED_FINISH_NONE = 0, /* still running */
    TERN_SCHED_FINISH_STOP,     /* sampled a stop id, or tern_sched_stop */
    TERN_SCHED_FINISH_LENGTH,   /* generated max_tokens */
    TERN_SCHED_FINISH_CANCELLED /* tern_sched_cancel; a sample for it is dropped */
};

/* One scheduled sequence: query tokens [start, start + n_new) of its tokens. */
struct tern_sched_entry {
    uint64_t req_id;
    int32_t seq_idx;
    int32_t slot;     /* the sequence's running slot, 0 .. max_seqs-1 (stable while running) */
    int32_t start;    /* position of its first new token == tokens already in the KV cache */
    int32_t n_new;    /* tokens computed this step (1 = decode) */
    int32_t n_cached; /* tokens taken from the prefix cache when admitted this step, else 0 */
    void *user;
};

/* One logits row to sample (row r of the batch's logits == samples[r]). */
struct tern_sched_sample {
    uint64_t req_id;
    int32_t seq_idx;
    void *user;
    const int32_t *tokens; /* [n_tokens] prompt then generated: context for penalties */
    int32_t n_prompt;
    int32_t n_tokens;
    int32_t n_generated;   /* == n_tokens - n_prompt: index of the token being sampled */
    /* filled by tern_sched_commit: */
    int32_t token;
    enum tern_sched_finish finish;
};

/* A sequence preempted in this step (its blocks are free; it waits again). */
struct tern_sched_preempted {
    uint64_t req_id;
    int32_t seq_idx;
    void *user;
};

/* A sequence that ended since the previous schedule; its blocks are free. */
struct tern_sched_done {
    uint64_t req_id;
    int32_t seq_idx;
    void *user;
    enum tern_sched_finish reason;
    const int32_t *tokens;  /* [n_tokens] final tokens, valid until the next schedule */
    int32_t n_prompt;
    int32_t n_tokens;
    int32_t n_cached;       /* prompt tokens served by the prefix cache at its first admission */
    bool req_done;          /* the last live sequence of its request: release `user` */
};

/* One step's plan. Owned by the scheduler, valid until the next schedule. */
struct tern_sched_out {
    int32_t n_entries;
    struct tern_sched_entry *entries; /* batch order: decodes, then prefill chunks */
    int32_t n_tokens;                 /* sum of n_new, <= max_batch_tokens */
    int32_t n_copies;
    struct tern_kv_copy *copies;      /* perform before the forward */
    int32_t n_samples;
    struct tern_sched_sample *samples;
    int32_t n_preempted;
    struct tern_sched_preempted *preempted;
    int32_t n_finished;
    struct tern_sched_done *finished;
};

/* Sizes of the caller's batch storage (tern_sched_build_batch). */
struct tern_sched_caps {
    int32_t max_tokens;         /* token_ids, positions; slot_mapping n_groups times that */
    int32_t max_seqs;           /* seq_lens, logits_idx; query_start has max_seqs + 1 */
    int32_t max_blocks_per_seq; /* block_tables has n_groups * max_seqs * max_blocks_per_seq */
    int32_t n_groups;           /* KV groups (>= 1) */
};

/* Caller storage for one batch, sized by tern_sched_caps (host memory; the
 * engine may point these at pinned buffers). */
struct tern_sched_batch_storage {
    int32_t *token_ids, *positions, *query_start, *seq_lens, *block_tables, *slot_mapping,
        *logits_idx;
};

/* Creates a scheduler and its KV pool. All per-step storage is sized here.
 * TERN_E_INVALID_ARG names a bad limit. */
enum tern_status tern_sched_create(const struct tern_sched_params *params, struct tern_sched **out);
/* Frees everything, including requests still queued or running. */
void tern_sched_destroy(struct tern_sched *s);

/* Queues a request (copies its arrays; allocates its token storage once,
 * n_prompt + max_tokens per sequence). A request that could never run is
 * rejected here, never truncated: TERN_E_INVALID_ARG for bad fields,
 * TERN_E_CAPACITY when prompt + max_tokens exceeds max_context or needs more
 * KV blocks than the whole pool, or n > max_seqs; the message names the
 * numbers. On success *out_id is the request's id (ids start at 1). */
enum tern_status tern_sched_submit(struct tern_sched *s, const struct tern_sched_request *req,
                                   uint64_t *out_id);

/* Whether a request of n_prompt + max_tokens tokens and n completions can
 * ever run (the context, every KV group's pool, max_seqs): TERN_E_CAPACITY
 * naming the numbers when not. Reads only what creation fixed, so any
 * thread may ask while the step thread runs. */
enum tern_status tern_sched_check_fits(const struct tern_sched *s, int32_t n_prompt,
                                       int32_t max_tokens, int32_t n);

/* Cancels a request in any phase: its sequences leave the queues and free
 * their blocks now, and show up in the next schedule's finished[] with
 * TERN_SCHED_FINISH_CANCELLED. Safe between schedule and commit (commit
 * then drops its samples). TERN_E_NOT_FOUND for an unknown or ended id. */
enum tern_status tern_sched_cancel(struct tern_sched *s, uint64_t req_id);

/* Ends one sequence with TERN_SCHED_FINISH_STOP (the engine matched a stop
 * string), freeing its blocks now. TERN_E_NOT_FOUND when not live. */
enum tern_status tern_sched_stop(struct tern_sched *s, uint64_t req_id, int32_t seq_idx);

/* Plans the next step. Returns the scheduler's own output (never NULL);
 * out->n_entries == 0 means nothing can run (idle). */
struct tern_sched_out *tern_sched_schedule(struct tern_sched *s);

/* Fills `batch` for the last schedule, writing into `st` (sized by
 * tern_sched_caps): sequence after sequence in entries[] order; logits_idx
 * row r is the last query token of samples[r]'s sequence. Unused block
 * table entries (and those a windowed group released) are 0. With KV
 * groups, st's block_tables and slot_mapping hold every group's, one after
 * the other ([n_groups][max_seqs * max_blocks_per_seq] and
 * [n_groups][max_tokens]). */
void tern_sched_build_batch(const struct tern_sched *s, const struct tern_sched_batch_storage *st,
                            struct tern_batch *batch);

/* Ends the step planned by the last schedule: every entry's tokens count as
 * computed (full blocks enter the prefix cache), n > 1 requests whose prompt
 * just completed fork, sampled[r] is appended to samples[r]'s sequence, and
 * samples[r].token / .finish are set. Finished sequences free their blocks
 * at once. `sampled` has out->n_samples ids. */
void tern_sched_commit(struct tern_sched *s, const int32_t *sampled);

/* ---- introspection (tests, metrics) ---- */

struct tern_sched_caps tern_sched_get_caps(const struct tern_sched *s);
struct tern_kv *tern_sched_kv(struct tern_sched *s); /* group 0's pool */
struct tern_kv *tern_sched_kv_group(struct tern_sched *s, int32_t group);
int32_t tern_sched_n_waiting(const struct tern_sched *s);  /* sequences queued */
int32_t tern_sched_n_running(const struct tern_sched *s);  /* sequences holding a slot */
int32_t tern_sched_n_requests(const struct tern_sched *s); /* requests not yet ended */
/* The block table of the sequence in running slot `slot` (in KV group
 * `group` for the _group form), or NULL. */
const struct tern_kv_seq *tern_sched_slot_table(const struct tern_sched *s, int32_t slot);
const struct tern_kv_seq *tern_sched_slot_table_group(const struct tern_sched *s, int32_t slot,
                                                      int32_t group);

#endif /* TERN_SCHED_H */
