/* family.c — the table of the Llama family's linear layers (family.h). */
#include "io/family.h"

#include "io/check.h"

const struct llama_linear_def llama_linears[LLAMA_N_LINEAR] = {
    [LLAMA_Q] = {"q", "self_attn.q_proj", "q_proj", MW_Q, MW_Q_BIAS},
    [LLAMA_K] = {"k", "self_attn.k_proj", "k_proj", MW_K, MW_K_BIAS},
    [LLAMA_V] = {"v", "self_attn.v_proj", "v_proj", MW_V, MW_V_BIAS},
    [LLAMA_O] = {"o", "self_attn.o_proj", "o_proj", MW_O, MW_COUNT},
    [LLAMA_GATE] = {"gate", "mlp.gate_proj", "gate_proj", MW_GATE, MW_COUNT},
    [LLAMA_UP] = {"up", "mlp.up_proj", "up_proj", MW_UP, MW_COUNT},
    [LLAMA_DOWN] = {"down", "mlp.down_proj", "down_proj", MW_DOWN, MW_COUNT},
};

void llama_linear_shape(const struct model_config *c, enum llama_linear t, int *c_out, int *c_in) {
    CHECK(t >= 0 && t < LLAMA_N_LINEAR, "linear %d", (int)t);
    int64_t s[2];
    CHECK(model_weight_shape(s, c, llama_linears[t].weight) == 2, "linear %d is not 2-D", (int)t);
    *c_out = (int)s[0];
    *c_in = (int)s[1];
}

int llama_linear_has_bias(const struct model_config *c, enum llama_linear t) {
    CHECK(t >= 0 && t < LLAMA_N_LINEAR, "linear %d", (int)t);
    int64_t s[2];
    return llama_linears[t].bias != MW_COUNT && model_weight_shape(s, c, llama_linears[t].bias) > 0;
}

int llama_linear_of_weight(enum model_weight w) {
    for (int t = 0; t < LLAMA_N_LINEAR; t++)
        if (llama_linears[t].weight == w) return t;
    return -1;
}
