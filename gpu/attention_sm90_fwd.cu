/* attention_sm90_fwd.cu — the Hopper flash-attention forward (gpu/attention.h's math; sm_90a:
 * wgmma, TMA, warp specialization), after FlashAttention-3's design (Shah et al. 2024,
 * Dao-AILab/flash-attention hopper/flash_fwd_kernel_sm90.h and mainloop_fwd_sm90_tma_gmma_ws.hpp).
 *
 * Strategy. A persistent grid (one CTA per SM, 384 threads) walks tiles of 128 queries of one
 * (b, h), heaviest first (attention_sm90_layout.h §4). Warpgroup 0 is the producer: one thread
 * issues the tensor-copy loads (Q once a tile, then K and V blocks of 128 keys through two-stage
 * ring buffers, each stage a full/empty mbarrier pair) and the warpgroup gives its registers away
 * (setmaxnreg 40). Warpgroups 1 and 2 are consumers (setmaxnreg 232), 64 query rows each: per key
 * block n = n_max … 0 (descending, so the one block under the causal mask comes first)
 *   S = Q·Kᵀ (wgmma SS, m64n128k16, K-major from swizzled tiles) — issued for block n while
 *   O += P·V of block n + 1 (wgmma RS: P stays in registers as bf16, V MN-major) runs, then the
 *   online softmax of block n (exp2 with scale·log2 e folded in, running max and sum in fp32)
 *   overlaps the tail of P·V; O is rescaled once P·V is done.
 * The two consumers take turns issuing their GEMMs (named barriers BAR_SCHED0/1, "ping-pong"), so
 * that one's softmax runs under the other's tensor-core work. Epilogue: out = bf16(O / l) and
 * lse = (m·scale·log2 e + log2 l)·ln 2 stored straight from registers.
 * Shared memory (D = 128): Q 32 KiB + K 2 × 32 KiB + V 2 × 32 KiB = 160 KiB (D = 64: 80 KiB).
 * Rounding points: those of the sm_80 kernel (P relative to the running max, rounded to bf16 for the
 * P·V product; fp32 accumulation), with the key blocks visited in descending order.
 * Test: tests/parity/attention_parity.cu (both kernel families, `--bench` times them side by side).
 */
#include <atomic>
#include <cudaTypedefs.h>
#include <math.h>

#include "gpu/attention_sm90.cuh"
#include "gpu/attention_switch.h"

namespace refine {
namespace attn90 {

struct FwdParams {
    CUtensorMap tq, tk, tv;
    __nv_bfloat16 *out;
    int64_t ld_o; /* out's row stride, elements */
    float *lse;
    int B, T, H, KVH, num_m, num_tiles;
    float scale_log2; /* softmax scale · log2(e) */
    HangRecord *dbg;
};

template <int D>
__global__ void __launch_bounds__(384, 1) attn_fwd_sm90(const __grid_constant__ FwdParams p) {
#ifdef ATTN_SM90_ENABLED
    using C = FwdTile<D>;
    using L = FwdSmem<D>;
    constexpr int BM = C::BM, BN = C::BN, S = C::STAGES;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        mbar_init(base + L::Q_FULL, 1);
        mbar_init(base + L::Q_EMPTY, 8);
        for (int s = 0; s < S; s++) {
            mbar_init(base + L::K_FULL + 8 * s, 1);
            mbar_init(base + L::K_EMPTY + 8 * s, 8);
            mbar_init(base + L::V_FULL + 8 * s, 1);
            mbar_init(base + L::V_EMPTY + 8 * s, 8);
        }
        mbar_fence_init();
    }
    __syncthreads();
    const int group = p.H / p.KVH;

    if (wg == 0) { /* ---------------- producer ---------------- */
        setmaxnreg_dec<kRegsProducer>();
        if (tid != 0) return;
        int it = 0, tcount = 0;
        for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x, tcount++) {
            const FwdWork w = fwd_tile(tile, p.num_m, p.B, p.H);
            const int n_max = fwd_n_max(w.m, BM, BN, p.T), kvh = w.h / group;
            int st = it % S;
            uint32_t ph = (uint32_t)(it / S) & 1u;
            mbar_wait(base + L::K_EMPTY + 8 * st, ph ^ 1u, p.dbg, HANG_FWD_K_EMPTY, it);
            mbar_expect_tx(base + L::K_FULL + 8 * st, C::KV_BYTES);
            tma_load_tile<D>(base + L::K + st * C::KV_BYTES, &p.tk, BN, kvh, n_max * BN, w.b, base + L::K_FULL + 8 * st);
            mbar_wait(base + L::Q_EMPTY, ((uint32_t)tcount & 1u) ^ 1u, p.dbg, HANG_FWD_Q_EMPTY, tcount);
            mbar_expect_tx(base + L::Q_FULL, C::Q_BYTES);
            tma_load_tile<D>(base + L::Q, &p.tq, BM, w.h, w.m * BM, w.b, base + L::Q_FULL);
            for (int n = n_max - 1; n >= 0; n--) {
                const int st1 = (it + 1) % S;
                const uint32_t ph1 = (uint32_t)((it + 1) / S) & 1u;
                mbar_wait(base + L::K_EMPTY + 8 * st1, ph1 ^ 1u, p.dbg, HANG_FWD_K_EMPTY, it + 1);
                mbar_expect_tx(base + L::K_FULL + 8 * st1, C::KV_BYTES);
                tma_load_tile<D>(base + L::K + st1 * C::KV_BYTES, &p.tk, BN, kvh, n * BN, w.b,
                                 base + L::K_FULL + 8 * st1);
                mbar_wait(base + L::V_EMPTY + 8 * st, ph ^ 1u, p.dbg, HANG_FWD_V_EMPTY, it);
                mbar_expect_tx(base + L::V_FULL + 8 * st, C::KV_BYTES);
                tma_load_tile<D>(base + L::V + st * C::KV_BYTES, &p.tv, BN, kvh, (n + 1) * BN, w.b,
                                 base + L::V_FULL + 8 * st);
                it++;
                st = st1;
                ph = ph1;
            }
            mbar_wait(base + L::V_EMPTY + 8 * st, ph ^ 1u, p.dbg, HANG_FWD_V_EMPTY, it);
            mbar_expect_tx(base + L::V_FULL + 8 * st, C::KV_BYTES);
            tma_load_tile<D>(base + L::V + st * C::KV_BYTES, &p.tv, BN, kvh, 0, w.b, base + L::V_FULL + 8 * st);
            it++;
        }
        return;
    }

    /* ---------------- consumers ---------------- */
    setmaxnreg_inc<kRegsConsumer>();
    const int cw = wg - 1, lane = tid % 32;
    const float c = p.scale_log2;
    if (cw == 1) named_bar_arrive(BAR_SCHED0, 256); /* consumer 0 issues first */
    float o[D / 2], s[BN / 2];
    uint32_t pa[BN / 16][4];
    int it = 0, tcount = 0;
    for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x, tcount++) {
        const FwdWork w = fwd_tile(tile, p.num_m, p.B, p.H);
        const int n_max = fwd_n_max(w.m, BM, BN, p.T);
        const int q_row0 = w.m * BM + 64 * cw; /* first query row of this warpgroup */
        float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}, corr[2];
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] = 0.0f;

        /* Masks keys after the query (block n), then the online-softmax update: s becomes
         * P = 2^(S·c − m_new), m_run and l_run move on, corr = 2^((m_old − m_new)·c). */
        auto softmax = [&](int n) {
            if (causal_block_masked(w.m, BM, n, BN)) {
#pragma unroll
                for (int i = 0; i < BN / 2; i++)
                    if (n * BN + acc_col(tid, i) > q_row0 + acc_row(tid, i)) s[i] = -INFINITY;
            }
            float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
            for (int i = 0; i < BN / 2; i++) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                corr[r] = ex2((m_run[r] - mx[r]) * c);
                m_run[r] = mx[r];
            }
            const float mc[2] = {mx[0] * c, mx[1] * c};
            float sum[2] = {0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < BN / 2; i++) {
                s[i] = ex2(fmaf(s[i], c, -mc[(i >> 1) & 1]));
                sum[(i >> 1) & 1] += s[i];
            }
#pragma unroll
            for (int r = 0; r < 2; r++) l_run[r] = l_run[r] * corr[r] + sum[r];
        };

        mbar_wait(base + L::Q_FULL, (uint32_t)tcount & 1u, p.dbg, HANG_FWD_Q_FULL, tcount);
        int st = it % S;
        uint32_t ph = (uint32_t)(it / S) & 1u;
        mbar_wait(base + L::K_FULL + 8 * st, ph, p.dbg, HANG_FWD_K_FULL, it);
        wgmma_fence();
        gemm_abt<BN, D>(s, base + L::Q, BM, 64 * cw, base + L::K + st * C::KV_BYTES, BN, 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
        warp_arrive(base + L::K_EMPTY + 8 * st);
        if (n_max == 0) warp_arrive(base + L::Q_EMPTY);
        softmax(n_max);
        acc_to_a<BN / 16>(pa, s);

        for (int n = n_max - 1; n >= 0; n--) {
            const int st1 = (it + 1) % S;
            const uint32_t ph1 = (uint32_t)((it + 1) / S) & 1u;
            mbar_wait(base + L::K_FULL + 8 * st1, ph1, p.dbg, HANG_FWD_K_FULL, it + 1);
            mbar_wait(base + L::V_FULL + 8 * st, ph, p.dbg, HANG_FWD_V_FULL, it);
            named_bar_sync(BAR_SCHED0 + cw, 256);
            wgmma_fence();
            gemm_abt<BN, D>(s, base + L::Q, BM, 64 * cw, base + L::K + st1 * C::KV_BYTES, BN, 0);
            wgmma_commit();
            gemm_rs<D, BN / 16>(o, pa, base + L::V + st * C::KV_BYTES);
            wgmma_commit();
            named_bar_arrive(BAR_SCHED0 + (1 - cw), 256);
            wgmma_wait<1>(); /* S of block n */
            fence_regs(s);
            warp_arrive(base + L::K_EMPTY + 8 * st1);
            if (n == 0) warp_arrive(base + L::Q_EMPTY);
            softmax(n);
            wgmma_wait<0>(); /* P·V of block n + 1 */
            fence_regs(o);
            fence_regs(pa);
            warp_arrive(base + L::V_EMPTY + 8 * st);
#pragma unroll
            for (int i = 0; i < D / 2; i++) o[i] *= corr[(i >> 1) & 1];
            acc_to_a<BN / 16>(pa, s);
            it++;
            st = st1;
            ph = ph1;
        }
        mbar_wait(base + L::V_FULL + 8 * st, ph, p.dbg, HANG_FWD_V_FULL, it);
        wgmma_fence();
        gemm_rs<D, BN / 16>(o, pa, base + L::V + st * C::KV_BYTES);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(pa);
        warp_arrive(base + L::V_EMPTY + 8 * st);
        it++;

        /* epilogue: rows of this thread are q_row0 + acc_row(tid, 0 or 2) */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
            l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = q_row0 + acc_row(tid, 2 * r);
            if (row >= p.T) continue;
            const float inv = 1.0f / l_run[r];
            __nv_bfloat16 *dst = p.out + ((int64_t)w.b * p.T + row) * p.ld_o + (int64_t)w.h * D;
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                const int i = 4 * j + 2 * r;
                *reinterpret_cast<uint32_t *>(dst + acc_col(tid, i)) = pack_bf16(o[i] * inv, o[i + 1] * inv);
            }
            if ((lane & 3) == 0)
                p.lse[((int64_t)w.b * p.H + w.h) * p.T + row] = (m_run[r] * c + log2f(l_run[r])) * 0.69314718055994531f;
        }
    }
#endif
}

} // namespace attn90

using attn90::FwdParams;
using attn90::FwdSmem;

void attn90::make_tmap(CUtensorMap *map, const void *base, int B, int T, int NH, int D, int box_rows, int64_t ld) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
        CHECK(fn != nullptr && q == cudaDriverEntryPointSuccess, "cuTensorMapEncodeTiled not found (driver entry point)");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }();
    const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)NH, (cuuint64_t)T, (cuuint64_t)B};
    const int64_t row = ld > 0 ? ld : (int64_t)NH * D;
    const cuuint64_t strides[3] = {(cuuint64_t)D * 2, (cuuint64_t)row * 2, (cuuint64_t)T * row * 2};
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)box_rows, 1}, estr[4] = {1, 1, 1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void *>(base), dims, strides, box,
                              estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (%d): B=%d T=%d NH=%d D=%d box_rows=%d base=%p", (int)r, B,
          T, NH, D, box_rows, base);
}

/* The sm_90a code is in this binary and the device is a compute capability 9.x part: the kernel's
 * binary version says which code the device would run. Cached per device. */
bool attn90_available(int D) {
    if (D != 64 && D != 128) return false;
    static std::atomic<int> cache[64];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) return false;
    int v = cache[dev].load(std::memory_order_relaxed);
    if (v == 0) {
        int major = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        cudaFuncAttributes a;
        v = 1;
        if (major == 9 && cudaFuncGetAttributes(&a, attn90::attn_fwd_sm90<128>) == cudaSuccess && a.binaryVersion == 90)
            v = 2;
        (void)cudaGetLastError(); /* a kernel image absent for this device is an answer, not an error */
        cache[dev].store(v, std::memory_order_relaxed);
    }
    return v == 2;
}

template <int D>
static void forward_launch(uint16_t *out, int64_t ld_o, float *lse, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, int B, int T, int H, int KVH, float scale, cudaStream_t stream,
                           HangRecord *dbg) {
    using C = attn90::FwdTile<D>;
    FwdParams p;
    attn90::make_tmap(&p.tq, q, B, T, H, D, C::BM);
    attn90::make_tmap(&p.tk, k, B, T, KVH, D, C::BN);
    attn90::make_tmap(&p.tv, v, B, T, KVH, D, C::BN);
    p.out = reinterpret_cast<__nv_bfloat16 *>(out);
    p.ld_o = ld_o;
    p.lse = lse;
    p.B = B, p.T = T, p.H = H, p.KVH = KVH;
    p.num_m = attn90::ceil_div(T, C::BM);
    p.num_tiles = p.num_m * B * H;
    p.scale_log2 = scale * 1.44269504088896341f;
    p.dbg = dbg;
    const int sms = refine_sm_count();
    const size_t smem = FwdSmem<D>::BYTES;
    CUDA_CHECK(cudaFuncSetAttribute(attn90::attn_fwd_sm90<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int grid = p.num_tiles < sms ? p.num_tiles : sms;
    attn90::attn_fwd_sm90<D><<<grid, 384, smem, stream>>>(p);
    KERNEL_CHECK(stream);
}

void attn90_forward(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v, int B, int T,
                    int H, int KVH, int D, float scale, cudaStream_t stream, HangRecord *dbg, int64_t ld_o) {
    CHECK(attn90_available(D), "the Hopper attention kernels cannot run here (D=%d)", D);
    ATTN_HEADDIM_SWITCH(D, [&](auto hd) {
        constexpr int kD = decltype(hd)::value;
        if constexpr (kD == 64 || kD == 128)
            forward_launch<kD>(out, ld_o, lse, q, k, v, B, T, H, KVH, scale, stream, dbg);
    });
}

} // namespace refine
