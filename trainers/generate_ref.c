/* generate_ref.c — //ref:generate: the generation programs' flow (generate_main.h) on the CPU
 * reference model with a KV cache (ref/generate.h), the oracle of //gpu:generate.
 *
 *   bazel run //ref:generate -- --prompt "In the beginning"
 *
 * The backend copies the (merged) weights; --precision bf16 rounds them and every activation where
 * the GPU engine rounds (the GPU's same-precision twin); linears through OpenBLAS sgemm.
 */

#include "trainers/gen_ref.h"
#include "trainers/generate_main.h"

int main(int argc, char **argv) {
    gen_ref_openblas_coretype(argv);
    return generate_main(argc, argv, &gen_ref_device);
}
