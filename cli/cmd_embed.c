/*
 * cmd_embed.c — `tern embed`: the vectors of an embedding model (a
 * sentence-transformers snapshot such as Qwen3-Embedding) for the inputs
 * given with --input, or for each line of stdin. Every input is submitted
 * at once, so the engine batches them; the vectors come back in input
 * order, one line of numbers each, or as one JSON object in the shape of
 * OpenAI's embeddings response. On the public API only.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char embed_usage[] =
    "usage: tern embed --model DIR [--input TEXT ...] [--prompt NAME] [--dimensions N]\n"
    "                  [--json] [--device cpu|cuda|auto]\n"
    "Embeds each --input (without any: each non-empty line of stdin) with the model's\n"
    "sentence-transformers pooling (modules.json, 1_Pooling/config.json) and prints one\n"
    "line of space-separated values per input, or with --json an object\n"
    "{\"object\": \"list\", \"data\": [{\"object\": \"embedding\", \"index\": i, \"embedding\":\n"
    "[...]}], \"model\": ..., \"usage\": {\"prompt_tokens\": n, \"total_tokens\": n}}.\n"
    "  --prompt NAME      put the model's prompt NAME first (config_sentence_transformers.json,\n"
    "                     e.g. \"query\"); default: the model's default prompt; \"\" for none\n"
    "  --dimensions N     keep the first N values (Matryoshka), normalised again when the\n"
    "                     model normalises\n";

struct embed_opts {
    const char *model, *prompt;
    const char **inputs;
    int n_inputs;
    long long dims;
    bool json;
    enum tern_device device;
};

static int parse(int argc, char **argv, struct embed_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = TERN_DEVICE_AUTO;
    o->inputs = calloc((size_t)argc, sizeof *o->inputs);
    if (!o->inputs) return cli_usage("embed", "out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("%s", embed_usage);
            return 0;
        } else if (!strcmp(a, "--model") && v) o->model = argv[++i];
        else if (!strcmp(a, "--input") && v) o->inputs[o->n_inputs++] = argv[++i];
        else if (!strcmp(a, "--prompt") && v) o->prompt = argv[++i];
        else if (!strcmp(a, "--dimensions") && v) {
            if (!cli_parse_int("embed", a, argv[++i], 1, 1 << 20, &o->dims)) return 2;
        } else if (!strcmp(a, "--device") && v) {
            if (!cli_parse_device("embed", argv[++i], &o->device)) return 2;
        } else if (!strcmp(a, "--json")) o->json = true;
        else return cli_usage("embed", "unknown or incomplete option '%s'", a);
    }
    if (!o->model) return cli_usage("embed", "--model DIR is required");
    return -1;
}

/* Each non-empty line of stdin (a trailing \r dropped) as an input; the
 * lines point into *buf. */
static bool stdin_inputs(struct embed_opts *o, char **buf)
{
    size_t len = 0;
    *buf = cli_read_stdin(&len);
    if (!*buf) return false;
    int n = 1;
    for (size_t i = 0; i < len; i++) n += (*buf)[i] == '\n';
    free(o->inputs);
    o->inputs = calloc((size_t)n, sizeof *o->inputs);
    if (!o->inputs) return false;
    for (char *line = *buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r') line[l - 1] = '\0';
        if (*line) o->inputs[o->n_inputs++] = line;
    }
    return true;
}

static void print_vec(const float *v, int32_t n, bool json)
{
    for (int32_t k = 0; k < n; k++) printf("%s%.9g", k ? (json ? ", " : " ") : "", (double)v[k]);
}

/* Submits every input, then prints the vectors in order. */
static int run(const struct embed_opts *o, struct tern_model *m, struct tern_engine *e)
{
    int n = o->n_inputs, rc = 0;
    struct tern_stream **ss = calloc((size_t)n, sizeof *ss);
    int32_t *n_tok = calloc((size_t)n, sizeof *n_tok);
    if (!ss || !n_tok) rc = cli_usage("embed", "out of memory");
    double t0 = cli_now_s();
    for (int i = 0; rc == 0 && i < n; i++) {
        int32_t *ids = NULL, skip = 0;
        size_t n_ids = 0;
        enum tern_status st = tern_embed_tokenize(m, o->inputs[i], strlen(o->inputs[i]), o->prompt,
                                                  &ids, &n_ids, &skip);
        struct tern_request r = {0};
        r.ids = ids;
        r.n_ids = (int32_t)n_ids;
        r.embed = true;
        r.dimensions = (int32_t)o->dims;
        r.pool_skip = skip;
        if (st == TERN_OK) st = tern_engine_submit(e, &r, &ss[i]);
        tern_free_buf(ids);
        n_tok[i] = (int32_t)n_ids;
        if (st != TERN_OK) {
            char what[32];
            snprintf(what, sizeof what, "input %d", i);
            rc = cli_fail("embed", what, st);
        }
    }
    int64_t total = 0;
    if (rc == 0 && o->json) printf("{\"object\": \"list\", \"data\": [");
    for (int i = 0; i < n; i++) {
        struct tern_event ev = {0};
        while (ss[i] && tern_stream_next(ss[i], -1, &ev) == TERN_OK && !ev.final) {}
        if (rc == 0 && ev.status != TERN_OK) {
            fprintf(stderr, "tern embed: input %d: %s\n", i, ev.error ? ev.error : "failed");
            rc = 1;
        }
        if (rc == 0 && o->json) {
            printf("%s{\"object\": \"embedding\", \"index\": %d, \"embedding\": [", i ? ", " : "", i);
            print_vec(ev.embedding, ev.n_embedding, true);
            printf("]}");
        } else if (rc == 0) {
            print_vec(ev.embedding, ev.n_embedding, false);
            printf("\n");
        }
        total += n_tok[i];
        tern_stream_destroy(ss[i]);
    }
    if (rc == 0 && o->json) {
        printf("], \"model\": \"");
        for (const char *c = o->model; *c; c++) { /* a path as a JSON string */
            if (*c == '"' || *c == '\\') putchar('\\');
            putchar((unsigned char)*c < 0x20 ? '?' : *c);
        }
        printf("\", \"usage\": {\"prompt_tokens\": %lld, \"total_tokens\": %lld}}\n",
               (long long)total, (long long)total);
    }
    if (rc == 0) {
        double dt = cli_now_s() - t0;
        struct tern_model_info in;
        tern_model_get_info(m, &in);
        fprintf(stderr, "tern embed: %d inputs, %lld tokens (%.0f tok/s), device %s\n", n,
                (long long)total, dt > 0 ? (double)total / dt : 0.0, cli_device_name(in.device));
    }
    free(ss);
    free(n_tok);
    return rc;
}

int tern_cmd_embed(int argc, char **argv)
{
    struct embed_opts o;
    int rc = parse(argc, argv, &o);
    char *buf = NULL;
    struct tern_model *m = NULL;
    struct tern_engine *e = NULL;
    if (rc >= 0) goto out;
    if (o.n_inputs == 0 && !stdin_inputs(&o, &buf)) {
        rc = cli_usage("embed", "cannot read stdin");
        goto out;
    }
    if (o.n_inputs == 0) {
        rc = cli_usage("embed", "no input: give --input TEXT or lines on stdin");
        goto out;
    }
    struct tern_model_params mp = tern_model_default_params();
    mp.device = o.device;
    mp.progress = isatty(STDERR_FILENO);
    enum tern_status st = tern_model_open(o.model, &mp, &m);
    struct tern_embed_info info;
    if (st == TERN_OK) st = tern_model_embed_info(m, &info);
    if (st == TERN_OK) st = tern_engine_create(m, NULL, &e);
    rc = st == TERN_OK ? run(&o, m, e) : cli_fail("embed", NULL, st);
out:
    tern_engine_destroy(e);
    tern_model_close(m);
    free(buf);
    free(o.inputs);
    return rc;
}
