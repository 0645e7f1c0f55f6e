/* gpu_dp.h — data parallelism of the GPU model (gpu/llama.h) over a job of several GPUs
 * (train/comm.h, NCCL): what //gpu:train's engine and //gpu:bench do around each step.
 *
 * Per optimizer step, on every rank:
 *   gpu_dp_micro(d, last) before each micro-batch: the step's last one (last = 1) runs with the
 *     model's gradient hook, so that as backward finishes each bucket of gradients (gpu/llama.h:
 *     the head, layers L−1 … 0, the embedding) an event on the model's stream makes the
 *     communication stream wait for it and an all-reduce (sum) of the bucket is enqueued there,
 *     overlapping the rest of backward; the earlier micro-batches only accumulate.
 *   gpu_dp_reduce(d) before the optimizer step: the buckets the hook did not reduce (a last
 *     micro-batch without a valid label runs no backward), then the step's Σ NLL (one double on
 *     the device) are reduced on the communication stream; the model's stream waits for them, and
 *     the host waits too, bounded by the job's timeout (comm->wait: a failed or hung peer ends the
 *     job with a message naming it, rather than a hang in the optimizer's synchronization). The
 *     optimizer then sees the job's gradients and loss on every rank: the same norm, the same
 *     clipping, the same decision to skip a non-finite step on every rank.
 * Every rank issues the same collectives in the same order (bucket order), whatever its data.
 * A job of one rank runs the same code; its all-reduces copy nothing, so it is bitwise the
 * single-process step.
 *
 * The sharded optimizer (the model built with options.shard_world = the job's ranks, gpu/llama.h):
 * gpu_dp_reduce also sums the gradient norm's per-chunk partial sums over the ranks (each chunk's is
 * nonzero on one rank: x + 0 = x, the unsharded norm's bits), and gpu_dp_after_step broadcasts
 * every rank's updated part of the bf16 copies from it (one NCCL group), the model's stream waiting
 * for them before the next forward. For a checkpoint or an export, gpu_dp_gather brings every
 * rank's flat masters and optimizer state to rank 0's host memory (point to point over the job:
 * rank 0 needs host memory for the whole fp32 state, 12 bytes a parameter with AdamW), from which
 * gpu_dp_tensor_read assembles each tensor; gpu_dp_release frees it.
 *
 * Sharded gradients (ZeRO-2, gpu/llama.h): every micro-batch runs with the hook, and each bucket is
 * summed into its owners (one reduce per owner's part, one NCCL group), added into the owner's
 * accumulator and cleared, on the communication stream; a gate makes the model's stream wait, before
 * backward writes a bucket's buffer, until the buffer's last bucket is through. A micro-batch that
 * ran no backward reduces its (zero) buckets at the next gpu_dp_micro or gpu_dp_reduce, so that the
 * ranks' collectives match.
 *
 * Timing: the communication that backward did not hide, per step: from the end of the model's work
 * before the optimizer to the end of the reductions (CUDA events; gpu_dp_exposed_ms).
 */
#ifndef REFINE_TRAINERS_GPU_DP_H
#define REFINE_TRAINERS_GPU_DP_H

#include "gpu/llama.h"
#include "io/error.h"
#include "train/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpu_dp;

/* What m was built to shard over comm's ranks: nothing, the optimizer (options.shard_world), or
 * the gradients too (options.shard_grads). */
enum gpu_dp_shard { GPU_DP_WHOLE = 0, GPU_DP_SHARD_OPTIMIZER, GPU_DP_SHARD_GRADIENTS };
/* The sharding of a model built with options g (shard_world, shard_grads). */
enum gpu_dp_shard gpu_dp_shard_of(const struct gpu_llama_options *g);

/* For model m on this rank of comm (its slab collectives on device memory: NCCL). */
struct gpu_dp *gpu_dp_create(struct gpu_llama *m, const struct train_comm *comm, enum gpu_dp_shard shard,
                             struct io_err *e);
void gpu_dp_free(struct gpu_dp *d);

void gpu_dp_micro(struct gpu_dp *d, int last);
/* 0, or -1 with e (a collective refused, a peer failed or timed out). */
int gpu_dp_reduce(struct gpu_dp *d, int step, struct io_err *e);
/* Waits (bounded) for the work the job enqueued on its stream; for the engine before it reads the
 * device (evaluation, checkpoints). */
int gpu_dp_quiesce(struct gpu_dp *d, const char *what, struct io_err *e);

/* After gpu_llama_optimizer_step: the sharded optimizer's broadcast of the bf16 copies (nothing
 * otherwise). */
int gpu_dp_after_step(struct gpu_dp *d, struct io_err *e);
/* The sharded state to rank 0 (every rank calls it); then, on rank 0, tensor i of the model
 * assembled into host (gpu_llama_tensor_info's numel values); gpu_dp_release frees the copy. */
int gpu_dp_gather(struct gpu_dp *d, struct io_err *e);
int gpu_dp_tensor_read(struct gpu_dp *d, int i, void *host, struct io_err *e);
void gpu_dp_release(struct gpu_dp *d);

/* Milliseconds of communication left after the model's work in the last step (≥ 0). */
double gpu_dp_exposed_ms(struct gpu_dp *d);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_GPU_DP_H */
