/* job_check.h — the ranks of a job agree on what they train, checked at start.
 *
 * Every rank fingerprints (SHA-256) three things and the job compares them with rank 0's:
 *   options  the trainers' options as JSON (train_options_to_json: every flag, --out included);
 *   model    the --model path: for a folder, every regular file in it (by name, in byte order),
 *            for a file, the file itself — each by its name, size and 16 blocks of 64 KiB spread
 *            evenly over it (a different checkpoint of the same shapes differs there);
 *   data     the packed training data: sequence length, token count, training and validation
 *            sequence counts, targets, and 4096 tokens spread evenly over the stream.
 * A rank whose fingerprint differs is named, on every rank, in one message ("rank 2's model files
 * differ from rank 0's: ...") and the job fails before the engine is built. The fingerprints cost
 * a few reads per file, not a pass over the weights.
 */
#ifndef REFINE_TRAINERS_JOB_CHECK_H
#define REFINE_TRAINERS_JOB_CHECK_H

#include <stdint.h>

#include "io/error.h"
#include "train/comm.h"
#include "train/data.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

enum job_part { JOB_OPTIONS = 0, JOB_MODEL, JOB_DATA, JOB_N_PARTS };

/* The fingerprint of --model's files: 0, or -1 with e (unreadable path). */
int job_fingerprint_model(uint8_t digest[32], const char *path, struct io_err *e);
/* The fingerprint of the packed data. */
void job_fingerprint_data(uint8_t digest[32], const struct dataset *d);
/* The fingerprint of the options. */
void job_fingerprint_options(uint8_t digest[32], const struct train_options *o);

/* Compares every rank's fingerprints with rank 0's over comm (a collective): 0 when all agree, or
 * -1 with e naming each differing rank and part (the same message on every rank). */
int job_check(const struct train_comm *comm, const uint8_t digests[JOB_N_PARTS][32], struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_JOB_CHECK_H */
