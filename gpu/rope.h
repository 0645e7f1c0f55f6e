/* rope.h — rotary position embedding on the GPU, Q and K together, in place, bf16.
 *
 * Math (HF apply_rotary_pos_emb, non-interleaved "rotate_half"; NUMERICS.md §7.2): for each row n,
 * each head, and each pair i ∈ [0, D/2) (dim i pairs with dim i + D/2), with c = cos[pos[n], i],
 * s = sin[pos[n], i] (the bf16 tables of ref/rope.h, llama3 frequency scaling already applied):
 *   forward   x1' = bf16(bf16(x1·c) − bf16(x2·s))     x2' = bf16(bf16(x2·c) + bf16(x1·s))
 *   backward  dx1 = bf16(bf16(dy1·c) + bf16(dy2·s))   dx2 = bf16(bf16(dy2·c) − bf16(dy1·s))
 * i.e. torch's q·cos + rotate_half(q)·sin with every bf16 tensor op rounding, and its autograd
 * (the backward is the same rotation with −sin). Q and K are rotated in one launch.
 *
 * Shapes: q (N rows, H·D) with row stride ld_q; k (N rows, KVH·D) with row stride ld_k — q and k
 * may be column ranges of the fused QKV GEMM output (N, (H + 2·KVH)·D): q = y, k = y + H·D,
 * ld_q = ld_k = (H + 2·KVH)·D. cos, sin (T_max, D/2) bf16, built once on the host by ref/rope.h
 * and uploaded; pos (N) int32, 0 ≤ pos[n] < T_max (positions restart in packed sequences).
 * q and k are updated IN PLACE (forward: activations; backward: dq, dk).
 * Preconditions: N ≥ 1, H ≥ 1, KVH ≥ 0, D even. 8 pairs per thread when D/2, ld_q, ld_k are
 * multiples of 8 and q, k 16-byte aligned; else one pair per thread.
 * Aliasing: q and k must not overlap; tables and pos are read-only.
 * The trainers' backward does not call gpu_rope_backward_bf16: the attention backward applies it as it
 * stores dq and dk (gpu/attention.h, gpu_attention_rope_backward_strided_bf16; the per-pair arithmetic
 * of both in gpu/rope.cuh).
 */
#ifndef REFINE_GPU_ROPE_H
#define REFINE_GPU_ROPE_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void gpu_rope_forward_bf16(uint16_t *q, uint16_t *k, const uint16_t *cos, const uint16_t *sin, const int32_t *pos,
                           int N, int H, int KVH, int D, int ld_q, int ld_k, cudaStream_t stream);

/* The forward from a source: q_src and k_src (the same shapes and strides as q and k) rotated into
 * q and k, the sources unchanged — the same bits as copying them and rotating in place. A source
 * may be its destination (then this is gpu_rope_forward_bf16); otherwise they must not overlap.
 * DoRA's q and k whose scaled product writes the pre-RoPE output where the backward reads it
 * (gpu/llama.cu) use it. */
void gpu_rope_forward_from_bf16(uint16_t *q, uint16_t *k, const uint16_t *q_src, const uint16_t *k_src,
                                const uint16_t *cos, const uint16_t *sin, const int32_t *pos, int N, int H, int KVH,
                                int D, int ld_q, int ld_k, cudaStream_t stream);

void gpu_rope_backward_bf16(uint16_t *dq, uint16_t *dk, const uint16_t *cos, const uint16_t *sin, const int32_t *pos,
                            int N, int H, int KVH, int D, int ld_q, int ld_k, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_ROPE_H */
