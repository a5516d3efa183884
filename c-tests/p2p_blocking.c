/* Blocking point-to-point: Send/Recv in a ring, Ssend, Bsend with an attached buffer, Rsend to a
 * pre-posted receive, Sendrecv, Sendrecv_replace, MPI_PROC_NULL, Get_count/Get_elements,
 * truncation reported as MPI_ERR_TRUNCATE, zero-byte messages, large messages (rendezvous),
 * and non-overtaking order of messages with equal envelopes.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

#define BIG (1 << 18) /* doubles: 2 MiB, above every eager threshold */

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "p2p_blocking");
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    MPI_Status st;
    int count;

    /* Ring with Send/Recv: even ranks send first, odd ranks receive first, so no rank depends
     * on eager buffering. At 1 rank the ring is a self-message (Sendrecv). */
    {
        int out[4], in[4];
        for (int i = 0; i < 4; i++)
            out[i] = 100 * t_rank + i;
        if (t_size == 1) {
            CHECK_MPI(MPI_Sendrecv(out, 4, MPI_INT, right, 7, in, 4, MPI_INT, left, 7,
                                   MPI_COMM_WORLD, &st));
        } else if (t_rank % 2 == 0) {
            CHECK_MPI(MPI_Send(out, 4, MPI_INT, right, 7, MPI_COMM_WORLD));
            CHECK_MPI(MPI_Recv(in, 4, MPI_INT, left, 7, MPI_COMM_WORLD, &st));
        } else {
            CHECK_MPI(MPI_Recv(in, 4, MPI_INT, left, 7, MPI_COMM_WORLD, &st));
            CHECK_MPI(MPI_Send(out, 4, MPI_INT, right, 7, MPI_COMM_WORLD));
        }
        for (int i = 0; i < 4; i++)
            CHECK_EQ(in[i], 100 * left + i);
        CHECK_EQ(st.MPI_SOURCE, left);
        CHECK_EQ(st.MPI_TAG, 7);
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK_EQ(count, 4);
        t_ok("ring send/recv from %d: %d %d %d %d", left, in[0], in[1], in[2], in[3]);
    }

    /* Ssend paired with Recv (synchronous: the send returns only once matched). */
    if (t_size >= 2) {
        double v = 0.0;
        if (t_rank == 0) {
            v = 3.25;
            CHECK_MPI(MPI_Ssend(&v, 1, MPI_DOUBLE, 1, 11, MPI_COMM_WORLD));
        } else if (t_rank == 1) {
            CHECK_MPI(MPI_Recv(&v, 1, MPI_DOUBLE, 0, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(v == 3.25);
        }
        t_ok("ssend %.2f", v);
    } else {
        t_skip("ssend", "needs 2 ranks");
    }

    /* Bsend: attach a buffer, send several buffered messages before the receiver posts, detach
     * (which waits until they are delivered). */
    if (t_size >= 2) {
        int size;
        CHECK_MPI(MPI_Pack_size(8, MPI_INT, MPI_COMM_WORLD, &size));
        size = 3 * (size + MPI_BSEND_OVERHEAD);
        char *buf = malloc(size);
        CHECK_MPI(MPI_Buffer_attach(buf, size));
        int msg[8];
        if (t_rank == 0) {
            for (int m = 0; m < 3; m++) {
                for (int i = 0; i < 8; i++)
                    msg[i] = m * 10 + i;
                CHECK_MPI(MPI_Bsend(msg, 8, MPI_INT, 1, 20 + m, MPI_COMM_WORLD));
            }
        }
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        if (t_rank == 1) {
            int sum = 0;
            for (int m = 2; m >= 0; m--) { /* receive in reverse tag order */
                CHECK_MPI(MPI_Recv(msg, 8, MPI_INT, 0, 20 + m, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                for (int i = 0; i < 8; i++)
                    CHECK_EQ(msg[i], m * 10 + i);
                sum += msg[7];
            }
            t_ok("bsend 3 messages, sum of last elements %d", sum);
        }
        void *det;
        int detsize;
        CHECK_MPI(MPI_Buffer_detach(&det, &detsize));
        CHECK(det == buf);
        CHECK_EQ(detsize, size);
        free(buf);
        t_ok("buffer detach");
    } else {
        t_skip("bsend", "needs 2 ranks");
    }

    /* Rsend: legal only when the receive is already posted, which the barrier guarantees. */
    if (t_size >= 2) {
        int v = -1;
        MPI_Request r;
        if (t_rank == 1)
            CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, 0, 30, MPI_COMM_WORLD, &r));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        if (t_rank == 0) {
            v = 4242;
            CHECK_MPI(MPI_Rsend(&v, 1, MPI_INT, 1, 30, MPI_COMM_WORLD));
        }
        if (t_rank == 1) {
            CHECK_MPI(MPI_Wait(&r, &st));
            CHECK_EQ(v, 4242);
            CHECK_EQ(st.MPI_SOURCE, 0);
        }
        t_ok("rsend");
    } else {
        t_skip("rsend", "needs 2 ranks");
    }

    /* Sendrecv shifting in both directions, and Sendrecv_replace. */
    {
        long a = 1000 + t_rank, b = -1;
        CHECK_MPI(MPI_Sendrecv(&a, 1, MPI_LONG, left, 40, &b, 1, MPI_LONG, right, 40,
                               MPI_COMM_WORLD, &st));
        CHECK_EQ(b, 1000 + right);
        CHECK_EQ(st.MPI_SOURCE, right);
        long c = 5000 + t_rank;
        CHECK_MPI(MPI_Sendrecv_replace(&c, 1, MPI_LONG, right, 41, left, 41, MPI_COMM_WORLD, &st));
        CHECK_EQ(c, 5000 + left);
        t_ok("sendrecv got %ld, sendrecv_replace got %ld", b, c);
    }

    /* MPI_PROC_NULL: sends complete at once, receives return an empty status. */
    {
        int x = 9;
        CHECK_MPI(MPI_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st));
        CHECK_EQ(st.MPI_SOURCE, MPI_PROC_NULL);
        CHECK_EQ(st.MPI_TAG, MPI_ANY_TAG);
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK_EQ(count, 0);
        CHECK_EQ(x, 9);
        t_ok("proc_null");
    }

    /* Receive fewer elements than the buffer holds; Get_count and Get_elements on a struct
     * type that the message does not fill. Zero-byte message. */
    {
        short s[6] = {1, 2, 3, 4, 5, 6}, r[6] = {0};
        MPI_Datatype pair;
        CHECK_MPI(MPI_Type_contiguous(2, MPI_SHORT, &pair));
        CHECK_MPI(MPI_Type_commit(&pair));
        CHECK_MPI(MPI_Sendrecv(s, 5, MPI_SHORT, t_rank, 50, r, 3, pair, t_rank, 50,
                               MPI_COMM_WORLD, &st));
        int elems;
        CHECK_MPI(MPI_Get_count(&st, pair, &count));
        CHECK_MPI(MPI_Get_elements(&st, pair, &elems));
        CHECK_EQ(count, MPI_UNDEFINED); /* 5 shorts are 2.5 pairs */
        CHECK_EQ(elems, 5);
        CHECK_EQ(r[4], 5);
        CHECK_EQ(r[5], 0);
        CHECK_MPI(MPI_Type_free(&pair));
        CHECK_MPI(MPI_Sendrecv(NULL, 0, MPI_BYTE, t_rank, 51, NULL, 0, MPI_BYTE, t_rank, 51,
                               MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK_EQ(count, 0);
        CHECK_EQ(st.MPI_TAG, 51);
        t_ok("partial receive: count undefined, elements %d; zero-byte message", elems);
    }

    /* Truncation: a message longer than the receive buffer is an error of class
     * MPI_ERR_TRUNCATE, reported through MPI_ERRORS_RETURN on a duplicate communicator. */
    {
        MPI_Comm c;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        CHECK_MPI(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
        int s[4] = {1, 2, 3, 4}, r[2];
        MPI_Request req;
        CHECK_MPI(MPI_Isend(s, 4, MPI_INT, t_rank, 60, c, &req));
        int rc = MPI_Recv(r, 2, MPI_INT, t_rank, 60, c, &st);
        t_print_error("recv 4 ints into 2", rc);
        CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Comm_free(&c));
    }

    /* A large message (rendezvous protocol) around the ring, then its checksum. */
    {
        double *out = malloc(BIG * sizeof *out), *in = malloc(BIG * sizeof *in);
        for (int i = 0; i < BIG; i++)
            out[i] = t_rank + i * 0.5;
        CHECK_MPI(MPI_Sendrecv(out, BIG, MPI_DOUBLE, right, 70, in, BIG, MPI_DOUBLE, left, 70,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int i = 0; i < BIG; i++)
            CHECK(in[i] == left + i * 0.5);
        t_ok("large message from %d, checksum %016llx", left,
             (unsigned long long)t_fnv(in, BIG * sizeof *in));
        free(out);
        free(in);
    }

    /* Non-overtaking: messages with the same envelope arrive in send order, even when the
     * receives use MPI_ANY_TAG and mix sizes (small eager ones after a large one). */
    if (t_size >= 2) {
        enum { N = 6 };
        int *big = calloc(BIG, sizeof(int));
        if (t_rank == 0) {
            for (int m = 0; m < N; m++) {
                int len = (m == 2) ? BIG : 1;
                big[0] = m;
                CHECK_MPI(MPI_Send(big, len, MPI_INT, 1, 80, MPI_COMM_WORLD));
            }
        } else if (t_rank == 1) {
            char order[N * 4 + 1] = "";
            for (int m = 0; m < N; m++) {
                CHECK_MPI(MPI_Recv(big, BIG, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
                CHECK_EQ(big[0], m);
                CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
                CHECK_EQ(count, (m == 2) ? BIG : 1);
                sprintf(order + strlen(order), "%d ", big[0]);
            }
            t_ok("order %s", order);
        }
        free(big);
    } else {
        t_skip("non-overtaking", "needs 2 ranks");
    }

    return t_finish();
}
