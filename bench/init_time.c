/* init_time: the MPI_Init part of the restart reference (scripts/bench.sh, section 2).
 *
 *   usage: mpiexec -n N init_time
 *
 * Every rank calls MPI_Init, then all meet in a barrier, and rank 0 prints
 *   init_time: at=UNIX_TIME
 * (CLOCK_REALTIME seconds), so the benchmark measures launch-to-initialized the same way it
 * measures launch-to-resumed for `mpicr restart`.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <time.h>

int main(int argc, char **argv) {
    int rank;
    struct timespec ts;
    MPI_Init(&argc, &argv);
    MPI_Barrier(MPI_COMM_WORLD);
    clock_gettime(CLOCK_REALTIME, &ts);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        printf("init_time: at=%.6f\n", (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
