/* cross_entropy.cu — lm_head + cross-entropy in row chunks (gpu/cross_entropy.h).
 *
 * Strategy: for each chunk of R token rows: (1) z = h Wᵀ into a bf16 (R, V) buffer of the
 * workspace (gpu/gemm); (2) the row pass (gpu_cross_entropy_rows_plan picks the kernel):
 *   ONCHIP  one row per cluster of 1–8 CTAs of 256 threads (sm_90 clusters; one CTA before sm_90),
 *           each holding a slice of the row (≤ 32 KiB, ≤ 64 KiB for V > 131072) in shared memory:
 *           the row is read from DRAM once (16-byte loads when V % 8 == 0), its max, then
 *           Σ exp(z − max) from shared memory, each reduced in a fixed order over the CTA and then
 *           over the cluster's CTAs through distributed shared memory (every CTA computes the same
 *           bits), then nll and dz = (softmax − onehot)·mult written from shared memory (in place).
 *           2 bytes read + 2 written per logit; ignored rows read nothing.
 *   STREAM  (rows that do not fit) one block of 512 threads per row keeps an online (max, Σexp)
 *           pair per thread, merges the pairs in a fixed tree, then reads the row a second time
 *           (from DRAM once it has left L2) to write dz.
 * (3) dh = dz W (bf16) and dW += dzᵀ h (fp32) through gpu/gemm. The fp32 logits of a row exist only
 * in registers. After the chunks, one block sums the per-row nll in double in a fixed order into
 * the loss. The GEMMs (2·N·C·V FLOPs each) dominate for Llama vocabularies.
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
    /* exp(−inf − m) = 0 adds nothing; skipped, so that a state still empty (m = −inf) does not
     * form exp(−inf − (−inf)) = NaN from a −inf logit */
    if (z == -INFINITY) return;
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

/* ---- the on-chip kernel: a row's logits are read from DRAM once ------------------------------- */

constexpr int kChipBlock = 256;                   /* threads per CTA */
constexpr int kChipSliceTarget = 32 * 1024;       /* bytes of a row slice held in shared memory */
constexpr int kChipSliceMax = 64 * 1024;          /* the most one CTA holds (large vocabularies) */
constexpr int kChipMaxCtas = 8;                   /* the portable cluster size */
constexpr float kLog2e = 1.4426950408889634f;     /* fp32(log2 e) */

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* Butterfly sum: every lane ends with the same value (a + b == b + a in fp32). */
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* q = exp(v − M) as 2^((v − M)·fp32(log2 e)); −inf → 0, NaN stays NaN. */
__device__ __forceinline__ float exp_shifted(float v, float mx) {
    return exp2f(__fmul_rn(__fsub_rn(v, mx), kLog2e));
}

__device__ __forceinline__ void unpack8(float (&f)[8], uint4 raw) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 p = __bfloat1622float2(h[j]);
        f[2 * j] = p.x, f[2 * j + 1] = p.y;
    }
}

/* Cluster barrier halves (sm_90): arrive publishes this CTA's shared-memory writes, wait acquires
 * the others'. Compiled to nothing for older targets, where the host launches one CTA per row. */
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

/* The value at `slot` of the shared memory of CTA `rank` of this cluster. */
__device__ __forceinline__ float cluster_read(const float *slot, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t local = (uint32_t)__cvta_generic_to_shared(slot), remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
    return v;
#else
    (void)rank;
    return *slot;
#endif
}

__device__ __forceinline__ int cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return (int)r;
#else
    return 0;
#endif
}

/* One row per cluster of `ctas` CTAs (ctas = 1: a plain CTA); CTA r holds the slice
 * [r·slice, min(V, (r + 1)·slice)) of the row in shared memory, as `slice` bf16 (a multiple of 8)
 * padded with −inf. Phases, each ending in a fixed-order reduction over the CTA and then over the
 * cluster's CTAs (rank order, a pairwise tree over ctas = 1, 2, 4 or 8 partials, every CTA the same
 * bits): (A) load the slice (16-byte loads for VW = 8, 2-byte ones for VW = 1) and its max → M;
 * (B) from shared memory, Σ exp(z − M) with 8 per-thread accumulators (one per vector lane) → S;
 * (C) nll by the CTA holding the label, and dz = exp(z − M)·(mult/S) (the label entry
 * (exp(z − M)/S − 1)·mult) written from shared memory. Ignored rows read nothing and write zeros.
 * Summation depth (additions on any path into S): ⌈slice/(8·256)⌉ + 3 (the 8 lanes) + 5 (warp)
 * + 3 (8 warps) + log2(ctas): gpu_cross_entropy_rows_plan reports it. */
template <int VW>
__global__ void __launch_bounds__(kChipBlock) ce_rows_onchip(float *__restrict__ nll, bf16 *dz, const bf16 *z,
                                                             const int32_t *__restrict__ labels, int V, int slice,
                                                             int ctas, float mult) {
    extern __shared__ uint4 sbuf[]; /* slice/8 vectors of 8 bf16 */
    __shared__ float red_max[kChipBlock / 32], red_sum[kChipBlock / 32];
    __shared__ float part_max, part_sum; /* this CTA's partials, read by the cluster */
    const int rank = ctas > 1 ? cluster_rank() : 0;
    const int64_t row = blockIdx.x / ctas;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int begin = rank * slice;
    const int len = V - begin < slice ? (V - begin > 0 ? V - begin : 0) : slice;
    const int nvec = slice / 8;
    const int32_t y = labels[row];
    bf16 *dr = dz == nullptr ? nullptr : dz + row * V + begin;
    if (y == CE_IGNORE_INDEX) { /* the whole cluster takes this branch: no barrier is skipped */
        if (rank == 0 && t == 0) nll[row] = 0.0f;
        if (dr == nullptr) return;
        if constexpr (VW == 8) {
            for (int i = t; i < len / 8; i += kChipBlock) reinterpret_cast<uint4 *>(dr)[i] = make_uint4(0, 0, 0, 0);
        } else {
            for (int e = t; e < len; e += kChipBlock) dr[e] = __float2bfloat16_rn(0.0f);
        }
        return;
    }
    const bf16 *zr = z + row * V + begin;

    /* (A) the slice into shared memory, −inf past its end; the running max */
    const uint32_t ninf2 = 0xFF80FF80u; /* two bf16 −inf */
    float m = -INFINITY;
    if constexpr (VW == 8) {
        const int lv = len / 8; /* V % 8 == 0, so len is a multiple of 8 */
        for (int i0 = t; i0 < nvec; i0 += 4 * kChipBlock) {
            uint4 r[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = i0 + u * kChipBlock;
                r[u] = i < lv ? reinterpret_cast<const uint4 *>(zr)[i] : make_uint4(ninf2, ninf2, ninf2, ninf2);
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = i0 + u * kChipBlock;
                if (i < nvec) {
                    sbuf[i] = r[u];
                    float f[8];
                    unpack8(f, r[u]);
#pragma unroll
                    for (int k = 0; k < 8; k++) m = fmaxf(m, f[k]);
                }
            }
        }
    } else {
        bf16 *sh = reinterpret_cast<bf16 *>(sbuf);
        for (int e = t; e < slice; e += kChipBlock) {
            const bf16 v = e < len ? zr[e] : __ushort_as_bfloat16((unsigned short)0xFF80u);
            sh[e] = v;
            m = fmaxf(m, __bfloat162float(v));
        }
    }
    m = warp_max(m);
    if (lane == 0) red_max[warp] = m;
    __syncthreads(); /* also publishes sbuf */
    m = red_max[0];
#pragma unroll
    for (int w = 1; w < kChipBlock / 32; w++) m = fmaxf(m, red_max[w]);
    if (ctas > 1) {
        if (t == 0) part_max = m;
        cluster_arrive();
        cluster_wait();
        m = cluster_read(&part_max, 0);
        for (int r = 1; r < ctas; r++) m = fmaxf(m, cluster_read(&part_max, r));
    }
    const float mx = m;

    /* (B) Σ exp(z − M): lane-k accumulators, then ((0+1)+(2+3))+((4+5)+(6+7)), warp, warps, CTAs */
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    for (int i = t; i < nvec; i += kChipBlock) {
        float f[8];
        unpack8(f, sbuf[i]);
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] = __fadd_rn(acc[k], exp_shifted(f[k], mx));
    }
    float s = __fadd_rn(__fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3])),
                        __fadd_rn(__fadd_rn(acc[4], acc[5]), __fadd_rn(acc[6], acc[7])));
    s = warp_sum(s);
    if (lane == 0) red_sum[warp] = s;
    __syncthreads();
    s = __fadd_rn(__fadd_rn(__fadd_rn(red_sum[0], red_sum[1]), __fadd_rn(red_sum[2], red_sum[3])),
                  __fadd_rn(__fadd_rn(red_sum[4], red_sum[5]), __fadd_rn(red_sum[6], red_sum[7])));
    static_assert(kChipBlock / 32 == 8, "the warp tree above is written for 8 warps");
    if (ctas > 1) {
        if (t == 0) part_sum = s;
        cluster_arrive();
        cluster_wait();
        float p[kChipMaxCtas];
#pragma unroll
        for (int r = 0; r < kChipMaxCtas; r++) p[r] = r < ctas ? cluster_read(&part_sum, r) : 0.0f;
        /* every read of another CTA's shared memory is done: let the cluster go (waited on below) */
        cluster_arrive();
        /* the pairwise tree over 8 slots, those past `ctas` exact zeros: log2(ctas) rounding levels */
        static_assert(kChipMaxCtas == 8, "the tree below is written for 8 slots");
        s = __fadd_rn(__fadd_rn(__fadd_rn(p[0], p[1]), __fadd_rn(p[2], p[3])),
                      __fadd_rn(__fadd_rn(p[4], p[5]), __fadd_rn(p[6], p[7])));
    }
    const float sum = s;

    /* (C) nll, then dz from shared memory */
    if (t == 0 && y >= begin && y - begin < len) {
        const float zy = __bfloat162float(reinterpret_cast<const bf16 *>(sbuf)[y - begin]);
        nll[row] = __fsub_rn(__fadd_rn(mx, logf(sum)), zy);
    }
    if (dr != nullptr) {
        const float scale = __fdiv_rn(mult, sum);
        const int yl = y - begin; /* the label's index in this slice (may be outside it) */
        if constexpr (VW == 8) {
            for (int i = t; i < len / 8; i += kChipBlock) {
                float f[8], o[8];
                unpack8(f, sbuf[i]);
#pragma unroll
                for (int k = 0; k < 8; k++) o[k] = __fmul_rn(exp_shifted(f[k], mx), scale);
                if ((unsigned)(yl - 8 * i) < 8u) { /* the label's vector: once a row */
#pragma unroll
                    for (int k = 0; k < 8; k++)
                        if (8 * i + k == yl) o[k] = __fmul_rn(__fsub_rn(__fdiv_rn(exp_shifted(f[k], mx), sum), 1.0f), mult);
                }
                store_bf16<8>(dr + 8 * i, o);
            }
        } else {
            const bf16 *sh = reinterpret_cast<const bf16 *>(sbuf);
            for (int e = t; e < len; e += kChipBlock) {
                const float q = exp_shifted(__bfloat162float(sh[e]), mx);
                const float o = e == yl ? __fmul_rn(__fsub_rn(__fdiv_rn(q, sum), 1.0f), mult) : __fmul_rn(q, scale);
                dr[e] = __float2bfloat16_rn(o);
            }
        }
    }
    if (ctas > 1) cluster_wait(); /* no CTA leaves while another may still read its partials */
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

int device_cc_major() {
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major;
}

int ceil_log2(int x) {
    int l = 0;
    while ((1 << l) < x) l++;
    return l;
}

gpu_ce_rows_plan make_plan(int V, ce_rows_kernel want, int cc_major) {
    gpu_ce_rows_plan p;
    p.kernel = CE_ROWS_STREAM, p.ctas_per_row = 1, p.threads = kRowBlock, p.slice = V;
    p.sum_depth = (V + kRowBlock - 1) / kRowBlock + ceil_log2(kRowBlock);
    if (want == CE_ROWS_STREAM) return p;
    const int max_ctas = cc_major >= 9 ? kChipMaxCtas : 1;
    auto slice_of = [V](int ctas) { return ((V + ctas - 1) / ctas + 7) / 8 * 8; };
    int ctas = 0;
    /* the fewest CTAs whose slices fit the target; else the most CTAs, if their slices fit at all */
    for (int c = 1; c <= max_ctas && ctas == 0; c *= 2)
        if ((int64_t)slice_of(c) * 2 <= kChipSliceTarget) ctas = c;
    if (ctas == 0 && (int64_t)slice_of(max_ctas) * 2 <= kChipSliceMax) ctas = max_ctas;
    if (ctas == 0) return p;
    p.kernel = CE_ROWS_ONCHIP, p.ctas_per_row = ctas, p.threads = kChipBlock, p.slice = slice_of(ctas);
    p.sum_depth = (p.slice + 8 * kChipBlock - 1) / (8 * kChipBlock) + 3 + 5 + ceil_log2(kChipBlock / 32) +
                  ceil_log2(ctas);
    return p;
}

template <int VW>
void launch_onchip(const gpu_ce_rows_plan &p, float *nll, bf16 *dz, const bf16 *z, const int32_t *labels, int rows,
                   int V, float mult, cudaStream_t stream) {
    const size_t smem = (size_t)p.slice * 2;
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(ce_rows_onchip<VW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CHECK((int64_t)rows * p.ctas_per_row <= INT32_MAX, "ce rows=%d too many for one launch", rows);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(rows * p.ctas_per_row));
    cfg.blockDim = dim3(kChipBlock);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    if (p.ctas_per_row > 1) {
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = (unsigned)p.ctas_per_row;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, ce_rows_onchip<VW>, nll, dz, z, labels, V, p.slice, p.ctas_per_row, mult));
}

void softmax_rows(float *nll, uint16_t *dz, const uint16_t *z, const int32_t *labels, int rows, int V, float mult,
                  ce_rows_kernel want, cudaStream_t stream) {
    const bf16 *zb = reinterpret_cast<const bf16 *>(z);
    bf16 *dzb = reinterpret_cast<bf16 *>(dz);
    const bool vec = V % 8 == 0 && ((uintptr_t)z & 15u) == 0 && ((uintptr_t)dz & 15u) == 0;
    const gpu_ce_rows_plan p = make_plan(V, want, device_cc_major());
    if (p.kernel == CE_ROWS_ONCHIP) {
        if (vec)
            launch_onchip<8>(p, nll, dzb, zb, labels, rows, V, mult, stream);
        else
            launch_onchip<1>(p, nll, dzb, zb, labels, rows, V, mult, stream);
    } else if (vec) {
        ce_softmax_rows<8><<<rows, kRowBlock, 0, stream>>>(nll, dzb, zb, labels, V, mult);
    } else {
        ce_softmax_rows<1><<<rows, kRowBlock, 0, stream>>>(nll, dzb, zb, labels, V, mult);
    }
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
    gpu_cross_entropy_rows_bf16_with(nll, dz, z, labels, N, V, mult, CE_ROWS_AUTO, stream);
}

extern "C" struct gpu_ce_rows_plan gpu_cross_entropy_rows_plan(int V, enum ce_rows_kernel want) {
    CHECK(V >= 1, "ce V=%d", V);
    return make_plan(V, want, device_cc_major());
}

extern "C" void gpu_cross_entropy_rows_bf16_with(float *nll, uint16_t *dz, const uint16_t *z, const int32_t *labels,
                                                 int N, int V, float mult, enum ce_rows_kernel kernel,
                                                 cudaStream_t stream) {
    CHECK(N >= 1 && V >= 1, "ce N=%d V=%d", N, V);
    softmax_rows(nll, dz, z, labels, N, V, mult, kernel, stream);
}

extern "C" void gpu_lm_head_cross_entropy_bf16(float *loss, uint16_t *dh, void *dw, enum gemm_out dw_type,
                                               const uint16_t *h, const uint16_t *w, const int32_t *labels, int N,
                                               int C, int V, int64_t n_valid_total, float grad_scale, int rows_per_chunk,
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
        softmax_rows(nll + r0, backward ? zbuf : nullptr, zbuf, labels + r0, rows, V, mult, CE_ROWS_AUTO, stream);
        if (dh) gpu_linear_backward_dx_bf16(gemm, dh + (int64_t)r0 * C, zbuf, w, rows, C, V, GEMM_OVERWRITE, stream);
        if (dw) gpu_linear_backward_dw(gemm, dw, dw_type, zbuf, hc, rows, C, V, stream);
    }
    ce_finish_loss<<<1, 256, 0, stream>>>(loss, nll, N, 1.0 / (double)n_valid_total);
    KERNEL_CHECK(stream);
}
