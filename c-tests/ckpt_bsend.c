/* Checkpoint workload: buffered sends. Ranks form pairs (0-1, 2-3, ...; a rank without a
 * partner sends to itself); in every iteration each rank Bsends 6 messages of varying length
 * (some of them larger than an eager message) to its partner before receiving the partner's,
 * and every 8th iteration it detaches its buffer, which waits until every buffered message has
 * been delivered, and attaches it again. The partner is paced, so checkpoints find ranks inside
 * MPI_Buffer_detach waiting for messages the other has not received yet. A digest of everything
 * received is printed every twentieth of the run. Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=64 long-args=400 ckpt-ranks=2,4 ckpt-pace=5000 ckpt-modes=continue,stop-restart
 */
#include "common.h"

#define MSGS 6
#define MAXLEN (96 * 1024 / 8)

static long len_of(long it, int m)
{
    return m == 5 && it % 4 == 0 ? MAXLEN : 1 + (it * 7 + m * 131) % 512;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_bsend");
    const long iters = t_arg_long(argc, argv, 1, 64);
    printf("iterations %ld\n", iters);
    const long report = iters >= 20 ? iters / 20 : 1;
    int partner = t_rank ^ 1;
    if (partner >= t_size)
        partner = t_rank;

    int bsize = 0;
    for (int m = 0; m < MSGS; m++) {
        int s;
        CHECK_MPI(MPI_Pack_size(MAXLEN, MPI_LONG, MPI_COMM_WORLD, &s));
        bsize += s + MPI_BSEND_OVERHEAD;
    }
    char *buffer = malloc(bsize);
    long *out = malloc(sizeof(long) * MAXLEN), *in = malloc(sizeof(long) * MAXLEN);
    CHECK(buffer && out && in);
    CHECK_MPI(MPI_Buffer_attach(buffer, bsize));

    uint64_t digest = 14695981039346656037ULL;
#define FOLD(x) (digest = (digest ^ (uint64_t)(x)) * 1099511628211ULL)
    for (long it = 1; it <= iters; it++) {
        t_pause_point(MPI_COMM_WORLD, it);
        for (int m = 0; m < MSGS; m++) {
            const long n = len_of(it, m);
            for (long i = 0; i < n; i++)
                out[i] = t_msg_word(t_rank, it, m, i);
            CHECK_MPI(MPI_Bsend(out, (int)n, MPI_LONG, partner, m, MPI_COMM_WORLD));
        }
        for (int m = 0; m < MSGS; m++) {
            const long n = len_of(it, m);
            MPI_Status st;
            CHECK_MPI(MPI_Recv(in, MAXLEN, MPI_LONG, partner, m, MPI_COMM_WORLD, &st));
            int got;
            CHECK_MPI(MPI_Get_count(&st, MPI_LONG, &got));
            CHECK_EQ(got, n);
            for (long i = 0; i < n; i++) {
                CHECK_EQ(in[i], t_msg_word(partner, it, m, i));
                FOLD(in[i]);
            }
        }
        if (it % 8 == 0) {
            void *det;
            int detsize;
            CHECK_MPI(MPI_Buffer_detach(&det, &detsize));
            CHECK(det == buffer && detsize == bsize);
            CHECK_MPI(MPI_Buffer_attach(buffer, bsize));
        }
        if (it % report == 0)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }
    void *det;
    int detsize;
    CHECK_MPI(MPI_Buffer_detach(&det, &detsize));
    free(buffer);
    free(out);
    free(in);
    return t_finish();
}
