/* dora.cu — DoRA's row norm, fused magnitude scaling and backward (gpu/dora.h).
 *
 * Strategy:
 *  - w_sq: one 256-thread block per row of W, double partial sums in a strided order, a fixed
 *    shared-memory tree. Run once per frozen W, so simplicity wins over speed.
 *  - row norm: W Aᵀ and A Aᵀ through gemm into the workspace (fp32), then one warp per row combines
 *    w_sq, the cross term and the quadratic form in double (lanes stride over r, a fixed xor-shuffle
 *    tree), so the result does not depend on the launch: deterministic.
 *  - forward: u and s·u Bᵀ through gemm (the latter fp32, alpha = s), then ONE elementwise pass reads
 *    the base output y and s·l, writes the scaled y and the pre-magnitude z; 8 columns a thread with
 *    16-byte bf16 accesses when C_out % 8 == 0 and the pointers allow, else one.
 *  - backward: one pass over dy and z writes dy_s = bf16(mns⊙dy) and per-(32-row chunk, column) double
 *    partial sums of dy·z (threads own columns, loop over the chunk's rows: coalesced, no atomics);
 *    a second tiny kernel adds the chunks in order per column and accumulates into dm. Then the base
 *    path dx = dy_s W and gpu/lora's backward with dy_s.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:dora_parity
 *                     (binary) dora_parity --bench
 */
#include "gpu/dora.h"

#include <string.h>

#include "gpu/cuda_check.h"
#include "gpu/lora.h"
#include "gpu/vec.cuh"
#include "io/check.h"

using refine::bf16;

namespace {

constexpr int kBlock = 256;
constexpr int kChunkRows = 32;   /* rows per dm partial sum */
constexpr int kColThreads = 64;  /* blockDim.x of the rescale pass */
constexpr int kChunkThreads = 4; /* blockDim.y of the rescale pass */
constexpr size_t kAlign = 256;

size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

__global__ void __launch_bounds__(kBlock) dora_weight_sq_block_per_row(float *w_sq, const bf16 *w, int C_in) {
    __shared__ double sh[kBlock];
    const bf16 *row = w + (int64_t)blockIdx.x * C_in;
    double s = 0.0;
    for (int i = threadIdx.x; i < C_in; i += kBlock) {
        const double v = (double)__bfloat162float(row[i]);
        s += v * v; /* exact: a bf16 square has 16 significant bits */
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = kBlock / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) w_sq[blockIdx.x] = (float)sh[0];
}

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
    return v;
}

/* One warp per row o: n² = w_sq + 2s·Σ_r WA[o,r]·B[o,r] + s²·Σ_r B[o,r]·Σ_q AA[r,q]·B[o,q]. */
__global__ void __launch_bounds__(kBlock) dora_norm_warp_per_row(float *wnorm, const float *w_sq, const float *wa,
                                                                 const float *aa, const bf16 *lora_b, int C_out, int R,
                                                                 double s) {
    const int o = blockIdx.x * (kBlock / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (o >= C_out) return; /* whole warps leave together: o is uniform within a warp */
    const bf16 *bo = lora_b + (int64_t)o * R;
    double cross = 0.0, quad = 0.0;
    for (int r = lane; r < R; r += 32) {
        const double br = (double)__bfloat162float(bo[r]);
        cross += (double)wa[(int64_t)o * R + r] * br;
        double t = 0.0;
        for (int q = 0; q < R; q++) t += (double)aa[(int64_t)r * R + q] * (double)__bfloat162float(bo[q]);
        quad += br * t;
    }
    cross = warp_sum_f64(cross);
    quad = warp_sum_f64(quad);
    if (lane == 0) {
        /* ref: (double)w_sq + 2.0·s·cross + s·s·quad, left to right, each op rounded (no contraction) */
        const double n2 = __dadd_rn(__dadd_rn((double)w_sq[o], __dmul_rn(__dmul_rn(2.0, s), cross)),
                                    __dmul_rn(__dmul_rn(s, s), quad));
        wnorm[o] = (float)sqrt(n2 > 0.0 ? n2 : 0.0); /* cancellation can leave a tiny negative */
    }
}

/* y = bf16(y + ((mns−1)·base + mns·sl)), z = bf16(base + sl), base = y − b. */
template <int VW>
__global__ void __launch_bounds__(kBlock) dora_forward_scale(bf16 *y, bf16 *z, const float *sl, const bf16 *bias,
                                                             const float *mag, const float *wnorm, int64_t n,
                                                             int C_out) {
    const int64_t i = ((int64_t)blockIdx.x * kBlock + threadIdx.x) * VW;
    if (i >= n) return;
    float yv[VW], bv[VW] = {}, out[VW], zv[VW];
    refine::load_bf16<VW>(yv, y + i);
    const int o0 = (int)(i % C_out); /* VW columns of one row: C_out % VW == 0 */
    if (bias) refine::load_bf16<VW>(bv, bias + o0);
#pragma unroll
    for (int j = 0; j < VW; j++) {
        const float base = bias ? __fsub_rn(yv[j], bv[j]) : yv[j];
        const float mns = __fdiv_rn(mag[o0 + j], wnorm[o0 + j]);
        const float s_l = sl[i + j];
        const float delta = __fadd_rn(__fmul_rn(__fsub_rn(mns, 1.0f), base), __fmul_rn(mns, s_l));
        out[j] = __fadd_rn(yv[j], delta);
        zv[j] = __fadd_rn(base, s_l);
    }
    refine::store_bf16<VW>(y + i, out);
    if (z) refine::store_bf16<VW>(z + i, zv);
}

/* dy_s = bf16(mns⊙dy); partial[chunk][o] = Σ_{n in chunk} dy·z (double, rows in order). */
template <int VW>
__global__ void dora_rescale_chunks(bf16 *dy_s, double *partial, const bf16 *dy, const bf16 *z, const float *mag,
                                    const float *wnorm, int N, int C_out) {
    const int o0 = (blockIdx.x * kColThreads + threadIdx.x) * VW;
    const int chunk = blockIdx.y * kChunkThreads + threadIdx.y;
    const int n0 = chunk * kChunkRows;
    if (o0 >= C_out || n0 >= N) return;
    const int n1 = n0 + kChunkRows < N ? n0 + kChunkRows : N;
    float mns[VW];
    double acc[VW];
#pragma unroll
    for (int j = 0; j < VW; j++) mns[j] = __fdiv_rn(mag[o0 + j], wnorm[o0 + j]), acc[j] = 0.0;
    for (int r = n0; r < n1; r++) {
        const int64_t e = (int64_t)r * C_out + o0;
        float g[VW], out[VW];
        refine::load_bf16<VW>(g, dy + e);
        if (partial) {
            float zv[VW];
            refine::load_bf16<VW>(zv, z + e);
#pragma unroll
            for (int j = 0; j < VW; j++) acc[j] += (double)g[j] * (double)zv[j]; /* exact product */
        }
#pragma unroll
        for (int j = 0; j < VW; j++) out[j] = __fmul_rn(mns[j], g[j]);
        refine::store_bf16<VW>(dy_s + e, out);
    }
    if (partial)
#pragma unroll
        for (int j = 0; j < VW; j++) partial[(int64_t)chunk * C_out + o0 + j] = acc[j];
}

__global__ void __launch_bounds__(kBlock) dora_dmag_finish(float *dmag, const double *partial, const float *wnorm,
                                                           int n_chunks, int C_out) {
    const int o = blockIdx.x * kBlock + threadIdx.x;
    if (o >= C_out) return;
    double s = 0.0;
    for (int c = 0; c < n_chunks; c++) s += partial[(int64_t)c * C_out + o];
    /* ref: dmag = (float)((double)dmag + s / (double)wnorm) */
    dmag[o] = (float)__dadd_rn((double)dmag[o], __ddiv_rn(s, (double)wnorm[o]));
}

void check_dims(int N, int C_in, int C_out, int R) {
    CHECK(N >= 1 && C_in >= 1 && C_out >= 1 && R >= 1, "dora: N=%d C_in=%d C_out=%d R=%d must be >= 1", N, C_in,
          C_out, R);
}

void check_ws(const void *ws, size_t need, const char *what) {
    CHECK(ws != nullptr && (uintptr_t)ws % kAlign == 0, "dora %s: workspace of %zu bytes, 256-byte aligned, required",
          what, need);
}

bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

}  // namespace

extern "C" void gpu_dora_weight_sq_f32(float *w_sq, const uint16_t *w, int C_in, int C_out, cudaStream_t stream) {
    check_dims(1, C_in, C_out, 1);
    dora_weight_sq_block_per_row<<<C_out, kBlock, 0, stream>>>(w_sq, reinterpret_cast<const bf16 *>(w), C_in);
    KERNEL_CHECK(stream);
}

extern "C" size_t gpu_dora_weight_norm_workspace_size(int C_out, int R) {
    return align_up((size_t)C_out * R * sizeof(float)) + align_up((size_t)R * R * sizeof(float));
}

extern "C" void gpu_dora_weight_norm_f32(struct gpu_gemm *g, float *wnorm, const float *w_sq, const uint16_t *w,
                                         const uint16_t *lora_a, const uint16_t *lora_b, int C_in, int C_out, int R,
                                         float scale, void *workspace, cudaStream_t stream) {
    check_dims(1, C_in, C_out, R);
    check_ws(workspace, gpu_dora_weight_norm_workspace_size(C_out, R), "weight norm");
    float *wa = static_cast<float *>(workspace);
    float *aa = reinterpret_cast<float *>(static_cast<unsigned char *>(workspace) +
                                          align_up((size_t)C_out * R * sizeof(float)));
    /* W Aᵀ (C_out, R) and A Aᵀ (R, R), fp32 */
    const gemm_args p_wa = {wa,      GEMM_OUT_F32, R,     0, w,     GEMM_NO_TRANS, C_in, 0, lora_a, GEMM_TRANS,
                            C_in,    0,            nullptr, C_out, R, C_in,        1,    1.0f, GEMM_OVERWRITE};
    const gemm_args p_aa = {aa,   GEMM_OUT_F32, R,       0, lora_a, GEMM_NO_TRANS, C_in, 0, lora_a, GEMM_TRANS,
                            C_in, 0,            nullptr, R, R,      C_in,          1,    1.0f, GEMM_OVERWRITE};
    gpu_gemm(g, &p_wa, stream);
    gpu_gemm(g, &p_aa, stream);
    const int rows_per_block = kBlock / 32;
    dora_norm_warp_per_row<<<(C_out + rows_per_block - 1) / rows_per_block, kBlock, 0, stream>>>(
        wnorm, w_sq, wa, aa, reinterpret_cast<const bf16 *>(lora_b), C_out, R, (double)scale);
    KERNEL_CHECK(stream);
}

extern "C" size_t gpu_dora_forward_workspace_size(int N, int C_out) {
    return align_up((size_t)N * C_out * sizeof(float));
}

extern "C" void gpu_dora_forward_bf16(struct gpu_gemm *g, uint16_t *y, uint16_t *z, uint16_t *u, const uint16_t *x,
                                      const uint16_t *bias, const uint16_t *lora_a, const uint16_t *lora_b,
                                      const float *mag, const float *wnorm, int N, int C_in, int C_out, int R,
                                      float scale, void *workspace, cudaStream_t stream) {
    check_dims(N, C_in, C_out, R);
    check_ws(workspace, gpu_dora_forward_workspace_size(N, C_out), "forward");
    float *sl = static_cast<float *>(workspace);
    /* u (N, R) = x Aᵀ;  sl (N, C_out) = s · u Bᵀ (fp32) */
    const gemm_args p_u = {u, GEMM_OUT_BF16, R, 0, x, GEMM_NO_TRANS, C_in, 0, lora_a, GEMM_TRANS, C_in, 0, nullptr,
                           N, R, C_in, 1, 1.0f, GEMM_OVERWRITE};
    const gemm_args p_l = {sl, GEMM_OUT_F32, C_out, 0, u, GEMM_NO_TRANS, R, 0, lora_b, GEMM_TRANS, R, 0, nullptr,
                           N, C_out, R, 1, scale, GEMM_OVERWRITE};
    gpu_gemm(g, &p_u, stream);
    gpu_gemm(g, &p_l, stream);
    const int64_t n = (int64_t)N * C_out;
    bf16 *yb = reinterpret_cast<bf16 *>(y), *zb = reinterpret_cast<bf16 *>(z);
    const bf16 *bb = reinterpret_cast<const bf16 *>(bias);
    if (C_out % 8 == 0 && aligned16(y) && aligned16(z) && aligned16(bias) && aligned16(sl)) {
        const int64_t threads = n / 8;
        dora_forward_scale<8><<<(unsigned)((threads + kBlock - 1) / kBlock), kBlock, 0, stream>>>(yb, zb, sl, bb, mag,
                                                                                                    wnorm, n, C_out);
    } else {
        dora_forward_scale<1><<<(unsigned)((n + kBlock - 1) / kBlock), kBlock, 0, stream>>>(yb, zb, sl, bb, mag, wnorm,
                                                                                               n, C_out);
    }
    KERNEL_CHECK(stream);
}

static int n_chunks_of(int N) { return (N + kChunkRows - 1) / kChunkRows; }

extern "C" size_t gpu_dora_rescale_workspace_size(int N, int C_out) {
    return align_up((size_t)n_chunks_of(N) * C_out * sizeof(double));
}

extern "C" void gpu_dora_rescale_bf16(uint16_t *dy_s, float *dmag, const uint16_t *dy, const uint16_t *z,
                                      const float *mag, const float *wnorm, int N, int C_out, void *workspace,
                                      cudaStream_t stream) {
    check_dims(N, 1, C_out, 1);
    CHECK(!dmag || z, "dora rescale: dmag needs the saved pre-magnitude output z");
    if (dmag) check_ws(workspace, gpu_dora_rescale_workspace_size(N, C_out), "rescale");
    double *partial = dmag ? static_cast<double *>(workspace) : nullptr;
    const int chunks = n_chunks_of(N);
    const bool vec = C_out % 8 == 0 && aligned16(dy_s) && aligned16(dy) && aligned16(z);
    const int VW = vec ? 8 : 1;
    const int cols_per_block = kColThreads * VW;
    dim3 grid((C_out + cols_per_block - 1) / cols_per_block, (chunks + kChunkThreads - 1) / kChunkThreads);
    dim3 block(kColThreads, kChunkThreads);
    bf16 *out = reinterpret_cast<bf16 *>(dy_s);
    const bf16 *dyb = reinterpret_cast<const bf16 *>(dy), *zb = reinterpret_cast<const bf16 *>(z);
    if (vec)
        dora_rescale_chunks<8><<<grid, block, 0, stream>>>(out, partial, dyb, zb, mag, wnorm, N, C_out);
    else
        dora_rescale_chunks<1><<<grid, block, 0, stream>>>(out, partial, dyb, zb, mag, wnorm, N, C_out);
    KERNEL_CHECK(stream);
    if (dmag) {
        dora_dmag_finish<<<(C_out + kBlock - 1) / kBlock, kBlock, 0, stream>>>(dmag, partial, wnorm, chunks, C_out);
        KERNEL_CHECK(stream);
    }
}

extern "C" size_t gpu_dora_backward_workspace_size(int N, int C_in, int C_out, int R) {
    return align_up((size_t)N * C_out * sizeof(uint16_t)) + gpu_dora_rescale_workspace_size(N, C_out) +
           gpu_lora_backward_workspace_size(N, C_in, R, LORA_NO_MASK);
}

extern "C" void gpu_dora_backward_bf16(struct gpu_gemm *g, uint16_t *dx, float *dmag, float *dlora_a,
                                       float *dlora_b, const uint16_t *dy, const uint16_t *x, const uint16_t *z,
                                       const uint16_t *u, const uint16_t *w, const uint16_t *lora_a,
                                       const uint16_t *lora_b, const float *mag, const float *wnorm, int N, int C_in,
                                       int C_out, int R, float scale, void *workspace, cudaStream_t stream) {
    check_dims(N, C_in, C_out, R);
    check_ws(workspace, gpu_dora_backward_workspace_size(N, C_in, C_out, R), "backward");
    unsigned char *ws = static_cast<unsigned char *>(workspace);
    uint16_t *dy_s = reinterpret_cast<uint16_t *>(ws);
    ws += align_up((size_t)N * C_out * sizeof(uint16_t));
    void *ws_rescale = ws;
    ws += gpu_dora_rescale_workspace_size(N, C_out);
    gpu_dora_rescale_bf16(dy_s, dmag, dy, z, mag, wnorm, N, C_out, ws_rescale, stream);
    if (dx) gpu_linear_backward_dx_bf16(g, dx, dy_s, w, N, C_in, C_out, GEMM_OVERWRITE, stream);
    if (dx || dlora_a || dlora_b)
        gpu_lora_backward_bf16(g, dx, dlora_a, dlora_b, dy_s, x, nullptr, 1.0f, u, lora_a, lora_b, N, C_in, C_out, R,
                               scale, ws, stream);
}

extern "C" void gpu_dora_reserve(struct gpu_gemm *g, int N, int C_in, int C_out, int R) {
    check_dims(N, C_in, C_out, R);
    void *d = reinterpret_cast<void *>((uintptr_t)kAlign);
    const uint16_t *h = static_cast<const uint16_t *>(d);
    /* the same argument lists as the calls above, with dummy aligned pointers */
    const gemm_args ps[] = {
        {d, GEMM_OUT_F32, R, 0, h, GEMM_NO_TRANS, C_in, 0, h, GEMM_TRANS, C_in, 0, nullptr, C_out, R, C_in, 1, 1.0f,
         GEMM_OVERWRITE}, /* W Aᵀ */
        {d, GEMM_OUT_F32, R, 0, h, GEMM_NO_TRANS, C_in, 0, h, GEMM_TRANS, C_in, 0, nullptr, R, R, C_in, 1, 1.0f,
         GEMM_OVERWRITE}, /* A Aᵀ */
        {d, GEMM_OUT_BF16, R, 0, h, GEMM_NO_TRANS, C_in, 0, h, GEMM_TRANS, C_in, 0, nullptr, N, R, C_in, 1, 1.0f,
         GEMM_OVERWRITE}, /* u */
        {d, GEMM_OUT_F32, C_out, 0, h, GEMM_NO_TRANS, R, 0, h, GEMM_TRANS, R, 0, nullptr, N, C_out, R, 1, 1.0f,
         GEMM_OVERWRITE}, /* s·u Bᵀ */
        {d, GEMM_OUT_BF16, C_in, 0, h, GEMM_NO_TRANS, C_out, 0, h, GEMM_NO_TRANS, C_in, 0, nullptr, N, C_in, C_out, 1,
         1.0f, GEMM_OVERWRITE}, /* the base path dx = dy_s W */
    };
    for (const gemm_args &p : ps) gpu_gemm_reserve(g, &p);
    gpu_lora_reserve(g, N, C_in, C_out, R, LORA_NO_MASK);
}
