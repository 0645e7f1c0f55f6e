/* fuzz_peft_config.c — libFuzzer target: io/peft's adapter_config.json parser on arbitrary bytes.
 * Property: an accepted config written back by peft_config_json parses to the same config.
 * Build and run: tools/fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/peft.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct peft_config c, d;
    struct io_err e;
    if (peft_config_parse(&c, (const char *)data, size, "adapter_config.json", &e) != 0) return 0;
    char *json = peft_config_json(&c, &e);
    if (json == NULL) return 0; /* e.g. a dropout PEFT accepts but refine's writer refuses */
    if (peft_config_parse(&d, json, strlen(json), "rewritten", &e) != 0) abort();
    if (d.r != c.r || d.lora_alpha != c.lora_alpha || d.lora_dropout != c.lora_dropout || d.use_dora != c.use_dora ||
        d.use_rslora != c.use_rslora || d.targets != c.targets || strcmp(d.base_model, c.base_model) != 0 ||
        d.n_layers_to_transform != c.n_layers_to_transform)
        abort();
    free(json);
    return 0;
}
