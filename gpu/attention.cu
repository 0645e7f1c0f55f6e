/* attention.cu — see attention.h.
 *
 * Fragment layouts of mma.sync.m16n8k16: gpu/mma.cuh. A comes from a row-major shared tile
 * X[row][k]; B from an n-major shared tile Y[n][k] (both as 32-bit loads of two consecutive bf16) or
 * from a k-major tile X[k][n] through ldmatrix .trans (V in P·V, dO and Q in the dV/dK products, K
 * in dQ), so no tile is ever transposed in memory. Rows are padded by 8 bf16 so that the 32 lanes of a
 * fragment load hit 32 different banks. The C fragments of two adjacent 8-column tiles are
 * exactly the A fragment of a 16-column k-step, so P and dS feed the next MMA from registers.
 *
 * These are the sm_80 kernels and the fallback for what the Hopper kernels (attention_sm90_*.cu) do
 * not take (D = 16 or 32, devices other than compute capability 9.x, binaries without sm_90a code);
 * the entry points at the end choose (attention_internal.h).
 */
#include "gpu/attention.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/attention_internal.h"
#include "gpu/attention_sm90_layout.h"
#include "gpu/attention_switch.h"
#include "gpu/cuda_check.h"
#include "gpu/mma.cuh"
#include "gpu/rope.h"
#include "gpu/vec.cuh"
#include "io/check.h"

namespace {

using refine::bf16;

constexpr int kRows = 64;    /* query rows (forward, dQ) or key rows (dK/dV) per CTA */
constexpr int kCols = 64;    /* keys (forward, dQ) or queries (dK/dV) per inner tile */
constexpr int kWarps = 4;    /* 16 rows each */
constexpr int kThreads = 32 * kWarps;

using refine::mma16816;

/* Four 8×8 bf16 matrices from shared memory, transposed (ldmatrix .trans): lane l gives the row
 * address of matrix l / 8. Used for B operands stored k-major (rows = k, columns = n): for
 * rows k0..k0+15 and columns n0..n0+15 of such a tile, r0/r1 are b0/b1 of the n-tile n0 and
 * r2/r3 those of n-tile n0 + 8. */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3,
                                                  const bf16 *p) {
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}

/* B fragments of two adjacent n-tiles (n0, n0 + 8) for k-step k0 from a k-major tile X[k][n] with
 * leading dimension ld. */
__device__ __forceinline__ void load_b_kmajor(uint32_t (&b)[4], const bf16 *X, int ld, int k0, int n0, int lane) {
    ldmatrix_x4_trans(b[0], b[1], b[2], b[3], X + (k0 + (lane & 15)) * ld + n0 + (lane >> 4) * 8);
}

__device__ __forceinline__ uint32_t ld32(const bf16 *p) { return *reinterpret_cast<const uint32_t *>(p); }

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* The A fragment of k-step kk of a 16 × kCols operand held as the C fragments of its kCols/8
 * column tiles (tiles 2kk and 2kk+1 form k-step kk), rounded to bf16. */
__device__ __forceinline__ void a_from_c(uint32_t (&a)[4], const float (&c)[kCols / 8][4], int kk) {
    a[0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
    a[1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
    a[2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/* acc (16 × D, D/8 C fragments) += A (k-step kk) · X[kk·16 .. kk·16+16)[0 .. D) for a k-major
 * shared tile X with leading dimension D + 8. */
template <int D>
__device__ __forceinline__ void mma_kmajor(float (&acc)[D / 8][4], const uint32_t (&a)[4], const bf16 *X, int kk,
                                           int lane) {
#pragma unroll
    for (int dn = 0; dn < D / 8; dn += 2) {
        uint32_t b[4];
        load_b_kmajor(b, X, D + 8, kk * 16, dn * 8, lane);
        mma16816(acc[dn], a[0], a[1], a[2], a[3], b[0], b[1]);
        mma16816(acc[dn + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
    }
}

/* acc (16×8) += X[r0.., k0..k0+K) · Y[n0.., k0..)ᵀ over K = 16·ksteps. */
template <int KSTEPS>
__device__ __forceinline__ void mma_tile(float (&acc)[4], const bf16 *X, int ldx, int r0, const bf16 *Y, int ldy,
                                         int n0, int g, int t) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ks++) {
        const int k0 = ks * 16 + 2 * t;
        const uint32_t a0 = ld32(X + (r0 + g) * ldx + k0), a1 = ld32(X + (r0 + g + 8) * ldx + k0);
        const uint32_t a2 = ld32(X + (r0 + g) * ldx + k0 + 8), a3 = ld32(X + (r0 + g + 8) * ldx + k0 + 8);
        const uint32_t b0 = ld32(Y + (n0 + g) * ldy + k0), b1 = ld32(Y + (n0 + g) * ldy + k0 + 8);
        mma16816(acc, a0, a1, a2, a3, b0, b1);
    }
}

/* Copies rows [row0, row0 + kRows) of a (T, stride) bf16 matrix (columns [0, D)) into a shared
 * tile dst[r][d] with leading dimension D + 8; rows ≥ T become zeros. Tiles are read as A
 * operands and n-major B operands by 32-bit loads, and as k-major B operands by ldmatrix .trans. */
template <int D>
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *src, int64_t stride, int row0, int T) {
    constexpr int chunks_per_row = D / 8;
    for (int c = threadIdx.x; c < kRows * chunks_per_row; c += kThreads) {
        const int r = c / chunks_per_row, d = (c % chunks_per_row) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (row0 + r < T) v = *reinterpret_cast<const uint4 *>(src + (int64_t)(row0 + r) * stride + d);
        *reinterpret_cast<uint4 *>(dst + r * (D + 8) + d) = v;
    }
}

/* ---- forward ----------------------------------------------------------------------------- */

template <int D>
__global__ void __launch_bounds__(kThreads) attn_forward(bf16 *__restrict__ out, float *__restrict__ lse,
                                                          const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                                                          const bf16 *__restrict__ v, int T, int H, int KVH,
                                                          float scale, int64_t ld_o) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem_raw);     /* [64][D+8] */
    bf16 *Ks = Qs + kRows * (D + 8);                    /* [64][D+8] */
    bf16 *Vs = Ks + kCols * (D + 8);                    /* [64][D+8] */
    const int q0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z, kvh = h / (H / KVH);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int64_t qs = (int64_t)H * D, kvs = (int64_t)KVH * D;
    const bf16 *qb = q + ((int64_t)b * T * H + h) * D, *kb = k + ((int64_t)b * T * KVH + kvh) * D,
               *vb = v + ((int64_t)b * T * KVH + kvh) * D;
    load_tile<D>(Qs, qb, qs, q0, T);

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int r0 = warp * 16;
    const int row[2] = {q0 + r0 + g, q0 + r0 + g + 8};
    const int last_key = min(q0 + kRows - 1, T - 1);

    for (int k0 = 0; k0 <= last_key; k0 += kCols) {
        __syncthreads(); /* previous tile consumed */
        load_tile<D>(Ks, kb, kvs, k0, T);
        load_tile<D>(Vs, vb, kvs, k0, T);
        __syncthreads();
        float s[kCols / 8][4];
#pragma unroll
        for (int nt = 0; nt < kCols / 8; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            mma_tile<D / 16>(s[nt], Qs, D + 8, r0, Ks, D + 8, nt * 8, g, t);
        }
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < kCols / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + nt * 8 + 2 * t + (e & 1), r = e >> 1;
                float x = s[nt][e] * scale;
                if (key > row[r] || key >= T) x = -INFINITY;
                s[nt][e] = x;
                mx[r] = fmaxf(mx[r], x);
            }
        float corr[2], ps[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float mn = fmaxf(m[r], mx[r]);
            corr[r] = m[r] == -INFINITY ? 0.0f : __expf(m[r] - mn);
            m[r] = mn;
        }
#pragma unroll
        for (int nt = 0; nt < kCols / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                const float p = s[nt][e] == -INFINITY ? 0.0f : __expf(s[nt][e] - m[r]);
                s[nt][e] = p;
                ps[r] += p;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            ps[r] += __shfl_xor_sync(0xffffffffu, ps[r], 1);
            ps[r] += __shfl_xor_sync(0xffffffffu, ps[r], 2);
            l[r] = l[r] * corr[r] + ps[r];
        }
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            o[i][0] *= corr[0], o[i][1] *= corr[0], o[i][2] *= corr[1], o[i][3] *= corr[1];
        }
#pragma unroll
        for (int kk = 0; kk < kCols / 16; kk++) {
            uint32_t a[4];
            a_from_c(a, s, kk);
            mma_kmajor<D>(o, a, Vs, kk, lane); /* O += P V */
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (row[r] >= T) continue;
        const float inv = 1.0f / l[r];
        bf16 *dst = out + ((int64_t)b * T + row[r]) * ld_o + (int64_t)h * D;
#pragma unroll
        for (int dn = 0; dn < D / 8; dn++) {
            const uint32_t w = pack_bf16(o[dn][2 * r] * inv, o[dn][2 * r + 1] * inv);
            *reinterpret_cast<uint32_t *>(dst + dn * 8 + 2 * t) = w;
        }
        if (t == 0) lse[((int64_t)b * H + h) * T + row[r]] = m[r] + logf(l[r]);
    }
}

/* ---- backward ---------------------------------------------------------------------------- */

/* Δ[b,h,i] = Σ_d dout·out: one warp per (b, i, h) row (dout's and out's rows (b, i) at ld_o). */
__global__ void attn_delta(float *__restrict__ delta, const bf16 *__restrict__ dout, const bf16 *__restrict__ out,
                           int B, int T, int H, int D, int64_t ld_o) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (int64_t)B * T * H) return;
    const int64_t at = (row / H) * ld_o + (row % H) * D;
    const bf16 *a = dout + at, *c = out + at;
    float s = 0.0f;
    for (int d = lane * 2; d < D; d += 64) {
        const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(a + d));
        const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(c + d));
        s += x.x * y.x + x.y * y.y;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) {
        const int h = (int)(row % H), i = (int)((row / H) % T), b = (int)(row / ((int64_t)H * T));
        delta[((int64_t)b * H + h) * T + i] = s;
    }
}

/* dK, dV of 64 keys of (b, kv head): rows of the CTA are keys, inner tiles are queries. */
template <int D>
__global__ void __launch_bounds__(kThreads) attn_backward_dkdv(bf16 *__restrict__ dk, bf16 *__restrict__ dv,
                                                                const bf16 *__restrict__ dout,
                                                                const bf16 *__restrict__ q,
                                                                const bf16 *__restrict__ k,
                                                                const bf16 *__restrict__ v,
                                                                const float *__restrict__ lse,
                                                                const float *__restrict__ delta, int T, int H,
                                                                int KVH, float scale, int64_t ld_o, int64_t ld_kv) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *Ks = reinterpret_cast<bf16 *>(smem_raw); /* [64 keys][D+8] */
    bf16 *Vs = Ks + kRows * (D + 8);                /* [64 keys][D+8] */
    bf16 *Qs = Vs + kRows * (D + 8);                /* [64 q][D+8]    */
    bf16 *Gs = Qs + kCols * (D + 8);                /* dO [64 q][D+8] */
    float *Ls = reinterpret_cast<float *>(Gs + kCols * (D + 8)); /* lse [64] */
    float *Ds = Ls + kCols;                                /* Δ [64]   */
    const int kt0 = blockIdx.x * kRows, kvh = blockIdx.y, b = blockIdx.z, group = H / KVH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int64_t qs = (int64_t)H * D, kvs = (int64_t)KVH * D;
    const bf16 *kb = k + ((int64_t)b * T * KVH + kvh) * D, *vb = v + ((int64_t)b * T * KVH + kvh) * D;
    load_tile<D>(Ks, kb, kvs, kt0, T);
    load_tile<D>(Vs, vb, kvs, kt0, T);

    float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dka[i][e] = dva[i][e] = 0.0f;
    const int r0 = warp * 16;
    const int key[2] = {kt0 + r0 + g, kt0 + r0 + g + 8};

    for (int hh = 0; hh < group; hh++) {
        const int h = kvh * group + hh;
        const bf16 *qb = q + ((int64_t)b * T * H + h) * D, *gb = dout + (int64_t)b * T * ld_o + (int64_t)h * D;
        const float *lb = lse + ((int64_t)b * H + h) * T, *db = delta + ((int64_t)b * H + h) * T;
        for (int c0 = (kt0 / kCols) * kCols; c0 < T; c0 += kCols) {
            __syncthreads();
            load_tile<D>(Qs, qb, qs, c0, T);
            load_tile<D>(Gs, gb, ld_o, c0, T);
            for (int i = threadIdx.x; i < kCols; i += kThreads) {
                Ls[i] = c0 + i < T ? lb[c0 + i] : 0.0f;
                Ds[i] = c0 + i < T ? db[c0 + i] : 0.0f;
            }
            __syncthreads();
            float p[kCols / 8][4], dp[kCols / 8][4];
#pragma unroll
            for (int nt = 0; nt < kCols / 8; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) p[nt][e] = dp[nt][e] = 0.0f;
                mma_tile<D / 16>(p[nt], Ks, D + 8, r0, Qs, D + 8, nt * 8, g, t);  /* Sᵀ = K Qᵀ  */
                mma_tile<D / 16>(dp[nt], Vs, D + 8, r0, Gs, D + 8, nt * 8, g, t); /* dPᵀ = V dOᵀ */
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qi = nt * 8 + 2 * t + (e & 1), r = e >> 1;
                    const bool ok = c0 + qi < T && key[r] <= c0 + qi && key[r] < T;
                    const float pe = ok ? __expf(p[nt][e] * scale - Ls[qi]) : 0.0f;
                    p[nt][e] = pe;
                    dp[nt][e] = pe * (dp[nt][e] - Ds[qi]); /* dSᵀ */
                }
            }
#pragma unroll
            for (int kk = 0; kk < kCols / 16; kk++) {
                uint32_t a[4];
                a_from_c(a, p, kk);
                mma_kmajor<D>(dva, a, Gs, kk, lane); /* dV += Pᵀ dO */
                a_from_c(a, dp, kk);
                mma_kmajor<D>(dka, a, Qs, kk, lane); /* dK += dSᵀ Q */
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (key[r] >= T) continue;
        const int64_t off = ((int64_t)b * T + key[r]) * ld_kv + (int64_t)kvh * D;
#pragma unroll
        for (int dn = 0; dn < D / 8; dn++) {
            *reinterpret_cast<uint32_t *>(dk + off + dn * 8 + 2 * t) =
                pack_bf16(dka[dn][2 * r] * scale, dka[dn][2 * r + 1] * scale);
            *reinterpret_cast<uint32_t *>(dv + off + dn * 8 + 2 * t) = pack_bf16(dva[dn][2 * r], dva[dn][2 * r + 1]);
        }
    }
}

/* dQ of 64 queries of (b, h): rows are queries, inner tiles are keys. */
template <int D>
__global__ void __launch_bounds__(kThreads) attn_backward_dq(bf16 *__restrict__ dq, const bf16 *__restrict__ dout,
                                                              const bf16 *__restrict__ q,
                                                              const bf16 *__restrict__ k,
                                                              const bf16 *__restrict__ v,
                                                              const float *__restrict__ lse,
                                                              const float *__restrict__ delta, int T, int H, int KVH,
                                                              float scale, int64_t ld_o, int64_t ld_q) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem_raw); /* [64 q][D+8]  */
    bf16 *Gs = Qs + kRows * (D + 8);                /* dO [64][D+8] */
    bf16 *Ks = Gs + kRows * (D + 8);                /* [64 keys][D+8] */
    bf16 *Vs = Ks + kCols * (D + 8);                /* [64 keys][D+8] */
    const int q0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z, kvh = h / (H / KVH);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int64_t qs = (int64_t)H * D, kvs = (int64_t)KVH * D;
    const bf16 *qb = q + ((int64_t)b * T * H + h) * D, *gb = dout + (int64_t)b * T * ld_o + (int64_t)h * D;
    const bf16 *kb = k + ((int64_t)b * T * KVH + kvh) * D, *vb = v + ((int64_t)b * T * KVH + kvh) * D;
    load_tile<D>(Qs, qb, qs, q0, T);
    load_tile<D>(Gs, gb, ld_o, q0, T);
    const int r0 = warp * 16;
    const int row[2] = {q0 + r0 + g, q0 + r0 + g + 8};
    float lrow[2], drow[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lrow[r] = row[r] < T ? lse[((int64_t)b * H + h) * T + row[r]] : 0.0f;
        drow[r] = row[r] < T ? delta[((int64_t)b * H + h) * T + row[r]] : 0.0f;
    }
    float dqa[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.0f;
    const int last_key = min(q0 + kRows - 1, T - 1);
    for (int k0 = 0; k0 <= last_key; k0 += kCols) {
        __syncthreads();
        load_tile<D>(Ks, kb, kvs, k0, T);
        load_tile<D>(Vs, vb, kvs, k0, T);
        __syncthreads();
        float ds[kCols / 8][4];
#pragma unroll
        for (int nt = 0; nt < kCols / 8; nt++) {
            float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int e = 0; e < 4; e++) ds[nt][e] = 0.0f;
            mma_tile<D / 16>(s, Qs, D + 8, r0, Ks, D + 8, nt * 8, g, t);      /* S = Q Kᵀ  */
            mma_tile<D / 16>(ds[nt], Gs, D + 8, r0, Vs, D + 8, nt * 8, g, t); /* dP = dO Vᵀ */
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int kj = k0 + nt * 8 + 2 * t + (e & 1), r = e >> 1;
                const float p = kj <= row[r] && kj < T ? __expf(s[e] * scale - lrow[r]) : 0.0f;
                ds[nt][e] = p * (ds[nt][e] - drow[r]);
            }
        }
#pragma unroll
        for (int kk = 0; kk < kCols / 16; kk++) {
            uint32_t a[4];
            a_from_c(a, ds, kk);
            mma_kmajor<D>(dqa, a, Ks, kk, lane); /* dQ += dS K */
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (row[r] >= T) continue;
        bf16 *dst = dq + ((int64_t)b * T + row[r]) * ld_q + (int64_t)h * D;
#pragma unroll
        for (int dn = 0; dn < D / 8; dn++)
            *reinterpret_cast<uint32_t *>(dst + dn * 8 + 2 * t) =
                pack_bf16(dqa[dn][2 * r] * scale, dqa[dn][2 * r + 1] * scale);
    }
}

template <int D>
constexpr size_t forward_smem() {
    return (size_t)(3 * kRows * (D + 8)) * sizeof(bf16);
}
template <int D>
constexpr size_t dkdv_smem() {
    return (size_t)(4 * kRows * (D + 8)) * sizeof(bf16) + 2 * kCols * sizeof(float);
}
template <int D>
constexpr size_t dq_smem() {
    return (size_t)(4 * kRows * (D + 8)) * sizeof(bf16);
}

template <int D>
void forward_launch(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B, int T, int H, int KVH,
                    float scale, int64_t ld_o, cudaStream_t stream) {
    const size_t smem = forward_smem<D>();
    CUDA_CHECK(cudaFuncSetAttribute(attn_forward<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)((T + kRows - 1) / kRows), (unsigned)H, (unsigned)B);
    attn_forward<D><<<grid, kThreads, smem, stream>>>(out, lse, q, k, v, T, H, KVH, scale, ld_o);
    KERNEL_CHECK(stream);
}

template <int D>
void backward_launch(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
                     const float *lse, const float *delta, int B, int T, int H, int KVH, float scale, int64_t ld_o,
                     int64_t ld_q, int64_t ld_kv, cudaStream_t stream) {
    const size_t s1 = dkdv_smem<D>(), s2 = dq_smem<D>();
    CUDA_CHECK(cudaFuncSetAttribute(attn_backward_dkdv<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
    CUDA_CHECK(cudaFuncSetAttribute(attn_backward_dq<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
    const unsigned tiles = (unsigned)((T + kRows - 1) / kRows);
    attn_backward_dkdv<D><<<dim3(tiles, (unsigned)KVH, (unsigned)B), kThreads, s1, stream>>>(
        dk, dv, dout, q, k, v, lse, delta, T, H, KVH, scale, ld_o, ld_kv);
    KERNEL_CHECK(stream);
    attn_backward_dq<D><<<dim3(tiles, (unsigned)H, (unsigned)B), kThreads, s2, stream>>>(dq, dout, q, k, v, lse, delta,
                                                                                       T, H, KVH, scale, ld_o, ld_q);
    KERNEL_CHECK(stream);
}

void check_args(int B, int T, int H, int KVH, int D) {
    CHECK(B >= 1 && T >= 1 && H >= 1 && KVH >= 1 && H % KVH == 0 && (D == 16 || D == 32 || D == 64 || D == 128),
          "gpu_attention: unsupported shape B=%d T=%d H=%d KVH=%d D=%d (D must be 16, 32, 64 or 128, H %% KVH == 0)", B,
          T, H, KVH, D);
}

/* A row stride of out or dout: at least H·D, a multiple of 8 (16-byte rows: the tiles' 16-byte
 * loads and the tensor maps' strides). */
void check_ld(int64_t ld_o, int H, int D, const void *p) {
    CHECK(ld_o >= (int64_t)H * D && ld_o % 8 == 0 && ((uintptr_t)p % 16) == 0,
          "gpu_attention: row stride %lld must be at least H*D=%d and a multiple of 8, rows 16-byte aligned",
          (long long)ld_o, H * D);
}

} // namespace

namespace refine {

/* REFINE_ATTENTION_KERNEL=sm80 forces the sm_80 kernels under AUTO (attention_internal.h). */
static bool env_forces_sm80() {
    const char *e = getenv("REFINE_ATTENTION_KERNEL");
    return e != nullptr && strcmp(e, "sm80") == 0;
}

enum AttnKernel attention_auto_kernel(int D) {
    return !env_forces_sm80() && attn90_available(D) ? ATTN_KERNEL_SM90 : ATTN_KERNEL_SM80;
}

void attention_forward(enum AttnKernel kernel, uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                       const uint16_t *v, int B, int T, int H, int KVH, int D, float scale, cudaStream_t stream,
                       HangRecord *dbg, int64_t ld_o) {
    check_args(B, T, H, KVH, D);
    if (ld_o == 0) ld_o = (int64_t)H * D;
    check_ld(ld_o, H, D, out);
    if (kernel == ATTN_KERNEL_AUTO) kernel = attention_auto_kernel(D);
    if (kernel == ATTN_KERNEL_SM90) {
        attn90_forward(out, lse, q, k, v, B, T, H, KVH, D, scale, stream, dbg, ld_o);
        return;
    }
    bf16 *o = reinterpret_cast<bf16 *>(out);
    const bf16 *qq = reinterpret_cast<const bf16 *>(q), *kk = reinterpret_cast<const bf16 *>(k),
               *vv = reinterpret_cast<const bf16 *>(v);
    ATTN_HEADDIM_SWITCH(D, [&](auto hd) {
        forward_launch<decltype(hd)::value>(o, lse, qq, kk, vv, B, T, H, KVH, scale, ld_o, stream);
    });
}

void attention_backward(enum AttnKernel kernel, uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                        const uint16_t *q, const uint16_t *k, const uint16_t *v, const uint16_t *out, const float *lse,
                        int B, int T, int H, int KVH, int D, float scale, void *workspace, cudaStream_t stream,
                        HangRecord *dbg, int64_t ld_o, int64_t ld_g, const RopeBwd *rope) {
    check_args(B, T, H, KVH, D);
    if (ld_o == 0) ld_o = (int64_t)H * D;
    check_ld(ld_o, H, D, out);
    check_ld(ld_o, H, D, dout);
    const int64_t ld_q = ld_g ? ld_g : (int64_t)H * D, ld_kv = ld_g ? ld_g : (int64_t)KVH * D;
    check_ld(ld_q, H, D, dq);
    check_ld(ld_kv, KVH, D, dk);
    check_ld(ld_kv, KVH, D, dv);
    if (kernel == ATTN_KERNEL_AUTO) kernel = attention_auto_kernel(D);
    if (rope) CHECK(rope->cos && rope->sin && rope->pos, "attention backward: RoPE tables or positions are NULL");
    /* the Hopper kernels apply RoPE's backward as they store dq and dk where the tables allow
     * 16-byte loads (D/2 a multiple of 8: D ∈ {64, 128}; dq's 16-byte alignment is checked above
     * by check_ld); else the RoPE pass after the kernels */
    const bool rope_in_kernel = rope && ((uintptr_t)rope->cos & 15u) == 0 && ((uintptr_t)rope->sin & 15u) == 0;
    auto rope_pass = [&]() {
        if (rope)
            gpu_rope_backward_bf16(dq, dk, rope->cos, rope->sin, rope->pos, B * T, H, KVH, D, (int)ld_q, (int)ld_kv,
                                   stream);
    };
    if (kernel == ATTN_KERNEL_SM90) {
        attn90_backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, KVH, D, scale, workspace, stream, dbg, ld_o, ld_q,
                        ld_kv, rope_in_kernel ? rope : nullptr);
        if (!rope_in_kernel) rope_pass();
        return;
    }
    float *delta = reinterpret_cast<float *>(static_cast<unsigned char *>(workspace) +
                                             attn90::bwd_workspace(B, T, H).delta80);
    const int64_t rows = (int64_t)B * T * H;
    attn_delta<<<(unsigned)((rows + 7) / 8), 256, 0, stream>>>(delta, reinterpret_cast<const bf16 *>(dout),
                                                               reinterpret_cast<const bf16 *>(out), B, T, H, D, ld_o);
    KERNEL_CHECK(stream);
    bf16 *a = reinterpret_cast<bf16 *>(dq), *bk = reinterpret_cast<bf16 *>(dk), *bv = reinterpret_cast<bf16 *>(dv);
    const bf16 *g = reinterpret_cast<const bf16 *>(dout), *qq = reinterpret_cast<const bf16 *>(q),
               *kk = reinterpret_cast<const bf16 *>(k), *vv = reinterpret_cast<const bf16 *>(v);
    ATTN_HEADDIM_SWITCH(D, [&](auto hd) {
        backward_launch<decltype(hd)::value>(a, bk, bv, g, qq, kk, vv, lse, delta, B, T, H, KVH, scale, ld_o, ld_q, ld_kv,
                                             stream);
    });
    rope_pass();
}

} // namespace refine

extern "C" void gpu_attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                                           const uint16_t *v, int B, int T, int H, int KVH, int D, float scale,
                                           cudaStream_t stream) {
    refine::attention_forward(refine::ATTN_KERNEL_AUTO, out, lse, q, k, v, B, T, H, KVH, D, scale, stream, nullptr);
}

extern "C" void gpu_attention_forward_ld_bf16(uint16_t *out, int64_t ld_o, float *lse, const uint16_t *q,
                                              const uint16_t *k, const uint16_t *v, int B, int T, int H, int KVH,
                                              int D, float scale, cudaStream_t stream) {
    refine::attention_forward(refine::ATTN_KERNEL_AUTO, out, lse, q, k, v, B, T, H, KVH, D, scale, stream, nullptr,
                              ld_o);
}

extern "C" size_t gpu_attention_backward_workspace_size(int B, int T, int H) {
    return (size_t)refine::attn90::bwd_workspace(B, T, H).total;
}

extern "C" void gpu_attention_backward_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                                            const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                            const uint16_t *out, const float *lse, int B, int T, int H, int KVH,
                                            int D, float scale, void *workspace, cudaStream_t stream) {
    refine::attention_backward(refine::ATTN_KERNEL_AUTO, dq, dk, dv, dout, q, k, v, out, lse, B, T, H, KVH, D, scale,
                               workspace, stream, nullptr);
}

extern "C" void gpu_attention_backward_ld_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                                               const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                               const uint16_t *out, int64_t ld_o, const float *lse, int B, int T,
                                               int H, int KVH, int D, float scale, void *workspace,
                                               cudaStream_t stream) {
    refine::attention_backward(refine::ATTN_KERNEL_AUTO, dq, dk, dv, dout, q, k, v, out, lse, B, T, H, KVH, D, scale,
                               workspace, stream, nullptr, ld_o);
}

extern "C" void gpu_attention_backward_strided_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, int64_t ld_g,
                                                    const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                                                    const uint16_t *v, const uint16_t *out, int64_t ld_o,
                                                    const float *lse, int B, int T, int H, int KVH, int D, float scale,
                                                    void *workspace, cudaStream_t stream) {
    refine::attention_backward(refine::ATTN_KERNEL_AUTO, dq, dk, dv, dout, q, k, v, out, lse, B, T, H, KVH, D, scale,
                               workspace, stream, nullptr, ld_o, ld_g);
}

extern "C" void gpu_attention_rope_backward_strided_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, int64_t ld_g,
                                                         const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                                                         const uint16_t *v, const uint16_t *out, int64_t ld_o,
                                                         const float *lse, const uint16_t *rope_cos,
                                                         const uint16_t *rope_sin, const int32_t *pos, int B, int T,
                                                         int H, int KVH, int D, float scale, void *workspace,
                                                         cudaStream_t stream) {
    const refine::RopeBwd rope{rope_cos, rope_sin, pos};
    refine::attention_backward(refine::ATTN_KERNEL_AUTO, dq, dk, dv, dout, q, k, v, out, lse, B, T, H, KVH, D, scale,
                               workspace, stream, nullptr, ld_o, ld_g, &rope);
}
