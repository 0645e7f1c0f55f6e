/* fuzz_safetensors.c — libFuzzer target: io/safetensors on arbitrary bytes (open, validate, and
 * convert every tensor refine converts). Build and run: tools/fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>

#include "io/safetensors.h"
#include "tests/fuzz/fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size, ".safetensors");
    struct safetensors st;
    struct io_err e;
    if (safetensors_open(&st, path, &e) != 0) return 0;
    for (int i = 0; i < st.n_tensors; i++) {
        const struct st_tensor *t = &st.tensors[i];
        if (t->numel > (1 << 22)) continue;
        float *f = malloc((size_t)t->numel * sizeof *f + 1);
        uint16_t *h = malloc((size_t)t->numel * sizeof *h + 1);
        st_tensor_to_f32(f, t, &e);
        st_tensor_to_bf16(h, t, &e);
        free(f);
        free(h);
        if (safetensors_find(&st, t->name) == NULL) abort();
    }
    safetensors_close(&st);
    return 0;
}
