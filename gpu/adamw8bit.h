/* adamw8bit.h — bitsandbytes' 8-bit blockwise AdamW on the GPU, every trainable tensor in one
 * launch, fp32 master weights with bf16 copies written out (as gpu/adamw.h).
 *
 * Math: ref/adamw8bit.h, variant ADAMW8BIT_BNB_CUDA (bitsandbytes AdamW8bit: Optimizer2State,
 * kOptimizerStatic8bit2StateBlockwise<float, ADAM, 256, 1> and, for small tensors,
 * kOptimizer32bit2State), NUMERICS.md §5.2. Step t ≥ 1, per element, fp32, each op rounded once:
 *   gv = g·gnorm_scale
 *   8-bit tensors (n ≥ min_8bit_size), g finite:
 *     m = map1[q1]·absmax1[blk];  m = m·β1 + (1−β1)·gv
 *     v = map2[q2]·absmax2[blk];  v = v·β2 + ((1−β2)·gv)·gv
 *     p = p + step_size·(m / (sqrt(v) + c2·eps));  then p = p·(1 − lr·wd) when wd > 0
 *   g NaN/Inf: m = v = 0, p unchanged.
 *   Then per block of 256: absmax1 = max|m|, absmax2 = max|v| (a short last block also counts the
 *   kernel's padding lanes: |map1[128]·absmax1_old·β1| and 0); q1 = the CUDA-rule code of m/absmax1
 *   in the signed map, moved one step toward m's sign when the code's sign differs; q2 = the code of
 *   v/absmax2 in the unsigned map.
 *   32-bit tensors (n < min_8bit_size): m, v fp32, m = m·β1 + (1−β1)·gv, v = v·β2 + (1−β2)·(gv·gv),
 *     the same p update, no NaN guard.
 *   c1 = 1 − β1^t, c2 = sqrt(1 − β2^t), step_size = (−lr·c2)/c1: computed on the host in fp32 with
 *   powf and sqrtf exactly as ref/adamw8bit.c does (bitsandbytes' kernel uses the approximate
 *   __powf; ours matches the reference instead), then passed to the kernel.
 *   copy = bf16_rne(p) when the tensor has a bf16 copy.
 * The result is bit-identical to ref/adamw8bit.c's step8_cuda/step32_cuda on the same inputs:
 * every op is an __f*_rn intrinsic (no contraction), the maxima are order-independent, and the
 * encoder is the reference's binary search.
 *
 * State layout, as bitsandbytes stores it (state1/state2 uint8 [n], absmax1/absmax2 fp32
 * [ceil(n/256)], all zero before the first step; 32-bit tensors: m, v fp32 [n], zero). The maps
 * (256 fp32 each, ascending: map1 signed, map2 unsigned) are the caller's — quant8_dynamic_map, or
 * the qmap1/qmap2 read from a bitsandbytes checkpoint — copied to the device at build time.
 * master, copy and the state are UPDATED IN PLACE; grad is read only. Aliasing: no buffer shared
 * between tensors or roles. build_gpu_adamw8bit allocates the descriptor and chunk tables once;
 * gpu_adamw8bit_step allocates nothing and does not synchronize. Deterministic: one warp owns one
 * 256-block, one thread one element.
 */
#ifndef REFINE_GPU_ADAMW8BIT_H
#define REFINE_GPU_ADAMW8BIT_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPU_ADAMW8BIT_BLOCKSIZE 256

struct gpu_adamw8bit_param {
    float *master;     /* (n) fp32 */
    uint16_t *copy;    /* (n) bf16 compute copy, or NULL */
    const float *grad; /* (n) fp32 */
    int64_t n;
    /* 8-bit state (n ≥ min_8bit_size): */
    uint8_t *state1, *state2;  /* (n) codes of m (signed map) and v (unsigned map) */
    float *absmax1, *absmax2;  /* (ceil(n/256)) */
    /* 32-bit state (n < min_8bit_size): */
    float *m, *v; /* (n) */
};

struct gpu_adamw8bit_step_args {
    double lr, beta1, beta2, eps, weight_decay, gnorm_scale; /* rounded to fp32, as bitsandbytes does */
    int64_t step;                                            /* t, 1 on the first step */
};

struct gpu_adamw8bit;

/* min_8bit_size: bitsandbytes' 4096; a tensor uses the 8-bit state iff n ≥ min_8bit_size. */
struct gpu_adamw8bit *build_gpu_adamw8bit(const struct gpu_adamw8bit_param *params, int count, int min_8bit_size,
                                          const float map1[256], const float map2[256]);
void free_gpu_adamw8bit(struct gpu_adamw8bit *a);

void gpu_adamw8bit_step(struct gpu_adamw8bit *a, const struct gpu_adamw8bit_step_args *h, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_ADAMW8BIT_H */
