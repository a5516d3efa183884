/* mpibench: interposition-overhead micro-benchmarks for mpicr (scripts/bench.sh, section 1).
 *
 *   usage: mpiexec -n 2 mpibench [SCALE]
 *
 * Measures, on exactly 2 ranks:
 *   lat SIZE   ping-pong latency (MPI_Send/MPI_Recv), one-way microseconds, for 0 B .. 1 MiB
 *   bw SIZE    streaming bandwidth: WINDOW MPI_Isend / MPI_Irecv + MPI_Waitall, then a 4-byte
 *              ack (the OSU osu_bw scheme), MB/s (1e6 bytes per second)
 *   call NAME  cost of one cheap call in a tight loop, ns per call: MPI_Iprobe with nothing
 *              pending (ANY_SOURCE, ANY_TAG), MPI_Comm_rank; and of the shortest paths through
 *              the shim's message and collective accounting: send_self (one MPI_Send of 0 B
 *              to this rank plus the MPI_Recv that takes it, ns per pair), isend_self (the
 *              nonblocking way of halo exchanges: MPI_Irecv and MPI_Isend of 0 B to this rank,
 *              then MPI_Wait on each, ns per pair) and barrier_self
 *              (MPI_Barrier on MPI_COMM_SELF); test_null (MPI_Test on MPI_REQUEST_NULL) and
 *              allreduce_self (MPI_Allreduce of 1 int on MPI_COMM_SELF)
 *   coll allreduce_split  a collective-heavy loop, microseconds per call: MPI_Allreduce of 1 double
 *              round-robin over NSPLIT communicators made by MPI_Comm_split of MPI_COMM_WORLD
 *              (both ranks in each, keys alternating), as a solver's sub-communicators are used
 *
 * Each measurement first doubles its repetition count until one block lasts about 20 ms (this
 * also warms up), then times BLOCKS blocks and reports the median block, so one descheduling on
 * a busy machine spoils one block, not the result. SCALE (default 1.0) multiplies the block
 * length; scripts/bench.sh --quick passes a small one.
 *
 * Output (rank 0, one result per line, nothing else on stdout):
 *   mpibench lat 0 0.412
 *   mpibench bw 1048576 5321.7
 *   mpibench call iprobe 61.3
 *   mpibench coll allreduce_split 1.234
 *   mpibench shim no          (yes when libmpicr is mapped into rank 0: a check that the
 *   mpibench done              LD_PRELOAD really reached the ranks)
 * Timing uses clock_gettime(CLOCK_MONOTONIC) directly, so the timer itself never goes through
 * the interposed MPI library.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BLOCKS = 7, WINDOW = 64, TAG = 7, ACK_TAG = 8, NSPLIT = 4 };

static int rank;
static double block_s = 0.02; /* target seconds per timed block; SCALE multiplies it */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void check(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "mpibench: rank %d: %s failed: %s\n", rank, what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

enum kind { PINGPONG, STREAM, IPROBE, COMM_RANK, SEND_SELF, ISEND_SELF, BARRIER_SELF, TEST_NULL, ALLREDUCE_SELF, ALLREDUCE_SPLIT };
static char *buf;
static MPI_Comm split[NSPLIT];
static volatile int sink;

/* One block of n repetitions of `kind`; returns this rank's elapsed seconds. Both ranks call it
 * with the same arguments. A repetition is one round trip (PINGPONG), one window of WINDOW
 * messages plus an ack (STREAM), or one call (IPROBE, COMM_RANK, BARRIER_SELF; a send and its
 * receive for SEND_SELF; both ranks loop at once, each on its own core in a 2-rank run). */
static double run(enum kind kind, int size, long n) {
    MPI_Request req[WINDOW];
    MPI_Status st[WINDOW];
    char ack[4] = {0};
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    double t0 = now();
    switch (kind) {
    case PINGPONG:
        for (long i = 0; i < n; i++) {
            if (rank == 0) {
                check(MPI_Send(buf, size, MPI_CHAR, 1, TAG, MPI_COMM_WORLD), "MPI_Send");
                check(MPI_Recv(buf, size, MPI_CHAR, 1, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
            } else {
                check(MPI_Recv(buf, size, MPI_CHAR, 0, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
                check(MPI_Send(buf, size, MPI_CHAR, 0, TAG, MPI_COMM_WORLD), "MPI_Send");
            }
        }
        break;
    case STREAM:
        for (long w = 0; w < n; w++) {
            /* One buffer for the whole window, as osu_bw does: only bytes moved count. */
            for (int i = 0; i < WINDOW; i++) {
                if (rank == 0)
                    check(MPI_Isend(buf, size, MPI_CHAR, 1, TAG, MPI_COMM_WORLD, &req[i]), "MPI_Isend");
                else
                    check(MPI_Irecv(buf, size, MPI_CHAR, 0, TAG, MPI_COMM_WORLD, &req[i]), "MPI_Irecv");
            }
            check(MPI_Waitall(WINDOW, req, st), "MPI_Waitall");
            if (rank == 0)
                check(MPI_Recv(ack, 4, MPI_CHAR, 1, ACK_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
            else
                check(MPI_Send(ack, 4, MPI_CHAR, 0, ACK_TAG, MPI_COMM_WORLD), "MPI_Send");
        }
        break;
    case IPROBE:
        for (long i = 0; i < n; i++) {
            int flag;
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            sink += flag;
        }
        break;
    case COMM_RANK:
        for (long i = 0; i < n; i++) {
            int r;
            MPI_Comm_rank(MPI_COMM_WORLD, &r);
            sink += r;
        }
        break;
    case SEND_SELF:
        /* 0 B goes eagerly: the send completes before its receive is posted. */
        for (long i = 0; i < n; i++) {
            check(MPI_Send(buf, 0, MPI_CHAR, rank, TAG, MPI_COMM_WORLD), "MPI_Send");
            check(MPI_Recv(buf, 0, MPI_CHAR, rank, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
        }
        break;
    case ISEND_SELF:
        for (long i = 0; i < n; i++) {
            MPI_Request r[2];
            check(MPI_Irecv(buf, 0, MPI_CHAR, rank, TAG, MPI_COMM_WORLD, &r[0]), "MPI_Irecv");
            check(MPI_Isend(buf, 0, MPI_CHAR, rank, TAG, MPI_COMM_WORLD, &r[1]), "MPI_Isend");
            check(MPI_Wait(&r[1], MPI_STATUS_IGNORE), "MPI_Wait");
            check(MPI_Wait(&r[0], MPI_STATUS_IGNORE), "MPI_Wait");
        }
        break;
    case BARRIER_SELF:
        for (long i = 0; i < n; i++) check(MPI_Barrier(MPI_COMM_SELF), "MPI_Barrier");
        break;
    case TEST_NULL:
        for (long i = 0; i < n; i++) {
            MPI_Request r = MPI_REQUEST_NULL;
            int flag;
            MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
            sink += !flag;
        }
        break;
    case ALLREDUCE_SELF:
        for (long i = 0; i < n; i++) {
            int in = (int)i, out;
            check(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF), "MPI_Allreduce");
            sink += out != in;
        }
        break;
    case ALLREDUCE_SPLIT:
        for (long i = 0; i < n; i++) {
            double in = (double)rank, out;
            check(MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, split[i % NSPLIT]), "MPI_Allreduce");
            sink += out != 1.0;
        }
        break;
    }
    return now() - t0;
}

/* Doubles n until one block takes block_s on rank 0 (rank 0 decides, everyone follows), then
 * times BLOCKS blocks and returns the median seconds per repetition as seen by rank 0. */
static double measure(enum kind kind, int size) {
    long n = 1;
    for (;;) {
        double t = run(kind, size, n);
        long next = (t < block_s && n < (1L << 40)) ? 2 * n : 0;
        check(MPI_Bcast(&next, 1, MPI_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast");
        if (next == 0) break;
        n = next;
    }
    double blk[BLOCKS];
    for (int b = 0; b < BLOCKS; b++) blk[b] = run(kind, size, n) / (double)n;
    return median(blk, BLOCKS);
}

static void bench_lat(int size) {
    double s = measure(PINGPONG, size);
    if (rank == 0) printf("mpibench lat %d %.4f\n", size, s / 2.0 * 1e6);
}

static void bench_bw(int size) {
    double s = measure(STREAM, size);
    if (rank == 0) printf("mpibench bw %d %.2f\n", size, (double)size * WINDOW / s / 1e6);
}

/* Whether libmpicr is mapped into this process, read from /proc/self/maps. */
static int shim_loaded(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    if (!f) return 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, "libmpicr") != NULL;
    fclose(f);
    return found;
}

/* sink counts wrong answers from the IPROBE and later kinds; it is reset before each. */
static void bench_call(enum kind kind, const char *name) {
    sink = 0;
    double s = measure(kind, 0);
    if (kind != COMM_RANK && kind != SEND_SELF && kind != ISEND_SELF && kind != BARRIER_SELF && sink != 0) {
        fprintf(stderr, "mpibench: %s gave a wrong result\n", name);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (kind == ALLREDUCE_SPLIT) {
        if (rank == 0) printf("mpibench coll %s %.4f\n", name, s * 1e6);
    } else if (rank == 0) {
        printf("mpibench call %s %.3f\n", name, s * 1e9);
    }
}

int main(int argc, char **argv) {
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "mpibench: needs exactly 2 ranks, got %d\n", size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double scale = argc > 1 ? strtod(argv[1], NULL) : 1.0;
    if (!(scale > 0)) {
        if (rank == 0) fprintf(stderr, "mpibench: SCALE must be > 0\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    block_s *= scale;
    const int max = 1 << 20;
    buf = malloc(max);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 1);
    memset(buf, rank + 1, max);

    static const int lat[] = {0, 8, 1024, 65536, 1 << 20};
    for (size_t i = 0; i < sizeof lat / sizeof lat[0]; i++) bench_lat(lat[i]);
    bench_bw(8);
    bench_bw(65536);
    bench_bw(1 << 20);
    bench_call(IPROBE, "iprobe");
    bench_call(COMM_RANK, "comm_rank");
    bench_call(SEND_SELF, "send_self");
    bench_call(ISEND_SELF, "isend_self");
    bench_call(BARRIER_SELF, "barrier_self");
    bench_call(TEST_NULL, "test_null");
    bench_call(ALLREDUCE_SELF, "allreduce_self");
    for (int i = 0; i < NSPLIT; i++)
        check(MPI_Comm_split(MPI_COMM_WORLD, 0, i % 2 ? -rank : rank, &split[i]), "MPI_Comm_split");
    bench_call(ALLREDUCE_SPLIT, "allreduce_split");
    for (int i = 0; i < NSPLIT; i++) check(MPI_Comm_free(&split[i]), "MPI_Comm_free");

    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    if (rank == 0) {
        printf("mpibench shim %s\n", shim_loaded() ? "yes" : "no");
        printf("mpibench done\n");
        fflush(stdout);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
