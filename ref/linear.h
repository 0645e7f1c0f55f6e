/* linear.h — the linear layer y = x Wᵀ (+ b), as torch.nn.functional.linear, and its backward.
 *
 *   forward   y[n,o]  = act( Σ_i x[n,i]·W[o,i] + b[o] )          y (N, C_out) OVERWRITTEN
 *   backward  dx[n,i] = act( Σ_o dy[n,o]·W[o,i] )                dx (N, C_in) OVERWRITTEN
 *             dW[o,i] += Σ_n dy[n,o]·x[n,i]                       dW (C_out, C_in) ACCUMULATES
 *             db[o]   += Σ_n dy[n,o]                              db (C_out) ACCUMULATES
 * x (N, C_in); W (C_out, C_in) row-major (torch's weight layout); b (C_out) or NULL; any of
 * dx, dW, db may be NULL to skip it (a frozen W gets no dW).
 *
 * ref_linear_*: through OpenBLAS cblas_sgemm (fp32 accumulation in BLAS's own order; reproducible
 *   bit for bit on one machine with OPENBLAS_NUM_THREADS fixed, not across CPU kernels).
 * ref_linear_*_naive: the triple loop with double accumulation in index order — bit-reproducible
 *   anywhere; the oracle the sgemm path and the GPU GEMMs are tested against.
 * act(): identity for ACT_F32, bf16 rounding of the stored result for ACT_BF16 (the GPU writes
 * bf16 activations; dW/db stay fp32 in both modes).
 * Aliasing: none.
 */
#ifndef REFINE_REF_LINEAR_H
#define REFINE_REF_LINEAR_H

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

void ref_linear_forward(float *y, const float *x, const float *w, const float *b, int N, int C_in, int C_out,
                        enum act_dtype act);

void ref_linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int N,
                         int C_in, int C_out, enum act_dtype act);

void ref_linear_forward_naive(float *y, const float *x, const float *w, const float *b, int N, int C_in, int C_out,
                              enum act_dtype act);

void ref_linear_backward_naive(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int N,
                               int C_in, int C_out, enum act_dtype act);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_LINEAR_H */
