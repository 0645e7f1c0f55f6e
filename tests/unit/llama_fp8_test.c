/* llama_fp8_test.c — ref/llama's FP8 block linears (llama.h "FP8 block linears") against what they
 * promise, on a tiny random model (LoRA and full fine-tuning, each recipe):
 *   - frozen weights become W_eff = dequant(quant(W)), bf16 values, and the quantization is
 *     idempotent on them;
 *   - a forward and backward record where they should: q's input row (not k's, v's, up's, whose
 *     input is shared), every linear's dy row but layer 0's q, k, v in the adapter methods;
 *     delayed scaling's amax in history slot 0 equals max|x| of the tensor (checked on layer 0's
 *     input: rmsnorm's output, recomputed here);
 *   - evaluation (FP8_DISCARD) changes no state, and recomputation (--recompute) gives bitwise the
 *     same loss, gradients and state as saving;
 *   - the delayed update after a step: each recorded row's scale becomes fp8_max / amax (the
 *     window's max), the history rotates, slot 0 is zeroed; the step's statistics clear;
 *   - an FP8 forward's loss stays within the FP8 rounding of the bf16 forward's (a wrong scale would
 *     move it by orders of magnitude), and its gradients point the same way (cosine > 0.9);
 *   - a NaN or an Inf reaching a quantization flags that row (an Inf in a frozen weight at
 *     freezing; an Inf in the embedding reaches layer 0's input quantization).
 *
 *   bazel test //tests/unit:llama_fp8_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/config.h"
#include "ref/bf16.h"
#include "ref/fp8.h"
#include "ref/fp8_linear.h"
#include "ref/llama.h"
#include "ref/rmsnorm.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

static void tiny_config(struct model_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->model_type, sizeof c->model_type, "llama");
    c->L = 2, c->D = 16, c->H = 4, c->KVH = 2, c->C = 64, c->F = 160, c->V = 97;
    c->max_position_embeddings = 64;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->tie_word_embeddings = 1;
    c->bos_token_id = c->pad_token_id = -1;
}

struct run {
    struct model_config c;
    struct llama_options o;
    struct llama_model m;
    struct llama_weights w, gw;
    struct llama_adapters a, ga;
    struct llama_fp8 f;
    float *slab;
    int32_t ids[2 * 32], tg[2 * 32];
    struct llama_batch b;
};

/* A model of mode with random weights (bf16 values) and adapters; FP8 under recipe (frozen
 * weights frozen, trained ones quantized). */
static void setup(struct run *r, enum llama_mode mode, enum fp8_recipe recipe, enum recompute_policy rc, uint64_t seed) {
    memset(r, 0, sizeof *r);
    tiny_config(&r->c);
    ref_llama_options_default(&r->o);
    r->o.mode = mode;
    r->o.R = 4;
    r->o.act = ACT_BF16;
    r->o.linear = LINEAR_BLAS;
    r->o.recompute = rc;
    const int B = 2, T = 32;
    ref_llama_init(&r->m, &r->c, &r->o, B, T, T);
    ref_llama_weights_alloc(&r->w, &r->c);
    struct rng g;
    rng_init(&g, seed);
    const int n = ref_llama_tensors(NULL, &r->c, &r->o, &r->w, NULL);
    struct llama_tensor *ts = calloc((size_t)n, sizeof *ts);
    ref_llama_tensors(ts, &r->c, &r->o, &r->w, NULL);
    for (int i = 0; i < n; i++) {
        if (strstr(ts[i].name, "norm"))
            rng_fill_normal(&g, ts[i].data, ts[i].numel, 1.0, 0.1);
        else
            rng_fill_normal(&g, ts[i].data, ts[i].numel, 0.0, 0.1);
        bf16_round_array(ts[i].data, ts[i].data, ts[i].numel);
    }
    free(ts);
    if (mode == LLAMA_FULL) {
        ref_llama_weights_alloc(&r->gw, &r->c);
    } else {
        ref_llama_adapters_alloc(&r->a, &r->c, &r->o);
        ref_llama_adapters_alloc(&r->ga, &r->c, &r->o);
        ref_llama_adapters_init(&r->a, &r->c, &r->o, seed);
        for (int l = 0; l < r->c.L; l++) /* B ≠ 0: the adapters carry gradient to A too */
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                int co, ci;
                llama_linear_shape(&r->c, (enum llama_linear)t, &co, &ci);
                rng_fill_normal(&g, r->a.layers[l][t].b, (int64_t)co * r->o.R, 0.0, 0.05);
            }
    }
    ref_llama_fp8_alloc(&r->f, &r->c, &r->o, B * T, recipe);
    if (mode == LLAMA_FULL)
        ref_llama_fp8_quantize_weights(&r->f, &r->c, &r->w, FP8_DISCARD);
    else
        ref_llama_fp8_freeze_weights(&r->f, &r->c, &r->w);
    r->m.fp8 = &r->f;
    r->slab = calloc(ref_llama_slab_floats(&r->m), sizeof(float));
    for (int i = 0; i < B * T; i++) {
        r->ids[i] = (int32_t)rng_int(&g, r->c.V);
        r->tg[i] = (i % T == T - 1) ? -100 : (int32_t)rng_int(&g, r->c.V);
    }
    r->b = (struct llama_batch){B, T, r->ids, r->tg, NULL, 0};
}

static void teardown(struct run *r) {
    free(r->slab);
    ref_llama_fp8_free(&r->f);
    if (r->o.mode == LLAMA_FULL) {
        ref_llama_weights_free(&r->gw, &r->c);
    } else {
        ref_llama_adapters_free(&r->a, &r->c);
        ref_llama_adapters_free(&r->ga, &r->c);
    }
    ref_llama_weights_free(&r->w, &r->c);
    ref_llama_free(&r->m);
}

static double step(struct run *r) {
    const double loss = ref_llama_forward(&r->m, &r->w, &r->a, &r->b, r->slab, NULL);
    ref_llama_backward(&r->m, &r->w, &r->a, &r->b, r->slab, r->o.mode == LLAMA_FULL ? &r->gw : NULL,
                       r->o.mode == LLAMA_FULL ? NULL : &r->ga, 1.0f);
    return loss;
}

/* Every gradient of r as one vector (the trainable tensors in ref_llama_tensors' order). */
static float *gradients(struct run *r, int64_t *n) {
    const int full = r->o.mode == LLAMA_FULL;
    const int k = ref_llama_tensors(NULL, &r->c, &r->o, full ? &r->gw : &r->w, full ? NULL : &r->ga);
    struct llama_tensor *ts = calloc((size_t)k, sizeof *ts);
    ref_llama_tensors(ts, &r->c, &r->o, full ? &r->gw : &r->w, full ? NULL : &r->ga);
    int64_t total = 0;
    for (int i = 0; i < k; i++) total += ts[i].trainable ? ts[i].numel : 0;
    float *g = malloc(sizeof(float) * (size_t)total), *p = g;
    for (int i = 0; i < k; i++)
        if (ts[i].trainable) memcpy(p, ts[i].data, sizeof(float) * (size_t)ts[i].numel), p += ts[i].numel;
    free(ts);
    *n = total;
    return g;
}

static int row(const struct run *r, enum fp8_role role, int l, enum llama_linear t) { return llama_fp8_row(r->c.L, role, l, t); }

static int recorded(const struct run *r, int rw) {
    if (r->f.recipe == FP8_RECIPE_DELAYED) return r->f.history[(size_t)rw * r->f.history_len] != 0.0f;
    return r->f.scale[rw] != 0.0f;
}

static void test_recipe(enum llama_mode mode, enum fp8_recipe recipe) {
    char what[96];
    snprintf(what, sizeof what, "%s %s seed=%llu", mode == LLAMA_FULL ? "full" : "lora", fp8_recipe_names[recipe],
             (unsigned long long)g_seed);
    struct run r;
    setup(&r, mode, recipe, RECOMPUTE_NONE, g_seed);
    /* frozen: W_eff in bf16, and requantizing it reproduces it */
    if (mode != LLAMA_FULL) {
        int64_t not_bf16 = 0, moved = 0;
        for (int l = 0; l < r.c.L; l++)
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                int co, ci;
                llama_linear_shape(&r.c, (enum llama_linear)t, &co, &ci);
                const float *w = r.w.layers[l].w[t];
                float *dq = malloc(sizeof(float) * (size_t)co * ci);
                for (int64_t i = 0; i < (int64_t)co * ci; i++) not_bf16 += bf16_round(w[i]) != w[i];
                struct fp8_operand q = {malloc((size_t)co * ci), malloc(sizeof(float) * (size_t)(co * ci)), 0, 0, 0, 0};
                ref_fp8_quantize(&q, NULL, NULL, NULL, w, co, ci, FP8_E4M3,
                                 fp8_rule_for(recipe, FP8_ROLE_W, FP8_WEIGHT_FROZEN), 0.0f);
                ref_fp8_dequantize_operand(dq, &q);
                for (int64_t i = 0; i < (int64_t)co * ci; i++) moved += dq[i] != w[i];
                free(q.q), free(q.s_inv), free(dq);
            }
        EXPECT(not_bf16 == 0, "%s: %lld frozen W_eff values are not bf16 values", what, (long long)not_bf16);
        EXPECT(moved == 0, "%s: requantizing W_eff moved %lld values", what, (long long)moved);
    }
    /* evaluation records nothing */
    float *h0 = NULL, *s0 = malloc(sizeof(float) * (size_t)r.f.n);
    memcpy(s0, r.f.scale, sizeof(float) * (size_t)r.f.n);
    if (r.f.history_len) {
        h0 = malloc(sizeof(float) * (size_t)r.f.n * r.f.history_len);
        memcpy(h0, r.f.history, sizeof(float) * (size_t)r.f.n * r.f.history_len);
    }
    r.f.recording = FP8_DISCARD;
    ref_llama_forward(&r.m, &r.w, &r.a, &r.b, r.slab, NULL);
    r.f.recording = FP8_RECORD;
    EXPECT(memcmp(s0, r.f.scale, sizeof(float) * (size_t)r.f.n) == 0 &&
               (!h0 || memcmp(h0, r.f.history, sizeof(float) * (size_t)r.f.n * r.f.history_len) == 0) &&
               r.f.saturated == 0 && ref_llama_fp8_first_flagged(&r.f) < 0,
           "%s: an evaluation changed the FP8 state", what);
    /* a training micro-batch records where it should */
    const double loss = step(&r);
    int64_t bad = 0;
    for (int i = 0; i < r.f.n; i++) {
        const int role = i / (r.c.L * LLAMA_N_LINEAR);
        const int want = role == FP8_ROLE_W ? (mode == LLAMA_FULL || recipe != FP8_RECIPE_DELAYED)
                                            : llama_fp8_row_active(r.c.L, mode, i);
        if (recorded(&r, i) != want) {
            char d[160];
            llama_fp8_row_describe(d, sizeof d, r.c.L, i);
            if (bad++ < 4) printf("%s: %s recorded %d, expected %d\n", what, d, recorded(&r, i), want);
        }
    }
    EXPECT(bad == 0, "%s: %lld rows recorded other than expected", what, (long long)bad);
    if (recipe == FP8_RECIPE_DELAYED) { /* layer 0's q input: rmsnorm of the embedding */
        const int N = 64;
        float *x = malloc(sizeof(float) * (size_t)N * r.c.C), *n1 = malloc(sizeof(float) * (size_t)N * r.c.C),
              *rs = malloc(sizeof(float) * N);
        for (int i = 0; i < N; i++) memcpy(x + (size_t)i * r.c.C, r.w.embed + (size_t)r.ids[i] * r.c.C, sizeof(float) * r.c.C);
        ref_rmsnorm_forward(n1, rs, x, r.w.layers[0].attn_norm, N, r.c.C, r.c.rms_norm_eps, ACT_BF16);
        const float want = fp8_amax(n1, (int64_t)N * r.c.C),
                    got = r.f.history[(size_t)row(&r, FP8_ROLE_X, 0, LLAMA_Q) * r.f.history_len];
        EXPECT(got == want, "%s: layer 0's q input amax recorded %g, max|n1| is %g", what, (double)got, (double)want);
        free(x), free(n1), free(rs);
    }
    /* FP8 against bf16: the loss within FP8's rounding, the gradients in the same direction */
    int64_t ng = 0, nb = 0;
    float *g8 = gradients(&r, &ng);
    struct run rb;
    setup(&rb, mode, recipe, RECOMPUTE_NONE, g_seed);
    rb.m.fp8 = NULL;
    const double lb = step(&rb);
    float *gb = gradients(&rb, &nb);
    double dot = 0, a2 = 0, b2 = 0;
    for (int64_t i = 0; i < ng; i++) dot += (double)g8[i] * gb[i], a2 += (double)g8[i] * g8[i], b2 += (double)gb[i] * gb[i];
    const double cosine = dot / sqrt(a2 * b2 + 1e-300);
    /* E4M3's relative rounding is at most 2^-4; a loss near ln V moves by a small share of it */
    EXPECT(fabs(loss - lb) <= 0.0625 * fabs(lb) && ng == nb && cosine > 0.9,
           "%s: FP8 loss %.6f vs bf16 %.6f, gradient cosine %.4f", what, loss, lb, cosine);
    free(gb);
    teardown(&rb);
    /* recomputation: the same loss, gradients and state */
    struct run rr;
    setup(&rr, mode, recipe, RECOMPUTE_LAYER, g_seed);
    const double lr = step(&rr);
    int64_t nr = 0;
    float *gr = gradients(&rr, &nr);
    EXPECT(lr == loss && nr == ng && memcmp(gr, g8, sizeof(float) * (size_t)ng) == 0, "%s: recomputation changed the loss "
           "(%.9g vs %.9g) or the gradients", what, lr, loss);
    EXPECT(memcmp(rr.f.scale, r.f.scale, sizeof(float) * (size_t)r.f.n) == 0 && rr.f.saturated == r.f.saturated &&
               (!r.f.history_len ||
                memcmp(rr.f.history, r.f.history, sizeof(float) * (size_t)r.f.n * r.f.history_len) == 0),
           "%s: recomputation changed the FP8 state", what);
    free(gr);
    teardown(&rr);
    free(g8);
    /* the end of the step: delayed scales from the window's max, the history rotated */
    if (recipe == FP8_RECIPE_DELAYED) {
        const int rq = row(&r, FP8_ROLE_DY, 1, LLAMA_DOWN);
        const float amax = r.f.history[(size_t)rq * r.f.history_len];
        ref_llama_fp8_step_end(&r.f);
        EXPECT(r.f.scale[rq] == FP8_E5M2_MAX / amax && r.f.history[(size_t)rq * r.f.history_len] == 0.0f &&
                   r.f.history[(size_t)rq * r.f.history_len + r.f.history_len - 1] == amax,
               "%s: after the update, scale %g (fp8_max/amax %g), slot 0 %g, last slot %g (amax %g)", what,
               (double)r.f.scale[rq], (double)(FP8_E5M2_MAX / amax), (double)r.f.history[(size_t)rq * r.f.history_len],
               (double)r.f.history[(size_t)rq * r.f.history_len + r.f.history_len - 1], (double)amax);
    } else {
        ref_llama_fp8_step_end(&r.f);
    }
    EXPECT(r.f.saturated == 0 && ref_llama_fp8_first_flagged(&r.f) < 0, "%s: the step's statistics are cleared", what);
    free(h0), free(s0);
    teardown(&r);
}

static void test_nonfinite(void) {
    struct run r;
    setup(&r, LLAMA_LORA, FP8_RECIPE_DELAYED, RECOMPUTE_NONE, g_seed + 1);
    /* a frozen weight with an Inf: flagged when frozen (the cast would clamp it to 448) */
    struct llama_fp8 f2;
    ref_llama_fp8_alloc(&f2, &r.c, &r.o, 64, FP8_RECIPE_CURRENT);
    r.w.layers[1].w[LLAMA_UP][5] = INFINITY;
    ref_llama_fp8_freeze_weights(&f2, &r.c, &r.w);
    EXPECT(ref_llama_fp8_first_flagged(&f2) == row(&r, FP8_ROLE_W, 1, LLAMA_UP),
           "an Inf in layer 1's up weight flags row %d (expected %d)", ref_llama_fp8_first_flagged(&f2),
           row(&r, FP8_ROLE_W, 1, LLAMA_UP));
    ref_llama_fp8_free(&f2);
    teardown(&r);
    /* an Inf in the embedding row of a token: the first quantization it reaches is layer 0's input */
    setup(&r, LLAMA_LORA, FP8_RECIPE_DELAYED, RECOMPUTE_NONE, g_seed + 2);
    r.w.embed[(size_t)r.ids[3] * r.c.C + 1] = INFINITY;
    ref_llama_forward(&r.m, &r.w, &r.a, &r.b, r.slab, NULL);
    EXPECT(ref_llama_fp8_first_flagged(&r.f) == row(&r, FP8_ROLE_X, 0, LLAMA_Q),
           "an Inf in the embedding flags row %d first (expected layer 0's q input, %d)",
           ref_llama_fp8_first_flagged(&r.f), row(&r, FP8_ROLE_X, 0, LLAMA_Q));
    teardown(&r);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261203);
    for (int rc = 0; rc < FP8_RECIPE_COUNT; rc++) {
        test_recipe(LLAMA_LORA, (enum fp8_recipe)rc);
        test_recipe(LLAMA_FULL, (enum fp8_recipe)rc);
    }
    test_nonfinite();
    return test_finish("llama_fp8_test");
}
