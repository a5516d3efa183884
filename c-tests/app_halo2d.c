/* Application-like: an integer 5-point stencil on a 48x48 torus decomposed over a 2-D
 * Cartesian grid (Dims_create, Cart_create, Cart_shift), halo exchange with Irecv/Isend/
 * Waitall (rows contiguous, columns a vector type), a global checksum every tenth of the run
 * (Allreduce), and at the end a comparison with a serial run of the same stencil on rank 0
 * (Gatherv of the blocks through a subarray type). Integer arithmetic modulo a prime, so the
 * result is exact and independent of the decomposition. Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=100 long-args=10000 long-args.2=2000 long-args.4=300 ckpt-ranks=2,4 ckpt-pace.4=8000
 */
#include "common.h"

#define NX 48
#define NY 48
#define MOD 1000003u

static unsigned step_cell(unsigned c, unsigned n, unsigned s, unsigned w, unsigned e)
{
    return (n + s + w + e + 3u * c + 1u) % MOD;
}

/* checksum of a block of the global grid: weighted sum, wraps modulo 2^64 */
static uint64_t weigh(unsigned v, int gi, int gj)
{
    return (uint64_t)v * (uint64_t)(gi * NY + gj + 1);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "app_halo2d");
    const long iters = t_arg_long(argc, argv, 1, 100);
    printf("iterations %ld\n", iters);

    int dims[2] = {0, 0}, periods[2] = {1, 1}, coords[2];
    CHECK_MPI(MPI_Dims_create(t_size, 2, dims));
    CHECK(NX % dims[0] == 0 && NY % dims[1] == 0);
    MPI_Comm cart;
    CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
    int rank;
    CHECK_MPI(MPI_Comm_rank(cart, &rank));
    CHECK_MPI(MPI_Cart_coords(cart, rank, 2, coords));
    int north, south, west, east;
    CHECK_MPI(MPI_Cart_shift(cart, 0, 1, &north, &south));
    CHECK_MPI(MPI_Cart_shift(cart, 1, 1, &west, &east));
    const int nx = NX / dims[0], ny = NY / dims[1], ld = ny + 2;
    const int gi0 = coords[0] * nx, gj0 = coords[1] * ny;
    printf("grid %dx%d, block %dx%d at (%d,%d)\n", dims[0], dims[1], nx, ny, gi0, gj0);

    unsigned *u = calloc((size_t)(nx + 2) * ld, sizeof *u), *v = calloc((size_t)(nx + 2) * ld, sizeof *v);
#define AT(a, i, j) (a)[(size_t)(i) * ld + (j)]
    for (int i = 1; i <= nx; i++)
        for (int j = 1; j <= ny; j++)
            AT(u, i, j) = (unsigned)(((gi0 + i - 1) * 131 + (gj0 + j - 1) * 17) % 1009);

    MPI_Datatype col; /* one interior column: nx cells, stride ld */
    CHECK_MPI(MPI_Type_vector(nx, 1, ld, MPI_UNSIGNED, &col));
    CHECK_MPI(MPI_Type_commit(&col));
    const long report = iters >= 10 ? iters / 10 : 1;

    for (long it = 1; it <= iters; it++) {
        t_pause_point(cart, it); /* for checkpoint tests: see common.h */
        MPI_Request req[8];
        /* halos: row 0 from north, row nx+1 from south, column 0 from west, column ny+1 from east */
        CHECK_MPI(MPI_Irecv(&AT(u, 0, 1), ny, MPI_UNSIGNED, north, 1, cart, &req[0]));
        CHECK_MPI(MPI_Irecv(&AT(u, nx + 1, 1), ny, MPI_UNSIGNED, south, 2, cart, &req[1]));
        CHECK_MPI(MPI_Irecv(&AT(u, 1, 0), 1, col, west, 3, cart, &req[2]));
        CHECK_MPI(MPI_Irecv(&AT(u, 1, ny + 1), 1, col, east, 4, cart, &req[3]));
        CHECK_MPI(MPI_Isend(&AT(u, nx, 1), ny, MPI_UNSIGNED, south, 1, cart, &req[4]));
        CHECK_MPI(MPI_Isend(&AT(u, 1, 1), ny, MPI_UNSIGNED, north, 2, cart, &req[5]));
        CHECK_MPI(MPI_Isend(&AT(u, 1, ny), 1, col, east, 3, cart, &req[6]));
        CHECK_MPI(MPI_Isend(&AT(u, 1, 1), 1, col, west, 4, cart, &req[7]));
        CHECK_MPI(MPI_Waitall(8, req, MPI_STATUSES_IGNORE));
        for (int i = 1; i <= nx; i++)
            for (int j = 1; j <= ny; j++)
                AT(v, i, j) = step_cell(AT(u, i, j), AT(u, i - 1, j), AT(u, i + 1, j), AT(u, i, j - 1),
                                        AT(u, i, j + 1));
        unsigned *t = u;
        u = v;
        v = t;
        if (it % report == 0 || it == iters) {
            uint64_t local = 0, global;
            for (int i = 1; i <= nx; i++)
                for (int j = 1; j <= ny; j++)
                    local += weigh(AT(u, i, j), gi0 + i - 1, gj0 + j - 1);
            CHECK_MPI(MPI_Allreduce(&local, &global, 1, MPI_UINT64_T, MPI_SUM, cart));
            printf("iteration %ld checksum %016llx\n", it, (unsigned long long)global);
        }
    }

    /* gather the blocks into the global grid on rank 0 and compare with a serial run */
    {
        int gsz[2] = {NX, NY}, bsz[2] = {nx, ny}, st[2] = {0, 0};
        MPI_Datatype block, block_r, interior;
        CHECK_MPI(MPI_Type_create_subarray(2, gsz, bsz, st, MPI_ORDER_C, MPI_UNSIGNED, &block));
        CHECK_MPI(MPI_Type_create_resized(block, 0, sizeof(unsigned), &block_r));
        CHECK_MPI(MPI_Type_commit(&block_r));
        int lsz[2] = {nx + 2, ld}, ist[2] = {1, 1};
        CHECK_MPI(MPI_Type_create_subarray(2, lsz, bsz, ist, MPI_ORDER_C, MPI_UNSIGNED, &interior));
        CHECK_MPI(MPI_Type_commit(&interior));
        unsigned *global = NULL;
        int *counts = NULL, *displs = NULL;
        if (rank == 0) {
            global = malloc(sizeof(unsigned) * NX * NY);
            counts = malloc(sizeof(int) * t_size);
            displs = malloc(sizeof(int) * t_size);
            for (int r = 0; r < t_size; r++) {
                int c[2];
                CHECK_MPI(MPI_Cart_coords(cart, r, 2, c));
                counts[r] = 1;
                displs[r] = c[0] * nx * NY + c[1] * ny; /* in units of the resized extent */
            }
        }
        CHECK_MPI(MPI_Gatherv(u, 1, interior, global, counts, displs, block_r, 0, cart));
        if (rank == 0) {
            unsigned *a = malloc(sizeof(unsigned) * NX * NY), *b = malloc(sizeof(unsigned) * NX * NY);
            for (int i = 0; i < NX; i++)
                for (int j = 0; j < NY; j++)
                    a[i * NY + j] = (unsigned)((i * 131 + j * 17) % 1009);
            for (long it = 0; it < iters; it++) {
                for (int i = 0; i < NX; i++)
                    for (int j = 0; j < NY; j++)
                        b[i * NY + j] = step_cell(a[i * NY + j], a[((i + NX - 1) % NX) * NY + j],
                                                  a[((i + 1) % NX) * NY + j],
                                                  a[i * NY + (j + NY - 1) % NY], a[i * NY + (j + 1) % NY]);
                unsigned *t = a;
                a = b;
                b = t;
            }
            for (int k = 0; k < NX * NY; k++)
                CHECK_MSG(a[k] == global[k], "cell %d,%d: parallel %u, serial %u", k / NY, k % NY,
                          global[k], a[k]);
            t_ok("matches the serial run");
            free(a);
            free(b);
            free(global);
            free(counts);
            free(displs);
        }
        CHECK_MPI(MPI_Type_free(&block));
        CHECK_MPI(MPI_Type_free(&block_r));
        CHECK_MPI(MPI_Type_free(&interior));
    }
    CHECK_MPI(MPI_Type_free(&col));
    CHECK_MPI(MPI_Comm_free(&cart));
    free(u);
    free(v);
    return t_finish();
}
