/* MPI_Allreduce of rank+1 over MPI_COMM_WORLD; prints "rank R of N: sum S". */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, v, sum;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    v = rank + 1;
    MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d: sum %d\n", rank, size, sum);
    MPI_Finalize();
    return 0;
}
