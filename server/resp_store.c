/*
 * resp_store.c — the bounded in-memory store of OpenAI Responses: each
 * stored response's object (GET /v1/responses/{id}) and its conversation in
 * chat-template form (previous_response_id). At most max_entries are kept,
 * none older than max_age_s; the oldest are dropped first. A list in
 * insertion order, guarded by one mutex; lookups are linear, which is cheap
 * next to a generation at the sizes it is meant for (thousands). Depends on
 * jansson, pthreads, libc.
 */
#include "server.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    char *id;
    json_t *response, *conv;
    int64_t created_s;
    struct entry *next;
};

struct srv_store {
    pthread_mutex_t lock;
    struct entry *head, *tail; /* oldest first */
    int n, max_entries;
    int64_t max_age_s;
};

struct srv_store *srv_store_create(int max_entries, int64_t max_age_s)
{
    struct srv_store *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->max_entries = max_entries;
    s->max_age_s = max_age_s;
    return s;
}

static void entry_free(struct entry *e)
{
    free(e->id);
    json_decref(e->response);
    json_decref(e->conv);
    free(e);
}

static void drop_head(struct srv_store *s)
{
    struct entry *e = s->head;
    s->head = e->next;
    if (!s->head) s->tail = NULL;
    s->n--;
    entry_free(e);
}

/* Drops what is over the age limit (and, to make room for one more, over the count). */
static void expire(struct srv_store *s, int64_t now_s, bool room)
{
    while (s->head && now_s - s->head->created_s > s->max_age_s) drop_head(s);
    while (s->head && s->n >= s->max_entries + (room ? 0 : 1)) drop_head(s);
}

void srv_store_destroy(struct srv_store *s)
{
    if (!s) return;
    while (s->head) drop_head(s);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

bool srv_store_put(struct srv_store *s, const char *id, json_t *response, json_t *conv, int64_t now_s)
{
    struct entry *e = s && s->max_entries > 0 ? calloc(1, sizeof *e) : NULL;
    if (!e || !response || !conv || !(e->id = strdup(id))) {
        json_decref(response);
        json_decref(conv);
        if (e) free(e);
        return false;
    }
    e->response = response;
    e->conv = conv;
    e->created_s = now_s;
    pthread_mutex_lock(&s->lock);
    expire(s, now_s, true);
    if (s->tail) s->tail->next = e;
    else s->head = e;
    s->tail = e;
    s->n++;
    pthread_mutex_unlock(&s->lock);
    return true;
}

static struct entry *find(struct srv_store *s, const char *id, struct entry **prev)
{
    *prev = NULL;
    for (struct entry *e = s->head; e; *prev = e, e = e->next)
        if (!strcmp(e->id, id)) return e;
    return NULL;
}

bool srv_store_get(struct srv_store *s, const char *id, int64_t now_s, json_t **response,
                   json_t **conv)
{
    if (!s) return false;
    pthread_mutex_lock(&s->lock);
    expire(s, now_s, false);
    struct entry *prev, *e = find(s, id, &prev);
    if (e) {
        if (response) *response = json_incref(e->response);
        if (conv) *conv = json_incref(e->conv);
    }
    pthread_mutex_unlock(&s->lock);
    return e != NULL;
}

bool srv_store_delete(struct srv_store *s, const char *id)
{
    if (!s) return false;
    pthread_mutex_lock(&s->lock);
    struct entry *prev, *e = find(s, id, &prev);
    if (e) {
        if (prev) prev->next = e->next;
        else s->head = e->next;
        if (s->tail == e) s->tail = prev;
        s->n--;
        entry_free(e);
    }
    pthread_mutex_unlock(&s->lock);
    return e != NULL;
}

int srv_store_count(struct srv_store *s)
{
    if (!s) return 0;
    pthread_mutex_lock(&s->lock);
    int n = s->n;
    pthread_mutex_unlock(&s->lock);
    return n;
}
