/* The MPI_ERROR field of a status: calls that complete one request or probe one message leave
 * it as the program set it (MPI_Recv, MPI_Wait, MPI_Test, MPI_Probe, MPI_Iprobe, MPI_Mprobe,
 * MPI_Improbe, MPI_Mrecv, MPI_Sendrecv, MPI_Waitany, MPI_Testany, MPI_Request_get_status, null
 * and MPI_PROC_NULL requests); the calls that complete several requests write it only when
 * they return MPI_ERR_IN_STATUS (then in every status: the error, or success, or pending).
 * Sources, tags and counts are checked along the way. Messages go around a ring (to oneself
 * at 1 rank).
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

#define SENTINEL 12345

static int to, from;

static const char *field(const MPI_Status *st)
{
    static char buf[64];
    if (st->MPI_ERROR == SENTINEL)
        return "kept";
    int c = -1;
    if (MPI_Error_class(st->MPI_ERROR, &c) != MPI_SUCCESS)
        return "garbage";
    snprintf(buf, sizeof buf, "set to %s", t_errclass_name(c));
    return buf;
}

static void fresh(MPI_Status *st)
{
    memset(st, 0, sizeof *st);
    st->MPI_ERROR = SENTINEL;
}

static void report(const char *what, const MPI_Status *st)
{
    printf("%s: MPI_ERROR %s\n", what, field(st));
}

/* Checks a status for one int message of `tag` from `from`. */
static void check_msg(const MPI_Status *st, int tag, int n)
{
    int count = -1;
    CHECK_EQ(st->MPI_SOURCE, from);
    CHECK_EQ(st->MPI_TAG, tag);
    CHECK_MPI(MPI_Get_count(st, MPI_INT, &count));
    CHECK_EQ(count, n);
}

static MPI_Request send_one(int tag, int value)
{
    static int vals[64];
    static int next = 0;
    MPI_Request r;
    int *v = &vals[next++ % 64];
    *v = value;
    CHECK_MPI(MPI_Isend(v, 1, MPI_INT, to, tag, MPI_COMM_WORLD, &r));
    return r;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "status_error");
    to = (t_rank + 1) % t_size;
    from = (t_rank + t_size - 1) % t_size;
    MPI_Status st;
    MPI_Request s, r;
    int v = -1, flag = 0;

    s = send_one(1, 10 + t_rank);
    fresh(&st);
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, from, 1, MPI_COMM_WORLD, &st));
    check_msg(&st, 1, 1);
    CHECK_EQ(v, 10 + from);
    report("MPI_Recv", &st);
    fresh(&st);
    CHECK_MPI(MPI_Wait(&s, &st));
    report("MPI_Wait of a send", &st);

    s = send_one(2, 20);
    CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, from, 2, MPI_COMM_WORLD, &r));
    fresh(&st);
    CHECK_MPI(MPI_Wait(&r, &st));
    check_msg(&st, 2, 1);
    report("MPI_Wait", &st);
    CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));

    s = send_one(3, 30);
    CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, from, 3, MPI_COMM_WORLD, &r));
    flag = 0;
    while (!flag) {
        fresh(&st);
        CHECK_MPI(MPI_Test(&r, &flag, &st));
    }
    check_msg(&st, 3, 1);
    report("MPI_Test", &st);
    CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));

    s = send_one(4, 40);
    fresh(&st);
    CHECK_MPI(MPI_Probe(from, 4, MPI_COMM_WORLD, &st));
    check_msg(&st, 4, 1);
    report("MPI_Probe", &st);
    flag = 0;
    while (!flag) {
        fresh(&st);
        CHECK_MPI(MPI_Iprobe(from, 4, MPI_COMM_WORLD, &flag, &st));
    }
    check_msg(&st, 4, 1);
    report("MPI_Iprobe", &st);
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, from, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));

    {
        MPI_Message m;
        s = send_one(5, 50);
        fresh(&st);
        CHECK_MPI(MPI_Mprobe(from, 5, MPI_COMM_WORLD, &m, &st));
        check_msg(&st, 5, 1);
        report("MPI_Mprobe", &st);
        fresh(&st);
        CHECK_MPI(MPI_Mrecv(&v, 1, MPI_INT, &m, &st));
        check_msg(&st, 5, 1);
        CHECK(m == MPI_MESSAGE_NULL);
        report("MPI_Mrecv", &st);
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));

        s = send_one(6, 60);
        flag = 0;
        while (!flag) {
            fresh(&st);
            CHECK_MPI(MPI_Improbe(from, 6, MPI_COMM_WORLD, &flag, &m, &st));
        }
        check_msg(&st, 6, 1);
        report("MPI_Improbe", &st);
        CHECK_MPI(MPI_Imrecv(&v, 1, MPI_INT, &m, &r));
        fresh(&st);
        CHECK_MPI(MPI_Wait(&r, &st));
        check_msg(&st, 6, 1);
        report("MPI_Imrecv + MPI_Wait", &st);
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));

        fresh(&st);
        CHECK_MPI(MPI_Mprobe(MPI_PROC_NULL, 7, MPI_COMM_WORLD, &m, &st));
        CHECK(m == MPI_MESSAGE_NO_PROC);
        report("MPI_Mprobe of MPI_PROC_NULL", &st);
        fresh(&st);
        CHECK_MPI(MPI_Mrecv(&v, 1, MPI_INT, &m, &st));
        CHECK_EQ(st.MPI_SOURCE, MPI_PROC_NULL);
        report("MPI_Mrecv of MPI_MESSAGE_NO_PROC", &st);
    }

    fresh(&st);
    CHECK_MPI(MPI_Sendrecv(&t_rank, 1, MPI_INT, to, 8, &v, 1, MPI_INT, from, 8, MPI_COMM_WORLD, &st));
    check_msg(&st, 8, 1);
    CHECK_EQ(v, from);
    report("MPI_Sendrecv", &st);

    fresh(&st);
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, MPI_PROC_NULL, 9, MPI_COMM_WORLD, &st));
    CHECK_EQ(st.MPI_SOURCE, MPI_PROC_NULL);
    report("MPI_Recv from MPI_PROC_NULL", &st);
    /* (Not printed: MPI_Wait of MPI_REQUEST_NULL returns an empty status, whose MPI_ERROR is
     * MPI_SUCCESS in MPICH 5 and left alone by MPICH 4.0.2.) */

    {
        MPI_Request rs[2];
        int idx = -1, vv[2];
        s = send_one(10, 100);
        rs[0] = MPI_REQUEST_NULL;
        CHECK_MPI(MPI_Irecv(&vv[1], 1, MPI_INT, from, 10, MPI_COMM_WORLD, &rs[1]));
        fresh(&st);
        CHECK_MPI(MPI_Waitany(2, rs, &idx, &st));
        CHECK_EQ(idx, 1);
        check_msg(&st, 10, 1);
        report("MPI_Waitany", &st);
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));

        s = send_one(11, 110);
        CHECK_MPI(MPI_Irecv(&vv[0], 1, MPI_INT, from, 11, MPI_COMM_WORLD, &rs[0]));
        flag = 0;
        while (!flag) {
            fresh(&st);
            CHECK_MPI(MPI_Testany(2, rs, &idx, &flag, &st));
        }
        CHECK_EQ(idx, 0);
        check_msg(&st, 11, 1);
        report("MPI_Testany", &st);
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));

        s = send_one(12, 120);
        CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, from, 12, MPI_COMM_WORLD, &r));
        flag = 0;
        while (!flag) {
            fresh(&st);
            CHECK_MPI(MPI_Request_get_status(r, &flag, &st));
        }
        check_msg(&st, 12, 1);
        report("MPI_Request_get_status", &st);
        CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
    }

    /* Several completions that succeed: the fields stay. */
    {
        MPI_Request rs[2], ss[2];
        MPI_Status sts[2];
        int vv[2], outcount = 0, idx[2];
        ss[0] = send_one(13, 130);
        ss[1] = send_one(14, 140);
        CHECK_MPI(MPI_Irecv(&vv[0], 1, MPI_INT, from, 13, MPI_COMM_WORLD, &rs[0]));
        CHECK_MPI(MPI_Irecv(&vv[1], 1, MPI_INT, from, 14, MPI_COMM_WORLD, &rs[1]));
        fresh(&sts[0]);
        fresh(&sts[1]);
        CHECK_MPI(MPI_Waitall(2, rs, sts));
        check_msg(&sts[0], 13, 1);
        check_msg(&sts[1], 14, 1);
        report("MPI_Waitall [0]", &sts[0]);
        report("MPI_Waitall [1]", &sts[1]);
        fresh(&sts[0]);
        fresh(&sts[1]);
        flag = 0;
        while (!flag)
            CHECK_MPI(MPI_Testall(2, ss, &flag, sts));
        report("MPI_Testall [0]", &sts[0]);

        ss[0] = send_one(15, 150);
        CHECK_MPI(MPI_Irecv(&vv[0], 1, MPI_INT, from, 15, MPI_COMM_WORLD, &rs[0]));
        rs[1] = MPI_REQUEST_NULL;
        fresh(&sts[0]);
        CHECK_MPI(MPI_Waitsome(2, rs, &outcount, idx, sts));
        CHECK_EQ(outcount, 1);
        CHECK_EQ(idx[0], 0);
        check_msg(&sts[0], 15, 1);
        report("MPI_Waitsome", &sts[0]);
        CHECK_MPI(MPI_Wait(&ss[0], MPI_STATUS_IGNORE));
    }

    /* A truncated receive: alone, MPI_Wait returns the error and leaves the field; among
     * others, MPI_Waitall returns MPI_ERR_IN_STATUS and sets every status's field. */
    {
        MPI_Request rs[2], ss[3];
        MPI_Status sts[2];
        int two[2] = {1, 2}, vv[2];
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        CHECK_MPI(MPI_Isend(two, 2, MPI_INT, to, 16, MPI_COMM_WORLD, &ss[0]));
        CHECK_MPI(MPI_Irecv(&vv[0], 1, MPI_INT, from, 16, MPI_COMM_WORLD, &r));
        fresh(&st);
        int rc = MPI_Wait(&r, &st);
        int c = -1;
        MPI_Error_class(rc, &c);
        printf("MPI_Wait of a truncated receive returns %s\n", t_errclass_name(c));
        report("MPI_Wait of a truncated receive", &st);

        CHECK_MPI(MPI_Isend(two, 2, MPI_INT, to, 17, MPI_COMM_WORLD, &ss[1]));
        CHECK_MPI(MPI_Isend(two, 1, MPI_INT, to, 18, MPI_COMM_WORLD, &ss[2]));
        CHECK_MPI(MPI_Irecv(&vv[0], 1, MPI_INT, from, 17, MPI_COMM_WORLD, &rs[0]));
        CHECK_MPI(MPI_Irecv(&vv[1], 1, MPI_INT, from, 18, MPI_COMM_WORLD, &rs[1]));
        /* both receives complete before the Waitall, so its outcome does not depend on timing */
        for (int i = 0; i < 3; i++)
            CHECK_MPI(MPI_Wait(&ss[i], MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        for (int i = 0; i < 2; i++) {
            flag = 0;
            while (!flag)
                MPI_Request_get_status(rs[i], &flag, MPI_STATUS_IGNORE);
        }
        fresh(&sts[0]);
        fresh(&sts[1]);
        rc = MPI_Waitall(2, rs, sts);
        MPI_Error_class(rc, &c);
        printf("MPI_Waitall with a truncated receive returns %s\n", t_errclass_name(c));
        report("MPI_Waitall with a truncated receive [0]", &sts[0]);
        report("MPI_Waitall with a truncated receive [1]", &sts[1]);
        printf("MPI_Waitall with a truncated receive: requests left %d %d\n", rs[0] != MPI_REQUEST_NULL,
               rs[1] != MPI_REQUEST_NULL);
        for (int i = 0; i < 2; i++)
            CHECK_MPI(MPI_Wait(&rs[i], MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    }
    return t_finish();
}
