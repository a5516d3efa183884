/* Like loop.c, but first calls MPI_Status_set_source (MPI 4.1: MPICH 5 has it, MPICH 4.0.2 does
 * not), so a restart on MPICH 4.0.2 must be refused naming it. Built whole, `mpicr restart`
 * refuses it from the program's imports; built in two (-DPART_LIB: a shared library holding the
 * call, -DPART_MAIN: the program using it), only the shim sees the import, when it loads the
 * new library (its backstop). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#ifdef PART_LIB
int set_source(MPI_Status *st, int rank) { return MPI_Status_set_source(st, rank); }
#else
#ifdef PART_MAIN
int set_source(MPI_Status *st, int rank);
#else
static int set_source(MPI_Status *st, int rank) { return MPI_Status_set_source(st, rank); }
#endif
int main(int argc, char **argv) {
    int n = atoi(argv[1]), rank, size;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    set_source(&st, rank);
    for (int i = 1; i <= n; i++) {
        int v = rank + i, sum;
        MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        printf("rank %d tick %d\n", rank, i);
        fflush(stdout);
        usleep(50000);
    }
    MPI_Finalize();
    return 0;
}
#endif
