/* cross_entropy.cu — lm_head + cross-entropy in row chunks (gpu/cross_entropy.h).
 *
 * Strategy: for each chunk of R token rows: (1) z = h Wᵀ into a bf16 (R, V) buffer of the
 * workspace (gpu/gemm); (2) one block of 512 threads per row reads the row once with 16-byte
 * loads keeping an online (max, Σexp) pair per thread, merges the pairs in a fixed tree in shared
 * memory (deterministic), writes nll and, for the backward, reads the row a second time (it is
 * usually still in L2) and overwrites it with dz = (softmax − onehot)·mult in bf16; (3) dh = dz W
 * (bf16) and dW += dzᵀ h (fp32) through gpu/gemm. The fp32 logits of a row exist only in registers.
 * After the chunks, one block sums the per-row nll in double in a fixed order into the loss.
 * Bytes per logit: 2 written by the GEMM, 4 read + 2 written by the softmax pass; the GEMMs
 * (2·N·C·V FLOPs each) dominate for Llama vocabularies.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:cross_entropy_parity
 *                     (binary) cross_entropy_parity --bench
 */
#include "gpu/cross_entropy.h"

#include <math.h>

#include "gpu/cuda_check.h"
#include "gpu/vec.cuh"
#include "io/check.h"

namespace refine {
namespace {

constexpr int kRowBlock = 512;

size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

/* Merge of two online-softmax states (max m, Σ exp(z − m) s). */
__device__ __forceinline__ void merge_ms(float &m, float &s, float m2, float s2) {
    /* an empty state (no element seen) is (−inf, 0); a NaN in s must survive the merge */
    if (m2 == -INFINITY && s2 == 0.0f) return;
    if (m == -INFINITY && s == 0.0f) {
        m = m2, s = s2;
        return;
    }
    const float mx = fmaxf(m, m2);
    s = __fadd_rn(__fmul_rn(s, expf(__fsub_rn(m, mx))), __fmul_rn(s2, expf(__fsub_rn(m2, mx))));
    m = mx;
}

__device__ __forceinline__ void push(float &m, float &s, float z) {
    if (z > m) {
        s = __fadd_rn(__fmul_rn(s, expf(__fsub_rn(m, z))), 1.0f);
        m = z;
    } else {
        s = __fadd_rn(s, expf(__fsub_rn(z, m))); /* NaN z lands here and poisons s */
    }
}

template <int VW>
__global__ void __launch_bounds__(kRowBlock) ce_softmax_rows(float *__restrict__ nll, bf16 *dz, const bf16 *z,
                                                             const int32_t *__restrict__ labels, int V,
                                                             float mult) {
    __shared__ float sm[kRowBlock], ss[kRowBlock];
    const int64_t row = blockIdx.x;
    const bf16 *zr = z + row * V;
    const int32_t y = labels[row];
    const bool valid = y != CE_IGNORE_INDEX;
    /* z[y] is read before the tree's barriers: with dz == z the second pass overwrites it. */
    const float zy = (threadIdx.x == 0 && valid) ? __bfloat162float(zr[y]) : 0.0f;
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x * VW; j < V; j += kRowBlock * VW) {
        float v[VW];
        load_bf16<VW>(v, zr + j);
#pragma unroll
        for (int k = 0; k < VW; k++) push(m, s, v[k]);
    }
    sm[threadIdx.x] = m, ss[threadIdx.x] = s;
    __syncthreads();
    for (int k = kRowBlock / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) {
            float a = sm[threadIdx.x], b = ss[threadIdx.x];
            merge_ms(a, b, sm[threadIdx.x + k], ss[threadIdx.x + k]);
            sm[threadIdx.x] = a, ss[threadIdx.x] = b;
        }
        __syncthreads();
    }
    const float mx = sm[0], sum = ss[0];
    if (threadIdx.x == 0) {
        const float lse = __fadd_rn(mx, logf(sum));
        nll[row] = valid ? __fsub_rn(lse, zy) : 0.0f;
    }
    if (dz == nullptr) return;
    bf16 *dr = dz + row * V;
    for (int j = threadIdx.x * VW; j < V; j += kRowBlock * VW) {
        float v[VW];
        load_bf16<VW>(v, zr + j);
#pragma unroll
        for (int k = 0; k < VW; k++) {
            if (!valid) {
                v[k] = 0.0f;
                continue;
            }
            float p = __fdiv_rn(expf(__fsub_rn(v[k], mx)), sum);
            if (j + k == y) p = __fsub_rn(p, 1.0f);
            v[k] = __fmul_rn(p, mult);
        }
        store_bf16<VW>(dr + j, v);
    }
}

__global__ void ce_finish_loss(float *loss, const float *nll, int N, double inv_count) {
    __shared__ double sh[256];
    double s = 0.0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) s += (double)nll[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = (float)(sh[0] * inv_count);
}

void softmax_rows(float *nll, uint16_t *dz, const uint16_t *z, const int32_t *labels, int rows, int V, float mult,
                  cudaStream_t stream) {
    const bf16 *zb = reinterpret_cast<const bf16 *>(z);
    bf16 *dzb = reinterpret_cast<bf16 *>(dz);
    const bool vec = V % 8 == 0 && ((uintptr_t)z & 15u) == 0 && ((uintptr_t)dz & 15u) == 0;
    if (vec)
        ce_softmax_rows<8><<<rows, kRowBlock, 0, stream>>>(nll, dzb, zb, labels, V, mult);
    else
        ce_softmax_rows<1><<<rows, kRowBlock, 0, stream>>>(nll, dzb, zb, labels, V, mult);
    KERNEL_CHECK(stream);
}

}  // namespace
}  // namespace refine

using namespace refine;

extern "C" size_t gpu_lm_head_ce_workspace_size(int N, int V, int rows_per_chunk) {
    CHECK(N >= 1 && V >= 1 && rows_per_chunk >= 1, "ce N=%d V=%d rows_per_chunk=%d", N, V, rows_per_chunk);
    const int R = rows_per_chunk < N ? rows_per_chunk : N;
    return round256((size_t)R * V * 2) + round256((size_t)N * 4);
}

extern "C" void gpu_cross_entropy_rows_bf16(float *nll, uint16_t *dz, const uint16_t *z, const int32_t *labels, int N,
                                            int V, float mult, cudaStream_t stream) {
    CHECK(N >= 1 && V >= 1, "ce N=%d V=%d", N, V);
    softmax_rows(nll, dz, z, labels, N, V, mult, stream);
}

extern "C" void gpu_lm_head_cross_entropy_bf16(float *loss, uint16_t *dh, float *dw, const uint16_t *h,
                                               const uint16_t *w, const int32_t *labels, int N, int C, int V,
                                               int64_t n_valid_total, float grad_scale, int rows_per_chunk,
                                               struct gpu_gemm *gemm, void *workspace, cudaStream_t stream) {
    CHECK(N >= 1 && C >= 1 && V >= 1 && rows_per_chunk >= 1, "ce N=%d C=%d V=%d rows_per_chunk=%d", N, C, V,
          rows_per_chunk);
    CHECK(n_valid_total >= 1, "ce: n_valid_total=%lld must be >= 1 (a batch with every label ignored is skipped)",
          (long long)n_valid_total);
    CHECK(((uintptr_t)workspace & 255u) == 0, "ce workspace must be 256-byte aligned");
    const int R = rows_per_chunk < N ? rows_per_chunk : N;
    unsigned char *ws = static_cast<unsigned char *>(workspace);
    uint16_t *zbuf = reinterpret_cast<uint16_t *>(ws);
    float *nll = reinterpret_cast<float *>(ws + round256((size_t)R * V * 2));
    const float mult = (float)((double)grad_scale / (double)n_valid_total);
    const bool backward = dh != nullptr || dw != nullptr;
    for (int r0 = 0; r0 < N; r0 += R) {
        const int rows = N - r0 < R ? N - r0 : R;
        const uint16_t *hc = h + (int64_t)r0 * C;
        gpu_linear_forward_bf16(gemm, zbuf, hc, w, nullptr, rows, C, V, stream);
        softmax_rows(nll + r0, backward ? zbuf : nullptr, zbuf, labels + r0, rows, V, mult, stream);
        if (dh) gpu_linear_backward_dx_bf16(gemm, dh + (int64_t)r0 * C, zbuf, w, rows, C, V, GEMM_OVERWRITE, stream);
        if (dw) gpu_linear_backward_dw_f32(gemm, dw, zbuf, hc, rows, C, V, stream);
    }
    ce_finish_loss<<<1, 256, 0, stream>>>(loss, nll, N, 1.0 / (double)n_valid_total);
    KERNEL_CHECK(stream);
}
