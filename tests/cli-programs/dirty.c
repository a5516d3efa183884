/* dirty MIB TICKS [SPAN [block]]: incremental checkpoints must not lose a write. Each rank fills MIB MiB
 * with a pattern made from the page number and the page's generation; every tick it rewrites a
 * tenth of the pages (every 10th, from offset (tick / SPAN) % 10; SPAN defaults to 20 ticks)
 * with their next generation ("block": the tenth is one contiguous run of pages instead), checks an
 * MPI_Allreduce, prints "rank R tick I" and sleeps 50 ms. At the end every page is checked
 * against its generation and rank R prints "rank R verify=ok|BAD sum=S": S depends only on
 * MIB, TICKS and R, so a run checkpointed and restarted prints what the uninterrupted run
 * prints, unless a dump or a restore lost or mixed up a page. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define PAGE 4096
#define WORDS (PAGE / 8)

static uint64_t word(size_t page, uint32_t gen, size_t w) {
    uint64_t x = (uint64_t)page * 0x9E3779B97F4A7C15ull ^ ((uint64_t)gen << 32) ^ w;
    x ^= x >> 29;
    return x * 0xBF58476D1CE4E5B9ull;
}

static void fill(uint64_t *p, size_t page, uint32_t gen) {
    for (size_t w = 0; w < WORDS; w++) p[w] = word(page, gen, w);
}

int main(int argc, char **argv) {
    size_t mib = (size_t)atol(argv[1]), npages = mib * 256;
    int n = atoi(argv[2]), span = argc > 3 ? atoi(argv[3]) : 20, block = argc > 4, rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint64_t *buf = aligned_alloc(PAGE, npages * PAGE);
    uint32_t *gen = calloc(npages, sizeof *gen);
    if (!buf || !gen) return 2;
    for (size_t p = 0; p < npages; p++) fill(buf + p * WORDS, p, gen[p] = (uint32_t)rank);
    for (int i = 1; i <= n; i++) {
        size_t off = (size_t)(i / span) % 10;
        for (size_t k = 0; k < npages / 10; k++) {
            size_t p = block ? off * (npages / 10) + k : off + 10 * k;
            gen[p] += (uint32_t)i;
            fill(buf + p * WORDS, p, gen[p]);
        }
        int v = rank + i, sum;
        MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (sum != size * i + size * (size - 1) / 2) { printf("rank %d tick %d BAD\n", rank, i); return 1; }
        printf("rank %d tick %d\n", rank, i);
        fflush(stdout);
        usleep(50000);
    }
    int ok = 1;
    uint64_t s = 0;
    for (size_t p = 0; p < npages; p++)
        for (size_t w = 0; w < WORDS; w++) {
            ok &= buf[p * WORDS + w] == word(p, gen[p], w);
            s = s * 31 + buf[p * WORDS + w];
        }
    printf("rank %d verify=%s sum=%016llx\n", rank, ok ? "ok" : "BAD", (unsigned long long)s);
    MPI_Finalize();
    return ok ? 0 : 1;
}
