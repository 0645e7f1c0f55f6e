/* qlora_test.c — ref/qlora: the NF4 base weight dequantized to the compute dtype, QLoRA and QDoRA
 * forward against an independent double computation, and gradient checks of x, A, B (and the
 * DoRA magnitude) by central differences, with and without dropout.
 *
 *   bazel test //tests/unit:qlora_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/bf16.h"
#include "ref/dora.h"
#include "ref/lora.h"
#include "ref/nf4.h"
#include "ref/qlora.h"
#include "ref/quant8.h"
#include "tests/common/compare.h"
#include "tests/common/gradcheck.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

enum { N_ = 5, CI = 96, CO = 12, R_ = 4 };

struct ctx {
    int dora, dropout;
    float x[N_ * CI], xd[N_ * CI], w[CO * CI], bias[CO], a[R_ * CI], b[CO * R_], mag[CO], wnorm[CO];
    float g[N_ * CO], y[N_ * CO], u[N_ * R_];
    uint8_t keep[N_ * CI];
    float keep_scale, scale;
};

static void make_xd(struct ctx *c) {
    for (int i = 0; i < N_ * CI; i++) c->xd[i] = c->keep[i] ? c->x[i] * c->keep_scale : 0.0f;
}

static void forward(struct ctx *c) {
    const float *xd = NULL;
    if (c->dropout) {
        make_xd(c);
        xd = c->xd;
    }
    if (c->dora)
        ref_qdora_forward(c->y, c->u, c->x, xd, c->w, c->bias, c->a, c->b, c->mag, c->wnorm, N_, CI, CO, R_, c->scale,
                          ACT_F32);
    else
        ref_qlora_forward(c->y, c->u, c->x, xd, c->w, c->bias, c->a, c->b, N_, CI, CO, R_, c->scale, ACT_F32);
}

static double loss(void *p) {
    struct ctx *c = p;
    forward(c);
    double s = 0;
    for (int i = 0; i < N_ * CO; i++) s += (double)c->g[i] * c->y[i];
    return s;
}

/* NF4 base: a random W quantized (double quant), the absmax rebuilt, dequantized. */
static void make_base(struct ctx *c, struct rng *r) {
    float wf[CO * CI], absmax[CO * CI / 64], back[CO * CI / 64], code2[256], a2[1], off;
    uint8_t packed[CO * CI / 2], aq[CO * CI / 64];
    rng_fill_normal(r, wf, CO * CI, 0, 0.05);
    nf4_quantize(packed, absmax, wf, CO * CI, 64, NF4_CUDA);
    quant8_dynamic_map(code2, 1);
    nf4_double_quantize(aq, a2, &off, absmax, CO * CI / 64, code2);
    nf4_double_dequantize(back, aq, a2, off, code2, CO * CI / 64, 256);
    ref_qlora_dequant_weight(c->w, packed, back, 64, CI, CO, ACT_F32);
    /* Checks of the dequantization: element by element the table times the block's absmax; the
     * bf16 form its rounding; within the NF4 half-gap bound of the original weights. */
    float wb[CO * CI];
    ref_qlora_dequant_weight(wb, packed, back, 64, CI, CO, ACT_BF16);
    int64_t bad = 0;
    float half_gap = 0;
    for (int k = 0; k < 15; k++) half_gap = fmaxf(half_gap, (nf4_table[k + 1] - nf4_table[k]) / 2);
    for (int k = 0; k < CO * CI; k++) {
        float want = nf4_table[nf4_code_at(packed, k)] * back[k / 64];
        bad += c->w[k] != want || wb[k] != bf16_round(want);
        bad += fabsf(c->w[k] - wf[k]) > half_gap * absmax[k / 64] * 1.0001f + fabsf(back[k / 64] - absmax[k / 64]);
    }
    EXPECT(bad == 0, "NF4 base weight: %lld elements wrong", (long long)bad);
}

static void test(int dora, int dropout) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)(dora * 2 + dropout));
    struct ctx *c = calloc(1, sizeof *c);
    c->dora = dora;
    c->dropout = dropout;
    make_base(c, &r);
    rng_fill_normal(&r, c->x, N_ * CI, 0, 1);
    rng_fill_normal(&r, c->bias, CO, 0, 0.1);
    rng_fill_normal(&r, c->a, R_ * CI, 0, 0.1);
    rng_fill_normal(&r, c->b, CO * R_, 0, 0.1); /* non-zero B, so that dA is non-zero */
    rng_fill_normal(&r, c->g, N_ * CO, 0, 1);
    c->scale = ref_lora_scale(8.0, R_, LORA_SCALE_STANDARD);
    c->keep_scale = 1.0f / (1.0f - 0.25f);
    for (int i = 0; i < N_ * CI; i++) c->keep[i] = rng_uniform(&r) >= 0.25;
    ref_dora_weight_norm(c->wnorm, c->w, c->a, c->b, CI, CO, R_, c->scale);
    for (int o = 0; o < CO; o++) c->mag[o] = c->wnorm[o] * (float)rng_range(&r, 0.8, 1.2);

    /* Forward against double: base = x_? wᵀ; lora = s·(x_a Aᵀ) Bᵀ; QLoRA: y = x wᵀ + b + lora;
     * QDoRA: y = x wᵀ + b + (mns − 1)·(x_d wᵀ) + mns·lora (x_d = x without dropout). */
    forward(c);
    if (dropout) make_xd(c);
    const float *xa = dropout ? c->xd : c->x;
    float want[N_ * CO];
    for (int n = 0; n < N_; n++)
        for (int o = 0; o < CO; o++) {
            double base = 0, based = 0, lora = 0;
            for (int i = 0; i < CI; i++) {
                base += (double)c->x[n * CI + i] * c->w[o * CI + i];
                based += (double)xa[n * CI + i] * c->w[o * CI + i];
            }
            for (int k = 0; k < R_; k++) {
                double ur = 0;
                for (int i = 0; i < CI; i++) ur += (double)xa[n * CI + i] * c->a[k * CI + i];
                lora += ur * c->b[o * R_ + k];
            }
            lora *= c->scale;
            double v = base + c->bias[o];
            if (dora) {
                double mns = (double)c->mag[o] / c->wnorm[o];
                v += (mns - 1) * based + mns * lora;
            } else {
                v += lora;
            }
            want[n * CO + o] = (float)v;
        }
    char what[48];
    snprintf(what, sizeof what, "%s%s", dora ? "qdora" : "qlora", dropout ? " dropout" : "");
    struct cmp_case cf = {what, "forward vs double", "N=5 C_in=96 C_out=12 R=4", "f32", g_seed};
    cmp_elementwise(&cf, c->y, want, N_ * CO, FLT_EPSILON, 8.0, cmp_rms(want, N_ * CO), NULL);

    /* Backward and gradient checks (norm detached: wnorm held fixed). */
    float dx[N_ * CI], da[R_ * CI] = {0}, db[CO * R_] = {0}, dm[CO] = {0};
    size_t ws = dora ? ref_dora_backward_workspace_size(N_, CO, R_) : ref_lora_backward_workspace_size(N_, R_);
    float *work = malloc(sizeof(float) * (ws + 1));
    forward(c);
    const float *xd = dropout ? c->xd : NULL;
    const uint8_t *keep = dropout ? c->keep : NULL;
    if (dora)
        ref_qdora_backward(dx, dm, da, db, c->g, c->x, xd, keep, c->keep_scale, c->u, c->w, c->a, c->b, c->mag,
                           c->wnorm, N_, CI, CO, R_, c->scale, ACT_F32, work);
    else
        ref_qlora_backward(dx, da, db, c->g, c->x, xd, keep, c->keep_scale, c->u, c->w, c->a, c->b, N_, CI, CO, R_,
                           c->scale, ACT_F32, work);
    struct cmp_case gx = {what, "dx", "N=5 C_in=96", "f32", g_seed};
    struct cmp_case ga = {what, "dA", "R=4 C_in=96", "f32", g_seed};
    struct cmp_case gb = {what, "dB", "C_out=12 R=4", "f32", g_seed};
    gradcheck(&gx, loss, c, c->x, dx, N_ * CI, 64, g_seed, 1e-2, 2e-3);
    gradcheck(&ga, loss, c, c->a, da, R_ * CI, 64, g_seed, 1e-2, 2e-3);
    gradcheck(&gb, loss, c, c->b, db, CO * R_, 48, g_seed, 1e-2, 2e-3);
    if (dora) {
        struct cmp_case gm = {what, "dmag", "C_out=12", "f32", g_seed};
        gradcheck(&gm, loss, c, c->mag, dm, CO, 12, g_seed, 1e-2, 2e-3);
    }
    free(work);
    free(c);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    for (int dora = 0; dora < 2; dora++)
        for (int dropout = 0; dropout < 2; dropout++) test(dora, dropout);
    return test_finish("qlora_test");
}
