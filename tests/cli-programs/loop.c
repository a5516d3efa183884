/* Counts to argv[1], an MPI_Allreduce per tick (checked), one line "rank R tick I" each 50 ms. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int n = atoi(argv[1]), rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i <= n; i++) {
        int v = rank + i, sum;
        MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (sum != size * i + size * (size - 1) / 2) { printf("rank %d tick %d BAD\n", rank, i); return 1; }
        printf("rank %d tick %d\n", rank, i);
        fflush(stdout);
        usleep(50000);
    }
    MPI_Finalize();
    return 0;
}
