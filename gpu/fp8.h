/* fp8.h — FP8 quantization on the GPU: amax, Transformer Engine's scaling recipes (delayed and
 * current), the cast to E4M3/E5M2 with its transposed copy, and 1×128 / 128×128 block
 * quantization. Every code, scale and statistic is bit-exact with ref/fp8.h, which defines them
 * (NUMERICS.md §6); the parity test demands it.
 *
 * Math, x (rows, cols) bf16 row-major:
 *   gpu_fp8_amax_*       *amax = max(*amax, max|x|), NaN ignored (fmaxf), ±Inf counts. It
 *                        ACCUMULATES: a fresh amax needs *amax = 0 first (cudaMemsetAsync); under
 *                        delayed scaling the update kernel zeroes the history slot it records into.
 *                        *amax must not be negative or NaN (the max is an integer atomicMax on the
 *                        bits of non-negative floats: order-independent, so deterministic).
 *   gpu_fp8_cast_bf16    q[r, c] = fp8(x[r, c]·scale) — one fp32 multiply, round to nearest even,
 *                        SATFINITE — and q_t[c, r] = the same code (q_t = qᵀ: Hopper's FP8 GEMMs take
 *                        K-major operands only, so a tensor used along its other dimension is stored
 *                        transposed too; TE's "columnwise" copy); either output may be NULL. The
 *                        scale comes from the recipe (struct gpu_fp8_scaling):
 *     GPU_FP8_DELAYED    reads *scale (written by the last gpu_fp8_delayed_update) and max-records
 *                        the tensor's amax into *amax (its history slot 0): amax and cast in one pass.
 *     GPU_FP8_CURRENT    reads *amax (gpu_fp8_amax_bf16 of this tensor, run before), computes
 *                        scale = fp8_current_scale(*amax, format, amax_eps, power_2) and writes *scale
 *                        and *scale_inv = 1/scale (the GEMM's dequantization scale).
 *   gpu_fp8_delayed_update  for each tensor t < n: ref's fp8_delayed_update on history row t
 *                        (history is (n, history_len) row-major) and scale[t], scale_inv[t]: the
 *                        window's max (or slot 0), the rotation, the zeroed slot 0, the new scale
 *                        (kept when the amax is ≤ 0 or not finite; FLT_MAX on overflow). One launch
 *                        for every tensor of a format (TE's amax_and_scale_update). TE's defaults:
 *                        ref/fp8.h's FP8_DELAYED_HISTORY_LEN (1024), _MARGIN (0), _ALGO (max);
 *                        history_len ≤ 4096. Start: history zero, scale = scale_inv = 1.
 *   gpu_fp8_block_quantize_bf16  ref's fp8_block_quantize: per block (1×128 or 128×128) amax, its
 *                        current scale, the codes, the dequantization scales s_inv in cuBLASLt's
 *                        VEC128_32F / BLK128x128_32F layouts (padding slots 0), and optionally the
 *                        transposed outputs (1×128: a second quantization of xᵀ from x, 128×128: qᵀ).
 *                        *amax (optional) max-records the whole tensor's amax (for the metrics).
 *   gpu_fp8_swiglu_forward / _backward  SwiGLU (gpu/swiglu.h) with the cast behind it in one pass:
 *                        the codes of h = swiglu(g, u) (forward), or of dg and du (backward, dh of
 *                        row stride F), each output exactly what gpu_fp8_cast_bf16 writes and records
 *                        for the bf16 tensor gpu_swiglu_forward_bf16 / gpu_swiglu_backward_bf16 form
 *                        (their arithmetic, their rounding), under its own DELAYED scaling (struct
 *                        gpu_fp8_out: q and/or q_t, both outputs alike; flags optional); *saturated
 *                        counts every output's clamped codes. Nothing else is written — no bf16 dg or
 *                        du, and h (row stride F) only when given: the forward's bf16 values too,
 *                        gpu_swiglu_forward_bf16's bits. Only the fast path's shapes run (rows and F multiples of 16, ld_in
 *                        of 8, every pointer 16-byte aligned, delayed scaling): else 0 is returned
 *                        and nothing is launched (the caller runs SwiGLU and the cast apart).
 * Statistics (each optional: NULL skips it; device; ACCUMULATED across calls): *flags |= ref/fp8.h's
 *   FP8_FLAG_INPUT_NONFINITE (an input is NaN or ±Inf) and FP8_FLAG_AMAX_NONFINITE (an amax a
 *   scale was computed from was not finite: the scale fell back, TE's rules) — a caller folds
 *   them into its step guard; *saturated += the number of codes SATFINITE clamped (ref's
 *   fp8_saturates; the 1×128 transposed copy is a second quantization and counts too).
 *
 * Shapes and types: x bf16 bit patterns (rows, cols); q (rows, cols) and q_t (cols, rows) codes;
 * scale, scale_inv, amax device fp32 scalars (nothing waits on the host); history (n,
 * history_len) fp32. Preconditions (CHECKed): rows, cols, n ≥ 1; history_len ≥ 1; an output to
 * write. The fast path needs rows and cols multiples of 16 and x, q, q_t 16-byte aligned; any
 * other shape or alignment takes the element-wise path of the same kernel (same results). The
 * GEMM needs multiples of 16 anyway (gpu/gemm.h). Aliasing: none. Nothing allocates or waits.
 *
 * Mirrors: Transformer Engine's cast_transpose / quantize_transpose_{vector,square}_blockwise and
 * delayed_scaling.cu; DeepSeek-V3 §3.3.
 */
#ifndef REFINE_GPU_FP8_H
#define REFINE_GPU_FP8_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "ref/fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

enum gpu_fp8_recipe { GPU_FP8_DELAYED = 0, GPU_FP8_CURRENT = 1 };

/* Where one per-tensor quantization takes its scale (device scalars). */
struct gpu_fp8_scaling {
    enum fp8_format format;
    enum gpu_fp8_recipe recipe;
    float *scale;     /* delayed: read; current: written */
    float *scale_inv; /* delayed: not touched (the update wrote it); current: written */
    float *amax;      /* delayed: max-recorded (history slot 0); current: read */
    float amax_eps;   /* current: TE's amax_epsilon (default 0) */
    int power_2;      /* current: 1 rounds the scale down to a power of two (TE default 0) */
};

void gpu_fp8_amax_bf16(float *amax, unsigned *flags, const uint16_t *x, int64_t n, cudaStream_t stream);
void gpu_fp8_amax_f32(float *amax, unsigned *flags, const float *x, int64_t n, cudaStream_t stream);

void gpu_fp8_cast_bf16(uint8_t *q, uint8_t *q_t, const uint16_t *x, int64_t rows, int64_t cols,
                       const struct gpu_fp8_scaling *s, unsigned *flags, unsigned long long *saturated,
                       cudaStream_t stream);

/* One output of a fused producer + cast: codes, transposed codes (either may be NULL), its scaling
 * and flags. */
struct gpu_fp8_out {
    uint8_t *q, *q_t;
    const struct gpu_fp8_scaling *s;
    unsigned *flags;
};
int gpu_fp8_swiglu_forward(const struct gpu_fp8_out *hq, uint16_t *h, const uint16_t *g, const uint16_t *u, int64_t rows,
                           int64_t F, int64_t ld_in, unsigned long long *saturated, cudaStream_t stream);
int gpu_fp8_swiglu_backward(const struct gpu_fp8_out *dg, const struct gpu_fp8_out *du, const uint16_t *dh,
                            const uint16_t *g, const uint16_t *u, int64_t rows, int64_t F, int64_t ld_in,
                            unsigned long long *saturated, cudaStream_t stream);
void gpu_fp8_delayed_update(float *history, float *scale, float *scale_inv, int n, int history_len,
                            enum fp8_amax_algo algo, int margin, enum fp8_format format, unsigned *flags,
                            cudaStream_t stream);

/* q, s_inv required; q_t and s_inv_t together or both NULL. Sizes: ref/fp8.h's
 * fp8_block_scale_count(block, rows, cols) for s_inv, (block, cols, rows) for s_inv_t. */
void gpu_fp8_block_quantize_bf16(uint8_t *q, float *s_inv, uint8_t *q_t, float *s_inv_t, const uint16_t *x,
                                 int64_t rows, int64_t cols, enum fp8_block block, enum fp8_format format,
                                 float amax_eps, int power_2, float *amax, unsigned *flags,
                                 unsigned long long *saturated, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_FP8_H */
