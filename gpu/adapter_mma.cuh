/* adapter_mma.cuh — an adapter's rank-R product s·u Bᵀ joined to its linear's output y (N, C_out) in
 * one pass over y, on tensor cores (device code, C++): gpu/lora.cu's forward (y += s·u Bᵀ) and its
 * backward's dx += du A, and gpu/dora.cu's magnitude pass (y and z from y and s·u Bᵀ) share it,
 * each with its epilogue.
 *
 * The rank-side operand, by its layout (adapter_b_layout):
 *   ADAPTER_B_ROWS  B (C_out, R) row-major: output column c's R values are row c (lora_b in y += s·u Bᵀ)
 *   ADAPTER_B_COLS  M (R, C_out) row-major with row stride ldb: output column c's values are column
 *                   c (lora_a in dx += du A, where the "output" is dx and C_out is C_in)
 *
 * Preconditions (adapter_mma_fits): R ≤ 64 and even, C_out % 32 == 0, u's row stride ldu even, u
 * 4-byte aligned, B 4-byte aligned (ADAPTER_B_ROWS; 2-byte for ADAPTER_B_COLS), y (and the
 * epilogue's other outputs) 16-byte aligned.
 *
 * s·u Bᵀ by mma.sync.m16n8k16 (gpu/mma.cuh): u the A operand, B's rows the "col" B operand, fp32
 * accumulation in the hardware's order, zero beyond R. A warp owns 32 columns as four n-tiles whose
 * columns interleave — n-tile j's column n is c0 + 8·(n / 2) + 2j + n % 2 — so that the C fragments
 * of lane (g, t) are the 8 consecutive columns c0 + 8t … c0 + 8t + 7 of rows g and g + 8: one 16-byte
 * read of y and 16-byte writes a row. Its B fragments and the epilogue's per-column constants stay
 * in registers; it walks its block's rows 32 at a time (two 16-row tiles whose loads are issued
 * together). The grid has about 32768 blocks of four warps, so each warp takes one or a few row
 * steps: short-lived warps keep more loads in flight than long ones that wait out each step. No
 * shared memory, no barrier. KS: the k16 steps, ⌈R / 16⌉.
 *
 * The epilogue (a struct passed by value):
 *   __device__ void columns(int oc)   loads its constants of columns oc … oc + 7 (once a warp)
 *   struct Pre                        what it reads at a row besides y (registers; empty for none)
 *   __device__ void load(Pre &p, int64_t e, int r, int oc)
 *                                     issues those reads for row r, columns oc … oc + 7 — with the
 *                                     step's y loads, so that they are in flight together; a read in
 *                                     row() itself would wait out its latency after the product, and
 *                                     the stores of the rows before it keep the compiler from moving
 *                                     it up (adapter_epi_no_reads: no reads)
 *   __device__ void row(float (&y)[8], const float (&sl)[8], int64_t e, int r, int oc, const Pre &p)
 *                                     y: the 8 values of y at element e (r · ldy + oc), sl: s·(u Bᵀ)
 *                                     there (fp32, s applied after the sum); writes its outputs at e
 *                                     (or, for outputs at a stride of their own, at row r, column oc)
 * y's row stride ldy: C_out (every caller but a folded group's backward, whose dx shares its rows
 * with du: gpu/lora.h).
 */
#ifndef REFINE_GPU_ADAPTER_MMA_CUH
#define REFINE_GPU_ADAPTER_MMA_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "gpu/mma.cuh"
#include "gpu/vec.cuh"

namespace refine {

constexpr int kAdapterMmaWarps = 4;
constexpr int kAdapterMmaCols = 32;    /* a warp's columns */
constexpr int kAdapterMmaRowStep = 32; /* rows a warp takes per step: two 16-row tiles */
constexpr int kAdapterMmaMaxR = 64;

enum adapter_b_layout { ADAPTER_B_ROWS, ADAPTER_B_COLS };

/* The reads of an epilogue that reads nothing at a row but y */
struct adapter_epi_no_reads {
    struct Pre {};
    __device__ __forceinline__ void load(Pre &, int64_t, int, int) {}
};

inline bool adapter_mma_fits(int C_out, int R, int64_t ldu, const void *u, const void *lora_b, const void *y,
                             adapter_b_layout layout = ADAPTER_B_ROWS, int64_t ldy = 0) {
    return R <= kAdapterMmaMaxR && R % 2 == 0 && C_out % kAdapterMmaCols == 0 && ldu % 2 == 0 &&
           (uintptr_t)u % 4 == 0 && (uintptr_t)lora_b % (layout == ADAPTER_B_ROWS ? 4 : 2) == 0 &&
           (uintptr_t)y % 16 == 0 && ldy % 8 == 0;
}

__device__ __forceinline__ uint32_t adapter_pair_or_zero(const bf16 *row, int k, int R) {
    /* bf16 k and k + 1 of a row (R even: both in range or both out) */
    return k < R ? *reinterpret_cast<const uint32_t *>(row + k) : 0u;
}

/* The rank-side operand's values k and k + 1 for output column col, packed as one B register. */
template <adapter_b_layout L>
__device__ __forceinline__ uint32_t adapter_b_pair(const bf16 *b, int64_t ldb, int col, int k, int R) {
    if constexpr (L == ADAPTER_B_ROWS) return adapter_pair_or_zero(b + col * ldb, k, R);
    if (k >= R) return 0u;
    const uint16_t *h = reinterpret_cast<const uint16_t *>(b);
    return (uint32_t)h[k * ldb + col] | (uint32_t)h[(k + 1) * ldb + col] << 16;
}

/* At least four blocks an SM at KS 1 and three above (≤ 128 and ≤ 170 registers): SwiGLU's epilogue with
 * its reads in flight took 130 and 173, one block an SM fewer, and the joined pass ran 9% slower at
 * R 16 and about a third slower at R 64 than held to these (docs/RESULTS.md, 2026-11-30); the other
 * epilogues use fewer. */
template <int KS, adapter_b_layout L, class Epi>
__global__ void __launch_bounds__(32 * kAdapterMmaWarps, KS == 1 ? 4 : 3)
    adapter_mma_kernel(const bf16 *y, int64_t ldy, const bf16 *__restrict__ u, int64_t ldu,
                       const bf16 *__restrict__ lora_b, int64_t ldb, float s, int N, int C_out, int R,
                       int rows_per_block, Epi epi) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int c0 = (blockIdx.x * kAdapterMmaWarps + warp) * kAdapterMmaCols;
    if (c0 >= C_out) return; /* C_out % 32 == 0: a warp's columns are all in range or none */
    uint32_t bf[4][KS][2];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int col = c0 + 8 * (g / 2) + 2 * j + g % 2; /* n-tile j's column g */
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            bf[j][ks][0] = adapter_b_pair<L>(lora_b, ldb, col, ks * 16 + 2 * t, R);
            bf[j][ks][1] = adapter_b_pair<L>(lora_b, ldb, col, ks * 16 + 8 + 2 * t, R);
        }
    }
    const int oc = c0 + 8 * t; /* this lane's 8 output columns */
    epi.columns(oc);
    const int n_begin = blockIdx.y * rows_per_block;
    const int n_end = (int)min((int64_t)N, (int64_t)n_begin + rows_per_block);
    for (int step = n_begin; step < n_end; step += kAdapterMmaRowStep) {
        int row[2][2];    /* tile h, half q: row step + 16·h + 8·q + g */
        uint4 yraw[2][2]; /* 8 bf16 each, widened in the epilogue */
        typename Epi::Pre pre[2][2];
        uint32_t a[2][KS][4];
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int q = 0; q < 2; q++) {
                row[h][q] = step + 16 * h + 8 * q + g;
                const int r = min(row[h][q], n_end - 1); /* a row past the end reads the last, unused */
                yraw[h][q] = *reinterpret_cast<const uint4 *>(y + (int64_t)r * ldy + oc);
                epi.load(pre[h][q], (int64_t)r * ldy + oc, r, oc);
            }
            const bf16 *u0 = u + (int64_t)min(row[h][0], n_end - 1) * ldu;
            const bf16 *u1 = u + (int64_t)min(row[h][1], n_end - 1) * ldu;
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                a[h][ks][0] = adapter_pair_or_zero(u0, ks * 16 + 2 * t, R);
                a[h][ks][1] = adapter_pair_or_zero(u1, ks * 16 + 2 * t, R);
                a[h][ks][2] = adapter_pair_or_zero(u0, ks * 16 + 8 + 2 * t, R);
                a[h][ks][3] = adapter_pair_or_zero(u1, ks * 16 + 8 + 2 * t, R);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float acc[4][4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
                for (int ks = 0; ks < KS; ks++)
                    mma16816(acc[j], a[h][ks][0], a[h][ks][1], a[h][ks][2], a[h][ks][3], bf[j][ks][0], bf[j][ks][1]);
            }
#pragma unroll
            for (int q = 0; q < 2; q++) {
                if (row[h][q] >= n_end) continue;
                float yv[8], sl[8];
                load_bf16<8>(yv, reinterpret_cast<const bf16 *>(&yraw[h][q]));
#pragma unroll
                for (int e = 0; e < 8; e++) /* column oc + e: n-tile e / 2, fragment column 2t + e % 2 */
                    sl[e] = __fmul_rn(s, acc[e / 2][2 * q + e % 2]);
                epi.row(yv, sl, (int64_t)row[h][q] * ldy + oc, row[h][q], oc, pre[h][q]);
            }
        }
    }
}

/* ldb: B's row stride (ADAPTER_B_ROWS: R); ldy: y's (C_out unless given) */
template <adapter_b_layout L = ADAPTER_B_ROWS, class Epi>
void adapter_mma_launch(const bf16 *y, const bf16 *u, int64_t ldu, const bf16 *lora_b, int64_t ldb, float s, int N,
                        int C_out, int R, Epi epi, cudaStream_t stream, int64_t ldy = 0) {
    const int cols_per_block = kAdapterMmaWarps * kAdapterMmaCols;
    const int col_tiles = (C_out + cols_per_block - 1) / cols_per_block;
    const int64_t row_tiles_wanted = (32768 + col_tiles - 1) / col_tiles;
    int64_t rows = (N + row_tiles_wanted - 1) / row_tiles_wanted;
    rows = (rows + kAdapterMmaRowStep - 1) / kAdapterMmaRowStep * kAdapterMmaRowStep;
    const dim3 grid((unsigned)col_tiles, (unsigned)((N + rows - 1) / rows));
    const dim3 block(32 * kAdapterMmaWarps);
    const int64_t ly = ldy ? ldy : C_out;
    if (R <= 16)
        adapter_mma_kernel<1, L, Epi>
            <<<grid, block, 0, stream>>>(y, ly, u, ldu, lora_b, ldb, s, N, C_out, R, (int)rows, epi);
    else if (R <= 32)
        adapter_mma_kernel<2, L, Epi>
            <<<grid, block, 0, stream>>>(y, ly, u, ldu, lora_b, ldb, s, N, C_out, R, (int)rows, epi);
    else if (R <= 48)
        adapter_mma_kernel<3, L, Epi>
            <<<grid, block, 0, stream>>>(y, ly, u, ldu, lora_b, ldb, s, N, C_out, R, (int)rows, epi);
    else
        adapter_mma_kernel<4, L, Epi>
            <<<grid, block, 0, stream>>>(y, ly, u, ldu, lora_b, ldb, s, N, C_out, R, (int)rows, epi);
}

}  // namespace refine

#endif /* REFINE_GPU_ADAPTER_MMA_CUH */
