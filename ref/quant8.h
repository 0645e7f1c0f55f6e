/* quant8.h — bitsandbytes 8-bit dynamic maps and blockwise 8-bit quantization (NUMERICS.md §1.5, §1.6).
 *
 * Dynamic map (functional.create_dynamic_map(signed, max_exponent_bits=7, total_bits=8)):
 *   for i = 0..6: b = torch.linspace(0.1, 1.0, k+1) in fp32 with k = 2^i (signed) or 2^(i+1)
 *   (unsigned); means_j = (b_j + b_{j+1}) / 2 in fp32; value = fp32(10^(i−6)) · means_j (fp32
 *   product); signed maps take ±value. Then 0 and 1.0 are appended and the 256 values sorted.
 *   Signed: [0..126] negative, [127] = 0, [255] = +1 (no −1). Unsigned: [0] = 0, [255] = 1.
 *   torch.linspace on CPU: step = (end − start)/(steps − 1) in fp32; element j = start + j·step for
 *   j < steps/2, end − (steps − 1 − j)·step otherwise (fp32).
 *
 * Blockwise quantize (quantize_blockwise, CUDA kQuantizeBlockwise<.., General8bit>):
 *   absmax[b] = max |x| over the block of `blocksize` elements (last block short);
 *   x_norm = x · (1.0f / absmax[b]);
 *   code = QUANT8_CUDA: dQuantize<0>: binary search over the sorted map, then the nearer of the
 *          two neighbours by the fp32 midpoint; an exact tie keeps the search's last pivot;
 *          QUANT8_NEAREST: the index whose value is nearest to x_norm, ties to the LOWER index
 *          (torch.bucketize over fp32 midpoints: bnb's pure-torch backend).
 * Dequantize: out[k] = map[q[k]] · absmax[k / blocksize] (fp32 product).
 * Shapes: x, q, out (n); absmax (ceil(n / blocksize)). OVERWRITES. Aliasing: none.
 */
#ifndef REFINE_REF_QUANT8_H
#define REFINE_REF_QUANT8_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum quant8_round { QUANT8_CUDA = 0, QUANT8_NEAREST = 1 };

/* The 256-entry map, ascending. is_signed: 1 for the signed map (Adam m, double quant). */
void quant8_dynamic_map(float map[256], int is_signed);

/* torch.linspace(start, end, steps) in fp32 (steps ≥ 2). */
void quant8_linspace_f32(float *out, float start, float end, int steps);

uint8_t quant8_encode(const float map[256], float x_norm, enum quant8_round r);

/* The QUANT8_CUDA code as a count (the form gpu/adamw8bit.cu evaluates): for an ascending map,
 * quant8_encode(map, x, QUANT8_CUDA) = #{c in 0..254 : x ≥ quant8_cuda_threshold(map, c)}, with
 * mid_c = (map[c] + map[c+1]) · 0.5 (fp32): the threshold is mid_c for odd c (a tie goes to c+1)
 * and the next float above mid_c for even c (a tie stays at c, the search's last pivot); NaN
 * passes none (code 0). Checked on every fp32 x for both dynamic maps (tests/unit/quant8_test). */
float quant8_cuda_threshold(const float map[256], int c);

/* The QUANT8_CUDA code of one map by table, for the 8-bit optimizer's requantization (the hot loop
 * of its reference step): the same code as quant8_encode(map, x, QUANT8_CUDA) for every float x.
 * t holds the 255 thresholds (ascending) and a NaN after them; x, clamped to [−2, 2] (the
 * thresholds lie in (−1, 1)), falls in one of QUANT8_TABLE_BUCKETS ranges of its magnitude bits per
 * sign (magnitudes up to 2^−23 in the first, then 2^17 ulps each up to 2), and c0 holds the count at
 * each range's lowest value; the code of x is that count raised past every further threshold ≤ x
 * (the count is monotone in x). NaN: code 0. Checked against quant8_encode as the threshold form is
 * (tests/unit/quant8_test). */
#define QUANT8_TABLE_LO 0x34000000u  /* the magnitude bits of 2^-23: magnitudes up to it share range 0 */
#define QUANT8_TABLE_SHIFT 17         /* a range above it: 2^17 ulps */
#define QUANT8_TABLE_TOP 0x40000000u /* 2.0, the clamp */
#define QUANT8_TABLE_BUCKETS 1537     /* ((TOP − LO) >> SHIFT) + 1 */
struct quant8_table {
    float t[256];
    uint8_t c0[2 * QUANT8_TABLE_BUCKETS];
};
void quant8_table_init(struct quant8_table *tab, const float map[256]);
uint8_t quant8_table_encode(const struct quant8_table *tab, float x);

void quant8_quantize_blockwise(uint8_t *q, float *absmax, const float *x, int64_t n, int blocksize,
                               const float map[256], enum quant8_round r);
void quant8_dequantize_blockwise(float *out, const uint8_t *q, const float *absmax, int64_t n, int blocksize,
                                 const float map[256]);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_QUANT8_H */
