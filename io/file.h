/* file.h — whole-file access for the readers and writers of io/.
 *
 * map_file: maps a file read-only (mmap; an empty file gives data == NULL, size == 0). The
 *   mapping stays valid until unmap_file; readers keep pointers into it instead of copying.
 * read_file_text: reads a whole (small) file into a NUL-terminated heap buffer (config.json,
 *   tokenizer.json, adapter_config.json); the caller frees it.
 * write_file_atomic: writes `n` bytes to `path` so that a reader (or a kill at any moment) sees
 *   either the old file or the complete new one: data goes to "<path>.tmp.<pid>", is fsync'ed,
 *   renamed over path, and the directory is fsync'ed. The io_err names the path on failure.
 * write_file_atomic_parts: the same for a file assembled from several buffers.
 * make_dirs: mkdir -p.
 */
#ifndef REFINE_IO_FILE_H
#define REFINE_IO_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "io/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mapped_file {
    const uint8_t *data;
    size_t size;
    char path[1024];
};

int map_file(struct mapped_file *m, const char *path, struct io_err *e);
void unmap_file(struct mapped_file *m);

int read_file_text(char **out, size_t *len, const char *path, size_t max_bytes, struct io_err *e);

struct file_part {
    const void *data;
    size_t size;
};

int write_file_atomic(const char *path, const void *data, size_t n, struct io_err *e);
int write_file_atomic_parts(const char *path, const struct file_part *parts, int nparts, struct io_err *e);
int make_dirs(const char *path, struct io_err *e);
int file_exists(const char *path);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_FILE_H */
