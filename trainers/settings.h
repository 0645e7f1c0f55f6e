/* settings.h — what a trainer's options mean for the model: the one translation.
 *
 * train/options.h holds what the user asked for (--method, --precision, --recompute,
 * --optimizer, --rank, --alpha, --scaling, --targets, --dropout, ...). The models speak ref/'s
 * vocabulary: enum llama_mode and enum recompute_policy (ref/llama.h), enum optimizer_kind
 * (ref/adamw.h), the adapter scale s (ref/lora.h), the format of the frozen base. This file is the
 * only place where the one becomes the other: the CPU engine, the GPU engine and the benchmark
 * each read a struct model_settings, and hand its fields to their model as they are.
 */
#ifndef REFINE_TRAINERS_SETTINGS_H
#define REFINE_TRAINERS_SETTINGS_H

#include <stdint.h>

#include "io/error.h"
#include "ref/adamw.h"
#include "ref/fp8_linear.h"
#include "ref/llama.h"
#include "ref/lora.h"
#include "ref/master_pair.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The frozen base linears: the checkpoint's values (fp32 on the CPU, bf16 on the GPU), NF4 as
 * bitsandbytes stores them (a 4-bit checkpoint's own codes, or quantized at load), or FP8 E4M3
 * codes with the frozen weights' scales of the FP8 recipe (--base-dtype fp8; ref/fp8_linear.h). */
enum base_format { BASE_NATIVE = 0, BASE_NF4, BASE_FP8 };

/* The arithmetic of a run: --precision with auto resolved for the trainer. COMPUTE_FP8 is bf16
 * with the block linears' products in FP8 (NUMERICS.md §6.6). */
enum compute_precision { COMPUTE_FP32 = 0, COMPUTE_BF16, COMPUTE_FP8 };
/* "fp32", "bf16", "fp8" (index = enum value), for engine names and reports. */
extern const char *const compute_precision_names[3];

/* What a run records about itself besides its results: CUDA-event timing of every op category
 * (//gpu:bench --profile), NVTX ranges for Nsight Systems (--nvtx); and whether LoRA/DoRA adapters
 * that share an input run as a group (the default) or each alone (//gpu:bench --ungrouped). */
enum op_timing { TIMING_OFF = 0, TIMING_OPS };
enum trace_ranges { TRACE_OFF = 0, TRACE_NVTX };
enum adapter_grouping { ADAPTERS_GROUPED = 0, ADAPTERS_UNGROUPED };
/* Grouped LoRA adapters on a bf16 or NF4 base folded into their base products (the default), or not
 * (//gpu:bench --unfolded). */
enum adapter_folding { ADAPTERS_FOLDED = 0, ADAPTERS_UNFOLDED };
/* Where the saved layer inputs live: on the device, or in pinned host memory (--offload). */
enum activation_home { ACTIVATIONS_ON_DEVICE = 0, ACTIVATIONS_OFFLOADED };
/* The MLP input, swiglu(gate, up): kept per layer (--keep-mlp-input), recomputed before the down
 * projection's backward (--recompute-mlp), or auto: recomputed where that costs no pass of its own
 * (gpu_llama_mlp_input_free), else kept — the default. */
enum mlp_input_policy { MLP_INPUT_KEPT = 0, MLP_INPUT_RECOMPUTED, MLP_INPUT_AUTO };

struct model_settings {
    enum train_method method;
    enum llama_mode mode; /* full, LoRA or DoRA */
    enum base_format base;
    unsigned targets;     /* bit (1u << t) per adapted linear (io/family.h) */
    int R;
    double alpha;
    enum lora_scaling scaling;
    float lora_scale;     /* s = ref_lora_scale(alpha, R, scaling); 0 in full fine-tuning */
    float dropout;        /* adapter-input dropout */
    uint64_t seed;        /* adapter initialization and dropout masks */
    enum recompute_policy recompute;
    enum optimizer_kind optimizer;
    enum master_storage master; /* full fine-tuning's fp32 masters (ref/master_pair.h) */
    enum grad_storage grads;    /* full fine-tuning's accumulated gradients (train/options.h) */
    enum compute_precision precision;
    enum fp8_recipe fp8_recipe; /* the FP8 scaling (COMPUTE_FP8 and an FP8 base) */
    int B, T;             /* micro-batch and sequence length */
    enum op_timing timing;
    enum trace_ranges trace;
    enum adapter_grouping grouping;
    enum adapter_folding folding;
    enum activation_home activations;
    enum mlp_input_policy mlp_input;
    int mlp_chunk; /* rows of the MLP at a time under --recompute layer; 0: all (--mlp-chunk) */
    int recompute_keep; /* the top layers not recomputed under --recompute (--recompute-keep) */
    int keep_norms;     /* each layer's normalized inputs kept (--keep-norms) */
};

/* s from o; --precision auto becomes auto_precision (the trainer's own arithmetic). */
void model_settings_from_options(struct model_settings *s, const struct train_options *o,
                                 enum compute_precision auto_precision);

/* What a run of several ranks (ranks non-zero) refuses, in either engine, before any work: bf16
 * gradients (one process only for now: the ranks' sum of bf16 gradients is not specified). 0, or -1
 * with one message. */
int settings_check_ranks(const struct train_options *o, int ranks, struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_SETTINGS_H */
