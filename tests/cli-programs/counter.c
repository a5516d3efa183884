/* Counts to N (one line each 50 ms, stderr every 20); exits with N % 7. No MPI. With a second
 * argument M it first fills M MiB of memory (an image that takes CRIU a while to restore). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 0;
    char *mem = mib ? malloc(mib << 20) : NULL;
    if (mem) memset(mem, 0x5a, mib << 20);
    const char *rank = getenv("PMI_RANK") ? getenv("PMI_RANK") : "0";
    for (int i = 1; i <= n; i++) {
        printf("rank %s tick %d\n", rank, i);
        fflush(stdout);
        if (i % 20 == 0) fprintf(stderr, "rank %s err %d\n", rank, i);
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    free(mem);
    return n % 7;
}
