/* bf16.c — array forms of the bf16 conversions in bf16.h. */
#include "ref/bf16.h"

#include <math.h>

void bf16_from_float_array(uint16_t *out, const float *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = bf16_from_float(in[i]);
}

void bf16_to_float_array(float *out, const uint16_t *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = bf16_to_float(in[i]);
}

void bf16_round_array(float *out, const float *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = bf16_round(in[i]);
}

uint16_t bf16_from_double(double x) {
    if (isnan(x)) return 0x7FC0;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (isinf(a)) return (uint16_t)(sign | 0x7F80);
    if (a == 0.0) return sign;
    /* The bf16 quantum at a's binade: 8 significant bits, never below the subnormal 2^-133. */
    int e;
    frexp(a, &e); /* a = m·2^e, m in [0.5, 1) */
    int eb = e - 1 < -126 ? -126 : e - 1;
    double r = nearbyint(ldexp(a, 7 - eb)); /* exact scaling; RNE to an integer */
    double v = ldexp(r, eb - 7);
    if (v >= 0x1p128) return (uint16_t)(sign | 0x7F80); /* rounds beyond the largest bf16: Inf */
    /* v is a bf16 value (so exactly a float): its upper 16 bits. */
    return (uint16_t)(sign | (ref_f32_bits((float)v) >> 16));
}
