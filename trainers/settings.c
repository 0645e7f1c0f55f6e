/* settings.c — the trainer options as model settings (settings.h). */
#include "trainers/settings.h"

#include <string.h>

const char *const compute_precision_names[3] = {"fp32", "bf16", "fp8"};

void model_settings_from_options(struct model_settings *s, const struct train_options *o,
                                 enum compute_precision auto_precision) {
    memset(s, 0, sizeof *s);
    s->method = o->method;
    s->mode = llama_method_mode(o->method);
    s->base = llama_method_nf4(o->method)           ? BASE_NF4
              : o->base_dtype == BASE_DTYPE_FP8 ? BASE_FP8
                                                : BASE_NATIVE;
    s->targets = o->targets;
    s->R = o->rank;
    s->alpha = o->alpha;
    s->scaling = o->scaling;
    s->lora_scale = s->mode == LLAMA_FULL ? 0.0f : ref_lora_scale(o->alpha, o->rank, o->scaling);
    s->dropout = o->dropout;
    s->seed = o->seed;
    s->recompute = o->recompute;
    s->optimizer = o->optimizer;
    s->master = o->master;
    s->grads = o->grad_dtype;
    s->precision = o->precision == PRECISION_FP32   ? COMPUTE_FP32
                   : o->precision == PRECISION_BF16 ? COMPUTE_BF16
                   : o->precision == PRECISION_FP8  ? COMPUTE_FP8
                                                    : auto_precision;
    s->fp8_recipe = o->fp8_recipe;
    s->B = o->micro_batch;
    s->T = o->seq;
    s->timing = o->profile ? TIMING_OPS : TIMING_OFF;
    s->trace = o->nvtx ? TRACE_NVTX : TRACE_OFF;
    s->grouping = o->ungrouped ? ADAPTERS_UNGROUPED : ADAPTERS_GROUPED;
    s->folding = o->unfolded ? ADAPTERS_UNFOLDED : ADAPTERS_FOLDED;
    s->activations = o->offload ? ACTIVATIONS_OFFLOADED : ACTIVATIONS_ON_DEVICE;
    s->mlp_input = o->recompute_mlp ? MLP_INPUT_RECOMPUTED : o->keep_mlp_input ? MLP_INPUT_KEPT : MLP_INPUT_AUTO;
    s->mlp_chunk = o->mlp_chunk;
    s->recompute_keep = o->recompute_keep;
    s->keep_norms = o->keep_norms;
}

int settings_check_ranks(const struct train_options *o, int ranks, struct io_err *e) {
    if (ranks && o->grad_dtype == GRAD_BF16)
        return io_fail(e, "--grad-dtype bf16 runs in one process for now (the ranks' sum of bf16 gradients is not "
                          "specified yet); use --grad-dtype fp32 under mpirun");
    return 0;
}
