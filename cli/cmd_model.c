/*
 * cmd_model.c — `tern inspect`, `tern generate`, `tern logits`: the model
 * commands, on the public API only. `tern generate` runs through the
 * engine's streaming API (cli/reply.c): text reaches the terminal as it is
 * generated, with a summary line on stderr.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Options shared by the model commands. */
struct model_opts {
    const char *model;
    const char *ids;
    const char *prompt;
    const char *out;
    long long max_tokens;
    enum tern_device device;
    bool no_eos;
    bool json;
    bool chat;
    const char *system; /* --system, with --chat */
    struct tern_sampling_params sp; /* generate: greedy unless flags say otherwise */
    const char *sampling_flag;      /* the first sampling flag given, for other commands' errors */
};

/* The sampling flags of `tern generate`; returns -1 when `a` is none of them,
 * 2 on a bad value, 0 when taken. */
static int parse_sampling(const char *cmd, const char *a, const char *v, struct model_opts *o)
{
    double x;
    long long k;
    struct tern_sampling_params *sp = &o->sp;
    if (!strcmp(a, "--temperature")) {
        if (!cli_parse_real(cmd, a, v, 0, 100, &x)) return 2;
        sp->temperature = (float)x;
    } else if (!strcmp(a, "--top-p")) {
        if (!cli_parse_real(cmd, a, v, 1e-6, 1, &x)) return 2;
        sp->top_p = (float)x;
    } else if (!strcmp(a, "--min-p")) {
        if (!cli_parse_real(cmd, a, v, 0, 1, &x)) return 2;
        sp->min_p = (float)x;
    } else if (!strcmp(a, "--repetition-penalty")) {
        if (!cli_parse_real(cmd, a, v, 1e-3, 10, &x)) return 2;
        sp->repetition_penalty = (float)x;
    } else if (!strcmp(a, "--top-k")) {
        if (!cli_parse_int(cmd, a, v, 0, 1 << 30, &k)) return 2;
        sp->top_k = (int32_t)k;
    } else if (!strcmp(a, "--seed")) {
        if (!cli_parse_int(cmd, a, v, 0, INT64_MAX, &k)) return 2;
        sp->seed = (uint64_t)k;
        sp->has_seed = true;
    } else {
        return -1;
    }
    if (!o->sampling_flag) o->sampling_flag = a;
    return 0;
}

static int parse_opts(const char *cmd, int argc, char **argv, struct model_opts *o,
                      const char *usage)
{
    memset(o, 0, sizeof *o);
    o->max_tokens = 32;
    o->device = TERN_DEVICE_AUTO;
    o->sp = tern_sampling_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int sr = v ? parse_sampling(cmd, a, v, o) : -1;
        if (sr == 2) return 2;
        if (sr == 0) {
            i++;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("%s", usage);
            return 0;
        } else if (!strcmp(a, "--model") && v) o->model = argv[++i];
        else if (!strcmp(a, "--ids") && v) o->ids = argv[++i];
        else if (!strcmp(a, "--prompt") && v) o->prompt = argv[++i];
        else if (!strcmp(a, "--out") && v) o->out = argv[++i];
        else if (!strcmp(a, "--system") && v) o->system = argv[++i];
        else if (!strcmp(a, "--max-tokens") && v) {
            if (!cli_parse_int(cmd, a, argv[++i], 0, 1 << 24, &o->max_tokens)) return 2;
        } else if (!strcmp(a, "--device") && v) {
            if (!cli_parse_device(cmd, argv[++i], &o->device)) return 2;
        } else if (!strcmp(a, "--no-eos")) o->no_eos = true;
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--chat")) o->chat = true;
        else return cli_usage(cmd, "unknown or incomplete option '%s'", a);
    }
    if (!o->model) return cli_usage(cmd, "--model DIR|FILE.gguf is required");
    if (o->sampling_flag && strcmp(cmd, "generate"))
        return cli_usage(cmd, "%s is an option of 'tern generate'", o->sampling_flag);
    if (o->system && !o->chat) return cli_usage(cmd, "--system needs --chat");
    return -1; /* continue */
}

static int open_model(const char *cmd, const struct model_opts *o, struct tern_model **m)
{
    struct tern_model_params mp = tern_model_default_params();
    mp.device = o->device;
    mp.progress = isatty(STDERR_FILENO); /* a progress line only for people */
    enum tern_status st = tern_model_open(o->model, &mp, m);
    if (st != TERN_OK) return cli_fail(cmd, NULL, st);
    return 0;
}

static const char inspect_usage[] =
    "usage: tern inspect --model DIR|FILE.gguf [--json] [--device cpu|cuda|auto]\n"
    "Shows the architecture and whether tern supports it (checked without loading\n"
    "weights; if not, the first unsupported feature: a config key or a tensor), then\n"
    "for a supported model its parameter count, dtype, bytes and context length;\n"
    "for a GGUF file, a summary of its metadata (no weights are loaded).\n";

/* s as a JSON string literal. */
static void put_json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

/* The check of a model tern does not run: what it is and why not, on
 * stdout; the reason as the one error line on stderr. */
static int inspect_unsupported(const struct tern_model_support *sup, bool json)
{
    if (json) {
        printf("{\"architecture\": ");
        put_json_str(sup->architecture);
        printf(", \"model_type\": ");
        put_json_str(sup->model_type);
        printf(", \"supported\": false, \"unsupported\": ");
        put_json_str(sup->reason);
        printf("}\n");
    } else {
        printf("architecture     %s (%s)\n", sup->architecture, sup->model_type);
        printf("supported        no\n");
        printf("unsupported      %s\n", sup->reason);
    }
    fprintf(stderr, "tern inspect: %s\n", sup->reason);
    return 1;
}

int tern_cmd_inspect(int argc, char **argv)
{
    struct model_opts o;
    int rc = parse_opts("inspect", argc, argv, &o, inspect_usage);
    if (rc >= 0) return rc;
    struct stat sb;
    if (stat(o.model, &sb) == 0 && S_ISREG(sb.st_mode)) { /* a file: GGUF */
        char *text;
        enum tern_status st = tern_gguf_describe(o.model, o.json, &text);
        if (st != TERN_OK) return cli_fail("inspect", NULL, st);
        fputs(text, stdout);
        tern_free_buf(text);
        return 0;
    }
    struct tern_model_support sup;
    enum tern_status cst = tern_model_check(o.model, &sup);
    if (cst != TERN_OK) return cli_fail("inspect", NULL, cst);
    if (!sup.supported) return inspect_unsupported(&sup, o.json);
    struct tern_model *m;
    if ((rc = open_model("inspect", &o, &m))) return rc;
    struct tern_model_info in;
    tern_model_get_info(m, &in);
    if (o.json) {
        printf("{\"architecture\": \"%s\", \"model_type\": \"%s\", \"supported\": true, "
               "\"family\": \"%s\", \"dtype\": \"%s\", "
               "\"n_params\": %lld, \"weight_bytes\": %lld, \"n_layers\": %d, \"hidden_size\": %d, "
               "\"n_heads\": %d, \"n_kv_heads\": %d, \"head_dim\": %d, \"intermediate_size\": %d, "
               "\"vocab_size\": %d, \"context_length\": %d, \"tied_embeddings\": %s, "
               "\"has_tokenizer\": %s, \"has_chat_template\": %s, \"unused_tensors\": %d, "
               "\"device\": \"%s\", \"kv_bytes_per_token\": %lld, \"kv_bytes_windowed\": %lld}\n",
               in.architecture, in.model_type, sup.family, in.dtype, (long long)in.n_params,
               (long long)in.weight_bytes, in.n_layers, in.n_embd, in.n_heads, in.n_kv_heads,
               in.head_dim, in.n_ff, in.vocab_size, in.context_length,
               in.tied_embeddings ? "true" : "false", in.has_tokenizer ? "true" : "false",
               in.has_chat_template ? "true" : "false", in.n_unused_tensors,
               cli_device_name(in.device), (long long)in.kv_bytes_per_token,
               (long long)in.kv_bytes_windowed);
    } else {
        printf("architecture     %s (%s)\n", in.architecture, in.model_type);
        printf("supported        yes (tern family %s)\n", sup.family);
        printf("parameters       %.3f M\n", (double)in.n_params / 1e6);
        printf("dtype            %s\n", in.dtype);
        printf("weight bytes     %lld (%.2f MB)\n", (long long)in.weight_bytes,
               (double)in.weight_bytes / 1e6);
        printf("layers           %d\n", in.n_layers);
        printf("hidden / ff      %d / %d\n", in.n_embd, in.n_ff);
        printf("heads / kv / dim %d / %d / %d\n", in.n_heads, in.n_kv_heads, in.head_dim);
        if (in.n_experts)
            printf("experts          %d, %d per token\n", in.n_experts, in.n_experts_used);
        printf("vocab            %d\n", in.vocab_size);
        printf("context length   %d\n", in.context_length);
        printf("tied embeddings  %s\n", in.tied_embeddings ? "yes" : "no");
        printf("tokenizer        %s\n", in.has_tokenizer ? "yes" : "no");
        printf("chat template    %s\n", in.has_chat_template ? "yes" : "no");
        printf("unused tensors   %d\n", in.n_unused_tensors);
        printf("device           %s\n", cli_device_name(in.device));
        printf("KV cache         %lld B per token", (long long)in.kv_bytes_per_token);
        if (in.kv_bytes_windowed)
            printf(" + %.2f MB for the sliding windows", (double)in.kv_bytes_windowed / 1e6);
        printf("\n");
    }
    tern_model_close(m);
    return 0;
}

/* Token ids from --ids, or from --prompt through the model's tokenizer (and
 * its chat template with --chat). */
static int prompt_ids(const char *cmd, const struct model_opts *o, struct tern_model *m,
                      int32_t **ids, int *n)
{
    if (o->ids) {
        if (!cli_parse_ids(o->ids, ids, n) || *n == 0)
            return cli_usage(cmd, "--ids expects non-negative integers, got '%s'", o->ids);
        return 0;
    }
    if (!o->prompt) return cli_usage(cmd, "give --ids \"1 2 3\" or --prompt TEXT");
    const struct tern_tokenizer *tok = tern_model_tokenizer(m);
    if (!tok) {
        fprintf(stderr, "tern %s: %s has no tokenizer.json; use --ids\n", cmd, o->model);
        return 1;
    }
    enum tern_status st;
    if (o->chat) {
        if (!tern_model_chat_template(m)) {
            fprintf(stderr, "tern %s: %s has no chat template\n", cmd, o->model);
            return 1;
        }
        const char *roles[2] = {"system", "user"}, *contents[2] = {o->system, o->prompt};
        int k = o->system ? 0 : 1;
        char *ctx = cli_chat_context(roles + k, contents + k, 2 - k, -1);
        if (!ctx) return cli_fail(cmd, "out of memory", TERN_E_NO_MEMORY);
        int32_t nids = 0;
        st = cli_chat_ids(m, ctx, ids, &nids, NULL);
        free(ctx);
        if (st != TERN_OK) return cli_fail(cmd, "chat template", st);
        *n = nids;
        if (*n == 0) return cli_usage(cmd, "--prompt encodes to no tokens");
        return 0;
    }
    int32_t *tids = NULL;
    size_t nt = 0;
    st = tern_tokenize(tok, o->prompt, strlen(o->prompt), true, &tids, &nt);
    if (st != TERN_OK) return cli_fail(cmd, "tokenize", st);
    *ids = malloc(nt * sizeof(int32_t) + 1);
    if (!*ids) return cli_fail(cmd, "out of memory", TERN_E_NO_MEMORY);
    memcpy(*ids, tids, nt * sizeof(int32_t));
    *n = (int)nt;
    tern_free_buf(tids);
    if (*n == 0) return cli_usage(cmd, "--prompt encodes to no tokens");
    return 0;
}

static const char generate_usage[] =
    "usage: tern generate --model DIR|FILE.gguf\n"
    "                     (--ids \"1 2 3\" | --prompt TEXT [--chat [--system TEXT]])\n"
    "                     [--max-tokens N] [--no-eos] [--device cpu|cuda|auto] [--json]\n"
    "                     [--temperature T] [--top-p P] [--top-k K] [--min-p P]\n"
    "                     [--repetition-penalty R] [--seed N]\n"
    "Generates through the engine's streaming API: greedy unless --temperature > 0\n"
    "(with --seed the draws repeat exactly). With --prompt the text is printed as it\n"
    "is generated; with --ids the generated ids, then the text when the model has a\n"
    "tokenizer; with --json {\"prompt_ids\", \"ids\"}. A summary line (prompt and\n"
    "generated tokens with their rates, the device) goes to stderr.\n";

static void print_text(void *ctx, const char *text, size_t len)
{
    (void)ctx;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

int tern_cmd_generate(int argc, char **argv)
{
    struct model_opts o;
    int rc = parse_opts("generate", argc, argv, &o, generate_usage);
    if (rc >= 0) return rc;
    struct tern_model *m;
    if ((rc = open_model("generate", &o, &m))) return rc;
    int32_t *ids = NULL;
    int n = 0;
    struct tern_engine *e = NULL;
    struct cli_reply r = {0};
    if ((rc = prompt_ids("generate", &o, m, &ids, &n))) goto done;
    struct tern_engine_params ep = tern_engine_default_params();
    ep.max_seqs = 1;
    enum tern_status st = tern_engine_create(m, &ep, &e);
    if (st != TERN_OK) {
        rc = cli_fail("generate", "engine", st);
        goto done;
    }
    const struct tern_tokenizer *tok = tern_model_tokenizer(m);
    bool stream_text = !o.json && !o.ids && tok; /* --prompt: text as it comes */
    struct tern_sampling_params sp = o.sp;
    sp.max_tokens = (int32_t)o.max_tokens;
    sp.ignore_eos = o.no_eos;
    if (o.max_tokens > 0) {
        st = cli_reply_run(e, ids, n, &sp, tok != NULL, stream_text ? print_text : NULL, NULL, NULL, &r);
        if (st != TERN_OK) {
            fprintf(stderr, "tern generate: %s\n", r.error[0] ? r.error : tern_status_str(st));
            rc = 1;
            goto done;
        }
    } else {
        r.prompt_tokens = n;
    }
    struct tern_model_info in;
    tern_model_get_info(m, &in);
    if (stream_text) {
        printf("\n");
        fflush(stdout); /* the text's line ends before the summary on stderr, piped or not */
    }
    cli_reply_summary("generate", &r, in.device);
    if (o.json) {
        printf("{\"prompt_ids\": [");
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("], \"ids\": [");
        for (int i = 0; i < r.n_ids; i++) printf("%s%d", i ? ", " : "", r.ids[i]);
        printf("]}\n");
    } else if (!stream_text) {
        char *text = NULL;
        size_t tlen = 0;
        if (tok && tern_detokenize(tok, r.ids, (size_t)r.n_ids, true, &text, &tlen) != TERN_OK) text = NULL;
        for (int i = 0; i < r.n_ids; i++) printf("%s%d", i ? " " : "", r.ids[i]);
        printf("\n");
        if (text) printf("%s\n", text);
        tern_free_buf(text);
    }
done:
    free(ids);
    cli_reply_free(&r);
    tern_engine_destroy(e);
    tern_model_close(m);
    return rc;
}

/* Writes a float32 [rows, cols] array as .npy (format 1.0). */
static int write_npy(const char *path, const float *data, int rows, int cols)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "tern logits: cannot write %s\n", path);
        return 1;
    }
    char header[128];
    int hl = snprintf(header, sizeof header,
                      "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);
    int total = 10 + hl + 1;
    int pad = (64 - total % 64) % 64;
    unsigned short hlen = (unsigned short)(hl + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hlen & 0xff, f);
    fputc(hlen >> 8, f);
    fwrite(header, 1, (size_t)hl, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    size_t n = (size_t)rows * (size_t)cols;
    int rc = fwrite(data, sizeof(float), n, f) == n ? 0 : 1;
    if (fclose(f) != 0) rc = 1;
    if (rc) fprintf(stderr, "tern logits: short write to %s\n", path);
    return rc;
}

static const char logits_usage[] =
    "usage: tern logits --model DIR|FILE.gguf --ids \"1 2 3\" --out F.npy\n"
    "                   [--device cpu|cuda|auto]\n"
    "Writes float32 logits [n_tokens, vocab] of every position as .npy.\n";

int tern_cmd_logits(int argc, char **argv)
{
    struct model_opts o;
    int rc = parse_opts("logits", argc, argv, &o, logits_usage);
    if (rc >= 0) return rc;
    if (!o.out) return cli_usage("logits", "--out F.npy is required");
    struct tern_model *m;
    if ((rc = open_model("logits", &o, &m))) return rc;
    int32_t *ids = NULL;
    float *logits = NULL;
    int n = 0;
    struct tern_engine *e = NULL;
    if ((rc = prompt_ids("logits", &o, m, &ids, &n))) goto done;
    struct tern_model_info in;
    tern_model_get_info(m, &in);
    struct tern_engine_params ep = tern_engine_default_params();
    ep.max_seqs = 1;
    enum tern_status st = tern_engine_create(m, &ep, &e);
    if (st != TERN_OK) {
        rc = cli_fail("logits", "engine", st);
        goto done;
    }
    logits = malloc((size_t)n * (size_t)in.vocab_size * sizeof(float));
    if (!logits) {
        rc = cli_fail("logits", "out of memory", TERN_E_NO_MEMORY);
        goto done;
    }
    st = tern_logits(e, ids, n, logits);
    if (st != TERN_OK) {
        rc = cli_fail("logits", NULL, st);
        goto done;
    }
    rc = write_npy(o.out, logits, n, in.vocab_size);
done:
    free(ids);
    free(logits);
    tern_engine_destroy(e);
    tern_model_close(m);
    return rc;
}
