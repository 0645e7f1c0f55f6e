/* adamw8bit_test.c — ref/adamw8bit against an independent double-precision AdamW in bitsandbytes'
 * order, and the rules of its 8-bit states: the 32-bit switch at 4096 elements, weight decay after
 * the step (CUDA) or before it (CPU backend), NaN/Inf gradients, the block absmax, the sign of m
 * surviving quantization, and the quantization error of the stored moments.
 * Byte-level agreement with bitsandbytes is tests/golden/formats_golden_test.c.
 *
 *   bazel test //tests/unit:adamw8bit_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/adamw8bit.h"
#include "ref/quant8.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

/* Double-precision bnb AdamW, no quantization: decay after (cuda) or before (cpu). */
static void ref_double(double *p, double *m, double *v, const float *g, int64_t n, int t,
                       const struct adamw8bit_hparams *h, int decay_before) {
    /* The CUDA kernels receive the hyperparameters as float; the CPU backend keeps Python's doubles. */
    double b1 = decay_before ? h->hp.beta1 : (float)h->hp.beta1, b2 = decay_before ? h->hp.beta2 : (float)h->hp.beta2;
    double c1 = 1 - pow(b1, t), c2 = sqrt(1 - pow(b2, t));
    for (int64_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
        if (decay_before) p[i] *= 1 - h->hp.lr * h->hp.weight_decay;
        p[i] += -h->hp.lr * c2 / c1 * m[i] / (sqrt(v[i]) + h->hp.eps * c2);
        if (!decay_before) p[i] *= 1 - h->hp.lr * h->hp.weight_decay;
    }
}

/* The 32-bit path against double: fp32 rounding only. */
static void test_32bit(int variant) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)variant);
    const int64_t n = 1000;
    struct adamw8bit_hparams h = adamw8bit_defaults();
    h.variant = (enum adamw8bit_variant)variant;
    h.hp.weight_decay = 0.1;
    h.hp.lr = 1e-2;
    struct adamw8bit_state s;
    adamw8bit_init(&s, n, h.min_8bit_size);
    EXPECT(!s.is_8bit, "n=1000 < 4096 keeps 32-bit states");
    float *p = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n), *pd_f = malloc(sizeof(float) * n);
    double *pd = malloc(sizeof(double) * n), *md = calloc(n, sizeof(double)), *vd = calloc(n, sizeof(double));
    rng_fill_normal(&r, p, n, 0, 0.5);
    for (int64_t i = 0; i < n; i++) pd[i] = p[i];
    for (int t = 1; t <= 5; t++) {
        rng_fill_normal(&r, g, n, 0, 0.1 * t);
        adamw8bit_step(&s, p, g, &h);
        ref_double(pd, md, vd, g, n, t, &h, variant == ADAMW8BIT_BNB_CPU);
    }
    for (int64_t i = 0; i < n; i++) pd_f[i] = (float)pd[i];
    char what[32];
    snprintf(what, sizeof what, "%s 32-bit, 5 steps", variant ? "cpu" : "cuda");
    struct cmp_case c = {"adamw8bit_step", "p vs double", what, "f32", g_seed};
    /* A step changes p by ~lr; its relative error is ~1e-6 (fp32 division, sqrt, powf), p keeps
     * its own rounding per step: bound 64 ulp of |p| + lr·1e-5 per step. */
    cmp_elementwise(&c, p, pd_f, n, FLT_EPSILON, 64.0, 5 * h.hp.lr * 1e-5 / FLT_EPSILON / 64.0, NULL);
    adamw8bit_free(&s);
    free(p), free(g), free(pd_f), free(pd), free(md), free(vd);
}

/* Decay order and NaN/Inf on single, hand-checked elements (32-bit path, n = 3). */
static void test_rules(void) {
    struct adamw8bit_hparams h = adamw8bit_defaults();
    h.hp.lr = 0.5;
    h.hp.weight_decay = 0.5;
    struct adamw8bit_state s;
    adamw8bit_init(&s, 3, h.min_8bit_size);
    float p[3] = {2.0f, 2.0f, 2.0f}, g[3] = {1.0f, NAN, 0.0f};
    adamw8bit_step(&s, p, g, &h);
    /* Element 0, step 1: m = 0.1, v = 0.001, c1 = 0.1, c2 = sqrt(0.001): the Adam step is
     * −lr·c2/c1 · m/(sqrt(v) + eps·c2) ≈ −0.5; decay after: (2 − 0.5)·(1 − 0.25) = 1.125. */
    EXPECT(fabsf(p[0] - 1.125f) < 1e-5f, "decay after the step (CUDA order): p = %.9g, expected 1.125", (double)p[0]);
    EXPECT(isnan(p[1]), "32-bit path: a NaN gradient propagates (no guard there), got %g", (double)p[1]);
    EXPECT(p[2] == 2.0f * (1.0f - 0.25f), "zero gradient: only the decay, %.9g", (double)p[2]);
    adamw8bit_free(&s);
    h.variant = ADAMW8BIT_BNB_CPU;
    adamw8bit_init(&s, 3, h.min_8bit_size);
    float q[3] = {2.0f, 2.0f, 2.0f};
    adamw8bit_step(&s, q, g, &h);
    EXPECT(fabsf(q[0] - 1.0f) < 1e-5f, "CPU backend: decay before the step: (2·0.75) − 0.5 = 1, got %.9g", (double)q[0]);
    adamw8bit_free(&s);

    adamw8bit_init(&s, 4095, h.min_8bit_size);
    EXPECT(!s.is_8bit, "4095 elements: 32-bit");
    adamw8bit_free(&s);
    adamw8bit_init(&s, 4096, h.min_8bit_size);
    EXPECT(s.is_8bit, "4096 elements: 8-bit");
    adamw8bit_free(&s);
}

/* The 8-bit path: against double with the stored moments' quantization error; NaN/Inf guard;
 * block absmax; signs of m preserved; the first step equal to the 32-bit path's. */
static void test_8bit(int64_t n) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)n);
    struct adamw8bit_hparams h = adamw8bit_defaults();
    struct adamw8bit_state s, s32;
    adamw8bit_init(&s, n, h.min_8bit_size);
    adamw8bit_init(&s32, n, 1 << 30);
    EXPECT(s.is_8bit && !s32.is_8bit, "n=%lld: 8-bit", (long long)n);
    float *p = malloc(sizeof(float) * n), *p32 = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
    float *m = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n), *m0 = malloc(sizeof(float) * n),
          *v0 = malloc(sizeof(float) * n);
    rng_fill_normal(&r, p, n, 0, 0.1);
    memcpy(p32, p, sizeof(float) * n);
    rng_fill_normal(&r, g, n, 0, 0.01);
    adamw8bit_step(&s, p, g, &h);
    adamw8bit_step(&s32, p32, g, &h);
    char shape[32];
    snprintf(shape, sizeof shape, "n=%lld", (long long)n);
    /* Step 1 uses the unquantized new moments (v's products are grouped differently: 1 rounding). */
    struct cmp_case c1 = {"adamw8bit_step", "8-bit step 1 vs 32-bit", shape, "f32", g_seed};
    cmp_elementwise(&c1, p, p32, n, FLT_EPSILON, 4.0, cmp_rms(p, n), NULL);
    for (int t = 2; t <= 4; t++) {
        adamw8bit_moments(&s, m0, v0);
        rng_fill_normal(&r, g, n, 0, 0.01 * t);
        int64_t bad_idx = rng_int(&r, (int)n), inf_idx = rng_int(&r, (int)n);
        g[bad_idx] = NAN;
        if (inf_idx != bad_idx) g[inf_idx] = -INFINITY;
        float pb = p[bad_idx], pi = p[inf_idx];
        adamw8bit_step(&s, p, g, &h);
        adamw8bit_moments(&s, m, v);
        EXPECT(p[bad_idx] == pb && p[inf_idx] == pi, "step %d: NaN/Inf gradient leaves p unchanged", t);
        EXPECT(m[bad_idx] == 0 && v[bad_idx] == 0 && m[inf_idx] == 0 && v[inf_idx] == 0,
               "step %d: NaN/Inf gradient zeroes m and v (%g %g)", t, (double)m[bad_idx], (double)v[bad_idx]);
        /* The new moments from the old stored ones, in double; block maxima and quantization error. */
        float mapgap1 = 0, mapgap2 = 0;
        for (int k = 0; k < 255; k++) {
            mapgap1 = fmaxf(mapgap1, s.map1[k + 1] - s.map1[k]);
            mapgap2 = fmaxf(mapgap2, s.map2[k + 1] - s.map2[k]);
        }
        int64_t bad = 0, signbad = 0;
        for (int64_t b0 = 0; b0 < n; b0 += 256) {
            int64_t b1 = b0 + 256 < n ? b0 + 256 : n;
            double am1 = 0, am2 = 0;
            double *me = malloc(sizeof(double) * 256), *ve = malloc(sizeof(double) * 256);
            for (int64_t i = b0; i < b1; i++) {
                int ok = isfinite(g[i]);
                double fb1 = (float)h.hp.beta1, fb2 = (float)h.hp.beta2; /* the kernel's float parameters */
                me[i - b0] = ok ? fb1 * m0[i] + (1 - fb1) * g[i] : 0;
                ve[i - b0] = ok ? fb2 * v0[i] + (1 - fb2) * (double)g[i] * g[i] : 0;
                am1 = fmax(am1, fabs(me[i - b0]));
                am2 = fmax(am2, fabs(ve[i - b0]));
            }
            if (fabs(s.absmax1[b0 / 256] - am1) > 1e-5 * am1 || fabs(s.absmax2[b0 / 256] - am2) > 1e-5 * am2) {
                if (bad < 3)
                    printf("  block %lld: absmax1 %.9g vs %.9g, absmax2 %.9g vs %.9g\n", (long long)(b0 / 256),
                           (double)s.absmax1[b0 / 256], am1, (double)s.absmax2[b0 / 256], am2);
                bad++;
            }
            for (int64_t i = b0; i < b1; i++) {
                /* m: a full gap — the block's most negative m normalizes to −1, which the signed
                 * map lacks (its end is −0.99296875), and the sign nudge moves one code. */
                bad += fabs(m[i] - me[i - b0]) > (mapgap1 + 1e-5) * am1 + 1e-12;
                bad += fabs(v[i] - ve[i - b0]) > (mapgap2 / 2 + 1e-5) * am2 + 1e-12;
                if (fabs(me[i - b0]) > 1e-6 * am1) signbad += (me[i - b0] > 0) != (s.map1[s.q1[i]] > 0);
            }
            free(me), free(ve);
        }
        EXPECT(bad == 0, "step %d: %lld absmax or stored moments beyond their bound", t, (long long)bad);
        EXPECT(signbad == 0, "step %d: %lld stored m lost their sign", t, (long long)signbad);
    }
    adamw8bit_free(&s);
    adamw8bit_free(&s32);
    free(p), free(p32), free(g), free(m), free(v), free(m0), free(v0);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    test_32bit(ADAMW8BIT_BNB_CUDA);
    test_32bit(ADAMW8BIT_BNB_CPU);
    test_rules();
    test_8bit(4096);
    test_8bit(5000); /* a short last block */
    return test_finish("adamw8bit_test");
}
