/* ref_train_main.c — //ref:train: the shared training program (cli.h) on the CPU engine
 * (cpu_engine.h), the oracle trainer of refine.
 *
 *   bazel run //ref:train                      LoRA on SmolLM2-135M-Instruct with the default corpus
 *   bazel run //ref:train -- --help            every flag with its default
 *
 * What it does: opens the model (HF folder or GGUF, io/model_source.h) and its tokenizer, reads
 * and packs the data (train/data.h), builds the CPU engine, runs the training loop, and writes the
 * PEFT adapter (and with --export merged an HF model) into --out.
 */
#include <stdlib.h>
#include <unistd.h>

#include "trainers/cli.h"
#include "trainers/cpu_engine.h"

/* OpenBLAS picks its kernels from the CPU model at load time and falls back to its generic SSE3
 * kernels on virtual CPUs that report an unknown model (seen on cloud VMs: 3× slower sgemm). When
 * the user has not chosen, name the kernel family from the instruction set and restart once. */
static void openblas_coretype(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") != NULL) return;
    __builtin_cpu_init();
    const char *t = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell" : NULL;
    if (t == NULL || setenv("OPENBLAS_CORETYPE", t, 1) != 0) return;
    execv("/proc/self/exe", argv); /* on failure: carry on with the generic kernels */
}

int main(int argc, char **argv) {
    openblas_coretype(argv);
    static const struct trainer cpu_trainer = {"bazel run //ref:train --", cpu_engine_check, cpu_engine_create, NULL, NULL};
    return train_main(argc, argv, &cpu_trainer);
}
