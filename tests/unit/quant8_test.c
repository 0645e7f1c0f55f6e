/* quant8_test.c — ref/quant8 against its definition: the linspace, both dynamic maps' structure
 * and values, the two encoders (CUDA binary search, nearest) against a brute-force nearest search
 * in double, and blockwise quantization bounds. Bit-exactness against bitsandbytes itself is in
 * tests/golden/formats_golden_test.c.
 *
 *   bazel test //tests/unit:quant8_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/quant8.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

static int brute_nearest(const float *map, double x, int *tie) { /* ties to the lower index */
    int best = 0;
    *tie = 0;
    for (int c = 1; c < 256; c++) {
        double d = fabs(map[c] - x), db = fabs(map[best] - x);
        if (d < db) best = c;
    }
    if (best < 255 && fabs(map[best + 1] - x) == fabs(map[best] - x)) *tie = 1;
    return best;
}

static void test_linspace(void) {
    const int steps[] = {2, 3, 5, 9, 17, 33, 65, 129};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        int n = steps[k];
        float b[129];
        quant8_linspace_f32(b, 0.1f, 1.0f, n);
        EXPECT(b[0] == 0.1f && b[n - 1] == 1.0f, "linspace(%d) endpoints", n);
        int bad = 0;
        for (int j = 0; j < n; j++) {
            double exact = 0.1f + (1.0 - 0.1f) * j / (n - 1);
            bad += fabs(b[j] - exact) > 2 * FLT_EPSILON * exact;
            if (j) bad += !(b[j] > b[j - 1]);
        }
        EXPECT(bad == 0, "linspace(%d): %d values off by more than 2 ulp or not ascending", n, bad);
    }
}

static void test_maps(void) {
    float s[256], u[256];
    quant8_dynamic_map(s, 1);
    quant8_dynamic_map(u, 0);
    int bad = 0;
    for (int i = 0; i < 255; i++) bad += !(s[i] < s[i + 1]) + !(u[i] < u[i + 1]);
    EXPECT(bad == 0, "maps strictly ascending (%d violations)", bad);
    EXPECT(s[127] == 0.0f && s[255] == 1.0f && s[126] < 0 && s[128] > 0, "signed: [127] = 0, [255] = 1");
    EXPECT(fabsf(s[0] + 0.99296875f) < 1e-6f && fabsf(s[254] - 0.99296875f) < 1e-6f, "signed ends ±0.99296875: %.9g %.9g",
           (double)s[0], (double)s[254]);
    for (int i = 0; i < 127; i++) bad += s[i] != -s[254 - i];
    EXPECT(bad == 0, "signed map symmetric apart from +1 (%d)", bad);
    EXPECT(u[0] == 0.0f && u[255] == 1.0f && u[1] > 3.2e-7f && u[1] < 3.3e-7f, "unsigned: 0, ~3.25e-7 .. 1: %.9g",
           (double)u[1]);
    /* Every value is 10^(i-6) times a midpoint of linspace(0.1, 1, k+1), within fp32 rounding. */
    for (int sgn = 1; sgn >= 0; sgn--) {
        const float *m = sgn ? s : u;
        int found = 0;
        for (int i = 0; i < 7; i++) {
            int k = sgn ? 1 << i : 1 << (i + 1);
            for (int j = 0; j < k; j++) {
                double v = pow(10.0, i - 6) * (0.1 + 0.9 * (j + 0.5) / k);
                for (int c = 0; c < 256; c++)
                    if (fabs(m[c] - v) <= 4 * FLT_EPSILON * v) {
                        found++;
                        break;
                    }
            }
        }
        EXPECT(found == (sgn ? 127 : 254), "%s map: %d of %d values found near their formula", sgn ? "signed" : "unsigned",
               found, sgn ? 127 : 254);
    }
}

static void test_encode(void) {
    float s[256], u[256];
    quant8_dynamic_map(s, 1);
    quant8_dynamic_map(u, 0);
    struct rng r;
    rng_init(&r, g_seed);
    int64_t bad = 0, ties = 0;
    for (int i = 0; i < 200000; i++) {
        const float *m = (i & 1) ? s : u;
        double x = (i & 1) ? rng_range(&r, -1, 1) : rng_uniform(&r);
        if (i % 4 < 2) x = x * pow(10.0, -rng_int(&r, 7)); /* all decades */
        float xf = (float)x;
        int tie, want = brute_nearest(m, xf, &tie);
        if (tie) {
            ties++;
            continue;
        }
        bad += quant8_encode(m, xf, QUANT8_CUDA) != want || quant8_encode(m, xf, QUANT8_NEAREST) != want;
    }
    EXPECT(bad == 0, "%lld random values did not get the nearest code", (long long)bad);
    /* Exact fp32 midpoints: NEAREST gives the lower code; CUDA one of the two (its last pivot). */
    int64_t mbad = 0;
    for (int k = 0; k < 255; k++) {
        for (int sgn = 0; sgn < 2; sgn++) {
            const float *m = sgn ? s : u;
            float mid = (m[k] + m[k + 1]) / 2.0f;
            uint8_t cn = quant8_encode(m, mid, QUANT8_NEAREST), cc = quant8_encode(m, mid, QUANT8_CUDA);
            mbad += cn != k || (cc != k && cc != k + 1);
            mbad += quant8_encode(m, nextafterf(mid, INFINITY), QUANT8_CUDA) != k + 1;
            mbad += quant8_encode(m, nextafterf(mid, -INFINITY), QUANT8_CUDA) != k;
        }
    }
    EXPECT(mbad == 0, "%lld midpoint probes wrong", (long long)mbad);
    EXPECT(quant8_encode(s, 1.0f, QUANT8_CUDA) == 255 && quant8_encode(s, -1.0f, QUANT8_CUDA) == 0 &&
               quant8_encode(s, 0.0f, QUANT8_CUDA) == 127 && quant8_encode(u, 0.0f, QUANT8_CUDA) == 0,
           "ends and zero");
    EXPECT(quant8_encode(s, NAN, QUANT8_CUDA) == 0, "NaN fails every > test: code 0");
}

/* The number of thresholds ≤ x (quant8_cuda_threshold's count form, quant8.h), t ascending. */
static unsigned count_form(const float t[255], float x) {
    unsigned lo = 0, hi = 255; /* the number of t_c ≤ x, t ascending */
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (x >= t[mid]) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Both faster forms of the QUANT8_CUDA code against the search at one x: the threshold count and
 * quant8_table_encode (bad[0], bad[1]; the first difference of each kept for the report). */
struct form_probe {
    const float *map, *t;
    const struct quant8_table *tab;
    long bad[2], checked;
    float first_x[2];
    unsigned got0[2], want0[2];
};

static void probe(struct form_probe *pr, float x) {
    const unsigned want = quant8_encode(pr->map, x, QUANT8_CUDA);
    const unsigned got[2] = {count_form(pr->t, x), quant8_table_encode(pr->tab, x)};
    for (int f = 0; f < 2; f++)
        if (got[f] != want && pr->bad[f]++ == 0) pr->first_x[f] = x, pr->got0[f] = got[f], pr->want0[f] = want;
    pr->checked++;
}

/* quant8_cuda_threshold's count form and quant8_table_encode against the binary search
 * (quant8.h): every 256th fp32 bit pattern, each threshold, midpoint and map value ± 3 ulp, each
 * table range's ends ± 1 ulp, ±0, ±Inf, NaN, the clamp ±2 and beyond. (An exhaustive run over all
 * 2^32 patterns agreed for both maps; it takes minutes, so the test samples.) */
static void test_threshold_form(void) {
    for (int sgn = 0; sgn < 2; sgn++) {
        float map[256], t[255];
        quant8_dynamic_map(map, sgn);
        int bad_order = 0;
        for (int c = 0; c < 255; c++) {
            t[c] = quant8_cuda_threshold(map, c);
            if (c) bad_order += !(t[c] >= t[c - 1]);
        }
        EXPECT(bad_order == 0, "thresholds ascending (signed=%d): %d violations", sgn, bad_order);
        struct quant8_table tab;
        quant8_table_init(&tab, map);
        struct form_probe pr = {map, t, &tab, {0, 0}, 0, {0, 0}, {0, 0}, {0, 0}};
        for (uint64_t b = 0; b < ((uint64_t)1 << 32); b += 256) {
            uint32_t bits = (uint32_t)b ^ (uint32_t)(b >> 13); /* vary the low bits too */
            float x;
            memcpy(&x, &bits, 4);
            probe(&pr, x);
        }
        for (int c = 0; c < 255; c++) {
            const float mid = (map[c] + map[c + 1]) * 0.5f;
            const float centers[3] = {t[c], mid, map[c]};
            for (int k = 0; k < 3; k++) {
                float x = centers[k];
                for (int s = 0; s < 3; s++) x = nextafterf(x, -INFINITY);
                for (int s = 0; s < 7; s++, x = nextafterf(x, INFINITY)) probe(&pr, x);
            }
        }
        for (uint32_t k = 0; k < QUANT8_TABLE_BUCKETS; k++) {
            const uint32_t lo = k ? QUANT8_TABLE_LO + (k << QUANT8_TABLE_SHIFT) : 0u;
            const uint32_t hi = QUANT8_TABLE_LO + ((k + 1u) << QUANT8_TABLE_SHIFT) - 1u;
            const uint32_t ends[4] = {lo, lo ? lo - 1u : 0u, hi, hi + 1u};
            for (int e = 0; e < 8; e++) {
                const uint32_t bits = ends[e / 2] | (e % 2 ? 0x80000000u : 0u);
                float x;
                memcpy(&x, &bits, 4);
                probe(&pr, x);
            }
        }
        const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f, 2.0f, -2.0f,
                                 3.0f, -3.0f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX};
        for (size_t k = 0; k < sizeof special / sizeof special[0]; k++) probe(&pr, special[k]);
        EXPECT(pr.bad[0] == 0, "threshold count = QUANT8_CUDA search (signed=%d): %ld of %ld differ, first x=%a count %u search %u",
               sgn, pr.bad[0], pr.checked, (double)pr.first_x[0], pr.got0[0], pr.want0[0]);
        EXPECT(pr.bad[1] == 0, "table = QUANT8_CUDA search (signed=%d): %ld of %ld differ, first x=%a table %u search %u",
               sgn, pr.bad[1], pr.checked, (double)pr.first_x[1], pr.got0[1], pr.want0[1]);
    }
}

static void test_blockwise(int64_t n, int bs) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)n);
    float map[256];
    quant8_dynamic_map(map, 1);
    int64_t nb = (n + bs - 1) / bs;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *am = malloc(sizeof(float) * nb);
    uint8_t *q = malloc((size_t)n), *codes = malloc((size_t)n);
    /* Representable: map[c]·scale with one ±max per block → codes come back exactly. */
    for (int64_t b = 0; b < nb; b++) {
        float scale = (float)exp(rng_range(&r, -10, 5));
        for (int64_t i = b * bs; i < n && i < (b + 1) * bs; i++) {
            codes[i] = (uint8_t)rng_int(&r, 256);
            if (i == b * bs) codes[i] = 255;
            x[i] = map[codes[i]] * scale;
        }
    }
    quant8_quantize_blockwise(q, am, x, n, bs, map, QUANT8_CUDA);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += q[i] != codes[i];
    EXPECT(bad == 0, "n=%lld bs=%d: %lld representable values lost their code", (long long)n, bs, (long long)bad);
    quant8_dequantize_blockwise(y, q, am, n, bs, map);
    char shape[48];
    snprintf(shape, sizeof shape, "n=%lld bs=%d", (long long)n, bs);
    struct cmp_case c = {"quant8_dequantize_blockwise", "representable", shape, "u8", g_seed};
    cmp_exact_f32(&c, y, x, n);
    /* Random: error ≤ half the largest gap · absmax, except below the signed map's smallest entry
     * (−0.99296875: the map has +1 but no −1), where it is the distance to that entry. */
    rng_fill_normal(&r, x, n, 0, 1);
    quant8_quantize_blockwise(q, am, x, n, bs, map, QUANT8_CUDA);
    quant8_dequantize_blockwise(y, q, am, n, bs, map);
    double gap = 0;
    for (int k = 0; k < 255; k++) gap = fmax(gap, (double)map[k + 1] - map[k]);
    bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = am[i / bs], xn = x[i] / a;
        double lim = xn < map[0] ? (map[0] - xn) * a : gap / 2 * a;
        bad += fabs((double)y[i] - x[i]) > lim * (1 + 1e-6) + FLT_EPSILON * a;
    }
    EXPECT(bad == 0, "%s: %lld values beyond the half-gap bound", shape, (long long)bad);
    free(x), free(y), free(am), free(q), free(codes);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    test_linspace();
    test_maps();
    test_encode();
    test_threshold_form();
    test_blockwise(256 * 4, 256);
    test_blockwise(256 * 3 + 77, 256);
    test_blockwise(1, 256);
    test_blockwise(4096 + 5, 2048);
    return test_finish("quant8_test");
}
