/* Checkpoint workload: a program of MPI sessions only, which never calls MPI_Init. It opens a
 * session, makes a group from mpi://WORLD and a communicator from it, and iterates: an
 * Allreduce and a ring exchange on that communicator, and every fifth step (every fortieth of
 * a longer run) a communicator of the even ranks made from a group of the pset's (an
 * MPI_Group_incl) and freed again. At the
 * end the pset is queried again, every object freed and the session finalized; MPI_Initialized
 * and MPI_Finalized are printed after MPI_Session_init and at the end (both false natively:
 * the world model is never used). A digest is printed every twentieth of the run.
 * Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=40 long-args=2000 long-args.4=200 ckpt-ranks=2 ckpt-modes=continue,stop-restart,restart-twice
 */
#include "common.h"

static void print_stage(const char *when)
{
    int init = -1, fin = -1;
#ifdef I_MPI_VERSION
    t_skip(when, "Intel MPI 2021 answers MPI_Initialized true in a program of sessions only");
    return;
#endif
    CHECK_MPI(MPI_Initialized(&init));
    CHECK_MPI(MPI_Finalized(&fin));
    printf("%s: initialized %d finalized %d\n", when, init, fin);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    t_name = "ckpt_sessions_only";
    const long iters = t_arg_long(argc, argv, 1, 40);
    MPI_Session s;
    CHECK_MPI(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    print_stage("start");
    MPI_Group gworld;
    CHECK_MPI(MPI_Group_from_session_pset(s, "mpi://WORLD", &gworld));
    CHECK_MPI(MPI_Group_rank(gworld, &t_rank));
    CHECK_MPI(MPI_Group_size(gworld, &t_size));
    MPI_Comm comm;
    CHECK_MPI(MPI_Comm_create_from_group(gworld, "org.mpicr.test.only", MPI_INFO_NULL, MPI_ERRORS_RETURN, &comm));
    int r, sz;
    CHECK_MPI(MPI_Comm_rank(comm, &r));
    CHECK_MPI(MPI_Comm_size(comm, &sz));
    CHECK_EQ(r, t_rank);
    CHECK_EQ(sz, t_size);
    printf("%s: rank %d of %d\n", t_name, t_rank, t_size);
    printf("iterations %ld\n", iters);
    const long report = iters >= 20 ? iters / 20 : 1;
    /* At most about 40 communicators per run: under Open MPI 5 each MPI_Comm_create_from_group
     * is a PMIx group construct whose data the launcher's PMIx server stores under new keys
     * that it then searches one by one, so each costs more than the one before (2 ms for the
     * first, 150 ms after 240 here): the 400 of a 2000-step run took over a minute natively. */
    const long even_every = iters / 40 > 5 ? iters / 40 : 5;

    uint64_t digest = 14695981039346656037ULL;
    for (long it = 1; it <= iters; it++) {
        t_pause_point(comm, it); /* for checkpoint tests: see common.h */
        t_ring_step(comm, it, &digest);

        if (it % even_every == 0) { /* a communicator made and freed between checkpoints */
            int n = 0, ranks[64];
            for (int k = 0; k < t_size; k += 2)
                ranks[n++] = k;
            MPI_Group ge;
            CHECK_MPI(MPI_Group_incl(gworld, n, ranks, &ge));
            if (t_rank % 2 == 0) {
                MPI_Comm even;
                CHECK_MPI(MPI_Comm_create_from_group(ge, "org.mpicr.test.only.even", MPI_INFO_NULL, MPI_ERRORS_RETURN, &even));
                long b = t_rank == 0 ? it * 7 : -1;
                CHECK_MPI(MPI_Bcast(&b, 1, MPI_LONG, 0, even));
                CHECK_EQ(b, it * 7);
                t_fold(&digest, &b, sizeof b);
                CHECK_MPI(MPI_Comm_free(&even));
            }
            CHECK_MPI(MPI_Group_free(&ge));
        }
        if (it % report == 0 || it == iters)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }

    MPI_Group g2;
    CHECK_MPI(MPI_Group_from_session_pset(s, "mpi://WORLD", &g2));
    int cmp;
    CHECK_MPI(MPI_Group_compare(g2, gworld, &cmp));
    CHECK_EQ(cmp, MPI_IDENT);
    CHECK_MPI(MPI_Group_free(&g2));
    CHECK_MPI(MPI_Comm_free(&comm));
    CHECK_MPI(MPI_Group_free(&gworld));
    CHECK_MPI(MPI_Session_finalize(&s));
    CHECK(s == MPI_SESSION_NULL);
    print_stage("end");
    printf("PASS %s\n", t_name);
    return 0;
}
