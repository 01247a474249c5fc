/*
 * status.c — status strings and the per-thread error message.
 */
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TERN_ERR_CAP 1024

static _Thread_local char err_msg[TERN_ERR_CAP];

static const char *const status_strs[] = {
#define TERN_X_STR(name, str) str,
    TERN_STATUS_LIST(TERN_X_STR)
#undef TERN_X_STR
};

const char *tern_status_str(enum tern_status status)
{
    if ((int)status < 0 || status >= TERN_STATUS_COUNT) return "unknown status";
    return status_strs[status];
}

const char *tern_last_error(void)
{
    return err_msg;
}

const char *tern_version(void)
{
#define TERN_STR2(x) #x
#define TERN_STR(x) TERN_STR2(x)
    return TERN_STR(TERN_VERSION_MAJOR) "." TERN_STR(TERN_VERSION_MINOR) "." TERN_STR(
        TERN_VERSION_PATCH);
}

enum tern_status tern_verror(enum tern_status status, const char *fmt, va_list ap)
{
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    return status;
}

enum tern_status tern_error(enum tern_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tern_verror(status, fmt, ap);
    va_end(ap);
    return status;
}

enum tern_status tern_error_prefix(enum tern_status status, const char *fmt, ...)
{
    char prefix[TERN_ERR_CAP];
    char old[TERN_ERR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_msg, sizeof old);
    size_t pl = strlen(prefix);
    if (pl > sizeof err_msg - 3) pl = sizeof err_msg - 3;
    memcpy(err_msg, prefix, pl);
    memcpy(err_msg + pl, ": ", 2);
    size_t ol = strlen(old);
    if (ol > sizeof err_msg - pl - 3) ol = sizeof err_msg - pl - 3;
    memcpy(err_msg + pl + 2, old, ol);
    err_msg[pl + 2 + ol] = '\0';
    return status;
}

void tern_error_clear(void)
{
    err_msg[0] = '\0';
}

_Noreturn void tern_assert_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "tern: internal invariant broken: %s (%s:%d)\n", cond, file, line);
    fflush(stderr);
    __builtin_trap();
}
