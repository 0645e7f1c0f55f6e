/* generate.h — the Llama model on one GPU for generation: bf16 weights and KV cache, prefill of
 * a prompt, then decode steps of one token per sequence for up to S sequences at once;
 * ref/generate.h (with act = ACT_BF16 and bf16-rounded weights) is its oracle.
 *
 * Model (ref/generate.h's math; every activation stored bf16 where ref/ rounds, products
 * accumulated in fp32): a call takes N rows (row i: token ids[i] of sequence seq[i] at position
 * pos[i], its cached length):
 *   x = embed[ids]; per layer: n1 = rmsnorm(x); qkv = n1 W_qkvᵀ (+ b) — q, k, v as one GEMM over
 *   the stacked weights; rope(q, k); k, v appended to the cache at (seq, pos); a = attention of q
 *   against the cache (gpu/decode_attention.h); h = x + a Woᵀ and n2 = rmsnorm(h) in one kernel
 *   (gpu/rmsnorm.h's residual form); gu = n2 W_guᵀ (gate and up stacked); m = swiglu(gu);
 *   x' = h + m Wdᵀ (fused into the next layer's norm, or the final one); logits = rmsnorm(x_L)
 *   Wheadᵀ in fp32 (cuBLASLt, fp32 output, not rounded) for the rows asked.
 * Ops: gpu/{embedding, rmsnorm, gemm, rope, decode_attention, swiglu}.h, each parity-tested; the
 * argmax of a logits row (first index of the maximum, as ref_sample_argmax) is this file's own
 * kernel, tested by tests/parity/generate_parity.c.
 * Storage: weights bf16 (RNE of the fp32 weights given: adapters merged before, ref_merge_peft);
 * cache L × 2 × (S, T_max, KVH, D) bf16; scratch for N_max rows. Everything is allocated by
 * build_gpu_gen (gpu_gen_plan_bytes says how much before); calls allocate nothing but cuBLASLt's
 * first plan of each shape.
 * Calls copy the ids in, run on the model's stream and copy the logits (or the argmax ids) out:
 * they return when the results are on the host.
 * Errors: CUDA failures are CHECKs (exit 2); what the user can cause (a model the kernels cannot
 * run, memory, a full sequence) is an io_err.
 */
#ifndef REFINE_GPU_GENERATE_H
#define REFINE_GPU_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "io/config.h"
#include "io/error.h"
#include "ref/llama.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpu_gen;

/* 0 when a CUDA device answers, else -1 with e saying there is none (and that //ref:generate runs
 * on the CPU). */
int gpu_gen_device_check(struct io_err *e);

/* Device bytes of the model, cache and scratch for (c, S, T_max, N_max). */
size_t gpu_gen_plan_bytes(const struct model_config *c, int S, int T_max, int N_max);

/* Allocates and uploads: w may be NULL (weights left for gpu_gen_random_weights). NULL with e set
 * when the shape is unsupported (head dim not 16/32/64/128, T_max above the attention's limit) or
 * the device memory does not suffice. */
struct gpu_gen *build_gpu_gen(const struct model_config *c, const struct llama_weights *w, int S, int T_max,
                              int N_max, struct io_err *e);
void free_gpu_gen(struct gpu_gen *g);

/* Random bf16 weights of the model's shapes (benchmarks): linears and embeddings uniform with std
 * 0.02, norms 1, biases 0, from seed. */
void gpu_gen_random_weights(struct gpu_gen *g, uint64_t seed);

void gpu_gen_reset(struct gpu_gen *g, int s);

/* Appends ids[0..n) to sequence s (chunks of N_max rows); logits (V, host fp32) of the last. */
int gpu_gen_prefill(struct gpu_gen *g, int s, const int32_t *ids, int n, float *logits, struct io_err *e);

/* One token per sequence: tokens[i] appended to seqs[i] (distinct, n ≤ min(S, N_max)); logits (n,
 * V) to the host, or — when logits is NULL — only each row's argmax into next[n]. */
int gpu_gen_decode(struct gpu_gen *g, const int32_t *seqs, const int32_t *tokens, int n, float *logits,
                   int32_t *next, struct io_err *e);

/* Decode steps through CUDA graphs (on by default unless REFINE_CUDA_GRAPHS=0): the same kernels,
 * the same bits, fewer launches. */
void gpu_gen_set_graphs(struct gpu_gen *g, int on);

/* The device's name ("NVIDIA H100 80GB HBM3"). */
const char *gpu_gen_device_name(const struct gpu_gen *g);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_GENERATE_H */
