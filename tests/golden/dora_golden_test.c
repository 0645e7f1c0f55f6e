/* dora_golden_test.c — ref/dora (on top of ref/linear) against PEFT's DoRA linear layer
 * (use_dora=True): the detached row norm in both forms, the forward and every gradient (dm, dA,
 * dB, dx), for alpha/r and rsLoRA scaling and with refine's dropout mask fed to PEFT (the case
 * where PEFT recomputes the base output on the dropped input). Fixture:
 * tests/golden/data/adapters/dora.safetensors (tests/golden/gen/gen_adapters.py).
 *
 * Tolerance (tier b, STYLE.md), derived as in lora_golden_test.c: torch rounds each fp32
 * reduction (error ≤ K·u·Σ|terms|), the reference sums in double; k = 2·(the summed reduction
 * lengths on the tensor's path) in units of FLT_EPSILON, floor = rms of the reference. The row
 * norm: C_in terms plus R for BA. Mask and scales exact (tier a).
 *
 *   bazel test //tests/golden:dora_golden_test
 */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/dora.h"
#include "ref/dropout.h"
#include "ref/linear.h"
#include "ref/lora.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/golden/golden.h"

#define FIXTURE "tests/golden/data/adapters/dora.safetensors"
enum { N = 6, C_IN = 20, C_OUT = 12 };
#define DROP_SEED 0x5EED0F00DULL

/* "<case>.<name>" of the fixture (golden_case_f32). */
static float *get(const struct golden *g, const char *cs, const char *name, int ndim, int64_t d0, int64_t d1) {
    return golden_case_f32(g, cs, name, ndim, d0, d1);
}

static void run_case(const struct golden *g, const char *cs, int case_index, int R, double alpha,
                     enum lora_scaling mode, float p_drop) {
    float *w = get(g, cs, "w", 2, C_OUT, C_IN), *bias = get(g, cs, "bias", 1, C_OUT, 0);
    float *a = get(g, cs, "lora_a", 2, R, C_IN), *b = get(g, cs, "lora_b", 2, C_OUT, R);
    float *mag = get(g, cs, "mag", 1, C_OUT, 0), *wn_ref = get(g, cs, "wnorm", 1, C_OUT, 0);
    float *x = get(g, cs, "x", 2, N, C_IN), *gy = get(g, cs, "g", 2, N, C_OUT), *y_ref = get(g, cs, "y", 2, N, C_OUT);
    float *dx_ref = get(g, cs, "dx", 2, N, C_IN), *da_ref = get(g, cs, "dlora_a", 2, R, C_IN);
    float *db_ref = get(g, cs, "dlora_b", 2, C_OUT, R), *dm_ref = get(g, cs, "dmag", 1, C_OUT, 0);
    float *scale_t = get(g, cs, "scale", 1, 1, 0);
    char shape[96];
    snprintf(shape, sizeof shape, "case=%s N=%d C_in=%d C_out=%d R=%d p=%g", cs, N, C_IN, C_OUT, R, (double)p_drop);

    float scale = ref_lora_scale(alpha, R, mode);
    struct cmp_case c = {"dora golden", "scale", shape, "f32", 0};
    cmp_exact_f32(&c, &scale, scale_t, 1);

    /* Row norms: PEFT's get_weight_norm against both forms. */
    float wn[C_OUT], wn_f[C_OUT], wsq[C_OUT];
    double *wsd = malloc(sizeof(double) * ref_dora_weight_norm_factored_workspace_size(C_OUT, R));
    ref_dora_weight_norm(wn, w, a, b, C_IN, C_OUT, R, scale);
    ref_dora_weight_sq(wsq, w, C_IN, C_OUT);
    ref_dora_weight_norm_factored(wn_f, wsq, w, a, b, C_IN, C_OUT, R, scale, wsd);
    c.what = "wnorm direct";
    cmp_elementwise(&c, wn, wn_ref, C_OUT, FLT_EPSILON, 2.0 * (C_IN + R), 0.0, NULL);
    c.what = "wnorm factored";
    cmp_elementwise(&c, wn_f, wn_ref, C_OUT, FLT_EPSILON, 2.0 * (C_IN + R), 0.0, NULL);

    uint8_t *keep = NULL;
    float *xd = NULL, keep_scale = 1.0f;
    if (p_drop > 0)
        golden_dropout_case(g, cs, &c, x, N, C_IN, p_drop, DROP_SEED, (uint64_t)case_index, &keep, &xd, &keep_scale);

    /* Both norm forms drive a full forward/backward; each must match PEFT. */
    for (int form = 0; form < 2; form++) {
        const float *wnorm = form == 0 ? wn : wn_f;
        float y[N * C_OUT], u[N * 8], dx[N * C_IN];
        float *ws = malloc(sizeof(float) * ref_dora_backward_workspace_size(N, C_OUT, R));
        float *da = calloc((size_t)R * C_IN, sizeof(float)), *db = calloc((size_t)C_OUT * R, sizeof(float));
        float dm[C_OUT] = {0};
        ref_linear_forward_naive(y, x, w, bias, N, C_IN, C_OUT, ACT_F32);
        ref_dora_forward(y, u, x, xd, w, bias, a, b, mag, wnorm, N, C_IN, C_OUT, R, scale, ACT_F32);
        ref_linear_backward_naive(dx, NULL, NULL, gy, x, w, N, C_IN, C_OUT, ACT_F32);
        ref_dora_backward(dx, dm, da, db, gy, x, xd, keep, keep_scale, u, w, a, b, mag, wnorm, N, C_IN, C_OUT, R,
                          scale, ACT_F32, ws);
        c.op = form == 0 ? "dora golden (direct norm)" : "dora golden (factored norm)";
        /* Every output carries the norm's error (C_in + R) besides its own reductions:
         * y: base (C_in, twice with dropout) + u (C_in) + l (R); dx: dy W (C_out, twice) + du (C_out) + du A (R);
         * dA: du (C_out) then N; dB: u (C_in) then N; dm: base (C_in) + l (C_in + R) then N. */
        int kn = C_IN + R;
        c.what = "y";
        cmp_elementwise(&c, y, y_ref, N * C_OUT, FLT_EPSILON, 2.0 * (kn + 3 * C_IN + 1 + R), cmp_rms(y_ref, N * C_OUT),
                        NULL);
        c.what = "dx";
        cmp_elementwise(&c, dx, dx_ref, N * C_IN, FLT_EPSILON, 2.0 * (kn + 3 * C_OUT + R), cmp_rms(dx_ref, N * C_IN),
                        NULL);
        c.what = "dlora_a";
        cmp_elementwise(&c, da, da_ref, R * C_IN, FLT_EPSILON, 2.0 * (kn + C_OUT + N), cmp_rms(da_ref, R * C_IN), NULL);
        c.what = "dlora_b";
        cmp_elementwise(&c, db, db_ref, C_OUT * R, FLT_EPSILON, 2.0 * (kn + C_IN + N), cmp_rms(db_ref, C_OUT * R),
                        NULL);
        c.what = "dmag";
        cmp_elementwise(&c, dm, dm_ref, C_OUT, FLT_EPSILON, 2.0 * (kn + 2 * C_IN + R + N), cmp_rms(dm_ref, C_OUT), NULL);
        free(ws), free(da), free(db);
    }

    free(w), free(bias), free(a), free(b), free(mag), free(wn_ref), free(x), free(gy), free(y_ref), free(dx_ref);
    free(da_ref), free(db_ref), free(dm_ref), free(scale_t), free(keep), free(xd), free(wsd);
}

int main(int argc, char **argv) {
    (void)test_seed(argc, argv, 0); /* fixtures carry their own seed (MANIFEST) */
    struct golden g;
    golden_open(&g, FIXTURE);
    run_case(&g, "std", 0, 4, 8.0, LORA_SCALE_STANDARD, 0.0f);
    run_case(&g, "rslora", 1, 3, 5.0, LORA_SCALE_RSLORA, 0.0f);
    run_case(&g, "drop", 2, 4, 8.0, LORA_SCALE_STANDARD, 0.25f);
    golden_close(&g);
    return test_finish("dora_golden_test");
}
