/* nf4.h — NF4 (bitsandbytes, optional double quantization) dequantization into bf16 on the GPU.
 *
 * Math (NUMERICS.md §1.7, bitsandbytes `dequantize_4bit` / CUDA `kDequantizeBlockwise`):
 *   nested:     absmax[i] = nested_code[absmax_q[i]] · nested_absmax[i / nested_blocksize] + nested_offset
 *               (an fp32 product, then a separate fp32 add — no fused multiply-add)
 *   not nested: absmax[i] = absmax_f32[i]
 *   w[k] = bf16_rne( quant_map[code_k] · absmax[k / blocksize] )     (fp32 product, one rounding)
 *   code_{2j} = codes[j] >> 4 (high nibble), code_{2j+1} = codes[j] & 15 (low nibble).
 * The result is bit-identical to ref/nf4.h's dequantization (the parity test demands equality of
 * every bit, NaN included where a block's absmax makes one).
 *
 * Shapes: codes ((n + 1) / 2) uint8; absmax_q (n_blocks) uint8 with nested_absmax
 * (ceil(n_blocks / nested_blocksize)) fp32 and nested_code (256) fp32 when nested, else absmax_f32
 * (n_blocks) fp32; quant_map (16) fp32 (the checkpoint's table); out (n) bf16, OVERWRITTEN.
 * n_blocks = ceil(n / blocksize). All pointers are device pointers.
 * Preconditions: n ≥ 1; blocksize a power of two in [32, 4096]; nested_blocksize ≥ 1; n_blocks
 * < 2^32. The fast path (a warp per 1024 elements, 4-byte code loads and 16-byte stores) needs out
 * 16-byte and codes 4-byte aligned; other pointers take a scalar path. Aliasing: none.
 */
#ifndef REFINE_GPU_NF4_H
#define REFINE_GPU_NF4_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gpu_nf4_tensor {
    const uint8_t *codes;
    const uint8_t *absmax_q;     /* nested: first-level absmax, 8-bit codes; NULL when not nested */
    const float *absmax_f32;     /* not nested: first-level absmax; NULL when nested */
    const float *nested_absmax;  /* nested only */
    const float *nested_code;    /* nested only: the 256-entry signed dynamic map */
    float nested_offset;         /* nested only */
    const float *quant_map;      /* 16 fp32 NF4 values */
    int64_t n;                   /* elements (out·in for a weight) */
    int blocksize;               /* 64 by default */
    int nested_blocksize;        /* 256 by default */
};

void gpu_nf4_dequantize_bf16(uint16_t *out, const struct gpu_nf4_tensor *t, cudaStream_t stream);

/* The same values as (n / cols, cols) rows at stride ld ≥ cols in out (n a multiple of cols; the
 * columns past cols untouched): a folded LoRA group's padded base weight (gpu/lora.h). The fast path
 * also needs cols and ld multiples of 8. */
void gpu_nf4_dequantize_rows_bf16(uint16_t *out, int64_t cols, int64_t ld, const struct gpu_nf4_tensor *t,
                                  cudaStream_t stream);

/* NF4 straight to FP8 E4M3 codes under a per-tensor scale (the QLoRA base under --precision fp8):
 *   q[k] = e4m3_satfinite_rne( float(w[k]) · *scale ),  w[k] the bf16 value above,
 * i.e. gpu/fp8.h's cast (one fp32 multiply, RNE, SATFINITE) of gpu_nf4_dequantize_bf16's output,
 * bit for bit, without writing and reading the bf16 values (0.5 + 1 bytes an element instead of
 * 0.5 + 2 + 2 + 1). scale: one device float. q (n) uint8, OVERWRITTEN; the fast path needs q
 * 8-byte aligned. */
void gpu_nf4_dequantize_e4m3(uint8_t *q, const struct gpu_nf4_tensor *t, const float *scale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_NF4_H */
