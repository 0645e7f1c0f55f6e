/* dora_test.c — ref/dora against mathematics: a hand case, direct and factored row norms agree,
 * m = ‖W‖_row with B = 0 equals the base layer, the closed form b + (m/n)⊙(x W'ᵀ), direct and
 * factored DoRA agree end to end, finite differences (n detached) with and without dropout, the
 * magnitude gradient from the output y against the one from z (ref_dora_rescale).
 *
 *   bazel test //tests/unit:dora_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/dora.h"
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

/* W = [[2, 4], [0, 3]], A = [[1, 0]], B = [[1], [4]], s = 1: W' = W + BA = [[3, 4], [4, 3]], n = [5, 5].
 * m = [10, 2.5] → m/n = [2, 0.5]. x = [1, 1], b = [1, −1]: result = [7, 2], base = [6, 3], u = 1,
 * l = [1, 4]; y = result + (m/n − 1)·base + (m/n)·l = [7 + 6 + 2, 2 − 1.5 + 2] = [15, 2.5]
 * (= b + (m/n)⊙(x W'ᵀ) = [1 + 2·7, −1 + 0.5·7]).
 * dy = [1, 2]: gl = dy·(m/n) = [2, 1]; dB = gl·u = [2, 1]; du = 2·1 + 1·4 = 6; dA = du·x = [6, 6];
 * dm = (dy·(base + l))/n = [7/5, 14/5]; dx = dy W + (m/n − 1)dy W + du A = [10, 11] (= (m/n ⊙ dy) W'). */
static void test_hand_case(void) {
    const float w[4] = {2, 4, 0, 3}, a[2] = {1, 0}, b[2] = {1, 4}, bias[2] = {1, -1}, x[2] = {1, 1};
    const float mag[2] = {10, 2.5f}, dy[2] = {1, 2};
    float wn[2], wn_f[2], wsq[2];
    double wsd[4];
    ref_dora_weight_norm(wn, w, a, b, 2, 2, 1, 1.0f);
    ref_dora_weight_sq(wsq, w, 2, 2);
    ref_dora_weight_norm_factored(wn_f, wsq, w, a, b, 2, 2, 1, 1.0f, wsd);
    const float n_ex[2] = {5, 5}, wsq_ex[2] = {20, 9};
    struct cmp_case c = {"dora", "hand wnorm direct", "N=1 C_in=2 C_out=2 R=1", "f32", g_seed};
    cmp_exact_f32(&c, wn, n_ex, 2);
    c.what = "hand w_sq";
    cmp_exact_f32(&c, wsq, wsq_ex, 2);
    c.what = "hand wnorm factored";
    cmp_exact_f32(&c, wn_f, n_ex, 2);

    float y[2], u[1], ws[3];
    ref_linear_forward_naive(y, x, w, bias, 1, 2, 2, ACT_F32);
    ref_dora_forward(y, u, x, NULL, w, bias, a, b, mag, wn, 1, 2, 2, 1, 1.0f, ACT_F32);
    const float y_ex[2] = {15, 2.5f};
    c.what = "hand y";
    cmp_exact_f32(&c, y, y_ex, 2);
    float dx[2], dm[2] = {0, 0}, da[2] = {0, 0}, db[2] = {0, 0};
    ref_linear_backward_naive(dx, NULL, NULL, dy, x, w, 1, 2, 2, ACT_F32);
    ref_dora_backward(dx, dm, da, db, dy, x, NULL, NULL, 1.0f, u, w, a, b, mag, wn, 1, 2, 2, 1, 1.0f, ACT_F32, ws);
    const float dx_ex[2] = {10, 11}, dm_ex[2] = {(float)(7.0 / 5.0), (float)(14.0 / 5.0)}, da_ex[2] = {6, 6},
                db_ex[2] = {2, 1};
    c.what = "hand dx";
    cmp_exact_f32(&c, dx, dx_ex, 2);
    c.what = "hand dm";
    cmp_exact_f32(&c, dm, dm_ex, 2);
    c.what = "hand dA";
    cmp_exact_f32(&c, da, da_ex, 2);
    c.what = "hand dB";
    cmp_exact_f32(&c, db, db_ex, 2);
}

struct problem {
    int N, C_in, C_out, R;
    float scale, keep_scale;
    float *x, *xd, *w, *bias, *a, *b, *mag, *wn, *g, *y, *u;
    uint8_t *keep;
};

static void problem_init(struct problem *p, int N, int C_in, int C_out, int R, int dropout, uint64_t seed) {
    struct rng r;
    rng_init(&r, seed);
    p->N = N, p->C_in = C_in, p->C_out = C_out, p->R = R;
    p->scale = ref_lora_scale(2.0 * R, R, LORA_SCALE_RSLORA);
    p->x = falloc((int64_t)N * C_in), p->xd = falloc((int64_t)N * C_in);
    p->w = falloc((int64_t)C_out * C_in), p->bias = falloc(C_out);
    p->a = falloc((int64_t)R * C_in), p->b = falloc((int64_t)C_out * R);
    p->mag = falloc(C_out), p->wn = falloc(C_out);
    p->g = falloc((int64_t)N * C_out), p->y = falloc((int64_t)N * C_out), p->u = falloc((int64_t)N * R);
    rng_fill_normal(&r, p->x, (int64_t)N * C_in, 0, 1);
    rng_fill_normal(&r, p->w, (int64_t)C_out * C_in, 0, 0.3);
    rng_fill_normal(&r, p->bias, C_out, 0, 1);
    rng_fill_normal(&r, p->a, (int64_t)R * C_in, 0, 0.3);
    rng_fill_normal(&r, p->b, (int64_t)C_out * R, 0, 0.3);
    rng_fill_normal(&r, p->g, (int64_t)N * C_out, 0, 1);
    ref_dora_weight_norm(p->wn, p->w, p->a, p->b, C_in, C_out, R, p->scale);
    /* m near the norm, as in training: m = ‖W‖_row at init, then it drifts. */
    for (int o = 0; o < C_out; o++) p->mag[o] = p->wn[o] * (float)rng_range(&r, 0.7, 1.3);
    p->keep = NULL;
    p->keep_scale = 1.0f;
    if (dropout) {
        p->keep = malloc((size_t)N * C_in);
        p->keep_scale = 1.0f / (float)(1.0 - 0.3);
        for (int64_t j = 0; j < (int64_t)N * C_in; j++) p->keep[j] = rng_uniform(&r) >= 0.3;
    }
}

static void problem_free(struct problem *p) {
    free(p->x), free(p->xd), free(p->w), free(p->bias), free(p->a), free(p->b), free(p->mag), free(p->wn);
    free(p->g), free(p->y), free(p->u), free(p->keep);
}

static const float *make_xd(struct problem *p) {
    if (p->keep == NULL) return NULL;
    for (int64_t j = 0; j < (int64_t)p->N * p->C_in; j++) p->xd[j] = p->keep[j] ? p->x[j] * p->keep_scale : 0.0f;
    return p->xd;
}

/* Base layer with bias, then DoRA with the current (fixed, detached) wnorm. */
static void forward(struct problem *p) {
    const float *xd = make_xd(p);
    ref_linear_forward_naive(p->y, p->x, p->w, p->bias, p->N, p->C_in, p->C_out, ACT_F32);
    ref_dora_forward(p->y, p->u, p->x, xd, p->w, p->bias, p->a, p->b, p->mag, p->wn, p->N, p->C_in, p->C_out, p->R,
                     p->scale, ACT_F32);
}

static double fd_loss(void *ctx) {
    struct problem *p = ctx;
    forward(p);
    double s = 0;
    for (int64_t j = 0; j < (int64_t)p->N * p->C_out; j++) s += (double)p->g[j] * (double)p->y[j];
    return s;
}

/* Gradients of one forward/backward; dx includes the base layer's dy W. */
struct grads {
    float *dx, *dm, *da, *db;
};

static void backward(struct problem *p, struct grads *gr) {
    int N = p->N, C_in = p->C_in, C_out = p->C_out, R = p->R;
    float *ws = falloc((int64_t)ref_dora_backward_workspace_size(N, C_out, R));
    memset(gr->dm, 0, sizeof(float) * (size_t)C_out);
    memset(gr->da, 0, sizeof(float) * (size_t)R * C_in);
    memset(gr->db, 0, sizeof(float) * (size_t)C_out * R);
    ref_linear_backward_naive(gr->dx, NULL, NULL, p->g, p->x, p->w, N, C_in, C_out, ACT_F32);
    ref_dora_backward(gr->dx, gr->dm, gr->da, gr->db, p->g, p->x, p->keep ? p->xd : NULL, p->keep, p->keep_scale,
                      p->u, p->w, p->a, p->b, p->mag, p->wn, N, C_in, C_out, R, p->scale, ACT_F32, ws);
    free(ws);
}

static void grads_alloc(struct grads *gr, const struct problem *p) {
    gr->dx = falloc((int64_t)p->N * p->C_in), gr->dm = falloc(p->C_out);
    gr->da = falloc((int64_t)p->R * p->C_in), gr->db = falloc((int64_t)p->C_out * p->R);
}

static void grads_free(struct grads *gr) { free(gr->dx), free(gr->dm), free(gr->da), free(gr->db); }

/* Cancellation factor of the row norm: κ[o] = ‖ |W[o,:]| + |s·(BA)[o,:]| ‖ / ‖W[o,:] + s·(BA)[o,:]‖ ≥ 1.
 * The direct form rounds each element of W' with an error ≤ 3u·(|W| + |sBA|), so its n carries a
 * relative error ≤ 3u·κ; the factored form's fp32 ‖W‖² one ≤ u·κ²/2. Returns the max over rows. */
static double cancellation(const struct problem *p, double *kappa) {
    double kmax = 1.0;
    for (int o = 0; o < p->C_out; o++) {
        double num = 0, den = 0;
        for (int i = 0; i < p->C_in; i++) {
            double ba = 0;
            for (int r = 0; r < p->R; r++) ba += (double)p->b[o * p->R + r] * p->a[r * p->C_in + i];
            double w = p->w[o * p->C_in + i], t = fabs(w) + fabs(p->scale * ba), v = w + p->scale * ba;
            num += t * t;
            den += v * v;
        }
        double k = den > 0 ? sqrt(num / den) : INFINITY;
        if (kappa != NULL) kappa[o] = k;
        if (k > kmax) kmax = k;
    }
    return kmax;
}

/* Direct and factored row norms agree; with B = 0 both are ‖W_row‖. */
static void test_norms(int C_in, int C_out, int R) {
    struct problem p;
    problem_init(&p, 1, C_in, C_out, R, 0, g_seed + 101 + (uint64_t)C_in);
    float *wn_f = falloc(C_out), *wsq = falloc(C_out), *wref = falloc(C_out);
    double *wsd = malloc(sizeof(double) * ref_dora_weight_norm_factored_workspace_size(C_out, R));
    ref_dora_weight_sq(wsq, p.w, C_in, C_out);
    ref_dora_weight_norm_factored(wn_f, wsq, p.w, p.a, p.b, C_in, C_out, R, p.scale, wsd);
    char shape[64];
    snprintf(shape, sizeof shape, "C_in=%d C_out=%d R=%d", C_in, C_out, R);
    struct cmp_case c = {"dora_weight_norm", "factored vs direct", shape, "f32", g_seed};
    /* Direct: ≤ 3u·κ relative (BA, s·BA and the add, see cancellation); factored: w_sq rounded once,
     * an error u·‖W‖² ≤ u·κ²·n² on n², so ≤ u·κ²/2 on n; plus the final rounding of each side.
     * Bound (κ² + 3κ + 2)·u·n. */
    double *kappa = malloc(sizeof(double) * (size_t)C_out);
    cancellation(&p, kappa);
    int bad = 0;
    for (int o = 0; o < C_out; o++) {
        double e = fabs((double)wn_f[o] - p.wn[o]), thr = (kappa[o] * kappa[o] + 3 * kappa[o] + 2) * (FLT_EPSILON / 2) * p.wn[o];
        if (!(e <= thr)) {
            bad++;
            test_fail("dora_weight_norm factored vs direct %s seed=%llu: row %d got %.9g ref %.9g err %.3g thr %.3g "
                      "(kappa %.3g)",
                      shape, (unsigned long long)g_seed, o, (double)wn_f[o], (double)p.wn[o], e, thr, kappa[o]);
            break;
        }
    }
    if (!bad) test_pass();
    free(kappa);

    memset(p.b, 0, sizeof(float) * (size_t)C_out * R);
    ref_dora_weight_norm(p.wn, p.w, p.a, p.b, C_in, C_out, R, p.scale);
    ref_dora_weight_norm_factored(wn_f, wsq, p.w, p.a, p.b, C_in, C_out, R, p.scale, wsd);
    for (int o = 0; o < C_out; o++) {
        double s = 0;
        for (int i = 0; i < C_in; i++) s += (double)p.w[o * C_in + i] * p.w[o * C_in + i];
        wref[o] = (float)sqrt(s);
    }
    c.what = "direct, B = 0, vs ||W_row||";
    cmp_exact_f32(&c, p.wn, wref, C_out);
    c.what = "factored, B = 0, vs ||W_row||";
    /* w_sq rounded once (u/2 relative on n) and both sqrt results rounded (u/2 each): ≤ 1.5u = 0.75 eps
     * per element; k = 4 keeps the aggregate bound (k/4)·eps above that too. */
    cmp_elementwise(&c, wn_f, wref, C_out, FLT_EPSILON, 4.0, 0.0, NULL);
    free(wn_f), free(wsq), free(wref), free(wsd);
    problem_free(&p);
}

/* m = ‖W‖_row (PEFT's init) and B = 0: m/n = 1 exactly and the adapter adds exactly 0. */
static void test_identity_at_init(int N, int C_in, int C_out, int R, int dropout) {
    struct problem p;
    problem_init(&p, N, C_in, C_out, R, dropout, g_seed + 17);
    memset(p.b, 0, sizeof(float) * (size_t)C_out * R);
    ref_dora_weight_norm(p.mag, p.w, p.a, p.b, C_in, C_out, R, p.scale);
    memcpy(p.wn, p.mag, sizeof(float) * (size_t)C_out);
    float *base = falloc((int64_t)N * C_out);
    ref_linear_forward_naive(base, p.x, p.w, p.bias, N, C_in, C_out, ACT_F32);
    forward(&p);
    char shape[80];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d R=%d dropout=%d", N, C_in, C_out, R, dropout);
    struct cmp_case c = {"dora_forward", "m = ||W||, B = 0 equals base", shape, "f32", g_seed};
    cmp_exact_f32(&c, p.y, base, (int64_t)N * C_out);
    free(base);
    problem_free(&p);
}

/* The closed form, in double: no dropout y = b + (m/n)⊙(x Wᵀ + s·x Aᵀ Bᵀ); with dropout
 * y = x Wᵀ + b + (m/n − 1)⊙(x_d Wᵀ) + (m/n)⊙(s·x_d Aᵀ Bᵀ). */
/* The closed form, in double: no dropout y = b + (m/n)⊙(x Wᵀ + s·x Aᵀ Bᵀ); with dropout
 * y = x Wᵀ + b + (m/n − 1)⊙(x_d Wᵀ) + (m/n)⊙(s·x_d Aᵀ Bᵀ). Also returns (in mag_out, may be NULL)
 * the rms over elements of |b| + |x Wᵀ| + |m/n − 1|·|x_a Wᵀ| + |m/n|·|s·x_a Aᵀ Bᵀ|: the size of
 * the terms that PEFT's order rounds, the floor of comparisons on y (y itself may cancel). */
static void closed_form(float *ref, double *mag_out, const struct problem *p) {
    const float *xa = p->keep ? p->xd : p->x;
    int N = p->N, C_in = p->C_in, C_out = p->C_out, R = p->R;
    double m2 = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < C_out; o++) {
            double mns = (double)p->mag[o] / p->wn[o], xw = 0, xaw = 0, lora = 0;
            for (int i = 0; i < C_in; i++) {
                xw += (double)p->x[n * C_in + i] * p->w[o * C_in + i];
                xaw += (double)xa[n * C_in + i] * p->w[o * C_in + i];
            }
            for (int r = 0; r < R; r++) {
                double ur = 0;
                for (int i = 0; i < C_in; i++) ur += (double)xa[n * C_in + i] * p->a[r * C_in + i];
                lora += ur * p->b[o * R + r];
            }
            lora *= p->scale;
            ref[n * C_out + o] = (float)(p->bias[o] + xw + (mns - 1) * xaw + mns * lora);
            double mag = fabs(p->bias[o]) + fabs(xw) + fabs(mns - 1) * fabs(xaw) + fabs(mns) * fabs(lora);
            m2 += mag * mag;
        }
    if (mag_out != NULL) *mag_out = sqrt(m2 / ((double)N * C_out > 0 ? (double)N * C_out : 1.0));
}

static void test_closed_form(int N, int C_in, int C_out, int R, int dropout) {
    struct problem p;
    problem_init(&p, N, C_in, C_out, R, dropout, g_seed + 19 + (uint64_t)dropout);
    forward(&p);
    int64_t ny = (int64_t)N * C_out;
    float *ref = falloc(ny);
    double mag;
    closed_form(ref, &mag, &p);
    char shape[80];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d R=%d dropout=%d", N, C_in, C_out, R, dropout);
    struct cmp_case c = {"dora_forward", "vs closed form", shape, "f32", g_seed};
    /* PEFT's order rounds result, result − b, u, l, the products and the adds: ≈ 8 roundings, each
     * of a term no larger than the term magnitudes (the floor). */
    cmp_elementwise(&c, p.y, ref, ny, FLT_EPSILON, 16.0, mag, NULL);
    free(ref);
    problem_free(&p);
}

/* Forward and backward with the norm from the direct and from the factored form agree. */
static void test_direct_vs_factored(int N, int C_in, int C_out, int R, int dropout) {
    struct problem p;
    problem_init(&p, N, C_in, C_out, R, dropout, g_seed + 23 + (uint64_t)dropout);
    struct grads g1, g2;
    grads_alloc(&g1, &p);
    grads_alloc(&g2, &p);
    int64_t ny = (int64_t)N * C_out;
    float *y1 = falloc(ny);
    forward(&p);
    memcpy(y1, p.y, sizeof(float) * (size_t)ny);
    backward(&p, &g1);
    float *wsq = falloc(C_out);
    double *wsd = malloc(sizeof(double) * ref_dora_weight_norm_factored_workspace_size(C_out, R));
    ref_dora_weight_sq(wsq, p.w, C_in, C_out);
    ref_dora_weight_norm_factored(p.wn, wsq, p.w, p.a, p.b, C_in, C_out, R, p.scale, wsd);
    forward(&p);
    backward(&p, &g2);
    char shape[80];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d R=%d dropout=%d", N, C_in, C_out, R, dropout);
    /* Everything scales with m/n, whose two forms differ by ≤ (κ² + 3κ + 2)u relative (test_norms);
     * the outputs add a few roundings of their own: k = 4·(κ² + 3κ + 2) + 16 with the rms of each
     * result as floor (for y, the rms of its terms' magnitudes: y may cancel). */
    double kap = cancellation(&p, NULL), k = 4.0 * (kap * kap + 3.0 * kap + 2.0) + 16.0, mag;
    float *cf = falloc(ny);
    closed_form(cf, &mag, &p);
    free(cf);
    struct cmp_case c = {"dora direct vs factored", "y", shape, "f32", g_seed};
    cmp_elementwise(&c, p.y, y1, ny, FLT_EPSILON, k, mag, NULL);
    c.what = "dx";
    cmp_elementwise(&c, g2.dx, g1.dx, (int64_t)N * C_in, FLT_EPSILON, k, cmp_rms(g1.dx, (int64_t)N * C_in), NULL);
    c.what = "dm";
    cmp_elementwise(&c, g2.dm, g1.dm, C_out, FLT_EPSILON, k, cmp_rms(g1.dm, C_out), NULL);
    c.what = "dA";
    cmp_elementwise(&c, g2.da, g1.da, (int64_t)R * C_in, FLT_EPSILON, k, cmp_rms(g1.da, (int64_t)R * C_in), NULL);
    c.what = "dB";
    cmp_elementwise(&c, g2.db, g1.db, (int64_t)C_out * R, FLT_EPSILON, k, cmp_rms(g1.db, (int64_t)C_out * R),
                    NULL);
    free(y1), free(wsq), free(wsd);
    grads_free(&g1), grads_free(&g2);
    problem_free(&p);
}

/* Central differences with n held fixed (the detached norm): x, m, A, B. */
static void test_gradients(int N, int C_in, int C_out, int R, int dropout) {
    struct problem p;
    problem_init(&p, N, C_in, C_out, R, dropout, g_seed * 5 + (uint64_t)(N * 100 + C_in + R + dropout));
    struct grads gr;
    grads_alloc(&gr, &p);
    forward(&p);
    backward(&p, &gr);
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d R=%d dropout=%d", N, C_in, C_out, R, dropout);
    struct cmp_case c = {"dora_backward", "dx (base + adapter)", shape, "f32", g_seed};
    gradcheck(&c, fd_loss, &p, p.x, gr.dx, (int64_t)N * C_in, 48, g_seed, 1e-2, 2e-3);
    c.what = "dm";
    gradcheck(&c, fd_loss, &p, p.mag, gr.dm, C_out, 48, g_seed, 1e-2, 2e-3);
    c.what = "dA";
    gradcheck(&c, fd_loss, &p, p.a, gr.da, (int64_t)R * C_in, 48, g_seed, 1e-2, 2e-3);
    c.what = "dB";
    gradcheck(&c, fd_loss, &p, p.b, gr.db, (int64_t)C_out * R, 48, g_seed, 1e-2, 2e-3);

    /* Parameter gradients accumulate (a second pass doubles them exactly); NULL skips. */
    float *ws = falloc((int64_t)ref_dora_backward_workspace_size(N, C_out, R));
    float *dm2 = falloc(C_out);
    memcpy(dm2, gr.dm, sizeof(float) * (size_t)C_out);
    ref_dora_backward(NULL, dm2, NULL, NULL, p.g, p.x, p.keep ? p.xd : NULL, p.keep, p.keep_scale, p.u, p.w, p.a, p.b,
                      p.mag, p.wn, N, C_in, C_out, R, p.scale, ACT_F32, ws);
    for (int o = 0; o < C_out; o++) gr.dm[o] = gr.dm[o] + gr.dm[o];
    c.what = "dm accumulates";
    cmp_exact_f32(&c, dm2, gr.dm, C_out);

    /* ACT_BF16: stored activations are bf16 values. */
    ref_dora_forward(p.y, p.u, p.x, p.keep ? p.xd : NULL, p.w, p.bias, p.a, p.b, p.mag, p.wn, N, C_in, C_out, R,
                     p.scale, ACT_BF16);
    int64_t not_bf16 = 0;
    for (int64_t j = 0; j < (int64_t)N * C_out; j++) not_bf16 += bf16_round(p.y[j]) != p.y[j];
    for (int64_t j = 0; j < (int64_t)N * R; j++) not_bf16 += bf16_round(p.u[j]) != p.u[j];
    EXPECT(not_bf16 == 0, "dora %s: %lld bf16-mode activations are not bf16 values", shape, (long long)not_bf16);
    free(ws), free(dm2);
    grads_free(&gr);
    problem_free(&p);
}

/* ref_dora_rescale from the output y = mns⊙z (DORA_SAVED_Y, dm = Σ dy·y / m) against from z
 * (dm = Σ dy·z / n). With mns = 2^k (m = n·2^k) y is exact in fp32 and every double product and sum
 * scales by 2^k exactly, so both give the same bits. With a general mns, y = fp32(mns·z) and mns
 * itself are each one rounding off: each term of y/m is within 2·2⁻²⁴ of z/n, and each side's fp32
 * result one more rounding: |dm_y − dm_z| ≤ FLT_EPSILON·(Σ_n |dy·z|/n + |dm_z|). dy_s is the same
 * formula either way. */
static void test_rescale_from_y(int N, int C_out) {
    struct rng r;
    rng_init(&r, g_seed * 31u + (uint64_t)N * 7919u + (uint64_t)C_out);
    const int64_t n = (int64_t)N * C_out;
    float *z = falloc(n), *y = falloc(n), *dy = falloc(n), *dys_z = falloc(n), *dys_y = falloc(n);
    float *mag = falloc(C_out), *wn = falloc(C_out), *dm0 = falloc(C_out), *dm_z = falloc(C_out), *dm_y = falloc(C_out);
    rng_fill_normal(&r, z, n, 0.0, 1.0);
    rng_fill_normal(&r, dy, n, 0.0, 1.0);
    rng_fill_uniform(&r, wn, C_out, 0.5, 2.0);
    rng_fill_normal(&r, dm0, C_out, 0.0, 1.0);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C_out=%d", N, C_out);
    for (int general = 0; general < 2; general++) {
        for (int o = 0; o < C_out; o++) {
            const int k = rng_int(&r, 3) - 1;
            mag[o] = general ? wn[o] * (float)(1.0 + 0.1 * rng_normal(&r)) : ldexpf(wn[o], k);
        }
        for (int64_t j = 0; j < n; j++) y[j] = (mag[j % C_out] / wn[j % C_out]) * z[j];
        memcpy(dm_z, dm0, sizeof(float) * (size_t)C_out);
        memcpy(dm_y, dm0, sizeof(float) * (size_t)C_out);
        ref_dora_rescale(dys_z, dm_z, dy, z, DORA_SAVED_Z, mag, wn, N, C_out, ACT_F32);
        ref_dora_rescale(dys_y, dm_y, dy, y, DORA_SAVED_Y, mag, wn, N, C_out, ACT_F32);
        struct cmp_case cc = {"dora_rescale", "dy_s (from y vs from z)", shape, "f32", g_seed};
        cmp_exact_f32(&cc, dys_y, dys_z, n);
        if (!general) {
            cc.what = "dmag from y vs from z, mns = 2^k";
            cmp_exact_f32(&cc, dm_y, dm_z, C_out);
            continue;
        }
        int64_t bad = 0;
        for (int o = 0; o < C_out; o++) {
            double t = 0.0;
            for (int q = 0; q < N; q++) t += fabs((double)dy[(int64_t)q * C_out + o] * z[(int64_t)q * C_out + o]);
            bad += fabs((double)dm_y[o] - dm_z[o]) > FLT_EPSILON * (t / wn[o] + fabs((double)dm_z[o]));
        }
        EXPECT(bad == 0, "dora_rescale %s: %lld magnitude gradients from y off those from z by more than the bound",
               shape, (long long)bad);
    }
    free(z), free(y), free(dy), free(dys_z), free(dys_y), free(mag), free(wn), free(dm0), free(dm_z), free(dm_y);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261125);
    test_hand_case();
    const int shapes[][4] = {{1, 1, 1, 1}, {3, 5, 7, 2}, {7, 33, 17, 4}, {5, 64, 96, 8}, {9, 130, 67, 3}, {3, 600, 5, 2}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int *d = shapes[s];
        test_norms(d[1], d[2], d[3]);
        for (int dropout = 0; dropout < 2; dropout++) {
            test_identity_at_init(d[0], d[1], d[2], d[3], dropout);
            test_closed_form(d[0], d[1], d[2], d[3], dropout);
            test_direct_vs_factored(d[0], d[1], d[2], d[3], dropout);
            test_gradients(d[0], d[1], d[2], d[3], dropout);
        }
    }
    const int rs[][2] = {{1, 1}, {7, 5}, {300, 33}, {64, 576}};
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) test_rescale_from_y(rs[i][0], rs[i][1]);
    return test_finish("dora_test");
}
