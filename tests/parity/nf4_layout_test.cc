/* nf4_layout_test.cc — the thread-to-data map of the NF4 dequantization kernel
 * (gpu/nf4_layout.h) on the CPU, in every `bazel test //...`. For every blocksize (2^5 … 2^12)
 * and n in 1 … 2100 plus larger ragged sizes, walking every (tile, lane, step) as the kernel does:
 *
 *   1. every element 0 … n−1 is written exactly once (vector chunks and the one ragged chunk);
 *   2. a vector chunk's code word (4 bytes at chunk_first / 2) lies inside the (n+1)/2 code bytes,
 *      its 16-byte store inside the n outputs, and chunk_first is a multiple of 8 (alignment);
 *   3. at each step the 32 lanes' chunks are consecutive (coalesced loads and stores);
 *   4. the lane a chunk takes its absmax from holds a block (lane_holds_block), and that block is
 *      the block of every element of the chunk; in every tile, each block its elements fall in is
 *      held by exactly one lane and no other block is held (a block of 2048 or 4096 elements is
 *      decoded once by each of its tiles).
 *
 *   bazel test //tests/parity:nf4_layout_test
 */
#include <stdio.h>

#include <vector>

#include "gpu/nf4_layout.h"
#include "tests/common/harness.h"

using namespace refine::nf4;

/* Returns the number of violations for (n, shift); prints the first. */
static int64_t check_layout(int64_t n, int shift) {
    const int64_t n_blocks = (n + (1 << shift) - 1) >> shift;
    const int64_t code_bytes = (n + 1) / 2;
    std::vector<int> written((size_t)n, 0);
    int64_t bad = 0;
    auto fail = [&](const char *what, int64_t tile, int lane, int step) {
        if (bad++ == 0)
            printf("nf4_layout n=%lld blocksize=%d: %s at tile %lld lane %d step %d\n", (long long)n, 1 << shift, what,
                   (long long)tile, lane, step);
    };
    for (int64_t tile = 0; tile < n_tiles(n); tile++) {
        /* the blocks of this tile's elements against the blocks its lanes hold */
        const int64_t t0 = tile << kTileShift, t1 = t0 + kTileElems < n ? t0 + kTileElems : n;
        const int64_t b0 = t0 >> shift, b1 = ((t1 - 1) >> shift) + 1;
        std::vector<int> held((size_t)(b1 - b0), 0);
        for (int lane = 0; lane < kLanes; lane++)
            if (lane_holds_block(tile, lane, shift, n_blocks)) {
                const int64_t blk = tile_first_block(tile, shift) + lane;
                if (blk < b0 || blk >= b1)
                    fail("a lane holds a block outside its tile's elements", tile, lane, -1);
                else
                    held[(size_t)(blk - b0)]++;
            }
        for (int64_t b = b0; b < b1; b++)
            if (held[(size_t)(b - b0)] != 1) fail("a block of the tile not held exactly once", tile, -1, -1);
        for (int step = 0; step < kSteps; step++)
            for (int lane = 0; lane < kLanes; lane++) {
                const int64_t e = chunk_first(tile, lane, step);
                if (e % kChunk != 0) fail("chunk not a multiple of 8", tile, lane, step);
                if (lane > 0 && e != chunk_first(tile, lane - 1, step) + kChunk)
                    fail("lanes' chunks not consecutive", tile, lane, step);
                if (e >= n) continue;
                const int64_t end = e + kChunk <= n ? e + kChunk : n;
                if (e + kChunk <= n && (e / 2 + 4 > code_bytes || e + kChunk > n))
                    fail("vector chunk out of bounds", tile, lane, step);
                const int src = absmax_lane(lane, step, shift);
                if (src < 0 || src >= kLanes || src >= blocks_per_tile(shift))
                    fail("absmax lane out of range", tile, lane, step);
                else if (!lane_holds_block(tile, src, shift, n_blocks))
                    fail("absmax lane holds no block", tile, lane, step);
                for (int64_t k = e; k < end; k++) {
                    written[(size_t)k]++;
                    if ((k >> shift) != tile_first_block(tile, shift) + src)
                        fail("element takes another block's absmax", tile, lane, step);
                }
            }
    }
    for (int64_t k = 0; k < n; k++)
        if (written[(size_t)k] != 1) {
            fail("element not written exactly once", k >> kTileShift, -1, -1);
            break;
        }
    return bad;
}

int main(void) {
    std::vector<int64_t> ns;
    for (int64_t n = 1; n <= 2100; n++) ns.push_back(n);
    for (int64_t n : {3 * 1024 + 100, 9 * 1024 + 8, 20003, 70005, 4096 * 5 + 7, (1 << 20) + 5, 576 * 1536})
        ns.push_back(n);
    for (int shift = 5; shift <= 12; shift++) {
        int64_t bad = 0, cases = 0;
        for (int64_t n : ns) {
            bad += check_layout(n, shift) > 0;
            cases++;
        }
        EXPECT(bad == 0, "nf4_layout blocksize %d: %lld of %lld sizes violate the map", 1 << shift, (long long)bad,
               (long long)cases);
    }
    /* the constants the kernel's comments and the parity test's sizes assume */
    EXPECT(kTileElems == 1024 && kChunk == 8 && n_tiles(1024) == 1 && n_tiles(1025) == 2, "tile constants");
    EXPECT(blocks_per_tile(5) == 32 && blocks_per_tile(6) == 16 && blocks_per_tile(10) == 1 &&
               blocks_per_tile(12) == 1,
           "blocks per tile");
    return test_finish("nf4_layout_test");
}
