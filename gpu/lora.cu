/* lora.cu — the LoRA adapter's products through gpu/gemm.h (gpu/lora.h).
 *
 * Strategy: the adapter is five thin products (rank R ≤ a few hundred) around the base layer's
 * big ones; each goes to cuBLASLt through the wrapper, the scale s rides in gemm's alpha and the
 * joins with the base path (y += ..., dx += ...) in its beta = 1, so the adapter adds no
 * elementwise pass without dropout. With a dropout mask, du A is formed in fp32 in the workspace
 * and one vectorized pass (8 elements a thread, 16-byte loads where the row length allows) adds
 * its masked value to dx.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:lora_parity
 *                     (binary) lora_parity --bench
 */
#include "gpu/lora.h"

#include <string.h>

#include "gpu/cuda_check.h"
#include "gpu/vec.cuh"
#include "io/check.h"

using refine::bf16;

namespace {

constexpr int kBlock = 256;

/* dx = bf16(dx + (keep ? t·keep_scale : 0)), ref_lora_backward's mask and rounding. */
template <int VW>
__global__ void __launch_bounds__(kBlock) lora_masked_add(bf16 *dx, const float *t, const uint8_t *keep,
                                                          float keep_scale, int64_t n) {
    const int64_t i = ((int64_t)blockIdx.x * kBlock + threadIdx.x) * VW;
    if (i >= n) return;
    float d[VW];
    refine::load_bf16<VW>(d, dx + i);
#pragma unroll
    for (int j = 0; j < VW; j++) {
        const float tm = keep[i + j] ? __fmul_rn(t[i + j], keep_scale) : 0.0f;
        d[j] = __fadd_rn(d[j], tm);
    }
    refine::store_bf16<VW>(dx + i, d);
}

struct lora_plan {
    struct gemm_args fwd_u, fwd_y, bwd_db, bwd_du, bwd_da, bwd_dx;
};

/* The six products of one shape; pointers filled by the caller (or dummies for reserve). */
lora_plan make_plan(uint16_t *y, uint16_t *u, const uint16_t *x_a, const uint16_t *lora_a, const uint16_t *lora_b,
                    float *dlora_a, float *dlora_b, const uint16_t *dy, uint16_t *du, void *dx_out, enum gemm_out dx_type,
                    enum gemm_beta dx_beta, int N, int C_in, int C_out, int R, float scale) {
    lora_plan p;
    memset(&p, 0, sizeof p);
    /* u (N, R) = x_a (N, C_in) · Aᵀ */
    p.fwd_u = gemm_args{u, GEMM_OUT_BF16, R, 0, x_a, GEMM_NO_TRANS, C_in, 0, lora_a, GEMM_TRANS, C_in, 0, nullptr,
                        N, R, C_in, 1, 1.0f, GEMM_OVERWRITE};
    /* y (N, C_out) += s · u (N, R) · Bᵀ */
    p.fwd_y = gemm_args{y, GEMM_OUT_BF16, C_out, 0, u, GEMM_NO_TRANS, R, 0, lora_b, GEMM_TRANS, R, 0, nullptr,
                        N, C_out, R, 1, scale, GEMM_ACCUMULATE};
    /* dB (C_out, R) += s · dyᵀ (C_out, N) · u (N, R) */
    p.bwd_db = gemm_args{dlora_b, GEMM_OUT_F32, R, 0, dy, GEMM_TRANS, C_out, 0, u, GEMM_NO_TRANS, R, 0, nullptr,
                         C_out, R, N, 1, scale, GEMM_ACCUMULATE};
    /* du (N, R) = s · dy (N, C_out) · B (C_out, R) */
    p.bwd_du = gemm_args{du, GEMM_OUT_BF16, R, 0, dy, GEMM_NO_TRANS, C_out, 0, lora_b, GEMM_NO_TRANS, R, 0,
                         nullptr, N, R, C_out, 1, scale, GEMM_OVERWRITE};
    /* dA (R, C_in) += duᵀ (R, N) · x_a (N, C_in) */
    p.bwd_da = gemm_args{dlora_a, GEMM_OUT_F32, C_in, 0, du, GEMM_TRANS, R, 0, x_a, GEMM_NO_TRANS, C_in, 0,
                         nullptr, R, C_in, N, 1, 1.0f, GEMM_ACCUMULATE};
    /* dx (N, C_in) (+)= du (N, R) · A (R, C_in) */
    p.bwd_dx = gemm_args{dx_out, dx_type, C_in, 0, du, GEMM_NO_TRANS, R, 0, lora_a, GEMM_NO_TRANS, C_in, 0,
                         nullptr, N, C_in, R, 1, 1.0f, dx_beta};
    return p;
}

constexpr size_t kAlign = 256;

size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

void check_dims(int N, int C_in, int C_out, int R) {
    CHECK(N >= 1 && C_in >= 1 && C_out >= 1 && R >= 1, "lora: N=%d C_in=%d C_out=%d R=%d must be >= 1", N, C_in,
          C_out, R);
}

}  // namespace

extern "C" void gpu_lora_forward_bf16(struct gpu_gemm *g, uint16_t *y, uint16_t *u, const uint16_t *x_a,
                                      const uint16_t *lora_a, const uint16_t *lora_b, int N, int C_in, int C_out,
                                      int R, float scale, cudaStream_t stream) {
    check_dims(N, C_in, C_out, R);
    const lora_plan p = make_plan(y, u, x_a, lora_a, lora_b, nullptr, nullptr, nullptr, nullptr, nullptr,
                                  GEMM_OUT_BF16, GEMM_ACCUMULATE, N, C_in, C_out, R, scale);
    gpu_gemm(g, &p.fwd_u, stream);
    gpu_gemm(g, &p.fwd_y, stream);
}

extern "C" size_t gpu_lora_backward_workspace_size(int N, int C_in, int R, enum lora_mask mask) {
    size_t b = align_up((size_t)N * R * sizeof(uint16_t)); /* du */
    if (mask == LORA_MASKED) b += align_up((size_t)N * C_in * sizeof(float)); /* du A before the mask */
    return b;
}

extern "C" void gpu_lora_backward_bf16(struct gpu_gemm *g, uint16_t *dx, float *dlora_a, float *dlora_b,
                                       const uint16_t *dy, const uint16_t *x_a, const uint8_t *keep, float keep_scale,
                                       const uint16_t *u, const uint16_t *lora_a, const uint16_t *lora_b, int N,
                                       int C_in, int C_out, int R, float scale, void *workspace, cudaStream_t stream) {
    check_dims(N, C_in, C_out, R);
    CHECK(workspace != nullptr && (uintptr_t)workspace % kAlign == 0,
          "lora backward: workspace of %zu bytes, 256-byte aligned, required",
          gpu_lora_backward_workspace_size(N, C_in, R, keep ? LORA_MASKED : LORA_NO_MASK));
    uint16_t *du = static_cast<uint16_t *>(workspace);
    float *t = reinterpret_cast<float *>(static_cast<unsigned char *>(workspace) + align_up((size_t)N * R * 2));
    const bool masked = keep != nullptr;
    /* u is an operand of dB (make_plan's u is non-const only because the forward writes it) */
    const lora_plan p = make_plan(nullptr, const_cast<uint16_t *>(u), x_a, lora_a, lora_b, dlora_a, dlora_b, dy, du,
                                  masked ? (void *)t : (void *)dx, masked ? GEMM_OUT_F32 : GEMM_OUT_BF16,
                                  masked ? GEMM_OVERWRITE : GEMM_ACCUMULATE, N, C_in, C_out, R, scale);
    if (dlora_b) gpu_gemm(g, &p.bwd_db, stream);
    if (!dlora_a && !dx) return;
    gpu_gemm(g, &p.bwd_du, stream);
    if (dlora_a) gpu_gemm(g, &p.bwd_da, stream);
    if (!dx) return;
    gpu_gemm(g, &p.bwd_dx, stream);
    if (masked) {
        const int64_t n = (int64_t)N * C_in;
        /* 16-byte dx accesses need rows of a multiple of 8 and an aligned dx (t is aligned). */
        if (C_in % 8 == 0 && (uintptr_t)dx % 16 == 0 && (uintptr_t)keep % 8 == 0) {
            const int64_t threads = n / 8;
            lora_masked_add<8><<<(unsigned)((threads + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
                reinterpret_cast<bf16 *>(dx), t, keep, keep_scale, n);
        } else {
            lora_masked_add<1><<<(unsigned)((n + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
                reinterpret_cast<bf16 *>(dx), t, keep, keep_scale, n);
        }
        KERNEL_CHECK(stream);
    }
}

extern "C" void gpu_lora_reserve(struct gpu_gemm *g, int N, int C_in, int C_out, int R, enum lora_mask mask) {
    check_dims(N, C_in, C_out, R);
    /* Dummy 256-byte-aligned pointers: the alignment class cudaMalloc'd buffers have. */
    void *d = reinterpret_cast<void *>((uintptr_t)kAlign);
    uint16_t *h = static_cast<uint16_t *>(d);
    float *f = static_cast<float *>(d);
    const bool masked = mask == LORA_MASKED;
    const lora_plan p = make_plan(h, h, h, h, h, f, f, h, h, d, masked ? GEMM_OUT_F32 : GEMM_OUT_BF16,
                                  masked ? GEMM_OVERWRITE : GEMM_ACCUMULATE, N, C_in, C_out, R, 1.0f);
    for (const gemm_args *a : {&p.fwd_u, &p.fwd_y, &p.bwd_db, &p.bwd_du, &p.bwd_da, &p.bwd_dx}) gpu_gemm_reserve(g, a);
}
