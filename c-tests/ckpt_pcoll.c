/* Checkpoint workload: persistent collectives in use across a checkpoint. Made once:
 * Allreduce_init (MPI_SUM of 8 doubles), Bcast_init of a vector type freed right after the init,
 * Barrier_init, Alltoallv_init (counts and displacements from arrays that are changed after the
 * init, as the program may) and Reduce_init on a split communicator (MPI_MAX). Each iteration
 * starts the Bcast, Barrier, Alltoallv and Reduce ones and waits for them; the Allreduce is started at
 * the end of one iteration and waited for after the next one's pause point, so it is active
 * wherever a checkpoint finds the program between iterations. Each iteration also receives
 * from the left through a vector type freed before the message is sent (a pending receive whose
 * type only lives as the shim's recipe). All data are checked; a digest is printed every
 * twentieth of the run. Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=40 long-args=2000 long-args.4=200 ckpt-ranks=2,4 ckpt-pace.4=10000
 */
#include "common.h"

#define NA 8

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_pcoll");
    const long iters = t_arg_long(argc, argv, 1, 40);
    printf("iterations %ld\n", iters);
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    const long report = iters >= 20 ? iters / 20 : 1;

    MPI_Comm half;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, t_rank, &half));
    int hrank, hsize;
    CHECK_MPI(MPI_Comm_rank(half, &hrank));
    CHECK_MPI(MPI_Comm_size(half, &hsize));

    double ain[NA], aout[NA];
    int bbuf[12];
    long rin, rout;
    int *sc = calloc(t_size, sizeof(int)), *sd = calloc(t_size, sizeof(int));
    int *rc = calloc(t_size, sizeof(int)), *rd = calloc(t_size, sizeof(int));
    int *vs = calloc(2 * t_size, sizeof(int)), *vr = calloc(2 * t_size, sizeof(int));
    CHECK(sc && sd && rc && rd && vs && vr);
    for (int p = 0; p < t_size; p++) { /* 1 int to even peers, 2 to odd ones */
        sc[p] = 1 + p % 2, sd[p] = 2 * p;
        rc[p] = 1 + t_rank % 2, rd[p] = 2 * p;
    }

    MPI_Datatype every_other; /* 6 ints, every other one of bbuf */
    CHECK_MPI(MPI_Type_vector(6, 1, 2, MPI_INT, &every_other));
    CHECK_MPI(MPI_Type_commit(&every_other));
    enum { ALLRED, BCAST, BARRIER, A2AV, REDUCE, NPR };
    MPI_Request pr[NPR];
    CHECK_MPI(MPI_Allreduce_init(ain, aout, NA, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &pr[ALLRED]));
    CHECK_MPI(MPI_Bcast_init(bbuf, 1, every_other, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &pr[BCAST]));
    CHECK_MPI(MPI_Type_free(&every_other)); /* the request keeps it */
    CHECK_MPI(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &pr[BARRIER]));
    CHECK_MPI(MPI_Alltoallv_init(vs, sc, sd, MPI_INT, vr, rc, rd, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &pr[A2AV]));
    for (int p = 0; p < t_size; p++) /* the request copied them */
        sc[p] = rc[p] = -1;
    CHECK_MPI(MPI_Reduce_init(&rin, &rout, 1, MPI_LONG, MPI_MAX, 0, half, MPI_INFO_NULL, &pr[REDUCE]));

    uint64_t digest = 14695981039346656037ULL;
#define FOLD(p, n) (digest = (digest ^ t_fnv((p), (n))) * 1099511628211ULL)
    for (int i = 0; i < NA; i++)
        ain[i] = t_rank + i * 0.25;
    CHECK_MPI(MPI_Start(&pr[ALLRED])); /* of iteration 1 */
    for (long it = 1; it <= iters; it++) {
        /* a receive whose type is gone before the message comes */
        int got[8] = {0};
        MPI_Datatype pair;
        CHECK_MPI(MPI_Type_vector(4, 1, 2, MPI_INT, &pair));
        CHECK_MPI(MPI_Type_commit(&pair));
        MPI_Request rr;
        CHECK_MPI(MPI_Irecv(got, 1, pair, left, 7, MPI_COMM_WORLD, &rr));
        CHECK_MPI(MPI_Type_free(&pair));

        t_pause_point(MPI_COMM_WORLD, it); /* for checkpoint tests: see common.h */
        MPI_Status st;
        CHECK_MPI(MPI_Wait(&pr[ALLRED], &st));
        for (int i = 0; i < NA; i++)
            CHECK(aout[i] == t_size * (t_size - 1) / 2.0 + t_size * (i * 0.25 + (it - 1)));
        FOLD(aout, sizeof aout);

        int four[4] = {(int)it, t_rank, (int)(it * 3), -t_rank};
        CHECK_MPI(MPI_Send(four, 4, MPI_INT, right, 7, MPI_COMM_WORLD));

        if (t_rank == 0)
            for (int i = 0; i < 12; i++)
                bbuf[i] = i % 2 ? -5 : (int)(it * 10 + i);
        else
            for (int i = 0; i < 12; i++)
                bbuf[i] = -5;
        for (int p = 0; p < t_size; p++)
            for (int k = 0; k < 2; k++)
                vs[2 * p + k] = (int)(t_rank * 1000 + p * 10 + k + it);
        for (int i = 0; i < 2 * t_size; i++)
            vr[i] = -1;
        rin = (long)((t_rank * 7919 + it * 31) % 101);
        MPI_Request now[4] = {pr[BCAST], pr[BARRIER], pr[A2AV], pr[REDUCE]};
        CHECK_MPI(MPI_Startall(4, now));
        if (it % 2)
            CHECK_MPI(MPI_Waitall(4, now, MPI_STATUSES_IGNORE));
        else
            for (int k = 3; k >= 0; k--)
                CHECK_MPI(MPI_Wait(&now[k], MPI_STATUS_IGNORE));
        for (int i = 0; i < 12; i++)
            CHECK_EQ(bbuf[i], i % 2 ? -5 : (int)(it * 10 + i));
        for (int p = 0; p < t_size; p++)
            for (int k = 0; k < 2; k++)
                CHECK_EQ(vr[2 * p + k], k < 1 + t_rank % 2 ? (int)(p * 1000 + t_rank * 10 + k + it) : -1);
        if (hrank == 0) {
            long want = -1;
            for (int r = t_rank % 2; r < t_size; r += 2)
                want = (r * 7919 + it * 31) % 101 > want ? (r * 7919 + it * 31) % 101 : want;
            CHECK_EQ(rout, want);
            FOLD(&rout, sizeof rout);
        }
        FOLD(bbuf, sizeof bbuf);
        FOLD(vr, 2 * t_size * sizeof(int));

        CHECK_MPI(MPI_Wait(&rr, &st));
        for (int i = 0; i < 4; i++) {
            CHECK_EQ(got[2 * i], i == 0 ? (int)it : i == 1 ? left : i == 2 ? (int)(it * 3) : -left);
            CHECK_EQ(got[2 * i + 1], 0);
        }
        FOLD(got, sizeof got);

        for (int i = 0; i < NA; i++)
            ain[i] = t_rank + i * 0.25 + it;
        if (it < iters)
            CHECK_MPI(MPI_Start(&pr[ALLRED])); /* of the next iteration, left active */
        if (it % report == 0 || it == iters)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }
    for (int k = 0; k < NPR; k++)
        CHECK_MPI(MPI_Request_free(&pr[k]));
    CHECK_MPI(MPI_Comm_free(&half));
    free(sc), free(sd), free(rc), free(rd), free(vs), free(vr);
    printf("persistent collectives freed\n");
    return t_finish();
}
