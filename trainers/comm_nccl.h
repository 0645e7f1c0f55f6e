/* comm_nccl.h — the GPU trainer's job: a launcher's job (comm_open.h) whose slab collectives run
 * over NCCL on device memory (train/comm.h).
 *
 * comm_nccl_join(c) takes the job c (the MPI plugin's: rank, world, local rank) and
 *   1. picks this rank's GPU: the local rank's (cudaSetDevice), or device 0 where the launcher shows
 *      each process one GPU (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank);
 *   2. loads NCCL: REFINE_NCCL_LIBRARY, else libnccl.so.2 from the library path, else the CUDA
 *      toolkit's (/usr/local/cuda/lib64) — loaded at run time like the MPI plugin, so that a
 *      single-GPU run needs no NCCL either;
 *   3. creates the communicator: rank 0's ncclGetUniqueId broadcast over c, ncclCommInitRank;
 *   4. rewires c in place: sum, broadcast, barrier, send, recv, serve and roll_call stay the MPI
 *      job's; all_reduce, reduce_scatter, all_gather, bcast and reduce enqueue NCCL collectives
 *      on the given CUDA stream (COMM_F32 ncclFloat32, COMM_F64 ncclFloat64, COMM_BF16 ncclBfloat16,
 *      COMM_U8 ncclUint8, COMM_I64 ncclInt64; sums with ncclSum), group is ncclGroupStart/End;
 *      wait polls the stream (an event) and the communicator's asynchronous error while answering
 *      peers' roll calls: an NCCL error, or no completion within the job's timeout, aborts the
 *      communicator (ncclCommAbort), calls the roll (naming the ranks that do not answer) and
 *      fails with one sentence — the caller exits and the launcher ends the job.
 * Reduction order: NCCL's (ring or tree, the same for a given world size, message size and
 * machine); a world of one copies, so `mpirun -np 1` is bitwise the single-process run.
 * destroy: ncclCommDestroy, then the MPI job's destroy.
 */
#ifndef REFINE_TRAINERS_COMM_NCCL_H
#define REFINE_TRAINERS_COMM_NCCL_H

#include "io/error.h"
#include "train/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 0, or -1 with e (no CUDA device, a local rank without its GPU, NCCL not found, init failed);
 * on failure c is unchanged. */
int comm_nccl_join(struct train_comm *c, struct io_err *e);

/* The CUDA device comm_nccl_join chose (−1 before). */
int comm_nccl_device(void);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_COMM_NCCL_H */
