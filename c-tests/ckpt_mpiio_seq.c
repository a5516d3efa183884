/* Checkpoint workload: MPI-IO files opened with MPI_MODE_SEQUENTIAL, kept open for the whole run.
 * - "ckpt_mpiio_seq.in" (absolute name, in the scratch directory): written by rank 0 in an
 *   ordinary mode first (one record per step and rank), then opened by every rank with
 *   MPI_MODE_RDONLY | MPI_MODE_SEQUENTIAL | MPI_MODE_DELETE_ON_CLOSE and read through the shared
 *   file pointer, by MPI_File_read_ordered, or every fifth step MPI_File_read_ordered_begin/end;
 *   every record read is checked, so a shared pointer put back wrong after a restart fails;
 * - "ckpt_mpiio_seq.dat" (absolute): opened with MPI_MODE_CREATE | MPI_MODE_WRONLY |
 *   MPI_MODE_SEQUENTIAL; rank 0 writes a header by MPI_File_write_shared, then a view with
 *   MPI_DISPLACEMENT_CURRENT (etype MPI_INT) starts after it; each step one rank writes two
 *   words by MPI_File_write_shared or MPI_File_iwrite_shared (completed by MPI_Wait in the next
 *   step, so that a checkpoint meets it pending), then every rank a block by
 *   MPI_File_write_ordered, or every fourth step by MPI_File_write_ordered_begin ended in the
 *   next step.
 * Before the loop, in programs built against an MPICH-family mpi.h (the library underneath
 * mpicr is ROMIO there too; Open MPI's OMPIO allows what ROMIO refuses), the calls a sequential
 * file refuses print their error classes: seeks, positions, explicit offsets, the individual
 * file pointer, set_size, a view at a displacement. MPI_MODE_SEQUENTIAL with MPI_MODE_RDWR is
 * refused everywhere. Progress lines print checksums of what was written and read and the
 * shared file pointer as the program counts it (it cannot ask: the position is refused); at the
 * end the input file must be gone, and rank 0 reads the data file back whole, checks every word
 * and prints its size and FNV checksum. Arguments: the step count, the directory.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<step> (common.h).
 * mpicr-test: ranks=1,2,4 args=24,{tmpdir} long-args=300,{tmpdir} long-args.4=60,{tmpdir} ckpt-ranks=2,4 ckpt-pace=8000 ckpt-pace.4=40000 ckpt-modes=continue,stop-restart,older-epoch,restart-errors ckpt-files=ckpt_mpiio_seq.dat,ckpt_mpiio_seq.in
 */
#include "common.h"

#define HDR 32  /* bytes of the data file's header */
#define B 6     /* ints per rank in a step's ordered block */
#define SW 2    /* ints of a step's shared-pointer write */
#define REC 16  /* bytes of an input record */

static int word(long step, int rank, int i)
{
    return (int)(((uint32_t)step * 2654435761u) ^ ((uint32_t)rank * 40503u) ^ (uint32_t)i);
}

/* The shared-pointer write of step s (s % 3 != 2), by rank s % size. */
static int shared_word(long step, int i)
{
    return (int)(((uint32_t)step * 40503u) ^ 0x5e01u ^ (uint32_t)i);
}

static void in_record(char *out, long step, int rank)
{
    char tmp[REC + 1];
    snprintf(tmp, sizeof tmp, "in%06ld r%02d...", step % 1000000, rank);
    memcpy(out, tmp, REC - 1);
    out[REC - 1] = '\n';
}

/* Prints the class of a call a sequential file refuses (ROMIO: MPI_ERR_UNSUPPORTED_OPERATION). */
static void refused(const char *what, int rc)
{
    t_print_error(what, rc);
}

static void probe_refusals(MPI_File f)
{
#ifdef MPICH_NUMVERSION
    MPI_Offset off = -1;
    int v[1] = {7};
    MPI_Request req;
    refused("seek", MPI_File_seek(f, 0, MPI_SEEK_SET));
    refused("get_position", MPI_File_get_position(f, &off));
    refused("get_position_shared", MPI_File_get_position_shared(f, &off));
    refused("get_byte_offset", MPI_File_get_byte_offset(f, 0, &off));
    refused("get_byte_offset -1", MPI_File_get_byte_offset(f, -1, &off));
    refused("write_at", MPI_File_write_at(f, 0, v, 1, MPI_INT, MPI_STATUS_IGNORE));
    refused("write_at -1", MPI_File_write_at(f, -1, v, 1, MPI_INT, MPI_STATUS_IGNORE));
    refused("write", MPI_File_write(f, v, 1, MPI_INT, MPI_STATUS_IGNORE));
    refused("write 0", MPI_File_write(f, v, 0, MPI_INT, MPI_STATUS_IGNORE));
    refused("read", MPI_File_read(f, v, 1, MPI_INT, MPI_STATUS_IGNORE));
    refused("iwrite", MPI_File_iwrite(f, v, 1, MPI_INT, &req));
    refused("write_all", MPI_File_write_all(f, v, 1, MPI_INT, MPI_STATUS_IGNORE));
    refused("write_all_begin", MPI_File_write_all_begin(f, v, 1, MPI_INT));
    refused("seek_shared", MPI_File_seek_shared(f, 0, MPI_SEEK_SET));
    refused("set_size", MPI_File_set_size(f, 0));
    refused("set_view at 0", MPI_File_set_view(f, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
#else
    (void)f;
    t_skip("sequential-mode refusals", "not an MPICH-family program: Open MPI allows these calls");
#endif
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_mpiio_seq");
    const long steps = t_arg_long(argc, argv, 1, 24);
    const char *dir = t_tmpdir(argc, argv, 2);
    printf("steps %ld\n", steps);
    const long report = steps >= 20 ? steps / 20 : 1;

    char data_path[4096], in_path[4096];
    snprintf(data_path, sizeof data_path, "%s/ckpt_mpiio_seq.dat", dir);
    snprintf(in_path, sizeof in_path, "%s/ckpt_mpiio_seq.in", dir);

    /* the input, written in an ordinary mode */
    if (t_rank == 0) {
        MPI_File w;
        CHECK_MPI(MPI_File_open(MPI_COMM_SELF, in_path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &w));
        char *all = malloc((size_t)steps * t_size * REC);
        CHECK(all != NULL);
        for (long s = 1; s <= steps; s++)
            for (int r = 0; r < t_size; r++)
                in_record(all + ((s - 1) * t_size + r) * REC, s, r);
        CHECK_MPI(MPI_File_write_at(w, 0, all, (int)(steps * t_size * REC), MPI_CHAR, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_close(&w));
        free(all);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

    MPI_File bad;
    t_print_error("open RDWR|SEQUENTIAL",
                  MPI_File_open(MPI_COMM_WORLD, in_path, MPI_MODE_RDWR | MPI_MODE_SEQUENTIAL, MPI_INFO_NULL, &bad));

    MPI_File in, data;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, in_path, MPI_MODE_RDONLY | MPI_MODE_SEQUENTIAL | MPI_MODE_DELETE_ON_CLOSE,
                            MPI_INFO_NULL, &in));
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, data_path, MPI_MODE_CREATE | MPI_MODE_WRONLY | MPI_MODE_SEQUENTIAL,
                            MPI_INFO_NULL, &data));
    int amode;
    CHECK_MPI(MPI_File_get_amode(data, &amode));
    CHECK(amode == (MPI_MODE_CREATE | MPI_MODE_WRONLY | MPI_MODE_SEQUENTIAL));
    CHECK_MPI(MPI_File_get_amode(in, &amode));
    CHECK(amode == (MPI_MODE_RDONLY | MPI_MODE_SEQUENTIAL | MPI_MODE_DELETE_ON_CLOSE));
    probe_refusals(data);

    /* the header, then a view from the shared file pointer on */
    if (t_rank == 0) {
        char hdr[HDR];
        memset(hdr, 0, sizeof hdr);
        snprintf(hdr, sizeof hdr, "seq: %d ranks, %ld steps", t_size, steps);
        CHECK_MPI(MPI_File_write_shared(data, hdr, HDR, MPI_CHAR, MPI_STATUS_IGNORE));
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    CHECK_MPI(MPI_File_set_view(data, MPI_DISPLACEMENT_CURRENT, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    MPI_Offset disp;
    MPI_Datatype et, ft;
    char rep[MPI_MAX_DATAREP_STRING];
    CHECK_MPI(MPI_File_get_view(data, &disp, &et, &ft, rep));
    CHECK(et == MPI_INT && ft == MPI_INT);
    printf("view at %lld, %s\n", (long long)disp, rep);

    static int blocks[2][B], sbuf[2][SW];
    uint64_t wsum = 14695981039346656037ULL, rsum = wsum;
    MPI_Offset pos = 0; /* the shared file pointer of the data file, in ints */
    MPI_Request pending = MPI_REQUEST_NULL;
    int split_w = 0, split_r = 0;
    char rec[REC], want[REC];
    for (long s = 1; s <= steps; s++) {
        t_pause_point(MPI_COMM_WORLD, s); /* for checkpoint tests: see common.h */
        /* what the previous step left pending */
        if (split_w) {
            MPI_Status st;
            CHECK_MPI(MPI_File_write_ordered_end(data, blocks[(s - 1) % 2], &st));
            int n;
            CHECK_MPI(MPI_Get_count(&st, MPI_INT, &n));
            CHECK_EQ(n, B);
            split_w = 0;
        }
        if (split_r) {
            MPI_Status st;
            CHECK_MPI(MPI_File_read_ordered_end(in, rec, &st));
            in_record(want, s - 1, t_rank);
            CHECK(memcmp(rec, want, REC) == 0);
            split_r = 0;
        }
        if (pending != MPI_REQUEST_NULL) {
            MPI_Status st;
            CHECK_MPI(MPI_Wait(&pending, &st));
            int n;
            CHECK_MPI(MPI_Get_count(&st, MPI_INT, &n));
            CHECK_EQ(n, SW);
        }

        /* the input: this step's record of this rank */
        if (s % 5 == 0) {
            CHECK_MPI(MPI_File_read_ordered_begin(in, rec, REC, MPI_CHAR));
            split_r = 1;
        } else {
            CHECK_MPI(MPI_File_read_ordered(in, rec, REC, MPI_CHAR, MPI_STATUS_IGNORE));
            in_record(want, s, t_rank);
            CHECK(memcmp(rec, want, REC) == 0);
        }
        in_record(want, s, t_rank);
        t_fold(&rsum, want, REC);

        /* the data file: one rank's shared-pointer words, then every rank's ordered block */
        if (s % 3 != 2) {
            if (t_rank == s % t_size) {
                int *w = sbuf[s % 2];
                for (int i = 0; i < SW; i++)
                    w[i] = shared_word(s, i);
                t_fold(&wsum, w, sizeof(int) * SW);
                if (s % 3 == 0)
                    CHECK_MPI(MPI_File_write_shared(data, w, SW, MPI_INT, MPI_STATUS_IGNORE));
                else
                    CHECK_MPI(MPI_File_iwrite_shared(data, w, SW, MPI_INT, &pending));
            }
            pos += SW;
        }
        /* the shared-pointer words come before every rank's block */
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        int *o = blocks[s % 2];
        for (int i = 0; i < B; i++)
            o[i] = word(s, t_rank, i);
        t_fold(&wsum, o, sizeof(int) * B);
        if (s % 4 == 0) {
            CHECK_MPI(MPI_File_write_ordered_begin(data, o, B, MPI_INT));
            split_w = 1;
        } else {
            CHECK_MPI(MPI_File_write_ordered(data, o, B, MPI_INT, MPI_STATUS_IGNORE));
        }
        pos += (MPI_Offset)t_size * B;

        if (s % report == 0 || s == steps)
            printf("step %ld: written %016llx, read %016llx, shared position %lld\n", s, (unsigned long long)wsum,
                   (unsigned long long)rsum, (long long)pos);
    }
    if (split_w)
        CHECK_MPI(MPI_File_write_ordered_end(data, blocks[steps % 2], MPI_STATUS_IGNORE));
    if (split_r) {
        CHECK_MPI(MPI_File_read_ordered_end(in, rec, MPI_STATUS_IGNORE));
        in_record(want, steps, t_rank);
        CHECK(memcmp(rec, want, REC) == 0);
    }
    if (pending != MPI_REQUEST_NULL)
        CHECK_MPI(MPI_Wait(&pending, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_close(&data));
    CHECK_MPI(MPI_File_close(&in));
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    CHECK(access(in_path, F_OK) != 0);
    t_ok("input file deleted on close");

    /* the data file's bytes, checked and summed */
    if (t_rank == 0) {
        MPI_File r;
        MPI_Offset size;
        CHECK_MPI(MPI_File_open(MPI_COMM_SELF, data_path, MPI_MODE_RDONLY, MPI_INFO_NULL, &r));
        CHECK_MPI(MPI_File_get_size(r, &size));
        CHECK_EQ(size, HDR + pos * (MPI_Offset)sizeof(int));
        char *all = malloc((size_t)size + 1);
        CHECK(all != NULL);
        CHECK_MPI(MPI_File_read_at(r, 0, all, (int)size, MPI_BYTE, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_File_close(&r));
        const char *p = all + HDR;
        for (long s = 1; s <= steps; s++) {
            int v;
            if (s % 3 != 2)
                for (int i = 0; i < SW; i++, p += sizeof v) {
                    memcpy(&v, p, sizeof v);
                    CHECK_EQ(v, shared_word(s, i));
                }
            for (int rk = 0; rk < t_size; rk++)
                for (int i = 0; i < B; i++, p += sizeof v) {
                    memcpy(&v, p, sizeof v);
                    CHECK_EQ(v, word(s, rk, i));
                }
        }
        CHECK(p == all + size);
        printf("data file: %lld bytes, header \"%s\", fnv %016llx\n", (long long)size, all,
               (unsigned long long)t_fnv(all, (size_t)size));
        free(all);
        CHECK_MPI(MPI_File_delete(data_path, MPI_INFO_NULL));
    }
    return t_finish();
}
