/* llama_fp8.cu — the GPU model's FP8 linears (gpu/llama.h "FP8"): the quantization points, the
 * products' operands, the frozen and trained weights' codes, and a step's FP8 bookkeeping.
 *
 * ref/llama.h ("FP8 block linears") is the oracle and this file follows it point for point: the
 * same rows (x, W, dy of each linear of each layer), the same rules (ref/fp8_linear.h's
 * fp8_rule_for), the same quantizations in the same order with the same recording:
 *   forward   each group's input (n1 for q/k/v, att for o, n2 for gate/up, mlp for down) cast once
 *             (gpu/fp8.h: delayed reads its row's scale and max-records its amax into the row's
 *             history slot 0; current computes the amax first, then the scale; block quantizes
 *             1×128), then every member's product x̂ Ŵᵀ (+ b);
 *   backward  dy (DoRA: dy_s) cast for dx = dŷ Ŵ (Ŵᵀ: the transposed codes) and, in full
 *             fine-tuning, with its transposed copy for dW += dŷᵀ x̂ᵀ, x̂ᵀ from the group's input
 *             recast (per tensor: the forward's scale, nothing recorded; 1×128: recorded) — or,
 *             per tensor with nothing recomputed, the forward's cast wrote x̂ᵀ beside x̂ and the
 *             layer kept it (gl_fp8_inputs_kept: the same codes, one pass over x fewer);
 *   weights   frozen ones quantized once (power-of-two per-tensor scale or 128×128 blocks) after
 *             loading, W_eff = dequant(quant(W)) written back into a bf16 base; an FP8-stored base
 *             keeps the codes alone and forms Wᵀ a layer at a time (gpu/fp8_weights.h), an NF4 base
 *             casts its per-layer dequantization with the scale computed at load; trained ones
 *             (full) are quantized from their bf16 copies after every optimizer step (and before
 *             the first forward, and after a checkpoint wrote them) — or, with --recompute layer,
 *             a layer at a time into two layer buffers (gl_fp8_trained_per_layer: that pass
 *             keeps only the records and the last layer's codes; the forward casts W again and the
 *             backward Wᵀ and W, recording nothing).
 *   a step    gl_fp8_guard folds the rows' flags before the optimizer (a flag poisons the step's
 *             loss sum, so both optimizers skip the update on the device, as for a non-finite
 *             loss) and writes the summary the host reads with the loss and the norm; after the
 *             wait gl_fp8_step_end runs delayed scaling's update (one launch per format), clears
 *             the statistics and requantizes the trained weights — only when the step updated.
 * Evaluation and recomputation cast with the same scales and record nothing (recording =
 * FP8_DISCARD), so they never change training. The GEMMs' per-tensor scale pointers are each
 * row's sinv16 slot (16-byte aligned, as cuBLASLt requires); block scales are their own buffers.
 * Products: forward with fast accumulation under per-tensor scaling (Transformer Engine's
 * choice), everything else with cuBLASLt's precise accumulation.
 *
 * Test: tests/parity/train_parity.sh (the fp8 rows, //gpu:train against //ref:train --precision
 * fp8); the kernels it launches have their own parity tests (fp8_parity, gemm_fp8_parity,
 * fp8_weights_parity).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/fp8.h"
#include "gpu/fp8_weights.h"
#include "gpu/llama_internal.h"
#include "io/check.h"
#include "ref/fp8.h"
#include "ref/fp8_linear.h"

namespace {

constexpr int kFold = 256;

int row_of(const gpu_llama *m, fp8_role role, int l, int t) { return llama_fp8_row(m->cfg.L, role, l, (llama_linear)t); }

fp8_weight_kind kind_of(const gpu_llama *m) {
    return m->opt.mode == LLAMA_FULL ? FP8_WEIGHT_TRAINED : FP8_WEIGHT_FROZEN;
}

fp8_rule rule_of(const gpu_llama *m, fp8_role role) { return fp8_rule_for(m->opt.fp8_recipe, role, kind_of(m)); }

const float *row_scale(const gpu_llama *m, int row) { return m->fp8.sinv16 + 4 * (int64_t)row; }

/* The group's first linear: the row its shared input is recorded in. */
int group_first(int t) { return t == LLAMA_K || t == LLAMA_V ? LLAMA_Q : t == LLAMA_UP ? LLAMA_GATE : t; }

/* Row's delayed (given) scaling in format f: its scale, its sinv16 slot, and its amax recorded into
 * the row's history slot 0 (record) or into the discard slot. */
gpu_fp8_scaling delayed_scaling(const gl_fp8 &F, fp8_format f, int row, int record) {
    return gpu_fp8_scaling{f, GPU_FP8_DELAYED, &F.scale[row], F.sinv16 + 4 * (int64_t)row,
                           record ? F.history + (int64_t)row * F.history_len : F.discard, 0.0f, 0};
}

/* Casts x (rows, cols) under rule for row into q / q_t (either may be NULL for the per-tensor
 * rules) with the block scales into s / s_t. record_amax: delayed max-records the amax into the
 * row's history slot 0 (else into the discard slot); record_stats: flags and (not for weights:
 * ref/llama.h) saturated codes. */
void quantize(gpu_llama *m, int row, fp8_rule rule, fp8_format f, uint8_t *q, float *s, uint8_t *q_t, float *s_t,
              const uint16_t *x, int64_t rows, int64_t cols, int record_amax, int record_stats, int fresh = 1) {
    gl_fp8 &F = m->fp8;
    cudaStream_t st = m->stream;
    const int weight = row / (m->cfg.L * LLAMA_N_LINEAR) == FP8_ROLE_W;
    unsigned *flags = record_stats ? &F.flags[row] : nullptr;
    unsigned long long *sat = record_stats && !weight ? F.saturated : nullptr;
    float *sinv = F.sinv16 + 4 * (int64_t)row;
    switch (rule) {
    case FP8_RULE_GIVEN: {
        const gpu_fp8_scaling sc = delayed_scaling(F, f, row, record_amax);
        gpu_fp8_cast_bf16(q, q_t, x, rows, cols, &sc, flags, sat, st);
        break;
    }
    case FP8_RULE_CURRENT:
    case FP8_RULE_CURRENT_POW2: { /* the tensor's own amax: never quantized in parts (check_options) */
        CUDA_CHECK(cudaMemsetAsync(&F.amax[row], 0, sizeof(float), st));
        gpu_fp8_amax_bf16(&F.amax[row], flags, x, rows * cols, st);
        const gpu_fp8_scaling sc = {f, GPU_FP8_CURRENT, &F.scale[row], sinv, &F.amax[row], 0.0f,
                                    rule == FP8_RULE_CURRENT_POW2};
        gpu_fp8_cast_bf16(q, q_t, x, rows, cols, &sc, flags, sat, st);
        break;
    }
    case FP8_RULE_BLOCK_1X128:
    case FP8_RULE_BLOCK_128X128:
        if (fresh) CUDA_CHECK(cudaMemsetAsync(&F.amax[row], 0, sizeof(float), st)); /* parts max into it */
        gpu_fp8_block_quantize_bf16(q, s, q_t, s_t, x, rows, cols,
                                    rule == FP8_RULE_BLOCK_1X128 ? FP8_BLOCK_1X128 : FP8_BLOCK_128X128, f, 0.0f, 1,
                                    &F.amax[row], flags, sat, st);
        break;
    }
}

/* ---- kernels: a step's fold, the scales' bookkeeping ------------------------------------------ */

struct fold_params {
    gl_fp8_summary *sum;
    double *nll;
    const float *scale, *amax;
    const unsigned *flags;
    const unsigned long long *saturated;
    int n, L, adapters, block;
};

/* ref/llama_fp8.c's llama_fp8_row_active. */
__device__ bool row_active(int row, int L, int adapters) {
    const int role = row / (L * LLAMA_N_LINEAR), l = row / LLAMA_N_LINEAR % L, t = row % LLAMA_N_LINEAR;
    if (role == FP8_ROLE_X && (t == LLAMA_K || t == LLAMA_V || t == LLAMA_UP)) return false;
    if (role == FP8_ROLE_DY && adapters && l == 0 && t <= LLAMA_V) return false;
    return true;
}

/* ref/fp8.c's fp8_current_scale(amax, f, 0, 1): the power-of-two scale of a block tensor's amax. */
__device__ float pow2_scale(float amax, float fmax) {
    if (isinf(amax) || isnan(amax) || amax == 0.0f) return 1.0f;
    float s = __fdiv_rn(fmax, amax);
    if (isinf(s)) s = FLT_MAX;
    return __uint_as_float(__float_as_uint(s) & 0xFF800000u);
}

__global__ void __launch_bounds__(kFold) fold(fold_params p) {
    __shared__ float s_lo[kFold], s_hi[kFold];
    __shared__ unsigned s_f[kFold];
    float lo = INFINITY, hi = 0.0f;
    unsigned f = 0;
    for (int i = threadIdx.x; i < p.n; i += kFold) {
        f |= p.flags[i];
        if (!row_active(i, p.L, p.adapters)) continue;
        /* block scaling quantizes every tensor to E4M3 (ref/fp8_linear.h's fp8_role_format) */
        const float v = p.block ? pow2_scale(p.amax[i], FP8_E4M3_MAX) : p.scale[i];
        lo = fminf(lo, v), hi = fmaxf(hi, v);
    }
    s_lo[threadIdx.x] = lo, s_hi[threadIdx.x] = hi, s_f[threadIdx.x] = f;
    __syncthreads();
    for (int k = kFold / 2; k > 0; k /= 2) {
        if (threadIdx.x < k) {
            s_lo[threadIdx.x] = fminf(s_lo[threadIdx.x], s_lo[threadIdx.x + k]);
            s_hi[threadIdx.x] = fmaxf(s_hi[threadIdx.x], s_hi[threadIdx.x + k]);
            s_f[threadIdx.x] |= s_f[threadIdx.x + k];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        p.sum->scale_min = s_lo[0], p.sum->scale_max = s_hi[0], p.sum->flags = s_f[0];
        p.sum->saturated = *p.saturated;
        if (s_f[0] != 0) p.nll[0] = NAN; /* the optimizers' guard skips the step */
    }
}

__global__ void scatter_sinv(float *sinv16, const float *scale_inv, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) sinv16[4 * i] = scale_inv[i];
}

__global__ void invert(float *scale_inv, const float *scale, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        scale_inv[i] = __fdiv_rn(1.0f, scale[i]);
}

__global__ void zero_slot0(float *history, int history_len, int first, int count) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x)
        history[(int64_t)(first + i) * history_len] = 0.0f;
}

unsigned grid_of(int n) { return (unsigned)((n + 255) / 256 < 1 ? 1 : (n + 255) / 256); }

void launch_scatter(gpu_llama *m) {
    scatter_sinv<<<grid_of(m->fp8.n), 256, 0, m->stream>>>(m->fp8.sinv16, m->fp8.scale_inv, m->fp8.n);
    KERNEL_CHECK(m->stream);
}

/* Every trained linear's codes from its bf16 copy (full fine-tuning), with their records. Cast a
 * layer at a time (gl_fp8_trained_per_layer), this pass keeps the records — the same amax
 * history, scales and flags as the stored codes' — and the codes of the last layer; the forward
 * and backward cast each layer again, recording nothing. */
void quantize_trained(gpu_llama *m, int record_stats) {
    const fp8_rule rule = rule_of(m, FP8_ROLE_W);
    const int per_layer = gl_fp8_trained_per_layer(m);
    for (int l = 0; l < m->cfg.L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            gl_linear &lin = m->layers[l].lin[t];
            quantize(m, row_of(m, FP8_ROLE_W, l, t), rule, FP8_E4M3, lin.w8, lin.w8_s, per_layer ? nullptr : lin.w8_t,
                     per_layer ? nullptr : lin.w8_s_t, lin.w, lin.c_out, lin.c_in, 1, record_stats);
        }
    m->fp8.stale = 0;
    if (per_layer) m->fp8.w8_layer = m->cfg.L - 1, m->fp8.wt8_layer = -1; /* the layer buffers now */
}

/* The frozen rule's codes of linear t of layer l from its bf16 values x into q (and q_t / s_t
 * when non-NULL); the per-tensor scale computed (at load) or read (JIT: the rule as GIVEN). */
void quantize_frozen(gpu_llama *m, int l, int t, const uint16_t *x, uint8_t *q, uint8_t *q_t, int at_load) {
    gl_linear &lin = m->layers[l].lin[t];
    fp8_rule rule = fp8_rule_for(m->opt.fp8_recipe, FP8_ROLE_W, FP8_WEIGHT_FROZEN);
    if (!at_load && rule == FP8_RULE_CURRENT_POW2) rule = FP8_RULE_GIVEN; /* the scale of the load */
    quantize(m, row_of(m, FP8_ROLE_W, l, t), rule, FP8_E4M3, q, lin.w8_s, q_t, q_t ? lin.w8_s_t : nullptr, x,
             lin.c_out, lin.c_in, 0, at_load);
}

}  // namespace

/* ---- the quantization points ------------------------------------------------------------------ */

void gl_fp8_input(gpu_llama *m, int l, int first, const uint16_t *x, int ci, int rows, int fresh) {
    gl_fp8 &F = m->fp8;
    const int rec = F.recording == FP8_RECORD;
    /* a training forward with the inputs' codes kept: the transposed copy too (gl_fp8_inputs_kept) */
    uint8_t *q_t = rec && gl_fp8_inputs_kept(&m->opt) ? m->acts[l].xt8[first] : nullptr;
    quantize(m, row_of(m, FP8_ROLE_X, l, first), rule_of(m, FP8_ROLE_X), FP8_E4M3, F.xq, F.xq_s, q_t, nullptr, x,
             rows, ci, rec, rec, fresh);
}

void gl_fp8_input_t(gpu_llama *m, int l, int first, const uint16_t *x, int ci, int rows, int fresh) {
    gl_fp8 &F = m->fp8;
    const fp8_rule rule = rule_of(m, FP8_ROLE_X);
    const int block = rule == FP8_RULE_BLOCK_1X128;
    quantize(m, row_of(m, FP8_ROLE_X, l, first), rule, FP8_E4M3, block ? F.xq : nullptr, F.xq_s, F.xt, F.xt_s, x, rows,
             ci, 0, block && F.recording == FP8_RECORD, fresh);
}

bool gl_fp8_swiglu_forward(gpu_llama *m, int l, const uint16_t *g, const uint16_t *u, int ld_gu, int rows,
                           uint16_t *h) {
    gl_fp8 &F = m->fp8;
    if (rule_of(m, FP8_ROLE_X) != FP8_RULE_GIVEN) return false;
    const int rec = F.recording == FP8_RECORD, row = row_of(m, FP8_ROLE_X, l, LLAMA_DOWN);
    const bool kept = gl_fp8_inputs_kept(&m->opt); /* x̂ᵀ kept, nothing reads the bf16 input */
    const gpu_fp8_scaling sc = delayed_scaling(F, FP8_E4M3, row, rec);
    const gpu_fp8_out out = {F.xq, kept && rec ? m->acts[l].xt8[LLAMA_DOWN] : nullptr, &sc,
                             rec ? &F.flags[row] : nullptr};
    return gpu_fp8_swiglu_forward(&out, kept ? nullptr : h, g, u, rows, m->cfg.F, ld_gu, rec ? F.saturated : nullptr,
                                  m->stream);
}

bool gl_fp8_swiglu_backward(gpu_llama *m, int l, const uint16_t *dh, const uint16_t *g, const uint16_t *u, int ld_gu,
                            int rows) {
    gl_fp8 &F = m->fp8;
    if (m->opt.mode != LLAMA_FULL || rule_of(m, FP8_ROLE_DY) != FP8_RULE_GIVEN || !F.dq2) return false;
    const int rec = F.recording == FP8_RECORD;
    const fp8_format f = fp8_role_format(m->opt.fp8_recipe, FP8_ROLE_DY);
    gpu_fp8_scaling sc[2];
    gpu_fp8_out out[2];
    for (int i = 0; i < 2; i++) {
        const int t = i ? LLAMA_UP : LLAMA_GATE, row = row_of(m, FP8_ROLE_DY, l, t);
        CHECK(!m->layers[l].lin[t].bias, "layer %d: a biased gate or up (its bias gradient reads dy)", l);
        sc[i] = delayed_scaling(F, f, row, rec);
        out[i] = {i ? F.dq2 : F.dq, i ? F.dt2 : F.dt, &sc[i], rec ? &F.flags[row] : nullptr};
    }
    F.gate_up_ready =
        gpu_fp8_swiglu_backward(&out[0], &out[1], dh, g, u, rows, m->cfg.F, ld_gu, rec ? F.saturated : nullptr, m->stream);
    return F.gate_up_ready;
}

void gl_fp8_grad(gpu_llama *m, int l, int t, const uint16_t *dy, int want_dx, int rows, int fresh) {
    gl_fp8 &F = m->fp8;
    const int full = m->opt.mode == LLAMA_FULL;
    if (!want_dx && !full) return; /* layer 0 of the adapter methods: nothing reads dŷ */
    if (F.gate_up_ready && (t == LLAMA_GATE || t == LLAMA_UP)) return; /* SwiGLU's backward wrote them */
    const fp8_rule rule = rule_of(m, FP8_ROLE_DY);
    const int rec = F.recording == FP8_RECORD;
    quantize(m, row_of(m, FP8_ROLE_DY, l, t), rule, fp8_role_format(m->opt.fp8_recipe, FP8_ROLE_DY),
             want_dx || rule == FP8_RULE_BLOCK_1X128 ? F.dq : nullptr, F.dq_s, full ? F.dt : nullptr,
             full ? F.dt_s : nullptr, dy, rows, m->layers[l].lin[t].c_out, rec, rec, fresh);
}

gl_fp8_pair gl_fp8_operands(const gpu_llama *m, int l, int t, enum gl_fp8_product which) {
    const gl_fp8 &F = m->fp8;
    const gl_linear &lin = m->layers[l].lin[t];
    const fp8_rule rx = rule_of(m, FP8_ROLE_X), rw = rule_of(m, FP8_ROLE_W), rd = rule_of(m, FP8_ROLE_DY);
    const int rowx = row_of(m, FP8_ROLE_X, l, group_first(t)), roww = row_of(m, FP8_ROLE_W, l, t),
              rowd = row_of(m, FP8_ROLE_DY, l, t);
    const int bx = rx == FP8_RULE_BLOCK_1X128, bw = rw == FP8_RULE_BLOCK_128X128, bd = rd == FP8_RULE_BLOCK_1X128;
    const gemm_dtype gd = fp8_role_format(m->opt.fp8_recipe, FP8_ROLE_DY) == FP8_E5M2 ? GEMM_E5M2 : GEMM_E4M3;
    const bool up2 = F.gate_up_ready && t == LLAMA_UP; /* up's dŷ beside gate's (gl_fp8_swiglu_backward) */
    gl_fp8_pair p;
    memset(&p, 0, sizeof p);
    p.accum = GEMM_ACCUM_PRECISE;
    switch (which) {
    case GL_FP8_FORWARD:
        p.a = {F.xq, GEMM_E4M3, bx ? F.xq_s : row_scale(m, rowx), bx ? GEMM_SCALE_1X128 : GEMM_SCALE_TENSOR};
        p.b = {lin.w8, GEMM_E4M3, bw ? lin.w8_s : row_scale(m, roww), bw ? GEMM_SCALE_128X128 : GEMM_SCALE_TENSOR};
        if (!bx && !bw) p.accum = GEMM_ACCUM_FAST; /* TE: fprop fast under per-tensor scaling */
        break;
    case GL_FP8_DX:
        p.a = {up2 ? F.dq2 : F.dq, gd, bd ? F.dq_s : row_scale(m, rowd), bd ? GEMM_SCALE_1X128 : GEMM_SCALE_TENSOR};
        p.b = {lin.w8_t, GEMM_E4M3, bw ? lin.w8_s_t : row_scale(m, roww), bw ? GEMM_SCALE_128X128 : GEMM_SCALE_TENSOR};
        break;
    case GL_FP8_DW:
        p.a = {up2 ? F.dt2 : F.dt, gd, bd ? F.dt_s : row_scale(m, rowd), bd ? GEMM_SCALE_1X128 : GEMM_SCALE_TENSOR};
        p.b = {gl_fp8_inputs_kept(&m->opt) ? m->acts[l].xt8[group_first(t)] : F.xt, GEMM_E4M3,
               bx ? F.xt_s : row_scale(m, rowx), bx ? GEMM_SCALE_1X128 : GEMM_SCALE_TENSOR};
        break;
    }
    return p;
}

/* ---- the frozen base, a layer at a time ----------------------------------------------------------- */

void gl_fp8_layer(gpu_llama *m, int l, int need) {
    gl_fp8 &F = m->fp8;
    if (!F.on) return;
    const int block = m->opt.fp8_recipe == FP8_RECIPE_BLOCK;
    if (m->opt.mode == LLAMA_FULL) { /* trained weights: stored for every layer, or cast here */
        const int all_w = need & GL_FP8_W;
        const int want_w = (need & (GL_FP8_W | GL_FP8_W_QKV)) && F.w8_layer != l,
                  want_t = (need & GL_FP8_WT) && F.wt8_layer != l;
        if (!gl_fp8_trained_per_layer(m) || (!want_w && !want_t)) return;
        /* the records were kept by the cast after the step (quantize_trained): none here. A block
         * cast writes W's codes with Wᵀ's; W of q, k and v alone leaves the W buffer partial. */
        const fp8_rule rule = rule_of(m, FP8_ROLE_W);
        int whole = 1;
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            gl_linear &lin = m->layers[l].lin[t];
            const int w = (want_w && (all_w || t <= LLAMA_V)) || (block && want_t);
            if (!w && !want_t) {
                whole = 0;
                continue;
            }
            if (!w) whole = 0;
            quantize(m, row_of(m, FP8_ROLE_W, l, t), rule, FP8_E4M3, w ? lin.w8 : nullptr, lin.w8_s,
                     want_t ? lin.w8_t : nullptr, want_t ? lin.w8_s_t : nullptr, lin.w, lin.c_out, lin.c_in, 0, 0);
        }
        if (want_w || (block && want_t)) F.w8_layer = whole ? l : -1;
        if (want_t) F.wt8_layer = l;
        return;
    }
    if (need & GL_FP8_W_QKV) need |= GL_FP8_W; /* the frozen bases form whole layers */
    const int want_w = (need & GL_FP8_W) && F.w8_layer != l, want_t = (need & GL_FP8_WT) && F.wt8_layer != l;
    if (m->opt.base == GPU_BASE_FP8) { /* W stored; Wᵀ stored too, or formed from the codes */
        if (!want_t || gl_fp8_base_wt_stored(m)) return;
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            gl_linear &lin = m->layers[l].lin[t];
            gpu_fp8_transpose_codes(lin.w8_t, lin.w8, lin.c_out, lin.c_in, m->stream);
        }
    } else if (m->opt.base == GPU_BASE_NF4) { /* codes with the load's scale */
        if (!want_w && !want_t) return;
        if (!block) {
            /* per-tensor scales: NF4 straight to the codes (gpu_nf4_dequantize_e4m3: the same codes as
             * the cast of the bf16 values, without them), Wᵀ transposed from the codes */
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                gl_linear &lin = m->layers[l].lin[t];
                const gpu_nf4_tensor d = gl_nf4_tensor(lin.nf4);
                if (F.w8_layer != l) gpu_nf4_dequantize_e4m3(lin.w8, &d, &F.scale[row_of(m, FP8_ROLE_W, l, t)], m->stream);
                if (want_t) gpu_fp8_transpose_codes(lin.w8_t, lin.w8, lin.c_out, lin.c_in, m->stream);
            }
        } else { /* 128×128 blocks: NF4 → bf16 → the block codes of both */
            gl_nf4_to_bf16(m, l);
            m->dq_layer = -1; /* dq_buf holds the NF4 values now, not W_eff */
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                gl_linear &lin = m->layers[l].lin[t]; /* lin.w: its slice of dq_buf */
                quantize_frozen(m, l, t, lin.w, lin.w8, want_t ? lin.w8_t : nullptr, 0);
            }
        }
        F.w8_layer = l;
    } else {
        return; /* a bf16 base: its codes are stored for every layer */
    }
    if (want_t) F.wt8_layer = l;
}

void gl_fp8_dequantize_layer(gpu_llama *m, int l) {
    if (m->opt.base == GPU_BASE_NF4) gl_fp8_layer(m, l, GL_FP8_W);
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        gl_linear &lin = m->layers[l].lin[t];
        const int block = m->opt.fp8_recipe == FP8_RECIPE_BLOCK;
        gpu_fp8_dequantize_bf16(lin.w, lin.w8, block ? lin.w8_s : row_scale(m, row_of(m, FP8_ROLE_W, l, t)),
                                block ? FP8_SCALING_128X128 : FP8_SCALING_TENSOR, lin.c_out, lin.c_in, FP8_E4M3,
                                m->stream);
    }
}

uint16_t *gl_fp8_staging(gpu_llama *m) {
    uint16_t *s = m->dq_buf ? m->dq_buf : m->fp8.stage ? m->fp8.stage : reinterpret_cast<uint16_t *>(m->fp8.wt8_buf);
    CHECK(s != nullptr, "layout: an FP8-stored base without a staging buffer");
    return s;
}

void gl_fp8_store(gpu_llama *m, int l, int t, const uint16_t *staging) {
    gl_linear &lin = m->layers[l].lin[t];
    quantize_frozen(m, l, t, staging, lin.w8, nullptr, 1);
    if (m->opt.fp8_recipe == FP8_RECIPE_BLOCK) gpu_fp8_transpose_block_scales(lin.w8_s_t, lin.w8_s, lin.c_out, lin.c_in, m->stream);
    if (gl_fp8_base_wt_stored(m)) gpu_fp8_transpose_codes(lin.w8_t, lin.w8, lin.c_out, lin.c_in, m->stream);
}

int gl_fp8_freeze(gpu_llama *m, io_err *e) {
    gl_fp8 &F = m->fp8;
    if (!F.state) return 0;
    CUDA_CHECK(cudaMemsetAsync(F.flags, 0, (size_t)F.n * sizeof(unsigned), m->stream));
    if (m->opt.mode == LLAMA_FULL) {
        F.stale = 1; /* quantized from the bf16 copies before the first forward */
    } else if (m->opt.base == GPU_BASE_BF16 && F.on) {
        /* codes and transposed codes of every layer, then the bf16 base becomes W_eff */
        for (int l = 0; l < m->cfg.L; l++)
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                gl_linear &lin = m->layers[l].lin[t];
                quantize_frozen(m, l, t, lin.w, lin.w8, lin.w8_t, 1);
            }
        for (int l = 0; l < m->cfg.L; l++) gl_fp8_dequantize_layer(m, l);
    } else if (m->opt.base == GPU_BASE_NF4 && F.on) {
        /* each linear's per-tensor scale from its NF4 dequantization (block: recomputed per layer) */
        for (int l = 0; l < m->cfg.L; l++) {
            gl_nf4_to_bf16(m, l);
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                gl_linear &lin = m->layers[l].lin[t];
                quantize_frozen(m, l, t, lin.w, lin.w8, nullptr, 1);
            }
        }
        F.w8_layer = F.wt8_layer = -1;
        m->dq_layer = -1;
    }
    /* an FP8-stored base was quantized by gl_fp8_store while loading, with its flags */
    std::vector<unsigned> flags((size_t)F.n);
    CUDA_CHECK(cudaMemcpyAsync(flags.data(), F.flags, (size_t)F.n * sizeof(unsigned), cudaMemcpyDeviceToHost, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    CUDA_CHECK(cudaMemsetAsync(F.flags, 0, (size_t)F.n * sizeof(unsigned), m->stream));
    CUDA_CHECK(cudaMemsetAsync(F.saturated, 0, sizeof(unsigned long long), m->stream));
    for (int i = 0; i < F.n; i++)
        if (flags[(size_t)i]) {
            char what[160];
            llama_fp8_row_describe(what, sizeof what, m->cfg.L, i);
            return io_fail(e, "FP8: %s holds a NaN or an Inf (the model's weights must be finite)", what);
        }
    if (m->opt.fp8_recipe == FP8_RECIPE_DELAYED) { /* the frozen rows' scales into the delayed state */
        invert<<<grid_of(F.n), 256, 0, m->stream>>>(F.scale_inv, F.scale, F.n);
        KERNEL_CHECK(m->stream);
    }
    return 0;
}

/* ---- a step -------------------------------------------------------------------------------------- */

void gl_fp8_begin(gpu_llama *m, int train) {
    gl_fp8 &F = m->fp8;
    if (!F.on) return;
    F.recording = train ? FP8_RECORD : FP8_DISCARD;
    if (F.stale && m->opt.mode == LLAMA_FULL) quantize_trained(m, 1); /* their flags, as after a step */
}

void gl_fp8_guard(gpu_llama *m) {
    gl_fp8 &F = m->fp8;
    if (!F.on) return;
    const fold_params p = {F.summary,  m->nll_acc, F.scale, F.amax, F.flags, F.saturated, F.n, m->cfg.L,
                           m->opt.mode != LLAMA_FULL, m->opt.fp8_recipe == FP8_RECIPE_BLOCK};
    fold<<<1, kFold, 0, m->stream>>>(p);
    KERNEL_CHECK(m->stream);
    CUDA_CHECK(cudaMemcpyAsync(F.h_summary, F.summary, sizeof(gl_fp8_summary), cudaMemcpyDeviceToHost, m->stream));
}

void gl_fp8_step_end(gpu_llama *m, int updated) {
    gl_fp8 &F = m->fp8;
    if (!F.on) return;
    F.failed = F.h_summary->flags != 0;
    F.failed_row = -1;
    if (F.failed) { /* the failure path: find the row */
        std::vector<unsigned> flags((size_t)F.n);
        CUDA_CHECK(cudaMemcpy(flags.data(), F.flags, (size_t)F.n * sizeof(unsigned), cudaMemcpyDeviceToHost));
        for (int i = 0; i < F.n && F.failed_row < 0; i++)
            if (flags[(size_t)i]) F.failed_row = i;
        return; /* nothing changes: the run stops */
    }
    if (!updated) return;
    cudaStream_t s = m->stream;
    if (m->opt.fp8_recipe == FP8_RECIPE_DELAYED) {
        const int L7 = m->cfg.L * LLAMA_N_LINEAR, len = F.history_len;
        gpu_fp8_delayed_update(F.history, F.scale, F.scale_inv, 2 * L7, len, FP8_DELAYED_ALGO, FP8_DELAYED_MARGIN, FP8_E4M3, nullptr, s);
        gpu_fp8_delayed_update(F.history + (int64_t)2 * L7 * len, F.scale + 2 * L7, F.scale_inv + 2 * L7, L7, len,
                               FP8_DELAYED_ALGO, FP8_DELAYED_MARGIN, FP8_E5M2, nullptr, s);
        launch_scatter(m);
    }
    CUDA_CHECK(cudaMemsetAsync(F.flags, 0, (size_t)F.n * sizeof(unsigned), s));
    CUDA_CHECK(cudaMemsetAsync(F.saturated, 0, sizeof(unsigned long long), s));
    /* the next step's weights, its statistics; under the sharded optimizer, other ranks' pieces
     * arrive after this (trainers/gpu_dp.h), so the quantization waits for the next step's start */
    if (m->opt.mode == LLAMA_FULL && m->opt.shard_world > 1) F.stale = 1;
    else if (m->opt.mode == LLAMA_FULL) quantize_trained(m, 1);
}

void gl_fp8_drop(gpu_llama *m) {
    gl_fp8 &F = m->fp8;
    if (!F.on) return;
    cudaStream_t s = m->stream;
    if (m->opt.fp8_recipe == FP8_RECIPE_DELAYED) { /* the activations' and gradients' records: X and DY rows */
        const int L7 = m->cfg.L * LLAMA_N_LINEAR;
        zero_slot0<<<grid_of(L7), 256, 0, s>>>(F.history, F.history_len, 0, L7);
        KERNEL_CHECK(s);
        zero_slot0<<<grid_of(L7), 256, 0, s>>>(F.history, F.history_len, 2 * L7, L7);
        KERNEL_CHECK(s);
    }
    CUDA_CHECK(cudaMemsetAsync(F.flags, 0, (size_t)F.n * sizeof(unsigned), s));
    CUDA_CHECK(cudaMemsetAsync(F.saturated, 0, sizeof(unsigned long long), s));
}

void gl_fp8_state_written(gpu_llama *m) {
    gl_fp8 &F = m->fp8;
    if (!F.on) return;
    if (m->opt.mode == LLAMA_FULL) F.stale = 1;
    if (m->opt.fp8_recipe == FP8_RECIPE_DELAYED) {
        invert<<<grid_of(F.n), 256, 0, m->stream>>>(F.scale_inv, F.scale, F.n);
        KERNEL_CHECK(m->stream);
        launch_scatter(m);
    }
}

extern "C" int gpu_llama_fp8_stats(const gpu_llama *m, float *scale_min, float *scale_max, long long *saturated) {
    if (!m->fp8.on) return -1;
    *scale_min = m->fp8.h_summary->scale_min;
    *scale_max = m->fp8.h_summary->scale_max;
    *saturated = (long long)m->fp8.h_summary->saturated;
    return 0;
}

extern "C" int gpu_llama_fp8_failed(gpu_llama *m, char *what, size_t cap) {
    if (!m->fp8.on || !m->fp8.failed) return 0;
    if (m->fp8.failed_row >= 0)
        llama_fp8_row_describe(what, cap, m->cfg.L, m->fp8.failed_row);
    else
        snprintf(what, cap, "a tensor");
    return 1;
}
