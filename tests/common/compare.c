/* compare.c — tolerance tiers and failure reports (compare.h). */
#include "tests/common/compare.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/harness.h"

static int verbose(void) {
    const char *v = getenv("REFINE_VERBOSE");
    return v != NULL && v[0] != '\0' && v[0] != '0';
}

static void header(const struct cmp_case *c, const char *tier) {
    fprintf(stderr, "  %s op=%s what=%s shape=[%s] dtype=%s seed=%" PRIu64 "\n", tier,
            c->op ? c->op : "?", c->what ? c->what : "?", c->shape ? c->shape : "?",
            c->dtype ? c->dtype : "?", c->seed);
}

/* 0 when the non-finite classes of got and ref agree at this element, 1 otherwise. */
static int nonfinite_mismatch(float g, float r) {
    if (isnan(r)) return !isnan(g);
    if (isinf(r)) return !(isinf(g) && signbit(g) == signbit(r));
    return !isfinite(g);
}

int cmp_exact_f32(const struct cmp_case *c, const float *got, const float *ref, int64_t n) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        uint32_t gb, rb;
        memcpy(&gb, &got[i], 4);
        memcpy(&rb, &ref[i], 4);
        int same = (gb == rb) || (isnan(got[i]) && isnan(ref[i]));
        if (!same) {
            if (first < 0) first = i;
            bad++;
        }
    }
    if (bad == 0) {
        test_pass();
        if (verbose()) fprintf(stderr, "  ok exact %s/%s n=%" PRId64 "\n", c->op, c->what, n);
        return 0;
    }
    test_fail("%s/%s: %" PRId64 " of %" PRId64 " elements differ (exact tier)", c->op, c->what, bad, n);
    header(c, "exact");
    fprintf(stderr, "  first i=%" PRId64 " got=%.9g (0x%08x) ref=%.9g (0x%08x)\n", first,
            (double)got[first], *(const uint32_t *)(const void *)&got[first], (double)ref[first],
            *(const uint32_t *)(const void *)&ref[first]);
    return 1;
}

int cmp_exact_bytes(const struct cmp_case *c, const void *got, const void *ref, size_t nbytes) {
    const unsigned char *g = (const unsigned char *)got, *r = (const unsigned char *)ref;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < nbytes; i++) {
        if (g[i] != r[i]) {
            if (bad == 0) first = i;
            bad++;
        }
    }
    if (bad == 0) {
        test_pass();
        return 0;
    }
    test_fail("%s/%s: %zu of %zu bytes differ (exact tier)", c->op, c->what, bad, nbytes);
    header(c, "exact");
    fprintf(stderr, "  first byte %zu got=0x%02x ref=0x%02x\n", first, g[first], r[first]);
    return 1;
}

double cmp_rms(const float *x, int64_t n) {
    if (n <= 0) return 0.0;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i])) s += (double)x[i] * (double)x[i];
    return sqrt(s / (double)n);
}

int cmp_elementwise(const struct cmp_case *c, const float *got, const float *ref, int64_t n,
                    double eps, double k, double floor, struct cmp_stats *stats) {
    struct cmp_stats st = {n, 0, -1, -1, 0.0, 0.0, 0.0, 0.0};
    double sum_e2 = 0.0, sum_r2 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float g = got[i], r = ref[i];
        if (!isfinite(r) || !isfinite(g)) {
            if (nonfinite_mismatch(g, r)) {
                if (st.first_bad < 0) st.first_bad = i;
                st.n_bad++;
                if (st.worst_ratio < INFINITY) {
                    st.worst_ratio = INFINITY;
                    st.worst = i;
                }
            }
            continue;
        }
        double e = fabs((double)g - (double)r);
        double thr = k * eps * (fabs((double)r) + floor);
        double ratio = thr > 0 ? e / thr : (e > 0 ? INFINITY : 0.0);
        if (ratio > st.worst_ratio || st.worst < 0) {
            st.worst_ratio = ratio;
            st.worst = i;
        }
        if (e > st.max_abs_err) st.max_abs_err = e;
        if (e > thr) {
            if (st.first_bad < 0) st.first_bad = i;
            st.n_bad++;
        }
        sum_e2 += e * e;
        sum_r2 += (double)r * (double)r;
    }
    st.rms_err = n > 0 ? sqrt(sum_e2 / (double)n) : 0.0;
    st.rms_ref = n > 0 ? sqrt(sum_r2 / (double)n) : 0.0;
    double agg = sqrt(sum_e2), agg_thr = 0.25 * k * eps * (sqrt(sum_r2) + floor * sqrt((double)n));
    int agg_bad = agg > agg_thr;
    if (stats) *stats = st;
    if (st.n_bad == 0 && !agg_bad) {
        test_pass();
        if (verbose())
            fprintf(stderr, "  ok elementwise %s/%s [%s] n=%" PRId64 " worst=%.1f%% of budget rms_err=%.3g\n",
                    c->op, c->what, c->shape, n, 100.0 * st.worst_ratio, st.rms_err);
        return 0;
    }
    test_fail("%s/%s: %" PRId64 " of %" PRId64 " elements out of tolerance%s (elementwise tier, k=%g eps=%g floor=%g)",
              c->op, c->what, st.n_bad, n, agg_bad ? ", aggregate bound exceeded" : "", k, eps, floor);
    header(c, "elementwise");
    if (st.first_bad >= 0) {
        int64_t i = st.first_bad;
        fprintf(stderr, "  first i=%" PRId64 " got=%.9g ref=%.9g err=%.3g thr=%.3g\n", i, (double)got[i],
                (double)ref[i], fabs((double)got[i] - (double)ref[i]),
                k * eps * (fabs((double)ref[i]) + floor));
    }
    if (st.worst >= 0) {
        int64_t i = st.worst;
        fprintf(stderr, "  worst i=%" PRId64 " got=%.9g ref=%.9g err=%.3g thr=%.3g (%.0f%% of budget)\n", i,
                (double)got[i], (double)ref[i], fabs((double)got[i] - (double)ref[i]),
                k * eps * (fabs((double)ref[i]) + floor), 100.0 * st.worst_ratio);
    }
    fprintf(stderr, "  aggregate ||err||=%.4g bound=%.4g (%.0f%% of budget) rms_err=%.3g rms_ref=%.3g\n", agg,
            agg_thr, agg_thr > 0 ? 100.0 * agg / agg_thr : INFINITY, st.rms_err, st.rms_ref);
    return 1;
}

int cmp_vs_naive(const struct cmp_case *c, const float *got, const float *naive, const float *ref,
                 int64_t n, double factor, double abs_floor, struct cmp_stats *stats) {
    struct cmp_stats st = {n, 0, -1, -1, 0.0, 0.0, 0.0, 0.0};
    double g_max = 0, n_max = 0, g_e2 = 0, n_e2 = 0, r2 = 0;
    int64_t g_argmax = -1;
    for (int64_t i = 0; i < n; i++) {
        float g = got[i], r = ref[i];
        if (!isfinite(r) || !isfinite(g)) {
            if (nonfinite_mismatch(g, r)) {
                if (st.first_bad < 0) st.first_bad = i;
                st.n_bad++;
            }
            continue;
        }
        double eg = fabs((double)g - (double)r);
        double en = isfinite(naive[i]) ? fabs((double)naive[i] - (double)r) : 0.0;
        if (eg > g_max) {
            g_max = eg;
            g_argmax = i;
        }
        if (en > n_max) n_max = en;
        g_e2 += eg * eg;
        n_e2 += en * en;
        r2 += (double)r * (double)r;
    }
    double g_rms = n > 0 ? sqrt(g_e2 / (double)n) : 0, n_rms = n > 0 ? sqrt(n_e2 / (double)n) : 0;
    double max_thr = factor * n_max + abs_floor, rms_thr = factor * n_rms + abs_floor;
    st.worst = g_argmax;
    st.max_abs_err = g_max;
    st.rms_err = g_rms;
    st.rms_ref = n > 0 ? sqrt(r2 / (double)n) : 0;
    st.worst_ratio = max_thr > 0 ? g_max / max_thr : (g_max > 0 ? INFINITY : 0);
    double rms_ratio = rms_thr > 0 ? g_rms / rms_thr : (g_rms > 0 ? INFINITY : 0);
    if (stats) *stats = st;
    int bad = st.n_bad > 0 || g_max > max_thr || g_rms > rms_thr;
    if (!bad) {
        test_pass();
        if (verbose())
            fprintf(stderr, "  ok vs-naive %s/%s [%s] max_err=%.3g (naive %.3g) rms_err=%.3g (naive %.3g)\n", c->op,
                    c->what, c->shape, g_max, n_max, g_rms, n_rms);
        return 0;
    }
    test_fail("%s/%s: error exceeds %g x the naive same-dtype error (vs-naive tier)", c->op, c->what, factor);
    header(c, "vs-naive");
    if (st.n_bad > 0)
        fprintf(stderr, "  %" PRId64 " non-finite mismatches, first i=%" PRId64 " got=%g ref=%g\n", st.n_bad,
                st.first_bad, (double)got[st.first_bad], (double)ref[st.first_bad]);
    if (g_argmax >= 0)
        fprintf(stderr, "  worst i=%" PRId64 " got=%.9g naive=%.9g ref=%.9g\n", g_argmax, (double)got[g_argmax],
                (double)naive[g_argmax], (double)ref[g_argmax]);
    fprintf(stderr, "  max_err=%.4g bound=%.4g (%.0f%% of budget); rms_err=%.4g bound=%.4g (%.0f%% of budget)\n",
            g_max, max_thr, 100.0 * st.worst_ratio, g_rms, rms_thr, 100.0 * rms_ratio);
    return 1;
}
