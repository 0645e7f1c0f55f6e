/* peft_test.c — io/peft against adapters saved by PEFT 0.21.2 itself
 * (tests/golden/data/peft/{lora,dora}, from tests/golden/gen/gen_peft_reference.py) and round
 * trips of refine's writer:
 *   - refine's adapter_config.json has exactly PEFT's keys with PEFT's values (parsed and
 *     compared key by key; target_modules as a set, since PEFT writes a Python set);
 *   - refine's adapter_model.safetensors has exactly PEFT's tensor names, shapes and dtypes for
 *     the same model and config (LoRA and DoRA);
 *   - the PEFT-saved adapters read back with every factor, and refine's own written adapters
 *     read back bit-identical (LoRA, DoRA, rsLoRA, fractional alpha, layers_to_transform).
 * Malformed adapters: tests/unit/malformed_test.c.
 *
 * PEFT itself loading refine's adapters: tests/golden/gen/check_peft_load.py, which runs
 *   bazel run //tests/unit:peft_test -- --write=DIR
 * (writes DIR/lora and DIR/dora for the tiny Llama of the script) and then, with PEFT 0.21.2,
 * transformers 5.23.0 and torch 2.15.0 on CPU, loads each with PeftModel.from_pretrained: no
 * missing or unexpected adapter keys, every loaded factor equal to the file, and the PEFT logits
 * equal (to 2e-5) those of the base model with the weights merged by hand from the file's factors
 * (W + s·B·A; DoRA: m/‖W + s·B·A‖_row · (W + s·B·A)).
 * Recorded run (2026-11-23, CPU, peft 0.21.2, transformers 5.23.0, torch 2.15.0+cu132, the
 * adapters of `--write` with the default seed 77):
 *   lora:   OK: 28 tensors, no missing/unexpected keys; max |logits − merged| = 4.81e-07 (adapter effect 0.556)
 *   dora:   OK: 42 tensors, no missing/unexpected keys; max |logits − merged| = 3.87e-07 (adapter effect 0.448)
 *   rslora: OK: 28 tensors, no missing/unexpected keys; max |logits − merged| = 1.4e-06  (adapter effect 0.508)
 * and the script reports FAIL (missing + unexpected key) for a copy with one key misspelled.
 *
 *   bazel test //tests/unit:peft_test
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "io/file.h"
#include "io/peft.h"
#include "io/safetensors.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

#define PD "tests/golden/data/peft/"

static uint64_t g_seed;
static char g_dir[1024];

/* The tiny Llama of gen_peft_reference.py and check_peft_load.py. */
static struct model_config tiny_config(void) {
    struct model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "llama");
    c.C = 32, c.F = 64, c.L = 2, c.H = 4, c.KVH = 2, c.D = 8, c.V = 64;
    c.max_position_embeddings = 2048, c.rms_norm_eps = 1e-6f, c.rope_theta = 10000.0f;
    c.bos_token_id = 1, c.eos_token_ids[0] = 2, c.n_eos = 1, c.pad_token_id = -1;
    return c;
}

static const unsigned all_targets = (1u << MW_Q) | (1u << MW_K) | (1u << MW_V) | (1u << MW_O) | (1u << MW_GATE) |
                                    (1u << MW_UP) | (1u << MW_DOWN);
static const enum model_weight kinds[7] = {MW_Q, MW_K, MW_V, MW_O, MW_GATE, MW_UP, MW_DOWN};

/* An adapter with random factors for config c (every targeted module of every layer). */
struct owned {
    int n;
    struct peft_module mods[64];
};

static void random_adapter(struct owned *o, const struct model_config *mc, const struct peft_config *pc,
                           struct rng *r) {
    o->n = 0;
    for (int l = 0; l < mc->L; l++) {
        int keep = pc->n_layers_to_transform == 0;
        for (int i = 0; i < pc->n_layers_to_transform; i++) keep |= pc->layers_to_transform[i] == l;
        for (int k = 0; k < 7 && keep; k++) {
            if (!(pc->targets & (1u << kinds[k]))) continue;
            int64_t s[2];
            model_weight_shape(s, mc, kinds[k]);
            struct peft_module *m = &o->mods[o->n++];
            m->kind = kinds[k], m->layer = l, m->out = s[0], m->in = s[1];
            float *a = malloc((size_t)(pc->r * m->in) * sizeof *a), *b = malloc((size_t)(m->out * pc->r) * sizeof *b);
            rng_fill_normal(r, a, pc->r * m->in, 0, 0.2);
            rng_fill_normal(r, b, m->out * pc->r, 0, 0.2);
            m->lora_a = a, m->lora_b = b, m->magnitude = NULL;
            if (pc->use_dora) {
                float *mg = malloc((size_t)m->out * sizeof *mg);
                rng_fill_uniform(r, mg, m->out, 0.5, 2.0);
                m->magnitude = mg;
            }
        }
    }
}

static void free_owned(struct owned *o) {
    for (int i = 0; i < o->n; i++) {
        free((void *)o->mods[i].lora_a);
        free((void *)o->mods[i].lora_b);
        free((void *)o->mods[i].magnitude);
    }
}

static struct peft_config make_config(int r, double alpha, int dora, int rslora, unsigned targets) {
    struct peft_config c;
    memset(&c, 0, sizeof c);
    c.r = r, c.lora_alpha = alpha, c.use_dora = dora, c.use_rslora = rslora, c.targets = targets;
    return c;
}

static char *slurp(const char *path) {
    char *t = NULL;
    size_t n;
    struct io_err e;
    if (read_file_text(&t, &n, path, 1 << 20, &e) != 0) {
        EXPECT(0, "%s", e.msg);
        return NULL;
    }
    return t;
}

/* refine's config JSON against PEFT's, key by key. */
static void compare_config_json(const char *ours, const char *peft_path) {
    char *theirs = slurp(peft_path);
    if (theirs == NULL) return;
    cJSON *a = cJSON_Parse(ours), *b = cJSON_Parse(theirs);
    EXPECT(a != NULL && b != NULL, "both configs parse");
    if (a != NULL && b != NULL) {
        int na = cJSON_GetArraySize(a), nb = cJSON_GetArraySize(b);
        EXPECT(na == nb, "%s: %d keys written, PEFT writes %d", peft_path, na, nb);
        for (cJSON *it = b->child; it != NULL; it = it->next) {
            cJSON *mine = cJSON_GetObjectItemCaseSensitive(a, it->string);
            EXPECT(mine != NULL, "key \"%s\" missing from refine's adapter_config.json", it->string);
            if (mine == NULL) continue;
            if (strcmp(it->string, "target_modules") == 0) {
                int same = cJSON_GetArraySize(mine) == cJSON_GetArraySize(it);
                for (cJSON *t = it->child; t != NULL && same; t = t->next) {
                    int hit = 0;
                    for (cJSON *u = mine->child; u != NULL; u = u->next) hit |= strcmp(u->valuestring, t->valuestring) == 0;
                    same = hit;
                }
                EXPECT(same, "target_modules differ as sets");
            } else {
                EXPECT(cJSON_Compare(mine, it, 1), "key \"%s\" differs from PEFT's", it->string);
            }
        }
    }
    /* The text layout is json.dumps(indent=2, sort_keys=True): keys sorted, two-space indents. */
    const char *prev = "";
    for (cJSON *it = a ? a->child : NULL; it != NULL; it = it->next) {
        EXPECT(strcmp(prev, it->string) < 0, "keys sorted (%s after %s)", it->string, prev);
        prev = it->string;
    }
    EXPECT(strncmp(ours, "{\n  \"alora_invocation_tokens\": null,\n", 37) == 0, "layout");
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(theirs);
}

/* The names, shapes and dtypes refine writes against the file PEFT wrote for the same config. */
static void compare_tensor_names(const char *ours_dir, const char *peft_dir) {
    char p1[1400], p2[1400];
    snprintf(p1, sizeof p1, "%s/adapter_model.safetensors", ours_dir);
    snprintf(p2, sizeof p2, "%s/adapter_model.safetensors", peft_dir);
    struct safetensors a, b;
    struct io_err e;
    if (safetensors_open(&a, p1, &e) != 0 || safetensors_open(&b, p2, &e) != 0) {
        EXPECT(0, "%s", e.msg);
        return;
    }
    EXPECT(a.n_tensors == b.n_tensors, "%s: %d tensors, PEFT wrote %d", ours_dir, a.n_tensors, b.n_tensors);
    for (int i = 0; i < b.n_tensors; i++) {
        const struct st_tensor *t = &b.tensors[i], *m = safetensors_find(&a, t->name);
        EXPECT(m != NULL, "%s: PEFT's tensor %s is not written by refine", ours_dir, t->name);
        if (m == NULL) continue;
        EXPECT(m->dtype == t->dtype && m->ndim == t->ndim && memcmp(m->shape, t->shape, sizeof m->shape) == 0,
               "%s: dtype/shape", t->name);
    }
    const char *fa = safetensors_meta(&a, "format"), *fb = safetensors_meta(&b, "format");
    EXPECT(fa != NULL && fb != NULL && strcmp(fa, fb) == 0, "metadata format");
    safetensors_close(&a);
    safetensors_close(&b);
}

static void expect_same(const struct peft_adapter *got, const struct owned *o, const struct peft_config *pc,
                        const char *what) {
    EXPECT(got->n == o->n, "%s: %d modules read, %d written", what, got->n, o->n);
    EXPECT(got->config.r == pc->r && got->config.lora_alpha == pc->lora_alpha &&
               got->config.use_dora == pc->use_dora && got->config.use_rslora == pc->use_rslora &&
               got->config.targets == pc->targets && got->config.lora_dropout == pc->lora_dropout &&
               got->config.n_layers_to_transform == pc->n_layers_to_transform &&
               strcmp(got->config.base_model, pc->base_model) == 0,
           "%s: config round trip", what);
    EXPECT(fabs(peft_scale(&got->config) - peft_scale(pc)) == 0, "%s: scale", what);
    for (int i = 0; i < o->n; i++) {
        const struct peft_module *w = &o->mods[i], *g = peft_find(got, w->kind, w->layer);
        EXPECT(g != NULL && g->in == w->in && g->out == w->out, "%s: module %d", what, i);
        if (g == NULL) continue;
        struct cmp_case c = {"peft round trip", what, "", "f32", g_seed};
        cmp_exact_f32(&c, g->lora_a, w->lora_a, pc->r * w->in);
        cmp_exact_f32(&c, g->lora_b, w->lora_b, w->out * pc->r);
        EXPECT((g->magnitude != NULL) == (w->magnitude != NULL), "%s: magnitude presence", what);
        if (g->magnitude && w->magnitude) cmp_exact_f32(&c, g->magnitude, w->magnitude, w->out);
    }
}

static void round_trip(const char *name, struct peft_config pc, const struct model_config *mc, struct rng *r,
                       const char *peft_ref) {
    struct owned o;
    random_adapter(&o, mc, &pc, r);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, name);
    struct io_err e = {{0}};
    EXPECT(peft_write(dir, &pc, o.mods, o.n, &e) == 0, "%s: write: %s", name, e.msg);
    struct peft_adapter a;
    if (peft_read(&a, dir, mc, &e) != 0) {
        EXPECT(0, "%s: read back: %s", name, e.msg);
    } else {
        expect_same(&a, &o, &pc, name);
        peft_free(&a);
    }
    /* Without the base config the shapes come from the factors. */
    if (peft_read(&a, dir, NULL, &e) != 0) {
        EXPECT(0, "%s: read back without base: %s", name, e.msg);
    } else {
        expect_same(&a, &o, &pc, name);
        peft_free(&a);
    }
    if (peft_ref != NULL) {
        char json[1300], ref[256];
        snprintf(json, sizeof json, "%s/adapter_config.json", dir);
        char *ours = slurp(json);
        snprintf(ref, sizeof ref, "%s/adapter_config.json", peft_ref);
        if (ours != NULL) compare_config_json(ours, ref);
        free(ours);
        compare_tensor_names(dir, peft_ref);
    }
    free_owned(&o);
}

/* The adapters PEFT saved read back completely. */
static void read_peft_saved(const char *dir, int dora) {
    struct model_config mc = tiny_config();
    struct peft_adapter a;
    struct io_err e = {{0}};
    if (peft_read(&a, dir, &mc, &e) != 0) {
        EXPECT(0, "%s: %s", dir, e.msg);
        return;
    }
    EXPECT(a.n == 14 && a.config.r == 4 && a.config.lora_alpha == 8 && a.config.use_dora == dora &&
               a.config.targets == all_targets && peft_scale(&a.config) == 2.0,
           "%s: summary (n=%d)", dir, a.n);
    char path[1200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    struct safetensors st;
    if (safetensors_open(&st, path, &e) == 0) {
        const struct peft_module *m = peft_find(&a, MW_DOWN, 1);
        char key[192];
        peft_key(key, sizeof key, MW_DOWN, 1, "lora_B.weight");
        const struct st_tensor *t = safetensors_find(&st, key);
        EXPECT(m != NULL && t != NULL && m->in == 64 && m->out == 32 && memcmp(m->lora_b, t->data, t->nbytes) == 0,
               "%s: down_proj layer 1 lora_B", dir);
        peft_key(key, sizeof key, MW_K, 0, "lora_magnitude_vector");
        t = safetensors_find(&st, key);
        m = peft_find(&a, MW_K, 0);
        EXPECT((t != NULL) == dora && m != NULL && (m->magnitude != NULL) == dora &&
                   (!dora || memcmp(m->magnitude, t->data, t->nbytes) == 0),
               "%s: magnitude of k_proj layer 0", dir);
        safetensors_close(&st);
    }
    peft_free(&a);
}

/* PEFT keeps the adapter dtype when autocast is off: BF16 factors read back as their exact fp32
 * values. The file is refine's own LoRA round trip with every tensor converted to BF16. */
static void read_bf16_factors(void) {
    char src[1300], dst[1300], path[1400];
    snprintf(src, sizeof src, "%s/lora/adapter_model.safetensors", g_dir);
    snprintf(dst, sizeof dst, "%s/lora_bf16", g_dir);
    struct io_err e = {{0}};
    struct safetensors st;
    if (make_dirs(dst, &e) != 0 || safetensors_open(&st, src, &e) != 0) {
        EXPECT(0, "%s", e.msg);
        return;
    }
    struct st_tensor *t = calloc((size_t)st.n_tensors, sizeof *t);
    for (int i = 0; i < st.n_tensors; i++) {
        t[i] = st.tensors[i];
        uint16_t *h = malloc((size_t)t[i].numel * 2);
        st_tensor_to_bf16(h, &st.tensors[i], &e);
        t[i].dtype = ST_BF16, t[i].data = (const uint8_t *)h, t[i].nbytes = (size_t)t[i].numel * 2;
    }
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dst);
    EXPECT(safetensors_write(path, t, st.n_tensors, NULL, 0, &e) == 0, "%s", e.msg);
    char *cfg = NULL;
    snprintf(path, sizeof path, "%s/lora/adapter_config.json", g_dir);
    size_t n = 0;
    EXPECT(read_file_text(&cfg, &n, path, 1 << 20, &e) == 0, "%s", e.msg);
    snprintf(path, sizeof path, "%s/adapter_config.json", dst);
    EXPECT(cfg != NULL && write_file_atomic(path, cfg, n, &e) == 0, "%s", e.msg);
    free(cfg);
    struct model_config mc = tiny_config();
    struct peft_adapter a;
    if (peft_read(&a, dst, &mc, &e) != 0) {
        EXPECT(0, "bf16 adapter: %s", e.msg);
    } else {
        const struct peft_module *m = peft_find(&a, MW_UP, 1);
        char key[192];
        peft_key(key, sizeof key, MW_UP, 1, "lora_A.weight");
        const struct st_tensor *ref = safetensors_find(&st, key);
        int same = m != NULL && ref != NULL;
        for (int64_t i = 0; same && i < ref->numel; i++) {
            float r;
            memcpy(&r, ref->data + 4 * i, 4);
            uint32_t bits;
            memcpy(&bits, &m->lora_a[i], 4);
            same = (bits & 0xFFFF) == 0 && fabsf(m->lora_a[i] - r) <= fabsf(r) * (1.0f / 256);
        }
        EXPECT(same && a.n == 14, "bf16 factors read as their fp32 values");
        peft_free(&a);
    }
    for (int i = 0; i < st.n_tensors; i++) free((void *)t[i].data);
    free(t);
    safetensors_close(&st);
}

/* --write=DIR: the adapters check_peft_load.py loads into PEFT (seeded, printed). */
static int write_for_peft(const char *dir) {
    struct model_config mc = tiny_config();
    struct rng r;
    rng_init(&r, g_seed);
    static const struct {
        const char *name;
        int dora, rslora;
    } v[] = {{"lora", 0, 0}, {"dora", 1, 0}, {"rslora", 0, 1}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct peft_config pc = make_config(4, 8, v[i].dora, v[i].rslora, all_targets);
        snprintf(pc.base_model, sizeof pc.base_model, "tiny-random-llama");
        struct owned o;
        random_adapter(&o, &mc, &pc, &r);
        char d[1200];
        snprintf(d, sizeof d, "%s/%s", dir, v[i].name);
        struct io_err e;
        if (peft_write(d, &pc, o.mods, o.n, &e) != 0) io_exit(&e);
        printf("wrote %s\n", d);
        free_owned(&o);
    }
    return 0;
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 77);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--write=", 8) == 0) return write_for_peft(argv[i] + 8);
    const char *t = getenv("TEST_TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/peft_test", t && *t ? t : "/tmp");
    struct io_err e;
    if (make_dirs(g_dir, &e) != 0) io_exit(&e);

    read_peft_saved(PD "lora", 0);
    read_peft_saved(PD "dora", 1);

    struct model_config mc = tiny_config();
    struct rng r;
    rng_init(&r, g_seed);
    round_trip("lora", make_config(4, 8, 0, 0, all_targets), &mc, &r, PD "lora");
    round_trip("dora", make_config(4, 8, 1, 0, all_targets), &mc, &r, PD "dora");
    read_bf16_factors();
    struct peft_config pc = make_config(3, 2.5, 0, 1, (1u << MW_Q) | (1u << MW_V));
    pc.lora_dropout = 0.05;
    snprintf(pc.base_model, sizeof pc.base_model, "HuggingFaceTB/SmolLM2-135M \"caf\xc3\xa9\" \xf0\x9f\x98\x80");
    round_trip("rslora_qv", pc, &mc, &r, NULL);
    pc = make_config(2, 16, 1, 0, (1u << MW_GATE) | (1u << MW_DOWN) | (1u << MW_O));
    pc.layers_to_transform[0] = 1, pc.n_layers_to_transform = 1;
    round_trip("dora_layer1", pc, &mc, &r, NULL);

    /* Python's float repr for lora_dropout, ensure_ascii for the name. */
    pc = make_config(8, 16, 0, 0, all_targets);
    pc.lora_dropout = 0.1;
    snprintf(pc.base_model, sizeof pc.base_model, "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80");
    char *js = peft_config_json(&pc, &e);
    EXPECT(js != NULL && strstr(js, "\"lora_dropout\": 0.1,") != NULL && strstr(js, "\"lora_alpha\": 16,") != NULL &&
               strstr(js, "\"base_model_name_or_path\": \"a\\\"b\\\\c\\u00e9\\ud83d\\ude00\",") != NULL,
           "json scalars: %s", js ? js : e.msg);
    free(js);
    pc.lora_dropout = 0;
    pc.base_model[0] = '\0';
    js = peft_config_json(&pc, &e);
    EXPECT(js != NULL && strstr(js, "\"lora_dropout\": 0.0,") != NULL &&
               strstr(js, "\"base_model_name_or_path\": null,") != NULL,
           "json zero dropout, null name");
    free(js);
    return test_finish("peft_test");
}
