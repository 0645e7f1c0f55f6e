/* master_pair.cuh — ref/master_pair.h's pair on the device (the optimizers' split masters):
 * pair_join(hi, lo) → the fp32 master; pair_split2(a, b, &hi, &lo) splits two masters into two
 * packed words (element 0 in the low half, as two consecutive uint16 in memory). The same bit
 * operations as the reference: master_pair_split_bits / master_pair_join_bits. */
#ifndef REFINE_GPU_MASTER_PAIR_CUH
#define REFINE_GPU_MASTER_PAIR_CUH

#include <stdint.h>

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

#endif /* REFINE_GPU_MASTER_PAIR_CUH */
