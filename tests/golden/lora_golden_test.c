/* lora_golden_test.c — ref/lora (on top of ref/linear) against PEFT's LoRA linear layer:
 * forward and every gradient, for alpha/r and rsLoRA scaling and with refine's dropout mask fed
 * to PEFT. Fixture: tests/golden/data/adapters/lora.safetensors (tests/golden/gen/gen_adapters.py).
 *
 * Tolerance (tier b, STYLE.md): torch computes each product in fp32 (MKL sgemm), the reference in
 * double; a length-K fp32 reduction is off by at most K·u·Σ|terms|, and with random normal inputs
 * Σ|terms| stays within a small multiple of the rms of the result. So each tensor gets
 * k = 2·(the summed lengths of the reductions on its path) in units of FLT_EPSILON, with the rms of
 * the reference as floor. The dropout mask and the scales must match exactly (tier a).
 *
 *   bazel test //tests/golden:lora_golden_test
 */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/dropout.h"
#include "ref/linear.h"
#include "ref/lora.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/golden/golden.h"

#define FIXTURE "tests/golden/data/adapters/lora.safetensors"
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
    float *x = get(g, cs, "x", 2, N, C_IN), *gy = get(g, cs, "g", 2, N, C_OUT), *y_ref = get(g, cs, "y", 2, N, C_OUT);
    float *dx_ref = get(g, cs, "dx", 2, N, C_IN), *da_ref = get(g, cs, "dlora_a", 2, R, C_IN);
    float *db_ref = get(g, cs, "dlora_b", 2, C_OUT, R), *scale_t = get(g, cs, "scale", 1, 1, 0);
    char shape[96];
    snprintf(shape, sizeof shape, "case=%s N=%d C_in=%d C_out=%d R=%d p=%g", cs, N, C_IN, C_OUT, R, (double)p_drop);

    float scale = ref_lora_scale(alpha, R, mode);
    struct cmp_case c = {"lora golden", "scale", shape, "f32", 0};
    cmp_exact_f32(&c, &scale, scale_t, 1);

    uint8_t *keep = NULL;
    float *xd = NULL, keep_scale = 1.0f;
    if (p_drop > 0)
        golden_dropout_case(g, cs, &c, x, N, C_IN, p_drop, DROP_SEED, (uint64_t)case_index, &keep, &xd, &keep_scale);

    float y[N * C_OUT], u[N * 8], dx[N * C_IN], ws[N * 8];
    float *da = calloc((size_t)R * C_IN, sizeof(float)), *db = calloc((size_t)C_OUT * R, sizeof(float));
    ref_linear_forward_naive(y, x, w, bias, N, C_IN, C_OUT, ACT_F32);
    ref_lora_forward(y, u, x, xd, a, b, N, C_IN, C_OUT, R, scale, ACT_F32);
    ref_linear_backward_naive(dx, NULL, NULL, gy, x, w, N, C_IN, C_OUT, ACT_F32);
    ref_lora_backward(dx, da, db, gy, x, xd, keep, keep_scale, u, a, b, N, C_IN, C_OUT, R, scale, ACT_F32, ws);

    /* y: base (C_in + bias) + u (C_in) + l (R); dx: dy W (C_out) + du (C_out) + du A (R);
     * dA: du (C_out) then N; dB: N. */
    c.what = "y";
    cmp_elementwise(&c, y, y_ref, N * C_OUT, FLT_EPSILON, 2.0 * (2 * C_IN + 1 + R), cmp_rms(y_ref, N * C_OUT), NULL);
    c.what = "dx";
    cmp_elementwise(&c, dx, dx_ref, N * C_IN, FLT_EPSILON, 2.0 * (2 * C_OUT + R), cmp_rms(dx_ref, N * C_IN), NULL);
    c.what = "dlora_a";
    cmp_elementwise(&c, da, da_ref, R * C_IN, FLT_EPSILON, 2.0 * (C_OUT + N), cmp_rms(da_ref, R * C_IN), NULL);
    c.what = "dlora_b";
    cmp_elementwise(&c, db, db_ref, C_OUT * R, FLT_EPSILON, 2.0 * (C_IN + N), cmp_rms(db_ref, C_OUT * R), NULL);

    free(w), free(bias), free(a), free(b), free(x), free(gy), free(y_ref), free(dx_ref), free(da_ref), free(db_ref);
    free(scale_t), free(keep), free(xd), free(da), free(db);
}

int main(int argc, char **argv) {
    (void)test_seed(argc, argv, 0); /* fixtures carry their own seed (MANIFEST) */
    struct golden g;
    golden_open(&g, FIXTURE);
    run_case(&g, "std", 0, 4, 8.0, LORA_SCALE_STANDARD, 0.0f);
    run_case(&g, "rslora", 1, 3, 5.0, LORA_SCALE_RSLORA, 0.0f);
    run_case(&g, "drop", 2, 4, 8.0, LORA_SCALE_STANDARD, 0.25f);
    golden_close(&g);
    return test_finish("lora_golden_test");
}
