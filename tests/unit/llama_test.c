/* llama_test.c — ref/llama against mathematics and against itself: central differences of the
 * whole model's loss, recomputation bit-identical to saving, adapters at B = 0 equal to the base
 * model, naive and flash attention / sgemm and naive linears / cross-entropy chunkings agree.
 * (Agreement with transformers and PEFT: tests/golden/llama_golden_test.c.)
 *
 *   bazel test //tests/unit:llama_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/config.h"
#include "io/model_source.h"
#include "ref/bf16.h"
#include "ref/cross_entropy.h"
#include "ref/dora.h"
#include "ref/llama.h"
#include "ref/nf4.h"
#include "tests/common/compare.h"
#include "tests/common/gradcheck.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

/* Two awkward tiny configs: (0) tied, llama3 rope (bands fall inside D = 8 with orig 16), GQA 2,
 * odd C/F/V; (1) untied, q/k/v bias, GQA 3, default rope. */
static void tiny_config(struct model_config *c, int which) {
    memset(c, 0, sizeof *c);
    snprintf(c->model_type, sizeof c->model_type, "%s", which ? "qwen2" : "llama");
    c->L = 2;
    c->D = 8;
    c->H = which ? 6 : 4;
    c->KVH = which ? 2 : 2;
    c->C = which ? 27 : 21;
    c->F = which ? 35 : 30;
    c->V = which ? 41 : 37;
    c->max_position_embeddings = 64;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = which ? 10000.0f : 500000.0f;
    if (!which) {
        c->rope_scaling.kind = ROPE_SCALING_LLAMA3;
        c->rope_scaling.factor = 4.0f;
        c->rope_scaling.low_freq_factor = 1.0f;
        c->rope_scaling.high_freq_factor = 4.0f;
        c->rope_scaling.original_max_position_embeddings = 16;
    }
    c->tie_word_embeddings = !which;
    c->attention_bias = which;
    c->bos_token_id = c->pad_token_id = -1;
}

/* Every tensor drawn: matrices N(0, 0.3²) (the scale that makes the tiny model's loss depend on
 * every weight), norms 1 + N(0, 0.1²), biases N(0, 0.1²); adapters A, B N(0, 0.2²); DoRA
 * magnitudes ‖W_row‖·(1 + N(0, 0.1²)). */
static void fill(struct llama_tensor *ts, int nt, struct rng *r) {
    for (int i = 0; i < nt; i++) {
        struct llama_tensor *t = &ts[i];
        const char *nm = t->name;
        if (strstr(nm, "norm.weight"))
            rng_fill_normal(r, t->data, t->numel, 1.0, 0.1);
        else if (strstr(nm, ".bias"))
            rng_fill_normal(r, t->data, t->numel, 0.0, 0.1);
        else if (strstr(nm, "lora_"))
            rng_fill_normal(r, t->data, t->numel, 0.0, 0.2);
        else if (!strstr(nm, "magnitude"))
            rng_fill_normal(r, t->data, t->numel, 0.0, 0.3);
    }
}

struct fixture {
    struct model_config c;
    struct llama_options o;
    struct llama_weights w, gw;
    struct llama_adapters a, ga;
    struct llama_tensor *ts, *gts;
    int nt;
    int B, T;
    int32_t *ids, *targets;
    struct llama_model m;
    float *slab;
};

static void fixture_init(struct fixture *f, int which, const struct llama_options *o, uint64_t seed) {
    memset(f, 0, sizeof *f);
    tiny_config(&f->c, which);
    f->o = *o;
    f->B = 2;
    f->T = 7;
    struct rng r;
    rng_init(&r, seed);
    ref_llama_weights_alloc(&f->w, &f->c);
    if (o->mode != LLAMA_FULL) {
        ref_llama_adapters_alloc(&f->a, &f->c, o);
        ref_llama_adapters_alloc(&f->ga, &f->c, o);
    } else {
        ref_llama_weights_alloc(&f->gw, &f->c);
    }
    f->nt = ref_llama_tensors(NULL, &f->c, o, &f->w, &f->a);
    f->ts = calloc((size_t)f->nt, sizeof *f->ts);
    f->gts = calloc((size_t)f->nt, sizeof *f->gts);
    ref_llama_tensors(f->ts, &f->c, o, &f->w, &f->a);
    ref_llama_tensors(f->gts, &f->c, o, o->mode == LLAMA_FULL ? &f->gw : &f->w, &f->ga);
    fill(f->ts, f->nt, &r);
    if (o->mode == LLAMA_DORA) {
        /* m = ‖W_row‖ (PEFT's init, B = 0), perturbed so that m/‖W + sBA‖ ≠ 1 */
        float s = ref_lora_scale(o->alpha, o->R, o->scaling);
        for (int l = 0; l < f->c.L; l++)
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                struct llama_adapter *ad = &f->a.layers[l][t];
                if (!ad->mag) continue;
                int co, ci;
                llama_linear_shape(&f->c, (enum llama_linear)t, &co, &ci);
                float *zero = calloc((size_t)co * (size_t)o->R, sizeof(float));
                ref_dora_weight_norm(ad->mag, f->w.layers[l].w[t], ad->a, zero, ci, co, o->R, s);
                free(zero);
                for (int i = 0; i < co; i++) ad->mag[i] *= (float)(1.0 + 0.1 * rng_normal(&r));
            }
    }
    const int N = f->B * f->T;
    rng_init(&r, seed ^ 0x5eedu); /* the batch from its own stream: equal across modes */
    f->ids = malloc((size_t)N * sizeof *f->ids);
    f->targets = malloc((size_t)N * sizeof *f->targets);
    for (int n = 0; n < N; n++) {
        f->ids[n] = rng_int(&r, f->c.V);
        f->targets[n] = rng_int(&r, f->c.V);
    }
    f->targets[0] = f->targets[3] = f->targets[N - 1] = REF_IGNORE_INDEX;
    ref_llama_init(&f->m, &f->c, o, f->B, f->T, f->T);
    f->slab = malloc(ref_llama_slab_floats(&f->m) * sizeof(float));
}

static void fixture_free(struct fixture *f) {
    free(f->slab);
    ref_llama_free(&f->m);
    free(f->ids);
    free(f->targets);
    free(f->ts);
    free(f->gts);
    if (f->o.mode != LLAMA_FULL) {
        ref_llama_adapters_free(&f->a, &f->c);
        ref_llama_adapters_free(&f->ga, &f->c);
    } else {
        ref_llama_weights_free(&f->gw, &f->c);
    }
    ref_llama_weights_free(&f->w, &f->c);
}

static struct llama_batch batch_of(const struct fixture *f) {
    struct llama_batch b = {f->B, f->T, f->ids, f->targets, NULL, 0};
    return b;
}

static void zero_grads(struct fixture *f) {
    for (int i = 0; i < f->nt; i++)
        if (f->gts[i].trainable) memset(f->gts[i].data, 0, (size_t)f->gts[i].numel * sizeof(float));
}

static double loss_and_grads(struct fixture *f, float *logits) {
    struct llama_batch b = batch_of(f);
    zero_grads(f);
    double loss = ref_llama_forward(&f->m, &f->w, &f->a, &b, f->slab, logits);
    ref_llama_backward(&f->m, &f->w, &f->a, &b, f->slab, &f->gw, &f->ga, 1.0f);
    return loss;
}

static double loss_fn(void *ctx) {
    struct fixture *f = ctx;
    struct llama_batch b = batch_of(f);
    return ref_llama_forward(&f->m, &f->w, &f->a, &b, f->slab, NULL);
}

static const char *mode_name(enum llama_mode m) {
    return m == LLAMA_FULL ? "full" : m == LLAMA_LORA ? "lora" : "dora";
}

/* Central differences of the loss on sampled elements of every trainable tensor. DoRA's A and B
 * are left out: their gradients treat the row norm ‖W + sBA‖ as a constant (PEFT's detach, DoRA
 * paper §4.3), so they are deliberately NOT the derivative of the forward; they are checked
 * against PEFT in tests/golden/llama_golden_test.c. The magnitudes are exact derivatives. */
static void test_gradcheck(int which, enum llama_mode mode, unsigned targets) {
    struct llama_options o;
    ref_llama_options_default(&o);
    o.mode = mode;
    o.targets = targets;
    o.R = 3;
    o.alpha = 5.0;
    struct fixture f;
    fixture_init(&f, which, &o, g_seed + (uint64_t)(which * 10 + mode));
    loss_and_grads(&f, NULL);
    for (int i = 0; i < f.nt; i++) {
        if (!f.ts[i].trainable) continue;
        if (mode == LLAMA_DORA && strstr(f.ts[i].name, "lora_magnitude_vector") == NULL) continue;
        char shape[160];
        snprintf(shape, sizeof shape, "config %d %s %s", which, mode_name(mode), f.ts[i].name);
        struct cmp_case cc = {"llama", "gradcheck", shape, "f32", g_seed};
        /* 3 elements per tensor; h = 1e-2 relative step; tol 2e-2: the truncation error
         * O(h²·f''') of a loss of O(1) and the fp32 forward's rounding (gradcheck.h) */
        gradcheck(&cc, loss_fn, &f, f.ts[i].data, f.gts[i].data, f.ts[i].numel, 3, g_seed + (uint64_t)i, 1e-2,
                  2e-2);
    }
    fixture_free(&f);
}

/* Recomputing each layer in backward gives bit-identical loss and gradients. */
static void test_recompute(int which, enum llama_mode mode, enum act_dtype act) {
    struct llama_options o;
    ref_llama_options_default(&o);
    o.mode = mode;
    o.R = 2;
    o.alpha = 3.0;
    o.act = act;
    struct fixture f0, f1;
    fixture_init(&f0, which, &o, g_seed + 77);
    o.recompute = RECOMPUTE_LAYER;
    fixture_init(&f1, which, &o, g_seed + 77);
    EXPECT(ref_llama_slab_floats(&f1.m) < ref_llama_slab_floats(&f0.m), "recompute slab %zu not below %zu",
           ref_llama_slab_floats(&f1.m), ref_llama_slab_floats(&f0.m));
    double l0 = loss_and_grads(&f0, NULL), l1 = loss_and_grads(&f1, NULL);
    EXPECT(l0 == l1, "config %d %s: loss %.17g with recompute, %.17g without", which, mode_name(mode), l1, l0);
    for (int i = 0; i < f0.nt; i++) {
        if (!f0.gts[i].trainable) continue;
        char shape[160];
        snprintf(shape, sizeof shape, "config %d %s %s", which, mode_name(mode), f0.ts[i].name);
        struct cmp_case cc = {"llama", "recompute == saved", shape, act == ACT_BF16 ? "bf16" : "f32", g_seed};
        cmp_exact_f32(&cc, f1.gts[i].data, f0.gts[i].data, f0.gts[i].numel);
    }
    fixture_free(&f0);
    fixture_free(&f1);
}

/* LoRA with B = 0, and DoRA with B = 0 and m = ‖W_row‖, are the base model exactly: y + 0·s and
 * (m/n − 1)·base + (m/n)·0 with m/n = 1. Loss and logits bit-identical to the full model's. */
static void test_zero_adapter(int which, enum llama_mode mode) {
    struct llama_options o;
    ref_llama_options_default(&o);
    struct fixture base, ad;
    fixture_init(&base, which, &o, g_seed + 5);
    o.mode = mode;
    o.R = 2;
    o.alpha = 4.0;
    fixture_init(&ad, which, &o, g_seed + 5); /* same draws for the base weights: they come first */
    float s = ref_lora_scale(o.alpha, o.R, o.scaling);
    for (int l = 0; l < ad.c.L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            struct llama_adapter *a = &ad.a.layers[l][t];
            int co, ci;
            llama_linear_shape(&ad.c, (enum llama_linear)t, &co, &ci);
            memset(a->b, 0, (size_t)co * (size_t)o.R * sizeof(float));
            if (a->mag) ref_dora_weight_norm(a->mag, ad.w.layers[l].w[t], a->a, a->b, ci, co, o.R, s);
        }
    /* the base weights of both fixtures must be equal for the comparison to mean anything */
    int same = 1;
    for (int i = 0; i < base.nt; i++)
        if (memcmp(base.ts[i].data, ad.ts[i].data, (size_t)base.ts[i].numel * sizeof(float)) != 0) same = 0;
    EXPECT(same, "config %d: base weights differ between the fixtures", which);
    const size_t NV = (size_t)base.B * (size_t)base.T * (size_t)base.c.V;
    float *lg0 = malloc(NV * sizeof(float)), *lg1 = malloc(NV * sizeof(float));
    struct llama_batch b0 = batch_of(&base), b1 = batch_of(&ad);
    double l0 = ref_llama_forward(&base.m, &base.w, NULL, &b0, base.slab, lg0);
    double l1 = ref_llama_forward(&ad.m, &ad.w, &ad.a, &b1, ad.slab, lg1);
    EXPECT(l0 == l1, "config %d %s with B = 0: loss %.17g, base %.17g", which, mode_name(mode), l1, l0);
    char shape[64];
    snprintf(shape, sizeof shape, "config %d %s B=0", which, mode_name(mode));
    struct cmp_case cc = {"llama", "logits == base", shape, "f32", g_seed};
    cmp_exact_f32(&cc, lg1, lg0, (int64_t)NV);
    /* and the gradient of B is not zero there (the adapter would learn) */
    ref_llama_backward(&ad.m, &ad.w, &ad.a, &b1, ad.slab, NULL, &ad.ga, 1.0f);
    double nb = 0;
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        int co, ci;
        llama_linear_shape(&ad.c, (enum llama_linear)t, &co, &ci);
        for (int i = 0; i < co * o.R; i++) nb += fabs(ad.ga.layers[0][t].b[i]);
    }
    EXPECT(nb > 0, "config %d %s: dB is zero at B = 0", which, mode_name(mode));
    free(lg0);
    free(lg1);
    fixture_free(&base);
    fixture_free(&ad);
}

/* Implementation choices that must agree to rounding: sgemm vs naive linears, naive vs flash
 * attention with odd tiles, cross-entropy chunk sizes. Tier (d) built like the golden test's:
 * S = 4L + 2 reductions on the forward path, each may differ by √K_max·ε (fp32 sgemm sums against
 * double sums rounded once), factor 2 for non-pairwise blocking: k = 2·S·√K_max for the loss,
 * twice that for gradients (the backward path is twice as long). */
static void test_variants(int which) {
    struct llama_options o;
    ref_llama_options_default(&o);
    o.mode = LLAMA_DORA;
    o.R = 2;
    o.alpha = 2.0;
    o.targets = (1u << LLAMA_Q) | (1u << LLAMA_V) | (1u << LLAMA_DOWN);
    struct fixture ref;
    fixture_init(&ref, which, &o, g_seed + 9);
    double l_ref = loss_and_grads(&ref, NULL);
    int kmax = ref.c.C > ref.c.F ? ref.c.C : ref.c.F;
    if (ref.c.H * ref.c.D > kmax) kmax = ref.c.H * ref.c.D;
    const double k_fwd = 2.0 * (4.0 * ref.c.L + 2.0) * sqrt((double)kmax), k_bwd = 2.0 * k_fwd;
    for (int v = 0; v < 4; v++) {
        struct llama_options ov = o;
        const char *what = v == 0 ? "blas" : v == 1 ? "naive attention" : v == 2 ? "ce chunks 5x7" : "flash tiles 3x5";
        if (v == 0) ov.linear = LINEAR_BLAS;
        if (v == 1) ov.attn = ATTN_NAIVE;
        if (v == 3) {
            ov.attn_block_q = 3;
            ov.attn_block_k = 5;
        }
        if (v == 2) {
            ov.ce_n_chunk = 5;
            ov.ce_v_chunk = 7;
        }
        struct fixture f;
        fixture_init(&f, which, &ov, g_seed + 9);
        double l = loss_and_grads(&f, NULL);
        EXPECT(fabs(l - l_ref) <= k_fwd * FLT_EPSILON * fabs(l_ref), "config %d %s: loss %.9g vs %.9g", which, what,
               l, l_ref);
        for (int i = 0; i < f.nt; i++) {
            if (!f.gts[i].trainable) continue;
            char shape[160];
            snprintf(shape, sizeof shape, "config %d %s %s", which, what, f.ts[i].name);
            struct cmp_case cc = {"llama", "variant grads", shape, "f32", g_seed};
            cmp_elementwise(&cc, f.gts[i].data, ref.gts[i].data, f.gts[i].numel, FLT_EPSILON, k_bwd,
                            cmp_rms(ref.gts[i].data, ref.gts[i].numel), NULL);
        }
        fixture_free(&f);
    }
    fixture_free(&ref);
}

/* The bf16 path: every activation rounded, close to the fp32 path — tier (b) with bf16 ε on the
 * loss, k = 8 (a handful of roundings reach the loss at the same relative size). */
static void test_bf16(int which) {
    struct llama_options o;
    ref_llama_options_default(&o);
    struct fixture f32, f16;
    fixture_init(&f32, which, &o, g_seed + 3);
    o.act = ACT_BF16;
    fixture_init(&f16, which, &o, g_seed + 3);
    for (int i = 0; i < f16.nt; i++) bf16_round_array(f16.ts[i].data, f16.ts[i].data, f16.ts[i].numel);
    for (int i = 0; i < f32.nt; i++) bf16_round_array(f32.ts[i].data, f32.ts[i].data, f32.ts[i].numel);
    double l32 = loss_and_grads(&f32, NULL), l16 = loss_and_grads(&f16, NULL);
    EXPECT(fabs(l16 - l32) <= 8 * BF16_EPS * fabs(l32), "config %d: bf16 loss %.9g, fp32 %.9g", which, l16, l32);
    EXPECT(l16 != l32, "config %d: the bf16 path rounds nothing (loss %.17g)", which, l16);
    fixture_free(&f32);
    fixture_free(&f16);
}

/* Gradient accumulation: the batch as two micro-batches of one sequence each, both told the
 * batch's n_valid_total, sums to the whole batch's loss and gradients (HF's num_items_in_batch
 * semantics). Tier (b): the loss and each gradient are sums regrouped once, k = 8 roundings of fp32
 * in the regrouped partial sums (the per-row work is the same arithmetic). */
static void test_accumulation(int which, enum llama_mode mode) {
    struct llama_options o;
    ref_llama_options_default(&o);
    o.mode = mode;
    o.R = 2;
    o.alpha = 2.0;
    struct fixture whole, half;
    fixture_init(&whole, which, &o, g_seed + 11);
    fixture_init(&half, which, &o, g_seed + 11);
    double l_whole = loss_and_grads(&whole, NULL);
    const int T = half.T, N = half.B * T;
    int64_t n_valid = ref_cross_entropy_count_valid(half.targets, N);
    struct llama_model m1;
    ref_llama_init(&m1, &half.c, &o, 1, T, T);
    float *slab = malloc(ref_llama_slab_floats(&m1) * sizeof(float));
    zero_grads(&half);
    double l_sum = 0;
    for (int b = 0; b < half.B; b++) {
        struct llama_batch mb = {1, T, half.ids + b * T, half.targets + b * T, NULL, n_valid};
        l_sum += ref_llama_forward(&m1, &half.w, &half.a, &mb, slab, NULL);
        ref_llama_backward(&m1, &half.w, &half.a, &mb, slab, &half.gw, &half.ga, 1.0f);
    }
    EXPECT(fabs(l_sum - l_whole) <= 8 * FLT_EPSILON * fabs(l_whole), "config %d %s: micro-batch losses sum to %.9g, "
           "batch %.9g", which, mode_name(mode), l_sum, l_whole);
    for (int i = 0; i < half.nt; i++) {
        if (!half.gts[i].trainable) continue;
        char shape[160];
        snprintf(shape, sizeof shape, "config %d %s %s", which, mode_name(mode), half.ts[i].name);
        struct cmp_case cc = {"llama", "accumulated grads", shape, "f32", g_seed};
        cmp_elementwise(&cc, half.gts[i].data, whole.gts[i].data, half.gts[i].numel, FLT_EPSILON, 8.0,
                        cmp_rms(whole.gts[i].data, whole.gts[i].numel), NULL);
    }
    free(slab);
    ref_llama_free(&m1);
    fixture_free(&whole);
    fixture_free(&half);
}

/* ref_llama_weights_load on the io test folders (BF16 tied, F16 Qwen2 with biases, bitsandbytes
 * NF4): every one loads and gives a finite loss. For the NF4 model, every block of 64 dequantized
 * values must be one scale times NF4 table values, the largest |value| being the scale itself
 * (the block's absmax element encodes to ±1): |w/max − t| ≤ 2ε for the nearest table value t. A
 * wrong block-to-absmax mapping breaks that. */
static void test_load(void) {
    static const char *const dirs[] = {"tests/unit/testdata/models/llama_tied_bf16",
                                       "tests/unit/testdata/models/qwen2_f16",
                                       "tests/unit/testdata/models/llama_bnb_nf4"};
    for (int d = 0; d < 3; d++) {
        struct model_source ms;
        struct io_err e = {{0}};
        if (model_source_open(&ms, dirs[d], &e) != 0) {
            test_fail("%s: %s", dirs[d], e.msg);
            continue;
        }
        const struct model_config *c = &ms.config;
        struct llama_weights w;
        ref_llama_weights_alloc(&w, c);
        int ok = ref_llama_weights_load(&w, &ms, &e) == 0;
        EXPECT(ok, "%s: %s", dirs[d], e.msg);
        if (ok && model_source_is_bnb(&ms, MW_DOWN, 1)) {
            int co, ci, bad = 0;
            llama_linear_shape(c, LLAMA_DOWN, &co, &ci);
            const float *x = w.layers[1].w[LLAMA_DOWN];
            const int64_t n = (int64_t)co * ci;
            for (int64_t b0 = 0; b0 < n; b0 += NF4_BLOCKSIZE) {
                int64_t b1 = b0 + NF4_BLOCKSIZE < n ? b0 + NF4_BLOCKSIZE : n;
                float mx = 0;
                for (int64_t i = b0; i < b1; i++) mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
                for (int64_t i = b0; i < b1 && mx > 0; i++) {
                    double r = x[i] / mx, best = 1e9;
                    for (int k = 0; k < 16; k++) best = fmin(best, fabs(r - nf4_table[k]));
                    bad += best > 2 * FLT_EPSILON;
                }
            }
            EXPECT(bad == 0, "%s: %d dequantized NF4 values are not table values times their block's scale", dirs[d],
                   bad);
        }
        if (ok) {
            struct llama_options o;
            ref_llama_options_default(&o);
            struct llama_model m;
            const int T = 6;
            ref_llama_init(&m, c, &o, 1, T, T);
            float *slab = malloc(ref_llama_slab_floats(&m) * sizeof(float));
            int32_t ids[6], targets[6];
            struct rng r;
            rng_init(&r, g_seed + (uint64_t)d);
            for (int t = 0; t < T; t++) {
                ids[t] = rng_int(&r, c->V);
                targets[t] = t + 1 < T ? rng_int(&r, c->V) : REF_IGNORE_INDEX;
            }
            struct llama_batch b = {1, T, ids, targets, NULL, 0};
            double loss = ref_llama_forward(&m, &w, NULL, &b, slab, NULL);
            EXPECT(isfinite(loss) && loss > 0, "%s: loss %g", dirs[d], loss);
            free(slab);
            ref_llama_free(&m);
        }
        ref_llama_weights_free(&w, c);
        model_source_close(&ms);
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    test_load();
    for (int which = 0; which < 2; which++) {
        test_gradcheck(which, LLAMA_FULL, 0);
        test_gradcheck(which, LLAMA_LORA, LLAMA_ALL_TARGETS);
        test_gradcheck(which, LLAMA_DORA, (1u << LLAMA_K) | (1u << LLAMA_O) | (1u << LLAMA_UP) | (1u << LLAMA_DOWN));
        test_recompute(which, LLAMA_FULL, ACT_F32);
        test_recompute(which, LLAMA_DORA, ACT_F32);
        test_recompute(which, LLAMA_LORA, ACT_BF16);
        test_zero_adapter(which, LLAMA_LORA);
        test_zero_adapter(which, LLAMA_DORA);
        test_variants(which);
        test_bf16(which);
        test_accumulation(which, LLAMA_FULL);
        test_accumulation(which, LLAMA_DORA);
    }
    return test_finish("llama_test");
}
