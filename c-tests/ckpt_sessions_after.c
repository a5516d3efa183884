/* Checkpoint workload: an MPI session that outlives the world model (MPI-4 allows it). After
 * MPI_Init the program opens a session, makes a communicator from its mpi://WORLD group and
 * iterates: an Allreduce and a ring exchange on it, and an Allreduce on MPI_COMM_WORLD while the
 * world model is in use. A fifth of the way it calls MPI_Finalize and goes on with the session's
 * communicator alone (the checkpoint modes, at 10-60 % of the run, mostly fall after it); at the
 * end it frees it and finalizes the session. MPI_Initialized and MPI_Finalized are printed
 * before and after MPI_Finalize and at the end. A digest is printed every twentieth of the run.
 * Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=40 long-args=2000 long-args.4=200 ckpt-ranks=2 ckpt-modes=continue,stop-restart,older-epoch
 */
#include "common.h"

static void print_stage(const char *when)
{
    int init = -1, fin = -1;
    CHECK_MPI(MPI_Initialized(&init));
    CHECK_MPI(MPI_Finalized(&fin));
    printf("%s: initialized %d finalized %d\n", when, init, fin);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_sessions_after");
    const long iters = t_arg_long(argc, argv, 1, 40);
    printf("iterations %ld\n", iters);
    const long report = iters >= 20 ? iters / 20 : 1;

    MPI_Session s;
    CHECK_MPI(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    MPI_Group g;
    CHECK_MPI(MPI_Group_from_session_pset(s, "mpi://WORLD", &g));
    MPI_Comm comm;
    CHECK_MPI(MPI_Comm_create_from_group(g, "org.mpicr.test.after", MPI_INFO_NULL, MPI_ERRORS_RETURN, &comm));
    CHECK_MPI(MPI_Group_free(&g));
    print_stage("start");

    uint64_t digest = 14695981039346656037ULL;
    int in_world = 1;
    for (long it = 1; it <= iters; it++) {
        t_pause_point(comm, it); /* for checkpoint tests: see common.h */
        if (it == iters / 5 + 1) {
            CHECK_MPI(MPI_Finalize());
            in_world = 0;
            print_stage("after MPI_Finalize");
        }
        t_ring_step(comm, it, &digest);

        if (in_world) {
            long w = 1, ws = 0;
            CHECK_MPI(MPI_Allreduce(&w, &ws, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
            CHECK_EQ(ws, t_size);
        }
        if (it % report == 0 || it == iters)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }

    CHECK_MPI(MPI_Comm_free(&comm));
    CHECK_MPI(MPI_Session_finalize(&s));
    CHECK(s == MPI_SESSION_NULL);
    print_stage("end");
    printf("PASS %s\n", t_name);
    return 0;
}
