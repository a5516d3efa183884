/* Application-like: a master/worker task farm. Rank 0 hands out task ids; workers return
 * (id, result) and get the next task or a stop message. The master polls with
 * MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG) and, when nothing is waiting, computes a task
 * itself; workers receive with MPI_ANY_TAG and dispatch on the tag. Which rank computes which
 * task depends on timing, so only timing-independent facts are printed: the results (by task
 * id), and that every worker stopped. The master checks every result against a
 * recomputation. Argument: the number of tasks.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<handed-out task count (master only)> (common.h).
 * mpicr-test: ranks=1,2,4 args=300 long-args=600000 long-args.2=2000 long-args.4=2000 ckpt-ranks=2,4
 */
#include "common.h"

enum { TAG_RESULT = 1, TAG_WORK = 2, TAG_STOP = 3 };

/* a deterministic, somewhat costly function of the task id */
static uint64_t work(long id)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)id;
    const int rounds = 200 + (int)(id % 7) * 100;
    for (int k = 0; k < rounds; k++) {
        h ^= h >> 31;
        h *= 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 29;
    }
    return h;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "app_farm");
    const long ntasks = t_arg_long(argc, argv, 1, 300);
    printf("tasks %ld\n", ntasks);

    if (t_rank == 0) {
        uint64_t *result = calloc(ntasks, sizeof *result);
        char *done = calloc(ntasks, 1);
        long next = 0, finished = 0;
        int active = t_size - 1; /* workers not yet told to stop */
        while (finished < ntasks || active > 0) {
            /* for checkpoint tests (see common.h): only the master pauses, once `next` tasks
             * have been handed out; workers then wait for work inside MPI_Recv */
            t_pause_point(MPI_COMM_SELF, next);
            int flag;
            MPI_Status st;
            CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
            if (flag) {
                CHECK_EQ(st.MPI_TAG, TAG_RESULT);
                uint64_t msg[2];
                CHECK_MPI(MPI_Recv(msg, 2, MPI_UINT64_T, st.MPI_SOURCE, TAG_RESULT, MPI_COMM_WORLD,
                                   MPI_STATUS_IGNORE));
                const long id = (long)msg[0] - 1; /* 0 means "no result yet, send work" */
                if (id >= 0) {
                    CHECK(id < ntasks && !done[id]);
                    done[id] = 1;
                    result[id] = msg[1];
                    finished++;
                }
                if (next < ntasks) {
                    long task = next++;
                    CHECK_MPI(MPI_Send(&task, 1, MPI_LONG, st.MPI_SOURCE, TAG_WORK, MPI_COMM_WORLD));
                } else {
                    CHECK_MPI(MPI_Send(NULL, 0, MPI_LONG, st.MPI_SOURCE, TAG_STOP, MPI_COMM_WORLD));
                    active--;
                }
            } else if (next < ntasks) {
                long id = next++; /* nobody is waiting: do a task here */
                result[id] = work(id);
                done[id] = 1;
                finished++;
            }
        }
        uint64_t sum = 0;
        for (long id = 0; id < ntasks; id++) {
            CHECK_MSG(done[id] && result[id] == work(id), "task %ld: wrong or missing result", id);
            sum += result[id] * (uint64_t)(id + 1);
        }
        printf("all %ld results verified, checksum %016llx, first %016llx, last %016llx\n", ntasks,
               (unsigned long long)sum, (unsigned long long)result[0],
               (unsigned long long)result[ntasks - 1]);
        free(result);
        free(done);
    } else {
        uint64_t msg[2] = {0, 0}; /* first message: a request for work */
        for (;;) {
            CHECK_MPI(MPI_Send(msg, 2, MPI_UINT64_T, 0, TAG_RESULT, MPI_COMM_WORLD));
            long task;
            MPI_Status st;
            CHECK_MPI(MPI_Recv(&task, 1, MPI_LONG, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            if (st.MPI_TAG == TAG_STOP) {
                int n;
                CHECK_MPI(MPI_Get_count(&st, MPI_LONG, &n));
                CHECK_EQ(n, 0);
                break;
            }
            CHECK_EQ(st.MPI_TAG, TAG_WORK);
            msg[0] = (uint64_t)task + 1;
            msg[1] = work(task);
        }
        printf("worker stopped\n");
    }
    /* everybody agrees on the end */
    int one = 1, all;
    CHECK_MPI(MPI_Allreduce(&one, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK_EQ(all, t_size);
    return t_finish();
}
