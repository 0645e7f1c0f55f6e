/* cross_entropy.h — the lm_head fused with the causal-LM cross-entropy on the GPU, in row chunks:
 * the logits of at most `rows_per_chunk` tokens exist at any time (bf16), never fp32 logits for
 * all tokens; loss and the logits' gradient come out of one pass over each chunk's logits.
 *
 * Math (HF ForCausalLMLoss, NUMERICS.md §7.4, as ref/cross_entropy.h states it; labels are already
 * shifted, −100 = ignored):
 *   z[n, :] = bf16(h[n, :] Wᵀ)                                  (the lm_head's bf16 output)
 *   lse[n]  = max_j z + log Σ_j exp(z[n, j] − max_j z)          (fp32)
 *   nll[n]  = lse[n] − z[n, y_n] for valid rows, 0 for ignored rows
 *   loss    = Σ_n nll[n] / n_valid_total                        (Σ in double, fixed order)
 *   mult    = fp32(grad_scale / n_valid_total)                  (from double)
 *   dz[n,j] = bf16((softmax(z[n])_j − [j = y_n]) · mult), 0 on ignored rows
 *   dh      = bf16(dz W)                                          (N, C) OVERWRITTEN
 *   dW     += dzᵀ h                                               (V, C) ACCUMULATES, per chunk
 * n_valid_total is the number of valid labels of the whole optimizer batch (HF's
 * num_items_in_batch; the count of this call's labels when one micro-batch is the batch), so that
 * the losses and gradients of the micro-batches add up to the batch mean; grad_scale is the
 * upstream gradient of the loss (1 normally).
 * Products through gpu/gemm.h (fp32 accumulation). Mirrors torch F.cross_entropy(logits.float(),
 * labels, ignore_index=−100) with logits = F.linear(h, W) in bf16, and its autograd.
 *
 * Shapes: h (N, C) bf16; W (V, C) bf16 (the lm_head, or the embedding table when tied); labels (N)
 * int32 in [0, V) or −100; loss (1) fp32 device; dh (N, C) bf16 or NULL (no backward); dw (V, C)
 * fp32, or bf16 per dw_type (a bf16 accumulator: each chunk's product added and rounded once, as
 * gpu_linear_backward_dw), or NULL (frozen lm_head); workspace gpu_lm_head_ce_workspace_size(N, V, rows_per_chunk)
 * bytes (device, 256-byte aligned). All pointers device pointers.
 * Preconditions: N, C, V ≥ 1; 1 ≤ rows_per_chunk; n_valid_total ≥ 1 (CHECKed: HF's loss is NaN when
 * every label is ignored, and the caller skips such a batch); labels valid (not checked on the
 * device).
 * Deterministic: fixed reduction orders and one cached GEMM plan per shape.
 * Aliasing: none. The gemm context must not be used concurrently on another stream.
 */
#ifndef REFINE_GPU_CROSS_ENTROPY_H
#define REFINE_GPU_CROSS_ENTROPY_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CE_IGNORE_INDEX (-100)

size_t gpu_lm_head_ce_workspace_size(int N, int V, int rows_per_chunk);

void gpu_lm_head_cross_entropy_bf16(float *loss, uint16_t *dh, void *dw, enum gemm_out dw_type, const uint16_t *h,
                                    const uint16_t *w, const int32_t *labels, int N, int C, int V,
                                    int64_t n_valid_total, float grad_scale, int rows_per_chunk, struct gpu_gemm *gemm, void *workspace,
                                    cudaStream_t stream);

/* The softmax/loss part alone, on given bf16 logits z (N, V): nll (N) fp32 per row (0 when
 * ignored) and, when dz is non-NULL, dz (N, V) bf16 — dz may equal z (in place); mult as above.
 * For tests and for callers that hold the logits already. Runs the kernel
 * gpu_cross_entropy_rows_plan(V, CE_ROWS_AUTO) names. */
void gpu_cross_entropy_rows_bf16(float *nll, uint16_t *dz, const uint16_t *z, const int32_t *labels, int N, int V,
                                 float mult, cudaStream_t stream);

/* The two row kernels (the fused call and gpu_cross_entropy_rows_bf16 take CE_ROWS_AUTO):
 *  CE_ROWS_ONCHIP  one row per cluster of 1–8 CTAs (sm_90; one CTA elsewhere), the row's slices held
 *                  in shared memory: z read from DRAM once, dz written once (2 + 2 bytes a logit).
 *                  Three phases: max → M, Σ exp(z − M) → S, dz; fp32 sums of depth
 *                  ⌈slice/2048⌉ + 11 + log2(ctas_per_row) (the plan's sum_depth).
 *  CE_ROWS_STREAM  one 512-thread CTA per row, online (max, Σexp) then a second read of the row
 *                  (4 + 2 bytes a logit when the row has left L2); sum depth ⌈V/512⌉ + 9 (+ the
 *                  online rescalings). For rows too long for shared memory (V > 262144, or
 *                  V > 32768 before sm_90).
 * AUTO takes ONCHIP whenever the row fits. */
enum ce_rows_kernel { CE_ROWS_AUTO, CE_ROWS_ONCHIP, CE_ROWS_STREAM };

struct gpu_ce_rows_plan {
    enum ce_rows_kernel kernel; /* ONCHIP or STREAM, never AUTO */
    int ctas_per_row;           /* ONCHIP: 1, 2, 4 or 8 (a cluster when > 1); STREAM: 1 */
    int threads;                /* per CTA */
    int slice;                  /* ONCHIP: logits per CTA (a multiple of 8); STREAM: V */
    int sum_depth;              /* fp32 additions on the longest path into Σ exp */
};

/* The plan for rows of V logits on the current device; `want` ONCHIP when the row does not fit
 * returns STREAM (callers compare .kernel). */
struct gpu_ce_rows_plan gpu_cross_entropy_rows_plan(int V, enum ce_rows_kernel want);

/* gpu_cross_entropy_rows_bf16 with the kernel chosen (tests and benchmarks compare the two). */
void gpu_cross_entropy_rows_bf16_with(float *nll, uint16_t *dz, const uint16_t *z, const int32_t *labels, int N,
                                      int V, float mult, enum ce_rows_kernel kernel, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_CROSS_ENTROPY_H */
