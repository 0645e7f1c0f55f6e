/* attention_sm90.cuh — the Hopper (sm_90a) building blocks of the attention kernels, private to
 * gpu/attention_sm90_{fwd,bwd,probe}.cu: inline PTX for the mbarrier, the tensor-copy engine (TMA,
 * cp.async.bulk), warpgroup MMA (wgmma) and the warpgroup register split, the tensor maps (host),
 * the warpgroup GEMMs every kernel issues (one function per operand arrangement, shared with the
 * probes that test them alone), and a watchdog on every wait.
 *
 * Raw PTX rather than CUTLASS/CuTe: the kernels need five GEMM shapes and one tile layout (128-byte
 * swizzled column blocks of 64, attention_sm90_layout.h); written out, the index math is a few pure
 * functions that the CPU test checks, the build needs no third-party headers and compiles in
 * seconds on a 2-core machine, and every instruction is visible here.
 *
 * Device code exists only in the sm_90a pass (ATTN_SM90_ENABLED); the sm_80 pass sees kernels with
 * empty bodies that are never launched there (gpu/attention.cu dispatches by the kernel's binary
 * version).
 *
 * Watchdog (tests): with a HangRecord, a wait that has not completed after 4–9 s of %globaltimer
 * (a legitimate wait lasts microseconds) records where it was and gives up, and every other wait of
 * the launch then gives up at once, so the kernel ends with garbage outputs that the test reports
 * next to the record instead of hanging the GPU run. Without one (production) the waits wait: a
 * trap in the consumers' loops costs them ~60 registers of spills (ptxas), so there is none.
 */
#ifndef REFINE_GPU_ATTENTION_SM90_CUH
#define REFINE_GPU_ATTENTION_SM90_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu/attention_internal.h"
#include "gpu/attention_sm90_layout.h"
#include "gpu/cuda_check.h"
#include "gpu/vec.cuh"
#include "io/check.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_SM90_ENABLED 1
#endif

namespace refine {
namespace attn90 {

/* The register split of the 384-thread kernels: a CTA launched with __launch_bounds__(384, 1) holds
 * 168 registers a thread (65536 / 384, rounded down to 8); setmaxnreg moves registers between the
 * warpgroups of that allocation only, so the producer's and the consumers' counts must fit in it
 * (a consumer asking for more would wait forever). */
constexpr int kRegsProducer = 40, kRegsConsumer = 232;
static_assert(128 * kRegsProducer + 256 * kRegsConsumer <= 168 * 384, "register split beyond the CTA's allocation");

/* Named barriers (id 0 is __syncthreads); BAR_STORE0 + c: consumer c of the whole-head forward
 * writing its rows into its staging tile. */
enum { BAR_SCHED0 = 1, BAR_SCHED1 = 2, BAR_DS = 3, BAR_DS_FREE = 4, BAR_STORE0 = 5 };

/* Watchdog codes: which wait hung (HangRecord.code). */
enum {
    HANG_FWD_Q_FULL = 1, HANG_FWD_Q_EMPTY, HANG_FWD_K_FULL, HANG_FWD_K_EMPTY, HANG_FWD_V_FULL, HANG_FWD_V_EMPTY,
    HANG_BWD_KV_FULL = 11, HANG_BWD_Q_FULL, HANG_BWD_Q_EMPTY, HANG_BWD_DQ_FULL, HANG_BWD_DQ_EMPTY, HANG_BWD_SEM,
    HANG_PROBE = 21
};

/* Host: a 4-D bf16 tensor map over a (B, T, NH, D) row-major tensor, dims {D, NH, T, B}, box
 * {64, 1, box_rows, 1}, 128-byte swizzle, out-of-range rows read as zeros. */
/* rows (b, t) at ld elements (0: NH·D, packed) */
void make_tmap(CUtensorMap *map, const void *base, int B, int T, int NH, int D, int box_rows, int64_t ld = 0);

/* Two floats rounded to bf16 (RNE), low half first. */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

#if !defined(__CUDA_ARCH__) || defined(ATTN_SM90_ENABLED)

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* ---- mbarrier ---- */
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ uint32_t mbar_try_wait(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return ok;
}

/* The watchdog's slow path, called every try that failed: 1 while the wait should go on, 0 when it
 * must give up (it timed out, or another wait of the launch did). Kept small: it is inlined into
 * every wait of the consumers' loops, whose registers belong to the accumulators. */
__device__ __forceinline__ int watchdog(uint32_t &spins, uint32_t &t0, HangRecord *dbg, int code, int info) {
    if (dbg == nullptr || (++spins & 1023u) != 0) return 1;
    if (*reinterpret_cast<volatile int *>(&dbg->hung) != 0) return 0;
    uint32_t now;
    asm volatile("mov.u32 %0, %%globaltimer_hi;\n" : "=r"(now)); /* units of 2^32 ns ≈ 4.3 s */
    if (spins == 1024u) t0 = now;
    if (now - t0 < 2u) return 1; /* 4.3 to 8.6 s */
    volatile int *rec = reinterpret_cast<volatile int *>(dbg);
    rec[1] = code;
    rec[2] = (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
    rec[3] = (int)threadIdx.x;
    rec[4] = info;
    rec[0] = 1;
    return 0;
}

/* Waits for the phase of `bar` with the given parity to complete. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity, HangRecord *dbg, int code, int info) {
    uint32_t spins = 0, t0 = 0;
    while (!mbar_try_wait(bar, parity))
        if (!watchdog(spins, t0, dbg, code, info)) return;
}

/* mbar_wait for a thread that is not on a critical path (a producer a stage ahead): each try suspends
 * the warp until the phase completes or ~1 ms passes (try_wait's suspend-time hint), so that it
 * issues nothing meanwhile — a spinning wait, even with a sleep between tries (which the hardware
 * cut to ~35 ns), took a fifth of a forward's instructions. */
__device__ __forceinline__ uint32_t mbar_try_wait_suspend(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity), "n"(1000000)
        : "memory");
    return ok;
}
__device__ __forceinline__ void mbar_wait_suspend(uint32_t bar, uint32_t parity, HangRecord *dbg, int code, int info) {
    uint32_t spins = 0, t0 = 0;
    while (!mbar_try_wait_suspend(bar, parity))
        if (!watchdog(spins, t0, dbg, code, info)) return;
}

/* One arrival per warp (the barriers' counts are in warps): the warp's lanes are done first. */
__device__ __forceinline__ void warp_arrive(uint32_t bar) {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive(bar);
}

/* ---- tensor-copy engine ---- */
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, int c3,
                                            uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5}], [%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}

/* A rows × D tile (rows = the map's box rows) of head `head`, rows row0 …, batch b, as D/64 swizzled
 * column blocks at dst. */
template <int D>
__device__ __forceinline__ void tma_load_tile(uint32_t dst, const CUtensorMap *map, int rows, int head, int row0, int b,
                                              uint32_t bar) {
#pragma unroll
    for (int c = 0; c < D / 64; c++) tma_load_4d(dst + (uint32_t)(c * rows * 128), map, 64 * c, head, row0, b, bar);
}

/* A swizzled tile in shared memory → the box of `map` at (c0, c1, c2, c3) in global memory (rows past
 * the tensor's end are not written); completed by bulk_wait_read_all / bulk_wait_all. */
__device__ __forceinline__ void tma_store_4d(const CUtensorMap *map, uint32_t src, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

/* Plain bulk copy global → shared (16-byte aligned, a multiple of 16 bytes). */
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
                 : "memory");
}
/* Bulk copy / fp32 add shared → global, completed by bulk_wait_all. */
__device__ __forceinline__ void bulk_s2g(void *dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(reinterpret_cast<uint64_t>(dst)),
                 "r"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_s2g_add_f32(void *dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                     reinterpret_cast<uint64_t>(dst)),
                 "r"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/* This thread's bulk copies have read their shared-memory sources (which may then be written again). */
__device__ __forceinline__ void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

/* Ordinary shared-memory stores before reads by the tensor cores or the copy engine (async proxy). */
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

/* ---- counters in global memory (the dQ order of the backward) ---- */
__device__ __forceinline__ int ld_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release_add(int *p, int v) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/* ---- named barriers, register split ---- */
__device__ __forceinline__ void named_bar_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* ---- math ---- */
/* 2^x, ex2.approx.ftz (relative error ~2^-22; subnormal results flush to 0): the softmax
 * exponentials, covered by tests/parity/attention_parity.cu. */
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* ---- wgmma ---- */
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Tells the compiler that the registers change here (after a wgmma wait: the asynchronous MMA wrote
 * them), so no access to them moves across. */
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) asm volatile("" : "+r"(r[i][j])::"memory");
}

/* wgmma.mma_async m64nNk16, fp32 += bf16 · bf16. SS: A and B by descriptor, TA/TB = 1 for an MN-major
 * operand. RS: A from registers (attention_sm90_layout.h §3), B by descriptor. accumulate = 0
 * overwrites d. */
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB));
}

template <int TB>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TB));
}

template <int TB>
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TB));
}


template <int N, int TA, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate) {
    if constexpr (N == 64) wgmma_ss_n64<TA, TB>(d, da, db, accumulate);
    else wgmma_ss_n128<TA, TB>(d, da, db, accumulate);
}
template <int N, int TB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int accumulate) {
    if constexpr (N == 64) wgmma_rs_n64<TB>(d, a, db, accumulate);
    else wgmma_rs_n128<TB>(d, a, db, accumulate);
}

/* ---- the warpgroup GEMMs of the kernels (issue only: the caller fences, commits and waits) ---- */

/* d (64 × N) = A · Bᵀ, A = rows a_row0 … of a K-major tile (a_rows rows, D columns), B = rows
 * b_row0 … b_row0 + N of a K-major tile (b_rows rows): forward S = Q·Kᵀ, backward Sᵀ = K·Qᵀ and
 * dPᵀ = V·dOᵀ. */
template <int N, int D>
__device__ __forceinline__ void gemm_abt(float (&d)[N / 2], uint32_t a_tile, int a_rows, int a_row0, uint32_t b_tile,
                                         int b_rows, int b_row0) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
        wgmma_ss<N, 0, 0>(d, desc_kmajor(a_tile, (uint32_t)a_rows, (uint32_t)a_row0, (uint32_t)ks),
                          desc_kmajor(b_tile, (uint32_t)b_rows, (uint32_t)b_row0, (uint32_t)ks), ks > 0);
}

/* d (64 × N) += A · B, A in registers (KS k-steps: the accumulators of a 64 × 16·KS product), B the
 * first KS·16 rows (k) × N columns of a tile of BROWS rows, MN-major: forward O += P·V (KS < BROWS/16:
 * the half block), backward dV += Pᵀ·dO and dK += dSᵀ·Q. */
template <int N, int KS, int BROWS = KS * 16>
__device__ __forceinline__ void gemm_rs(float (&d)[N / 2], const uint32_t (&a)[KS][4], uint32_t b_tile) {
    static_assert(KS * 16 <= BROWS, "more k-steps than the tile's rows");
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
        wgmma_rs<N, 1>(d, a[ks], desc_mnmajor(b_tile, (uint32_t)BROWS, 0u, (uint32_t)ks), 1);
}

/* d (64 × N) = Aᵀ · B, both from tiles of KROWS rows (the k index): A = column block a_blk (64
 * columns: the M index), B = column blocks b_blk … (N columns), both MN-major: backward dQ = dS·K
 * from the dSᵀ tile (keys × queries) and the K tile; the first k-step overwrites d. */
template <int N, int KROWS>
__device__ __forceinline__ void gemm_tn(float (&d)[N / 2], uint32_t a_tile, int a_blk, uint32_t b_tile, int b_blk) {
#pragma unroll
    for (int ks = 0; ks < KROWS / 16; ks++)
        wgmma_ss<N, 1, 1>(d, desc_mnmajor(a_tile, (uint32_t)KROWS, (uint32_t)a_blk, (uint32_t)ks),
                          desc_mnmajor(b_tile, (uint32_t)KROWS, (uint32_t)b_blk, (uint32_t)ks), ks > 0);
}

/* A registers of KS k-steps from the accumulators of a 64 × 16·KS product, rounded to bf16. */
template <int KS>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[KS][4], const float (&c)[KS * 8]) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int j = 0; j < 4; j++) a[ks][j] = pack_bf16(c[a_from_acc_index(ks, j, 0)], c[a_from_acc_index(ks, j, 1)]);
}

/* Stores the A registers of KS k-steps (a 64 × 16·KS bf16 block: attention_sm90_layout.h §3) at rows
 * row0 …, columns 0 … of a swizzled tile of `rows` rows: backward dSᵀ for the dQ product. */
template <int KS>
__device__ __forceinline__ void store_a_tile(uint32_t tile, int rows, int row0, const uint32_t (&a)[KS][4], int tid) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t off =
                tile_off((uint32_t)rows, (uint32_t)(row0 + afrag_row(tid, j)), (uint32_t)(16 * ks + afrag_k(tid, j, 0)));
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile + off), "r"(a[ks][j]) : "memory");
        }
}

#endif /* host pass or sm_90a */

} // namespace attn90
} // namespace refine

#endif /* REFINE_GPU_ATTENTION_SM90_CUH */
