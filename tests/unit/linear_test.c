/* linear_test.c — ref/linear (sgemm and naive) against mathematics: a hand case, exact agreement
 * on integer-valued inputs, the dot-product error bound on random inputs, finite differences.
 *
 *   bazel test //tests/unit:linear_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/linear.h"
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

/* x = [[1, 2]], W = [[3, 4], [5, 6], [7, 8]], b = [0.5, -1, 2]:
 * y = [1·3+2·4+0.5, 1·5+2·6−1, 1·7+2·8+2] = [11.5, 16, 25].
 * dy = [[1, -1, 2]]: dx = dy W = [3−5+14, 4−6+16] = [12, 14]; dW = dyᵀ x; db = dy. */
static void test_hand_case(void) {
    const float x[2] = {1, 2}, w[6] = {3, 4, 5, 6, 7, 8}, b[3] = {0.5f, -1, 2}, dy[3] = {1, -1, 2};
    const float y_ex[3] = {11.5f, 16, 25}, dx_ex[2] = {12, 14};
    const float dw_ex[6] = {1 + 1, 2 + 1, -1 + 1, -2 + 1, 2 + 1, 4 + 1}, db_ex[3] = {1 + 2, -1 + 2, 2 + 2};
    for (int path = 0; path < 2; path++) {
        float y[3], dx[2], dw[6], db[3];
        for (int j = 0; j < 6; j++) dw[j] = 1.0f; /* parameter gradients accumulate */
        for (int j = 0; j < 3; j++) db[j] = 2.0f;
        if (path == 0) {
            ref_linear_forward(y, x, w, b, 1, 2, 3, ACT_F32);
            ref_linear_backward(dx, dw, db, dy, x, w, 1, 2, 3, ACT_F32);
        } else {
            ref_linear_forward_naive(y, x, w, b, 1, 2, 3, ACT_F32);
            ref_linear_backward_naive(dx, dw, db, dy, x, w, 1, 2, 3, ACT_F32);
        }
        const char *name = path == 0 ? "sgemm" : "naive";
        struct cmp_case c = {name, "hand y", "N=1 C_in=2 C_out=3", "f32", g_seed};
        cmp_exact_f32(&c, y, y_ex, 3);
        c.what = "hand dx";
        cmp_exact_f32(&c, dx, dx_ex, 2);
        c.what = "hand dw (accumulated onto 1)";
        cmp_exact_f32(&c, dw, dw_ex, 6);
        c.what = "hand db (accumulated onto 2)";
        cmp_exact_f32(&c, db, db_ex, 3);
    }
}

/* Integer-valued inputs in [-8, 8]: every partial sum is an integer below 2^24, so fp32 sgemm
 * in any order and the double loop agree bit for bit (tier a). */
static void test_exact_integer(int N, int C_in, int C_out) {
    struct rng r;
    rng_init(&r, g_seed ^ (uint64_t)(N * 7919 + C_in * 31 + C_out));
    int64_t nx = (int64_t)N * C_in, nw = (int64_t)C_out * C_in, ny = (int64_t)N * C_out;
    float *x = falloc(nx), *w = falloc(nw), *b = falloc(C_out), *dy = falloc(ny);
    float *y1 = falloc(ny), *y2 = falloc(ny), *dx1 = falloc(nx), *dx2 = falloc(nx);
    float *dw1 = falloc(nw), *dw2 = falloc(nw), *db1 = falloc(C_out), *db2 = falloc(C_out);
    rng_fill_int(&r, x, nx, -8, 8);
    rng_fill_int(&r, w, nw, -8, 8);
    rng_fill_int(&r, b, C_out, -8, 8);
    rng_fill_int(&r, dy, ny, -8, 8);
    rng_fill_int(&r, dw1, nw, -8, 8);
    memcpy(dw2, dw1, sizeof(float) * (size_t)nw);
    rng_fill_int(&r, db1, C_out, -8, 8);
    memcpy(db2, db1, sizeof(float) * (size_t)C_out);
    ref_linear_forward(y1, x, w, b, N, C_in, C_out, ACT_F32);
    ref_linear_forward_naive(y2, x, w, b, N, C_in, C_out, ACT_F32);
    ref_linear_backward(dx1, dw1, db1, dy, x, w, N, C_in, C_out, ACT_F32);
    ref_linear_backward_naive(dx2, dw2, db2, dy, x, w, N, C_in, C_out, ACT_F32);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d", N, C_in, C_out);
    struct cmp_case c = {"linear sgemm vs naive", "y (integer inputs)", shape, "f32", g_seed};
    cmp_exact_f32(&c, y1, y2, ny);
    c.what = "dx (integer inputs)";
    cmp_exact_f32(&c, dx1, dx2, nx);
    c.what = "dw (integer inputs)";
    cmp_exact_f32(&c, dw1, dw2, nw);
    c.what = "db (integer inputs)";
    cmp_exact_f32(&c, db1, db2, C_out);

    /* ACT_BF16 rounds each stored activation once: naive bf16 == bf16_round(naive f32). */
    rng_fill_normal(&r, x, nx, 0, 1);
    ref_linear_forward_naive(y1, x, w, b, N, C_in, C_out, ACT_BF16);
    ref_linear_forward_naive(y2, x, w, b, N, C_in, C_out, ACT_F32);
    for (int64_t j = 0; j < ny; j++) y2[j] = bf16_round(y2[j]);
    c.what = "y bf16 = round(y f32)";
    c.dtype = "bf16";
    cmp_exact_f32(&c, y1, y2, ny);
    ref_linear_forward(y1, x, w, b, N, C_in, C_out, ACT_BF16);
    int64_t not_bf16 = 0;
    for (int64_t j = 0; j < ny; j++) not_bf16 += bf16_round(y1[j]) != y1[j];
    EXPECT(not_bf16 == 0, "%s: %lld sgemm bf16 outputs are not bf16 values", shape, (long long)not_bf16);
    free(x), free(w), free(b), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(dw1), free(dw2), free(db1),
        free(db2);
}

/* Random normal inputs: the sgemm result differs from the double loop by at most the classic
 * bound of an fp32 dot product of length K, γ_K·Σ|a_k b_k| with γ_K = K·u/(1 − K·u), u = 2^-24,
 * plus one rounding of the result (the double loop rounds once). K counts the bias too. */
static void expect_dot_bound(const char *what, const char *shape, const float *got, const float *ref,
                             const double *absdot, int64_t n, int K) {
    double u = FLT_EPSILON / 2, gamma = (K + 1) * u / (1 - (K + 1) * u);
    int64_t bad = 0, first = -1;
    for (int64_t j = 0; j < n; j++) {
        double e = fabs((double)got[j] - (double)ref[j]);
        if (!(e <= gamma * absdot[j] + u * fabs((double)ref[j]))) {
            if (first < 0) first = j;
            bad++;
        }
    }
    EXPECT(bad == 0, "linear sgemm vs naive %s %s seed=%llu: %lld elements beyond the fp32 dot-product bound "
                     "(first %lld: got %.9g ref %.9g)",
           what, shape, (unsigned long long)g_seed, (long long)bad, (long long)first,
           first >= 0 ? (double)got[first] : 0.0, first >= 0 ? (double)ref[first] : 0.0);
}

static void test_random_bound(int N, int C_in, int C_out) {
    struct rng r;
    rng_init(&r, g_seed * 3 + (uint64_t)(N * 131 + C_in * 17 + C_out));
    int64_t nx = (int64_t)N * C_in, nw = (int64_t)C_out * C_in, ny = (int64_t)N * C_out;
    float *x = falloc(nx), *w = falloc(nw), *b = falloc(C_out), *dy = falloc(ny);
    float *y1 = falloc(ny), *y2 = falloc(ny), *dx1 = falloc(nx), *dx2 = falloc(nx);
    float *dw1 = falloc(nw), *dw2 = falloc(nw);
    double *ad = malloc(sizeof(double) * (size_t)(ny > nx ? (ny > nw ? ny : nw) : (nx > nw ? nx : nw)));
    rng_fill_normal(&r, x, nx, 0, 1);
    rng_fill_normal(&r, w, nw, 0, 0.2);
    rng_fill_normal(&r, b, C_out, 0, 1);
    rng_fill_normal(&r, dy, ny, 0, 1);
    rng_fill_normal(&r, dw1, nw, 0, 1);
    memcpy(dw2, dw1, sizeof(float) * (size_t)nw);
    ref_linear_forward(y1, x, w, b, N, C_in, C_out, ACT_F32);
    ref_linear_forward_naive(y2, x, w, b, N, C_in, C_out, ACT_F32);
    ref_linear_backward(dx1, dw1, NULL, dy, x, w, N, C_in, C_out, ACT_F32);
    ref_linear_backward_naive(dx2, dw2, NULL, dy, x, w, N, C_in, C_out, ACT_F32);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d", N, C_in, C_out);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < C_out; o++) {
            double s = fabs((double)b[o]);
            for (int i = 0; i < C_in; i++) s += fabs((double)x[n * C_in + i] * w[o * C_in + i]);
            ad[n * C_out + o] = s;
        }
    expect_dot_bound("y", shape, y1, y2, ad, ny, C_in + 1);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C_in; i++) {
            double s = 0;
            for (int o = 0; o < C_out; o++) s += fabs((double)dy[n * C_out + o] * w[o * C_in + i]);
            ad[n * C_in + i] = s;
        }
    expect_dot_bound("dx", shape, dx1, dx2, ad, nx, C_out);
    for (int o = 0; o < C_out; o++)
        for (int i = 0; i < C_in; i++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += fabs((double)dy[n * C_out + o] * x[n * C_in + i]);
            ad[o * C_in + i] = s + fabs((double)dw2[o * C_in + i]);
        }
    expect_dot_bound("dw (accumulated)", shape, dw1, dw2, ad, nw, N + 1);
    free(x), free(w), free(b), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(dw1), free(dw2), free(ad);
}

struct fd_ctx {
    int N, C_in, C_out;
    float *x, *w, *b, *g, *y;
};

/* loss = Σ g ⊙ linear(x; W, b), in double. */
static double fd_loss(void *p) {
    struct fd_ctx *c = p;
    ref_linear_forward_naive(c->y, c->x, c->w, c->b, c->N, c->C_in, c->C_out, ACT_F32);
    double s = 0;
    for (int64_t j = 0; j < (int64_t)c->N * c->C_out; j++) s += (double)c->g[j] * (double)c->y[j];
    return s;
}

static void test_gradients(int N, int C_in, int C_out) {
    struct rng r;
    rng_init(&r, g_seed * 31 + (uint64_t)(N * 1000 + C_in * 10 + C_out));
    int64_t nx = (int64_t)N * C_in, nw = (int64_t)C_out * C_in, ny = (int64_t)N * C_out;
    struct fd_ctx c = {N, C_in, C_out, falloc(nx), falloc(nw), falloc(C_out), falloc(ny), falloc(ny)};
    rng_fill_normal(&r, c.x, nx, 0, 1);
    rng_fill_normal(&r, c.w, nw, 0, 0.3);
    rng_fill_normal(&r, c.b, C_out, 0, 1);
    rng_fill_normal(&r, c.g, ny, 0, 1);
    float *dx = falloc(nx), *dw = calloc((size_t)nw, sizeof(float)), *db = calloc((size_t)C_out, sizeof(float));
    ref_linear_backward_naive(dx, dw, db, c.g, c.x, c.w, N, C_in, C_out, ACT_F32);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d", N, C_in, C_out);
    struct cmp_case cx = {"linear_backward_naive", "dx", shape, "f32", g_seed};
    struct cmp_case cw = {"linear_backward_naive", "dw", shape, "f32", g_seed};
    struct cmp_case cb = {"linear_backward_naive", "db", shape, "f32", g_seed};
    /* The loss is linear in each parameter: the central difference is exact up to rounding. */
    gradcheck(&cx, fd_loss, &c, c.x, dx, nx, 48, g_seed, 1e-2, 1e-3);
    gradcheck(&cw, fd_loss, &c, c.w, dw, nw, 48, g_seed, 1e-2, 1e-3);
    gradcheck(&cb, fd_loss, &c, c.b, db, C_out, 48, g_seed, 1e-2, 1e-3);
    free(dx), free(dw), free(db), free(c.x), free(c.w), free(c.b), free(c.g), free(c.y);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    test_hand_case();
    const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {7, 33, 17}, {16, 64, 96}, {5, 130, 67}, {33, 260, 31}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        test_exact_integer(shapes[s][0], shapes[s][1], shapes[s][2]);
        test_random_bound(shapes[s][0], shapes[s][1], shapes[s][2]);
        test_gradients(shapes[s][0], shapes[s][1], shapes[s][2]);
    }
    return test_finish("linear_test");
}
