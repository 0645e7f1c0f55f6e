/* run_dir.h — the --out folder of a run: one run per folder, locked while it lives, and the only
 * names refine ever deletes.
 *
 * What refine writes in --out (and so the only names it deletes, never following a symbolic link):
 *   metrics.jsonl, loss.svg                         train/metrics.c
 *   checkpoint/LATEST, checkpoint/step-<N>/{state.safetensors, trainer.json, SHA256SUMS}
 *                                                   train/checkpoint.c (step-<N>.tmp/ while written)
 *   adapter/{adapter_config.json, adapter_model.safetensors}   io/peft.c
 *   merged/{config.json, model.safetensors}        train/export.c
 *   .refine.lock                                    this file: the lock, never deleted
 * and, while each file is written, "<name>.tmp.<pid>" beside it (io/file.h write_file_atomic).
 *
 * run_dir_claim(out, resume, overwrite), before anything is written:
 *   1. creates out (mkdir -p) and takes an exclusive flock on out/.refine.lock, held until the
 *      process ends (the kernel releases it even on kill -9); the holder writes its pid there. A
 *      second run on the same folder is refused, naming the holder's pid.
 *   2. refuses a folder that holds another run (any of metrics.jsonl, loss.svg, checkpoint,
 *      adapter, merged) with a message that says how to resume it (--resume OUT/checkpoint),
 *      keep it (another --out) or replace it (--overwrite) — unless --resume names a checkpoint
 *      inside this folder (the run continues itself; --overwrite is then moot), or --overwrite
 *      is given (refine's names above are deleted first; nothing else in the folder is touched).
 *   3. deletes what killed runs leave behind: "<name>.tmp.<pid>" files of refine's names and
 *      checkpoint/step-<N>.tmp folders (no other process writes there: the lock is ours).
 * A folder the claim created is removed again at exit when the run wrote nothing into it (bad
 * input found after the claim leaves no empty folder behind).
 *
 * run_dir_remove_step(checkpoint_dir, name): deletes checkpoint/<name> (a step-<N> or
 * step-<N>.tmp folder; any other name is left alone) the safe way: a symbolic link is unlinked (its target untouched); in a
 * folder only refine's checkpoint files (and their .tmp.<pid> leftovers) are unlinked, through a
 * descriptor opened with O_NOFOLLOW, and the folder is removed only when that left it empty
 * (foreign content stays, with a warning on stderr).
 *
 * A multi-process run claims its folder on the rank that writes (rank 0) only.
 */
#ifndef REFINE_TRAIN_RUN_DIR_H
#define REFINE_TRAIN_RUN_DIR_H

#include <stddef.h>

#include "io/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct run_dir {
    int lock_fd; /* -1 when not held */
    char path[1024];
};

int run_dir_claim(struct run_dir *d, const char *out, const char *resume, int overwrite, struct io_err *e);
void run_dir_release(struct run_dir *d);

/* 1 when out holds another run's outputs (step 2 above). */
int run_dir_holds_run(const char *out);

int run_dir_remove_step(const char *checkpoint_dir, const char *name);

/* The command that resumes this run: argv with any --resume and --overwrite dropped and
 * "--resume <out>/checkpoint" appended, each word shell-quoted. */
void run_dir_resume_command(char *buf, size_t cap, int argc, char **argv, const char *out);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_RUN_DIR_H */
