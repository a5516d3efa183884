/* Checkpoint workload: what a program attaches to or registers with the library, carried
 * through checkpoints: buffers attached to a communicator and to a session (MPI 4.1), and a
 * data representation (MPI_Register_datarep). Ranks
 * form pairs (0-1, 2-3, ...; a rank without a partner sends to itself). Every iteration each
 * rank Bsends MSGS messages on a duplicate of MPI_COMM_WORLD whose attached buffer holds
 * exactly MSGS of the largest, one on another duplicate with MPI_BUFFER_AUTOMATIC, and one on
 * MPI_COMM_WORLD, charged to the process's buffer (room for one), before receiving the
 * partner's: a buffered send charged to the wrong buffer, or a buffer lost by a checkpoint,
 * fails. Every 8th iteration the communicator's buffer is flushed, detached (the address and
 * size attached come back) and attached again; every 5th the process's buffer is flushed. A
 * session holds a buffer for the whole run, detached at the end. A digest of everything
 * received is printed every twentieth of the run. Without MPI 4.1 (MPICH 4.0.2, Open MPI) the
 * same messages go through the process's buffer, sized for them all, and the output is the
 * same. The data representation is registered before the loop; after it, registering the name
 * again must fail as a duplicate (a renewed library must have it too) and another name succeed.
 * Argument: the iteration count.
 * mpicr-test: ranks=1,2,4 args=40 long-args=600 long-args.4=150 ckpt-ranks=2 ckpt-pace=5000 ckpt-pace.4=20000 ckpt-modes=continue,stop-restart,restart-twice
 */
#include "common.h"

#if MPI_VERSION > 4 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
#define HAVE_COMM_BUFFER 1
#else
#define HAVE_COMM_BUFFER 0
#endif

/* Open MPI (4.1 and 5.0) fails MPI_Register_datarep natively (MPI_ERR_INTERN), and mpicr's
 * standard-ABI face does not translate it (docs/abi-face.md): those builds leave it out. */
#if defined(OPEN_MPI) || defined(MPI_ABI_VERSION)
#define HAVE_DATAREP 0
#else
#define HAVE_DATAREP 1
#endif

#define MSGS 4
#define MAXLEN (40 * 1024 / 8)

static long len_of(long it, int m)
{
    return m == 3 && it % 3 == 0 ? MAXLEN : 1 + (it * 13 + m * 97) % 700;
}

static inline int datarep_extent(MPI_Datatype type, MPI_Aint *extent, void *state)
{
    (void)state;
    MPI_Aint lb;
    return MPI_Type_get_extent(type, &lb, extent);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_attach");
    const long iters = t_arg_long(argc, argv, 1, 40);
    printf("iterations %ld\n", iters);
    const long report = iters >= 20 ? iters / 20 : 1;
    int partner = t_rank ^ 1;
    if (partner >= t_size)
        partner = t_rank;

#if HAVE_DATAREP
    static int datarep_state;
    CHECK_MPI(MPI_Register_datarep("ckpt_attach", MPI_CONVERSION_FN_NULL, MPI_CONVERSION_FN_NULL, datarep_extent, &datarep_state));
#endif

    MPI_Comm fixed, automatic;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &fixed));
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &automatic));
    int one;
    CHECK_MPI(MPI_Pack_size(MAXLEN, MPI_LONG, MPI_COMM_WORLD, &one));
    one += MPI_BSEND_OVERHEAD;
    const int csize = MSGS * one;
    char *cbuf = malloc(csize);
    long *out = malloc(sizeof(long) * MAXLEN), *in = malloc(sizeof(long) * MAXLEN);
    CHECK(cbuf && out && in);
#if HAVE_COMM_BUFFER
    const int psize = one;
    CHECK_MPI(MPI_Comm_attach_buffer(fixed, cbuf, csize));
    CHECK_MPI(MPI_Comm_attach_buffer(automatic, MPI_BUFFER_AUTOMATIC, 0));
    MPI_Session session;
    CHECK_MPI(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session));
    static char sbuf[512];
    CHECK_MPI(MPI_Session_attach_buffer(session, sbuf, sizeof sbuf));
#else
    const int psize = (MSGS + 2) * one;
#endif
    char *pbuf = malloc(psize);
    CHECK(pbuf);
    CHECK_MPI(MPI_Buffer_attach(pbuf, psize));

    uint64_t digest = 14695981039346656037ULL;
#define FOLD(x) (digest = (digest ^ (uint64_t)(x)) * 1099511628211ULL)
    for (long it = 1; it <= iters; it++) {
        t_pause_point(MPI_COMM_WORLD, it);
        /* m < MSGS: on `fixed`; MSGS: on `automatic`; MSGS + 1: on MPI_COMM_WORLD */
        for (int m = 0; m < MSGS + 2; m++) {
            const long n = len_of(it, m % MSGS);
            MPI_Comm c = m < MSGS ? fixed : m == MSGS ? automatic : MPI_COMM_WORLD;
            for (long i = 0; i < n; i++)
                out[i] = t_msg_word(t_rank, it, m, i);
            CHECK_MPI(MPI_Bsend(out, (int)n, MPI_LONG, partner, m, c));
        }
        for (int m = 0; m < MSGS + 2; m++) {
            const long n = len_of(it, m % MSGS);
            MPI_Comm c = m < MSGS ? fixed : m == MSGS ? automatic : MPI_COMM_WORLD;
            MPI_Status st;
            CHECK_MPI(MPI_Recv(in, MAXLEN, MPI_LONG, partner, m, c, &st));
            int got;
            CHECK_MPI(MPI_Get_count(&st, MPI_LONG, &got));
            CHECK_EQ(got, n);
            for (long i = 0; i < n; i++) {
                CHECK_EQ(in[i], t_msg_word(partner, it, m, i));
                FOLD(in[i]);
            }
        }
#if HAVE_COMM_BUFFER
        if (it % 8 == 0) {
            void *det;
            int detsize;
            CHECK_MPI(MPI_Comm_flush_buffer(fixed));
            CHECK_MPI(MPI_Comm_detach_buffer(fixed, &det, &detsize));
            CHECK(det == cbuf && detsize == csize);
            CHECK_MPI(MPI_Comm_attach_buffer(fixed, cbuf, csize));
        }
        if (it % 5 == 0)
            CHECK_MPI(MPI_Buffer_flush());
#endif
        if (it % report == 0)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }
#if HAVE_DATAREP
    /* MPICH 5 raises these on MPI_FILE_NULL's handler, MPICH 4.0.2 on MPI_COMM_WORLD's */
    CHECK_MPI(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    t_print_error("registering ckpt_attach again",
                  MPI_Register_datarep("ckpt_attach", MPI_CONVERSION_FN_NULL, MPI_CONVERSION_FN_NULL, datarep_extent, NULL));
    t_print_error("registering ckpt_attach2",
                  MPI_Register_datarep("ckpt_attach2", MPI_CONVERSION_FN_NULL, MPI_CONVERSION_FN_NULL, datarep_extent, NULL));
#endif
    void *det;
    int detsize;
#if HAVE_COMM_BUFFER
    CHECK_MPI(MPI_Comm_detach_buffer(fixed, &det, &detsize));
    CHECK(det == cbuf && detsize == csize);
    CHECK_MPI(MPI_Comm_detach_buffer(automatic, &det, &detsize));
    CHECK(det == MPI_BUFFER_AUTOMATIC && detsize == 0);
    CHECK_MPI(MPI_Comm_detach_buffer(automatic, &det, &detsize));
    CHECK(det == NULL && detsize == 0);
    CHECK_MPI(MPI_Session_detach_buffer(session, &det, &detsize));
    CHECK(det == sbuf && detsize == (int)sizeof sbuf);
    CHECK_MPI(MPI_Session_finalize(&session));
#endif
    CHECK_MPI(MPI_Buffer_detach(&det, &detsize));
    CHECK(det == pbuf && detsize == psize);
    printf("buffers detached\n");
    CHECK_MPI(MPI_Comm_free(&fixed));
    CHECK_MPI(MPI_Comm_free(&automatic));
    free(cbuf);
    free(pbuf);
    free(out);
    free(in);
    return t_finish();
}
