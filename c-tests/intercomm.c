/* Intercommunicators: Intercomm_create between the even and odd halves of the world (peer
 * communicator = a dup of world), Comm_test_inter, Comm_remote_size, Comm_remote_group,
 * point-to-point across (ranks address the remote group), collectives across (Bcast with
 * MPI_ROOT/MPI_PROC_NULL, Allreduce, Allgather, Barrier), Comm_dup of an intercomm, and
 * Intercomm_merge with both high settings. Needs 2 ranks; at 1 rank it prints a skip line.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "intercomm");
    if (t_size < 2) {
        t_skip("intercommunicators", "need 2 ranks");
        return t_finish();
    }
    const int side = t_rank % 2; /* 0: even ranks, 1: odd ranks */
    MPI_Comm local, peer, inter;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, side, t_rank, &local));
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &peer));
    /* leaders: world rank 0 for the evens, world rank 1 for the odds */
    CHECK_MPI(MPI_Intercomm_create(local, 0, peer, side == 0 ? 1 : 0, 99, &inter));

    int flag, lsize, rsize, lrank;
    CHECK_MPI(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag);
    CHECK_MPI(MPI_Comm_size(inter, &lsize));
    CHECK_MPI(MPI_Comm_remote_size(inter, &rsize));
    CHECK_MPI(MPI_Comm_rank(inter, &lrank));
    printf("side %d: local rank %d of %d, remote size %d\n", side, lrank, lsize, rsize);

    /* the remote group, translated to world ranks */
    {
        MPI_Group rg, wg;
        CHECK_MPI(MPI_Comm_remote_group(inter, &rg));
        CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
        int in[4] = {0, 1, 2, 3}, out[4];
        CHECK_MPI(MPI_Group_translate_ranks(rg, rsize, in, wg, out));
        printf("remote group in world ranks:");
        for (int i = 0; i < rsize; i++) {
            CHECK_EQ(out[i], 2 * i + (1 - side));
            printf(" %d", out[i]);
        }
        printf("\n");
        CHECK_MPI(MPI_Group_free(&rg));
        CHECK_MPI(MPI_Group_free(&wg));
    }

    /* point-to-point: local rank i talks to remote rank i (if it exists) */
    if (lrank < rsize) {
        int v = 1000 + t_rank, got = -1;
        MPI_Status st;
        CHECK_MPI(MPI_Sendrecv(&v, 1, MPI_INT, lrank, 5, &got, 1, MPI_INT, lrank, 5, inter, &st));
        CHECK_EQ(st.MPI_SOURCE, lrank); /* a rank in the remote group */
        CHECK_EQ(got, 1000 + 2 * lrank + (1 - side));
        t_ok("p2p across: got %d", got);
    }

    /* Bcast from the evens' rank 0 to all odds: root passes MPI_ROOT, its group mates
     * MPI_PROC_NULL, the receivers the root's rank in the remote group */
    {
        int data[3] = {0, 0, 0};
        if (side == 0) {
            if (lrank == 0) {
                data[0] = 11;
                data[1] = 22;
                data[2] = 33;
            }
            CHECK_MPI(MPI_Bcast(data, 3, MPI_INT, lrank == 0 ? MPI_ROOT : MPI_PROC_NULL, inter));
        } else {
            CHECK_MPI(MPI_Bcast(data, 3, MPI_INT, 0, inter));
            CHECK(data[0] == 11 && data[1] == 22 && data[2] == 33);
        }
        printf("ok inter bcast: %d %d %d\n", data[0], data[1], data[2]);
    }

    /* Allreduce: each side receives the reduction of the other side's values */
    {
        int v = t_rank + 1, r;
        CHECK_MPI(MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_SUM, inter));
        int expect = 0;
        for (int w = 1 - side; w < t_size; w += 2)
            expect += w + 1;
        CHECK_EQ(r, expect);
        int *g = malloc(sizeof(int) * rsize);
        CHECK_MPI(MPI_Allgather(&t_rank, 1, MPI_INT, g, 1, MPI_INT, inter));
        for (int i = 0; i < rsize; i++)
            CHECK_EQ(g[i], 2 * i + (1 - side));
        free(g);
        CHECK_MPI(MPI_Barrier(inter));
        t_ok("inter allreduce %d, allgather, barrier", r);
    }

    /* dup of the intercommunicator keeps both groups */
    {
        MPI_Comm d;
        int res;
        CHECK_MPI(MPI_Comm_dup(inter, &d));
        CHECK_MPI(MPI_Comm_compare(inter, d, &res));
        CHECK_EQ(res, MPI_CONGRUENT);
        int rs;
        CHECK_MPI(MPI_Comm_remote_size(d, &rs));
        CHECK_EQ(rs, rsize);
        CHECK_MPI(MPI_Comm_free(&d));
        t_ok("inter dup");
    }

    /* merge: with high = side the evens come first; with high = !side the odds come first */
    for (int variant = 0; variant < 2; variant++) {
        const int high = variant == 0 ? side : !side;
        MPI_Comm merged;
        CHECK_MPI(MPI_Intercomm_merge(inter, high, &merged));
        int r, n, test;
        MPI_Comm_rank(merged, &r);
        MPI_Comm_size(merged, &n);
        CHECK_MPI(MPI_Comm_test_inter(merged, &test));
        CHECK(!test);
        CHECK_EQ(n, t_size);
        /* the group that passed high = 0 comes first */
        CHECK_EQ(r, high == 0 ? lrank : rsize + lrank);
        int sum;
        CHECK_MPI(MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, merged));
        CHECK_EQ(sum, n * (n - 1) / 2);
        printf("ok merge high=%d: rank %d of %d\n", high, r, n);
        CHECK_MPI(MPI_Comm_free(&merged));
    }

    CHECK_MPI(MPI_Comm_free(&inter));
    CHECK_MPI(MPI_Comm_free(&peer));
    CHECK_MPI(MPI_Comm_free(&local));
    return t_finish();
}
