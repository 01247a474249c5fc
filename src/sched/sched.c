/*
 * sched.c — the continuous-batching scheduler described in sched.h: the
 * waiting queue (FCFS, preempted sequences at the front), the running list
 * (in admission order, which is also preemption priority: newest goes
 * first), slots, per-step planning, commit, forks and cancellation.
 *
 * Memory: everything a step touches is sized in tern_sched_create (slots,
 * block tables, output arrays). A request allocates once at submit (its
 * sequences and their token arrays, n_prompt + max_tokens each) and is freed
 * at the schedule after the one that reported its end, so pointers handed
 * out in outputs stay valid for one step. Depends on base/ and kv/.
 */
#include "sched/sched.h"

#include <string.h>

enum seq_state {
    SEQ_WAITING,  /* in the waiting queue */
    SEQ_RUNNING,  /* holds a slot and a block table */
    SEQ_UNFORKED, /* seq_idx > 0 whose parent has not finished its prompt */
    SEQ_DONE
};

struct req;

struct seq {
    struct req *req;
    int32_t idx;     /* seq_idx */
    int32_t *tokens; /* [n_prompt + max_tokens] */
    int32_t n_tokens;
    int32_t slot;    /* running slot, -1 otherwise */
    enum seq_state state;
    enum tern_sched_finish reason;
    int32_t n_cached;     /* prefix-cache tokens at first admission */
    bool admitted_before;
    uint64_t sched_step;  /* step number when last scheduled */
    struct seq *wprev, *wnext; /* waiting queue links */
    struct seq *dnext;         /* ended, not yet reported */
};

struct req {
    uint64_t id;
    void *user;
    int32_t n_prompt, max_tokens, n, n_stop;
    int32_t n_live;       /* sequences not yet ended */
    int32_t n_unreported; /* ended sequences not yet in a finished[] */
    bool forked;
    int32_t *stop_ids;    /* [n_stop] */
    bool no_cache;        /* no prefix-cache hits at admission */
    struct req *prev, *next; /* live list, then the grave list */
    struct seq seqs[];    /* [n] */
};

struct tern_sched {
    struct tern_sched_params p;
    int32_t n_groups;                      /* KV groups, >= 1 */
    struct tern_kv *kv[TERN_MAX_KV_GROUPS]; /* a pool per group */
    int32_t max_blocks_per_seq;

    /* slots: each has a block table in every group */
    int32_t *table_store[TERN_MAX_KV_GROUPS];       /* [max_seqs, max_blocks_per_seq] */
    struct tern_kv_seq *tables[TERN_MAX_KV_GROUPS]; /* [max_seqs] */
    struct seq **slot_seq;      /* [max_seqs] */
    int32_t *free_slots;        /* [max_seqs] stack */
    int32_t n_free_slots;
    int32_t n_reserved;         /* slots promised to unforked children */

    struct seq **running; /* [max_seqs] admission order */
    int32_t n_running;
    struct seq *wait_head, *wait_tail;
    int32_t n_waiting;

    struct req *live;  /* requests with live sequences */
    int32_t n_live;
    struct req *grave; /* fully reported; freed at the next schedule */
    struct seq *done_head, *done_tail;
    uint64_t next_id;
    uint64_t step;
    int32_t budget;

    struct tern_sched_out out;
    struct seq **ent_seq;    /* [max_seqs] sequence of each entry */
    struct seq **copy_owner; /* [2 * max_seqs] */
    struct seq **sample_seq; /* [max_seqs] */
    int32_t *sample_ent;     /* [max_seqs] entry of each sample */
    int32_t cap_copies, cap_finished;
};

/* ------------------------------------------------------------ lifecycle */

static enum tern_status check_params(const struct tern_sched_params *p)
{
    bool grouped = p->n_groups > 1;
    if (p->max_seqs <= 0 || p->max_batch_tokens <= 0 || p->max_context <= 0 ||
        (!grouped && p->n_blocks <= 0) || p->block_size <= 0 || p->n_groups < 0 ||
        p->n_groups > TERN_MAX_KV_GROUPS)
        return tern_error(TERN_E_INVALID_ARG,
                          "sched: max_seqs (%d), max_batch_tokens (%d), max_context (%d), "
                          "n_blocks (%d) and block_size (%d) must all be > 0, n_groups (%d) at "
                          "most %d", p->max_seqs, p->max_batch_tokens, p->max_context,
                          p->n_blocks, p->block_size, p->n_groups, TERN_MAX_KV_GROUPS);
    for (int32_t g = 0; g < p->n_groups; g++)
        if ((grouped && p->group_blocks[g] <= 0) || p->group_window[g] < 0)
            return tern_error(TERN_E_INVALID_ARG, "sched: KV group %d has %d blocks, window %d",
                              g, p->group_blocks[g], p->group_window[g]);
    return TERN_OK;
}

/* The blocks a request of `total` tokens can hold at once in group g: all
 * of them in a full pool; in a windowed one its window, the largest chunk
 * and a partial block at either end. */
static int32_t group_need(const struct tern_sched *s, int32_t g, int32_t total)
{
    int32_t n = tern_kv_blocks_for(s->kv[g], total);
    int32_t w = tern_kv_window(s->kv[g]);
    if (!w) return n;
    int32_t bound = tern_kv_blocks_for(s->kv[g], w + s->p.max_batch_tokens) + 2;
    return n < bound ? n : bound;
}

enum tern_status tern_sched_create(const struct tern_sched_params *params, struct tern_sched **out)
{
    *out = NULL;
    TERN_TRY(check_params(params));
    struct tern_sched *s = tern_calloc(1, sizeof *s);
    if (!s) return TERN_E_NO_MEMORY;
    s->p = *params;
    s->n_groups = params->n_groups > 1 ? params->n_groups : 1;
    enum tern_status st = TERN_OK;
    for (int32_t g = 0; g < s->n_groups && st == TERN_OK; g++) {
        struct tern_kv_params kp = {params->n_groups > 1 ? params->group_blocks[g]
                                                         : params->n_blocks,
                                    params->block_size, params->enable_prefix_cache,
                                    params->n_groups >= 1 ? params->group_window[g] : 0};
        st = tern_kv_create(&kp, &s->kv[g]);
    }
    if (st != TERN_OK) goto fail;
    st = TERN_E_NO_MEMORY;
    int32_t ms = params->max_seqs;
    s->max_blocks_per_seq = tern_kv_blocks_for(s->kv[0], params->max_context);
    s->cap_copies = 2 * ms * s->n_groups;
    s->cap_finished = 2 * ms;
    bool tables_ok = true;
    for (int32_t g = 0; g < s->n_groups; g++) {
        s->table_store[g] = tern_calloc((size_t)ms * (size_t)s->max_blocks_per_seq, sizeof(int32_t));
        s->tables[g] = tern_calloc(ms, sizeof *s->tables[g]);
        tables_ok = tables_ok && s->table_store[g] && s->tables[g];
    }
    s->slot_seq = tern_calloc(ms, sizeof *s->slot_seq);
    s->free_slots = tern_calloc(ms, sizeof(int32_t));
    s->running = tern_calloc(ms, sizeof *s->running);
    s->ent_seq = tern_calloc(ms, sizeof *s->ent_seq);
    s->copy_owner = tern_calloc(s->cap_copies, sizeof *s->copy_owner);
    s->sample_seq = tern_calloc(ms, sizeof *s->sample_seq);
    s->sample_ent = tern_calloc(ms, sizeof(int32_t));
    s->out.entries = tern_calloc(ms, sizeof *s->out.entries);
    s->out.copies = tern_calloc(s->cap_copies, sizeof *s->out.copies);
    s->out.samples = tern_calloc(ms, sizeof *s->out.samples);
    s->out.preempted = tern_calloc(ms, sizeof *s->out.preempted);
    s->out.finished = tern_calloc(s->cap_finished, sizeof *s->out.finished);
    if (!tables_ok || !s->slot_seq || !s->free_slots || !s->running ||
        !s->ent_seq || !s->copy_owner || !s->sample_seq || !s->sample_ent || !s->out.entries ||
        !s->out.copies || !s->out.samples || !s->out.preempted || !s->out.finished)
        goto fail;
    for (int32_t i = 0; i < ms; i++) {
        for (int32_t g = 0; g < s->n_groups; g++)
            tern_kv_seq_init(&s->tables[g][i],
                             s->table_store[g] + (size_t)i * s->max_blocks_per_seq,
                             s->max_blocks_per_seq);
        s->free_slots[i] = ms - 1 - i; /* slot 0 is popped first */
    }
    s->n_free_slots = ms;
    s->next_id = 1;
    *out = s;
    return TERN_OK;
fail:
    tern_sched_destroy(s);
    return st;
}

static void req_list_free(struct req *r)
{
    while (r) {
        struct req *next = r->next;
        tern_free(r->stop_ids);
        tern_free(r->seqs[0].tokens);
        tern_free(r);
        r = next;
    }
}

void tern_sched_destroy(struct tern_sched *s)
{
    if (!s) return;
    req_list_free(s->live);
    req_list_free(s->grave);
    /* requests that ended but were not yet reported are on neither list */
    for (struct seq *q = s->done_head, *next; q; q = next) {
        struct req *r = q->req;
        next = q->dnext;
        if (r->n_live == 0 && --r->n_unreported == 0) {
            r->next = NULL;
            req_list_free(r);
        }
    }
    for (int32_t g = 0; g < TERN_MAX_KV_GROUPS; g++) {
        tern_kv_destroy(s->kv[g]);
        tern_free(s->table_store[g]);
        tern_free(s->tables[g]);
    }
    tern_free(s->slot_seq);
    tern_free(s->free_slots);
    tern_free(s->running);
    tern_free(s->ent_seq);
    tern_free(s->copy_owner);
    tern_free(s->sample_seq);
    tern_free(s->sample_ent);
    tern_free(s->out.entries);
    tern_free(s->out.copies);
    tern_free(s->out.samples);
    tern_free(s->out.preempted);
    tern_free(s->out.finished);
    tern_free(s);
}

/* ------------------------------------------------------------ queues */

static void wait_unlink(struct tern_sched *s, struct seq *q)
{
    if (q->wprev) q->wprev->wnext = q->wnext; else s->wait_head = q->wnext;
    if (q->wnext) q->wnext->wprev = q->wprev; else s->wait_tail = q->wprev;
    q->wprev = q->wnext = NULL;
    s->n_waiting--;
}

static void wait_push(struct tern_sched *s, struct seq *q, bool front)
{
    q->state = SEQ_WAITING;
    if (front) {
        q->wprev = NULL;
        q->wnext = s->wait_head;
        if (s->wait_head) s->wait_head->wprev = q; else s->wait_tail = q;
        s->wait_head = q;
    } else {
        q->wnext = NULL;
        q->wprev = s->wait_tail;
        if (s->wait_tail) s->wait_tail->wnext = q; else s->wait_head = q;
        s->wait_tail = q;
    }
    s->n_waiting++;
}

static void running_remove(struct tern_sched *s, struct seq *q)
{
    for (int32_t i = 0; i < s->n_running; i++) {
        if (s->running[i] != q) continue;
        memmove(&s->running[i], &s->running[i + 1], sizeof(*s->running) * (s->n_running - i - 1));
        s->n_running--;
        return;
    }
    TERN_ASSERT(!"sequence not in the running list");
}

static void running_insert(struct tern_sched *s, int32_t at, struct seq *q)
{
    TERN_ASSERT(s->n_running < s->p.max_seqs);
    memmove(&s->running[at + 1], &s->running[at], sizeof(*s->running) * (s->n_running - at));
    s->running[at] = q;
    s->n_running++;
}

static int32_t slot_take(struct tern_sched *s, struct seq *q)
{
    TERN_ASSERT(s->n_free_slots > 0);
    int32_t slot = s->free_slots[--s->n_free_slots];
    s->slot_seq[slot] = q;
    q->slot = slot;
    return slot;
}

static void slot_release(struct tern_sched *s, struct seq *q)
{
    for (int32_t g = 0; g < s->n_groups; g++) tern_kv_seq_free(s->kv[g], &s->tables[g][q->slot]);
    s->slot_seq[q->slot] = NULL;
    s->free_slots[s->n_free_slots++] = q->slot;
    q->slot = -1;
}

/* Slots a waiting sequence needs: its own, plus its unforked siblings'. */
static int32_t slots_needed(const struct seq *q)
{
    return (q->idx == 0 && !q->req->forked) ? q->req->n : 1;
}

/* ------------------------------------------------------------ submit, end */

enum tern_status tern_sched_check_fits(const struct tern_sched *s, int32_t n_prompt,
                                       int32_t max_tokens, int32_t n)
{
    int64_t total = (int64_t)n_prompt + max_tokens;
    if (total > s->p.max_context)
        return tern_error(TERN_E_CAPACITY,
                          "prompt (%d tokens) + max_tokens (%d) = %lld exceeds the context "
                          "length %d",
                          n_prompt, max_tokens, (long long)total, s->p.max_context);
    for (int32_t g = 0; g < s->n_groups; g++) {
        int32_t blocks = group_need(s, g, (int32_t)total), have = tern_kv_n_blocks(s->kv[g]);
        if (blocks > have)
            return tern_error(TERN_E_CAPACITY,
                              "prompt (%d tokens) + max_tokens (%d) needs %d KV blocks of %d "
                              "tokens%s, the whole pool has %d",
                              n_prompt, max_tokens, blocks, s->p.block_size,
                              s->n_groups > 1 ? " in a KV group" : "", have);
    }
    if (n > s->p.max_seqs)
        return tern_error(TERN_E_CAPACITY, "n = %d completions exceeds max_seqs %d", n,
                          s->p.max_seqs);
    return TERN_OK;
}

static enum tern_status check_request(const struct tern_sched *s, const struct tern_sched_request *r)
{
    if (!r->prompt || r->n_prompt < 1 || r->max_tokens < 0 || r->n < 1 || r->n_stop < 0 ||
        (r->n_stop > 0 && !r->stop_ids) || (r->max_tokens == 0 && r->n != 1))
        return tern_error(TERN_E_INVALID_ARG,
                          "sched: request needs a prompt of >= 1 token (got %d), max_tokens >= 1 "
                          "or 0 with n 1 (got %d, n %d) and a stop id list of %d ids",
                          r->n_prompt, r->max_tokens, r->n, r->n_stop);
    enum tern_status st = tern_sched_check_fits(s, r->n_prompt, r->max_tokens, r->n);
    return st == TERN_OK ? st : tern_error_prefix(st, "sched");
}

enum tern_status tern_sched_submit(struct tern_sched *s, const struct tern_sched_request *rq,
                                   uint64_t *out_id)
{
    *out_id = 0;
    TERN_TRY(check_request(s, rq));
    size_t cap = (size_t)rq->n_prompt + (size_t)rq->max_tokens;
    struct req *r = tern_calloc(1, sizeof *r + sizeof(struct seq) * (size_t)rq->n);
    int32_t *store = tern_calloc(cap * (size_t)rq->n, sizeof(int32_t));
    int32_t *stops = tern_calloc(rq->n_stop, sizeof(int32_t));
    if (!r || !store || !stops) {
        tern_free(r);
        tern_free(store);
        tern_free(stops);
        return TERN_E_NO_MEMORY;
    }
    if (rq->n_stop > 0) memcpy(stops, rq->stop_ids, sizeof(int32_t) * rq->n_stop);
    r->id = s->next_id++;
    r->user = rq->user;
    r->n_prompt = rq->n_prompt;
    r->max_tokens = rq->max_tokens;
    r->n = rq->n;
    r->n_stop = rq->n_stop;
    r->stop_ids = stops;
    r->no_cache = rq->no_prefix_cache;
    r->n_live = rq->n;
    for (int32_t i = 0; i < rq->n; i++) {
        struct seq *q = &r->seqs[i];
        q->req = r;
        q->idx = i;
        q->tokens = store + cap * (size_t)i;
        memcpy(q->tokens, rq->prompt, sizeof(int32_t) * rq->n_prompt);
        q->n_tokens = rq->n_prompt;
        q->slot = -1;
        q->sched_step = UINT64_MAX;
        q->state = SEQ_UNFORKED;
    }
    r->next = s->live;
    if (s->live) s->live->prev = r;
    s->live = r;
    s->n_live++;
    wait_push(s, &r->seqs[0], false);
    *out_id = r->id;
    return TERN_OK;
}

/* Ends a live sequence: frees its slot and blocks now, queues the report. */
static void seq_end(struct tern_sched *s, struct seq *q, enum tern_sched_finish reason)
{
    struct req *r = q->req;
    bool unforked_parent = q->idx == 0 && !r->forked;
    if (q->state == SEQ_WAITING) wait_unlink(s, q);
    if (q->state == SEQ_RUNNING) {
        running_remove(s, q);
        slot_release(s, q);
        if (unforked_parent) s->n_reserved -= r->n - 1;
    }
    q->state = SEQ_DONE;
    q->reason = reason;
    q->dnext = NULL;
    if (s->done_tail) s->done_tail->dnext = q; else s->done_head = q;
    s->done_tail = q;
    r->n_unreported++;
    if (--r->n_live == 0) {
        if (r->prev) r->prev->next = r->next; else s->live = r->next;
        if (r->next) r->next->prev = r->prev;
        r->prev = r->next = NULL;
        s->n_live--;
    }
    if (unforked_parent) /* its siblings never started: they end with it */
        for (int32_t i = 1; i < r->n; i++)
            if (r->seqs[i].state == SEQ_UNFORKED) seq_end(s, &r->seqs[i], reason);
}

static struct req *req_find(struct tern_sched *s, uint64_t id)
{
    for (struct req *r = s->live; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

enum tern_status tern_sched_cancel(struct tern_sched *s, uint64_t req_id)
{
    struct req *r = req_find(s, req_id);
    if (!r) return tern_error(TERN_E_NOT_FOUND, "sched: no live request with id %llu",
                              (unsigned long long)req_id);
    for (int32_t i = 0; i < r->n; i++)
        if (r->seqs[i].state != SEQ_DONE) seq_end(s, &r->seqs[i], TERN_SCHED_FINISH_CANCELLED);
    return TERN_OK;
}

enum tern_status tern_sched_stop(struct tern_sched *s, uint64_t req_id, int32_t seq_idx)
{
    struct req *r = req_find(s, req_id);
    if (!r || seq_idx < 0 || seq_idx >= r->n || r->seqs[seq_idx].state == SEQ_DONE)
        return tern_error(TERN_E_NOT_FOUND, "sched: no live sequence %d of request %llu", seq_idx,
                          (unsigned long long)req_id);
    seq_end(s, &r->seqs[seq_idx], TERN_SCHED_FINISH_STOP);
    return TERN_OK;
}

/* ------------------------------------------------------------ planning */

/* Moves ended sequences into out->finished (up to its capacity; the rest
 * wait for the next step) and requests whose every end is reported to the
 * grave, after freeing the previous grave. */
static void report_finished(struct tern_sched *s)
{
    req_list_free(s->grave);
    s->grave = NULL;
    struct tern_sched_out *o = &s->out;
    while (s->done_head && o->n_finished < s->cap_finished) {
        struct seq *q = s->done_head;
        s->done_head = q->dnext;
        if (!s->done_head) s->done_tail = NULL;
        struct req *r = q->req;
        bool req_done = --r->n_unreported == 0 && r->n_live == 0;
        o->finished[o->n_finished++] = (struct tern_sched_done){
            r->id, q->idx, r->user, q->reason, q->tokens, r->n_prompt, q->n_tokens, q->n_cached,
            req_done};
        if (req_done) {
            r->next = s->grave;
            s->grave = r;
        }
    }
}

static void entry_remove(struct tern_sched *s, struct seq *q)
{
    struct tern_sched_out *o = &s->out;
    for (int32_t i = 0; i < o->n_entries; i++) {
        if (s->ent_seq[i] != q) continue;
        s->budget += o->entries[i].n_new;
        memmove(&o->entries[i], &o->entries[i + 1], sizeof(*o->entries) * (o->n_entries - i - 1));
        memmove(&s->ent_seq[i], &s->ent_seq[i + 1], sizeof(*s->ent_seq) * (o->n_entries - i - 1));
        o->n_entries--;
        break;
    }
    int32_t k = 0;
    for (int32_t i = 0; i < o->n_copies; i++) {
        if (s->copy_owner[i] == q) continue;
        o->copies[k] = o->copies[i];
        s->copy_owner[k++] = s->copy_owner[i];
    }
    o->n_copies = k;
}

/* Preemption by recompute: blocks freed, generated tokens kept, back to the
 * front of the waiting queue. */
static void preempt(struct tern_sched *s, struct seq *q)
{
    struct req *r = q->req;
    if (q->sched_step == s->step) entry_remove(s, q);
    running_remove(s, q);
    slot_release(s, q);
    if (q->idx == 0 && !r->forked) s->n_reserved -= r->n - 1;
    wait_push(s, q, true);
    s->out.preempted[s->out.n_preempted++] =
        (struct tern_sched_preempted){r->id, q->idx, r->user};
}

static void entry_add(struct tern_sched *s, struct seq *q, int32_t n_new, int32_t n_cached)
{
    struct tern_sched_out *o = &s->out;
    const struct tern_kv_seq *t = &s->tables[0][q->slot];
    int32_t i = o->n_entries++;
    o->entries[i] = (struct tern_sched_entry){q->req->id, q->idx,      q->slot,
                                              t->n_computed, n_new,    n_cached,
                                              q->req->user};
    s->ent_seq[i] = q;
    q->sched_step = s->step;
    s->budget -= n_new;
}

/* Reserves blocks for n_new tokens of sequence q in every group, or in
 * none when one group lacks them (false). Copies it asks for are q's. */
static bool reserve_all(struct tern_sched *s, struct seq *q, int32_t n_new)
{
    struct tern_sched_out *o = &s->out;
    for (int32_t g = 0; g < s->n_groups; g++)
        if (tern_kv_seq_blocks_needed(s->kv[g], &s->tables[g][q->slot], n_new) >
            tern_kv_n_free(s->kv[g]))
            return false;
    for (int32_t g = 0; g < s->n_groups; g++) {
        int32_t n0 = o->n_copies;
        TERN_ASSERT(n0 + 2 <= s->cap_copies);
        bool ok = tern_kv_seq_reserve(s->kv[g], &s->tables[g][q->slot], n_new, o->copies,
                                      &o->n_copies);
        TERN_ASSERT(ok);
        for (int32_t i = n0; i < o->n_copies; i++) {
            s->copy_owner[i] = q;
            o->copies[i].group = g;
        }
    }
    return true;
}

/* Reserves blocks for n_new tokens of running sequence q, preempting the
 * newest running sequences until it fits. False when q itself was preempted. */
static bool reserve_or_preempt(struct tern_sched *s, struct seq *q, int32_t n_new)
{
    for (;;) {
        if (reserve_all(s, q, n_new)) return true;
        struct seq *victim = s->running[s->n_running - 1];
        preempt(s, victim);
        if (victim == q) return false;
    }
}

/* Passes 1 and 2: running decodes, then running prefill chunks. */
static void schedule_running(struct tern_sched *s)
{
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < s->n_running && s->budget > 0; i++) {
            struct seq *q = s->running[i];
            if (q->sched_step == s->step) continue;
            int32_t remaining = q->n_tokens - s->tables[0][q->slot].n_computed;
            TERN_ASSERT(remaining >= 1);
            if ((remaining == 1) != (pass == 0)) continue;
            int32_t n_new = remaining < s->budget ? remaining : s->budget;
            if (reserve_or_preempt(s, q, n_new)) entry_add(s, q, n_new, 0);
            else i--; /* q left the list; nothing after it moved (it was last) */
        }
    }
}

/* The longest cached prefix every group of slot's tables can serve (whole
 * blocks, short of q's last token), taken into all of them. */
static int32_t match_prefix(struct tern_sched *s, int32_t slot, struct seq *q)
{
    if (q->req->no_cache) return 0;
    int32_t n = q->n_tokens - 1;
    for (;;) {
        int32_t best = n;
        for (int32_t g = 0; g < s->n_groups; g++) {
            int32_t got = tern_kv_seq_match_prefix(s->kv[g], &s->tables[g][slot], q->tokens, n);
            if (got < best) best = got;
        }
        bool same = true;
        for (int32_t g = 0; g < s->n_groups; g++)
            same = same && s->tables[g][slot].n_computed == best;
        if (same) return best;
        /* a group served less: all try again up to that much (each round
         * lowers the bound, and 0 always agrees) */
        for (int32_t g = 0; g < s->n_groups; g++) tern_kv_seq_free(s->kv[g], &s->tables[g][slot]);
        n = best;
    }
}

/* Pass 3: admit waiting sequences in strict FCFS order. */
static void schedule_waiting(struct tern_sched *s)
{
    while (s->wait_head && s->budget > 0) {
        struct seq *q = s->wait_head;
        int32_t need = slots_needed(q);
        if (s->n_free_slots - s->n_reserved < need) break;
        int32_t slot = slot_take(s, q);
        int32_t n_cached = match_prefix(s, slot, q);
        int32_t remaining = q->n_tokens - n_cached;
        int32_t n_new = remaining < s->budget ? remaining : s->budget;
        if (!reserve_all(s, q, n_new)) {
            slot_release(s, q); /* gives the matched blocks back too */
            break;
        }
        wait_unlink(s, q);
        q->state = SEQ_RUNNING;
        s->n_reserved += need - 1;
        running_insert(s, s->n_running, q);
        if (!q->admitted_before) q->n_cached = n_cached;
        q->admitted_before = true;
        entry_add(s, q, n_new, n_cached);
    }
}

/* One sample row per entry whose chunk reaches the end of its tokens; n
 * rows (one per sibling) when it completes the prompt of an unforked n > 1
 * request; none for a prefill-only request. */
static void plan_samples(struct tern_sched *s)
{
    struct tern_sched_out *o = &s->out;
    for (int32_t e = 0; e < o->n_entries; e++) {
        struct seq *q = s->ent_seq[e];
        struct req *r = q->req;
        if (o->entries[e].start + o->entries[e].n_new != q->n_tokens || r->max_tokens == 0)
            continue;
        int32_t n = (q->idx == 0 && !r->forked) ? r->n : 1;
        for (int32_t k = 0; k < n; k++) {
            struct seq *t = k == 0 ? q : &r->seqs[k];
            int32_t i = o->n_samples++;
            o->samples[i] = (struct tern_sched_sample){r->id, t->idx, r->user, t->tokens,
                                                       r->n_prompt, t->n_tokens,
                                                       t->n_tokens - r->n_prompt, -1,
                                                       TERN_SCHED_FINISH_NONE};
            s->sample_seq[i] = t;
            s->sample_ent[i] = e;
        }
    }
}

struct tern_sched_out *tern_sched_schedule(struct tern_sched *s)
{
    struct tern_sched_out *o = &s->out;
    s->step++;
    o->n_entries = o->n_tokens = o->n_copies = o->n_samples = 0;
    o->n_preempted = o->n_finished = 0;
    report_finished(s);
    s->budget = s->p.max_batch_tokens;
    schedule_running(s);
    if (o->n_preempted == 0) schedule_waiting(s);
    plan_samples(s);
    for (int32_t e = 0; e < o->n_entries; e++) o->n_tokens += o->entries[e].n_new;
    TERN_ASSERT(o->n_tokens <= s->p.max_batch_tokens);
    return o;
}

/* ------------------------------------------------------------ batch */

void tern_sched_build_batch(const struct tern_sched *s, const struct tern_sched_batch_storage *st,
                            struct tern_batch *b)
{
    const struct tern_sched_out *o = &s->out;
    int32_t bs = s->p.block_size, mb = s->max_blocks_per_seq;
    size_t tables_n = (size_t)s->p.max_seqs * (size_t)mb, slots_n = (size_t)s->p.max_batch_tokens;
    int32_t t = 0;
    for (int32_t e = 0; e < o->n_entries; e++) {
        const struct seq *q = s->ent_seq[e];
        TERN_ASSERT(q->state == SEQ_RUNNING);
        const struct tern_sched_entry *en = &o->entries[e];
        st->query_start[e] = t;
        for (int32_t k = 0; k < en->n_new; k++, t++) {
            int32_t pos = en->start + k;
            st->token_ids[t] = q->tokens[pos];
            st->positions[t] = pos;
            for (int32_t g = 0; g < s->n_groups; g++)
                st->slot_mapping[g * slots_n + (size_t)t] =
                    tern_kv_seq_slot(&s->tables[g][q->slot], bs, pos);
        }
        st->seq_lens[e] = en->start + en->n_new;
        for (int32_t g = 0; g < s->n_groups; g++) {
            const struct tern_kv_seq *tab = &s->tables[g][q->slot];
            int32_t *row = st->block_tables + g * tables_n + (size_t)e * mb;
            for (int32_t j = 0; j < tab->n_blocks; j++) row[j] = tab->blocks[j] < 0 ? 0 : tab->blocks[j];
            memset(row + tab->n_blocks, 0, sizeof(int32_t) * (mb - tab->n_blocks));
        }
    }
    st->query_start[o->n_entries] = t;
    for (int32_t r = 0; r < o->n_samples; r++)
        st->logits_idx[r] = st->query_start[s->sample_ent[r] + 1] - 1;
    memset(b, 0, sizeof *b);
    b->n_tokens = t;
    b->n_seqs = o->n_entries;
    b->max_blocks_per_seq = mb;
    b->n_logits = o->n_samples;
    b->token_ids = st->token_ids;
    b->positions = st->positions;
    b->query_start = st->query_start;
    b->seq_lens = st->seq_lens;
    b->block_tables = st->block_tables;
    b->slot_mapping = st->slot_mapping;
    b->logits_idx = st->logits_idx;
    b->n_kv_groups = s->n_groups;
    for (int32_t g = 1; g < s->n_groups; g++) {
        b->group_block_tables[g] = st->block_tables + g * tables_n;
        b->group_slot_mapping[g] = st->slot_mapping + g * slots_n;
    }
}

/* ------------------------------------------------------------ commit */

/* The prompt of unforked n > 1 request r is complete in its parent p:
 * siblings take their reserved slots and share p's blocks. */
static void fork_siblings(struct tern_sched *s, struct seq *p)
{
    struct req *r = p->req;
    int32_t at = 0;
    while (s->running[at] != p) at++;
    for (int32_t i = 1; i < r->n; i++) {
        struct seq *c = &r->seqs[i];
        if (c->state != SEQ_UNFORKED) continue;
        int32_t slot = slot_take(s, c);
        for (int32_t g = 0; g < s->n_groups; g++)
            tern_kv_seq_fork(s->kv[g], &s->tables[g][p->slot], &s->tables[g][slot]);
        c->state = SEQ_RUNNING;
        c->n_cached = p->n_cached;
        c->admitted_before = true;
        running_insert(s, ++at, c);
    }
    s->n_reserved -= r->n - 1;
    r->forked = true;
}

static enum tern_sched_finish append_token(struct seq *q, int32_t tok)
{
    struct req *r = q->req;
    TERN_ASSERT(q->n_tokens < r->n_prompt + r->max_tokens);
    q->tokens[q->n_tokens++] = tok;
    for (int32_t i = 0; i < r->n_stop; i++)
        if (r->stop_ids[i] == tok) return TERN_SCHED_FINISH_STOP;
    if (q->n_tokens - r->n_prompt >= r->max_tokens) return TERN_SCHED_FINISH_LENGTH;
    return TERN_SCHED_FINISH_NONE;
}

void tern_sched_commit(struct tern_sched *s, const int32_t *sampled)
{
    struct tern_sched_out *o = &s->out;
    for (int32_t e = 0; e < o->n_entries; e++) {
        struct seq *q = s->ent_seq[e];
        if (q->state != SEQ_RUNNING) continue; /* ended during the step */
        for (int32_t g = 0; g < s->n_groups; g++)
            tern_kv_seq_commit(s->kv[g], &s->tables[g][q->slot], q->tokens, o->entries[e].n_new);
        const struct tern_kv_seq *t = &s->tables[0][q->slot];
        if (q->idx == 0 && !q->req->forked && q->req->n > 1 && t->n_computed == q->n_tokens)
            fork_siblings(s, q);
        else if (q->req->max_tokens == 0 && t->n_computed == q->n_tokens)
            seq_end(s, q, TERN_SCHED_FINISH_LENGTH); /* prefill only: done */
    }
    for (int32_t r = 0; r < o->n_samples; r++) {
        struct seq *q = s->sample_seq[r];
        struct tern_sched_sample *sm = &o->samples[r];
        if (q->state != SEQ_RUNNING) { /* dropped */
            sm->token = -1;
            sm->finish = q->state == SEQ_DONE ? q->reason : TERN_SCHED_FINISH_CANCELLED;
            continue;
        }
        sm->token = sampled[r];
        sm->finish = append_token(q, sampled[r]);
        if (sm->finish != TERN_SCHED_FINISH_NONE) seq_end(s, q, sm->finish);
    }
}

/* ------------------------------------------------------------ introspection */

struct tern_sched_caps tern_sched_get_caps(const struct tern_sched *s)
{
    return (struct tern_sched_caps){s->p.max_batch_tokens, s->p.max_seqs, s->max_blocks_per_seq,
                                    s->n_groups};
}

struct tern_kv *tern_sched_kv(struct tern_sched *s) { return s->kv[0]; }

struct tern_kv *tern_sched_kv_group(struct tern_sched *s, int32_t group)
{
    return group >= 0 && group < s->n_groups ? s->kv[group] : NULL;
}
int32_t tern_sched_n_waiting(const struct tern_sched *s) { return s->n_waiting; }
int32_t tern_sched_n_running(const struct tern_sched *s) { return s->n_running; }
int32_t tern_sched_n_requests(const struct tern_sched *s) { return s->n_live; }

const struct tern_kv_seq *tern_sched_slot_table_group(const struct tern_sched *s, int32_t slot,
                                                      int32_t group)
{
    if (slot < 0 || slot >= s->p.max_seqs || !s->slot_seq[slot] || group < 0 ||
        group >= s->n_groups)
        return NULL;
    return &s->tables[group][slot];
}

const struct tern_kv_seq *tern_sched_slot_table(const struct tern_sched *s, int32_t slot)
{
    return tern_sched_slot_table_group(s, slot, 0);
}
