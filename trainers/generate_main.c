/* generate_main.c — the flow of the generation programs (generate_main.h). */
#include "trainers/generate_main.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cJSON.h"
#include "io/check.h"
#include "io/file.h"
#include "io/model_source.h"
#include "io/prompts.h"
#include "io/text_stream.h"
#include "io/tokenizer.h"
#include "ref/generate.h"
#include "ref/llama.h"
#include "trainers/gen_run.h"

#define PATH_CAP 1024
#define MAX_STOPS TEXT_STREAM_MAX_STOPS

struct gen_options {
    char model[PATH_CAP], adapter[PATH_CAP], tokenizer[PATH_CAP], prompts[PATH_CAP], out[PATH_CAP];
    const char *prompt, *system;
    int chat;
    int max_new;
    float temperature, top_p, repetition_penalty;
    int top_k;
    unsigned long long seed;
    int n_stop;
    const char *stop[MAX_STOPS];
    int batch;
    int context;
    enum gen_precision precision;
    int help;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void cache_dir(char *buf, size_t cap) {
    const char *c = getenv("REFINE_CACHE");
    if (c && c[0]) {
        snprintf(buf, cap, "%s", c);
        return;
    }
    const char *home = getenv("HOME");
    snprintf(buf, cap, "%s/.cache/refine", home ? home : ".");
}

static void defaults(struct gen_options *o) {
    memset(o, 0, sizeof *o);
    char cache[900];
    cache_dir(cache, sizeof cache);
    snprintf(o->model, sizeof o->model, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    o->max_new = 128;
    o->temperature = 0.0f;
    o->top_p = 1.0f;
    o->repetition_penalty = 1.0f;
    o->seed = 42;
    o->batch = 8;
    o->context = 0;
}

static void help(const char *program) {
    printf("usage: %s [--flag value]...\n\n"
           "Generates text with a model (and a fine-tuned adapter). One of:\n"
           "  --prompt TEXT          continue TEXT (streamed to stdout)\n"
           "  --prompts FILE.jsonl   one request a line: {\"prompt\": ...} or {\"messages\": [...]}; one JSON line\n"
           "                         out per request (stdout, or --out)\n"
           "  --chat                 interactive chat on stdin with the model's chat template (/reset, /exit)\n\n"
           "  --model PATH           HF folder or .gguf (default: SmolLM2-135M-Instruct from tools/setup.sh)\n"
           "  --adapter DIR          a PEFT adapter folder (refine's runs/<run>/adapter), merged into the model\n"
           "  --tokenizer PATH       tokenizer.json or folder, when the model has none of its own\n"
           "  --max-new-tokens N     at most N new tokens per completion (default 128)\n"
           "  --temperature T        0: greedy (default); > 0: sample at this temperature\n"
           "  --top-k K              sample among the K most likely tokens (0: off)\n"
           "  --top-p P              sample among the most likely tokens of total probability P (1: off)\n"
           "  --repetition-penalty R divide (or multiply, when negative) the logits of tokens already seen (1: off)\n"
           "  --seed S               seed of sampling (default 42)\n"
           "  --stop STR             end a completion before STR (repeatable, up to %d)\n"
           "  --system TEXT          --chat: a system turn first\n"
           "  --batch N              --prompts: requests in flight at once (default 8)\n"
           "  --context N            positions per sequence (default: longest prompt + --max-new-tokens; --chat: 4096),\n"
           "                         at most the model's max_position_embeddings\n"
           "  --precision P          auto (fp32 on the CPU, bf16 on the GPU) | fp32 | bf16\n"
           "  --out FILE             --prompts: write the JSON lines here instead of stdout\n"
           "  --help                 this help\n",
           program, MAX_STOPS);
}

static int parse_int(int *out, const char *flag, const char *v, long lo, long hi, struct io_err *e) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno) return io_fail(e, "--%s: '%s' is not an integer", flag, v);
    if (x < lo || x > hi) return io_fail(e, "--%s: %ld is out of range [%ld, %ld]", flag, x, lo, hi);
    *out = (int)x;
    return 0;
}

static int parse_float(float *out, const char *flag, const char *v, double lo, double hi, struct io_err *e) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x)) return io_fail(e, "--%s: '%s' is not a finite number", flag, v);
    if (x < lo || x > hi) return io_fail(e, "--%s: %g is out of range [%g, %g]", flag, x, lo, hi);
    *out = (float)x;
    return 0;
}

static int set_path(char *dst, const char *flag, const char *v, struct io_err *e) {
    if (!v[0]) return io_fail(e, "--%s: empty path", flag);
    if (strlen(v) >= PATH_CAP) return io_fail(e, "--%s: path longer than %d bytes", flag, PATH_CAP - 1);
    snprintf(dst, PATH_CAP, "%s", v);
    return 0;
}

static int parse_args(struct gen_options *o, int argc, char **argv, struct io_err *e) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) return io_fail(e, "unexpected argument '%s' (flags start with --; see --help)", a);
        char name[64];
        const char *eq = strchr(a + 2, '='), *v = NULL;
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (len >= sizeof name) return io_fail(e, "unknown flag '%s' (see --help)", a);
        memcpy(name, a + 2, len);
        name[len] = '\0';
        if (!strcmp(name, "help")) {
            o->help = 1;
            continue;
        }
        if (!strcmp(name, "chat")) {
            if (eq) return io_fail(e, "--chat takes no value");
            o->chat = 1;
            continue;
        }
        if (eq)
            v = eq + 1;
        else if (i + 1 < argc)
            v = argv[++i];
        else
            return io_fail(e, "--%s needs a value", name);
        int rc;
        if (!strcmp(name, "model")) rc = set_path(o->model, name, v, e);
        else if (!strcmp(name, "adapter")) rc = set_path(o->adapter, name, v, e);
        else if (!strcmp(name, "tokenizer")) rc = set_path(o->tokenizer, name, v, e);
        else if (!strcmp(name, "prompts")) rc = set_path(o->prompts, name, v, e);
        else if (!strcmp(name, "out")) rc = set_path(o->out, name, v, e);
        else if (!strcmp(name, "prompt")) o->prompt = v, rc = 0;
        else if (!strcmp(name, "system")) o->system = v, rc = 0;
        else if (!strcmp(name, "max-new-tokens")) rc = parse_int(&o->max_new, name, v, 0, 1 << 20, e);
        else if (!strcmp(name, "temperature")) rc = parse_float(&o->temperature, name, v, 0, 100, e);
        else if (!strcmp(name, "top-k")) rc = parse_int(&o->top_k, name, v, 0, 1 << 24, e);
        else if (!strcmp(name, "top-p")) rc = parse_float(&o->top_p, name, v, 1e-6, 1, e);
        else if (!strcmp(name, "repetition-penalty")) rc = parse_float(&o->repetition_penalty, name, v, 1e-3, 1e3, e);
        else if (!strcmp(name, "batch")) rc = parse_int(&o->batch, name, v, 1, 4096, e);
        else if (!strcmp(name, "context")) rc = parse_int(&o->context, name, v, 1, 1 << 24, e);
        else if (!strcmp(name, "seed")) {
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            rc = (end == v || *end || errno || v[0] == '-') ? io_fail(e, "--seed: '%s' is not a non-negative integer", v)
                                                            : 0;
        } else if (!strcmp(name, "stop")) {
            if (!v[0]) rc = io_fail(e, "--stop: empty string");
            else if (o->n_stop >= MAX_STOPS) rc = io_fail(e, "--stop: at most %d stop strings", MAX_STOPS);
            else o->stop[o->n_stop++] = v, rc = 0;
        } else if (!strcmp(name, "precision")) {
            if (!strcmp(v, "auto")) o->precision = GEN_PRECISION_AUTO, rc = 0;
            else if (!strcmp(v, "fp32")) o->precision = GEN_PRECISION_FP32, rc = 0;
            else if (!strcmp(v, "bf16")) o->precision = GEN_PRECISION_BF16, rc = 0;
            else rc = io_fail(e, "--precision: '%s' (allowed: auto, fp32, bf16)", v);
        } else {
            rc = io_fail(e, "unknown flag --%s (see --help)", name);
        }
        if (rc) return -1;
    }
    if (o->help) return 0;
    const int modes = (o->prompt != NULL) + (o->prompts[0] != 0) + o->chat;
    if (modes != 1) return io_fail(e, "give exactly one of --prompt TEXT, --prompts FILE.jsonl or --chat (see --help)");
    if (o->system && !o->chat) return io_fail(e, "--system is for --chat");
    if (o->out[0] && !o->prompts[0]) return io_fail(e, "--out is for --prompts");
    return 0;
}

/* ---- the model -------------------------------------------------------------------------------- */

struct session {
    struct model_source src;
    struct tokenizer *tok;
    struct llama_weights w;
    struct gen_backend b;
    struct gen_settings set;
};

static void on_text_stdout(void *ctx, int request, const char *bytes, size_t n) {
    (void)ctx, (void)request;
    fwrite(bytes, 1, n, stdout);
    fflush(stdout);
}

static void add_eos(struct gen_settings *s, int64_t id) {
    if (id < 0) return;
    for (int i = 0; i < s->n_eos; i++)
        if (s->eos[i] == id) return;
    if (s->n_eos < GEN_MAX_EOS) s->eos[s->n_eos++] = (int32_t)id;
}

static void settings(struct gen_settings *s, const struct gen_options *o, const struct model_source *src,
                     struct tokenizer *tok) {
    memset(s, 0, sizeof *s);
    ref_sample_params_default(&s->sample);
    s->sample.mode = o->temperature > 0.0f ? SAMPLE_MULTINOMIAL : SAMPLE_GREEDY;
    s->sample.temperature = o->temperature > 0.0f ? o->temperature : 1.0f;
    s->sample.top_k = o->top_k;
    s->sample.top_p = o->top_p;
    s->sample.repetition_penalty = o->repetition_penalty;
    s->sample.seed = o->seed;
    for (int i = 0; i < src->config.n_eos; i++) add_eos(s, src->config.eos_token_ids[i]);
    add_eos(s, tokenizer_eos_id(tok));
    /* the chat template's end of turn ends a reply */
    const enum chat_template_kind k = tokenizer_chat_template(tok);
    if (k == CHAT_TEMPLATE_LLAMA3) add_eos(s, tokenizer_token_to_id(tok, "<|eot_id|>", 10));
    if (k == CHAT_TEMPLATE_CHATML) add_eos(s, tokenizer_token_to_id(tok, "<|im_end|>", 10));
    s->stops = o->stop;
    s->n_stops = o->n_stop;
    s->tok = tok;
}

static int open_session(struct session *ss, const struct gen_options *o, const struct gen_device *dev, int S,
                        int T_max, struct io_err *e) {
    if (ref_gen_load_weights(&ss->w, &ss->src, o->adapter, e) != 0) return -1;
    const int rc = dev->create(&ss->b, &ss->src.config, &ss->w, S, T_max, o->precision, e);
    ref_llama_weights_free(&ss->w, &ss->src.config);
    if (rc == 0) fprintf(stderr, "engine: %s, %d sequence(s) of up to %d positions\n", ss->b.name, S, T_max);
    return rc;
}

static int context_for(const struct gen_options *o, const struct model_config *c, int longest, struct io_err *e) {
    const int want = o->context > 0 ? o->context : o->chat ? 4096 : longest + o->max_new;
    const int T = want < c->max_position_embeddings ? want : c->max_position_embeddings;
    if (longest + (o->max_new > 0 ? 1 : 0) > T) {
        io_fail(e, "a prompt of %d tokens does not fit in %d positions (--context, or the model's %d)", longest, T,
                c->max_position_embeddings);
        return -1;
    }
    return T;
}

/* ---- modes ------------------------------------------------------------------------------------ */

static int run_prompt(struct session *ss, const struct gen_options *o, const struct gen_device *dev,
                      struct io_err *e) {
    int32_t *ids;
    int n;
    if (prompt_encode_text(ss->tok, o->prompt, &ids, &n, e) != 0) return -1;
    const int T = context_for(o, &ss->src.config, n, e);
    if (T < 0 || open_session(ss, o, dev, 1, T, e) != 0) {
        free(ids);
        return -1;
    }
    struct gen_request rq = {ids, n, o->max_new};
    if (rq.max_new > T - n + 1) rq.max_new = T - n + 1;
    ss->set.on_text = on_text_stdout;
    struct gen_result r;
    const double t0 = now_s();
    const int rc = gen_run(&ss->b, &rq, 1, &ss->set, &r, e);
    const double dt = now_s() - t0;
    if (rc == 0) {
        printf("\n");
        fprintf(stderr, "%d tokens in %.2f s (%.1f tokens/s), finish: %s\n", r.n, dt, r.n / dt, gen_finish_name(r.finish));
        gen_result_free(&r);
    }
    free(ids);
    return rc;
}

static int run_prompts(struct session *ss, const struct gen_options *o, const struct gen_device *dev,
                       struct io_err *e) {
    struct prompt_list pl;
    if (prompts_read(&pl, o->prompts, ss->tok, e) != 0) return -1;
    const int n = pl.n;
    int rc = 0, T = 0;
    if ((T = context_for(o, &ss->src.config, pl.longest, e)) < 0) rc = -1;
    const int S = o->batch < n ? o->batch : n;
    if (rc == 0) rc = open_session(ss, o, dev, S, T, e);
    FILE *out = stdout;
    if (rc == 0 && o->out[0] && !(out = fopen(o->out, "w"))) rc = io_fail(e, "%s: cannot write", o->out);
    if (rc == 0) {
        struct gen_request *rq = calloc((size_t)n, sizeof *rq);
        struct gen_result *res = calloc((size_t)n, sizeof *res);
        CHECK(rq && res, "out of memory");
        long long total = 0;
        for (int i = 0; i < n; i++) {
            rq[i].prompt = pl.p[i].ids, rq[i].n_prompt = pl.p[i].n;
            rq[i].max_new = o->max_new < T - pl.p[i].n + 1 ? o->max_new : T - pl.p[i].n + 1;
        }
        const double t0 = now_s();
        rc = gen_run(&ss->b, rq, n, &ss->set, res, e);
        const double dt = now_s() - t0;
        for (int i = 0; i < n && rc == 0; i++) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddNumberToObject(j, "index", i);
            cJSON_AddStringToObject(j, "completion", res[i].text);
            cJSON_AddNumberToObject(j, "tokens", res[i].n);
            cJSON_AddStringToObject(j, "finish", gen_finish_name(res[i].finish));
            cJSON *arr = cJSON_AddArrayToObject(j, "ids");
            for (int k = 0; k < res[i].n; k++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(res[i].ids[k]));
            char *s = cJSON_PrintUnformatted(j);
            fprintf(out, "%s\n", s);
            free(s);
            cJSON_Delete(j);
            total += res[i].n;
            gen_result_free(&res[i]);
        }
        if (rc == 0)
            fprintf(stderr, "%d requests, %lld tokens in %.2f s (%.1f tokens/s, batch %d)\n", n, total, dt,
                    total / dt, S);
        free(rq);
        free(res);
        if (out != stdout) fclose(out);
    }
    prompts_free(&pl);
    return rc;
}

static char *read_line(FILE *f) {
    size_t cap = 256, n = 0;
    char *s = malloc(cap);
    CHECK(s != NULL, "out of memory");
    int c;
    while ((c = fgetc(f)) != EOF && c != '\n') {
        if (n + 1 == cap) {
            s = realloc(s, cap *= 2);
            CHECK(s != NULL, "out of memory");
        }
        s[n++] = (char)c;
    }
    if (c == EOF && n == 0) {
        free(s);
        return NULL;
    }
    if (n && s[n - 1] == '\r') n--;
    s[n] = '\0';
    return s;
}

static int run_chat(struct session *ss, const struct gen_options *o, const struct gen_device *dev,
                    struct io_err *e) {
    if (tokenizer_chat_template(ss->tok) == CHAT_TEMPLATE_NONE)
        return io_fail(e, "%s: the model's tokenizer has no chat template refine knows (Llama 3 or ChatML); use "
                          "--prompt", o->model);
    const int T = context_for(o, &ss->src.config, 1, e);
    if (T < 0 || open_session(ss, o, dev, 1, T, e) != 0) return -1;
    int cap = 16, n = 0;
    struct chat_message *m = calloc((size_t)cap, sizeof *m);
    char **owned = calloc((size_t)cap, sizeof *owned);
    CHECK(m && owned, "out of memory");
    if (o->system) m[n].role = "system", m[n].content = o->system, m[n].content_len = strlen(o->system), n++;
    const int first = n;
    ss->set.on_text = on_text_stdout;
    fprintf(stderr, "chat with %s (a line is a turn; /reset forgets, /exit ends)\n", o->model);
    int rc = 0;
    for (;;) {
        fprintf(stderr, "> ");
        fflush(stderr);
        char *line = read_line(stdin);
        if (!line || !strcmp(line, "/exit")) {
            free(line);
            break;
        }
        if (!strcmp(line, "/reset")) {
            for (int i = first; i < n; i++) free(owned[i]);
            n = first;
            free(line);
            continue;
        }
        if (!line[0]) {
            free(line);
            continue;
        }
        if (n + 2 > cap) {
            cap *= 2;
            m = realloc(m, (size_t)cap * sizeof *m);
            owned = realloc(owned, (size_t)cap * sizeof *owned);
            CHECK(m && owned, "out of memory");
        }
        owned[n] = line;
        m[n].role = "user", m[n].content = line, m[n].content_len = strlen(line), n++;
        int32_t *ids;
        int k;
        if ((rc = prompt_encode_chat(ss->tok, m, n, &ids, &k, e)) != 0) break;
        if (k + 1 > T) {
            free(ids);
            fprintf(stderr, "(the conversation holds %d tokens, more than the %d positions of --context: /reset)\n", k, T);
            free(owned[--n]);
            continue;
        }
        struct gen_request rq = {ids, k, o->max_new < T - k + 1 ? o->max_new : T - k + 1};
        struct gen_result r;
        rc = gen_run(&ss->b, &rq, 1, &ss->set, &r, e);
        free(ids);
        if (rc) break;
        printf("\n");
        fflush(stdout);
        owned[n] = r.text;
        r.text = NULL;
        m[n].role = "assistant", m[n].content = owned[n], m[n].content_len = r.text_len, n++;
        gen_result_free(&r);
    }
    for (int i = first; i < n; i++) free(owned[i]);
    free(owned);
    free(m);
    return rc;
}

int generate_main(int argc, char **argv, const struct gen_device *dev) {
    const char *wd = getenv("BUILD_WORKING_DIRECTORY"); /* bazel run: paths are the user's */
    if (wd && chdir(wd) != 0) {
        fprintf(stderr, "refine: cannot enter %s\n", wd);
        return 1;
    }
    struct gen_options o;
    struct io_err e = {{0}};
    defaults(&o);
    if (parse_args(&o, argc, argv, &e)) io_exit(&e);
    if (o.help) {
        help(dev->program);
        return 0;
    }
    if (dev->check && dev->check(o.precision, &e)) io_exit(&e);
    struct session ss;
    memset(&ss, 0, sizeof ss);
    if (model_source_open(&ss.src, o.model, &e)) io_exit(&e);
    ss.tok = o.tokenizer[0] ? tokenizer_load(o.tokenizer, &e) : model_source_tokenizer(&ss.src, &e);
    if (!ss.tok) {
        if (!o.tokenizer[0]) io_fail_context(&e, "(give --tokenizer PATH for a model without one)");
        io_exit(&e);
    }
    if (tokenizer_vocab_size(ss.tok) > (uint32_t)ss.src.config.V) {
        io_fail(&e, "the tokenizer has %u tokens but the model's vocabulary is %d", tokenizer_vocab_size(ss.tok),
                ss.src.config.V);
        io_exit(&e);
    }
    settings(&ss.set, &o, &ss.src, ss.tok);
    int rc = o.prompt ? run_prompt(&ss, &o, dev, &e) : o.prompts[0] ? run_prompts(&ss, &o, dev, &e)
                                                                     : run_chat(&ss, &o, dev, &e);
    if (ss.b.destroy) ss.b.destroy(ss.b.self);
    tokenizer_free(ss.tok);
    model_source_close(&ss.src);
    if (rc) io_exit(&e);
    return 0;
}
