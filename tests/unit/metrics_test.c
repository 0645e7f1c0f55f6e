/* metrics_test.c — the metrics log (write, resume truncation), the SVG plot, the progress line. */
#include <stdlib.h>
#include <string.h>

#include "io/file.h"
#include "tests/common/harness.h"
#include "train/metrics.h"

static int count(const char *hay, const char *needle) {
    int c = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) c++;
    return c;
}

int main(void) {
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

    char line[256];
    struct train_record r = {12, 2.34567, 1e-3, 0.812, 512, 1234.4, 0.123, 3.2, 75.0};
    metrics_progress_line(line, sizeof line, &r, 60, 3725.0);
    EXPECT(strcmp(line, "step 12/60 | loss 2.3457 | lr 0.001 | grad 0.812 | 1234 tok/s | MFU 12.3% | mem 3.20 GiB | 01:15 elapsed | ETA 1:02:05") == 0,
           "progress line: %s", line);
    return test_finish("metrics_test");
}
