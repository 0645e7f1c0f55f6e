/* gpu_train_main.c — //gpu:train: the shared training program (cli.h) on the GPU engine
 * (gpu_engine.h), one NVIDIA GPU.
 *
 *   bazel run //gpu:train                      LoRA on SmolLM2-135M-Instruct with the default corpus
 *   bazel run //gpu:train -- --help            every flag with its default (the same as //ref:train)
 */
#include "trainers/cli.h"
#include "trainers/comm_nccl.h"
#include "trainers/gpu_engine.h"

int main(int argc, char **argv) {
    static const struct trainer gpu_trainer = {"bazel run //gpu:train --", gpu_engine_check, gpu_engine_create,
                                               gpu_engine_longest_seq, comm_nccl_join};
    return train_main(argc, argv, &gpu_trainer);
}
