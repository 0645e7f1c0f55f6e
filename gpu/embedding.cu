/* embedding.cu — embedding gather and deterministic scatter-add (gpu/embedding.h).
 *
 * Forward: one thread per 8 columns of one row (16-byte copies), grid-stride.
 * Backward: (1) n = 0..N−1 written next to the ids; (2) cub::DeviceRadixSort::SortPairs on the
 * ids' low ceil(log2 V) bits — radix sort is stable, so equal ids keep ascending n; (3) one
 * block per sorted position; the blocks that start a run of equal ids sum that run: each thread
 * owns columns c ≡ threadIdx.x (mod blockDim), starts from dtable[v, c] and adds dout[n, c] for
 * the run's rows in order (coalesced row reads, 8 columns a thread with 16-byte accesses when
 * C % 8 == 0; before that, one column a thread reached 46–59% of the copy rate on an H100).
 * Blocks that do not start a run return at once.
 * Workspace: sorted ids, n before and after the sort, then CUB's temporary storage, each 256-byte
 * aligned; sized by gpu_embedding_backward_workspace_size.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:embedding_parity
 *                     (binary) embedding_parity --bench
 */
#include "gpu/embedding.h"

#include <cub/device/device_radix_sort.cuh>

#include "gpu/cuda_check.h"
#include "gpu/vec.cuh"
#include "io/check.h"

namespace refine {
namespace {

constexpr int kBlock = 256;

size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

int end_bit_for(int V) {
    int bits = 1;
    while (bits < 31 && (1ll << bits) < V) bits++;
    return bits;
}

size_t cub_temp_bytes(int N, int V) {
    size_t bytes = 0;
    const cudaError_t r = cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const int32_t *)nullptr, (int32_t *)nullptr,
                                                          (const int32_t *)nullptr, (int32_t *)nullptr, N, 0,
                                                          end_bit_for(V));
    if (r == cudaSuccess) return bytes;
    /* No device to ask (a plan made on a machine without one: the CPU test of the memory plan). An
     * upper bound of CUB's need instead: the alternate keys and values (8 bytes an item), its
     * look-back tiles (under 1 byte an item) and histograms (under 4 MiB). A real step asks again:
     * a bound too small would be refused by CUB there, loudly. */
    (void)cudaGetLastError();
    return (size_t)N * 9 + ((size_t)4 << 20);
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

__global__ void embedding_iota(int32_t *rows, int N) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) rows[i] = i;
}

/* VW = 8: 16-byte reads of dout and two float4 read-modify-writes of dtable per thread (C % 8 == 0
 * and aligned pointers); VW = 1 otherwise. Each element's additions keep the same order (rows of
 * the run in increasing n), so both paths give the same bits. */
template <int VW>
__global__ void __launch_bounds__(kBlock) embedding_sum_runs(float *__restrict__ dtable, const bf16 *__restrict__ dout,
                                                             const int32_t *__restrict__ sorted_ids,
                                                             const int32_t *__restrict__ sorted_rows, int N, int C) {
    const int start = blockIdx.x;
    const int32_t v = sorted_ids[start];
    if (start > 0 && sorted_ids[start - 1] == v) return; /* not the first of its run */
    int end = start + 1;
    while (end < N && sorted_ids[end] == v) end++;
    float *dst = dtable + (int64_t)v * C;
    for (int c = threadIdx.x * VW; c < C; c += blockDim.x * VW) {
        float acc[VW];
        if constexpr (VW == 8) {
            const float4 a = *reinterpret_cast<const float4 *>(dst + c), b = *reinterpret_cast<const float4 *>(dst + c + 4);
            acc[0] = a.x, acc[1] = a.y, acc[2] = a.z, acc[3] = a.w, acc[4] = b.x, acc[5] = b.y, acc[6] = b.z, acc[7] = b.w;
        } else {
            acc[0] = dst[c];
        }
        for (int j = start; j < end; j++) {
            float x[VW];
            load_bf16<VW>(x, dout + (int64_t)sorted_rows[j] * C + c);
#pragma unroll
            for (int k = 0; k < VW; k++) acc[k] = __fadd_rn(acc[k], x[k]);
        }
        if constexpr (VW == 8) {
            *reinterpret_cast<float4 *>(dst + c) = make_float4(acc[0], acc[1], acc[2], acc[3]);
            *reinterpret_cast<float4 *>(dst + c + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
        } else {
            dst[c] = acc[0];
        }
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

extern "C" size_t gpu_embedding_backward_workspace_size(int N, int V) {
    CHECK(N >= 1 && V >= 1, "embedding N=%d V=%d", N, V);
    return 3 * round256((size_t)N * 4) + round256(cub_temp_bytes(N, V));
}

extern "C" void gpu_embedding_backward_f32(float *dtable, const uint16_t *dout, const int32_t *ids, int N, int C, int V,
                                           void *workspace, cudaStream_t stream) {
    CHECK(N >= 1 && C >= 1 && V >= 1, "embedding N=%d C=%d V=%d", N, C, V);
    CHECK(((uintptr_t)workspace & 255u) == 0, "embedding workspace must be 256-byte aligned");
    unsigned char *ws = static_cast<unsigned char *>(workspace);
    const size_t part = round256((size_t)N * 4);
    int32_t *sorted_ids = reinterpret_cast<int32_t *>(ws);
    int32_t *rows = reinterpret_cast<int32_t *>(ws + part);
    int32_t *sorted_rows = reinterpret_cast<int32_t *>(ws + 2 * part);
    void *temp = ws + 3 * part;
    size_t temp_bytes = cub_temp_bytes(N, V);
    embedding_iota<<<(N + kBlock - 1) / kBlock < 1024 ? (N + kBlock - 1) / kBlock : 1024, kBlock, 0, stream>>>(rows, N);
    KERNEL_CHECK(stream);
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, ids, sorted_ids, rows, sorted_rows, N, 0,
                                               end_bit_for(V), stream));
    KERNEL_CHECK(stream);
    const bf16 *db = reinterpret_cast<const bf16 *>(dout);
    if (C % 8 == 0 && ((uintptr_t)dtable & 15u) == 0 && ((uintptr_t)dout & 15u) == 0)
        embedding_sum_runs<8><<<N, kBlock, 0, stream>>>(dtable, db, sorted_ids, sorted_rows, N, C);
    else
        embedding_sum_runs<1><<<N, kBlock, 0, stream>>>(dtable, db, sorted_ids, sorted_rows, N, C);
    KERNEL_CHECK(stream);
}
