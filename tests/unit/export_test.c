/* export_test.c — the merged export from a small engine: the written folder opens as an HF
 * model (io/model_files checks every name, dtype and shape against the written config.json),
 * untouched weights are the base weights in BF16, a LoRA-adapted Linear holds W + s·B·A and a
 * DoRA-adapted one (m/‖W + s·B·A‖_row)·(W + s·B·A), computed here independently in double;
 * full fine-tuning writes the trained tensors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/file.h"
#include "io/model_files.h"
#include "io/peft.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "train/export.h"

enum { R = 3 };

struct toy_tensor {
    struct engine_tensor info;
    float *v;
};

struct toy {
    struct model_config c;
    uint64_t seed;
    int n;
    struct toy_tensor t[12];
};

/* Base weights are a pure function of (seed, name): regenerated on every read. */
static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void base_values(const struct toy *t, const char *name, float *out, int64_t n) {
    struct rng r;
    rng_init(&r, t->seed ^ name_hash(name));
    for (int64_t i = 0; i < n; i++) out[i] = (float)rng_range(&r, -1.0, 1.0);
}

static int toy_base(void *s, const char *name, float *host, struct io_err *e) {
    struct toy *t = s;
    for (int slot = 0; slot < MW_N_GLOBAL + t->c.L * MW_N_LAYER; slot++) {
        const enum model_weight kind = slot < MW_N_GLOBAL ? (enum model_weight)slot
                                                          : (enum model_weight)(MW_N_GLOBAL + (slot - MW_N_GLOBAL) % MW_N_LAYER);
        char buf[128];
        int64_t shape[2];
        const int nd = model_weight_shape(shape, &t->c, kind);
        model_weight_name(buf, sizeof buf, kind, slot < MW_N_GLOBAL ? -1 : (slot - MW_N_GLOBAL) / MW_N_LAYER);
        if (nd && strcmp(buf, name) == 0) {
            base_values(t, name, host, nd == 2 ? shape[0] * shape[1] : shape[0]);
            return 0;
        }
    }
    return io_fail(e, "no base weight %s", name);
}

static int toy_n(void *s) { return ((struct toy *)s)->n; }
static int toy_info(void *s, int i, struct engine_tensor *info) {
    *info = ((struct toy *)s)->t[i].info;
    return 0;
}
static int64_t numel(const struct engine_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}
static int toy_read(void *s, int i, void *host, struct io_err *e) {
    (void)e;
    struct toy *t = s;
    memcpy(host, t->t[i].v, (size_t)numel(&t->t[i].info) * 4);
    return 0;
}

static void add_tensor(struct toy *t, struct rng *r, const char *name, int64_t d0, int64_t d1, float lo, float hi) {
    struct toy_tensor *x = &t->t[t->n++];
    snprintf(x->info.name, sizeof x->info.name, "%s", name);
    x->info.role = ROLE_PARAM;
    x->info.dtype = ST_F32;
    x->info.ndim = d1 ? 2 : 1;
    x->info.shape[0] = d0;
    x->info.shape[1] = d1;
    x->v = malloc((size_t)numel(&x->info) * 4);
    for (int64_t k = 0; k < numel(&x->info); k++) x->v[k] = (float)rng_range(r, lo, hi);
}

static struct train_engine engine_of(struct toy *t) {
    struct train_engine eng = {0};
    eng.name = "toy";
    eng.self = t;
    eng.n_tensors = toy_n;
    eng.tensor_info = toy_info;
    eng.tensor_read = toy_read;
    eng.base_weight_read = toy_base;
    return eng;
}

static float bf16_of(float x) { /* RNE, independent of io/ and ref/ */
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

static int read_weight(const struct model_files *m, enum model_weight kind, int layer, float *out) {
    struct io_err e;
    const struct model_weight_ref *w = model_files_get(m, kind, layer);
    return w && model_weight_to_f32(out, w, &e) == 0;
}

int main(int argc, char **argv) {
    const uint64_t seed = test_seed(argc, argv, 11);
    const char *tmp = getenv("TEST_TMPDIR");
    char dir[1024];
    struct io_err e = {{0}};
    struct toy t = {0};
    t.seed = seed;
    snprintf(t.c.model_type, sizeof t.c.model_type, "llama");
    t.c.C = 16, t.c.F = 24, t.c.L = 2, t.c.H = 4, t.c.KVH = 2, t.c.D = 4, t.c.V = 40;
    t.c.max_position_embeddings = 64, t.c.rms_norm_eps = 1e-5f, t.c.rope_theta = 10000.0f;
    t.c.tie_word_embeddings = 1, t.c.bos_token_id = 1, t.c.eos_token_ids[0] = 2, t.c.n_eos = 1, t.c.pad_token_id = -1;
    EXPECT(config_validate(&t.c, &e) == 0, "toy config: %s", e.msg);
    struct rng r;
    rng_init(&r, seed);
    const float s = 2.0f / R;
    /* LoRA on layer 0 q_proj (out H·D = 16, in 16); DoRA on layer 1 down_proj (out 16, in 24) */
    add_tensor(&t, &r, "model.layers.0.self_attn.q_proj.lora_A.weight", R, 16, -0.5f, 0.5f);
    add_tensor(&t, &r, "model.layers.0.self_attn.q_proj.lora_B.weight", 16, R, -0.5f, 0.5f);
    add_tensor(&t, &r, "model.layers.1.mlp.down_proj.lora_A.weight", R, 24, -0.5f, 0.5f);
    add_tensor(&t, &r, "model.layers.1.mlp.down_proj.lora_B.weight", 16, R, -0.5f, 0.5f);
    add_tensor(&t, &r, "model.layers.1.mlp.down_proj.lora_magnitude_vector", 16, 0, 0.5f, 2.0f);
    struct train_engine eng = engine_of(&t);
    snprintf(dir, sizeof dir, "%s/export_test_%d/merged", tmp ? tmp : "/tmp", (int)getpid());
    EXPECT(export_merged(dir, &t.c, &eng, 0, s, &e) == 0, "export: %s", e.msg);

    struct model_files m;
    const int opened = model_files_open(&m, dir, &e) == 0;
    EXPECT(opened, "the merged folder opens as an HF model: %s", e.msg);
    if (opened) {
        float *got = malloc(24 * 40 * 4), *base = malloc(24 * 40 * 4);
        /* untouched: embedding, norms, k_proj */
        int ok = read_weight(&m, MW_EMBED, -1, got);
        base_values(&t, "model.embed_tokens.weight", base, 40 * 16);
        for (int i = 0; ok && i < 40 * 16; i++) ok = got[i] == bf16_of(base[i]);
        EXPECT(ok, "embedding is the base in BF16");
        EXPECT(m.lm_head_tied, "tied head stays tied (no lm_head written)");
        ok = read_weight(&m, MW_K, 1, got);
        base_values(&t, "model.layers.1.self_attn.k_proj.weight", base, 8 * 16);
        for (int i = 0; ok && i < 8 * 16; i++) ok = got[i] == bf16_of(base[i]);
        EXPECT(ok, "unadapted Linear is the base in BF16");
        /* LoRA */
        ok = read_weight(&m, MW_Q, 0, got);
        base_values(&t, "model.layers.0.self_attn.q_proj.weight", base, 16 * 16);
        double worst = 0;
        for (int o = 0; o < 16; o++)
            for (int i = 0; i < 16; i++) {
                double d = 0;
                for (int k = 0; k < R; k++) d += (double)t.t[1].v[o * R + k] * t.t[0].v[k * 16 + i];
                const double want = base[o * 16 + i] + s * d;
                const double err = fabs(got[o * 16 + i] - want) / (fabs(want) + 1e-3);
                if (err > worst) worst = err;
            }
        EXPECT(ok && worst <= 1.0 / 256, "LoRA merge W + sBA within BF16 rounding (worst rel %.3g)", worst);
        /* DoRA */
        ok = read_weight(&m, MW_DOWN, 1, got);
        base_values(&t, "model.layers.1.mlp.down_proj.weight", base, 16 * 24);
        worst = 0;
        for (int o = 0; o < 16; o++) {
            double row[24], ss = 0;
            for (int i = 0; i < 24; i++) {
                double d = 0;
                for (int k = 0; k < R; k++) d += (double)t.t[3].v[o * R + k] * t.t[2].v[k * 24 + i];
                row[i] = base[o * 24 + i] + s * d;
                ss += row[i] * row[i];
            }
            for (int i = 0; i < 24; i++) {
                const double want = row[i] * t.t[4].v[o] / sqrt(ss);
                const double err = fabs(got[o * 24 + i] - want) / (fabs(want) + 1e-3);
                if (err > worst) worst = err;
            }
        }
        EXPECT(ok && worst <= 1.0 / 256, "DoRA merge (m/‖W+sBA‖)(W+sBA) within BF16 rounding (worst rel %.3g)", worst);
        free(got);
        free(base);
        model_files_close(&m);
    }

    /* an adapter without its B is refused with a message */
    struct toy broken = t;
    broken.n = 1;
    struct train_engine eb = engine_of(&broken);
    char dir2[1100];
    snprintf(dir2, sizeof dir2, "%s2", dir);
    EXPECT(export_merged(dir2, &t.c, &eb, 0, s, &e) == -1 && strstr(e.msg, "no lora_B"), "half adapter: %s", e.msg);
    /* full fine-tuning without the weights is refused */
    EXPECT(export_merged(dir2, &t.c, &eng, 1, 1.0f, &e) == -1 && strstr(e.msg, "has no tensor"), "full: %s", e.msg);
    for (int i = 0; i < t.n; i++) free(t.t[i].v);

    /* PEFT adapter: LoRA on q_proj and v_proj of both layers; written, read back by io/peft against
     * the base config, every factor bit-identical; a missing factor is refused. */
    struct toy p = {0};
    p.seed = seed;
    p.c = t.c;
    add_tensor(&p, &r, "model.layers.0.self_attn.q_proj.lora_A.weight", R, 16, -0.5f, 0.5f);
    add_tensor(&p, &r, "model.layers.0.self_attn.q_proj.lora_B.weight", 16, R, -0.5f, 0.5f);
    add_tensor(&p, &r, "model.layers.0.self_attn.v_proj.lora_A.weight", R, 16, -0.5f, 0.5f);
    add_tensor(&p, &r, "model.layers.0.self_attn.v_proj.lora_B.weight", 8, R, -0.5f, 0.5f);
    add_tensor(&p, &r, "model.layers.1.self_attn.q_proj.lora_A.weight", R, 16, -0.5f, 0.5f);
    add_tensor(&p, &r, "model.layers.1.self_attn.q_proj.lora_B.weight", 16, R, -0.5f, 0.5f);
    add_tensor(&p, &r, "model.layers.1.self_attn.v_proj.lora_A.weight", R, 16, -0.5f, 0.5f);
    add_tensor(&p, &r, "model.layers.1.self_attn.v_proj.lora_B.weight", 8, R, -0.5f, 0.5f);
    struct train_engine ep = engine_of(&p);
    struct train_options o;
    train_options_defaults(&o, "/nonexistent");
    o.rank = R;
    o.alpha = 6.0f;
    o.targets = 1u << 0 | 1u << 2; /* q, v */
    char adir[1100];
    snprintf(adir, sizeof adir, "%s/../adapter", dir);
    EXPECT(export_peft_adapter(adir, &o, &p.c, &ep, "HuggingFaceTB/SmolLM2-135M-Instruct", &e) == 0, "adapter: %s", e.msg);
    struct peft_adapter pa;
    const int read_ok = peft_read(&pa, adir, &p.c, &e) == 0;
    EXPECT(read_ok, "io/peft reads the adapter back against the base config: %s", e.msg);
    if (read_ok) {
        EXPECT(pa.config.r == R && pa.config.lora_alpha == 6.0 && !pa.config.use_dora && pa.n == 4,
               "config r=%d alpha=%g modules=%d", pa.config.r, pa.config.lora_alpha, pa.n);
        int same = 1;
        for (int l = 0; l < 2; l++)
            for (int k = 0; k < 2; k++) {
                const struct peft_module *pm = peft_find(&pa, k ? MW_V : MW_Q, l);
                const struct toy_tensor *ta = &p.t[l * 4 + k * 2], *tb = &p.t[l * 4 + k * 2 + 1];
                same &= pm && memcmp(pm->lora_a, ta->v, (size_t)numel(&ta->info) * 4) == 0 &&
                        memcmp(pm->lora_b, tb->v, (size_t)numel(&tb->info) * 4) == 0;
            }
        EXPECT(same, "every factor round-trips bit for bit");
        peft_free(&pa);
    }
    o.targets |= 1u << 3; /* o_proj: the engine has no such adapter */
    EXPECT(export_peft_adapter(adir, &o, &p.c, &ep, "", &e) == -1 && strstr(e.msg, "o_proj.lora_A"), "missing: %s", e.msg);
    for (int i = 0; i < p.n; i++) free(p.t[i].v);
    return test_finish("export_test");
}
