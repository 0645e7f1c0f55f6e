/* attention_test.c — ref/attention (naive and flash) against mathematics and against each other.
 *
 *   bazel test //tests/unit:attention_test        (replay: --test_arg=--seed=N)
 *   attention_test --bench                        (times the flash reference at B=1 T=512 H=8 D=64)
 *
 * Checks: a hand-computed case; softmax rows sum to 1 (from lse and from the naive P); outputs are
 * convex combinations of v; naive and flash agree, forward and backward, over block sizes 1, odd,
 * non-divisors of T and larger than T, T = 1, GQA ratios 1, 3, 4, odd D and D = 64; the flash
 * backward is bitwise independent of the block sizes and the flash forward of block_q;
 * central differences in double for dq, dk, dv of both implementations on small awkward shapes;
 * ACT_BF16: every output is a bf16 value, and flash-bf16's error against the fp32 oracle is at
 * most 2× naive-bf16's (STYLE tier (c)). Outputs and workspaces are poisoned and guarded.
 *
 * Timing of the flash reference (the oracle of the GPU parity tests at that size), B=1 T=512 H=8
 * D=64, block 64×64, ACT_F32, one thread, -O2 without sanitizers (attention_test --bench, three
 * runs each; both machines were shared, hence the spread):
 *   development machine (2 cores, load ≈ 8):  forward 0.21–0.57 s, backward 0.51–1.21 s
 *   GPU host CPU (Xeon, 16 cores):             forward 0.16–0.35 s, backward 0.36–1.21 s
 *   (KVH = 8 and KVH = 2 alike.) So about 1 s per forward + backward at that size. The naive
 *   form costs about the same (development machine: forward 0.23–0.47 s, backward 0.26–0.61 s)
 *   and needs 4·B·H·T² bytes of workspace (8 MiB here).
 * The whole test runs in about 1 s (1.5 s under ASan or UBSan).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ref/attention.h"
#include "ref/bf16.h"
#include "tests/common/compare.h"
#include "tests/common/gradcheck.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

struct shape {
    int B, T, H, KVH, D;
};

static int64_t nq_of(struct shape s) { return (int64_t)s.B * s.T * s.H * s.D; }
static int64_t nk_of(struct shape s) { return (int64_t)s.B * s.T * s.KVH * s.D; }
static int64_t nl_of(struct shape s) { return (int64_t)s.B * s.H * s.T; }

static float *alloc_f(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static double max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

static void round_bf16(float *x, int64_t n) { bf16_round_array(x, x, n); }

/* ---------------------------------------------------------------------------------------- */
/* Hand case: B=1 T=2 H=KVH=1 D=1, scale 1, q = [1, 2], k = [0.5, 1], v = [3, −1], dout = [1, 1].
 *   row 0 sees key 0 only: lse0 = s00 = 0.5, out0 = 3.
 *   row 1: s10 = 1, s11 = 2; lse1 = log(e + e²) = 1 + log(1 + e); p10 = 1/(1+e), p11 = e/(1+e);
 *          out1 = (3 − e)/(1 + e).
 *   Δ0 = out0 = 3, Δ1 = out1; dp[i][j] = v[j] (dout = 1): dp00 = dp10 = 3, dp11 = −1.
 *   ds00 = 1·(3 − 3) = 0, ds10 = p10·(3 − out1), ds11 = p11·(−1 − out1).
 *   dq0 = 0, dq1 = ds10·k0 + ds11·k1;  dk0 = ds00·q0 + ds10·q1 = 2·ds10, dk1 = 2·ds11;
 *   dv0 = p00 + p10 = 1 + p10, dv1 = p11. */
static void test_hand_case(void) {
    const float q[2] = {1.0f, 2.0f}, k[2] = {0.5f, 1.0f}, v[2] = {3.0f, -1.0f}, g[2] = {1.0f, 1.0f};
    const double e = exp(1.0);
    const double p10 = 1.0 / (1.0 + e), p11 = e / (1.0 + e), out1 = (3.0 - e) / (1.0 + e);
    const double ds10 = p10 * (3.0 - out1), ds11 = p11 * (-1.0 - out1);
    const double ex_out[2] = {3.0, out1}, ex_lse[2] = {0.5, 1.0 + log(1.0 + e)};
    const double ex_dq[2] = {0.0, 0.5 * ds10 + ds11}, ex_dk[2] = {2.0 * ds10, 2.0 * ds11}, ex_dv[2] = {1.0 + p10, p11};
    for (int impl = 0; impl < 2; impl++) {
        float out[2], lse[2], dq[2], dk[2], dv[2], ws[4];
        if (impl == 0) {
            ref_attention_naive_forward(out, lse, q, k, v, 1, 2, 1, 1, 1, 1.0f, ACT_F32, ws);
            EXPECT(ws[1] == 0.0f, "naive P above the diagonal is %g, expected 0", (double)ws[1]);
            ref_attention_naive_backward(dq, dk, dv, g, q, k, v, out, 1, 2, 1, 1, 1, 1.0f, ACT_F32, ws);
        } else {
            ref_attention_flash_forward(out, lse, q, k, v, 1, 2, 1, 1, 1, 1.0f, 1, 1, ACT_F32);
            ref_attention_flash_backward(dq, dk, dv, g, q, k, v, out, lse, 1, 2, 1, 1, 1, 1.0f, 1, 1, ACT_F32, ws);
        }
        const char *name = impl == 0 ? "naive" : "flash";
        /* Each value is a few double operations and one fp32 store (and p through fp32 P in the
         * naive backward): 4 fp32 ulps of the largest magnitude (≈ 3) bound them all. */
        const double tol = 4.0 * FLT_EPSILON * 3.0;
        for (int t = 0; t < 2; t++) {
            EXPECT(fabs(out[t] - ex_out[t]) <= tol, "%s out[%d] %.9g expected %.9g", name, t, (double)out[t],
                   ex_out[t]);
            EXPECT(fabs(lse[t] - ex_lse[t]) <= tol, "%s lse[%d] %.9g expected %.9g", name, t, (double)lse[t],
                   ex_lse[t]);
            EXPECT(fabs(dq[t] - ex_dq[t]) <= tol, "%s dq[%d] %.9g expected %.9g", name, t, (double)dq[t], ex_dq[t]);
            EXPECT(fabs(dk[t] - ex_dk[t]) <= tol, "%s dk[%d] %.9g expected %.9g", name, t, (double)dk[t], ex_dk[t]);
            EXPECT(fabs(dv[t] - ex_dv[t]) <= tol, "%s dv[%d] %.9g expected %.9g", name, t, (double)dv[t], ex_dv[t]);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* One set of inputs and the outputs of both implementations (guarded, poisoned). */
struct run {
    struct shape s;
    float *q, *k, *v, *g;
    struct guarded go, gl, gdq, gdk, gdv, gws;
    float *out, *lse, *dq, *dk, *dv, *ws;
};

static void run_alloc(struct run *r, struct shape s, uint64_t seed, enum act_dtype inputs) {
    struct rng rg;
    rng_init(&rg, seed);
    r->s = s;
    int64_t nq = nq_of(s), nk = nk_of(s), nl = nl_of(s);
    r->q = alloc_f(nq), r->k = alloc_f(nk), r->v = alloc_f(nk), r->g = alloc_f(nq);
    rng_fill_normal(&rg, r->q, nq, 0.0, 1.0);
    rng_fill_normal(&rg, r->k, nk, 0.0, 1.0);
    rng_fill_normal(&rg, r->v, nk, 0.0, 1.0);
    rng_fill_normal(&rg, r->g, nq, 0.0, 1.0);
    if (inputs == ACT_BF16) round_bf16(r->q, nq), round_bf16(r->k, nk), round_bf16(r->v, nk), round_bf16(r->g, nq);
    r->out = guarded_alloc(&r->go, sizeof(float) * (size_t)nq);
    r->lse = guarded_alloc(&r->gl, sizeof(float) * (size_t)nl);
    r->dq = guarded_alloc(&r->gdq, sizeof(float) * (size_t)nq);
    r->dk = guarded_alloc(&r->gdk, sizeof(float) * (size_t)nk);
    r->dv = guarded_alloc(&r->gdv, sizeof(float) * (size_t)nk);
    size_t wsn = ref_attention_naive_workspace_size(s.B, s.T, s.H);
    size_t wsf = ref_attention_flash_backward_workspace_size(s.B, s.T, s.H);
    r->ws = guarded_alloc(&r->gws, wsn > wsf ? wsn : wsf);
}

static void run_poison(struct run *r) {
    poison_f32(r->out, nq_of(r->s)), poison_f32(r->lse, nl_of(r->s));
    poison_f32(r->dq, nq_of(r->s)), poison_f32(r->dk, nk_of(r->s)), poison_f32(r->dv, nk_of(r->s));
}

/* Every output written, nothing outside written. */
static void run_check_written(struct run *r, const char *what, size_t ws_bytes) {
    EXPECT(count_poison_f32(r->out, nq_of(r->s)) == 0, "%s: out not fully written", what);
    EXPECT(count_poison_f32(r->lse, nl_of(r->s)) == 0, "%s: lse not fully written", what);
    EXPECT(count_poison_f32(r->dq, nq_of(r->s)) == 0, "%s: dq not fully written", what);
    EXPECT(count_poison_f32(r->dk, nk_of(r->s)) == 0, "%s: dk not fully written", what);
    EXPECT(count_poison_f32(r->dv, nk_of(r->s)) == 0, "%s: dv not fully written", what);
    EXPECT(count_poison_f32(r->ws, (int64_t)(ws_bytes / sizeof(float))) == 0, "%s: workspace not fully written",
           what);
    guarded_check(&r->go, "out"), guarded_check(&r->gl, "lse"), guarded_check(&r->gdq, "dq");
    guarded_check(&r->gdk, "dk"), guarded_check(&r->gdv, "dv"), guarded_check(&r->gws, "workspace");
}

static void run_naive(struct run *r, enum act_dtype act) {
    struct shape s = r->s;
    const float scale = 1.0f / sqrtf((float)s.D);
    size_t wsb = ref_attention_naive_workspace_size(s.B, s.T, s.H);
    run_poison(r);
    poison_f32(r->ws, (int64_t)(wsb / sizeof(float)));
    ref_attention_naive_forward(r->out, r->lse, r->q, r->k, r->v, s.B, s.T, s.H, s.KVH, s.D, scale, act, r->ws);
    ref_attention_naive_backward(r->dq, r->dk, r->dv, r->g, r->q, r->k, r->v, r->out, s.B, s.T, s.H, s.KVH, s.D,
                                 scale, act, r->ws);
    run_check_written(r, "naive", wsb);
}

/* bwd_out, bwd_lse: what the backward reads (NULL: this run's own forward results). */
static void run_flash(struct run *r, int bq, int bk, enum act_dtype act, const float *bwd_out,
                      const float *bwd_lse) {
    struct shape s = r->s;
    const float scale = 1.0f / sqrtf((float)s.D);
    size_t wsb = ref_attention_flash_backward_workspace_size(s.B, s.T, s.H);
    run_poison(r);
    poison_f32(r->ws, (int64_t)(wsb / sizeof(float)));
    ref_attention_flash_forward(r->out, r->lse, r->q, r->k, r->v, s.B, s.T, s.H, s.KVH, s.D, scale, bq, bk, act);
    ref_attention_flash_backward(r->dq, r->dk, r->dv, r->g, r->q, r->k, r->v, bwd_out ? bwd_out : r->out,
                                 bwd_lse ? bwd_lse : r->lse, s.B, s.T, s.H, s.KVH, s.D, scale, bq, bk, act, r->ws);
    run_check_written(r, "flash", wsb);
}

static void run_free(struct run *r) {
    free(r->q), free(r->k), free(r->v), free(r->g);
    guarded_free(&r->go), guarded_free(&r->gl), guarded_free(&r->gdq), guarded_free(&r->gdk), guarded_free(&r->gdv);
    guarded_free(&r->gws);
}

/* Copies of the five outputs of a run. */
struct outs {
    float *out, *lse, *dq, *dk, *dv;
};

static struct outs outs_copy(const struct run *r) {
    struct outs o = {alloc_f(nq_of(r->s)), alloc_f(nl_of(r->s)), alloc_f(nq_of(r->s)), alloc_f(nk_of(r->s)),
                     alloc_f(nk_of(r->s))};
    memcpy(o.out, r->out, sizeof(float) * (size_t)nq_of(r->s));
    memcpy(o.lse, r->lse, sizeof(float) * (size_t)nl_of(r->s));
    memcpy(o.dq, r->dq, sizeof(float) * (size_t)nq_of(r->s));
    memcpy(o.dk, r->dk, sizeof(float) * (size_t)nk_of(r->s));
    memcpy(o.dv, r->dv, sizeof(float) * (size_t)nk_of(r->s));
    return o;
}

static void outs_free(struct outs *o) { free(o->out), free(o->lse), free(o->dq), free(o->dk), free(o->dv); }

static void shape_str(char *buf, size_t n, struct shape s, int bq, int bk) {
    snprintf(buf, n, "B=%d T=%d H=%d KVH=%d D=%d bq=%d bk=%d", s.B, s.T, s.H, s.KVH, s.D, bq, bk);
}

/* ---------------------------------------------------------------------------------------- */
/* Properties of the fp32 naive result: Σ_j exp(s_ij − lse_i) = 1 recomputed here from q, k and
 * lse; the rows of the stored P sum to 1; out lies in the per-dimension range of v[0..i]. */
static void check_properties(struct run *r) {
    struct shape s = r->s;
    const int G = s.H / s.KVH;
    const double scale = (double)(1.0f / sqrtf((float)s.D));
    char shp[96];
    shape_str(shp, sizeof shp, s, 0, 0);
    int64_t bad_lse = 0, bad_p = 0, bad_hull = 0;
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.H; h++)
            for (int i = 0; i < s.T; i++) {
                const float *qi = r->q + (((int64_t)b * s.T + i) * s.H + h) * s.D;
                const double L = r->lse[((int64_t)b * s.H + h) * s.T + i];
                double sum = 0, psum = 0;
                for (int j = 0; j <= i; j++) {
                    const float *kj = r->k + (((int64_t)b * s.T + j) * s.KVH + h / G) * s.D;
                    double dotv = 0;
                    for (int d = 0; d < s.D; d++) dotv += (double)qi[d] * kj[d];
                    sum += exp(scale * dotv - L);
                }
                /* Naive workspace: P row of (b, h, i). */
                for (int j = 0; j < s.T; j++) psum += r->ws[(((int64_t)b * s.H + h) * s.T + i) * s.T + j];
                /* lse in fp32 is off by ≤ ½ulp ≤ |L|·ε/2: the sum is off by a factor e^{±|L|ε/2};
                 * each of the i+1 fp32 P entries by ε/2 relatively. */
                bad_lse += !(fabs(sum - 1.0) <= FLT_EPSILON * (1.0 + fabs(L)));
                bad_p += !(fabs(psum - 1.0) <= FLT_EPSILON * (1.0 + i));
                for (int d = 0; d < s.D; d++) {
                    double lo = INFINITY, hi = -INFINITY;
                    for (int j = 0; j <= i; j++) {
                        double x = r->v[(((int64_t)b * s.T + j) * s.KVH + h / G) * s.D + d];
                        lo = fmin(lo, x), hi = fmax(hi, x);
                    }
                    double o = r->out[(((int64_t)b * s.T + i) * s.H + h) * s.D + d];
                    double slack = FLT_EPSILON * (i + 2) * fmax(fabs(lo), fabs(hi));
                    bad_hull += !(o >= lo - slack && o <= hi + slack);
                }
            }
    EXPECT(bad_lse == 0, "[%s] %lld rows: Σ exp(s − lse) ≠ 1", shp, (long long)bad_lse);
    EXPECT(bad_p == 0, "[%s] %lld rows of the naive P do not sum to 1", shp, (long long)bad_p);
    EXPECT(bad_hull == 0, "[%s] %lld outputs outside the range of v", shp, (long long)bad_hull);
}

/* Magnitudes of the backward's sums, from the naive run (P in r->ws, out in r->out), for the
 * tolerances below: the largest over elements of
 *   m[0] = scale·Σ_j |ds[i,j]|·|k[j,d]|          (dq)
 *   m[1] = scale·Σ_{h in group, i} |ds[i,j]|·|q[i,d]|   (dk)
 *   m[2] = Σ_{h in group, i} p[i,j]·|dout[i,d]|      (dv)
 * with ds = p·(dp − Δ) recomputed here in double. */
static void backward_magnitudes(const struct run *r, double m[3]) {
    struct shape s = r->s;
    const int G = s.H / s.KVH, D = s.D;
    const double scale = (double)(1.0f / sqrtf((float)s.D));
    m[0] = m[1] = m[2] = 0;
    double *ak = calloc((size_t)s.T * D, sizeof(double)), *av = calloc((size_t)s.T * D, sizeof(double));
    double *aq = calloc((size_t)D, sizeof(double));
    for (int b = 0; b < s.B; b++)
        for (int kvh = 0; kvh < s.KVH; kvh++) {
            memset(ak, 0, sizeof(double) * (size_t)s.T * D), memset(av, 0, sizeof(double) * (size_t)s.T * D);
            for (int h = kvh * G; h < (kvh + 1) * G; h++)
                for (int i = 0; i < s.T; i++) {
                    const float *gi = r->g + (((int64_t)b * s.T + i) * s.H + h) * D;
                    const float *oi = r->out + (((int64_t)b * s.T + i) * s.H + h) * D;
                    const float *qi = r->q + (((int64_t)b * s.T + i) * s.H + h) * D;
                    double delta = 0; /* rounded to fp32 as the reference stores it */
                    for (int d = 0; d < D; d++) delta += (double)gi[d] * oi[d];
                    delta = (double)(float)delta;
                    memset(aq, 0, sizeof(double) * (size_t)D);
                    for (int j = 0; j <= i; j++) {
                        const float *kj = r->k + (((int64_t)b * s.T + j) * s.KVH + kvh) * D;
                        const float *vj = r->v + (((int64_t)b * s.T + j) * s.KVH + kvh) * D;
                        const double p = r->ws[(((int64_t)b * s.H + h) * s.T + i) * s.T + j];
                        double dp = 0;
                        for (int d = 0; d < D; d++) dp += (double)gi[d] * vj[d];
                        const double ads = fabs(p * (dp - delta));
                        for (int d = 0; d < D; d++) {
                            aq[d] += scale * ads * fabs((double)kj[d]);
                            ak[(int64_t)j * D + d] += scale * ads * fabs((double)qi[d]);
                            av[(int64_t)j * D + d] += p * fabs((double)gi[d]);
                        }
                    }
                    for (int d = 0; d < D; d++) m[0] = fmax(m[0], aq[d]);
                }
            for (int64_t x = 0; x < (int64_t)s.T * D; x++) m[1] = fmax(m[1], ak[x]), m[2] = fmax(m[2], av[x]);
        }
    free(ak), free(av), free(aq);
}

/* Naive vs flash in fp32. The flash backward reads the naive forward's out and lse, so that the
 * backward comparison sees only the backward's differences (the forwards are compared apart).
 * Tolerances (tier (b), eps = FLT_EPSILON = 2u; the aggregate bound of compare.h is k/4 of the
 * elementwise one, so k is chosen for errors of one sign in every element):
 *   out: the naive sums fp32-rounded P (u/2 relative per term, Σ p|v| ≤ max|v|), each side stores
 *        once (u/2·|out|): ‖err‖ ≤ u/2·max|v|·√n + u·‖out‖ → k = 2, floor = max|v|.
 *   lse: the same double math in another order, one fp32 store each: k = 1, floor = 1.
 *   dq, dk, dv: with the same out (so the same fp32 Δ) the two differ only in p: fp32 P (u/2
 *        relative) against exp(s − lse) with lse rounded to fp32 (|lse|·u/2), so ds and every
 *        term by (1 + |lse|)·u/2 relatively, a sum by ≤ (1 + max|lse|)·u/2·mag (mag from
 *        backward_magnitudes()), plus one store each (u·|ref| together): k = 2 + max|lse|,
 *        floor = mag.
 */
static void check_agree_f32(const struct outs *nv, const double mag[3], struct run *r, int bq, int bk) {
    struct shape s = r->s;
    char shp[96];
    shape_str(shp, sizeof shp, s, bq, bk);
    const double maxv = max_abs(r->v, nk_of(s)), maxl = max_abs(nv->lse, nl_of(s));
    const double kb = 2.0 + maxl;
    struct cmp_case c = {"attention_flash_vs_naive", "out", shp, "f32", g_seed};
    cmp_elementwise(&c, r->out, nv->out, nq_of(s), FLT_EPSILON, 2.0, maxv, NULL);
    c.what = "lse";
    cmp_elementwise(&c, r->lse, nv->lse, nl_of(s), FLT_EPSILON, 1.0, 1.0, NULL);
    c.what = "dq";
    cmp_elementwise(&c, r->dq, nv->dq, nq_of(s), FLT_EPSILON, kb, mag[0], NULL);
    c.what = "dk";
    cmp_elementwise(&c, r->dk, nv->dk, nk_of(s), FLT_EPSILON, kb, mag[1], NULL);
    c.what = "dv";
    cmp_elementwise(&c, r->dv, nv->dv, nk_of(s), FLT_EPSILON, kb, mag[2], NULL);
}

static void test_agreement(struct shape s, uint64_t seed) {
    struct run r;
    run_alloc(&r, s, seed, ACT_F32);
    run_naive(&r, ACT_F32);
    check_properties(&r);
    double mag[3];
    backward_magnitudes(&r, mag);
    struct outs nv = outs_copy(&r);
    const int T = s.T;
    const int blocks[][2] = {{1, 1}, {1, 3}, {3, 1}, {2, 5}, {4, 4}, {5, 2}, {7, 16}, {16, 7},
                             {T, T}, {T + 5, 2}, {3, T + 1}, {64, 64}};
    const int nb = (int)(sizeof blocks / sizeof blocks[0]);
    struct outs first = {0};
    for (int bi = 0; bi < nb; bi++) {
        const int bq = blocks[bi][0], bk = blocks[bi][1];
        run_flash(&r, bq, bk, ACT_F32, nv.out, nv.lse);
        check_agree_f32(&nv, mag, &r, bq, bk);
        if (bi == 0) {
            first = outs_copy(&r);
            continue;
        }
        char shp[96];
        shape_str(shp, sizeof shp, s, bq, bk);
        /* The backward does not depend on the block sizes at all (same out and lse here). */
        struct cmp_case c = {"attention_flash_backward", "dq, block-size independence", shp, "f32", g_seed};
        cmp_exact_f32(&c, r.dq, first.dq, nq_of(s));
        c.what = "dk, block-size independence";
        cmp_exact_f32(&c, r.dk, first.dk, nk_of(s));
        c.what = "dv, block-size independence";
        cmp_exact_f32(&c, r.dv, first.dv, nk_of(s));
        /* The forward does not depend on block_q: rerun with the first run's block_k. */
        ref_attention_flash_forward(r.out, r.lse, r.q, r.k, r.v, s.B, s.T, s.H, s.KVH, s.D, 1.0f / sqrtf((float)s.D),
                                    bq, blocks[0][1], ACT_F32);
        c.op = "attention_flash_forward";
        c.what = "out, block_q independence";
        cmp_exact_f32(&c, r.out, first.out, nq_of(s));
        c.what = "lse, block_q independence";
        cmp_exact_f32(&c, r.lse, first.lse, nl_of(s));
    }
    outs_free(&first);
    outs_free(&nv);
    run_free(&r);
}

/* ACT_BF16 on bf16 inputs. Every stored output is a bf16 value (lse stays fp32). Tier (c), with
 * tier_c set: the error of flash-bf16 against the fp32 oracle (naive, ACT_F32, same inputs) is at
 * most 2× the error of naive-bf16 (eager attention's rounding points), plus BF16_EPS/2·rms(oracle)
 * for elements where both errors vanish. Only in that direction: the flash form rounds the
 * unnormalized p̃ = exp(s − m), which is exactly 1 at each row's running max, so on peaked rows
 * it is legitimately more accurate than the naive form, which rounds every normalized p. The max
 * error of a few hundred elements is too noisy for a factor 2, so tier (c) runs on D = 64 shapes
 * with ≥ 10⁴ elements (as the GPU parity test does); small shapes check representability. */
static void test_bf16(struct shape s, uint64_t seed, int bq, int bk, int tier_c) {
    struct run r;
    run_alloc(&r, s, seed, ACT_BF16);
    char shp[96];
    shape_str(shp, sizeof shp, s, bq, bk);
    run_naive(&r, ACT_F32);
    struct outs o32 = outs_copy(&r);
    run_naive(&r, ACT_BF16);
    struct outs nb = outs_copy(&r);
    run_flash(&r, bq, bk, ACT_BF16, NULL, NULL);
    struct outs fb = outs_copy(&r);
    const float *got[2][4] = {{nb.out, nb.dq, nb.dk, nb.dv}, {fb.out, fb.dq, fb.dk, fb.dv}};
    const float *orc[4] = {o32.out, o32.dq, o32.dk, o32.dv};
    const int64_t n[4] = {nq_of(s), nq_of(s), nk_of(s), nk_of(s)};
    const char *names[4] = {"out", "dq", "dk", "dv"};
    for (int impl = 0; impl < 2; impl++)
        for (int t = 0; t < 4; t++) {
            int64_t not_bf16 = 0;
            for (int64_t i = 0; i < n[t]; i++) not_bf16 += bf16_round(got[impl][t][i]) != got[impl][t][i];
            EXPECT(not_bf16 == 0, "[%s] %s-bf16 %s: %lld values are not bf16", shp, impl ? "flash" : "naive",
                   names[t], (long long)not_bf16);
        }
    for (int t = 0; t < 4 && tier_c; t++) {
        const double floor = 0.5 * BF16_EPS * cmp_rms(orc[t], n[t]);
        struct cmp_case c = {"attention_bf16", names[t], shp, "bf16 flash vs naive", g_seed};
        cmp_vs_naive(&c, got[1][t], got[0][t], orc[t], n[t], 2.0, floor, NULL);
    }
    /* lse is fp32 in both modes, from the same double math on the same inputs. */
    struct cmp_case c = {"attention_bf16", "lse", shp, "f32", g_seed};
    cmp_elementwise(&c, fb.lse, o32.lse, nl_of(s), FLT_EPSILON, 1.0, 1.0, NULL);
    outs_free(&o32), outs_free(&nb), outs_free(&fb);
    run_free(&r);
}

/* ---------------------------------------------------------------------------------------- */
/* Central differences: loss = Σ g ⊙ out (double), out from the fp32 naive forward. */
struct fd_ctx {
    struct run *r;
    float *out, *lse, *ws;
};

static double fd_loss(void *p) {
    struct fd_ctx *c = p;
    struct shape s = c->r->s;
    ref_attention_naive_forward(c->out, c->lse, c->r->q, c->r->k, c->r->v, s.B, s.T, s.H, s.KVH, s.D,
                                1.0f / sqrtf((float)s.D), ACT_F32, c->ws);
    double acc = 0;
    for (int64_t i = 0; i < nq_of(s); i++) acc += (double)c->r->g[i] * (double)c->out[i];
    return acc;
}

static void test_gradients(struct shape s, uint64_t seed) {
    struct run r;
    run_alloc(&r, s, seed, ACT_F32);
    struct fd_ctx c = {&r, alloc_f(nq_of(s)), alloc_f(nl_of(s)),
                       alloc_f((int64_t)(ref_attention_naive_workspace_size(s.B, s.T, s.H) / sizeof(float)))};
    for (int impl = 0; impl < 2; impl++) {
        if (impl == 0)
            run_naive(&r, ACT_F32);
        else
            run_flash(&r, 2, 3, ACT_F32, NULL, NULL);
        char shp[96];
        shape_str(shp, sizeof shp, s, impl ? 2 : 0, impl ? 3 : 0);
        const char *op = impl ? "attention_flash_backward" : "attention_naive_backward";
        struct cmp_case cq = {op, "dq", shp, "f32", g_seed}, ck = {op, "dk", shp, "f32", g_seed},
                        cv = {op, "dv", shp, "f32", g_seed};
        /* h = 1e-3 relative: truncation O(h²) and fp32 loss resolution O(ε/h) both near 1e-4. */
        gradcheck(&cq, fd_loss, &c, r.q, r.dq, nq_of(s), 96, seed, 1e-3, 2e-3);
        gradcheck(&ck, fd_loss, &c, r.k, r.dk, nk_of(s), 96, seed + 1, 1e-3, 2e-3);
        gradcheck(&cv, fd_loss, &c, r.v, r.dv, nk_of(s), 96, seed + 2, 1e-3, 2e-3);
    }
    free(c.out), free(c.lse), free(c.ws);
    run_free(&r);
}

/* ---------------------------------------------------------------------------------------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench(void) {
    const int kvhs[2] = {8, 2};
    for (int a = 0; a < 2; a++) {
        struct shape s = {1, 512, 8, kvhs[a], 64};
        struct run r;
        run_alloc(&r, s, g_seed, ACT_BF16);
        const float scale = 1.0f / sqrtf((float)s.D);
        double t0 = now_s();
        ref_attention_flash_forward(r.out, r.lse, r.q, r.k, r.v, s.B, s.T, s.H, s.KVH, s.D, scale, 64, 64, ACT_F32);
        double t1 = now_s();
        ref_attention_flash_backward(r.dq, r.dk, r.dv, r.g, r.q, r.k, r.v, r.out, r.lse, s.B, s.T, s.H, s.KVH, s.D,
                                     scale, 64, 64, ACT_F32, r.ws);
        double t2 = now_s();
        printf("{\"op\":\"ref_attention_flash\",\"B\":1,\"T\":512,\"H\":8,\"KVH\":%d,\"D\":64,\"forward_s\":%.3f,"
               "\"backward_s\":%.3f}\n",
               s.KVH, t1 - t0, t2 - t1);
        float *ws = malloc(ref_attention_naive_workspace_size(s.B, s.T, s.H));
        t0 = now_s();
        ref_attention_naive_forward(r.out, r.lse, r.q, r.k, r.v, s.B, s.T, s.H, s.KVH, s.D, scale, ACT_F32, ws);
        t1 = now_s();
        ref_attention_naive_backward(r.dq, r.dk, r.dv, r.g, r.q, r.k, r.v, r.out, s.B, s.T, s.H, s.KVH, s.D, scale,
                                     ACT_F32, ws);
        t2 = now_s();
        printf("{\"op\":\"ref_attention_naive\",\"B\":1,\"T\":512,\"H\":8,\"KVH\":%d,\"D\":64,\"forward_s\":%.3f,"
               "\"backward_s\":%.3f}\n",
               s.KVH, t1 - t0, t2 - t1);
        free(ws);
        run_free(&r);
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    if (test_has_flag(argc, argv, "--bench")) {
        bench();
        return 0;
    }
    test_hand_case();
    /* T = 1, non-divisors of the blocks, GQA ratios 1, 3, 4, odd D, D = 64. */
    const struct shape agree[] = {{1, 1, 1, 1, 1},  {2, 1, 3, 1, 5},  {1, 2, 2, 2, 3},   {2, 13, 3, 1, 7},
                                  {1, 17, 4, 1, 9}, {1, 16, 6, 2, 5}, {2, 20, 8, 2, 64}, {1, 33, 4, 4, 3},
                                  {1, 67, 3, 1, 64}};
    for (size_t i = 0; i < sizeof agree / sizeof agree[0]; i++) test_agreement(agree[i], g_seed + 101 * i);
    const struct shape bf[] = {{1, 1, 3, 1, 64}, {1, 23, 4, 4, 7}, {2, 17, 6, 2, 64}, {1, 70, 4, 1, 64}};
    const int bfb[][3] = {{64, 64, 0}, {3, 8, 0}, {4, 5, 1}, {64, 64, 1}};
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++)
        test_bf16(bf[i], g_seed + 211 * i, bfb[i][0], bfb[i][1], bfb[i][2]);
    const struct shape gc[] = {{1, 1, 2, 1, 3}, {2, 5, 3, 1, 3}, {1, 7, 4, 1, 5}, {1, 6, 2, 2, 4}, {1, 9, 4, 2, 7}};
    for (size_t i = 0; i < sizeof gc / sizeof gc[0]; i++) test_gradients(gc[i], g_seed + 307 * i);
    return test_finish("attention_test");
}
