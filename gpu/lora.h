/* lora.h — the LoRA adapter of a linear layer on the GPU (PEFT lora.Linear), riding on the base
 * layer's products: every matrix product goes through gpu/gemm.h (BF16 operands, FP32 accumulate).
 *
 * Notation and scale convention as in ref/lora.h: x (N, C_in), A = lora_a (R, C_in),
 * B = lora_b (C_out, R), s = ref_lora_scale(α, R, mode). The adapter's parameters live as fp32
 * master weights in the optimizer (gpu/adamw.h) with bf16 compute copies: lora_a and lora_b here
 * are those bf16 copies; their gradients dlora_a, dlora_b are fp32 and ACCUMULATE.
 * x_a is the adapter's input: x, or dropout(x) when p > 0 (the caller draws the mask, e.g.
 * gpu/dropout.h, and passes the dropped input; keep and keep_scale as in ref/lora.h).
 *
 * Forward (on entry y holds the base output x Wᵀ (+ b), bf16):
 *   u = bf16( x_a Aᵀ )                     (N, R)    OVERWRITTEN, saved for the backward
 *   y = bf16( y + s·(u Bᵀ) )               (N, C_out) ACCUMULATES (sum in fp32, then × s, then + y:
 *                                          gemm's alpha and beta = 1, or for R ≤ 64 even and C_out %
 *                                          32 == 0 one tensor-core pass, gpu/adapter_mma.cuh)
 * Backward, for dy (N, C_out) bf16:
 *   dB += s·dyᵀ u                          (C_out, R) fp32 ACCUMULATES
 *   du  = bf16( s·dy B )                   (N, R)    workspace (bf16: it is a GEMM operand)
 *   dA += duᵀ x_a                          (R, C_in) fp32 ACCUMULATES
 *   dx  = bf16( dx + mask(du A) )          (N, C_in) ACCUMULATES onto the base layer's dx = dy W
 *   mask(t) = t·keep_scale where keep = 1, 0 where keep = 0 (keep = NULL: t; the product goes
 *   straight into dx: gemm's beta = 1, or for R ≤ 64 even and C_in % 32 == 0 the forward's
 *   tensor-core pass with A's columns, gpu/adapter_mma.cuh). With keep, du A is formed in fp32 in
 *   the workspace and one elementwise pass adds its masked value: dx = bf16(dx + (keep ? t·keep_scale : 0)).
 * Any of dx, dlora_a, dlora_b may be NULL to skip it (as ref_lora_backward).
 *
 * Against ref/lora.h (ACT_BF16): the same roundings of u, y and dx, except that (1) the products
 * are fp32 sums in the tensor cores' order instead of double sums in index order, (2) s multiplies the
 * fp32 sum (gemm alpha) instead of each term, and (3) du is rounded to bf16 (the reference keeps it
 * fp32). With power-of-two s and integer inputs whose sums stay exactly representable, both give
 * the same bits (tests/parity/lora_parity.cu checks both regimes). PEFT itself (autocast_adapter_dtype)
 * runs the adapter branch in fp32 on a bf16 base (NUMERICS.md §2.1); here the branch's operands
 * are bf16 like the base layer's, which is what ACT_BF16 in the reference models.
 *
 * Cost: without dropout the adapter adds no pass of its own, but the y += product reads and writes
 * y once more (4 bytes an element of y) and the backward reads dy twice more; at Llama-3.2-1B's
 * q_proj (N 8192, C 2048, R 16) that is ~35 µs against ~90 µs for the base product on an H100
 * (an estimate from 3 TB/s and ~760 TFLOP/s, not a measurement: `lora_parity --bench` prints the
 * measured lora_overhead lines). Linears that share their input run as a group (below), which
 * reads x and rewrites dx once for the group instead of once per member; a folded group (below)
 * joins its adapters to the base products' K dimension (y = [x | u]·[W | s·B]ᵀ over a padded input
 * and padded weights), which removes the y pass, and takes du from the base dx products. The
 * backward's dx = [dy | du]·[W ; A] would need du before the product that forms it; dx += du A
 * stays one pass — joined to SwiGLU's backward for the MLP's down projection
 * (gpu_lora_backward_swiglu_bf16), where that pass's output is read by nothing else.
 *
 * Workspace: gpu_lora_backward_workspace_size(N, C_in, R, masked) bytes, 256-byte aligned; never
 * allocated here. gpu_lora_reserve creates the gemm plans of a shape (setup, so the hot path
 * allocates nothing). Shapes: x_a, dx (N, C_in); keep (N, C_in) bytes; y, dy (N, C_out); u (N, R).
 * Aliasing: none (y and dx are read-modify-write). All pointers device memory; nothing is
 * synchronized. Mirrors peft/tuners/lora/layer.py Linear.forward and its autograd.
 */
#ifndef REFINE_GPU_LORA_H
#define REFINE_GPU_LORA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

enum lora_mask { LORA_NO_MASK = 0, LORA_MASKED = 1 };

void gpu_lora_forward_bf16(struct gpu_gemm *g, uint16_t *y, uint16_t *u, const uint16_t *x_a,
                           const uint16_t *lora_a, const uint16_t *lora_b, int N, int C_in, int C_out, int R,
                           float scale, cudaStream_t stream);

/* The forward of an adapter whose output only feeds a residual add (the MLP's down projection, whose
 * output the layer adds to h): u = x_a Aᵀ as gpu_lora_forward_bf16 forms it, then in one pass on tensor
 * cores out = bf16(res + bf16(y + s·u Bᵀ)) — bit for bit gpu_lora_forward_bf16 followed by the
 * residual add out = bf16(res + y), without y's write and second read (N·C_out·4 bytes); y (the base
 * product) is left as it was, and out may be res. Returns 1; where that pass cannot run (the shape
 * or alignment: adapter_mma_fits, out and res 16-byte aligned) it does nothing and returns 0, and the
 * caller runs the two steps. */
int gpu_lora_forward_residual_bf16(struct gpu_gemm *g, uint16_t *out, const uint16_t *res, const uint16_t *y,
                                   uint16_t *u, const uint16_t *x_a, const uint16_t *lora_a, const uint16_t *lora_b,
                                   int N, int C_in, int C_out, int R, float scale, cudaStream_t stream);

/* u = bf16( x_a Aᵀ ) alone: the forward's first product (the same plan, the same bits), for a
 * caller that needs the saved intermediate without the output (a recomputation that stops before
 * the linear's output, gpu/llama.cu). */
void gpu_lora_u_bf16(struct gpu_gemm *g, uint16_t *u, const uint16_t *x_a, const uint16_t *lora_a, int N, int C_in,
                     int R, cudaStream_t stream);

size_t gpu_lora_backward_workspace_size(int N, int C_in, int R, enum lora_mask mask);

void gpu_lora_backward_bf16(struct gpu_gemm *g, uint16_t *dx, float *dlora_a, float *dlora_b, const uint16_t *dy,
                            const uint16_t *x_a, const uint8_t *keep, float keep_scale, const uint16_t *u,
                            const uint16_t *lora_a, const uint16_t *lora_b, int N, int C_in, int C_out, int R,
                            float scale, void *workspace, cudaStream_t stream);

/* The MLP's down projection's adapter backward joined to SwiGLU's backward (no dropout). On entry
 * dh (N, C_in) holds the base product dy W (C_in = the MLP's width F), and gate and up (N, C_in, row
 * stride ld_gu ≥ C_in: C_in packed, 2·C_in for the halves of one [gate │ up] buffer, up = gate + C_in)
 * the forward's gate and up outputs. dB and dA accumulate as gpu_lora_backward_bf16's; then one pass
 * on tensor cores forms each element of bf16(dh + du A) in registers and SwiGLU's backward from it,
 * writing the gate and up gradients into gate and up (in place): bit for bit gpu_lora_backward_bf16
 * (dx = dh) followed by gpu_swiglu_backward_bf16(gate, up, dh, gate, up, N, C_in, ld_gu, ld_gu),
 * without dh's write and second read (N·C_in·4 bytes). dh is left as the base product where the
 * pass applies (adapter_mma_fits, 16-byte-aligned gate, up and h_out, ld_gu a multiple of 8);
 * elsewhere the two calls run and dh holds bf16(dh + du A). The adapter's input, the MLP input
 * (N, C_in), is x_a, or — x_a NULL — formed here into h_out from gate and up before they are
 * overwritten: by the pass itself (each element's silu is SwiGLU's backward's), bit for bit
 * gpu_swiglu_forward_bf16(h_out, gate, up, N, C_in, ld_gu), with dA accumulated from it after the
 * pass (--recompute-mlp without a SwiGLU forward of its own: N·C_in·2 bytes written instead of 6
 * moved). Exactly one of x_a and h_out.
 * Workspace: gpu_lora_backward_workspace_size(N, C_in, R, LORA_NO_MASK). */
void gpu_lora_backward_swiglu_bf16(struct gpu_gemm *g, uint16_t *gate, uint16_t *up, uint16_t *dh, float *dlora_a,
                                   float *dlora_b, const uint16_t *dy, const uint16_t *x_a, uint16_t *h_out,
                                   const uint16_t *u, const uint16_t *lora_a, const uint16_t *lora_b, int N, int C_in,
                                   int C_out, int R, float scale, int64_t ld_gu, void *workspace,
                                   cudaStream_t stream);

/* Creates the gemm plans of the forward and backward of this shape (launches nothing). */
void gpu_lora_reserve(struct gpu_gemm *g, int N, int C_in, int C_out, int R, enum lora_mask mask);

/* A group of n adapters (1 ≤ n ≤ LORA_GROUP_MAX) on linears that read the same input x, without
 * dropout: q/k/v on the attention's normed input, gate/up on the MLP's. The thin products that
 * touch x or dx run once for the group instead of once per member:
 *   lora_a  the members' A stacked: (n·R, C_in) bf16, member i's rows i·R .. i·R + R − 1
 *   dlora_a the same stacking of their fp32 gradients (ACCUMULATES)
 *   u       (N, n·R) bf16: member i's u_i is columns i·R .. i·R + R − 1 (row stride n·R)
 * Forward (y_i holds the base output on entry):
 *   u   = bf16( x A_gᵀ )                   one product
 *   y_i = bf16( y_i + s·(u_i B_iᵀ) )       per member
 * Backward, for dy_i:
 *   dB_i += s·dy_iᵀ u_i                    per member; with the members' dy side by side (ld_dy =
 *                                          Σ C_out: the strided forms) one product P = s·dyᵀ u
 *                                          (Σ C_out, n·R) in the workspace, P's diagonal blocks then
 *                                          added: dB_i = dB_i + fp32(s·Σ) (the gemm's own epilogue
 *                                          forms dB_i + s·Σ)
 *   du_i  = bf16( s·dy_i B_i )             per member, into du (N, n·R) in the workspace
 *   dA_g += duᵀ x                          one product
 *   dx    = bf16( dx + du A_g )            one product (K = n·R; the tensor-core pass for n·R ≤ 64):
 *                                          ACCUMULATES onto the base dx of all members (their
 *                                          dy_i W_i summed first)
 * Each u_i, y_i, du_i, dB_i and dA_i is the same sum as gpu_lora's per member (fp32 in cuBLASLt's
 * order); dx is rounded once for the group where the per-member path rounds after each member.
 * Workspace: gpu_lora_group_backward_workspace_size(N, n, R, c_all). dx may be NULL (no input
 * gradient).
 * gpu_lora_group_reserve creates the plans (setup). Same conventions otherwise as above. */
#define LORA_GROUP_MAX 4

void gpu_lora_group_forward_bf16(struct gpu_gemm *g, uint16_t *const *y, uint16_t *u, const uint16_t *x,
                                 const uint16_t *lora_a, const uint16_t *const *lora_b, int n, int N, int C_in,
                                 const int *C_out, int R, float scale, cudaStream_t stream);

/* u = bf16( x A_gᵀ ) alone: the group forward's first product (the same plan, the same bits), for
 * the DoRA members of a group, whose outputs gpu/dora's magnitude pass forms from their slices of u. */
void gpu_lora_group_u_bf16(struct gpu_gemm *g, uint16_t *u, const uint16_t *x, const uint16_t *lora_a, int n, int N,
                           int C_in, int R, cudaStream_t stream);

/* c_all: Σ C_out of the members when the backward gets their dy side by side (ld_dy = c_all: the
 * one dB product's (c_all, n·R) fp32 output lives there first), else 0. */
size_t gpu_lora_group_backward_workspace_size(int N, int n, int R, int64_t c_all);

void gpu_lora_group_backward_bf16(struct gpu_gemm *g, uint16_t *dx, float *dlora_a, float *const *dlora_b,
                                  const uint16_t *const *dy, const uint16_t *x, const uint16_t *u,
                                  const uint16_t *lora_a, const uint16_t *const *lora_b, int n, int N, int C_in,
                                  const int *C_out, int R, float scale, void *workspace, cudaStream_t stream);

/* The same with every member's dy rows at ld_dy elements (≥ each C_out; 0: each member's C_out): the
 * members' gradients side by side in one buffer (gpu/llama.cu's q/k/v gradient, [dq │ dk │ dv] a row). */
void gpu_lora_group_backward_strided_bf16(struct gpu_gemm *g, uint16_t *dx, float *dlora_a, float *const *dlora_b,
                                          const uint16_t *const *dy, int64_t ld_dy, const uint16_t *x, int64_t ldx,
                                          const uint16_t *u, const uint16_t *lora_a, const uint16_t *const *lora_b,
                                          int n, int N, int C_in, const int *C_out, int R, float scale,
                                          void *workspace, cudaStream_t stream);

void gpu_lora_group_reserve(struct gpu_gemm *g, int n, int N, int C_in, const int *C_out, int R);

/* The group backward with x read at row stride ldx ≥ C_in (a folded group's padded input, below):
 * the same products (dA's bitwise the contiguous one's where cuBLASLt picks the same kernel for the
 * stride, as lora_parity checks at the models' shapes). */
void gpu_lora_group_backward_ld_bf16(struct gpu_gemm *g, uint16_t *dx, float *dlora_a, float *const *dlora_b,
                                     const uint16_t *const *dy, const uint16_t *x, int64_t ldx, const uint16_t *u,
                                     const uint16_t *lora_a, const uint16_t *const *lora_b, int n, int N, int C_in,
                                     const int *C_out, int R, float scale, void *workspace, cudaStream_t stream);

/* Folded groups (LoRA or DoRA without dropout on a bf16 or NF4 base with bf16 products: gpu/llama.cu
 * folds the q/k/v and gate/up groups, and LoRA's o as a group of one; DoRA's forward products, its magnitude in the weight, are
 * gpu/dora.h's gpu_dora_scale_weight_bf16). The adapters' products join the base products' K dimension, so that
 * no pass of their own reads and rewrites y:
 *   y_i = bf16( x_f W_f,iᵀ ) = bf16( x W_iᵀ + u_i S_iᵀ )          one fp32 sum, rounded once
 * with x_f = [x | u] (N, C_in + n·R) at row stride ldx — the producer writes x into the first C_in
 * columns (gpu_rmsnorm_forward_strided_bf16) — and W_f,i = [W_i | 0 … S_i … 0] (C_out_i, C_in + n·R)
 * at row stride ldw: W_i in the first C_in columns, S_i = bf16(s·B_i) in columns C_in + i·R ..
 * C_in + i·R + R − 1, zeros in the other members' columns. The products are gemm's
 * gpu_linear_forward_ld_bf16 (K = C_in + n·R) and, in the backward, the base products over the same
 * columns: dx_f = Σ_i dy_i W_f,i (gpu_linear_backward_dx_ld_bf16 with C_in + n·R output columns into
 * dx_f (N, ldd)), whose first C_in columns are the base dx and whose adapter columns are member i's
 * du_i = bf16(dy_i S_i) — the other members' zeros add nothing — so du needs no product of its own;
 * then gpu_lora_group_fold_backward_bf16:
 *   dB_i += s·dy_iᵀ u_i;  dA_g += duᵀ x (x at ldx, du at ldd);  dx = bf16(dx + du A_g) in dx_f's first
 *   C_in columns (the adapter pass at row stride ldd, or gemm with beta = 1).
 * Without an input gradient (layer 0 of the adapter methods) the unfolded group backward runs
 * (gpu_lora_group_backward_ld_bf16, x at ldx): du by its own products, no dx.
 *   gpu_lora_group_fold_u_bf16  u = bf16( x A_gᵀ ), the group forward's u product (x read at ldx:
 *                               bitwise the contiguous product's where cuBLASLt picks the same kernel
 *                               for the stride, as lora_parity checks at the models' shapes), into u
 *                               (N, n·R; saved for the backward) and into x_f's columns
 *                               C_in .. C_in + n·R − 1
 *   gpu_lora_fold_b_bf16        S_i = bf16(s·B_i) into the adapter columns of every slot of a table
 *                               (device memory; a model's folded linears in one launch), whenever
 *                               B has changed (gpu/llama.cu: at the start of every forward);
 *                               max_c_out ≥ every slot's c_out (the launch's extent: a larger one
 *                               would be written only in part)
 * Against the unfolded group (y = bf16(y_base + s·(u Bᵀ)), y_base = bf16(x Wᵀ)): the base product is
 * not rounded before the adapter's term joins it, and s scales B before the product, rounded to bf16
 * — exact when s is a power of two (PEFT's α = 2R gives s = 2), one more rounding of the adapter's
 * term otherwise (NUMERICS.md §2.1). Preconditions: ldx, ldw ≥ C_in + n·R; the slots' adapter
 * columns inside their rows. */
void gpu_lora_group_fold_u_bf16(struct gpu_gemm *g, uint16_t *u, uint16_t *x_f, int64_t ldx, const uint16_t *lora_a,
                                int n, int N, int C_in, int R, cudaStream_t stream);

/* dx_f (N, ldd ≥ C_in + n·R) holds Σ_i dy_i W_f,i on entry (above): dB_i and dA_g ACCUMULATE, dx_f's
 * first C_in columns become bf16(dx + du A_g). du equals the unfolded group's bf16(s·dy_i B_i) where s
 * is a power of two, up to the order of the fp32 sums (another kernel's product). dlora_b may be
 * NULL (or an entry of it), dlora_a NULL. Workspace: gpu_lora_group_backward_workspace_size(N, n, R,
 * c_all) bytes: with dy side by side, the one dB product's output; and where the adapter pass does
 * not fit (n·R > 64, C_in % 32 ≠ 0), du copied out of dx_f for gemm's dx += du A_g, which must not
 * read the rows it writes. */
void gpu_lora_group_fold_backward_bf16(struct gpu_gemm *g, uint16_t *dx_f, int64_t ldd, float *dlora_a,
                                       float *const *dlora_b, const uint16_t *const *dy, const uint16_t *x,
                                       int64_t ldx, const uint16_t *u, const uint16_t *lora_a, int n, int N, int C_in,
                                       const int *C_out, int R, float scale, void *workspace, cudaStream_t stream);
/* The same with every member's dy rows at ld_dy elements (as gpu_lora_group_backward_strided_bf16). */
void gpu_lora_group_fold_backward_strided_bf16(struct gpu_gemm *g, uint16_t *dx_f, int64_t ldd, float *dlora_a,
                                               float *const *dlora_b, const uint16_t *const *dy, int64_t ld_dy,
                                               const uint16_t *x, int64_t ldx, const uint16_t *u,
                                               const uint16_t *lora_a, int n, int N, int C_in, const int *C_out, int R,
                                               float scale, void *workspace, cudaStream_t stream);

/* Its parameter gradients alone: dB_i and dA_g ACCUMULATE as above (dx_f's du columns and dy, x, u
 * read; nothing written but the gradients and the workspace's dB product). With dlora_a and
 * dlora_b NULL the fold backward forms dx alone, so that the two can run on two streams (the
 * trainer's weight-gradient stream, gpu/llama.cu wg_join): the same products, the same bits. */
void gpu_lora_group_fold_grads_strided_bf16(struct gpu_gemm *g, const uint16_t *dx_f, int64_t ldd, float *dlora_a,
                                            float *const *dlora_b, const uint16_t *const *dy, int64_t ld_dy,
                                            const uint16_t *x, int64_t ldx, const uint16_t *u, int n, int N, int C_in,
                                            const int *C_out, int R, float scale, void *workspace,
                                            cudaStream_t stream);

struct lora_fold_slot {
    uint16_t *s;       /* S_i's first element: W_f,i + C_in + i·R */
    int64_t ld;        /* W_f,i's row stride */
    const uint16_t *b; /* B_i (C_out, R), the bf16 compute copy */
    int64_t c_out;
};
void gpu_lora_fold_b_bf16(const struct lora_fold_slot *slots, int n_slots, int max_c_out, int R, float scale,
                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_LORA_H */
