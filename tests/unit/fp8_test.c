/* fp8_test.c — ref/fp8 exhaustively: all 256 patterns of E4M3fn and E5M2, every rounding boundary,
 * the three overflow policies, TE's delayed and current scaling, the reference FP8 GEMM, and what
 * the quantization kernels mirror: saturation counting, cast + transpose, 1×128 / 128×128 block
 * quantization with cuBLASLt's scale layouts, and the block-scaled reference GEMM.
 *
 * Independent computations: decoding from the definition sign·2^(E−bias)·(1 + M/2^m) in double
 * (pow, not the ldexp of fp8.c); encoding by a brute-force search for the nearest of the 256
 * decoded values in double, ties to the even code (the code's lowest bit is the mantissa's).
 *
 *   bazel test //tests/unit:fp8_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/fp8.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;
static const char *fmt_name[2] = {"E4M3", "E5M2"};

/* Decoding from the definition; sets *kind: 0 finite, 1 inf, 2 nan. */
static double def_value(uint8_t q, enum fp8_format f, int *kind) {
    int mb = f == FP8_E4M3 ? 3 : 2, bias = f == FP8_E4M3 ? 7 : 15, emax_field = f == FP8_E4M3 ? 15 : 31;
    int s = q >> 7, E = (q & 0x7F) >> mb, M = q & ((1 << mb) - 1);
    *kind = 0;
    if (f == FP8_E4M3 && E == emax_field && M == (1 << mb) - 1) *kind = 2;
    if (f == FP8_E5M2 && E == emax_field) *kind = M ? 2 : 1;
    double v = E == 0 ? pow(2.0, 1 - bias) * (M / pow(2.0, mb)) : pow(2.0, E - bias) * (1.0 + M / pow(2.0, mb));
    return s ? -v : v;
}

/* The overflow result of mode sat for sign s. */
static uint8_t overflow_code(enum fp8_format f, enum fp8_sat sat, int s) {
    uint8_t sign = s ? 0x80 : 0;
    int saturate = sat == FP8_SATFINITE || (sat == FP8_TORCH && f == FP8_E4M3);
    if (saturate) return (uint8_t)(sign | (f == FP8_E4M3 ? 0x7E : 0x7B));
    return (uint8_t)(sign | (f == FP8_E4M3 ? 0x7F : 0x7C));
}

/* Brute force: nearest finite value in double, ties to the even code; beyond max + half an ulp
 * (the value the next code would have) → overflow_code. */
static uint8_t expect_fp8(float x, enum fp8_format f, enum fp8_sat sat) {
    int s = signbit(x) ? 1 : 0;
    if (isnan(x)) return (uint8_t)((s ? 0x80 : 0) | 0x7F);
    if (isinf(x)) return overflow_code(f, sat, s);
    double a = fabs((double)x), best = INFINITY;
    int bestc = 0;
    for (int c = 0; c < 128; c++) {
        int kind;
        double v = def_value((uint8_t)c, f, &kind);
        if (kind) continue;
        double d = fabs(v - a);
        if (d < best || (d == best && (c & 1) == 0)) {
            best = d;
            bestc = c;
        }
    }
    /* The would-be next value above max: max + ulp(max). */
    double maxv = f == FP8_E4M3 ? 448.0 : 57344.0, next = f == FP8_E4M3 ? 480.0 : 65536.0;
    double mid = (maxv + next) / 2;
    int max_code_even = f == FP8_E4M3; /* 0x7E is even, 0x7B odd */
    if (a > mid || (a == mid && !max_code_even)) return overflow_code(f, sat, s);
    return (uint8_t)((s ? 0x80 : 0) | bestc);
}

static void test_patterns(enum fp8_format f) {
    int64_t bad = 0;
    for (int c = 0; c < 256; c++) {
        int kind;
        double v = def_value((uint8_t)c, f, &kind);
        float got = fp8_to_float((uint8_t)c, f);
        int ok = kind == 2 ? isnan(got) : kind == 1 ? (isinf(got) && (signbit(got) != 0) == (c >> 7)) : (double)got == v;
        ok = ok && fp8_is_nan((uint8_t)c, f) == (kind == 2);
        if (kind == 0) ok = ok && (signbit(got) != 0) == (c >> 7);
        for (int sat = 0; sat < 3; sat++) {
            uint8_t back = fp8_from_float(got, f, (enum fp8_sat)sat);
            if (kind == 2) ok = ok && fp8_is_nan(back, f);
            else if (kind == 1) ok = ok && back == overflow_code(f, (enum fp8_sat)sat, c >> 7);
            else ok = ok && back == c;
        }
        if (!ok) {
            if (bad < 5) printf("  %s pattern 0x%02X: decoded %a, expected %a (kind %d)\n", fmt_name[f], c, (double)got, v, kind);
            bad++;
        }
    }
    EXPECT(bad == 0, "%s: %lld of 256 patterns fail decode or round trip", fmt_name[f], (long long)bad);
    float mx = fp8_to_float(f == FP8_E4M3 ? 0x7E : 0x7B, f);
    EXPECT(mx == fp8_max(f), "%s: max finite %g, expected %g", fmt_name[f], (double)mx, (double)fp8_max(f));
    EXPECT(fp8_to_float(0x01, f) == (f == FP8_E4M3 ? 0x1p-9f : 0x1p-16f), "%s: min subnormal", fmt_name[f]);
    EXPECT(fp8_to_float(f == FP8_E4M3 ? 0x08 : 0x04, f) == (f == FP8_E4M3 ? 0x1p-6f : 0x1p-14f), "%s: min normal",
           fmt_name[f]);
}

static void check_probe(enum fp8_format f, float x, int64_t *bad, int64_t *checked) {
    for (int sat = 0; sat < 3; sat++) {
        uint8_t got = fp8_from_float(x, f, (enum fp8_sat)sat), want = expect_fp8(x, f, (enum fp8_sat)sat);
        (*checked)++;
        if (got != want) {
            if (*bad < 8) printf("  %s mode %d: x=%a got 0x%02X want 0x%02X\n", fmt_name[f], sat, (double)x, got, want);
            (*bad)++;
        }
    }
}

/* Every midpoint between adjacent finite magnitudes (and up to the overflow threshold), its float
 * neighbours, both signs; plus specials and fp32 subnormals. */
static void test_boundaries(enum fp8_format f) {
    int64_t bad = 0, checked = 0;
    double vals[130];
    int nv = 0;
    for (int c = 0; c < 128; c++) {
        int kind;
        double v = def_value((uint8_t)c, f, &kind);
        if (!kind) vals[nv++] = v;
    }
    vals[nv++] = f == FP8_E4M3 ? 480.0 : 65536.0; /* the would-be next value */
    for (int i = 0; i + 1 < nv; i++) {
        float m = (float)((vals[i] + vals[i + 1]) / 2);
        float probes[5] = {(float)vals[i], nextafterf(m, 0.0f), m, nextafterf(m, INFINITY), (float)vals[i + 1]};
        for (int k = 0; k < 5; k++) {
            check_probe(f, probes[k], &bad, &checked);
            check_probe(f, -probes[k], &bad, &checked);
        }
    }
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, 1e30f, 0x1p-149f,
                              0x1p-126f, 1e-20f, 0x1p-10f, 0x1p-17f, 0x1.000002p-10f, 0x1.000002p-17f, 1e6f};
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) check_probe(f, specials[k], &bad, &checked);
    EXPECT(bad == 0, "%s: %lld of %lld boundary probes wrong", fmt_name[f], (long long)bad, (long long)checked);

    /* Named facts. */
    if (f == FP8_E4M3) {
        EXPECT(fp8_from_float(464.0f, f, FP8_NOSAT) == 0x7E, "E4M3 464 ties to 448 (even)");
        EXPECT(fp8_is_nan(fp8_from_float(464.1f, f, FP8_NOSAT), f), "E4M3 NOSAT: above 464 → NaN");
        EXPECT(fp8_from_float(1e9f, f, FP8_SATFINITE) == 0x7E, "E4M3 SATFINITE clamps to 448");
        EXPECT(fp8_from_float(-INFINITY, f, FP8_TORCH) == 0xFE, "E4M3 torch: −Inf → −448");
        EXPECT(fp8_from_float(0x1p-10f, f, FP8_SATFINITE) == 0x00, "E4M3 half the min subnormal ties to 0");
    } else {
        EXPECT(fp8_from_float(61440.0f, f, FP8_NOSAT) == 0x7C, "E5M2 61440 ties up to Inf (57344's code is odd)");
        EXPECT(fp8_from_float(61439.0f, f, FP8_TORCH) == 0x7B, "E5M2 below the tie stays 57344");
        EXPECT(fp8_from_float(61440.0f, f, FP8_SATFINITE) == 0x7B, "E5M2 SATFINITE clamps");
        EXPECT(fp8_from_float(INFINITY, f, FP8_TORCH) == 0x7C, "E5M2 torch: Inf stays Inf");
    }
}

static void test_random(enum fp8_format f) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)f);
    int64_t bad = 0, checked = 0;
    for (int i = 0; i < 60000; i++) {
        /* Random bits restricted to exponents around the format's range, and fully random ones. */
        uint32_t u = (uint32_t)rng_u64(&r);
        if (i & 1) {
            int e = 127 - 24 + rng_int(&r, 44); /* 2^-24 .. 2^19 */
            u = (u & 0x807FFFFFu) | ((uint32_t)e << 23);
        }
        check_probe(f, ref_f32_from_bits(u), &bad, &checked);
    }
    EXPECT(bad == 0, "%s: %lld of %lld random values wrong", fmt_name[f], (long long)bad, (long long)checked);
}

static void test_delayed(void) {
    float hist[4] = {0};
    struct fp8_delayed s = {4, FP8_AMAX_MAX, 0, FP8_E4M3, hist, 1.0f, 1.0f};
    /* Iteration 1: amax 2 recorded; update → scale 448/2, history rotated: [0, 0, 0, 2]. */
    fp8_delayed_record(&s, 2.0f);
    fp8_delayed_record(&s, 1.0f); /* a smaller amax in the same iteration does not lower slot 0 */
    fp8_delayed_update(&s);
    EXPECT(s.scale == 224.0f && s.scale_inv == 1.0f / 224.0f, "delayed: scale %g, expected 224", (double)s.scale);
    EXPECT(hist[0] == 0 && hist[1] == 0 && hist[2] == 0 && hist[3] == 2.0f, "delayed: rotation [%g %g %g %g]",
           (double)hist[0], (double)hist[1], (double)hist[2], (double)hist[3]);
    /* Iteration 2: amax 8 → max over window = 8. */
    fp8_delayed_record(&s, 8.0f);
    fp8_delayed_update(&s);
    EXPECT(s.scale == 56.0f, "delayed: max over history, scale %g, expected 56", (double)s.scale);
    EXPECT(hist[2] == 2.0f && hist[3] == 8.0f && hist[0] == 0, "delayed: history [%g %g %g %g]", (double)hist[0],
           (double)hist[1], (double)hist[2], (double)hist[3]);
    /* most_recent: uses slot 0 only. */
    s.algo = FP8_AMAX_MOST_RECENT;
    fp8_delayed_record(&s, 4.0f);
    fp8_delayed_update(&s);
    EXPECT(s.scale == 112.0f, "delayed most_recent: scale %g, expected 112", (double)s.scale);
    /* Zero amax (slot 0 empty) keeps the scale; so do Inf and NaN. */
    fp8_delayed_update(&s);
    EXPECT(s.scale == 112.0f, "delayed: zero amax keeps the scale, got %g", (double)s.scale);
    fp8_delayed_record(&s, INFINITY);
    unsigned fl = fp8_delayed_update(&s);
    EXPECT(s.scale == 112.0f, "delayed: Inf amax keeps the scale, got %g", (double)s.scale);
    EXPECT(fl == FP8_FLAG_AMAX_NONFINITE, "delayed: Inf amax flagged, flags %u", fl);
    s.history[0] = NAN;
    fp8_delayed_update(&s);
    EXPECT(s.scale == 112.0f, "delayed: NaN amax keeps the scale, got %g", (double)s.scale);
    /* the Inf is still in the window (history length 4): flagged until it leaves */
    for (int i = 0; i < 4; i++) fl = fp8_delayed_update(&s);
    EXPECT(fl == 0 && s.scale == 112.0f, "delayed: Inf left the window, flags %u scale %g", fl, (double)s.scale);
    /* Margin 2: scale / 4; E5M2 max. */
    s.margin = 2;
    s.format = FP8_E5M2;
    fp8_delayed_record(&s, 7.0f);
    fp8_delayed_update(&s);
    EXPECT(s.scale == (57344.0f * 0.25f) / 7.0f, "delayed margin: scale %g", (double)s.scale);
    /* Overflowing scale → FLT_MAX. */
    s.margin = 0;
    fp8_delayed_record(&s, 0x1p-149f);
    fp8_delayed_update(&s);
    EXPECT(s.scale == FLT_MAX, "delayed: overflowing scale → FLT_MAX, got %g", (double)s.scale);
    EXPECT(FP8_DELAYED_HISTORY_LEN == 1024 && FP8_DELAYED_MARGIN == 0 && FP8_DELAYED_ALGO == FP8_AMAX_MAX,
           "TE's DelayedScaling defaults");
    /* A longer window: amax leaves the window after len updates. */
    float h2[3] = {0};
    struct fp8_delayed t = {3, FP8_AMAX_MAX, 0, FP8_E4M3, h2, 1.0f, 1.0f};
    float amaxes[6] = {4, 1, 1, 1, 1, 1};
    float want[6] = {112, 112, 112, 448, 448, 448};
    for (int i = 0; i < 6; i++) {
        fp8_delayed_record(&t, amaxes[i]);
        fp8_delayed_update(&t);
        EXPECT(t.scale == want[i], "delayed window: step %d scale %g, expected %g", i, (double)t.scale, (double)want[i]);
    }
}

static void test_current(void) {
    EXPECT(fp8_current_scale(2.0f, FP8_E4M3, 0.0f, 0) == 224.0f, "current: 448/2");
    EXPECT(fp8_current_scale(3.0f, FP8_E5M2, 0.0f, 0) == 57344.0f / 3.0f, "current: 57344/3");
    EXPECT(fp8_current_scale(0.0f, FP8_E4M3, 0.0f, 0) == 1.0f, "current: amax 0 → 1");
    EXPECT(fp8_current_scale(INFINITY, FP8_E4M3, 0.0f, 0) == 1.0f, "current: amax Inf → 1");
    EXPECT(fp8_current_scale(NAN, FP8_E4M3, 0.0f, 0) == 1.0f, "current: amax NaN → 1");
    EXPECT(fp8_current_scale(0.0f, FP8_E4M3, 0.5f, 0) == 896.0f, "current: amax below eps → eps");
    EXPECT(fp8_current_scale(1e-44f, FP8_E4M3, 0.0f, 0) == FLT_MAX, "current: overflow → FLT_MAX");
    EXPECT(fp8_current_scale(3.0f, FP8_E4M3, 0.0f, 1) == 128.0f, "current pow2: 448/3 = 149.3 → 128");
    EXPECT(fp8_current_scale(1e-44f, FP8_E4M3, 0.0f, 1) == 0x1p127f, "current pow2 of FLT_MAX → 2^127");
    struct rng r;
    rng_init(&r, g_seed + 11);
    for (int i = 0; i < 1000; i++) {
        float a = (float)exp(rng_range(&r, -30, 30));
        float s = fp8_current_scale(a, FP8_E4M3, 0.0f, 1);
        double exact = 448.0 / a;
        int ok = s <= exact * (1 + 1e-7) && s > exact / 2 * (1 - 1e-7) && frexpf(s, &(int){0}) == 0.5f;
        EXPECT(ok, "current pow2: amax %g scale %g exact %g", (double)a, (double)s, exact);
    }
    float x[5] = {1.0f, -7.0f, NAN, 3.0f, -0.5f};
    EXPECT(fp8_amax(x, 5) == 7.0f, "amax ignores NaN: %g", (double)fp8_amax(x, 5));
}

static void test_gemm(void) {
    struct rng r;
    rng_init(&r, g_seed + 21);
    const int M = 7, N = 5, K = 33;
    float x[7 * 33], w[5 * 33], out[35], ref[35];
    /* Integers in [-8, 8] are exact in E4M3 and E5M2; power-of-two scales are exact: the GEMM is exact. */
    rng_fill_int(&r, x, M * K, -8, 8);
    rng_fill_int(&r, w, N * K, -8, 8);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)x[m * K + k] * w[n * K + k];
            ref[m * N + n] = (float)s;
        }
    float amax = -1;
    ref_fp8_gemm_f32(out, NULL, &amax, x, FP8_E4M3, 4.0f, w, FP8_E5M2, 0.5f, M, N, K, FP8_ACC_F32, FP8_OUT_F32, 1.0f);
    struct cmp_case c = {"ref_fp8_gemm", "integer inputs, exact", "M=7 N=5 K=33", "e4m3xe5m2", g_seed};
    cmp_exact_f32(&c, out, ref, M * N);
    float want_amax = 0;
    for (int i = 0; i < M * N; i++) want_amax = fmaxf(want_amax, fabsf(ref[i]));
    EXPECT(amax == want_amax, "gemm amax %g expected %g", (double)amax, (double)want_amax);
    /* bf16 output, and FP8 output with a d_scale: out is the decoded stored code. */
    float outb[35], outq[35];
    uint8_t q[35];
    ref_fp8_gemm_f32(outb, NULL, NULL, x, FP8_E4M3, 1.0f, w, FP8_E4M3, 1.0f, M, N, K, FP8_ACC_F64, FP8_OUT_BF16, 1.0f);
    float amax2 = 0;
    ref_fp8_gemm_f32(outq, q, &amax2, x, FP8_E4M3, 1.0f, w, FP8_E4M3, 1.0f, M, N, K, FP8_ACC_F32, FP8_OUT_E4M3, 2.0f);
    int64_t bad = 0;
    for (int i = 0; i < M * N; i++) {
        bad += outb[i] != bf16_round(ref[i]);
        bad += q[i] != fp8_from_float(ref[i] * 2.0f, FP8_E4M3, FP8_SATFINITE) || outq[i] != fp8_to_float(q[i], FP8_E4M3);
    }
    EXPECT(bad == 0, "gemm bf16/fp8 outputs: %lld wrong", (long long)bad);
    EXPECT(amax2 == want_amax, "gemm amax is taken before the output scale: %g expected %g", (double)amax2,
           (double)want_amax);

    /* Random inputs with current scaling: the error against the fp32 product is within the
     * quantization error bound Σ|x||w|·(u_a + u_b + u_a·u_b) (u = 2^-4 E4M3, 2^-3 E5M2) + fp32 rounding. */
    const int M2 = 16, N2 = 24, K2 = 128;
    float *xa = malloc(sizeof(float) * M2 * K2), *wa = malloc(sizeof(float) * N2 * K2);
    float *o = malloc(sizeof(float) * M2 * N2), *o64 = malloc(sizeof(float) * M2 * N2);
    rng_fill_normal(&r, xa, M2 * K2, 0, 3);
    rng_fill_normal(&r, wa, N2 * K2, 0, 0.02);
    float sa = fp8_current_scale(fp8_amax(xa, M2 * K2), FP8_E4M3, 0, 0);
    float sb = fp8_current_scale(fp8_amax(wa, N2 * K2), FP8_E4M3, 0, 0);
    ref_fp8_gemm_f32(o, NULL, NULL, xa, FP8_E4M3, sa, wa, FP8_E4M3, sb, M2, N2, K2, FP8_ACC_F32, FP8_OUT_F32, 1);
    ref_fp8_gemm_f32(o64, NULL, NULL, xa, FP8_E4M3, sa, wa, FP8_E4M3, sb, M2, N2, K2, FP8_ACC_F64, FP8_OUT_F32, 1);
    int64_t over = 0;
    double u = 0x1p-4, amx = fp8_amax(xa, M2 * K2), amw = fp8_amax(wa, N2 * K2);
    for (int m = 0; m < M2; m++)
        for (int n = 0; n < N2; n++) {
            double s = 0, sabs = 0;
            for (int k = 0; k < K2; k++) {
                s += (double)xa[m * K2 + k] * wa[n * K2 + k];
                sabs += fabs((double)xa[m * K2 + k] * wa[n * K2 + k]);
            }
            /* plus the subnormal floor of each operand (half the smallest quantum 2^-9 of the scaled
             * value) times the largest partner, and fp32 accumulation. */
            double floor_ = K2 * ((0x1p-10 / sa) * amw + (0x1p-10 / sb) * amx);
            double bound = sabs * (2 * u + u * u) * (1 + u) + floor_ + K2 * FLT_EPSILON * sabs;
            over += fabs(o[m * N2 + n] - s) > bound;
            over += fabs(o[m * N2 + n] - o64[m * N2 + n]) > K2 * FLT_EPSILON * sabs;
        }
    EXPECT(over == 0, "random fp8 gemm: %lld elements beyond the quantization bound", (long long)over);
    free(xa), free(wa), free(o), free(o64);
}

/* fp8_saturates against the brute-force NOSAT result: saturated ⇔ not NaN and the unclamped
 * rounding overflows (E4M3: to NaN, E5M2: to ±Inf). */
static void test_saturates(enum fp8_format f) {
    struct rng r;
    rng_init(&r, g_seed + 31 + (uint64_t)f);
    int64_t bad = 0, checked = 0;
    double vals[130];
    int nv = 0;
    for (int c = 0; c < 128; c++) {
        int kind;
        double v = def_value((uint8_t)c, f, &kind);
        if (!kind) vals[nv++] = v;
    }
    vals[nv++] = f == FP8_E4M3 ? 480.0 : 65536.0;
    float probes[1000];
    int np = 0;
    for (int i = 0; i + 1 < nv && np + 5 < 1000; i++) {
        float m = (float)((vals[i] + vals[i + 1]) / 2);
        probes[np++] = (float)vals[i], probes[np++] = nextafterf(m, 0.0f), probes[np++] = m;
        probes[np++] = nextafterf(m, INFINITY);
    }
    probes[np++] = INFINITY, probes[np++] = NAN, probes[np++] = FLT_MAX, probes[np++] = 0.0f;
    for (int i = 0; i < np + 60000; i++) {
        float x = i < np ? probes[i] : ref_f32_from_bits((uint32_t)rng_u64(&r));
        if (i >= np && (i & 1)) x = (float)rng_range(&r, -80000.0, 80000.0);
        for (int sgn = 0; sgn < 2; sgn++) {
            float v = sgn ? -x : x;
            uint8_t raw = expect_fp8(v, f, FP8_NOSAT) & 0x7F;
            int want = !isnan(v) && (f == FP8_E4M3 ? raw == 0x7F : raw == 0x7C);
            checked++;
            if (fp8_saturates(v, f) != want) {
                if (bad < 5) printf("  %s saturates(%a) = %d, want %d\n", fmt_name[f], (double)v, !want, want);
                bad++;
            }
        }
    }
    EXPECT(bad == 0, "%s: fp8_saturates wrong on %lld of %lld values", fmt_name[f], (long long)bad, (long long)checked);
}

/* fp8_cast_transpose against brute-force encodings, with planted saturation, Inf and NaN. */
static void test_cast_transpose(void) {
    struct rng r;
    rng_init(&r, g_seed + 41);
    const int64_t R = 37, C = 70;
    float *x = malloc(sizeof(float) * R * C);
    uint8_t *q = malloc(R * C), *qt = malloc(R * C), *qt2 = malloc(R * C);
    rng_fill_normal(&r, x, R * C, 0, 10);
    x[3 * C + 5] = 1e4f;     /* saturates at scale 7.3 */
    x[10 * C + 69] = -INFINITY;
    x[36 * C + 0] = NAN;
    const float scale = 7.3f;
    for (int f = 0; f < 2; f++) {
        struct fp8_stats st = {0, 0, 0}, st2 = {0, 0, 0};
        fp8_cast_transpose(q, qt, &st, x, R, C, scale, (enum fp8_format)f);
        fp8_cast_transpose(NULL, qt2, &st2, x, R, C, scale, (enum fp8_format)f);
        int64_t bad = 0, sat = 0;
        double amax = 0;
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) {
                float v = x[i * C + j] * scale;
                uint8_t want = expect_fp8(v, (enum fp8_format)f, FP8_SATFINITE);
                int same = q[i * C + j] == want || (isnan(v) && fp8_is_nan(q[i * C + j], (enum fp8_format)f));
                bad += !same || qt[j * R + i] != q[i * C + j] || qt2[j * R + i] != q[i * C + j];
                uint8_t raw = expect_fp8(v, (enum fp8_format)f, FP8_NOSAT) & 0x7F;
                sat += !isnan(v) && (f == FP8_E4M3 ? raw == 0x7F : raw == 0x7C);
                if (!isnan(x[i * C + j])) amax = fmax(amax, fabs((double)x[i * C + j]));
            }
        EXPECT(bad == 0, "cast_transpose %s: %lld codes wrong", fmt_name[f], (long long)bad);
        EXPECT(st.saturated == sat && sat >= 2, "cast_transpose %s: saturated %lld, want %lld", fmt_name[f],
               (long long)st.saturated, (long long)sat);
        EXPECT((double)st.amax == amax && isinf(st.amax), "cast_transpose %s: amax %g, want %g", fmt_name[f],
               (double)st.amax, amax);
        EXPECT(st.flags == FP8_FLAG_INPUT_NONFINITE && st2.flags == st.flags && st2.saturated == st.saturated,
               "cast_transpose %s: flags %u/%u", fmt_name[f], st.flags, st2.flags);
        fp8_cast_transpose(q, NULL, &st, x, R, C, scale, (enum fp8_format)f);
        EXPECT(st.saturated == 2 * sat, "cast_transpose: stats accumulate (%lld)", (long long)st.saturated);
    }
    free(x), free(q), free(qt), free(qt2);
}

/* Block quantization: every code against the brute-force encoding with its block's scale, the
 * scales in cuBLASLt's layouts (an independent transcription of the index formulas), padding,
 * the transposed outputs, the quantization error bound and the statistics. */
static int64_t test_scale_slot(enum fp8_block b, int64_t rows, int64_t cols, int64_t r, int64_t c) {
    if (b == FP8_BLOCK_1X128) return (c / 128) * rows + r;           /* VEC128_32F: outer dim contiguous */
    int64_t ld = ((cols + 127) / 128 + 3) / 4 * 4;                   /* BLK128x128_32F: padded to 4 */
    return (r / 128) * ld + c / 128;
}

static void check_block_case(int64_t R, int64_t C, enum fp8_block b, enum fp8_format f, float eps, int p2, int plant,
                             uint64_t seed) {
    struct rng r;
    rng_init(&r, seed);
    float *x = malloc(sizeof(float) * R * C), *xt = malloc(sizeof(float) * R * C);
    for (int64_t i = 0; i < R; i++) {
        float row_mag = (float)exp(rng_range(&r, -6, 6));
        for (int64_t j = 0; j < C; j++) x[i * C + j] = (float)rng_normal(&r) * row_mag * (j % 3 ? 1.0f : 0.01f);
    }
    if (C > 3) for (int64_t j = 0; j < (C < 128 ? C : 128); j++) x[j] = 0.0f; /* an all-zero 1×128 block */
    if (plant && R * C > 10) x[R * C / 2 + 1] = INFINITY, x[R * C / 3] = NAN;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) xt[j * R + i] = x[i * C + j];
    const int64_t ns = fp8_block_scale_count(b, R, C), nst = fp8_block_scale_count(b, C, R);
    uint8_t *q = malloc(R * C), *qt = malloc(R * C), *q2 = malloc(R * C);
    float *s = malloc(sizeof(float) * ns), *st_ = malloc(sizeof(float) * nst), *s2 = malloc(sizeof(float) * nst);
    for (int64_t i = 0; i < ns; i++) s[i] = NAN; /* poison: every slot must be written */
    for (int64_t i = 0; i < nst; i++) st_[i] = NAN;
    struct fp8_stats st = {0, 0, 0};
    fp8_block_quantize(q, s, qt, st_, &st, x, R, C, b, f, eps, p2);
    char what[128];
    snprintf(what, sizeof what, "block %s %s %lldx%lld eps=%g pow2=%d%s", b == FP8_BLOCK_1X128 ? "1x128" : "128x128",
             fmt_name[f], (long long)R, (long long)C, (double)eps, p2, plant ? " inf/nan" : "");
    /* Block amax table, then every element. */
    const int64_t bh = b == FP8_BLOCK_1X128 ? 1 : 128;
    int64_t bad = 0, bad_scale = 0, bad_err = 0, sat = 0, ns_used = 0;
    double amax_all = 0;
    unsigned flags = 0;
    for (int64_t r0 = 0; r0 < R; r0 += bh)
        for (int64_t c0 = 0; c0 < C; c0 += 128) {
            int64_t r1 = r0 + bh < R ? r0 + bh : R, c1 = c0 + 128 < C ? c0 + 128 : C;
            double am = 0;
            for (int64_t i = r0; i < r1; i++)
                for (int64_t j = c0; j < c1; j++)
                    if (!isnan(x[i * C + j])) am = fmax(am, fabs((double)x[i * C + j]));
            if (isinf(am)) flags |= FP8_FLAG_AMAX_NONFINITE;
            float scale = fp8_current_scale((float)am, f, eps, p2);
            int64_t slot = test_scale_slot(b, R, C, r0, c0);
            ns_used++;
            bad_scale += s[slot] != 1.0f / scale || fp8_block_scale_index(b, R, C, r1 - 1, c1 - 1) != slot;
            for (int64_t i = r0; i < r1; i++)
                for (int64_t j = c0; j < c1; j++) {
                    float xv = x[i * C + j], v = xv * scale;
                    uint8_t want = expect_fp8(v, f, FP8_SATFINITE), got = q[i * C + j];
                    bad += !(got == want || (isnan(v) && fp8_is_nan(got, f)));
                    uint8_t raw = expect_fp8(v, f, FP8_NOSAT) & 0x7F;
                    sat += !isnan(v) && (f == FP8_E4M3 ? raw == 0x7F : raw == 0x7C);
                    if (isfinite(xv) && isfinite(am)) {
                        /* |dec·s_inv − x| ≤ half a quantum of the scaled value (2^-(m+1) relative,
                         * or half the subnormal quantum), unscaled; fp32 products add 2 ulps. */
                        double d = (double)fp8_to_float(got, f) * s[slot], u = f == FP8_E4M3 ? 0x1p-4 : 0x1p-3;
                        double sub = (f == FP8_E4M3 ? 0x1p-10 : 0x1p-17) * s[slot];
                        bad_err += fabs(d - xv) > fmax(u * fabs(xv), sub) * (1 + 4 * FLT_EPSILON);
                        /* the block's largest element takes the largest code when the scale is exact enough */
                        if (!p2 && am > 0 && fabs(xv) == am && eps == 0)
                            bad_err += (got & 0x7F) != (f == FP8_E4M3 ? 0x7E : 0x7B);
                    }
                    if (!isnan(xv)) amax_all = fmax(amax_all, fabs((double)xv));
                    if (!isfinite(xv)) flags |= FP8_FLAG_INPUT_NONFINITE;
                }
        }
    int64_t pad_bad = 0;
    for (int64_t i = 0; i < ns; i++) pad_bad += isnan(s[i]); /* unwritten slot */
    if (b == FP8_BLOCK_128X128)
        for (int64_t rb = 0; rb < (R + 127) / 128; rb++)
            for (int64_t k = (C + 127) / 128; k < fp8_block_scale_ld(b, R, C); k++)
                pad_bad += s[rb * fp8_block_scale_ld(b, R, C) + k] != 0.0f;
    EXPECT(bad == 0 && bad_scale == 0 && bad_err == 0 && pad_bad == 0,
           "%s: %lld codes, %lld scales, %lld error-bound, %lld slot/padding failures", what, (long long)bad,
           (long long)bad_scale, (long long)bad_err, (long long)pad_bad);
    /* Transposed outputs. */
    int64_t bad_t = 0;
    if (b == FP8_BLOCK_128X128) {
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) {
                bad_t += qt[j * R + i] != q[i * C + j];
                bad_t += st_[fp8_block_scale_index(b, C, R, j, i)] != s[fp8_block_scale_index(b, R, C, i, j)];
            }
        for (int64_t i = 0; i < nst; i++) bad_t += isnan(st_[i]);
    } else {
        struct fp8_stats st2 = {0, 0, 0};
        fp8_block_quantize(q2, s2, NULL, NULL, &st2, xt, C, R, b, f, eps, p2);
        bad_t += memcmp(q2, qt, (size_t)(R * C)) != 0 || memcmp(s2, st_, sizeof(float) * (size_t)nst) != 0;
        sat += st2.saturated;
    }
    EXPECT(bad_t == 0, "%s: transposed output differs in %lld places", what, (long long)bad_t);
    EXPECT(st.saturated == sat && (double)st.amax == amax_all && st.flags == flags,
           "%s: stats saturated %lld/%lld amax %g/%g flags %u/%u", what, (long long)st.saturated, (long long)sat,
           (double)st.amax, amax_all, st.flags, flags);
    EXPECT(ns_used <= ns, "%s: %lld blocks for %lld slots", what, (long long)ns_used, (long long)ns);
    free(x), free(xt), free(q), free(qt), free(q2), free(s), free(st_), free(s2);
}

static void test_block_quantize(void) {
    const int64_t shapes[][2] = {{1, 1}, {5, 300}, {130, 257}, {128, 128}, {256, 384}, {200, 129}, {3, 1000}};
    int id = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int b = 0; b < 2; b++)
            for (int f = 0; f < 2; f++)
                for (int p2 = 0; p2 < 2; p2++)
                    check_block_case(shapes[i][0], shapes[i][1], (enum fp8_block)b, (enum fp8_format)f, 0.0f, p2, 0,
                                     g_seed + 100 + (uint64_t)id++);
    check_block_case(130, 257, FP8_BLOCK_1X128, FP8_E4M3, 1e-3f, 0, 0, g_seed + 300);
    check_block_case(130, 257, FP8_BLOCK_128X128, FP8_E5M2, 0.5f, 1, 0, g_seed + 301);
    check_block_case(130, 257, FP8_BLOCK_1X128, FP8_E4M3, 0.0f, 1, 1, g_seed + 302);
    check_block_case(130, 257, FP8_BLOCK_128X128, FP8_E4M3, 0.0f, 0, 1, g_seed + 303);
    EXPECT(fp8_block_scale_ld(FP8_BLOCK_128X128, 10, 129) == 4 && fp8_block_scale_ld(FP8_BLOCK_128X128, 10, 640) == 8 &&
               fp8_block_scale_count(FP8_BLOCK_1X128, 10, 129) == 20,
           "block scale layout sizes");
}

/* The scaled reference GEMM: integer codes with power-of-two block scales are exact, so the
 * result must equal a brute-force double sum over k with the scales looked up independently. */
static void test_gemm_scaled(void) {
    struct rng r;
    rng_init(&r, g_seed + 51);
    const int M = 130, N = 70, K = 300;
    uint8_t *A = malloc((size_t)M * K), *B = malloc((size_t)N * K);
    float *out = malloc(sizeof(float) * M * N), *want = malloc(sizeof(float) * M * N), *o2 = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) A[i] = fp8_from_float((float)(rng_int(&r, 17) - 8), FP8_E4M3, FP8_SATFINITE);
    for (int i = 0; i < N * K; i++) B[i] = fp8_from_float((float)(rng_int(&r, 17) - 8), FP8_E5M2, FP8_SATFINITE);
    const enum fp8_scaling modes[3] = {FP8_SCALING_TENSOR, FP8_SCALING_1X128, FP8_SCALING_128X128};
    for (int ma = 0; ma < 3; ma++)
        for (int mb = 0; mb < 3; mb++) {
            int64_t na = ma == 0 ? 1 : fp8_block_scale_count(ma == 1 ? FP8_BLOCK_1X128 : FP8_BLOCK_128X128, M, K);
            int64_t nb = mb == 0 ? 1 : fp8_block_scale_count(mb == 1 ? FP8_BLOCK_1X128 : FP8_BLOCK_128X128, N, K);
            float *sa = malloc(sizeof(float) * na), *sb = malloc(sizeof(float) * nb);
            for (int64_t i = 0; i < na; i++) sa[i] = ldexpf(1.0f, rng_int(&r, 7) - 3);
            for (int64_t i = 0; i < nb; i++) sb[i] = ldexpf(1.0f, rng_int(&r, 7) - 3);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    double d = 0;
                    for (int k = 0; k < K; k++) {
                        double xa = ma == 0 ? sa[0] : sa[test_scale_slot(ma == 1 ? FP8_BLOCK_1X128 : FP8_BLOCK_128X128, M, K, m, k)];
                        double xb = mb == 0 ? sb[0] : sb[test_scale_slot(mb == 1 ? FP8_BLOCK_1X128 : FP8_BLOCK_128X128, N, K, n, k)];
                        d += fp8_to_float(A[m * K + k], FP8_E4M3) * xa * fp8_to_float(B[n * K + k], FP8_E5M2) * xb;
                    }
                    want[m * N + n] = (float)d;
                }
            ref_fp8_gemm_scaled(out, A, FP8_E4M3, modes[ma], sa, B, FP8_E5M2, modes[mb], sb, M, N, K, FP8_OUT_F32);
            char shape[96];
            snprintf(shape, sizeof shape, "M=%d N=%d K=%d modes %d x %d", M, N, K, ma, mb);
            struct cmp_case c = {"ref_fp8_gemm_scaled", "integer codes, power-of-two scales (exact)", shape, "f32", g_seed};
            cmp_exact_f32(&c, out, want, (int64_t)M * N);
            ref_fp8_gemm_scaled(o2, A, FP8_E4M3, modes[ma], sa, B, FP8_E5M2, modes[mb], sb, M, N, K, FP8_OUT_BF16);
            int64_t bad = 0;
            for (int i = 0; i < M * N; i++) bad += o2[i] != bf16_round(out[i]);
            EXPECT(bad == 0, "ref_fp8_gemm_scaled bf16 out: %lld not bf16(f32)", (long long)bad);
            if (ma == 0 && mb == 0) {
                ref_fp8_gemm(o2, NULL, NULL, A, FP8_E4M3, sa[0], B, FP8_E5M2, sb[0], M, N, K, FP8_ACC_F64, FP8_OUT_F32, 1);
                c.what = "tensor x tensor equals ref_fp8_gemm";
                cmp_exact_f32(&c, out, o2, (int64_t)M * N);
            }
            free(sa), free(sb);
        }
    /* Random codes and scales: the double sum rounded once; any order of the double sum agrees to
     * within one fp32 rounding. */
    for (int i = 0; i < M * K; i++) A[i] = fp8_from_float((float)rng_normal(&r) * 50, FP8_E4M3, FP8_SATFINITE);
    for (int i = 0; i < N * K; i++) B[i] = fp8_from_float((float)rng_normal(&r) * 50, FP8_E4M3, FP8_SATFINITE);
    int64_t na = fp8_block_scale_count(FP8_BLOCK_1X128, M, K), nb = fp8_block_scale_count(FP8_BLOCK_128X128, N, K);
    float *sa = malloc(sizeof(float) * na), *sb = malloc(sizeof(float) * nb);
    for (int64_t i = 0; i < na; i++) sa[i] = (float)rng_range(&r, 0.01, 2);
    for (int64_t i = 0; i < nb; i++) sb[i] = (float)rng_range(&r, 0.01, 2);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double d = 0;
            for (int k = 0; k < K; k++)
                d += (double)fp8_to_float(A[m * K + k], FP8_E4M3) * sa[test_scale_slot(FP8_BLOCK_1X128, M, K, m, k)] *
                     fp8_to_float(B[n * K + k], FP8_E4M3) * sb[test_scale_slot(FP8_BLOCK_128X128, N, K, n, k)];
            want[m * N + n] = (float)d;
        }
    ref_fp8_gemm_scaled(out, A, FP8_E4M3, FP8_SCALING_1X128, sa, B, FP8_E4M3, FP8_SCALING_128X128, sb, M, N, K,
                        FP8_OUT_F32);
    struct cmp_case c = {"ref_fp8_gemm_scaled", "random codes and scales", "M=130 N=70 K=300", "f32", g_seed};
    cmp_elementwise(&c, out, want, (int64_t)M * N, FLT_EPSILON, 1.0, cmp_rms(want, (int64_t)M * N) * 1e-6, NULL);
    free(sa), free(sb), free(A), free(B), free(out), free(want), free(o2);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    for (int f = 0; f < 2; f++) {
        test_patterns((enum fp8_format)f);
        test_boundaries((enum fp8_format)f);
        test_random((enum fp8_format)f);
    }
    test_delayed();
    test_current();
    test_gemm();
    test_saturates(FP8_E4M3);
    test_saturates(FP8_E5M2);
    test_cast_transpose();
    test_block_quantize();
    test_gemm_scaled();
    return test_finish("fp8_test");
}
