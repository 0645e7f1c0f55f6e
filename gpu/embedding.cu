/* embedding.cu — embedding gather and deterministic scatter-add (gpu/embedding.h).
 *
 * Forward: one thread per 8 columns of one row (16-byte copies), grid-stride.
 * Backward: one launch, no workspace, no global sort (embedding_backward_owned below: each CTA
 * owns the ids ≡ its index mod G, scans all ids, groups its own positions with a stable block sort
 * in shared memory and sums each id's rows in ascending n onto dtable).
 *
 * Bytes it must move (N tokens, U distinct ids among them, C columns): dout once (2·N·C), each
 * touched dtable row read and written once (8·U·C), ids (4·N). The benchmark counts 8·N·C for
 * dtable (U = N); with uniform ids U/N is 0.85 at N 16384, V 49152 and 0.97 at N 8192, V 128256.
 * Extra here: each CTA reads all of ids from L2 (4·N·G bytes, G = 2 per SM: 17 MB at N 16384,
 * ~2 µs of L2 spread over the CTAs), and an id whose rows straddle rounds of kT owned positions
 * reads and writes its dtable row once a round (none at the benchmark's shapes: ≤ kT owned a CTA).
 *
 * Why the previous version ran at 46–67% of the copy rate (H100; SmolLM2 C 576, C 2048, C 4096):
 * an iota kernel, CUB's onesweep radix sort (histogram, scan and one pass per 8 bits of the id:
 * 2–3 passes, ~5 launches of a few µs each on only 8–16K items, ~15 µs) and then one CTA of 256
 * threads per sorted position, most returning at once: each summing CTA walked a chain of
 * dependent loads (sorted id, its neighbours, the row index, then the data) and at C 576 only 72
 * of its 256 threads had columns (16-byte accesses), so few bytes were in flight per SM. At
 * C 576 the ~15 µs of sort alone is half of the 31 µs the counted bytes take at the copy rate.
 * Prediction for this version (counted bytes, H100): C 576 ~78–85%, C 2048 ~82–88%, C 4096
 * ~85–92%: one launch (~3 µs), a prologue of scans and one block sort (~3–5 µs), then the data at
 * ~90% of the copy rate over the true bytes (8.8·N·C at C 576), with 1024 threads a SM each keeping
 * 48 bytes in flight.
 * A hot id (many rows of one id) is summed by one CTA with C/8 threads, 4 row loads in flight a
 * thread: correct, not fast (the previous version had the same limit).
 *
 * The bf16 accumulator (embedding_backward_owned_complete): the same CTAs, ids, rounds and adds,
 * but a bf16 row may be rounded only once, after all its rows are added, so no id may straddle two
 * rounds (the fp32 kernel stores an id's partial sum between rounds). A CTA that owns at most kT
 * positions (every CTA at the benchmark's shapes) has one round: one scan and one round, as fp32.
 * A CTA that owns more counts its ids' rows (a shared histogram of v / G; the host makes G ≥ V /
 * kHist so that it fits) and sums them in groups: ids of at most kHot rows in groups of whole ids,
 * ≤ kT positions each (one rescan of ids and one round per group); each id of more than kHot rows
 * alone, kT column vectors at a time, its fp32 sums in registers across rescans of ids (one rescan
 * per kT column vectors). More scans of ids (L2), the same dout and dtable bytes.
 * Test and benchmark: bazel test --config=gpu //tests/parity:embedding_parity
 *                     (binary) embedding_parity --bench
 */
#include "gpu/embedding.h"

#include <limits.h>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include "gpu/cuda_check.h"
#include "gpu/vec.cuh"
#include "io/check.h"

namespace refine {
namespace {

constexpr int kBlock = 256;

/* Bits that hold every value ≤ x (at least 1). */
int bits_for(unsigned x) {
    int bits = 1;
    while (bits < 32 && (x >> bits) != 0) bits++;
    return bits;
}

template <int VW>
__global__ void __launch_bounds__(kBlock) embedding_gather_rows(bf16 *__restrict__ out, const int32_t *__restrict__ ids,
                                                                const bf16 *__restrict__ table, int C, int64_t items) {
    const int gpr = C / VW;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < items; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / gpr;
        const int col = (int)(i - row * gpr) * VW;
        const bf16 *src = table + (int64_t)ids[row] * C + col;
        bf16 *dst = out + row * C + col;
        if constexpr (VW == 8)
            *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
        else
            *dst = *src;
    }
}

/* One CTA owns the ids v ≡ b (mod G) (G CTAs, 2 per SM; G ≤ V). It scans all of ids in chunks of
 * kT·kK positions, keeps the positions n it owns in ascending n (an order-preserving compaction:
 * a block exclusive scan of per-thread counts) in a ring of shared memory, and whenever kT of them
 * are waiting (and once at the end for the rest) runs a round: a stable block radix sort of the
 * round's entries by v / G (ascending n kept within each id), the runs of equal ids found by
 * comparing neighbours, then every (run, column vector) pair is a work item spread over the CTA's
 * threads: load dtable[v, cols], add the run's dout rows in ascending n, store. The rows of one id
 * meet one CTA only, in ascending n, round after round (a __syncthreads between rounds makes one
 * round's stores visible to the next's loads), so each element sees the reference's additions in
 * the reference's order whatever G is. */
constexpr int kT = 512;            /* threads of the backward CTA */
constexpr int kK = 4;              /* ids a thread scans per chunk */
constexpr int kRing = 4096;        /* ≥ kT − 1 waiting + kT·kK appended; a power of two */
constexpr int kBwdPerSm = 2;       /* CTAs per SM (registers: 64 a thread) */
static_assert(kT - 1 + kT * kK <= kRing && (kRing & (kRing - 1)) == 0, "ring too small");

using BwdSort = cub::BlockRadixSort<unsigned, kT, 1, int>;
using BwdScan = cub::BlockScan<int, kT>;

struct BwdSmem {
    int ring[kRing]; /* owned positions n, ascending, waiting for a round */
    union {
        typename BwdSort::TempStorage sort;
        typename BwdScan::TempStorage scan;
    } tmp;
    unsigned key[kT];   /* the round's v / G, sorted */
    int row[kT];        /* the round's n, in the same order */
    int start[kT + 1];  /* first sorted index of each run; start[runs] = the round's size */
};
static_assert(sizeof(BwdSmem) <= 48 * 1024, "static shared memory");

/* The accumulator's VW elements at p as fp32: fp32 as stored (two 16-byte loads for VW = 8), bf16
 * widened (exact; one 16-byte load); stores: fp32 as is, bf16 rounded once (RNE). */
template <int VW>
__device__ __forceinline__ void load_acc(float (&acc)[VW], const float *p) {
    if constexpr (VW == 8) {
        const float4 a = *reinterpret_cast<const float4 *>(p), c = *reinterpret_cast<const float4 *>(p + 4);
        acc[0] = a.x, acc[1] = a.y, acc[2] = a.z, acc[3] = a.w, acc[4] = c.x, acc[5] = c.y, acc[6] = c.z, acc[7] = c.w;
    } else {
        acc[0] = *p;
    }
}

template <int VW>
__device__ __forceinline__ void load_acc(float (&acc)[VW], const bf16 *p) {
    load_bf16<VW>(acc, p);
}

template <int VW>
__device__ __forceinline__ void store_acc(float *p, const float (&acc)[VW]) {
    if constexpr (VW == 8) {
        *reinterpret_cast<float4 *>(p) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        *reinterpret_cast<float4 *>(p + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
    } else {
        *p = acc[0];
    }
}

template <int VW>
__device__ __forceinline__ void store_acc(bf16 *p, const float (&acc)[VW]) {
    store_bf16<VW>(p, acc);
}

/* T: the accumulator's element type (float or bf16); the sums are fp32 either way. */
template <typename T, int VW>
__device__ void bwd_round(BwdSmem &sm, T *__restrict__ dtable, const bf16 *__restrict__ dout,
                          const int32_t *__restrict__ ids, int C, int G, unsigned sentinel, int end_bit, int head,
                          int m) {
    unsigned k[1] = {sentinel};
    int n[1] = {0};
    if ((int)threadIdx.x < m) {
        n[0] = sm.ring[(head + threadIdx.x) & (kRing - 1)];
        k[0] = (unsigned)ids[n[0]] / (unsigned)G;
    }
    BwdSort(sm.tmp.sort).Sort(k, n, 0, end_bit);
    sm.key[threadIdx.x] = k[0];
    sm.row[threadIdx.x] = n[0];
    __syncthreads(); /* key/row written; the sort's temporary storage free for the scan */
    const int first = k[0] != sentinel && (threadIdx.x == 0 || sm.key[threadIdx.x - 1] != k[0]);
    int idx, runs;
    BwdScan(sm.tmp.scan).ExclusiveSum(first, idx, runs);
    if (first) sm.start[idx] = threadIdx.x;
    if (threadIdx.x == 0) sm.start[runs] = m;
    __syncthreads();
    const int cv_per_row = C / VW;
    const int items = runs * cv_per_row; /* ≤ kT·C: the host CHECKs it fits an int */
    const unsigned b = blockIdx.x;
    for (int i = threadIdx.x; i < items; i += kT) {
        const int r = i / cv_per_row, col = (i - r * cv_per_row) * VW;
        const int j0 = sm.start[r], j1 = sm.start[r + 1];
        const int64_t v = (int64_t)sm.key[j0] * G + b;
        T *dst = dtable + v * C + col;
        float acc[VW];
        load_acc<VW>(acc, dst);
#pragma unroll 4
        for (int j = j0; j < j1; j++) { /* unrolled: a long run's row loads overlap, the adds stay in order */
            float x[VW];
            load_bf16<VW>(x, dout + (int64_t)sm.row[j] * C + col);
#pragma unroll
            for (int q = 0; q < VW; q++) acc[q] = __fadd_rn(acc[q], x[q]);
        }
        store_acc<VW>(dst, acc);
    }
    __syncthreads(); /* this round's stores seen by the next round; key/row/start free again */
}

/* Scans all of ids in chunks of kT·kK positions (the next chunk's loads in flight, as
 * the fp32 kernel's), appends the positions n with keep(ids[n]) to the ring at tail ... (modulo
 * kRing) in ascending n, then after a __syncthreads calls more(), which may read the ring and change
 * tail; false stops the scan. tail is the same in every thread. */
template <typename Keep, typename More>
__device__ void scan_ids(BwdSmem &sm, const int32_t *__restrict__ ids, int N, int &tail, Keep keep, More more) {
    int cur[kK];
    auto load_chunk = [&](int base) {
#pragma unroll
        for (int q = 0; q < kK; q++) {
            const int n = base + (int)threadIdx.x * kK + q;
            cur[q] = n < N ? ids[n] : -1;
        }
    };
    load_chunk(0);
    for (int base = 0; base < N; base += kT * kK) {
        int mine[kK];
        int count = 0;
#pragma unroll
        for (int q = 0; q < kK; q++) {
            mine[q] = cur[q] >= 0 && keep(cur[q]);
            count += mine[q];
        }
        if (base + kT * kK < N) load_chunk(base + kT * kK);
        int off, total;
        BwdScan(sm.tmp.scan).ExclusiveSum(count, off, total);
#pragma unroll
        for (int q = 0; q < kK; q++)
            if (mine[q]) sm.ring[(tail + off++) & (kRing - 1)] = base + (int)threadIdx.x * kK + q;
        tail += total;
        __syncthreads(); /* ring written; the scan's storage free */
        if (!more()) return;
    }
}

template <int VW>
__global__ void __launch_bounds__(kT, kBwdPerSm)
    embedding_backward_owned(float *__restrict__ dtable, const bf16 *__restrict__ dout,
                             const int32_t *__restrict__ ids, int N, int C, int G, unsigned sentinel, int end_bit) {
    __shared__ BwdSmem sm;
    const unsigned b = blockIdx.x;
    int head = 0, tail = 0; /* ring positions, the same in every thread */
    scan_ids(
        sm, ids, N, tail, [&](int id) { return (unsigned)id % (unsigned)G == b; },
        [&]() {
            while (tail - head >= kT) {
                bwd_round<float, VW>(sm, dtable, dout, ids, C, G, sentinel, end_bit, head, kT);
                head += kT;
            }
            return true;
        });
    if (tail > head) bwd_round<float, VW>(sm, dtable, dout, ids, C, G, sentinel, end_bit, head, tail - head);
}

/* The bf16 accumulator's kernel (file comment): every id's rows summed in one round, or alone. */
constexpr int kHist = 1024;   /* ids v / G a CTA can count (the host makes G ≥ V / kHist) */
constexpr int kHot = kT / 2;  /* an id with more rows is summed alone (bwd_hot_id) */
constexpr int kSpan = kT / 2; /* a group: the ids whose exclusive row prefix falls in one span */
static_assert(kSpan - 1 + kHot <= kT, "a group of ids must fit one round");
static_assert(kHist % kT == 0, "the histogram is scanned kHist / kT keys a thread");
static_assert(sizeof(BwdSmem) + sizeof(int) * kHist <= 48 * 1024, "static shared memory");

/* dtable[v, :] = bf16(f32(dtable[v, :]) + Σ rows of v in ascending n), kT column vectors at a time:
 * thread t keeps the fp32 sums of column vector cv0 + t in registers across one scan of ids. */
template <int VW>
__device__ void bwd_hot_id(BwdSmem &sm, bf16 *__restrict__ dtable, const bf16 *__restrict__ dout,
                           const int32_t *__restrict__ ids, int N, int C, int v) {
    const int cv_per_row = C / VW;
    for (int cv0 = 0; cv0 < cv_per_row; cv0 += kT) {
        const bool live = cv0 + (int)threadIdx.x < cv_per_row;
        const int col = (cv0 + (int)threadIdx.x) * VW;
        bf16 *dst = dtable + (int64_t)v * C + col;
        float acc[VW] = {};
        if (live) load_bf16<VW>(acc, dst);
        int tail = 0;
        scan_ids(
            sm, ids, N, tail, [&](int id) { return id == v; },
            [&]() {
                if (live) {
#pragma unroll 4
                    for (int j = 0; j < tail; j++) { /* ascending n, as the fp32 kernel */
                        float x[VW];
                        load_bf16<VW>(x, dout + (int64_t)sm.ring[j] * C + col);
#pragma unroll
                        for (int q = 0; q < VW; q++) acc[q] = __fadd_rn(acc[q], x[q]);
                    }
                }
                tail = 0;
                __syncthreads(); /* the ring read before the next chunk writes it */
                return true;
            });
        if (live) store_bf16<VW>(dst, acc);
    }
}

template <int VW>
__global__ void __launch_bounds__(kT, kBwdPerSm)
    embedding_backward_owned_complete(bf16 *__restrict__ dtable, const bf16 *__restrict__ dout,
                                      const int32_t *__restrict__ ids, int N, int C, int G, unsigned sentinel,
                                      int end_bit) {
    __shared__ BwdSmem sm;
    __shared__ int code[kHist]; /* per key v / G: its row count, then its group, −1 none, −2 hot */
    const unsigned b = blockIdx.x;
    auto owned = [&](int id) { return (unsigned)id % (unsigned)G == b; };

    /* At most kT owned positions: one round holds every row of every id. */
    int tail = 0;
    scan_ids(sm, ids, N, tail, owned, [&]() { return tail <= kT; });
    if (tail <= kT) {
        if (tail > 0) bwd_round<bf16, VW>(sm, dtable, dout, ids, C, G, sentinel, end_bit, 0, tail);
        return;
    }

    /* More: each key's row count (integer atomics: the same counts in any order), then groups. */
    for (int k = threadIdx.x; k < kHist; k += kT) code[k] = 0;
    __syncthreads();
    for (int n = threadIdx.x; n < N; n += kT) {
        const unsigned id = (unsigned)ids[n];
        if (id % (unsigned)G == b) atomicAdd(&code[id / (unsigned)G], 1);
    }
    __syncthreads();
    constexpr int kPer = kHist / kT;
    int cnt[kPer], rows[kPer], pre[kPer], spanned;
#pragma unroll
    for (int i = 0; i < kPer; i++) {
        cnt[i] = code[threadIdx.x * kPer + i];
        rows[i] = cnt[i] > kHot ? 0 : cnt[i];
    }
    BwdScan(sm.tmp.scan).ExclusiveSum(rows, pre, spanned);
    /* A group: the keys whose prefix lies in [g·kSpan, (g+1)·kSpan), at most kSpan − 1 + kHot rows. */
#pragma unroll
    for (int i = 0; i < kPer; i++)
        code[threadIdx.x * kPer + i] = cnt[i] == 0 ? -1 : cnt[i] > kHot ? -2 : pre[i] / kSpan;
    __syncthreads();
    const int groups = (spanned + kSpan - 1) / kSpan;
    for (int g = 0; g < groups; g++) {
        tail = 0;
        scan_ids(
            sm, ids, N, tail, [&](int id) { return owned(id) && code[(unsigned)id / (unsigned)G] == g; },
            []() { return true; });
        if (tail > 0) bwd_round<bf16, VW>(sm, dtable, dout, ids, C, G, sentinel, end_bit, 0, tail);
    }
    for (int k0 = 0; k0 < kHist; k0 += kT) {
        const int hot = code[k0 + threadIdx.x] == -2;
        int idx, nhot;
        BwdScan(sm.tmp.scan).ExclusiveSum(hot, idx, nhot);
        if (hot) sm.start[idx] = k0 + (int)threadIdx.x;
        __syncthreads();
        for (int h = 0; h < nhot; h++) bwd_hot_id<VW>(sm, dtable, dout, ids, N, C, sm.start[h] * G + (int)b);
        __syncthreads(); /* start read before the next k0 writes it */
    }
}

}  // namespace
}  // namespace refine

using namespace refine;

extern "C" void gpu_embedding_forward_bf16(uint16_t *out, const int32_t *ids, const uint16_t *table, int N, int C, int V,
                                           cudaStream_t stream) {
    CHECK(N >= 1 && C >= 1 && V >= 1, "embedding N=%d C=%d V=%d", N, C, V);
    bf16 *o = reinterpret_cast<bf16 *>(out);
    const bf16 *t = reinterpret_cast<const bf16 *>(table);
    const bool vec = C % 8 == 0 && ((uintptr_t)out & 15u) == 0 && ((uintptr_t)table & 15u) == 0;
    const int64_t items = (int64_t)N * (vec ? C / 8 : C);
    const int64_t b = (items + kBlock - 1) / kBlock;
    const int blocks = (int)(b < 4096 ? b : 4096);
    if (vec)
        embedding_gather_rows<8><<<blocks, kBlock, 0, stream>>>(o, ids, t, C, items);
    else
        embedding_gather_rows<1><<<blocks, kBlock, 0, stream>>>(o, ids, t, C, items);
    KERNEL_CHECK(stream);
}

extern "C" void gpu_embedding_backward(void *dtable, enum gemm_out dtable_type, const uint16_t *dout,
                                       const int32_t *ids, int N, int C, int V, cudaStream_t stream) {
    CHECK(N >= 1 && C >= 1 && V >= 1, "embedding N=%d C=%d V=%d", N, C, V);
    CHECK(C <= INT_MAX / kT, "embedding C=%d too wide", C);
    CHECK(dtable_type == GEMM_OUT_F32 || dtable_type == GEMM_OUT_BF16,
          "embedding dtable_type=%d is neither GEMM_OUT_F32 nor GEMM_OUT_BF16", (int)dtable_type);
    const bool bf16_acc = dtable_type == GEMM_OUT_BF16;
    const int want = kBwdPerSm * refine_sm_count();
    int G = V < want ? V : want;
    if (bf16_acc && G < (V - 1) / kHist + 1) G = (V - 1) / kHist + 1; /* every key v / G in the histogram */
    const unsigned sentinel = (unsigned)(V - 1) / (unsigned)G + 1u; /* above every v / G */
    CHECK(!bf16_acc || sentinel <= (unsigned)kHist, "embedding V=%d G=%d: %u keys", V, G, sentinel);
    const int end_bit = bits_for(sentinel);
    const bf16 *db = reinterpret_cast<const bf16 *>(dout);
    /* 16-byte vectors: with C % 8 == 0 every row of dtable (C·4 or C·2 bytes) and of dout (C·2) is
     * a multiple of 16 bytes long, and a vector starts 8 elements (32 or 16 bytes) into it, so the
     * base pointers' alignment decides, for either dtable type. */
    const bool vec = C % 8 == 0 && ((uintptr_t)dtable & 15u) == 0 && ((uintptr_t)dout & 15u) == 0;
    if (bf16_acc) {
        bf16 *dt = static_cast<bf16 *>(dtable);
        if (vec)
            embedding_backward_owned_complete<8><<<G, kT, 0, stream>>>(dt, db, ids, N, C, G, sentinel, end_bit);
        else
            embedding_backward_owned_complete<1><<<G, kT, 0, stream>>>(dt, db, ids, N, C, G, sentinel, end_bit);
    } else {
        float *dt = static_cast<float *>(dtable);
        if (vec)
            embedding_backward_owned<8><<<G, kT, 0, stream>>>(dt, db, ids, N, C, G, sentinel, end_bit);
        else
            embedding_backward_owned<1><<<G, kT, 0, stream>>>(dt, db, ids, N, C, G, sentinel, end_bit);
    }
    KERNEL_CHECK(stream);
}
