/* llama_weights.cu — the GPU model's weights: loading from a model, random weights for the
 * benchmark, adapter initialization, and reading base weights back (gpu/llama.h).
 *
 * Loading reads each weight as fp32 on the host (io/model_source.h), converts it there
 * (bf16 RNE as ref/bf16.h; NF4 quantization by ref/nf4, bitsandbytes' layout) and copies it to
 * its slot: one host buffer of the largest tensor, one tensor at a time. A bitsandbytes 4-bit
 * checkpoint's own codes and absmax are uploaded as they are when the base is NF4, and dequantized
 * on the host when it is not (LoRA on a 4-bit checkpoint computes with its dequantization).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_check.h"
#include "gpu/dora.h"
#include "gpu/llama_internal.h"
#include "gpu/vec.cuh"
#include "io/check.h"
#include "io/model_files.h"
#include "ref/bf16.h"
#include "ref/nf4.h"
#include "ref/quant8.h"

using refine::bf16;

namespace {

constexpr int kBlock = 256;

/* ---- random values: a counter hash (splitmix64) of (seed, element) ------------------------------ */

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ float uniform_pm(uint64_t seed, int64_t i, float amp) {
    const uint64_t z = mix64(seed * 0x9E3779B97F4A7C15ull + (uint64_t)i);
    return amp * (2.0f * (float)(z >> 40) * 0x1p-24f - 1.0f);
}

/* Element i of a (n / cols, cols) tensor; b16's rows at stride ld (a folded linear's padded weight,
 * gpu/lora.h), f32's contiguous. */
__global__ void fill_uniform(float *f32, bf16 *b16, int64_t n, uint64_t seed, float amp, int64_t cols, int64_t ld) {
    for (int64_t i = (int64_t)blockIdx.x * kBlock + threadIdx.x; i < n; i += (int64_t)gridDim.x * kBlock) {
        const float v = uniform_pm(seed, i, amp);
        if (f32) f32[i] = v;
        if (b16) b16[i / cols * ld + i % cols] = __float2bfloat16_rn(v);
    }
}

__global__ void fill_const(float *f32, bf16 *b16, int64_t n, float v) {
    for (int64_t i = (int64_t)blockIdx.x * kBlock + threadIdx.x; i < n; i += (int64_t)gridDim.x * kBlock) {
        if (f32) f32[i] = v;
        if (b16) b16[i] = __float2bfloat16_rn(v);
    }
}

__global__ void fill_bytes(uint8_t *p, int64_t n, uint64_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * kBlock + threadIdx.x; i < n; i += (int64_t)gridDim.x * kBlock)
        p[i] = (uint8_t)(mix64(seed * 0x9E3779B97F4A7C15ull + (uint64_t)i) >> 56);
}

unsigned grid_of(int64_t n) {
    const int64_t b = (n + kBlock - 1) / kBlock;
    return (unsigned)(b < 1 ? 1 : b < 16384 ? b : 16384);
}

void rand_fill(float *f32, uint16_t *b16, int64_t n, uint64_t seed, float amp, cudaStream_t s, int64_t cols = 0,
               int64_t ld = 0) {
    if (n <= 0 || (!f32 && !b16)) return;
    fill_uniform<<<grid_of(n), kBlock, 0, s>>>(f32, reinterpret_cast<bf16 *>(b16), n, seed, amp, cols ? cols : n,
                                               ld ? ld : n);
    KERNEL_CHECK(s);
}

void const_fill(float *f32, uint16_t *b16, int64_t n, float v, cudaStream_t s) {
    if (n <= 0 || (!f32 && !b16)) return;
    fill_const<<<grid_of(n), kBlock, 0, s>>>(f32, reinterpret_cast<bf16 *>(b16), n, v);
    KERNEL_CHECK(s);
}

/* ---- loading ------------------------------------------------------------------------------------ */

struct loader {
    gpu_llama *m;
    const model_source *src;
    float *buf;     /* host fp32, the largest tensor */
    uint16_t *b16;  /* host bf16 */
    io_err *e;
};

/* Weight (kind, layer) into buf (fp32, dequantized when stored 4-bit). */
int read_f32(loader &ld, enum model_weight kind, int layer, int64_t n) {
    const bnb4_weight *bnb = model_source_bnb(ld.src, kind, layer);
    if (bnb) return nf4_dequantize_bnb(ld.buf, bnb, n, ACT_F32, ld.e);
    return model_source_weight_f32(ld.src, kind, layer, ld.buf, ld.e);
}

/* buf's n values as bf16 into dev: rows of `cols` at stride ldd (0: contiguous). */
void upload_bf16(loader &ld, uint16_t *dev, int64_t n, int64_t cols = 0, int64_t ldd = 0) {
    bf16_from_float_array(ld.b16, ld.buf, n);
    if (ldd && ldd != cols)
        CUDA_CHECK(cudaMemcpy2D(dev, (size_t)ldd * sizeof(uint16_t), ld.b16, (size_t)cols * sizeof(uint16_t),
                                (size_t)cols * sizeof(uint16_t), (size_t)(n / cols), cudaMemcpyHostToDevice));
    else
        CUDA_CHECK(cudaMemcpy(dev, ld.b16, (size_t)n * sizeof(uint16_t), cudaMemcpyHostToDevice));
}

/* A frozen weight (bf16), or a trained one (fp32 master and its bf16 copy). */
int load_weight(loader &ld, enum model_weight kind, int layer, int64_t n, uint16_t *dev, float *master) {
    if (read_f32(ld, kind, layer, n)) return -1;
    if (master) CUDA_CHECK(cudaMemcpy(master, ld.buf, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    upload_bf16(ld, dev, n);
    if (master) gl_take_staged(ld.m, dev);
    return 0;
}

/* An NF4 base linear: a 4-bit checkpoint's parts as stored, or quantized here like bitsandbytes. */
int load_nf4(loader &ld, gl_nf4 &q, enum model_weight kind, int layer) {
    const bnb4_weight *bnb = model_source_bnb(ld.src, kind, layer);
    float qmap[16];
    if (bnb) {
        char name[96];
        model_weight_name(name, sizeof name, kind, layer);
        if (bnb->blocksize != q.blocksize || bnb->nested != q.nested ||
            (bnb->nested && bnb->nested_blocksize != q.nested_blocksize) ||
            (int64_t)bnb->packed->nbytes != nf4_packed_bytes(q.n) || bnb->n_blocks != q.n_blocks)
            return io_fail(ld.e, "%s: 4-bit layout (blocksize %d, nested %d/%d, %lld blocks) differs from the model's "
                                 "first linear's (blocksize %d, nested %d/%d, %lld blocks)",
                           name, bnb->blocksize, bnb->nested, bnb->nested_blocksize, (long long)bnb->n_blocks,
                           q.blocksize, q.nested, q.nested_blocksize, (long long)q.n_blocks);
        memcpy(qmap, bnb->quant_map->data, sizeof qmap);
        if (memcmp(qmap, nf4_table, sizeof qmap) != 0)
            return io_fail(ld.e, "%s: the 4-bit quant_map is not bitsandbytes' NF4 table", name);
        CUDA_CHECK(cudaMemcpy(q.codes, bnb->packed->data, bnb->packed->nbytes, cudaMemcpyHostToDevice));
        if (q.nested) {
            CUDA_CHECK(cudaMemcpy(q.absmax_q, bnb->absmax->data, (size_t)q.n_blocks, cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(q.absmax2, bnb->nested_absmax->data, (size_t)bnb->nested_absmax->numel * sizeof(float),
                                  cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(q.code2, bnb->nested_quant_map->data, 256 * sizeof(float), cudaMemcpyHostToDevice));
            q.offset = bnb->nested_offset;
        } else {
            CUDA_CHECK(cudaMemcpy(q.absmax_f32, bnb->absmax->data, (size_t)q.n_blocks * sizeof(float),
                                  cudaMemcpyHostToDevice));
        }
    } else {
        CHECK(q.nested && q.blocksize == NF4_BLOCKSIZE && q.nested_blocksize == NF4_NESTED_BLOCKSIZE,
              "weights quantized here are double-quantized in bitsandbytes' blocks");
        if (model_source_weight_f32(ld.src, kind, layer, ld.buf, ld.e)) return -1;
        const int64_t nb2 = (q.n_blocks + q.nested_blocksize - 1) / q.nested_blocksize;
        uint8_t *packed = static_cast<uint8_t *>(malloc((size_t)nf4_packed_bytes(q.n)));
        uint8_t *absmax_q = static_cast<uint8_t *>(malloc((size_t)q.n_blocks));
        float *absmax2 = static_cast<float *>(malloc((size_t)nb2 * sizeof(float)));
        CHECK(packed && absmax_q && absmax2, "out of host memory quantizing a weight");
        float code2[256];
        nf4_quantize_nested(packed, absmax_q, absmax2, &q.offset, code2, ld.buf, q.n);
        CUDA_CHECK(cudaMemcpy(q.codes, packed, (size_t)nf4_packed_bytes(q.n), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(q.absmax_q, absmax_q, (size_t)q.n_blocks, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(q.absmax2, absmax2, (size_t)nb2 * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(q.code2, code2, sizeof code2, cudaMemcpyHostToDevice));
        memcpy(qmap, nf4_table, sizeof qmap);
        free(packed), free(absmax_q), free(absmax2);
    }
    CUDA_CHECK(cudaMemcpy(q.qmap, qmap, sizeof qmap, cudaMemcpyHostToDevice));
    return 0;
}

int same_shape(const model_config *a, const model_config *b) {
    return a->C == b->C && a->F == b->F && a->L == b->L && a->H == b->H && a->KVH == b->KVH && a->D == b->D &&
           a->V == b->V && a->tie_word_embeddings == b->tie_word_embeddings && a->attention_bias == b->attention_bias;
}

/* DoRA: ‖W‖² of each target row, once (W frozen; NF4 dequantized a layer at a time). */
void dora_weight_squares(gpu_llama *m) {
    if (m->opt.mode != LLAMA_DORA) return;
    for (int l = 0; l < m->cfg.L; l++) {
        gl_dequantize_layer(m, l);
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            gl_linear &lin = m->layers[l].lin[t];
            if (lin.target) gpu_dora_weight_sq_f32(lin.w_sq, lin.w, lin.ldw, lin.c_in, lin.c_out, m->stream);
        }
    }
}

}  // namespace

extern "C" int gpu_llama_load(gpu_llama *m, const model_source *src, io_err *e) {
    const model_config *c = &m->cfg;
    if (!same_shape(c, &src->config)) return io_fail(e, "%s: the model's shapes differ from the plan's", src->path);
    const int full = m->opt.mode == LLAMA_FULL, nf4 = m->opt.base == GPU_BASE_NF4;
    int64_t most = (int64_t)c->V * c->C;
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        const gl_linear &lin = m->layers[0].lin[t];
        if ((int64_t)lin.c_in * lin.c_out > most) most = (int64_t)lin.c_in * lin.c_out;
    }
    loader ld = {m, src, static_cast<float *>(malloc((size_t)most * sizeof(float))),
                 static_cast<uint16_t *>(malloc((size_t)most * sizeof(uint16_t))), e};
    CHECK(ld.buf && ld.b16, "out of host memory (%lld floats) loading the model", (long long)most);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    int rc = load_weight(ld, MW_EMBED, -1, (int64_t)c->V * c->C, m->embed, full ? m->embed_master : nullptr);
    if (!rc) rc = load_weight(ld, MW_FINAL_NORM, -1, c->C, m->final_norm, full ? m->final_norm_master : nullptr);
    if (!rc && !c->tie_word_embeddings)
        rc = load_weight(ld, MW_LM_HEAD, -1, (int64_t)c->V * c->C, m->lm_head, full ? m->lm_head_master : nullptr);
    for (int l = 0; l < c->L && !rc; l++) {
        gl_layer &ly = m->layers[l];
        rc = load_weight(ld, MW_ATTN_NORM, l, c->C, ly.attn_norm, full ? ly.attn_norm_master : nullptr);
        if (!rc) rc = load_weight(ld, MW_MLP_NORM, l, c->C, ly.mlp_norm, full ? ly.mlp_norm_master : nullptr);
        for (int t = 0; t < LLAMA_N_LINEAR && !rc; t++) {
            gl_linear &lin = ly.lin[t];
            const int64_t n = (int64_t)lin.c_out * lin.c_in;
            if (nf4) {
                rc = load_nf4(ld, lin.nf4, llama_linears[t].weight, l);
            } else if (m->opt.base == GPU_BASE_FP8) { /* bf16 through the staging buffer into its codes */
                rc = read_f32(ld, llama_linears[t].weight, l, n);
                if (!rc) { /* the staging buffer is refilled by the next (synchronous) upload */
                    upload_bf16(ld, gl_fp8_staging(m), n);
                    gl_fp8_store(m, l, t, gl_fp8_staging(m));
                    CUDA_CHECK(cudaStreamSynchronize(m->stream));
                }
            } else if (lin.ldw != lin.c_in) { /* a folded linear's rows (frozen: no master) */
                rc = read_f32(ld, llama_linears[t].weight, l, n);
                if (!rc) upload_bf16(ld, lin.w, n, lin.c_in, lin.ldw);
            } else {
                rc = load_weight(ld, llama_linears[t].weight, l, n, lin.w, full ? lin.w_master : nullptr);
            }
            if (!rc && lin.bias)
                rc = load_weight(ld, llama_linears[t].bias, l, lin.c_out, lin.bias, full ? lin.bias_master : nullptr);
        }
        if (!rc) gl_take_layer_masters(m, l); /* sharded gradients: layer l + 2 stages in these rows */
    }
    free(ld.buf);
    free(ld.b16);
    m->dq_layer = -1;
    if (rc) return -1;
    if (gl_fp8_freeze(m, e)) return -1; /* FP8: the frozen codes (W_eff into a bf16 base) */
    dora_weight_squares(m);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    gl_take_masters(m); /* a sharded optimizer's pieces, or split masters' pairs */
    return 0;
}

extern "C" void gpu_llama_random_weights(gpu_llama *m, uint64_t seed) {
    const model_config *c = &m->cfg;
    cudaStream_t s = m->stream;
    const float amp = 0.02f * sqrtf(3.0f); /* uniform with HF's std 0.02 */
    uint64_t k = seed * 1000003ull;
    rand_fill(m->embed_master, m->embed, (int64_t)c->V * c->C, ++k, amp, s);
    gl_take_staged(m, m->embed);
    if (!c->tie_word_embeddings) {
        rand_fill(m->lm_head_master, m->lm_head, (int64_t)c->V * c->C, ++k, amp, s);
        gl_take_staged(m, m->lm_head);
    }
    const_fill(m->final_norm_master, m->final_norm, c->C, 1.0f, s);
    gl_take_staged(m, m->final_norm);
    for (int l = 0; l < c->L; l++) {
        gl_layer &ly = m->layers[l];
        const_fill(ly.attn_norm_master, ly.attn_norm, c->C, 1.0f, s);
        gl_take_staged(m, ly.attn_norm);
        const_fill(ly.mlp_norm_master, ly.mlp_norm, c->C, 1.0f, s);
        gl_take_staged(m, ly.mlp_norm);
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            gl_linear &lin = ly.lin[t];
            const int64_t n = (int64_t)lin.c_out * lin.c_in;
            if (m->opt.base == GPU_BASE_NF4) {
                /* random codes; absmax = code2[q]·0.005 + 0.04: weights of std ≈ 0.02 */
                gl_nf4 &q = lin.nf4;
                fill_bytes<<<grid_of(nf4_packed_bytes(n)), kBlock, 0, s>>>(q.codes, nf4_packed_bytes(n), ++k);
                KERNEL_CHECK(s);
                float code2[256];
                quant8_dynamic_map(code2, 1);
                CUDA_CHECK(cudaMemcpyAsync(q.qmap, nf4_table, 16 * sizeof(float), cudaMemcpyHostToDevice, s));
                if (q.nested) {
                    fill_bytes<<<grid_of(q.n_blocks), kBlock, 0, s>>>(q.absmax_q, q.n_blocks, ++k);
                    KERNEL_CHECK(s);
                    const_fill(q.absmax2, nullptr, (q.n_blocks + q.nested_blocksize - 1) / q.nested_blocksize, 0.005f, s);
                    CUDA_CHECK(cudaMemcpyAsync(q.code2, code2, sizeof code2, cudaMemcpyHostToDevice, s));
                    q.offset = 0.04f;
                } else {
                    const_fill(q.absmax_f32, nullptr, q.n_blocks, 0.04f, s);
                }
                CUDA_CHECK(cudaStreamSynchronize(s)); /* code2 lives on this stack frame */
            } else if (m->opt.base == GPU_BASE_FP8) {
                rand_fill(nullptr, gl_fp8_staging(m), n, ++k, amp, s);
                gl_fp8_store(m, l, t, gl_fp8_staging(m));
            } else {
                rand_fill(lin.w_master, lin.w, n, ++k, amp, s, lin.c_in, lin.ldw); /* a folded one's rows at ldw */
                gl_take_staged(m, lin.w);
            }
            if (lin.bias) {
                const_fill(lin.bias_master, lin.bias, lin.c_out, 0.0f, s);
                gl_take_staged(m, lin.bias);
            }
        }
        gl_take_layer_masters(m, l);
    }
    m->dq_layer = -1;
    io_err e;
    CHECK(gl_fp8_freeze(m, &e) == 0, "random weights: %s", e.msg);
    dora_weight_squares(m);
    CUDA_CHECK(cudaStreamSynchronize(s));
    gl_take_masters(m);
}

extern "C" void gpu_llama_init_adapters(gpu_llama *m, uint64_t seed) {
    if (m->opt.mode == LLAMA_FULL) return;
    const model_config *c = &m->cfg;
    struct llama_options lo;
    ref_llama_options_default(&lo);
    lo.mode = m->opt.mode;
    lo.targets = m->opt.targets;
    lo.R = m->opt.R;
    struct llama_adapters a;
    ref_llama_adapters_alloc(&a, c, &lo);
    ref_llama_adapters_init(&a, c, &lo, seed);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    for (int l = 0; l < c->L; l++) {
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            gl_linear &lin = m->layers[l].lin[t];
            if (!lin.target) continue;
            const int64_t na = (int64_t)m->opt.R * lin.c_in, nb = (int64_t)lin.c_out * m->opt.R;
            CUDA_CHECK(cudaMemcpy(lin.a_master, a.layers[l][t].a, (size_t)na * sizeof(float), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(lin.b_master, a.layers[l][t].b, (size_t)nb * sizeof(float), cudaMemcpyHostToDevice));
            gl_to_bf16(lin.a, lin.a_master, na, m->stream);
            gl_to_bf16(lin.b, lin.b_master, nb, m->stream);
        }
        if (m->opt.mode != LLAMA_DORA) continue;
        /* m = ‖W + s·B·A‖_row with B = 0: ‖W‖ of the weight the model holds (PEFT's init) */
        gl_dequantize_layer(m, l);
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            gl_linear &lin = m->layers[l].lin[t];
            if (!lin.target) continue;
            gpu_dora_weight_norm_f32(m->gemm, lin.mag, lin.w_sq, lin.w, lin.ldw, lin.a, lin.b, lin.c_in, lin.c_out, m->opt.R,
                                     m->opt.lora_scale, m->ws, m->stream);
        }
    }
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    ref_llama_adapters_free(&a, c);
}

/* An FP8-stored linear without a bf16 buffer on the device: its codes and scales to the host,
 * dequantized there (W_eff, exact: power-of-two scales). */
static int read_fp8_weight(gpu_llama *m, int l, int t, float *host) {
    const gl_linear &lin = m->layers[l].lin[t];
    const int64_t n = (int64_t)lin.c_out * lin.c_in;
    const int block = m->opt.fp8_recipe == FP8_RECIPE_BLOCK;
    const int64_t ns = block ? fp8_block_scale_count(FP8_BLOCK_128X128, lin.c_out, lin.c_in) : 1;
    struct fp8_operand o = {static_cast<uint8_t *>(malloc((size_t)n)), static_cast<float *>(malloc((size_t)ns * 4)),
                            block ? FP8_SCALING_128X128 : FP8_SCALING_TENSOR, FP8_E4M3, lin.c_out, lin.c_in};
    CHECK(o.q && o.s_inv, "out of host memory");
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    CUDA_CHECK(cudaMemcpy(o.q, lin.w8, (size_t)n, cudaMemcpyDeviceToHost));
    const float *s = block ? lin.w8_s : m->fp8.sinv16 + 4 * (int64_t)llama_fp8_row(m->cfg.L, FP8_ROLE_W, l, (llama_linear)t);
    CUDA_CHECK(cudaMemcpy(o.s_inv, s, (size_t)ns * 4, cudaMemcpyDeviceToHost));
    ref_fp8_dequantize_operand(host, &o);
    free(o.q);
    free(o.s_inv);
    return 0;
}

extern "C" int gpu_llama_base_weight_read(gpu_llama *m, const char *hf_name, float *host, io_err *e) {
    const model_config *c = &m->cfg;
    const uint16_t *dev = nullptr;
    int64_t ldw = 0, ldw_cols = 0; /* a linear's row stride and row length */
    int64_t n = 0;
    char name[128];
    if (strcmp(hf_name, "model.embed_tokens.weight") == 0 ||
        (strcmp(hf_name, "lm_head.weight") == 0 && c->tie_word_embeddings))
        dev = m->embed, n = (int64_t)c->V * c->C;
    else if (strcmp(hf_name, "lm_head.weight") == 0)
        dev = m->lm_head, n = (int64_t)c->V * c->C;
    else if (strcmp(hf_name, "model.norm.weight") == 0)
        dev = m->final_norm, n = c->C;
    for (int l = 0; l < c->L && !dev; l++) {
        gl_layer &ly = m->layers[l];
        for (int k = MW_ATTN_NORM; k < MW_COUNT && !dev; k++) {
            model_weight_name(name, sizeof name, (enum model_weight)k, l);
            if (strcmp(name, hf_name) != 0) continue;
            if (k == MW_ATTN_NORM) dev = ly.attn_norm, n = c->C;
            else if (k == MW_MLP_NORM) dev = ly.mlp_norm, n = c->C;
            for (int t = 0; t < LLAMA_N_LINEAR && !dev; t++) {
                gl_linear &lin = ly.lin[t];
                if (k == llama_linears[t].weight) {
                    if (m->opt.base == GPU_BASE_FP8 && m->dq_buf == nullptr) return read_fp8_weight(m, l, t, host);
                    gl_dequantize_layer(m, l);
                    dev = lin.w, n = (int64_t)lin.c_out * lin.c_in, ldw = lin.ldw, ldw_cols = lin.c_in;
                } else if (k == llama_linears[t].bias) {
                    if (!lin.bias) return io_fail(e, "the model has no weight %s", hf_name);
                    dev = lin.bias, n = lin.c_out;
                }
            }
        }
    }
    if (!dev) return io_fail(e, "the model has no weight %s", hf_name);
    uint16_t *b = static_cast<uint16_t *>(malloc((size_t)n * sizeof(uint16_t)));
    CHECK(b != nullptr, "out of host memory");
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    if (ldw) /* a linear's rows, at its stride (a folded one's padded) */
        CUDA_CHECK(cudaMemcpy2D(b, (size_t)ldw_cols * sizeof(uint16_t), dev, (size_t)ldw * sizeof(uint16_t),
                                (size_t)ldw_cols * sizeof(uint16_t), (size_t)(n / ldw_cols), cudaMemcpyDeviceToHost));
    else
        CUDA_CHECK(cudaMemcpy(b, dev, (size_t)n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    bf16_to_float_array(host, b, n);
    free(b);
    return 0;
}
