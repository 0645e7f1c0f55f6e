/* fp8_weights.cu — the transposed copy and the bf16 dequantization of FP8 codes (gpu/fp8_weights.h). */
#include "gpu/fp8_weights.h"

#include <cuda_bf16.h>

#include "gpu/cuda_check.h"
#include "io/check.h"

namespace {

constexpr int kTile = 32, kRowsPerPass = 8, kBlock = 256;

/* Exact decoding, as ref/fp8.c's fp8_to_float. */
__device__ float decode(unsigned q, int e5m2) {
    const unsigned sign = q >> 7;
    float v;
    if (!e5m2) {
        const unsigned e = (q >> 3) & 0xFu, m = q & 7u;
        if ((q & 0x7Fu) == 0x7Fu) return __int_as_float(0x7FC00000u | (sign << 31));
        v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8u + m), (int)e - 10);
    } else {
        const unsigned e = (q >> 2) & 0x1Fu, m = q & 3u;
        if (e == 31) return m ? __int_as_float(0x7FC00000u | (sign << 31)) : (sign ? -INFINITY : INFINITY);
        v = e == 0 ? ldexpf((float)m, -16) : ldexpf((float)(4u + m), (int)e - 17);
    }
    return sign ? -v : v;
}

__global__ void __launch_bounds__(kTile * kRowsPerPass) transpose_u8(uint8_t *__restrict__ q_t,
                                                                     const uint8_t *__restrict__ q, int64_t rows,
                                                                     int64_t cols) {
    __shared__ uint8_t tile[kTile][kTile + 4];
    const int64_t c0 = (int64_t)blockIdx.x * kTile, r0 = (int64_t)blockIdx.y * kTile;
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
        const int64_t r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[i][threadIdx.x] = q[r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
        const int64_t c = c0 + i, r = r0 + threadIdx.x; /* q_t row c, column r */
        if (r < rows && c < cols) q_t[c * rows + r] = tile[threadIdx.x][i];
    }
}

__global__ void transpose_scales(float *s_t, const float *s, int64_t nrb, int64_t ncb, int64_t ld, int64_t ld_t) {
    /* s_t holds ncb rows of ld_t slots: real slots (cb, rb < nrb) get s[rb·ld + cb], padding 0 */
    const int64_t n = ncb * ld_t;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t cb = i / ld_t, rb = i % ld_t;
        s_t[i] = rb < nrb ? s[rb * ld + cb] : 0.0f;
    }
}

struct dq_params {
    __nv_bfloat16 *x;
    const uint8_t *q;
    const float *s;
    int64_t rows, cols, ld; /* ld: 128×128 scale rows */
    int mode, e5m2;
};

__global__ void __launch_bounds__(kBlock) dequantize(dq_params p) {
    __shared__ float lut[256];
    lut[threadIdx.x] = decode(threadIdx.x, p.e5m2);
    __syncthreads();
    const int64_t n = p.rows * p.cols;
    for (int64_t i = (int64_t)blockIdx.x * kBlock + threadIdx.x; i < n; i += (int64_t)gridDim.x * kBlock) {
        const int64_t r = i / p.cols, c = i % p.cols;
        float sig;
        if (p.mode == FP8_SCALING_TENSOR)
            sig = p.s[0];
        else if (p.mode == FP8_SCALING_1X128)
            sig = p.s[(c / FP8_BLOCK_SIZE) * p.rows + r];
        else
            sig = p.s[(r / FP8_BLOCK_SIZE) * p.ld + c / FP8_BLOCK_SIZE];
        p.x[i] = __float2bfloat16_rn(__fmul_rn(lut[p.q[i]], sig));
    }
}

unsigned grid_of(int64_t n) {
    const int64_t b = (n + kBlock - 1) / kBlock;
    return (unsigned)(b < 1 ? 1 : b < 32768 ? b : 32768);
}

}  // namespace

extern "C" void gpu_fp8_transpose_codes(uint8_t *q_t, const uint8_t *q, int64_t rows, int64_t cols,
                                        cudaStream_t stream) {
    CHECK(rows >= 1 && cols >= 1 && q != nullptr && q_t != nullptr, "fp8 transpose: rows=%lld cols=%lld",
          (long long)rows, (long long)cols);
    CHECK((rows + kTile - 1) / kTile <= 65535, "fp8 transpose: rows=%lld beyond the grid's y limit", (long long)rows);
    const dim3 grid((unsigned)((cols + kTile - 1) / kTile), (unsigned)((rows + kTile - 1) / kTile));
    transpose_u8<<<grid, dim3(kTile, kRowsPerPass), 0, stream>>>(q_t, q, rows, cols);
    KERNEL_CHECK(stream);
}

extern "C" void gpu_fp8_transpose_block_scales(float *s_t, const float *s, int64_t rows, int64_t cols,
                                               cudaStream_t stream) {
    CHECK(rows >= 1 && cols >= 1 && s != nullptr && s_t != nullptr, "fp8 scale transpose: rows=%lld cols=%lld",
          (long long)rows, (long long)cols);
    const int64_t nrb = (rows + FP8_BLOCK_SIZE - 1) / FP8_BLOCK_SIZE, ncb = (cols + FP8_BLOCK_SIZE - 1) / FP8_BLOCK_SIZE;
    const int64_t ld = fp8_block_scale_ld(FP8_BLOCK_128X128, rows, cols),
                  ld_t = fp8_block_scale_ld(FP8_BLOCK_128X128, cols, rows);
    transpose_scales<<<grid_of(ncb * ld_t), kBlock, 0, stream>>>(s_t, s, nrb, ncb, ld, ld_t);
    KERNEL_CHECK(stream);
}

extern "C" void gpu_fp8_dequantize_bf16(uint16_t *x, const uint8_t *q, const float *s, enum fp8_scaling mode,
                                        int64_t rows, int64_t cols, enum fp8_format f, cudaStream_t stream) {
    CHECK(rows >= 1 && cols >= 1 && x && q && s, "fp8 dequantize: rows=%lld cols=%lld", (long long)rows,
          (long long)cols);
    dq_params p = {reinterpret_cast<__nv_bfloat16 *>(x), q, s, rows, cols,
                   mode == FP8_SCALING_128X128 ? fp8_block_scale_ld(FP8_BLOCK_128X128, rows, cols) : 0, (int)mode,
                   f == FP8_E5M2};
    dequantize<<<grid_of(rows * cols), kBlock, 0, stream>>>(p);
    KERNEL_CHECK(stream);
}
