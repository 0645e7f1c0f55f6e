/* decode_attention.cu — attention of query rows against the KV cache (gpu/decode_attention.h).
 *
 * Strategy: grid (N rows, H heads), 128 threads. (1) q row → shared fp32; (2) each thread takes
 * positions j ≡ tid (mod 128): s_j = scale·Σ_d q_d·k_jd with the key row read 8 bf16 at a time,
 * written to shared memory, running max; block max; (3) p_j = exp(s_j − m) in place, block sum l;
 * (4) thread t owns dim t % D and positions j ≡ t / D (mod 128/D): acc = Σ p_j·v_jd; the 128/D
 * partial sums of a dim are added in a fixed order through shared memory; out = bf16(acc / l).
 * Every reduction has a fixed order: the result is the same bits on every run.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:decode_attention_parity
 *                     (binary) decode_attention_parity --bench
 */
#include "gpu/decode_attention.h"

#include "gpu/cuda_check.h"
#include "gpu/vec.cuh"
#include "io/check.h"

namespace refine {
namespace {

constexpr int kThreads = 128;

__device__ float block_reduce(float v, float *red, bool is_max) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : __fadd_rn(v, w);
    }
    __syncthreads(); /* red may still be read from an earlier reduction */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = red[0];
    for (int i = 1; i < kThreads / 32; i++) r = is_max ? fmaxf(r, red[i]) : __fadd_rn(r, red[i]);
    return r;
}

template <int D>
__global__ void __launch_bounds__(kThreads) decode_attention_row_per_cta(
    bf16 *__restrict__ out, const bf16 *__restrict__ q, int ld_q, const bf16 *__restrict__ kc,
    const bf16 *__restrict__ vc, const int32_t *__restrict__ seq, const int32_t *__restrict__ pos, int H, int KVH,
    int T_max, float scale) {
    extern __shared__ float smem[];
    float *qs = smem;                  /* D */
    float *part = qs + D;              /* kThreads */
    float *red = part + kThreads;      /* kThreads / 32 */
    float *s = red + kThreads / 32;    /* T_max */
    const int n = blockIdx.x, h = blockIdx.y, g = h / (H / KVH);
    const int p = pos[n];
    const int64_t base = (int64_t)seq[n] * T_max;
    for (int d = threadIdx.x; d < D; d += kThreads) qs[d] = __bfloat162float(q[(int64_t)n * ld_q + (int64_t)h * D + d]);
    __syncthreads();
    float m = -INFINITY;
    for (int j = threadIdx.x; j <= p; j += kThreads) {
        const bf16 *kr = kc + ((base + j) * KVH + g) * D;
        float dot = 0.0f;
#pragma unroll
        for (int d = 0; d < D; d += 8) {
            float kv[8];
            load_bf16<8>(kv, kr + d);
#pragma unroll
            for (int i = 0; i < 8; i++) dot = __fmaf_rn(qs[d + i], kv[i], dot);
        }
        const float sj = __fmul_rn(scale, dot);
        s[j] = sj;
        m = fmaxf(m, sj);
    }
    m = block_reduce(m, red, true);
    float l = 0.0f;
    for (int j = threadIdx.x; j <= p; j += kThreads) {
        const float e = expf(s[j] - m);
        s[j] = e;
        l = __fadd_rn(l, e);
    }
    l = block_reduce(l, red, false); /* also orders the writes of s before the reads below */
    constexpr int kGroups = kThreads / D;
    const int d = threadIdx.x % D, grp = threadIdx.x / D;
    float acc = 0.0f;
    for (int j = grp; j <= p; j += kGroups)
        acc = __fmaf_rn(s[j], __bfloat162float(vc[((base + j) * KVH + g) * D + d]), acc);
    part[threadIdx.x] = acc;
    __syncthreads();
    if (grp == 0) {
        float t = part[d];
        for (int k = 1; k < kGroups; k++) t = __fadd_rn(t, part[k * D + d]);
        out[((int64_t)n * H + h) * D + d] = __float2bfloat16_rn(__fdiv_rn(t, l));
    }
}

size_t smem_bytes(int D, int T_max) { return sizeof(float) * ((size_t)D + kThreads + kThreads / 32 + (size_t)T_max); }

int max_dynamic_smem() {
    int dev = 0, bytes = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return bytes;
}

template <int D>
void launch(uint16_t *out, const uint16_t *q, int ld_q, const uint16_t *kc, const uint16_t *vc, const int32_t *seq,
            const int32_t *pos, int N, int H, int KVH, int S, int T_max, float scale, cudaStream_t stream) {
    (void)S;
    const size_t bytes = smem_bytes(D, T_max);
    static int configured = 0; /* the attribute is per kernel: set once to the device's limit */
    if (!configured) {
        CUDA_CHECK(cudaFuncSetAttribute(decode_attention_row_per_cta<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        max_dynamic_smem()));
        configured = 1;
    }
    dim3 grid((unsigned)N, (unsigned)H);
    decode_attention_row_per_cta<D><<<grid, kThreads, bytes, stream>>>(
        reinterpret_cast<bf16 *>(out), reinterpret_cast<const bf16 *>(q), ld_q, reinterpret_cast<const bf16 *>(kc),
        reinterpret_cast<const bf16 *>(vc), seq, pos, H, KVH, T_max, scale);
    KERNEL_CHECK(stream);
}

}  // namespace
}  // namespace refine

extern "C" int gpu_decode_attention_max_positions(void) {
    const int bytes = refine::max_dynamic_smem();
    return (int)((size_t)bytes / sizeof(float)) - 128 - refine::kThreads - refine::kThreads / 32;
}

extern "C" void gpu_decode_attention_bf16(uint16_t *out, const uint16_t *q, int ld_q, const uint16_t *k_cache,
                                          const uint16_t *v_cache, const int32_t *seq, const int32_t *pos, int N, int H,
                                          int KVH, int D, int S, int T_max, float scale, cudaStream_t stream) {
    CHECK(N >= 1 && H >= 1 && KVH >= 1 && H % KVH == 0 && S >= 1 && T_max >= 1, "decode attention N=%d H=%d KVH=%d "
          "S=%d T_max=%d", N, H, KVH, S, T_max);
    CHECK(ld_q >= H * D && ld_q % 8 == 0 && ((uintptr_t)q & 15u) == 0 && ((uintptr_t)k_cache & 15u) == 0 &&
              ((uintptr_t)v_cache & 15u) == 0,
          "decode attention: ld_q=%d and 16-byte aligned q, caches needed", ld_q);
    CHECK(T_max <= gpu_decode_attention_max_positions(), "decode attention: T_max=%d above %d", T_max,
          gpu_decode_attention_max_positions());
    switch (D) {
    case 16: refine::launch<16>(out, q, ld_q, k_cache, v_cache, seq, pos, N, H, KVH, S, T_max, scale, stream); break;
    case 32: refine::launch<32>(out, q, ld_q, k_cache, v_cache, seq, pos, N, H, KVH, S, T_max, scale, stream); break;
    case 64: refine::launch<64>(out, q, ld_q, k_cache, v_cache, seq, pos, N, H, KVH, S, T_max, scale, stream); break;
    case 128: refine::launch<128>(out, q, ld_q, k_cache, v_cache, seq, pos, N, H, KVH, S, T_max, scale, stream); break;
    default: CHECK(0, "decode attention: D=%d (supported: 16, 32, 64, 128)", D);
    }
}
