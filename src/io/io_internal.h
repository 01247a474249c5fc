/*
 * io_internal.h — helpers shared by the files of src/io/ only (not part of
 * the module's interface): one-line error messages and JSON type names.
 *
 * Depends on base/, jansson.
 */
#ifndef TERN_IO_INTERNAL_H
#define TERN_IO_INTERNAL_H

#include "base/base.h"

/* Like tern_error, but any control character in the formatted message (a
 * newline inside a tensor name or a jansson "near" token) becomes '?', so
 * that every message stays on one line whatever the input held. */
enum tern_status tern_io_error(enum tern_status status, const char *fmt, ...) TERN_PRINTF(2, 3);

#endif /* TERN_IO_INTERNAL_H */
