/* dropout_test.c — ref/dropout: Philox4x32-10 against Random123's known-answer vectors, the
 * element → (counter, lane) mapping, p = 0 identity, keep fraction and uniformity, the shared mask
 * of forward and backward, finite differences.
 *
 *   bazel test //tests/unit:dropout_test        (replay: --test_arg=--seed=N)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/dropout.h"
#include "tests/common/compare.h"
#include "tests/common/gradcheck.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

/* Random123 tests/kat_vectors, philox4x32 10 (counter words, key words, expected words); the
 * same vectors are published with curand-compatible implementations. */
static void test_known_answers(void) {
    static const uint32_t kat[3][10] = {
        {0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x6627e8d5, 0xe169c58d,
         0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
         0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
         0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        ref_philox4x32_10(out, kat[i], kat[i] + 4);
        for (int l = 0; l < 4; l++)
            EXPECT(out[l] == kat[i][6 + l], "philox KAT %d word %d: got %08x expected %08x", i, l, out[l],
                   kat[i][6 + l]);
    }
}

/* The documented mapping, recomputed from the raw generator. */
static void test_mapping(void) {
    struct rng r;
    rng_init(&r, g_seed);
    for (int t = 0; t < 200; t++) {
        uint64_t seed = rng_u64(&r), offset = rng_u64(&r);
        int64_t e = (int64_t)(rng_u64(&r) >> (t % 2 ? 1 : 40)); /* large and small indices */
        uint64_t b = (uint64_t)e >> 2;
        const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
        const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)offset, (uint32_t)(offset >> 32)};
        uint32_t x[4];
        ref_philox4x32_10(x, ctr, key);
        float want = (float)(x[e & 3] >> 8) / 16777216.0f;
        float got = ref_dropout_uniform(seed, offset, e);
        EXPECT(got == want, "uniform(seed=%llu, offset=%llu, e=%lld) = %.9g, mapping gives %.9g",
               (unsigned long long)seed, (unsigned long long)offset, (long long)e, (double)got, (double)want);
        EXPECT(got >= 0.0f && got < 1.0f, "uniform %.9g outside [0,1)", (double)got);
    }
    /* The mask of n elements is the prefix of the mask of more elements (the mask is a function of
     * the index, not of n), and it agrees with ref_dropout_uniform. */
    int n1 = 37, n2 = 1029;
    uint8_t *m1 = malloc(n1), *m2 = malloc(n2);
    ref_dropout_mask(m1, n1, 0.3f, g_seed, 5);
    ref_dropout_mask(m2, n2, 0.3f, g_seed, 5);
    EXPECT(memcmp(m1, m2, n1) == 0, "mask of %d elements is not a prefix of the mask of %d", n1, n2);
    int64_t bad = 0;
    for (int e = 0; e < n2; e++) bad += m2[e] != (ref_dropout_uniform(g_seed, 5, e) >= 0.3f);
    EXPECT(bad == 0, "%lld mask bits disagree with uniform(e) >= p", (long long)bad);
    /* A different offset or seed gives a different mask. */
    uint8_t *m3 = malloc(n2);
    ref_dropout_mask(m3, n2, 0.3f, g_seed, 6);
    EXPECT(memcmp(m2, m3, n2) != 0, "offsets 5 and 6 gave the same mask");
    ref_dropout_mask(m3, n2, 0.3f, g_seed + 1, 5);
    EXPECT(memcmp(m2, m3, n2) != 0, "seeds %llu and %llu gave the same mask", (unsigned long long)g_seed,
           (unsigned long long)g_seed + 1);
    free(m1), free(m2), free(m3);
}

/* Hand case: x = [1,2,3,4,5], p = 0.5 → kept elements become 2x, dropped become 0, decided by u(e). */
static void test_hand_case(void) {
    const float x[5] = {1, 2, 3, 4, 5};
    float out[5];
    ref_dropout_forward(out, x, 5, 0.5f, 42, 0, ACT_F32);
    for (int e = 0; e < 5; e++) {
        float u = ref_dropout_uniform(42, 0, e);
        float want = u >= 0.5f ? 2.0f * x[e] : 0.0f;
        EXPECT(out[e] == want, "e=%d u=%.9g: out %.9g expected %.9g", e, (double)u, (double)out[e], (double)want);
    }
    /* p = 0.25: scale = 1/0.75, rounded once to fp32. */
    ref_dropout_forward(out, x, 5, 0.25f, 42, 0, ACT_F32);
    float scale = (float)(4.0 / 3.0);
    for (int e = 0; e < 5; e++) {
        float want = ref_dropout_uniform(42, 0, e) >= 0.25f ? x[e] * scale : 0.0f;
        EXPECT(out[e] == want, "p=0.25 e=%d: out %.9g expected %.9g", e, (double)out[e], (double)want);
    }
}

static void test_identity_and_fraction(void) {
    const int64_t n = 1 << 20;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    uint8_t *keep = malloc(n);
    struct rng r;
    rng_init(&r, g_seed + 3);
    rng_fill_normal(&r, x, n, 0.0, 2.0);
    for (int64_t j = 0; j < n; j++) x[j] = bf16_round(x[j]);
    ref_dropout_forward(y, x, n, 0.0f, g_seed, 9, ACT_F32);
    struct cmp_case c0 = {"dropout_forward", "p=0 identity", "n=2^20", "f32", g_seed};
    cmp_exact_f32(&c0, y, x, n);
    ref_dropout_forward(y, x, n, 0.0f, g_seed, 9, ACT_BF16);
    struct cmp_case c1 = {"dropout_forward", "p=0 identity", "n=2^20", "bf16", g_seed};
    cmp_exact_f32(&c1, y, x, n);

    const float ps[] = {0.1f, 0.5f, 0.9f};
    for (int i = 0; i < 3; i++) {
        float p = ps[i];
        ref_dropout_mask(keep, n, p, g_seed, (uint64_t)i);
        int64_t kept = 0;
        for (int64_t j = 0; j < n; j++) kept += keep[j];
        /* P(keep) = 1 − ceil(p·2^24)/2^24 exactly; the count is binomial: allow 6 standard deviations. */
        double q = 1.0 - ceil((double)p * 16777216.0) / 16777216.0;
        double sd = sqrt((double)n * q * (1 - q));
        EXPECT(fabs(kept - n * q) <= 6 * sd, "p=%.2f: kept %lld of %lld, expected %.1f ± %.1f", (double)p,
               (long long)kept, (long long)n, n * q, 6 * sd);
    }
    /* Uniformity: 64 bins of u, each binomial(n, 1/64), within 6 standard deviations. */
    int64_t bins[64] = {0};
    for (int64_t j = 0; j < n; j++) bins[(int)(ref_dropout_uniform(g_seed, 77, j) * 64.0f)]++;
    double sd = sqrt(n / 64.0 * (63.0 / 64.0));
    int badbins = 0;
    for (int b = 0; b < 64; b++) badbins += fabs(bins[b] - n / 64.0) > 6 * sd;
    EXPECT(badbins == 0, "%d of 64 histogram bins of u are off by more than 6 sd", badbins);
    free(x), free(y), free(keep);
}

/* Forward and backward use the same mask; bf16 mode rounds the scaled value once; aliasing. */
static void test_forward_backward(int64_t n, float p) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)n);
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
    float *want = malloc(sizeof(float) * n);
    uint8_t *keep = malloc(n);
    rng_fill_normal(&r, x, n, 0.0, 1.0);
    ref_dropout_mask(keep, n, p, g_seed, 11);
    float scale = (float)(1.0 / (1.0 - (double)p));
    for (int64_t j = 0; j < n; j++) want[j] = keep[j] ? x[j] * scale : 0.0f;
    ref_dropout_forward(y, x, n, p, g_seed, 11, ACT_F32);
    ref_dropout_backward(dx, x, n, p, g_seed, 11, ACT_F32);
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld p=%.2f", (long long)n, (double)p);
    struct cmp_case cf = {"dropout_forward", "out", shape, "f32", g_seed};
    struct cmp_case cb = {"dropout_backward", "dx", shape, "f32", g_seed};
    cmp_exact_f32(&cf, y, want, n);
    cmp_exact_f32(&cb, dx, want, n);
    for (int64_t j = 0; j < n; j++) want[j] = bf16_round(want[j]);
    ref_dropout_forward(y, x, n, p, g_seed, 11, ACT_BF16);
    struct cmp_case c16 = {"dropout_forward", "out", shape, "bf16", g_seed};
    cmp_exact_f32(&c16, y, want, n);
    memcpy(dx, x, sizeof(float) * n);
    ref_dropout_backward(dx, dx, n, p, g_seed, 11, ACT_BF16);
    struct cmp_case ca = {"dropout_backward", "dx aliasing dy", shape, "bf16", g_seed};
    cmp_exact_f32(&ca, dx, want, n);
    free(x), free(y), free(dx), free(want), free(keep);
}

struct fd_ctx {
    int64_t n;
    float p;
    float *x, *g, *out;
};

static double fd_loss(void *v) {
    struct fd_ctx *c = v;
    ref_dropout_forward(c->out, c->x, c->n, c->p, g_seed, 3, ACT_F32);
    double s = 0;
    for (int64_t j = 0; j < c->n; j++) s += (double)c->g[j] * c->out[j];
    return s;
}

static void test_gradients(int64_t n, float p) {
    struct rng r;
    rng_init(&r, g_seed * 5 + (uint64_t)n);
    struct fd_ctx c = {n, p, malloc(sizeof(float) * n), malloc(sizeof(float) * n), malloc(sizeof(float) * n)};
    rng_fill_normal(&r, c.x, n, 0.0, 1.0);
    rng_fill_normal(&r, c.g, n, 0.0, 1.0);
    float *dx = malloc(sizeof(float) * n);
    ref_dropout_backward(dx, c.g, n, p, g_seed, 3, ACT_F32);
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld p=%.2f", (long long)n, (double)p);
    struct cmp_case cc = {"dropout_backward", "dx", shape, "f32", g_seed};
    gradcheck(&cc, fd_loss, &c, c.x, dx, n, 64, g_seed, 1e-3, 1e-4);
    free(c.x), free(c.g), free(c.out), free(dx);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261124);
    test_known_answers();
    test_mapping();
    test_hand_case();
    test_identity_and_fraction();
    test_forward_backward(1, 0.5f);
    test_forward_backward(1027, 0.1f);
    test_forward_backward(4099, 0.7f);
    test_gradients(33, 0.3f);
    test_gradients(101, 0.05f);
    return test_finish("dropout_test");
}
