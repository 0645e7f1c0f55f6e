/* llama.h — the Llama model on one GPU for training: full fine-tuning, LoRA, DoRA, QLoRA and
 * QDoRA, BF16 compute, fp32 master weights and optimizer state; ref/llama.h is its oracle.
 *
 * Model (the math of ref/llama.h with act = ACT_BF16: every activation is stored in bf16 where
 * ref/ rounds, products accumulate in fp32), N = B·T rows:
 *   x0 = embed[ids]; per layer: n1 = rmsnorm(x); q, k, v = n1 W{q,k,v}ᵀ (+ bias, Qwen2) with
 *   adapters; rope(q, k); att = flash attention (causal, GQA); h = x + att Woᵀ; n2 = rmsnorm(h);
 *   mlp = swiglu(n2 Wgᵀ, n2 Wuᵀ); x' = h + mlp Wdᵀ; then nf = rmsnorm(x_L) and the lm_head fused
 *   with the cross-entropy in row chunks (gpu/cross_entropy.h: the loss and d nf come out of one
 *   pass, the (N, V) logits never exist). Ops: gpu/{embedding, rmsnorm, gemm, lora, dora, rope,
 *   attention, swiglu, cross_entropy, nf4, dropout, adamw, adamw8bit}.h, each parity-tested.
 * Storage:
 *   frozen base weights  bf16 (GPU_BASE_BF16), or NF4 with double-quantized absmax (GPU_BASE_NF4:
 *                        QLoRA / QDoRA), dequantized per layer just in time into ONE reused bf16
 *                        buffer (forward, and again in backward unless the layer is still there),
 *                        or FP8 E4M3 codes with the frozen weights' scales (GPU_BASE_FP8,
 *                        --base-dtype fp8: 1 byte a weight; dequantized the same way for bf16
 *                        products, its Wᵀ formed a layer at a time for FP8 products);
 *   trainable tensors    fp32 master + bf16 compute copy (the DoRA magnitude has no copy: it is
 *                        used elementwise in fp32) — or, full fine-tuning with master MASTER_SPLIT,
 *                        the copy and the master's low 16 bits (ref/master_pair.h: the same fp32
 *                        values in 4 bytes), with MASTER_BF16 the copy alone, fp32 gradients (ACCUMULATE over micro-batches; full
 *                        fine-tuning's bf16 with grads GRAD_BF16, NUMERICS.md §5.6),
 *                        AdamW moments fp32, or bitsandbytes-style 8-bit blockwise states;
 *   activations          bf16 (the normalized layer inputs n1, n2 are recomputed in backward from
 *                        the saved input and h: one RMSNorm pass each instead of two (N, C) a layer),
 *                        planned per --recompute policy:
 *                          NONE  every layer's saved set (as ref/llama without recompute);
 *                          ATTN  the attention part (q, k, v, attention output and its lse, the
 *                                q/k/v adapters' intermediates) is one shared set, recomputed from
 *                                the layer's input before its backward;
 *                          LAYER only each layer's input is kept; the layer is re-run from it
 *                                before its backward (ref/llama's recompute).
 *                        Recomputation runs the same kernels on the same inputs: bit-identical.
 *                        GPU_MLP_INPUT_RECOMPUTED (--recompute-mlp) keeps no MLP input:
 *                        swiglu(gate, up) is recomputed before the down projection's backward —
 *                        by the pass of LoRA's down adapter joined to SwiGLU's backward where it
 *                        runs (it reads gate and up anyway: 2 bytes an element written instead
 *                        of a SwiGLU forward's 6 moved), else by SwiGLU's forward first —
 *                        or by nothing under FP8 full fine-tuning with per-tensor scaling and
 *                        nothing recomputed, whose weight gradients read the forward's kept
 *                        transposed codes of it (llama_internal.h gl_fp8_inputs_kept).
 *                        The recomputation of LAYER stops at the MLP input: the down projection's
 *                        output is not needed by the backward (a LoRA's intermediate u is formed
 *                        alone; DoRA, whose backward reads the product, runs it whole), so the
 *                        step runs one base product a layer less. The last layer is never
 *                        recomputed: the shared set still holds its forward's values, nor are
 *                        the recompute_keep top layers (their own sets, below).
 *                        mlp_chunk: under LAYER the MLP runs in token chunks (below).
 * FP8 (options.linears = GPU_LINEAR_FP8; NUMERICS.md §6.6, ref/llama.h "FP8 block linears" the
 * oracle): the block linears' products on E4M3/E5M2 operands under options.fp8_recipe; each
 * linear's weight codes (and the K-major Wᵀ copy) are stored for trained weights and a bf16 base
 * (which then holds W_eff = dequant(quant(W))), formed a layer at a time for NF4 and FP8-stored
 * bases and, with --recompute layer, for trained weights (the same codes and records; the cast
 * after each step keeps the records); per-tensor state (delayed histories, scales, amaxes, flags) and the scratch operands are
 * rows of the layout; a step's FP8 statistics and its guard ride on the step's one wait.
 * Training micro-steps run as CUDA graphs where every launch is fixed by the step's scalars and
 * the host's layer caches (NF4, FP8 codes; captured at a key's second use; not with dropout,
 * offload, timing, NVTX or data-parallel hooks; REFINE_CUDA_GRAPHS=0 turns them off): the same
 * kernels, the same bits.
 * Memory is planned, not discovered: gpu_llama_plan_bytes counts every byte the model will hold
 * from (config, options) with the same layout code that build_gpu_llama then carves its slabs
 * with (weights, parameters, gradients, optimizer state, activations, scratch), so the plan and
 * the allocation cannot disagree. No device memory is allocated after build; the first step
 * creates the cuBLASLt plans of its shapes (host memory, once: //gpu:train does it in the step that
 * confirms the plan). A step enqueues work on one stream and the host waits for the device once,
 * at its end (gpu_llama_optimizer_step reads the step's summed loss and gradient norm together):
 * micro-batches keep their losses on the device, the optimizers read the clip coefficient there,
 * and gpu_llama_set_batch stages through two pinned buffers, waiting only for the copy made from
 * the same buffer two batches before (queued ahead of a whole micro-batch of work). gpu_llama_loss
 * (evaluation, tests) waits for the queue.
 * Adapters follow PEFT: targets of o.targets, scale s = o.lora_scale; dropout p (LoRA only) from a
 * counter-based mask keyed (seed, micro_index, layer, target) and regenerated in backward, so no
 * mask is stored and a resumed run draws the same masks.
 * Tensor names (checkpoints, exports) are those of train/engine.h: adapters
 * "model.layers.3.self_attn.q_proj.lora_A.weight", ".lora_B.weight", ".lora_magnitude_vector";
 * full fine-tuning the HF weight names; optimizer state "<param>.exp_avg", ".exp_avg_sq"
 * (8-bit: ".state1", ".state2", ".absmax1", ".absmax2").
 * Errors: CUDA failures are CHECKs (exit 2, gpu/cuda_check.h); what the user can cause (a model
 * that does not fit, a shape the kernels do not support, a bad checkpoint tensor) is an io_err.
 * Not thread-safe. All host pointers below are host memory; device memory is the model's own.
 */
#ifndef REFINE_GPU_LLAMA_H
#define REFINE_GPU_LLAMA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "io/config.h"
#include "io/error.h"
#include "io/model_source.h"
#include "ref/adamw.h" /* enum optimizer_kind, struct optim_step */
#include "ref/master_pair.h" /* enum master_storage */
#include "ref/llama.h" /* enum llama_mode, enum recompute_policy; io/family.h: enum llama_linear */

#ifdef __cplusplus
extern "C" {
#endif

/* How the frozen base linears are stored: bf16, NF4, or FP8 E4M3 codes with the frozen weights'
 * scales of the recipe (ref/fp8_linear.h: per tensor with a power-of-two scale, or 128×128 blocks). */
enum gpu_base_storage { GPU_BASE_BF16 = 0, GPU_BASE_NF4 = 1, GPU_BASE_FP8 = 2 };
/* The block linears' products: bf16, or FP8 (NUMERICS.md §6.6; "FP8" below). */
enum gpu_linear_precision { GPU_LINEAR_BF16 = 0, GPU_LINEAR_FP8 = 1 };
/* The MLP's input swiglu(gate, up): saved for the down projection's backward, or recomputed there
 * from the saved gate and up (the same kernel on the same inputs: bitwise the same; one
 * elementwise pass a layer for B·T·F·2 bytes a layer less). */
enum gpu_mlp_input { GPU_MLP_INPUT_SAVED = 0, GPU_MLP_INPUT_RECOMPUTED = 1 };
/* Op timing with CUDA events (gpu_llama_profile_*), or none. */
enum gpu_profiling { GPU_PROFILE_OFF = 0, GPU_PROFILE_OPS };
/* The layer inputs x_0 .. x_{L−1} saved on the device (L + 1 buffers), or offloaded: copied to
 * pinned host memory on a second stream as the forward produces them and copied back one layer
 * ahead of the backward, so the device holds three (two ping-pong buffers and x_L) whatever the
 * depth. The same kernels read the same bits: results are bitwise those without offload. */
enum gpu_offload { GPU_OFFLOAD_NONE = 0, GPU_OFFLOAD_INPUTS };
/* NVTX ranges (per op category, per layer, per micro-batch) for Nsight Systems, or none. */
enum gpu_nvtx { GPU_NVTX_OFF = 0, GPU_NVTX_RANGES };
/* Adapters (LoRA, DoRA) of linears that share their input (q/k/v, gate/up) as one group, or each
 * alone (for comparisons; dropout always runs them alone). */
enum gpu_lora_grouping { GPU_LORA_GROUPED = 0, GPU_LORA_UNGROUPED };
/* A grouped LoRA group on a bf16 or NF4 base with bf16 products folded into its base products
 * (gpu/lora.h: no pass of the adapter's own over y, du from the base dx products) — q/k/v, gate/up
 * and, for LoRA, o as a group of one (the attention's output at a padded row stride) — or not (for
 * comparisons). A DoRA group's members without bias fold their forward with the magnitude in a
 * scaled copy of the weight, a biased member keeps its magnitude pass; its backward takes du from
 * the base dx products (gpu/llama_internal.h, folded). */
enum gpu_lora_folding { GPU_LORA_FOLDED = 0, GPU_LORA_UNFOLDED };

/* The vocabulary is ref/'s: enum llama_mode and enum recompute_policy (ref/llama.h), enum
 * optimizer_kind and struct optim_step (ref/adamw.h). */
struct gpu_llama_options {
    enum llama_mode mode;       /* LLAMA_FULL, LLAMA_LORA or LLAMA_DORA */
    enum gpu_base_storage base; /* NF4 only with an adapter mode */
    unsigned targets;           /* bit (1u << t) per adapted linear */
    int R;                      /* adapter rank */
    float lora_scale;           /* s (ref/lora.h) */
    float dropout;              /* adapter-input dropout (LoRA; 0 for DoRA) */
    uint64_t seed;              /* of the dropout masks and of --master bf16-sr's rounding */
    enum recompute_policy recompute;
    enum optimizer_kind optimizer;
    enum master_storage master; /* full fine-tuning: fp32 masters, split into the bf16 copy and a low
                                   half, or the bf16 copy alone, rounded to nearest or stochastically
                                   (ref/master_pair.h; not with the sharded optimizer) */
    int nested_nf4;             /* NF4 absmax double-quantized (always for weights quantized here) */
    int B, T;
    enum gpu_profiling profile;
    enum gpu_lora_grouping grouping;
    enum gpu_lora_folding folding;
    enum gpu_nvtx nvtx;
    enum gpu_offload offload;
    enum gpu_linear_precision linears;
    enum fp8_recipe fp8_recipe; /* FP8 linears and an FP8 base (ref/fp8_linear.h) */
    enum gpu_mlp_input mlp_input;
    /* MLP token chunks (--mlp-chunk, with RECOMPUTE_LAYER): the MLP (gate/up, SwiGLU, down and their
     * backward) runs on at most mlp_chunk rows at a time, so its F-wide buffers hold mlp_chunk rows
     * instead of B·T — the memory of long sequences. 0, or ≥ B·T: the whole micro-batch at once.
     * A multiple of 64; LoRA (with dropout: each chunk's masks its slice of the whole tensor's),
     * DoRA (the row norm formed per chunk, the same values; the magnitude gradient summed chunk by
     * chunk), their NF4 forms and full fine-tuning; bf16 products, or FP8 with delayed scaling or
     * (chunks of a multiple of 128) block scaling — not current scaling (a whole tensor's amax).
     * Each row's products are those of the unchunked step (the same bits); the parameter
     * gradients of the MLP's linears are summed chunk by chunk (fp32 sums in another order). */
    int mlp_chunk;
    /* Under RECOMPUTE_LAYER or ATTN (--recompute-keep): layers L − recompute_keep .. L − 2 keep their
     * own saved sets and are not recomputed (the top layer never is: it reads the shared set its
     * forward left), so 0 and 1 plan the same. Fewer than L; not with MLP chunks (a kept layer holds
     * its whole gate and up). The same bits as recomputing them. */
    int recompute_keep;
    /* Without recomputation: each layer keeps its two normalized inputs n1 = rmsnorm(x) and n2 =
     * rmsnorm(h) (at the row strides ld_n1, ld_n2, the folded groups' u after C) instead of forming
     * them again before its backward — two elementwise passes a layer fewer for B·T·(ld_n1 + ld_n2)·2
     * bytes a layer more; the same kernels wrote them: the same bits. */
    int keep_norms;
    /* The sharded optimizer (ZeRO-1, full fine-tuning; gpu/llama_shard.cu): this rank, of
     * shard_world > 1, keeps the fp32 masters and optimizer state of its pieces only (ref/shard.h);
     * 0 or 1: of every tensor. The plan is then this rank's. */
    int shard_world, shard_rank;
    /* ZeRO-2, with the sharded optimizer: the gradients sharded too (gpu/llama.h, "sharded
     * gradients" below): this rank accumulates only its pieces' gradients, in fp32; the layers'
     * gradients pass through two layer-sized buffers. */
    int shard_grads;
    /* Full fine-tuning's gradient accumulators: fp32, or bf16 (ref/master_pair.h; NUMERICS.md §5.6:
     * every kernel that accumulates into one forms the sum in fp32 and rounds it to bf16 once).
     * Full fine-tuning only, not with the sharded optimizer; split masters are then staged a tensor
     * at a time at load (gpu/llama_internal.h, gl_stage_shared). */
    enum grad_storage grads;
};

/* Bytes of each slab; total is what build_gpu_llama allocates (plus the CUDA context and
 * cuBLASLt's handle, which the plan cannot see). */
struct gpu_llama_plan {
    size_t weights;    /* frozen base weights (bf16 or NF4), the NF4 dequantization buffer, tables */
    size_t params;     /* trainable masters (fp32, the low halves of split ones, none for bf16 weights) and
                          compute copies (bf16) */
    size_t grads;      /* gradients (fp32; full fine-tuning's bf16 with grads GRAD_BF16) */
    size_t optim;      /* optimizer state */
    size_t acts;       /* saved activations */
    size_t scratch;    /* backward buffers and the op workspaces (one, sized for the largest) */
    size_t fixed;      /* tokens, labels, positions, rope tables, GEMM workspace, optimizer tables */
    size_t total;
    size_t host;       /* pinned host memory: the offloaded layer inputs (not in total) */
    int ce_rows;       /* rows of lm_head logits formed at a time */
    int mlp_rows;      /* rows of the MLP at a time (options.mlp_chunk, or B·T) */
};

/* 1 when no activation of (c, o) passes 2^31 elements (what the kernels are verified at; the plan
 * refuses the others), else 0: a shape too large, like one that does not fit. */
int gpu_llama_size_verified(const struct model_config *c, const struct gpu_llama_options *o);
/* 1 where recomputing the MLP input (GPU_MLP_INPUT_RECOMPUTED) costs no pass of its own, else 0:
 * the backward's own pass over gate and up forms it as it overwrites them (LoRA's down adapter
 * joined to SwiGLU's backward — no dropout, rank ≤ 64 —, and full fine-tuning's SwiGLU backward),
 * with bf16 products (the combination measured at the speed of keeping it: docs/RESULTS.md,
 * 2026-11-28, sixth session) — and FP8 full fine-tuning under per-tensor scaling with nothing
 * recomputed, whose backward reads the forward's transposed codes of the input instead (nothing to
 * form). The trainers' default there (--keep-mlp-input keeps it). */
int gpu_llama_mlp_input_free(const struct gpu_llama_options *o);
/* 1 when options.mlp_chunk can split o's MLP (not under FP8's current scaling, whose scales are the
 * whole micro-batch's tensors'), else 0. */
int gpu_llama_mlp_chunks_supported(const struct gpu_llama_options *o);
/* The plan of (c, o); 0, or -1 with e saying which option or shape the model cannot run. */
int gpu_llama_plan_bytes(struct gpu_llama_plan *p, const struct model_config *c, const struct gpu_llama_options *o,
                         struct io_err *e);
/* The layout's stacking decisions for (c, o), found on the host with the rows placed as the allocation
 * places them (no device memory touched): bit 0 q/k/v's input gradient one product over [dq │ dk │ dv],
 * bit 1 gate and up side by side (their forward and input gradient one product each), bits 2 and 3
 * q/k/v's and gate/up's dW one product each (full fine-tuning). Every layout of one model (sharded or
 * not, any master form) must decide alike, or the sharded and unsharded runs differ; 0, or -1 with e. */
int gpu_llama_layout_stacking(const struct model_config *c, const struct gpu_llama_options *o, int *bits,
                              struct io_err *e);
/* One line: "plan for B×T: 12.3 GiB = weights 2.3 + parameters 0.1 + ... ". */
void gpu_llama_plan_describe(char *buf, size_t cap, const struct gpu_llama_plan *p, int B, int T);
/* The plan's seven categories as JSON members in GiB with `digits` decimals, no braces:
 * "weights":..,"params":..,"grads":..,"optim":..,"acts":..,"scratch":..,"fixed":.. (callers add
 * total, host and the enclosing object). */
void gpu_llama_plan_json_fields(char *buf, size_t cap, const struct gpu_llama_plan *p, int digits);

/* The current CUDA device (a job's rank has chosen its own): 0 and its name and memory, or -1 with e
 * saying there is none usable. */
int gpu_device_query(char *name, size_t cap, size_t *free_bytes, size_t *total_bytes, struct io_err *e);
/* 0 when the device has FP8 tensor cores (compute capability 8.9 or newer), else -1 with e
 * naming the device and its capability (call it before planning an FP8 model). */
int gpu_device_check_fp8(struct io_err *e);

struct gpu_llama;

/* Allocates the slabs of the plan (an out-of-memory is reported in e, nothing left allocated),
 * uploads rope tables and positions, creates the stream, the GEMM context (with every plan the
 * step will use) and the optimizer. Weights are zero until loaded. */
struct gpu_llama *build_gpu_llama(const struct model_config *c, const struct gpu_llama_options *o, struct io_err *e);
void free_gpu_llama(struct gpu_llama *m);
const struct gpu_llama_plan *gpu_llama_get_plan(const struct gpu_llama *m);

/* Weights from a model (io/model_source.h): every weight read as fp32 and stored as the options
 * say: bf16 (RNE) for frozen ones; fp32 master + bf16 copy when trained (full); NF4 — a
 * bitsandbytes 4-bit checkpoint's own codes, or quantized here as bitsandbytes does at load
 * (ref/nf4: blocksize 64, double quantization of the absmax in blocks of 256). */
int gpu_llama_load(struct gpu_llama *m, const struct model_source *src, struct io_err *e);
/* Random weights of the real shapes (benchmarks): linears and embeddings uniform with the std of
 * HF's init (0.02), norms 1, biases 0; NF4 bases random codes with absmax near 0.04. */
void gpu_llama_random_weights(struct gpu_llama *m, uint64_t seed);
/* Adapter initialization (adapter modes): A and B from ref_llama_adapters_init(seed) — the CPU
 * trainer's values — and DoRA magnitudes m = ‖W‖_row of the stored (bf16 or dequantized) W. */
void gpu_llama_init_adapters(struct gpu_llama *m, uint64_t seed);

/* The engine tensors: trainable parameters (role 0), their optimizer state (role 1), then under
 * delayed FP8 scaling its amax histories and scales ("fp8.amax_history" (3·L·7, 1024) and
 * "fp8.scale" (3·L·7), role 2; ref/llama.h's row order). */
struct gpu_llama_tensor {
    char name[200];
    int role;      /* 0 parameter (fp32 master), 1 optimizer state, 2 other state (FP8 scaling) */
    int is_u8;     /* 8-bit optimizer codes */
    int ndim;
    int64_t shape[2];
    int64_t numel;
};
int gpu_llama_n_tensors(const struct gpu_llama *m);
const struct gpu_llama_tensor *gpu_llama_tensor_info(const struct gpu_llama *m, int i);
/* Device ↔ host copies of tensor i (numel fp32 or bytes); writing a parameter refreshes its bf16
 * compute copy. Both synchronize. */
void gpu_llama_tensor_read(struct gpu_llama *m, int i, void *host);
void gpu_llama_tensor_write(struct gpu_llama *m, int i, const void *host);
/* A frozen base weight by HF name ("model.layers.0.mlp.up_proj.weight", "lm_head.weight" of a
 * tied model = the embedding), as fp32 on the host: the bf16 values the model computes with
 * (NF4 dequantized). For the merged export. */
int gpu_llama_base_weight_read(struct gpu_llama *m, const char *hf_name, float *host, struct io_err *e);

/* One micro-batch: tokens, labels (B, T) int32 host arrays (labels shifted, −100 ignored), copied
 * to the device (the host arrays may be reused when the call returns). */
void gpu_llama_set_batch(struct gpu_llama *m, const int32_t *tokens, const int32_t *labels);
/* Forward, loss and backward of the batch set last: gradients ACCUMULATE, scaled so that the
 * loss is Σ NLL / n_valid_total times grad_scale (train/engine.h); dropout keyed by micro_index.
 * The micro-batch's Σ NLL (its mean loss × n_valid_total, in double) adds to the step's sum on
 * the device. n_valid_total ≥ 1. Enqueues only. */
void gpu_llama_train_micro(struct gpu_llama *m, int64_t n_valid_total, float grad_scale, uint64_t micro_index);
/* Forward and loss only (no dropout, no gradients). Enqueues only. */
void gpu_llama_eval(struct gpu_llama *m, int64_t n_valid_total);
/* Waits for the queued work and returns the loss of the last train_micro / eval (mean NLL). */
float gpu_llama_loss(struct gpu_llama *m);

/* The step's Σ NLL (of the train_micro calls since the last step) into *nll_sum, the global
 * gradient norm (before clipping) into *grad_norm, clipping, the update of every trainable tensor
 * (refreshing the bf16 copies), and zeroed gradients and loss sum. When the loss sum is not finite
 * nothing is updated (and −1 returned: the caller reports the loss); when the norm is not finite
 * nothing is updated and the index (in gpu_llama_tensor_info) of the first parameter with a
 * non-finite gradient is returned (−1 otherwise). The host waits for the device once, here. */
int gpu_llama_optimizer_step(struct gpu_llama *m, const struct optim_step *h, double *nll_sum,
                             double *grad_norm);

/* Zeroes the gradients and the loss sum without an update (e.g. after a step run only to
 * confirm the plan). */
void gpu_llama_drop_grads(struct gpu_llama *m);

/* FP8 (options.linears = GPU_LINEAR_FP8): the statistics of the last optimizer step (the range of
 * its tensors' scales, its saturated codes; train/engine.h's struct engine_fp8_stats), read by the
 * step's one wait; 0, or -1 when the model computes no FP8. */
int gpu_llama_fp8_stats(const struct gpu_llama *m, float *scale_min, float *scale_max, long long *saturated);
/* After gpu_llama_optimizer_step: 1 when the step was skipped because a quantization met a NaN or
 * an Inf (nothing was updated; what names the first such tensor), else 0. */
int gpu_llama_fp8_failed(struct gpu_llama *m, char *what, size_t cap);

/* Profiling (options.profile allocates the events): reset starts recording an event pair around
 * every op, print stops it and writes one JSON line with the device time per step of each op
 * category (ms and % of the recorded total). Steps outside reset..print are not disturbed. */
void gpu_llama_profile_reset(struct gpu_llama *m);
void gpu_llama_profile_print(struct gpu_llama *m, FILE *f, int steps);

/* CUDA-event timing of the stream's work between begin and end (milliseconds; end waits). */
void gpu_llama_timer_begin(struct gpu_llama *m);
double gpu_llama_timer_end(struct gpu_llama *m);

/* ---- data parallelism (gpu/llama_dp.cu): what a job of several GPUs needs from the model -------
 * The gradients come in buckets, each a contiguous range of the gradient slab, in the order the
 * backward pass finishes them: bucket 0 the head (the final norm and an untied lm_head, final
 * once the loss is computed), bucket 1 + i layer L − 1 − i's tensors (after that layer's backward),
 * bucket L + 1 the embedding (full fine-tuning; a tied lm_head with it), after its scatter-add. A
 * bucket with no trainable tensor has n = 0. The hook, when set, is called on the host as backward
 * enqueues the end of each bucket (in bucket order, after that work on the model's stream): the
 * caller makes its own stream wait for the model's and reduces the bucket there, overlapping the
 * rest of backward. NULL (the default): no call. */
typedef void (*gpu_llama_grad_hook)(void *ctx, int bucket);
void gpu_llama_set_grad_hook(struct gpu_llama *m, gpu_llama_grad_hook hook, void *ctx);
int gpu_llama_n_buckets(const struct gpu_llama *m);
void gpu_llama_bucket(const struct gpu_llama *m, int bucket, float **first, int64_t *n);
/* The gate, when set, is called on the host before a training micro-step first enqueues a write
 * into bucket b's gradients (buckets 0 and L + 1 before the head's backward, L − l before layer l's):
 * with sharded gradients the caller makes the model's stream wait there until the buffer that the
 * bucket's gradients use is free again (reduced and cleared). NULL (the default): no call. */
void gpu_llama_set_grad_gate(struct gpu_llama *m, gpu_llama_grad_hook gate, void *ctx);
/* The stream every op of the model runs on. */
cudaStream_t gpu_llama_stream(const struct gpu_llama *m);
/* The device double that holds the step's Σ NLL until gpu_llama_optimizer_step reads it (and skips
 * the update when it is not finite): a job sums it over the ranks first. */
double *gpu_llama_nll_sum_device(struct gpu_llama *m);

/* ---- the sharded optimizer (options.shard_world > 1; gpu/llama_shard.cu) -----------------------
 * Every rank holds the whole model's bf16 compute copies and gradients (the buckets are reduced as
 * above; with sharded gradients, below, only its pieces' gradients), and the fp32 masters and optimizer state of its pieces (ref/shard.h: whole optimizer
 * chunks, every rank within a chunk of 1/shard_world of the elements). A step:
 *   1. gpu_llama_shard_partials enqueues this rank's chunks' partial sums of squares of the
 *      (reduced) gradients into the device array it returns (*n floats, the other chunks' zero);
 *      the caller sums it over the ranks in place (an all-reduce on the device);
 *   2. gpu_llama_optimizer_step takes the norm from it and updates this rank's pieces (masters,
 *      state, and their part of the bf16 copies) — bitwise the unsharded update of those elements;
 *   3. the caller broadcasts each rank's part of the copies: rank r's is the contiguous bf16 range
 *      gpu_llama_shard_copies(m, r) (n = 0: r owns nothing), from root r.
 * Weights are loaded as a whole (the masters pass through the gradient slab, which is zeroed
 * after) and checkpoint tensors written as a whole (each rank keeps its pieces and the whole
 * copy). To read them, the caller gathers every rank's flat state arrays (gpu_llama_shard_array:
 * this rank's device pointer and bytes of array k; gpu_llama_shard_array_bytes: any rank's
 * bytes) and assembles tensor i from them on the host (arrays[r][k]: rank r's array k). */
enum { GPU_SHARD_MASTER = 0, GPU_SHARD_M, GPU_SHARD_V, GPU_SHARD_Q1, GPU_SHARD_Q2, GPU_SHARD_ABSMAX1,
       GPU_SHARD_ABSMAX2, GPU_SHARD_ARRAYS };
float *gpu_llama_shard_partials(struct gpu_llama *m, int64_t *n);
void gpu_llama_shard_copies(const struct gpu_llama *m, int rank, uint16_t **first, int64_t *n);
void *gpu_llama_shard_array(struct gpu_llama *m, int k, size_t *bytes);
size_t gpu_llama_shard_array_bytes(const struct gpu_llama *m, int rank, int k);
void gpu_llama_tensor_assemble(const struct gpu_llama *m, int i, void *host, const void *const *const *arrays);

/* ---- sharded gradients (ZeRO-2: options.shard_grads with the sharded optimizer) ------------------
 * The gradient slab no longer holds every tensor's gradient: the embedding's and the head's buckets
 * keep theirs, layer l's tensors write theirs into one of two layer-sized buffers (l mod 2, so
 * layer l's bucket is the same range as layer l ± 2's), and this rank keeps an fp32 accumulator of
 * its pieces only (the layout of its masters), which the optimizer and the norm's partial sums
 * read. Every micro-batch (not only the step's last) hands each bucket over as backward finishes
 * it: the caller sums each owner's part of the bucket into that owner (rank r's part is the range
 * gpu_llama_bucket_part(m, b, r); n = 0: r owns none of it), then gpu_llama_bucket_take adds this
 * rank's pieces of the summed bucket into the accumulator and clears the bucket's range for its
 * next use, on the given stream; the gate (above) makes the model wait for that before it writes
 * the buffer again. Per rank, 4 bytes a parameter × (1 − 1/W) fewer, less the two layer buffers.
 * The sums' order differs from the whole slab's (each micro-batch's bucket summed over the ranks,
 * then over the micro-batches, in fp32): bitwise the unsharded gradients with one micro-batch per
 * rank on two ranks, within fp32 rounding otherwise. */
void gpu_llama_bucket_part(const struct gpu_llama *m, int bucket, int rank, float **first, int64_t *n);
void gpu_llama_bucket_take(struct gpu_llama *m, int bucket, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_LLAMA_H */
