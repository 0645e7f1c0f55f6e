/* compare_test.c — the comparison tiers accept what they should and reject what they should. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ref/bf16.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

static void expect_reject(int64_t failures, const char *what) {
    EXPECT(failures == 1, "%s: expected exactly one rejection, got %lld", what, (long long)failures);
}

static void test_exact(void) {
    struct cmp_case c = {"compare_test", "exact", "n=4", "f32", g_seed};
    float a[4] = {1.0f, -0.0f, NAN, INFINITY}, b[4] = {1.0f, -0.0f, NAN, INFINITY};
    EXPECT(cmp_exact_f32(&c, a, b, 4) == 0, "identical arrays (NaN in the same place) must compare equal");
    b[1] = 0.0f; /* +0 and -0 differ bitwise */
    test_capture_begin();
    cmp_exact_f32(&c, a, b, 4);
    expect_reject(test_capture_end(), "signed zero");
    unsigned char x[3] = {1, 2, 3}, y[3] = {1, 2, 4};
    test_capture_begin();
    cmp_exact_bytes(&c, x, y, 3);
    expect_reject(test_capture_end(), "bytes");
    EXPECT(cmp_exact_bytes(&c, x, x, 3) == 0, "bytes equal to themselves");
}

static void test_elementwise(void) {
    struct rng r;
    rng_init(&r, g_seed);
    enum { N = 1000 };
    float ref[N], got[N];
    rng_fill_normal(&r, ref, N, 0.0, 1.0);
    /* bf16 rounding of an fp32 reference is within one rounding: k = 1 passes. */
    for (int i = 0; i < N; i++) got[i] = bf16_round(ref[i]);
    struct cmp_case c = {"compare_test", "bf16 rounding", "n=1000", "bf16", g_seed};
    struct cmp_stats st;
    EXPECT(cmp_elementwise(&c, got, ref, N, BF16_EPS, 1.0, 0.0, &st) == 0, "one bf16 rounding within k=1");
    EXPECT(st.worst_ratio <= 0.5 + 1e-9, "RNE error is at most half an ulp: worst %.3f of eps budget",
           st.worst_ratio);
    /* A single element off by 3 ulps is caught and located. */
    got[417] = ref[417] * (1.0f + 3.0f * (float)BF16_EPS);
    test_capture_begin();
    cmp_elementwise(&c, got, ref, N, BF16_EPS, 1.0, 0.0, &st);
    expect_reject(test_capture_end(), "3-ulp outlier");
    EXPECT(st.first_bad == 417 && st.worst == 417 && st.n_bad == 1, "outlier located: first %lld worst %lld bad %lld",
           (long long)st.first_bad, (long long)st.worst, (long long)st.n_bad);
    /* A bias of 0.4 eps in every element passes elementwise (k = 1) but fails the aggregate. */
    for (int i = 0; i < N; i++) got[i] = ref[i] * (1.0f + 0.4f * (float)BF16_EPS);
    test_capture_begin();
    cmp_elementwise(&c, got, ref, N, BF16_EPS, 1.0, 0.0, &st);
    expect_reject(test_capture_end(), "systematic bias");
    EXPECT(st.n_bad == 0, "the biased elements are each within budget (%lld bad)", (long long)st.n_bad);
    /* NaN where the reference is finite, Inf of the wrong sign, and a missing NaN. */
    for (int i = 0; i < N; i++) got[i] = ref[i];
    got[3] = NAN;
    test_capture_begin();
    cmp_elementwise(&c, got, ref, N, BF16_EPS, 1.0, 0.0, NULL);
    expect_reject(test_capture_end(), "NaN in got");
    got[3] = ref[3];
    ref[5] = INFINITY;
    got[5] = -INFINITY;
    test_capture_begin();
    cmp_elementwise(&c, got, ref, N, BF16_EPS, 1.0, 0.0, NULL);
    expect_reject(test_capture_end(), "Inf sign");
    got[5] = INFINITY;
    ref[9] = NAN;
    got[9] = NAN;
    EXPECT(cmp_elementwise(&c, got, ref, N, BF16_EPS, 1.0, 0.0, NULL) == 0, "matching Inf and NaN positions pass");
}

static void test_vs_naive(void) {
    struct rng r;
    rng_init(&r, g_seed + 1);
    enum { N = 512 };
    float ref[N], naive[N], got[N];
    rng_fill_normal(&r, ref, N, 0.0, 1.0);
    for (int i = 0; i < N; i++) naive[i] = bf16_round(ref[i]);
    struct cmp_case c = {"compare_test", "vs naive", "n=512", "bf16", g_seed};
    /* got = ref rounded to bf16 with ties away from zero instead of to even: the same error as
     * RNE except at exact ties, well within 2x in max and rms. */
    for (int i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &ref[i], 4);
        u = (u + 0x8000u) & 0xFFFF0000u;
        memcpy(&got[i], &u, 4);
    }
    EXPECT(cmp_vs_naive(&c, got, naive, ref, N, 2.0, 0.0, NULL) == 0, "ties-away rounding is within 2x of RNE");
    for (int i = 0; i < N; i++) got[i] = ref[i] + 4.0f * (naive[i] - ref[i]) + (i == 0 ? 0.5f : 0.0f);
    test_capture_begin();
    cmp_vs_naive(&c, got, naive, ref, N, 2.0, 0.0, NULL);
    expect_reject(test_capture_end(), "4x naive error");
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 1);
    test_exact();
    test_elementwise();
    test_vs_naive();
    EXPECT(fabs(cmp_rms((const float[]){3.0f, 4.0f}, 2) - sqrt(12.5)) < 1e-12, "cmp_rms");
    return test_finish("compare_test");
}
