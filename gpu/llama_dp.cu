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
 */
#include <stdio.h>
#include <string.h>

#include "gpu/llama_internal.h"
#include "io/check.h"

namespace {

/* The bucket of trainable tensor p (gpu/llama.h's numbering). */
int bucket_of(const gpu_llama *m, const gl_param &p) {
    int l = -1;
    if (sscanf(p.name, "model.layers.%d.", &l) == 1) {
        CHECK(l >= 0 && l < m->cfg.L, "tensor %s: layer %d of %d", p.name, l, m->cfg.L);
        return m->cfg.L - l;
    }
    if (strncmp(p.name, "model.embed_tokens.", 19) == 0) return m->cfg.L + 1;
    return 0;
}

}  // namespace

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
        if (lo == nullptr || p.grad < lo) lo = p.grad;
        if (hi == nullptr || p.grad + p.n > hi) hi = p.grad + p.n;
    }
    /* no other bucket's gradient lies inside this range */
    for (int i = 0; i < m->n_params && lo != nullptr; i++) {
        const gl_param &p = m->params[i];
        if (bucket_of(m, p) == bucket) continue;
        CHECK(p.grad + p.n <= lo || p.grad >= hi, "bucket %d [%p, %p) overlaps the gradient of %s", bucket,
              (const void *)lo, (const void *)hi, p.name);
    }
    *first = const_cast<float *>(lo);
    *n = lo != nullptr ? hi - lo : 0;
}

extern "C" cudaStream_t gpu_llama_stream(const gpu_llama *m) { return m->stream; }

extern "C" double *gpu_llama_nll_sum_device(gpu_llama *m) { return m->nll_acc; }
