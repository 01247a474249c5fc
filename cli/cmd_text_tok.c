/*
 * cmd_text_tok.c — `tern tokenize` (all of stdin as one text -> ids on one
 * line, or {"ids": [...], "tokens": [...]} with --json) and `tern
 * detokenize` (ids on stdin -> text). Built on include/tern.h only.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p == '\r') fputs("\\r", f);
        else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static int tok_usage(const char *cmd, FILE *f)
{
    if (!strcmp(cmd, "tokenize"))
        fprintf(f, "usage: tern tokenize --tokenizer DIR [--add-special] [--json] < text\n"
                   "  Encodes all of stdin as one text; prints the ids on one line.\n"
                   "  --add-special  add the special tokens the tokenizer asks for (BOS...)\n"
                   "  --json         print {\"ids\": [...], \"tokens\": [...]}\n");
    else
        fprintf(f, "usage: tern detokenize --tokenizer DIR [--skip-special] < ids\n"
                   "  Decodes ids (space or comma separated) from stdin; prints exactly the text.\n"
                   "  --skip-special  drop special tokens\n");
    return f == stdout ? 0 : 2;
}

struct tok_opts {
    const char *dir;
    bool add_special, json, skip_special, help;
};

static int parse_opts(const char *cmd, int argc, char **argv, struct tok_opts *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tokenizer") && i + 1 < argc) o->dir = argv[++i];
        else if (!strcmp(a, "--add-special") && !strcmp(cmd, "tokenize")) o->add_special = true;
        else if (!strcmp(a, "--json") && !strcmp(cmd, "tokenize")) o->json = true;
        else if (!strcmp(a, "--skip-special") && !strcmp(cmd, "detokenize")) o->skip_special = true;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) o->help = true;
        else return cli_usage(cmd, "unknown or incomplete option '%s'", a);
    }
    if (!o->help && !o->dir) return cli_usage(cmd, "--tokenizer DIR is required");
    return 0;
}

int tern_cmd_tokenize(int argc, char **argv)
{
    struct tok_opts o;
    int rc = parse_opts("tokenize", argc, argv, &o);
    if (rc || o.help) return rc ? rc : tok_usage("tokenize", stdout);
    struct tern_tokenizer *tok = NULL;
    enum tern_status st = tern_tokenizer_open(o.dir, &tok);
    if (st) return cli_fail("tokenize", NULL, st);
    size_t len;
    char *text = cli_read_stdin(&len);
    int32_t *ids = NULL;
    size_t n = 0;
    if (!text) {
        fprintf(stderr, "tern tokenize: could not read stdin\n");
        rc = 1;
    } else if ((st = tern_tokenize(tok, text, len, o.add_special, &ids, &n))) {
        rc = cli_fail("tokenize", NULL, st);
    } else if (o.json) {
        printf("{\"ids\": [");
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("], \"tokens\": [");
        for (size_t i = 0; i < n; i++) {
            const char *t = tern_tokenizer_token(tok, ids[i]);
            if (i) printf(", ");
            json_string(stdout, t ? t : "");
        }
        printf("]}\n");
    } else {
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        printf("\n");
    }
    tern_free_buf(ids);
    free(text);
    tern_tokenizer_close(tok);
    return rc;
}

int tern_cmd_detokenize(int argc, char **argv)
{
    struct tok_opts o;
    int rc = parse_opts("detokenize", argc, argv, &o);
    if (rc || o.help) return rc ? rc : tok_usage("detokenize", stdout);
    struct tern_tokenizer *tok = NULL;
    enum tern_status st = tern_tokenizer_open(o.dir, &tok);
    if (st) return cli_fail("detokenize", NULL, st);
    char *in = cli_read_stdin(NULL);
    int32_t *ids = NULL;
    int n = 0;
    char *text = NULL;
    size_t len = 0;
    if (!in) {
        fprintf(stderr, "tern detokenize: could not read stdin\n");
        rc = 1;
    } else if (!cli_parse_ids(in, &ids, &n)) {
        fprintf(stderr, "tern detokenize: stdin: expected non-negative integer token ids\n");
        rc = 1;
    } else if ((st = tern_detokenize(tok, ids, (size_t)n, o.skip_special, &text, &len))) {
        rc = cli_fail("detokenize", NULL, st);
    } else {
        fwrite(text, 1, len, stdout); /* exactly the text: no newline added */
    }
    tern_free_buf(text);
    free(ids);
    free(in);
    tern_tokenizer_close(tok);
    return rc;
}
