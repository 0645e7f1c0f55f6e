/* metrics.h — the training record: a JSONL metrics log, the loss plot, the progress line.
 *
 * metrics.jsonl (one JSON object per line, flushed after each):
 *   {"kind":"train","step":12,"loss":2.3456,"lr":0.001,"grad_norm":0.8,"tokens":6144,
 *    "tokens_per_s":1234.5,"mfu":0.12,"mem_GiB":3.2,"elapsed_s":12.3}
 *   (--precision fp8 adds the step's FP8 statistics, train/engine.h's struct engine_fp8_stats:
 *    ...,"fp8_scale_min":0.5,"fp8_scale_max":4096,"fp8_saturated":0})
 *   {"kind":"eval","step":20,"val_loss":2.1,"val_ppl":8.17,"val_tokens":4096,"elapsed_s":20.1}
 *   {"kind":"sample","step":20,"index":0,"prompt":"...","completion":"...","tokens":48}
 * The first line is {"kind":"run", "options":{...}, "engine":"...", "device":"..."}. A resumed
 * run keeps the records up to the checkpoint's step (a last line cut short by a kill is dropped;
 * a damaged line before it is an error naming file and line), rewrites the file atomically (temp
 * name, fsync, rename: a kill during the rewrite leaves the old file), and appends from there;
 * it first records {"kind":"resume","step":N,"from":"<checkpoint folder>","changed":{...}} (the
 * settings it changes, checkpoint.h), which later resumes keep as history, as they keep the
 * sample records up to that step.
 * loss.svg: training loss (per step) and validation loss (per evaluation) against the step, with
 * axes, ticks and a legend — a plain SVG file any browser shows; rewritten atomically after every
 * evaluation and at the end.
 * The progress line (stdout): step/total, loss, lr, tokens/s, MFU (when the engine knows its
 * FLOP rate ceiling), memory, elapsed and ETA.
 */
#ifndef REFINE_TRAIN_METRICS_H
#define REFINE_TRAIN_METRICS_H

#include <stdio.h>

#include "io/config.h"
#include "io/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct train_record {
    int step; /* 1-based: the optimizer step just taken */
    double loss, lr, grad_norm;
    long long tokens; /* tokens processed in this step */
    double tokens_per_s, mfu, mem_gib, elapsed_s;
};

struct eval_record {
    int step;
    double val_loss, val_ppl;
    long long val_tokens;
    double elapsed_s;
};

/* A record the log keeps as written (e.g. "resume"), placed after the step's train and eval records. */
struct note_record {
    int step;
    char *line;
};

/* A train record's FP8 statistics (present = 0: none), kept beside it. */
struct fp8_record {
    int present;
    double scale_min, scale_max;
    long long saturated;
};

struct metrics {
    FILE *log;
    char log_path[1024];
    char svg_path[1024];
    int n_train, cap_train;
    struct train_record *train;
    struct fp8_record *train_fp8; /* parallel to train */
    int n_eval, cap_eval;
    struct eval_record *eval;
    int n_note, cap_note;
    struct note_record *note; /* resume and sample records, kept verbatim */
};

/* Opens <dir>/metrics.jsonl. With resume_step < 0 a new log is started with the run header line;
 * otherwise the existing log is read back, records after resume_step are dropped, and the file
 * is rewritten with the rest before appending continues. */
int metrics_open(struct metrics *m, const char *dir, const char *run_header_json, int resume_step, struct io_err *e);
int metrics_train(struct metrics *m, const struct train_record *r, struct io_err *e);
/* metrics_train with the step's FP8 statistics (NULL: none). */
int metrics_train_fp8(struct metrics *m, const struct train_record *r, const struct fp8_record *f8, struct io_err *e);
int metrics_eval(struct metrics *m, const struct eval_record *r, struct io_err *e);
/* Appends one JSON object (a line without its newline) belonging to `step`, e.g. a resume record. */
int metrics_note(struct metrics *m, int step, const char *json, struct io_err *e);
/* A sample record (strings JSON-escaped): a note of kind "sample". */
int metrics_sample(struct metrics *m, int step, int index, const char *prompt, const char *completion, int tokens,
                   struct io_err *e);
/* Writes <dir>/loss.svg from the records so far (atomically). */
int metrics_plot(const struct metrics *m, struct io_err *e);
void metrics_close(struct metrics *m);

/* Model FLOPs per trained token, PERFORMANCE.md's convention (HF peer's flops_per_token):
 * N_mm = L·(C·H·D + 2·C·KVH·D + H·D·C + 3·C·F) + C·V, attention = L·4·H·D·T/2 (causal half);
 * 6·N_mm + 3·attention for full fine-tuning, 4·N_mm + 3·attention with frozen base weights. */
double train_flops_per_token(const struct model_config *c, int T, int full);

/* Formats the progress line of step r (of total) into buf. */
void metrics_progress_line(char *buf, size_t cap, const struct train_record *r, int total, double eta_s);

/* Renders the SVG of the given series into a malloc'ed string (the caller frees it). */
char *metrics_svg(const struct train_record *train, int n_train, const struct eval_record *eval, int n_eval);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_METRICS_H */
