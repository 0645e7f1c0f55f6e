/* bench_main.c — //gpu:bench: the training step of //gpu:train timed on random weights of a real
 * model's shapes, with the figures PERFORMANCE.md defines, next to ../shared/bench/hf_peer.py.
 *
 *   bazel run //gpu:bench -- --model llama-3.2-1b --method lora --batch 16 --seq 512
 *   bazel run //gpu:bench -- --model path/to/config.json --method qlora --recompute layer
 *
 * What one run does:
 *   1. measures the device's bf16 GEMM rate (8192³, random operands): the MFU denominator;
 *   2. plans the model (gpu/llama.h) for the shape and refuses, before allocating, a plan that does
 *      not fit (exit status 1, with the largest micro-batch that would);
 *   3. random weights (HF's init scale), adapters initialized as the trainer does, random token ids
 *      (labels = the next token, the last position ignored, as the peer's labels = ids);
 *   4. validates: the first loss is finite and within 1 of ln V (random weights predict nearly
 *      uniformly); a failure voids the figure (exit status 1);
 *   5. warm-up steps, then --steps steps timed with CUDA events: each step is exactly the
 *      trainer's (batch upload, forward, loss, backward, AdamW (or the 8-bit optimizer, --optimizer
 *      adamw8bit) with clipping, zeroed gradients, the step's one wait for its loss and norm);
 *      --ungrouped runs each LoRA adapter alone instead of q/k/v and gate/up as groups;
 *   6. prints one JSON line: tokens_per_s, step_s, peak_mem_GiB (every byte refine allocates on the
 *      device: the plan), cuda_mem_GiB (device memory in use minus before: adds the CUDA context
 *      and cuBLASLt), model_tflops (PERFORMANCE.md's FLOP convention, train/metrics.h), mfu,
 *      gemm_tflops, loss, device; with --profile a second JSON line with the device time of each op
 *      category per step (CUDA events around each op, over the timed steps run again).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gemm.h"
#include "gpu/llama.h"
#include "io/config.h"
#include "io/error.h"
#include "ref/lora.h"
#include "train/metrics.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

struct bench_args {
    char model[1024];
    char method[16];
    char recompute[16];
    char optimizer[16];
    int batch, seq, rank, steps, warmup, profile, ungrouped;
    float alpha;
    unsigned long long seed;
};

static void usage(FILE *f) {
    fprintf(f, "usage: bench [--model llama-3.2-1b|llama-3.2-3b|llama-3.1-8b|smollm2-135m|CONFIG.json]\n"
               "             [--method lora|dora|qlora|qdora|full] [--batch 16] [--seq 512] [--rank 16] [--alpha 32]\n"
               "             [--recompute none|attn|layer] [--optimizer adamw|adamw8bit] [--steps 10] [--warmup 3]\n"
               "             [--seed 0] [--profile] [--ungrouped]\n");
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out, struct io_err *e) {
    char *end = NULL;
    const long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < lo || x > hi)
        return io_fail(e, "%s: '%s' is not an integer in [%d, %d]", flag, v, lo, hi);
    *out = (int)x;
    return 0;
}

static int parse_args(struct bench_args *a, int argc, char **argv, struct io_err *e) {
    memset(a, 0, sizeof *a);
    snprintf(a->model, sizeof a->model, "llama-3.2-1b");
    snprintf(a->method, sizeof a->method, "lora");
    snprintf(a->recompute, sizeof a->recompute, "none");
    snprintf(a->optimizer, sizeof a->optimizer, "adamw");
    a->batch = 16, a->seq = 512, a->rank = 16, a->steps = 10, a->warmup = 3, a->alpha = 32.0f;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(f, "--profile") == 0) {
            a->profile = 1;
            continue;
        }
        if (strcmp(f, "--ungrouped") == 0) { /* LoRA adapters one linear at a time (comparisons) */
            a->ungrouped = 1;
            continue;
        }
        if (i + 1 >= argc) return io_fail(e, "%s needs a value (see --help)", f);
        const char *v = argv[++i];
        int rc = 0;
        if (strcmp(f, "--model") == 0) snprintf(a->model, sizeof a->model, "%s", v);
        else if (strcmp(f, "--method") == 0) snprintf(a->method, sizeof a->method, "%s", v);
        else if (strcmp(f, "--recompute") == 0) snprintf(a->recompute, sizeof a->recompute, "%s", v);
        else if (strcmp(f, "--optimizer") == 0) snprintf(a->optimizer, sizeof a->optimizer, "%s", v);
        else if (strcmp(f, "--batch") == 0) rc = parse_int(f, v, 1, 1 << 16, &a->batch, e);
        else if (strcmp(f, "--seq") == 0) rc = parse_int(f, v, 2, 1 << 20, &a->seq, e);
        else if (strcmp(f, "--rank") == 0) rc = parse_int(f, v, 1, 4096, &a->rank, e);
        else if (strcmp(f, "--steps") == 0) rc = parse_int(f, v, 1, 1 << 20, &a->steps, e);
        else if (strcmp(f, "--warmup") == 0) rc = parse_int(f, v, 0, 1 << 20, &a->warmup, e);
        else if (strcmp(f, "--seed") == 0) a->seed = strtoull(v, NULL, 0);
        else if (strcmp(f, "--alpha") == 0) a->alpha = (float)atof(v);
        else return io_fail(e, "unknown option '%s' (see --help)", f);
        if (rc) return -1;
    }
    return 0;
}

static int model_config(struct model_config *c, const char *model, struct io_err *e) {
    const size_t n = strlen(model);
    if (n > 5 && strcmp(model + n - 5, ".json") == 0) return config_from_hf_json(c, model, e);
    return config_named(c, model, e);
}

static int options(struct gpu_llama_options *g, const struct bench_args *a, struct io_err *e) {
    memset(g, 0, sizeof *g);
    const char *m = a->method;
    if (strcmp(m, "lora") && strcmp(m, "dora") && strcmp(m, "qlora") && strcmp(m, "qdora") && strcmp(m, "full"))
        return io_fail(e, "--method '%s' is not one of lora | dora | qlora | qdora | full", m);
    g->mode = strcmp(m, "full") == 0 ? LLAMA_FULL : strstr(m, "dora") ? LLAMA_DORA : LLAMA_LORA;
    g->base = m[0] == 'q' ? GPU_BASE_NF4 : GPU_BASE_BF16;
    g->targets = LLAMA_ALL_TARGETS;
    g->R = a->rank;
    g->lora_scale = g->mode == LLAMA_FULL ? 0.0f : ref_lora_scale(a->alpha, a->rank, LORA_SCALE_STANDARD);
    g->seed = a->seed;
    if (strcmp(a->recompute, "none") == 0) g->recompute = GPU_RECOMPUTE_NONE;
    else if (strcmp(a->recompute, "attn") == 0) g->recompute = GPU_RECOMPUTE_ATTN;
    else if (strcmp(a->recompute, "layer") == 0) g->recompute = GPU_RECOMPUTE_LAYER;
    else return io_fail(e, "--recompute '%s' is not one of none | attn | layer", a->recompute);
    if (strcmp(a->optimizer, "adamw") == 0) g->optimizer = GPU_OPT_ADAMW;
    else if (strcmp(a->optimizer, "adamw8bit") == 0) g->optimizer = GPU_OPT_ADAMW8BIT;
    else return io_fail(e, "--optimizer '%s' is not one of adamw | adamw8bit", a->optimizer);
    g->nested_nf4 = 1;
    g->B = a->batch;
    g->T = a->seq;
    g->profile = a->profile;
    g->ungrouped = a->ungrouped;
    return 0;
}

/* One training step exactly as //gpu:train takes it (lr 1e-4, clip 1, AdamW defaults). */
static float train_step(struct gpu_llama *m, const int32_t *tok, const int32_t *lab, int64_t valid, int64_t step) {
    gpu_llama_set_batch(m, tok, lab);
    const float grad_scale = (float)(1.0 / (double)valid); /* the loop's 1 / (valid labels of the step) */
    gpu_llama_train_micro(m, valid, (float)((double)grad_scale * (double)valid), (uint64_t)step);
    const struct gpu_llama_step h = {step + 1, 1e-4, 0.9, 0.999, 1e-8, 0.0, 1.0};
    double norm = 0.0, nll = 0.0;
    (void)gpu_llama_optimizer_step(m, &h, &nll, &norm);
    return (float)(nll / (double)valid);
}

int main(int argc, char **argv) {
    struct io_err e = {{0}};
    struct bench_args a;
    if (parse_args(&a, argc, argv, &e)) io_exit(&e);
    struct model_config c;
    if (model_config(&c, a.model, &e)) io_exit(&e);
    struct gpu_llama_options g;
    if (options(&g, &a, &e)) io_exit(&e);
    char device[128];
    size_t free0 = 0, total = 0, free1 = 0;
    if (gpu_device_query(device, sizeof device, &free0, &total, &e)) io_exit(&e);
    const double peak = gpu_gemm_measure_bf16_rate(8192);
    if (gpu_device_query(device, sizeof device, &free0, &total, &e)) io_exit(&e);
    struct gpu_llama_plan plan;
    if (gpu_llama_plan_bytes(&plan, &c, &g, &e)) io_exit(&e);
    char line[512];
    gpu_llama_plan_describe(line, sizeof line, &plan, g.B, g.T);
    fprintf(stderr, "%s\n", line);
    if (plan.total > free0) {
        io_fail(&e, "%s %s %d×%d does not fit: %s, %.2f GiB free on %s", a.model, a.method, g.B, g.T, line,
                free0 / GIB, device);
        io_exit(&e);
    }
    struct gpu_llama *m = build_gpu_llama(&c, &g, &e);
    if (!m) io_exit(&e);
    gpu_llama_random_weights(m, a.seed);
    gpu_llama_init_adapters(m, a.seed);
    if (gpu_device_query(NULL, 0, &free1, NULL, &e)) io_exit(&e);

    const int N = g.B * g.T;
    int32_t *tok = malloc((size_t)N * sizeof *tok), *lab = malloc((size_t)N * sizeof *lab);
    if (!tok || !lab) {
        io_fail(&e, "out of host memory");
        io_exit(&e);
    }
    uint64_t s = a.seed * 0x9E3779B97F4A7C15ull + 1;
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
    const float loss0 = train_step(m, tok, lab, valid, step++);
    const double lnv = log((double)c.V);
    if (!isfinite(loss0) || fabs(loss0 - lnv) > 1.0) {
        io_fail(&e, "validation failed: the first loss is %g, expected within 1 of ln V = %.3f; no figure", (double)loss0,
                lnv);
        io_exit(&e);
    }
    for (int i = 0; i < a.warmup; i++) train_step(m, tok, lab, valid, step++);
    gpu_llama_timer_begin(m);
    float loss = 0.0f;
    for (int i = 0; i < a.steps; i++) loss = train_step(m, tok, lab, valid, step++);
    const double ms = gpu_llama_timer_end(m);
    if (!isfinite(loss)) {
        io_fail(&e, "the loss became %g during the timed steps; no figure", (double)loss);
        io_exit(&e);
    }
    const double step_s = ms * 1e-3 / a.steps, tps = (double)N / step_s;
    const double fpt = train_flops_per_token(&c, g.T, g.mode == LLAMA_FULL);
    printf("{\"system\":\"refine\",\"model\":\"%s\",\"method\":\"%s\",\"rank\":%d,\"batch\":%d,\"seq\":%d,"
           "\"recompute\":\"%s\",\"optimizer\":\"%s\",\"ungrouped\":%d,\"step_s\":%.4f,\"tokens_per_s\":%.0f,\"model_tflops\":%.1f,\"mfu\":%.3f,"
           "\"peak_mem_GiB\":%.2f,\"cuda_mem_GiB\":%.2f,\"gemm_tflops\":%.1f,\"loss\":%.4f,\"first_loss\":%.4f,"
           "\"device\":\"%s\"}\n",
           a.model, a.method, a.rank, g.B, g.T, a.recompute, a.optimizer, a.ungrouped, step_s, tps, fpt * tps / 1e12,
           peak > 0 ? fpt * tps / peak : 0.0, plan.total / GIB, (double)(free0 - free1) / GIB, peak / 1e12,
           (double)loss, (double)loss0, device);
    fflush(stdout);
    if (a.profile) {
        gpu_llama_profile_reset(m);
        for (int i = 0; i < a.steps; i++) train_step(m, tok, lab, valid, step++);
        gpu_llama_profile_print(m, stdout, a.steps);
    }
    free(tok);
    free(lab);
    free_gpu_llama(m);
    return 0;
}
