/* data.h — training data: files → documents → cached token stream → packed sequences → batches.
 *
 * Inputs (--data, repeatable): files or folders (every regular file below a folder, recursively,
 * in byte order of the path; names starting with '.' are skipped). Two formats:
 *   JSONL  one JSON object per line (blank lines skipped; anything but white space after the
 *          object is an error naming file and line), each with exactly one of
 *            {"text": s}                         every token is trained;
 *            {"prompt": p, "response": r}        loss only on r (and the EOS after it);
 *            {"messages": [{"role","content"}]}  the model's chat template; loss only on the
 *                                                assistant turns' tokens (as the encoder marks).
 *   text   UTF-8 text; the whole file is one document.
 * The format of each file (DATA_FORMAT_AUTO, data_detect_format) is decided by its content, the
 * name only hardening the decision: a file whose first non-blank line is a whole JSON object is
 * JSONL; a file named *.jsonl, *.json or *.ndjson (any case) must be JSONL, and one that does not
 * start with '{' is refused (a JSON array, or text misnamed) rather than trained as text. Every
 * other file is text. --data-format text|jsonl imposes one format on every file.
 * Each document is encoded as [BOS?] tokens EOS (BOS when the encoder says so); documents are
 * concatenated in input order into one token stream. Text the encoder cannot represent (a byte
 * the vocabulary has no token for) is an error naming the file and line, never dropped.
 *
 * Token stream: uint32 words; bits 0..30 the token id, bit 31 (DATA_TARGET) set when the token is
 * a training target (a position whose label may carry loss). Every id must be below
 * data_options.vocab_size (when set): an id the model has no embedding row for never reaches
 * an engine (the GPU embedding does not bound-check). The stream of each input file is cached in
 * <cache>/tokens/<key>.tok, key = SHA-256 of (cache version, encoder identity, BOS rule, resolved
 * format, SHA-256 of the file's bytes), written atomically and memory-mapped on later runs, so a
 * corpus is tokenized once; an entry that is damaged or holds an id beyond the vocabulary is
 * rebuilt. The SHA-256 of each file's bytes (io/file_digest.h, remembered in <cache>/digests) is
 * also the data's identity in checkpoints (train/identity.h).
 *
 * Packing: the stream of S tokens gives n = (S − 1) / T sequences; sequence i is the window
 * stream[i·T .. i·T + T] (T + 1 tokens): tokens[t] = window[t], labels[t] = window[t+1] when
 * that token is a target, else −100. Windows overlap by one token, so every target but the first
 * token is predicted exactly once; documents are separated by EOS and attention crosses document
 * boundaries (transformers' group_texts packing). Sequences whose labels are all −100 are kept
 * (they weigh nothing in the loss).
 *
 * Split and order: a permutation of the n sequences drawn from the seed puts the first
 * n_val = round(val_fraction · n) (at least 1 when val_fraction > 0 and n ≥ 2) into validation
 * (in that order, fixed for the run); the rest train. Epoch e visits the training sequences in a
 * permutation drawn from (seed, e). So (seed, epoch, position) names every batch: resume is exact.
 *
 * Bad input (exit status 1 through io_err, never a crash): a missing path, an empty folder, a
 * file that is not UTF-8 text, a JSONL line that is not a JSON object, has text after it, or has
 * neither text nor prompt/response nor messages (named by file and line number), text the
 * tokenizer cannot represent (file and line), data too short to fill one sequence of T + 1
 * tokens, a token id ≥ vocab_size or ≥ 2^31.
 */
#ifndef REFINE_TRAIN_DATA_H
#define REFINE_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "io/error.h"
#include "io/tokenizer.h" /* struct chat_message */
#include "train/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DATA_TARGET 0x80000000u
#define DATA_ID_MASK 0x7FFFFFFFu

/* A growable array of token words (ids with the DATA_TARGET bit). */
struct token_vec {
    uint32_t *v;
    size_t n, cap;
};

int token_vec_push(struct token_vec *t, uint32_t word, struct io_err *e);
void token_vec_free(struct token_vec *t);

/* How text becomes tokens: the trainer adapts the model's tokenizer (io/tokenizer.h); tests use
 * small synthetic encoders. encode and encode_chat APPEND words to out: encode marks every token
 * with `target`; encode_chat marks the tokens the template trains on (assistant content and the
 * end-of-turn token after it). Both fail (-1, e set) on text they cannot represent; encode then
 * also sets *bad_offset to the offset in text of the first byte it could not represent (the
 * pipeline turns it into a line number). */
struct data_encoder {
    void *self;
    char identity[65]; /* hex digest naming the vocabulary and rules (cache key) */
    int add_bos;
    uint32_t bos, eos;
    int (*encode)(void *self, const char *text, size_t len, uint32_t target, struct token_vec *out,
                  size_t *bad_offset, struct io_err *e);
    int (*encode_chat)(void *self, const struct chat_message *msgs, int n, struct token_vec *out,
                       struct io_err *e);
};

struct data_options {
    int T;               /* sequence length */
    float val_fraction;  /* share of sequences held out */
    unsigned long long seed;
    const char *cache;   /* cache directory; NULL: no caching */
    enum data_format format; /* every file's format, or AUTO: by content (data_detect_format) */
    uint32_t vocab_size;     /* every token id must be below it; 0: unchecked */
};

/* One input file and the SHA-256 of its bytes (hex), in input order. */
struct data_file {
    char *path;
    char sha256[65];
};

struct dataset {
    int T;
    struct token_vec owned;   /* the stream when built in memory */
    const uint32_t *stream;   /* S words */
    size_t S;
    int64_t n_seq, n_train, n_val;
    int64_t *val_order;       /* n_val sequence indices */
    int64_t *train_set;       /* n_train sequence indices (epoch permutations are drawn over it) */
    int64_t *epoch_order;     /* cached permutation of train_set for epoch `epoch_cached` */
    int epoch_cached;
    unsigned long long seed;
    int64_t n_targets;        /* target tokens in the stream */
    int n_files;
    struct data_file *files;  /* n_files (dataset_open only) */
    int cache_hits;           /* inputs whose tokens came from the cache */
};

/* Reads and tokenizes every input (through the cache), packs and splits. */
int dataset_open(struct dataset *d, const char *const *paths, int n_paths, const struct data_encoder *enc,
                 const struct data_options *o, struct io_err *e);
/* The same over an in-memory token stream (tests, synthetic data). The stream is copied. */
int dataset_from_stream(struct dataset *d, const uint32_t *stream, size_t S, const struct data_options *o,
                        struct io_err *e);
void dataset_close(struct dataset *d);

/* Sequence `seq` (0 ≤ seq < n_seq) into tokens[T], labels[T]; returns the number of labels that
 * are not −100. */
int64_t dataset_sequence(const struct dataset *d, int64_t seq, int32_t *tokens, int32_t *labels);

/* The loop's view (train/loop.h): train_batch(epoch, pos) reads training sequences pos .. pos+B−1
 * of epoch's order (wrapping), val_batch(first) validation sequences first .. first+B−1. */
void dataset_batch_source(struct dataset *d, struct batch_source *src);

/* Tokenizes one input file into words (no cache) in the given format (AUTO: detected); exposed for
 * tests and tools. */
int data_tokenize_file(const char *path, enum data_format format, const struct data_encoder *enc,
                       struct token_vec *out, struct io_err *e);

/* The format of a file's bytes (see the top of this file): DATA_FORMAT_TEXT or DATA_FORMAT_JSONL
 * into *out; -1 with a message naming path when the name says JSON but the content does not. A
 * requested format other than AUTO is returned as it is. */
int data_detect_format(enum data_format *out, const char *path, const uint8_t *data, size_t size,
                       enum data_format requested, struct io_err *e);

/* "text", "jsonl" or "auto". */
const char *data_format_name(enum data_format f);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_DATA_H */
