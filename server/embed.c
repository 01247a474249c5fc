/*
 * embed.c — one /v1/embeddings request: the model checked (an embedding
 * model: tern_model_embed_info), each text input tokenized as
 * sentence-transformers does (tern_embed_tokenize: the prompt first, special
 * tokens added) and each token input taken as it is, every input submitted
 * to the engine at once (so they share steps with each other and with
 * everything else running), the vectors read back in order, and the
 * response in OpenAI's shape: {"object": "list", "data": [{"object":
 * "embedding", "index": i, "embedding": [floats] or "base64 of
 * little-endian float32"}], "model": ..., "usage": {"prompt_tokens",
 * "total_tokens"}}. Depends on server.h (include/tern.h, jansson).
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

struct srv_embed {
    const struct srv_model_ctx *mc;
    struct srv_embed_req req;
    struct tern_stream **ss; /* [n] */
    float **vecs;            /* [n] the vectors read so far */
    int32_t *n_vec;          /* [n] */
    int64_t prompt_tokens;
    int next; /* the input being read */
    bool failed;
    struct srv_err err;
};

/* An error for input i (its field, "input" when there is one input). */
static void input_err(struct srv_embed *x, int i, int http, const char *msg)
{
    char param[32];
    if (x->req.n == 1) snprintf(param, sizeof param, "input");
    else snprintf(param, sizeof param, "input[%d]", i);
    srv_err_set(&x->err, http, param, "'%s': %s", param, msg);
}

/* Input i's token ids: text tokenized with the prompt, ids as given. */
static bool input_ids(struct srv_embed *x, int i, int32_t **ids, int32_t *n, int32_t *skip)
{
    const struct srv_embed_req *r = &x->req;
    *skip = 0;
    if (!r->texts[i]) {
        *ids = r->ids[i];
        *n = r->n_ids[i];
        return true;
    }
    size_t tn = 0;
    enum tern_status st = tern_embed_tokenize(x->mc->model, r->texts[i], strlen(r->texts[i]),
                                              r->prompt_name, ids, &tn, skip);
    if (st == TERN_E_INVALID_ARG && r->prompt_name) {
        srv_err_set(&x->err, 400, "prompt_name", "%s", tern_last_error());
        return false;
    }
    if (st != TERN_OK) {
        input_err(x, i, 400, tern_last_error());
        return false;
    }
    *n = (int32_t)tn;
    return true;
}

/* Tokenizes and submits input i. */
static bool submit(struct srv_embed *x, int i)
{
    int32_t *ids = NULL, n = 0, skip = 0;
    if (!input_ids(x, i, &ids, &n, &skip)) return false;
    bool owned = x->req.texts[i] != NULL;
    bool ok = false;
    char msg[160];
    if (n > x->mc->context_length) {
        snprintf(msg, sizeof msg, "%d tokens, more than the model's context length %d", n,
                 x->mc->context_length);
        input_err(x, i, 400, msg);
    } else {
        struct tern_request r = {0};
        r.ids = ids;
        r.n_ids = n;
        r.embed = true;
        r.dimensions = x->req.dimensions;
        r.pool_skip = skip;
        enum tern_status st = tern_engine_submit(x->mc->engine, &r, &x->ss[i]);
        if (st == TERN_OK) ok = true;
        else input_err(x, i, st == TERN_E_CAPACITY || st == TERN_E_INVALID_ARG ? 400 : 500,
                       tern_last_error());
        x->prompt_tokens += n;
    }
    if (owned) tern_free_buf(ids);
    return ok;
}

struct srv_embed *srv_embed_create(const struct srv_model_ctx *mc, struct srv_embed_req *req,
                                   struct srv_err *err)
{
    struct tern_embed_info info;
    if (tern_model_embed_info(mc->model, &info) != TERN_OK) {
        srv_err_set(err, 400, "model", "this model does not compute embeddings: %s",
                    tern_last_error());
        srv_embed_req_free(req);
        return NULL;
    }
    if (req->dimensions > info.dim) {
        srv_err_set(err, 400, "dimensions", "'dimensions' must be in [1, %d] for this model, got %d",
                    info.dim, req->dimensions);
        srv_embed_req_free(req);
        return NULL;
    }
    struct srv_embed *x = calloc(1, sizeof *x);
    if (x) {
        x->mc = mc;
        x->req = *req;
        memset(req, 0, sizeof *req);
        x->ss = calloc((size_t)x->req.n, sizeof *x->ss);
        x->vecs = calloc((size_t)x->req.n, sizeof *x->vecs);
        x->n_vec = calloc((size_t)x->req.n, sizeof *x->n_vec);
    }
    if (!x || !x->ss || !x->vecs || !x->n_vec) {
        srv_err_set(err, 500, NULL, "out of memory");
        srv_embed_req_free(req);
        srv_embed_destroy(x);
        return NULL;
    }
    for (int i = 0; i < x->req.n; i++)
        if (!submit(x, i)) {
            *err = x->err;
            srv_embed_destroy(x);
            return NULL;
        }
    return x;
}

bool srv_embed_pump(struct srv_embed *x, int timeout_ms)
{
    while (x->next < x->req.n && !x->failed) {
        struct tern_event ev;
        enum tern_status st = tern_stream_next(x->ss[x->next], timeout_ms, &ev);
        if (st == TERN_E_NOT_FOUND) return false; /* nothing yet */
        if (st != TERN_OK || (ev.final && ev.status != TERN_OK)) {
            x->failed = true;
            srv_err_set(&x->err, ev.status == TERN_E_CANCELLED ? 503 : 500, NULL,
                        "embedding input %d failed: %s", x->next,
                        st == TERN_OK && ev.error ? ev.error : tern_status_str(st));
            break;
        }
        if (!ev.final) continue;
        int i = x->next++;
        x->vecs[i] = malloc((size_t)(ev.n_embedding ? ev.n_embedding : 1) * sizeof(float));
        if (!x->vecs[i]) {
            x->failed = true;
            srv_err_set(&x->err, 500, NULL, "out of memory");
            break;
        }
        memcpy(x->vecs[i], ev.embedding, (size_t)ev.n_embedding * sizeof(float));
        x->n_vec[i] = ev.n_embedding;
        tern_stream_destroy(x->ss[i]);
        x->ss[i] = NULL;
        timeout_ms = 0; /* read on while vectors are there */
    }
    return true;
}

/* The vector as base64 of its little-endian float32 bytes. */
static json_t *base64_of(const float *v, int32_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nb = (size_t)n * 4, no = (nb + 2) / 3 * 4;
    unsigned char *b = malloc(nb ? nb : 1);
    char *o = malloc(no + 1);
    json_t *s = NULL;
    if (b && o) {
        for (int32_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)(u >> (8 * k));
        }
        size_t j = 0;
        for (size_t i = 0; i < nb; i += 3) {
            uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) |
                         (i + 2 < nb ? b[i + 2] : 0);
            o[j++] = tab[w >> 18 & 63];
            o[j++] = tab[w >> 12 & 63];
            o[j++] = i + 1 < nb ? tab[w >> 6 & 63] : '=';
            o[j++] = i + 2 < nb ? tab[w & 63] : '=';
        }
        o[j] = '\0';
        s = json_string(o);
    }
    free(b);
    free(o);
    return s;
}

char *srv_embed_result(struct srv_embed *x, int *http)
{
    if (x->failed || x->next < x->req.n) {
        if (!x->failed) srv_err_set(&x->err, 500, NULL, "the embeddings are not complete");
        *http = x->err.http;
        return srv_err_body(&x->err, SRV_API_CHAT);
    }
    json_t *data = json_array();
    for (int i = 0; i < x->req.n; i++) {
        json_t *e;
        if (x->req.base64) {
            e = base64_of(x->vecs[i], x->n_vec[i]);
        } else {
            e = json_array();
            for (int32_t k = 0; k < x->n_vec[i]; k++) json_array_append_new(e, json_real(x->vecs[i][k]));
        }
        json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", i,
                                              "embedding", e));
    }
    json_t *o = json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data,
                          "model", x->mc->model_name, "usage", "prompt_tokens",
                          (json_int_t)x->prompt_tokens, "total_tokens",
                          (json_int_t)x->prompt_tokens);
    char *body = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    pthread_mutex_lock(x->mc->metrics_lock);
    srv_metrics_tokens(x->mc->metrics, SRV_R_EMBEDDINGS, x->prompt_tokens, 0);
    pthread_mutex_unlock(x->mc->metrics_lock);
    *http = 200;
    return body;
}

void srv_embed_destroy(struct srv_embed *x)
{
    if (!x) return;
    for (int i = 0; i < x->req.n; i++) {
        if (x->ss) tern_stream_destroy(x->ss[i]); /* cancels one still running */
        if (x->vecs) free(x->vecs[i]);
    }
    free(x->ss);
    free(x->vecs);
    free(x->n_vec);
    srv_embed_req_free(&x->req);
    free(x);
}
