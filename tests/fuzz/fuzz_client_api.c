/*
 * fuzz_client_api.c — libFuzzer target: arbitrary bytes as the body of an
 * Anthropic /v1/messages, /v1/messages/count_tokens or OpenAI /v1/responses
 * request (the first byte picks which), through their parsers onto the one
 * request model (server/req_messages.c, server/req_responses.c) and the chat
 * template context built from it. Errors must be 400-class with a one-line
 * message and serialise in both error shapes; an accepted request must hold
 * a non-empty message list whose every entry has a role, and a tool_choice
 * that names a function only when it is in the tools.
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(const struct srv_err *e)
{
    if (e->http != 400 && e->http != 500) abort();
    if (strchr(e->message, '\n')) abort();
    for (int api = SRV_API_CHAT; api <= SRV_API_RESPONSES; api++) {
        char *j = srv_err_body(e, (enum srv_api)api);
        if (!j) abort();
        free(j);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    int which = data[0] % 3;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    struct srv_req r;
    struct srv_err e;
    bool ok = which == 2 ? srv_responses_parse(body, len, &r, &e)
                         : srv_messages_parse(body, len, which == 1, &r, &e);
    if (!ok) {
        check_error(&e);
        return 0;
    }
    if (json_array_size(r.messages) == 0) abort();
    size_t i;
    json_t *m;
    json_array_foreach(r.messages, i, m) if (!json_is_string(json_object_get(m, "role"))) abort();
    if (r.tool_choice == SRV_TC_NAMED && (!r.tools || !r.tool_name)) abort();
    if (r.n_head < 0 || (size_t)r.n_head > json_array_size(r.messages)) abort();
    json_t *ctx = srv_req_template_context(&r, "<s>", "</s>");
    char *cj = ctx ? json_dumps(ctx, JSON_COMPACT) : NULL;
    if (!cj) abort();
    free(cj);
    json_decref(ctx);
    srv_req_free(&r);
    return 0;
}
