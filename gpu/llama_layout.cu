/* llama_layout.cu — the memory plan of the GPU model, its slabs and its tensor registry
 * (gpu/llama.h).
 *
 * One function, gl_layout, walks every buffer the model holds in a fixed order and takes it from
 * its slab (256-byte aligned). Run with assign = 0 it only counts, giving the plan; build then
 * allocates each slab once and runs it again with assign = 1 to set the pointers and register the
 * trainable tensors (names, shapes, optimizer state) in the order of ref_llama_tensors. So the
 * plan is exactly what is allocated, and nothing is allocated later.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpu/attention.h"
#include "gpu/cross_entropy.h"
#include "gpu/cuda_check.h"
#include "gpu/dora.h"
#include "gpu/embedding.h"
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
constexpr size_t kCeChunkBytes = (size_t)256 << 20; /* bf16 logits of one lm_head chunk */

struct cursor {
    unsigned char *base;
    size_t off;
};

void *take(cursor &c, size_t bytes) {
    c.off = (c.off + kAlign - 1) / kAlign * kAlign;
    void *p = c.base ? c.base + c.off : nullptr;
    c.off += bytes;
    return p;
}

template <class T>
T *take_n(cursor &c, int64_t n) {
    return static_cast<T *>(take(c, (size_t)n * sizeof(T)));
}

struct cursors {
    cursor c[N_SLABS];
    size_t outside; /* bytes others allocate for the model (the optimizer's chunk tables) */
};

int has_bias(const model_config *c, int t) { return c->attention_bias && t <= LLAMA_V; }

/* A trainable tensor: master, copy (optional), gradient and optimizer state from their slabs;
 * registered when assigning. */
void add_param(gpu_llama *m, cursors &cs, int assign, const char *name, int ndim, int64_t d0, int64_t d1,
               float **master, uint16_t **copy, float **grad, uint16_t *copy_at = nullptr, float *grad_at = nullptr,
               int carved = 0) {
    const int64_t n = ndim == 2 ? d0 * d1 : d0;
    float *ms = take_n<float>(cs.c[SLAB_PARAMS], n);
    uint16_t *cp = carved ? copy_at : copy ? take_n<uint16_t>(cs.c[SLAB_PARAMS], n) : nullptr;
    float *g = carved ? grad_at : take_n<float>(cs.c[SLAB_GRADS], n);
    gl_param p;
    memset(&p, 0, sizeof p);
    if (m->opt.optimizer == GPU_OPT_ADAMW8BIT && n >= ADAMW8BIT_MIN_8BIT_SIZE) {
        p.is_8bit = 1;
        p.q1 = take_n<uint8_t>(cs.c[SLAB_OPTIM], n);
        p.q2 = take_n<uint8_t>(cs.c[SLAB_OPTIM], n);
        p.absmax1 = take_n<float>(cs.c[SLAB_OPTIM], adamw8bit_n_blocks(n));
        p.absmax2 = take_n<float>(cs.c[SLAB_OPTIM], adamw8bit_n_blocks(n));
    } else {
        p.m = take_n<float>(cs.c[SLAB_OPTIM], n);
        p.v = take_n<float>(cs.c[SLAB_OPTIM], n);
    }
    /* the optimizer's per-tensor tables: a chunk descriptor and a partial sum per 8192 elements,
     * a tensor descriptor (gpu/adamw.cu) */
    cs.outside += (size_t)((n + 8191) / 8192) * 20 + 64;
    if (!assign) return;
    *master = ms;
    if (copy) *copy = cp;
    *grad = g;
    CHECK(snprintf(p.name, sizeof p.name, "%s", name) < (int)sizeof p.name, "tensor name too long: %s", name);
    p.ndim = ndim;
    p.shape[0] = d0;
    p.shape[1] = ndim == 2 ? d1 : 0;
    p.n = n;
    p.master = ms;
    p.copy = cp;
    p.grad = g;
    m->params[m->n_params++] = p;
}

/* A frozen NF4 linear: codes, absmax (nested or not), its tables. */
void take_nf4(gpu_llama *m, cursors &cs, gl_nf4 *q, int64_t n) {
    cursor &w = cs.c[SLAB_WEIGHTS];
    q->n = n;
    q->blocksize = NF4_BLOCKSIZE;
    q->nested_blocksize = NF4_NESTED_BLOCKSIZE;
    q->nested = m->opt.nested_nf4;
    q->n_blocks = nf4_n_blocks(n, q->blocksize);
    q->codes = take_n<uint8_t>(w, nf4_packed_bytes(n));
    q->qmap = take_n<float>(w, 16);
    if (q->nested) {
        q->absmax_q = take_n<uint8_t>(w, q->n_blocks);
        q->absmax2 = take_n<float>(w, (q->n_blocks + q->nested_blocksize - 1) / q->nested_blocksize);
        q->code2 = take_n<float>(w, 256);
    } else {
        q->absmax_f32 = take_n<float>(w, q->n_blocks);
    }
}

size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* The group linear t belongs to, or −1. */
int group_of(int t) {
    for (int g = 0; g < GL_N_GROUPS; g++)
        if (t >= gl_group_first[g] && t < gl_group_first[g] + gl_group_n[g]) return g;
    return -1;
}

/* The saved intermediates of the adapters of linears first..last: u = x Aᵀ (N, R) — one (N, n·R)
 * buffer for a grouped group — and for DoRA the pre-magnitude output z (N, C_out) and the row
 * norms (C_out). */
void take_adapter_acts(const gpu_llama *m, cursor &a, gl_acts *s, int first, int last) {
    const int64_t N = (int64_t)m->opt.B * m->opt.T;
    for (int g = 0; g < GL_N_GROUPS; g++)
        if (gl_group_first[g] >= first && gl_group_first[g] <= last)
            s->ug[g] = m->grouped[g] ? take_n<uint16_t>(a, N * gl_group_n[g] * m->opt.R) : nullptr;
    for (int t = first; t <= last; t++) {
        if (!gl_is_target(m, t)) continue;
        s->u[t] = nullptr;
        if (group_of(t) >= 0 && m->grouped[group_of(t)]) continue;
        int co, ci;
        ref_llama_linear_shape(&m->cfg, (enum llama_linear)t, &co, &ci);
        s->u[t] = take_n<uint16_t>(a, N * m->opt.R);
        if (m->opt.mode == LLAMA_DORA) s->z[t] = take_n<uint16_t>(a, N * co), s->wnorm[t] = take_n<float>(a, co);
    }
}

}  // namespace

const int gl_group_first[GL_N_GROUPS] = {LLAMA_Q, LLAMA_GATE}, gl_group_n[GL_N_GROUPS] = {3, 2};

int gl_is_target(const gpu_llama *m, int t) { return m->opt.mode != LLAMA_FULL && ((m->opt.targets >> t) & 1u); }

void gl_layout(gpu_llama *m, int assign) {
    const model_config *c = &m->cfg;
    const gpu_llama_options *o = &m->opt;
    const int full = o->mode == LLAMA_FULL, dora = o->mode == LLAMA_DORA, nf4 = o->base == GPU_BASE_NF4;
    const int64_t N = (int64_t)o->B * o->T, C = c->C, F = c->F, V = c->V, R = o->R;
    cursors cs;
    for (int s = 0; s < N_SLABS; s++) cs.c[s] = cursor{assign ? m->slab[s] : nullptr, 0};
    cs.outside = 0;
    if (assign) m->n_params = 0;
    char name[200];

    /* ---- weights (frozen) and trainable parameters, in ref_llama_tensors' order */
    if (full) {
        add_param(m, cs, assign, "model.embed_tokens.weight", 2, V, C, &m->embed_master, &m->embed, &m->embed_grad);
    } else {
        uint16_t *e = take_n<uint16_t>(cs.c[SLAB_WEIGHTS], V * C);
        if (assign) m->embed = e;
    }
    if (nf4) {
        int64_t per_layer = 0;
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            int co, ci;
            ref_llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
            per_layer += (int64_t)co * ci;
        }
        uint16_t *b = take_n<uint16_t>(cs.c[SLAB_WEIGHTS], per_layer);
        if (assign) m->dq_buf = b;
    }
    for (int l = 0; l < c->L; l++) {
        gl_layer *ly = assign ? &m->layers[l] : nullptr;
        gl_layer dummy;
        if (!ly) ly = &dummy;
        if (full) {
            snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
            add_param(m, cs, assign, name, 1, C, 0, &ly->attn_norm_master, &ly->attn_norm, &ly->attn_norm_grad);
        } else {
            ly->attn_norm = take_n<uint16_t>(cs.c[SLAB_WEIGHTS], C);
        }
        int64_t dq_off = 0;
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            gl_linear *lin = &ly->lin[t];
            if (assign) memset(lin, 0, sizeof *lin);
            ref_llama_linear_shape(c, (enum llama_linear)t, &lin->c_out, &lin->c_in);
            const int64_t co = lin->c_out, ci = lin->c_in;
            lin->target = gl_is_target(m, t);
            if (full) {
                snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, ref_llama_linear_name((enum llama_linear)t));
                add_param(m, cs, assign, name, 2, co, ci, &lin->w_master, &lin->w, &lin->w_grad);
                if (has_bias(c, t)) {
                    snprintf(name, sizeof name, "model.layers.%d.%s.bias", l, ref_llama_linear_name((enum llama_linear)t));
                    add_param(m, cs, assign, name, 1, co, 0, &lin->bias_master, &lin->bias, &lin->bias_grad);
                }
            } else {
                if (nf4) {
                    take_nf4(m, cs, &lin->nf4, co * ci);
                    if (assign) lin->w = m->dq_buf + dq_off;
                    dq_off += co * ci;
                } else {
                    lin->w = take_n<uint16_t>(cs.c[SLAB_WEIGHTS], co * ci);
                }
                if (has_bias(c, t)) lin->bias = take_n<uint16_t>(cs.c[SLAB_WEIGHTS], co);
            }
        }
        if (full) {
            snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
            add_param(m, cs, assign, name, 1, C, 0, &ly->mlp_norm_master, &ly->mlp_norm, &ly->mlp_norm_grad);
        } else {
            ly->mlp_norm = take_n<uint16_t>(cs.c[SLAB_WEIGHTS], C);
        }
    }
    if (full) {
        add_param(m, cs, assign, "model.norm.weight", 1, C, 0, &m->final_norm_master, &m->final_norm,
                  &m->final_norm_grad);
        if (!c->tie_word_embeddings)
            add_param(m, cs, assign, "lm_head.weight", 2, V, C, &m->lm_head_master, &m->lm_head, &m->lm_head_grad);
    } else {
        uint16_t *fn = take_n<uint16_t>(cs.c[SLAB_WEIGHTS], C);
        uint16_t *lh = c->tie_word_embeddings ? nullptr : take_n<uint16_t>(cs.c[SLAB_WEIGHTS], V * C);
        if (assign) m->final_norm = fn, m->lm_head = lh;
    }
    if (assign && c->tie_word_embeddings) {
        m->lm_head = m->embed;
        m->lm_head_master = m->embed_master;
        m->lm_head_grad = m->embed_grad;
    }
    /* adapters: per layer, per target: A, B (and DoRA's magnitude); DoRA's ‖W‖² rows are frozen */
    if (!full) {
        uint16_t *group_a = nullptr;
        float *group_da = nullptr;
        for (int l = 0; l < c->L; l++)
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                if (!gl_is_target(m, t)) continue;
                gl_linear dummy_lin;
                memset(&dummy_lin, 0, sizeof dummy_lin);
                gl_linear *lin = assign ? &m->layers[l].lin[t] : &dummy_lin;
                int co, ci;
                ref_llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
                const char *ln = ref_llama_linear_name((enum llama_linear)t);
                /* a grouped group's A copies and gradients: carved for all members at its first */
                const int g = group_of(t), grouped = g >= 0 && m->grouped[g];
                if (grouped && t == gl_group_first[g]) {
                    group_a = take_n<uint16_t>(cs.c[SLAB_PARAMS], gl_group_n[g] * R * ci);
                    group_da = take_n<float>(cs.c[SLAB_GRADS], gl_group_n[g] * R * ci);
                }
                const int64_t at = grouped ? (int64_t)(t - gl_group_first[g]) * R * ci : 0;
                snprintf(name, sizeof name, "model.layers.%d.%s.lora_A.weight", l, ln);
                add_param(m, cs, assign, name, 2, R, ci, &lin->a_master, &lin->a, &lin->a_grad,
                          grouped && assign ? group_a + at : nullptr, grouped && assign ? group_da + at : nullptr,
                          grouped);
                snprintf(name, sizeof name, "model.layers.%d.%s.lora_B.weight", l, ln);
                add_param(m, cs, assign, name, 2, co, R, &lin->b_master, &lin->b, &lin->b_grad);
                if (dora) {
                    snprintf(name, sizeof name, "model.layers.%d.%s.lora_magnitude_vector", l, ln);
                    add_param(m, cs, assign, name, 1, co, 0, &lin->mag, nullptr, &lin->mag_grad);
                    float *wsq = take_n<float>(cs.c[SLAB_WEIGHTS], co);
                    if (assign) lin->w_sq = wsq;
                }
            }
    }

    /* ---- activations */
    cursor &a = cs.c[SLAB_ACTS];
    for (int l = 0; l <= c->L; l++) {
        uint16_t *x = take_n<uint16_t>(a, N * C);
        if (assign) m->x[l] = x;
    }
    for (int l = 0; l < c->L; l++) {
        gl_acts dummy;
        gl_acts *s = assign ? &m->acts[l] : &dummy;
        if (l == 0 || o->recompute == GPU_RECOMPUTE_NONE) {
            s->q = take_n<uint16_t>(a, N * m->QD);
            s->k = take_n<uint16_t>(a, N * m->KD);
            s->v = take_n<uint16_t>(a, N * m->KD);
            s->att = take_n<uint16_t>(a, N * m->QD);
            s->lse = take_n<float>(a, (int64_t)o->B * c->H * o->T);
            take_adapter_acts(m, a, s, LLAMA_Q, LLAMA_V);
        } else if (assign) {
            const gl_acts &z = m->acts[0];
            s->q = z.q, s->k = z.k, s->v = z.v, s->att = z.att, s->lse = z.lse;
            for (int t = LLAMA_Q; t <= LLAMA_V; t++) s->u[t] = z.u[t], s->z[t] = z.z[t], s->wnorm[t] = z.wnorm[t];
            s->ug[GL_GROUP_QKV] = z.ug[GL_GROUP_QKV];
        }
        if (l == 0 || o->recompute != GPU_RECOMPUTE_LAYER) {
            s->rstd1 = take_n<float>(a, N);
            s->h = take_n<uint16_t>(a, N * C);
            s->rstd2 = take_n<float>(a, N);
            s->gate = take_n<uint16_t>(a, N * F);
            s->up = take_n<uint16_t>(a, N * F);
            s->mlp = take_n<uint16_t>(a, N * F);
            take_adapter_acts(m, a, s, LLAMA_O, LLAMA_DOWN);
        } else if (assign) {
            const gl_acts &z = m->acts[0];
            s->rstd1 = z.rstd1, s->h = z.h, s->rstd2 = z.rstd2;
            s->gate = z.gate, s->up = z.up, s->mlp = z.mlp;
            for (int t = LLAMA_O; t < LLAMA_N_LINEAR; t++) s->u[t] = z.u[t], s->z[t] = z.z[t], s->wnorm[t] = z.wnorm[t];
            s->ug[GL_GROUP_GATE_UP] = z.ug[GL_GROUP_GATE_UP];
        }
    }
    float *rf = take_n<float>(a, N);
    uint16_t *nf = take_n<uint16_t>(a, N * C);
    if (assign) m->rstd_f = rf, m->nf = nf;

    /* ---- scratch */
    cursor &s = cs.c[SLAB_SCRATCH];
    int max_in = 0, max_out = 0;
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        int co, ci;
        ref_llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
        if (gl_is_target(m, t)) max_in = ci > max_in ? ci : max_in, max_out = co > max_out ? co : max_out;
    }
    uint16_t *p[12];
    const int64_t sizes[12] = {N * C, N * C, N * C, N * m->QD, N * m->QD, N * m->KD, N * m->KD, N * F,
                               dora ? N * max_out : 0, o->dropout > 0 ? N * max_in : 0, N * C, N * C};
    for (int i = 0; i < 12; i++) p[i] = take_n<uint16_t>(s, sizes[i]);
    uint8_t *keep = take_n<uint8_t>(s, o->dropout > 0 ? N * max_in : 0);
    const int ce_rows = (int)(kCeChunkBytes / (2 * (size_t)V)) < 64 ? 64 : (int)(kCeChunkBytes / (2 * (size_t)V));
    m->plan.ce_rows = ce_rows > N ? (int)N : ce_rows;
    size_t ws = gpu_attention_backward_workspace_size(o->B, o->T, c->H);
    ws = max_sz(ws, gpu_rmsnorm_backward_workspace_size((int)N, c->C));
    ws = max_sz(ws, gpu_lm_head_ce_workspace_size((int)N, c->V, m->plan.ce_rows));
    if (full) ws = max_sz(ws, gpu_embedding_backward_workspace_size((int)N, c->V));
    for (int t = 0; t < LLAMA_N_LINEAR && !full; t++) {
        if (!gl_is_target(m, t)) continue;
        int co, ci;
        ref_llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
        ws = max_sz(ws, gpu_lora_backward_workspace_size((int)N, ci, o->R, o->dropout > 0 ? LORA_MASKED : LORA_NO_MASK));
        if (dora) {
            ws = max_sz(ws, gpu_dora_weight_norm_workspace_size(co, o->R));
            ws = max_sz(ws, gpu_dora_forward_workspace_size((int)N, co));
            ws = max_sz(ws, gpu_dora_rescale_workspace_size((int)N, co));
        }
    }
    for (int g = 0; g < GL_N_GROUPS; g++)
        if (m->grouped[g]) ws = max_sz(ws, gpu_lora_group_backward_workspace_size((int)N, gl_group_n[g], o->R));
    void *w = take(s, ws);
    if (assign) {
        m->tmp = p[0], m->G = p[1], m->dn = p[2], m->datt = p[3], m->dq = p[4], m->dk = p[5], m->dv = p[6];
        m->dmlp = p[7], m->dy_s = p[8], m->x_drop = p[9], m->n1 = p[10], m->n2 = p[11];
        m->keep = keep, m->ws = w;
    }

    /* ---- fixed */
    cursor &f = cs.c[SLAB_FIXED];
    int32_t *tk = take_n<int32_t>(f, N), *lb = take_n<int32_t>(f, N), *ps = take_n<int32_t>(f, N);
    uint16_t *rc = take_n<uint16_t>(f, (int64_t)o->T * c->D / 2), *rs = take_n<uint16_t>(f, (int64_t)o->T * c->D / 2);
    uint16_t *ones = take_n<uint16_t>(f, N);
    float *sc = take_n<float>(f, 4);
    double *acc = take_n<double>(f, 1);
    float *maps = take_n<float>(f, 512);
    if (assign) {
        m->tokens = tk, m->labels = lb, m->pos = ps, m->rope_cos = rc, m->rope_sin = rs, m->ones = ones;
        m->loss_dev = sc, m->norm_dev = sc + 2, m->nll_acc = acc, m->map1 = maps, m->map2 = maps + 256;
    }

    if (!assign) {
        gpu_llama_plan *pl = &m->plan;
        pl->weights = cs.c[SLAB_WEIGHTS].off;
        pl->params = cs.c[SLAB_PARAMS].off;
        pl->grads = cs.c[SLAB_GRADS].off;
        pl->optim = cs.c[SLAB_OPTIM].off;
        pl->acts = cs.c[SLAB_ACTS].off;
        pl->scratch = cs.c[SLAB_SCRATCH].off;
        m->fixed_slab = cs.c[SLAB_FIXED].off;
        pl->fixed = cs.c[SLAB_FIXED].off + GEMM_DEFAULT_WORKSPACE + cs.outside;
        pl->total = pl->weights + pl->params + pl->grads + pl->optim + pl->acts + pl->scratch + pl->fixed;
    }
}

/* ---------------------------------------------------------------- plan */

static int check_options(const model_config *c, const gpu_llama_options *o, io_err *e) {
    if (o->B < 1 || o->T < 1) return io_fail(e, "micro-batch %d × sequence %d: both must be ≥ 1", o->B, o->T);
    if ((int64_t)o->B * o->T > INT32_MAX / 2)
        return io_fail(e, "micro-batch %d × sequence %d: too many tokens for one micro-batch", o->B, o->T);
    if (c->D != 16 && c->D != 32 && c->D != 64 && c->D != 128)
        return io_fail(e, "head_dim %d: the GPU attention supports 16, 32, 64 and 128", c->D);
    if (!((c->C % 8 == 0 && c->C <= 8192) || c->C <= 1024))
        return io_fail(e, "hidden_size %d: the GPU RMSNorm takes multiples of 8 up to 8192, or up to 1024", c->C);
    if (o->mode != LLAMA_FULL && o->R < 1) return io_fail(e, "adapter rank %d must be ≥ 1", o->R);
    if (o->base == GPU_BASE_NF4 && o->mode == LLAMA_FULL) return io_fail(e, "an NF4 base cannot be fully fine-tuned");
    if (o->dropout > 0 && o->mode != LLAMA_LORA)
        return io_fail(e, "--dropout %g: adapter dropout is implemented for LoRA and QLoRA (not DoRA, not full)",
                       (double)o->dropout);
    if (o->mode != LLAMA_FULL && (o->targets & LLAMA_ALL_TARGETS) == 0)
        return io_fail(e, "nothing to train: --targets selects no linear layer");
    return 0;
}

static void init_shape(gpu_llama *m, const model_config *c, const gpu_llama_options *o) {
    m->cfg = *c;
    m->opt = *o;
    m->N = o->B * o->T;
    m->QD = c->H * c->D;
    m->KD = c->KVH * c->D;
    for (int g = 0; g < GL_N_GROUPS; g++) {
        int all = o->mode == LLAMA_LORA && !(o->dropout > 0) && !o->ungrouped;
        for (int i = 0; i < gl_group_n[g]; i++) all = all && gl_is_target(m, gl_group_first[g] + i);
        m->grouped[g] = all;
    }
}

extern "C" int gpu_llama_plan_bytes(gpu_llama_plan *p, const model_config *c, const gpu_llama_options *o, io_err *e) {
    if (check_options(c, o, e)) return -1;
    gpu_llama m;
    memset(&m, 0, sizeof m);
    init_shape(&m, c, o);
    gl_layout(&m, 0);
    *p = m.plan;
    return 0;
}

extern "C" void gpu_llama_plan_describe(char *buf, size_t cap, const gpu_llama_plan *p, int B, int T) {
    const double G = 1024.0 * 1024.0 * 1024.0;
    snprintf(buf, cap,
             "memory plan for micro-batch %d × %d: %.2f GiB = weights %.2f + parameters %.2f + gradients %.2f + "
             "optimizer %.2f + activations %.2f + scratch %.2f + fixed %.2f",
             B, T, p->total / G, p->weights / G, p->params / G, p->grads / G, p->optim / G, p->acts / G,
             p->scratch / G, p->fixed / G);
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
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
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
    m->tensors = static_cast<gl_tensor *>(calloc((size_t)m->n_params * 5, sizeof(gl_tensor)));
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
    m->n_tensors = n;
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
    free(pos);
    free(ones);
    free(cs);
}

static void build_optimizer(gpu_llama *m) {
    gpu_adamw_param *ps = static_cast<gpu_adamw_param *>(calloc((size_t)m->n_params, sizeof(gpu_adamw_param)));
    CHECK(ps != nullptr, "out of host memory");
    for (int i = 0; i < m->n_params; i++) {
        const gl_param &p = m->params[i];
        /* the 8-bit optimizer uses this context for the global norm only: no state to update */
        const int adamw = m->opt.optimizer == GPU_OPT_ADAMW;
        ps[i] = gpu_adamw_param{adamw ? p.master : nullptr, adamw ? p.copy : nullptr, adamw ? p.m : nullptr,
                                adamw ? p.v : nullptr, p.grad, p.n, 1};
    }
    m->adamw = build_gpu_adamw(ps, m->n_params);
    free(ps);
}

extern "C" gpu_llama *build_gpu_llama(const model_config *c, const gpu_llama_options *o, io_err *e) {
    if (check_options(c, o, e)) return nullptr;
    gpu_llama *m = static_cast<gpu_llama *>(calloc(1, sizeof(gpu_llama)));
    CHECK(m != nullptr, "out of host memory");
    init_shape(m, c, o);
    gl_layout(m, 0);
    const size_t sizes[N_SLABS] = {m->plan.weights, m->plan.params, m->plan.grads,  m->plan.optim,
                                   m->plan.acts,    m->plan.scratch, m->fixed_slab};
    for (int s = 0; s < N_SLABS; s++) {
        if (sizes[s] == 0) continue;
        if (cudaMalloc(&m->slab[s], sizes[s]) != cudaSuccess) {
            cudaGetLastError();
            char plan[512];
            gpu_llama_plan_describe(plan, sizeof plan, &m->plan, o->B, o->T);
            free_gpu_llama(m);
            return io_fail(e, "out of GPU memory allocating the model (%s)", plan), nullptr;
        }
    }
    m->layers = static_cast<gl_layer *>(calloc((size_t)c->L, sizeof(gl_layer)));
    m->acts = static_cast<gl_acts *>(calloc((size_t)c->L, sizeof(gl_acts)));
    m->x = static_cast<uint16_t **>(calloc((size_t)c->L + 1, sizeof(uint16_t *)));
    m->params = static_cast<gl_param *>(calloc((size_t)c->L * 24 + 8, sizeof(gl_param)));
    CHECK(m->layers && m->acts && m->x && m->params, "out of host memory");
    gl_layout(m, 1);
    for (int s = 0; s < N_SLABS; s++)
        if (m->slab[s]) CUDA_CHECK(cudaMemset(m->slab[s], 0, sizes[s]));
    register_tensors(m);
    m->dq_layer = -1;
    CUDA_CHECK(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    m->gemm = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
    build_optimizer(m);
    upload_fixed(m);
    CUDA_CHECK(cudaMallocHost(&m->h_tokens, 2 * (size_t)m->N * sizeof(int32_t)));
    CUDA_CHECK(cudaMallocHost(&m->h_labels, 2 * (size_t)m->N * sizeof(int32_t)));
    CUDA_CHECK(cudaMallocHost(&m->h_scalars, 4 * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&m->h_nll, sizeof(double)));
    for (int i = 0; i < 2; i++) CUDA_CHECK(cudaEventCreateWithFlags(&m->staged[i], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreate(&m->t_begin));
    CUDA_CHECK(cudaEventCreate(&m->t_end));
    if (o->profile) {
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
    for (int s = 0; s < N_SLABS; s++)
        if (m->slab[s]) CUDA_CHECK(cudaFree(m->slab[s]));
    if (m->gemm) free_gpu_gemm(m->gemm);
    if (m->adamw) free_gpu_adamw(m->adamw);
    if (m->h_tokens) CUDA_CHECK(cudaFreeHost(m->h_tokens));
    if (m->h_labels) CUDA_CHECK(cudaFreeHost(m->h_labels));
    if (m->h_scalars) CUDA_CHECK(cudaFreeHost(m->h_scalars));
    if (m->h_nll) CUDA_CHECK(cudaFreeHost(m->h_nll));
    for (int i = 0; i < 2; i++)
        if (m->staged[i]) CUDA_CHECK(cudaEventDestroy(m->staged[i]));
    if (m->t_begin) CUDA_CHECK(cudaEventDestroy(m->t_begin));
    if (m->t_end) CUDA_CHECK(cudaEventDestroy(m->t_end));
    if (m->prof_ev)
        for (int i = 0; i < 2 * m->prof_cap; i++) CUDA_CHECK(cudaEventDestroy(m->prof_ev[i]));
    if (m->stream) CUDA_CHECK(cudaStreamDestroy(m->stream));
    free(m->prof_ev);
    free(m->prof_cat);
    free(m->layers);
    free(m->acts);
    free(m->x);
    free(m->params);
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

extern "C" void gpu_llama_tensor_read(gpu_llama *m, int i, void *host) {
    const gl_tensor &t = m->tensors[i];
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    CUDA_CHECK(cudaMemcpy(host, t.dev, tensor_bytes(t), cudaMemcpyDeviceToHost));
}

extern "C" void gpu_llama_tensor_write(gpu_llama *m, int i, const void *host) {
    const gl_tensor &t = m->tensors[i];
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    CUDA_CHECK(cudaMemcpy(t.dev, host, tensor_bytes(t), cudaMemcpyHostToDevice));
    const gl_param &p = m->params[t.param];
    if (t.info.role == 0 && p.copy) gl_to_bf16(p.copy, p.master, p.n, m->stream);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
}
