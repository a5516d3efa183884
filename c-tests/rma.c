/* One-sided communication: Win_create and Win_allocate windows; fence epochs with Put, Get
 * and Accumulate (SUM, and REPLACE); passive target with Win_lock/unlock (exclusive and
 * shared), Win_lock_all/unlock_all, Win_flush, Get_accumulate, Fetch_and_op and
 * Compare_and_swap building a counter; post/start/complete/wait (PSCW) between neighbours;
 * Win_allocate_shared with Win_shared_query; Win_get_group; Win_set_name/get_name.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

#define N 8

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "rma");
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;

    /* Win_create + fences: Put to the right, Get from the left, Accumulate into rank 0 */
    {
        int *mem = calloc(3 * N, sizeof(int));
        MPI_Win win;
        CHECK_MPI(MPI_Win_create(mem, 3 * N * sizeof(int), sizeof(int), MPI_INFO_NULL,
                                 MPI_COMM_WORLD, &win));
        char name[MPI_MAX_OBJECT_NAME];
        int len;
        CHECK_MPI(MPI_Win_set_name(win, "fence-win"));
        CHECK_MPI(MPI_Win_get_name(win, name, &len));
        CHECK(strcmp(name, "fence-win") == 0);
        MPI_Group g, wg;
        int res;
        CHECK_MPI(MPI_Win_get_group(win, &g));
        CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
        CHECK_MPI(MPI_Group_compare(g, wg, &res));
        CHECK_EQ(res, MPI_IDENT);
        CHECK_MPI(MPI_Group_free(&g));
        CHECK_MPI(MPI_Group_free(&wg));

        for (int i = 0; i < N; i++)
            mem[N + i] = 100 * t_rank + i; /* the middle third is what others Get */
        int put[N], got[N], one[N];
        for (int i = 0; i < N; i++) {
            put[i] = 1000 * t_rank + i;
            one[i] = t_rank + 1;
        }
        CHECK_MPI(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
        CHECK_MPI(MPI_Put(put, N, MPI_INT, right, 0, N, MPI_INT, win));
        CHECK_MPI(MPI_Get(got, N, MPI_INT, left, N, N, MPI_INT, win));
        CHECK_MPI(MPI_Accumulate(one, N, MPI_INT, 0, 2 * N, N, MPI_INT, MPI_SUM, win));
        CHECK_MPI(MPI_Win_fence(0, win));
        for (int i = 0; i < N; i++) {
            CHECK_EQ(mem[i], 1000 * left + i);
            CHECK_EQ(got[i], 100 * left + i);
            if (t_rank == 0)
                CHECK_EQ(mem[2 * N + i], t_size * (t_size + 1) / 2);
        }
        /* second epoch: REPLACE accumulate of a strided (vector) origin into contiguous */
        MPI_Datatype every2;
        CHECK_MPI(MPI_Type_vector(N / 2, 1, 2, MPI_INT, &every2));
        CHECK_MPI(MPI_Type_commit(&every2));
        CHECK_MPI(MPI_Accumulate(put, 1, every2, right, N, N / 2, MPI_INT, MPI_REPLACE, win));
        CHECK_MPI(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
        for (int i = 0; i < N / 2; i++)
            CHECK_EQ(mem[N + i], 1000 * left + 2 * i);
        CHECK_EQ(mem[N + N / 2], 100 * t_rank + N / 2);
        printf("ok fence: put %d.., get %d.., acc %d, replace %d %d\n", mem[0], got[0],
               t_rank == 0 ? mem[2 * N] : 0, mem[N], mem[N + 1]);
        CHECK_MPI(MPI_Type_free(&every2));
        CHECK_MPI(MPI_Win_free(&win));
        free(mem);
    }

    /* Win_allocate + passive target: a shared counter on rank 0 via Fetch_and_op, each rank
     * adding its rank+1 three times; Compare_and_swap claims a slot; Get_accumulate; lock_all
     * with flush */
    {
        long *base;
        MPI_Win win;
        CHECK_MPI(MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD,
                                   &base, &win));
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t_rank, 0, win));
        for (int i = 0; i < 4; i++)
            base[i] = (i == 2) ? -1 : 0;
        CHECK_MPI(MPI_Win_unlock(t_rank, win));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

        long add = t_rank + 1, before, total_before = 0;
        for (int k = 0; k < 3; k++) {
            CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
            CHECK_MPI(MPI_Fetch_and_op(&add, &before, MPI_LONG, 0, 0, MPI_SUM, win));
            CHECK_MPI(MPI_Win_unlock(0, win));
            total_before += before >= 0;
        }
        /* Compare_and_swap: whoever finds -1 in slot 2 writes its rank; exactly one wins */
        long mine = t_rank, expect = -1, old;
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        CHECK_MPI(MPI_Compare_and_swap(&mine, &expect, &old, MPI_LONG, 0, 2, win));
        CHECK_MPI(MPI_Win_unlock(0, win));
        int won = (old == -1), winners;
        CHECK_MPI(MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        CHECK_EQ(winners, 1);
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

        /* lock_all epoch: everyone reads the counter and adds 1 to slot 1 on its right,
         * getting the old value back (Get_accumulate), with a flush in between */
        long counter, prev, inc = 1;
        CHECK_MPI(MPI_Win_lock_all(0, win));
        CHECK_MPI(MPI_Get(&counter, 1, MPI_LONG, 0, 0, 1, MPI_LONG, win));
        CHECK_MPI(MPI_Win_flush(0, win));
        CHECK_MPI(MPI_Get_accumulate(&inc, 1, MPI_LONG, &prev, 1, MPI_LONG, right, 1, 1, MPI_LONG,
                                     MPI_SUM, win));
        CHECK_MPI(MPI_Win_flush_all(win));
        CHECK_MPI(MPI_Win_unlock_all(win));
        CHECK_EQ(counter, 3L * t_size * (t_size + 1) / 2);
        CHECK_EQ(prev, 0); /* only the left neighbour adds to my slot 1, once */
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, t_rank, 0, win));
        long slot1 = base[1], slot2 = base[2];
        CHECK_MPI(MPI_Win_unlock(t_rank, win));
        CHECK_EQ(slot1, 1);
        if (t_rank == 0)
            CHECK(slot2 >= 0 && slot2 < t_size);
        printf("ok passive: counter %ld after %ld fetches, slot1 %ld\n", counter, total_before, slot1);
        CHECK_MPI(MPI_Win_free(&win));
    }

    /* PSCW: each rank exposes its window to its left neighbour and accesses its right one */
    {
        int mem[2] = {0, 0};
        MPI_Win win;
        CHECK_MPI(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
        MPI_Group wg, from, to;
        CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
        CHECK_MPI(MPI_Group_incl(wg, 1, &left, &from));
        CHECK_MPI(MPI_Group_incl(wg, 1, &right, &to));
        int v[2] = {t_rank * 7, t_rank * 7 + 1};
        for (int round = 0; round < 3; round++) {
            CHECK_MPI(MPI_Win_post(from, 0, win));
            CHECK_MPI(MPI_Win_start(to, 0, win));
            CHECK_MPI(MPI_Put(v, 2, MPI_INT, right, 0, 2, MPI_INT, win));
            CHECK_MPI(MPI_Win_complete(win));
            CHECK_MPI(MPI_Win_wait(win));
            CHECK_EQ(mem[0], left * 7 + round);
            CHECK_EQ(mem[1], left * 7 + 1 + round);
            v[0]++;
            v[1]++;
        }
        printf("ok pscw: %d %d\n", mem[0], mem[1]);
        CHECK_MPI(MPI_Group_free(&from));
        CHECK_MPI(MPI_Group_free(&to));
        CHECK_MPI(MPI_Group_free(&wg));
        CHECK_MPI(MPI_Win_free(&win));
    }

    /* shared-memory window: every rank allocates 2 ints; rank r writes directly into its
     * right neighbour's segment through the pointer from Win_shared_query */
    {
        MPI_Comm node;
        CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
        int nr, nn;
        MPI_Comm_rank(node, &nr);
        MPI_Comm_size(node, &nn);
        int *mine;
        MPI_Win win;
        CHECK_MPI(MPI_Win_allocate_shared(2 * sizeof(int), sizeof(int), MPI_INFO_NULL, node, &mine, &win));
        int *peer, unit;
        MPI_Aint sz;
        const int nright = (nr + 1) % nn;
        CHECK_MPI(MPI_Win_shared_query(win, nright, &sz, &unit, &peer));
        CHECK_EQ(sz, 2 * sizeof(int));
        CHECK_EQ(unit, sizeof(int));
        CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
        peer[0] = 500 + nr;
        peer[1] = 600 + nr;
        CHECK_MPI(MPI_Win_sync(win));
        CHECK_MPI(MPI_Barrier(node));
        CHECK_MPI(MPI_Win_sync(win));
        CHECK_EQ(mine[0], 500 + (nr + nn - 1) % nn);
        CHECK_EQ(mine[1], 600 + (nr + nn - 1) % nn);
        CHECK_MPI(MPI_Win_unlock_all(win));
        printf("ok shared window: %d %d\n", mine[0], mine[1]);
        CHECK_MPI(MPI_Win_free(&win));
        CHECK_MPI(MPI_Comm_free(&node));
    }

    return t_finish();
}
