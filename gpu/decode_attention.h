/* decode_attention.h — attention of query rows against a bf16 key/value cache on the GPU: the
 * attention of generation (prefill and decode steps), causal by position, grouped-query.
 *
 * The math of ref/decode_attention.h with act = ACT_BF16 (that file is the oracle;
 * tests/parity/decode_attention_parity.cu holds the proof): row n of sequence seq[n] at position
 * pos[n] attends to the cached positions 0..pos[n] of its sequence; query head h reads kv head
 * h / (H/KVH); s = scale·q·k (fp32), p = exp(s − max) / Σ exp(s − max) (fp32, not rounded),
 * out = bf16(Σ p·v) (fp32 sums).
 *
 * Layout: q rows with stride ld_q elements (q may be the first H·D columns of a fused QKV row:
 * ld_q = (H + 2·KVH)·D); out (N, H·D) contiguous, OVERWRITTEN; k_cache, v_cache
 * (S, T_max, KVH, D) bf16 — one layer's cache; seq, pos (N) int32 device arrays (0 ≤ seq < S,
 * 0 ≤ pos < T_max: a precondition, not checked on the device).
 * Strategy: one CTA of 128 threads per (row, head); the scores of the row live in shared memory
 * (T_max floats: T_max ≤ gpu_decode_attention_max_positions()); threads stride over positions for
 * the scores (one key row each, 16-byte loads), then over (position, dim) pairs for the output
 * with a shared-memory reduction. Memory-bound on the cache reads.
 * Preconditions: D ∈ {16, 32, 64, 128}; q, k_cache, v_cache 16-byte aligned, ld_q % 8 == 0.
 * Aliasing: none.
 */
#ifndef REFINE_GPU_DECODE_ATTENTION_H
#define REFINE_GPU_DECODE_ATTENTION_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest T_max whose scores fit in the shared memory of one CTA on this device. */
int gpu_decode_attention_max_positions(void);

void gpu_decode_attention_bf16(uint16_t *out, const uint16_t *q, int ld_q, const uint16_t *k_cache,
                               const uint16_t *v_cache, const int32_t *seq, const int32_t *pos, int N, int H, int KVH,
                               int D, int S, int T_max, float scale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_DECODE_ATTENTION_H */
