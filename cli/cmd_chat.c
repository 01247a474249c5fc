/*
 * cmd_chat.c — `tern chat`: an interactive conversation with a model through
 * its chat template. The history is kept and re-rendered each turn (the
 * engine's prefix cache reuses the earlier turns' KV). Replies stream to
 * stdout as they are generated; <think> reasoning is shown dimmed on a
 * terminal (as the model wrote it when stdout is not one) or hidden with
 * --hide-reasoning. Ctrl-C stops the current reply, not the program. With
 * stdin not a terminal each line is one message, so a conversation can be
 * piped in; then only the replies go to stdout (one per message, each ended
 * by a newline) and everything else to stderr. On include/tern.h only.
 */
#include "cli.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char chat_usage[] =
    "usage: tern chat --model DIR|FILE.gguf [--system TEXT] [--max-tokens N] [--max-context N]\n"
    "                 [--hide-reasoning] [--no-think] [--device cpu|cuda|auto]\n"
    "                 [--temperature T] [--top-p P] [--top-k K] [--min-p P]\n"
    "                 [--repetition-penalty R] [--seed N]\n"
    "An interactive conversation through the model's chat template. Sampling\n"
    "defaults to the model's generation_config.json. In the conversation:\n"
    "  /reset  forget the conversation    /exit  leave (or Ctrl-D)\n"
    "  /help   this list                  Ctrl-C stops the current reply\n"
    "With stdin not a terminal, each line is one message.\n";

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

struct chat_opts {
    const char *model, *system;
    long long max_tokens, max_context;
    enum tern_device device;
    bool hide_reasoning;
    int enable_thinking; /* -1 = the template's default */
    struct tern_sampling_params sp;
};

static int parse_chat(int argc, char **argv, struct chat_opts *o, struct tern_sampling_params *over,
                      unsigned *set)
{
    o->max_tokens = 1024;
    o->device = TERN_DEVICE_AUTO;
    o->enable_thinking = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        long long k;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(chat_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--hide-reasoning")) o->hide_reasoning = true;
        else if (!strcmp(a, "--no-think")) o->enable_thinking = 0;
        else if (!v) return cli_usage("chat", "unknown option or missing value: %s", a);
        else if (++i, !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--system")) o->system = v;
        else if (!strcmp(a, "--device")) {
            if (!cli_parse_device("chat", v, &o->device)) return 2;
        } else if (!strcmp(a, "--max-tokens")) {
            if (!cli_parse_int("chat", a, v, 1, 1 << 24, &o->max_tokens)) return 2;
        } else if (!strcmp(a, "--max-context")) {
            if (!cli_parse_int("chat", a, v, 16, 1 << 24, &o->max_context)) return 2;
        } else if (!strcmp(a, "--temperature")) {
            if (!cli_parse_real("chat", a, v, 0, 100, &x)) return 2;
            over->temperature = (float)x, *set |= 1;
        } else if (!strcmp(a, "--top-p")) {
            if (!cli_parse_real("chat", a, v, 1e-6, 1, &x)) return 2;
            over->top_p = (float)x, *set |= 2;
        } else if (!strcmp(a, "--top-k")) {
            if (!cli_parse_int("chat", a, v, 0, 1 << 30, &k)) return 2;
            over->top_k = (int32_t)k, *set |= 4;
        } else if (!strcmp(a, "--min-p")) {
            if (!cli_parse_real("chat", a, v, 0, 1, &x)) return 2;
            over->min_p = (float)x, *set |= 8;
        } else if (!strcmp(a, "--repetition-penalty")) {
            if (!cli_parse_real("chat", a, v, 1e-3, 10, &x)) return 2;
            over->repetition_penalty = (float)x, *set |= 16;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_int("chat", a, v, 0, INT64_MAX, &k)) return 2;
            over->seed = (uint64_t)k, over->has_seed = true, *set |= 32;
        } else return cli_usage("chat", "unknown option %s", a);
    }
    if (!o->model) return cli_usage("chat", "--model DIR|FILE.gguf is required");
    return -1;
}

/* ------------------------------------------------------------ the history */

struct history {
    char **role, **content;
    int n, cap;
};

static bool hist_add(struct history *h, const char *role, const char *content, size_t len)
{
    if (h->n == h->cap) {
        int cap = h->cap ? h->cap * 2 : 8;
        char **r = realloc(h->role, (size_t)cap * sizeof *r);
        if (!r) return false;
        h->role = r;
        char **c = realloc(h->content, (size_t)cap * sizeof *c);
        if (!c) return false;
        h->content = c;
        h->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return false;
    memcpy(c, content, len);
    c[len] = '\0';
    h->role[h->n] = (char *)role; /* static strings */
    h->content[h->n++] = c;
    return true;
}

static void hist_truncate(struct history *h, int n)
{
    while (h->n > n) free(h->content[--h->n]);
}

/* ---------------------------------------------- the reply, reasoning split */

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

struct view {
    bool tty, hide;
    bool in_think, dim;
    char hold[16];
    size_t n_hold;
    char *content; /* the reply without its reasoning (for the history) */
    size_t len, cap;
};

static void show(struct view *v, const char *s, size_t n, bool reasoning)
{
    if (reasoning && v->hide) return;
    if (v->tty && reasoning != v->dim) {
        fputs(reasoning ? "\033[2m" : "\033[0m", stdout);
        v->dim = reasoning;
    }
    fwrite(s, 1, n, stdout);
    if (reasoning) return;
    if (v->len + n + 1 > v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        while (cap < v->len + n + 1) cap *= 2;
        char *p = realloc(v->content, cap);
        if (!p) return;
        v->content = p;
        v->cap = cap;
    }
    memcpy(v->content + v->len, s, n);
    v->len += n;
    v->content[v->len] = '\0';
}

/* Text in: tags toggle the mode (written out as they are off a terminal,
 * unless reasoning is hidden); a possible tag prefix is held back. */
static void view_text(void *ctx, const char *text, size_t len)
{
    struct view *v = ctx;
    for (size_t i = 0; i < len; i++) {
        v->hold[v->n_hold++] = text[i];
        for (;;) {
            const char *tag = v->in_think ? CLOSE : OPEN;
            size_t tl = strlen(tag);
            if (v->n_hold == tl && !memcmp(v->hold, tag, tl)) {
                if (!v->tty && !v->hide) fwrite(tag, 1, tl, stdout);
                v->in_think = !v->in_think;
                v->n_hold = 0;
                break;
            }
            if (v->n_hold < tl && !memcmp(v->hold, tag, v->n_hold)) break;
            show(v, v->hold, 1, v->in_think);
            memmove(v->hold, v->hold + 1, --v->n_hold);
            if (!v->n_hold) break;
        }
    }
    fflush(stdout);
}

static void view_end(struct view *v)
{
    if (v->n_hold) show(v, v->hold, v->n_hold, v->in_think);
    v->n_hold = 0;
    if (v->dim) fputs("\033[0m", stdout);
    v->dim = false;
    fputs("\n", stdout);
    fflush(stdout);
}

/* Leading and trailing whitespace of the reply, dropped for the history. */
static void trim(const char *s, size_t len, size_t *b, size_t *e)
{
    *b = 0;
    *e = len;
    while (*b < *e && (s[*b] == ' ' || s[*b] == '\n')) (*b)++;
    while (*e > *b && (s[*e - 1] == ' ' || s[*e - 1] == '\n')) (*e)--;
}

/* ------------------------------------------------------------------ a turn */

struct chat {
    struct chat_opts o;
    struct tern_model *model;
    struct tern_engine *engine;
    enum tern_device device;
    int32_t context;
    struct history h;
};

/* One user message in, one reply out. Returns false only on a failure that
 * ends the program. */
static bool turn(struct chat *c, const char *line, bool tty)
{
    int mark = c->h.n;
    if (!hist_add(&c->h, "user", line, strlen(line))) return false;
    int k = c->o.system ? 0 : 1;
    const char **roles = malloc((size_t)(c->h.n + 1) * sizeof *roles);
    const char **contents = malloc((size_t)(c->h.n + 1) * sizeof *contents);
    if (!roles || !contents) {
        free(roles);
        free(contents);
        return false;
    }
    roles[0] = "system";
    contents[0] = c->o.system;
    for (int i = 0; i < c->h.n; i++) {
        roles[i + 1] = c->h.role[i];
        contents[i + 1] = c->h.content[i];
    }
    char *ctx = cli_chat_context(roles + k, contents + k, c->h.n + 1 - k, c->o.enable_thinking);
    free(roles);
    free(contents);
    int32_t *ids = NULL, n = 0;
    bool think_open = false;
    enum tern_status st = ctx ? cli_chat_ids(c->model, ctx, &ids, &n, &think_open) : TERN_E_NO_MEMORY;
    free(ctx);
    if (st != TERN_OK) {
        cli_fail("chat", "chat template", st);
        free(ids);
        hist_truncate(&c->h, mark);
        return true;
    }
    if (n + 1 >= c->context) {
        fprintf(stderr, "tern chat: the conversation has %d tokens, the context %d; /reset to start over\n",
                n, c->context);
        free(ids);
        hist_truncate(&c->h, mark);
        return true;
    }
    struct tern_sampling_params sp = c->o.sp;
    sp.max_tokens = (int32_t)(c->o.max_tokens < c->context - n ? c->o.max_tokens : c->context - n);
    struct view v = {.tty = tty, .hide = c->o.hide_reasoning, .in_think = think_open};
    if (think_open && !tty && !v.hide) fputs(OPEN, stdout);
    struct cli_reply r;
    interrupted = 0;
    st = cli_reply_run(c->engine, ids, n, &sp, true, view_text, &v, &interrupted, &r);
    free(ids);
    view_end(&v);
    if (st != TERN_OK) {
        fprintf(stderr, "tern chat: %s\n", r.error[0] ? r.error : tern_status_str(st));
        hist_truncate(&c->h, mark);
    } else {
        size_t b, e;
        trim(v.content ? v.content : "", v.len, &b, &e);
        if (!hist_add(&c->h, "assistant", v.content ? v.content + b : "", e - b)) st = TERN_E_NO_MEMORY;
        cli_reply_summary("chat", &r, c->device);
    }
    interrupted = 0;
    free(v.content);
    cli_reply_free(&r);
    return st != TERN_E_NO_MEMORY;
}

/* ------------------------------------------------------------------- main */

static int open_chat(struct chat *c)
{
    struct tern_model_params mp = tern_model_default_params();
    mp.device = c->o.device;
    mp.progress = isatty(STDERR_FILENO);
    enum tern_status st = tern_model_open(c->o.model, &mp, &c->model);
    if (st != TERN_OK) return cli_fail("chat", NULL, st);
    if (!tern_model_chat_template(c->model) || !tern_model_tokenizer(c->model)) {
        fprintf(stderr, "tern chat: %s has no chat template or tokenizer\n", c->o.model);
        return 1;
    }
    struct tern_engine_params ep = tern_engine_default_params();
    ep.max_seqs = 1;
    if (c->o.max_context) ep.max_context = (int32_t)c->o.max_context;
    st = tern_engine_create(c->model, &ep, &c->engine);
    if (st == TERN_OK) st = tern_engine_start(c->engine);
    if (st != TERN_OK) return cli_fail("chat", "engine", st);
    struct tern_model_info in;
    tern_model_get_info(c->model, &in);
    c->device = in.device;
    c->context = ep.max_context ? ep.max_context : in.context_length;
    return 0;
}

int tern_cmd_chat(int argc, char **argv)
{
    struct chat c;
    memset(&c, 0, sizeof c);
    struct tern_sampling_params over = {0};
    unsigned set = 0;
    int rc = parse_chat(argc, argv, &c.o, &over, &set);
    if (rc >= 0) return rc;
    /* The library's threads (backend workers, the engine's step loop) start
     * with SIGINT blocked, so that Ctrl-C reaches this thread and interrupts
     * a read at the prompt. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    rc = open_chat(&c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) goto done;
    c.o.sp = tern_model_sampling_defaults(c.model);
    if (set & 1) c.o.sp.temperature = over.temperature;
    if (set & 2) c.o.sp.top_p = over.top_p;
    if (set & 4) c.o.sp.top_k = over.top_k;
    if (set & 8) c.o.sp.min_p = over.min_p;
    if (set & 16) c.o.sp.repetition_penalty = over.repetition_penalty;
    if (set & 32) c.o.sp.seed = over.seed, c.o.sp.has_seed = true;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt interrupts the read */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);

    bool tty = isatty(STDIN_FILENO);
    bool out_tty = isatty(STDOUT_FILENO);
    if (tty)
        fprintf(stderr, "tern chat: %s on %s, context %d. /help for commands; Ctrl-C stops a reply, "
                        "Ctrl-D or /exit leaves.\n", c.o.model, cli_device_name(c.device), c.context);
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty) fputs("> ", stderr);
        errno = 0;
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) {
            if (errno == EINTR && interrupted) { /* Ctrl-C at the prompt */
                interrupted = 0;
                clearerr(stdin);
                fputs("\n", stderr);
                continue;
            }
            if (tty) fputs("\n", stderr);
            break;
        }
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if (got == 0) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            hist_truncate(&c.h, 0);
            fputs("(the conversation is forgotten)\n", stderr);
            continue;
        }
        if (!strcmp(line, "/help")) {
            fputs("  /reset  forget the conversation\n  /exit   leave (or Ctrl-D)\n"
                  "  /help   this list\n  Ctrl-C  stop the current reply\n", stderr);
            continue;
        }
        if (line[0] == '/' && line[1] != '/') {
            fprintf(stderr, "tern chat: unknown command '%s' (/help lists them; '//' starts a message with '/')\n", line);
            continue;
        }
        if (!turn(&c, line[0] == '/' ? line + 1 : line, out_tty)) {
            rc = cli_fail("chat", "out of memory", TERN_E_NO_MEMORY);
            break;
        }
    }
    free(line);
done:
    hist_truncate(&c.h, 0);
    free(c.h.role);
    free(c.h.content);
    tern_engine_destroy(c.engine);
    tern_model_close(c.model);
    return rc;
}
