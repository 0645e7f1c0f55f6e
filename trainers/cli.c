/* cli.c — the trainer program's flow around its engine (cli.h). */
#include "trainers/cli.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/file.h"
#include "io/prompts.h"
#include "io/text_stream.h"
#include "io/tokenizer.h"
#include "train/data.h"
#include "train/export.h"
#include "train/identity.h"
#include "train/loop.h"
#include "train/run_dir.h"
#include "train/signals.h"
#include "trainers/comm_open.h"
#include "trainers/job_check.h"

/* ---- the tokenizer as the data pipeline's encoder ----------------------------------------- */

static int enc_text(void *self, const char *text, size_t len, uint32_t target, struct token_vec *out,
                    size_t *bad_offset, struct io_err *e) {
    struct tokenizer *tok = self;
    struct tok_ids ids = {0};
    size_t bad = 0;
    if (tokenizer_encode_exact(tok, text, len, 0, &ids, &bad) != 0) {
        tok_ids_free(&ids);
        *bad_offset = bad;
        return io_fail(e, "the byte 0x%02x has no token in the tokenizer's vocabulary (it cannot be trained on)",
                       (unsigned char)text[bad]);
    }
    int rc = 0;
    for (size_t i = 0; i < ids.n && rc == 0; i++) rc = token_vec_push(out, ids.ids[i] | target, e);
    tok_ids_free(&ids);
    return rc;
}

static int enc_chat(void *self, const struct chat_message *msgs, int n, struct token_vec *out, struct io_err *e) {
    struct tokenizer *tok = self;
    struct chat_tokens ct = {0};
    int rc = tokenizer_apply_chat(tok, msgs, (size_t)n, CHAT_EXACT, &ct, e);
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

/* ---- samples during training (--sample-every, --sample-prompts) -------------------------------- */

struct sampling {
    struct prompt_list pl;
    const int32_t **ids;
    int *lens;
    const char **text;
    int32_t end[8];
    struct train_samples ts;
};

/* The completion's text: special tokens skipped, an unfinished UTF-8 character at the end cut. */
static char *decode_sample(void *ctx, const int32_t *ids, int n) {
    struct tok_bytes b = {0};
    struct io_err e;
    if (tokenizer_decode(ctx, (const uint32_t *)ids, (size_t)n, TOKENIZER_SKIP_SPECIAL, &b, &e) != 0) {
        tok_bytes_free(&b);
        return strdup("(undecodable)");
    }
    b.data[b.n - utf8_incomplete_tail(b.data, b.n)] = '\0';
    return b.data;
}

static void add_end(struct sampling *s, int64_t id) {
    if (id < 0) return;
    for (int i = 0; i < s->ts.n_end; i++)
        if (s->end[i] == id) return;
    if (s->ts.n_end < 8) s->end[s->ts.n_end++] = (int32_t)id;
}

static int open_sampling(struct sampling *s, const struct train_options *o, struct tokenizer *tok,
                         const struct model_config *c, struct io_err *e) {
    memset(s, 0, sizeof *s);
    if (prompts_read(&s->pl, o->sample_prompts, tok, e)) return io_fail_context(e, "--sample-prompts");
    s->ids = calloc((size_t)s->pl.n, sizeof *s->ids);
    s->lens = calloc((size_t)s->pl.n, sizeof *s->lens);
    s->text = calloc((size_t)s->pl.n, sizeof *s->text);
    if (!s->ids || !s->lens || !s->text) return io_fail(e, "out of memory");
    for (int i = 0; i < s->pl.n; i++)
        s->ids[i] = s->pl.p[i].ids, s->lens[i] = s->pl.p[i].n, s->text[i] = s->pl.p[i].text;
    for (int i = 0; i < c->n_eos; i++) add_end(s, c->eos_token_ids[i]);
    add_end(s, tokenizer_eos_id(tok));
    if (tokenizer_chat_template(tok) == CHAT_TEMPLATE_LLAMA3) add_end(s, tokenizer_token_to_id(tok, "<|eot_id|>", 10));
    if (tokenizer_chat_template(tok) == CHAT_TEMPLATE_CHATML) add_end(s, tokenizer_token_to_id(tok, "<|im_end|>", 10));
    s->ts.n = s->pl.n;
    s->ts.ids = s->ids;
    s->ts.lens = s->lens;
    s->ts.text = s->text;
    s->ts.max_new = o->sample_tokens;
    s->ts.end_ids = s->end;
    s->ts.decode = decode_sample;
    s->ts.ctx = tok;
    return 0;
}

static void close_sampling(struct sampling *s) {
    prompts_free(&s->pl);
    free(s->ids), free(s->lens), free(s->text);
}

/* The merged folder's tokenizer: an HF source's own tokenizer.json and tokenizer_config.json copied
 * byte for byte; otherwise (a GGUF source, or a folder with only Meta's tokenizer.model) the
 * tokenizer written as those files (io/tokenizer.h tokenizer_write_hf). The folder then loads in
 * transformers and //trainers:generate as it is. */
static int export_tokenizer(const struct model_source *src, const struct tokenizer *tok, const char *dir,
                            struct io_err *e) {
    if (src->kind != MODEL_SOURCE_HF || !src->tokenizer_json[0]) return tokenizer_write_hf(tok, dir, e);
    static const char *const k_files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof k_files / sizeof *k_files; i++) {
        char from[MODEL_SOURCE_PATH_MAX + 32], to[OPT_PATH_MAX + 64];
        snprintf(from, sizeof from, "%s/%s", src->path, k_files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, k_files[i]);
        if (!file_exists(from)) continue;
        struct mapped_file m;
        if (map_file(&m, from, e)) return -1;
        const int rc = write_file_atomic(to, m.data, m.size, e);
        unmap_file(&m);
        if (rc) return -1;
    }
    return 0;
}

static int export_outputs(const struct train_options *o, const struct model_source *src, const struct train_engine *eng,
                          const struct tokenizer *tok, struct io_err *e) {
    const struct model_config *c = &src->config;
    char dir[OPT_PATH_MAX + 32];
    if (o->method != METHOD_FULL) {
        snprintf(dir, sizeof dir, "%s/adapter", o->out);
        if (export_peft_adapter(dir, o, c, eng, "", e)) return -1;
        printf("adapter (PEFT): %s\n", dir);
    }
    if (o->export_kind != EXPORT_ADAPTER || o->method == METHOD_FULL) {
        snprintf(dir, sizeof dir, "%s/merged", o->out);
        if (export_merged(dir, c, eng, o->method == METHOD_FULL, eng->adapter_scale, e)) return -1;
        if (export_tokenizer(src, tok, dir, e)) return -1;
        printf("model (HF safetensors, bf16): %s\n", dir);
    }
    if (o->export_kind == EXPORT_GGUF) {
        snprintf(dir, sizeof dir, "%s/model-%s.gguf", o->out, train_gguf_type_name(o->gguf_type));
        if (export_gguf(dir, c, eng, o->method == METHOD_FULL, eng->adapter_scale, tok, o->gguf_type, e)) return -1;
        printf("model (GGUF %s, for llama.cpp and Ollama): %s\n", train_gguf_type_name(o->gguf_type), dir);
    }
    return 0;
}

int program_options(struct train_options *o, int argc, char **argv, enum options_program prog, const char *program) {
    const char *wd = getenv("BUILD_WORKING_DIRECTORY"); /* bazel run: paths are the user's */
    struct io_err e = {{0}};
    if (wd && chdir(wd) != 0) {
        io_fail(&e, "cannot enter %s", wd);
        io_exit(&e);
    }
    char cache[1024];
    train_cache_dir(cache, sizeof cache);
    train_options_defaults(o, cache);
    if (train_options_parse(o, argc, argv, prog, &e)) io_exit(&e);
    if (!o->help) return 0;
    train_options_help(stdout, program, prog, cache);
    return 1;
}

int train_main(int argc, char **argv, const struct trainer *t) {
    struct train_options o;
    struct io_err e = {{0}};
    if (program_options(&o, argc, argv, PROGRAM_TRAIN, t->program)) return 0;
    char cache[1024];
    train_cache_dir(cache, sizeof cache);
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
    struct run_dir rd; /* --out, locked for the run's life (rank 0 owns the folder) */
    memset(&rd, 0, sizeof rd);
    if (root && run_dir_claim(&rd, o.out, o.resume, o.overwrite, &e)) io_exit(&e);

    struct model_source src;
    if (model_source_open(&src, o.model, &e)) io_exit(&e);
    if (o.seq == OPT_SEQ_AUTO) {
        if (t->longest_seq == NULL) {
            io_fail(&e, "--seq auto searches a memory plan, which this trainer does not have: give --seq N");
            io_exit(&e);
        }
        if (t->longest_seq(&o, &src, &e)) io_exit(&e);
    }
    if (config_check_seq_len(&src.config, o.seq, &e)) io_exit(&e);
    if (config_seq_beyond_context(&src.config, o.seq) && comm_is_root(&comm))
        fprintf(stderr, "refine: warning: --seq %d is beyond the model's max_position_embeddings %d; positions past "
                        "it were never trained (RoPE extrapolates)\n",
                o.seq, src.config.max_position_embeddings);
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
    struct sampling samp;
    memset(&samp, 0, sizeof samp);
    if (o.sample_every > 0 && open_sampling(&samp, &o, tok, &src.config, &e)) io_exit(&e);
    const char *paths[OPT_MAX_DATA];
    for (int i = 0; i < o.n_data; i++) paths[i] = o.data[i];
    struct data_options dopt = {o.seq, o.val_fraction, o.seed, cache, o.data_format, (uint32_t)src.config.V};
    struct dataset ds;
    if (dataset_open(&ds, paths, o.n_data, &enc, &dopt, &e)) io_exit(&e);
    char memo[1100];
    snprintf(memo, sizeof memo, "%s/digests", cache);
    char *identity = run_identity_json(&src, &ds, memo, &e);
    if (!identity) io_exit(&e);
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
    if (o.sample_every > 0) bs.samples = &samp.ts;
    struct loop_result res;
    int rc = train_loop_run(&o, &eng, &bs, &comm, identity, &res, &e);
    /* exports read the whole state on rank 0: a sharded engine gathers it first (every rank) */
    if (rc == 0 && !res.stopped_early && eng.gather != NULL) rc = eng.gather(eng.self, &e);
    if (rc == 0 && !res.stopped_early && root) rc = export_outputs(&o, &src, &eng, tok, &e);
    if (rc == 0 && root)
        printf("metrics: %s/metrics.jsonl, plot: %s/loss.svg, checkpoint: %s/checkpoint\n", o.out, o.out, o.out);
    if (rc == 0 && res.stop_signal != 0 && root) {
        char cmd[8192];
        run_dir_resume_command(cmd, sizeof cmd, argc, argv, o.out);
        printf("stopped by %s after step %d of %d; checkpoint: %s/checkpoint/step-%d\nto continue: %s\n",
               train_signal_name(res.stop_signal), res.steps_done, res.total_steps, o.out, res.steps_done, cmd);
    }
    fflush(stdout);
    if (rc) io_exit(&e); /* before the job ends: a failed job is ended by the exit, not taken down in order */
    free(identity);
    eng.destroy(eng.self);
    free(eng.gen_state); /* an attached generate hook's state (train/engine.h) */
    close_sampling(&samp);
    comm.destroy(comm.self);
    dataset_close(&ds);
    tokenizer_free(tok);
    model_source_close(&src);
    if (root) run_dir_release(&rd);
    return 0;
}
