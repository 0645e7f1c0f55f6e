/* wgmma_serial_probe.cu — a kernel ptxas must serialize: two warpgroup products of different shapes
 * on the two sides of a data-dependent branch. tests/parity/wgmma_serial_test.sh compiles it first,
 * to show that its check recognizes ptxas's report with the toolkit at hand (a check that never
 * matched would pass whatever the kernels did). Never linked into anything. */
#include "gpu/attention_sm90.cuh"

namespace refine {
namespace attn90 {

__global__ void __launch_bounds__(128, 1) wgmma_divergent_probe(float *out, uint64_t da, uint64_t db, int flag) {
#ifdef ATTN_SM90_ENABLED
    float d[32], e[64];
#pragma unroll
    for (int i = 0; i < 32; i++) d[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 64; i++) e[i] = 0.0f;
    wgmma_fence();
    if (flag) wgmma_ss<64, 0, 0>(d, da, db, 1);
    else wgmma_ss<128, 0, 0>(e, da, db, 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(d);
    fence_regs(e);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++) sum += d[i] + e[i] + e[i + 32];
    out[threadIdx.x] = sum;
#endif
}

} // namespace attn90
} // namespace refine
