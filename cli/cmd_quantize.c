/*
 * cmd_quantize.c — `tern quantize`: a bf16/f16 snapshot to MLX affine
 * quantized weights (tern_quantize in include/tern.h), on the public API only.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: tern quantize --model DIR --out DIR2 [--bits 4] [--group-size 64] [--mode affine]\n"
    "                     [--keep MODULE]... [--override MODULE=BITS:GROUP]...\n"
    "Writes DIR's weights in MLX's affine format (as `mlx_lm.convert -q` does) to DIR2, with\n"
    "config.json's quantization block and the tokenizer and template files. Every linear\n"
    "layer and the embedding whose input size is a multiple of the group size is quantized;\n"
    "--keep leaves a module (e.g. lm_head) in the source dtype, --override gives one its own\n"
    "bits and group size. Bits 2, 3, 4, 5, 6, 8; group sizes 32, 64, 128.\n";

static bool parse_override(const char *s, struct tern_quantize_override *o)
{
    const char *eq = strrchr(s, '=');
    int bits = 0, group = 0;
    if (!eq || eq == s || sscanf(eq + 1, "%d:%d", &bits, &group) != 2) return false;
    char *m = malloc((size_t)(eq - s) + 1);
    if (!m) return false;
    memcpy(m, s, (size_t)(eq - s));
    m[eq - s] = '\0';
    *o = (struct tern_quantize_override){.module = m, .bits = bits, .group_size = group};
    return true;
}

static int run(int argc, char **argv, struct tern_quantize_override *ov, int32_t *n_ov)
{
    struct tern_quantize_params p = tern_quantize_default_params();
    const char *model = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("%s", usage);
            return 0;
        } else if (!strcmp(a, "--model") && v) model = argv[++i];
        else if (!strcmp(a, "--out") && v) out = argv[++i];
        else if (!strcmp(a, "--mode") && v) p.mode = argv[++i];
        else if (!strcmp(a, "--bits") && v) {
            if (!cli_parse_int("quantize", a, argv[++i], 1, 32, &x)) return 2;
            p.bits = (int32_t)x;
        } else if (!strcmp(a, "--group-size") && v) {
            if (!cli_parse_int("quantize", a, argv[++i], 1, 1 << 16, &x)) return 2;
            p.group_size = (int32_t)x;
        } else if (!strcmp(a, "--keep") && v) {
            char *m = strdup(argv[++i]);
            if (!m) return cli_usage("quantize", "out of memory");
            ov[(*n_ov)++] = (struct tern_quantize_override){.module = m};
        } else if (!strcmp(a, "--override") && v) {
            if (!parse_override(argv[++i], &ov[*n_ov]))
                return cli_usage("quantize", "--override wants MODULE=BITS:GROUP, got '%s'", v);
            (*n_ov)++;
        } else return cli_usage("quantize", "unknown or incomplete option '%s'", a);
    }
    if (!model || !out) return cli_usage("quantize", "--model DIR and --out DIR2 are required");
    p.overrides = ov;
    p.n_overrides = *n_ov;
    p.progress = isatty(STDERR_FILENO);
    enum tern_status st = tern_quantize(model, out, &p);
    if (st != TERN_OK) return cli_fail("quantize", NULL, st);
    fprintf(stderr, "tern quantize: wrote %s (%d-bit, group %d)\n", out, p.bits, p.group_size);
    return 0;
}

int tern_cmd_quantize(int argc, char **argv)
{
    /* At most one override per argument. */
    struct tern_quantize_override *ov = calloc((size_t)argc, sizeof *ov);
    if (!ov) return cli_usage("quantize", "out of memory");
    int32_t n_ov = 0;
    int rc = run(argc, argv, ov, &n_ov);
    for (int32_t i = 0; i < n_ov; i++) free((char *)ov[i].module);
    free(ov);
    return rc;
}
