/* metrics_test.c — the metrics log (write, resume truncation, resume records kept, a last line cut
 * by a kill dropped, the rewrite atomic under kill -9 at random moments), the SVG plot, the
 * progress line, and an unwritable log named in the message. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cJSON.h"
#include "io/file.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "train/metrics.h"

static int count(const char *hay, const char *needle) {
    int c = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) c++;
    return c;
}

/* Every line a whole JSON object, the last one terminated; the number of train records. */
static int valid_log(const char *path, int *n_train) {
    char *text = NULL;
    struct io_err e;
    if (read_file_text(&text, NULL, path, 1 << 26, &e) != 0) return 0;
    int ok = text[0] != '\0' && text[strlen(text) - 1] == '\n';
    *n_train = 0;
    for (char *line = text; ok && *line != '\0';) {
        char *nl = strchr(line, '\n');
        *nl = '\0';
        cJSON *o = cJSON_Parse(line);
        ok = o != NULL;
        *n_train += strstr(line, "\"kind\":\"train\"") != NULL;
        cJSON_Delete(o);
        line = nl + 1;
    }
    free(text);
    return ok;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A resume rewrites the log; kill -9 at random moments of the rewrite must leave a whole log,
 * the old one or the new one (regression: the rewrite truncated the file in place, and a kill
 * left a half line that blocked every later resume). */
static void test_rewrite_under_kill(const char *base, uint64_t seed) {
    char dir[1100], path[1200];
    snprintf(dir, sizeof dir, "%s/kill", base);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    struct io_err e;
    make_dirs(dir, &e);
    struct metrics m;
    enum { N = 4000, KEEP = 3000, TRIALS = 40 };
    EXPECT(metrics_open(&m, dir, "{\"kind\":\"run\"}", -1, &e) == 0, "open: %s", e.msg);
    for (int s = 1; s <= N; s++) {
        struct train_record r = {s, 3.0 - 1e-5 * s, 1e-3, 0.5, 512, 1000.0, 0.0, 0.0, s * 1.0};
        metrics_train(&m, &r, &e);
    }
    metrics_close(&m);
    char *old = NULL;
    size_t old_len = 0;
    EXPECT(read_file_text(&old, &old_len, path, 1 << 26, &e) == 0, "read: %s", e.msg);
    /* How long one rewrite takes here (the fastest of three, so that a slow moment of a loaded
     * machine does not push the kills past the end): the kills fall from 30% of it on, through
     * the part where it writes. */
    double span = 1e9;
    for (int i = 0; i < 3; i++) {
        write_file_atomic(path, old, old_len, &e);
        const double t0 = now_s();
        EXPECT(metrics_open(&m, dir, "{}", KEEP, &e) == 0, "timed rewrite: %s", e.msg);
        metrics_close(&m);
        if (now_s() - t0 < span) span = now_s() - t0;
    }
    struct rng r;
    rng_init(&r, seed);
    int killed = 0, bad = 0, n_old = 0, n_new = 0;
    for (int trial = 0; trial < TRIALS; trial++) {
        write_file_atomic(path, old, old_len, &e);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            struct metrics mk;
            struct io_err ek;
            _exit(metrics_open(&mk, dir, "{}", KEEP, &ek) == 0 ? 0 : 1);
        }
        usleep((useconds_t)(1e6 * span * rng_range(&r, 0.3, 1.0)));
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        killed += WIFSIGNALED(status);
        int n = 0;
        const int ok = valid_log(path, &n) && (n == N || n == KEEP);
        bad += !ok;
        n_old += ok && n == N;
        n_new += ok && n == KEEP;
        if (!ok) printf("  trial %d: the log is damaged or has %d train records\n", trial, n);
    }
    free(old);
    printf("kill -9 during the resume rewrite: %d killed (rewrite %.0f ms), old log %d, new log %d, damaged %d\n", killed,
           1e3 * span, n_old, n_new, bad);
    EXPECT(bad == 0, "kill -9 during the resume rewrite (%d killed, rewrite %.0f ms): every log whole (old %d, new %d)",
           killed, 1e3 * span, n_old, n_new);
    EXPECT(metrics_open(&m, dir, "{}", KEEP, &e) == 0 && m.n_train == KEEP, "and the next resume reads it: %s", e.msg);
    metrics_close(&m);
}

int main(int argc, char **argv) {
    const uint64_t seed = test_seed(argc, argv, 20);
    const char *tmp = getenv("TEST_TMPDIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/metrics", tmp != NULL ? tmp : "/tmp");
    struct io_err e;
    EXPECT(make_dirs(dir, &e) == 0, "mkdir: %s", e.msg);
    struct metrics m;
    EXPECT(metrics_open(&m, dir, "{\"kind\":\"run\",\"options\":{}}", -1, &e) == 0, "open: %s", e.msg);
    struct eval_record v0 = {0, 3.1, 0, 4096, 0.0}; /* the evaluation before the first step */
    EXPECT(metrics_eval(&m, &v0, &e) == 0, "eval record: %s", e.msg);
    for (int s = 1; s <= 10; s++) {
        struct train_record r = {s, 3.0 - 0.1 * s, 1e-3, 0.5, 512, 1000.0, 0.0, 0.0, s * 1.0};
        /* the odd steps carry FP8 statistics (a resumed log must keep them, byte for byte) */
        const struct fp8_record f8 = {s % 2, 0.25 * s, 4096.0 + s, 3LL * s};
        EXPECT(metrics_train_fp8(&m, &r, &f8, &e) == 0, "train record: %s", e.msg);
        if (s % 5 == 0) {
            struct eval_record v = {s, 2.9 - 0.1 * s, 0, 4096, s * 1.0};
            EXPECT(metrics_eval(&m, &v, &e) == 0, "eval record: %s", e.msg);
        }
    }
    EXPECT(metrics_plot(&m, &e) == 0, "plot: %s", e.msg);
    metrics_close(&m);

    char path[1200], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    EXPECT(read_file_text(&text, NULL, path, 1 << 20, &e) == 0, "read log: %s", e.msg);
    EXPECT(count(text, "\"kind\":\"train\"") == 10 && count(text, "\"kind\":\"eval\"") == 3 && count(text, "\"kind\":\"run\"") == 1,
           "log holds the header, 10 train and 3 eval records");
    EXPECT(count(text, "\"fp8_scale_min\":") == 5 && strstr(text, "\"fp8_scale_min\":0.75,\"fp8_scale_max\":4099,\"fp8_saturated\":9}") != NULL,
           "the odd steps' FP8 statistics are logged:\n%s", text);
    char *written = text; /* the order the loop wrote, which a resumed log must keep */
    text = NULL;
    snprintf(path, sizeof path, "%s/loss.svg", dir);
    EXPECT(read_file_text(&text, NULL, path, 1 << 20, &e) == 0, "read svg: %s", e.msg);
    EXPECT(strncmp(text, "<svg", 4) == 0 && count(text, "<polyline") == 2 && count(text, "<circle") == 3 &&
               strstr(text, "</svg>") != NULL,
           "svg has two series and the eval points");
    free(text);

    /* Resume at step 10 (the last): the log is rewritten byte for byte (regression: the step-0
     * evaluation used to move after the first train record). */
    EXPECT(metrics_open(&m, dir, "{}", 10, &e) == 0, "reopen at 10: %s", e.msg);
    metrics_close(&m);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    EXPECT(read_file_text(&text, NULL, path, 1 << 20, &e) == 0, "read log");
    EXPECT(strcmp(text, written) == 0, "a log resumed at its last step is unchanged:\n%s\nwas:\n%s", text, written);
    free(text);
    free(written);

    /* Resume at step 7: records 8..10 and the eval at 10 are dropped; appending continues. */
    EXPECT(metrics_open(&m, dir, "{\"kind\":\"run\",\"options\":{\"ignored\":1}}", 7, &e) == 0, "reopen: %s", e.msg);
    EXPECT(m.n_train == 7 && m.n_eval == 2, "kept 7 train and 2 eval records (%d, %d)", m.n_train, m.n_eval);
    struct train_record r8 = {8, 2.0, 1e-3, 0.4, 512, 900.0, 0.0, 0.0, 8.5};
    EXPECT(metrics_train(&m, &r8, &e) == 0, "append");
    metrics_close(&m);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    EXPECT(read_file_text(&text, NULL, path, 1 << 20, &e) == 0, "read log");
    EXPECT(count(text, "\"kind\":\"train\"") == 8 && count(text, "\"kind\":\"eval\"") == 2 && strstr(text, "ignored") == NULL,
           "resumed log: original header, 8 train records, 2 evals");
    free(text);

    /* A corrupt log is reported with file and line. */
    FILE *f = fopen(path, "a");
    fputs("{\"kind\":\"tr\n", f);
    fclose(f);
    EXPECT(metrics_open(&m, dir, "{}", 8, &e) == -1 && strstr(e.msg, "metrics.jsonl:12") != NULL, "corrupt line: %s", e.msg);

    /* A last line cut short by a kill (no newline) is dropped; a resume record is kept as history
     * while its step is kept, in its place after its step's records. */
    EXPECT(read_file_text(&text, NULL, path, 1 << 20, &e) == 0, "read log");
    *strstr(text, "{\"kind\":\"tr\n") = '\0'; /* repair the damaged line by hand */
    write_file_atomic(path, text, strlen(text), &e);
    free(text);
    if (metrics_open(&m, dir, "{}", 7, &e) != 0) {
        test_fail("reopen at 7: %s", e.msg);
        return test_finish("metrics_test");
    }
    EXPECT(metrics_note(&m, 7, "{\"kind\":\"resume\",\"step\":7,\"changed\":{\"lr\":1}}", &e) == 0, "note: %s", e.msg);
    struct train_record r8b = {8, 2.0, 1e-3, 0.4, 512, 900.0, 0.0, 0.0, 8.5};
    metrics_train(&m, &r8b, &e);
    metrics_close(&m);
    f = fopen(path, "a");
    fputs("{\"kind\":\"train\",\"step\":9,\"lo", f);
    fclose(f);
    EXPECT(metrics_open(&m, dir, "{}", 8, &e) == 0 && m.n_train == 8 && m.n_note == 1, "a half last line is dropped: %s",
           e.msg);
    metrics_close(&m);
    EXPECT(read_file_text(&text, NULL, path, 1 << 20, &e) == 0, "read log");
    const char *note = strstr(text, "\"kind\":\"resume\""), *t7 = strstr(text, "\"step\":7,"), *t8 = strstr(text, "\"step\":8,");
    EXPECT(note != NULL && t7 != NULL && t8 != NULL && t7 < note && note < t8 && strstr(text, "\"lo\n") == NULL,
           "the resume record stays between steps 7 and 8; the half line is gone:\n%s", text);
    free(text);
    EXPECT(metrics_open(&m, dir, "{}", 6, &e) == 0 && m.n_note == 0, "resuming before it drops it");
    metrics_close(&m);

    /* A log that cannot be written is named (regression: the message named nothing). */
    char blocked[1100], logdir[1200];
    snprintf(blocked, sizeof blocked, "%s/blocked", tmp != NULL ? tmp : "/tmp");
    snprintf(logdir, sizeof logdir, "%s/metrics.jsonl", blocked);
    make_dirs(logdir, &e); /* a folder where the log should be */
    EXPECT(metrics_open(&m, blocked, "{}", -1, &e) == -1 && strstr(e.msg, "blocked/metrics.jsonl: cannot write") != NULL,
           "an unwritable log is named: %s", e.msg);

    test_rewrite_under_kill(tmp != NULL ? tmp : "/tmp", seed);

    char line[256];
    struct train_record r = {12, 2.34567, 1e-3, 0.812, 512, 1234.4, 0.123, 3.2, 75.0};
    metrics_progress_line(line, sizeof line, &r, 60, 3725.0);
    EXPECT(strcmp(line, "step 12/60 | loss 2.3457 | lr 0.001 | grad 0.812 | 1234 tok/s | MFU 12.3% | mem 3.20 GiB | 01:15 elapsed | ETA 1:02:05") == 0,
           "progress line: %s", line);
    return test_finish("metrics_test");
}
