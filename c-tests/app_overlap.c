/* Application-like: communication overlapped with computation. Every iteration starts an
 * Iallreduce of the local state vector and an Ibcast from a rotating root, restarts a pair of
 * persistent requests (Send_init/Recv_init ring exchange), sends a message whose length
 * varies with the iteration to the right neighbour and receives the left one's through a
 * matched probe (Improbe polled while computing, then Imrecv), computes while all of that is
 * in flight, and only then waits. All received data are checked against closed forms; a
 * checksum of the state is printed every tenth of the run. Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=100 long-args=8000 long-args.2=2000 long-args.4=300 ckpt-ranks=4 ckpt-modes=continue,stop-restart ckpt-pace=8000
 */
#include "common.h"

#define V 64
#define RING 16
#define MAXVAR 256

static volatile uint64_t sink;

static long val(int rank, long it, int i)
{
    return (rank + 1) * 1000L + it * 7 + i;
}

static int varlen(int rank, long it)
{
    return 1 + (int)((rank * 37 + it * 11) % MAXVAR);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "app_overlap");
    const long iters = t_arg_long(argc, argv, 1, 100);
    printf("iterations %ld\n", iters);
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    MPI_Comm comm;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm));

    long state[V], sum[V], bc[4];
    long ring_out[RING], ring_in[RING];
    int var_out[MAXVAR], var_in[MAXVAR];
    MPI_Request ring_req[2];
    CHECK_MPI(MPI_Send_init(ring_out, RING, MPI_LONG, right, 10, comm, &ring_req[0]));
    CHECK_MPI(MPI_Recv_init(ring_in, RING, MPI_LONG, left, 10, comm, &ring_req[1]));
    uint64_t acc = 0;
    const long report = iters >= 10 ? iters / 10 : 1;

    for (long it = 0; it < iters; it++) {
        t_pause_point(comm, it); /* for checkpoint tests: see common.h */
        for (int i = 0; i < V; i++)
            state[i] = val(t_rank, it, i);
        for (int i = 0; i < RING; i++)
            ring_out[i] = val(t_rank, it, i) * 3;
        const int root = (int)(it % t_size);
        if (t_rank == root)
            for (int i = 0; i < 4; i++)
                bc[i] = it * 100 + i;
        const int nv = varlen(t_rank, it);
        for (int i = 0; i < nv; i++)
            var_out[i] = t_rank * 100000 + (int)(it % 1000) * 100 + i % 100;

        MPI_Request coll[2], vs, vr = MPI_REQUEST_NULL;
        CHECK_MPI(MPI_Iallreduce(state, sum, V, MPI_LONG, MPI_SUM, comm, &coll[0]));
        CHECK_MPI(MPI_Ibcast(bc, 4, MPI_LONG, root, comm, &coll[1]));
        CHECK_MPI(MPI_Startall(2, ring_req));
        CHECK_MPI(MPI_Isend(var_out, nv, MPI_INT, right, 20, comm, &vs));

        /* compute while polling for the variable-length message */
        uint64_t local = 0;
        int have = 0, spins = 0;
        MPI_Message msg;
        MPI_Status st;
        while (!have || spins < 50) {
            for (int k = 0; k < 200; k++)
                local = local * 6364136223846793005ULL + (uint64_t)(k + spins);
            spins++;
            if (!have) {
                CHECK_MPI(MPI_Improbe(left, 20, comm, &have, &msg, &st));
                if (have) {
                    int n;
                    CHECK_MPI(MPI_Get_count(&st, MPI_INT, &n));
                    CHECK_EQ(n, varlen(left, it));
                    CHECK_MPI(MPI_Imrecv(var_in, n, MPI_INT, &msg, &vr));
                }
            }
        }
        CHECK_MPI(MPI_Waitall(2, coll, MPI_STATUSES_IGNORE));
        CHECK_MPI(MPI_Waitall(2, ring_req, MPI_STATUSES_IGNORE));
        CHECK_MPI(MPI_Wait(&vs, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Wait(&vr, MPI_STATUS_IGNORE));

        for (int i = 0; i < V; i++) {
            long want = 0;
            for (int r = 0; r < t_size; r++)
                want += val(r, it, i);
            CHECK_EQ(sum[i], want);
        }
        for (int i = 0; i < 4; i++)
            CHECK_EQ(bc[i], it * 100 + i);
        for (int i = 0; i < RING; i++)
            CHECK_EQ(ring_in[i], val(left, it, i) * 3);
        const int nl = varlen(left, it);
        for (int i = 0; i < nl; i++)
            CHECK_EQ(var_in[i], left * 100000 + (int)(it % 1000) * 100 + i % 100);
        acc = acc * 31 + (uint64_t)sum[it % V] + (uint64_t)ring_in[it % RING] + (uint64_t)var_in[nl - 1];
        sink = local; /* the computation is only there to overlap with communication */
        if ((it + 1) % report == 0 || it + 1 == iters)
            printf("iteration %ld checksum %016llx\n", it + 1, (unsigned long long)acc);
    }
    CHECK_MPI(MPI_Request_free(&ring_req[0]));
    CHECK_MPI(MPI_Request_free(&ring_req[1]));
    CHECK_MPI(MPI_Comm_free(&comm));
    return t_finish();
}
