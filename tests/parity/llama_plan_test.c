/* llama_plan_test.c — the GPU model's memory plan (gpu/llama.h), checked on the CPU: the plan is
 * host arithmetic (no device is touched), so this runs in CI with the other CPU tests.
 *
 * What must hold, each derived from what the model stores (gpu/llama.h "Storage"):
 *   - trainable state: full fine-tuning holds per parameter an fp32 master and a bf16 copy (6 B;
 *     split masters: the copy and a 16-bit low half, 4 B — and Llama-3.1-8B 1×512 with --recompute
 *     layer and the 8-bit optimizer then plans inside one 80 GB card),
 *     an fp32 gradient (4 B) and two fp32 moments (8 B); the 8-bit optimizer ~2 B per parameter of
 *     the large tensors; LoRA holds R·(C_in + C_out) per adapted linear and layer;
 *   - NF4 bases take ~0.5 B per weight plus the double-quantized absmax (1/64 B) where bf16 takes 2;
 *   - activations grow linearly with the micro-batch; recomputation orders them NONE > ATTN > LAYER,
 *     and LAYER keeps the L + 1 layer inputs plus one layer's set;
 *   - the shapes PERFORMANCE.md targets plan as they should: Llama-3.2-1B LoRA 16×512 well under
 *     HF + PEFT's 34 GiB, Llama-3.1-8B LoRA 16×512 inside an 80 GB card;
 *   - FP8 (--precision fp8, --base-dtype fp8; gpu/llama.h "Storage"): an FP8-stored base takes 1 byte
 *     per linear weight plus one layer's transposed codes (where bf16 takes 2), a bf16 base under FP8
 *     products keeps its bf16 values and both FP8 copies (4), full fine-tuning's FP8 copies add 2
 *     bytes per linear weight to the parameters; the FP8-stored base recomputes the MLP input (its
 *     activations lose L·B·T·F·2 bytes); and Llama-3.1-8B LoRA 16×512 with an FP8 base plans under
 *     40 GiB;
 *   - the sharded optimizer (ZeRO-1) plans per rank: whole copies and gradients, 1/W of the masters
 *     and moments (adding up to the whole over the ranks); Llama-3.1-8B full fine-tuning fits 80 GB
 *     per GPU on 8 GPUs (16×512 with --recompute layer, 4×512 without), and not on one;
 *   - sharded gradients (ZeRO-2) per rank: the embedding's, the head's and two layers' gradients and
 *     1/W of the rest; Llama-3.1-8B full on 8 GPUs ~20 GiB less; --shard-gradients auto takes them
 *     where the plan is smaller and the step has one micro-batch a rank or the whole gradients do
 *     not fit (gpu_shards_gradients), on refuses without the sharded optimizer;
 *   - bf16 gradients (NUMERICS.md §5.6) take 2 bytes a parameter: with split masters and the 8-bit
 *     optimizer, trainable state is 8 bytes a parameter; refused for adapters and the sharded optimizer;
 *   - bf16 weights (--master bf16) take 2 bytes a parameter (6 in all with bf16 gradients and 8-bit
 *     states: 1B full 16×512 with --recompute layer plans under 10 GiB, FP8 too); refused for
 *     adapters and the sharded optimizer; FP8 full fine-tuning with --recompute attn stores no codes;
 *   - MLP token chunks (--mlp-chunk) shrink the gate, up, MLP input and its gradient to the chunk's
 *     rows and nothing else; Llama-3.1-8B QLoRA r 32 at 400,000 tokens (batch 1, offloaded) then
 *     plans inside an 80 GB card, and the longest-sequence search honours a host-memory bound;
 *   - --recompute-keep N plans N − 1 layers' saved sets beyond the recomputation's shared one (LAYER
 *     and ATTN), N = 1 as none; refused without recomputation, for every layer, with MLP chunks;
 *   - options the kernels cannot run are refused with a message, not a crash;
 *   - the layout's stacking decisions (gpu_llama_layout_stacking, rows placed at fake addresses):
 *     q/k/v and gate/up one product each for LoRA and QLoRA, and full fine-tuning's dW too, alike in
 *     every layout (fp32, split or bf16 masters, ZeRO-1 and ZeRO-2 ranks); none for DoRA and FP8
 *     products; a q/k/v bias leaves q/k/v packed.
 * Alignment (256 B per buffer) is the only slack: bounds allow it explicitly.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpu/llama.h"
#include "io/config.h"
#include "train/options.h"
#include "trainers/gpu_engine.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static int failures, checks;

static void expect(int ok, const char *what, double got, double lo, double hi) {
    checks++;
    if (ok) return;
    failures++;
    printf("FAIL %s: %.6g not in [%.6g, %.6g]\n", what, got, lo, hi);
}

static void in_range(const char *what, double got, double lo, double hi) { expect(got >= lo && got <= hi, what, got, lo, hi); }

static struct gpu_llama_options opts(enum llama_mode mode, int B, int T) {
    struct gpu_llama_options o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.targets = LLAMA_ALL_TARGETS;
    o.R = 16;
    o.lora_scale = 2.0f;
    o.nested_nf4 = 1;
    o.B = B;
    o.T = T;
    return o;
}

static struct gpu_llama_plan plan_of(const struct model_config *c, const struct gpu_llama_options *o) {
    struct gpu_llama_plan p;
    struct io_err e = {{0}};
    memset(&p, 0, sizeof p);
    if (gpu_llama_plan_bytes(&p, c, o, &e) != 0) {
        printf("FAIL unexpected refusal: %s\n", e.msg);
        failures++;
    }
    return p;
}

/* gpu_memory_hint of o is exactly want. */
static void expect_hint(const char *what, const struct gpu_llama_options *o, const char *want) {
    char h[200];
    gpu_memory_hint(o, h, sizeof h);
    checks++;
    if (strcmp(h, want) != 0) {
        failures++;
        printf("FAIL hint for %s: '%s', expected '%s'\n", what, h, want);
    }
}

static double n_linear_params(const struct model_config *c) {
    return (double)c->L * ((double)c->C * c->H * c->D + 2.0 * c->C * c->KVH * c->D + (double)c->H * c->D * c->C +
                           3.0 * c->C * c->F);
}

static double n_params(const struct model_config *c) {
    return n_linear_params(c) + (double)c->V * c->C * (c->tie_word_embeddings ? 1 : 2) + (2.0 * c->L + 1) * c->C;
}

int main(void) {
    struct model_config c1, c8, cs;
    struct io_err e = {{0}};
    if (config_named(&c1, "llama-3.2-1b", &e) || config_named(&c8, "llama-3.1-8b", &e) ||
        config_named(&cs, "smollm2-135m", &e)) {
        printf("llama_plan_test: %s\n", e.msg);
        return 1;
    }
    const double slack = 256.0 * 4096; /* 256-byte alignment of at most a few thousand buffers */

    /* full fine-tuning: 6 + 4 + 8 bytes per parameter. */
    const double np = n_params(&cs);
    struct gpu_llama_options of = opts(LLAMA_FULL, 2, 128);
    struct gpu_llama_plan pf = plan_of(&cs, &of);
    in_range("full: params bytes = 6 per parameter", (double)pf.params, 6 * np, 6 * np + slack);
    in_range("full: grads bytes = 4 per parameter", (double)pf.grads, 4 * np, 4 * np + slack);
    in_range("full: AdamW moments = 8 per parameter", (double)pf.optim, 8 * np, 8 * np + slack);
    of.optimizer = OPTIMIZER_ADAMW8BIT;
    struct gpu_llama_plan pf8 = plan_of(&cs, &of);
    in_range("full, 8-bit AdamW: about 2 bytes per parameter", (double)pf8.optim, 2 * np, 2 * np * 1.05 + slack);
    /* split masters (ref/master_pair.h): the bf16 copy and a 16-bit low half, 4 bytes a parameter */
    struct gpu_llama_options osp = opts(LLAMA_FULL, 2, 128);
    osp.master = MASTER_SPLIT;
    struct gpu_llama_plan psp = plan_of(&cs, &osp);
    in_range("full, split masters: params bytes = 4 per parameter", (double)psp.params, 4 * np, 4 * np + slack);
    expect(psp.grads == pf.grads && psp.optim == pf.optim && psp.acts == pf.acts,
           "split masters change the parameters only", (double)psp.grads, (double)pf.grads, (double)pf.grads);
    /* bf16 gradients (NUMERICS.md §5.6): 2 bytes a parameter, nothing else changes; with split masters
     * and the 8-bit optimizer, 8 bytes a parameter in all (the peers' bf16 weights, .grad and states) */
    struct gpu_llama_options og = opts(LLAMA_FULL, 2, 128);
    og.grads = GRAD_BF16;
    struct gpu_llama_plan pg = plan_of(&cs, &og);
    in_range("full, bf16 gradients: grads bytes = 2 per parameter", (double)pg.grads, 2 * np, 2 * np + slack);
    expect(pg.params == pf.params && pg.optim == pf.optim && pg.acts == pf.acts,
           "bf16 gradients change the gradients only", (double)pg.params, (double)pf.params, (double)pf.params);
    og.master = MASTER_SPLIT, og.optimizer = OPTIMIZER_ADAMW8BIT;
    struct gpu_llama_plan pg8 = plan_of(&cs, &og);
    in_range("full, bf16 gradients + split masters + 8-bit AdamW: about 8 bytes per parameter",
             (double)(pg8.params + pg8.grads + pg8.optim), 8 * np, 8 * np * 1.02 + slack);
    /* bf16 weights (--master bf16): the copy alone, 2 bytes a parameter; with bf16 gradients and the
     * 8-bit optimizer about 6 in all */
    struct gpu_llama_options ow = opts(LLAMA_FULL, 2, 128);
    ow.master = MASTER_BF16;
    struct gpu_llama_plan pw = plan_of(&cs, &ow);
    in_range("full, bf16 weights: params bytes = 2 per parameter", (double)pw.params, 2 * np, 2 * np + slack);
    expect(pw.grads == pf.grads && pw.optim == pf.optim && pw.acts == pf.acts, "bf16 weights change the parameters only",
           (double)pw.grads, (double)pf.grads, (double)pf.grads);
    ow.grads = GRAD_BF16, ow.optimizer = OPTIMIZER_ADAMW8BIT;
    struct gpu_llama_plan pw8 = plan_of(&cs, &ow);
    in_range("full, bf16 weights + bf16 gradients + 8-bit AdamW: about 6 bytes per parameter",
             (double)(pw8.params + pw8.grads + pw8.optim), 6 * np, 6 * np * 1.03 + slack);
    ow.master = MASTER_BF16_SR; /* stochastic rounding: the same memory */
    const struct gpu_llama_plan pws = plan_of(&cs, &ow);
    expect(pws.total == pw8.total, "bf16-sr plans as bf16", (double)pws.total, (double)pw8.total, (double)pw8.total);

    /* the sharded optimizer (ZeRO-1, ref/shard.h), per rank: the bf16 copies and the gradients
     * whole, the fp32 masters and the moments of 1/W of the elements (within one 8192-element chunk
     * of it: 12 · 8192 bytes, and a piece's 4-element alignment per tensor) */
    const double chunk = 12.0 * 8192 + 16.0 * 300;
    for (int W = 2; W <= 8; W *= 2) {
        double masters = 0;
        for (int r = 0; r < W; r++) {
            struct gpu_llama_options os = opts(LLAMA_FULL, 2, 128);
            os.shard_world = W, os.shard_rank = r;
            struct gpu_llama_plan ps = plan_of(&cs, &os);
            char what[128];
            snprintf(what, sizeof what, "sharded over %d, rank %d: params = 2 per parameter + 4 / W", W, r);
            in_range(what, (double)ps.params, 2 * np + 4 * np / W - chunk, 2 * np + 4 * np / W + chunk + slack);
            snprintf(what, sizeof what, "sharded over %d, rank %d: grads whole (4 per parameter)", W, r);
            in_range(what, (double)ps.grads, 4 * np, 4 * np + slack);
            snprintf(what, sizeof what, "sharded over %d, rank %d: AdamW moments = 8 / W per parameter", W, r);
            in_range(what, (double)ps.optim, 8 * np / W - chunk, 8 * np / W + chunk + slack);
            masters += (double)ps.params - (double)pf.params + 4 * np; /* its masters: params − copies */
        }
        char what[96];
        snprintf(what, sizeof what, "sharded over %d: the ranks' masters add up to 4 per parameter", W);
        in_range(what, masters, 4 * np - W * slack, 4 * np + W * (16.0 * 300 + slack));
    }
    /* sharded gradients (ZeRO-2), per rank: the embedding's, the head's and two layers' gradient
     * rows, and an accumulator of 1/W of the elements; nothing else changes */
    const double per_layer = (n_linear_params(&cs) + 2.0 * cs.L * cs.C) / cs.L, outside = np - cs.L * per_layer;
    for (int W = 2; W <= 8; W *= 2)
        for (int r = 0; r < W; r += W - 1) {
            struct gpu_llama_options o1 = opts(LLAMA_FULL, 2, 128), o2;
            o1.shard_world = W, o1.shard_rank = r;
            o2 = o1;
            o2.shard_grads = 1;
            const struct gpu_llama_plan z1 = plan_of(&cs, &o1), z2 = plan_of(&cs, &o2);
            char what[160];
            snprintf(what, sizeof what, "gradients sharded over %d, rank %d: grads = 4 × (outside the layers + 2 layers "
                                        "+ 1/W of all) per parameter", W, r);
            const double want = 4 * (outside + 2 * per_layer) + 4 * np / W;
            in_range(what, (double)z2.grads, want - chunk / 3, want + chunk / 3 + slack);
            expect(z2.params == z1.params && z2.optim == z1.optim && z2.acts == z1.acts,
                   "sharded gradients change the gradients only", (double)z2.params, (double)z1.params,
                   (double)z1.params);
        }

    /* LoRA: R·(C_in + C_out) per adapted linear and layer, fp32 gradient */
    struct gpu_llama_options ol = opts(LLAMA_LORA, 2, 128);
    struct gpu_llama_plan pl = plan_of(&cs, &ol);
    const double na = (double)cs.L * ol.R *
                      ((cs.C + cs.H * cs.D) + 2.0 * (cs.C + cs.KVH * cs.D) + (cs.H * cs.D + cs.C) + 3.0 * (cs.C + cs.F));
    in_range("lora: gradient bytes = 4 per adapter parameter", (double)pl.grads, 4 * na, 4 * na + slack);
    /* the folded groups' weights (the default: q/k/v and gate/up grouped on a bf16 base, and o — a
     * group of one, its input the attention output of H·D columns) have rows of C_in + n·R rounded up
     * to 64 elements (gpu/llama_layout.cu); unfolded, 2 bytes a weight */
    struct gpu_llama_options ou = ol;
    ou.folding = GPU_LORA_UNFOLDED;
    const struct gpu_llama_plan pu = plan_of(&cs, &ou);
    in_range("lora --unfolded: frozen bf16 weights = 2 bytes per weight", (double)pu.weights, 2 * np, 2 * np + slack);
    const double pad_qkv = (double)((cs.C + 3 * ol.R + 63) / 64 * 64 - cs.C),
                 pad_gu = (double)((cs.C + 2 * ol.R + 63) / 64 * 64 - cs.C),
                 pad_o = (double)((cs.H * cs.D + ol.R + 63) / 64 * 64 - cs.H * cs.D);
    const double folded = 2 * np + 2.0 * cs.L *
                                       ((cs.H * cs.D + 2.0 * cs.KVH * cs.D) * pad_qkv + 2.0 * cs.F * pad_gu +
                                        (double)cs.C * pad_o);
    in_range("lora: frozen bf16 weights = 2 bytes per weight and per folded adapter column", (double)pl.weights,
             folded, folded + slack);

    /* QLoRA: linears in ~0.5 + 1/64 bytes per weight */
    struct gpu_llama_options oq = ol;
    oq.base = GPU_BASE_NF4;
    struct gpu_llama_plan pq = plan_of(&c1, &oq);
    struct gpu_llama_plan pb = plan_of(&c1, &ol);
    const double nl = n_linear_params(&c1), rest = 2.0 * (n_params(&c1) - nl);
    /* one layer dequantized, its folded groups' rows padded as the bf16 base's (above) */
    const double pad1_qkv = (double)((c1.C + 3 * ol.R + 63) / 64 * 64 - c1.C),
                 pad1_gu = (double)((c1.C + 2 * ol.R + 63) / 64 * 64 - c1.C);
    const double per_layer_buffer =
        2.0 * nl / c1.L + 2.0 * ((c1.H * c1.D + 2.0 * c1.KVH * c1.D) * pad1_qkv + 2.0 * c1.F * pad1_gu);
    in_range("qlora: weights = NF4 linears + bf16 rest + one dequantized layer", (double)pq.weights,
             0.5 * nl + nl / 64 + rest + per_layer_buffer, 0.5 * nl + nl / 64 * 1.1 + rest + per_layer_buffer + slack);
    expect(pq.weights < pb.weights / 2, "qlora weights < half of bf16", (double)pq.weights, 0, pb.weights / 2.0);

    /* activations: linear in B; NONE > ATTN > LAYER; LAYER = (L + 1) inputs + one layer */
    struct gpu_llama_options o1 = opts(LLAMA_LORA, 1, 256), o2 = opts(LLAMA_LORA, 2, 256), o4 = opts(LLAMA_LORA, 4, 256);
    const double a1 = (double)plan_of(&cs, &o1).acts, a2 = (double)plan_of(&cs, &o2).acts,
                 a4 = (double)plan_of(&cs, &o4).acts;
    in_range("activations linear in the micro-batch", a4 - a2, 2 * (a2 - a1) - slack, 2 * (a2 - a1) + slack);
    struct gpu_llama_options on = opts(LLAMA_LORA, 4, 256), oa = on, oy = on;
    oa.recompute = RECOMPUTE_ATTN;
    oy.recompute = RECOMPUTE_LAYER;
    const double an = (double)plan_of(&cs, &on).acts, aa = (double)plan_of(&cs, &oa).acts,
                 ay = (double)plan_of(&cs, &oy).acts;
    expect(an > aa && aa > ay, "recompute orders activations NONE > ATTN > LAYER", aa, ay, an);
    const double chain = (cs.L + 1.0) * 4 * 256 * cs.C * 2, final = 4 * 256 * 4.0; /* + the final norm's rstd (its output is n1's scratch) */
    const double one_set = (an - chain - final) / cs.L;
    in_range("LAYER: inputs of every layer + one layer's set", ay, chain + one_set + final - slack,
             chain + one_set + final + slack);
    /* --recompute-keep N: N − 1 layers' sets more (the top layer reads the shared set either way),
     * under LAYER and under ATTN (whose shared part is the attention set) */
    struct gpu_llama_options ok1 = oy, ok3 = oy, ok3a = oa;
    ok1.recompute_keep = 1, ok3.recompute_keep = 3, ok3a.recompute_keep = 3;
    expect((double)plan_of(&cs, &ok1).acts == ay, "--recompute-keep 1 plans as LAYER alone", (double)plan_of(&cs, &ok1).acts,
           ay, ay);
    in_range("--recompute-keep 3 under LAYER: two layers' sets more", (double)plan_of(&cs, &ok3).acts,
             ay + 2 * one_set - slack, ay + 2 * one_set + slack);
    {
        const double att_set = (an - aa) / (cs.L - 1.0); /* ATTN shares one attention set among L */
        in_range("--recompute-keep 3 under ATTN: two attention sets more", (double)plan_of(&cs, &ok3a).acts,
                 aa + 2 * att_set - slack, aa + 2 * att_set + slack);
    }

    /* the shapes of PERFORMANCE.md's targets */
    struct gpu_llama_options t1 = opts(LLAMA_LORA, 16, 512), t8 = opts(LLAMA_LORA, 16, 512);
    const double g1 = plan_of(&c1, &t1).total / GIB, g8 = plan_of(&c8, &t8).total / GIB;
    in_range("Llama-3.2-1B LoRA 16x512 plan (GiB): below HF + PEFT's 34", g1, 8.0, 16.0);
    in_range("Llama-3.1-8B LoRA 16x512 plan (GiB): inside an 80 GB card", g8, 20.0, 74.0);
    printf("plans: 1B LoRA 16x512 %.2f GiB, 8B LoRA 16x512 %.2f GiB\n", g1, g8);

    /* --recompute-mlp: the layers' MLP inputs (L·N·F·2 bytes) leave the activations; one N·F buffer
     * joins the scratch (1B full 16×512 with split masters, 8-bit states and bf16 gradients: under
     * Liger's 16.9 GiB) */
    {
        struct gpu_llama_options om = opts(LLAMA_FULL, 16, 512), om2;
        om.master = MASTER_SPLIT, om.optimizer = OPTIMIZER_ADAMW8BIT, om.grads = GRAD_BF16;
        om2 = om;
        om2.mlp_input = GPU_MLP_INPUT_RECOMPUTED;
        const struct gpu_llama_plan a = plan_of(&c1, &om), b = plan_of(&c1, &om2);
        const double mlp = 2.0 * 16 * 512 * c1.F;
        in_range("1B full --recompute-mlp: activations lose L·N·F·2 bytes", (double)a.acts - (double)b.acts,
                 c1.L * mlp - slack, c1.L * mlp + slack);
        in_range("1B full --recompute-mlp: scratch gains one N·F buffer", (double)b.scratch - (double)a.scratch,
                 mlp - slack, mlp + slack);
        in_range("1B full 16x512, 8 bytes a parameter, --recompute-mlp: plan (GiB) under Liger's 16.9",
                 (double)b.total / GIB, 10.0, 16.9);
        /* bf16 weights with --recompute layer: under Unsloth's 9.99 GiB (its offloaded checkpointing) */
        struct gpu_llama_options ol16 = om;
        ol16.master = MASTER_BF16, ol16.recompute = RECOMPUTE_LAYER;
        const double gl16 = plan_of(&c1, &ol16).total / GIB;
        in_range("1B full 16x512, 6 bytes a parameter, --recompute layer: plan (GiB) under 10", gl16, 7.0, 10.0);
        ol16.linears = GPU_LINEAR_FP8;
        const double gl16f = plan_of(&c1, &ol16).total / GIB;
        in_range("the same under FP8 (the trained weights' codes a layer at a time): plan (GiB) under 10", gl16f, 7.0,
                 10.0);
    }
    /* FP8 full fine-tuning with --recompute attn casts the trained weights a layer at a time too: the
     * stored W and Wᵀ codes (2 bytes a linear weight) leave the plan */
    {
        struct gpu_llama_options fa = opts(LLAMA_FULL, 16, 512), fn;
        fa.master = MASTER_SPLIT, fa.optimizer = OPTIMIZER_ADAMW8BIT, fa.grads = GRAD_BF16;
        fa.mlp_input = GPU_MLP_INPUT_RECOMPUTED, fa.linears = GPU_LINEAR_FP8;
        fn = fa;
        fa.recompute = RECOMPUTE_ATTN;
        const struct gpu_llama_plan pa = plan_of(&c1, &fa), pn = plan_of(&c1, &fn);
        const double lin = n_linear_params(&c1);
        in_range("1B full FP8 --recompute attn: the parameters lose the stored codes (2 bytes a linear weight, "
                 "two layer buffers stay)",
                 (double)pn.params - (double)pa.params, 2 * lin - 2 * lin / c1.L - slack, 2 * lin);
    }

    /* FP8: the base's storage, the MLP input, the 8B LoRA target */
    /* the FP8-stored base: W and Wᵀ codes with nothing recomputed (2 bytes a linear weight); W alone
     * with a layer's Wᵀ buffer under --recompute attn or --recompute-mlp (the memory configurations) */
    struct gpu_llama_options o8 = opts(LLAMA_LORA, 16, 512), ob8 = o8, of8 = o8, obw = o8, obm;
    o8.linears = ob8.linears = of8.linears = obw.linears = GPU_LINEAR_FP8;
    ob8.base = obw.base = GPU_BASE_FP8;
    ob8.mlp_input = GPU_MLP_INPUT_RECOMPUTED;
    ob8.recompute = RECOMPUTE_ATTN;
    for (int r = 0; r < FP8_RECIPE_COUNT; r++) {
        o8.fp8_recipe = ob8.fp8_recipe = obw.fp8_recipe = (enum fp8_recipe)r;
        obm = ob8;
        obm.mlp_input = GPU_MLP_INPUT_SAVED;
        const struct gpu_llama_plan p8 = plan_of(&c8, &o8), pb8 = plan_of(&c8, &ob8), pbm = plan_of(&c8, &obm),
                                    pbw = plan_of(&c8, &obw);
        const double nl8 = n_linear_params(&c8), rest8 = 2.0 * (n_params(&c8) - nl8), layer8 = nl8 / c8.L;
        const double blk = r == FP8_RECIPE_BLOCK ? 2.0 * 4 * (nl8 / (128.0 * 128.0)) * 1.1 + 4096.0 * c8.L * 7 : 0;
        char what[160];
        snprintf(what, sizeof what, "8B lora fp8 (%s), FP8-stored base: weights = 1 B per linear weight + bf16 rest + one layer's codes",
                 fp8_recipe_names[r]);
        in_range(what, (double)pb8.weights, nl8 + rest8 + layer8, nl8 + rest8 + layer8 + blk + slack);
        snprintf(what, sizeof what, "8B lora fp8 (%s), bf16 base: weights = 4 B per linear weight + bf16 rest", fp8_recipe_names[r]);
        in_range(what, (double)p8.weights, 4 * nl8 + rest8, 4 * nl8 + rest8 + blk + slack);
        snprintf(what, sizeof what, "8B lora fp8 (%s), FP8-stored base without recomputation: W and Wt codes, 2 B per linear weight + bf16 rest",
                 fp8_recipe_names[r]);
        in_range(what, (double)pbw.weights, 2 * nl8 + rest8, 2 * nl8 + rest8 + blk + slack);
        snprintf(what, sizeof what, "8B lora fp8 (%s), FP8-stored base, --recompute-mlp: the MLP input is not saved", fp8_recipe_names[r]);
        const double mlp = (double)c8.L * 16 * 512 * c8.F * 2;
        in_range(what, (double)pbm.acts - (double)pb8.acts, mlp - slack, mlp + slack);
        snprintf(what, sizeof what,
                 "Llama-3.1-8B LoRA 16x512 --precision fp8 --fp8-recipe %s --base-dtype fp8 --recompute attn --recompute-mlp (GiB): under 40",
                 fp8_recipe_names[r]);
        in_range(what, pb8.total / GIB, 20.0, 40.0);
        struct gpu_llama_options obr = ob8; /* --recompute-mlp alone: Wᵀ a layer at a time too */
        obr.recompute = RECOMPUTE_NONE;
        const struct gpu_llama_plan pbr = plan_of(&c8, &obr);
        snprintf(what, sizeof what, "8B lora fp8 (%s), FP8-stored base, --recompute-mlp: weights = 1 B per linear weight + one layer's codes",
                 fp8_recipe_names[r]);
        in_range(what, (double)pbr.weights, nl8 + rest8 + layer8, nl8 + rest8 + layer8 + blk + slack);
        snprintf(what, sizeof what, "Llama-3.1-8B LoRA 16x512 --precision fp8 --fp8-recipe %s --base-dtype fp8 --recompute-mlp (GiB): under 40",
                 fp8_recipe_names[r]);
        in_range(what, pbr.total / GIB, 20.0, 40.0);
        printf("plans: 8B LoRA 16x512 fp8 %s: bf16 base %.2f GiB, fp8 base %.2f GiB\n", fp8_recipe_names[r], p8.total / GIB,
               pb8.total / GIB);
    }
    { /* --auto-batch under FP8: micro-batch × sequence stays a multiple of 16 (T = 100: B in 4s) */
        struct gpu_llama_options a8 = opts(LLAMA_LORA, 1, 100), ab = a8;
        a8.linears = GPU_LINEAR_FP8;
        const int b8 = gpu_largest_fitting_batch(a8, &cs, (size_t)1 << 40, 37),
                  bb = gpu_largest_fitting_batch(ab, &cs, (size_t)1 << 40, 37);
        expect(b8 == 36 && bb == 37, "auto-batch with T = 100 and at most 37: 36 under FP8 (B·T a multiple of 16), 37 in bf16",
               b8 * 100.0 + bb, 3637, 3637);
    }
    if (gpu_device_query(NULL, 0, NULL, NULL, &e) == 0) { /* CUB's workspace: see above */
        struct gpu_llama_options ofb = opts(LLAMA_FULL, 2, 128), ofp = ofb;
        ofp.linears = GPU_LINEAR_FP8;
        const double nls = n_linear_params(&cs);
        in_range("full fp8: the linears' FP8 copies add 2 bytes per linear weight to the parameters",
                 (double)plan_of(&cs, &ofp).params - (double)plan_of(&cs, &ofb).params, 2 * nls, 2 * nls + slack);
    }

    /* long sequences: nothing grows as T² or T·V — Llama-3.1-8B QLoRA, batch 1, layer recomputation:
     * the plan at 2T less the plan at T equals the plan at T less the plan at T/2 (every
     * T-dependent buffer linear), and the fixed part (weights, parameters, optimizer) is the same */
    struct gpu_llama_options ql = opts(LLAMA_LORA, 1, 32768);
    ql.base = GPU_BASE_NF4;
    ql.recompute = RECOMPUTE_LAYER;
    ql.R = 32;
    struct gpu_llama_options qh = ql, qd = ql;
    qh.T = 16384, qd.T = 65536;
    const struct gpu_llama_plan ph = plan_of(&c8, &qh), pm = plan_of(&c8, &ql), pd = plan_of(&c8, &qd);
    const double step1 = (double)pm.total - (double)ph.total, step2 = (double)pd.total - (double)pm.total;
    in_range("8B QLoRA 1×T: plan(64K) − plan(32K) = 2·(plan(32K) − plan(16K)) (linear in T)", step2, 2 * step1 - slack,
             2 * step1 + slack);
    expect(pm.weights == pd.weights && pm.params == pd.params && pm.optim == pd.optim,
           "weights, parameters and optimizer do not depend on T", (double)pd.weights, (double)pm.weights,
           (double)pm.weights);
    printf("8B QLoRA r32 1×32768, recompute layer: %.2f GiB (%.2f KiB per token beyond the fixed part)\n",
           pm.total / GIB, step1 / 16384.0 / 1024.0);
    /* Llama-3.1-8B full fine-tuning on 8 GPUs of 80 GB (74.5 GiB each, less the CUDA context's
     * ~1 GiB): with the optimizer sharded over the 8, every rank's plan fits, at 16×512 with
     * --recompute layer and at 4×512 without; one GPU's (unsharded) does not at any micro-batch. */
    double worst16 = 0, worst4 = 0;
    for (int r = 0; r < 8; r++) {
        struct gpu_llama_options a = opts(LLAMA_FULL, 16, 512), b = opts(LLAMA_FULL, 4, 512);
        a.recompute = RECOMPUTE_LAYER;
        a.shard_world = b.shard_world = 8;
        a.shard_rank = b.shard_rank = r;
        const double ga = plan_of(&c8, &a).total / GIB, gb = plan_of(&c8, &b).total / GIB;
        worst16 = ga > worst16 ? ga : worst16, worst4 = gb > worst4 ? gb : worst4;
    }
    in_range("Llama-3.1-8B full 16x512 --recompute layer, sharded over 8 GPUs: the largest rank's plan (GiB)", worst16,
             50.0, 73.0);
    in_range("Llama-3.1-8B full 4x512, sharded over 8 GPUs: the largest rank's plan (GiB)", worst4, 50.0, 73.0);
    /* and with the gradients sharded too (ZeRO-2): 4 bytes a parameter × 7/8 fewer, less two
     * layers' rows */
    double worst16g = 0;
    for (int r = 0; r < 8; r++) {
        struct gpu_llama_options a = opts(LLAMA_FULL, 16, 512);
        a.recompute = RECOMPUTE_LAYER;
        a.shard_world = 8, a.shard_rank = r, a.shard_grads = 1;
        const double ga = plan_of(&c8, &a).total / GIB;
        worst16g = ga > worst16g ? ga : worst16g;
    }
    const double np8 = n_params(&c8), layer8 = (n_linear_params(&c8) + 2.0 * c8.L * c8.C) / c8.L;
    const double saved = (4 * np8 * 7 / 8 - 4 * 2 * layer8 - 4 * ((double)c8.V * c8.C * 2 + c8.C)) / GIB;
    in_range("Llama-3.1-8B full 16x512 --recompute layer, gradients sharded over 8 GPUs too: the plan saves "
             "4 bytes a parameter x 7/8 of the layers' less two layers (GiB)",
             worst16 - worst16g, saved - 0.1, saved + 0.1);
    printf("plans: 8B full 16x512 --recompute layer over 8 GPUs: ZeRO-1 %.2f GiB, ZeRO-2 %.2f GiB per rank\n",
           worst16, worst16g);
    /* --shard-gradients: auto's rule (gpu_shards_gradients) */
    {
        struct train_options to;
        train_options_defaults(&to, "/nonexistent");
        struct gpu_llama_options a = opts(LLAMA_FULL, 16, 512);
        a.recompute = RECOMPUTE_LAYER, a.shard_world = 8, a.shard_rank = 7;
        const size_t big = (size_t)1 << 50, small = (size_t)(45.0 * GIB); /* 8B: ZeRO-2 39.5, ZeRO-1 60.1 */
        struct { int accum; enum shard_optimizer opt; size_t budget; int want; const char *what; } rule[] = {
            {1, SHARD_AUTO, big, 1, "auto, one micro-batch a rank: sharded"},
            {2, SHARD_AUTO, big, 0, "auto, accumulation 2, whole gradients fit: not sharded"},
            {2, SHARD_AUTO, small, 1, "auto, accumulation 2, whole gradients do not fit: sharded"},
            {1, SHARD_OFF, big, 0, "off: not sharded"},
            {2, SHARD_ON, big, 1, "on: sharded"}};
        for (size_t i = 0; i < sizeof rule / sizeof rule[0]; i++) {
            to.grad_accum = rule[i].accum, to.shard_gradients = rule[i].opt;
            struct io_err ge = {{0}};
            const int rc = gpu_shards_gradients(&to, &a, &c8, rule[i].budget, &ge);
            expect(rc == 0 && a.shard_grads == rule[i].want, rule[i].what, a.shard_grads, rule[i].want, rule[i].want);
        }
        /* a model of two layers: two layers' rows are all of them, so the plan is not smaller */
        struct model_config c2 = c1;
        c2.L = 2;
        struct gpu_llama_options t2 = opts(LLAMA_FULL, 2, 128);
        t2.shard_world = 2;
        to.grad_accum = 1, to.shard_gradients = SHARD_AUTO;
        struct io_err ge = {{0}};
        expect(gpu_shards_gradients(&to, &t2, &c2, big, &ge) == 0 && t2.shard_grads == 0,
               "auto, two layers: not sharded (no smaller)", t2.shard_grads, 0, 0);
        struct gpu_llama_options whole = opts(LLAMA_FULL, 2, 128);
        to.shard_gradients = SHARD_ON;
        const int rc = gpu_shards_gradients(&to, &whole, &c1, big, &ge);
        checks++;
        if (rc != -1 || strstr(ge.msg, "--shard-gradients on") == NULL) {
            failures++;
            printf("FAIL --shard-gradients on without the sharded optimizer: rc=%d '%s'\n", rc, ge.msg);
        }
    }
    struct gpu_llama_options one = opts(LLAMA_FULL, 1, 512);
    one.recompute = RECOMPUTE_LAYER;
    const double g_one = plan_of(&c8, &one).total / GIB;
    in_range("Llama-3.1-8B full on one GPU (unsharded), 1x512 --recompute layer: over 80 GB", g_one, 80.0, 200.0);
    /* with split masters and the 8-bit optimizer (4 + 4 + ~2 bytes a parameter) it fits one 80 GB card */
    one.master = MASTER_SPLIT, one.optimizer = OPTIMIZER_ADAMW8BIT;
    const double g_split = plan_of(&c8, &one).total / GIB;
    in_range("Llama-3.1-8B full on one GPU, 1x512 --recompute layer, split masters + 8-bit AdamW (GiB)", g_split, 70.0,
             78.0);
    printf("plans: 8B full sharded over 8 GPUs, per rank: 16x512 --recompute layer %.2f GiB, 4x512 %.2f GiB "
           "(unsharded, one GPU, 1x512: %.2f GiB; split masters + 8-bit AdamW: %.2f GiB)\n",
           worst16, worst4, g_one, g_split);

    /* the hint of a plan that does not fit names what is not in use yet */
    struct gpu_llama_options full32 = opts(LLAMA_FULL, 4, 512);
    expect_hint("full fine-tuning with fp32 masters, the MLP input kept", &full32,
                "try --recompute-mlp, --recompute layer, --master split, --optimizer adamw8bit, --grad-dtype bf16 or a "
                "shorter --seq");
    full32.mlp_input = GPU_MLP_INPUT_RECOMPUTED;
    expect_hint("full fine-tuning with fp32 masters", &full32,
                "try --recompute layer, --master split, --optimizer adamw8bit, --grad-dtype bf16 or a shorter --seq");
    struct gpu_llama_options lean = full32;
    lean.recompute = RECOMPUTE_LAYER, lean.offload = GPU_OFFLOAD_INPUTS, lean.master = MASTER_SPLIT;
    lean.optimizer = OPTIMIZER_ADAMW8BIT, lean.grads = GRAD_BF16;
    expect_hint("every memory option but bf16 weights in use", &lean,
                "try --master bf16-sr (bf16 weights, rounded stochastically) or a shorter --seq");
    lean.master = MASTER_BF16_SR;
    expect_hint("every memory option in use", &lean, "try a shorter --seq");
    lean.master = MASTER_BF16;
    expect_hint("every memory option in use (bf16 weights, nearest rounding)", &lean, "try a shorter --seq");
    struct gpu_llama_options lora = opts(LLAMA_LORA, 4, 512);
    lora.recompute = RECOMPUTE_LAYER;
    expect_hint("LoRA with layer recomputation", &lora, "try --offload, --method qlora or a shorter --seq");
    lora.recompute_keep = 4;
    expect_hint("LoRA keeping 4 layers from recomputation", &lora,
                "try a smaller --recompute-keep, --offload, --method qlora or a shorter --seq");
    lora.recompute_keep = 0;
    struct gpu_llama_options longq = opts(LLAMA_LORA, 1, 32768);
    longq.base = GPU_BASE_NF4, longq.recompute = RECOMPUTE_LAYER, longq.offload = GPU_OFFLOAD_INPUTS;
    expect_hint("QLoRA at 32K with every other memory option", &longq, "try --mlp-chunk 4096 or a shorter --seq");
    longq.mlp_chunk = 4096;
    expect_hint("QLoRA at 32K in MLP chunks", &longq, "try a shorter --seq");

    /* MLP token chunks (--mlp-chunk, --recompute layer): the shared gate, up and MLP input (3·N·F·2
     * bytes) and the scratch dmlp (N·F·2) hold `chunk` rows instead of N = B·T; nothing else moves.
     * Llama-3.1-8B QLoRA r 32, batch 1, offloaded: 400,000 tokens plan inside an 80 GB card (Unsloth
     * publishes 342,733), and without chunks they do not. */
    {
        struct gpu_llama_options oc = opts(LLAMA_LORA, 1, 65536), oc2;
        oc.base = GPU_BASE_NF4, oc.R = 32, oc.recompute = RECOMPUTE_LAYER, oc.offload = GPU_OFFLOAD_INPUTS;
        oc2 = oc;
        oc2.mlp_chunk = 4096;
        const struct gpu_llama_plan a = plan_of(&c8, &oc), b = plan_of(&c8, &oc2);
        const double lost = 2.0 * (65536 - 4096) * c8.F;
        in_range("8B QLoRA 1x65536 --mlp-chunk 4096: activations lose 3·(N − 4096)·F·2 bytes",
                 (double)a.acts - (double)b.acts, 3 * lost - slack, 3 * lost + slack);
        in_range("8B QLoRA 1x65536 --mlp-chunk 4096: scratch loses (N − 4096)·F·2 bytes",
                 (double)a.scratch - (double)b.scratch, lost - slack, lost + slack);
        expect(a.weights == b.weights && a.params == b.params && a.host == b.host && b.mlp_rows == 4096 &&
                   a.mlp_rows == 65536,
               "--mlp-chunk changes the MLP buffers alone", (double)b.mlp_rows, 4096, 4096);
        oc.T = oc2.T = 400000;
        const double g400 = plan_of(&c8, &oc2).total / GIB;
        in_range("Llama-3.1-8B QLoRA r32 1x400000 --recompute layer --offload --mlp-chunk 4096 (GiB): inside 80 GB",
                 g400, 40.0, 78.0);
        {   /* without chunks the MLP's (N, F) tensors pass 2^31 elements: refused, naming the remedy */
            struct gpu_llama_plan pr;
            struct io_err ew = {{0}};
            const int rc = gpu_llama_plan_bytes(&pr, &c8, &oc, &ew);
            expect(rc == -1 && strstr(ew.msg, "--mlp-chunk") != NULL,
                   "8B 1x400000 without --mlp-chunk: refused (2^31 elements), naming --mlp-chunk", rc, -1, -1);
            oc.T = 140000; /* and where it is allowed, chunks plan less */
            oc2.T = 140000;
            const double four = 4.0 * (140000 - 4096) * c8.F * 2; /* gate, up, MLP input, dmlp */
            in_range("8B QLoRA 1x140000: --mlp-chunk 4096 saves 4·(N − 4096)·F·2 bytes",
                     (double)plan_of(&c8, &oc).total - (double)plan_of(&c8, &oc2).total, four - slack, four + slack);
        }
        struct train_options to;
        memset(&to, 0, sizeof to);
        to.memory_limit = 80;
        const int t80 = gpu_longest_fitting_seq(oc2, &c8, gpu_memory_budget_offline(&to), 0, 1 << 20);
        to.memory_limit = 24;
        const int t24 = gpu_longest_fitting_seq(oc2, &c8, gpu_memory_budget_offline(&to), 0, 1 << 20);
        in_range("8B QLoRA r32 --mlp-chunk 4096 --offload: longest sequence on an 80 GB card", t80, 400000, 1 << 20);
        in_range("the same on a 24 GB card (Unsloth publishes 78,475)", t24, 78475, 400000);
        to.memory_limit = 80;
        const int t80h = gpu_longest_fitting_seq(oc2, &c8, gpu_memory_budget_offline(&to), (size_t)(64.0 * GIB), 1 << 20);
        in_range("80 GB card, 64 GiB host: the host bounds it (half the device-bound length or less)", t80h, 100000,
                 t80 / 2 + 1);
        in_range("the same bounded by 64 GiB of pinned host memory: its offloaded inputs fit",
                 (double)t80h * c8.L * c8.C * 2 / GIB, 0.0, 64.0);
        {   /* the longest-sequence search says what would go further */
            char hint[160];
            struct gpu_llama_options plain = oc;
            plain.mlp_chunk = 0;
            const int tp = gpu_longest_fitting_seq(plain, &c8, gpu_memory_budget_offline(&to), 0, 1 << 20);
            gpu_longer_seq_hint(plain, &c8, gpu_memory_budget_offline(&to), 0, tp, hint, sizeof hint);
            checks++;
            if (strstr(hint, "--mlp-chunk 4096") == NULL || strstr(hint, "--recompute layer") != NULL) {
                failures++;
                printf("FAIL longer-sequence hint without chunks: '%s'\n", hint);
            }
            gpu_longer_seq_hint(oc2, &c8, gpu_memory_budget_offline(&to), 0, t80, hint, sizeof hint);
            checks++;
            if (hint[0] != '\0') {
                failures++;
                printf("FAIL longer-sequence hint with every option in use: '%s'\n", hint);
            }
        }
        {   /* this machine's bound for pinned host memory: known, and within its memory */
            const double hb = (double)gpu_host_budget(), total = (double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
            in_range("pinned host budget (GiB): positive, at most 90% of the machine's memory", hb / GIB, 1e-3,
                     0.9 * total / GIB);
        }
        /* a micro-batch past 2^31 elements is one that does not fit: the search stops below it */
        struct gpu_llama_options big = opts(LLAMA_LORA, 16384, 512);
        expect(!gpu_llama_size_verified(&cs, &big), "SmolLM2 16384x512: past 2^31 elements (8388608 x 576)", 0, 0, 0);
        const int bmax = gpu_largest_fitting_batch(big, &cs, gpu_memory_budget_offline(&to), 1 << 20);
        in_range("SmolLM2 x512 on 80 GB: the largest micro-batch that fits stays within 2^31 elements",
                 (double)bmax * 512 * cs.C, 1.0, 2147483647.0);
        printf("plans: 8B QLoRA r32 1x400000 --mlp-chunk 4096 --offload %.2f GiB; longest sequence 80 GB %d, "
               "24 GB %d\n", g400, t80, t24);
    }

    /* refusals */
    struct gpu_llama_plan p;
    struct model_config bad = c1;
    bad.D = 80, bad.H = 2048 / 80;
    struct gpu_llama_options od = opts(LLAMA_DORA, 2, 128);
    od.dropout = 0.1f;
    struct gpu_llama_options onf = opts(LLAMA_FULL, 2, 128);
    onf.base = GPU_BASE_NF4;
    struct gpu_llama_options none = opts(LLAMA_LORA, 2, 128);
    none.targets = 0;
    struct gpu_llama_options odd = opts(LLAMA_LORA, 3, 7); /* 21 tokens: not a multiple of 16 */
    odd.linears = GPU_LINEAR_FP8;
    struct gpu_llama_options f8full = opts(LLAMA_FULL, 2, 128);
    f8full.base = GPU_BASE_FP8;
    struct gpu_llama_options osl = opts(LLAMA_LORA, 2, 128);
    osl.shard_world = 2;
    struct gpu_llama_options osplit = opts(LLAMA_LORA, 2, 128);
    osplit.master = MASTER_SPLIT;
    struct gpu_llama_options oss = opts(LLAMA_FULL, 2, 128);
    oss.master = MASTER_SPLIT, oss.shard_world = 2;
    struct gpu_llama_options ow16 = opts(LLAMA_DORA, 2, 128), ow16s = opts(LLAMA_FULL, 2, 128);
    ow16.master = ow16s.master = MASTER_BF16;
    ow16s.shard_world = 2;
    struct gpu_llama_options ogr = opts(LLAMA_FULL, 2, 128);
    ogr.shard_grads = 1;
    struct gpu_llama_options ochn = opts(LLAMA_LORA, 2, 128), ochr = ochn, ochd = ochn, ochf = ochn, ocho = ochn,
                             ochm = ochn;
    ochn.mlp_chunk = 64; /* no --recompute layer */
    ochr.mlp_chunk = 100, ochr.recompute = RECOMPUTE_LAYER;
    ochd.mlp_chunk = 64, ochd.recompute = RECOMPUTE_LAYER, ochd.mode = LLAMA_DORA;
    ochf.mlp_chunk = 64, ochf.recompute = RECOMPUTE_LAYER, ochf.linears = GPU_LINEAR_FP8;
    ochf.fp8_recipe = FP8_RECIPE_CURRENT; /* delayed and block run in chunks; current does not */
    struct gpu_llama_options ochb = ochf;
    ochb.fp8_recipe = FP8_RECIPE_BLOCK; /* 64: not a multiple of 128 */
    struct gpu_llama_options ochd8 = ochf;
    ochd8.fp8_recipe = FP8_RECIPE_DELAYED;
    in_range("--mlp-chunk 64 with --precision fp8 (delayed): two chunks", plan_of(&c1, &ochd8).mlp_rows, 64, 64);
    {   /* 8B QLoRA at 140K tokens under FP8: the scratch operands hold a chunk's rows of the MLP */
        struct gpu_llama_options q8 = opts(LLAMA_LORA, 1, 140032), q8c;
        q8.base = GPU_BASE_NF4, q8.recompute = RECOMPUTE_LAYER, q8.linears = GPU_LINEAR_FP8, q8.mlp_chunk = 0;
        q8c = q8;
        q8c.mlp_chunk = 4096;
        const double plain = (double)plan_of(&c8, &q8).scratch, chunked = (double)plan_of(&c8, &q8c).scratch;
        /* x̂ of down and dŷ of gate/up (N·F bytes each), dmlp (N·F·2) and the bf16 layer buffers stay */
        const double f_wide = 140032.0 * c8.F * (1 + 1 + 2) - 4096.0 * c8.F * (1 + 1 + 2);
        in_range("8B QLoRA fp8 1x140032: --mlp-chunk 4096 scratch loses the F-wide operands' rows", plain - chunked,
                 f_wide - 140032.0 * c8.C * 2 - slack, f_wide + slack);
    }
    ocho.mlp_chunk = 64, ocho.recompute = RECOMPUTE_LAYER, ocho.dropout = 0.1f;
    ochm.mlp_chunk = 512, ochm.recompute = RECOMPUTE_LAYER; /* ≥ B·T: the whole micro-batch, accepted */
    in_range("--mlp-chunk 64 with adapter dropout: two chunks", plan_of(&c1, &ocho).mlp_rows, 64, 64);
    {   /* DoRA in chunks: z of down holds the chunk's rows (gate and up keep none: llama_dora_saved) */
        struct gpu_llama_options odw = ochd;
        odw.mlp_chunk = 0;
        const double lost = (256.0 - 64) * c1.C * 2 + 4.0 * (256 - 64) * c1.F * 2;
        in_range("DoRA 2x128 --recompute layer --mlp-chunk 64: activations + scratch lose z of down and its buffers",
                 (double)(plan_of(&c1, &odw).acts + plan_of(&c1, &odw).scratch) -
                     (double)(plan_of(&c1, &ochd).acts + plan_of(&c1, &ochd).scratch),
                 lost - slack, 2 * lost + slack);
    }
    {   /* DoRA's saved activations beyond LoRA's: z (N, C_out) bf16 of q, k and down — none of v, o,
         * gate and up, whose outputs serve (llama_dora_saved; o's output is kept in place of h) — plus a v
         * of a biased q/k/v (Qwen2's), and the fp32 row norms of every target; scratch: one shared h */
        struct gpu_llama_options olr = opts(LLAMA_LORA, 2, 128), odr = opts(LLAMA_DORA, 2, 128);
        const double N = 256, QD = (double)c1.H * c1.D, KD = (double)c1.KVH * c1.D;
        const double norms = c1.L * (QD + 2 * KD + c1.C + 2.0 * c1.F + c1.C) * 4;
        const double z = c1.L * N * (QD + KD + c1.C) * 2;
        in_range("DoRA 2x128 saves z of q, k, down and the row norms beyond LoRA",
                 (double)plan_of(&c1, &odr).acts - (double)plan_of(&c1, &olr).acts, z + norms - slack,
                 z + norms + slack);
        struct model_config cb = c1;
        cb.attention_bias = 1;
        in_range("DoRA 2x128 with q/k/v biases also saves z of v",
                 (double)plan_of(&cb, &odr).acts - (double)plan_of(&cb, &olr).acts,
                 z + c1.L * N * KD * 2 + norms - slack, z + c1.L * N * KD * 2 + norms + slack);
        struct gpu_llama_options odq = odr; /* o not a target: h saved as LoRA saves it, no shared h */
        odq.targets = (1u << LLAMA_Q) | (1u << LLAMA_V);
        struct gpu_llama_options olq = olr;
        olq.targets = odq.targets;
        in_range("DoRA 2x128 on q, v: z of q and the row norms beyond LoRA's activations",
                 (double)plan_of(&c1, &odq).acts - (double)plan_of(&c1, &olq).acts,
                 c1.L * (N * QD * 2 + (QD + KD) * 4) - slack, c1.L * (N * QD * 2 + (QD + KD) * 4) + slack);
        const double dy_s = N * (QD + 2 * KD) * 2; /* the q/k/v group's rescaled dy, side by side */
        /* and the larger group's weights with the magnitude folded in (gl_dora_weight_scaled: q, k,
         * v, gate and up), at the folded row strides (C + n·R rounded up to 64 elements) */
        const double ld1 = (c1.C + 3 * 16 + 63) / 64 * 64, ld2 = (c1.C + 2 * 16 + 63) / 64 * 64;
        const double qkv_w = (QD + 2 * KD) * ld1, gu_w = 2.0 * c1.F * ld2;
        const double w_s = (qkv_w > gu_w ? qkv_w : gu_w) * 2;
        /* LoRA's weight-gradient stream (gpu/llama_internal.h wg_side; not under op timing): its dB
         * product buffer in scratch — the largest folded group's (c_all, n·R) fp32 product or (N, n·R)
         * bf16 du, 256-byte rounded — and a second cuBLASLt workspace in fixed */
        struct gpu_llama_options olt = olr;
        olt.profile = GPU_PROFILE_OPS;
        const double g_all[3][2] = {{QD + 2 * KD, 3}, {c1.C, 1}, {2.0 * c1.F, 2}};
        double wg = 0;
        for (int i = 0; i < 3; i++) {
            const double nR = g_all[i][1] * 16, b = fmax(g_all[i][0] * nR * 4, N * nR * 2);
            wg = fmax(wg, ceil(b / 256) * 256);
        }
        in_range("LoRA 2x128: the weight-gradient stream's dB buffer in scratch",
                 (double)plan_of(&c1, &olr).scratch - (double)plan_of(&c1, &olt).scratch, wg, wg + 256);
        in_range("LoRA 2x128: the weight-gradient stream's cuBLASLt workspace in fixed",
                 (double)plan_of(&c1, &olr).fixed - (double)plan_of(&c1, &olt).fixed, 32 << 20, 32 << 20);
        struct gpu_llama_options odt = odr;
        odt.profile = GPU_PROFILE_OPS;
        in_range("DoRA 2x128: no weight-gradient stream (the same plan as with op timing)",
                 (double)plan_of(&c1, &odr).total - (double)plan_of(&c1, &odt).total, 0, 0);
        in_range("DoRA 2x128: scratch beyond LoRA's is the rescaled dy, the shared h and the scaled weights",
                 (double)plan_of(&c1, &odr).scratch - (double)plan_of(&c1, &olt).scratch,
                 dy_s + N * c1.C * 2 + w_s - slack, dy_s + N * c1.C * 2 + w_s + slack + 8.0 * (N / 32) * c1.F * 2);
    }
    in_range("--mlp-chunk ≥ B·T: one chunk", plan_of(&c1, &ochm).mlp_rows, 256, 256);
    struct gpu_llama_options okn = opts(LLAMA_LORA, 2, 128), okl = okn, okc = okn;
    okn.recompute_keep = 2;                                                   /* no recomputation */
    okl.recompute = RECOMPUTE_LAYER, okl.recompute_keep = c1.L;               /* every layer */
    okc.recompute = RECOMPUTE_LAYER, okc.recompute_keep = 2, okc.mlp_chunk = 64; /* with MLP chunks */
    struct gpu_llama_options og16 = opts(LLAMA_LORA, 2, 128), og16s = opts(LLAMA_FULL, 2, 128);
    og16.grads = og16s.grads = GRAD_BF16;
    og16s.shard_world = 2;
    const struct {
        const struct model_config *c;
        const struct gpu_llama_options *o;
        const char *want;
    } refused[] = {{&bad, &ol, "head_dim"},           {&c1, &od, "dropout"},   {&c1, &onf, "NF4"},
                   {&c1, &none, "targets"},           {&c1, &odd, "multiples of 16"},
                   {&c1, &f8full, "FP8-stored base"}, {&c1, &osl, "full fine-tuning"},
                   {&c1, &osplit, "split masters are for full"}, {&c1, &oss, "sharded optimizer"},
                   {&c1, &ogr, "sharded gradients"},  {&c1, &og16, "bf16 gradients are for full"},
                   {&c1, &og16s, "bf16 gradients and the sharded optimizer"},
                   {&c1, &ow16, "bf16 masters are for full"}, {&c1, &ow16s, "--master bf16 and the sharded optimizer"},
                   {&c1, &ochn, "needs --recompute layer"}, {&c1, &ochr, "multiple of 64"},
                   {&c1, &ochf, "--fp8-recipe current"}, {&c1, &ochb, "multiple of 128"},
                   {&c1, &okn, "need --recompute layer or attn"}, {&c1, &okl, "fewer than the model's"},
                   {&c1, &okc, "whole gate and up"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        memset(&e, 0, sizeof e);
        const int rc = gpu_llama_plan_bytes(&p, refused[i].c, refused[i].o, &e);
        checks++;
        if (rc != -1 || strstr(e.msg, refused[i].want) == NULL) {
            failures++;
            printf("FAIL refusal %zu: rc=%d message '%s' (expected one naming %s)\n", i, rc, e.msg, refused[i].want);
        }
    }
    /* The layout's stacking decisions (gpu_llama_layout_stacking): q/k/v and gate/up run as one
     * product each where their weights lie stacked, and full fine-tuning's dW too where the gradients
     * do — decided alike in every layout of one model, or a sharded run would take other products
     * than the unsharded one (llama_dp_parity compares them bitwise on the GPU). */
    {
        struct model_config cb = cs;
        cb.attention_bias = 1; /* Qwen2's q/k/v biases */
        struct stack_case {
            const char *what;
            const struct model_config *c;
            enum llama_mode mode;
            int tweak; /* 0 plain; 1 split masters; 2 bf16 weights, bf16 gradients, 8-bit; 3 ZeRO-1 rank 0;
                          4 ZeRO-1 rank 1; 5 ZeRO-2 rank 1; 6 FP8 products; 7 NF4 base */
            int want;
        } cases[] = {
            {"LoRA", &cs, LLAMA_LORA, 0, 1 | 2},
            {"QLoRA", &cs, LLAMA_LORA, 7, 1 | 2},
            {"DoRA (dy rescaled packed)", &cs, LLAMA_DORA, 0, 0},
            {"LoRA, q/k/v biases", &cb, LLAMA_LORA, 0, 2},
            {"full, fp32 masters", &cs, LLAMA_FULL, 0, 1 | 2 | 4 | 8},
            {"full, split masters", &cs, LLAMA_FULL, 1, 1 | 2 | 4 | 8},
            {"full, bf16 weights and gradients, 8-bit", &cs, LLAMA_FULL, 2, 1 | 2 | 4 | 8},
            {"full, ZeRO-1 rank 0 of 2", &cs, LLAMA_FULL, 3, 1 | 2 | 4 | 8},
            {"full, ZeRO-1 rank 1 of 2", &cs, LLAMA_FULL, 4, 1 | 2 | 4 | 8},
            {"full, ZeRO-2 rank 1 of 2", &cs, LLAMA_FULL, 5, 1 | 2 | 4 | 8},
            {"full, FP8 products", &cs, LLAMA_FULL, 6, 0},
            {"full, q/k/v biases", &cb, LLAMA_FULL, 0, 2 | 8},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            struct gpu_llama_options o = opts(cases[i].mode, 2, 128);
            switch (cases[i].tweak) {
            case 1: o.master = MASTER_SPLIT; break;
            case 2:
                o.master = MASTER_BF16, o.grads = GRAD_BF16, o.optimizer = OPTIMIZER_ADAMW8BIT;
                break;
            case 3: o.shard_world = 2, o.shard_rank = 0; break;
            case 4: o.shard_world = 2, o.shard_rank = 1; break;
            case 5: o.shard_world = 2, o.shard_rank = 1, o.shard_grads = 1; break;
            case 6: o.linears = GPU_LINEAR_FP8; break;
            case 7: o.base = GPU_BASE_NF4; break;
            default: break;
            }
            int bits = -1;
            memset(&e, 0, sizeof e);
            const int rc = gpu_llama_layout_stacking(cases[i].c, &o, &bits, &e);
            checks++;
            if (rc != 0 || bits != cases[i].want) {
                failures++;
                printf("FAIL stacking, %s: rc=%d bits %d (expected %d) %s\n", cases[i].what, rc, bits, cases[i].want,
                       e.msg);
            }
        }
    }
    printf("llama_plan_test: %d checks, %d failed\n", checks, failures);
    return failures != 0;
}
