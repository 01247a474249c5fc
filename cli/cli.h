/*
 * cli.h — the `tern` command's subcommands and small shared helpers. The
 * command is built on include/tern.h only.
 */
#ifndef TERN_CLI_H
#define TERN_CLI_H

#include "tern.h"

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

#endif
