/* Checkpoint workload: RMA windows kept for the whole run, one of each kind, each step.
 * - fence ring on an MPI_Win_create window (program memory, named, with an attribute): a step
 *   opens with a fence that completes the previous step's MPI_Put to the right, MPI_Get from the
 *   left and MPI_Accumulate into rank 0, checks them, and issues the next ones, so that a
 *   checkpoint meets a fence epoch with operations pending;
 * - passive target on an MPI_Win_allocate window: MPI_Win_lock(EXCLUSIVE) + MPI_Put to the
 *   right + MPI_Win_unlock, then MPI_Win_lock_all + MPI_Fetch_and_op on a counter of rank 0 +
 *   MPI_Win_flush + MPI_Rput (waited) + MPI_Win_unlock_all; a barrier, then each rank reads its
 *   own memory under a shared lock;
 * - an MPI_Win_create_dynamic window with memory attached (addresses exchanged once) and fences;
 * - an MPI_Win_allocate_shared window on the node's ranks: each rank stores into its own part,
 *   and reads its neighbour's part through the pointer MPI_Win_shared_query gave at the start.
 * Every value read is checked, checksums are printed every twentieth of the run, and at the end
 * the counter, the flavors and the name. Argument: the step count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<step> (common.h).
 * mpicr-test: ranks=1,2,4 args=12 long-args=60 long-args.4=24 ckpt-ranks=2,4 ckpt-pace=8000 ckpt-pace.4=20000 ckpt-modes=continue,stop-restart,older-epoch,restart-twice
 */
#include "common.h"

#define N 8

static long val(long step, int rank, int i)
{
    return step * 1000003L + rank * 101L + i;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_win");
    const long steps = t_arg_long(argc, argv, 1, 24);
    printf("steps %ld\n", steps);
    const long report = steps >= 20 ? steps / 20 : 1;
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    const int ll = (t_rank + 2 * t_size - 2) % t_size;

    /* fence window over program memory: [0,N) from the left's put, [N,2N) accumulated (rank 0) */
    long *fmem = calloc(2 * N, sizeof(long)), got[N] = {0};
    MPI_Win fw;
    CHECK_MPI(MPI_Win_create(fmem, 2 * N * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &fw));
    CHECK_MPI(MPI_Win_set_name(fw, "fence-ring"));
    int kv;
    CHECK_MPI(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, MPI_WIN_NULL_DELETE_FN, &kv, NULL));
    static int marker = 42;
    CHECK_MPI(MPI_Win_set_attr(fw, kv, &marker));

    /* passive target on allocated memory: [0] from the left, [1] counter (rank 0), [2] Rput */
    long *pmem;
    MPI_Win pw;
    CHECK_MPI(MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &pmem, &pw));
    CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t_rank, 0, pw));
    for (int i = 0; i < 4; i++)
        pmem[i] = 0;
    CHECK_MPI(MPI_Win_unlock(t_rank, pw));
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

    /* dynamic window: N longs attached on every rank, addresses gathered once */
    MPI_Win dw;
    CHECK_MPI(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dw));
    long *dmem = calloc(N, sizeof(long));
    CHECK_MPI(MPI_Win_attach(dw, dmem, N * sizeof(long)));
    MPI_Aint mine, *addrs = malloc(sizeof(MPI_Aint) * t_size);
    CHECK_MPI(MPI_Get_address(dmem, &mine));
    CHECK_MPI(MPI_Allgather(&mine, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD));

    /* shared window on the node's ranks (all of them here) */
    MPI_Comm node;
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int nrank, nsize;
    CHECK_MPI(MPI_Comm_rank(node, &nrank));
    CHECK_MPI(MPI_Comm_size(node, &nsize));
    long *smine, *sleft;
    MPI_Win sw;
    CHECK_MPI(MPI_Win_allocate_shared(N * sizeof(long), sizeof(long), MPI_INFO_NULL, node, &smine, &sw));
    MPI_Aint ssize;
    int sdisp;
    CHECK_MPI(MPI_Win_shared_query(sw, (nrank + nsize - 1) % nsize, &ssize, &sdisp, &sleft));
    CHECK_EQ(ssize, (MPI_Aint)(N * sizeof(long)));
    CHECK_EQ(sdisp, (int)sizeof(long));
    for (int i = 0; i < N; i++)
        smine[i] = 0;

    CHECK_MPI(MPI_Win_fence(0, fw));
    CHECK_MPI(MPI_Win_fence(0, dw));
    CHECK_MPI(MPI_Win_fence(0, sw));
    uint64_t sum = 0;
    long counter_seen = 0;
    for (long step = 1; step <= steps; step++) {
        t_pause_point(MPI_COMM_WORLD, step); /* for checkpoint tests: see common.h */

        /* fence ring: complete the previous step's operations, check, issue the next */
        CHECK_MPI(MPI_Win_fence(0, fw));
        if (step > 1) {
            for (int i = 0; i < N; i++) {
                CHECK_MSG(fmem[i] == val(step - 1, left, i), "step %ld: fence put word %d", step, i);
                CHECK_MSG(got[i] == (step > 2 ? val(step - 2, ll, i) : 0), "step %ld: fence get word %d", step, i);
                sum = sum * 31 + (uint64_t)fmem[i];
            }
            if (t_rank == 0)
                CHECK_MSG(fmem[N] == (step - 1) * t_size * (t_size - 1) / 2, "step %ld: accumulated %ld", step, fmem[N]);
        }
        CHECK_MPI(MPI_Win_fence(0, fw));
        long out[N], one = t_rank;
        for (int i = 0; i < N; i++)
            out[i] = val(step, t_rank, i);
        CHECK_MPI(MPI_Get(got, N, MPI_LONG, left, 0, N, MPI_LONG, fw));
        CHECK_MPI(MPI_Win_fence(0, fw));
        /* left open until the next step (through its pause): a put and an accumulate */
        static long keep[N];
        memcpy(keep, out, sizeof keep);
        CHECK_MPI(MPI_Put(keep, N, MPI_LONG, right, 0, N, MPI_LONG, fw));
        static long acc;
        acc = one;
        CHECK_MPI(MPI_Accumulate(&acc, 1, MPI_LONG, 0, N, 1, MPI_LONG, MPI_SUM, fw));

        /* passive target */
        long v = val(step, t_rank, 7);
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, pw));
        CHECK_MPI(MPI_Put(&v, 1, MPI_LONG, right, 0, 1, MPI_LONG, pw));
        CHECK_MPI(MPI_Win_unlock(right, pw));
        CHECK_MPI(MPI_Win_lock_all(0, pw));
        long inc = 1, old;
        CHECK_MPI(MPI_Fetch_and_op(&inc, &old, MPI_LONG, 0, 1, MPI_SUM, pw));
        CHECK_MPI(MPI_Win_flush(0, pw));
        CHECK_MSG(old >= 0 && old < step * t_size, "step %ld: counter %ld", step, old);
        MPI_Request rq;
        long rv = v + 1;
        CHECK_MPI(MPI_Rput(&rv, 1, MPI_LONG, right, 2, 1, MPI_LONG, pw, &rq));
        CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Win_unlock_all(pw));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, t_rank, 0, pw));
        CHECK_MSG(pmem[0] == val(step, left, 7), "step %ld: passive put %ld", step, pmem[0]);
        CHECK_MSG(pmem[2] == val(step, left, 7) + 1, "step %ld: Rput %ld", step, pmem[2]);
        if (t_rank == 0)
            counter_seen = pmem[1];
        CHECK_MPI(MPI_Win_unlock(t_rank, pw));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

        /* dynamic window: put into the right's attached memory */
        for (int i = 0; i < N; i++)
            out[i] = val(step, t_rank, i) ^ 0x5555;
        CHECK_MPI(MPI_Put(out, N, MPI_LONG, right, addrs[right], N, MPI_LONG, dw));
        CHECK_MPI(MPI_Win_fence(0, dw));
        for (int i = 0; i < N; i++) {
            CHECK_MSG(dmem[i] == (val(step, left, i) ^ 0x5555), "step %ld: dynamic word %d", step, i);
            sum = sum * 31 + (uint64_t)dmem[i];
        }
        CHECK_MPI(MPI_Win_fence(0, dw));

        /* shared window: store into my part, read the left neighbour's after a fence */
        for (int i = 0; i < N; i++)
            smine[i] = val(step, nrank, i) + 3;
        CHECK_MPI(MPI_Win_fence(0, sw));
        for (int i = 0; i < N; i++) {
            CHECK_MSG(sleft[i] == val(step, (nrank + nsize - 1) % nsize, i) + 3, "step %ld: shared word %d", step, i);
            sum = sum * 31 + (uint64_t)sleft[i];
        }
        CHECK_MPI(MPI_Win_fence(0, sw));

        if (step % report == 0 || step == steps)
            printf("step %ld sum %016llx\n", step, (unsigned long long)sum);
    }
    CHECK_MPI(MPI_Win_fence(MPI_MODE_NOSUCCEED, fw));
    CHECK_EQ(fmem[0], val(steps, left, 0));
    if (t_rank == 0) {
        CHECK_EQ(fmem[N], steps * t_size * (t_size - 1) / 2);
        CHECK_EQ(counter_seen, steps * t_size);
        printf("counter %ld accumulated %ld\n", counter_seen, fmem[N]);
    }
    int *flavor, flag;
    void *attr;
    CHECK_MPI(MPI_Win_get_attr(pw, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_ALLOCATE);
    CHECK_MPI(MPI_Win_get_attr(pw, MPI_WIN_BASE, &attr, &flag));
    CHECK(flag && attr == (void *)pmem);
    CHECK_MPI(MPI_Win_get_attr(sw, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_SHARED);
    CHECK_MPI(MPI_Win_get_attr(dw, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_DYNAMIC);
    CHECK_MPI(MPI_Win_get_attr(fw, kv, &attr, &flag));
    CHECK(flag && attr == &marker);
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    CHECK_MPI(MPI_Win_get_name(fw, name, &len));
    CHECK(strcmp(name, "fence-ring") == 0);
    long *q;
    CHECK_MPI(MPI_Win_shared_query(sw, (nrank + nsize - 1) % nsize, &ssize, &sdisp, &q));
    CHECK(q == sleft);
    printf("final sum %016llx\n", (unsigned long long)sum);

    CHECK_MPI(MPI_Win_free(&sw));
    CHECK_MPI(MPI_Win_detach(dw, dmem));
    CHECK_MPI(MPI_Win_free(&dw));
    CHECK_MPI(MPI_Win_free(&pw));
    CHECK_MPI(MPI_Win_free(&fw));
    CHECK_MPI(MPI_Win_free_keyval(&kv));
    CHECK_MPI(MPI_Comm_free(&node));
    free(fmem);
    free(dmem);
    free(addrs);
    t_ok("windows carried");
    return t_finish();
}
