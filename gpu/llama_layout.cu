/* llama_layout.cu — the memory plan of the GPU model, its slabs and its tensor registry
 * (gpu/llama.h).
 *
 * Every buffer the model holds is one row of a table: {slab, where its pointer goes, element count,
 * element size} (struct gl_row; llm.c's TENSOR_SPEC is the model). Short functions add the rows of
 * each category in a fixed order — frozen weights and trainable parameters (in ref_llama_tensors'
 * order), adapters, saved activations, scratch, fixed buffers — and one loop (place_rows) sizes the
 * slabs, each buffer 256-byte aligned in its slab; build allocates each slab once and the same
 * loop points every row into it. gpu_llama_plan_bytes runs the table without allocating: the plan
 * is exactly what is allocated, and nothing is allocated later. Buffers that are views of others
 * (layers sharing one saved set under recomputation, the NF4 dequantization buffer's per-linear
 * slices, a LoRA group's members' slices, the tied lm_head) are set after pointing, by
 * point_views. The host tables the rows point into (layers, saved sets, layer inputs, trainable
 * tensors) are sized from the config before the rows are made (count_params), and every row
 * count is bounds-checked.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "gpu/attention.h"
#include "gpu/cross_entropy.h"
#include "gpu/cuda_check.h"
#include "gpu/dora.h"
#include "gpu/lora.h"
#include "gpu/llama_internal.h"
#include "gpu/rmsnorm.h"
#include "io/check.h"
#include "ref/adamw8bit.h"
#include "ref/bf16.h"
#include "ref/nf4.h"
#include "ref/quant8.h"
#include "ref/rope.h"

namespace {

constexpr size_t kAlign = 256;
/* The bf16 logits of one lm_head chunk: 512 MiB, 256 MiB under --recompute layer (the least-memory
 * runs), in whole 128-row tiles of the GEMMs (ce_chunk_rows). */
constexpr size_t kCeChunkBytes = (size_t)512 << 20, kCeChunkBytesLeast = (size_t)256 << 20;
constexpr int64_t kCeRowTile = 128;

/* Rows of one lm_head chunk for vocabulary V: as many as bytes of bf16 logits hold, rounded down to
 * a multiple of kCeRowTile — the chunk is the M of the logits and dh products, and at a 128256
 * vocabulary 256 MiB gave 1046 rows: a last tile 22 rows full in each (docs/RESULTS.md, 2026-11-28,
 * fourth session); at least 64 rows (a vocabulary above 4M), at most N. */
int ce_chunk_rows(int64_t N, int64_t V, size_t bytes) {
    int64_t r = (int64_t)(bytes / (2 * (size_t)V));
    r = r >= kCeRowTile ? r / kCeRowTile * kCeRowTile : (r < 64 ? 64 : r);
    return (int)(r > N ? N : r);
}

/* One buffer: count elements of elem bytes in slab, its address written to *ptr. */
struct gl_row {
    gl_slab slab;
    void **ptr;
    int64_t count;
    size_t elem;
};

/* The table, and the bytes others allocate for the model (the optimizer's chunk tables); `later`:
 * rows placed after the trainable tensors' (add_param's masters, make_rows). */
struct gl_rows {
    gl_row *r;
    int n, cap;
    size_t outside;
    gl_row *later;
    int n_later, cap_later;
};

void append_row(gl_row *&r, int &n, int &cap, gl_row row) {
    if (n == cap) {
        cap = cap ? 2 * cap : 256;
        r = static_cast<gl_row *>(realloc(r, (size_t)cap * sizeof(gl_row)));
        CHECK(r != nullptr, "out of host memory for the layout table");
    }
    r[n++] = row;
}

void add_row(gl_rows &rs, gl_slab slab, void **ptr, int64_t count, size_t elem) {
    CHECK(count >= 0, "layout: negative element count %lld", (long long)count);
    append_row(rs.r, rs.n, rs.cap, gl_row{slab, ptr, count, elem});
}

/* A row placed after every row made before make_rows takes the deferred ones (add_param's masters and
 * low halves: so that the bf16 copies of consecutive tensors lie side by side in every layout). */
template <class T>
void add_later(gl_rows &rs, gl_slab slab, T **ptr, int64_t count) {
    CHECK(count >= 0, "layout: negative element count %lld", (long long)count);
    append_row(rs.later, rs.n_later, rs.cap_later, gl_row{slab, reinterpret_cast<void **>(ptr), count, sizeof(T)});
}

void add_row_cb(void *rs, gl_slab slab, void **ptr, int64_t count, size_t elem) {
    add_row(*static_cast<gl_rows *>(rs), slab, ptr, count, elem);
}

template <class T>
void add(gl_rows &rs, gl_slab slab, T **ptr, int64_t count) {
    add_row(rs, slab, reinterpret_cast<void **>(ptr), count, sizeof(T));
}

/* The one loop: the offset of every row in its slab (256-byte aligned) and each slab's size; with
 * the slabs allocated (base non-NULL), every row's pointer. A row of no elements gets the address
 * where it would start (a valid pointer of no extent). */
void place_rows(const gl_rows &rs, unsigned char *const base[N_SLABS], size_t size[N_SLABS]) {
    for (int s = 0; s < N_SLABS; s++) size[s] = 0;
    for (int i = 0; i < rs.n; i++) {
        const gl_row &r = rs.r[i];
        size_t &off = size[r.slab];
        off = (off + kAlign - 1) / kAlign * kAlign;
        if (base[r.slab]) *r.ptr = base[r.slab] + off;
        off += (size_t)r.count * r.elem;
    }
}

int has_bias(const model_config *c, int t) { return llama_linear_has_bias(c, (enum llama_linear)t); }

size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* The row stride of a folded group's input or weight: C_in + the members' n·R columns, rounded up to
 * 64 elements (128-byte rows: cuBLASLt's products over them ran 0.4–0.5 ms a step faster at 1B than
 * at 16-byte rows, RESULTS.md 2026-11-28); C_in itself when nothing is folded. */
int64_t fold_ld(int64_t c_in, int64_t adapter_cols) {
    return adapter_cols ? (c_in + adapter_cols + 63) / 64 * 64 : c_in;
}

/* The group linear t belongs to, or −1. */
int group_of(int t) {
    for (int g = 0; g < GL_N_GROUPS; g++)
        if (t >= gl_group_first[g] && t < gl_group_first[g] + gl_group_n[g]) return g;
    return -1;
}

/* ---- trainable tensors ------------------------------------------------------------------------ */

/* Full fine-tuning's trainable tensors a layer: two norms, each linear's weight and bias. */
int full_params_per_layer(const model_config *c) {
    int n = 2;
    for (int t = 0; t < LLAMA_N_LINEAR; t++) n += 1 + has_bias(c, t);
    return n;
}

/* Trainable tensors of (config, options), in the order the rows register them. */
int count_params(const gpu_llama *m) {
    const model_config *c = &m->cfg;
    if (m->opt.mode == LLAMA_FULL) return 1 + c->L * full_params_per_layer(c) + 1 + (c->tie_word_embeddings ? 0 : 1);
    int targets = 0;
    for (int t = 0; t < LLAMA_N_LINEAR; t++) targets += gl_is_target(m, t);
    return c->L * targets * (m->opt.mode == LLAMA_DORA ? 3 : 2);
}

/* Where a trainable tensor's compute copy and gradient come from. */
enum param_storage {
    PARAM_OWN = 0,   /* its own bf16 copy and fp32 gradient rows */
    PARAM_NO_COPY,   /* no bf16 copy (the DoRA magnitude is used in fp32); its own gradient row */
    PARAM_IN_GROUP,  /* copy and gradient are slices of its LoRA group's (set by point_views) */
};

/* A trainable tensor: its registry entry (name, shape) and the rows of its master, copy, gradient
 * and optimizer state; *master, *copy, *grad (the model's own pointers to it) are set from the
 * registry after pointing (point_views). Returns the registry index. */
template <class G>
int add_param(gpu_llama *m, gl_rows &rs, const char *name, int ndim, int64_t d0, int64_t d1, float **master,
              uint16_t **copy, G **grad, param_storage storage = PARAM_OWN) {
    CHECK(m->n_params < m->cap_params, "layout: more trainable tensors than the %d counted", m->cap_params);
    const int i = m->n_params++;
    gl_param &p = m->params[i];
    memset(&p, 0, sizeof p);
    CHECK(snprintf(p.name, sizeof p.name, "%s", name) < (int)sizeof p.name, "tensor name too long: %s", name);
    p.ndim = ndim;
    p.shape[0] = d0;
    p.shape[1] = ndim == 2 ? d1 : 0;
    p.n = ndim == 2 ? d0 * d1 : d0;
    p.dst_master = master, p.dst_copy = copy, p.dst_grad = reinterpret_cast<void **>(grad);
    /* the sharded optimizer keeps masters and state in its own flat rows (gpu/llama_shard.cu) */
    const int sharded = m->sharded, in_copy = gl_master_in_copy(m);
    if (in_copy) CHECK(storage == PARAM_OWN, "layout: a master kept in the copy needs its own bf16 copy (%s)", name);
    /* the copies side by side (q, k, v's and gate, up's stacked: group_stacked), the masters after them */
    if (m->opt.master == MASTER_SPLIT) add_later(rs, SLAB_PARAMS, &p.lo, p.n);
    else if (!sharded && !in_copy) add_later(rs, SLAB_PARAMS, &p.master, p.n); /* bf16 weights: the copy is all */
    if (storage == PARAM_OWN) add(rs, SLAB_PARAMS, &p.copy, p.n);
    /* sharded gradients: layer l ≥ 2 writes into layer l − 2's rows (point_views) */
    const int shared_grad = m->shard_grads && gl_layer_of(name) >= 2;
    if (storage != PARAM_IN_GROUP && !shared_grad)
        add_row(rs, SLAB_GRADS, &p.grad, p.n, gl_grads_bf16(m) ? sizeof(uint16_t) : sizeof(float));
    if (m->opt.optimizer == OPTIMIZER_ADAMW8BIT && p.n >= ADAMW8BIT_MIN_8BIT_SIZE) {
        p.is_8bit = 1;
        if (!sharded) {
            add(rs, SLAB_OPTIM, &p.q1, p.n);
            add(rs, SLAB_OPTIM, &p.q2, p.n);
            add(rs, SLAB_OPTIM, &p.absmax1, adamw8bit_n_blocks(p.n));
            add(rs, SLAB_OPTIM, &p.absmax2, adamw8bit_n_blocks(p.n));
        }
    } else if (!sharded) {
        add(rs, SLAB_OPTIM, &p.m, p.n);
        add(rs, SLAB_OPTIM, &p.v, p.n);
    }
    /* the optimizer's per-tensor tables: a chunk descriptor and a partial sum per 8192 elements,
     * a tensor descriptor (gpu/adamw.cu); sharded, also the chunk's state offset and the own list */
    rs.outside += (size_t)((p.n + 8191) / 8192) * (sharded ? 32 : 20) + 64;
    return i;
}

/* A frozen NF4 linear: codes, the NF4 table, absmax (double-quantized or not). */
void nf4_rows(gpu_llama *m, gl_rows &rs, gl_nf4 *q, int64_t n) {
    q->n = n;
    q->blocksize = NF4_BLOCKSIZE;
    q->nested_blocksize = NF4_NESTED_BLOCKSIZE;
    q->nested = m->opt.nested_nf4;
    q->n_blocks = nf4_n_blocks(n, q->blocksize);
    add(rs, SLAB_WEIGHTS, &q->codes, nf4_packed_bytes(n));
    add(rs, SLAB_WEIGHTS, &q->qmap, 16);
    if (q->nested) {
        add(rs, SLAB_WEIGHTS, &q->absmax_q, q->n_blocks);
        add(rs, SLAB_WEIGHTS, &q->absmax2, (q->n_blocks + q->nested_blocksize - 1) / q->nested_blocksize);
        add(rs, SLAB_WEIGHTS, &q->code2, 256);
    } else {
        add(rs, SLAB_WEIGHTS, &q->absmax_f32, q->n_blocks);
    }
}

/* ---- the categories, in slab order ------------------------------------------------------------ */

/* Frozen base weights (bf16 or NF4), or every weight as a trainable tensor in full fine-tuning, in
 * ref_llama_tensors' order; the NF4 dequantization buffer of one layer. */
void weight_rows(gpu_llama *m, gl_rows &rs) {
    const model_config *c = &m->cfg;
    const int full = m->opt.mode == LLAMA_FULL, nf4 = m->opt.base == GPU_BASE_NF4;
    const int fp8_base = m->opt.base == GPU_BASE_FP8, fp8 = m->opt.linears == GPU_LINEAR_FP8;
    const int64_t C = c->C, V = c->V;
    char name[200];
    if (full)
        add_param(m, rs, "model.embed_tokens.weight", 2, V, C, &m->embed_master, &m->embed, &m->embed_grad);
    else
        add(rs, SLAB_WEIGHTS, &m->embed, V * C);
    /* one layer in bf16: NF4's dequantization; an FP8-stored base's W_eff for bf16 products or
     * DoRA's row norm */
    if (nf4 || (fp8_base && (!fp8 || m->opt.mode == LLAMA_DORA))) {
        int64_t per_layer = 0;
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            int co, ci;
            llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
            const int g = group_of(t); /* a folded group's rows padded (NF4: gl_nf4_to_bf16) */
            per_layer += (int64_t)co * (g >= 0 && m->folded[g] ? fold_ld(ci, (int64_t)gl_group_n[g] * m->opt.R) : ci);
        }
        add(rs, SLAB_WEIGHTS, &m->dq_buf, per_layer);
    }
    for (int l = 0; l < c->L; l++) {
        gl_layer *ly = &m->layers[l];
        if (full) {
            snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
            add_param(m, rs, name, 1, C, 0, &ly->attn_norm_master, &ly->attn_norm, &ly->attn_norm_grad);
        } else {
            add(rs, SLAB_WEIGHTS, &ly->attn_norm, C);
        }
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            gl_linear *lin = &ly->lin[t];
            memset(lin, 0, sizeof *lin);
            llama_linear_shape(c, (enum llama_linear)t, &lin->c_out, &lin->c_in);
            const int64_t co = lin->c_out, ci = lin->c_in;
            lin->target = gl_is_target(m, t);
            const int g = group_of(t);
            lin->ldw = g >= 0 && m->folded[g] ? fold_ld(ci, (int64_t)gl_group_n[g] * m->opt.R) : ci;
            const char *module = llama_linears[t].module;
            if (full) {
                snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, module);
                add_param(m, rs, name, 2, co, ci, &lin->w_master, &lin->w, &lin->w_grad);
                if (has_bias(c, t)) {
                    snprintf(name, sizeof name, "model.layers.%d.%s.bias", l, module);
                    add_param(m, rs, name, 1, co, 0, &lin->bias_master, &lin->bias, &lin->bias_grad);
                }
            } else {
                if (nf4)
                    nf4_rows(m, rs, &lin->nf4, co * ci); /* lin->w: a slice of dq_buf (point_views) */
                else if (!fp8_base) /* FP8-stored: its codes (fp8_rows), lin->w a slice of dq_buf */
                    add(rs, SLAB_WEIGHTS, &lin->w, co * lin->ldw); /* folded: padded rows */
                if (has_bias(c, t)) add(rs, SLAB_WEIGHTS, &lin->bias, co);
            }
        }
        if (full) {
            snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
            add_param(m, rs, name, 1, C, 0, &ly->mlp_norm_master, &ly->mlp_norm, &ly->mlp_norm_grad);
        } else {
            add(rs, SLAB_WEIGHTS, &ly->mlp_norm, C);
        }
    }
    if (full) {
        add_param(m, rs, "model.norm.weight", 1, C, 0, &m->final_norm_master, &m->final_norm, &m->final_norm_grad);
        if (!c->tie_word_embeddings)
            add_param(m, rs, "lm_head.weight", 2, V, C, &m->lm_head_master, &m->lm_head, &m->lm_head_grad);
    } else {
        add(rs, SLAB_WEIGHTS, &m->final_norm, C);
        if (!c->tie_word_embeddings) add(rs, SLAB_WEIGHTS, &m->lm_head, V * C);
    }
}

/* Adapters, per layer and target: A, B (and DoRA's magnitude), trainable; DoRA's frozen ‖W‖² rows.
 * A grouped group's A copies and A gradients are one buffer each for all members, taken at its
 * first member (gl_group_first); the members' are slices of it. */
void adapter_rows(gpu_llama *m, gl_rows &rs) {
    if (m->opt.mode == LLAMA_FULL) return;
    const model_config *c = &m->cfg;
    const int64_t R = m->opt.R;
    char name[200];
    for (int l = 0; l < c->L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            if (!gl_is_target(m, t)) continue;
            gl_linear *lin = &m->layers[l].lin[t];
            const int64_t co = lin->c_out, ci = lin->c_in;
            const char *module = llama_linears[t].module;
            const int g = group_of(t), grouped = g >= 0 && m->grouped[g];
            if (grouped && t == gl_group_first[g]) {
                add(rs, SLAB_PARAMS, &m->layers[l].group_a[g], gl_group_n[g] * R * ci);
                add(rs, SLAB_GRADS, &m->layers[l].group_da[g], gl_group_n[g] * R * ci);
            }
            snprintf(name, sizeof name, "model.layers.%d.%s.lora_A.weight", l, module);
            lin->a_param = add_param(m, rs, name, 2, R, ci, &lin->a_master, &lin->a, &lin->a_grad,
                                     grouped ? PARAM_IN_GROUP : PARAM_OWN);
            snprintf(name, sizeof name, "model.layers.%d.%s.lora_B.weight", l, module);
            add_param(m, rs, name, 2, co, R, &lin->b_master, &lin->b, &lin->b_grad);
            if (m->opt.mode == LLAMA_DORA) {
                snprintf(name, sizeof name, "model.layers.%d.%s.lora_magnitude_vector", l, module);
                add_param(m, rs, name, 1, co, 0, &lin->mag, nullptr, &lin->mag_grad, PARAM_NO_COPY);
                add(rs, SLAB_WEIGHTS, &lin->w_sq, co);
            }
        }
}

/* Rows a linear's products cover at a time: the MLP's linears run in chunks of mlp_rows. */
int64_t rows_of(const gpu_llama *m, int t) { return t >= LLAMA_GATE ? m->mlp_rows : m->N; }

/* FP8 (llama_fp8.cu): each linear's codes — W and Wᵀ stored for trained weights and a bf16 base
 * under FP8 products, W for an FP8-stored base (its Wᵀ too without recomputation, else formed a
 * layer at a time: gl_fp8_base_wt_stored), both a layer at a time for an NF4 base — with 128×128 scales under block scaling; the layer buffers;
 * the per-tensor state (fixed): delayed scaling's histories, the scales (and the GEMMs'
 * 16-byte-strided dequantization scales), amaxes, flags, the saturated count, the step summary;
 * the scratch operands (x̂, dŷ and, for full fine-tuning's weight gradients, their transposed
 * copies, with their 1×128 scales). */
void fp8_rows(gpu_llama *m, gl_rows &rs) {
    gl_fp8 &F = m->fp8;
    const model_config *c = &m->cfg;
    const int fp8 = m->opt.linears == GPU_LINEAR_FP8, fp8_base = m->opt.base == GPU_BASE_FP8;
    const int nf4 = m->opt.base == GPU_BASE_NF4, full = m->opt.mode == LLAMA_FULL;
    if (!fp8 && !fp8_base) return;
    const int block = m->opt.fp8_recipe == FP8_RECIPE_BLOCK;
    int64_t per_layer = 0;
    for (int t = 0; t < LLAMA_N_LINEAR; t++) per_layer += (int64_t)m->layers[0].lin[t].c_out * m->layers[0].lin[t].c_in;
    const gl_slab ws = full ? SLAB_PARAMS : SLAB_WEIGHTS; /* trained codes are compute copies */
    const int per_layer_trained = gl_fp8_trained_per_layer(m); /* a layer at a time: two layer buffers */
    if (fp8 && (nf4 || per_layer_trained)) add(rs, ws, &F.w8_buf, per_layer);
    const int base_wt = gl_fp8_base_wt_stored(m); /* an FP8-stored base's Wᵀ kept too */
    if (fp8 && (nf4 || (fp8_base && !base_wt) || per_layer_trained)) add(rs, ws, &F.wt8_buf, per_layer);
    const int store_w = fp8_base || (fp8 && !nf4 && !per_layer_trained),
              store_wt = fp8 && !nf4 && (fp8_base ? base_wt : !per_layer_trained);
    int64_t largest = 0; /* the load's staging of one linear (gl_fp8_staging) where no layer buffer serves */
    for (int t = 0; t < LLAMA_N_LINEAR; t++)
        largest = std::max(largest, (int64_t)m->layers[0].lin[t].c_out * m->layers[0].lin[t].c_in);
    add(rs, SLAB_SCRATCH, &F.stage, base_wt && m->opt.mode != LLAMA_DORA ? largest : 0); /* DoRA: dq_buf */
    for (int l = 0; l < c->L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            gl_linear *lin = &m->layers[l].lin[t];
            const int64_t co = lin->c_out, ci = lin->c_in;
            if (store_w) add(rs, ws, &lin->w8, co * ci);
            if (store_wt) add(rs, ws, &lin->w8_t, co * ci);
            if (block) {
                add(rs, ws, &lin->w8_s, fp8_block_scale_count(FP8_BLOCK_128X128, co, ci));
                add(rs, ws, &lin->w8_s_t, fp8_block_scale_count(FP8_BLOCK_128X128, ci, co));
            }
        }
    F.n = FP8_N_ROLES * c->L * LLAMA_N_LINEAR;
    F.history_len = m->opt.fp8_recipe == FP8_RECIPE_DELAYED ? FP8_DELAYED_HISTORY_LEN : 0;
    add(rs, SLAB_FIXED, &F.history, (int64_t)F.n * F.history_len);
    add(rs, SLAB_FIXED, &F.scale, F.n);
    add(rs, SLAB_FIXED, &F.scale_inv, F.n);
    add(rs, SLAB_FIXED, &F.sinv16, 4 * (int64_t)F.n);
    add(rs, SLAB_FIXED, &F.amax, F.n);
    add(rs, SLAB_FIXED, &F.flags, F.n);
    add(rs, SLAB_FIXED, &F.saturated, 1);
    add(rs, SLAB_FIXED, &F.discard, 4);
    add(rs, SLAB_FIXED, &F.summary, 1);
    if (!fp8) return;
    /* the operands of one linear's products at a time: (rows_of(t), C_in) inputs and (rows_of(t), C_out)
     * gradients, the MLP's a chunk's rows */
    int64_t xq = 0, xq_s = 0, dq = 0, dq_s = 0, xt_s = 0, dt_s = 0;
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        const gl_linear &lin = m->layers[0].lin[t];
        const int64_t r = rows_of(m, t);
        xq = std::max(xq, r * lin.c_in), dq = std::max(dq, r * lin.c_out);
        if (!block) continue;
        xq_s = std::max(xq_s, (int64_t)fp8_block_scale_count(FP8_BLOCK_1X128, r, lin.c_in));
        dq_s = std::max(dq_s, (int64_t)fp8_block_scale_count(FP8_BLOCK_1X128, r, lin.c_out));
        xt_s = std::max(xt_s, (int64_t)fp8_block_scale_count(FP8_BLOCK_1X128, lin.c_in, r));
        dt_s = std::max(dt_s, (int64_t)fp8_block_scale_count(FP8_BLOCK_1X128, lin.c_out, r));
    }
    add(rs, SLAB_SCRATCH, &F.xq, xq);
    add(rs, SLAB_SCRATCH, &F.xq_s, xq_s);
    add(rs, SLAB_SCRATCH, &F.dq, dq);
    add(rs, SLAB_SCRATCH, &F.dq_s, dq_s);
    if (!full) return;
    add(rs, SLAB_SCRATCH, &F.xt, gl_fp8_inputs_kept(&m->opt) ? 0 : xq); /* kept: each layer's (gl_acts.xt8) */
    /* up's dŷ and dŷᵀ beside gate's: SwiGLU's backward writes both (delayed scaling) */
    const int64_t gate_up = m->opt.fp8_recipe == FP8_RECIPE_DELAYED
                                ? rows_of(m, LLAMA_UP) * m->layers[0].lin[LLAMA_UP].c_out
                                : 0;
    add(rs, SLAB_SCRATCH, &F.dq2, gate_up);
    add(rs, SLAB_SCRATCH, &F.dt2, gate_up);
    add(rs, SLAB_SCRATCH, &F.xt_s, xt_s);
    add(rs, SLAB_SCRATCH, &F.dt, dq);
    add(rs, SLAB_SCRATCH, &F.dt_s, dt_s);
}

/* The saved intermediates of the adapters of linears first..last: u = x Aᵀ (N, R) — one (N, n·R)
 * buffer for a grouped group — and for DoRA the row norms (C_out) and, where the backward does not
 * read the output instead (llama_dora_saved: not for v, o, gate, up), the pre-magnitude output z
 * (rows_of(t), C_out: an MLP linear's holds its chunk, consumed by the chunk's backward). */
void adapter_act_rows(gpu_llama *m, gl_rows &rs, gl_acts *s, int first, int last) {
    const int64_t N = (int64_t)m->opt.B * m->opt.T;
    for (int g = 0; g < GL_N_GROUPS; g++)
        if (gl_group_first[g] >= first && gl_group_first[g] <= last && m->grouped[g])
            add(rs, SLAB_ACTS, &s->ug[g], N * gl_group_n[g] * m->opt.R);
    for (int t = first; t <= last; t++) {
        if (!gl_is_target(m, t)) continue;
        if (!(group_of(t) >= 0 && m->grouped[group_of(t)])) add(rs, SLAB_ACTS, &s->u[t], N * m->opt.R);
        if (m->opt.mode == LLAMA_DORA) {
            if (llama_dora_saved(&m->cfg, (enum llama_linear)t) == DORA_SAVED_Z)
                add(rs, SLAB_ACTS, &s->z[t], rows_of(m, t) * m->layers[0].lin[t].c_out);
            add(rs, SLAB_ACTS, &s->wnorm[t], m->layers[0].lin[t].c_out);
        }
    }
}

/* Saved activations: the L + 1 layer inputs, then each layer's set — the attention part (q, k, v,
 * the attention output, its lse, the q/k/v adapters' intermediates) and the rest (norm statistics,
 * h, gate, up, the MLP input, the o/gate/up/down adapters' intermediates). Layers above 0 share
 * layer 0's attention part under RECOMPUTE_ATTN and LAYER, and its rest under LAYER
 * (point_views), except the recompute_keep layers below the top one (gl_keeps_set), whose sets are
 * their own. Then the final norm's. */
void activation_rows(gpu_llama *m, gl_rows &rs) {
    const model_config *c = &m->cfg;
    const int64_t N = m->N, C = c->C, F = c->F;
    if (m->opt.offload == GPU_OFFLOAD_INPUTS) {
        add(rs, SLAB_ACTS, &m->x_ping[0], N * C);
        add(rs, SLAB_ACTS, &m->x_ping[1], N * C);
        add(rs, SLAB_ACTS, &m->x[c->L], N * C);
        m->plan.host = (size_t)c->L * N * C * sizeof(uint16_t);
    } else {
        for (int l = 0; l <= c->L; l++) add(rs, SLAB_ACTS, &m->x[l], N * C);
        m->plan.host = 0;
    }
    for (int l = 0; l < c->L; l++) {
        gl_acts *s = &m->acts[l];
        const bool own = gl_keeps_set(m, l); /* --recompute-keep: not recomputed, its own set */
        if (l == 0 || m->opt.recompute == RECOMPUTE_NONE || own) {
            add(rs, SLAB_ACTS, &s->q, N * m->QD);
            add(rs, SLAB_ACTS, &s->k, N * m->KD);
            add(rs, SLAB_ACTS, &s->v, N * m->KD);
            add(rs, SLAB_ACTS, &s->att, N * m->ld_att); /* folded o: u after the QD columns */
            add(rs, SLAB_ACTS, &s->lse, (int64_t)m->opt.B * c->H * m->opt.T);
            adapter_act_rows(m, rs, s, LLAMA_Q, LLAMA_V);
        }
        if (l == 0 || m->opt.recompute != RECOMPUTE_LAYER || own) {
            add(rs, SLAB_ACTS, &s->rstd1, N);
            add(rs, SLAB_ACTS, gl_keeps_o_out(m) ? &s->o_out : &s->h, N * C);
            add(rs, SLAB_ACTS, &s->rstd2, N);
            /* MLP chunks (LAYER only: one shared set) hold mlp_rows rows; u stays (N, R) */
            add(rs, SLAB_ACTS, &s->gate, m->mlp_rows * 2 * F); /* and up: point_views */
            if (m->opt.mlp_input == GPU_MLP_INPUT_SAVED) add(rs, SLAB_ACTS, &s->mlp, m->mlp_rows * F);
            if (m->opt.keep_norms) { /* without recomputation: every layer's own */
                add(rs, SLAB_ACTS, &s->n1, N * m->ld_n1);
                add(rs, SLAB_ACTS, &s->n2, N * m->ld_n2);
            }
            adapter_act_rows(m, rs, s, LLAMA_O, LLAMA_DOWN);
        }
        if (gl_fp8_inputs_kept(&m->opt)) /* the groups' inputs' transposed codes (nothing recomputed) */
            for (int t : {LLAMA_Q, LLAMA_O, LLAMA_GATE, LLAMA_DOWN})
                add(rs, SLAB_ACTS, &s->xt8[t], (int64_t)m->layers[l].lin[t].c_in * N);
    }
    add(rs, SLAB_ACTS, &m->rstd_f, N);
    /* the final norm's output nf is n1's buffer (point_views): it lives from the final norm to the
     * head's loss, when no layer's n1 is live (the backward forms each layer's n1 again) */
}

/* A grouped adapter backward's workspace for group g (its dy side by side, group_stacked: the one
 * dB product's (Σ C_out, n·R) output). */
size_t group_workspace_bytes(const gpu_llama *m, int g) {
    int64_t c_all = 0;
    for (int i = 0; i < gl_group_n[g]; i++) c_all += m->layers[0].lin[gl_group_first[g] + i].c_out;
    return gpu_lora_group_backward_workspace_size((int)rows_of(m, gl_group_first[g]), gl_group_n[g], m->opt.R, c_all);
}

/* The one op workspace: the largest need of any op the step runs. */
size_t workspace_bytes(const gpu_llama *m) {
    const model_config *c = &m->cfg;
    const gpu_llama_options *o = &m->opt;
    const int N = m->N, full = o->mode == LLAMA_FULL, dora = o->mode == LLAMA_DORA;
    size_t ws = gpu_attention_backward_workspace_size(o->B, o->T, c->H);
    ws = max_sz(ws, gpu_rmsnorm_backward_workspace_size(N, c->C));
    ws = max_sz(ws, gpu_lm_head_ce_workspace_size(N, c->V, m->plan.ce_rows));
    for (int t = 0; t < LLAMA_N_LINEAR && !full; t++) {
        if (!gl_is_target(m, t)) continue;
        const gl_linear &lin = m->layers[0].lin[t];
        const int n = (int)rows_of(m, t);
        ws = max_sz(ws, gpu_lora_backward_workspace_size(n, lin.c_in, o->R, o->dropout > 0 ? LORA_MASKED : LORA_NO_MASK));
        if (dora) {
            ws = max_sz(ws, gpu_dora_weight_norm_workspace_size(lin.c_out, o->R));
            ws = max_sz(ws, gpu_dora_forward_workspace_size(n, lin.c_out, o->R));
            ws = max_sz(ws, gpu_dora_rescale_workspace_size(n, lin.c_out));
        }
    }
    for (int g = 0; g < GL_N_GROUPS; g++)
        if (m->grouped[g]) ws = max_sz(ws, group_workspace_bytes(m, g));
    if (dora && (gl_is_target(m, LLAMA_GATE) || gl_is_target(m, LLAMA_UP))) /* the fused SwiGLU + rescale */
        ws = max_sz(ws, gpu_dora_swiglu_backward_workspace_size((int)rows_of(m, LLAMA_GATE), c->F));
    return ws;
}

/* The weight-gradient stream's dB product buffer (gl_wg_side): the folded groups' need. */
size_t wg_workspace_bytes(const gpu_llama *m) {
    size_t ws = 0;
    for (int g = 0; g < GL_N_GROUPS; g++)
        if (m->folded[g]) ws = max_sz(ws, group_workspace_bytes(m, g));
    return ws;
}

/* Scratch: the backward's buffers (one layer at a time), DoRA's rescaled dy, dropout's masked
 * input and mask, the recomputed normalized inputs, and the op workspace. */
void scratch_rows(gpu_llama *m, gl_rows &rs) {
    const gpu_llama_options *o = &m->opt;
    const int64_t N = m->N, C = m->cfg.C, F = m->cfg.F;
    int64_t max_in = 0, dy_s = 0; /* the largest (rows at a time) × C_in of a target; DoRA's rescaled dy */
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        if (!gl_is_target(m, t)) continue;
        const gl_linear &lin = m->layers[0].lin[t];
        const int64_t r = rows_of(m, t);
        max_in = r * lin.c_in > max_in ? r * lin.c_in : max_in;
        /* gate and up are rescaled in place (gpu_dora_swiglu_backward_bf16); a grouped group's members
         * side by side (group_backward), every other target alone */
        const int g = group_of(t);
        int64_t need = r * lin.c_out;
        if (t == LLAMA_GATE || t == LLAMA_UP) need = 0;
        else if (g >= 0 && m->grouped[g])
            for (int i = 0; i < gl_group_n[g]; i++)
                if (gl_group_first[g] + i != t) need += r * m->layers[0].lin[gl_group_first[g] + i].c_out;
        dy_s = need > dy_s ? need : dy_s;
    }
    /* tmp (a layer forward's o and down outputs) and datt (a layer backward's attention-output
     * gradient) are one buffer: a layer's forward, recomputation included, ends before its backward
     * starts (point_views) */
    add(rs, SLAB_SCRATCH, &m->tmp, N * (C > m->ld_att ? C : m->ld_att)); /* datt: folded o's du after QD */
    add(rs, SLAB_SCRATCH, &m->G, N * C);
    add(rs, SLAB_SCRATCH, &m->dn, N * (m->ld_n1 > m->ld_n2 ? m->ld_n1 : m->ld_n2)); /* folded: du after C */
    add(rs, SLAB_SCRATCH, &m->dqkv, N * (m->QD + 2 * m->KD)); /* dq, dk, dv: point_views */
    add(rs, SLAB_SCRATCH, &m->dmlp, m->mlp_rows * F);
    add(rs, SLAB_SCRATCH, &m->dy_s, o->mode == LLAMA_DORA ? dy_s : 0);
    int64_t dora_w = 0; /* the largest group's scaled members' padded rows */
    for (int g = 0; g < GL_N_GROUPS; g++) {
        int64_t need = 0;
        for (int i = 0; i < gl_group_n[g]; i++) {
            const gl_linear &lin = m->layers[0].lin[gl_group_first[g] + i];
            if (gl_dora_weight_scaled(m, gl_group_first[g] + i)) need += (int64_t)lin.c_out * lin.ldw;
        }
        dora_w = need > dora_w ? need : dora_w;
    }
    add(rs, SLAB_SCRATCH, &m->dora_w, dora_w);
    add(rs, SLAB_SCRATCH, &m->x_drop, o->dropout > 0 ? max_in : 0);
    add(rs, SLAB_SCRATCH, &m->n1, N * m->ld_n1); /* folded: u after each row's C columns */
    add(rs, SLAB_SCRATCH, &m->n2, N * m->ld_n2);
    add(rs, SLAB_SCRATCH, &m->mlp_buf, m->opt.mlp_input == GPU_MLP_INPUT_RECOMPUTED ? m->mlp_rows * F : 0);
    add(rs, SLAB_SCRATCH, &m->h_buf, gl_keeps_o_out(m) ? N * C : 0);
    add(rs, SLAB_SCRATCH, &m->keep, o->dropout > 0 ? max_in : 0);
    m->plan.ce_rows =
        ce_chunk_rows(N, m->cfg.V, m->opt.recompute == RECOMPUTE_LAYER ? kCeChunkBytesLeast : kCeChunkBytes);
    add_row(rs, SLAB_SCRATCH, &m->ws, (int64_t)workspace_bytes(m), 1);
    add_row(rs, SLAB_SCRATCH, &m->wg_ws, m->wg_side ? (int64_t)wg_workspace_bytes(m) : 0, 1);
}

/* Fixed: the batch, positions, RoPE tables, a ones vector (bias gradients), the device scalars
 * (loss, norm, the step's Σ NLL) and the 8-bit optimizer's two maps. */
void fixed_rows(gpu_llama *m, gl_rows &rs) {
    const int64_t N = m->N, half = (int64_t)m->opt.T * m->cfg.D / 2;
    add(rs, SLAB_FIXED, &m->tokens, N);
    add(rs, SLAB_FIXED, &m->labels, N);
    add(rs, SLAB_FIXED, &m->pos, N);
    add(rs, SLAB_FIXED, &m->rope_cos, half);
    add(rs, SLAB_FIXED, &m->rope_sin, half);
    add(rs, SLAB_FIXED, &m->ones, N);
    add(rs, SLAB_FIXED, &m->loss_dev, 4); /* loss_dev[0], norm_dev = loss_dev + 2 */
    add(rs, SLAB_FIXED, &m->nll_acc, 1);
    add(rs, SLAB_FIXED, &m->map1, 512); /* map1, map2 = map1 + 256 */
    add(rs, SLAB_FIXED, &m->a8_tables, m->opt.optimizer == OPTIMIZER_ADAMW8BIT ? (int64_t)gpu_adamw8bit_tables_bytes() : 0);
    int slots = 0;
    for (int g = 0; g < GL_N_GROUPS; g++) slots += m->folded[g] ? gl_group_n[g] * m->cfg.L : 0;
    m->n_fold_slots = slots;
    add(rs, SLAB_FIXED, &m->fold_slots, slots);
}

/* The table of (config, options). */
gl_rows make_rows(gpu_llama *m) {
    gl_rows rs = {nullptr, 0, 0, 0, nullptr, 0, 0};
    m->n_params = 0;
    weight_rows(m, rs);
    adapter_rows(m, rs);
    for (int i = 0; i < rs.n_later; i++) append_row(rs.r, rs.n, rs.cap, rs.later[i]);
    free(rs.later);
    rs.later = nullptr, rs.n_later = rs.cap_later = 0;
    CHECK(m->n_params == m->cap_params, "layout: %d trainable tensors registered, %d counted", m->n_params,
          m->cap_params);
    if (gl_stage_shared(m)) { /* the slab must hold the largest master in fp32 (gl_take_staged) */
        int64_t total = 0, largest = 0;
        for (int i = 0; i < m->n_params; i++)
            total += m->params[i].n, largest = m->params[i].n > largest ? m->params[i].n : largest;
        if (4 * largest > 2 * total) add(rs, SLAB_GRADS, &m->stage_pad, 4 * largest - 2 * total);
    }
    fp8_rows(m, rs);
    gl_shard_rows(m, &rs, add_row_cb);
    activation_rows(m, rs);
    scratch_rows(m, rs);
    fixed_rows(m, rs);
    return rs;
}

/* Whether group g's weights lie stacked in every layer — each member's rows right after the one before,
 * at one row stride — for bf16 products: LoRA's folded groups (their padded base weights), and full
 * fine-tuning's bf16 copies (add_param places them side by side in every layout, the masters after
 * them: the sharded and unsharded models take the same products). Then q/k/v's input gradient is one
 * product over [dq │ dk │ dv], and gate/up's forward and input gradient are each one product over
 * [gate │ up] (gpu/llama.cu group_forward, group_backward; full fine-tuning's dW per member, from dy at
 * that stride). A bias between q, k and v (Qwen2's) breaks the stack: the three products then run one
 * by one over the packed gradients; gate/up's forward adds no bias, so neither of them may have one. */
bool group_stacked(const gpu_llama *m, int g) {
    const bool full = m->opt.mode == LLAMA_FULL && m->opt.linears == GPU_LINEAR_BF16;
    if (!full && (m->opt.mode != LLAMA_LORA || !m->folded[g] || !m->grouped[g])) return false;
    if (g == GL_GROUP_O) return false;
    for (int l = 0; l < m->cfg.L; l++) {
        const gl_linear *lin = m->layers[l].lin + gl_group_first[g];
        for (int i = 0; i < gl_group_n[g]; i++)
            if (!lin[i].w || ((full || g == GL_GROUP_GATE_UP) && lin[i].bias)) return false;
        for (int i = 0; i + 1 < gl_group_n[g]; i++)
            if (lin[i + 1].ldw != lin[i].ldw || lin[i + 1].w != lin[i].w + (int64_t)lin[i].c_out * lin[i].ldw)
                return false;
    }
    return true;
}

/* Whether group g's members' weight gradients lie side by side in every layer — each right after the
 * one before (add_param's rows: sharded gradients view rows laid out the same way) — for full
 * fine-tuning's stacked groups, whose dW is then one product (gpu/llama.cu group_backward). */
bool group_grads_stacked(const gpu_llama *m, int g) {
    if (m->opt.mode != LLAMA_FULL || !group_stacked(m, g)) return false;
    const size_t elem = gl_grads_bf16(m) ? 2 : 4;
    for (int l = 0; l < m->cfg.L; l++) {
        const gl_linear *lin = m->layers[l].lin + gl_group_first[g];
        for (int i = 0; i + 1 < gl_group_n[g]; i++)
            if (!lin[i].w_grad ||
                static_cast<const char *>(lin[i + 1].w_grad) !=
                    static_cast<const char *>(lin[i].w_grad) + (size_t)lin[i].c_out * lin[i].c_in * elem)
                return false;
    }
    return true;
}

/* Buffers that are views of others, once the rows point: the trainable tensors' pointers into the
 * model's fields, LoRA group slices, NF4 dequantization slices, the layers that share layer 0's
 * saved set, the tied lm_head, the scalars after loss_dev, the second 8-bit map and the attention's
 * input gradients dq, dk, dv in dqkv (side by side where group_stacked, else packed); each saved set's
 * up in its gate buffer (side by side with gate where group_stacked, else after it). */
void point_views(gpu_llama *m) {
    const model_config *c = &m->cfg;
    const int64_t R = m->opt.R;
    for (int l = 0; l < c->L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            const int g = group_of(t);
            if (!gl_is_target(m, t) || g < 0 || !m->grouped[g]) continue;
            gl_linear &lin = m->layers[l].lin[t];
            gl_param &a = m->params[lin.a_param];
            const int64_t at = (int64_t)(t - gl_group_first[g]) * R * lin.c_in;
            a.copy = m->layers[l].group_a[g] + at;
            a.grad = m->layers[l].group_da[g] + at;
        }
    if (m->shard_grads) { /* layer l ≥ 2's gradients: views of layer l − 2's rows (full fine-tuning) */
        const int per_layer = full_params_per_layer(c); /* the registry's tensors a layer */
        for (int i = 0; i < m->n_params; i++) {
            if (gl_layer_of(m->params[i].name) < 2) continue;
            const gl_param &twin = m->params[i - 2 * per_layer];
            CHECK(twin.n == m->params[i].n &&
                      strcmp(strchr(twin.name + 13, '.'), strchr(m->params[i].name + 13, '.')) == 0,
                  "layout: %s is not the twin of %s", twin.name, m->params[i].name);
            m->params[i].grad = twin.grad;
        }
    }
    for (int i = 0; i < m->n_params; i++) {
        gl_param &p = m->params[i];
        /* the staging of a load (gl_take_masters) */
        if (m->sharded) p.master = gl_grad_f32(m, p);
        else if (gl_master_in_copy(m))
            p.master = gl_stage_shared(m) ? reinterpret_cast<float *>(m->slab[SLAB_GRADS]) : gl_grad_f32(m, p);
        *p.dst_master = p.master;
        if (p.dst_copy) *p.dst_copy = p.copy;
        *p.dst_grad = p.grad;
    }
    if (m->opt.base == GPU_BASE_NF4 || m->opt.base == GPU_BASE_FP8 || gl_fp8_trained_per_layer(m))
        for (int l = 0; l < c->L; l++) {
            int64_t off = 0, off_w = 0;
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                gl_linear &lin = m->layers[l].lin[t];
                if (m->dq_buf) lin.w = m->dq_buf + off_w; /* NF4, FP8-stored: the layer's slices (folded: padded) */
                if (m->fp8.w8_buf) lin.w8 = m->fp8.w8_buf + off;
                if (m->fp8.wt8_buf) lin.w8_t = m->fp8.wt8_buf + off;
                off += (int64_t)lin.c_out * lin.c_in;
                off_w += (int64_t)lin.c_out * lin.ldw;
            }
        }
    /* a saved set's gate and up: one buffer (activation_rows), side by side in rows of ld_gu = 2F where
     * the gate/up group lies stacked, else up after gate's mlp_rows·F */
    m->ld_gu = group_stacked(m, GL_GROUP_GATE_UP) ? 2 * c->F : c->F;
    for (int l = 0; l < c->L; l++)
        if (m->acts[l].gate) m->acts[l].up = m->acts[l].gate + (m->ld_gu == c->F ? (int64_t)m->mlp_rows * c->F : c->F);
    if (m->opt.mlp_input == GPU_MLP_INPUT_RECOMPUTED)
        for (int l = 0; l < c->L; l++) m->acts[l].mlp = m->mlp_buf;
    if (gl_keeps_o_out(m))
        for (int l = 0; l < c->L; l++) m->acts[l].h = m->h_buf;
    for (int l = 1; l < c->L; l++) {
        gl_acts &s = m->acts[l];
        const gl_acts &z = m->acts[0];
        if (gl_keeps_set(m, l)) continue; /* its own set (activation_rows) */
        if (m->opt.recompute != RECOMPUTE_NONE) {
            s.q = z.q, s.k = z.k, s.v = z.v, s.att = z.att, s.lse = z.lse;
            for (int t = LLAMA_Q; t <= LLAMA_V; t++) s.u[t] = z.u[t], s.z[t] = z.z[t], s.wnorm[t] = z.wnorm[t];
            s.ug[GL_GROUP_QKV] = z.ug[GL_GROUP_QKV];
        }
        if (m->opt.recompute == RECOMPUTE_LAYER) {
            s.rstd1 = z.rstd1, s.h = z.h, s.o_out = z.o_out, s.rstd2 = z.rstd2;
            s.gate = z.gate, s.up = z.up, s.mlp = z.mlp;
            for (int t = LLAMA_O; t < LLAMA_N_LINEAR; t++) s.u[t] = z.u[t], s.z[t] = z.z[t], s.wnorm[t] = z.wnorm[t];
            s.ug[GL_GROUP_GATE_UP] = z.ug[GL_GROUP_GATE_UP];
            s.ug[GL_GROUP_O] = z.ug[GL_GROUP_O];
        }
    }
    if (m->opt.offload == GPU_OFFLOAD_INPUTS)
        for (int l = 0; l < c->L; l++) m->x[l] = m->x_ping[l % 2];
    if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
        m->lm_head_master = m->embed_master;
        m->lm_head_grad = m->embed_grad;
    }
    m->norm_dev = m->loss_dev + 2;
    m->map2 = m->map1 + 256;
    m->nf = m->n1;
    m->datt = m->tmp;
    const int64_t N = m->N;
    m->ld_dqkv = m->dqkv && group_stacked(m, GL_GROUP_QKV) ? m->QD + 2 * m->KD : 0;
    for (int g = 0; g < GL_N_GROUPS; g++) m->dw_one[g] = group_grads_stacked(m, g);
    m->dq = m->dqkv;
    m->dk = m->dqkv ? m->dqkv + (m->ld_dqkv ? m->QD : N * m->QD) : nullptr;
    m->dv = m->dk ? m->dk + (m->ld_dqkv ? m->KD : N * m->KD) : nullptr;
}

}  // namespace

const int gl_group_first[GL_N_GROUPS] = {LLAMA_Q, LLAMA_GATE, LLAMA_O}, gl_group_n[GL_N_GROUPS] = {3, 2, 1};

int gl_layer_of(const char *name) {
    int l = -1;
    return sscanf(name, "model.layers.%d.", &l) == 1 ? l : -1;
}

float *gl_grad_f32(const gpu_llama *m, const gl_param &p) {
    CHECK(!gl_grads_bf16(m), "%s: bf16 gradients where only fp32 ones are read (a combination the build refuses)",
          p.name);
    return static_cast<float *>(p.grad);
}

int gl_is_target(const gpu_llama *m, int t) { return m->opt.mode != LLAMA_FULL && ((m->opt.targets >> t) & 1u); }

int gl_keeps_set(const gpu_llama *m, int l) {
    return m->opt.recompute != RECOMPUTE_NONE && l >= m->cfg.L - m->opt.recompute_keep && l < m->cfg.L - 1;
}

int gl_keeps_o_out(const gpu_llama *m) {
    return m->opt.mode == LLAMA_DORA && gl_is_target(m, LLAMA_O) &&
           llama_dora_saved(&m->cfg, LLAMA_O) == DORA_SAVED_Y;
}

int gl_dora_weight_scaled(const gpu_llama *m, int t) {
    const int g = group_of(t);
    return m->opt.mode == LLAMA_DORA && g >= 0 && m->folded[g] && !has_bias(&m->cfg, t);
}

enum dora_saved gl_dora_saved(const gpu_llama *m, int t) {
    return gl_dora_weight_scaled(m, t) ? DORA_SAVED_Y : llama_dora_saved(&m->cfg, (enum llama_linear)t);
}

int gl_layout(gpu_llama *m, enum gl_layout_mode mode) {
    gl_rows rs = make_rows(m);
    size_t size[N_SLABS];
    unsigned char *none[N_SLABS] = {nullptr};
    place_rows(rs, none, size);
    gpu_llama_plan *pl = &m->plan;
    pl->weights = size[SLAB_WEIGHTS];
    pl->params = size[SLAB_PARAMS];
    pl->grads = size[SLAB_GRADS];
    pl->optim = size[SLAB_OPTIM];
    pl->acts = size[SLAB_ACTS];
    pl->scratch = size[SLAB_SCRATCH];
    m->fixed_slab = size[SLAB_FIXED];
    pl->fixed = size[SLAB_FIXED] + GEMM_DEFAULT_WORKSPACE * (m->wg_side ? 2 : 1) + rs.outside;
    pl->mlp_rows = m->mlp_rows;
    pl->total = pl->weights + pl->params + pl->grads + pl->optim + pl->acts + pl->scratch + pl->fixed;
    if (mode == GL_ALLOCATE) {
        for (int s = 0; s < N_SLABS; s++) {
            if (size[s] == 0) continue;
            if (cudaMalloc(&m->slab[s], size[s]) != cudaSuccess) {
                cudaGetLastError();
                free(rs.r);
                return -1; /* the caller frees the slabs allocated so far */
            }
            CUDA_CHECK(cudaMemset(m->slab[s], 0, size[s]));
        }
    } else if (mode == GL_POINT_HOST) { /* each slab at an address of its own, never dereferenced */
        for (int s = 0; s < N_SLABS; s++) m->slab[s] = reinterpret_cast<unsigned char *>((uintptr_t)(s + 1) << 40);
    }
    if (mode != GL_PLAN) {
        place_rows(rs, m->slab, size);
        point_views(m);
    }
    free(rs.r);
    return 0;
}

/* ---------------------------------------------------------------- plan */

/* Rows of the MLP at a time: --mlp-chunk, or the whole micro-batch (B·T). */
static int64_t mlp_rows_of(const gpu_llama_options *o) {
    const int64_t n = (int64_t)o->B * o->T;
    return o->mlp_chunk > 0 && o->mlp_chunk < n ? o->mlp_chunk : n;
}

/* The widest activation of (c, o) as (rows, width): (B·T, hidden size or query heads), or the
 * MLP's (its rows at a time, F) when that one holds more elements. */
static void widest_activation(const model_config *c, const gpu_llama_options *o, int64_t *rows, int64_t *width) {
    const int64_t n = (int64_t)o->B * o->T, w = c->C > (int64_t)c->H * c->D ? c->C : (int64_t)c->H * c->D;
    const int64_t r = mlp_rows_of(o);
    if (r * c->F > n * w) *rows = r, *width = c->F;
    else *rows = n, *width = w;
}

/* The widest activations within 2^31 elements, what the elementwise kernels are verified at. */
extern "C" int gpu_llama_size_verified(const model_config *c, const gpu_llama_options *o) {
    int64_t rows, width;
    widest_activation(c, o, &rows, &width);
    return rows * width <= INT32_MAX;
}

extern "C" int gpu_llama_mlp_input_free(const gpu_llama_options *o) {
    return (o->linears == GPU_LINEAR_BF16 && (o->mode == LLAMA_FULL || gl_lora_down_joined(o))) ||
           gl_fp8_inputs_kept(o); /* the backward reads the kept codes, not the input */
}

extern "C" int gpu_llama_mlp_chunks_supported(const gpu_llama_options *o) {
    return !(o->linears == GPU_LINEAR_FP8 && o->fp8_recipe == FP8_RECIPE_CURRENT);
}

static int check_options(const model_config *c, const gpu_llama_options *o, io_err *e) {
    if (o->B < 1 || o->T < 1) return io_fail(e, "micro-batch %d × sequence %d: both must be ≥ 1", o->B, o->T);
    if ((int64_t)o->B * o->T > INT32_MAX / 2)
        return io_fail(e, "micro-batch %d × sequence %d: too many tokens for one micro-batch", o->B, o->T);
    if (c->D != 16 && c->D != 32 && c->D != 64 && c->D != 128)
        return io_fail(e, "head_dim %d: the GPU attention supports 16, 32, 64 and 128", c->D);
    if (!gpu_llama_size_verified(c, o)) {
        int64_t rows, width;
        widest_activation(c, o, &rows, &width);
        gpu_llama_options chunked = *o; /* would chunks of 4096 bring it within the bound? */
        chunked.mlp_chunk = 4096;
        return io_fail(e, "micro-batch %d × sequence %d: an activation of more than 2^31 elements (%lld × %lld), "
                          "beyond what the GPU kernels are verified at; shorten --seq or --micro-batch%s",
                       o->B, o->T, (long long)rows, (long long)width,
                       gpu_llama_size_verified(c, &chunked)
                           ? ", or run the MLP in chunks (--recompute layer --mlp-chunk 4096)"
                           : "");
    }
    if (!((c->C % 8 == 0 && c->C <= 8192) || c->C <= 1024))
        return io_fail(e, "hidden_size %d: the GPU RMSNorm takes multiples of 8 up to 8192, or up to 1024", c->C);
    if (o->mode != LLAMA_FULL && o->R < 1) return io_fail(e, "adapter rank %d must be ≥ 1", o->R);
    if (o->base == GPU_BASE_NF4 && o->mode == LLAMA_FULL) return io_fail(e, "an NF4 base cannot be fully fine-tuned");
    if (o->dropout > 0 && o->mode != LLAMA_LORA)
        return io_fail(e, "--dropout %g: adapter dropout is implemented for LoRA and QLoRA (not DoRA, not full)",
                       (double)o->dropout);
    if (o->mode != LLAMA_FULL && (o->targets & LLAMA_ALL_TARGETS) == 0)
        return io_fail(e, "nothing to train: --targets selects no linear layer");
    if (o->base == GPU_BASE_FP8 && o->mode == LLAMA_FULL)
        return io_fail(e, "an FP8-stored base cannot be fully fine-tuned");
    if (o->linears == GPU_LINEAR_FP8) {
        /* cuBLASLt's FP8 GEMMs take dimensions that are multiples of 16 (gpu/gemm.h) */
        const int64_t dims[5] = {(int64_t)o->B * o->T, c->C, c->F, (int64_t)c->H * c->D, (int64_t)c->KVH * c->D};
        const char *what[5] = {"micro-batch × sequence", "hidden_size", "intermediate_size", "heads × head_dim",
                               "kv heads × head_dim"};
        for (int i = 0; i < 5; i++)
            if (dims[i] % 16 != 0)
                return io_fail(e, "--precision fp8: %s is %lld; the FP8 GEMMs need multiples of 16", what[i],
                               (long long)dims[i]);
    }
    if (o->mlp_chunk < 0 || o->mlp_chunk % 64 != 0)
        return io_fail(e, "--mlp-chunk %d: the MLP's token chunk is a multiple of 64 rows (0: the whole micro-batch)",
                       o->mlp_chunk);
    if (o->mlp_chunk > 0 && o->mlp_chunk < (int64_t)o->B * o->T) {
        const char *why = o->recompute != RECOMPUTE_LAYER ? "needs --recompute layer (otherwise every layer keeps "
                                                            "its whole gate and up)"
                          : !gpu_llama_mlp_chunks_supported(o)
                              ? "is not implemented with --fp8-recipe current (its scales are of the whole "
                                "micro-batch's tensors; delayed and block run in chunks)"
                          : o->linears == GPU_LINEAR_FP8 && o->fp8_recipe == FP8_RECIPE_BLOCK && o->mlp_chunk % 128
                              ? "with --fp8-recipe block is a multiple of 128 rows (the transposed copies' 1x128 "
                                "blocks run along the tokens)"
                              : NULL;
        if (why) return io_fail(e, "--mlp-chunk %d %s", o->mlp_chunk, why);
    }
    if (o->keep_norms && o->recompute != RECOMPUTE_NONE)
        return io_fail(e, "--keep-norms with --recompute %s: the recomputation forms each layer's normalized inputs "
                          "again anyway; keep them without recomputation",
                       o->recompute == RECOMPUTE_LAYER ? "layer" : "attn");
    if (o->recompute_keep < 0 || (o->recompute_keep > 0 && o->recompute == RECOMPUTE_NONE))
        return io_fail(e, "--recompute-keep %d: the layers kept from recomputation need --recompute layer or attn",
                       o->recompute_keep);
    if (o->recompute_keep >= c->L)
        return io_fail(e, "--recompute-keep %d: fewer than the model's %d layers (layer 0's set is the one the "
                          "recomputed layers share; without recomputation use --recompute none)",
                       o->recompute_keep, c->L);
    if (o->recompute_keep > 1 && o->mlp_chunk > 0 && o->mlp_chunk < (int64_t)o->B * o->T)
        return io_fail(e, "--recompute-keep %d with --mlp-chunk %d: a kept layer holds its whole gate and up; use one "
                          "of the two",
                       o->recompute_keep, o->mlp_chunk);
    if (o->shard_world > 1 && o->mode != LLAMA_FULL)
        return io_fail(e, "the sharded optimizer is for full fine-tuning (adapters' optimizer state is small)");
    if (o->master != MASTER_FP32 && o->mode != LLAMA_FULL)
        return io_fail(e, "%s masters are for full fine-tuning (an adapter's fp32 masters are small)",
                       master_storage_names[o->master]);
    if (o->master != MASTER_FP32 && o->shard_world > 1)
        return io_fail(e, "--master %s and the sharded optimizer do not go together: the sharded optimizer "
                          "keeps each rank's fp32 masters (use --master fp32, or --shard-optimizer off)",
                       master_storage_names[o->master]);
    if (o->shard_world > 1 && (o->shard_rank < 0 || o->shard_rank >= o->shard_world))
        return io_fail(e, "shard rank %d of %d", o->shard_rank, o->shard_world);
    if (o->shard_grads && o->shard_world <= 1)
        return io_fail(e, "sharded gradients (ZeRO-2) need the optimizer sharded over two or more ranks");
    if (o->grads == GRAD_BF16 && o->mode != LLAMA_FULL)
        return io_fail(e, "bf16 gradients are for full fine-tuning (an adapter's gradients are small)");
    if (o->grads == GRAD_BF16 && o->shard_world > 1)
        return io_fail(e, "bf16 gradients and the sharded optimizer do not go together yet (it reduces and reads "
                          "fp32 gradients): use --grad-dtype fp32 with several GPUs");
    return 0;
}

static void init_shape(gpu_llama *m, const model_config *c, const gpu_llama_options *o) {
    m->cfg = *c;
    m->opt = *o;
    m->N = o->B * o->T;
    m->mlp_rows = (int)mlp_rows_of(o);
    m->QD = c->H * c->D;
    m->KD = c->KVH * c->D;
    m->sharded = o->shard_world > 1;
    m->shard_grads = m->sharded && o->shard_grads;
    for (int g = 0; g < GL_N_GROUPS; g++) {
        int all = (o->mode == LLAMA_LORA || o->mode == LLAMA_DORA) && !(o->dropout > 0) &&
                  o->grouping == GPU_LORA_GROUPED;
        for (int i = 0; i < gl_group_n[g]; i++) all = all && gl_is_target(m, gl_group_first[g] + i);
        m->grouped[g] = all;
        m->folded[g] = all && (o->base == GPU_BASE_BF16 || o->base == GPU_BASE_NF4) &&
                       o->linears == GPU_LINEAR_BF16 && o->folding == GPU_LORA_FOLDED;
        /* o, a group of one: folded LoRA only (DoRA's o keeps its output: gl_keeps_o_out) */
        if (g == GL_GROUP_O) m->folded[g] = m->grouped[g] = m->folded[g] && o->mode == LLAMA_LORA;
    }
    /* the folded groups' dB and dA on their own stream: LoRA with nothing recomputed, the MLP whole,
     * nothing offloaded and no op timing (which times the step's stream alone); REFINE_WG_STREAM=0
     * keeps them on the step's stream (the same bits either way) */
    const char *wg = getenv("REFINE_WG_STREAM");
    m->wg_side = o->mode == LLAMA_LORA && (m->folded[GL_GROUP_QKV] || m->folded[GL_GROUP_O] || m->folded[GL_GROUP_GATE_UP]) &&
                 o->recompute == RECOMPUTE_NONE && m->mlp_rows == m->N && o->offload == GPU_OFFLOAD_NONE &&
                 o->profile == GPU_PROFILE_OFF && !(wg && strcmp(wg, "0") == 0);
    m->ld_n1 = fold_ld(c->C, m->folded[GL_GROUP_QKV] ? gl_group_n[GL_GROUP_QKV] * o->R : 0);
    m->ld_n2 = fold_ld(c->C, m->folded[GL_GROUP_GATE_UP] ? gl_group_n[GL_GROUP_GATE_UP] * o->R : 0);
    m->ld_att = fold_ld(m->QD, m->folded[GL_GROUP_O] ? o->R : 0);
}

/* The host tables the layout's rows point into: layers, saved sets, layer inputs, trainable
 * tensors (count_params of them). */
static void alloc_tables(gpu_llama *m) {
    const int L = m->cfg.L;
    m->cap_params = count_params(m);
    m->layers = static_cast<gl_layer *>(calloc((size_t)L, sizeof(gl_layer)));
    m->acts = static_cast<gl_acts *>(calloc((size_t)L, sizeof(gl_acts)));
    m->x = static_cast<uint16_t **>(calloc((size_t)L + 1, sizeof(uint16_t *)));
    m->params = static_cast<gl_param *>(calloc((size_t)(m->cap_params > 0 ? m->cap_params : 1), sizeof(gl_param)));
    CHECK(m->layers && m->acts && m->x && m->params, "out of host memory for the model's tables");
}

static void free_tables(gpu_llama *m) {
    free(m->pieces);
    free(m->piece_boff);
    free(m->piece_soff);
    free(m->layers);
    free(m->acts);
    free(m->x);
    free(m->params);
}

extern "C" int gpu_llama_plan_bytes(gpu_llama_plan *p, const model_config *c, const gpu_llama_options *o, io_err *e) {
    if (check_options(c, o, e)) return -1;
    gpu_llama m;
    memset(&m, 0, sizeof m);
    init_shape(&m, c, o);
    alloc_tables(&m);
    gl_layout(&m, GL_PLAN);
    free_tables(&m);
    *p = m.plan;
    return 0;
}

extern "C" int gpu_llama_layout_stacking(const model_config *c, const gpu_llama_options *o, int *bits, io_err *e) {
    if (check_options(c, o, e)) return -1;
    gpu_llama m;
    memset(&m, 0, sizeof m);
    init_shape(&m, c, o);
    alloc_tables(&m);
    gl_layout(&m, GL_POINT_HOST); /* the rows and views as allocation places them */
    *bits = (m.ld_dqkv ? 1 : 0) | (m.ld_gu == 2 * (int64_t)c->F ? 2 : 0) | (m.dw_one[GL_GROUP_QKV] ? 4 : 0) |
            (m.dw_one[GL_GROUP_GATE_UP] ? 8 : 0);
    for (int s = 0; s < N_SLABS; s++) m.slab[s] = nullptr;
    free_tables(&m);
    return 0;
}

extern "C" void gpu_llama_plan_describe(char *buf, size_t cap, const gpu_llama_plan *p, int B, int T) {
    const double G = 1024.0 * 1024.0 * 1024.0;
    int k = snprintf(buf, cap,
                     "memory plan for micro-batch %d × %d: %.2f GiB = weights %.2f + parameters %.2f + gradients "
                     "%.2f + optimizer %.2f + activations %.2f + scratch %.2f + fixed %.2f",
                     B, T, p->total / G, p->weights / G, p->params / G, p->grads / G, p->optim / G, p->acts / G,
                     p->scratch / G, p->fixed / G);
    if (p->host > 0 && k > 0 && (size_t)k < cap)
        k += snprintf(buf + k, cap - (size_t)k, "; layer inputs offloaded to %.2f GiB of pinned host memory",
                      p->host / G);
    if (p->mlp_rows > 0 && (int64_t)p->mlp_rows < (int64_t)B * T && k > 0 && (size_t)k < cap)
        snprintf(buf + k, cap - (size_t)k, "; the MLP in chunks of %d rows", p->mlp_rows);
}

extern "C" void gpu_llama_plan_json_fields(char *buf, size_t cap, const gpu_llama_plan *p, int digits) {
    const double G = 1024.0 * 1024.0 * 1024.0;
    const int d = digits;
    snprintf(buf, cap,
             "\"weights\":%.*f,\"params\":%.*f,\"grads\":%.*f,\"optim\":%.*f,\"acts\":%.*f,\"scratch\":%.*f,"
             "\"fixed\":%.*f",
             d, p->weights / G, d, p->params / G, d, p->grads / G, d, p->optim / G, d, p->acts / G, d, p->scratch / G,
             d, p->fixed / G);
}

extern "C" int gpu_device_check_fp8(io_err *e) {
    cudaDeviceProp prop;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return io_fail(e, "no CUDA device is available; --precision fp8 needs a GPU with FP8 tensor cores");
    }
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major * 10 + prop.minor < 89)
        return io_fail(e, "--precision fp8: %s has compute capability %d.%d; FP8 tensor cores need 8.9 or newer (L4, "
                          "L40, H100, H200)",
                       prop.name, prop.major, prop.minor);
    return 0;
}

extern "C" int gpu_device_query(char *name, size_t cap, size_t *free_bytes, size_t *total_bytes, io_err *e) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        cudaGetLastError();
        return io_fail(e, "no CUDA device is available (%s); //gpu:train needs an NVIDIA GPU — on a machine without "
                          "one, //ref:train trains on the CPU with the same flags",
                       err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    }
    cudaDeviceProp prop;
    int dev = 0; /* the current device: a job's rank has chosen its own */
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    if (prop.major < 8)
        return io_fail(e, "%s has compute capability %d.%d; refine's kernels need 8.0 or newer (A100, H100)",
                       prop.name, prop.major, prop.minor);
    if (name) snprintf(name, cap, "%s", prop.name);
    size_t fr = 0, to = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &to));
    if (free_bytes) *free_bytes = fr;
    if (total_bytes) *total_bytes = to;
    return 0;
}

/* ---------------------------------------------------------------- build */

static void register_tensors(gpu_llama *m) {
    int n = 0;
    /* a parameter and at most four tensors of optimizer state each, and the FP8 state */
    m->tensors = static_cast<gl_tensor *>(calloc((size_t)m->n_params * 5 + 3, sizeof(gl_tensor)));
    CHECK(m->tensors != nullptr, "out of host memory");
    auto add = [&](int pi, const char *suffix, int role, int u8, void *dev, int64_t numel) {
        const gl_param &p = m->params[pi];
        gl_tensor &t = m->tensors[n++];
        const int k = snprintf(t.info.name, sizeof t.info.name, "%s%s", p.name, suffix);
        CHECK(k > 0 && k < (int)sizeof t.info.name, "tensor name too long: %s%s", p.name, suffix);
        t.info.role = role;
        t.info.is_u8 = u8;
        t.info.numel = numel;
        if (numel == p.n) {
            t.info.ndim = p.ndim;
            t.info.shape[0] = p.shape[0];
            t.info.shape[1] = p.shape[1];
        } else {
            t.info.ndim = 1;
            t.info.shape[0] = numel;
        }
        t.dev = dev;
        t.param = pi;
    };
    for (int i = 0; i < m->n_params; i++) add(i, "", 0, 0, m->params[i].master, m->params[i].n);
    for (int i = 0; i < m->n_params; i++) {
        const gl_param &p = m->params[i];
        if (p.is_8bit) {
            const int64_t nb = adamw8bit_n_blocks(p.n);
            add(i, ".state1", 1, 1, p.q1, p.n);
            add(i, ".state2", 1, 1, p.q2, p.n);
            add(i, ".absmax1", 1, 0, p.absmax1, nb);
            add(i, ".absmax2", 1, 0, p.absmax2, nb);
        } else {
            add(i, ".exp_avg", 1, 0, p.m, p.n);
            add(i, ".exp_avg_sq", 1, 0, p.v, p.n);
        }
    }
    if (m->fp8.on && m->opt.fp8_recipe == FP8_RECIPE_DELAYED) { /* ref/llama.h's rows: engine state */
        const gl_fp8 &F = m->fp8;
        const struct {
            const char *name;
            float *dev;
            int ndim;
            int64_t d0, d1;
        } st[2] = {{"fp8.amax_history", F.history, 2, F.n, F.history_len}, {"fp8.scale", F.scale, 1, F.n, 0}};
        for (int k = 0; k < 2; k++) {
            gl_tensor &t = m->tensors[n++];
            snprintf(t.info.name, sizeof t.info.name, "%s", st[k].name);
            t.info.role = 2;
            t.info.ndim = st[k].ndim;
            t.info.shape[0] = st[k].d0;
            t.info.shape[1] = st[k].d1;
            t.info.numel = st[k].ndim == 2 ? st[k].d0 * st[k].d1 : st[k].d0;
            t.dev = st[k].dev;
            t.param = -1;
        }
    }
    m->n_tensors = n;
}

/* The FP8 state's first values: delayed scaling's scales 1 (TE's), every GEMM scale 1. */
static void init_fp8(gpu_llama *m) {
    gl_fp8 &F = m->fp8;
    F.on = m->opt.linears == GPU_LINEAR_FP8;
    F.state = F.on || m->opt.base == GPU_BASE_FP8;
    F.recording = FP8_RECORD;
    F.w8_layer = F.wt8_layer = F.failed_row = -1;
    if (!F.state) return;
    float *ones = static_cast<float *>(malloc(sizeof(float) * 4 * (size_t)F.n));
    CHECK(ones != nullptr, "out of host memory");
    for (int i = 0; i < 4 * F.n; i++) ones[i] = 1.0f;
    CUDA_CHECK(cudaMemcpy(F.scale, ones, sizeof(float) * (size_t)F.n, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(F.scale_inv, ones, sizeof(float) * (size_t)F.n, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(F.sinv16, ones, sizeof(float) * 4 * (size_t)F.n, cudaMemcpyHostToDevice));
    free(ones);
    CUDA_CHECK(cudaMallocHost(&F.h_summary, sizeof(gl_fp8_summary)));
    memset(F.h_summary, 0, sizeof(gl_fp8_summary));
}

static void upload_fixed(gpu_llama *m) {
    const model_config *c = &m->cfg;
    const int N = m->N, T = m->opt.T, hd = c->D / 2;
    int32_t *pos = static_cast<int32_t *>(malloc((size_t)N * sizeof(int32_t)));
    uint16_t *ones = static_cast<uint16_t *>(malloc((size_t)N * sizeof(uint16_t)));
    uint16_t *cs = static_cast<uint16_t *>(malloc((size_t)T * hd * 2 * sizeof(uint16_t)));
    CHECK(pos && ones && cs, "out of host memory");
    for (int n = 0; n < N; n++) pos[n] = n % T, ones[n] = bf16_from_float(1.0f);
    struct ref_rope_cache rope;
    ref_rope_cache_build(&rope, T, c->D, c->rope_theta, &c->rope_scaling);
    bf16_from_float_array(cs, rope.cos, (int64_t)T * hd);
    bf16_from_float_array(cs + (size_t)T * hd, rope.sin, (int64_t)T * hd);
    ref_rope_cache_free(&rope);
    CUDA_CHECK(cudaMemcpy(m->pos, pos, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(m->ones, ones, (size_t)N * sizeof(uint16_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(m->rope_cos, cs, (size_t)T * hd * sizeof(uint16_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(m->rope_sin, cs + (size_t)T * hd, (size_t)T * hd * sizeof(uint16_t), cudaMemcpyHostToDevice));
    float maps[512];
    quant8_dynamic_map(maps, 1);
    quant8_dynamic_map(maps + 256, 0);
    CUDA_CHECK(cudaMemcpy(m->map1, maps, sizeof maps, cudaMemcpyHostToDevice));
    if (m->opt.optimizer == OPTIMIZER_ADAMW8BIT) {
        gpu_adamw8bit_tables_build(m->a8_tables, m->map1, m->map2, m->stream);
        CUDA_CHECK(cudaStreamSynchronize(m->stream));
    }
    free(pos);
    free(ones);
    free(cs);
}

void gl_take_masters(gpu_llama *m) {
    if (!m->sharded && !gl_master_in_copy(m)) return;
    if (m->sharded) {
        gl_shard_keep_pieces(m, m->shard_grads ? GL_KEEP_OUTSIDE_LAYERS : GL_KEEP_ALL);
    } else if (!gl_stage_shared(m)) { /* shared staging: each tensor was taken as it was written */
        for (int i = 0; i < m->n_params; i++) {
            const gl_param &p = m->params[i]; /* p.master: the staging in the gradient slab */
            gpu_master_pair_split(p.copy, p.lo, p.master, p.n, m->stream);
        }
    }
    CUDA_CHECK(cudaMemsetAsync(m->slab[SLAB_GRADS], 0, m->plan.grads, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

void gl_take_staged(gpu_llama *m, const uint16_t *copy) {
    if (!gl_stage_shared(m)) return;
    for (int i = 0; i < m->n_params; i++) {
        const gl_param &p = m->params[i];
        if (p.copy != copy) continue;
        gpu_master_pair_split(p.copy, p.lo, p.master, p.n, m->stream);
        CUDA_CHECK(cudaStreamSynchronize(m->stream)); /* before the next tensor overwrites the staging */
        return;
    }
    CHECK(false, "layout: the staged master's copy belongs to no trainable tensor");
}

void gl_take_layer_masters(gpu_llama *m, int l) {
    if (!m->shard_grads) return;
    gl_shard_keep_pieces(m, l);
    CUDA_CHECK(cudaStreamSynchronize(m->stream)); /* before the next load writes the staging */
}

static void build_optimizer(gpu_llama *m) {
    if (m->sharded) {
        m->adamw = gl_shard_build_optimizer(m);
        return;
    }
    gpu_adamw_param *ps = static_cast<gpu_adamw_param *>(calloc((size_t)m->n_params, sizeof(gpu_adamw_param)));
    CHECK(ps != nullptr, "out of host memory");
    /* the 8-bit optimizer uses this context for the global norm only: no state to update */
    const int adamw = m->opt.optimizer == OPTIMIZER_ADAMW, in_copy = gl_master_in_copy(m);
    for (int i = 0; i < m->n_params; i++) {
        const gl_param &p = m->params[i];
        gpu_adamw_param &q = ps[i]; /* zeroed by calloc */
        q.master = adamw && !in_copy ? p.master : nullptr;
        q.copy = adamw ? p.copy : nullptr;
        q.m = adamw ? p.m : nullptr;
        q.v = adamw ? p.v : nullptr;
        if (gl_grads_bf16(m)) q.grad_bf16 = static_cast<const uint16_t *>(p.grad);
        else q.grad = static_cast<const float *>(p.grad);
        q.n = p.n;
        q.decay = 1;
        q.lo = adamw ? p.lo : nullptr; /* split masters' (NULL otherwise) */
        q.master_bf16 = adamw ? gl_master_bf16(m) : 0;
        q.sr_seed = m->opt.seed;
        q.sr_tensor = bf16_sr_tensor_hash(p.name);
    }
    for (int i = 0; i < m->n_params && gl_master_bf16(m) == 2; i++) /* distinct streams */
        for (int j = 0; j < i; j++)
            CHECK(ps[i].sr_tensor != ps[j].sr_tensor, "layout: %s and %s share a stochastic-rounding stream",
                  m->params[i].name, m->params[j].name);
    m->adamw = build_gpu_adamw(ps, m->n_params);
    free(ps);
}

/* The folded linears' slots (gpu/lora.h): where each one's bf16(s·B) goes, from which B. */
static void upload_fold_slots(gpu_llama *m) {
    if (!m->n_fold_slots) return;
    lora_fold_slot *h = static_cast<lora_fold_slot *>(calloc((size_t)m->n_fold_slots, sizeof(lora_fold_slot)));
    CHECK(h != nullptr, "out of host memory");
    int k = 0;
    for (int l = 0; l < m->cfg.L; l++)
        for (int g = 0; g < GL_N_GROUPS; g++) {
            if (!m->folded[g]) continue;
            for (int i = 0; i < gl_group_n[g]; i++) {
                const gl_linear &lin = m->layers[l].lin[gl_group_first[g] + i];
                h[k++] = lora_fold_slot{lin.w + lin.c_in + (int64_t)i * m->opt.R, lin.ldw, lin.b, lin.c_out};
                if (lin.c_out > m->fold_max_c_out) m->fold_max_c_out = lin.c_out;
            }
        }
    CHECK(k == m->n_fold_slots, "layout: %d fold slots filled, %d counted", k, m->n_fold_slots);
    CUDA_CHECK(cudaMemcpy(m->fold_slots, h, (size_t)k * sizeof(lora_fold_slot), cudaMemcpyHostToDevice));
    free(h);
}

extern "C" gpu_llama *build_gpu_llama(const model_config *c, const gpu_llama_options *o, io_err *e) {
    if (check_options(c, o, e)) return nullptr;
    gpu_llama *m = static_cast<gpu_llama *>(calloc(1, sizeof(gpu_llama)));
    CHECK(m != nullptr, "out of host memory");
    init_shape(m, c, o);
    alloc_tables(m);
    if (gl_layout(m, GL_ALLOCATE) != 0) {
        char plan[512];
        gpu_llama_plan_describe(plan, sizeof plan, &m->plan, o->B, o->T);
        free_gpu_llama(m);
        return io_fail(e, "out of GPU memory allocating the model (%s)", plan), nullptr;
    }
    init_fp8(m);
    register_tensors(m);
    m->dq_layer = -1;
    m->dora_w_key = -1;
    const char *graphs = getenv("REFINE_CUDA_GRAPHS"); /* the training micro-steps (gpu/llama.cu) */
    m->use_graphs = !(graphs && strcmp(graphs, "0") == 0);
    CUDA_CHECK(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    m->gemm = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
    if (m->wg_side) {
        m->wg_gemm = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
        CUDA_CHECK(cudaStreamCreateWithFlags(&m->wg_stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&m->wg_fork, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&m->wg_done, cudaEventDisableTiming));
    }
    build_optimizer(m);
    upload_fixed(m);
    upload_fold_slots(m);
    CUDA_CHECK(cudaMallocHost(&m->h_tokens, 2 * (size_t)m->N * sizeof(int32_t)));
    CUDA_CHECK(cudaMallocHost(&m->h_labels, 2 * (size_t)m->N * sizeof(int32_t)));
    CUDA_CHECK(cudaMallocHost(&m->h_scalars, 4 * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&m->h_nll, sizeof(double)));
    if (o->offload == GPU_OFFLOAD_INPUTS) {
        if (cudaMallocHost(&m->x_host, m->plan.host) != cudaSuccess) {
            cudaGetLastError();
            m->x_host = nullptr;
            free_gpu_llama(m);
            return io_fail(e, "--offload: cannot pin %.2f GiB of host memory for the layer inputs",
                           m->plan.host / (1024.0 * 1024.0 * 1024.0)),
                   nullptr;
        }
        CUDA_CHECK(cudaStreamCreateWithFlags(&m->copy_stream, cudaStreamNonBlocking));
        cudaEvent_t **evs[3] = {&m->x_out, &m->x_in, &m->x_free};
        for (cudaEvent_t **ev : evs) {
            *ev = static_cast<cudaEvent_t *>(calloc((size_t)c->L, sizeof(cudaEvent_t)));
            CHECK(*ev != nullptr, "out of host memory");
            for (int l = 0; l < c->L; l++) CUDA_CHECK(cudaEventCreateWithFlags(&(*ev)[l], cudaEventDisableTiming));
        }
    }
    for (int i = 0; i < 2; i++) CUDA_CHECK(cudaEventCreateWithFlags(&m->staged[i], cudaEventDisableTiming));
    if (o->optimizer == OPTIMIZER_ADAMW8BIT) {
        CUDA_CHECK(cudaEventCreateWithFlags(&m->opt_fork, cudaEventDisableTiming));
        for (int k = 0; k < GL_OPT_SIDE; k++) {
            CUDA_CHECK(cudaStreamCreateWithFlags(&m->opt_side[k], cudaStreamNonBlocking));
            CUDA_CHECK(cudaEventCreateWithFlags(&m->opt_join[k], cudaEventDisableTiming));
        }
    }
    CUDA_CHECK(cudaEventCreate(&m->t_begin));
    CUDA_CHECK(cudaEventCreate(&m->t_end));
    if (o->profile == GPU_PROFILE_OPS) {
        m->prof_cap = 16384;
        m->prof_ev = static_cast<cudaEvent_t *>(calloc((size_t)m->prof_cap * 2, sizeof(cudaEvent_t)));
        m->prof_cat = static_cast<int *>(calloc((size_t)m->prof_cap, sizeof(int)));
        CHECK(m->prof_ev && m->prof_cat, "out of host memory");
        for (int i = 0; i < 2 * m->prof_cap; i++) CUDA_CHECK(cudaEventCreate(&m->prof_ev[i]));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    return m;
}

extern "C" void free_gpu_llama(gpu_llama *m) {
    if (!m) return;
    if (m->stream) CUDA_CHECK(cudaStreamSynchronize(m->stream));
    if (m->wg_stream) CUDA_CHECK(cudaStreamSynchronize(m->wg_stream));
    for (int s = 0; s < N_SLABS; s++)
        if (m->slab[s]) CUDA_CHECK(cudaFree(m->slab[s]));
    if (m->gemm) free_gpu_gemm(m->gemm);
    if (m->wg_stream) CUDA_CHECK(cudaStreamDestroy(m->wg_stream));
    if (m->wg_gemm) free_gpu_gemm(m->wg_gemm);
    if (m->wg_fork) CUDA_CHECK(cudaEventDestroy(m->wg_fork));
    if (m->wg_done) CUDA_CHECK(cudaEventDestroy(m->wg_done));
    if (m->adamw) free_gpu_adamw(m->adamw);
    for (int i = 0; i < m->n_graphs; i++)
        if (m->graphs[i].exec) CUDA_CHECK(cudaGraphExecDestroy(m->graphs[i].exec));
    if (m->h_tokens) CUDA_CHECK(cudaFreeHost(m->h_tokens));
    if (m->h_labels) CUDA_CHECK(cudaFreeHost(m->h_labels));
    if (m->h_scalars) CUDA_CHECK(cudaFreeHost(m->h_scalars));
    if (m->h_nll) CUDA_CHECK(cudaFreeHost(m->h_nll));
    if (m->fp8.h_summary) CUDA_CHECK(cudaFreeHost(m->fp8.h_summary));
    for (int i = 0; i < 2; i++)
        if (m->staged[i]) CUDA_CHECK(cudaEventDestroy(m->staged[i]));
    if (m->t_begin) CUDA_CHECK(cudaEventDestroy(m->t_begin));
    if (m->t_end) CUDA_CHECK(cudaEventDestroy(m->t_end));
    for (int k = 0; k < GL_OPT_SIDE; k++) {
        if (m->opt_side[k]) CUDA_CHECK(cudaStreamSynchronize(m->opt_side[k]));
        if (m->opt_side[k]) CUDA_CHECK(cudaStreamDestroy(m->opt_side[k]));
        if (m->opt_join[k]) CUDA_CHECK(cudaEventDestroy(m->opt_join[k]));
    }
    if (m->opt_fork) CUDA_CHECK(cudaEventDestroy(m->opt_fork));
    if (m->prof_ev)
        for (int i = 0; i < 2 * m->prof_cap; i++) CUDA_CHECK(cudaEventDestroy(m->prof_ev[i]));
    if (m->stream) CUDA_CHECK(cudaStreamDestroy(m->stream));
    if (m->copy_stream) CUDA_CHECK(cudaStreamSynchronize(m->copy_stream));
    cudaEvent_t *evs[3] = {m->x_out, m->x_in, m->x_free};
    for (cudaEvent_t *ev : evs) {
        if (!ev) continue;
        for (int l = 0; l < m->cfg.L; l++)
            if (ev[l]) CUDA_CHECK(cudaEventDestroy(ev[l]));
        free(ev);
    }
    if (m->copy_stream) CUDA_CHECK(cudaStreamDestroy(m->copy_stream));
    if (m->x_host) CUDA_CHECK(cudaFreeHost(m->x_host));
    free(m->prof_ev);
    free(m->prof_cat);
    free_tables(m);
    free(m->tensors);
    free(m);
}

extern "C" const gpu_llama_plan *gpu_llama_get_plan(const gpu_llama *m) { return &m->plan; }

/* ---------------------------------------------------------------- tensors */

extern "C" int gpu_llama_n_tensors(const gpu_llama *m) { return m->n_tensors; }

extern "C" const gpu_llama_tensor *gpu_llama_tensor_info(const gpu_llama *m, int i) {
    CHECK(i >= 0 && i < m->n_tensors, "tensor %d of %d", i, m->n_tensors);
    return &m->tensors[i].info;
}

static size_t tensor_bytes(const gl_tensor &t) { return (size_t)t.info.numel * (t.info.is_u8 ? 1 : 4); }

/* A master kept in the copy (role 0 of a model with split masters or bf16 weights): its pair,
 * copied to the host (no low halves: zeros, so that join widens the copy). */
static bool is_split_master(const gpu_llama *m, const gl_tensor &t) {
    return gl_master_in_copy(m) && t.info.role == 0;
}

static void pair_to_host(const gl_param &p, std::vector<uint16_t> &hi, std::vector<uint16_t> &lo) {
    hi.resize((size_t)p.n);
    lo.resize((size_t)p.n);
    CUDA_CHECK(cudaMemcpy(hi.data(), p.copy, sizeof(uint16_t) * (size_t)p.n, cudaMemcpyDeviceToHost));
    if (p.lo) CUDA_CHECK(cudaMemcpy(lo.data(), p.lo, sizeof(uint16_t) * (size_t)p.n, cudaMemcpyDeviceToHost));
    else std::fill(lo.begin(), lo.end(), (uint16_t)0);
}

extern "C" void gpu_llama_tensor_read(gpu_llama *m, int i, void *host) {
    CHECK(!m->sharded, "tensor %d: a sharded model's tensors are assembled (gpu_llama_tensor_assemble)", i);
    const gl_tensor &t = m->tensors[i];
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    if (is_split_master(m, t)) { /* the fp32 master the pair holds */
        const gl_param &p = m->params[t.param];
        std::vector<uint16_t> hi, lo;
        pair_to_host(p, hi, lo);
        master_pair_join_array(static_cast<float *>(host), hi.data(), lo.data(), p.n);
        return;
    }
    CUDA_CHECK(cudaMemcpy(host, t.dev, tensor_bytes(t), cudaMemcpyDeviceToHost));
}

extern "C" void gpu_llama_tensor_write(gpu_llama *m, int i, const void *host) {
    if (m->sharded) {
        gl_shard_tensor_write(m, i, host);
        return;
    }
    const gl_tensor &t = m->tensors[i];
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    if (is_split_master(m, t)) { /* the written fp32 master becomes its pair */
        const gl_param &p = m->params[t.param];
        std::vector<uint16_t> hi((size_t)p.n), lo((size_t)p.n);
        master_pair_split_array(hi.data(), lo.data(), static_cast<const float *>(host), p.n);
        CUDA_CHECK(cudaMemcpy(p.copy, hi.data(), sizeof(uint16_t) * (size_t)p.n, cudaMemcpyHostToDevice));
        if (p.lo) CUDA_CHECK(cudaMemcpy(p.lo, lo.data(), sizeof(uint16_t) * (size_t)p.n, cudaMemcpyHostToDevice));
        gl_fp8_state_written(m);
        CUDA_CHECK(cudaStreamSynchronize(m->stream));
        return;
    }
    CUDA_CHECK(cudaMemcpy(t.dev, host, tensor_bytes(t), cudaMemcpyHostToDevice));
    if (t.info.role == 0 && m->params[t.param].copy)
        gl_to_bf16(m->params[t.param].copy, m->params[t.param].master, m->params[t.param].n, m->stream);
    if (t.info.role == 0 || t.info.role == 2) gl_fp8_state_written(m); /* the FP8 copies and scales follow */
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
}
