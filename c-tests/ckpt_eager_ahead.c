/* Checkpoint workload: one rank runs ahead through collectives it can finish alone. Rank 0
 * broadcasts on a pair communicator {0, last} (small messages: the root finishes at once,
 * without waiting for the receiver), while the last rank first has to take part in an
 * Allreduce on the communicator of every other rank ("the others", paced, so slow) before it
 * receives each broadcast; every 16th iteration everybody meets in a Barrier. A checkpoint
 * usually finds rank 0 several broadcasts ahead: to catch up the last rank needs more
 * Allreduces than anybody has started, so collective targets taken once (the maximum of the
 * counters over the members) cannot all be reached; they must grow as ranks need them.
 * A digest of the received values is printed every twentieth of the run. Argument: the
 * iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=64 long-args=400 ckpt-ranks=2,4 ckpt-pace.2=5000 ckpt-pace.4=5000 ckpt-modes=continue,stop-restart
 */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_eager_ahead");
    const long iters = t_arg_long(argc, argv, 1, 64);
    printf("iterations %ld\n", iters);
    const long report = iters >= 20 ? iters / 20 : 1;
    const int last = t_size - 1;

    /* the pair {0, last} (a single rank when there is one), and everybody but rank 0 */
    MPI_Comm pair, others;
    const int in_pair = t_rank == 0 || t_rank == last;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, in_pair ? 0 : MPI_UNDEFINED, t_rank, &pair));
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, t_rank > 0 ? 0 : MPI_UNDEFINED, t_rank, &others));

    uint64_t digest = 14695981039346656037ULL;
#define FOLD(x) (digest = (digest ^ (uint64_t)(x)) * 1099511628211ULL)
    for (long it = 1; it <= iters; it++) {
        if (t_rank > 0) /* rank 0 is never paced: it runs ahead */
            t_pause_point(others, it);
        if (others != MPI_COMM_NULL) {
            long v = t_rank * 1000003L + it, sum;
            CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, others));
            long want = 0;
            for (int r = 1; r < t_size; r++)
                want += r * 1000003L + it;
            CHECK_EQ(sum, want);
            FOLD(sum);
        }
        if (pair != MPI_COMM_NULL) {
            long b = t_rank == 0 ? it * 7919 : -1;
            CHECK_MPI(MPI_Bcast(&b, 1, MPI_LONG, 0, pair));
            CHECK_EQ(b, it * 7919);
            FOLD(b);
        }
        if (it % 16 == 0)
            CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        if (it % report == 0)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }
    if (pair != MPI_COMM_NULL)
        CHECK_MPI(MPI_Comm_free(&pair));
    if (others != MPI_COMM_NULL)
        CHECK_MPI(MPI_Comm_free(&others));
    return t_finish();
}
