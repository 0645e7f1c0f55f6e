/* job_check.c — the ranks agree on options, model and data (job_check.h). */
#include "trainers/job_check.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/check.h"
#include "io/sha256.h"

#define SAMPLES 16
#define SAMPLE_BYTES ((size_t)64 << 10)

/* name, size and SAMPLES blocks of one file into s. */
static int hash_file(struct sha256 *s, const char *path, const char *name, struct io_err *e) {
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return io_fail(e, "%s: cannot open it to compare it with the other ranks'", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return io_fail(e, "%s: cannot read its size", path);
    }
    const uint64_t size = (uint64_t)st.st_size;
    sha256_update(s, name, strlen(name) + 1);
    sha256_update(s, &size, sizeof size);
    unsigned char *buf = malloc(SAMPLE_BYTES);
    CHECK(buf != NULL, "out of memory");
    for (int k = 0; k < SAMPLES; k++) {
        const uint64_t off = size > SAMPLE_BYTES ? (size - SAMPLE_BYTES) / (SAMPLES - 1) * (uint64_t)k : 0;
        const ssize_t n = pread(fd, buf, SAMPLE_BYTES, (off_t)off);
        if (n < 0) {
            free(buf);
            close(fd);
            return io_fail(e, "%s: read error", path);
        }
        sha256_update(s, buf, (size_t)n);
        if (size <= SAMPLE_BYTES) break;
    }
    free(buf);
    close(fd);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int job_fingerprint_model(uint8_t digest[32], const char *path, struct io_err *e) {
    struct sha256 s;
    sha256_init(&s);
    struct stat st;
    if (stat(path, &st) != 0) return io_fail(e, "%s: no such model", path);
    int rc = 0;
    if (!S_ISDIR(st.st_mode)) {
        const char *base = strrchr(path, '/');
        rc = hash_file(&s, path, base ? base + 1 : path, e);
    } else {
        DIR *d = opendir(path);
        if (d == NULL) return io_fail(e, "%s: cannot list the model folder", path);
        char **names = NULL;
        int n = 0, cap = 0;
        struct dirent *ent;
        while ((ent = readdir(d)) != NULL) {
            if (ent->d_name[0] == '.') continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 32;
                names = realloc(names, (size_t)cap * sizeof *names);
                CHECK(names != NULL, "out of memory");
            }
            names[n] = strdup(ent->d_name);
            CHECK(names[n] != NULL, "out of memory");
            n++;
        }
        closedir(d);
        if (n > 0) qsort(names, (size_t)n, sizeof *names, cmp_names);
        char full[4096];
        for (int i = 0; i < n && rc == 0; i++) {
            snprintf(full, sizeof full, "%s/%s", path, names[i]);
            if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) rc = hash_file(&s, full, names[i], e);
        }
        for (int i = 0; i < n; i++) free(names[i]);
        free(names);
    }
    sha256_final(&s, digest);
    return rc;
}

void job_fingerprint_data(uint8_t digest[32], const struct dataset *d) {
    struct sha256 s;
    sha256_init(&s);
    const int64_t head[5] = {d->T, (int64_t)d->S, d->n_train, d->n_val, d->n_targets};
    sha256_update(&s, head, sizeof head);
    const size_t samples = 4096;
    for (size_t k = 0; k < samples && d->S > 0; k++) {
        const size_t i = d->S <= samples ? k : (size_t)((uint64_t)k * (uint64_t)(d->S - 1) / (samples - 1)) /* S < 2^52 */;
        if (i >= d->S) break;
        sha256_update(&s, &d->stream[i], sizeof d->stream[i]);
    }
    sha256_final(&s, digest);
}

void job_fingerprint_options(uint8_t digest[32], const struct train_options *o) {
    char *json = malloc(65536);
    CHECK(json != NULL, "out of memory");
    CHECK(train_options_to_json(o, json, 65536) == 0, "options do not fit their JSON buffer");
    struct sha256 s;
    sha256_init(&s);
    sha256_update(&s, json, strlen(json));
    sha256_final(&s, digest);
    free(json);
}

int job_check(const struct train_comm *comm, const uint8_t digests[JOB_N_PARTS][32], struct io_err *e) {
    static const char *const parts[JOB_N_PARTS] = {"options", "model files (--model)", "training data (--data)"};
    uint8_t root[JOB_N_PARTS][32];
    memcpy(root, digests, sizeof root);
    if (comm->broadcast(comm->self, root, sizeof root, 0, "the fingerprints of options, model and data", e)) return -1;
    int64_t *bad = calloc((size_t)comm->world, sizeof *bad);
    CHECK(bad != NULL, "out of memory");
    for (int p = 0; p < JOB_N_PARTS; p++)
        if (memcmp(root[p], digests[p], 32) != 0) bad[comm->rank] |= (int64_t)1 << p;
    if (comm->sum(comm->self, bad, comm->world, COMM_I64, "the ranks' disagreements", e)) {
        free(bad);
        return -1;
    }
    char msg[IO_ERR_CAP] = "";
    int n_bad = 0;
    for (int r = 0; r < comm->world; r++)
        for (int p = 0; p < JOB_N_PARTS; p++) {
            if (!(bad[r] >> p & 1)) continue;
            const size_t len = strlen(msg);
            if (n_bad++ < 8)
                snprintf(msg + len, sizeof msg - len, "%srank %d's %s", len ? ", " : "", r, parts[p]);
        }
    free(bad);
    if (n_bad == 0) return 0;
    return io_fail(e, "the ranks must train the same thing, but %s%s differ from rank 0's: give every rank the same "
                      "flags and the same files",
                   msg, n_bad > 8 ? " and more" : "");
}
