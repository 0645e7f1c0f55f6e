/* llama.cu — forward, backward and optimizer step of the GPU model (gpu/llama.h).
 *
 * Strategy: the step is ref/llama.c's composition of ops, each op a parity-tested kernel of gpu/,
 * all on one stream, buffers from the slabs of llama_layout.cu:
 *   forward   embedding → per layer [NF4 dequantization] rmsnorm, q/k/v (+ adapters), rope,
 *             flash attention, o (+ adapter), residual + rmsnorm (one kernel), gate/up
 *             (+ adapters), swiglu, down (+ adapter), residual → final rmsnorm → lm_head fused
 *             with the cross-entropy, which also writes d nf (training) so the logits are formed
 *             once per step;
 *   backward  final rmsnorm, then per layer from the last: [dequantization unless the layer is
 *             still in the buffer] [recomputation] down, swiglu (in place over gate/up), gate +
 *             up into one dx (GEMM beta = 1), residual rmsnorm backward, o, attention with rope's
 *             backward in its stores, q + k + v, residual rmsnorm backward; the embedding's
 *             scatter-add in full fine-tuning.
 *             Layer 0's input gradient is skipped when nothing upstream trains (adapter modes).
 * A linear's backward: dW (full), DoRA's rescale of dy (dm and mns⊙dy), the base dx GEMM
 * (overwriting, or accumulating the q/k/v and gate/up paths), the adapter's products
 * (gpu/lora.h: dB, du, dA, dx += du A; with dropout the input and mask are regenerated).
 * LoRA without dropout runs the adapters of q/k/v and of gate/up as groups (gpu_lora_group_*):
 * one product forms u for the whole group, one dA, and one dx += du A after the members' base dx.
 * The step's loss stays on the device (summed per micro-batch); the host waits once a step, in
 * gpu_llama_optimizer_step, for the loss sum and the gradient norm.
 * Bias gradients (full fine-tuning of Qwen2) are a GEMM with a ones vector: db += 1ᵀ dy.
 *
 * Test: tests/parity/train_parity.sh (//gpu:train against //ref:train). Benchmark: //gpu:bench.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/attention.h"
#include "gpu/cross_entropy.h"
#include "gpu/cuda_check.h"
#include "gpu/dora.h"
#include "gpu/dropout.h"
#include "gpu/embedding.h"
#include "gpu/llama_internal.h"
#include "gpu/lora.h"
#include "gpu/nf4.h"
#include "gpu/rmsnorm.h"
#include "gpu/rope.h"
#include "gpu/swiglu.h"
#include "gpu/vec.cuh"
#include "io/check.h"
#include "ref/bf16.h"

#include <nvtx3/nvToolsExt.h>

using refine::bf16;

namespace {

constexpr int kBlock = 256;

/* y = bf16(a + b): the residual add (ref/llama.c's add_into with ACT_BF16). */
template <int VW>
__global__ void __launch_bounds__(kBlock) residual_add(bf16 *y, const bf16 *a, const bf16 *b, int64_t n) {
    const int64_t i = ((int64_t)blockIdx.x * kBlock + threadIdx.x) * VW;
    if (i >= n) return;
    float x[VW], z[VW];
    refine::load_bf16<VW>(x, a + i);
    refine::load_bf16<VW>(z, b + i);
#pragma unroll
    for (int j = 0; j < VW; j++) x[j] = __fadd_rn(x[j], z[j]);
    refine::store_bf16<VW>(y + i, x);
}

__global__ void __launch_bounds__(kBlock) f32_to_bf16(bf16 *dst, const float *src, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * kBlock + threadIdx.x; i < n; i += (int64_t)gridDim.x * kBlock)
        dst[i] = __float2bfloat16_rn(src[i]);
}

unsigned grid_for(int64_t n, int per_thread) {
    const int64_t b = (n / per_thread + kBlock - 1) / kBlock;
    return (unsigned)(b < 1 ? 1 : b);
}

void add_bf16(uint16_t *y, const uint16_t *a, const uint16_t *b, int64_t n, cudaStream_t s) {
    bf16 *yy = reinterpret_cast<bf16 *>(y);
    const bf16 *aa = reinterpret_cast<const bf16 *>(a), *bb = reinterpret_cast<const bf16 *>(b);
    if (n % 8 == 0 && (((uintptr_t)y | (uintptr_t)a | (uintptr_t)b) & 15u) == 0)
        residual_add<8><<<grid_for(n, 8), kBlock, 0, s>>>(yy, aa, bb, n);
    else
        residual_add<1><<<grid_for(n, 1), kBlock, 0, s>>>(yy, aa, bb, n);
    KERNEL_CHECK(s);
}

/* acc += (double)loss · n_valid: the micro-batch's Σ NLL into the step's sum (the CPU engine's
 * rounding of the same product). */
__global__ void accumulate_nll(double *acc, const float *loss, double n_valid) { acc[0] += (double)loss[0] * n_valid; }

/* ---- profiling: an event pair around each op, summed per category when read ---------------- */

void prof_flush(gpu_llama *m) {
    if (m->prof_n == 0) return;
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    for (int i = 0; i < m->prof_n; i++) {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, m->prof_ev[2 * i], m->prof_ev[2 * i + 1]));
        m->prof_ms[m->prof_cat[i]] += ms;
    }
    m->prof_n = 0;
}

extern const char *const kProfNames[N_PROF];

/* An op of category cat: timed with an event pair while profiling, and an NVTX range (named by the
 * category) with GPU_NVTX_RANGES, so that Nsight Systems shows the step by op. */
struct prof_scope {
    gpu_llama *m;
    int slot, nvtx;
    prof_scope(gpu_llama *mm, int cat) : m(mm), slot(-1), nvtx(mm->opt.nvtx == GPU_NVTX_RANGES) {
        if (nvtx) nvtxRangePushA(kProfNames[cat]);
        if (!m->prof_on) return;
        if (m->prof_n == m->prof_cap) prof_flush(m);
        slot = m->prof_n++;
        m->prof_cat[slot] = cat;
        CUDA_CHECK(cudaEventRecord(m->prof_ev[2 * slot], m->stream));
    }
    ~prof_scope() {
        if (slot >= 0) CUDA_CHECK(cudaEventRecord(m->prof_ev[2 * slot + 1], m->stream));
        if (nvtx) nvtxRangePop();
    }
};

/* An NVTX range around a larger part of the step ("layer 3 forward", "optimizer step"). */
struct nvtx_scope {
    int on;
    nvtx_scope(const gpu_llama *m, const char *fmt, int i) : on(m->opt.nvtx == GPU_NVTX_RANGES) {
        if (!on) return;
        char name[64];
        snprintf(name, sizeof name, fmt, i);
        nvtxRangePushA(name);
    }
    ~nvtx_scope() {
        if (on) nvtxRangePop();
    }
};

#define PROF_CAT2(a, b) a##b
#define PROF_CAT(a, b) PROF_CAT2(a, b)
#define PROF(m, cat) prof_scope PROF_CAT(prof_, __LINE__)((m), (cat))
#define NVTX(m, fmt, i) nvtx_scope PROF_CAT(nvtx_, __LINE__)((m), (fmt), (i))

const char *const kProfNames[N_PROF] = {
    "embedding",       "rmsnorm",       "linear forward", "linear dx",       "linear dW",    "adapter forward",
    "adapter backward", "nf4 dequantize", "rope",          "attention forward", "attention backward", "swiglu",
    "residual add",    "lm_head + loss", "optimizer",     "copies",           "fp8 quantize"};

/* ---- the model ------------------------------------------------------------------------------- */

uint64_t dropout_offset(const gpu_llama *m, int l, int t, uint64_t micro) {
    return (micro * (uint64_t)m->cfg.L + (uint64_t)l) * (uint64_t)LLAMA_N_LINEAR + (uint64_t)t;
}

}  // namespace

/* The folded linears' bf16(s·B) from the current B: every layer's (a bf16 base), or the layer in the
 * dequantization buffer (an NF4 base: its slots share the buffer's columns; l < 0: none). */
void gl_fold_refresh(gpu_llama *m, int l) {
    if (!m->n_fold_slots) return;
    const int per_layer = m->n_fold_slots / m->cfg.L;
    if (m->opt.base == GPU_BASE_BF16)
        gpu_lora_fold_b_bf16(m->fold_slots, m->n_fold_slots, m->fold_max_c_out, m->opt.R, m->opt.lora_scale,
                             m->stream);
    else if (l >= 0)
        gpu_lora_fold_b_bf16(m->fold_slots + (size_t)l * per_layer, per_layer, m->fold_max_c_out, m->opt.R,
                             m->opt.lora_scale, m->stream);
}

void gl_nf4_to_bf16(gpu_llama *m, int l) {
    PROF(m, PROF_NF4);
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        gl_linear &lin = m->layers[l].lin[t];
        const gpu_nf4_tensor d = gl_nf4_tensor(lin.nf4);
        gpu_nf4_dequantize_rows_bf16(lin.w, lin.c_in, lin.ldw, &d, m->stream); /* folded: padded rows */
    }
    gl_fold_refresh(m, l); /* a folded group's adapter columns, for this layer's B */
}

void gl_dequantize_layer(gpu_llama *m, int l) {
    if (m->dq_layer == l || m->opt.base == GPU_BASE_BF16) return;
    if (m->opt.base == GPU_BASE_NF4 && !m->fp8.on) {
        gl_nf4_to_bf16(m, l);
    } else { /* FP8: W_eff from the codes (an NF4 base's cast first) */
        PROF(m, PROF_FP8);
        gl_fp8_dequantize_layer(m, l);
    }
    m->dq_layer = l;
}

namespace {

/* Rows [r0, r0 + n) of the micro-batch: what a linear's products cover (the MLP's token chunks,
 * gpu/llama.h mlp_chunk; the whole micro-batch elsewhere). The x, y, dx and dy passed with a span
 * point at its first row already; the saved adapter intermediates, (N, ·), are addressed from r0
 * here, and a chunk's dropout masks are its slice of the whole tensor's; DoRA's z of an MLP linear
 * holds the chunk's rows only (its backward follows within the chunk). FP8 quantizations cover the
 * whole micro-batch or a chunk's rows (delayed and block recipes: the same codes; the current
 * recipe's tensor-wide scale refuses chunks in check_options). */
struct gl_span {
    int r0, n;
};

gl_span whole(const gpu_llama *m) { return gl_span{0, m->N}; }

/* The base product y = x Wᵀ (+ b) of linear t of layer l: bf16, or FP8 on the input's last
 * quantization (gl_fp8_input). */
void base_forward(gpu_llama *m, int l, int t, uint16_t *y, const uint16_t *x, int n) {
    gl_linear &lin = m->layers[l].lin[t];
    PROF(m, PROF_LINEAR_FWD);
    if (m->fp8.on) {
        const gl_fp8_pair p = gl_fp8_operands(m, l, t, GL_FP8_FORWARD);
        gpu_linear_forward_fp8(m->gemm, y, GEMM_OUT_BF16, &p.a, &p.b, lin.bias, n, lin.c_in, lin.c_out, p.accum,
                               m->stream);
    } else {
        gpu_linear_forward_bf16(m->gemm, y, x, lin.w, lin.bias, n, lin.c_in, lin.c_out, m->stream);
    }
}

/* FP8 full fine-tuning's dW += dŷᵀ x̂ᵀ of linear t, on the codes of dy's and x's last quantizations
 * (gl_fp8_grad, gl_fp8_input_t). */
void base_dw_fp8(gpu_llama *m, int l, int t, int n) {
    gl_linear &lin = m->layers[l].lin[t];
    PROF(m, PROF_LINEAR_DW);
    const gl_fp8_pair p = gl_fp8_operands(m, l, t, GL_FP8_DW);
    gpu_linear_backward_dw_fp8(m->gemm, lin.w_grad, gl_grad_type(m), GEMM_ACCUMULATE, &p.a, &p.b, n, lin.c_in,
                               lin.c_out, p.accum, m->stream);
}

/* The base products of linear t's backward for dy (DoRA: dy_s): FP8 quantizes dy first, then
 * dW += dŷᵀ x̂ᵀ (full; unless dw_later: the caller's base_dw_fp8 after x's codes) and dx = dŷ Ŵ;
 * bf16 forms dx = dy W (the bf16 dW is proj_backward's). dx NULL: none. */
void base_backward(gpu_llama *m, int l, int t, uint16_t *dx, enum gemm_beta beta, const uint16_t *dy, gl_span sp,
                   bool dw_later = false) {
    gl_linear &lin = m->layers[l].lin[t];
    const int n = sp.n;
    if (!m->fp8.on) {
        if (!dx) return;
        PROF(m, PROF_LINEAR_DX);
        gpu_linear_backward_dx_ld_bf16(m->gemm, dx, lin.c_in, dy, lin.w, lin.ldw, n, lin.c_in, lin.c_out, beta,
                                       m->stream);
        return;
    }
    {
        PROF(m, PROF_FP8);
        gl_fp8_grad(m, l, t, dy, dx != nullptr, n, sp.r0 == 0);
    }
    if (m->opt.mode == LLAMA_FULL && !dw_later) base_dw_fp8(m, l, t, n);
    if (dx) {
        PROF(m, PROF_LINEAR_DX);
        const gl_fp8_pair p = gl_fp8_operands(m, l, t, GL_FP8_DX);
        gpu_linear_backward_dx_fp8(m->gemm, dx, GEMM_OUT_BF16, beta, &p.a, &p.b, n, lin.c_in, lin.c_out, p.accum,
                                   m->stream);
    }
}

/* FP8: the quantization of a group's input (forward), and of its transposed copy for the weight
 * gradients of full fine-tuning (backward); no-ops otherwise. */
void fp8_input(gpu_llama *m, int l, int first, const uint16_t *x, int ci, gl_span sp) {
    if (!m->fp8.on) return;
    PROF(m, PROF_FP8);
    gl_fp8_input(m, l, first, x, ci, sp.n, sp.r0 == 0);
}

/* (gl_fp8_inputs_kept: the forward's quantization wrote them; nothing to do.) */
void fp8_input_t(gpu_llama *m, int l, int first, const uint16_t *x, int ci, gl_span sp) {
    if (!m->fp8.on || m->opt.mode != LLAMA_FULL || gl_fp8_inputs_kept(&m->opt)) return;
    PROF(m, PROF_FP8);
    gl_fp8_input_t(m, l, first, x, ci, sp.n, sp.r0 == 0);
}

/* DoRA linear t of layer l on n rows: its row norm, then y (the base output on entry) and z from its
 * u (row stride ldu: R alone, n·R in a group's u). z holds the rows of this call (an MLP linear's:
 * the chunk's, consumed by its backward). */
void dora_norm(gpu_llama *m, int l, int t) {
    const gl_linear &lin = m->layers[l].lin[t];
    gpu_dora_weight_norm_f32(m->gemm, m->acts[l].wnorm[t], lin.w_sq, lin.w, lin.ldw, lin.a, lin.b, lin.c_in,
                             lin.c_out, m->opt.R, m->opt.lora_scale, m->ws, m->stream);
}

void dora_output(gpu_llama *m, int l, int t, uint16_t *y, const uint16_t *u, int ldu, int n) {
    const gl_linear &lin = m->layers[l].lin[t];
    gl_acts &a = m->acts[l];
    dora_norm(m, l, t);
    gpu_dora_scale_bf16(m->gemm, y, a.z[t], u, ldu, lin.bias, lin.b, lin.mag, a.wnorm[t], n, lin.c_out, m->opt.R,
                        m->opt.lora_scale, m->ws, m->stream);
}

/* The dropped-out adapter input of LoRA linear t, rows sp, into x_drop (a chunk's: its slice of the
 * whole tensor's masks) — the forward's, and the same bits again in a recomputation or the backward. */
const uint16_t *dropped_input(gpu_llama *m, int l, int t, const uint16_t *x, uint64_t micro, gl_span sp) {
    const gl_linear &lin = m->layers[l].lin[t];
    gpu_dropout_forward_at_bf16(m->x_drop, x, (int64_t)sp.n * lin.c_in, m->opt.dropout, m->opt.seed,
                                dropout_offset(m, l, t, micro), (int64_t)sp.r0 * lin.c_in, m->stream);
    return m->x_drop;
}

/* The adapter's part of proj_forward (y holds the base product); true when it has also written
 * out = bf16(res + y) (gpu_lora_forward_residual_bf16: LoRA's pass where it can run). */
bool proj_adapter_forward(gpu_llama *m, int l, int t, uint16_t *y, const uint16_t *x, int train, uint64_t micro,
                          gl_span sp, uint16_t *out, const uint16_t *res) {
    gl_linear &lin = m->layers[l].lin[t];
    gl_acts &a = m->acts[l];
    const int N = sp.n;
    PROF(m, PROF_ADAPTER_FWD);
    const int R = m->opt.R;
    const float s = m->opt.lora_scale;
    uint16_t *u = a.u[t] + (size_t)sp.r0 * R;
    if (m->opt.mode == LLAMA_LORA) {
        const uint16_t *xa = train && m->opt.dropout > 0 ? dropped_input(m, l, t, x, micro, sp) : x;
        if (res && gpu_lora_forward_residual_bf16(m->gemm, out, res, y, u, xa, lin.a, lin.b, N, lin.c_in, lin.c_out, R,
                                                  s, m->stream))
            return true;
        gpu_lora_forward_bf16(m->gemm, y, u, xa, lin.a, lin.b, N, lin.c_in, lin.c_out, R, s, m->stream);
    } else {
        gpu_lora_u_bf16(m->gemm, u, x, lin.a, N, lin.c_in, R, m->stream);
        dora_output(m, l, t, y, u, R, N);
    }
    return false;
}

/* y (n, C_out) = linear t of layer l applied to x, rows sp, with its adapter (train: with dropout).
 * With res: then out = bf16(res + y) (the residual add, rows sp of out and res) — for a LoRA linear in
 * the adapter's own pass where that pass can (the same bits, y then holding the base product alone),
 * else as add_bf16. */
void proj_forward(gpu_llama *m, int l, int t, uint16_t *y, const uint16_t *x, int train, uint64_t micro, gl_span sp,
                  uint16_t *out = nullptr, const uint16_t *res = nullptr) {
    base_forward(m, l, t, y, x, sp.n);
    if (m->layers[l].lin[t].target && proj_adapter_forward(m, l, t, y, x, train, micro, sp, out, res)) return;
    if (!res) return;
    PROF(m, PROF_RESIDUAL);
    add_bf16(out, res, y, (int64_t)sp.n * m->layers[l].lin[t].c_out, m->stream);
}

/* The adapter intermediate u = x_a Aᵀ of LoRA linear t, rows sp, alone (the product
 * gpu_lora_forward_bf16 forms first, on the same input — dropped out as proj_forward drops it: the
 * same bits): what the backward needs of a linear whose output the recomputation does not form. */
void proj_adapter_u(gpu_llama *m, int l, int t, const uint16_t *x, uint64_t micro, gl_span sp) {
    gl_linear &lin = m->layers[l].lin[t];
    if (!lin.target) return;
    PROF(m, PROF_ADAPTER_FWD);
    /* the recomputation is of a training step */
    const uint16_t *xa = m->opt.dropout > 0 ? dropped_input(m, l, t, x, micro, sp) : x;
    gpu_lora_u_bf16(m->gemm, m->acts[l].u[t] + (size_t)sp.r0 * m->opt.R, xa, lin.a, sp.n, lin.c_in, m->opt.R,
                    m->stream);
}

/* What DoRA's magnitude gradient of linear t of layer l reads (llama_dora_saved): its saved z (q's
 * and k's with the magnitude in their weight: their pre-RoPE output there, gl_dora_weight_scaled),
 * or its output as the layer keeps it — for attention (v), in place of h (o: gl_keeps_o_out); gate
 * and up are rescaled inside SwiGLU's backward, which reads them anyway. */
const uint16_t *dora_saved_of(gpu_llama *m, int l, int t) {
    const gl_acts &a = m->acts[l];
    if (llama_dora_saved(&m->cfg, (enum llama_linear)t) == DORA_SAVED_Z) return a.z[t];
    return t == LLAMA_V ? a.v : t == LLAMA_O ? a.o_out : t == LLAMA_GATE ? a.gate : a.up;
}

/* DoRA's first backward step for linear t of layer l on n rows: dy_s = bf16(mns⊙dy) and its
 * magnitude gradient, from what gl_dora_saved says it reads. */
void dora_rescale(gpu_llama *m, int l, int t, uint16_t *dy_s, const uint16_t *dy, int n) {
    const gl_linear &lin = m->layers[l].lin[t];
    gpu_dora_rescale_bf16(dy_s, lin.mag_grad, dy, dora_saved_of(m, l, t), gl_dora_saved(m, t), lin.mag,
                          m->acts[l].wnorm[t], n, lin.c_out, m->ws, m->stream);
}

/* The backward of linear t of layer l for dy, rows sp: dx (when non-NULL) overwritten or accumulated
 * per beta; parameter gradients accumulate. x is the linear's saved input. rescaled: a DoRA
 * linear's dy is already bf16(mns⊙dy) and its magnitude gradient accumulated (the MLP's gate and up,
 * gpu_dora_swiglu_backward_bf16). */
/* Full fine-tuning's weight (bf16 products: FP8's is base_backward's) and bias gradients of linear t
 * on N rows: dW += dyᵀ x, db += 1ᵀ dy. */
void proj_dw(gpu_llama *m, int l, int t, const uint16_t *dy, const uint16_t *x, int N) {
    gl_linear &lin = m->layers[l].lin[t];
    PROF(m, PROF_LINEAR_DW);
    if (!m->fp8.on)
        gpu_linear_backward_dw(m->gemm, lin.w_grad, gl_grad_type(m), dy, x, N, lin.c_in, lin.c_out, m->stream);
    if (lin.bias_grad) {
        /* db (1, C_out) += 1ᵀ (1, N) · dy (N, C_out) */
        gemm_args p;
        memset(&p, 0, sizeof p);
        p.d = lin.bias_grad, p.d_type = gl_grad_type(m), p.ldd = lin.c_out;
        p.a = m->ones, p.op_a = GEMM_NO_TRANS, p.lda = N;
        p.b = dy, p.op_b = GEMM_NO_TRANS, p.ldb = lin.c_out;
        p.m = 1, p.n = lin.c_out, p.k = N, p.batch = 1;
        p.alpha = 1.0f, p.beta = GEMM_ACCUMULATE;
        gpu_gemm(m->gemm, &p, m->stream);
    }
}

/* proj_dw's weight gradient for dy in rows of ld_dy elements and x in rows of ldx (bf16 products, no
 * bias: a member of full fine-tuning's stacked group, group_backward). */
void proj_dw_ld(gpu_llama *m, int l, int t, const uint16_t *dy, int64_t ld_dy, const uint16_t *x, int64_t ldx, int N) {
    gl_linear &lin = m->layers[l].lin[t];
    CHECK(!m->fp8.on && !lin.bias_grad, "layer %d: a strided weight gradient for an FP8 or biased linear", l);
    PROF(m, PROF_LINEAR_DW);
    gpu_linear_backward_dw_ld(m->gemm, lin.w_grad, gl_grad_type(m), dy, ld_dy, x, ldx, N, lin.c_in, lin.c_out,
                              m->stream);
}

void proj_backward(gpu_llama *m, int l, int t, uint16_t *dx, enum gemm_beta beta, const uint16_t *dy,
                   const uint16_t *x, uint64_t micro, gl_span sp, bool rescaled) {
    gl_linear &lin = m->layers[l].lin[t];
    gl_acts &a = m->acts[l];
    const int N = sp.n;
    if (m->opt.mode == LLAMA_FULL) proj_dw(m, l, t, dy, x, N);
    const uint16_t *g = dy;
    if (lin.target && m->opt.mode == LLAMA_DORA && !rescaled) {
        PROF(m, PROF_ADAPTER_BWD);
        dora_rescale(m, l, t, m->dy_s, dy, N);
        g = m->dy_s;
    }
    base_backward(m, l, t, dx, beta, g, sp);
    if (!lin.target) return;
    PROF(m, PROF_ADAPTER_BWD);
    const uint16_t *xa = x;
    const uint8_t *keep = nullptr;
    float keep_scale = 1.0f;
    if (m->opt.mode == LLAMA_LORA && m->opt.dropout > 0) {
        xa = dropped_input(m, l, t, x, micro, sp);
        gpu_dropout_mask_at_u8(m->keep, (int64_t)N * lin.c_in, m->opt.dropout, m->opt.seed,
                               dropout_offset(m, l, t, micro), (int64_t)sp.r0 * lin.c_in, m->stream);
        keep = m->keep;
        keep_scale = (float)(1.0 / (1.0 - (double)m->opt.dropout));
    }
    gpu_lora_backward_bf16(m->gemm, dx, lin.a_grad, lin.b_grad, g, xa, keep, keep_scale,
                           a.u[t] + (size_t)sp.r0 * m->opt.R, lin.a, lin.b, N, lin.c_in, lin.c_out, m->opt.R,
                           m->opt.lora_scale, m->ws, m->stream);
}

/* The weight-gradient stream (gl_wg_side): the folded groups' dB and dA (group_backward) read the
 * group's dy, input x, u and du (the dx product's adapter columns) and write only their gradients,
 * so they run beside the rest of the backward until one of those buffers is written again. Every
 * such write waits here first: q/k/v's and gate/up's dx products (dn: the last groups' du; and
 * after them the attention backward, n1 and n2 of the layer below), RMSNorm's input gradient into
 * G (o's dy) comes after q/k/v's product; the data-parallel hooks, which hand a layer's gradients
 * on, and the backward's end join it too. One stream, so the products run in the order and with
 * the bits of the step's stream alone. */
void wg_join(gpu_llama *m) {
    if (!m->wg_pending) return;
    CUDA_CHECK(cudaStreamWaitEvent(m->stream, m->wg_done, 0));
    m->wg_pending = 0;
}

/* [gate │ up] of layer l (n rows of 2F) as one product over its stacked gate/up rows (ld_gu = 2F),
 * reading K columns of x (a folded group's: C and its adapters' columns). */
void gate_up_forward(gpu_llama *m, int l, uint16_t *const *y, const uint16_t *x, int64_t ldx, int K, int n) {
    const gl_linear &lg = m->layers[l].lin[LLAMA_GATE];
    CHECK(y[1] == y[0] + m->cfg.F, "layer %d: gate and up not side by side", l);
    gpu_linear_forward_ld_bf16(m->gemm, y[0], x, ldx, lg.w, lg.ldw, nullptr, n, K, 2 * m->cfg.F, m->stream);
}

/* The linears of group g of layer l on their shared input x (row stride ldx: the group's ld_n), rows
 * sp: y[i] for member i. A folded group writes its u into x's spare columns. */
void group_forward(gpu_llama *m, int l, int g, uint16_t *const *y, uint16_t *x, int64_t ldx, int train,
                   uint64_t micro, gl_span sp) {
    const int first = gl_group_first[g], n = gl_group_n[g];
    if (!m->grouped[g]) {
        if (g == GL_GROUP_GATE_UP && m->ld_gu == 2 * m->cfg.F) { /* full fine-tuning's stacked copies */
            CHECK(m->opt.mode == LLAMA_FULL, "layer %d: gate and up stacked outside full fine-tuning's groups", l);
            PROF(m, PROF_LINEAR_FWD);
            gate_up_forward(m, l, y, x, ldx, m->cfg.C, sp.n);
            return;
        }
        for (int i = 0; i < n; i++) proj_forward(m, l, first + i, y[i], x, train, micro, sp);
        return;
    }
    gl_linear *lin = m->layers[l].lin + first;
    const int R = m->opt.R;
    uint16_t *ug = m->acts[l].ug[g] + (size_t)sp.r0 * n * R;
    if (m->folded[g]) { /* u into x's spare columns, then each member's product over [x | u] */
        {
            PROF(m, PROF_ADAPTER_FWD);
            gpu_lora_group_fold_u_bf16(m->gemm, ug, x, ldx, lin[0].a, n, sp.n, lin[0].c_in, R, m->stream);
        }
        if (m->opt.mode == LLAMA_LORA) {
            PROF(m, PROF_LINEAR_FWD);
            if (g == GL_GROUP_GATE_UP && m->ld_gu == 2 * m->cfg.F) { /* [gate │ up] over the stacked rows */
                gate_up_forward(m, l, y, x, ldx, lin[0].c_in + n * R, sp.n);
                return;
            }
            for (int i = 0; i < n; i++)
                gpu_linear_forward_ld_bf16(m->gemm, y[i], x, ldx, lin[i].w, lin[i].ldw, lin[i].bias, sp.n,
                                           lin[i].c_in + n * R, lin[i].c_out, m->stream);
            return;
        }
        /* DoRA: a member with its magnitude folded into its weight (gl_dora_weight_scaled) is one
         * product over [x | u] with its scaled row, formed once a layer's forward (the MLP's chunks
         * share it; a recomputation forms it again); any other member the base product over x's C
         * columns, then its norm and magnitude pass from its slice of u */
        const int key = l * GL_N_GROUPS + g, fresh = m->dora_w_key != key;
        uint16_t *w_s = m->dora_w;
        for (int i = 0; i < n; i++) {
            const int t = first + i;
            if (!gl_dora_weight_scaled(m, t)) {
                {
                    PROF(m, PROF_LINEAR_FWD);
                    gpu_linear_forward_ld_bf16(m->gemm, y[i], x, ldx, lin[i].w, lin[i].ldw, lin[i].bias, sp.n,
                                               lin[i].c_in, lin[i].c_out, m->stream);
                }
                PROF(m, PROF_ADAPTER_FWD);
                dora_output(m, l, t, y[i], ug + (size_t)i * R, n * R, sp.n);
                continue;
            }
            if (fresh) {
                PROF(m, PROF_ADAPTER_FWD);
                dora_norm(m, l, t);
                gpu_dora_scale_weight_bf16(w_s, lin[i].w, lin[i].ldw, lin[i].mag, m->acts[l].wnorm[t], lin[i].c_out,
                                           lin[i].c_in + n * R, m->stream);
            }
            {
                PROF(m, PROF_LINEAR_FWD);
                gpu_linear_forward_ld_bf16(m->gemm, y[i], x, ldx, w_s, lin[i].ldw, nullptr, sp.n, lin[i].c_in + n * R,
                                           lin[i].c_out, m->stream);
            }
            w_s += (size_t)lin[i].c_out * lin[i].ldw;
        }
        m->dora_w_key = key;
        return;
    }
    const uint16_t *b[LORA_GROUP_MAX];
    int c_out[LORA_GROUP_MAX];
    for (int i = 0; i < n; i++) {
        base_forward(m, l, first + i, y[i], x, sp.n);
        b[i] = lin[i].b, c_out[i] = lin[i].c_out;
    }
    PROF(m, PROF_ADAPTER_FWD);
    const float s = m->opt.lora_scale;
    if (m->opt.mode == LLAMA_DORA) { /* u once for the group, then each member's norm and magnitude pass */
        gpu_lora_group_u_bf16(m->gemm, ug, x, lin[0].a, n, sp.n, lin[0].c_in, R, m->stream);
        for (int i = 0; i < n; i++) dora_output(m, l, first + i, y[i], ug + (size_t)i * R, n * R, sp.n);
        return;
    }
    gpu_lora_group_forward_bf16(m->gemm, y, ug, x, lin[0].a, b, n, sp.n, lin[0].c_in, c_out, R, s, m->stream);
}

/* Σ C_out of group members lin[0 .. n) whose dy lie side by side in rows of ld_dy elements and whose
 * weights lie stacked (group_stacked) — checked, as the one product over them reads them so. */
int64_t stacked_width(int l, const gl_linear *lin, int n, const uint16_t *const *dy, int64_t ld_dy) {
    int64_t c_all = 0;
    for (int i = 0; i < n; i++) {
        CHECK(i == 0 || (dy[i] == dy[i - 1] + lin[i - 1].c_out &&
                         lin[i].w == lin[i - 1].w + (int64_t)lin[i - 1].c_out * lin[i - 1].ldw),
              "layer %d: the group's dy or weights are not side by side", l);
        c_all += lin[i].c_out;
    }
    CHECK(ld_dy == c_all, "layer %d: the group's dy rows of %lld elements, its members' %lld", l, (long long)ld_dy,
          (long long)c_all);
    return c_all;
}

/* The backward of group g of layer l for dy[i], rows sp: dx (when non-NULL) OVERWRITTEN with the
 * sum of the members' input gradients; parameter gradients accumulate. x is the shared saved input
 * and dx's rows are at the same stride ldx (the group's ld_n: a folded group's dx carries its du
 * after the C columns). rescaled: as proj_backward's. ld_dy: the members' dy side by side in rows of
 * that many elements (q/k/v's and gate/up's where the group lies stacked: the base dx one product over the
 * stacked weights), 0: each packed. */
void group_backward(gpu_llama *m, int l, int g, uint16_t *dx, const uint16_t *const *dy, const uint16_t *x,
                    int64_t ldx, uint64_t micro, gl_span sp, bool rescaled, int64_t ld_dy = 0) {
    /* q/k/v's and gate/up's dx product writes dn, whose du columns the last groups' dA reads */
    if (g != GL_GROUP_O) wg_join(m);
    const int first = gl_group_first[g], n = gl_group_n[g];
    gl_linear *lin = m->layers[l].lin + first;
    const uint16_t *g_dy[LORA_GROUP_MAX];
    size_t off = 0; /* DoRA: the members' rescaled dy, side by side in dy_s (scratch_rows sizes it) */
    for (int i = 0; i < n; i++) {
        g_dy[i] = dy[i];
        if (m->opt.mode != LLAMA_DORA || rescaled || !m->grouped[g]) continue;
        PROF(m, PROF_ADAPTER_BWD);
        uint16_t *ds = m->dy_s + off;
        dora_rescale(m, l, first + i, ds, dy[i], sp.n);
        g_dy[i] = ds, off += (size_t)sp.n * lin[i].c_out;
    }
    if (m->folded[g] && dx) { /* du from the base products' adapter columns (gpu/lora.h) */
        const int R = m->opt.R;
        float *db[LORA_GROUP_MAX];
        int c_out[LORA_GROUP_MAX];
        for (int i = 0; i < n; i++) db[i] = lin[i].b_grad, c_out[i] = lin[i].c_out;
        {
            PROF(m, PROF_LINEAR_DX);
            if (ld_dy) { /* [dy_0 │ dy_1 │ …] (N, ld_dy) times the stacked rows: one product, K = Σ C_out */
                const int64_t c_all = stacked_width(l, lin, n, g_dy, ld_dy);
                gpu_linear_backward_dx_ld_bf16(m->gemm, dx, ldx, g_dy[0], lin[0].w, lin[0].ldw, sp.n,
                                               lin[0].c_in + n * R, (int)c_all, GEMM_OVERWRITE, m->stream);
            } else {
                for (int i = 0; i < n; i++)
                    gpu_linear_backward_dx_ld_bf16(m->gemm, dx, ldx, g_dy[i], lin[i].w, lin[i].ldw, sp.n,
                                                   lin[i].c_in + n * R, lin[i].c_out,
                                                   i == 0 ? GEMM_OVERWRITE : GEMM_ACCUMULATE, m->stream);
            }
        }
        PROF(m, PROF_ADAPTER_BWD);
        const uint16_t *u = m->acts[l].ug[g] + (size_t)sp.r0 * n * R;
        if (m->wg_side) { /* dB and dA on the weight-gradient stream, after the dx product */
            CUDA_CHECK(cudaEventRecord(m->wg_fork, m->stream));
            CUDA_CHECK(cudaStreamWaitEvent(m->wg_stream, m->wg_fork, 0));
            gpu_lora_group_fold_grads_strided_bf16(m->wg_gemm, dx, ldx, lin[0].a_grad, db, g_dy, ld_dy, x, ldx, u, n,
                                                   sp.n, lin[0].c_in, c_out, R, m->opt.lora_scale, m->wg_ws,
                                                   m->wg_stream);
            CUDA_CHECK(cudaEventRecord(m->wg_done, m->wg_stream));
            m->wg_pending = 1;
        }
        gpu_lora_group_fold_backward_strided_bf16(m->gemm, dx, ldx, m->wg_side ? nullptr : lin[0].a_grad,
                                                  m->wg_side ? nullptr : db, g_dy, ld_dy, x, ldx, u, lin[0].a, n, sp.n,
                                                  lin[0].c_in, c_out, R, m->opt.lora_scale, m->ws, m->stream);
        return;
    }
    if (ld_dy && m->opt.mode == LLAMA_FULL) { /* full fine-tuning's stacked copies (group_stacked) */
        for (int i = 0; i < n; i++) CHECK(!lin[i].bias, "layer %d: a biased member of a stacked group", l);
        const int64_t c_all = stacked_width(l, lin, n, dy, ld_dy);
        if (m->dw_one[g]) { /* the members' gradients side by side too: one dW product */
            CHECK(!m->fp8.on, "layer %d: one bf16 dW product under FP8", l);
            PROF(m, PROF_LINEAR_DW);
            gpu_linear_backward_dw_ld(m->gemm, lin[0].w_grad, gl_grad_type(m), dy[0], ld_dy, x, ldx, sp.n,
                                      lin[0].c_in, (int)c_all, m->stream);
        } else {
            for (int i = 0; i < n; i++) proj_dw_ld(m, l, first + i, dy[i], ld_dy, x, ldx, sp.n);
        }
        if (!dx) return;
        PROF(m, PROF_LINEAR_DX);
        gpu_linear_backward_dx_ld_bf16(m->gemm, dx, ldx, dy[0], lin[0].w, lin[0].ldw, sp.n, lin[0].c_in, (int)c_all,
                                       GEMM_OVERWRITE, m->stream);
        return;
    }
    /* side by side: the folded group's backward above, or its dx-less form below (layer 0) */
    CHECK(ld_dy == 0 || (m->grouped[g] && m->opt.mode == LLAMA_LORA && !dx),
          "layer %d: dy side by side for a group whose backward reads it packed", l);
    if (!m->grouped[g]) {
        for (int i = 0; i < n; i++)
            proj_backward(m, l, first + i, dx, i == 0 ? GEMM_OVERWRITE : GEMM_ACCUMULATE, dy[i], x, micro, sp,
                          rescaled);
        return;
    }
    const uint16_t *b[LORA_GROUP_MAX];
    float *db[LORA_GROUP_MAX];
    int c_out[LORA_GROUP_MAX];
    for (int i = 0; i < n; i++) {
        base_backward(m, l, first + i, dx, i == 0 ? GEMM_OVERWRITE : GEMM_ACCUMULATE, g_dy[i], sp);
        b[i] = lin[i].b, db[i] = lin[i].b_grad, c_out[i] = lin[i].c_out;
    }
    PROF(m, PROF_ADAPTER_BWD);
    gpu_lora_group_backward_strided_bf16(m->gemm, dx, lin[0].a_grad, db, g_dy, ld_dy, x, ldx,
                                         m->acts[l].ug[g] + (size_t)sp.r0 * n * m->opt.R, lin[0].a, b, n, sp.n,
                                         lin[0].c_in, c_out, m->opt.R, m->opt.lora_scale, m->ws, m->stream);
}

/* Layer l's normalized inputs: its own (options.keep_norms), else the scratch ones every layer shares. */
uint16_t *n1_of(gpu_llama *m, int l) { return m->acts[l].n1 ? m->acts[l].n1 : m->n1; }
uint16_t *n2_of(gpu_llama *m, int l) { return m->acts[l].n2 ? m->acts[l].n2 : m->n2; }

/* n1 = rmsnorm(x[l]) into n1_of (forward, and recomputed in backward: the same bits). */
void norm1(gpu_llama *m, int l) {
    PROF(m, PROF_NORM);
    gpu_rmsnorm_forward_strided_bf16(n1_of(m, l), m->ld_n1, m->acts[l].rstd1, m->x[l], m->layers[l].attn_norm, m->N,
                                     m->cfg.C, m->cfg.rms_norm_eps, m->stream);
}

/* n2 = rmsnorm(h) of layer l, recomputed from the saved h before the MLP's backward — or, where the
 * layer kept o's output instead (gl_keeps_o_out), h = x + o and n2 formed again as the forward
 * formed them (the same kernel: the same bits, rstd2 included). */
void norm2(gpu_llama *m, int l) {
    PROF(m, PROF_NORM);
    gl_acts &a = m->acts[l];
    if (a.o_out)
        gpu_rmsnorm_residual_forward_strided_bf16(a.h, n2_of(m, l), m->ld_n2, a.rstd2, m->x[l], a.o_out,
                                                  m->layers[l].mlp_norm, m->N, m->cfg.C, m->cfg.rms_norm_eps,
                                                  m->stream);
    else
        gpu_rmsnorm_forward_strided_bf16(n2_of(m, l), m->ld_n2, a.rstd2, a.h, m->layers[l].mlp_norm, m->N, m->cfg.C,
                                         m->cfg.rms_norm_eps, m->stream);
}

/* How far layer_forward goes: the attention part (RECOMPUTE_ATTN's recomputation); up to h and
 * n2 (LAYER's under MLP chunks, whose backward forms each chunk's MLP itself); up to the MLP input
 * and the down projection's LoRA intermediate (LAYER's: the backward never reads the layer's
 * output); the whole layer. */
enum fwd_upto { FWD_ATTN = 0, FWD_NORM2, FWD_MLP_INPUT, FWD_ALL };

/* The MLP's forward on rows sp of layer l (n2 and, with `down`, tmp at their full-batch rows; gate,
 * up and the MLP input in their chunk-sized buffers): gate/up, SwiGLU, then the down projection
 * into tmp and the layer's output x[l + 1] = bf16(h + it) at those rows — or, without `down`, the
 * down adapter's intermediate alone. */
void mlp_forward(gpu_llama *m, int l, gl_span sp, int train, uint64_t micro, int down) {
    gl_acts &a = m->acts[l];
    const int F = m->cfg.F;
    const size_t off = (size_t)sp.r0 * m->cfg.C;
    uint16_t *n2 = n2_of(m, l) + (size_t)sp.r0 * m->ld_n2;
    fp8_input(m, l, LLAMA_GATE, n2, m->cfg.C, sp); /* one quantization for gate, up */
    uint16_t *const gate_up[2] = {a.gate, a.up};
    group_forward(m, l, GL_GROUP_GATE_UP, gate_up, n2, m->ld_n2, train, micro, sp);
    bool coded = false; /* down's input codes from SwiGLU's pass itself (FP8, delayed scaling) */
    {
        PROF(m, PROF_SWIGLU);
        coded = down && m->fp8.on && gl_fp8_swiglu_forward(m, l, a.gate, a.up, (int)m->ld_gu, sp.n, a.mlp);
        if (!coded) gpu_swiglu_forward_bf16(a.mlp, a.gate, a.up, sp.n, F, (int)m->ld_gu, m->stream);
    }
    if (!down) {
        if (m->opt.mode == LLAMA_LORA) proj_adapter_u(m, l, LLAMA_DOWN, a.mlp, micro, sp);
        return;
    }
    if (!coded) fp8_input(m, l, LLAMA_DOWN, a.mlp, F, sp);
    proj_forward(m, l, LLAMA_DOWN, m->tmp + off, a.mlp, train, micro, sp, m->x[l + 1] + off, a.h + off);
}

/* Layer l from its input x[l], as far as upto; the whole layer writes x[l + 1]. The MLP runs in
 * chunks of mlp_rows rows (one chunk unless mlp_chunk). */
void layer_forward(gpu_llama *m, int l, int train, uint64_t micro, enum fwd_upto upto) {
    const model_config &c = m->cfg;
    gl_layer &ly = m->layers[l];
    gl_acts &a = m->acts[l];
    const int N = m->N;
    const uint16_t *x = m->x[l];
    cudaStream_t s = m->stream;
    norm1(m, l);
    uint16_t *n1 = n1_of(m, l);
    fp8_input(m, l, LLAMA_Q, n1, c.C, whole(m)); /* one quantization for q, k, v */
    /* DoRA's q and k with the magnitude in their weight: the pre-RoPE output into z, which their
     * magnitude gradient reads (gl_dora_weight_scaled), and RoPE from there */
    const bool qk_pre = gl_dora_weight_scaled(m, LLAMA_Q);
    CHECK(qk_pre == (bool)gl_dora_weight_scaled(m, LLAMA_K), "layer %d: q and k scaled unlike", l);
    uint16_t *const qkv[3] = {qk_pre ? a.z[LLAMA_Q] : a.q, qk_pre ? a.z[LLAMA_K] : a.k, a.v};
    group_forward(m, l, GL_GROUP_QKV, qkv, n1, m->ld_n1, train, micro, whole(m));
    {
        PROF(m, PROF_ROPE);
        if (qk_pre)
            gpu_rope_forward_from_bf16(a.q, a.k, a.z[LLAMA_Q], a.z[LLAMA_K], m->rope_cos, m->rope_sin, m->pos, N,
                                       c.H, c.KVH, c.D, m->QD, m->KD, s);
        else
            gpu_rope_forward_bf16(a.q, a.k, m->rope_cos, m->rope_sin, m->pos, N, c.H, c.KVH, c.D, m->QD, m->KD, s);
    }
    {
        PROF(m, PROF_ATTN_FWD);
        gpu_attention_forward_ld_bf16(a.att, m->ld_att, a.lse, a.q, a.k, a.v, m->opt.B, m->opt.T, c.H, c.KVH, c.D,
                                      (float)(1.0 / sqrt((double)c.D)), s);
    }
    if (upto == FWD_ATTN) return;
    fp8_input(m, l, LLAMA_O, a.att, m->QD, whole(m));
    uint16_t *o = a.o_out ? a.o_out : m->tmp; /* kept (gl_keeps_o_out), or consumed by the residual */
    /* folded: u into att's spare columns, o over [att | u]; else o alone (group_forward's fallback) */
    group_forward(m, l, GL_GROUP_O, &o, a.att, m->ld_att, train, micro, whole(m));
    {
        PROF(m, PROF_NORM);
        gpu_rmsnorm_residual_forward_strided_bf16(a.h, n2_of(m, l), m->ld_n2, a.rstd2, x, o, ly.mlp_norm, N, c.C,
                                                  c.rms_norm_eps, s);
    }
    if (upto == FWD_NORM2) return;
    for (int r0 = 0; r0 < N; r0 += m->mlp_rows) /* FWD_ALL: each chunk's rows of x[l + 1] */
        mlp_forward(m, l, gl_span{r0, N - r0 < m->mlp_rows ? N - r0 : m->mlp_rows}, train, micro, upto == FWD_ALL);
}

/* LoRA's down adapter without dropout: its dx += du A joined to SwiGLU's backward (one pass over the
 * base dx, gate and up: gpu_lora_backward_swiglu_bf16, counted as the adapter backward) — at ranks
 * up to 64: at 16 the whole step measured faster (docs/RESULTS.md, 2026-11-28); at 64 the joined pass
 * alone ran 30% slower than the two passes until SwiGLU's divisions lost their branches and the
 * pass its spare registers, and 20% faster after (2026-11-30) */
bool down_joined(const gpu_llama *m, int l) {
    return gl_lora_down_joined(&m->opt) && m->layers[l].lin[LLAMA_DOWN].target;
}

/* Where the MLP's backward can form its input itself (mlp_backward's form_input): the joined LoRA
 * pass, and full fine-tuning's SwiGLU backward (down's dW after it). */
bool mlp_input_formed_in_backward(const gpu_llama *m, int l) { return down_joined(m, l) || m->opt.mode == LLAMA_FULL; }

/* The MLP's backward on rows sp of layer l: G's rows hold d x[l + 1] on entry; dn's rows get the
 * gate/up input gradient (overwritten). gate, up and the MLP input are this chunk's (mlp_forward,
 * or the saved ones when the MLP runs whole); SwiGLU's backward runs in place over gate and up.
 * form_input (mlp_input_formed_in_backward layers only): the MLP input is not there; the pass over
 * gate and up (the joined LoRA pass, or SwiGLU's backward) forms it into the MLP input buffer, the
 * same bits as SwiGLU's forward, and what reads it (LoRA's dA, full fine-tuning's dW of down) runs
 * after that pass. */
void mlp_backward(gpu_llama *m, int l, gl_span sp, uint64_t micro, bool form_input = false) {
    gl_acts &a = m->acts[l];
    const int F = m->cfg.F;
    const size_t off = (size_t)sp.r0 * m->cfg.C;
    if (!form_input) fp8_input_t(m, l, LLAMA_DOWN, a.mlp, F, sp); /* else once the input is formed */
    const gl_linear &ld = m->layers[l].lin[LLAMA_DOWN];
    const bool joined = down_joined(m, l);
    CHECK(!form_input || mlp_input_formed_in_backward(m, l), "layer %d: the MLP input formed by a pass that does not run",
          l);
    const gl_linear &lg = m->layers[l].lin[LLAMA_GATE], &lu = m->layers[l].lin[LLAMA_UP];
    const bool dora = m->opt.mode == LLAMA_DORA && (lg.target || lu.target);
    if (joined) {
        base_backward(m, l, LLAMA_DOWN, m->dmlp, GEMM_OVERWRITE, m->G + off, sp);
        PROF(m, PROF_ADAPTER_BWD);
        gpu_lora_backward_swiglu_bf16(m->gemm, a.gate, a.up, m->dmlp, ld.a_grad, ld.b_grad, m->G + off,
                                      form_input ? nullptr : a.mlp, form_input ? a.mlp : nullptr,
                                      a.u[LLAMA_DOWN] + (size_t)sp.r0 * m->opt.R, ld.a, ld.b, sp.n, F, ld.c_out,
                                      m->opt.R, m->opt.lora_scale, m->ld_gu, m->ws, m->stream);
    } else if (form_input) { /* full fine-tuning: dx, SwiGLU's backward forming the input, then dW */
        base_backward(m, l, LLAMA_DOWN, m->dmlp, GEMM_OVERWRITE, m->G + off, sp, true);
        {
            PROF(m, PROF_SWIGLU);
            gpu_swiglu_backward_forming_bf16(a.gate, a.up, a.mlp, m->dmlp, a.gate, a.up, sp.n, F, (int)m->ld_gu,
                                             (int)m->ld_gu, m->stream);
        }
        if (m->fp8.on) { /* the formed input's transposed codes, then dW on them and dy's */
            fp8_input_t(m, l, LLAMA_DOWN, a.mlp, F, sp);
            base_dw_fp8(m, l, LLAMA_DOWN, sp.n);
        }
        proj_dw(m, l, LLAMA_DOWN, m->G + off, a.mlp, sp.n); /* bf16 dW (FP8: none), bias */
    } else {
        proj_backward(m, l, LLAMA_DOWN, m->dmlp, GEMM_OVERWRITE, m->G + off, a.mlp, micro, sp, false);
        PROF(m, PROF_SWIGLU);
        CHECK(!dora || m->ld_gu == F, "layer %d: DoRA's gate and up side by side", l);
        if (dora) /* SwiGLU's backward and the gate/up rescale in one pass, in place, from gate and up */
            gpu_dora_swiglu_backward_bf16(a.gate, a.up, lg.target ? lg.mag_grad : nullptr,
                                          lu.target ? lu.mag_grad : nullptr, m->dmlp, nullptr, nullptr, DORA_SAVED_Y,
                                          lg.target ? lg.mag : nullptr, a.wnorm[LLAMA_GATE],
                                          lu.target ? lu.mag : nullptr, a.wnorm[LLAMA_UP], sp.n, F, m->ws, m->stream);
        else if (!(m->fp8.on && gl_fp8_swiglu_backward(m, l, m->dmlp, a.gate, a.up, (int)m->ld_gu, sp.n)))
            gpu_swiglu_backward_bf16(a.gate, a.up, m->dmlp, a.gate, a.up, sp.n, F, (int)m->ld_gu, (int)m->ld_gu,
                                     m->stream); /* in place (FP8, delayed: gate's and up's dŷ codes instead) */
    }
    const uint16_t *n2 = n2_of(m, l) + (size_t)sp.r0 * m->ld_n2;
    fp8_input_t(m, l, LLAMA_GATE, n2, m->cfg.C, sp);
    const uint16_t *const d_gate_up[2] = {a.gate, a.up};
    uint16_t *dn = m->dn + (size_t)sp.r0 * m->ld_n2; /* at n2's stride: a folded group's du after C */
    group_backward(m, l, GL_GROUP_GATE_UP, dn, d_gate_up, n2, m->ld_n2, micro, sp, dora,
                   m->ld_gu == F ? 0 : m->ld_gu); /* side by side: one dx product */
    m->fp8.gate_up_ready = 0;
}

/* G holds d x[l + 1] on entry and d x[l] on exit (unless layer 0's is not needed). */
void layer_backward(gpu_llama *m, int l, uint64_t micro) {
    const model_config &c = m->cfg;
    gl_layer &ly = m->layers[l];
    gl_acts &a = m->acts[l];
    const int N = m->N, F = c.F, full = m->opt.mode == LLAMA_FULL;
    cudaStream_t s = m->stream;
    /* MLP */
    if (m->mlp_rows < N) { /* chunks (RECOMPUTE_LAYER, which left n2): each chunk's MLP again, then its backward */
        for (int r0 = 0; r0 < N; r0 += m->mlp_rows) {
            const gl_span sp{r0, N - r0 < m->mlp_rows ? N - r0 : m->mlp_rows};
            m->fp8.recording = FP8_DISCARD; /* a recomputation records nothing */
            mlp_forward(m, l, sp, 1, micro, m->opt.mode == LLAMA_DORA); /* DoRA's backward reads z of down */
            m->fp8.recording = FP8_RECORD;
            mlp_backward(m, l, sp, micro);
        }
    } else {
        /* LAYER's recomputation left the MLP input and n2 there; a kept layer forms them again */
        const bool formed = m->opt.recompute == RECOMPUTE_LAYER && !gl_keeps_set(m, l);
        /* the shared MLP input buffer gets this layer's, the same bits: from the backward's pass over
         * gate and up where it can (mlp_input_formed_in_backward), else from SwiGLU's forward first */
        const bool none = gl_fp8_inputs_kept(&m->opt); /* the backward reads the kept codes instead */
        const bool form_in_pass =
            m->opt.mlp_input == GPU_MLP_INPUT_RECOMPUTED && !formed && !none && mlp_input_formed_in_backward(m, l);
        if (m->opt.mlp_input == GPU_MLP_INPUT_RECOMPUTED && !formed && !none && !form_in_pass) {
            PROF(m, PROF_SWIGLU);
            gpu_swiglu_forward_bf16(a.mlp, a.gate, a.up, N, F, (int)m->ld_gu, s);
        }
        /* kept n2, or n2's codes (gl_fp8_inputs_kept): formed again only with h (o_out) */
        if (!formed && (a.o_out || (!a.n2 && !none))) norm2(m, l);
        mlp_backward(m, l, whole(m), micro, form_in_pass);
    }
    {
        PROF(m, PROF_NORM);
        gpu_rmsnorm_backward_strided_bf16(m->G, full ? ly.mlp_norm_grad : nullptr, gl_grad_type(m), m->dn, m->ld_n2,
                                          m->G, a.h, ly.mlp_norm, a.rstd2, N, c.C, m->ws, s);
    }
    /* attention */
    fp8_input_t(m, l, LLAMA_O, a.att, m->QD, whole(m));
    /* folded: datt at ld_att, du from the base dx product's adapter columns; else o alone */
    const uint16_t *dy_o = m->G;
    group_backward(m, l, GL_GROUP_O, m->datt, &dy_o, a.att, m->ld_att, micro, whole(m), false);
    {
        /* dq and dk of the pre-RoPE q and k: RoPE's backward inside the attention backward */
        PROF(m, PROF_ATTN_BWD);
        gpu_attention_rope_backward_strided_bf16(m->dq, m->dk, m->dv, m->ld_dqkv, m->datt, a.q, a.k, a.v, a.att,
                                                 m->ld_att, a.lse, m->rope_cos, m->rope_sin, m->pos, m->opt.B,
                                                 m->opt.T, c.H, c.KVH, c.D, (float)(1.0 / sqrt((double)c.D)), m->ws, s);
    }
    const int need_dx = full || l > 0; /* the embedding is frozen in the adapter modes */
    uint16_t *dx = need_dx ? m->dn : nullptr;
    /* kept (options.keep_norms): the forward's; gl_fp8_inputs_kept: nothing reads n1 (FP8 full
     * fine-tuning's products read codes, its weight gradients the forward's transposed ones) */
    if (!a.n1 && !gl_fp8_inputs_kept(&m->opt)) norm1(m, l);
    fp8_input_t(m, l, LLAMA_Q, n1_of(m, l), c.C, whole(m));
    const uint16_t *const d_qkv[3] = {m->dq, m->dk, m->dv};
    group_backward(m, l, GL_GROUP_QKV, dx, d_qkv, n1_of(m, l), m->ld_n1, micro, whole(m), false, m->ld_dqkv);
    if (need_dx) {
        PROF(m, PROF_NORM);
        gpu_rmsnorm_backward_strided_bf16(m->G, full ? ly.attn_norm_grad : nullptr, gl_grad_type(m), m->dn, m->ld_n1,
                                          m->G, m->x[l], ly.attn_norm, a.rstd1, N, c.C, m->ws, s);
    }
}

/* Layer l's frozen base as the pass reads it: an NF4 or FP8-stored base dequantized to bf16
 * (bf16 products), or the FP8 codes formed a layer at a time (FP8 products: forward W, backward
 * Wᵀ and, with recomputation, W of what is recomputed; DoRA's row norm also reads W_eff in bf16). */
void prepare_layer(gpu_llama *m, int l, int backward) {
    if (!m->fp8.on) {
        gl_dequantize_layer(m, l);
        return;
    }
    const int recomputed = m->opt.recompute == RECOMPUTE_LAYER  ? GL_FP8_W
                           : m->opt.recompute == RECOMPUTE_ATTN ? GL_FP8_W_QKV
                                                                : 0;
    const int need = backward ? GL_FP8_WT | recomputed : GL_FP8_W;
    {
        PROF(m, PROF_FP8);
        gl_fp8_layer(m, l, need);
    }
    if (m->opt.mode == LLAMA_DORA && (need & (GL_FP8_W | GL_FP8_W_QKV))) gl_dequantize_layer(m, l);
}

/* ---- offloaded layer inputs (GPU_OFFLOAD_INPUTS): x[l] lives in x_ping[l % 2] on the device and in
 * x_host at slot l. Events per layer input: x_in (it is in its device buffer), x_out (its copy to
 * the host is done), x_free (its device buffer may be refilled). The compute stream waits only
 * where a buffer is about to be overwritten or read. */

int offloaded(const gpu_llama *m) { return m->opt.offload == GPU_OFFLOAD_INPUTS; }

uint16_t *host_slot(gpu_llama *m, int l) { return m->x_host + (size_t)l * m->N * m->cfg.C; }

/* x[l] has just been written on the compute stream: copy it to the host. */
void offload_out(gpu_llama *m, int l) {
    const size_t bytes = (size_t)m->N * m->cfg.C * sizeof(uint16_t);
    CUDA_CHECK(cudaEventRecord(m->x_in[l], m->stream));
    CUDA_CHECK(cudaStreamWaitEvent(m->copy_stream, m->x_in[l], 0));
    CUDA_CHECK(cudaMemcpyAsync(host_slot(m, l), m->x[l], bytes, cudaMemcpyDeviceToHost, m->copy_stream));
    CUDA_CHECK(cudaEventRecord(m->x_out[l], m->copy_stream));
}

/* From here on the compute stream no longer needs the buffer of x[l + 2] (the one x[l] shares):
 * bring x[l] back into it. */
void offload_in(gpu_llama *m, int l) {
    const size_t bytes = (size_t)m->N * m->cfg.C * sizeof(uint16_t);
    CUDA_CHECK(cudaEventRecord(m->x_free[l], m->stream));
    CUDA_CHECK(cudaStreamWaitEvent(m->copy_stream, m->x_free[l], 0));
    CUDA_CHECK(cudaMemcpyAsync(m->x[l], host_slot(m, l), bytes, cudaMemcpyHostToDevice, m->copy_stream));
    CUDA_CHECK(cudaEventRecord(m->x_in[l], m->copy_stream));
}

void forward(gpu_llama *m, int train, int64_t n_valid, float grad_scale, uint64_t micro) {
    const model_config &c = m->cfg;
    const int N = m->N, full = m->opt.mode == LLAMA_FULL, off = offloaded(m) && train;
    cudaStream_t s = m->stream;
    gl_fp8_begin(m, train);
    if (m->n_fold_slots) { /* the folded weights' bf16(s·B) from the current B (gpu/lora.h): an NF4
                              base's cached layer, whose columns its dequantization wrote */
        PROF(m, PROF_ADAPTER_FWD);
        gl_fold_refresh(m, m->dq_layer);
    }
    m->dora_w_key = -1; /* DoRA's scaled weights: of the current magnitudes and B */
    if (offloaded(m)) CUDA_CHECK(cudaStreamWaitEvent(s, m->x_in[0], 0)); /* the last backward's copies are done */
    {
        PROF(m, PROF_EMBED);
        gpu_embedding_forward_bf16(m->x[0], m->tokens, m->embed, N, c.C, c.V, s);
    }
    if (off) offload_out(m, 0);
    for (int l = 0; l < c.L; l++) {
        NVTX(m, "layer %d forward", l);
        /* layer l writes x[l + 1] over x[l − 1]: its copy must be out */
        if (off && l >= 1 && l + 1 < c.L) CUDA_CHECK(cudaStreamWaitEvent(s, m->x_out[l - 1], 0));
        prepare_layer(m, l, 0);
        layer_forward(m, l, train, micro, FWD_ALL);
        if (off && l + 1 < c.L) offload_out(m, l + 1);
    }
    {
        PROF(m, PROF_NORM);
        gpu_rmsnorm_forward_bf16(m->nf, m->rstd_f, m->x[c.L], m->final_norm, N, c.C, c.rms_norm_eps, s);
    }
    if (train && m->grad_gate) { /* the head's backward writes the head's and (tied) the embedding's */
        m->grad_gate(m->grad_gate_ctx, 0);
        m->grad_gate(m->grad_gate_ctx, c.L + 1);
    }
    PROF(m, PROF_LM_HEAD);
    gpu_lm_head_cross_entropy_bf16(m->loss_dev, train ? m->dn : nullptr, train && full ? m->lm_head_grad : nullptr,
                                   gl_grad_type(m), m->nf, m->lm_head, m->labels, N, c.C, c.V, n_valid, grad_scale,
                                   m->plan.ce_rows, m->gemm, m->ws, s);
    if (train) {
        accumulate_nll<<<1, 1, 0, s>>>(m->nll_acc, m->loss_dev, (double)n_valid);
        KERNEL_CHECK(s);
    }
}

void backward(gpu_llama *m, uint64_t micro) {
    const model_config &c = m->cfg;
    const int N = m->N, full = m->opt.mode == LLAMA_FULL;
    cudaStream_t s = m->stream;
    {
        PROF(m, PROF_NORM);
        gpu_rmsnorm_backward_bf16(m->G, full ? m->final_norm_grad : nullptr, gl_grad_type(m), m->dn, nullptr,
                                  m->x[c.L], m->final_norm, m->rstd_f, N, c.C, m->ws, s);
    }
    if (m->grad_hook) m->grad_hook(m->grad_hook_ctx, 0); /* the head's bucket (gpu/llama.h) */
    for (int l = c.L - 1; l >= 0; l--) {
        NVTX(m, "layer %d backward", l);
        /* x[l] back on the device (brought in during layer l + 1's backward) */
        if (offloaded(m) && l + 1 < c.L) CUDA_CHECK(cudaStreamWaitEvent(s, m->x_in[l], 0));
        prepare_layer(m, l, 1);
        m->fp8.recording = FP8_DISCARD; /* a recomputation records nothing */
        /* The last layer is not recomputed: the shared set (and n2) still hold what its forward
         * wrote — the final norm and the head touch neither — and a recomputation is bitwise that. */
        if (l == c.L - 1 || gl_keeps_set(m, l)) { /* --recompute-keep's layers: their own sets */
        } else if (m->opt.recompute == RECOMPUTE_LAYER) { /* DoRA's backward reads the down product (z) */
            layer_forward(m, l, 1, micro,
                          m->mlp_rows < m->N                ? FWD_NORM2
                          : m->opt.mode == LLAMA_DORA       ? FWD_ALL
                                                            : FWD_MLP_INPUT);
        } else if (m->opt.recompute == RECOMPUTE_ATTN) {
            layer_forward(m, l, 1, micro, FWD_ATTN);
        }
        m->fp8.recording = FP8_RECORD;
        if (offloaded(m) && l >= 1) offload_in(m, l - 1);
        if (m->grad_gate) m->grad_gate(m->grad_gate_ctx, c.L - l);
        layer_backward(m, l, micro);
        if (m->grad_hook) {
            wg_join(m);
            m->grad_hook(m->grad_hook_ctx, c.L - l);
        }
    }
    wg_join(m);
    if (full) {
        PROF(m, PROF_EMBED);
        gpu_embedding_backward(m->embed_grad, gl_grad_type(m), m->G, m->tokens, N, c.C, c.V, s);
    }
    if (m->grad_hook) m->grad_hook(m->grad_hook_ctx, c.L + 1);
}

}  // namespace

void gl_to_bf16(uint16_t *dst, const float *src, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    const int64_t b = (n + kBlock - 1) / kBlock;
    f32_to_bf16<<<(unsigned)(b < 8192 ? b : 8192), kBlock, 0, s>>>(reinterpret_cast<bf16 *>(dst), src, n);
    KERNEL_CHECK(s);
}

extern "C" void gpu_llama_set_batch(gpu_llama *m, const int32_t *tokens, const int32_t *labels) {
    /* two staging buffers: wait only for the copy made out of this one two batches ago */
    const int k = m->stage ^= 1;
    CUDA_CHECK(cudaEventSynchronize(m->staged[k]));
    const size_t bytes = (size_t)m->N * sizeof(int32_t);
    int32_t *ht = m->h_tokens + (size_t)k * m->N, *hl = m->h_labels + (size_t)k * m->N;
    memcpy(ht, tokens, bytes);
    memcpy(hl, labels, bytes);
    PROF(m, PROF_COPY);
    CUDA_CHECK(cudaMemcpyAsync(m->tokens, ht, bytes, cudaMemcpyHostToDevice, m->stream));
    CUDA_CHECK(cudaMemcpyAsync(m->labels, hl, bytes, cudaMemcpyHostToDevice, m->stream));
    CUDA_CHECK(cudaEventRecord(m->staged[k], m->stream));
}

/* A training micro-step's launches: forward with the loss, backward. */
static void micro_step(gpu_llama *m, int64_t n_valid, float grad_scale, uint64_t micro) {
    forward(m, 1, n_valid, grad_scale, micro);
    backward(m, micro);
}

/* Whether a micro-step can run as a CUDA graph: every kernel, pointer and scalar of its launches
 * fixed by the key (n_valid, grad_scale, the host's layer caches at its start: graph_state). Not
 * with what changes per micro-step or acts on the host in the middle of it: adapter dropout (its
 * masks' offsets), offloaded inputs (a second stream and host events), op timing, NVTX ranges,
 * data parallel hooks. */
static bool graph_eligible(const gpu_llama *m) {
    return m->use_graphs && !(m->opt.dropout > 0) && m->opt.offload == GPU_OFFLOAD_NONE &&
           m->opt.profile == GPU_PROFILE_OFF && m->opt.nvtx == GPU_NVTX_OFF && m->grad_hook == nullptr &&
           m->grad_gate == nullptr;
}

/* The host state that decides which launches a micro-step makes, and that it leaves behind: the
 * dequantized layer (NF4, FP8 W_eff), the FP8 layer codes held (W, Wᵀ), stale trained codes. */
static void graph_state(const gpu_llama *m, int s[4]) {
    s[0] = m->dq_layer, s[1] = m->fp8.w8_layer, s[2] = m->fp8.wt8_layer, s[3] = m->fp8.stale;
}

static void set_graph_state(gpu_llama *m, const int s[4]) {
    m->dq_layer = s[0], m->fp8.w8_layer = s[1], m->fp8.wt8_layer = s[2], m->fp8.stale = s[3];
}

/* The micro-step through a CUDA graph: the key's first use runs uncaptured (so that every cuBLASLt
 * plan and kernel attribute exists), its second is captured and launched, later ones replay it.
 * Replaying the same kernels on the same buffers gives the same bits as running them; the host
 * state the micro-step leaves (graph_state, FP8's recording) is set as the run left it. */
static void train_micro_graphed(gpu_llama *m, int64_t n_valid, float grad_scale, uint64_t micro) {
    uint32_t bits;
    memcpy(&bits, &grad_scale, sizeof bits);
    int state[4];
    graph_state(m, state);
    gpu_llama::gl_graph *ge = nullptr;
    for (int i = 0; i < m->n_graphs; i++) {
        gpu_llama::gl_graph &x = m->graphs[i];
        if (x.n_valid == n_valid && x.scale_bits == bits && memcmp(x.start, state, sizeof state) == 0) ge = &x;
    }
    if (!ge) { /* a new key: a free slot, or the oldest one's */
        const int cap = (int)(sizeof m->graphs / sizeof m->graphs[0]);
        const int i = m->n_graphs < cap ? m->n_graphs++ : m->next_graph;
        m->next_graph = (i + 1) % cap;
        ge = &m->graphs[i];
        if (ge->exec) CUDA_CHECK(cudaGraphExecDestroy(ge->exec));
        *ge = gpu_llama::gl_graph{n_valid, bits, {0, 0, 0, 0}, {0, 0, 0, 0}, 0, nullptr};
        memcpy(ge->start, state, sizeof state);
    }
    if (ge->runs++ == 0) {
        micro_step(m, n_valid, grad_scale, micro);
        graph_state(m, ge->end);
        return;
    }
    if (!ge->exec) {
        cudaGraph_t graph;
        CUDA_CHECK(cudaStreamBeginCapture(m->stream, cudaStreamCaptureModeRelaxed));
        micro_step(m, n_valid, grad_scale, micro);
        CUDA_CHECK(cudaStreamEndCapture(m->stream, &graph));
        CUDA_CHECK(cudaGraphInstantiate(&ge->exec, graph, 0));
        CUDA_CHECK(cudaGraphDestroy(graph));
    }
    CUDA_CHECK(cudaGraphLaunch(ge->exec, m->stream));
    set_graph_state(m, ge->end);
    if (m->fp8.on) m->fp8.recording = FP8_RECORD; /* as the micro-step leaves it */
}

extern "C" void gpu_llama_train_micro(gpu_llama *m, int64_t n_valid_total, float grad_scale, uint64_t micro_index) {
    CHECK(n_valid_total >= 1, "train_micro: n_valid_total=%lld", (long long)n_valid_total);
    if (graph_eligible(m)) {
        train_micro_graphed(m, n_valid_total, grad_scale, micro_index);
        return;
    }
    NVTX(m, "micro-batch %d", (int)micro_index);
    micro_step(m, n_valid_total, grad_scale, micro_index);
}

extern "C" void gpu_llama_eval(gpu_llama *m, int64_t n_valid_total) {
    CHECK(n_valid_total >= 1, "eval: n_valid_total=%lld", (long long)n_valid_total);
    NVTX(m, "evaluation %d", 0);
    forward(m, 0, n_valid_total, 1.0f, 0);
}

extern "C" float gpu_llama_loss(gpu_llama *m) {
    CUDA_CHECK(cudaMemcpyAsync(m->h_scalars, m->loss_dev, sizeof(float), cudaMemcpyDeviceToHost, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return m->h_scalars[0];
}

/* Whether n gradients at dev, fp32 or bf16 (type), hold a NaN or an Inf (host scan). */
static int any_nonfinite(const void *dev, int64_t n, enum gemm_out type) {
    const size_t elem = type == GEMM_OUT_BF16 ? sizeof(uint16_t) : sizeof(float);
    unsigned char *h = static_cast<unsigned char *>(malloc((size_t)(n > 0 ? n : 1) * elem));
    CHECK(h != nullptr, "out of host memory");
    CUDA_CHECK(cudaMemcpy(h, dev, (size_t)n * elem, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int64_t j = 0; j < n && !bad; j++) {
        uint16_t b;
        float f;
        if (type == GEMM_OUT_BF16) memcpy(&b, h + 2 * j, 2), f = bf16_to_float(b);
        else memcpy(&f, h + 4 * j, 4);
        bad = !isfinite(f);
    }
    free(h);
    return bad;
}

/* Index of the first parameter whose gradient holds a NaN or an Inf (host scan; the failure path).
 * Sharded gradients: of this rank's pieces (−1 when they are all finite: another rank's hold it). */
static int first_nonfinite(gpu_llama *m) {
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    if (m->shard_grads) {
        for (int k = 0; k < m->n_pieces; k++)
            if (any_nonfinite(m->s_grad + m->pieces[k].off, m->pieces[k].hi - m->pieces[k].lo, GEMM_OUT_F32))
                return m->pieces[k].tensor;
        return -1;
    }
    for (int i = 0; i < m->n_params; i++)
        if (any_nonfinite(m->params[i].grad, m->params[i].n, gl_grad_type(m))) return i;
    return -1;
}

/* Zeroes the gradients and the loss sum (enqueued). */
static void clear_step(gpu_llama *m) {
    CUDA_CHECK(cudaMemsetAsync(m->slab[SLAB_GRADS], 0, m->plan.grads, m->stream));
    CUDA_CHECK(cudaMemsetAsync(m->nll_acc, 0, sizeof(double), m->stream));
}

extern "C" int gpu_llama_optimizer_step(gpu_llama *m, const optim_step *h, double *nll_sum, double *grad_norm) {
    cudaStream_t s = m->stream;
    {
        PROF(m, PROF_OPTIMIZER);
        gl_fp8_guard(m); /* FP8: a NaN or Inf met by a quantization poisons the loss sum */
        /* both optimizers skip the update on the device when the loss sum or the norm is not finite */
        const float *norm = m->norm_dev; /* the device float the host reads the norm from */
        if (m->opt.optimizer == OPTIMIZER_ADAMW) {
            gpu_adamw_step(m->adamw, h, m->nll_acc, m->norm_dev, s); /* asking for the norm also arms its guard */
        } else {
            const float *norm_coef = gpu_adamw_norm_and_coef(m->adamw, h->clip, s);
            norm = norm_coef;
            const gpu_adamw8bit_args a = {h->hp, 1.0, h->step, norm_coef, m->nll_acc};
            gl_adamw8bit_steps(m, &a, s); /* every tensor, or this rank's pieces (gpu/llama_shard.cu) */
        }
        CUDA_CHECK(cudaMemcpyAsync(m->h_scalars + 1, norm, sizeof(float), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaMemcpyAsync(m->h_nll, m->nll_acc, sizeof(double), cudaMemcpyDeviceToHost, s));
    }
    CUDA_CHECK(cudaStreamSynchronize(s)); /* the one wait of the step */
    *nll_sum = m->h_nll[0];
    *grad_norm = m->h_scalars[1];
    gl_fp8_step_end(m, isfinite(*nll_sum) && isfinite(*grad_norm));
    const int bad = isfinite(*nll_sum) && !isfinite(*grad_norm) ? first_nonfinite(m) : -1;
    clear_step(m);
    return bad;
}

extern "C" void gpu_llama_drop_grads(gpu_llama *m) {
    clear_step(m);
    gl_fp8_drop(m);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void gpu_llama_profile_reset(gpu_llama *m) {
    if (m->opt.profile == GPU_PROFILE_OFF) return;
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    m->prof_on = 1;
    m->prof_n = 0;
    for (int i = 0; i < N_PROF; i++) m->prof_ms[i] = 0.0;
}

extern "C" void gpu_llama_profile_print(gpu_llama *m, FILE *f, int steps) {
    if (m->opt.profile == GPU_PROFILE_OFF) return;
    prof_flush(m);
    m->prof_on = 0;
    double total = 0.0;
    for (int i = 0; i < N_PROF; i++) total += m->prof_ms[i];
    fprintf(f, "{\"profile\":{\"steps\":%d,\"total_ms_per_step\":%.3f", steps, total / (steps > 0 ? steps : 1));
    for (int i = 0; i < N_PROF; i++)
        fprintf(f, ",\"%s\":[%.3f,%.1f]", kProfNames[i], m->prof_ms[i] / (steps > 0 ? steps : 1),
                total > 0 ? 100.0 * m->prof_ms[i] / total : 0.0);
    fprintf(f, "}}\n");
}

extern "C" void gpu_llama_timer_begin(gpu_llama *m) { CUDA_CHECK(cudaEventRecord(m->t_begin, m->stream)); }

extern "C" double gpu_llama_timer_end(gpu_llama *m) {
    CUDA_CHECK(cudaEventRecord(m->t_end, m->stream));
    CUDA_CHECK(cudaEventSynchronize(m->t_end));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, m->t_begin, m->t_end));
    return ms;
}
