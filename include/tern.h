/*
 * tern.h — the public C API of tern, an LLM inference engine.
 *
 * Everything a program needs to load a Hugging Face model snapshot, run it,
 * and read back tokens or logits. The `tern` command and the HTTP server are
 * built on this header alone. It includes only libc headers and compiles as
 * C11 and as C++.
 *
 * Conventions:
 *   - Fallible functions return `enum tern_status` (TERN_OK == 0). On failure
 *     `tern_last_error()` gives a one-line message for the calling thread that
 *     names the file, tensor, key or field that was wrong.
 *   - Objects are opaque handles. Whoever creates destroys:
 *     `tern_x_open/create` pairs with `tern_x_close/destroy`; passing NULL
 *     to a destroy function is a no-op.
 *   - Parameter structs are initialised with `tern_x_default_params()`.
 */
#ifndef TERN_H
#define TERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TERN_VERSION_MAJOR 0
#define TERN_VERSION_MINOR 1
#define TERN_VERSION_PATCH 0

/* Status codes and their strings come from this one list. */
#define TERN_STATUS_LIST(X)                                                                        \
    X(TERN_OK, "ok")                                                                               \
    X(TERN_E_INVALID_ARG, "invalid argument")                                                      \
    X(TERN_E_IO, "i/o error")                                                                      \
    X(TERN_E_FORMAT, "malformed input")                                                            \
    X(TERN_E_UNSUPPORTED, "unsupported")                                                           \
    X(TERN_E_NOT_FOUND, "not found")                                                               \
    X(TERN_E_NO_MEMORY, "out of memory")                                                           \
    X(TERN_E_DEVICE, "device error")                                                               \
    X(TERN_E_CAPACITY, "over capacity")                                                            \
    X(TERN_E_CANCELLED, "cancelled")                                                               \
    X(TERN_E_TEMPLATE, "template error")                                                           \
    X(TERN_E_INTERNAL, "internal error")

enum tern_status {
#define TERN_X_ENUM(name, str) name,
    TERN_STATUS_LIST(TERN_X_ENUM)
#undef TERN_X_ENUM
        TERN_STATUS_COUNT
};

/* A static string describing the code ("malformed input"). Never NULL. */
const char *tern_status_str(enum tern_status status);

/* The message of the last failure on the calling thread ("" if none). The
 * pointer is valid until the next tern call on this thread. */
const char *tern_last_error(void);

/* Library version as "MAJOR.MINOR.PATCH". */
const char *tern_version(void);

/* ---------------------------------------------------------------- logging */

enum tern_log_level { TERN_LOG_DEBUG, TERN_LOG_INFO, TERN_LOG_WARN, TERN_LOG_ERROR, TERN_LOG_NONE };

/* Messages at or above `level` go to stderr (default TERN_LOG_WARN). The only
 * global setting in the library. */
void tern_log_set_level(enum tern_log_level level);

/* ------------------------------------------------------------------ model */

/* A loaded model: architecture, weights (mmapped, and on the device when the
 * backend has one), tokenizer and chat template when the snapshot has them.
 * Immutable after open; may be shared by several engines. */
struct tern_model;

enum tern_device { TERN_DEVICE_CPU = 0, TERN_DEVICE_CUDA = 1, TERN_DEVICE_AUTO = 2 };

struct tern_model_params {
    enum tern_device device; /* where the weights live and the forward runs (default
                              * TERN_DEVICE_AUTO: the GPU when there is one) */
    int device_index;        /* which GPU, for TERN_DEVICE_CUDA */
    bool progress;           /* print a progress line while loading large models */
};

struct tern_model_params tern_model_default_params(void);

/* Opens a Hugging Face snapshot directory (config.json, *.safetensors, and
 * optionally tokenizer files and generation_config.json), or a GGUF file
 * (llama, qwen2, qwen3: the config, tokenizer and chat template come from
 * its metadata; its ggml block types run as they are on the CPU and are
 * dequantized to BF16 at load on CUDA). Validates every tensor against the
 * config before returning. */
enum tern_status tern_model_open(const char *dir, const struct tern_model_params *params,
                                 struct tern_model **out);
void tern_model_close(struct tern_model *model);

/* Facts about a model, for `tern inspect` and friends. Strings are owned by the
 * model. */
struct tern_model_info {
    const char *architecture; /* config.json architectures[0] */
    const char *model_type;   /* config.json model_type */
    const char *dtype;        /* dominant weight dtype: "bf16", "f16", "f32", "q4", ..., or
                               * a GGUF's ggml block type as bound: "Q4_1", "Q4_K", ... */
    int64_t n_params;         /* parameters, counting quantized values as one each */
    int64_t weight_bytes;     /* bytes of weight data */
    int64_t decode_bytes;     /* weight bytes one decode step reads: all but the rows of an
                                 untied embedding table other than the token's own, and
                                 but the experts a token is not routed to */
    int32_t n_layers, n_embd, n_heads, n_kv_heads, head_dim, n_ff;
    int32_t vocab_size;
    int32_t context_length; /* max_position_embeddings */
    int32_t bos_id, eos_id; /* -1 when unknown */
    bool tied_embeddings;
    bool has_tokenizer;
    bool has_chat_template;
    int32_t n_unused_tensors; /* tensors in the files that the architecture does not use */
    enum tern_device device;  /* where the model runs (CPU or CUDA, never AUTO) */
    /* KV cache one sequence of n tokens holds (in blocks of 16 tokens, in the
     * cache dtype of the device): kv_bytes_per_token * n for the layers that
     * attend to everything, plus at most kv_bytes_windowed for the
     * sliding-window layers, whatever n (they keep only their window). */
    int64_t kv_bytes_per_token;
    int64_t kv_bytes_windowed;
    /* Mixture of experts: experts per MoE layer and how many a token uses
     * (0 and 0 for a dense model). */
    int32_t n_experts, n_experts_used;
};

enum tern_status tern_model_get_info(const struct tern_model *model, struct tern_model_info *out);

/* What tern makes of a model without loading it (tern_model_check). */
struct tern_model_support {
    char architecture[128]; /* config.json architectures[0] ("" when it has none) */
    char model_type[64];    /* config.json model_type ("" when it has none) */
    char family[32];        /* the tern family that plans it ("llama", "gemma4", ...), or "" */
    bool supported;         /* tern_model_open would load it */
    /* When not supported: the first feature tern lacks, or the first
     * inconsistency, as tern_model_open's error names it (the architecture,
     * a config.json key, or a tensor). */
    char reason[1024];
    int32_t n_unused_tensors; /* tensors in the files that the architecture does not use */
};

/* Checks a Hugging Face snapshot directory or a GGUF file without loading
 * its weights: config.json is read and every layer planned as
 * tern_model_open does, and every tensor the plan needs is looked up, with
 * its dtype and shape, in the safetensors headers (or the GGUF's tensor
 * table). Returns TERN_OK when the check ran: out->supported says whether
 * tern runs the model and out->reason why not. Returns an error (and fills
 * only what it could) when there is no readable config: no such path, no
 * config.json, a config.json that is not JSON, a file that is not GGUF. */
enum tern_status tern_model_check(const char *path, struct tern_model_support *out);

/* Describes a GGUF file (llama.cpp's format) from its metadata alone, without
 * loading weights, for `tern inspect`: the architecture and its sizes,
 * tensors counted by type, the tokenizer kind and whether a chat template is
 * present. "name  value" lines, or one JSON object when `json`, in a new
 * NUL-terminated buffer (tern_free_buf). Errors name the file. */
enum tern_status tern_gguf_describe(const char *path, bool json, char **out);

/* ----------------------------------------------------------------- engine */

/* An engine owns the mutable state of inference over one model: KV cache,
 * scratch buffers, scheduler, sampling. */
struct tern_engine;

struct tern_engine_params {
    int32_t max_seqs;         /* concurrent sequences (default 16) */
    int32_t max_batch_tokens; /* tokens per step (default 2048) */
    int32_t max_context;      /* tokens per sequence; 0 = the model's context length */
    int32_t block_size;       /* KV block size in tokens (default 16) */
    int64_t kv_bytes;         /* KV cache budget in bytes; 0 = derive from kv_fraction */
    double kv_fraction;       /* share of free device memory for KV, when kv_bytes is 0 */
    int32_t n_threads;        /* CPU threads; 0 = all cores */
    bool deterministic;       /* batch-invariant kernels on CUDA (always true on CPU) */
};

/* What the two modes guarantee (CUDA; the CPU backend is always deterministic).
 *
 *   deterministic = true   batch invariance: a sequence's tokens and logits
 *       are bitwise the same whether it runs alone or inside any batch, and
 *       from run to run, process to process (one matmul algorithm per weight
 *       shape, fixed attention splits). Costs decode throughput at small
 *       batches (docs/perf/batched.md has the measured price).
 *   deterministic = false (default)   the same batch on the same engine gives
 *       bitwise the same result (no atomics; graph replay and op-by-op runs
 *       agree bitwise), but a sequence's results can differ in the last bits
 *       with what else is in the batch (matmul kernels and attention splits
 *       follow the batch size), and a new process may pick another matmul
 *       algorithm. Greedy outputs can therefore part at near-ties.
 *
 * The mode belongs to the model's device backend: an engine created with
 * deterministic = true or false sets it for every engine on that model. */

struct tern_engine_params tern_engine_default_params(void);

enum tern_status tern_engine_create(struct tern_model *model, const struct tern_engine_params *params,
                                    struct tern_engine **out);
void tern_engine_destroy(struct tern_engine *engine);

/* Greedy generation from token ids, one sequence, blocking. Writes up to
 * `max_tokens` generated ids into `out_ids` and their count into `*n_out`.
 * Stops early at the model's end-of-sequence ids when `stop_at_eos`. */
enum tern_status tern_generate_greedy(struct tern_engine *engine, const int32_t *ids, int32_t n_ids,
                                      int32_t max_tokens, bool stop_at_eos, int32_t *out_ids,
                                      int32_t *n_out);

/* Logits of every position of one token sequence, as float32, row-major
 * [n_ids, vocab_size], written into `out` (caller's storage of
 * n_ids * vocab_size floats). */
enum tern_status tern_logits(struct tern_engine *engine, const int32_t *ids, int32_t n_ids,
                             float *out);

/* ------------------------------------------------------------- embeddings */

/* How an embedding model turns the final hidden states of an input's tokens
 * (after the final norm: transformers' last_hidden_state) into one vector:
 * sentence-transformers' Pooling module. */
enum tern_pooling {
    TERN_POOLING_NONE = 0, /* in a request: the model's own; in tern_embed_info: none */
    TERN_POOLING_LAST,     /* the last token's state (pooling_mode_lasttoken: Qwen3-Embedding) */
    TERN_POOLING_MEAN,     /* the mean over the tokens (pooling_mode_mean_tokens) */
    TERN_POOLING_CLS       /* the first token's state (pooling_mode_cls_token) */
};

/* An embedding model as its snapshot describes it: sentence-transformers'
 * modules.json (the Transformer, Pooling and Normalize modules), the
 * Pooling module's config.json (e.g. 1_Pooling/config.json) and
 * config_sentence_transformers.json (prompts). Strings are owned by the
 * model. */
struct tern_embed_info {
    enum tern_pooling pooling;
    bool normalize;          /* modules.json lists a Normalize module: vectors are L2-normalised */
    bool include_prompt;     /* false: mean pooling leaves a prompt's tokens out */
    int32_t dim;             /* vector width (hidden_size) */
    int32_t n_prompts;       /* named prompts, e.g. "query" -> "Instruct: ...\nQuery:" */
    const char *const *prompt_names; /* [n_prompts] */
    const char *const *prompts;      /* [n_prompts] the text put before an input */
    const char *default_prompt;      /* default_prompt_name, or NULL */
};

/* TERN_OK with *out filled when the model is an embedding model tern runs;
 * otherwise TERN_E_UNSUPPORTED with the reason, naming the file ("DIR: no
 * modules.json: not a sentence-transformers embedding model", "modules.json:
 * module 2 is sentence_transformers.models.Dense, which tern does not
 * run", ...). */
enum tern_status tern_model_embed_info(const struct tern_model *model, struct tern_embed_info *out);

/* Tokenizes one input of an embedding model as sentence-transformers does:
 * the prompt `prompt_name` (NULL: the model's default prompt, if any; ""
 * none) before the text, special tokens added (Qwen3-Embedding's tokenizer
 * appends <|endoftext|>). *ids is new (tern_free_buf); *pool_skip is the
 * number of leading tokens the prompt takes when the model's include_prompt
 * is false (0 otherwise): pass it in the request. An unknown prompt name is
 * TERN_E_INVALID_ARG naming the ones there are. */
enum tern_status tern_embed_tokenize(const struct tern_model *model, const char *text, size_t len,
                                     const char *prompt_name, int32_t **ids, size_t *n_ids,
                                     int32_t *pool_skip);

/* ---------------------------------------------------------------- serving */

/* Serving, in short: open a model, create an engine, submit requests, read
 * each request's events until the final one, destroy what you created.
 *
 *     struct tern_model *model = NULL;
 *     struct tern_engine *engine = NULL;
 *     if (tern_model_open("/models/Qwen3-0.6B", NULL, &model) != TERN_OK ||
 *         tern_engine_create(model, NULL, &engine) != TERN_OK) {  // NULL: default params
 *         fprintf(stderr, "%s\n", tern_last_error());
 *         goto out;
 *     }
 *     int32_t prompt[] = {9707, 1879};          // token ids, e.g. from tern_tokenize
 *     struct tern_request req = {0};
 *     req.ids = prompt;                         // copied by submit
 *     req.n_ids = 2;
 *     req.sampling = tern_sampling_default_params();  // greedy
 *     req.sampling.max_tokens = 64;
 *     req.detokenize = true;                    // fill ev.text (needs the tokenizer)
 *     struct tern_stream *s = NULL;
 *     if (tern_engine_submit(engine, &req, &s) != TERN_OK) {  // e.g. TERN_E_CAPACITY
 *         fprintf(stderr, "%s\n", tern_last_error());
 *         goto out;
 *     }
 *     struct tern_event ev;
 *     while (tern_stream_next(s, -1, &ev) == TERN_OK) {  // -1: wait as long as it takes
 *         if (ev.type == TERN_EVENT_TOKEN) {
 *             fwrite(ev.text, 1, ev.text_len, stdout);
 *         } else if (ev.final) {                // the DONE of the last completion
 *             if (ev.status != TERN_OK) fprintf(stderr, "%s\n", ev.error);
 *             printf("\n[%d prompt tokens, %d cached, %d generated]\n", ev.prompt_tokens,
 *                    ev.cached_tokens, ev.completion_tokens);
 *             break;
 *         }
 *     }
 *     tern_stream_destroy(s);
 *   out:
 *     tern_engine_destroy(engine);
 *     tern_model_close(model);
 *
 * Any number of threads may submit and read streams at once: the engine's
 * own step thread batches every running request (continuous batching,
 * chunked prefill) and reuses the KV blocks of prompts that share a prefix.
 * `tern bench --concurrency` (cli/bench_batch.c) drives it this way with one
 * reader thread per stream. */

/* Per-request sampling. Initialise with tern_sampling_default_params(), which
 * gives greedy decoding; tern_engine_sampling_defaults() gives the model's
 * generation_config.json values. Processors apply in this order: penalties,
 * logit_bias, temperature, top_k, top_p, min_p, then sampling. On a CUDA
 * engine this runs on the device (the same draws as the CPU sampler; only
 * ids and requested logprobs leave the GPU); TERN_GPU_SAMPLE=0 in the
 * environment sends the logits to the CPU sampler instead. */
struct tern_sampling_params {
    float temperature;        /* 0 = greedy */
    int32_t top_k;            /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float repetition_penalty; /* 1 = off (HF definition, over prompt + output) */
    float presence_penalty;   /* 0 = off (OpenAI definition, over output) */
    float frequency_penalty;  /* 0 = off */
    uint64_t seed;            /* used when has_seed; else a per-request random seed */
    bool has_seed;
    int32_t max_tokens;      /* generated tokens at most (>= 1) */
    bool ignore_eos;         /* keep going past end-of-sequence ids */
    const int32_t *stop_ids; /* extra stop token ids (borrowed during submit) */
    int32_t n_stop_ids;
    const int32_t *bias_ids; /* logit_bias: ids and values (borrowed during submit) */
    const float *bias_values;
    int32_t n_bias;
    int32_t logprobs; /* -1 = none; 0..20 = logprob of the chosen token plus this many top */
    int32_t n;        /* parallel completions sharing the prompt (>= 1) */
};

struct tern_sampling_params tern_sampling_default_params(void);
/* The model's generation_config.json defaults over tern_sampling_default_params(). */
struct tern_sampling_params tern_model_sampling_defaults(const struct tern_model *model);

enum tern_finish_reason {
    TERN_FINISH_NONE = 0, /* still running */
    TERN_FINISH_STOP,     /* end-of-sequence or a stop id */
    TERN_FINISH_LENGTH,   /* max_tokens or the context length */
    TERN_FINISH_CANCELLED,
    TERN_FINISH_ERROR
};

enum tern_event_type {
    TERN_EVENT_TOKEN, /* one generated token of completion `index` */
    TERN_EVENT_DONE   /* completion `index` finished; for the last one, `final` is true */
};

/* One event of a request's stream. Pointers are valid until the next
 * tern_stream_next call on the same stream. */
struct tern_event {
    enum tern_event_type type;
    int32_t index;      /* which of the n completions */
    int32_t token;      /* TOKEN: the id */
    const char *text;   /* TOKEN: complete UTF-8 newly decodable (may be empty) */
    size_t text_len;
    float logprob;      /* TOKEN, when logprobs >= 0: log p(token) under the raw distribution */
    int32_t n_top;      /* TOKEN: entries in top_ids / top_logprobs */
    const int32_t *top_ids;
    const float *top_logprobs;
    enum tern_finish_reason finish; /* DONE */
    bool final;                     /* DONE: no more events follow */
    enum tern_status status;        /* DONE: TERN_OK, or why it failed */
    const char *error;              /* DONE: message when status != TERN_OK */
    int32_t prompt_tokens;          /* DONE: usage */
    int32_t cached_tokens;          /* DONE: prompt tokens served from the prefix cache */
    int32_t completion_tokens;      /* DONE: tokens of this completion */
    int64_t queue_ns, ttft_ns;      /* DONE: time queued, time to first token */
    const float *embedding;         /* DONE of an embedding request: the vector, */
    int32_t n_embedding;            /* n_embedding values (0 otherwise) */
};

/* A submitted request. */
struct tern_stream;

struct tern_request {
    const int32_t *ids; /* prompt token ids (borrowed during submit) */
    int32_t n_ids;
    struct tern_sampling_params sampling;
    bool detokenize; /* fill event text (needs the model's tokenizer) */
    /* Testing hook: emit these ids in order instead of sampling (the forward,
     * KV cache, streaming and detokenization all run as usual). NULL = off. */
    const int32_t *forced_ids;
    int32_t n_forced;
    /* An embedding request (embed = true): the prompt is prefilled and no
     * token is generated (sampling, detokenize and forced ids are ignored);
     * the final DONE event carries the pooled vector (ev.embedding). It
     * shares steps with every other request. Its KV blocks are freed when
     * it ends (the full ones stay in the prefix cache; last-token pooling
     * may start from a cached prefix, mean and CLS pooling compute every
     * token). A vector does not depend on the other requests in the batch
     * (bitwise on the CPU; on CUDA in deterministic mode). */
    bool embed;
    enum tern_pooling pooling; /* NONE: the model's pooling and normalisation
                                * (tern_model_embed_info; else TERN_E_UNSUPPORTED
                                * with the reason); else this pooling on any model */
    bool normalize;            /* with an explicit pooling: L2-normalise the vector */
    int32_t dimensions;        /* 0: the full width; else the first `dimensions` values
                                * (Matryoshka truncation), L2-normalised again when the
                                * vector is normalised */
    int32_t pool_skip;         /* mean pooling leaves out the first pool_skip tokens
                                * (tern_embed_tokenize says how many a prompt takes) */
};

/* Starts the engine's step loop on its own thread (idempotent). Submitting
 * starts it too. */
enum tern_status tern_engine_start(struct tern_engine *engine);

/* Queues a request. A prompt + max_tokens that cannot fit the context or the
 * KV pool is rejected here (TERN_E_CAPACITY) with the numbers in the message,
 * never truncated; so is an embedding input longer than the context. A
 * generation request on a model without a language-model head (an
 * embedding model that ships none) is TERN_E_UNSUPPORTED. Thread-safe. */
enum tern_status tern_engine_submit(struct tern_engine *engine, const struct tern_request *req,
                                    struct tern_stream **out);

/* Waits up to timeout_ms (-1 = forever) for the next event. Returns TERN_OK
 * with an event, TERN_E_NOT_FOUND when the wait timed out (no message is
 * set), or TERN_E_INVALID_ARG after the final event was already read. */
enum tern_status tern_stream_next(struct tern_stream *s, int timeout_ms, struct tern_event *ev);

/* Cancels the request in whatever phase it is (queued, prefill, decode); its
 * KV blocks are freed within one engine step; a final DONE event with
 * TERN_FINISH_CANCELLED follows. Thread-safe. */
void tern_stream_cancel(struct tern_stream *s);

/* Cancels if still running and frees the stream. Streams may outlive their
 * engine: destroying an engine ends every stream with a final CANCELLED
 * event, after which the stream only needs tern_stream_destroy. */
void tern_stream_destroy(struct tern_stream *s);

/* Engine counters, for /metrics. */
struct tern_engine_stats {
    int32_t running, waiting;
    int32_t kv_blocks_total, kv_blocks_used, kv_blocks_free;
    int64_t requests_finished, requests_cancelled, requests_rejected, preemptions;
    int64_t prompt_tokens, generated_tokens, cached_prompt_tokens;
    int64_t steps;
};

enum tern_status tern_engine_get_stats(struct tern_engine *engine, struct tern_engine_stats *out);

/* ------------------------------------------------------------------- text */

/* Buffers the library allocates and hands over (ids, text) are freed with this. */
void tern_free_buf(void *p);

/* A Hugging Face tokenizer (tokenizer.json + tokenizer_config.json).
 * Immutable after open; safe to share between threads. */
struct tern_tokenizer;

/* Opens the tokenizer files in `dir`. Unsupported components give
 * TERN_E_UNSUPPORTED naming them ("unsupported normalizer 'Precompiled'"). */
enum tern_status tern_tokenizer_open(const char *dir, struct tern_tokenizer **out);
void tern_tokenizer_close(struct tern_tokenizer *tok);

/* The model's tokenizer (borrowed), or NULL when its snapshot has none. */
const struct tern_tokenizer *tern_model_tokenizer(const struct tern_model *model);

int32_t tern_tokenizer_vocab_size(const struct tern_tokenizer *tok);
int32_t tern_tokenizer_bos_id(const struct tern_tokenizer *tok); /* -1 if none */
int32_t tern_tokenizer_eos_id(const struct tern_tokenizer *tok); /* -1 if none */
/* The token's string as stored in the vocabulary (e.g. "Ġhello"), or NULL. */
const char *tern_tokenizer_token(const struct tern_tokenizer *tok, int32_t id);
/* The id of a token string, or -1. */
int32_t tern_tokenizer_token_id(const struct tern_tokenizer *tok, const char *token);
/* True for special (control) added tokens. */
bool tern_tokenizer_is_special(const struct tern_tokenizer *tok, int32_t id);

/* Encodes `len` bytes of text. `add_special` adds what the post-processor and
 * tokenizer_config's add_bos_token/add_eos_token ask for; text rendered from
 * a chat template is encoded with add_special = false. Ids are returned in a
 * new buffer (*ids, free with tern_free_buf). */
enum tern_status tern_tokenize(const struct tern_tokenizer *tok, const char *text, size_t len,
                               bool add_special, int32_t **ids, size_t *n_ids);

/* Decodes ids into UTF-8 text (new NUL-terminated buffer, tern_free_buf).
 * Special tokens are dropped when `skip_special`. An id outside [0,
 * tern_tokenizer_vocab_size) is an error; one inside it that names no token
 * (a gap in the vocab's ids) decodes to nothing, as in the tokenizers library. */
enum tern_status tern_detokenize(const struct tern_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                 bool skip_special, char **text, size_t *len);

/* Streaming detokenizer: feed ids one at a time; each push returns only
 * complete UTF-8 (possibly empty), and the pieces concatenate to
 * tern_detokenize of the whole sequence. */
struct tern_detok_stream;
enum tern_status tern_detok_stream_create(const struct tern_tokenizer *tok, bool skip_special,
                                          struct tern_detok_stream **out);
/* Appends the new text to *piece (borrowed, valid until the next call). */
enum tern_status tern_detok_stream_push(struct tern_detok_stream *s, int32_t id,
                                        const char **piece, size_t *piece_len);
/* Returns what is still held back (an incomplete character at the end, emitted as U+FFFD). */
enum tern_status tern_detok_stream_flush(struct tern_detok_stream *s, const char **piece,
                                         size_t *piece_len);
void tern_detok_stream_destroy(struct tern_detok_stream *s);

/* A chat template (a Jinja2 subset interpreter, rendering as transformers does). */
struct tern_chat_template;

/* Compiles template source; syntax errors give the template line. */
enum tern_status tern_chat_template_create(const char *source, size_t len,
                                           struct tern_chat_template **out);
/* Loads the template of a model directory: chat_template.jinja, else
 * tokenizer_config.json's chat_template (a string, or the list of named
 * templates, where `name` picks one; NULL = "default"). */
enum tern_status tern_chat_template_load(const char *dir, const char *name,
                                         struct tern_chat_template **out);
void tern_chat_template_destroy(struct tern_chat_template *t);
/* The model's chat template (borrowed), or NULL when it has none. */
const struct tern_chat_template *tern_model_chat_template(const struct tern_model *model);

/* Renders with the variables of a JSON object (messages, tools,
 * add_generation_prompt, bos_token, eos_token, ...). The output is a new
 * NUL-terminated buffer (tern_free_buf). raise_exception() and runtime
 * errors give TERN_E_TEMPLATE with the template line. */
enum tern_status tern_chat_template_render(const struct tern_chat_template *t,
                                           const char *context_json, char **out, size_t *out_len);

/* ----------------------------------------------------------- quantization */

/* One module's quantization, overriding the defaults: bits 0 keeps it dense. */
struct tern_quantize_override {
    const char *module; /* module path, e.g. "model.layers.0.mlp.down_proj" or "lm_head" */
    int32_t bits;       /* 2, 3, 4, 5, 6, 8; 0 = leave unquantized */
    int32_t group_size; /* 32, 64, 128 */
};

struct tern_quantize_params {
    int32_t bits;       /* default 4 */
    int32_t group_size; /* default 64 */
    const char *mode;   /* "affine" (the only mode) */
    const struct tern_quantize_override *overrides; /* n_overrides entries, may be NULL */
    int32_t n_overrides;
    bool progress; /* print a progress line on stderr */
};

struct tern_quantize_params tern_quantize_default_params(void);

/* Converts the bf16/f16/f32 Hugging Face snapshot in `model_dir` to MLX's
 * affine quantized format in `out_dir` (created; must not exist or be empty),
 * as mlx-lm's `mlx_lm.convert --quantize` does: every 2-D `<m>.weight` whose
 * input size is a multiple of group_size (linear layers and the embedding)
 * becomes `<m>.weight` U32 + `<m>.scales` + `<m>.biases`, with the same bytes
 * MLX's quantizer produces; other tensors are cast to config.json's dtype and
 * copied; a tied model drops `lm_head.weight`. config.json gains mlx-lm's
 * `quantization` and `quantization_config` blocks; tokenizer, template and
 * generation files are copied. Returns TERN_E_INVALID_ARG for bad params,
 * TERN_E_IO / TERN_E_FORMAT for unreadable input or unwritable output. */
enum tern_status tern_quantize(const char *model_dir, const char *out_dir,
                               const struct tern_quantize_params *params);

#ifdef __cplusplus
}
#endif

#endif /* TERN_H */
