/* master_pair.c — the array forms of master_pair.h. */
#include "ref/master_pair.h"

#include <stddef.h>

#include "ref/dropout.h" /* ref_philox4x32_10 */

const char *const master_storage_names[] = {"fp32", "split", "bf16", "bf16-sr", NULL};

void bf16_sr_round_array(float *x, int64_t n, uint64_t seed, int64_t step, uint32_t tensor) {
    const uint32_t key[2] = {(uint32_t)seed ^ BF16_SR_KEY0, (uint32_t)(seed >> 32) ^ BF16_SR_KEY1};
    uint32_t w[4] = {0};
    for (int64_t e = 0; e < n; e++) {
        if ((e & 3) == 0) {
            const uint64_t block = (uint64_t)e >> 2;
            const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)step, tensor};
            ref_philox4x32_10(w, ctr, key);
        }
        x[e] = bf16_to_float(bf16_sr_bits(ref_f32_bits(x[e]), w[e & 3] >> 16));
    }
}

void master_storage_round_array(float *x, int64_t n, enum master_storage ms, uint64_t seed, int64_t step,
                                uint32_t tensor) {
    if (ms == MASTER_SPLIT) master_pair_round_array(x, n);
    else if (ms == MASTER_BF16 || (ms == MASTER_BF16_SR && step <= 0)) bf16_round_array(x, x, n);
    else if (ms == MASTER_BF16_SR) bf16_sr_round_array(x, n, seed, step, tensor);
}

void master_pair_round_array(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = master_pair_round(x[i]);
}

void master_pair_split_array(uint16_t *hi, uint16_t *lo, const float *x, int64_t n) {
    uint16_t drop;
    for (int64_t i = 0; i < n; i++) master_pair_split(x[i], &hi[i], lo ? &lo[i] : &drop);
}

void master_pair_join_array(float *x, const uint16_t *hi, const uint16_t *lo, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = master_pair_join(hi[i], lo ? lo[i] : 0);
}
