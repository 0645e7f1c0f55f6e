/* error.c — formatting and reporting of bad-input errors (error.h). */
#include "io/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int io_fail(struct io_err *e, const char *fmt, ...) {
    if (e == NULL) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int io_fail_context(struct io_err *e, const char *fmt, ...) {
    if (e == NULL) return -1;
    char joined[3 * IO_ERR_CAP];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(joined, IO_ERR_CAP, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if (n > IO_ERR_CAP - 1) n = IO_ERR_CAP - 1;
    snprintf(joined + n, sizeof joined - (size_t)n, ": %s", e->msg);
    /* Keep the end of a long message readable: truncate, never overflow. */
    memcpy(e->msg, joined, IO_ERR_CAP - 1);
    e->msg[IO_ERR_CAP - 1] = '\0';
    return -1;
}

static char g_label[64];

void io_set_process_label(const char *label) { snprintf(g_label, sizeof g_label, "%s", label ? label : ""); }

void io_exit(const struct io_err *e) {
    fprintf(stderr, "refine: %s%s%s\n", g_label, g_label[0] ? ": " : "", e != NULL ? e->msg : "unknown error");
    fflush(stderr);
    exit(1);
}
