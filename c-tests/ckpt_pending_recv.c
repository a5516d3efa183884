/* Checkpoint workload: receives with derived datatypes that stay pending through every
 * checkpoint (their messages are sent only after the last step), next to an inactive
 * persistent send of a vector type, while the ranks compute and reduce step by step. A
 * checkpoint cancels such receives in the library it releases and posts them again on the new
 * one; nothing of it may show in the output (MPICH 5 leaks an object of its datatype engine for
 * every such cancellation and says so when that library copy is finalized, and MPICH reports
 * persistent requests left at its finalize). At the end the late messages are checked.
 * Argument: the step count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<step> (common.h).
 * mpicr-test: ranks=1,2,4 args=40 long-args=1500 long-args.4=150 ckpt-ranks=2,4 ckpt-pace.4=15000
 */
#include "common.h"

#define N 8

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_pending_recv");
    const long steps = t_arg_long(argc, argv, 1, 40);
    const long report = steps >= 20 ? steps / 20 : 1;
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;

    /* every other int of 2N: a vector; and an indexed type of the same N ints */
    MPI_Datatype vec, idx;
    CHECK_MPI(MPI_Type_vector(N, 1, 2, MPI_INT, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));
    int bl[2] = {N / 2, N / 2}, di[2] = {0, N};
    CHECK_MPI(MPI_Type_indexed(2, bl, di, MPI_INT, &idx));
    CHECK_MPI(MPI_Type_commit(&idx));

    int in_vec[2 * N], in_idx[2 * N], out[2 * N];
    for (int i = 0; i < 2 * N; i++) {
        in_vec[i] = in_idx[i] = -1;
        out[i] = t_rank * 100 + i;
    }
    MPI_Request late[2], persistent;
    CHECK_MPI(MPI_Irecv(in_vec, 1, vec, left, 1, MPI_COMM_WORLD, &late[0]));
    CHECK_MPI(MPI_Irecv(in_idx, 1, idx, left, 2, MPI_COMM_WORLD, &late[1]));
    CHECK_MPI(MPI_Send_init(out, 1, vec, right, 3, MPI_COMM_WORLD, &persistent));

    double acc = 1.0;
    for (long s = 1; s <= steps; s++) {
        t_pause_point(MPI_COMM_WORLD, s);
        t_pace(s);
        /* nothing is sent before every rank has left the loop, i.e. passed the Allreduce of the
         * last step, which this rank has not entered yet */
        int flag = 1;
        CHECK_MPI(MPI_Testall(2, late, &flag, MPI_STATUSES_IGNORE));
        CHECK(!flag);
        double mine = (double)((t_rank + 1) * s % 97), sum = 0;
        CHECK_MPI(MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        acc = acc * 0.5 + sum;
        if (s % report == 0 || s == steps)
            printf("step %ld acc %.6f\n", s, acc);
    }

    /* the late messages, then one round of the persistent send */
    CHECK_MPI(MPI_Send(out, 1, vec, right, 1, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Send(out, 1, idx, right, 2, MPI_COMM_WORLD));
    MPI_Status st[2];
    CHECK_MPI(MPI_Waitall(2, late, st));
    for (int i = 0; i < 2 * N; i++) {
        CHECK_EQ(in_vec[i], i % 2 == 0 ? left * 100 + i : -1);
        CHECK_EQ(in_idx[i], (i < N / 2 || (i >= N && i < N + N / 2)) ? left * 100 + i : -1);
    }
    int in_p[2 * N];
    MPI_Request r;
    CHECK_MPI(MPI_Irecv(in_p, 1, vec, left, 3, MPI_COMM_WORLD, &r));
    CHECK_MPI(MPI_Start(&persistent));
    CHECK_MPI(MPI_Wait(&persistent, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    for (int i = 0; i < 2 * N; i += 2)
        CHECK_EQ(in_p[i], left * 100 + i);
    printf("late receives from rank %d: ok\n", left);
    CHECK_MPI(MPI_Request_free(&persistent));
    CHECK_MPI(MPI_Type_free(&vec));
    CHECK_MPI(MPI_Type_free(&idx));
    return t_finish();
}
