/* dropout.h — inverted dropout on the GPU with ref/dropout.h's counter-based mask, bit for bit.
 *
 * Math (ref/dropout.h, torch.nn.functional.dropout(training=True) with refine's mask): for element
 * e of a call keyed (seed, offset), keep(e) = u(e) ≥ p with u from Philox4x32-10 at counter
 * (e >> 2, offset), key seed, lane e & 3 (gpu/philox.cuh); scale = fp32(1 / (1 − p)) from double;
 *   forward   out[e] = keep(e) ? bf16(x[e]·scale) : 0
 *   backward  dx[e]  = keep(e) ? bf16(dy[e]·scale) : 0        (the same mask: same seed, offset)
 * out / dx OVERWRITE. The mask never exists in memory: it is recomputed from the counters, so the
 * backward costs no saved state; kernels that fuse dropout use dropout_keep4 of gpu/philox.cuh.
 * Shapes: x, out, dy, dx (n) bf16, device pointers. Preconditions: 0 ≤ p < 1, n ≥ 0 (CHECKed).
 * Aliasing: out may equal x, dx may equal dy (in place); no other overlap.
 */
#ifndef REFINE_GPU_DROPOUT_H
#define REFINE_GPU_DROPOUT_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void gpu_dropout_forward_bf16(uint16_t *out, const uint16_t *x, int64_t n, float p, uint64_t seed, uint64_t offset,
                              cudaStream_t stream);

/* keep (n) bytes: 1 where the call keyed (seed, offset) keeps element e, else 0 (ref_dropout_mask's
 * mask): the `keep` argument of gpu/lora.h's backward. */
void gpu_dropout_mask_u8(uint8_t *keep, int64_t n, float p, uint64_t seed, uint64_t offset, cudaStream_t stream);

void gpu_dropout_backward_bf16(uint16_t *dx, const uint16_t *dy, int64_t n, float p, uint64_t seed, uint64_t offset,
                               cudaStream_t stream);

/* Elements first .. first + n − 1 of the call keyed (seed, offset), into out[0 .. n) (and their
 * mask into keep[0 .. n)): the same values as that slice of the whole call, for a caller that
 * forms a tensor in row chunks (gpu/llama.cu's MLP chunks). first is a multiple of 4 (CHECKed). */
void gpu_dropout_forward_at_bf16(uint16_t *out, const uint16_t *x, int64_t n, float p, uint64_t seed, uint64_t offset,
                                 int64_t first, cudaStream_t stream);
void gpu_dropout_mask_at_u8(uint8_t *keep, int64_t n, float p, uint64_t seed, uint64_t offset, int64_t first,
                            cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_DROPOUT_H */
