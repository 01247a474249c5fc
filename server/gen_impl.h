/*
 * gen_impl.h — the inside of one generation (struct srv_gen), shared by gen.c,
 * which drives it, and the per-API output files (out_messages.c for
 * Anthropic Messages, out_responses.c for OpenAI Responses), which turn what
 * it produced into their events and bodies. Chat and legacy completions are
 * formatted in gen.c itself.
 *
 * Every API reads the same pipeline output. For Messages and Responses it is
 * also kept as an ordered list of blocks, each a run of reasoning, of text,
 * or one tool call, in the order the completion produced them:
 *
 *   "<think>a</think>b<tool_call>..</tool_call>"  ->  [reasoning "a"] [text "b"] [call 0]
 *
 * The streamed events are the blocks' open / delta / close, and the
 * non-streamed body is the finished list, so the two always agree.
 */
#ifndef TERN_GEN_IMPL_H
#define TERN_GEN_IMPL_H

#include "server.h"

enum srv_blk_kind { SRV_BLK_REASONING, SRV_BLK_TEXT, SRV_BLK_CALL };

struct srv_blk {
    enum srv_blk_kind kind;
    struct srv_buf text; /* REASONING / TEXT: the whole text so far */
    int call;            /* CALL: index into the choice's calls */
    char id[48];         /* an item id for the APIs that name blocks */
};

struct srv_choice {
    struct srv_stop stop;
    struct srv_reason reason;
    struct srv_tools tools;
    struct srv_buf content, reasoning; /* accumulated (non-streaming) */
    struct srv_tool_call *calls;
    int n_calls, n_calls_sent;
    json_t *logprobs; /* token logprob entries not yet sent (streaming) or all */
    int32_t n_tokens;
    int32_t n_reasoning_tokens; /* tokens read while inside the reasoning */
    bool done, role_sent;
    enum tern_finish_reason finish;
    int64_t last_ns;
    struct srv_blk *blks; /* Messages / Responses: the ordered blocks */
    int n_blks, cap_blks;
    bool blk_closed; /* the last block is closed (a call, or the end) */
};

struct srv_gen {
    const struct srv_model_ctx *mc;
    struct srv_req req;
    struct tern_stream *stream;
    struct srv_choice *ch;
    int n;
    char id[48];
    int64_t created, submit_ns;
    int32_t prompt_tokens, cached_tokens;
    bool final_seen, usage, timing_seen;
    enum tern_status status;
    char error[256];
    struct srv_buf sse;
    int64_t seq; /* Responses: the next event's sequence_number */
};

/* A JSON string from bytes; invalid UTF-8 becomes U+FFFD (gen.c). */
json_t *srv_jstr(const char *s, size_t n);
/* Appends one SSE event "event: NAME\ndata: JSON\n\n" (takes o). */
void srv_sse_event(struct srv_gen *g, const char *name, json_t *o);
/* The completion's usage counts: output tokens (all choices). */
int64_t srv_gen_output_tokens(const struct srv_gen *g);

/* Anthropic Messages (out_messages.c). */
void srv_msg_start(struct srv_gen *g);
void srv_msg_blk_open(struct srv_gen *g, int b);
void srv_msg_blk_delta(struct srv_gen *g, int b, const char *s, size_t n);
void srv_msg_blk_close(struct srv_gen *g, int b);
void srv_msg_final(struct srv_gen *g);
json_t *srv_msg_result(struct srv_gen *g);

/* OpenAI Responses (out_responses.c). */
void srv_resp_start(struct srv_gen *g);
void srv_resp_blk_open(struct srv_gen *g, int b);
void srv_resp_blk_delta(struct srv_gen *g, int b, const char *s, size_t n);
void srv_resp_blk_close(struct srv_gen *g, int b);
void srv_resp_final(struct srv_gen *g);
json_t *srv_resp_result(struct srv_gen *g);

#endif
