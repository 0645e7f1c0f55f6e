/* attention_sm90_layout.h — the index math of the Hopper attention kernels (gpu/attention_sm90.cu),
 * host and device, so that every formula here is tested on the CPU
 * (tests/parity/attention_layout_test.cc, in every `bazel test //...`).
 *
 * C++17, header only; no CUDA types. Included by gpu/attention_sm90.cu (device and host code) and by
 * the CPU test. Nothing here touches memory: pure functions of integers (and rcp_row_sum, of a float).
 *
 * 1. Shared-memory tiles. Every bf16 tile the tensor cores read is stored as column blocks of 64
 *    elements (128 bytes a row): a tile of R rows × C columns (C a multiple of 64) is C/64 blocks
 *    of R × 64, block after block, each with the 128-byte swizzle of the tensor-copy engine
 *    (CU_TENSOR_MAP_SWIZZLE_128B): the 16-byte chunk j of row r sits at chunk j ^ (r mod 8). The
 *    swizzle is a function of the shared-memory address bits (bits 4–6 ^= bits 7–9), so every tile
 *    starts on a 1024-byte boundary (R is a multiple of 8).
 * 2. wgmma shared-memory descriptors (PTX ISA "matrix descriptor"; the canonical layouts as CUTLASS's
 *    make_gmma_desc documents them), 128-byte swizzle mode:
 *      bits  0–13 start address >> 4,  16–29 leading byte offset (LBO) >> 4,
 *      bits 32–45 stride byte offset (SBO) >> 4,  49–51 base offset (0 here),  62–63 mode (1 = 128B).
 *    K-major operand (rows = M or N, the 16 k-values of one instruction contiguous): element
 *      (mn, k) at start + (mn mod 8)·128 + (mn div 8)·SBO + 2k, then swizzled; LBO unused (1).
 *    MN-major operand (the M or N index contiguous): element (mn, k) at
 *      start + 2·(mn mod 64) + (mn div 64)·LBO + (k mod 8)·128 + (k div 8)·SBO, then swizzled.
 *    In our tiles SBO = 1024 (8 rows of 128 bytes); for MN-major operands LBO = R·128 (the next
 *    64-column block); one k-step (16 k-values) advances a K-major start by 32 bytes inside a block
 *    (the next block after 4 steps) and an MN-major start by 16 rows = 2048 bytes.
 *    desc_addr_kmajor / desc_addr_mnmajor emulate the hardware's address generation for the test.
 * 3. Register fragments of wgmma m64nNk16 (fp32 accumulators, bf16 A from registers), thread tid of
 *    the warpgroup (warp w = tid/32, g = (tid%32)/4, t = tid%4):
 *      accumulator d[i]: row 16w + g + 8·((i/2) mod 2), column 8·(i/4) + 2t + (i mod 2);
 *      A register a[j] (two bf16, low half first): row 16w + g + 8·(j mod 2), k 8·(j/2) + 2t + half.
 *    So the accumulators of a 64 × 16·s product are the A registers of s k-steps (P·V, Pᵀ·dO and
 *    dSᵀ·Q take their A operand from the registers of S, dP): a_from_acc_index.
 * 4. Schedules. Forward: a persistent grid walks tiles (m, b, h) of 128 queries, heaviest (largest m,
 *    most key blocks under the causal mask) first, dealt to the CTAs in a snake (fwd_cta_tile); each
 *    tile visits key blocks n = n_max … 0. Backward:
 *    a CTA owns 128 keys (n) of one (b, kv head) and walks the query blocks m ≥ m_first(n) of every
 *    query head of the group; dQ of a query block is summed over the key blocks in the fixed order
 *    n = n_max(m), …, 0 (rank 0 stores, the others add), enforced by one counter per (b, h, m).
 *    The grid dispatches the larger key blocks first — per (b, kv head), or, for short sequences,
 *    across every (b, kv head) at once (bwd_cta) — so that every CTA waits only on CTAs launched
 *    before it (which reach each query block earlier).
 * 5. The dQ tile in the fp32 accumulation buffer: 8192 floats a (b, h, m) in the order the two
 *    consumer warpgroups hold them, dq_tile_index / dq_tile_coord.
 */
#ifndef REFINE_GPU_ATTENTION_SM90_LAYOUT_H
#define REFINE_GPU_ATTENTION_SM90_LAYOUT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define ATTN_HD __host__ __device__ __forceinline__
#else
#define ATTN_HD inline
#endif

namespace refine {
namespace attn90 {

/* ---- tiles ------------------------------------------------------------------------------------ */

/* Forward: 128 queries (two consumer warpgroups of 64 rows) × key blocks of 128, two K/V stages. */
template <int D>
struct FwdTile {
    static_assert(D == 64 || D == 128, "the Hopper kernels take D = 64 or 128");
    static constexpr int BM = 128, BN = 128, STAGES = 2;
    static constexpr int Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
};

/* Backward: 128 keys a CTA (two consumer warpgroups of 64 keys), query blocks of BM. */
template <int D>
struct BwdTile {
    static_assert(D == 64 || D == 128, "the Hopper kernels take D = 64 or 128");
    static constexpr int BN = 128;
    static constexpr int BM = D == 128 ? 64 : 128;
    static constexpr int STAGES = 2;    /* Q, dO, lse, Δ */
    static constexpr int DQ_STAGES = 2; /* fp32 dQ tiles handed to the writer */
    static constexpr int Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static constexpr int DS_BYTES = BN * BM * 2; /* dSᵀ, bf16, 128 keys × BM queries */
    static constexpr int DQ_FLOATS = BM * D;     /* = 8192 for both head dims */
};

ATTN_HD constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* ---- shared memory ---------------------------------------------------------------------------- */

/* Byte offsets from a 1024-aligned base (the kernels align the dynamic shared memory, hence the
 * extra 1024 in BYTES); every tile starts on a 1024-byte boundary (tests check both). */
/* QS query stages: one, or two when the forward joins its tiles (fwd_join: the next tile's queries
 * load while this tile runs). */
template <int D, int QS>
struct FwdSmem {
    using C = FwdTile<D>;
    static_assert(QS == 1 || QS == 2, "one or two query stages");
    static constexpr uint32_t Q = 0, K = Q + QS * C::Q_BYTES, V = K + C::STAGES * C::KV_BYTES,
                              BAR = V + C::STAGES * C::KV_BYTES;
    /* barriers: q_full[QS], q_empty[QS], k_full[S], k_empty[S], v_full[S], v_empty[S] (8 bytes each) */
    static constexpr uint32_t Q_FULL = BAR, Q_EMPTY = Q_FULL + 8 * QS, K_FULL = Q_EMPTY + 8 * QS,
                              K_EMPTY = K_FULL + 8 * C::STAGES,
                              V_FULL = K_EMPTY + 8 * C::STAGES, V_EMPTY = V_FULL + 8 * C::STAGES,
                              END = V_EMPTY + 8 * C::STAGES;
    static constexpr uint32_t BYTES = END + 1024;
    static_assert(BYTES <= 232448, "more shared memory than a Hopper CTA may have");
};

/* The forward by whole heads (gpu/attention_sm90_fwd.cu, attn_fwd_sm90_heads): for T ≤ 512 at D = 64 a
 * CTA holds all of one (b, kv head)'s keys and values (up to four blocks of 128) and its three
 * consumer warpgroups each walk strips of 64 queries of the group's heads; each consumer has two
 * query stages of its own. */
template <int D>
struct FwdHeadsTile {
    static_assert(D == 64, "the whole-head forward holds K and V of 512 keys at D = 64 only");
    static constexpr int BM = 64, BN = 128, MAX_N = 4, CONSUMERS = 3, QSTAGES = 2;
    static constexpr int Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static constexpr int O_BYTES = BM * D * 2; /* a consumer's staging tile for its finished rows (two each) */
};
template <int D>
struct FwdHeadsSmem {
    using C = FwdHeadsTile<D>;
    static constexpr uint32_t K = 0, V = K + C::MAX_N * C::KV_BYTES, Q = V + C::MAX_N * C::KV_BYTES,
                              O = Q + C::CONSUMERS * C::QSTAGES * C::Q_BYTES, BAR = O + 2 * C::CONSUMERS * C::O_BYTES;
    /* barriers: k_full[MAX_N], v_full[MAX_N], q_full[CONSUMERS][QSTAGES], q_empty[CONSUMERS][QSTAGES] */
    static constexpr uint32_t K_FULL = BAR, V_FULL = K_FULL + 8 * C::MAX_N, Q_FULL = V_FULL + 8 * C::MAX_N,
                              Q_EMPTY = Q_FULL + 8 * C::CONSUMERS * C::QSTAGES,
                              END = Q_EMPTY + 8 * C::CONSUMERS * C::QSTAGES;
    static constexpr uint32_t BYTES = END + 1024;
    static_assert(BYTES <= 232448, "more shared memory than a Hopper CTA may have");
};

template <int D>
struct BwdSmem {
    using C = BwdTile<D>;
    static constexpr uint32_t K = 0, V = K + C::KV_BYTES, Q = V + C::KV_BYTES, DO = Q + C::STAGES * C::Q_BYTES,
                              DS = DO + C::STAGES * C::Q_BYTES, DQ = DS + C::DS_BYTES,
                              LSE = DQ + C::DQ_STAGES * C::DQ_FLOATS * 4, DL = LSE + C::STAGES * C::BM * 4,
                              BAR = DL + C::STAGES * C::BM * 4;
    /* barriers: kv_full, q_full[S], q_empty[S], dq_full[DQS], dq_empty[DQS] */
    static constexpr uint32_t KV_FULL = BAR, Q_FULL = BAR + 8, Q_EMPTY = Q_FULL + 8 * C::STAGES,
                              DQ_FULL = Q_EMPTY + 8 * C::STAGES, DQ_EMPTY = DQ_FULL + 8 * C::DQ_STAGES,
                              END = DQ_EMPTY + 8 * C::DQ_STAGES;
    static constexpr uint32_t BYTES = END + 1024;
    static_assert(BYTES <= 232448, "more shared memory than a Hopper CTA may have");
};

/* ---- 128-byte swizzle ------------------------------------------------------------------------- */

/* Byte offset of element (r, c), c < 64, in one R × 64 bf16 block (block 1024-byte aligned). */
ATTN_HD constexpr uint32_t sw128(uint32_t r, uint32_t c) {
    return r * 128u + ((((c >> 3) ^ (r & 7u)) & 7u) << 4) + ((c & 7u) << 1);
}

/* Byte offset of element (r, c) in a tile of `rows` rows stored as column blocks of 64. */
ATTN_HD constexpr uint32_t tile_off(uint32_t rows, uint32_t r, uint32_t c) {
    return (c >> 6) * rows * 128u + sw128(r, c & 63u);
}

/* The swizzle as the hardware applies it to an absolute shared-memory byte address. */
ATTN_HD constexpr uint32_t sw128_addr(uint32_t a) { return a ^ (((a >> 7) & 7u) << 4); }

/* ---- wgmma descriptors ------------------------------------------------------------------------ */

ATTN_HD constexpr uint64_t desc_encode(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | ((uint64_t)1 << 62);
}

ATTN_HD constexpr uint32_t desc_start(uint64_t d) { return (uint32_t)(d & 0x3FFFu) << 4; }
ATTN_HD constexpr uint32_t desc_lbo(uint64_t d) { return (uint32_t)((d >> 16) & 0x3FFFu) << 4; }
ATTN_HD constexpr uint32_t desc_sbo(uint64_t d) { return (uint32_t)((d >> 32) & 0x3FFFu) << 4; }

/* Emulation of the operand fetch (for the CPU test): the shared-memory byte address of element
 * (mn, k), k < 16, of a K-major / MN-major 128B-swizzled operand described by d. */
ATTN_HD constexpr uint32_t desc_addr_kmajor(uint64_t d, uint32_t mn, uint32_t k) {
    return sw128_addr(desc_start(d) + (mn & 7u) * 128u + (mn >> 3) * desc_sbo(d) + 2u * k);
}
ATTN_HD constexpr uint32_t desc_addr_mnmajor(uint64_t d, uint32_t mn, uint32_t k) {
    return sw128_addr(desc_start(d) + 2u * (mn & 63u) + (mn >> 6) * desc_lbo(d) + (k & 7u) * 128u +
                      (k >> 3) * desc_sbo(d));
}

/* K-major operand: rows [row0, row0 + 64) × k-step ks (k = 16ks … 16ks + 15) of a tile at `tile`
 * with `rows` rows (column blocks of 64 k-values). */
ATTN_HD constexpr uint64_t desc_kmajor(uint32_t tile, uint32_t rows, uint32_t row0, uint32_t ks) {
    return desc_encode(tile + (ks >> 2) * rows * 128u + row0 * 128u + (ks & 3u) * 32u, 16u, 1024u);
}

/* MN-major operand: k-step ks (tile rows 16ks … 16ks + 15 are the k index) of a tile at `tile` with
 * `rows` rows, the MN index running over column blocks blk0, blk0 + 1, … (64 each). */
ATTN_HD constexpr uint64_t desc_mnmajor(uint32_t tile, uint32_t rows, uint32_t blk0, uint32_t ks) {
    return desc_encode(tile + blk0 * rows * 128u + ks * 2048u, rows * 128u, 1024u);
}

/* A descriptor as its two 32-bit words: the high word (SBO 1024, 128-byte swizzle) is the same for every
 * operand of the kernels, and the low word of k-step ks or of the block n tiles further is the low
 * word of the first plus their start's offset >> 4 (shared-memory addresses stay below 2^18, so the
 * 14-bit start field never carries), so a loop forms each descriptor with one integer add:
 * K-major k-step ks of a 64-column block + 2·ks, MN-major k-step ks + 128·ks (16 rows of 128 bytes). */
constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);
ATTN_HD constexpr uint32_t desc_lo(uint32_t addr, uint32_t lbo) { return ((addr & 0x3FFFFu) >> 4) | (((lbo >> 4) & 0x3FFFu) << 16); }
ATTN_HD constexpr uint64_t desc_join(uint32_t lo) { return ((uint64_t)kDescHi << 32) | lo; }

/* ---- register fragments ----------------------------------------------------------------------- */

ATTN_HD constexpr int acc_row(int tid, int i) { return 16 * (tid >> 5) + ((tid & 31) >> 2) + 8 * ((i >> 1) & 1); }
ATTN_HD constexpr int acc_col(int tid, int i) { return 8 * (i >> 2) + 2 * (tid & 3) + (i & 1); }
ATTN_HD constexpr int afrag_row(int tid, int j) { return 16 * (tid >> 5) + ((tid & 31) >> 2) + 8 * (j & 1); }
ATTN_HD constexpr int afrag_k(int tid, int j, int half) { return 8 * (j >> 1) + 2 * (tid & 3) + half; }
/* The accumulator index that A register j (half h) of k-step ks takes. */
ATTN_HD constexpr int a_from_acc_index(int ks, int j, int half) { return 8 * ks + 4 * (j >> 1) + 2 * (j & 1) + half; }

/* ---- forward schedule ------------------------------------------------------------------------- */

struct FwdWork {
    int m, b, h;
};

/* Tile `tile` of num_m·B·H: heaviest query blocks first; h fastest (heads of a KV group adjacent,
 * their K/V shared through L2). */
ATTN_HD constexpr FwdWork fwd_tile(int tile, int num_m, int B, int H) {
    return FwdWork{num_m - 1 - tile / (B * H), (tile % (B * H)) / H, tile % H};
}

/* The k-th tile (k = 0, 1, …) that CTA `cta` of a persistent grid of `grid` CTAs takes: the tiles
 * (heaviest first) in rounds of `grid`, walked forward in even rounds and backward in odd ones (a
 * snake), so that a CTA given one of a round's heavier tiles gets one of the next round's lighter
 * ones. Each CTA's tiles ascend with k, so it stops at its first index ≥ num_tiles. At B 4, T 4096 on
 * 132 SMs the busiest CTA's key blocks fall from 272 to 256 (D 128, the mean) and from 528 to 512
 * (D 64); at T 512 (1–4 blocks a tile) they stay 40 (Llama-3.2-1B's heads) and 24 (SmolLM2's). */
ATTN_HD constexpr int fwd_cta_tile(int k, int cta, int grid) { return k * grid + ((k & 1) ? grid - 1 - cta : cta); }

/* Last key block a query block needs (causal): the block of its last query, within the sequence. */
ATTN_HD constexpr int fwd_n_max(int m, int BM, int BN, int T) {
    const int last_q = m * BM + BM - 1 < T - 1 ? m * BM + BM - 1 : T - 1;
    return last_q / BN;
}

/* Whether key block n holds a key after some query of block m (so that the causal mask applies). */
ATTN_HD constexpr bool causal_block_masked(int m, int BM, int n, int BN) { return n * BN + BN - 1 > m * BM; }

/* Whether the forward joins its tiles (gpu/attention_sm90_fwd.cu: a tile's last P·V and epilogue
 * beside the next tile's first S and softmax, two query stages): short sequences, whose tiles have
 * one to four key blocks, so that a tile's start and end weigh as much as its blocks — at T 512,
 * 4–5% faster (Llama-3.2-1B's and SmolLM2's heads); at T 4096 with D 64, 2% slower (docs/RESULTS.md,
 * 2026-11-29, seventh session). */
constexpr int kFwdJoinMaxBlocks = 4;
ATTN_HD constexpr bool fwd_join(int num_m) { return num_m <= kFwdJoinMaxBlocks; }

/* Whether every key of the second half of block n (keys n·BN + 64 …) comes after the last of the 64
 * queries from q_row0 — the first consumer's diagonal block: the forward's softmax then takes the
 * block's first 64 keys only and the others' P are zeros (what ex2(−∞) rounds to), so the results
 * are those of the whole block, bit for bit. */
ATTN_HD constexpr bool fwd_half_block(int q_row0, int n, int BN) { return n * BN + 64 > q_row0 + 63; }

/* The whole-head forward's schedule. One CTA a (b, kv head); its strips (64 queries of one head of the
 * group: G·⌈T/64⌉ of them) heaviest first — strip j is query rows 64·r …, r = ⌈T/64⌉ − 1 − j / G, of
 * head kvh·G + j mod G, and needs key blocks r/2 … 0 (r/2 + 1 of them) — dealt to the three consumers
 * in a snake (fwd_cta_tile with a grid of 3). */
struct FwdStrip {
    int row0, h;
};
ATTN_HD constexpr FwdStrip fwd_strip(int j, int num_r, int G, int kvh) {
    return FwdStrip{64 * (num_r - 1 - j / G), kvh * G + j % G};
}
/* The same with the division by G as a multiply-high by ⌈2^32 / G⌉ (exact for j < 2^32 / G², far
 * beyond G·⌈T/64⌉): the integer divider's reciprocal runs on the exponentials' unit (MUFU), where the
 * consumers' softmax keeps a queue — the whole-head kernel at the 1B shape ran 3% faster without it. */
struct FwdStripDiv {
    int G;
    uint32_t magic;
};
ATTN_HD constexpr FwdStripDiv fwd_strip_div(int G) {
    return FwdStripDiv{G, (uint32_t)((((uint64_t)1 << 32) + (uint64_t)G - 1) / (uint64_t)G)};
}
ATTN_HD constexpr FwdStrip fwd_strip(int j, int num_r, FwdStripDiv d, int kvh) {
    /* G = 1: ⌈2^32 / G⌉ does not fit in 32 bits (fwd_strip_div leaves 0) */
    const int q = d.G == 1 ? j : (int)(((uint64_t)(uint32_t)j * d.magic) >> 32);
    return FwdStrip{64 * (num_r - 1 - q), kvh * d.G + (j - q * d.G)};
}
/* 1 / l rounded to nearest — the bits of 1.0f / l — for 1 ≤ l < 2^24 (a row sum of the forward's P,
 * each at most 1 and the row's maximum's exactly 1), with the FMA unit only: an estimate from the
 * exponent bits, four Newton steps, then the one value a binade whose last step meets a tie and
 * rounds it down (mantissa all ones: the reciprocal is one ulp above) — attention_layout_test checks
 * every float of [1, 2^24). MUFU's reciprocal, which 1.0f / l takes, queues behind the softmax's
 * exponentials. */
/* The bits of x as a To of the same size (host and device: a 4-byte copy is a register move there) */
template <class To, class From>
ATTN_HD To bits_as(From x) {
    static_assert(sizeof(To) == sizeof(From), "a bit cast between types of one size");
    To t;
    memcpy(&t, &x, sizeof t);
    return t;
}
ATTN_HD float rcp_row_sum(float l) {
    const uint32_t u = bits_as<uint32_t>(l);
    float y = bits_as<float>(0x7EF311C7u - u);
    for (int i = 0; i < 4; i++) y = fmaf(y, fmaf(-l, y, 1.0f), y);
    return (u & 0x7FFFFFu) == 0x7FFFFFu ? bits_as<float>(bits_as<uint32_t>(y) + 1u) : y;
}
/* The last key block (of 128) a strip from query row0 needs: the block of its last query within T
 * (fwd_n_max for a 64-row block). */
ATTN_HD constexpr int fwd_strip_n_max(int row0, int T) { return (row0 + 63 < T - 1 ? row0 + 63 : T - 1) / 128; }
/* Whether the whole-head forward takes a shape: D = 64, at most four key blocks (T ≤ 512), and enough
 * (b, kv head) pairs to keep the SMs busy — a CTA each, at most one per SM (its shared memory), so the
 * waves' fill B·KVH / (waves · SMs) must be at least 0.9 (Llama-3.2-1B at B 16: 128 CTAs on 132 SMs;
 * SmolLM2's 3 kv heads at B 32, 96 CTAs, keep the tile kernel). */
ATTN_HD constexpr bool fwd_heads_fits(int B, int T, int KVH, int D, int sms) {
    const int items = B * KVH, waves = ceil_div(items, sms > 0 ? sms : 1);
    return D == 64 && T <= 512 && sms > 0 && 10 * items >= 9 * waves * sms;
}

/* ---- backward schedule ------------------------------------------------------------------------ */

/* First query block that sees key block n (its first key n·BN). */
ATTN_HD constexpr int bwd_m_first(int n, int BN, int BM) { return n * BN / BM; }

/* Last key block query block m sees; n_max(m) contributes first to dQ of block m. */
ATTN_HD constexpr int bwd_n_max(int m, int BM, int BN, int T) { return fwd_n_max(m, BM, BN, T); }

/* The backward's grid and what each CTA owns. The dQ order needs the larger key blocks launched
 * first. Key-block-major (num_n ≤ kBwdKeyMajorMaxBlocks, T ≤ 512): grid (KVH, B, num_n), every
 * (b, kv head) of key block num_n − 1 first, then of num_n − 2, …: at Llama-3.2-1B's shape (4 key
 * blocks walking 4, 8, 12 and 16 query blocks, 512 CTAs on 132 SMs) this balances the SMs, which
 * the per-head order left idle ~20% of the kernel (the longest CTA of each head launched last);
 * the backward ran 5% faster. Otherwise head-major: grid (num_n, KVH, B), the key blocks of one
 * (b, kv head) after one another, so that the CTAs adding into one head's dQ tiles run together
 * and the tiles stay in L2 — at T 2048–4096 the key-block-major order ran 11–32% slower
 * (docs/RESULTS.md, 2026-11-29). */
constexpr int kBwdKeyMajorMaxBlocks = 4;
struct BwdCta {
    int n, kvh, b;
};
ATTN_HD constexpr bool bwd_key_major(int num_n) { return num_n <= kBwdKeyMajorMaxBlocks; }
/* The grid's dimensions (x, y, z) and the CTA (bx, by, bz) of it. */
struct BwdGrid {
    int x, y, z;
};
ATTN_HD constexpr BwdGrid bwd_grid(int num_n, int KVH, int B) {
    return bwd_key_major(num_n) ? BwdGrid{KVH, B, num_n} : BwdGrid{num_n, KVH, B};
}
ATTN_HD constexpr BwdCta bwd_cta(int bx, int by, int bz, int num_n) {
    return bwd_key_major(num_n) ? BwdCta{num_n - 1 - bz, bx, by} : BwdCta{num_n - 1 - bx, by, bz};
}

/* Position of key block n in the dQ summation order of query block m (0 = stores). */
ATTN_HD constexpr int bwd_dq_rank(int m, int n, int BM, int BN, int T) { return bwd_n_max(m, BM, BN, T) - n; }

/* ---- the fp32 dQ tile ------------------------------------------------------------------------- */

/* Index in the 8192-float tile of accumulator i (0 … 31) of thread tid (0 … 127) of consumer
 * warpgroup cw: [cw][i / 4][tid][i % 4], so each thread writes 16-byte vectors and a warp writes
 * 512 contiguous bytes. */
ATTN_HD constexpr int dq_tile_index(int cw, int tid, int i) { return ((cw * 8 + (i >> 2)) * 128 + tid) * 4 + (i & 3); }

/* (query row within the block, column d) of tile index e, for the split of head dim D: with D = 128
 * (BM = 64) warpgroup cw holds columns 64cw …; with D = 64 (BM = 128) rows 64cw …. */
struct DqCoord {
    int row, col;
};
ATTN_HD constexpr DqCoord dq_tile_coord(int D, int e) {
    const int cw = e >> 12, i4 = (e >> 9) & 7, tid = (e >> 2) & 127, i = i4 * 4 + (e & 3);
    return D == 128 ? DqCoord{acc_row(tid, i), 64 * cw + acc_col(tid, i)}
                    : DqCoord{64 * cw + acc_row(tid, i), acc_col(tid, i)};
}

/* ---- backward workspace ----------------------------------------------------------------------- */

/* Byte layout of the backward's workspace (gpu_attention_backward_workspace_size): the sm_80
 * kernels' Δ (B, H, T) first; then, for the Hopper kernels, lse·log2(e) and Δ padded to T_pad =
 * ceil(T/128)·128 per (b, h) (zeros in the padding), one counter per (b, h, 64-query block), and the
 * fp32 dQ accumulation tiles (sized for D = 128, which needs the most). Each region 256-byte aligned. */
struct BwdWorkspace {
    uint64_t delta80, lse2, delta, sem, dqacc, total;
};
ATTN_HD constexpr uint64_t align256(uint64_t x) { return (x + 255) / 256 * 256; }
ATTN_HD constexpr BwdWorkspace bwd_workspace(int B, int T, int H) {
    const uint64_t bh = (uint64_t)B * H, tpad = (uint64_t)ceil_div(T, 128) * 128;
    const uint64_t d80 = align256(bh * T * 4), l2 = align256(bh * tpad * 4), dl = l2,
                   sem = align256(bh * (uint64_t)ceil_div(T, 64) * 4), dq = align256(bh * tpad * 128 * 4);
    return BwdWorkspace{0, d80, d80 + l2, d80 + l2 + dl, d80 + l2 + dl + sem, d80 + l2 + dl + sem + dq};
}

} // namespace attn90
} // namespace refine

#endif /* REFINE_GPU_ATTENTION_SM90_LAYOUT_H */
