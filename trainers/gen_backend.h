/* gen_backend.h — what the generation programs need from a model on some device: a model with a
 * key/value cache for S sequences, fed prompts (prefill) and one token per sequence (decode),
 * answering with next-token logits. //ref:generate adapts ref/generate.h (CPU, the oracle),
 * //gpu:generate adapts gpu/generate.h; everything else (flags, prompts, chat, sampling, stop
 * rules, streaming: gen_run.h, generate_main.c) is shared.
 *
 * A device builds a backend from a config and fp32 weights in ref/llama's layout (adapters already
 * merged: ref_gen_load_weights); the backend copies what it needs (the weights may be freed once
 * create returns). Logits are fp32 host rows (V each). Every function returns 0, or -1 with one
 * sentence in e.
 */
#ifndef REFINE_TRAINERS_GEN_BACKEND_H
#define REFINE_TRAINERS_GEN_BACKEND_H

#include <stdint.h>

#include "io/config.h"
#include "io/error.h"
#include "ref/llama.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gen_backend {
    char name[160]; /* e.g. "ref (CPU, fp32)", "gpu (NVIDIA H100 80GB HBM3, bf16)" */
    void *self;
    int S, T_max, V;
    /* Appends ids[0..n) to sequence s; logits (V) of its last token. */
    int (*prefill)(void *self, int s, const int32_t *ids, int n, float *logits, struct io_err *e);
    /* tokens[i] appended to sequence seqs[i] (distinct, n ≤ S); logits (n, V). */
    int (*decode)(void *self, const int32_t *seqs, const int32_t *tokens, int n, float *logits, struct io_err *e);
    /* Optional (NULL: not offered): decode, returning only each row's argmax (first index on
     * ties) in next[n] — greedy decoding without copying logits off the device. */
    int (*decode_argmax)(void *self, const int32_t *seqs, const int32_t *tokens, int n, int32_t *next,
                         struct io_err *e);
    void (*reset)(void *self, int s); /* sequence s forgotten */
    void (*destroy)(void *self);
};

/* Precision of a backend: the device's own (fp32 on the CPU, bf16 on the GPU), or bf16 on the CPU
 * (the GPU's same-precision twin, for comparisons). */
enum gen_precision { GEN_PRECISION_AUTO = 0, GEN_PRECISION_FP32, GEN_PRECISION_BF16 };

struct gen_device {
    const char *program; /* "bazel run //ref:generate --" */
    /* Options this device refuses or the machine cannot run (e.g. no CUDA device); NULL: none. */
    int (*check)(enum gen_precision p, struct io_err *e);
    int (*create)(struct gen_backend *b, const struct model_config *c, const struct llama_weights *w, int S,
                  int T_max, enum gen_precision p, struct io_err *e);
};

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_GEN_BACKEND_H */
