/* swiglu.cu — SwiGLU forward/backward kernels (gpu/swiglu.h).
 *
 * Strategy: memory-bound elementwise (forward reads 4 bytes and writes 2 per element; backward
 * reads 6 and writes 4). Each thread owns VW = 8 consecutive elements of one row (16-byte loads
 * and stores through gpu/vec.cuh) when F and the row strides are multiples of 8, else VW = 1; a
 * grid-stride loop walks the (row, 8-column group) pairs. Rounding follows the header step by
 * step: every intermediate that torch stores as bf16 goes through bf16_round_dev, and the fp32
 * arithmetic uses __fmul_rn/__fadd_rn/__fdiv_rn so that nvcc cannot contract it into FMAs. expf is
 * the full-precision libdevice exp (≤ 2 ulp), not the __expf intrinsic. The per-element math is
 * gpu/swiglu.cuh's (gpu/dora.cu's fused gate/up rescale uses the same).
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:swiglu_parity
 *                     (binary) swiglu_parity --bench
 */
#include "gpu/swiglu.h"

#include "gpu/cuda_check.h"
#include "gpu/swiglu.cuh"
#include "gpu/vec.cuh"
#include "io/check.h"

namespace refine {
namespace {

constexpr int kBlock = 256;

int grid_for(int64_t items) {
    const int64_t b = (items + kBlock - 1) / kBlock;
    return (int)(b < 2048 ? (b > 0 ? b : 1) : 2048);
}

template <int VW>
__global__ void __launch_bounds__(kBlock) swiglu_forward_elementwise(bf16 *__restrict__ h, const bf16 *g,
                                                                     const bf16 *u, int F, int ld_in,
                                                                     int64_t groups) {
    const int gpr = F / VW; /* groups per row */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < groups; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / gpr;
        const int col = (int)(i - row * gpr) * VW;
        float gv[VW], uv[VW], hv[VW];
        load_bf16<VW>(gv, g + row * ld_in + col);
        load_bf16<VW>(uv, u + row * ld_in + col);
#pragma unroll
        for (int j = 0; j < VW; j++) hv[j] = swiglu_forward_elem(bf16_round_dev(silu_dev(gv[j])), uv[j]);
        store_bf16<VW>(h + row * F + col, hv);
    }
}

/* H: h (row stride F) written too, from the backward's a */
template <int VW, bool H>
__global__ void __launch_bounds__(kBlock) swiglu_backward_elementwise(bf16 *dg, bf16 *du, bf16 *__restrict__ h,
                                                                      const bf16 *__restrict__ dh, const bf16 *g,
                                                                      const bf16 *u, int F, int ld_in, int ld_out,
                                                                      int64_t groups) {
    const int gpr = F / VW;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < groups; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / gpr;
        const int col = (int)(i - row * gpr) * VW;
        float gv[VW], uv[VW], dhv[VW], dgv[VW], duv[VW], hv[VW], sg[VW], si[VW];
        load_bf16<VW>(gv, g + row * ld_in + col);
        load_bf16<VW>(uv, u + row * ld_in + col);
        load_bf16<VW>(dhv, dh + row * F + col);
        sigmoid_silu<VW>(gv, sg, si);
#pragma unroll
        for (int j = 0; j < VW; j++) {
            const float a = swiglu_backward_sig(gv[j], uv[j], dhv[j], sg[j], si[j], dgv[j], duv[j]);
            hv[j] = swiglu_forward_elem(a, uv[j]);
        }
        store_bf16<VW>(dg + row * ld_out + col, dgv);
        store_bf16<VW>(du + row * ld_out + col, duv);
        if (H) store_bf16<VW>(h + row * F + col, hv);
    }
}

template <int VW>
void launch_backward(bf16 *dg, bf16 *du, bf16 *h, const bf16 *dh, const bf16 *g, const bf16 *u, int F, int ld_in,
                     int ld_out, int64_t groups, cudaStream_t stream) {
    if (h)
        swiglu_backward_elementwise<VW, true>
            <<<grid_for(groups), kBlock, 0, stream>>>(dg, du, h, dh, g, u, F, ld_in, ld_out, groups);
    else
        swiglu_backward_elementwise<VW, false>
            <<<grid_for(groups), kBlock, 0, stream>>>(dg, du, h, dh, g, u, F, ld_in, ld_out, groups);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

}  // namespace
}  // namespace refine

using namespace refine;

extern "C" void gpu_swiglu_forward_bf16(uint16_t *h, const uint16_t *g, const uint16_t *u, int N, int F, int ld_in,
                                        cudaStream_t stream) {
    CHECK(N >= 1 && F >= 1 && ld_in >= F, "swiglu N=%d F=%d ld_in=%d", N, F, ld_in);
    bf16 *hb = reinterpret_cast<bf16 *>(h);
    const bf16 *gb = reinterpret_cast<const bf16 *>(g), *ub = reinterpret_cast<const bf16 *>(u);
    if (F % 8 == 0 && ld_in % 8 == 0 && aligned16(h) && aligned16(g) && aligned16(u)) {
        const int64_t groups = (int64_t)N * (F / 8);
        swiglu_forward_elementwise<8><<<grid_for(groups), kBlock, 0, stream>>>(hb, gb, ub, F, ld_in, groups);
    } else {
        const int64_t groups = (int64_t)N * F;
        swiglu_forward_elementwise<1><<<grid_for(groups), kBlock, 0, stream>>>(hb, gb, ub, F, ld_in, groups);
    }
    KERNEL_CHECK(stream);
}

extern "C" void gpu_swiglu_backward_bf16(uint16_t *dg, uint16_t *du, const uint16_t *dh, const uint16_t *g,
                                         const uint16_t *u, int N, int F, int ld_in, int ld_out, cudaStream_t stream) {
    gpu_swiglu_backward_forming_bf16(dg, du, nullptr, dh, g, u, N, F, ld_in, ld_out, stream);
}

extern "C" void gpu_swiglu_backward_forming_bf16(uint16_t *dg, uint16_t *du, uint16_t *h, const uint16_t *dh,
                                                 const uint16_t *g, const uint16_t *u, int N, int F, int ld_in,
                                                 int ld_out, cudaStream_t stream) {
    CHECK(N >= 1 && F >= 1 && ld_in >= F && ld_out >= F, "swiglu N=%d F=%d ld_in=%d ld_out=%d", N, F, ld_in, ld_out);
    bf16 *dgb = reinterpret_cast<bf16 *>(dg), *dub = reinterpret_cast<bf16 *>(du), *hb = reinterpret_cast<bf16 *>(h);
    const bf16 *dhb = reinterpret_cast<const bf16 *>(dh), *gb = reinterpret_cast<const bf16 *>(g),
               *ub = reinterpret_cast<const bf16 *>(u);
    if (F % 8 == 0 && ld_in % 8 == 0 && ld_out % 8 == 0 && aligned16(dg) && aligned16(du) && aligned16(dh) &&
        aligned16(g) && aligned16(u) && aligned16(h)) { /* h may be null */
        launch_backward<8>(dgb, dub, hb, dhb, gb, ub, F, ld_in, ld_out, (int64_t)N * (F / 8), stream);
    } else {
        launch_backward<1>(dgb, dub, hb, dhb, gb, ub, F, ld_in, ld_out, (int64_t)N * F, stream);
    }
    KERNEL_CHECK(stream);
}
