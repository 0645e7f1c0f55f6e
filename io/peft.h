/* peft.h — PEFT LoRA / DoRA adapter folders: adapter_config.json + adapter_model.safetensors
 * (NUMERICS.md §3), written so that PeftModel.from_pretrained loads them unchanged, and read back
 * (to resume or to merge).
 *
 * Writing (peft_write): adapter_config.json holds every key PEFT 0.21.2's LoraConfig writes,
 * formatted as PeftConfig.save_pretrained does (json.dumps(..., indent=2, sort_keys=True),
 * ASCII-escaped), with r, lora_alpha, lora_dropout, use_rslora, use_dora, target_modules (the
 * module names, in model order), base_model_name_or_path (null when empty), task_type
 * "CAUSAL_LM", peft_type "LORA", bias "none", fan_in_fan_out false, init_lora_weights true,
 * modules_to_save null, inference_mode true, and the others at PEFT's defaults.
 * adapter_model.safetensors (io/safetensors.h writer, metadata {"format": "pt"}) holds, for each
 * adapted Linear with HF module path P (e.g. model.layers.3.self_attn.q_proj; in → out):
 *   base_model.model.P.lora_A.weight        F32 [R, in]     (lora_a)
 *   base_model.model.P.lora_B.weight        F32 [out, R]    (lora_b)
 *   base_model.model.P.lora_magnitude_vector F32 [out]      (DoRA's m; no ".weight", as PEFT saves it)
 * Both files are written atomically (io/file.h); the folder is created.
 *
 * Reading (peft_read): the config must say peft_type "LORA" with a positive integer r, a numeric
 * lora_alpha, bias "none", fan_in_fan_out false, no modules_to_save, rank_pattern/alpha_pattern
 * empty, no lora_bias, no LoRA variant that computes something else (QA-LoRA, aLoRA, ...), and an
 * init_lora_weights that leaves the base weights as they are (true, false, "gaussian", "eva",
 * "orthogonal"; PiSSA, OLoRA, CorDA, LoftQ adapters only fit their rewritten base); target_modules a list of the seven Llama Linear names, "all-linear", or
 * null (PEFT's Llama default q_proj, v_proj); layers_to_transform null or a list of layers.
 * Every tensor name must be one of the three forms above for a targeted module (F32, F16 or BF16;
 * copied to fp32), every module must have both factors (and a magnitude exactly when use_dora),
 * with consistent shapes. Given the base model's config, every targeted module of every
 * (transformed) layer must be there with [R, in] / [out, R] / [out] matching the base's Linear —
 * an adapter for another base is refused with the shapes that disagree.
 *
 * Scale convention (ref/lora.h): s = lora_alpha / R, or lora_alpha / sqrt(R) with use_rslora.
 */
#ifndef REFINE_IO_PEFT_H
#define REFINE_IO_PEFT_H

#include <stdint.h>

#include "io/config.h"
#include "io/error.h"
#include "io/model_files.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The PEFT adapter_config.json format version written (the keys of that PEFT release). */
#define PEFT_FORMAT_VERSION "0.21.2"

struct peft_config {
    int r;
    double lora_alpha;
    double lora_dropout;
    int use_rslora;
    int use_dora;
    unsigned targets;           /* bit (1u << kind) for kind in MW_Q, MW_K, MW_V, MW_O, MW_GATE, MW_UP, MW_DOWN */
    char base_model[1024];      /* base_model_name_or_path; "" writes null */
    int n_layers_to_transform;  /* 0: all layers */
    int layers_to_transform[64];
};

/* One adapted Linear: fp32, row-major. magnitude only with use_dora. */
struct peft_module {
    enum model_weight kind; /* MW_Q .. MW_DOWN (a Linear other than lm_head) */
    int layer;
    int64_t in, out;
    const float *lora_a;    /* [R, in] */
    const float *lora_b;    /* [out, R] */
    const float *magnitude; /* [out] or NULL */
};

/* "q_proj" for MW_Q, ..., NULL for a kind PEFT adapters of refine cannot target. */
const char *peft_module_name(enum model_weight kind);

/* The safetensors key of one part: part is "lora_A.weight", "lora_B.weight" or
 * "lora_magnitude_vector". */
void peft_key(char *buf, size_t cap, enum model_weight kind, int layer, const char *part);

/* Writes <dir>/adapter_config.json and <dir>/adapter_model.safetensors. */
int peft_write(const char *dir, const struct peft_config *c, const struct peft_module *mods, int n, struct io_err *e);

/* The adapter_config.json text peft_write writes (heap, NUL-terminated; the caller frees). */
char *peft_config_json(const struct peft_config *c, struct io_err *e);

struct peft_adapter {
    struct peft_config config;
    int n;
    struct peft_module *mods; /* sorted by (layer, kind); arrays owned (heap) */
};

/* Reads the adapter in dir. base (may be NULL) is the config of the model it must fit. */
int peft_read(struct peft_adapter *a, const char *dir, const struct model_config *base, struct io_err *e);
/* Parses adapter_config.json text; `name` is used in messages. */
int peft_config_parse(struct peft_config *c, const char *json, size_t len, const char *name, struct io_err *e);
void peft_free(struct peft_adapter *a);
const struct peft_module *peft_find(const struct peft_adapter *a, enum model_weight kind, int layer);

/* s = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora. */
double peft_scale(const struct peft_config *c);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_PEFT_H */
