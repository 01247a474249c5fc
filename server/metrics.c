/*
 * metrics.c — the server's counters and latency histograms, and their
 * Prometheus text exposition (format 0.0.4) together with the engine's
 * counters from tern_engine_get_stats. Pure: the caller holds the lock that
 * guards struct srv_metrics. Depends on libc.
 */
#include "server.h"

#include <stdio.h>
#include <string.h>

static const int status_codes[SRV_N_STATUS] = {200, 400, 401, 404, 405, 413, 429, 499, 500, 503, 0, 0};

static const double LAT_BOUNDS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                    0.5,   0.75,   1.0,   2.5,  5.0,   10.0, 20.0, 40.0, 80.0};

static void hist_init(struct srv_hist *h)
{
    memset(h, 0, sizeof *h);
    h->n_bounds = (int)(sizeof LAT_BOUNDS / sizeof LAT_BOUNDS[0]);
    memcpy(h->bounds, LAT_BOUNDS, sizeof LAT_BOUNDS);
}

void srv_metrics_init(struct srv_metrics *m)
{
    memset(m, 0, sizeof *m);
    hist_init(&m->ttft);
    hist_init(&m->itl);
    hist_init(&m->queue);
    hist_init(&m->e2e);
}

void srv_hist_observe(struct srv_hist *h, double v)
{
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

const char *srv_route_name(enum srv_route r)
{
    static const char *names[SRV_R_COUNT] = {
        "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics",
        "/tokenize", "/detokenize", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
        "/v1/responses/{id}", "/v1/embeddings", "other"};
    return r < SRV_R_COUNT ? names[r] : "other";
}

enum srv_route srv_api_route(enum srv_api api)
{
    switch (api) {
    case SRV_API_CHAT: return SRV_R_CHAT;
    case SRV_API_COMPLETIONS: return SRV_R_COMPLETIONS;
    case SRV_API_MESSAGES: return SRV_R_MESSAGES;
    case SRV_API_RESPONSES: return SRV_R_RESPONSES;
    }
    return SRV_R_OTHER;
}

void srv_metrics_tokens(struct srv_metrics *m, enum srv_route route, int64_t prompt, int64_t completion)
{
    if (route >= SRV_R_COUNT) route = SRV_R_OTHER;
    m->prompt_tokens[route] += (uint64_t)(prompt > 0 ? prompt : 0);
    m->completion_tokens[route] += (uint64_t)(completion > 0 ? completion : 0);
}

/* A counter family labelled by route, with the routes that have counts. */
static void fmt_by_route(struct srv_buf *o, const char *name, const char *help, const uint64_t *v)
{
    srv_buf_printf(o, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (int r = 0; r < SRV_R_COUNT; r++)
        if (v[r])
            srv_buf_printf(o, "%s{route=\"%s\"} %llu\n", name, srv_route_name((enum srv_route)r),
                           (unsigned long long)v[r]);
}

void srv_metrics_count(struct srv_metrics *m, enum srv_route route, int status)
{
    int k = SRV_N_STATUS - 1; /* "other" statuses share the last slot */
    for (int i = 0; i < SRV_N_STATUS - 2; i++)
        if (status_codes[i] == status) k = i;
    if (route >= SRV_R_COUNT) route = SRV_R_OTHER;
    m->requests[route][k]++;
}

static void fmt_hist(struct srv_buf *o, const char *name, const char *help, const struct srv_hist *h)
{
    srv_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        srv_buf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    srv_buf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
                   (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->count);
}

static void fmt_one(struct srv_buf *o, const char *name, const char *type, const char *help,
                    double v)
{
    srv_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

bool srv_metrics_format(const struct srv_metrics *m, const struct tern_engine_stats *es,
                        int64_t inflight, struct srv_buf *o)
{
    srv_buf_adds(o, "# HELP tern_http_requests_total HTTP requests by route and status code.\n"
                    "# TYPE tern_http_requests_total counter\n");
    for (int r = 0; r < SRV_R_COUNT; r++)
        for (int s = 0; s < SRV_N_STATUS; s++) {
            if (!m->requests[r][s]) continue;
            char code[8];
            if (status_codes[s]) snprintf(code, sizeof code, "%d", status_codes[s]);
            else snprintf(code, sizeof code, "other");
            srv_buf_printf(o, "tern_http_requests_total{route=\"%s\",status=\"%s\"} %llu\n",
                           srv_route_name((enum srv_route)r), code,
                           (unsigned long long)m->requests[r][s]);
        }
    fmt_by_route(o, "tern_route_prompt_tokens_total",
                 "Prompt tokens of finished generation requests, by route.", m->prompt_tokens);
    fmt_by_route(o, "tern_route_generation_tokens_total",
                 "Tokens generated for finished generation requests, by route.", m->completion_tokens);
    fmt_hist(o, "tern_time_to_first_token_seconds", "Time from submit to the first token.", &m->ttft);
    fmt_hist(o, "tern_inter_token_latency_seconds", "Time between tokens of one completion.", &m->itl);
    fmt_hist(o, "tern_request_queue_time_seconds", "Time a request waited before its first step.",
             &m->queue);
    fmt_hist(o, "tern_e2e_request_latency_seconds", "Time from submit to the last token.", &m->e2e);
    fmt_one(o, "tern_client_disconnects_total", "counter",
            "Generation requests whose client went away before the end.", (double)m->disconnects);
    fmt_one(o, "tern_server_rejected_total", "counter",
            "Requests refused because the server was over --max-concurrent.",
            (double)m->rejected_capacity);
    fmt_one(o, "tern_requests_inflight", "gauge", "Generation requests the server is handling.",
            (double)inflight);
    if (!es) return true;
    fmt_one(o, "tern_prompt_tokens_total", "counter", "Prompt tokens processed.",
            (double)es->prompt_tokens);
    fmt_one(o, "tern_generation_tokens_total", "counter", "Tokens generated.",
            (double)es->generated_tokens);
    fmt_one(o, "tern_prefix_cache_hit_tokens_total", "counter",
            "Prompt tokens served from the prefix cache.", (double)es->cached_prompt_tokens);
    fmt_one(o, "tern_kv_blocks_total", "gauge", "KV cache blocks in the pool.",
            (double)es->kv_blocks_total);
    fmt_one(o, "tern_kv_blocks_used", "gauge", "KV cache blocks in use.", (double)es->kv_blocks_used);
    fmt_one(o, "tern_kv_blocks_free", "gauge", "KV cache blocks free.", (double)es->kv_blocks_free);
    fmt_one(o, "tern_requests_running", "gauge", "Sequences being computed.", (double)es->running);
    fmt_one(o, "tern_requests_waiting", "gauge", "Sequences queued.", (double)es->waiting);
    fmt_one(o, "tern_preemptions_total", "counter", "Sequences preempted for KV space.",
            (double)es->preemptions);
    fmt_one(o, "tern_requests_finished_total", "counter", "Requests the engine finished.",
            (double)es->requests_finished);
    fmt_one(o, "tern_requests_rejected_total", "counter", "Requests the engine rejected at submit.",
            (double)es->requests_rejected);
    fmt_one(o, "tern_requests_cancelled_total", "counter", "Requests cancelled.",
            (double)es->requests_cancelled);
    fmt_one(o, "tern_engine_steps_total", "counter", "Engine steps run.", (double)es->steps);
    return true;
}
