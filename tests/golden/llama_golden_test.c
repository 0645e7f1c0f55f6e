/* llama_golden_test.c — ref/llama against transformers + PEFT (+ bitsandbytes) end to end, on the
 * fixtures of tests/golden/gen/gen_e2e.py (tests/golden/data/e2e/{llama,qwen2}/):
 * logits, loss and every trainable gradient for full fine-tuning, LoRA and DoRA (QLoRA and QDoRA
 * on the Llama-like model: the base linears NF4-quantized by bitsandbytes, dequantized by ref/nf4
 * from the packed checkpoint tensors — bit-identical to bitsandbytes' own dequantization, tier
 * (a) — and handed to ref/llama), then a 5-step AdamW trajectory (losses and final trainable
 * weights).
 *
 *   bazel test //tests/golden:llama_golden_test
 *
 * Tolerances (STYLE.md tier (d), built from tier (b)): both sides compute in fp32; refine's ref/
 * sums in double and rounds once, torch sums in fp32 (blocked, error growing like √K·ε for K
 * terms). Along the forward path a value passes through S = 4L + 2 reductions that can each add
 * that relative error (3 GEMM stages + attention per layer, final norm + lm_head), and the errors
 * carry through the residual stream with gain O(1) in these well-conditioned tiny models. So a
 * forward quantity gets k = 2·S·√K_max (factor 2: torch's blocked sums are not all pairwise),
 * relative to |ref| + rms(ref) (the floor: elements near zero inherit the error of their
 * neighbours' magnitude); the backward path is twice as long: k doubles. The loss is one
 * reduction more (over N·V) than the logits: k·(1 + log2 N). Aggregate bound as compare.h states.
 * The AdamW trajectory: the losses get the loss tolerance times (1 + step) (each step's weights
 * carry the previous steps' differences). The final weights: an Adam update moves each element
 * by lr·m̂/(√v̂ + ε), of magnitude ≲ lr whatever the gradient's size, so its error is lr times the
 * RELATIVE error of that gradient element — small where the gradient is large, but not where the
 * gradient is a cancellation residue (e.g. Qwen2's k_proj.bias, whose gradient vanishes but for
 * RoPE: softmax ignores a per-row constant). So the final weights get the gradient tier relative
 * to |ref| (k·STEPS) plus an absolute allowance of 10% of lr per step (ADAM_DIRECTION_ERR): the
 * worst measured is 5.4% (qwen2 full, layers.1 k_proj.bias), 3% for LoRA's A/B in llama.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/bnb4.h"
#include "io/config.h"
#include "io/file.h"
#include "io/model_source.h"
#include "io/tokenizer.h"
#include "ref/adamw.h"
#include "ref/llama.h"
#include "ref/nf4.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "train/options.h" /* train_cache_dir */
#include "tests/golden/golden.h"

#define DIR "tests/golden/data/e2e/"
#define STEPS 5
#define LR 1e-2
/* Error of one Adam update direction m̂/(√v̂ + ε), as a fraction of lr (see above). */
#define ADAM_DIRECTION_ERR 0.1

struct tol {
    double fwd; /* k for forward quantities (logits) */
    double bwd; /* k for gradients */
};

static struct tol tolerances(const struct model_config *c) {
    int kmax = c->C;
    if (c->F > kmax) kmax = c->F;
    if (c->H * c->D > kmax) kmax = c->H * c->D;
    double S = 4.0 * c->L + 2.0;
    struct tol t;
    t.fwd = 2.0 * S * sqrt((double)kmax);
    t.bwd = 2.0 * t.fwd;
    return t;
}

static int32_t *to_i32(const int64_t *x, int64_t n) {
    int32_t *y = malloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)x[i];
    return y;
}

static void load_into(const struct golden *g, const char *name, float *dst, const struct llama_tensor *t) {
    float *v = golden_f32(g, name, t->ndim, t->shape);
    memcpy(dst, v, (size_t)t->numel * sizeof *dst);
    free(v);
}

/* Tier (b) with floor rms(ref) (abs_floor < 0), or with an absolute floor given in units of the
 * tolerance: |got − ref| ≤ k·ε·|ref| + abs_floor when abs_floor ≥ 0. */
static int compare_floor(const char *model, const char *mode, const char *what, const float *got, const float *ref,
                         int64_t n, double k, double abs_floor) {
    char shape[64];
    snprintf(shape, sizeof shape, "%s %s n=%lld", model, mode, (long long)n);
    struct cmp_case cc = {"llama", what, shape, "f32", 0};
    double floor = abs_floor < 0 ? cmp_rms(ref, n) : abs_floor / (k * FLT_EPSILON);
    return cmp_elementwise(&cc, got, ref, n, FLT_EPSILON, k, floor, NULL);
}

static int compare(const char *model, const char *mode, const char *what, const float *got, const float *ref,
                   int64_t n, double k) {
    return compare_floor(model, mode, what, got, ref, n, k, -1.0);
}

static void run_case(const char *model, const char *mode) {
    char path[256], prefixed[200];
    struct model_config cfg;
    struct io_err e;
    snprintf(path, sizeof path, DIR "%s/config.json", model);
    if (config_from_hf_json(&cfg, path, &e) != 0) {
        test_fail("%s: %s", path, e.msg);
        return;
    }
    struct llama_options o;
    ref_llama_options_default(&o);
    int quant = strcmp(mode, "qlora") == 0 || strcmp(mode, "qdora") == 0;
    o.mode = strcmp(mode, "full") == 0 ? LLAMA_FULL
             : (strcmp(mode, "lora") == 0 || strcmp(mode, "qlora") == 0) ? LLAMA_LORA
                                                                          : LLAMA_DORA;
    o.R = 4;
    o.alpha = 8.0;
    o.targets = LLAMA_ALL_TARGETS;

    struct golden gin, gf, gq;
    snprintf(path, sizeof path, DIR "%s/inputs.safetensors", model);
    golden_open(&gin, path);
    int64_t shp[2] = {2, 24};
    int64_t *ids64 = golden_i64(&gin, "input_ids", 2, shp), *tg64 = golden_i64(&gin, "targets", 2, shp);
    const int B = 2, T = 24, N = B * T;
    int32_t *ids = to_i32(ids64, N), *targets = to_i32(tg64, N);
    free(ids64);
    free(tg64);
    golden_close(&gin);

    struct llama_weights w;
    struct llama_adapters a = {0};
    ref_llama_weights_alloc(&w, &cfg);
    if (o.mode != LLAMA_FULL) ref_llama_adapters_alloc(&a, &cfg, &o);
    int nt = ref_llama_tensors(NULL, &cfg, &o, &w, &a);
    struct llama_tensor *ts = calloc((size_t)nt, sizeof *ts);
    ref_llama_tensors(ts, &cfg, &o, &w, &a);

    /* the base model through io/: config.json + model.safetensors (BF16, exact values) */
    struct model_source ms;
    snprintf(path, sizeof path, DIR "%s", model);
    if (model_source_open(&ms, path, &e) != 0 || ref_llama_weights_load(&w, &ms, &e) != 0) {
        test_fail("%s: %s", path, e.msg);
        return;
    }
    model_source_close(&ms);
    snprintf(path, sizeof path, DIR "%s/%s.safetensors", model, mode);
    golden_open(&gf, path);
    if (quant) {
        snprintf(path, sizeof path, DIR "%s/qlora.safetensors", model);
        golden_open(&gq, path);
    }
    for (int i = 0; i < nt; i++) {
        if (strncmp(ts[i].name, "base_model.", 11) == 0) {
            snprintf(prefixed, sizeof prefixed, "adapter.%s", ts[i].name);
            load_into(&gf, prefixed, ts[i].data, &ts[i]);
            continue;
        }
        snprintf(prefixed, sizeof prefixed, "base.%s", ts[i].name);
        if (!quant || !golden_has(&gq, prefixed)) continue;
        /* QLoRA base: ref/nf4 dequantizes the packed bitsandbytes tensors (nf4.<name>.*) and
         * must reproduce bitsandbytes' dequantized weight (base.<name>) exactly */
        char nf4name[200];
        snprintf(nf4name, sizeof nf4name, "nf4.%s", ts[i].name);
        struct bnb4_weight bw;
        int64_t qshape[2];
        if (bnb4_bind(&bw, qshape, bnb4_lookup_file(&gq.st), gq.path, nf4name, NULL, &e) != BNB4_BOUND ||
            nf4_dequantize_bnb(ts[i].data, &bw, ts[i].numel, ACT_F32, &e) != 0) {
            test_fail("%s", e.msg);
            continue;
        }
        EXPECT(qshape[0] == ts[i].shape[0] && qshape[1] == ts[i].shape[1], "%s: shape [%lld, %lld]", nf4name,
               (long long)qshape[0], (long long)qshape[1]);
        float *bnb = golden_f32(&gq, prefixed, ts[i].ndim, ts[i].shape);
        struct cmp_case cc = {"nf4_dequantize_bnb", prefixed, "llama", "f32", 0};
        cmp_exact_f32(&cc, ts[i].data, bnb, ts[i].numel);
        free(bnb);
    }
    if (quant) golden_close(&gq);

    struct tol tol = tolerances(&cfg);
    struct llama_model m;
    ref_llama_init(&m, &cfg, &o, B, T, T);
    float *slab = malloc(ref_llama_slab_floats(&m) * sizeof(float));
    float *logits = malloc((size_t)N * (size_t)cfg.V * sizeof(float));
    struct llama_batch batch = {B, T, ids, targets, NULL, 0};

    /* gradient buffers: a second weights / adapters struct, zeroed */
    struct llama_weights gw = {0};
    struct llama_adapters ga = {0};
    if (o.mode == LLAMA_FULL)
        ref_llama_weights_alloc(&gw, &cfg);
    else
        ref_llama_adapters_alloc(&ga, &cfg, &o);
    struct llama_tensor *gts = calloc((size_t)nt, sizeof *gts);
    ref_llama_tensors(gts, &cfg, &o, o.mode == LLAMA_FULL ? &gw : &w, &ga);

    double loss = ref_llama_forward(&m, &w, &a, &batch, slab, logits);
    int64_t lshape[3] = {B, T, cfg.V};
    float *ref_logits = golden_f32(&gf, "logits", 3, lshape);
    compare(model, mode, "logits", logits, ref_logits, (int64_t)N * cfg.V, tol.fwd);
    free(ref_logits);
    double ref_loss = golden_scalar(&gf, "loss");
    double loss_k = tol.fwd * (1.0 + log2((double)N));
    EXPECT(fabs(loss - ref_loss) <= loss_k * FLT_EPSILON * fabs(ref_loss), "%s %s: loss %.9g, torch %.9g (tol %.3g)",
           model, mode, loss, ref_loss, loss_k * FLT_EPSILON * fabs(ref_loss));

    ref_llama_backward(&m, &w, &a, &batch, slab, &gw, &ga, 1.0f);
    int n_grads = 0;
    for (int i = 0; i < nt; i++) {
        if (!ts[i].trainable) continue;
        snprintf(prefixed, sizeof prefixed, "grad.%s", ts[i].name);
        float *ref = golden_f32(&gf, prefixed, ts[i].ndim, ts[i].shape);
        compare(model, mode, prefixed, gts[i].data, ref, ts[i].numel, tol.bwd);
        free(ref);
        n_grads++;
    }
    EXPECT(n_grads > 0, "%s %s: no trainable tensor", model, mode);

    /* 5 AdamW steps on the same batch (torch.optim.AdamW(lr=1e-2, wd=0.01) over the trainables). */
    struct adamw_hparams hp = {LR, 0.9, 0.999, 1e-8, 0.01};
    float **mom = calloc((size_t)nt, sizeof *mom), **vel = calloc((size_t)nt, sizeof *vel);
    for (int i = 0; i < nt; i++) {
        if (!ts[i].trainable) continue;
        mom[i] = calloc((size_t)ts[i].numel, sizeof(float));
        vel[i] = calloc((size_t)ts[i].numel, sizeof(float));
    }
    int64_t tshape[1] = {STEPS + 1};
    float *ref_traj = golden_f32(&gf, "traj_loss", 1, tshape);
    for (int step = 0; step <= STEPS; step++) {
        for (int i = 0; i < nt; i++)
            if (gts[i].trainable) memset(gts[i].data, 0, (size_t)gts[i].numel * sizeof(float));
        loss = ref_llama_forward(&m, &w, &a, &batch, slab, NULL);
        double k = loss_k * (1.0 + step);
        EXPECT(fabs(loss - ref_traj[step]) <= k * FLT_EPSILON * fabs(ref_traj[step]),
               "%s %s: loss before step %d %.9g, torch %.9g (tol %.3g)", model, mode, step + 1, loss,
               (double)ref_traj[step], k * FLT_EPSILON * fabs(ref_traj[step]));
        if (step == STEPS) break;
        ref_llama_backward(&m, &w, &a, &batch, slab, &gw, &ga, 1.0f);
        for (int i = 0; i < nt; i++)
            if (ts[i].trainable) ref_adamw_step(ts[i].data, mom[i], vel[i], gts[i].data, ts[i].numel, step + 1, &hp);
    }
    free(ref_traj);
    for (int i = 0; i < nt; i++) {
        if (!ts[i].trainable) continue;
        snprintf(prefixed, sizeof prefixed, "final.%s", ts[i].name);
        if (!golden_has(&gf, prefixed)) continue;
        float *ref = golden_f32(&gf, prefixed, ts[i].ndim, ts[i].shape);
        compare_floor(model, mode, prefixed, ts[i].data, ref, ts[i].numel, tol.bwd * STEPS,
                      STEPS * LR * ADAM_DIRECTION_ERR);
        free(ref);
    }

    for (int i = 0; i < nt; i++) {
        free(mom[i]);
        free(vel[i]);
    }
    free(mom);
    free(vel);
    golden_close(&gf);
    free(gts);
    free(ts);
    free(slab);
    free(logits);
    ref_llama_free(&m);
    if (o.mode == LLAMA_FULL)
        ref_llama_weights_free(&gw, &cfg);
    else
        ref_llama_adapters_free(&ga, &cfg);
    ref_llama_adapters_free(&a, &cfg);
    ref_llama_weights_free(&w, &cfg);
    free(ids);
    free(targets);
}

/* SmolLM2-135M-Instruct from the GGUF through io/model_source.h against transformers loading the
 * same GGUF (tests/golden/gen/gen_smollm2.py): the token ids of the text (refine's tokenizer from
 * the GGUF metadata), the loss of the text and the logits at 4 positions.
 * Skipped, with a message, when the model file is absent (tools/setup.sh fetches it). Tolerance:
 * the tier-(d) rule above with L = 30, K_max = F = 1536. */
static void run_smollm2(void) {
    char cache[1024], path[1200];
    train_cache_dir(cache, sizeof cache);
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    if (!file_exists(path)) {
        printf("SKIPPED the SmolLM2 logits: %s is absent (tools/setup.sh fetches it)\n", path);
        return;
    }
    struct model_source ms;
    struct io_err e = {{0}};
    if (model_source_open(&ms, path, &e) != 0) {
        test_fail("SmolLM2: %s", e.msg);
        return;
    }
    const struct model_config *c = &ms.config;
    struct llama_weights w;
    ref_llama_weights_alloc(&w, c);
    EXPECT(ref_llama_weights_load(&w, &ms, &e) == 0, "SmolLM2 weights: %s", e.msg);

    struct golden g;
    golden_open(&g, DIR "smollm2/logits.safetensors");
    const int T = (int)golden_numel(&g, "input_ids"), P = (int)golden_numel(&g, "positions");
    int64_t *ids64 = golden_i64(&g, "input_ids", -1, NULL), *pos64 = golden_i64(&g, "positions", -1, NULL);
    int32_t *ids = to_i32(ids64, T), *targets = malloc((size_t)T * sizeof *targets);
    /* the tokenizer from the GGUF metadata (io/tokenizer) must give transformers' ids */
    const int nb = (int)golden_numel(&g, "text_bytes");
    int64_t *tb = golden_i64(&g, "text_bytes", -1, NULL);
    char *text = malloc((size_t)nb + 1);
    for (int i = 0; i < nb; i++) text[i] = (char)tb[i];
    text[nb] = 0;
    struct tokenizer *tok = model_source_tokenizer(&ms, &e);
    EXPECT(tok != NULL, "SmolLM2 tokenizer: %s", e.msg);
    if (tok) {
        struct tok_ids enc = {0};
        tokenizer_encode(tok, text, (size_t)nb, 0, &enc);
        int same = enc.n == (size_t)T;
        for (int t = 0; same && t < T; t++) same = enc.ids[t] == (uint32_t)ids[t];
        EXPECT(same, "SmolLM2: refine's tokenizer gives %zu ids for the text, transformers %d (or other ids)", enc.n, T);
        tok_ids_free(&enc);
        tokenizer_free(tok);
    }
    free(tb);
    free(text);
    for (int t = 0; t < T; t++) targets[t] = t + 1 < T ? ids[t + 1] : -100; /* labels = input_ids, shifted */
    int64_t lshape[2] = {P, c->V};
    float *ref = golden_f32(&g, "logits", 2, lshape);
    double ref_loss = golden_scalar(&g, "loss");

    struct llama_options o;
    ref_llama_options_default(&o);
    o.linear = LINEAR_BLAS; /* 135M parameters: the sgemm path (agrees with the naive one, tests/unit/llama_test) */
    struct llama_model m;
    ref_llama_init(&m, c, &o, 1, T, T);
    float *slab = malloc(ref_llama_slab_floats(&m) * sizeof(float));
    float *logits = malloc((size_t)T * (size_t)c->V * sizeof(float));
    float *rows = malloc((size_t)P * (size_t)c->V * sizeof(float));
    struct llama_batch batch = {1, T, ids, targets, NULL, 0};
    double loss = ref_llama_forward(&m, &w, NULL, &batch, slab, logits);
    for (int p = 0; p < P; p++) memcpy(rows + (size_t)p * c->V, logits + (size_t)pos64[p] * c->V, (size_t)c->V * 4);
    struct tol tol = tolerances(c);
    compare("smollm2", "gguf", "logits", rows, ref, (int64_t)P * c->V, tol.fwd);
    double loss_k = tol.fwd * (1.0 + log2((double)T));
    EXPECT(fabs(loss - ref_loss) <= loss_k * FLT_EPSILON * fabs(ref_loss), "smollm2: loss %.9g, torch %.9g (tol %.3g)",
           loss, ref_loss, loss_k * FLT_EPSILON * fabs(ref_loss));
    printf("smollm2: T=%d loss %.7f (transformers %.7f)\n", T, loss, ref_loss);
    free(rows);
    free(logits);
    free(slab);
    free(ref);
    free(ids64);
    free(pos64);
    free(ids);
    free(targets);
    ref_llama_free(&m);
    golden_close(&g);
    ref_llama_weights_free(&w, c);
    model_source_close(&ms);
}

int main(int argc, char **argv) {
    (void)test_seed(argc, argv, 0); /* the fixtures carry their own seeds (tests/golden/data/MANIFEST) */
    static const char *const llama_modes[] = {"full", "lora", "dora", "qlora", "qdora"};
    static const char *const qwen_modes[] = {"full", "lora", "dora"};
    for (size_t i = 0; i < sizeof llama_modes / sizeof *llama_modes; i++) run_case("llama", llama_modes[i]);
    for (size_t i = 0; i < sizeof qwen_modes / sizeof *qwen_modes; i++) run_case("qwen2", qwen_modes[i]);
    run_smollm2();
    return test_finish("llama_golden_test");
}
