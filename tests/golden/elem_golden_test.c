/* elem_golden_test.c — ref/rmsnorm, ref/rope, ref/swiglu and ref/cross_entropy against fixtures
 * from torch + transformers (tests/golden/gen/gen_ops_elem.py; data in tests/golden/data/ops/).
 * Each comparison names its tolerance tier (STYLE.md "Tests and tolerances") and the derivation.
 *
 *   bazel test //tests/golden:elem_golden_test        (REFINE_VERBOSE=1 prints every error)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/cross_entropy.h"
#include "ref/rmsnorm.h"
#include "ref/rope.h"
#include "ref/swiglu.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/golden/golden.h"

#define DATA "tests/golden/data/ops/"

static const uint64_t k_seed = 20261123; /* the generator's seed, printed in reports */

static float *ld(const struct golden *g, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    const int64_t shape[4] = {d0, d1, d2, d3};
    return golden_f32(g, name, ndim, shape);
}

static int64_t count_exact(const float *a, const float *b, int64_t n) {
    int64_t k = 0;
    for (int64_t j = 0; j < n; j++) k += a[j] == b[j];
    return k;
}

/* ---------------------------------------------------------------- RMSNorm (LlamaRMSNorm) */
static void test_rmsnorm(void) {
    struct golden g;
    golden_open(&g, DATA "rmsnorm.safetensors");
    const int N = 7, C = 96;
    char shape[32];
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    for (int m = 0; m < 2; m++) {
        enum act_dtype act = m ? ACT_BF16 : ACT_F32;
        const char *dt = m ? "bf16" : "f32";
        char nm[64];
#define LD2(field, a, b) (snprintf(nm, sizeof nm, "%s." field, dt), ld(&g, nm, 2, a, b, 0, 0))
#define LD1(field, a) (snprintf(nm, sizeof nm, "%s." field, dt), ld(&g, nm, 1, a, 0, 0, 0))
        float *x = LD2("x", N, C), *w = LD1("w", C), *dy = LD2("dy", N, C);
        float *t_out = LD2("out", N, C), *t_dx = LD2("dx", N, C), *t_dw = LD1("dw", C);
        float *out = malloc(sizeof(float) * N * C), *dx = malloc(sizeof(float) * N * C);
        float *dw = calloc(C, sizeof(float)), rstd[7];
        ref_rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f, act);
        ref_rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C, act);
        double eps = m ? BF16_EPS : FLT_EPSILON;
        /* out, tier b: f32 — torch's fp32 mean/rsqrt vs a double mean rounded once (≤ 2 ulp in
         * rstd), then the two products: k = 4. bf16 — the same rstd difference can move n across
         * a bf16 rounding boundary (one bf16 rounding), then the product's rounding: k = 2. */
        struct cmp_case co = {"rmsnorm_forward vs LlamaRMSNorm", "out (tier b)", shape, dt, k_seed};
        cmp_elementwise(&co, out, t_out, (int64_t)N * C, eps, m ? 2.0 : 4.0, 0.0, NULL);
        /* dx, tier b: rstd·(dn − n̂·mean(dn·n̂)) cancels, so the floor is rms(dx). f32: ≤ 8
         * roundings of the chain differ in order. bf16: torch also rounds dn = dy·w to bf16 and
         * the stored result: k = 3. */
        struct cmp_case cx = {"rmsnorm_backward vs autograd", "dx (tier b)", shape, dt, k_seed};
        cmp_elementwise(&cx, dx, t_dx, (int64_t)N * C, eps, m ? 3.0 : 8.0, cmp_rms(t_dx, (int64_t)N * C), NULL);
        /* dw, tier b: a sum over N = 7 rows. torch bf16 rounds every product dy·n to bf16 and
         * the sum to bf16 (ref keeps fp32): k = 2 with floor rms(dw) for cancellation; f32: the
         * order of 7 fp32 adds vs a double sum, k = 8. */
        struct cmp_case cw = {"rmsnorm_backward vs autograd", "dw (tier b)", shape, dt, k_seed};
        cmp_elementwise(&cw, dw, t_dw, C, eps, m ? 2.0 : 8.0, cmp_rms(t_dw, C), NULL);
        if (getenv("REFINE_VERBOSE"))
            fprintf(stderr, "rmsnorm %s: out bit-exact %lld/%d, dx %lld/%d\n", dt,
                    (long long)count_exact(out, t_out, N * C), N * C, (long long)count_exact(dx, t_dx, N * C), N * C);
        free(x), free(w), free(dy), free(t_out), free(t_dx), free(t_dw), free(out), free(dx), free(dw);
#undef LD2
#undef LD1
    }
    golden_close(&g);
}

/* ---------------------------------------------------------------- RoPE (llama3) */
static void test_rope_case(const struct golden *g, int D, int H, int KVH, float factor) {
    const int B = 2, T = 7, N = B * T;
    char nm[64], shape[64];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d KVH=%d D=%d", B, T, H, KVH, D);
    const int64_t pshape[2] = {B, T};
    snprintf(nm, sizeof nm, "d%d.positions", D);
    int32_t *pos = golden_i32(g, nm, 2, pshape);
    int max_pos = 0;
    for (int n = 0; n < N; n++) max_pos = pos[n] + 1 > max_pos ? pos[n] + 1 : max_pos;
    const struct rope_scaling sc = {ROPE_SCALING_LLAMA3, factor, 1.0f, 4.0f, 8192};
    struct ref_rope_cache c;
    ref_rope_cache_build(&c, max_pos, D, 500000.0f, &sc);

    /* inv_freq, tier a: the fp32 arithmetic of _compute_llama3_parameters step by step. */
    snprintf(nm, sizeof nm, "d%d.inv_freq", D);
    float *t_inv = ld(g, nm, 1, D / 2, 0, 0, 0);
    struct cmp_case ci = {"ref_rope_inv_freq vs transformers llama3", "inv_freq (tier a)", shape, "f32", k_seed};
    cmp_exact_f32(&ci, c.inv_freq, t_inv, D / 2);

    /* cos/sin (B,T,D) = cat(table, table) at each position, tier b: torch's fp32 cos/sin vs the
     * double evaluation rounded once: ≤ 1 ulp (k = 1 covers it; k = 2 leaves the aggregate room). */
    float *tc[2], *rc[2];
    for (int s = 0; s < 2; s++) {
        snprintf(nm, sizeof nm, "d%d.%s", D, s ? "sin" : "cos");
        tc[s] = ld(g, nm, 3, B, T, D, 0);
        rc[s] = malloc(sizeof(float) * N * D);
        const float *tab = s ? c.sin : c.cos;
        for (int n = 0; n < N; n++)
            for (int d = 0; d < D; d++) rc[s][n * D + d] = tab[(int64_t)pos[n] * (D / 2) + d % (D / 2)];
        struct cmp_case cc = {"ref_rope_cos_sin vs LlamaRotaryEmbedding", s ? "sin (tier b)" : "cos (tier b)", shape,
                              "f32", k_seed};
        cmp_elementwise(&cc, rc[s], tc[s], (int64_t)N * D, FLT_EPSILON, 2.0, 0.0, NULL);
        free(tc[s]), free(rc[s]);
    }

    for (int m = 0; m < 2; m++) {
        enum act_dtype act = m ? ACT_BF16 : ACT_F32;
        const char *dt = m ? "bf16" : "f32";
        double eps = m ? BF16_EPS : FLT_EPSILON;
        int64_t nq = (int64_t)N * H * D, nk = (int64_t)N * KVH * D;
#define LDQ(field, heads) (snprintf(nm, sizeof nm, "d%d.%s." field, D, dt), ld(g, nm, 4, B, T, heads, D))
        float *q = LDQ("q", H), *k = LDQ("k", KVH), *tq = LDQ("q_out", H), *tk = LDQ("k_out", KVH);
        float *gq = LDQ("dq_out", H), *gk = LDQ("dk_out", KVH), *tdq = LDQ("dq", H), *tdk = LDQ("dk", KVH);
#undef LDQ
        ref_rope_forward(q, k, pos, &c, B, T, H, KVH, D, act);
        ref_rope_backward(gq, gk, pos, &c, B, T, H, KVH, D, act);
        /* Tier b. f32: the cos/sin ulp above plus the two products and the sum, k = 4; elements
         * cancel (x1·c − x2·s), so the floor is the rms of the reference. bf16: HF's rounding
         * points are reproduced; a 1-ulp fp32 cos/sin difference can flip a bf16 rounding of c/s,
         * then of a product and of the sum: k = 2, floor rms. */
        double k_tier = m ? 2.0 : 4.0;
        struct cmp_case c1 = {"ref_rope_forward vs apply_rotary_pos_emb", "q (tier b)", shape, dt, k_seed};
        struct cmp_case c2 = {"ref_rope_forward vs apply_rotary_pos_emb", "k (tier b)", shape, dt, k_seed};
        struct cmp_case c3 = {"ref_rope_backward vs autograd", "dq (tier b)", shape, dt, k_seed};
        struct cmp_case c4 = {"ref_rope_backward vs autograd", "dk (tier b)", shape, dt, k_seed};
        cmp_elementwise(&c1, q, tq, nq, eps, k_tier, cmp_rms(tq, nq), NULL);
        cmp_elementwise(&c2, k, tk, nk, eps, k_tier, cmp_rms(tk, nk), NULL);
        cmp_elementwise(&c3, gq, tdq, nq, eps, k_tier, cmp_rms(tdq, nq), NULL);
        cmp_elementwise(&c4, gk, tdk, nk, eps, k_tier, cmp_rms(tdk, nk), NULL);
        if (getenv("REFINE_VERBOSE"))
            fprintf(stderr, "rope D=%d %s: q bit-exact %lld/%lld, dq %lld/%lld\n", D, dt,
                    (long long)count_exact(q, tq, nq), (long long)nq, (long long)count_exact(gq, tdq, nq),
                    (long long)nq);
        free(q), free(k), free(tq), free(tk), free(gq), free(gk), free(tdq), free(tdk);
    }
    free(pos), free(t_inv);
    ref_rope_cache_free(&c);
}

static void test_rope(void) {
    struct golden g;
    golden_open(&g, DATA "rope.safetensors");
    test_rope_case(&g, 64, 4, 2, 32.0f);  /* Llama-3.2 scaling */
    test_rope_case(&g, 128, 2, 1, 8.0f);  /* Llama-3.1 scaling */
    golden_close(&g);
}

/* ---------------------------------------------------------------- SwiGLU (LlamaMLP act part) */
static void test_swiglu(void) {
    struct golden g;
    golden_open(&g, DATA "swiglu.safetensors");
    const int N = 9, F = 160;
    const int64_t n = (int64_t)N * F;
    for (int m = 0; m < 2; m++) {
        enum act_dtype act = m ? ACT_BF16 : ACT_F32;
        const char *dt = m ? "bf16" : "f32";
        char nm[64];
#define LDS(field) (snprintf(nm, sizeof nm, "%s." field, dt), ld(&g, nm, 2, N, F, 0, 0))
        float *gate = LDS("gate"), *up = LDS("up"), *dout = LDS("dout"), *t_out = LDS("out"), *t_dg = LDS("dgate"),
              *t_du = LDS("dup");
#undef LDS
        float *out = malloc(sizeof(float) * n), *dg = malloc(sizeof(float) * n), *du = malloc(sizeof(float) * n);
        ref_swiglu_forward(out, gate, up, N, F, F, act);
        ref_swiglu_backward(dg, du, dout, gate, up, N, F, F, act);
        /* Tier b. f32: torch's fp32 x/(1+exp(−x)) (a few ulp) vs double rounded once, then the
         * product: k = 4 for out and dup, k = 6 for dgate (silu' has three more fp32 ops in
         * torch). silu'(g) = σ(1 + g(1 − σ)) cancels near g ≈ −1.28, where torch's fp32 value
         * has an absolute error of a few ε·|da| but an unbounded relative one (measured: 11 of
         * 1440 elements beyond 6 ε relative, worst 3.6e-10 absolute at |dgate| = 4.7e-5): dgate's
         * floor is its rms. bf16: identical rounding points; only an fp32-ulp difference in silu
         * can flip a bf16 rounding, then the product: k = 2. */
        double eps = m ? BF16_EPS : FLT_EPSILON;
        struct cmp_case c1 = {"ref_swiglu_forward vs silu(gate)*up", "out (tier b)", "N=9 F=160", dt, k_seed};
        struct cmp_case c2 = {"ref_swiglu_backward vs autograd", "dgate (tier b)", "N=9 F=160", dt, k_seed};
        struct cmp_case c3 = {"ref_swiglu_backward vs autograd", "dup (tier b)", "N=9 F=160", dt, k_seed};
        cmp_elementwise(&c1, out, t_out, n, eps, m ? 2.0 : 4.0, 0.0, NULL);
        cmp_elementwise(&c2, dg, t_dg, n, eps, m ? 2.0 : 6.0, cmp_rms(t_dg, n), NULL);
        cmp_elementwise(&c3, du, t_du, n, eps, m ? 2.0 : 4.0, 0.0, NULL);
        if (getenv("REFINE_VERBOSE"))
            fprintf(stderr, "swiglu %s: out bit-exact %lld/%lld dgate %lld dup %lld\n", dt,
                    (long long)count_exact(out, t_out, n), (long long)n, (long long)count_exact(dg, t_dg, n),
                    (long long)count_exact(du, t_du, n));
        free(gate), free(up), free(dout), free(t_out), free(t_dg), free(t_du), free(out), free(dg), free(du);
    }
    golden_close(&g);
}

/* ---------------------------------------------------------------- cross-entropy (ForCausalLMLoss) */

/* The naive fp32 implementation tier c measures against: fp32 dot products in index order, an
 * fp32 two-pass logsumexp, fp32 gradients. */
static void naive_f32_ce(float *loss, float *dh, float *dw, const float *h, const float *w, const int32_t *y, int N,
                         int C, int V, int64_t nv) {
    float *z = malloc(sizeof(float) * N * V);
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) {
            float a = 0.0f;
            for (int c = 0; c < C; c++) a += h[n * C + c] * w[v * C + c];
            z[n * V + v] = a;
        }
    float sum = 0.0f;
    for (int n = 0; n < N; n++) {
        float *zr = z + n * V;
        float mx = zr[0], s = 0.0f;
        for (int v = 1; v < V; v++) mx = zr[v] > mx ? zr[v] : mx;
        for (int v = 0; v < V; v++) s += expf(zr[v] - mx);
        float lse = mx + logf(s);
        if (y[n] != REF_IGNORE_INDEX) sum += lse - zr[y[n]];
        for (int v = 0; v < V; v++)
            zr[v] = y[n] == REF_IGNORE_INDEX ? 0.0f : (expf(zr[v] - lse) - (v == y[n] ? 1.0f : 0.0f)) / (float)nv;
    }
    *loss = sum / (float)nv;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            float a = 0.0f;
            for (int v = 0; v < V; v++) a += z[n * V + v] * w[v * C + c];
            dh[n * C + c] = a;
        }
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++) {
            float a = 0.0f;
            for (int n = 0; n < N; n++) a += z[n * V + v] * h[n * C + c];
            dw[v * C + c] = a;
        }
    free(z);
}

/* max over rows and vocabulary of Σ_c |h[n,c]·W[v,c]|: scales the GEMM error bound γ_C·Σ|h||w|. */
static double max_abs_dot(const float *h, const float *w, int N, int C, int V) {
    double mx = 0;
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) {
            double a = 0;
            for (int c = 0; c < C; c++) a += fabs((double)h[n * C + c] * w[v * C + c]);
            mx = a > mx ? a : mx;
        }
    return mx;
}

static void test_cross_entropy(void) {
    struct golden g;
    golden_open(&g, DATA "cross_entropy.safetensors");
    const int B = 2, T = 13, C = 48, V = 173, N = B * T;
    const char *shape = "B=2 T=13 C=48 V=173 n_chunk=5 v_chunk=37";
    const int64_t lshape[2] = {B, T};
    int32_t *labels = golden_i32(&g, "labels", 2, lshape), *y = golden_i32(&g, "targets", 2, lshape);
    /* The caller's shift (cross_entropy.h) is ForCausalLMLoss's: row (b,t) predicts labels[b,t+1]. */
    int bad_shift = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) bad_shift += y[b * T + t] != (t + 1 < T ? labels[b * T + t + 1] : REF_IGNORE_INDEX);
    EXPECT(bad_shift == 0, "%d targets are not the shifted labels", bad_shift);
    const int64_t nv = ref_cross_entropy_count_valid(y, N);
    void *ws = malloc(ref_cross_entropy_fused_workspace_size(5, 37, C));
    const double gamma_c = C * FLT_EPSILON / (1 - C * FLT_EPSILON);

    for (int m = 0; m < 2; m++) {
        enum act_dtype act = m ? ACT_BF16 : ACT_F32;
        const char *dt = m ? "bf16" : "f32";
        char nm[64];
        snprintf(nm, sizeof nm, "%s.hidden", dt);
        float *h = ld(&g, nm, 3, B, T, C, 0);
        snprintf(nm, sizeof nm, "%s.w", dt);
        float *w = ld(&g, nm, 2, V, C, 0, 0);
        snprintf(nm, sizeof nm, "%s.logits", dt);
        float *t_z = ld(&g, nm, 3, B, T, V, 0);
        snprintf(nm, sizeof nm, "%s.dhidden", dt);
        float *t_dh = ld(&g, nm, 3, B, T, C, 0);
        snprintf(nm, sizeof nm, "%s.dw", dt);
        float *t_dw = ld(&g, nm, 2, V, C, 0, 0);
        snprintf(nm, sizeof nm, "%s.loss", dt);
        double t_loss = golden_scalar(&g, nm);

        float *dh = malloc(sizeof(float) * N * C), *dw = calloc((size_t)V * C, sizeof(float));
        double loss;
        ref_cross_entropy_fused(&loss, dh, dw, h, w, y, N, C, V, nv, 1.0f, 5, 37, act, ws);

        /* The plain form on torch's own logits isolates the loss arithmetic from the GEMM: torch's
         * fp32 log_softmax + mean vs double: each nll within a few ε of |lse| + |z_y|; k = 4 on the
         * loss with the mean |logit| scale as floor. */
        double lp;
        ref_cross_entropy_forward(&lp, NULL, t_z, y, N, V, nv);
        double zscale = cmp_rms(t_z, (int64_t)N * V);
        EXPECT(fabs(lp - t_loss) <= 4 * FLT_EPSILON * (fabs(t_loss) + zscale),
               "%s plain CE on torch logits: loss %.9g vs torch %.9g (tier b, k=4)", dt, lp, t_loss);
        if (m == 0) {
            float *t_dz = ld(&g, "f32.dlogits", 3, B, T, V, 0), *dz = malloc(sizeof(float) * N * V);
            ref_cross_entropy_backward(dz, t_z, y, N, V, nv, 1.0f, ACT_F32);
            /* dz = (p − onehot)/n: p from exp of an fp32 (z − lse) whose error is ≤ ε·|lse|
             * absolute: relative error of p ≤ ε·(|lse| + 1) → k = 4 with |lse| ≲ 3 here. */
            struct cmp_case cz = {"ref_cross_entropy_backward vs autograd", "dlogits on torch logits (tier b, k=4)",
                                  shape, dt, k_seed};
            cmp_elementwise(&cz, dz, t_dz, (int64_t)N * V, FLT_EPSILON, 4.0, cmp_rms(t_dz, (int64_t)N * V), NULL);
            free(t_dz), free(dz);
        }

        if (m == 0) {
            /* Fused f32 vs torch end to end. Loss, tier b with a derived bound: each nll is
             * 1-Lipschitz in lse and in z_y, so |Δloss| ≤ 2·max|Δz| ≤ 2·γ_C·max Σ|h·w| (torch's
             * fp32 GEMM), plus the k = 4 loss arithmetic above. */
            double bound = 2 * gamma_c * max_abs_dot(h, w, N, C, V) + 4 * FLT_EPSILON * (fabs(t_loss) + zscale);
            EXPECT(fabs(loss - t_loss) <= bound, "f32 fused loss %.9g vs torch %.9g (bound %.3g)", loss, t_loss, bound);
            /* Gradients, tier c: torch's error against ref is at most 2× that of the naive fp32
             * implementation against ref, plus one fp32 rounding of the result's rms. */
            float nl, *ndh = malloc(sizeof(float) * N * C), *ndw = malloc(sizeof(float) * V * C);
            naive_f32_ce(&nl, ndh, ndw, h, w, y, N, C, V, nv);
            struct cmp_case ch = {"ref_cross_entropy_fused vs autograd", "dhidden (tier c)", shape, dt, k_seed};
            struct cmp_case cw = {"ref_cross_entropy_fused vs autograd", "dW (tier c)", shape, dt, k_seed};
            cmp_vs_naive(&ch, t_dh, ndh, dh, (int64_t)N * C, 2.0, FLT_EPSILON * cmp_rms(dh, (int64_t)N * C), NULL);
            cmp_vs_naive(&cw, t_dw, ndw, dw, (int64_t)V * C, 2.0, FLT_EPSILON * cmp_rms(dw, (int64_t)V * C), NULL);

            /* num_items_in_batch: the same op with the global count (5 more valid items elsewhere). */
            const int64_t one = 1;
            int64_t *ni = golden_i64(&g, "num_items", 1, &one);
            float *t_dh2 = ld(&g, "num_items.dhidden", 3, B, T, C, 0), *t_dw2 = ld(&g, "num_items.dw", 2, V, C, 0, 0);
            double t_l2 = golden_scalar(&g, "num_items.loss"), l2;
            float *dh2 = malloc(sizeof(float) * N * C), *dw2 = calloc((size_t)V * C, sizeof(float));
            ref_cross_entropy_fused(&l2, dh2, dw2, h, w, y, N, C, V, ni[0], 1.0f, 5, 37, act, ws);
            double b2 = bound * (double)nv / (double)ni[0];
            EXPECT(fabs(l2 - t_l2) <= b2, "num_items loss %.9g vs torch %.9g (bound %.3g)", l2, t_l2, b2);
            /* Gradients, tier c as above, the naive implementation dividing by num_items too. */
            naive_f32_ce(&nl, ndh, ndw, h, w, y, N, C, V, ni[0]);
            struct cmp_case ch2 = {"ref_cross_entropy_fused num_items", "dhidden (tier c)", shape, dt, k_seed};
            struct cmp_case cw2 = {"ref_cross_entropy_fused num_items", "dW (tier c)", shape, dt, k_seed};
            cmp_vs_naive(&ch2, t_dh2, ndh, dh2, (int64_t)N * C, 2.0, FLT_EPSILON * cmp_rms(dh2, (int64_t)N * C), NULL);
            cmp_vs_naive(&cw2, t_dw2, ndw, dw2, (int64_t)V * C, 2.0, FLT_EPSILON * cmp_rms(dw2, (int64_t)V * C), NULL);
            if (getenv("REFINE_VERBOSE"))
                fprintf(stderr, "cross_entropy f32: loss %.9g torch %.9g (bound %.3g); num_items loss %.9g torch %.9g\n",
                        loss, t_loss, bound, l2, t_l2);
            free(ni), free(t_dh2), free(t_dw2), free(dh2), free(dw2), free(ndh), free(ndw);
        } else {
            /* bf16 model: logits are bf16 in both (HF: the bf16 lm_head output; ref: the double sum
             * rounded to fp32 then bf16). torch's fp32-accumulated GEMM differs from the double sum
             * by ≤ γ_C·Σ|h·w|, which moves a bf16 rounding only near a tie: logits tier b k = 1. */
            float *z = malloc(sizeof(float) * N * V);
            for (int n = 0; n < N; n++)
                for (int v = 0; v < V; v++) {
                    double a = 0;
                    for (int c = 0; c < C; c++) a += (double)h[n * C + c] * w[v * C + c];
                    z[n * V + v] = bf16_round((float)a);
                }
            struct cmp_case cz = {"lm_head logits vs F.linear bf16", "logits (tier b, k=1)", shape, dt, k_seed};
            cmp_elementwise(&cz, z, t_z, (int64_t)N * V, BF16_EPS, 1.0, 0.0, NULL);
            /* loss: the same derivation as f32 with the logits' bf16 differences: |Δloss| ≤
             * 2·max|Δz| (measured here from the two logit arrays) + the fp32 loss arithmetic. */
            double mdz = 0;
            for (int64_t j = 0; j < (int64_t)N * V; j++) mdz = fmax(mdz, fabs((double)z[j] - t_z[j]));
            double bound = 2 * mdz + 4 * FLT_EPSILON * (fabs(t_loss) + zscale);
            EXPECT(fabs(loss - t_loss) <= bound, "bf16 fused loss %.9g vs torch %.9g (bound %.3g)", loss, t_loss,
                   bound);
            if (getenv("REFINE_VERBOSE"))
                fprintf(stderr, "cross_entropy bf16: loss %.9g torch %.9g (bound %.3g), logits bit-exact %lld/%d\n",
                        loss, t_loss, bound, (long long)count_exact(z, t_z, (int64_t)N * V), N * V);
            /* dhidden, dW: both sides round dz to bf16 and run the GEMMs on bf16 operands; torch
             * rounds dW to bf16 (ref keeps fp32) and both round dhidden to bf16. Tier b, k = 2
             * (dz's rounding may differ by one bf16 ulp, the result's rounding), floor rms for the
             * cancellation of Σ_v dz = 0. */
            struct cmp_case ch = {"ref_cross_entropy_fused vs autograd", "dhidden (tier b, k=2)", shape, dt, k_seed};
            struct cmp_case cw = {"ref_cross_entropy_fused vs autograd", "dW (tier b, k=2)", shape, dt, k_seed};
            cmp_elementwise(&ch, dh, t_dh, (int64_t)N * C, BF16_EPS, 2.0, cmp_rms(t_dh, (int64_t)N * C), NULL);
            cmp_elementwise(&cw, dw, t_dw, (int64_t)V * C, BF16_EPS, 2.0, cmp_rms(t_dw, (int64_t)V * C), NULL);
            free(z);
        }
        free(h), free(w), free(t_z), free(t_dh), free(t_dw), free(dh), free(dw);
    }
    free(labels), free(y), free(ws);
    golden_close(&g);
}

int main(int argc, char **argv) {
    test_seed(argc, argv, k_seed);
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_cross_entropy();
    return test_finish("elem_golden_test");
}
