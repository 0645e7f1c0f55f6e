/* file.c — mapping, reading and atomically writing whole files (file.h). */
#include "io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int map_file(struct mapped_file *m, const char *path, struct io_err *e) {
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_fail(e, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return io_fail(e, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return io_fail(e, "%s: not a regular file", path);
    }
    m->size = (size_t)st.st_size;
    if (m->size > 0) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            return io_fail(e, "%s: cannot map %zu bytes: %s", path, m->size, strerror(err));
        }
        m->data = (const uint8_t *)p;
    }
    close(fd);
    return 0;
}

void unmap_file(struct mapped_file *m) {
    if (m->data != NULL && m->size > 0) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

int read_file_text(char **out, size_t *len, const char *path, size_t max_bytes, struct io_err *e) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) return io_fail(e, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (buf == NULL) {
        fclose(f);
        return io_fail(e, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                return io_fail(e, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n > max_bytes) {
            free(buf);
            fclose(f);
            return io_fail(e, "%s: larger than the %zu bytes allowed for this kind of file", path, max_bytes);
        }
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return io_fail(e, "%s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return 0;
}

static int fsync_dir_of(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    const char *dir = dirname(tmp);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int write_file_atomic_parts(const char *path, const struct file_part *parts, int nparts, struct io_err *e) {
    char tmp[4096];
    int len = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (len < 0 || (size_t)len >= sizeof tmp) return io_fail(e, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return io_fail(e, "%s: cannot create: %s", tmp, strerror(errno));
    for (int i = 0; i < nparts; i++) {
        const char *p = parts[i].data;
        size_t left = parts[i].size;
        while (left > 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0) {
                if (errno == EINTR) continue;
                int err = errno;
                close(fd);
                unlink(tmp);
                return io_fail(e, "%s: write failed: %s", tmp, strerror(err));
            }
            p += w;
            left -= (size_t)w;
        }
    }
    if (fsync(fd) != 0) {
        int err = errno;
        close(fd);
        unlink(tmp);
        return io_fail(e, "%s: fsync failed: %s", tmp, strerror(err));
    }
    if (close(fd) != 0) {
        unlink(tmp);
        return io_fail(e, "%s: close failed: %s", tmp, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return io_fail(e, "%s: cannot rename %s over it: %s", path, tmp, strerror(err));
    }
    if (fsync_dir_of(path) != 0) return io_fail(e, "%s: cannot fsync its directory: %s", path, strerror(errno));
    return 0;
}

int write_file_atomic(const char *path, const void *data, size_t n, struct io_err *e) {
    struct file_part p = {data, n};
    return write_file_atomic_parts(path, &p, 1, e);
}

int make_dirs(const char *path, struct io_err *e) {
    char tmp[4096];
    int len = snprintf(tmp, sizeof tmp, "%s", path);
    if (len <= 0 || (size_t)len >= sizeof tmp) return io_fail(e, "%s: path too long", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return io_fail(e, "%s: cannot create directory: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return io_fail(e, "%s: cannot create directory: %s", tmp, strerror(errno));
    struct stat st;
    if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)) return io_fail(e, "%s: exists and is not a directory", tmp);
    return 0;
}

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}
