/* Checkpoint workload: multi-MiB messages in flight. Ranks form pairs (0-1, 2-3, ...; a rank
 * without a partner sends to itself). In every iteration each rank starts four large messages
 * to its partner before it reaches its pause point, and receives the partner's only after it:
 * a 4 MiB MPI_Isend (plus a few odd bytes), a 3 MiB MPI_Issend of a strided vector type, a
 * 2 MiB persistent buffered send (MPI_Bsend_init, sent by the library from the attached buffer
 * once the request completed) and a 1 MiB MPI_Bsend. Paced, a checkpoint finds them all in
 * flight, far above any eager limit, unmatched on the receiving side: the drain must receive
 * them (from a sender that needs to progress for it) and deliver them bit for bit to the
 * receives posted after the checkpoint or the restart. A digest of everything received is
 * printed every twentieth of the run. Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=4 long-args=40 ckpt-ranks=2 ckpt-pace=60000 ckpt-modes=continue,stop-restart
 */
#include "common.h"

#define N_PLAIN (4 * 1024 * 1024 / 8 + 3) /* longs */
#define N_VEC (3 * 1024 * 1024 / 8)       /* longs, every other one of a 2x larger buffer */
#define N_PERS (2 * 1024 * 1024 / 8)
#define N_BSEND (1024 * 1024 / 8)

static void fill(long *buf, long n, long stride, int m, long it)
{
    for (long i = 0; i < n; i++)
        buf[i * stride] = t_msg_word(t_rank, it, m, i);
}

static void check(const long *buf, long n, long stride, int from, int m, long it, uint64_t *digest)
{
    for (long i = 0; i < n; i++)
        CHECK_MSG(buf[i * stride] == t_msg_word(from, it, m, i), "message %d of iteration %ld: word %ld is %ld", m, it, i,
                  buf[i * stride]);
    t_fold(digest, buf, sizeof(long) * (size_t)((n - 1) * stride + 1));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_large");
    const long iters = t_arg_long(argc, argv, 1, 4);
    printf("iterations %ld\n", iters);
    const long report = iters >= 20 ? iters / 20 : 1;
    int partner = t_rank ^ 1;
    if (partner >= t_size)
        partner = t_rank;

    MPI_Datatype vec;
    CHECK_MPI(MPI_Type_vector(N_VEC, 1, 2, MPI_LONG, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));

    long *out[4], *in[4];
    const long lens[4] = {N_PLAIN, 2 * N_VEC, N_PERS, N_BSEND};
    for (int m = 0; m < 4; m++) {
        out[m] = calloc((size_t)lens[m], sizeof(long));
        in[m] = calloc((size_t)lens[m], sizeof(long));
        CHECK(out[m] && in[m]);
    }
    int s1, s2;
    CHECK_MPI(MPI_Pack_size(N_PERS, MPI_LONG, MPI_COMM_WORLD, &s1));
    CHECK_MPI(MPI_Pack_size(N_BSEND, MPI_LONG, MPI_COMM_WORLD, &s2));
    /* room for two of each: the library frees a buffered message's space only once it saw it
     * delivered */
    const int bsize = 2 * (s1 + s2 + 2 * MPI_BSEND_OVERHEAD);
    char *buffer = malloc((size_t)bsize);
    CHECK(buffer);
    CHECK_MPI(MPI_Buffer_attach(buffer, bsize));
    MPI_Request pers;
    CHECK_MPI(MPI_Bsend_init(out[2], N_PERS, MPI_LONG, partner, 2, MPI_COMM_WORLD, &pers));

    uint64_t digest = 14695981039346656037ULL;
    for (long it = 1; it <= iters; it++) {
        MPI_Request sends[2];
        fill(out[0], N_PLAIN, 1, 0, it);
        CHECK_MPI(MPI_Isend(out[0], N_PLAIN, MPI_LONG, partner, 0, MPI_COMM_WORLD, &sends[0]));
        fill(out[1], N_VEC, 2, 1, it);
        CHECK_MPI(MPI_Issend(out[1], 1, vec, partner, 1, MPI_COMM_WORLD, &sends[1]));
        fill(out[2], N_PERS, 1, 2, it);
        CHECK_MPI(MPI_Start(&pers));
        CHECK_MPI(MPI_Wait(&pers, MPI_STATUS_IGNORE));
        fill(out[3], N_BSEND, 1, 3, it);
        CHECK_MPI(MPI_Bsend(out[3], N_BSEND, MPI_LONG, partner, 3, MPI_COMM_WORLD));

        t_pause_point(MPI_COMM_WORLD, it);

        /* the last first: matching by tag must not depend on arrival order */
        for (int m = 3; m >= 0; m--) {
            MPI_Status st;
            int got;
            if (m == 1) {
                CHECK_MPI(MPI_Recv(in[1], 1, vec, partner, 1, MPI_COMM_WORLD, &st));
                CHECK_MPI(MPI_Get_count(&st, vec, &got));
                CHECK_EQ(got, 1);
                check(in[1], N_VEC, 2, partner, 1, it, &digest);
                continue;
            }
            CHECK_MPI(MPI_Recv(in[m], (int)lens[m], MPI_LONG, partner, m, MPI_COMM_WORLD, &st));
            CHECK_MPI(MPI_Get_count(&st, MPI_LONG, &got));
            CHECK_EQ(got, lens[m]);
            check(in[m], lens[m], 1, partner, m, it, &digest);
        }
        for (int k = 0; k < 2; k++)
            CHECK_MPI(MPI_Wait(&sends[k], MPI_STATUS_IGNORE));
        if (it % report == 0)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }
    CHECK_MPI(MPI_Request_free(&pers));
    void *det;
    int detsize;
    CHECK_MPI(MPI_Buffer_detach(&det, &detsize));
    CHECK(det == buffer && detsize == bsize);
    CHECK_MPI(MPI_Type_free(&vec));
    for (int m = 0; m < 4; m++) {
        free(out[m]);
        free(in[m]);
    }
    free(buffer);
    return t_finish();
}
