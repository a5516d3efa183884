/* Nonblocking point-to-point: Isend/Irecv/Issend/Ibsend/Irsend completed with Wait, Waitall,
 * Waitany, Test, Testall, plus Request_free of an active send, many requests in flight to all
 * peers, and MPI_STATUSES_IGNORE.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

#define N 32

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "p2p_nonblocking");
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    MPI_Status st;

    /* Every rank sends N ints to every rank (itself included) and receives from all, receives
     * posted first; completion with Waitall and per-request statuses. */
    {
        int *out = malloc(sizeof(int) * N * t_size), *in = malloc(sizeof(int) * N * t_size);
        MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * t_size);
        MPI_Status *sts = malloc(sizeof(MPI_Status) * 2 * t_size);
        for (int p = 0; p < t_size; p++) {
            for (int i = 0; i < N; i++)
                out[p * N + i] = t_rank * 10000 + p * 100 + i;
            CHECK_MPI(MPI_Irecv(in + p * N, N, MPI_INT, p, p, MPI_COMM_WORLD, &reqs[p]));
        }
        for (int p = 0; p < t_size; p++)
            CHECK_MPI(MPI_Isend(out + p * N, N, MPI_INT, p, t_rank, MPI_COMM_WORLD,
                                &reqs[t_size + p]));
        CHECK_MPI(MPI_Waitall(2 * t_size, reqs, sts));
        long sum = 0;
        for (int p = 0; p < t_size; p++) {
            CHECK(reqs[p] == MPI_REQUEST_NULL);
            CHECK_EQ(sts[p].MPI_SOURCE, p);
            CHECK_EQ(sts[p].MPI_TAG, p);
            for (int i = 0; i < N; i++) {
                CHECK_EQ(in[p * N + i], p * 10000 + t_rank * 100 + i);
                sum += in[p * N + i];
            }
        }
        t_ok("all-to-all isend/irecv/waitall, sum %ld", sum);
        free(out);
        free(in);
        free(reqs);
        free(sts);
    }

    /* Waitany: receives from all peers with distinct tags; each completion is recorded in a
     * table indexed by the request, so the printed result does not depend on arrival order. */
    {
        int *in = malloc(sizeof(int) * t_size), *seen = calloc(t_size, sizeof(int));
        MPI_Request *reqs = malloc(sizeof(MPI_Request) * t_size);
        for (int p = 0; p < t_size; p++)
            CHECK_MPI(MPI_Irecv(&in[p], 1, MPI_INT, p, 200 + p, MPI_COMM_WORLD, &reqs[p]));
        int v = 7 * t_rank + 1;
        for (int p = 0; p < t_size; p++)
            CHECK_MPI(MPI_Send(&v, 1, MPI_INT, (t_rank + p) % t_size, 200 + t_rank,
                               MPI_COMM_WORLD));
        for (int k = 0; k < t_size; k++) {
            int idx;
            CHECK_MPI(MPI_Waitany(t_size, reqs, &idx, &st));
            CHECK(idx >= 0 && idx < t_size);
            CHECK(!seen[idx]);
            seen[idx] = 1;
            CHECK_EQ(st.MPI_SOURCE, idx);
            CHECK_EQ(in[idx], 7 * idx + 1);
        }
        int idx;
        CHECK_MPI(MPI_Waitany(t_size, reqs, &idx, &st)); /* all inactive now */
        CHECK_EQ(idx, MPI_UNDEFINED);
        t_ok("waitany over %d receives", t_size);
        free(in);
        free(seen);
        free(reqs);
    }

    /* Test loop on an Irecv whose send comes later; Testall on a mix. */
    {
        int v = -1, w = 31 + t_rank, flag = 0;
        MPI_Request r, s;
        CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, left, 300, MPI_COMM_WORLD, &r));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_Isend(&w, 1, MPI_INT, right, 300, MPI_COMM_WORLD, &s));
        long polls = 0;
        while (!flag) {
            CHECK_MPI(MPI_Test(&r, &flag, &st));
            polls++;
        }
        CHECK(r == MPI_REQUEST_NULL);
        CHECK_EQ(v, 31 + left);
        CHECK_EQ(st.MPI_SOURCE, left);
        /* Test on a null request: flag true, empty status. */
        CHECK_MPI(MPI_Test(&r, &flag, &st));
        CHECK(flag);
        CHECK_EQ(st.MPI_SOURCE, MPI_ANY_SOURCE);
        MPI_Request both[2] = {s, MPI_REQUEST_NULL};
        flag = 0;
        while (!flag)
            CHECK_MPI(MPI_Testall(2, both, &flag, MPI_STATUSES_IGNORE));
        CHECK(both[0] == MPI_REQUEST_NULL);
        t_ok("test loop got %d", v); /* not the poll count: it depends on timing */
        (void)polls;
    }

    /* Issend completes only after the match; Ibsend with an attached buffer; Irsend to a
     * posted receive. */
    if (t_size >= 2) {
        int size;
        CHECK_MPI(MPI_Pack_size(4, MPI_INT, MPI_COMM_WORLD, &size));
        size += MPI_BSEND_OVERHEAD;
        char *buf = malloc(size);
        CHECK_MPI(MPI_Buffer_attach(buf, size));
        int a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {9, 10, 11, 12};
        int ra[4], rb[4], rc[4];
        MPI_Request reqs[3];
        if (t_rank == 1)
            CHECK_MPI(MPI_Irecv(rc, 4, MPI_INT, 0, 403, MPI_COMM_WORLD, &reqs[2]));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        if (t_rank == 0) {
            CHECK_MPI(MPI_Issend(a, 4, MPI_INT, 1, 401, MPI_COMM_WORLD, &reqs[0]));
            CHECK_MPI(MPI_Ibsend(b, 4, MPI_INT, 1, 402, MPI_COMM_WORLD, &reqs[1]));
            CHECK_MPI(MPI_Irsend(c, 4, MPI_INT, 1, 403, MPI_COMM_WORLD, &reqs[2]));
            int flag;
            /* The Issend cannot be complete: rank 1 receives it only after the barrier below. */
            CHECK_MPI(MPI_Test(&reqs[0], &flag, MPI_STATUS_IGNORE));
            CHECK(!flag);
            CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
            CHECK_MPI(MPI_Waitall(3, reqs, MPI_STATUSES_IGNORE));
        } else {
            CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
            if (t_rank == 1) {
                CHECK_MPI(MPI_Irecv(rb, 4, MPI_INT, 0, 402, MPI_COMM_WORLD, &reqs[1]));
                CHECK_MPI(MPI_Irecv(ra, 4, MPI_INT, 0, 401, MPI_COMM_WORLD, &reqs[0]));
                CHECK_MPI(MPI_Waitall(3, reqs, MPI_STATUSES_IGNORE));
                for (int i = 0; i < 4; i++) {
                    CHECK_EQ(ra[i], a[i]);
                    CHECK_EQ(rb[i], b[i]);
                    CHECK_EQ(rc[i], c[i]);
                }
            }
        }
        void *det;
        CHECK_MPI(MPI_Buffer_detach(&det, &size));
        free(buf);
        t_ok("issend/ibsend/irsend");
    } else {
        t_skip("issend/ibsend/irsend", "needs 2 ranks");
    }

    /* Request_free on an active send: the message is still delivered; the receiver's Wait
     * proves it, and a barrier afterwards makes sure the buffer is no longer in use. */
    {
        static int payload[1000];
        for (int i = 0; i < 1000; i++)
            payload[i] = t_rank + i;
        MPI_Request s, r;
        int got[1000];
        CHECK_MPI(MPI_Irecv(got, 1000, MPI_INT, left, 500, MPI_COMM_WORLD, &r));
        CHECK_MPI(MPI_Isend(payload, 1000, MPI_INT, right, 500, MPI_COMM_WORLD, &s));
        CHECK_MPI(MPI_Request_free(&s));
        CHECK(s == MPI_REQUEST_NULL);
        CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        for (int i = 0; i < 1000; i++)
            CHECK_EQ(got[i], left + i);
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        t_ok("request_free of an active isend");
    }

    /* Many small messages in flight in both directions before any completion. */
    {
        enum { M = 64 };
        int out[M], in_l[M], in_r[M];
        MPI_Request reqs[3 * M];
        for (int i = 0; i < M; i++) {
            out[i] = t_rank * M + i;
            CHECK_MPI(MPI_Irecv(&in_l[i], 1, MPI_INT, left, 600 + i, MPI_COMM_WORLD, &reqs[i]));
            CHECK_MPI(MPI_Irecv(&in_r[i], 1, MPI_INT, right, 700 + i, MPI_COMM_WORLD,
                                &reqs[M + i]));
        }
        for (int i = M - 1; i >= 0; i--) {
            CHECK_MPI(MPI_Isend(&out[i], 1, MPI_INT, right, 600 + i, MPI_COMM_WORLD,
                                &reqs[2 * M + i]));
        }
        /* a separate blocking pass for the leftward messages, interleaved with pending ones */
        for (int i = 0; i < M; i++)
            CHECK_MPI(MPI_Send(&out[i], 1, MPI_INT, left, 700 + i, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Waitall(3 * M, reqs, MPI_STATUSES_IGNORE));
        for (int i = 0; i < M; i++) {
            CHECK_EQ(in_l[i], left * M + i);
            CHECK_EQ(in_r[i], right * M + i);
        }
        t_ok("%d messages each way in flight", M);
    }

    return t_finish();
}
