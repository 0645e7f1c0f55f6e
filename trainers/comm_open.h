/* comm_open.h — the job a trainer program runs in (train/comm.h): one process, or the ranks a
 * launcher started.
 *
 * comm_open decides from the environment the launchers set for the processes they start:
 *   OMPI_COMM_WORLD_SIZE        Open MPI's mpirun / mpiexec (any size: `mpirun -np 1` is a job of one
 *                               rank, through the same code as eight);
 *   PMI_SIZE                    MPICH and Intel MPI (Hydra), Slurm's srun --mpi=pmi2;
 *   MV2_COMM_WORLD_SIZE         MVAPICH2's mpirun_rsh;
 *   SLURM_STEP_NUM_TASKS > 1    srun (with SLURM_PROCID): a step of several tasks (a step of one — an
 *                               interactive `srun --pty bash`, say — runs as one process).
 * REFINE_COMM=single or =mpi overrides the guess. Launched, it loads the MPI plugin
 * librefine_mpi.so (trainers/comm_mpi.c; RTLD_GLOBAL, as Open MPI's components need) from
 * REFINE_MPI_PLUGIN, else from beside the program's executable, and opens the job with it; a
 * plain run loads nothing and needs no MPI library. When the plugin or the MPI library it needs
 * cannot be loaded, one message says which, and what to install or set.
 *
 * In a job of several ranks, io_exit's messages name the rank ("refine: rank 2: ...").
 */
#ifndef REFINE_TRAINERS_COMM_OPEN_H
#define REFINE_TRAINERS_COMM_OPEN_H

#include <stddef.h>

#include "io/error.h"
#include "train/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the environment says a launcher started this process (and which variable, into why). */
int comm_launched(char *why, size_t cap);

/* The job: comm_single (*launched = 0), or the launcher's job through the MPI plugin (*launched =
 * 1, also for a job of one rank). 0, or -1 with e. */
int comm_open(struct train_comm *c, int *launched, struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_COMM_OPEN_H */
