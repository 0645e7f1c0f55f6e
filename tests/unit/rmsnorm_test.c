/* rmsnorm_test.c — ref/rmsnorm against mathematics: a hand case, properties, finite differences.
 *
 *   bazel test //tests/unit:rmsnorm_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/rmsnorm.h"
#include "tests/common/compare.h"
#include "tests/common/gradcheck.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

/* x = [3, 4], eps = 0: mean(x²) = 12.5, rstd = 1/√12.5, n = [0.6√2, 0.8√2]; w = [1, 2]. */
static void test_hand_case(void) {
    const float x[2] = {3.0f, 4.0f}, w[2] = {1.0f, 2.0f};
    float out[2], rstd[1];
    ref_rmsnorm_forward(out, rstd, x, w, 1, 2, 0.0f, ACT_F32);
    double r = 1.0 / sqrt(12.5);
    EXPECT(fabs(rstd[0] - r) <= FLT_EPSILON * r, "rstd %.9g expected %.9g", (double)rstd[0], r);
    EXPECT(fabs(out[0] - 3.0 * r) <= 2 * FLT_EPSILON * 3.0 * r, "out[0] %.9g expected %.9g", (double)out[0], 3.0 * r);
    EXPECT(fabs(out[1] - 8.0 * r) <= 2 * FLT_EPSILON * 8.0 * r, "out[1] %.9g expected %.9g", (double)out[1], 8.0 * r);

    /* Backward of loss = Σ dy·out with dy = [1, 0]: n = x·r, dn = dy·w = [1, 0],
     * dx = r·(dn − n·mean(dn·n)) = r·([1,0] − n·(n0/2)); dw = dy·n = [n0, 0]. */
    const float dy[2] = {1.0f, 0.0f};
    float dx[2], dw[2] = {0.5f, 0.25f};
    ref_rmsnorm_backward(dx, dw, dy, x, w, rstd, 1, 2, ACT_F32);
    double n0 = 3.0 * r, n1 = 4.0 * r;
    double ex0 = r * (1.0 - n0 * n0 / 2.0), ex1 = r * (0.0 - n1 * n0 / 2.0);
    EXPECT(fabs(dx[0] - ex0) <= 1e-6, "dx[0] %.9g expected %.9g", (double)dx[0], ex0);
    EXPECT(fabs(dx[1] - ex1) <= 1e-6, "dx[1] %.9g expected %.9g", (double)dx[1], ex1);
    EXPECT(fabs(dw[0] - (0.5 + n0)) <= 1e-6, "dw accumulates: dw[0] %.9g expected %.9g", (double)dw[0], 0.5 + n0);
    EXPECT(dw[1] == 0.25f, "dw[1] %.9g expected 0.25 (dy = 0 there)", (double)dw[1]);
}

/* With w = 1 and eps = 0 every output row has mean square 1; scaling x leaves out unchanged. */
static void test_properties(int N, int C) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)C);
    float *x = malloc(sizeof(float) * N * C), *x2 = malloc(sizeof(float) * N * C);
    float *out = malloc(sizeof(float) * N * C), *out2 = malloc(sizeof(float) * N * C);
    float *w = malloc(sizeof(float) * C), *rstd = malloc(sizeof(float) * N);
    rng_fill_normal(&r, x, (int64_t)N * C, 0.0, 3.0);
    for (int c = 0; c < C; c++) w[c] = 1.0f;
    ref_rmsnorm_forward(out, rstd, x, w, N, C, 0.0f, ACT_F32);
    for (int i = 0; i < N; i++) {
        double ms = 0;
        for (int c = 0; c < C; c++) ms += (double)out[i * C + c] * out[i * C + c];
        ms /= C;
        EXPECT(fabs(ms - 1.0) <= 4 * C * FLT_EPSILON, "row %d of C=%d has mean square %.9g, expected 1", i, C, ms);
    }
    for (int64_t j = 0; j < (int64_t)N * C; j++) x2[j] = x[j] * 4.0f; /* exact scaling by a power of two */
    ref_rmsnorm_forward(out2, rstd, x2, w, N, C, 0.0f, ACT_F32);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    struct cmp_case cc = {"rmsnorm_forward", "scale invariance", shape, "f32", g_seed};
    cmp_elementwise(&cc, out2, out, (int64_t)N * C, FLT_EPSILON, 2.0, 0.0, NULL);

    /* ACT_BF16: every output is a bf16 value, and it is the bf16 rounding of the f32 pipeline
     * within one rounding of the normalized value and one of the product. */
    rng_fill_normal(&r, w, C, 1.0, 0.2);
    ref_rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f, ACT_BF16);
    ref_rmsnorm_forward(out2, rstd, x, w, N, C, 1e-5f, ACT_F32);
    int64_t not_bf16 = 0;
    for (int64_t j = 0; j < (int64_t)N * C; j++) not_bf16 += bf16_round(out[j]) != out[j];
    EXPECT(not_bf16 == 0, "%lld outputs of the bf16 mode are not bf16 values", (long long)not_bf16);
    struct cmp_case cb = {"rmsnorm_forward", "bf16 vs f32", shape, "bf16", g_seed};
    cmp_elementwise(&cb, out, out2, (int64_t)N * C, BF16_EPS, 2.0, 0.0, NULL);
    free(x), free(x2), free(out), free(out2), free(w), free(rstd);
}

struct fd_ctx {
    int N, C;
    float eps;
    float *x, *w, *g, *out, *rstd;
};

/* loss = Σ g ⊙ rmsnorm(x; w), in double. */
static double fd_loss(void *p) {
    struct fd_ctx *c = p;
    ref_rmsnorm_forward(c->out, c->rstd, c->x, c->w, c->N, c->C, c->eps, ACT_F32);
    double s = 0;
    for (int64_t j = 0; j < (int64_t)c->N * c->C; j++) s += (double)c->g[j] * (double)c->out[j];
    return s;
}

static void test_gradients(int N, int C) {
    struct rng r;
    rng_init(&r, g_seed * 31 + (uint64_t)(N * 1000 + C));
    int64_t n = (int64_t)N * C;
    struct fd_ctx c = {N, C, 1e-5f, malloc(sizeof(float) * n), malloc(sizeof(float) * C), malloc(sizeof(float) * n),
                       malloc(sizeof(float) * n), malloc(sizeof(float) * N)};
    rng_fill_normal(&r, c.x, n, 0.0, 1.0);
    rng_fill_normal(&r, c.w, C, 1.0, 0.3);
    rng_fill_normal(&r, c.g, n, 0.0, 1.0);
    float *dx = malloc(sizeof(float) * n), *dw = calloc((size_t)C, sizeof(float));
    fd_loss(&c); /* fills rstd */
    ref_rmsnorm_backward(dx, dw, c.g, c.x, c.w, c.rstd, N, C, ACT_F32);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    struct cmp_case cx = {"rmsnorm_backward", "dx", shape, "f32", g_seed};
    struct cmp_case cw = {"rmsnorm_backward", "dw", shape, "f32", g_seed};
    gradcheck(&cx, fd_loss, &c, c.x, dx, n, 64, g_seed, 1e-3, 2e-3);
    gradcheck(&cw, fd_loss, &c, c.w, dw, C, 64, g_seed, 1e-3, 2e-3);

    /* dx may alias dy. */
    float *dyx = malloc(sizeof(float) * n);
    memcpy(dyx, c.g, sizeof(float) * n);
    ref_rmsnorm_backward(dyx, NULL, dyx, c.x, c.w, c.rstd, N, C, ACT_F32);
    struct cmp_case ca = {"rmsnorm_backward", "dx aliasing dy", shape, "f32", g_seed};
    cmp_exact_f32(&ca, dyx, dx, n);
    free(dyx), free(dx), free(dw), free(c.x), free(c.w), free(c.g), free(c.out), free(c.rstd);
}

static void test_residual(void) {
    struct rng r;
    rng_init(&r, g_seed + 7);
    int N = 5, C = 33;
    float a[5 * 33], d[5 * 33], w[33], res[5 * 33], sum[5 * 33], o1[5 * 33], o2[5 * 33], r1[5], r2[5];
    rng_fill_normal(&r, a, N * C, 0, 1);
    rng_fill_normal(&r, d, N * C, 0, 1);
    rng_fill_normal(&r, w, C, 1, 0.1);
    ref_rmsnorm_residual_forward(res, o1, r1, a, d, w, N, C, 1e-5f, ACT_BF16);
    for (int j = 0; j < N * C; j++) sum[j] = bf16_round(a[j] + d[j]);
    ref_rmsnorm_forward(o2, r2, sum, w, N, C, 1e-5f, ACT_BF16);
    struct cmp_case c1 = {"rmsnorm_residual_forward", "res_out", "N=5 C=33", "bf16", g_seed};
    struct cmp_case c2 = {"rmsnorm_residual_forward", "out", "N=5 C=33", "bf16", g_seed};
    cmp_exact_f32(&c1, res, sum, N * C);
    cmp_exact_f32(&c2, o1, o2, N * C);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261122);
    test_hand_case();
    const int shapes[][2] = {{1, 1}, {1, 33}, {7, 33}, {3, 64}, {2, 576}, {4, 1025}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        test_properties(shapes[s][0], shapes[s][1]);
        test_gradients(shapes[s][0], shapes[s][1]);
    }
    test_residual();
    return test_finish("rmsnorm_test");
}
