/*
 * io_internal.h — helpers shared by the files of src/io/ only (not part of
 * the module's interface): one-line error messages and mapping a file.
 *
 * Depends on base/.
 */
#ifndef TERN_IO_INTERNAL_H
#define TERN_IO_INTERNAL_H

#include "base/base.h"

/* Like tern_error, but any control character in the formatted message (a
 * newline inside a tensor name or a jansson "near" token) becomes '?', so
 * that every message stays on one line whatever the input held. */
enum tern_status tern_io_error(enum tern_status status, const char *fmt, ...) TERN_PRINTF(2, 3);

/* Maps a whole regular file read-only into *map (*bytes long). A missing
 * file is TERN_E_NOT_FOUND; a file shorter than min_bytes (or empty) is
 * TERN_E_FORMAT "PATH: file is N bytes, too short for MIN_WHAT". */
enum tern_status tern_io_map_file(const char *path, size_t min_bytes, const char *min_what,
                                  void **map, size_t *bytes);
void tern_io_unmap_file(void *map, size_t bytes);

#endif /* TERN_IO_INTERNAL_H */
