/* After MPI_Init under the shim: is the control socket hidden from the program's children? */
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int flags = fcntl(3, F_GETFD);
    printf("env=%s cloexec=%d\n", getenv("MPICR_CTL_FD") ? "set" : "unset", flags >= 0 && (flags & FD_CLOEXEC) ? 1 : 0);
    MPI_Finalize();
    return 0;
}
