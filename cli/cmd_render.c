/*
 * cmd_render.c — `tern render`: renders a chat template with the variables
 * of a JSON object and prints exactly the rendered text.
 *   tern render (--model DIR [--name NAME] | --template FILE.jinja) --context FILE.json
 * Uses include/tern.h only.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f, "usage: tern render (--model DIR [--name NAME] | --template FILE.jinja) "
               "--context FILE.json\n"
               "  Renders the chat template (the model's chat_template.jinja or\n"
               "  tokenizer_config.json chat_template; --name picks one of several named\n"
               "  templates) with the keys of the JSON object as variables.\n");
}

/* Reads a whole file into a new NUL-terminated buffer (free()); NULL on error. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n < cap - 1) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len) *len = n;
    }
    return buf;
}

int tern_cmd_render(int argc, char **argv)
{
    const char *model = NULL, *tmpl = NULL, *ctx_path = NULL, *name = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            return 0;
        }
        if (!strcmp(a, "--model") && has_val) model = argv[++i];
        else if (!strcmp(a, "--template") && has_val) tmpl = argv[++i];
        else if (!strcmp(a, "--context") && has_val) ctx_path = argv[++i];
        else if (!strcmp(a, "--name") && has_val) name = argv[++i];
        else return cli_usage("render", "unknown or incomplete option '%s'", a);
    }
    if ((!model) == (!tmpl)) return cli_usage("render", "give one of --model DIR or --template FILE");
    if (!ctx_path) return cli_usage("render", "--context FILE.json is required");

    struct tern_chat_template *t = NULL;
    enum tern_status st;
    char *ctx = NULL, *src = NULL, *out = NULL;
    size_t out_len = 0, src_len = 0;
    int rc = 1;
    if (!(ctx = read_all(ctx_path, NULL))) {
        fprintf(stderr, "tern render: cannot read %s\n", ctx_path);
        goto done;
    }
    if (tmpl) {
        if (!(src = read_all(tmpl, &src_len))) {
            fprintf(stderr, "tern render: cannot read %s\n", tmpl);
            goto done;
        }
        st = tern_chat_template_create(src, src_len, &t);
    } else {
        st = tern_chat_template_load(model, name, &t);
    }
    if (st != TERN_OK) {
        rc = cli_fail("render", NULL, st);
        goto done;
    }
    if ((st = tern_chat_template_render(t, ctx, &out, &out_len)) != TERN_OK) {
        rc = cli_fail("render", NULL, st);
        goto done;
    }
    rc = fwrite(out, 1, out_len, stdout) == out_len && fflush(stdout) == 0 ? 0 : 1;
done:
    tern_free_buf(out);
    tern_chat_template_destroy(t);
    free(src);
    free(ctx);
    return rc;
}
