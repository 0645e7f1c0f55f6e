/* nf4.c — bitsandbytes NF4 quantization, double quantization and dequantization of a checkpoint's
 * parts (nf4.h). */
#include "ref/nf4.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "ref/bf16.h"
#include "ref/quant8.h"

const float nf4_table[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

/* The literals of csrc/kernels.cu dQuantizeNF4. */
const float nf4_thresholds[15] = {
    -0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f, 0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,
    0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f,
};

int nf4_blocksize_ok(int blocksize) { return bnb4_blocksize_ok(blocksize); }

uint8_t nf4_encode(float x, enum nf4_variant v) {
    /* Both bitsandbytes paths send a value ON a threshold to the lower code: the code is the
     * number of thresholds strictly below x (NaN: none). */
    uint8_t c = 0;
    for (int k = 0; k < 15; k++) {
        float t = v == NF4_CUDA ? nf4_thresholds[k] : (nf4_table[k] + nf4_table[k + 1]) / 2.0f;
        c += x > t;
    }
    return c;
}

void nf4_quantize(uint8_t *packed, float *absmax, const float *x, int64_t n, int blocksize, enum nf4_variant v) {
    CHECK(nf4_blocksize_ok(blocksize) && n >= 0, "nf4_quantize: n=%lld blocksize=%d", (long long)n, blocksize);
    memset(packed, 0, (size_t)nf4_packed_bytes(n));
    if (n & 1) packed[n >> 1] = nf4_encode(0.0f, v); /* odd n: the pad nibble is the code of 0.0 (7) */
    int64_t full = n - n % blocksize;
    for (int64_t b0 = 0, blk = 0; b0 < n; b0 += blocksize, blk++) {
        int64_t b1 = b0 + blocksize < n ? b0 + blocksize : n;
        /* CUDA: fmaxf from -FLT_MAX over the block, the loader's 0.0 pads a short block. */
        float m = b1 - b0 < blocksize ? 0.0f : -FLT_MAX;
        for (int64_t i = b0; i < b1; i++) m = fmaxf(m, fabsf(x[i]));
        int tail = b0 >= full;
        if (v == NF4_TORCH && tail && m < 1e-38f) m = 1e-38f; /* the torch path stores the clamped tail absmax */
        absmax[blk] = m;
        float rcp = 1.0f / (v == NF4_TORCH && m < 1e-38f ? 1e-38f : m);
        for (int64_t i = b0; i < b1; i++) {
            float xn;
            if (v == NF4_TORCH) {
                xn = tail ? x[i] / m : x[i] * rcp;
                xn = xn < -1.0f ? -1.0f : xn > 1.0f ? 1.0f : xn;
            } else {
                xn = x[i] * rcp;
            }
            uint8_t c = nf4_encode(xn, v);
            packed[i >> 1] |= (uint8_t)((i & 1) ? c : (c << 4));
        }
    }
}

void nf4_dequantize(float *out, const uint8_t *packed, const float *absmax, int64_t n, int blocksize,
                    enum act_dtype out_dtype) {
    CHECK(blocksize > 0 && n >= 0, "nf4_dequantize: n=%lld blocksize=%d", (long long)n, blocksize);
    for (int64_t i = 0; i < n; i++) {
        float w = nf4_table[nf4_code_at(packed, i)] * absmax[i / blocksize];
        out[i] = act_round(w, out_dtype);
    }
}

void nf4_double_quantize(uint8_t *absmax_q, float *absmax2, float *offset, const float *absmax, int64_t n_blocks,
                         const float code2[256]) {
    CHECK(n_blocks > 0, "nf4_double_quantize: n_blocks=%lld", (long long)n_blocks);
    double s = 0;
    for (int64_t i = 0; i < n_blocks; i++) s += absmax[i];
    float off = (float)(s / (double)n_blocks);
    *offset = off;
    float *centered = malloc(sizeof(float) * (size_t)n_blocks);
    CHECK(centered != NULL, "out of memory");
    for (int64_t i = 0; i < n_blocks; i++) centered[i] = absmax[i] - off;
    quant8_quantize_blockwise(absmax_q, absmax2, centered, n_blocks, NF4_NESTED_BLOCKSIZE, code2, QUANT8_CUDA);
    free(centered);
}

void nf4_double_dequantize(float *absmax, const uint8_t *absmax_q, const float *absmax2, float offset,
                           const float code2[256], int64_t n_blocks, int blocksize2) {
    CHECK(blocksize2 > 0, "nf4_double_dequantize: blocksize2=%d", blocksize2);
    for (int64_t i = 0; i < n_blocks; i++) {
        float a = code2[absmax_q[i]] * absmax2[i / blocksize2];
        absmax[i] = a + offset;
    }
}

int nf4_dequantize_bnb(float *out, const struct bnb4_weight *b, int64_t n, enum act_dtype out_dtype,
                       struct io_err *e) {
    CHECK(b->packed != NULL && b->absmax != NULL && b->quant_map != NULL, "nf4_dequantize_bnb: unbound weight");
    if ((int64_t)b->packed->nbytes != nf4_packed_bytes(n) || b->n_blocks != nf4_n_blocks(n, b->blocksize))
        return io_fail(e, "tensor '%s' does not hold %lld 4-bit weights", b->packed->name, (long long)n);
    float qmap[16];
    memcpy(qmap, b->quant_map->data, sizeof qmap);
    if (memcmp(qmap, nf4_table, sizeof qmap) != 0)
        return io_fail(e, "tensor '%s' is not the NF4 table of bitsandbytes", b->quant_map->name);
    float *absmax = malloc(sizeof(float) * (size_t)b->n_blocks);
    CHECK(absmax != NULL, "out of memory");
    if (b->nested) {
        float code2[256];
        memcpy(code2, b->nested_quant_map->data, sizeof code2);
        float *a2 = malloc(sizeof(float) * (size_t)b->nested_absmax->numel);
        CHECK(a2 != NULL, "out of memory");
        memcpy(a2, b->nested_absmax->data, sizeof(float) * (size_t)b->nested_absmax->numel);
        nf4_double_dequantize(absmax, b->absmax->data, a2, b->nested_offset, code2, b->n_blocks, b->nested_blocksize);
        free(a2);
    } else {
        memcpy(absmax, b->absmax->data, sizeof(float) * (size_t)b->n_blocks);
    }
    nf4_dequantize(out, b->packed->data, absmax, n, b->blocksize, out_dtype);
    free(absmax);
    return 0;
}

void nf4_quantize_nested(uint8_t *packed, uint8_t *absmax_q, float *absmax2, float *offset, float code2[256],
                         const float *x, int64_t n) {
    const int64_t nb = nf4_n_blocks(n, NF4_BLOCKSIZE);
    float *absmax = malloc((size_t)nb * sizeof(float));
    CHECK(absmax != NULL, "out of memory quantizing %lld weights", (long long)n);
    quant8_dynamic_map(code2, 1);
    nf4_quantize(packed, absmax, x, n, NF4_BLOCKSIZE, NF4_CUDA);
    nf4_double_quantize(absmax_q, absmax2, offset, absmax, nb, code2);
    free(absmax);
}

void nf4_dequantize_nested(float *out, const uint8_t *packed, const uint8_t *absmax_q, const float *absmax2,
                           float offset, const float code2[256], int64_t n, enum act_dtype out_dtype) {
    const int64_t nb = nf4_n_blocks(n, NF4_BLOCKSIZE);
    float *absmax = malloc((size_t)nb * sizeof(float));
    CHECK(absmax != NULL, "out of memory dequantizing %lld weights", (long long)n);
    nf4_double_dequantize(absmax, absmax_q, absmax2, offset, code2, nb, NF4_NESTED_BLOCKSIZE);
    nf4_dequantize(out, packed, absmax, n, NF4_BLOCKSIZE, out_dtype);
    free(absmax);
}
