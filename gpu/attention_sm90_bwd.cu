/* attention_sm90_bwd.cu — the Hopper flash-attention backward (gpu/attention.h's math; sm_90a:
 * wgmma, TMA, warp specialization), after FlashAttention-3's design (hopper/flash_bwd_kernel_sm90.h,
 * mainloop_bwd_sm90_tma_gmma_ws.hpp), with a fixed summation order everywhere (deterministic).
 *
 * Three launches:
 *  1. attn90_bwd_pre: Δ = rowsum(dO ∘ O) and lse·log2 e into (b·H + h, T_pad) arrays (zeros in the
 *     padding), and the dQ order counters set to 0. One warp per token row (all its heads).
 *  2. attn_bwd_sm90: one CTA per 128 keys (n) of one (b, kv head), 384 threads. Warpgroup 0: one
 *     thread loads K and V once and then, through a two-stage ring, Q, dO (TMA, swizzled) and the
 *     lse/Δ slices (bulk copies) of every query block m ≥ m_first(n) of every query head of the
 *     group; a second thread writes dQ (below). Warpgroups 1 and 2 own 64 keys each and, per block
 *     (FlashAttention-3's form with S and dP computed transposed, "SdP_swapAB", and dK, dV from
 *     registers, "Mma_dKV_is_RS"):
 *       Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ          wgmma SS m64 n{BM} k16, fp32 (keys × queries)
 *       Pᵀ = 2^(Sᵀ·scale·log2 e − lse·log2 e) (0 where key > query), dSᵀ = Pᵀ ∘ (dPᵀ − Δ)
 *       dV += Pᵀ·dO, dK += dSᵀ·Q        wgmma RS: the accumulators of Sᵀ and dPᵀ, rounded to bf16,
 *                                        are the A registers (dO, Q MN-major), issued before
 *       dSᵀ → shared memory (the same bf16 registers, swizzled), barrier of the two warpgroups, then
 *       dQ_blk = dS·K                    wgmma SS from the dSᵀ tile, both operands MN-major (m64n64k16
 *                                        × 8): each warpgroup one half (D = 128: 64 columns; D = 64:
 *                                        64 rows)
 *     and hands the fp32 dQ tile (8192 floats) to the writer through shared memory. dK and dV stay
 *     in registers over the whole group of query heads (the GQA sum in a fixed order) and are
 *     stored once, dK scaled.
 *     The writer adds the tile into the fp32 accumulation buffer with one bulk copy (rank 0: plain
 *     store) or one bulk fp32 add, in the order n = n_max(m), …, 0 that a counter per (b, h, m)
 *     enforces (acquire-spin, then release-increment): the sum of every dQ element has one order,
 *     whatever the timing. The grid launches the larger key blocks first (per head, or for T ≤ 512
 *     across every head: attention_sm90_layout.h §4, bwd_cta), so a CTA only waits on CTAs that
 *     started before it, and in steady state not at all (a larger key block reaches each query
 *     block earlier).
 *  3. attn90_bwd_post: dq = bf16(scale · dQ accumulation), from the tile order back to (B, T, H, D)
 *     (dq's rows, and dk's and dv's, at the caller's row stride: attention_internal.h ld_g).
 * With RoPE's backward (attention_internal.h RopeBwd): the dQ conversion rotates each row's pairs
 * (d, d + D/2) of the rounded tile as it stores them, and the consumers rotate dK's — a thread's
 * accumulators hold both columns of a pair (acc_col(i + D/4) = acc_col(i) + D/2) — with gpu/rope.cuh's
 * arithmetic on the same bf16 values gpu_rope_backward_bf16 would read: the same bits, without that
 * pass's read and write of dq and dk.
 * Shared memory (D = 128, BM = 64): K, V 32 KiB each, Q and dO 2 × 16 KiB each, dSᵀ 16 KiB, dQ
 * 2 × 32 KiB, lse/Δ 1 KiB: 210 KiB of the 227 KiB a CTA may have; D = 64 (BM = 128): K, V 16 KiB,
 * Q, dO 2 × 16 KiB, dSᵀ 32 KiB, dQ 2 × 32 KiB: 194 KiB. Registers per consumer thread: dK, dV D/2
 * each, Sᵀ, dPᵀ BM/2 each (then their bf16 A registers, BM/4 each), dQ 32: 192 live at most.
 * Test: tests/parity/attention_parity.cu.
 */
#include <math.h>

#include "gpu/attention_sm90.cuh"
#include "gpu/attention_switch.h"
#include "gpu/rope.cuh"

namespace refine {
namespace attn90 {

struct BwdParams {
    CUtensorMap tq, tdo, tk, tv;
    __nv_bfloat16 *dk, *dv;
    int64_t ld_kv;             /* dk's and dv's row stride, elements */
    const float *lse2, *delta; /* (B·H, T_pad) */
    float *dqacc;              /* (B·H·num_m, 8192) */
    int *sem;                  /* (B·H·num_m) */
    int B, T, H, KVH, group, T_pad, num_m, num_n; /* group = H / KVH */
    float scale_log2, scale;
    const __nv_bfloat16 *rope_cos, *rope_sin; /* RoPE's backward on dk (nullptr: none) */
    const int32_t *rope_pos;
    HangRecord *dbg;
};

/* Δ, lse·log2 e (padded) and the counters. A block takes kPreRows consecutive token rows (b, i) of
 * the padded (B, T_pad) grid, one warp a row: the row's H heads of dout and out, H·D contiguous
 * elements each at row stride ld_o, read with 16-byte loads (D/8 lanes a head, 256/D heads a warp
 * instruction, kPreLoads instructions of each in flight), each head's sum formed as a lane's 8
 * products in column order, then the xor tree over the head's lanes; the block's Δ and lse·log2 e go
 * out through shared memory as kPreRows consecutive floats a head (whole 32-byte sectors). Rows of
 * the padding (i ≥ T): zeros. Reading the rows as they lie in memory, instead of 8 rows of one head
 * 4 KB apart, moved Δ from 66% of the copy rate to ~85% (docs/RESULTS.md, 2026-11-28, seventh
 * session). */
constexpr int kPreRows = 8, kPreMaxHeads = 128, kPreLoads = 4;

template <int D>
__global__ void __launch_bounds__(256) attn90_bwd_pre(float *__restrict__ delta, float *__restrict__ lse2,
                                                      int *__restrict__ sem, const __nv_bfloat16 *__restrict__ dout,
                                                      const __nv_bfloat16 *__restrict__ out, int64_t ld_o,
                                                      const float *__restrict__ lse, int B, int T, int H, int T_pad,
                                                      int BM, int num_m) {
    constexpr int LPH = D / 8, HPI = 32 / LPH; /* lanes a head, heads a warp instruction */
    __shared__ float s_delta[kPreMaxHeads][kPreRows];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row0 = (int64_t)blockIdx.x * kPreRows; /* T_pad % kPreRows == 0: one b a block */
    const int b = (int)(row0 / T_pad), i0 = (int)(row0 - (int64_t)b * T_pad), i = i0 + warp;
    const int hl = lane / LPH, c = (lane % LPH) * 8;
    if (i < T) {
        const int64_t at = ((int64_t)b * T + i) * ld_o + c;
        for (int h0 = 0; h0 < H; h0 += HPI * kPreLoads) {
            uint4 x[kPreLoads], y[kPreLoads];
#pragma unroll
            for (int k = 0; k < kPreLoads; k++) {
                const int h = h0 + k * HPI + hl;
                x[k] = y[k] = make_uint4(0, 0, 0, 0);
                if (h < H) {
                    x[k] = *reinterpret_cast<const uint4 *>(dout + at + (int64_t)h * D);
                    y[k] = *reinterpret_cast<const uint4 *>(out + at + (int64_t)h * D);
                }
            }
#pragma unroll
            for (int k = 0; k < kPreLoads; k++) {
                const __nv_bfloat162 *xa = reinterpret_cast<const __nv_bfloat162 *>(&x[k]);
                const __nv_bfloat162 *ya = reinterpret_cast<const __nv_bfloat162 *>(&y[k]);
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float2 u = __bfloat1622float2(xa[j]), v = __bfloat1622float2(ya[j]);
                    s = __fmaf_rn(u.x, v.x, s);
                    s = __fmaf_rn(u.y, v.y, s);
                }
#pragma unroll
                for (int o = LPH / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
                const int h = h0 + k * HPI + hl;
                if (lane % LPH == 0 && h < H) s_delta[h][warp] = s;
            }
        }
    } else {
        for (int h = lane; h < H; h += 32) s_delta[h][warp] = 0.0f;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < H * kPreRows; e += blockDim.x) {
        const int h = e / kPreRows, r = e % kPreRows, ir = i0 + r;
        const int64_t bh = (int64_t)b * H + h, row = bh * T_pad + ir;
        delta[row] = s_delta[h][r];
        lse2[row] = ir < T ? lse[bh * T + ir] * 1.44269504088896341f : 0.0f;
        if (ir < T && ir % BM == 0 && ir / BM < num_m) sem[bh * num_m + ir / BM] = 0;
    }
}

/* dq (B, T, H, D) = bf16(scale · the fp32 tiles): one block a tile (8192 floats, BM = 8192/D query
 * rows of one head), read in the accumulator's fragment order with 16-byte loads, rounded into a
 * shared (BM, D) tile, then stored as 16-byte pieces of whole rows (the fragment order's own stores
 * left each warp instruction's 4-byte pieces in 8 rows: 74% of the copy rate at Llama-3.2-1B's
 * shape; docs/RESULTS.md, 2026-11-28, seventh session). The same products and roundings as before:
 * the same bits. A pass of its own: the conversion inside attn_bwd_sm90 — by the writer as key block
 * 0 completed each tile, or by key block 0's consumers after their loop — measured slower and level
 * (docs/RESULTS.md, 2026-11-28, third session): key block 0's CTAs are the grid's longest and launch
 * last. */
template <int D>
__global__ void __launch_bounds__(256) attn90_bwd_post(__nv_bfloat16 *__restrict__ dq,
                                                       const float *__restrict__ dqacc, int T, int H, int num_m,
                                                       float scale, int64_t ld_q, const __nv_bfloat16 *rope_cos,
                                                       const __nv_bfloat16 *rope_sin, const int32_t *rope_pos) {
    /* the tile's rows, its pitch (rows 16 bytes apart in the banks), 16-byte pieces a row */
    constexpr int BM = 8192 / D, P = D + 8, CPR = D / 8;
    __shared__ __align__(16) __nv_bfloat16 t[BM][P];
    const int64_t tile = blockIdx.x; /* (b·H + h)·num_m + m */
    const float *src = dqacc + tile * 8192;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int e = 4 * ((int)threadIdx.x + 256 * k);
        const float4 v = *reinterpret_cast<const float4 *>(src + e);
        const DqCoord c0 = dq_tile_coord(D, e); /* e + 1: column + 1; e + 2: row + 8; e + 3: both */
        *reinterpret_cast<uint32_t *>(&t[c0.row][c0.col]) = pack_bf16(v.x * scale, v.y * scale);
        *reinterpret_cast<uint32_t *>(&t[c0.row + 8][c0.col]) = pack_bf16(v.z * scale, v.w * scale);
    }
    __syncthreads();
    const int m = (int)(tile % num_m), h = (int)((tile / num_m) % H), b = (int)(tile / ((int64_t)num_m * H));
    if (rope_cos) { /* RoPE's backward: a thread 8 pairs (d, d + D/2) of a row */
        constexpr int HALF = D / 2, GPR = HALF / 8;
        for (int c = threadIdx.x; c < BM * GPR; c += 256) {
            const int r = c / GPR, c8 = (c % GPR) * 8, row = m * BM + r;
            if (row >= T) continue;
            const int64_t pos = rope_pos[(int64_t)b * T + row];
            float x1[8], x2[8], cs[8], sn[8], y1[8], y2[8];
            load_bf16<8>(x1, &t[r][c8]);
            load_bf16<8>(x2, &t[r][c8 + HALF]);
            load_bf16<8>(cs, rope_cos + pos * HALF + c8);
            load_bf16<8>(sn, rope_sin + pos * HALF + c8);
#pragma unroll
            for (int j = 0; j < 8; j++) rope_rotate_pair(x1[j], x2[j], cs[j], -sn[j], y1[j], y2[j]);
            __nv_bfloat16 *dst = dq + ((int64_t)b * T + row) * ld_q + (int64_t)h * D + c8;
            store_bf16<8>(dst, y1);
            store_bf16<8>(dst + HALF, y2);
        }
        return;
    }
    for (int c = threadIdx.x; c < BM * CPR; c += 256) {
        const int r = c / CPR, c8 = (c % CPR) * 8, row = m * BM + r;
        if (row < T)
            *reinterpret_cast<uint4 *>(dq + ((int64_t)b * T + row) * ld_q + (int64_t)h * D + c8) =
                *reinterpret_cast<const uint4 *>(&t[r][c8]);
    }
}

template <int D>
__global__ void __launch_bounds__(384, 1) attn_bwd_sm90(const __grid_constant__ BwdParams p) {
#ifdef ATTN_SM90_ENABLED
    using C = BwdTile<D>;
    using L = BwdSmem<D>;
    constexpr int BM = C::BM, BN = C::BN, S = C::STAGES, DQS = C::DQ_STAGES;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned char *gbase = smem_raw + (base - smem_u32(smem_raw)); /* generic address of base */
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        mbar_init(base + L::KV_FULL, 1);
        for (int s = 0; s < S; s++) {
            mbar_init(base + L::Q_FULL + 8 * s, 1);
            mbar_init(base + L::Q_EMPTY + 8 * s, 8);
        }
        for (int s = 0; s < DQS; s++) {
            mbar_init(base + L::DQ_FULL + 8 * s, 8);
            mbar_init(base + L::DQ_EMPTY + 8 * s, 1);
        }
        mbar_fence_init();
    }
    __syncthreads();
    const BwdCta cta = bwd_cta(blockIdx.x, blockIdx.y, blockIdx.z, p.num_n);
    const int n = cta.n, kvh = cta.kvh, b = cta.b, group = p.group;
    const int m0 = bwd_m_first(n, BN, BM);

    if (wg == 0) { /* ---------------- producer and dQ writer ---------------- */
        setmaxnreg_dec<kRegsProducer>();
        if (tid == 0) {
            mbar_expect_tx(base + L::KV_FULL, 2 * C::KV_BYTES);
            tma_load_tile<D>(base + L::K, &p.tk, BN, kvh, n * BN, b, base + L::KV_FULL);
            tma_load_tile<D>(base + L::V, &p.tv, BN, kvh, n * BN, b, base + L::KV_FULL);
            int it = 0;
            for (int hh = 0; hh < group; hh++) {
                const int h = kvh * group + hh;
                for (int m = m0; m < p.num_m; m++, it++) {
                    const int st = it % S;
                    const uint32_t ph = (uint32_t)(it / S) & 1u;
                    mbar_wait(base + L::Q_EMPTY + 8 * st, ph ^ 1u, p.dbg, HANG_BWD_Q_EMPTY, it);
                    const uint32_t full = base + L::Q_FULL + 8 * st;
                    mbar_expect_tx(full, 2 * C::Q_BYTES + 2 * BM * 4);
                    tma_load_tile<D>(base + L::Q + st * C::Q_BYTES, &p.tq, BM, h, m * BM, b, full);
                    tma_load_tile<D>(base + L::DO + st * C::Q_BYTES, &p.tdo, BM, h, m * BM, b, full);
                    const int64_t off = ((int64_t)b * p.H + h) * p.T_pad + (int64_t)m * BM;
                    bulk_g2s(base + L::LSE + st * BM * 4, p.lse2 + off, BM * 4, full);
                    bulk_g2s(base + L::DL + st * BM * 4, p.delta + off, BM * 4, full);
                }
            }
        } else if (tid == 32) {
            int it = 0;
            for (int hh = 0; hh < group; hh++) {
                const int h = kvh * group + hh;
                for (int m = m0; m < p.num_m; m++, it++) {
                    const int buf = it % DQS;
                    const uint32_t ph = (uint32_t)(it / DQS) & 1u;
                    mbar_wait(base + L::DQ_FULL + 8 * buf, ph, p.dbg, HANG_BWD_DQ_FULL, it);
                    const int64_t t = ((int64_t)b * p.H + h) * p.num_m + m;
                    int *sem = p.sem + t;
                    const int rank = bwd_dq_rank(m, n, BM, BN, p.T);
                    if (rank > 0) {
                        uint32_t spins = 0, t0 = 0;
                        while (ld_acquire(sem) != rank)
                            if (!watchdog(spins, t0, p.dbg, HANG_BWD_SEM, it)) break;
                        fence_proxy_async_global();
                    }
                    float *dst = p.dqacc + t * C::DQ_FLOATS;
                    const uint32_t src = base + L::DQ + buf * C::DQ_FLOATS * 4;
                    if (rank == 0) bulk_s2g(dst, src, C::DQ_FLOATS * 4);
                    else bulk_s2g_add_f32(dst, src, C::DQ_FLOATS * 4);
                    bulk_commit();
                    bulk_wait_all();
                    mbar_arrive(base + L::DQ_EMPTY + 8 * buf);
                    fence_proxy_async_global();
                    red_release_add(sem, 1);
                }
            }
        }
        return;
    }

    /* ---------------- consumers: keys n·BN + 64·cw … ---------------- */
    setmaxnreg_inc<kRegsConsumer>();
    const int cw = wg - 1;
    const int key0 = n * BN + 64 * cw;
    const float c = p.scale_log2;
    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dk[i] = dv[i] = 0.0f;
    mbar_wait(base + L::KV_FULL, 0, p.dbg, HANG_BWD_KV_FULL, 0);
    int it = 0;
    for (int hh = 0; hh < group; hh++) {
        for (int m = m0; m < p.num_m; m++, it++) {
            const int st = it % S;
            const uint32_t ph = (uint32_t)(it / S) & 1u;
            const uint32_t sQ = base + L::Q + st * C::Q_BYTES, sDO = base + L::DO + st * C::Q_BYTES;
            const float *lse2 = reinterpret_cast<const float *>(gbase + L::LSE + st * BM * 4);
            const float *dl = reinterpret_cast<const float *>(gbase + L::DL + st * BM * 4);
            const bool masked = causal_block_masked(m, BM, n, BN);
            mbar_wait(base + L::Q_FULL + 8 * st, ph, p.dbg, HANG_BWD_Q_FULL, it);
            /* Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for this warpgroup's 64 keys and the block's BM queries */
            float sT[BM / 2], dpT[BM / 2];
            wgmma_fence();
            gemm_abt<BM, D>(sT, base + L::K, BN, 64 * cw, sQ, BM, 0);
            gemm_abt<BM, D>(dpT, base + L::V, BN, 64 * cw, sDO, BM, 0);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(sT);
            fence_regs(dpT);
            /* Pᵀ, dSᵀ: accumulator i is key key0 + acc_row(tid, i), query m·BM + acc_col(tid, i); the
             * two columns 2t, 2t + 1 of each group of 8 share one 8-byte load of lse·log2 e and of Δ */
#pragma unroll
            for (int j = 0; j < BM / 8; j++) {
                const int col = acc_col(tid, 4 * j);
                const float2 l2 = *reinterpret_cast<const float2 *>(lse2 + col);
                const float2 dlt = *reinterpret_cast<const float2 *>(dl + col);
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int i = 4 * j + 2 * r + e;
                        float pv = ex2(fmaf(sT[i], c, -(e ? l2.y : l2.x)));
                        if (masked && key0 + acc_row(tid, i) > m * BM + col + e) pv = 0.0f;
                        sT[i] = pv;
                        dpT[i] = pv * (dpT[i] - (e ? dlt.y : dlt.x));
                    }
            }
            /* bf16 Pᵀ and dSᵀ as A registers: dV += Pᵀ·dO and dK += dSᵀ·Q from registers */
            uint32_t aP[BM / 16][4], aDS[BM / 16][4];
            acc_to_a<BM / 16>(aP, sT);
            acc_to_a<BM / 16>(aDS, dpT);
            wgmma_fence();
            gemm_rs<D, BM / 16>(dv, aP, sDO);
            gemm_rs<D, BM / 16>(dk, aDS, sQ);
            wgmma_commit();
            /* dSᵀ into shared memory for dQ = dS·K, once the other warpgroup's dQ product of the
             * previous block no longer reads it */
            named_bar_sync(BAR_DS_FREE, 256);
            store_a_tile<BM / 16>(base + L::DS, BN, 64 * cw, aDS, tid);
            fence_proxy_async_smem();
            named_bar_sync(BAR_DS, 256); /* both warpgroups' dSᵀ rows are in shared memory */
            /* dQ = dS·K (A = the dSᵀ tile, MN-major): D = 128, columns 64·cw …; D = 64, rows 64·cw … */
            float dq[32];
            wgmma_fence();
            gemm_tn<64, BN>(dq, base + L::DS, D == 128 ? 0 : cw, base + L::K, D == 128 ? cw : 0);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(dv);
            fence_regs(dk);
            fence_regs(dq);
            fence_regs(aP);
            fence_regs(aDS);
            warp_arrive(base + L::Q_EMPTY + 8 * st);

            const int buf = it % DQS;
            const uint32_t phb = (uint32_t)(it / DQS) & 1u;
            mbar_wait(base + L::DQ_EMPTY + 8 * buf, phb ^ 1u, p.dbg, HANG_BWD_DQ_EMPTY, it);
            const uint32_t sDQ = base + L::DQ + buf * C::DQ_FLOATS * 4;
#pragma unroll
            for (int i4 = 0; i4 < 8; i4++)
                asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(sDQ + 4u * (uint32_t)dq_tile_index(cw, tid, 4 * i4)),
                             "f"(dq[4 * i4]), "f"(dq[4 * i4 + 1]), "f"(dq[4 * i4 + 2]), "f"(dq[4 * i4 + 3])
                             : "memory");
            fence_proxy_async_smem();
            warp_arrive(base + L::DQ_FULL + 8 * buf);
        }
    }
    /* dK (scaled) and dV of this warpgroup's keys */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = key0 + acc_row(tid, 2 * r);
        if (key >= p.T) continue;
        const int64_t off = ((int64_t)b * p.T + key) * p.ld_kv + (int64_t)kvh * D;
        if (p.rope_cos) { /* RoPE's backward on the rounded dK: pair (i, i + D/4) is columns (d, d + D/2) */
            const int64_t pos = p.rope_pos[(int64_t)b * p.T + key];
            const __nv_bfloat162 *cos2 = reinterpret_cast<const __nv_bfloat162 *>(p.rope_cos + pos * (D / 2));
            const __nv_bfloat162 *sin2 = reinterpret_cast<const __nv_bfloat162 *>(p.rope_sin + pos * (D / 2));
#pragma unroll
            for (int j = 0; j < D / 16; j++) {
                const int i = 4 * j + 2 * r, col = acc_col(tid, i);
                const float2 cs = __bfloat1622float2(cos2[col / 2]), sn = __bfloat1622float2(sin2[col / 2]);
                float y1[2], y2[2];
                rope_rotate_pair(bf16_round_dev(dk[i] * p.scale), bf16_round_dev(dk[i + D / 4] * p.scale), cs.x, -sn.x,
                                 y1[0], y2[0]);
                rope_rotate_pair(bf16_round_dev(dk[i + 1] * p.scale), bf16_round_dev(dk[i + 1 + D / 4] * p.scale), cs.y,
                                 -sn.y, y1[1], y2[1]);
                *reinterpret_cast<uint32_t *>(p.dk + off + col) = pack_bf16(y1[0], y1[1]);
                *reinterpret_cast<uint32_t *>(p.dk + off + col + D / 2) = pack_bf16(y2[0], y2[1]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                const int i = 4 * j + 2 * r;
                *reinterpret_cast<uint32_t *>(p.dk + off + acc_col(tid, i)) = pack_bf16(dk[i] * p.scale, dk[i + 1] * p.scale);
            }
        }
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            const int i = 4 * j + 2 * r;
            *reinterpret_cast<uint32_t *>(p.dv + off + acc_col(tid, i)) = pack_bf16(dv[i], dv[i + 1]);
        }
    }
#endif
}

} // namespace attn90

template <int D>
static void backward_launch(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q,
                            const uint16_t *k, const uint16_t *v, const uint16_t *out, int64_t ld_o, const float *lse,
                            int B, int T, int H, int KVH, float scale, void *workspace, cudaStream_t stream,
                            HangRecord *dbg, int64_t ld_q, int64_t ld_kv, const RopeBwd *rope) {
    using C = attn90::BwdTile<D>;
    const attn90::BwdWorkspace ws = attn90::bwd_workspace(B, T, H);
    unsigned char *w = static_cast<unsigned char *>(workspace);
    attn90::BwdParams p;
    attn90::make_tmap(&p.tq, q, B, T, H, D, C::BM);
    attn90::make_tmap(&p.tdo, dout, B, T, H, D, C::BM, ld_o);
    attn90::make_tmap(&p.tk, k, B, T, KVH, D, C::BN);
    attn90::make_tmap(&p.tv, v, B, T, KVH, D, C::BN);
    p.dk = reinterpret_cast<__nv_bfloat16 *>(dk);
    p.dv = reinterpret_cast<__nv_bfloat16 *>(dv);
    p.ld_kv = ld_kv;
    float *lse2 = reinterpret_cast<float *>(w + ws.lse2), *delta = reinterpret_cast<float *>(w + ws.delta);
    p.lse2 = lse2;
    p.delta = delta;
    p.dqacc = reinterpret_cast<float *>(w + ws.dqacc);
    p.sem = reinterpret_cast<int *>(w + ws.sem);
    p.B = B, p.T = T, p.H = H, p.KVH = KVH, p.group = H / KVH;
    p.T_pad = attn90::ceil_div(T, 128) * 128;
    p.num_m = attn90::ceil_div(T, C::BM);
    p.num_n = attn90::ceil_div(T, C::BN);
    p.scale_log2 = scale * 1.44269504088896341f;
    p.scale = scale;
    p.rope_cos = rope ? reinterpret_cast<const __nv_bfloat16 *>(rope->cos) : nullptr;
    p.rope_sin = rope ? reinterpret_cast<const __nv_bfloat16 *>(rope->sin) : nullptr;
    p.rope_pos = rope ? rope->pos : nullptr;
    p.dbg = dbg;

    CHECK(H <= attn90::kPreMaxHeads, "attention backward: H=%d query heads (at most %d)", H, attn90::kPreMaxHeads);
    const int64_t blocks = (int64_t)B * p.T_pad / attn90::kPreRows; /* T_pad: a multiple of 128 */
    attn90::attn90_bwd_pre<D><<<(unsigned)blocks, 32 * attn90::kPreRows, 0, stream>>>(
        delta, lse2, p.sem, reinterpret_cast<const __nv_bfloat16 *>(dout), reinterpret_cast<const __nv_bfloat16 *>(out),
        ld_o, lse, B, T, H, p.T_pad, C::BM, p.num_m);
    KERNEL_CHECK(stream);
    const size_t smem = attn90::BwdSmem<D>::BYTES;
    CUDA_CHECK(cudaFuncSetAttribute(attn90::attn_bwd_sm90<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const attn90::BwdGrid grid = attn90::bwd_grid(p.num_n, KVH, B);
    attn90::attn_bwd_sm90<D><<<dim3((unsigned)grid.x, (unsigned)grid.y, (unsigned)grid.z), 384, smem, stream>>>(p);
    KERNEL_CHECK(stream);
    static_assert(C::BM * D == 8192, "attn90_bwd_post: a dQ tile is 8192 floats");
    attn90::attn90_bwd_post<D><<<(unsigned)((int64_t)B * H * p.num_m), 256, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(dq), p.dqacc, T, H, p.num_m, scale, ld_q, p.rope_cos, p.rope_sin, p.rope_pos);
    KERNEL_CHECK(stream);
}

void attn90_backward(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q,
                     const uint16_t *k, const uint16_t *v, const uint16_t *out, const float *lse, int B, int T, int H,
                     int KVH, int D, float scale, void *workspace, cudaStream_t stream, HangRecord *dbg,
                     int64_t ld_o, int64_t ld_q, int64_t ld_kv, const RopeBwd *rope) {
    CHECK(attn90_available(D), "the Hopper attention kernels cannot run here (D=%d)", D);
    ATTN_HEADDIM_SWITCH(D, [&](auto hd) {
        constexpr int kD = decltype(hd)::value;
        if constexpr (kD == 64 || kD == 128)
            backward_launch<kD>(dq, dk, dv, dout, q, k, v, out, ld_o, lse, B, T, H, KVH, scale, workspace, stream,
                                dbg, ld_q, ld_kv, rope);
    });
}

} // namespace refine
