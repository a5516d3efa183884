/* Error classes and codes the program adds (MPI_Add_error_class/code/string): their numbers
 * and MPI_LASTUSEDCODE as the library gives them. Open MPI numbers classes and codes with one
 * counter after MPI_ERR_LASTCODE and keeps MPI_LASTUSEDCODE at the last, so built against Open
 * MPI the program prints the values themselves (under mpicr the face must number them the same,
 * whatever library runs underneath); elsewhere (MPICH encodes them) only relations that hold
 * everywhere. Then each code through MPI_Error_class/string, through a user error handler
 * and MPI_ERRORS_RETURN (MPI_Comm_call_errhandler).
 * mpicr-test: ranks=1,2
 */
#include "common.h"

static int handler_code = -1;

static void handler(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    handler_code = *code;
}

static int last_used(void)
{
    int *v = NULL, flag = 0;
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &v, &flag));
    CHECK(flag);
    return *v;
}

static void show(const char *what, int value, int last)
{
#ifdef OPEN_MPI
    printf("%s: %d (MPI_LASTUSEDCODE %d)\n", what, value, last);
#else
    printf("%s: above MPI_ERR_LASTCODE: %s, MPI_LASTUSEDCODE at least it: %s\n", what,
           value > MPI_ERR_LASTCODE ? "yes" : "no", last >= value ? "yes" : "no");
#endif
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "user_errcodes");
    int last0 = last_used(), cls, code1, code2, cls2, code3, got, len;
    char msg[MPI_MAX_ERROR_STRING];
#ifdef OPEN_MPI
    printf("MPI_ERR_LASTCODE %d, MPI_LASTUSEDCODE %d\n", MPI_ERR_LASTCODE, last0);
#else
    printf("MPI_LASTUSEDCODE set: %s\n", last0 != 0 ? "yes" : "no");
#endif
    CHECK_MPI(MPI_Add_error_class(&cls));
    show("class", cls, last_used());
    CHECK_MPI(MPI_Add_error_code(cls, &code1));
    show("code of the class", code1, last_used());
    CHECK_MPI(MPI_Add_error_code(MPI_ERR_ARG, &code2));
    show("code of MPI_ERR_ARG", code2, last_used());
    CHECK_MPI(MPI_Add_error_class(&cls2));
    show("second class", cls2, last_used());
    CHECK_MPI(MPI_Add_error_code(cls2, &code3));
    show("code of the second class", code3, last_used());
    CHECK(cls != code1 && code1 != code2 && code2 != cls2 && cls2 != code3);

    CHECK_MPI(MPI_Error_class(code1, &got));
    CHECK_EQ(got, cls);
    CHECK_MPI(MPI_Error_class(code2, &got));
    CHECK_EQ(got, MPI_ERR_ARG);
    CHECK_MPI(MPI_Error_class(code3, &got));
    CHECK_EQ(got, cls2);
    CHECK_MPI(MPI_Add_error_string(code1, "mpicr: first user code"));
    CHECK_MPI(MPI_Error_string(code1, msg, &len));
    printf("string of the first code: %s (%d)\n", msg, len);

    /* each code reaches a user handler as the program's number, and comes back as the return
     * code of the call that raised it */
    MPI_Comm c;
    MPI_Errhandler eh;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    CHECK_MPI(MPI_Comm_create_errhandler(handler, &eh));
    CHECK_MPI(MPI_Comm_set_errhandler(c, eh));
    int codes[3] = {code1, code2, code3};
    for (int i = 0; i < 3; i++) {
        handler_code = -1;
        int rc = MPI_Comm_call_errhandler(c, codes[i]);
        printf("code %d through a user handler: handler got it: %s, returned %s\n", i + 1,
               handler_code == codes[i] ? "yes" : "no", rc == MPI_SUCCESS ? "MPI_SUCCESS" : "an error");
    }
    CHECK_MPI(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
    for (int i = 0; i < 3; i++) {
        int rc = MPI_Comm_call_errhandler(c, codes[i]);
        printf("code %d through MPI_ERRORS_RETURN: returned %s\n", i + 1, rc == MPI_SUCCESS ? "MPI_SUCCESS" : rc == codes[i] ? "the code" : "another error");
    }
    CHECK_MPI(MPI_Errhandler_free(&eh));
    CHECK_MPI(MPI_Comm_free(&c));
    /* every rank made the same, in the same order */
    int mine[5] = {cls, code1, code2, cls2, code3}, r0[5];
    memcpy(r0, mine, sizeof r0);
    CHECK_MPI(MPI_Bcast(r0, 5, MPI_INT, 0, MPI_COMM_WORLD));
    printf("same numbers as rank 0: %s\n", memcmp(r0, mine, sizeof r0) == 0 ? "yes" : "no");
    return t_finish();
}
