/* cpu_engine.h — the CPU engine: train/engine.h over the reference model (ref/llama), the oracle
 * trainer //ref:train. What it computes and how (fp32, or bf16 rounded where the GPU rounds) is
 * described in cpu_engine.c; both functions fit struct trainer (cli.h).
 */
#ifndef REFINE_TRAINERS_CPU_ENGINE_H
#define REFINE_TRAINERS_CPU_ENGINE_H

#include "io/error.h"
#include "io/model_source.h"
#include "train/comm.h"
#include "train/engine.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options the CPU engine cannot run (adapter dropout): 0, or -1 with one message. */
int cpu_engine_check(const struct train_options *o, struct io_err *e);
/* The engine for the opened model; --micro-batch is taken as given (no memory plan). */
int cpu_engine_create(struct train_engine *eng, struct train_options *o, const struct model_source *src,
                      int max_micro_batch, const struct train_comm *comm, struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_CPU_ENGINE_H */
