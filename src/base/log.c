/*
 * log.c — leveled logging to stderr. The level is the library's only global
 * setting (DESIGN §3, "no global mutable state except logging").
 */
#include "base/base.h"

#include <stdatomic.h>
#include <stdio.h>

static atomic_int log_level = TERN_LOG_WARN;

void tern_log_set_level(enum tern_log_level level)
{
    atomic_store(&log_level, (int)level);
}

bool tern_log_enabled(enum tern_log_level level)
{
    return (int)level >= atomic_load(&log_level);
}

void tern_log(enum tern_log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"debug", "info", "warn", "error", "none"};
    if (!tern_log_enabled(level)) return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tern %s: %s\n", names[level], line);
}
