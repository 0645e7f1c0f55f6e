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

template <int VW>
__device__ void bwd_round(BwdSmem &sm, float *__restrict__ dtable, const bf16 *__restrict__ dout,
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
        float *dst = dtable + v * C + col;
        float acc[VW];
        if constexpr (VW == 8) {
            const float4 a = *reinterpret_cast<const float4 *>(dst), c = *reinterpret_cast<const float4 *>(dst + 4);
            acc[0] = a.x, acc[1] = a.y, acc[2] = a.z, acc[3] = a.w, acc[4] = c.x, acc[5] = c.y, acc[6] = c.z, acc[7] = c.w;
        } else {
            acc[0] = *dst;
        }
#pragma unroll 4
        for (int j = j0; j < j1; j++) { /* unrolled: a long run's row loads overlap, the adds stay in order */
            float x[VW];
            load_bf16<VW>(x, dout + (int64_t)sm.row[j] * C + col);
#pragma unroll
            for (int q = 0; q < VW; q++) acc[q] = __fadd_rn(acc[q], x[q]);
        }
        if constexpr (VW == 8) {
            *reinterpret_cast<float4 *>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
            *reinterpret_cast<float4 *>(dst + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
        } else {
            *dst = acc[0];
        }
    }
    __syncthreads(); /* this round's stores seen by the next round; key/row/start free again */
}

template <int VW>
__global__ void __launch_bounds__(kT, kBwdPerSm)
    embedding_backward_owned(float *__restrict__ dtable, const bf16 *__restrict__ dout,
                             const int32_t *__restrict__ ids, int N, int C, int G, unsigned sentinel, int end_bit) {
    __shared__ BwdSmem sm;
    const unsigned b = blockIdx.x;
    int head = 0, tail = 0; /* ring positions, the same in every thread */
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
            mine[q] = cur[q] >= 0 && (unsigned)cur[q] % (unsigned)G == b;
            count += mine[q];
        }
        if (base + kT * kK < N) load_chunk(base + kT * kK); /* the next chunk's loads in flight */
        int off, total;
        BwdScan(sm.tmp.scan).ExclusiveSum(count, off, total);
#pragma unroll
        for (int q = 0; q < kK; q++)
            if (mine[q]) sm.ring[(tail + off++) & (kRing - 1)] = base + (int)threadIdx.x * kK + q;
        tail += total;
        __syncthreads(); /* ring written; the scan's storage free */
        while (tail - head >= kT) {
            bwd_round<VW>(sm, dtable, dout, ids, C, G, sentinel, end_bit, head, kT);
            head += kT;
        }
    }
    if (tail > head) bwd_round<VW>(sm, dtable, dout, ids, C, G, sentinel, end_bit, head, tail - head);
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

extern "C" void gpu_embedding_backward_f32(float *dtable, const uint16_t *dout, const int32_t *ids, int N, int C, int V,
                                           cudaStream_t stream) {
    CHECK(N >= 1 && C >= 1 && V >= 1, "embedding N=%d C=%d V=%d", N, C, V);
    CHECK(C <= INT_MAX / kT, "embedding C=%d too wide", C);
    const int want = kBwdPerSm * refine_sm_count();
    const int G = V < want ? V : want;
    const unsigned sentinel = (unsigned)(V - 1) / (unsigned)G + 1u; /* above every v / G */
    const int end_bit = bits_for(sentinel);
    const bf16 *db = reinterpret_cast<const bf16 *>(dout);
    if (C % 8 == 0 && ((uintptr_t)dtable & 15u) == 0 && ((uintptr_t)dout & 15u) == 0)
        embedding_backward_owned<8><<<G, kT, 0, stream>>>(dtable, db, ids, N, C, G, sentinel, end_bit);
    else
        embedding_backward_owned<1><<<G, kT, 0, stream>>>(dtable, db, ids, N, C, G, sentinel, end_bit);
    KERNEL_CHECK(stream);
}
