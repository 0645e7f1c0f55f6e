/* train_compare.h — whole training runs compared by their output folders: the GPU trainer against
 * the CPU trainer (STYLE.md tiers (c) and (d)), and bitwise determinism of two runs.
 *
 * A run folder is what `--out DIR` of //ref:train or //gpu:train holds:
 *   DIR/metrics.jsonl       {"kind":"train","step":N,"loss":...} per optimizer step and
 *                           {"kind":"eval","step":N,"val_loss":...} per evaluation (train/metrics.h)
 *   DIR/checkpoint/LATEST   "step-<N>": the last checkpoint, DIR/checkpoint/step-<N>/state.safetensors,
 *                           every engine tensor by name (train/checkpoint.h): trainable fp32
 *                           parameters, and optimizer state named "<param>.exp_avg", ".exp_avg_sq",
 *                           ".state1", ".state2", ".absmax1", ".absmax2".
 *
 * compare_tolerance (oracle = //ref:train --precision fp32, same = //ref:train --precision bf16,
 * candidate = //gpu:train) — the rules and the error distribution they come from are in
 * train_compare.c's header: the candidate's distance to the oracle against the same-precision
 * run's, for the losses (training and validation pooled, rms and max: ≤ 5×), the parameters in
 * aggregate (≤ 2×) and each parameter tensor (≤ 6× its own plus its kind's typical error); every
 * value finite; tensor sets, shapes and dtypes equal. The suite-level 2× on the losses (the
 * geometric mean of loss_ratio over many runs) is train_parity.sh's.
 *
 * compare_identical: the same records with the same printed values in metrics.jsonl (every field
 * but the timing ones: tokens_per_s, mfu, mem_GiB, elapsed_s; the training records in their
 * order and the evaluations in theirs; the "run" header and the "resume" records of a resumed
 * run say how the run went, not what it computed, and are not compared), the same LATEST step, and every tensor of the last
 * checkpoints byte-identical (parameters and optimizer state).
 */
#ifndef REFINE_TESTS_PARITY_TRAIN_COMPARE_H
#define REFINE_TESTS_PARITY_TRAIN_COMPARE_H

#include <stddef.h>

#include "io/error.h"
#include "io/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One series of metrics.jsonl: the train losses or the validation losses, in file order. */
struct run_series {
    int n;
    int *step;
    double *value; /* strtod of the printed text: nan and inf are kept as such */
};

struct run {
    char dir[1024];
    struct run_series train; /* "loss" of the "train" records */
    struct run_series eval;  /* "val_loss" of the "eval" records */
    int n_records;
    char **records; /* every record but the "run" header, reduced to "kind k=v k=v ..." with its
                       non-timing fields as printed: what compare_identical compares */
    int latest_step;
    char state_path[1200];
    struct safetensors state;
};

/* Reads DIR/metrics.jsonl and opens the last checkpoint's state. 0, or -1 with one message
 * (missing or malformed file, no checkpoint, a record without its step or loss). */
int run_open(struct run *r, const char *dir, struct io_err *e);
void run_close(struct run *r);

/* 1 when the tensor is optimizer state (its name ends in one of the suffixes above). */
int is_optimizer_state(const char *name);
/* 1 when the tensor is engine state an fp32 oracle does not have ("fp8.*": FP8 scaling). */
int is_engine_state(const char *name);

struct tolerance_result {
    int pass;
    int steps; /* training steps (records) of the oracle */
    /* candidate error over same-precision error (the floor's half added to the latter), over
       every training and validation loss of the run pooled: rms (≤ 5) and largest (≤ 5) */
    double loss_ratio, loss_max_ratio;
    double param_ratio; /* aggregate parameter ratio (≤ 2) */
    double param_rel;   /* ε = ‖P_s − P_o‖ / ‖P_o‖ */
    char worst_tensor[256];
    double worst_tensor_ratio; /* per-tensor ratio (≤ 6) */
    int n_params;              /* parameter tensors compared */
    char failure[2048];        /* the first offending check with its values; "" on PASS */
};

/* 0 on PASS, 1 on FAIL (res->failure says why). */
int compare_tolerance(const struct run *oracle, const struct run *same, const struct run *cand,
                      struct tolerance_result *res);

/* One line: "NAME: steps=.. loss_ratio=.. loss_max_ratio=.. param_ratio=.. (eps .., N tensors)
 * worst_tensor=NAME (..) PASS|FAIL". */
void tolerance_summary(char *buf, size_t cap, const char *name, const struct tolerance_result *res);

/* 0 when identical, 1 otherwise with the first difference written into diff. */
int compare_identical(const struct run *a, const struct run *b, char *diff, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TESTS_PARITY_TRAIN_COMPARE_H */
