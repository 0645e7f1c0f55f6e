/* nf4.h — bitsandbytes NF4 4-bit blockwise quantization with double quantization (NUMERICS.md §1).
 *
 * Table (csrc/kernels.cu nf4_dequantization_lut, functional.py get_4bit_type("nf4")): nf4_table[16],
 * ascending, code 7 = 0, code 15 = 1, code 0 = −1. Stored as fp32 literals.
 *
 * Quantize (bnb quantize_4bit, CUDA kQuantizeBlockwise with dQuantizeNF4), x flat of n elements:
 *   blocks of `blocksize` (64 default; 32, 64, 128, 256, 512, 1024, 2048, 4096 allowed), the last
 *   one short when blocksize ∤ n; n_blocks = ceil(n / blocksize);
 *   absmax[b] = max |x| over the block (fp32; CUDA: fmaxf from −FLT_MAX, so NaN elements do not
 *     enter it and a short last block also sees the loader's 0.0 pads; torch's max propagates NaN);
 *   r = 1.0f / absmax[b] (fp32 division), x_norm = x · r (fp32 multiply, the reciprocal form);
 *   code = the CUDA decision tree: the count of thresholds t_k (nf4_thresholds[15], fp32
 *     literals, the midpoints of adjacent table values) with x_norm > t_k — a value exactly on a
 *     threshold takes the LOWER code; NaN fails every test: code 0. absmax = 0: r = +Inf, 0·Inf =
 *     NaN, code 0 (dequantizes to −1·0 = −0).
 *   Packing: byte j = (code[2j] << 4) | code[2j+1]: first element in the HIGH nibble; an odd n is
 *   padded in the last low nibble with code 7, the code of 0.0 (CUDA's loader pads with 0.0, the
 *   torch path pads the normalized values with 0; checked against
 *   bitsandbytes 0.50). packed has nf4_packed_bytes(n) = (n+1)/2 bytes.
 *   bitsandbytes' pure-torch backend (used on CPU) differs only in: thresholds computed in fp32
 *   from the table (torch.bucketize, also ties-to-lower), the ragged tail divided by absmax instead
 *   of multiplied by its reciprocal, absmax clamped to ≥ 1e-38 (the tail's stored clamped) and
 *   x_norm to [−1, 1] — so an all-zero block gives code 7 (0.0) there but code 0 (−0.0) on CUDA. NF4_TORCH
 *   selects that variant (for the CPU fixtures); NF4_CUDA is what the GPU path must match.
 *
 * Dequantize (kDequantizeBlockwise / dequantize_4bit): out[k] = nf4_table[code_k] · absmax[k /
 *   blocksize] (fp32 product), then rounded to the output dtype (ACT_BF16: bf16 RNE).
 *
 * Double quantization (compress_statistics / bnb_4bit_use_double_quant; quantize_4bit):
 *   offset = mean(absmax) — torch's fp32 mean (a pairwise/vectorized fp32 sum: reproduced here by
 *     a double sum rounded once, which agrees unless the fp32 sum's own rounding differs; the
 *     fixtures say how often); then quant8_quantize_blockwise(absmax − offset (fp32 subtract),
 *     blocksize 256, the signed dynamic map) → absmax_q (uint8 [n_blocks]), absmax2 (fp32
 *     [ceil(n_blocks/256)]).
 *   Rebuild: absmax[i] = code2[absmax_q[i]] · absmax2[i / 256] + offset (fp32 product, then a
 *     separate fp32 add).
 *
 * A checkpoint saved by bitsandbytes (Linear4bit._save_to_state_dict, NUMERICS §1.8): its parts
 *   are read and checked by io/bnb4.h (bnb4_bind, into a struct bnb4_weight). nf4_dequantize_bnb
 *   dequantizes such a weight: the NF4 table from the file must equal nf4_table (CUDA ignores it
 *   and uses its own LUT); the nested map is taken from the file.
 *
 * Shapes: x, out (n) flat (a weight W[out, in] row-major has n = out·in). OVERWRITES outputs.
 * Aliasing: none. Mirrors bitsandbytes 0.50 (functional.quantize_4bit / dequantize_4bit, CUDA ops).
 */
#ifndef REFINE_REF_NF4_H
#define REFINE_REF_NF4_H

#include <stdint.h>

#include "io/bnb4.h"
#include "io/error.h"
#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NF4_BLOCKSIZE 64
#define NF4_NESTED_BLOCKSIZE 256

extern const float nf4_table[16];
extern const float nf4_thresholds[15];

enum nf4_variant { NF4_CUDA = 0, NF4_TORCH = 1 };

/* 1 for 32, 64, ..., 4096 (the rule of io/bnb4.h: bnb4_blocksize_ok). */
int nf4_blocksize_ok(int blocksize);
static inline int64_t nf4_n_blocks(int64_t n, int blocksize) { return (n + blocksize - 1) / blocksize; }
static inline int64_t nf4_packed_bytes(int64_t n) { return (n + 1) / 2; }

/* The code of one normalized value (CUDA decision tree / NF4_TORCH fp32 midpoints). */
uint8_t nf4_encode(float x_norm, enum nf4_variant v);

/* packed[(n+1)/2], absmax[n_blocks] from x[n]. */
void nf4_quantize(uint8_t *packed, float *absmax, const float *x, int64_t n, int blocksize, enum nf4_variant v);
/* out[n] from packed codes and fp32 absmax. */
void nf4_dequantize(float *out, const uint8_t *packed, const float *absmax, int64_t n, int blocksize,
                    enum act_dtype out_dtype);
/* The code of element k. */
static inline uint8_t nf4_code_at(const uint8_t *packed, int64_t k) {
    uint8_t b = packed[k >> 1];
    return (k & 1) ? (uint8_t)(b & 0xF) : (uint8_t)(b >> 4);
}

/* Double quantization of absmax[n_blocks]: absmax_q[n_blocks], absmax2[ceil(n_blocks/256)],
 * *offset. code2 is the signed dynamic map (quant8_dynamic_map(code2, 1)). */
void nf4_double_quantize(uint8_t *absmax_q, float *absmax2, float *offset, const float *absmax, int64_t n_blocks,
                         const float code2[256]);
void nf4_double_dequantize(float *absmax, const uint8_t *absmax_q, const float *absmax2, float offset,
                           const float code2[256], int64_t n_blocks, int blocksize2);

/* A weight as bitsandbytes quantizes it when it loads a model in 4 bits (Linear4bit, NF4,
 * compress_statistics): codes of x in blocks of NF4_BLOCKSIZE (NF4_CUDA), the block absmax
 * double-quantized with the signed dynamic map in blocks of NF4_NESTED_BLOCKSIZE.
 * packed (nf4_packed_bytes(n)), absmax_q (n_blocks), absmax2 (ceil(n_blocks / 256)) are filled,
 * with *offset and code2 (the map). The CPU trainer's QLoRA, and the GPU model's loader, quantize
 * plain checkpoints with it; nf4_dequantize_nested gives the fp32 values both compute with. */
void nf4_quantize_nested(uint8_t *packed, uint8_t *absmax_q, float *absmax2, float *offset, float code2[256],
                         const float *x, int64_t n);
/* out (n) = the dequantization of nf4_quantize_nested's parts, rounded to out_dtype. */
void nf4_dequantize_nested(float *out, const uint8_t *packed, const uint8_t *absmax_q, const float *absmax2,
                           float offset, const float code2[256], int64_t n, enum act_dtype out_dtype);

/* out[shape0·shape1] = dequantized weight, rounded to out_dtype. Returns 0 or −1 (bad parts). */
int nf4_dequantize_bnb(float *out, const struct bnb4_weight *b, int64_t n, enum act_dtype out_dtype,
                       struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_NF4_H */
