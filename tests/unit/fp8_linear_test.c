/* fp8_linear_test.c — ref/fp8_linear against mathematics: the recipes' rule table; each rule's
 * codes and scales from their definitions (per tensor: the nearest E4M3/E5M2 value of x·scale with
 * the stated scale; power-of-two scales: the largest power of two s with amax·s ≤ fp8_max, and
 * dequant(quant(x)) exactly a bf16 value; blocks: each block's own such scale); the transposed
 * copies; the three products against the exact sum of the dequantized operands (exact path: one
 * fp32 rounding of it; BLAS path: the fp32 dot-product bound), and all of it bit for bit on
 * integer inputs whose quantization and sums are exact.
 *
 *   bazel test //tests/unit:fp8_linear_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/fp8.h"
#include "ref/fp8_linear.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

static void *xalloc(size_t n) {
    void *p = calloc(n ? n : 1, 1);
    if (p == NULL) abort();
    return p;
}

/* An operand's storage for (rows, cols) under any rule. */
static struct fp8_operand operand(int64_t rows, int64_t cols) {
    struct fp8_operand o;
    memset(&o, 0, sizeof o);
    o.q = xalloc((size_t)(rows * cols));
    int64_t ns = fp8_block_scale_count(FP8_BLOCK_1X128, rows, cols), n2 = fp8_block_scale_count(FP8_BLOCK_128X128, rows, cols);
    o.s_inv = xalloc(sizeof(float) * (size_t)(ns > n2 ? ns : n2));
    return o;
}

static void free_operand(struct fp8_operand *o) { free(o->q), free(o->s_inv); }

static double pow2_floor(double v) { return ldexp(1.0, (int)floor(log2(v))); }

static void test_rule_table(void) {
    const struct {
        enum fp8_recipe r;
        enum fp8_role role;
        enum fp8_weight_kind k;
        enum fp8_rule want;
    } t[] = {
        {FP8_RECIPE_DELAYED, FP8_ROLE_X, FP8_WEIGHT_FROZEN, FP8_RULE_GIVEN},
        {FP8_RECIPE_DELAYED, FP8_ROLE_DY, FP8_WEIGHT_TRAINED, FP8_RULE_GIVEN},
        {FP8_RECIPE_DELAYED, FP8_ROLE_W, FP8_WEIGHT_TRAINED, FP8_RULE_GIVEN},
        {FP8_RECIPE_DELAYED, FP8_ROLE_W, FP8_WEIGHT_FROZEN, FP8_RULE_CURRENT_POW2},
        {FP8_RECIPE_CURRENT, FP8_ROLE_X, FP8_WEIGHT_TRAINED, FP8_RULE_CURRENT},
        {FP8_RECIPE_CURRENT, FP8_ROLE_W, FP8_WEIGHT_TRAINED, FP8_RULE_CURRENT},
        {FP8_RECIPE_CURRENT, FP8_ROLE_W, FP8_WEIGHT_FROZEN, FP8_RULE_CURRENT_POW2},
        {FP8_RECIPE_BLOCK, FP8_ROLE_X, FP8_WEIGHT_TRAINED, FP8_RULE_BLOCK_1X128},
        {FP8_RECIPE_BLOCK, FP8_ROLE_DY, FP8_WEIGHT_FROZEN, FP8_RULE_BLOCK_1X128},
        {FP8_RECIPE_BLOCK, FP8_ROLE_W, FP8_WEIGHT_TRAINED, FP8_RULE_BLOCK_128X128},
        {FP8_RECIPE_BLOCK, FP8_ROLE_W, FP8_WEIGHT_FROZEN, FP8_RULE_BLOCK_128X128},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        EXPECT(fp8_rule_for(t[i].r, t[i].role, t[i].k) == t[i].want, "rule of (%s, role %d, kind %d) is %d, want %d",
               fp8_recipe_names[t[i].r], (int)t[i].role, (int)t[i].k, (int)fp8_rule_for(t[i].r, t[i].role, t[i].k),
               (int)t[i].want);
    for (int r = 0; r < FP8_RECIPE_COUNT; r++)
        EXPECT(fp8_role_format((enum fp8_recipe)r, FP8_ROLE_X) == FP8_E4M3 &&
                   fp8_role_format((enum fp8_recipe)r, FP8_ROLE_W) == FP8_E4M3 &&
                   fp8_role_format((enum fp8_recipe)r, FP8_ROLE_DY) == (r == FP8_RECIPE_BLOCK ? FP8_E4M3 : FP8_E5M2),
               "%s: x and W E4M3, dy %s", fp8_recipe_names[r], r == FP8_RECIPE_BLOCK ? "E4M3 (DeepSeek-V3)" : "E5M2 (HYBRID)");
}

/* The scale a rule must pick for a tensor (or block) of amax a. */
static double expected_scale(enum fp8_rule rule, double a, enum fp8_format f) {
    const double mx = f == FP8_E4M3 ? 448.0 : 57344.0;
    if (a == 0.0) return 1.0;
    if (rule == FP8_RULE_CURRENT) return (double)((float)mx / (float)a); /* fp32 division, TE's */
    return pow2_floor(mx / a); /* the power-of-two rules */
}

/* Codes of every rule against their definition, on (rows, cols) of normal values with a few
 * outliers, for both formats. */
static void test_quantize(int rows, int cols, enum fp8_format f) {
    struct rng r;
    rng_init(&r, g_seed ^ (uint64_t)(rows * 977 + cols * 13 + f));
    const int64_t n = (int64_t)rows * cols;
    float *x = xalloc(sizeof(float) * (size_t)n), *dq = xalloc(sizeof(float) * (size_t)n);
    rng_fill_normal(&r, x, n, 0, f == FP8_E4M3 ? 3.0 : 1e-3);
    x[rng_int(&r, (int)n)] *= 40.0f; /* an outlier sets the tensor's scale */
    char shape[96];
    snprintf(shape, sizeof shape, "rows=%d cols=%d %s seed=%llu", rows, cols, f == FP8_E4M3 ? "E4M3" : "E5M2",
             (unsigned long long)g_seed);
    const enum fp8_rule rules[] = {FP8_RULE_GIVEN, FP8_RULE_CURRENT, FP8_RULE_CURRENT_POW2, FP8_RULE_BLOCK_1X128,
                                   FP8_RULE_BLOCK_128X128};
    const double mx = f == FP8_E4M3 ? 448.0 : 57344.0;
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++) {
        const enum fp8_rule rule = rules[k];
        struct fp8_operand q = operand(rows, cols), qt = operand(cols, rows);
        struct fp8_stats st = {0.0f, 0, 0u};
        float amax = -1.0f;
        const float given = 4.0f * (float)mx / fp8_amax(x, n); /* a delayed scale that saturates the outlier */
        const float used = ref_fp8_quantize(&q, &qt, &st, &amax, x, rows, cols, f, rule, given);
        EXPECT(amax == fp8_amax(x, n), "%s rule %d: the returned amax %g is max|x| %g", shape, (int)rule, (double)amax,
               (double)fp8_amax(x, n));
        EXPECT(q.rows == rows && q.cols == cols && qt.rows == cols && qt.cols == rows && q.format == f,
               "%s rule %d: the operands' shapes and format", shape, (int)rule);
        EXPECT(q.mode == fp8_rule_scaling(rule), "%s rule %d: mode %d", shape, (int)rule, (int)q.mode);
        int64_t bad = 0, sat = 0, first = -1;
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) {
                /* the scale of element (i, j) from the definition */
                double s;
                if (rule == FP8_RULE_GIVEN) {
                    s = given;
                } else if (rule == FP8_RULE_CURRENT || rule == FP8_RULE_CURRENT_POW2) {
                    s = expected_scale(rule, (double)amax, f);
                } else {
                    const int bh = rule == FP8_RULE_BLOCK_1X128 ? 1 : FP8_BLOCK_SIZE;
                    const int i0 = i / bh * bh, j0 = j / FP8_BLOCK_SIZE * FP8_BLOCK_SIZE;
                    double a = 0;
                    for (int ii = i0; ii < i0 + bh && ii < rows; ii++)
                        for (int jj = j0; jj < j0 + FP8_BLOCK_SIZE && jj < cols; jj++)
                            a = fmax(a, fabs((double)x[(int64_t)ii * cols + jj]));
                    s = expected_scale(rule, a, f);
                }
                const float v = x[(int64_t)i * cols + j] * (float)s;
                const uint8_t want = fp8_from_float(v, f, FP8_SATFINITE);
                sat += f == FP8_E4M3 ? fabs((double)v) > 464.0 : fabs((double)v) >= 61440.0;
                if (q.q[(int64_t)i * cols + j] != want) {
                    if (first < 0) first = (int64_t)i * cols + j;
                    bad++;
                }
            }
        EXPECT(bad == 0, "%s rule %d: %lld codes differ from fp8(x·scale) (first at %lld)", shape, (int)rule,
               (long long)bad, (long long)first);
        if (rule == FP8_RULE_GIVEN || rule == FP8_RULE_CURRENT || rule == FP8_RULE_CURRENT_POW2)
            EXPECT(st.saturated == sat, "%s rule %d: saturated %lld, counted %lld", shape, (int)rule,
                   (long long)st.saturated, (long long)sat);
        if (rule == FP8_RULE_GIVEN) EXPECT(used == given && q.s_inv[0] == 1.0f / given, "%s: the given scale", shape);
        if (rule == FP8_RULE_CURRENT)
            EXPECT(used == (float)mx / amax && q.s_inv[0] == 1.0f / used, "%s: current scale %g", shape, (double)used);
        if (rule == FP8_RULE_CURRENT_POW2 || rule == FP8_RULE_BLOCK_1X128 || rule == FP8_RULE_BLOCK_128X128) {
            EXPECT((double)used == pow2_floor(mx / amax), "%s rule %d: the tensor's power-of-two scale %g", shape,
                   (int)rule, (double)used);
            /* no power-of-two scaled value saturates, and dequant(quant(x)) is a bf16 value */
            EXPECT(st.saturated == 0, "%s rule %d: %lld saturated under a power-of-two scale", shape, (int)rule,
                   (long long)st.saturated);
            ref_fp8_dequantize_operand(dq, &q);
            int64_t not_bf16 = 0;
            for (int64_t e = 0; e < n; e++) not_bf16 += bf16_round(dq[e]) != dq[e];
            EXPECT(not_bf16 == 0, "%s rule %d: %lld dequantized values are not bf16 values", shape, (int)rule,
                   (long long)not_bf16);
        }
        if (rule == FP8_RULE_GIVEN) EXPECT(st.saturated > 0, "%s: the outlier saturates under the given scale", shape);
        /* the transposed copy: per tensor and 128×128, the same codes transposed */
        if (rule != FP8_RULE_BLOCK_1X128) {
            int64_t tb = 0;
            for (int i = 0; i < rows; i++)
                for (int j = 0; j < cols; j++) tb += qt.q[(int64_t)j * rows + i] != q.q[(int64_t)i * cols + j];
            EXPECT(tb == 0, "%s rule %d: %lld transposed codes differ", shape, (int)rule, (long long)tb);
        } else {
            /* 1×128 of xᵀ: blocks of 128 rows of x */
            int64_t tb = 0;
            for (int j = 0; j < cols; j++)
                for (int i = 0; i < rows; i++) {
                    const int i0 = i / FP8_BLOCK_SIZE * FP8_BLOCK_SIZE;
                    double a = 0;
                    for (int ii = i0; ii < i0 + FP8_BLOCK_SIZE && ii < rows; ii++)
                        a = fmax(a, fabs((double)x[(int64_t)ii * cols + j]));
                    const float v = x[(int64_t)i * cols + j] * (float)expected_scale(rule, a, f);
                    tb += qt.q[(int64_t)j * rows + i] != fp8_from_float(v, f, FP8_SATFINITE);
                }
            EXPECT(tb == 0, "%s 1x128: %lld codes of the transposed quantization differ", shape, (long long)tb);
        }
        free_operand(&q), free_operand(&qt);
    }
    /* a non-finite input: flagged, and a current scale falls back to 1 */
    x[n - 1] = INFINITY;
    struct fp8_operand q = operand(rows, cols);
    struct fp8_stats st = {0.0f, 0, 0u};
    const float used = ref_fp8_quantize(&q, NULL, &st, NULL, x, rows, cols, f, FP8_RULE_CURRENT, 0.0f);
    EXPECT(used == 1.0f && (st.flags & FP8_FLAG_INPUT_NONFINITE) && (st.flags & FP8_FLAG_AMAX_NONFINITE),
           "%s: an Inf input gives scale %g (1 expected) and flags %#x", shape, (double)used, st.flags);
    free_operand(&q);
    free(x), free(dq);
}

/* The exact Σ_k dq_a·dq_b in long double, and Σ |dq_a·dq_b|. */
static void exact_product(long double *acc, double *absacc, const float *da, const float *db, int M, int P, int K) {
    for (int m = 0; m < M; m++)
        for (int p = 0; p < P; p++) {
            long double s = 0;
            double t = 0;
            for (int k = 0; k < K; k++) {
                s += (long double)da[(int64_t)m * K + k] * (long double)db[(int64_t)p * K + k];
                t += fabs((double)da[(int64_t)m * K + k] * (double)db[(int64_t)p * K + k]);
            }
            acc[(int64_t)m * P + p] = s;
            absacc[(int64_t)m * P + p] = t;
        }
}

/* The three products of a linear on random operands under a recipe, each against the exact sum
 * of its dequantized operands: the exact path within one fp32 rounding (plus one per K block for
 * the scaled partials, which are not exact for non-power-of-two scales), the BLAS path within the
 * fp32 dot-product bound γ_K·Σ|a b| (+ the same roundings). */
static void test_products(int N, int C_in, int C_out, enum fp8_recipe recipe) {
    struct rng r;
    rng_init(&r, g_seed * 5 + (uint64_t)(N * 101 + C_in * 7 + C_out + recipe));
    const int64_t nx = (int64_t)N * C_in, nw = (int64_t)C_out * C_in, ny = (int64_t)N * C_out;
    float *x = xalloc(4 * (size_t)nx), *w = xalloc(4 * (size_t)nw), *dy = xalloc(4 * (size_t)ny);
    rng_fill_normal(&r, x, nx, 0, 2);
    rng_fill_normal(&r, w, nw, 0, 0.05);
    rng_fill_normal(&r, dy, ny, 0, 1e-4);
    struct fp8_operand xq = operand(N, C_in), xt = operand(C_in, N), wq = operand(C_out, C_in),
                       wt = operand(C_in, C_out), dq = operand(N, C_out), dt = operand(C_out, N);
    const enum fp8_rule rx = fp8_rule_for(recipe, FP8_ROLE_X, FP8_WEIGHT_TRAINED),
                        rw = fp8_rule_for(recipe, FP8_ROLE_W, FP8_WEIGHT_TRAINED),
                        rd = fp8_rule_for(recipe, FP8_ROLE_DY, FP8_WEIGHT_TRAINED);
    ref_fp8_quantize(&xq, &xt, NULL, NULL, x, N, C_in, FP8_E4M3, rx, 16.0f);
    ref_fp8_quantize(&wq, &wt, NULL, NULL, w, C_out, C_in, FP8_E4M3, rw, 1024.0f);
    ref_fp8_quantize(&dq, &dt, NULL, NULL, dy, N, C_out, fp8_role_format(recipe, FP8_ROLE_DY), rd, 65536.0f);
    const int64_t most = nx > nw ? (nx > ny ? nx : ny) : (nw > ny ? nw : ny);
    float *da = xalloc(4 * (size_t)most), *db = xalloc(4 * (size_t)most), *got = xalloc(4 * (size_t)most);
    long double *acc = xalloc(sizeof(long double) * (size_t)most);
    double *absacc = xalloc(sizeof(double) * (size_t)most);
    float *ws = xalloc(sizeof(float) * ref_fp8_linear_workspace_size(N, C_in, C_out));
    const struct {
        const char *what;
        const struct fp8_operand *a, *b;
        int M, P, K;
    } prods[3] = {{"y = x Wᵀ", &xq, &wq, N, C_out, C_in},
                  {"dx = dy W", &dq, &wt, N, C_in, C_out},
                  {"dW = dyᵀ x", &dt, &xt, C_out, C_in, N}};
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d %s seed=%llu", N, C_in, C_out, fp8_recipe_names[recipe],
             (unsigned long long)g_seed);
    const double u = FLT_EPSILON / 2;
    for (int k = 0; k < 3; k++) {
        const int M = prods[k].M, P = prods[k].P, K = prods[k].K, nkb = (K + FP8_BLOCK_SIZE - 1) / FP8_BLOCK_SIZE;
        ref_fp8_dequantize_operand(da, prods[k].a);
        ref_fp8_dequantize_operand(db, prods[k].b);
        exact_product(acc, absacc, da, db, M, P, K);
        for (int how = 0; how < 2; how++) {
            ref_fp8_product(got, prods[k].a, prods[k].b, M, P, K, (enum fp8_product)how, ws);
            /* dequantized operands are each rounded once (dec·σ in fp32), the scaled partials once per
             * block, the result once; BLAS adds fp32 sums of up to min(K, 128) terms per block */
            const int kl = how == FP8_PRODUCT_BLAS ? (K < FP8_BLOCK_SIZE || prods[k].a->mode == FP8_SCALING_TENSOR ? K : FP8_BLOCK_SIZE) : 0;
            const double gamma = (kl + nkb + 4) * u / (1 - (kl + nkb + 4) * u);
            int64_t bad = 0, first = -1;
            for (int64_t e = 0; e < (int64_t)M * P; e++) {
                const double err = fabs((double)got[e] - (double)acc[e]);
                if (!(err <= gamma * absacc[e] + u * fabs((double)acc[e]) + 1e-30)) {
                    if (first < 0) first = e;
                    bad++;
                }
            }
            EXPECT(bad == 0, "%s %s (%s): %lld of %lld beyond the bound (first %lld: got %.9g exact %.9Lg)", shape,
                   prods[k].what, how ? "blas" : "exact", (long long)bad, (long long)M * P, (long long)first,
                   first >= 0 ? (double)got[first] : 0.0, first >= 0 ? acc[first] : 0.0L);
        }
    }
    /* the linear: y = act(acc + b), dx = act(acc), dW accumulates */
    float *b = xalloc(4 * (size_t)C_out), *y = xalloc(4 * (size_t)ny), *y2 = xalloc(4 * (size_t)ny);
    rng_fill_normal(&r, b, C_out, 0, 1);
    ref_fp8_linear_forward(y, &xq, &wq, b, N, C_in, C_out, FP8_PRODUCT_EXACT, ACT_BF16, ws);
    ref_fp8_product(y2, &xq, &wq, N, C_out, C_in, FP8_PRODUCT_EXACT, ws);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < C_out; o++) y2[(int64_t)n * C_out + o] = bf16_round(y2[(int64_t)n * C_out + o] + b[o]);
    struct cmp_case c = {"fp8_linear_forward", "y = bf16(acc + b)", shape, "bf16", g_seed};
    cmp_exact_f32(&c, y, y2, ny);
    float *dw = xalloc(4 * (size_t)nw), *dw2 = xalloc(4 * (size_t)nw);
    rng_fill_normal(&r, dw, nw, 0, 1);
    memcpy(dw2, dw, 4 * (size_t)nw);
    ref_fp8_linear_backward_dw(dw, &dt, &xt, N, C_in, C_out, FP8_PRODUCT_BLAS, ws);
    ref_fp8_product(got, &dt, &xt, C_out, C_in, N, FP8_PRODUCT_BLAS, ws);
    for (int64_t e = 0; e < nw; e++) dw2[e] += got[e];
    c.op = "fp8_linear_backward_dw", c.what = "dW += acc", c.dtype = "f32";
    cmp_exact_f32(&c, dw, dw2, nw);
    free(b), free(y), free(y2), free(dw), free(dw2);
    free_operand(&xq), free_operand(&xt), free_operand(&wq), free_operand(&wt), free_operand(&dq), free_operand(&dt);
    free(x), free(w), free(dy), free(da), free(db), free(got), free(acc), free(absacc), free(ws);
}

/* Integer inputs in [-8, 8] (amax 8 in every tensor and block): a power-of-two scale quantizes
 * them exactly, and every partial sum is an integer below 2^24, so both paths give the integer
 * result bit for bit (tier a), for the per-tensor power-of-two rule and both block rules. */
static void test_exact_integer(int N, int C_in, int C_out) {
    struct rng r;
    rng_init(&r, g_seed ^ (uint64_t)(N * 31 + C_in * 3 + C_out * 7));
    const int64_t nx = (int64_t)N * C_in, nw = (int64_t)C_out * C_in, ny = (int64_t)N * C_out;
    float *x = xalloc(4 * (size_t)nx), *w = xalloc(4 * (size_t)nw), *dy = xalloc(4 * (size_t)ny);
    rng_fill_int(&r, x, nx, -8, 8);
    rng_fill_int(&r, w, nw, -8, 8);
    rng_fill_int(&r, dy, ny, -8, 8);
    /* each row and each 128-column block holds an 8 (the same scale everywhere) */
    for (int64_t i = 0; i < nx; i += FP8_BLOCK_SIZE) x[i] = 8;
    for (int64_t i = 0; i < nw; i += FP8_BLOCK_SIZE) w[i] = 8;
    for (int64_t i = 0; i < ny; i += FP8_BLOCK_SIZE) dy[i] = 8;
    float *y = xalloc(4 * (size_t)ny), *yi = xalloc(4 * (size_t)ny), *dx = xalloc(4 * (size_t)nx),
          *dxi = xalloc(4 * (size_t)nx), *dw = xalloc(4 * (size_t)nw), *dwi = xalloc(4 * (size_t)nw);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < C_out; o++) {
            double s = 0;
            for (int i = 0; i < C_in; i++) s += (double)x[(int64_t)n * C_in + i] * w[(int64_t)o * C_in + i];
            yi[(int64_t)n * C_out + o] = (float)s;
        }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C_in; i++) {
            double s = 0;
            for (int o = 0; o < C_out; o++) s += (double)dy[(int64_t)n * C_out + o] * w[(int64_t)o * C_in + i];
            dxi[(int64_t)n * C_in + i] = (float)s;
        }
    for (int o = 0; o < C_out; o++)
        for (int i = 0; i < C_in; i++) {
            double s = 1.0; /* dW accumulates onto 1 */
            for (int n = 0; n < N; n++) s += (double)dy[(int64_t)n * C_out + o] * x[(int64_t)n * C_in + i];
            dwi[(int64_t)o * C_in + i] = (float)s;
        }
    float *ws = xalloc(sizeof(float) * ref_fp8_linear_workspace_size(N, C_in, C_out));
    const enum fp8_recipe recipes[2] = {FP8_RECIPE_CURRENT, FP8_RECIPE_BLOCK};
    char shape[96];
    for (int k = 0; k < 2; k++) {
        const enum fp8_recipe rc = recipes[k];
        /* the power-of-two per-tensor rule is the frozen weights'; use it for all three here */
        const enum fp8_rule rx = rc == FP8_RECIPE_BLOCK ? FP8_RULE_BLOCK_1X128 : FP8_RULE_CURRENT_POW2,
                            rw = rc == FP8_RECIPE_BLOCK ? FP8_RULE_BLOCK_128X128 : FP8_RULE_CURRENT_POW2;
        struct fp8_operand xq = operand(N, C_in), xt = operand(C_in, N), wq = operand(C_out, C_in),
                           wt = operand(C_in, C_out), dq = operand(N, C_out), dt = operand(C_out, N);
        ref_fp8_quantize(&xq, &xt, NULL, NULL, x, N, C_in, FP8_E4M3, rx, 0.0f);
        ref_fp8_quantize(&wq, &wt, NULL, NULL, w, C_out, C_in, FP8_E4M3, rw, 0.0f);
        ref_fp8_quantize(&dq, &dt, NULL, NULL, dy, N, C_out, FP8_E5M2, rx, 0.0f);
        for (int how = 0; how < 2; how++) {
            snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d %s", N, C_in, C_out, rc == FP8_RECIPE_BLOCK ? "blocks" : "tensor");
            struct cmp_case c = {how ? "fp8_linear blas" : "fp8_linear exact", "y (integer inputs)", shape, "f32", g_seed};
            ref_fp8_linear_forward(y, &xq, &wq, NULL, N, C_in, C_out, (enum fp8_product)how, ACT_F32, ws);
            cmp_exact_f32(&c, y, yi, ny);
            c.what = "dx (integer inputs)";
            ref_fp8_linear_backward_dx(dx, &dq, &wt, N, C_in, C_out, (enum fp8_product)how, ACT_F32, ws);
            cmp_exact_f32(&c, dx, dxi, nx);
            c.what = "dW (integer inputs, accumulated onto 1)";
            for (int64_t e = 0; e < nw; e++) dw[e] = 1.0f;
            ref_fp8_linear_backward_dw(dw, &dt, &xt, N, C_in, C_out, (enum fp8_product)how, ws);
            cmp_exact_f32(&c, dw, dwi, nw);
        }
        free_operand(&xq), free_operand(&xt), free_operand(&wq), free_operand(&wt), free_operand(&dq), free_operand(&dt);
    }
    free(x), free(w), free(dy), free(y), free(yi), free(dx), free(dxi), free(dw), free(dwi), free(ws);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261201);
    test_rule_table();
    const int qshapes[][2] = {{1, 1}, {3, 130}, {130, 3}, {64, 256}, {257, 129}};
    for (size_t s = 0; s < sizeof qshapes / sizeof qshapes[0]; s++)
        for (int f = 0; f < 2; f++) test_quantize(qshapes[s][0], qshapes[s][1], (enum fp8_format)f);
    const int shapes[][3] = {{16, 64, 32}, {32, 96, 160}, {64, 160, 224}, {128, 256, 384}, {48, 300, 130}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int rc = 0; rc < FP8_RECIPE_COUNT; rc++) test_products(shapes[s][0], shapes[s][1], shapes[s][2], (enum fp8_recipe)rc);
        test_exact_integer(shapes[s][0], shapes[s][1], shapes[s][2]);
    }
    return test_finish("fp8_linear_test");
}
