/* harness.c — failure counting, seeds and the summary line (harness.h). */
#include "tests/common/harness.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t g_checks;
static int64_t g_failures;
static int g_capturing;
static int64_t g_captured;

/* Counts one failure: into the capture while one is open, else into the run's total. */
static void count_failure(void) {
    if (g_capturing) {
        g_captured++;
        fputs("(expected) ", stderr);
    } else {
        g_failures++;
    }
}

void test_record(int ok, const char *file, int line, const char *fmt, ...) {
    g_checks++;
    if (ok) return;
    count_failure();
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void test_fail(const char *fmt, ...) {
    g_checks++;
    count_failure();
    fputs("FAIL ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void test_pass(void) { g_checks++; }

int64_t test_failures(void) { return g_failures; }

int64_t test_checks(void) { return g_checks; }

uint64_t test_seed(int argc, char **argv, uint64_t default_seed) {
    uint64_t seed = default_seed;
    const char *src = "default";
    const char *env = getenv("REFINE_SEED");
    if (env != NULL && env[0] != '\0') {
        seed = strtoull(env, NULL, 0);
        src = "REFINE_SEED";
    }
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--seed=", 7) == 0) {
            seed = strtoull(argv[i] + 7, NULL, 0);
            src = "--seed";
        }
    }
    printf("seed %" PRIu64 " (%s; replay with --seed=%" PRIu64 ")\n", seed, src, seed);
    return seed;
}

int test_has_flag(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

void test_capture_begin(void) {
    g_capturing = 1;
    g_captured = 0;
}

int64_t test_capture_end(void) {
    g_capturing = 0;
    return g_captured;
}

int test_finish(const char *name) {
    printf("%s: %" PRId64 " checks, %" PRId64 " failed\n", name, g_checks, g_failures);
    fflush(stdout);
    return g_failures == 0 ? 0 : 1;
}
