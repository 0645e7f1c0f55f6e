/* lora_test.c — ref/lora against mathematics: scale and init, a hand case, B = 0 equals the base
 * layer, the merged-weight form, finite differences with and without a dropout mask.
 *
 *   bazel test //tests/unit:lora_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/linear.h"
#include "ref/lora.h"
#include "tests/common/compare.h"
#include "tests/common/gradcheck.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

static float *falloc(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (p == NULL) abort();
    return p;
}

static double uniform01(void *ctx) { return rng_uniform(ctx); }

static void test_scale_and_init(void) {
    EXPECT(ref_lora_scale(16, 8, LORA_SCALE_STANDARD) == 2.0f, "alpha/R = 16/8");
    EXPECT(ref_lora_scale(32, 16, LORA_SCALE_RSLORA) == 8.0f, "alpha/sqrt(R) = 32/4");
    EXPECT(ref_lora_scale(1, 3, LORA_SCALE_STANDARD) == (float)(1.0 / 3.0), "alpha/R rounded once from double");

    /* A ~ U(−1/√C_in, 1/√C_in): every value inside, mean ≈ 0 and variance ≈ bound²/3 within 5σ of
     * the sampling error; B exactly 0. */
    int C_in = 100, C_out = 7, R = 64;
    float *a = falloc((int64_t)R * C_in), *b = falloc((int64_t)C_out * R);
    for (int j = 0; j < C_out * R; j++) b[j] = 1.0f;
    struct rng r;
    rng_init(&r, g_seed);
    ref_lora_init(a, b, C_in, C_out, R, uniform01, &r);
    double bound = 0.1, sum = 0, sum2 = 0;
    int outside = 0, nonzero_b = 0, n = R * C_in;
    for (int j = 0; j < n; j++) {
        outside += !(fabs(a[j]) <= bound);
        sum += a[j];
        sum2 += (double)a[j] * a[j];
    }
    for (int j = 0; j < C_out * R; j++) nonzero_b += b[j] != 0.0f;
    double var = bound * bound / 3, mean = sum / n, m2 = sum2 / n;
    EXPECT(outside == 0, "%d init values of A outside ±1/sqrt(C_in)", outside);
    EXPECT(nonzero_b == 0, "%d init values of B not zero", nonzero_b);
    EXPECT(fabs(mean) <= 5 * sqrt(var / n), "mean of A %.4g (seed %llu)", mean, (unsigned long long)g_seed);
    /* Var of a² for U(−c, c) is 4c⁴/45. */
    EXPECT(fabs(m2 - var) <= 5 * sqrt(4 * pow(bound, 4) / 45 / n), "E[A²] %.5g expected %.5g", m2, var);
    free(a), free(b);
}

/* C_in = 2, C_out = 2, R = 1, s = 0.5. x = [1, 2], A = [[3, −1]], B = [[2], [−4]].
 * u = 3 − 2 = 1; l = [2, −4]; y = base + 0.5·l = base + [1, −2].
 * dy = [1, 3]: g = [0.5, 1.5]; dB = g·u = [0.5, 1.5]; du = 0.5·2 + 1.5·(−4) = −5;
 * dA = du·x = [−5, −10]; dx += du·A = [−15, 5]. */
static void test_hand_case(void) {
    const float x[2] = {1, 2}, a[2] = {3, -1}, b[2] = {2, -4}, dy[2] = {1, 3};
    float y[2] = {10, 20}, u[1], ws[1];
    ref_lora_forward(y, u, x, NULL, a, b, 1, 2, 2, 1, 0.5f, ACT_F32);
    const float y_ex[2] = {11, 18}, u_ex[1] = {1};
    struct cmp_case c = {"lora", "hand y", "N=1 C_in=2 C_out=2 R=1", "f32", g_seed};
    cmp_exact_f32(&c, y, y_ex, 2);
    c.what = "hand u";
    cmp_exact_f32(&c, u, u_ex, 1);
    float dx[2] = {100, 200}, da[2] = {1, 1}, db[2] = {0, 0};
    ref_lora_backward(dx, da, db, dy, x, NULL, NULL, 1.0f, u, a, b, 1, 2, 2, 1, 0.5f, ACT_F32, ws);
    const float dx_ex[2] = {100 - 15, 200 + 5}, da_ex[2] = {1 - 5, 1 - 10}, db_ex[2] = {0.5f, 1.5f};
    c.what = "hand dx (accumulated onto 100, 200)";
    cmp_exact_f32(&c, dx, dx_ex, 2);
    c.what = "hand dA (accumulated onto 1)";
    cmp_exact_f32(&c, da, da_ex, 2);
    c.what = "hand dB";
    cmp_exact_f32(&c, db, db_ex, 2);

    /* Dropout: keep = [0, 1], keep_scale = 2 → x_d = [0, 4]: u = −4, y = base + 0.5·(−4)·[2, −4].
     * du = −5 as before; dA = du·x_d = [0, −20]; dx += mask(du·A) = [0, 2·5]. */
    const uint8_t keep[2] = {0, 1};
    const float xd[2] = {0, 4};
    float y2[2] = {0, 0}, dx2[2] = {0, 0}, da2[2] = {0, 0}, db2[2] = {0, 0};
    ref_lora_forward(y2, u, x, xd, a, b, 1, 2, 2, 1, 0.5f, ACT_F32);
    ref_lora_backward(dx2, da2, db2, dy, x, xd, keep, 2.0f, u, a, b, 1, 2, 2, 1, 0.5f, ACT_F32, ws);
    const float y2_ex[2] = {-4, 8}, dx2_ex[2] = {0, 10}, da2_ex[2] = {0, -20}, db2_ex[2] = {-2, -6};
    c.what = "hand dropout y";
    cmp_exact_f32(&c, y2, y2_ex, 2);
    c.what = "hand dropout dx";
    cmp_exact_f32(&c, dx2, dx2_ex, 2);
    c.what = "hand dropout dA";
    cmp_exact_f32(&c, da2, da2_ex, 2);
    c.what = "hand dropout dB";
    cmp_exact_f32(&c, db2, db2_ex, 2);
}

struct problem {
    int N, C_in, C_out, R;
    float scale;
    float keep_scale;
    float *x, *xd, *w, *bias, *a, *b, *g, *y, *u;
    uint8_t *keep; /* NULL: no dropout */
};

static void problem_init(struct problem *p, int N, int C_in, int C_out, int R, int dropout, uint64_t seed) {
    struct rng r;
    rng_init(&r, seed);
    p->N = N, p->C_in = C_in, p->C_out = C_out, p->R = R;
    p->scale = ref_lora_scale(2.0 * R + 1, R, LORA_SCALE_STANDARD);
    p->x = falloc((int64_t)N * C_in), p->xd = falloc((int64_t)N * C_in);
    p->w = falloc((int64_t)C_out * C_in), p->bias = falloc(C_out);
    p->a = falloc((int64_t)R * C_in), p->b = falloc((int64_t)C_out * R);
    p->g = falloc((int64_t)N * C_out), p->y = falloc((int64_t)N * C_out), p->u = falloc((int64_t)N * R);
    rng_fill_normal(&r, p->x, (int64_t)N * C_in, 0, 1);
    rng_fill_normal(&r, p->w, (int64_t)C_out * C_in, 0, 0.3);
    rng_fill_normal(&r, p->bias, C_out, 0, 1);
    rng_fill_normal(&r, p->a, (int64_t)R * C_in, 0, 0.3);
    rng_fill_normal(&r, p->b, (int64_t)C_out * R, 0, 0.3);
    rng_fill_normal(&r, p->g, (int64_t)N * C_out, 0, 1);
    p->keep = NULL;
    p->keep_scale = 1.0f;
    if (dropout) {
        p->keep = malloc((size_t)N * C_in);
        p->keep_scale = 1.0f / (float)(1.0 - 0.25); /* p = 0.25 */
        for (int64_t j = 0; j < (int64_t)N * C_in; j++) p->keep[j] = rng_uniform(&r) >= 0.25;
    }
}

static void problem_free(struct problem *p) {
    free(p->x), free(p->xd), free(p->w), free(p->bias), free(p->a), free(p->b), free(p->g), free(p->y), free(p->u);
    free(p->keep);
}

/* y = base(x) + lora(dropout(x)); x_d rebuilt from x and the mask as torch does (x·noise). */
static void forward(struct problem *p) {
    const float *xd = NULL;
    if (p->keep != NULL) {
        for (int64_t j = 0; j < (int64_t)p->N * p->C_in; j++) p->xd[j] = p->keep[j] ? p->x[j] * p->keep_scale : 0.0f;
        xd = p->xd;
    }
    ref_linear_forward_naive(p->y, p->x, p->w, p->bias, p->N, p->C_in, p->C_out, ACT_F32);
    ref_lora_forward(p->y, p->u, p->x, xd, p->a, p->b, p->N, p->C_in, p->C_out, p->R, p->scale, ACT_F32);
}

static double fd_loss(void *ctx) {
    struct problem *p = ctx;
    forward(p);
    double s = 0;
    for (int64_t j = 0; j < (int64_t)p->N * p->C_out; j++) s += (double)p->g[j] * (double)p->y[j];
    return s;
}

/* B = 0: the adapter adds exactly 0, so y equals the base layer bit for bit. */
static void test_b_zero(int N, int C_in, int C_out, int R) {
    struct problem p;
    problem_init(&p, N, C_in, C_out, R, 0, g_seed + 11);
    memset(p.b, 0, sizeof(float) * (size_t)C_out * R);
    float *base = falloc((int64_t)N * C_out);
    ref_linear_forward_naive(base, p.x, p.w, p.bias, N, C_in, C_out, ACT_F32);
    forward(&p);
    char shape[80];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d R=%d", N, C_in, C_out, R);
    struct cmp_case c = {"lora_forward", "B = 0 equals base", shape, "f32", g_seed};
    cmp_exact_f32(&c, p.y, base, (int64_t)N * C_out);
    free(base);
    problem_free(&p);
}

/* y − base equals s·x (BA)ᵀ computed through the merged ΔW = BA in double (a different
 * association of the same sum): within a few fp32 roundings of the row scale. */
static void test_merged_form(int N, int C_in, int C_out, int R) {
    struct problem p;
    problem_init(&p, N, C_in, C_out, R, 0, g_seed + 13);
    int64_t ny = (int64_t)N * C_out;
    memset(p.y, 0, sizeof(float) * (size_t)ny);
    ref_lora_forward(p.y, p.u, p.x, NULL, p.a, p.b, N, C_in, C_out, R, p.scale, ACT_F32);
    float *ref = falloc(ny);
    double *dw = malloc(sizeof(double) * (size_t)C_out * C_in);
    for (int o = 0; o < C_out; o++)
        for (int i = 0; i < C_in; i++) {
            double s = 0;
            for (int r = 0; r < R; r++) s += (double)p.b[o * R + r] * p.a[r * C_in + i];
            dw[o * C_in + i] = s;
        }
    for (int n = 0; n < N; n++)
        for (int o = 0; o < C_out; o++) {
            double s = 0;
            for (int i = 0; i < C_in; i++) s += (double)p.x[n * C_in + i] * dw[o * C_in + i];
            ref[n * C_out + o] = (float)(s * p.scale);
        }
    char shape[80];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d R=%d", N, C_in, C_out, R);
    struct cmp_case c = {"lora_forward", "vs merged ΔW = BA", shape, "f32", g_seed};
    /* u and l are each rounded once to fp32, then l·s and the add: 4 roundings; the floor (rms of
     * the result) covers the cancellation in u. */
    cmp_elementwise(&c, p.y, ref, ny, FLT_EPSILON, 8.0, cmp_rms(ref, ny), NULL);
    free(ref), free(dw);
    problem_free(&p);
}

static void test_gradients(int N, int C_in, int C_out, int R, int dropout) {
    struct problem p;
    problem_init(&p, N, C_in, C_out, R, dropout, g_seed * 7 + (uint64_t)(N * 100 + C_in + R));
    int64_t nx = (int64_t)N * C_in;
    float *dx = falloc(nx), *da = calloc((size_t)R * C_in, sizeof(float)), *db = calloc((size_t)C_out * R, sizeof(float));
    float *ws = falloc((int64_t)ref_lora_backward_workspace_size(N, R));
    forward(&p);
    ref_linear_backward_naive(dx, NULL, NULL, p.g, p.x, p.w, N, C_in, C_out, ACT_F32);
    ref_lora_backward(dx, da, db, p.g, p.x, p.keep ? p.xd : NULL, p.keep, p.keep_scale, p.u, p.a, p.b, N, C_in, C_out,
                      R, p.scale, ACT_F32, ws);
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d R=%d dropout=%d", N, C_in, C_out, R, dropout);
    struct cmp_case cx = {"lora_backward", "dx (base + adapter)", shape, "f32", g_seed};
    struct cmp_case ca = {"lora_backward", "dA", shape, "f32", g_seed};
    struct cmp_case cb = {"lora_backward", "dB", shape, "f32", g_seed};
    gradcheck(&cx, fd_loss, &p, p.x, dx, nx, 48, g_seed, 1e-2, 2e-3);
    gradcheck(&ca, fd_loss, &p, p.a, da, (int64_t)R * C_in, 48, g_seed, 1e-2, 2e-3);
    gradcheck(&cb, fd_loss, &p, p.b, db, (int64_t)C_out * R, 48, g_seed, 1e-2, 2e-3);

    /* Parameter gradients accumulate: a second backward doubles them (exact: x + x). NULL skips. */
    float *da2 = falloc((int64_t)R * C_in), *db2 = falloc((int64_t)C_out * R);
    memcpy(da2, da, sizeof(float) * (size_t)R * C_in);
    memcpy(db2, db, sizeof(float) * (size_t)C_out * R);
    ref_lora_backward(NULL, da2, NULL, p.g, p.x, p.keep ? p.xd : NULL, p.keep, p.keep_scale, p.u, p.a, p.b, N, C_in,
                      C_out, R, p.scale, ACT_F32, ws);
    ref_lora_backward(NULL, NULL, db2, p.g, p.x, p.keep ? p.xd : NULL, p.keep, p.keep_scale, p.u, p.a, p.b, N, C_in,
                      C_out, R, p.scale, ACT_F32, ws);
    for (int64_t j = 0; j < (int64_t)R * C_in; j++) da[j] = da[j] + da[j];
    for (int64_t j = 0; j < (int64_t)C_out * R; j++) db[j] = db[j] + db[j];
    struct cmp_case cacc = {"lora_backward", "dA accumulates", shape, "f32", g_seed};
    cmp_exact_f32(&cacc, da2, da, (int64_t)R * C_in);
    cacc.what = "dB accumulates";
    cmp_exact_f32(&cacc, db2, db, (int64_t)C_out * R);

    /* ACT_BF16: stored activations are bf16 values. */
    ref_lora_forward(p.y, p.u, p.x, p.keep ? p.xd : NULL, p.a, p.b, N, C_in, C_out, R, p.scale, ACT_BF16);
    int64_t not_bf16 = 0;
    for (int64_t j = 0; j < (int64_t)N * C_out; j++) not_bf16 += bf16_round(p.y[j]) != p.y[j];
    for (int64_t j = 0; j < (int64_t)N * R; j++) not_bf16 += bf16_round(p.u[j]) != p.u[j];
    EXPECT(not_bf16 == 0, "lora %s: %lld bf16-mode activations are not bf16 values", shape, (long long)not_bf16);
    free(dx), free(da), free(db), free(da2), free(db2), free(ws);
    problem_free(&p);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261124);
    test_scale_and_init();
    test_hand_case();
    const int shapes[][4] = {{1, 1, 1, 1}, {3, 5, 7, 2}, {7, 33, 17, 4}, {5, 64, 96, 8}, {9, 130, 67, 3}, {3, 600, 5, 2}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int *d = shapes[s];
        test_b_zero(d[0], d[1], d[2], d[3]);
        test_merged_form(d[0], d[1], d[2], d[3]);
        test_gradients(d[0], d[1], d[2], d[3], 0);
        test_gradients(d[0], d[1], d[2], d[3], 1);
    }
    return test_finish("lora_test");
}
