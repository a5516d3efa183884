/* Matched probes from several threads at once (MPI_THREAD_MULTIPLE): each thread sends a
 * stream of messages with its own tag around a ring and receives its stream with MPI_Mprobe +
 * MPI_Mrecv or MPI_Improbe + MPI_Imrecv (alternating, and MPI_ANY_SOURCE every third time);
 * every message must reach the thread that probed it, in order, with its size and an
 * untouched MPI_ERROR field in the receive's status (the probe's is the library's business:
 * MPICH 4.0.2 and 5 write MPI_SUCCESS there for a message to oneself).
 * mpicr-test: ranks=1,2,4 args=400 timeout=120
 */
#include "common.h"
#include <pthread.h>

#define NTHREADS 4
#define SENTINEL 4321

static int to, from, nmsg;

struct result {
    int errors;
    uint64_t sum;
};

static int value(int rank, int thread, int i)
{
    return rank * 1000000 + thread * 10000 + i;
}

static void *run(void *arg)
{
    int t = (int)(intptr_t)arg;
    struct result *res = calloc(1, sizeof *res);
    int *out = malloc(sizeof(int) * 2 * nmsg);
    MPI_Request *sends = malloc(sizeof(MPI_Request) * nmsg);
    /* message i has (i % 3) + 1 ints, all equal to value(...) */
    for (int i = 0; i < nmsg; i++) {
        out[2 * i] = out[2 * i + 1] = value(t_rank, t, i);
        MPI_Isend(&out[2 * i], i % 3 == 2 ? 2 : 1, MPI_INT, to, t, MPI_COMM_WORLD, &sends[i]);
    }
    for (int i = 0; i < nmsg; i++) {
        int src = i % 3 == 1 ? MPI_ANY_SOURCE : from;
        int buf[2] = {-1, -1}, count = -1, want = i % 3 == 2 ? 2 : 1;
        MPI_Message m = MPI_MESSAGE_NULL;
        MPI_Status st, st2;
        st.MPI_ERROR = SENTINEL;
        st2.MPI_ERROR = SENTINEL + 1;
        if (i % 2 == 0) {
            MPI_Mprobe(src, t, MPI_COMM_WORLD, &m, &st);
            MPI_Get_count(&st, MPI_INT, &count);
            MPI_Mrecv(buf, count, MPI_INT, &m, &st2);
        } else {
            int flag = 0;
            MPI_Request r;
            while (!flag)
                MPI_Improbe(src, t, MPI_COMM_WORLD, &flag, &m, &st);
            MPI_Get_count(&st, MPI_INT, &count);
            MPI_Imrecv(buf, count, MPI_INT, &m, &r);
            MPI_Wait(&r, &st2);
        }
        int expect = value(from, t, i);
        if (count != want || buf[0] != expect || (want == 2 && buf[1] != expect) || st.MPI_SOURCE != from ||
            st.MPI_TAG != t || st2.MPI_SOURCE != from || st2.MPI_TAG != t || m != MPI_MESSAGE_NULL ||
            st2.MPI_ERROR != SENTINEL + 1) {
            if (res->errors++ < 3)
                printf("thread %d message %d: count %d want %d, got %d expected %d, source %d/%d tag %d/%d, errors %d %d\n", t, i,
                       count, want, buf[0], expect, st.MPI_SOURCE, st2.MPI_SOURCE, st.MPI_TAG, st2.MPI_TAG, st.MPI_ERROR,
                       st2.MPI_ERROR);
        }
        res->sum = res->sum * 31 + (uint64_t)buf[0];
    }
    MPI_Waitall(nmsg, sends, MPI_STATUSES_IGNORE);
    free(sends);
    free(out);
    return res;
}

int main(int argc, char **argv)
{
    t_init_thread(&argc, &argv, "mprobe_threads", MPI_THREAD_MULTIPLE);
    int provided = 0;
    CHECK_MPI(MPI_Query_thread(&provided));
    nmsg = (int)t_arg_long(argc, argv, 1, 400);
    to = (t_rank + 1) % t_size;
    from = (t_rank + t_size - 1) % t_size;
    if (provided < MPI_THREAD_MULTIPLE) {
        t_skip("threads", "MPI_THREAD_MULTIPLE not granted");
        return t_finish();
    }
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++)
        CHECK(pthread_create(&th[t], NULL, run, (void *)(intptr_t)t) == 0);
    int errors = 0;
    for (int t = 0; t < NTHREADS; t++) {
        void *r = NULL;
        CHECK(pthread_join(th[t], &r) == 0);
        struct result *res = r;
        printf("thread %d: %d messages, %d errors, checksum %016llx\n", t, nmsg, res->errors, (unsigned long long)res->sum);
        errors += res->errors;
        free(res);
    }
    CHECK_EQ(errors, 0);
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    return t_finish();
}
