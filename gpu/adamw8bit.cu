/* adamw8bit.cu — bitsandbytes' 8-bit blockwise AdamW, all tensors in one launch (gpu/adamw8bit.h).
 *
 * Strategy: at build time every tensor is cut into chunks of 2048 elements (8 quantization blocks
 * of 256) and a chunk table (tensor, first element) is uploaded with the descriptors, so one launch
 * covers every tensor whatever its size (gpu/adamw.cu's scheme). A 256-thread CUDA block owns a
 * chunk; warp w owns quantization block w of it and lane l its elements 8l .. 8l+7, so a block's
 * absmax is one xor-shuffle max over the warp (fmaxf: exact and order-independent) with no shared
 * memory and no second pass. Full blocks of aligned tensors move p and g with 16-byte loads, the
 * codes with 8-byte loads and the bf16 copy with one 16-byte store; the last short block of a
 * tensor takes scalar accesses. The two 256-entry maps sit in shared memory for the encoder's
 * 8-step binary search. Memory-bound: 18 bytes an element (p r/w, g, two codes r/w, the bf16 copy).
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:adamw8bit_parity
 *                     (binary) adamw8bit_parity --bench
 */
#include "gpu/adamw8bit.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include <vector>

#include <cuda_bf16.h>

#include "gpu/cuda_check.h"
#include "io/check.h"

namespace {

constexpr int kBlock = 256;
constexpr int kQBlock = GPU_ADAMW8BIT_BLOCKSIZE;
constexpr int kPerLane = kQBlock / 32; /* 8 */
constexpr int64_t kChunk = (int64_t)kQBlock * (kBlock / 32);

struct chunk_ref {
    int32_t tensor;
    int32_t pad;
    int64_t start;
};

struct tensor_desc {
    float *p;
    __nv_bfloat16 *copy;
    const float *g;
    int64_t n;
    uint8_t *q1, *q2;
    float *absmax1, *absmax2;
    float *m, *v;
    int is_8bit;
    int vec; /* every pointer aligned for the 16-byte (8-byte for codes) accesses */
};

struct step_scalars {
    float beta1, beta2, one_minus_beta1, one_minus_beta2;
    float step_size; /* (−lr·c2)/c1 */
    float c2_eps;    /* c2·eps */
    float decay;     /* 1 − lr·wd */
    float gnorm_scale;
    int decay_on; /* wd > 0 */
};

/* quant8_encode(map, x, QUANT8_CUDA): bitsandbytes' dQuantize<0>, the reference's search. */
__device__ __forceinline__ int encode_cuda(const float *code, float x) {
    int pivot = 127, upper_pivot = 255, lower_pivot = 0;
    float lower = -1.0f, upper = 1.0f;
    float val = code[pivot];
#pragma unroll
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
        return x > midpoint ? upper_pivot : pivot;
    }
    const float midpoint = __fmul_rn(__fadd_rn(lower, val), 0.5f);
    return x < midpoint ? lower_pivot : pivot;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, k));
    return v;
}

/* p ← p + step_size·(m/(sqrt(v) + c2·eps)), then the multiplicative decay. */
__device__ __forceinline__ float adam_update(float p, float m, float v, const step_scalars &s) {
    p = __fadd_rn(p, __fmul_rn(s.step_size, __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), s.c2_eps))));
    if (s.decay_on) p = __fmul_rn(p, s.decay);
    return p;
}

__global__ void __launch_bounds__(kBlock) adamw8bit_chunk_update(const tensor_desc *descs, const chunk_ref *chunks,
                                                                 const float *maps, step_scalars s) {
    __shared__ float map1[256], map2[256];
    map1[threadIdx.x] = maps[threadIdx.x];
    map2[threadIdx.x] = maps[256 + threadIdx.x];
    __syncthreads();
    const chunk_ref c = chunks[blockIdx.x];
    const tensor_desc d = descs[c.tensor];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t blk_start = c.start + (int64_t)warp * kQBlock;
    if (blk_start >= d.n) return; /* whole warps: blk_start is uniform within a warp */
    const int64_t blk = blk_start / kQBlock;
    const int64_t len = d.n - blk_start < kQBlock ? d.n - blk_start : kQBlock;
    const int64_t e0 = blk_start + (int64_t)lane * kPerLane;
    const bool full = len == kQBlock && d.vec;

    float p[kPerLane], g[kPerLane], m[kPerLane] = {}, v[kPerLane] = {};
    bool valid[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; j++) valid[j] = e0 + j < d.n;
    if (full) {
        const float4 *pp = reinterpret_cast<const float4 *>(d.p + e0), *gp = reinterpret_cast<const float4 *>(d.g + e0);
        const float4 p0 = pp[0], p1 = pp[1], g0 = gp[0], g1 = gp[1];
        p[0] = p0.x, p[1] = p0.y, p[2] = p0.z, p[3] = p0.w, p[4] = p1.x, p[5] = p1.y, p[6] = p1.z, p[7] = p1.w;
        g[0] = g0.x, g[1] = g0.y, g[2] = g0.z, g[3] = g0.w, g[4] = g1.x, g[5] = g1.y, g[6] = g1.z, g[7] = g1.w;
    } else {
#pragma unroll
        for (int j = 0; j < kPerLane; j++) {
            p[j] = valid[j] ? d.p[e0 + j] : 0.0f;
            g[j] = valid[j] ? d.g[e0 + j] : 0.0f;
        }
    }

    if (d.is_8bit) {
        uint8_t c1[kPerLane], c2[kPerLane];
        if (full) {
            const uint2 r1 = *reinterpret_cast<const uint2 *>(d.q1 + e0);
            const uint2 r2 = *reinterpret_cast<const uint2 *>(d.q2 + e0);
#pragma unroll
            for (int j = 0; j < kPerLane; j++) {
                const int sh = 8 * (j % 4);
                c1[j] = (uint8_t)(((j < 4 ? r1.x : r1.y) >> sh) & 0xFFu);
                c2[j] = (uint8_t)(((j < 4 ? r2.x : r2.y) >> sh) & 0xFFu);
            }
        } else {
#pragma unroll
            for (int j = 0; j < kPerLane; j++) c1[j] = valid[j] ? d.q1[e0 + j] : 0, c2[j] = valid[j] ? d.q2[e0 + j] : 0;
        }
        const float a1 = d.absmax1[blk], a2 = d.absmax2[blk];
        float max1 = -FLT_MAX, max2 = -FLT_MAX;
        bool finite[kPerLane];
#pragma unroll
        for (int j = 0; j < kPerLane; j++) {
            finite[j] = isfinite(g[j]);
            if (!valid[j]) continue;
            const float gv = __fmul_rn(g[j], s.gnorm_scale);
            if (finite[j]) {
                m[j] = __fmul_rn(map1[c1[j]], a1);
                m[j] = __fadd_rn(__fmul_rn(m[j], s.beta1), __fmul_rn(s.one_minus_beta1, gv));
                v[j] = __fmul_rn(map2[c2[j]], a2);
                v[j] = __fadd_rn(__fmul_rn(v[j], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, gv), gv));
            } else {
                m[j] = 0.0f;
                v[j] = 0.0f;
            }
            max1 = fmaxf(max1, fabsf(m[j]));
            max2 = fmaxf(max2, fabsf(v[j]));
        }
        max1 = warp_max(max1);
        max2 = warp_max(max2);
        if (len < kQBlock) {
            /* the kernel's loader pads a short block with g = 0, code 128 for m and 0 for v */
            max1 = fmaxf(max1, fabsf(__fadd_rn(__fmul_rn(__fmul_rn(map1[128], a1), s.beta1),
                                               __fmul_rn(s.one_minus_beta1, 0.0f))));
            max2 = fmaxf(max2, fabsf(__fmul_rn(__fmul_rn(map2[0], a2), s.beta2)));
        }
        /* every lane has read absmax[blk] before the shuffles above complete */
        if (lane == 0) d.absmax1[blk] = max1, d.absmax2[blk] = max2;
#pragma unroll
        for (int j = 0; j < kPerLane; j++) {
            if (!valid[j]) continue;
            if (finite[j]) p[j] = adam_update(p[j], m[j], v[j], s);
            int q = encode_cuda(map1, __fdiv_rn(m[j], max1));
            if ((signbit(map1[q]) != 0) != (signbit(m[j]) != 0)) q = m[j] > 0.0f ? q + 1 : q - 1;
            c1[j] = (uint8_t)q; /* uint8 wrap-around, as the reference */
            c2[j] = (uint8_t)encode_cuda(map2, __fdiv_rn(v[j], max2));
        }
        if (full) {
            uint2 w1 = make_uint2(0, 0), w2 = make_uint2(0, 0);
#pragma unroll
            for (int j = 0; j < kPerLane; j++) {
                const int sh = 8 * (j % 4);
                if (j < 4) w1.x |= (uint32_t)c1[j] << sh, w2.x |= (uint32_t)c2[j] << sh;
                else w1.y |= (uint32_t)c1[j] << sh, w2.y |= (uint32_t)c2[j] << sh;
            }
            *reinterpret_cast<uint2 *>(d.q1 + e0) = w1;
            *reinterpret_cast<uint2 *>(d.q2 + e0) = w2;
        } else {
#pragma unroll
            for (int j = 0; j < kPerLane; j++)
                if (valid[j]) d.q1[e0 + j] = c1[j], d.q2[e0 + j] = c2[j];
        }
    } else {
        /* 32-bit states (kOptimizer32bit2State): no NaN guard */
#pragma unroll
        for (int j = 0; j < kPerLane; j++) {
            if (!valid[j]) continue;
            const float gv = __fmul_rn(g[j], s.gnorm_scale);
            float mj = d.m[e0 + j], vj = d.v[e0 + j];
            mj = __fadd_rn(__fmul_rn(mj, s.beta1), __fmul_rn(s.one_minus_beta1, gv));
            vj = __fadd_rn(__fmul_rn(vj, s.beta2), __fmul_rn(s.one_minus_beta2, __fmul_rn(gv, gv)));
            d.m[e0 + j] = mj;
            d.v[e0 + j] = vj;
            p[j] = adam_update(p[j], mj, vj, s);
        }
    }

    if (full) {
        float4 *pp = reinterpret_cast<float4 *>(d.p + e0);
        pp[0] = make_float4(p[0], p[1], p[2], p[3]);
        pp[1] = make_float4(p[4], p[5], p[6], p[7]);
        if (d.copy) {
            uint32_t h[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const __nv_bfloat162 b2 = __floats2bfloat162_rn(p[2 * j], p[2 * j + 1]); /* .x = p[2j], low half */
                h[j] = (uint32_t)__bfloat16_as_ushort(b2.x) | ((uint32_t)__bfloat16_as_ushort(b2.y) << 16);
            }
            *reinterpret_cast<uint4 *>(d.copy + e0) = make_uint4(h[0], h[1], h[2], h[3]);
        }
    } else {
#pragma unroll
        for (int j = 0; j < kPerLane; j++)
            if (valid[j]) {
                d.p[e0 + j] = p[j];
                if (d.copy) d.copy[e0 + j] = __float2bfloat16_rn(p[j]);
            }
    }
}

}  // namespace

struct gpu_adamw8bit {
    tensor_desc *d_descs;
    chunk_ref *d_chunks;
    float *d_maps;
    int n_chunks;
};

extern "C" struct gpu_adamw8bit *build_gpu_adamw8bit(const struct gpu_adamw8bit_param *params, int count,
                                                     int min_8bit_size, const float map1[256], const float map2[256]) {
    CHECK(count >= 1, "adamw8bit: %d tensors", count);
    CHECK(map1 && map2, "adamw8bit: the two 256-entry maps are required");
    std::vector<chunk_ref> chunks;
    std::vector<tensor_desc> descs(count);
    for (int t = 0; t < count; t++) {
        const gpu_adamw8bit_param &q = params[t];
        const int is8 = q.n >= min_8bit_size;
        CHECK(q.n >= 1 && q.master && q.grad, "adamw8bit tensor %d: n=%lld or a NULL buffer", t, (long long)q.n);
        CHECK(is8 ? (q.state1 && q.state2 && q.absmax1 && q.absmax2) : (q.m && q.v),
              "adamw8bit tensor %d (n=%lld): the %s state buffers are required", t, (long long)q.n,
              is8 ? "8-bit" : "32-bit");
        const bool al = ((uintptr_t)q.master | (uintptr_t)q.grad | (uintptr_t)q.copy) % 16 == 0 &&
                        ((uintptr_t)q.state1 | (uintptr_t)q.state2) % 8 == 0;
        descs[t] = tensor_desc{q.master,    reinterpret_cast<__nv_bfloat16 *>(q.copy), q.grad, q.n, q.state1, q.state2,
                               q.absmax1,   q.absmax2,
                               q.m,         q.v,
                               is8,         al ? 1 : 0};
        for (int64_t s = 0; s < q.n; s += kChunk) chunks.push_back(chunk_ref{t, 0, s});
    }
    CHECK(chunks.size() < (size_t)INT32_MAX, "adamw8bit: too many chunks");
    struct gpu_adamw8bit *a = static_cast<struct gpu_adamw8bit *>(calloc(1, sizeof(struct gpu_adamw8bit)));
    CHECK(a != nullptr, "out of host memory");
    a->n_chunks = (int)chunks.size();
    float maps[512];
    for (int i = 0; i < 256; i++) maps[i] = map1[i], maps[256 + i] = map2[i];
    CUDA_CHECK(cudaMalloc(&a->d_descs, sizeof(tensor_desc) * count));
    CUDA_CHECK(cudaMalloc(&a->d_chunks, sizeof(chunk_ref) * chunks.size()));
    CUDA_CHECK(cudaMalloc(&a->d_maps, sizeof maps));
    CUDA_CHECK(cudaMemcpy(a->d_descs, descs.data(), sizeof(tensor_desc) * count, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(a->d_chunks, chunks.data(), sizeof(chunk_ref) * chunks.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(a->d_maps, maps, sizeof maps, cudaMemcpyHostToDevice));
    return a;
}

extern "C" void free_gpu_adamw8bit(struct gpu_adamw8bit *a) {
    if (!a) return;
    CUDA_CHECK(cudaFree(a->d_descs));
    CUDA_CHECK(cudaFree(a->d_chunks));
    CUDA_CHECK(cudaFree(a->d_maps));
    free(a);
}

/* The scalars as ref/adamw8bit.c's step8_cuda forms them (fp32, host powf/sqrtf). Each step is a
 * separate statement on a volatile so that no host compiler fuses or widens it. */
static step_scalars make_scalars(const struct gpu_adamw8bit_step_args *h) {
    const float b1 = (float)h->beta1, b2 = (float)h->beta2, lr = (float)h->lr, eps = (float)h->eps;
    const float wd = (float)h->weight_decay;
    volatile float t;
    step_scalars s;
    t = powf(b1, (float)h->step);
    const float c1 = 1.0f - t;
    t = powf(b2, (float)h->step);
    t = 1.0f - t;
    const float c2 = sqrtf(t);
    t = -lr * c2;
    s.step_size = t / c1;
    t = c2 * eps;
    s.c2_eps = t;
    t = lr * wd;
    s.decay = 1.0f - t;
    s.decay_on = wd > 0.0f;
    s.beta1 = b1, s.beta2 = b2;
    s.one_minus_beta1 = 1.0f - b1, s.one_minus_beta2 = 1.0f - b2;
    s.gnorm_scale = (float)h->gnorm_scale;
    return s;
}

extern "C" void gpu_adamw8bit_step(struct gpu_adamw8bit *a, const struct gpu_adamw8bit_step_args *h,
                                   cudaStream_t stream) {
    CHECK(h->step >= 1, "adamw8bit step %lld must be >= 1", (long long)h->step);
    CHECK(h->beta1 >= 0 && h->beta1 < 1 && h->beta2 >= 0 && h->beta2 < 1 && h->eps > 0 && h->lr >= 0,
          "adamw8bit hyperparameters out of range: lr=%g beta1=%g beta2=%g eps=%g", h->lr, h->beta1, h->beta2, h->eps);
    const step_scalars s = make_scalars(h);
    adamw8bit_chunk_update<<<a->n_chunks, kBlock, 0, stream>>>(a->d_descs, a->d_chunks, a->d_maps, s);
    KERNEL_CHECK(stream);
}
