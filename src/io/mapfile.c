/*
 * mapfile.c — mapping a whole regular file read-only (the safetensors and
 * GGUF readers' one way into a file).
 *
 * Depends on base/, io_internal.h, POSIX open/fstat/mmap.
 */
#include "io/io_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum tern_status tern_io_map_file(const char *path, size_t min_bytes, const char *min_what,
                                  void **map, size_t *bytes)
{
    *map = NULL;
    *bytes = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        enum tern_status st = errno == ENOENT ? TERN_E_NOT_FOUND : TERN_E_IO;
        return tern_io_error(st, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat sb;
    enum tern_status st = TERN_OK;
    if (fstat(fd, &sb) != 0) {
        st = tern_io_error(TERN_E_IO, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st = tern_io_error(TERN_E_IO, "%s: not a regular file", path);
    } else if ((uint64_t)sb.st_size < min_bytes || sb.st_size == 0) {
        st = tern_io_error(TERN_E_FORMAT, "%s: file is %lld bytes, too short for %s", path,
                           (long long)sb.st_size, min_what);
    } else if ((uint64_t)sb.st_size > SIZE_MAX) {
        st = tern_io_error(TERN_E_UNSUPPORTED, "%s: file too large to map", path);
    } else {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            st = tern_io_error(TERN_E_IO, "%s: mmap of %lld bytes failed: %s", path,
                               (long long)sb.st_size, strerror(errno));
        } else {
            *map = m;
            *bytes = (size_t)sb.st_size;
        }
    }
    close(fd);
    return st;
}

void tern_io_unmap_file(void *map, size_t bytes)
{
    if (map) munmap(map, bytes);
}
