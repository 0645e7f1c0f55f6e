/* gen_ref.h — the CPU backend of the generation programs (gen_backend.h) over ref/generate.h:
 * fp32 (the oracle) or bf16 (weights and activations rounded where the GPU engine rounds). The
 * backend holds its own copy of the weights. Linears through OpenBLAS sgemm unless naive is asked
 * (gen_ref_create with blas = 0: the bit-reproducible double-sum loops). */
#ifndef REFINE_TRAINERS_GEN_REF_H
#define REFINE_TRAINERS_GEN_REF_H

#include "trainers/gen_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const struct gen_device gen_ref_device;

int gen_ref_create(struct gen_backend *b, const struct model_config *c, const struct llama_weights *w, int S,
                   int T_max, enum gen_precision p, int blas, struct io_err *e);

/* OpenBLAS picks generic kernels on virtual CPUs that report an unknown model (3× slower sgemm):
 * when OPENBLAS_CORETYPE is unset and the CPU has AVX2 and FMA, set Haswell and restart once. */
void gen_ref_openblas_coretype(char **argv);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_GEN_REF_H */
