/* ckpt_mem: the MPI workload for the checkpoint-cost benchmark (scripts/bench.sh, section 2).
 *
 *   usage: mpiexec -n N [mpicr run --ckpt-dir D --] ckpt_mem MIB [SECONDS] [STOP_FILE]
 *
 * Every rank allocates MIB MiB and writes all of it (a pattern made from the rank and the
 * offset, distinct per 64-byte line, so no page is a zero page). After a barrier rank 0 prints
 *   ckpt_mem: ready ranks=N mib=MIB
 * Then all ranks loop: about 2 ms of arithmetic, rewrite one page of the buffer with its own
 * pattern (so a few pages are dirty at any time, the content stays checkable), and one small
 * MPI_Allreduce that also carries rank 0's stop decision. The loop ends when rank 0 has seen
 * SECONDS (default 60) of *active* time, or as soon as STOP_FILE exists.
 *
 * Active time: an iteration that took longer than GAP_S (the process was frozen for a
 * checkpoint, or stopped and restored later) counts as 0 s and rank 0 prints
 *   ckpt_mem: resumed gap=SECONDS at=UNIX_TIME
 * The gap is taken on CLOCK_REALTIME as well: a restored process runs in a time namespace whose
 * CLOCK_MONOTONIC continues from the dump, so a quick restart (a rank of 64 MiB is back in
 * ~0.1 s) showed no monotonic gap at all and the line never came.
 * UNIX_TIME (CLOCK_REALTIME, seconds) lets the benchmark compute restore latency as
 * "at" minus the moment it launched the restart. Because frozen time does not count, a job
 * restored long after its checkpoint still runs for the rest of its SECONDS.
 *
 * At the end every rank checks its whole buffer against the pattern; rank 0 prints
 *   ckpt_mem: done iters=K active=S verify=ok        (or verify=FAILED, exit status 1)
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GAP_S 0.25

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t pattern(int rank, size_t off) {
    return ((uint64_t)off * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(rank + 1) << 48) ^ 0x5bd1e995u;
}

static void fill(unsigned char *buf, int rank, size_t from, size_t to) {
    for (size_t off = from; off < to; off += 64) {
        uint64_t v = pattern(rank, off);
        memcpy(buf + off, &v, sizeof v);
    }
}

static size_t verify(const unsigned char *buf, int rank, size_t bytes) {
    size_t bad = 0;
    for (size_t off = 0; off < bytes; off += 64) {
        uint64_t v;
        memcpy(&v, buf + off, sizeof v);
        bad += v != pattern(rank, off);
    }
    return bad;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2) {
        if (rank == 0) fprintf(stderr, "usage: ckpt_mem MIB [SECONDS] [STOP_FILE]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long mib = strtol(argv[1], NULL, 10);
    double seconds = argc > 2 ? strtod(argv[2], NULL) : 60.0;
    const char *stop_file = argc > 3 ? argv[3] : NULL;
    if (mib <= 0 || !(seconds > 0)) {
        if (rank == 0) fprintf(stderr, "ckpt_mem: bad arguments\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t bytes = (size_t)mib << 20;
    unsigned char *buf = malloc(bytes);
    if (!buf) {
        fprintf(stderr, "ckpt_mem: rank %d cannot allocate %ld MiB\n", rank, mib);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fill(buf, rank, 0, bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("ckpt_mem: ready ranks=%d mib=%ld\n", size, mib);
        fflush(stdout);
    }

    const size_t page = 4096;
    size_t dirty = 0;
    long iters = 0;
    double active = 0, x = 2.0 + rank; /* not a compile-time constant, so the loop stays */
    double last = clock_s(CLOCK_MONOTONIC), last_real = clock_s(CLOCK_REALTIME);
    for (;;) {
        /* ~2 ms of dependent floating-point work, not removable by the compiler */
        for (int i = 0; i < 400000; i++) x = x * 0.9999999 + 1e-7;
        fill(buf, rank, dirty, dirty + page);
        dirty = (dirty + page) % bytes;

        /* Rank 0 alone decides when to stop; the decision travels in the Allreduce, so every
         * rank leaves the loop after the same iteration. */
        double in[2] = {0, x}, out[2];
        if (rank == 0 && (active >= seconds || (stop_file && access(stop_file, F_OK) == 0))) in[0] = 1;
        MPI_Allreduce(in, out, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        iters++;

        double t = clock_s(CLOCK_MONOTONIC), dt = t - last;
        double real = clock_s(CLOCK_REALTIME), dt_real = real - last_real;
        last = t;
        last_real = real;
        if (dt > GAP_S || dt_real > GAP_S) {
            if (rank == 0) {
                printf("ckpt_mem: resumed gap=%.3f at=%.6f\n", dt > dt_real ? dt : dt_real, real);
                fflush(stdout);
            }
        } else {
            active += dt;
        }
        if (out[0] != 0) break;
    }

    long bad = (long)verify(buf, rank, bytes), total = 0;
    MPI_Reduce(&bad, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("ckpt_mem: done iters=%ld active=%.2f verify=%s\n", iters, active, total ? "FAILED" : "ok");
        if (total) fprintf(stderr, "ckpt_mem: %ld corrupted 64-byte lines\n", total);
        fflush(stdout);
    }
    free(buf);
    MPI_Finalize();
    return total ? 1 : 0;
}
