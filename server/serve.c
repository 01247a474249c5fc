/*
 * serve.c — `tern serve`: option parsing and the server's lifecycle. The
 * socket listens first; the model loads on a second thread while /health
 * answers 503; SIGINT/SIGTERM stop accepting, let in-flight requests finish
 * for a grace period, cancel the rest, and exit 0. Depends on server.h,
 * cli/cli.h (flag helpers), pthreads, POSIX signals.
 */
#include "server.h"

#include "../cli/cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef TERN_HAVE_MHD

static const char USAGE[] =
    "usage: tern serve --model DIR|FILE.gguf [options]\n"
    "  --host ADDR            address to bind (default 127.0.0.1)\n"
    "  --port N               port (default 8080; 0 picks a free one)\n"
    "  --api-key KEY          require 'Authorization: Bearer KEY' (or TERN_API_KEY)\n"
    "  --served-model-name S  the model id in responses (default: the directory's or file's name)\n"
    "  --max-body-bytes N     largest request body (default 8388608)\n"
    "  --max-concurrent N     generation requests at once; more get 429 (default 0 = no limit)\n"
    "  --max-seqs N           sequences the engine batches (default: engine default)\n"
    "  --max-context N        tokens per sequence (default: the model's context length)\n"
    "  --max-batch-tokens N   tokens the engine computes per step (default: engine default)\n"
    "  --kv-bytes N[K|M|G]    KV cache budget in bytes (default: from --kv-fraction)\n"
    "  --kv-fraction F        share of free device memory for the KV cache, in (0, 1]\n"
    "  --device cpu|cuda|auto where the model runs (default auto)\n"
    "  --responses-max N      stored /v1/responses kept at most (default 1000; 0 = none)\n"
    "  --responses-max-age S  and for at most S seconds (default 3600)\n"
    "  --always-usage         streamed responses always end with a usage chunk\n"
    "  --keepalive-ms N       SSE keep-alive comment interval (default 5000)\n"
    "  --shutdown-grace-ms N  on SIGINT/SIGTERM, how long in-flight requests may run on\n"
    "                         before they are cancelled (default 15000)\n"
    "  --test-script FILE     testing: force each request's output to the next entry of a\n"
    "                         JSON list of token-id lists or strings\n"
    "  --test-admit-delay-ms N testing: pause each generation request this long between\n"
    "                         its admission and its start\n";

static bool parse_opts(int argc, char **argv, struct srv_opts *o, int *rc)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_body_bytes = 8u << 20;
    o->keepalive_ms = 5000;
    o->shutdown_grace_ms = 15000;
    o->device = TERN_DEVICE_AUTO;
    o->responses_max = 1000;
    o->responses_max_age_s = 3600;
    o->api_key = getenv("TERN_API_KEY");
    *rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            *rc = 0;
            return false;
        }
        if (!strcmp(a, "--always-usage")) {
            o->always_usage = true;
            continue;
        }
        if (!v) {
            cli_usage("serve", "unknown option or missing value: %s", a);
            return false;
        }
        i++;
        if (!strcmp(a, "--model")) o->model_dir = v;
        else if (!strcmp(a, "--host")) o->host = v;
        else if (!strcmp(a, "--api-key")) o->api_key = v;
        else if (!strcmp(a, "--served-model-name")) o->served_name = v;
        else if (!strcmp(a, "--test-script")) o->test_script = v;
        else if (!strcmp(a, "--device")) {
            if (!cli_parse_device("serve", v, &o->device)) return false;
        } else if (!strcmp(a, "--port")) {
            if (!cli_parse_int("serve", a, v, 0, 65535, &x)) return false;
            o->port = (int)x;
        } else if (!strcmp(a, "--max-body-bytes")) {
            if (!cli_parse_int("serve", a, v, 1024, 1ll << 32, &x)) return false;
            o->max_body_bytes = (size_t)x;
        } else if (!strcmp(a, "--max-concurrent")) {
            if (!cli_parse_int("serve", a, v, 0, 1 << 20, &x)) return false;
            o->max_concurrent = (int)x;
        } else if (!strcmp(a, "--max-seqs")) {
            if (!cli_parse_int("serve", a, v, 1, 1 << 16, &x)) return false;
            o->max_seqs = (int)x;
        } else if (!strcmp(a, "--max-batch-tokens")) {
            if (!cli_parse_int("serve", a, v, 16, 1 << 24, &x)) return false;
            o->max_batch_tokens = (int)x;
        } else if (!strcmp(a, "--kv-bytes")) {
            if (!cli_parse_bytes("serve", a, v, &o->kv_bytes)) return false;
        } else if (!strcmp(a, "--kv-fraction")) {
            if (!cli_parse_real("serve", a, v, 1e-6, 1.0, &o->kv_fraction)) return false;
        } else if (!strcmp(a, "--responses-max")) {
            if (!cli_parse_int("serve", a, v, 0, 1 << 24, &x)) return false;
            o->responses_max = (int)x;
        } else if (!strcmp(a, "--responses-max-age")) {
            if (!cli_parse_int("serve", a, v, 1, 1ll << 31, &x)) return false;
            o->responses_max_age_s = (int)x;
        } else if (!strcmp(a, "--max-context")) {
            if (!cli_parse_int("serve", a, v, 16, 1 << 24, &x)) return false;
            o->max_context = (int)x;
        } else if (!strcmp(a, "--keepalive-ms")) {
            if (!cli_parse_int("serve", a, v, 10, 3600000, &x)) return false;
            o->keepalive_ms = (int)x;
        } else if (!strcmp(a, "--test-admit-delay-ms")) {
            if (!cli_parse_int("serve", a, v, 0, 60000, &x)) return false;
            o->test_admit_delay_ms = (int)x;
        } else if (!strcmp(a, "--shutdown-grace-ms")) {
            if (!cli_parse_int("serve", a, v, 0, 3600000, &x)) return false;
            o->shutdown_grace_ms = (int)x;
        } else {
            cli_usage("serve", "unknown option %s", a);
            return false;
        }
    }
    if (!o->model_dir) {
        cli_usage("serve", "--model DIR|FILE.gguf is required");
        return false;
    }
    return true;
}

/* The served name: the model directory's last component. */
static const char *base_name(const char *dir, char *buf, size_t cap)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(buf, cap, "%.*s", (int)(n - b), dir + b);
    return buf[0] ? buf : "model";
}

/* --test-script: a JSON list of id lists or strings (tokenized without
 * special tokens). */
static bool load_script(struct srv *s, const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!json_is_array(root) || json_array_size(root) == 0) {
        fprintf(stderr, "tern serve: --test-script %s: want a non-empty JSON list (%s)\n", path, je.text);
        json_decref(root);
        return false;
    }
    size_t n = json_array_size(root);
    s->script = calloc(n, sizeof *s->script);
    s->script_n = calloc(n, sizeof *s->script_n);
    bool ok = s->script && s->script_n;
    for (size_t i = 0; ok && i < n; i++, s->n_script++) {
        json_t *e = json_array_get(root, i);
        if (json_is_string(e) && s->mc.tok) {
            int32_t *ids = NULL;
            size_t k = 0;
            ok = tern_tokenize(s->mc.tok, json_string_value(e), json_string_length(e), false, &ids, &k) == TERN_OK;
            s->script[i] = malloc((k ? k : 1) * sizeof *ids);
            if (ok && s->script[i]) memcpy(s->script[i], ids, k * sizeof *ids);
            s->script_n[i] = (int32_t)k;
            tern_free_buf(ids);
        } else if (json_is_array(e)) {
            size_t k = json_array_size(e);
            s->script[i] = malloc((k ? k : 1) * sizeof **s->script);
            for (size_t j = 0; s->script[i] && j < k; j++) {
                json_t *v = json_array_get(e, j);
                ok = ok && json_is_integer(v);
                s->script[i][j] = (int32_t)json_integer_value(v);
            }
            s->script_n[i] = (int32_t)k;
        } else {
            ok = false;
        }
        ok = ok && s->script[i];
    }
    json_decref(root);
    if (!ok) fprintf(stderr, "tern serve: --test-script %s: entries must be id lists or strings\n", path);
    return ok;
}

static void *load_main(void *arg)
{
    struct srv *s = arg;
    struct tern_model_params mp = tern_model_default_params();
    mp.device = s->o.device;
    enum tern_status st = tern_model_open(s->o.model_dir, &mp, &s->mc.model);
    if (st != TERN_OK) {
        fprintf(stderr, "tern serve: loading the model: %s\n", tern_last_error());
        goto fail;
    }
    struct tern_engine_params ep = tern_engine_default_params();
    if (s->o.max_seqs > 0) ep.max_seqs = s->o.max_seqs;
    if (s->o.max_context > 0) ep.max_context = s->o.max_context;
    if (s->o.max_batch_tokens > 0) ep.max_batch_tokens = s->o.max_batch_tokens;
    if (s->o.kv_bytes > 0) ep.kv_bytes = s->o.kv_bytes;
    if (s->o.kv_fraction > 0) ep.kv_fraction = s->o.kv_fraction;
    st = tern_engine_create(s->mc.model, &ep, &s->mc.engine);
    if (st == TERN_OK) st = tern_engine_start(s->mc.engine);
    if (st != TERN_OK) {
        fprintf(stderr, "tern serve: starting the engine: %s\n", tern_last_error());
        goto fail;
    }
    struct tern_model_info info;
    tern_model_get_info(s->mc.model, &info);
    s->mc.context_length = ep.max_context > 0 ? ep.max_context : info.context_length;
    s->mc.vocab_size = info.vocab_size;
    s->mc.tok = tern_model_tokenizer(s->mc.model);
    s->mc.tmpl = tern_model_chat_template(s->mc.model);
    if (s->mc.tok) {
        const char *b = tern_tokenizer_token(s->mc.tok, tern_tokenizer_bos_id(s->mc.tok));
        const char *e = tern_tokenizer_token(s->mc.tok, tern_tokenizer_eos_id(s->mc.tok));
        snprintf(s->bos, sizeof s->bos, "%s", b ? b : "");
        snprintf(s->eos, sizeof s->eos, "%s", e ? e : "");
        s->mc.reasoning = (tern_tokenizer_token_id(s->mc.tok, "<think>") >= 0 &&
                           tern_tokenizer_token_id(s->mc.tok, "</think>") >= 0) ||
                          (tern_tokenizer_token_id(s->mc.tok, "<|channel>") >= 0 &&
                           tern_tokenizer_token_id(s->mc.tok, "<channel|>") >= 0);
        s->mc.n_markers = srv_marker_tokens(s->mc.tok, s->mc.marker_ids, SRV_MAX_MARKERS);
    }
    s->mc.tool_fmt = srv_tool_format_detect(s->mc.tmpl, s->mc.tok);
    if (s->o.test_script && !load_script(s, s->o.test_script)) goto fail;
    /* Said before /health turns 200, so a client that saw ready can rely on it. */
    fprintf(stderr, "tern serve: model ready (%s, context %d, tool calls: %s)\n", s->mc.model_name,
            s->mc.context_length, srv_tool_format_name(s->mc.tool_fmt));
    atomic_store(&s->state, SRV_READY);
    return NULL;
fail:
    atomic_store(&s->state, SRV_FAILED);
    return NULL;
}

/* Waits for in-flight requests up to ms; true when none are left. */
static bool drain(struct srv *s, int ms)
{
    for (int t = 0; t < ms; t += 20) {
        if (atomic_load(&s->inflight) == 0) return true;
        srv_sleep_ms(20);
    }
    return atomic_load(&s->inflight) == 0;
}

static void cleanup(struct srv *s)
{
    for (int i = 0; i < s->n_script; i++) free(s->script[i]);
    free(s->script);
    free(s->script_n);
    tern_engine_destroy(s->mc.engine);
    tern_model_close(s->mc.model);
    srv_store_destroy(s->mc.store);
    pthread_mutex_destroy(&s->metrics_lock);
    pthread_mutex_destroy(&s->active_lock);
}

int tern_cmd_serve(int argc, char **argv)
{
    static struct srv s; /* one server per process */
    int rc;
    if (!parse_opts(argc, argv, &s.o, &rc)) return rc;
    char name[256];
    s.mc.model_name = s.o.served_name ? s.o.served_name : base_name(s.o.model_dir, name, sizeof name);
    s.mc.bos = s.bos;
    s.mc.eos = s.eos;
    s.mc.metrics = &s.metrics;
    s.mc.metrics_lock = &s.metrics_lock;
    s.mc.store = srv_store_create(s.o.responses_max, s.o.responses_max_age_s);
    if (!s.mc.store) {
        fprintf(stderr, "tern serve: out of memory\n");
        return 1;
    }
    srv_metrics_init(&s.metrics);
    pthread_mutex_init(&s.metrics_lock, NULL);
    pthread_mutex_init(&s.active_lock, NULL);
    atomic_store(&s.state, SRV_LOADING);

    /* Signals go to sigtimedwait below, never to a handler in another thread. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    int port = 0;
    if (!srv_http_start(&s, &port)) {
        cleanup(&s);
        return 1;
    }
    fprintf(stderr, "tern serve: listening on http://%s:%d (loading %s)\n", s.o.host, port, s.mc.model_name);
    pthread_t loader;
    if (pthread_create(&loader, NULL, load_main, &s)) {
        srv_http_stop(&s);
        cleanup(&s);
        return 1;
    }
    bool loaded = false;
    rc = 0;
    for (;;) {
        struct timespec ts = {0, 100 * 1000000};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) break;
        int st = atomic_load(&s.state);
        if (!loaded && st != SRV_LOADING) {
            pthread_join(loader, NULL);
            loaded = true;
            if (st == SRV_FAILED) {
                rc = 1;
                break;
            }
        }
    }
    fprintf(stderr, "tern serve: shutting down\n");
    /* `loaded` is only refreshed once per wait above: a model that became
     * ready within the last wait (and may already be serving requests) must
     * take the graceful path, not the loading one, which would close their
     * connections without a response. The loader stores the state last, so
     * joining it now is immediate. */
    if (!loaded && atomic_load(&s.state) != SRV_LOADING) {
        pthread_join(loader, NULL);
        loaded = true;
        if (atomic_load(&s.state) == SRV_FAILED) rc = 1;
    }
    if (!loaded) {
        /* A signal while loading: the loader may take long (or be stuck), so
         * leave it; the process ends with this return. */
        srv_http_quiesce(&s);
        srv_http_stop(&s);
        return rc;
    }
    /* New requests get 503 from here on; in-flight ones finish (or are
     * cancelled after the grace period). MHD_quiesce_daemon is not used: with
     * thread-per-connection it can drop a response that is being written. */
    atomic_store(&s.state, SRV_STOPPING);
    if (!drain(&s, s.o.shutdown_grace_ms)) {
        /* Cancelled requests still get a well-formed answer: a 503 error
         * body, or an error event and [DONE] on a stream. */
        srv_cancel_all(&s);
        drain(&s, 5000);
    }
    srv_http_stop(&s);
    cleanup(&s);
    return rc;
}

#else

int tern_cmd_serve(int argc, char **argv)
{
    fprintf(stderr, "tern serve: this build has no libmicrohttpd (install libmicrohttpd-dev)\n");
    return 1;
}

#endif
