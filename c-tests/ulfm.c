/* ULFM's fault-tolerance functions (MPIX_Comm_* of Open MPI 5's mpi-ext.h) with every process
 * alive: MPIX_Comm_is_revoked, MPIX_Comm_agree and MPIX_Comm_iagree (bitwise AND of every
 * rank's flag), MPIX_Comm_shrink (a communicator of every process, used for a reduction),
 * MPIX_Comm_get_failed, MPIX_Comm_ack_failed, MPIX_Comm_failure_ack and
 * MPIX_Comm_failure_get_acked (no process failed), then MPIX_Comm_revoke of a duplicate (a
 * collective on it fails with MPI_ERR_REVOKED). On MPICH 5 only MPIX_Comm_get_failed (the
 * others abort natively in ch4). Built against a library without a usable extension (Open MPI
 * 4.1, MPICH 4.0.2), the program says so and checks nothing.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"
#ifdef OPEN_MPI
#include <mpi-ext.h>
#endif

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ulfm");
#if !defined(OMPI_HAVE_MPI_EXT_FTMPI) && defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40100000
    /* MPICH 5 (ch4): its mpi.h declares MPIX_Comm_revoke, _shrink, _agree, _failure_ack,
     * _failure_get_acked and _get_failed, but ch4 aborts natively in all of them but
     * MPIX_Comm_get_failed ("Assertion failed in ch4_comm.c"): only that one is checked. */
    MPI_Comm c;
    MPI_Group g;
    int n = -1;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    CHECK_MPI(MPIX_Comm_get_failed(c, &g));
    CHECK_MPI(MPI_Group_size(g, &n));
    printf("failed processes: %d\n", n);
    CHECK_EQ(n, 0);
    CHECK_MPI(MPI_Group_free(&g));
    CHECK_MPI(MPI_Comm_free(&c));
    t_ok("MPIX_Comm_get_failed with every process alive");
#elif !defined(OMPI_HAVE_MPI_EXT_FTMPI)
    t_skip("ULFM", "this MPI has no usable ULFM extension (mpi-ext.h without OMPI_HAVE_MPI_EXT_FTMPI; MPICH 4.0.2's ch4 aborts in every MPIX_Comm_* function)");
#else
    MPI_Comm c, s;
    int flag = -1, n = -1, size = 0, cmp = -1;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    CHECK_MPI(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
    CHECK_MPI(MPIX_Comm_is_revoked(c, &flag));
    printf("revoked at first: %d\n", flag);

    flag = 0x10 | (1 << (t_rank % 4));
    CHECK_MPI(MPIX_Comm_agree(c, &flag));
    printf("agreed flag: %#x\n", flag);
    MPI_Request r;
    flag = 0x7;
    CHECK_MPI(MPIX_Comm_iagree(c, &flag, &r));
    CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK(r == MPI_REQUEST_NULL);
    printf("agreed flag (nonblocking): %#x\n", flag);

    CHECK_MPI(MPIX_Comm_shrink(c, &s));
    CHECK_MPI(MPI_Comm_size(s, &size));
    CHECK_MPI(MPI_Comm_compare(c, s, &cmp));
    printf("shrunk communicator: %d processes, %s\n", size, cmp == MPI_CONGRUENT ? "congruent" : "not congruent");
    int one = t_rank + 1, sum = 0;
    CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, s));
    printf("sum over the shrunk communicator: %d\n", sum);
    CHECK_MPI(MPI_Comm_free(&s));

    MPI_Group g;
    CHECK_MPI(MPIX_Comm_get_failed(c, &g));
    CHECK_MPI(MPI_Group_size(g, &n));
    printf("failed processes: %d\n", n);
    CHECK_MPI(MPI_Group_free(&g));
    CHECK_MPI(MPIX_Comm_ack_failed(c, 0, &n));
    printf("acknowledged failures: %d\n", n);
    CHECK_MPI(MPIX_Comm_failure_ack(c));
    CHECK_MPI(MPIX_Comm_failure_get_acked(c, &g));
    CHECK_MPI(MPI_Group_size(g, &n));
    printf("acknowledged failed group: %d processes\n", n);
    CHECK_MPI(MPI_Group_free(&g));

    CHECK_MPI(MPI_Barrier(c));
    CHECK_MPI(MPIX_Comm_revoke(c));
    CHECK_MPI(MPIX_Comm_is_revoked(c, &flag));
    printf("revoked after MPIX_Comm_revoke: %d\n", flag);
    int rc = MPI_Barrier(c), cls = -1;
    MPI_Error_class(rc, &cls);
    printf("barrier on the revoked communicator: %s\n", cls == MPIX_ERR_REVOKED ? "MPIX_ERR_REVOKED" : t_errclass_name(cls));
    CHECK_MPI(MPI_Comm_free(&c));
    t_ok("ULFM with every process alive");
#endif
    return t_finish();
}
