/* Checkpoint workload: a ring of MPI_Sendrecv. Every iteration each rank sends a prefix of its
 * state (length varying with the iteration) to the right and receives the left one's, passes a
 * token around with MPI_Sendrecv_replace, and every 32nd iteration also sends 256 KiB (a
 * rendezvous-size message) the other way round; it then mixes what it received into its state.
 * Received data are checked on arrival; a checksum of the state is printed every twentieth of
 * the run, and at the end rank 0 gathers every state and compares it with a serial run of the
 * whole ring. Integer arithmetic only. Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=64 long-args=2000 long-args.4=200 ckpt-ranks=2,4 ckpt-pace.4=10000 ckpt-modes=continue,stop-restart,older-epoch,restart-twice,restart-errors,renewals,faults
 */
#include "common.h"

#define K 64
#define BIG (256 * 1024 / 8)

static uint64_t mix(uint64_t a, uint64_t b, long it)
{
    uint64_t h = a ^ (b + 0x9e3779b97f4a7c15ULL + (uint64_t)it);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
    return h;
}

static int prefix_len(long it)
{
    return 1 + (int)(it % K);
}

static uint64_t big_word(int sender, long it, long i)
{
    return ((uint64_t)sender << 48) ^ ((uint64_t)it << 24) ^ (uint64_t)i;
}

/* one iteration of the whole ring on all states at once (the serial reference) */
static void ring_step(uint64_t *s, uint64_t *tmp, int size, long it)
{
    const int len = prefix_len(it);
    memcpy(tmp, s, sizeof(uint64_t) * K * size);
    for (int r = 0; r < size; r++) {
        const uint64_t *b = &tmp[(size_t)((r + size - 1) % size) * K];
        for (int i = 0; i < K; i++)
            s[(size_t)r * K + i] = mix(tmp[(size_t)r * K + i], b[i % len], it);
    }
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_ring");
    const long iters = t_arg_long(argc, argv, 1, 64);
    printf("iterations %ld\n", iters);
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    const long report = iters >= 20 ? iters / 20 : 1;

    uint64_t a[K], b[K];
    for (int i = 0; i < K; i++)
        a[i] = mix((uint64_t)t_rank * 1000003u, (uint64_t)i, 0);
    uint64_t *big_out = malloc(sizeof(uint64_t) * BIG), *big_in = malloc(sizeof(uint64_t) * BIG);
    CHECK(big_out && big_in);
    long bigs = 0;

    for (long it = 1; it <= iters; it++) {
        t_pause_point(MPI_COMM_WORLD, it); /* for checkpoint tests: see common.h */
        const int len = prefix_len(it);
        MPI_Status st;
        CHECK_MPI(MPI_Sendrecv(a, len, MPI_UINT64_T, right, 1, b, K, MPI_UINT64_T, left, 1,
                               MPI_COMM_WORLD, &st));
        int n;
        CHECK_MPI(MPI_Get_count(&st, MPI_UINT64_T, &n));
        CHECK_EQ(n, len);
        CHECK_EQ(st.MPI_SOURCE, left);

        long token = it * 1000 + t_rank;
        CHECK_MPI(MPI_Sendrecv_replace(&token, 1, MPI_LONG, right, 2, left, 2, MPI_COMM_WORLD,
                                       MPI_STATUS_IGNORE));
        CHECK_EQ(token, it * 1000 + left);

        if (it % 32 == 0) { /* large message the other way round */
            for (long i = 0; i < BIG; i++)
                big_out[i] = big_word(t_rank, it, i);
            CHECK_MPI(MPI_Sendrecv(big_out, BIG, MPI_UINT64_T, left, 3, big_in, BIG, MPI_UINT64_T,
                                   right, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (long i = 0; i < BIG; i++)
                CHECK_MSG(big_in[i] == big_word(right, it, i), "iteration %ld: word %ld of the large message", it, i);
            bigs++;
        }

        for (int i = 0; i < K; i++)
            a[i] = mix(a[i], b[i % len], it);
        if (it % report == 0 || it == iters)
            printf("iteration %ld state %016llx\n", it, (unsigned long long)t_fnv(a, sizeof a));
    }
    printf("large messages %ld\n", bigs);

    uint64_t *all = NULL;
    if (t_rank == 0)
        all = malloc(sizeof(uint64_t) * K * t_size);
    CHECK_MPI(MPI_Gather(a, K, MPI_UINT64_T, all, K, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    if (t_rank == 0) {
        uint64_t *s = malloc(sizeof(uint64_t) * K * t_size), *tmp = malloc(sizeof(uint64_t) * K * t_size);
        for (int r = 0; r < t_size; r++)
            for (int i = 0; i < K; i++)
                s[(size_t)r * K + i] = mix((uint64_t)r * 1000003u, (uint64_t)i, 0);
        for (long it = 1; it <= iters; it++)
            ring_step(s, tmp, t_size, it);
        for (int k = 0; k < K * t_size; k++)
            CHECK_MSG(s[k] == all[k], "rank %d word %d differs from the serial run", k / K, k % K);
        t_ok("ring matches the serial run");
        free(s);
        free(tmp);
        free(all);
    }
    free(big_out);
    free(big_in);
    return t_finish();
}
