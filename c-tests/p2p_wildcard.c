/* Wildcard receives: MPI_ANY_SOURCE and MPI_ANY_TAG, alone and together, blocking and
 * nonblocking, with the matched source and tag read from the status; non-overtaking order per
 * sender under ANY_SOURCE; ANY_TAG not matching a message on another communicator.
 * Arrival order across senders is not deterministic, so results are put into tables indexed
 * by source and printed from there.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

#define PER_SENDER 5

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "p2p_wildcard");
    MPI_Status st;

    /* Gather-by-hand: every rank sends PER_SENDER messages to rank 0, tag = sequence number;
     * rank 0 receives with ANY_SOURCE/ANY_TAG and checks per-sender order (non-overtaking). */
    {
        int v[2];
        if (t_rank != 0) {
            for (int k = 0; k < PER_SENDER; k++) {
                v[0] = t_rank;
                v[1] = k;
                CHECK_MPI(MPI_Send(v, 2, MPI_INT, 0, k, MPI_COMM_WORLD));
            }
        } else {
            int *next = calloc(t_size, sizeof(int));
            long weighted = 0;
            for (int m = 0; m < (t_size - 1) * PER_SENDER; m++) {
                CHECK_MPI(MPI_Recv(v, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
                CHECK_EQ(st.MPI_SOURCE, v[0]);
                CHECK_EQ(st.MPI_TAG, v[1]);
                CHECK_EQ(v[1], next[v[0]]); /* in order per sender */
                next[v[0]]++;
                weighted += (long)v[0] * 100 + v[1];
            }
            for (int p = 1; p < t_size; p++)
                CHECK_EQ(next[p], PER_SENDER);
            t_ok("any_source/any_tag: %d messages, weighted sum %ld", (t_size - 1) * PER_SENDER,
                 weighted);
            free(next);
        }
        /* Rank 0's ANY_TAG receives above must not see the messages of the next part. */
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }

    /* ANY_SOURCE with a fixed tag: messages with another tag must stay unmatched until asked
     * for by tag. Every rank sends to its right neighbour with tags 1 then 2; every rank first
     * receives tag 2 with ANY_SOURCE, then tag 1 from the left. */
    {
        const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
        int a = 10 + t_rank, b = 20 + t_rank, x = -1, y = -1;
        MPI_Request s[2];
        CHECK_MPI(MPI_Isend(&a, 1, MPI_INT, right, 1, MPI_COMM_WORLD, &s[0]));
        CHECK_MPI(MPI_Isend(&b, 1, MPI_INT, right, 2, MPI_COMM_WORLD, &s[1]));
        CHECK_MPI(MPI_Recv(&y, 1, MPI_INT, MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &st));
        CHECK_EQ(st.MPI_SOURCE, left);
        CHECK_MPI(MPI_Recv(&x, 1, MPI_INT, left, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        CHECK_EQ(st.MPI_TAG, 1);
        CHECK_MPI(MPI_Waitall(2, s, MPI_STATUSES_IGNORE));
        CHECK_EQ(x, 10 + left);
        CHECK_EQ(y, 20 + left);
        t_ok("tag-selective any_source: %d then %d", y, x);
    }

    /* Nonblocking wildcard receives posted before the sends: each gets a distinct message;
     * which one is not fixed, so rank 0 sorts them by source before printing. */
    {
        const int n = t_size; /* one message from every rank, rank 0 included */
        int *vals = malloc(sizeof(int) * n), *bysrc = malloc(sizeof(int) * n);
        MPI_Request *reqs = malloc(sizeof(MPI_Request) * n);
        MPI_Status *sts = malloc(sizeof(MPI_Status) * n);
        if (t_rank == 0)
            for (int i = 0; i < n; i++)
                CHECK_MPI(MPI_Irecv(&vals[i], 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG,
                                    MPI_COMM_WORLD, &reqs[i]));
        int v = 1000 + t_rank * t_rank;
        MPI_Request sreq;
        CHECK_MPI(MPI_Isend(&v, 1, MPI_INT, 0, 50 + t_rank, MPI_COMM_WORLD, &sreq));
        if (t_rank == 0) {
            CHECK_MPI(MPI_Waitall(n, reqs, sts));
            for (int i = 0; i < n; i++)
                bysrc[i] = -1;
            for (int i = 0; i < n; i++) {
                CHECK_EQ(sts[i].MPI_TAG, 50 + sts[i].MPI_SOURCE);
                CHECK_EQ(bysrc[sts[i].MPI_SOURCE], -1);
                bysrc[sts[i].MPI_SOURCE] = vals[i];
            }
            printf("ok irecv any_source/any_tag by source:");
            for (int i = 0; i < n; i++) {
                CHECK_EQ(bysrc[i], 1000 + i * i);
                printf(" %d", bysrc[i]);
            }
            printf("\n");
        }
        CHECK_MPI(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
        free(vals);
        free(bysrc);
        free(reqs);
        free(sts);
    }

    /* Communicators isolate wildcards: a message on a duplicate is not matched by an ANY_TAG,
     * ANY_SOURCE receive on MPI_COMM_WORLD. */
    {
        MPI_Comm dup;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
        int on_dup = 5, on_world = 6, r1 = 0, r2 = 0;
        MPI_Request s[2];
        CHECK_MPI(MPI_Isend(&on_dup, 1, MPI_INT, t_rank, 0, dup, &s[0]));
        CHECK_MPI(MPI_Isend(&on_world, 1, MPI_INT, t_rank, 0, MPI_COMM_WORLD, &s[1]));
        CHECK_MPI(MPI_Recv(&r1, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Recv(&r2, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, dup, &st));
        CHECK_EQ(r1, 6);
        CHECK_EQ(r2, 5);
        CHECK_MPI(MPI_Waitall(2, s, MPI_STATUSES_IGNORE));
        CHECK_MPI(MPI_Comm_free(&dup));
        t_ok("wildcards do not cross communicators");
    }

    return t_finish();
}
