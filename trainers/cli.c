/* cli.c — the trainer program's flow around its engine (cli.h). */
#include "trainers/cli.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/tokenizer.h"
#include "train/data.h"
#include "train/export.h"
#include "train/loop.h"
#include "trainers/comm_open.h"
#include "trainers/job_check.h"

/* ---- the tokenizer as the data pipeline's encoder ----------------------------------------- */

static int enc_text(void *self, const char *text, size_t len, uint32_t target, struct token_vec *out,
                    struct io_err *e) {
    struct tokenizer *tok = self;
    struct tok_ids ids = {0};
    tokenizer_encode(tok, text, len, 0, &ids);
    int rc = 0;
    for (size_t i = 0; i < ids.n && rc == 0; i++) rc = token_vec_push(out, ids.ids[i] | target, e);
    tok_ids_free(&ids);
    return rc;
}

static int enc_chat(void *self, const struct chat_message *msgs, int n, struct token_vec *out, struct io_err *e) {
    struct tokenizer *tok = self;
    struct chat_tokens ct = {0};
    int rc = tokenizer_apply_chat(tok, msgs, (size_t)n, 0, &ct, e);
    for (size_t i = 0; i < ct.n && rc == 0; i++) rc = token_vec_push(out, ct.ids[i] | (ct.mask[i] ? DATA_TARGET : 0), e);
    chat_tokens_free(&ct);
    return rc;
}

static int make_encoder(struct data_encoder *enc, struct tokenizer *tok, const struct model_source *src,
                        const char *model_path, struct io_err *e) {
    memset(enc, 0, sizeof *enc);
    enc->self = tok;
    if (model_source_tokenizer_identity(src, enc->identity, e)) return -1;
    enc->add_bos = tokenizer_adds_bos(tok) && tokenizer_bos_id(tok) >= 0;
    enc->bos = enc->add_bos ? (uint32_t)tokenizer_bos_id(tok) : 0;
    const int64_t eos = src->config.n_eos > 0 ? src->config.eos_token_ids[0] : tokenizer_eos_id(tok);
    if (eos < 0) return io_fail(e, "%s: the model names no end-of-sequence token", model_path);
    enc->eos = (uint32_t)eos;
    enc->encode = enc_text;
    enc->encode_chat = tokenizer_chat_template(tok) != CHAT_TEMPLATE_NONE ? enc_chat : NULL;
    return 0;
}

static int export_outputs(const struct train_options *o, const struct model_config *c, const struct train_engine *eng,
                          struct io_err *e) {
    char dir[OPT_PATH_MAX + 32];
    if (o->method != METHOD_FULL) {
        snprintf(dir, sizeof dir, "%s/adapter", o->out);
        if (export_peft_adapter(dir, o, c, eng, "", e)) return -1;
        printf("adapter (PEFT): %s\n", dir);
    }
    if (o->export_kind == EXPORT_MERGED || o->method == METHOD_FULL) {
        snprintf(dir, sizeof dir, "%s/merged", o->out);
        if (export_merged(dir, c, eng, o->method == METHOD_FULL, eng->adapter_scale, e)) return -1;
        printf("model (HF safetensors, bf16): %s\n", dir);
    }
    return 0;
}

int train_main(int argc, char **argv, const struct trainer *t) {
    const char *wd = getenv("BUILD_WORKING_DIRECTORY"); /* bazel run: paths are the user's */
    if (wd && chdir(wd) != 0) {
        fprintf(stderr, "refine: cannot enter %s\n", wd);
        return 1;
    }
    char cache[1024];
    train_cache_dir(cache, sizeof cache);
    struct train_options o;
    struct io_err e = {{0}};
    train_options_defaults(&o, cache);
    if (train_options_parse(&o, argc, argv, PROGRAM_TRAIN, &e)) io_exit(&e);
    if (o.help) {
        train_options_help(stdout, t->program, PROGRAM_TRAIN, cache);
        return 0;
    }
    struct train_comm comm; /* the job: one process, or the ranks a launcher started */
    int job = 0; /* 1: started by a launcher (also a job of one rank: mpirun -np 1) */
    if (comm_open(&comm, &job, &e)) io_exit(&e);
    if (job) {
        /* the default --out names the time of the start: rank 0's, for every rank */
        if (comm.broadcast(comm.self, o.out, sizeof o.out, 0, "--out", &e)) io_exit(&e);
        if (t->join && t->join(&comm, &e)) io_exit(&e);
        if (comm_is_root(&comm)) printf("job: %s\n", comm.name);
    }
    const int root = comm_is_root(&comm);
    if (t->check && t->check(&o, &e)) io_exit(&e);

    struct model_source src;
    if (model_source_open(&src, o.model, &e)) io_exit(&e);
    if (config_check_seq_len(&src.config, o.seq, &e)) io_exit(&e);
    if (o.method == METHOD_FULL && model_source_is_bnb(&src, llama_linears[LLAMA_Q].weight, 0)) {
        io_fail(&e, "%s is a bitsandbytes 4-bit checkpoint: its base weights cannot train (use --method qlora or "
                    "qdora)", o.model);
        io_exit(&e);
    }
    struct tokenizer *tok = model_source_tokenizer(&src, &e);
    if (!tok) io_exit(&e);
    if (root)
        printf("model %s: %d layers, width %d, %d/%d heads, vocabulary %d%s\n", o.model, src.config.L, src.config.C,
               src.config.H, src.config.KVH, src.config.V, src.config.tie_word_embeddings ? ", tied head" : "");

    struct data_encoder enc;
    if (make_encoder(&enc, tok, &src, o.model, &e)) io_exit(&e);
    const char *paths[OPT_MAX_DATA];
    for (int i = 0; i < o.n_data; i++) paths[i] = o.data[i];
    struct data_options dopt = {o.seq, o.val_fraction, o.seed, cache};
    struct dataset ds;
    if (dataset_open(&ds, paths, o.n_data, &enc, &dopt, &e)) io_exit(&e);
    if (root)
        printf("data: %d file(s), %zu tokens (%" PRId64 " trained), %" PRId64 " training and %" PRId64
               " validation sequences of %d\n",
               ds.n_files, ds.S, ds.n_targets, ds.n_train, ds.n_val, ds.T);
    if (job) {
        uint8_t fp[JOB_N_PARTS][32];
        job_fingerprint_options(fp[JOB_OPTIONS], &o);
        job_fingerprint_data(fp[JOB_DATA], &ds);
        if (job_fingerprint_model(fp[JOB_MODEL], o.model, &e) || job_check(&comm, fp, &e)) io_exit(&e);
    }

    struct train_engine eng;
    const int64_t fill = ds.n_train / ((int64_t)o.grad_accum * comm.world);
    if (t->create(&eng, &o, &src, fill > INT32_MAX ? INT32_MAX : fill < 1 ? 1 : (int)fill, &comm, &e)) io_exit(&e);
    struct batch_source bs;
    dataset_batch_source(&ds, &bs);
    struct loop_result res;
    int rc = train_loop_run(&o, &eng, &bs, &comm, &res, &e);
    /* exports read the whole state on rank 0: a sharded engine gathers it first (every rank) */
    if (rc == 0 && !res.stopped_early && eng.gather != NULL) rc = eng.gather(eng.self, &e);
    if (rc == 0 && !res.stopped_early && root) rc = export_outputs(&o, &src.config, &eng, &e);
    if (rc == 0 && root)
        printf("metrics: %s/metrics.jsonl, plot: %s/loss.svg, checkpoint: %s/checkpoint\n", o.out, o.out, o.out);
    if (rc) io_exit(&e); /* before the job ends: a failed job is ended by the exit, not taken down in order */
    eng.destroy(eng.self);
    comm.destroy(comm.self);
    dataset_close(&ds);
    tokenizer_free(tok);
    model_source_close(&src);
    return 0;
}
