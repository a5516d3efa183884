/* Checkpoint workload: persistent point-to-point requests in use across a checkpoint. Made once:
 * Recv_init/Send_init around the ring to the right (16 doubles), Recv_init/Ssend_init to the
 * left (a vector type of ints), and a Recv_init from MPI_ANY_SOURCE matched by a Send_init from
 * two ranks away (one sender per receiver, so the match is deterministic; the status names
 * it). The receives for an iteration are started at the end of the previous one, so they are
 * active while a rank computes (and wherever a checkpoint finds it); the sends are started
 * after the computation. Completion rotates through Waitall, Testall polling, Waitsome and
 * Wait on each request. All data are checked; a digest is printed every twentieth of the run.
 * Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=64 long-args=2000 long-args.4=200 ckpt-ranks=2,4 ckpt-pace.4=10000
 */
#include "common.h"

#define ND 16
#define NREQ 6

static double dval(int rank, long it, int i)
{
    return rank * 1000.0 + (double)(it % 4093) + i * 0.5;
}

static int ival(int rank, long it, int i)
{
    return (int)(rank * 100000 + (it % 9973) * 7 + i);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_persistent");
    const long iters = t_arg_long(argc, argv, 1, 64);
    printf("iterations %ld\n", iters);
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    const int two_on = (t_rank + 2) % t_size, two_back = (t_rank + t_size - 2) % t_size;
    const long report = iters >= 20 ? iters / 20 : 1;

    double dout[ND], din[ND];
    int iout[12], iin[6];
    long lout, lin;
    MPI_Datatype every_other; /* 6 ints, every other one of iout */
    CHECK_MPI(MPI_Type_vector(6, 1, 2, MPI_INT, &every_other));
    CHECK_MPI(MPI_Type_commit(&every_other));
    /* requests 0-2 are receives, 3-5 the matching sends */
    MPI_Request req[NREQ];
    CHECK_MPI(MPI_Recv_init(din, ND, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, &req[0]));
    CHECK_MPI(MPI_Recv_init(iin, 6, MPI_INT, right, 2, MPI_COMM_WORLD, &req[1]));
    CHECK_MPI(MPI_Recv_init(&lin, 1, MPI_LONG, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &req[2]));
    CHECK_MPI(MPI_Send_init(dout, ND, MPI_DOUBLE, right, 1, MPI_COMM_WORLD, &req[3]));
    CHECK_MPI(MPI_Ssend_init(iout, 1, every_other, left, 2, MPI_COMM_WORLD, &req[4]));
    CHECK_MPI(MPI_Send_init(&lout, 1, MPI_LONG, two_on, 3, MPI_COMM_WORLD, &req[5]));
    CHECK_MPI(MPI_Startall(3, req)); /* receives of iteration 1 */

    uint64_t digest = 14695981039346656037ULL;
#define FOLD(p, n) (digest = (digest ^ t_fnv((p), (n))) * 1099511628211ULL)
    long tests = 0;
    for (long it = 1; it <= iters; it++) {
        t_pause_point(MPI_COMM_WORLD, it); /* for checkpoint tests: see common.h */
        /* "compute" the data to send while the receives are active */
        for (int i = 0; i < ND; i++)
            dout[i] = dval(t_rank, it, i);
        for (int i = 0; i < 12; i++)
            iout[i] = i % 2 ? -1 : ival(t_rank, it, i / 2);
        lout = t_rank * 1000003L + it;
        CHECK_MPI(MPI_Startall(3, &req[3]));

        MPI_Status st[NREQ];
        switch (it % 4) {
        case 0:
            CHECK_MPI(MPI_Waitall(NREQ, req, st));
            break;
        case 1: {
            int flag = 0;
            while (!flag) {
                CHECK_MPI(MPI_Testall(NREQ, req, &flag, st));
                tests++;
            }
            break;
        }
        case 2: {
            int left_to_do = NREQ, outc, idx[NREQ];
            MPI_Status s[NREQ];
            while (left_to_do > 0) {
                CHECK_MPI(MPI_Waitsome(NREQ, req, &outc, idx, s));
                CHECK(outc != MPI_UNDEFINED);
                for (int k = 0; k < outc; k++)
                    st[idx[k]] = s[k];
                left_to_do -= outc;
            }
            break;
        }
        default:
            for (int k = NREQ - 1; k >= 0; k--)
                CHECK_MPI(MPI_Wait(&req[k], &st[k]));
        }
        for (int k = 0; k < NREQ; k++)
            CHECK(req[k] != MPI_REQUEST_NULL); /* persistent: inactive, not freed */

        for (int i = 0; i < ND; i++)
            CHECK(din[i] == dval(left, it, i));
        for (int i = 0; i < 6; i++)
            CHECK_EQ(iin[i], ival(right, it, i));
        CHECK_EQ(lin, two_back * 1000003L + it);
        CHECK_EQ(st[2].MPI_SOURCE, two_back);
        CHECK_EQ(st[2].MPI_TAG, 3);
        int n;
        CHECK_MPI(MPI_Get_count(&st[0], MPI_DOUBLE, &n));
        CHECK_EQ(n, ND);
        FOLD(din, sizeof din);
        FOLD(iin, sizeof iin);
        FOLD(&lin, sizeof lin);

        if (it < iters)
            CHECK_MPI(MPI_Startall(3, req)); /* receives of the next iteration */
        if (it % report == 0 || it == iters)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }
    /* every request is inactive now: Wait returns at once with an empty status */
    MPI_Status e;
    CHECK_MPI(MPI_Wait(&req[0], &e));
    CHECK_EQ(e.MPI_SOURCE, MPI_ANY_SOURCE);
    for (int k = 0; k < NREQ; k++)
        CHECK_MPI(MPI_Request_free(&req[k]));
    CHECK_MPI(MPI_Type_free(&every_other));
    printf("requests freed; testall polls %s\n", tests > 0 ? "made" : "none");
    return t_finish();
}
