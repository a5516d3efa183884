/* Attribute caching: Comm_create_keyval with copy and delete callbacks (copy on Comm_dup,
 * suppressed copy, delete on Comm_free, on delete_attr and on overwrite), the predefined
 * MPI_COMM_NULL_COPY_FN/MPI_COMM_DUP_FN, the callbacks receiving the program's communicator
 * handle and keyval, extra_state passed through, Comm_free_keyval while attributes still
 * use it; Type_create_keyval with Type_dup copying; Win_create_keyval; predefined attributes
 * MPI_TAG_UB, MPI_WTIME_IS_GLOBAL, MPI_IO and MPI_HOST (their ranks in the program's ABI) and
 * window attributes MPI_WIN_BASE/SIZE/DISP_UNIT.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

struct log {
    int copies, deletes;
    MPI_Comm last_comm; /* the handle the last callback was given */
    int last_keyval;
};

static int comm_copy(MPI_Comm old, int keyval, void *extra, void *in, void *out, int *flag)
{
    struct log *l = extra;
    l->copies++;
    l->last_comm = old;
    l->last_keyval = keyval;
    /* the copy is the value + 1000, and only for even values: odd ones are not copied */
    long v = (long)(intptr_t)in;
    if (v % 2 == 0) {
        *(void **)out = (void *)(intptr_t)(v + 1000);
        *flag = 1;
    } else {
        *flag = 0;
    }
    return MPI_SUCCESS;
}

static int comm_delete(MPI_Comm comm, int keyval, void *value, void *extra)
{
    struct log *l = extra;
    l->deletes++;
    l->last_comm = comm;
    l->last_keyval = keyval;
    (void)value;
    return MPI_SUCCESS;
}

static int type_copy(MPI_Datatype old, int keyval, void *extra, void *in, void *out, int *flag)
{
    int *copies = extra;
    (*copies)++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int type_delete(MPI_Datatype t, int keyval, void *value, void *extra)
{
    int *copies = extra;
    *copies += 100;
    return MPI_SUCCESS;
}

static int win_delete(MPI_Win w, int keyval, void *value, void *extra)
{
    int *deleted = extra;
    *deleted = (int)(intptr_t)value;
    return MPI_SUCCESS;
}

static long get_long(MPI_Comm c, int key, int *flag)
{
    void *v = NULL;
    CHECK_MPI(MPI_Comm_get_attr(c, key, &v, flag));
    return *flag ? (long)(intptr_t)v : -1;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "attributes");
    int flag;

    /* predefined attributes: values are pointers to ints */
    {
        int *tag_ub, *wtime_global, *io;
        CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag));
        CHECK(flag);
        CHECK(*tag_ub >= 32767);
        CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &wtime_global, &flag));
        if (flag)
            CHECK(*wtime_global == 0 || *wtime_global == 1);
        CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_IO, &io, &flag));
        CHECK(flag);
        /* a rank, or the library's own MPI_PROC_NULL / MPI_ANY_SOURCE (other numbers in each
         * ABI: the shim must hand back the program's) */
        CHECK(*io == MPI_ANY_SOURCE || *io == MPI_PROC_NULL || (*io >= 0 && *io < t_size));
        int *host;
        CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_HOST, &host, &flag));
        if (flag)
            CHECK(*host == MPI_PROC_NULL || (*host >= 0 && *host < t_size));
        /* the largest tag works */
        int v = 5, r = 0;
        CHECK_MPI(MPI_Sendrecv(&v, 1, MPI_INT, t_rank, *tag_ub, &r, 1, MPI_INT, t_rank, *tag_ub,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_EQ(r, 5);
        t_ok("tag_ub >= 32767 and usable; io attribute present");
    }

    struct log lg = {0, 0, MPI_COMM_NULL, 0};
    int key, key_nocopy, key_dup;
    CHECK_MPI(MPI_Comm_create_keyval(comm_copy, comm_delete, &key, &lg));
    CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &key_nocopy, NULL));
    CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &key_dup, NULL));

    MPI_Comm a;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &a));
    CHECK_MPI(MPI_Comm_set_attr(a, key, (void *)(intptr_t)(10 + 2 * t_rank)));
    CHECK_MPI(MPI_Comm_set_attr(a, key_nocopy, (void *)(intptr_t)7));
    CHECK_MPI(MPI_Comm_set_attr(a, key_dup, (void *)(intptr_t)8));
    CHECK_EQ(get_long(a, key, &flag), 10 + 2 * t_rank);

    /* dup: our copy callback runs once, sees `a` and `key`; NULL_COPY drops; DUP_FN copies */
    MPI_Comm b;
    CHECK_MPI(MPI_Comm_dup(a, &b));
    CHECK_EQ(lg.copies, 1);
    CHECK(lg.last_comm == a);
    CHECK_EQ(lg.last_keyval, key);
    CHECK_EQ(get_long(b, key, &flag), 1010 + 2 * t_rank);
    get_long(b, key_nocopy, &flag);
    CHECK(!flag);
    CHECK_EQ(get_long(b, key_dup, &flag), 8);
    {
        int f1, f2, f3;
        long v1 = get_long(b, key, &f1), v3 = get_long(b, key_dup, &f3);
        get_long(b, key_nocopy, &f2);
        printf("after dup: b has key=%ld (%d), nocopy present=%d, dup=%ld (%d)\n", v1, f1, f2, v3,
               f3);
    }

    /* an odd value is not copied (flag = 0 from the callback) */
    CHECK_MPI(MPI_Comm_set_attr(b, key, (void *)(intptr_t)3)); /* overwrite: delete runs */
    CHECK_EQ(lg.deletes, 1);
    CHECK(lg.last_comm == b);
    MPI_Comm c;
    CHECK_MPI(MPI_Comm_dup(b, &c));
    CHECK_EQ(lg.copies, 2);
    get_long(c, key, &flag);
    CHECK(!flag);

    /* delete_attr runs the delete callback */
    CHECK_MPI(MPI_Comm_delete_attr(a, key));
    CHECK_EQ(lg.deletes, 2);
    CHECK(lg.last_comm == a);
    get_long(a, key, &flag);
    CHECK(!flag);

    /* free the keyval while `b` still holds an attribute: the attribute stays readable and
     * its delete callback still runs when b is freed */
    CHECK_MPI(MPI_Comm_free_keyval(&key));
    CHECK_EQ(key, MPI_KEYVAL_INVALID);
    CHECK_MPI(MPI_Comm_free(&b));
    CHECK_EQ(lg.deletes, 3);
    CHECK_MPI(MPI_Comm_free(&c)); /* had no attribute for key: no callback */
    CHECK_EQ(lg.deletes, 3);
    CHECK_MPI(MPI_Comm_free(&a));
    CHECK_EQ(lg.deletes, 3);
    printf("ok comm keyvals: %d copies, %d deletes\n", lg.copies, lg.deletes);
    CHECK_MPI(MPI_Comm_free_keyval(&key_nocopy));
    CHECK_MPI(MPI_Comm_free_keyval(&key_dup));

    /* attributes on MPI_COMM_WORLD itself, deleted at Finalize... here explicitly */
    {
        int k;
        struct log wl = {0, 0, MPI_COMM_NULL, 0};
        CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_delete, &k, &wl));
        CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_WORLD, k, (void *)(intptr_t)99));
        CHECK_EQ(get_long(MPI_COMM_WORLD, k, &flag), 99);
        CHECK_MPI(MPI_Comm_delete_attr(MPI_COMM_WORLD, k));
        CHECK_EQ(wl.deletes, 1);
        CHECK(wl.last_comm == MPI_COMM_WORLD);
        CHECK_MPI(MPI_Comm_free_keyval(&k));
        t_ok("world attribute");
    }

    /* datatype attributes: copied by Type_dup, deleted by Type_free */
    {
        int tcount = 0, tk;
        MPI_Datatype t, t2;
        CHECK_MPI(MPI_Type_contiguous(3, MPI_INT, &t));
        CHECK_MPI(MPI_Type_create_keyval(type_copy, type_delete, &tk, &tcount));
        CHECK_MPI(MPI_Type_set_attr(t, tk, (void *)(intptr_t)42));
        CHECK_MPI(MPI_Type_dup(t, &t2));
        CHECK_EQ(tcount, 1);
        void *v;
        CHECK_MPI(MPI_Type_get_attr(t2, tk, &v, &flag));
        CHECK(flag && (intptr_t)v == 42);
        CHECK_MPI(MPI_Type_free(&t2));
        CHECK_EQ(tcount, 101);
        CHECK_MPI(MPI_Type_delete_attr(t, tk));
        CHECK_EQ(tcount, 201);
        CHECK_MPI(MPI_Type_get_attr(t, tk, &v, &flag));
        CHECK(!flag);
        CHECK_MPI(MPI_Type_free(&t));
        CHECK_MPI(MPI_Type_free_keyval(&tk));
        printf("ok type keyvals: log %d\n", tcount);
    }

    /* window attributes: predefined base/size/disp_unit and a user keyval */
    {
        int buf[8], wk, deleted = 0;
        MPI_Win win;
        CHECK_MPI(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
        void *base;
        MPI_Aint *size;
        int *unit;
        CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag));
        CHECK(flag && base == buf);
        CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_SIZE, &size, &flag));
        CHECK(flag && *size == (MPI_Aint)sizeof buf);
        CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &unit, &flag));
        CHECK(flag && *unit == (int)sizeof(int));
        CHECK_MPI(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, win_delete, &wk, &deleted));
        CHECK_MPI(MPI_Win_set_attr(win, wk, (void *)(intptr_t)(500 + t_rank)));
        void *v;
        CHECK_MPI(MPI_Win_get_attr(win, wk, &v, &flag));
        CHECK(flag && (intptr_t)v == 500 + t_rank);
        CHECK_MPI(MPI_Win_free(&win));
        CHECK_EQ(deleted, 500 + t_rank);
        CHECK_MPI(MPI_Win_free_keyval(&wk));
        printf("ok win attributes: size %ld, disp unit %d, deleted %d\n", (long)sizeof buf,
               (int)sizeof(int), deleted);
    }

    return t_finish();
}
