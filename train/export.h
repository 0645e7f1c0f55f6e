/* export.h — what a training run leaves for the ecosystem, written from an engine's tensors.
 *
 * export_merged(dir): an HF model folder that transformers loads with from_pretrained:
 *   config.json (io/config.h writer), model.safetensors in BF16 (RNE) with HF names and
 *   metadata {"format": "pt"}. Each adapted Linear is merged in fp32 with double accumulation:
 *     LoRA  W' = W + s·B·A                                     (peft merge_and_unload)
 *     DoRA  W' = (m / ‖W + s·B·A‖_row) ⊙ (W + s·B·A)             (peft DoRA merge; the row norm
 *                                                                 over the input dimension)
 *   with s the adapter scale (α/r, or α/√r for rsLoRA). Full fine-tuning writes the trained
 *   parameters. Base weights come through engine->base_weight_read (dequantized for QLoRA),
 *   trainable ones through tensor_read, so the export is the same for every device.
 *   The whole model is held in host memory as BF16 while writing (2 bytes per parameter).
 *
 * Adapter names are the engine's (train/engine.h): "<module>.lora_A.weight" (R, C_in),
 * "<module>.lora_B.weight" (C_out, R), "<module>.lora_magnitude_vector" (C_out), where module is
 * the HF path of the Linear, e.g. "model.layers.0.self_attn.q_proj".
 */
#ifndef REFINE_TRAIN_EXPORT_H
#define REFINE_TRAIN_EXPORT_H

#include "io/config.h"
#include "io/error.h"
#include "io/model_files.h"
#include "train/engine.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tokenizer;

/* The PEFT adapter folder (io/peft.h: adapter_config.json + adapter_model.safetensors) from the
 * engine's adapter tensors and the run's options (rank, alpha, rsLoRA, dropout, DoRA, targets).
 * base_model: base_model_name_or_path to record ("" writes null). */
int export_peft_adapter(const char *dir, const struct train_options *o, const struct model_config *c,
                        const struct train_engine *eng, const char *base_model, struct io_err *e);

/* The merged fp32 weight (kind, layer) in its HF shape into w: the trained parameter (full), or
 * the base weight with its adapter merged as above. What export_merged rounds to bf16; also the
 * weights of samples during training (trainers/sample_hook.h). */
int export_merged_weight(float *w, const struct model_config *c, const struct train_engine *eng, int full, float scale,
                         enum model_weight kind, int layer, struct io_err *e);

/* scale: the adapter's s (ignored for full fine-tuning, where full = 1). */
int export_merged(const char *dir, const struct model_config *c, const struct train_engine *eng, int full,
                  float scale, struct io_err *e);

/* The merged model as one GGUF file for llama.cpp / Ollama (io/gguf_write.h: llama.cpp's names,
 * q/k row order, metadata, the tokenizer and its chat template): the weights export_merged
 * writes — merged in fp32, rounded to bf16 — converted to F16, BF16 or Q8_0 as llama.cpp's
 * converter converts a bf16 HF folder (norms F32), so the file equals convert_hf_to_gguf.py's
 * output for the merged folder up to metadata. */
int export_gguf(const char *path, const struct model_config *c, const struct train_engine *eng, int full, float scale,
                const struct tokenizer *tok, enum gguf_out_type type, struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_EXPORT_H */
