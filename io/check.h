/* check.h — CHECK: the always-on assertion of refine.
 *
 * CHECK(cond, fmt, ...) tests an invariant of the program (never bad user input: that gets a
 * clear message and exit status 1 from the caller, DESIGN "Bad input and failure"). It is on in
 * every build mode (independent of NDEBUG). On failure it prints file:line, the function, the
 * condition text and the formatted values, then exits with status 2 (distinct from the status 1
 * of rejected input).
 *
 *     CHECK(n > 0 && n % 8 == 0, "n=%d must be a positive multiple of 8", n);
 *
 * Header-only, C11 and C++ compatible.
 */
#ifndef REFINE_IO_CHECK_H
#define REFINE_IO_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: %s: CHECK(%s) failed: ", __FILE__, __LINE__, __func__, \
                    #cond);                                                               \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            fflush(stderr);                                                               \
            exit(2);                                                                      \
        }                                                                                 \
    } while (0)

#endif /* REFINE_IO_CHECK_H */
