/* Checkpoint workload: the program's own MPI session beside the world model. After MPI_Init
 * it opens a session (an info with a key of its own, a session error handler of its own), lists
 * the process sets whose names start with "mpi://", reads mpi://WORLD's pset info (mpi_size)
 * and the session's info, makes groups from mpi://WORLD and mpi://SELF, communicators from them
 * with string tags (the whole pset, its even ranks, and self), and then iterates: an Allreduce
 * and a ring exchange on the session's world communicator, a Bcast on the even one, an
 * Allreduce on the self one and one on MPI_COMM_WORLD. Half way it frees the even communicator
 * and makes one of the odd ranks from the same pset group (a communicator made after the last
 * checkpoint, or rebuilt by it). At the end: pset and session queries again (the session the
 * program holds answers after a renewal), the session's error handler called (not on MPICH
 * 4.0, which aborts there), every object
 * freed, MPI_Session_finalize, and MPI_Finalize. A digest is printed every twentieth of the run.
 * Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=40 long-args=2000 long-args.4=200 ckpt-ranks=2,4 ckpt-pace.4=10000
 */
#include "common.h"
#include <string.h>

static int handler_calls, handler_class;

static void on_session_error(MPI_Session *s, int *code, ...)
{
    (void)s;
    /* Open MPI 5.0's MPI_Session_get_pset_info ends in an unconditional
     * OMPI_ERRHANDLER_INVOKE, so it calls the session's handler with MPI_SUCCESS on every
     * successful call (MPI calls handlers on errors only): those calls are not counted. */
    if (*code == MPI_SUCCESS)
        return;
    handler_calls++;
    MPI_Error_class(*code, &handler_class);
}

/* Prints the "mpi://" process sets of the session and returns how many there are. */
static int list_psets(MPI_Session s, const char *when)
{
    int n = 0, shown = 0;
    CHECK_MPI(MPI_Session_get_num_psets(s, MPI_INFO_NULL, &n));
    CHECK(n >= 2);
    for (int i = 0; i < n; i++) {
        char name[256];
        int len = 0;
        CHECK_MPI(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, NULL));
        CHECK(len > 0 && len <= (int)sizeof name);
        CHECK_MPI(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, name));
        if (strncmp(name, "mpi://", 6) == 0) {
            printf("%s: pset %s\n", when, name);
            shown++;
        }
    }
    return shown;
}

static void print_pset_size(MPI_Session s, const char *pset, const char *when)
{
    MPI_Info info;
    CHECK_MPI(MPI_Session_get_pset_info(s, pset, &info));
    char val[64];
    int flag = 0;
    CHECK_MPI(MPI_Info_get(info, "mpi_size", sizeof val - 1, val, &flag));
    CHECK(flag);
    printf("%s: %s mpi_size %s\n", when, pset, val);
    CHECK_EQ(atoi(val), strcmp(pset, "mpi://SELF") == 0 ? 1 : t_size);
    CHECK_MPI(MPI_Info_free(&info));
}

static void print_session_info(MPI_Session s, const char *when)
{
    MPI_Info info;
    CHECK_MPI(MPI_Session_get_info(s, &info));
    char val[64];
    int flag = 0;
    CHECK_MPI(MPI_Info_get(info, "mpi_thread_support_level", sizeof val - 1, val, &flag));
    printf("%s: session thread level %s\n", when, flag ? val : "(none)");
    CHECK_MPI(MPI_Info_free(&info));
}

/* A communicator of the members of `pset_group` whose world rank has parity `parity`. */
static MPI_Comm parity_comm(MPI_Group pset_group, int parity, const char *tag)
{
    int n = 0, ranks[64];
    for (int r = parity; r < t_size; r += 2)
        ranks[n++] = r;
    MPI_Group g;
    CHECK_MPI(MPI_Group_incl(pset_group, n, ranks, &g));
    MPI_Comm c = MPI_COMM_NULL;
    if (t_rank % 2 == parity)
        CHECK_MPI(MPI_Comm_create_from_group(g, tag, MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &c));
    CHECK_MPI(MPI_Group_free(&g));
    return c;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_sessions");
    const long iters = t_arg_long(argc, argv, 1, 40);
    printf("iterations %ld\n", iters);
    const long report = iters >= 20 ? iters / 20 : 1;

    MPI_Errhandler seh;
    CHECK_MPI(MPI_Session_create_errhandler(on_session_error, &seh));
    MPI_Info sinfo;
    CHECK_MPI(MPI_Info_create(&sinfo));
    CHECK_MPI(MPI_Info_set(sinfo, "org.mpicr.test", "sessions"));
    MPI_Session s;
    CHECK_MPI(MPI_Session_init(sinfo, seh, &s));
    CHECK_MPI(MPI_Info_free(&sinfo));
    CHECK_MPI(MPI_Errhandler_free(&seh));

    printf("psets %d\n", list_psets(s, "start"));
    print_pset_size(s, "mpi://WORLD", "start");
    print_pset_size(s, "mpi://SELF", "start");
    print_session_info(s, "start");

    MPI_Group gworld, gself;
    CHECK_MPI(MPI_Group_from_session_pset(s, "mpi://WORLD", &gworld));
    CHECK_MPI(MPI_Group_from_session_pset(s, "mpi://SELF", &gself));
    int gsize, grank;
    CHECK_MPI(MPI_Group_size(gworld, &gsize));
    CHECK_MPI(MPI_Group_rank(gworld, &grank));
    CHECK_EQ(gsize, t_size);
    CHECK_EQ(grank, t_rank);
    MPI_Comm sworld, sself;
    CHECK_MPI(MPI_Comm_create_from_group(gworld, "org.mpicr.test.world", MPI_INFO_NULL, MPI_ERRORS_RETURN, &sworld));
    CHECK_MPI(MPI_Comm_create_from_group(gself, "org.mpicr.test.self", MPI_INFO_NULL, MPI_ERRORS_RETURN, &sself));
    CHECK_MPI(MPI_Group_free(&gself));
    int r, sz;
    CHECK_MPI(MPI_Comm_rank(sworld, &r));
    CHECK_MPI(MPI_Comm_size(sworld, &sz));
    CHECK_EQ(r, t_rank);
    CHECK_EQ(sz, t_size);
    MPI_Comm part = parity_comm(gworld, 0, "org.mpicr.test.even");
    int parity = 0;

    uint64_t digest = 14695981039346656037ULL;
    for (long it = 1; it <= iters; it++) {
        t_pause_point(MPI_COMM_WORLD, it); /* for checkpoint tests: see common.h */
        if (it == iters / 2 + 1) { /* the even communicator goes, an odd one comes */
            if (part != MPI_COMM_NULL)
                CHECK_MPI(MPI_Comm_free(&part));
            part = parity_comm(gworld, 1, "org.mpicr.test.odd");
            parity = 1;
        }
        t_ring_step(sworld, it, &digest);

        if (part != MPI_COMM_NULL) {
            int pr;
            CHECK_MPI(MPI_Comm_rank(part, &pr));
            CHECK_EQ(pr, t_rank / 2);
            long b = pr == 0 ? it * 7 + parity : -1;
            CHECK_MPI(MPI_Bcast(&b, 1, MPI_LONG, 0, part));
            CHECK_EQ(b, it * 7 + parity);
            t_fold(&digest, &b, sizeof b);
        }

        long one = it, back = 0;
        CHECK_MPI(MPI_Allreduce(&one, &back, 1, MPI_LONG, MPI_MAX, sself));
        CHECK_EQ(back, it);
        long w = 1, ws = 0;
        CHECK_MPI(MPI_Allreduce(&w, &ws, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
        CHECK_EQ(ws, t_size);
        if (it % report == 0 || it == iters)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }

    printf("psets %d\n", list_psets(s, "end"));
    print_pset_size(s, "mpi://WORLD", "end");
    print_session_info(s, "end");
    MPI_Group g2;
    CHECK_MPI(MPI_Group_from_session_pset(s, "mpi://WORLD", &g2));
    int cmp;
    CHECK_MPI(MPI_Group_compare(g2, gworld, &cmp));
    CHECK_EQ(cmp, MPI_IDENT);
    CHECK_MPI(MPI_Group_free(&g2));
#if defined(MPICH_NUMVERSION) && MPICH_NUMVERSION < 40100000
    t_skip("MPI_Session_call_errhandler", "MPICH 4.0 aborts in it instead of calling the session's handler");
#else
    CHECK_MPI(MPI_Session_call_errhandler(s, MPI_ERR_OTHER));
    printf("session handler calls %d class %s\n", handler_calls, t_errclass_name(handler_class));
#endif

    if (part != MPI_COMM_NULL)
        CHECK_MPI(MPI_Comm_free(&part));
    CHECK_MPI(MPI_Comm_free(&sself));
    CHECK_MPI(MPI_Comm_free(&sworld));
    CHECK_MPI(MPI_Group_free(&gworld));
    CHECK_MPI(MPI_Session_finalize(&s));
    CHECK(s == MPI_SESSION_NULL);
    return t_finish();
}
