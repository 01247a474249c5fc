/*
 * cmd_stubs.c — subcommands not built yet. Each prints that it is missing and
 * exits non-zero; delete a stub when its real command lands.
 */
#include "cli.h"

static int missing(const char *name)
{
    fprintf(stderr, "tern %s: not available in this build yet\n", name);
    return 1;
}

int tern_cmd_quantize(int argc, char **argv) { return missing("quantize"); }
