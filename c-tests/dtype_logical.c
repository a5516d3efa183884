/* Fortran fixed-size predefined datatypes that not every mpi.h names (MPI_LOGICAL1/2/4/8,
 * MPI_REAL2, MPI_COMPLEX4): where the program's mpi.h has one, its MPI_Type_size (the
 * LOGICALn checked against n), MPI_Type_get_name, and a Sendrecv of 4 elements to itself on
 * MPI_COMM_SELF, bytes checked; a call that fails prints its error class (errors return). A
 * name the mpi.h lacks prints a skip line (MPICH 4.0.2's has none of them). Standard-ABI
 * programs also print what MPI_Abi_get_fortran_info says of four of them.
 * mpicr-test: ranks=1,2
 */
#include "common.h"
#include <string.h>

static inline void probe(MPI_Datatype t, const char *what, int expect)
{
    int size = -1;
    int rc = MPI_Type_size(t, &size);
    if (rc != MPI_SUCCESS) {
        int cls = -1;
        MPI_Error_class(rc, &cls);
        printf("%s: MPI_Type_size %s\n", what, t_errclass_name(cls));
        return;
    }
    if (expect > 0)
        CHECK_EQ(size, expect);
    printf("%s: size %d\n", what, size);
    char name[MPI_MAX_OBJECT_NAME];
    int len = 0;
    CHECK_MPI(MPI_Type_get_name(t, name, &len));
    printf("%s: name %s\n", what, name);
    if (size <= 0)
        return;
    unsigned char out[4 * 16], in[4 * 16];
    for (int i = 0; i < 4 * size; i++)
        out[i] = (unsigned char)(i % 2);
    memset(in, 0xee, sizeof in);
    CHECK_MPI(MPI_Sendrecv(out, 4, t, 0, 7, in, 4, t, 0, 7, MPI_COMM_SELF, MPI_STATUS_IGNORE));
    CHECK(memcmp(in, out, (size_t)(4 * size)) == 0);
    CHECK(in[4 * size] == 0xee);
    printf("%s: sendrecv ok\n", what);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "dtype_logical");
    /* Datatype calls without a communicator report to MPI_COMM_SELF's handler (MPI 4) or
     * MPI_COMM_WORLD's (before): both return. */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
#ifdef MPI_LOGICAL1
    probe(MPI_LOGICAL1, "MPI_LOGICAL1", 1);
    probe(MPI_LOGICAL2, "MPI_LOGICAL2", 2);
    probe(MPI_LOGICAL4, "MPI_LOGICAL4", 4);
    probe(MPI_LOGICAL8, "MPI_LOGICAL8", 8);
#else
    t_skip("MPI_LOGICAL1/2/4/8", "this mpi.h does not name them");
#endif
#ifdef MPI_REAL2
    probe(MPI_REAL2, "MPI_REAL2", 0);
#else
    t_skip("MPI_REAL2", "this mpi.h does not name it");
#endif
#ifdef MPI_COMPLEX4
    probe(MPI_COMPLEX4, "MPI_COMPLEX4", 0);
#else
    t_skip("MPI_COMPLEX4", "this mpi.h does not name it");
#endif
#ifdef MPI_ABI_VERSION
    /* The standard ABI says which optional Fortran datatypes the library has. */
    {
        MPI_Info info;
        CHECK_MPI(MPI_Abi_get_fortran_info(&info));
        const char *keys[] = {"mpi_logical1_supported", "mpi_logical8_supported", "mpi_real2_supported",
                              "mpi_complex4_supported"};
        for (int i = 0; i < 4; i++) {
            char val[32] = "";
            int len = (int)sizeof val, flag = 0;
            CHECK_MPI(MPI_Info_get_string(info, keys[i], &len, val, &flag));
            printf("fortran info %s: %s\n", keys[i], flag ? val : "(unset)");
        }
        CHECK_MPI(MPI_Info_free(&info));
    }
#endif
    return t_finish();
}
