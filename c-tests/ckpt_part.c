/* Checkpoint workload: partitioned communication (MPI 4.0) in use across a checkpoint. Made
 * once: a Psend_init to the right and a Precv_init from the left (8 partitions of 16 doubles),
 * and a second pair with a vector type freed after the init (4 partitions of 3 strided ints),
 * to the rank two away. Each iteration starts all four, marks the first half of the send's
 * partitions ready one by one (MPI_Pready), pauses a while with the rest not ready (a
 * checkpoint then waits for them), marks the rest with MPI_Pready_range and the small pair's
 * with MPI_Pready_list, polls MPI_Parrived, and waits. All data are checked; a digest is
 * printed every twentieth of the run. Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=40 long-args=2000 long-args.4=200 ckpt-ranks=2,4 ckpt-pace.4=10000
 */
#include "common.h"

#define NP 8
#define PC 16
#define SP 4

static double dval(int rank, long it, int i)
{
    return rank * 1000.0 + (double)(it % 4093) + i * 0.5;
}

/* Half of the pace (MPICR_TEST_PACE_US), outside MPI, with partitions not ready yet. */
static void half_pace(void)
{
    const char *s = getenv("MPICR_TEST_PACE_US");
    long us = (s && *s) ? atol(s) / 2 : 0;
    if (us > 0) {
        struct timespec nap = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&nap, NULL);
    }
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_part");
    const long iters = t_arg_long(argc, argv, 1, 40);
    printf("iterations %ld\n", iters);
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    const int two_on = (t_rank + 2) % t_size, two_back = (t_rank + t_size - 2) % t_size;
    const long report = iters >= 20 ? iters / 20 : 1;

    double out[NP * PC], in[NP * PC];
    int sout[SP * 6], sin_[SP * 6];
    MPI_Datatype vec, strided; /* 3 ints, every other one, 6 ints apart */
    CHECK_MPI(MPI_Type_vector(3, 1, 2, MPI_INT, &vec));
    CHECK_MPI(MPI_Type_create_resized(vec, 0, 6 * sizeof(int), &strided));
    CHECK_MPI(MPI_Type_free(&vec));
    CHECK_MPI(MPI_Type_commit(&strided));
    enum { RECV, SEND, SRECV, SSEND, NR };
    MPI_Request r[NR];
    CHECK_MPI(MPI_Precv_init(in, NP, PC, MPI_DOUBLE, left, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &r[RECV]));
    CHECK_MPI(MPI_Psend_init(out, NP, PC, MPI_DOUBLE, right, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &r[SEND]));
    CHECK_MPI(MPI_Precv_init(sin_, SP, 1, strided, two_back, 6, MPI_COMM_WORLD, MPI_INFO_NULL, &r[SRECV]));
    CHECK_MPI(MPI_Psend_init(sout, SP, 1, strided, two_on, 6, MPI_COMM_WORLD, MPI_INFO_NULL, &r[SSEND]));
    CHECK_MPI(MPI_Type_free(&strided)); /* the requests keep it */

    uint64_t digest = 14695981039346656037ULL;
#define FOLD(p, n) (digest = (digest ^ t_fnv((p), (n))) * 1099511628211ULL)
    long arrived_early = 0;
    for (long it = 1; it <= iters; it++) {
        t_pause_point(MPI_COMM_WORLD, it); /* for checkpoint tests: see common.h */
        for (int i = 0; i < NP * PC; i++)
            in[i] = -1.0;
        for (int i = 0; i < SP * 6; i++)
            sin_[i] = -1, sout[i] = i % 2 ? -7 : (int)(t_rank * 10000 + it * 10 + i);
        CHECK_MPI(MPI_Startall(NR, r));
        for (int p = 0; p < NP / 2; p++) {
            for (int i = 0; i < PC; i++)
                out[p * PC + i] = dval(t_rank, it, p * PC + i);
            CHECK_MPI(MPI_Pready(p, r[SEND]));
        }
        half_pace();
        for (int p = NP / 2; p < NP; p++)
            for (int i = 0; i < PC; i++)
                out[p * PC + i] = dval(t_rank, it, p * PC + i);
        CHECK_MPI(MPI_Pready_range(NP / 2, NP - 1, r[SEND]));
        int list[SP] = {3, 1, 0, 2};
        CHECK_MPI(MPI_Pready_list(SP, list, r[SSEND]));
        int flag = 0;
        CHECK_MPI(MPI_Parrived(r[RECV], 0, &flag));
        arrived_early += flag != 0;
        if (it % 2)
            CHECK_MPI(MPI_Waitall(NR, r, MPI_STATUSES_IGNORE));
        else
            for (int k = NR - 1; k >= 0; k--)
                CHECK_MPI(MPI_Wait(&r[k], MPI_STATUS_IGNORE));
        for (int i = 0; i < NP * PC; i++)
            CHECK(in[i] == dval(left, it, i));
        for (int i = 0; i < SP * 6; i++)
            CHECK_EQ(sin_[i], i % 2 ? -1 : (int)(two_back * 10000 + it * 10 + i));
        FOLD(in, sizeof in);
        FOLD(sin_, sizeof sin_);
        if (it % report == 0 || it == iters)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }
    for (int k = 0; k < NR; k++)
        CHECK_MPI(MPI_Request_free(&r[k]));
    printf("partitioned requests freed; early arrivals %s\n", arrived_early >= 0 ? "counted" : "?");
    return t_finish();
}
