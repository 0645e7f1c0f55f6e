/* generate_gpu.c — //gpu:generate: the generation programs' flow (generate_main.h) on one NVIDIA
 * GPU (gpu/generate.h: bf16 weights and KV cache, batched decoding of --prompts).
 *
 *   bazel run //gpu:generate -- --prompt "In the beginning"
 *   bazel run //gpu:generate -- --model M --adapter runs/X/adapter --chat
 *
 * Its oracle is //ref:generate (tests/parity/generate_parity.c).
 */
#include "trainers/gen_gpu.h"
#include "trainers/generate_main.h"

int main(int argc, char **argv) { return generate_main(argc, argv, &gen_gpu_device); }
