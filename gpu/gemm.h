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
 *   gpu_linear_backward_dw_f32   dW += dyᵀ x       A = dy TRANS,    B = x  NO_TRANS   (fp32 dW)
 * Fused QKV or gate/up weights are one W with C_out = the sum of the parts (rows stacked), so one
 * product computes all parts; a part is then a column range of y (ldd = the fused width).
 *
 * Mirrors: cublasLtMatmul with CUBLAS_COMPUTE_32F, scale type fp32 (torch.matmul / F.linear on
 * bf16 tensors do the same). The CPU oracle is ref_linear_*_naive (tests/parity/gemm_parity.cu).
 *
 * The context (struct gpu_gemm) owns the cuBLASLt handle, ONE preallocated workspace and a cache
 * of plans keyed by everything that selects a kernel (shapes, transposes, leading dimensions,
 * batch strides, output type, epilogue, accumulate flag and the alignment class (2 to 256 bytes)
 * of every pointer, which cuBLASLt's heuristic takes into account): the first call with a new key asks cuBLASLt's heuristic once and stores the
 * descriptors and the algorithm; later calls only look the plan up and launch. After
 * gpu_gemm_reserve has seen every shape of a run, calls allocate nothing. The plan chosen for a
 * key never changes, so results are bitwise reproducible run to run on one GPU model and toolkit
 * (cuBLAS's guarantee for one architecture and SM count, given one stream per workspace; the
 * parity test checks it).
 *
 * Preconditions (CHECKed): m, n, k ≥ 1; batch ≥ 1; leading dimensions ≥ the stored row length;
 * bias only with bf16 D; at most GEMM_MAX_PLANS distinct keys per context. A, B, D and bias must
 * be 2-byte (bf16) / 4-byte (fp32) aligned; 16-byte alignment and leading dimensions that are
 * multiples of 8 give the fast kernels. Aliasing: D must not overlap A, B or bias.
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

#define GEMM_MAX_PLANS 512
#define GEMM_DEFAULT_WORKSPACE ((size_t)32 << 20) /* what cuBLAS itself uses on Hopper */

struct gemm_args {
    void *d; /* (m, n) per batch, bf16 or fp32 per d_type */
    enum gemm_out d_type;
    int64_t ldd, stride_d;
    const uint16_t *a; /* bf16 */
    enum gemm_op op_a;
    int64_t lda, stride_a;
    const uint16_t *b; /* bf16 */
    enum gemm_op op_b;
    int64_t ldb, stride_b;
    const uint16_t *bias; /* (n) bf16, or NULL */
    int m, n, k, batch;
    float alpha;
    enum gemm_beta beta;
};

struct gpu_gemm;

/* Creates the cuBLASLt handle and allocates the workspace (device memory, workspace_bytes). */
struct gpu_gemm *build_gpu_gemm(size_t workspace_bytes);
void free_gpu_gemm(struct gpu_gemm *g);

/* Creates the plan of p's key if it is new (host allocation, heuristic query); launches nothing.
 * Call it for every shape at setup so that the hot path never allocates. */
void gpu_gemm_reserve(struct gpu_gemm *g, const struct gemm_args *p);
void gpu_gemm(struct gpu_gemm *g, const struct gemm_args *p, cudaStream_t stream);

/* Plans cached so far (for tests and setup checks). */
int gpu_gemm_plan_count(const struct gpu_gemm *g);

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
/* dW ACCUMULATES (fp32), as every parameter gradient. */
void gpu_linear_backward_dw_f32(struct gpu_gemm *g, float *dw, const uint16_t *dy, const uint16_t *x, int N,
                                int C_in, int C_out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_GEMM_H */
