/* options.c — the flag table of both trainers, parsing, help and JSON (options.h). */
#include "train/options.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* K_SEQ: an integer or "auto" (OPT_SEQ_AUTO); K_SEQ_AUTO: a flag that sets it to auto; K_KEEP: an
 * integer or "auto" (OPT_KEEP_AUTO). */
enum opt_kind { K_PATH, K_INT, K_SEQ, K_FLOAT, K_U64, K_ENUM, K_FLAG, K_SEQ_AUTO, K_TARGETS, K_DATA, K_KEEP };

struct opt_def {
    const char *name;
    unsigned programs; /* enum options_program bits */
    enum opt_kind kind;
    size_t offset;
    const char *const *choices; /* K_ENUM: NULL-terminated names, index = enum value */
    double lo, hi;              /* K_INT / K_FLOAT: allowed closed range */
    const char *help;
};

static const char *const k_schedules[] = {"cosine", "linear", "constant", NULL};
static const char *const k_exports[] = {"adapter", "merged", "gguf", NULL};
static const char *const k_gguf_types[] = {"f16", "bf16", "q8_0", NULL};
static const char *const k_scalings[] = {"standard", "rslora", NULL};
static const char *const k_precisions[] = {"auto", "fp32", "bf16", "fp8", NULL};
static const char *const k_base_dtypes[] = {"bf16", "fp8", NULL};
static const char *const k_data_formats[] = {"auto", "text", "jsonl", NULL};
const char *const shard_optimizer_names[] = {"auto", "on", "off", NULL};
const char *const grad_storage_names[] = {"fp32", "bf16", NULL};

#define OFF(field) offsetof(struct train_options, field)
/* which programs take a flag */
#define TRAIN PROGRAM_TRAIN
#define BENCH PROGRAM_BENCH
#define BOTH (PROGRAM_TRAIN | PROGRAM_BENCH)

static const struct opt_def k_opts[] = {
    {"model", BOTH, K_PATH, OFF(model), NULL, 0, 0,
     "model: an HF folder (config.json + safetensors), a bitsandbytes 4-bit folder, or a .gguf file "
     "(//gpu:bench: also a config.json or a named shape: llama-3.2-1b | llama-3.2-3b | llama-3.1-8b | smollm2-135m)"},
    {"data", TRAIN, K_DATA, 0, NULL, 0, 0,
     "training data: text files, folders of them, or .jsonl (text | prompt+response | messages); "
     "repeat the flag or separate with commas"},
    {"data-format", TRAIN, K_ENUM, OFF(data_format), k_data_formats, 0, 0,
     "auto (each file by its content: JSON lines or text) | text | jsonl"},
    {"out", TRAIN, K_PATH, OFF(out), NULL, 0, 0,
     "output folder: adapter, checkpoint, metrics.jsonl, loss.svg (one that holds another run is refused)"},
    {"overwrite", TRAIN, K_FLAG, OFF(overwrite), NULL, 0, 0, "replace the run an existing --out folder holds"},
    {"resume", TRAIN, K_PATH, OFF(resume), NULL, 0, 0,
     "continue from the checkpoint in this folder (bit-identically when no setting changed)"},
    {"resume-anyway", TRAIN, K_FLAG, OFF(resume_anyway), NULL, 0, 0,
     "resume although the model or data files differ from the checkpoint's"},
    {"method", BOTH, K_ENUM, OFF(method), train_method_names, 0, 0, "what trains: lora | dora | qlora | qdora | full"},
    {"rank", BOTH, K_INT, OFF(rank), NULL, 1, 4096, "adapter rank r"},
    {"alpha", BOTH, K_FLOAT, OFF(alpha), NULL, 1e-6, 1e6, "adapter alpha (scale alpha/r, or alpha/sqrt(r) with rslora)"},
    {"scaling", BOTH, K_ENUM, OFF(scaling), k_scalings, 0, 0, "adapter scale: standard (alpha/r) | rslora (alpha/sqrt(r))"},
    {"dropout", BOTH, K_FLOAT, OFF(dropout), NULL, 0, 0.95, "dropout on the adapter input"},
    {"targets", BOTH, K_TARGETS, OFF(targets), NULL, 0, 0, "adapted linear layers: any of q,k,v,o,gate,up,down, or all"},
    {"seq", BOTH, K_SEQ, OFF(seq), NULL, 2, 1 << 20,
     "sequence length (tokens per packed sequence), or auto: the longest whose memory plan fits (GPU)"},
    {"micro-batch", BOTH, K_INT, OFF(micro_batch), NULL, 1, 1 << 16, "sequences per micro-batch"},
    {"grad-accum", BOTH, K_INT, OFF(grad_accum), NULL, 1, 1 << 16, "micro-batches per optimizer step"},
    {"epochs", TRAIN, K_INT, OFF(epochs), NULL, 0, 1 << 20, "passes over the training data (0: no limit)"},
    {"max-steps", TRAIN, K_INT, OFF(max_steps), NULL, 0, 1 << 30, "optimizer steps (0: no limit); the first limit reached ends training"},
    {"lr", BOTH, K_FLOAT, OFF(lr), NULL, 0, 10, "peak learning rate"},
    {"min-lr-ratio", TRAIN, K_FLOAT, OFF(min_lr_ratio), NULL, 0, 1, "final learning rate as a fraction of --lr (cosine, linear)"},
    {"warmup", TRAIN, K_INT, OFF(warmup), NULL, 0, 1 << 30, "linear warm-up steps"},
    {"schedule", TRAIN, K_ENUM, OFF(schedule), k_schedules, 0, 0, "learning-rate decay after warm-up: cosine | linear | constant"},
    {"weight-decay", BOTH, K_FLOAT, OFF(weight_decay), NULL, 0, 10, "decoupled weight decay (AdamW)"},
    {"clip", BOTH, K_FLOAT, OFF(clip), NULL, 0, 1e9, "clip the global gradient norm to this (0: no clipping)"},
    {"beta1", BOTH, K_FLOAT, OFF(beta1), NULL, 0, 0.999999, "AdamW beta1"},
    {"beta2", BOTH, K_FLOAT, OFF(beta2), NULL, 0, 0.999999999, "AdamW beta2"},
    {"eps", BOTH, K_FLOAT, OFF(eps), NULL, 0, 1, "AdamW epsilon"},
    {"optimizer", BOTH, K_ENUM, OFF(optimizer), optimizer_names, 0, 0, "adamw | adamw8bit (bitsandbytes-style 8-bit blockwise states)"},
    {"master", BOTH, K_ENUM, OFF(master), master_storage_names, 0, 0,
     "--method full's master weights: fp32 (an array beside the bf16 copy: 6 bytes a parameter) | split (the "
     "bf16 copy and the master's low 16 bits: 4 bytes, the same values but for one ulp at 1 in 2^17 patterns; "
     "//ref:train keeps its masters at the values the pair holds) | bf16 (none: the bf16 weights themselves, "
     "updated in fp32 and rounded to bf16, as the peers train: 2 bytes, updates under half an ulp are lost) | "
     "bf16-sr (bf16 weights, each update rounded stochastically: 2 bytes, unbiased, seeded by --seed)"},
    {"grad-dtype", BOTH, K_ENUM, OFF(grad_dtype), grad_storage_names, 0, 0,
     "--method full's accumulated gradients: fp32 | bf16 (each micro-batch's gradient added and the sum rounded "
     "to bf16, as the peers' bf16 gradients accumulate: 2 bytes a parameter instead of 4; one process for now)"},
    {"precision", BOTH, K_ENUM, OFF(precision), k_precisions, 0, 0,
     "arithmetic: auto (fp32 in //ref:train, bf16 in //gpu:train) | fp32 | bf16 (in //ref:train: bf16 weights and "
     "activations rounded where //gpu:train rounds them) | fp8 (bf16, and the block linears' products in FP8: E4M3 "
     "forward, E5M2 gradients; //gpu:train needs compute capability 8.9 or newer)"},
    {"fp8-recipe", BOTH, K_ENUM, OFF(fp8_recipe), fp8_recipe_names, 0, 0,
     "FP8 scaling with --precision fp8 (and an FP8 --base-dtype): delayed (amax history) | current (per tensor) | "
     "block (1x128 activations and gradients, 128x128 weights)"},
    {"base-dtype", BOTH, K_ENUM, OFF(base_dtype), k_base_dtypes, 0, 0,
     "frozen base linears of lora and dora: bf16 | fp8 (E4M3 codes and scales: half the memory)"},
    {"recompute", BOTH, K_ENUM, OFF(recompute), recompute_names, 0, 0, "activation recomputation in backward: none | attn | layer"},
    {"auto-batch", TRAIN, K_FLAG, OFF(auto_batch), NULL, 0, 0, "pick the largest micro-batch the memory plan allows (GPU)"},
    {"shard-optimizer", BOTH, K_ENUM, OFF(shard_optimizer), shard_optimizer_names, 0, 0,
     "several GPUs: shard the fp32 masters and optimizer state over them (ZeRO-1; the same update): auto (for "
     "--method full) | on | off"},
    {"shard-gradients", BOTH, K_ENUM, OFF(shard_gradients), shard_optimizer_names, 0, 0,
     "several GPUs, with the sharded optimizer: shard the fp32 gradients too (ZeRO-2: each rank accumulates its "
     "part only; the same update up to fp32 summation order): auto (where the plan is smaller, with one micro-batch "
     "a rank or when whole gradients do not fit) | on | off"},
    {"eval-every", TRAIN, K_INT, OFF(eval_every), NULL, 0, 1 << 30, "evaluate every N steps (0: only at the end)"},
    {"eval-batches", TRAIN, K_INT, OFF(eval_batches), NULL, 1, 1 << 30, "validation micro-batches per evaluation"},
    {"val-fraction", TRAIN, K_FLOAT, OFF(val_fraction), NULL, 0, 0.9, "fraction of the packed sequences held out for validation"},
    {"seed", BOTH, K_U64, OFF(seed), NULL, 0, 0, "seed of initialization, shuffling and dropout"},
    {"export", TRAIN, K_ENUM, OFF(export_kind), k_exports, 0, 0,
     "adapter (PEFT files) | merged (also an HF safetensors model with the adapter merged) | gguf (also that model as "
     "<out>/model-<type>.gguf for llama.cpp and Ollama)"},
    {"gguf-type", TRAIN, K_ENUM, OFF(gguf_type), k_gguf_types, 0, 0, "tensor type of --export gguf: f16 | bf16 | q8_0"},
    {"log-every", TRAIN, K_INT, OFF(log_every), NULL, 1, 1 << 30, "progress line and metrics record every N steps"},
    {"checkpoint-every", TRAIN, K_INT, OFF(checkpoint_every), NULL, 0, 1 << 30, "write a resumable checkpoint every N steps (0: at the end)"},
    {"stop-after", TRAIN, K_INT, OFF(max_steps_this_run), NULL, 0, 1 << 30, "stop this run after N steps with a checkpoint (resume later)"},
    {"sample-every", TRAIN, K_INT, OFF(sample_every), NULL, 0, 1 << 30,
     "every N steps (and at the end) complete each --sample-prompts prompt greedily into metrics.jsonl (0: off)"},
    {"sample-prompts", TRAIN, K_PATH, OFF(sample_prompts), NULL, 0, 0,
     "JSONL of prompts for --sample-every: {\"prompt\": ...} or {\"messages\": [...]} a line"},
    {"sample-tokens", TRAIN, K_INT, OFF(sample_tokens), NULL, 1, 1 << 16, "new tokens per sample at most"},
    {"memory-limit", BOTH, K_FLOAT, OFF(memory_limit), NULL, 0, 1e6,
     "GiB of GPU memory the run may plan and use, as on a card of that size (0: the device's own)"},
    {"max-seq", BENCH, K_SEQ_AUTO, OFF(seq), NULL, 0, 0, "the same as --seq auto: time the longest sequence that fits"},
    {"offload", BOTH, K_FLAG, OFF(offload), NULL, 0, 0,
     "keep the saved layer inputs in pinned host memory, copied out and back one layer ahead on a second "
     "stream (GPU; the same results; with --recompute layer the device holds three layers' inputs)"},
    {"recompute-mlp", BOTH, K_FLAG, OFF(recompute_mlp), NULL, 0, 0,
     "recompute the MLP input, swiglu(gate, up), before the down projection's backward instead of keeping it: "
     "B·T·F·2 bytes a layer less (GPU; the same results). The default where it costs no pass of its own — LoRA "
     "and QLoRA (no dropout, rank <= 64) and full fine-tuning with bf16 products, whose backward forms it as it "
     "reads gate and up —; elsewhere this flag buys the memory for one more SwiGLU pass a layer"},
    {"keep-mlp-input", BOTH, K_FLAG, OFF(keep_mlp_input), NULL, 0, 0,
     "keep the MLP input where it would be recomputed by default (GPU; the same results, B·T·F·2 bytes a layer "
     "more)"},
    {"keep-norms", BOTH, K_FLAG, OFF(keep_norms), NULL, 0, 0,
     "keep each layer's two RMSNorm outputs (the q/k/v and gate/up inputs) instead of forming them again before "
     "the layer's backward: two passes a layer fewer for about B·T·hidden·4 bytes a layer more (GPU; the same "
     "results; without --recompute, which forms them again anyway)"},
    {"mlp-chunk", BOTH, K_INT, OFF(mlp_chunk), NULL, 0, 1 << 30,
     "with --recompute layer: run the MLP on at most N tokens at a time (a multiple of 64; 0: the whole "
     "micro-batch), so that its intermediate-size buffers hold N rows instead of micro-batch × seq — the memory of "
     "long sequences (GPU; FP8 with the delayed or block recipe too; each token's products unchanged, the MLP "
     "weights' gradients summed chunk by chunk)"},
    {"recompute-keep", BOTH, K_KEEP, OFF(recompute_keep), NULL, 0, 1 << 20,
     "with --recompute layer or attn: the top N layers keep their saved activations and are not recomputed "
     "(the top one never is), N − 1 layers' sets more memory for N − 1 recomputations less — the speed a spare "
     "GiB buys; auto: as many as the plan fits in the device's memory or --memory-limit (GPU; the same results; "
     "fewer than the model's layers)"},
    {"nvtx", BOTH, K_FLAG, OFF(nvtx), NULL, 0, 0,
     "name the step's parts (per op category, layer, micro-batch) as NVTX ranges for Nsight Systems (GPU)"},
    {"batch", BENCH, K_INT, OFF(micro_batch), NULL, 1, 1 << 16, "the same as --micro-batch"},
    {"steps", BENCH, K_INT, OFF(bench_steps), NULL, 1, 1 << 20, "optimizer steps timed"},
    {"warmup-steps", BENCH, K_INT, OFF(bench_warmup), NULL, 0, 1 << 20, "optimizer steps run before the timed ones"},
    {"profile", BENCH, K_FLAG, OFF(profile), NULL, 0, 0, "also time every op category (a second JSON line)"},
    {"plan-only", BENCH, K_FLAG, OFF(plan_only), NULL, 0, 0,
     "print the memory plan (with --max-seq: the longest sequence) and stop before allocating; with --memory-limit, no GPU needed"},
    {"ungrouped", BENCH, K_FLAG, OFF(ungrouped), NULL, 0, 0,
     "run each LoRA/DoRA adapter alone (no q/k/v and gate/up groups), for comparisons"},
    {"unfolded", BENCH, K_FLAG, OFF(unfolded), NULL, 0, 0,
     "keep the q/k/v and gate/up LoRA adapters out of their base products (their own pass over y), for comparisons"},
    {"help", BOTH, K_FLAG, OFF(help), NULL, 0, 0, "print this help"},
};
#undef TRAIN
#undef BENCH
#undef BOTH

enum { N_OPTS = (int)(sizeof k_opts / sizeof k_opts[0]) };

void train_cache_dir(char *buf, size_t cap) {
    const char *c = getenv("REFINE_CACHE");
    if (c != NULL && c[0] != '\0') {
        snprintf(buf, cap, "%s", c);
        return;
    }
    const char *home = getenv("HOME");
    snprintf(buf, cap, "%s/.cache/refine", home != NULL ? home : ".");
}

const char *train_gguf_type_name(enum gguf_out_type t) {
    return (int)t >= 0 && (int)t < 3 ? k_gguf_types[t] : "?";
}

void train_options_defaults(struct train_options *o, const char *cache) {
    memset(o, 0, sizeof *o);
    snprintf(o->model, sizeof o->model, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    o->n_data = 1;
    snprintf(o->data[0], sizeof o->data[0], "%s/corpus/kjv.txt", cache);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    snprintf(o->out, sizeof o->out, "runs/refine-%04d%02d%02d-%02d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    o->method = METHOD_LORA;
    o->rank = 16;
    o->alpha = 32.0f;
    o->scaling = LORA_SCALE_STANDARD;
    o->dropout = 0.0f;
    o->targets = LLAMA_ALL_TARGETS;
    o->seq = 128;
    o->micro_batch = 2;
    o->grad_accum = 1;
    o->epochs = 0;
    o->max_steps = 30;
    o->lr = 1e-3f;
    o->min_lr_ratio = 0.1f;
    o->warmup = 3;
    o->schedule = SCHEDULE_COSINE;
    o->weight_decay = 0.0f;
    o->clip = 1.0f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->optimizer = OPTIMIZER_ADAMW;
    o->master = MASTER_FP32;
    o->grad_dtype = GRAD_FP32;
    o->fp8_recipe = FP8_RECIPE_DELAYED; /* Transformer Engine's default recipe */
    o->base_dtype = BASE_DTYPE_BF16;
    o->recompute = RECOMPUTE_NONE;
    o->eval_every = 10;
    o->eval_batches = 4;
    o->val_fraction = 0.1f;
    o->seed = 42;
    o->export_kind = EXPORT_ADAPTER;
    o->log_every = 1;
    o->checkpoint_every = 0;
    o->bench_steps = 10;
    o->bench_warmup = 3;
    o->sample_tokens = 48;
}

static const struct opt_def *find_opt(const char *name, size_t len) {
    for (int i = 0; i < N_OPTS; i++)
        if (strlen(k_opts[i].name) == len && strncmp(k_opts[i].name, name, len) == 0) return &k_opts[i];
    return NULL;
}

static int parse_targets(unsigned *mask, const char *v, struct io_err *e) {
    if (strcmp(v, "all") == 0) {
        *mask = LLAMA_ALL_TARGETS;
        return 0;
    }
    unsigned m = 0;
    const char *p = v;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        int found = -1;
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            /* the short name, or PEFT's module name (q_proj, gate_proj, ...) */
            const char *n = llama_linears[t].target, *peft = llama_linears[t].peft;
            if ((len == strlen(n) && strncmp(p, n, len) == 0) || (len == strlen(peft) && strncmp(p, peft, len) == 0))
                found = t;
        }
        if (found < 0)
            return io_fail(e, "--targets: unknown target '%.*s' (allowed: q,k,v,o,gate,up,down or all)", (int)len, p);
        m |= 1u << found;
        p += len;
        if (*p == ',') p++;
    }
    if (m == 0) return io_fail(e, "--targets: empty list (allowed: q,k,v,o,gate,up,down or all)");
    *mask = m;
    return 0;
}

static int set_value(struct train_options *o, const struct opt_def *d, const char *v, struct io_err *e) {
    char *base = (char *)o;
    char *end = NULL;
    errno = 0;
    switch (d->kind) {
        case K_PATH: {
            if (v[0] == '\0') return io_fail(e, "--%s: empty path", d->name);
            if (strlen(v) >= OPT_PATH_MAX) return io_fail(e, "--%s: path longer than %d bytes", d->name, OPT_PATH_MAX - 1);
            snprintf(base + d->offset, OPT_PATH_MAX, "%s", v);
            return 0;
        }
        case K_DATA: {
            const char *p = v;
            while (*p != '\0') {
                const char *comma = strchr(p, ',');
                size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
                if (len == 0) return io_fail(e, "--data: empty path in '%s'", v);
                if (o->n_data >= OPT_MAX_DATA) return io_fail(e, "--data: more than %d paths", OPT_MAX_DATA);
                if (len >= OPT_PATH_MAX) return io_fail(e, "--data: path longer than %d bytes", OPT_PATH_MAX - 1);
                memcpy(o->data[o->n_data], p, len);
                o->data[o->n_data][len] = '\0';
                o->n_data++;
                p += len;
                if (*p == ',') p++;
            }
            return 0;
        }
        case K_SEQ:
        case K_KEEP:
            if (strcmp(v, "auto") == 0) {
                *(int *)(base + d->offset) = d->kind == K_SEQ ? OPT_SEQ_AUTO : OPT_KEEP_AUTO;
                return 0;
            }
            __attribute__((fallthrough)); /* an integer */
        case K_INT: {
            long long x = strtoll(v, &end, 10);
            if (end == v || *end != '\0' || errno != 0)
                return io_fail(e, "--%s: '%s' is not an integer", d->name, v);
            if ((double)x < d->lo || (double)x > d->hi)
                return io_fail(e, "--%s: %lld is out of range [%.0f, %.0f]", d->name, x, d->lo, d->hi);
            *(int *)(base + d->offset) = (int)x;
            return 0;
        }
        case K_FLOAT: {
            double x = strtod(v, &end);
            if (end == v || *end != '\0' || errno != 0 || !isfinite(x))
                return io_fail(e, "--%s: '%s' is not a finite number", d->name, v);
            if (x < d->lo || x > d->hi) return io_fail(e, "--%s: %g is out of range [%g, %g]", d->name, x, d->lo, d->hi);
            *(float *)(base + d->offset) = (float)x;
            return 0;
        }
        case K_U64: {
            if (v[0] == '-') return io_fail(e, "--%s: '%s' must be a non-negative integer", d->name, v);
            unsigned long long x = strtoull(v, &end, 0);
            if (end == v || *end != '\0' || errno != 0)
                return io_fail(e, "--%s: '%s' is not a non-negative integer", d->name, v);
            *(unsigned long long *)(base + d->offset) = x;
            return 0;
        }
        case K_ENUM: {
            for (int i = 0; d->choices[i] != NULL; i++) {
                if (strcmp(d->choices[i], v) == 0) {
                    *(int *)(base + d->offset) = i;
                    return 0;
                }
            }
            char allowed[256] = "";
            for (int i = 0; d->choices[i] != NULL; i++) {
                strncat(allowed, i ? " | " : "", sizeof allowed - strlen(allowed) - 1);
                strncat(allowed, d->choices[i], sizeof allowed - strlen(allowed) - 1);
            }
            return io_fail(e, "--%s: '%s' is not one of %s", d->name, v, allowed);
        }
        case K_TARGETS: return parse_targets((unsigned *)(base + d->offset), v, e);
        case K_FLAG: *(int *)(base + d->offset) = 1; return 0;
        case K_SEQ_AUTO: *(int *)(base + d->offset) = OPT_SEQ_AUTO; return 0;
    }
    return io_fail(e, "--%s: internal error", d->name);
}

static int check_combination(const struct train_options *o, enum options_program prog, struct io_err *e) {
    if (o->method == METHOD_FULL && o->dropout > 0.0f)
        return io_fail(e, "--dropout applies to adapters; --method full trains the weights themselves");
    if (o->optimizer == OPTIMIZER_ADAMW8BIT && o->weight_decay < 0) return io_fail(e, "--weight-decay must be ≥ 0");
    if (o->master != MASTER_FP32 && o->method != METHOD_FULL)
        return io_fail(e, "--master %s is for --method full (an adapter's fp32 masters are a few megabytes)",
                       master_storage_names[o->master]);
    if (o->grad_dtype == GRAD_BF16 && o->method != METHOD_FULL)
        return io_fail(e, "--grad-dtype bf16 is for --method full (an adapter's gradients are a few megabytes)");
    if (o->base_dtype == BASE_DTYPE_FP8 && o->method != METHOD_LORA && o->method != METHOD_DORA)
        return io_fail(e, "--base-dtype fp8 stores the frozen base of lora and dora; --method %s %s",
                       train_method_names[o->method],
                       o->method == METHOD_FULL ? "trains the base itself" : "stores its base in NF4");
    if (prog != PROGRAM_TRAIN) return 0;
    if (o->epochs == 0 && o->max_steps == 0)
        return io_fail(e, "set --epochs or --max-steps (both are 0: training would never end)");
    if (o->warmup > 0 && o->max_steps > 0 && o->warmup >= o->max_steps)
        return io_fail(e, "--warmup %d must be smaller than --max-steps %d", o->warmup, o->max_steps);
    if (o->n_data == 0) return io_fail(e, "no --data given");
    if ((o->sample_every > 0) != (o->sample_prompts[0] != '\0'))
        return io_fail(e, "--sample-every and --sample-prompts go together (samples need both a period and prompts)");
    return 0;
}

int train_options_parse(struct train_options *o, int argc, char **argv, enum options_program prog,
                        struct io_err *e) {
    int data_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            return io_fail(e, "unexpected argument '%s' (every option is a --flag; see --help)", a);
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
        const struct opt_def *d = find_opt(name, len);
        if (d == NULL) return io_fail(e, "unknown option '--%.*s' (see --help)", (int)len, name);
        if (!(d->programs & prog))
            return io_fail(e, "--%s is a flag of %s, not of this program (see --help)", d->name,
                           d->programs & PROGRAM_TRAIN ? "the trainers" : "the benchmark");
        const char *value = NULL;
        if (d->kind == K_FLAG || d->kind == K_SEQ_AUTO) {
            if (eq != NULL) return io_fail(e, "--%s takes no value", d->name);
        } else if (eq != NULL) {
            value = eq + 1;
        } else {
            if (i + 1 >= argc) return io_fail(e, "--%s needs a value", d->name);
            value = argv[++i];
        }
        if (d->kind == K_DATA && !data_given) {
            o->n_data = 0; /* the first --data replaces the default corpus */
            data_given = 1;
        }
        if (set_value(o, d, value != NULL ? value : "", e) != 0) return -1;
    }
    if (o->help) return 0;
    return check_combination(o, prog, e);
}

static void default_text(const struct train_options *o, const struct opt_def *d, char *buf, size_t cap) {
    const char *base = (const char *)o;
    switch (d->kind) {
        case K_PATH: snprintf(buf, cap, "%s", (base + d->offset)[0] ? base + d->offset : "(none)"); break;
        case K_DATA: snprintf(buf, cap, "%s", o->data[0]); break;
        case K_INT: snprintf(buf, cap, "%d", *(const int *)(base + d->offset)); break;
        case K_SEQ:
            if (*(const int *)(base + d->offset) == OPT_SEQ_AUTO) snprintf(buf, cap, "auto");
            else snprintf(buf, cap, "%d", *(const int *)(base + d->offset));
            break;
        case K_KEEP:
            if (*(const int *)(base + d->offset) == OPT_KEEP_AUTO) snprintf(buf, cap, "auto");
            else snprintf(buf, cap, "%d", *(const int *)(base + d->offset));
            break;
        case K_FLOAT: snprintf(buf, cap, "%g", (double)*(const float *)(base + d->offset)); break;
        case K_U64: snprintf(buf, cap, "%llu", *(const unsigned long long *)(base + d->offset)); break;
        case K_ENUM: snprintf(buf, cap, "%s", d->choices[*(const int *)(base + d->offset)]); break;
        case K_FLAG:
        case K_SEQ_AUTO: snprintf(buf, cap, "off"); break;
        case K_TARGETS: snprintf(buf, cap, "all"); break;
    }
}

void train_options_help(FILE *f, const char *program, enum options_program prog, const char *cache) {
    struct train_options d;
    train_options_defaults(&d, cache);
    snprintf(d.out, sizeof d.out, "runs/refine-<date>-<time>");
    fprintf(f, "usage: %s [--flag value]...\n\n", program);
    if (prog == PROGRAM_TRAIN)
        fprintf(f, "Fine-tunes a Llama-family model. With no flags: LoRA on SmolLM2-135M-Instruct with the\n"
                   "King James Bible (tools/setup.sh fetches both into %s).\n\n", cache);
    else
        fprintf(f, "Times the training step of //gpu:train on random weights of the model's shapes and prints\n"
                   "one JSON line (tokens/s, step time, memory, model TFLOP/s, MFU). The trainers' flags, with\n"
                   "their defaults; --model may also name a shape.\n\n");
    for (int i = 0; i < N_OPTS; i++) {
        if (!(k_opts[i].programs & prog)) continue;
        char def[OPT_PATH_MAX];
        default_text(&d, &k_opts[i], def, sizeof def);
        fprintf(f, "  --%-17s %s\n  %-19s (default: %s)\n", k_opts[i].name, k_opts[i].help, "", def);
    }
}

/* Appends a JSON string literal (escaped) to buf. */
static void json_str(char *buf, size_t cap, const char *s) {
    size_t n = strlen(buf);
    if (n + 2 >= cap) return;
    buf[n++] = '"';
    for (; *s != '\0' && n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(buf + n, cap - n, "\\u%04x", c);
        } else {
            buf[n++] = (char)c;
        }
    }
    buf[n++] = '"';
    buf[n] = '\0';
}

int train_options_to_json(const struct train_options *o, char *buf, size_t cap) {
    const char *base = (const char *)o;
    buf[0] = '\0';
    strncat(buf, "{", cap - strlen(buf) - 1);
    for (int i = 0; i < N_OPTS; i++) {
        const struct opt_def *d = &k_opts[i];
        if (!(d->programs & PROGRAM_TRAIN) || (d->kind == K_FLAG && strcmp(d->name, "help") == 0)) continue;
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, "%s\"%s\":", n > 1 ? "," : "", d->name);
        n = strlen(buf);
        switch (d->kind) {
            case K_PATH: json_str(buf, cap, base + d->offset); break;
            case K_DATA:
                strncat(buf, "[", cap - strlen(buf) - 1);
                for (int j = 0; j < o->n_data; j++) {
                    if (j) strncat(buf, ",", cap - strlen(buf) - 1);
                    json_str(buf, cap, o->data[j]);
                }
                strncat(buf, "]", cap - strlen(buf) - 1);
                break;
            case K_INT:
            case K_SEQ: snprintf(buf + n, cap - n, "%d", *(const int *)(base + d->offset)); break;
            case K_KEEP:
                if (*(const int *)(base + d->offset) == OPT_KEEP_AUTO) json_str(buf, cap, "auto");
                else snprintf(buf + n, cap - n, "%d", *(const int *)(base + d->offset));
                break;
            case K_SEQ_AUTO: break; /* a bench flag: never in the trainers' JSON */
            case K_FLAG: snprintf(buf + n, cap - n, "%s", *(const int *)(base + d->offset) ? "true" : "false"); break;
            case K_FLOAT: snprintf(buf + n, cap - n, "%.9g", (double)*(const float *)(base + d->offset)); break;
            case K_U64: snprintf(buf + n, cap - n, "%llu", *(const unsigned long long *)(base + d->offset)); break;
            case K_ENUM: json_str(buf, cap, d->choices[*(const int *)(base + d->offset)]); break;
            case K_TARGETS: {
                strncat(buf, "[", cap - strlen(buf) - 1);
                int first = 1;
                for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                    if (!(o->targets & (1u << t))) continue;
                    if (!first) strncat(buf, ",", cap - strlen(buf) - 1);
                    json_str(buf, cap, llama_linears[t].target);
                    first = 0;
                }
                strncat(buf, "]", cap - strlen(buf) - 1);
                break;
            }
        }
    }
    strncat(buf, "}", cap - strlen(buf) - 1);
    return strlen(buf) + 1 < cap ? 0 : -1;
}
