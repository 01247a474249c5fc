/*
 * stream.c — the event queue between the engine thread and a request's
 * reader (tern_stream_next / cancel / destroy).
 */
#include "engine/stream.h"

#include <errno.h>
#include <string.h>
#include <time.h>

static void node_free(struct tern_ev_node *n)
{
    if (!n) return;
    tern_free(n->text);
    tern_free(n->error);
    tern_free(n);
}

void tern_stream_push(struct tern_stream *s, const struct tern_event *ev, const char *text,
                      size_t text_len, const char *error)
{
    struct tern_ev_node *n = tern_calloc(1, sizeof *n);
    if (!n) return; /* out of memory: the event is lost, the final one is retried below */
    n->ev = *ev;
    n->text = tern_strndup(text ? text : "", text ? text_len : 0);
    n->ev.text = n->text;
    n->ev.text_len = n->text ? text_len : 0;
    if (error) n->error = tern_strdup(error);
    n->ev.error = n->error;
    if (ev->n_top > 0) {
        memcpy(n->top_ids, ev->top_ids, (size_t)ev->n_top * sizeof(int32_t));
        memcpy(n->top_lp, ev->top_logprobs, (size_t)ev->n_top * sizeof(float));
    }
    n->ev.top_ids = n->top_ids;
    n->ev.top_logprobs = n->top_lp;
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = n;
    else s->head = n;
    s->tail = n;
    if (ev->type == TERN_EVENT_DONE && ev->final) s->final_queued = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void stream_free(struct tern_stream *s)
{
    struct tern_ev_node *n = s->head;
    while (n) {
        struct tern_ev_node *next = n->next;
        node_free(n);
        n = next;
    }
    node_free(s->current);
    if (s->detok)
        for (int i = 0; i < s->sp.n; i++) tern_detok_stream_destroy(s->detok[i]);
    tern_free(s->detok);
    tern_free(s->prompt);
    tern_free(s->stop_ids);
    tern_free(s->bias_ids);
    tern_free(s->bias_values);
    tern_free(s->forced);
    tern_free(s->acc);
    tern_free(s->vec);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    tern_free(s);
}

void tern_stream_unref(struct tern_stream *s)
{
    pthread_mutex_lock(&s->mu);
    int left = --s->refs;
    pthread_mutex_unlock(&s->mu);
    if (left == 0) stream_free(s);
}

enum tern_status tern_stream_next(struct tern_stream *s, int timeout_ms, struct tern_event *ev)
{
    if (!s || !ev) return tern_error(TERN_E_INVALID_ARG, "tern_stream_next: NULL argument");
    pthread_mutex_lock(&s->mu);
    node_free(s->current);
    s->current = NULL;
    if (s->final_read) {
        pthread_mutex_unlock(&s->mu);
        return tern_error(TERN_E_INVALID_ARG, "stream: the final event was already read");
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    if (timeout_ms > 0) {
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    while (!s->head) {
        if (timeout_ms == 0) break;
        if (timeout_ms < 0) pthread_cond_wait(&s->cv, &s->mu);
        else if (pthread_cond_timedwait(&s->cv, &s->mu, &deadline) == ETIMEDOUT) break;
    }
    struct tern_ev_node *n = s->head;
    if (!n) {
        pthread_mutex_unlock(&s->mu);
        return TERN_E_NOT_FOUND;
    }
    s->head = n->next;
    if (!s->head) s->tail = NULL;
    s->current = n;
    if (n->ev.type == TERN_EVENT_DONE && n->ev.final) s->final_read = true;
    *ev = n->ev;
    pthread_mutex_unlock(&s->mu);
    return TERN_OK;
}

void tern_stream_cancel(struct tern_stream *s)
{
    if (!s) return;
    /* A finished stream never touches its engine again (which may be gone). */
    pthread_mutex_lock(&s->mu);
    bool final = s->final_queued;
    pthread_mutex_unlock(&s->mu);
    if (final) return;
    struct tern_engine *e = s->engine;
    atomic_store(&s->cancel_asked, true);
    pthread_mutex_lock(&e->mu);
    if (!s->in_cancel_list && !s->final_queued) {
        s->in_cancel_list = true;
        pthread_mutex_lock(&s->mu);
        s->refs++; /* the cancel list holds a reference */
        pthread_mutex_unlock(&s->mu);
        s->cancel_next = e->cancel_head;
        e->cancel_head = s;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

void tern_stream_destroy(struct tern_stream *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    bool done = s->final_queued;
    pthread_mutex_unlock(&s->mu);
    if (!done) tern_stream_cancel(s);
    tern_stream_unref(s);
}
