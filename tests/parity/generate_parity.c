/* generate_parity.c — the GPU generation model (gpu/generate.h, //gpu:generate) against the CPU
 * reference (ref/generate.h, //ref:generate), and the decode speed (--bench).
 *
 *   bazel test --config=gpu //tests/parity:generate_parity
 *   generate_parity [--seed=N] [--bench | --bench-only]   (from the repository root)
 *
 * Models: the tiny Llama-like and Qwen2-like golden models, the tiny Llama with the PEFT LoRA
 * adapter of tests/golden/data/generate (merged, as both programs do), and SmolLM2-135M-Instruct
 * (the GGUF in $REFINE_CACHE or ~/.cache/refine: a failed check when absent) with the text and
 * the chat prompt of the golden fixtures. Three engines run each case: CPU fp32 (the oracle),
 * CPU bf16 (ref/generate with ACT_BF16 and bf16 weights: the naive same-precision twin) and GPU.
 *
 * 1. Teacher-forced, 64 steps (the oracle's greedy tokens fed to all three): at every step the
 *    GPU's logits row zg against the oracle's z32, with e = max|z16 − z32| the twin's error:
 *      max|zg − z32| ≤ 4·e + 1e-6·max|z32|       per step (the 4: two bf16 paths whose roundings
 *                                                 fall differently, each ~e, and max over V)
 *      rms(zg − z32) ≤ 2·rms(z16 − z32)           over all steps (tier (c))
 *    The tie-break rule: the GPU's greedy token (its argmax) must be the oracle's, or else the
 *    oracle's logits of the two tokens lie within 2·max|zg − z32| of each other (a near tie that
 *    the bounded error may flip); such steps are counted and printed.
 * 2. Free-running greedy (trainers/gen_run.h on the GPU backend: argmax on the device), 64 tokens:
 *    identical to the oracle's tokens up to the first near tie of step 1 — the same prefix gives
 *    the same GPU computation, so it must diverge exactly there or not at all.
 * 3. Batched: the case's prompt and two others in one batch of 3: each request's tokens equal
 *    its tokens decoded alone on the GPU, or differ first at a near tie of the oracle (checked
 *    with the oracle and the twin on that prefix, as in 1).
 * 4. Seeded sampling (temperature 0.8, top-p 0.9): two GPU runs give the same tokens.
 * Prints one line per case and "generate_parity: N checks, M failed"; exit status 1 on failure.
 *
 * --bench (after the checks pass): decode tokens/s on random weights of Llama-3.2-1B's shape for
 * batch 1, 8 and 32 (128-token prompts, 126 greedy steps timed after 2 warm-up steps, argmax on
 * the device), with the decode step as a CUDA graph and without, and of SmolLM2-135M's; one JSON
 * line each. --bench-only times without the checks (random weights: no fixture or GGUF needed),
 * for a host that lacks SmolLM2's file. The checks run with graphs (the default of //gpu:generate); step 2's
 * free-running tokens (graph replays) must match step 1's teacher-forced ones (first captures),
 * so a graph that computed anything else would show.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/generate.h"
#include "io/config.h"
#include "io/check.h"
#include "io/file.h"
#include "io/model_source.h"
#include "ref/generate.h"
#include "ref/sample.h"
#include "tests/common/harness.h"
#include "tests/golden/golden.h"
#include "trainers/gen_gpu.h"
#include "trainers/gen_ref.h"
#include "trainers/gen_run.h"

#define STEPS 64
#define GEN "tests/golden/data/generate/"

static uint64_t g_seed;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double max_abs_diff(const float *a, const float *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

static double sq_diff(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return s;
}

static double max_abs(const float *a, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}

struct engines {
    struct gen_backend cpu32, cpu16, gpu;
    const struct model_config *c;
};

/* The oracle's and the twin's logits after prompt + prefix[0..k): the near-tie test of a token
 * pair (a, b): |z32[a] − z32[b]| ≤ 2·4·e (the GPU's bound of check 1). */
static int near_tie(struct engines *en, const int32_t *prompt, int np, const int32_t *prefix, int k, int32_t a,
                    int32_t b, double *gap, double *bound) {
    const int V = en->c->V;
    int32_t *ids = malloc(((size_t)np + (size_t)k) * 4);
    float *z32 = malloc((size_t)V * 4), *z16 = malloc((size_t)V * 4);
    memcpy(ids, prompt, (size_t)np * 4);
    memcpy(ids + np, prefix, (size_t)k * 4);
    struct io_err e;
    en->cpu32.reset(en->cpu32.self, 0), en->cpu16.reset(en->cpu16.self, 0);
    CHECK(en->cpu32.prefill(en->cpu32.self, 0, ids, np + k, z32, &e) == 0 && en->cpu16.prefill(en->cpu16.self, 0, ids,
                                                                                                np + k, z16, &e) == 0,
          "%s", e.msg);
    *gap = fabs((double)z32[a] - (double)z32[b]);
    *bound = 2.0 * (4.0 * max_abs_diff(z16, z32, V) + 1e-6 * max_abs(z32, V));
    free(ids), free(z32), free(z16);
    return *gap <= *bound;
}

static void greedy_settings(struct gen_settings *s) {
    memset(s, 0, sizeof *s);
    ref_sample_params_default(&s->sample);
}

/* Tokens of one greedy run of `prompt` for STEPS tokens on backend b (slot count b->S). */
static void free_run(const struct gen_backend *b, const struct gen_request *rq, int n, struct gen_result *out) {
    struct gen_settings s;
    greedy_settings(&s);
    struct io_err e;
    CHECK(gen_run(b, rq, n, &s, out, &e) == 0, "%s", e.msg);
}

static void run_case(const char *name, const char *model, const char *adapter, const int32_t *prompt, int np) {
    struct model_source src;
    struct io_err e = {{0}};
    if (model_source_open(&src, model, &e) != 0) {
        test_fail("%s: %s", name, e.msg);
        return;
    }
    const struct model_config *c = &src.config;
    const int V = c->V, T = np + STEPS + 8;
    struct llama_weights w;
    if (ref_gen_load_weights(&w, &src, adapter, &e) != 0) {
        test_fail("%s: %s", name, e.msg);
        model_source_close(&src);
        return;
    }
    struct engines en;
    en.c = c;
    EXPECT(gen_ref_create(&en.cpu32, c, &w, 1, T, GEN_PRECISION_FP32, 1, &e) == 0, "%s", e.msg);
    EXPECT(gen_ref_create(&en.cpu16, c, &w, 1, T, GEN_PRECISION_BF16, 1, &e) == 0, "%s", e.msg);
    EXPECT(gen_gpu_device.create(&en.gpu, c, &w, 3, T, GEN_PRECISION_AUTO, &e) == 0, "%s: %s", name, e.msg);
    ref_llama_weights_free(&w, c);

    /* 1. teacher-forced */
    float *z32 = malloc((size_t)V * 4), *z16 = malloc((size_t)V * 4), *zg = malloc((size_t)V * 4);
    int32_t oracle[STEPS], flips_at[STEPS];
    int n_flips = 0, bad_steps = 0;
    double sq16 = 0, sqg = 0, worst_ratio = 0;
    const int32_t s0 = 0;
    CHECK(en.cpu32.prefill(en.cpu32.self, 0, prompt, np, z32, &e) == 0 &&
              en.cpu16.prefill(en.cpu16.self, 0, prompt, np, z16, &e) == 0 &&
              en.gpu.prefill(en.gpu.self, 0, prompt, np, zg, &e) == 0,
          "%s", e.msg);
    for (int i = 0; i < STEPS; i++) {
        const double e16 = max_abs_diff(z16, z32, V), eg = max_abs_diff(zg, z32, V);
        const double lim = 4.0 * e16 + 1e-6 * max_abs(z32, V);
        sq16 += sq_diff(z16, z32, V), sqg += sq_diff(zg, z32, V);
        if (eg / lim > worst_ratio) worst_ratio = eg / lim;
        if (eg > lim && bad_steps++ == 0)
            printf("%s step %d: max|zg − z32| = %.4g above 4·%.4g + floor (the twin's error)\n", name, i, eg, e16);
        const int32_t t32 = ref_sample_argmax(z32, V), tg = ref_sample_argmax(zg, V);
        oracle[i] = t32;
        if (tg != t32) {
            const double gap = (double)z32[t32] - (double)z32[tg];
            EXPECT(gap <= 2.0 * eg, "%s step %d: GPU token %d, oracle %d, oracle gap %.4g beyond 2·%.4g", name, i, tg,
                   t32, gap, eg);
            printf("%s step %d: near tie, GPU %d / oracle %d (oracle gap %.3g, GPU error %.3g)\n", name, i, tg, t32, gap,
                   eg);
            flips_at[n_flips++] = i;
        }
        if (i + 1 < STEPS) {
            CHECK(en.cpu32.decode(en.cpu32.self, &s0, &t32, 1, z32, &e) == 0 &&
                      en.cpu16.decode(en.cpu16.self, &s0, &t32, 1, z16, &e) == 0 &&
                      en.gpu.decode(en.gpu.self, &s0, &t32, 1, zg, &e) == 0,
                  "%s", e.msg);
        }
    }
    EXPECT(bad_steps == 0, "%s: %d of %d steps with the GPU's logit error above 4× the twin's", name, bad_steps, STEPS);
    EXPECT(sqg <= 4.0 * sq16 + 1e-30, "%s: rms(zg − z32) %.4g above 2·rms(z16 − z32) %.4g", name,
           sqrt(sqg / (STEPS * (double)V)), sqrt(sq16 / (STEPS * (double)V)));
    printf("%s: teacher-forced %d steps, rms error GPU %.3g / twin %.3g, worst step at %.2f of its bound, %d near "
           "tie(s)\n",
           name, STEPS, sqrt(sqg / (STEPS * (double)V)), sqrt(sq16 / (STEPS * (double)V)), worst_ratio, n_flips);

    /* 2. free-running greedy on the GPU */
    struct gen_request rq = {prompt, np, STEPS};
    struct gen_result g1;
    en.gpu.reset(en.gpu.self, 0);
    free_run(&en.gpu, &rq, 1, &g1);
    int same = 0;
    while (same < g1.n && same < STEPS && g1.ids[same] == oracle[same]) same++;
    const int want_same = n_flips > 0 ? flips_at[0] : STEPS;
    EXPECT(same == want_same && g1.n == STEPS, "%s: free-running GPU tokens equal the oracle's for %d steps, expected %d",
           name, same, want_same);
    printf("%s: free-running greedy, %d of %d tokens equal to the CPU oracle's%s\n", name, same, STEPS,
           same < STEPS ? " (then a near tie)" : "");

    /* 3. batched: this prompt and two others together */
    int32_t *p2 = malloc((size_t)np * 4), *p3 = malloc((size_t)(np > 3 ? np - 3 : np) * 4);
    for (int i = 0; i < np; i++) p2[i] = prompt[np - 1 - i];
    const int n3 = np > 3 ? np - 3 : np;
    memcpy(p3, prompt + (np - n3), (size_t)n3 * 4);
    struct gen_request rqs[3] = {{prompt, np, STEPS}, {p2, np, STEPS}, {p3, n3, STEPS}};
    struct gen_result batch[3], alone;
    free_run(&en.gpu, rqs, 3, batch);
    for (int r = 0; r < 3; r++) {
        struct gen_backend one = en.gpu; /* the same model, one slot at a time */
        one.S = 1;
        free_run(&one, &rqs[r], 1, &alone);
        int k = 0;
        while (k < alone.n && k < batch[r].n && alone.ids[k] == batch[r].ids[k]) k++;
        if (k < STEPS) {
            double gap = 0, bound = 0;
            EXPECT(near_tie(&en, rqs[r].prompt, rqs[r].n_prompt, alone.ids, k, alone.ids[k], batch[r].ids[k], &gap,
                            &bound),
                   "%s request %d: batched and alone differ at step %d (%d vs %d), oracle gap %.4g above %.4g", name,
                   r, k, batch[r].ids[k], alone.ids[k], gap, bound);
        }
        printf("%s: batch of 3, request %d: %d of %d tokens equal to the same request alone\n", name, r, k, STEPS);
        gen_result_free(&alone);
        gen_result_free(&batch[r]);
    }
    free(p2), free(p3);

    /* 4. seeded sampling is reproducible */
    struct gen_settings s;
    greedy_settings(&s);
    s.sample.mode = SAMPLE_MULTINOMIAL, s.sample.temperature = 0.8f, s.sample.top_p = 0.9f, s.sample.seed = g_seed;
    struct gen_result a, b;
    CHECK(gen_run(&en.gpu, &rq, 1, &s, &a, &e) == 0 && gen_run(&en.gpu, &rq, 1, &s, &b, &e) == 0, "%s", e.msg);
    EXPECT(a.n == b.n && memcmp(a.ids, b.ids, (size_t)a.n * 4) == 0, "%s: two sampled runs with seed %llu differ", name,
           (unsigned long long)g_seed);
    gen_result_free(&a), gen_result_free(&b), gen_result_free(&g1);

    free(z32), free(z16), free(zg);
    en.cpu32.destroy(en.cpu32.self), en.cpu16.destroy(en.cpu16.self), en.gpu.destroy(en.gpu.self);
    model_source_close(&src);
}

static int32_t *fixture_ids(const char *file, const char *name, int *n) {
    struct golden g;
    golden_open(&g, file);
    *n = (int)golden_numel(&g, name);
    int64_t *v = golden_i64(&g, name, -1, NULL);
    int32_t *r = malloc((size_t)*n * 4);
    for (int i = 0; i < *n; i++) r[i] = (int32_t)v[i];
    free(v);
    golden_close(&g);
    return r;
}

static void bench_model(const char *named) {
    struct model_config c;
    struct io_err e;
    CHECK(config_named(&c, named, &e) == 0, "%s", e.msg);
    const int batches[] = {1, 8, 32}, P = 128, STEPS_B = 128;
    for (int bi = 0; bi < 3; bi++) {
        const int B = batches[bi];
        struct gpu_gen *g = build_gpu_gen(&c, NULL, B, P + 2 * STEPS_B + 1, 512, &e);
        CHECK(g != NULL, "%s", e.msg);
        gpu_gen_random_weights(g, g_seed);
        int32_t *prompt = malloc((size_t)P * 4), *seqs = malloc((size_t)B * 4), *tok = malloc((size_t)B * 4);
        float *logits = malloc((size_t)c.V * 4);
        uint64_t x = g_seed;
        for (int i = 0; i < P; i++) x = x * 6364136223846793005ull + 1442695040888963407ull, prompt[i] = (int32_t)(x >> 33) % c.V;
        const double t0 = now_s();
        for (int s = 0; s < B; s++) {
            CHECK(gpu_gen_prefill(g, s, prompt, P, logits, &e) == 0, "%s", e.msg);
            seqs[s] = s, tok[s] = ref_sample_argmax(logits, c.V);
        }
        const double t_prefill = now_s() - t0;
        /* per mode (CUDA graphs on, then off): two warm-up steps (cuBLASLt plans of the decode
         * shapes; the graph's capture), then the timed ones */
        for (int graphs = 1; graphs >= 0; graphs--) {
            gpu_gen_set_graphs(g, graphs);
            for (int i = 0; i < 2; i++) CHECK(gpu_gen_decode(g, seqs, tok, B, NULL, tok, &e) == 0, "%s", e.msg);
            const double t1 = now_s();
            for (int i = 0; i < STEPS_B - 2; i++) CHECK(gpu_gen_decode(g, seqs, tok, B, NULL, tok, &e) == 0, "%s", e.msg);
            const double dt = now_s() - t1;
            printf("{\"op\":\"generate_decode\",\"model\":\"%s\",\"batch\":%d,\"prompt\":%d,\"steps\":%d,"
                   "\"cuda_graphs\":%s,\"decode_tokens_per_s\":%.1f,\"step_ms\":%.3f,\"prefill_tokens_per_s\":%.1f,"
                   "\"device\":\"%s\"}\n",
                   named, B, P, STEPS_B - 2, graphs ? "true" : "false", B * (STEPS_B - 2) / dt, 1e3 * dt / (STEPS_B - 2),
                   B * P / t_prefill, gpu_gen_device_name(g));
            fflush(stdout);
        }
        free(prompt), free(seqs), free(tok), free(logits);
        free_gpu_gen(g);
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261201);
    if (test_has_flag(argc, argv, "--bench-only")) {
        bench_model("llama-3.2-1b");
        bench_model("smollm2-135m");
        return 0;
    }
    int n;
    int32_t *p = fixture_ids(GEN "tiny.safetensors", "llama.prompt", &n);
    run_case("tiny-llama", "tests/golden/data/e2e/llama", NULL, p, n);
    run_case("tiny-llama+lora", "tests/golden/data/e2e/llama", GEN "llama_lora", p, n);
    free(p);
    p = fixture_ids(GEN "tiny.safetensors", "qwen2.prompt", &n);
    run_case("tiny-qwen2", "tests/golden/data/e2e/qwen2", NULL, p, n);
    free(p);
    const char *cache = getenv("REFINE_CACHE");
    char path[1200];
    if (cache && cache[0])
        snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else
        snprintf(path, sizeof path, "%s/.cache/refine/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : ".");
    EXPECT(file_exists(path), "SmolLM2 GGUF %s is absent (tools/setup.sh fetches it)", path);
    if (file_exists(path)) {
        p = fixture_ids(GEN "smollm2.safetensors", "text.prompt", &n);
        run_case("smollm2-text", path, NULL, p, n);
        free(p);
        p = fixture_ids(GEN "smollm2.safetensors", "chat.prompt", &n);
        run_case("smollm2-chat", path, NULL, p, n);
        free(p);
    }
    const int rc = test_finish("generate_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) {
        bench_model("llama-3.2-1b");
        bench_model("smollm2-135m");
    }
    return rc;
}
