/* Nonblocking collectives: Ibarrier, Ibcast, Ireduce, Iallreduce, Igather(v), Iscatter(v),
 * Iallgather(v), Ialltoall(v,w), Ireduce_scatter(_block), Iscan, Iexscan. Many are in flight
 * at once (started in the same order on every rank, as MPI requires) on two communicators,
 * completed with Waitall, Wait in reverse order, or Test loops, and overlapped with
 * point-to-point traffic.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "coll_nonblocking");
    const int rank = t_rank, size = t_size, root = size / 2;
    MPI_Comm dup;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));

    /* Ibarrier completed with a Test loop. */
    {
        MPI_Request r;
        int flag = 0;
        CHECK_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &r));
        while (!flag)
            CHECK_MPI(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
        t_ok("ibarrier");
    }

    /* Batch 1: eight operations in flight on two communicators, completed together. */
    {
        MPI_Request reqs[8];
        int bc[4], red = 0, all[2], mine[2] = {rank + 1, 10 * rank};
        double dsum = -1;
        double dval = rank + 0.25;
        int *gat = malloc(sizeof(int) * size), *scat_src = malloc(sizeof(int) * size * 3);
        int scat[3], *ag = malloc(sizeof(int) * 2 * size), *a2a_s = malloc(sizeof(int) * size);
        int *a2a_r = malloc(sizeof(int) * size);
        for (int i = 0; i < 4; i++)
            bc[i] = (rank == root) ? i * i + 3 : 0;
        for (int i = 0; i < 3 * size; i++)
            scat_src[i] = (rank == root) ? i : -1;
        for (int p = 0; p < size; p++)
            a2a_s[p] = rank * 10 + p;
        CHECK_MPI(MPI_Ibcast(bc, 4, MPI_INT, root, MPI_COMM_WORLD, &reqs[0]));
        CHECK_MPI(MPI_Ireduce(&mine[0], &red, 1, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD, &reqs[1]));
        CHECK_MPI(MPI_Iallreduce(mine, all, 2, MPI_INT, MPI_MAX, dup, &reqs[2]));
        CHECK_MPI(MPI_Iallreduce(&dval, &dsum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &reqs[3]));
        CHECK_MPI(MPI_Igather(&mine[1], 1, MPI_INT, gat, 1, MPI_INT, root, dup, &reqs[4]));
        CHECK_MPI(MPI_Iscatter(scat_src, 3, MPI_INT, scat, 3, MPI_INT, root, MPI_COMM_WORLD, &reqs[5]));
        CHECK_MPI(MPI_Iallgather(mine, 2, MPI_INT, ag, 2, MPI_INT, dup, &reqs[6]));
        CHECK_MPI(MPI_Ialltoall(a2a_s, 1, MPI_INT, a2a_r, 1, MPI_INT, MPI_COMM_WORLD, &reqs[7]));
        CHECK_MPI(MPI_Waitall(8, reqs, MPI_STATUSES_IGNORE));
        for (int i = 0; i < 4; i++)
            CHECK_EQ(bc[i], i * i + 3);
        if (rank == root) {
            CHECK_EQ(red, size * (size + 1) / 2);
            for (int p = 0; p < size; p++)
                CHECK_EQ(gat[p], 10 * p);
        }
        CHECK_EQ(all[0], size);
        CHECK_EQ(all[1], 10 * (size - 1));
        CHECK(dsum == size * (size - 1) / 2.0 + 0.25 * size);
        for (int i = 0; i < 3; i++)
            CHECK_EQ(scat[i], 3 * rank + i);
        for (int p = 0; p < size; p++) {
            CHECK_EQ(ag[2 * p], p + 1);
            CHECK_EQ(a2a_r[p], p * 10 + rank);
        }
        printf("ok batch 1: bcast %d %d %d %d, max %d %d, dsum %.2f, scatter %d %d %d\n", bc[0], bc[1],
               bc[2], bc[3], all[0], all[1], dsum, scat[0], scat[1], scat[2]);
        free(gat);
        free(scat_src);
        free(ag);
        free(a2a_s);
        free(a2a_r);
    }

    /* Batch 2: the v- and w-variants, the reduce-scatters and the scans, completed in reverse
     * order of starting, with point-to-point traffic in the middle. */
    {
        int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
        int total = 0;
        for (int p = 0; p < size; p++) {
            counts[p] = p + 1;
            displs[p] = total;
            total += p + 1;
        }
        int *vin = malloc(sizeof(int) * (rank + 1)), *gv = malloc(sizeof(int) * total);
        int *agv = malloc(sizeof(int) * total), *sv = malloc(sizeof(int) * (rank + 1));
        int *sv_src = malloc(sizeof(int) * total);
        for (int i = 0; i <= rank; i++)
            vin[i] = 50 * rank + i;
        for (int i = 0; i < total; i++)
            sv_src[i] = 3 * i;
        /* alltoallv: rank r sends 2 ints to every peer; alltoallw with the same layout */
        int *a_cnt = malloc(sizeof(int) * size), *a_dsp = malloc(sizeof(int) * size);
        int *w_dsp = malloc(sizeof(int) * size);
        MPI_Datatype *w_types = malloc(sizeof(MPI_Datatype) * size);
        int *a_s = malloc(sizeof(int) * 2 * size), *a_r = malloc(sizeof(int) * 2 * size);
        int *w_r = malloc(sizeof(int) * 2 * size);
        for (int p = 0; p < size; p++) {
            a_cnt[p] = 2;
            a_dsp[p] = 2 * p;
            w_dsp[p] = 2 * p * (int)sizeof(int);
            w_types[p] = MPI_INT;
            a_s[2 * p] = rank;
            a_s[2 * p + 1] = p;
        }
        int *rs_in = malloc(sizeof(int) * total), *rs_out = malloc(sizeof(int) * (rank + 1));
        int *rsb_in = malloc(sizeof(int) * size), rsb_out = -1;
        for (int i = 0; i < total; i++)
            rs_in[i] = 1;
        for (int p = 0; p < size; p++)
            rsb_in[p] = rank * p;
        int scan_in = 2, scan_out = 0, ex_out = 0;

        MPI_Request reqs[8];
        CHECK_MPI(MPI_Igatherv(vin, rank + 1, MPI_INT, gv, counts, displs, MPI_INT, 0, dup, &reqs[0]));
        CHECK_MPI(MPI_Iallgatherv(vin, rank + 1, MPI_INT, agv, counts, displs, MPI_INT,
                                  MPI_COMM_WORLD, &reqs[1]));
        CHECK_MPI(MPI_Iscatterv(sv_src, counts, displs, MPI_INT, sv, rank + 1, MPI_INT, 0,
                                MPI_COMM_WORLD, &reqs[2]));
        CHECK_MPI(MPI_Ialltoallv(a_s, a_cnt, a_dsp, MPI_INT, a_r, a_cnt, a_dsp, MPI_INT, dup, &reqs[3]));
        CHECK_MPI(MPI_Ialltoallw(a_s, a_cnt, w_dsp, w_types, w_r, a_cnt, w_dsp, w_types,
                                 MPI_COMM_WORLD, &reqs[4]));
        CHECK_MPI(MPI_Ireduce_scatter(rs_in, rs_out, counts, MPI_INT, MPI_SUM, dup, &reqs[5]));
        CHECK_MPI(MPI_Ireduce_scatter_block(rsb_in, &rsb_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD,
                                            &reqs[6]));
        CHECK_MPI(MPI_Iscan(&scan_in, &scan_out, 1, MPI_INT, MPI_SUM, dup, &reqs[7]));

        /* point-to-point in the middle of it all */
        const int right = (rank + 1) % size, left = (rank + size - 1) % size;
        int pv = rank * 3, pr = -1;
        CHECK_MPI(MPI_Sendrecv(&pv, 1, MPI_INT, right, 0, &pr, 1, MPI_INT, left, 0, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
        CHECK_EQ(pr, left * 3);

        for (int k = 7; k >= 0; k--)
            CHECK_MPI(MPI_Wait(&reqs[k], MPI_STATUS_IGNORE));
        MPI_Request exr;
        CHECK_MPI(MPI_Iexscan(&scan_in, &ex_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &exr));
        CHECK_MPI(MPI_Wait(&exr, MPI_STATUS_IGNORE));

        if (rank == 0)
            for (int p = 0; p < size; p++)
                for (int i = 0; i <= p; i++)
                    CHECK_EQ(gv[displs[p] + i], 50 * p + i);
        for (int p = 0; p < size; p++)
            for (int i = 0; i <= p; i++)
                CHECK_EQ(agv[displs[p] + i], 50 * p + i);
        for (int i = 0; i <= rank; i++) {
            CHECK_EQ(sv[i], 3 * (displs[rank] + i));
            CHECK_EQ(rs_out[i], size);
        }
        for (int p = 0; p < size; p++) {
            CHECK_EQ(a_r[2 * p], p);
            CHECK_EQ(a_r[2 * p + 1], rank);
            CHECK_EQ(w_r[2 * p], p);
            CHECK_EQ(w_r[2 * p + 1], rank);
        }
        CHECK_EQ(rsb_out, rank * size * (size - 1) / 2);
        CHECK_EQ(scan_out, 2 * (rank + 1));
        if (rank > 0)
            CHECK_EQ(ex_out, 2 * rank);
        printf("ok batch 2: scatterv first %d, reduce_scatter_block %d, scan %d, exscan %d\n",
               sv[0], rsb_out, scan_out, rank > 0 ? ex_out : 0);
        free(counts);
        free(displs);
        free(vin);
        free(gv);
        free(agv);
        free(sv);
        free(sv_src);
        free(a_cnt);
        free(a_dsp);
        free(w_dsp);
        free(w_types);
        free(a_s);
        free(a_r);
        free(w_r);
        free(rs_in);
        free(rs_out);
        free(rsb_in);
    }

    /* A pipeline: 20 Iallreduce started back to back on one communicator, completed by
     * Testall polling; each result depends on its own input only. */
    {
        enum { K = 20 };
        long in[K], out[K];
        MPI_Request reqs[K];
        for (int k = 0; k < K; k++) {
            in[k] = (long)k * (rank + 1);
            CHECK_MPI(MPI_Iallreduce(&in[k], &out[k], 1, MPI_LONG, MPI_SUM, dup, &reqs[k]));
        }
        int flag = 0;
        while (!flag)
            CHECK_MPI(MPI_Testall(K, reqs, &flag, MPI_STATUSES_IGNORE));
        long check = 0;
        for (int k = 0; k < K; k++) {
            CHECK_EQ(out[k], (long)k * size * (size + 1) / 2);
            check += out[k];
        }
        t_ok("%d pipelined iallreduce, total %ld", K, check);
    }

    CHECK_MPI(MPI_Comm_free(&dup));
    return t_finish();
}
