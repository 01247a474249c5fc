/*
 * st_build.h — helpers for the io tests: build safetensors file images in
 * memory, write them into temporary files or directories, remove them, and
 * check error statuses and messages.
 */
#ifndef TERN_TEST_ST_BUILD_H
#define TERN_TEST_ST_BUILD_H

#include "testutil.h"

/* An image: 8-byte LE length of `header`, the header, then data_len bytes of
 * data (tern_free). */
uint8_t *stb_image(const char *header, const void *data, size_t data_len, size_t *len);
/* The same written to a fresh temp file named `name` (path: tern_free, and
 * stb_remove when done). */
char *stb_write(const char *name, const char *header, const void *data, size_t data_len);
/* Writes bytes as dir/name. */
void stb_write_in(const char *dir, const char *name, const void *data, size_t len);
/* Writes a safetensors image as dir/name. */
void stb_write_st_in(const char *dir, const char *name, const char *header, const void *data,
                     size_t data_len);
/* Removes a temp file and its (now empty) directory, then frees path. */
void stb_remove(char *path);
/* Removes every file in a temp dir and the dir, then frees dir. */
void stb_remove_dir(char *dir);
/* Asserts st == want and that the one-line message holds each of the
 * NULL-terminated strings. */
void stb_expect(enum tern_status st, enum tern_status want, ...);

#endif
