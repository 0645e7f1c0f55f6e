/* attention_golden_test.c — ref/attention (naive and flash, ACT_F32) against transformers' eager
 * attention (tests/golden/data/ops/attention.safetensors, from tests/golden/gen/gen_attention.py).
 *
 *   bazel test //tests/golden:attention_golden_test
 *
 * The fixture holds bf16-valued inputs (exact in fp32), the fp32 outputs of transformers'
 * eager_attention_forward on the CPU (repeat_kv GQA, scale D^-0.5, additive causal mask, softmax in
 * fp32) with their autograd gradients, torch.logsumexp of the masked scores, and for each tensor
 * the max and rms error of that fp32 result against the same math in float64 (err_max, err_rms).
 *
 * Tolerance (STYLE.md tier (c), flash-attention's rule): the reference's error against the exact
 * result may be at most 2× the error of the naive same-precision implementation (here torch's own
 * fp32 eager attention). The fixture stores torch's error statistics rather than the float64
 * result itself (to keep it small), so the test checks the consequence through the triangle
 * inequality, |ref − eager| ≤ |ref − exact| + |eager − exact| ≤ 3·err_eager:
 *   max |ref − eager| ≤ 3·err_max + floor,   rms(ref − eager) ≤ 3·err_rms + floor,
 * floor = FLT_EPSILON·rms(eager) (one fp32 rounding at the scale of the tensor, for tensors where
 * torch is exact, e.g. every output at T = 1), plus for dq and dk the one rounding the reference
 * makes that the exact math does not: Δ is stored in fp32 (|δΔ| ≤ ε/2·|Δ|), which moves
 * dq by ≤ ε/2·scale·max|Δ|·max|k| (Σ_j p = 1) and dk by ≤ ε/2·scale·max|Δ|·max|q|·max_j Σ_{h,i} p[i,j]
 * (the column sums over the group, read from the naive P).
 * A semantic difference (mask, head mapping, scale) shows as errors of O(1), far outside.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/attention.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/golden/golden.h"

#define FIXTURE "tests/golden/data/ops/attention.safetensors"

static uint64_t g_seed;

struct gcase {
    int B, T, H, KVH, D;
};

/* The cases of gen_attention.py (CASES); the shapes are checked against the file. */
static const struct gcase k_cases[] = {{2, 1, 8, 2, 64}, {2, 17, 6, 2, 64}, {1, 64, 4, 1, 64}};

static double max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* The triangle-inequality form of tier (c) described above. Counts one check; on failure prints
 * op, what, shape, seed, the worst element and both budgets. */
static void check_vs_eager(const char *op, const char *what, const char *shape, const float *got,
                           const float *eager, int64_t n, double err_max, double err_rms, double floor) {
    double worst = 0, e2 = 0;
    int64_t wi = 0, nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(eager[i])) {
            nonfinite++;
            continue;
        }
        double e = fabs((double)got[i] - (double)eager[i]);
        e2 += e * e;
        if (e > worst) worst = e, wi = i;
    }
    const double rms = n > 0 ? sqrt(e2 / (double)n) : 0;
    const double max_thr = 3.0 * err_max + floor, rms_thr = 3.0 * err_rms + floor;
    if (nonfinite == 0 && worst <= max_thr && rms <= rms_thr) {
        test_pass();
        if (getenv("REFINE_VERBOSE") != NULL)
            fprintf(stderr, "  ok %s/%s [%s] max %.3g (budget %.3g) rms %.3g (budget %.3g)\n", op, what, shape, worst,
                    max_thr, rms, rms_thr);
        return;
    }
    test_fail("%s/%s [%s] seed=%" PRIu64 " vs transformers eager: %" PRId64
              " non-finite; max err %.4g at %" PRId64 " (got %.9g, eager %.9g) budget %.4g (%.0f%%); rms err %.4g "
              "budget %.4g (%.0f%%)",
              op, what, shape, g_seed, nonfinite, worst, wi, (double)got[wi], (double)eager[wi], max_thr,
              100.0 * worst / max_thr, rms, rms_thr, 100.0 * rms / rms_thr);
}

static void run_case(const struct golden *g, int n, struct gcase c) {
    char key[32], shape[96];
    snprintf(shape, sizeof shape, "c%d B=%d T=%d H=%d KVH=%d D=%d", n, c.B, c.T, c.H, c.KVH, c.D);
    const int64_t sq[4] = {c.B, c.T, c.H, c.D}, sk[4] = {c.B, c.T, c.KVH, c.D}, sl[3] = {c.B, c.H, c.T},
                  se[2] = {5, 2};
    const int64_t nq = (int64_t)c.B * c.T * c.H * c.D, nk = (int64_t)c.B * c.T * c.KVH * c.D,
                  nl = (int64_t)c.B * c.H * c.T;
#define LOAD(name, nd, shp) (snprintf(key, sizeof key, "c%d." name, n), golden_f32(g, key, nd, shp))
    float *q = LOAD("q", 4, sq), *k = LOAD("k", 4, sk), *v = LOAD("v", 4, sk), *dout = LOAD("dout", 4, sq);
    float *e_out = LOAD("out", 4, sq), *e_lse = LOAD("lse", 3, sl), *e_dq = LOAD("dq", 4, sq);
    float *e_dk = LOAD("dk", 4, sk), *e_dv = LOAD("dv", 4, sk), *err = LOAD("err", 2, se);
#undef LOAD
    const float scale = 1.0f / sqrtf((float)c.D);
    float *out = malloc(sizeof(float) * (size_t)nq), *lse = malloc(sizeof(float) * (size_t)nl);
    float *dq = malloc(sizeof(float) * (size_t)nq), *dk = malloc(sizeof(float) * (size_t)nk);
    float *dv = malloc(sizeof(float) * (size_t)nk);
    size_t wsn = ref_attention_naive_workspace_size(c.B, c.T, c.H);
    size_t wsf = ref_attention_flash_backward_workspace_size(c.B, c.T, c.H);
    float *ws = malloc(wsn > wsf ? wsn : wsf);
    EXPECT(out && lse && dq && dk && dv && ws, "out of memory");

    /* max |Δ| = max_i |dout_i · out_i| over the eager output (the same to fp32 accuracy). */
    double max_delta = 0;
    for (int64_t r = 0; r < nq / c.D; r++) {
        double s = 0;
        for (int d = 0; d < c.D; d++) s += (double)dout[r * c.D + d] * e_out[r * c.D + d];
        max_delta = fmax(max_delta, fabs(s));
    }
    const double fl_dq = 0.5 * FLT_EPSILON * scale * max_delta * max_abs(k, nk);
    double fl_dk = 0; /* needs the column sums of P: set after the naive forward */

    /* impl 0: naive; 1: flash with the GPU's 64×64 tiles; 2: flash with tiles that divide nothing. */
    const int blocks[3][2] = {{0, 0}, {64, 64}, {5, 3}};
    for (int impl = 0; impl < 3; impl++) {
        const char *op = impl == 0 ? "attention_naive" : impl == 1 ? "attention_flash_64x64" : "attention_flash_5x3";
        if (impl == 0) {
            ref_attention_naive_forward(out, lse, q, k, v, c.B, c.T, c.H, c.KVH, c.D, scale, ACT_F32, ws);
            /* max over (b, kv head, j) of Σ_{h in group} Σ_i P[b,h,i,j], from the naive workspace. */
            double colmax = 0;
            const int G = c.H / c.KVH;
            for (int b = 0; b < c.B; b++)
                for (int kvh = 0; kvh < c.KVH; kvh++)
                    for (int j = 0; j < c.T; j++) {
                        double cs = 0;
                        for (int h = kvh * G; h < (kvh + 1) * G; h++)
                            for (int i = j; i < c.T; i++) cs += ws[(((int64_t)b * c.H + h) * c.T + i) * c.T + j];
                        colmax = fmax(colmax, cs);
                    }
            fl_dk = 0.5 * FLT_EPSILON * scale * max_delta * max_abs(q, nq) * colmax;
            ref_attention_naive_backward(dq, dk, dv, dout, q, k, v, out, c.B, c.T, c.H, c.KVH, c.D, scale, ACT_F32,
                                         ws);
        } else {
            ref_attention_flash_forward(out, lse, q, k, v, c.B, c.T, c.H, c.KVH, c.D, scale, blocks[impl][0],
                                        blocks[impl][1], ACT_F32);
            ref_attention_flash_backward(dq, dk, dv, dout, q, k, v, out, lse, c.B, c.T, c.H, c.KVH, c.D, scale,
                                         blocks[impl][0], blocks[impl][1], ACT_F32, ws);
        }
        const float *got[5] = {out, lse, dq, dk, dv}, *eag[5] = {e_out, e_lse, e_dq, e_dk, e_dv};
        const int64_t cnt[5] = {nq, nl, nq, nk, nk};
        const double extra[5] = {0, 0, fl_dq, fl_dk, 0};
        const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
        for (int t = 0; t < 5; t++)
            check_vs_eager(op, names[t], shape, got[t], eag[t], cnt[t], err[2 * t], err[2 * t + 1],
                           FLT_EPSILON * cmp_rms(eag[t], cnt[t]) + extra[t]);
    }
    free(q), free(k), free(v), free(dout), free(e_out), free(e_lse), free(e_dq), free(e_dk), free(e_dv), free(err);
    free(out), free(lse), free(dq), free(dk), free(dv), free(ws);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123); /* the fixture's seed; nothing here is random */
    struct golden g;
    golden_open(&g, FIXTURE);
    const char *meta = golden_meta(&g, "meta");
    EXPECT(meta != NULL && strstr(meta, "\"seed\": \"20261123\"") != NULL, "fixture metadata lacks the seed: %s",
           meta ? meta : "(none)");
    if (meta != NULL) printf("fixture %s: %s\n", FIXTURE, meta);
    for (int n = 0; n < (int)(sizeof k_cases / sizeof k_cases[0]); n++) run_case(&g, n, k_cases[n]);
    golden_close(&g);
    return test_finish("attention_golden_test");
}
