/* bnb4.h — reading a bitsandbytes 4-bit weight's parts, as Linear4bit saves them (NUMERICS.md §1.8).
 *
 * The one parser of this storage, for an HF model folder (io/model_files.c, config.json gives the
 * expected shape) and for a single safetensors file (the golden fixtures). A weight named W (e.g.
 * "model.layers.0.mlp.up_proj.weight") is stored as
 *   W                                      U8  [(n+1)/2, 1]  two NF4 codes per byte, n = out·in
 *   W.absmax                               U8  [n_blocks] with double quantization, else F32 [n_blocks]
 *   W.quant_map                            F32 [16]          the NF4 table
 *   W.nested_absmax                        F32 [ceil(n_blocks / nested_blocksize)]   (nested only)
 *   W.nested_quant_map                     F32 [256]         the signed dynamic map  (nested only)
 *   W.quant_state.bitsandbytes__nf4        U8  [bytes]       UTF-8 JSON: quant_type "nf4",
 *       blocksize, dtype (the weight's own: "float32", "bfloat16" or "float16"), shape [out, in]
 *       (or [n]) and, nested, nested_blocksize, nested_dtype "float32" and a finite nested_offset
 * with n_blocks = ceil(n / blocksize). A quant_state key ending in "__fp4" is bitsandbytes FP4:
 * refused with a message saying NF4 is what refine reads.
 *
 * bnb4_bind checks everything before anything is used: the quant_state tensor (U8, 1-D, at most
 * 64 KiB of JSON), quant_type against the key's suffix, dtype, the blocksize rule
 * (bnb4_blocksize_ok), the nested keys, the shape (positive integers, 1 or 2 of them, and equal to
 * the caller's expected [out, in] when it has one), every part's dtype and shape, and the nested
 * parts present exactly when the quant_state has nested_blocksize. One message names the place
 * (file or folder), the tensor and what was expected. The values are not read here: the NF4 table
 * and the dequantization belong to ref/nf4 (nf4_dequantize_bnb).
 *
 * Tensors are found through a lookup (name → tensor or NULL): bnb4_lookup_file for one
 * safetensors file; a model folder passes its own, which also marks each tensor it hands out as
 * taken (a tensor nobody takes is one the config does not describe). On success every part the
 * weight has was looked up, the nested ones included.
 */
#ifndef REFINE_IO_BNB4_H
#define REFINE_IO_BNB4_H

#include <stdint.h>

#include "io/config.h"
#include "io/error.h"
#include "io/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

struct bnb4_weight {
    enum quant_kind kind;  /* QUANT_BNB_NF4 */
    int blocksize;         /* first-level block (64) */
    int nested;            /* double quantization */
    int nested_blocksize;  /* 256 */
    float nested_offset;   /* added after the nested dequantization */
    char dtype[16];        /* quant_state "dtype": the dtype the weight had, e.g. "bfloat16" */
    int64_t n_blocks;      /* ceil(out·in / blocksize) */
    const struct st_tensor *packed;           /* U8 [(n+1)/2, 1], two codes per byte */
    const struct st_tensor *absmax;           /* U8 [n_blocks] (nested) or F32 [n_blocks] */
    const struct st_tensor *quant_map;        /* F32 [16] */
    const struct st_tensor *nested_absmax;    /* F32 [ceil(n_blocks / nested_blocksize)], or NULL */
    const struct st_tensor *nested_quant_map; /* F32 [256], or NULL */
};

/* find(ctx, name): the tensor of that full name, or NULL. */
struct bnb4_lookup {
    const struct st_tensor *(*find)(void *ctx, const char *name);
    void *ctx;
};

/* The lookup of one safetensors file (safetensors_find). */
struct bnb4_lookup bnb4_lookup_file(const struct safetensors *st);

/* The shape a caller expects, and how it got it (for the message), e.g. source "config.json
 * implies", rule "[intermediate_size, hidden_size]". */
struct bnb4_expect {
    int64_t shape[2];
    const char *source;
    const char *rule;
};

/* 1 for the blocksizes a bitsandbytes 4-bit weight may have: 32, 64, ..., 4096. */
int bnb4_blocksize_ok(int blocksize);

enum bnb4_bind_result { BNB4_BOUND = 0, BNB4_ABSENT = 1, BNB4_BAD = -1 };

/* Binds the parts of weight `name`, looked up through `look`, into b and its shape ([1, n] for a
 * 1-D one) into shape; expect (NULL: none) is checked against the quant_state's shape. `where`
 * (the file or folder) starts every message.
 * Returns BNB4_BOUND; BNB4_ABSENT when the weight has no quant_state (not stored 4-bit: e has a
 * message saying so, for callers that require one); BNB4_BAD with the message in e. */
enum bnb4_bind_result bnb4_bind(struct bnb4_weight *b, int64_t shape[2], struct bnb4_lookup look, const char *where,
                                const char *name, const struct bnb4_expect *expect, struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_BNB4_H */
