/* adamw8bit_encode_test.cc — the 8-bit AdamW kernel's bucket encode and short division
 * (gpu/adamw8bit_encode.h) on the CPU, in every `bazel test //...`. For both dynamic maps:
 *
 *   1. the table built as the kernel builds it (c0 = count of each entry's lowest value; shift
 *      kShiftM for the signed map, kShiftV for the unsigned one) meets the kernel's checks:
 *      thresholds ascending, none in (−2^−29, 2^−29], at most 1 threshold per entry by the bound
 *      the kernel uses, and that bound is ≥ the exact count at the entry's top;
 *   2. count_by_table = quant8_encode(QUANT8_CUDA) on every 64th fp32 bit pattern, each threshold
 *      and midpoint ± 3 ulp, each entry's first and last value ± 2 ulp, ±0, ±Inf, NaNs, ±FLT_MIN;
 *   3. div_by_recip(a, w, RN(1/w)) = a / w bit for bit when |a/w| ≥ 2^−30, and below that gives
 *      the same code as a / w, for random w in [2^−70, 2^100] (log-uniform and powers of two) and
 *      a = ±w·u, u log-uniform in [2^−160, 1] and u = 1, plus ±0 and NaN; each quotient lies in
 *      [−1, 1] or is NaN, and count_by_table_unit gives it count_by_table's code;
 *   4. entry_unit(x) = entry(clamp2(x)) on every fp32 x in [−2, 2] and every NaN (all 2^32 patterns
 *      looked at, both shifts), and count_by_table_unit = count_by_table on the points of 2. that
 *      lie there.
 *
 *   bazel test //tests/parity:adamw8bit_encode_test       (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <initializer_list>

#include "gpu/adamw8bit_encode.h"
#include "ref/quant8.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

using namespace refine::adamw8bit_encode;

struct table {
    float map[256];
    float th[256]; /* t[c] = T_c, NaN at 255 */
    uint8_t c0[entries<kShiftV>];
};

/* The shift of a map's table: kShiftM for the signed map, kShiftV for the unsigned one (the kernel's). */
template <int S>
static void build(table *t, int is_signed) {
    quant8_dynamic_map(t->map, is_signed);
    for (int c = 0; c < 255; c++) t->th[c] = quant8_cuda_threshold(t->map, c);
    t->th[255] = NAN;
    for (uint32_t e = 0; e < (uint32_t)entries<S>; e++) t->c0[e] = (uint8_t)count_sorted(t->th, entry_lowest<S>(e));
}

template <int S>
static void check_table(const table *t, int sgn) {
    int unsorted = 0;
    for (int c = 0; c + 1 < 255; c++) unsorted += !(t->th[c] <= t->th[c + 1]);
    EXPECT(unsorted == 0, "signed=%d: %d thresholds out of order", sgn, unsorted);
    EXPECT(count_sorted(t->th, -kTiny) == count_sorted(t->th, kTiny), "signed=%d: a threshold in (-2^-29, 2^-29]",
           sgn);
    int over = 0, loose = 0, worst = 0;
    for (uint32_t e = 0; e < (uint32_t)entries<S>; e++) {
        const unsigned lo = count_sorted(t->th, entry_lowest<S>(e)), hi = count_sorted(t->th, entry_highest<S>(e));
        const unsigned bound = count_bound_above<S>(t->c0, t->th, e);
        if (!(entry_lowest<S>(e) <= entry_highest<S>(e)) || hi < lo) loose++;
        if (bound < hi) loose++;
        if ((int)(bound - t->c0[e]) > worst) worst = (int)(bound - t->c0[e]);
        over += bound - t->c0[e] > (unsigned)kMaxPerBucket;
    }
    EXPECT(loose == 0, "signed=%d: %d entries whose range or bound is wrong", sgn, loose);
    EXPECT(over == 0, "signed=%d: %d entries with more than %d thresholds (worst %d)", sgn, over, kMaxPerBucket,
           worst);
    /* the entries tile [-2, 2]: consecutive positive entries meet, negative ones mirror them */
    int gaps = 0;
    constexpr uint32_t B = (uint32_t)buckets<S>;
    for (uint32_t k = 0; k + 1 < B; k++) {
        gaps += bits_of(entry_highest<S>(k)) + 1u != bits_of(entry_lowest<S>(k + 1));
        gaps += entry_lowest<S>(B + k) != -entry_highest<S>(k) || entry_highest<S>(B + k) != -entry_lowest<S>(k);
        gaps += entry<S>(entry_lowest<S>(k)) != k || entry<S>(entry_highest<S>(k)) != k;
        gaps += entry<S>(entry_lowest<S>(B + k)) != B + k || entry<S>(entry_highest<S>(B + k)) != B + k;
    }
    gaps += entry_highest<S>(B - 1) != 2.0f || entry_lowest<S>(0) != 0.0f || entry<S>(-0.0f) != B;
    EXPECT(gaps == 0, "signed=%d: %d breaks in the tiling of [-2, 2] by entries", sgn, gaps);
}

/* The points the encode checks visit: a spread of 2^26 bit patterns, seven floats around each
 * threshold, midpoint and map value, five around each entry's ends, the special values (zeros,
 * infinities, NaNs with either sign and payload, the extremes, ±1, ±2, the smallest subnormal). */
template <int S, class F>
static void encode_points(const table *t, F one) {
    for (uint64_t b = 0; b < ((uint64_t)1 << 32); b += 64) one(float_of((uint32_t)b ^ (uint32_t)(b >> 11)));
    for (int c = 0; c < 255; c++) {
        const float centers[3] = {t->th[c], (t->map[c] + t->map[c + 1]) * 0.5f, t->map[c]};
        for (float x0 : centers) {
            float x = x0;
            for (int s = 0; s < 3; s++) x = nextafterf(x, -INFINITY);
            for (int s = 0; s < 7; s++, x = nextafterf(x, INFINITY)) one(x);
        }
    }
    for (uint32_t e = 0; e < (uint32_t)entries<S>; e++)
        for (float x0 : {entry_lowest<S>(e), entry_highest<S>(e)}) {
            float x = nextafterf(nextafterf(x0, -INFINITY), -INFINITY);
            for (int s = 0; s < 5; s++, x = nextafterf(x, INFINITY)) one(x);
        }
    for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f, FLT_MIN, -FLT_MIN, 2.0f, -2.0f, FLT_MAX,
                    -FLT_MAX, 0x1p-149f, -0x1p-149f})
        one(x);
    one(float_of(0x7fffffffu)), one(float_of(0xffffffffu)), one(float_of(0x7f800001u)), one(float_of(0xffc00001u));
}

template <int S>
static void check_encode(const table *t, int sgn) {
    long bad = 0, checked = 0;
    float first_x = 0;
    unsigned got0 = 0, want0 = 0;
    auto one = [&](float x) {
        const unsigned got = count_by_table<S>(t->c0, t->th, x), want = quant8_encode(t->map, x, QUANT8_CUDA);
        if (got != want && bad++ == 0) first_x = x, got0 = got, want0 = want;
        checked++;
    };
    encode_points<S>(t, one);
    EXPECT(bad == 0, "table count = QUANT8_CUDA search (signed=%d): %ld of %ld differ, first x=%a table %u search %u",
           sgn, bad, checked, (double)first_x, got0, want0);
}

/* entry_unit against entry(clamp2(x)) on all of its domain ([−2, 2] and the NaNs). */
template <int S>
static void check_entry_unit(void) {
    long bad = 0, checked = 0;
    uint32_t first = 0;
    for (uint64_t b = 0; b < ((uint64_t)1 << 32); b++) {
        const float x = float_of((uint32_t)b);
        if (!(isnan(x) || fabsf(x) <= 2.0f)) continue;
        if (entry_unit<S>(x) != entry<S>(clamp2(x)) && bad++ == 0) first = (uint32_t)b;
        checked++;
    }
    EXPECT(bad == 0 && checked > (1L << 31),
           "entry_unit<%d>: %ld of %ld differ from entry(clamp2(x)), first bits 0x%08x", S, bad, checked, first);
}

/* count_by_table_unit against count_by_table on the encode points (encode_points) of [−2, 2] and NaNs. */
template <int S>
static void check_count_unit(const table *t, int sgn) {
    long bad = 0, checked = 0;
    float first_x = 0;
    auto one = [&](float x) {
        if (!(isnan(x) || fabsf(x) <= 2.0f)) return;
        if (count_by_table_unit<S>(t->c0, t->th, x) != count_by_table<S>(t->c0, t->th, x) && bad++ == 0) first_x = x;
        checked++;
    };
    encode_points<S>(t, one);
    EXPECT(bad == 0, "count_by_table_unit = count_by_table (signed=%d): %ld of %ld differ, first x=%a", sgn, bad,
           checked, (double)first_x);
}

static void check_division(const table *ts, uint64_t seed) {
    struct rng r;
    rng_init(&r, seed);
    long bad = 0, checked = 0, exact = 0;
    float fa = 0, fw = 0;
    auto one = [&](float a, float w) {
        const float y = 1.0f / w, q = div_by_recip(a, w, y);
        volatile float ref = a / w;
        bool ok;
        if (isnan(ref)) ok = isnan(q);
        else if (fabsf(ref) >= 0x1p-30f) ok = bits_of(q) == bits_of(ref), exact++;
        else ok = fabsf(q) < kTiny;
        ok = ok && (isnan(q) || fabsf(q) <= 1.0f);
        for (int s = 0; s < 2; s++) {
            const unsigned want = quant8_encode(ts[s].map, ref, QUANT8_CUDA);
            const unsigned tab = s ? count_by_table<kShiftM>(ts[s].c0, ts[s].th, q)
                                   : count_by_table<kShiftV>(ts[s].c0, ts[s].th, q);
            const unsigned unit = s ? count_by_table_unit<kShiftM>(ts[s].c0, ts[s].th, q)
                                    : count_by_table_unit<kShiftV>(ts[s].c0, ts[s].th, q);
            ok = ok && quant8_encode(ts[s].map, q, QUANT8_CUDA) == want && tab == want && unit == tab;
        }
        if (!ok && bad++ == 0) fa = a, fw = w;
        checked++;
    };
    for (long i = 0; i < (1L << 24); i++) {
        float w = (float)exp2(rng_range(&r, -70, 100));
        if (i % 16 == 0) w = exp2f((float)(int)rng_range(&r, -70, 100));
        w = w < kDivLo ? kDivLo : w > kDivHi ? kDivHi : w;
        const float u = i % 64 == 1 ? 1.0f : (float)exp2(rng_range(&r, -160, 0));
        float a = w * u;
        if (fabsf(a) > w) a = w;
        one(rng_int(&r, 2) ? -a : a, w);
    }
    for (float w : {kDivLo, kDivHi, 1.0f, 0x1.fffffep0f, 0x1.000002p-1f})
        for (float a : {0.0f, -0.0f, NAN, w, -w, w * 0.5f, FLT_MIN, -FLT_MIN, 0x1p-149f}) one(a, w);
    EXPECT(bad == 0, "div_by_recip: %ld of %ld (%ld exact cases) wrong, first a=%a w=%a", bad, checked, exact,
           (double)fa, (double)fw);
}

int main(int argc, char **argv) {
    const uint64_t seed = test_seed(argc, argv, 20260117);
    static table ts[2]; /* [0] the unsigned map (kShiftV), [1] the signed one (kShiftM) */
    build<kShiftV>(&ts[0], 0);
    check_table<kShiftV>(&ts[0], 0);
    check_encode<kShiftV>(&ts[0], 0);
    check_count_unit<kShiftV>(&ts[0], 0);
    build<kShiftM>(&ts[1], 1);
    check_table<kShiftM>(&ts[1], 1);
    check_encode<kShiftM>(&ts[1], 1);
    check_count_unit<kShiftM>(&ts[1], 1);
    check_entry_unit<kShiftM>();
    check_entry_unit<kShiftV>();
    check_division(ts, seed);
    return test_finish("adamw8bit_encode_test");
}
