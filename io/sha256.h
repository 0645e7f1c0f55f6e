/* sha256.h — SHA-256 (FIPS 180-4), for content-addressed caches and fixture manifests.
 *
 * Incremental: sha256_init, any number of sha256_update, sha256_final (32 bytes). sha256_hex
 * writes the 64 lowercase hex digits and a NUL (65 bytes).
 */
#ifndef REFINE_IO_SHA256_H
#define REFINE_IO_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sha256 {
    uint32_t h[8];
    uint64_t nbytes;
    uint8_t buf[64];
    size_t nbuf;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t n);
void sha256_final(struct sha256 *s, uint8_t digest[32]);
void sha256_hex(const uint8_t digest[32], char hex[65]);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_SHA256_H */
