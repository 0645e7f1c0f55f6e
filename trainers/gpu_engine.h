/* gpu_engine.h — the GPU engine: train/engine.h over the GPU model (gpu/llama), for //gpu:train;
 * and the pieces //gpu:bench shares with it (the model options of a run's settings, the largest
 * micro-batch that fits). What it computes and how is described in gpu_engine.c.
 */
#ifndef REFINE_TRAINERS_GPU_ENGINE_H
#define REFINE_TRAINERS_GPU_ENGINE_H

#include <stddef.h>

#include "gpu/llama.h"
#include "io/config.h"
#include "io/error.h"
#include "io/model_source.h"
#include "train/comm.h"
#include "train/engine.h"
#include "train/options.h"
#include "trainers/settings.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options the GPU engine cannot run (--precision fp32), or no usable CUDA device: 0, or -1 with
 * one message. */
int gpu_engine_check(const struct train_options *o, struct io_err *e);
/* Plans (refusing a plan larger than the free memory, or taking the largest micro-batch with
 * --auto-batch, at most max_micro_batch), builds and loads the model, confirms the plan with one
 * micro-batch. */
int gpu_engine_create(struct train_engine *eng, struct train_options *o, const struct model_source *src,
                      int max_micro_batch, const struct train_comm *comm, struct io_err *e);

/* The GPU model's options for settings s (nested_nf4 = 1: weights quantized at load; a
 * bitsandbytes checkpoint's own layout is the caller's to set). */
void gpu_model_options(struct gpu_llama_options *g, const struct model_settings *s);
/* Whether a job of `world` ranks shards the optimizer of g (ZeRO-1): --shard-optimizer on, or auto
 * for full fine-tuning with fp32 masters (split masters keep it whole). */
int gpu_shards_optimizer(const struct train_options *o, const struct gpu_llama_options *g, int world);
/* Sets g->shard_grads (ZeRO-2) for a model g whose optimizer is sharded (g->shard_world > 1):
 * --shard-gradients on, or auto where it makes the per-rank plan of config c smaller and either each
 * rank runs one micro-batch a step (then its reduces move no more than the all-reduce: measured
 * faster, RESULTS.md 2026-11-27) or the plan with whole gradients does not fit budget bytes (with
 * accumulation every micro-batch reduces: measured 3.5% slower at 1B on 2 GPUs × 2); 0 or −1
 * with e (on without the sharded optimizer, or a plan that cannot be made). */
int gpu_shards_gradients(const struct train_options *o, struct gpu_llama_options *g, const struct model_config *c,
                         size_t budget, struct io_err *e);
/* What a user can change for g to take less memory, as one phrase into buf ("try --recompute
 * layer, --master split, --optimizer adamw8bit, --grad-dtype bf16 or a shorter --seq"): the options
 * g does not use yet (bf16 gradients only where the optimizer is not sharded), for the messages of a
 * plan that does not fit. Returns buf. */
const char *gpu_memory_hint(const struct gpu_llama_options *g, char *buf, size_t cap);
/* The bytes a run may plan: the device's free memory, or with --memory-limit what a card of that
 * size would have left now (the limit less what is already in use), less a reserve for the CUDA
 * runtime's and cuBLASLt's own allocations; device names the GPU, free_now (NULL: not wanted) gets
 * the free bytes it was computed from. */
int gpu_memory_budget(const struct train_options *o, char *device, size_t cap, size_t *budget, size_t *free_now,
                      struct io_err *e);
/* The budget of a card of --memory-limit GiB with nothing else on it, less the same reserve: the
 * plan a user makes on a machine without the GPU (bench --plan-only). 0 when the limit is unset. */
size_t gpu_memory_budget_offline(const struct train_options *o);
/* With the model built: the device's free bytes into free_now (NULL: not wanted), and under
 * --memory-limit a failure when the device (of `total` bytes) holds more than the limit. */
int gpu_memory_limit_check(const struct train_options *o, size_t total, size_t *free_now, struct io_err *e);
/* The longest sequence up to `most` whose plan (g with its micro-batch) fits in `budget` bytes of
 * device memory and, offloaded, `host_budget` bytes of pinned host memory (0: not limited); 0 when
 * not even 2 tokens do: the planner is searched, nothing is allocated. */
int gpu_longest_fitting_seq(struct gpu_llama_options g, const struct model_config *c, size_t budget,
                            size_t host_budget, int most);
/* Into buf (and returned): "with --recompute layer --mlp-chunk 4096: N tokens" when the options g
 * lacks (layer recomputation, MLP chunks) would fit a sequence at least 5% longer than `found`;
 * "" otherwise. */
const char *gpu_longer_seq_hint(struct gpu_llama_options g, const struct model_config *c, size_t budget,
                                size_t host_budget, int found, char *buf, size_t cap);
/* Pinned host memory this machine can give an offloaded run: 90% of the memory available now
 * (/proc/meminfo MemAvailable, or a container's cgroup limit less its use when smaller); 0 when
 * unknown. */
size_t gpu_host_budget(void);
/* --seq auto: sets o->seq to the longest sequence that fits (said on stdout), or -1 with a message. */
int gpu_engine_longest_seq(struct train_options *o, const struct model_source *src, struct io_err *e);
/* The largest micro-batch up to `most` whose plan fits in `budget` bytes (0 when not even one
 * does); with FP8 linears, a multiple of what makes micro-batch × sequence a multiple of 16. */
int gpu_largest_fitting_batch(struct gpu_llama_options g, const struct model_config *c, size_t budget, int most);
/* The most layers --recompute-keep can keep with g's plan within budget (2 … L − 1; 0 when not even
 * 2 fit: 1 plans as 0). */
int gpu_most_kept_layers(struct gpu_llama_options g, const struct model_config *c, size_t budget);
/* --recompute-keep auto (o->recompute_keep == OPT_KEEP_AUTO): o's and g's recompute_keep become
 * gpu_most_kept_layers (0 with MLP chunks, whose kept layers would hold whole MLP tensors). 1 when
 * it resolved auto, 0 when o asked for a number, −1 (e) without recomputation. */
int gpu_resolve_keep(struct train_options *o, struct gpu_llama_options *g, const struct model_config *c, size_t budget,
                     struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_GPU_ENGINE_H */
