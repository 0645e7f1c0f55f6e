/* comm_test.c — the single-process job of train/comm.h: rank 0 of a world of 1, whose collectives
 * leave every value as it is; in-place reduce_scatter / all_gather, a different recv refused with a
 * message that names the operation and what it reduces; a broadcast from, or a reduce to, a rank
 * that does not exist refused; send and recv refused (no peer). The MPI job's collectives are tested under
 * mpirun by comm_mpi_test (tests/unit/comm_mpi_test.sh). */
#include <string.h>

#include "tests/common/harness.h"
#include "train/comm.h"

int main(void) {
    struct train_comm c;
    comm_single(&c);
    struct io_err e = {{0}};
    EXPECT(c.rank == 0 && c.world == 1 && c.local_rank == 0 && comm_is_root(&c), "rank %d of %d (local %d)", c.rank,
           c.world, c.local_rank);

    int64_t counts[3] = {7, -2, 1ll << 40};
    EXPECT(c.sum(c.self, counts, 3, COMM_I64, "counts", &e) == 0 && counts[0] == 7 && counts[1] == -2 &&
               counts[2] == 1ll << 40,
           "sum of i64 over one rank is the identity: %s", e.msg);
    double nll = 3.25;
    EXPECT(c.sum(c.self, &nll, 1, COMM_F64, "nll", &e) == 0 && nll == 3.25, "sum of f64: %s", e.msg);
    EXPECT(c.sum(c.self, &nll, 1, COMM_BF16, "nll", &e) == -1 && strstr(e.msg, "nll") != NULL,
           "sum of a device type on the host refused: %s", e.msg);

    char bytes[4] = "abc";
    EXPECT(c.broadcast(c.self, bytes, sizeof bytes, 0, "options", &e) == 0 && strcmp(bytes, "abc") == 0,
           "broadcast from rank 0: %s", e.msg);
    EXPECT(c.broadcast(c.self, bytes, sizeof bytes, 1, "options", &e) == -1 && strstr(e.msg, "rank 1") != NULL,
           "broadcast from rank 1 refused: %s", e.msg);
    EXPECT(c.barrier(c.self, "start", &e) == 0, "barrier: %s", e.msg);

    float slab[5] = {1, 2, 3, 4, 5}, other[5] = {0};
    EXPECT(c.all_reduce(c.self, slab, 5, COMM_F32, NULL, "gradients", &e) == 0 && slab[4] == 5.0f,
           "all_reduce over one rank is the identity: %s", e.msg);
    EXPECT(c.reduce_scatter(c.self, slab, slab, 5, COMM_F32, NULL, "gradients", &e) == 0 && slab[0] == 1.0f,
           "reduce_scatter in place: %s", e.msg);
    EXPECT(c.all_gather(c.self, slab, slab, 5, COMM_F32, NULL, "weights", &e) == 0 && slab[2] == 3.0f,
           "all_gather in place: %s", e.msg);
    EXPECT(c.reduce_scatter(c.self, slab, other, 5, COMM_F32, NULL, "gradients", &e) == -1 &&
               strstr(e.msg, "reduce_scatter of gradients") != NULL && other[0] == 0.0f,
           "reduce_scatter into another buffer refused, nothing written: %s", e.msg);
    EXPECT(c.all_gather(c.self, slab, other, 5, COMM_F32, NULL, "weights", &e) == -1 &&
               strstr(e.msg, "all_gather of weights") != NULL,
           "all_gather into another buffer refused: %s", e.msg);
    EXPECT(c.bcast(c.self, slab, 5, COMM_F32, 0, NULL, "weights", &e) == 0 && slab[1] == 2.0f,
           "bcast from rank 0 is the identity: %s", e.msg);
    EXPECT(c.bcast(c.self, slab, 5, COMM_F32, 1, NULL, "weights", &e) == -1 && strstr(e.msg, "rank 1") != NULL,
           "bcast from rank 1 refused: %s", e.msg);
    EXPECT(c.reduce(c.self, slab, 5, COMM_F32, 0, NULL, "gradient bucket", &e) == 0 && slab[0] == 1.0f &&
               slab[4] == 5.0f,
           "reduce to rank 0 is the identity: %s", e.msg);
    EXPECT(c.reduce(c.self, slab, 5, COMM_F32, 1, NULL, "gradient bucket", &e) == -1 &&
               strstr(e.msg, "reduce of gradient bucket to rank 1") != NULL && slab[0] == 1.0f && slab[3] == 4.0f,
           "reduce to rank 1 refused, nothing written: %s", e.msg);
    EXPECT(c.group(c.self, 1, &e) == 0 && c.group(c.self, 0, &e) == 0 && c.wait(c.self, NULL, "step", &e) == 0,
           "group and wait: %s", e.msg);
    EXPECT(c.send(c.self, bytes, 1, 0, "state", &e) == -1 && strstr(e.msg, "send of state") != NULL,
           "send refused (no peer): %s", e.msg);
    EXPECT(c.recv(c.self, bytes, 1, 0, "state", &e) == -1 && strstr(e.msg, "recv of state") != NULL,
           "recv refused (no peer): %s", e.msg);
    c.destroy(c.self);
    return test_finish("comm_test");
}
