/* cpu_engine.c — the CPU engine: the training loop's engine interface (train/engine.h) over the
 * reference model (ref/llama), the oracle trainer of refine (//ref:train, cpu_engine.h).
 *
 * The engine (train/engine.h) over ref/llama:
 *   - weights fp32 on the host; trainable tensors: the adapters (LoRA: A, B; DoRA: A, B, m) of the
 *     --targets linears, or every base weight with --method full;
 *   - micro_step: forward to the mean NLL of the micro-batch (times its valid labels: Σ NLL, added
 *     to the step's sum) and backward scaled so that the accumulated gradient is that of the step's
 *     mean loss;
 *   - optimizer_step: the step's Σ NLL (non-finite: no update), global norm (ref_grad_total_norm),
 *     clip (ref_clip_coef, ref_grad_scale), torch-order AdamW per tensor (ref_adamw_step), zeroed
 *     gradients; a non-finite norm names the first tensor with a non-finite gradient and changes
 *     nothing;
 *   - tensors: params "<HF module>.lora_A.weight", ... and optimizer state "<param>.exp_avg",
 *     "<param>.exp_avg_sq" (8-bit: ".state1", ".state2", ".absmax1", ".absmax2") for checkpoints.
 * Adapter init follows PEFT (ref_lora_init: A uniform ±1/√C_in from the seed, B = 0; DoRA m =
 * ‖W‖_row), so step 0 is exactly the base model.
 * Linears run through OpenBLAS sgemm (options.linear), attention in the flash form.
 * QLoRA / QDoRA: the base Linears are NF4 — read from a bitsandbytes 4-bit checkpoint, or quantized
 * here as bitsandbytes quantizes at load (NF4, blocksize 64, double quantization) — and the model
 * computes with their dequantization; the adapters are LoRA/DoRA.
 *
 * Precision (--precision):
 *   auto, fp32  the oracle: weights, dequantized NF4 (bitsandbytes' compute dtype fp32) and
 *               activations in fp32.
 *   bf16        the naive same-precision twin of //gpu:train, rounding where it rounds, so that
 *               the GPU trainer's error against the fp32 run can be bounded by 2× this run's
 *               (STYLE.md, tier (c)):
 *     - activations bf16 (llama_options.act = ACT_BF16: every stored activation is rounded);
 *     - frozen base weights (embedding, lm_head, norms, linears, biases) are rounded to bf16 once
 *       after loading; an NF4 weight becomes bf16_rne(code·absmax), the GPU's dequantization
 *       straight to bf16; DoRA's initial m = ‖W‖_row is taken from that rounded W;
 *     - trainable tensors keep fp32 masters (what AdamW updates, what checkpoints and exports
 *       hold) and the model computes with bf16-rounded compute copies of them: LoRA/DoRA A and B,
 *       or every weight in full fine-tuning (the tied embedding/lm_head is one tensor, one copy);
 *       the DoRA magnitude is used elementwise and has no copy (the model reads the fp32 master).
 *       Gradients are taken with respect to the compute copies and applied to the masters; the
 *       copies are refreshed (refresh_compute) after every optimizer step and whenever a
 *       checkpoint writes a parameter (resume), so the next forward sees round(master).
 *       --master split (full fine-tuning, any precision): each master is kept as the value the
 *       GPU's pair (bf16 copy + low 16 bits, ref/master_pair.h) holds — master_pair_round after
 *       every update, at load and at resume — so both trainers update the same masters.
 *       --master bf16: each master is kept at its bf16 rounding the same way (the GPU keeps the
 *       bf16 weight alone: the update computed in fp32 on it, rounded back); bf16-sr: each
 *       update's result rounded stochastically with the GPU's random bits (ref/master_pair.h).
 *     The compute copies cost one more copy of the trainable parameters (bf16 mode only).
 *   fp8         bf16 as above, and the block linears' products in FP8 (ref/llama.h "FP8 block
 *               linears", NUMERICS.md §6.6), the same-precision twin of //gpu:train --precision fp8:
 *     - frozen base linears are quantized once after the bf16 rounding with the recipe's frozen
 *       rule, and become W_eff = dequant(quant(W)) (what DoRA's row norm, the merged export and the
 *       FP8 products all read); trained weights (full) are quantized from their compute copies
 *       after every optimizer step (and before the first micro-batch, and after a resume);
 *     - the state (ref_llama_fp8_alloc): delayed scaling's amax histories and scales are the
 *       engine tensors "fp8.amax_history" (3·L·7, 1024) and "fp8.scale" (3·L·7), role
 *       ROLE_STATE, so a resumed run continues bitwise; evaluation records nothing;
 *     - optimizer_step: a non-finite value met by a quantization (its flags) fails the step as a
 *       non-finite gradient does, naming the tensor, with nothing updated; else the update, the
 *       step's statistics for the metrics (fp8_stats), the delayed scales' update, the trained
 *       weights' quantization.
 * --base-dtype fp8 under --precision fp32 or bf16: the frozen base linears are W_eff =
 * dequant(quant(W)) (the recipe's frozen rule), the FP8-stored base computed in that precision.
 * A full fine-tune of a 4-bit checkpoint is refused (its base cannot train).
 * --optimizer adamw8bit: bitsandbytes' 8-bit blockwise AdamW (ref/adamw8bit.h, the CUDA kernel's
 * order), its state checkpointed as uint8 codes and block absmax.
 * Not supported here (refused by cpu_engine_check with a message): --dropout > 0.
 *
 * Gradient accumulation and the job's ranks (train/comm.h): the first micro-batch of a step
 * computes its gradient into the zeroed accumulator, every later one into a zeroed second set that
 * is then added, g = ((g_0 + g_1) + g_2) + … — each micro-batch's gradient is computed alone, so
 * that the sum's order is the only thing the arrangement of micro-batches changes. In a job of W
 * ranks, optimizer_step sums the step's Σ NLL and the gradients (one flat buffer) over the ranks in
 * rank order (the MPI job's fixed order): with one micro-batch per rank, W ranks give
 * ((g_0 + g_1) + …) exactly as one process with accumulation W — the same bits. With A > 1 per
 * rank the sums are ((g_0 + g_1) + (g_2 + g_3)) instead of (((g_0 + g_1) + g_2) + g_3): equal up
 * to rounding.
 * --grad-dtype bf16 (full fine-tuning, one process): after each micro-batch the accumulator is
 * rounded to bf16, g = bf16(bf16(g_0) + g_1) + …, where each g_k is the micro-batch's fp32 gradient:
 * one rounding per micro-batch per element, as a bf16 GEMM output accumulating with beta = 1 rounds
 * (acc + C); the norm, the clip and the optimizer then read those values.
 */
#include "trainers/cpu_engine.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/config.h"
#include "io/error.h"
#include "io/model_source.h"
#include "ref/adamw.h"
#include "ref/adamw8bit.h"
#include "ref/bf16.h"
#include "ref/cross_entropy.h"
#include "ref/dora.h"
#include "ref/fp8_linear.h"
#include "ref/llama.h"
#include "ref/nf4.h"
#include "ref/lora.h"
#include "ref/master_pair.h"
#include "train/engine.h"
#include "train/metrics.h"
#include "train/options.h"
#include "trainers/gen_ref.h"
#include "trainers/sample_hook.h"
#include "trainers/settings.h"

/* ---- the engine --------------------------------------------------------------------------- */

struct param {
    char name[200];
    float *data, *grad, *m, *v; /* m, v: AdamW's moments (--optimizer adamw) */
    float *compute;             /* bf16: the rounded copy the model computes with; NULL: uses data */
    struct adamw8bit_state s8; /* --optimizer adamw8bit */
    enum master_storage master; /* --master split: the master is kept as what its pair holds; bf16:
                                   as its bf16 rounding (the weight is bf16); bf16-sr: stochastically */
    uint64_t sr_seed;           /* bf16-sr: the run's seed and the tensor's stream (bf16_sr_tensor_hash) */
    uint32_t sr_tensor;
    int64_t numel;
    int ndim;
    int64_t shape[2];
};

/* One engine tensor: a parameter or a piece of optimizer state, with its storage. */
struct slot {
    struct engine_tensor info;
    struct param *param; /* ROLE_PARAM: the parameter (its compute copy follows a write) */
    void *ptr;
    size_t bytes;
};

struct ref_engine {
    struct model_config cfg;
    struct llama_options lopt;
    struct llama_model model;
    struct llama_weights w, gw;  /* w: base weights (full: the fp32 masters); gw: full's gradients */
    struct llama_adapters a, ga; /* a: adapter masters; ga: adapter gradients */
    int bf16;                    /* --precision bf16 or fp8: bf16 activations, compute copies */
    int fp8_on;                  /* --precision fp8 */
    struct llama_fp8 fp8;        /* its state (model.fp8 points here) */
    int fp8_stale;               /* full: the trained weights' FP8 copies need quantizing */
    struct engine_fp8_stats fp8_last; /* the last optimizer step's statistics */
    struct llama_weights w16;    /* bf16 full fine-tuning: the compute copy of w */
    struct llama_adapters a16;   /* bf16 LoRA/DoRA: compute copies of A and B (mag: a's own) */
    const struct llama_weights *cw;  /* what the model computes with: &w or &w16 */
    const struct llama_adapters *ca; /* &a or &a16 */
    float *slab;
    int n_params;
    struct param *params;
    float **grads;    /* params[i].grad, the list the norm and the clip take */
    int64_t *numels;  /* params[i].numel */
    int adamw8bit;
    int grads_bf16; /* --grad-dtype bf16: the accumulator rounded to bf16 after every micro-batch */
    double nll_sum; /* Σ NLL of the micro-batches since the last optimizer step */
    int micro_in_step; /* micro-batches of the current step so far */
    /* the second gradient set (micro-batches after a step's first), allocated at first use */
    int have_second;
    struct llama_weights gw2;
    struct llama_adapters ga2;
    float **grads2;
    const struct train_comm *comm; /* the job */
    float *flat;                   /* every gradient, packed for the sum over the ranks (world > 1) */
    int64_t flat_n;
    int n_slots;
    struct slot *slots; /* the engine tensors (checkpoint view) */
    struct llama_tensor *all; /* every tensor (base and adapters) for base_weight_read */
    int n_all;
    int B, T;
    char name[96];
};

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "refine: out of memory (%zu × %zu bytes)\n", n, size);
        exit(1);
    }
    return p;
}

static const char *strip_peft_prefix(const char *name) {
    static const char prefix[] = "base_model.model.";
    return strncmp(name, prefix, sizeof prefix - 1) == 0 ? name + sizeof prefix - 1 : name;
}

/* Full fine-tuning under fp8: the trained weights' FP8 copies from their compute copies, when a
 * creation or a resume left them stale (recording their amaxes, not counting statistics). */
static void fp8_refresh_weights(struct ref_engine *r) {
    if (!r->fp8_on || !r->fp8_stale) return;
    ref_llama_fp8_quantize_weights(&r->fp8, &r->cfg, r->cw, FP8_RECORD);
    r->fp8_stale = 0;
}

/* The second gradient set and its list (in the parameters' order), allocated once. */
static void second_set(struct ref_engine *r) {
    if (r->have_second) return;
    const int full = r->lopt.mode == LLAMA_FULL;
    if (full)
        ref_llama_weights_alloc(&r->gw2, &r->cfg);
    else
        ref_llama_adapters_alloc(&r->ga2, &r->cfg, &r->lopt);
    const int n_all = ref_llama_tensors(NULL, &r->cfg, &r->lopt, &r->w, full ? NULL : &r->a);
    struct llama_tensor *gl = xcalloc((size_t)n_all, sizeof *gl);
    ref_llama_tensors(gl, &r->cfg, &r->lopt, full ? &r->gw2 : &r->w, full ? NULL : &r->ga2);
    r->grads2 = xcalloc((size_t)r->n_params, sizeof *r->grads2);
    for (int i = 0, k = 0; i < n_all; i++)
        if (r->all[i].trainable) r->grads2[k++] = gl[i].data;
    free(gl);
    r->have_second = 1;
}

static int eng_micro_step(void *self, const int32_t *tokens, const int32_t *labels, int B, int T, float grad_scale,
                          uint64_t micro_index, struct io_err *e) {
    (void)micro_index; /* no dropout in the reference engine */
    struct ref_engine *r = self;
    if (B != r->B || T != r->T) return io_fail(e, "reference engine planned for %d×%d, got %d×%d", r->B, r->T, B, T);
    const int64_t valid = ref_cross_entropy_count_valid(labels, B * T);
    if (valid == 0) return 0;
    /* The model's loss is the mean over n_valid_total; this micro-batch's count makes it the
     * micro-batch mean, so Σ NLL = loss·valid and the gradient of the step's mean is
     * (grad_scale·valid) × the gradient of the micro-batch mean. */
    struct llama_batch b = {B, T, tokens, labels, NULL, valid};
    fp8_refresh_weights(r);
    r->nll_sum += ref_llama_forward(&r->model, r->cw, r->ca, &b, r->slab, NULL) * (double)valid;
    /* gradients with respect to the tensors the forward used (bf16: the compute copies); the step's
     * first micro-batch into the accumulator, the others alone, then added (the header's order) */
    const int full = r->lopt.mode == LLAMA_FULL, first = r->micro_in_step++ == 0;
    if (!first) {
        second_set(r);
        for (int i = 0; i < r->n_params; i++) memset(r->grads2[i], 0, (size_t)r->numels[i] * sizeof(float));
    }
    ref_llama_backward(&r->model, r->cw, r->ca, &b, r->slab, full ? (first ? &r->gw : &r->gw2) : NULL,
                       full ? NULL : (first ? &r->ga : &r->ga2), (float)((double)grad_scale * (double)valid));
    if (!first)
        for (int i = 0; i < r->n_params; i++) {
            float *g = r->grads[i];
            const float *h = r->grads2[i];
            for (int64_t j = 0; j < r->numels[i]; j++) g[j] = g[j] + h[j];
        }
    if (r->grads_bf16)
        for (int i = 0; i < r->n_params; i++) bf16_round_array(r->grads[i], r->grads[i], r->numels[i]);
    return 0;
}

static int eng_eval(void *self, const int32_t *tokens, const int32_t *labels, int B, int T, double *nll_sum,
                    struct io_err *e) {
    struct ref_engine *r = self;
    if (B != r->B || T != r->T) return io_fail(e, "reference engine planned for %d×%d, got %d×%d", r->B, r->T, B, T);
    const int64_t valid = ref_cross_entropy_count_valid(labels, B * T);
    *nll_sum = 0.0;
    if (valid == 0) return 0;
    struct llama_batch b = {B, T, tokens, labels, NULL, valid};
    fp8_refresh_weights(r);
    if (r->fp8_on) r->fp8.recording = FP8_DISCARD; /* evaluation never changes the FP8 state */
    *nll_sum = ref_llama_forward(&r->model, r->cw, r->ca, &b, r->slab, NULL) * (double)valid;
    if (r->fp8_on) r->fp8.recording = FP8_RECORD;
    return 0;
}

/* bf16: the compute copy of p becomes its master rounded to bf16 (what the GPU's optimizer writes
 * beside the fp32 master). A no-op for tensors without a copy and in fp32. --master split: the
 * master first becomes the value its pair (bf16 copy, low half) holds (ref/master_pair.h), which
 * is what the GPU keeps — in fp32 too, where it is the oracle of the split run; --master bf16: the
 * master becomes its bf16 rounding (the GPU keeps the bf16 weight alone); --master bf16-sr: after
 * update `step` (≥ 1) its stochastic rounding (ref/master_pair.h bf16_sr, keyed by the run's seed,
 * the step and the tensor's name), at load and resume (step 0) the nearest. */
static void refresh_compute(const struct param *p, int64_t step) {
    master_storage_round_array(p->data, p->numel, p->master, p->sr_seed, step, p->sr_tensor);
    if (p->compute) bf16_round_array(p->compute, p->data, p->numel);
}

static void zero_grads(struct ref_engine *r) {
    for (int i = 0; i < r->n_params; i++) memset(r->grads[i], 0, (size_t)r->numels[i] * sizeof(float));
}

/* The step's Σ NLL and gradients summed over the job's ranks (rank order; nothing for one rank). */
static int reduce_over_ranks(struct ref_engine *r, struct io_err *e) {
    if (r->comm->world == 1) return 0;
    if (r->comm->sum(r->comm->self, &r->nll_sum, 1, COMM_F64, "the step's loss", e) != 0) return -1;
    if (r->flat == NULL) {
        for (int i = 0; i < r->n_params; i++) r->flat_n += r->numels[i];
        r->flat = xcalloc((size_t)r->flat_n, sizeof(float));
    }
    float *at = r->flat;
    for (int i = 0; i < r->n_params; at += r->numels[i], i++)
        memcpy(at, r->grads[i], (size_t)r->numels[i] * sizeof(float));
    if (r->comm->all_reduce(r->comm->self, r->flat, r->flat_n, COMM_F32, NULL, "the gradients", e) != 0) return -1;
    at = r->flat;
    for (int i = 0; i < r->n_params; at += r->numels[i], i++)
        memcpy(r->grads[i], at, (size_t)r->numels[i] * sizeof(float));
    return 0;
}

static int eng_optimizer_step(void *self, const struct optim_step *h, double *nll_sum, double *grad_norm,
                              struct io_err *e) {
    struct ref_engine *r = self;
    r->micro_in_step = 0;
    if (reduce_over_ranks(r, e) != 0) return -1;
    *nll_sum = r->nll_sum;
    r->nll_sum = 0.0;
    if (!isfinite(*nll_sum)) {
        zero_grads(r);
        return 0;
    }
    const int flagged = r->fp8_on ? ref_llama_fp8_first_flagged(&r->fp8) : -1;
    if (flagged >= 0) { /* a non-finite value met by a quantization: as a non-finite gradient */
        char what[160];
        llama_fp8_row_describe(what, sizeof what, r->cfg.L, flagged);
        zero_grads(r);
        return io_fail(e, "FP8: %s held a non-finite value (flags %#x); nothing was updated", what,
                       r->fp8.flags[flagged]);
    }
    const float total = ref_grad_total_norm((const float *const *)r->grads, r->numels, r->n_params);
    *grad_norm = total;
    int rc = 0;
    if (!isfinite(total)) {
        for (int i = 0; i < r->n_params && rc == 0; i++)
            for (int64_t j = 0; j < r->params[i].numel; j++)
                if (!isfinite(r->params[i].grad[j])) {
                    rc = io_fail(e, "gradient of %s is not finite (element %" PRId64 ")", r->params[i].name, j);
                    break;
                }
        if (rc == 0) rc = io_fail(e, "the gradient norm is not finite");
    }
    if (rc == 0) {
        if (h->clip > 0) {
            ref_grad_scale(r->grads, r->numels, r->n_params, ref_clip_coef(total, h->clip));
        }
        struct adamw8bit_hparams h8 = adamw8bit_defaults();
        h8.hp = h->hp;
        for (int i = 0; i < r->n_params; i++) {
            struct param *p = &r->params[i];
            if (r->adamw8bit) {
                p->s8.step = (int)h->step - 1; /* the loop's step count: a resumed state continues it */
                adamw8bit_step(&p->s8, p->data, p->grad, &h8);
            } else {
                ref_adamw_step(p->data, p->m, p->v, p->grad, p->numel, h->step, &h->hp);
            }
            refresh_compute(p, h->step);
        }
        if (r->fp8_on) {
            float lo, hi;
            ref_llama_fp8_scale_range(&r->fp8, r->lopt.mode, &lo, &hi);
            r->fp8_last = (struct engine_fp8_stats){lo, hi, (long long)r->fp8.saturated};
            ref_llama_fp8_step_end(&r->fp8);
            if (r->lopt.mode == LLAMA_FULL) ref_llama_fp8_quantize_weights(&r->fp8, &r->cfg, r->cw, FP8_RECORD);
        }
    }
    zero_grads(r);
    return rc;
}

static int eng_fp8_stats(void *self, struct engine_fp8_stats *s) {
    *s = ((struct ref_engine *)self)->fp8_last;
    return 0;
}

static int eng_n_tensors(void *self) { return ((struct ref_engine *)self)->n_slots; }

static int eng_tensor_info(void *self, int i, struct engine_tensor *info) {
    *info = ((struct ref_engine *)self)->slots[i].info;
    return 0;
}

static int eng_tensor_read(void *self, int i, void *host, struct io_err *e) {
    (void)e;
    const struct slot *sl = &((struct ref_engine *)self)->slots[i];
    memcpy(host, sl->ptr, sl->bytes);
    return 0;
}

static int eng_tensor_write(void *self, int i, const void *host, struct io_err *e) {
    (void)e;
    struct ref_engine *r = self;
    const struct slot *sl = &r->slots[i];
    memcpy(sl->ptr, host, sl->bytes);
    if (sl->param) refresh_compute(sl->param, 0); /* a resumed master: the next forward sees it */
    if (sl->param && r->fp8_on && r->lopt.mode == LLAMA_FULL) r->fp8_stale = 1; /* and its FP8 copy */
    return 0;
}

static void add_slot(struct ref_engine *r, struct param *p, const char *suffix, enum engine_tensor_role role,
                     enum st_dtype dtype, int64_t n, void *ptr) {
    struct slot *sl = &r->slots[r->n_slots++];
    memset(sl, 0, sizeof *sl);
    snprintf(sl->info.name, sizeof sl->info.name, "%s%s", p->name, suffix);
    sl->info.role = role;
    sl->info.dtype = dtype;
    sl->param = role == ROLE_PARAM ? p : NULL;
    if (role == ROLE_PARAM || n == p->numel) {
        sl->info.ndim = p->ndim;
        sl->info.shape[0] = p->shape[0];
        sl->info.shape[1] = p->shape[1];
    } else {
        sl->info.ndim = 1;
        sl->info.shape[0] = n;
    }
    sl->ptr = ptr;
    sl->bytes = (size_t)n * (dtype == ST_U8 ? 1 : 4);
}

/* Parameters first, then each parameter's optimizer state: AdamW's exp_avg / exp_avg_sq, or the
 * 8-bit state (codes state1/state2 and their block absmax, as bitsandbytes names them; fp32
 * moments for tensors below its 8-bit threshold). */
static void build_slots(struct ref_engine *r) {
    r->slots = xcalloc((size_t)r->n_params * 5 + 2, sizeof *r->slots);
    r->grads = xcalloc((size_t)r->n_params, sizeof *r->grads);
    r->numels = xcalloc((size_t)r->n_params, sizeof *r->numels);
    for (int i = 0; i < r->n_params; i++) r->grads[i] = r->params[i].grad, r->numels[i] = r->params[i].numel;
    for (int i = 0; i < r->n_params; i++) {
        struct param *p = &r->params[i];
        add_slot(r, p, "", ROLE_PARAM, ST_F32, p->numel, p->data);
    }
    for (int i = 0; i < r->n_params; i++) {
        struct param *p = &r->params[i];
        if (!r->adamw8bit) {
            add_slot(r, p, ".exp_avg", ROLE_OPTIM, ST_F32, p->numel, p->m);
            add_slot(r, p, ".exp_avg_sq", ROLE_OPTIM, ST_F32, p->numel, p->v);
        } else if (p->s8.is_8bit) {
            const int64_t nb = adamw8bit_n_blocks(p->numel);
            add_slot(r, p, ".state1", ROLE_OPTIM, ST_U8, p->numel, p->s8.q1);
            add_slot(r, p, ".state2", ROLE_OPTIM, ST_U8, p->numel, p->s8.q2);
            add_slot(r, p, ".absmax1", ROLE_OPTIM, ST_F32, nb, p->s8.absmax1);
            add_slot(r, p, ".absmax2", ROLE_OPTIM, ST_F32, nb, p->s8.absmax2);
        } else {
            add_slot(r, p, ".exp_avg", ROLE_OPTIM, ST_F32, p->numel, p->s8.m);
            add_slot(r, p, ".exp_avg_sq", ROLE_OPTIM, ST_F32, p->numel, p->s8.v);
        }
    }
    if (r->fp8_on && r->fp8.recipe == FP8_RECIPE_DELAYED) {
        /* delayed scaling's state (the current and block recipes keep none between steps) */
        struct slot *h = &r->slots[r->n_slots++], *sc = &r->slots[r->n_slots++];
        memset(h, 0, sizeof *h);
        memset(sc, 0, sizeof *sc);
        snprintf(h->info.name, sizeof h->info.name, "fp8.amax_history");
        snprintf(sc->info.name, sizeof sc->info.name, "fp8.scale");
        h->info.role = sc->info.role = ROLE_STATE;
        h->info.dtype = sc->info.dtype = ST_F32;
        h->info.ndim = 2, h->info.shape[0] = r->fp8.n, h->info.shape[1] = r->fp8.history_len;
        sc->info.ndim = 1, sc->info.shape[0] = r->fp8.n;
        h->ptr = r->fp8.history, h->bytes = (size_t)r->fp8.n * (size_t)r->fp8.history_len * sizeof(float);
        sc->ptr = r->fp8.scale, sc->bytes = (size_t)r->fp8.n * sizeof(float);
    }
}

static int eng_base_weight_read(void *self, const char *hf_name, float *host, struct io_err *e) {
    struct ref_engine *r = self;
    for (int i = 0; i < r->n_all; i++)
        if (strcmp(strip_peft_prefix(r->all[i].name), hf_name) == 0) {
            memcpy(host, r->all[i].data, (size_t)r->all[i].numel * sizeof(float));
            return 0;
        }
    if (strcmp(hf_name, "lm_head.weight") == 0 && r->cfg.tie_word_embeddings)
        return eng_base_weight_read(self, "model.embed_tokens.weight", host, e);
    return io_fail(e, "the model has no weight %s", hf_name);
}

static double eng_mem_gib(void *self) {
    struct ref_engine *r = self;
    return (double)ref_llama_slab_floats(&r->model) * 4.0 / (1024.0 * 1024.0 * 1024.0);
}

/* bf16 LoRA/DoRA: the compute copies of the adapters — A and B of their own, filled by
 * refresh_compute; the DoRA magnitude is the master's own vector (elementwise, never rounded). */
static void alloc_compute_adapters(struct ref_engine *r) {
    struct llama_options ab_only = r->lopt;
    ab_only.mode = LLAMA_LORA; /* allocates A and B of every target, no magnitude */
    ref_llama_adapters_alloc(&r->a16, &r->cfg, &ab_only);
    for (int l = 0; l < r->cfg.L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) r->a16.layers[l][t].mag = r->a.layers[l][t].mag;
}

static void free_compute_adapters(struct llama_adapters *a16, const struct model_config *c) {
    for (int l = 0; l < c->L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) a16->layers[l][t].mag = NULL; /* the master's */
    ref_llama_adapters_free(a16, c);
}

static void eng_destroy(void *self) {
    struct ref_engine *r = self;
    for (int i = 0; i < r->n_params; i++) {
        free(r->params[i].m);
        free(r->params[i].v);
        if (r->adamw8bit) adamw8bit_free(&r->params[i].s8);
    }
    free(r->slots);
    free(r->grads);
    free(r->grads2);
    free(r->flat);
    if (r->have_second) {
        if (r->lopt.mode == LLAMA_FULL)
            ref_llama_weights_free(&r->gw2, &r->cfg);
        else
            ref_llama_adapters_free(&r->ga2, &r->cfg);
    }
    free(r->numels);
    free(r->params);
    free(r->all);
    free(r->slab);
    if (r->lopt.mode == LLAMA_FULL) {
        ref_llama_weights_free(&r->gw, &r->cfg);
        if (r->bf16) ref_llama_weights_free(&r->w16, &r->cfg);
    } else {
        if (r->bf16) free_compute_adapters(&r->a16, &r->cfg);
        ref_llama_adapters_free(&r->a, &r->cfg);
        ref_llama_adapters_free(&r->ga, &r->cfg);
    }
    ref_llama_weights_free(&r->w, &r->cfg);
    if (r->fp8_on) ref_llama_fp8_free(&r->fp8);
    ref_llama_free(&r->model);
    free(r);
}

/* QLoRA on a plain checkpoint: the base Linear is quantized as bitsandbytes does when it loads a
 * model with load_in_4bit (NF4, blocksize 64, double quantization of the absmax with the signed
 * dynamic map, blocks of 256), and the training computes with its dequantization. */
static int nf4_round_trip(float *w, int64_t n, struct io_err *e) {
    const int64_t nb = nf4_n_blocks(n, NF4_BLOCKSIZE), nb2 = (nb + NF4_NESTED_BLOCKSIZE - 1) / NF4_NESTED_BLOCKSIZE;
    uint8_t *packed = malloc((size_t)nf4_packed_bytes(n)), *absmax_q = malloc((size_t)nb);
    float *absmax2 = malloc((size_t)nb2 * sizeof(float));
    if (!packed || !absmax_q || !absmax2) {
        free(packed), free(absmax_q), free(absmax2);
        return io_fail(e, "out of memory quantizing a weight to NF4");
    }
    float code2[256], offset;
    nf4_quantize_nested(packed, absmax_q, absmax2, &offset, code2, w, n);
    nf4_dequantize_nested(w, packed, absmax_q, absmax2, offset, code2, n, ACT_F32);
    free(packed), free(absmax_q), free(absmax2);
    return 0;
}

static int load_base_weights(struct ref_engine *r, const struct model_source *src, int quantize_nf4,
                             struct io_err *e) {
    const struct model_config *c = &r->cfg;
    if (model_source_weight_f32(src, MW_EMBED, -1, r->w.embed, e)) return -1;
    if (model_source_weight_f32(src, MW_FINAL_NORM, -1, r->w.final_norm, e)) return -1;
    if (!c->tie_word_embeddings && model_source_weight_f32(src, MW_LM_HEAD, -1, r->w.lm_head, e)) return -1;
    for (int l = 0; l < c->L; l++) {
        struct llama_layer *ly = &r->w.layers[l];
        if (model_source_weight_f32(src, MW_ATTN_NORM, l, ly->attn_norm, e)) return -1;
        if (model_source_weight_f32(src, MW_MLP_NORM, l, ly->mlp_norm, e)) return -1;
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            const struct bnb4_weight *bnb = model_source_bnb(src, llama_linears[t].weight, l);
            int co, ci;
            llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
            if (bnb) {
                if (nf4_dequantize_bnb(ly->w[t], bnb, (int64_t)co * ci, ACT_F32, e)) return -1;
            } else {
                if (model_source_weight_f32(src, llama_linears[t].weight, l, ly->w[t], e)) return -1;
                if (quantize_nf4 && nf4_round_trip(ly->w[t], (int64_t)co * ci, e)) return -1;
            }
            if (ly->bias[t] && model_source_weight_f32(src, llama_linears[t].bias, l, ly->bias[t], e)) return -1;
        }
    }
    return 0;
}

/* bf16: every frozen base weight stored as the GPU stores it, rounded to bf16 once. For an NF4
 * weight (dequantized to fp32 above) this is bf16_rne(code·absmax): the GPU's dequantization
 * straight to bf16. */
static void round_base_weights(struct ref_engine *r) {
    const int n = ref_llama_tensors(NULL, &r->cfg, &r->lopt, &r->w, NULL);
    struct llama_tensor *list = xcalloc((size_t)n, sizeof *list);
    ref_llama_tensors(list, &r->cfg, &r->lopt, &r->w, NULL);
    for (int i = 0; i < n; i++) bf16_round_array(list[i].data, list[i].data, list[i].numel);
    free(list);
}

/* --base-dtype fp8 outside --precision fp8: every frozen linear becomes dequant(quant(W)) under the
 * recipe's frozen rule (the FP8-stored base, computed in fp32 or bf16). */
static void fp8_base_round_trip(struct ref_engine *r, enum fp8_recipe recipe) {
    const enum fp8_rule rule = fp8_rule_for(recipe, FP8_ROLE_W, FP8_WEIGHT_FROZEN);
    for (int l = 0; l < r->cfg.L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            int co, ci;
            llama_linear_shape(&r->cfg, (enum llama_linear)t, &co, &ci);
            struct fp8_operand q = {xcalloc((size_t)co * (size_t)ci, 1),
                                    xcalloc((size_t)fp8_operand_scale_count(fp8_rule_scaling(rule), co, ci), sizeof(float)),
                                    FP8_SCALING_TENSOR, FP8_E4M3, 0, 0};
            ref_fp8_quantize(&q, NULL, NULL, NULL, r->w.layers[l].w[t], co, ci, FP8_E4M3, rule, 0.0f);
            ref_fp8_dequantize_operand(r->w.layers[l].w[t], &q);
            free(q.q);
            free(q.s_inv);
        }
}

int cpu_engine_create(struct train_engine *eng, struct train_options *o, const struct model_source *src,
                      int max_micro_batch, const struct train_comm *comm, struct io_err *e) {
    (void)max_micro_batch; /* --auto-batch plans GPU memory; the CPU trainer takes --micro-batch as given */
    struct model_settings s;
    model_settings_from_options(&s, o, COMPUTE_FP32); /* auto: the oracle */
    struct ref_engine *r = xcalloc(1, sizeof *r);
    r->cfg = src->config;
    r->comm = comm;
    r->B = s.B;
    r->T = s.T;
    ref_llama_options_default(&r->lopt);
    r->lopt.mode = s.mode;
    r->lopt.targets = s.targets;
    r->lopt.R = s.R;
    r->lopt.alpha = s.alpha;
    r->lopt.scaling = s.scaling;
    r->bf16 = s.precision == COMPUTE_BF16 || s.precision == COMPUTE_FP8;
    r->fp8_on = s.precision == COMPUTE_FP8;
    r->lopt.act = r->bf16 ? ACT_BF16 : ACT_F32;
    r->lopt.recompute = s.recompute;
    r->lopt.linear = LINEAR_BLAS;
    r->adamw8bit = s.optimizer == OPTIMIZER_ADAMW8BIT;
    r->grads_bf16 = s.grads == GRAD_BF16; /* --method full only (train/options.c) */
    if (settings_check_ranks(o, comm->world > 1, e)) {
        free(r);
        return -1;
    }
    ref_llama_init(&r->model, &r->cfg, &r->lopt, r->B, r->T, r->T);
    ref_llama_weights_alloc(&r->w, &r->cfg);
    if (load_base_weights(r, src, s.base == BASE_NF4, e)) {
        free(r);
        return -1;
    }
    const int full = r->lopt.mode == LLAMA_FULL;
    /* bf16: frozen weights rounded once (before DoRA's m = ‖W‖_row, taken from what the model
     * holds); trained weights keep their loaded fp32 values as masters and get a compute copy */
    if (r->bf16 && !full) round_base_weights(r);
    if (r->fp8_on) { /* the FP8 state; frozen linears become W_eff = dequant(quant(W)) */
        ref_llama_fp8_alloc(&r->fp8, &r->cfg, &r->lopt, r->B * r->T, s.fp8_recipe);
        r->model.fp8 = &r->fp8;
        if (!full) ref_llama_fp8_freeze_weights(&r->fp8, &r->cfg, &r->w);
        r->fp8_stale = full;
    } else if (s.base == BASE_FP8 && !full) {
        fp8_base_round_trip(r, s.fp8_recipe);
    }
    if (full) {
        ref_llama_weights_alloc(&r->gw, &r->cfg);
        if (r->bf16) ref_llama_weights_alloc(&r->w16, &r->cfg);
    } else {
        ref_llama_adapters_alloc(&r->a, &r->cfg, &r->lopt);
        ref_llama_adapters_alloc(&r->ga, &r->cfg, &r->lopt);
        ref_llama_adapters_init(&r->a, &r->cfg, &r->lopt, s.seed);
        if (r->bf16) alloc_compute_adapters(r);
        for (int l = 0; l < r->cfg.L; l++)
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                struct llama_adapter *ad = &r->a.layers[l][t];
                if (!ad->mag) continue;
                int co, ci;
                llama_linear_shape(&r->cfg, (enum llama_linear)t, &co, &ci);
                ref_dora_weight_norm(ad->mag, r->w.layers[l].w[t], ad->a, ad->b, ci, co, r->lopt.R, 0.0f);
            }
    }
    r->cw = r->bf16 && full ? &r->w16 : &r->w;
    r->ca = r->bf16 && !full ? &r->a16 : &r->a;
    /* the parameter table: trainable tensors of the model with their gradient and compute twins
     * (the three lists come in the same order) */
    const int n_all = ref_llama_tensors(NULL, &r->cfg, &r->lopt, &r->w, full ? NULL : &r->a);
    r->all = xcalloc((size_t)n_all, sizeof *r->all);
    struct llama_tensor *gl = xcalloc((size_t)n_all, sizeof *gl), *cl = xcalloc((size_t)n_all, sizeof *cl);
    r->n_all = ref_llama_tensors(r->all, &r->cfg, &r->lopt, &r->w, full ? NULL : &r->a);
    ref_llama_tensors(gl, &r->cfg, &r->lopt, full ? &r->gw : &r->w, full ? NULL : &r->ga);
    ref_llama_tensors(cl, &r->cfg, &r->lopt, r->cw, full ? NULL : r->ca);
    r->params = xcalloc((size_t)n_all, sizeof *r->params);
    for (int i = 0; i < n_all; i++) {
        if (!r->all[i].trainable) continue;
        struct param *p = &r->params[r->n_params++];
        snprintf(p->name, sizeof p->name, "%s", strip_peft_prefix(r->all[i].name));
        p->data = r->all[i].data;
        p->grad = gl[i].data;
        p->compute = cl[i].data != p->data ? cl[i].data : NULL; /* fp32, DoRA's m: none */
        p->numel = r->all[i].numel;
        p->ndim = r->all[i].ndim;
        p->shape[0] = r->all[i].shape[0];
        p->shape[1] = r->all[i].shape[1];
        p->master = s.master; /* not fp32: full fine-tuning only (train/options.c) */
        p->sr_seed = s.seed;
        p->sr_tensor = bf16_sr_tensor_hash(p->name);
        refresh_compute(p, 0);
        if (r->adamw8bit) {
            adamw8bit_init(&p->s8, p->numel, ADAMW8BIT_MIN_8BIT_SIZE);
        } else {
            p->m = xcalloc((size_t)p->numel, sizeof(float));
            p->v = xcalloc((size_t)p->numel, sizeof(float));
        }
    }
    free(gl);
    free(cl);
    if (r->n_params == 0) {
        eng_destroy(r);
        return io_fail(e, "nothing to train: --targets selects no linear layer");
    }
    const int fp8_bad = r->fp8_on ? ref_llama_fp8_first_flagged(&r->fp8) : -1;
    if (fp8_bad >= 0) { /* the FP8 cast would clamp an Inf silently */
        char what[160];
        llama_fp8_row_describe(what, sizeof what, r->cfg.L, fp8_bad);
        eng_destroy(r);
        return io_fail(e, "FP8: %s holds a NaN or an Inf (the model's weights must be finite)", what);
    }
    build_slots(r);
    r->slab = xcalloc(ref_llama_slab_floats(&r->model), sizeof(float));

    memset(eng, 0, sizeof *eng);
    snprintf(r->name, sizeof r->name, "ref (CPU, %s%s%s%s)", compute_precision_names[s.precision],
             r->fp8_on ? " " : "", r->fp8_on ? fp8_recipe_names[s.fp8_recipe] : "",
             s.base == BASE_FP8 ? ", fp8 base" : "");
    eng->name = r->name;
    eng->self = r;
    eng->flops_per_token = train_flops_per_token(&r->cfg, r->T, full);
    eng->peak_flops = 0.0;
    eng->adapter_scale = s.lora_scale;
    eng->micro_step = eng_micro_step;
    eng->eval = eng_eval;
    eng->optimizer_step = eng_optimizer_step;
    eng->n_tensors = eng_n_tensors;
    eng->tensor_info = eng_tensor_info;
    eng->tensor_read = eng_tensor_read;
    eng->tensor_write = eng_tensor_write;
    eng->base_weight_read = eng_base_weight_read;
    eng->fp8_stats = r->fp8_on ? eng_fp8_stats : NULL;
    eng->mem_gib = eng_mem_gib;
    eng->destroy = eng_destroy;
    sample_hook_attach(eng, &src->config, &gen_ref_device, full); /* --sample-every */
    return 0;
}

int cpu_engine_check(const struct train_options *o, struct io_err *e) {
    if (o->offload || o->recompute_mlp || o->keep_mlp_input || o->keep_norms || o->mlp_chunk > 0 ||
        o->recompute_keep != 0 || o->memory_limit > 0 || o->nvtx)
        return io_fail(e, "--%s places or traces GPU memory; //ref:train computes on the CPU (use //gpu:train)",
                       o->offload              ? "offload"
                       : o->recompute_mlp      ? "recompute-mlp"
                       : o->keep_mlp_input     ? "keep-mlp-input"
                       : o->keep_norms         ? "keep-norms"
                       : o->mlp_chunk > 0      ? "mlp-chunk"
                       : o->recompute_keep != 0 ? "recompute-keep"
                       : o->memory_limit > 0 ? "memory-limit"
                                             : "nvtx");
    if (o->dropout > 0.0f)
        return io_fail(e, "--dropout %g: the CPU reference trainer has no adapter dropout (use --dropout 0, or "
                          "//gpu:train)",
                       (double)o->dropout);
    return 0;
}
