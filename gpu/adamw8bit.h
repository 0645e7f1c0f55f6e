/* adamw8bit.h — bitsandbytes AdamW8bit on the GPU: blockwise 8-bit Adam states, one launch per
 * tensor, bit for bit ref/adamw8bit.h's ADAMW8BIT_BNB_CUDA variant.
 *
 * Math (ref/adamw8bit.h, bitsandbytes kOptimizerStatic8bit2StateBlockwise<float, ADAM, 256, 1> and
 * kOptimizer32bit2State; NUMERICS.md §5.2), step t ≥ 1, every op one fp32 rounding:
 *   c1 = 1 − β1^t, c2 = sqrt(1 − β2^t) (fp32 powf/sqrtf, on the host), step_size = (−lr·c2)/c1
 *   8-bit (n ≥ min_8bit_size, 4096 by default), per block of 256 elements:
 *     g finite:  m = map1[q1]·absmax1; m = m·β1 + (1−β1)·g
 *                v = map2[q2]·absmax2; v = v·β2 + ((1−β2)·g)·g
 *                p = p + step_size·(m / (sqrt(v) + c2·eps)); then p = p·(1 − lr·wd) when wd > 0
 *     g NaN/Inf: m = v = 0, p unchanged
 *     absmax1 = max |m|, absmax2 = max |v| over the block (a short last block also counts the
 *     kernel's padding lanes: |map1[128]·absmax1·β1 + (1−β1)·0| and |map2[0]·absmax2·β2|);
 *     q1 = encode(map1, m / absmax1), moved one code toward m's sign when the code's sign differs;
 *     q2 = encode(map2, v / absmax2); encode = bitsandbytes' dQuantize<0> binary search and
 *     midpoint rule (ref/quant8.h QUANT8_CUDA).
 *   32-bit (n < min_8bit_size): m = m·β1 + (1−β1)·g, v = v·β2 + (1−β2)·(g·g),
 *     p = p + step_size·(m / (sqrt(v) + eps·c2)), then the decay; no NaN guard (as bitsandbytes).
 * g = grad·gnorm_scale first in both. Where bitsandbytes' kernel uses __powf/__fdividef the
 * reference (and this code) uses IEEE powf and division, so GPU and reference agree exactly.
 * copy (bf16, optional) receives bf16_rne(p) after the step.
 *
 * State (device): the 8-bit path uses q1, q2 (n) uint8, absmax1, absmax2 (ceil(n/256)) fp32 and
 * the two maps (256 fp32 each: map1 signed, map2 unsigned, as quant8_dynamic_map builds them);
 * the 32-bit path uses m, v (n) fp32. All zero before the first step. p, the state and copy are
 * UPDATED IN PLACE; the gradient is read: grad (n) fp32 or grad_bf16 (n) bf16 (exactly one of the
 * two non-NULL), a bf16 gradient read widened (exact bf16 → fp32) and used as above on both paths,
 * the same bits as given grad = the widened values. Aliasing: none. One launch, no allocation, no
 * synchronization.
 */
#ifndef REFINE_GPU_ADAMW8BIT_H
#define REFINE_GPU_ADAMW8BIT_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "ref/adamw.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpu_adamw8bit_tensor {
    float *p;          /* (n) fp32 master, or NULL with lo */
    uint16_t *copy;    /* (n) bf16 compute copy, or NULL */
    const float *grad; /* (n) fp32 */
    const uint16_t *grad_bf16; /* (n) bf16 gradient, read widened; set instead of grad (exactly one
                                  of grad, grad_bf16 non-NULL) */
    int64_t n;
    int is_8bit;       /* n ≥ min_8bit_size */
    uint8_t *q1, *q2;
    float *absmax1, *absmax2;
    const float *map1, *map2;
    float *m, *v;      /* 32-bit path */
    uint16_t *lo;      /* split masters (ref/master_pair.h): the master is join(copy, lo), written
                          back as split(master'); NULL: p */
    int master_bf16;   /* 1: no master (p, lo NULL): the bf16 copy is the weight, widened and written
                          back bf16_rne (--master bf16: the pair with its low half 0, dropped);
                          2: written back rounded stochastically (--master bf16-sr, as gpu/adamw.h) */
    uint64_t sr_seed;
    uint32_t sr_tensor;
    const void *tables; /* the encode tables of map1, map2 prebuilt by gpu_adamw8bit_tables_build
                           (16-byte aligned), copied by each CTA; NULL: each CTA builds them from
                           the maps (~10 µs a launch: what a step of many small tensors pays) */
};

struct gpu_adamw8bit_args {
    struct adamw_hparams hp; /* ref/adamw.h */
    double gnorm_scale;      /* as ref/adamw8bit.h's hparams */
    int64_t step;                                           /* t, 1 on the first step */
    /* Device scalars read by the kernels, so that the host need not wait for them (NULL: unused):
     * norm_coef {global norm, clip coefficient} (gpu_adamw_norm_and_coef) replaces gnorm_scale by
     * its coefficient and, when the norm is not finite, leaves every tensor unchanged; guard (e.g.
     * the step's summed loss) leaves every tensor unchanged when it is not finite. */
    const float *norm_coef;
    const double *guard;
};

void gpu_adamw8bit_step(const struct gpu_adamw8bit_tensor *t, const struct gpu_adamw8bit_args *h,
                        cudaStream_t stream);

/* The bytes of the encode tables of a pair of maps, and their build (one CTA, enqueued) into out
 * (device, 16-byte aligned): the same tables a step's CTAs build from map1, map2, for the tensors'
 * `tables` field. The maps are read when the build runs; the tables stay valid while they hold. */
size_t gpu_adamw8bit_tables_bytes(void);
/* The step's fast IEEE sequences checked on this device (adamw8bit_parity): the number of inputs of
 * their ranges — the square root's [2^−101, FLT_MAX], the reciprocal's exponent fields 1..252 of
 * either sign, every one — where they differ from __fsqrt_rn / __frcp_rn (0 is required; sm_90
 * runs the written-out sequences, other devices the intrinsics themselves). Synchronous. */
unsigned long long gpu_adamw8bit_fast_math_check(void);
void gpu_adamw8bit_tables_build(void *out, const float *map1, const float *map2, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_ADAMW8BIT_H */
