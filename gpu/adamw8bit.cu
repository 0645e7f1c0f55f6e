/* adamw8bit.cu — bitsandbytes AdamW8bit (gpu/adamw8bit.h).
 *
 * Strategy: the 8-bit path runs one block of 256 threads per 256-element state block, thread j on
 * element j, as bitsandbytes' kernel: dequantize both moments from the maps (shared memory),
 * update them, take the block maxima with warp shuffles and one shared-memory step (fmaxf: exact,
 * so the order does not matter; the shared-memory tree of 8 barriers reached 40% of the copy rate
 * on an H100), update p, then re-encode both moments against the new maxima with the dQuantize<0>
 * binary search (8 probes of the shared map). The 32-bit path is a grid-stride elementwise
 * kernel. Every fp32 operation is written with __f*_rn so that nvcc cannot contract it, and the
 * scalars (c1, c2, step_size, c2·eps, 1 − lr·wd, 1 − β) are formed on the host in fp32 exactly as
 * ref/adamw8bit.c forms them.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:adamw8bit_parity
 *                     (binary) adamw8bit_parity --bench
 */
#include "gpu/adamw8bit.h"

#include <float.h>
#include <math.h>

#include <cuda_bf16.h>

#include "gpu/cuda_check.h"
#include "io/check.h"

namespace {

constexpr int kBlock = 256; /* = the state block */

struct scalars {
    float b1, b2, one_minus_b1, one_minus_b2, gs, step_size, c2_eps, eps_c2, decay;
    int has_decay;
    const float *norm_coef;
    const double *guard;
};

/* Whether the step applies (the device scalars are finite), and its gradient scale. */
__device__ __forceinline__ bool step_applies(const scalars &s, float *gs) {
    if (s.guard && !isfinite(*s.guard)) return false;
    if (!s.norm_coef) return *gs = s.gs, true;
    if (!isfinite(s.norm_coef[0])) return false;
    *gs = s.norm_coef[1];
    return true;
}

/* bitsandbytes dQuantize<0> (ref/quant8.c encode_cuda): binary search with pivots 127 ± 64 ± … ± 1,
 * then the nearer neighbour by the fp32 midpoint; a tie keeps the last pivot. */
__device__ __forceinline__ uint8_t encode_cuda(const float *code, float x) {
    int pivot = 127, upper_pivot = 255, lower_pivot = 0;
    float lower = -1.0f, upper = 1.0f;
    float val = code[pivot];
    for (int i = 64; i > 0; i >>= 1) {
        if (x > val) {
            lower_pivot = pivot;
            lower = val;
            pivot += i;
        } else {
            upper_pivot = pivot;
            upper = val;
            pivot -= i;
        }
        val = code[pivot];
    }
    if (upper_pivot == 255) upper = code[upper_pivot];
    if (lower_pivot == 0) lower = code[lower_pivot];
    if (x > val) {
        const float midpoint = __fmul_rn(__fadd_rn(upper, val), 0.5f);
        return (uint8_t)(x > midpoint ? upper_pivot : pivot);
    }
    const float midpoint = __fmul_rn(__fadd_rn(lower, val), 0.5f);
    return (uint8_t)(x < midpoint ? lower_pivot : pivot);
}

__global__ void __launch_bounds__(kBlock) adamw8bit_block_step(gpu_adamw8bit_tensor t, scalars s) {
    __shared__ float map1[256], map2[256], red1[kBlock / 32], red2[kBlock / 32];
    float gs;
    if (!step_applies(s, &gs)) return; /* uniform over the grid */
    map1[threadIdx.x] = t.map1[threadIdx.x];
    map2[threadIdx.x] = t.map2[threadIdx.x];
    __syncthreads();
    const int64_t blk = blockIdx.x;
    const int64_t i = blk * kBlock + threadIdx.x;
    const bool valid = i < t.n;
    const float a1 = t.absmax1[blk], a2 = t.absmax2[blk];
    float m, v, g = 0.0f;
    bool finite = false;
    if (valid) {
        const float graw = t.grad[i];
        g = __fmul_rn(graw, gs);
        finite = isfinite(graw);
        if (finite) {
            m = __fmul_rn(map1[t.q1[i]], a1);
            m = __fadd_rn(__fmul_rn(m, s.b1), __fmul_rn(s.one_minus_b1, g));
            v = __fmul_rn(map2[t.q2[i]], a2);
            v = __fadd_rn(__fmul_rn(v, s.b2), __fmul_rn(__fmul_rn(s.one_minus_b2, g), g));
        } else {
            m = 0.0f;
            v = 0.0f;
        }
    } else {
        /* the kernel's loader pads a short block with g = 0, code 128 (m) and code 0 (v) */
        m = __fadd_rn(__fmul_rn(__fmul_rn(map1[128], a1), s.b1), __fmul_rn(s.one_minus_b1, 0.0f));
        v = __fmul_rn(__fmul_rn(map2[0], a2), s.b2);
    }
    /* block maxima: butterfly within each warp, then the 8 warp maxima (fmaxf is exact and
     * order-free, so any tree gives the reference's value) */
    float w1 = fabsf(m), w2 = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        w1 = fmaxf(w1, __shfl_xor_sync(0xffffffffu, w1, o));
        w2 = fmaxf(w2, __shfl_xor_sync(0xffffffffu, w2, o));
    }
    if ((threadIdx.x & 31) == 0) red1[threadIdx.x >> 5] = w1, red2[threadIdx.x >> 5] = w2;
    __syncthreads();
    float max1 = -FLT_MAX, max2 = -FLT_MAX; /* the reference's starting value */
#pragma unroll
    for (int w = 0; w < kBlock / 32; w++) max1 = fmaxf(max1, red1[w]), max2 = fmaxf(max2, red2[w]);
    if (threadIdx.x == 0) {
        t.absmax1[blk] = max1;
        t.absmax2[blk] = max2;
    }
    if (!valid) return;
    float p = t.p[i];
    if (finite) {
        p = __fadd_rn(p, __fmul_rn(s.step_size, __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), s.c2_eps))));
        if (s.has_decay) p = __fmul_rn(p, s.decay);
        t.p[i] = p;
    }
    if (t.copy) reinterpret_cast<__nv_bfloat16 *>(t.copy)[i] = __float2bfloat16_rn(p);
    uint8_t c1 = encode_cuda(map1, __fdiv_rn(m, max1));
    if (signbit(map1[c1]) != signbit(m)) c1 = (uint8_t)(m > 0.0f ? c1 + 1 : c1 - 1);
    t.q1[i] = c1;
    t.q2[i] = encode_cuda(map2, __fdiv_rn(v, max2));
}

__global__ void __launch_bounds__(kBlock) adamw32bit_elementwise(gpu_adamw8bit_tensor t, scalars s) {
    float gs;
    if (!step_applies(s, &gs)) return;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t.n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = __fmul_rn(t.grad[i], gs);
        const float m = __fadd_rn(__fmul_rn(t.m[i], s.b1), __fmul_rn(s.one_minus_b1, g));
        const float v = __fadd_rn(__fmul_rn(t.v[i], s.b2), __fmul_rn(s.one_minus_b2, __fmul_rn(g, g)));
        float p = __fadd_rn(t.p[i], __fmul_rn(s.step_size, __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), s.eps_c2))));
        if (s.has_decay) p = __fmul_rn(p, s.decay);
        t.m[i] = m;
        t.v[i] = v;
        t.p[i] = p;
        if (t.copy) reinterpret_cast<__nv_bfloat16 *>(t.copy)[i] = __float2bfloat16_rn(p);
    }
}

}  // namespace

extern "C" void gpu_adamw8bit_step(const struct gpu_adamw8bit_tensor *t, const struct gpu_adamw8bit_args *h,
                                   cudaStream_t stream) {
    CHECK(h->step >= 1 && t->n >= 0, "adamw8bit step=%lld n=%lld", (long long)h->step, (long long)t->n);
    if (t->n == 0) return;
    /* fp32 scalars exactly as ref/adamw8bit.c forms them (host fp32 arithmetic, no contraction) */
    scalars s;
    const float b1 = (float)h->hp.beta1, b2 = (float)h->hp.beta2, lr = (float)h->hp.lr, eps = (float)h->hp.eps;
    const float wd = (float)h->hp.weight_decay;
    volatile float c1 = 1.0f - powf(b1, (float)h->step);
    volatile float c2 = sqrtf(1.0f - powf(b2, (float)h->step));
    volatile float neg_lr_c2 = -lr * c2;
    s.step_size = neg_lr_c2 / c1;
    s.b1 = b1, s.b2 = b2;
    s.one_minus_b1 = 1.0f - b1, s.one_minus_b2 = 1.0f - b2;
    s.gs = (float)h->gnorm_scale;
    s.c2_eps = c2 * eps;
    s.eps_c2 = eps * c2;
    volatile float lr_wd = lr * wd;
    s.decay = 1.0f - lr_wd;
    s.has_decay = wd > 0.0f;
    s.norm_coef = h->norm_coef;
    s.guard = h->guard;
    if (t->is_8bit) {
        CHECK(t->q1 && t->q2 && t->absmax1 && t->absmax2 && t->map1 && t->map2, "adamw8bit: 8-bit state missing");
        const int64_t blocks = (t->n + kBlock - 1) / kBlock;
        CHECK(blocks < INT32_MAX, "adamw8bit: n=%lld too large", (long long)t->n);
        adamw8bit_block_step<<<(unsigned)blocks, kBlock, 0, stream>>>(*t, s);
    } else {
        CHECK(t->m && t->v, "adamw8bit: 32-bit state missing");
        const int64_t b = (t->n + kBlock - 1) / kBlock;
        adamw32bit_elementwise<<<(int)(b < 1024 ? b : 1024), kBlock, 0, stream>>>(*t, s);
    }
    KERNEL_CHECK(stream);
}
