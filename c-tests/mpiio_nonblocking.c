/* Nonblocking MPI-IO through a file view with an hindexed file type (after MPICH's io/i_hindexed,
 * which changes the view with operations pending, erroneous in MPI): each rank owns strided
 * blocks of a shared file; two MPI_File_iwrite_at_all are in flight at once and completed by
 * one MPI_Waitall; then MPI_File_iwrite_at, MPI_File_iread_at_all and MPI_File_iread through
 * the view, MPI_Wait/MPI_Test; rank 0 checks the whole file's layout.
 * mpicr-test: ranks=1,2,4 args={tmpdir}
 */
#include "common.h"

#define ROWS 4       /* blocks per rank and round */
#define BLOCK 3      /* chars per block */
#define GAP 2        /* chars between a rank's blocks of one row */

/* The file: for each of 2 rounds, ROWS rows; a row holds every rank's block followed by a gap. */
static int rowlen, round_len;

static char expected(int round, int row, int rank, int k)
{
    return (char)('A' + (round * 7 + row * 3 + rank * 5 + k) % 26);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "mpiio_nonblocking");
    char path[512];
    snprintf(path, sizeof path, "%s/mpiio_nonblocking.dat", t_tmpdir(argc, argv, 1));
    rowlen = t_size * (BLOCK + GAP);
    round_len = ROWS * rowlen;

    int lens[ROWS];
    MPI_Aint disps[ROWS];
    for (int r = 0; r < ROWS; r++) {
        lens[r] = BLOCK;
        disps[r] = (MPI_Aint)r * rowlen + t_rank * (BLOCK + GAP);
    }
    MPI_Datatype ftype;
    CHECK_MPI(MPI_Type_create_hindexed(ROWS, lens, disps, MPI_CHAR, &ftype));
    CHECK_MPI(MPI_Type_commit(&ftype));
    MPI_Count fsize = 0;
    CHECK_MPI(MPI_Type_size_x(ftype, &fsize));
    CHECK_EQ(fsize, ROWS * BLOCK);

    char out[2][ROWS * BLOCK];
    for (int round = 0; round < 2; round++)
        for (int r = 0; r < ROWS; r++)
            for (int k = 0; k < BLOCK; k++)
                out[round][r * BLOCK + k] = expected(round, r, t_rank, k);

    /* zero the file first, so that the gaps read back as zeros */
    MPI_File fh;
    if (t_rank == 0) {
        char *zeros = calloc(2 * round_len, 1);
        CHECK_MPI(MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh));
        CHECK_MPI(MPI_File_write(fh, zeros, 2 * round_len, MPI_CHAR, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_close(&fh));
        free(zeros);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
    /* one round of this rank's blocks per tile of the view */
    MPI_Datatype tile;
    CHECK_MPI(MPI_Type_create_resized(ftype, 0, round_len, &tile));
    CHECK_MPI(MPI_Type_commit(&tile));
    CHECK_MPI(MPI_File_set_view(fh, 0, MPI_CHAR, tile, "native", MPI_INFO_NULL));
    MPI_Request reqs[2];
    for (int round = 0; round < 2; round++)
        CHECK_MPI(MPI_File_iwrite_at_all(fh, round * fsize, out[round], (int)fsize, MPI_CHAR, &reqs[round]));
    MPI_Status sts[2];
    CHECK_MPI(MPI_Waitall(2, reqs, sts));
    for (int round = 0; round < 2; round++) {
        int n = -1;
        CHECK_MPI(MPI_Get_count(&sts[round], MPI_CHAR, &n));
        CHECK_EQ(n, fsize);
    }
    t_ok("two iwrite_at_all in flight through an hindexed view");

    /* overwrite this rank's first block of round 1 with lower case */
    char lower[BLOCK];
    for (int k = 0; k < BLOCK; k++)
        lower[k] = (char)(out[1][k] - 'A' + 'a');
    MPI_Request r;
    CHECK_MPI(MPI_File_iwrite_at(fh, fsize, lower, BLOCK, MPI_CHAR, &r));
    int flag = 0;
    while (!flag)
        CHECK_MPI(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
    memcpy(out[1], lower, BLOCK);
    CHECK_MPI(MPI_File_sync(fh));
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    CHECK_MPI(MPI_File_sync(fh));

    /* read back through the view: round 1 collectively, round 0 by the individual pointer */
    char in[2][ROWS * BLOCK];
    memset(in, 0, sizeof in);
    CHECK_MPI(MPI_File_iread_at_all(fh, fsize, in[1], (int)fsize, MPI_CHAR, &r));
    CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_iread(fh, in[0], (int)fsize, MPI_CHAR, &r));
    CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK(memcmp(in, out, sizeof in) == 0);
    t_ok("read back through the view");
    CHECK_MPI(MPI_File_close(&fh));
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

    if (t_rank == 0) {
        char *all = malloc(2 * round_len);
        CHECK_MPI(MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
        CHECK_MPI(MPI_File_read(fh, all, 2 * round_len, MPI_CHAR, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_close(&fh));
        int bad = 0;
        for (int round = 0; round < 2; round++)
            for (int row = 0; row < ROWS; row++)
                for (int rank = 0; rank < t_size; rank++)
                    for (int k = 0; k < BLOCK + GAP; k++) {
                        char c = all[round * round_len + row * rowlen + rank * (BLOCK + GAP) + k];
                        char want = k >= BLOCK ? 0 : expected(round, row, rank, k);
                        if (round == 1 && row == 0 && k < BLOCK)
                            want = (char)(want - 'A' + 'a');
                        bad += c != want;
                    }
        printf("file layout: %d wrong bytes of %d, checksum %016llx\n", bad, 2 * round_len,
               (unsigned long long)t_fnv(all, 2 * round_len));
        CHECK_EQ(bad, 0);
        free(all);
        CHECK_MPI(MPI_File_delete(path, MPI_INFO_NULL));
    }
    CHECK_MPI(MPI_Type_free(&tile));
    CHECK_MPI(MPI_Type_free(&ftype));
    return t_finish();
}
