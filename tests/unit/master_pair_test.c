/* master_pair_test.c — ref/master_pair.h over every one of the 2^32 fp32 bit patterns.
 *
 * For each pattern x (independently of the header's reasoning):
 *   - hi is the bf16 compute copy: bf16_from_float(x) (ref/bf16.h), NaN included (0x7FC0);
 *   - join(split(x)) is x itself, except exactly where the header says: low half 0x8000 under an
 *     even upper half, where it is x one ulp toward zero (the pattern minus one) — one pattern for
 *     each even upper half that is not a NaN's: 2^15 − 128 of them;
 *   - the pair of join(split(x)) is the same pair (the rounding is idempotent: a master kept as a
 *     pair stays what it is);
 *   - NaN patterns give (0x7FC0, 0); the array forms agree with the scalar ones.
 *
 *   bazel test //tests/unit:master_pair_test
 */
#include <math.h>
#include <stdio.h>

#include "ref/bf16.h"
#include "ref/dropout.h"
#include "ref/master_pair.h"
#include "tests/common/harness.h"

static void test_every_pattern(void) {
    int64_t bad_hi = 0, bad_join = 0, bad_idem = 0, bad_nan = 0, moved = 0;
    uint32_t first_bad = 0;
    int have_bad = 0;
    uint32_t u = 0;
    do {
        uint16_t hi, lo;
        master_pair_split_bits(u, &hi, &lo);
        const float x = ref_f32_from_bits(u);
        const int nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
        if (nan) {
            bad_nan += hi != 0x7FC0 || lo != 0;
        } else {
            const int b1 = hi != bf16_from_float(x);
            const uint32_t back = master_pair_join_bits(hi, lo);
            const int tie_down = (u & 0xFFFFu) == 0x8000u && ((u >> 16) & 1u) == 0;
            const int b2 = tie_down ? back != u - 1 : back != u;
            moved += tie_down;
            uint16_t hi2, lo2;
            master_pair_split_bits(back, &hi2, &lo2);
            const int b3 = hi2 != hi || lo2 != lo;
            bad_hi += b1, bad_join += b2, bad_idem += b3;
            if ((b1 || b2 || b3) && !have_bad) first_bad = u, have_bad = 1;
        }
        u++;
    } while (u != 0);
    EXPECT(bad_hi == 0, "%lld patterns: hi is not bf16_from_float(x) (first 0x%08x)", (long long)bad_hi, first_bad);
    EXPECT(bad_join == 0, "%lld patterns: join(split(x)) is not x (or x one ulp toward zero at the rounded-down tie; "
                          "first 0x%08x)",
           (long long)bad_join, first_bad);
    EXPECT(bad_idem == 0, "%lld patterns: the pair of join(split(x)) differs (first 0x%08x)", (long long)bad_idem,
           first_bad);
    EXPECT(bad_nan == 0, "%lld NaN patterns do not give (0x7FC0, 0)", (long long)bad_nan);
    /* upper halves with an even pattern and not NaN/Inf-exponent-with-mantissa: every even h whose
     * (h << 16) | 0x8000 is not NaN. The NaN ones: exponent all ones (h & 0x7F80 == 0x7F80), which
     * is 2 signs × 128 mantissas (h & 0x7F), half of them even = 128, all NaN (0x8000 low half). */
    EXPECT(moved == 32768 - 128, "%lld patterns moved one ulp, expected %d", (long long)moved, 32768 - 128);
}

static void test_values(void) {
    /* a value whose pair is exact and one at the moved tie */
    const float one = 1.0f;
    EXPECT(master_pair_round(one) == one, "1.0 is kept");
    const float tie_even = ref_f32_from_bits(0x3F808000u); /* upper half 0x3F80 even, low half 0x8000 */
    EXPECT(master_pair_round(tie_even) == ref_f32_from_bits(0x3F807FFFu), "the rounded-down tie moves one ulp down");
    const float tie_odd = ref_f32_from_bits(0x3F818000u);
    EXPECT(master_pair_round(tie_odd) == tie_odd, "the rounded-up tie is kept");
    const float neg = ref_f32_from_bits(0xBF808000u); /* −(1 + 2^-8): moves toward zero */
    EXPECT(master_pair_round(neg) == ref_f32_from_bits(0xBF807FFFu) && fabsf(master_pair_round(neg)) < fabsf(neg),
           "a negative tie moves toward zero");
    const float big = ref_f32_from_bits(0x7F7FFFFFu); /* FLT_MAX: hi rounds to Inf, the master survives */
    uint16_t hi, lo;
    master_pair_split(big, &hi, &lo);
    EXPECT(hi == 0x7F80 && master_pair_join(hi, lo) == big, "FLT_MAX: hi Inf, joined back exactly");
    master_pair_split(INFINITY, &hi, &lo);
    EXPECT(hi == 0x7F80 && lo == 0 && isinf(master_pair_join(hi, lo)), "Inf is exact");
    float xs[5] = {one, tie_even, tie_odd, neg, -3.25e-20f}, ys[5], zs[5];
    uint16_t his[5], los[5];
    for (int i = 0; i < 5; i++) ys[i] = xs[i];
    master_pair_round_array(ys, 5);
    master_pair_split_array(his, los, xs, 5);
    master_pair_join_array(zs, his, los, 5);
    int bad = 0;
    for (int i = 0; i < 5; i++) bad += ys[i] != master_pair_round(xs[i]) || zs[i] != ys[i] || his[i] != bf16_from_float(xs[i]);
    EXPECT(bad == 0, "array forms: %d of 5 differ from the scalar ones", bad);
}

/* MASTER_BF16: the pair without its low half. join(hi, 0) must widen every bf16 pattern exactly
 * (the bf16 weight is the master), and the array forms with lo NULL write bf16_rne alone. */
static void test_without_low_half(void) {
    int64_t bad = 0;
    for (uint32_t h = 0; h <= 0xFFFFu; h++) bad += master_pair_join_bits((uint16_t)h, 0) != h << 16;
    EXPECT(bad == 0, "join(hi, 0) differs from hi << 16 for %lld of 65536 patterns", (long long)bad);
    const float xs[6] = {1.0f, ref_f32_from_bits(0x3F808000u), ref_f32_from_bits(0x3F818000u), -3.25e-20f,
                         ref_f32_from_bits(0x7F7FFFFFu), -INFINITY};
    uint16_t his[6];
    float zs[6];
    master_pair_split_array(his, NULL, xs, 6);
    master_pair_join_array(zs, his, NULL, 6);
    int wrong = 0;
    for (int i = 0; i < 6; i++) {
        const float w = bf16_to_float(bf16_from_float(xs[i]));
        wrong += his[i] != bf16_from_float(xs[i]) || !(zs[i] == w);
    }
    EXPECT(wrong == 0, "lo NULL: %d of 6 are not bf16_rne and its widening", wrong);
}

/* Stochastic rounding (MASTER_BF16_SR): over all 2^16 values of r the result is the truncation or
 * the next bf16 up, up exactly (low half) times — so the mean over r is x itself, exactly; a bf16
 * value is kept for every r; the keyed array form draws word e & 3 of Philox block e >> 2. */
static void test_stochastic(void) {
    const uint32_t xs[] = {0x3F800001u, 0x3F80FFFFu, 0x3F808000u, 0xBF812345u, 0x00012345u, 0x80000001u,
                           0x7F7E0001u, 0x3E4CCCCDu, 0xC2F6E979u};
    int bad = 0;
    for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
        const uint32_t u = xs[k];
        double sum = 0.0;
        int ups = 0, other = 0;
        for (uint32_t r = 0; r <= 0xFFFFu; r++) {
            const uint16_t h = bf16_sr_bits(u, r);
            if (h == (uint16_t)((u >> 16) + 1u)) ups++;
            else if (h != (uint16_t)(u >> 16)) other++;
            sum += (double)bf16_to_float(h);
        }
        bad += other != 0 || ups != (int)(u & 0xFFFFu) || sum != 65536.0 * (double)ref_f32_from_bits(u);
    }
    EXPECT(bad == 0, "stochastic rounding: %d of %zu values not unbiased over every r", bad, sizeof xs / sizeof xs[0]);
    int kept = 0;
    for (uint32_t h = 0; h <= 0xFFFFu; h += 7) {
        if ((h & 0x7FFFu) > 0x7F80u) continue; /* NaN */
        for (uint32_t r = 0; r <= 0xFFFFu; r += 4099) kept += bf16_sr_bits(h << 16, r) == h;
    }
    int expect_kept = 0;
    for (uint32_t h = 0; h <= 0xFFFFu; h += 7)
        if ((h & 0x7FFFu) <= 0x7F80u) expect_kept += (0xFFFFu / 4099u) + 1;
    EXPECT(kept == expect_kept, "stochastic rounding keeps bf16 values: %d of %d", kept, expect_kept);
    EXPECT(bf16_sr_bits(0x7FC00001u, 0x1234u) == 0x7FC0 && bf16_sr_bits(0xFF800000u, 0xFFFFu) == 0xFF80,
           "stochastic rounding: NaN canonical, -Inf kept");
    EXPECT(bf16_sr_tensor_hash("") == 0x811C9DC5u && bf16_sr_tensor_hash("a") == 0xE40C292Cu,
           "FNV-1a known answers");
    /* the keyed array form against the definition */
    float x[11], y[11];
    for (int e = 0; e < 11; e++) x[e] = y[e] = 1.0f + (float)e * 0x1p-12f + 0x1p-20f;
    const uint64_t seed = 0x0123456789ABCDEFull;
    const int64_t step = 77;
    const uint32_t tensor = bf16_sr_tensor_hash("model.layers.0.mlp.up_proj.weight");
    bf16_sr_round_array(y, 11, seed, step, tensor);
    int wrong = 0, up = 0;
    for (int e = 0; e < 11; e++) {
        uint32_t w[4];
        const uint32_t key[2] = {(uint32_t)seed ^ BF16_SR_KEY0, (uint32_t)(seed >> 32) ^ BF16_SR_KEY1};
        const uint32_t ctr[4] = {(uint32_t)(e >> 2), 0, (uint32_t)step, tensor};
        ref_philox4x32_10(w, ctr, key);
        const float want = bf16_to_float(bf16_sr_bits(ref_f32_bits(x[e]), w[e & 3] >> 16));
        wrong += !(y[e] == want);
        up += y[e] > x[e];
    }
    EXPECT(wrong == 0, "bf16_sr_round_array: %d of 11 differ from the keyed definition", wrong);
    EXPECT(up > 0 && up < 11, "bf16_sr_round_array rounds both ways (%d of 11 up)", up);
}

int main(void) {
    test_every_pattern();
    test_values();
    test_without_low_half();
    test_stochastic();
    return test_finish("master_pair_test");
}
