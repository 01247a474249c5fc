/*
 * base.h — the ground floor every module stands on: status and error
 * messages, logging, checked allocation, a growable string, a monotonic
 * clock. Depends on libc and include/tern.h only.
 */
#ifndef TERN_BASE_H
#define TERN_BASE_H

#include "tern.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TERN_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define TERN_PRINTF(fmt_idx, arg_idx)
#endif

/* x86-64 clones of a hot loop for AVX-512 and AVX2, picked once at load time
 * by the CPU (GCC/Clang target_clones). The build never contracts a * b + c
 * into an FMA (-ffp-contract=off), so every clone performs the same float
 * operations in the same order and gives the same bits as the baseline. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TERN_NO_SIMD_CLONES)
#define TERN_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TERN_SIMD_CLONES
#endif

/* ------------------------------------------------------------ status */

/* Records a one-line message for the calling thread and returns `status`, so
 * callers can write `return tern_error(TERN_E_FORMAT, "%s: ...", path);`. */
enum tern_status tern_error(enum tern_status status, const char *fmt, ...) TERN_PRINTF(2, 3);
enum tern_status tern_verror(enum tern_status status, const char *fmt, va_list ap);

/* Prefixes the current thread's message with "prefix: " (for adding context
 * such as a file name as an error travels up). Returns `status`. */
enum tern_status tern_error_prefix(enum tern_status status, const char *fmt, ...)
    TERN_PRINTF(2, 3);

/* Clears the calling thread's message. */
void tern_error_clear(void);

/* Propagates a failure: evaluates `expr` once and returns its status if not ok. */
#define TERN_TRY(expr)                                                                             \
    do {                                                                                           \
        enum tern_status tern_try_s_ = (expr);                                                     \
        if (tern_try_s_ != TERN_OK) return tern_try_s_;                                            \
    } while (0)

/* For broken internal invariants only, never for data: prints and traps. */
#define TERN_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) tern_assert_fail(#cond, __FILE__, __LINE__);                                  \
    } while (0)
_Noreturn void tern_assert_fail(const char *cond, const char *file, int line);

/* ------------------------------------------------------------ logging */

void tern_log(enum tern_log_level level, const char *fmt, ...) TERN_PRINTF(2, 3);
bool tern_log_enabled(enum tern_log_level level);

/* ------------------------------------------------------------ memory */

/* Allocation that records TERN_E_NO_MEMORY with the size on failure and
 * returns NULL. tern_free(NULL) is a no-op. Sizes are checked for overflow. */
void *tern_malloc(size_t n_bytes);
void *tern_calloc(size_t n, size_t size);
void *tern_realloc(void *p, size_t n_bytes);
void *tern_realloc_array(void *p, size_t n, size_t size);
void tern_free(void *p);
char *tern_strdup(const char *s);
char *tern_strndup(const char *s, size_t n);

/* Grows an array of `elem_size` elements to hold at least `need` (amortised
 * doubling). `*arr` and `*cap` are updated on success. */
enum tern_status tern_grow(void **arr, size_t *cap, size_t need, size_t elem_size);

/* ------------------------------------------------------------ strings */

/* A growable, always NUL-terminated byte string. Zero-initialise to start
 * (struct tern_str s = {0};), tern_str_deinit to free. */
struct tern_str {
    char *data;
    size_t len;
    size_t cap;
};

enum tern_status tern_str_reserve(struct tern_str *s, size_t cap);
enum tern_status tern_str_append(struct tern_str *s, const char *data, size_t len);
enum tern_status tern_str_appendz(struct tern_str *s, const char *z);
enum tern_status tern_str_appendc(struct tern_str *s, char c);
enum tern_status tern_str_appendf(struct tern_str *s, const char *fmt, ...) TERN_PRINTF(2, 3);
void tern_str_clear(struct tern_str *s);
void tern_str_deinit(struct tern_str *s);
/* Hands over the buffer (caller frees with tern_free) and resets `s`. */
char *tern_str_take(struct tern_str *s);

/* ------------------------------------------------------------ files */

/* Reads a whole file into a NUL-terminated buffer (caller frees with
 * tern_free). Errors name the path. */
enum tern_status tern_file_read(const char *path, char **out, size_t *out_len);
bool tern_file_exists(const char *path);
/* Joins a directory and a file name into a new string (caller frees). */
char *tern_path_join(const char *dir, const char *name);

/* ------------------------------------------------------------ time */

/* Monotonic clock in nanoseconds. */
uint64_t tern_now_ns(void);

/* CPU threads the CPU backend uses when asked for 0 (all): TERN_THREADS if
 * set, else the physical cores this process may run on (threads.c). */
int tern_default_threads(void);

#endif /* TERN_BASE_H */
