/* MPI-IO: File_open (CREATE|RDWR) of a file in the directory given as argument (or
 * $MPICR_TEST_TMPDIR), write_at/read_at of independent blocks, File_get_size, File_sync,
 * set_view with an interleaving vector filetype and collective write_all/read_all,
 * File_get_view, seek + read with the individual file pointer, iwrite_at/iread_at requests,
 * write_ordered with the shared file pointer, File_get_amode, the default file error handler
 * returning an error for a missing file (File_open and File_delete), MPI_MODE_DELETE_ON_CLOSE,
 * and File_delete at the end.
 * mpicr-test: ranks=1,2,4 args={tmpdir}
 */
#include "common.h"

#define BLK 16

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "mpiio");
    char path[4096];
    snprintf(path, sizeof path, "%s/mpicr-io-test.dat", t_tmpdir(argc, argv, 1));
    MPI_File fh;
    MPI_Status st;
    int count;

    /* a missing file: the default file error handler returns */
    {
        char missing[4200];
        snprintf(missing, sizeof missing, "%s.missing", path);
        int rc = MPI_File_open(MPI_COMM_WORLD, missing, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
        t_print_error("open of a missing file", rc);
        /* (File_delete has no file handle either: MPI_FILE_NULL's handler, not the world's) */
        rc = MPI_File_delete(missing, MPI_INFO_NULL);
        t_print_error("delete of a missing file", rc);
    }

    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
    CHECK_MPI(MPI_File_set_errhandler(fh, MPI_ERRORS_ARE_FATAL));
    int amode;
    CHECK_MPI(MPI_File_get_amode(fh, &amode));
    CHECK(amode & MPI_MODE_RDWR);

    /* independent: rank r writes BLK ints at block r, reads back the block of its right */
    {
        int out[BLK], in[BLK];
        for (int i = 0; i < BLK; i++)
            out[i] = t_rank * 1000 + i;
        CHECK_MPI(MPI_File_write_at(fh, (MPI_Offset)t_rank * BLK * sizeof(int), out, BLK, MPI_INT, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK_EQ(count, BLK);
        CHECK_MPI(MPI_File_sync(fh));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_File_sync(fh));
        const int right = (t_rank + 1) % t_size;
        CHECK_MPI(MPI_File_read_at(fh, (MPI_Offset)right * BLK * sizeof(int), in, BLK, MPI_INT, &st));
        for (int i = 0; i < BLK; i++)
            CHECK_EQ(in[i], right * 1000 + i);
        MPI_Offset size;
        CHECK_MPI(MPI_File_get_size(fh, &size));
        CHECK_EQ(size, (MPI_Offset)t_size * BLK * sizeof(int));
        printf("ok write_at/read_at: file size %lld\n", (long long)size);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

    /* collective with a view: the file is a sequence of doubles, rank r owns every t_size-th
     * one starting at r (after a 64-byte header written by rank 0) */
    {
        const MPI_Offset header = 64;
        MPI_Datatype ftype, resized;
        CHECK_MPI(MPI_Type_vector(1, 1, t_size, MPI_DOUBLE, &ftype));
        CHECK_MPI(MPI_Type_create_resized(ftype, 0, t_size * sizeof(double), &resized));
        CHECK_MPI(MPI_Type_commit(&resized));
        if (t_rank == 0) {
            char hdr[64];
            memset(hdr, 0, sizeof hdr);
            snprintf(hdr, sizeof hdr, "mpicr io test, %d ranks", t_size);
            CHECK_MPI(MPI_File_write_at(fh, 0, hdr, 64, MPI_CHAR, &st));
        }
        CHECK_MPI(MPI_File_set_view(fh, header + t_rank * sizeof(double), MPI_DOUBLE, resized,
                                    "native", MPI_INFO_NULL));
        MPI_Offset disp;
        MPI_Datatype et, ft;
        char rep[MPI_MAX_DATAREP_STRING];
        CHECK_MPI(MPI_File_get_view(fh, &disp, &et, &ft, rep));
        CHECK_EQ(disp, header + t_rank * (MPI_Offset)sizeof(double));
        CHECK(et == MPI_DOUBLE);
        CHECK(strcmp(rep, "native") == 0);
        if (ft != MPI_DOUBLE)
            CHECK_MPI(MPI_Type_free(&ft));
        double out[BLK], in[BLK];
        for (int i = 0; i < BLK; i++)
            out[i] = t_rank + i * t_size;
        CHECK_MPI(MPI_File_write_at_all(fh, 0, out, BLK, MPI_DOUBLE, &st));
        CHECK_MPI(MPI_File_sync(fh));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_File_sync(fh));
        CHECK_MPI(MPI_File_read_at_all(fh, 0, in, BLK, MPI_DOUBLE, &st));
        for (int i = 0; i < BLK; i++)
            CHECK(in[i] == out[i]);
        /* the whole interleaved section, read by everyone through a plain byte view */
        CHECK_MPI(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
        double *whole = malloc(sizeof(double) * BLK * t_size);
        CHECK_MPI(MPI_File_read_at_all(fh, header, whole, BLK * t_size, MPI_DOUBLE, &st));
        for (int i = 0; i < BLK * t_size; i++)
            CHECK(whole[i] == i);
        char hdr[64];
        CHECK_MPI(MPI_File_read_at(fh, 0, hdr, 64, MPI_CHAR, &st));
        printf("ok view + write_all/read_all: header \"%s\", checksum %016llx\n", hdr,
               (unsigned long long)t_fnv(whole, sizeof(double) * BLK * t_size));
        free(whole);
        CHECK_MPI(MPI_Type_free(&resized));
        CHECK_MPI(MPI_Type_free(&ftype));
    }

    /* individual file pointer: seek and read; nonblocking iwrite_at/iread_at */
    {
        double d[2];
        CHECK_MPI(MPI_File_seek(fh, 64 + sizeof(double) * (2 * t_rank), MPI_SEEK_SET));
        CHECK_MPI(MPI_File_read(fh, d, 2, MPI_DOUBLE, &st));
        CHECK(d[0] == 2 * t_rank && d[1] == 2 * t_rank + 1);
        MPI_Offset pos;
        CHECK_MPI(MPI_File_get_position(fh, &pos));
        CHECK_EQ(pos, 64 + sizeof(double) * (2 * t_rank + 2));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD)); /* all reads done before the rewrite below */

        const MPI_Offset tail = 64 + sizeof(double) * BLK * t_size;
        int w[4] = {t_rank, t_rank + 1, t_rank + 2, t_rank + 3}, r[4];
        MPI_Request req;
        CHECK_MPI(MPI_File_iwrite_at(fh, tail + t_rank * sizeof w, w, 4, MPI_INT, &req));
        CHECK_MPI(MPI_Wait(&req, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK_EQ(count, 4);
        CHECK_MPI(MPI_File_iread_at(fh, tail + t_rank * sizeof w, r, 4, MPI_INT, &req));
        CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
        CHECK(memcmp(w, r, sizeof w) == 0);
        t_ok("seek/read, iwrite_at/iread_at");
    }
    CHECK_MPI(MPI_File_close(&fh));
    CHECK(fh == MPI_FILE_NULL);

    /* shared file pointer: write_ordered appends in rank order */
    {
        char path2[4200];
        snprintf(path2, sizeof path2, "%s.ordered", path);
        CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, path2, MPI_MODE_CREATE | MPI_MODE_RDWR |
                                MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL, &fh));
        char line[16];
        snprintf(line, sizeof line, "rank %02d;", t_rank);
        CHECK_MPI(MPI_File_write_ordered(fh, line, 8, MPI_CHAR, &st));
        CHECK_MPI(MPI_File_sync(fh));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_File_sync(fh));
        char all[8 * 4 + 1];
        memset(all, 0, sizeof all);
        CHECK_MPI(MPI_File_read_at(fh, 0, all, 8 * t_size, MPI_CHAR, &st));
        printf("ok write_ordered: %s\n", all);
        for (int r = 0; r < t_size; r++) {
            char want[16];
            snprintf(want, sizeof want, "rank %02d;", r);
            CHECK(memcmp(all + 8 * r, want, 8) == 0);
        }
        CHECK_MPI(MPI_File_close(&fh)); /* DELETE_ON_CLOSE removes it */
    }

    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0)
        CHECK_MPI(MPI_File_delete(path, MPI_INFO_NULL));
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    /* both files are gone: opening read-only fails again */
    {
        MPI_File f2;
        int rc = MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &f2);
        CHECK(rc != MPI_SUCCESS);
        t_ok("file deleted");
    }
    return t_finish();
}
