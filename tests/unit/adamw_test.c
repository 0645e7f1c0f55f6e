/* adamw_test.c — ref/adamw against mathematics: two hand-computed AdamW steps, the textbook
 * formula over many steps, weight decay off, and clip_grad_norm_ (clipping, no clipping, zero
 * gradients, missing gradients, NaN propagation).
 *
 *   bazel test //tests/unit:adamw_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/adamw.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

static int close_rel(double got, double ref, double k) { return fabs(got - ref) <= k * FLT_EPSILON * fabs(ref); }

/* lr = 0.1, β = (0.9, 0.999), eps = 1e-8, wd = 0.1, p0 = 1.
 * Step 1, g = 0.5: p = 0.99; m = 0.05; v = 0.001·0.25 = 0.00025; m̂ = 0.5, v̂ = 0.25 →
 *   p = 0.99 − 0.1·0.5/(0.5 + 1e-8) = 0.89 (to 1e-8).
 * Step 2, g = −0.25: p = 0.89·0.99 = 0.8811; m = 0.05 + 0.1·(−0.3) = 0.02;
 *   v = 0.00025·0.999 + 0.001·0.0625 = 0.00031225; bc1 = 0.19, bc2 = 0.001999;
 *   p = 0.8811 − 0.1·(0.02/0.19)/(√(0.00031225/0.001999) + 1e-8). */
static void test_hand_steps(void) {
    struct adamw_hparams hp = {0.1, 0.9, 0.999, 1e-8, 0.1};
    float p = 1.0f, m = 0.0f, v = 0.0f, g = 0.5f;
    ref_adamw_step(&p, &m, &v, &g, 1, 1, &hp);
    double p1 = 0.99 - 0.1 * 0.5 / (0.5 + 1e-8);
    EXPECT(close_rel(m, 0.05, 2), "step 1 m %.9g expected 0.05", (double)m);
    EXPECT(close_rel(v, 0.00025, 2), "step 1 v %.9g expected 0.00025", (double)v);
    EXPECT(close_rel(p, p1, 4), "step 1 p %.9g expected %.9g", (double)p, p1);
    g = -0.25f;
    ref_adamw_step(&p, &m, &v, &g, 1, 2, &hp);
    double p2 = p1 * 0.99 - 0.1 * (0.02 / 0.19) / (sqrt(0.00031225 / 0.001999) + 1e-8);
    EXPECT(close_rel(m, 0.02, 8), "step 2 m %.9g expected 0.02", (double)m);
    EXPECT(close_rel(v, 0.00031225, 4), "step 2 v %.9g expected 0.00031225", (double)v);
    EXPECT(close_rel(p, p2, 8), "step 2 p %.9g expected %.9g", (double)p, p2);
    EXPECT(fabs(p2 - 0.854466) < 1e-6, "hand value of step 2: %.9g", p2);
}

/* The textbook AdamW (Loshchilov & Hutter, torch's documented algorithm) in double:
 *   p ← p(1 − lr·λ); m ← β1 m + (1−β1) g; v ← β2 v + (1−β2) g²; p ← p − lr·m̂/(√v̂ + eps).
 * The fp32 reference stays within a relative drift that grows at most linearly with the step
 * count: each step rounds ~10 times, k = 16 per step. */
static void test_textbook(int n, int steps, double wd) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)n);
    struct adamw_hparams hp = {2e-3, 0.9, 0.95, 1e-8, wd};
    float *p = malloc(sizeof(float) * n), *m = calloc((size_t)n, sizeof(float)), *v = calloc((size_t)n, sizeof(float));
    float *g = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
    double *pd = malloc(sizeof(double) * n), *md = calloc((size_t)n, sizeof(double)), *vd = calloc((size_t)n, sizeof(double));
    rng_fill_normal(&r, p, n, 0, 1);
    for (int j = 0; j < n; j++) pd[j] = p[j];
    for (int t = 1; t <= steps; t++) {
        rng_fill_normal(&r, g, n, 0, 1e-2);
        ref_adamw_step(p, m, v, g, n, t, &hp);
        double bc1 = 1 - pow(hp.beta1, t), bc2 = 1 - pow(hp.beta2, t);
        for (int j = 0; j < n; j++) {
            pd[j] *= 1 - hp.lr * hp.weight_decay;
            md[j] = hp.beta1 * md[j] + (1 - hp.beta1) * g[j];
            vd[j] = hp.beta2 * vd[j] + (1 - hp.beta2) * (double)g[j] * g[j];
            pd[j] -= hp.lr * (md[j] / bc1) / (sqrt(vd[j] / bc2) + hp.eps);
        }
    }
    for (int j = 0; j < n; j++) got[j] = p[j], ref[j] = (float)pd[j];
    char shape[64];
    snprintf(shape, sizeof shape, "n=%d steps=%d wd=%g", n, steps, wd);
    struct cmp_case c = {"adamw_step", "param vs textbook", shape, "f32", g_seed};
    /* The update is lr-sized: floor = lr·steps, the largest total movement. */
    cmp_elementwise(&c, got, ref, n, FLT_EPSILON, 16.0 * steps, hp.lr * steps, NULL);
    for (int j = 0; j < n; j++) got[j] = m[j], ref[j] = (float)md[j];
    c.what = "m vs textbook";
    cmp_elementwise(&c, got, ref, n, FLT_EPSILON, 16.0 * steps, 1e-2, NULL);
    for (int j = 0; j < n; j++) got[j] = v[j], ref[j] = (float)vd[j];
    c.what = "v vs textbook";
    cmp_elementwise(&c, got, ref, n, FLT_EPSILON, 16.0 * steps, 1e-4, NULL);
    free(p), free(m), free(v), free(g), free(got), free(ref), free(pd), free(md), free(vd);
}

/* wd = 0 skips the decay: with g = 0 and zero moments p stays bit-identical (m = v = 0 and
 * the update 0/(0 + eps) = 0). With wd > 0 and g = 0, p decays by exactly f32(1 − lr·wd). */
static void test_zero_gradient(void) {
    struct adamw_hparams hp = {1e-2, 0.9, 0.999, 1e-8, 0.0};
    float p[3] = {1.5f, -2.0f, 0.25f}, p0[3], m[3] = {0}, v[3] = {0}, g[3] = {0};
    memcpy(p0, p, sizeof p);
    ref_adamw_step(p, m, v, g, 3, 1, &hp);
    struct cmp_case c = {"adamw_step", "wd = 0, g = 0 leaves p", "n=3", "f32", g_seed};
    cmp_exact_f32(&c, p, p0, 3);
    hp.weight_decay = 0.5;
    ref_adamw_step(p, m, v, g, 3, 2, &hp);
    float decay = (float)(1.0 - 1e-2 * 0.5);
    for (int j = 0; j < 3; j++) p0[j] = p0[j] * decay;
    c.what = "g = 0 decays p by f32(1 - lr*wd)";
    cmp_exact_f32(&c, p, p0, 3);
}

static void test_clip(void) {
    /* g0 = [3, 4] (norm 5), g1 = [12] (norm 12): total 13. */
    float g0[2] = {3, 4}, g1[1] = {12};
    float *gs[3] = {g0, NULL, g1};
    int64_t numel[3] = {2, 7, 1};
    float total = ref_clip_grad_norm(gs, numel, 3, 1.3);
    EXPECT(total == 13.0f, "total norm %.9g expected 13 (missing gradient skipped)", (double)total);
    float coef = 1.3f / (13.0f + 1e-6f);
    EXPECT(fabs(coef - 0.1) < 1e-7, "coefficient %.9g", (double)coef);
    const float g0_ex[2] = {3 * coef, 4 * coef}, g1_ex[1] = {12 * coef};
    struct cmp_case c = {"clip_grad_norm", "clipped g0", "[2],[1]", "f32", g_seed};
    cmp_exact_f32(&c, g0, g0_ex, 2);
    c.what = "clipped g1";
    cmp_exact_f32(&c, g1, g1_ex, 1);

    /* Below the threshold the coefficient clamps to 1: the gradients are unchanged bit for bit. */
    float h0[2] = {0.3f, -0.4f}, h0_ex[2] = {0.3f, -0.4f};
    float *hs[1] = {h0};
    int64_t hn[1] = {2};
    total = ref_clip_grad_norm(hs, hn, 1, 100.0);
    EXPECT(close_rel(total, 0.5, 1), "total %.9g expected 0.5", (double)total);
    c.what = "unclipped";
    cmp_exact_f32(&c, h0, h0_ex, 2);
    EXPECT(ref_clip_coef(0.5f, 100.0) == 1.0f, "coefficient clamps to 1");

    /* Zero gradients: total 0, coefficient max_norm/1e-6 clamped to 1, nothing becomes NaN. */
    float z[4] = {0, 0, 0, 0}, z_ex[4] = {0, 0, 0, 0};
    float *zs[1] = {z};
    int64_t zn[1] = {4};
    total = ref_clip_grad_norm(zs, zn, 1, 1.0);
    EXPECT(total == 0.0f, "total of zero gradients %.9g", (double)total);
    c.what = "zero gradients stay zero";
    cmp_exact_f32(&c, z, z_ex, 4);

    /* A NaN gradient propagates into the norm and every gradient (error_if_nonfinite=False). */
    float q0[2] = {1, NAN}, q1[2] = {2, 3};
    float *qs[2] = {q0, q1};
    int64_t qn[2] = {2, 2};
    total = ref_clip_grad_norm(qs, qn, 2, 1.0);
    EXPECT(isnan(total), "NaN total expected, got %g", (double)total);
    EXPECT(isnan(q0[0]) && isnan(q1[0]) && isnan(q1[1]), "NaN propagates into every gradient");

    /* Random tensors: total equals the norm over all elements (within the two fp32 roundings of the
     * per-tensor norms and the final one), and the clipped norm is max_norm. */
    struct rng r;
    rng_init(&r, g_seed);
    int sizes[4] = {1, 33, 260, 7};
    float *t[4];
    int64_t tn[4];
    double all = 0;
    for (int k = 0; k < 4; k++) {
        t[k] = malloc(sizeof(float) * sizes[k]);
        tn[k] = sizes[k];
        rng_fill_normal(&r, t[k], sizes[k], 0, 1);
        for (int j = 0; j < sizes[k]; j++) all += (double)t[k][j] * t[k][j];
    }
    total = ref_clip_grad_norm(t, tn, 4, 0.5);
    EXPECT(close_rel(total, sqrt(all), 2), "total %.9g expected %.9g", (double)total, sqrt(all));
    float after = ref_grad_total_norm((const float *const *)t, tn, 4);
    EXPECT(close_rel(after, 0.5, 8), "norm after clipping %.9g expected 0.5", (double)after);
    for (int k = 0; k < 4; k++) free(t[k]);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261126);
    test_hand_steps();
    test_textbook(1, 3, 0.1);
    test_textbook(257, 10, 0.1);
    test_textbook(1000, 50, 0.0);
    test_zero_gradient();
    test_clip();
    return test_finish("adamw_test");
}
