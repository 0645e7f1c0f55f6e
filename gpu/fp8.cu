/* fp8.cu — FP8 amax, scaling recipes, cast + transpose and block quantization (gpu/fp8.h).
 *
 * Strategy: every cast is one pass over a 128×128 tile of x per thread block (256 threads, 8
 * warps), staged in shared memory as bf16 (128 rows × 136 columns: 8 columns of padding keep the
 * row starts 16-byte aligned and spread the rows over the banks; 34 KB, 6 blocks per SM):
 *   1. load: each thread brings 8 chunks of 8 bf16 (16-byte loads; a half-warp reads one 256-byte
 *      row segment), notes the amax and any non-finite input;
 *   2. rows: each thread converts 16 consecutive elements of a row back out of shared memory (8
 *      threads per row, so a 1×128 block's amax is a 3-step shuffle) and stores their 16 codes
 *      with one 16-byte store (a warp writes four 128-byte row segments);
 *   3. transposed copy (when asked): a thread owns one column and 32 consecutive rows of the tile
 *      (a warp reads 32 adjacent columns of one shared-memory row: no bank conflict), converts
 *      them and writes 32 codes of q_t's row as two 16-byte stores; for 1×128 the column's amax is
 *      first combined from four 32-row partial maxima in shared memory;
 *   4. statistics: one atomicMax (amax, on the float's bits), atomicAdd (saturated) and atomicOr
 *      (flags) per block, each only when there is something to add.
 * The tile is 128×128 because that is the block of 128×128 quantization and the length of a 1×128
 * block, so no block ever spans two thread blocks. Bytes per element: 2 read, 1 written (+1 for
 * q_t): memory-bound; the bench compares with the device's copy rate.
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
#include "io/check.h"

namespace {

constexpr int kTile = 128;
constexpr int kThreads = 256;
constexpr int kPitch = kTile + 8; /* bf16 per shared-memory row */

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

/* Two codes (lo = first element) of a·scale, b·scale. */
__device__ __forceinline__ uint32_t cvt2(float a, float b, float scale, __nv_fp8_interpretation_t fmt, int &sat) {
    const float va = __fmul_rn(a, scale), vb = __fmul_rn(b, scale);
    sat += saturates(va, fmt) + saturates(vb, fmt);
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(va, vb), __NV_SATFINITE, fmt);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Max over the block of non-negative values; every thread gets it. red: kThreads/32 floats. */
__device__ float block_max(float v, float *red) {
    v = warp_max(v);
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads(); /* red may still be read from a previous call */
    if (lane == 0) red[w] = v;
    __syncthreads();
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < kThreads / 32; i++) m = fmaxf(m, red[i]);
    return m;
}

__device__ int block_sum(int v, int *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    int s = 0;
#pragma unroll
    for (int i = 0; i < kThreads / 32; i++) s += red[i];
    return s;
}

/* amax of non-negative floats: the bit patterns order as unsigned integers. */
__device__ __forceinline__ void atomic_max_nonneg(float *addr, float v) {
    atomicMax(reinterpret_cast<unsigned *>(addr), __float_as_uint(v));
}

template <int MODE, bool VEC>
__global__ void __launch_bounds__(kThreads) cast_tile(tile_params p) {
    __shared__ __align__(16) uint16_t tile[kTile][kPitch];
    __shared__ float colmax[4][kTile];
    __shared__ float red_f[kThreads / 32];
    __shared__ int red_i[kThreads / 32];
    const int tid = threadIdx.x, lane = tid % 32;
    const int64_t row0 = (int64_t)blockIdx.y * kTile, col0 = (int64_t)blockIdx.x * kTile;
    const int64_t rows = p.rows, cols = p.cols;

    /* 1. Load the tile (zeros outside x: they raise no maximum and are never stored). */
    float tmax = 0.0f;
    bool bad_input = false;
    if (VEC) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int id = i * kThreads + tid, r = id >> 4, ch = id & 15;
            const int64_t gr = row0 + r, gc = col0 + ch * 8;
            uint4 raw = make_uint4(0, 0, 0, 0);
            if (gr < rows && gc < cols) raw = *reinterpret_cast<const uint4 *>(p.x + gr * cols + gc);
            *reinterpret_cast<uint4 *>(&tile[r][ch * 8]) = raw;
            const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float a = bf16_bits_to_float(w[j] & 0xFFFFu), b = bf16_bits_to_float(w[j] >> 16);
                tmax = fmaxf(tmax, fmaxf(fabsf(a), fabsf(b)));
                bad_input |= !isfinite(a) || !isfinite(b);
            }
        }
    } else {
        for (int e = tid; e < kTile * kTile; e += kThreads) {
            const int r = e / kTile, c = e % kTile;
            const int64_t gr = row0 + r, gc = col0 + c;
            const uint16_t h = (gr < rows && gc < cols) ? p.x[gr * cols + gc] : (uint16_t)0;
            tile[r][c] = h;
            const float a = bf16_bits_to_float(h);
            tmax = fmaxf(tmax, fabsf(a));
            bad_input |= !isfinite(a);
        }
    }
    bool bad_amax = false;
    const bool need_tile_max = MODE == MODE_TENSOR_DELAYED || MODE == MODE_BLOCK_128X128 ||
                               ((MODE == MODE_BLOCK_1X128) && p.amax_rec != nullptr);
    tmax = need_tile_max ? block_max(tmax, red_f) : tmax; /* block_max synchronizes */
    __syncthreads();

    /* The per-tensor or per-tile scale. */
    float scale = 1.0f;
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
    if (MODE == MODE_BLOCK_128X128) {
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

    /* 2. Row-wise codes: thread = 16 consecutive elements of a row (two 16-byte shared-memory
     * reads, one 16-byte store); 8 threads (a quarter of a warp) cover a 128-element row. */
    int sat = 0;
    if (p.q) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int id = i * kThreads + tid, r = id >> 3, seg = id & 7;
            const int64_t gr = row0 + r, gc = col0 + seg * 16;
            float v[16];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint4 raw = *reinterpret_cast<const uint4 *>(&tile[r][seg * 16 + h * 8]);
                const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
                for (int j = 0; j < 4; j++)
                    v[8 * h + 2 * j] = bf16_bits_to_float(w[j] & 0xFFFFu), v[8 * h + 2 * j + 1] = bf16_bits_to_float(w[j] >> 16);
            }
            float s = scale;
            if (MODE == MODE_BLOCK_1X128) {
                float m = 0.0f;
#pragma unroll
                for (int j = 0; j < 16; j++) m = fmaxf(m, fabsf(v[j]));
#pragma unroll
                for (int o = 4; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o)); /* the row's 8 lanes */
                s = current_scale(m, p.fp8_max, p.amax_eps, p.power_2);
                bad_amax |= !isfinite(m);
                if ((lane & 7) == 0 && gr < rows) p.s_inv[blockIdx.x * rows + gr] = __fdiv_rn(1.0f, s);
            }
            int csat = 0;
            uint32_t codes[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                codes[j] = cvt2(v[4 * j], v[4 * j + 1], s, p.fmt, csat) | (cvt2(v[4 * j + 2], v[4 * j + 3], s, p.fmt, csat) << 16);
            if (VEC) {
                if (gr < rows && gc < cols) {
                    *reinterpret_cast<uint4 *>(p.q + gr * cols + gc) = make_uint4(codes[0], codes[1], codes[2], codes[3]);
                    sat += csat;
                }
            } else if (gr < rows) {
                for (int j = 0; j < 16; j++)
                    if (gc + j < cols) {
                        p.q[gr * cols + gc + j] = (uint8_t)(codes[j / 4] >> (8 * (j % 4)));
                        sat += saturates(__fmul_rn(v[j], s), p.fmt);
                    }
            }
        }
    }

    /* 3. The transposed copy: thread = one column × 32 rows of the tile, per item. */
    if (p.q_t) {
        float cscale[2] = {scale, scale};
        if (MODE == MODE_BLOCK_1X128) {
#pragma unroll
            for (int it = 0; it < 2; it++) {
                const int item = it * kThreads + tid, c = item & (kTile - 1), seg = item >> 7;
                float m = 0.0f;
#pragma unroll 8
                for (int i = 0; i < 32; i++) m = fmaxf(m, fabsf(bf16_bits_to_float(tile[seg * 32 + i][c])));
                colmax[seg][c] = m;
            }
            __syncthreads();
#pragma unroll
            for (int it = 0; it < 2; it++) {
                const int item = it * kThreads + tid, c = item & (kTile - 1), seg = item >> 7;
                const float m = fmaxf(fmaxf(colmax[0][c], colmax[1][c]), fmaxf(colmax[2][c], colmax[3][c]));
                cscale[it] = current_scale(m, p.fp8_max, p.amax_eps, p.power_2);
                bad_amax |= !isfinite(m);
                const int64_t gc = col0 + c;
                if (seg == 0 && gc < cols) p.s_inv_t[blockIdx.y * cols + gc] = __fdiv_rn(1.0f, cscale[it]);
            }
        }
#pragma unroll
        for (int it = 0; it < 2; it++) {
            const int item = it * kThreads + tid, c = item & (kTile - 1), seg = item >> 7;
            const int64_t gc = col0 + c, gr0 = row0 + seg * 32;
            const float s = cscale[it];
            uint32_t codes[8];
            int csat = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int r = seg * 32 + 4 * i;
                const uint32_t lo = cvt2(bf16_bits_to_float(tile[r][c]), bf16_bits_to_float(tile[r + 1][c]), s, p.fmt, csat);
                const uint32_t hi = cvt2(bf16_bits_to_float(tile[r + 2][c]), bf16_bits_to_float(tile[r + 3][c]), s, p.fmt, csat);
                codes[i] = lo | (hi << 16);
            }
            if (gc >= cols) continue;
            /* the 1×128 transposed copy is a second quantization: its saturations count too */
            if (VEC) {
                uint8_t *dst = p.q_t + gc * rows + gr0;
                if (gr0 < rows) *reinterpret_cast<uint4 *>(dst) = make_uint4(codes[0], codes[1], codes[2], codes[3]);
                if (gr0 + 16 < rows) *reinterpret_cast<uint4 *>(dst + 16) = make_uint4(codes[4], codes[5], codes[6], codes[7]);
                if (MODE == MODE_BLOCK_1X128) sat += csat; /* zero-padded rows never saturate */
            } else {
                for (int i = 0; i < 32; i++)
                    if (gr0 + i < rows) {
                        p.q_t[gc * rows + gr0 + i] = (uint8_t)(codes[i / 4] >> (8 * (i % 4)));
                        if (MODE == MODE_BLOCK_1X128)
                            sat += saturates(__fmul_rn(bf16_bits_to_float(tile[seg * 32 + i][c]), s), p.fmt);
                    }
            }
            /* per-tensor and 128×128: q_t holds q's codes; a q_t-only cast counts them here */
            if (MODE != MODE_BLOCK_1X128 && p.q == nullptr) {
                int s2 = 0;
                for (int i = 0; i < 32; i++)
                    if (gr0 + i < rows) s2 += saturates(__fmul_rn(bf16_bits_to_float(tile[seg * 32 + i][c]), s), p.fmt);
                sat += s2;
            }
        }
    }

    /* 4. Statistics: one atomic per block and kind, only when there is something to record. */
    const int sat_total = p.saturated ? block_sum(sat, red_i) : 0;
    const int any_bad = __syncthreads_or(bad_input ? 1 : 0);
    const int any_bad_amax = __syncthreads_or(bad_amax ? 1 : 0);
    if (tid == 0) {
        if (p.saturated && sat_total > 0) atomicAdd(p.saturated, (unsigned long long)sat_total);
        const unsigned fl = (any_bad ? FP8_FLAG_INPUT_NONFINITE : 0u) | (any_bad_amax ? FP8_FLAG_AMAX_NONFINITE : 0u);
        if (p.flags && fl) atomicOr(p.flags, fl);
        if (p.amax_rec && (MODE == MODE_TENSOR_DELAYED || MODE == MODE_BLOCK_1X128 || MODE == MODE_BLOCK_128X128))
            atomic_max_nonneg(p.amax_rec, tmax);
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

template <int MODE>
void launch_tile(const tile_params &p, cudaStream_t stream) {
    const bool vec = p.rows % 16 == 0 && p.cols % 16 == 0 && aligned16(p.x) && aligned16(p.q) && aligned16(p.q_t);
    const dim3 grid((unsigned)((p.cols + kTile - 1) / kTile), (unsigned)((p.rows + kTile - 1) / kTile));
    CHECK((p.rows + kTile - 1) / kTile <= 65535, "fp8 cast: rows=%lld beyond the grid's y limit", (long long)p.rows);
    if (vec)
        cast_tile<MODE, true><<<grid, kThreads, 0, stream>>>(p);
    else
        cast_tile<MODE, false><<<grid, kThreads, 0, stream>>>(p);
    KERNEL_CHECK(stream);
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
