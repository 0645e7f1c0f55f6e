/* gpu_bench_main.c — //gpu:bench: the training step of //gpu:train timed on random weights of a real
 * model's shapes, with the figures PERFORMANCE.md defines, next to ../shared/bench/hf_peer.py.
 *
 *   bazel run //gpu:bench -- --model llama-3.2-1b --method lora --micro-batch 16 --seq 512
 *   bazel run //gpu:bench -- --model path/to/config.json --method qlora --recompute layer
 *
 * It takes the trainers' flag table (train/options.h: the same names, meanings and defaults; flags
 * about data, outputs and schedules are refused by name) and the same translation to the model
 * (trainers/settings.h, gpu_model_options); --model also takes a config.json or a shape name
 * (io/config.h's config_named). Its own flags: --steps, --warmup-steps, --profile, --ungrouped, --unfolded,
 * and --batch for --micro-batch. What one run does:
 *   1. measures the device's bf16 GEMM rate (8192³, random operands): the MFU denominator;
 *   2. plans the model (gpu/llama.h) for the shape and refuses, before allocating, a plan that does
 *      not fit (exit status 1, with the largest micro-batch that would);
 *   3. random weights (HF's init scale), adapters initialized as the trainer does, random token ids
 *      (labels = the next token, the last position ignored, as the peer's labels = ids);
 *   4. validates: the first loss is finite and within 1 of ln V (random weights predict nearly
 *      uniformly); a failure voids the figure (exit status 1);
 *   5. --warmup-steps steps, then --steps steps timed with CUDA events (with --warmup-steps 0 on one
 *      GPU the validated first step is the first of them: a step of minutes is timed once): each step is exactly the
 *      trainer's (--grad-accum micro-batches: batch upload, forward, loss, backward; then AdamW or
 *      the 8-bit optimizer with --clip at the constant --lr, zeroed gradients, the step's one wait
 *      for its loss and norm);
 *   6. prints one JSON line: tokens_per_s, step_s, peak_mem_GiB (every byte refine allocates on the
 *      device: the plan), cuda_mem_GiB (device memory in use minus before: adds the CUDA context
 *      and cuBLASLt), model_tflops (PERFORMANCE.md's FLOP convention, train/metrics.h), mfu,
 *      gemm_tflops, loss (the last step's, to 9 digits: a float's every bit, so that two builds' runs
 *      compare bitwise), device, precision, fp8_recipe, base_dtype, master, grad_dtype, recompute_mlp (1 when the MLP input is recomputed: --recompute-mlp, or the default where
 *      that is free), mlp_chunk, recompute_keep, keep_norms; with
 *      --profile a second JSON line with the
 *      device time of each op
 *      category per step (CUDA events around each op, over the timed steps run again).
 *
 * Under a launcher (`mpirun -np N bazel-bin/trainers/gpu_bench ...`, trainers/comm_open.h) every
 * rank drives one GPU (the same random weights, its own tokens) and the step is //gpu:train's data
 * parallel step (trainers/gpu_dp.h: gradient buckets all-reduced over NCCL while backward runs).
 * Each rank first times --steps steps alone (no communication: one GPU at the same micro-batch),
 * then --steps steps of the job; rank 0 prints the JSON line with, besides the fields above (for
 * the job's steps; tokens_per_s is the job's), world, tokens_per_s_per_gpu, one_gpu_tokens_per_s,
 * scaling_efficiency (the job's per-GPU rate over the one-GPU rate), exposed_comm_ms (per step,
 * the reductions left after backward: CUDA events), sharded_optimizer, sharded_gradients and comm
 * (NCCL's version, over MPI). Full fine-tuning shards the optimizer (as //gpu:train; --shard-optimizer
 * off does not), and the gradients where that saves memory (--shard-gradients): a sharded model cannot step alone, so its one-GPU figures are null and the one-GPU rate is
 * a run of `mpirun -np 1` (tools/multi_gpu.sh runs it first).
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
#include "trainers/comm_nccl.h"
#include "trainers/comm_open.h"
#include "trainers/gpu_dp.h"
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

/* One optimizer step exactly as //gpu:train takes it: A micro-batches of the same tokens; with dp,
 * the data parallel step of a job of `world` ranks (each rank's own tokens, as many valid labels). */
static float train_step(struct gpu_llama *m, struct gpu_dp *dp, int world, const int32_t *tok, const int32_t *lab,
                        int64_t valid, int A, const struct train_options *o, int64_t step) {
    const double step_valid = (double)valid * A * (dp ? world : 1); /* the loop's valid labels of the step */
    const float grad_scale = (float)(1.0 / step_valid);
    for (int a = 0; a < A; a++) {
        if (dp) gpu_dp_micro(dp, a == A - 1);
        gpu_llama_set_batch(m, tok, lab);
        gpu_llama_train_micro(m, valid, (float)((double)grad_scale * (double)valid), (uint64_t)(step * A + a));
    }
    struct io_err e = {{0}};
    if (dp && gpu_dp_reduce(dp, (int)step + 1, &e) != 0) io_exit(&e);
    const struct optim_step h = {step + 1, {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay}, o->clip};
    double norm = 0.0, nll = 0.0;
    (void)gpu_llama_optimizer_step(m, &h, &nll, &norm);
    if (dp && gpu_dp_after_step(dp, &e) != 0) io_exit(&e);
    return (float)(nll / step_valid);
}

/* Milliseconds of --steps timed steps from step *step on (with dp: the job's), and the exposed
 * communication per step. */
static double timed_steps(struct gpu_llama *m, struct gpu_dp *dp, int world, const int32_t *tok, const int32_t *lab,
                          int64_t valid, int A, const struct train_options *o, int64_t *step, float *loss,
                          double *exposed_ms) {
    *exposed_ms = 0.0;
    gpu_llama_timer_begin(m);
    for (int i = 0; i < o->bench_steps; i++) {
        *loss = train_step(m, dp, world, tok, lab, valid, A, o, (*step)++);
        if (dp) *exposed_ms += gpu_dp_exposed_ms(dp) / o->bench_steps;
    }
    return gpu_llama_timer_end(m);
}

int main(int argc, char **argv) {
    struct io_err e = {{0}};
    struct train_options o;
    if (program_options(&o, argc, argv, PROGRAM_BENCH, "bazel run //gpu:bench --")) return 0;
    struct train_comm comm;
    int job = 0;
    if (comm_open(&comm, &job, &e) || settings_check_ranks(&o, job, &e) || (job && comm_nccl_join(&comm, &e)))
        io_exit(&e);
    const int root = comm_is_root(&comm);
    /* a plan for a card of --memory-limit GiB needs no device; everything else does */
    const int offline = o.plan_only && o.memory_limit > 0 && gpu_device_query(NULL, 0, NULL, NULL, &e) != 0;
    memset(&e, 0, sizeof e);
    if (!offline && gpu_engine_check(&o, &e)) io_exit(&e);
    struct model_config c;
    if (model_config(&c, o.model, &e)) io_exit(&e);
    const int max_seq = o.seq == OPT_SEQ_AUTO;
    if (max_seq) o.seq = 2; /* searched below, once the budget is known */
    struct model_settings set;
    model_settings_from_options(&set, &o, COMPUTE_BF16);
    struct gpu_llama_options g;
    gpu_model_options(&g, &set);
    const int shard = job && gpu_shards_optimizer(&o, &g, comm.world);
    if (shard) g.shard_world = comm.world, g.shard_rank = comm.rank; /* ZeRO-1, as //gpu:train */
    const char *method = train_method_names[o.method];
    char device[128];
    size_t free0 = 0, total = 0, free1 = 0, budget = 0;
    double peak = 0; /* the bf16 GEMM rate, measured before the budget (as the MFU's denominator) */
    if (offline) { /* no device here: the plan of a card of --memory-limit GiB */
        snprintf(device, sizeof device, "none (a %g GiB card)", (double)o.memory_limit);
        budget = gpu_memory_budget_offline(&o);
    } else {
        if (gpu_device_query(device, sizeof device, NULL, &total, &e)) io_exit(&e);
        peak = gpu_gemm_measure_bf16_rate(8192);
        if (gpu_memory_budget(&o, device, sizeof device, &budget, &free0, &e)) io_exit(&e);
    }
    if (gpu_shards_gradients(&o, &g, &c, budget, &e)) io_exit(&e); /* and ZeRO-2, as //gpu:train */
    if (max_seq) {
        /* offloaded on this machine: its host memory bounds the pinned layer inputs too */
        const size_t host = !offline && g.offload == GPU_OFFLOAD_INPUTS ? gpu_host_budget() : 0;
        g.T = o.seq = gpu_longest_fitting_seq(g, &c, budget, host, 1 << 20);
        if (g.T < 2) {
            io_fail(&e, "--max-seq: not even 2 tokens of micro-batch %d fit in %.2f GiB on %s", g.B, budget / GIB, device);
            io_exit(&e);
        }
        if (root) {
            fprintf(stderr, "max-seq: %d tokens fit in %.2f GiB", g.T, budget / GIB);
            if (host > 0) fprintf(stderr, " and %.2f GiB of pinned host memory", host / GIB);
            fprintf(stderr, "\n");
            char longer[160];
            if (gpu_longer_seq_hint(g, &c, budget, host, g.T, longer, sizeof longer)[0] != '\0')
                fprintf(stderr, "max-seq: longer %s\n", longer);
        }
    }
    if (config_check_seq_len(&c, g.T, &e)) io_exit(&e);
    {
        /* --recompute-keep auto, as //gpu:train (each rank its own: kept layers change no number) */
        const int r = gpu_resolve_keep(&o, &g, &c, budget, &e);
        if (r < 0) io_exit(&e);
        if (r > 0 && root)
            fprintf(stderr, "recompute-keep auto: %d layers kept from recomputation (the most whose plan fits in %.2f GiB)\n",
                    g.recompute_keep, budget / GIB);
    }
    struct gpu_llama_plan plan;
    if (gpu_llama_plan_bytes(&plan, &c, &g, &e)) io_exit(&e);
    char line[512];
    gpu_llama_plan_describe(line, sizeof line, &plan, g.B, g.T);
    if (root) fprintf(stderr, "%s%s\n", line, job ? " (per GPU)" : "");
    char fields[400];
    gpu_llama_plan_json_fields(fields, sizeof fields, &plan, 3);
    if (o.plan_only) {
        if (root)
            printf("{\"system\":\"refine-plan\",\"model\":\"%s\",\"method\":\"%s\",\"batch\":%d,\"seq\":%d,"
                   "\"fits\":%d,\"budget_GiB\":%.3f,\"plan_GiB\":{\"total\":%.3f,%s,\"host\":%.3f},"
                   "\"device\":\"%s\"}\n",
                   o.model, method, g.B, g.T, plan.total <= budget, budget / GIB, plan.total / GIB, fields,
                   plan.host / GIB, device);
        comm.destroy(comm.self);
        return plan.total <= budget ? 0 : 1;
    }
    if (plan.total > budget) {
        const int b = gpu_largest_fitting_batch(g, &c, budget, 1 << 20);
        char hint[200];
        io_fail(&e, "%s %s %d×%d does not fit: %s, %.2f GiB%s on %s; the largest micro-batch that fits is %d%s%s",
                o.model, method, g.B, g.T, line, budget / GIB, o.memory_limit > 0 ? " (--memory-limit)" : " free", device,
                b, b == 0 ? "; " : "", b == 0 ? gpu_memory_hint(&g, hint, sizeof hint) : "");
        io_exit(&e);
    }
    struct gpu_llama *m = build_gpu_llama(&c, &g, &e);
    if (!m) io_exit(&e);
    gpu_llama_random_weights(m, set.seed);
    gpu_llama_init_adapters(m, set.seed);
    if (gpu_memory_limit_check(&o, total, &free1, &e)) io_exit(&e);

    const int N = g.B * g.T, A = o.grad_accum;
    int32_t *tok = malloc((size_t)N * sizeof *tok), *lab = malloc((size_t)N * sizeof *lab);
    if (!tok || !lab) {
        io_fail(&e, "out of host memory");
        io_exit(&e);
    }
    uint64_t s = (set.seed + (uint64_t)comm.rank) * 0x9E3779B97F4A7C15ull + 1; /* each rank its own tokens */
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

    struct gpu_dp *dp = NULL;
    if (job && (dp = gpu_dp_create(m, &comm, gpu_dp_shard_of(&g), &e)) == NULL) io_exit(&e);
    const int W = comm.world;
    int64_t step = 0;
    /* with --warmup-steps 0 (one GPU) the validated first step is the first timed one too: a step of
     * minutes (hundreds of thousands of tokens) is then timed once, not run twice */
    const int time_first = o.bench_warmup == 0 && !job;
    if (time_first) gpu_llama_timer_begin(m);
    const float loss0 = train_step(m, dp, W, tok, lab, valid, A, &o, step++);
    const double ms_first = time_first ? gpu_llama_timer_end(m) : 0.0;
    const double lnv = log((double)c.V);
    if (!isfinite(loss0) || fabs(loss0 - lnv) > 1.0) {
        io_fail(&e, "validation failed: the first loss is %g, expected within 1 of ln V = %.3f; no figure", (double)loss0,
                lnv);
        io_exit(&e);
    }
    float loss = 0.0f;
    double exposed = 0.0, one_ms = 0.0;
    if (job && !shard) { /* one GPU at the same micro-batch, no communication: the scaling's baseline (the
                          * ranks' weights then differ: this times, it does not train) */
        for (int i = 0; i < o.bench_warmup; i++) train_step(m, NULL, 1, tok, lab, valid, A, &o, step++);
        one_ms = timed_steps(m, NULL, 1, tok, lab, valid, A, &o, &step, &loss, &exposed);
    }
    for (int i = 0; i < o.bench_warmup; i++) train_step(m, dp, W, tok, lab, valid, A, &o, step++);
    double ms;
    if (time_first) { /* the first step and --steps − 1 more */
        struct train_options rest = o;
        rest.bench_steps = o.bench_steps - 1;
        loss = loss0;
        ms = ms_first + (rest.bench_steps > 0 ? timed_steps(m, dp, W, tok, lab, valid, A, &rest, &step, &loss, &exposed)
                                              : 0.0);
    } else {
        ms = timed_steps(m, dp, W, tok, lab, valid, A, &o, &step, &loss, &exposed);
    }
    if (!isfinite(loss)) {
        io_fail(&e, "the loss became %g during the timed steps; no figure", (double)loss);
        io_exit(&e);
    }
    const double step_s = ms * 1e-3 / o.bench_steps, tps = (double)N * A * W / step_s;
    const double fpt = train_flops_per_token(&c, g.T, g.mode == LLAMA_FULL);
    char extra[512] = "";
    if (job && !shard) {
        const double one_tps = (double)N * A / (one_ms * 1e-3 / o.bench_steps);
        snprintf(extra, sizeof extra,
                 ",\"world\":%d,\"tokens_per_s_per_gpu\":%.0f,\"one_gpu_tokens_per_s\":%.0f,\"scaling_efficiency\":%.3f,"
                 "\"exposed_comm_ms\":%.2f,\"sharded_optimizer\":0,\"comm\":\"%.200s\"",
                 W, tps / W, one_tps, tps / W / one_tps, exposed, comm.name);
    } else if (job) { /* a sharded model cannot step alone: the one-GPU rate is a run of one rank's */
        snprintf(extra, sizeof extra,
                 ",\"world\":%d,\"tokens_per_s_per_gpu\":%.0f,\"one_gpu_tokens_per_s\":null,\"scaling_efficiency\":null,"
                 "\"exposed_comm_ms\":%.2f,\"sharded_optimizer\":1,\"sharded_gradients\":%d,\"comm\":\"%.200s\"",
                 W, tps / W, exposed, g.shard_grads, comm.name);
    }
    if (root) {
        printf("{\"system\":\"refine\",\"model\":\"%s\",\"method\":\"%s\",\"rank\":%d,\"batch\":%d,\"seq\":%d,"
               "\"grad_accum\":%d,\"recompute\":\"%s\",\"optimizer\":\"%s\",\"precision\":\"%s\",\"fp8_recipe\":\"%s\","
               "\"base_dtype\":\"%s\",\"master\":\"%s\",\"grad_dtype\":\"%s\",\"recompute_mlp\":%d,\"mlp_chunk\":%d,\"recompute_keep\":%d,\"keep_norms\":%d,\"ungrouped\":%d,\"unfolded\":%d,"
               "\"step_s\":%.4f,"
               "\"tokens_per_s\":%.0f,\"model_tflops\":%.1f,\"mfu\":%.3f,\"peak_mem_GiB\":%.2f,\"cuda_mem_GiB\":%.2f,"
               "\"gemm_tflops\":%.1f,\"loss\":%.9g,\"first_loss\":%.4f,\"plan_GiB\":{%s},\"memory_limit_GiB\":%g,"
               "\"offload\":%d,\"host_GiB\":%.3f,\"device\":\"%s\"%s}\n",
               o.model, method, o.rank, g.B, g.T, A, recompute_names[o.recompute], optimizer_names[o.optimizer],
               compute_precision_names[set.precision],
               set.precision == COMPUTE_FP8 ? fp8_recipe_names[set.fp8_recipe] : "none",
               set.base == BASE_FP8 ? "fp8" : set.base == BASE_NF4 ? "nf4" : "bf16", master_storage_names[o.master],
               grad_storage_names[o.grad_dtype], g.mlp_input == GPU_MLP_INPUT_RECOMPUTED ? 1 : 0, o.mlp_chunk, o.recompute_keep, o.keep_norms, o.ungrouped, o.unfolded, step_s, tps, fpt * tps / W / 1e12, peak > 0 ? fpt * tps / W / peak : 0.0, plan.total / GIB,
               (double)(free0 - free1) / GIB, peak / 1e12, (double)loss, (double)loss0, fields, (double)o.memory_limit, o.offload, plan.host / GIB, device, extra);
        fflush(stdout);
    }
    if (o.profile) {
        gpu_llama_profile_reset(m);
        for (int i = 0; i < o.bench_steps; i++) train_step(m, dp, W, tok, lab, valid, A, &o, step++);
        if (root) gpu_llama_profile_print(m, stdout, o.bench_steps);
    }
    free(tok);
    free(lab);
    gpu_dp_free(dp);
    free_gpu_llama(m);
    comm.destroy(comm.self);
    return 0;
}
