/* rope.cu — RoPE forward/backward, Q and K in one launch, in place or from a source (gpu/rope.h).
 *
 * Strategy: memory-bound (each element read and written once; the cos/sin rows are shared by all
 * heads of a row and stay in L1/L2). One thread owns VP = 8 pairs (dims i..i+7 and their partners
 * i+D/2..i+D/2+7) of one head of one row: two 16-byte loads and stores of x, one 16-byte load of
 * cos and of sin. Work items are (row, head, pair group) with the H query heads first, then the
 * KVH key heads, so one grid covers Q and K. Rounding as in the header, with __fmul_rn/__fsub_rn/
 * __fadd_rn to keep nvcc from contracting; the backward is the forward with −sin (negation is
 * exact, so the roundings mirror torch's autograd).
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:rope_parity
 *                     (binary) rope_parity --bench
 */
#include "gpu/rope.h"

#include "gpu/cuda_check.h"
#include "gpu/rope.cuh"
#include "gpu/vec.cuh"
#include "io/check.h"

namespace refine {
namespace {

constexpr int kBlock = 256;

template <int VP>
__global__ void __launch_bounds__(kBlock) rope_rotate_pairs(bf16 *q, bf16 *k, const bf16 *q_src, const bf16 *k_src,
                                                            const bf16 *__restrict__ cos_t,
                                                            const bf16 *__restrict__ sin_t,
                                                            const int32_t *__restrict__ pos, int H, int KVH, int D,
                                                            int ld_q, int ld_k, float sin_sign, int64_t items) {
    const int half = D / 2;
    const int gph = half / VP; /* pair groups per head */
    const int heads = H + KVH;
    for (int64_t it = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; it < items; it += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = it / ((int64_t)heads * gph);
        const int rem = (int)(it - row * heads * gph);
        const int head = rem / gph;
        const int i = (rem - head * gph) * VP;
        const int64_t off = head < H ? row * ld_q + (int64_t)head * D : row * ld_k + (int64_t)(head - H) * D;
        bf16 *x = (head < H ? q : k) + off;
        const bf16 *xs = (head < H ? q_src : k_src) + off;
        const int64_t t = pos[row];
        float x1[VP], x2[VP], c[VP], s[VP], y1[VP], y2[VP];
        load_bf16<VP>(x1, xs + i);
        load_bf16<VP>(x2, xs + i + half);
        load_bf16<VP>(c, cos_t + t * half + i);
        load_bf16<VP>(s, sin_t + t * half + i);
#pragma unroll
        for (int j = 0; j < VP; j++) rope_rotate_pair(x1[j], x2[j], c[j], sin_sign * s[j], y1[j], y2[j]);
        store_bf16<VP>(x + i, y1);
        store_bf16<VP>(x + i + half, y2);
    }
}

void rope_launch(uint16_t *q, uint16_t *k, const uint16_t *q_src, const uint16_t *k_src, const uint16_t *cos_t,
                 const uint16_t *sin_t, const int32_t *pos, int N, int H, int KVH, int D, int ld_q, int ld_k,
                 float sin_sign, cudaStream_t stream) {
    CHECK(N >= 1 && H >= 1 && KVH >= 0 && D >= 2 && D % 2 == 0, "rope N=%d H=%d KVH=%d D=%d", N, H, KVH, D);
    CHECK(ld_q >= H * D && (KVH == 0 || ld_k >= KVH * D), "rope ld_q=%d ld_k=%d too small", ld_q, ld_k);
    CHECK(KVH == 0 || k != nullptr, "rope: k is NULL with KVH=%d", KVH);
    const int half = D / 2;
    CHECK(KVH == 0 || k_src != nullptr, "rope: k's source is NULL with KVH=%d", KVH);
    bf16 *qb = reinterpret_cast<bf16 *>(q), *kb = reinterpret_cast<bf16 *>(k);
    const bf16 *qs = reinterpret_cast<const bf16 *>(q_src), *ks = reinterpret_cast<const bf16 *>(k_src);
    const bf16 *cb = reinterpret_cast<const bf16 *>(cos_t), *sb = reinterpret_cast<const bf16 *>(sin_t);
    const bool vec = half % 8 == 0 && ld_q % 8 == 0 && (KVH == 0 || ld_k % 8 == 0) && ((uintptr_t)q & 15u) == 0 &&
                     ((uintptr_t)k & 15u) == 0 && ((uintptr_t)q_src & 15u) == 0 &&
                     ((uintptr_t)k_src & 15u) == 0 && ((uintptr_t)cos_t & 15u) == 0 && ((uintptr_t)sin_t & 15u) == 0;
    const int vp = vec ? 8 : 1;
    const int64_t items = (int64_t)N * (H + KVH) * (half / vp);
    const int64_t blocks64 = (items + kBlock - 1) / kBlock;
    const int blocks = (int)(blocks64 < 4096 ? blocks64 : 4096);
    if (vec)
        rope_rotate_pairs<8><<<blocks, kBlock, 0, stream>>>(qb, kb, qs, ks, cb, sb, pos, H, KVH, D, ld_q, ld_k, sin_sign, items);
    else
        rope_rotate_pairs<1><<<blocks, kBlock, 0, stream>>>(qb, kb, qs, ks, cb, sb, pos, H, KVH, D, ld_q, ld_k, sin_sign, items);
    KERNEL_CHECK(stream);
}

}  // namespace
}  // namespace refine

extern "C" void gpu_rope_forward_bf16(uint16_t *q, uint16_t *k, const uint16_t *cos, const uint16_t *sin,
                                      const int32_t *pos, int N, int H, int KVH, int D, int ld_q, int ld_k,
                                      cudaStream_t stream) {
    refine::rope_launch(q, k, q, k, cos, sin, pos, N, H, KVH, D, ld_q, ld_k, 1.0f, stream);
}

extern "C" void gpu_rope_forward_from_bf16(uint16_t *q, uint16_t *k, const uint16_t *q_src, const uint16_t *k_src,
                                           const uint16_t *cos, const uint16_t *sin, const int32_t *pos, int N, int H,
                                           int KVH, int D, int ld_q, int ld_k, cudaStream_t stream) {
    refine::rope_launch(q, k, q_src, k_src, cos, sin, pos, N, H, KVH, D, ld_q, ld_k, 1.0f, stream);
}

extern "C" void gpu_rope_backward_bf16(uint16_t *dq, uint16_t *dk, const uint16_t *cos, const uint16_t *sin,
                                       const int32_t *pos, int N, int H, int KVH, int D, int ld_q, int ld_k,
                                       cudaStream_t stream) {
    refine::rope_launch(dq, dk, dq, dk, cos, sin, pos, N, H, KVH, D, ld_q, ld_k, -1.0f, stream);
}
