/* config_write.c — struct model_config → HF config.json (see config.h). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "io/config.h"
#include "io/file.h"

static const char *architecture(const char *model_type) {
    if (strcmp(model_type, "qwen2") == 0) return "Qwen2ForCausalLM";
    if (strcmp(model_type, "mistral") == 0) return "MistralForCausalLM";
    return "LlamaForCausalLM";
}

int config_write_hf_json(const struct model_config *c, const char *path, struct io_err *e) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return io_fail(e, "%s: out of memory", path);
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(architecture(c->model_type)));
    cJSON_AddStringToObject(j, "model_type", c->model_type[0] ? c->model_type : "llama");
    cJSON_AddNumberToObject(j, "hidden_size", c->C);
    cJSON_AddNumberToObject(j, "intermediate_size", c->F);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->L);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->H);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->KVH);
    cJSON_AddNumberToObject(j, "head_dim", c->D);
    cJSON_AddNumberToObject(j, "vocab_size", c->V);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings != 0);
    if (strcmp(c->model_type, "qwen2") != 0) cJSON_AddBoolToObject(j, "attention_bias", c->attention_bias != 0);
    cJSON_AddBoolToObject(j, "mlp_bias", 0);
    if (c->rope_scaling.kind == ROPE_SCALING_LLAMA3) {
        cJSON *r = cJSON_AddObjectToObject(j, "rope_scaling");
        cJSON_AddStringToObject(r, "rope_type", "llama3");
        cJSON_AddNumberToObject(r, "factor", c->rope_scaling.factor);
        cJSON_AddNumberToObject(r, "low_freq_factor", c->rope_scaling.low_freq_factor);
        cJSON_AddNumberToObject(r, "high_freq_factor", c->rope_scaling.high_freq_factor);
        cJSON_AddNumberToObject(r, "original_max_position_embeddings", c->rope_scaling.original_max_position_embeddings);
    } else {
        cJSON_AddNullToObject(j, "rope_scaling");
    }
    if (c->bos_token_id >= 0) cJSON_AddNumberToObject(j, "bos_token_id", c->bos_token_id);
    if (c->n_eos == 1) {
        cJSON_AddNumberToObject(j, "eos_token_id", c->eos_token_ids[0]);
    } else if (c->n_eos > 1) {
        cJSON *a = cJSON_AddArrayToObject(j, "eos_token_id");
        for (int i = 0; i < c->n_eos; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(c->eos_token_ids[i]));
    }
    if (c->pad_token_id >= 0) cJSON_AddNumberToObject(j, "pad_token_id", c->pad_token_id);
    if (c->sliding_window > 0) {
        cJSON_AddNumberToObject(j, "sliding_window", c->sliding_window);
        if (strcmp(c->model_type, "qwen2") == 0) cJSON_AddBoolToObject(j, "use_sliding_window", 1);
    }
    cJSON_AddStringToObject(j, "torch_dtype", c->torch_dtype[0] ? c->torch_dtype : "bfloat16");
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return io_fail(e, "%s: out of memory", path);
    const int rc = write_file_atomic(path, text, strlen(text), e);
    free(text);
    return rc;
}
