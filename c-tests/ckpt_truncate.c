/* Checkpoint workload: receives too small for their messages, every step, under
 * MPI_ERRORS_RETURN: a nonblocking one completed by MPI_Wait and a blocking MPI_Recv, each
 * failing with MPI_ERR_TRUNCATE, then a receive that fits, whose data is checked. A truncated
 * receive still took its message from the sender: a checkpoint's drain must count it as
 * received, or it waits for ever for a message that is gone (MPICH's pt2pt/sendself through a
 * checkpoint on MPICH 4.0.2, whose library fails such receives when `mpicr run` turns UCX's
 * rendezvous off, timed out in the drain). Only error classes, sources and tags are printed:
 * what a truncated receive leaves in its buffer is the library's choice.
 * Argument: the step count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<step> (common.h).
 * mpicr-test: ranks=1,2,4 args=40 long-args=1500 long-args.4=150 ckpt-ranks=2,4 ckpt-pace.4=15000
 */
#include "common.h"

#define N 64

/* The class of `rc`, which must say truncation, and the status of that receive. */
static void check_truncated(int rc, const MPI_Status *st, int source, int tag)
{
    int cls = MPI_SUCCESS;
    CHECK_MPI(MPI_Error_class(rc, &cls));
    CHECK_MSG(cls == MPI_ERR_TRUNCATE, "expected MPI_ERR_TRUNCATE, got %s", t_errclass_name(cls));
    CHECK_EQ(st->MPI_SOURCE, source);
    CHECK_EQ(st->MPI_TAG, tag);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_truncate");
    const long steps = t_arg_long(argc, argv, 1, 40);
    const long report = steps >= 20 ? steps / 20 : 1;
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));

    int out[N], in[N];
    long truncated = 0;
    for (long s = 1; s <= steps; s++) {
        t_pause_point(MPI_COMM_WORLD, s);
        for (int i = 0; i < N; i++)
            out[i] = (int)(t_rank * 100000 + s * N + i);
        MPI_Status st;

        /* nonblocking: room for half the message */
        MPI_Request r;
        CHECK_MPI(MPI_Irecv(in, N / 2, MPI_INT, left, 1, MPI_COMM_WORLD, &r));
        CHECK_MPI(MPI_Send(out, N, MPI_INT, right, 1, MPI_COMM_WORLD));
        check_truncated(MPI_Wait(&r, &st), &st, left, 1);

        /* blocking: room for a quarter */
        MPI_Request sr;
        CHECK_MPI(MPI_Isend(out, N, MPI_INT, right, 2, MPI_COMM_WORLD, &sr));
        check_truncated(MPI_Recv(in, N / 4, MPI_INT, left, 2, MPI_COMM_WORLD, &st), &st, left, 2);
        CHECK_MPI(MPI_Wait(&sr, MPI_STATUS_IGNORE));
        truncated += 2;

        /* and one that fits */
        CHECK_MPI(MPI_Sendrecv(out, N, MPI_INT, right, 3, in, N, MPI_INT, left, 3, MPI_COMM_WORLD, &st));
        for (int i = 0; i < N; i++)
            CHECK_EQ(in[i], (int)(left * 100000 + s * N + i));
        if (s % report == 0 || s == steps)
            printf("step %ld: %ld truncated receives from rank %d, MPI_ERR_TRUNCATE each\n", s, truncated, left);
    }
    return t_finish();
}
