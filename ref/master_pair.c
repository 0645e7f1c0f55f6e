/* master_pair.c — the array forms of master_pair.h. */
#include "ref/master_pair.h"

#include <stddef.h>

const char *const master_storage_names[] = {"fp32", "split", "bf16", NULL};

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
