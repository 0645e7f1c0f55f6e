/* llama_shard.cu — the sharded optimizer of the GPU model (ZeRO-1; gpu/llama.h, ref/shard.h).
 *
 * With options.shard_world = W > 1 (full fine-tuning), rank options.shard_rank keeps the fp32
 * masters and the optimizer state of its pieces only, in flat arrays (rows of the layout, so the
 * plan counts them): s_master (the pieces at their off) in the parameter slab; AdamW's moments
 * s_m, s_v (at off) — or, for the 8-bit optimizer, the codes s_q1, s_q2 (at off) and block maxima
 * s_absmax1, s_absmax2 (at boff) of the pieces of 8-bit tensors, and s_m, s_v (at soff) of the
 * others' — in the optimizer slab. The bf16 compute copies stay whole on every rank, and the
 * gradients too unless they are sharded (options.shard_grads: s_grad, the pieces' accumulated
 * gradients at off, in the gradient slab; layer l ≥ 2's gradient rows are layer l − 2's). Masters
 * and state the layout does not give a tensor are absent: a tensor's master pointer is its
 * gradient's, the staging through which a load writes the whole master before gl_take_masters
 * keeps this rank's pieces (gl_shard_keep_pieces) and zeroes the gradient slab — with sharded
 * gradients a layer at a time (gl_take_layer_masters), since layers share those rows.
 *
 * The optimizer (gpu/adamw.h's sharded form) takes its chunks from the same pieces; the 8-bit
 * optimizer runs one launch per piece, 8-bit exactly when the whole tensor is (a piece of whole
 * 256-blocks is updated as those blocks of the whole tensor are). Checkpoint tensors are written
 * piecewise (and the whole bf16 copy from the written master) and read by assembling every rank's
 * arrays, which the caller gathers.
 *
 * Test: tests/parity/llama_shard_parity.c, in the llama_dp_parity binary (the sharded model against
 * the unsharded one, W ranks in one process); the plan: tests/parity/llama_plan_test.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "gpu/adamw.h"
#include "gpu/adamw8bit.h"
#include "gpu/cuda_check.h"
#include "gpu/llama_internal.h"
#include "io/check.h"
#include "ref/adamw8bit.h"
#include "ref/bf16.h"

namespace {

std::vector<int64_t> tensor_sizes(const gpu_llama *m) {
    std::vector<int64_t> n(m->n_params);
    for (int i = 0; i < m->n_params; i++) n[i] = m->params[i].n;
    return n;
}

int is_8bit_tensor(const gpu_llama *m, int t) {
    return m->opt.optimizer == OPTIMIZER_ADAMW8BIT && m->params[t].n >= ADAMW8BIT_MIN_8BIT_SIZE;
}

/* A rank's pieces and where each sits in the 8-bit optimizer's arrays. */
struct rank_layout {
    std::vector<shard_piece> p;
    std::vector<int64_t> boff, soff;
    int64_t elems = 0, blocks = 0, elems32 = 0;
};

rank_layout layout_of(const gpu_llama *m, int r) {
    rank_layout L;
    const std::vector<int64_t> n = tensor_sizes(m);
    L.p.resize(m->n_params > 0 ? m->n_params : 1);
    const int k = shard_pieces(L.p.data(), &L.elems, n.data(), m->n_params, m->opt.shard_world, r);
    L.p.resize(k);
    L.boff.resize(k);
    L.soff.resize(k);
    for (int i = 0; i < k; i++) {
        const int64_t len = L.p[i].hi - L.p[i].lo;
        L.boff[i] = L.soff[i] = 0;
        if (m->opt.optimizer != OPTIMIZER_ADAMW8BIT) continue;
        if (is_8bit_tensor(m, L.p[i].tensor)) {
            L.boff[i] = L.blocks;
            L.blocks += adamw8bit_n_blocks(len);
        } else {
            L.elems32 = (L.elems32 + 3) / 4 * 4;
            L.soff[i] = L.elems32;
            L.elems32 += len;
        }
    }
    return L;
}

/* The flat array k of one rank, and where tensor piece i of it starts and how many elements. */
size_t array_elem(const gpu_llama *m, int k) {
    (void)m;
    return k == GPU_SHARD_Q1 || k == GPU_SHARD_Q2 ? 1 : 4;
}

size_t array_bytes(const gpu_llama *m, const rank_layout &L, int k) {
    const int eight = m->opt.optimizer == OPTIMIZER_ADAMW8BIT;
    switch (k) {
        case GPU_SHARD_MASTER: return (size_t)L.elems * 4;
        case GPU_SHARD_M:
        case GPU_SHARD_V: return (size_t)(eight ? L.elems32 : L.elems) * 4;
        case GPU_SHARD_Q1:
        case GPU_SHARD_Q2: return eight ? (size_t)L.elems : 0;
        case GPU_SHARD_ABSMAX1:
        case GPU_SHARD_ABSMAX2: return eight ? (size_t)L.blocks * 4 : 0;
    }
    return 0;
}

/* Engine tensor i: its parameter and which flat array holds it. */
int tensor_array(const gpu_llama *m, int i, int *param) {
    const gl_tensor &t = m->tensors[i];
    *param = t.param;
    const char *suffix = t.info.name + strlen(m->params[t.param].name);
    static const struct {
        const char *suffix;
        int array;
    } map[] = {{"", GPU_SHARD_MASTER},        {".exp_avg", GPU_SHARD_M},     {".exp_avg_sq", GPU_SHARD_V},
               {".state1", GPU_SHARD_Q1},     {".state2", GPU_SHARD_Q2},     {".absmax1", GPU_SHARD_ABSMAX1},
               {".absmax2", GPU_SHARD_ABSMAX2}};
    for (const auto &e : map)
        if (strcmp(suffix, e.suffix) == 0) return e.array;
    CHECK(0, "tensor %s: no flat array for '%s'", t.info.name, suffix);
    return -1;
}

/* Piece pi of layout L in array k: the first element in the flat array, the first in the tensor,
 * and the count (blocks for the maxima). */
void piece_span(const gpu_llama *m, const rank_layout &L, int pi, int k, int64_t *at, int64_t *from, int64_t *len) {
    const shard_piece &p = L.p[pi];
    const int eight = m->opt.optimizer == OPTIMIZER_ADAMW8BIT;
    *from = p.lo;
    *len = p.hi - p.lo;
    *at = p.off;
    if (k == GPU_SHARD_ABSMAX1 || k == GPU_SHARD_ABSMAX2) {
        *at = L.boff[pi];
        *from = p.lo / ADAMW8BIT_BLOCKSIZE;
        *len = adamw8bit_n_blocks(p.hi - p.lo);
    } else if (eight && (k == GPU_SHARD_M || k == GPU_SHARD_V)) {
        *at = L.soff[pi];
    }
}

void *array_ptr(gpu_llama *m, int k) {
    switch (k) {
        case GPU_SHARD_MASTER: return m->s_master;
        case GPU_SHARD_M: return m->s_m;
        case GPU_SHARD_V: return m->s_v;
        case GPU_SHARD_Q1: return m->s_q1;
        case GPU_SHARD_Q2: return m->s_q2;
        case GPU_SHARD_ABSMAX1: return m->s_absmax1;
        case GPU_SHARD_ABSMAX2: return m->s_absmax2;
    }
    return nullptr;
}

}  // namespace

void gl_shard_rows(gpu_llama *m, void *rows, gl_add_row_fn add_row) {
    if (!m->sharded) return;
    const rank_layout L = layout_of(m, m->opt.shard_rank);
    free(m->pieces);
    free(m->piece_boff);
    free(m->piece_soff);
    const size_t k = L.p.size() > 0 ? L.p.size() : 1;
    m->pieces = static_cast<shard_piece *>(calloc(k, sizeof(shard_piece)));
    m->piece_boff = static_cast<int64_t *>(calloc(k, sizeof(int64_t)));
    m->piece_soff = static_cast<int64_t *>(calloc(k, sizeof(int64_t)));
    CHECK(m->pieces && m->piece_boff && m->piece_soff, "out of host memory");
    m->n_pieces = (int)L.p.size();
    for (int i = 0; i < m->n_pieces; i++) m->pieces[i] = L.p[i], m->piece_boff[i] = L.boff[i], m->piece_soff[i] = L.soff[i];
    m->shard_elems = L.elems, m->shard_blocks = L.blocks, m->shard_elems32 = L.elems32;
    const int eight = m->opt.optimizer == OPTIMIZER_ADAMW8BIT;
    add_row(rows, SLAB_PARAMS, (void **)&m->s_master, L.elems, 4);
    add_row(rows, SLAB_OPTIM, (void **)&m->s_m, eight ? L.elems32 : L.elems, 4);
    add_row(rows, SLAB_OPTIM, (void **)&m->s_v, eight ? L.elems32 : L.elems, 4);
    add_row(rows, SLAB_OPTIM, (void **)&m->s_q1, eight ? L.elems : 0, 1);
    add_row(rows, SLAB_OPTIM, (void **)&m->s_q2, eight ? L.elems : 0, 1);
    add_row(rows, SLAB_OPTIM, (void **)&m->s_absmax1, eight ? L.blocks : 0, 4);
    add_row(rows, SLAB_OPTIM, (void **)&m->s_absmax2, eight ? L.blocks : 0, 4);
    add_row(rows, SLAB_GRADS, (void **)&m->s_grad, m->shard_grads ? L.elems : 0, 4);
}

struct gpu_adamw *gl_shard_build_optimizer(gpu_llama *m) {
    std::vector<gpu_adamw_param> ps(m->n_params);
    for (int i = 0; i < m->n_params; i++) {
        const gl_param &p = m->params[i];
        ps[i] = gpu_adamw_param{}; /* filled by field */
        ps[i].copy = p.copy;
        ps[i].grad = gl_grad_f32(m, p);
        ps[i].n = p.n;
        ps[i].decay = 1;
    }
    const int adamw = m->opt.optimizer == OPTIMIZER_ADAMW;
    return build_gpu_adamw_sharded(ps.data(), m->n_params, m->pieces, m->n_pieces, adamw ? m->s_master : nullptr,
                                   adamw ? m->s_m : nullptr, adamw ? m->s_v : nullptr,
                                   m->shard_grads ? m->s_grad : nullptr);
}

/* Launch i's stream: the step's, or a side stream (round-robin; gl_adamw8bit_steps forked them). */
static cudaStream_t opt_lane(const gpu_llama *m, int i, cudaStream_t s) {
    const int k = i % (1 + GL_OPT_SIDE);
    return k == 0 || !m->opt_side[0] ? s : m->opt_side[k - 1];
}

/* The launches of gl_adamw8bit_steps, launch i on opt_lane(m, i, s). */
static void steps_on_lanes(gpu_llama *m, const gpu_adamw8bit_args *a, cudaStream_t s) {
    if (!m->sharded) {
        const int in_copy = gl_master_in_copy(m);
        for (int i = 0; i < m->n_params; i++) {
            const gl_param &p = m->params[i];
            gpu_adamw8bit_tensor t = {};
            t.p = in_copy ? nullptr : p.master;
            t.copy = p.copy;
            if (gl_grads_bf16(m)) t.grad_bf16 = static_cast<const uint16_t *>(p.grad);
            else t.grad = static_cast<const float *>(p.grad);
            t.n = p.n;
            t.is_8bit = p.is_8bit;
            t.q1 = p.q1, t.q2 = p.q2;
            t.absmax1 = p.absmax1, t.absmax2 = p.absmax2;
            t.map1 = m->map1, t.map2 = m->map2, t.tables = m->a8_tables;
            t.m = p.m, t.v = p.v;
            t.lo = p.lo; /* split masters' (NULL otherwise) */
            t.master_bf16 = gl_master_bf16(m);
            t.sr_seed = m->opt.seed;
            t.sr_tensor = bf16_sr_tensor_hash(p.name);
            gpu_adamw8bit_step(&t, a, opt_lane(m, i, s));
        }
        return;
    }
    for (int k = 0; k < m->n_pieces; k++) {
        const shard_piece &pc = m->pieces[k];
        const gl_param &p = m->params[pc.tensor];
        const int eight = is_8bit_tensor(m, pc.tensor);
        gpu_adamw8bit_tensor t = {}; /* by field, as above */
        t.p = m->s_master + pc.off;
        t.copy = p.copy + pc.lo;
        t.grad = m->shard_grads ? m->s_grad + pc.off : gl_grad_f32(m, p) + pc.lo;
        t.n = pc.hi - pc.lo;
        t.is_8bit = eight;
        t.q1 = eight ? m->s_q1 + pc.off : nullptr;
        t.q2 = eight ? m->s_q2 + pc.off : nullptr;
        t.absmax1 = eight ? m->s_absmax1 + m->piece_boff[k] : nullptr;
        t.absmax2 = eight ? m->s_absmax2 + m->piece_boff[k] : nullptr;
        t.map1 = m->map1, t.map2 = m->map2, t.tables = m->a8_tables;
        t.m = eight ? nullptr : m->s_m + m->piece_soff[k];
        t.v = eight ? nullptr : m->s_v + m->piece_soff[k];
        gpu_adamw8bit_step(&t, a, opt_lane(m, k, s));
    }
}

void gl_adamw8bit_steps(gpu_llama *m, const gpu_adamw8bit_args *a, cudaStream_t s) {
    /* every tensor's (or piece's) update is independent of the others': the side streams start when
     * the step's stream reaches here (the gradients, the norm and the guard written) and the step's
     * stream waits for all of them after */
    const bool fan = m->opt_side[0] != nullptr;
    if (fan) {
        CUDA_CHECK(cudaEventRecord(m->opt_fork, s));
        for (int k = 0; k < GL_OPT_SIDE; k++) CUDA_CHECK(cudaStreamWaitEvent(m->opt_side[k], m->opt_fork, 0));
    }
    steps_on_lanes(m, a, s);
    if (fan)
        for (int k = 0; k < GL_OPT_SIDE; k++) {
            CUDA_CHECK(cudaEventRecord(m->opt_join[k], m->opt_side[k]));
            CUDA_CHECK(cudaStreamWaitEvent(s, m->opt_join[k], 0));
        }
}

void gl_shard_keep_pieces(gpu_llama *m, int which) {
    for (int k = 0; k < m->n_pieces; k++) {
        const shard_piece &pc = m->pieces[k];
        /* which = −1: the tensors outside the layers */
        if (which != GL_KEEP_ALL && gl_layer_of(m->params[pc.tensor].name) != which) continue;
        const gl_param &p = m->params[pc.tensor]; /* p.master: the staging in the gradient slab */
        CUDA_CHECK(cudaMemcpyAsync(m->s_master + pc.off, p.master + pc.lo, sizeof(float) * (size_t)(pc.hi - pc.lo),
                                   cudaMemcpyDeviceToDevice, m->stream));
    }
}

void gl_shard_tensor_write(gpu_llama *m, int i, const void *host) {
    int param;
    const int k = tensor_array(m, i, &param);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    const size_t es = array_elem(m, k);
    for (int pi = 0; pi < m->n_pieces; pi++) {
        if (m->pieces[pi].tensor != param) continue;
        rank_layout L; /* this rank's, from the tables */
        L.p.assign(m->pieces, m->pieces + m->n_pieces);
        L.boff.assign(m->piece_boff, m->piece_boff + m->n_pieces);
        L.soff.assign(m->piece_soff, m->piece_soff + m->n_pieces);
        int64_t at, from, len;
        piece_span(m, L, pi, k, &at, &from, &len);
        CUDA_CHECK(cudaMemcpy(static_cast<char *>(array_ptr(m, k)) + (size_t)at * es,
                              static_cast<const char *>(host) + (size_t)from * es, (size_t)len * es,
                              cudaMemcpyHostToDevice));
    }
    const gl_param &p = m->params[param];
    if (k == GPU_SHARD_MASTER && p.copy) { /* the whole bf16 copy, on every rank */
        std::vector<uint16_t> c((size_t)p.n);
        bf16_from_float_array(c.data(), static_cast<const float *>(host), p.n);
        CUDA_CHECK(cudaMemcpy(p.copy, c.data(), sizeof(uint16_t) * (size_t)p.n, cudaMemcpyHostToDevice));
    }
}

extern "C" float *gpu_llama_shard_partials(gpu_llama *m, int64_t *n) {
    CHECK(m->sharded, "gpu_llama_shard_partials: the optimizer is not sharded");
    return gpu_adamw_partials(m->adamw, n, m->stream);
}

extern "C" void gpu_llama_shard_copies(const gpu_llama *m, int rank, uint16_t **first, int64_t *n) {
    CHECK(m->sharded, "gpu_llama_shard_copies: the optimizer is not sharded");
    const rank_layout L = layout_of(m, rank);
    *first = nullptr;
    *n = 0;
    if (L.p.empty()) return;
    const shard_piece &a = L.p.front(), &b = L.p.back();
    *first = m->params[a.tensor].copy + a.lo;
    *n = (m->params[b.tensor].copy + b.hi) - *first;
    CHECK(*n > 0, "rank %d's copies: an empty or reversed range", rank);
}

extern "C" void *gpu_llama_shard_array(gpu_llama *m, int k, size_t *bytes) {
    CHECK(m->sharded && k >= 0 && k < GPU_SHARD_ARRAYS, "shard array %d", k);
    *bytes = gpu_llama_shard_array_bytes(m, m->opt.shard_rank, k);
    return array_ptr(m, k);
}

extern "C" size_t gpu_llama_shard_array_bytes(const gpu_llama *m, int rank, int k) {
    CHECK(m->sharded && k >= 0 && k < GPU_SHARD_ARRAYS, "shard array %d", k);
    return array_bytes(m, layout_of(m, rank), k);
}

extern "C" void gpu_llama_tensor_assemble(const gpu_llama *m, int i, void *host, const void *const *const *arrays) {
    CHECK(m->sharded && i >= 0 && i < m->n_tensors, "tensor %d", i);
    int param;
    const int k = tensor_array(m, i, &param);
    const size_t es = array_elem(m, k);
    for (int r = 0; r < m->opt.shard_world; r++) {
        const rank_layout L = layout_of(m, r);
        for (int pi = 0; pi < (int)L.p.size(); pi++) {
            if (L.p[pi].tensor != param) continue;
            int64_t at, from, len;
            piece_span(m, L, pi, k, &at, &from, &len);
            memcpy(static_cast<char *>(host) + (size_t)from * es,
                   static_cast<const char *>(arrays[r][k]) + (size_t)at * es, (size_t)len * es);
        }
    }
}
