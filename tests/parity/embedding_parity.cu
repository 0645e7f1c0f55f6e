/* embedding_parity.cu — gpu/embedding (gather, deterministic scatter-add) against ref/embedding.
 *
 *   bazel test --config=gpu //tests/parity:embedding_parity
 *   embedding_parity [--seed=N] [--bench]
 *
 * Shapes: C ∈ {1, 7, 8, 33, 576, 2048} × N ∈ {1, 7, 300, 4096} × V ∈ {1, 5, 1000}, then the real
 * vocabularies 49152 and 128256 (narrow rows) and widths 2048, 4096: 16-byte and scalar gathers, runs of one id far longer than others (ids drawn from a
 * skewed distribution: half of the rows from 4 hot ids), every row the same id (V = 1), and the
 * real vocabularies; then the backward's edge cases (C 576, 2048, 4096 and a scalar width): one id
 * holding 90% of the rows, all ids distinct, all ids owned by one CTA of the backward (ids ≡ 7 mod
 * 264), N not a multiple of the scan chunk (2048) or the round (512). The contract has no ignored
 * or padding id (every id is in [0, V)). Ids from the printed seed (the shape line names the id
 * distribution); dtable starts from random fp32 (it accumulates).
 *
 * Tolerances:
 *  - forward: (a) exact — a copy.
 *  - backward: (a) exact. ref_embedding_backward adds each token's row in fp32 in increasing n,
 *    one add per token; gpu/embedding sums each id's rows in increasing n onto the old value in
 *    fp32 — the same additions in the same order for every element.
 *  - determinism: a second backward from the same start gives the same bits.
 *  - backward into a bf16 accumulator (GEMM_OUT_BF16) from bf16(dt0): (a) exact — bf16 of the fp32
 *    form's result from the widened bf16(dt0) (run on the GPU), and bf16 of ref_embedding_backward
 *    from the same widened start; rows of ids absent from ids bitwise unchanged; deterministic.
 *    The shapes reach every path of its kernel: one round (most CTAs), groups of whole ids (one
 *    owner, skewed), ids of more than 256 rows alone (one-hot, skewed, V ≤ 5), and in column
 *    blocks (C 1023 scalar, C 8192), and V beyond 1024 keys a CTA (V 600000: more CTAs).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/embedding.h"
#include "io/check.h"
#include "ref/bf16.h"
#include "ref/embedding.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;

/* How a case draws its ids. */
enum id_dist {
    IDS_SKEWED,    /* half of the rows from ids 0..3, the rest uniform */
    IDS_ONE_HOT,   /* 90% of the rows one id (V / 2): a run longer than a round of 512 positions */
    IDS_DISTINCT,  /* every id different (N ≤ V): no run longer than one row */
    IDS_ONE_OWNER, /* ids ≡ 7 (mod 264): every id owned by one CTA of the backward on a 132-SM GPU
                      (2 CTAs a SM), many runs a round and runs split across rounds */
};

static void draw_ids(std::vector<int32_t> &ids, int V, enum id_dist dist, struct rng *r) {
    const int N = (int)ids.size();
    if (dist == IDS_DISTINCT) { /* the first N of a random permutation of 0..V−1 */
        CHECK(N <= V, "distinct ids need N=%d <= V=%d", N, V);
        std::vector<int32_t> perm(V);
        for (int v = 0; v < V; v++) perm[v] = v;
        for (int n = 0; n < N; n++) {
            const int k = n + rng_int(r, V - n);
            const int32_t t = perm[n];
            perm[n] = perm[k], perm[k] = t;
            ids[n] = perm[n];
        }
        return;
    }
    for (int n = 0; n < N; n++) {
        if (dist == IDS_SKEWED)
            ids[n] = rng_int(r, 2) ? rng_int(r, V < 4 ? V : 4) : rng_int(r, V);
        else if (dist == IDS_ONE_HOT)
            ids[n] = rng_int(r, 10) ? V / 2 : rng_int(r, V);
        else {
            CHECK(V > 7, "one-owner ids need V=%d > 7", V);
            ids[n] = 7 + 264 * rng_int(r, (V - 8) / 264 + 1);
        }
    }
}

static const char *dist_name(enum id_dist d) {
    return d == IDS_SKEWED ? "skewed" : d == IDS_ONE_HOT ? "one-hot" : d == IDS_DISTINCT ? "distinct" : "one-owner";
}

static void run_case(int N, int C, int V, int id, enum id_dist dist = IDS_SKEWED) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C=%d V=%d ids=%s", N, C, V, dist_name(dist));
    const size_t nt = (size_t)V * C, nr = (size_t)N * C;
    std::vector<float> table(nt), dout(nr), dt0(nt);
    rng_fill_normal(&r, table.data(), (int64_t)nt, 0.0, 1.0);
    rng_fill_normal(&r, dout.data(), (int64_t)nr, 0.0, 1.0);
    rng_fill_normal(&r, dt0.data(), (int64_t)nt, 0.0, 1.0);
    for (float &x : table) x = bf16_round(x);
    for (float &x : dout) x = bf16_round(x);
    std::vector<int32_t> ids(N);
    draw_ids(ids, V, dist, &r);

    std::vector<float> out_r(nr), dt_r(dt0);
    ref_embedding_forward(out_r.data(), ids.data(), table.data(), N, V, C);
    ref_embedding_backward(dt_r.data(), dout.data(), ids.data(), N, V, C);

    std::vector<uint16_t> tb(nt), db(nr);
    for (size_t i = 0; i < nt; i++) tb[i] = bf16_from_float(table[i]);
    for (size_t i = 0; i < nr; i++) db[i] = bf16_from_float(dout[i]);
    struct dev_buf btab, bids, bout, bdout, bdt;
    dev_buf_alloc(&btab, "table", nt * 2, POISON_NONE, tb.data());
    dev_buf_alloc(&bids, "ids", (size_t)N * 4, POISON_NONE, ids.data());
    dev_buf_alloc(&bout, "out", nr * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdout, "dout", nr * 2, POISON_NONE, db.data());
    dev_buf_alloc(&bdt, "dtable", nt * 4, POISON_NONE, dt0.data());
    gpu_embedding_forward_bf16((uint16_t *)bout.data, (const int32_t *)bids.data, (const uint16_t *)btab.data, N, C, V,
                               g_stream);
    gpu_embedding_backward(bdt.data, GEMM_OUT_F32, (const uint16_t *)bdout.data, (const int32_t *)bids.data, N, C, V,
                           g_stream);
    std::vector<uint16_t> ob(nr);
    std::vector<float> out_g(nr), dt_g(nt), dt_again(nt);
    dev_buf_download(&bout, ob.data(), 1);
    dev_buf_download(&bdt, dt_g.data(), 0);
    for (size_t i = 0; i < nr; i++) out_g[i] = bf16_to_float(ob[i]);
    for (struct dev_buf *b : {&btab, &bids, &bdout}) {
        std::vector<unsigned char> tmp(b->nbytes);
        dev_buf_download(b, tmp.data(), 0);
    }

    struct cmp_case cc = {"embedding_forward", "out", shape, "bf16", seed};
    cmp_exact_f32(&cc, out_g.data(), out_r.data(), (int64_t)nr);
    cc.op = "embedding_backward";
    cc.what = "dtable";
    cc.dtype = "f32";
    cmp_exact_f32(&cc, dt_g.data(), dt_r.data(), (int64_t)nt);

    dev_buf_reset(&bdt, dt0.data());
    gpu_embedding_backward(bdt.data, GEMM_OUT_F32, (const uint16_t *)bdout.data, (const int32_t *)bids.data, N, C, V,
                           g_stream);
    dev_buf_download(&bdt, dt_again.data(), 0);
    cc.what = "dtable determinism";
    cmp_exact_bytes(&cc, dt_again.data(), dt_g.data(), nt * 4);

    /* bf16 accumulator from bf16(dt0): the fp32 form from the widened start, rounded once. */
    const std::vector<uint16_t> dt0b = bits_of(dt0);
    const std::vector<float> dt0w = floats_of(dt0b);
    std::vector<float> dt_widened(nt), dt_rw(dt0w);
    dev_buf_reset(&bdt, dt0w.data());
    gpu_embedding_backward(bdt.data, GEMM_OUT_F32, (const uint16_t *)bdout.data, (const int32_t *)bids.data, N, C, V,
                           g_stream);
    dev_buf_download(&bdt, dt_widened.data(), 0);
    ref_embedding_backward(dt_rw.data(), dout.data(), ids.data(), N, V, C);
    struct dev_buf bdtb; /* accumulates: starts from bf16(dt0), not poison; guarded */
    dev_buf_alloc(&bdtb, "dtable(bf16)", nt * 2, POISON_NONE, dt0b.data());
    gpu_embedding_backward(bdtb.data, GEMM_OUT_BF16, (const uint16_t *)bdout.data, (const int32_t *)bids.data, N, C,
                           V, g_stream);
    std::vector<uint16_t> dtb_g(nt), dtb_again(nt);
    dev_buf_download(&bdtb, dtb_g.data(), 0);
    cc.what = "dtable (bf16 accumulator) vs bf16(gpu fp32 form)";
    cc.dtype = "bf16";
    cmp_exact_bytes(&cc, dtb_g.data(), bits_of(dt_widened).data(), nt * 2);
    cc.what = "dtable (bf16 accumulator) vs bf16(ref)";
    cmp_exact_bytes(&cc, dtb_g.data(), bits_of(dt_rw).data(), nt * 2);
    std::vector<char> present(V, 0);
    for (int32_t v : ids) present[v] = 1;
    std::vector<uint16_t> untouched_g, untouched_0;
    for (int v = 0; v < V; v++)
        if (!present[v]) {
            untouched_g.insert(untouched_g.end(), dtb_g.begin() + (size_t)v * C, dtb_g.begin() + (size_t)(v + 1) * C);
            untouched_0.insert(untouched_0.end(), dt0b.begin() + (size_t)v * C, dt0b.begin() + (size_t)(v + 1) * C);
        }
    cc.what = "dtable (bf16 accumulator) rows of absent ids";
    cmp_exact_bytes(&cc, untouched_g.data(), untouched_0.data(), untouched_g.size() * 2);
    dev_buf_reset(&bdtb, dt0b.data());
    gpu_embedding_backward(bdtb.data, GEMM_OUT_BF16, (const uint16_t *)bdout.data, (const int32_t *)bids.data, N, C,
                           V, g_stream);
    dev_buf_download(&bdtb, dtb_again.data(), 0);
    cc.what = "dtable (bf16 accumulator) determinism";
    cmp_exact_bytes(&cc, dtb_again.data(), dtb_g.data(), nt * 2);
    for (struct dev_buf *b : {&btab, &bids, &bout, &bdout, &bdt, &bdtb}) dev_buf_free(b);
}

struct bench_ctx {
    int N, C, V, which;
    uint16_t *table, *out, *dout;
    int32_t *ids;
    float *dtable;
    uint16_t *dtable_b; /* the bf16 accumulator */
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    if (b->which == 0)
        gpu_embedding_forward_bf16(b->out, b->ids, b->table, b->N, b->C, b->V, s);
    else if (b->which == 1)
        gpu_embedding_backward(b->dtable, GEMM_OUT_F32, b->dout, b->ids, b->N, b->C, b->V, s);
    else
        gpu_embedding_backward(b->dtable_b, GEMM_OUT_BF16, b->dout, b->ids, b->N, b->C, b->V, s);
}

static void bench(double ceiling) {
    const int shapes[][3] = {{16384, 576, 49152}, {8192, 2048, 128256}, {8192, 4096, 128256}};
    for (auto &sh : shapes) {
        bench_ctx b;
        memset(&b, 0, sizeof b);
        b.N = sh[0], b.C = sh[1], b.V = sh[2];
        const size_t nt = (size_t)b.V * b.C, nr = (size_t)b.N * b.C;
        std::vector<int32_t> ids(b.N);
        struct rng r;
        rng_init(&r, g_seed);
        for (int32_t &x : ids) x = rng_int(&r, b.V);
        CUDA_CHECK(cudaMalloc(&b.table, nt * 2));
        CUDA_CHECK(cudaMalloc(&b.dtable, nt * 4));
        CUDA_CHECK(cudaMalloc(&b.dtable_b, nt * 2));
        CUDA_CHECK(cudaMalloc(&b.out, nr * 2));
        CUDA_CHECK(cudaMalloc(&b.dout, nr * 2));
        CUDA_CHECK(cudaMalloc(&b.ids, (size_t)b.N * 4));
        CUDA_CHECK(cudaMemset(b.table, 0x3F, nt * 2));
        CUDA_CHECK(cudaMemset(b.dout, 0x3F, nr * 2));
        CUDA_CHECK(cudaMemset(b.dtable, 0, nt * 4));
        CUDA_CHECK(cudaMemset(b.dtable_b, 0, nt * 2));
        CUDA_CHECK(cudaMemcpy(b.ids, ids.data(), (size_t)b.N * 4, cudaMemcpyHostToDevice));
        char shape[64];
        snprintf(shape, sizeof shape, "N=%d C=%d V=%d", b.N, b.C, b.V);
        b.which = 0;
        /* gather: read N rows of the table, write N rows */
        bench_json("embedding_forward", shape, 4.0 * nr + 4.0 * b.N, 0, bench_time(bench_call, &b, g_stream, 5, 25, 10),
                   ceiling);
        b.which = 1;
        /* scatter-add: read dout (bf16) and, for the touched rows, read+write dtable (fp32) */
        bench_json("embedding_backward", shape, 2.0 * nr + 8.0 * nr + 4.0 * b.N, 0,
                   bench_time(bench_call, &b, g_stream, 5, 25, 10), ceiling);
        b.which = 2;
        /* the same with a bf16 dtable: 4 bytes per touched element instead of 8 */
        bench_json("embedding_backward_bf16", shape, 2.0 * nr + 4.0 * nr + 4.0 * b.N, 0,
                   bench_time(bench_call, &b, g_stream, 5, 25, 10), ceiling);
        for (void *p : {(void *)b.table, (void *)b.dtable, (void *)b.dtable_b, (void *)b.out, (void *)b.dout,
                        (void *)b.ids})
            CUDA_CHECK(cudaFree(p));
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261126);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    const int Cs[] = {1, 7, 8, 33, 576, 2048};
    const int Ns[] = {1, 7, 300, 4096};
    const int Vs[] = {1, 5, 1000};
    int id = 0;
    for (int C : Cs)
        for (int N : Ns)
            for (int V : Vs) run_case(N, C, V, id++);
    /* real vocabularies (17-bit ids for the sort) with narrow rows to keep the host tables small,
     * and real widths with a smaller vocabulary */
    run_case(512, 64, 49152, id++);
    run_case(300, 8, 128256, id++);
    run_case(64, 2048, 5000, id++);
    run_case(33, 4096, 3000, id++);
    /* the backward's edge cases: one id holding most rows (runs across rounds of 512 owned
     * positions), all ids distinct, all ids owned by one CTA; N not a multiple of the 2048-position
     * scan chunk or the 512-position round; C 576 (72 16-byte vectors a row), 2048, 4096, scalar */
    run_case(5000, 576, 1000, id++, IDS_ONE_HOT);
    run_case(2100, 2048, 300, id++, IDS_ONE_HOT);
    run_case(1500, 4096, 50, id++, IDS_ONE_HOT);
    run_case(5000, 7, 1000, id++, IDS_ONE_HOT);
    run_case(4097, 576, 8000, id++, IDS_DISTINCT);
    run_case(2049, 2048, 3000, id++, IDS_DISTINCT);
    run_case(1000, 4096, 1200, id++, IDS_DISTINCT);
    run_case(513, 33, 600, id++, IDS_DISTINCT);
    run_case(3000, 64, 128256, id++, IDS_ONE_OWNER);
    run_case(2000, 576, 20000, id++, IDS_ONE_OWNER);
    run_case(1100, 4096, 6000, id++, IDS_ONE_OWNER);
    /* the bf16 accumulator's id-alone path over several blocks of 512 column vectors (scalar C 1023,
     * 16-byte C 8192), and a vocabulary of more than 1024 keys a CTA at 2 CTAs a SM */
    run_case(600, 1023, 50, id++, IDS_ONE_HOT);
    run_case(700, 8192, 20, id++, IDS_ONE_HOT);
    run_case(3000, 1, 600000, id++);
    const int rc = test_finish("embedding_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
