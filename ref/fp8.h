/* fp8.h — FP8 E4M3 ("fn") and E5M2 conversions, Transformer Engine's scaling recipes, and the
 * reference FP8 GEMM (NUMERICS.md §6).
 *
 * Formats (NVIDIA cuda_fp8.h __nv_fp8_e4m3 / __nv_fp8_e5m2, torch.float8_e4m3fn / float8_e5m2):
 *   E4M3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; NaN = S.1111.111
 *           (0x7F, 0xFF). Max finite 0x7E = 448, min normal 2^-6, min subnormal 2^-9.
 *   E5M2:   1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like. ±Inf = S.11111.00,
 *           NaN = S.11111.{01,10,11}. Max finite 0x7B = 57344, min normal 2^-14, min subnormal 2^-16.
 *
 * float → fp8 is round-to-nearest-even of the exact fp32 value (subnormals kept, no flush), then
 * what happens beyond the largest finite value depends on the mode:
 *   FP8_SATFINITE (cuda __NV_SATFINITE: the __nv_fp8_* constructors and TE's casts): a result
 *       beyond ±max finite becomes ±max finite, and so does ±Inf.
 *   FP8_NOSAT (cuda __NV_NOSAT): E4M3fn: a value that rounds beyond 448 (|x| > 464, the midpoint
 *       to the would-be 480; 464 itself ties to the even 448) becomes NaN, ±Inf becomes NaN;
 *       E5M2: a value that rounds beyond 57344 (|x| ≥ 61440) becomes ±Inf, ±Inf stays ±Inf.
 *   FP8_TORCH (torch 2.15 x.to(torch.float8_*), dumped): E4M3fn saturates like SATFINITE
 *       (±Inf → ±448 included); E5M2 overflows to ±Inf like NOSAT.
 *   NaN input gives 0x7F with the input's sign bit in both formats (torch keeps the sign; cuda's
 *   conversion returns 0x7F for every NaN, dropping the sign: parity tests compare NaN positions,
 *   not payloads). −0 stays −0.
 * Settled on an H100 (CUDA 13, 2026-11-23; tests/golden/gen/fp8_cuda_probe.cu): the device's
 *   __nv_cvt_float_to_fp8 in all four modes (E4M3/E5M2 × SATFINITE/NOSAT) agrees with this file
 *   on 2,099,172 inputs — every midpoint of adjacent values and its two float neighbours, the
 *   overflow thresholds, ±Inf, 2^21 random bit patterns — except NaN payloads (2,059 NaN inputs
 *   with the sign bit set). ±Inf under SATFINITE gives ±max finite (0x7E/0xFE, 0x7B/0xFB); under
 *   NOSAT, E4M3 gives NaN (0x7F/0xFF), E5M2 ±Inf (0x7C/0xFC). torch 2.15's CUDA and CPU
 *   float8 conversions agree on 2^22 random patterns; FP8_TORCH reproduces them (golden test).
 * fp8 → float is exact.
 *
 * Settled against torch 2.15 float8 dtypes (tests/golden/gen/gen_formats.py): see fp8_test.c and
 * formats_golden_test.c for the findings.
 *
 * Scaling (Transformer Engine, transformer_engine/common/recipe/):
 *   quantize: q = fp8(x · scale) (fp32 multiply, then the SATFINITE cast); scale_inv = 1/scale
 *             (fp32 division, = __frcp_rn); dequantize x ≈ float(q) · scale_inv.
 *   Delayed scaling (DelayedScaling, one tensor's state: amax_history[len], scale):
 *     fp8_delayed_update():
 *       1. amax = max(history[0..len)) for FP8_AMAX_MAX, history[0] for FP8_AMAX_MOST_RECENT;
 *       2. rotate the history left by one (new[i] = old[i+1], old[0] goes to the last slot),
 *          then zero slot 0, the slot the next iteration's kernels write into;
 *       3. scale = (fp8_max / amax) / 2^margin, computed as fp8_max · 2^-margin / amax in fp32;
 *       4. amax ≤ 0 or non-finite: the previous scale is kept; a scale that overflows to +Inf
 *          becomes FLT_MAX;
 *       5. scale_inv = 1/scale (fp32).
 *     fp8_delayed_record(): history[0] = max(history[0], amax of a tensor) (what a quantize
 *       kernel does when it writes its amax).
 *   Current scaling (Float8CurrentScaling, compute_scale_from_amax):
 *     amax = max|x| over the tensor; amax < eps → amax = eps; amax Inf/NaN or 0 → scale = 1;
 *     else scale = fp8_max / amax (fp32 RN division), +Inf → FLT_MAX; with power_2 the scale's
 *     mantissa bits are cleared (bits & 0xFF800000), i.e. rounded down to a power of two.
 *
 * Reference FP8 GEMM (the oracle for the cuBLASLt TN FP8 GEMM as TE issues it):
 *   A (M, K) codes of format fa with dequant scale sa_inv, B (N, K) codes of format fb with sb_inv
 *   (B is the weight W[out, in]: y = x Wᵀ), both K-major ("TN").
 *   acc[m,n] = Σ_k dec(A[m,k]) · dec(B[n,k])  k ascending; each product is exact in fp32
 *              (≤ 4+4 significant bits), accumulated in fp32 (FP8_ACC_F32) or double (FP8_ACC_F64,
 *              then rounded once to fp32);
 *   d[m,n]   = acc · (sa_inv · sb_inv)            fp32, the scale product formed first;
 *   amax_d   = max |d| over the output, taken BEFORE the output scale, as cuBLASLt's AMAX_D
 *              is (settled on an H100: AMAX_D = 73.875 = max|D| before a D_SCALE of 1/64, and the
 *              E4M3 D codes equal this function's on all 4096 outputs; fp8_probe_compare.c);
 *              optional, NULL to skip;
 *   stored   = FP8_OUT_F32: d; FP8_OUT_BF16: bf16(d); FP8_OUT_E4M3 / E5M2: fp8(d · d_scale),
 *              SATFINITE, the code in out_q (when non-NULL) and its decoded value in out.
 *   ref_fp8_gemm_f32 quantizes float operands first with the given scales (the whole pipeline).
 * Shapes: A (M, K), B (N, K), out (M, N) row-major. OVERWRITES out / out_q / *amax_d.
 * Aliasing: none. Mirrors TE's gemm (cublaslt_gemm.cu) with A/B_SCALE = scale_inv, D_SCALE =
 * the output's scale, AMAX_D; fast accumulation (FP8 fprop) is not modeled: it is a tolerance.
 *
 * What the quantization kernels report (gpu/fp8.h computes the same on the device):
 *   struct fp8_stats, ACCUMULATED over calls: amax = max(amax, max|x|) (NaN ignored); saturated +=
 *   the number of codes SATFINITE clamped (fp8_saturates of the scaled value: |v| > 464 for E4M3
 *   — 464 itself ties to the even 448 —, |v| ≥ 61440 for E5M2, ±Inf; NaN never counts); flags |=
 *   FP8_FLAG_INPUT_NONFINITE when an input is NaN or ±Inf, FP8_FLAG_AMAX_NONFINITE when an amax a
 *   scale is computed from is not finite (the scale then falls back: current → 1, delayed → the
 *   previous scale, TE's rules). fp8_delayed_update returns its flag. A caller folds the flags
 *   into its step guard (a non-finite amax or input skips the step, as a non-finite gradient).
 *
 * Cast + transpose (per-tensor scaling; Hopper's FP8 GEMMs take K-major operands only, so a
 * tensor used along both dimensions is stored twice, TE's "columnwise" copy):
 *   fp8_cast_transpose: x (rows, cols); q[r·cols + c] = fp8(x[r,c]·scale) and q_t[c·rows + r] =
 *   the same code (q_t is qᵀ); either may be NULL. saturated counts each element once.
 *
 * Block quantization (DeepSeek-V3 §3.3; TE Float8BlockScaling; cuBLASLt's VEC128_32F and
 * BLK128x128_32F scale modes), x (rows, cols) quantized along cols (the GEMM's K):
 *   FP8_BLOCK_1X128    a block is 1 row × 128 cols (activations and gradients);
 *   FP8_BLOCK_128X128  a block is 128 rows × 128 cols (weights).
 *   The last blocks of a dimension that 128 does not divide are partial (fewer elements).
 *   Per block: amax_b = max|x| over the block (NaN ignored); scale_b = fp8_current_scale(amax_b,
 *   f, amax_eps, power_2) (TE's defaults: eps 0, power_2 = 1); q = fp8(x·scale_b) SATFINITE;
 *   the stored scale is the DEQUANTIZATION scale s_inv = 1/scale_b (fp32 RN division; what
 *   cuBLASLt's A/B_SCALE_POINTER multiply by).
 *   Scale layouts (cuBLASLt's; fp8_block_scale_index gives the slot of element (r, c)):
 *     1X128:   s[kb·rows + r]                    kb = c/128: for each 128-column block, one scale
 *                                               per row, rows contiguous ("outer-dim major");
 *     128X128: s[rb·ld + kb], ld = round_up(ceil(cols/128), 4)   rb = r/128: per 128-row block,
 *                                               its column blocks contiguous, padded to a multiple
 *                                               of 4 (16 bytes); the padding slots are set to 0.
 *   Transposed outputs (q_t (cols, rows), s_inv_t; NULL to skip):
 *     1X128:   the 1×128 quantization of xᵀ, computed from x (blocks of 128 ROWS of x, "128×1"):
 *              NOT qᵀ — TE computes both orientations from the high-precision input to avoid
 *              quantizing twice. saturated counts both quantizations.
 *     128X128: q_t = qᵀ and s_inv_t holds the same block scales in xᵀ's layout (square blocks).
 *   Flags: FP8_FLAG_AMAX_NONFINITE when a block's amax is ±Inf (its scale falls back to 1).
 *
 * Scaled reference GEMM (the oracle for cuBLASLt's per-tensor and block-scaled FP8 GEMMs):
 *   ref_fp8_gemm_scaled: A (M, K) and B (N, K) codes, each with a scaling mode and its scales
 *   (FP8_SCALING_TENSOR: sa[0]; 1X128 / 128X128: the block layouts above, of A (M, K) and B (N, K));
 *   d[m,n] = Σ_kb σa(m,kb)·σb(n,kb)·Σ_{k in block kb} dec(A[m,k])·dec(B[n,k]), computed in double
 *   (each product and each block's partial sum of FP8 values is exact there; the scaled partials
 *   are summed in double, exact as well for power-of-two scales) and rounded ONCE to fp32
 *   (FP8_OUT_F32) or bf16 (FP8_OUT_BF16; via fp32, as cuBLASLt's epilogue). It stands for the
 *   exact product: the GPU's limited-precision accumulation is a tolerance (gemm_fp8_parity).
 */
#ifndef REFINE_REF_FP8_H
#define REFINE_REF_FP8_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum fp8_format { FP8_E4M3 = 0, FP8_E5M2 = 1 };
enum fp8_sat { FP8_SATFINITE = 0, FP8_NOSAT = 1, FP8_TORCH = 2 };

#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f

uint8_t fp8_from_float(float x, enum fp8_format f, enum fp8_sat sat);
float fp8_to_float(uint8_t q, enum fp8_format f);
static inline float fp8_max(enum fp8_format f) { return f == FP8_E4M3 ? FP8_E4M3_MAX : FP8_E5M2_MAX; }
int fp8_is_nan(uint8_t q, enum fp8_format f);
/* The round trip fp8_to_float(fp8_from_float(x, f, sat), f). */
static inline float fp8_round(float x, enum fp8_format f, enum fp8_sat sat) {
    return fp8_to_float(fp8_from_float(x, f, sat), f);
}

/* q[i] = fp8(x[i] · scale), SATFINITE; *amax = max(*amax, max|x|) when amax != NULL (the
 * unscaled input's amax; NaN inputs are ignored by the max, as fmaxf does). */
void fp8_quantize(uint8_t *q, float *amax, const float *x, int64_t n, float scale, enum fp8_format f);
/* out[i] = float(q[i]) · scale_inv. */
void fp8_dequantize(float *out, const uint8_t *q, int64_t n, float scale_inv, enum fp8_format f);

enum fp8_amax_algo { FP8_AMAX_MAX = 0, FP8_AMAX_MOST_RECENT = 1 };

/* Transformer Engine's DelayedScaling defaults (NUMERICS.md §6.2). */
#define FP8_DELAYED_HISTORY_LEN 1024
#define FP8_DELAYED_MARGIN 0
#define FP8_DELAYED_ALGO FP8_AMAX_MAX

struct fp8_delayed {
    int history_len;           /* amax_history_len (TE default 1024) */
    enum fp8_amax_algo algo;   /* amax_compute_algo (default "max") */
    int margin;                /* default 0 */
    enum fp8_format format;    /* E4M3 for forward tensors, E5M2 for gradients (HYBRID) */
    float *history;            /* [history_len], caller-owned, zero-initialized */
    float scale, scale_inv;    /* start at 1 */
};

void fp8_delayed_record(struct fp8_delayed *s, float amax);
/* Returns FP8_FLAG_AMAX_NONFINITE when the window's amax was not finite (the scale was kept), else 0. */
unsigned fp8_delayed_update(struct fp8_delayed *s);

/* Current per-tensor scaling: the scale for a tensor of that amax. */
float fp8_current_scale(float amax, enum fp8_format f, float amax_eps, int power_2);
/* max |x| (fmaxf, NaN ignored). */
float fp8_amax(const float *x, int64_t n);

enum fp8_accum { FP8_ACC_F32 = 0, FP8_ACC_F64 = 1 };
enum fp8_out { FP8_OUT_F32 = 0, FP8_OUT_BF16 = 1, FP8_OUT_E4M3 = 2, FP8_OUT_E5M2 = 3 };

void ref_fp8_gemm(float *out, uint8_t *out_q, float *amax_d, const uint8_t *A, enum fp8_format fa, float sa_inv,
                  const uint8_t *B, enum fp8_format fb, float sb_inv, int M, int N, int K, enum fp8_accum acc,
                  enum fp8_out out_kind, float d_scale);

/* Quantizes x (M, K) with scale_a and w (N, K) with scale_b (SATFINITE), then ref_fp8_gemm with
 * sa_inv = 1/scale_a, sb_inv = 1/scale_b. Uses malloc for the codes. */
void ref_fp8_gemm_f32(float *out, uint8_t *out_q, float *amax_d, const float *x, enum fp8_format fa, float scale_a,
                      const float *w, enum fp8_format fb, float scale_b, int M, int N, int K, enum fp8_accum acc,
                      enum fp8_out out_kind, float d_scale);

/* ---- Statistics, cast + transpose, block quantization, the scaled GEMM (file comment) ---- */

enum fp8_flag { FP8_FLAG_INPUT_NONFINITE = 1u, FP8_FLAG_AMAX_NONFINITE = 2u };

struct fp8_stats {
    float amax;        /* max|x| seen, max-accumulated (start at 0) */
    int64_t saturated; /* codes clamped by SATFINITE, added */
    unsigned flags;    /* enum fp8_flag bits, OR-ed */
};

/* 1 when SATFINITE clamps the scaled value v (it rounds beyond the largest finite code, or is
 * ±Inf); 0 otherwise and for NaN. */
int fp8_saturates(float v, enum fp8_format f);

void fp8_cast_transpose(uint8_t *q, uint8_t *q_t, struct fp8_stats *st, const float *x, int64_t rows, int64_t cols,
                        float scale, enum fp8_format f);

enum fp8_block { FP8_BLOCK_1X128 = 0, FP8_BLOCK_128X128 = 1 };
#define FP8_BLOCK_SIZE 128

/* The scale tensor of a block quantization of x (rows, cols): its leading dimension (1X128: rows;
 * 128X128: round_up(ceil(cols/128), 4)), its element count, and the slot of element (r, c). */
int64_t fp8_block_scale_ld(enum fp8_block b, int64_t rows, int64_t cols);
int64_t fp8_block_scale_count(enum fp8_block b, int64_t rows, int64_t cols);
int64_t fp8_block_scale_index(enum fp8_block b, int64_t rows, int64_t cols, int64_t r, int64_t c);

/* q (rows, cols) and s_inv (fp8_block_scale_count(b, rows, cols)); q_t (cols, rows) and s_inv_t
 * (fp8_block_scale_count(b, cols, rows)) or NULL. OVERWRITES the outputs, accumulates st. */
void fp8_block_quantize(uint8_t *q, float *s_inv, uint8_t *q_t, float *s_inv_t, struct fp8_stats *st, const float *x,
                        int64_t rows, int64_t cols, enum fp8_block b, enum fp8_format f, float amax_eps, int power_2);

enum fp8_scaling { FP8_SCALING_TENSOR = 0, FP8_SCALING_1X128 = 1, FP8_SCALING_128X128 = 2 };

/* out (M, N) row-major, OVERWRITTEN; out_kind FP8_OUT_F32 or FP8_OUT_BF16. */
void ref_fp8_gemm_scaled(float *out, const uint8_t *A, enum fp8_format fa, enum fp8_scaling ma, const float *sa,
                         const uint8_t *B, enum fp8_format fb, enum fp8_scaling mb, const float *sb, int M, int N,
                         int K, enum fp8_out out_kind);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_FP8_H */
