/* adamw8bit.h — bitsandbytes AdamW8bit: 8-bit blockwise states (NUMERICS.md §5.2).
 *
 * Mirrors bitsandbytes.optim.AdamW8bit (Optimizer2State, optim_bits=8, block_wise=True) and the
 * CUDA kernel kOptimizerStatic8bit2StateBlockwise<float, ADAM, 256, 1>; defaults lr=1e-3,
 * betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, min_8bit_size=4096, gnorm_scale=1.
 *
 * Per tensor of n elements:
 *   n < min_8bit_size (4096): fp32 states m, v (kOptimizer32bit2State): the same per-element math
 *     as below without the (de)quantization.
 *   otherwise 8-bit: q1 (uint8 [n], codes into the SIGNED dynamic map, m), q2 (uint8 [n], codes
 *     into the UNSIGNED map, v), absmax1, absmax2 (fp32 [ceil(n/256)]); all zero at the start
 *     (code 0 · absmax 0 = ∓0).
 * Step t (t = 1 on the first call), with c1 = 1 − β1^t, c2 = sqrt(1 − β2^t) (fp32 powf, sqrtf),
 * step_size = −lr·c2 / c1 (fp32), per element, fp32, in this order:
 *   g ← g · gnorm_scale
 *   g finite:  m = map1[q1]·absmax1[blk]; m = m·β1 + (1−β1)·g
 *              v = map2[q2]·absmax2[blk]; v = v·β2 + ((1−β2)·g)·g
 *              p = p + step_size · (m / (sqrt(v) + c2·eps))
 *              p = p · (1 − lr·wd)            when wd > 0: AFTER the Adam step, multiplicative
 *                                             (torch.optim.AdamW decays BEFORE, §5.1)
 *   g NaN/Inf: m = v = 0, p unchanged.
 * Then per block of 256: absmax1 = max|m|, absmax2 = max|v| (fmaxf from −FLT_MAX over the block),
 *   q1 = quant8_encode(map1, m / absmax1, QUANT8_CUDA) — if the code's sign bit differs from m's,
 *        the code moves one step toward m's sign (+1 for m > 0, else −1, uint8 wrap-around);
 *   q2 = quant8_encode(map2, v / absmax2, QUANT8_CUDA).
 *   (Division, not the reciprocal multiply: the kernel uses __fdividef; the GPU's __powf and
 *   __fdividef are approximate, so the GPU agrees within a few ulp of the state, not bitwise.)
 *
 * bitsandbytes 0.50's CPU backend (optimizer_update_8bit_blockwise on "cpu", used for the
 * fixtures) differs: decay BEFORE the step, p·(1−lr·wd) then p − (lr/c1)·m/(sqrt(v)/c2 + eps),
 * corrections in double, no NaN guard, and 8-bit encoding by its C++ quantize_blockwise.
 * ADAMW8BIT_BNB_CPU selects that order so that the fixtures can be matched;
 * ADAMW8BIT_BNB_CUDA is the one the GPU path implements.
 *
 * Shapes: p, g (n) fp32. OVERWRITES p and the state. Aliasing: none.
 */
#ifndef REFINE_REF_ADAMW8BIT_H
#define REFINE_REF_ADAMW8BIT_H

#include <stdint.h>

#include "ref/adamw.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ADAMW8BIT_BLOCKSIZE 256
#define ADAMW8BIT_MIN_8BIT_SIZE 4096

enum adamw8bit_variant { ADAMW8BIT_BNB_CUDA = 0, ADAMW8BIT_BNB_CPU = 1 };

/* Python floats (double) as the optimizer holds them; the CUDA kernels receive them as float. */
struct adamw8bit_hparams {
    struct adamw_hparams hp;
    double gnorm_scale;
    int min_8bit_size;
    enum adamw8bit_variant variant;
};

/* bitsandbytes' defaults. */
struct adamw8bit_hparams adamw8bit_defaults(void);

struct adamw8bit_state {
    int64_t n;
    int is_8bit;
    int step;        /* steps taken */
    uint8_t *q1, *q2;        /* [n] when 8-bit */
    float *absmax1, *absmax2; /* [ceil(n/256)] when 8-bit */
    float *m, *v;            /* [n] when 32-bit */
    float map1[256], map2[256];
};

static inline int64_t adamw8bit_n_blocks(int64_t n) { return (n + ADAMW8BIT_BLOCKSIZE - 1) / ADAMW8BIT_BLOCKSIZE; }

/* Allocates zeroed state for a tensor of n elements (8-bit when n ≥ min_8bit_size). */
void adamw8bit_init(struct adamw8bit_state *s, int64_t n, int min_8bit_size);
void adamw8bit_free(struct adamw8bit_state *s);

/* One step: s->step += 1, then the update of p with gradient g. */
void adamw8bit_step(struct adamw8bit_state *s, float *p, const float *g, const struct adamw8bit_hparams *h);

/* The dequantized moments (m, v) of the state, [n] each (copies for the 32-bit path). */
void adamw8bit_moments(const struct adamw8bit_state *s, float *m, float *v);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_ADAMW8BIT_H */
