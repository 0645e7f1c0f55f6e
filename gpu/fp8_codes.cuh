/* fp8_codes.cuh — the FP8 code of a value times its scale, as every cast of gpu/ forms it (device
 * code, C++): one fp32 multiply (__fmul_rn, no contraction), round to nearest even, SATFINITE
 * (gpu/fp8.h, NUMERICS.md §6). fp8_cvt2(a, b, scale, fmt) packs the codes of a·scale and b·scale
 * into the low 16 bits, a's in the low byte (the order of two consecutive codes in memory). */
#ifndef REFINE_GPU_FP8_CODES_CUH
#define REFINE_GPU_FP8_CODES_CUH

#include <stdint.h>

#include <cuda_fp8.h>

__device__ __forceinline__ uint32_t fp8_cvt2(float a, float b, float scale, __nv_fp8_interpretation_t fmt) {
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(a, scale), __fmul_rn(b, scale)), __NV_SATFINITE,
                                              fmt);
}

#endif /* REFINE_GPU_FP8_CODES_CUH */
