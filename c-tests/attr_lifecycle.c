/* Attribute and keyval lifetimes, as MPICH's own attr tests probe them: the order in which copy
 * and delete callbacks run (communicators: newest attribute first; datatypes and windows: in
 * order of setting), delete callbacks of MPI_COMM_SELF run by MPI_Finalize before anything is
 * finalized, a keyval freed (even several times, also from inside a delete callback) while
 * attributes still use it stays usable until the last of them is deleted, and a copy callback
 * that fails makes MPI_Comm_dup / MPI_Type_dup return MPI_COMM_NULL / MPI_DATATYPE_NULL with an
 * error; a delete callback that fails makes set/delete fail and keeps the attribute.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

#define NKEYS 6

/* The order callbacks ran in, as "c3 c2 ..." (copies) or "d3 d2 ..." (deletes). */
static char trace[512];

static void note(char what, long v)
{
    size_t n = strlen(trace);
    snprintf(trace + n, sizeof trace - n, "%s%c%ld", n ? " " : "", what, v);
}

static void show(const char *label)
{
    printf("%s: %s\n", label, trace);
    trace[0] = '\0';
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The trace's entries in sorted order, where only the set of callbacks is defined. */
static void show_sorted(const char *label)
{
    char *items[64];
    int n = 0;
    for (char *tok = strtok(trace, " "); tok && n < 64; tok = strtok(NULL, " "))
        items[n++] = tok;
    qsort(items, n, sizeof items[0], by_text);
    printf("%s:", label);
    for (int i = 0; i < n; i++)
        printf(" %s", items[i]);
    printf("\n");
    trace[0] = '\0';
}

static int copy_note(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag)
{
    (void)c, (void)k, (void)extra;
    note('c', (long)(intptr_t)in);
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_note(MPI_Comm c, int k, void *v, void *extra)
{
    (void)c, (void)k, (void)extra;
    note('d', (long)(intptr_t)v);
    return MPI_SUCCESS;
}

static int type_copy_note(MPI_Datatype t, int k, void *extra, void *in, void *out, int *flag)
{
    (void)t, (void)k, (void)extra;
    note('c', (long)(intptr_t)in);
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int type_delete_note(MPI_Datatype t, int k, void *v, void *extra)
{
    (void)t, (void)k, (void)extra;
    note('d', (long)(intptr_t)v);
    return MPI_SUCCESS;
}

static int win_delete_note(MPI_Win w, int k, void *v, void *extra)
{
    (void)w, (void)k, (void)extra;
    note('d', (long)(intptr_t)v);
    return MPI_SUCCESS;
}

/* MPI_COMM_SELF's delete callbacks at MPI_Finalize: print as they run (MPI is not finalized
 * yet, so MPI_Finalized says 0). */
static int self_delete(MPI_Comm c, int k, void *v, void *extra)
{
    (void)c, (void)k, (void)extra;
    int fin = -1;
    MPI_Finalized(&fin);
    printf("finalize deletes self attribute %ld (finalized %d)\n", (long)(intptr_t)v, fin);
    return MPI_SUCCESS;
}

/* A delete callback that frees the keyval it is called for, as keyval_double_free does. */
static int delete_frees_keyval(MPI_Comm c, int k, void *v, void *extra)
{
    (void)c, (void)v;
    int *calls = extra;
    (*calls)++;
    int copy = k;
    CHECK_MPI(MPI_Comm_free_keyval(&copy));
    CHECK_EQ(copy, MPI_KEYVAL_INVALID);
    return MPI_SUCCESS;
}

static int copy_fails(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag)
{
    (void)c, (void)k, (void)extra, (void)in;
    *(void **)out = NULL;
    *flag = 1;
    return MPI_ERR_OTHER;
}

static int type_copy_fails(MPI_Datatype t, int k, void *extra, void *in, void *out, int *flag)
{
    (void)t, (void)k, (void)extra, (void)in;
    *(void **)out = NULL;
    *flag = 1;
    return MPI_ERR_ARG;
}

static int delete_refuses = 1;
static int delete_fails(MPI_Comm c, int k, void *v, void *extra)
{
    (void)c, (void)k, (void)v, (void)extra;
    return delete_refuses ? MPI_ERR_ARG : MPI_SUCCESS;
}

static const char *cls(int rc)
{
    int c = -1;
    MPI_Error_class(rc, &c);
    return t_errclass_name(c);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "attr_lifecycle");
    int keys[NKEYS];

    /* Communicators: copies and deletes run newest attribute first. */
    {
        MPI_Comm a, b;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &a));
        for (int i = 0; i < NKEYS; i++) {
            CHECK_MPI(MPI_Comm_create_keyval(copy_note, delete_note, &keys[i], NULL));
            CHECK_MPI(MPI_Comm_set_attr(a, keys[i], (void *)(intptr_t)i));
        }
        /* overwriting keeps the attribute's place and deletes the old value */
        CHECK_MPI(MPI_Comm_set_attr(a, keys[2], (void *)(intptr_t)20));
        show("comm overwrite");
        CHECK_MPI(MPI_Comm_dup(a, &b));
        show("comm dup copies");
        CHECK_MPI(MPI_Comm_delete_attr(a, keys[4]));
        show("comm delete_attr");
        CHECK_MPI(MPI_Comm_free(&a));
        show("comm free deletes");
        CHECK_MPI(MPI_Comm_free(&b));
        show("comm free dup deletes");
        for (int i = 0; i < NKEYS; i++)
            CHECK_MPI(MPI_Comm_free_keyval(&keys[i]));
    }

    /* Datatypes: which callbacks ran (their order, and when a freed type that a duplicate
     * still uses is deleted, are MPICH's own business: MPICH defers them). */
    {
        MPI_Datatype t, u;
        CHECK_MPI(MPI_Type_contiguous(2, MPI_INT, &t));
        for (int i = 0; i < NKEYS; i++) {
            CHECK_MPI(MPI_Type_create_keyval(type_copy_note, type_delete_note, &keys[i], NULL));
            CHECK_MPI(MPI_Type_set_attr(t, keys[i], (void *)(intptr_t)i));
        }
        CHECK_MPI(MPI_Type_dup(t, &u));
        CHECK_MPI(MPI_Type_free(&t));
        CHECK_MPI(MPI_Type_free(&u));
        show_sorted("type dup and free callbacks");
        for (int i = 0; i < NKEYS; i++)
            CHECK_MPI(MPI_Type_free_keyval(&keys[i]));
    }

    /* Windows: in order of setting. */
    {
        MPI_Win w;
        int mem = 0;
        CHECK_MPI(MPI_Win_create(&mem, sizeof mem, sizeof mem, MPI_INFO_NULL, MPI_COMM_WORLD, &w));
        for (int i = 0; i < NKEYS; i++) {
            CHECK_MPI(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, win_delete_note, &keys[i], NULL));
            CHECK_MPI(MPI_Win_set_attr(w, keys[i], (void *)(intptr_t)i));
        }
        CHECK_MPI(MPI_Win_free(&w));
        show("win free deletes");
        for (int i = 0; i < NKEYS; i++)
            CHECK_MPI(MPI_Win_free_keyval(&keys[i]));
    }

    /* A keyval freed while in use: freeing it again (through copies of the handle, and from its
     * own delete callback) is no error, its attributes stay readable and deletable. */
    {
        int calls = 0, key, copy1, copy2, flag = 0;
        void *v = NULL;
        MPI_Comm a;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &a));
        CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_frees_keyval, &key, &calls));
        copy1 = copy2 = key;
        CHECK_MPI(MPI_Comm_set_attr(a, key, (void *)(intptr_t)7));
        CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, key, (void *)(intptr_t)8));
        CHECK_MPI(MPI_Comm_free_keyval(&key));
        CHECK_EQ(key, MPI_KEYVAL_INVALID);
        CHECK_MPI(MPI_Comm_free_keyval(&copy1));
        CHECK_MPI(MPI_Comm_get_attr(a, copy2, &v, &flag));
        printf("freed keyval: attribute still there %d value %ld\n", flag, flag ? (long)(intptr_t)v : -1L);
        CHECK_MPI(MPI_Comm_delete_attr(a, copy2));
        printf("freed keyval: attribute deleted, callback ran %d time(s)\n", calls);
        CHECK_MPI(MPI_Comm_free(&a));
        /* MPI_COMM_SELF's attribute still holds the keyval: one more free is still fine */
        CHECK_MPI(MPI_Comm_free_keyval(&copy2));
        printf("freed keyval: freed three times while in use, callback ran %d time(s)\n", calls);
        /* the attribute on MPI_COMM_SELF is deleted by MPI_Finalize (the callback frees the
         * keyval once more) */
    }

    /* A failing copy callback: the duplicate is the null handle and the call fails; a failing
     * delete callback: set and delete fail and the attribute stays. */
    {
        MPI_Comm a, b = MPI_COMM_WORLD;
        int key, flag = 0;
        void *v = NULL;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &a));
        CHECK_MPI(MPI_Comm_set_errhandler(a, MPI_ERRORS_RETURN));
        CHECK_MPI(MPI_Comm_create_keyval(copy_fails, delete_fails, &key, NULL));
        CHECK_MPI(MPI_Comm_set_attr(a, key, (void *)(intptr_t)1));
        int rc = MPI_Comm_set_attr(a, key, (void *)(intptr_t)2);
        printf("set over a failing delete: %s\n", cls(rc));
        rc = MPI_Comm_delete_attr(a, key);
        printf("delete with a failing delete: %s\n", cls(rc));
        CHECK_MPI(MPI_Comm_get_attr(a, key, &v, &flag));
        printf("attribute kept: %d value %ld\n", flag, flag ? (long)(intptr_t)v : -1L);
        rc = MPI_Comm_dup(a, &b);
        printf("comm dup with a failing copy: %s, new handle is MPI_COMM_NULL: %d\n", cls(rc), b == MPI_COMM_NULL);
        delete_refuses = 0;
        CHECK_MPI(MPI_Comm_free(&a));
        CHECK_MPI(MPI_Comm_free_keyval(&key));

        MPI_Datatype t, u = MPI_INT;
        /* a datatype's errors go to MPI_COMM_WORLD's handler (MPI_COMM_SELF's in MPI 4.1) */
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
        CHECK_MPI(MPI_Type_contiguous(3, MPI_INT, &t));
        CHECK_MPI(MPI_Type_create_keyval(type_copy_fails, MPI_TYPE_NULL_DELETE_FN, &key, NULL));
        CHECK_MPI(MPI_Type_set_attr(t, key, (void *)(intptr_t)1));
        rc = MPI_Type_dup(t, &u);
        printf("type dup with a failing copy: %s, new handle is MPI_DATATYPE_NULL: %d\n", cls(rc), u == MPI_DATATYPE_NULL);
        CHECK_MPI(MPI_Type_free(&t));
        CHECK_MPI(MPI_Type_free_keyval(&key));
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL));
    }

    /* MPI_COMM_SELF: MPI_Finalize deletes its attributes first, newest first, with MPI still
     * usable; the keyvals may be freed before. */
    for (int i = 0; i < NKEYS; i++) {
        CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete, &keys[i], NULL));
        CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, keys[i], (void *)(intptr_t)(100 + i)));
    }
    for (int i = 0; i < NKEYS; i++)
        CHECK_MPI(MPI_Comm_free_keyval(&keys[i]));
    return t_finish();
}
