/*
 * main.c — the `tern` command: dispatch to subcommands, shared helpers.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"inspect", tern_cmd_inspect, "show a model's architecture, size and dtype"},
    {"generate", tern_cmd_generate, "generate from token ids or a prompt (greedy or sampled)"},
    {"chat", tern_cmd_chat, "an interactive conversation through the chat template"},
    {"logits", tern_cmd_logits, "write all-position logits of a token sequence to .npy"},
    {"embed", tern_cmd_embed, "the vectors of an embedding model for text inputs"},
    {"bench", tern_cmd_bench, "measure prefill and decode speed"},
    {"tokenize", tern_cmd_tokenize, "text on stdin -> token ids"},
    {"detokenize", tern_cmd_detokenize, "token ids on stdin -> text"},
    {"render", tern_cmd_render, "render a chat template with a JSON context"},
    {"serve", tern_cmd_serve, "OpenAI-compatible HTTP server"},
    {"quantize", tern_cmd_quantize, "convert a bf16/f16 snapshot to MLX affine 4/8-bit"},
};

static void usage(FILE *f)
{
    fprintf(f, "tern %s — LLM inference engine\n\nusage: tern <command> [options]\n\n",
            tern_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'tern <command> --help' for a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("tern %s\n", tern_version());
        return 0;
    }
    const char *env = getenv("TERN_LOG");
    if (env) {
        if (!strcmp(env, "debug")) tern_log_set_level(TERN_LOG_DEBUG);
        else if (!strcmp(env, "info")) tern_log_set_level(TERN_LOG_INFO);
        else if (!strcmp(env, "error")) tern_log_set_level(TERN_LOG_ERROR);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tern: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}

int cli_fail(const char *cmd, const char *what, enum tern_status st)
{
    const char *msg = tern_last_error();
    fprintf(stderr, "tern %s: %s%s%s\n", cmd, what ? what : "", what ? ": " : "",
            msg && *msg ? msg : tern_status_str(st));
    return 1;
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "tern %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see 'tern %s --help')\n", cmd);
    return 2;
}

bool cli_parse_ids(const char *s, int32_t **ids, int *n)
{
    size_t cap = 16;
    int count = 0;
    int32_t *a = malloc(cap * sizeof *a);
    if (!a) return false;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '[' ||
               *p == ']')
            p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            free(a);
            return false;
        }
        if ((size_t)count == cap) {
            cap *= 2;
            int32_t *b = realloc(a, cap * sizeof *a);
            if (!b) {
                free(a);
                return false;
            }
            a = b;
        }
        a[count++] = (int32_t)v;
        p = end;
    }
    *ids = a;
    *n = count;
    return true;
}

char *cli_read_stdin(size_t *len)
{
    size_t cap = 65536, n = 0, r;
    char *buf = malloc(cap + 1);
    if (!buf) return NULL;
    while ((r = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            char *b = realloc(buf, cap + 1);
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b;
        }
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

bool cli_parse_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi,
                   long long *out)
{
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "tern %s: %s expects an integer in [%lld, %lld], got '%s'\n", cmd, flag, lo,
                hi, s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_real(const char *cmd, const char *flag, const char *s, double lo, double hi,
                    double *out)
{
    char *end;
    double v = s ? strtod(s, &end) : 0;
    if (s && end != s && !*end && v >= lo && v <= hi) {
        *out = v;
        return true;
    }
    fprintf(stderr, "tern %s: %s expects a number in [%g, %g], got '%s'\n", cmd, flag, lo, hi,
            s ? s : "");
    return false;
}

bool cli_parse_bytes(const char *cmd, const char *flag, const char *s, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    int shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: break;
    }
    if (shift) end++;
    if (end == s || *end || errno || v < 1 || v > (INT64_MAX >> shift)) {
        fprintf(stderr,
                "tern %s: %s expects a positive byte count (K/M/G/T suffixes allowed), got '%s'\n",
                cmd, flag, s);
        return false;
    }
    *out = v << shift;
    return true;
}

double cli_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *cli_device_name(enum tern_device d)
{
    return d == TERN_DEVICE_CUDA ? "cuda" : d == TERN_DEVICE_AUTO ? "auto" : "cpu";
}

bool cli_parse_device(const char *cmd, const char *s, enum tern_device *out)
{
    if (s && !strcmp(s, "cpu")) *out = TERN_DEVICE_CPU;
    else if (s && !strcmp(s, "cuda")) *out = TERN_DEVICE_CUDA;
    else if (s && !strcmp(s, "auto")) *out = TERN_DEVICE_AUTO;
    else {
        fprintf(stderr, "tern %s: --device expects cpu, cuda or auto, got '%s'\n", cmd,
                s ? s : "");
        return false;
    }
    return true;
}
