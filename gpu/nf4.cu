/* nf4.cu — NF4 dequantization into bf16 (gpu/nf4.h).
 *
 * Strategy: memory-bound (0.5 byte of codes in, 2 bytes of bf16 out per element, plus 1/64 byte
 * of absmax codes at blocksize 64). One warp owns a tile of 1024 elements (gpu/nf4_layout.h): each
 * lane loads four 4-byte code words (steps 0..3, each warp load 128 consecutive bytes), decodes
 * the absmax of at most one block (the block tile_first + lane: 16 lanes for blocksize 64, all 32
 * for 32, lane 0 for blocksize ≥ 1024), hands it to the chunks by warp shuffles, and writes four
 * 16-byte stores (each warp store 512 consecutive bytes). The NF4 table (16) and, when nested, the
 * 256-entry second-level map sit in shared memory; the code words and the absmax statistics are
 * loaded before the tables are staged, so the barrier overlaps their latency. One tile per warp,
 * eight warps a block, no grid-stride loop; the ragged last tile's partial chunk is written
 * element by element in the same kernel. Pointers not aligned for vectors (out 16 bytes, codes
 * 4 bytes) take a scalar kernel with the same arithmetic.
 *
 * Bit-exactness: the products and the nested add use __fmul_rn / __fadd_rn so that nvcc cannot
 * contract them into an FMA (bitsandbytes rounds the product and the add separately), and the
 * final conversion is __float2bfloat16_rn (RNE, as torch's .to(bfloat16)).
 *
 * Performance notes (H100 80GB HBM3, copy ceiling 3.0 TB/s; bytes counted n/2 + n/64 + 2n):
 *   before (16 elements a thread: one 8-byte load, two 16-byte stores at a 32-byte lane stride, the
 *   absmax decoded by every thread with a 64-bit division, a grid-stride loop over 2112 blocks):
 *   8192×2048 23.8 µs = 58.9% of copy, 14336×4096 74.3 µs = 66.0%. The causes as counted (not
 *   profiled): each warp store wrote half of 32 sectors (lane stride 32 bytes, 16 bytes each), so
 *   the 2 bytes/element of output reached L2 as twice the write requests of a coalesced store,
 *   and ~40 of the ~120 instructions per 16 elements were the absmax (byte and float loads, the
 *   64-bit division, a shared lookup) repeated by the 4 threads of a block.
 *   This layout: every store instruction writes whole sectors, the absmax is decoded once per
 *   block (per tile for blocks over 1024) with a 32-bit division, 16 bytes of codes in flight per
 *   thread before the barrier; 32 registers, so 2048 threads an SM.
 *   Predicted ≥ 85% of copy at 14336×4096 and ≥ 80% at 8192×2048 (42 MB a call: the launch ramp
 *   and the drain are ~10% of its 14 µs).
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:nf4_parity
 *                     (binary) nf4_parity --bench   (% of the copy ceiling for the bytes counted)
 */
#include "gpu/nf4.h"

#include <cuda_bf16.h>

#include "gpu/cuda_check.h"
#include "gpu/fp8_codes.cuh"
#include "gpu/nf4_layout.h"
#include "gpu/vec.cuh"
#include "io/check.h"

namespace {

using namespace refine::nf4;

constexpr int kWarps = 8;
constexpr int kBlock = kWarps * kLanes;

struct nf4_params {
    const uint8_t *codes;
    const uint8_t *absmax_q;
    const float *absmax_f32;
    const float *nested_absmax;
    const float *nested_code;
    const float *quant_map;
    float nested_offset;
    int64_t n;
    int64_t n_blocks;
    int block_shift; /* log2(blocksize) */
    uint32_t nested_blocksize;
    int64_t cols, pad; /* bf16 out: rows of cols elements at stride cols + pad (pad 0: contiguous) */
};

/* Where element k of the (n / cols, cols) result goes: its row's stride is cols + pad (a 32-bit
 * division where n allows: the models' weights). */
__device__ __forceinline__ int64_t out_index(const nf4_params &p, int64_t k) {
    if (p.pad == 0) return k;
    const int64_t row = p.n <= (int64_t)UINT32_MAX ? (int64_t)((uint32_t)k / (uint32_t)p.cols) : k / p.cols;
    return k + row * p.pad;
}

__device__ __forceinline__ float block_absmax(const nf4_params &p, const float *s_code2, int64_t blk) {
    if (p.absmax_q == nullptr) return p.absmax_f32[blk];
    const float a = __fmul_rn(s_code2[p.absmax_q[blk]], p.nested_absmax[(uint32_t)blk / p.nested_blocksize]);
    return __fadd_rn(a, p.nested_offset);
}

__device__ __forceinline__ void load_tables(const nf4_params &p, float *s_lut, float *s_code2) {
    if (threadIdx.x < 16) s_lut[threadIdx.x] = p.quant_map[threadIdx.x];
    if (p.absmax_q != nullptr)
        for (int i = threadIdx.x; i < 256; i += blockDim.x) s_code2[i] = p.nested_code[i];
    __syncthreads();
}

/* The E4M3 codes of two dequantized values as gpu/fp8.h casts their bf16 roundings (fp8_cvt2). */
__device__ __forceinline__ uint32_t e4m3_pair(float first, float second, float scale) {
    return fp8_cvt2(refine::bf16_round_dev(first), refine::bf16_round_dev(second), scale, __NV_E4M3);
}

/* The tile of warp blockIdx.x·8 + warp (gpu/nf4_layout.h). out 16-byte (bf16) or 8-byte (E4M3:
 * scale non-NULL, out the codes) and codes 4-byte aligned. */
template <bool kNested, bool kE4M3>
__global__ void __launch_bounds__(kBlock) nf4_dequant_warp_tile(void *__restrict__ out_v, nf4_params p,
                                                                const float *__restrict__ scale_p) {
    __nv_bfloat16 *out = static_cast<__nv_bfloat16 *>(out_v);
    uint8_t *out8 = static_cast<uint8_t *>(out_v);
    __shared__ float s_lut[16];
    __shared__ float s_code2[256];
    const int lane = threadIdx.x % kLanes;
    const int64_t tile = (int64_t)blockIdx.x * kWarps + threadIdx.x / kLanes;
    const bool live = tile < n_tiles(p.n); /* uniform across the warp */
    const int shift = p.block_shift;

    /* 1. this lane's code words and its block's statistics, issued before the barrier */
    const uint32_t *words = reinterpret_cast<const uint32_t *>(p.codes);
    uint32_t w[kSteps];
#pragma unroll
    for (int s = 0; s < kSteps; s++) {
        const int64_t e = chunk_first(tile, lane, s);
        w[s] = live && e + kChunk <= p.n ? __ldg(words + e / kChunk) : 0u;
    }
    const int64_t blk = tile_first_block(tile, shift) + lane;
    const bool holds = live && lane_holds_block(tile, lane, shift, p.n_blocks);
    uint32_t q = 0;
    float a2 = 0.0f, am = 0.0f;
    if (holds) {
        if (kNested) {
            q = __ldg(p.absmax_q + blk);
            a2 = __ldg(p.nested_absmax + (uint32_t)blk / p.nested_blocksize);
        } else {
            am = __ldg(p.absmax_f32 + blk);
        }
    }
    if (threadIdx.x < 16) s_lut[threadIdx.x] = p.quant_map[threadIdx.x];
    static_assert(kBlock == 256, "one entry of the 256-entry map per thread");
    if (kNested) s_code2[threadIdx.x] = p.nested_code[threadIdx.x];
    __syncthreads();
    if (!live) return;
    if (kNested) am = __fadd_rn(__fmul_rn(s_code2[q], a2), p.nested_offset);
    const float scale = kE4M3 ? __ldg(scale_p) : 1.0f;

    /* 2. each chunk: its block's absmax from the lane that holds it, 8 products, one store */
#pragma unroll
    for (int s = 0; s < kSteps; s++) {
        const float a = __shfl_sync(0xFFFFFFFFu, am, absmax_lane(lane, s, shift));
        const int64_t e = chunk_first(tile, lane, s);
        if (e + kChunk <= p.n && kE4M3) {
            uint2 o = {0u, 0u};
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const uint32_t byte = (w[s] >> (8 * b)) & 0xFFu;
                const uint32_t pair = e4m3_pair(__fmul_rn(s_lut[byte >> 4], a), __fmul_rn(s_lut[byte & 15u], a), scale);
                if (b < 2) o.x |= pair << (16 * b);
                else o.y |= pair << (16 * (b - 2));
            }
            reinterpret_cast<uint2 *>(out8)[e / kChunk] = o;
        } else if (e + kChunk <= p.n) {
            uint4 o;
            __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&o);
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const uint32_t byte = (w[s] >> (8 * b)) & 0xFFu;   /* little endian: byte b = elements 2b, 2b+1 */
                const float hi = __fmul_rn(s_lut[byte >> 4], a);   /* element 2b: the high nibble */
                const float lo = __fmul_rn(s_lut[byte & 15u], a);  /* element 2b + 1 */
                h[b] = __floats2bfloat162_rn(hi, lo);
            }
            *reinterpret_cast<uint4 *>(out + out_index(p, e)) = o; /* cols % 8 == 0: within one row */
        } else {
#pragma unroll 1
            for (int64_t k = e; k < p.n; k++) { /* the ragged end: fewer than 8 elements */
                const uint32_t byte = p.codes[k >> 1];
                const uint32_t code = (k & 1) ? (byte & 15u) : (byte >> 4);
                if (kE4M3) out8[k] = (uint8_t)e4m3_pair(__fmul_rn(s_lut[code], a), 0.0f, scale);
                else out[out_index(p, k)] = __float2bfloat16_rn(__fmul_rn(s_lut[code], a));
            }
        }
    }
}

template <bool kE4M3>
__global__ void __launch_bounds__(kBlock) nf4_dequant_scalar(void *__restrict__ out_v, nf4_params p,
                                                             const float *__restrict__ scale_p) {
    __shared__ float s_lut[16];
    __shared__ float s_code2[256];
    load_tables(p, s_lut, s_code2);
    const float scale = kE4M3 ? __ldg(scale_p) : 1.0f;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < p.n; k += (int64_t)gridDim.x * blockDim.x) {
        const uint32_t byte = p.codes[k >> 1];
        const uint32_t code = (k & 1) ? (byte & 15u) : (byte >> 4);
        const float x = __fmul_rn(s_lut[code], block_absmax(p, s_code2, k >> p.block_shift));
        if (kE4M3) static_cast<uint8_t *>(out_v)[k] = (uint8_t)e4m3_pair(x, 0.0f, scale);
        else static_cast<__nv_bfloat16 *>(out_v)[out_index(p, k)] = __float2bfloat16_rn(x);
    }
}

/* Both outputs: bf16 values (scale NULL) — rows of cols at stride ld (cols = ld = n: contiguous) — or
 * E4M3 codes of those values times *scale (contiguous). */
void dequantize(void *out, const struct gpu_nf4_tensor *t, const float *scale, int64_t cols, int64_t ld,
                cudaStream_t stream) {
    CHECK(t->n >= 1, "nf4 n=%lld must be >= 1", (long long)t->n);
    CHECK(cols >= 1 && t->n % cols == 0 && ld >= cols, "nf4: rows of %lld at stride %lld for n=%lld", (long long)cols,
          (long long)ld, (long long)t->n);
    CHECK(t->blocksize >= 32 && t->blocksize <= 4096 && (t->blocksize & (t->blocksize - 1)) == 0,
          "nf4 blocksize %d must be a power of two in [32, 4096]", t->blocksize);
    const bool nested = t->absmax_q != nullptr;
    CHECK(nested ? (t->nested_absmax && t->nested_code && t->nested_blocksize >= 1) : t->absmax_f32 != nullptr,
          "nf4: %s statistics missing", nested ? "nested" : "fp32 absmax");
    CHECK(t->codes && t->quant_map && out, "nf4: NULL pointer");
    nf4_params p;
    p.codes = t->codes, p.absmax_q = t->absmax_q, p.absmax_f32 = t->absmax_f32;
    p.nested_absmax = t->nested_absmax, p.nested_code = t->nested_code, p.quant_map = t->quant_map;
    p.nested_offset = t->nested_offset, p.n = t->n, p.nested_blocksize = nested ? (uint32_t)t->nested_blocksize : 1u;
    p.cols = cols, p.pad = ld - cols;
    p.block_shift = 0;
    while ((1 << p.block_shift) < t->blocksize) p.block_shift++;
    p.n_blocks = (t->n + t->blocksize - 1) / t->blocksize;
    /* block indices are 32-bit in the nested division, grid.x counts blocks of 8 tiles */
    CHECK(p.n_blocks <= (int64_t)UINT32_MAX && n_tiles(t->n) / kWarps < INT32_MAX, "nf4 n=%lld is too large",
          (long long)t->n);

    const bool e4m3 = scale != nullptr;
    /* 16-byte stores of 8 elements stay within a row when rows are multiples of 8 long and apart */
    const bool rows_vec = p.pad == 0 || (cols % 8 == 0 && ld % 8 == 0);
    if ((uintptr_t)out % (e4m3 ? 8 : 16) == 0 && (uintptr_t)t->codes % 4 == 0 && rows_vec) {
        const int grid = (int)((n_tiles(t->n) + kWarps - 1) / kWarps);
        if (nested && e4m3) nf4_dequant_warp_tile<true, true><<<grid, kBlock, 0, stream>>>(out, p, scale);
        else if (nested) nf4_dequant_warp_tile<true, false><<<grid, kBlock, 0, stream>>>(out, p, scale);
        else if (e4m3) nf4_dequant_warp_tile<false, true><<<grid, kBlock, 0, stream>>>(out, p, scale);
        else nf4_dequant_warp_tile<false, false><<<grid, kBlock, 0, stream>>>(out, p, scale);
    } else {
        const int64_t blocks = (t->n + kBlock - 1) / kBlock;
        const int grid = (int)(blocks < 132 * 16 ? blocks : 132 * 16);
        if (e4m3) nf4_dequant_scalar<true><<<grid, kBlock, 0, stream>>>(out, p, scale);
        else nf4_dequant_scalar<false><<<grid, kBlock, 0, stream>>>(out, p, scale);
    }
    KERNEL_CHECK(stream);
}

}  // namespace

extern "C" void gpu_nf4_dequantize_bf16(uint16_t *out, const struct gpu_nf4_tensor *t, cudaStream_t stream) {
    dequantize(out, t, nullptr, t->n, t->n, stream);
}

extern "C" void gpu_nf4_dequantize_rows_bf16(uint16_t *out, int64_t cols, int64_t ld, const struct gpu_nf4_tensor *t,
                                             cudaStream_t stream) {
    dequantize(out, t, nullptr, cols, ld, stream);
}

extern "C" void gpu_nf4_dequantize_e4m3(uint8_t *out, const struct gpu_nf4_tensor *t, const float *scale,
                                        cudaStream_t stream) {
    CHECK(scale != nullptr, "nf4 → E4M3: the per-tensor scale is required");
    dequantize(out, t, scale, t->n, t->n, stream);
}
