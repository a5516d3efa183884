/* mem_hold: the bare-CRIU reference for the checkpoint-cost benchmark (scripts/bench.sh,
 * section 2). A plain C program, no MPI: it allocates N MiB, writes every page (a pattern that
 * differs per page, so nothing is a zero page and nothing dedups), announces itself, then waits.
 *
 *   usage: mem_hold MIB [MAX_SECONDS] [READY_FILE]
 *
 * It exits by itself after MAX_SECONDS of *wall* time spent waiting (default 600), so a lost
 * process never lives forever. Time spent frozen by CRIU or between dump and restore counts,
 * which is what we want for a safety bound. When READY_FILE is given, "ready PID" is written
 * to it (atomically, via a temporary name and rename) once every page has been touched.
 * SIGTERM/SIGINT end it at once (default action).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: mem_hold MIB [MAX_SECONDS] [READY_FILE]\n");
        return 2;
    }
    long mib = strtol(argv[1], NULL, 10);
    long max_s = argc > 2 ? strtol(argv[2], NULL, 10) : 600;
    const char *ready = argc > 3 ? argv[3] : NULL;
    if (mib <= 0 || max_s <= 0) {
        fprintf(stderr, "mem_hold: bad arguments\n");
        return 2;
    }
    size_t bytes = (size_t)mib << 20;
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *buf = malloc(bytes);
    if (!buf) {
        fprintf(stderr, "mem_hold: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    /* One 8-byte word per 64 bytes is enough to make every page and cache line distinct. */
    for (size_t off = 0; off < bytes; off += 64) {
        unsigned long v = (unsigned long)off * 0x9E3779B97F4A7C15ul ^ (unsigned long)getpid();
        memcpy(buf + off, &v, sizeof v);
    }
    (void)page;
    if (ready) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", ready);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "ready %ld\n", (long)getpid()) < 0 || fclose(f) != 0 ||
            rename(tmp, ready) != 0) {
            fprintf(stderr, "mem_hold: cannot write %s: %s\n", ready, strerror(errno));
            return 1;
        }
    }
    /* Wait in short sleeps against the monotonic clock: bounded, and cheap for CRIU to freeze. */
    struct timespec t0, now, nap = {0, 200 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile unsigned long sink = 0;
    for (;;) {
        nanosleep(&nap, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= max_s) break;
    }
    /* Touch the data once more so the compiler cannot drop the buffer. */
    for (size_t off = 0; off < bytes; off += (size_t)page) sink += buf[off];
    free(buf);
    return (int)(sink & 0);
}
