/* Persistent point-to-point: Send_init/Recv_init/Ssend_init/Bsend_init/Rsend_init restarted
 * many times with Start and Startall, buffers rewritten between rounds, Request_get_status and
 * Test on persistent requests, inactive requests in Waitall, Request_free of inactive
 * persistent requests. The round count is the argument.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<round> (common.h).
 * mpicr-test: ranks=1,2,4 args=50 long-args=20000 long-args.2=5000 long-args.4=800
 */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "p2p_persistent");
    const long rounds = t_arg_long(argc, argv, 1, 50);
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    printf("rounds %ld\n", rounds);

    /* A ring exchange of 8 doubles per round with Send_init/Recv_init and Startall; the data
     * depends on the round so that a stale buffer would be noticed. */
    {
        double out[8], in[8];
        MPI_Request reqs[2];
        CHECK_MPI(MPI_Recv_init(in, 8, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, &reqs[0]));
        CHECK_MPI(MPI_Send_init(out, 8, MPI_DOUBLE, right, 1, MPI_COMM_WORLD, &reqs[1]));
        /* An inactive persistent request: Wait returns at once with an empty status. */
        MPI_Status st;
        CHECK_MPI(MPI_Wait(&reqs[0], &st));
        CHECK(reqs[0] != MPI_REQUEST_NULL);
        CHECK_EQ(st.MPI_SOURCE, MPI_ANY_SOURCE);
        double acc = 0;
        for (long r = 0; r < rounds; r++) {
            t_pause_point(MPI_COMM_WORLD, r); /* for checkpoint tests: see common.h */
            for (int i = 0; i < 8; i++)
                out[i] = t_rank * 1000 + (double)(r % 997) + i * 0.125;
            CHECK_MPI(MPI_Startall(2, reqs));
            CHECK_MPI(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
            for (int i = 0; i < 8; i++)
                CHECK(in[i] == left * 1000 + (double)(r % 997) + i * 0.125);
            acc += in[7];
        }
        CHECK(reqs[0] != MPI_REQUEST_NULL && reqs[1] != MPI_REQUEST_NULL);
        CHECK_MPI(MPI_Request_free(&reqs[0]));
        CHECK_MPI(MPI_Request_free(&reqs[1]));
        t_ok("send_init/recv_init ring, accumulated %.3f", acc);
    }

    /* Ssend_init / Rsend_init / Bsend_init, each started individually; Rsend needs its receive
     * started first, which the barrier after Start(recv) guarantees. Request_get_status polls
     * without freeing. */
    if (t_size >= 2) {
        const int peer = t_rank ^ 1; /* pairs (0,1), (2,3) */
        int bsize;
        CHECK_MPI(MPI_Pack_size(1, MPI_LONG, MPI_COMM_WORLD, &bsize));
        bsize += MPI_BSEND_OVERHEAD;
        char *buf = malloc(bsize);
        CHECK_MPI(MPI_Buffer_attach(buf, bsize));
        long s_val = 0, r_val[3] = {0, 0, 0};
        MPI_Request sreq[3], rreq[3];
        const int sender = (t_rank % 2 == 0);
        for (int k = 0; k < 3; k++)
            CHECK_MPI(MPI_Recv_init(&r_val[k], 1, MPI_LONG, peer, 10 + k, MPI_COMM_WORLD, &rreq[k]));
        CHECK_MPI(MPI_Ssend_init(&s_val, 1, MPI_LONG, peer, 10, MPI_COMM_WORLD, &sreq[0]));
        CHECK_MPI(MPI_Rsend_init(&s_val, 1, MPI_LONG, peer, 11, MPI_COMM_WORLD, &sreq[1]));
        CHECK_MPI(MPI_Bsend_init(&s_val, 1, MPI_LONG, peer, 12, MPI_COMM_WORLD, &sreq[2]));
        long total = 0;
        const long n = rounds < 20 ? rounds : 20;
        for (long r = 0; r < n; r++) {
            if (!sender)
                CHECK_MPI(MPI_Startall(3, rreq));
            CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
            if (sender && peer < t_size) {
                for (int k = 0; k < 3; k++) {
                    s_val = 100 * r + k; /* a send buffer may be reused once its request completes */
                    CHECK_MPI(MPI_Start(&sreq[k]));
                    int flag = 0;
                    while (!flag)
                        CHECK_MPI(MPI_Request_get_status(sreq[k], &flag, MPI_STATUS_IGNORE));
                    CHECK_MPI(MPI_Wait(&sreq[k], MPI_STATUS_IGNORE));
                }
            } else if (!sender) {
                CHECK_MPI(MPI_Waitall(3, rreq, MPI_STATUSES_IGNORE));
                for (int k = 0; k < 3; k++) {
                    CHECK_EQ(r_val[k], 100 * r + k);
                    total += r_val[k];
                }
            }
        }
        for (int k = 0; k < 3; k++) {
            CHECK_MPI(MPI_Request_free(&sreq[k]));
            CHECK_MPI(MPI_Request_free(&rreq[k]));
        }
        void *det;
        CHECK_MPI(MPI_Buffer_detach(&det, &bsize));
        free(buf);
        if (sender)
            t_ok("ssend_init/rsend_init/bsend_init: sent %ld rounds", n);
        else
            t_ok("ssend_init/rsend_init/bsend_init: received total %ld", total);
    } else {
        t_skip("ssend_init/rsend_init/bsend_init", "needs 2 ranks");
    }

    /* Persistent receive with wildcards, restarted; the sender varies the tag. */
    {
        int v = 0;
        MPI_Request rr;
        MPI_Status st;
        CHECK_MPI(MPI_Recv_init(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rr));
        for (int r = 0; r < 5; r++) {
            CHECK_MPI(MPI_Start(&rr));
            int w = t_rank * 10 + r;
            CHECK_MPI(MPI_Send(&w, 1, MPI_INT, t_rank, 40 + r, MPI_COMM_WORLD)); /* to self */
            CHECK_MPI(MPI_Wait(&rr, &st));
            CHECK_EQ(v, w);
            CHECK_EQ(st.MPI_TAG, 40 + r);
            CHECK_EQ(st.MPI_SOURCE, t_rank);
        }
        CHECK_MPI(MPI_Request_free(&rr));
        t_ok("wildcard recv_init restarted 5 times");
    }

    return t_finish();
}
