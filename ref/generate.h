/* generate.h — the reference model for generation: ref/llama's forward with a key/value cache,
 * so that a prompt is processed once (prefill) and each new token costs one row (decode).
 *
 * Model: ref/llama.h's forward (NUMERICS.md §7), row by row. A call takes N rows, row i being
 * token ids[i] of sequence seq[i] at that sequence's next position p (its cached length, counted
 * up as rows are appended in order):
 *   x = embed[ids]; per layer: n1 = rmsnorm(x); q, k, v = n1 W{q,k,v}ᵀ (+b); rope(q, k) at p;
 *   k, v are written to the cache at (seq, p); a = attention of q against the cached keys 0..p of
 *   its sequence (ref/decode_attention.h); h = act(x + a Woᵀ); n2 = rmsnorm(h);
 *   x' = act(h + swiglu(n2 Wgᵀ, n2 Wuᵀ) Wdᵀ); then logits = rmsnorm(x_L) Wheadᵀ, fp32, NOT
 *   rounded (the lm_head's fp32 accumulation, what the sampler reads) — for the rows asked.
 * With ACT_F32 the logits of a prefill of the whole sequence equal ref_llama_forward's rows to
 * fp32 rounding (tests/unit/generate_test). With ACT_BF16 activations are rounded where the GPU
 * engine (gpu/generate.h) stores bf16, and the weights should hold bf16 values (the caller
 * rounds them: ref_gen_round_weights): the naive same-precision twin of the GPU engine.
 *
 * Adapters are merged into the base weights before generation (ref_merge_peft), as PEFT's
 * merge_and_unload and train/export.c's merged export do, in fp32 with double sums:
 *   LoRA  W' = W + s·B·A          DoRA  W' = (m / ‖W + s·B·A‖_row) ⊙ (W + s·B·A)
 * Both engines (this one and the GPU's) compute with the same merged weights, so their greedy
 * outputs can agree; the merged export and --adapter give the same model.
 *
 * Memory: the cache holds L × 2 × S × T_max × KVH × D floats; the scratch N_max rows of every
 * activation, all allocated by ref_gen_init. Positions are limited to T_max (and the rope table
 * is built for T_max). Not thread-safe.
 */
#ifndef REFINE_REF_GENERATE_H
#define REFINE_REF_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "io/config.h"
#include "io/error.h"
#include "io/model_source.h"
#include "io/peft.h"
#include "ref/llama.h"
#include "ref/rope.h"
#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ref_gen {
    struct model_config cfg;
    const struct llama_weights *w; /* not owned */
    enum act_dtype act;
    int blas;  /* 1: linears through sgemm; 0: the naive double-sum loops */
    int S;     /* sequences (cache slots) */
    int T_max; /* positions per sequence */
    int N_max; /* rows per forward call */
    float attn_scale;
    struct ref_rope_cache rope;
    float *k_cache, *v_cache; /* L × (S, T_max, KVH, D) */
    int32_t *len;             /* (S) tokens cached per sequence */
    /* scratch, N_max rows each */
    float *x, *n, *q, *k, *v, *att, *h, *gate, *up, *mlp, *tmp, *rstd;
    int32_t *seq, *pos;
    int *rows;
    double *attn_ws;
};

/* Allocates the cache and the scratch for S sequences of up to T_max positions, calls of up to
 * N_max rows. w must stay alive while g is used. */
void ref_gen_init(struct ref_gen *g, const struct model_config *c, const struct llama_weights *w, int S, int T_max,
                  int N_max, enum act_dtype act, int blas);
void ref_gen_free(struct ref_gen *g);

/* Forgets sequence s (its cache becomes empty). */
void ref_gen_reset(struct ref_gen *g, int s);

/* Appends ids[0..n) to sequence s (in chunks of N_max rows) and writes the logits (V) of its last
 * token. -1 with a message when the sequence would exceed T_max positions. */
int ref_gen_prefill(struct ref_gen *g, int s, const int32_t *ids, int n, float *logits, struct io_err *e);

/* One token for each of n sequences: tokens[i] is appended to sequence seqs[i] (distinct; n ≤
 * N_max) and logits (n, V) receives the next-token logits of each. -1 with a message when a
 * sequence is full. */
int ref_gen_decode(struct ref_gen *g, const int32_t *seqs, const int32_t *tokens, int n, float *logits,
                   struct io_err *e);

/* Every weight rounded to bf16 (RNE) in place: what the GPU engine stores. */
void ref_gen_round_weights(struct llama_weights *w, const struct model_config *c);

/* W (C_out, C_in) ← W + s·B·A, then the DoRA row rescale m/‖·‖ when mag is given (see above). */
void ref_merge_adapter(float *w, int C_out, int C_in, const float *lora_a, const float *lora_b, const float *mag,
                       int R, float s);

/* Merges every module of a PEFT adapter (io/peft.h, read against c) into w. */
void ref_merge_peft(struct llama_weights *w, const struct model_config *c, const struct peft_adapter *a);

/* The generation model of a checkpoint: w allocated (ref_llama_weights_alloc) and loaded from src
 * (fp32; NF4 and GGUF types dequantized), with the PEFT adapter in adapter_dir (NULL or "": none)
 * read, checked against the model and merged. 0, or -1 with a message (w is then freed). */
int ref_gen_load_weights(struct llama_weights *w, const struct model_source *src, const char *adapter_dir,
                         struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_GENERATE_H */
