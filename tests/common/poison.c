/* poison.c — NaN poisoning and guard regions (poison.h). */
#include "tests/common/poison.h"

#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "tests/common/harness.h"

void poison_f32(float *x, int64_t n) {
    uint32_t b = POISON_F32_BITS;
    for (int64_t i = 0; i < n; i++) memcpy(&x[i], &b, 4);
}

void poison_bf16(uint16_t *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = (uint16_t)POISON_BF16_BITS;
}

int64_t count_poison_f32(const float *x, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], 4);
        c += b == POISON_F32_BITS;
    }
    return c;
}

int64_t count_poison_bf16(const uint16_t *x, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += x[i] == POISON_BF16_BITS;
    return c;
}

void guard_fill(void *p, size_t nbytes) {
    unsigned char *b = (unsigned char *)p;
    for (size_t i = 0; i < nbytes; i++) b[i] = GUARD_BYTE(i);
}

int64_t guard_check(const void *p, size_t nbytes) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < nbytes; i++)
        if (b[i] != GUARD_BYTE(i)) return (int64_t)i;
    return -1;
}

size_t guarded_image_bytes(size_t nbytes) { return (size_t)GUARD_BYTES * 2 + ((nbytes + 63) & ~(size_t)63); }

void *guarded_alloc(struct guarded *g, size_t nbytes) {
    size_t total = guarded_image_bytes(nbytes);
    g->base = (unsigned char *)aligned_alloc(64, total);
    CHECK(g->base != NULL, "out of host memory for %zu bytes", total);
    g->nbytes = nbytes;
    g->data = g->base + GUARD_BYTES;
    guard_fill(g->base, GUARD_BYTES);
    guard_fill(g->base + GUARD_BYTES + nbytes, total - GUARD_BYTES - nbytes);
    return g->data;
}

void guarded_free(struct guarded *g) {
    free(g->base);
    g->base = NULL;
    g->data = NULL;
}

int guarded_check(const struct guarded *g, const char *what) {
    size_t total = guarded_image_bytes(g->nbytes);
    int64_t lead = guard_check(g->base, GUARD_BYTES);
    int64_t tail = guard_check(g->base + GUARD_BYTES + g->nbytes, total - GUARD_BYTES - g->nbytes);
    if (lead < 0 && tail < 0) {
        test_pass();
        return 0;
    }
    if (lead >= 0)
        test_fail("%s: write before the buffer (guard byte %lld before the start changed)", what,
                  (long long)(GUARD_BYTES - lead));
    if (tail >= 0) test_fail("%s: write past the end (guard byte %lld after the end changed)", what, (long long)tail);
    return 1;
}
