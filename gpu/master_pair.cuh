/* master_pair.cuh — ref/master_pair.h's pair on the device (the optimizers' split masters):
 * pair_join(hi, lo) → the fp32 master; pair_split2(a, b, &hi, &lo) splits two masters into two
 * packed words (element 0 in the low half, as two consecutive uint16 in memory); pair_join4 /
 * pair_split4 do four from / into the 8-byte words of a vector access. The same bit operations as
 * the reference: master_pair_split_bits / master_pair_join_bits. A NULL low-half array is the
 * pair of bf16 weights (--master bf16): read as zeros, not written (pair_lo4, pair_lo, pair_store). */
#ifndef REFINE_GPU_MASTER_PAIR_CUH
#define REFINE_GPU_MASTER_PAIR_CUH

#include <stdint.h>

#include "gpu/philox.cuh"
#include "ref/master_pair.h"

__device__ __forceinline__ float pair_join(unsigned hi, unsigned lo) {
    return __uint_as_float(master_pair_join_bits((uint16_t)hi, (uint16_t)lo));
}

__device__ __forceinline__ void pair_split2(float a, float b, unsigned *hi, unsigned *lo) {
    uint16_t ha, la, hb, lb;
    master_pair_split_bits(__float_as_uint(a), &ha, &la);
    master_pair_split_bits(__float_as_uint(b), &hb, &lb);
    *hi = (unsigned)ha | ((unsigned)hb << 16);
    *lo = (unsigned)la | ((unsigned)lb << 16);
}

__device__ __forceinline__ void pair_join4(uint2 hi, uint2 lo, float (&w)[4]) {
    w[0] = pair_join(hi.x & 0xFFFFu, lo.x & 0xFFFFu), w[1] = pair_join(hi.x >> 16, lo.x >> 16);
    w[2] = pair_join(hi.y & 0xFFFFu, lo.y & 0xFFFFu), w[3] = pair_join(hi.y >> 16, lo.y >> 16);
}

__device__ __forceinline__ void pair_split4(const float (&w)[4], uint2 *hi, uint2 *lo) {
    pair_split2(w[0], w[1], &hi->x, &lo->x);
    pair_split2(w[2], w[3], &hi->y, &lo->y);
}

/* The low halves of elements i..i+3 (8-byte aligned), or zeros where there are none (bf16 weights:
 * join(hi, 0) widens hi exactly); the store drops them then. */
__device__ __forceinline__ uint2 pair_lo4(const uint16_t *lo, int64_t i) {
    return lo ? *reinterpret_cast<const uint2 *>(lo + i) : make_uint2(0u, 0u);
}
__device__ __forceinline__ unsigned pair_lo(const uint16_t *lo, int64_t i) { return lo ? lo[i] : 0u; }
/* Element i's pair from the master x: hi always, lo where it is kept. */
__device__ __forceinline__ void pair_store(uint16_t *hi, uint16_t *lo, int64_t i, float x) {
    uint16_t l;
    master_pair_split_bits(__float_as_uint(x), &hi[i], &l);
    if (lo) lo[i] = l;
}

/* Stochastic rounding (--master bf16-sr, ref/master_pair.h bf16_sr_bits): the four Philox words of
 * elements 4·block .. 4·block+3 of a tensor's stream (key, counter as the reference's). */
struct sr_stream {
    uint64_t seed;
    int64_t step;
    uint32_t tensor;
};
__device__ __forceinline__ uint4 sr_words(const sr_stream &k, uint64_t block) {
    return refine::philox4x32_10(
        make_uint4((uint32_t)block, (uint32_t)(block >> 32), (uint32_t)k.step, k.tensor),
        make_uint2((uint32_t)k.seed ^ BF16_SR_KEY0, (uint32_t)(k.seed >> 32) ^ BF16_SR_KEY1));
}
__device__ __forceinline__ unsigned sr_round(float x, uint32_t word) {
    return bf16_sr_bits(__float_as_uint(x), word >> 16);
}
/* Elements i..i+3 (i a multiple of 4) rounded into the 8-byte word of a vector store. */
__device__ __forceinline__ uint2 sr_pack4(const float (&w)[4], const sr_stream &k, int64_t i) {
    const uint4 r = sr_words(k, (uint64_t)i >> 2);
    return make_uint2(sr_round(w[0], r.x) | (sr_round(w[1], r.y) << 16), sr_round(w[2], r.z) | (sr_round(w[3], r.w) << 16));
}
/* Element i alone (its block's word i & 3). */
__device__ __forceinline__ uint16_t sr_one(float x, const sr_stream &k, int64_t i) {
    const uint4 r = sr_words(k, (uint64_t)i >> 2);
    const int lane = (int)(i & 3);
    return (uint16_t)sr_round(x, lane == 0 ? r.x : lane == 1 ? r.y : lane == 2 ? r.z : r.w);
}

#endif /* REFINE_GPU_MASTER_PAIR_CUH */
