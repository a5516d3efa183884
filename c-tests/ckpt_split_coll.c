/* Checkpoint workload: collectives on split communicators. MPI_COMM_WORLD is split into pairs
 * ("rows", color rank/2) and into even and odd ranks ("columns", color rank%2, reversed key
 * order), and duplicated. Every iteration runs Allreduce on the row, Bcast from a rotating root
 * on the column and Allgather on the duplicate; every 4th also Alltoall on the column, Reduce
 * (MAX) to a rotating root on the row and Scan on the duplicate; every 16th a Barrier on the
 * column; every 100th a communicator split from the duplicate is made, used for an Allreduce
 * and freed. Every result is checked against a closed form; a digest of all results is printed
 * every twentieth of the run. And one more duplicate that rank 0 frees at once and the others
 * only at the end (MPI_Comm_free is local in MPICH): a checkpoint in between must make it again
 * on every member for the others' sake. Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=64 long-args=2000 long-args.4=200 ckpt-ranks=2,4 ckpt-pace.4=10000
 */
#include "common.h"

#define V 8

static long val(int wrank, long it, int i)
{
    return (wrank + 1) * 100003L + it * 31 + i;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_split_coll");
    const long iters = t_arg_long(argc, argv, 1, 64);
    printf("iterations %ld\n", iters);
    const long report = iters >= 20 ? iters / 20 : 1;

    MPI_Comm row, col, wdup;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, t_rank / 2, t_rank, &row));
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, -t_rank, &col));
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &wdup));
    MPI_Comm late; /* freed by rank 0 now, by the others at the end */
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &late));
    if (t_rank == 0)
        CHECK_MPI(MPI_Comm_free(&late));
    int rrank, rsize, crank, csize;
    CHECK_MPI(MPI_Comm_rank(row, &rrank));
    CHECK_MPI(MPI_Comm_size(row, &rsize));
    CHECK_MPI(MPI_Comm_rank(col, &crank));
    CHECK_MPI(MPI_Comm_size(col, &csize));
    printf("row %d: rank %d of %d; column %d: rank %d of %d\n", t_rank / 2, rrank, rsize, t_rank % 2,
           crank, csize);
    /* world ranks of the members, in communicator rank order */
    int rowm[2], colm[64];
    CHECK(csize <= 64);
    for (int r = 0; r < rsize; r++)
        rowm[r] = (t_rank / 2) * 2 + r;
    for (int r = 0; r < csize; r++) /* key -rank: the highest world rank comes first */
        colm[r] = t_rank % 2 + 2 * (csize - 1 - r);
    CHECK_EQ(rowm[rrank], t_rank);
    CHECK_EQ(colm[crank], t_rank);

    uint64_t digest = 14695981039346656037ULL;
#define FOLD(x) (digest = (digest ^ (uint64_t)(x)) * 1099511628211ULL)
    long splits = 0;
    for (long it = 1; it <= iters; it++) {
        t_pause_point(MPI_COMM_WORLD, it); /* for checkpoint tests: see common.h */

        long v[V], sum[V];
        for (int i = 0; i < V; i++)
            v[i] = val(t_rank, it, i);
        CHECK_MPI(MPI_Allreduce(v, sum, V, MPI_LONG, MPI_SUM, row));
        for (int i = 0; i < V; i++) {
            long want = 0;
            for (int r = 0; r < rsize; r++)
                want += val(rowm[r], it, i);
            CHECK_EQ(sum[i], want);
            FOLD(sum[i]);
        }

        const int root = (int)(it % csize);
        long b = crank == root ? val(t_rank, it, 99) : -1;
        CHECK_MPI(MPI_Bcast(&b, 1, MPI_LONG, root, col));
        CHECK_EQ(b, val(colm[root], it, 99));
        FOLD(b);

        int mine = (int)(t_rank * 7 + it), got[64];
        CHECK(t_size <= 64);
        CHECK_MPI(MPI_Allgather(&mine, 1, MPI_INT, got, 1, MPI_INT, wdup));
        for (int r = 0; r < t_size; r++) {
            CHECK_EQ(got[r], r * 7 + it);
            FOLD(got[r]);
        }

        if (it % 4 == 0) {
            long out[64], in[64];
            for (int r = 0; r < csize; r++)
                out[r] = t_rank * 1000L + r + it;
            CHECK_MPI(MPI_Alltoall(out, 1, MPI_LONG, in, 1, MPI_LONG, col));
            for (int r = 0; r < csize; r++) {
                CHECK_EQ(in[r], colm[r] * 1000L + crank + it);
                FOLD(in[r]);
            }
            const int rroot = (int)((it / 4) % rsize);
            long mx = -1, me = val(t_rank, it, 5);
            CHECK_MPI(MPI_Reduce(&me, &mx, 1, MPI_LONG, MPI_MAX, rroot, row));
            if (rrank == rroot) {
                CHECK_EQ(mx, val(rowm[rsize - 1], it, 5));
                FOLD(mx);
            }
            long pre;
            long one = t_rank + it;
            CHECK_MPI(MPI_Scan(&one, &pre, 1, MPI_LONG, MPI_SUM, wdup));
            CHECK_EQ(pre, (long)t_rank * (t_rank + 1) / 2 + (t_rank + 1) * it);
            FOLD(pre);
        }
        if (it % 16 == 0)
            CHECK_MPI(MPI_Barrier(col));
        if (it % 100 == 0) {
            const int color = (int)((it / 100 + t_rank) % 2);
            MPI_Comm tmp;
            CHECK_MPI(MPI_Comm_split(wdup, color, t_rank, &tmp));
            int n, s, tsize;
            CHECK_MPI(MPI_Comm_size(tmp, &tsize));
            n = 1;
            CHECK_MPI(MPI_Allreduce(&n, &s, 1, MPI_INT, MPI_SUM, tmp));
            CHECK_EQ(s, tsize);
            int want = 0;
            for (int r = 0; r < t_size; r++)
                want += (int)((it / 100 + r) % 2) == color;
            CHECK_EQ(tsize, want);
            FOLD(tsize);
            CHECK_MPI(MPI_Comm_free(&tmp));
            splits++;
        }
        if (it % report == 0 || it == iters)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }
    printf("temporary communicators %ld\n", splits);

    /* every rank's digest, everywhere */
    uint64_t *all = malloc(sizeof(uint64_t) * t_size);
    CHECK_MPI(MPI_Allgather(&digest, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD));
    CHECK(all[t_rank] == digest);
    printf("digests %016llx\n", (unsigned long long)t_fnv(all, sizeof(uint64_t) * t_size));
    free(all);
    CHECK_MPI(MPI_Comm_free(&row));
    CHECK_MPI(MPI_Comm_free(&col));
    CHECK_MPI(MPI_Comm_free(&wdup));
    if (t_rank != 0) {
        int lsize;
        CHECK_MPI(MPI_Comm_size(late, &lsize));
        CHECK_EQ(lsize, t_size);
        CHECK_MPI(MPI_Comm_free(&late));
    }
    return t_finish();
}
