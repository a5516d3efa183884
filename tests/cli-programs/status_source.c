/* Like loop.c, but first calls MPI_Status_set_source (MPI 4.1: MPICH 5 has it, MPICH 4.0.2 does
 * not), so a restart on MPICH 4.0.2 must be refused naming it. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int n = atoi(argv[1]), rank, size;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Status_set_source(&st, rank);
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
