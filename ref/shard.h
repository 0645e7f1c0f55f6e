/* shard.h — the partition of a sharded optimizer (ZeRO-1): which elements of which trainable
 * tensor each of W ranks updates, and keeps fp32 masters and optimizer state for.
 *
 * The trainable tensors (n_0, n_1, … elements, in the model's order) are cut into chunks of
 * SHARD_CHUNK elements from each tensor's start (a tensor's last chunk may be shorter): the chunks
 * of gpu/adamw.cu's multi-tensor kernels, and 32 of the 8-bit optimizer's 256-element blocks. A
 * rank's update of whole chunks is, element for element and block for block, the unsharded
 * update of those elements; and the global gradient norm, summed from per-chunk partial sums in a
 * fixed order, is the same whoever computed each chunk's partial. So the sharded update is bitwise
 * the unsharded one (tests/unit/shard_test.c; the GPU: tests/parity/adamw_parity.cu).
 *
 * Rank r owns the chunks whose first element, counted over the concatenated tensors, lies in
 * [⌈r·E/W⌉, ⌈(r+1)·E/W⌉) (E = Σ n_i): contiguous runs of chunks, every rank within one chunk of
 * E/W elements. Its pieces are, per tensor it touches, the element range [lo, hi) (lo a multiple
 * of SHARD_CHUNK, hi one or the tensor's end); its flat state arrays (masters, moments) hold the
 * pieces one after another, piece k at element offset off (a multiple of 4: 16-byte vector
 * accesses), the pieces in tensor order.
 */
#ifndef REFINE_REF_SHARD_H
#define REFINE_REF_SHARD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARD_CHUNK 8192

struct shard_piece {
    int tensor;     /* index into the tensor list */
    int64_t lo, hi; /* the elements [lo, hi) of that tensor */
    int64_t off;    /* where element lo sits in the rank's flat arrays */
};

/* The pieces of rank r (0 ≤ r < world) of tensors n[0 .. n_tensors): their count (at most
 * n_tensors), written into out when out is non-NULL, and into *elements the length of the flat
 * arrays (the last piece's off + its length). */
int shard_pieces(struct shard_piece *out, int64_t *elements, const int64_t *n, int n_tensors, int world, int r);

/* The rank that owns element i of tensor t. */
int shard_owner(const int64_t *n, int n_tensors, int world, int t, int64_t i);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_SHARD_H */
