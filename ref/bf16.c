/* bf16.c — array forms of the bf16 conversions in bf16.h. */
#include "ref/bf16.h"

void bf16_from_float_array(uint16_t *out, const float *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = bf16_from_float(in[i]);
}

void bf16_to_float_array(float *out, const uint16_t *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = bf16_to_float(in[i]);
}

void bf16_round_array(float *out, const float *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = bf16_round(in[i]);
}
