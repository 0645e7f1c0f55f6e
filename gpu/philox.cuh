/* philox.cuh — Philox4x32-10 and the dropout keep test of ref/dropout.h, as device functions, so
 * that any kernel can fuse dropout into its own loads (C++ device code, included by .cu files).
 *
 * philox4x32_10(ctr, key)    ten rounds of Salmon et al. (SC11), Random123's constants; bit for bit
 *                            ref_philox4x32_10.
 * dropout_keep4(keep, seed, offset, block, p)
 *                            the keep decisions of elements 4·block .. 4·block+3 of a dropout call
 *                            keyed (seed, offset): one Philox call, u = (x >> 8)·2^-24, keep = u ≥ p.
 */
#ifndef REFINE_GPU_PHILOX_CUH
#define REFINE_GPU_PHILOX_CUH

#include <stdint.h>

namespace refine {

__device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint2 k) {
    constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
    constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
    for (int r = 0; r < 10; r++) {
        if (r > 0) k.x += W0, k.y += W1;
        const uint32_t hi0 = __umulhi(M0, c.x), lo0 = M0 * c.x;
        const uint32_t hi1 = __umulhi(M1, c.z), lo1 = M1 * c.z;
        c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}

__device__ __forceinline__ void dropout_keep4(bool (&keep)[4], uint64_t seed, uint64_t offset, uint64_t block,
                                              float p) {
    const uint4 ctr = make_uint4((uint32_t)block, (uint32_t)(block >> 32), (uint32_t)offset, (uint32_t)(offset >> 32));
    const uint4 x = philox4x32_10(ctr, make_uint2((uint32_t)seed, (uint32_t)(seed >> 32)));
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int l = 0; l < 4; l++) keep[l] = (float)(w[l] >> 8) * 0x1p-24f >= p; /* exact: < 2^24 */
}

}  // namespace refine

#endif /* REFINE_GPU_PHILOX_CUH */
