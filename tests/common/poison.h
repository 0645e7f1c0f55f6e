/* poison.h — NaN poisoning of outputs and guard regions around buffers.
 *
 * Outputs are filled with a NaN of a recognizable payload before an op runs; afterwards every
 * element must have been written (none may still hold the poison bit pattern). Buffers carry
 * GUARD_BYTES of a byte pattern before and after the data; a write out of bounds changes them.
 *
 *   poison_f32 / poison_bf16            fill with POISON_F32_BITS / POISON_BF16_BITS
 *   count_poison_f32 / count_poison_bf16  elements still bit-equal to the poison (unwritten)
 *   guard_fill(p, nbytes)               write the guard pattern
 *   guard_check(p, nbytes)              -1 when intact, else the offset of the first changed byte
 *   guarded_alloc / guarded_free        host buffer [guard | data | guard]; data is 64-byte
 *                                       aligned; guarded_check checks both guards.
 * The GPU parity harness allocates the same layout on the device, uploads a poisoned, guarded
 * image, runs the kernel on the data part, downloads the whole image and checks it here.
 */
#ifndef REFINE_TESTS_COMMON_POISON_H
#define REFINE_TESTS_COMMON_POISON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define POISON_F32_BITS 0x7FC0DEADu /* quiet NaN, payload 0xDEAD */
#define POISON_BF16_BITS 0x7FE5u    /* quiet NaN, payload 0x25 */
#define GUARD_BYTES 256
#define GUARD_BYTE(i) ((unsigned char)(0xA5u ^ (unsigned)((i) * 29u)))

void poison_f32(float *x, int64_t n);
void poison_bf16(uint16_t *x, int64_t n);
int64_t count_poison_f32(const float *x, int64_t n);
int64_t count_poison_bf16(const uint16_t *x, int64_t n);

void guard_fill(void *p, size_t nbytes);
int64_t guard_check(const void *p, size_t nbytes);

struct guarded {
    unsigned char *base; /* start of the leading guard */
    void *data;          /* base + GUARD_BYTES */
    size_t nbytes;       /* data bytes */
};

void *guarded_alloc(struct guarded *g, size_t nbytes);
void guarded_free(struct guarded *g);
/* 0 when both guards are intact; otherwise records a test failure naming `what` and returns 1. */
int guarded_check(const struct guarded *g, const char *what);
/* Bytes of the whole image (guards included). */
size_t guarded_image_bytes(size_t nbytes);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TESTS_COMMON_POISON_H */
