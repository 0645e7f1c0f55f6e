/* lora.cu — the LoRA adapter's products through gpu/gemm.h (gpu/lora.h).
 *
 * Strategy: the adapter is five thin products (rank R ≤ a few hundred) around the base layer's
 * big ones; each goes to cuBLASLt through the wrapper, the scale s rides in gemm's alpha and the
 * joins with the base path (y += ..., dx += ...) in its beta = 1, so the adapter adds no
 * elementwise pass without dropout — except that the forward's y += s·u Bᵀ and the backward's
 * dx += du A, for K = R (a group: n·R) ≤ 64 even, widths % 32 == 0 and aligned rows (the models'
 * shapes), are one pass over y or dx on tensor cores (gpu/adapter_mma.cuh): cuBLASLt runs those
 * K ≤ 64 products with beta = 1 at ~60% of copy bandwidth. With a
 * dropout mask, du A is formed in fp32 in the workspace and one vectorized pass (8 elements a
 * thread, 16-byte loads where the row length allows) adds its masked value to dx.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:lora_parity
 *                     (binary) lora_parity --bench
 */
#include "gpu/lora.h"

#include <string.h>

#include "gpu/adapter_mma.cuh"
#include "gpu/cuda_check.h"
#include "gpu/swiglu.cuh"
#include "gpu/swiglu.h"
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

/* dst (rows, cols; row stride ldd) = src (rows, cols; row stride lds): u into a folded input's
 * columns, VW elements a thread. */
template <int VW>
__global__ void __launch_bounds__(kBlock) lora_copy_cols(uint16_t *dst, int64_t ldd, const uint16_t *src,
                                                         int64_t lds, int rows, int cols) {
    const int per_row = cols / VW;
    const int64_t i = (int64_t)blockIdx.x * kBlock + threadIdx.x;
    if (i >= (int64_t)rows * per_row) return;
    const int64_t r = i / per_row, c = (i % per_row) * VW;
    if constexpr (VW == 8)
        *reinterpret_cast<uint4 *>(dst + r * ldd + c) = *reinterpret_cast<const uint4 *>(src + r * lds + c);
    else
        dst[r * ldd + c] = src[r * lds + c];
}

/* S_i = bf16(s·B_i) into each slot's adapter columns; blockIdx.y the slot. */
__global__ void __launch_bounds__(kBlock) lora_fold_b(const lora_fold_slot *slots, int R, float scale) {
    const lora_fold_slot sl = slots[blockIdx.y];
    const int64_t e = (int64_t)blockIdx.x * kBlock + threadIdx.x;
    if (e >= sl.c_out * R) return;
    const int64_t o = e / R, r = e % R;
    const float b = __uint_as_float((uint32_t)sl.b[e] << 16);
    sl.s[o * sl.ld + r] = __bfloat16_as_ushort(__float2bfloat16_rn(__fmul_rn(scale, b)));
}

struct lora_plan {
    struct gemm_args fwd_u, fwd_y, bwd_db, bwd_du, bwd_da, bwd_dx;
};

/* The products of one adapter (n = 1) or of a group of n adapters on one input (gpu/lora.h):
 * member i's u_i and du_i are columns i·R .. i·R + R − 1 of u and du (row stride n·R). */

/* u (N, n·R) = x (N, C_in; row stride ldx) · A_gᵀ */
gemm_args group_u(uint16_t *u, const uint16_t *x, const uint16_t *lora_a, int n, int N, int C_in, int R,
                  int64_t ldx = 0) {
    return gemm_args{u,       GEMM_OUT_BF16, (int64_t)n * R, 0,    x,     GEMM_NO_TRANS, ldx ? ldx : C_in, 0, lora_a,
                     GEMM_TRANS, C_in,       0,              nullptr, N, n * R,        C_in,             1, 1.0f,
                     GEMM_OVERWRITE};
}

/* y_i (N, C_out) += s · u_i (N, R; row stride n·R) · B_iᵀ */
gemm_args group_y(uint16_t *y, const uint16_t *u_i, const uint16_t *lora_b, int n, int N, int C_out, int R,
                  float scale) {
    return gemm_args{y, GEMM_OUT_BF16, C_out, 0, u_i, GEMM_NO_TRANS, (int64_t)n * R, 0, lora_b, GEMM_TRANS, R, 0,
                     nullptr, N, C_out, R, 1, scale, GEMM_ACCUMULATE};
}

/* dB_i (C_out, R) += s · dy_iᵀ · u_i (dy_i's rows at ld_dy; 0: C_out) */
gemm_args group_db(float *db, const uint16_t *dy, const uint16_t *u_i, int n, int N, int C_out, int R, float scale,
                   int64_t ld_dy = 0) {
    return gemm_args{db,      GEMM_OUT_F32, R, 0, dy, GEMM_TRANS, ld_dy ? ld_dy : C_out, 0, u_i, GEMM_NO_TRANS,
                     (int64_t)n * R, 0, nullptr, C_out, R, N, 1, scale, GEMM_ACCUMULATE};
}

/* du_i (N, R; row stride n·R) = s · dy_i · B_i (dy_i's rows at ld_dy; 0: C_out) */
gemm_args group_du(uint16_t *du_i, const uint16_t *dy, const uint16_t *lora_b, int n, int N, int C_out, int R,
                   float scale, int64_t ld_dy = 0) {
    return gemm_args{du_i, GEMM_OUT_BF16, (int64_t)n * R, 0, dy, GEMM_NO_TRANS, ld_dy ? ld_dy : C_out, 0, lora_b,
                     GEMM_NO_TRANS, R, 0, nullptr, N, R, C_out, 1, scale, GEMM_OVERWRITE};
}

/* dA_g (n·R, C_in) += duᵀ · x (x at row stride ldx, du at ldu) */
gemm_args group_da(float *da, const uint16_t *du, const uint16_t *x, int n, int N, int C_in, int R,
                   int64_t ldx = 0, int64_t ldu = 0) {
    return gemm_args{da,      GEMM_OUT_F32, C_in, 0,     du,    GEMM_TRANS, ldu ? ldu : (int64_t)n * R,
                     0,       x,            GEMM_NO_TRANS, ldx ? ldx : C_in, 0,          nullptr,
                     n * R,   C_in,         N,             1,     1.0f,       GEMM_ACCUMULATE};
}

/* dx (N, C_in) (+)= du (N, n·R) · A_g: bf16 accumulating onto the base dx, or (dropout) fp32
 * overwriting a buffer that the masked pass adds */
gemm_args group_dx(void *dx, enum gemm_out dx_type, enum gemm_beta dx_beta, const uint16_t *du, const uint16_t *lora_a,
                   int n, int N, int C_in, int R) {
    return gemm_args{dx, dx_type, C_in, 0, du, GEMM_NO_TRANS, (int64_t)n * R, 0, lora_a, GEMM_NO_TRANS, C_in, 0,
                     nullptr, N, C_in, n * R, 1, 1.0f, dx_beta};
}

/* The six products of one shape (the group products with n = 1); pointers filled by the caller
 * (or dummies for reserve). */
lora_plan make_plan(uint16_t *y, uint16_t *u, const uint16_t *x_a, const uint16_t *lora_a, const uint16_t *lora_b,
                    float *dlora_a, float *dlora_b, const uint16_t *dy, uint16_t *du, void *dx_out, enum gemm_out dx_type,
                    enum gemm_beta dx_beta, int N, int C_in, int C_out, int R, float scale) {
    lora_plan p;
    p.fwd_u = group_u(u, x_a, lora_a, 1, N, C_in, R);
    p.fwd_y = group_y(y, u, lora_b, 1, N, C_out, R, scale);
    p.bwd_db = group_db(dlora_b, dy, u, 1, N, C_out, R, scale);
    p.bwd_du = group_du(du, dy, lora_b, 1, N, C_out, R, scale);
    p.bwd_da = group_da(dlora_a, du, x_a, 1, N, C_in, R);
    p.bwd_dx = group_dx(dx_out, dx_type, dx_beta, du, lora_a, 1, N, C_in, R);
    return p;
}

/* y += s·u Bᵀ as gpu/adapter_mma.cuh's epilogue: y = bf16(y + s·(u Bᵀ)), the fp32 sum scaled after
 * it as gemm's alpha scales it. */
struct lora_mma_epi : refine::adapter_epi_no_reads {
    bf16 *y;
    __device__ __forceinline__ void columns(int) {}
    __device__ __forceinline__ void row(float (&yv)[8], const float (&sl)[8], int64_t e, int, int, const Pre &) {
        float out[8];
#pragma unroll
        for (int c = 0; c < 8; c++) out[c] = __fadd_rn(yv[c], sl[c]);
        refine::store_bf16<8>(y + e, out);
    }
};

/* lora_mma_epi's y = bf16(y + s·(u Bᵀ)), then the residual add's out = bf16(res + y) (llama.cu's
 * residual_add), y not stored; res read with the step's y */
struct lora_residual_epi {
    bf16 *out;
    const bf16 *res;
    struct Pre {
        uint4 res;
    };
    __device__ __forceinline__ void columns(int) {}
    __device__ __forceinline__ void load(Pre &p, int64_t e, int, int) { p.res = *reinterpret_cast<const uint4 *>(res + e); }
    __device__ __forceinline__ void row(float (&yv)[8], const float (&sl)[8], int64_t e, int, int, const Pre &p) {
        float rv[8], o[8];
        refine::load_bf16<8>(rv, reinterpret_cast<const bf16 *>(&p.res));
#pragma unroll
        for (int c = 0; c < 8; c++) o[c] = __fadd_rn(rv[c], refine::bf16_round_dev(__fadd_rn(yv[c], sl[c])));
        refine::store_bf16<8>(out + e, o);
    }
};

/* dh + du A (fp32 sl from the pass) rounded as lora_mma_epi stores it, then SwiGLU's backward on it
 * (gpu/swiglu.cuh), the gate and up gradients into gate and up at the same row and column (row
 * stride ld_gu); with h, also the forward's output h = bf16(bf16(silu(g))·up) at dh's element, from
 * the same silu (the MLP input, formed again from the gate and up values before they are overwritten).
 * gate and up are read with the step's dh (each row's by the thread that overwrites it, before) */
struct lora_swiglu_epi {
    bf16 *gate, *up, *h;
    int64_t ld_gu;
    struct Pre {
        uint4 g, u;
    };
    __device__ __forceinline__ void columns(int) {}
    __device__ __forceinline__ void load(Pre &p, int64_t, int r, int oc) {
        const int64_t ge = (int64_t)r * ld_gu + oc;
        p.g = *reinterpret_cast<const uint4 *>(gate + ge);
        p.u = *reinterpret_cast<const uint4 *>(up + ge);
    }
    __device__ __forceinline__ void row(float (&yv)[8], const float (&sl)[8], int64_t e, int r, int oc, const Pre &p) {
        float gv[8], uv[8], dg[8], du[8], hv[8], sg[8], si[8];
        const int64_t ge = (int64_t)r * ld_gu + oc;
        refine::load_bf16<8>(gv, reinterpret_cast<const bf16 *>(&p.g));
        refine::load_bf16<8>(uv, reinterpret_cast<const bf16 *>(&p.u));
        refine::sigmoid_silu<8>(gv, sg, si);
#pragma unroll
        for (int c = 0; c < 8; c++) {
            const float a = refine::swiglu_backward_sig(
                gv[c], uv[c], refine::bf16_round_dev(__fadd_rn(yv[c], sl[c])), sg[c], si[c], dg[c], du[c]);
            hv[c] = refine::swiglu_forward_elem(a, uv[c]);
        }
        refine::store_bf16<8>(gate + ge, dg);
        refine::store_bf16<8>(up + ge, du);
        if (h) refine::store_bf16<8>(h + e, hv);
    }
};

/* The backward's thin products on plan p: dB += s·dyᵀu (db), then — where dA or a dx pass needs it —
 * du = bf16(s·dy B) into the plan's workspace and dA += duᵀ x_a (da). */
void backward_products(struct gpu_gemm *g, const lora_plan &p, bool da, bool db, bool dx_pass, cudaStream_t stream) {
    if (db) gpu_gemm(g, &p.bwd_db, stream);
    if (!da && !dx_pass) return;
    gpu_gemm(g, &p.bwd_du, stream);
    if (da) gpu_gemm(g, &p.bwd_da, stream);
}

/* out (N, C_out; row stride ldo, 0: C_out) += s · u (N, K; row stride ldu) · the rank-side operand b
 * (row stride ldb; its layout L, gpu/adapter_mma.cuh): one pass on tensor cores where the shape and alignment allow (the
 * models' shapes), else the gemm with beta = 1 (args). The forward's y += s·u Bᵀ (ADAPTER_B_ROWS, B
 * (C_out, R)) and the backward's dx += du A_g (ADAPTER_B_COLS, A_g (K, C_in), s = 1: dx = bf16(dx +
 * du A), as gemm's alpha = beta = 1 forms it). */
template <refine::adapter_b_layout L>
void add_product(struct gpu_gemm *g, const gemm_args &args, uint16_t *out, const uint16_t *u, int64_t ldu,
                 const uint16_t *b, int64_t ldb, int N, int C_out, int K, float scale, cudaStream_t stream,
                 int64_t ldo = 0) {
    if (refine::adapter_mma_fits(C_out, K, ldu, u, b, out, L, ldo)) {
        bf16 *o = reinterpret_cast<bf16 *>(out);
        refine::adapter_mma_launch<L>(o, reinterpret_cast<const bf16 *>(u), ldu, reinterpret_cast<const bf16 *>(b),
                                      ldb, scale, N, C_out, K, lora_mma_epi{{}, o}, stream, ldo);
        KERNEL_CHECK(stream);
        return;
    }
    gpu_gemm(g, &args, stream);
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
    add_product<refine::ADAPTER_B_ROWS>(g, p.fwd_y, y, u, R, lora_b, R, N, C_out, R, scale, stream);
}

extern "C" int gpu_lora_forward_residual_bf16(struct gpu_gemm *g, uint16_t *out, const uint16_t *res,
                                              const uint16_t *y, uint16_t *u, const uint16_t *x_a,
                                              const uint16_t *lora_a, const uint16_t *lora_b, int N, int C_in,
                                              int C_out, int R, float scale, cudaStream_t stream) {
    check_dims(N, C_in, C_out, R);
    if (!refine::adapter_mma_fits(C_out, R, R, u, lora_b, y) || ((uintptr_t)out | (uintptr_t)res) % 16 != 0) return 0;
    gpu_lora_u_bf16(g, u, x_a, lora_a, N, C_in, R, stream); /* the forward's u product */
    refine::adapter_mma_launch<refine::ADAPTER_B_ROWS>(
        reinterpret_cast<const bf16 *>(y), reinterpret_cast<const bf16 *>(u), R, reinterpret_cast<const bf16 *>(lora_b),
        R, scale, N, C_out, R, lora_residual_epi{reinterpret_cast<bf16 *>(out), reinterpret_cast<const bf16 *>(res)},
        stream);
    KERNEL_CHECK(stream);
    return 1;
}

extern "C" void gpu_lora_u_bf16(struct gpu_gemm *g, uint16_t *u, const uint16_t *x_a, const uint16_t *lora_a, int N,
                                int C_in, int R, cudaStream_t stream) {
    gpu_lora_group_u_bf16(g, u, x_a, lora_a, 1, N, C_in, R, stream); /* a group of one: the same product */
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
    backward_products(g, p, dlora_a != nullptr, dlora_b != nullptr, dx != nullptr, stream);
    if (!dx) return;
    if (!masked) {
        add_product<refine::ADAPTER_B_COLS>(g, p.bwd_dx, dx, du, R, lora_a, C_in, N, C_in, R, 1.0f, stream);
        return;
    }
    gpu_gemm(g, &p.bwd_dx, stream);
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

extern "C" void gpu_lora_backward_swiglu_bf16(struct gpu_gemm *g, uint16_t *gate, uint16_t *up, uint16_t *dh,
                                               float *dlora_a, float *dlora_b, const uint16_t *dy,
                                               const uint16_t *x_a, uint16_t *h_out, const uint16_t *u,
                                               const uint16_t *lora_a, const uint16_t *lora_b, int N, int C_in,
                                               int C_out, int R, float scale, int64_t ld_gu, void *workspace,
                                               cudaStream_t stream) {
    check_dims(N, C_in, C_out, R);
    CHECK((x_a == nullptr) != (h_out == nullptr),
          "lora backward (joined to SwiGLU's): the MLP input x_a or h_out to form it in, one of them");
    CHECK(ld_gu >= C_in && ld_gu <= INT32_MAX,
          "lora backward (joined to SwiGLU's): gate/up row stride %lld, C_in %d", (long long)ld_gu, C_in);
    const bool joined = refine::adapter_mma_fits(C_in, R, R, workspace, lora_a, dh, refine::ADAPTER_B_COLS) &&
                        (uintptr_t)gate % 16 == 0 && (uintptr_t)up % 16 == 0 && ld_gu % 8 == 0 &&
                        (uintptr_t)h_out % 16 == 0; /* h_out may be null */
    if (!joined) { /* the two passes (the MLP input formed first, while gate and up hold the forward's) */
        if (h_out) gpu_swiglu_forward_bf16(h_out, gate, up, N, C_in, (int)ld_gu, stream);
        gpu_lora_backward_bf16(g, dh, dlora_a, dlora_b, dy, h_out ? h_out : x_a, nullptr, 1.0f, u, lora_a, lora_b, N,
                               C_in, C_out, R, scale, workspace, stream);
        gpu_swiglu_backward_bf16(gate, up, dh, gate, up, N, C_in, (int)ld_gu, (int)ld_gu, stream);
        return;
    }
    CHECK(workspace != nullptr && (uintptr_t)workspace % kAlign == 0,
          "lora backward (joined to SwiGLU's): workspace of %zu bytes, 256-byte aligned, required",
          gpu_lora_backward_workspace_size(N, C_in, R, LORA_NO_MASK));
    uint16_t *du = static_cast<uint16_t *>(workspace);
    const lora_plan p = make_plan(nullptr, const_cast<uint16_t *>(u), h_out ? h_out : x_a, lora_a, lora_b, dlora_a,
                                  dlora_b, dy, du, dh, GEMM_OUT_BF16, GEMM_ACCUMULATE, N, C_in, C_out, R, scale);
    /* dB and du; dA here when the input is given, after the pass when the pass forms it */
    backward_products(g, p, dlora_a != nullptr && !h_out, dlora_b != nullptr, true, stream);
    refine::adapter_mma_launch<refine::ADAPTER_B_COLS>(
        reinterpret_cast<const bf16 *>(dh), reinterpret_cast<const bf16 *>(du), R,
        reinterpret_cast<const bf16 *>(lora_a), C_in, 1.0f, N, C_in, R,
        lora_swiglu_epi{reinterpret_cast<bf16 *>(gate), reinterpret_cast<bf16 *>(up), reinterpret_cast<bf16 *>(h_out),
                        ld_gu},
        stream);
    KERNEL_CHECK(stream);
    if (h_out && dlora_a) gpu_gemm(g, &p.bwd_da, stream);
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

/* ---- groups of adapters on one input ------------------------------------------------------- */

namespace {

void check_group(int n, int N, int C_in, const int *C_out, int R) {
    CHECK(n >= 1 && n <= LORA_GROUP_MAX, "lora group: %d members (1 to %d)", n, LORA_GROUP_MAX);
    for (int i = 0; i < n; i++) check_dims(N, C_in, C_out[i], R);
}

}  // namespace

extern "C" void gpu_lora_group_forward_bf16(struct gpu_gemm *g, uint16_t *const *y, uint16_t *u, const uint16_t *x,
                                            const uint16_t *lora_a, const uint16_t *const *lora_b, int n, int N,
                                            int C_in, const int *C_out, int R, float scale, cudaStream_t stream) {
    check_group(n, N, C_in, C_out, R);
    const gemm_args pu = group_u(u, x, lora_a, n, N, C_in, R);
    gpu_gemm(g, &pu, stream);
    for (int i = 0; i < n; i++) {
        const gemm_args py = group_y(y[i], u + (size_t)i * R, lora_b[i], n, N, C_out[i], R, scale);
        add_product<refine::ADAPTER_B_ROWS>(g, py, y[i], u + (size_t)i * R, n * R, lora_b[i], R, N, C_out[i], R,
                                            scale, stream);
    }
}

extern "C" void gpu_lora_group_u_bf16(struct gpu_gemm *g, uint16_t *u, const uint16_t *x, const uint16_t *lora_a, int n,
                                      int N, int C_in, int R, cudaStream_t stream) {
    CHECK(n >= 1 && n <= LORA_GROUP_MAX, "lora group: n=%d must be in [1, %d]", n, LORA_GROUP_MAX);
    check_dims(N, C_in, 1, R);
    const gemm_args pu = group_u(u, x, lora_a, n, N, C_in, R);
    gpu_gemm(g, &pu, stream);
}

extern "C" void gpu_lora_group_fold_u_bf16(struct gpu_gemm *g, uint16_t *u, uint16_t *x_f, int64_t ldx,
                                           const uint16_t *lora_a, int n, int N, int C_in, int R,
                                           cudaStream_t stream) {
    CHECK(n >= 1 && n <= LORA_GROUP_MAX, "lora group: n=%d must be in [1, %d]", n, LORA_GROUP_MAX);
    check_dims(N, C_in, 1, R);
    const int K = n * R;
    CHECK(ldx >= C_in + K, "lora fold: the input's row stride %lld is below C_in + n·R = %d", (long long)ldx,
          C_in + K);
    const gemm_args pu = group_u(u, x_f, lora_a, n, N, C_in, R, ldx);
    gpu_gemm(g, &pu, stream);
    uint16_t *dst = x_f + C_in;
    const bool vec = K % 8 == 0 && ldx % 8 == 0 && (uintptr_t)dst % 16 == 0 && (uintptr_t)u % 16 == 0;
    const int64_t threads = (int64_t)N * (vec ? K / 8 : K);
    const unsigned blocks = (unsigned)((threads + kBlock - 1) / kBlock);
    if (vec)
        lora_copy_cols<8><<<blocks, kBlock, 0, stream>>>(dst, ldx, u, K, N, K);
    else
        lora_copy_cols<1><<<blocks, kBlock, 0, stream>>>(dst, ldx, u, K, N, K);
    KERNEL_CHECK(stream);
}

extern "C" void gpu_lora_group_fold_backward_bf16(struct gpu_gemm *g, uint16_t *dx_f, int64_t ldd, float *dlora_a,
                                                  float *const *dlora_b, const uint16_t *const *dy, const uint16_t *x,
                                                  int64_t ldx, const uint16_t *u, const uint16_t *lora_a, int n, int N,
                                                  int C_in, const int *C_out, int R, float scale, void *workspace,
                                                  cudaStream_t stream) {
    gpu_lora_group_fold_backward_strided_bf16(g, dx_f, ldd, dlora_a, dlora_b, dy, 0, x, ldx, u, lora_a, n, N, C_in,
                                              C_out, R, scale, workspace, stream);
}

namespace {

void check_ld_dy(int64_t ld_dy, int n, const int *C_out) {
    for (int i = 0; i < n; i++)
        CHECK(ld_dy == 0 || ld_dy >= C_out[i], "lora group: dy's row stride %lld is below member %d's C_out %d",
              (long long)ld_dy, i, C_out[i]);
}

struct db_blocks {
    float *db[LORA_GROUP_MAX];
    int row0[LORA_GROUP_MAX + 1]; /* member i's rows of P: row0[i] .. row0[i + 1] − 1 */
};

/* dB_i (C_out_i, R) += P's diagonal block i: rows row0[i].., columns i·R.. of P (c_all, n·R) */
__global__ void __launch_bounds__(kBlock) lora_db_add_blocks(db_blocks b, const float *P, int n, int R) {
    const int64_t e = (int64_t)blockIdx.x * kBlock + threadIdx.x, nR = (int64_t)n * R;
    if (e >= (int64_t)b.row0[n] * R) return;
    const int o = (int)(e / R), r = (int)(e % R);
    int i = 0;
    while (o >= b.row0[i + 1]) i++;
    float *d = b.db[i] + (int64_t)(o - b.row0[i]) * R + r;
    *d = __fadd_rn(*d, P[(int64_t)o * nR + (int64_t)i * R + r]);
}

/* Every member's dB_i += s·dy_iᵀ u_i: with the members' dy side by side (ld_dy = Σ C_out) as one
 * product P = s·dyᵀ u (Σ C_out, n·R) into the workspace, whose diagonal blocks are the members'
 * (the off-diagonal ones, n − 1 times the flops, are not read) — one product and one split-K
 * reduction for the group instead of n (SmolLM2 LoRA +1.3–1.5% a step, level at 1B: RESULTS.md
 * 2026-11-29, third session); else one product per member accumulating into its dB_i. */
void group_db_all(struct gpu_gemm *g, float *const *dlora_b, const uint16_t *const *dy, int64_t ld_dy,
                  const uint16_t *u, int n, int N, const int *C_out, int R, float scale, void *workspace,
                  cudaStream_t stream) {
    if (!dlora_b) return;
    int64_t c_all = 0;
    bool all = n > 1 && ld_dy > 0 && workspace != nullptr;
    for (int i = 0; i < n; i++) {
        all = all && dlora_b[i] && (i == 0 || dy[i] == dy[i - 1] + C_out[i - 1]);
        c_all += C_out[i];
    }
    if (all && ld_dy == c_all) {
        float *P = static_cast<float *>(workspace);
        /* group_db's product over every member at once: C_out Σ C_out, R n·R, written over P */
        gemm_args p = group_db(P, dy[0], u, 1, N, (int)c_all, n * R, scale, ld_dy);
        p.beta = GEMM_OVERWRITE;
        gpu_gemm(g, &p, stream);
        db_blocks b;
        b.row0[0] = 0;
        for (int i = 0; i < n; i++) b.db[i] = dlora_b[i], b.row0[i + 1] = b.row0[i] + C_out[i];
        const int64_t e = c_all * R;
        lora_db_add_blocks<<<(unsigned)((e + kBlock - 1) / kBlock), kBlock, 0, stream>>>(b, P, n, R);
        KERNEL_CHECK(stream);
        return;
    }
    for (int i = 0; i < n; i++) {
        if (dlora_b[i]) {
            const gemm_args p = group_db(dlora_b[i], dy[i], u + (size_t)i * R, n, N, C_out[i], R, scale, ld_dy);
            gpu_gemm(g, &p, stream);
        }
    }
}

}  // namespace

extern "C" void gpu_lora_group_fold_grads_strided_bf16(struct gpu_gemm *g, const uint16_t *dx_f, int64_t ldd,
                                                       float *dlora_a, float *const *dlora_b,
                                                       const uint16_t *const *dy, int64_t ld_dy, const uint16_t *x,
                                                       int64_t ldx, const uint16_t *u, int n, int N, int C_in,
                                                       const int *C_out, int R, float scale, void *workspace,
                                                       cudaStream_t stream) {
    check_group(n, N, C_in, C_out, R);
    check_ld_dy(ld_dy, n, C_out);
    CHECK(ldd >= C_in + n * R && ldx >= C_in,
          "lora fold backward: row strides %lld (dx_f) and %lld (x) for C_in %d + n·R %d", (long long)ldd,
          (long long)ldx, C_in, n * R);
    group_db_all(g, dlora_b, dy, ld_dy, u, n, N, C_out, R, scale, workspace, stream);
    if (dlora_a) { /* du: the base products' by-product, after dx_f's C_in columns */
        const gemm_args p = group_da(dlora_a, dx_f + C_in, x, n, N, C_in, R, ldx, ldd);
        gpu_gemm(g, &p, stream);
    }
}

extern "C" void gpu_lora_group_fold_backward_strided_bf16(struct gpu_gemm *g, uint16_t *dx_f, int64_t ldd,
                                                          float *dlora_a, float *const *dlora_b,
                                                          const uint16_t *const *dy, int64_t ld_dy, const uint16_t *x,
                                                          int64_t ldx, const uint16_t *u, const uint16_t *lora_a, int n,
                                                          int N, int C_in, const int *C_out, int R, float scale,
                                                          void *workspace, cudaStream_t stream) {
    gpu_lora_group_fold_grads_strided_bf16(g, dx_f, ldd, dlora_a, dlora_b, dy, ld_dy, x, ldx, u, n, N, C_in, C_out, R,
                                           scale, workspace, stream);
    const int K = n * R;
    const uint16_t *du = dx_f + C_in; /* the base products' by-product */
    if (refine::adapter_mma_fits(C_in, K, ldd, du, lora_a, dx_f, refine::ADAPTER_B_COLS, ldd)) {
        /* the adapter pass: dx and du are one row's disjoint columns, du only read */
        bf16 *o = reinterpret_cast<bf16 *>(dx_f);
        refine::adapter_mma_launch<refine::ADAPTER_B_COLS>(o, reinterpret_cast<const bf16 *>(du), ldd,
                                                           reinterpret_cast<const bf16 *>(lora_a), C_in, 1.0f, N, C_in,
                                                           K, lora_mma_epi{{}, o}, stream, ldd);
        KERNEL_CHECK(stream);
        return;
    }
    /* gemm with beta = 1: du first copied out of dx_f's rows (an operand must not share the output's
     * address range, gpu/gemm.h) */
    CHECK(workspace != nullptr && (uintptr_t)workspace % kAlign == 0,
          "lora fold backward: workspace of %zu bytes, 256-byte aligned, required",
          gpu_lora_group_backward_workspace_size(N, n, R, ld_dy));
    uint16_t *du_c = static_cast<uint16_t *>(workspace);
    const int64_t threads = (int64_t)N * K;
    lora_copy_cols<1><<<(unsigned)((threads + kBlock - 1) / kBlock), kBlock, 0, stream>>>(du_c, K, du, ldd, N, K);
    KERNEL_CHECK(stream);
    gemm_args p = group_dx(dx_f, GEMM_OUT_BF16, GEMM_ACCUMULATE, du_c, lora_a, n, N, C_in, R);
    p.ldd = ldd;
    gpu_gemm(g, &p, stream);
}

extern "C" void gpu_lora_fold_b_bf16(const struct lora_fold_slot *slots, int n_slots, int max_c_out, int R,
                                     float scale, cudaStream_t stream) {
    if (n_slots <= 0) return;
    CHECK(max_c_out >= 1 && R >= 1 && n_slots <= 65535, "lora fold: %d slots, C_out %d, R %d", n_slots, max_c_out, R);
    const int64_t e = (int64_t)max_c_out * R;
    lora_fold_b<<<dim3((unsigned)((e + kBlock - 1) / kBlock), (unsigned)n_slots), kBlock, 0, stream>>>(slots, R, scale);
    KERNEL_CHECK(stream);
}

extern "C" size_t gpu_lora_group_backward_workspace_size(int N, int n, int R, int64_t c_all) {
    const size_t du = align_up((size_t)N * n * R * sizeof(uint16_t));
    const size_t p = align_up((size_t)c_all * n * R * sizeof(float));
    return du > p ? du : p;
}

extern "C" void gpu_lora_group_backward_bf16(struct gpu_gemm *g, uint16_t *dx, float *dlora_a, float *const *dlora_b,
                                             const uint16_t *const *dy, const uint16_t *x, const uint16_t *u,
                                             const uint16_t *lora_a, const uint16_t *const *lora_b, int n, int N,
                                             int C_in, const int *C_out, int R, float scale, void *workspace,
                                             cudaStream_t stream) {
    gpu_lora_group_backward_ld_bf16(g, dx, dlora_a, dlora_b, dy, x, C_in, u, lora_a, lora_b, n, N, C_in, C_out, R,
                                    scale, workspace, stream);
}

extern "C" void gpu_lora_group_backward_ld_bf16(struct gpu_gemm *g, uint16_t *dx, float *dlora_a,
                                                float *const *dlora_b, const uint16_t *const *dy, const uint16_t *x,
                                                int64_t ldx, const uint16_t *u, const uint16_t *lora_a,
                                                const uint16_t *const *lora_b, int n, int N, int C_in,
                                                const int *C_out, int R, float scale, void *workspace,
                                                cudaStream_t stream) {
    gpu_lora_group_backward_strided_bf16(g, dx, dlora_a, dlora_b, dy, 0, x, ldx, u, lora_a, lora_b, n, N, C_in, C_out,
                                         R, scale, workspace, stream);
}

extern "C" void gpu_lora_group_backward_strided_bf16(struct gpu_gemm *g, uint16_t *dx, float *dlora_a,
                                                     float *const *dlora_b, const uint16_t *const *dy, int64_t ld_dy,
                                                     const uint16_t *x, int64_t ldx, const uint16_t *u,
                                                     const uint16_t *lora_a, const uint16_t *const *lora_b, int n,
                                                     int N, int C_in, const int *C_out, int R, float scale,
                                                     void *workspace, cudaStream_t stream) {
    check_group(n, N, C_in, C_out, R);
    check_ld_dy(ld_dy, n, C_out);
    CHECK(ldx >= C_in, "lora group backward: x's row stride %lld is below C_in=%d", (long long)ldx, C_in);
    CHECK(workspace != nullptr && (uintptr_t)workspace % kAlign == 0,
          "lora group backward: workspace of %zu bytes, 256-byte aligned, required",
          gpu_lora_group_backward_workspace_size(N, n, R, ld_dy));
    uint16_t *du = static_cast<uint16_t *>(workspace);
    group_db_all(g, dlora_b, dy, ld_dy, u, n, N, C_out, R, scale, workspace, stream); /* before du is written */
    if (!dlora_a && !dx) return;
    for (int i = 0; i < n; i++) {
        const gemm_args p = group_du(du + (size_t)i * R, dy[i], lora_b[i], n, N, C_out[i], R, scale, ld_dy);
        gpu_gemm(g, &p, stream);
    }
    if (dlora_a) {
        const gemm_args p = group_da(dlora_a, du, x, n, N, C_in, R, ldx);
        gpu_gemm(g, &p, stream);
    }
    if (dx) {
        const gemm_args p = group_dx(dx, GEMM_OUT_BF16, GEMM_ACCUMULATE, du, lora_a, n, N, C_in, R);
        add_product<refine::ADAPTER_B_COLS>(g, p, dx, du, n * R, lora_a, C_in, N, C_in, n * R, 1.0f, stream);
    }
}

extern "C" void gpu_lora_group_reserve(struct gpu_gemm *g, int n, int N, int C_in, const int *C_out, int R) {
    check_group(n, N, C_in, C_out, R);
    /* Dummy pointers of the alignment classes the real ones have: 256-byte aligned bases, member
     * slices at i·R elements into u and du. */
    unsigned char *d = reinterpret_cast<unsigned char *>((uintptr_t)kAlign);
    uint16_t *h = reinterpret_cast<uint16_t *>(d);
    float *f = reinterpret_cast<float *>(d);
    const gemm_args shared[3] = {group_u(h, h, h, n, N, C_in, R), group_da(f, h, h, n, N, C_in, R),
                                 group_dx(h, GEMM_OUT_BF16, GEMM_ACCUMULATE, h, h, n, N, C_in, R)};
    for (const gemm_args &a : shared) gpu_gemm_reserve(g, &a);
    for (int i = 0; i < n; i++) {
        const gemm_args q[3] = {group_y(h, h + (size_t)i * R, h, n, N, C_out[i], R, 1.0f),
                                group_db(f, h, h + (size_t)i * R, n, N, C_out[i], R, 1.0f),
                                group_du(h + (size_t)i * R, h, h, n, N, C_out[i], R, 1.0f)};
        for (const gemm_args &a : q) gpu_gemm_reserve(g, &a);
    }
}
