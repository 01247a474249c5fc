/*
 * fuzz_embed_request.c — libFuzzer target: arbitrary bytes as the body of
 * an OpenAI /v1/embeddings request through its parser
 * (server/req_embed.c). Errors must be 400-class (or 500 for memory) with a
 * one-line message that serialises; an accepted request must hold 1 to
 * SRV_EMBED_MAX_INPUTS inputs, each a non-empty text or a non-empty list of
 * ids inside the vocabulary, and dimensions 0 or positive.
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct srv_parse_opts po = {.vocab_size = 384, .max_n = 1};
    struct srv_embed_req r;
    struct srv_err e;
    if (!srv_embed_parse((const char *)data, size, &po, &r, &e)) {
        if ((e.http != 400 && e.http != 500) || strchr(e.message, '\n')) abort();
        char *j = srv_err_body(&e, SRV_API_CHAT);
        if (!j) abort();
        free(j);
        return 0;
    }
    if (r.n < 1 || r.n > SRV_EMBED_MAX_INPUTS || r.dimensions < 0) abort();
    for (int i = 0; i < r.n; i++) {
        if (r.texts[i] ? !*r.texts[i] || r.ids[i] : !r.ids[i] || r.n_ids[i] < 1) abort();
        for (int32_t k = 0; !r.texts[i] && k < r.n_ids[i]; k++)
            if (r.ids[i][k] < 0 || r.ids[i][k] >= po.vocab_size) abort();
    }
    srv_embed_req_free(&r);
    return 0;
}
