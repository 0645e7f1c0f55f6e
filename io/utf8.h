/* utf8.h — strict UTF-8 validation for every reader of text in files (JSON headers and configs,
 * GGUF strings, training data): no overlong forms, no surrogates (U+D800..U+DFFF), nothing above
 * U+10FFFF, no truncated sequence.
 *
 * utf8_invalid_at(s, n) returns the offset of the first byte where a valid sequence cannot start
 * or complete, or -1 when all n bytes are valid UTF-8.
 */
#ifndef REFINE_IO_UTF8_H
#define REFINE_IO_UTF8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int64_t utf8_invalid_at(const void *s, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_UTF8_H */
