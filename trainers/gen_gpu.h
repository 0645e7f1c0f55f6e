/* gen_gpu.h — the GPU backend of the generation programs (gen_backend.h) over gpu/generate.h:
 * bf16 weights and cache on one CUDA device, greedy argmax on the device (decode_argmax), logits
 * rows to the host when sampling (the sampler of ref/sample.h then runs on the host: the same
 * code and the same random stream as the CPU program, and a V-float row per token is a small
 * copy next to a decode step's weight reads). */
#ifndef REFINE_TRAINERS_GEN_GPU_H
#define REFINE_TRAINERS_GEN_GPU_H

#include "trainers/gen_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const struct gen_device gen_gpu_device;

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_GEN_GPU_H */
