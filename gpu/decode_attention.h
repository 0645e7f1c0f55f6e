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
 * 0 ≤ pos < T_max: a precondition, not checked on the device); workspace
 * gpu_decode_attention_workspace_size(N, H, D, T_max) bytes (0, and NULL allowed, when
 * T_max ≤ GPU_DECODE_ATTENTION_SPLIT), 16-byte aligned, contents on entry irrelevant.
 * Strategy (flash-decoding): one CTA of 128 threads per (row, kv head, split of
 * GPU_DECODE_ATTENTION_SPLIT positions, tile of gpu_decode_attention_heads_per_cta query heads of
 * the kv head's group): the cache rows are read once per kv head for all the heads of its group
 * (H/KVH ≤ 8; a larger group takes several tiles), 16-byte loads, D/8 lanes a row; rows with more
 * than one split get a second kernel that combines the splits' (max, sum, partial output) in split
 * order. Every sum has a fixed order (the .cu's header gives it): the same bits on every run, and a
 * row's result depends on its own data only (the split length is a constant). Memory-bound on the
 * cache reads.
 * Preconditions: D ∈ {16, 32, 64, 128}; q, k_cache, v_cache 16-byte aligned, ld_q % 8 == 0;
 * T_max ≤ gpu_decode_attention_max_positions().
 * Aliasing: none.
 */
#ifndef REFINE_GPU_DECODE_ATTENTION_H
#define REFINE_GPU_DECODE_ATTENTION_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Positions per split: a row with pos ≥ this many is cut into ceil((pos + 1)/SPLIT) splits. */
#define GPU_DECODE_ATTENTION_SPLIT 256

/* The largest T_max taken (no shared-memory limit: the splits bound a CTA's scores). */
int gpu_decode_attention_max_positions(void);

/* Query heads a CTA takes: H/KVH rounded up to 1, 2, 4 or 8, at most 8. */
int gpu_decode_attention_heads_per_cta(int H, int KVH);

/* Bytes of workspace for N rows: N·H·ceil(T_max/SPLIT)·(D + 2) floats when T_max > SPLIT, else 0. */
size_t gpu_decode_attention_workspace_size(int N, int H, int D, int T_max);

void gpu_decode_attention_bf16(uint16_t *out, const uint16_t *q, int ld_q, const uint16_t *k_cache,
                               const uint16_t *v_cache, const int32_t *seq, const int32_t *pos, int N, int H, int KVH,
                               int D, int S, int T_max, float scale, void *workspace,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_DECODE_ATTENTION_H */
