/*
 * cli.h — the `tern` command's subcommands and small shared helpers. The
 * command is built on include/tern.h only.
 */
#ifndef TERN_CLI_H
#define TERN_CLI_H

#include "tern.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

/* Each subcommand: argv[0] is the subcommand name. Returns the exit code. */
int tern_cmd_inspect(int argc, char **argv);
int tern_cmd_generate(int argc, char **argv);
int tern_cmd_logits(int argc, char **argv);
int tern_cmd_bench(int argc, char **argv);
int tern_cmd_tokenize(int argc, char **argv);
int tern_cmd_detokenize(int argc, char **argv);
int tern_cmd_render(int argc, char **argv);
int tern_cmd_serve(int argc, char **argv);
int tern_cmd_quantize(int argc, char **argv);
int tern_cmd_chat(int argc, char **argv);
int tern_cmd_embed(int argc, char **argv);

/* Prints "tern <cmd>: <what>: <tern_last_error()>" to stderr and returns 1. */
int cli_fail(const char *cmd, const char *what, enum tern_status st);
/* Prints a usage error and returns 2. */
int cli_usage(const char *cmd, const char *fmt, ...);
/* Parses "1 2 3" / "1,2,3" into a new int32 array (free()); false on junk. */
bool cli_parse_ids(const char *s, int32_t **ids, int *n);
/* Reads all of stdin into a new NUL-terminated buffer (free()). */
char *cli_read_stdin(size_t *len);
/* Parses a non-negative integer flag value; false (after printing) on junk. */
bool cli_parse_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi,
                   long long *out);
/* Parses a number flag value in [lo, hi]; false (after printing) on junk. */
bool cli_parse_real(const char *cmd, const char *flag, const char *s, double lo, double hi,
                    double *out);
/* Parses a byte count with optional binary K/M/G/T suffix ("512M"). */
bool cli_parse_bytes(const char *cmd, const char *flag, const char *s, long long *out);
/* Parses --device cpu|cuda|auto. */
bool cli_parse_device(const char *cmd, const char *s, enum tern_device *out);
/* Seconds on the monotonic clock. */
double cli_now_s(void);
/* "cpu", "cuda" or "auto". */
const char *cli_device_name(enum tern_device d);

/* ------------------------------------------------ one streamed reply (reply.c) */

struct cli_reply {
    int32_t *ids; /* generated ids */
    int n_ids, cap_ids;
    int32_t prompt_tokens, cached_tokens;
    double ttft_s, total_s; /* from submit: first token, end */
    enum tern_finish_reason finish;
    bool interrupted; /* cancelled through the interrupt flag */
    char error[256];  /* why it failed */
};

typedef void (*cli_text_fn)(void *ctx, const char *text, size_t len);

/* Submits one request and reads its stream to the end, calling on_text with
 * each token's text as it arrives (when detokenize). When *interrupt becomes
 * non-zero the request is cancelled and the reply ends (not an error).
 * Fills *r (cli_reply_free it, also on failure). */
enum tern_status cli_reply_run(struct tern_engine *e, const int32_t *ids, int32_t n_ids,
                               const struct tern_sampling_params *sp, bool detokenize,
                               cli_text_fn on_text, void *ctx, volatile sig_atomic_t *interrupt,
                               struct cli_reply *r);
void cli_reply_free(struct cli_reply *r);
/* "tern CMD: prompt N tokens (C cached, X tok/s), generated M tokens (Y tok/s), device D" on stderr. */
void cli_reply_summary(const char *cmd, const struct cli_reply *r, enum tern_device dev);
/* The chat template context {"add_generation_prompt": true, "messages": [...]}
 * as JSON text (free()); enable_thinking -1 leaves it unset. */
char *cli_chat_context(const char *const *roles, const char *const *contents, int n,
                       int enable_thinking);
/* Renders a context through the model's chat template and tokenizes it
 * (*ids: free()). *think_open (may be NULL): the rendered prompt ends inside
 * <think>. TERN_E_UNSUPPORTED when the model has no template or tokenizer. */
enum tern_status cli_chat_ids(const struct tern_model *m, const char *ctx_json, int32_t **ids,
                              int32_t *n, bool *think_open);

#endif
