/* A buffer attached to a communicator (MPI_Comm_attach_buffer, MPI 4.1) for the whole run:
 * prints "started" once the buffer is attached, then 300 paced steps of an MPI_Bsend around
 * a ring on that communicator, then detaches, frees and prints "rank R done: sum S". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0;
    MPI_Comm c;
    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    int bsize = 64 * (MPI_BSEND_OVERHEAD + (int)sizeof(int));
    void *buf = malloc(bsize);
    if (MPI_Comm_attach_buffer(c, buf, bsize) != MPI_SUCCESS)
        return 1;
    printf("rank %d started\n", rank);
    struct timespec nap = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 300; i++) {
        int got = -1;
        MPI_Bsend(&i, 1, MPI_INT, (rank + 1) % size, 0, c);
        MPI_Recv(&got, 1, MPI_INT, (rank + size - 1) % size, 0, c, MPI_STATUS_IGNORE);
        sum += got;
        nanosleep(&nap, NULL);
    }
    void *back;
    int bsz;
    MPI_Comm_detach_buffer(c, &back, &bsz);
    free(back);
    MPI_Comm_free(&c);
    printf("rank %d done: sum %d\n", rank, sum);
    MPI_Finalize();
    return 0;
}
