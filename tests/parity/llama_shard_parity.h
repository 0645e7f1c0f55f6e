/* llama_shard_parity.h — the sharded optimizer's parity cases (llama_shard_parity.c), run by the
 * llama_dp_parity binary: the sharded GPU model against the unsharded one, bit for bit. */
#ifndef REFINE_TESTS_PARITY_LLAMA_SHARD_PARITY_H
#define REFINE_TESTS_PARITY_LLAMA_SHARD_PARITY_H

#include <stdint.h>

void llama_shard_parity(uint64_t seed);

#endif /* REFINE_TESTS_PARITY_LLAMA_SHARD_PARITY_H */
