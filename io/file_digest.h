/* file_digest.h — the SHA-256 of a file's content, for the identity of a run's inputs (model and
 * data files, train/identity.h) and the integrity of checkpoints (train/checkpoint.h).
 *
 * file_sha256(hex, path, memo_dir): the 64 lowercase hex digits of sha256(file bytes), what
 * `sha256sum path` prints. Hashing runs at a few hundred MB/s on one core, so that a 16 GB model
 * would cost a minute at every start; with memo_dir non-NULL the digest is remembered in
 * <memo_dir>/<key>, where key = sha256 of the file's identity as the kernel reports it (device,
 * inode, size, modification and status-change times in nanoseconds). Any write to the file, a
 * replacement by rename or copy, or a restore from a backup changes the inode or the status-change
 * time (which no user call can set back), so a remembered digest is that of the bytes now in the
 * file — the rule git's index and rsync rely on. A damaged or foreign memo entry (not 64 hex
 * digits) is ignored and rewritten; a memo that cannot be written costs only the speed.
 *
 * sha256_file_hex(hex, path): the same, always hashing (checkpoint files, whose bytes must be
 * read to be verified). Errors name the file (io/error.h).
 */
#ifndef REFINE_IO_FILE_DIGEST_H
#define REFINE_IO_FILE_DIGEST_H

#include "io/error.h"

#ifdef __cplusplus
extern "C" {
#endif

int file_sha256(char hex[65], const char *path, const char *memo_dir, struct io_err *e);
int sha256_file_hex(char hex[65], const char *path, struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_FILE_DIGEST_H */
