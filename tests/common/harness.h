/* harness.h — the minimal test harness every refine test binary uses.
 *
 *   EXPECT(cond, fmt, ...)   records a failure (with file:line and the message) and continues.
 *   test_seed(argc, argv, default_seed)
 *                            the seed of this run: --seed=N on the command line, else the
 *                            REFINE_SEED environment variable, else default_seed; printed once
 *                            so that any failure can be replayed.
 *   test_fail(fmt, ...)      records a failure with a message (for checks that print their own
 *                            report, e.g. compare.h).
 *   test_capture_begin() / test_capture_end()
 *                            between the two, failures are counted apart (and printed with an
 *                            "expected" prefix) instead of failing the run; test_capture_end
 *                            returns how many there were. For tests of the checks themselves
 *                            (a comparison that must reject a bad input).
 *   test_finish(name)        prints the one summary line "name: N checks, M failed" and returns
 *                            the exit status (0 when nothing failed, 1 otherwise).
 *
 * A test binary never exits 0 after a failure. Counts are process-global; tests are
 * single-threaded.
 */
#ifndef REFINE_TESTS_COMMON_HARNESS_H
#define REFINE_TESTS_COMMON_HARNESS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void test_record(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void test_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void test_pass(void);
int64_t test_failures(void);
int64_t test_checks(void);
uint64_t test_seed(int argc, char **argv, uint64_t default_seed);
/* 1 when argv holds `flag` exactly (e.g. "--bench"). */
int test_has_flag(int argc, char **argv, const char *flag);
void test_capture_begin(void);
int64_t test_capture_end(void);
int test_finish(const char *name);

#define EXPECT(cond, ...) test_record((cond) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TESTS_COMMON_HARNESS_H */
