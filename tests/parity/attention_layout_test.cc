/* attention_layout_test.cc — the index math of the Hopper attention kernels
 * (gpu/attention_sm90_layout.h) on the CPU, in every `bazel test //...`:
 *
 *   1. the 128-byte swizzle: tiles are bijections, and the address-bit form the hardware applies
 *      agrees with the tile function on 1024-aligned tiles;
 *   2. wgmma descriptors: for every operand of every product the kernels issue (same tiles, same
 *      arguments), the emulated operand fetch (the canonical K-major / MN-major layouts) reads the
 *      element the tile holds — for all (mn, k) of every k-step;
 *   3. register fragments: accumulator and A maps are bijections, and A registers taken from
 *      accumulators (a_from_acc_index) hold the same (row, k);
 *   4. the dQ tile order and the post-pass's reading of it;
 *   5. schedules against brute force: every forward tile once, heaviest first; n_max and the causal
 *      mask flag over every (query, key) pair; the backward's coverage of every causal pair exactly
 *      once; the element-level masks as the kernels evaluate them (thread, accumulator); a simulation of the dQ order counters with in-order dispatch on few or many SMs —
 *      no deadlock, and every query block summed in the order n_max … 0;
 *   6. shared-memory budgets and alignment, workspace regions.
 *
 *   bazel test //tests/parity:attention_layout_test
 */
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <deque>
#include <vector>

#include "gpu/attention_sm90_layout.h"
#include "tests/common/harness.h"

using namespace refine::attn90;

/* ---- 1. swizzle ---- */
static void test_swizzle() {
    for (uint32_t rows : {64u, 128u})
        for (uint32_t cols : {64u, 128u}) {
            std::vector<int> seen(rows * cols, 0);
            int bad = 0;
            for (uint32_t r = 0; r < rows; r++)
                for (uint32_t c = 0; c < cols; c++) {
                    const uint32_t off = tile_off(rows, r, c);
                    if (off % 2 != 0 || off / 2 >= rows * cols || seen[off / 2]++) bad++;
                    /* 8 consecutive columns stay one 16-byte chunk */
                    if (c % 8 != 0 && off != tile_off(rows, r, c - 1) + 2) bad++;
                    /* the hardware's view: unswizzled row-major address, swizzled by address bits */
                    const uint32_t base = 1024u * 37u;
                    const uint32_t lin = base + (c >> 6) * rows * 128u + r * 128u + (c & 63u) * 2u;
                    if (sw128_addr(lin) != base + off) bad++;
                }
            EXPECT(bad == 0, "swizzle rows=%u cols=%u: %d bad offsets", rows, cols, bad);
        }
}

/* ---- 2. descriptors ---- */
struct Operand {
    const char *name;
    uint64_t (*desc)(int ks, int p0, int p1);    /* descriptor of k-step ks */
    uint32_t (*expect)(int ks, int mn, int k, int p0, int p1); /* byte address the element lives at */
    bool mn_major;
    int mn_size, ksteps;
};

static const uint32_t kTileA = 1024u * 5u, kTileB = 1024u * 100u; /* arbitrary aligned tiles */

template <int D>
static void test_descriptors() {
    constexpr int BM = BwdTile<D>::BM;
    int bad = 0, checked = 0;
    auto check = [&](const char *what, uint64_t d, bool mn_major, int mn_size, auto expect) {
        if (desc_sbo(d) != 1024u || (!mn_major && desc_lbo(d) != 16u) || (d >> 62) != 1u) {
            bad++;
            fprintf(stderr, "D=%d %s: descriptor fields %016llx\n", D, what, (unsigned long long)d);
        }
        for (int mn = 0; mn < mn_size; mn++)
            for (int k = 0; k < 16; k++) {
                const uint32_t got = mn_major ? desc_addr_mnmajor(d, (uint32_t)mn, (uint32_t)k)
                                              : desc_addr_kmajor(d, (uint32_t)mn, (uint32_t)k);
                const uint32_t want = expect(mn, k);
                checked++;
                if (got != want && bad++ < 5)
                    fprintf(stderr, "D=%d %s: (mn %d, k %d) at %u, the tile holds it at %u\n", D, what, mn, k, got, want);
            }
    };
    /* forward S = Q·Kᵀ: A = Q rows 64cw … (tile 128 × D), B = K (tile 128 × D), N = 128 */
    for (int cw = 0; cw < 2; cw++)
        for (int ks = 0; ks < D / 16; ks++) {
            check("fwd Q", desc_kmajor(kTileA, 128, 64 * cw, ks), false, 64,
                  [&](int mn, int k) { return kTileA + tile_off(128, 64 * cw + mn, 16 * ks + k); });
            check("fwd K", desc_kmajor(kTileB, 128, 0, ks), false, 128,
                  [&](int mn, int k) { return kTileB + tile_off(128, mn, 16 * ks + k); });
        }
    /* forward O += P·V: B = V (tile 128 keys × D), MN-major, N = D */
    for (int ks = 0; ks < 8; ks++)
        check("fwd V", desc_mnmajor(kTileB, 128, 0, ks), true, D,
              [&](int mn, int k) { return kTileB + tile_off(128, 16 * ks + k, mn); });
    /* backward S = Q·Kᵀ, dP = dO·Vᵀ: A = rows 64mt … of a BM × D tile, B = keys 64cw … of 128 × D */
    for (int mt = 0; mt < BM / 64; mt++)
        for (int cw = 0; cw < 2; cw++)
            for (int ks = 0; ks < D / 16; ks++) {
                check("bwd Q", desc_kmajor(kTileA, BM, 64 * mt, ks), false, 64,
                      [&](int mn, int k) { return kTileA + tile_off(BM, 64 * mt + mn, 16 * ks + k); });
                check("bwd K", desc_kmajor(kTileB, 128, 64 * cw, ks), false, 64,
                      [&](int mn, int k) { return kTileB + tile_off(128, 64 * cw + mn, 16 * ks + k); });
            }
    /* backward dV += Pᵀ·dO, dK += dSᵀ·Q: A = key block cw of the BM × 128 P tile, B = BM × D tile */
    for (int cw = 0; cw < 2; cw++)
        for (int ks = 0; ks < BM / 16; ks++) {
            check("bwd Pt", desc_mnmajor(kTileA, BM, cw, ks), true, 64,
                  [&](int mn, int k) { return kTileA + tile_off(BM, 16 * ks + k, 64 * cw + mn); });
            check("bwd dO", desc_mnmajor(kTileB, BM, 0, ks), true, D,
                  [&](int mn, int k) { return kTileB + tile_off(BM, 16 * ks + k, mn); });
        }
    /* backward dQ = dS·K: A = rows a_row0 … of the BM × 128 dS tile (k = keys), B = K column block */
    for (int cw = 0; cw < 2; cw++)
        for (int ks = 0; ks < 8; ks++) {
            const int a_row0 = D == 128 ? 0 : 64 * cw, b_blk = D == 128 ? cw : 0;
            check("bwd dS", desc_kmajor(kTileA, BM, a_row0, ks), false, 64,
                  [&](int mn, int k) { return kTileA + tile_off(BM, a_row0 + mn, 16 * ks + k); });
            check("bwd K (dQ)", desc_mnmajor(kTileB, 128, b_blk, ks), true, 64,
                  [&](int mn, int k) { return kTileB + tile_off(128, 16 * ks + k, 64 * b_blk + mn); });
        }
    /* the whole-head forward (D = 64): Q strips of 64 rows, K and V blocks of 128, descriptors by addition */
    if (D == 64) {
        for (uint32_t ks = 0; ks < 4; ks++) {
            check("fwd heads Q", desc_join(desc_lo(kTileA, 16) + 2 * ks), false, 64,
                  [&](int mn, int k) { return kTileA + tile_off(64, mn, 16 * ks + k); });
            check("fwd heads K", desc_join(desc_lo(kTileB, 16) + 2 * ks), false, 128,
                  [&](int mn, int k) { return kTileB + tile_off(128, mn, 16 * ks + k); });
        }
        for (uint32_t ks = 0; ks < 8; ks++)
            check("fwd heads V", desc_join(desc_lo(kTileB, 128 * 128) + 128 * ks), true, 64,
                  [&](int mn, int k) { return kTileB + tile_off(128, 16 * ks + k, mn); });
    }
    EXPECT(bad == 0, "descriptors D=%d: %d of %d operand elements misplaced", D, bad, checked);
    /* the start-address field holds any address of the 227 KiB window */
    for (uint32_t a = 0; a < 232448; a += 16) bad += desc_start(desc_encode(a, 16, 1024)) != a;
    /* the two-word form the whole-head forward adds offsets to: the same descriptors */
    for (uint32_t a = 0; a < 232448; a += 16)
        for (uint32_t lbo : {16u, 8192u, 16384u}) bad += desc_join(desc_lo(a, lbo)) != desc_encode(a, lbo, 1024);
    for (uint32_t ks = 0; ks < 4; ks++)
        bad += desc_join(desc_lo(kTileB, 16) + 2 * ks) != desc_kmajor(kTileB, 128, 0, ks) ||
               desc_join(desc_lo(kTileA, 16) + 2 * ks) != desc_kmajor(kTileA, 64, 0, ks);
    for (uint32_t ks = 0; ks < 8; ks++)
        bad += desc_join(desc_lo(kTileB, 128 * 128) + 128 * ks) != desc_mnmajor(kTileB, 128, 0, ks);
    EXPECT(bad == 0, "descriptor start address field");
}

/* ---- 3. fragments ---- */
static void test_fragments() {
    for (int N : {64, 128}) {
        std::vector<int> seen(64 * N, 0);
        int bad = 0;
        for (int tid = 0; tid < 128; tid++)
            for (int i = 0; i < N / 2; i++) {
                const int r = acc_row(tid, i), c = acc_col(tid, i);
                if (r < 0 || r >= 64 || c < 0 || c >= N || seen[r * N + c]++) bad++;
            }
        EXPECT(bad == 0, "accumulator map m64n%d: %d collisions", N, bad);
    }
    std::vector<int> seen(64 * 16, 0);
    int bad = 0, mism = 0;
    for (int tid = 0; tid < 128; tid++)
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++) {
                const int r = afrag_row(tid, j), k = afrag_k(tid, j, h);
                if (r >= 64 || k >= 16 || seen[r * 16 + k]++) bad++;
                for (int ks = 0; ks < 8; ks++) {
                    const int i = a_from_acc_index(ks, j, h);
                    if (acc_row(tid, i) != r || acc_col(tid, i) != 16 * ks + k) mism++;
                }
            }
    EXPECT(bad == 0, "A fragment map: %d collisions", bad);
    EXPECT(mism == 0, "A registers from accumulators: %d elements moved", mism);
    /* RoPE's backward on dK from the accumulators (gpu/attention_sm90_bwd.cu): accumulator i < D/4 of a
     * thread pairs with i + D/4, the same row and the column D/2 further — every pair (d, d + D/2) of
     * every row exactly once */
    for (int D : {64, 128}) {
        std::vector<int> pairs(64 * (D / 2), 0);
        int off = 0;
        for (int tid = 0; tid < 128; tid++)
            for (int i = 0; i < D / 2; i++) {
                const int r = acc_row(tid, i), c = acc_col(tid, i);
                if (c >= D / 2) continue;
                const int j = i + D / 4;
                if (j >= D / 2 || acc_row(tid, j) != r || acc_col(tid, j) != c + D / 2) off++;
                else pairs[r * (D / 2) + c]++;
            }
        int missing = 0;
        for (int n : pairs) missing += n != 1;
        EXPECT(off == 0 && missing == 0, "RoPE pairs in the dK accumulators D=%d: %d off, %d not once", D, off, missing);
    }
}

/* ---- 4. dQ tile ---- */
static void test_dq_tile() {
    for (int D : {64, 128}) {
        const int BM = D == 128 ? 64 : 128;
        std::vector<int> seen(BM * D, 0);
        int bad = 0;
        for (int cw = 0; cw < 2; cw++)
            for (int tid = 0; tid < 128; tid++)
                for (int i = 0; i < 32; i++) {
                    const int e = dq_tile_index(cw, tid, i);
                    const DqCoord c = dq_tile_coord(D, e);
                    /* where the kernel's warpgroup cw holds accumulator i */
                    const int row = D == 128 ? acc_row(tid, i) : 64 * cw + acc_row(tid, i);
                    const int col = D == 128 ? 64 * cw + acc_col(tid, i) : acc_col(tid, i);
                    if (e < 0 || e >= 8192 || c.row != row || c.col != col || seen[row * D + col]++) bad++;
                }
        /* the post-pass reads four floats at once: (row, col), (row, col+1), (row+8, col), (row+8, col+1) */
        for (int e = 0; e < 8192; e += 4) {
            const DqCoord c0 = dq_tile_coord(D, e), c1 = dq_tile_coord(D, e + 1), c2 = dq_tile_coord(D, e + 2),
                          c3 = dq_tile_coord(D, e + 3);
            if (c1.row != c0.row || c1.col != c0.col + 1 || c2.row != c0.row + 8 || c2.col != c0.col ||
                c3.row != c0.row + 8 || c3.col != c0.col + 1 || c0.col % 2 != 0)
                bad++;
        }
        EXPECT(bad == 0, "dQ tile order D=%d: %d bad", D, bad);
    }
}

/* ---- 5. schedules ---- */
static void test_forward_schedule() {
    int bad = 0;
    for (int T : {1, 17, 127, 128, 129, 300, 1024}) {
        const int B = 2, H = 3, BM = 128, BN = 128, num_m = ceil_div(T, BM);
        std::vector<int> seen(num_m * B * H, 0);
        int prev_m = num_m;
        for (int tile = 0; tile < num_m * B * H; tile++) {
            const FwdWork w = fwd_tile(tile, num_m, B, H);
            if (w.m < 0 || w.m >= num_m || w.b < 0 || w.b >= B || w.h < 0 || w.h >= H ||
                seen[(w.m * B + w.b) * H + w.h]++ || w.m > prev_m)
                bad++;
            prev_m = w.m;
        }
        for (int m = 0; m < num_m; m++) {
            int want = 0;
            for (int i = m * BM; i < std::min(T, (m + 1) * BM); i++) want = std::max(want, i / BN);
            if (fwd_n_max(m, BM, BN, T) != want) bad++;
            for (int n = 0; n <= want; n++) {
                bool any = false;
                for (int i = m * BM; i < (m + 1) * BM; i++)
                    for (int j = n * BN; j < (n + 1) * BN; j++) any |= j > i;
                if (causal_block_masked(m, BM, n, BN) != any) bad++;
                /* a half block: no query of the warpgroup sees keys 64 … of block n; the diagonal
                 * block of the first warpgroup is one, nothing else is */
                for (int cw = 0; cw < 2; cw++) {
                    bool late = false;
                    for (int i = m * BM + 64 * cw; i < m * BM + 64 * cw + 64; i++)
                        for (int j = n * BN + 64; j < (n + 1) * BN; j++) late |= j <= i;
                    if (fwd_half_block(m * BM + 64 * cw, n, BN) == late) bad++;
                    if (fwd_half_block(m * BM + 64 * cw, n, BN) != (cw == 0 && n == m)) bad++;
                }
            }
        }
    }
    EXPECT(bad == 0, "forward schedule: %d bad", bad);
}

/* The busiest CTA's key blocks when `grid` CTAs deal num_m·B·H tiles by fwd_cta_tile; every tile taken
 * exactly once, each CTA's indices ascending (bad counts the violations). */
static int forward_busiest(int T, int B, int H, int grid, int *bad) {
    const int num_m = ceil_div(T, 128), tiles = num_m * B * H;
    std::vector<int> seen(tiles, 0);
    int busiest = 0;
    for (int cta = 0; cta < grid; cta++) {
        int blocks = 0, prev = -1;
        for (int k = 0, t; (t = fwd_cta_tile(k, cta, grid)) < tiles; k++) {
            if (t < 0 || t <= prev || seen[t]++) (*bad)++;
            prev = t;
            blocks += fwd_n_max(fwd_tile(t, num_m, B, H).m, 128, 128, T) + 1;
        }
        busiest = std::max(busiest, blocks);
    }
    for (int t = 0; t < tiles; t++)
        if (seen[t] != 1) (*bad)++;
    return busiest;
}

/* The snake deal: a cover at every grid size (full and partial last rounds, odd and even), and the
 * balance it was chosen for (attention_sm90_layout.h, fwd_cta_tile) on 132 SMs. */
static void test_forward_deal() {
    int bad = 0;
    for (int grid : {1, 2, 7, 132})
        for (int T : {128, 512, 1000, 4096})
            for (int B : {1, 3})
                for (int H : {1, 5, 16}) {
                    const int tiles = ceil_div(T, 128) * B * H;
                    forward_busiest(T, B, H, tiles < grid ? tiles : grid, &bad);
                }
    EXPECT(bad == 0, "forward deal: %d bad", bad);
    const struct {
        int T, B, H, busiest;
    } want[] = {{4096, 4, 16, 256}, {4096, 4, 32, 512}, {512, 16, 32, 40}, {512, 32, 9, 24}};
    for (const auto &w : want) {
        int b = 0;
        const int got = forward_busiest(w.T, w.B, w.H, 132, &b);
        EXPECT(b == 0 && got == w.busiest, "forward deal B=%d T=%d H=%d: busiest CTA %d key blocks, want %d", w.B, w.T,
               w.H, got, w.busiest);
    }
}

/* The whole-head forward (fwd_strip, fwd_heads_fits): the three consumers' snake deals cover every
 * strip of a (b, kv head) once, each consumer's strips heaviest first; each strip's key blocks
 * n_max … 0 hold every key its queries see and keys after a query only in block n_max (the only block
 * the kernel masks), within the blocks the producer loads; where the first 64 queries of a block
 * take the half block, no key of its second half comes before any of them. At the Llama-3.2-1B shape
 * (G 4, T 512) the busiest consumer has 27 of the 80 strip-blocks. */
static void test_forward_heads() {
    int bad = 0;
    for (int T : {1, 63, 64, 65, 100, 128, 200, 383, 448, 511, 512})
        for (int G : {1, 3, 4, 16}) {
            const int num_r = ceil_div(T, 64), num_n = ceil_div(T, 128), strips = G * num_r, kvh = 2;
            std::vector<int> seen((size_t)strips, 0);
            for (int c = 0; c < 3; c++) {
                int last_w = 1 << 30;
                for (int k = 0, j; (j = fwd_cta_tile(k, c, 3)) < strips; k++) {
                    seen[(size_t)j]++;
                    const FwdStrip st = fwd_strip(j, num_r, G, kvh);
                    const int n_max = fwd_strip_n_max(st.row0, T);
                    bad += st.h / G != kvh || st.row0 % 64 != 0 || st.row0 >= T || n_max >= num_n;
                    bad += n_max + 1 > last_w;
                    last_w = n_max + 1;
                    for (int q = st.row0; q < st.row0 + 64 && q < T; q++)
                        for (int key = 0; key < T; key++) {
                            const int n = key / 128;
                            if (key <= q) bad += n > n_max;                /* a key it sees, outside its blocks */
                            else bad += n <= n_max && n != n_max;          /* a key after it, in an unmasked block */
                            if (fwd_half_block(st.row0, n_max, 128) && n == n_max && key >= n * 128 + 64)
                                bad += key <= q;                           /* the half block drops a key it sees */
                            if (!fwd_half_block(st.row0, n_max, 128) && n == n_max && key < n * 128 + 64)
                                bad += key > q;                            /* a key the mask skips is after it */
                        }
                }
            }
            for (int v : seen) bad += v != 1;
        }
    EXPECT(bad == 0, "whole-head forward schedule: %d bad", bad);
    for (int T : {1, 100, 448, 512})
        for (int row0 = 0; row0 < T; row0 += 64)
            EXPECT(fwd_strip_n_max(row0, T) == fwd_n_max(row0 / 64, 64, 128, T), "strip n_max T=%d row0=%d", T, row0);
    {   /* the strips by multiply-high: those by division, for every group size a model may have */
        int wrong = 0;
        for (int G = 1; G <= 256; G++)
            for (int num_r = 1; num_r <= 8; num_r++)
                for (int j = 0; j < G * num_r; j++) {
                    const FwdStrip a = fwd_strip(j, num_r, G, 3), d = fwd_strip(j, num_r, fwd_strip_div(G), 3);
                    wrong += a.row0 != d.row0 || a.h != d.h;
                }
        EXPECT(wrong == 0, "whole-head forward: %d strips by multiply-high differ from the division", wrong);
    }
    {   /* rcp_row_sum: the bits of 1.0f / l for every float l of [1, 2^24) */
        long long wrong = 0;
        uint32_t first = 0;
        for (uint32_t u = 0x3F800000u; u < 0x4B800000u; u++) {
            float l, want, got;
            memcpy(&l, &u, 4);
            volatile float one = 1.0f;
            want = one / l;
            got = rcp_row_sum(l);
            if (memcmp(&want, &got, 4) != 0 && wrong++ == 0) first = u;
        }
        EXPECT(wrong == 0, "rcp_row_sum: %lld of [1, 2^24) differ from 1.0f / l (first l bits 0x%08x)", wrong, first);
    }
    int busiest = 0;
    for (int c = 0; c < 3; c++) {
        int w = 0;
        for (int k = 0, j; (j = fwd_cta_tile(k, c, 3)) < 32; k++) w += fwd_strip(j, 8, 4, 0).row0 / 128 + 1;
        busiest = std::max(busiest, w);
    }
    EXPECT(busiest == 27, "whole-head forward at G 4, T 512: busiest consumer %d strip-blocks, want 27", busiest);
    EXPECT(fwd_heads_fits(16, 512, 8, 64, 132) && fwd_heads_fits(40, 100, 3, 64, 132) &&
               fwd_heads_fits(12, 448, 10, 64, 132) && fwd_heads_fits(32, 512, 8, 64, 132),
           "whole-head forward: shapes that fill the SMs taken");
    EXPECT(!fwd_heads_fits(32, 512, 3, 64, 132) && !fwd_heads_fits(8, 512, 8, 64, 132) &&
               !fwd_heads_fits(16, 513, 8, 64, 132) && !fwd_heads_fits(16, 512, 8, 128, 132) &&
               !fwd_heads_fits(16, 512, 8, 64, 0),
           "whole-head forward: shapes it does not take");
}

/* The backward over (T, BM) with `sms` resident CTAs dispatched in launch order: every causal pair
 * (query i ≥ key j) in exactly one (n, m) step, the mask flag wherever a pair j > i shares the tile,
 * and the dQ counters: ranks n_max(m) − n, no deadlock, every block summed in order. */
static void test_backward_schedule_case(int T, int BM, int BH, int group, int sms) {
    const int BN = 128, num_n = ceil_div(T, BN), num_m = ceil_div(T, BM);
    int bad = 0;
    /* coverage, per head */
    std::vector<int> cover((size_t)T * T, 0);
    for (int n = 0; n < num_n; n++)
        for (int m = bwd_m_first(n, BN, BM); m < num_m; m++) {
            bool any_masked = false;
            for (int i = m * BM; i < std::min(T, (m + 1) * BM); i++)
                for (int j = n * BN; j < std::min(T, (n + 1) * BN); j++) {
                    if (j <= i) cover[(size_t)i * T + j]++;
                    any_masked |= j > i;
                }
            if (any_masked && !causal_block_masked(m, BM, n, BN)) bad++;
        }
    for (int i = 0; i < T; i++)
        for (int j = 0; j <= i; j++) bad += cover[(size_t)i * T + j] != 1;
    /* the dQ order: CTA = (kv head group g, n); steps (hh, m) */
    const int groups = BH / group;
    struct Cta {
        int g, n, hh, m, done;
    };
    std::vector<Cta> order; /* launch order: the grid's x fastest, then y, then z (bwd_cta) */
    const BwdGrid grid = bwd_grid(num_n, groups, 1); /* groups stand for (kv head, b) */
    for (int bz = 0; bz < grid.z; bz++)
        for (int by = 0; by < grid.y; by++)
            for (int bx = 0; bx < grid.x; bx++) {
                const BwdCta c = bwd_cta(bx, by, bz, num_n);
                bad += c.b != 0 || c.kvh < 0 || c.kvh >= groups || c.n < 0 || c.n >= num_n;
                order.push_back(Cta{c.kvh, c.n, 0, bwd_m_first(c.n, BN, BM), 0});
            }
    {   /* every (group, key block) exactly once */
        std::vector<int> owned((size_t)groups * num_n, 0);
        for (const Cta &c : order)
            if (c.g >= 0 && c.g < groups && c.n >= 0 && c.n < num_n) owned[(size_t)c.g * num_n + c.n]++;
        for (int o : owned) bad += o != 1;
    }
    std::vector<int> sem((size_t)BH * num_m, 0);
    std::vector<std::vector<int>> seq((size_t)BH * num_m);
    std::deque<int> resident;
    size_t next = 0;
    int stalled_rounds = 0;
    uint64_t lcg = 0x9E3779B97F4A7C15ull ^ (uint64_t)T;
    while (next < order.size() || !resident.empty()) {
        while ((int)resident.size() < sms && next < order.size()) resident.push_back((int)next++);
        bool progress = false;
        /* the resident CTAs run at arbitrary relative speeds: visit them in a shuffled order, some
         * not at all this round */
        std::vector<int> visit(resident.begin(), resident.end());
        for (size_t r = visit.size(); r > 1; r--) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            std::swap(visit[r - 1], visit[(size_t)(lcg >> 33) % r]);
        }
        for (int idx : visit) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            if ((lcg >> 40) % 3 == 0) continue; /* this one is slow this round */
            Cta &c = order[idx];
            const int h = c.g * group + c.hh, t = h * num_m + c.m;
            const int rank = bwd_dq_rank(c.m, c.n, BM, BN, T);
            if (sem[t] != rank) continue;
            sem[t]++;
            seq[t].push_back(c.n);
            progress = true;
            if (++c.m == num_m) {
                c.m = bwd_m_first(c.n, BN, BM);
                if (++c.hh == group) c.done = 1;
            }
        }
        resident.erase(std::remove_if(resident.begin(), resident.end(), [&](int i) { return order[i].done; }),
                       resident.end());
        if (!progress && ++stalled_rounds > 64) { /* (1/3)^64: not a run of slow rounds */
            bad++;
            fprintf(stderr, "dQ order deadlock: T=%d BM=%d BH=%d group=%d sms=%d\n", T, BM, BH, group, sms);
            break;
        }
        if (progress) stalled_rounds = 0;
    }
    for (int t = 0; t < BH * num_m; t++) {
        const int m = t % num_m, nm = bwd_n_max(m, BM, BN, T);
        if ((int)seq[t].size() != nm + 1) bad++;
        for (size_t r = 0; r < seq[t].size(); r++) bad += seq[t][r] != nm - (int)r;
    }
    EXPECT(bad == 0, "backward schedule T=%d BM=%d BH=%d group=%d sms=%d: %d bad", T, BM, BH, group, sms, bad);
}

static void test_backward_schedule() {
    for (int BM : {64, 128})
        for (int T : {1, 63, 64, 65, 128, 129, 257, 1000})
            for (int sms : {1, 3, 132}) test_backward_schedule_case(T, BM, 4, 2, sms);
    test_backward_schedule_case(512, 128, 32, 4, 7);
    test_backward_schedule_case(4096, 64, 4, 1, 132);
}

/* The element-level causal mask exactly as the kernels evaluate it (thread tid of consumer warpgroup
 * cw, accumulator i): every (query, key ≤ query) pair of the sequence enters the sums exactly once,
 * no key after its query ever does. */
static void test_element_masks() {
    int bad = 0;
    for (int T : {1, 63, 64, 65, 127, 128, 129, 200, 383}) {
        /* forward: tiles of 128 queries, warpgroup cw rows 64cw …, key blocks n = n_max … 0 of 128 */
        std::vector<int> seen((size_t)T * T, 0);
        for (int m = 0; m < ceil_div(T, 128); m++)
            for (int n = fwd_n_max(m, 128, 128, T); n >= 0; n--)
                for (int cw = 0; cw < 2; cw++)
                    for (int tid = 0; tid < 128; tid++)
                        for (int i = 0; i < 64; i++) {
                            const int q = m * 128 + 64 * cw + acc_row(tid, i), key = n * 128 + acc_col(tid, i);
                            /* the half block leaves out accumulators 32 … 63 (keys 64 … 127 of block n) */
                            if (fwd_half_block(m * 128 + 64 * cw, n, 128) && i >= 32) continue;
                            const bool off = causal_block_masked(m, 128, n, 128) && key > q;
                            if (off || q >= T || key >= T) continue;
                            if (key > q) bad++;
                            else seen[(size_t)q * T + key]++;
                        }
        for (int q = 0; q < T; q++)
            for (int key = 0; key <= q; key++) bad += seen[(size_t)q * T + key] != 1;
        /* backward: CTA n (keys 128n …, warpgroup cw keys 64cw …), query blocks m ≥ m_first of BM
         * (Sᵀ = K·Qᵀ, m64 n{BM}: rows keys, columns queries) */
        for (int BM : {64, 128}) {
            std::fill(seen.begin(), seen.end(), 0);
            for (int n = 0; n < ceil_div(T, 128); n++)
                for (int m = bwd_m_first(n, 128, BM); m < ceil_div(T, BM); m++)
                    for (int cw = 0; cw < 2; cw++)
                        for (int tid = 0; tid < 128; tid++)
                            for (int i = 0; i < BM / 2; i++) {
                                const int key = n * 128 + 64 * cw + acc_row(tid, i), q = m * BM + acc_col(tid, i);
                                const bool off = causal_block_masked(m, BM, n, 128) && key > q;
                                if (off || q >= T || key >= T) continue;
                                if (key > q) bad++;
                                else seen[(size_t)q * T + key]++;
                            }
            for (int q = 0; q < T; q++)
                for (int key = 0; key <= q; key++) bad += seen[(size_t)q * T + key] != 1;
        }
    }
    EXPECT(bad == 0, "element-level causal masks: %d pairs wrong", bad);
}

/* ---- 6. budgets ---- */
template <int D>
static void test_budgets() {
    using F = FwdSmem<D, 1>;
    using F2 = FwdSmem<D, 2>;
    using Bw = BwdSmem<D>;
    EXPECT(F::BYTES <= 232448 && F2::BYTES <= 232448 && Bw::BYTES <= 232448, "D=%d shared memory %u / %u / %u bytes",
           D, F::BYTES, F2::BYTES, Bw::BYTES);
    for (uint32_t off : {F::Q, F::K, F::V, F2::Q, F2::K, F2::V, Bw::K, Bw::V, Bw::Q, Bw::DO, Bw::DS, Bw::DQ})
        EXPECT(off % 1024 == 0, "D=%d tile offset %u not 1024-aligned", D, off);
    EXPECT(F::BAR % 8 == 0 && F2::BAR % 8 == 0 && Bw::BAR % 8 == 0 && Bw::LSE % 16 == 0 && Bw::DL % 16 == 0,
           "D=%d barrier alignment", D);
    if constexpr (D == 64) {
        using Hd = FwdHeadsSmem<D>;
        EXPECT(Hd::BYTES <= 232448, "whole-head forward: %u bytes of shared memory", Hd::BYTES);
        for (uint32_t off : {Hd::K, Hd::V, Hd::Q, Hd::O}) EXPECT(off % 1024 == 0, "whole-head tile offset %u", off);
        EXPECT(Hd::O - Hd::Q == 6 * FwdHeadsTile<D>::Q_BYTES && Hd::BAR - Hd::O == 6 * FwdHeadsTile<D>::O_BYTES,
               "whole-head forward: six query stages, then six staging tiles (two a consumer)");
        EXPECT(Hd::BAR % 8 == 0 && Hd::END - Hd::BAR == 8 * (2 * 4 + 2 * 3 * 2), "whole-head forward's barriers");
    }
    EXPECT(F2::K == F::K + FwdTile<D>::Q_BYTES && F2::END == F::END + 16 + FwdTile<D>::Q_BYTES,
           "D=%d the second query stage and its two barriers", D);
}

static void test_workspace() {
    for (int T : {1, 64, 65, 512, 4097})
        for (int B : {1, 3}) {
            const int H = 5;
            const BwdWorkspace w = bwd_workspace(B, T, H);
            const uint64_t tpad = (uint64_t)ceil_div(T, 128) * 128;
            int bad = 0;
            bad += w.lse2 < w.delta80 + (uint64_t)B * H * T * 4;
            bad += w.delta < w.lse2 + B * H * tpad * 4;
            bad += w.sem < w.delta + B * H * tpad * 4;
            for (int BM : {64, 128}) {
                const uint64_t tiles = (uint64_t)B * H * ceil_div(T, BM);
                bad += w.dqacc < w.sem + tiles * 4;
                bad += w.total < w.dqacc + tiles * 8192 * 4;
            }
            for (uint64_t o : {w.lse2, w.delta, w.sem, w.dqacc}) bad += o % 256 != 0;
            EXPECT(bad == 0, "workspace B=%d T=%d: %d bad", B, T, bad);
        }
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    test_swizzle();
    test_descriptors<64>();
    test_descriptors<128>();
    test_fragments();
    test_dq_tile();
    test_forward_schedule();
    test_forward_deal();
    test_forward_heads();
    test_backward_schedule();
    test_element_masks();
    test_budgets<64>();
    test_budgets<128>();
    test_workspace();
    return test_finish("attention_layout_test");
}
