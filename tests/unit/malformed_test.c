/* malformed_test.c — every reader of user files against broken input: safetensors, config.json,
 * HF model folders (config/weight mismatches), GGUF and PEFT adapters. Each case must end in
 * one clear message that names the file and the problem (the non-exiting io_err path), never a
 * crash, a hang or a silent acceptance.
 *
 * Every named case runs in a fork()ed child that calls the reader and then io_exit on failure,
 * so the suite also checks what a user sees: exit status 1 (not a signal, not CHECK's 2), and
 * stderr "refine: <message>" holding the expected phrase and naming the file exactly once. Exhaustive sweeps (every truncation
 * of a valid GGUF, every single-byte corruption of its header) run in-process: a crash there
 * fails the whole binary, which is the point.
 *
 *   bazel test //tests/unit:malformed_test        (replay: --test_arg=--seed=N)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/config.h"
#include "io/file.h"
#include "io/gguf.h"
#include "io/model_files.h"
#include "io/model_source.h"
#include "io/peft.h"
#include "io/safetensors.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;
static char g_dir[1024];

static const char *tmp_path(const char *name) {
    static char buf[8][1400];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *p, size_t n) {
    struct io_err e;
    if (write_file_atomic(path, p, n, &e) != 0) io_exit(&e);
}

static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

/* ---- running one case in a child --------------------------------------------------------------- */

enum reader { R_SAFETENSORS, R_CONFIG, R_MODEL_FILES, R_GGUF, R_GGUF_MODEL, R_GGUF_TOKENIZER, R_PEFT, R_PEFT_BASE };

static const struct model_config *g_peft_base;

static int run_reader(enum reader r, const char *path, struct io_err *e) {
    switch (r) {
    case R_SAFETENSORS: {
        struct safetensors st;
        if (safetensors_open(&st, path, e) != 0) return -1;
        safetensors_close(&st);
        return 0;
    }
    case R_CONFIG: {
        struct model_config c;
        return config_from_hf_json(&c, path, e);
    }
    case R_MODEL_FILES: {
        struct model_files m;
        if (model_files_open(&m, path, e) != 0) return -1;
        model_files_close(&m);
        return 0;
    }
    case R_GGUF: {
        struct gguf_file g;
        if (gguf_open(&g, path, e) != 0) return -1;
        gguf_close(&g);
        return 0;
    }
    case R_GGUF_MODEL: {
        struct gguf_model m;
        if (gguf_model_open(&m, path, e) != 0) return -1;
        /* Dequantize everything: a file that binds must also convert. */
        int rc = 0;
        for (int s = 0; s < m.n_weights && rc == 0; s++) {
            const struct gguf_model_weight *w = &m.weights[s];
            if (!w->present) continue;
            float *b = malloc((size_t)(w->shape[0] * (w->ndim == 2 ? w->shape[1] : 1)) * sizeof *b);
            rc = gguf_model_weight_f32(b, &m, w, e);
            free(b);
        }
        gguf_model_close(&m);
        return rc;
    }
    case R_GGUF_TOKENIZER: {
        struct model_source m;
        if (model_source_open(&m, path, e) != 0) return -1;
        struct tokenizer *t = model_source_tokenizer(&m, e);
        tokenizer_free(t);
        model_source_close(&m);
        return t != NULL ? 0 : -1;
    }
    case R_PEFT:
    case R_PEFT_BASE: {
        struct peft_adapter a;
        if (peft_read(&a, path, r == R_PEFT_BASE ? g_peft_base : NULL, e) != 0) return -1;
        peft_free(&a);
        return 0;
    }
    }
    return 0;
}

/* Runs the reader on path in a child that exits through io_exit; checks status 1, the "refine: "
 * prefix, the phrase, and that the message names `names` (the file or folder). */
static void expect_reject(const char *what, enum reader r, const char *path, const char *phrase, const char *names) {
    int fd[2];
    if (pipe(fd) != 0) exit(3);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) exit(3);
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        struct io_err e = {{0}};
        if (run_reader(r, path, &e) == 0) _exit(0);
        io_exit(&e);
    }
    close(fd[1]);
    char msg[4096];
    size_t n = 0;
    ssize_t k;
    while ((k = read(fd[0], msg + n, sizeof msg - 1 - n)) > 0) n += (size_t)k;
    msg[n] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    char *nl = strchr(msg, '\n');
    if (nl != NULL && nl[1] == '\0') *nl = '\0';
    if (WIFSIGNALED(status)) {
        EXPECT(0, "%s: the reader died of signal %d (%s)", what, WTERMSIG(status), msg);
        return;
    }
    int code = WEXITSTATUS(status);
    EXPECT(code == 1, "%s: exit status %d, expected 1 (0 = accepted, 2 = CHECK): %s", what, code, msg);
    if (code != 1) return;
    EXPECT(strncmp(msg, "refine: ", 8) == 0 && strchr(msg, '\n') == NULL, "%s: one line \"refine: ...\": %s", what, msg);
    EXPECT(strstr(msg, phrase) != NULL, "%s: message lacks \"%s\": %s", what, phrase, msg);
    EXPECT(names == NULL || strstr(msg, names) != NULL, "%s: message does not name %s: %s", what, names, msg);
    const char *second = names != NULL && names[0] != '\0' ? strstr(msg, names) : NULL;
    if (second != NULL) second = strstr(second + strlen(names), names);
    EXPECT(second == NULL, "%s: message names %s twice: %s", what, names, msg);
    printf("  %-44s %s\n", what, msg + 8);
}

/* ---- safetensors ------------------------------------------------------------------------------- */

static const char *st_raw(const char *name, uint64_t declared, const char *header, size_t data_len) {
    size_t hl = strlen(header), n = 8 + hl + data_len;
    uint8_t *b = calloc(n + 1, 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(declared >> (8 * i));
    memcpy(b + 8, header, hl);
    const char *p = tmp_path(name);
    write_bytes(p, b, n);
    free(b);
    return p;
}

static void test_safetensors(void) {
    printf("safetensors:\n");
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_reject("empty file", R_SAFETENSORS, st_raw("st_empty", 0, "", 0), "", "st_empty");
    write_bytes(tmp_path("st_short"), "\x10\x00\x00", 3);
    expect_reject("shorter than the length field", R_SAFETENSORS, tmp_path("st_short"), "", "st_short");
    expect_reject("header length beyond the file", R_SAFETENSORS, st_raw("st_hlen", 4096, ok, 8), "", "st_hlen");
    expect_reject("header length over 100 MB", R_SAFETENSORS, st_raw("st_huge", UINT64_C(1) << 40, ok, 8), "",
                  "st_huge");
    expect_reject("truncated data", R_SAFETENSORS, st_raw("st_trunc", strlen(ok), ok, 5), "", "st_trunc");
    const char *bad_json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    expect_reject("unterminated JSON", R_SAFETENSORS, st_raw("st_json", strlen(bad_json), bad_json, 8), "", "st_json");
    const char *utf = "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_reject("bad UTF-8 in a name", R_SAFETENSORS, st_raw("st_utf8", strlen(utf), utf, 8), "UTF-8", "st_utf8");
    const char *dt = "{\"a\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_reject("unknown dtype", R_SAFETENSORS, st_raw("st_dtype", strlen(dt), dt, 8), "F31", "st_dtype");
    const char *size = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
    expect_reject("size disagrees with the shape", R_SAFETENSORS, st_raw("st_size", strlen(size), size, 8), "'a'",
                  "st_size");
    const char *ov = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
    expect_reject("overlapping offsets", R_SAFETENSORS, st_raw("st_overlap", strlen(ov), ov, 12), "", "st_overlap");
    const char *hole = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    expect_reject("a hole between tensors", R_SAFETENSORS, st_raw("st_hole", strlen(hole), hole, 12), "", "st_hole");
    const char *dup = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
    expect_reject("duplicate names", R_SAFETENSORS, st_raw("st_dup", strlen(dup), dup, 8), "'a'", "st_dup");
    const char *huge = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}}";
    expect_reject("huge dimensions", R_SAFETENSORS, st_raw("st_dims", strlen(huge), huge, 8), "'a'", "st_dims");
    const char *neg = "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}";
    expect_reject("negative dimension", R_SAFETENSORS, st_raw("st_neg", strlen(neg), neg, 8), "'a'", "st_neg");
}

/* ---- config.json and model folders ------------------------------------------------------------- */

static const char *k_config =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":32,\"intermediate_size\":48,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":8,\"vocab_size\":64,"
    "\"hidden_act\":\"silu\",\"rms_norm_eps\":1e-06,\"tie_word_embeddings\":true,\"max_position_embeddings\":256}";

/* k_config with `from` replaced by `to`, written to <name>/config.json; returns the folder. */
static const char *config_variant(const char *name, const char *from, const char *to, int with_weights) {
    const char *dir = tmp_path(name);
    struct io_err e;
    if (make_dirs(dir, &e) != 0) io_exit(&e);
    char text[4096];
    const char *at = strstr(k_config, from);
    if (at == NULL) exit(3);
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - k_config), k_config, to, at + strlen(from));
    char p[1500];
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, text);
    if (with_weights) {
        /* The weights of tests/unit/testdata/models/llama_tied_bf16, whose config k_config is. */
        struct mapped_file m;
        if (map_file(&m, "tests/unit/testdata/models/llama_tied_bf16/model.safetensors", &e) != 0) io_exit(&e);
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        write_bytes(p, m.data, m.size);
        unmap_file(&m);
    }
    return dir;
}

static void test_config(void) {
    printf("config.json:\n");
    const char *p = tmp_path("cfg_trunc.json");
    write_bytes(p, k_config, 40);
    expect_reject("truncated JSON", R_CONFIG, p, "", "cfg_trunc.json");
    p = tmp_path("cfg_empty.json");
    write_bytes(p, "", 0);
    expect_reject("empty file", R_CONFIG, p, "", "cfg_empty.json");
    p = tmp_path("cfg_list.json");
    write_text(p, "[1, 2]");
    expect_reject("not an object", R_CONFIG, p, "", "cfg_list.json");
    expect_reject("bad UTF-8 in a used string", R_CONFIG,
                  config_variant("cfg_utf8", "\"llama\"", "\"ll\xc3\x28ma\"", 0), "", "cfg_utf8");
    expect_reject("bad UTF-8 in an unused string", R_CONFIG,
                  config_variant("cfg_utf8b", "\"silu\",", "\"silu\",\"_name_or_path\":\"caf\xe9\",", 0), "UTF-8",
                  "cfg_utf8b");
    expect_reject("hidden_size a string", R_CONFIG, config_variant("cfg_type", "\"hidden_size\":32", "\"hidden_size\":\"32\"", 0),
                  "hidden_size", "cfg_type");
    expect_reject("negative layer count", R_CONFIG,
                  config_variant("cfg_neg", "\"num_hidden_layers\":2", "\"num_hidden_layers\":-2", 0),
                  "num_hidden_layers", "cfg_neg");
    expect_reject("huge vocabulary", R_CONFIG,
                  config_variant("cfg_vocab", "\"vocab_size\":64", "\"vocab_size\":1e300", 0), "vocab_size", "cfg_vocab");
    expect_reject("heads not a multiple of kv heads", R_CONFIG,
                  config_variant("cfg_gqa", "\"num_key_value_heads\":2", "\"num_key_value_heads\":3", 0), "", "cfg_gqa");
    expect_reject("unsupported activation", R_CONFIG,
                  config_variant("cfg_act", "\"silu\"", "\"gelu\"", 0), "gelu", "cfg_act");
    expect_reject("missing hidden_size", R_CONFIG,
                  config_variant("cfg_missing", "\"hidden_size\":32,", "", 0), "hidden_size", "cfg_missing");

    printf("config/weight mismatches:\n");
    expect_reject("config of a wider model", R_MODEL_FILES,
                  config_variant("mf_wide", "\"hidden_size\":32", "\"hidden_size\":64", 1), "", "mf_wide");
    expect_reject("config with more layers", R_MODEL_FILES,
                  config_variant("mf_layers", "\"num_hidden_layers\":2", "\"num_hidden_layers\":3", 1), "lacks", "mf_layers");
    expect_reject("config with fewer layers", R_MODEL_FILES,
                  config_variant("mf_fewer", "\"num_hidden_layers\":2", "\"num_hidden_layers\":1", 1), "", "mf_fewer");
    expect_reject("config with another vocabulary", R_MODEL_FILES,
                  config_variant("mf_vocab", "\"vocab_size\":64", "\"vocab_size\":65", 1), "embed_tokens", "mf_vocab");
    {
        /* The same weights with one tensor's dtype string changed from BF16 to I16 (same size). */
        const char *dir = config_variant("mf_dtype", "\"vocab_size\"", "\"vocab_size\"", 1);
        char sp[1500];
        snprintf(sp, sizeof sp, "%s/model.safetensors", dir);
        struct mapped_file mf;
        struct io_err e;
        if (map_file(&mf, sp, &e) != 0) io_exit(&e);
        size_t size = mf.size;
        uint8_t *b = malloc(size);
        memcpy(b, mf.data, size);
        unmap_file(&mf);
        uint8_t *at = memmem(b, size, "\"BF16\"", 6);
        EXPECT(at != NULL, "a BF16 tensor to retype");
        if (at != NULL) memcpy(at, "\"I16\" ", 6);
        write_bytes(sp, b, size);
        free(b);
        expect_reject("a weight stored as I16", R_MODEL_FILES, dir, "I16", "mf_dtype");
    }
    expect_reject("folder without weights", R_MODEL_FILES, config_variant("mf_none", "\"vocab_size\"", "\"vocab_size\"", 0),
                  "", "mf_none");
}

/* ---- GGUF -------------------------------------------------------------------------------------- */

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *x, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}
static void put_u32(struct buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}
static void put_u64(struct buf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}
static void put_str(struct buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

/* A small llama GGUF: C=32, F=32, L=1, H=2, KVH=1, D=16, V=8, F32 tensors, untied; with one
 * mutation applied as it is serialized. */
struct mut {
    const char *skip_kv;      /* leave this key out */
    const char *kv_key;       /* change this key's value... */
    uint32_t kv_u32;          /* ...to this UINT32 (or, with kv_str, this string) */
    const char *kv_str;
    const char *skip_tensor;  /* leave this tensor out */
    const char *tensor;       /* change this tensor's... */
    int ndim;                 /* ...dimension count (0: keep) */
    uint64_t ne0, ne1;        /* ...dims (0: keep) */
    int type;                 /* ...ggml type (-1: keep) */
    int64_t offset;           /* ...offset (-1: automatic) */
    const char *extra_tensor; /* add this F32 [32] tensor */
    int n_tokens;             /* token list length (0: 8) */
    int64_t data_cut;         /* drop this many bytes from the end */
};

static const char *const k_tensor_names[] = {
    "token_embd.weight",        "output_norm.weight",   "output.weight",        "blk.0.attn_norm.weight",
    "blk.0.attn_q.weight",      "blk.0.attn_k.weight",  "blk.0.attn_v.weight",  "blk.0.attn_output.weight",
    "blk.0.ffn_norm.weight",    "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight",
};
static const uint64_t k_tensor_dims[][2] = {{32, 8},  {32, 0},  {32, 8},  {32, 0},  {32, 32}, {32, 16},
                                            {32, 16}, {32, 32}, {32, 0},  {32, 32}, {32, 32}, {32, 32}};

static size_t build_gguf(struct buf *b, struct mut m) {
    b->n = 0;
    struct {
        const char *key;
        uint32_t v;
        const char *s;
    } kvs[] = {
        {"general.architecture", 0, "llama"},       {"llama.embedding_length", 32, NULL},
        {"llama.feed_forward_length", 32, NULL},    {"llama.block_count", 1, NULL},
        {"llama.attention.head_count", 2, NULL},    {"llama.attention.head_count_kv", 1, NULL},
        {"llama.context_length", 128, NULL},        {"llama.attention.layer_norm_rms_epsilon", 0, NULL},
        {"tokenizer.ggml.tokens", 0, NULL},
    };
    int nkv = (int)(sizeof kvs / sizeof kvs[0]);
    int n_kv_out = 0, n_t_out = 0;
    for (int i = 0; i < nkv; i++) n_kv_out += !(m.skip_kv && strcmp(m.skip_kv, kvs[i].key) == 0);
    if (m.kv_key && !(m.skip_kv && strcmp(m.kv_key, m.skip_kv) == 0)) {
        int found = 0;
        for (int i = 0; i < nkv; i++) found |= strcmp(kvs[i].key, m.kv_key) == 0;
        n_kv_out += !found;
    }
    int nt = (int)(sizeof k_tensor_names / sizeof k_tensor_names[0]);
    for (int i = 0; i < nt; i++) n_t_out += !(m.skip_tensor && strcmp(m.skip_tensor, k_tensor_names[i]) == 0);
    n_t_out += m.extra_tensor != NULL;
    put(b, "GGUF", 4);
    put_u32(b, 3);
    put_u64(b, (uint64_t)n_t_out);
    put_u64(b, (uint64_t)n_kv_out);
    int added = 0;
    for (int i = 0; i <= nkv; i++) {
        const char *key = i < nkv ? kvs[i].key : m.kv_key;
        if (i == nkv) {
            if (m.kv_key == NULL || added) break;
            int found = 0;
            for (int j = 0; j < nkv; j++) found |= strcmp(kvs[j].key, m.kv_key) == 0;
            if (found) break;
        }
        if (m.skip_kv && strcmp(m.skip_kv, key) == 0) continue;
        put_str(b, key);
        if (m.kv_key && strcmp(m.kv_key, key) == 0) {
            added = 1;
            if (m.kv_str) put_u32(b, GGUF_TYPE_STRING), put_str(b, m.kv_str);
            else put_u32(b, GGUF_TYPE_UINT32), put_u32(b, m.kv_u32);
        } else if (strcmp(key, "tokenizer.ggml.tokens") == 0) {
            int n = m.n_tokens ? m.n_tokens : 8;
            put_u32(b, GGUF_TYPE_ARRAY);
            put_u32(b, GGUF_TYPE_STRING);
            put_u64(b, (uint64_t)n);
            for (int t = 0; t < n; t++) {
                char s[16];
                snprintf(s, sizeof s, "t%d", t);
                put_str(b, s);
            }
        } else if (strstr(key, "epsilon") != NULL) {
            float f = 1e-5f;
            uint32_t u;
            memcpy(&u, &f, 4);
            put_u32(b, GGUF_TYPE_FLOAT32);
            put_u32(b, u);
        } else if (kvs[i].s != NULL) {
            put_u32(b, GGUF_TYPE_STRING);
            put_str(b, kvs[i].s);
        } else {
            put_u32(b, GGUF_TYPE_UINT32);
            put_u32(b, kvs[i].v);
        }
    }
    uint64_t off = 0;
    size_t data_bytes = 0;
    for (int i = 0; i <= nt; i++) {
        const char *name = i < nt ? k_tensor_names[i] : m.extra_tensor;
        if (name == NULL || (m.skip_tensor && strcmp(m.skip_tensor, name) == 0)) continue;
        uint64_t ne0 = i < nt ? k_tensor_dims[i][0] : 32, ne1 = i < nt ? k_tensor_dims[i][1] : 0;
        int ndim = ne1 ? 2 : 1, type = GGML_TYPE_F32;
        int64_t o = -1;
        if (m.tensor && strcmp(m.tensor, name) == 0) {
            if (m.ndim) ndim = m.ndim;
            if (m.ne0) ne0 = m.ne0;
            if (m.ne1) ne1 = m.ne1;
            if (m.type >= 0) type = m.type;
            o = m.offset;
        }
        put_str(b, name);
        put_u32(b, (uint32_t)ndim);
        for (int d = 0; d < ndim; d++) put_u64(b, d == 0 ? ne0 : d == 1 ? (ne1 ? ne1 : 1) : 1);
        put_u32(b, (uint32_t)type);
        put_u64(b, o >= 0 ? (uint64_t)o : off);
        size_t nb = 0;
        if (ggml_row_bytes(&nb, (enum ggml_type)type, (int64_t)(ne0 * (ne1 ? ne1 : 1))) != 0 || nb > (1u << 20)) nb = 64;
        off += (nb + 31) / 32 * 32;
        data_bytes = off;
    }
    while (b->n % 32) put(b, "", 1);
    size_t start = b->n;
    for (size_t i = 0; i < data_bytes / 4; i++) {
        float f = 0.25f + (float)(i % 7);
        put(b, &f, 4);
    }
    if (m.data_cut > 0) b->n -= (size_t)m.data_cut;
    return start;
}

static const char *gguf_file(const char *name, struct mut m) {
    struct buf b = {0};
    build_gguf(&b, m);
    const char *p = tmp_path(name);
    write_bytes(p, b.p, b.n);
    free(b.p);
    return p;
}

static struct mut M(void) { return (struct mut){.type = -1, .offset = -1}; }

/* A header field patched in the bytes of a valid file. */
static const char *gguf_patched(const char *name, size_t at, const void *bytes, size_t n) {
    struct buf b = {0};
    build_gguf(&b, M());
    memcpy(b.p + at, bytes, n);
    const char *p = tmp_path(name);
    write_bytes(p, b.p, b.n);
    free(b.p);
    return p;
}

static void test_gguf(void) {
    printf("GGUF:\n");
    struct io_err e;
    {
        struct gguf_model m;
        const char *p = gguf_file("g_ok.gguf", M());
        EXPECT(gguf_model_open(&m, p, &e) == 0, "the unmutated GGUF is valid: %s", e.msg);
        if (m.weights != NULL) gguf_model_close(&m);
    }
    write_bytes(tmp_path("g_empty.gguf"), "", 0);
    expect_reject("empty file", R_GGUF, tmp_path("g_empty.gguf"), "truncated", "g_empty.gguf");
    expect_reject("bad magic", R_GGUF, gguf_patched("g_magic.gguf", 0, "GGML", 4), "not a GGUF", "g_magic.gguf");
    uint8_t v1[4] = {1, 0, 0, 0}, v9[4] = {9, 0, 0, 0};
    expect_reject("version 1", R_GGUF, gguf_patched("g_v1.gguf", 4, v1, 4), "version 1", "g_v1.gguf");
    expect_reject("version 9", R_GGUF, gguf_patched("g_v9.gguf", 4, v9, 4), "version 9", "g_v9.gguf");
    uint8_t big[8] = {0, 0, 0, 0, 0, 0, 0, 0x10};
    expect_reject("lying tensor count", R_GGUF, gguf_patched("g_nt.gguf", 8, big, 8), "tensors", "g_nt.gguf");
    expect_reject("lying key-value count", R_GGUF, gguf_patched("g_nkv.gguf", 16, big, 8), "key-values", "g_nkv.gguf");
    /* The first key's length field is at 24. */
    expect_reject("lying string length", R_GGUF, gguf_patched("g_slen.gguf", 24, big, 8), "declares a length",
                  "g_slen.gguf");
    uint8_t t13[4] = {13, 0, 0, 0};
    size_t type_at = 24 + 8 + strlen("general.architecture");
    expect_reject("unknown value type", R_GGUF, gguf_patched("g_vtype.gguf", type_at, t13, 4), "value type 13",
                  "g_vtype.gguf");
    expect_reject("bad UTF-8 in a key", R_GGUF, gguf_patched("g_ukey.gguf", 24 + 8 + 3, "\xc0\xaf", 2), "UTF-8",
                  "g_ukey.gguf");

    /* Arrays: a lying count, a nested array, bools other than 0/1, bad UTF-8 in an element. */
    {
        struct buf b = {0};
        put(&b, "GGUF", 4), put_u32(&b, 3), put_u64(&b, 0), put_u64(&b, 1);
        put_str(&b, "a"), put_u32(&b, GGUF_TYPE_ARRAY), put_u32(&b, GGUF_TYPE_UINT64), put_u64(&b, UINT64_C(1) << 61);
        write_bytes(tmp_path("g_acount.gguf"), b.p, b.n);
        expect_reject("lying array count", R_GGUF, tmp_path("g_acount.gguf"), "declares", "g_acount.gguf");
        b.n = 24;
        put_str(&b, "a"), put_u32(&b, GGUF_TYPE_ARRAY), put_u32(&b, GGUF_TYPE_ARRAY), put_u64(&b, 1);
        write_bytes(tmp_path("g_anest.gguf"), b.p, b.n);
        expect_reject("nested array", R_GGUF, tmp_path("g_anest.gguf"), "element type 9", "g_anest.gguf");
        b.n = 24;
        put_str(&b, "a"), put_u32(&b, GGUF_TYPE_ARRAY), put_u32(&b, GGUF_TYPE_BOOL), put_u64(&b, 2), put(&b, "\x01\x02", 2);
        write_bytes(tmp_path("g_abool.gguf"), b.p, b.n);
        expect_reject("bool byte 2 in an array", R_GGUF, tmp_path("g_abool.gguf"), "bool", "g_abool.gguf");
        b.n = 24;
        put_str(&b, "a"), put_u32(&b, GGUF_TYPE_BOOL), put(&b, "\x07", 1);
        write_bytes(tmp_path("g_bool.gguf"), b.p, b.n);
        expect_reject("bool byte 7", R_GGUF, tmp_path("g_bool.gguf"), "bool", "g_bool.gguf");
        b.n = 24;
        put_str(&b, "a"), put_u32(&b, GGUF_TYPE_ARRAY), put_u32(&b, GGUF_TYPE_STRING), put_u64(&b, 2);
        put_str(&b, "ok"), put_str(&b, "\xed\xa0\x80"); /* a UTF-16 surrogate, not UTF-8 */
        write_bytes(tmp_path("g_astr.gguf"), b.p, b.n);
        expect_reject("bad UTF-8 in a token string", R_GGUF, tmp_path("g_astr.gguf"), "element 1", "g_astr.gguf");
        b.n = 16;
        put_u64(&b, 2);
        put_str(&b, "k"), put_u32(&b, GGUF_TYPE_UINT8), put(&b, "\x01", 1);
        put_str(&b, "k"), put_u32(&b, GGUF_TYPE_UINT8), put(&b, "\x02", 1);
        write_bytes(tmp_path("g_dupkey.gguf"), b.p, b.n);
        expect_reject("duplicate key", R_GGUF, tmp_path("g_dupkey.gguf"), "'k' is given twice", "g_dupkey.gguf");
        b.n = 16;
        put_u64(&b, 1);
        put_str(&b, "general.alignment"), put_u32(&b, GGUF_TYPE_UINT32), put_u32(&b, 48);
        write_bytes(tmp_path("g_align.gguf"), b.p, b.n);
        expect_reject("alignment not a power of two", R_GGUF, tmp_path("g_align.gguf"), "power of two", "g_align.gguf");
        b.n = 16;
        put_u64(&b, 1);
        put_str(&b, "general.alignment"), put_u32(&b, GGUF_TYPE_UINT64), put_u64(&b, 32);
        write_bytes(tmp_path("g_aligntype.gguf"), b.p, b.n);
        expect_reject("alignment of the wrong type", R_GGUF, tmp_path("g_aligntype.gguf"), "UINT32", "g_aligntype.gguf");
        free(b.p);
    }

    /* Tensor infos. */
    struct mut m = M();
    m.tensor = "blk.0.attn_q.weight", m.ndim = 5;
    expect_reject("5 dimensions", R_GGUF, gguf_file("g_nd5.gguf", m), "5 dimensions", "g_nd5.gguf");
    m.ndim = 0, m.ne0 = UINT64_C(1) << 40, m.ne1 = UINT64_C(1) << 40;
    expect_reject("huge dimensions", R_GGUF, gguf_file("g_huge.gguf", m), "overflows", "g_huge.gguf");
    m.ne0 = UINT64_C(1) << 33, m.ne1 = UINT64_C(1) << 20;
    expect_reject("dims beyond the file", R_GGUF, gguf_file("g_big.gguf", m), "attn_q", "g_big.gguf");
    m = M(), m.tensor = "blk.0.attn_q.weight", m.type = 99;
    expect_reject("unknown tensor type", R_GGUF, gguf_file("g_ttype.gguf", m), "ggml type 99", "g_ttype.gguf");
    m.type = GGML_TYPE_Q4_0, m.ne0 = 48;
    expect_reject("row not a whole number of blocks", R_GGUF, gguf_file("g_block.gguf", m), "block", "g_block.gguf");
    m = M(), m.tensor = "blk.0.attn_k.weight", m.offset = 4;
    expect_reject("unaligned offset", R_GGUF, gguf_file("g_unal.gguf", m), "alignment", "g_unal.gguf");
    m.offset = 1 << 20;
    expect_reject("offset beyond the file", R_GGUF, gguf_file("g_far.gguf", m), "truncated", "g_far.gguf");
    m.offset = 0;
    expect_reject("overlapping tensors", R_GGUF, gguf_file("g_overlap.gguf", m), "overlap", "g_overlap.gguf");
    m = M(), m.data_cut = 100;
    expect_reject("truncated data", R_GGUF, gguf_file("g_cut.gguf", m), "ffn_down", "g_cut.gguf");
    m = M(), m.extra_tensor = "blk.0.attn_q.weight";
    expect_reject("duplicate tensor", R_GGUF, gguf_file("g_duptensor.gguf", m), "given twice", "g_duptensor.gguf");
    m = M(), m.extra_tensor = "blk.0.a_tensor_name_of_sixty_four_characters_or_more_is_refused.w";
    expect_reject("tensor name too long", R_GGUF, gguf_file("g_longname.gguf", m), "at most 63", "g_longname.gguf");

    printf("GGUF models (metadata/tensor mismatches):\n");
    m = M(), m.kv_key = "general.architecture", m.kv_str = "gpt2";
    expect_reject("another architecture", R_GGUF_MODEL, gguf_file("gm_arch.gguf", m), "gpt2", "gm_arch.gguf");
    m = M(), m.skip_kv = "llama.embedding_length";
    expect_reject("missing embedding_length", R_GGUF_MODEL, gguf_file("gm_noc.gguf", m), "embedding_length",
                  "gm_noc.gguf");
    m = M(), m.kv_key = "llama.attention.head_count", m.kv_u32 = 0;
    expect_reject("zero heads", R_GGUF_MODEL, gguf_file("gm_h0.gguf", m), "head_count", "gm_h0.gguf");
    m = M(), m.kv_key = "llama.attention.head_count_kv", m.kv_u32 = 3;
    expect_reject("heads not a multiple of kv heads", R_GGUF_MODEL, gguf_file("gm_gqa.gguf", m), "", "gm_gqa.gguf");
    m = M(), m.kv_key = "llama.embedding_length", m.kv_str = "32";
    expect_reject("embedding_length a string", R_GGUF_MODEL, gguf_file("gm_cstr.gguf", m), "STRING", "gm_cstr.gguf");
    m = M(), m.kv_key = "llama.rope.scaling.type", m.kv_str = "yarn";
    expect_reject("yarn rope scaling", R_GGUF_MODEL, gguf_file("gm_yarn.gguf", m), "yarn", "gm_yarn.gguf");
    m = M(), m.kv_key = "llama.vocab_size", m.kv_u32 = 9;
    expect_reject("vocab_size against the token list", R_GGUF_MODEL, gguf_file("gm_vocab.gguf", m), "vocab_size",
                  "gm_vocab.gguf");
    m = M(), m.kv_key = "llama.block_count", m.kv_u32 = 2;
    expect_reject("more layers than tensors", R_GGUF_MODEL, gguf_file("gm_layers.gguf", m), "missing", "gm_layers.gguf");
    m = M(), m.skip_tensor = "blk.0.ffn_up.weight";
    expect_reject("missing tensor", R_GGUF_MODEL, gguf_file("gm_miss.gguf", m), "missing", "gm_miss.gguf");
    m = M(), m.tensor = "blk.0.attn_k.weight", m.ne1 = 32;
    expect_reject("k_proj of the wrong shape", R_GGUF_MODEL, gguf_file("gm_shape.gguf", m), "attn_k", "gm_shape.gguf");
    m = M(), m.n_tokens = 9;
    expect_reject("embedding rows against the vocabulary", R_GGUF_MODEL, gguf_file("gm_emb.gguf", m), "token_embd",
                  "gm_emb.gguf");
    m = M(), m.extra_tensor = "blk.0.attn_q_norm.weight";
    expect_reject("a tensor of another architecture", R_GGUF_MODEL, gguf_file("gm_extra.gguf", m), "attn_q_norm",
                  "gm_extra.gguf");
    m = M(), m.extra_tensor = "blk.3.attn_norm.weight";
    expect_reject("a layer beyond block_count", R_GGUF_MODEL, gguf_file("gm_blk3.gguf", m), "layer 3", "gm_blk3.gguf");
    m = M(), m.extra_tensor = "blk.0.attn_q.bias";
    expect_reject("a bias on a llama", R_GGUF_MODEL, gguf_file("gm_bias.gguf", m), "bias", "gm_bias.gguf");
    m = M(), m.tensor = "blk.0.ffn_gate.weight", m.type = 12; /* Q4_K: a known layout refine does not convert */
    m.ne0 = 256, m.ne1 = 0;
    expect_reject("a Q4_K tensor", R_GGUF_MODEL, gguf_file("gm_q4k.gguf", m), "Q4_K", "gm_q4k.gguf");
    printf("GGUF tokenizers (each message names the file once):\n");
    expect_reject("no tokenizer.ggml.model", R_GGUF_TOKENIZER, gguf_file("gt_nomodel.gguf", M()), "tokenizer.ggml.model",
                  "gt_nomodel.gguf");
    m = M(), m.kv_key = "tokenizer.ggml.model", m.kv_u32 = 2;
    expect_reject("tokenizer.ggml.model not a string", R_GGUF_TOKENIZER, gguf_file("gt_modeltype.gguf", m), "STRING",
                  "gt_modeltype.gguf");
    m = M(), m.kv_key = "tokenizer.ggml.model", m.kv_str = "llama";
    expect_reject("a SentencePiece tokenizer", R_GGUF_TOKENIZER, gguf_file("gt_spm.gguf", m), "not supported",
                  "gt_spm.gguf");
    m = M(), m.extra_tensor = "rope_freqs.weight", m.tensor = "rope_freqs.weight", m.ne0 = 8;
    expect_reject("rope factors that are not llama3's", R_GGUF_MODEL, gguf_file("gm_rope.gguf", m), "not the llama3 scaling",
                  "gm_rope.gguf");
}

/* Every truncation and every single-byte corruption of a valid file's header: an error or a
 * valid file, never a crash (in-process; ASan and UBSan builds check the memory accesses). */
static void sweep_gguf(void) {
    struct buf b = {0};
    size_t start = build_gguf(&b, M());
    struct io_err e;
    int64_t rejected = 0, total = 0;
    for (size_t n = 0; n < b.n; n += n < start + 64 ? 1 : 61) {
        uint8_t *copy = malloc(n + 1);
        memcpy(copy, b.p, n);
        struct gguf_file g;
        int rc = gguf_parse(&g, copy, n, "cut.gguf", &e);
        if (rc == 0) gguf_close(&g);
        rejected += rc != 0;
        total++;
        EXPECT(rc != 0 || n >= start, "truncated at %zu of %zu (data at %zu) accepted", n, b.n, start);
        free(copy);
    }
    struct rng r;
    rng_init(&r, g_seed);
    uint8_t *copy = malloc(b.n);
    for (int it = 0; it < 4000; it++) {
        memcpy(copy, b.p, b.n);
        int flips = 1 + rng_int(&r, 3);
        for (int f = 0; f < flips; f++) copy[rng_int(&r, (int)start)] = (uint8_t)rng_u64(&r);
        struct gguf_file g;
        if (gguf_parse(&g, copy, b.n, "flip.gguf", &e) == 0) {
            struct gguf_model mdl;
            if (gguf_model_from_file(&mdl, &g, &e) == 0) {
                for (int s = 0; s < mdl.n_weights; s++) {
                    const struct gguf_model_weight *w = &mdl.weights[s];
                    if (!w->present) continue;
                    float *o = malloc((size_t)(w->shape[0] * (w->ndim == 2 ? w->shape[1] : 1)) * sizeof *o);
                    gguf_model_weight_f32(o, &mdl, w, &e);
                    free(o);
                }
                gguf_model_close(&mdl);
            }
        } else {
            EXPECT(strstr(e.msg, "flip.gguf") != NULL, "message names the file: %s", e.msg);
        }
        total++;
    }
    free(copy);
    free(b.p);
    printf("GGUF sweep: %lld truncated/corrupted headers parsed, %lld truncations rejected, no crash\n",
           (long long)total, (long long)rejected);
}

/* ---- PEFT -------------------------------------------------------------------------------------- */

static const char *k_adapter_config =
    "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"], "
    "\"bias\": \"none\", \"use_dora\": false, \"fan_in_fan_out\": false, \"modules_to_save\": null}";

/* An adapter folder: the config with one replacement, and tensors for q/v of 2 layers of the tiny
 * Llama (C=32, H=4, KVH=2, D=8), with one change each. */
struct amut {
    const char *from, *to;   /* config text replacement */
    const char *skip;        /* a key (suffix match) left out */
    const char *rename_from, *rename_to; /* a key renamed */
    int64_t a_in;            /* lora_A columns (0: 32) */
    int dtype_i32;           /* store q_proj layer 0 lora_A as I32 */
    int dora;                /* add magnitudes */
    int bin_only;            /* no safetensors, an adapter_model.bin */
};

static const char *adapter(const char *name, struct amut m) {
    const char *dir = tmp_path(name);
    struct io_err e;
    if (make_dirs(dir, &e) != 0) io_exit(&e);
    char text[2048], p[1500];
    const char *at = m.from ? strstr(k_adapter_config, m.from) : NULL;
    if (m.from && at == NULL) exit(3);
    if (at)
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - k_adapter_config), k_adapter_config, m.to, at + strlen(m.from));
    else
        snprintf(text, sizeof text, "%s", k_adapter_config);
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    write_text(p, text);
    if (m.bin_only) {
        snprintf(p, sizeof p, "%s/adapter_model.bin", dir);
        write_text(p, "PK");
        return dir;
    }
    struct st_tensor t[16];
    char names[16][160];
    static float data[16][32 * 16];
    int n = 0;
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 2; k++) {
            enum model_weight kind = k == 0 ? MW_Q : MW_V;
            int64_t out = kind == MW_Q ? 32 : 16;
            for (int part = 0; part < (m.dora ? 3 : 2); part++) {
                const char *pn = part == 0 ? "lora_A.weight" : part == 1 ? "lora_B.weight" : "lora_magnitude_vector";
                peft_key(names[n], sizeof names[n], kind, l, pn);
                if (m.skip && strstr(names[n], m.skip) != NULL) continue;
                if (m.rename_from && strstr(names[n], m.rename_from) != NULL) {
                    char tmp[160];
                    const char *s = strstr(names[n], m.rename_from);
                    snprintf(tmp, sizeof tmp, "%.*s%s%s", (int)(s - names[n]), names[n], m.rename_to,
                             s + strlen(m.rename_from));
                    snprintf(names[n], sizeof names[n], "%s", tmp);
                }
                struct st_tensor *x = &t[n];
                memset(x, 0, sizeof *x);
                x->name = names[n];
                x->dtype = ST_F32;
                if (part == 0) x->ndim = 2, x->shape[0] = 4, x->shape[1] = m.a_in ? m.a_in : 32;
                if (part == 1) x->ndim = 2, x->shape[0] = out, x->shape[1] = 4;
                if (part == 2) x->ndim = 1, x->shape[0] = out;
                if (m.dtype_i32 && l == 0 && kind == MW_Q && part == 0) x->dtype = ST_I32;
                int64_t numel = x->shape[0] * (x->ndim == 2 ? x->shape[1] : 1);
                for (int64_t i = 0; i < numel; i++) data[n][i] = 0.01f * (float)(i % 13);
                x->data = (const uint8_t *)data[n];
                x->nbytes = (size_t)numel * 4;
                n++;
            }
        }
    struct st_meta meta = {"format", "pt"};
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    if (safetensors_write(p, t, n, &meta, 1, &e) != 0) io_exit(&e);
    return dir;
}

static struct amut A(void) { return (struct amut){0}; }

static void test_peft(void) {
    printf("PEFT adapters:\n");
    static struct model_config base;
    memset(&base, 0, sizeof base);
    snprintf(base.model_type, sizeof base.model_type, "llama");
    base.C = 32, base.F = 64, base.L = 2, base.H = 4, base.KVH = 2, base.D = 8, base.V = 64;
    g_peft_base = &base;
    struct io_err e;
    struct peft_adapter a;
    EXPECT(peft_read(&a, adapter("p_ok", A()), &base, &e) == 0, "the unmutated adapter is valid: %s", e.msg);
    if (a.mods != NULL) peft_free(&a);

    struct amut m = A();
    expect_reject("no adapter folder", R_PEFT, tmp_path("p_absent"), "adapter_config.json", "p_absent");
    m.from = "\"r\": 4,", m.to = "\"r\": 4";
    expect_reject("broken JSON", R_PEFT, adapter("p_json", m), "JSON", "p_json");
    m.from = "\"LORA\"", m.to = "\"LO\xffRA\"";
    expect_reject("bad UTF-8 in a string", R_PEFT, adapter("p_utf8", m), "UTF-8", "p_utf8");
    m.to = "\"IA3\"";
    expect_reject("another PEFT method", R_PEFT, adapter("p_ia3", m), "IA3", "p_ia3");
    m.from = "\"r\": 4", m.to = "\"r\": 0";
    expect_reject("rank 0", R_PEFT, adapter("p_r0", m), "\"r\"", "p_r0");
    m.to = "\"r\": 2.5";
    expect_reject("fractional rank", R_PEFT, adapter("p_r25", m), "\"r\"", "p_r25");
    m.to = "\"r\": \"4\"";
    expect_reject("rank as a string", R_PEFT, adapter("p_rstr", m), "\"r\"", "p_rstr");
    m.from = "\"none\"", m.to = "\"all\"";
    expect_reject("trained biases", R_PEFT, adapter("p_bias", m), "bias", "p_bias");
    m.from = "\"v_proj\"]", m.to = "\"lm_head\"]";
    expect_reject("an lm_head target", R_PEFT, adapter("p_target", m), "lm_head", "p_target");
    m.from = "[\"q_proj\", \"v_proj\"]", m.to = "\".*proj\"";
    expect_reject("a regex target", R_PEFT, adapter("p_regex", m), "pattern", "p_regex");
    m.from = "\"modules_to_save\": null", m.to = "\"modules_to_save\": [\"lm_head\"]";
    expect_reject("modules_to_save", R_PEFT, adapter("p_mts", m), "modules_to_save", "p_mts");
    m.from = "\"fan_in_fan_out\": false", m.to = "\"fan_in_fan_out\": true";
    expect_reject("fan_in_fan_out", R_PEFT, adapter("p_fifo", m), "fan_in_fan_out", "p_fifo");
    m.from = "\"bias\"", m.to = "\"init_lora_weights\": \"pissa\", \"bias\"";
    expect_reject("PiSSA initialisation (rewrites the base)", R_PEFT, adapter("p_pissa", m), "pissa", "p_pissa");
    m.to = "\"use_qalora\": true, \"bias\"";
    expect_reject("QA-LoRA", R_PEFT, adapter("p_qalora", m), "use_qalora", "p_qalora");
    m = A(), m.from = "\"use_dora\": false", m.to = "\"use_dora\": true";
    expect_reject("DoRA without magnitudes", R_PEFT, adapter("p_nomag", m), "lora_magnitude_vector", "p_nomag");
    m = A(), m.dora = 1;
    expect_reject("magnitudes without use_dora", R_PEFT, adapter("p_mag", m), "use_dora", "p_mag");
    m = A(), m.skip = "layers.1.self_attn.v_proj.lora_B";
    expect_reject("a missing lora_B", R_PEFT, adapter("p_noB", m), "lora_B.weight' is missing", "p_noB");
    m = A(), m.skip = "layers.1.self_attn.v_proj";
    expect_reject("a targeted module missing (with base)", R_PEFT_BASE, adapter("p_nomod", m), "layers.1.self_attn.v_proj",
                  "p_nomod");
    m = A(), m.rename_from = "lora_A.weight", m.rename_to = "lora_A.default.weight";
    expect_reject("model-side key names", R_PEFT, adapter("p_default", m), "not a LoRA factor", "p_default");
    m = A(), m.rename_from = "v_proj", m.rename_to = "k_proj";
    expect_reject("a module not targeted", R_PEFT, adapter("p_untargeted", m), "does not target", "p_untargeted");
    m = A(), m.dtype_i32 = 1;
    expect_reject("I32 factors", R_PEFT, adapter("p_i32", m), "I32", "p_i32");
    m = A(), m.a_in = 24;
    expect_reject("factors of another base (lora_A columns)", R_PEFT_BASE, adapter("p_other", m), "[4, 24]", "p_other");
    m.a_in = 0, m.from = "\"r\": 4", m.to = "\"r\": 8";
    expect_reject("rank against the factors", R_PEFT, adapter("p_rank", m), "[r, in]", "p_rank");
    m = A(), m.bin_only = 1;
    expect_reject("a pickled adapter_model.bin", R_PEFT, adapter("p_bin", m), "adapter_model.bin", "p_bin");
    {
        static struct model_config one;
        one = base;
        one.L = 1;
        g_peft_base = &one;
        expect_reject("a layer beyond the base model", R_PEFT_BASE, adapter("p_layers", A()), "layer 1", "p_layers");
        g_peft_base = &base;
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    const char *t = getenv("TEST_TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/malformed_test", t && *t ? t : "/tmp");
    struct io_err e;
    if (make_dirs(g_dir, &e) != 0) io_exit(&e);
    test_safetensors();
    test_config();
    test_gguf();
    sweep_gguf();
    test_peft();
    return test_finish("malformed_test");
}
