/* fp8_weights.h — what an FP8-stored weight needs beyond quantization (gpu/fp8.h): its K-major
 * transposed copy formed from the stored codes, and its dequantization to bf16.
 *
 * Math (ref/fp8_linear.h's operands; codes (rows, cols) row-major, quantized along cols):
 *   gpu_fp8_transpose_codes        q_t[c·rows + r] = q[r·cols + c]: the transposed operand of a
 *                                  per-tensor or 128×128-block quantization, whose transposed copy
 *                                  is its transpose (ref_fp8_quantize's q_t), formed from the codes
 *                                  alone (an FP8-stored base forms its Wᵀ a layer at a time).
 *   gpu_fp8_transpose_block_scales s_t (the 128×128 layout of (cols, rows)) from s (that of (rows,
 *                                  cols)): s_t[cb·ld_t + rb] = s[rb·ld + cb], padding slots 0
 *                                  (ref/fp8.h's fp8_block_scale_index; ld, ld_t its leading
 *                                  dimensions): the same block scales, transposed.
 *   gpu_fp8_dequantize_bf16        x[r,c] = bf16_rne(dec(q[r,c])·σ(r,c)) (one fp32 product, one
 *                                  rounding), σ the operand's dequantization scale: s[0]
 *                                  (FP8_SCALING_TENSOR, device scalar) or its block's (1×128 or
 *                                  128×128 layouts). Exact for power-of-two scales (the frozen
 *                                  weights': dec has ≤ 4 significant bits), where it is
 *                                  ref_fp8_dequantize_operand bit for bit.
 * Shapes: q (rows, cols) codes; q_t (cols, rows); s, s_t fp32 (fp8_block_scale_count); x (rows,
 * cols) bf16 bit patterns. Outputs OVERWRITTEN. Preconditions: rows, cols ≥ 1. Aliasing: none.
 * Device pointers; nothing allocates or waits.
 *
 * Strategy: the transpose moves 32×32 byte tiles through shared memory (coalesced reads of q's
 * rows and writes of q_t's), one thread per 4 bytes; the dequantization is one thread per
 * element-group of 8 (one 8-byte load, one 16-byte store) with a scalar tail, the 256 decoded
 * values in shared memory. Memory-bound: 2 bytes a code (transpose), 3 bytes a code (dequantize).
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:fp8_weights_parity (--bench).
 */
#ifndef REFINE_GPU_FP8_WEIGHTS_H
#define REFINE_GPU_FP8_WEIGHTS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "ref/fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

void gpu_fp8_transpose_codes(uint8_t *q_t, const uint8_t *q, int64_t rows, int64_t cols, cudaStream_t stream);
void gpu_fp8_transpose_block_scales(float *s_t, const float *s, int64_t rows, int64_t cols, cudaStream_t stream);
void gpu_fp8_dequantize_bf16(uint16_t *x, const uint8_t *q, const float *s, enum fp8_scaling mode, int64_t rows,
                             int64_t cols, enum fp8_format f, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_FP8_WEIGHTS_H */
