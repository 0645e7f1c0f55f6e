/* family.h — the Llama family's linear layers, declared once.
 *
 * Every LlamaForCausalLM-shaped model (Llama 2/3/3.x, Mistral, Qwen2, SmolLM) has the same seven
 * Linear layers per block. This table is the one place that says, for each of them:
 *   target  the name --targets takes ("q", ..., "down");
 *   module  the HF module path inside model.layers.{i} ("self_attn.q_proj");
 *   peft    PEFT's target_modules spelling ("q_proj");
 *   weight  the HF weight kind (io/model_files.h: its tensor name and the shape rule
 *           model_weight_shape derives from config.json);
 *   bias    the bias kind (present with config.attention_bias: Qwen2's q/k/v), or MW_COUNT.
 * Every list of linears in refine reads this table: io/peft (adapter files), train/export, the
 * reference model (ref/llama), the GPU model (gpu/llama) and the trainers. A new family with the
 * same block shape adds a column of names here, nothing else.
 *
 * Shapes: a linear computes y = x Wᵀ with W (C_out, C_in) row-major, as in an HF checkpoint:
 *   q (H·D, C)  k, v (KVH·D, C)  o (C, H·D)  gate, up (F, C)  down (C, F).
 */
#ifndef REFINE_IO_FAMILY_H
#define REFINE_IO_FAMILY_H

#include "io/config.h"
#include "io/model_files.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The seven linear layers of a block, in PEFT's target_modules order. */
enum llama_linear { LLAMA_Q = 0, LLAMA_K, LLAMA_V, LLAMA_O, LLAMA_GATE, LLAMA_UP, LLAMA_DOWN, LLAMA_N_LINEAR };

/* Bit (1u << t) per linear t: a set of targets. */
#define LLAMA_ALL_TARGETS ((1u << LLAMA_N_LINEAR) - 1u)

struct llama_linear_def {
    const char *target;       /* "q" */
    const char *module;       /* "self_attn.q_proj" */
    const char *peft;         /* "q_proj" */
    enum model_weight weight; /* MW_Q */
    enum model_weight bias;   /* MW_Q_BIAS, or MW_COUNT: no bias */
};

extern const struct llama_linear_def llama_linears[LLAMA_N_LINEAR];

/* C_out and C_in of linear t under config c (model_weight_shape of its weight kind). */
void llama_linear_shape(const struct model_config *c, enum llama_linear t, int *c_out, int *c_in);

/* 1 when linear t has a bias under config c (attention_bias and t one of q, k, v). */
int llama_linear_has_bias(const struct model_config *c, enum llama_linear t);

/* The linear whose weight kind is w, or -1 (norms, embeddings, lm_head, biases). */
int llama_linear_of_weight(enum model_weight w);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_FAMILY_H */
