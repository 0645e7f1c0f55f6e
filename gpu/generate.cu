/* generate.cu — the GPU model for generation (gpu/generate.h).
 *
 * Layout: one device slab holds, in order, the weights (embedding, lm_head when untied, final
 * norm, then per layer: both norms, W_qkv ((H + 2·KVH)·D, C) with its bias when the model has
 * one, W_o, W_gu (2F, C), W_down), the K and V caches, the rope tables, and the scratch of N_max
 * rows; every piece 256-byte aligned. A call: ids/seq/pos to the device (one copy), the forward of
 * gpu/generate.h's header on one stream, then the logits rows (or their argmax) back, and a wait.
 * Decode steps run as CUDA graphs (one per row count and output kind, captured at its second
 * use; REFINE_CUDA_GRAPHS=0 turns them off): a step of a small model is dozens of short kernels,
 * whose launch costs the graph removes.
 * Kernels of this file: the cache append (one thread per 8 elements of a new k/v row) and the
 * argmax (one CTA per row; (value, index) pairs reduced so that the first index of the maximum
 * wins, NaN never does).
 */
#include "gpu/generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/decode_attention.h"
#include "gpu/embedding.h"
#include "gpu/gemm.h"
#include "gpu/rmsnorm.h"
#include "gpu/rope.h"
#include "gpu/swiglu.h"
#include "gpu/vec.cuh"
#include "io/check.h"
#include "ref/bf16.h"
#include "ref/rope.h"

namespace refine {
namespace {

struct layer_w {
    uint16_t *attn_norm, *mlp_norm, *qkv, *qkv_bias, *o, *gu, *down;
};

}  // namespace
}  // namespace refine

struct gpu_gen {
    struct model_config c;
    int S, T_max, N_max, QKVD, QD, KD;
    float scale;
    char device[256];
    cudaStream_t stream;
    struct gpu_gemm *gemm;
    uint8_t *slab;
    size_t slab_bytes;
    uint16_t *embed, *lm_head, *final_norm;
    std::vector<refine::layer_w> layers;
    uint16_t *kc, *vc; /* L × (S, T_max, KVH, D) */
    uint16_t *rope_cos, *rope_sin;
    /* scratch */
    uint16_t *x, *n, *qkv, *att, *h, *gu, *mlp, *tmp;
    void *att_ws; /* gpu_decode_attention_workspace_size(N_max, H, D, T_max) bytes */
    float *rstd, *logits;
    int32_t *d_rows; /* ids, seq, pos: 3 × N_max */
    int32_t *d_next;
    int32_t *h_rows; /* pinned staging of the same */
    int32_t *len;    /* host: cached length per sequence */
    std::vector<int32_t> h_next;
    /* decode steps as CUDA graphs, one per (rows, argmax or logits), captured at the second use */
    int use_graphs;
    struct graph_entry {
        int n, argmax;
        int runs;
        cudaGraphExec_t exec;
    };
    std::vector<graph_entry> graphs;
};

namespace refine {
namespace {

size_t al(size_t b) { return (b + 255) & ~(size_t)255; }

/* The slab's pieces, sized (when g->slab is NULL) or carved. */
size_t carve(struct gpu_gen *g) {
    const struct model_config &c = g->c;
    uint8_t *base = g->slab;
    size_t top = 0;
    auto take = [&](size_t bytes) -> void * {
        void *p = base ? base + top : nullptr;
        top += al(bytes);
        return p;
    };
    const size_t C = c.C, F = c.F, V = c.V, N = g->N_max, QKVD = g->QKVD, QD = g->QD;
    g->embed = (uint16_t *)take(V * C * 2);
    g->lm_head = c.tie_word_embeddings ? g->embed : (uint16_t *)take(V * C * 2);
    g->final_norm = (uint16_t *)take(C * 2);
    g->layers.resize((size_t)c.L);
    for (int l = 0; l < c.L; l++) {
        layer_w &w = g->layers[(size_t)l];
        w.attn_norm = (uint16_t *)take(C * 2);
        w.mlp_norm = (uint16_t *)take(C * 2);
        w.qkv = (uint16_t *)take(QKVD * C * 2);
        w.qkv_bias = c.attention_bias ? (uint16_t *)take(QKVD * 2) : nullptr;
        w.o = (uint16_t *)take(C * QD * 2);
        w.gu = (uint16_t *)take(2 * F * C * 2);
        w.down = (uint16_t *)take(C * F * 2);
    }
    const size_t cache = (size_t)c.L * g->S * g->T_max * c.KVH * c.D * 2;
    g->kc = (uint16_t *)take(cache);
    g->vc = (uint16_t *)take(cache);
    g->rope_cos = (uint16_t *)take((size_t)g->T_max * (c.D / 2) * 2);
    g->rope_sin = (uint16_t *)take((size_t)g->T_max * (c.D / 2) * 2);
    g->x = (uint16_t *)take(N * C * 2);
    g->n = (uint16_t *)take(N * C * 2);
    g->qkv = (uint16_t *)take(N * QKVD * 2);
    g->att = (uint16_t *)take(N * QD * 2);
    g->att_ws = take(gpu_decode_attention_workspace_size(g->N_max, c.H, c.D, g->T_max));
    g->h = (uint16_t *)take(N * C * 2);
    g->gu = (uint16_t *)take(N * 2 * F * 2);
    g->mlp = (uint16_t *)take(N * F * 2);
    g->tmp = (uint16_t *)take(N * C * 2);
    g->rstd = (float *)take(N * 4);
    g->logits = (float *)take(N * V * 4);
    g->d_rows = (int32_t *)take(3 * N * 4);
    g->d_next = (int32_t *)take(N * 4);
    return top;
}

/* k, v columns of each new qkv row into the cache at (seq, pos); 8 elements a thread. */
__global__ void cache_append(bf16 *__restrict__ kc, bf16 *__restrict__ vc, const bf16 *__restrict__ qkv,
                             const int32_t *__restrict__ seq, const int32_t *__restrict__ pos, int QKVD, int QD,
                             int KD, int T_max, int64_t items) {
    const int per_row = KD / 8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < 2 * items; i += (int64_t)gridDim.x * blockDim.x) {
        const int which = i >= items; /* 0: k, 1: v */
        const int64_t it = i - which * items, row = it / per_row;
        const int col = (int)(it - row * per_row) * 8;
        const bf16 *src = qkv + row * QKVD + QD + which * KD + col;
        bf16 *dst = (which ? vc : kc) + ((int64_t)seq[row] * T_max + pos[row]) * KD + col;
        *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
    }
}

/* argmax of each row of logits (rows, V): (value, index) reduced, larger value first, then the
 * smaller index; NaN never wins. */
__global__ void row_argmax(int32_t *__restrict__ next, const float *__restrict__ logits, int V) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const float *z = logits + (int64_t)blockIdx.x * V;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const float x = z[v];
        if (x > bv || (bi == 0x7fffffff && !isnan(x))) bv = x, bi = v; /* strided: v ascending per thread */
    }
    auto better = [](float av, int ai, float bv2, int bi2) {
        if (bi2 == 0x7fffffff) return false;
        if (ai == 0x7fffffff) return true;
        return bv2 > av || (bv2 == av && bi2 < ai);
    };
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(bv, bi, ov, oi)) bv = ov, bi = oi;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            if (better(bv, bi, sv[w], si[w])) bv = sv[w], bi = si[w];
        next[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
    }
}

/* splitmix64-hashed uniform bf16 weights in [−a, a); norms 1. */
__global__ void fill_uniform(bf16 *p, int64_t n, uint64_t seed, float a) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (uint64_t)i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const float u = (float)(z >> 40) * (1.0f / 16777216.0f);
        p[i] = __float2bfloat16_rn(a * (2.0f * u - 1.0f));
    }
}

__global__ void fill_value(bf16 *p, int64_t n, float v) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16_rn(v);
}

int grid_for(int64_t items) {
    const int64_t b = (items + 255) / 256;
    return (int)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

void upload_bf16(uint16_t *dst, const float *src, int64_t n, std::vector<uint16_t> &buf) {
    buf.resize((size_t)n);
    bf16_from_float_array(buf.data(), src, n);
    CUDA_CHECK(cudaMemcpy(dst, buf.data(), (size_t)n * 2, cudaMemcpyHostToDevice));
}

void linear(struct gpu_gen *g, uint16_t *y, const uint16_t *x, const uint16_t *w, const uint16_t *b, int N, int ci,
            int co) {
    gpu_linear_forward_bf16(g->gemm, y, x, w, b, N, ci, co, g->stream);
}

/* fp32 logits (rows, V) of the normalized rows x (rows, C). */
void head(struct gpu_gen *g, float *logits, const uint16_t *x, int rows) {
    struct gemm_args a;
    memset(&a, 0, sizeof a);
    a.d = logits, a.d_type = GEMM_OUT_F32, a.ldd = g->c.V;
    a.a = x, a.op_a = GEMM_NO_TRANS, a.lda = g->c.C;
    a.b = g->lm_head, a.op_b = GEMM_TRANS, a.ldb = g->c.C;
    a.m = rows, a.n = g->c.V, a.k = g->c.C, a.batch = 1, a.alpha = 1.0f, a.beta = GEMM_OVERWRITE;
    gpu_gemm(g->gemm, &a, g->stream);
}

/* Rows staged in d_rows (ids, seq, pos); the final normalized rows in g->n. */
void forward_rows(struct gpu_gen *g, int N) {
    const struct model_config &c = g->c;
    const int32_t *ids = g->d_rows, *seq = g->d_rows + g->N_max, *pos = g->d_rows + 2 * g->N_max;
    const cudaStream_t s = g->stream;
    const int C = c.C, F = c.F;
    const size_t layer_cache = (size_t)g->S * g->T_max * c.KVH * c.D;
    gpu_embedding_forward_bf16(g->x, ids, g->embed, N, C, c.V, s);
    for (int l = 0; l < c.L; l++) {
        const layer_w &w = g->layers[(size_t)l];
        if (l == 0)
            gpu_rmsnorm_forward_bf16(g->n, g->rstd, g->x, w.attn_norm, N, C, c.rms_norm_eps, s);
        else /* x = h + down(mlp) of the layer before, then its norm */
            gpu_rmsnorm_residual_forward_bf16(g->x, g->n, g->rstd, g->h, g->tmp, w.attn_norm, N, C, c.rms_norm_eps, s);
        linear(g, g->qkv, g->n, w.qkv, w.qkv_bias, N, C, g->QKVD);
        gpu_rope_forward_bf16(g->qkv, g->qkv + g->QD, g->rope_cos, g->rope_sin, pos, N, c.H, c.KVH, c.D, g->QKVD,
                              g->QKVD, s);
        uint16_t *kc = g->kc + (size_t)l * layer_cache, *vc = g->vc + (size_t)l * layer_cache;
        const int64_t items = (int64_t)N * (g->KD / 8);
        cache_append<<<grid_for(2 * items), 256, 0, s>>>(reinterpret_cast<bf16 *>(kc), reinterpret_cast<bf16 *>(vc),
                                                         reinterpret_cast<const bf16 *>(g->qkv), seq, pos, g->QKVD,
                                                         g->QD, g->KD, g->T_max, items);
        KERNEL_CHECK(s);
        gpu_decode_attention_bf16(g->att, g->qkv, g->QKVD, kc, vc, seq, pos, N, c.H, c.KVH, c.D, g->S, g->T_max,
                                  g->scale, g->att_ws, s);
        linear(g, g->tmp, g->att, w.o, nullptr, N, g->QD, C);
        gpu_rmsnorm_residual_forward_bf16(g->h, g->n, g->rstd, g->x, g->tmp, w.mlp_norm, N, C, c.rms_norm_eps, s);
        linear(g, g->gu, g->n, w.gu, nullptr, N, C, 2 * F);
        gpu_swiglu_forward_bf16(g->mlp, g->gu, g->gu + F, N, F, 2 * F, s);
        linear(g, g->tmp, g->mlp, w.down, nullptr, N, F, C);
    }
    gpu_rmsnorm_residual_forward_bf16(g->x, g->n, g->rstd, g->h, g->tmp, g->final_norm, N, C, c.rms_norm_eps, s);
}

/* The device work of a decode step of N rows: forward, logits, and their argmax when asked. */
void decode_body(struct gpu_gen *g, int N, int argmax) {
    forward_rows(g, N);
    head(g, g->logits, g->n, N);
    if (argmax) {
        row_argmax<<<N, 256, 0, g->stream>>>(g->d_next, g->logits, g->c.V);
        KERNEL_CHECK(g->stream);
    }
}

/* decode_body, replayed from a CUDA graph once the shape has run once uncaptured (so that every
 * cuBLASLt plan and kernel attribute exists before the capture). Replaying the same kernels on
 * the same buffers gives the same bits as running them. */
void decode_launch(struct gpu_gen *g, int N, int argmax) {
    if (!g->use_graphs) {
        decode_body(g, N, argmax);
        return;
    }
    gpu_gen::graph_entry *ge = nullptr;
    for (auto &x : g->graphs)
        if (x.n == N && x.argmax == argmax) ge = &x;
    if (!ge) {
        g->graphs.push_back({N, argmax, 0, nullptr});
        ge = &g->graphs.back();
    }
    if (ge->runs++ == 0) {
        decode_body(g, N, argmax);
        return;
    }
    if (!ge->exec) {
        cudaGraph_t graph;
        CUDA_CHECK(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeRelaxed));
        decode_body(g, N, argmax);
        CUDA_CHECK(cudaStreamEndCapture(g->stream, &graph));
        CUDA_CHECK(cudaGraphInstantiate(&ge->exec, graph, 0));
        CUDA_CHECK(cudaGraphDestroy(graph));
    }
    CUDA_CHECK(cudaGraphLaunch(ge->exec, g->stream));
}

/* ids, seq, pos (N rows) to the device. */
void stage(struct gpu_gen *g, const int32_t *ids, int N) {
    memcpy(g->h_rows, ids, (size_t)N * 4);
    CUDA_CHECK(cudaMemcpyAsync(g->d_rows, g->h_rows, (size_t)3 * g->N_max * 4, cudaMemcpyHostToDevice, g->stream));
}

}  // namespace
}  // namespace refine

using namespace refine;

int gpu_gen_device_check(struct io_err *e) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();
        return io_fail(e, "no CUDA device (//ref:generate runs on the CPU)");
    }
    return 0;
}

size_t gpu_gen_plan_bytes(const struct model_config *c, int S, int T_max, int N_max) {
    struct gpu_gen g;
    g.c = *c;
    g.S = S, g.T_max = T_max, g.N_max = N_max;
    g.QD = c->H * c->D, g.KD = c->KVH * c->D, g.QKVD = g.QD + 2 * g.KD;
    g.slab = nullptr;
    return carve(&g);
}

struct gpu_gen *build_gpu_gen(const struct model_config *c, const struct llama_weights *w, int S, int T_max,
                              int N_max, struct io_err *e) {
    if (c->D != 16 && c->D != 32 && c->D != 64 && c->D != 128) {
        io_fail(e, "the GPU generation kernels take head dimensions 16, 32, 64 and 128; this model has %d", c->D);
        return nullptr;
    }
    if (c->C % 8 != 0 || c->F % 8 != 0) {
        io_fail(e, "the GPU generation kernels need hidden and MLP widths that are multiples of 8 (%d, %d)", c->C,
                c->F);
        return nullptr;
    }
    CHECK(S >= 1 && T_max >= 1 && N_max >= S, "S=%d T_max=%d N_max=%d", S, T_max, N_max);
    if (gpu_gen_device_check(e) != 0) return nullptr;
    if (T_max > gpu_decode_attention_max_positions()) {
        io_fail(e, "%d positions per sequence: the GPU attention holds at most %d (lower --context)", T_max,
                gpu_decode_attention_max_positions());
        return nullptr;
    }
    struct gpu_gen *g = new gpu_gen();
    g->c = *c;
    g->S = S, g->T_max = T_max, g->N_max = N_max;
    g->QD = c->H * c->D, g->KD = c->KVH * c->D, g->QKVD = g->QD + 2 * g->KD;
    g->scale = (float)(1.0 / sqrt((double)c->D));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    snprintf(g->device, sizeof g->device, "%s", prop.name);
    g->slab = nullptr;
    g->slab_bytes = carve(g);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (g->slab_bytes + ((size_t)256 << 20) > free_b) {
        io_fail(e, "generation needs %.2f GiB of device memory (weights, a cache of %d × %d positions); %s has %.2f GiB "
                   "free (lower --batch or --context)",
                g->slab_bytes / 1073741824.0, S, T_max, g->device, free_b / 1073741824.0);
        delete g;
        return nullptr;
    }
    CUDA_CHECK(cudaMalloc(&g->slab, g->slab_bytes));
    carve(g);
    CUDA_CHECK(cudaMemset(g->slab, 0, g->slab_bytes));
    CUDA_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    g->gemm = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
    CUDA_CHECK(cudaMallocHost(&g->h_rows, (size_t)3 * N_max * 4));
    g->len = (int32_t *)calloc((size_t)S, 4);
    CHECK(g->len != nullptr, "out of memory");
    g->h_next.resize((size_t)N_max);
    const char *graphs = getenv("REFINE_CUDA_GRAPHS");
    g->use_graphs = !(graphs && strcmp(graphs, "0") == 0);
    /* rope tables: ref/rope.h's, rounded to bf16 as the training model uploads them */
    struct ref_rope_cache rope;
    ref_rope_cache_build(&rope, T_max, c->D, c->rope_theta, &c->rope_scaling);
    std::vector<uint16_t> buf;
    upload_bf16(g->rope_cos, rope.cos, (int64_t)T_max * (c->D / 2), buf);
    upload_bf16(g->rope_sin, rope.sin, (int64_t)T_max * (c->D / 2), buf);
    ref_rope_cache_free(&rope);
    if (w) {
        const int64_t C = c->C, F = c->F, V = c->V;
        upload_bf16(g->embed, w->embed, V * C, buf);
        if (!c->tie_word_embeddings) upload_bf16(g->lm_head, w->lm_head, V * C, buf);
        upload_bf16(g->final_norm, w->final_norm, C, buf);
        for (int l = 0; l < c->L; l++) {
            const struct llama_layer &ly = w->layers[l];
            layer_w &d = g->layers[(size_t)l];
            upload_bf16(d.attn_norm, ly.attn_norm, C, buf);
            upload_bf16(d.mlp_norm, ly.mlp_norm, C, buf);
            upload_bf16(d.qkv, ly.w[LLAMA_Q], (int64_t)g->QD * C, buf);
            upload_bf16(d.qkv + (size_t)g->QD * C, ly.w[LLAMA_K], (int64_t)g->KD * C, buf);
            upload_bf16(d.qkv + (size_t)(g->QD + g->KD) * C, ly.w[LLAMA_V], (int64_t)g->KD * C, buf);
            if (d.qkv_bias) {
                upload_bf16(d.qkv_bias, ly.bias[LLAMA_Q], g->QD, buf);
                upload_bf16(d.qkv_bias + g->QD, ly.bias[LLAMA_K], g->KD, buf);
                upload_bf16(d.qkv_bias + g->QD + g->KD, ly.bias[LLAMA_V], g->KD, buf);
            }
            upload_bf16(d.o, ly.w[LLAMA_O], C * g->QD, buf);
            upload_bf16(d.gu, ly.w[LLAMA_GATE], F * C, buf);
            upload_bf16(d.gu + (size_t)F * C, ly.w[LLAMA_UP], F * C, buf);
            upload_bf16(d.down, ly.w[LLAMA_DOWN], C * F, buf);
        }
    }
    return g;
}

void gpu_gen_set_graphs(struct gpu_gen *g, int on) { g->use_graphs = on; }

void free_gpu_gen(struct gpu_gen *g) {
    if (!g) return;
    for (auto &x : g->graphs)
        if (x.exec) CUDA_CHECK(cudaGraphExecDestroy(x.exec));
    free_gpu_gemm(g->gemm);
    CUDA_CHECK(cudaStreamDestroy(g->stream));
    CUDA_CHECK(cudaFree(g->slab));
    CUDA_CHECK(cudaFreeHost(g->h_rows));
    free(g->len);
    delete g;
}

void gpu_gen_random_weights(struct gpu_gen *g, uint64_t seed) {
    const struct model_config &c = g->c;
    const int64_t C = c.C, F = c.F, V = c.V;
    const float a = 0.02f * sqrtf(3.0f); /* uniform [−a, a) has std 0.02 */
    uint64_t k = seed;
    auto fill = [&](uint16_t *p, int64_t n) {
        fill_uniform<<<grid_for(n), 256, 0, g->stream>>>(reinterpret_cast<bf16 *>(p), n, k++ * 0x5851F42D4C957F2Dull, a);
        KERNEL_CHECK(g->stream);
    };
    auto ones = [&](uint16_t *p, int64_t n) {
        fill_value<<<grid_for(n), 256, 0, g->stream>>>(reinterpret_cast<bf16 *>(p), n, 1.0f);
        KERNEL_CHECK(g->stream);
    };
    fill(g->embed, V * C);
    if (!c.tie_word_embeddings) fill(g->lm_head, V * C);
    ones(g->final_norm, C);
    for (int l = 0; l < c.L; l++) {
        layer_w &d = g->layers[(size_t)l];
        ones(d.attn_norm, C), ones(d.mlp_norm, C);
        fill(d.qkv, (int64_t)g->QKVD * C), fill(d.o, C * g->QD), fill(d.gu, 2 * F * C), fill(d.down, C * F);
        if (d.qkv_bias) CUDA_CHECK(cudaMemsetAsync(d.qkv_bias, 0, (size_t)g->QKVD * 2, g->stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(g->stream));
}

void gpu_gen_reset(struct gpu_gen *g, int s) {
    CHECK(s >= 0 && s < g->S, "sequence %d of %d", s, g->S);
    g->len[s] = 0;
}

int gpu_gen_prefill(struct gpu_gen *g, int s, const int32_t *ids, int n, float *logits, struct io_err *e) {
    CHECK(s >= 0 && s < g->S && n >= 1, "sequence %d of %d, %d tokens", s, g->S, n);
    if (g->len[s] + n > g->T_max)
        return io_fail(e, "the sequence would hold %d tokens, more than the %d this generator was sized for",
                       g->len[s] + n, g->T_max);
    for (int at = 0; at < n; at += g->N_max) {
        const int m = n - at < g->N_max ? n - at : g->N_max;
        /* the staging buffer is reused: the copy of the previous chunk must be done */
        if (at > 0) CUDA_CHECK(cudaStreamSynchronize(g->stream));
        for (int i = 0; i < m; i++) {
            CHECK(ids[at + i] >= 0 && ids[at + i] < g->c.V, "token %d outside the vocabulary", ids[at + i]);
            g->h_rows[g->N_max + i] = s;
            g->h_rows[2 * g->N_max + i] = g->len[s]++;
        }
        stage(g, ids + at, m);
        forward_rows(g, m);
    }
    const int last = (n - 1) % g->N_max;
    head(g, g->logits, g->n + (size_t)last * g->c.C, 1);
    CUDA_CHECK(cudaMemcpyAsync(logits, g->logits, (size_t)g->c.V * 4, cudaMemcpyDeviceToHost, g->stream));
    CUDA_CHECK(cudaStreamSynchronize(g->stream));
    return 0;
}

int gpu_gen_decode(struct gpu_gen *g, const int32_t *seqs, const int32_t *tokens, int n, float *logits,
                   int32_t *next, struct io_err *e) {
    CHECK(n >= 1 && n <= g->S && n <= g->N_max, "%d rows (S=%d)", n, g->S);
    for (int i = 0; i < n; i++) {
        const int s = seqs[i];
        CHECK(s >= 0 && s < g->S, "sequence %d of %d", s, g->S);
        CHECK(tokens[i] >= 0 && tokens[i] < g->c.V, "token %d outside the vocabulary", tokens[i]);
        if (g->len[s] + 1 > g->T_max)
            return io_fail(e, "sequence %d would hold %d tokens, more than the %d this generator was sized for", s,
                           g->len[s] + 1, g->T_max);
    }
    for (int i = 0; i < n; i++) {
        g->h_rows[g->N_max + i] = seqs[i];
        g->h_rows[2 * g->N_max + i] = g->len[seqs[i]]++;
    }
    stage(g, tokens, n);
    decode_launch(g, n, logits == nullptr);
    if (logits)
        CUDA_CHECK(cudaMemcpyAsync(logits, g->logits, (size_t)n * g->c.V * 4, cudaMemcpyDeviceToHost, g->stream));
    else
        CUDA_CHECK(cudaMemcpyAsync(next, g->d_next, (size_t)n * 4, cudaMemcpyDeviceToHost, g->stream));
    CUDA_CHECK(cudaStreamSynchronize(g->stream));
    return 0;
}

const char *gpu_gen_device_name(const struct gpu_gen *g) { return g->device; }
