/* Checkpoint workload: MPI-IO files kept open for the whole run.
 * - "ckpt_mpiio.dat" (absolute name, in the scratch directory), opened by every rank with hints
 *   at the open and later (MPI_File_set_info): a 64-byte header written by rank 0, then a view
 *   (etype MPI_INT, a resized contiguous filetype, a displacement per rank) through which each
 *   rank writes one block per step with its individual file pointer, in turns by
 *   MPI_File_write_all, by MPI_File_iwrite_all completed by MPI_Wait in the next step, and by the
 *   split collective MPI_File_write_all_begin ended in the next step (so that a checkpoint
 *   meets them pending);
 * - "ckpt_mpiio.log.C" (relative name), opened on a sub-communicator of ranks 2C and 2C+1 with
 *   MPI_File_set_atomicity: the shared file pointer, by MPI_File_write_ordered every step, the
 *   group's first rank's MPI_File_write_shared every fourth step, MPI_File_seek_shared past one
 *   record every tenth (a hole);
 * - "ckpt_mpiio.self.R" (relative), opened on MPI_COMM_SELF with MPI_MODE_DELETE_ON_CLOSE: one
 *   record per step at explicit offsets, and an older record read back and checked.
 * Progress lines print a checksum of what was written and the individual file pointer; at the
 * end the files are closed, read back whole on MPI_COMM_SELF, checked against what every rank
 * wrote, their sizes and FNV checksums printed (so that the oracle covers their bytes), and
 * deleted; the DELETE_ON_CLOSE file must be gone. Arguments: the step count, the directory.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<step> (common.h).
 * mpicr-test: ranks=1,2,4 args=24,{tmpdir} long-args=300,{tmpdir} long-args.4=60,{tmpdir} ckpt-ranks=2,4 ckpt-pace=8000 ckpt-pace.4=40000 ckpt-modes=continue,stop-restart,older-epoch,restart-errors,renewals ckpt-files=ckpt_mpiio.dat
 */
#include "common.h"

#define HDR 64
#define B 8      /* ints per rank and step in the data file */
#define REC 16   /* bytes of a log record */
#define SREC 32  /* bytes of a record of the per-rank scratch file */

static int word(long step, int rank, int i)
{
    return (int)(((uint32_t)step * 2654435761u) ^ ((uint32_t)rank * 40503u) ^ (uint32_t)i);
}

static void log_record(char *out, long step, int rank, char kind)
{
    char tmp[REC + 1];
    snprintf(tmp, sizeof tmp, "%c%05ld r%02d.......", kind, step % 100000, rank);
    memcpy(out, tmp, REC - 1);
    out[REC - 1] = '\n';
}

static void self_record(char *out, long step, int rank)
{
    char tmp[SREC + 1];
    snprintf(tmp, sizeof tmp, "rank %02d step %06ld %08x", rank, step,
             (unsigned)word(step, rank, 99));
    memset(out, ' ', SREC);
    memcpy(out, tmp, strlen(tmp) < SREC ? strlen(tmp) : SREC);
    out[SREC - 1] = '\n';
}

/* Reads a whole file on MPI_COMM_SELF; returns its bytes (caller frees) and size. */
static char *read_whole(const char *path, MPI_Offset *size)
{
    MPI_File f;
    CHECK_MPI(MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &f));
    CHECK_MPI(MPI_File_get_size(f, size));
    char *buf = malloc((size_t)*size + 1);
    CHECK(buf != NULL);
    MPI_Status st;
    CHECK_MPI(MPI_File_read_at(f, 0, buf, (int)*size, MPI_BYTE, &st));
    int n;
    CHECK_MPI(MPI_Get_count(&st, MPI_BYTE, &n));
    CHECK_EQ(n, *size);
    CHECK_MPI(MPI_File_close(&f));
    return buf;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_mpiio");
    const long steps = t_arg_long(argc, argv, 1, 24);
    const char *dir = t_tmpdir(argc, argv, 2);
    printf("steps %ld\n", steps);
    const long report = steps >= 20 ? steps / 20 : 1;

    char data_path[4096], log_name[64], self_name[64];
    snprintf(data_path, sizeof data_path, "%s/ckpt_mpiio.dat", dir);
    const int color = t_rank / 2;
    snprintf(log_name, sizeof log_name, "ckpt_mpiio.log.%d", color);
    snprintf(self_name, sizeof self_name, "ckpt_mpiio.self.%d", t_rank);

    /* the data file: hints at the open and later, a header, then a view per rank */
    MPI_Info info;
    CHECK_MPI(MPI_Info_create(&info));
    CHECK_MPI(MPI_Info_set(info, "cb_buffer_size", "1048576"));
    MPI_File data;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, data_path, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &data));
    CHECK_MPI(MPI_Info_free(&info));
    CHECK_MPI(MPI_Info_create(&info));
    CHECK_MPI(MPI_Info_set(info, "cb_buffer_size", "65536"));
    CHECK_MPI(MPI_File_set_info(data, info));
    CHECK_MPI(MPI_Info_free(&info));
    if (t_rank == 0) {
        char hdr[HDR];
        memset(hdr, 0, sizeof hdr);
        snprintf(hdr, sizeof hdr, "ckpt_mpiio: %d ranks, %ld steps", t_size, steps);
        CHECK_MPI(MPI_File_write_at(data, 0, hdr, HDR, MPI_CHAR, MPI_STATUS_IGNORE));
    }
    MPI_Datatype block, filetype;
    CHECK_MPI(MPI_Type_contiguous(B, MPI_INT, &block));
    CHECK_MPI(MPI_Type_create_resized(block, 0, (MPI_Aint)t_size * B * sizeof(int), &filetype));
    CHECK_MPI(MPI_Type_commit(&filetype));
    CHECK_MPI(MPI_File_set_view(data, HDR + (MPI_Offset)t_rank * B * sizeof(int), MPI_INT, filetype,
                                "native", MPI_INFO_NULL));
    /* the program may free its types: the view keeps what it needs */
    CHECK_MPI(MPI_Type_free(&filetype));
    CHECK_MPI(MPI_Type_free(&block));

    /* the log file of each pair of ranks, on a sub-communicator */
    MPI_Comm pair;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, color, t_rank, &pair));
    int prank;
    CHECK_MPI(MPI_Comm_rank(pair, &prank));
    MPI_File log;
    CHECK_MPI(MPI_File_open(pair, log_name, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &log));
    CHECK_MPI(MPI_File_set_atomicity(log, 1));

    /* the scratch file of this rank */
    MPI_File scratch;
    CHECK_MPI(MPI_File_open(MPI_COMM_SELF, self_name,
                            MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL,
                            &scratch));
    int amode;
    CHECK_MPI(MPI_File_get_amode(scratch, &amode));
    CHECK(amode & MPI_MODE_DELETE_ON_CLOSE);

    const int members = t_size - 2 * color < 2 ? t_size - 2 * color : 2;
    MPI_Offset recs = 0; /* records in the log, holes included */
    static int out[3][B];
    uint64_t sum = 14695981039346656037ULL;
    MPI_Request pending = MPI_REQUEST_NULL;
    int split = 0;
    for (long s = 1; s <= steps; s++) {
        t_pause_point(MPI_COMM_WORLD, s); /* for checkpoint tests: see common.h */
        /* what the previous step left pending */
        if (pending != MPI_REQUEST_NULL) {
            MPI_Status st;
            CHECK_MPI(MPI_Wait(&pending, &st));
            int n;
            CHECK_MPI(MPI_Get_count(&st, MPI_INT, &n));
            CHECK_EQ(n, B);
        }
        if (split) {
            MPI_Status st;
            CHECK_MPI(MPI_File_write_all_end(data, out[(s - 1) % 3], &st));
            int n;
            CHECK_MPI(MPI_Get_count(&st, MPI_INT, &n));
            CHECK_EQ(n, B);
            split = 0;
        }

        /* the data file: one block through the view, in turns */
        int *o = out[s % 3];
        for (int i = 0; i < B; i++)
            o[i] = word(s, t_rank, i);
        sum = (sum ^ t_fnv(o, sizeof(int) * B)) * 1099511628211ULL;
        switch (s % 3) {
        case 0:
            CHECK_MPI(MPI_File_write_all(data, o, B, MPI_INT, MPI_STATUS_IGNORE));
            break;
        case 1:
            CHECK_MPI(MPI_File_iwrite_all(data, o, B, MPI_INT, &pending));
            break;
        default:
            CHECK_MPI(MPI_File_write_all_begin(data, o, B, MPI_INT));
            split = 1;
        }

        /* the log: ordered records, the first rank's own ones, a seek to the end */
        char rec[REC];
        log_record(rec, s, t_rank, 'o');
        CHECK_MPI(MPI_File_write_ordered(log, rec, REC, MPI_CHAR, MPI_STATUS_IGNORE));
        if (prank == 0 && s % 4 == 0) {
            log_record(rec, s, t_rank, 's');
            CHECK_MPI(MPI_File_write_shared(log, rec, REC, MPI_CHAR, MPI_STATUS_IGNORE));
        }
        recs += members + (s % 4 == 0);
        if (s % 10 == 0) { /* skip a record: a hole of zeros */
            recs++;
            CHECK_MPI(MPI_File_seek_shared(log, recs * REC, MPI_SEEK_SET));
        }

        /* the scratch file: this step's record, and an older one read back */
        char srec[SREC], back[SREC], want[SREC];
        self_record(srec, s, t_rank);
        CHECK_MPI(MPI_File_write_at(scratch, (s - 1) * SREC, srec, SREC, MPI_CHAR, MPI_STATUS_IGNORE));
        const long older = (s + 1) / 2;
        CHECK_MPI(MPI_File_read_at(scratch, (older - 1) * SREC, back, SREC, MPI_CHAR, MPI_STATUS_IGNORE));
        self_record(want, older, t_rank);
        CHECK(memcmp(back, want, SREC) == 0);

        if (s % report == 0 || s == steps) {
            MPI_Offset pos;
            CHECK_MPI(MPI_File_get_position(data, &pos));
            printf("step %ld: written %016llx, data position %lld\n", s, (unsigned long long)sum,
                   (long long)pos);
        }
    }
    if (pending != MPI_REQUEST_NULL)
        CHECK_MPI(MPI_Wait(&pending, MPI_STATUS_IGNORE));
    if (split)
        CHECK_MPI(MPI_File_write_all_end(data, out[steps % 3], MPI_STATUS_IGNORE));

    MPI_Offset pos;
    CHECK_MPI(MPI_File_get_position(data, &pos));
    CHECK_EQ(pos, steps * B);
    CHECK_MPI(MPI_File_close(&data));
    CHECK_MPI(MPI_File_close(&log));
    CHECK_MPI(MPI_File_close(&scratch));
    CHECK(access(self_name, F_OK) != 0);
    t_ok("scratch file deleted on close");
    CHECK_MPI(MPI_Comm_free(&pair));
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

    /* the files' bytes, checked and summed */
    if (t_rank == 0) {
        MPI_Offset size;
        char *all = read_whole(data_path, &size);
        CHECK_EQ(size, HDR + steps * t_size * B * (MPI_Offset)sizeof(int));
        for (long s = 1; s <= steps; s++)
            for (int r = 0; r < t_size; r++)
                for (int i = 0; i < B; i++) {
                    int v;
                    memcpy(&v, all + HDR + (((s - 1) * t_size + r) * B + i) * sizeof(int), sizeof v);
                    CHECK_EQ(v, word(s, r, i));
                }
        printf("data file: %lld bytes, header \"%s\", fnv %016llx\n", (long long)size, all,
               (unsigned long long)t_fnv(all, (size_t)size));
        free(all);
    }
    if (prank == 0) {
        MPI_Offset size;
        char *all = read_whole(log_name, &size);
        all[size] = '\0';
        /* a hole at the very end is not part of the file */
        CHECK_EQ(size, (recs - (steps % 10 == 0)) * REC);
        printf("log file %d: %lld bytes, fnv %016llx, last record %.*s\n", color, (long long)size,
               (unsigned long long)t_fnv(all, (size_t)size), REC - 1, all + size - REC);
        free(all);
        CHECK_MPI(MPI_File_delete(log_name, MPI_INFO_NULL));
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0)
        CHECK_MPI(MPI_File_delete(data_path, MPI_INFO_NULL));
    return t_finish();
}
