/* decode_attention.cu — attention of query rows against the KV cache (gpu/decode_attention.h).
 *
 * Why: decoding is memory-bound on the cache. One CTA per (row, query head) read every kv head's
 * rows H/KVH times (GQA 4 on Llama-3.2-1B/8B: 4 reads, most from L2, 891–896 GB/s on an H100 at
 * B 32 T 1024), and one CTA had to hold a row's T_max scores. Here a CTA reads a kv head's rows
 * once for all the query heads of its group, and a long cache is cut into splits of kSplit
 * positions handled by separate CTAs (flash-decoding), combined in a fixed order.
 *
 * Split kernel: grid N·KVH·splits·tiles CTAs of 128 threads; CTA (n, g, split, tile) takes the
 * positions j0 = split·kSplit .. min(j0 + kSplit, pos[n] + 1) − 1 and the HT query heads of the
 * tile (HT = the group size rounded up to a power of two, at most 8; a larger group takes several
 * tiles, whose CTAs are adjacent in the grid and share the rows through L2). A key row of D bf16
 * is read by D/8 lanes, 16 bytes each (RPS = 128/(D/8) rows per step, U = 4 steps of loads in
 * flight); each lane holds its 8 dims of the HT query rows in registers, forms 8-term partial dots
 * (fma chain in dim order) and the D/8 lanes add them by an xor butterfly (all lanes get the same
 * bits); s = scale·dot goes to shared memory. Then one warp per head: m = the split's max,
 * e_j = expf(s_j − m) in place, l = Σ e_j (per lane in position order, then a butterfly). Then the
 * value rows with the same lane mapping: acc[h][8 dims] += e_j·v_j (fma, position order per
 * lane), added across the row groups of a warp by a butterfly and across the 4 warps in warp order
 * through shared memory. A row with one split stores out = bf16(acc / l); otherwise the split
 * stores (m, l, acc) to the workspace and the combine kernel forms, per (row, head, dim), in split
 * order: M = max m_s, a_s = expf(m_s − M), L = Σ a_s·l_s, O = Σ a_s·acc_s (fma), out = bf16(O / L).
 * Registers (ptxas, sm_90a): 63–118 a thread, no spills (HT 4 bounded to 5 CTAs an SM: 80).
 * Every sum has an order fixed by the shapes: the same bits on every run; no atomics. The split
 * length is a constant, so a row's result does not depend on the other rows of the call.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:decode_attention_parity
 *                     (binary) decode_attention_parity --bench
 */
#include "gpu/decode_attention.h"

#include "gpu/cuda_check.h"
#include "gpu/vec.cuh"
#include "io/check.h"

namespace refine {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kSplit = GPU_DECODE_ATTENTION_SPLIT;
constexpr int kMaxPositions = 1 << 20;

int splits_of(int T_max) { return (T_max + kSplit - 1) / kSplit; }

template <int D, int HT>
__global__ void __launch_bounds__(kThreads, HT == 4 ? 5 : 1) decode_attention_split(
    bf16 *__restrict__ out, float *__restrict__ part_acc, float *__restrict__ part_ml, const bf16 *__restrict__ q,
    int ld_q, const bf16 *__restrict__ kc, const bf16 *__restrict__ vc, const int32_t *__restrict__ seq,
    const int32_t *__restrict__ pos, int H, int KVH, int T_max, int n_splits, int tiles, float scale) {
    constexpr int LPR = D / 8;            /* lanes per cache row */
    constexpr int RPS = kThreads / LPR;   /* rows per step of the CTA */
    constexpr int STEPS = kSplit / RPS;   /* steps to cover a full split */
    constexpr int U = STEPS < 4 ? STEPS : 4;
    static_assert(kSplit % RPS == 0 && STEPS % U == 0, "split length and row mapping");
    /* scores (HT × kSplit), later reused for the warps' partial outputs (kWarps × HT × D) */
    constexpr int kScoreFloats = HT * kSplit, kRedFloats = kWarps * HT * D;
    __shared__ __align__(16) float sm[kScoreFloats > kRedFloats ? kScoreFloats : kRedFloats];
    __shared__ float s_m[HT], s_l[HT];

    int b = blockIdx.x;
    const int tile = b % tiles;
    b /= tiles;
    const int sp = b % n_splits;
    b /= n_splits;
    const int g = b % KVH, n = b / KVH;
    const int total = pos[n] + 1;
    const int j0 = sp * kSplit;
    if (j0 >= total) return; /* the whole CTA: this row's cache is shorter */
    const int len = min(kSplit, total - j0);
    const int row_splits = (total + kSplit - 1) / kSplit;
    const int G = H / KVH, h0 = g * G + tile * HT, hn = min(HT, G - tile * HT);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r = threadIdx.x / LPR, dl = (threadIdx.x % LPR) * 8;

    float qr[HT][8];
#pragma unroll
    for (int hh = 0; hh < HT; hh++) {
        if (hh < hn) {
            load_bf16<8>(qr[hh], q + (int64_t)n * ld_q + (int64_t)(h0 + hh) * D + dl);
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) qr[hh][i] = 0.0f;
        }
    }
    const int64_t row_stride = (int64_t)KVH * D;
    const int64_t off = ((int64_t)seq[n] * T_max + j0) * row_stride + (int64_t)g * D + dl;
    const bf16 *kb = kc + off, *vb = vc + off;

    /* scores */
    for (int t0 = 0; t0 < STEPS && t0 * RPS < len; t0 += U) {
        float kv[U][8];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = (t0 + u) * RPS + r;
            if (j < len) {
                load_bf16<8>(kv[u], kb + j * row_stride);
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) kv[u][i] = 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float dot[HT];
#pragma unroll
            for (int hh = 0; hh < HT; hh++) {
                dot[hh] = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++) dot[hh] = __fmaf_rn(qr[hh][i], kv[u][i], dot[hh]);
            }
#pragma unroll
            for (int o = 1; o < LPR; o <<= 1)
#pragma unroll
                for (int hh = 0; hh < HT; hh++) dot[hh] = __fadd_rn(dot[hh], __shfl_xor_sync(0xffffffffu, dot[hh], o));
            const int j = (t0 + u) * RPS + r;
            if (j < len && dl == 0)
#pragma unroll
                for (int hh = 0; hh < HT; hh++) sm[hh * kSplit + j] = __fmul_rn(scale, dot[hh]);
        }
    }
    __syncthreads();

    /* the split's softmax numerators, one warp per head */
    for (int hh = warp; hh < hn; hh += kWarps) {
        float *s = sm + hh * kSplit;
        float m = -INFINITY;
        for (int j = lane; j < len; j += 32) m = fmaxf(m, s[j]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float l = 0.0f;
        for (int j = lane; j < len; j += 32) {
            const float e = expf(s[j] - m);
            s[j] = e;
            l = __fadd_rn(l, e);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, o));
        if (lane == 0) s_m[hh] = m, s_l[hh] = l;
    }
    __syncthreads();

    /* Σ e_j·v_j */
    float acc[HT][8];
#pragma unroll
    for (int hh = 0; hh < HT; hh++)
#pragma unroll
        for (int i = 0; i < 8; i++) acc[hh][i] = 0.0f;
    for (int t0 = 0; t0 < STEPS && t0 * RPS < len; t0 += U) {
        float vv[U][8];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = (t0 + u) * RPS + r;
            if (j < len) {
                load_bf16<8>(vv[u], vb + j * row_stride);
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) vv[u][i] = 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = (t0 + u) * RPS + r;
            if (j < len) {
#pragma unroll
                for (int hh = 0; hh < HT; hh++) {
                    const float e = sm[hh * kSplit + j]; /* padded heads: finite, never stored */
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[hh][i] = __fmaf_rn(e, vv[u][i], acc[hh][i]);
                }
            }
        }
    }
    /* across the row groups of the warp (lane bits above the LPR lanes of a row) */
#pragma unroll
    for (int o = LPR; o < 32; o <<= 1)
#pragma unroll
        for (int hh = 0; hh < HT; hh++)
#pragma unroll
            for (int i = 0; i < 8; i++) acc[hh][i] = __fadd_rn(acc[hh][i], __shfl_xor_sync(0xffffffffu, acc[hh][i], o));
    __syncthreads(); /* every read of the scores is done: the buffer takes the warps' sums */
    if (lane < LPR)
#pragma unroll
        for (int hh = 0; hh < HT; hh++)
#pragma unroll
            for (int i = 0; i < 8; i++) sm[(warp * HT + hh) * D + dl + i] = acc[hh][i];
    __syncthreads();
    for (int idx = threadIdx.x; idx < hn * D; idx += kThreads) {
        const int hh = idx / D, d = idx % D;
        float t = sm[hh * D + d];
#pragma unroll
        for (int w = 1; w < kWarps; w++) t = __fadd_rn(t, sm[(w * HT + hh) * D + d]);
        const int64_t nh = (int64_t)n * H + h0 + hh;
        if (row_splits == 1) {
            out[nh * D + d] = __float2bfloat16_rn(__fdiv_rn(t, s_l[hh]));
        } else {
            part_acc[(nh * n_splits + sp) * D + d] = t;
            if (d == 0) {
                part_ml[(nh * n_splits + sp) * 2] = s_m[hh];
                part_ml[(nh * n_splits + sp) * 2 + 1] = s_l[hh];
            }
        }
    }
}

/* One thread per (row, head, dim) of the rows with more than one split. */
__global__ void __launch_bounds__(kThreads) decode_attention_combine(
    bf16 *__restrict__ out, const float *__restrict__ part_acc, const float *__restrict__ part_ml,
    const int32_t *__restrict__ pos, int N, int H, int D, int n_splits) {
    const int64_t idx = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (idx >= (int64_t)N * H * D) return;
    const int64_t nh = idx / D;
    const int d = (int)(idx % D), n = (int)(nh / H);
    const int ns = (pos[n] + kSplit) / kSplit; /* splits of pos[n] + 1 positions */
    if (ns == 1) return;                       /* stored by its split */
    const float *ml = part_ml + nh * n_splits * 2;
    const float *a = part_acc + nh * n_splits * D + d;
    float M = ml[0];
    for (int s = 1; s < ns; s++) M = fmaxf(M, ml[2 * s]);
    float L = 0.0f, O = 0.0f;
    for (int s = 0; s < ns; s++) {
        const float w = expf(ml[2 * s] - M);
        L = __fmaf_rn(w, ml[2 * s + 1], L);
        O = __fmaf_rn(w, a[(int64_t)s * D], O);
    }
    out[idx] = __float2bfloat16_rn(__fdiv_rn(O, L));
}

template <int D, int HT>
void launch(uint16_t *out, const uint16_t *q, int ld_q, const uint16_t *kc, const uint16_t *vc, const int32_t *seq,
            const int32_t *pos, int N, int H, int KVH, int T_max, float scale, void *workspace, cudaStream_t stream) {
    const int n_splits = splits_of(T_max), G = H / KVH, tiles = (G + HT - 1) / HT;
    const int64_t ctas = (int64_t)N * KVH * n_splits * tiles;
    CHECK(ctas <= 0x7fffffff, "decode attention: %lld CTAs", (long long)ctas);
    float *part_acc = nullptr, *part_ml = nullptr;
    if (n_splits > 1) {
        CHECK(workspace != nullptr, "decode attention: T_max=%d needs the workspace", T_max);
        part_acc = static_cast<float *>(workspace);
        part_ml = part_acc + (size_t)N * H * n_splits * D;
    }
    decode_attention_split<D, HT><<<(unsigned)ctas, kThreads, 0, stream>>>(
        reinterpret_cast<bf16 *>(out), part_acc, part_ml, reinterpret_cast<const bf16 *>(q), ld_q,
        reinterpret_cast<const bf16 *>(kc), reinterpret_cast<const bf16 *>(vc), seq, pos, H, KVH, T_max, n_splits,
        tiles, scale);
    KERNEL_CHECK(stream);
    if (n_splits > 1) {
        const int64_t items = (int64_t)N * H * D;
        decode_attention_combine<<<(unsigned)((items + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
            reinterpret_cast<bf16 *>(out), part_acc, part_ml, pos, N, H, D, n_splits);
        KERNEL_CHECK(stream);
    }
}

template <int D>
void launch_d(uint16_t *out, const uint16_t *q, int ld_q, const uint16_t *kc, const uint16_t *vc, const int32_t *seq,
              const int32_t *pos, int N, int H, int KVH, int T_max, float scale, void *ws, cudaStream_t stream) {
    switch (gpu_decode_attention_heads_per_cta(H, KVH)) {
    case 1: launch<D, 1>(out, q, ld_q, kc, vc, seq, pos, N, H, KVH, T_max, scale, ws, stream); break;
    case 2: launch<D, 2>(out, q, ld_q, kc, vc, seq, pos, N, H, KVH, T_max, scale, ws, stream); break;
    case 4: launch<D, 4>(out, q, ld_q, kc, vc, seq, pos, N, H, KVH, T_max, scale, ws, stream); break;
    default: launch<D, 8>(out, q, ld_q, kc, vc, seq, pos, N, H, KVH, T_max, scale, ws, stream); break;
    }
}

}  // namespace
}  // namespace refine

extern "C" int gpu_decode_attention_max_positions(void) { return refine::kMaxPositions; }

extern "C" int gpu_decode_attention_heads_per_cta(int H, int KVH) {
    const int G = H / KVH;
    return G >= 5 ? 8 : G >= 3 ? 4 : G; /* 1, 2, 4, 8: the group rounded up, at most 8 */
}

extern "C" size_t gpu_decode_attention_workspace_size(int N, int H, int D, int T_max) {
    const int n_splits = refine::splits_of(T_max);
    return n_splits > 1 ? (size_t)N * H * n_splits * ((size_t)D + 2) * sizeof(float) : 0;
}

extern "C" void gpu_decode_attention_bf16(uint16_t *out, const uint16_t *q, int ld_q, const uint16_t *k_cache,
                                          const uint16_t *v_cache, const int32_t *seq, const int32_t *pos, int N, int H,
                                          int KVH, int D, int S, int T_max, float scale, void *workspace,
                                          cudaStream_t stream) {
    CHECK(N >= 1 && H >= 1 && KVH >= 1 && H % KVH == 0 && S >= 1 && T_max >= 1, "decode attention N=%d H=%d KVH=%d "
          "S=%d T_max=%d", N, H, KVH, S, T_max);
    CHECK(ld_q >= H * D && ld_q % 8 == 0 && ((uintptr_t)q & 15u) == 0 && ((uintptr_t)k_cache & 15u) == 0 &&
              ((uintptr_t)v_cache & 15u) == 0 && ((uintptr_t)workspace & 15u) == 0,
          "decode attention: ld_q=%d and 16-byte aligned q, caches, workspace needed", ld_q);
    CHECK(T_max <= refine::kMaxPositions, "decode attention: T_max=%d above %d", T_max, refine::kMaxPositions);
    switch (D) {
    case 16: refine::launch_d<16>(out, q, ld_q, k_cache, v_cache, seq, pos, N, H, KVH, T_max, scale, workspace, stream); break;
    case 32: refine::launch_d<32>(out, q, ld_q, k_cache, v_cache, seq, pos, N, H, KVH, T_max, scale, workspace, stream); break;
    case 64: refine::launch_d<64>(out, q, ld_q, k_cache, v_cache, seq, pos, N, H, KVH, T_max, scale, workspace, stream); break;
    case 128: refine::launch_d<128>(out, q, ld_q, k_cache, v_cache, seq, pos, N, H, KVH, T_max, scale, workspace, stream); break;
    default: CHECK(0, "decode attention: D=%d (supported: 16, 32, 64, 128)", D);
    }
}
