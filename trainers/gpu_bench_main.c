/* gpu_bench_main.c — //gpu:bench: the training step of //gpu:train timed on random weights of a real
 * model's shapes, with the figures PERFORMANCE.md defines, next to ../shared/bench/hf_peer.py.
 *
 *   bazel run //gpu:bench -- --model llama-3.2-1b --method lora --micro-batch 16 --seq 512
 *   bazel run //gpu:bench -- --model path/to/config.json --method qlora --recompute layer
 *
 * It takes the trainers' flag table (train/options.h: the same names, meanings and defaults; flags
 * about data, outputs and schedules are refused by name) and the same translation to the model
 * (trainers/settings.h, gpu_model_options); --model also takes a config.json or a shape name
 * (io/config.h's config_named). Its own flags: --steps, --warmup-steps, --profile, --ungrouped,
 * and --batch for --micro-batch. What one run does:
 *   1. measures the device's bf16 GEMM rate (8192³, random operands): the MFU denominator;
 *   2. plans the model (gpu/llama.h) for the shape and refuses, before allocating, a plan that does
 *      not fit (exit status 1, with the largest micro-batch that would);
 *   3. random weights (HF's init scale), adapters initialized as the trainer does, random token ids
 *      (labels = the next token, the last position ignored, as the peer's labels = ids);
 *   4. validates: the first loss is finite and within 1 of ln V (random weights predict nearly
 *      uniformly); a failure voids the figure (exit status 1);
 *   5. --warmup-steps steps, then --steps steps timed with CUDA events: each step is exactly the
 *      trainer's (--grad-accum micro-batches: batch upload, forward, loss, backward; then AdamW or
 *      the 8-bit optimizer with --clip at the constant --lr, zeroed gradients, the step's one wait
 *      for its loss and norm);
 *   6. prints one JSON line: tokens_per_s, step_s, peak_mem_GiB (every byte refine allocates on the
 *      device: the plan), cuda_mem_GiB (device memory in use minus before: adds the CUDA context
 *      and cuBLASLt), model_tflops (PERFORMANCE.md's FLOP convention, train/metrics.h), mfu,
 *      gemm_tflops, loss, device, precision, fp8_recipe, base_dtype; with --profile a second JSON line with the
 *      device time of each op
 *      category per step (CUDA events around each op, over the timed steps run again).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/gemm.h"
#include "gpu/llama.h"
#include "io/config.h"
#include "io/error.h"
#include "io/model_source.h"
#include "train/metrics.h"
#include "train/options.h"
#include "trainers/cli.h"
#include "trainers/gpu_engine.h"
#include "trainers/settings.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* The model's config: a shape name, a config.json, or any model the trainers open. */
static int model_config(struct model_config *c, const char *model, struct io_err *e) {
    const size_t n = strlen(model);
    if (n > 5 && strcmp(model + n - 5, ".json") == 0) return config_from_hf_json(c, model, e);
    if (access(model, F_OK) != 0) return config_named(c, model, e);
    struct model_source src;
    if (model_source_open(&src, model, e)) return -1;
    *c = src.config;
    model_source_close(&src);
    return 0;
}

/* One optimizer step exactly as //gpu:train takes it: A micro-batches of the same tokens. */
static float train_step(struct gpu_llama *m, const int32_t *tok, const int32_t *lab, int64_t valid, int A,
                        const struct train_options *o, int64_t step) {
    const float grad_scale = (float)(1.0 / ((double)valid * A)); /* the loop's 1 / (valid labels of the step) */
    for (int a = 0; a < A; a++) {
        gpu_llama_set_batch(m, tok, lab);
        gpu_llama_train_micro(m, valid, (float)((double)grad_scale * (double)valid), (uint64_t)(step * A + a));
    }
    const struct optim_step h = {step + 1, {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay}, o->clip};
    double norm = 0.0, nll = 0.0;
    (void)gpu_llama_optimizer_step(m, &h, &nll, &norm);
    return (float)(nll / ((double)valid * A));
}

int main(int argc, char **argv) {
    struct io_err e = {{0}};
    struct train_options o;
    if (program_options(&o, argc, argv, PROGRAM_BENCH, "bazel run //gpu:bench --")) return 0;
    if (gpu_engine_check(&o, &e)) io_exit(&e);
    struct model_config c;
    if (model_config(&c, o.model, &e)) io_exit(&e);
    const int max_seq = o.seq == OPT_SEQ_AUTO;
    if (max_seq) o.seq = 2; /* searched below, once the budget is known */
    struct model_settings set;
    model_settings_from_options(&set, &o, COMPUTE_BF16);
    struct gpu_llama_options g;
    gpu_model_options(&g, &set);
    const char *method = train_method_names[o.method];
    char device[128];
    size_t free0 = 0, total = 0, free1 = 0, budget = 0;
    if (gpu_device_query(device, sizeof device, &free0, &total, &e)) io_exit(&e);
    const double peak = gpu_gemm_measure_bf16_rate(8192);
    if (gpu_memory_budget(&o, device, sizeof device, &budget, &e)) io_exit(&e);
    if (gpu_device_query(device, sizeof device, &free0, &total, &e)) io_exit(&e);
    if (max_seq) {
        g.T = o.seq = gpu_longest_fitting_seq(g, &c, budget, 1 << 20);
        if (g.T < 2) {
            io_fail(&e, "--max-seq: not even 2 tokens of micro-batch %d fit in %.2f GiB on %s", g.B, budget / GIB, device);
            io_exit(&e);
        }
        fprintf(stderr, "max-seq: %d tokens fit in %.2f GiB\n", g.T, budget / GIB);
    }
    if (config_check_seq_len(&c, g.T, &e)) io_exit(&e);
    struct gpu_llama_plan plan;
    if (gpu_llama_plan_bytes(&plan, &c, &g, &e)) io_exit(&e);
    char line[512];
    gpu_llama_plan_describe(line, sizeof line, &plan, g.B, g.T);
    fprintf(stderr, "%s\n", line);
    if (plan.total > budget) {
        const int b = gpu_largest_fitting_batch(g, &c, budget, 1 << 20);
        io_fail(&e, "%s %s %d×%d does not fit: %s, %.2f GiB%s on %s; the largest micro-batch that fits is %d", o.model,
                method, g.B, g.T, line, budget / GIB, o.memory_limit > 0 ? " (--memory-limit)" : " free", device, b);
        io_exit(&e);
    }
    struct gpu_llama *m = build_gpu_llama(&c, &g, &e);
    if (!m) io_exit(&e);
    gpu_llama_random_weights(m, set.seed);
    gpu_llama_init_adapters(m, set.seed);
    if (gpu_device_query(NULL, 0, &free1, NULL, &e)) io_exit(&e);
    if (o.memory_limit > 0 && (double)(total - free1) > (double)o.memory_limit * GIB) {
        io_fail(&e, "--memory-limit %g GiB: the device holds %.2f GiB with the model built", (double)o.memory_limit,
                (double)(total - free1) / GIB);
        io_exit(&e);
    }

    const int N = g.B * g.T, A = o.grad_accum;
    int32_t *tok = malloc((size_t)N * sizeof *tok), *lab = malloc((size_t)N * sizeof *lab);
    if (!tok || !lab) {
        io_fail(&e, "out of host memory");
        io_exit(&e);
    }
    uint64_t s = set.seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        tok[i] = (int32_t)(s % (uint64_t)c.V);
    }
    int64_t valid = 0;
    for (int b = 0; b < g.B; b++)
        for (int t = 0; t < g.T; t++) {
            const int i = b * g.T + t;
            lab[i] = t + 1 < g.T ? tok[i + 1] : -100;
            valid += lab[i] != -100;
        }

    int64_t step = 0;
    const float loss0 = train_step(m, tok, lab, valid, A, &o, step++);
    const double lnv = log((double)c.V);
    if (!isfinite(loss0) || fabs(loss0 - lnv) > 1.0) {
        io_fail(&e, "validation failed: the first loss is %g, expected within 1 of ln V = %.3f; no figure", (double)loss0,
                lnv);
        io_exit(&e);
    }
    for (int i = 0; i < o.bench_warmup; i++) train_step(m, tok, lab, valid, A, &o, step++);
    gpu_llama_timer_begin(m);
    float loss = 0.0f;
    for (int i = 0; i < o.bench_steps; i++) loss = train_step(m, tok, lab, valid, A, &o, step++);
    const double ms = gpu_llama_timer_end(m);
    if (!isfinite(loss)) {
        io_fail(&e, "the loss became %g during the timed steps; no figure", (double)loss);
        io_exit(&e);
    }
    const double step_s = ms * 1e-3 / o.bench_steps, tps = (double)N * A / step_s;
    const double fpt = train_flops_per_token(&c, g.T, g.mode == LLAMA_FULL);
    printf("{\"system\":\"refine\",\"model\":\"%s\",\"method\":\"%s\",\"rank\":%d,\"batch\":%d,\"seq\":%d,"
           "\"grad_accum\":%d,\"recompute\":\"%s\",\"optimizer\":\"%s\",\"precision\":\"%s\",\"fp8_recipe\":\"%s\","
           "\"base_dtype\":\"%s\",\"ungrouped\":%d,\"step_s\":%.4f,"
           "\"tokens_per_s\":%.0f,\"model_tflops\":%.1f,\"mfu\":%.3f,\"peak_mem_GiB\":%.2f,\"cuda_mem_GiB\":%.2f,"
           "\"gemm_tflops\":%.1f,\"loss\":%.4f,\"first_loss\":%.4f,\"plan_GiB\":{\"weights\":%.3f,\"params\":%.3f,"
           "\"grads\":%.3f,\"optim\":%.3f,\"acts\":%.3f,\"scratch\":%.3f,\"fixed\":%.3f},\"memory_limit_GiB\":%g,\"offload\":%d,\"host_GiB\":%.3f,"
           "\"device\":\"%s\"}\n",
           o.model, method, o.rank, g.B, g.T, A, recompute_names[o.recompute], optimizer_names[o.optimizer],
           compute_precision_names[set.precision], set.precision == COMPUTE_FP8 ? fp8_recipe_names[set.fp8_recipe] : "none",
           set.base == BASE_FP8 ? "fp8" : set.base == BASE_NF4 ? "nf4" : "bf16", o.ungrouped, step_s, tps,
           fpt * tps / 1e12, peak > 0 ? fpt * tps / peak : 0.0, plan.total / GIB,
           (double)(free0 - free1) / GIB, peak / 1e12, (double)loss, (double)loss0, plan.weights / GIB,
           plan.params / GIB, plan.grads / GIB, plan.optim / GIB, plan.acts / GIB, plan.scratch / GIB, plan.fixed / GIB,
           (double)o.memory_limit, o.offload, plan.host / GIB, device);
    fflush(stdout);
    if (o.profile) {
        gpu_llama_profile_reset(m);
        for (int i = 0; i < o.bench_steps; i++) train_step(m, tok, lab, valid, A, &o, step++);
        gpu_llama_profile_print(m, stdout, o.bench_steps);
    }
    free(tok);
    free(lab);
    free_gpu_llama(m);
    return 0;
}
