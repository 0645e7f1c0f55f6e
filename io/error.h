/* error.h — how io/ (and everything that reads user input) reports bad input.
 *
 * Bad user input is not a CHECK (DESIGN "Bad input and failure"): a fallible function returns 0
 * on success, or -1 after writing ONE sentence into its `struct io_err` that names the file (or
 * flag), what is wrong, and what was expected, e.g.
 *   "model.safetensors: tensor 'lm_head.weight' has data_offsets [0, 10) but F32 [4, 4] needs 64 bytes"
 * The caller either handles it or passes it up; a program's main ends with io_exit(&err): the
 * message on stderr prefixed "refine: ", exit status 1. Nothing crashes on bad input.
 */
#ifndef REFINE_IO_ERROR_H
#define REFINE_IO_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#define IO_ERR_CAP 1024

struct io_err {
    char msg[IO_ERR_CAP];
};

/* Formats the message into e (when e is non-NULL) and returns -1. */
int io_fail(struct io_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the message already in e with "context: " (e.g. the file name) and returns -1. */
int io_fail_context(struct io_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "refine: <message>" to stderr and exits with status 1. */
void io_exit(const struct io_err *e) __attribute__((noreturn));

/* A job of several processes names the process in io_exit's message: "refine: rank 3: <message>"
 * (label "rank 3"; NULL or "": none). */
void io_set_process_label(const char *label);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_ERROR_H */
