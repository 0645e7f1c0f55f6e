/* rmsnorm.cu — RMSNorm forward/backward kernels (gpu/rmsnorm.h), bf16 data, fp32 statistics.
 *
 * Strategy: a group of TPR consecutive threads owns one row; each thread holds VPT chunks of VW
 * contiguous elements (VW = 8: one 16-byte load per chunk, for C % 8 == 0; VW = 1 otherwise),
 * chunk k of thread t covering columns ((k·TPR + t)·VW ...). TPR grows with C so that a thread
 * holds at most 32 elements: the whole row lives in registers and DRAM is touched once per
 * input and output. Blocks are 256 threads = 256/TPR rows. Row sums: each thread sums its
 * elements in order, then a butterfly (xor) shuffle within the warp — which leaves the same bits
 * in every lane — then, for TPR > 32, the warps' sums added in warp order from shared memory.
 *
 * The backward keeps a row's x, dy and w as loaded (bf16) and widens them where they are used, so
 * that two blocks fit an SM. Without dw every row slot takes one row.
 * dw (backward, full fine-tuning only): a thread owns the same columns for every row it visits,
 * so it accumulates dy·bf16(n̂) for those columns across the rows of its row slot (in its slot's
 * row of shared memory), loading the next row while this row's sum is formed; the row slots of
 * a block are combined in slot order and written as the block's partial row of `workspace`; a
 * second kernel adds the blocks' partials in block order into dw (fp32, or a bf16 accumulator:
 * widened, the same add, one RNE rounding). The grid of the backward with dw is
 * min(ceil(N / rows per block), kMaxBackwardBlocks), a function of N and C only, so dw has the
 * same bits on every run and every GPU.
 *
 * Rounding matches ref/rmsnorm.c step for step (__fmul_rn/__fadd_rn keep nvcc from contracting
 * into FMAs); only the order of the fp32 row sums differs from the reference's double sums.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:rmsnorm_parity
 *                     (binary) rmsnorm_parity --bench
 */
#include "gpu/rmsnorm.h"

#include <type_traits>

#include "gpu/cuda_check.h"
#include "gpu/vec.cuh"
#include "io/check.h"

namespace refine {
namespace {

constexpr int kBlock = 256;
constexpr int kMaxBackwardBlocks = 256;

/* Sum over the TPR threads of a row group; every thread of the group gets the same bits.
 * `scratch` holds kBlock/32 floats; all threads of the block must call this together. */
template <int TPR>
__device__ __forceinline__ float row_sum(float v, float *scratch) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if constexpr (TPR > 32) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        __syncthreads(); /* scratch may still be read by a previous call */
        if (lane == 0) scratch[warp] = v;
        __syncthreads();
        const int first = (threadIdx.x / TPR) * (TPR / 32);
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < TPR / 32; w++) s = __fadd_rn(s, scratch[first + w]);
        v = s;
    }
    return v;
}

template <int VW, int VPT, int TPR, bool RESIDUAL>
__global__ void __launch_bounds__(kBlock) rmsnorm_forward_rows_in_registers(
    bf16 *__restrict__ res_out, bf16 *__restrict__ out, float *__restrict__ rstd, const bf16 *__restrict__ res_in,
    const bf16 *__restrict__ x, const bf16 *__restrict__ w, int N, int C, int64_t ldo, float eps) {
    __shared__ float scratch[kBlock / 32];
    const int t = threadIdx.x % TPR;
    const int row = blockIdx.x * (kBlock / TPR) + threadIdx.x / TPR;
    const bool live = row < N; /* dead rows still join the block-wide reductions */
    const int64_t base = (int64_t)(live ? row : 0) * C;
    const int64_t obase = (int64_t)(live ? row : 0) * ldo; /* out's row (stride ldo ≥ C) */

    float v[VPT][VW];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const int col = (k * TPR + t) * VW;
        if (live && col < C) {
            load_bf16<VW>(v[k], x + base + col);
            if constexpr (RESIDUAL) {
                float a[VW];
                load_bf16<VW>(a, res_in + base + col);
#pragma unroll
                for (int j = 0; j < VW; j++) v[k][j] = bf16_round_dev(__fadd_rn(a[j], v[k][j]));
                store_bf16<VW>(res_out + base + col, v[k]);
            }
#pragma unroll
            for (int j = 0; j < VW; j++) ss = __fadd_rn(ss, __fmul_rn(v[k][j], v[k][j]));
        }
    }
    ss = row_sum<TPR>(ss, scratch);
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)C), eps)));
    if (!live) return;
    if (t == 0) rstd[row] = r;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const int col = (k * TPR + t) * VW;
        if (col < C) {
            float wv[VW], o[VW];
            load_bf16<VW>(wv, w + col);
#pragma unroll
            for (int j = 0; j < VW; j++) o[j] = __fmul_rn(bf16_round_dev(__fmul_rn(v[k][j], r)), wv[j]);
            store_bf16<VW>(out + obase + col, o);
        }
    }
}

/* A chunk of VW bf16 as loaded (16 bytes for VW = 8), widened where it is used: the backward keeps
 * its rows' inputs in this form to stay within the registers of two blocks an SM. */
template <int VW>
struct alignas(VW == 8 ? 16 : 2) raw_chunk {
    uint16_t h[VW];
};

template <int VW>
__device__ __forceinline__ void load_raw(raw_chunk<VW> &r, const bf16 *p) {
    if constexpr (VW == 8)
        *reinterpret_cast<uint4 *>(r.h) = *reinterpret_cast<const uint4 *>(p);
    else
        r.h[0] = *reinterpret_cast<const uint16_t *>(p);
}

__device__ __forceinline__ float widen(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* A thread's chunks of row `row` of x and dy (nothing past N or C). */
template <int VW, int VPT, int TPR>
__device__ __forceinline__ void load_row_chunks(raw_chunk<VW> (&xr)[VPT], raw_chunk<VW> (&gr)[VPT], const bf16 *x,
                                                const bf16 *dy, int64_t ldy, int row, int N, int C, int t) {
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const int col = (k * TPR + t) * VW;
        if (row < N && col < C) {
            load_raw<VW>(xr[k], x + (int64_t)row * C + col);
            load_raw<VW>(gr[k], dy + (int64_t)row * ldy + col);
        }
    }
}

/* VW floats of shared memory (two 16-byte accesses for VW = 8: col is a multiple of 8) */
template <int VW>
__device__ __forceinline__ void load_f32(float (&v)[VW], const float *p) {
    if constexpr (VW == 8) {
        const float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
        v[0] = p[0];
    }
}

template <int VW>
__device__ __forceinline__ void store_f32(float *p, const float (&v)[VW]) {
    if constexpr (VW == 8) {
        reinterpret_cast<float4 *>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4 *>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        p[0] = v[0];
    }
}

template <int VW, int VPT, int TPR, bool HAS_DRES, bool HAS_DW>
__global__ void __launch_bounds__(kBlock, 2) rmsnorm_backward_rows_in_registers(
    bf16 *dx, float *__restrict__ partial, const bf16 *dy, int64_t ldy, const bf16 *dres, const bf16 *__restrict__ x,
    const bf16 *__restrict__ w, const float *__restrict__ rstd, int N, int C) {
    /* kBlock/32 scratch floats, then (HAS_DW) each row slot's C running dw sums */
    extern __shared__ float smem[];
    float *scratch = smem;
    constexpr int kSlots = kBlock / TPR;
    const int t = threadIdx.x % TPR, slot = threadIdx.x / TPR;
    float *acc = smem + kBlock / 32 + (HAS_DW ? slot * C : 0);

    raw_chunk<VW> wr[VPT];
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const int col = (k * TPR + t) * VW;
        if (col < C) {
            load_raw<VW>(wr[k], w + col);
            if constexpr (HAS_DW) {
                float z[VW];
#pragma unroll
                for (int j = 0; j < VW; j++) z[j] = 0.0f;
                store_f32<VW>(acc + col, z);
            }
        }
    }

    /* Every thread runs the same number of iterations so the block-wide sums stay collective. With
     * dw the grid is capped (a row slot visits several rows): the next row's x and dy are loaded
     * while this row's sum is formed. */
    const int stride = gridDim.x * kSlots;
    const int iters = (N + stride - 1) / stride;
    int row = blockIdx.x * kSlots + slot;
    raw_chunk<VW> xr[VPT], gr[VPT];
    load_row_chunks<VW, VPT, TPR>(xr, gr, x, dy, ldy, row, N, C, t);
    for (int it = 0; it < iters; it++, row += stride) {
        const bool live = row < N;
        const int64_t base = (int64_t)(live ? row : 0) * C;
        const float r = live ? rstd[row] : 0.0f;
        /* The residual's gradient: in flight with x and dy where the registers allow (VPT ≤ 3), else
         * loaded where it is added. */
        constexpr bool kEarlyDres = HAS_DRES && VPT <= 3;
        raw_chunk<VW> dr[kEarlyDres ? VPT : 1];
        if constexpr (kEarlyDres) {
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int col = (k * TPR + t) * VW;
                if (live && col < C) load_raw<VW>(dr[k], dres + base + col);
            }
        }
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            const int col = (k * TPR + t) * VW;
            if (live && col < C) {
#pragma unroll
                for (int j = 0; j < VW; j++) {
                    const float nh = __fmul_rn(widen(xr[k].h[j]), r);
                    const float dn = __fmul_rn(widen(gr[k].h[j]), widen(wr[k].h[j]));
                    dot = __fadd_rn(dot, __fmul_rn(dn, nh));
                }
            }
        }
        raw_chunk<VW> xn[HAS_DW ? VPT : 1], gn[HAS_DW ? VPT : 1];
        if constexpr (HAS_DW) load_row_chunks<VW, VPT, TPR>(xn, gn, x, dy, ldy, row + stride, N, C, t);
        dot = row_sum<TPR>(dot, scratch);
        const float mean = __fdiv_rn(dot, (float)C);
        if (live) {
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int col = (k * TPR + t) * VW;
                if (col < C) {
                    float g[VW], a[VW];
                    if constexpr (HAS_DW) load_f32<VW>(a, acc + col);
#pragma unroll
                    for (int j = 0; j < VW; j++) {
                        const float gv = widen(gr[k].h[j]);
                        const float nh = __fmul_rn(widen(xr[k].h[j]), r);
                        const float dn = __fmul_rn(gv, widen(wr[k].h[j]));
                        g[j] = __fmul_rn(r, __fsub_rn(dn, __fmul_rn(nh, mean)));
                        if constexpr (HAS_DW) a[j] = __fadd_rn(a[j], __fmul_rn(gv, bf16_round_dev(nh)));
                    }
                    if constexpr (HAS_DW) store_f32<VW>(acc + col, a);
                    if constexpr (kEarlyDres) {
#pragma unroll
                        for (int j = 0; j < VW; j++) g[j] = __fadd_rn(widen(dr[k].h[j]), g[j]);
                    } else if constexpr (HAS_DRES) {
                        float d[VW];
                        load_bf16<VW>(d, dres + base + col);
#pragma unroll
                        for (int j = 0; j < VW; j++) g[j] = __fadd_rn(d[j], g[j]);
                    }
                    store_bf16<VW>(dx + base + col, g);
                }
            }
        }
        if constexpr (HAS_DW) {
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                xr[k] = xn[k];
                gr[k] = gn[k];
            }
        }
    }

    if constexpr (HAS_DW) {
        /* The row slots of this block added in slot order: the block's partial row. */
        __syncthreads();
        const float *sums = smem + kBlock / 32;
        for (int c = threadIdx.x; c < C; c += kBlock) {
            float v = sums[c];
            for (int s = 1; s < kSlots; s++) v = __fadd_rn(v, sums[(int64_t)s * C + c]);
            partial[(int64_t)blockIdx.x * C + c] = v;
        }
    }
}

/* dw[c] += Σ_b partial[b, c], blocks in order. T = float: the fp32 accumulator; T = bf16: the
 * same sum added to the widened old value in fp32 and rounded to bf16 once (RNE). */
template <typename T>
__global__ void rmsnorm_dw_ordered_sum(T *__restrict__ dw, const float *__restrict__ partial, int blocks, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int b = 0; b < blocks; b++) s = __fadd_rn(s, partial[(int64_t)b * C + c]);
    if constexpr (std::is_same_v<T, bf16>)
        dw[c] = __float2bfloat16_rn(__fadd_rn(__bfloat162float(dw[c]), s));
    else
        dw[c] = __fadd_rn(dw[c], s);
}

/* The launch shape for a row of C elements. */
struct row_shape {
    int vw, vpt, tpr;
};

/* A thread holds at most 4 chunks (32 elements), 1 to 4 as the row needs. The forward takes the
 * threads a row (32 to 256) that leave the fewest of its chunk slots idle, the most threads among
 * equals: C 576: 32 × 3, C 2048: 256 × 1, 3072: 128 × 3, 4096: 256 × 2 (measured on an H200 in the
 * step's sizes, docs/RESULTS.md 2026-11-28 seventh session: 76% → 87% of copy at C 2048, 80 → 85%
 * at 4096; fewer threads a row keep fewer bytes in flight). The backward, which keeps more of a row
 * live, takes 32 threads a row and more only where a row needs over 4 chunks a thread, and twice
 * that where a row fills exactly 4 chunks a thread (C 2048, 4096: two chunks each, so that two
 * blocks fit an SM) — measured on the H100 (docs/RESULTS.md, 2026-11-27). A thread's chunks and
 * their order do not depend on VPT, so neither do the row sums' bits; they depend on the threads a
 * row, a function of C alone. */
row_shape pick_shape(int C, const void *const *ptrs, int nptrs, bool backward = false) {
    bool vec = C % 8 == 0;
    for (int i = 0; i < nptrs; i++)
        if (ptrs[i] != nullptr && (reinterpret_cast<uintptr_t>(ptrs[i]) & 15) != 0) vec = false;
    const int vw = vec ? 8 : 1;
    const int chunks = (C + vw - 1) / vw;
    CHECK(chunks <= 4 * kBlock, "rmsnorm: C=%d is too wide (at most %d with C %% 8 == 0 and 16-byte aligned pointers, else %d)",
          C, 4 * kBlock * 8, 4 * kBlock);
    int tpr = 32;
    while (tpr < kBlock && chunks > 4 * tpr) tpr *= 2;
    if (backward && tpr < kBlock && chunks == 4 * tpr) tpr *= 2;
    if (!backward) /* the fewest idle chunk slots, then the most threads */
        for (int t = tpr * 2; t <= kBlock; t *= 2) {
            const int idle_t = (chunks + t - 1) / t * t - chunks, idle = (chunks + tpr - 1) / tpr * tpr - chunks;
            if (idle_t <= idle) tpr = t;
        }
    const int need = (chunks + tpr - 1) / tpr;
    const int vpt = need <= 3 ? need : 4; /* 3: C 576 and 3072 without an idle chunk */
    return {vw, vpt, tpr};
}

/* Runs L<VW, VPT, TPR>::run(args...) for the shape picked at run time. */
template <template <int, int, int> class L, typename... A>
void dispatch_shape(row_shape s, A... args) {
#define REFINE_RMSNORM_TPR(VW, VPT)                          \
    switch (s.tpr) {                                         \
        case 32: L<VW, VPT, 32>::run(args...); break;        \
        case 64: L<VW, VPT, 64>::run(args...); break;        \
        case 128: L<VW, VPT, 128>::run(args...); break;      \
        default: L<VW, VPT, 256>::run(args...); break;       \
    }
#define REFINE_RMSNORM_VPT(VW)                   \
    switch (s.vpt) {                             \
        case 1: REFINE_RMSNORM_TPR(VW, 1) break; \
        case 2: REFINE_RMSNORM_TPR(VW, 2) break; \
        case 3: REFINE_RMSNORM_TPR(VW, 3) break; \
        default: REFINE_RMSNORM_TPR(VW, 4) break; \
    }
    if (s.vw == 8) {
        REFINE_RMSNORM_VPT(8)
    } else {
        REFINE_RMSNORM_VPT(1)
    }
#undef REFINE_RMSNORM_VPT
#undef REFINE_RMSNORM_TPR
}

template <bool RESIDUAL>
struct forward_launch {
    template <int VW, int VPT, int TPR>
    struct L {
        static void run(int blocks, cudaStream_t stream, bf16 *res_out, bf16 *out, float *rstd, const bf16 *res_in,
                        const bf16 *x, const bf16 *w, int N, int C, int64_t ldo, float eps) {
            rmsnorm_forward_rows_in_registers<VW, VPT, TPR, RESIDUAL>
                <<<blocks, kBlock, 0, stream>>>(res_out, out, rstd, res_in, x, w, N, C, ldo, eps);
        }
    };
};

template <bool HAS_DRES, bool HAS_DW>
struct backward_launch {
    template <int VW, int VPT, int TPR>
    struct L {
        static void run(int blocks, size_t smem, cudaStream_t stream, bf16 *dx, float *partial, const bf16 *dy,
                        int64_t ldy, const bf16 *dres, const bf16 *x, const bf16 *w, const float *rstd, int N,
                        int C) {
            rmsnorm_backward_rows_in_registers<VW, VPT, TPR, HAS_DRES, HAS_DW>
                <<<blocks, kBlock, smem, stream>>>(dx, partial, dy, ldy, dres, x, w, rstd, N, C);
        }
    };
};

/* With dw the grid is capped at kMaxBackwardBlocks (the partial rows; a function of N and C only, so
 * dw's bits are the same on every GPU); without, one row per row slot. */
int backward_blocks(int N, int tpr, bool has_dw) {
    const int slots = kBlock / tpr;
    const int need = (N + slots - 1) / slots;
    return has_dw && need > kMaxBackwardBlocks ? kMaxBackwardBlocks : need;
}

template <bool RESIDUAL>
void forward(bf16 *res_out, bf16 *out, int64_t ldo, float *rstd, const bf16 *res_in, const bf16 *x, const bf16 *w,
             int N, int C, float eps, cudaStream_t stream) {
    CHECK(N >= 1 && C >= 1, "rmsnorm: N=%d C=%d must be positive", N, C);
    CHECK(ldo >= C && (C % 8 != 0 || ldo % 8 == 0),
          "rmsnorm: the output's row stride %lld must be at least C=%d (and a multiple of 8 when C is)",
          (long long)ldo, C);
    const void *ptrs[] = {res_out, out, res_in, x, w};
    const row_shape s = pick_shape(C, ptrs, 5);
    const int rows_per_block = kBlock / s.tpr;
    const int blocks = (N + rows_per_block - 1) / rows_per_block;
    dispatch_shape<forward_launch<RESIDUAL>::template L>(s, blocks, stream, res_out, out, rstd, res_in, x, w, N, C,
                                                         ldo, eps);
    KERNEL_CHECK(stream);
}

}  // namespace
}  // namespace refine

using refine::bf16;

extern "C" void gpu_rmsnorm_forward_strided_bf16(uint16_t *out, int64_t ldo, float *rstd, const uint16_t *x,
                                                 const uint16_t *w, int N, int C, float eps, cudaStream_t stream) {
    refine::forward<false>(nullptr, reinterpret_cast<bf16 *>(out), ldo, rstd, nullptr,
                           reinterpret_cast<const bf16 *>(x), reinterpret_cast<const bf16 *>(w), N, C, eps, stream);
}

extern "C" void gpu_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const uint16_t *x, const uint16_t *w, int N,
                                         int C, float eps, cudaStream_t stream) {
    gpu_rmsnorm_forward_strided_bf16(out, C, rstd, x, w, N, C, eps, stream);
}

extern "C" void gpu_rmsnorm_residual_forward_strided_bf16(uint16_t *res_out, uint16_t *out, int64_t ldo, float *rstd,
                                                          const uint16_t *res_in, const uint16_t *delta,
                                                          const uint16_t *w, int N, int C, float eps,
                                                          cudaStream_t stream) {
    refine::forward<true>(reinterpret_cast<bf16 *>(res_out), reinterpret_cast<bf16 *>(out), ldo, rstd,
                          reinterpret_cast<const bf16 *>(res_in), reinterpret_cast<const bf16 *>(delta),
                          reinterpret_cast<const bf16 *>(w), N, C, eps, stream);
}

extern "C" void gpu_rmsnorm_residual_forward_bf16(uint16_t *res_out, uint16_t *out, float *rstd,
                                                  const uint16_t *res_in, const uint16_t *delta, const uint16_t *w,
                                                  int N, int C, float eps, cudaStream_t stream) {
    gpu_rmsnorm_residual_forward_strided_bf16(res_out, out, C, rstd, res_in, delta, w, N, C, eps, stream);
}

extern "C" size_t gpu_rmsnorm_backward_workspace_size(int N, int C) {
    /* Every row slot shape has at least one row per block, so min(N, kMaxBackwardBlocks) bounds
     * the number of partial rows whatever shape the pointers' alignment selects. */
    const size_t blocks = (size_t)(N < refine::kMaxBackwardBlocks ? N : refine::kMaxBackwardBlocks);
    const size_t bytes = blocks * (size_t)C * sizeof(float);
    return (bytes + 255) & ~(size_t)255;
}

extern "C" void gpu_rmsnorm_backward_bf16(uint16_t *dx, void *dw, enum gemm_out dw_type, const uint16_t *dy,
                                          const uint16_t *dres, const uint16_t *x, const uint16_t *w,
                                          const float *rstd, int N, int C, void *workspace, cudaStream_t stream) {
    gpu_rmsnorm_backward_strided_bf16(dx, dw, dw_type, dy, C, dres, x, w, rstd, N, C, workspace, stream);
}

extern "C" void gpu_rmsnorm_backward_strided_bf16(uint16_t *dx, void *dw, enum gemm_out dw_type, const uint16_t *dy,
                                                  int64_t ldy, const uint16_t *dres, const uint16_t *x,
                                                  const uint16_t *w, const float *rstd, int N, int C, void *workspace,
                                                  cudaStream_t stream) {
    using namespace refine;
    CHECK(N >= 1 && C >= 1, "rmsnorm backward: N=%d C=%d must be positive", N, C);
    CHECK(ldy >= C && (C % 8 != 0 || ldy % 8 == 0) && (ldy == C || dx != dy),
          "rmsnorm backward: dy's row stride %lld must be at least C=%d (a multiple of 8 when C is; C when dx is dy)",
          (long long)ldy, C);
    CHECK(dw == nullptr || workspace != nullptr, "rmsnorm backward: dw needs a workspace");
    CHECK(dw == nullptr || dw_type == GEMM_OUT_F32 || dw_type == GEMM_OUT_BF16,
          "rmsnorm backward: dw_type=%d is neither GEMM_OUT_F32 nor GEMM_OUT_BF16", (int)dw_type);
    const void *ptrs[] = {dx, dy, dres, x, w};
    const row_shape s = pick_shape(C, ptrs, 5, true);
    const int blocks = backward_blocks(N, s.tpr, dw != nullptr);
    float *partial = static_cast<float *>(workspace);
    bf16 *dx_ = reinterpret_cast<bf16 *>(dx);
    const bf16 *dy_ = reinterpret_cast<const bf16 *>(dy), *dres_ = reinterpret_cast<const bf16 *>(dres);
    const bf16 *x_ = reinterpret_cast<const bf16 *>(x), *w_ = reinterpret_cast<const bf16 *>(w);
    const size_t smem = sizeof(float) * (kBlock / 32 + (dw != nullptr ? (size_t)(kBlock / s.tpr) * C : 0));
    if (dw != nullptr && dres != nullptr)
        dispatch_shape<backward_launch<true, true>::L>(s, blocks, smem, stream, dx_, partial, dy_, ldy, dres_, x_, w_,
                                                       rstd, N, C);
    else if (dw != nullptr)
        dispatch_shape<backward_launch<false, true>::L>(s, blocks, smem, stream, dx_, partial, dy_, ldy, dres_, x_, w_,
                                                        rstd, N, C);
    else if (dres != nullptr)
        dispatch_shape<backward_launch<true, false>::L>(s, blocks, smem, stream, dx_, partial, dy_, ldy, dres_, x_, w_,
                                                        rstd, N, C);
    else
        dispatch_shape<backward_launch<false, false>::L>(s, blocks, smem, stream, dx_, partial, dy_, ldy, dres_, x_, w_,
                                                         rstd, N, C);
    KERNEL_CHECK(stream);
    if (dw != nullptr) {
        if (dw_type == GEMM_OUT_F32)
            rmsnorm_dw_ordered_sum<<<(C + 255) / 256, 256, 0, stream>>>(static_cast<float *>(dw), partial, blocks, C);
        else
            rmsnorm_dw_ordered_sum<<<(C + 255) / 256, 256, 0, stream>>>(static_cast<bf16 *>(dw), partial, blocks, C);
        KERNEL_CHECK(stream);
    }
}
