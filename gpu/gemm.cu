/* gemm.cu — the cuBLASLt wrapper of gpu/gemm.h: row-major products, cached plans, one workspace.
 *
 * Strategy: cuBLASLt is column-major, refine is row-major. A row-major (m, n) matrix with row
 * stride ldd is the column-major (n, m) matrix with the same ld, so D = op(A)·op(B) is computed
 * as the column-major product Dᵀ = op(B)ᵀ·op(A)ᵀ: cuBLASLt's "A" is our B and its "B" is our A,
 * each with the same transpose flag (a row-major (k, n) B seen column-major is already op(B)ᵀ),
 * and cuBLASLt's m, n are our n, m. The bias epilogue adds a vector along cuBLASLt's rows, which
 * are our columns: bias (n), as F.linear wants.
 *
 * FP8: the same mapping carries the operand types, scale pointers and scale modes across (our
 * A's scale is cuBLASLt's B_SCALE_POINTER / B_SCALE_MODE, our B's its A_*), so our "TN" rule
 * (op_a = N, op_b = T) is cuBLASLt's (TRANSA = T, TRANSB = N): both operands K-major. A product of
 * bf16 operands sets none of the FP8 attributes: its descriptors are the ones it always had.
 *
 * Plans: a plan holds the matmul descriptor, the four layouts and the heuristic's first
 * algorithm for one key (struct plan_key). They live in an open-addressing hash table of
 * 2·GEMM_MAX_PLANS slots inside the context; a lookup hashes the key (FNV-1a over its bytes) and
 * probes linearly. A hit costs a hash, a memcmp and, with a bias, scales or AMAX_D, one
 * descriptor attribute write per pointer; nothing is allocated. A key cuBLASLt offers no
 * algorithm for is not stored (gpu_gemm_try reports it; gpu_gemm stops with a message).
 *
 * Test and benchmark: bazel test --config=gpu //tests/parity:gemm_parity
 *                     (binary) gemm_parity --bench   (% of a direct cuBLASLt call, TFLOP/s)
 */
#include "gpu/gemm.h"

#include <stdio.h>
#include <stdlib.h>
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
    int32_t a_type, b_type, a_scale_mode, b_scale_mode, accum; /* FP8; zero for bf16 */
    int32_t has_a_scale, has_b_scale, has_amax_d;
};

struct plan {
    int used;
    int tuned; /* tune_plan has run (or tuning is off): the algorithm is final */
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
    int tune; /* tune_plan at a plan's first call: 0 off, 1 on, 2 on and said (gpu_gemm_set_tuning) */
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
    k.a_type = p->a_type, k.b_type = p->b_type, k.a_scale_mode = p->a_scale_mode, k.b_scale_mode = p->b_scale_mode;
    k.accum = p->accum;
    k.has_a_scale = p->a_scale != nullptr, k.has_b_scale = p->b_scale != nullptr, k.has_amax_d = p->amax_d != nullptr;
    return k;
}

bool is_fp8(const gemm_args *p) { return p->a_type != GEMM_BF16 || p->b_type != GEMM_BF16; }

const char *dtype_name(gemm_dtype t) { return t == GEMM_BF16 ? "bf16" : t == GEMM_E4M3 ? "E4M3" : "E5M2"; }

const char *scale_name(gemm_scale s) {
    return s == GEMM_SCALE_TENSOR ? "per-tensor" : s == GEMM_SCALE_1X128 ? "1x128" : "128x128";
}

cudaDataType_t cuda_type(gemm_dtype t) {
    return t == GEMM_BF16 ? CUDA_R_16BF : t == GEMM_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

int32_t cublas_scale_mode(gemm_scale s) {
    return s == GEMM_SCALE_TENSOR  ? (int32_t)CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
           : s == GEMM_SCALE_1X128 ? (int32_t)CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                   : (int32_t)CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

bool aligned16(const void *p) { return ((uintptr_t)p % 16) == 0; }

/* One line naming an FP8 product, the device and the library (for refusals). */
void describe_fp8(const gemm_args *p, char *buf, size_t n) {
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    snprintf(buf, n,
             "m=%d n=%d k=%d A=%s (%s scales) B=%s (%s scales) D=%s%s%s%s accumulation=%s, on sm_%d%d with "
             "cuBLASLt %zu",
             p->m, p->n, p->k, dtype_name(p->a_type), scale_name(p->a_scale_mode), dtype_name(p->b_type),
             scale_name(p->b_scale_mode), p->d_type == GEMM_OUT_BF16 ? "bf16" : "f32", p->bias ? " bias" : "",
             p->beta == GEMM_ACCUMULATE ? " accumulate" : "", p->amax_d ? " AMAX_D" : "",
             p->accum == GEMM_ACCUM_FAST ? "fast" : "precise", major, minor, cublasLtGetVersion());
}

const char *kFp8Hint =
    "cuBLASLt's FP8 matmul needs compute capability >= 8.9 (Ada, Hopper); the 1x128/128x128 block "
    "scale modes need cuBLASLt >= 12.9 on sm_90 and are documented without fast accumulation; use "
    "per-tensor scales (GEMM_SCALE_TENSOR) where a combination is refused";

void check_fp8_args(const gemm_args *p) {
    if (!is_fp8(p)) {
        CHECK(p->a_scale == nullptr && p->b_scale == nullptr && p->a_scale_mode == GEMM_SCALE_TENSOR &&
                  p->b_scale_mode == GEMM_SCALE_TENSOR && p->accum == GEMM_ACCUM_PRECISE && p->amax_d == nullptr,
              "gemm: scales, scale modes, fast accumulation and AMAX_D apply to FP8 operands only (bf16 product "
              "m=%d n=%d k=%d)",
              p->m, p->n, p->k);
        return;
    }
    CHECK(p->a_type != GEMM_BF16 && p->b_type != GEMM_BF16 && p->a_type <= GEMM_E5M2 && p->b_type <= GEMM_E5M2,
          "gemm FP8: both operands must be E4M3 or E5M2 (A=%d B=%d); cuBLASLt mixes no bf16 with FP8", (int)p->a_type,
          (int)p->b_type);
    CHECK(!(p->a_type == GEMM_E5M2 && p->b_type == GEMM_E5M2), "gemm FP8: E5M2 x E5M2 is not a cuBLASLt FP8 GEMM");
    CHECK(p->op_a == GEMM_NO_TRANS && p->op_b == GEMM_TRANS,
          "gemm FP8: Hopper's FP8 GEMMs take K-major operands only (\"TN\"): A (m, k) with GEMM_NO_TRANS and B "
          "(n, k) with GEMM_TRANS, D = A B^T; got op_a=%c op_b=%c. Store the transposed FP8 copy (gpu/fp8.h casts "
          "with a transposed output)",
          p->op_a == GEMM_TRANS ? 'T' : 'N', p->op_b == GEMM_TRANS ? 'T' : 'N');
    CHECK(p->batch == 1, "gemm FP8: batch=%d, FP8 products are single (batch 1)", p->batch);
    CHECK(p->m % 16 == 0 && p->n % 16 == 0 && p->k % 16 == 0,
          "gemm FP8: m=%d n=%d k=%d must be multiples of 16 (cuBLASLt's FP8 alignment rule; pad the operands)", p->m,
          p->n, p->k);
    const int64_t d_size = p->d_type == GEMM_OUT_BF16 ? 2 : 4;
    CHECK(p->lda % 16 == 0 && p->ldb % 16 == 0 && (p->ldd * d_size) % 16 == 0,
          "gemm FP8: lda=%lld ldb=%lld must be multiples of 16 and ldd=%lld a multiple of %lld elements",
          (long long)p->lda, (long long)p->ldb, (long long)p->ldd, (long long)(16 / d_size));
    CHECK(aligned16(p->a) && aligned16(p->b) && aligned16(p->d) && aligned16(p->bias) && aligned16(p->a_scale) &&
              aligned16(p->b_scale) && aligned16(p->amax_d),
          "gemm FP8: A %p, B %p, D %p, bias %p, scales %p/%p and amax_d %p must be 16-byte aligned", p->a, p->b, p->d,
          (const void *)p->bias, (const void *)p->a_scale, (const void *)p->b_scale, (void *)p->amax_d);
    CHECK(p->a_scale_mode <= GEMM_SCALE_128X128 && p->b_scale_mode <= GEMM_SCALE_128X128 &&
              (p->accum == GEMM_ACCUM_PRECISE || p->accum == GEMM_ACCUM_FAST),
          "gemm FP8: bad scale mode %d/%d or accumulation %d", (int)p->a_scale_mode, (int)p->b_scale_mode,
          (int)p->accum);
    CHECK((p->a_scale_mode == GEMM_SCALE_TENSOR || p->a_scale) && (p->b_scale_mode == GEMM_SCALE_TENSOR || p->b_scale),
          "gemm FP8: a block scale mode needs its scale pointer (A %s, B %s)", scale_name(p->a_scale_mode),
          scale_name(p->b_scale_mode));
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
    check_fp8_args(p);
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

/* Writes the per-call pointers of p into the plan's descriptor (bias, FP8 scales, AMAX_D). cuBLASLt's
 * A is our B: its A_SCALE_POINTER is our b_scale. */
void set_call_pointers(plan *pl, const gemm_args *p) {
    if (p->bias)
        CUDA_CHECK(
            cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias, sizeof p->bias));
    if (p->b_scale)
        CUDA_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p->b_scale,
                                                  sizeof p->b_scale));
    if (p->a_scale)
        CUDA_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p->a_scale,
                                                  sizeof p->a_scale));
    if (p->amax_d)
        CUDA_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &p->amax_d,
                                                  sizeof p->amax_d));
}

void destroy_plan(plan *pl) {
    CUDA_CHECK(cublasLtMatrixLayoutDestroy(pl->la));
    CUDA_CHECK(cublasLtMatrixLayoutDestroy(pl->lb));
    CUDA_CHECK(cublasLtMatrixLayoutDestroy(pl->ld));
    CUDA_CHECK(cublasLtMatmulDescDestroy(pl->desc));
}

/* The heuristic's preferences for key: the context's workspace, the pointers' alignment classes, and
 * split-K partial sums only in the compute type (caller destroys it). */
cublasLtMatmulPreference_t make_pref(const struct gpu_gemm *g, const plan_key &key) {
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
    return pref;
}

/* Creates the descriptors of p's plan and asks the heuristic for an algorithm. Returns false (and
 * leaves nothing allocated) when cuBLASLt offers none. */
bool build_plan(struct gpu_gemm *g, plan *pl, const plan_key &key, const gemm_args *p) {
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
    if (is_fp8(p)) {
        const int8_t fast = p->accum == GEMM_ACCUM_FAST ? 1 : 0;
        const int32_t mode_a = cublas_scale_mode(p->b_scale_mode), mode_b = cublas_scale_mode(p->a_scale_mode);
        CUDA_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
        /* The scale modes only when not the default per-tensor scalar: libraries before 12.8 know
         * no such attribute and still run per-tensor FP8. */
        if (mode_a != (int32_t)CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
            CUDA_CHECK(
                cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof mode_a));
        if (mode_b != (int32_t)CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
            CUDA_CHECK(
                cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof mode_b));
        set_call_pointers(pl, p);
    }
    /* Column-major shapes: A_l is (n, k) after its op, B_l (k, m), D_l (n, m). */
    const cudaDataType_t type_la = cuda_type(p->b_type), type_lb = cuda_type(p->a_type);
    if (ta == CUBLAS_OP_N)
        layout(&pl->la, type_la, p->n, p->k, p->ldb, p->batch, p->stride_b);
    else
        layout(&pl->la, type_la, p->k, p->n, p->ldb, p->batch, p->stride_b);
    if (tb == CUBLAS_OP_N)
        layout(&pl->lb, type_lb, p->k, p->m, p->lda, p->batch, p->stride_a);
    else
        layout(&pl->lb, type_lb, p->m, p->k, p->lda, p->batch, p->stride_a);
    const cudaDataType_t dt = p->d_type == GEMM_OUT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    layout(&pl->ld, dt, p->n, p->m, p->ldd, p->batch, p->stride_d);

    cublasLtMatmulPreference_t pref = make_pref(g, key);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(g->handle, pl->desc, pl->la, pl->lb, pl->ld, pl->ld, pref, 1, &res, &found);
    CUDA_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    /* An FP8 combination the library or the device does not offer may be reported as an error
     * status of the heuristic itself; a bf16 one never is (a failure there is a bug: stop). */
    if (!is_fp8(p)) CUDA_CHECK(hs);
    if (hs != CUBLAS_STATUS_SUCCESS || found < 1 || res.state != CUBLAS_STATUS_SUCCESS) {
        destroy_plan(pl);
        return false;
    }
    pl->algo = res.algo;
    pl->workspace_needed = res.workspaceSize;
    return true;
}

/* p's product with plan pl's descriptors and algorithm algo, into d (p->d, or tune_plan's copy; as C
 * too when p accumulates). */
cublasStatus_t launch(struct gpu_gemm *g, const plan *pl, const gemm_args *p, const cublasLtMatmulAlgo_t &algo, void *d,
                      cudaStream_t s) {
    const float alpha = p->alpha, beta = p->beta == GEMM_ACCUMULATE ? 1.0f : 0.0f;
    return cublasLtMatmul(g->handle, pl->desc, &alpha, p->b, pl->la, p->a, pl->lb, &beta, d, pl->ld, d, pl->ld, &algo,
                          g->workspace, g->workspace_bytes, s);
}

/* An order-free 64-bit digest of n 32-bit words: Σ mix(word, index) (commutative, so any block
 * order gives the same value); two outputs with equal digests are taken as equal bit for bit. */
__global__ void digest_words(unsigned long long *out, const uint32_t *w, int64_t n) {
    unsigned long long s = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        unsigned long long x = ((unsigned long long)w[i] << 32) ^ (unsigned long long)i;
        x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
        s += x;
    }
    atomicAdd(out, s);
}

int32_t algo_attr(const cublasLtMatmulAlgo_t &a, cublasLtMatmulAlgoConfigAttributes_t what) {
    int32_t v = 0;
    size_t w = 0;
    CUDA_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&a, what, &v, sizeof v, &w));
    return v;
}

/* What fill_random writes: bf16, fp32, FP8 codes, or positive fp32 scales. */
enum fill_kind { FILL_BF16, FILL_F32, FILL_E4M3, FILL_E5M2, FILL_SCALE };

/* n elements of kind k from a hash of (index, seed): random signs, exponents over a range of 2^8
 * (FP8: of the format's normal range near 1) and every mantissa bit — finite values whose sums of
 * products round at varying places, so two orders of additions give other bits. */
__global__ void fill_random(void *p, int64_t n, int kind, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t z = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 0x9E3779B9u ^ seed;
        z ^= z >> 16, z *= 0x7feb352du, z ^= z >> 15, z *= 0x846ca68bu, z ^= z >> 16;
        const uint32_t sign = z >> 31, e = (z >> 24) & 7u, mant = z & 0x7fffffu;
        switch (kind) {
        case FILL_BF16:
            static_cast<uint16_t *>(p)[i] = (uint16_t)(sign << 15 | (123u + e) << 7 | (mant & 0x7fu));
            break;
        case FILL_F32: static_cast<uint32_t *>(p)[i] = sign << 31 | (123u + e) << 23 | mant; break;
        case FILL_E4M3: static_cast<uint8_t *>(p)[i] = (uint8_t)(sign << 7 | (3u + e) << 3 | (mant & 7u)); break;
        case FILL_E5M2: static_cast<uint8_t *>(p)[i] = (uint8_t)(sign << 7 | (11u + e) << 2 | (mant & 3u)); break;
        default: static_cast<uint32_t *>(p)[i] = 126u << 23 | mant; break; /* [0.5, 1) */
        }
    }
}

/* At a plan's first call (not under stream capture; bf16 or FP8, batch 1): cuBLASLt's next heuristic
 * candidates with the first one's split-K count (1) are timed, each with its output's digest, on
 * pseudorandom operands of the call's shape, leading dimensions and pointer alignments (never on
 * the call's own values: those may be zeros or small integers — LoRA's B at the first step, a test's
 * exact cases — on which every order of additions gives the same bits). One whose output digests as
 * the first algorithm's (the same bits: the same order of additions, checked on values where orders
 * differ) and that runs ≥ 2% faster replaces it. FP8 candidates that accumulate in another order
 * (another promotion interval of the precise mode, another grouping of fast accumulation, another
 * block-scale application) are not taken. Equal bits there are not equal bits on every input (a
 * tuned tiny-model LoRA run on an H200 differed from the untuned ones at step 5) and the choice
 * depends on timing, so tuning is off unless asked for (gpu/gemm.h). Without device memory for
 * the operands' copies and 256 MiB more, the heuristic's first choice stays. */
void tune_plan(struct gpu_gemm *g, plan *pl, const gemm_args *p, cudaStream_t s) {
    constexpr int kCandidates = 8;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
    if (capture != cudaStreamCaptureStatusNone) return; /* at a later, uncaptured call */
    pl->tuned = 1;
    if (!g->tune || p->batch != 1 || algo_attr(pl->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1) return;
    cublasLtMatmulPreference_t pref = make_pref(g, pl->key);
    cublasLtMatmulHeuristicResult_t res[kCandidates];
    int found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(g->handle, pl->desc, pl->la, pl->lb, pl->ld, pl->ld, pref,
                                                             kCandidates, res, &found);
    CUDA_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (hs != CUBLAS_STATUS_SUCCESS || found < 2) return;

    /* the trial operands, each at the call's pointer's offset within 256 bytes (its alignment class) */
    const size_t a_es = p->a_type == GEMM_BF16 ? 2 : 1, b_es = p->b_type == GEMM_BF16 ? 2 : 1;
    const size_t d_es = p->d_type == GEMM_OUT_BF16 ? 2 : 4;
    const size_t a_n = (size_t)(p->op_a == GEMM_NO_TRANS ? p->m : p->k) * (size_t)p->lda;
    const size_t b_n = (size_t)(p->op_b == GEMM_NO_TRANS ? p->k : p->n) * (size_t)p->ldb;
    const size_t d_bytes = ((size_t)(p->m - 1) * (size_t)p->ldd + (size_t)p->n) * d_es;
    /* scales: at most one a row (1×128) or a 128-row block (128×128) per 128-wide K block */
    const size_t kb = (size_t)(p->k + 127) / 128 + 1;
    const size_t sa_n = p->a_scale ? ((size_t)p->m + 128) * kb : 0, sb_n = p->b_scale ? ((size_t)p->n + 128) * kb : 0;
    auto room = [](size_t bytes) { return (bytes + 511) / 256 * 256; }; /* the bytes, an offset < 256, rounded */
    const size_t at_a = 0, at_b = at_a + room(a_n * a_es), at_c = at_b + room(b_n * b_es), at_d = at_c + room(d_bytes),
                 at_bias = at_d + room(d_bytes), at_sa = at_bias + room(p->bias ? (size_t)p->n * 2 : 0),
                 at_sb = at_sa + room(sa_n * 4), at_amax = at_sb + room(sb_n * 4), at_sum = at_amax + 256,
                 total = at_sum + 256;
    size_t free_b = 0, total_b = 0; /* leave 256 MiB beside the copies for whatever runs next */
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (free_b < total + ((size_t)256 << 20)) return;
    unsigned char *scratch = nullptr;
    if (cudaMalloc(&scratch, total) != cudaSuccess) {
        (void)cudaGetLastError(); /* no room: keep the heuristic's choice */
        return;
    }
    auto place = [&](size_t at, const void *like) { return scratch + at + (uintptr_t)like % 256; };
    gemm_args q = *p;
    q.a = place(at_a, p->a), q.b = place(at_b, p->b);
    unsigned char *c0 = place(at_c, p->d), *d = place(at_d, p->d);
    if (p->bias) q.bias = reinterpret_cast<const uint16_t *>(place(at_bias, p->bias));
    if (p->a_scale) q.a_scale = reinterpret_cast<const float *>(place(at_sa, p->a_scale));
    if (p->b_scale) q.b_scale = reinterpret_cast<const float *>(place(at_sb, p->b_scale));
    if (p->amax_d) q.amax_d = reinterpret_cast<float *>(place(at_amax, p->amax_d));
    unsigned long long *sum = reinterpret_cast<unsigned long long *>(scratch + at_sum);
    auto fill = [&](const void *dst, size_t n, int kind, uint32_t seed) {
        if (n == 0) return;
        fill_random<<<264, 256, 0, s>>>(const_cast<void *>(dst), (int64_t)n, kind, seed);
        KERNEL_CHECK(s);
    };
    auto kind_of = [](gemm_dtype t) { return t == GEMM_BF16 ? FILL_BF16 : t == GEMM_E4M3 ? FILL_E4M3 : FILL_E5M2; };
    fill(q.a, a_n, kind_of(p->a_type), 0x1234567u);
    fill(q.b, b_n, kind_of(p->b_type), 0x89abcdeu);
    fill(c0, d_bytes / d_es, p->d_type == GEMM_OUT_BF16 ? FILL_BF16 : FILL_F32, 0x2468aceu);
    if (p->bias) fill(q.bias, (size_t)p->n, FILL_BF16, 0x13579bdu);
    fill(q.a_scale, sa_n, FILL_SCALE, 0xfdb9753u);
    fill(q.b_scale, sb_n, FILL_SCALE, 0xeca8642u);
    /* whole words over every byte of D (a bf16 D of odd length ends inside its 256-byte room) */
    const size_t words = (d_bytes + 3) / 4;
    cudaEvent_t t0, t1;
    CUDA_CHECK(cudaEventCreate(&t0));
    CUDA_CHECK(cudaEventCreate(&t1));
    set_call_pointers(pl, &q); /* gpu_gemm_try sets the call's own again before its launch */
    /* a candidate from C's values (when accumulating): its output's digest, its time a call */
    auto trial = [&](const cublasLtMatmulAlgo_t &algo, unsigned long long *digest, float *ms) -> bool {
        if (p->beta == GEMM_ACCUMULATE) CUDA_CHECK(cudaMemcpyAsync(d, c0, d_bytes, cudaMemcpyDeviceToDevice, s));
        if (launch(g, pl, &q, algo, d, s) != CUBLAS_STATUS_SUCCESS) return false;
        CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof *sum, s));
        digest_words<<<264, 256, 0, s>>>(sum, reinterpret_cast<const uint32_t *>(d), (int64_t)words);
        KERNEL_CHECK(s);
        CUDA_CHECK(cudaMemcpyAsync(digest, sum, sizeof *digest, cudaMemcpyDeviceToHost, s));
        constexpr int kReps = 3;
        CUDA_CHECK(cudaEventRecord(t0, s));
        for (int r = 0; r < kReps; r++) CUDA_CHECK(launch(g, pl, &q, algo, d, s));
        CUDA_CHECK(cudaEventRecord(t1, s));
        CUDA_CHECK(cudaEventSynchronize(t1));
        CUDA_CHECK(cudaEventElapsedTime(ms, t0, t1));
        return true;
    };
    unsigned long long d0 = 0;
    float best = 0.0f, first = 0.0f;
    const int32_t tile0 = algo_attr(pl->algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
    if (trial(pl->algo, &d0, &best)) {
        first = best;
        for (int i = 0; i < found; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > g->workspace_bytes ||
                memcmp(&res[i].algo, &pl->algo, sizeof pl->algo) == 0 ||
                algo_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1)
                continue;
            unsigned long long di = 0;
            float ms = 0.0f;
            if (!trial(res[i].algo, &di, &ms) || di != d0) continue;
            if (ms < best && ms < 0.98f * first) {
                best = ms;
                pl->algo = res[i].algo;
                pl->workspace_needed = res[i].workspaceSize;
            }
        }
    }
    (void)cudaGetLastError(); /* a candidate the library refused at launch */
    if (g->tune == 2)
        fprintf(stderr,
                "gemm tuning m=%d n=%d k=%d op %c%c lda=%lld ldb=%lld ldd=%lld %s%s%s: %d candidates, algo tile %d -> %d "
                "(%.4f -> %.4f ms)\n",
                p->m, p->n, p->k, p->op_a == GEMM_TRANS ? 'T' : 'N', p->op_b == GEMM_TRANS ? 'T' : 'N',
                (long long)p->lda, (long long)p->ldb, (long long)p->ldd, is_fp8(p) ? "fp8 " : "",
                p->d_type == GEMM_OUT_BF16 ? "bf16" : "f32", p->beta == GEMM_ACCUMULATE ? " accumulate" : "", found,
                tile0, algo_attr(pl->algo, CUBLASLT_ALGO_CONFIG_TILE_ID), (double)first / 3, (double)best / 3);
    CUDA_CHECK(cudaEventDestroy(t0));
    CUDA_CHECK(cudaEventDestroy(t1));
    CUDA_CHECK(cudaFree(scratch));
}

/* The plan of p: cached, or built and cached; nullptr when cuBLASLt offers no algorithm. */
plan *find_plan(struct gpu_gemm *g, const gemm_args *p) {
    check_args(p);
    const plan_key key = make_key(p);
    size_t i = (size_t)(hash_key(key) % kSlots);
    for (int probe = 0; probe < kSlots; probe++, i = (i + 1) % kSlots) {
        plan *pl = &g->slots[i];
        if (!pl->used) {
            CHECK(g->n_plans < GEMM_MAX_PLANS, "gemm: more than %d distinct shapes", GEMM_MAX_PLANS);
            if (!build_plan(g, pl, key, p)) return nullptr;
            pl->used = 1;
            g->n_plans++;
            return pl;
        }
        if (memcmp(&pl->key, &key, sizeof key) == 0) return pl;
    }
    CHECK(0, "gemm plan table full");
    return nullptr;
}

/* Stops the program with a message naming p when cuBLASLt has no algorithm or refused it. */
void fail_unsupported(const gemm_args *p, gemm_status st) {
    if (is_fp8(p)) {
        char what[512];
        describe_fp8(p, what, sizeof what);
        CHECK(0, "cuBLASLt %s the FP8 GEMM %s. %s",
              st == GEMM_NO_ALGORITHM ? "has no algorithm for" : "refused", what, kFp8Hint);
    }
    CHECK(0,
          "cuBLASLt %s m=%d n=%d k=%d batch=%d op_a=%d op_b=%d lda=%lld ldb=%lld ldd=%lld d_type=%d bias=%d beta=%d "
          "alignments a=%d b=%d d=%d",
          st == GEMM_NO_ALGORITHM ? "has no algorithm for" : "refused", p->m, p->n, p->k, p->batch, (int)p->op_a,
          (int)p->op_b, (long long)p->lda, (long long)p->ldb, (long long)p->ldd, (int)p->d_type, p->bias != nullptr,
          (int)p->beta, align_class(p->a), align_class(p->b), align_class(p->d));
}

gemm_args fp8_product(void *d, gemm_out d_type, gemm_beta beta, const gemm_fp8_operand *a, const gemm_fp8_operand *b,
                      int m, int n, int k, gemm_accum accum) {
    gemm_args p;
    memset(&p, 0, sizeof p);
    p.d = d, p.d_type = d_type, p.ldd = n;
    p.a = a->data, p.op_a = GEMM_NO_TRANS, p.lda = k;
    p.b = b->data, p.op_b = GEMM_TRANS, p.ldb = k;
    p.m = m, p.n = n, p.k = k, p.batch = 1;
    p.alpha = 1.0f, p.beta = beta;
    p.a_type = a->type, p.b_type = b->type, p.a_scale = a->scale, p.b_scale = b->scale;
    p.a_scale_mode = a->mode, p.b_scale_mode = b->mode, p.accum = accum;
    return p;
}

}  // namespace

extern "C" {

struct gpu_gemm *build_gpu_gemm(size_t workspace_bytes) {
    struct gpu_gemm *g = static_cast<struct gpu_gemm *>(calloc(1, sizeof(struct gpu_gemm)));
    CHECK(g != nullptr, "out of host memory for the gemm context");
    CUDA_CHECK(cublasLtCreate(&g->handle));
    g->workspace_bytes = workspace_bytes;
    if (workspace_bytes > 0) CUDA_CHECK(cudaMalloc(&g->workspace, workspace_bytes));
    /* unset or 0: the heuristic's first algorithm, untimed (bitwise reproducible runs); 1: tuning;
     * 2: tuning, each choice said on stderr */
    const char *tune = getenv("REFINE_GEMM_TUNE");
    g->tune = tune && strcmp(tune, "1") == 0 ? 1 : tune && strcmp(tune, "2") == 0 ? 2 : 0;
    return g;
}

void gpu_gemm_set_tuning(struct gpu_gemm *g, int on) { g->tune = on; }

void free_gpu_gemm(struct gpu_gemm *g) {
    if (!g) return;
    for (int i = 0; i < kSlots; i++)
        if (g->slots[i].used) destroy_plan(&g->slots[i]);
    if (g->workspace) CUDA_CHECK(cudaFree(g->workspace));
    CUDA_CHECK(cublasLtDestroy(g->handle));
    free(g);
}

void gpu_gemm_reserve(struct gpu_gemm *g, const struct gemm_args *p) {
    if (find_plan(g, p) == nullptr) fail_unsupported(p, GEMM_NO_ALGORITHM);
}

int gpu_gemm_plan_count(const struct gpu_gemm *g) { return g->n_plans; }

void gpu_gemm_algo_name(struct gpu_gemm *g, const struct gemm_args *p, char *buf, size_t n) {
    const plan *pl = find_plan(g, p);
    if (pl == nullptr) {
        snprintf(buf, n, "none");
        return;
    }
    int32_t id = 0, tile = 0, splitk = 0, stages = 0;
    uint32_t reduction = 0;
    size_t w = 0;
    CUDA_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&pl->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w));
    CUDA_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&pl->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w));
    CUDA_CHECK(
        cublasLtMatmulAlgoConfigGetAttribute(&pl->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w));
    CUDA_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&pl->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction,
                                                    sizeof reduction, &w));
    CUDA_CHECK(
        cublasLtMatmulAlgoConfigGetAttribute(&pl->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w));
    snprintf(buf, n, "algo %d tile %d splitK %d reduction %u stages %d", id, tile, splitk, reduction, stages);
}

enum gemm_status gpu_gemm_try(struct gpu_gemm *g, const struct gemm_args *p, cudaStream_t stream) {
    plan *pl = find_plan(g, p);
    if (pl == nullptr) return GEMM_NO_ALGORITHM;
    if (!pl->tuned) tune_plan(g, pl, p, stream);
    set_call_pointers(pl, p);
    const cublasStatus_t st = launch(g, pl, p, pl->algo, p->d, stream);
    if (is_fp8(p) && (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ||
                      st == CUBLAS_STATUS_ARCH_MISMATCH))
        return GEMM_REFUSED;
    CUDA_CHECK(st);
    KERNEL_CHECK(stream);
    return GEMM_OK;
}

void gpu_gemm(struct gpu_gemm *g, const struct gemm_args *p, cudaStream_t stream) {
    const gemm_status st = gpu_gemm_try(g, p, stream);
    if (st != GEMM_OK) fail_unsupported(p, st);
}

void gpu_linear_forward_ld_bf16(struct gpu_gemm *g, uint16_t *y, const uint16_t *x, int64_t ldx, const uint16_t *w,
                                int64_t ldw, const uint16_t *b, int N, int K, int C_out, cudaStream_t stream) {
    gemm_args p;
    memset(&p, 0, sizeof p);
    p.d = y, p.d_type = GEMM_OUT_BF16, p.ldd = C_out;
    p.a = x, p.op_a = GEMM_NO_TRANS, p.lda = ldx;
    p.b = w, p.op_b = GEMM_TRANS, p.ldb = ldw;
    p.bias = b;
    p.m = N, p.n = C_out, p.k = K, p.batch = 1;
    p.alpha = 1.0f, p.beta = GEMM_OVERWRITE;
    gpu_gemm(g, &p, stream);
}

void gpu_linear_forward_bf16(struct gpu_gemm *g, uint16_t *y, const uint16_t *x, const uint16_t *w,
                             const uint16_t *b, int N, int C_in, int C_out, cudaStream_t stream) {
    gpu_linear_forward_ld_bf16(g, y, x, C_in, w, C_in, b, N, C_in, C_out, stream);
}

void gpu_linear_backward_dx_ld_bf16(struct gpu_gemm *g, uint16_t *dx, int64_t lddx, const uint16_t *dy,
                                    const uint16_t *w, int64_t ldw, int N, int C_in, int C_out, enum gemm_beta beta,
                                    cudaStream_t stream) {
    gemm_args p;
    memset(&p, 0, sizeof p);
    p.d = dx, p.d_type = GEMM_OUT_BF16, p.ldd = lddx;
    p.a = dy, p.op_a = GEMM_NO_TRANS, p.lda = C_out;
    p.b = w, p.op_b = GEMM_NO_TRANS, p.ldb = ldw;
    p.m = N, p.n = C_in, p.k = C_out, p.batch = 1;
    p.alpha = 1.0f, p.beta = beta;
    gpu_gemm(g, &p, stream);
}

void gpu_linear_backward_dx_bf16(struct gpu_gemm *g, uint16_t *dx, const uint16_t *dy, const uint16_t *w, int N,
                                 int C_in, int C_out, enum gemm_beta beta, cudaStream_t stream) {
    gpu_linear_backward_dx_ld_bf16(g, dx, C_in, dy, w, C_in, N, C_in, C_out, beta, stream);
}

void gpu_linear_backward_dw(struct gpu_gemm *g, void *dw, enum gemm_out dw_type, const uint16_t *dy, const uint16_t *x,
                            int N, int C_in, int C_out, cudaStream_t stream) {
    gpu_linear_backward_dw_ld(g, dw, dw_type, dy, C_out, x, C_in, N, C_in, C_out, stream);
}

void gpu_linear_backward_dw_ld(struct gpu_gemm *g, void *dw, enum gemm_out dw_type, const uint16_t *dy, int64_t lddy,
                               const uint16_t *x, int64_t ldx, int N, int C_in, int C_out, cudaStream_t stream) {
    CHECK(lddy >= C_out && ldx >= C_in, "linear dW: row strides %lld, %lld below C_out %d, C_in %d", (long long)lddy,
          (long long)ldx, C_out, C_in);
    gemm_args p;
    memset(&p, 0, sizeof p);
    p.d = dw, p.d_type = dw_type, p.ldd = C_in;
    p.a = dy, p.op_a = GEMM_TRANS, p.lda = lddy;
    p.b = x, p.op_b = GEMM_NO_TRANS, p.ldb = ldx;
    p.m = C_out, p.n = C_in, p.k = N, p.batch = 1;
    p.alpha = 1.0f, p.beta = GEMM_ACCUMULATE;
    gpu_gemm(g, &p, stream);
}


void gpu_linear_forward_fp8(struct gpu_gemm *g, void *y, enum gemm_out y_type, const struct gemm_fp8_operand *x,
                            const struct gemm_fp8_operand *w, const uint16_t *b, int N, int C_in, int C_out,
                            enum gemm_accum accum, cudaStream_t stream) {
    gemm_args p = fp8_product(y, y_type, GEMM_OVERWRITE, x, w, N, C_out, C_in, accum);
    p.bias = b;
    gpu_gemm(g, &p, stream);
}

void gpu_linear_backward_dx_fp8(struct gpu_gemm *g, void *dx, enum gemm_out dx_type, enum gemm_beta beta,
                                const struct gemm_fp8_operand *dy, const struct gemm_fp8_operand *w_t, int N, int C_in,
                                int C_out, enum gemm_accum accum, cudaStream_t stream) {
    const gemm_args p = fp8_product(dx, dx_type, beta, dy, w_t, N, C_in, C_out, accum);
    gpu_gemm(g, &p, stream);
}

void gpu_linear_backward_dw_fp8(struct gpu_gemm *g, void *dw, enum gemm_out dw_type, enum gemm_beta beta,
                                const struct gemm_fp8_operand *dy_t, const struct gemm_fp8_operand *x_t, int N,
                                int C_in, int C_out, enum gemm_accum accum, cudaStream_t stream) {
    const gemm_args p = fp8_product(dw, dw_type, beta, dy_t, x_t, C_out, C_in, N, accum);
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
