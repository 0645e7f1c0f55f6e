/* llama_dp.cu — what data parallelism needs from the GPU model (gpu/llama.h): the gradient buckets,
 * the hook that backward calls as each finishes, the model's stream and its device loss sum.
 *
 * A bucket is the range of the gradient slab from the first to the last byte of its tensors'
 * gradients. The slab holds the gradients in the order the layout registers the trainable tensors
 * (gpu/llama_layout.cu): full fine-tuning the embedding, then layer by layer, then the final norm and
 * lm_head; adapters layer by layer (a LoRA group's stacked A gradient inside its layer). So a
 * layer's gradients are contiguous, with only alignment padding (zeros, never written) between
 * them, and buckets do not overlap: gpu_llama_bucket checks both. A tensor's bucket is read from
 * its name ("model.layers.<l>." a layer's; "model.embed_tokens." the embedding's; the rest the
 * head's).
 *
 * Sharded gradients (ZeRO-2): layer l's tensors write into the rows of layer l mod 2 (the layout), so
 * layer buckets of one parity are the same range; each rank's part of a bucket is the range from
 * its first piece's first gradient to its last piece's end (pieces follow the tensors' order, as
 * the rows do), and a take adds this rank's pieces into its flat accumulator, then clears the
 * bucket for the next layer or micro-batch that writes it.
 */
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/llama_internal.h"
#include "io/check.h"

namespace {

/* The bucket of trainable tensor p (gpu/llama.h's numbering). */
int bucket_of(const gpu_llama *m, const gl_param &p) {
    const int l = gl_layer_of(p.name);
    if (l >= 0) {
        CHECK(l < m->cfg.L, "tensor %s: layer %d of %d", p.name, l, m->cfg.L);
        return m->cfg.L - l;
    }
    if (strncmp(p.name, "model.embed_tokens.", 19) == 0) return m->cfg.L + 1;
    return 0;
}

/* Two buckets whose gradients share rows by design (sharded gradients: layers of one parity). */
bool shared_rows(const gpu_llama *m, int a, int b) {
    const int L = m->cfg.L;
    return m->shard_grads && a >= 1 && a <= L && b >= 1 && b <= L && (a - b) % 2 == 0;
}

__global__ void add_into(float *acc, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc[i] = __fadd_rn(acc[i], x[i]);
}

}  // namespace

extern "C" void gpu_llama_set_grad_gate(gpu_llama *m, gpu_llama_grad_hook gate, void *ctx) {
    m->grad_gate = gate;
    m->grad_gate_ctx = ctx;
}

extern "C" void gpu_llama_set_grad_hook(gpu_llama *m, gpu_llama_grad_hook hook, void *ctx) {
    m->grad_hook = hook;
    m->grad_hook_ctx = ctx;
}

extern "C" int gpu_llama_n_buckets(const gpu_llama *m) { return m->cfg.L + 2; }

extern "C" void gpu_llama_bucket(const gpu_llama *m, int bucket, float **first, int64_t *n) {
    CHECK(bucket >= 0 && bucket < m->cfg.L + 2, "bucket %d of %d", bucket, m->cfg.L + 2);
    const float *lo = nullptr, *hi = nullptr;
    for (int i = 0; i < m->n_params; i++) {
        const gl_param &p = m->params[i];
        if (bucket_of(m, p) != bucket) continue;
        const float *g = gl_grad_f32(m, p);
        if (lo == nullptr || g < lo) lo = g;
        if (hi == nullptr || g + p.n > hi) hi = g + p.n;
    }
    /* no other bucket's gradient lies inside this range */
    for (int i = 0; i < m->n_params && lo != nullptr; i++) {
        const gl_param &p = m->params[i];
        if (bucket_of(m, p) == bucket || shared_rows(m, bucket, bucket_of(m, p))) continue;
        const float *g = gl_grad_f32(m, p);
        CHECK(g + p.n <= lo || g >= hi, "bucket %d [%p, %p) overlaps the gradient of %s", bucket,
              (const void *)lo, (const void *)hi, p.name);
    }
    *first = const_cast<float *>(lo);
    *n = lo != nullptr ? hi - lo : 0;
}

extern "C" cudaStream_t gpu_llama_stream(const gpu_llama *m) { return m->stream; }

extern "C" double *gpu_llama_nll_sum_device(gpu_llama *m) { return m->nll_acc; }

extern "C" void gpu_llama_bucket_part(const gpu_llama *m, int bucket, int rank, float **first, int64_t *n) {
    CHECK(m->shard_grads && bucket >= 0 && bucket < m->cfg.L + 2 && rank >= 0 && rank < m->opt.shard_world,
          "bucket %d, rank %d: the gradients are not sharded over %d ranks", bucket, rank, m->opt.shard_world);
    std::vector<int64_t> sizes(m->n_params);
    for (int i = 0; i < m->n_params; i++) sizes[i] = m->params[i].n;
    std::vector<shard_piece> pieces(m->n_params > 0 ? m->n_params : 1);
    int64_t elems = 0;
    pieces.resize(shard_pieces(pieces.data(), &elems, sizes.data(), m->n_params, m->opt.shard_world, rank));
    const float *lo = nullptr, *hi = nullptr;
    for (const shard_piece &pc : pieces) {
        const gl_param &p = m->params[pc.tensor];
        if (bucket_of(m, p) != bucket) continue;
        const float *g = gl_grad_f32(m, p);
        if (lo == nullptr || g + pc.lo < lo) lo = g + pc.lo;
        if (hi == nullptr || g + pc.hi > hi) hi = g + pc.hi;
    }
    float *b_first;
    int64_t b_n;
    gpu_llama_bucket(m, bucket, &b_first, &b_n);
    CHECK(lo == nullptr || (lo >= b_first && hi <= b_first + b_n), "bucket %d: rank %d's part lies outside it", bucket,
          rank);
    *first = const_cast<float *>(lo);
    *n = lo != nullptr ? hi - lo : 0;
}

extern "C" void gpu_llama_bucket_take(gpu_llama *m, int bucket, cudaStream_t stream) {
    CHECK(m->shard_grads, "bucket %d: the gradients are not sharded", bucket);
    for (int k = 0; k < m->n_pieces; k++) {
        const shard_piece &pc = m->pieces[k];
        const gl_param &p = m->params[pc.tensor];
        if (bucket_of(m, p) != bucket) continue;
        const int64_t n = pc.hi - pc.lo, blocks = (n + 255) / 256;
        const float *g = gl_grad_f32(m, p) + pc.lo;
        add_into<<<(unsigned)(blocks < 2048 ? blocks : 2048), 256, 0, stream>>>(m->s_grad + pc.off, g, n);
        KERNEL_CHECK(stream);
    }
    float *first;
    int64_t n;
    gpu_llama_bucket(m, bucket, &first, &n);
    if (n > 0) CUDA_CHECK(cudaMemsetAsync(first, 0, sizeof(float) * (size_t)n, stream));
}
