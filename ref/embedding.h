/* embedding.h — token embedding: a gather forward, a scatter-add backward (DESIGN "ops" table).
 *
 * Forward (torch.nn.functional.embedding / HF LlamaModel.embed_tokens, no scaling, NUMERICS §7.1):
 *   out[n, c] = table[ids[n], c]                     out (N, C) OVERWRITTEN
 * A pure copy: no rounding in either dtype (the table already holds the values the model stores,
 * bf16-representable in a bf16 model), hence no act argument.
 *
 * Backward (only when the table trains; embedding's autograd is a scatter-add):
 *   dtable[ids[n], c] += dout[n, c]                  dtable (V, C) ACCUMULATES (parameter gradient)
 * in fp32, in increasing n, one add per token: a fixed order, so the result is bit-reproducible.
 * Rows of tokens that do not occur are untouched. With tied embeddings the lm_head gradient
 * (cross_entropy.h) accumulates into the same dtable; the two calls may come in either order (the
 * sum then differs only by fp32 rounding of the order, which the caller fixes: the model calls the
 * lm_head backward first, then this one).
 * A GPU kernel reproduces the order by sorting tokens by id (stable) and summing each id's rows in
 * n order in fp32; atomics give the same values only up to rounding.
 *
 * ids: int32 (N), each in [0, V) — CHECKed (the data loader validates user data before this).
 * Shapes: table, dtable (V, C) row-major; out, dout (N, C) row-major.
 * Aliasing: none.
 */
#ifndef REFINE_REF_EMBEDDING_H
#define REFINE_REF_EMBEDDING_H

#include <stdint.h>

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

void ref_embedding_forward(float *out, const int32_t *ids, const float *table, int N, int V, int C);

void ref_embedding_backward(float *dtable, const float *dout, const int32_t *ids, int N, int V, int C);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_EMBEDDING_H */
