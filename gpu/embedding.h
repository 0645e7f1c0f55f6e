/* embedding.h — token embedding on the GPU: gather forward, deterministic scatter-add backward.
 *
 * Math (torch.nn.functional.embedding and its backward):
 *   forward   out[n, :] = table[ids[n], :]                              bf16 copy, OVERWRITES out
 *   backward  dtable[v, :] += Σ_{n : ids[n] = v} dout[n, :]            fp32, ACCUMULATES
 * The backward adds, for each id, its rows in ascending n one at a time onto dtable's old value in
 * fp32 — the order of the plain loop `for n: dtable[ids[n]] += dout[n]` — so the result is the
 * same bits on every run, independent of the grid (no atomics): each block owns a fixed set of
 * ids, finds their rows in ascending n and sums each id's rows in that order.
 *
 * Shapes: ids (N) int32, 0 ≤ ids[n] < V (a precondition the data pipeline guarantees; it is not
 * checked on the device); table (V, C) bf16; out, dout (N, C) bf16; dtable (V, C) fp32;
 * Preconditions: N ≥ 1, C ≥ 1, V ≥ 1. The forward moves 16 bytes per thread when C % 8 == 0 and
 * the pointers are 16-byte aligned. Aliasing: none.
 */
#ifndef REFINE_GPU_EMBEDDING_H
#define REFINE_GPU_EMBEDDING_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void gpu_embedding_forward_bf16(uint16_t *out, const int32_t *ids, const uint16_t *table, int N, int C, int V,
                                cudaStream_t stream);

void gpu_embedding_backward_f32(float *dtable, const uint16_t *dout, const int32_t *ids, int N, int C, int V,
                                cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_EMBEDDING_H */
