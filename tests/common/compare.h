/* compare.h — the one comparison module of refine's tests (STYLE.md, "Tests and tolerances").
 *
 * Tolerance tiers, each derived, never tuned per call site:
 *   (a) exact        cmp_exact_f32 / cmp_exact_bytes: bitwise equality (any NaN matches any NaN).
 *                    For data movement, quantize/dequantize, GEMMs on integer-valued inputs.
 *   (b) elementwise  cmp_elementwise: |got − ref| ≤ k·eps·(|ref| + floor) for every element, plus
 *                    an aggregate bound: ‖got − ref‖₂ ≤ (k/4)·eps·(‖ref‖₂ + floor·√n).
 *                    eps is the machine epsilon of the dtype the result was rounded to (BF16_EPS,
 *                    FLT_EPSILON, ...); k counts the roundings in which the two sides may differ.
 *                    floor is an absolute scale below which relative error is meaningless (e.g.
 *                    the rms of the ref when cancellation makes single elements tiny).
 *   (c) vs naive     cmp_vs_naive: the max and the rms error of got against an fp32/f64 ref are at
 *                    most `factor` (2 by default, flash-attention's rule) times those of a naive
 *                    implementation computed in the same low precision, plus abs_floor.
 * In every tier, NaN and ±Inf positions must agree: ref NaN ⇒ got NaN; ref ±Inf ⇒ got the same
 * Inf; got non-finite where ref is finite is a failure.
 *
 * Every call counts one check in harness.h. On failure it prints one report: op, what, shape,
 * dtype, seed, number of bad elements, the first and the worst index with got/ref/error/threshold
 * and the worst error as a % of its budget. With REFINE_VERBOSE=1 passes print their stats too.
 * Returns 0 on pass, 1 on failure.
 */
#ifndef REFINE_TESTS_COMMON_COMPARE_H
#define REFINE_TESTS_COMMON_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What is being compared; every field is printed in a failure report. */
struct cmp_case {
    const char *op;    /* e.g. "rmsnorm_forward" */
    const char *what;  /* e.g. "out", "dx" */
    const char *shape; /* e.g. "N=7 C=33" */
    const char *dtype; /* e.g. "bf16" */
    uint64_t seed;
};

/* Statistics of the last comparison (filled by every cmp_* call when stats != NULL). */
struct cmp_stats {
    int64_t n;
    int64_t n_bad;
    int64_t first_bad; /* -1 when none */
    int64_t worst;     /* index of the largest error/threshold ratio */
    double worst_ratio;
    double max_abs_err;
    double rms_err;
    double rms_ref;
};

int cmp_exact_f32(const struct cmp_case *c, const float *got, const float *ref, int64_t n);
int cmp_exact_bytes(const struct cmp_case *c, const void *got, const void *ref, size_t nbytes);
int cmp_elementwise(const struct cmp_case *c, const float *got, const float *ref, int64_t n,
                    double eps, double k, double floor, struct cmp_stats *stats);
int cmp_vs_naive(const struct cmp_case *c, const float *got, const float *naive, const float *ref,
                 int64_t n, double factor, double abs_floor, struct cmp_stats *stats);

/* Root mean square of x (double accumulation), a natural `floor` for cmp_elementwise. */
double cmp_rms(const float *x, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TESTS_COMMON_COMPARE_H */
