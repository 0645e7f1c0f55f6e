/* vec.cuh — bf16 loads, stores and rounding for the kernels of gpu/ (device code, C++).
 *
 * load_bf16<VW>(v, p)  reads VW consecutive bf16 at p into floats: one 16-byte load for VW = 8
 *                      (p must be 16-byte aligned), an 8-byte load for VW = 4 (8-byte aligned), a
 *                      2-byte load for VW = 1.
 * store_bf16<VW>(p, v) rounds VW floats to bf16 (RNE) and writes them the same way.
 * bf16_round_dev(x)    RNE of an fp32 value to bf16 and back: ref/bf16.h's bf16_round, bit for bit
 *                      on every non-NaN input (the hardware conversion; NaN payloads may differ).
 */
#ifndef REFINE_GPU_VEC_CUH
#define REFINE_GPU_VEC_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include <type_traits>

namespace refine {

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float bf16_round_dev(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

/* VW bf16 as one load or store: 16 bytes (VW 8) or 8 (VW 4). */
template <int VW>
using bf16_raw = typename std::conditional<VW == 8, uint4, uint2>::type;

template <int VW>
__device__ __forceinline__ void load_bf16(float (&v)[VW], const bf16 *p) {
    if constexpr (VW == 8 || VW == 4) {
        const bf16_raw<VW> raw = *reinterpret_cast<const bf16_raw<VW> *>(p);
        const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
        for (int j = 0; j < VW / 2; j++) {
            float2 f = __bfloat1622float2(h[j]);
            v[2 * j] = f.x;
            v[2 * j + 1] = f.y;
        }
    } else {
        static_assert(VW == 1, "VW must be 1, 4 or 8");
        v[0] = __bfloat162float(*p);
    }
}

template <int VW>
__device__ __forceinline__ void store_bf16(bf16 *p, const float (&v)[VW]) {
    if constexpr (VW == 8 || VW == 4) {
        bf16_raw<VW> raw;
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&raw);
#pragma unroll
        for (int j = 0; j < VW / 2; j++) h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
        *reinterpret_cast<bf16_raw<VW> *>(p) = raw;
    } else {
        static_assert(VW == 1, "VW must be 1, 4 or 8");
        *p = __float2bfloat16_rn(v[0]);
    }
}

}  // namespace refine

#endif /* REFINE_GPU_VEC_CUH */
