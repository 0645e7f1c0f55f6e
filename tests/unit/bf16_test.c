/* bf16_test.c — ref/bf16 exhaustively: all 2^16 patterns, every rounding boundary, a random sample.
 *
 * The expected results come from an independent computation: the two bf16 neighbours of x are
 * found by truncating its fp32 bits, and the nearer one in double arithmetic wins (ties to the
 * even mantissa), instead of the add-and-truncate trick of bf16.h.
 *
 *   bazel test //tests/unit:bf16_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ref/bf16.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

/* bf16 value of pattern h as double, Inf for 0x7F80 (2^128 when as_limit: the value RNE compares
 * against at the overflow boundary). */
static double bf16_value(uint32_t h, int as_limit) {
    if ((h & 0x7FFF) == 0x7F80 && as_limit) return (h & 0x8000) ? -ldexp(1.0, 128) : ldexp(1.0, 128);
    return (double)bf16_to_float((uint16_t)h);
}

/* Independent RNE of a finite or infinite fp32 x to bf16. */
static uint16_t expect_bf16(float x) {
    uint32_t u = ref_f32_bits(x);
    if (isnan(x)) return 0x7FC0;
    if (isinf(x)) return (uint16_t)(u >> 16);
    uint32_t lo = u >> 16;           /* truncated toward zero */
    uint32_t hi = lo + 1;            /* next magnitude (may be Inf) */
    double dx = fabs((double)x), dl = fabs(bf16_value(lo, 1)), dh = fabs(bf16_value(hi, 1));
    double el = dx - dl, eh = dh - dx;
    if (el < eh) return (uint16_t)lo;
    if (eh < el) return (uint16_t)hi;
    return (uint16_t)((lo & 1) ? hi : lo);
}

static void test_all_patterns(void) {
    int64_t bad = 0, nan_bad = 0, exact_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_float((uint16_t)h);
        /* Decoding: the upper 16 bits, independently: sign · 2^(E−127) · (1 + M/128), or subnormal. */
        int s = h >> 15, E = (h >> 7) & 0xFF, M = h & 0x7F;
        if (E == 0xFF) {
            if (M == 0) exact_bad += !(isinf(f) && (signbit(f) != 0) == s);
            else exact_bad += !isnan(f);
        } else {
            double v = E == 0 ? ldexp(M, -133) : ldexp(128 + M, E - 134);
            if (s) v = -v;
            exact_bad += (double)f != v || (signbit(f) != 0) != s;
        }
        uint16_t back = bf16_from_float(f);
        if (isnan(f)) nan_bad += back != 0x7FC0;
        else bad += back != h;
    }
    EXPECT(exact_bad == 0, "%lld bf16 patterns decode to a wrong value", (long long)exact_bad);
    EXPECT(bad == 0, "%lld non-NaN bf16 patterns do not round-trip", (long long)bad);
    EXPECT(nan_bad == 0, "%lld NaN patterns do not become 0x7FC0", (long long)nan_bad);
}

/* For every pair of adjacent bf16 magnitudes (lo, hi), including (max, Inf): the midpoint and its
 * two float neighbours, on both signs. */
static void test_boundaries(void) {
    int64_t bad = 0, checked = 0;
    for (uint32_t lo = 0; lo < 0x7F80; lo++) {
        uint32_t hi = lo + 1;
        double mid = (bf16_value(lo, 1) + bf16_value(hi, 1)) / 2;
        float m = (float)mid;
        if ((double)m != mid) { /* the midpoint of two bf16 values always fits a float */
            bad++;
            continue;
        }
        float probes[3] = {nextafterf(m, 0.0f), m, nextafterf(m, INFINITY)};
        uint16_t want[3] = {(uint16_t)lo, (uint16_t)((lo & 1) ? hi : lo), (uint16_t)hi};
        for (int k = 0; k < 3; k++) {
            for (int sgn = 0; sgn < 2; sgn++) {
                float x = sgn ? -probes[k] : probes[k];
                uint16_t w = (uint16_t)(want[k] | (sgn ? 0x8000 : 0));
                uint16_t got = bf16_from_float(x);
                checked++;
                if (got != w || got != expect_bf16(x)) {
                    if (bad < 5)
                        printf("  boundary: x=%a got 0x%04X want 0x%04X (independent 0x%04X)\n", (double)x, got, w,
                               expect_bf16(x));
                    bad++;
                }
            }
        }
    }
    EXPECT(bad == 0, "%lld of %lld rounding-boundary probes wrong", (long long)bad, (long long)checked);
    /* Specials. */
    EXPECT(bf16_from_float(INFINITY) == 0x7F80 && bf16_from_float(-INFINITY) == 0xFF80, "±Inf");
    EXPECT(bf16_from_float(-0.0f) == 0x8000 && bf16_from_float(0.0f) == 0x0000, "±0");
    EXPECT(bf16_from_float(NAN) == 0x7FC0 && bf16_from_float(-NAN) == 0x7FC0, "NaN → 0x7FC0");
    EXPECT(bf16_from_float(ref_f32_from_bits(0x7F800001u)) == 0x7FC0, "signalling NaN stays NaN (0x7FC0)");
    EXPECT(bf16_from_float(FLT_MAX) == 0x7F80, "FLT_MAX rounds to Inf");
    EXPECT(bf16_from_float(ref_f32_from_bits(0x00000001u)) == 0x0000, "the smallest fp32 subnormal rounds to 0");
    EXPECT(bf16_from_float(ref_f32_from_bits(0x00008000u)) == 0x0000, "tie at half the smallest bf16 subnormal → 0");
    EXPECT(bf16_from_float(ref_f32_from_bits(0x00008001u)) == 0x0001, "above the tie → smallest subnormal");
    EXPECT(bf16_from_float(ref_f32_from_bits(0x00018000u)) == 0x0002, "tie between 1 and 2 subnormal quanta → 2 (even)");
}

static void test_random(void) {
    struct rng r;
    rng_init(&r, g_seed);
    int64_t bad = 0;
    const int64_t n = 2000000;
    float *x = malloc(sizeof(float) * 4096), *y = malloc(sizeof(float) * 4096);
    uint16_t *h = malloc(sizeof(uint16_t) * 4096);
    for (int64_t i = 0; i < n; i++) {
        float v = ref_f32_from_bits((uint32_t)rng_u64(&r));
        if (isnan(v)) continue;
        if (bf16_from_float(v) != expect_bf16(v)) bad++;
    }
    EXPECT(bad == 0, "%lld of %lld random fp32 values rounded differently from the independent RNE", (long long)bad,
           (long long)n);
    /* Array forms agree with the scalar ones, including in place. */
    for (int i = 0; i < 4096; i++) x[i] = (float)(rng_normal(&r) * 100.0);
    bf16_from_float_array(h, x, 4096);
    bf16_round_array(y, x, 4096);
    int64_t abad = 0;
    for (int i = 0; i < 4096; i++) abad += h[i] != bf16_from_float(x[i]) || y[i] != bf16_round(x[i]);
    bf16_to_float_array(y, h, 4096);
    for (int i = 0; i < 4096; i++) abad += y[i] != bf16_to_float(h[i]);
    bf16_round_array(x, x, 4096);
    for (int i = 0; i < 4096; i++) abad += x[i] != y[i];
    EXPECT(abad == 0, "%lld array-form results differ from the scalar forms", (long long)abad);
    free(x), free(y), free(h);
}

/* bf16_from_double against a brute-force choice between the two bf16 neighbours, in long double
 * arithmetic-free form: the neighbours are found from the float truncation toward zero and
 * compared by exact double differences (both are exact: bf16 values have 8 significant bits). */
static void test_from_double(void) {
    struct rng r;
    rng_init(&r, g_seed + 5);
    int64_t bad = 0, double_rounding = 0;
    for (int i = 0; i < 1000000; i++) {
        double x = ldexp(rng_range(&r, -1, 1), rng_int(&r, 300) - 150);
        if (i % 4 == 0) {
            /* Near a bf16 midpoint: a random bf16 value + half its quantum ± a tiny offset. */
            float b = bf16_to_float((uint16_t)(rng_u64(&r) & 0x7F7F));
            int e;
            frexpf(b, &e);
            double q = ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 7);
            x = (double)b + q / 2 + ldexp(rng_range(&r, -1, 1), -40) * q * (i % 8 == 0 ? 0 : 1);
        }
        double a = fabs(x);
        /* Neighbours: lo = the largest bf16 magnitude ≤ a, hi = the next one (2^128 for Inf). */
        uint32_t lo = 0;
        for (uint32_t step = 0x8000; step; step >>= 1)
            if (lo + step <= 0x7F80 && bf16_value(lo + step, 1) <= a) lo += step;
        uint32_t hi = lo + 1;
        double dl = a - bf16_value(lo, 1), dh = bf16_value(hi, 1) - a;
        uint32_t want = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
        if (a >= 0x1p128) want = 0x7F80;
        if (signbit(x)) want |= 0x8000;
        uint16_t got = bf16_from_double(x);
        if (got != want) {
            if (bad < 5) printf("  from_double: x=%a got 0x%04X want 0x%04X\n", x, got, want);
            bad++;
        }
        double_rounding += bf16_from_float((float)x) != got;
    }
    EXPECT(bad == 0, "bf16_from_double: %lld of 1e6 wrong", (long long)bad);
    printf("  bf16_from_double: the float chain rounds differently on %lld of 1e6 (near-midpoint) inputs\n",
           (long long)double_rounding);
    EXPECT(bf16_from_double(1.0 + 0x1p-8 + 0x1p-30) == 0x3F81, "one rounding: 1 + 2^-8 + 2^-30 → 1 + 2^-7");
    EXPECT(bf16_from_float((float)(1.0 + 0x1p-8 + 0x1p-30)) == 0x3F80, "the float chain: → 1.0 (double rounding)");
    EXPECT(bf16_from_double(NAN) == 0x7FC0 && bf16_from_double(-INFINITY) == 0xFF80 && bf16_from_double(-0.0) == 0x8000,
           "specials");
    EXPECT(bf16_from_double(0x1p200) == 0x7F80 && bf16_from_double(0x1p-140) == 0x0000 &&
               bf16_from_double(0x1.8p-133) == 0x0002,
           "overflow, underflow and subnormal ties");
    EXPECT(bf16_is_nan(0x7FC0) && bf16_is_nan(0xFFFF) && !bf16_is_nan(0x7F80) && !bf16_is_nan(0x0001), "bf16_is_nan");
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    test_all_patterns();
    test_boundaries();
    test_random();
    test_from_double();
    return test_finish("bf16_test");
}
