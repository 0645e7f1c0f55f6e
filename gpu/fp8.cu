/* fp8.cu — FP8 amax, scaling recipes, cast + transpose, block quantization, and SwiGLU cast in the same pass (gpu/fp8.h).
 *
 * Strategy: every cast is one pass over a tile of TR rows × 128 columns of x per thread block
 * (2·TR threads; TR = 128, or 64 / 32 for per-tensor casts and 1×128 without the transposed copy
 * when the grid would give a 132-SM device fewer than 4 tiles per SM — small weights):
 *   1. load: each thread brings 8 items of 8 bf16 (16-byte loads; 16 lanes read one 256-byte row,
 *      all 8 loads in flight before any use), notes each item's max|x| and any non-finite input;
 *   2. rows, from registers: the item's 8 codes, one 8-byte store (16 lanes: a 128-byte row of
 *      q); the 1×128 block's amax is a 4-step shuffle over the row's 16 lanes, the 128×128 tile's a
 *      block reduction first. With a transposed copy the codes (per-tensor, 128×128) or the bf16
 *      values (1×128) also go to shared memory, XOR-swizzled by 16-row group (no bank conflicts);
 *   3. transposed copy: a thread owns 4 columns × 16 rows; per-tensor and 128×128 read the codes
 *      back as 16 words and transpose them with byte permutes (each code converted once), 1×128
 *      reads the values (16 8-byte loads), reduces its columns' amax over the tile's 128 rows by
 *      shuffles and converts again; each column's 16 codes leave in one 16-byte store, and TR/16
 *      lanes write one q_t row's TR contiguous bytes;
 *   4. statistics: saturations are counted only in items (or 1×128 columns) whose max saturates
 *      (fl(|x|·scale) is monotone in |x|), summed per warp and added with one atomic per warp when
 *      not zero; flags likewise (OR); the amax with one atomicMax per block (on the float's bits).
 * The tile is 128 wide because that is the length of a 1×128 block and the side of a 128×128 one,
 * so no block ever spans two thread blocks. Bytes per element: 2 read, 1 written (+1 for q_t):
 * memory-bound; the bench compares with the device's copy rate.
 * Why the previous version (one 128×128 bf16 tile, rows and columns both converted out of shared
 * memory) reached only 67–77% with the transposed copy: every code was converted twice, the
 * column pass read shared memory two bytes at a time (and 1×128 walked it twice more for the
 * column maxima), a warp's transposed store touched 32 rows with 16 bytes each, saturations were
 * counted element by element in both passes, statistics took three block reductions, and small
 * shapes left SMs idle (512 × 2048: 64 tiles for 132 SMs).
 * Predictions for this version (H100, % of the copy rate, fp8_parity --bench; to be replaced by
 * the measurement): delayed cast 85–90 (q only) and 85–90 (q + q_t), current amax + cast +
 * transpose 85–88, 1×128 85–90 and 80–86 with q_t (the least certain: two conversions and a
 * division per column remain), 128×128 with q_t 83–88; worst_cast_pct_of_copy ≥ 80. The small
 * weights (512 × 2048: a few µs) stay launch-bound.
 * amax alone is a grid-stride reduction (16-byte loads, warp shuffles, one atomic per block); the
 * delayed update is one thread block per tensor (read the window into registers, reduce, write it
 * rotated).
 *
 * Bit-exactness with ref/fp8: products x·scale are __fmul_rn (no contraction), scales __fdiv_rn
 * (IEEE division, what the C reference's `/` is), codes from __nv_cvt_float2_to_fp8x2 with
 * __NV_SATFINITE (cvt.rn.satfinite on sm_89+: settled against ref/fp8 on the H100, NaN payloads
 * aside: the device writes 0x7F for every NaN); max with fmaxf, which ignores NaN as the reference
 * does. Shapes that are not multiples of 16 (or misaligned pointers) run the same kernel with
 * element-wise loads and stores.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:fp8_parity
 *                     (binary) fp8_parity --bench   (GB/s and % of the copy ceiling)
 */
#include "gpu/fp8.h"

#include <float.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "gpu/cuda_check.h"
#include "gpu/fp8_codes.cuh"
#include "gpu/swiglu.cuh"
#include "io/check.h"

namespace {

constexpr int kTile = 128;
constexpr int kThreads = 256;

enum tile_mode { MODE_TENSOR_DELAYED = 0, MODE_TENSOR_CURRENT = 1, MODE_BLOCK_1X128 = 2, MODE_BLOCK_128X128 = 3 };

struct tile_params {
    const uint16_t *x;
    uint8_t *q, *q_t;
    float *s_inv, *s_inv_t; /* block modes */
    int64_t rows, cols;
    int64_t s_ld, s_ld_t; /* 128X128 scale leading dimensions */
    __nv_fp8_interpretation_t fmt;
    float fp8_max;
    /* per-tensor */
    const float *scale_in;               /* delayed */
    const float *amax_in;                /* current */
    float *scale_out, *scale_inv_out;    /* current */
    float amax_eps;
    int power_2;
    float *amax_rec; /* delayed: history slot 0; block modes: the whole tensor's amax (optional) */
    unsigned *flags;
    unsigned long long *saturated;
};

__device__ __forceinline__ float bf16_bits_to_float(uint32_t h) { return __uint_as_float(h << 16); }

/* ref/fp8.c's fp8_current_scale. */
__device__ __forceinline__ float current_scale(float amax, float fp8_max, float eps, int power_2) {
    if (amax < eps) amax = eps;
    if (isinf(amax) || isnan(amax) || amax == 0.0f) return 1.0f;
    float scale = __fdiv_rn(fp8_max, amax);
    if (isinf(scale)) scale = FLT_MAX;
    if (power_2) scale = __uint_as_float(__float_as_uint(scale) & 0xFF800000u);
    return scale;
}

/* ref/fp8.c's fp8_saturates (v = x·scale). */
__device__ __forceinline__ int saturates(float v, __nv_fp8_interpretation_t fmt) {
    const float a = fabsf(v);
    return fmt == __NV_E4M3 ? a > 464.0f : a >= 61440.0f; /* false for NaN */
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Max over the block (NT threads) of non-negative values; every thread gets it. red: NT/32 floats. */
template <int NT = kThreads>
__device__ float block_max(float v, float *red) {
    v = warp_max(v);
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads(); /* red may still be read from a previous call */
    if (lane == 0) red[w] = v;
    __syncthreads();
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < NT / 32; i++) m = fmaxf(m, red[i]);
    return m;
}

/* amax of non-negative floats: the bit patterns order as unsigned integers. */
__device__ __forceinline__ void atomic_max_nonneg(float *addr, float v) {
    atomicMax(reinterpret_cast<unsigned *>(addr), __float_as_uint(v));
}

/* Four codes (element 0 in the low byte) of the four bf16 in words w0, w1. */
__device__ __forceinline__ uint32_t cvt4(uint32_t w0, uint32_t w1, float scale, __nv_fp8_interpretation_t fmt) {
    return fp8_cvt2(bf16_bits_to_float(w0 & 0xFFFFu), bf16_bits_to_float(w0 >> 16), scale, fmt) |
           fp8_cvt2(bf16_bits_to_float(w1 & 0xFFFFu), bf16_bits_to_float(w1 >> 16), scale, fmt) << 16;
}

/* Element e (0 .. 2·N−1) of bf16 pairs packed in words. */
__device__ __forceinline__ float elem(const uint32_t *w, int e) {
    return bf16_bits_to_float(e & 1 ? w[e >> 1] >> 16 : w[e >> 1] & 0xFFFFu);
}

/* 4×4 byte transpose: a, b, c, d are four rows of four codes; o[j] = (a_j, b_j, c_j, d_j). */
__device__ __forceinline__ void transpose4(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t o[4]) {
    const uint32_t t0 = __byte_perm(a, b, 0x5140), t1 = __byte_perm(a, b, 0x7362); /* a0 b0 a1 b1, a2 b2 a3 b3 */
    const uint32_t t2 = __byte_perm(c, d, 0x5140), t3 = __byte_perm(c, d, 0x7362);
    o[0] = __byte_perm(t0, t2, 0x5410), o[1] = __byte_perm(t0, t2, 0x7632);
    o[2] = __byte_perm(t1, t3, 0x5410), o[3] = __byte_perm(t1, t3, 0x7632);
}

/* The transposed pass's codes of one thread (4 columns × 16 rows) from a tile of codes in shared
 * memory starting at row r0 of sm (rows of kTile/4 words, each 16-row group g's words XOR-swizzled
 * by g·CGW): out[j][k] = rows 4k .. 4k + 3 of column j, for the tile's rows rg·16 .. rg·16 + 15 and
 * word (4 columns) cg. */
template <int CGW>
__device__ __forceinline__ void transposed_codes(const uint32_t *sm, int r0, int rg, int cg, uint32_t (&out)[4][4]) {
    uint32_t v[16];
#pragma unroll
    for (int i = 0; i < 16; i++) v[i] = sm[(r0 + rg * 16 + i) * (kTile / 4) + (cg ^ (rg * CGW))];
#pragma unroll
    for (int g = 0; g < 4; g++) {
        uint32_t o[4];
        transpose4(v[4 * g], v[4 * g + 1], v[4 * g + 2], v[4 * g + 3], o);
#pragma unroll
        for (int j = 0; j < 4; j++) out[j][g] = o[j];
    }
}

/* One tile: TR rows × 128 columns of x, 2·TR threads (the file comment has the plan).
 * TRANS: q_t is written. Per-tensor and 128×128: the transposed pass moves the row pass's codes
 * through shared memory; 1×128 (TR 128 only): it re-quantizes the bf16 values column-wise. */
template <int MODE, bool VEC, int TR, bool TRANS>
__global__ void __launch_bounds__(2 * TR, 512 / TR) cast_tile(tile_params p) {
    constexpr int NT = 2 * TR, RG = TR / 16, CGW = 32 / RG, ITEMS = 8;
    constexpr bool VALUES = MODE == MODE_BLOCK_1X128;
    static_assert(!TRANS || !VALUES || TR == kTile, "the 1x128 transposed copy needs 128-row tiles");
    static_assert(MODE != MODE_BLOCK_128X128 || TR == kTile, "128x128 blocks need 128-row tiles");
    static_assert(ITEMS * NT * 8 == TR * kTile, "8 items of 8 elements per thread");
    constexpr int SM_WORDS = !TRANS ? 4 : VALUES ? TR * kTile / 2 : TR * kTile / 4;
    __shared__ __align__(16) uint32_t sm[SM_WORDS];
    __shared__ float red_f[NT / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t row0 = (int64_t)blockIdx.y * TR, col0 = (int64_t)blockIdx.x * kTile;
    const int64_t rows = p.rows, cols = p.cols;

    /* The per-tensor scale. */
    float scale = 1.0f;
    bool bad_amax = false;
    if (MODE == MODE_TENSOR_DELAYED) scale = *p.scale_in;
    if (MODE == MODE_TENSOR_CURRENT) {
        const float am = *p.amax_in;
        scale = current_scale(am, p.fp8_max, p.amax_eps, p.power_2);
        if (blockIdx.x == 0 && blockIdx.y == 0 && tid == 0) {
            *p.scale_out = scale;
            *p.scale_inv_out = __fdiv_rn(1.0f, scale);
            bad_amax = !isfinite(am);
        }
    }

    /* 1. Load: item k of a thread is 8 bf16 (16 bytes) of row r = k·NT/16 + tid/16, columns
     * 8·seg .. (seg = tid % 16); 16 lanes read one 256-byte row. Zeros outside x: they raise no
     * maximum, never saturate, are never stored. */
    constexpr int RSTEP = NT / 16;
    const int seg = tid & 15, rb = tid >> 4;
    const int64_t gc = col0 + seg * 8;
    uint32_t w[ITEMS][4];
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        const int64_t gr = row0 + rb + k * RSTEP;
        if (VEC) {
            uint4 raw = make_uint4(0, 0, 0, 0);
            if (gr < rows && gc < cols) raw = *reinterpret_cast<const uint4 *>(p.x + gr * cols + gc);
            w[k][0] = raw.x, w[k][1] = raw.y, w[k][2] = raw.z, w[k][3] = raw.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint32_t lo = 0, hi = 0;
                if (gr < rows && gc + 2 * j < cols) lo = p.x[gr * cols + gc + 2 * j];
                if (gr < rows && gc + 2 * j + 1 < cols) hi = p.x[gr * cols + gc + 2 * j + 1];
                w[k][j] = lo | hi << 16;
            }
        }
    }
    float tmax = 0.0f;
    bool bad_input = false;
    if (MODE == MODE_BLOCK_128X128) {
#pragma unroll
        for (int k = 0; k < ITEMS; k++)
#pragma unroll
            for (int e = 0; e < 8; e++) tmax = fmaxf(tmax, fabsf(elem(w[k], e)));
        tmax = block_max<NT>(tmax, red_f);
        scale = current_scale(tmax, p.fp8_max, p.amax_eps, p.power_2);
        bad_amax = !isfinite(tmax);
        if (tid == 0) {
            const float si = __fdiv_rn(1.0f, scale);
            p.s_inv[blockIdx.y * p.s_ld + blockIdx.x] = si;
            if (blockIdx.x == gridDim.x - 1) /* padding slots of this block row */
                for (int64_t k = gridDim.x; k < p.s_ld; k++) p.s_inv[blockIdx.y * p.s_ld + k] = 0.0f;
            if (p.s_inv_t) {
                p.s_inv_t[blockIdx.x * p.s_ld_t + blockIdx.y] = si;
                if (blockIdx.y == gridDim.y - 1)
                    for (int64_t k = gridDim.y; k < p.s_ld_t; k++) p.s_inv_t[blockIdx.x * p.s_ld_t + k] = 0.0f;
            }
        }
    }

    /* 2. Row-wise codes, from registers: one 8-byte store per item (16 lanes: a 128-byte row of q),
     * and into shared memory for the transposed pass (codes, or the bf16 values for 1×128).
     * Saturations: none in an item whose max does not saturate (x ↦ fl(|x|·scale) is monotone),
     * else counted element by element. */
    int sat = 0;
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        const int r = rb + k * RSTEP;
        const int64_t gr = row0 + r;
        float m = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float a = elem(w[k], e);
            m = fmaxf(m, fabsf(a));
            bad_input |= !isfinite(a);
        }
        if (MODE != MODE_BLOCK_128X128) tmax = fmaxf(tmax, m);
        float s = scale;
        if (MODE == MODE_BLOCK_1X128) {
            float rm = m;
#pragma unroll
            for (int o = 8; o > 0; o >>= 1) rm = fmaxf(rm, __shfl_xor_sync(0xffffffffu, rm, o)); /* the row's 16 lanes */
            s = current_scale(rm, p.fp8_max, p.amax_eps, p.power_2);
            bad_amax |= !isfinite(rm);
            if (seg == 0 && gr < rows) p.s_inv[blockIdx.x * rows + gr] = __fdiv_rn(1.0f, s);
        }
        if (saturates(__fmul_rn(m, s), p.fmt)) {
#pragma unroll
            for (int e = 0; e < 8; e++)
                if (gr < rows && gc + e < cols) sat += saturates(__fmul_rn(elem(w[k], e), s), p.fmt);
        }
        const uint32_t c0 = cvt4(w[k][0], w[k][1], s, p.fmt), c1 = cvt4(w[k][2], w[k][3], s, p.fmt);
        if (p.q && gr < rows) {
            if (VEC) {
                if (gc < cols) *reinterpret_cast<uint2 *>(p.q + gr * cols + gc) = make_uint2(c0, c1);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    if (gc + e < cols) p.q[gr * cols + gc + e] = (uint8_t)((e < 4 ? c0 : c1) >> (8 * (e & 3)));
            }
        }
        if (TRANS) {
            /* Swizzled by the row's 16-row group so that the transposed pass reads without bank
             * conflicts: codes by 4-byte words (word ^ group·CGW), values by 8-byte units (unit ^ 2·group). */
            const int grp = r >> 4;
            if (VALUES)
                *reinterpret_cast<uint4 *>(&sm[r * (kTile / 2) + 2 * ((2 * seg) ^ (2 * grp))]) =
                    make_uint4(w[k][0], w[k][1], w[k][2], w[k][3]);
            else
                *reinterpret_cast<uint2 *>(&sm[r * (kTile / 4) + ((2 * seg) ^ (grp * CGW))]) = make_uint2(c0, c1);
        }
    }

    /* 3. The transposed copy: thread = 4 columns × 16 rows (lanes: RG row groups × CGW column
     * groups, so RG lanes write TR contiguous bytes of a q_t row); one 16-byte store per column. */
    if (TRANS) {
        __syncthreads();
        const int rg = lane % RG, cg = warp * CGW + lane / RG;
        const int64_t gr0 = row0 + rg * 16, gcb = col0 + 4 * cg;
        uint32_t out[4][4]; /* [column j][row quad] */
        if (!VALUES) {
            transposed_codes<CGW>(sm, 0, rg, cg, out);
        } else {
            uint32_t v[16][2];
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const uint2 u = *reinterpret_cast<const uint2 *>(&sm[(rg * 16 + i) * (kTile / 2) + 2 * (cg ^ (2 * rg))]);
                v[i][0] = u.x, v[i][1] = u.y;
            }
            float cm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < 16; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) cm[j] = fmaxf(cm[j], fabsf(elem(v[i], j)));
#pragma unroll
            for (int j = 0; j < 4; j++) {
#pragma unroll
                for (int o = 1; o < RG; o <<= 1) cm[j] = fmaxf(cm[j], __shfl_xor_sync(0xffffffffu, cm[j], o)); /* 128 rows */
                const float cs = current_scale(cm[j], p.fp8_max, p.amax_eps, p.power_2);
                bad_amax |= !isfinite(cm[j]);
                if (rg == 0 && gcb + j < cols) p.s_inv_t[blockIdx.y * cols + gcb + j] = __fdiv_rn(1.0f, cs);
#pragma unroll
                for (int g = 0; g < 4; g++)
                    out[j][g] = fp8_cvt2(elem(v[4 * g], j), elem(v[4 * g + 1], j), cs, p.fmt) |
                                fp8_cvt2(elem(v[4 * g + 2], j), elem(v[4 * g + 3], j), cs, p.fmt) << 16;
                /* the 1×128 transposed copy is a second quantization: its saturations count too */
                if (saturates(__fmul_rn(cm[j], cs), p.fmt)) {
#pragma unroll
                    for (int i = 0; i < 16; i++)
                        if (gr0 + i < rows && gcb + j < cols) sat += saturates(__fmul_rn(elem(v[i], j), cs), p.fmt);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t gc = gcb + j;
            if (gc >= cols) continue;
            if (VEC) {
                if (gr0 < rows) *reinterpret_cast<uint4 *>(p.q_t + gc * rows + gr0) = make_uint4(out[j][0], out[j][1], out[j][2], out[j][3]);
            } else {
#pragma unroll
                for (int i = 0; i < 16; i++)
                    if (gr0 + i < rows) p.q_t[gc * rows + gr0 + i] = (uint8_t)(out[j][i >> 2] >> (8 * (i & 3)));
            }
        }
    }

    /* 4. Statistics: per warp, an atomic only when there is something to record; the amax once
     * per block. Integer sums and ORs are order-independent: deterministic. */
    if (p.saturated) {
        const unsigned ws = __reduce_add_sync(0xffffffffu, (unsigned)sat);
        if (lane == 0 && ws) atomicAdd(p.saturated, (unsigned long long)ws);
    }
    if (p.flags) {
        const unsigned fl = __reduce_or_sync(0xffffffffu, (bad_input ? (unsigned)FP8_FLAG_INPUT_NONFINITE : 0u) |
                                                              (bad_amax ? (unsigned)FP8_FLAG_AMAX_NONFINITE : 0u));
        if (lane == 0 && fl) atomicOr(p.flags, fl);
    }
    if (MODE != MODE_TENSOR_CURRENT && p.amax_rec) {
        if (MODE != MODE_BLOCK_128X128) tmax = block_max<NT>(tmax, red_f);
        if (tid == 0 && tmax > 0.0f) atomic_max_nonneg(p.amax_rec, tmax);
    }
}

/* ---- SwiGLU straight into codes (gpu_fp8_swiglu_forward / _backward) ----
 * The cast of the delayed per-tensor path above with its producer in front: each thread forms its
 * items' bf16 values as gpu/swiglu.cu does (gpu/swiglu.cuh's arithmetic, the pair conversion of
 * store_bf16) instead of loading them, then codes, statistics and the transposed copy exactly as
 * cast_tile<MODE_TENSOR_DELAYED, true, TR, TRANS> forms them from those values. The backward's
 * two outputs (dg, du; each its own scale and records) share the tile: 64 rows, 4 items a thread,
 * half the threads transposing each output; the forward's one output has 128-row tiles, and may
 * also store its bf16 values (h: where an adapter or the backward reads the MLP input). */
struct swiglu_out {
    uint8_t *q, *q_t;
    const float *scale;
    float *amax_rec; /* history slot 0 (max-recorded), or NULL */
    unsigned *flags;
    __nv_fp8_interpretation_t fmt;
};

struct swiglu_params {
    const uint16_t *g, *u, *dh; /* g, u at row stride ld_in; dh at cols */
    uint16_t *h;                /* forward: the bf16 values too (row stride cols), or NULL */
    int64_t rows, cols, ld_in;
    swiglu_out out[2];
    unsigned long long *saturated;
};

__device__ __forceinline__ uint4 load16(const uint16_t *p) { return *reinterpret_cast<const uint4 *>(p); }

/* Element e (0..7) of 8 bf16 in a uint4. */
__device__ __forceinline__ float elem8(const uint4 &w, int e) {
    const uint32_t v = e < 2 ? w.x : e < 4 ? w.y : e < 6 ? w.z : w.w;
    return bf16_bits_to_float(e & 1 ? v >> 16 : v & 0xFFFFu);
}

/* Two floats as the bf16 pair store_bf16 writes (RNE, low element in the low half). */
__device__ __forceinline__ uint32_t bf16_pair_bits(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t *>(&h);
}

template <bool BWD, bool TRANS>
__global__ void __launch_bounds__(kThreads, 3) swiglu_cast_tile(swiglu_params p) {
    constexpr int NOUT = BWD ? 2 : 1, TR = kTile / NOUT, ITEMS = 8 / NOUT, RSTEP = kThreads / 16;
    constexpr int RG = TR / 16, CGW = 32 / RG, WPO = kThreads / 32 / NOUT; /* warps per output */
    static_assert(ITEMS * RSTEP == TR && RG == WPO, "the tile's geometry");
    __shared__ __align__(16) uint32_t sm[TRANS ? NOUT * TR * (kTile / 4) : 4];
    __shared__ float red_f[kThreads / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, seg = tid & 15, rb = tid >> 4;
    const int64_t row0 = (int64_t)blockIdx.y * TR, col0 = (int64_t)blockIdx.x * kTile;
    const int64_t rows = p.rows, cols = p.cols, gc = col0 + seg * 8;
    float scale[NOUT], tmax[NOUT];
    bool bad[NOUT];
#pragma unroll
    for (int o = 0; o < NOUT; o++) scale[o] = *p.out[o].scale, tmax[o] = 0.0f, bad[o] = false;

    /* 1. Loads: item k is 8 columns of row rb + k·RSTEP; zeros outside (they form zeros). */
    uint4 gw[ITEMS], uw[ITEMS], dw[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        const int64_t gr = row0 + rb + k * RSTEP;
        const bool in = gr < rows && gc < cols;
        gw[k] = in ? load16(p.g + gr * p.ld_in + gc) : make_uint4(0, 0, 0, 0);
        uw[k] = in ? load16(p.u + gr * p.ld_in + gc) : make_uint4(0, 0, 0, 0);
        if (BWD) dw[k] = in ? load16(p.dh + gr * cols + gc) : make_uint4(0, 0, 0, 0);
    }

    /* 2. Each item's values, then its codes (row store, shared memory for the transposed copy) and
     * statistics, per output as cast_tile forms them. */
    int sat = 0;
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        const int r = rb + k * RSTEP;
        const int64_t gr = row0 + r;
        uint32_t w[NOUT][4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float v[NOUT][2], gj[2], sg[2], si[2]; /* the backward's σ and silu a pair at a time: the tile's
                                                      registers are few (eight at once spilled) */
#pragma unroll
            for (int h = 0; h < 2; h++) gj[h] = elem8(gw[k], 2 * j + h);
            if (BWD) refine::sigmoid_silu<2>(gj, sg, si);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float g = gj[h], u = elem8(uw[k], 2 * j + h);
                if (BWD) {
                    float dg, du;
                    refine::swiglu_backward_sig(g, u, elem8(dw[k], 2 * j + h), sg[h], si[h], dg, du);
                    v[0][h] = dg;
                    v[NOUT - 1][h] = du;
                } else {
                    v[0][h] = refine::swiglu_forward_elem(refine::bf16_round_dev(refine::silu_dev(g)), u);
                }
            }
#pragma unroll
            for (int o = 0; o < NOUT; o++) w[o][j] = bf16_pair_bits(v[o][0], v[o][1]);
        }
        if (!BWD && p.h && gr < rows && gc < cols)
            *reinterpret_cast<uint4 *>(p.h + gr * cols + gc) = make_uint4(w[0][0], w[0][1], w[0][2], w[0][3]);
#pragma unroll
        for (int o = 0; o < NOUT; o++) {
            const swiglu_out &out = p.out[o];
            float m = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float a = elem(w[o], e);
                m = fmaxf(m, fabsf(a));
                bad[o] |= !isfinite(a);
            }
            tmax[o] = fmaxf(tmax[o], m);
            if (saturates(__fmul_rn(m, scale[o]), out.fmt)) {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    if (gr < rows && gc + e < cols) sat += saturates(__fmul_rn(elem(w[o], e), scale[o]), out.fmt);
            }
            const uint32_t c0 = cvt4(w[o][0], w[o][1], scale[o], out.fmt), c1 = cvt4(w[o][2], w[o][3], scale[o], out.fmt);
            if (out.q && gr < rows && gc < cols) *reinterpret_cast<uint2 *>(out.q + gr * cols + gc) = make_uint2(c0, c1);
            if (TRANS)
                *reinterpret_cast<uint2 *>(&sm[(o * TR + r) * (kTile / 4) + ((2 * seg) ^ ((r >> 4) * CGW))]) =
                    make_uint2(c0, c1);
        }
    }

    /* 3. The transposed copies: output o's WPO warps, thread = 4 columns × 16 rows, as cast_tile. */
    if (TRANS) {
        __syncthreads();
        const int o = warp / WPO, rg = lane % RG, cg = (warp % WPO) * CGW + lane / RG;
        const int64_t gr0 = row0 + rg * 16, gcb = col0 + 4 * cg;
        uint32_t out[4][4];
        transposed_codes<CGW>(sm, o * TR, rg, cg, out);
        uint8_t *q_t = p.out[o].q_t;
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (gcb + j < cols && gr0 < rows)
                *reinterpret_cast<uint4 *>(q_t + (gcb + j) * rows + gr0) = make_uint4(out[j][0], out[j][1], out[j][2], out[j][3]);
    }

    /* 4. Statistics, as cast_tile records them (the saturations of every output in one counter). */
    if (p.saturated) {
        const unsigned ws = __reduce_add_sync(0xffffffffu, (unsigned)sat);
        if (lane == 0 && ws) atomicAdd(p.saturated, (unsigned long long)ws);
    }
#pragma unroll
    for (int o = 0; o < NOUT; o++) {
        if (p.out[o].flags) {
            const unsigned fl = __reduce_or_sync(0xffffffffu, bad[o] ? (unsigned)FP8_FLAG_INPUT_NONFINITE : 0u);
            if (lane == 0 && fl) atomicOr(p.out[o].flags, fl);
        }
        if (p.out[o].amax_rec) {
            const float bm = block_max<kThreads>(tmax[o], red_f);
            if (tid == 0 && bm > 0.0f) atomic_max_nonneg(p.out[o].amax_rec, bm);
        }
    }
}

/* ---- amax ---- */

template <typename T>
__global__ void __launch_bounds__(kThreads) amax_kernel(float *amax, unsigned *flags, const T *x, int64_t n, int vec) {
    __shared__ float red[kThreads / 32];
    float m = 0.0f;
    bool bad = false;
    const int64_t stride = (int64_t)gridDim.x * kThreads;
    constexpr int per = 16 / sizeof(T); /* elements per 16-byte load */
    const int64_t nv = vec ? n / per : 0;
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < nv; i += stride) {
        const uint4 raw = reinterpret_cast<const uint4 *>(x)[i];
        const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if constexpr (sizeof(T) == 2) {
                const float a = bf16_bits_to_float(w[j] & 0xFFFFu), b = bf16_bits_to_float(w[j] >> 16);
                m = fmaxf(m, fmaxf(fabsf(a), fabsf(b)));
                bad |= !isfinite(a) || !isfinite(b);
            } else {
                const float a = __uint_as_float(w[j]);
                m = fmaxf(m, fabsf(a));
                bad |= !isfinite(a);
            }
        }
    }
    for (int64_t i = nv * per + (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
        float a;
        if constexpr (sizeof(T) == 2)
            a = bf16_bits_to_float(x[i]);
        else
            a = x[i];
        m = fmaxf(m, fabsf(a));
        bad |= !isfinite(a);
    }
    m = block_max(m, red);
    const int any_bad = __syncthreads_or(bad ? 1 : 0);
    if (threadIdx.x == 0) {
        if (m > 0.0f) atomic_max_nonneg(amax, m);
        if (flags && any_bad) atomicOr(flags, FP8_FLAG_INPUT_NONFINITE);
    }
}

/* ---- delayed scaling update: one block per tensor ---- */

constexpr int kMaxPerThread = 16; /* history_len ≤ kThreads · kMaxPerThread = 4096 */

__global__ void __launch_bounds__(kThreads)
    delayed_update_kernel(float *history, float *scale, float *scale_inv, int len, int most_recent, float max_scaled,
                          unsigned *flags) {
    __shared__ float red[kThreads / 32];
    float *h = history + (int64_t)blockIdx.x * len;
    float moved[kMaxPerThread];
    /* fmaxf's neutral element is NaN (fmaxf(NaN, x) = x): the reference's loop starts from
     * history[0] and keeps a NaN only when every entry is NaN, as this does. */
    float m = NAN;
#pragma unroll
    for (int j = 0; j < kMaxPerThread; j++) {
        const int i = j * kThreads + threadIdx.x;
        if (i < len) {
            moved[j] = h[(i + 1) % len]; /* new[i] = old[i + 1], new[len − 1] = old[0] */
            m = fmaxf(m, moved[j]);
        }
    }
    /* block max of possibly-NaN values: fmaxf everywhere, NaN as the neutral element */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
    const float first = h[0];
    __syncthreads(); /* every read of the old history is done */
    float amax = NAN;
#pragma unroll
    for (int i = 0; i < kThreads / 32; i++) amax = fmaxf(amax, red[i]);
    if (most_recent) amax = first;
#pragma unroll
    for (int j = 0; j < kMaxPerThread; j++) {
        const int i = j * kThreads + threadIdx.x;
        if (i < len) h[i] = i == 0 ? 0.0f : moved[j]; /* slot 0: the next iteration's, zeroed */
    }
    if (threadIdx.x == 0) {
        float s = scale[blockIdx.x];
        if (isfinite(amax) && amax > 0.0f) {
            s = __fdiv_rn(max_scaled, amax);
            if (isinf(s)) s = FLT_MAX;
        }
        scale[blockIdx.x] = s;
        scale_inv[blockIdx.x] = __fdiv_rn(1.0f, s);
        if (flags && !isfinite(amax)) atomicOr(flags, FP8_FLAG_AMAX_NONFINITE);
    }
}

int grid_for(int64_t items) {
    const int64_t blocks = (items + kThreads - 1) / kThreads;
    return (int)(blocks < 132 * 8 ? (blocks > 0 ? blocks : 1) : 132 * 8);
}

bool aligned16(const void *p) { return ((uintptr_t)p % 16) == 0; }

__nv_fp8_interpretation_t interp(fp8_format f) { return f == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2; }

template <int MODE, bool VEC, int TR, bool TRANS>
void launch_one(const tile_params &p, cudaStream_t stream) {
    const dim3 grid((unsigned)((p.cols + kTile - 1) / kTile), (unsigned)((p.rows + TR - 1) / TR));
    CHECK((p.rows + TR - 1) / TR <= 65535, "fp8 cast: rows=%lld beyond the grid's y limit", (long long)p.rows);
    cast_tile<MODE, VEC, TR, TRANS><<<grid, 2 * TR, 0, stream>>>(p);
}

/* Tile height: 128, halved (to 64, then 32) while the grid would give fewer than 4 tiles per SM —
 * where the modes allow it (per-tensor, and 1×128 without the transposed copy: their blocks do not
 * span rows). The codes do not depend on it. */
int tile_rows(int mode, bool trans, bool vec, int64_t rows, int64_t cols) {
    if (!vec || mode == MODE_BLOCK_128X128 || (mode == MODE_BLOCK_1X128 && trans)) return kTile;
    const int64_t col_tiles = (cols + kTile - 1) / kTile, want = 4 * (int64_t)refine_sm_count();
    int tr = kTile;
    while (tr > 32 && col_tiles * ((rows + tr - 1) / tr) < want) tr /= 2;
    return tr;
}

template <int MODE, bool TRANS>
void launch_mode(const tile_params &p, cudaStream_t stream) {
    const bool vec = p.rows % 16 == 0 && p.cols % 16 == 0 && aligned16(p.x) && aligned16(p.q) && aligned16(p.q_t);
    if (!vec) {
        launch_one<MODE, false, kTile, TRANS>(p, stream);
    } else if constexpr (MODE == MODE_BLOCK_128X128 || (MODE == MODE_BLOCK_1X128 && TRANS)) {
        launch_one<MODE, true, kTile, TRANS>(p, stream);
    } else {
        switch (tile_rows(MODE, TRANS, vec, p.rows, p.cols)) {
        case 32: launch_one<MODE, true, 32, TRANS>(p, stream); break;
        case 64: launch_one<MODE, true, 64, TRANS>(p, stream); break;
        default: launch_one<MODE, true, kTile, TRANS>(p, stream);
        }
    }
    KERNEL_CHECK(stream);
}

template <int MODE>
void launch_tile(const tile_params &p, cudaStream_t stream) {
    if (p.q_t)
        launch_mode<MODE, true>(p, stream);
    else
        launch_mode<MODE, false>(p, stream);
}

tile_params base_params(uint8_t *q, uint8_t *q_t, const uint16_t *x, int64_t rows, int64_t cols, fp8_format format,
                        unsigned *flags, unsigned long long *saturated) {
    CHECK(rows >= 1 && cols >= 1, "fp8 cast: rows=%lld cols=%lld must be >= 1", (long long)rows, (long long)cols);
    CHECK(x != nullptr && (q != nullptr || q_t != nullptr), "fp8 cast: no input or no output");
    CHECK(format == FP8_E4M3 || format == FP8_E5M2, "fp8 cast: format %d", (int)format);
    tile_params p;
    memset(&p, 0, sizeof p);
    p.x = x, p.q = q, p.q_t = q_t, p.rows = rows, p.cols = cols;
    p.fmt = interp(format), p.fp8_max = fp8_max(format);
    p.flags = flags, p.saturated = saturated;
    return p;
}

}  // namespace

extern "C" {

void gpu_fp8_amax_bf16(float *amax, unsigned *flags, const uint16_t *x, int64_t n, cudaStream_t stream) {
    CHECK(n >= 1 && amax != nullptr && x != nullptr, "fp8 amax: n=%lld", (long long)n);
    const int vec = aligned16(x);
    amax_kernel<uint16_t><<<grid_for(vec ? n / 8 + 1 : n), kThreads, 0, stream>>>(amax, flags, x, n, vec);
    KERNEL_CHECK(stream);
}

void gpu_fp8_amax_f32(float *amax, unsigned *flags, const float *x, int64_t n, cudaStream_t stream) {
    CHECK(n >= 1 && amax != nullptr && x != nullptr, "fp8 amax: n=%lld", (long long)n);
    const int vec = aligned16(x);
    amax_kernel<float><<<grid_for(vec ? n / 4 + 1 : n), kThreads, 0, stream>>>(amax, flags, x, n, vec);
    KERNEL_CHECK(stream);
}

void gpu_fp8_cast_bf16(uint8_t *q, uint8_t *q_t, const uint16_t *x, int64_t rows, int64_t cols,
                       const struct gpu_fp8_scaling *s, unsigned *flags, unsigned long long *saturated,
                       cudaStream_t stream) {
    tile_params p = base_params(q, q_t, x, rows, cols, s->format, flags, saturated);
    CHECK(s->scale != nullptr && s->amax != nullptr, "fp8 cast: the scaling needs its scale and amax scalars");
    p.amax_eps = s->amax_eps, p.power_2 = s->power_2;
    if (s->recipe == GPU_FP8_DELAYED) {
        p.scale_in = s->scale, p.amax_rec = s->amax;
        launch_tile<MODE_TENSOR_DELAYED>(p, stream);
    } else {
        CHECK(s->recipe == GPU_FP8_CURRENT && s->scale_inv != nullptr, "fp8 cast: recipe %d / scale_inv",
              (int)s->recipe);
        p.amax_in = s->amax, p.scale_out = s->scale, p.scale_inv_out = s->scale_inv;
        launch_tile<MODE_TENSOR_CURRENT>(p, stream);
    }
}

void gpu_fp8_block_quantize_bf16(uint8_t *q, float *s_inv, uint8_t *q_t, float *s_inv_t, const uint16_t *x,
                                 int64_t rows, int64_t cols, enum fp8_block block, enum fp8_format format,
                                 float amax_eps, int power_2, float *amax, unsigned *flags,
                                 unsigned long long *saturated, cudaStream_t stream) {
    CHECK(q != nullptr && s_inv != nullptr && (q_t == nullptr) == (s_inv_t == nullptr),
          "fp8 block quantize: q and s_inv required; q_t and s_inv_t go together");
    tile_params p = base_params(q, q_t, x, rows, cols, format, flags, saturated);
    p.s_inv = s_inv, p.s_inv_t = s_inv_t, p.amax_eps = amax_eps, p.power_2 = power_2, p.amax_rec = amax;
    if (block == FP8_BLOCK_1X128) {
        launch_tile<MODE_BLOCK_1X128>(p, stream);
    } else {
        CHECK(block == FP8_BLOCK_128X128, "fp8 block quantize: block %d", (int)block);
        p.s_ld = fp8_block_scale_ld(block, rows, cols), p.s_ld_t = fp8_block_scale_ld(block, cols, rows);
        launch_tile<MODE_BLOCK_128X128>(p, stream);
    }
}

/* The fast path's shape (else 0: the caller takes SwiGLU and the cast apart): rows and F multiples of
 * 16, ld_in of 8, every pointer 16-byte aligned, delayed scaling. */
static int swiglu_fp8_launch(bool bwd, const struct gpu_fp8_out *const *outs, uint16_t *h, const uint16_t *dh,
                             const uint16_t *g, const uint16_t *u, int64_t rows, int64_t F, int64_t ld_in,
                             unsigned long long *saturated, cudaStream_t stream) {
    CHECK(rows >= 1 && F >= 1 && ld_in >= F && g && u && (!bwd || dh), "fp8 swiglu: rows=%lld F=%lld ld_in=%lld",
          (long long)rows, (long long)F, (long long)ld_in);
    const int nout = bwd ? 2 : 1;
    swiglu_params p;
    memset(&p, 0, sizeof p);
    bool vec = rows % 16 == 0 && F % 16 == 0 && ld_in % 8 == 0 && aligned16(g) && aligned16(u) && aligned16(dh) &&
               aligned16(h);
    bool trans = false;
    for (int o = 0; o < nout; o++) {
        const gpu_fp8_out *x = outs[o];
        CHECK(x && (x->q || x->q_t) && x->s && x->s->scale, "fp8 swiglu: output %d has no codes or no scale", o);
        CHECK(o == 0 || (x->q_t != nullptr) == (outs[0]->q_t != nullptr), "fp8 swiglu: one output transposed");
        vec = vec && x->s->recipe == GPU_FP8_DELAYED && aligned16(x->q) && aligned16(x->q_t);
        trans = x->q_t != nullptr;
        p.out[o] = {x->q, x->q_t, x->s->scale, x->s->amax, x->flags, interp(x->s->format)};
    }
    if (!vec) return 0;
    p.g = g, p.u = u, p.dh = dh, p.h = h, p.rows = rows, p.cols = F, p.ld_in = ld_in, p.saturated = saturated;
    const int64_t tr = kTile / nout;
    CHECK((rows + tr - 1) / tr <= 65535, "fp8 swiglu: rows=%lld beyond the grid's y limit", (long long)rows);
    const dim3 grid((unsigned)((F + kTile - 1) / kTile), (unsigned)((rows + tr - 1) / tr));
    if (bwd)
        trans ? swiglu_cast_tile<true, true><<<grid, kThreads, 0, stream>>>(p)
              : swiglu_cast_tile<true, false><<<grid, kThreads, 0, stream>>>(p);
    else
        trans ? swiglu_cast_tile<false, true><<<grid, kThreads, 0, stream>>>(p)
              : swiglu_cast_tile<false, false><<<grid, kThreads, 0, stream>>>(p);
    KERNEL_CHECK(stream);
    return 1;
}

int gpu_fp8_swiglu_forward(const struct gpu_fp8_out *hq, uint16_t *h, const uint16_t *g, const uint16_t *u, int64_t rows,
                           int64_t F, int64_t ld_in, unsigned long long *saturated, cudaStream_t stream) {
    const gpu_fp8_out *outs[1] = {hq};
    return swiglu_fp8_launch(false, outs, h, nullptr, g, u, rows, F, ld_in, saturated, stream);
}

int gpu_fp8_swiglu_backward(const struct gpu_fp8_out *dg, const struct gpu_fp8_out *du, const uint16_t *dh,
                            const uint16_t *g, const uint16_t *u, int64_t rows, int64_t F, int64_t ld_in,
                            unsigned long long *saturated, cudaStream_t stream) {
    const gpu_fp8_out *outs[2] = {dg, du};
    return swiglu_fp8_launch(true, outs, nullptr, dh, g, u, rows, F, ld_in, saturated, stream);
}

void gpu_fp8_delayed_update(float *history, float *scale, float *scale_inv, int n, int history_len,
                            enum fp8_amax_algo algo, int margin, enum fp8_format format, unsigned *flags,
                            cudaStream_t stream) {
    CHECK(n >= 1 && history_len >= 1 && history_len <= kThreads * kMaxPerThread,
          "fp8 delayed update: n=%d history_len=%d (1 .. %d)", n, history_len, kThreads * kMaxPerThread);
    CHECK(history && scale && scale_inv, "fp8 delayed update: NULL pointer");
    /* The scale numerator as ref/fp8.c forms it: fp8_max · 2^-margin in fp32 (exact). */
    const float max_scaled = fp8_max(format) * ldexpf(1.0f, -margin);
    delayed_update_kernel<<<n, kThreads, 0, stream>>>(history, scale, scale_inv, history_len,
                                                      algo == FP8_AMAX_MOST_RECENT, max_scaled, flags);
    KERNEL_CHECK(stream);
}

}  /* extern "C" */
