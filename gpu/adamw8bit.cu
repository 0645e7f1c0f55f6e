/* adamw8bit.cu — bitsandbytes AdamW8bit (gpu/adamw8bit.h).
 *
 * Strategy (8-bit path): one warp owns one 256-element state block at a time; lane l holds the
 * elements 4l..4l+3 and 128+4l..128+4l+3 (two 16-byte loads of grad and p, two 4-byte loads of each
 * code array), so the block maxima are a warp butterfly of fmaxf (exact and order-free, so any
 * tree gives the reference's value) with no barrier. A grid of (SMs × resident CTAs) CTAs of 8
 * warps strides over the blocks, each warp loading its next block before the arithmetic of the
 * current one. Each CTA holds its tables in shared memory (struct tables), copied from a prebuilt
 * image (gpu_adamw8bit_tables_build, once per run: the trainers) or built from the maps (~10 µs a
 * launch, which a step of 113 tensors paid 113 times):
 *   map1, map2   the maps, for the dequantization map[q] · absmax;
 *   eyt1, eyt2   the 255 encode thresholds of each map in Eytzinger (BFS) order, [1..255];
 *   th1, th2,    the fast encode's thresholds and bucket tables (below);
 *   tab1, tab2
 *   sign1        the sign bits of map1 (the code nudge), 8 words; where they are exactly the
 *                codes below their count zneg (an ascending map; each CTA checks), the fast
 *                path's nudge compares the code with zneg instead of reading them.
 * Encode (QUANT8_CUDA): for an ascending map, bitsandbytes' dQuantize<0> binary search and
 * midpoint rule return exactly the number of thresholds t_c ≤ x (ref/quant8.h
 * quant8_cuda_threshold: t_c = mid_c for odd c, the next float above mid_c for even c; NaN counts
 * none), equal to the search on every fp32 x. The count is a branch-free descent of the
 * Eytzinger tree: 8 × (load, compare, select, add); the top levels are broadcasts and the levels
 * of ≤ 32 nodes are conflict-free, where the search's pivots 127 ± 64 ± … share one bank.
 * Fast encode (gpu/adamw8bit_encode.h, tested on the CPU): each CTA also builds, per map, a byte
 * table (tab1, tab2) of the count at the bottom of each bucket of [−2, 2] (bits of |x| above 2^−23,
 * >> 17 for map1: 1537 buckets per sign; >> 16 for map2: 3073, where 2^−7-wide buckets near 1
 * would hold two thresholds) and the thresholds in order (th1, th2); the code is then
 * c0 + (x ≥ t_c0), and m/absmax1, v/absmax2 become q = m·y, q + (m − absmax·q)·y with
 * y = RN(1/absmax) per block (= the IEEE quotient, or both below every threshold; y by rcp_fast,
 * __frcp_rn's own sequence in that range). A block takes this path when both maxima lie in
 * [2^−70, 2^100] and the CTA's checks of the maps held (thresholds ascending, ≤ 1 per bucket, none
 * near 0, map1's sign bits a prefix); else the tree and IEEE division. There each quotient lies in
 * [−1, 1] or is NaN, so the count is count_by_table_unit's (encode.h): NaN → −2 by one clamp, the
 * magnitude raised to 2^−23 by a float maximum, the entry's shared address one multiply-add and one
 * shifted add, the compare one mask subtracted: 11 instructions a code and 3 for the division. The
 * codes are packed by byte permutes.
 * Square roots of the update: a thread whose 8 v all lie in [2^−101, FLT_MAX] (one fused
 * add-and-maximum each and one test) takes ptxas's own fast sequence for __fsqrt_rn there
 * (sqrt_fast: its range test per value and branch gone), else __fsqrt_rn per value.
 * Vector loads need p and grad 16-byte aligned (grad_bf16 8-byte), copy 8-byte and q1, q2 4-byte
 * aligned; otherwise (and for a short last block) the same lanes take scalar, bounds-checked
 * loads. Every fp32 operation is written with __f*_rn so that nvcc cannot contract it, and the
 * scalars (c1, c2, step_size, c2·eps, 1 − lr·wd, 1 − β) are formed on the host in fp32 exactly as
 * ref/adamw8bit.c forms them. The 32-bit path is a grid-stride elementwise kernel.
 * A bf16 gradient (grad_bf16): both kernels are instantiated for it (kBf16), which changes only the
 * gradient's loads (8 bytes for 4 elements on the vector path) and widens each value by its bits,
 * so the arithmetic sees exactly the fp32 values the widened gradient would give, and the fp32
 * instantiation is the kernel as it was.
 * The master's form (fp32 p, split pair, bf16 weights, bf16 with stochastic rounding) is a template
 * parameter of the vector kernel, and a full block decodes without per-element bounds tests; the
 * bf16 weights round by the hardware conversion with NaN made 0x7FC0 (master_pair_split_bits's
 * high half, bit for bit). The bf16-weight step is issue-bound, not memory-bound: 10 bytes an
 * element against ~131 warp instructions per 32 elements (ncu, a 16.8M-element tensor: 68.5M
 * instructions; the two IEEE operations of the update and the two table encodes are most of them):
 * 80% of copy (240 G elements/s) would need 94% of the H100's ~1.05e12 warp-instruction issue slots
 * a second (132 SMs × 4 schedulers × 1.98 GHz); it ran at ~190 G elements/s, 63% of copy, 65% of
 * the slots issued (docs/RESULTS.md, 2026-11-28, fourth session). One iteration of the main loop
 * (a full block, the table encode, the fast IEEE paths, weight decay on, every gradient finite) then
 * executed 1053 SASS instructions (sm_90a, bf16 weights and gradients: 131.6 an element;
 * stochastic rounding 1220); with the encode by buckets of ≤ 2 thresholds, the zneg nudge, the
 * byte-permute packing and one bf16 gradient layout for both load paths 929 (116.1; stochastic
 * rounding 1093); with buckets of ≤ 1 threshold, sqrt_fast and rcp_fast 857 (107.1; stochastic
 * rounding 1021; fp32 gradients the same), ≤ 80 registers, 15408 bytes of shared memory a CTA;
 * on an H200 (--bench, bf16 weights and gradients, tables prebuilt) 268M elements 1.304 → 1.16 ms
 * (48.7 → 54.6% of copy), a Llama-3.2-1B layer 0.340 → 0.305 ms.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:adamw8bit_parity
 *                     (binary) adamw8bit_parity --bench
 */
#include "gpu/adamw8bit.h"

#include <float.h>
#include <math.h>

#include <cuda_bf16.h>

#include "gpu/adamw8bit_encode.h"
#include "gpu/cuda_check.h"
#include "gpu/master_pair.cuh"
#include "io/check.h"

namespace {

namespace enc = refine::adamw8bit_encode;

constexpr int kBlock = 256; /* = the state block */
constexpr int kWarps = 8;   /* warps per CTA of the 8-bit kernel */
constexpr int kThreads = kWarps * 32;

struct scalars {
    float b1, b2, one_minus_b1, one_minus_b2, gs, step_size, c2_eps, eps_c2, decay;
    int has_decay;
    const float *norm_coef;
    const double *guard;
    int64_t step; /* t: stochastic rounding's stream */
};

/* Whether the step applies (the device scalars are finite), and its gradient scale. */
__device__ __forceinline__ bool step_applies(const scalars &s, float *gs) {
    if (s.guard && !isfinite(*s.guard)) return false;
    if (!s.norm_coef) return *gs = s.gs, true;
    if (!isfinite(s.norm_coef[0])) return false;
    *gs = s.norm_coef[1];
    return true;
}

/* Encode threshold c (0..254) of an ascending map (header comment). */
__device__ __forceinline__ float encode_threshold(const float *code, int c) {
    const float mid = __fmul_rn(__fadd_rn(code[c], code[c + 1]), 0.5f);
    if (c & 1) return mid;
    if (mid == 0.0f) return __int_as_float(1); /* the smallest positive float */
    return __int_as_float(__float_as_int(mid) + (mid > 0.0f ? 1 : -1));
}

/* Eytzinger node of sorted position c (0..254) in the complete tree of 255 nodes. */
__device__ __forceinline__ int eytzinger_node(int c) {
    const unsigned c1 = (unsigned)c + 1u;
    const int h = __ffs((int)c1) - 1; /* height above the leaves */
    return (1 << (7 - h)) + (int)(c1 >> (h + 1));
}

/* 32-bit shared-memory address of a __shared__ object (the state space ld.shared takes). */
__device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* One level of the descent below: (x ≥ eyt[i]) ? up : down for a = the address of eyt[i], in PTX so
 * that it stays one load, one compare and one select. */
__device__ __forceinline__ unsigned descend_step(unsigned a, float x, unsigned up, unsigned down) {
    unsigned r;
    asm volatile(
        "{\n\t.reg .pred p;\n\t.reg .f32 t;\n\t"
        "ld.shared.f32 t, [%1];\n\t"
        "setp.ge.f32 p, %2, t;\n\t"
        "selp.u32 %0, %3, %4, p;\n\t}"
        : "=r"(r)
        : "r"(a), "f"(x), "r"(up), "r"(down));
    return r;
}

/* The number of thresholds ≤ x (= the code): the descent i → 2i + (x ≥ eyt[i]) from i = 1, kept as
 * the byte address a = e + 4i of eyt[i] (e = the address of eyt[0]), so that each level is one
 * load, one compare, one select and one add: a' = 2a − e + 4·(x ≥ t). NaN compares false
 * everywhere and gives 0. */
__device__ __forceinline__ unsigned encode_count(unsigned e, float x) {
    const unsigned down = 0u - e, up = 4u - e;
    unsigned a = e + 4u;
#pragma unroll
    for (int d = 0; d < 8; d++) a = a + a + descend_step(a, x, up, down);
    return ((a - e) >> 2) - 256u;
}

/* A bf16 gradient is loaded as its bits (load_block) and widened when its block's turn comes
 * (widen_grads), not at the load: an operation on the prefetched registers there would wait for the
 * load and undo the prefetch. As loaded (either load path), slots 4h and 4h + 1 hold the two words of
 * elements 128h + 4·lane + 0..3 (k = 0, 1 in slot 4h, k = 2, 3 in slot 4h + 1, the lower k in the low
 * half; a missing element's half 0). Widening is ref/bf16.h's bf16_to_float (the bits shifted up):
 * exact. */
template <bool kBf16>
__device__ __forceinline__ void widen_grads(float (&g)[8]) {
    if constexpr (kBf16) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t x = __float_as_uint(g[4 * h]), y = __float_as_uint(g[4 * h + 1]);
            g[4 * h] = __uint_as_float(x << 16), g[4 * h + 1] = __uint_as_float(x & 0xFFFF0000u);
            g[4 * h + 2] = __uint_as_float(y << 16), g[4 * h + 3] = __uint_as_float(y & 0xFFFF0000u);
        }
    }
}

/* The master's form, a template parameter of the vector kernels so that each carries only its own
 * loads, stores and rounding (the runtime checks of one kernel for every form cost the bf16-weight
 * step ~40% of its time: docs/RESULTS.md, 2026-11-28, fourth session); kFormAny reads the form from
 * the tensor (the scalar-load kernels: misaligned tensors, rare). */
enum master_form { kFormAny = 0, kFormP, kFormSplit, kFormBf16, kFormSr };

template <int kForm>
__device__ __forceinline__ bool has_p(const gpu_adamw8bit_tensor &t) {
    if constexpr (kForm == kFormAny) return t.p != nullptr;
    else return kForm == kFormP;
}
template <int kForm>
__device__ __forceinline__ uint16_t *lo_of(const gpu_adamw8bit_tensor &t) {
    if constexpr (kForm == kFormAny || kForm == kFormSplit) return t.lo;
    else return nullptr;
}
template <int kForm>
__device__ __forceinline__ bool is_sr(const gpu_adamw8bit_tensor &t) {
    if constexpr (kForm == kFormAny) return t.master_bf16 == 2;
    else return kForm == kFormSr;
}

template <bool kVec, bool kBf16, int kForm>
__device__ __forceinline__ void load_block(const gpu_adamw8bit_tensor &t, int64_t blk, int lane, float (&g)[8],
                                           float (&p)[8], uint32_t (&q1w)[2], uint32_t (&q2w)[2], float *a1,
                                           float *a2) {
    const int64_t base = blk * kBlock;
    *a1 = t.absmax1[blk];
    *a2 = t.absmax2[blk];
    if (kVec && base + kBlock <= t.n) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t i = base + 128 * h + 4 * lane;
            if constexpr (kBf16) { /* the bits, widened by widen_grads */
                const uint2 u = __ldcs(reinterpret_cast<const uint2 *>(t.grad_bf16 + i));
                g[4 * h] = __uint_as_float(u.x), g[4 * h + 1] = __uint_as_float(u.y), g[4 * h + 2] = g[4 * h + 3] = 0.0f;
            } else {
                const float4 gv = __ldcs(reinterpret_cast<const float4 *>(t.grad + i));
                g[4 * h] = gv.x, g[4 * h + 1] = gv.y, g[4 * h + 2] = gv.z, g[4 * h + 3] = gv.w;
            }
            if (!has_p<kForm>(t)) { /* the pair: split masters, or bf16 weights (no low halves) */
                float w[4];
                const uint16_t *lo = lo_of<kForm>(t);
                pair_join4(__ldcs(reinterpret_cast<const uint2 *>(t.copy + i)),
                           lo ? __ldcs(reinterpret_cast<const uint2 *>(lo + i)) : make_uint2(0u, 0u), w);
                p[4 * h] = w[0], p[4 * h + 1] = w[1], p[4 * h + 2] = w[2], p[4 * h + 3] = w[3];
            } else {
                const float4 pv = __ldcs(reinterpret_cast<const float4 *>(t.p + i));
                p[4 * h] = pv.x, p[4 * h + 1] = pv.y, p[4 * h + 2] = pv.z, p[4 * h + 3] = pv.w;
            }
            q1w[h] = __ldcs(reinterpret_cast<const unsigned *>(t.q1 + i));
            q2w[h] = __ldcs(reinterpret_cast<const unsigned *>(t.q2 + i));
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) g[j] = p[j] = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        q1w[h] = q2w[h] = 0u;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int64_t i = base + 128 * h + 4 * lane + k;
            if (i < t.n) {
                if constexpr (kBf16) /* the vector load's layout (widen_grads) */
                    g[4 * h + (k >> 1)] = __uint_as_float(__float_as_uint(g[4 * h + (k >> 1)]) |
                                                          (uint32_t)t.grad_bf16[i] << (16 * (k & 1)));
                else g[4 * h + k] = t.grad[i];
                p[4 * h + k] = has_p<kForm>(t) ? t.p[i] : pair_join(t.copy[i], pair_lo(lo_of<kForm>(t), i));
                q1w[h] |= (uint32_t)t.q1[i] << (8 * k);
                q2w[h] |= (uint32_t)t.q2[i] << (8 * k);
            }
        }
    }
}

/* A CTA's tables (header comment), in shared memory: built there from the maps (build_tables), or
 * copied from a prebuilt copy in global memory (gpu_adamw8bit_tables_build). */
struct alignas(16) tables {
    float eyt1[256], eyt2[256], map1[256], map2[256];
    float th1[256], th2[256]; /* the thresholds in order, NaN at 255 */
    unsigned sign1[kWarps];
    int bad; /* the bucket table's conditions failed: the tree and IEEE division */
    uint8_t tab1[enc::entries<enc::kShiftM>], tab2[enc::entries<enc::kShiftV>];
};

/* T from the maps, by every thread of a CTA of kThreads (its barriers included). */
__device__ __forceinline__ void build_tables(tables &T, const float *m1, const float *m2) {
    const int tid = threadIdx.x, lane = tid & 31;
    T.map1[tid] = m1[tid];
    T.map2[tid] = m2[tid];
    if (tid == 0) T.bad = 0;
    __syncthreads();
    const unsigned neg = __ballot_sync(0xffffffffu, signbit(T.map1[tid]) != 0);
    if (lane == 0) T.sign1[tid >> 5] = neg;
    if (tid < 255) {
        const int node = eytzinger_node(tid);
        T.eyt1[node] = encode_threshold(T.map1, tid);
        T.eyt2[node] = encode_threshold(T.map2, tid);
    }
    /* the bucket tables (gpu/adamw8bit_encode.h): the thresholds, NaN at 255 */
    T.th1[tid] = tid < 255 ? encode_threshold(T.map1, tid) : NAN;
    T.th2[tid] = tid < 255 ? encode_threshold(T.map2, tid) : NAN;
    __syncthreads();
    for (int e = tid; e < enc::entries<enc::kShiftM>; e += kThreads)
        T.tab1[e] = (uint8_t)enc::count_sorted(T.th1, enc::entry_lowest<enc::kShiftM>((uint32_t)e));
    for (int e = tid; e < enc::entries<enc::kShiftV>; e += kThreads)
        T.tab2[e] = (uint8_t)enc::count_sorted(T.th2, enc::entry_lowest<enc::kShiftV>((uint32_t)e));
    __syncthreads();
    /* the table's conditions: thresholds ascending, none in (−2^−29, 2^−29], ≤ 1 per entry */
    bool bad = false;
    if (tid < 254) bad = !(T.th1[tid] <= T.th1[tid + 1]) || !(T.th2[tid] <= T.th2[tid + 1]);
    if (tid == 0)
        bad = bad || enc::count_sorted(T.th1, -enc::kTiny) != enc::count_sorted(T.th1, enc::kTiny) ||
              enc::count_sorted(T.th2, -enc::kTiny) != enc::count_sorted(T.th2, enc::kTiny);
    for (int e = tid; e < enc::entries<enc::kShiftM>; e += kThreads)
        bad = bad || enc::count_bound_above<enc::kShiftM>(T.tab1, T.th1, (uint32_t)e) - T.tab1[e] >
                         (unsigned)enc::kMaxPerBucket;
    for (int e = tid; e < enc::entries<enc::kShiftV>; e += kThreads)
        bad = bad || enc::count_bound_above<enc::kShiftV>(T.tab2, T.th2, (uint32_t)e) - T.tab2[e] >
                         (unsigned)enc::kMaxPerBucket;
    if (bad) T.bad = 1;
    __syncthreads();
}

/* dst = src by the CTA's threads, 16-byte words (either side shared or global; no barrier). */
__device__ __forceinline__ void copy_tables(tables *dst, const tables *src) {
    const uint4 *from = reinterpret_cast<const uint4 *>(src);
    uint4 *to = reinterpret_cast<uint4 *>(dst);
    for (int i = threadIdx.x; i < (int)(sizeof(tables) / 16); i += kThreads) to[i] = from[i];
}

/* One CTA: the tables of the maps, built as a step's CTAs would build them, written to out. */
__global__ void __launch_bounds__(kThreads) adamw8bit_build_tables(tables *out, const float *m1, const float *m2) {
    __shared__ tables T;
    build_tables(T, m1, m2);
    copy_tables(out, &T);
}

/* Slot j's moments from its codes and gradient (valid), or the padding of a short block (not
 * valid: the reference's loader pads with g = 0, code 128 for m and code 0 for v); the finite bit
 * and the running maxima. */
__device__ __forceinline__ void decode_slot(const scalars &s, float gs, const float *map1, const float *map2, float a1,
                                            float a2, const float (&g)[8], const uint32_t (&q1w)[2],
                                            const uint32_t (&q2w)[2], int j, bool valid, float (&m)[8], float (&v)[8],
                                            unsigned &finite, float &w1, float &w2) {
    if (valid) {
        const unsigned c1 = (q1w[j >> 2] >> (8 * (j & 3))) & 0xffu, c2 = (q2w[j >> 2] >> (8 * (j & 3))) & 0xffu;
        const float gj = __fmul_rn(g[j], gs);
        const bool fin = isfinite(g[j]);
        finite |= (unsigned)fin << j;
        const float mj = __fadd_rn(__fmul_rn(__fmul_rn(map1[c1], a1), s.b1), __fmul_rn(s.one_minus_b1, gj));
        const float vj = __fadd_rn(__fmul_rn(__fmul_rn(map2[c2], a2), s.b2), __fmul_rn(__fmul_rn(s.one_minus_b2, gj), gj));
        m[j] = fin ? mj : 0.0f;
        v[j] = fin ? vj : 0.0f;
    } else {
        m[j] = __fadd_rn(__fmul_rn(__fmul_rn(map1[128], a1), s.b1), __fmul_rn(s.one_minus_b1, 0.0f));
        v[j] = __fmul_rn(__fmul_rn(map2[0], a2), s.b2);
    }
    w1 = fmaxf(w1, fabsf(m[j]));
    w2 = fmaxf(w2, fabsf(v[j]));
}

/* enc::count_by_table_unit<S>(c0, t, x) with c0 and t given as 32-bit shared-memory addresses
 * (smem_addr): c0 + entry_unit<S>(x) formed as (c0 − kLo >> S + sign·buckets<S>) + (mag's bits >> S),
 * the first sum one multiply-add (in PTX: nvcc would make the product a mask and the base a third add). */
template <int S>
__device__ __forceinline__ unsigned count_unit_smem(unsigned c0, unsigned t, float x) {
    const float xc = x >= -2.0f ? x : -2.0f;
    const float mag = fmaxf(fabsf(xc), enc::kLoF);
    unsigned side, c;
    asm("mad.lo.u32 %0, %1, %2, %3;"
        : "=r"(side)
        : "r"(__float_as_uint(xc) >> 31), "n"(enc::buckets<S>), "r"(c0 - (enc::kLo >> S)));
    float th;
    asm("ld.shared.u8 %0, [%1];" : "=r"(c) : "r"(side + (__float_as_uint(mag) >> S)));
    asm("ld.shared.f32 %0, [%1];" : "=f"(th) : "r"(t + 4u * c));
    return c - enc::ge_mask(x, th);
}

/* The code nudge (ref/adamw8bit.c): a code c whose map value's sign bit differs from m's moves one
 * step towards m's side (up for m > 0, else down; the store keeps the low byte). nudge_bits reads
 * the sign bits of the map (sign1, 8 words); nudge_prefix is the same where those bits are exactly
 * the codes below zneg (an ascending map: the CTA checks it, sign_prefix). */
__device__ __forceinline__ unsigned nudge_bits(const unsigned *sign1, unsigned c, float m) {
    const bool neg_code = (sign1[c >> 5] >> (c & 31)) & 1u;
    return neg_code != (signbit(m) != 0) ? (m > 0.0f ? c + 1u : c - 1u) : c;
}
__device__ __forceinline__ unsigned nudge_prefix(unsigned c, float m, unsigned zneg) {
    return (c < zneg) != (signbit(m) != 0) ? (m > 0.0f ? c + 1u : c - 1u) : c;
}

/* Slot j's code (its low byte) into byte j & 3 of word j >> 2. */
__device__ __forceinline__ void pack_codes(const unsigned (&c)[8], uint32_t (&o)[2]) {
#pragma unroll
    for (int h = 0; h < 2; h++)
        o[h] = __byte_perm(__byte_perm(c[4 * h], c[4 * h + 1], 0x0040), __byte_perm(c[4 * h + 2], c[4 * h + 3], 0x0040),
                           0x5410);
}

/* __fsqrt_rn(v) for v in [2^−101, FLT_MAX] (bits 0x0D000000..0x7F7FFFFF, sqrt_fast_range): the
 * sequence that ptxas emits for sqrt.rn.f32 there, its fast path (MUFU.RSQ r; s = v·r, h = r/2 with
 * flush to zero; s + (v − s·s)·h), written out so that a thread whose 8 values all lie in that range
 * takes one test instead of one per value (bit for bit __fsqrt_rn there: checked on every such v). */
__device__ __forceinline__ float sqrt_fast(float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* checked on sm_90; elsewhere the intrinsic */
    float r;
    asm("{\n\t.reg .f32 r, s, h, e, n;\n\t"
        "rsqrt.approx.ftz.f32 r, %1;\n\t"
        "mul.ftz.f32 s, r, %1;\n\t"
        "mul.ftz.f32 h, r, 0f3F000000;\n\t"
        "neg.f32 n, s;\n\t"
        "fma.rn.f32 e, n, s, %1;\n\t"
        "fma.rn.f32 %0, e, h, s;\n\t}"
        : "=f"(r)
        : "f"(v));
    return r;
#else
    return __fsqrt_rn(v);
#endif
}
/* __frcp_rn(w) for w in [2^−126, 2^126) (exponent field 1..252), the range of the short division
 * (enc::kDivLo..kDivHi) among it: ptxas's sequence for rcp.rn.f32 there, its fast path (MUFU.RCP r;
 * e = −(w·r − 1) with flush to zero; r + e·r), written out so that it needs no test of its own (bit
 * for bit __frcp_rn there: checked on every such w). */
__device__ __forceinline__ float rcp_fast(float w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* checked on sm_90; elsewhere the intrinsic */
    float r;
    asm("{\n\t.reg .f32 r, t, e;\n\t"
        "rcp.approx.ftz.f32 r, %1;\n\t"
        "fma.rn.f32 t, %1, r, 0fBF800000;\n\t"
        "neg.f32 t, t;\n\t"
        "add.ftz.f32 e, t, 0f80000000;\n\t"
        "fma.rn.f32 %0, e, r, r;\n\t}"
        : "=f"(r)
        : "f"(w));
    return r;
#else
    return __frcp_rn(w);
#endif
}

/* Every input of sqrt_fast's and rcp_fast's ranges against the intrinsics (gpu_adamw8bit_fast_math_check). */
__global__ void fast_math_check(unsigned long long *bad) {
    unsigned long long n = 0;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < 0x727FFFFFull + 1; i += stride) {
        const float v = __uint_as_float(0x0D000000u + (uint32_t)i);
        n += __float_as_uint(sqrt_fast(v)) != __float_as_uint(__fsqrt_rn(v));
    }
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < 2ull * 252 * (1u << 23); i += stride) {
        const uint32_t sign = (uint32_t)(i / (252ull << 23)) << 31, rest = (uint32_t)(i % (252ull << 23));
        const float w = __uint_as_float(sign | (0x00800000u + rest)); /* exponent field 1 .. 252 */
        n += __float_as_uint(rcp_fast(w)) != __float_as_uint(__frcp_rn(w));
    }
    for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(0xffffffffu, n, o);
    if ((threadIdx.x & 31) == 0 && n) atomicAdd(bad, n);
}
/* Whether every v[j] lies in sqrt_fast's range. */
__device__ __forceinline__ bool sqrt_fast_range(const float (&v)[8]) {
    unsigned hi = 0u;
#pragma unroll
    for (int j = 0; j < 8; j++) hi = max(hi, __float_as_uint(v[j]) - 0x0D000000u);
    return hi <= 0x727FFFFFu;
}

/* Two masters rounded to bf16 (RNE, subnormals kept, every NaN 0x7FC0), packed with a in the low
 * half: master_pair_split_bits's high halves, by the hardware conversion and a NaN fix. */
__device__ __forceinline__ unsigned bf16x2_of(float a, float b) {
    const __nv_bfloat162 r = __floats2bfloat162_rn(a, b);
    unsigned w = *reinterpret_cast<const unsigned *>(&r);
    if (isnan(a)) w = (w & 0xFFFF0000u) | 0x7FC0u;
    if (isnan(b)) w = (w & 0x0000FFFFu) | 0x7FC00000u;
    return w;
}

template <bool kVec, bool kBf16, int kForm, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) adamw8bit_warp_step(gpu_adamw8bit_tensor t, scalars s) {
    __shared__ tables T;
    float gs;
    if (!step_applies(s, &gs)) return; /* uniform over the grid */
    const int tid = threadIdx.x, lane = tid & 31;
    if (t.tables) { /* the prebuilt copy */
        copy_tables(&T, static_cast<const tables *>(t.tables));
        __syncthreads();
    } else {
        build_tables(T, t.map1, t.map2);
    }
    const float *const map1 = T.map1, *const map2 = T.map2;
    const unsigned *const sign1 = T.sign1;
    /* zneg: the number of map1's sign bits; sign_prefix: they are exactly the codes below zneg */
    unsigned zneg = 0u;
#pragma unroll
    for (int w = 0; w < kWarps; w++) zneg += __popc(sign1[w]);
    bool sign_prefix = true;
#pragma unroll
    for (int w = 0; w < kWarps; w++) {
        const unsigned below = zneg > 32u * w ? zneg - 32u * w : 0u; /* codes of word w below zneg */
        sign_prefix = sign_prefix && sign1[w] == (below >= 32u ? ~0u : (1u << below) - 1u);
    }
    const bool use_table = T.bad == 0 && sign_prefix;
    const unsigned e1 = smem_addr(T.eyt1), e2 = smem_addr(T.eyt2);
    const unsigned b1 = smem_addr(T.tab1), b2 = smem_addr(T.tab2), t1 = smem_addr(T.th1), t2 = smem_addr(T.th2);

    const int64_t nblocks = (t.n + kBlock - 1) / kBlock, stride = (int64_t)gridDim.x * kWarps;
    int64_t blk = (int64_t)blockIdx.x * kWarps + (tid >> 5);
    if (blk >= nblocks) return;
    /* element e = 128·h + 4·lane + k of a block sits in slot j = 4·h + k; the next block's inputs
     * are loaded before this block's arithmetic */
    float g[8], p[8];
    uint32_t q1w[2], q2w[2];
    float a1, a2;
    load_block<kVec, kBf16, kForm>(t, blk, lane, g, p, q1w, q2w, &a1, &a2);
    for (;;) {
        const int64_t base = blk * kBlock, next = blk + stride;
        const bool full = base + kBlock <= t.n;
        widen_grads<kBf16>(g);
        float gn[8], pn[8];
        uint32_t q1n[2], q2n[2];
        float a1n = 0.0f, a2n = 0.0f;
        if (next < nblocks) load_block<kVec, kBf16, kForm>(t, next, lane, gn, pn, q1n, q2n, &a1n, &a2n);
        float m[8], v[8];
        unsigned finite = 0u; /* bit j: slot j valid with a finite gradient */
        float w1 = -FLT_MAX, w2 = -FLT_MAX; /* the reference's starting value */
        if (kVec && full) { /* every slot valid: no bounds test an element */
#pragma unroll
            for (int j = 0; j < 8; j++) decode_slot(s, gs, map1, map2, a1, a2, g, q1w, q2w, j, true, m, v, finite, w1, w2);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++)
                decode_slot(s, gs, map1, map2, a1, a2, g, q1w, q2w, j, base + 128 * (j >> 2) + 4 * lane + (j & 3) < t.n, m,
                            v, finite, w1, w2);
        }
        /* block maxima: fmaxf is exact and order-free, so any tree gives the reference's value */
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            w1 = fmaxf(w1, __shfl_xor_sync(0xffffffffu, w1, o));
            w2 = fmaxf(w2, __shfl_xor_sync(0xffffffffu, w2, o));
        }
        if (lane == 0) {
            t.absmax1[blk] = w1;
            t.absmax2[blk] = w2;
        }
        float sq[8];
        if (sqrt_fast_range(v)) {
#pragma unroll
            for (int j = 0; j < 8; j++) sq[j] = sqrt_fast(v[j]);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) sq[j] = __fsqrt_rn(v[j]);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float pj = __fadd_rn(p[j], __fmul_rn(s.step_size, __fdiv_rn(m[j], __fadd_rn(sq[j], s.c2_eps))));
            if (s.has_decay) pj = __fmul_rn(pj, s.decay);
            if (finite >> j & 1u) p[j] = pj;
        }
        /* the codes: by the bucket table and the short division where they are exact (uniform over
         * the warp), else by the tree and IEEE division */
        uint32_t o1[2], o2[2];
        if (use_table && w1 >= enc::kDivLo && w1 <= enc::kDivHi && w2 >= enc::kDivLo && w2 <= enc::kDivHi) {
            const float y1 = rcp_fast(w1), y2 = rcp_fast(w2);
            unsigned c1s[8], c2s[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                c1s[j] = nudge_prefix(count_unit_smem<enc::kShiftM>(b1, t1, enc::div_by_recip(m[j], w1, y1)), m[j], zneg);
                c2s[j] = count_unit_smem<enc::kShiftV>(b2, t2, enc::div_by_recip(v[j], w2, y2));
            }
            pack_codes(c1s, o1);
            pack_codes(c2s, o2);
        } else {
            unsigned c1s[8], c2s[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                c1s[j] = nudge_bits(sign1, encode_count(e1, __fdiv_rn(m[j], w1)), m[j]);
                c2s[j] = encode_count(e2, __fdiv_rn(v[j], w2));
            }
            pack_codes(c1s, o1);
            pack_codes(c2s, o2);
        }
        if (kVec && full) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t i = base + 128 * h + 4 * lane;
                __stcs(reinterpret_cast<unsigned *>(t.q1 + i), o1[h]);
                __stcs(reinterpret_cast<unsigned *>(t.q2 + i), o2[h]);
                if (!has_p<kForm>(t)) { /* an unchanged (non-finite gradient) master splits into its own pair */
                    uint2 hw, lw = make_uint2(0u, 0u); /* lw: split masters only (never with sr) */
                    const float pw[4] = {p[4 * h], p[4 * h + 1], p[4 * h + 2], p[4 * h + 3]};
                    if (is_sr<kForm>(t)) hw = sr_pack4(pw, sr_stream{t.sr_seed, s.step, t.sr_tensor}, i);
                    else if (kForm == kFormBf16) hw = make_uint2(bf16x2_of(pw[0], pw[1]), bf16x2_of(pw[2], pw[3]));
                    else pair_split4(pw, &hw, &lw);
                    __stcs(reinterpret_cast<uint2 *>(t.copy + i), hw);
                    if (uint16_t *lo = lo_of<kForm>(t)) __stcs(reinterpret_cast<uint2 *>(lo + i), lw);
                    continue;
                }
                __stcs(reinterpret_cast<float4 *>(t.p + i), make_float4(p[4 * h], p[4 * h + 1], p[4 * h + 2], p[4 * h + 3]));
                if (t.copy) {
                    const __nv_bfloat162 lo = __floats2bfloat162_rn(p[4 * h], p[4 * h + 1]);
                    const __nv_bfloat162 hi = __floats2bfloat162_rn(p[4 * h + 2], p[4 * h + 3]);
                    uint2 w;
                    w.x = *reinterpret_cast<const unsigned *>(&lo);
                    w.y = *reinterpret_cast<const unsigned *>(&hi);
                    __stcs(reinterpret_cast<uint2 *>(t.copy + i), w);
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int64_t i = base + 128 * (j >> 2) + 4 * lane + (j & 3);
                if (i < t.n) {
                    t.q1[i] = (uint8_t)(o1[j >> 2] >> (8 * (j & 3)));
                    t.q2[i] = (uint8_t)(o2[j >> 2] >> (8 * (j & 3)));
                    if (!has_p<kForm>(t)) {
                        if (!(finite >> j & 1u)) continue;
                        if (is_sr<kForm>(t)) t.copy[i] = sr_one(p[j], sr_stream{t.sr_seed, s.step, t.sr_tensor}, i);
                        else pair_store(t.copy, lo_of<kForm>(t), i, p[j]);
                        continue;
                    }
                    if (finite >> j & 1u) t.p[i] = p[j];
                    if (t.copy) reinterpret_cast<__nv_bfloat16 *>(t.copy)[i] = __float2bfloat16_rn(p[j]);
                }
            }
        }
        if (next >= nblocks) break;
        blk = next;
#pragma unroll
        for (int j = 0; j < 8; j++) g[j] = gn[j], p[j] = pn[j];
        q1w[0] = q1n[0], q1w[1] = q1n[1], q2w[0] = q2n[0], q2w[1] = q2n[1];
        a1 = a1n, a2 = a2n;
    }
}

/* Gradient element i as fp32: a bf16 gradient widened at once (the 32-bit kernel does not prefetch). */
template <bool kBf16>
__device__ __forceinline__ float load_grad(const gpu_adamw8bit_tensor &t, int64_t i) {
    if constexpr (kBf16) return __uint_as_float((uint32_t)t.grad_bf16[i] << 16);
    else return t.grad[i];
}

template <bool kBf16>
__global__ void __launch_bounds__(kBlock) adamw32bit_elementwise(gpu_adamw8bit_tensor t, scalars s) {
    float gs;
    if (!step_applies(s, &gs)) return;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t.n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = __fmul_rn(load_grad<kBf16>(t, i), gs);
        const float m = __fadd_rn(__fmul_rn(t.m[i], s.b1), __fmul_rn(s.one_minus_b1, g));
        const float v = __fadd_rn(__fmul_rn(t.v[i], s.b2), __fmul_rn(s.one_minus_b2, __fmul_rn(g, g)));
        const float p0 = t.p ? t.p[i] : pair_join(t.copy[i], pair_lo(t.lo, i));
        float p = __fadd_rn(p0, __fmul_rn(s.step_size, __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), s.eps_c2))));
        if (s.has_decay) p = __fmul_rn(p, s.decay);
        t.m[i] = m;
        t.v[i] = v;
        if (!t.p) {
            if (t.master_bf16 == 2) t.copy[i] = sr_one(p, sr_stream{t.sr_seed, s.step, t.sr_tensor}, i);
            else pair_store(t.copy, t.lo, i, p);
            continue;
        }
        t.p[i] = p;
        if (t.copy) reinterpret_cast<__nv_bfloat16 *>(t.copy)[i] = __float2bfloat16_rn(p);
    }
}

/* CTAs of the 8-bit kernel that fill the current device once (SMs × resident CTAs per SM). */
template <bool kVec, bool kBf16, int kForm, int kMinBlocks>
int full_grid(void) {
    static int cached[64]; /* per device; a benign race writes the same value */
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 64 && cached[dev] > 0) return cached[dev];
    const int sms = refine_sm_count();
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, adamw8bit_warp_step<kVec, kBf16, kForm, kMinBlocks>, kThreads, 0));
    const int grid = sms * (per_sm > 0 ? per_sm : 1);
    if (dev < 64) cached[dev] = grid;
    return grid;
}

template <bool kVec, bool kBf16, int kForm, int kMinBlocks>
void launch_8bit(const gpu_adamw8bit_tensor &t, const scalars &s, int64_t need, cudaStream_t stream) {
    const int fill = full_grid<kVec, kBf16, kForm, kMinBlocks>();
    const unsigned grid = (unsigned)(need < fill ? need : fill);
    adamw8bit_warp_step<kVec, kBf16, kForm, kMinBlocks><<<grid, kThreads, 0, stream>>>(t, s);
}

/* The vector kernel of t's master form, or the scalar-load kernel (any form). Resident CTAs an SM
 * (the register cap): 3 for the bf16 weights, whose kernel is issue-bound (10 bytes an element:
 * 1.58 → 1.41 ms at 268M elements, 0.405 → 0.373 ms for a Llama-3.2-1B layer's seven tensors), 2
 * for the fp32 masters (18 bytes an element, memory-bound: 3 measured 2% slower) and the split
 * ones (128 registers: 3 spills). */
template <bool kBf16>
void launch_form(const gpu_adamw8bit_tensor &t, const scalars &s, int64_t need, bool vec, cudaStream_t stream) {
    if (!vec) launch_8bit<false, kBf16, kFormAny, 2>(t, s, need, stream);
    else if (t.p) launch_8bit<true, kBf16, kFormP, 2>(t, s, need, stream);
    else if (t.lo) launch_8bit<true, kBf16, kFormSplit, 2>(t, s, need, stream);
    else if (t.master_bf16 == 2) launch_8bit<true, kBf16, kFormSr, 3>(t, s, need, stream);
    else launch_8bit<true, kBf16, kFormBf16, 3>(t, s, need, stream);
}

bool aligned(const void *p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

}  // namespace

extern "C" void gpu_adamw8bit_step(const struct gpu_adamw8bit_tensor *t, const struct gpu_adamw8bit_args *h,
                                   cudaStream_t stream) {
    CHECK(h->step >= 1 && t->n >= 0, "adamw8bit step=%lld n=%lld", (long long)h->step, (long long)t->n);
    if (t->n == 0) return;
    CHECK(t->lo || t->master_bf16 ? t->copy != nullptr && t->p == nullptr && !(t->lo && t->master_bf16)
                                  : t->p != nullptr,
          "adamw8bit: a master (p, or copy and lo, or copy alone with master_bf16)");
    CHECK(t->master_bf16 >= 0 && t->master_bf16 <= 2, "adamw8bit: master_bf16 %d", t->master_bf16);
    CHECK((t->grad != nullptr) != (t->grad_bf16 != nullptr),
          "adamw8bit: exactly one of grad (fp32) and grad_bf16 must be given (grad %p, grad_bf16 %p)",
          (const void *)t->grad, (const void *)t->grad_bf16);
    const bool bf16 = t->grad_bf16 != nullptr;
    /* fp32 scalars exactly as ref/adamw8bit.c forms them (host fp32 arithmetic, no contraction) */
    scalars s;
    const float b1 = (float)h->hp.beta1, b2 = (float)h->hp.beta2, lr = (float)h->hp.lr, eps = (float)h->hp.eps;
    const float wd = (float)h->hp.weight_decay;
    volatile float c1 = 1.0f - powf(b1, (float)h->step);
    volatile float c2 = sqrtf(1.0f - powf(b2, (float)h->step));
    volatile float neg_lr_c2 = -lr * c2;
    s.step_size = neg_lr_c2 / c1;
    s.b1 = b1, s.b2 = b2;
    s.one_minus_b1 = 1.0f - b1, s.one_minus_b2 = 1.0f - b2;
    s.gs = (float)h->gnorm_scale;
    s.c2_eps = c2 * eps;
    s.eps_c2 = eps * c2;
    volatile float lr_wd = lr * wd;
    s.decay = 1.0f - lr_wd;
    s.has_decay = wd > 0.0f;
    s.norm_coef = h->norm_coef;
    s.guard = h->guard;
    s.step = h->step;
    if (t->is_8bit) {
        CHECK(t->q1 && t->q2 && t->absmax1 && t->absmax2 && t->map1 && t->map2, "adamw8bit: 8-bit state missing");
        const int64_t blocks = (t->n + kBlock - 1) / kBlock;
        const int64_t need = (blocks + kWarps - 1) / kWarps;
        const bool vec = aligned(t->p, 16) && aligned(t->grad, 16) && aligned(t->grad_bf16, 8) && aligned(t->copy, 8) &&
                         aligned(t->lo, 8) && aligned(t->q1, 4) && aligned(t->q2, 4);
        CHECK(aligned(t->tables, 16), "adamw8bit: tables %p not 16-byte aligned", t->tables);
        if (bf16) launch_form<true>(*t, s, need, vec, stream);
        else launch_form<false>(*t, s, need, vec, stream);
    } else {
        CHECK(t->m && t->v, "adamw8bit: 32-bit state missing");
        const int64_t b = (t->n + kBlock - 1) / kBlock;
        const int grid = (int)(b < 1024 ? b : 1024);
        if (bf16) adamw32bit_elementwise<true><<<grid, kBlock, 0, stream>>>(*t, s);
        else adamw32bit_elementwise<false><<<grid, kBlock, 0, stream>>>(*t, s);
    }
    KERNEL_CHECK(stream);
}

extern "C" size_t gpu_adamw8bit_tables_bytes(void) { return sizeof(tables); }

extern "C" unsigned long long gpu_adamw8bit_fast_math_check(void) {
    unsigned long long *bad = nullptr, h = 0;
    CUDA_CHECK(cudaMalloc(&bad, sizeof *bad));
    CUDA_CHECK(cudaMemset(bad, 0, sizeof *bad));
    fast_math_check<<<4 * refine_sm_count(), 256>>>(bad);
    KERNEL_CHECK(0);
    CUDA_CHECK(cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(bad));
    return h;
}

extern "C" void gpu_adamw8bit_tables_build(void *out, const float *map1, const float *map2, cudaStream_t stream) {
    CHECK(out && map1 && map2 && aligned(out, 16), "adamw8bit tables: out %p (16-byte aligned), maps %p %p", out,
          (const void *)map1, (const void *)map2);
    adamw8bit_build_tables<<<1, kThreads, 0, stream>>>(static_cast<tables *>(out), map1, map2);
    KERNEL_CHECK(stream);
}
