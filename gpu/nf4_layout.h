/* nf4_layout.h — the thread-to-data map of the NF4 dequantization kernel (gpu/nf4.cu), host and
 * device, so that every formula here is tested on the CPU (tests/parity/nf4_layout_test.cc, in
 * every `bazel test //...`).
 *
 * C++17, header only; no CUDA types. Pure functions of integers.
 *
 * One warp owns a tile of kTileElems = 1024 consecutive elements (512 code bytes). Lane l, step s
 * (0 ≤ s < kSteps) owns the chunk of kChunk = 8 elements starting at
 *   chunk_first(tile, l, s) = tile·1024 + 8·(32·s + l):
 * one 4-byte code word (code word index chunk_first / 8) in, one 16-byte bf16 store out. At each
 * step the 32 lanes touch 128 consecutive code bytes and 512 consecutive output bytes: every load
 * and store instruction of the warp is fully coalesced (whole 32-byte sectors).
 *
 * absmax: the blocks (2^shift elements, shift = log2(blocksize) in [5, 12]) never straddle a
 * chunk (8 | 32 ≤ blocksize). A tile holds blocks_per_tile(shift) blocks: 1024 >> shift whole
 * blocks when blocksize ≤ 1024, else it lies inside one block. Lane l decodes the absmax of block
 * tile_first_block + l (when lane_holds_block says it exists), once per tile; the chunk (l, s)
 * takes it from lane absmax_lane(l, s, shift) by a warp shuffle.
 *
 * The last tile may be partial: a chunk with chunk_first + 8 ≤ n is a vector chunk; the one chunk
 * with chunk_first < n < chunk_first + 8 is written element by element; later chunks are idle.
 */
#ifndef REFINE_GPU_NF4_LAYOUT_H
#define REFINE_GPU_NF4_LAYOUT_H

#include <stdint.h>

#if defined(__CUDACC__)
#define NF4_HD __host__ __device__ __forceinline__
#else
#define NF4_HD inline
#endif

namespace refine {
namespace nf4 {

constexpr int kLanes = 32;
constexpr int kChunk = 8; /* elements a lane converts at a time: one 4-byte code word, one 16-byte store */
constexpr int kSteps = 4; /* chunks a lane owns in its warp's tile */
constexpr int kTileShift = 10;
constexpr int kTileElems = 1 << kTileShift;
static_assert(kTileElems == kLanes * kChunk * kSteps, "a tile is 32 lanes × 4 steps × 8 elements");

NF4_HD int64_t n_tiles(int64_t n) { return (n + kTileElems - 1) >> kTileShift; }

/* The first element of the chunk of (lane, step) in tile. */
NF4_HD int64_t chunk_first(int64_t tile, int lane, int step) {
    return (tile << kTileShift) + (int64_t)(step * kLanes + lane) * kChunk;
}

/* The blocks a tile overlaps: 1024 / blocksize whole blocks, or part of one. */
NF4_HD int blocks_per_tile(int shift) { return shift >= kTileShift ? 1 : 1 << (kTileShift - shift); }

NF4_HD int64_t tile_first_block(int64_t tile, int shift) { return (tile << kTileShift) >> shift; }

/* Whether lane decodes an absmax in tile: block tile_first_block + lane exists. */
NF4_HD bool lane_holds_block(int64_t tile, int lane, int shift, int64_t n_blocks) {
    return lane < blocks_per_tile(shift) && tile_first_block(tile, shift) + lane < n_blocks;
}

/* The lane that holds the absmax of chunk (lane, step)'s block. */
NF4_HD int absmax_lane(int lane, int step, int shift) { return ((step * kLanes + lane) * kChunk) >> shift; }

}  // namespace nf4
}  // namespace refine

#endif /* REFINE_GPU_NF4_LAYOUT_H */
