/* swiglu_test.c — ref/swiglu against mathematics: hand values, the fused [gate | up] layout equal
 * to the separate one, limits of silu, the bf16 rounding points, finite differences.
 *
 *   bazel test //tests/unit:swiglu_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/swiglu.h"
#include "tests/common/compare.h"
#include "tests/common/gradcheck.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

/* g = 0: silu = 0, silu' = 1/2. g = ln 3: σ = 3/4, silu = (3/4)·ln 3, silu' = 3/4·(1 + ln3/4).
 * g = ±40: silu(40) = 40 to fp32, silu(−40) ≈ −40·e^−40 (tiny), silu'(40) = 1. */
static void test_hand_case(void) {
    const float g[4] = {0.0f, (float)log(3.0), 40.0f, -40.0f};
    const float u[4] = {5.0f, 2.0f, -1.5f, 3.0f};
    const float dy[4] = {1.0f, 0.5f, 2.0f, 1.0f};
    float out[4], dg[4], du[4];
    ref_swiglu_forward(out, g, u, 1, 4, 4, ACT_F32);
    ref_swiglu_backward(dg, du, dy, g, u, 1, 4, 4, ACT_F32);
    double l3 = log(3.0);
    const double want_out[4] = {0.0, 0.75 * l3 * 2.0, 40.0 * -1.5, -40.0 * exp(-40.0) * 3.0};
    const double want_du[4] = {0.0, 0.5 * 0.75 * l3, 2.0 * 40.0, -40.0 * exp(-40.0)};
    const double want_dg[4] = {1.0 * 5.0 * 0.5, 0.5 * 2.0 * 0.75 * (1.0 + l3 / 4.0), 2.0 * -1.5, 0.0};
    for (int i = 0; i < 4; i++) {
        /* g is ln 3 rounded to fp32 (relative 6e-8): allow a few fp32 ulps of relative error. */
        double tol = 4 * FLT_EPSILON * fabs(want_out[i]) + 1e-30;
        EXPECT(fabs(out[i] - want_out[i]) <= tol, "out[%d] %.9g expected %.9g", i, (double)out[i], want_out[i]);
        tol = 4 * FLT_EPSILON * fabs(want_du[i]) + 1e-30;
        EXPECT(fabs(du[i] - want_du[i]) <= tol, "dup[%d] %.9g expected %.9g", i, (double)du[i], want_du[i]);
        tol = 4 * FLT_EPSILON * fabs(want_dg[i]) + 1e-15;
        EXPECT(fabs(dg[i] - want_dg[i]) <= tol, "dgate[%d] %.9g expected %.9g", i, (double)dg[i], want_dg[i]);
    }
}

/* The fused (N, 2F) buffer gives bit-identical results to separate (N, F) arrays, also in place. */
static void test_layouts(int N, int F, enum act_dtype act) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)(N * 1000 + F) + act);
    int64_t n = (int64_t)N * F;
    float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n), *dy = malloc(sizeof(float) * n);
    float *gu = malloc(sizeof(float) * 2 * n);
    rng_fill_normal(&r, g, n, 0.0, 3.0);
    rng_fill_normal(&r, u, n, 0.0, 1.0);
    rng_fill_normal(&r, dy, n, 0.0, 1.0);
    if (act == ACT_BF16)
        for (int64_t j = 0; j < n; j++) g[j] = bf16_round(g[j]), u[j] = bf16_round(u[j]), dy[j] = bf16_round(dy[j]);
    for (int i = 0; i < N; i++) {
        memcpy(gu + (int64_t)i * 2 * F, g + (int64_t)i * F, sizeof(float) * F);
        memcpy(gu + (int64_t)i * 2 * F + F, u + (int64_t)i * F, sizeof(float) * F);
    }
    struct guarded go;
    float *o1 = guarded_alloc(&go, sizeof(float) * n);
    float *o2 = malloc(sizeof(float) * n), *dg = malloc(sizeof(float) * n), *du = malloc(sizeof(float) * n);
    poison_f32(o1, n);
    ref_swiglu_forward(o1, g, u, N, F, F, act);
    EXPECT(count_poison_f32(o1, n) == 0, "forward left elements unwritten");
    guarded_check(&go, "swiglu out");
    ref_swiglu_forward(o2, gu, gu + F, N, F, 2 * F, act);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d F=%d", N, F);
    const char *dt = act == ACT_BF16 ? "bf16" : "f32";
    struct cmp_case c1 = {"swiglu_forward", "fused vs separate", shape, dt, g_seed};
    cmp_exact_f32(&c1, o2, o1, n);
    ref_swiglu_backward(dg, du, dy, g, u, N, F, F, act);
    ref_swiglu_backward(gu, gu + F, dy, gu, gu + F, N, F, 2 * F, act); /* in place on the fused buffer */
    float *dg2 = malloc(sizeof(float) * n), *du2 = malloc(sizeof(float) * n);
    for (int i = 0; i < N; i++) {
        memcpy(dg2 + (int64_t)i * F, gu + (int64_t)i * 2 * F, sizeof(float) * F);
        memcpy(du2 + (int64_t)i * F, gu + (int64_t)i * 2 * F + F, sizeof(float) * F);
    }
    struct cmp_case c2 = {"swiglu_backward", "dgate fused in place vs separate", shape, dt, g_seed};
    struct cmp_case c3 = {"swiglu_backward", "dup fused in place vs separate", shape, dt, g_seed};
    cmp_exact_f32(&c2, dg2, dg, n);
    cmp_exact_f32(&c3, du2, du, n);

    if (act == ACT_BF16) {
        /* Every result is a bf16 value, and the bf16 path is within its roundings of the f32 one:
         * out: 2 roundings of ε_bf16 (a, then the product); dup: 2 (a, product); dgate: 2 (da,
         * product), each ≤ ε/2 relative, so k = 2 bounds every element with a factor 2 to spare.
         * The aggregate bound (k/4)·ε is an rms bound; two independent roundings have an rms near
         * 0.3·ε, but on the 21 elements of N=3 F=7 the sample rms reached 0.50·ε (seed 20261125):
         * k = 3 keeps the aggregate meaningful without failing on small samples. */
        int64_t not_bf16 = 0;
        for (int64_t j = 0; j < n; j++)
            not_bf16 += (bf16_round(o1[j]) != o1[j]) + (bf16_round(dg[j]) != dg[j]) + (bf16_round(du[j]) != du[j]);
        EXPECT(not_bf16 == 0, "%lld bf16-mode results are not bf16 values", (long long)not_bf16);
        float *f_o = malloc(sizeof(float) * n), *f_dg = malloc(sizeof(float) * n), *f_du = malloc(sizeof(float) * n);
        ref_swiglu_forward(f_o, g, u, N, F, F, ACT_F32);
        ref_swiglu_backward(f_dg, f_du, dy, g, u, N, F, F, ACT_F32);
        struct cmp_case b1 = {"swiglu_forward", "bf16 vs f32 (tier b, k=3)", shape, "bf16", g_seed};
        struct cmp_case b2 = {"swiglu_backward", "dgate bf16 vs f32 (tier b, k=3)", shape, "bf16", g_seed};
        struct cmp_case b3 = {"swiglu_backward", "dup bf16 vs f32 (tier b, k=3)", shape, "bf16", g_seed};
        cmp_elementwise(&b1, o1, f_o, n, BF16_EPS, 3.0, 0.0, NULL);
        cmp_elementwise(&b2, dg, f_dg, n, BF16_EPS, 3.0, 0.0, NULL);
        cmp_elementwise(&b3, du, f_du, n, BF16_EPS, 3.0, 0.0, NULL);
        free(f_o), free(f_dg), free(f_du);
    }
    free(g), free(u), free(dy), free(gu), free(o2), free(dg), free(du), free(dg2), free(du2);
    guarded_free(&go);
}

struct fd_ctx {
    int N, F, ld;
    float *gate, *up, *dy, *out;
};

static double fd_loss(void *p) {
    struct fd_ctx *c = p;
    ref_swiglu_forward(c->out, c->gate, c->up, c->N, c->F, c->ld, ACT_F32);
    double s = 0;
    for (int64_t j = 0; j < (int64_t)c->N * c->F; j++) s += (double)c->dy[j] * c->out[j];
    return s;
}

/* Finite differences through the fused layout (ld = 2F, with gate and up in one buffer). */
static void test_gradients(int N, int F) {
    struct rng r;
    rng_init(&r, g_seed * 13 + (uint64_t)(N * 100 + F));
    int64_t n = (int64_t)N * F;
    float *gu = malloc(sizeof(float) * 2 * n), *dgu = malloc(sizeof(float) * 2 * n);
    struct fd_ctx c = {N, F, 2 * F, gu, gu + F, malloc(sizeof(float) * n), malloc(sizeof(float) * n)};
    rng_fill_normal(&r, gu, 2 * n, 0.0, 2.0);
    rng_fill_normal(&r, c.dy, n, 0.0, 1.0);
    ref_swiglu_backward(dgu, dgu + F, c.dy, gu, gu + F, N, F, 2 * F, ACT_F32);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d F=%d fused", N, F);
    /* Both gradients at once: the parameter vector is the whole fused buffer. */
    struct cmp_case cc = {"swiglu_backward", "dgate|dup", shape, "f32", g_seed};
    gradcheck(&cc, fd_loss, &c, gu, dgu, 2 * n, 96, g_seed, 1e-3, 2e-3);
    free(gu), free(dgu), free(c.dy), free(c.out);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261125);
    test_hand_case();
    const int shapes[][2] = {{1, 1}, {3, 7}, {5, 33}, {2, 1025}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        test_layouts(shapes[s][0], shapes[s][1], ACT_F32);
        test_layouts(shapes[s][0], shapes[s][1], ACT_BF16);
        test_gradients(shapes[s][0], shapes[s][1]);
    }
    return test_finish("swiglu_test");
}
