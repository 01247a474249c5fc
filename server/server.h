/*
 * server.h — internal interface of `tern serve`, the OpenAI-compatible HTTP
 * server. The server lives on include/tern.h, jansson, libmicrohttpd, libc
 * and pthreads; it never includes anything from src/.
 *
 * Files:
 *   text_pipe.c  stop-string matcher and reasoning splitter (pure)
 *   toolcall.c   tool-call parser: Hermes/Qwen JSON, Qwen3.5 XML, Llama 3 JSON,
 *                Gemma 4 (pure)
 *   toolchoice.c tool_choice required / named: the model's call format, the prefill
 *   req_parse.c  chat / completions request JSON -> struct srv_req, validation (pure; fuzzed)
 *   req_messages.c  Anthropic Messages request JSON -> struct srv_req (pure; fuzzed)
 *   req_responses.c OpenAI Responses request JSON -> struct srv_req (pure; fuzzed)
 *   req_embed.c  OpenAI embeddings request JSON -> struct srv_embed_req (pure; fuzzed)
 *   embed.c      one embeddings request: every input submitted, the vectors as
 *                floats or base64
 *   resp_store.c the bounded in-memory store of Responses (previous_response_id)
 *   metrics.c    server counters, histograms, Prometheus text (pure)
 *   gen.c        one generation: submit, read events, run the text pipeline,
 *                build chat / completions SSE chunks and final JSON
 *   out_messages.c, out_responses.c  the same generation as Anthropic Messages
 *                and OpenAI Responses events and bodies (gen_impl.h)
 *   http.c       routes, auth, errors, body reading (libmicrohttpd)
 *   serve.c      `tern serve`: options, lifecycle, signals
 *
 * Every API (chat completions, completions, Anthropic Messages, OpenAI
 * Responses) parses into the one request model, struct srv_req (messages in
 * the chat template's form, tools, sampling, the reasoning switch, stop
 * strings), so prompt building, generation, tool-call parsing and reasoning
 * splitting exist once. The text of every completion flows through one
 * pipeline, identical for streaming and non-streaming responses (so the two
 * always agree):
 *
 *   event text -> stop matcher -> reasoning splitter -> tool-call parser -> deltas
 */
#ifndef TERN_SERVER_H
#define TERN_SERVER_H

#include "tern.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------ growable buffer */

struct srv_buf {
    char *p;
    size_t len, cap;
};

bool srv_buf_add(struct srv_buf *b, const char *s, size_t n); /* keeps p NUL-terminated */
bool srv_buf_adds(struct srv_buf *b, const char *s);
bool srv_buf_printf(struct srv_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void srv_buf_consume(struct srv_buf *b, size_t n); /* drops the first n bytes */
void srv_buf_free(struct srv_buf *b);

/* Length of the longest proper suffix of s[0..n) that is a prefix of `tag`:
 * how much streamed text to hold back because it may begin `tag`
 * (text_pipe.c). */
size_t srv_partial_suffix(const char *s, size_t n, const char *tag);

/* ------------------------------------------------------------- stop strings */

#define SRV_MAX_STOP 16

/* Matches stop strings on decoded text across token boundaries. Text pushed in
 * comes out minus a held-back tail that could still begin a stop string; the
 * stop string itself is never emitted. The output ends at the earliest-starting
 * stop string of the whole text, however the text was split. */
struct srv_stop {
    char *stops[SRV_MAX_STOP];
    int n_stops;
    struct srv_buf pending;
    bool stopped;
    const char *matched; /* the stop string that matched (one of stops[]), or NULL */
};

/* Borrows nothing: the strings are copied. */
bool srv_stop_init(struct srv_stop *s, char *const *stops, int n_stops);
/* Appends `text`; writes the text now safe to emit into *out (appended). Returns
 * true when a stop string matched (then nothing more is emitted, ever). */
bool srv_stop_push(struct srv_stop *s, const char *text, size_t len, struct srv_buf *out);
/* End of output: emits what was held back; true when a held-back full match
 * turned out to be the stop. */
bool srv_stop_flush(struct srv_stop *s, struct srv_buf *out);
void srv_stop_deinit(struct srv_stop *s);

/* ---------------------------------------------------------------- reasoning */

/* How a model marks its reasoning: <think>...</think> (Qwen3, DeepSeek R1...)
 * or Gemma 4's thought channel <|channel>thought\n...<channel|>. */
enum srv_reason_fmt { SRV_RF_NONE, SRV_RF_THINK, SRV_RF_GEMMA4 };

/* The block a rendered prompt leaves open: its text ends (trailing whitespace
 * aside) with an opening tag; SRV_RF_NONE otherwise. */
enum srv_reason_fmt srv_reason_open_at_end(const char *text, size_t len);

/* Splits a reasoning block off the start of a completion: <think>...</think>
 * or <|channel>thought...<channel|>, whichever opens it. Reasoning text is
 * trimmed of surrounding whitespace, and whitespace right after the closing
 * tag is dropped. With `start_inside` (the generation prompt already opened
 * that block) the output begins as reasoning. With `enabled` false
 * everything is content. */
struct srv_reason {
    bool enabled;
    int state;            /* 0 = at start, 1 = reasoning, 2 = content (after the close or none) */
    const char *close;    /* closing tag of the open block */
    bool after_close;     /* dropping whitespace after the closing tag */
    bool reasoning_begun; /* any non-space reasoning emitted yet */
    struct srv_buf hold;  /* possible tag prefix / trailing whitespace */
};

void srv_reason_init(struct srv_reason *r, bool enabled, enum srv_reason_fmt start_inside);
/* Feeds text; appends to *reasoning and *content what is decided. */
void srv_reason_push(struct srv_reason *r, const char *text, size_t len, struct srv_buf *reasoning,
                     struct srv_buf *content);
void srv_reason_flush(struct srv_reason *r, struct srv_buf *reasoning, struct srv_buf *content);
void srv_reason_deinit(struct srv_reason *r);

/* ---------------------------------------------------------------- tool calls */

struct srv_tool_call {
    char id[32];     /* "call_" + 24 random alphanumerics */
    char *name;      /* malloc'd */
    char *arguments; /* malloc'd compact JSON object text */
};

/* Parses tool calls out of content text, incrementally. Recognised forms:
 *   <tool_call>{"name": N, "arguments": {...}}</tool_call>           Hermes / Qwen
 *   <tool_call><function=N><parameter=P>v</parameter></function></tool_call>  Qwen3.5 XML
 *   {"name": N, "parameters": {...}} [; {...}] as the whole output,
 *   optionally after <|python_tag|>                                  Llama 3.x
 *   <|tool_call>call:N{k:<|"|>v<|"|>,n:1}<tool_call|>                Gemma 4
 * A <tool_call> or <|tool_call> block that does not parse is passed on as
 * literal content. Whitespace next to recognised calls is dropped. */
struct srv_tools {
    bool enabled;
    const json_t *tools; /* borrowed: the request's tools (for XML parameter types) */
    int state; /* 0 start, 1 text, 2 in <tool_call>, 3 whole-output JSON, 4 in <|tool_call> */
    struct srv_buf hold; /* tag prefix, trailing whitespace, or the call being read */
    struct srv_buf ws;   /* whitespace held before a possible call */
    int n_calls;
    uint64_t rng;
};

void srv_tools_init(struct srv_tools *t, bool enabled, const json_t *tools, uint64_t seed);
/* Feeds content; appends decided content to *content and complete calls to
 * *calls (a growing array; *n_calls counts). Returns false on out of memory. */
bool srv_tools_push(struct srv_tools *t, const char *text, size_t len, struct srv_buf *content,
                    struct srv_tool_call **calls, int *n_calls);
bool srv_tools_flush(struct srv_tools *t, struct srv_buf *content, struct srv_tool_call **calls,
                     int *n_calls);
void srv_tools_deinit(struct srv_tools *t);
void srv_tool_call_free(struct srv_tool_call *c);

/* Parses one <tool_call> body (between the tags). Returns true on success. */
bool srv_tool_parse_block(const char *s, size_t len, const json_t *tools, char **name,
                          char **arguments);
/* Parses one Gemma 4 call body (between <|tool_call> and <tool_call|>):
 * call:NAME{key:value,...}. Values are <|"|>strings<|"|>, numbers, true,
 * false, null (or None), {nested:objects} and [arrays]; *arguments is their
 * compact JSON object text, numbers kept as written. Returns true on success. */
bool srv_tool_parse_gemma(const char *s, size_t len, char **name, char **arguments);
/* Parses a whole-output Llama 3 call list; fills a new array of calls. */
bool srv_tool_parse_llama(const char *s, size_t len, struct srv_tool_call **calls, int *n_calls,
                          uint64_t *rng);
void srv_tool_make_id(char id[32], uint64_t *rng);

/* ------------------------------------------------------------ request parse */

enum srv_kind { SRV_CHAT, SRV_COMPLETION }; /* how the prompt is made */
/* Which API the request came in through: how its output is written. */
enum srv_api { SRV_API_CHAT, SRV_API_COMPLETIONS, SRV_API_MESSAGES, SRV_API_RESPONSES };
enum srv_tool_choice { SRV_TC_AUTO, SRV_TC_NONE, SRV_TC_REQUIRED, SRV_TC_NAMED };

/* ------------------------------------------------------ tool_choice prefill */

/* How a model writes tool calls (toolcall.c parses them all). */
enum srv_tool_fmt { SRV_TF_HERMES, SRV_TF_XML, SRV_TF_LLAMA, SRV_TF_GEMMA4 };

/* Renders a probe tool call through the template (either may be NULL), then
 * looks at the vocabulary; Hermes when nothing tells. */
enum srv_tool_fmt srv_tool_format_detect(const struct tern_chat_template *tmpl,
                                         const struct tern_tokenizer *tok);
const char *srv_tool_format_name(enum srv_tool_fmt f);
/* The opening of a tool call to append to the prompt for tool_choice
 * "required" or a named function (malloc'd), or NULL for auto/none (or out of
 * memory). `open_reasoning`: the reasoning block the generation prompt left
 * open (closed first), SRV_RF_NONE when none. */
char *srv_tool_prefill(enum srv_tool_fmt f, enum srv_tool_choice choice, const char *name,
                       enum srv_reason_fmt open_reasoning);
/* The special tokens whose text the output pipeline needs (reasoning and
 * tool-call markers that the vocabulary marks special, which detokenizing
 * otherwise drops): fills ids[0..max) and returns how many. */
int srv_marker_tokens(const struct tern_tokenizer *tok, int32_t *ids, int max);

/* Request fields after validation. Sampling fields carry has_ flags so that
 * only what the client set overrides the model's defaults. */
struct srv_req {
    enum srv_kind kind;
    enum srv_api api;
    json_t *messages; /* CHAT: normalised copy for the template (content flattened) */
    json_t *tools;    /* CHAT: array or NULL */
    enum srv_tool_choice tool_choice;
    char *tool_name;         /* SRV_TC_NAMED */
    json_t *template_kwargs; /* object or NULL (chat_template_kwargs) */
    int enable_thinking;     /* -1 unset, 0, 1 */
    char *prompt;            /* COMPLETION: text prompt, or NULL */
    int32_t *prompt_ids;     /* COMPLETION: token prompt, or NULL */
    int32_t n_prompt_ids;

    bool has_temperature, has_top_p, has_top_k, has_min_p, has_rep, has_presence, has_frequency;
    float temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
    int32_t top_k;
    bool has_seed;
    uint64_t seed;
    int32_t max_tokens; /* 0 = until the context is full */
    int32_t n;
    bool logprobs;
    int32_t top_logprobs;
    bool ignore_eos;
    int32_t *bias_ids;
    float *bias_values;
    int32_t n_bias;
    char *stops[SRV_MAX_STOP];
    int n_stops;
    bool stream, include_usage;
    /* Responses only */
    bool store;           /* keep the response for GET and previous_response_id */
    char *previous_id;    /* previous_response_id, or NULL */
    int n_head;           /* messages before the input (the instructions' system message) */
    json_t *echo;         /* request fields the response object repeats */
};

/* A validation failure: message and the offending parameter (OpenAI shape). */
struct srv_err {
    int http;          /* 400, 413, ... */
    char message[512];
    char param[96];
    const char *type;  /* "invalid_request_error", ... */
    const char *code;  /* NULL or a code string */
};

struct srv_parse_opts {
    int32_t vocab_size; /* for logit_bias and token prompts; 0 = unchecked */
    int32_t max_n;      /* upper bound of n */
};

/* Parses a request body. Returns true with *out filled (srv_req_free it), or
 * false with *err filled; never crashes on any input. */
bool srv_req_parse(enum srv_kind kind, const char *body, size_t len,
                   const struct srv_parse_opts *opts, struct srv_req *out, struct srv_err *err);
void srv_req_free(struct srv_req *r);
/* Fills an error. */
void srv_err_set(struct srv_err *e, int http, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The chat template context: messages, tools, add_generation_prompt, bos/eos
 * strings, enable_thinking, chat_template_kwargs. New reference. */
json_t *srv_req_template_context(const struct srv_req *r, const char *bos, const char *eos);
/* {"error": {...}} as a compact JSON string (free()). */
char *srv_err_json(const struct srv_err *e);
/* The error body in the API's shape: Anthropic's {"type": "error", "error":
 * {"type", "message"}} for Messages, OpenAI's otherwise (free()). */
char *srv_err_body(const struct srv_err *e, enum srv_api api);

/* Field helpers shared by the request parsers (req_parse.c). A field absent
 * or null leaves *has false and succeeds. */
const char *srv_json_type_name(const json_t *v);
bool srv_get_num(json_t *root, const char *key, double lo, double hi, bool lo_open, bool *has,
                 float *out, struct srv_err *err);
bool srv_get_int(json_t *root, const char *key, long long lo, long long hi, bool *has,
                 long long *out, struct srv_err *err);
bool srv_get_bool(json_t *root, const char *key, bool *out, struct srv_err *err);
/* Checks the chat-form tools array r->tools against a tool_choice already set
 * (names, "no tools" cases); `param` names the field in errors. */
bool srv_check_tool_choice(struct srv_req *r, const char *param, struct srv_err *err);

/* Anthropic Messages (req_messages.c): a /v1/messages body, or with
 * `count_only` a /v1/messages/count_tokens body (no max_tokens). */
bool srv_messages_parse(const char *body, size_t len, bool count_only, struct srv_req *out,
                        struct srv_err *err);
/* OpenAI Responses (req_responses.c): a /v1/responses body. */
bool srv_responses_parse(const char *body, size_t len, struct srv_req *out, struct srv_err *err);

/* ------------------------------------------------------------- embeddings */

#define SRV_EMBED_MAX_INPUTS 2048

/* An OpenAI embeddings request (req_embed.c): n inputs, each text or ids. */
struct srv_embed_req {
    int n, cap;
    char **texts;    /* [n] text inputs (NULL where the input is ids) */
    int32_t **ids;   /* [n] token-id inputs (NULL where the input is text) */
    int32_t *n_ids;  /* [n] */
    bool base64;     /* encoding_format "base64" */
    int32_t dimensions; /* 0: the model's width */
    char *prompt_name;  /* tern's prompt_name, or NULL (the model's default prompt) */
};

/* Parses a /v1/embeddings body (token ids checked against opts->vocab_size).
 * True with *out filled (srv_embed_req_free it), or false with *err. */
bool srv_embed_parse(const char *body, size_t len, const struct srv_parse_opts *opts,
                     struct srv_embed_req *out, struct srv_err *err);
void srv_embed_req_free(struct srv_embed_req *r);

struct srv_model_ctx;
struct srv_embed;

/* Checks the request against the model (an embedding model, dimensions,
 * prompt, lengths), tokenizes text inputs as sentence-transformers does and
 * submits every input (embed.c). NULL with *err (400 naming the field).
 * Takes *req (zeroed). */
struct srv_embed *srv_embed_create(const struct srv_model_ctx *mc, struct srv_embed_req *req,
                                   struct srv_err *err);
/* Reads events for up to timeout_ms; true once every input has its vector. */
bool srv_embed_pump(struct srv_embed *x, int timeout_ms);
/* The response body (malloc'd) and its HTTP status, after pump said done. */
char *srv_embed_result(struct srv_embed *x, int *http);
/* Cancels what is still running, and frees. */
void srv_embed_destroy(struct srv_embed *x);

/* ------------------------------------------------------- response store */

/* Stored Responses by id: their response object and the conversation that
 * led to them (messages in template form, the output included), for GET
 * /v1/responses/{id} and previous_response_id. Bounded by count and by age;
 * the oldest go first. Thread-safe. */
struct srv_store;

struct srv_store *srv_store_create(int max_entries, int64_t max_age_s);
void srv_store_destroy(struct srv_store *s);
/* Takes both references. `now_s` is the caller's clock (seconds). */
bool srv_store_put(struct srv_store *s, const char *id, json_t *response, json_t *conv, int64_t now_s);
/* New references to an entry's parts (either out pointer may be NULL); false when gone. */
bool srv_store_get(struct srv_store *s, const char *id, int64_t now_s, json_t **response,
                   json_t **conv);
bool srv_store_delete(struct srv_store *s, const char *id);
int srv_store_count(struct srv_store *s);

/* ----------------------------------------------------------------- metrics */

#define SRV_HIST_MAX 20

struct srv_hist {
    int n_bounds;
    double bounds[SRV_HIST_MAX]; /* upper bounds in seconds, ascending (+Inf implied) */
    uint64_t counts[SRV_HIST_MAX + 1];
    double sum;
    uint64_t count;
};

enum srv_route {
    SRV_R_CHAT,
    SRV_R_COMPLETIONS,
    SRV_R_MODELS,
    SRV_R_HEALTH,
    SRV_R_METRICS,
    SRV_R_TOKENIZE,
    SRV_R_DETOKENIZE,
    SRV_R_MESSAGES,
    SRV_R_COUNT_TOKENS,
    SRV_R_RESPONSES,
    SRV_R_RESPONSE_ID, /* GET / DELETE /v1/responses/{id} */
    SRV_R_EMBEDDINGS,
    SRV_R_OTHER,
    SRV_R_COUNT
};

#define SRV_N_STATUS 12
struct srv_metrics {
    uint64_t requests[SRV_R_COUNT][SRV_N_STATUS];
    struct srv_hist ttft, itl, queue, e2e;
    uint64_t disconnects, rejected_capacity;
    uint64_t prompt_tokens[SRV_R_COUNT], completion_tokens[SRV_R_COUNT]; /* per route */
};

void srv_metrics_init(struct srv_metrics *m);
void srv_hist_observe(struct srv_hist *h, double v);
void srv_metrics_count(struct srv_metrics *m, enum srv_route route, int status);
/* Adds a finished generation's usage to its route's token counters. */
void srv_metrics_tokens(struct srv_metrics *m, enum srv_route route, int64_t prompt, int64_t completion);
/* The route of an API (for usage counters). */
enum srv_route srv_api_route(enum srv_api api);
const char *srv_route_name(enum srv_route r);
/* Prometheus text exposition of the server's counters and the engine stats
 * (NULL while loading). `inflight` is the server's own in-flight count. */
bool srv_metrics_format(const struct srv_metrics *m, const struct tern_engine_stats *es,
                        int64_t inflight, struct srv_buf *out);

/* ------------------------------------------------------------- generation */

#include <pthread.h>

#define SRV_MAX_MARKERS 16

/* What a generation needs of the loaded model (all borrowed). */
struct srv_model_ctx {
    struct tern_model *model;
    struct tern_engine *engine;
    const struct tern_tokenizer *tok;
    const struct tern_chat_template *tmpl;
    const char *bos, *eos; /* token strings, "" when unknown */
    int32_t context_length, vocab_size;
    const char *model_name;
    bool reasoning; /* the vocabulary has <think> / Gemma 4's channel: split reasoning */
    enum srv_tool_fmt tool_fmt; /* how tool_choice required / named are prefilled */
    int32_t marker_ids[SRV_MAX_MARKERS]; /* special tokens chat output keeps as text */
    int n_markers;
    struct srv_metrics *metrics;
    pthread_mutex_t *metrics_lock;
    struct srv_store *store; /* stored Responses */
};

/* Renders (chat) or takes (completion) the prompt and tokenizes it. *ids is
 * malloc'd. *think_open: the reasoning block the generation prompt ends
 * inside (SRV_RF_NONE when none). For
 * tool_choice required / named the prompt ends with the opening of a call,
 * also returned in *prefill (malloc'd, else NULL; pass NULL to not want it). */
bool srv_prompt_build(const struct srv_model_ctx *mc, const struct srv_req *r, int32_t **ids,
                      int32_t *n_ids, enum srv_reason_fmt *think_open, char **prefill,
                      struct srv_err *err);

struct srv_gen;

struct srv_gen_params {
    const int32_t *ids; /* prompt (borrowed during create) */
    int32_t n_ids;
    enum srv_reason_fmt think_open;
    const char *prefill;   /* text the prompt ends with that the output pipeline
                              takes as the start of every completion, or NULL */
    const int32_t *forced; /* --test-script entry, or NULL */
    int32_t n_forced;
    bool always_usage;
};

/* Submits a request (taking ownership of *req, which is zeroed). Returns NULL
 * with *err (400 for requests that cannot fit, 500 otherwise). */
struct srv_gen *srv_gen_create(const struct srv_model_ctx *mc, struct srv_req *req,
                               const struct srv_gen_params *p, struct srv_err *err);
/* Reads at most one event (waiting up to timeout_ms). Returns true once the
 * generation is over (every choice finished and the final event read). */
bool srv_gen_pump(struct srv_gen *g, int timeout_ms);
/* Streaming: SSE bytes ready to send (consume what was sent). */
struct srv_buf *srv_gen_sse(struct srv_gen *g);
bool srv_gen_streaming(const struct srv_gen *g);
/* Non-streaming: the response body (malloc'd) and its HTTP status. */
char *srv_gen_result(struct srv_gen *g, int *http);
/* Cancels the engine request (client gone, or shutdown). Thread-safe. */
void srv_gen_cancel(struct srv_gen *g);
void srv_gen_destroy(struct srv_gen *g);

/* ----------------------------------------------------------------- server */

#include <stdatomic.h>

struct srv_opts {
    const char *model_dir, *host, *api_key, *test_script, *served_name;
    int port;
    size_t max_body_bytes;
    int max_concurrent; /* generation requests at once; 0 = unlimited */
    int max_seqs;       /* engine sequences; 0 = engine default */
    int max_context;    /* tokens per sequence; 0 = the model's */
    int keepalive_ms;   /* SSE ": keep-alive" comment interval */
    int shutdown_grace_ms; /* in-flight requests may finish this long after SIGTERM */
    int test_admit_delay_ms; /* testing: a pause between a request's admission and its start */
    enum tern_device device;
    bool always_usage;
    double kv_fraction;       /* engine memory: 0 = engine default */
    long long kv_bytes;       /* 0 = from kv_fraction */
    int max_batch_tokens;     /* 0 = engine default */
    int responses_max;        /* stored Responses at most */
    int responses_max_age_s;  /* and for at most this long */
};

enum srv_state { SRV_LOADING, SRV_READY, SRV_STOPPING, SRV_FAILED };

struct srv_active; /* registry of running generations, for shutdown */

struct srv {
    struct srv_opts o;
    void *mhd; /* struct MHD_Daemon */
    atomic_int state;
    atomic_int inflight;
    struct srv_model_ctx mc;
    char bos[128], eos[128];
    struct srv_metrics metrics;
    pthread_mutex_t metrics_lock;
    pthread_mutex_t active_lock;
    struct srv_active *active;
    bool cancelling; /* srv_cancel_all ran: generations registered later are cancelled at once */
    int32_t **script; /* --test-script entries */
    int32_t *script_n;
    int n_script;
    atomic_uint script_next;
};

/* http.c: sleeps ms milliseconds. */
void srv_sleep_ms(int ms);
/* http.c: starts listening (the model may still be loading); fills *port. */
bool srv_http_start(struct srv *s, int *port);
/* Stops accepting new connections. */
void srv_http_quiesce(struct srv *s);
void srv_http_stop(struct srv *s);
/* Cancels every running generation, and every one registered from now on (a
 * request between its admission and its start when shutdown's grace ends). */
void srv_cancel_all(struct srv *s);

#endif
