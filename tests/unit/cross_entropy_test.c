/* cross_entropy_test.c — ref/cross_entropy against mathematics: a hand case, softmax rows summing
 * to 1, the fused chunked form against the plain unchunked one for many chunk sizes (including
 * ones that divide neither N nor V), micro-batch accumulation with the global valid count, large
 * logits, the bf16 rounding points, finite differences of both forms.
 *
 *   bazel test //tests/unit:cross_entropy_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/cross_entropy.h"
#include "tests/common/compare.h"
#include "tests/common/gradcheck.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

/* V = 2. Row 0: z = [0, ln 3], y = 1 → p = [1/4, 3/4], nll = ln(4/3). Row 1: z = [2, 2], y = 0 →
 * nll = ln 2. Row 2 ignored. Mean over 2 valid rows; dz = (p − onehot)/2 (0 for row 2). With a
 * global count of 4 (other micro-batches hold 2 more valid labels) everything halves. */
static void test_hand_case(void) {
    const float z[6] = {0.0f, (float)log(3.0), 2.0f, 2.0f, 5.0f, -1.0f};
    const int32_t y[3] = {1, 0, REF_IGNORE_INDEX};
    EXPECT(ref_cross_entropy_count_valid(y, 3) == 2, "count_valid");
    double loss;
    float lse[3], dz[6];
    ref_cross_entropy_forward(&loss, lse, z, y, 3, 2, 2);
    double want = (log(4.0 / 3.0) + log(2.0)) / 2.0;
    /* z[1] is ln 3 rounded to fp32: nll moves by ≤ 3/4·ε_f32·ln 3 */
    EXPECT(fabs(loss - want) <= 2 * FLT_EPSILON, "loss %.12g expected %.12g", loss, want);
    EXPECT(fabs(lse[1] - (2.0 + log(2.0))) <= 2 * FLT_EPSILON * 3, "lse[1] %.9g", (double)lse[1]);
    ref_cross_entropy_backward(dz, z, y, 3, 2, 2, 1.0f, ACT_F32);
    const double wd[6] = {0.125, -0.125, -0.25, 0.25, 0, 0};
    for (int i = 0; i < 6; i++)
        EXPECT(fabs(dz[i] - wd[i]) <= 4 * FLT_EPSILON * 0.25, "dz[%d] %.9g expected %.9g", i, (double)dz[i], wd[i]);
    ref_cross_entropy_forward(&loss, NULL, z, y, 3, 2, 4);
    EXPECT(fabs(loss - want / 2) <= FLT_EPSILON, "loss with global count 4: %.12g expected %.12g", loss, want / 2);
    ref_cross_entropy_backward(dz, z, y, 3, 2, 4, 2.0f, ACT_F32); /* grad_scale 2 undoes the halving */
    for (int i = 0; i < 6; i++)
        EXPECT(fabs(dz[i] - wd[i]) <= 4 * FLT_EPSILON * 0.25, "scaled dz[%d] %.9g expected %.9g", i, (double)dz[i],
               wd[i]);

    /* The fused form on the same logits: hidden = identity rows (C = 2), W = z's columns. */
    const float h[6] = {1, 0, 0, 1, 0.5f, 0.5f};
    float wt[4] = {0.0f, 2.0f, (float)log(3.0), 2.0f}; /* W (V=2, C=2): z[n] = h[n]·Wᵀ */
    double lf;
    double ws[64];
    ref_cross_entropy_fused(&lf, NULL, NULL, h, wt, y, 2, 2, 2, 2, 1.0f, 1, 1, ACT_F32, ws);
    EXPECT(fabs(lf - want) <= 2 * FLT_EPSILON, "fused loss %.12g expected %.12g", lf, want);
}

static float *alloc_f(int64_t n) { return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1)); }

/* Random problem: hidden (N, C), W (V, C), labels with ~1/4 ignored (at least one valid). */
struct problem {
    int N, C, V;
    float *h, *w;
    int32_t *y;
};

static void make_problem(struct problem *p, int N, int C, int V, double wstd, enum act_dtype act, uint64_t seed) {
    struct rng r;
    rng_init(&r, seed);
    p->N = N, p->C = C, p->V = V;
    p->h = alloc_f((int64_t)N * C), p->w = alloc_f((int64_t)V * C);
    p->y = malloc(sizeof(int32_t) * (size_t)(N > 0 ? N : 1));
    rng_fill_normal(&r, p->h, (int64_t)N * C, 0.0, 1.0);
    rng_fill_normal(&r, p->w, (int64_t)V * C, 0.0, wstd);
    if (act == ACT_BF16) {
        for (int64_t j = 0; j < (int64_t)N * C; j++) p->h[j] = bf16_round(p->h[j]);
        for (int64_t j = 0; j < (int64_t)V * C; j++) p->w[j] = bf16_round(p->w[j]);
    }
    for (int n = 0; n < N; n++) p->y[n] = (rng_int(&r, 4) == 0 && n > 0) ? REF_IGNORE_INDEX : rng_int(&r, V);
}

static void free_problem(struct problem *p) { free(p->h), free(p->w), free(p->y); }

/* Unchunked oracle: logits by the naive GEMM (double sums, rounded like the fused tile), plain CE,
 * dhidden = act(dz·W) and dW += dzᵀ·h in double. */
static void oracle(double *loss, float *dh, float *dw, const struct problem *p, int64_t n_valid, float gs,
                   enum act_dtype act) {
    int N = p->N, C = p->C, V = p->V;
    float *z = alloc_f((int64_t)N * V);
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) {
            double a = 0;
            for (int c = 0; c < C; c++) a += (double)p->h[(int64_t)n * C + c] * p->w[(int64_t)v * C + c];
            z[(int64_t)n * V + v] = act == ACT_BF16 ? bf16_round((float)a) : (float)a;
        }
    ref_cross_entropy_forward(loss, NULL, z, p->y, N, V, n_valid);
    ref_cross_entropy_backward(z, z, p->y, N, V, n_valid, gs, act); /* in place: dz */
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double a = 0;
            for (int v = 0; v < V; v++) a += (double)z[(int64_t)n * V + v] * p->w[(int64_t)v * C + c];
            dh[(int64_t)n * C + c] = act == ACT_BF16 ? bf16_round((float)a) : (float)a;
        }
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++) {
            double a = 0;
            for (int n = 0; n < N; n++) a += (double)z[(int64_t)n * V + v] * p->h[(int64_t)n * C + c];
            dw[(int64_t)v * C + c] += (float)a;
        }
    free(z);
}

static double rms(const float *x, int64_t n) {
    double s = 0;
    for (int64_t j = 0; j < n; j++) s += (double)x[j] * x[j];
    return n > 0 ? sqrt(s / n) : 0;
}

/* Fused at many chunkings == the unchunked oracle. */
static void test_chunked(int N, int C, int V, enum act_dtype act) {
    struct problem p;
    make_problem(&p, N, C, V, 0.7, act, g_seed + (uint64_t)(N * 10007 + V * 13 + C) + act);
    int64_t nv = ref_cross_entropy_count_valid(p.y, N) + 3; /* other micro-batches hold 3 more */
    const float gs = 1.5f;
    double lo;
    float *dho = alloc_f((int64_t)N * C), *dwo = alloc_f((int64_t)V * C);
    float *dh = alloc_f((int64_t)N * C), *dw = alloc_f((int64_t)V * C);
    for (int64_t j = 0; j < (int64_t)V * C; j++) dwo[j] = 0.25f; /* accumulation from a nonzero start */
    oracle(&lo, dho, dwo, &p, nv, gs, act);
    /* the softmax of each valid row sums to 1: Σ_v dz = gs/nv·(Σp − 1) = 0, seen through dhidden
     * only indirectly; checked directly on the plain form in test_softmax_rows. */
    const int nch[] = {1, 3, N, N + 5}, vch[] = {1, 5, 13, V, V + 3};
    const char *dt = act == ACT_BF16 ? "bf16" : "f32";
    const double eps = act == ACT_BF16 ? BF16_EPS : FLT_EPSILON;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 5; b++) {
            size_t wsz = ref_cross_entropy_fused_workspace_size(nch[a], vch[b], C);
            struct guarded gws, gdh;
            void *ws = guarded_alloc(&gws, wsz);
            float *dhg = guarded_alloc(&gdh, sizeof(float) * (size_t)N * C);
            poison_f32(dhg, (int64_t)N * C);
            for (int64_t j = 0; j < (int64_t)V * C; j++) dw[j] = 0.25f;
            double lf;
            ref_cross_entropy_fused(&lf, dhg, dw, p.h, p.w, p.y, N, C, V, nv, gs, nch[a], vch[b], act, ws);
            guarded_check(&gws, "cross_entropy workspace");
            guarded_check(&gdh, "cross_entropy dhidden");
            EXPECT(count_poison_f32(dhg, (int64_t)N * C) == 0, "dhidden not fully written");
            memcpy(dh, dhg, sizeof(float) * (size_t)N * C);
            guarded_free(&gws), guarded_free(&gdh);
            char shape[96];
            snprintf(shape, sizeof shape, "N=%d C=%d V=%d n_chunk=%d v_chunk=%d", N, C, V, nch[a], vch[b]);
            /* loss: the same logits, lse online vs two-pass, in double: ~V·1e-16 relative */
            EXPECT(fabs(lf - lo) <= 1e-12 * (fabs(lo) + 1), "%s %s: loss %.15g vs unchunked %.15g", shape, dt, lf, lo);
            /* dz may differ in its last fp32/bf16 bit where exp(z − lse) straddles a rounding
             * boundary (lse differs by double rounding); dhidden and dW are sums of such terms
             * (tier b, k = 2 roundings of the result dtype; floor = rms of the reference because
             * the sums cancel: Σ_v dz = 0). */
            struct cmp_case ch = {"cross_entropy_fused", "dhidden vs unchunked (tier b, k=2)", shape, dt, g_seed};
            struct cmp_case cw = {"cross_entropy_fused", "dW vs unchunked (tier b, k=2)", shape, dt, g_seed};
            cmp_elementwise(&ch, dh, dho, (int64_t)N * C, eps, 2.0, rms(dho, (int64_t)N * C), NULL);
            cmp_elementwise(&cw, dw, dwo, (int64_t)V * C, eps, 2.0, rms(dwo, (int64_t)V * C), NULL);
        }
    /* Without gradients only the loss is computed, the same value. */
    void *ws = malloc(ref_cross_entropy_fused_workspace_size(4, 7, C));
    double l2;
    ref_cross_entropy_fused(&l2, NULL, NULL, p.h, p.w, p.y, N, C, V, nv, gs, 4, 7, act, ws);
    EXPECT(fabs(l2 - lo) <= 1e-12 * (fabs(lo) + 1), "loss-only %.15g vs %.15g", l2, lo);
    free(ws), free(dho), free(dwo), free(dh), free(dw);
    free_problem(&p);
}

/* Splitting the batch into micro-batches with the global count: losses add up to the batch mean,
 * dW accumulates to the batch gradient, dhidden rows are the batch's. */
static void test_microbatches(void) {
    const int N = 17, C = 6, V = 23, split = 8;
    struct problem p;
    make_problem(&p, N, C, V, 1.0, ACT_F32, g_seed + 5);
    int64_t nv = ref_cross_entropy_count_valid(p.y, N);
    size_t wsz = ref_cross_entropy_fused_workspace_size(5, 6, C);
    void *ws = malloc(wsz);
    float *dh = alloc_f((int64_t)N * C), *dw = calloc((size_t)V * C, sizeof(float));
    float *dh2 = alloc_f((int64_t)N * C), *dw2 = calloc((size_t)V * C, sizeof(float));
    double l, la, lb;
    ref_cross_entropy_fused(&l, dh, dw, p.h, p.w, p.y, N, C, V, nv, 1.0f, 5, 6, ACT_F32, ws);
    ref_cross_entropy_fused(&la, dh2, dw2, p.h, p.w, p.y, split, C, V, nv, 1.0f, 5, 6, ACT_F32, ws);
    ref_cross_entropy_fused(&lb, dh2 + split * C, dw2, p.h + split * C, p.w, p.y + split, N - split, C, V, nv, 1.0f,
                            5, 6, ACT_F32, ws);
    EXPECT(fabs(la + lb - l) <= 1e-13 * fabs(l), "micro-batch losses %.15g + %.15g vs batch %.15g", la, lb, l);
    struct cmp_case ch = {"cross_entropy_fused", "dhidden by micro-batch", "N=17(8+9) C=6 V=23", "f32", g_seed};
    cmp_exact_f32(&ch, dh2, dh, (int64_t)N * C); /* dhidden is per row: identical */
    struct cmp_case cw = {"cross_entropy_fused", "dW by micro-batch (tier b, k=2)", "N=17(8+9) C=6 V=23", "f32",
                          g_seed};
    cmp_elementwise(&cw, dw2, dw, (int64_t)V * C, FLT_EPSILON, 2.0, rms(dw, (int64_t)V * C), NULL);
    free(ws), free(dh), free(dw), free(dh2), free(dw2);
    free_problem(&p);
}

/* Plain form: Σ_v exp(z − lse) = 1 per row; Σ_v dz = 0 on valid rows; ignored rows get dz = 0;
 * a shift of a row by a constant changes nothing; huge logits stay finite. */
static void test_softmax_rows(int N, int V) {
    struct rng r;
    rng_init(&r, g_seed + 11 + (uint64_t)V);
    float *z = alloc_f((int64_t)N * V), *dz = alloc_f((int64_t)N * V), *lse = alloc_f(N);
    int32_t *y = malloc(sizeof(int32_t) * N);
    rng_fill_normal(&r, z, (int64_t)N * V, 0.0, 4.0);
    for (int n = 0; n < N; n++) y[n] = n % 3 == 2 ? REF_IGNORE_INDEX : rng_int(&r, V);
    int64_t nv = ref_cross_entropy_count_valid(y, N);
    double loss;
    ref_cross_entropy_forward(&loss, lse, z, y, N, V, nv);
    ref_cross_entropy_backward(dz, z, y, N, V, nv, (float)nv, ACT_F32); /* gs = nv: dz = p − onehot */
    int bad_sum = 0, bad_dz = 0, bad_ign = 0;
    for (int n = 0; n < N; n++) {
        double s = 0, sd = 0, sa = 0;
        for (int v = 0; v < V; v++) {
            double p = exp((double)z[(int64_t)n * V + v] - lse[n]);
            s += p;
            sd += dz[(int64_t)n * V + v], sa += fabs(dz[(int64_t)n * V + v]);
            if (y[n] == REF_IGNORE_INDEX) bad_ign += dz[(int64_t)n * V + v] != 0.0f;
        }
        /* lse stored in fp32: exp(z − lse) carries a relative error ≤ ε·|lse| */
        bad_sum += fabs(s - 1.0) > 2 * FLT_EPSILON * (fabs(lse[n]) + 1);
        if (y[n] != REF_IGNORE_INDEX) bad_dz += fabs(sd) > 2 * FLT_EPSILON * sa + 1e-30;
    }
    EXPECT(bad_sum == 0, "V=%d: %d softmax rows do not sum to 1", V, bad_sum);
    EXPECT(bad_dz == 0, "V=%d: %d gradient rows do not sum to 0", V, bad_dz);
    EXPECT(bad_ign == 0, "V=%d: %d nonzero gradients on ignored rows", V, bad_ign);

    /* Shift invariance with a power-of-two shift (exact in fp32 for these magnitudes) and huge
     * logits: z + 1024. */
    float *zs = alloc_f((int64_t)N * V);
    for (int64_t j = 0; j < (int64_t)N * V; j++) zs[j] = z[j] + 1024.0f;
    double ls;
    ref_cross_entropy_forward(&ls, NULL, zs, y, N, V, nv);
    /* z + 1024 rounds each logit to a multiple of 2^-13: nll moves by ≤ 2^-13 per row */
    EXPECT(isfinite(ls) && fabs(ls - loss) <= 2 * 0x1p-13, "shifted loss %.12g vs %.12g", ls, loss);
    free(z), free(dz), free(lse), free(y), free(zs);
}

/* bf16: the fused form equals the plain form on bf16-rounded logits; dhidden is bf16. */
static void test_bf16(void) {
    const int N = 9, C = 16, V = 41;
    struct problem p;
    make_problem(&p, N, C, V, 0.5, ACT_BF16, g_seed + 17);
    int64_t nv = ref_cross_entropy_count_valid(p.y, N);
    float *z = alloc_f((int64_t)N * V);
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) {
            double a = 0;
            for (int c = 0; c < C; c++) a += (double)p.h[n * C + c] * p.w[v * C + c];
            z[n * V + v] = bf16_round((float)a);
        }
    double lp, lf;
    ref_cross_entropy_forward(&lp, NULL, z, p.y, N, V, nv);
    void *ws = malloc(ref_cross_entropy_fused_workspace_size(4, 10, C));
    float *dh = alloc_f((int64_t)N * C), *dw = calloc((size_t)V * C, sizeof(float));
    ref_cross_entropy_fused(&lf, dh, dw, p.h, p.w, p.y, N, C, V, nv, 1.0f, 4, 10, ACT_BF16, ws);
    EXPECT(fabs(lf - lp) <= 1e-12 * fabs(lp), "bf16 fused loss %.15g vs plain on bf16 logits %.15g", lf, lp);
    int64_t not_bf16 = 0;
    for (int64_t j = 0; j < (int64_t)N * C; j++) not_bf16 += bf16_round(dh[j]) != dh[j];
    EXPECT(not_bf16 == 0, "%lld dhidden values are not bf16", (long long)not_bf16);
    free(z), free(ws), free(dh), free(dw);
    free_problem(&p);
}

/* A micro-batch whose labels are all ignored (the batch has valid labels elsewhere): its loss
 * contribution is 0, dhidden is 0 and dW is untouched; an empty micro-batch (N = 0) too. */
static void test_all_ignored(void) {
    const int N = 4, C = 5, V = 9;
    struct problem p;
    make_problem(&p, N, C, V, 1.0, ACT_F32, g_seed + 29);
    for (int n = 0; n < N; n++) p.y[n] = REF_IGNORE_INDEX;
    void *ws = malloc(ref_cross_entropy_fused_workspace_size(3, 4, C));
    float dh[20], dw[45], dw0[45];
    for (int j = 0; j < 45; j++) dw[j] = dw0[j] = (float)j * 0.5f;
    for (int j = 0; j < 20; j++) dh[j] = 1.0f;
    double l = -1;
    ref_cross_entropy_fused(&l, dh, dw, p.h, p.w, p.y, N, C, V, 7, 1.0f, 3, 4, ACT_F32, ws);
    EXPECT(l == 0.0, "all-ignored micro-batch loss %.9g, expected 0", l);
    int nz = 0;
    for (int j = 0; j < 20; j++) nz += dh[j] != 0.0f;
    EXPECT(nz == 0, "%d dhidden entries of ignored rows are not 0", nz);
    struct cmp_case cw = {"cross_entropy_fused", "dW after an all-ignored micro-batch", "N=4 C=5 V=9", "f32", g_seed};
    cmp_exact_f32(&cw, dw, dw0, 45);
    l = -1;
    ref_cross_entropy_fused(&l, dh, dw, p.h, p.w, p.y, 0, C, V, 7, 1.0f, 3, 4, ACT_F32, ws);
    EXPECT(l == 0.0, "empty micro-batch loss %.9g, expected 0", l);
    float lse[4];
    ref_cross_entropy_forward(&l, lse, p.h, p.y, N, C, 3); /* plain form, logits = h (N, C = V') */
    EXPECT(l == 0.0, "plain all-ignored loss %.9g, expected 0", l);
    free(ws);
    free_problem(&p);
}

struct fd_plain {
    int N, V;
    int64_t nv;
    float *z;
    const int32_t *y;
};

static double fd_plain_loss(void *v) {
    struct fd_plain *c = v;
    double l;
    ref_cross_entropy_forward(&l, NULL, c->z, c->y, c->N, c->V, c->nv);
    return l;
}

struct fd_fused {
    struct problem *p;
    int64_t nv;
    void *ws;
};

static double fd_fused_loss(void *v) {
    struct fd_fused *c = v;
    double l;
    ref_cross_entropy_fused(&l, NULL, NULL, c->p->h, c->p->w, c->p->y, c->p->N, c->p->C, c->p->V, c->nv, 1.0f, 3, 7,
                            ACT_F32, c->ws);
    return l;
}

static void test_gradients(int N, int C, int V) {
    struct problem p;
    make_problem(&p, N, C, V, 1.0, ACT_F32, g_seed * 3 + (uint64_t)(N + C + V));
    int64_t nv = ref_cross_entropy_count_valid(p.y, N);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d V=%d", N, C, V);
    /* plain: d loss / d z */
    struct rng r;
    rng_init(&r, g_seed + 23);
    struct fd_plain cp = {N, V, nv, alloc_f((int64_t)N * V), p.y};
    rng_fill_normal(&r, cp.z, (int64_t)N * V, 0.0, 2.0);
    float *dz = alloc_f((int64_t)N * V);
    ref_cross_entropy_backward(dz, cp.z, p.y, N, V, nv, 1.0f, ACT_F32);
    struct cmp_case cz = {"cross_entropy_backward", "dlogits", shape, "f32", g_seed};
    gradcheck(&cz, fd_plain_loss, &cp, cp.z, dz, (int64_t)N * V, 96, g_seed, 1e-3, 2e-3);
    /* fused: d loss / d hidden and d loss / d W */
    struct fd_fused cf = {&p, nv, malloc(ref_cross_entropy_fused_workspace_size(3, 7, C))};
    float *dh = alloc_f((int64_t)N * C), *dw = calloc((size_t)V * C, sizeof(float));
    double l;
    ref_cross_entropy_fused(&l, dh, dw, p.h, p.w, p.y, N, C, V, nv, 1.0f, 3, 7, ACT_F32, cf.ws);
    struct cmp_case ch = {"cross_entropy_fused", "dhidden", shape, "f32", g_seed};
    struct cmp_case cw = {"cross_entropy_fused", "dW", shape, "f32", g_seed};
    gradcheck(&ch, fd_fused_loss, &cf, p.h, dh, (int64_t)N * C, 96, g_seed, 1e-3, 2e-3);
    gradcheck(&cw, fd_fused_loss, &cf, p.w, dw, (int64_t)V * C, 96, g_seed, 1e-3, 2e-3);
    free(cp.z), free(dz), free(cf.ws), free(dh), free(dw);
    free_problem(&p);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261127);
    test_hand_case();
    test_chunked(1, 1, 1, ACT_F32);
    test_chunked(11, 9, 37, ACT_F32);
    test_chunked(11, 9, 37, ACT_BF16);
    test_chunked(7, 33, 130, ACT_F32);
    test_microbatches();
    test_softmax_rows(5, 1);
    test_softmax_rows(7, 129);
    test_softmax_rows(3, 1000);
    test_bf16();
    test_all_ignored();
    test_gradients(5, 3, 11);
    test_gradients(9, 7, 19);
    return test_finish("cross_entropy_test");
}
