/* dropout.cu — inverted dropout (gpu/dropout.h).
 *
 * Strategy: one thread per group of 4 consecutive elements — exactly one Philox4x32-10 call, whose
 * four words are the four lanes' draws (ref/dropout.h's layout) — with an 8-byte load and store of
 * the 4 bf16 values when the pointers are 8-byte aligned, a scalar tail for the last partial group.
 * Grid-stride over groups. Memory-bound (2 bytes read, 2 written per element); the 10 Philox rounds
 * (20 32-bit multiplies per 4 elements) stay far below the arithmetic rate.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:dropout_parity
 *                     (binary) dropout_parity --bench
 */
#include "gpu/dropout.h"

#include "gpu/cuda_check.h"
#include "gpu/philox.cuh"
#include "gpu/vec.cuh"
#include "io/check.h"

namespace refine {
namespace {

constexpr int kBlock = 256;

template <bool kVec>
__global__ void __launch_bounds__(kBlock) dropout_groups_of_4(bf16 *out, const bf16 *x, int64_t n, float p, float scale,
                                                              uint64_t seed, uint64_t offset, uint64_t g0) {
    const int64_t groups = (n + 3) / 4;
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        bool keep[4];
        dropout_keep4(keep, seed, offset, g0 + (uint64_t)g, p);
        const int64_t e0 = 4 * g;
        if (kVec && e0 + 4 <= n) {
            uint2 raw = *reinterpret_cast<const uint2 *>(x + e0);
            __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&raw);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const float2 f = __bfloat1622float2(h[j]);
                h[j] = __floats2bfloat162_rn(keep[2 * j] ? __fmul_rn(f.x, scale) : 0.0f,
                                             keep[2 * j + 1] ? __fmul_rn(f.y, scale) : 0.0f);
            }
            *reinterpret_cast<uint2 *>(out + e0) = raw;
        } else {
            for (int l = 0; l < 4 && e0 + l < n; l++) {
                const float v = __bfloat162float(x[e0 + l]);
                out[e0 + l] = __float2bfloat16_rn(keep[l] ? __fmul_rn(v, scale) : 0.0f);
            }
        }
    }
}

/* keep[e] = 1 when element e is kept (the mask gpu/lora.h's backward takes), 4 per thread. */
__global__ void __launch_bounds__(kBlock) dropout_mask_groups_of_4(uint8_t *keep, int64_t n, float p, uint64_t seed,
                                                                   uint64_t offset, uint64_t g0) {
    const int64_t groups = (n + 3) / 4;
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        bool k[4];
        dropout_keep4(k, seed, offset, g0 + (uint64_t)g, p);
        const int64_t e0 = 4 * g;
        for (int l = 0; l < 4 && e0 + l < n; l++) keep[e0 + l] = k[l] ? 1 : 0;
    }
}

int grid_of(int64_t n) {
    const int64_t b = ((n + 3) / 4 + kBlock - 1) / kBlock;
    return (int)(b < 4096 ? b : 4096);
}

void dropout_launch(uint16_t *out, const uint16_t *x, int64_t n, float p, uint64_t seed, uint64_t offset,
                    int64_t first, cudaStream_t stream) {
    CHECK(n >= 0 && p >= 0.0f && p < 1.0f, "dropout n=%lld p=%g: need n >= 0 and 0 <= p < 1", (long long)n, (double)p);
    CHECK(first >= 0 && first % 4 == 0, "dropout: first element %lld must be a multiple of 4", (long long)first);
    const uint64_t g0 = (uint64_t)first / 4;
    if (n == 0) return;
    const float scale = (float)(1.0 / (1.0 - (double)p));
    const int blocks = grid_of(n);
    bf16 *o = reinterpret_cast<bf16 *>(out);
    const bf16 *xi = reinterpret_cast<const bf16 *>(x);
    if ((((uintptr_t)out | (uintptr_t)x) & 7u) == 0)
        dropout_groups_of_4<true><<<blocks, kBlock, 0, stream>>>(o, xi, n, p, scale, seed, offset, g0);
    else
        dropout_groups_of_4<false><<<blocks, kBlock, 0, stream>>>(o, xi, n, p, scale, seed, offset, g0);
    KERNEL_CHECK(stream);
}

}  // namespace
}  // namespace refine

extern "C" void gpu_dropout_forward_bf16(uint16_t *out, const uint16_t *x, int64_t n, float p, uint64_t seed,
                                         uint64_t offset, cudaStream_t stream) {
    refine::dropout_launch(out, x, n, p, seed, offset, 0, stream);
}

extern "C" void gpu_dropout_forward_at_bf16(uint16_t *out, const uint16_t *x, int64_t n, float p, uint64_t seed,
                                            uint64_t offset, int64_t first, cudaStream_t stream) {
    refine::dropout_launch(out, x, n, p, seed, offset, first, stream);
}

extern "C" void gpu_dropout_backward_bf16(uint16_t *dx, const uint16_t *dy, int64_t n, float p, uint64_t seed,
                                          uint64_t offset, cudaStream_t stream) {
    refine::dropout_launch(dx, dy, n, p, seed, offset, 0, stream);
}

extern "C" void gpu_dropout_mask_at_u8(uint8_t *keep, int64_t n, float p, uint64_t seed, uint64_t offset,
                                       int64_t first, cudaStream_t stream) {
    CHECK(n >= 0 && p >= 0.0f && p < 1.0f, "dropout mask n=%lld p=%g: need n >= 0 and 0 <= p < 1", (long long)n,
          (double)p);
    CHECK(first >= 0 && first % 4 == 0, "dropout mask: first element %lld must be a multiple of 4", (long long)first);
    if (n == 0) return;
    refine::dropout_mask_groups_of_4<<<refine::grid_of(n), refine::kBlock, 0, stream>>>(keep, n, p, seed, offset,
                                                                                         (uint64_t)first / 4);
    KERNEL_CHECK(stream);
}

extern "C" void gpu_dropout_mask_u8(uint8_t *keep, int64_t n, float p, uint64_t seed, uint64_t offset,
                                    cudaStream_t stream) {
    gpu_dropout_mask_at_u8(keep, n, p, seed, offset, 0, stream);
}
