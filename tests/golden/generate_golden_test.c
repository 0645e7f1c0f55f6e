/* generate_golden_test.c — generation on the CPU reference (ref/generate.h, ref/sample.h, the
 * driver trainers/gen_run.h) against transformers' generate() and logits processors, on the
 * fixtures of tests/golden/gen/gen_generate.py (tests/golden/data/generate/):
 *   - greedy continuations, token for token: the tiny Llama-like and Qwen2-like golden models
 *     (64 new tokens each), the tiny Llama with a PEFT LoRA and a PEFT DoRA adapter (merged here,
 *     applied unmerged by PEFT), and SmolLM2-135M-Instruct (the GGUF of tools/setup.sh: a text
 *     prompt, 96 tokens, and a chat prompt through the chat template, which must give
 *     transformers' apply_chat_template ids, ending at <|im_end|>; the completion text must be
 *     tokenizer.decode's). SmolLM2 is skipped with a message when the GGUF is absent.
 *   - the processors (repetition penalty, temperature, top-k, top-p, all together): the same
 *     −inf positions and bit-identical kept values (each is one fp32 operation on both sides).
 *
 *   bazel test //tests/golden:generate_golden_test
 *
 * Tie-break rule (NUMERICS.md §11): greedy takes the first index of the maximum on both sides;
 * the generator refuses fixtures where any step's top-1/top-2 margin is below 1e-4, far above the
 * fp32 logit differences between refine and torch (~1e-5 relative, tier (d) of llama_golden_test),
 * so the comparison is exact: a flipped token means a bug, not rounding. Each case prints its
 * smallest margin.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/file.h"
#include "io/model_source.h"
#include "io/tokenizer.h"
#include "ref/generate.h"
#include "ref/sample.h"
#include "tests/common/harness.h"
#include "tests/golden/golden.h"
#include "train/options.h" /* train_cache_dir */
#include "trainers/gen_ref.h"
#include "trainers/gen_run.h"

#define DIR "tests/golden/data/generate/"
#define E2E "tests/golden/data/e2e/"

static int32_t *i32_of(const struct golden *g, const char *name, int *n) {
    *n = (int)golden_numel(g, name);
    int64_t *v = golden_i64(g, name, -1, NULL);
    int32_t *r = malloc((size_t)*n * sizeof *r + 4);
    for (int i = 0; i < *n; i++) r[i] = (int32_t)v[i];
    free(v);
    return r;
}

static float min_margin(const struct golden *g, const char *cs) {
    char name[96];
    snprintf(name, sizeof name, "%s.margin", cs);
    float *m = golden_f32(g, name, -1, NULL);
    const int64_t n = golden_numel(g, name);
    float lo = INFINITY;
    for (int64_t i = 0; i < n; i++) lo = m[i] < lo ? m[i] : lo;
    free(m);
    return lo;
}

/* Greedy generation through the driver on the CPU backend; compares ids (and text when given). */
static void greedy_case(const char *cs, const struct model_source *src, const char *adapter, const struct golden *g,
                        const struct tokenizer *tok, const int32_t *eos, int n_eos, const char *want_text,
                        size_t want_len) {
    char name[96];
    int np, nw;
    snprintf(name, sizeof name, "%s.prompt", cs);
    int32_t *prompt = i32_of(g, name, &np);
    snprintf(name, sizeof name, "%s.ids", cs);
    int32_t *want = i32_of(g, name, &nw);
    struct io_err e = {{0}};
    struct llama_weights w;
    if (ref_gen_load_weights(&w, src, adapter, &e) != 0) {
        test_fail("%s: %s", cs, e.msg);
        free(prompt), free(want);
        return;
    }
    struct gen_backend b;
    EXPECT(gen_ref_create(&b, &src->config, &w, 1, np + nw, GEN_PRECISION_FP32, 1, &e) == 0, "%s: %s", cs, e.msg);
    ref_llama_weights_free(&w, &src->config);
    struct gen_settings s;
    memset(&s, 0, sizeof s);
    ref_sample_params_default(&s.sample);
    for (int i = 0; i < n_eos; i++) s.eos[s.n_eos++] = eos[i];
    s.tok = tok;
    /* the fixture's length: all of it when it ends at an end id, else exactly nw */
    struct gen_request rq = {prompt, np, n_eos > 0 ? nw + 8 : nw};
    struct gen_result r;
    if (gen_run(&b, &rq, 1, &s, &r, &e) != 0) {
        test_fail("%s: %s", cs, e.msg);
    } else {
        int first = -1;
        for (int i = 0; i < nw && i < r.n; i++)
            if (r.ids[i] != want[i]) {
                first = i;
                break;
            }
        EXPECT(r.n == nw && first < 0, "%s: %d tokens generated, transformers %d; first difference at %d (%d vs %d)",
               cs, r.n, nw, first, first >= 0 ? r.ids[first] : -1, first >= 0 ? want[first] : -1);
        if (n_eos > 0) EXPECT(r.finish == GEN_FINISH_EOS, "%s: finished by %s, expected eos", cs, gen_finish_name(r.finish));
        if (want_text)
            EXPECT(r.text_len == want_len && memcmp(r.text, want_text, want_len) == 0,
                   "%s: text differs from tokenizer.decode (%zu vs %zu bytes): \"%s\"", cs, r.text_len, want_len, r.text);
        printf("%s: %d tokens equal to transformers (smallest margin %.3g)\n", cs, r.n, (double)min_margin(g, cs));
        gen_result_free(&r);
    }
    b.destroy(b.self);
    free(prompt), free(want);
}

static void tiny(void) {
    struct golden g;
    golden_open(&g, DIR "tiny.safetensors");
    static const char *const cases[][3] = {
        {"llama", E2E "llama", NULL},
        {"qwen2", E2E "qwen2", NULL},
        {"llama_lora", E2E "llama", DIR "llama_lora"},
        {"llama_dora", E2E "llama", DIR "llama_dora"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct model_source src;
        struct io_err e = {{0}};
        if (model_source_open(&src, cases[i][1], &e) != 0) {
            test_fail("%s: %s", cases[i][1], e.msg);
            continue;
        }
        greedy_case(cases[i][0], &src, cases[i][2], &g, NULL, NULL, 0, NULL, 0);
        model_source_close(&src);
    }
    golden_close(&g);
}

static void processors(void) {
    struct golden g;
    golden_open(&g, DIR "processors.safetensors");
    const int64_t rs[2] = {4, 300}, ps[2] = {4, 12};
    float *rows = golden_f32(&g, "rows", 2, rs);
    int64_t *prev64 = golden_i64(&g, "prev", 2, ps);
    int32_t prev[4 * 12];
    for (int i = 0; i < 48; i++) prev[i] = (int32_t)prev64[i];
    free(prev64);
    struct {
        const char *name;
        enum sample_mode mode;
        float rep, temp, top_p;
        int top_k;
    } cases[] = {
        {"rep", SAMPLE_GREEDY, 1.3f, 1.0f, 1.0f, 0},      {"temp", SAMPLE_MULTINOMIAL, 1.0f, 0.7f, 1.0f, 0},
        {"topk", SAMPLE_MULTINOMIAL, 1.0f, 1.0f, 1.0f, 20}, {"topp", SAMPLE_MULTINOMIAL, 1.0f, 1.0f, 0.9f, 0},
        {"all", SAMPLE_MULTINOMIAL, 1.2f, 0.8f, 0.95f, 40},
    };
    void *ws = malloc(ref_sample_workspace_size(300));
    float z[300];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[64];
        snprintf(name, sizeof name, "%s.out", cases[c].name);
        float *want = golden_f32(&g, name, 2, rs);
        struct sample_params p;
        ref_sample_params_default(&p);
        p.mode = cases[c].mode, p.repetition_penalty = cases[c].rep, p.temperature = cases[c].temp;
        p.top_p = cases[c].top_p, p.top_k = cases[c].top_k;
        int bad = 0, kept = 0;
        for (int r = 0; r < 4; r++) {
            memcpy(z, rows + r * 300, sizeof z);
            ref_sample_process(z, 300, prev + r * 12, 12, &p, ws);
            for (int v = 0; v < 300; v++) {
                const float a = z[v], b = want[r * 300 + v];
                const int same = (isinf(a) && isinf(b) && a == b) || memcmp(&a, &b, 4) == 0;
                if (!same && bad++ == 0)
                    printf("%s: row %d token %d: refine %.9g, transformers %.9g\n", cases[c].name, r, v, a, b);
                kept += isfinite(a);
            }
        }
        EXPECT(bad == 0, "processors %s: %d of 1200 values differ from transformers'", cases[c].name, bad);
        printf("processors %s: %d tokens kept over 4 rows, bit-identical\n", cases[c].name, kept);
        free(want);
    }
    free(ws);
    free(rows);
    golden_close(&g);
}

static void smollm2(void) {
    char cache[1024], path[1200];
    train_cache_dir(cache, sizeof cache);
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    if (!file_exists(path)) {
        printf("SKIPPED the SmolLM2 generations: %s is absent (tools/setup.sh fetches it)\n", path);
        return;
    }
    struct model_source src;
    struct io_err e = {{0}};
    if (model_source_open(&src, path, &e) != 0) {
        test_fail("SmolLM2: %s", e.msg);
        return;
    }
    struct tokenizer *tok = model_source_tokenizer(&src, &e);
    EXPECT(tok != NULL, "SmolLM2 tokenizer: %s", e.msg);
    struct golden g;
    golden_open(&g, DIR "smollm2.safetensors");
    /* the chat prompt: refine's chat template must give transformers' apply_chat_template ids */
    int np;
    int32_t *prompt = i32_of(&g, "chat.prompt", &np);
    const char *user = "Name three colours of the rainbow.";
    struct chat_message m = {"user", user, strlen(user)};
    struct chat_tokens ct = {0};
    EXPECT(tok && tokenizer_apply_chat(tok, &m, 1, CHAT_ADD_GENERATION_PROMPT, &ct, &e) == 0, "chat: %s", e.msg);
    int same = ct.n == (size_t)np;
    for (int i = 0; same && i < np; i++) same = ct.ids[i] == (uint32_t)prompt[i];
    EXPECT(same, "chat template: %zu ids, transformers' apply_chat_template %d (or other ids)", ct.n, np);
    chat_tokens_free(&ct);
    free(prompt);
    static const char *const cases[] = {"text", "chat"};
    for (int c = 0; c < 2 && tok; c++) {
        char name[64];
        snprintf(name, sizeof name, "%s.text_bytes", cases[c]);
        int nt;
        int32_t *tb = i32_of(&g, name, &nt);
        char *text = malloc((size_t)nt + 1);
        for (int i = 0; i < nt; i++) text[i] = (char)tb[i];
        text[nt] = 0;
        const int32_t eos = (int32_t)src.config.eos_token_ids[0];
        greedy_case(cases[c], &src, NULL, &g, tok, &eos, c == 1 ? 1 : 0, text, (size_t)nt);
        free(text);
        free(tb);
    }
    golden_close(&g);
    tokenizer_free(tok);
    model_source_close(&src);
}

int main(int argc, char **argv) {
    (void)test_seed(argc, argv, 0); /* the fixtures carry their seeds (tests/golden/data/MANIFEST) */
    processors();
    tiny();
    smollm2();
    return test_finish("generate_golden_test");
}
