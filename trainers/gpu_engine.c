/* gpu_engine.c — the GPU engine: the training loop's engine interface (train/engine.h) over the
 * GPU model (gpu/llama), one NVIDIA GPU, bf16 compute with fp32 masters (//gpu:train, gpu_engine.h).
 *
 * //gpu:train takes //ref:train's flags and writes the same files (adapter, merged model, metrics, plot,
 * resumable checkpoints); tests/parity/train_parity.sh holds the two trainers against each other.
 * The engine (train/engine.h) over gpu/llama:
 *   - methods: lora, dora (bf16 base), qlora, qdora (NF4 base: a bitsandbytes 4-bit checkpoint's
 *     own codes, or quantized at load like bitsandbytes), full (every weight trains);
 *   - the memory plan is printed before anything is allocated; a plan larger than the GPU's free
 *     memory is refused with the largest micro-batch that fits; --auto-batch takes that
 *     micro-batch; either way one micro-batch is run before training to confirm the plan (and
 *     to create the GEMM plans, so that steps allocate nothing);
 *   - micro_step: the batch is staged to the device and forward + loss + backward are queued; the
 *     loss stays on the device (the step's Σ NLL), so the host does not wait between micro-batches;
 *     gradients accumulate scaled so that the sum over the step's micro-batches is the gradient of
 *     its mean loss;
 *   - optimizer_step: gpu/adamw (or the 8-bit optimizer), global-norm clipping, zeroed gradients,
 *     then the one wait of the step, for the loss sum and the norm; a non-finite loss or gradient
 *     changes nothing (the device skips the update) and a non-finite gradient names its tensor;
 *   - adapter initialization is the CPU trainer's (ref_llama_adapters_init from --seed), so both
 *     trainers start from the same adapters; dropout (LoRA) masks are keyed by the micro-batch
 *     index, so a resumed run draws the same ones.
 * --precision: auto or bf16 (fp32 is //ref:train's), or fp8: the block linears' products in FP8 on a
 * GPU of compute capability 8.9 or newer (refused before anything is read or allocated
 * elsewhere), --fp8-recipe's scaling, the model's FP8 state in the checkpoint (delayed scaling's
 * histories and scales), the step's FP8 statistics in the metrics, and a NaN or an Inf met by a
 * quantization failing the step as a non-finite gradient does (nothing updated, the tensor named).
 * --base-dtype fp8 stores the frozen base as FP8 codes (with --recompute-mlp: the memory
 * configuration, the transposed codes formed a layer at a time).
 *
 * A job of several GPUs (train/comm.h with its slab collectives on the device: NCCL,
 * trainers/comm_nccl.h) is data parallel (trainers/gpu_dp.h): every rank holds the whole model and
 * optimizer; the step's last micro-batch reduces its gradient buckets while backward runs; the
 * step's Σ NLL and gradients are summed over the ranks before the optimizer, so every rank takes
 * the same step. Rank 0 prints the plan; --auto-batch takes the smallest of the ranks' choices.
 * Full fine-tuning shards the fp32 masters and optimizer state over the ranks (ZeRO-1,
 * --shard-optimizer): each rank updates its pieces and broadcasts its part of the bf16 copies; the
 * update is bitwise the unsharded one; checkpoints and exports gather the state to rank 0 first.
 * Where it makes the per-rank plan smaller, the fp32 gradients are sharded too (ZeRO-2,
 * --shard-gradients): every micro-batch hands its buckets to their owners (trainers/gpu_dp.h).
 */
#include "trainers/gpu_engine.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gemm.h"
#include "gpu/llama.h"
#include "io/config.h"
#include "io/error.h"
#include "io/model_source.h"
#include "ref/cross_entropy.h"
#include "train/engine.h"
#include "train/metrics.h"
#include "train/options.h"
#include "trainers/gen_gpu.h"
#include "trainers/sample_hook.h"
#include "trainers/gpu_dp.h"
#include "trainers/settings.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
/* Free memory kept back from the plan: the CUDA runtime's and cuBLASLt's own allocations
 * (module images, the handle) that the plan cannot see. */
#define MEMORY_RESERVE ((size_t)768 << 20)

struct gpu_engine {
    struct gpu_llama *m;
    char name[256];
    char memory_json[512];
    int B, T;
    struct gpu_dp *dp; /* a job's data parallelism; NULL in one process */
    int sharded;       /* the optimizer sharded over the job's ranks (ZeRO-1) */
    int A;             /* micro-batches a step (--grad-accum) */
    int micro_in_step;
    int step;
};

static int eng_micro_step(void *self, const int32_t *tokens, const int32_t *labels, int B, int T, float grad_scale,
                          uint64_t micro_index, struct io_err *e) {
    struct gpu_engine *g = self;
    if (B != g->B || T != g->T) return io_fail(e, "GPU engine planned for %d×%d, got %d×%d", g->B, g->T, B, T);
    if (g->dp) {
        gpu_dp_release(g->dp); /* a checkpoint's gathered state, if any */
        gpu_dp_micro(g->dp, ++g->micro_in_step % g->A == 0); /* the last: reduce as backward goes */
    }
    const int64_t valid = ref_cross_entropy_count_valid(labels, B * T);
    if (valid == 0) return 0;
    /* the model's loss is the micro-batch mean; the gradient of the step's mean is (grad_scale ·
     * valid) × the gradient of the micro-batch mean (as the CPU engine) */
    gpu_llama_set_batch(g->m, tokens, labels);
    gpu_llama_train_micro(g->m, valid, (float)((double)grad_scale * (double)valid), micro_index);
    return 0;
}

static int eng_eval(void *self, const int32_t *tokens, const int32_t *labels, int B, int T, double *nll_sum,
                    struct io_err *e) {
    struct gpu_engine *g = self;
    if (B != g->B || T != g->T) return io_fail(e, "GPU engine planned for %d×%d, got %d×%d", g->B, g->T, B, T);
    const int64_t valid = ref_cross_entropy_count_valid(labels, B * T);
    *nll_sum = 0.0;
    if (valid == 0) return 0;
    if (g->dp && gpu_dp_quiesce(g->dp, "the weights before an evaluation", e) != 0) return -1;
    gpu_llama_set_batch(g->m, tokens, labels);
    gpu_llama_eval(g->m, valid);
    *nll_sum = (double)gpu_llama_loss(g->m) * (double)valid;
    return 0;
}

static int eng_optimizer_step(void *self, const struct optim_step *h, double *nll_sum, double *grad_norm,
                              struct io_err *e) {
    struct gpu_engine *g = self;
    g->micro_in_step = 0;
    g->step = (int)h->step;
    if (g->dp && gpu_dp_reduce(g->dp, g->step, e) != 0) return -1;
    const int bad = gpu_llama_optimizer_step(g->m, h, nll_sum, grad_norm);
    char what[160];
    if (gpu_llama_fp8_failed(g->m, what, sizeof what))
        return io_fail(e, "FP8: %s held a non-finite value; nothing was updated", what);
    if (g->dp && gpu_dp_after_step(g->dp, e) != 0) return -1; /* a sharded optimizer's copies */
    if (!isfinite(*nll_sum)) return 0; /* nothing updated; the loop reports the loss */
    if (bad >= 0) return io_fail(e, "gradient of %s is not finite", gpu_llama_tensor_info(g->m, bad)->name);
    if (!isfinite(*grad_norm)) return io_fail(e, "the gradient norm is not finite");
    return 0;
}

static int eng_n_tensors(void *self) { return gpu_llama_n_tensors(((struct gpu_engine *)self)->m); }

static int eng_tensor_info(void *self, int i, struct engine_tensor *info) {
    const struct gpu_llama_tensor *t = gpu_llama_tensor_info(((struct gpu_engine *)self)->m, i);
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", t->name);
    info->role = t->role == 0 ? ROLE_PARAM : t->role == 1 ? ROLE_OPTIM : ROLE_STATE;
    info->dtype = t->is_u8 ? ST_U8 : ST_F32;
    info->ndim = t->ndim;
    info->shape[0] = t->shape[0];
    info->shape[1] = t->shape[1];
    return 0;
}

static int eng_tensor_read(void *self, int i, void *host, struct io_err *e) {
    struct gpu_engine *g = self;
    if (g->sharded) return gpu_dp_tensor_read(g->dp, i, host, e); /* gathered by eng_gather */
    if (g->dp && gpu_dp_quiesce(g->dp, "the state before a checkpoint", e) != 0) return -1;
    gpu_llama_tensor_read(g->m, i, host);
    return 0;
}

static int eng_tensor_write(void *self, int i, const void *host, struct io_err *e) {
    struct gpu_engine *g = self;
    if (g->dp && gpu_dp_quiesce(g->dp, "the state before a resume", e) != 0) return -1;
    gpu_llama_tensor_write(g->m, i, host);
    return 0;
}

static int eng_gather(void *self, struct io_err *e) { return gpu_dp_gather(((struct gpu_engine *)self)->dp, e); }

static int eng_base_weight_read(void *self, const char *hf_name, float *host, struct io_err *e) {
    return gpu_llama_base_weight_read(((struct gpu_engine *)self)->m, hf_name, host, e);
}

static int eng_fp8_stats(void *self, struct engine_fp8_stats *s) {
    float lo = 0.0f, hi = 0.0f;
    long long sat = 0;
    if (gpu_llama_fp8_stats(((struct gpu_engine *)self)->m, &lo, &hi, &sat) != 0) return -1;
    s->scale_min = lo, s->scale_max = hi, s->saturated = sat;
    return 0;
}

static double eng_mem_gib(void *self) {
    return (double)gpu_llama_get_plan(((struct gpu_engine *)self)->m)->total / GIB;
}

static void eng_destroy(void *self) {
    struct gpu_engine *g = self;
    gpu_dp_free(g->dp);
    free_gpu_llama(g->m);
    free(g);
}

/* ---- creation ---------------------------------------------------------------------------------- */

int gpu_engine_check(const struct train_options *o, struct io_err *e) {
    if (o->recompute_mlp && o->keep_mlp_input)
        return io_fail(e, "--recompute-mlp and --keep-mlp-input: the MLP input is either recomputed or kept (neither "
                          "given: recomputed where that costs no pass of its own)");
    if (o->precision == PRECISION_FP32)
        return io_fail(e, "--precision fp32: //gpu:train computes in bf16 (fp32 masters); the fp32 trainer is "
                          "//ref:train");
    if (gpu_device_query(NULL, 0, NULL, NULL, e)) return -1;
    return o->precision == PRECISION_FP8 ? gpu_device_check_fp8(e) : 0;
}

void gpu_model_options(struct gpu_llama_options *g, const struct model_settings *s) {
    memset(g, 0, sizeof *g);
    g->mode = s->mode;
    g->base = s->base == BASE_NF4 ? GPU_BASE_NF4 : s->base == BASE_FP8 ? GPU_BASE_FP8 : GPU_BASE_BF16;
    g->linears = s->precision == COMPUTE_FP8 ? GPU_LINEAR_FP8 : GPU_LINEAR_BF16;
    g->fp8_recipe = s->fp8_recipe;
    g->targets = s->targets;
    g->R = s->R;
    g->lora_scale = s->lora_scale;
    g->dropout = s->dropout;
    g->seed = s->seed;
    g->recompute = s->recompute;
    g->optimizer = s->optimizer;
    g->master = s->master;
    g->grads = s->grads;
    g->nested_nf4 = 1; /* weights quantized here are double-quantized */
    g->B = s->B;
    g->T = s->T;
    g->profile = s->timing == TIMING_OPS ? GPU_PROFILE_OPS : GPU_PROFILE_OFF;
    g->nvtx = s->trace == TRACE_NVTX ? GPU_NVTX_RANGES : GPU_NVTX_OFF;
    g->grouping = s->grouping == ADAPTERS_UNGROUPED ? GPU_LORA_UNGROUPED : GPU_LORA_GROUPED;
    g->folding = s->folding == ADAPTERS_UNFOLDED ? GPU_LORA_UNFOLDED : GPU_LORA_FOLDED;
    g->offload = s->activations == ACTIVATIONS_OFFLOADED ? GPU_OFFLOAD_INPUTS : GPU_OFFLOAD_NONE;
    g->mlp_chunk = s->mlp_chunk;
    g->recompute_keep = s->recompute_keep > 0 ? s->recompute_keep : 0; /* auto: resolved by gpu_resolve_keep */
    g->keep_norms = s->keep_norms;
    /* auto: recomputed where it costs no pass of its own (the options above decide) */
    g->mlp_input = s->mlp_input == MLP_INPUT_RECOMPUTED || (s->mlp_input == MLP_INPUT_AUTO && gpu_llama_mlp_input_free(g))
                       ? GPU_MLP_INPUT_RECOMPUTED
                       : GPU_MLP_INPUT_SAVED;
}

int gpu_most_kept_layers(struct gpu_llama_options g, const struct model_config *c, size_t budget) {
    struct gpu_llama_plan p;
    struct io_err e;
    for (int k = c->L - 1; k >= 2; k--) { /* 1 and 0 plan the same: the top layer is never recomputed */
        g.recompute_keep = k;
        if (gpu_llama_plan_bytes(&p, c, &g, &e) == 0 && p.total <= budget) return k;
    }
    return 0;
}

int gpu_resolve_keep(struct train_options *o, struct gpu_llama_options *g, const struct model_config *c, size_t budget,
                     struct io_err *e) {
    if (o->recompute_keep != OPT_KEEP_AUTO) return 0;
    if (g->recompute == RECOMPUTE_NONE)
        return io_fail(e, "--recompute-keep auto: the layers kept from recomputation need --recompute layer or attn");
    const int chunks = g->mlp_chunk > 0 && (int64_t)g->mlp_chunk < (int64_t)g->B * g->T;
    g->recompute_keep = o->recompute_keep = chunks ? 0 : gpu_most_kept_layers(*g, c, budget);
    return 1;
}

int gpu_shards_optimizer(const struct train_options *o, const struct gpu_llama_options *g, int world) {
    /* auto: split masters keep the optimizer whole (the sharded one keeps fp32 masters) */
    return world > 1 && g->mode == LLAMA_FULL &&
           (o->shard_optimizer == SHARD_ON || (o->shard_optimizer == SHARD_AUTO && g->master == MASTER_FP32));
}

int gpu_shards_gradients(const struct train_options *o, struct gpu_llama_options *g, const struct model_config *c,
                         size_t budget, struct io_err *e) {
    g->shard_grads = 0;
    if (o->shard_gradients == SHARD_OFF) return 0;
    if (g->shard_world <= 1) {
        if (o->shard_gradients == SHARD_ON)
            return io_fail(e, "--shard-gradients on: the gradients are sharded with the sharded optimizer (full "
                              "fine-tuning on two or more GPUs, --shard-optimizer auto or on)");
        return 0;
    }
    if (o->shard_gradients == SHARD_ON) return g->shard_grads = 1, 0;
    struct gpu_llama_plan whole, sharded;
    if (gpu_llama_plan_bytes(&whole, c, g, e)) return -1;
    g->shard_grads = 1;
    if (gpu_llama_plan_bytes(&sharded, c, g, e)) return -1;
    g->shard_grads = sharded.total < whole.total && (o->grad_accum <= 1 || whole.total > budget);
    return 0;
}

/* What a run may plan of `usable` bytes: the runtime's reserve taken off. */
static size_t less_reserve(size_t usable) { return usable > MEMORY_RESERVE ? usable - MEMORY_RESERVE : 0; }

int gpu_memory_budget(const struct train_options *o, char *device, size_t cap, size_t *budget, size_t *free_now,
                      struct io_err *e) {
    size_t free_b = 0, total_b = 0;
    if (gpu_device_query(device, cap, &free_b, &total_b, e)) return -1;
    if (free_now != NULL) *free_now = free_b;
    size_t usable = free_b;
    if (o->memory_limit > 0) {
        const size_t limit = (size_t)((double)o->memory_limit * GIB), in_use = total_b - free_b;
        if (limit > total_b)
            return io_fail(e, "--memory-limit %g GiB: %s has only %.2f GiB", (double)o->memory_limit, device,
                           total_b / GIB);
        usable = limit > in_use ? limit - in_use : 0; /* what a card of that size has left now */
        if (usable > free_b) usable = free_b;
    }
    *budget = less_reserve(usable);
    return 0;
}

size_t gpu_memory_budget_offline(const struct train_options *o) {
    return less_reserve(o->memory_limit > 0 ? (size_t)((double)o->memory_limit * GIB) : 0);
}

int gpu_memory_limit_check(const struct train_options *o, size_t total, size_t *free_now, struct io_err *e) {
    size_t free_b = 0;
    if (gpu_device_query(NULL, 0, &free_b, NULL, e)) return -1;
    if (free_now != NULL) *free_now = free_b;
    /* the allocator as on a card of --memory-limit GiB */
    if (o->memory_limit > 0 && (double)(total - free_b) > (double)o->memory_limit * GIB)
        return io_fail(e, "--memory-limit %g GiB: the device holds %.2f GiB with the model built",
                       (double)o->memory_limit, (double)(total - free_b) / GIB);
    return 0;
}

/* One unsigned number from a file ("max" and anything else: 0). */
static unsigned long long read_number(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    unsigned long long v = 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
    return v;
}

size_t gpu_host_budget(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    double avail = (double)kib * 1024.0;
    /* a container's memory limit (cgroup v2, then v1) binds before the machine's */
    const char *limits[2][2] = {{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                                {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
    for (int i = 0; i < 2; i++) {
        const unsigned long long lim = read_number(limits[i][0]), used = read_number(limits[i][1]);
        if (lim == 0 || lim >= (1ull << 60)) continue; /* none ("max", or v1's page-rounded 2^63) */
        const double room = lim > used ? (double)(lim - used) : 0.0;
        if (room < avail) avail = room;
        break;
    }
    return (size_t)(avail * 0.9);
}

static int plan_fits(const struct gpu_llama_plan *p, size_t budget, size_t host_budget) {
    return p->total <= budget && (host_budget == 0 || p->host <= host_budget);
}

int gpu_longest_fitting_seq(struct gpu_llama_options g, const struct model_config *c, size_t budget,
                            size_t host_budget, int most) {
    struct gpu_llama_plan p;
    struct io_err e;
    int lo = 0, hi = 2;
    for (;;) { /* double while it fits */
        g.T = hi;
        if (gpu_llama_plan_bytes(&p, c, &g, &e) != 0 || !plan_fits(&p, budget, host_budget)) break;
        lo = hi;
        if (hi >= most) return most;
        hi = hi * 2 < most ? hi * 2 : most;
    }
    while (hi - lo > 1) { /* the longest fitting T lies in [lo, hi) */
        const int mid = lo + (hi - lo) / 2;
        g.T = mid;
        if (gpu_llama_plan_bytes(&p, c, &g, &e) == 0 && plan_fits(&p, budget, host_budget))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

const char *gpu_longer_seq_hint(struct gpu_llama_options g, const struct model_config *c, size_t budget,
                                size_t host_budget, int found, char *buf, size_t cap) {
    buf[0] = '\0';
    const char *flags[2];
    int n = 0;
    if (g.recompute != RECOMPUTE_LAYER) g.recompute = RECOMPUTE_LAYER, flags[n++] = "--recompute layer";
    if (g.mlp_chunk == 0 && gpu_llama_mlp_chunks_supported(&g))
        g.mlp_chunk = 4096, flags[n++] = "--mlp-chunk 4096";
    if (n == 0) return buf;
    const int T = gpu_longest_fitting_seq(g, c, budget, host_budget, 1 << 20);
    if (T > found + found / 20) /* worth saying: 5% or more */
        snprintf(buf, cap, "with %s%s%s: %d tokens", flags[0], n > 1 ? " " : "", n > 1 ? flags[1] : "", T);
    return buf;
}

int gpu_engine_longest_seq(struct train_options *o, const struct model_source *src, struct io_err *e) {
    char device[128];
    size_t budget = 0;
    if (gpu_memory_budget(o, device, sizeof device, &budget, NULL, e)) return -1;
    struct train_options probe = *o;
    probe.seq = 2;
    struct model_settings set;
    model_settings_from_options(&set, &probe, COMPUTE_BF16);
    struct gpu_llama_options g;
    gpu_model_options(&g, &set);
    if (model_source_is_bnb(src, llama_linears[LLAMA_Q].weight, 0)) g.nested_nf4 = src->config.quant.double_quant;
    const size_t host = g.offload == GPU_OFFLOAD_INPUTS ? gpu_host_budget() : 0;
    const int T = gpu_longest_fitting_seq(g, &src->config, budget, host, 1 << 20);
    char hint[200];
    if (T < 2)
        return io_fail(e, "--seq auto: not even 2 tokens of micro-batch %d fit in the %.2f GiB %s leaves; lower "
                          "--micro-batch, or %s",
                       o->micro_batch, budget / GIB, device, gpu_memory_hint(&g, hint, sizeof hint));
    printf("seq auto: %d tokens (the longest sequence whose plan for micro-batch %d fits in %.2f GiB on %s", T,
           o->micro_batch, budget / GIB, device);
    if (host > 0) printf(" and in %.2f GiB of pinned host memory", host / GIB);
    printf(")\n");
    char longer[160];
    if (gpu_longer_seq_hint(g, &src->config, budget, host, T, longer, sizeof longer)[0] != '\0')
        printf("seq auto: longer %s\n", longer);
    o->seq = T;
    return 0;
}

const char *gpu_memory_hint(const struct gpu_llama_options *g, char *buf, size_t cap) {
    const char *opts[8];
    int n = 0;
    if (g->recompute_keep > 1) opts[n++] = "a smaller --recompute-keep"; /* the layers it keeps cost first */
    /* the MLP input kept where it is not free to recompute (DoRA, dropout, rank > 16, FP8 products, or
     * --keep-mlp-input): one SwiGLU pass a layer for B·T·F·2 bytes, cheaper than --recompute layer */
    if (g->mlp_input == GPU_MLP_INPUT_SAVED && g->recompute != RECOMPUTE_LAYER) opts[n++] = "--recompute-mlp";
    if (g->recompute != RECOMPUTE_LAYER) opts[n++] = "--recompute layer";
    else if (g->offload == GPU_OFFLOAD_NONE) opts[n++] = "--offload";
    if (g->recompute == RECOMPUTE_LAYER && g->mlp_chunk == 0 && (int64_t)g->B * g->T > 8192 &&
        gpu_llama_mlp_chunks_supported(g))
        opts[n++] = "--mlp-chunk 4096";
    if (g->mode == LLAMA_FULL) {
        if (g->master == MASTER_FP32 && g->shard_world <= 1) opts[n++] = "--master split";
        else if (g->master == MASTER_SPLIT) opts[n++] = "--master bf16-sr (bf16 weights, rounded stochastically)";
        if (g->optimizer != OPTIMIZER_ADAMW8BIT) opts[n++] = "--optimizer adamw8bit";
        if (g->grads == GRAD_FP32 && g->shard_world <= 1) opts[n++] = "--grad-dtype bf16";
    } else if (g->base == GPU_BASE_BF16) {
        opts[n++] = g->mode == LLAMA_DORA ? "--method qdora" : "--method qlora";
    }
    opts[n++] = "a shorter --seq";
    size_t len = (size_t)snprintf(buf, cap, "try ");
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", opts[i], i + 2 < n ? ", " : i + 1 < n ? " or " : "");
    return buf;
}

int gpu_largest_fitting_batch(struct gpu_llama_options g, const struct model_config *c, size_t budget, int most) {
    struct gpu_llama_plan p;
    struct io_err e;
    /* FP8 products take B·T in multiples of 16: the search runs over multiples of `step` */
    int step = 1;
    if (g.linears == GPU_LINEAR_FP8)
        while ((int64_t)step * g.T % 16 != 0) step *= 2;
    const int kmost = most / step;
    if (kmost < 1) return 0;
    int lo = 0, hi = 1;
    for (;;) { /* double while it fits */
        g.B = hi * step;
        if (gpu_llama_plan_bytes(&p, c, &g, &e) != 0 || p.total > budget) break;
        lo = hi;
        if (hi >= kmost) return kmost * step;
        hi = hi * 2 < kmost ? hi * 2 : kmost;
    }
    while (hi - lo > 1) { /* the largest fitting B lies in [lo, hi) steps */
        const int mid = lo + (hi - lo) / 2;
        g.B = mid * step;
        if (gpu_llama_plan_bytes(&p, c, &g, &e) == 0 && p.total <= budget)
            lo = mid;
        else
            hi = mid;
    }
    return lo * step;
}

/* The smallest of the ranks' values (every rank calls it; one process: v). */
static int job_min(const struct train_comm *comm, int v, const char *what, int *out, struct io_err *e) {
    int64_t *all = calloc((size_t)comm->world, sizeof *all);
    if (all == NULL) return io_fail(e, "out of host memory");
    all[comm->rank] = v;
    const int rc = comm->sum(comm->self, all, comm->world, COMM_I64, what, e);
    *out = v;
    for (int r = 0; r < comm->world && rc == 0; r++) *out = all[r] < *out ? (int)all[r] : *out;
    free(all);
    return rc;
}

int gpu_engine_create(struct train_engine *eng, struct train_options *o, const struct model_source *src,
                      int max_micro_batch, const struct train_comm *comm, struct io_err *e) {
    if (comm->world > 1 && comm->slabs != COMM_DEVICE)
        return io_fail(e, "the GPU engine reduces its gradients on the device: a job of %d ranks needs NCCL "
                          "(trainers/comm_nccl.h)",
                       comm->world);
    if (settings_check_ranks(o, comm->slabs == COMM_DEVICE, e)) return -1; /* any launcher: NCCL buckets */
    const int root = comm_is_root(comm);
    char device[128];
    size_t total_b = 0, budget = 0;
    if (gpu_device_query(device, sizeof device, NULL, &total_b, e)) return -1;
    const double peak = gpu_gemm_measure_bf16_rate(8192);
    if (gpu_memory_budget(o, device, sizeof device, &budget, NULL, e)) return -1;
    const char *limit_note = o->memory_limit > 0 ? " (--memory-limit)" : " free";

    struct model_settings set;
    model_settings_from_options(&set, o, COMPUTE_BF16);
    struct gpu_llama_options g;
    gpu_model_options(&g, &set);
    /* the optimizer sharded over the job's GPUs (ZeRO-1): --shard-optimizer auto does it for full
     * fine-tuning; the update is the same bits (gpu/llama.h) */
    if (o->shard_optimizer == SHARD_ON && g.mode != LLAMA_FULL)
        return io_fail(e, "--shard-optimizer on: the sharded optimizer is for --method full (an adapter's optimizer "
                          "state is small)");
    const int shard = comm->slabs == COMM_DEVICE && gpu_shards_optimizer(o, &g, comm->world);
    if (shard) g.shard_world = comm->world, g.shard_rank = comm->rank;
    /* a bitsandbytes checkpoint brings its own layout */
    if (model_source_is_bnb(src, llama_linears[LLAMA_Q].weight, 0)) g.nested_nf4 = src->config.quant.double_quant;
    if (gpu_shards_gradients(o, &g, &src->config, budget, e)) return -1;
    struct gpu_llama_plan plan;
    memset(&plan, 0, sizeof plan);
    /* a micro-batch too large for the kernels is one that does not fit: the largest that does is named */
    const int sized = gpu_llama_size_verified(&src->config, &g);
    if (sized && gpu_llama_plan_bytes(&plan, &src->config, &g, e)) return -1;
    if (!sized && !o->auto_batch) {
        struct io_err why = {{0}};
        (void)gpu_llama_plan_bytes(&plan, &src->config, &g, &why);
        const int b = gpu_largest_fitting_batch(g, &src->config, budget, 1 << 20);
        if (b > 0)
            return io_fail(e, "the model does not fit: %s; the largest micro-batch that fits is %d (--micro-batch %d, "
                              "raising --grad-accum to keep the batch, or --auto-batch)",
                           why.msg, b, b);
        return io_fail(e, "%s", why.msg);
    }
    if (o->auto_batch) {
        int b = gpu_largest_fitting_batch(g, &src->config, budget, max_micro_batch);
        if (job_min(comm, b, "the ranks' auto-batch micro-batches", &b, e)) return -1; /* every GPU fits it */
        if (b == 0) {
            if (!sized) {
                struct io_err why = {{0}};
                g.B = 1;
                (void)gpu_llama_plan_bytes(&plan, &src->config, &g, &why);
                if (why.msg[0] != '\0') return io_fail(e, "--auto-batch: %s", why.msg);
            }
            char line[512];
            gpu_llama_plan_describe(line, sizeof line, &plan, 1, o->seq);
            char hint[200];
            return io_fail(e, "--auto-batch: not even micro-batch 1 fits in the %.2f GiB%s on %s (%s); %s",
                           budget / GIB, limit_note, device, line, gpu_memory_hint(&g, hint, sizeof hint));
        }
        if (root)
            printf("auto-batch: micro-batch %d (the largest whose plan fits in %.2f GiB%s%s)\n", b, budget / GIB,
                   b == max_micro_batch ? " and that the training data fills with --grad-accum" : "",
                   comm->world > 1 ? " on every rank" : "");
        o->micro_batch = g.B = b;
        if (gpu_llama_plan_bytes(&plan, &src->config, &g, e)) return -1;
    }
    { /* --recompute-keep auto: the spare memory after the micro-batch, as kept layers (every rank's) */
        const int r = gpu_resolve_keep(o, &g, &src->config, budget, e);
        if (r < 0) return -1;
        if (r > 0) {
            int k = g.recompute_keep;
            if (job_min(comm, k, "the ranks' kept layers", &k, e)) return -1;
            o->recompute_keep = g.recompute_keep = k;
            if (root)
                printf("recompute-keep auto: %d layers kept from recomputation (the most whose plan fits in %.2f GiB%s)\n",
                       k, budget / GIB, comm->world > 1 ? " on every rank" : "");
            if (gpu_llama_plan_bytes(&plan, &src->config, &g, e)) return -1;
        }
    }
    char line[512];
    gpu_llama_plan_describe(line, sizeof line, &plan, g.B, g.T);
    if (root)
        printf("%s%s\n", line,
               g.shard_grads ? " (per rank: fp32 masters, optimizer state and gradients sharded over the ranks)"
               : shard ? " (per rank: fp32 masters and optimizer state sharded over the ranks)"
                     : comm->world > 1 ? " (per rank)" : "");
    if (plan.total > budget) {
        const int b = gpu_largest_fitting_batch(g, &src->config, budget, 1 << 20);
        if (b > 0)
            return io_fail(e, "the model does not fit: %s, but %s has %.2f GiB%s; the largest micro-batch that "
                              "fits is %d (--micro-batch %d, raising --grad-accum to keep the batch, or --auto-batch)",
                           line, device, budget / GIB, limit_note, b, b);
        char hint[200];
        return io_fail(e, "the model does not fit: %s, but %s has %.2f GiB%s, and not even micro-batch 1 fits; %s",
                       line, device, budget / GIB, limit_note, gpu_memory_hint(&g, hint, sizeof hint));
    }

    struct gpu_engine *ge = calloc(1, sizeof *ge);
    if (!ge) return io_fail(e, "out of host memory");
    ge->B = g.B;
    ge->T = g.T;
    ge->m = build_gpu_llama(&src->config, &g, e);
    if (!ge->m) {
        free(ge);
        return -1;
    }
    if (gpu_llama_load(ge->m, src, e)) {
        eng_destroy(ge);
        return -1;
    }
    gpu_llama_init_adapters(ge->m, set.seed);

    /* One micro-batch confirms the plan (it runs in the memory planned) and creates the GEMM
     * plans; its gradients are dropped (a zero learning rate step, then the zeroing). */
    const int n = g.B * g.T;
    int32_t *tok = calloc((size_t)n, sizeof *tok), *lab = calloc((size_t)n, sizeof *lab);
    if (!tok || !lab) {
        free(tok), free(lab), eng_destroy(ge);
        return io_fail(e, "out of host memory");
    }
    for (int i = 0; i < n; i++) tok[i] = (int32_t)((uint32_t)i * 2654435761u % (uint32_t)src->config.V), lab[i] = tok[i];
    gpu_llama_set_batch(ge->m, tok, lab);
    gpu_llama_train_micro(ge->m, n, 0.0f, 0);
    const float loss = gpu_llama_loss(ge->m);
    free(tok);
    free(lab);
    if (!isfinite(loss)) {
        eng_destroy(ge);
        return io_fail(e, "the confirmation step gave a non-finite loss (%g): the model's weights hold NaN or Inf",
                       (double)loss);
    }
    gpu_llama_drop_grads(ge->m);
    ge->A = o->grad_accum;
    ge->sharded = shard;
    if (comm->slabs == COMM_DEVICE && (ge->dp = gpu_dp_create(ge->m, comm, gpu_dp_shard_of(&g), e)) == NULL) {
        eng_destroy(ge);
        return -1;
    }

    if (gpu_memory_limit_check(o, total_b, NULL, e)) {
        eng_destroy(ge);
        return -1;
    }
    char fields[400];
    gpu_llama_plan_json_fields(fields, sizeof fields, &plan, 4);
    snprintf(ge->memory_json, sizeof ge->memory_json, "{%s,\"total\":%.4f}", fields, plan.total / GIB);
    char jobs[32] = "";
    if (comm->world > 1) snprintf(jobs, sizeof jobs, "%d × ", comm->world);
    snprintf(ge->name, sizeof ge->name, "gpu (%s%s, %s%s%s%s)", jobs, device, compute_precision_names[set.precision],
             set.precision == COMPUTE_FP8 ? " " : "", set.precision == COMPUTE_FP8 ? fp8_recipe_names[set.fp8_recipe] : "",
             set.base == BASE_FP8 ? ", fp8 base" : "");
    memset(eng, 0, sizeof *eng);
    eng->name = ge->name;
    eng->self = ge;
    eng->flops_per_token = train_flops_per_token(&src->config, g.T, g.mode == LLAMA_FULL);
    eng->peak_flops = peak;
    eng->adapter_scale = g.lora_scale;
    eng->memory_json = ge->memory_json;
    eng->micro_step = eng_micro_step;
    eng->eval = eng_eval;
    eng->optimizer_step = eng_optimizer_step;
    eng->n_tensors = eng_n_tensors;
    eng->tensor_info = eng_tensor_info;
    eng->tensor_read = eng_tensor_read;
    eng->tensor_write = eng_tensor_write;
    eng->base_weight_read = eng_base_weight_read;
    eng->fp8_stats = set.precision == COMPUTE_FP8 ? eng_fp8_stats : NULL;
    eng->gather = shard ? eng_gather : NULL;
    eng->mem_gib = eng_mem_gib;
    eng->destroy = eng_destroy;
    sample_hook_attach(eng, &src->config, &gen_gpu_device, g.mode == LLAMA_FULL); /* --sample-every */
    if (root)
        printf("engine: %s, %.0f TFLOP/s bf16 GEMM measured, %.2f of %.2f GiB planned%s\n", device, peak / 1e12,
               plan.total / GIB, total_b / GIB, comm->world > 1 ? " per GPU" : "");
    return 0;
}
