/* nf4.cu — NF4 dequantization into bf16 (gpu/nf4.h).
 *
 * Strategy: memory-bound (0.5 byte read, 2 bytes written per element). Each thread of the fast
 * kernel owns 16 consecutive elements: one 8-byte load of packed codes, its block's absmax
 * (16 elements never straddle a block, since blocksize ≥ 32 is a power of two and 16 divides it),
 * sixteen fp32 products and two 16-byte stores. The NF4 table (16) and, when nested, the 256-entry
 * second-level map sit in shared memory; the absmax of a block is recomputed by each of its
 * threads (4 for blocksize 64) — one byte and one float load that hit in L1/L2. A grid-stride
 * loop covers any n; the elements after the last multiple of 16 (and every element when the
 * pointers are not aligned for vectors) take a scalar kernel with the same arithmetic.
 *
 * Bit-exactness: the products and the nested add use __fmul_rn / __fadd_rn so that nvcc cannot
 * contract them into an FMA (bitsandbytes rounds the product and the add separately), and the
 * final conversion is __float2bfloat16_rn (RNE, as torch's .to(bfloat16)).
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:nf4_parity
 *                     (binary) nf4_parity --bench   (% of the copy ceiling for 2.5 bytes/element)
 */
#include "gpu/nf4.h"

#include <cuda_bf16.h>

#include "gpu/cuda_check.h"
#include "io/check.h"

namespace {

constexpr int kBlock = 256;

struct nf4_params {
    const uint8_t *codes;
    const uint8_t *absmax_q;
    const float *absmax_f32;
    const float *nested_absmax;
    const float *nested_code;
    const float *quant_map;
    float nested_offset;
    int64_t n;
    int block_shift; /* log2(blocksize) */
    int nested_blocksize;
};

__device__ __forceinline__ float block_absmax(const nf4_params &p, const float *s_code2, int64_t blk) {
    if (p.absmax_q == nullptr) return p.absmax_f32[blk];
    const float a = __fmul_rn(s_code2[p.absmax_q[blk]], p.nested_absmax[blk / p.nested_blocksize]);
    return __fadd_rn(a, p.nested_offset);
}

__device__ __forceinline__ void load_tables(const nf4_params &p, float *s_lut, float *s_code2) {
    if (threadIdx.x < 16) s_lut[threadIdx.x] = p.quant_map[threadIdx.x];
    if (p.absmax_q != nullptr)
        for (int i = threadIdx.x; i < 256; i += blockDim.x) s_code2[i] = p.nested_code[i];
    __syncthreads();
}

__global__ void __launch_bounds__(kBlock) nf4_dequant_16_per_thread(__nv_bfloat16 *__restrict__ out, nf4_params p,
                                                                    int64_t n_groups) {
    __shared__ float s_lut[16];
    __shared__ float s_code2[256];
    load_tables(p, s_lut, s_code2);
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < n_groups; g += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e0 = g * 16;
        const float am = block_absmax(p, s_code2, e0 >> p.block_shift);
        const uint2 raw = *reinterpret_cast<const uint2 *>(p.codes + g * 8);
        const uint32_t words[2] = {raw.x, raw.y};
        uint4 o[2];
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(o);
#pragma unroll
        for (int b = 0; b < 8; b++) {
            const uint32_t byte = (words[b / 4] >> (8 * (b % 4))) & 0xFFu; /* little endian: byte b */
            const float hi = __fmul_rn(s_lut[byte >> 4], am);              /* element 2b */
            const float lo = __fmul_rn(s_lut[byte & 15u], am);             /* element 2b + 1 */
            h[b] = __floats2bfloat162_rn(hi, lo);
        }
        uint4 *dst = reinterpret_cast<uint4 *>(out + e0);
        dst[0] = o[0];
        dst[1] = o[1];
    }
}

__global__ void __launch_bounds__(kBlock) nf4_dequant_scalar(__nv_bfloat16 *__restrict__ out, nf4_params p,
                                                             int64_t first) {
    __shared__ float s_lut[16];
    __shared__ float s_code2[256];
    load_tables(p, s_lut, s_code2);
    for (int64_t k = first + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < p.n;
         k += (int64_t)gridDim.x * blockDim.x) {
        const uint32_t byte = p.codes[k >> 1];
        const uint32_t code = (k & 1) ? (byte & 15u) : (byte >> 4);
        out[k] = __float2bfloat16_rn(__fmul_rn(s_lut[code], block_absmax(p, s_code2, k >> p.block_shift)));
    }
}

int grid_for(int64_t items) {
    const int64_t blocks = (items + kBlock - 1) / kBlock;
    return (int)(blocks < 132 * 16 ? (blocks > 0 ? blocks : 1) : 132 * 16);
}

}  // namespace

extern "C" void gpu_nf4_dequantize_bf16(uint16_t *out, const struct gpu_nf4_tensor *t, cudaStream_t stream) {
    CHECK(t->n >= 1, "nf4 n=%lld must be >= 1", (long long)t->n);
    CHECK(t->blocksize >= 32 && t->blocksize <= 4096 && (t->blocksize & (t->blocksize - 1)) == 0,
          "nf4 blocksize %d must be a power of two in [32, 4096]", t->blocksize);
    const bool nested = t->absmax_q != nullptr;
    CHECK(nested ? (t->nested_absmax && t->nested_code && t->nested_blocksize >= 1) : t->absmax_f32 != nullptr,
          "nf4: %s statistics missing", nested ? "nested" : "fp32 absmax");
    CHECK(t->codes && t->quant_map && out, "nf4: NULL pointer");
    nf4_params p;
    p.codes = t->codes, p.absmax_q = t->absmax_q, p.absmax_f32 = t->absmax_f32;
    p.nested_absmax = t->nested_absmax, p.nested_code = t->nested_code, p.quant_map = t->quant_map;
    p.nested_offset = t->nested_offset, p.n = t->n, p.nested_blocksize = nested ? t->nested_blocksize : 1;
    p.block_shift = 0;
    while ((1 << p.block_shift) < t->blocksize) p.block_shift++;

    __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(out);
    const bool aligned = ((uintptr_t)out % 16 == 0) && ((uintptr_t)t->codes % 8 == 0);
    const int64_t groups = aligned ? t->n / 16 : 0;
    if (groups > 0) {
        nf4_dequant_16_per_thread<<<grid_for(groups), kBlock, 0, stream>>>(o, p, groups);
        KERNEL_CHECK(stream);
    }
    const int64_t first = groups * 16;
    if (first < t->n) {
        nf4_dequant_scalar<<<grid_for(t->n - first), kBlock, 0, stream>>>(o, p, first);
        KERNEL_CHECK(stream);
    }
}
