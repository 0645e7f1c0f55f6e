/* attention_sm90_fwd.cu — the Hopper flash-attention forward (gpu/attention.h's math; sm_90a:
 * wgmma, TMA, warp specialization), after FlashAttention-3's design (Shah et al. 2024,
 * Dao-AILab/flash-attention hopper/flash_fwd_kernel_sm90.h and mainloop_fwd_sm90_tma_gmma_ws.hpp).
 *
 * Two kernels: attn_fwd_sm90 (below; any T) and, for D = 64 at T ≤ 512 where B·KVH CTAs fill the
 * SMs, attn_fwd_sm90_heads (further below: a CTA a whole kv head, three consumers).
 * Strategy. A persistent grid (one CTA per SM, 384 threads) walks tiles of 128 queries of one
 * (b, h), heaviest first, dealt in a snake (attention_sm90_layout.h §4, fwd_cta_tile). Warpgroup 0
 * is the producer: one thread issues the tensor-copy loads (Q once a tile into two stages, so that
 * the next tile's queries load while this tile runs; K and V blocks of 128 keys through two-stage
 * ring buffers; each stage a full/empty mbarrier pair) and the warpgroup gives its registers away
 * (setmaxnreg 40). Warpgroups 1 and 2 are consumers (setmaxnreg 232), 64 query rows each: per key
 * block n = n_max … 0 (descending, so the one block under the causal mask comes first)
 *   S = Q·Kᵀ (wgmma SS, m64n128k16, K-major from swizzled tiles) — issued for block n while
 *   O += P·V of block n + 1 (wgmma RS: P stays in registers as bf16, V MN-major) runs, then the
 *   online softmax of block n (exp2 with scale·log2 e folded in, running max and sum in fp32)
 *   overlaps the tail of P·V; O is rescaled once P·V is done.
 * The same step joins two tiles: the next tile's first S is issued beside this tile's last P·V, its
 * softmax runs under it, and the epilogue (out = bf16(O / l), lse = (m·scale·log2 e + log2 l)·ln 2,
 * stored from registers) follows — at short sequences (T 512: one to four key blocks a tile) a
 * tile's start and end were otherwise the consumers' critical path. The first consumer's diagonal
 * block is a half block (fwd_half_block: its queries see the block's first 64 keys only): its
 * softmax takes those 64, the other keys' P are zeros — the same bits as the masked whole block.
 * The two consumers take turns issuing their GEMMs (named barriers BAR_SCHED0/1, "ping-pong"), so
 * that one's softmax runs under the other's tensor-core work.
 * Shared memory (D = 128): Q 2 × 32 KiB + K 2 × 32 KiB + V 2 × 32 KiB = 192 KiB (D = 64: 96 KiB).
 * Rounding points: those of the sm_80 kernel (P relative to the running max, rounded to bf16 for the
 * P·V product; fp32 accumulation), with the key blocks visited in descending order.
 * Test: tests/parity/attention_parity.cu (both kernel families, `--bench` times them side by side).
 */
#include <atomic>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
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

/* The online-softmax update of one key block for one warpgroup: NS of the thread's NA scores (NA/2 for
 * a half block). Masks keys after their query where the block is under the causal mask (key0 the
 * block's first key, q_row0 the warpgroup's first query; scores i < MASK_FROM, the block's first
 * 8·MASK_FROM/4 keys, where the caller knows none is after a query), then s becomes P = 2^(S·c − m_new), m_run
 * and l_run move on, corr = 2^((m_old − m_new)·c). */
template <int NS, int NA, int MASK_FROM = 0>
__device__ __forceinline__ void softmax_update(float (&s)[NA], bool masked, int key0, int q_row0, int tid, float c,
                                               float (&m_run)[2], float (&l_run)[2], float (&corr)[2]) {
    static_assert(NS <= NA, "more scores than the thread holds");
    if (masked) {
#pragma unroll
        for (int i = MASK_FROM; i < NS; i++)
            if (key0 + acc_col(tid, i) > q_row0 + acc_row(tid, i)) s[i] = -INFINITY;
    }
    float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
    for (int i = 0; i < NS; i++) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
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
    for (int i = 0; i < NS; i++) {
        s[i] = ex2(fmaf(s[i], c, -mc[(i >> 1) & 1]));
        sum[(i >> 1) & 1] += s[i];
    }
#pragma unroll
    for (int r = 0; r < 2; r++) l_run[r] = l_run[r] * corr[r] + sum[r];
}

/* P's A registers from the softmax's scores: all BN keys, or a half block's first 64 (the other
 * keys' registers zeros, what their P would round to). */
template <int BN>
__device__ __forceinline__ void scores_to_a(bool half, uint32_t (&pa)[BN / 16][4], float (&s)[BN / 2]) {
    if (half) {
        acc_to_a<BN / 32>(reinterpret_cast<uint32_t(&)[BN / 32][4]>(pa), reinterpret_cast<float(&)[BN / 4]>(s));
#pragma unroll
        for (int ks = BN / 32; ks < BN / 16; ks++)
#pragma unroll
            for (int j = 0; j < 4; j++) pa[ks][j] = 0u;
    } else {
        acc_to_a<BN / 16>(pa, s);
    }
}

/* The row sums l whole (each thread held a quarter of its two rows' columns), and a row's logsumexp. */
__device__ __forceinline__ void sum_rows(float (&l_run)[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
    }
}
__device__ __forceinline__ float row_lse(float m, float l, float c) { return (m * c + log2f(l)) * 0.69314718055994531f; }

/* A warpgroup's 64 finished query rows from q_row0 (head h, batch b): out = bf16(O / l) and
 * lse = (m·scale·log2 e + log2 l)·ln 2, stored from registers; this thread's rows are
 * q_row0 + acc_row(tid, 0 or 2), those at or past T skipped. */
template <int D>
__device__ __forceinline__ void store_rows(const float (&o)[D / 2], const float (&m_run)[2], float (&l_run)[2], int b,
                                           int h, int q_row0, int tid, float c, __nv_bfloat16 *out, int64_t ld_o,
                                           float *lse, int T, int H) {
    sum_rows(l_run);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = q_row0 + acc_row(tid, 2 * r);
        if (row >= T) continue;
        const float inv = 1.0f / l_run[r];
        __nv_bfloat16 *dst = out + ((int64_t)b * T + row) * ld_o + (int64_t)h * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            const int i = 4 * j + 2 * r;
            *reinterpret_cast<uint32_t *>(dst + acc_col(tid, i)) = pack_bf16(o[i] * inv, o[i + 1] * inv);
        }
        if ((tid & 3) == 0) lse[((int64_t)b * H + h) * T + row] = row_lse(m_run[r], l_run[r], c);
    }
}

/* store_rows through shared memory (the whole-head forward, D = 64), in two steps so that tensor-core
 * work can be issued between them. stage_rows: the same values as store_rows written into one of the
 * consumer's two swizzled staging tiles, lse stored (a thread's sixteen 4-byte global stores, eight
 * rows apart, became sixteen conflict-free shared stores; 1/l by rcp_row_sum, the bits of 1.0f / l,
 * off MUFU). store_staged: the tile stored by the copy engine as one 64-row box of the tensor map `to`
 * (rows past T not written). A tile is written again two strips later: before the barrier that
 * releases a box, its issuing thread waits until every earlier box has been read — the one from the
 * same tile among them (bar: the consumer's named barrier). */
template <int D>
__device__ __forceinline__ void stage_rows(const float (&o)[D / 2], const float (&m_run)[2], float (&l_run)[2], int b,
                                           int h, int q_row0, int tid, float c, uint32_t stage, float *lse, int T,
                                           int H) {
    static_assert(D == 64, "one 64-column block a row");
    sum_rows(l_run);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = acc_row(tid, 2 * r);
        const float inv = rcp_row_sum(l_run[r]); /* 1.0f / l without MUFU */
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            const int i = 4 * j + 2 * r;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(stage + sw128(row, acc_col(tid, i))),
                         "r"(pack_bf16(o[i] * inv, o[i + 1] * inv))
                         : "memory");
        }
        if ((tid & 3) == 0 && q_row0 + row < T) lse[((int64_t)b * H + h) * T + q_row0 + row] = row_lse(m_run[r], l_run[r], c);
    }
}
template <int D>
__device__ __forceinline__ void store_staged(int h, int q_row0, int b, int tid, uint32_t stage, const CUtensorMap *to,
                                             int bar) {
    static_assert(D == 64, "one 64-column box a strip");
    fence_proxy_async_smem();
    if (tid == 0) bulk_wait_read_all();
    named_bar_sync(bar, 128);
    if (tid == 0) {
        tma_store_4d(to, stage, 0, h, q_row0, b);
        bulk_commit();
    }
}

template <int D, bool JOIN>
__global__ void __launch_bounds__(384, 1) attn_fwd_sm90(const __grid_constant__ FwdParams p) {
#ifdef ATTN_SM90_ENABLED
    using C = FwdTile<D>;
    constexpr int QS = JOIN ? 2 : 1; /* query stages */
    using L = FwdSmem<D, QS>;
    constexpr int BM = C::BM, BN = C::BN, S = C::STAGES;
    static_assert(BM == BN, "the half block assumes square tiles");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < QS; s++) {
            mbar_init(base + L::Q_FULL + 8 * s, 1);
            mbar_init(base + L::Q_EMPTY + 8 * s, 8);
        }
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
        for (int tile; (tile = fwd_cta_tile(tcount, blockIdx.x, gridDim.x)) < p.num_tiles; tcount++) {
            const FwdWork w = fwd_tile(tile, p.num_m, p.B, p.H);
            const int n_max = fwd_n_max(w.m, BM, BN, p.T), kvh = w.h / group, qs = tcount % QS;
            const uint32_t qph = (uint32_t)(tcount / QS) & 1u;
            auto load_q = [&] {
                mbar_wait(base + L::Q_EMPTY + 8 * qs, qph ^ 1u, p.dbg, HANG_FWD_Q_EMPTY, tcount);
                mbar_expect_tx(base + L::Q_FULL + 8 * qs, C::Q_BYTES);
                tma_load_tile<D>(base + L::Q + qs * C::Q_BYTES, &p.tq, BM, w.h, w.m * BM, w.b, base + L::Q_FULL + 8 * qs);
            };
            if (JOIN) load_q(); /* its stage was freed a tile ago */
            int st = it % S;
            uint32_t ph = (uint32_t)(it / S) & 1u;
            mbar_wait(base + L::K_EMPTY + 8 * st, ph ^ 1u, p.dbg, HANG_FWD_K_EMPTY, it);
            mbar_expect_tx(base + L::K_FULL + 8 * st, C::KV_BYTES);
            tma_load_tile<D>(base + L::K + st * C::KV_BYTES, &p.tk, BN, kvh, n_max * BN, w.b, base + L::K_FULL + 8 * st);
            if (!JOIN) load_q(); /* once the previous tile's last S is done */
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
    const int cw = wg - 1;
    const float c = p.scale_log2;
    if (cw == 1) named_bar_arrive(BAR_SCHED0, 256); /* consumer 0 issues first */
    float o[D / 2], s[BN / 2];
    uint32_t pa[BN / 16][4];

    /* S = Q·Kᵀ of Q stage qs and K stage kst; P·V of V stage vst with the A registers of pa. Both
     * whole blocks always: a product whose shape depended on the half block would be a wgmma in a
     * divergent path, which ptxas serializes (every wgmma of the kernel waits for the previous; the
     * build checks for it, tests/unit/wgmma_serial_test.sh). */
    auto issue_s = [&](int qs, int kst) {
        gemm_abt<BN, D>(s, base + L::Q + qs * C::Q_BYTES, BM, 64 * cw, base + L::K + kst * C::KV_BYTES, BN, 0);
    };
    auto issue_pv = [&](int vst) { gemm_rs<D, BN / 16, BN>(o, pa, base + L::V + vst * C::KV_BYTES); };
    auto softmax = [&](bool half, const FwdWork &w, int n, int q_row0, float(&m_run)[2], float(&l_run)[2],
                       float(&corr)[2]) {
        const bool masked = causal_block_masked(w.m, BM, n, BN);
        if (half) softmax_update<BN / 4>(s, masked, n * BN, q_row0, tid, c, m_run, l_run, corr);
        else softmax_update<BN / 2>(s, masked, n * BN, q_row0, tid, c, m_run, l_run, corr);
    };
    auto to_a = [&](bool half) { scores_to_a<BN>(half, pa, s); };
    auto epilogue = [&](const FwdWork &w, int q_row0, const float(&m_run)[2], float(&l_run)[2]) {
        store_rows<D>(o, m_run, l_run, w.b, w.h, q_row0, tid, c, p.out, p.ld_o, p.lse, p.T, p.H);
    };
    /* One key block n < n_max of a tile (never a half block: only the diagonal n_max can be): S of
     * block n and P·V of block n + 1 (K stage st1, V stage st), the softmax of n under the P·V. */
    /* In this consumer's turn (the ping-pong barriers): S of Q stage qs and K stage st1 beside P·V of V
     * stage st; returns with S done (its K stage released), the P·V still running. */
    auto issue_pair = [&](int qs, int st1, int st) {
        named_bar_sync(BAR_SCHED0 + cw, 256);
        wgmma_fence();
        issue_s(qs, st1);
        wgmma_commit();
        issue_pv(st);
        wgmma_commit();
        named_bar_arrive(BAR_SCHED0 + (1 - cw), 256);
        wgmma_wait<1>(); /* S */
        fence_regs(s);
        warp_arrive(base + L::K_EMPTY + 8 * st1);
    };
    auto block_step = [&](const FwdWork &w, int n, int q_row0, int qs, int st, uint32_t ph, int st1, uint32_t ph1,
                          int it, float(&m_run)[2], float(&l_run)[2], float(&corr)[2]) {
        mbar_wait(base + L::K_FULL + 8 * st1, ph1, p.dbg, HANG_FWD_K_FULL, it + 1);
        mbar_wait(base + L::V_FULL + 8 * st, ph, p.dbg, HANG_FWD_V_FULL, it);
        issue_pair(qs, st1, st); /* S of block n, P·V of block n + 1 */
        if (n == 0) warp_arrive(base + L::Q_EMPTY + 8 * qs);
        softmax(false, w, n, q_row0, m_run, l_run, corr);
        wgmma_wait<0>(); /* P·V of block n + 1 */
        fence_regs(o);
        fence_regs(pa);
        warp_arrive(base + L::V_EMPTY + 8 * st);
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] *= corr[(i >> 1) & 1];
        to_a(false);
    };
    /* A tile's last P·V alone (V stage st of block it). */
    auto last_pv = [&](int st, uint32_t ph, int it) {
        mbar_wait(base + L::V_FULL + 8 * st, ph, p.dbg, HANG_FWD_V_FULL, it);
        wgmma_fence();
        issue_pv(st);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(pa);
        warp_arrive(base + L::V_EMPTY + 8 * st);
    };

    /* A tile's first S alone (Q stage qs, K stage st of block it), its softmax and A registers. */
    auto first_s = [&](const FwdWork &w, int n_max, int q_row0, bool half, int qs, uint32_t qph, int st, uint32_t ph,
                       int it, int tcount, float(&m_run)[2], float(&l_run)[2], float(&corr)[2]) {
        mbar_wait(base + L::Q_FULL + 8 * qs, qph, p.dbg, HANG_FWD_Q_FULL, tcount);
        mbar_wait(base + L::K_FULL + 8 * st, ph, p.dbg, HANG_FWD_K_FULL, it);
        wgmma_fence();
        issue_s(qs, st);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
        warp_arrive(base + L::K_EMPTY + 8 * st);
        if (n_max == 0) warp_arrive(base + L::Q_EMPTY + 8 * qs);
        softmax(half, w, n_max, q_row0, m_run, l_run, corr);
        to_a(half);
    };
    /* The key blocks n_max − 1 … 0 of a tile after its first S (block_step each; it, st and ph move on). */
    auto key_blocks = [&](const FwdWork &w, int n_max, int q_row0, int qs, int &it, int &st, uint32_t &ph,
                          float(&m_run)[2], float(&l_run)[2], float(&corr)[2]) {
        for (int n = n_max - 1; n >= 0; n--) {
            const int st1 = (it + 1) % S;
            const uint32_t ph1 = (uint32_t)((it + 1) / S) & 1u;
            block_step(w, n, q_row0, qs, st, ph, st1, ph1, it, m_run, l_run, corr);
            it++;
            st = st1;
            ph = ph1;
        }
    };

    if constexpr (!JOIN) {
        /* Tile by tile: the first S alone, the blocks, the last P·V alone, the epilogue (the diagonal
         * block whole: its half-block softmax measured no faster here). */
        int it = 0, tcount = 0;
        for (int tile; (tile = fwd_cta_tile(tcount, blockIdx.x, gridDim.x)) < p.num_tiles; tcount++) {
            const FwdWork w = fwd_tile(tile, p.num_m, p.B, p.H);
            const int n_max = fwd_n_max(w.m, BM, BN, p.T), q_row0 = w.m * BM + 64 * cw;
            float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}, corr[2];
#pragma unroll
            for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
            int st = it % S;
            uint32_t ph = (uint32_t)(it / S) & 1u;
            first_s(w, n_max, q_row0, false, 0, (uint32_t)tcount & 1u, st, ph, it, tcount, m_run, l_run, corr);
            key_blocks(w, n_max, q_row0, 0, it, st, ph, m_run, l_run, corr);
            last_pv(st, ph, it);
            it++;
            epilogue(w, q_row0, m_run, l_run);
        }
    } else {
        /* Joined (fwd_join): the key blocks of this CTA's tiles form one sequence — from one tile to
         * the next, the next tile's first S (its queries loaded into the other Q stage while this tile
         * ran) is issued beside this tile's last P·V and its softmax runs under it, then this tile's
         * epilogue. The enclosing one-trip loop is for ptxas: without it, it serializes every wgmma of
         * this path ("insufficient register resources for the wgmma pipeline", C7511). */
        for (int once = 0; once < 1 + (p.num_tiles < 0 ? 1 : 0); once++) {
            int tile = fwd_cta_tile(0, blockIdx.x, gridDim.x), tcount = 0, it = 0, qs = 0;
            FwdWork w = fwd_tile(tile, p.num_m, p.B, p.H);
            int n_max = fwd_n_max(w.m, BM, BN, p.T), q_row0 = w.m * BM + 64 * cw;
            float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}, corr[2];
#pragma unroll
            for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
            int st = 0;
            uint32_t ph = 0;
            first_s(w, n_max, q_row0, fwd_half_block(q_row0, n_max, BN), 0, 0u, 0, 0u, 0, 0, m_run, l_run, corr);
            for (;;) {
                key_blocks(w, n_max, q_row0, qs, it, st, ph, m_run, l_run, corr);
                const int next = fwd_cta_tile(tcount + 1, blockIdx.x, gridDim.x);
                if (next >= p.num_tiles) break;

                /* to the next tile: its first S beside this tile's last P·V */
                const FwdWork w2 = fwd_tile(next, p.num_m, p.B, p.H);
                const int n_max2 = fwd_n_max(w2.m, BM, BN, p.T), q_row2 = w2.m * BM + 64 * cw, qs2 = (tcount + 1) % QS;
                const bool half2 = fwd_half_block(q_row2, n_max2, BN);
                const int st1 = (it + 1) % S;
                const uint32_t ph1 = (uint32_t)((it + 1) / S) & 1u;
                mbar_wait(base + L::Q_FULL + 8 * qs2, (uint32_t)((tcount + 1) / QS) & 1u, p.dbg, HANG_FWD_Q_FULL,
                          tcount + 1);
                mbar_wait(base + L::K_FULL + 8 * st1, ph1, p.dbg, HANG_FWD_K_FULL, it + 1);
                mbar_wait(base + L::V_FULL + 8 * st, ph, p.dbg, HANG_FWD_V_FULL, it);
                issue_pair(qs2, st1, st); /* S of the next tile's first block, this tile's last P·V */
                if (n_max2 == 0) warp_arrive(base + L::Q_EMPTY + 8 * qs2);
                float m2[2] = {-INFINITY, -INFINITY}, l2[2] = {0.0f, 0.0f}, corr2[2];
                softmax(half2, w2, n_max2, q_row2, m2, l2, corr2);
                wgmma_wait<0>(); /* this tile's last P·V */
                fence_regs(o);
                fence_regs(pa);
                warp_arrive(base + L::V_EMPTY + 8 * st);
                to_a(half2);
                epilogue(w, q_row0, m_run, l_run);
#pragma unroll
                for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
#pragma unroll
                for (int r = 0; r < 2; r++) m_run[r] = m2[r], l_run[r] = l2[r];
                it++;
                st = st1;
                ph = ph1;
                tile = next, tcount++, w = w2, n_max = n_max2, q_row0 = q_row2, qs = qs2;
            }
            last_pv(st, ph, it); /* the last tile's */
            epilogue(w, q_row0, m_run, l_run);
        }
    }
#endif
}

/* The forward by whole heads (fwd_heads_fits: D = 64, T ≤ 512, B·KVH CTAs filling the SMs): one CTA
 * a (b, kv head) holds the head's K and V whole (up to 4 blocks of 128 keys: 64 KiB each), loaded once
 * in the order the consumers first need them (the last block first); three consumer warpgroups (160
 * registers each) walk strips of 64 queries of the group's heads (fwd_strip, dealt in a snake), each
 * with two query stages of its own, so a third warpgroup's products run while two take their
 * softmax — two consumers a scheduler left the tile kernel latency-bound at D = 64 (docs/PERFORMANCE.md).
 * A strip is the tile kernel's consumer of the same rows, step for step: key blocks n_max … 0, S of
 * block n issued beside P·V of block n + 1, the diagonal block masked (a half block for a strip whose
 * first query starts its block), the same rounding points — so the same bits; and a consumer joins
 * its strips as the tile kernel joins its tiles (the next strip's diagonal S beside this strip's last
 * P·V), then — where the next strip has a block before its diagonal one — issues that block's S and
 * the diagonal block's P·V (into a fresh O: the tile kernel's zeros plus P·V) around this strip's
 * epilogue, so that the rows' way out has tensor-core work under it. The producer warpgroup's warp 0
 * loads K and V (and each consumer's first queries), warp c + 1 the further queries of consumer c. A
 * strip's rows go out through one of the consumer's two staging tiles and the copy engine
 * (stage_rows, store_staged).
 * At B 16, T 512, H 32, KVH 8 on an H200: 300–304 TFLOP/s against the tile kernel's 238–240. */
struct FwdHeadsParams {
    CUtensorMap tq, tk, tv, to; /* tq, to (out): boxes of 64 rows; tk, tv: 128 */
    __nv_bfloat16 *out;         /* out and ld_o: fill_forward_params's; the kernel stores through `to` */
    int64_t ld_o;
    float *lse;
    int B, T, H, KVH, group, num_r, num_n, num_strips;
    FwdStripDiv div; /* the division by the group size, as a multiply-high */
    float scale_log2;
    HangRecord *dbg;
};
constexpr int kRegsHeadsProducer = 24, kRegsHeadsConsumer = 160;
static_assert(128 * kRegsHeadsProducer + 384 * kRegsHeadsConsumer <= 128 * 512, "register split beyond the CTA's allocation");

template <int D>
__global__ void __launch_bounds__(512, 1) attn_fwd_sm90_heads(const __grid_constant__ FwdHeadsParams p) {
#ifdef ATTN_SM90_ENABLED
    using C = FwdHeadsTile<D>;
    using L = FwdHeadsSmem<D>;
    constexpr int BN = C::BN, NC = C::CONSUMERS, QS = C::QSTAGES;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    /* the warpgroup index as the compiler sees it warp-uniform (from lane 0): what derives from it — a
     * consumer's strips, key blocks, descriptors — then lives in uniform registers */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0), tid = threadIdx.x % 128;
    const int kvh = blockIdx.x % p.KVH, b = blockIdx.x / p.KVH;
    if (threadIdx.x == 0) {
        for (int n = 0; n < C::MAX_N; n++) {
            mbar_init(base + L::K_FULL + 8 * n, 1);
            mbar_init(base + L::V_FULL + 8 * n, 1);
        }
        for (int i = 0; i < NC * QS; i++) {
            mbar_init(base + L::Q_FULL + 8 * i, 1);
            mbar_init(base + L::Q_EMPTY + 8 * i, 4);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) { /* ---------------- producer ---------------- */
        setmaxnreg_dec<kRegsHeadsProducer>();
        const int warp = tid / 32;
        if (tid % 32 != 0) return;
        /* strip k of consumer c into its query stage (the stage's previous strip done) */
        auto load_q = [&](int c, int k, int j) {
            const FwdStrip st = fwd_strip(j, p.num_r, p.div, kvh);
            const int qs = k % QS, bar = (c * QS + qs) * 8;
            /* the stage frees a strip ahead of its use: the wait suspends the warp instead of spinning,
             * leaving the issue slots to the consumers of this scheduler */
            mbar_wait_suspend(base + L::Q_EMPTY + bar, ((uint32_t)(k / QS) & 1u) ^ 1u, p.dbg, HANG_FWD_Q_EMPTY, k);
            mbar_expect_tx(base + L::Q_FULL + bar, C::Q_BYTES);
            tma_load_tile<D>(base + L::Q + (c * QS + qs) * C::Q_BYTES, &p.tq, C::BM, st.h, st.row0, b,
                             base + L::Q_FULL + bar);
        };
        auto load_kv = [&](uint32_t bars, uint32_t tile, const CUtensorMap *map, int n) {
            mbar_expect_tx(base + bars + 8 * n, C::KV_BYTES);
            tma_load_tile<D>(base + tile + n * C::KV_BYTES, map, BN, kvh, n * BN, b, base + bars + 8 * n);
        };
        /* The copies complete about in the order issued, and every CTA starts at once: what the first
         * products need goes first — the last key block's K and each consumer's first queries — then
         * the rest of K and V in the order the key blocks are visited, and the consumers' further
         * queries only once the last K has landed (issued together, the first S waited for all of it). */
        if (warp == 0) {
            const int last = p.num_n - 1;
            load_kv(L::K_FULL, L::K, &p.tk, last);
            for (int c = 0; c < NC; c++)
                if (fwd_cta_tile(0, c, NC) < p.num_strips) load_q(c, 0, fwd_cta_tile(0, c, NC));
            for (int n = last; n >= 0; n--) {
                load_kv(L::V_FULL, L::V, &p.tv, n);
                if (n > 0) load_kv(L::K_FULL, L::K, &p.tk, n - 1);
            }
            return;
        }
        const int c = warp - 1;
        mbar_wait_suspend(base + L::K_FULL, 0u, p.dbg, HANG_FWD_K_FULL, 0);
        for (int k = 1, j; (j = fwd_cta_tile(k, c, NC)) < p.num_strips; k++) load_q(c, k, j);
        return;
    }

    /* ---------------- consumers ---------------- */
    setmaxnreg_inc<kRegsHeadsConsumer>();
    const int cw = wg - 1;
    const float c = p.scale_log2;
    float o[D / 2], s[BN / 2];
    uint32_t pa[BN / 16][4];
    /* descriptors by addition (desc_lo): Q of stage qs, K and V of block n */
    const uint32_t k_lo = desc_lo(base + L::K, 16), v_lo = desc_lo(base + L::V, BN * 128);
    auto issue_s = [&](uint32_t q_lo, int n) {
        const uint32_t kn = k_lo + (uint32_t)n * (C::KV_BYTES >> 4);
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)
            wgmma_ss<BN, 0, 0>(s, desc_join(q_lo + 2 * ks), desc_join(kn + 2 * ks), ks > 0);
    };
    /* O += P·V of block n, or O = P·V (fresh: the old O not read) */
    auto issue_pv = [&](int n, bool fresh = false) {
        const uint32_t vn = v_lo + (uint32_t)n * (C::KV_BYTES >> 4);
#pragma unroll
        for (int ks = 0; ks < BN / 16; ks++) wgmma_rs<D, 1>(o, pa[ks], desc_join(vn + 128 * ks), ks > 0 || !fresh);
    };

    auto strip_row0 = [&](int j) { return fwd_strip(j, p.num_r, p.div, kvh).row0; };
    auto q_lo_of = [&](int k) { return desc_lo(base + L::Q + (cw * QS + k % QS) * C::Q_BYTES, 16); };
    auto q_bar = [&](uint32_t bars, int k) { return base + bars + (cw * QS + k % QS) * 8; };
    /* the diagonal block's softmax (masked; half of it when the strip starts its block) and its A
     * registers, in two steps: between them a P·V may still be reading pa */
    auto diag_softmax = [&](int q_row0, int n_max, float(&m)[2], float(&l)[2], float(&cr)[2]) {
        if (fwd_half_block(q_row0, n_max, BN))
            softmax_update<BN / 4>(s, true, n_max * BN, q_row0, tid, c, m, l, cr);
        else /* the strip starts 64 keys into its diagonal block: the block's first 64 keys are before all its queries */
            softmax_update<BN / 2, BN / 2, BN / 4>(s, true, n_max * BN, q_row0, tid, c, m, l, cr);
    };
    auto diag_to_a = [&](int q_row0, int n_max) { scores_to_a<BN>(fwd_half_block(q_row0, n_max, BN), pa, s); };
    /* strip k's rows (strip j) into staging tile k % 2, then stored */
    auto stage_of = [&](int k) { return base + L::O + (2 * cw + (k & 1)) * C::O_BYTES; };
    auto stage_strip = [&](int k, int j, int q_row0, const float(&m)[2], float(&l)[2]) {
        stage_rows<D>(o, m, l, b, fwd_strip(j, p.num_r, p.div, kvh).h, q_row0, tid, c, stage_of(k), p.lse, p.T, p.H);
    };
    auto store_strip = [&](int k, int j, int q_row0) {
        store_staged<D>(fwd_strip(j, p.num_r, p.div, kvh).h, q_row0, b, tid, stage_of(k), &p.to, BAR_STORE0 + cw);
    };
    /* A key block n < n_max of strip k (queries from q_row0) once its S and the P·V before it are issued:
     * S waited for (strip k's queries released after block 0), the softmax under the P·V, then O
     * rescaled and P's A registers formed */
    auto finish_block = [&](int n, int q_row0, int k, float(&m)[2], float(&l)[2], float(&cr)[2]) {
        wgmma_wait<1>();
        fence_regs(s);
        if (n == 0) warp_arrive(q_bar(L::Q_EMPTY, k));
        softmax_update<BN / 2>(s, false, n * BN, q_row0, tid, c, m, l, cr);
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(pa);
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] *= cr[(i >> 1) & 1];
        acc_to_a<BN / 16>(pa, s);
    };
    /* K and V stay for the whole kernel: a consumer waits for each block's arrival once (bit n of
     * `landed` for K, bit MAX_N + n for V) and after that only tests a register */
    uint32_t landed = 0;
    auto wait_landed = [&](uint32_t bars, int bit, int n, int code) {
        if (!(landed >> bit & 1u)) mbar_wait(base + bars + 8 * n, 0u, p.dbg, code, n);
        landed |= 1u << bit;
    };
    auto wait_k = [&](int n) { wait_landed(L::K_FULL, n, n, HANG_FWD_K_FULL); };
    auto wait_v = [&](int n) { wait_landed(L::V_FULL, C::MAX_N + n, n, HANG_FWD_V_FULL); };

    /* A consumer's strips form one sequence (as the tile kernel's joined tiles): from one strip to the
     * next, the next strip's diagonal S is issued beside this strip's last P·V, its softmax runs under
     * it, then this strip's rows are stored. The one-trip loop is for ptxas (attn_fwd_sm90's joined
     * path: without it every wgmma of the path is serialized). */
    for (int once = 0; once < 1 + (p.num_strips < 0 ? 1 : 0); once++) {
        int k = 0, j = fwd_cta_tile(0, cw, NC);
        if (j >= p.num_strips) break;
        int q_row0 = strip_row0(j), n_max = fwd_strip_n_max(q_row0, p.T);
        float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}, corr[2];
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
        /* the first strip's diagonal S alone */
        mbar_wait(q_bar(L::Q_FULL, 0), 0u, p.dbg, HANG_FWD_Q_FULL, 0);
        wait_k(n_max);
        wgmma_fence();
        issue_s(q_lo_of(0), n_max);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
        if (n_max == 0) warp_arrive(q_bar(L::Q_EMPTY, 0));
        diag_softmax(q_row0, n_max, m_run, l_run, corr);
        diag_to_a(q_row0, n_max);
        int n_top = n_max - 1; /* the strip's next block for the loop (a joined strip's first is done at the join) */
        for (;;) {
            /* blocks n_top … 0: S of n beside P·V of n + 1, the softmax of n under the P·V */
            const uint32_t q_lo = q_lo_of(k);
            for (int n = n_top; n >= 0; n--) {
                wait_k(n);
                wait_v(n + 1);
                wgmma_fence();
                issue_s(q_lo, n);
                wgmma_commit();
                issue_pv(n + 1);
                wgmma_commit();
                finish_block(n, q_row0, k, m_run, l_run, corr);
            }
            const int j2 = fwd_cta_tile(k + 1, cw, NC);
            if (j2 >= p.num_strips) break;

            /* to the next strip: its diagonal S beside this strip's last P·V */
            const int q_row2 = strip_row0(j2), n_max2 = fwd_strip_n_max(q_row2, p.T);
            mbar_wait(q_bar(L::Q_FULL, k + 1), (uint32_t)((k + 1) / QS) & 1u, p.dbg, HANG_FWD_Q_FULL, k + 1);
            wait_k(n_max2);
            wait_v(0);
            const uint32_t q_lo2 = q_lo_of(k + 1);
            wgmma_fence();
            issue_s(q_lo2, n_max2);
            wgmma_commit();
            issue_pv(0);
            wgmma_commit();
            wgmma_wait<1>();
            fence_regs(s);
            if (n_max2 == 0) warp_arrive(q_bar(L::Q_EMPTY, k + 1));
            float m2[2] = {-INFINITY, -INFINITY}, l2[2] = {0.0f, 0.0f}, corr2[2];
            diag_softmax(q_row2, n_max2, m2, l2, corr2);
            wgmma_wait<0>(); /* this strip's last P·V */
            fence_regs(o);
            fence_regs(pa);
            diag_to_a(q_row2, n_max2);
            if (n_max2 > 0) {
                /* the next strip's block n_max2 − 1: its S, then its diagonal block's P·V into a fresh O,
                 * issued around this strip's rows going to the staging tile, so that the store has the
                 * tensor cores' work under it */
                wait_k(n_max2 - 1);
                wgmma_fence();
                issue_s(q_lo2, n_max2 - 1);
                wgmma_commit();
                stage_strip(k, j, q_row0, m_run, l_run);
                wait_v(n_max2);
                wgmma_fence();
                issue_pv(n_max2, true);
                wgmma_commit();
                store_strip(k, j, q_row0);
                finish_block(n_max2 - 1, q_row2, k + 1, m2, l2, corr2);
            } else {
                stage_strip(k, j, q_row0, m_run, l_run);
                store_strip(k, j, q_row0);
#pragma unroll
                for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
            }
#pragma unroll
            for (int r = 0; r < 2; r++) m_run[r] = m2[r], l_run[r] = l2[r];
            k++, j = j2, q_row0 = q_row2, n_max = n_max2, n_top = n_max2 - 2; /* n_max2 − 1, if any, done above */
        }
        wait_v(0);
        wgmma_fence();
        issue_pv(0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(pa);
        stage_strip(k, j, q_row0, m_run, l_run);
        store_strip(k, j, q_row0);
    }
    if (tid == 0) bulk_wait_all(); /* the last box stored before the CTA's shared memory goes */
#endif
}

} // namespace attn90

using attn90::FwdParams;

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
        if (major == 9 && cudaFuncGetAttributes(&a, attn90::attn_fwd_sm90<128, false>) == cudaSuccess && a.binaryVersion == 90)
            v = 2;
        (void)cudaGetLastError(); /* a kernel image absent for this device is an answer, not an error */
        cache[dev].store(v, std::memory_order_relaxed);
    }
    return v == 2;
}

/* REFINE_ATTENTION_FWD=tiles keeps the tile kernel where the whole-head one would run, =heads takes the
 * whole-head one wherever it can (D = 64, T ≤ 512) however few CTAs it fills the SMs with: for
 * measuring one against the other (attention_parity --bench). */
static int env_fwd_choice() {
    const char *e = getenv("REFINE_ATTENTION_FWD");
    if (e == nullptr || *e == '\0') return 0;
    if (strcmp(e, "tiles") == 0) return 1;
    if (strcmp(e, "heads") == 0) return 2;
    CHECK(false, "REFINE_ATTENTION_FWD=%s: expected tiles or heads", e);
    return 0;
}

/* The fields both forward kernels' parameters share: tensor maps (queries in boxes of q_rows, keys
 * and values of 128), outputs, shape, the scale. */
template <class P>
static void fill_forward_params(P *p, int q_rows, uint16_t *out, int64_t ld_o, float *lse, const uint16_t *q,
                                const uint16_t *k, const uint16_t *v, int B, int T, int H, int KVH, int D, float scale,
                                HangRecord *dbg) {
    attn90::make_tmap(&p->tq, q, B, T, H, D, q_rows);
    attn90::make_tmap(&p->tk, k, B, T, KVH, D, 128);
    attn90::make_tmap(&p->tv, v, B, T, KVH, D, 128);
    p->out = reinterpret_cast<__nv_bfloat16 *>(out);
    p->ld_o = ld_o;
    p->lse = lse;
    p->B = B, p->T = T, p->H = H, p->KVH = KVH;
    p->scale_log2 = scale * 1.44269504088896341f;
    p->dbg = dbg;
}

static void forward_heads_launch(uint16_t *out, int64_t ld_o, float *lse, const uint16_t *q, const uint16_t *k,
                                 const uint16_t *v, int B, int T, int H, int KVH, float scale, cudaStream_t stream,
                                 HangRecord *dbg) {
    constexpr int D = 64;
    using C = attn90::FwdHeadsTile<D>;
    static_assert(C::BN == 128, "fill_forward_params maps keys and values in boxes of 128");
    attn90::FwdHeadsParams p;
    fill_forward_params(&p, C::BM, out, ld_o, lse, q, k, v, B, T, H, KVH, D, scale, dbg);
    attn90::make_tmap(&p.to, out, B, T, H, D, C::BM, ld_o); /* attention.cu's check_ld: 16-byte rows */
    p.group = H / KVH;
    p.div = attn90::fwd_strip_div(p.group);
    p.num_r = attn90::ceil_div(T, C::BM);
    p.num_n = attn90::ceil_div(T, C::BN);
    p.num_strips = p.group * p.num_r;
    const size_t smem = attn90::FwdHeadsSmem<D>::BYTES;
    CUDA_CHECK(cudaFuncSetAttribute(attn90::attn_fwd_sm90_heads<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
    attn90::attn_fwd_sm90_heads<D><<<B * KVH, 512, smem, stream>>>(p);
    KERNEL_CHECK(stream);
}

template <int D>
static void forward_launch(uint16_t *out, int64_t ld_o, float *lse, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, int B, int T, int H, int KVH, float scale, cudaStream_t stream,
                           HangRecord *dbg) {
    if constexpr (D == 64) {
        const int choice = env_fwd_choice();
        if (T <= 512 && (choice == 2 || (choice == 0 && attn90::fwd_heads_fits(B, T, KVH, D, refine_sm_count())))) {
            forward_heads_launch(out, ld_o, lse, q, k, v, B, T, H, KVH, scale, stream, dbg);
            return;
        }
    }
    using C = attn90::FwdTile<D>;
    static_assert(C::BN == 128, "fill_forward_params maps keys and values in boxes of 128");
    FwdParams p;
    fill_forward_params(&p, C::BM, out, ld_o, lse, q, k, v, B, T, H, KVH, D, scale, dbg);
    p.num_m = attn90::ceil_div(T, C::BM);
    p.num_tiles = p.num_m * B * H;
    const int sms = refine_sm_count();
    const int grid = p.num_tiles < sms ? p.num_tiles : sms;
    auto launch = [&](auto join) {
        constexpr bool kJoin = decltype(join)::value;
        const size_t smem = attn90::FwdSmem<D, kJoin ? 2 : 1>::BYTES;
        CUDA_CHECK(cudaFuncSetAttribute(attn90::attn_fwd_sm90<D, kJoin>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        attn90::attn_fwd_sm90<D, kJoin><<<grid, 384, smem, stream>>>(p);
    };
    if (attn90::fwd_join(p.num_m)) launch(std::true_type{});
    else launch(std::false_type{});
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
