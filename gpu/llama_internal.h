/* llama_internal.h — the state of struct gpu_llama, shared by the .cu files of the GPU model:
 * llama_layout.cu (the plan, the slabs, the tensor registry), llama_weights.cu (loading,
 * random weights, adapter init, base weight reads) and llama.cu (forward, backward, optimizer).
 * C++ only; not part of the C API (gpu/llama.h).
 */
#ifndef REFINE_GPU_LLAMA_INTERNAL_H
#define REFINE_GPU_LLAMA_INTERNAL_H

#include <cuda_runtime.h>

#include "gpu/adamw.h"
#include "gpu/adamw8bit.h"
#include "gpu/gemm.h"
#include "gpu/llama.h"
#include "gpu/lora.h"
#include "gpu/nf4.h"
#include "ref/shard.h"

/* An NF4 base weight (bitsandbytes layout, gpu/nf4.h). */
struct gl_nf4 {
    uint8_t *codes;     /* (n + 1) / 2 */
    uint8_t *absmax_q;  /* n_blocks (nested) */
    float *absmax_f32;  /* n_blocks (not nested) */
    float *absmax2;     /* ceil(n_blocks / nested_blocksize) (nested) */
    float *code2;       /* (256) the nested map (nested) */
    float *qmap;        /* (16) the NF4 values */
    float offset;
    int64_t n, n_blocks;
    int blocksize, nested_blocksize, nested;
};

/* The dequantization kernels' view of q (gpu/nf4.h). */
static inline gpu_nf4_tensor gl_nf4_tensor(const gl_nf4 &q) {
    return gpu_nf4_tensor{q.codes,  q.nested ? q.absmax_q : nullptr, q.nested ? nullptr : q.absmax_f32,
                          q.absmax2, q.code2,                        q.offset,
                          q.qmap,   q.n,                             q.blocksize,
                          q.nested_blocksize};
}

/* Linears that read the same input: q/k/v (the attention's normed input) and gate/up (the MLP's).
 * Without dropout their LoRA adapters run as one group (gpu/lora.h's gpu_lora_group_*): the
 * members' A compute copies and A gradients are carved contiguously, in member order, so that the
 * first member's pointers address the stacked (n·R, C_in) matrices. The o projection is a group of
 * one where it is folded (LoRA only: its input, the attention output, at row stride ld_att with u
 * after the QD columns) and not grouped otherwise. */
enum { GL_GROUP_QKV = 0, GL_GROUP_GATE_UP = 1, GL_GROUP_O = 2, GL_N_GROUPS = 3 };
extern const int gl_group_first[GL_N_GROUPS], gl_group_n[GL_N_GROUPS];

/* One linear of one layer. w is what the products read: the frozen bf16 base, the compute copy of
 * the master (full), or this linear's slot of the NF4 dequantization buffer. */
struct gl_linear {
    int c_in, c_out, target;
    uint16_t *w, *bias;
    int64_t ldw; /* w's row stride: c_in, or a folded group member's padded row (gpu/lora.h) */
    gl_nf4 nf4;
    float *w_master, *bias_master; /* full fine-tuning */
    void *w_grad, *bias_grad;      /* full: fp32, or bf16 (gl_grads_bf16) */
    uint16_t *a, *b;                              /* adapter compute copies */
    float *a_master, *b_master, *a_grad, *b_grad;
    int a_param;           /* A's index in gpu_llama.params */
    float *mag, *mag_grad; /* DoRA magnitude (fp32 only) */
    float *w_sq;           /* DoRA: Σ_i W[o,i]², once (W is frozen) */
    /* FP8 (llama_fp8.cu): W's E4M3 codes (C_out, C_in) and its transposed copy (C_in, C_out) —
     * stored, or slices of the layer buffers — and, under block scaling, their 128×128 scales. */
    uint8_t *w8, *w8_t;
    float *w8_s, *w8_s_t;
};

struct gl_layer {
    uint16_t *attn_norm, *mlp_norm;
    float *attn_norm_master, *mlp_norm_master; /* full */
    void *attn_norm_grad, *mlp_norm_grad;      /* full: fp32, or bf16 (gl_grads_bf16) */
    gl_linear lin[LLAMA_N_LINEAR];
    uint16_t *group_a[GL_N_GROUPS]; /* grouped LoRA: the members' stacked A copies (n·R, C_in) */
    float *group_da[GL_N_GROUPS];   /* and their stacked A gradients */
};

/* A layer's saved activations; layers share the attention part (ATTN) or everything (LAYER).
 * The normalized inputs n1 = rmsnorm(x) and n2 = rmsnorm(h) are not saved: they live in two
 * scratch buffers and backward recomputes them (one cheap pass each, the same bits) — unless
 * options.keep_norms, where n1 and n2 are the layer's own (gl_n1, gl_n2). */
struct gl_acts {
    float *rstd1, *rstd2, *lse;
    uint16_t *q, *k, *v, *att, *h, *gate, *up, *mlp;
    uint16_t *n1, *n2;           /* options.keep_norms: the normalized inputs (N, ld_n1) and (N, ld_n2) */
    uint16_t *o_out;             /* gl_keeps_o_out: o's output (N, C); h is then h_buf, formed again */
    uint16_t *u[LLAMA_N_LINEAR]; /* adapter intermediates x Aᵀ (N, R) */
    uint16_t *z[LLAMA_N_LINEAR]; /* DoRA pre-magnitude outputs (N, C_out) */
    float *wnorm[LLAMA_N_LINEAR]; /* DoRA row norms (C_out) */
    uint16_t *ug[GL_N_GROUPS];    /* grouped adapters: u of the group (N, n·R); u[t] is unused then */
    uint8_t *xt8[LLAMA_N_LINEAR]; /* gl_fp8_inputs_kept: the transposed E4M3 codes (C_in, N) of the
                                     inputs of q (n1), o (att), gate (n2) and down (the MLP input) */
};

/* A trainable tensor with its gradient and optimizer state. */
struct gl_param {
    char name[200];
    int ndim;
    int64_t shape[2], n;
    float *master; /* split masters: the load staging (the gradient row) */
    void *grad;    /* fp32, or bf16 for full fine-tuning when gl_grads_bf16 */
    uint16_t *copy; /* bf16 compute copy, or NULL (DoRA magnitude) */
    uint16_t *lo;   /* split masters (options.master): the low halves; the master is join(copy, lo) */
    float *m, *v;   /* AdamW moments (and the 8-bit optimizer's 32-bit path) */
    uint8_t *q1, *q2;
    float *absmax1, *absmax2;
    int is_8bit;
    float **dst_master; /* the model's own pointers to this tensor (gl_linear's, gl_layer's, ...) */
    uint16_t **dst_copy;
    void **dst_grad;
};

/* An engine tensor: a parameter's master or a piece of its optimizer state. */
struct gl_tensor {
    gpu_llama_tensor info;
    void *dev;
    int param; /* index into params */
};

/* FP8 state (llama_fp8.cu; ref/llama.h's "FP8 block linears" is the oracle): one row per tensor, x,
 * W and dy of each linear of each layer (ref/llama.h's llama_fp8_row order: the E4M3 rows first). */
struct gl_fp8_summary {
    float scale_min, scale_max;
    unsigned flags, pad;
    unsigned long long saturated;
};

struct gl_fp8 {
    int on;                      /* options.linears == GPU_LINEAR_FP8 */
    int state;                   /* the rows exist: FP8 linears or an FP8-stored base */
    enum fp8_recording recording;
    int n, history_len;
    float *history;              /* (n, history_len): delayed scaling */
    float *scale, *scale_inv;    /* (n) the delayed update's; scale also what the metrics read */
    float *sinv16;               /* (n, 4): each row's dequantization scale at a 16-byte stride (the
                                    GEMM's scale pointers must be 16-byte aligned) */
    float *amax;                 /* (n) current: the tensor's amax; block: its tensor-wide amax */
    unsigned *flags;             /* (n) the step's ref/fp8.h flags per row */
    unsigned long long *saturated;
    float *discard;              /* an amax slot nothing reads (unrecorded delayed casts) */
    gl_fp8_summary *summary, *h_summary; /* device, pinned host */
    /* scratch operands: an input, its transposed copy, dy, dyᵀ, with their 1×128 scales */
    uint8_t *xq, *xt, *dq, *dt;
    float *xq_s, *xt_s, *dq_s, *dt_s;
    /* up's dŷ and dŷᵀ beside gate's in dq, dt when SwiGLU's backward wrote both (gl_fp8_swiglu_backward:
     * full fine-tuning, delayed scaling); gate_up_ready: they hold this chunk's, gl_fp8_grad skips them */
    uint8_t *dq2, *dt2;
    int gate_up_ready;
    /* one layer's codes (NF4 base: W and Wᵀ; FP8-stored base: Wᵀ) */
    uint8_t *w8_buf, *wt8_buf;
    uint16_t *stage; /* an FP8-stored base with its Wᵀ kept and no bf16 layer buffer: one linear in
                        bf16 while loading (scratch, free then) */
    int w8_layer, wt8_layer;     /* the layer they hold, −1 none */
    int stale;                   /* full: the trained weights' codes need requantizing */
    int failed;                  /* the last step was skipped: a quantization met a NaN or an Inf */
    int failed_row;
};

enum gl_slab { SLAB_WEIGHTS = 0, SLAB_PARAMS, SLAB_GRADS, SLAB_OPTIM, SLAB_ACTS, SLAB_SCRATCH, SLAB_FIXED, N_SLABS };

/* Profile categories (options.profile). */
enum gl_prof {
    PROF_EMBED = 0, PROF_NORM, PROF_LINEAR_FWD, PROF_LINEAR_DX, PROF_LINEAR_DW, PROF_ADAPTER_FWD, PROF_ADAPTER_BWD,
    PROF_NF4, PROF_ROPE, PROF_ATTN_FWD, PROF_ATTN_BWD, PROF_SWIGLU, PROF_RESIDUAL, PROF_LM_HEAD, PROF_OPTIMIZER,
    PROF_COPY, PROF_FP8, N_PROF
};

constexpr int GL_OPT_SIDE = 2; /* side streams of the 8-bit optimizer step */

struct gpu_llama {
    model_config cfg;
    gpu_llama_options opt;
    gpu_llama_plan plan;
    int N, QD, KD;
    int mlp_rows; /* rows of the MLP at a time: opt.mlp_chunk, or N when the MLP runs whole */
    int grouped[GL_N_GROUPS]; /* the group's adapters run as one (LoRA/DoRA and quantized, no dropout, all members targets) */
    /* the group's adapters folded into its base products (gpu/lora.h "folded groups": grouped LoRA or
     * DoRA on a bf16 or NF4 base with bf16 products): its input (n1, n2) at row stride ld_n with u
     * after the C columns, its members' weights at ldw with bf16(s·B) after the C_in columns, refreshed
     * from B (gl_fold_refresh: one launch over fold_slots at the start of every forward; an NF4 base's
     * layer after each dequantization). LoRA's forward products run over [x | u]; DoRA's members
     * without bias over [x | u] with their weight scaled by m/n (gl_dora_weight_scaled), a biased
     * member over x alone and its magnitude pass adds the adapter's term; DoRA's backward base dx
     * products, from the rescaled dy, give du as LoRA's do */
    int folded[GL_N_GROUPS];
    /* full fine-tuning's stacked group (ld_dqkv, ld_gu side by side) whose members' gradients lie side
     * by side too, in every layer: its dW is one product (point_views, group_grads_stacked) */
    int dw_one[GL_N_GROUPS];
    int64_t ld_n1, ld_n2;
    int64_t ld_att; /* the attention output's and its gradient's row stride (QD, or folded o's QD + R padded) */
    struct lora_fold_slot *fold_slots; /* device: one per folded linear */
    int n_fold_slots, fold_max_c_out;
    cudaStream_t stream;
    struct gpu_gemm *gemm;
    gpu_adamw *adamw; /* AdamW, or the gradient norm alone for the 8-bit optimizer */
    unsigned char *slab[N_SLABS];
    size_t fixed_slab; /* bytes of SLAB_FIXED (plan.fixed also counts what the GEMM and optimizer hold) */

    /* weights (compute copies; lm_head == embed when tied) */
    uint16_t *embed, *lm_head, *final_norm;
    float *embed_master, *lm_head_master, *final_norm_master;
    void *embed_grad, *lm_head_grad, *final_norm_grad; /* fp32, or bf16 (gl_grads_bf16) */
    gl_layer *layers;
    uint16_t *dq_buf; /* NF4, FP8-stored: one layer's dequantized linears (W_eff under FP8) */
    int dq_layer;     /* the layer dq_buf holds, −1 none */
    gl_fp8 fp8;
    uint16_t *mlp_buf; /* GPU_MLP_INPUT_RECOMPUTED: the one MLP input buffer every layer shares */
    uint16_t *h_buf;   /* gl_keeps_o_out: the one h = x + o every layer shares */

    /* activations */
    uint16_t **x; /* L + 1 layer inputs (N, C); x[L] feeds the final norm. Offloaded: x[l] = x_ping[l % 2]
                     for l < L, and x_host holds them all (L × (N, C), pinned) */
    uint16_t *x_ping[2], *x_host;
    cudaStream_t copy_stream;      /* offload copies */
    /* The 8-bit optimizer's launches, one a tensor, round-robin over the step's stream and these
     * (forked and joined by events): each launch fills the device, so the next tensor's CTAs start
     * in the last one's tail instead of after it (gl_adamw8bit_steps). */
    cudaStream_t opt_side[GL_OPT_SIDE];
    cudaEvent_t opt_fork, opt_join[GL_OPT_SIDE];
    /* The folded LoRA groups' parameter gradients (dB, dA: nothing later in the backward reads them)
     * on a stream of their own, beside the critical path (gl_wg_side; gpu/llama.cu group_backward):
     * its own cuBLASLt context (workspace) and dB product buffer; wg_fork orders its work after the
     * group's dx product, wg_done joins it back (wg_pending: work not yet joined). */
    int wg_side, wg_pending;
    cudaStream_t wg_stream;
    struct gpu_gemm *wg_gemm;
    cudaEvent_t wg_fork, wg_done;
    void *wg_ws;
    cudaEvent_t *x_out, *x_in;     /* per layer input: its copy to the host / back to the device is done */
    cudaEvent_t *x_free;           /* per layer input: its device buffer may be overwritten */
    gl_acts *acts;
    /* each saved set's gate and up (mlp_rows, F): one buffer, side by side [gate │ up] in rows of
     * ld_gu = 2F where gate/up's forward and input gradient are each one product over the stacked
     * weights (a folded LoRA group: gpu/llama_layout.cu group_stacked), else packed (up after gate's
     * mlp_rows·F, ld_gu = F) */
    int64_t ld_gu;
    float *rstd_f;
    uint16_t *nf;

    /* scratch */
    uint16_t *n1, *n2; /* the current layer's normalized inputs (N, C) at row strides ld_n1, ld_n2 */
    uint16_t *tmp, *G, *dn, *datt, *dmlp, *dy_s, *x_drop;
    /* the attention's input gradients, views of one buffer dqkv (N·(QD + 2·KD)): side by side, [dq │
     * dk │ dv] in rows of ld_dqkv = QD + 2·KD, where q/k/v's input gradient is one product over the
     * three (group_stacked in gpu/llama_layout.cu); else packed one after another (ld_dqkv 0) */
    uint16_t *dqkv, *dq, *dk, *dv;
    int64_t ld_dqkv;
    /* gl_dora_weight_scaled: one group's scaled weights (its scaled members' rows at ldw, in member
     * order), of group dora_w_key % GL_N_GROUPS in layer dora_w_key / GL_N_GROUPS (−1: none; reset at
     * every forward's start, since the magnitude and B change with each optimizer step) */
    uint16_t *dora_w;
    int dora_w_key;
    uint8_t *keep;
    void *ws; /* one workspace, sized for the largest op's need */

    /* fixed */
    int32_t *tokens, *labels, *pos;
    uint16_t *rope_cos, *rope_sin, *ones;
    float *loss_dev, *norm_dev;
    double *nll_acc; /* Σ NLL of the micro-batches since the last optimizer step (device) */
    float *map1, *map2; /* 8-bit optimizer maps */
    unsigned char *a8_tables; /* their encode tables (gpu_adamw8bit_tables_build) */
    int32_t *h_tokens, *h_labels; /* pinned staging: two buffers of N each */
    cudaEvent_t staged[2];        /* the last copy out of each staging buffer */
    int stage;                    /* the buffer the last set_batch filled */
    float *h_scalars;             /* pinned: loss, norm */
    double *h_nll;                /* pinned: the step's Σ NLL */

    int n_params, cap_params, n_tensors;
    gl_param *params;
    gl_tensor *tensors;

    /* the sharded optimizer (gpu/llama_shard.cu): this rank's pieces and its flat arrays; AdamW's
     * moments (and the 8-bit optimizer's 32-bit pieces') in s_m, s_v; the 8-bit pieces' codes in
     * s_q1, s_q2 (at the piece's off) and block maxima in s_absmax1, s_absmax2 (at boff) */
    int sharded;
    struct shard_piece *pieces;
    int n_pieces;
    int64_t shard_elems, shard_blocks, shard_elems32;
    int64_t *piece_boff, *piece_soff;
    float *s_master, *s_m, *s_v, *s_absmax1, *s_absmax2;
    uint8_t *s_q1, *s_q2;
    /* sharded gradients (ZeRO-2, gpu/llama.h): this rank's pieces' accumulated gradients (at off);
     * layer l ≥ 2's gradients are views of layer l − 2's rows */
    int shard_grads;
    float *s_grad;
    unsigned char *stage_pad; /* gl_stage_shared: pads the gradient slab to the largest fp32 master */
    gpu_llama_grad_hook grad_hook; /* data parallelism (gpu/llama.h): called as buckets finish */
    void *grad_hook_ctx;
    gpu_llama_grad_hook grad_gate; /* and before a bucket's gradients are first written */
    void *grad_gate_ctx;
    /* training micro-steps as CUDA graphs (gpu/llama.cu, train_micro_graphed): one per key — the
     * micro-step's scalars and the host's layer caches at its start (the dequantized layer, the FP8
     * layer codes, stale trained codes) — captured at the key's second use */
    int use_graphs;
    struct gl_graph {
        int64_t n_valid;
        uint32_t scale_bits;
        int start[4], end[4]; /* the host caches before and after the micro-step (gl_graph_state) */
        int runs;
        cudaGraphExec_t exec;
    } graphs[8];
    int n_graphs, next_graph;
    cudaEvent_t t_begin, t_end;
    cudaEvent_t *prof_ev; /* pairs */
    int prof_cap, prof_n, prof_on; /* recording between gpu_llama_profile_reset and _print */
    int *prof_cat;
    double prof_ms[N_PROF];
};

/* Full fine-tuning's gradients are bf16 accumulators (options.grads; NUMERICS.md §5.6); adapter
 * gradients are always fp32. */
static inline bool gl_grads_bf16(const gpu_llama *m) {
    return m->opt.mode == LLAMA_FULL && m->opt.grads == GRAD_BF16;
}
/* The output type of a product or kernel that accumulates into full fine-tuning's gradients. */
static inline enum gemm_out gl_grad_type(const gpu_llama *m) { return gl_grads_bf16(m) ? GEMM_OUT_BF16 : GEMM_OUT_F32; }
/* p's gradient as fp32, for the paths that read only fp32 gradients (data parallelism's buckets,
 * the sharded optimizer; the build refuses bf16 gradients with them). */
float *gl_grad_f32(const gpu_llama *m, const gl_param &p);
/* The master is the pair (bf16 copy, low halves): split masters, or bf16 weights (--master bf16:
 * the copy alone, no low halves, p.lo NULL). No fp32 master row; a load stages the fp32 values and
 * splits them into the pair (gl_take_masters, gl_take_staged). */
static inline bool gl_master_in_copy(const gpu_llama *m) {
    return m->opt.master == MASTER_SPLIT || m->opt.master == MASTER_BF16 || m->opt.master == MASTER_BF16_SR;
}
/* The optimizers' master_bf16 (gpu/adamw.h). */
static inline int gl_master_bf16(const gpu_llama *m) { return gpu_adamw_master_bf16(m->opt.master); }
/* Masters in the copy with bf16 gradients: a gradient row cannot hold its tensor's fp32 master, so
 * every master is staged at the gradient slab's start (sized to hold the largest) and split into its
 * pair as soon as it is written (gl_take_staged, llama_layout.cu). */
static inline bool gl_stage_shared(const gpu_llama *m) {
    return !m->sharded && gl_master_in_copy(m) && gl_grads_bf16(m);
}

/* The layer of a tensor named "model.layers.<l>.…", or −1 (llama_layout.cu). */
int gl_layer_of(const char *name);

/* llama_layout.cu: the layout table of m's (config, options) — the plan into m->plan and the
 * trainable tensors into m->params (the host tables must exist); GL_ALLOCATE also allocates every
 * slab (zeroed) and points every buffer into them: 0, or −1 when a slab does not fit (the slabs
 * allocated so far stay in m->slab for free_gpu_llama). */
/* GL_PLAN: sizes only; GL_ALLOCATE: the slabs allocated, every row and view pointed; GL_POINT_HOST:
 * rows and views pointed into slabs at host addresses that are never dereferenced (the layout's
 * decisions read on a machine without a device: gpu_llama_layout_stacking). */
enum gl_layout_mode { GL_PLAN = 0, GL_ALLOCATE, GL_POINT_HOST };
int gl_layout(gpu_llama *m, enum gl_layout_mode mode);
int gl_is_target(const gpu_llama *m, int t);
/* DoRA with o a target: each layer keeps o's output (o_out), which o's magnitude gradient reads
 * (llama_dora_saved), in place of h = x + o — one buffer h_buf for every layer, formed again with n2
 * before the MLP's backward (one pass over x and o_out) — so neither h nor o's z is saved. */
int gl_keeps_o_out(const gpu_llama *m);
/* Under --recompute with recompute_keep (gpu/llama.h): layer l keeps its own saved set and is not
 * recomputed — layers L − recompute_keep .. L − 2 (the top layer is not recomputed either, but reads
 * the shared set its forward left). */
int gl_keeps_set(const gpu_llama *m, int l);
/* DoRA linear t's magnitude folded into its weight (gpu_dora_scale_weight_bf16): a folded group's
 * member without bias (q, k, v, gate, up), so its forward is one product over [x | u] with the
 * scaled padded row, no magnitude pass. Its output is y = (m/n)·z, so its magnitude gradient reads
 * y (DORA_SAVED_Y, gl_dora_saved): v's, gate's and up's as the layer keeps them; q's and k's
 * pre-RoPE output, which the product writes into their z buffers (RoPE then rotates it into q, k). */
int gl_dora_weight_scaled(const gpu_llama *m, int t);
/* What DoRA's magnitude gradient of linear t reads on the GPU: llama_dora_saved's rule, or y where
 * gl_dora_weight_scaled. */
enum dora_saved gl_dora_saved(const gpu_llama *m, int t);

/* llama.cu: layer l's frozen linears as the model reads them in bf16 (W_eff under FP8) into the
 * dequantization buffer (NF4, FP8-stored; a no-op for a bf16 base or when it is already there). */
void gl_dequantize_layer(gpu_llama *m, int l);

/* llama_fp8.cu: the FP8 linears (ref/llama.h "FP8 block linears", the same points and rules). */
/* What a pass needs of a layer's FP8 codes: W (forward), Wᵀ (backward), or W of q, k and v alone
 * (the attention recomputation of RECOMPUTE_ATTN; the frozen bases read it as GL_FP8_W). */
enum gl_fp8_need { GL_FP8_W = 1, GL_FP8_WT = 2, GL_FP8_W_QKV = 4 };
/* The quantizations below cover `rows` rows (N, or an MLP chunk's); `fresh`: the first (or only)
 * part of the tensor — a tensor-wide amax restarts there and the later parts max into it, so a
 * tensor quantized in row chunks records what the whole one does (delayed and block recipes: each
 * element's code depends on the row's scale or the recipe's given one, not on the chunking). */
/* The forward quantization of x (rows, ci), the input of linear `first` and of those sharing it. */
void gl_fp8_input(gpu_llama *m, int l, int first, const uint16_t *x, int ci, int rows, int fresh);
/* SwiGLU's forward straight into down's input codes (gl_fp8_input's: with gl_fp8_inputs_kept x̂ᵀ
 * too and no bf16 MLP input, else the bf16 input into h as well), and its backward straight into
 * gate's and up's dŷ codes (gl_fp8_grad's; gate_up_ready) — with gpu/fp8.h's fused passes, the same
 * codes, records and bf16 values as SwiGLU's bf16 pass and the casts. False (nothing done) where
 * they do not apply: both need delayed scaling and the fused passes' shapes, the backward full
 * fine-tuning. g and u at row stride ld_gu. */
bool gl_fp8_swiglu_forward(gpu_llama *m, int l, const uint16_t *g, const uint16_t *u, int ld_gu, int rows,
                           uint16_t *h);
bool gl_fp8_swiglu_backward(gpu_llama *m, int l, const uint16_t *dh, const uint16_t *g, const uint16_t *u, int ld_gu,
                            int rows);
/* The weight gradient's x̂ᵀ of the same input (full fine-tuning, before the group's backward). */
void gl_fp8_input_t(gpu_llama *m, int l, int first, const uint16_t *x, int ci, int rows, int fresh);
/* dy (rows, C_out) of linear t quantized: for dx = dŷ Ŵ (want_dx) and, in full fine-tuning, with its
 * transposed copy for dW; nothing when neither is wanted (layer 0 of the adapter methods). */
void gl_fp8_grad(gpu_llama *m, int l, int t, const uint16_t *dy, int want_dx, int rows, int fresh);
/* The operands of linear t's products on the last quantizations: x̂, Ŵ (forward: y = x̂ Ŵᵀ); dŷ,
 * Ŵᵀ (dx); dŷᵀ, x̂ᵀ (dW); and the accumulation (gpu/gemm.h's gpu_linear_*_fp8 take them). */
enum gl_fp8_product { GL_FP8_FORWARD = 0, GL_FP8_DX, GL_FP8_DW };
struct gl_fp8_pair {
    gemm_fp8_operand a, b;
    gemm_accum accum;
};
gl_fp8_pair gl_fp8_operands(const gpu_llama *m, int l, int t, enum gl_fp8_product which);
/* Layer l's codes for the pass (GL_FP8_W forward, GL_FP8_WT backward): of the frozen base, or of
 * the trained weights when they are cast a layer at a time (gl_fp8_trained_per_layer). */
void gl_fp8_layer(gpu_llama *m, int l, int need);
/* LoRA's down adapter without dropout at ranks up to 64 (the adapter pass's, gpu/adapter_mma.cuh): its
 * backward joined to SwiGLU's (gpu_lora_backward_swiglu_bf16; gpu/llama.cu's mlp_backward), which can
 * form the MLP input too. */
static inline int gl_lora_down_joined(const gpu_llama_options *o) {
    return o->mode == LLAMA_LORA && ((o->targets >> LLAMA_DOWN) & 1u) && !(o->dropout > 0) && o->R <= 64;
}
/* Full fine-tuning under FP8 with recomputation (--recompute attn or layer: the memory
 * configurations): the trained weights' codes are not stored for every layer but cast a layer at a
 * time from the bf16 copies into two layer buffers — W in the forward, Wᵀ in the backward and W again
 * for what the backward recomputes (q, k, v under attn; every linear under layer), recording
 * nothing; the cast after each optimizer step still runs over every layer for its records (amax
 * history, scales, flags) — the same codes, scales and records, 2 bytes a linear weight less, one
 * more read of the weights a step. */
static inline int gl_fp8_trained_per_layer(const gpu_llama *m) {
    return m->opt.mode == LLAMA_FULL && m->opt.linears == GPU_LINEAR_FP8 && m->opt.recompute != RECOMPUTE_NONE;
}
/* An FP8-stored base under FP8 products with nothing recomputed: its Wᵀ codes are stored beside W's
 * (formed once at load: 2 bytes a weight, still half of a bf16 base's W_eff and two code copies);
 * with any recomputation (--recompute attn|layer, --recompute-mlp: the memory configurations) Wᵀ
 * is formed a layer at a time in backward instead (1 byte a weight). The same codes either way. */
static inline int gl_fp8_base_wt_stored(const gpu_llama *m) {
    return m->opt.base == GPU_BASE_FP8 && m->opt.linears == GPU_LINEAR_FP8 && m->opt.recompute == RECOMPUTE_NONE &&
           m->opt.mlp_input == GPU_MLP_INPUT_SAVED;
}
/* FP8 full fine-tuning under per-tensor scaling (delayed or current) with nothing recomputed: the
 * forward's quantization of each group's input also writes its transposed codes, kept a layer
 * (gl_acts.xt8) for the weight gradients. They are the codes the backward's recast would form
 * (the forward's scale on the same bits: the saved input, or n1 / n2 / the MLP input formed again
 * bit for bit), so the backward recasts no input, forms n1 and n2 again only where it needs h, and
 * never needs the MLP input (gpu_llama_mlp_input_free: one shared buffer, nothing formed again). */
static inline int gl_fp8_inputs_kept(const gpu_llama_options *o) {
    return o->mode == LLAMA_FULL && o->linears == GPU_LINEAR_FP8 && o->fp8_recipe != FP8_RECIPE_BLOCK &&
           o->recompute == RECOMPUTE_NONE;
}
/* The base's bf16 W_eff of layer l into dq_buf from the FP8 codes (NF4 under FP8, FP8-stored). */
void gl_fp8_dequantize_layer(gpu_llama *m, int l);
/* After loading or drawing the weights: the frozen linears' FP8 codes and scales (W_eff into
 * a bf16 base), or the trained ones' marked for quantizing; -1 with e when a weight is not finite. */
int gl_fp8_freeze(gpu_llama *m, io_err *e);
/* A frozen linear of an FP8-stored base from its bf16 values (staging, C_out·C_in). */
void gl_fp8_store(gpu_llama *m, int l, int t, const uint16_t *staging);
/* The staging buffer of gl_fp8_store (one linear in bf16). */
uint16_t *gl_fp8_staging(gpu_llama *m);
/* A forward's start: recording per train, and the trained weights' codes when stale. */
void gl_fp8_begin(gpu_llama *m, int train);
/* Before the optimizer: the step's flags folded (a flag poisons the step's loss sum, so the
 * optimizers skip the update on the device) and its summary. */
void gl_fp8_guard(gpu_llama *m);
/* After the step's wait: the summary read; when the step updated (updated = 1) and no flag
 * skipped it, the delayed update, cleared statistics and the trained weights requantized
 * (enqueued). */
void gl_fp8_step_end(gpu_llama *m, int updated);
/* Drop the step's records (gpu_llama_drop_grads). */
void gl_fp8_drop(gpu_llama *m);
/* A checkpoint wrote the FP8 state (scale_inv and the GEMM's scales from scale), or a parameter
 * (the trained weights' codes are stale). */
void gl_fp8_state_written(gpu_llama *m);

/* llama.cu: NF4 layer l's bf16 dequantization into dq_buf (always: the caller tracks what it holds). */
void gl_nf4_to_bf16(gpu_llama *m, int l);
/* llama.cu: the folded linears' bf16(s·B) from the current B (gpu/lora.h "folded groups"): every
 * layer's on a bf16 base; on an NF4 base layer l's, in the dequantization buffer (l < 0: none). */
void gl_fold_refresh(gpu_llama *m, int l);

/* llama.cu: a bf16 copy of n fp32 values (compute copies). */
void gl_to_bf16(uint16_t *dst, const float *src, int64_t n, cudaStream_t s);

/* llama_shard.cu: the sharded optimizer's part of the layout (this rank's pieces and their flat
 * rows: add_row(rows, slab, ptr, count, elem) adds count elements of elem bytes to slab, the address
 * written to *ptr), its optimizer, its 8-bit steps (every tensor's, or every piece's), this rank's
 * pieces of the masters taken from the staging in the gradient slab after a load, and its
 * checkpoint tensors. */
typedef void (*gl_add_row_fn)(void *rows, enum gl_slab slab, void **ptr, int64_t count, size_t elem);
void gl_shard_rows(gpu_llama *m, void *rows, gl_add_row_fn add_row);
struct gpu_adamw *gl_shard_build_optimizer(gpu_llama *m);
void gl_adamw8bit_steps(gpu_llama *m, const struct gpu_adamw8bit_args *a, cudaStream_t s);
/* which: a layer (its tensors' pieces), or every tensor's, or those outside the layers' */
enum { GL_KEEP_ALL = -2, GL_KEEP_OUTSIDE_LAYERS = -1 };
void gl_shard_keep_pieces(gpu_llama *m, int which);
/* llama_layout.cu: after a load, the masters staged in the gradient slab (a sharded optimizer's,
 * or split masters) become what the model keeps — this rank's pieces (gl_shard_keep_pieces), or
 * the pairs (copy, lo) — and the gradient slab is zeroed. Nothing to do for fp32 masters, which
 * the load wrote in place. With sharded gradients layer l + 2 stages in layer l's rows, so a load
 * calls gl_take_layer_masters after each layer (it waits for the copies), gl_take_masters the rest. */
void gl_take_masters(gpu_llama *m);
void gl_take_layer_masters(gpu_llama *m, int l);
/* gl_stage_shared: the staged master of the tensor whose compute copy is `copy` into its pair. */
void gl_take_staged(gpu_llama *m, const uint16_t *copy);
void gl_shard_tensor_write(gpu_llama *m, int i, const void *host);

#endif /* REFINE_GPU_LLAMA_INTERNAL_H */
