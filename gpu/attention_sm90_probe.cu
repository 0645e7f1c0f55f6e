/* attention_sm90_probe.cu — the warpgroup GEMMs of the Hopper attention kernels, one at a time
 * (attention_internal.h, attn90_probe), for tests/parity/attention_parity.cu: when an attention
 * case fails, the probe that fails with it names the operand layout that is wrong.
 *
 * One CTA of two warpgroups (the two consumers of the real kernels, cw = 0, 1); thread 0 loads the
 * operand tiles with the tensor-copy engine exactly as the kernels do (make_tmap, tma_load_tile,
 * 128-byte swizzle); register operands and the shared-memory dSᵀ tile are formed by the kernels' own
 * helpers (acc_to_a, store_a_tile) from accumulator-shaped registers filled with the input, and the
 * products are issued by the kernels' gemm_* functions with the kernels' arguments. Results go out in
 * the accumulator layout (acc_row, acc_col) or, for dQ, in the dQ tile order.
 */
#include "gpu/attention_sm90.cuh"
#include "gpu/attention_switch.h"

namespace refine {
namespace attn90 {

struct ProbeParams {
    CUtensorMap ta, tb;
    float *c;
    const __nv_bfloat16 *a; /* register / shared-memory operand source (PV, DKV, DQ) */
    int which, a_cols;      /* a's columns (PV: 128; DKV, DQ: BM) */
    int b_rows;             /* the TMA-loaded b's rows (SDP, DKV: BM; else 128) */
    HangRecord *dbg;
};

template <int D>
__global__ void __launch_bounds__(256, 1) attn90_probe_kernel(const __grid_constant__ ProbeParams p) {
#ifdef ATTN_SM90_ENABLED
    constexpr int BM = BwdTile<D>::BM;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sA = base, sB = base + 32768, sT = base + 65536, bar = base + 98304;
    const int cw = threadIdx.x / 128, tid = threadIdx.x % 128;
    const bool a_by_tma = p.which == ATTN_PROBE_QK || p.which == ATTN_PROBE_SDP;
    const int b_rows = p.b_rows;
    if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        mbar_fence_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_expect_tx(bar, (uint32_t)((a_by_tma ? 128 * D * 2 : 0) + b_rows * D * 2));
        if (a_by_tma) tma_load_tile<D>(sA, &p.ta, 128, 0, 0, 0, bar);
        tma_load_tile<D>(sB, &p.tb, b_rows, 0, 0, 0, bar);
    }
    mbar_wait(bar, 0, p.dbg, HANG_PROBE, p.which);
    auto A = [&](int r, int k) { return __bfloat162float(p.a[r * p.a_cols + k]); };

    if (p.which == ATTN_PROBE_QK) { /* forward S: c (128 × 128) = a · bᵀ */
        float s[64];
        wgmma_fence();
        gemm_abt<128, D>(s, sA, 128, 64 * cw, sB, 128, 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
        for (int i = 0; i < 64; i++) p.c[(64 * cw + acc_row(tid, i)) * 128 + acc_col(tid, i)] = s[i];
    } else if (p.which == ATTN_PROBE_PV) { /* forward O: c (128 × D) = a (128 × 128) · b */
        float s[64], o[D / 2];
        for (int i = 0; i < 64; i++) s[i] = A(64 * cw + acc_row(tid, i), acc_col(tid, i));
        for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
        uint32_t pa[8][4];
        acc_to_a<8>(pa, s);
        wgmma_fence();
        gemm_rs<D, 8>(o, pa, sB);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(pa);
        for (int i = 0; i < D / 2; i++) p.c[(64 * cw + acc_row(tid, i)) * D + acc_col(tid, i)] = o[i];
    } else if (p.which == ATTN_PROBE_SDP) { /* backward Sᵀ: c (128 × BM) = a (128 keys × D) · bᵀ, keys 64cw … */
        float s[BM / 2];
        wgmma_fence();
        gemm_abt<BM, D>(s, sA, 128, 64 * cw, sB, BM, 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);
        for (int i = 0; i < BM / 2; i++) p.c[(64 * cw + acc_row(tid, i)) * BM + acc_col(tid, i)] = s[i];
    } else { /* DKV, DQ: a (128 × BM) as A registers of the warpgroup's 64 rows (keys) */
        float s[BM / 2];
        for (int i = 0; i < BM / 2; i++) s[i] = A(64 * cw + acc_row(tid, i), acc_col(tid, i));
        uint32_t pa[BM / 16][4];
        acc_to_a<BM / 16>(pa, s);
        if (p.which == ATTN_PROBE_DKV) { /* c (128 × D) = a · b, b (BM × D) */
            float d[D / 2];
            for (int i = 0; i < D / 2; i++) d[i] = 0.0f;
            wgmma_fence();
            gemm_rs<D, BM / 16>(d, pa, sB);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(d);
            fence_regs(pa);
            for (int i = 0; i < D / 2; i++) p.c[(64 * cw + acc_row(tid, i)) * D + acc_col(tid, i)] = d[i];
        } else { /* DQ: a stored as the dSᵀ tile; c (dQ tile order) = aᵀ · b, b (128 × D) */
            store_a_tile<BM / 16>(sT, 128, 64 * cw, pa, tid);
            fence_proxy_async_smem();
            named_bar_sync(BAR_DS, 256);
            float dq[32];
            wgmma_fence();
            gemm_tn<64, 128>(dq, sT, D == 128 ? 0 : cw, sB, D == 128 ? cw : 0);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(dq);
            for (int i = 0; i < 32; i++) p.c[dq_tile_index(cw, tid, i)] = dq[i];
        }
    }
#endif
}

template <int D>
static void probe_launch(enum AttnProbe which, float *c, const uint16_t *a, const uint16_t *b, cudaStream_t stream,
                         HangRecord *dbg) {
    constexpr int BM = BwdTile<D>::BM;
    ProbeParams p;
    p.c = c;
    p.a = reinterpret_cast<const __nv_bfloat16 *>(a);
    p.which = which;
    p.a_cols = which == ATTN_PROBE_DKV || which == ATTN_PROBE_DQ ? BM : 128;
    p.dbg = dbg;
    p.b_rows = which == ATTN_PROBE_SDP || which == ATTN_PROBE_DKV ? BM : 128;
    make_tmap(&p.tb, b, 1, p.b_rows, 1, D, p.b_rows);
    if (which == ATTN_PROBE_QK || which == ATTN_PROBE_SDP) make_tmap(&p.ta, a, 1, 128, 1, D, 128);
    else p.ta = p.tb; /* unused */
    const size_t smem = 98304 + 64 + 1024;
    CUDA_CHECK(cudaFuncSetAttribute(attn90_probe_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attn90_probe_kernel<D><<<1, 256, smem, stream>>>(p);
    KERNEL_CHECK(stream);
}

} // namespace attn90

void attn90_probe(enum AttnProbe which, int D, float *c, const uint16_t *a, const uint16_t *b, cudaStream_t stream,
                  HangRecord *dbg) {
    CHECK(attn90_available(D) && which >= 0 && which < ATTN_PROBE_COUNT, "attn90_probe: D=%d which=%d", D, (int)which);
    ATTN_HEADDIM_SWITCH(D, [&](auto hd) {
        constexpr int kD = decltype(hd)::value;
        if constexpr (kD == 64 || kD == 128) attn90::probe_launch<kD>(which, c, a, b, stream, dbg);
    });
}

} // namespace refine
