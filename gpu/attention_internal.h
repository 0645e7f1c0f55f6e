/* attention_internal.h — the two implementations behind gpu/attention.h and the hooks their tests
 * use (C++, for gpu/attention*.cu and tests/parity/attention_parity.cu; not C-callable).
 *
 * attention_forward / attention_backward take the kernel family explicitly:
 *   ATTN_KERNEL_AUTO  what gpu_attention_*_bf16 run: the Hopper kernels when attn90_available(D)
 *                     (a compute capability 9.x device whose binary holds their sm_90a code, and
 *                     D ∈ {64, 128}), else the sm_80 kernels — unless REFINE_ATTENTION_KERNEL=sm80 is
 *                     set in the environment, which forces the sm_80 kernels (a diagnostic switch
 *                     for before/after measurements of whole training steps);
 *   ATTN_KERNEL_SM80  the mma.sync kernels of gpu/attention.cu (any D of the header, any device);
 *   ATTN_KERNEL_SM90  the wgmma/TMA kernels of gpu/attention_sm90_{fwd,bwd}.cu (CHECK-fails when
 *                     attn90_available(D) is false).
 * dbg (tests): where a Hopper kernel records a wait that hung instead of trapping
 * (gpu/attention_sm90.cuh, "Watchdog"); device memory, zeroed by the caller; nullptr traps.
 *
 * attn90_probe runs one of the Hopper kernels' warpgroup GEMMs alone, on tiles loaded and stored
 * exactly as the kernels do (tests/parity/attention_parity.cu checks them bit for bit on
 * integer-valued inputs before any attention case, so that a layout error is named by the GEMM it
 * breaks). Cases, with BM = 64 for D = 128 and 128 for D = 64; a, b, c device buffers:
 *   ATTN_PROBE_QK   c (128 × 128) = a (128 × D) · b (128 × D)ᵀ                (forward S)
 *   ATTN_PROBE_PV   c (128 × D) = a (128 × 128, bf16 via registers) · b (128 × D) (forward O)
 *   ATTN_PROBE_SDP  c (128 × BM) = a (128 × D) · b (BM × D)ᵀ                  (backward Sᵀ, dPᵀ)
 *   ATTN_PROBE_DKV  c (128 × D) = a (128 × BM, via registers) · b (BM × D)     (backward dV, dK)
 *   ATTN_PROBE_DQ   c (BM × D, in the dQ tile order of attention_sm90_layout.h) = aᵀ · b with
 *                   a (128 × BM) stored through shared memory and b (128 × D) (backward dQ)
 * c is fp32 row-major (except DQ), a and b bf16 row-major.
 */
#ifndef REFINE_GPU_ATTENTION_INTERNAL_H
#define REFINE_GPU_ATTENTION_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace refine {

enum AttnKernel { ATTN_KERNEL_AUTO = 0, ATTN_KERNEL_SM80 = 1, ATTN_KERNEL_SM90 = 2 };

/* Filled by the first wait of a Hopper kernel that hung (hung = 1). */
struct HangRecord {
    int hung;   /* 0 until a wait gave up */
    int code;   /* which wait: attention_sm90.cuh, HANG_* */
    int block;  /* linear block index */
    int thread; /* threadIdx.x */
    int info;   /* the wait's pipeline position (iteration counter) */
};

/* RoPE's backward applied to dq and dk by the attention backward (gpu/attention.h,
 * gpu_attention_rope_backward_strided_bf16): gpu/rope.h's bf16 tables (max_pos, D/2) and the
 * positions (B·T) of q's and k's rows. */
struct RopeBwd {
    const uint16_t *cos, *sin;
    const int32_t *pos;
};

/* ld_o: out's (and the backward's dout's) row stride in elements; 0: H·D (packed rows). ld_g: the
 * backward's dq, dk and dv row stride, one for the three (a caller's buffer holding them side by
 * side, gpu/llama.cu); 0: packed (H·D for dq, KVH·D for dk and dv). rope (or nullptr): dq and dk come
 * out as the gradients of the pre-RoPE q and k, bitwise the backward followed by
 * gpu_rope_backward_bf16 — applied by the Hopper kernels as they store dq and dk where they run and
 * the tables are 16-byte aligned, else by that pass after the kernels. */
void attention_forward(enum AttnKernel kernel, uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                       const uint16_t *v, int B, int T, int H, int KVH, int D, float scale, cudaStream_t stream,
                       HangRecord *dbg, int64_t ld_o = 0);
void attention_backward(enum AttnKernel kernel, uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                        const uint16_t *q, const uint16_t *k, const uint16_t *v, const uint16_t *out, const float *lse,
                        int B, int T, int H, int KVH, int D, float scale, void *workspace, cudaStream_t stream,
                        HangRecord *dbg, int64_t ld_o = 0, int64_t ld_g = 0, const RopeBwd *rope = nullptr);
/* The family AUTO picks for head dim D on the current device. */
enum AttnKernel attention_auto_kernel(int D);

/* ---- the Hopper kernels (gpu/attention_sm90_*.cu) ---- */
bool attn90_available(int D);
/* ld_o as attention_forward/backward resolved it (≥ H·D); ld_q, ld_kv: dq's and dk/dv's row strides */
void attn90_forward(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v, int B, int T,
                    int H, int KVH, int D, float scale, cudaStream_t stream, HangRecord *dbg, int64_t ld_o);
void attn90_backward(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q,
                     const uint16_t *k, const uint16_t *v, const uint16_t *out, const float *lse, int B, int T, int H,
                     int KVH, int D, float scale, void *workspace, cudaStream_t stream, HangRecord *dbg,
                     int64_t ld_o, int64_t ld_q, int64_t ld_kv, const RopeBwd *rope);

enum AttnProbe { ATTN_PROBE_QK = 0, ATTN_PROBE_PV, ATTN_PROBE_SDP, ATTN_PROBE_DKV, ATTN_PROBE_DQ, ATTN_PROBE_COUNT };
void attn90_probe(enum AttnProbe which, int D, float *c, const uint16_t *a, const uint16_t *b, cudaStream_t stream,
                  HangRecord *dbg);

} // namespace refine

#endif /* REFINE_GPU_ATTENTION_INTERNAL_H */
