/* file_digest.c — content digests of files, remembered by the file's identity (file_digest.h). */
#include "io/file_digest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/file.h"
#include "io/sha256.h"

int sha256_file_hex(char hex[65], const char *path, struct io_err *e) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_fail(e, "%s: cannot open: %s", path, strerror(errno));
    struct sha256 s;
    sha256_init(&s);
    uint8_t buf[1 << 16];
    for (;;) {
        ssize_t got = read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int err = errno;
            close(fd);
            return io_fail(e, "%s: read error: %s", path, strerror(err));
        }
        if (got == 0) break;
        sha256_update(&s, buf, (size_t)got);
    }
    close(fd);
    uint8_t d[32];
    sha256_final(&s, d);
    sha256_hex(d, hex);
    return 0;
}

static int is_hex64(const char *s, size_t n) {
    if (n < 64) return 0;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return n == 64 || (n == 65 && s[64] == '\n');
}

int file_sha256(char hex[65], const char *path, const char *memo_dir, struct io_err *e) {
    struct stat st;
    if (stat(path, &st) != 0) return io_fail(e, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return io_fail(e, "%s: not a regular file", path);
    if (memo_dir == NULL) return sha256_file_hex(hex, path, e);
    char key_text[256];
    const int kn = snprintf(key_text, sizeof key_text, "refine-digest-1|%llu|%llu|%lld|%lld.%09ld|%lld.%09ld",
                            (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, (long long)st.st_size,
                            (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec,
                            st.st_ctim.tv_nsec);
    struct sha256 s;
    sha256_init(&s);
    sha256_update(&s, key_text, (size_t)kn);
    uint8_t d[32];
    char key[65], memo[1400];
    sha256_final(&s, d);
    sha256_hex(d, key);
    snprintf(memo, sizeof memo, "%s/%s", memo_dir, key);
    char *text = NULL;
    size_t len = 0;
    struct io_err ignored;
    if (file_exists(memo) && read_file_text(&text, &len, memo, 128, &ignored) == 0 && is_hex64(text, len)) {
        memcpy(hex, text, 64);
        hex[64] = '\0';
        free(text);
        return 0;
    }
    free(text);
    if (sha256_file_hex(hex, path, e) != 0) return -1;
    if (make_dirs(memo_dir, &ignored) == 0) write_file_atomic(memo, hex, 64, &ignored);
    return 0;
}
