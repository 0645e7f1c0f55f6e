/* rope_test.c — ref/rope against mathematics: the D = 2 hand case, inverse frequencies against
 * the closed form, the llama3 bands of NUMERICS §7.2, norm preservation, the relative-position
 * property, backward ∘ forward = identity, packed positions, bf16 rounding points, finite
 * differences on GQA shapes.
 *
 *   bazel test //tests/unit:rope_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/rope.h"
#include "tests/common/compare.h"
#include "tests/common/gradcheck.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

static const struct rope_scaling k_llama32 = {ROPE_SCALING_LLAMA3, 32.0f, 1.0f, 4.0f, 8192};

/* D = 2: inv_freq = [1], so position p rotates (x1, x2) by p radians: (1, 0) → (cos p, sin p). */
static void test_hand_case(void) {
    struct ref_rope_cache c;
    ref_rope_cache_build(&c, 8, 2, 10000.0f, NULL);
    EXPECT(c.inv_freq[0] == 1.0f, "inv_freq[0] = %.9g, expected 1", (double)c.inv_freq[0]);
    const int32_t pos[3] = {0, 1, 7};
    float q[6] = {1, 0, 1, 0, 0, 2};
    ref_rope_forward(q, NULL, pos, &c, 1, 3, 1, 1, 2, ACT_F32);
    const double want[6] = {1, 0, cos(1.0), sin(1.0), -2 * sin(7.0), 2 * cos(7.0)};
    for (int i = 0; i < 6; i++)
        EXPECT(fabs(q[i] - want[i]) <= 2 * FLT_EPSILON * (fabs(want[i]) + 1e-3), "q[%d] %.9g expected %.9g", i,
               (double)q[i], want[i]);
    ref_rope_cache_free(&c);
}

/* inv_freq[i] = θ^(−2i/D) to a few fp32 ulps (fp32 exponent, pow, reciprocal); llama3 bands. */
static void test_frequencies(int D) {
    float f0[64], f3[64];
    ref_rope_inv_freq(f0, D, 500000.0f, NULL);
    ref_rope_inv_freq(f3, D, 500000.0f, &k_llama32);
    int bad = 0;
    for (int i = 0; i < D / 2; i++) {
        double want = pow(500000.0, -2.0 * i / D);
        /* the fp32 exponent 2i/D carries ≤ ε/2 relative error, multiplied by ln θ ≈ 13 in the pow */
        bad += fabs(f0[i] - want) > 16 * FLT_EPSILON * want;
    }
    EXPECT(bad == 0, "D=%d: %d default inverse frequencies off the closed form", D, bad);
    /* NUMERICS §7.2 (theta 5e5, orig 8192, low 1, high 4): D=64 pairs 0–14 kept, 15–17 smoothed,
     * 18–31 divided; D=128 pairs 0–28 kept, 29–34 smoothed, 35–63 divided. */
    int kept_end = D == 64 ? 15 : 29, smooth_end = D == 64 ? 18 : 35;
    for (int i = 0; i < D / 2; i++) {
        if (i < kept_end)
            EXPECT(f3[i] == f0[i], "D=%d pair %d should be unchanged: %.9g vs %.9g", D, i, (double)f3[i],
                   (double)f0[i]);
        else if (i < smooth_end)
            EXPECT(f3[i] < f0[i] && f3[i] > f0[i] / 32.0f, "D=%d pair %d should be smoothed: %.9g of %.9g", D, i,
                   (double)f3[i], (double)f0[i]);
        else
            EXPECT(f3[i] == f0[i] / 32.0f, "D=%d pair %d should be divided by 32: %.9g vs %.9g", D, i,
                   (double)f3[i], (double)f0[i]);
    }
}

static void fill(struct rng *r, float *x, int64_t n, enum act_dtype act) {
    rng_fill_normal(r, x, n, 0.0, 1.0);
    if (act == ACT_BF16)
        for (int64_t j = 0; j < n; j++) x[j] = bf16_round(x[j]);
}

/* Norms of every (i, i + D/2) pair are preserved; backward(forward(x)) = x; packed positions. */
static void test_properties(int B, int T, int H, int KVH, int D, const struct rope_scaling *sc) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)(B * 1000 + T * 100 + H * 10 + D));
    const int N = B * T, max_pos = 4096;
    struct ref_rope_cache c;
    ref_rope_cache_build(&c, max_pos, D, 500000.0f, sc);
    int64_t nq = (int64_t)N * H * D, nk = (int64_t)N * KVH * D;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk);
    float *q0 = malloc(sizeof(float) * nq), *k0 = malloc(sizeof(float) * nk);
    int32_t *pos = malloc(sizeof(int32_t) * N);
    for (int n = 0; n < N; n++) pos[n] = rng_int(&r, max_pos);
    fill(&r, q0, nq, ACT_F32);
    fill(&r, k0, nk, ACT_F32);
    memcpy(q, q0, sizeof(float) * nq), memcpy(k, k0, sizeof(float) * nk);
    ref_rope_forward(q, k, pos, &c, B, T, H, KVH, D, ACT_F32);
    int bad = 0;
    for (int64_t v = 0; v < nq / D; v++)
        for (int i = 0; i < D / 2; i++) {
            const float *a = q0 + v * D, *b = q + v * D;
            double n0 = (double)a[i] * a[i] + (double)a[i + D / 2] * a[i + D / 2];
            double n1 = (double)b[i] * b[i] + (double)b[i + D / 2] * b[i + D / 2];
            /* cos²+sin² = 1 within 2 fp32 roundings of the tables, plus 2 of each product and sum */
            bad += fabs(n1 - n0) > 12 * FLT_EPSILON * n0 + 1e-30;
        }
    EXPECT(bad == 0, "%d pairs changed their norm (B=%d T=%d H=%d D=%d)", bad, B, T, H, D);
    ref_rope_backward(q, k, pos, &c, B, T, H, KVH, D, ACT_F32);
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d KVH=%d D=%d", B, T, H, KVH, D);
    /* backward ∘ forward: R(−θ)R(θ) = I up to ~4 fp32 roundings per element; floor: the rms of x. */
    struct cmp_case cq = {"rope backward∘forward", "q", shape, "f32", g_seed};
    struct cmp_case ck = {"rope backward∘forward", "k", shape, "f32", g_seed};
    cmp_elementwise(&cq, q, q0, nq, FLT_EPSILON, 8.0, 1.0, NULL);
    cmp_elementwise(&ck, k, k0, nk, FLT_EPSILON, 8.0, 1.0, NULL);

    /* A token's result depends only on its own position, not on where it sits in the batch:
     * rotate one head vector at a single-token batch with the same position. Also q-only mode. */
    for (int t = 0; t < 5 && t < N; t++) {
        int n = rng_int(&r, N);
        float one[128 * 8];
        memcpy(one, q0 + (int64_t)n * H * D, sizeof(float) * H * D);
        ref_rope_forward(one, NULL, &pos[n], &c, 1, 1, H, KVH, D, ACT_F32);
        memcpy(q, q0, sizeof(float) * nq);
        ref_rope_forward(q, NULL, pos, &c, B, T, H, KVH, D, ACT_F32);
        EXPECT(memcmp(one, q + (int64_t)n * H * D, sizeof(float) * H * D) == 0,
               "token %d (position %d) differs from the same vector rotated alone", n, pos[n]);
    }

    /* bf16: every result is bf16; within 2 roundings of the f32 rotation of the same inputs
     * (the products and the sum; cos/sin rounded to bf16 add one more: k = 3). */
    fill(&r, q0, nq, ACT_BF16);
    memcpy(q, q0, sizeof(float) * nq);
    float *qf = malloc(sizeof(float) * nq);
    memcpy(qf, q0, sizeof(float) * nq);
    ref_rope_forward(q, NULL, pos, &c, B, T, H, KVH, D, ACT_BF16);
    ref_rope_forward(qf, NULL, pos, &c, B, T, H, KVH, D, ACT_F32);
    int64_t not_bf16 = 0;
    for (int64_t j = 0; j < nq; j++) not_bf16 += bf16_round(q[j]) != q[j];
    EXPECT(not_bf16 == 0, "%lld bf16-mode results are not bf16 values", (long long)not_bf16);
    /* Elements can cancel (x1c − x2s): the floor is the rms of the inputs (1). */
    struct cmp_case cb = {"rope_forward", "bf16 vs f32 (tier b, k=3)", shape, "bf16", g_seed};
    cmp_elementwise(&cb, q, qf, nq, BF16_EPS, 3.0, 1.0, NULL);
    free(q), free(k), free(q0), free(k0), free(qf), free(pos);
    ref_rope_cache_free(&c);
}

/* ⟨R(p)a, R(p')b⟩ depends only on p − p' (the point of RoPE): shift both positions by s. */
static void test_relative(int D) {
    struct rng r;
    rng_init(&r, g_seed + 99 + (uint64_t)D);
    struct ref_rope_cache c;
    ref_rope_cache_build(&c, 2048, D, 10000.0f, NULL);
    float a0[128], b0[128], a[128], b[128];
    fill(&r, a0, D, ACT_F32);
    fill(&r, b0, D, ACT_F32);
    double dots[4];
    const int shifts[4] = {0, 1, 100, 1000};
    for (int s = 0; s < 4; s++) {
        int32_t pa = 37 + shifts[s], pb = 5 + shifts[s];
        memcpy(a, a0, sizeof(float) * D), memcpy(b, b0, sizeof(float) * D);
        ref_rope_forward(a, NULL, &pa, &c, 1, 1, 1, 1, D, ACT_F32);
        ref_rope_forward(b, NULL, &pb, &c, 1, 1, 1, 1, D, ACT_F32);
        dots[s] = 0;
        for (int i = 0; i < D; i++) dots[s] += (double)a[i] * b[i];
    }
    /* fp32 angles p·inv_freq carry ~ε·p·inv_freq absolute error: ≤ 1000·6e-8 rad at p ≈ 1000. */
    double norm = 0;
    for (int i = 0; i < D; i++) norm += fabs((double)a0[i] * b0[i]) + fabs((double)a0[i]) * fabs((double)b0[i]);
    for (int s = 1; s < 4; s++)
        EXPECT(fabs(dots[s] - dots[0]) <= 2e-4 * norm, "D=%d shift %d: dot %.9g vs %.9g", D, shifts[s], dots[s],
               dots[0]);
    ref_rope_cache_free(&c);
}

struct fd_ctx {
    int B, T, H, KVH, D;
    const int32_t *pos;
    const struct ref_rope_cache *c;
    float *q, *k, *gq, *gk, *tq, *tk;
};

static double fd_loss(void *p) {
    struct fd_ctx *c = p;
    int64_t nq = (int64_t)c->B * c->T * c->H * c->D, nk = (int64_t)c->B * c->T * c->KVH * c->D;
    memcpy(c->tq, c->q, sizeof(float) * nq), memcpy(c->tk, c->k, sizeof(float) * nk);
    ref_rope_forward(c->tq, c->tk, c->pos, c->c, c->B, c->T, c->H, c->KVH, c->D, ACT_F32);
    double s = 0;
    for (int64_t j = 0; j < nq; j++) s += (double)c->gq[j] * c->tq[j];
    for (int64_t j = 0; j < nk; j++) s += (double)c->gk[j] * c->tk[j];
    return s;
}

static void test_gradients(int B, int T, int H, int KVH, int D) {
    struct rng r;
    rng_init(&r, g_seed * 7 + (uint64_t)(B + T + H + KVH + D));
    struct ref_rope_cache cache;
    ref_rope_cache_build(&cache, 300, D, 10000.0f, &k_llama32);
    int N = B * T;
    int64_t nq = (int64_t)N * H * D, nk = (int64_t)N * KVH * D;
    int32_t *pos = malloc(sizeof(int32_t) * N);
    for (int n = 0; n < N; n++) pos[n] = (n % T) % 7 == 6 ? 0 : rng_int(&r, 300); /* restarts, as packing */
    struct fd_ctx c = {B, T, H, KVH, D, pos, &cache, malloc(sizeof(float) * nq), malloc(sizeof(float) * nk),
                       malloc(sizeof(float) * nq), malloc(sizeof(float) * nk), malloc(sizeof(float) * nq),
                       malloc(sizeof(float) * nk)};
    fill(&r, c.q, nq, ACT_F32);
    fill(&r, c.k, nk, ACT_F32);
    fill(&r, c.gq, nq, ACT_F32);
    fill(&r, c.gk, nk, ACT_F32);
    float *dq = malloc(sizeof(float) * nq), *dk = malloc(sizeof(float) * nk);
    memcpy(dq, c.gq, sizeof(float) * nq), memcpy(dk, c.gk, sizeof(float) * nk);
    ref_rope_backward(dq, dk, pos, &cache, B, T, H, KVH, D, ACT_F32);
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d KVH=%d D=%d", B, T, H, KVH, D);
    struct cmp_case cq = {"rope_backward", "dq", shape, "f32", g_seed};
    struct cmp_case ck = {"rope_backward", "dk", shape, "f32", g_seed};
    gradcheck(&cq, fd_loss, &c, c.q, dq, nq, 64, g_seed, 1e-3, 1e-3);
    gradcheck(&ck, fd_loss, &c, c.k, dk, nk, 64, g_seed, 1e-3, 1e-3);
    free(pos), free(c.q), free(c.k), free(c.gq), free(c.gk), free(c.tq), free(c.tk), free(dq), free(dk);
    ref_rope_cache_free(&cache);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261126);
    test_hand_case();
    test_frequencies(64);
    test_frequencies(128);
    test_properties(2, 5, 4, 4, 64, NULL);
    test_properties(1, 7, 6, 2, 128, &k_llama32);
    test_properties(3, 3, 3, 1, 6, &k_llama32);
    test_relative(64);
    test_relative(128);
    test_gradients(1, 3, 2, 2, 4);
    test_gradients(2, 5, 6, 2, 10);
    test_gradients(1, 9, 4, 1, 64);
    return test_finish("rope_test");
}
