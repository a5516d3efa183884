/* Request management: Testany, Waitsome, Testsome (results recorded per index, so arrival
 * order does not show), Request_get_status, MPI_REQUEST_NULL and inactive entries in request
 * arrays, MPI_Cancel of an unmatched Irecv (Test_cancelled), generalized requests
 * (Grequest_start/complete with query, free and cancel callbacks, Status_set_elements,
 * Status_set_cancelled) waited for alone and mixed with point-to-point requests.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

/* --- generalized request: an operation completed by the program itself ---------------- */
struct greq_state {
    int id;
    int freed;
    int cancelled;
    int *free_log; /* set to id when freed */
};

static int greq_query(void *extra, MPI_Status *status)
{
    struct greq_state *s = extra;
    /* Report 3 MPI_INT as received, with our id as the tag, and whether it was cancelled. */
    MPI_Status_set_elements(status, MPI_INT, 3);
    MPI_Status_set_cancelled(status, s->cancelled);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = s->id;
    return MPI_SUCCESS;
}

static int greq_free(void *extra)
{
    struct greq_state *s = extra;
    s->freed = 1;
    *s->free_log += s->id;
    return MPI_SUCCESS;
}

static int greq_cancel(void *extra, int complete)
{
    struct greq_state *s = extra;
    if (!complete)
        s->cancelled = 1;
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "requests");
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    MPI_Status st;
    int flag, idx;

    /* Arrays of only null requests: Testany -> flag true, index MPI_UNDEFINED; Waitsome and
     * Testsome -> outcount MPI_UNDEFINED. */
    {
        MPI_Request nulls[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        int outcount, indices[3];
        CHECK_MPI(MPI_Testany(3, nulls, &idx, &flag, &st));
        CHECK(flag);
        CHECK_EQ(idx, MPI_UNDEFINED);
        CHECK_MPI(MPI_Waitsome(3, nulls, &outcount, indices, MPI_STATUSES_IGNORE));
        CHECK_EQ(outcount, MPI_UNDEFINED);
        CHECK_MPI(MPI_Testsome(3, nulls, &outcount, indices, MPI_STATUSES_IGNORE));
        CHECK_EQ(outcount, MPI_UNDEFINED);
        t_ok("null request arrays");
    }

    /* Waitsome over receives from every rank (nulls interleaved); record by index. */
    {
        const int n = 2 * t_size;
        int *vals = malloc(sizeof(int) * n), *done = calloc(n, sizeof(int)), *indices = malloc(sizeof(int) * n);
        MPI_Request *reqs = malloc(sizeof(MPI_Request) * n);
        MPI_Status *sts = malloc(sizeof(MPI_Status) * n);
        for (int i = 0; i < n; i++) {
            if (i % 2)
                reqs[i] = MPI_REQUEST_NULL;
            else
                CHECK_MPI(MPI_Irecv(&vals[i], 1, MPI_INT, i / 2, 20, MPI_COMM_WORLD, &reqs[i]));
        }
        for (int p = 0; p < t_size; p++) {
            int v = 100 * t_rank + p;
            CHECK_MPI(MPI_Send(&v, 1, MPI_INT, p, 20, MPI_COMM_WORLD));
        }
        int completed = 0, outcount;
        while (completed < t_size) {
            CHECK_MPI(MPI_Waitsome(n, reqs, &outcount, indices, sts));
            CHECK(outcount >= 1);
            for (int k = 0; k < outcount; k++) {
                const int i = indices[k];
                CHECK(i % 2 == 0 && !done[i]);
                done[i] = 1;
                CHECK_EQ(sts[k].MPI_SOURCE, i / 2);
                CHECK_EQ(vals[i], 100 * (i / 2) + t_rank);
            }
            completed += outcount;
        }
        CHECK_MPI(MPI_Waitsome(n, reqs, &outcount, indices, sts));
        CHECK_EQ(outcount, MPI_UNDEFINED);
        t_ok("waitsome: %d receives", completed);
        free(vals);
        free(done);
        free(indices);
        free(reqs);
        free(sts);
    }

    /* Testsome and Testany loops over a ring exchange. */
    {
        int a = -1, b = -1, x = 5 + t_rank, y = 50 + t_rank;
        MPI_Request reqs[4];
        CHECK_MPI(MPI_Irecv(&a, 1, MPI_INT, left, 30, MPI_COMM_WORLD, &reqs[0]));
        CHECK_MPI(MPI_Irecv(&b, 1, MPI_INT, right, 31, MPI_COMM_WORLD, &reqs[1]));
        CHECK_MPI(MPI_Isend(&x, 1, MPI_INT, right, 30, MPI_COMM_WORLD, &reqs[2]));
        CHECK_MPI(MPI_Isend(&y, 1, MPI_INT, left, 31, MPI_COMM_WORLD, &reqs[3]));
        int done = 0, indices[4], outcount, seen[4] = {0, 0, 0, 0};
        while (done < 2) {
            CHECK_MPI(MPI_Testsome(2, reqs, &outcount, indices, MPI_STATUSES_IGNORE));
            CHECK(outcount != MPI_UNDEFINED);
            for (int k = 0; k < outcount; k++) {
                CHECK(!seen[indices[k]]);
                seen[indices[k]] = 1;
            }
            done += outcount;
        }
        done = 0;
        while (done < 2) {
            CHECK_MPI(MPI_Testany(2, reqs + 2, &idx, &flag, MPI_STATUS_IGNORE));
            if (flag) {
                CHECK(idx == 0 || idx == 1);
                CHECK(!seen[2 + idx]);
                seen[2 + idx] = 1;
                done++;
            }
        }
        CHECK_EQ(a, 5 + left);
        CHECK_EQ(b, 50 + right);
        t_ok("testsome/testany ring: %d %d", a, b);
    }

    /* Request_get_status does not free the request; Wait afterwards still works. */
    {
        int v = 9, r = 0;
        MPI_Request rr, s;
        CHECK_MPI(MPI_Irecv(&r, 1, MPI_INT, t_rank, 40, MPI_COMM_WORLD, &rr));
        CHECK_MPI(MPI_Request_get_status(rr, &flag, &st));
        /* the message has not been sent yet, so the receive cannot be complete */
        CHECK(!flag);
        CHECK_MPI(MPI_Isend(&v, 1, MPI_INT, t_rank, 40, MPI_COMM_WORLD, &s));
        flag = 0;
        while (!flag)
            CHECK_MPI(MPI_Request_get_status(rr, &flag, &st));
        CHECK(rr != MPI_REQUEST_NULL);
        CHECK_EQ(st.MPI_TAG, 40);
        CHECK_MPI(MPI_Wait(&rr, &st));
        CHECK(rr == MPI_REQUEST_NULL);
        CHECK_EQ(r, 9);
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &st));
        CHECK(flag);
        t_ok("request_get_status");
    }

    /* Cancel an Irecv that nothing will match; then a receive with the same envelope still
     * gets the message sent afterwards. */
    {
        int r = -1, v = 123;
        MPI_Request rr;
        CHECK_MPI(MPI_Irecv(&r, 1, MPI_INT, left, 50, MPI_COMM_WORLD, &rr));
        CHECK_MPI(MPI_Cancel(&rr));
        CHECK_MPI(MPI_Wait(&rr, &st));
        int cancelled;
        CHECK_MPI(MPI_Test_cancelled(&st, &cancelled));
        CHECK(cancelled);
        CHECK_EQ(r, -1);
        /* Only now may anyone send with this envelope, or the Irecv could have matched. */
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_Sendrecv(&v, 1, MPI_INT, right, 50, &r, 1, MPI_INT, left, 50,
                               MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Test_cancelled(&st, &cancelled));
        CHECK(!cancelled);
        CHECK_EQ(r, 123);
        t_ok("cancelled irecv, later message received normally");
    }

    /* Generalized requests. */
    {
        int free_log = 0;
        struct greq_state s1 = {11, 0, 0, &free_log}, s2 = {22, 0, 0, &free_log},
                          s3 = {33, 0, 0, &free_log};
        MPI_Request g1, g2, g3;
        CHECK_MPI(MPI_Grequest_start(greq_query, greq_free, greq_cancel, &s1, &g1));
        CHECK_MPI(MPI_Grequest_start(greq_query, greq_free, greq_cancel, &s2, &g2));
        CHECK_MPI(MPI_Grequest_start(greq_query, greq_free, greq_cancel, &s3, &g3));

        /* Not complete until MPI_Grequest_complete is called. */
        CHECK_MPI(MPI_Test(&g1, &flag, &st));
        CHECK(!flag);
        CHECK_MPI(MPI_Grequest_complete(g1));
        CHECK_MPI(MPI_Wait(&g1, &st));
        CHECK(g1 == MPI_REQUEST_NULL);
        CHECK(s1.freed);
        int count, cancelled;
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK_EQ(count, 3);
        CHECK_EQ(st.MPI_TAG, 11);
        CHECK_MPI(MPI_Test_cancelled(&st, &cancelled));
        CHECK(!cancelled);

        /* Cancel before completion: the cancel callback sees complete=0, the status says so. */
        CHECK_MPI(MPI_Cancel(&g2));
        CHECK_MPI(MPI_Grequest_complete(g2));
        CHECK_MPI(MPI_Wait(&g2, &st));
        CHECK_MPI(MPI_Test_cancelled(&st, &cancelled));
        CHECK(cancelled);

        /* Mixed with a point-to-point request in Waitall. */
        int v = 4, r = 0;
        MPI_Request mix[2];
        CHECK_MPI(MPI_Irecv(&r, 1, MPI_INT, t_rank, 60, MPI_COMM_WORLD, &mix[0]));
        mix[1] = g3;
        CHECK_MPI(MPI_Send(&v, 1, MPI_INT, t_rank, 60, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Grequest_complete(g3));
        MPI_Status sts[2];
        CHECK_MPI(MPI_Waitall(2, mix, sts));
        CHECK_EQ(r, 4);
        CHECK_EQ(sts[1].MPI_TAG, 33);
        CHECK_EQ(free_log, 11 + 22 + 33);
        t_ok("generalized requests: tags %d %d, free log %d", 11, sts[1].MPI_TAG, free_log);
    }

    return t_finish();
}
