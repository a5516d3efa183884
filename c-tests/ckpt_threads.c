/* Checkpoint workload: several threads inside MPI at any instant (MPI_THREAD_MULTIPLE). Besides
 * the main thread (a paced loop of MPI_Allreduce on MPI_COMM_WORLD with the pause points), four
 * threads per rank each loop on a communicator of their own, duplicated from MPI_COMM_WORLD:
 *   ring   blocking MPI_Send to the right and MPI_Recv from the left (even ranks send first);
 *   coll   MPI_Allreduce and MPI_Bcast from a rotating root;
 *   probe  MPI_Isend to the right, MPI_Probe(MPI_ANY_SOURCE) + MPI_Get_count + MPI_Recv of a
 *          message whose length changes every iteration;
 *   mprobe the same with MPI_Improbe polling and MPI_Mrecv.
 * So a checkpoint finds threads blocked in receives, in collectives and in probes. Every value
 * is checked against a closed form; each thread folds what it received into a digest, printed
 * by the main thread after joining them (the output does not depend on thread timing). Each
 * thread sleeps $MPICR_TEST_PACE_US per iteration, as the main loop does (t_pace).
 * Argument: the iteration count.
 * mpicr-test: ranks=1,2,4 args=40 long-args=600 long-args.4=150 ckpt-ranks=2,4 ckpt-pace=5000 ckpt-pace.4=20000 ckpt-modes=continue,stop-restart,restart-twice
 */
#include "common.h"

#include <pthread.h>

#define NT 4
#define V 16
#define MAXLEN 64

static long iters;
static long pace_us;
static MPI_Comm comms[NT];
static uint64_t digests[NT];

static long val(int from, long it, int i)
{
    return (from + 1) * 1000003L + it * 131 + i;
}

static int right(void) { return (t_rank + 1) % t_size; }
static int left(void) { return (t_rank - 1 + t_size) % t_size; }

static void nap(void)
{
    if (pace_us > 0) {
        struct timespec ts = {pace_us / 1000000, (pace_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
}

#define FOLD(d, x) ((d) = ((d) ^ (uint64_t)(x)) * 1099511628211ULL)

static void fill(long *buf, int n, int from, long it)
{
    for (int i = 0; i < n; i++)
        buf[i] = val(from, it, i);
}

static void check_from(const long *buf, int n, int from, long it, uint64_t *d)
{
    for (int i = 0; i < n; i++) {
        CHECK_EQ(buf[i], val(from, it, i));
        FOLD(*d, buf[i]);
    }
}

static void *ring(void *arg)
{
    (void)arg;
    MPI_Comm c = comms[0];
    uint64_t d = 14695981039346656037ULL;
    long out[V], in[V];
    for (long it = 1; it <= iters; it++) {
        nap();
        fill(out, V, t_rank, it);
        if (t_size == 1) {
            CHECK_MPI(MPI_Sendrecv(out, V, MPI_LONG, 0, 1, in, V, MPI_LONG, 0, 1, c, MPI_STATUS_IGNORE));
        } else if (t_rank % 2 == 0) {
            CHECK_MPI(MPI_Send(out, V, MPI_LONG, right(), 1, c));
            CHECK_MPI(MPI_Recv(in, V, MPI_LONG, left(), 1, c, MPI_STATUS_IGNORE));
        } else {
            CHECK_MPI(MPI_Recv(in, V, MPI_LONG, left(), 1, c, MPI_STATUS_IGNORE));
            CHECK_MPI(MPI_Send(out, V, MPI_LONG, right(), 1, c));
        }
        check_from(in, V, left(), it, &d);
    }
    digests[0] = d;
    return NULL;
}

static void *coll(void *arg)
{
    (void)arg;
    MPI_Comm c = comms[1];
    uint64_t d = 14695981039346656037ULL;
    for (long it = 1; it <= iters; it++) {
        nap();
        long mine = (t_rank + 1) * it, sum = 0;
        CHECK_MPI(MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, c));
        CHECK_EQ(sum, (long)t_size * (t_size + 1) / 2 * it);
        FOLD(d, sum);
        int root = (int)(it % t_size);
        long b[V];
        if (t_rank == root)
            fill(b, V, root, it);
        CHECK_MPI(MPI_Bcast(b, V, MPI_LONG, root, c));
        check_from(b, V, root, it, &d);
    }
    digests[1] = d;
    return NULL;
}

static int len_of(int from, long it)
{
    return 1 + (int)((it * 7 + from * 5) % MAXLEN);
}

/* probe and mprobe: one message to the right per iteration, received from the left by probing
 * first (its length is not known in advance). */
static void probe_loop(int idx, int matched)
{
    MPI_Comm c = comms[idx];
    uint64_t d = 14695981039346656037ULL;
    long out[MAXLEN], in[MAXLEN];
    for (long it = 1; it <= iters; it++) {
        nap();
        int n = len_of(t_rank, it);
        fill(out, n, t_rank, it);
        MPI_Request sreq;
        CHECK_MPI(MPI_Isend(out, n, MPI_LONG, right(), 2, c, &sreq));
        MPI_Status st;
        int count = -1;
        if (matched) {
            MPI_Message msg;
            int flag = 0;
            while (!flag)
                CHECK_MPI(MPI_Improbe(MPI_ANY_SOURCE, 2, c, &flag, &msg, &st));
            CHECK_MPI(MPI_Get_count(&st, MPI_LONG, &count));
            CHECK_EQ(count, len_of(left(), it));
            CHECK_MPI(MPI_Mrecv(in, count, MPI_LONG, &msg, MPI_STATUS_IGNORE));
        } else {
            CHECK_MPI(MPI_Probe(MPI_ANY_SOURCE, 2, c, &st));
            CHECK_MPI(MPI_Get_count(&st, MPI_LONG, &count));
            CHECK_EQ(count, len_of(left(), it));
            CHECK_MPI(MPI_Recv(in, count, MPI_LONG, st.MPI_SOURCE, 2, c, MPI_STATUS_IGNORE));
        }
        CHECK_EQ(st.MPI_SOURCE, left());
        CHECK_MPI(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
        check_from(in, count, left(), it, &d);
    }
    digests[idx] = d;
}

static void *probe(void *arg)
{
    (void)arg;
    probe_loop(2, 0);
    return NULL;
}

static void *mprobe(void *arg)
{
    (void)arg;
    probe_loop(3, 1);
    return NULL;
}

int main(int argc, char **argv)
{
    t_init_thread(&argc, &argv, "ckpt_threads", MPI_THREAD_MULTIPLE);
    int provided = 0;
    CHECK_MPI(MPI_Query_thread(&provided));
    CHECK_MSG(provided == MPI_THREAD_MULTIPLE, "MPI_THREAD_MULTIPLE not provided");
    iters = t_arg_long(argc, argv, 1, 40);
    const char *p = getenv("MPICR_TEST_PACE_US");
    pace_us = (p && *p) ? atol(p) : 0;
    printf("iterations %ld, threads %d\n", iters, NT);
    for (int t = 0; t < NT; t++)
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]));

    void *(*body[NT])(void *) = {ring, coll, probe, mprobe};
    pthread_t th[NT];
    for (int t = 0; t < NT; t++)
        CHECK(pthread_create(&th[t], NULL, body[t], NULL) == 0);

    const long report = iters >= 10 ? iters / 10 : 1;
    long total = 0;
    for (long it = 1; it <= iters; it++) {
        t_pause_point(MPI_COMM_WORLD, it); /* for checkpoint tests: see common.h */
        long mine = t_rank + it, sum = 0;
        CHECK_MPI(MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
        CHECK_EQ(sum, (long)t_size * (t_size - 1) / 2 + (long)t_size * it);
        total += sum;
        if (it % report == 0)
            printf("main iteration %ld: total %ld\n", it, total);
    }
    for (int t = 0; t < NT; t++)
        CHECK(pthread_join(th[t], NULL) == 0);
    const char *names[NT] = {"ring", "coll", "probe", "mprobe"};
    for (int t = 0; t < NT; t++) {
        printf("%s digest %016llx\n", names[t], (unsigned long long)digests[t]);
        CHECK_MPI(MPI_Comm_free(&comms[t]));
    }
    t_ok("threads");
    t_finish();
    return 0;
}
