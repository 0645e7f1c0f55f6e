/* embedding.h — token embedding on the GPU: gather forward, deterministic scatter-add backward.
 *
 * Math (torch.nn.functional.embedding and its backward):
 *   forward   out[n, :] = table[ids[n], :]                              bf16 copy, OVERWRITES out
 *   backward  dtable[v, :] += Σ_{n : ids[n] = v} dout[n, :]            ACCUMULATES
 * The backward adds, for each id, its rows in ascending n one at a time onto dtable's old value in
 * fp32 — the order of the plain loop `for n: dtable[ids[n]] += dout[n]` — so the result is the
 * same bits on every run, independent of the grid (no atomics): each block owns a fixed set of
 * ids, finds their rows in ascending n and sums each id's rows in that order.
 * dtable_type GEMM_OUT_F32: dtable is fp32 and holds that sum. GEMM_OUT_BF16 (the bf16 gradient
 * accumulator, NUMERICS.md §5.6): the same adds, in the same order, start from the widened (exact)
 * old bf16 value, and the sum is rounded to bf16 once (RNE) when stored —
 *   dtable[v, c] = bf16(f32(dtable[v, c]) + dout[n1, c] + dout[n2, c] + ...)   (n1 < n2 < ..., fp32
 * adds left to right), bit for bit the fp32 form's result from the widened old table, rounded.
 * Either way only the rows of ids that occur in ids are read and written; the others are untouched.
 *
 * Shapes: ids (N) int32, 0 ≤ ids[n] < V (a precondition the data pipeline guarantees; it is not
 * checked on the device); table (V, C) bf16; out, dout (N, C) bf16; dtable (V, C) fp32 or bf16 per
 * dtable_type, aligned to its element size.
 * Preconditions: N ≥ 1, C ≥ 1, V ≥ 1. Both passes move 16 bytes per access when C % 8 == 0 and
 * the pointers are 16-byte aligned (every row then starts 16-byte aligned for either dtable type).
 * Aliasing: none.
 */
#ifndef REFINE_GPU_EMBEDDING_H
#define REFINE_GPU_EMBEDDING_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gemm.h" /* enum gemm_out: dtable's dtype */

#ifdef __cplusplus
extern "C" {
#endif

void gpu_embedding_forward_bf16(uint16_t *out, const int32_t *ids, const uint16_t *table, int N, int C, int V,
                                cudaStream_t stream);

void gpu_embedding_backward(void *dtable, enum gemm_out dtable_type, const uint16_t *dout, const int32_t *ids, int N,
                            int C, int V, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_EMBEDDING_H */
