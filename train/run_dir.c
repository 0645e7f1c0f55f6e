/* run_dir.c — claiming, locking and cleaning the --out folder (run_dir.h). */
#include "train/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/file.h"

#define LOCK_NAME ".refine.lock"

/* The names refine writes, per folder (run_dir.h). */
static const char *const k_out_files[] = {"metrics.jsonl", "loss.svg", NULL};
static const char *const k_checkpoint_files[] = {"LATEST", NULL};
static const char *const k_step_files[] = {"state.safetensors", "trainer.json", "SHA256SUMS", NULL};
static const char *const k_adapter_files[] = {"adapter_config.json", "adapter_model.safetensors", NULL};
static const char *const k_merged_files[] = {"config.json", "model.safetensors", NULL};
/* Any of these in --out means it holds a run. */
static const char *const k_run_names[] = {"metrics.jsonl", "loss.svg", "checkpoint", "adapter", "merged", NULL};

/* name is "<file>.tmp.<digits>" for a file of the list (with finals_too: or the file itself). */
static int is_owned(const char *name, const char *const *files, int finals_too) {
    for (int i = 0; files[i] != NULL; i++) {
        const size_t n = strlen(files[i]);
        if (strncmp(name, files[i], n) != 0) continue;
        if (name[n] == '\0') return finals_too;
        if (strncmp(name + n, ".tmp.", 5) != 0 || name[n + 5] == '\0') continue;
        const char *p = name + n + 5;
        while (*p >= '0' && *p <= '9') p++;
        if (*p == '\0') return 1;
    }
    return 0;
}

/* "step-<digits>" (with tmp: "step-<digits>.tmp"). */
static int is_step_name(const char *name, int tmp) {
    if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9') return 0;
    const char *p = name + 5;
    while (*p >= '0' && *p <= '9') p++;
    return tmp ? strcmp(p, ".tmp") == 0 : *p == '\0';
}

/* Opens dir/name as a folder without following a link; -1 when it is not one. */
static int open_dir_at(int dirfd, const char *name) {
    return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Unlinks the entries of the folder behind fd that is_owned accepts (never a folder: unlinkat
 * without AT_REMOVEDIR refuses one). */
static void unlink_owned(int fd, const char *const *files, int finals_too) {
    int dup_fd = dup(fd);
    if (dup_fd < 0) return;
    DIR *d = fdopendir(dup_fd);
    if (d == NULL) {
        close(dup_fd);
        return;
    }
    rewinddir(d); /* the duplicate shares the read offset of fd */
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL)
        if (is_owned(ent->d_name, files, finals_too)) unlinkat(fd, ent->d_name, 0);
    closedir(d);
}

/* Removes dirfd/name: a link or a file is unlinked; a folder loses the owned files, then is
 * removed when empty. Returns 0 when the name is gone. */
static int remove_owned_dir(int dirfd, const char *name, const char *const *files, const char *shown) {
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlinkat(dirfd, name, 0);
    int fd = open_dir_at(dirfd, name);
    if (fd < 0) return -1;
    unlink_owned(fd, files, 1);
    close(fd);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0) return 0;
    if (errno == ENOTEMPTY || errno == EEXIST)
        fprintf(stderr, "refine: warning: %s holds files refine did not write; left in place\n", shown);
    return -1;
}

int run_dir_remove_step(const char *checkpoint_dir, const char *name) {
    if (!is_step_name(name, 0) && !is_step_name(name, 1)) return -1; /* not a name refine writes */
    int fd = open(checkpoint_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    char shown[2400];
    snprintf(shown, sizeof shown, "%s/%s", checkpoint_dir, name);
    const int rc = remove_owned_dir(fd, name, k_step_files, shown);
    close(fd);
    return rc;
}

/* In checkpoint/: step folders (all, or only the .tmp ones), LATEST and its leftovers. */
static void clean_checkpoint(int outfd, const char *out, int everything) {
    int fd = open_dir_at(outfd, "checkpoint");
    if (fd < 0) {
        if (everything) unlinkat(outfd, "checkpoint", 0); /* a link or a file of that name */
        return;
    }
    char shown[2400];
    int dup_fd = dup(fd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (d == NULL && dup_fd >= 0) close(dup_fd);
    if (d != NULL) rewinddir(d); /* the duplicate shares the read offset of fd */
    /* collect first: removing while reading a folder may skip entries */
    char (*names)[256] = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *ent; d != NULL && (ent = readdir(d)) != NULL;) {
        if (is_step_name(ent->d_name, 0) && !everything) {
            /* a step folder that stays: only the leftovers inside it go */
            int sfd = open_dir_at(fd, ent->d_name);
            if (sfd >= 0) {
                unlink_owned(sfd, k_step_files, 0);
                close(sfd);
            }
            continue;
        }
        if (!is_step_name(ent->d_name, 1) && !is_step_name(ent->d_name, 0)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char (*grown)[256] = realloc(names, cap * sizeof *names);
            if (grown == NULL) break;
            names = grown;
        }
        snprintf(names[n++], 256, "%s", ent->d_name);
    }
    if (d != NULL) closedir(d);
    for (size_t i = 0; i < n; i++) {
        snprintf(shown, sizeof shown, "%s/checkpoint/%s", out, names[i]);
        remove_owned_dir(fd, names[i], k_step_files, shown);
    }
    free(names);
    unlink_owned(fd, k_checkpoint_files, everything);
    close(fd);
    if (everything && unlinkat(outfd, "checkpoint", AT_REMOVEDIR) != 0 && errno == ENOTEMPTY)
        fprintf(stderr, "refine: warning: %s/checkpoint holds files refine did not write; left in place\n", out);
}

/* Deletes refine's names in out (everything) or only the leftovers of killed runs. */
static void clean_out(const char *out, int everything) {
    int fd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    unlink_owned(fd, k_out_files, everything);
    clean_checkpoint(fd, out, everything);
    const char *sub[2] = {"adapter", "merged"};
    const char *const *files[2] = {k_adapter_files, k_merged_files};
    char shown[2400];
    for (int i = 0; i < 2; i++) {
        if (everything) {
            snprintf(shown, sizeof shown, "%s/%s", out, sub[i]);
            remove_owned_dir(fd, sub[i], files[i], shown);
        } else {
            int sfd = open_dir_at(fd, sub[i]);
            if (sfd >= 0) {
                unlink_owned(sfd, files[i], 0);
                close(sfd);
            }
        }
    }
    close(fd);
}

int run_dir_holds_run(const char *out) {
    char p[2400];
    struct stat st;
    for (int i = 0; k_run_names[i] != NULL; i++) {
        snprintf(p, sizeof p, "%s/%s", out, k_run_names[i]);
        if (lstat(p, &st) == 0) return 1;
    }
    return 0;
}

/* 1 when path (which exists) lies in folder out (or is out). */
static int inside(const char *path, const char *out) {
    char a[PATH_MAX], b[PATH_MAX];
    if (realpath(path, a) == NULL || realpath(out, b) == NULL) return 0;
    const size_t n = strlen(b);
    return strncmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '/' || (n == 1 && b[0] == '/'));
}

/* ---- a folder created for a run that then wrote nothing is removed at exit ---------------- */

static char g_created[1024];
static int g_atexit_set;

static void remove_if_unused(void) {
    if (g_created[0] == '\0') return;
    DIR *d = opendir(g_created);
    if (d == NULL) return;
    int other = 0;
    for (struct dirent *ent; (ent = readdir(d)) != NULL;)
        other |= strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0 && strcmp(ent->d_name, LOCK_NAME) != 0;
    closedir(d);
    if (other) return;
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", g_created, LOCK_NAME);
    unlink(p);
    rmdir(g_created);
}

int run_dir_claim(struct run_dir *d, const char *out, const char *resume, int overwrite, struct io_err *e) {
    d->lock_fd = -1;
    snprintf(d->path, sizeof d->path, "%s", out);
    struct stat st;
    if (resume != NULL && resume[0] != '\0' && stat(resume, &st) != 0)
        return io_fail(e, "--resume %s: %s (expected the --out folder of an earlier run, or its checkpoint folder)",
                       resume, strerror(errno));
    const int existed = stat(out, &st) == 0;
    if (existed && !S_ISDIR(st.st_mode)) return io_fail(e, "--out %s: exists and is not a folder", out);
    if (make_dirs(out, e) != 0) return -1;
    char lock[1200];
    snprintf(lock, sizeof lock, "%s/%s", out, LOCK_NAME);
    int fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return io_fail(e, "%s: cannot create the run's lock file: %s", lock, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        char holder[64] = "";
        ssize_t got = pread(fd, holder, sizeof holder - 1, 0);
        holder[got > 0 ? got : 0] = '\0';
        holder[strcspn(holder, "\r\n")] = '\0';
        close(fd);
        if (err == EWOULDBLOCK)
            return io_fail(e, "--out %s: another refine run (%s%s) is writing to this folder; wait for it to end, or "
                              "choose another --out",
                           out, holder[0] ? "pid " : "pid unknown", holder);
        return io_fail(e, "%s: cannot lock: %s", lock, strerror(err));
    }
    char pid[32];
    const int pn = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)pn, 0) != pn) {
        const int err = errno;
        close(fd);
        return io_fail(e, "%s: cannot write: %s", lock, strerror(err));
    }
    d->lock_fd = fd;
    g_created[0] = '\0';
    if (!existed) {
        snprintf(g_created, sizeof g_created, "%s", out);
        if (!g_atexit_set) atexit(remove_if_unused);
        g_atexit_set = 1;
    }

    const int continuing = resume != NULL && resume[0] != '\0' && inside(resume, out);
    if (!continuing && run_dir_holds_run(out)) {
        if (!overwrite) {
            char ck[1200];
            snprintf(ck, sizeof ck, "%s/checkpoint/LATEST", out);
            run_dir_release(d);
            if (file_exists(ck))
                return io_fail(e, "--out %s holds an earlier run; to continue it, run the same command with --resume "
                                  "%s/checkpoint; to keep it, choose another --out; to replace it, add --overwrite",
                               out, out);
            return io_fail(e, "--out %s holds an earlier run (without a checkpoint to resume from); to keep it, "
                              "choose another --out; to replace it, add --overwrite",
                           out);
        }
        clean_out(out, 1);
    }
    clean_out(out, 0);
    return 0;
}

void run_dir_release(struct run_dir *d) {
    if (d->lock_fd >= 0) close(d->lock_fd); /* closing the last descriptor drops the flock */
    d->lock_fd = -1;
}

/* ---- the resume command -------------------------------------------------------------------- */

static void append_word(char *buf, size_t cap, const char *w) {
    size_t n = strlen(buf);
    int plain = w[0] != '\0';
    for (const char *p = w; *p; p++)
        plain &= (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 strchr("_@%+=:,./-", *p) != NULL;
    if (n > 0 && n + 1 < cap) buf[n++] = ' ';
    if (!plain && n + 1 < cap) buf[n++] = '\'';
    for (const char *p = w; *p && n + 5 < cap; p++) {
        if (*p == '\'' && !plain) {
            memcpy(buf + n, "'\\''", 4);
            n += 4;
        } else {
            buf[n++] = *p;
        }
    }
    if (!plain && n + 1 < cap) buf[n++] = '\'';
    buf[n < cap ? n : cap - 1] = '\0';
}

void run_dir_resume_command(char *buf, size_t cap, int argc, char **argv, const char *out) {
    buf[0] = '\0';
    for (int i = 0; i < argc; i++) {
        if (i > 0 && (strcmp(argv[i], "--overwrite") == 0 || strncmp(argv[i], "--resume=", 9) == 0)) continue;
        if (i > 0 && strcmp(argv[i], "--resume") == 0) {
            i++; /* and its value */
            continue;
        }
        append_word(buf, cap, argv[i]);
    }
    char ck[1200];
    snprintf(ck, sizeof ck, "%s/checkpoint", out);
    append_word(buf, cap, "--resume");
    append_word(buf, cap, ck);
}
