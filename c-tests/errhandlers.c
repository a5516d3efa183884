/* Error handling: with MPI_ERRORS_RETURN, invalid arguments and invalid or freed handles
 * return errors whose CLASS is printed (never the library's message text): null and garbage
 * communicator/datatype/op handles, a freed communicator, bad rank, tag, count and root, an
 * error inside Waitall (MPI_ERR_IN_STATUS with per-request MPI_ERROR), and truncation. A user
 * error handler (Comm_create_errhandler) invoked by a real error and by Comm_call_errhandler,
 * seeing the program's communicator handle; Comm_get_errhandler and inheritance on dup;
 * Win_create_errhandler + Win_call_errhandler; Add_error_class/Add_error_code/
 * Add_error_string with Error_class/Error_string of the new code.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

static int handler_calls, handler_last_code;
static MPI_Comm handler_last_comm = MPI_COMM_NULL;

static void my_handler(MPI_Comm *comm, int *code, ...)
{
    handler_calls++;
    handler_last_code = *code;
    handler_last_comm = *comm;
}

static int win_calls, win_last_code;
static void my_win_handler(MPI_Win *win, int *code, ...)
{
    win_calls++;
    win_last_code = *code;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "errhandlers");
    /* errors not tied to a communicator (e.g. a null one) go to MPI_COMM_SELF's handler in
     * MPI 4 and to MPI_COMM_WORLD's before; return codes from both */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    int x = 1, y[4], size;

    /* invalid arguments */
    t_print_error("send on MPI_COMM_NULL", MPI_Send(&x, 1, MPI_INT, 0, 0, MPI_COMM_NULL));
    t_print_error("send with MPI_DATATYPE_NULL", MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD));
    t_print_error("send to rank size", MPI_Send(&x, 1, MPI_INT, t_size, 0, MPI_COMM_WORLD));
    t_print_error("send with tag -5", MPI_Send(&x, 1, MPI_INT, 0, -5, MPI_COMM_WORLD));
    t_print_error("send with count -1", MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD));
    t_print_error("allreduce with MPI_OP_NULL",
                  MPI_Allreduce(&x, y, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD));
    t_print_error("bcast from root size", MPI_Bcast(&x, 1, MPI_INT, t_size, MPI_COMM_WORLD));
    t_print_error("comm_size of a garbage handle", MPI_Comm_size((MPI_Comm)0x7654321, &size));
    t_print_error("type_size of a garbage handle", MPI_Type_size((MPI_Datatype)0x7654321, &size));
    t_print_error("type_commit of MPI_DATATYPE_NULL", MPI_Type_commit(&(MPI_Datatype){MPI_DATATYPE_NULL}));
    t_print_error("free of a predefined op", MPI_Op_free(&(MPI_Op){MPI_SUM}));
    t_print_error("group_incl of rank 5 from the empty group",
                  MPI_Group_incl(MPI_GROUP_EMPTY, 1, (int[]){5}, &(MPI_Group){MPI_GROUP_NULL}));

    /* a freed communicator: the handle value kept from before the free is invalid */
    {
        MPI_Comm d, stale;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &d));
        stale = d;
        CHECK_MPI(MPI_Comm_free(&d));
        CHECK(d == MPI_COMM_NULL);
        t_print_error("comm_size of a freed communicator", MPI_Comm_size(stale, &size));
        t_print_error("barrier on a freed communicator", MPI_Barrier(stale));
    }

    /* an error inside Waitall: one receive truncates, the other completes */
    {
        int a[4] = {1, 2, 3, 4}, small[2], ok = 0;
        MPI_Request r[3];
        MPI_Status st[3];
        CHECK_MPI(MPI_Irecv(small, 2, MPI_INT, t_rank, 1, MPI_COMM_WORLD, &r[0]));
        CHECK_MPI(MPI_Irecv(&ok, 1, MPI_INT, t_rank, 2, MPI_COMM_WORLD, &r[1]));
        CHECK_MPI(MPI_Isend(a, 4, MPI_INT, t_rank, 1, MPI_COMM_WORLD, &r[2]));
        CHECK_MPI(MPI_Send(&x, 1, MPI_INT, t_rank, 2, MPI_COMM_WORLD));
        int rc = MPI_Waitall(3, r, st);
        t_print_error("waitall with a truncated receive", rc);
        if (rc == MPI_ERR_IN_STATUS) {
            t_print_error("  status[0].MPI_ERROR", st[0].MPI_ERROR);
            /* the others either completed or are still pending: both are allowed (MPICH stops
             * at the first error), so only that is checked, and pending ones are waited for */
            for (int k = 1; k < 3; k++)
                CHECK(st[k].MPI_ERROR == MPI_SUCCESS || st[k].MPI_ERROR == MPI_ERR_PENDING);
        }
        for (int k = 0; k < 3; k++)
            if (r[k] != MPI_REQUEST_NULL)
                CHECK_MPI(MPI_Wait(&r[k], MPI_STATUS_IGNORE));
        CHECK_EQ(ok, 1);
    }

    /* user error handler on a dup: a real error calls it with the program's handle, then
     * Comm_call_errhandler with a chosen code; dup inherits the handler */
    {
        MPI_Comm c, c2;
        MPI_Errhandler eh, got;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        CHECK_MPI(MPI_Comm_create_errhandler(my_handler, &eh));
        CHECK_MPI(MPI_Comm_set_errhandler(c, eh));
        int rc = MPI_Send(&x, 1, MPI_INT, t_size + 3, 0, c);
        CHECK_EQ(handler_calls, 1);
        CHECK(handler_last_comm == c);
        int cls;
        MPI_Error_class(handler_last_code, &cls);
        printf("user handler called for a bad rank: class %s, send returned %s\n",
               t_errclass_name(cls), rc == MPI_SUCCESS ? "success" : "an error");
        CHECK_MPI(MPI_Comm_call_errhandler(c, MPI_ERR_OTHER));
        CHECK_EQ(handler_calls, 2);
        CHECK_EQ(handler_last_code, MPI_ERR_OTHER);
        CHECK_MPI(MPI_Comm_get_errhandler(c, &got));
        CHECK(got == eh);
        CHECK_MPI(MPI_Errhandler_free(&got));
        CHECK_MPI(MPI_Comm_dup(c, &c2));
        CHECK_MPI(MPI_Comm_call_errhandler(c2, MPI_ERR_ARG));
        CHECK_EQ(handler_calls, 3);
        CHECK(handler_last_comm == c2);
        CHECK_MPI(MPI_Errhandler_free(&eh)); /* still in use by c and c2: stays alive */
        CHECK_MPI(MPI_Comm_call_errhandler(c, MPI_ERR_TAG));
        CHECK_EQ(handler_calls, 4);
        CHECK_MPI(MPI_Comm_free(&c2));
        CHECK_MPI(MPI_Comm_free(&c));
        /* the predefined handlers come back as themselves */
        CHECK_MPI(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &got));
        CHECK(got == MPI_ERRORS_RETURN);
        t_ok("user comm errhandler: %d calls", handler_calls);
    }

    /* window error handler */
    {
        int buf[2];
        MPI_Win win;
        MPI_Errhandler weh;
        CHECK_MPI(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
        CHECK_MPI(MPI_Win_create_errhandler(my_win_handler, &weh));
        CHECK_MPI(MPI_Win_set_errhandler(win, weh));
        CHECK_MPI(MPI_Win_call_errhandler(win, MPI_ERR_WIN));
        CHECK_EQ(win_calls, 1);
        CHECK_EQ(win_last_code, MPI_ERR_WIN);
        CHECK_MPI(MPI_Errhandler_free(&weh));
        CHECK_MPI(MPI_Win_free(&win));
        t_ok("win errhandler");
    }

    /* user error classes and codes */
    {
        int cls, code, code2, got_cls, len, lastcode;
        char msg[MPI_MAX_ERROR_STRING];
        CHECK_MPI(MPI_Add_error_class(&cls));
        CHECK_MPI(MPI_Add_error_code(cls, &code));
        CHECK_MPI(MPI_Add_error_code(cls, &code2));
        CHECK(code != code2);
        CHECK_MPI(MPI_Add_error_string(cls, "mpicr test class"));
        CHECK_MPI(MPI_Add_error_string(code, "mpicr test code"));
        CHECK_MPI(MPI_Error_class(code, &got_cls));
        CHECK_EQ(got_cls, cls);
        CHECK_MPI(MPI_Error_class(code2, &got_cls));
        CHECK_EQ(got_cls, cls);
        CHECK_MPI(MPI_Error_string(code, msg, &len));
        printf("user code string: %s\n", msg);
        CHECK_MPI(MPI_Error_string(cls, msg, &len));
        printf("user class string: %s\n", msg);
        int *lastusedcode, flag;
        CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &lastusedcode, &flag));
        CHECK(flag); /* its value is an encoded code in MPICH, not comparable */
        lastcode = MPI_ERR_LASTCODE;
        CHECK(cls > lastcode);
        /* a user code through a user handler */
        MPI_Comm c;
        MPI_Errhandler eh;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        CHECK_MPI(MPI_Comm_create_errhandler(my_handler, &eh));
        CHECK_MPI(MPI_Comm_set_errhandler(c, eh));
        CHECK_MPI(MPI_Comm_call_errhandler(c, code2));
        CHECK_EQ(handler_last_code, code2);
        CHECK_MPI(MPI_Errhandler_free(&eh));
        CHECK_MPI(MPI_Comm_free(&c));
        t_ok("user error class with two codes");
    }

    /* back to fatal errors for the rest of the run, as a program would */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    return t_finish();
}
