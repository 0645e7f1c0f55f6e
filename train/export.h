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
#include "train/engine.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The PEFT adapter folder (io/peft.h: adapter_config.json + adapter_model.safetensors) from the
 * engine's adapter tensors and the run's options (rank, alpha, rsLoRA, dropout, DoRA, targets).
 * base_model: base_model_name_or_path to record ("" writes null). */
int export_peft_adapter(const char *dir, const struct train_options *o, const struct model_config *c,
                        const struct train_engine *eng, const char *base_model, struct io_err *e);

/* scale: the adapter's s (ignored for full fine-tuning, where full = 1). */
int export_merged(const char *dir, const struct model_config *c, const struct train_engine *eng, int full,
                  float scale, struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_EXPORT_H */
