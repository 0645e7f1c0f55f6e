/* engine.h — what the training loop needs from a model on some device: the engine interface.
 *
 * The loop (train/loop.h) is the same for every device. Each trainer program adapts its model to
 * this table of functions — //ref:train adapts ref/llama (CPU), //gpu:train adapts gpu/llama — and
 * the trainer programs are the only places where the loop meets an engine (DESIGN.md).
 *
 * The loop owns the data, the schedule, the metrics, the checkpoints and the exports. The engine
 * owns the weights, the gradients and the optimizer state, and exposes that state as named
 * tensors so that the loop can checkpoint, resume and export it without knowing the device.
 *
 * Conventions
 *   tokens, labels  (B, T) int32. labels are already shifted: labels[b,t] is the target of
 *                   position t (tokens[b,t+1] in plain language modelling), −100 = no loss there.
 *   grad_scale      the loop passes 1 / (valid labels in the whole optimizer step, across the
 *                   micro-batches of gradient accumulation) so that the accumulated gradient is
 *                   that of the mean loss of the step (transformers' num_items_in_batch rule).
 *   micro_index     a global count of micro-batches since step 0 (resumes continue it): the engine
 *                   derives its dropout RNG offsets from it, so a resumed run draws the same masks.
 * Every function returns 0, or -1 with one clear sentence in e.
 */
#ifndef REFINE_TRAIN_ENGINE_H
#define REFINE_TRAIN_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "io/error.h"
#include "io/safetensors.h"
#include "ref/adamw.h" /* struct optim_step: one step's t, hyper-parameters and clipping */

#ifdef __cplusplus
extern "C" {
#endif

/* A named tensor of the engine's state, as checkpoints and exports see it. */
enum engine_tensor_role {
    ROLE_PARAM = 0, /* a trainable parameter (its fp32 master) */
    ROLE_OPTIM = 1, /* optimizer state (AdamW moments, 8-bit codes and absmax, ...) */
    ROLE_STATE = 2, /* other engine state a resumed run needs (FP8: "fp8.amax_history", "fp8.scale") */
};

/* FP8 runs (--precision fp8, NUMERICS.md §6.6): what the last optimizer step's quantizations did,
 * for the metrics log. scale_min/max: the range of the tensors' scales (delayed: the scales the
 * step used; current: the last computed; block: each tensor's smallest block scale); saturated:
 * the codes the quantizations of its activations and gradients clamped to the format's largest
 * value. */
struct engine_fp8_stats {
    double scale_min, scale_max;
    long long saturated;
};

struct engine_tensor {
    char name[256]; /* trainable params: HF module path + suffix, e.g.
                       "model.layers.3.self_attn.q_proj.lora_A.weight", "...lora_B.weight",
                       "...lora_magnitude_vector", or the HF weight name in full fine-tuning;
                       optimizer state: "<param name>.exp_avg", ".exp_avg_sq", ... */
    enum engine_tensor_role role;
    enum st_dtype dtype; /* ST_F32 or ST_U8 */
    int ndim;
    int64_t shape[4];
};

struct train_engine {
    const char *name;   /* e.g. "ref (CPU, 2 threads)", "gpu (NVIDIA H100 80GB HBM3)" */
    void *self;
    double flops_per_token; /* model FLOPs per trained token (PERFORMANCE.md convention) */
    double peak_flops;      /* the device's measured bf16 GEMM rate, FLOP/s; 0 when unknown (no MFU) */
    float adapter_scale;    /* s of the adapters (ref/lora.h's convention), for the merged export; 0 in full
                               fine-tuning */
    const char *memory_json; /* the device memory the engine planned, as one JSON object of GiB per category
                                ({"weights":..,"params":..,"grads":..,"optim":..,"acts":..,"scratch":..,
                                "fixed":..,"total":..}) for the metrics log; NULL when it plans none */

    /* Forward, loss and backward of one micro-batch: gradients accumulate, and so does the step's
     * Σ NLL, which the engine keeps (on its device) until optimizer_step hands it over — so that a
     * step need not wait for the device between micro-batches. */
    int (*micro_step)(void *self, const int32_t *tokens, const int32_t *labels, int B, int T, float grad_scale,
                      uint64_t micro_index, struct io_err *e);
    /* Forward only (no dropout, no gradients): Σ NLL over the valid labels. */
    int (*eval)(void *self, const int32_t *tokens, const int32_t *labels, int B, int T, double *nll_sum,
                struct io_err *e);
    /* The step's Σ NLL (of the micro_steps since the last call) into *nll_sum, the global gradient
     * norm (before clipping) into *grad_norm, clipping, the optimizer update, and zeroed gradients
     * and loss sum. In a job of several ranks (train/comm.h) the engine reduces its gradients and
     * the step's Σ NLL over them first: *nll_sum and *grad_norm are the job's. When *nll_sum is
     * not finite nothing is updated and 0 is returned (the loop reports the loss). A non-finite
     * gradient fails with e naming the first tensor holding one; then no parameter or optimizer
     * state has changed. */
    int (*optimizer_step)(void *self, const struct optim_step *h, double *nll_sum, double *grad_norm,
                          struct io_err *e);

    int (*n_tensors)(void *self);
    int (*tensor_info)(void *self, int i, struct engine_tensor *info);
    /* Copies tensor i to/from host memory (its dtype, row-major, numel·size bytes). */
    int (*tensor_read)(void *self, int i, void *host, struct io_err *e);
    int (*tensor_write)(void *self, int i, const void *host, struct io_err *e);

    /* The frozen base weight `hf_name` (e.g. "model.layers.0.mlp.up_proj.weight") as fp32 on the
     * host, dequantized when stored as NF4; for the merged export. */
    int (*base_weight_read)(void *self, const char *hf_name, float *host, struct io_err *e);

    /* The last optimizer step's FP8 statistics (called after optimizer_step); NULL for an engine
     * that computes no FP8. */
    int (*fp8_stats)(void *self, struct engine_fp8_stats *s);
    /* A collective of the job's ranks (every rank calls it, before a checkpoint and before the
     * exports): afterwards tensor_read on rank 0 gives the job's value of every tensor, the pieces
     * of a sharded optimizer that other ranks hold included. NULL: every rank holds its whole
     * state. */
    int (*gather)(void *self, struct io_err *e);

    /* Device memory in use now and at peak (GiB); NULL when not meaningful. */
    double (*mem_gib)(void *self);
    void (*destroy)(void *self);

    /* Optional (NULL: this trainer cannot generate): greedy completions with the weights as they are
     * now, for the samples of --sample-every (train/loop.h). prompts[i] holds lens[i] tokens; each
     * gets at most max_new new tokens in out[i] (room for max_new), ending early at one of the end
     * ids (kept as its last token); n_out[i] their count. The hook may be the engine's own or one
     * attached beside it (trainers/sample_hook.h); gen_state is that hook's state, malloc'ed or
     * NULL: the trainer program frees it after destroy. */
    int (*generate)(const struct train_engine *eng, const int32_t *const *prompts, const int *lens, int n,
                    int max_new, const int32_t *end_ids, int n_end, int32_t *const *out, int *n_out,
                    struct io_err *e);
    void *gen_state;
};

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_ENGINE_H */
