/* gemm.h — every matrix product of refine on the GPU, through one cuBLASLt wrapper.
 *
 * Math (row-major, as the rest of refine; all matrices contiguous within a row):
 *   D[b] = alpha · op(A[b]) · op(B[b]) (+ bias) (+ D[b] when GEMM_ACCUMULATE)      b = 0 .. batch−1
 *   op(A) (m, k): A stored (m, k) with GEMM_NO_TRANS, (k, m) with GEMM_TRANS; op(B) (k, n): B stored
 *   (k, n) with GEMM_NO_TRANS, (n, k) with GEMM_TRANS. bias (n) is added to every row of D.
 * A and B are bf16 (bit patterns, the layout of ref/bf16.h); products are accumulated in fp32;
 * D is bf16 (one RNE rounding of the fp32 result) or fp32. With GEMM_ACCUMULATE the old D is read
 * (beta = 1: D = bf16(alpha·AB + D) for bf16 D, the sum formed in fp32), else D is OVERWRITTEN and
 * never read. Row strides lda/ldb/ldd are in elements (≥ the row length); stride_a/b/d are the
 * element distances between consecutive batch matrices (ignored when batch == 1).
 *
 * The products of a linear layer y = x Wᵀ (ref/linear.h, torch.nn.functional.linear), with x
 * (N, C_in), W (C_out, C_in):
 *   gpu_linear_forward_bf16      y  = x Wᵀ (+ b)   A = x  NO_TRANS, B = W  TRANS      (bf16 y)
 *   gpu_linear_backward_dx_bf16  dx = dy W         A = dy NO_TRANS, B = W  NO_TRANS   (bf16 dx)
 *   gpu_linear_backward_dw       dW += dyᵀ x       A = dy TRANS,    B = x  NO_TRANS   (fp32 or bf16 dW)
 * Fused QKV or gate/up weights are one W with C_out = the sum of the parts (rows stacked), so one
 * product computes all parts; a part is then a column range of y (ldd = the fused width).
 *
 * Mirrors: cublasLtMatmul with CUBLAS_COMPUTE_32F, scale type fp32 (torch.matmul / F.linear on
 * bf16 tensors do the same). The CPU oracle is ref_linear_*_naive (tests/parity/gemm_parity.cu).
 *
 * The context (struct gpu_gemm) owns the cuBLASLt handle, ONE preallocated workspace and a cache
 * of plans keyed by everything that selects a kernel (shapes, transposes, leading dimensions,
 * batch strides, output type, epilogue, accumulate flag, the alignment class (2 to 256 bytes)
 * of every pointer, which cuBLASLt's heuristic takes into account, and for FP8 the operand
 * types, scale modes, accumulation mode and which scale/amax pointers are set): the first call with a new key asks cuBLASLt's heuristic once and stores the
 * descriptors and the algorithm; later calls only look the plan up and launch. After
 * gpu_gemm_reserve has seen every shape of a run, calls allocate nothing. Results are bitwise
 * reproducible run to run on one GPU model and toolkit (cuBLAS's guarantee for one architecture
 * and SM count, given one stream per workspace; the parity tests check it).
 *
 * Tuning (off by default; REFINE_GEMM_TUNE=1, or 2 to say each choice on stderr, or
 * gpu_gemm_set_tuning): the first call of a batch-1 key, bf16 or FP8 (not under stream capture),
 * times the heuristic's next candidates without split-K on pseudorandom operands of the call's
 * shape (temporary device memory, allocated and freed there; skipped when there is none), and one
 * whose output has the same bits as the first algorithm's and that runs ≥ 2% faster replaces it
 * (gemm.cu's tune_plan). Equal bits on those operands do not make equal bits on every input: on
 * an H200 a tuned tiny-model LoRA run differed from the others at step 5 (docs/RESULTS.md,
 * 2026-11-28, fifth session), and the choice is timed anew in each process — so a tuned run is not
 * bitwise reproducible run to run, nor across a resume. The parity tests check that tuned
 * products equal untuned ones on random values (gemm_parity for bf16, gemm_fp8_parity for FP8).
 * An AMAX_D output is written by the trials too, then by the call itself.
 *
 * Preconditions (CHECKed): m, n, k ≥ 1; batch ≥ 1; leading dimensions ≥ the stored row length;
 * bias only with bf16 D; at most GEMM_MAX_PLANS distinct keys per context. A, B, D and bias must
 * be 2-byte (bf16) / 4-byte (fp32) aligned; 16-byte alignment and leading dimensions that are
 * multiples of 8 give the fast kernels. Aliasing: D must not overlap A, B or bias.
 *
 * FP8 (Hopper and Ada, cuBLASLt's FP8 matmul; NUMERICS.md §6.3). With a_type/b_type E4M3 or
 * E5M2, A and B hold FP8 codes (ref/fp8.h) and
 *   D = alpha · Σ_k σa(i,k)·σb(j,k)·dec(A[i,k])·dec(B[j,k]) (+ bias) (+ D when GEMM_ACCUMULATE)
 * where σ is the operand's DEQUANTIZATION scale (what cuBLASLt's A/B_SCALE_POINTER multiply by:
 * TE passes scale_inv there) read from device memory by the GPU, so no scale waits on the host:
 *   GEMM_SCALE_TENSOR    one fp32 (a_scale[0]; NULL means 1);
 *   GEMM_SCALE_1X128     one fp32 per row and 128-column block of K: σ(i,k) = s[(k/128)·rows + i]
 *                        (cuBLASLt's VEC128_32F; rows = m for A, n for B);
 *   GEMM_SCALE_128X128   one fp32 per 128×128 block: σ(i,k) = s[(i/128)·ld + k/128],
 *                        ld = round_up(ceil(k/128), 4) (cuBLASLt's BLK128x128_32F);
 * the block layouts are ref/fp8.h's fp8_block_scale_index and what gpu/fp8.h's block quantization
 * writes. cuBLASLt accumulates in fp32 with the tensor cores' limited-precision partial sums:
 * GEMM_ACCUM_PRECISE promotes them to fp32 periodically, GEMM_ACCUM_FAST
 * (CUBLASLT_MATMUL_DESC_FAST_ACCUM) does not (faster, less accurate: TE uses it for the forward
 * product under per-tensor scaling only); what that means in bits is measured by
 * `gemm_fp8_parity --probe` and recorded in NUMERICS.md §6.5. amax_d (optional, device,
 * 16-byte aligned) receives max|D| in fp32 before D's rounding (cuBLASLt's AMAX_D).
 * FP8 preconditions (CHECKed, with a message naming the rule):
 *   - both operands FP8 (not E5M2 × E5M2, which cuBLASLt does not offer); every product of bf16
 *     operands leaves the FP8 fields zero (scales NULL, GEMM_SCALE_TENSOR, GEMM_ACCUM_PRECISE,
 *     amax_d NULL) and is computed exactly as before they existed;
 *   - "TN" only: op_a = GEMM_NO_TRANS and op_b = GEMM_TRANS, i.e. D = A·Bᵀ with A (m, k) and B
 *     (n, k) both K-major. A tensor needed along its other dimension is stored a second time,
 *     transposed (gpu/fp8.h casts with a transposed output), as Transformer Engine does on Hopper;
 *   - m, n, k, lda, ldb multiples of 16; ldd·sizeof(D) a multiple of 16; batch = 1;
 *   - A, B, D, bias, the scale pointers and amax_d 16-byte aligned (at 4-byte offsets cuBLASLt
 *     returned NOT_SUPPORTED for scale pointers on the H100);
 *   - block modes need their scale pointer.
 * Whether cuBLASLt runs a combination (block scaling needs cuBLASLt ≥ 12.9 and sm_90; FP8 needs
 * compute capability ≥ 8.9) is its decision: gpu_gemm_try reports a refusal, gpu_gemm and
 * gpu_gemm_reserve stop with a message naming the combination, the device and the library.
 * Not thread-safe: one context per host thread (it may serve any number of streams in turn, as
 * the workspace is used by one product at a time on the stream given; products on different
 * streams must not run concurrently on the same context).
 */
#ifndef REFINE_GPU_GEMM_H
#define REFINE_GPU_GEMM_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum gemm_op { GEMM_NO_TRANS = 0, GEMM_TRANS = 1 };
enum gemm_out { GEMM_OUT_BF16 = 0, GEMM_OUT_F32 = 1 };
enum gemm_beta { GEMM_OVERWRITE = 0, GEMM_ACCUMULATE = 1 };
enum gemm_dtype { GEMM_BF16 = 0, GEMM_E4M3 = 1, GEMM_E5M2 = 2 };
enum gemm_scale { GEMM_SCALE_TENSOR = 0, GEMM_SCALE_1X128 = 1, GEMM_SCALE_128X128 = 2 };
enum gemm_accum { GEMM_ACCUM_PRECISE = 0, GEMM_ACCUM_FAST = 1 };
enum gemm_status { GEMM_OK = 0, GEMM_NO_ALGORITHM = 1, GEMM_REFUSED = 2 };

#define GEMM_MAX_PLANS 512
#define GEMM_DEFAULT_WORKSPACE ((size_t)32 << 20) /* what cuBLAS itself uses on Hopper */

struct gemm_args {
    void *d; /* (m, n) per batch, bf16 or fp32 per d_type */
    enum gemm_out d_type;
    int64_t ldd, stride_d;
    const void *a; /* bf16, or FP8 codes per a_type */
    enum gemm_op op_a;
    int64_t lda, stride_a;
    const void *b; /* bf16, or FP8 codes per b_type */
    enum gemm_op op_b;
    int64_t ldb, stride_b;
    const uint16_t *bias; /* (n) bf16, or NULL */
    int m, n, k, batch;
    float alpha;
    enum gemm_beta beta;
    /* FP8 (see above); all zero for bf16 operands. */
    enum gemm_dtype a_type, b_type;
    const float *a_scale, *b_scale; /* device dequantization scales, or NULL (= 1, tensor mode) */
    enum gemm_scale a_scale_mode, b_scale_mode;
    enum gemm_accum accum;
    float *amax_d; /* device, or NULL */
};

struct gpu_gemm;

/* Creates the cuBLASLt handle and allocates the workspace (device memory, workspace_bytes). */
struct gpu_gemm *build_gpu_gemm(size_t workspace_bytes);
/* Tuning of new batch-1 keys (bf16 and FP8) at their first call: 0 off (the default unless
 * REFINE_GEMM_TUNE=1 or 2), 1 on, 2 on and each choice said on stderr (above). */
void gpu_gemm_set_tuning(struct gpu_gemm *g, int on);
void free_gpu_gemm(struct gpu_gemm *g);

/* Creates the plan of p's key if it is new (host allocation, heuristic query); launches nothing.
 * Call it for every shape at setup so that the hot path never allocates. */
void gpu_gemm_reserve(struct gpu_gemm *g, const struct gemm_args *p);
void gpu_gemm(struct gpu_gemm *g, const struct gemm_args *p, cudaStream_t stream);
/* gpu_gemm, except that a combination cuBLASLt does not run is reported instead of stopping the
 * program: GEMM_NO_ALGORITHM (its heuristic offers none; nothing is cached) or GEMM_REFUSED
 * (cublasLtMatmul returned NOT_SUPPORTED, INVALID_VALUE or ARCH_MISMATCH; nothing ran). Preconditions are still
 * CHECKed. For choosing a path at setup (block-scaled FP8 or per-tensor) and for the probe. */
enum gemm_status gpu_gemm_try(struct gpu_gemm *g, const struct gemm_args *p, cudaStream_t stream);

/* Plans cached so far (for tests and setup checks). */
int gpu_gemm_plan_count(const struct gpu_gemm *g);
/* The algorithm p's plan runs, in words (cuBLASLt's algorithm id, tile id, split-K count,
 * reduction scheme, stages id), for logs that must say which kernel a measurement came from;
 * "none" when cuBLASLt offers none. Plans p like gpu_gemm_reserve. */
void gpu_gemm_algo_name(struct gpu_gemm *g, const struct gemm_args *p, char *buf, size_t n);

/* The device's bf16 GEMM rate in FLOP/s: an n×n×n product (random operands, 3 warm-up runs, the
 * mean of 10 timed by CUDA events) — PERFORMANCE.md's ceiling for MFU. 0 when the three n×n
 * buffers do not fit. */
double gpu_gemm_measure_bf16_rate(int n);

/* The three products of a linear layer (see above); tensors contiguous. */
void gpu_linear_forward_bf16(struct gpu_gemm *g, uint16_t *y, const uint16_t *x, const uint16_t *w,
                             const uint16_t *b, int N, int C_in, int C_out, cudaStream_t stream);
/* beta = GEMM_ACCUMULATE adds into dx (dx += dy W, e.g. a LoRA path joining the base path). */
void gpu_linear_backward_dx_bf16(struct gpu_gemm *g, uint16_t *dx, const uint16_t *dy, const uint16_t *w, int N,
                                 int C_in, int C_out, enum gemm_beta beta, cudaStream_t stream);
/* The forward and dx with row strides: x (N, K) at ldx, W (C_out, K) at ldw for the forward (K the
 * product's length, ≤ both strides); dx (N, C_in) at lddx from W's first C_in columns (C_out, C_in)
 * at ldw. A folded LoRA group's padded input and weights (gpu/lora.h) are read this way, and its
 * backward's dx_f written so (C_in then counts the adapter columns: du comes with dx). */
void gpu_linear_forward_ld_bf16(struct gpu_gemm *g, uint16_t *y, const uint16_t *x, int64_t ldx, const uint16_t *w,
                                int64_t ldw, const uint16_t *b, int N, int K, int C_out, cudaStream_t stream);
void gpu_linear_backward_dx_ld_bf16(struct gpu_gemm *g, uint16_t *dx, int64_t lddx, const uint16_t *dy,
                                    const uint16_t *w, int64_t ldw, int N, int C_in, int C_out, enum gemm_beta beta,
                                    cudaStream_t stream);
/* dW ACCUMULATES, as every parameter gradient: fp32, or a bf16 accumulator (dw_type GEMM_OUT_BF16:
 * dW = bf16(dyᵀx + dW), the sum formed in fp32 — NUMERICS.md §5.6). */
void gpu_linear_backward_dw(struct gpu_gemm *g, void *dw, enum gemm_out dw_type, const uint16_t *dy, const uint16_t *x,
                            int N, int C_in, int C_out, cudaStream_t stream);
/* The same with dy's rows lddy ≥ C_out and x's ldx ≥ C_in elements apart (a member of products side
 * by side: full fine-tuning's stacked q/k/v and gate/up). */
void gpu_linear_backward_dw_ld(struct gpu_gemm *g, void *dw, enum gemm_out dw_type, const uint16_t *dy, int64_t lddy,
                               const uint16_t *x, int64_t ldx, int N, int C_in, int C_out, cudaStream_t stream);

/* The three products of a linear layer in FP8 (Transformer Engine's HYBRID recipe: E4M3 forward
 * tensors, E5M2 gradients), each a TN product of K-major operands. An operand is FP8 codes
 * (rows, K) row-major with its type, dequantization scale(s) and scale mode (see above):
 *   gpu_linear_forward_fp8       y  = x Wᵀ (+ b)  A = x (N, C_in),      B = W (C_out, C_in)    K = C_in
 *   gpu_linear_backward_dx_fp8   dx = dy W        A = dy (N, C_out),    B = Wᵀ (C_in, C_out)   K = C_out
 *   gpu_linear_backward_dw_fp8   dW = dyᵀ x       A = dyᵀ (C_out, N),   B = xᵀ (C_in, N)       K = N
 * Wᵀ, dyᵀ and xᵀ are the transposed FP8 copies (gpu/fp8.h writes them in the same pass as the
 * cast). Typical types: forward E4M3 × E4M3, dx E5M2 (dy) × E4M3 (Wᵀ), dW E5M2 (dyᵀ) × E4M3 (xᵀ).
 * Outputs: y bf16 (or fp32), OVERWRITTEN; dx and dW bf16 or fp32, overwritten or accumulated per
 * beta. accum per product (TE: forward GEMM_ACCUM_FAST under per-tensor scaling, the backward
 * products and every block-scaled product GEMM_ACCUM_PRECISE). All FP8 preconditions apply (N,
 * C_in, C_out multiples of 16). */
struct gemm_fp8_operand {
    const uint8_t *data;  /* codes, (rows, K) row-major */
    enum gemm_dtype type; /* GEMM_E4M3 or GEMM_E5M2 */
    const float *scale;   /* device dequantization scale(s) */
    enum gemm_scale mode;
};
void gpu_linear_forward_fp8(struct gpu_gemm *g, void *y, enum gemm_out y_type, const struct gemm_fp8_operand *x,
                            const struct gemm_fp8_operand *w, const uint16_t *b, int N, int C_in, int C_out,
                            enum gemm_accum accum, cudaStream_t stream);
void gpu_linear_backward_dx_fp8(struct gpu_gemm *g, void *dx, enum gemm_out dx_type, enum gemm_beta beta,
                                const struct gemm_fp8_operand *dy, const struct gemm_fp8_operand *w_t, int N, int C_in,
                                int C_out, enum gemm_accum accum, cudaStream_t stream);
void gpu_linear_backward_dw_fp8(struct gpu_gemm *g, void *dw, enum gemm_out dw_type, enum gemm_beta beta,
                                const struct gemm_fp8_operand *dy_t, const struct gemm_fp8_operand *x_t, int N,
                                int C_in, int C_out, enum gemm_accum accum, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_GEMM_H */
