/* 2-D heat diffusion on a Cartesian process grid: the demo job of `make demo`.
 *
 * Usage: heat2d N STEPS [REPORT_EVERY]
 * An N x N plate, hot (100) on its top edge and cold (0) elsewhere, relaxed with the 5-point
 * Jacobi stencil. Each rank owns a block, exchanges halos with its four neighbours
 * (MPI_Isend/MPI_Irecv/MPI_Waitall, column halos through an MPI_Type_vector), and every
 * REPORT_EVERY steps rank 0 prints the step, the total heat and the largest change (Allreduce).
 * The output depends only on N and STEPS, never on timing, so a run that was checkpointed,
 * stopped and restarted must print exactly what an uninterrupted run prints. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc < 3) {
        fprintf(stderr, "usage: heat2d N STEPS [REPORT_EVERY]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int n = atoi(argv[1]), steps = atoi(argv[2]), every = argc > 3 ? atoi(argv[3]) : 100;
    int size, dims[2] = {0, 0}, periods[2] = {0, 0}, coords[2], rank;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Dims_create(size, 2, dims);
    MPI_Comm grid;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &grid);
    MPI_Comm_rank(grid, &rank);
    MPI_Cart_coords(grid, rank, 2, coords);
    int up, down, left, right;
    MPI_Cart_shift(grid, 0, 1, &up, &down);
    MPI_Cart_shift(grid, 1, 1, &left, &right);

    /* this rank's block of rows [r0, r0 + rows) and columns [c0, c0 + cols), plus halos */
    int rows = n / dims[0] + (coords[0] < n % dims[0]);
    int cols = n / dims[1] + (coords[1] < n % dims[1]);
    int r0 = coords[0] * (n / dims[0]) + (coords[0] < n % dims[0] ? coords[0] : n % dims[0]);
    int c0 = coords[1] * (n / dims[1]) + (coords[1] < n % dims[1] ? coords[1] : n % dims[1]);
    int w = cols + 2;
    double *u = calloc((size_t)(rows + 2) * w, sizeof *u);
    double *v = calloc((size_t)(rows + 2) * w, sizeof *v);
#define AT(a, i, j) (a)[(size_t)(i) * w + (j)]
    if (r0 == 0)
        for (int j = 0; j < w; j++)
            AT(u, 0, j) = AT(v, 0, j) = 100.0; /* the hot top edge lives in the top halo */

    MPI_Datatype column;
    MPI_Type_vector(rows, 1, w, MPI_DOUBLE, &column);
    MPI_Type_commit(&column);

    for (int step = 1; step <= steps; step++) {
        MPI_Request req[8];
        int k = 0;
        MPI_Irecv(&AT(u, 0, 1), cols, MPI_DOUBLE, up, 0, grid, &req[k++]);
        MPI_Irecv(&AT(u, rows + 1, 1), cols, MPI_DOUBLE, down, 1, grid, &req[k++]);
        MPI_Irecv(&AT(u, 1, 0), 1, column, left, 2, grid, &req[k++]);
        MPI_Irecv(&AT(u, 1, cols + 1), 1, column, right, 3, grid, &req[k++]);
        MPI_Isend(&AT(u, 1, 1), cols, MPI_DOUBLE, up, 1, grid, &req[k++]);
        MPI_Isend(&AT(u, rows, 1), cols, MPI_DOUBLE, down, 0, grid, &req[k++]);
        MPI_Isend(&AT(u, 1, 1), 1, column, left, 3, grid, &req[k++]);
        MPI_Isend(&AT(u, 1, cols), 1, column, right, 2, grid, &req[k++]);
        MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
        double change = 0;
        for (int i = 1; i <= rows; i++)
            for (int j = 1; j <= cols; j++) {
                AT(v, i, j) = 0.25 * (AT(u, i - 1, j) + AT(u, i + 1, j) + AT(u, i, j - 1) + AT(u, i, j + 1));
                double d = AT(v, i, j) - AT(u, i, j);
                if (d < 0) d = -d;
                if (d > change) change = d;
            }
        double *t = u; u = v; v = t;
        if (step % every == 0 || step == steps) {
            double heat = 0, total, maxchange;
            for (int i = 1; i <= rows; i++)
                for (int j = 1; j <= cols; j++)
                    heat += AT(u, i, j);
            MPI_Reduce(&heat, &total, 1, MPI_DOUBLE, MPI_SUM, 0, grid);
            MPI_Allreduce(&change, &maxchange, 1, MPI_DOUBLE, MPI_MAX, grid);
            if (rank == 0) {
                printf("step %6d  heat %.12e  max change %.6e\n", step, total, maxchange);
                fflush(stdout);
            }
        }
    }
    MPI_Type_free(&column);
    MPI_Comm_free(&grid);
    free(u);
    free(v);
    MPI_Finalize();
    return 0;
}
