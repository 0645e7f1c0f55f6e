/* fuzz_file.h — for the fuzz targets whose reader takes a path: writes the input to one
 * per-process file under $TMPDIR (default /tmp) and returns its path. */
#ifndef REFINE_TESTS_FUZZ_FUZZ_FILE_H
#define REFINE_TESTS_FUZZ_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix) {
    static char path[512];
    if (path[0] == '\0') {
        const char *t = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/refine_fuzz_%d%s", t && *t ? t : "/tmp", (int)getpid(), suffix);
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) abort();
    if (size > 0 && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return path;
}

#endif
