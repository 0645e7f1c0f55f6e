/* sample_hook.h — the samples of training (--sample-every) for any engine: a generate hook
 * (train/engine.h) built on the engine's own interface, so that it needs nothing of the engine's
 * device code.
 *
 * At each call the weights as the engine holds them now are read out through
 * export_merged_weight (train/export.h: base weights with the adapters merged in fp32, or the
 * trained weights) into ref/llama's layout, a generation backend of `dev` (gen_backend.h: the CPU
 * reference for //ref:train, the GPU model for //gpu:train) is built for the prompts, they are
 * completed greedily (trainers/gen_run.h) and the backend is freed: a sample costs one read of the
 * weights and the device memory of one more bf16 copy of them (GPU) while it runs.
 * Wiring: an engine's creator calls sample_hook_attach(eng, &src->config, &gen_ref_device) (or
 * gen_gpu_device) after filling eng.
 */
#ifndef REFINE_TRAINERS_SAMPLE_HOOK_H
#define REFINE_TRAINERS_SAMPLE_HOOK_H

#include "io/config.h"
#include "train/engine.h"
#include "trainers/gen_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets eng->generate and eng->gen_state (malloc'ed: train_main frees it after the engine's
 * destroy; sample_hook_detach frees it earlier). full: --method full. */
void sample_hook_attach(struct train_engine *eng, const struct model_config *c, const struct gen_device *dev,
                        int full);
void sample_hook_detach(struct train_engine *eng);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_SAMPLE_HOOK_H */
