/* identity.h — what a run trains on, by content: the identity a checkpoint records and a resume
 * must match.
 *
 * JSON (one object, in trainer.json's "identity" and the metrics log's run header):
 *   {"model":[{"file":"<path>","sha256":"<hex>"},...],
 *    "data":[{"file":"<path>","sha256":"<hex>"},...]}
 * model: every file that makes the model (io/model_source.h model_source_files: the GGUF file, or
 *   the HF folder's config, tokenizer and safetensors files); data: every input file in input
 *   order (train/data.h; their digests are the ones that key the token cache). sha256 is of the
 *   file's bytes (io/file_digest.h, remembered by file identity, so a start does not re-read an
 *   unchanged model).
 *
 * run_identity_compare(saved, now) — resuming: the model must be the same set of contents (paths
 * may differ: a moved or renamed model folder is the same model), the data the same contents in
 * the same order (the token stream, and so every batch, follows from them). The first difference
 * is an error naming the file now given (and the digest then and now), and how to go on:
 * `--resume-anyway` turns it into a note (accept = 1): the run continues from the checkpoint's
 * weights and optimizer state with the files now given. A checkpoint without an identity (saved
 * NULL) is refused unless accepted.
 */
#ifndef REFINE_TRAIN_IDENTITY_H
#define REFINE_TRAIN_IDENTITY_H

#include "io/error.h"
#include "io/model_source.h"
#include "train/data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The identity of this run as a malloc'ed JSON object; memo_dir as io/file_digest.h (NULL: none). */
char *run_identity_json(const struct model_source *model, const struct dataset *data, const char *memo_dir,
                        struct io_err *e);

/* 0 when now matches saved; else -1 with e naming the first differing file (where: the checkpoint
 * folder, for the message), or, with accept, 0 and the differences in *notes (malloc'ed; "" when
 * none; the caller frees it). saved and now are JSON objects as above (saved may be NULL). */
int run_identity_compare(const char *saved, const char *now, const char *where, int accept, char **notes,
                         struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_IDENTITY_H */
