/* dora.cu — DoRA's row norm, fused magnitude scaling and backward (gpu/dora.h).
 *
 * Strategy:
 *  - w_sq: one 256-thread block per row of W, double partial sums in a strided order, a fixed
 *    shared-memory tree. Run once per frozen W, so simplicity wins over speed.
 *  - row norm: W Aᵀ and A Aᵀ through gemm into the workspace (fp32), then one warp per row combines
 *    w_sq, the cross term and the quadratic form in double (lanes stride over r, a fixed xor-shuffle
 *    tree), so the result does not depend on the launch: deterministic.
 *  - forward: u = x Aᵀ through gemm; then, for R ≤ kFusedMaxR, ONE pass forms s·l = s·(u Bᵀ) in
 *    registers and writes the scaled y and the pre-magnitude z — 6 bytes an element of (N, C_out)
 *    (read y, write y and z) instead of 14 with an fp32 s·l written and read back. Two kernels:
 *    on tensor cores (gpu/adapter_mma.cuh: R even, C_out % 32 == 0, aligned rows — the models' shapes)
 *    and with B's rows in registers and R FMAs an element (dora_forward_fused: any shape). Above
 *    kFusedMaxR: s·u Bᵀ through gemm (fp32, alpha = s) into the workspace, then the elementwise pass
 *    (8 columns a thread when possible).
 *  - backward: one pass over dy and the saved tensor (z, or the bias-free output y: ref/dora.h's
 *    dora_saved) writes dy_s = bf16(mns⊙dy) and per-(32-row chunk, column) double partial sums of
 *    dy·z or dy·y (four threads a chunk's columns, 8 rows each, combined in a fixed order through
 *    shared memory: coalesced, no atomics); a second
 *    small kernel adds the chunks per column in a fixed order (8 interleaved lanes, then the lanes)
 *    and accumulates their sum over n (z) or m (y) into dm. Then the base
 *    path dx = dy_s W and gpu/lora's backward with dy_s. For the MLP's gate and up linears the same
 *    pass also runs the SwiGLU backward that produces their dy (gpu_dora_swiglu_backward_bf16): the
 *    gradients are rescaled where they are formed, not written, read back and written again.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:dora_parity
 *                     (binary) dora_parity --bench
 */
#include "gpu/dora.h"

#include <string.h>

#include "gpu/cuda_check.h"
#include "gpu/adapter_mma.cuh"
#include "gpu/lora.h"
#include "gpu/swiglu.cuh"
#include "gpu/vec.cuh"
#include "io/check.h"

using refine::bf16;

namespace {

constexpr int kBlock = 256;
constexpr int kChunkRows = 32;                       /* rows per dm partial sum */
constexpr int kSubRows = 8;                          /* rows one thread of the rescale passes sums */
constexpr int kSubLanes = kChunkRows / kSubRows;     /* warps a block: one 8-row part of its chunk each */
constexpr size_t kAlign = 256;

size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

__global__ void __launch_bounds__(kBlock) dora_weight_sq_block_per_row(float *w_sq, const bf16 *w, int64_t ldw,
                                                                     int C_in) {
    __shared__ double sh[kBlock];
    const bf16 *row = w + (int64_t)blockIdx.x * ldw;
    double s = 0.0;
    for (int i = threadIdx.x; i < C_in; i += kBlock) {
        const double v = (double)__bfloat162float(row[i]);
        s += v * v; /* exact: a bf16 square has 16 significant bits */
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = kBlock / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) w_sq[blockIdx.x] = (float)sh[0];
}

/* w_s[o, k] = bf16(w[o, k]·(mag[o]/wnorm[o])), k < K: VW columns a thread (8: 16-byte loads and
 * stores, when the rows allow), the rows' vectors numbered in one flat range. */
template <int VW>
__global__ void __launch_bounds__(kBlock) dora_scale_weight_rows(bf16 *w_s, const bf16 *w, int64_t ldw,
                                                                 const float *mag, const float *wnorm, int C_out,
                                                                 int K) {
    const int per_row = K / VW;
    const int64_t i = (int64_t)blockIdx.x * kBlock + threadIdx.x;
    if (i >= (int64_t)C_out * per_row) return;
    const int o = (int)(i / per_row), k = (int)(i - (int64_t)o * per_row) * VW;
    const float mns = __fdiv_rn(mag[o], wnorm[o]);
    const bf16 *src = w + (int64_t)o * ldw + k;
    bf16 *dst = w_s + (int64_t)o * ldw + k;
    if (VW == 8) {
        uint4 v = *reinterpret_cast<const uint4 *>(src);
        bf16 *e = reinterpret_cast<bf16 *>(&v);
#pragma unroll
        for (int j = 0; j < 8; j++) e[j] = __float2bfloat16_rn(__fmul_rn(__bfloat162float(e[j]), mns));
        *reinterpret_cast<uint4 *>(dst) = v;
    } else {
        dst[0] = __float2bfloat16_rn(__fmul_rn(__bfloat162float(src[0]), mns));
    }
}

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
    return v;
}

/* One warp per row o: n² = w_sq + 2s·Σ_r WA[o,r]·B[o,r] + s²·Σ_r B[o,r]·Σ_q AA[r,q]·B[o,q]. */
__global__ void __launch_bounds__(kBlock) dora_norm_warp_per_row(float *wnorm, const float *w_sq, const float *wa,
                                                                 const float *aa, const bf16 *lora_b, int C_out, int R,
                                                                 double s) {
    const int o = blockIdx.x * (kBlock / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (o >= C_out) return; /* whole warps leave together: o is uniform within a warp */
    const bf16 *bo = lora_b + (int64_t)o * R;
    double cross = 0.0, quad = 0.0;
    for (int r = lane; r < R; r += 32) {
        const double br = (double)__bfloat162float(bo[r]);
        cross += (double)wa[(int64_t)o * R + r] * br;
        double t = 0.0;
        for (int q = 0; q < R; q++) t += (double)aa[(int64_t)r * R + q] * (double)__bfloat162float(bo[q]);
        quad += br * t;
    }
    cross = warp_sum_f64(cross);
    quad = warp_sum_f64(quad);
    if (lane == 0) {
        /* ref: (double)w_sq + 2.0·s·cross + s·s·quad, left to right, each op rounded (no contraction) */
        const double n2 = __dadd_rn(__dadd_rn((double)w_sq[o], __dmul_rn(__dmul_rn(2.0, s), cross)),
                                    __dmul_rn(__dmul_rn(s, s), quad));
        wnorm[o] = (float)sqrt(n2 > 0.0 ? n2 : 0.0); /* cancellation can leave a tiny negative */
    }
}

/* One element of the magnitude pass (ref_dora_forward's formula, each operation rounded as written):
 * from y (the base output, its bias b included) and sl = s·l, the output y + ((mns − 1)·base +
 * mns·sl) and the pre-magnitude z = base + sl, base = y − b. The passes below store them as bf16. */
__device__ __forceinline__ void dora_element(float y, float b, bool has_bias, float mns, float sl, float &out,
                                             float &z) {
    const float base = has_bias ? __fsub_rn(y, b) : y;
    const float delta = __fadd_rn(__fmul_rn(__fsub_rn(mns, 1.0f), base), __fmul_rn(mns, sl));
    out = __fadd_rn(y, delta);
    z = __fadd_rn(base, sl);
}

/* y = bf16(y + ((mns−1)·base + mns·sl)), z = bf16(base + sl), base = y − b (dora_element). */
template <int VW>
__global__ void __launch_bounds__(kBlock) dora_forward_scale(bf16 *y, bf16 *z, const float *sl, const bf16 *bias,
                                                             const float *mag, const float *wnorm, int64_t n,
                                                             int C_out) {
    const int64_t i = ((int64_t)blockIdx.x * kBlock + threadIdx.x) * VW;
    if (i >= n) return;
    float yv[VW], bv[VW] = {}, out[VW], zv[VW];
    refine::load_bf16<VW>(yv, y + i);
    const int o0 = (int)(i % C_out); /* VW columns of one row: C_out % VW == 0 */
    if (bias) refine::load_bf16<VW>(bv, bias + o0);
#pragma unroll
    for (int j = 0; j < VW; j++)
        dora_element(yv[j], bv[j], bias, __fdiv_rn(mag[o0 + j], wnorm[o0 + j]), sl[i + j], out[j], zv[j]);
    refine::store_bf16<VW>(y + i, out);
    if (z) refine::store_bf16<VW>(z + i, zv);
}

/* The fused forward: s·l formed in registers, then the elementwise pass's formulas above.
 * RP: R rounded up to 8, 16, 32 or 64; B's rows (in registers) and u's (in shared memory) are zero
 * beyond R, so every row runs RP multiply-adds and the extra ones add exact zeros; u's rows are
 * widened to fp32 as they are staged. VEC: bf16x2
 * accesses of y, z and bias (C_out even, 4-byte aligned) and 16-byte reads of u (R % 8 == 0,
 * 16-byte aligned); else element accesses. blockDim (32, kFusedRowThreads): x → a column pair of
 * the block's 64 columns, y → rows step + y + kFusedRowThreads·k (k < kFusedBatch) of each 64-row
 * step of its rows_per_block-row tile. The block's B rows (64 × R, contiguous) come in once through
 * shared memory, coalesced; each step's u rows (64 × R, contiguous) likewise, after the step's y
 * loads are issued, so that all of a thread's kFusedBatch loads are in flight together (row
 * indices past the end are clamped for the loads, and their results not stored). */
constexpr int kFusedMaxR = 64;
constexpr int kFusedRowThreads = 8;
constexpr int kFusedBatch = 8; /* rows whose loads are issued together */
constexpr int kFusedRowStep = kFusedRowThreads * kFusedBatch;

/* three resident blocks an SM where B's registers allow (R ≤ 16: 80 registers, a few bytes
 * spilled), for more loads in flight: 68% of copy against 58% at two (1B gate_up, H100) */
template <int RP, bool VEC>
__global__ void __launch_bounds__(32 * kFusedRowThreads, RP <= 16 ? 3 : 1)
    dora_forward_fused(bf16 *__restrict__ y, bf16 *__restrict__ z, const bf16 *__restrict__ u,
                       const bf16 *__restrict__ lora_b, const bf16 *__restrict__ bias, const float *__restrict__ mag,
                       const float *__restrict__ wnorm, float s, int N, int C_out, int R, int ldu,
                       int rows_per_block) {
    __shared__ float sb[64][RP + 1];
    __shared__ __align__(16) float su[kFusedRowStep][RP]; /* converted once here, not once per thread */
    const int tid = threadIdx.y * 32 + threadIdx.x;
    const int c0 = blockIdx.x * 64;
    const int tile_cols = min(64, C_out - c0);
    for (int i = tid; i < 64 * RP; i += 32 * kFusedRowThreads) {
        const int c = i / RP, r = i % RP;
        sb[c][r] = c < tile_cols && r < R ? __bfloat162float(lora_b[(int64_t)(c0 + c) * R + r]) : 0.0f;
    }
    __syncthreads();
    const int o0 = c0 + threadIdx.x * 2;
    const bool active = o0 < C_out; /* inactive threads still take part in the barriers */
    const bool has1 = o0 + 1 < C_out;
    const int o1 = has1 ? o0 + 1 : o0; /* a lone last column computes o0 twice and stores once */
    const int oc = active ? o0 : c0;   /* a column to read that exists */
    float b0[RP], b1[RP];
#pragma unroll
    for (int r = 0; r < RP; r++) b0[r] = sb[threadIdx.x * 2][r], b1[r] = sb[threadIdx.x * 2 + (has1 ? 1 : 0)][r];
    const float mns0 = active ? __fdiv_rn(mag[o0], wnorm[o0]) : 0.0f;
    const float mns1 = active ? __fdiv_rn(mag[o1], wnorm[o1]) : 0.0f;
    const float bv0 = bias && active ? __bfloat162float(bias[o0]) : 0.0f;
    const float bv1 = bias && active ? __bfloat162float(bias[o1]) : 0.0f;
    const int n_begin = blockIdx.y * rows_per_block;
    const int n_end = (int)min((int64_t)N, (int64_t)n_begin + rows_per_block);
    for (int step = n_begin; step < n_end; step += kFusedRowStep) {
        float y0[kFusedBatch], y1[kFusedBatch];
#pragma unroll
        for (int k = 0; k < kFusedBatch; k++) {
            const int n = min(step + threadIdx.y + k * kFusedRowThreads, n_end - 1);
            const int64_t e = (int64_t)n * C_out + oc;
            if (VEC) {
                const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(y + e));
                y0[k] = f.x, y1[k] = f.y;
            } else {
                y0[k] = __bfloat162float(y[e]);
                y1[k] = __bfloat162float(y[e + (has1 ? 1 : 0)]);
            }
        }
        __syncthreads(); /* the previous step's readers of su are done */
        if (VEC) {
            for (int i = tid; i < kFusedRowStep * (RP / 8); i += 32 * kFusedRowThreads) {
                const int row = i / (RP / 8), c8 = (i % (RP / 8)) * 8;
                const int n = min(step + row, N - 1);
                float v[8] = {};
                if (c8 < R) refine::load_bf16<8>(v, u + (int64_t)n * ldu + c8);
                *reinterpret_cast<float4 *>(&su[row][c8]) = make_float4(v[0], v[1], v[2], v[3]);
                *reinterpret_cast<float4 *>(&su[row][c8 + 4]) = make_float4(v[4], v[5], v[6], v[7]);
            }
        } else {
            for (int i = tid; i < kFusedRowStep * RP; i += 32 * kFusedRowThreads) {
                const int row = i / RP, r = i % RP;
                const int n = min(step + row, N - 1);
                su[row][r] = r < R ? __bfloat162float(u[(int64_t)n * ldu + r]) : 0.0f;
            }
        }
        __syncthreads();
        float a0[kFusedBatch], a1[kFusedBatch];
#pragma unroll
        for (int k = 0; k < kFusedBatch; k++) {
            /* s·l = s · Σ_r u[n,r]·B[o,r], r in order, fp32 (gemm's alpha applied after the sum) */
            a0[k] = a1[k] = 0.0f;
            const float *ur = &su[threadIdx.y + k * kFusedRowThreads][0];
#pragma unroll
            for (int r4 = 0; r4 < RP; r4 += 4) {
                const float4 q = *reinterpret_cast<const float4 *>(ur + r4); /* one address across the warp */
                const float uv[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    a0[k] = __fmaf_rn(uv[j], b0[r4 + j], a0[k]);
                    a1[k] = __fmaf_rn(uv[j], b1[r4 + j], a1[k]);
                }
            }
        }
#pragma unroll
        for (int k = 0; k < kFusedBatch; k++) {
            const int n = step + threadIdx.y + k * kFusedRowThreads;
            if (!active || n >= n_end) continue;
            const int64_t e = (int64_t)n * C_out + o0;
            float out[2], zv[2];
            const float yv[2] = {y0[k], y1[k]}, acc[2] = {a0[k], a1[k]}, mns[2] = {mns0, mns1}, bv[2] = {bv0, bv1};
#pragma unroll
            for (int j = 0; j < 2; j++) dora_element(yv[j], bv[j], bias, mns[j], __fmul_rn(s, acc[j]), out[j], zv[j]);
            if (VEC) {
                *reinterpret_cast<__nv_bfloat162 *>(y + e) = __floats2bfloat162_rn(out[0], out[1]);
                if (z) *reinterpret_cast<__nv_bfloat162 *>(z + e) = __floats2bfloat162_rn(zv[0], zv[1]);
            } else {
                y[e] = __float2bfloat16_rn(out[0]);
                if (z) z[e] = __float2bfloat16_rn(zv[0]);
                if (has1) {
                    y[e + 1] = __float2bfloat16_rn(out[1]);
                    if (z) z[e + 1] = __float2bfloat16_rn(zv[1]);
                }
            }
        }
    }
}

/* The magnitude pass's epilogue for gpu/adapter_mma.cuh (the tensor-core pass): dora_element on y and
 * s·l, y and z written. */
struct dora_mma_epi : refine::adapter_epi_no_reads {
    bf16 *y, *z;
    const bf16 *bias;
    const float *mag, *wnorm;
    float mns[8], bv[8];
    __device__ __forceinline__ void columns(int oc) {
#pragma unroll
        for (int e = 0; e < 8; e++) {
            mns[e] = __fdiv_rn(mag[oc + e], wnorm[oc + e]);
            bv[e] = bias ? __bfloat162float(bias[oc + e]) : 0.0f;
        }
    }
    __device__ __forceinline__ void row(float (&yv)[8], const float (&sl)[8], int64_t e, int, int, const Pre &) {
        float out[8], zv[8];
#pragma unroll
        for (int c = 0; c < 8; c++) dora_element(yv[c], bv[c], bias, mns[c], sl[c], out[c], zv[c]);
        refine::store_bf16<8>(y + e, out);
        if (z) refine::store_bf16<8>(z + e, zv);
    }
};

template <int RP>
void launch_fused(bool vec, bf16 *y, bf16 *z, const bf16 *u, int ldu, const bf16 *lora_b, const bf16 *bias,
                  const float *mag, const float *wnorm, float s, int N, int C_out, int R, cudaStream_t stream) {
    /* about 2048 blocks (several waves of two resident blocks on each SM), at least one row step each */
    const int col_tiles = (C_out + 63) / 64;
    const int64_t row_tiles_wanted = (2048 + col_tiles - 1) / col_tiles;
    int64_t rows = (N + row_tiles_wanted - 1) / row_tiles_wanted;
    rows = (rows + kFusedRowStep - 1) / kFusedRowStep * kFusedRowStep;
    const int rows_per_block = (int)rows;
    const dim3 grid((unsigned)col_tiles, (unsigned)((N + rows - 1) / rows));
    const dim3 block(32, kFusedRowThreads);
    if (vec)
        dora_forward_fused<RP, true>
            <<<grid, block, 0, stream>>>(y, z, u, lora_b, bias, mag, wnorm, s, N, C_out, R, ldu, rows_per_block);
    else
        dora_forward_fused<RP, false>
            <<<grid, block, 0, stream>>>(y, z, u, lora_b, bias, mag, wnorm, s, N, C_out, R, ldu, rows_per_block);
}

/* The rescale passes' threads (dora_rescale_chunks, dora_swiglu_rescale_chunks): a block takes one
 * 32-row chunk and 32 column groups of VW columns; warp `sub` (threadIdx.y) sums rows chunk·32 +
 * 8·sub … + 7 of lane x's group in order (double), and the chunk's partial sum is
 * ((sub 0 + 1) + (2 + 3)) through shared memory — a fixed order. Four threads a column group and
 * eight rows each keep 4× the loads in flight of one thread walking the 32 rows (the narrow widths'
 * limit: at C_out 2048 that left 256 blocks), and each warp's loads stay 32·VW contiguous columns of
 * one row. blockIdx.x → 32·VW columns, blockIdx.y → the chunk. */
struct rescale_lane {
    int o0, chunk, r0, r1, sub;
    bool cols;
    __device__ rescale_lane(int N, int C_out, int VW) {
        sub = threadIdx.y;
        o0 = (blockIdx.x * 32 + threadIdx.x) * VW;
        chunk = blockIdx.y;
        r0 = chunk * kChunkRows + sub * kSubRows;
        r1 = min(r0 + kSubRows, N);
        cols = o0 < C_out; /* C_out % VW == 0: all VW columns or none */
    }
};

/* The chunk's partial sums of the block's four parts into part[chunk][o0 + j]; every thread of the
 * block takes part (a barrier). sh: the block's kSubLanes × VW × 32 doubles. */
template <int VW>
__device__ __forceinline__ void chunk_store(double *part, double (*sh)[VW][32], const double (&acc)[VW],
                                            const rescale_lane &L, int C_out) {
#pragma unroll
    for (int j = 0; j < VW; j++) sh[L.sub][j][threadIdx.x] = acc[j];
    __syncthreads();
    if (L.sub != 0 || !L.cols) return;
#pragma unroll
    for (int j = 0; j < VW; j++)
        part[(int64_t)L.chunk * C_out + L.o0 + j] =
            (sh[0][j][threadIdx.x] + sh[1][j][threadIdx.x]) + (sh[2][j][threadIdx.x] + sh[3][j][threadIdx.x]);
}

/* 16 bytes as loaded, and their 8 bf16 widened as load_bf16<8> widens them (the same values). */
__device__ __forceinline__ uint4 load16(const bf16 *p) { return *reinterpret_cast<const uint4 *>(p); }
__device__ __forceinline__ void widen8(float (&v)[8], const uint4 &raw) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 f = __bfloat1622float2(h[j]);
        v[2 * j] = f.x, v[2 * j + 1] = f.y;
    }
}

/* Rows a thread of the rescale passes loads before it computes any of them (8-wide path, a whole
 * 8-row part): a row's loads no longer wait for the previous row's stores, so each thread keeps
 * kLoadBatch rows of loads in flight instead of one. The rows are then formed in order, as before. */
constexpr int kLoadBatch = 4;

/* One row of dora_rescale_chunks: out = bf16(mns⊙g), acc += g·v. */
template <int VW>
__device__ __forceinline__ void rescale_row(bf16 *dy_s, int64_t e, const float (&g)[VW], const float (&sv)[VW],
                                            bool partial, const float (&mns)[VW], double (&acc)[VW]) {
    float out[VW];
    if (partial) {
#pragma unroll
        for (int j = 0; j < VW; j++) acc[j] += (double)g[j] * (double)sv[j]; /* exact product */
    }
#pragma unroll
    for (int j = 0; j < VW; j++) out[j] = __fmul_rn(mns[j], g[j]);
    refine::store_bf16<VW>(dy_s + e, out);
}

/* dy_s = bf16(mns⊙dy); partial[chunk][o] = Σ_{n in chunk} dy·v (double, rescale_lane's order), v the
 * saved z or y. */
template <int VW>
__global__ void __launch_bounds__(32 * kSubLanes)
    dora_rescale_chunks(bf16 *dy_s, double *partial, const bf16 *__restrict__ dy, const bf16 *__restrict__ v,
                        const float *mag, const float *wnorm, int N, int C_out) {
    const rescale_lane L(N, C_out, VW);
    float mns[VW];
    double acc[VW];
#pragma unroll
    for (int j = 0; j < VW; j++) mns[j] = L.cols ? __fdiv_rn(mag[L.o0 + j], wnorm[L.o0 + j]) : 0.0f, acc[j] = 0.0;
    const bool whole = VW == 8 && L.cols && L.r1 - L.r0 == kSubRows;
    if constexpr (VW == 8) {
        if (whole) {
#pragma unroll
            for (int h = 0; h < kSubRows; h += kLoadBatch) {
                uint4 rg[kLoadBatch], rv[kLoadBatch];
#pragma unroll
                for (int i = 0; i < kLoadBatch; i++) {
                    const int64_t e = (int64_t)(L.r0 + h + i) * C_out + L.o0;
                    rg[i] = load16(dy + e);
                    if (partial) rv[i] = load16(v + e);
                }
#pragma unroll
                for (int i = 0; i < kLoadBatch; i++) {
                    float g[8], sv[8];
                    widen8(g, rg[i]);
                    if (partial) widen8(sv, rv[i]);
                    rescale_row<8>(dy_s, (int64_t)(L.r0 + h + i) * C_out + L.o0, g, sv, partial != nullptr, mns, acc);
                }
            }
        }
    }
    if (!whole) {
#pragma unroll
        for (int i = 0; i < kSubRows; i++) {
            const int r = L.r0 + i;
            if (!L.cols || r >= L.r1) break;
            const int64_t e = (int64_t)r * C_out + L.o0;
            float g[VW], sv[VW];
            refine::load_bf16<VW>(g, dy + e);
            if (partial) refine::load_bf16<VW>(sv, v + e);
            rescale_row<VW>(dy_s, e, g, sv, partial != nullptr, mns, acc);
        }
    }
    if (!partial) return; /* uniform: the whole grid takes the same branch */
    __shared__ double sh[kSubLanes][VW][32];
    chunk_store<VW>(partial, sh, acc, L, C_out);
}

/* The SwiGLU backward with the gate and up linears' rescale (gpu_dora_swiglu_backward_bf16): per side,
 * dg (du) rounded to bf16 as gpu/swiglu stores it, then dora_rescale_chunks' steps on that value —
 * the same layout, chunks and partial sums, so every bit equals the two passes'. FROM_Y: the partial
 * sums take the gate and up outputs this pass reads anyway (DORA_SAVED_Y), no z. A side without a
 * magnitude (not a DoRA target) stores the rounded gradient as gpu/swiglu does. */
template <int VW, bool FROM_Y>
__global__ void __launch_bounds__(32 * kSubLanes)
    dora_swiglu_rescale_chunks(bf16 *gate, bf16 *up, double *part_g, double *part_u, const bf16 *__restrict__ dh,
                               const bf16 *__restrict__ z_g, const bf16 *__restrict__ z_u, const float *mag_g,
                               const float *wn_g, const float *mag_u, const float *wn_u, int N, int F) {
    const rescale_lane L(N, F, VW);
    float mg[VW], mu[VW];
    double ag[VW], au[VW];
#pragma unroll
    for (int j = 0; j < VW; j++) {
        mg[j] = mag_g && L.cols ? __fdiv_rn(mag_g[L.o0 + j], wn_g[L.o0 + j]) : 1.0f;
        mu[j] = mag_u && L.cols ? __fdiv_rn(mag_u[L.o0 + j], wn_u[L.o0 + j]) : 1.0f;
        ag[j] = au[j] = 0.0;
    }
#pragma unroll 4
    for (int i = 0; i < kSubRows; i++) {
        const int r = L.r0 + i;
        if (!L.cols || r >= L.r1) break;
        const int64_t e = (int64_t)r * F + L.o0; /* (the loop's break is per thread: no barrier inside) */
        float gv[VW], uv[VW], dhv[VW], zg[VW], zu[VW];
        refine::load_bf16<VW>(gv, gate + e);
        refine::load_bf16<VW>(uv, up + e);
        refine::load_bf16<VW>(dhv, dh + e);
        if (FROM_Y) {
#pragma unroll
            for (int j = 0; j < VW; j++) zg[j] = gv[j], zu[j] = uv[j];
        } else {
            if (part_g) refine::load_bf16<VW>(zg, z_g + e);
            if (part_u) refine::load_bf16<VW>(zu, z_u + e);
        }
        float sg[VW], si[VW];
        refine::sigmoid_silu<VW>(gv, sg, si);
#pragma unroll
        for (int j = 0; j < VW; j++) {
            float dg, du;
            refine::swiglu_backward_sig(gv[j], uv[j], dhv[j], sg[j], si[j], dg, du);
            dg = refine::bf16_round_dev(dg), du = refine::bf16_round_dev(du); /* gpu/swiglu's stores */
            if (part_g) ag[j] += (double)dg * (double)zg[j];
            if (part_u) au[j] += (double)du * (double)zu[j];
            gv[j] = mag_g ? __fmul_rn(mg[j], dg) : dg;
            uv[j] = mag_u ? __fmul_rn(mu[j], du) : du;
        }
        refine::store_bf16<VW>(gate + e, gv);
        refine::store_bf16<VW>(up + e, uv);
    }
    __shared__ double sh[kSubLanes][VW][32];
    if (part_g) chunk_store<VW>(part_g, sh, ag, L, F); /* uniform across the grid, as below */
    if (part_g && part_u) __syncthreads();                /* sh is read before it is refilled */
    if (part_u) chunk_store<VW>(part_u, sh, au, L, F);
}

/* dm[o] += (Σ_chunks partial[c][o]) / den[o], den: n (the partial sums of dy·z) or m (of dy·y).
 * blockDim (kFinishCols, kFinishLanes): lane j adds chunks j, j + kFinishLanes, … in order, then
 * lane 0 adds the lanes' sums in lane order — a fixed order, so the result does not depend on the
 * launch. Many lanes a column: the sums are latency-bound (one L2 read each), and a thread a column
 * left C_out threads each walking all N/32 chunks (at C_out 2048: 64 warps on 8 SMs). */
constexpr int kFinishCols = 32, kFinishLanes = 8;
__global__ void __launch_bounds__(kFinishCols *kFinishLanes)
    dora_dmag_finish(float *dmag, const double *partial, const float *den, int n_chunks, int C_out) {
    __shared__ double lanes[kFinishLanes][kFinishCols];
    const int o = blockIdx.x * kFinishCols + threadIdx.x;
    double s = 0.0;
    if (o < C_out)
        for (int c = threadIdx.y; c < n_chunks; c += kFinishLanes) s += partial[(int64_t)c * C_out + o];
    lanes[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || o >= C_out) return;
    s = lanes[0][threadIdx.x];
#pragma unroll
    for (int j = 1; j < kFinishLanes; j++) s += lanes[j][threadIdx.x];
    /* ref: dmag = (float)((double)dmag + s / (double)den) */
    dmag[o] = (float)__dadd_rn((double)dmag[o], __ddiv_rn(s, (double)den[o]));
}

void launch_finish(float *dmag, const double *partial, const float *den, int n_chunks, int C_out,
                   cudaStream_t stream) {
    dora_dmag_finish<<<(C_out + kFinishCols - 1) / kFinishCols, dim3(kFinishCols, kFinishLanes), 0, stream>>>(
        dmag, partial, den, n_chunks, C_out);
    KERNEL_CHECK(stream);
}

void check_kind(enum dora_saved kind) {
    CHECK(kind == DORA_SAVED_Z || kind == DORA_SAVED_Y, "dora: saved kind %d", (int)kind);
}

/* What the chunk sums are divided by: n for the sums of dy·z, m for those of dy·y (z/n = y/m). */
const float *den_of(enum dora_saved kind, const float *mag, const float *wnorm) {
    return kind == DORA_SAVED_Z ? wnorm : mag;
}

/* The rescale passes' grid (rescale_lane): 32·VW columns and one 32-row chunk a block. */
dim3 rescale_grid(int C_out, int chunks, int VW) { return dim3((unsigned)((C_out + 32 * VW - 1) / (32 * VW)), chunks); }

void check_dims(int N, int C_in, int C_out, int R) {
    CHECK(N >= 1 && C_in >= 1 && C_out >= 1 && R >= 1, "dora: N=%d C_in=%d C_out=%d R=%d must be >= 1", N, C_in,
          C_out, R);
}

void check_ws(const void *ws, size_t need, const char *what) {
    CHECK(ws != nullptr && (uintptr_t)ws % kAlign == 0, "dora %s: workspace of %zu bytes, 256-byte aligned, required",
          what, need);
}

bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }
bool aligned8(const void *p) { return (uintptr_t)p % 8 == 0; }

}  // namespace

extern "C" void gpu_dora_weight_sq_f32(float *w_sq, const uint16_t *w, int64_t ldw, int C_in, int C_out,
                                       cudaStream_t stream) {
    check_dims(1, C_in, C_out, 1);
    CHECK(ldw >= C_in, "gpu_dora_weight_sq_f32: row stride %lld < C_in %d", (long long)ldw, C_in);
    dora_weight_sq_block_per_row<<<C_out, kBlock, 0, stream>>>(w_sq, reinterpret_cast<const bf16 *>(w), ldw, C_in);
    KERNEL_CHECK(stream);
}

extern "C" void gpu_dora_scale_weight_bf16(uint16_t *w_s, const uint16_t *w, int64_t ldw, const float *mag,
                                           const float *wnorm, int C_out, int K, cudaStream_t stream) {
    CHECK(C_out >= 1 && K >= 1 && ldw >= K, "gpu_dora_scale_weight_bf16: C_out=%d K=%d ldw=%lld (need >= 1, K <= ldw)",
          C_out, K, (long long)ldw);
    const bool vec = K % 8 == 0 && ldw % 8 == 0 && aligned16(w) && aligned16(w_s);
    const int64_t n = (int64_t)C_out * (vec ? K / 8 : K);
    auto kernel = vec ? dora_scale_weight_rows<8> : dora_scale_weight_rows<1>;
    kernel<<<(unsigned)((n + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
        reinterpret_cast<bf16 *>(w_s), reinterpret_cast<const bf16 *>(w), ldw, mag, wnorm, C_out, K);
    KERNEL_CHECK(stream);
}

extern "C" size_t gpu_dora_weight_norm_workspace_size(int C_out, int R) {
    return align_up((size_t)C_out * R * sizeof(float)) + align_up((size_t)R * R * sizeof(float));
}

extern "C" void gpu_dora_weight_norm_f32(struct gpu_gemm *g, float *wnorm, const float *w_sq, const uint16_t *w,
                                         int64_t ldw, const uint16_t *lora_a, const uint16_t *lora_b, int C_in,
                                         int C_out, int R, float scale, void *workspace, cudaStream_t stream) {
    check_dims(1, C_in, C_out, R);
    CHECK(ldw >= C_in, "gpu_dora_weight_norm_f32: row stride %lld < C_in %d", (long long)ldw, C_in);
    check_ws(workspace, gpu_dora_weight_norm_workspace_size(C_out, R), "weight norm");
    float *wa = static_cast<float *>(workspace);
    float *aa = reinterpret_cast<float *>(static_cast<unsigned char *>(workspace) +
                                          align_up((size_t)C_out * R * sizeof(float)));
    /* W Aᵀ (C_out, R) and A Aᵀ (R, R), fp32 */
    const gemm_args p_wa = {wa,      GEMM_OUT_F32, R,     0, w,     GEMM_NO_TRANS, ldw,  0, lora_a, GEMM_TRANS,
                            C_in,    0,            nullptr, C_out, R, C_in,        1,    1.0f, GEMM_OVERWRITE};
    const gemm_args p_aa = {aa,   GEMM_OUT_F32, R,       0, lora_a, GEMM_NO_TRANS, C_in, 0, lora_a, GEMM_TRANS,
                            C_in, 0,            nullptr, R, R,      C_in,          1,    1.0f, GEMM_OVERWRITE};
    gpu_gemm(g, &p_wa, stream);
    gpu_gemm(g, &p_aa, stream);
    const int rows_per_block = kBlock / 32;
    dora_norm_warp_per_row<<<(C_out + rows_per_block - 1) / rows_per_block, kBlock, 0, stream>>>(
        wnorm, w_sq, wa, aa, reinterpret_cast<const bf16 *>(lora_b), C_out, R, (double)scale);
    KERNEL_CHECK(stream);
}

extern "C" size_t gpu_dora_forward_workspace_size(int N, int C_out, int R) {
    return R <= kFusedMaxR ? 0 : align_up((size_t)N * C_out * sizeof(float));
}

static bool aligned4(const void *p) { return (uintptr_t)p % 4 == 0; }

extern "C" void gpu_dora_forward_bf16(struct gpu_gemm *g, uint16_t *y, uint16_t *z, uint16_t *u, const uint16_t *x,
                                      const uint16_t *bias, const uint16_t *lora_a, const uint16_t *lora_b,
                                      const float *mag, const float *wnorm, int N, int C_in, int C_out, int R,
                                      float scale, void *workspace, cudaStream_t stream) {
    check_dims(N, C_in, C_out, R);
    gpu_lora_u_bf16(g, u, x, lora_a, N, C_in, R, stream); /* u (N, R) = x Aᵀ, LoRA's own product */
    gpu_dora_scale_bf16(g, y, z, u, R, bias, lora_b, mag, wnorm, N, C_out, R, scale, workspace, stream);
}

extern "C" void gpu_dora_scale_bf16(struct gpu_gemm *g, uint16_t *y, uint16_t *z, const uint16_t *u, int ldu,
                                    const uint16_t *bias, const uint16_t *lora_b, const float *mag, const float *wnorm,
                                    int N, int C_out, int R, float scale, void *workspace, cudaStream_t stream) {
    check_dims(N, 1, C_out, R);
    CHECK(ldu >= R, "dora: u's row stride %d is less than R = %d", ldu, R);
    bf16 *yb = reinterpret_cast<bf16 *>(y), *zb = reinterpret_cast<bf16 *>(z);
    const bf16 *bb = reinterpret_cast<const bf16 *>(bias);
    if (refine::adapter_mma_fits(C_out, R, ldu, u, lora_b, y) && aligned16(z)) {
        const dora_mma_epi epi = {{}, yb, zb, bb, mag, wnorm, {}, {}};
        refine::adapter_mma_launch(yb, reinterpret_cast<const bf16 *>(u), ldu, reinterpret_cast<const bf16 *>(lora_b),
                                   R, scale, N, C_out, R, epi, stream);
        KERNEL_CHECK(stream);
        return;
    }
    if (R <= kFusedMaxR) {
        const bf16 *ub = reinterpret_cast<const bf16 *>(u), *lb = reinterpret_cast<const bf16 *>(lora_b);
        const bool vec = C_out % 2 == 0 && aligned4(y) && aligned4(z) && aligned4(bias) && R % 8 == 0 &&
                         ldu % 8 == 0 && aligned16(u);
        if (R <= 8)
            launch_fused<8>(vec, yb, zb, ub, ldu, lb, bb, mag, wnorm, scale, N, C_out, R, stream);
        else if (R <= 16)
            launch_fused<16>(vec, yb, zb, ub, ldu, lb, bb, mag, wnorm, scale, N, C_out, R, stream);
        else if (R <= 32)
            launch_fused<32>(vec, yb, zb, ub, ldu, lb, bb, mag, wnorm, scale, N, C_out, R, stream);
        else
            launch_fused<64>(vec, yb, zb, ub, ldu, lb, bb, mag, wnorm, scale, N, C_out, R, stream);
        KERNEL_CHECK(stream);
        return;
    }
    check_ws(workspace, gpu_dora_forward_workspace_size(N, C_out, R), "forward");
    float *sl = static_cast<float *>(workspace);
    /* sl (N, C_out) = s · u Bᵀ (fp32) */
    const gemm_args p_l = {sl, GEMM_OUT_F32, C_out, 0, u, GEMM_NO_TRANS, ldu, 0, lora_b, GEMM_TRANS, R, 0, nullptr,
                           N, C_out, R, 1, scale, GEMM_OVERWRITE};
    gpu_gemm(g, &p_l, stream);
    const int64_t n = (int64_t)N * C_out;
    if (C_out % 8 == 0 && aligned16(y) && aligned16(z) && aligned16(bias) && aligned16(sl)) {
        const int64_t threads = n / 8;
        dora_forward_scale<8><<<(unsigned)((threads + kBlock - 1) / kBlock), kBlock, 0, stream>>>(yb, zb, sl, bb, mag,
                                                                                                    wnorm, n, C_out);
    } else {
        dora_forward_scale<1><<<(unsigned)((n + kBlock - 1) / kBlock), kBlock, 0, stream>>>(yb, zb, sl, bb, mag, wnorm,
                                                                                               n, C_out);
    }
    KERNEL_CHECK(stream);
}

static int n_chunks_of(int N) { return (N + kChunkRows - 1) / kChunkRows; }

extern "C" size_t gpu_dora_rescale_workspace_size(int N, int C_out) {
    return align_up((size_t)n_chunks_of(N) * C_out * sizeof(double));
}

extern "C" void gpu_dora_rescale_bf16(uint16_t *dy_s, float *dmag, const uint16_t *dy, const uint16_t *saved,
                                      enum dora_saved kind, const float *mag, const float *wnorm, int N, int C_out,
                                      void *workspace, cudaStream_t stream) {
    check_dims(N, 1, C_out, 1);
    check_kind(kind);
    CHECK(!dmag || saved, "dora rescale: dmag needs the saved pre-magnitude output z or the output y");
    const bf16 *sv = reinterpret_cast<const bf16 *>(saved);
    if (dmag) check_ws(workspace, gpu_dora_rescale_workspace_size(N, C_out), "rescale");
    double *partial = dmag ? static_cast<double *>(workspace) : nullptr;
    const int chunks = n_chunks_of(N);
    const bool vec = C_out % 8 == 0 && aligned16(dy_s) && aligned16(dy) && aligned16(saved);
    const dim3 grid = rescale_grid(C_out, chunks, vec ? 8 : 1), block(32, kSubLanes);
    bf16 *out = reinterpret_cast<bf16 *>(dy_s);
    const bf16 *dyb = reinterpret_cast<const bf16 *>(dy);
    if (vec)
        dora_rescale_chunks<8><<<grid, block, 0, stream>>>(out, partial, dyb, sv, mag, wnorm, N, C_out);
    else
        dora_rescale_chunks<1><<<grid, block, 0, stream>>>(out, partial, dyb, sv, mag, wnorm, N, C_out);
    KERNEL_CHECK(stream);
    if (dmag) launch_finish(dmag, partial, den_of(kind, mag, wnorm), chunks, C_out, stream);
}

extern "C" size_t gpu_dora_swiglu_backward_workspace_size(int N, int F) {
    return 2 * gpu_dora_rescale_workspace_size(N, F);
}

extern "C" void gpu_dora_swiglu_backward_bf16(uint16_t *gate, uint16_t *up, float *dmag_g, float *dmag_u,
                                              const uint16_t *dh, const uint16_t *z_g, const uint16_t *z_u,
                                              enum dora_saved kind, const float *mag_g, const float *wnorm_g,
                                              const float *mag_u, const float *wnorm_u, int N, int F,
                                              void *workspace, cudaStream_t stream) {
    check_dims(N, 1, F, 1);
    check_kind(kind);
    const bool from_y = kind == DORA_SAVED_Y;
    CHECK(!from_y || (!z_g && !z_u), "dora swiglu backward: z given with DORA_SAVED_Y (the outputs serve)");
    CHECK((!dmag_g || (mag_g && (from_y || z_g))) && (!dmag_u || (mag_u && (from_y || z_u))),
          "dora swiglu backward: a magnitude gradient needs its magnitude and the saved pre-magnitude output z");
    if (dmag_g || dmag_u) check_ws(workspace, gpu_dora_swiglu_backward_workspace_size(N, F), "swiglu backward");
    const size_t half = gpu_dora_rescale_workspace_size(N, F);
    double *part_g = dmag_g ? static_cast<double *>(workspace) : nullptr;
    double *part_u = dmag_u ? reinterpret_cast<double *>(static_cast<unsigned char *>(workspace) + half) : nullptr;
    const int chunks = n_chunks_of(N);
    /* 4 columns a thread (8-byte accesses), not 8: 72 registers instead of 128, so 7 blocks an SM are
     * resident instead of 4 and the pass's long per-element chains (two exponentials, two IEEE
     * divisions, four conversions to double) overlap more — 395 µs against 450 at Llama-3.2-1B's
     * N 8192, F 8192 (dora_parity --bench, H100; the plain SwiGLU backward: 254) */
    const bool vec = F % 4 == 0 && aligned8(gate) && aligned8(up) && aligned8(dh) && aligned8(z_g) && aligned8(z_u);
    const dim3 grid = rescale_grid(F, chunks, vec ? 4 : 1), block(32, kSubLanes);
    bf16 *gb = reinterpret_cast<bf16 *>(gate), *ub = reinterpret_cast<bf16 *>(up);
    const bf16 *dhb = reinterpret_cast<const bf16 *>(dh), *zgb = reinterpret_cast<const bf16 *>(z_g),
               *zub = reinterpret_cast<const bf16 *>(z_u);
    /* (vector width, from y): the kernel's four forms */
    auto kernel = vec ? (from_y ? dora_swiglu_rescale_chunks<4, true> : dora_swiglu_rescale_chunks<4, false>)
                      : (from_y ? dora_swiglu_rescale_chunks<1, true> : dora_swiglu_rescale_chunks<1, false>);
    kernel<<<grid, block, 0, stream>>>(gb, ub, part_g, part_u, dhb, zgb, zub, mag_g, wnorm_g, mag_u, wnorm_u, N, F);
    KERNEL_CHECK(stream);
    if (dmag_g) launch_finish(dmag_g, part_g, den_of(kind, mag_g, wnorm_g), chunks, F, stream);
    if (dmag_u) launch_finish(dmag_u, part_u, den_of(kind, mag_u, wnorm_u), chunks, F, stream);
}

extern "C" size_t gpu_dora_backward_workspace_size(int N, int C_in, int C_out, int R) {
    return align_up((size_t)N * C_out * sizeof(uint16_t)) + gpu_dora_rescale_workspace_size(N, C_out) +
           gpu_lora_backward_workspace_size(N, C_in, R, LORA_NO_MASK);
}

extern "C" void gpu_dora_backward_bf16(struct gpu_gemm *g, uint16_t *dx, float *dmag, float *dlora_a,
                                       float *dlora_b, const uint16_t *dy, const uint16_t *x, const uint16_t *z,
                                       const uint16_t *u, const uint16_t *w, const uint16_t *lora_a,
                                       const uint16_t *lora_b, const float *mag, const float *wnorm, int N, int C_in,
                                       int C_out, int R, float scale, void *workspace, cudaStream_t stream) {
    check_dims(N, C_in, C_out, R);
    check_ws(workspace, gpu_dora_backward_workspace_size(N, C_in, C_out, R), "backward");
    unsigned char *ws = static_cast<unsigned char *>(workspace);
    uint16_t *dy_s = reinterpret_cast<uint16_t *>(ws);
    ws += align_up((size_t)N * C_out * sizeof(uint16_t));
    void *ws_rescale = ws;
    ws += gpu_dora_rescale_workspace_size(N, C_out);
    gpu_dora_rescale_bf16(dy_s, dmag, dy, z, DORA_SAVED_Z, mag, wnorm, N, C_out, ws_rescale, stream);
    if (dx) gpu_linear_backward_dx_bf16(g, dx, dy_s, w, N, C_in, C_out, GEMM_OVERWRITE, stream);
    if (dx || dlora_a || dlora_b)
        gpu_lora_backward_bf16(g, dx, dlora_a, dlora_b, dy_s, x, nullptr, 1.0f, u, lora_a, lora_b, N, C_in, C_out, R,
                               scale, ws, stream);
}

extern "C" void gpu_dora_reserve(struct gpu_gemm *g, int N, int C_in, int C_out, int R) {
    check_dims(N, C_in, C_out, R);
    void *d = reinterpret_cast<void *>((uintptr_t)kAlign);
    const uint16_t *h = static_cast<const uint16_t *>(d);
    /* the same argument lists as the calls above, with dummy aligned pointers */
    const gemm_args ps[] = {
        {d, GEMM_OUT_F32, R, 0, h, GEMM_NO_TRANS, C_in, 0, h, GEMM_TRANS, C_in, 0, nullptr, C_out, R, C_in, 1, 1.0f,
         GEMM_OVERWRITE}, /* W Aᵀ */
        {d, GEMM_OUT_F32, R, 0, h, GEMM_NO_TRANS, C_in, 0, h, GEMM_TRANS, C_in, 0, nullptr, R, R, C_in, 1, 1.0f,
         GEMM_OVERWRITE}, /* A Aᵀ */
        {d, GEMM_OUT_BF16, C_in, 0, h, GEMM_NO_TRANS, C_out, 0, h, GEMM_NO_TRANS, C_in, 0, nullptr, N, C_in, C_out, 1,
         1.0f, GEMM_OVERWRITE}, /* the base path dx = dy_s W */
    };
    for (const gemm_args &p : ps) gpu_gemm_reserve(g, &p);
    if (R > kFusedMaxR) { /* s·u Bᵀ through gemm */
        const gemm_args p_l = {d, GEMM_OUT_F32, C_out, 0, h, GEMM_NO_TRANS, R, 0, h, GEMM_TRANS, R, 0, nullptr,
                               N, C_out, R, 1, 1.0f, GEMM_OVERWRITE};
        gpu_gemm_reserve(g, &p_l);
    }
    gpu_lora_reserve(g, N, C_in, C_out, R, LORA_NO_MASK); /* u = x Aᵀ and the adapter's backward */
}
