/* nf4_parity.cu — gpu/nf4 dequantization against the NF4 oracle, bit for bit.
 *
 *   bazel test --config=gpu //tests/parity:nf4_parity
 *   nf4_parity [--seed=N] [--bench]
 *
 * Inputs are random from the printed seed: packed code bytes (every code value occurs), first-
 * level absmax as 8-bit codes into a random sorted 256-entry map with random second-level absmax
 * and offset (nested), or as random fp32 (not nested). n sweeps the vector width and block edges
 * (1, 15, 16, 17, 31..33, 63..65, 1000, odd n with a padded last byte) and real weights
 * (Llama-3.2-1B o_proj 2048², MLP 8192·2048; SmolLM2 576·1536); blocksize 32, 64 (the default),
 * 128, 4096; nested blocksize 256 and a ragged one; aligned and misaligned pointers (scalar path).
 * The vector kernel's layout (gpu/nf4_layout.h) adds n around its 1024-element warp tiles and
 * 8-element chunks (1023 … 20003), blocksizes 1024 and 2048, nested blocksizes 1, 3, 5, and codes
 * and output offsets on both sides of its alignment rule (codes 4 bytes, out 16 bytes).
 * Special values: a zero absmax block (0·code), an Inf absmax (Inf·0 = NaN for code 7) and a NaN
 * offset must give the same bits on both sides.
 *
 * gpu_nf4_dequantize_rows_bf16 (rows of cols at a stride ld, a folded LoRA group's padded base):
 * every row the contiguous output's bits, every padding element still poison; real weights and
 * their padded strides on the vector kernel, blocks spanning and splitting rows, ld == cols, and
 * cols or ld off the multiple of 8 (scalar kernel); nested and fp32 absmax.
 *
 * gpu_nf4_dequantize_e4m3 (straight to FP8 codes) on every case too: each code the reference's
 * E4M3 (SATFINITE) of the bf16 value times the scale, bit for bit; scales that saturate, that map
 * the largest value to 448, and a small one; the bytes before an offset output untouched.
 *
 * Tolerance: (a) exact. Dequantization is two fp32 products, one fp32 add and one RNE to bf16 —
 * deterministic IEEE operations, so every bf16 bit must agree (NaN matches any NaN).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/nf4.h"
#include "ref/bf16.h"
#include "ref/fp8.h"
#include "ref/nf4.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;

/* One fp32 product, rounded once (the cast's __fmul_rn). */
static float mul_once(float a, float b) {
    volatile float r = a * b;
    return r;
}
static cudaStream_t g_stream;

struct nf4_host {
    int64_t n;
    int blocksize, nested_blocksize, nested;
    std::vector<uint8_t> codes, absmax_q;
    std::vector<float> absmax_f32, nested_absmax, nested_code, quant_map;
    float offset;
};

static void make_case(nf4_host &c, int64_t n, int blocksize, int nested, int nested_bs, uint64_t seed, int special) {
    struct rng r;
    rng_init(&r, seed);
    c.n = n, c.blocksize = blocksize, c.nested = nested, c.nested_blocksize = nested_bs;
    const int64_t nb = (n + blocksize - 1) / blocksize;
    c.codes.resize((size_t)((n + 1) / 2));
    for (auto &b : c.codes) b = (uint8_t)rng_int(&r, 256);
    if (n % 2) c.codes.back() &= 0xF0; /* the padding code of an odd n is 0 */
    c.quant_map.assign(nf4_table, nf4_table + 16);
    if (nested) {
        const int64_t nb2 = (nb + nested_bs - 1) / nested_bs;
        c.absmax_q.resize((size_t)nb);
        for (auto &b : c.absmax_q) b = (uint8_t)rng_int(&r, 256);
        c.nested_code.resize(256);
        rng_fill_uniform(&r, c.nested_code.data(), 256, -1.0, 1.0);
        std::sort(c.nested_code.begin(), c.nested_code.end());
        c.nested_absmax.resize((size_t)nb2);
        rng_fill_uniform(&r, c.nested_absmax.data(), nb2, 0.01, 0.2);
        c.offset = (float)rng_range(&r, 0.01, 0.1);
        if (special == 1) c.nested_absmax[0] = INFINITY; /* ±Inf absmax in the first 256 blocks, NaN for code 7 */
        if (special == 2) c.offset = NAN;                 /* every absmax NaN */
    } else {
        c.absmax_f32.resize((size_t)nb);
        rng_fill_uniform(&r, c.absmax_f32.data(), nb, 0.001, 2.0);
        if (special) {
            c.absmax_f32[0] = 0.0f;
            if (nb > 1) c.absmax_f32[1] = INFINITY;
            if (nb > 2) c.absmax_f32[2] = NAN;
        }
    }
}

/* The reference: nf4_double_dequantize rebuilds the fp32 absmax when nested, nf4_dequantize
 * forms the fp32 products and rounds them to bf16. */
static void oracle(const nf4_host &c, std::vector<float> &out) {
    const int64_t nb = nf4_n_blocks(c.n, c.blocksize);
    std::vector<float> absmax(c.nested ? (size_t)nb : 0);
    if (c.nested)
        nf4_double_dequantize(absmax.data(), c.absmax_q.data(), c.nested_absmax.data(), c.offset, c.nested_code.data(),
                              nb, c.nested_blocksize);
    out.resize((size_t)c.n);
    nf4_dequantize(out.data(), c.codes.data(), c.nested ? absmax.data() : c.absmax_f32.data(), c.n, c.blocksize,
                   ACT_BF16);
}

/* A case's inputs on the device, as the tensor gpu/nf4.h reads; the codes start codes_off bytes
 * into their buffer. */
struct nf4_dev {
    struct dev_buf codes, quant_map, absmax_q, absmax_f32, nested_absmax, nested_code;
    struct gpu_nf4_tensor t;
};

static void upload_case(nf4_dev &d, const nf4_host &c, int codes_off) {
    std::vector<uint8_t> codes_img(c.codes.size() + (size_t)codes_off, 0);
    memcpy(codes_img.data() + codes_off, c.codes.data(), c.codes.size());
    dev_buf_alloc(&d.codes, "codes", codes_img.size(), POISON_NONE, codes_img.data());
    dev_buf_alloc(&d.quant_map, "quant_map", 64, POISON_NONE, c.quant_map.data());
    memset(&d.t, 0, sizeof d.t);
    d.t.codes = (const uint8_t *)d.codes.data + codes_off;
    d.t.quant_map = (const float *)d.quant_map.data;
    d.t.n = c.n, d.t.blocksize = c.blocksize, d.t.nested_blocksize = c.nested_blocksize;
    if (c.nested) {
        dev_buf_alloc(&d.absmax_q, "absmax_q", c.absmax_q.size(), POISON_NONE, c.absmax_q.data());
        dev_buf_alloc(&d.nested_absmax, "nested_absmax", c.nested_absmax.size() * 4, POISON_NONE,
                      c.nested_absmax.data());
        dev_buf_alloc(&d.nested_code, "nested_code", 256 * 4, POISON_NONE, c.nested_code.data());
        d.t.absmax_q = (const uint8_t *)d.absmax_q.data, d.t.nested_absmax = (const float *)d.nested_absmax.data;
        d.t.nested_code = (const float *)d.nested_code.data, d.t.nested_offset = c.offset;
    } else {
        dev_buf_alloc(&d.absmax_f32, "absmax", c.absmax_f32.size() * 4, POISON_NONE, c.absmax_f32.data());
        d.t.absmax_f32 = (const float *)d.absmax_f32.data;
    }
}

static void free_case(nf4_dev &d) {
    for (struct dev_buf *b : {&d.codes, &d.quant_map}) dev_buf_free(b);
    if (d.t.absmax_q)
        for (struct dev_buf *b : {&d.absmax_q, &d.nested_absmax, &d.nested_code}) dev_buf_free(b);
    else
        dev_buf_free(&d.absmax_f32);
}

/* codes_off: the codes start that many bytes into their buffer; out_off: the output that many
 * elements into its (poisoned) buffer. (1, 1) misaligns both; the vector kernel needs codes 4-byte
 * and out 16-byte aligned (out_off a multiple of 8), any other pair takes the scalar kernel. */
static void run_case(int64_t n, int blocksize, int nested, int nested_bs, int codes_off, int out_off, int special,
                     int id) {
    nf4_host c;
    const uint64_t seed = g_seed * 7919u + (uint64_t)id;
    make_case(c, n, blocksize, nested, nested_bs, seed, special);
    char shape[128];
    char offs[48] = "";
    if (codes_off || out_off) snprintf(offs, sizeof offs, " codes+%dB out+%d", codes_off, out_off);
    snprintf(shape, sizeof shape, "n=%lld blocksize=%d %s nested_bs=%d%s%s", (long long)n, blocksize,
             nested ? "nested" : "fp32-absmax", nested_bs, offs, special ? " special" : "");
    std::vector<float> wantf;
    oracle(c, wantf);

    const size_t moff = (size_t)out_off;
    nf4_dev d;
    upload_case(d, c, codes_off);
    const struct gpu_nf4_tensor &t = d.t;
    /* out: poisoned; with out_off the elements before the output stay poison */
    struct dev_buf bout;
    dev_buf_alloc(&bout, "out", (size_t)(n + moff) * 2, POISON_BF16, nullptr);
    gpu_nf4_dequantize_bf16((uint16_t *)bout.data + moff, &t, g_stream);
    std::vector<uint16_t> got_img((size_t)(n + moff));
    dev_buf_download(&bout, got_img.data(), out_off ? 0 : 1);
    for (size_t i = 0; i < moff; i++) EXPECT(got_img[i] == POISON_BF16_BITS, "nf4 %s: wrote before the output", shape);
    std::vector<float> got((size_t)n);
    for (int64_t i = 0; i < n; i++) got[i] = bf16_to_float(got_img[i + moff]);
    struct cmp_case cc = {"nf4_dequantize", "out", shape, "bf16", seed};
    cmp_exact_f32(&cc, got.data(), wantf.data(), n);

    /* Straight to E4M3 under a per-tensor scale: the reference's code of each bf16 value times the
     * scale (ref/fp8.h, SATFINITE); scales that saturate the largest values, that map the largest
     * to 448 exactly, and a small one. NaN codes match any NaN code (compared as values). */
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(wantf[i]) && fabsf(wantf[i]) > amax) amax = fabsf(wantf[i]);
    const float base = amax > 0.0f ? 448.0f / amax : 1.0f;
    const float scale = id % 3 == 0 ? 1.5f * base : id % 3 == 1 ? base : 0.25f;
    struct dev_buf bscale, bout8;
    dev_buf_alloc(&bscale, "scale", 4, POISON_NONE, &scale);
    dev_buf_alloc(&bout8, "out8", (size_t)(n + moff), POISON_NONE, nullptr);
    CUDA_CHECK(cudaMemset(bout8.data, 0xA5, (size_t)(n + moff)));
    gpu_nf4_dequantize_e4m3((uint8_t *)bout8.data + moff, &t, (const float *)bscale.data, g_stream);
    std::vector<uint8_t> got8((size_t)(n + moff));
    dev_buf_download(&bout8, got8.data(), 0);
    for (size_t i = 0; i < moff; i++) EXPECT(got8[i] == 0xA5, "nf4 → E4M3 %s: wrote before the output", shape);
    std::vector<float> g8((size_t)n), w8((size_t)n);
    int64_t bad_codes = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t want = fp8_from_float(mul_once(wantf[i], scale), FP8_E4M3, FP8_SATFINITE);
        g8[i] = fp8_to_float(got8[i + moff], FP8_E4M3);
        w8[i] = fp8_to_float(want, FP8_E4M3);
        bad_codes += !fp8_is_nan(want, FP8_E4M3) && got8[i + moff] != want;
    }
    struct cmp_case c8 = {"nf4_dequantize_e4m3", "codes", shape, "e4m3", seed};
    cmp_exact_f32(&c8, g8.data(), w8.data(), n);
    EXPECT(bad_codes == 0, "nf4 → E4M3 %s: %lld codes differ in their bits", shape, (long long)bad_codes);
    for (struct dev_buf *b : {&bscale, &bout8, &bout}) dev_buf_free(b);
    free_case(d);
}

/* gpu_nf4_dequantize_rows_bf16: the n = rows·cols values as rows of cols at stride ld in a
 * poisoned buffer of rows·ld elements. The contiguous dequantization of the same tensor is checked
 * against the oracle; then every row's cols elements must be its bits, and every padding element
 * (columns cols .. ld − 1 of every row, the last included) must still hold the poison. */
static void run_rows_case(int64_t rows, int64_t cols, int64_t ld, int blocksize, int nested, int id) {
    nf4_host c;
    const uint64_t seed = g_seed * 7919u + (uint64_t)id;
    const int64_t n = rows * cols;
    make_case(c, n, blocksize, nested, 256, seed, 0);
    char shape[128];
    snprintf(shape, sizeof shape, "rows=%lld cols=%lld ld=%lld blocksize=%d %s", (long long)rows, (long long)cols,
             (long long)ld, blocksize, nested ? "nested" : "fp32-absmax");
    std::vector<float> wantf;
    oracle(c, wantf);

    nf4_dev d;
    upload_case(d, c, 0);
    struct dev_buf bflat, brows;
    dev_buf_alloc(&bflat, "out", (size_t)n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&brows, "out_rows", (size_t)(rows * ld) * 2, POISON_BF16, nullptr);
    gpu_nf4_dequantize_bf16((uint16_t *)bflat.data, &d.t, g_stream);
    gpu_nf4_dequantize_rows_bf16((uint16_t *)brows.data, cols, ld, &d.t, g_stream);
    std::vector<uint16_t> flat((size_t)n), img((size_t)(rows * ld)), packed((size_t)n);
    dev_buf_download(&bflat, flat.data(), 1);
    dev_buf_download(&brows, img.data(), 0); /* the padding must stay poisoned: checked below */
    const std::vector<float> got = floats_of(flat);
    struct cmp_case cc = {"nf4_dequantize", "out", shape, "bf16", seed};
    cmp_exact_f32(&cc, got.data(), wantf.data(), n);

    int64_t pad_written = 0, first = -1;
    for (int64_t r = 0; r < rows; r++) {
        memcpy(packed.data() + r * cols, img.data() + r * ld, (size_t)cols * 2);
        for (int64_t j = r * ld + cols; j < (r + 1) * ld; j++)
            if (img[(size_t)j] != POISON_BF16_BITS) {
                if (first < 0) first = j;
                pad_written++;
            }
    }
    struct cmp_case cr = {"nf4_dequantize_rows", "out_rows", shape, "bf16", seed};
    cmp_exact_bytes(&cr, packed.data(), flat.data(), (size_t)n * 2);
    EXPECT(pad_written == 0, "nf4 rows %s: %lld padding elements written, the first at row %lld column %lld", shape,
           (long long)pad_written, (long long)(first / ld), (long long)(first % ld));
    for (struct dev_buf *b : {&bflat, &brows}) dev_buf_free(b);
    free_case(d);
}

struct bench_ctx {
    uint16_t *out;
    struct gpu_nf4_tensor t;
    const float *scale; /* non-NULL: straight to E4M3 */
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    if (b->scale) gpu_nf4_dequantize_e4m3(reinterpret_cast<uint8_t *>(b->out), &b->t, b->scale, s);
    else gpu_nf4_dequantize_bf16(b->out, &b->t, s);
}

/* One timed shape; returns its % of the copy ceiling. */
static double bench_one(int64_t rows, int64_t cols, int nested, double ceiling) {
    const int64_t n = rows * cols;
    nf4_host c;
    make_case(c, n, 64, nested, 256, g_seed, 0);
    bench_ctx b;
    memset(&b, 0, sizeof b);
    uint8_t *codes, *aq = nullptr;
    float *na = nullptr, *nc = nullptr, *af = nullptr, *map;
    CUDA_CHECK(cudaMalloc(&codes, c.codes.size()));
    CUDA_CHECK(cudaMalloc(&map, 64));
    CUDA_CHECK(cudaMalloc(&b.out, (size_t)n * 2));
    CUDA_CHECK(cudaMemcpy(codes, c.codes.data(), c.codes.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(map, c.quant_map.data(), 64, cudaMemcpyHostToDevice));
    if (nested) {
        CUDA_CHECK(cudaMalloc(&aq, c.absmax_q.size()));
        CUDA_CHECK(cudaMalloc(&na, c.nested_absmax.size() * 4));
        CUDA_CHECK(cudaMalloc(&nc, 256 * 4));
        CUDA_CHECK(cudaMemcpy(aq, c.absmax_q.data(), c.absmax_q.size(), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(na, c.nested_absmax.data(), c.nested_absmax.size() * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(nc, c.nested_code.data(), 256 * 4, cudaMemcpyHostToDevice));
        b.t.absmax_q = aq, b.t.nested_absmax = na, b.t.nested_code = nc, b.t.nested_offset = c.offset;
    } else {
        CUDA_CHECK(cudaMalloc(&af, c.absmax_f32.size() * 4));
        CUDA_CHECK(cudaMemcpy(af, c.absmax_f32.data(), c.absmax_f32.size() * 4, cudaMemcpyHostToDevice));
        b.t.absmax_f32 = af;
    }
    b.t.codes = codes, b.t.quant_map = map, b.t.n = n, b.t.blocksize = 64, b.t.nested_blocksize = 256;
    char shape[64];
    snprintf(shape, sizeof shape, "%lldx%lld blocksize=64 %s", (long long)rows, (long long)cols,
             nested ? "nested" : "fp32-absmax");
    /* bytes that must move: codes n/2, absmax n/64 (8-bit codes) or 4n/64 (fp32), output 2n */
    const double bytes = (double)n / 2 + (nested ? 1.0 : 4.0) * (double)n / 64 + 2.0 * n;
    const struct bench_result r = bench_time(bench_call, &b, g_stream, 5, 25, 10);
    bench_json("nf4_dequantize", shape, bytes, 0, r, ceiling);
    { /* straight to E4M3: the same codes and absmax in, one byte out an element */
        float *sc, one = 0.5f;
        CUDA_CHECK(cudaMalloc(&sc, 4));
        CUDA_CHECK(cudaMemcpy(sc, &one, 4, cudaMemcpyHostToDevice));
        b.scale = sc;
        const double bytes8 = bytes - (double)n;
        bench_json("nf4_dequantize_e4m3", shape, bytes8, 0, bench_time(bench_call, &b, g_stream, 5, 25, 10), ceiling);
        b.scale = nullptr;
        CUDA_CHECK(cudaFree(sc));
    }
    for (void *p : {(void *)codes, (void *)aq, (void *)na, (void *)nc, (void *)af, (void *)map, (void *)b.out})
        if (p) CUDA_CHECK(cudaFree(p));
    return 100.0 * bytes / (r.median_ms * 1e-3) / 1e9 / ceiling;
}

/* The nested (QLoRA default) shapes, then fp32 absmax at the two largest; a summary line last
 * against PERFORMANCE.md's 80% of copy. */
static void bench(double ceiling) {
    const int64_t sizes[][3] = {{2048, 2048, 1}, {8192, 2048, 1}, {16384, 2048, 1}, {14336, 4096, 1},
                                {8192, 2048, 0}, {14336, 4096, 0}};
    char summary[512];
    int len = snprintf(summary, sizeof summary, "nf4 bench: %% of copy (target 80):");
    for (auto &sz : sizes) {
        const double pct = bench_one(sz[0], sz[1], (int)sz[2], ceiling);
        if (len < (int)sizeof summary)
            len += snprintf(summary + len, sizeof summary - (size_t)len, " %lldx%lld%s %.1f", (long long)sz[0],
                            (long long)sz[1], sz[2] ? "" : "(fp32)", pct);
    }
    printf("%s\n", summary);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261124);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    const int64_t ns[] = {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, 4097, 576 * 1536};
    const int bss[] = {32, 64, 128, 4096};
    int id = 0;
    for (int64_t n : ns)
        for (int bs : bss)
            for (int nested = 0; nested < 2; nested++) run_case(n, bs, nested, 256, 0, 0, 0, id++);
    for (int nested = 0; nested < 2; nested++) {
        run_case(2048 * 2048, 64, nested, 256, 0, 0, 0, id++);
        run_case(8192 * 2048, 64, nested, 256, 0, 0, 0, id++);
        run_case(1000, 64, nested, 256, 1, 1, 0, id++);
        run_case(65 * 64 + 3, 64, nested, 7, 1, 1, 0, id++);
        run_case(64 * 600, 64, nested, 256, 0, 0, 1, id++);
        run_case(64 * 3, 64, nested, 2, 0, 0, 1, id++);
        if (nested) run_case(64 * 5 + 7, 64, nested, 256, 0, 0, 2, id++);
    }
    /* The vector kernel's layout (gpu/nf4_layout.h): one warp a tile of 1024 elements, chunks of
     * 8 (one code word, one 16-byte store), lane l decoding block tile_first + l. n around the tile
     * and chunk edges (a partial last tile, a ragged chunk, odd n), blocksizes with 32, 16, 1 and
     * part of one block per tile. */
    const int64_t tile_ns[] = {1023, 1024, 1025, 1031, 1032, 2047, 2049, 3 * 1024 + 100, 9 * 1024 + 8, 20003};
    for (int64_t n : tile_ns)
        for (int bs : {32, 64, 1024, 2048})
            for (int nested = 0; nested < 2; nested++) run_case(n, bs, nested, 256, 0, 0, 0, id++);
    /* ragged nested blocks (the 32-bit division) crossing tiles */
    for (int nbs : {1, 3, 5}) {
        run_case(5000, 32, 1, nbs, 0, 0, 0, id++);
        run_case(70005, 64, 1, nbs, 0, 0, 0, id++);
    }
    /* alignments: codes 4-byte (vector) or 2-byte (scalar); out 16-byte at an offset (vector) or
     * 8-byte (scalar) */
    const int offs[][2] = {{4, 0}, {8, 8}, {4, 8}, {2, 0}, {0, 4}, {0, 8}};
    for (auto &o : offs)
        for (int nested = 0; nested < 2; nested++)
            for (int64_t n : {(int64_t)1000, (int64_t)4096 + 3}) run_case(n, 64, nested, 256, o[0], o[1], 0, id++);
    /* special values at blocksize 32 (blocks 0..2 decoded by lanes 0..2, shuffled to their
     * chunks): zero, Inf, NaN fp32 absmax; nested blocksize 1, an Inf second-level absmax of block 0 */
    run_case(3000, 32, 0, 256, 0, 0, 1, id++);
    run_case(3000, 32, 1, 1, 0, 0, 1, id++);
    /* Rows at a stride (a folded group's padded base, ld = C_in + n·R, here R = 16): SmolLM2's q,
     * k/v (n = 3) and gate/up (n = 2) and Llama-3.2-1B's q and k/v weights, (C_out, C_in), on the
     * vector kernel (cols and ld multiples of 8); blocks of 4096 spanning rows and of 32 splitting
     * them; ld == cols (no padding); cols or ld not a multiple of 8, and an odd n, on the scalar
     * kernel. */
    const int64_t row_cases[][4] = {{576, 576, 624, 64},   {192, 576, 624, 64}, {2048, 2048, 2096, 64},
                                    {512, 2048, 2096, 64}, {1536, 576, 608, 64}, {576, 576, 624, 4096},
                                    {96, 72, 80, 32},      {64, 576, 576, 64},  {40, 72, 75, 64},
                                    {37, 64, 69, 64},      {50, 60, 64, 128},   {33, 45, 48, 32}};
    for (auto &rw : row_cases)
        for (int nested = 0; nested < 2; nested++) run_rows_case(rw[0], rw[1], rw[2], (int)rw[3], nested, id++);
    const int rc = test_finish("nf4_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
