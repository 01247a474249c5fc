/*
 * st_build.c — see st_build.h.
 */
#include "st_build.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint8_t *stb_image(const char *header, const void *data, size_t data_len, size_t *len)
{
    size_t hl = strlen(header);
    *len = 8 + hl + data_len;
    uint8_t *buf = tern_malloc(*len ? *len : 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (data_len) memcpy(buf + 8 + hl, data, data_len);
    return buf;
}

char *stb_write(const char *name, const char *header, const void *data, size_t data_len)
{
    size_t len;
    uint8_t *img = stb_image(header, data, data_len, &len);
    char *path = tu_write_temp(name, img, len);
    tern_free(img);
    return path;
}

void stb_write_in(const char *dir, const char *name, const void *data, size_t len)
{
    char *path = tern_path_join(dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot write %s", path);
    if (len) fwrite(data, 1, len, f);
    fclose(f);
    tern_free(path);
}

void stb_write_st_in(const char *dir, const char *name, const char *header, const void *data,
                     size_t data_len)
{
    size_t len;
    uint8_t *img = stb_image(header, data, data_len, &len);
    stb_write_in(dir, name, img, len);
    tern_free(img);
}

void stb_remove(char *path)
{
    unlink(path);
    char *slash = strrchr(path, '/');
    if (slash) {
        *slash = '\0';
        rmdir(path);
    }
    tern_free(path);
}

void stb_remove_dir(char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *p = tern_path_join(dir, e->d_name);
        unlink(p);
        tern_free(p);
    }
    if (d) closedir(d);
    rmdir(dir);
    tern_free(dir);
}

void stb_expect(enum tern_status st, enum tern_status want, ...)
{
    const char *msg = tern_last_error();
    if (getenv("STB_VERBOSE")) fprintf(stderr, "  message: %s\n", msg);
    if (st != want)
        fail_msg("status %s, want %s (message: %s)", tern_status_str(st), tern_status_str(want),
                 msg);
    if (strchr(msg, '\n')) fail_msg("message spans lines: %s", msg);
    va_list ap;
    va_start(ap, want);
    const char *s;
    while ((s = va_arg(ap, const char *)))
        if (!strstr(msg, s)) fail_msg("message lacks '%s': %s", s, msg);
    va_end(ap);
}
