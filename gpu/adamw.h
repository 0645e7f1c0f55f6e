/* adamw.h — multi-tensor fused AdamW on the GPU: fp32 master weights and moments, bf16 copies
 * written out, global gradient-norm clipping, all trainable tensors in one launch.
 *
 * Math (torch.optim.AdamW single-tensor/foreach order, NUMERICS.md §5.1, and
 * torch.nn.utils.clip_grad_norm_, §5.3), step t ≥ 1, every op an fp32 op rounded once:
 *   total = sqrt(Σ_tensors Σ_i g_i²)           (fp32 squares summed per chunk, chunks summed in double)
 *   coef  = min(max_norm / (total + 1e-6), 1)   (max_norm ≤ 0: no clipping, coef = 1)
 *   g ← g·coef                                  (the gradient buffers are NOT modified; g·coef is used)
 *   p ← p·(1 − lr·wd)                           (only tensors with decay = 1)
 *   m ← fma(1−β1, g − m, m)                     (aten lerp with weight 1−β1 < 0.5, one rounding)
 *   v ← fma((1−β2)·g, g, v·β2)                  (mul_ then addcmul_, the addcmul one rounding)
 *   p ← p + ((−lr/bc1)·m) / (sqrt(v)/sqrt(bc2) + eps)     bc1 = 1 − β1^t, bc2 = 1 − β2^t
 *                                               (addcdiv: self + value·t1 / t2, left to right)
 *   copy ← bf16_rne(p)                          (when the tensor has a bf16 compute copy)
 * ("every op rounded once": the two fma above round once each, as ref/adamw.c's fmaf.)
 * The scalars (1 − lr·wd, 1−β1, 1−β2, −lr/bc1, sqrt(bc2)) are computed in double on the host and
 * rounded to fp32, as torch does with Python floats: the update is ref_adamw_step's (ref/adamw.h)
 * operation for operation. The norm differs from ref_clip_grad_norm only in summation order (the
 * reference rounds per-tensor norms to fp32 first). Deterministic: the norm's partial sums have
 * a fixed order, and every element is updated by one thread.
 *
 * Non-finite gradients: when the norm is computed (clipping, or grad_norm requested) and is not
 * finite, the update kernel changes nothing (the caller reads the norm and reports the tensor).
 * Split masters (--master split): master = NULL, lo and copy given: each element's master is
 * master_pair_join(copy, lo) and the update writes master_pair_split of the new master back into
 * both — the same update on the value the pair holds (ref/master_pair.h; the sharded form takes
 * fp32 masters only). bf16 weights (--master bf16): master = lo = NULL, copy given, master_bf16 = 1:
 * the pair with its low half 0 and dropped — the widened copy updated, bf16_rne written back.
 * Norm only: a tensor given with master = m = v = copy = NULL carries no state; a context holding
 * one serves gpu_adamw_grad_norm only (e.g. for an optimizer that updates elsewhere).
 * Shapes: per tensor, master, m, v (n) fp32, the gradient either grad (n) fp32 or grad_bf16 (n) bf16
 * (exactly one of the two non-NULL), and copy (n) bf16 or NULL; all device memory. A bf16 gradient
 * is read widened (exact bf16 → fp32) and used as above, in the norm and in the update: the same
 * bits as the fp32 form given the widened values. master, m, v, copy are UPDATED IN PLACE; the
 * gradient is read only. grad_norm (device, one float) receives the pre-clipping total norm when
 * non-NULL.
 * Aliasing: no buffer may be shared between two tensors or between two roles.
 * build_gpu_adamw allocates the descriptor and chunk tables once (setup); gpu_adamw_step allocates
 * nothing and does not synchronize.
 *
 * The sharded form (ZeRO-1, ref/shard.h), build_gpu_adamw_sharded: the same chunk table over every
 * trainable tensor of the model (their grad, copy, n and decay), of which this rank owns the pieces
 * ref/shard.h's shard_pieces gives it; their fp32 masters and moments are the flat arrays master,
 * m, v (piece k at its off; master = m = v = NULL: no state, the norm alone, as the 8-bit optimizer
 * needs it). The norm is summed over every chunk from partial sums the ranks complete together:
 * gpu_adamw_partials enqueues this rank's chunks' partial sums of squares into the device array it
 * returns (n_chunks floats, the other chunks' zero) and the caller sums that array over the ranks,
 * in place; gpu_adamw_step and gpu_adamw_norm_and_coef then take the norm from it (they do not
 * compute partials) and update this rank's chunks (their bf16 copies too). A chunk's partial sum is
 * the same whoever computes it, and x + 0 = x: for this rank's elements, the same bits as the
 * unsharded form (tests/unit/shard_test.c with ref/, tests/parity/adamw_parity.cu here).
 */
#ifndef REFINE_GPU_ADAMW_H
#define REFINE_GPU_ADAMW_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "ref/adamw.h"
#include "ref/master_pair.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpu_adamw_param {
    float *master;      /* (n) fp32, or NULL with lo (split) */
    uint16_t *copy;     /* (n) bf16 compute copy, or NULL */
    float *m, *v;       /* (n) fp32 moments, zero before the first step */
    const float *grad;  /* (n) fp32 */
    const uint16_t *grad_bf16; /* (n) bf16 gradient, read widened; set instead of grad (exactly one
                                  of grad, grad_bf16 non-NULL) */
    int64_t n;
    int decay;          /* 1: weight decay applies to this tensor */
    uint16_t *lo;       /* split masters (ref/master_pair.h): (n) the low halves; the master is
                           join(copy, lo), updated in place as split(master'); NULL: master */
    int master_bf16;    /* 1: no master (master, lo NULL): the bf16 copy is the weight (--master bf16);
                           2: the same, each result rounded stochastically (--master bf16-sr,
                           ref/master_pair.h bf16_sr_bits) with the stream (sr_seed, the step,
                           sr_tensor, element) */
    uint64_t sr_seed;
    uint32_t sr_tensor; /* bf16_sr_tensor_hash of the tensor's name */
};


/* master_bf16 (here and in gpu/adamw8bit.h) of the masters' storage: 1 bf16 weights, 2 rounded
 * stochastically, 0 otherwise. */
static inline int gpu_adamw_master_bf16(enum master_storage ms) {
    return ms == MASTER_BF16 ? 1 : ms == MASTER_BF16_SR ? 2 : 0;
}

struct gpu_adamw;

struct gpu_adamw *build_gpu_adamw(const struct gpu_adamw_param *params, int count);
void free_gpu_adamw(struct gpu_adamw *a);

/* One optimizer step over every tensor given at build time: t = s->step, s->hp (ref/adamw.h),
 * clipping at s->clip (≤ 0: none). guard: a device scalar or NULL; when it is not finite (e.g. the
 * step's summed loss) nothing is updated, as for a non-finite norm. */
void gpu_adamw_step(struct gpu_adamw *a, const struct optim_step *s, const double *guard, float *grad_norm,
                    cudaStream_t stream);

/* The sharded form (above): pieces of this rank, flat master, m, v (or all NULL); grad NULL, or
 * the gradients sharded too (ZeRO-2): this rank's pieces' gradients in one flat array laid out as
 * master (piece k at its off), which the partial sums and the update read instead of the tensors'
 * grad (then only the tensors' n, decay and copy are used; fp32 only: no tensor may then have
 * grad_bf16). With grad NULL the tensors' own gradients are read, grad or grad_bf16 alike. */
struct shard_piece;
struct gpu_adamw *build_gpu_adamw_sharded(const struct gpu_adamw_param *params, int count,
                                          const struct shard_piece *pieces, int n_pieces, float *master, float *m,
                                          float *v, const float *grad);
/* Sharded form: this rank's chunks' partial sums of squares into the returned device array
 * (*n_chunks floats, the others zero), for the caller to sum over the ranks before the step. */
float *gpu_adamw_partials(struct gpu_adamw *a, int64_t *n_chunks, cudaStream_t stream);

/* n fp32 masters x (device) into the pair (hi: the bf16 compute copy, lo), ref/master_pair.h; lo
 * NULL: hi alone (bf16 weights). */
void gpu_master_pair_split(uint16_t *hi, uint16_t *lo, const float *x, int64_t n, cudaStream_t stream);

/* Only the global norm (no update), e.g. for logging: grad_norm (device float). */
void gpu_adamw_grad_norm(struct gpu_adamw *a, float *grad_norm, cudaStream_t stream);
/* The global norm and the clip coefficient for max_grad_norm (≤ 0: coefficient 1), no update: a
 * device pointer to {norm, coef}, valid until a's next call — for an optimizer that updates
 * elsewhere and reads the coefficient on the device (gpu/adamw8bit.h's norm_coef). */
const float *gpu_adamw_norm_and_coef(struct gpu_adamw *a, double max_grad_norm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_ADAMW_H */
