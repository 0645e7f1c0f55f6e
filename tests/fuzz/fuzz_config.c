/* fuzz_config.c — libFuzzer target: io/config's config.json reader on arbitrary bytes; an
 * accepted config must pass config_validate. Build and run: tools/fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>

#include "io/config.h"
#include "tests/fuzz/fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size, ".json");
    struct model_config c;
    struct io_err e;
    if (config_from_hf_json(&c, path, &e) != 0) return 0;
    if (config_validate(&c, &e) != 0) abort();
    config_check_seq_len(&c, 4096, &e);
    return 0;
}
