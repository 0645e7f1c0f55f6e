/* swiglu.h — the SwiGLU gate of the Llama MLP on the GPU: bf16 in and out, fp32 arithmetic.
 *
 * Math (HF LlamaMLP: act_fn(gate_proj(x)) * up_proj(x), act_fn = SiLU; each bf16 tensor op of
 * torch rounds its result to bf16, and these kernels round at the same points):
 *   forward   a = bf16(silu(g)),  h = bf16(a·u),          silu(g) = g / (1 + exp(−g))
 *   backward  da = bf16(dh·u)                              (mul's gradient w.r.t. a)
 *             du = bf16(dh·a)                              (mul's gradient w.r.t. u)
 *             dg = bf16(da·σ(g)·(1 + g·(1 − σ(g))))       (silu_backward, fp32 inside)
 * Mirrors torch.nn.functional.silu and its autograd (aten silu_backward).
 *
 * Shapes: g, u (N, F) rows with row stride ld_in elements — g and u may be the two halves of the
 * fused gate/up GEMM output (N, 2F): g = y, u = y + F, ld_in = 2F; h, dh (N, F) contiguous;
 * dg, du (N, F) with row stride ld_out (the halves of a fused (N, 2F) gradient: ld_out = 2F).
 * h and dg/du are OVERWRITTEN.
 * Aliasing: dg may equal g and du may equal u (in place: each element is read before it is
 * written, by the same thread); dh must not alias anything written; h must not alias g, u, dg or du.
 * Preconditions: N ≥ 1, F ≥ 1; the 8-wide path needs F, ld_in, ld_out multiples of 8 and
 * 16-byte-aligned pointers, else a scalar path runs.
 */
#ifndef REFINE_GPU_SWIGLU_H
#define REFINE_GPU_SWIGLU_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void gpu_swiglu_forward_bf16(uint16_t *h, const uint16_t *g, const uint16_t *u, int N, int F, int ld_in,
                             cudaStream_t stream);

void gpu_swiglu_backward_bf16(uint16_t *dg, uint16_t *du, const uint16_t *dh, const uint16_t *g, const uint16_t *u,
                              int N, int F, int ld_in, int ld_out, cudaStream_t stream);

/* The backward, and the forward's h (N, F) formed again in the same pass from the same a: h bit for
 * bit gpu_swiglu_forward_bf16(h, g, u, N, F, ld_in) — the MLP input of a run that does not keep it
 * (--recompute-mlp), written as dg and du overwrite g and u in place (2 bytes an element more
 * instead of a forward's 6). h NULL: gpu_swiglu_backward_bf16. */
void gpu_swiglu_backward_forming_bf16(uint16_t *dg, uint16_t *du, uint16_t *h, const uint16_t *dh, const uint16_t *g,
                                      const uint16_t *u, int N, int F, int ld_in, int ld_out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_SWIGLU_H */
