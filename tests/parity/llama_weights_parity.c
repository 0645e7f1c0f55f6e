/* llama_weights_parity.c — gpu/llama's weights against ref/, bit for bit (tier (a): data movement
 * and dequantization are exact).
 *
 * For three storages, every base weight the GPU model computes with is read back
 * (gpu_llama_base_weight_read: the bf16 values, NF4 dequantized on the device) and compared with
 * what the CPU trainer's --precision bf16 computes with:
 *   - bf16 base (LoRA) of an HF checkpoint: bf16_round of the checkpoint's values;
 *   - NF4 base (QLoRA) of a bitsandbytes 4-bit checkpoint: its own codes and double-quantized
 *     absmax, dequantized (ref/nf4's nf4_dequantize_bnb) and rounded to bf16;
 *   - NF4 base (QLoRA) of a plain checkpoint, quantized at load as bitsandbytes does: ref/nf4's
 *     quantization (NF4_CUDA, blocksize 64, double quantization) dequantized and rounded to bf16.
 * And under FP8 (every frozen linear W_eff = dequant(quant(W)) under the recipe's frozen rule, what
 * the CPU trainer's --precision fp8 and its --base-dtype fp8 compute with; power-of-two scales
 * make W_eff a bf16 value, so the comparison stays exact): a bf16 base with FP8 products
 * (per-tensor and block recipes), an FP8-stored base under bf16 products (dequantized on the
 * device) and under FP8 products (read back through the host), an NF4 base with FP8 products.
 * Then one forward pass on random tokens must give a finite loss near ln V (an untrained model),
 * and the trainable tensors of a LoRA model must read back what was written.
 *
 *   bazel test --config=gpu //tests/parity:llama_weights_parity
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/llama.h"
#include "io/model_files.h"
#include "io/model_source.h"
#include "ref/bf16.h"
#include "ref/fp8_linear.h"
#include "ref/nf4.h"
#include "tests/common/harness.h"

/* What --precision bf16 computes with for linear (kind, layer): into out (n floats). */
static int expected_linear(float *out, const struct model_source *src, enum model_weight kind, int layer, int co,
                           int ci, int quantize_here, int fp8, enum fp8_recipe recipe, struct io_err *e) {
    const int64_t n = (int64_t)co * ci;
    const struct bnb4_weight *bnb = model_source_bnb(src, kind, layer);
    if (bnb) {
        if (nf4_dequantize_bnb(out, bnb, n, ACT_F32, e)) return -1;
    } else {
        if (model_source_weight_f32(src, kind, layer, out, e)) return -1;
        if (quantize_here) {
            const int64_t nb = nf4_n_blocks(n, NF4_BLOCKSIZE), nb2 = (nb + NF4_NESTED_BLOCKSIZE - 1) / NF4_NESTED_BLOCKSIZE;
            uint8_t *packed = malloc((size_t)nf4_packed_bytes(n)), *absmax_q = malloc((size_t)nb);
            float *absmax2 = malloc((size_t)nb2 * sizeof(float)), code2[256], offset;
            nf4_quantize_nested(packed, absmax_q, absmax2, &offset, code2, out, n);
            nf4_dequantize_nested(out, packed, absmax_q, absmax2, offset, code2, n, ACT_F32);
            free(packed), free(absmax_q), free(absmax2);
        }
    }
    bf16_round_array(out, out, n);
    if (fp8) { /* the frozen rule's round trip (cpu_engine.c, ref_llama_fp8_freeze_weights) */
        const enum fp8_rule rule = fp8_rule_for(recipe, FP8_ROLE_W, FP8_WEIGHT_FROZEN);
        struct fp8_operand q = {malloc((size_t)n), malloc(sizeof(float) * (size_t)fp8_operand_scale_count(fp8_rule_scaling(rule), co, ci)),
                                FP8_SCALING_TENSOR, FP8_E4M3, 0, 0};
        ref_fp8_quantize(&q, NULL, NULL, NULL, out, co, ci, FP8_E4M3, rule, 0.0f);
        ref_fp8_dequantize_operand(out, &q);
        free(q.q), free(q.s_inv);
    }
    return 0;
}

static void check_model(const char *dir, enum gpu_base_storage base, enum gpu_linear_precision linears,
                        enum fp8_recipe recipe, const char *what) {
    struct io_err e = {{0}};
    struct model_source src;
    if (model_source_open(&src, dir, &e)) {
        EXPECT(0, "%s: %s", what, e.msg);
        return;
    }
    const struct model_config *c = &src.config;
    struct gpu_llama_options o;
    memset(&o, 0, sizeof o);
    o.mode = LLAMA_LORA;
    o.base = base;
    o.targets = LLAMA_ALL_TARGETS;
    o.R = 4;
    o.lora_scale = 2.0f;
    o.nested_nf4 = model_source_is_bnb(&src, MW_Q, 0) ? c->quant.double_quant : 1;
    o.B = 2;
    o.T = 16;
    o.linears = linears;
    o.fp8_recipe = recipe;
    struct gpu_llama *m = build_gpu_llama(c, &o, &e);
    EXPECT(m != NULL, "%s: build: %s", what, e.msg);
    if (!m) return;
    EXPECT(gpu_llama_load(m, &src, &e) == 0, "%s: load: %s", what, e.msg);
    gpu_llama_init_adapters(m, 7);
    int64_t most = (int64_t)c->V * c->C;
    if ((int64_t)c->F * c->C > most) most = (int64_t)c->F * c->C;
    float *want = malloc((size_t)most * sizeof(float)), *got = malloc((size_t)most * sizeof(float));
    char name[128];
    int64_t checked = 0, differ = 0;
    for (int l = 0; l < c->L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            int co, ci;
            llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
            const int64_t n = (int64_t)co * ci;
            model_weight_name(name, sizeof name, llama_linears[t].weight, l);
            if (expected_linear(want, &src, llama_linears[t].weight, l, co, ci, base == GPU_BASE_NF4,
                                linears == GPU_LINEAR_FP8 || base == GPU_BASE_FP8, recipe, &e) ||
                gpu_llama_base_weight_read(m, name, got, &e)) {
                EXPECT(0, "%s: %s: %s", what, name, e.msg);
                continue;
            }
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < n; i++)
                if (memcmp(&want[i], &got[i], sizeof(float)) != 0 && !(isnan(want[i]) && isnan(got[i])))
                    bad++, first = first < 0 ? i : first;
            checked += n, differ += bad;
            EXPECT(bad == 0, "%s: %s: %lld of %lld values differ (first %lld: %a vs %a)", what, name, (long long)bad,
                   (long long)n, (long long)first, first >= 0 ? (double)got[first] : 0.0,
                   first >= 0 ? (double)want[first] : 0.0);
        }
    /* the embedding */
    const int64_t ne = (int64_t)c->V * c->C;
    if (model_source_weight_f32(&src, MW_EMBED, -1, want, &e) == 0 &&
        gpu_llama_base_weight_read(m, "model.embed_tokens.weight", got, &e) == 0) {
        bf16_round_array(want, want, ne);
        EXPECT(memcmp(want, got, (size_t)ne * sizeof(float)) == 0, "%s: embedding differs", what);
    }
    /* one forward pass: an untrained model predicts nearly uniformly */
    const int N = o.B * o.T;
    int32_t *tok = malloc((size_t)N * sizeof *tok), *lab = malloc((size_t)N * sizeof *lab);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919u + 13u) % (unsigned)c->V), lab[i] = i % o.T == o.T - 1 ? -100 : 0;
    for (int i = 0; i < N; i++) if (lab[i] != -100) lab[i] = tok[i + 1];
    gpu_llama_set_batch(m, tok, lab);
    gpu_llama_eval(m, N - o.B);
    const float loss = gpu_llama_loss(m);
    EXPECT(isfinite(loss) && fabs(loss - log((double)c->V)) < 2.0, "%s: forward loss %g, ln V = %g", what, (double)loss,
           log((double)c->V));
    /* trainable tensors read back what was written (and stay finite after a step) */
    const struct gpu_llama_tensor *ti = gpu_llama_tensor_info(m, 0);
    float *w = malloc((size_t)ti->numel * sizeof(float)), *r = malloc((size_t)ti->numel * sizeof(float));
    for (int64_t i = 0; i < ti->numel; i++) w[i] = (float)((i % 17) - 8) * 0.01f;
    gpu_llama_tensor_write(m, 0, w);
    gpu_llama_tensor_read(m, 0, r);
    EXPECT(memcmp(w, r, (size_t)ti->numel * sizeof(float)) == 0, "%s: %s does not read back what was written", what,
           ti->name);
    printf("%s: %lld base weights compared, %lld differ; loss %.4f\n", what, (long long)checked, (long long)differ,
           (double)loss);
    free(w), free(r), free(tok), free(lab), free(want), free(got);
    free_gpu_llama(m);
    model_source_close(&src);
}

int main(void) {
    const enum gpu_linear_precision B16 = GPU_LINEAR_BF16, F8 = GPU_LINEAR_FP8;
    const enum fp8_recipe D = FP8_RECIPE_DELAYED, K = FP8_RECIPE_BLOCK;
    check_model("tests/golden/data/e2e/llama", GPU_BASE_BF16, B16, D, "fp32 checkpoint, bf16 base");
    check_model("tests/unit/testdata/models/llama_bnb_nf4", GPU_BASE_NF4, B16, D, "bitsandbytes 4-bit checkpoint, NF4 base");
    check_model("tests/golden/data/e2e/llama", GPU_BASE_NF4, B16, D, "fp32 checkpoint quantized at load");
    check_model("tests/unit/testdata/models/qwen2_f16", GPU_BASE_NF4, B16, D, "Qwen2 f16 checkpoint quantized at load");
    check_model("tests/golden/data/e2e/llama", GPU_BASE_BF16, F8, D, "fp8 products (per tensor), bf16 base: W_eff");
    check_model("tests/golden/data/e2e/llama", GPU_BASE_BF16, F8, K, "fp8 products (block), bf16 base: W_eff");
    check_model("tests/golden/data/e2e/llama", GPU_BASE_FP8, B16, D, "bf16 products, FP8-stored base (per tensor)");
    check_model("tests/unit/testdata/models/qwen2_f16", GPU_BASE_FP8, B16, K, "bf16 products, FP8-stored base (block)");
    check_model("tests/golden/data/e2e/llama", GPU_BASE_FP8, F8, FP8_RECIPE_CURRENT, "fp8 products, FP8-stored base");
    check_model("tests/unit/testdata/models/qwen2_f16", GPU_BASE_NF4, F8, D, "fp8 products, NF4 base quantized at load");
    return test_finish("llama_weights_parity");
}
