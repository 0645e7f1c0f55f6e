/* llama.h — the Llama model (HF LlamaForCausalLM / Qwen2ForCausalLM) composed from the reference
 * ops: forward to the loss, backward for full fine-tuning and for LoRA / DoRA adapters.
 *
 * Model (NUMERICS.md §7; transformers modeling_llama.py), N = B·T rows, row n = b·T + t:
 *   x_0      = embed[ids]                                         ref/embedding.h
 *   for each layer l:
 *     n1     = rmsnorm(x_l; attn_norm)                            ref/rmsnorm.h
 *     q,k,v  = n1 Wqᵀ (+bq), n1 Wkᵀ (+bk), n1 Wvᵀ (+bv)           ref/linear.h (+ adapter)
 *     q,k    = rope(q), rope(k) at positions p                    ref/rope.h (llama3 scaling)
 *     a      = attention(q, k, v), causal, GQA, scale 1/√D        ref/attention.h
 *     h      = act(x_l + a Woᵀ)
 *     n2     = rmsnorm(h; mlp_norm)
 *     m      = swiglu(n2 Wgᵀ, n2 Wuᵀ)                             ref/swiglu.h
 *     x_l+1  = act(h + m Wdᵀ)
 *   nf       = rmsnorm(x_L; final_norm)
 *   loss     = Σ_valid (logsumexp(nf Wheadᵀ) − z_y) / n_valid     ref/cross_entropy.h (fused: the
 *              (N, V) logits never exist); Whead = embed when tied.
 * Positions: p = t (each sequence starts at 0) unless the batch gives positions (packing; the
 * attention stays causal over the whole row, as HF's with position_ids alone: documents packed in
 * one row are not masked from each other).
 * Targets are the SHIFTED labels: targets[n] is the token predicted at row n (HF's labels[b, t+1],
 * −100 for the last position and ignored tokens); the caller shifts (ForCausalLMLoss semantics).
 *
 * Adapters. Each of the seven linears (LLAMA_Q .. LLAMA_DOWN) may carry, per options.targets:
 *   LoRA  y += s·x Aᵀ Bᵀ                                         ref/lora.h
 *   DoRA  y = b + (m/‖W + sBA‖_row)·(x Wᵀ + s·x Aᵀ Bᵀ)           ref/dora.h (direct row norm,
 *         recomputed from W, A, B at every forward, detached as in PEFT)
 * with s = ref_lora_scale(alpha, R, scaling). Adapter dropout is not modelled (p = 0, PEFT's
 * nn.Identity). In LoRA/DoRA modes every base weight (embeddings, norms, linears, biases) is
 * frozen and only the adapters train; in LLAMA_FULL every base weight trains.
 * QLoRA / QDoRA: the base linears are NF4 in the checkpoint; they are dequantized (ref/nf4; done
 * by ref_llama_weights_load for a bitsandbytes checkpoint) into the weight struct, as
 * bitsandbytes' Linear4bit multiplies by the dequantized weight with compute dtype fp32. Nothing
 * else differs.
 *
 * Activations: act() is the identity for ACT_F32 and bf16 rounding where the GPU stores bf16
 * (passed to every op; residual adds rounded here). Weights are used as given (bf16-representable
 * for a bf16 model: the caller's business).
 *
 * Memory: every activation lives in ONE slab of ref_llama_slab_floats() floats, carved by a plan
 * computed from (config, options, B, T). Without recomputation the slab holds every layer's saved
 * activations; with options.recompute it holds each layer's input x_l and one layer's working set,
 * and backward re-runs each layer's forward from x_l before its backward: the same code on the
 * same input, so gradients are bit-identical to the non-recomputing path.
 *
 * Calls: ref_llama_forward fills the slab and returns the loss (double). ref_llama_backward uses
 * the slab of the immediately preceding forward (same weights, batch and options) and
 * ACCUMULATES parameter gradients (dw += ...): into grads (LLAMA_FULL; tied: grads->embed
 * receives the lm_head and embedding gradients, lm_head first) or into agrads (LoRA/DoRA). Zero
 * them before the first micro-batch. grad_scale multiplies the loss gradient (1 normally).
 * n_valid_total: valid targets of the whole optimizer batch (HF num_items_in_batch); 0 means
 * "count this batch's". A batch with no valid target is a CHECK failure (HF gives NaN).
 *
 * Linear layers go through ref_linear_*_naive (double sums in index order, bit-reproducible on
 * any machine) unless options.linear is LINEAR_BLAS (sgemm: faster, reproducible on one machine).
 * Attention: the flash-style tiled form (no T×T matrix is saved) unless options.attn is ATTN_NAIVE.
 * Not thread-safe across calls sharing a slab. Aliasing: none (weights, grads, slab disjoint).
 */
#ifndef REFINE_REF_LLAMA_H
#define REFINE_REF_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "io/config.h"
#include "io/error.h"
#include "io/family.h"
#include "io/model_source.h"
#include "ref/dora.h"
#include "ref/fp8_linear.h"
#include "ref/lora.h"
#include "ref/rope.h"
#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

enum llama_mode {
    LLAMA_FULL = 0, /* every base weight trains */
    LLAMA_LORA = 1, /* base frozen; LoRA adapters on options.targets train */
    LLAMA_DORA = 2, /* base frozen; DoRA adapters (A, B, magnitude) on options.targets train */
};

/* The training methods (the trainers' --method): the model's mode, and whether its frozen base
 * linears are NF4 (QLoRA, QDoRA: bitsandbytes' layout, ref/nf4.h). The vocabulary of every
 * trainer, engine and model of refine. */
enum train_method { METHOD_LORA = 0, METHOD_DORA, METHOD_QLORA, METHOD_QDORA, METHOD_FULL, METHOD_COUNT };
/* "lora", "dora", "qlora", "qdora", "full" (index = enum value; NULL-terminated). */
extern const char *const train_method_names[METHOD_COUNT + 1];
enum llama_mode llama_method_mode(enum train_method m);
int llama_method_nf4(enum train_method m); /* 1 for QLoRA and QDoRA */

/* Activation recomputation in backward (the trainers' --recompute). The reference model knows
 * one form, the whole layer (RECOMPUTE_ATTN recomputes the layer here: the same numbers, since
 * recomputation runs the same code on the same input); the GPU model implements all three. */
enum recompute_policy { RECOMPUTE_NONE = 0, RECOMPUTE_ATTN, RECOMPUTE_LAYER, RECOMPUTE_COUNT };
extern const char *const recompute_names[RECOMPUTE_COUNT + 1]; /* "none", "attn", "layer", NULL */

/* How the reference computes its linears and attention (same math, different speed). */
enum linear_impl { LINEAR_NAIVE = 0, LINEAR_BLAS };
enum attn_impl { ATTN_FLASH = 0, ATTN_NAIVE };

struct llama_options {
    enum llama_mode mode;
    unsigned targets;          /* bit (1u << t) per adapted linear (LoRA/DoRA modes) */
    int R;                     /* adapter rank */
    double alpha;              /* lora_alpha */
    enum lora_scaling scaling; /* α/R or α/√R */
    enum act_dtype act;
    enum recompute_policy recompute; /* not NONE: save only each layer's input, re-run the layer in backward */
    enum linear_impl linear;         /* LINEAR_BLAS: cblas_sgemm; LINEAR_NAIVE: the double-sum loops */
    enum attn_impl attn;             /* ATTN_NAIVE: saves P, B·H·T² floats per layer; ATTN_FLASH: tiled */
    int attn_block_q; /* flash tiles (≥ 1; 0 picks 16) */
    int attn_block_k;
    int ce_n_chunk; /* fused cross-entropy chunks (≥ 1; 0 picks 64 rows × 256 vocabulary rows) */
    int ce_v_chunk;
};

/* Options with the defaults: LLAMA_FULL, all targets, R = 8, alpha = 16, ACT_F32, naive linears,
 * flash attention, no recomputation. */
void ref_llama_options_default(struct llama_options *o);

/* Base weights. w[t] is (C_out, C_in) row-major (dequantized NF4 for QLoRA/QDoRA). bias[t] is
 * non-NULL only for q/k/v when config.attention_bias. lm_head == embed when tied. */
struct llama_layer {
    float *attn_norm; /* (C) input_layernorm */
    float *mlp_norm;  /* (C) post_attention_layernorm */
    float *w[LLAMA_N_LINEAR];
    float *bias[LLAMA_N_LINEAR];
};

struct llama_weights {
    float *embed;      /* (V, C) model.embed_tokens */
    float *lm_head;    /* (V, C); == embed when tie_word_embeddings */
    float *final_norm; /* (C) model.norm */
    struct llama_layer *layers; /* L */
};

/* Adapters of one linear: a (R, C_in), b (C_out, R), mag (C_out, DoRA only); all NULL when the
 * linear is not a target. */
struct llama_adapter {
    float *a;
    float *b;
    float *mag;
};

struct llama_adapters {
    struct llama_adapter (*layers)[LLAMA_N_LINEAR]; /* L × 7 */
};

/* Allocation helpers (malloc; exit with a message when memory runs out). Every tensor is
 * allocated (zeroed) with the shapes the config implies; alloc_grads of a tied model makes
 * lm_head alias embed, like the weights. adapters_alloc allocates the targets of o only. */
void ref_llama_weights_alloc(struct llama_weights *w, const struct model_config *c);
void ref_llama_weights_free(struct llama_weights *w, const struct model_config *c);
void ref_llama_adapters_alloc(struct llama_adapters *a, const struct model_config *c, const struct llama_options *o);
void ref_llama_adapters_free(struct llama_adapters *a, const struct model_config *c);

/* PEFT's initialization of the adapters of o (ref_lora_init: A uniform ±1/√C_in, B = 0), every
 * target of every layer in order (layer 0 q, k, v, o, gate, up, down, then layer 1, ...), from
 * one splitmix64 stream seeded with seed ^ 0x5EEDA11CE5: the same values in every trainer for the
 * same --seed. DoRA magnitudes are left to the caller (m = ‖W‖_row, which needs the weights in the
 * precision the trainer computes with). */
void ref_llama_adapters_init(struct llama_adapters *a, const struct model_config *c, const struct llama_options *o,
                             uint64_t seed);

/* Fills w (from ref_llama_weights_alloc with s->config) from a model opened by io/model_source.h
 * (an HF folder or a GGUF file): every weight as fp32 in its HF shape (F32, F16, BF16, GGUF
 * quantized types dequantized by io/gguf); a tied lm_head is the embedding. bitsandbytes 4-bit
 * linears (a pre-quantized QLoRA checkpoint) are dequantized to fp32 by ref/nf4, as
 * bitsandbytes' Linear4bit does with compute dtype fp32. Returns 0, or -1 with a message. */
int ref_llama_weights_load(struct llama_weights *w, const struct model_source *s, struct io_err *e);

/* The tensors of a model in a fixed order, with their HF / PEFT names: base weights as in an HF
 * checkpoint ("model.layers.0.self_attn.q_proj.weight", "model.norm.weight", "lm_head.weight"
 * only when untied), adapters as in PEFT's adapter_model.safetensors
 * ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", "...lora_B.weight",
 * "...lora_magnitude_vector"). trainable says whether the mode trains it. a may be NULL (no
 * adapters listed). Returns the count; list may be NULL to count only. */
struct llama_tensor {
    char name[112];
    float *data;
    int64_t numel;
    int ndim;
    int64_t shape[2];
    int trainable;
};

int ref_llama_tensors(struct llama_tensor *list, const struct model_config *c, const struct llama_options *o,
                      const struct llama_weights *w, const struct llama_adapters *a);

/* One micro-batch: ids, targets (N) int32; positions (N) int32 or NULL for 0..T−1 per row. */
struct llama_batch {
    int B;
    int T;
    const int32_t *ids;
    const int32_t *targets;
    const int32_t *positions;
    int64_t n_valid_total;
};

/* The model's fixed state for one (config, options, B, T): the rope tables and the slab plan.
 * init builds the rope cache (max_pos = T, or more when positions need it: max_pos ≥ every
 * position used) and computes the plan; free releases the rope cache. */
struct llama_plan_layer {
    size_t x, rstd1, n1, q, k, v, att, lse, attw, h, rstd2, n2, gate, up, mlp;
    size_t u[LLAMA_N_LINEAR];     /* adapter intermediates x Aᵀ (N, R) */
    size_t wnorm[LLAMA_N_LINEAR]; /* DoRA row norms (C_out) */
};

struct llama_model {
    struct model_config cfg;
    struct llama_options opt;
    int B, T;
    struct ref_rope_cache rope;
    int32_t *pos0;    /* (N) default positions t of row b·T + t */
    float lora_scale; /* s of the adapters */
    float attn_scale; /* fp32(1/√D) */
    /* slab plan (offsets in floats) */
    size_t per_layer;              /* floats of one layer's saved set */
    size_t layer_stride;           /* per_layer without recompute, else 0 (one shared set) */
    size_t x_in;                   /* (L + 1) × (N, C): each layer's input; x_in[L] = x_L */
    size_t layer0;                 /* first layer set */
    struct llama_plan_layer pl;    /* offsets inside one layer set */
    size_t rstd_f, nf;             /* final norm */
    size_t scratch;                /* backward scratch */
    size_t scratch_floats;
    size_t total;                  /* floats of the whole slab */
    struct llama_fp8 *fp8;         /* FP8 block linears (below), or NULL; ref_llama_init sets NULL */
};

struct llama_fp8;

void ref_llama_init(struct llama_model *m, const struct model_config *c, const struct llama_options *o, int B, int T,
                    int max_pos);
void ref_llama_free(struct llama_model *m);

/* Floats of the slab (== m->total). */
size_t ref_llama_slab_floats(const struct llama_model *m);

/* Forward: fills slab, returns the loss (mean over n_valid_total). logits (N, V) is written when
 * non-NULL (a separate lm_head GEMM for tests and evaluation; the loss never needs it). */
double ref_llama_forward(const struct llama_model *m, const struct llama_weights *w, const struct llama_adapters *a,
                         const struct llama_batch *batch, float *slab, float *logits);

/* Backward of the preceding forward. grads: LLAMA_FULL (else NULL); agrads: LoRA/DoRA (else
 * NULL). The slab's saved activations are consumed (overwritten by scratch). */
void ref_llama_backward(const struct llama_model *m, const struct llama_weights *w, const struct llama_adapters *a,
                        const struct llama_batch *batch, float *slab, struct llama_weights *grads,
                        struct llama_adapters *agrads, float grad_scale);


/* ---- FP8 block linears (--precision fp8; ref/fp8_linear.h, NUMERICS.md §6.6) ------------------
 *
 * With m->fp8 set, the seven linears of every block compute their products in FP8 (the lm_head,
 * the embedding, attention, the norms and the adapters' thin products stay as they are; the
 * adapters read the act-precision x and dy):
 *   forward  each linear's input is quantized (E4M3) once — the q, k, v linears share one
 *            quantization of n1, gate and up one of n2, as the GPU does — and y = x̂ Ŵᵀ (+ b);
 *   backward dy (E5M2; DoRA: the rescaled dy_s = act(mns⊙dy), as the GPU) is quantized for
 *            dx = dŷ Ŵ, with its transposed copy when W trains; the weight gradient of full
 *            fine-tuning is dŷᵀ x̂ᵀ, x̂ᵀ from the input re-quantized with the forward's scale (per
 *            tensor: the same codes; 1×128: the second quantization along N) once per group.
 *            Layer 0's input gradient is not formed in the adapter methods (nothing upstream
 *            trains): its q, k, v dy are not quantized.
 *   DoRA     the pre-magnitude output z = act((ŷ − b) + s·(u Bᵀ)) is kept from the forward (in the
 *            state) for dm = Σ dy·z / n, as the GPU keeps it.
 * Tensor rows: the x, W and dy of linear t of layer l are rows (role·L + l)·7 + t of the state
 * (role FP8_ROLE_X, _W, _DY: the E4M3 rows first, then the E5M2 rows).
 * Weights are quantized by ref_llama_fp8_quantize_weights into w / w_t (the model never quantizes
 * a weight itself): frozen weights once, with their exact scale (fp8_rule_for), and the caller
 * replaces them by W_eff = dequant(quant(W)) (ref_llama_fp8_freeze_weights); trained weights after
 * every optimizer step from the compute copy, under the recipe.
 * Recording (recording = FP8_RECORD, training micro-batches): each quantization of an activation
 * or a gradient max-records its amax in its row's delayed history slot 0 (delayed) or stores its
 * scale in scale[row] (current, block: the metrics' value), adds its saturated codes and ORs its
 * flags (per row and for the step); the trained weights' quantizations OR their flags. FP8_DISCARD (evaluation, recomputation in backward) quantizes with the same
 * scales and records nothing, so that evaluation and --recompute never change training.
 * ref_llama_fp8_step_end, once per optimizer step: delayed: fp8_delayed_update of every row (TE's
 * amax_and_scale_update); then the step's statistics are cleared. */
enum fp8_recording { FP8_RECORD = 0, FP8_DISCARD = 1 };

struct llama_fp8 {
    enum fp8_recipe recipe;
    enum fp8_weight_kind weights; /* FP8_WEIGHT_TRAINED in full fine-tuning, else FROZEN */
    enum fp8_product how;         /* FP8_PRODUCT_BLAS with LINEAR_BLAS, else EXACT */
    enum fp8_recording recording;
    int L, n;                     /* n = 3·L·7 rows */
    int history_len;              /* FP8_DELAYED_HISTORY_LEN (delayed), else 0 */
    float *history;               /* (n, history_len), delayed */
    float *scale;                 /* (n): delayed: the scale each row quantizes with (start 1);
                                     current, block: the last recorded quantization's (metrics) */
    unsigned *flags;              /* (n) the step's ref/fp8.h flags per row */
    int64_t saturated;            /* the step's saturated codes */
    struct fp8_operand (*w)[LLAMA_N_LINEAR], (*w_t)[LLAMA_N_LINEAR]; /* L × 7 */
    float *(*z)[LLAMA_N_LINEAR];  /* DoRA: L × 7 pre-magnitude outputs (N, C_out) of the targets that
                                     read z (llama_dora_saved), and o's output */
    struct fp8_operand xq, xt, dq, dt; /* scratch operands: an input, its transposed copy, dy, dyᵀ */
    float *dys;                   /* DoRA: (N, max C_out) the rescaled dy */
    float *ws;                    /* the products' workspace */
};

/* What DoRA's backward reads for linear t's magnitude gradient (ref/dora.h): its output where the
 * layer keeps it anyway — gate and up for SwiGLU's backward, v for attention's, bias-free (Qwen2's
 * q/k/v carry a bias) — and o's (never biased), kept in place of h, which the backward forms again
 * as x + o (gpu/llama.cu); else a saved pre-magnitude z (q, k, down, biased v). The GPU keeps no z
 * for the former: 4.6 GiB of Llama-3.2-1B's 16×512 step. Both trainers decide by this one rule. */
static inline enum dora_saved llama_dora_saved(const struct model_config *c, enum llama_linear t) {
    return t == LLAMA_GATE || t == LLAMA_UP || t == LLAMA_O || (t == LLAMA_V && !c->attention_bias) ? DORA_SAVED_Y
                                                                                                       : DORA_SAVED_Z;
}

/* Allocates the state of a model (config c, options o with their targets and mode, N = B·T rows)
 * under recipe r; delayed histories zero and scales 1. Exits with a message when memory runs out. */
void ref_llama_fp8_alloc(struct llama_fp8 *s, const struct model_config *c, const struct llama_options *o, int N,
                         enum fp8_recipe r);
void ref_llama_fp8_free(struct llama_fp8 *s);
static inline int llama_fp8_row(int L, enum fp8_role role, int l, enum llama_linear t) {
    return ((int)role * L + l) * LLAMA_N_LINEAR + (int)t;
}
/* "model.layers.3.self_attn.q_proj's input" / "weight" / "output gradient" for row. */
void llama_fp8_row_describe(char *buf, size_t cap, int L, int row);
/* Whether row is quantized at all in mode (layer 0's q, k, v dy are not in the adapter modes). */
int llama_fp8_row_active(int L, enum llama_mode mode, int row);

/* Quantizes every linear weight of w into s->w, s->w_t under s's rule for weights, recording its
 * amax (delayed) or scale (current, block) in its row; rec = FP8_RECORD also ORs its flags into
 * the row's. A weight's saturated codes are never counted (the statistic is the activations' and
 * gradients': so that a resumed run, which quantizes its weights again, counts what the
 * uninterrupted one counts). */
void ref_llama_fp8_quantize_weights(struct llama_fp8 *s, const struct model_config *c, const struct llama_weights *w,
                                    enum fp8_recording rec);
/* Frozen weights: quantize_weights, then every linear of w becomes dequant(quant(W)); a weight
 * holding a NaN or an Inf gets FP8_FLAG_INPUT_NONFINITE in its row (ref_llama_fp8_first_flagged:
 * the caller refuses the model — the cast would clamp an Inf silently). */
void ref_llama_fp8_freeze_weights(struct llama_fp8 *s, const struct model_config *c, struct llama_weights *w);
/* The step's metrics: the range of scale[] over the active rows. */
void ref_llama_fp8_scale_range(const struct llama_fp8 *s, enum llama_mode mode, float *lo, float *hi);
/* The end of an optimizer step (above); returns the delayed updates' flags. */
unsigned ref_llama_fp8_step_end(struct llama_fp8 *s);
/* The first row with a flag, or −1. */
int ref_llama_fp8_first_flagged(const struct llama_fp8 *s);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_LLAMA_H */
