/* adamw.cu — multi-tensor fused AdamW with global-norm clipping (gpu/adamw.h).
 *
 * Strategy: at build time every tensor is cut into chunks of kChunk elements, and a chunk table
 * (tensor index, first element) is uploaded with the tensors' descriptors; one block owns one
 * chunk in every kernel, so all tensors go in one launch whatever their sizes. A step is three
 * launches: (1) per-chunk Σg² (each thread sums its strided elements in order in fp32, then a fixed
 * shared-memory tree) into `partials`; (2) one block adds the partials in double in a fixed order
 * and writes the norm and the clip coefficient to device memory (no host round trip); (3) the
 * update, memory-bound (reads p, m, v, g, writes p, m, v and the bf16 copy: 30 bytes an element;
 * split masters read and write the copy and the low half instead of p: 28 bytes; bf16 weights
 * the copy alone: 24 bytes, and under stochastic rounding one Philox call per four elements),
 * 16-byte accesses (4 elements a thread) for tensors whose size is a multiple of 4 and whose
 * buffers are aligned, else coalesced scalar accesses; each op written with __f*_rn so that nvcc
 * cannot contract it, and the two fused multiply-adds of ref/adamw.h with __fmaf_rn. kChunk is a multiple of 4, so a chunk never splits a vector.
 * bf16 gradients (grad_bf16; 2 bytes an element less to read): kernels (1) and (3) are templates
 * on the gradient's element type G, the float instantiation the fp32 kernel as it was, the uint16_t
 * one reading the bits and widening them (grad_at / grad_at4: exact; 8-byte loads of 4 elements).
 * At build time the chunks are listed by their tensor's gradient dtype, and each kernel is launched
 * once per dtype present, over its list (all tensors of one dtype: one launch over the whole table,
 * as before), so that no block branches on the dtype and the fp32 code is unchanged.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:adamw_parity
 *                     (binary) adamw_parity --bench
 */
#include "gpu/adamw.h"

#include <math.h>
#include <stdlib.h>

#include <type_traits>
#include <vector>

#include <cuda_bf16.h>

#include "gpu/cuda_check.h"
#include "gpu/master_pair.cuh"
#include "io/check.h"
#include "ref/master_pair.h"
#include "ref/shard.h"

namespace {

constexpr int kBlock = 256;
constexpr int64_t kChunk = 8192;
static_assert(kChunk == SHARD_CHUNK, "the sharded optimizer's pieces are whole chunks (ref/shard.h)");

struct chunk_ref {
    int32_t tensor;
    int32_t pad;
    int64_t start;
};

struct step_scalars {
    float decay_factor; /* 1 − lr·wd */
    float one_minus_beta1, beta2, one_minus_beta2;
    float neg_step_size; /* −lr/bc1 */
    float bc2_sqrt;
    float eps;
    int64_t step; /* t: stochastic rounding's stream */
};

__device__ __forceinline__ float block_sum_f32(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = kBlock / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = __fadd_rn(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    return sh[0];
}

/* The device copy of a tensor's descriptor, with the vector-path flag decided at build time. */
struct tensor_desc {
    float *master;
    __nv_bfloat16 *copy;
    uint16_t *lo; /* split masters: join(copy, lo) is the master (master NULL) */
    int in_copy;  /* the master is the pair (copy, lo): split masters, or bf16 weights with lo NULL */
    int sr;       /* bf16 weights rounded stochastically: the stream (sr_seed, step, sr_tensor) */
    uint64_t sr_seed;
    uint32_t sr_tensor;
    float *m, *v;
    const float *grad;
    const uint16_t *grad_bf16; /* instead of grad (the launch's G says which) */
    int64_t n;
    int decay;
    int vec4; /* n % 4 == 0 and every pointer aligned for 4-element accesses */
};

/* The gradient of element type G (float: grad, uint16_t: grad_bf16), and element i of it, and
 * elements i..i+3 (i a multiple of 4, the buffer aligned: the vector path), as fp32: a bf16 gradient
 * widened (its bits shifted up, ref/bf16.h's bf16_to_float: exact). */
template <typename G>
__device__ __forceinline__ const G *tensor_grad(const tensor_desc &p) {
    if constexpr (std::is_same_v<G, uint16_t>) return p.grad_bf16;
    else return p.grad;
}
__device__ __forceinline__ float grad_at(const float *g, int64_t i) { return g[i]; }
__device__ __forceinline__ float grad_at(const uint16_t *g, int64_t i) {
    return __uint_as_float((uint32_t)g[i] << 16);
}
__device__ __forceinline__ float4 grad_at4(const float *g, int64_t i) { return *reinterpret_cast<const float4 *>(g + i); }
__device__ __forceinline__ float4 grad_at4(const uint16_t *g, int64_t i) {
    const uint2 u = *reinterpret_cast<const uint2 *>(g + i); /* element i in the low half of u.x */
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xFFFF0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xFFFF0000u));
}

/* Sharded gradients (ZeRO-2): the gradients of this rank's chunks in one flat array, element i of
 * chunk ci at flat[i + off[ci] − start] (the chunk's state offset); flat NULL: the tensors' own. */
struct grad_source {
    const float *flat;
    const int64_t *off;
};

/* Where element i of chunk ci (starting at start) of tensor p reads its gradient: base[i + shift]
 * (a bf16 gradient is always the tensor's own: build_gpu_adamw_sharded refuses it with a flat one). */
template <typename G>
__device__ __forceinline__ const G *grad_base(const tensor_desc &p, const grad_source &gs, int ci, int64_t start,
                                              int64_t *shift) {
    if constexpr (std::is_same_v<G, uint16_t>) {
        *shift = 0;
        return p.grad_bf16;
    } else {
        *shift = gs.flat ? gs.off[ci] - start : 0;
        return gs.flat ? gs.flat : p.grad;
    }
}

/* own: the list of chunks of this launch (block b takes chunk own[b]: the sharded form's chunks of
 * this rank, or the chunks whose gradient is of type G); NULL: block b takes chunk b. */
template <typename G>
__global__ void __launch_bounds__(kBlock) adamw_chunk_sumsq(float *partials, const tensor_desc *params,
                                                            const chunk_ref *chunks, const int32_t *own,
                                                            grad_source gs) {
    __shared__ float sh[kBlock];
    const int ci = own ? own[blockIdx.x] : (int)blockIdx.x;
    const chunk_ref c = chunks[ci];
    const tensor_desc p = params[c.tensor];
    const int64_t end = c.start + kChunk < p.n ? c.start + kChunk : p.n;
    int64_t gsh;
    const G *gb = grad_base<G>(p, gs, ci, c.start, &gsh);
    float s = 0.0f;
    if (p.vec4) {
        for (int64_t i = c.start + 4 * threadIdx.x; i < end; i += 4 * kBlock) {
            const float4 g = grad_at4(gb, i + gsh);
            s = __fadd_rn(s, __fmul_rn(g.x, g.x));
            s = __fadd_rn(s, __fmul_rn(g.y, g.y));
            s = __fadd_rn(s, __fmul_rn(g.z, g.z));
            s = __fadd_rn(s, __fmul_rn(g.w, g.w));
        }
    } else {
        for (int64_t i = c.start + threadIdx.x; i < end; i += kBlock) {
            const float g = grad_at(gb, i + gsh);
            s = __fadd_rn(s, __fmul_rn(g, g));
        }
    }
    const float total = block_sum_f32(s, sh);
    if (threadIdx.x == 0) partials[ci] = total;
}

/* out[0] = total norm, out[1] = clip coefficient. */
__global__ void __launch_bounds__(kBlock) adamw_finish_norm(float *out, const float *partials, int n_chunks,
                                                            float max_norm) {
    __shared__ double sh[kBlock];
    double s = 0.0;
    for (int i = threadIdx.x; i < n_chunks; i += kBlock) s += (double)partials[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = kBlock / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const float total = (float)sqrt(sh[0]);
        float coef = 1.0f;
        if (max_norm > 0.0f) {
            /* torch: clip_coef = max_norm / (total + 1e-6), clamped to 1 (fp32 tensor ops) */
            coef = __fdiv_rn(max_norm, __fadd_rn(total, 1e-6f));
            if (!(coef < 1.0f) && coef == coef) coef = 1.0f; /* NaN propagates, as torch's clamp does */
        }
        out[0] = total;
        out[1] = coef;
    }
}

/* One element of the update, in ref/adamw.h's order. */
__device__ __forceinline__ void adamw_element(float &w, float &m, float &v, float g_raw, float coef, int decay,
                                              const step_scalars &s) {
    const float g = __fmul_rn(g_raw, coef);
    if (decay) w = __fmul_rn(w, s.decay_factor);
    /* ref/adamw.h steps 2-3: the lerp and the addcmul each one fused multiply-add, as torch's CPU
     * kernels compute them (vec::fmadd) and ref/adamw.c does with fmaf.
     * aten lerp(m, g, wt): wt < 0.5 ? fma(wt, g − m, m) : fma(wt − 1, g − m, g) */
    if (s.one_minus_beta1 < 0.5f)
        m = __fmaf_rn(s.one_minus_beta1, __fsub_rn(g, m), m);
    else
        m = __fmaf_rn(__fsub_rn(s.one_minus_beta1, 1.0f), __fsub_rn(g, m), g);
    /* v·β2, then fma((1 − β2)·g, g, ·) */
    v = __fmaf_rn(__fmul_rn(s.one_minus_beta2, g), g, __fmul_rn(v, s.beta2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bc2_sqrt), s.eps);
    w = __fadd_rn(w, __fdiv_rn(__fmul_rn(s.neg_step_size, m), denom));
}

__global__ void pair_split_kernel(uint16_t *hi, uint16_t *lo, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        pair_store(hi, lo, i, x[i]);
}

/* The chunks of this launch (own, as above) and the sharded form's state: per chunk of the whole
 * table, the offset of its first element in the flat arrays master, m, v (state_off; NULL:
 * unsharded, the tensors' own master, m, v). */
struct shard_state {
    const int32_t *own;
    const int64_t *state_off;
    float *master, *m, *v;
    const float *grad; /* sharded gradients: flat, at the state offsets (grad_source); or NULL */
};

template <typename G>
__global__ void __launch_bounds__(kBlock) adamw_chunk_update(const tensor_desc *params, const chunk_ref *chunks,
                                                             const float *norm_coef, int clip, int guard,
                                                             const double *guard_scalar, step_scalars s,
                                                             shard_state sh) {
    /* A non-finite global norm means a non-finite gradient somewhere: no tensor is updated. */
    if (guard && !isfinite(norm_coef[0])) return;
    if (guard_scalar && !isfinite(*guard_scalar)) return;
    const int ci = sh.own ? sh.own[blockIdx.x] : (int)blockIdx.x;
    const chunk_ref c = chunks[ci];
    tensor_desc p = params[c.tensor];
    /* element i of the tensor is at [i + shift] of the arrays the state lives in */
    int64_t shift = 0;
    if (sh.state_off) p.master = sh.master, p.m = sh.m, p.v = sh.v, shift = sh.state_off[ci] - c.start;
    int64_t gsh;
    const G *gb = grad_base<G>(p, grad_source{sh.grad, sh.state_off}, ci, c.start, &gsh);
    const int64_t end = c.start + kChunk < p.n ? c.start + kChunk : p.n;
    const float coef = clip ? norm_coef[1] : 1.0f;
    if (p.in_copy) { /* split masters or bf16 weights (never sharded): the master is the pair */
        uint16_t *hi = reinterpret_cast<uint16_t *>(p.copy);
        if (p.vec4) {
            for (int64_t i = c.start + 4 * threadIdx.x; i < end; i += 4 * kBlock) {
                const float4 g = grad_at4(tensor_grad<G>(p), i);
                float4 m = *reinterpret_cast<const float4 *>(p.m + i);
                float4 v = *reinterpret_cast<const float4 *>(p.v + i);
                float w[4];
                pair_join4(*reinterpret_cast<const uint2 *>(hi + i), pair_lo4(p.lo, i), w);
                adamw_element(w[0], m.x, v.x, g.x, coef, p.decay, s);
                adamw_element(w[1], m.y, v.y, g.y, coef, p.decay, s);
                adamw_element(w[2], m.z, v.z, g.z, coef, p.decay, s);
                adamw_element(w[3], m.w, v.w, g.w, coef, p.decay, s);
                *reinterpret_cast<float4 *>(p.m + i) = m;
                *reinterpret_cast<float4 *>(p.v + i) = v;
                uint2 ho, lo = make_uint2(0u, 0u); /* lo: split masters only (never with sr) */
                if (p.sr) ho = sr_pack4(w, sr_stream{p.sr_seed, s.step, p.sr_tensor}, i);
                else pair_split4(w, &ho, &lo);
                *reinterpret_cast<uint2 *>(hi + i) = ho;
                if (p.lo) *reinterpret_cast<uint2 *>(p.lo + i) = lo;
            }
        } else {
            for (int64_t i = c.start + threadIdx.x; i < end; i += kBlock) {
                float w = pair_join(hi[i], pair_lo(p.lo, i)), m = p.m[i], v = p.v[i];
                adamw_element(w, m, v, grad_at(tensor_grad<G>(p), i), coef, p.decay, s);
                p.m[i] = m;
                p.v[i] = v;
                if (p.sr) hi[i] = sr_one(w, sr_stream{p.sr_seed, s.step, p.sr_tensor}, i);
                else pair_store(hi, p.lo, i, w);
            }
        }
        return;
    }
    if (p.vec4) {
        for (int64_t i = c.start + 4 * threadIdx.x; i < end; i += 4 * kBlock) {
            const float4 g = grad_at4(gb, i + gsh);
            float4 w = *reinterpret_cast<const float4 *>(p.master + i + shift);
            float4 m = *reinterpret_cast<const float4 *>(p.m + i + shift);
            float4 v = *reinterpret_cast<const float4 *>(p.v + i + shift);
            adamw_element(w.x, m.x, v.x, g.x, coef, p.decay, s);
            adamw_element(w.y, m.y, v.y, g.y, coef, p.decay, s);
            adamw_element(w.z, m.z, v.z, g.z, coef, p.decay, s);
            adamw_element(w.w, m.w, v.w, g.w, coef, p.decay, s);
            *reinterpret_cast<float4 *>(p.master + i + shift) = w;
            *reinterpret_cast<float4 *>(p.m + i + shift) = m;
            *reinterpret_cast<float4 *>(p.v + i + shift) = v;
            if (p.copy) {
                __nv_bfloat162 h[2] = {__floats2bfloat162_rn(w.x, w.y), __floats2bfloat162_rn(w.z, w.w)};
                *reinterpret_cast<uint2 *>(p.copy + i) = *reinterpret_cast<const uint2 *>(h);
            }
        }
    } else {
        for (int64_t i = c.start + threadIdx.x; i < end; i += kBlock) {
            float w = p.master[i + shift], m = p.m[i + shift], v = p.v[i + shift];
            adamw_element(w, m, v, grad_at(gb, i + gsh), coef, p.decay, s);
            p.master[i + shift] = w;
            p.m[i + shift] = m;
            p.v[i + shift] = v;
            if (p.copy) p.copy[i] = __float2bfloat16_rn(w);
        }
    }
}

/* The chunks one launch takes (block b: chunk own[b]; own NULL: chunk b, the whole table), n blocks. */
struct chunk_list {
    int32_t *own;
    int n;
};

constexpr int kGradFp32 = 0, kGradBf16 = 1; /* gpu_adamw.lists: the chunks by gradient dtype */

}  // namespace

struct gpu_adamw {
    tensor_desc *d_params;
    chunk_ref *d_chunks;
    float *d_partials;
    float *d_norm_coef;
    int n_chunks;
    bool norm_only; /* some tensor has no state: only gpu_adamw_grad_norm may be called */
    /* The chunks each kernel takes, by their gradient's dtype ([kGradFp32], [kGradBf16]): one launch
     * per non-empty list. Unsharded and of one dtype, that dtype's list is the whole table (own NULL);
     * sharded, this rank's chunks only. */
    chunk_list lists[2];
    /* the sharded form */
    bool sharded;
    int64_t *d_state_off;
    float *master, *m, *v;
    const float *grad; /* sharded gradients (flat), or NULL */
};

/* A list of chunk indices on the device (own NULL when empty: never launched). */
static chunk_list upload_list(const std::vector<int32_t> &own) {
    chunk_list l = {nullptr, (int)own.size()};
    if (own.empty()) return l;
    CUDA_CHECK(cudaMalloc(&l.own, sizeof(int32_t) * own.size()));
    CUDA_CHECK(cudaMemcpy(l.own, own.data(), sizeof(int32_t) * own.size(), cudaMemcpyHostToDevice));
    return l;
}

static void free_list(chunk_list *l) {
    if (l->own) CUDA_CHECK(cudaFree(l->own));
    *l = chunk_list{nullptr, 0};
}

extern "C" struct gpu_adamw *build_gpu_adamw(const struct gpu_adamw_param *params, int count) {
    CHECK(count >= 1, "adamw: %d tensors", count);
    std::vector<chunk_ref> chunks;
    bool norm_only = false;
    for (int t = 0; t < count; t++) {
        const bool split = params[t].lo != nullptr || params[t].master_bf16;
        CHECK(!params[t].master_bf16 || (!params[t].lo && !params[t].master),
              "adamw tensor %d: bf16 weights have neither an fp32 master nor low halves", t);
        const bool has_state = (split ? params[t].copy && !params[t].master : params[t].master != nullptr) &&
                               params[t].m && params[t].v;
        const bool no_state = !params[t].master && !params[t].m && !params[t].v && !params[t].copy && !split;
        CHECK(params[t].n >= 1 && (has_state || no_state), "adamw tensor %d: n=%lld, or master/m/v partly NULL", t,
              (long long)params[t].n);
        CHECK((params[t].grad != nullptr) != (params[t].grad_bf16 != nullptr),
              "adamw tensor %d: exactly one of grad (fp32) and grad_bf16 must be given (grad %p, grad_bf16 %p)", t,
              (const void *)params[t].grad, (const void *)params[t].grad_bf16);
        if (no_state) norm_only = true;
        for (int64_t s = 0; s < params[t].n; s += kChunk) chunks.push_back(chunk_ref{t, 0, s});
    }
    CHECK(chunks.size() < (size_t)INT32_MAX, "adamw: too many chunks");
    std::vector<int32_t> by_grad[2];
    for (size_t ci = 0; ci < chunks.size(); ci++)
        by_grad[params[chunks[ci].tensor].grad_bf16 ? kGradBf16 : kGradFp32].push_back((int32_t)ci);
    struct gpu_adamw *a = static_cast<struct gpu_adamw *>(calloc(1, sizeof(struct gpu_adamw)));
    CHECK(a != nullptr, "out of host memory");
    a->n_chunks = (int)chunks.size();
    a->norm_only = norm_only;
    for (int k = 0; k < 2; k++) /* one dtype: its list is the whole table, one launch as with fp32 alone */
        a->lists[k] = by_grad[1 - k].empty() ? chunk_list{nullptr, a->n_chunks} : upload_list(by_grad[k]);
    std::vector<tensor_desc> descs(count);
    for (int t = 0; t < count; t++) {
        const gpu_adamw_param &q = params[t];
        const bool al = ((uintptr_t)q.master | (uintptr_t)q.m | (uintptr_t)q.v | (uintptr_t)q.grad) % 16 == 0 &&
                        ((uintptr_t)q.copy | (uintptr_t)q.lo | (uintptr_t)q.grad_bf16) % 8 == 0;
        CHECK(q.master_bf16 >= 0 && q.master_bf16 <= 2, "adamw tensor %d: master_bf16 %d", t, q.master_bf16);
        descs[t] = tensor_desc{q.master, reinterpret_cast<__nv_bfloat16 *>(q.copy), q.lo,
                               (q.lo || q.master_bf16) ? 1 : 0, q.master_bf16 == 2 ? 1 : 0, q.sr_seed, q.sr_tensor,
                               q.m, q.v, q.grad, q.grad_bf16, q.n, q.decay, (q.n % 4 == 0 && al) ? 1 : 0};
    }
    CUDA_CHECK(cudaMalloc(&a->d_params, sizeof(tensor_desc) * count));
    CUDA_CHECK(cudaMalloc(&a->d_chunks, sizeof(chunk_ref) * chunks.size()));
    CUDA_CHECK(cudaMalloc(&a->d_partials, sizeof(float) * chunks.size()));
    CUDA_CHECK(cudaMalloc(&a->d_norm_coef, 2 * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(a->d_params, descs.data(), sizeof(tensor_desc) * count, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(a->d_chunks, chunks.data(), sizeof(chunk_ref) * chunks.size(), cudaMemcpyHostToDevice));
    return a;
}

extern "C" struct gpu_adamw *build_gpu_adamw_sharded(const struct gpu_adamw_param *params, int count,
                                                     const struct shard_piece *pieces, int n_pieces, float *master,
                                                     float *m, float *v, const float *grad) {
    CHECK((master && m && v) || (!master && !m && !v), "adamw sharded: master, m, v all or none");
    /* the whole model's chunk table, the tensors without state of their own */
    std::vector<gpu_adamw_param> stateless(params, params + count);
    for (auto &q : stateless) {
        CHECK(q.lo == nullptr && !q.master_bf16, "adamw sharded: split masters and bf16 weights are not sharded");
        CHECK(!(grad && q.grad_bf16),
              "adamw sharded: tensor %d has a bf16 gradient (grad_bf16), which is not combined with a flat sharded "
              "fp32 gradient (grad): give the tensors fp32 gradients, or grad = NULL",
              (int)(&q - stateless.data()));
        q.master = q.m = q.v = nullptr, q.copy = nullptr;
    }
    struct gpu_adamw *a = build_gpu_adamw(stateless.data(), count);
    /* the descriptors keep the copies (the update writes this rank's part of them) */
    if (master) {
        std::vector<tensor_desc> descs(count);
        CUDA_CHECK(cudaMemcpy(descs.data(), a->d_params, sizeof(tensor_desc) * count, cudaMemcpyDeviceToHost));
        for (int t = 0; t < count; t++) {
            descs[t].copy = reinterpret_cast<__nv_bfloat16 *>(params[t].copy);
            if ((uintptr_t)params[t].copy % 8 != 0) descs[t].vec4 = 0; /* as build_gpu_adamw decides */
        }
        CUDA_CHECK(cudaMemcpy(a->d_params, descs.data(), sizeof(tensor_desc) * count, cudaMemcpyHostToDevice));
    }
    std::vector<int64_t> first(count + 1, 0); /* the first chunk of each tensor */
    for (int t = 0; t < count; t++) first[t + 1] = first[t] + (params[t].n + kChunk - 1) / kChunk;
    std::vector<int32_t> own[2]; /* by gradient dtype, as gpu_adamw.lists */
    std::vector<int64_t> state(a->n_chunks, -1);
    for (int k = 0; k < n_pieces; k++) {
        const shard_piece &p = pieces[k];
        CHECK(p.tensor >= 0 && p.tensor < count && p.lo % kChunk == 0 && p.lo < p.hi && p.hi <= params[p.tensor].n &&
                  p.off % 4 == 0,
              "adamw sharded: piece %d (tensor %d [%lld, %lld) at %lld)", k, p.tensor, (long long)p.lo,
              (long long)p.hi, (long long)p.off);
        for (int64_t s = p.lo; s < p.hi; s += kChunk) {
            const int64_t ci = first[p.tensor] + s / kChunk;
            own[params[p.tensor].grad_bf16 ? kGradBf16 : kGradFp32].push_back((int32_t)ci);
            state[ci] = p.off + (s - p.lo);
        }
    }
    a->sharded = true;
    a->norm_only = master == nullptr;
    for (int k = 0; k < 2; k++) {
        free_list(&a->lists[k]);
        a->lists[k] = upload_list(own[k]);
    }
    a->master = master, a->m = m, a->v = v, a->grad = grad;
    CUDA_CHECK(cudaMalloc(&a->d_state_off, sizeof(int64_t) * state.size()));
    CUDA_CHECK(cudaMemcpy(a->d_state_off, state.data(), sizeof(int64_t) * state.size(), cudaMemcpyHostToDevice));
    if (!master && !grad) { /* the norm alone, of the tensors' gradients: no state offsets are read */
        CUDA_CHECK(cudaFree(a->d_state_off));
        a->d_state_off = nullptr;
    }
    return a;
}

extern "C" void free_gpu_adamw(struct gpu_adamw *a) {
    if (!a) return;
    for (chunk_list &l : a->lists) free_list(&l);
    if (a->d_state_off) CUDA_CHECK(cudaFree(a->d_state_off));
    CUDA_CHECK(cudaFree(a->d_params));
    CUDA_CHECK(cudaFree(a->d_chunks));
    CUDA_CHECK(cudaFree(a->d_partials));
    CUDA_CHECK(cudaFree(a->d_norm_coef));
    free(a);
}

/* The partial sums of squares of the chunks of a->lists (gs: where the fp32 gradients are read). */
static void chunk_sumsq(struct gpu_adamw *a, grad_source gs, cudaStream_t stream) {
    const chunk_list &f = a->lists[kGradFp32], &b = a->lists[kGradBf16];
    if (f.n > 0) {
        adamw_chunk_sumsq<float><<<f.n, kBlock, 0, stream>>>(a->d_partials, a->d_params, a->d_chunks, f.own, gs);
        KERNEL_CHECK(stream);
    }
    if (b.n > 0) {
        adamw_chunk_sumsq<uint16_t><<<b.n, kBlock, 0, stream>>>(a->d_partials, a->d_params, a->d_chunks, b.own, gs);
        KERNEL_CHECK(stream);
    }
}

/* The norm and clip coefficient; in the sharded form from the partials as the caller completed them. */
static void norm_and_coef(struct gpu_adamw *a, float max_norm, cudaStream_t stream) {
    if (!a->sharded) chunk_sumsq(a, grad_source{nullptr, nullptr}, stream);
    adamw_finish_norm<<<1, kBlock, 0, stream>>>(a->d_norm_coef, a->d_partials, a->n_chunks, max_norm);
    KERNEL_CHECK(stream);
}

extern "C" float *gpu_adamw_partials(struct gpu_adamw *a, int64_t *n_chunks, cudaStream_t stream) {
    CHECK(a->sharded, "adamw: partial sums are the sharded form's");
    CUDA_CHECK(cudaMemsetAsync(a->d_partials, 0, sizeof(float) * (size_t)a->n_chunks, stream));
    chunk_sumsq(a, grad_source{a->grad, a->d_state_off}, stream);
    *n_chunks = a->n_chunks;
    return a->d_partials;
}

extern "C" void gpu_adamw_grad_norm(struct gpu_adamw *a, float *grad_norm, cudaStream_t stream) {
    norm_and_coef(a, 0.0f, stream);
    CUDA_CHECK(cudaMemcpyAsync(grad_norm, a->d_norm_coef, sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

extern "C" const float *gpu_adamw_norm_and_coef(struct gpu_adamw *a, double max_grad_norm, cudaStream_t stream) {
    norm_and_coef(a, max_grad_norm > 0 ? (float)max_grad_norm : 0.0f, stream);
    return a->d_norm_coef;
}

extern "C" void gpu_adamw_step(struct gpu_adamw *a, const struct optim_step *st, const double *guard,
                               float *grad_norm, cudaStream_t stream) {
    CHECK(!a->norm_only, "adamw: built without optimizer state (norm only)");
    CHECK(st->step >= 1, "adamw step %lld must be >= 1", (long long)st->step);
    const adamw_hparams *h = &st->hp;
    CHECK(h->beta1 >= 0 && h->beta1 < 1 && h->beta2 >= 0 && h->beta2 < 1 && h->eps > 0 && h->lr >= 0,
          "adamw hyperparameters out of range: lr=%g beta1=%g beta2=%g eps=%g", h->lr, h->beta1, h->beta2, h->eps);
    const bool clip = st->clip > 0;
    if (clip || grad_norm) norm_and_coef(a, clip ? (float)st->clip : 0.0f, stream);
    const double t = (double)st->step;
    const double bc1 = 1.0 - pow(h->beta1, t), bc2 = 1.0 - pow(h->beta2, t);
    step_scalars s;
    s.decay_factor = (float)(1.0 - h->lr * h->weight_decay);
    s.one_minus_beta1 = (float)(1.0 - h->beta1);
    s.beta2 = (float)h->beta2;
    s.one_minus_beta2 = (float)(1.0 - h->beta2);
    s.neg_step_size = (float)(-(h->lr / bc1));
    s.bc2_sqrt = (float)pow(bc2, 0.5); /* as ref/adamw.c, to the last bit */
    s.eps = (float)h->eps;
    s.step = st->step;
    const chunk_list &f = a->lists[kGradFp32], &b = a->lists[kGradBf16];
    if (f.n > 0) {
        const shard_state sh = {f.own, a->d_state_off, a->master, a->m, a->v, a->grad};
        adamw_chunk_update<float><<<f.n, kBlock, 0, stream>>>(a->d_params, a->d_chunks, a->d_norm_coef, clip ? 1 : 0,
                                                              (clip || grad_norm) ? 1 : 0, guard, s, sh);
        KERNEL_CHECK(stream);
    }
    if (b.n > 0) {
        const shard_state sh = {b.own, a->d_state_off, a->master, a->m, a->v, a->grad};
        adamw_chunk_update<uint16_t><<<b.n, kBlock, 0, stream>>>(a->d_params, a->d_chunks, a->d_norm_coef,
                                                                 clip ? 1 : 0, (clip || grad_norm) ? 1 : 0, guard, s,
                                                                 sh);
        KERNEL_CHECK(stream);
    }
    if (grad_norm)
        CUDA_CHECK(cudaMemcpyAsync(grad_norm, a->d_norm_coef, sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

extern "C" void gpu_master_pair_split(uint16_t *hi, uint16_t *lo, const float *x, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    const int64_t b = (n + 255) / 256;
    pair_split_kernel<<<(unsigned)(b < 4096 ? b : 4096), 256, 0, stream>>>(hi, lo, x, n);
    KERNEL_CHECK(stream);
}
