/* gemm.cu — the cuBLASLt wrapper of gpu/gemm.h: row-major products, cached plans, one workspace.
 *
 * Strategy: cuBLASLt is column-major, refine is row-major. A row-major (m, n) matrix with row
 * stride ldd is the column-major (n, m) matrix with the same ld, so D = op(A)·op(B) is computed
 * as the column-major product Dᵀ = op(B)ᵀ·op(A)ᵀ: cuBLASLt's "A" is our B and its "B" is our A,
 * each with the same transpose flag (a row-major (k, n) B seen column-major is already op(B)ᵀ),
 * and cuBLASLt's m, n are our n, m. The bias epilogue adds a vector along cuBLASLt's rows, which
 * are our columns: bias (n), as F.linear wants.
 *
 * Plans: a plan holds the matmul descriptor, the four layouts and the heuristic's first
 * algorithm for one key (struct plan_key). They live in an open-addressing hash table of
 * 2·GEMM_MAX_PLANS slots inside the context; a lookup hashes the key (FNV-1a over its bytes) and
 * probes linearly. A hit costs a hash, a memcmp and, with a bias, one descriptor attribute
 * write (the bias pointer); nothing is allocated.
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:gemm_parity
 *                     (binary) gemm_parity --bench   (% of a direct cuBLASLt call, TFLOP/s)
 */
#include "gpu/gemm.h"

#include <string.h>

#include <cuda_bf16.h>

#include "gpu/cuda_check.h"
#include "io/check.h"

namespace {

struct plan_key {
    int32_t m, n, k, batch;
    int32_t op_a, op_b, d_type, beta, has_bias;
    int32_t align_a, align_b, align_d, align_bias; /* bytes: a power of two, 2 to 256 */
    int64_t lda, ldb, ldd, stride_a, stride_b, stride_d;
};

struct plan {
    int used;
    plan_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld; /* cuBLASLt's A (our B), B (our A), C = D */
    cublasLtMatmulAlgo_t algo;
    size_t workspace_needed;
};

constexpr int kSlots = 2 * GEMM_MAX_PLANS;

int align_class(const void *p) {
    const uintptr_t u = (uintptr_t)p;
    int a = 256;
    while (a > 1 && (u % (uintptr_t)a) != 0) a /= 2;
    return a;
}

uint64_t hash_key(const plan_key &k) {
    const unsigned char *b = reinterpret_cast<const unsigned char *>(&k);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof k; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

}  // namespace

struct gpu_gemm {
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
    int n_plans;
    plan slots[kSlots];
};

namespace {

plan_key make_key(const gemm_args *p) {
    plan_key k;
    memset(&k, 0, sizeof k); /* padding takes part in the hash and the memcmp */
    k.m = p->m, k.n = p->n, k.k = p->k, k.batch = p->batch;
    k.op_a = p->op_a, k.op_b = p->op_b, k.d_type = p->d_type, k.beta = p->beta;
    k.has_bias = p->bias != nullptr;
    k.align_a = align_class(p->a), k.align_b = align_class(p->b), k.align_d = align_class(p->d);
    k.align_bias = p->bias ? align_class(p->bias) : 0;
    k.lda = p->lda, k.ldb = p->ldb, k.ldd = p->ldd;
    if (p->batch > 1) k.stride_a = p->stride_a, k.stride_b = p->stride_b, k.stride_d = p->stride_d;
    return k;
}

void check_args(const gemm_args *p) {
    CHECK(p->m >= 1 && p->n >= 1 && p->k >= 1 && p->batch >= 1, "gemm m=%d n=%d k=%d batch=%d must be >= 1", p->m,
          p->n, p->k, p->batch);
    CHECK(p->a != nullptr && p->b != nullptr && p->d != nullptr, "gemm: NULL operand");
    const int64_t a_row = p->op_a == GEMM_NO_TRANS ? p->k : p->m;
    const int64_t b_row = p->op_b == GEMM_NO_TRANS ? p->n : p->k;
    CHECK(p->lda >= a_row, "gemm lda=%lld < row length %lld", (long long)p->lda, (long long)a_row);
    CHECK(p->ldb >= b_row, "gemm ldb=%lld < row length %lld", (long long)p->ldb, (long long)b_row);
    CHECK(p->ldd >= p->n, "gemm ldd=%lld < n=%d", (long long)p->ldd, p->n);
    CHECK(p->bias == nullptr || p->d_type == GEMM_OUT_BF16, "gemm: a bias needs a bf16 output");
    CHECK((p->op_a == GEMM_NO_TRANS || p->op_a == GEMM_TRANS) && (p->op_b == GEMM_NO_TRANS || p->op_b == GEMM_TRANS),
          "gemm: bad transpose flag %d/%d", (int)p->op_a, (int)p->op_b);
}

void layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int batch,
            int64_t stride) {
    CUDA_CHECK(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t bc = batch;
        CUDA_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
        CUDA_CHECK(
            cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
}

void build_plan(struct gpu_gemm *g, plan *pl, const plan_key &key, const gemm_args *p) {
    pl->key = key;
    CUDA_CHECK(cublasLtMatmulDescCreate(&pl->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    /* cuBLASLt's A is our B and its B is our A, transposes carried over (file comment). */
    const cublasOperation_t ta = p->op_b == GEMM_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = p->op_a == GEMM_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUDA_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUDA_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (p->bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        const int32_t bt = CUDA_R_16BF;
        CUDA_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        CUDA_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        CUDA_CHECK(
            cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias, sizeof p->bias));
    }
    /* Column-major shapes: A_l is (n, k) after its op, B_l (k, m), D_l (n, m). */
    if (ta == CUBLAS_OP_N)
        layout(&pl->la, CUDA_R_16BF, p->n, p->k, p->ldb, p->batch, p->stride_b);
    else
        layout(&pl->la, CUDA_R_16BF, p->k, p->n, p->ldb, p->batch, p->stride_b);
    if (tb == CUBLAS_OP_N)
        layout(&pl->lb, CUDA_R_16BF, p->k, p->m, p->lda, p->batch, p->stride_a);
    else
        layout(&pl->lb, CUDA_R_16BF, p->m, p->k, p->lda, p->batch, p->stride_a);
    const cudaDataType_t dt = p->d_type == GEMM_OUT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    layout(&pl->ld, dt, p->n, p->m, p->ldd, p->batch, p->stride_d);

    cublasLtMatmulPreference_t pref;
    CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = g->workspace_bytes;
    CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const uint32_t al_a = (uint32_t)key.align_b, al_b = (uint32_t)key.align_a, al_d = (uint32_t)key.align_d;
    CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
    CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
    /* Split-K partial sums only in the compute type (fp32) and never in place: a reduction in the
     * output type would round each partial to bf16 (seen on the H100 as 8-ulp errors in small-N,
     * long-K products), and the in-place scheme adds partials in the output type too. */
    const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                                    sizeof reduction));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CUDA_CHECK(cublasLtMatmulAlgoGetHeuristic(g->handle, pl->desc, pl->la, pl->lb, pl->ld, pl->ld, pref, 1, &res, &found));
    CUDA_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CHECK(found >= 1 && res.state == CUBLAS_STATUS_SUCCESS,
          "cuBLASLt has no algorithm for m=%d n=%d k=%d batch=%d op_a=%d op_b=%d lda=%lld ldb=%lld ldd=%lld "
          "d_type=%d bias=%d beta=%d alignments a=%d b=%d d=%d",
          p->m, p->n, p->k, p->batch, (int)p->op_a, (int)p->op_b, (long long)p->lda, (long long)p->ldb,
          (long long)p->ldd, (int)p->d_type, key.has_bias, (int)p->beta, key.align_a, key.align_b, key.align_d);
    pl->algo = res.algo;
    pl->workspace_needed = res.workspaceSize;
    pl->used = 1;
    g->n_plans++;
}

plan *find_plan(struct gpu_gemm *g, const gemm_args *p) {
    check_args(p);
    const plan_key key = make_key(p);
    size_t i = (size_t)(hash_key(key) % kSlots);
    for (int probe = 0; probe < kSlots; probe++, i = (i + 1) % kSlots) {
        plan *pl = &g->slots[i];
        if (!pl->used) {
            CHECK(g->n_plans < GEMM_MAX_PLANS, "gemm: more than %d distinct shapes", GEMM_MAX_PLANS);
            build_plan(g, pl, key, p);
            return pl;
        }
        if (memcmp(&pl->key, &key, sizeof key) == 0) return pl;
    }
    CHECK(0, "gemm plan table full");
    return nullptr;
}

}  // namespace

extern "C" {

struct gpu_gemm *build_gpu_gemm(size_t workspace_bytes) {
    struct gpu_gemm *g = static_cast<struct gpu_gemm *>(calloc(1, sizeof(struct gpu_gemm)));
    CHECK(g != nullptr, "out of host memory for the gemm context");
    CUDA_CHECK(cublasLtCreate(&g->handle));
    g->workspace_bytes = workspace_bytes;
    if (workspace_bytes > 0) CUDA_CHECK(cudaMalloc(&g->workspace, workspace_bytes));
    return g;
}

void free_gpu_gemm(struct gpu_gemm *g) {
    if (!g) return;
    for (int i = 0; i < kSlots; i++) {
        plan *pl = &g->slots[i];
        if (!pl->used) continue;
        CUDA_CHECK(cublasLtMatrixLayoutDestroy(pl->la));
        CUDA_CHECK(cublasLtMatrixLayoutDestroy(pl->lb));
        CUDA_CHECK(cublasLtMatrixLayoutDestroy(pl->ld));
        CUDA_CHECK(cublasLtMatmulDescDestroy(pl->desc));
    }
    if (g->workspace) CUDA_CHECK(cudaFree(g->workspace));
    CUDA_CHECK(cublasLtDestroy(g->handle));
    free(g);
}

void gpu_gemm_reserve(struct gpu_gemm *g, const struct gemm_args *p) { (void)find_plan(g, p); }

int gpu_gemm_plan_count(const struct gpu_gemm *g) { return g->n_plans; }

void gpu_gemm(struct gpu_gemm *g, const struct gemm_args *p, cudaStream_t stream) {
    plan *pl = find_plan(g, p);
    if (p->bias)
        CUDA_CHECK(
            cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias, sizeof p->bias));
    const float alpha = p->alpha;
    const float beta = p->beta == GEMM_ACCUMULATE ? 1.0f : 0.0f;
    CUDA_CHECK(cublasLtMatmul(g->handle, pl->desc, &alpha, p->b, pl->la, p->a, pl->lb, &beta, p->d, pl->ld, p->d,
                              pl->ld, &pl->algo, g->workspace, g->workspace_bytes, stream));
    KERNEL_CHECK(stream);
}

void gpu_linear_forward_bf16(struct gpu_gemm *g, uint16_t *y, const uint16_t *x, const uint16_t *w,
                             const uint16_t *b, int N, int C_in, int C_out, cudaStream_t stream) {
    gemm_args p;
    memset(&p, 0, sizeof p);
    p.d = y, p.d_type = GEMM_OUT_BF16, p.ldd = C_out;
    p.a = x, p.op_a = GEMM_NO_TRANS, p.lda = C_in;
    p.b = w, p.op_b = GEMM_TRANS, p.ldb = C_in;
    p.bias = b;
    p.m = N, p.n = C_out, p.k = C_in, p.batch = 1;
    p.alpha = 1.0f, p.beta = GEMM_OVERWRITE;
    gpu_gemm(g, &p, stream);
}

void gpu_linear_backward_dx_bf16(struct gpu_gemm *g, uint16_t *dx, const uint16_t *dy, const uint16_t *w, int N,
                                 int C_in, int C_out, enum gemm_beta beta, cudaStream_t stream) {
    gemm_args p;
    memset(&p, 0, sizeof p);
    p.d = dx, p.d_type = GEMM_OUT_BF16, p.ldd = C_in;
    p.a = dy, p.op_a = GEMM_NO_TRANS, p.lda = C_out;
    p.b = w, p.op_b = GEMM_NO_TRANS, p.ldb = C_in;
    p.m = N, p.n = C_in, p.k = C_out, p.batch = 1;
    p.alpha = 1.0f, p.beta = beta;
    gpu_gemm(g, &p, stream);
}

void gpu_linear_backward_dw_f32(struct gpu_gemm *g, float *dw, const uint16_t *dy, const uint16_t *x, int N,
                                int C_in, int C_out, cudaStream_t stream) {
    gemm_args p;
    memset(&p, 0, sizeof p);
    p.d = dw, p.d_type = GEMM_OUT_F32, p.ldd = C_in;
    p.a = dy, p.op_a = GEMM_TRANS, p.lda = C_out;
    p.b = x, p.op_b = GEMM_NO_TRANS, p.ldb = C_in;
    p.m = C_out, p.n = C_in, p.k = N, p.batch = 1;
    p.alpha = 1.0f, p.beta = GEMM_ACCUMULATE;
    gpu_gemm(g, &p, stream);
}

}  /* extern "C" */

namespace {

__global__ void fill_random_bf16(__nv_bfloat16 *p, int64_t n, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t z = (uint32_t)i * 2654435761u ^ seed;
        z ^= z >> 15, z *= 0x2C1B3C6Du, z ^= z >> 12, z *= 0x297A2D39u, z ^= z >> 15;
        p[i] = __float2bfloat16_rn((float)(z >> 8) * 0x1p-24f * 2.0f - 1.0f);
    }
}

}  // namespace

extern "C" double gpu_gemm_measure_bf16_rate(int n) {
    CHECK(n >= 256, "gemm rate: n=%d", n);
    const size_t bytes = (size_t)n * n * sizeof(uint16_t);
    uint16_t *a = nullptr, *b = nullptr, *d = nullptr;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
        cudaMalloc(&d, bytes) != cudaSuccess) {
        cudaGetLastError();
        if (a) cudaFree(a);
        if (b) cudaFree(b);
        return 0.0; /* no room: the rate stays unknown */
    }
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    /* never time on zeros: random values in [-1, 1) */
    fill_random_bf16<<<1024, 256, 0, s>>>(reinterpret_cast<__nv_bfloat16 *>(a), (int64_t)n * n, 1u);
    KERNEL_CHECK(s);
    fill_random_bf16<<<1024, 256, 0, s>>>(reinterpret_cast<__nv_bfloat16 *>(b), (int64_t)n * n, 2u);
    KERNEL_CHECK(s);
    struct gpu_gemm *g = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
    gemm_args p;
    memset(&p, 0, sizeof p);
    p.d = d, p.d_type = GEMM_OUT_BF16, p.ldd = n;
    p.a = a, p.op_a = GEMM_NO_TRANS, p.lda = n;
    p.b = b, p.op_b = GEMM_NO_TRANS, p.ldb = n;
    p.m = p.n = p.k = n, p.batch = 1, p.alpha = 1.0f, p.beta = GEMM_OVERWRITE;
    for (int i = 0; i < 3; i++) gpu_gemm(g, &p, s);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    const int reps = 10;
    CUDA_CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < reps; i++) gpu_gemm(g, &p, s);
    CUDA_CHECK(cudaEventRecord(e1, s));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    free_gpu_gemm(g);
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaFree(d));
    return 2.0 * (double)n * n * n * reps / (ms * 1e-3);
}
