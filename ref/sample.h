/* sample.h — choosing the next token from a logits row: transformers' logits processors, greedy
 * choice and seeded sampling.
 *
 * Processing of one row z (V fp32 logits, modified IN PLACE), in transformers' order
 * (GenerationMixin._get_logits_processor: processors, then the sampling warpers; NUMERICS.md §11):
 *   1. repetition penalty ρ ≠ 1 (RepetitionPenaltyLogitsProcessor), over every distinct token t
 *      of the sequence so far (prompt and generated tokens):
 *        z[t] = z[t] < 0 ? z[t]·ρ : z[t]/ρ                       (fp32, once per distinct token)
 *   then, only when sampling (SAMPLE_MULTINOMIAL):
 *   2. temperature τ ≠ 1 (TemperatureLogitsWarper): z = z/τ       (fp32)
 *   3. top-k, k > 0 (TopKLogitsWarper): k' = min(k, V); every z below the k'-th largest value
 *      becomes −inf (ties with the k'-th value are kept);
 *   4. top-p, p < 1 (TopPLogitsWarper): sort z ascending, q = softmax(sorted), c = cumsum(q);
 *      the tokens with c ≤ 1 − p become −inf, but never the largest one (min_tokens_to_keep 1).
 * Greedy (SAMPLE_GREEDY): argmax of the processed row, the FIRST index on ties (torch.argmax).
 * Sampling: π = softmax(z) (double, −inf → 0), and the token is the first t with
 *   Σ_{i≤t} π_i > u · Σ_i π_i, u ∈ [0, 1) the uniform of (seed, stream, step) below — inverse
 *   transform sampling, so the same u gives the same token on any device given the same row.
 * The uniform: splitmix64 of (seed, stream, step) (counter based: a sequence's draws do not depend
 * on which other sequences share its batch). stream: the prompt's index; step: the generated
 * token's index.
 * Differences from transformers' generate() beyond the random stream (torch.multinomial): the
 * defaults here are the identity (τ = 1, k = 0, p = 1, ρ = 1), where transformers' GenerationConfig
 * defaults to top_k = 50.
 * Workspace: ref_sample_workspace_size(V) bytes (8-byte aligned; the sorts of top-k / top-p).
 * NaN logits are not supported (a row holding one gives an unspecified token).
 */
#ifndef REFINE_REF_SAMPLE_H
#define REFINE_REF_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum sample_mode { SAMPLE_GREEDY = 0, SAMPLE_MULTINOMIAL = 1 };

struct sample_params {
    enum sample_mode mode;
    float temperature;        /* > 0; 1: no change */
    int top_k;                /* 0: off */
    float top_p;              /* (0, 1]; 1: off */
    float repetition_penalty; /* > 0; 1: off */
    uint64_t seed;
};

/* The identity processors, greedy. */
void ref_sample_params_default(struct sample_params *p);

/* Steps 1–4 on z (V) given the sequence so far (prev, n_prev tokens, each < V). */
size_t ref_sample_workspace_size(int V);
void ref_sample_process(float *z, int V, const int32_t *prev, int n_prev, const struct sample_params *p,
                        void *workspace);

/* The first index of the largest value (NaN never wins; a row of −inf and NaN gives 0). */
int32_t ref_sample_argmax(const float *z, int V);

/* The uniform in [0, 1) of (seed, stream, step). */
double ref_sample_uniform(uint64_t seed, uint64_t stream, uint64_t step);

/* The sampled token of a processed row for the uniform u. */
int32_t ref_sample_draw(const float *z, int V, double u);

/* process, then argmax or draw(u of (p->seed, stream, step)): the next token. */
int32_t ref_sample_next(float *z, int V, const int32_t *prev, int n_prev, const struct sample_params *p,
                        uint64_t stream, uint64_t step, void *workspace);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_SAMPLE_H */
