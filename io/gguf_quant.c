/* gguf_quant.c — dequantization of GGUF tensors to fp32 (gguf.h).
 *
 * Mirrors ggml-quants.c dequantize_row_q8_0 / q4_0 / q4_1 and gguf-py quants.py: the block scale
 * d (and min m) are f16 widened exactly to fp32, the codes are integers, and each element is one
 * fp32 multiply (plus one fp32 add for Q4_1), so results are bit-identical to both.
 */
#include <math.h>
#include <string.h>

#include "io/gguf.h"

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: value = man · 2^-24, exact in fp32 */
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

int gguf_tensor_to_f32(float *out, const struct gguf_file *g, const struct gguf_tensor *t, struct io_err *e) {
    const uint8_t *p = t->data;
    int64_t n = t->numel;
    switch (t->type) {
    case GGML_TYPE_F32:
        for (int64_t i = 0; i < n; i++) {
            uint32_t b = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                         (uint32_t)p[4 * i + 3] << 24;
            memcpy(&out[i], &b, 4);
        }
        return 0;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) out[i] = f16_to_f32(u16(p + 2 * i));
        return 0;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint32_t b = (uint32_t)u16(p + 2 * i) << 16;
            memcpy(&out[i], &b, 4);
        }
        return 0;
    case GGML_TYPE_Q8_0:
        for (int64_t b = 0; b < n / 32; b++, p += 34) {
            float d = f16_to_f32(u16(p));
            for (int j = 0; j < 32; j++) out[32 * b + j] = d * (float)(int8_t)p[2 + j];
        }
        return 0;
    case GGML_TYPE_Q4_0:
        for (int64_t b = 0; b < n / 32; b++, p += 18) {
            float d = f16_to_f32(u16(p));
            for (int j = 0; j < 16; j++) {
                out[32 * b + j] = d * (float)((p[2 + j] & 0x0F) - 8);
                out[32 * b + j + 16] = d * (float)((p[2 + j] >> 4) - 8);
            }
        }
        return 0;
    case GGML_TYPE_Q4_1:
        for (int64_t b = 0; b < n / 32; b++, p += 20) {
            float d = f16_to_f32(u16(p)), m = f16_to_f32(u16(p + 2));
            for (int j = 0; j < 16; j++) {
                out[32 * b + j] = d * (float)(p[4 + j] & 0x0F) + m;
                out[32 * b + j + 16] = d * (float)(p[4 + j] >> 4) + m;
            }
        }
        return 0;
    default:
        return io_fail(e, "%s: tensor '%s' has type %s; refine dequantizes F32, F16, BF16, Q8_0, Q4_0 and Q4_1",
                       g->file.path, t->name, ggml_type_name(t->type));
    }
}
