/* Probes: Probe and Iprobe (specific and wildcard) to size a receive from the status,
 * Iprobe finding nothing, Mprobe/Improbe with Mrecv/Imrecv (matched probes remove the message
 * from matching, so a later wildcard receive cannot steal it), MPI_PROC_NULL giving
 * MPI_MESSAGE_NO_PROC, probes of zero-length messages.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "probe");
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    MPI_Status st;
    int count, flag;

    /* Nothing has been sent on this fresh communicator: Iprobe reports nothing. */
    {
        MPI_Comm c;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c, &flag, &st));
        CHECK(!flag);
        MPI_Message m = MPI_MESSAGE_NULL;
        CHECK_MPI(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, c, &flag, &m, &st));
        CHECK(!flag);
        CHECK_MPI(MPI_Comm_free(&c));
        t_ok("iprobe/improbe on an idle communicator: nothing");
    }

    /* Variable-length message: Probe for its size, allocate, receive. Rank r sends 3*r+2
     * ints to the right. */
    {
        int n = 3 * t_rank + 2;
        int *out = malloc(sizeof(int) * n);
        for (int i = 0; i < n; i++)
            out[i] = t_rank + i;
        MPI_Request s;
        CHECK_MPI(MPI_Isend(out, n, MPI_INT, right, 5, MPI_COMM_WORLD, &s));
        CHECK_MPI(MPI_Probe(left, 5, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK_EQ(count, 3 * left + 2);
        int *in = malloc(sizeof(int) * count);
        CHECK_MPI(MPI_Recv(in, count, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
        for (int i = 0; i < count; i++)
            CHECK_EQ(in[i], left + i);
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
        t_ok("probe sized %d ints from %d", count, left);
        free(in);
        free(out);
    }

    /* Iprobe with wildcards until the message shows up, then receive exactly that message. */
    {
        double v = 1.5 * t_rank, r = -1;
        MPI_Request s;
        CHECK_MPI(MPI_Isend(&v, 1, MPI_DOUBLE, right, 6 + t_rank, MPI_COMM_WORLD, &s));
        flag = 0;
        while (!flag)
            CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        CHECK_EQ(st.MPI_SOURCE, left);
        CHECK_EQ(st.MPI_TAG, 6 + left);
        CHECK_MPI(MPI_Get_count(&st, MPI_DOUBLE, &count));
        CHECK_EQ(count, 1);
        /* A second probe sees the same message again: probing does not consume. */
        CHECK_MPI(MPI_Iprobe(left, 6 + left, MPI_COMM_WORLD, &flag, &st));
        CHECK(flag);
        CHECK_MPI(MPI_Recv(&r, 1, MPI_DOUBLE, left, 6 + left, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(r == 1.5 * left);
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
        t_ok("iprobe any/any then recv %.1f", r);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD)); /* keep the wildcard probes above apart from below */

    /* Mprobe + Mrecv: two messages with the same envelope; the first is claimed by Mprobe, then
     * a plain wildcard receive gets the second, and Mrecv still gets the first. */
    {
        int a[2] = {t_rank, 1}, b[2] = {t_rank, 2}, x[2], y[2];
        MPI_Request s[2];
        CHECK_MPI(MPI_Isend(a, 2, MPI_INT, right, 7, MPI_COMM_WORLD, &s[0]));
        CHECK_MPI(MPI_Isend(b, 2, MPI_INT, right, 7, MPI_COMM_WORLD, &s[1]));
        MPI_Message m;
        CHECK_MPI(MPI_Mprobe(left, 7, MPI_COMM_WORLD, &m, &st));
        CHECK(m != MPI_MESSAGE_NULL);
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK_EQ(count, 2);
        CHECK_MPI(MPI_Recv(y, 2, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Mrecv(x, 2, MPI_INT, &m, &st));
        CHECK(m == MPI_MESSAGE_NULL);
        CHECK_EQ(st.MPI_SOURCE, left);
        CHECK_EQ(x[0], left);
        CHECK_EQ(x[1], 1);
        CHECK_EQ(y[1], 2);
        CHECK_MPI(MPI_Waitall(2, s, MPI_STATUSES_IGNORE));
        t_ok("mprobe claimed message %d, plain recv got %d", x[1], y[1]);
    }

    /* Improbe loop + Imrecv completed with Wait; then Improbe with ANY_SOURCE on several
     * senders, received into a table by source. */
    {
        long v = 1000 + t_rank, r = 0;
        MPI_Request s, rr;
        MPI_Message m;
        CHECK_MPI(MPI_Isend(&v, 1, MPI_LONG, right, 8, MPI_COMM_WORLD, &s));
        flag = 0;
        while (!flag)
            CHECK_MPI(MPI_Improbe(left, 8, MPI_COMM_WORLD, &flag, &m, &st));
        CHECK_MPI(MPI_Imrecv(&r, 1, MPI_LONG, &m, &rr));
        CHECK(m == MPI_MESSAGE_NULL);
        CHECK_MPI(MPI_Wait(&rr, &st));
        CHECK_EQ(r, 1000 + left);
        CHECK_EQ(st.MPI_TAG, 8);
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
        t_ok("improbe + imrecv got %ld", r);
    }
    {
        int v = t_rank * t_rank;
        MPI_Request s;
        CHECK_MPI(MPI_Isend(&v, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, &s));
        if (t_rank == 0) {
            int *bysrc = calloc(t_size, sizeof(int));
            for (int k = 0; k < t_size; k++) {
                MPI_Message m;
                int val;
                flag = 0;
                while (!flag)
                    CHECK_MPI(MPI_Improbe(MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &flag, &m, &st));
                const int src = st.MPI_SOURCE;
                CHECK_MPI(MPI_Mrecv(&val, 1, MPI_INT, &m, MPI_STATUS_IGNORE));
                CHECK_EQ(val, src * src);
                bysrc[src]++;
            }
            for (int p = 0; p < t_size; p++)
                CHECK_EQ(bysrc[p], 1);
            t_ok("improbe any_source: one message from each of %d ranks", t_size);
            free(bysrc);
        }
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
    }

    /* MPI_PROC_NULL: Mprobe returns MPI_MESSAGE_NO_PROC, and Mrecv of it is a no-op. Probe
     * and Iprobe return at once with source MPI_PROC_NULL. */
    {
        MPI_Message m;
        int x = 77;
        CHECK_MPI(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &m, &st));
        CHECK(m == MPI_MESSAGE_NO_PROC);
        CHECK_EQ(st.MPI_SOURCE, MPI_PROC_NULL);
        CHECK_MPI(MPI_Mrecv(&x, 1, MPI_INT, &m, &st));
        CHECK(m == MPI_MESSAGE_NULL);
        CHECK_EQ(x, 77);
        CHECK_MPI(MPI_Probe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
        CHECK_EQ(st.MPI_SOURCE, MPI_PROC_NULL);
        CHECK_MPI(MPI_Iprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &flag, &st));
        CHECK(flag);
        t_ok("proc_null probes");
    }

    /* Zero-length messages are probed like any other. */
    {
        MPI_Request s;
        CHECK_MPI(MPI_Isend(NULL, 0, MPI_INT, right, 10, MPI_COMM_WORLD, &s));
        CHECK_MPI(MPI_Probe(left, 10, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK_EQ(count, 0);
        CHECK_MPI(MPI_Recv(NULL, 0, MPI_INT, left, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
        t_ok("zero-length probe");
    }

    return t_finish();
}
