/* model_files.h — the weights of an HF model folder, checked against its config before use.
 *
 * model_files_open(m, dir) reads <dir>/config.json (io/config.h) and the checkpoint
 * (<dir>/model.safetensors, or sharded through model.safetensors.index.json), lists every
 * tensor the config implies with its expected shape, and checks each one's presence, dtype and
 * shape BEFORE anything is allocated on a device. Nothing is copied: each weight points into the
 * mapped files. One message names the first problem:
 *   - a missing tensor (all missing counted, a few named, with their expected shapes);
 *   - a tensor with another shape or dtype (the shape's derivation from the config is given);
 *   - tensors the config does not describe (counted, a few named) — usually a config.json of
 *     another model;
 *   - a bitsandbytes 4-bit tensor whose parts disagree with each other or with the config.
 *
 * Expected tensors (HF names; C hidden, F intermediate, H/KVH heads, D head_dim, V vocab):
 *   model.embed_tokens.weight                      [V, C]
 *   model.layers.{i}.input_layernorm.weight          [C]
 *   model.layers.{i}.self_attn.q_proj.weight         [H·D, C]     (+ .bias [H·D] with attention_bias)
 *   model.layers.{i}.self_attn.k_proj.weight         [KVH·D, C]   (+ .bias [KVH·D])
 *   model.layers.{i}.self_attn.v_proj.weight         [KVH·D, C]   (+ .bias [KVH·D])
 *   model.layers.{i}.self_attn.o_proj.weight         [C, H·D]
 *   model.layers.{i}.post_attention_layernorm.weight [C]
 *   model.layers.{i}.mlp.gate_proj.weight            [F, C]
 *   model.layers.{i}.mlp.up_proj.weight              [F, C]
 *   model.layers.{i}.mlp.down_proj.weight            [C, F]
 *   model.norm.weight                                [C]
 *   lm_head.weight                                   [V, C], unless tie_word_embeddings
 * Plain tensors are F32, F16 or BF16. A tied checkpoint may also store lm_head.weight: it is
 * checked for shape and then ignored, as transformers ties it to the embedding
 * (lm_head_stored_but_tied says so); the lm_head weight is then the embedding.
 * "*.rotary_emb.inv_freq" buffers of old conversions are ignored, as transformers does.
 *
 * bitsandbytes 4-bit (NUMERICS.md §1.8): a Linear whose weight W has a
 * W.quant_state.bitsandbytes__nf4 is stored 4-bit; its parts are read and checked by io/bnb4.h,
 * with the shape config.json implies. Which Linears are quantized is read from the checkpoint
 * (bitsandbytes skips modules, lm_head by default); the config must say bitsandbytes 4-bit when
 * any is, its double-quant flag must agree, and FP4 is refused.
 * Dequantization belongs to ref/ (the nf4 op): this file hands over the parts.
 */
#ifndef REFINE_IO_MODEL_FILES_H
#define REFINE_IO_MODEL_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "io/bnb4.h"
#include "io/config.h"
#include "io/error.h"
#include "io/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

enum model_weight {
    MW_EMBED = 0,
    MW_FINAL_NORM,
    MW_LM_HEAD,
    MW_ATTN_NORM, /* first per-layer weight */
    MW_Q,
    MW_K,
    MW_V,
    MW_O,
    MW_Q_BIAS,
    MW_K_BIAS,
    MW_V_BIAS,
    MW_MLP_NORM,
    MW_GATE,
    MW_UP,
    MW_DOWN,
    MW_COUNT
};

#define MW_N_GLOBAL 3
#define MW_N_LAYER (MW_COUNT - MW_N_GLOBAL)

struct model_weight_ref {
    enum model_weight kind;
    int layer;        /* -1 for embed, final norm, lm_head */
    int present;      /* 0: the config has no such weight (a bias without attention_bias) */
    char name[96];    /* the HF name read (for a tied lm_head: model.embed_tokens.weight) */
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* logical shape ([out, in] for a Linear, also when stored packed) */
    const struct st_tensor *t; /* plain storage: F32, F16 or BF16 of that shape; NULL when bnb */
    const struct bnb4_weight *bnb; /* bnb 4-bit storage, else NULL */
};

struct model_files {
    char dir[1024];
    struct model_config config;
    struct sharded_checkpoint ck;
    struct model_weight_ref *weights; /* MW_N_GLOBAL + L·MW_N_LAYER slots; see model_files_get */
    int n_weights;
    struct bnb4_weight *bnb;          /* storage of the bnb parts */
    int n_bnb;
    int lm_head_tied;
    int lm_head_stored_but_tied;
};

int model_files_open(struct model_files *m, const char *dir, struct io_err *e);
void model_files_close(struct model_files *m);

/* The weight of that kind (layer ignored for the global kinds); NULL when the config has none. */
const struct model_weight_ref *model_files_get(const struct model_files *m, enum model_weight kind, int layer);

/* The slot order of a model's weights (model_files.weights, gguf_model.weights): the MW_N_GLOBAL
 * global weights, then MW_N_LAYER a layer. model_weight_slot: the slot of (kind, layer) (layer
 * ignored for the global kinds); model_weight_of_slot: the kind of slot s, and its layer (-1 for
 * the global kinds). */
int model_weight_slot(enum model_weight kind, int layer);
enum model_weight model_weight_of_slot(int s, int *layer);

/* The HF tensor name of a weight, e.g. "model.layers.3.mlp.up_proj.weight". */
void model_weight_name(char *buf, size_t cap, enum model_weight kind, int layer);

/* The expected shape of a weight under config c: returns ndim (1 or 2), or 0 when c has no such
 * weight (biases without attention_bias; lm_head of a tied model counts as present). */
int model_weight_shape(int64_t shape[2], const struct model_config *c, enum model_weight kind);

/* 1 for the Linear weights (q, k, v, o, gate, up, down, lm_head): the ones LoRA may target and
 * bitsandbytes may quantize. */
int model_weight_is_linear(enum model_weight kind);

/* fp32 copy of a plain weight (out holds shape[0]·shape[1] floats); -1 for bnb storage. */
int model_weight_to_f32(float *out, const struct model_weight_ref *w, struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_MODEL_FILES_H */
