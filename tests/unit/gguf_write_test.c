/* gguf_write_test.c — io/gguf_write against mathematics and against refine's own GGUF reader:
 *   - F16: every finite f16 value converts back to itself, every midpoint between neighbours
 *     rounds to the even one, and random floats (all exponents) round as the compiler's _Float16
 *     conversion (RNE); BF16 as ref-style RNE; Q8_0 within its error: |x − q·d16| ≤ d/2 + 127·|d −
 *     d16| per block (one rounding of x·(1/d), the scale stored in f16), 0 for an all-zero block;
 *   - models: the tiny golden Llama (tied, llama3 rope: rope_freqs.weight) and Qwen2 (biases, an
 *     untied head, a vocabulary larger than the tokenizer's: padded) written as F16, BF16 and Q8_0
 *     with the byte tokenizer, and the Llama also with SmolLM2's tokenizer and chat template; read
 *     back by io/gguf (model_source_open): the same config, every weight bit-exact for F16/BF16
 *     (the value rounded as written; norms F32 exact) and within the Q8_0 bound, the q/k
 *     permutation undone; the tokenizer encodes a text to the same ids and keeps its bos/eos, its
 *     add-bos and its chat template.
 *
 *   bazel test //tests/unit:gguf_write_test        (replay: --test_arg=--seed=N)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "io/gguf_write.h"
#include "io/model_source.h"
#include "io/tokenizer.h"
#include "ref/bf16.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

static float f16_value(uint16_t h) {
    _Float16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}

static void conversions(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu)) continue; /* NaN */
        if (gguf_f32_to_f16(f16_value((uint16_t)h)) != h && bad++ < 3) printf("f16 %#x does not round-trip\n", h);
        /* the midpoint to the next value up in magnitude (exact in fp32): rounds to the even one */
        if ((h & 0x7FFFu) < 0x7BFFu) {
            const double a = f16_value((uint16_t)h), b = f16_value((uint16_t)(h + 1));
            const uint16_t want = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
            if (gguf_f32_to_f16((float)((a + b) / 2)) != want && bad++ < 3) printf("f16 midpoint above %#x\n", h);
        }
    }
    EXPECT(bad == 0, "f16: %d finite values or midpoints convert wrongly", bad);
    struct rng r;
    rng_init(&r, g_seed);
    bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)rng_u64(&r);
        float x;
        memcpy(&x, &u, 4);
        if (isnan(x)) continue;
        const _Float16 y = (_Float16)x;
        uint16_t want;
        memcpy(&want, &y, 2);
        if (gguf_f32_to_f16(x) != want && bad++ < 3) printf("f16 of %a: %#x, expected %#x\n", x, gguf_f32_to_f16(x), want);
        uint16_t b;
        gguf_quantize_bf16(&b, &x, 1);
        if (b != bf16_from_float(x) && bad++ < 3) printf("bf16 of %a differs\n", x);
    }
    EXPECT(bad == 0, "%d random floats convert wrongly", bad);
    /* Q8_0 */
    float x[96], y[96];
    rng_fill_normal(&r, x, 64, 0, 3);
    for (int j = 64; j < 96; j++) x[j] = 0.0f;
    x[5] = 1e-3f;
    uint8_t q[3 * 34];
    gguf_quantize_q8_0(q, x, 96);
    struct gguf_tensor t = {.name = "q", .type = GGML_TYPE_Q8_0, .ndim = 1, .ne = {96, 1, 1, 1}, .numel = 96, .data = q,
                            .nbytes = sizeof q};
    struct gguf_file g;
    memset(&g, 0, sizeof g);
    struct io_err e;
    EXPECT(gguf_tensor_to_f32(y, &g, &t, &e) == 0, "%s", e.msg);
    for (int b = 0; b < 3; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        const float d = amax / 127.0f, d16 = f16_value(gguf_f32_to_f16(d));
        for (int j = 0; j < 32; j++) {
            const float err = fabsf(x[32 * b + j] - y[32 * b + j]), bound = 0.5f * d + 127.0f * fabsf(d - d16);
            EXPECT(err <= bound * (1 + 1e-6f), "Q8_0 block %d element %d: error %g above %g", b, j, err, bound);
        }
    }
}

struct src_ctx {
    const struct model_source *s;
};

static int weight_of(void *ctx, enum model_weight kind, int layer, float *out, struct io_err *e) {
    return model_source_weight_f32(((struct src_ctx *)ctx)->s, kind, layer, out, e);
}

static float round_as(enum ggml_type t, float x) {
    uint16_t h;
    if (t == GGML_TYPE_F16) return f16_value(gguf_f32_to_f16(x));
    gguf_quantize_bf16(&h, &x, 1);
    return bf16_to_float(h);
}

static void model_case(const char *dir, const char *tok_path, enum ggml_type type, const char *label) {
    struct model_source src, back;
    struct io_err e = {{0}};
    if (model_source_open(&src, dir, &e) != 0) {
        test_fail("%s", e.msg);
        return;
    }
    struct tokenizer *tok = tokenizer_load(tok_path, &e);
    if (!tok) {
        test_fail("%s: %s", label, e.msg);
        model_source_close(&src);
        return;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model-%s.gguf", getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp", label);
    struct src_ctx ctx = {&src};
    if (gguf_write_model(path, &src.config, tok, type, label, weight_of, &ctx, &e) != 0) {
        test_fail("%s: %s", label, e.msg);
    } else if (model_source_open(&back, path, &e) != 0) {
        test_fail("%s: the written file does not open: %s", label, e.msg);
    } else {
        const struct model_config *a = &src.config, *b = &back.config;
        EXPECT(a->C == b->C && a->F == b->F && a->L == b->L && a->H == b->H && a->KVH == b->KVH && a->D == b->D &&
                   a->V == b->V && a->rms_norm_eps == b->rms_norm_eps && a->rope_theta == b->rope_theta &&
                   a->tie_word_embeddings == b->tie_word_embeddings && a->attention_bias == b->attention_bias &&
                   a->rope_scaling.kind == b->rope_scaling.kind && a->rope_scaling.factor == b->rope_scaling.factor &&
                   a->max_position_embeddings == b->max_position_embeddings,
               "%s: the config read back differs", label);
        int bad = 0;
        const int n_slots = MW_N_GLOBAL + a->L * MW_N_LAYER;
        for (int slot = 0; slot < n_slots; slot++) {
            int layer;
            const enum model_weight kind = model_weight_of_slot(slot, &layer);
            int64_t shape[2];
            const int nd = model_weight_shape(shape, a, kind);
            if (nd == 0 || (kind == MW_LM_HEAD && a->tie_word_embeddings)) continue;
            const int64_t n = nd == 2 ? shape[0] * shape[1] : shape[0];
            float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
            EXPECT(model_source_weight_f32(&src, kind, layer, x, &e) == 0 && model_source_weight_f32(&back, kind, layer, y, &e) == 0,
                   "%s", e.msg);
            for (int64_t i = 0; i < n; i++) {
                float want = nd == 1 ? x[i] : round_as(type, x[i]);
                if (nd == 2 && type == GGML_TYPE_Q8_0) {
                    /* the row's 32-block: amax/127 bounds the step */
                    const int64_t b0 = i / 32 * 32;
                    float amax = 0;
                    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b0 + j]));
                    const float d = amax / 127.0f, bound = 0.5f * d + 127.0f * fabsf(d - f16_value(gguf_f32_to_f16(d)));
                    if (!(fabsf(y[i] - x[i]) <= bound * (1 + 1e-6f)) && bad++ < 3)
                        printf("%s kind %d layer %d [%lld]: %g vs %g (bound %g)\n", label, kind, layer, (long long)i, y[i],
                               x[i], bound);
                } else if (memcmp(&want, &y[i], 4) != 0 && bad++ < 3) {
                    printf("%s kind %d layer %d [%lld]: %a read back, %a written\n", label, kind, layer, (long long)i, y[i],
                           want);
                }
            }
            free(x), free(y);
        }
        EXPECT(bad == 0, "%s: %d weight values differ from what was written", label, bad);
        struct tokenizer *t2 = model_source_tokenizer(&back, &e);
        EXPECT(t2 != NULL, "%s: tokenizer: %s", label, e.msg);
        if (t2) {
            const char text[] = "In the beginning, 1234 caf\xc3\xa9s <|im_end|> and\n\n  spaces.";
            struct tok_ids i1 = {0}, i2 = {0};
            tokenizer_encode(tok, text, sizeof text - 1, TOKENIZER_ADD_BOS, &i1);
            tokenizer_encode(t2, text, sizeof text - 1, TOKENIZER_ADD_BOS, &i2);
            EXPECT(i1.n == i2.n && memcmp(i1.ids, i2.ids, i1.n * 4) == 0, "%s: the tokenizer read back encodes differently",
                   label);
            /* eos: the tokenizer's, or where it names none the config's (written as gguf-py does) */
            const int64_t want_eos = tokenizer_eos_id(tok) >= 0 ? tokenizer_eos_id(tok)
                                     : src.config.n_eos > 0   ? src.config.eos_token_ids[0]
                                                              : -1;
            EXPECT(tokenizer_bos_id(tok) == tokenizer_bos_id(t2) && want_eos == tokenizer_eos_id(t2) &&
                       tokenizer_adds_bos(tok) == tokenizer_adds_bos(t2) &&
                       tokenizer_chat_template(tok) == tokenizer_chat_template(t2),
                   "%s: bos/eos/add-bos/chat template differ after the round trip", label);
            tok_ids_free(&i1), tok_ids_free(&i2);
            tokenizer_free(t2);
        }
        printf("%s: written and read back\n", label);
        model_source_close(&back);
    }
    tokenizer_free(tok);
    model_source_close(&src);
}

/* A small model of SmolLM2's vocabulary, to carry its tokenizer (a Sequence of Digits and
 * ByteLevel: "smollm"; ChatML template with a default system message) through a GGUF. */
static int synthetic_weight(void *ctx, enum model_weight kind, int layer, float *out, struct io_err *e) {
    (void)e;
    int64_t shape[2];
    const int nd = model_weight_shape(shape, ctx, kind);
    const int64_t n = nd == 2 ? shape[0] * shape[1] : shape[0];
    for (int64_t i = 0; i < n; i++) out[i] = (float)((i * 7 + layer * 3 + (int)kind) % 17) / 64.0f;
    return 0;
}

static void tokenizer_case(const char *tok_path) {
    struct io_err e = {{0}};
    struct tokenizer *tok = tokenizer_load(tok_path, &e);
    if (!tok) {
        test_fail("%s", e.msg);
        return;
    }
    struct model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "llama");
    c.C = 32, c.F = 64, c.L = 1, c.H = 2, c.KVH = 1, c.D = 16, c.V = (int)tokenizer_vocab_size(tok);
    c.max_position_embeddings = 2048, c.rms_norm_eps = 1e-5f, c.rope_theta = 10000.0f, c.tie_word_embeddings = 1;
    c.bos_token_id = -1, c.pad_token_id = -1;
    char path[512];
    snprintf(path, sizeof path, "%s/tok.gguf", getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
    struct model_source back;
    if (gguf_write_model(path, &c, tok, GGML_TYPE_Q8_0, "tok", synthetic_weight, &c, &e) != 0 ||
        model_source_open(&back, path, &e) != 0) {
        test_fail("tokenizer case: %s", e.msg);
        tokenizer_free(tok);
        return;
    }
    struct tokenizer *t2 = model_source_tokenizer(&back, &e);
    EXPECT(t2 != NULL, "tokenizer read back: %s", e.msg);
    if (t2) {
        const char text[] = "In the beginning, 1234 caf\xc3\xa9s <|im_end|> and\n\n  spaces. Don't 99 bottles!";
        struct tok_ids i1 = {0}, i2 = {0};
        tokenizer_encode(tok, text, sizeof text - 1, TOKENIZER_ADD_BOS, &i1);
        tokenizer_encode(t2, text, sizeof text - 1, TOKENIZER_ADD_BOS, &i2);
        EXPECT(i1.n == i2.n && memcmp(i1.ids, i2.ids, i1.n * 4) == 0, "SmolLM2's tokenizer encodes differently after GGUF");
        EXPECT(tokenizer_chat_template(t2) == CHAT_TEMPLATE_CHATML && tokenizer_chat_template(tok) == CHAT_TEMPLATE_CHATML,
               "the ChatML template is lost");
        struct chat_message m = {"user", "hi", 2};
        struct chat_tokens c1 = {0}, c2 = {0};
        EXPECT(tokenizer_apply_chat(tok, &m, 1, CHAT_ADD_GENERATION_PROMPT, &c1, &e) == 0 &&
                   tokenizer_apply_chat(t2, &m, 1, CHAT_ADD_GENERATION_PROMPT, &c2, &e) == 0 && c1.n == c2.n &&
                   memcmp(c1.ids, c2.ids, c1.n * 4) == 0,
               "the chat template (with its default system turn) renders differently after GGUF");
        printf("SmolLM2 tokenizer: %zu ids and a %zu-token chat prompt, the same after GGUF\n", i1.n, c1.n);
        chat_tokens_free(&c1), chat_tokens_free(&c2);
        tok_ids_free(&i1), tok_ids_free(&i2);
        tokenizer_free(t2);
    }
    model_source_close(&back);
    tokenizer_free(tok);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261201);
    conversions();
    const char *bytes = "tests/unit/testdata/bytes_tokenizer.json", *smol = "tests/golden/data/tokenizer/smollm2";
    static const enum ggml_type types[3] = {GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0};
    static const char *const names[3] = {"f16", "bf16", "q8_0"};
    for (int i = 0; i < 3; i++) {
        char label[64];
        snprintf(label, sizeof label, "llama-%s", names[i]);
        model_case("tests/golden/data/e2e/llama", bytes, types[i], label);
        snprintf(label, sizeof label, "qwen2-%s", names[i]);
        model_case("tests/golden/data/e2e/qwen2", bytes, types[i], label);
    }
    tokenizer_case(smol);
    return test_finish("gguf_write_test");
}
