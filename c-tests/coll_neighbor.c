/* Neighborhood collectives: Neighbor_allgather(v), Neighbor_alltoall(v,w) and their
 * nonblocking forms on a periodic 1-D Cartesian ring, a non-periodic 2-D grid (MPI_PROC_NULL
 * neighbours leave their receive slots untouched) and an adjacent distributed graph with
 * weights (ring edge plus a self loop, a multigraph at 1 rank).
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "coll_neighbor");

    /* Periodic ring: neighbour order is (rank-1, rank+1). */
    {
        MPI_Comm ring;
        int dims[1] = {t_size}, periods[1] = {1};
        CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
        int rank, lo, hi;
        CHECK_MPI(MPI_Comm_rank(ring, &rank));
        CHECK_MPI(MPI_Cart_shift(ring, 0, 1, &lo, &hi));

        /* The gathers send the same block to both neighbours, so they are well defined even
         * when lo == hi. */
        int mine[2] = {rank, 100 + rank}, got[4];
        CHECK_MPI(MPI_Neighbor_allgather(mine, 2, MPI_INT, got, 2, MPI_INT, ring));
        CHECK_EQ(got[0], lo);
        CHECK_EQ(got[2], hi);
        CHECK_EQ(got[3], 100 + hi);
        /* allgatherv, placed reversed: lo's block at offset 2, hi's at offset 0 */
        int counts[2] = {2, 2}, displs[2] = {2, 0}, gv[4] = {-1, -1, -1, -1};
        int vin[2] = {7 * rank, 7 * rank + 1};
        CHECK_MPI(MPI_Neighbor_allgatherv(vin, 2, MPI_INT, gv, counts, displs, MPI_INT, ring));
        CHECK_EQ(gv[2], 7 * lo);
        CHECK_EQ(gv[0], 7 * hi);
        CHECK_EQ(gv[1], 7 * hi + 1);
        MPI_Request reqs[2];
        int ig[4], iagv[4] = {-1, -1, -1, -1};
        CHECK_MPI(MPI_Ineighbor_allgather(mine, 2, MPI_INT, ig, 2, MPI_INT, ring, &reqs[0]));
        CHECK_MPI(MPI_Ineighbor_allgatherv(vin, 2, MPI_INT, iagv, counts, displs, MPI_INT, ring,
                                           &reqs[1]));
        CHECK_MPI(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
        CHECK(memcmp(ig, got, sizeof ig) == 0);
        CHECK(memcmp(iagv, gv, sizeof iagv) == 0);
        printf("ok ring allgather %d %d, allgatherv %d %d\n", got[0], got[2], gv[0], gv[2]);

        if (lo == hi) {
            /* Which block goes where when both neighbours are the same process was clarified
             * only in MPI 4.0, and MPICH 4.0's alltoallv still pairs blocks in posting order. */
            t_skip("ring alltoall(v,w)", "needs 3 ranks (distinct neighbours)");
        } else {
            /* alltoall: slot 0 goes to lo, slot 1 to hi */
            int s[2] = {1000 * rank + 1, 1000 * rank + 2}, r[2];
            CHECK_MPI(MPI_Neighbor_alltoall(s, 1, MPI_INT, r, 1, MPI_INT, ring));
            CHECK_EQ(r[0], 1000 * lo + 2); /* lo sent its "to hi" slot to me */
            CHECK_EQ(r[1], 1000 * hi + 1);

            /* alltoallv: 1 int to lo, 3 ints to hi */
            int sc[2] = {1, 3}, sd[2] = {0, 1}, rc[2] = {3, 1}, rd[2] = {0, 3};
            int sv[4] = {rank, 10 + rank, 20 + rank, 30 + rank}, rv[4];
            CHECK_MPI(MPI_Neighbor_alltoallv(sv, sc, sd, MPI_INT, rv, rc, rd, MPI_INT, ring));
            /* from lo (which sent me its 3 "to hi" ints), from hi (1 "to lo" int) */
            CHECK_EQ(rv[0], 10 + lo);
            CHECK_EQ(rv[2], 30 + lo);
            CHECK_EQ(rv[3], hi);

            /* alltoallw: to lo one double, to hi two ints; byte displacements */
            MPI_Aint swd[2] = {0, sizeof(double)}, rwd[2] = {0, 2 * sizeof(int)};
            MPI_Datatype st[2] = {MPI_DOUBLE, MPI_INT}, rt[2] = {MPI_INT, MPI_DOUBLE};
            int swc[2] = {1, 2}, rwc[2] = {2, 1};
            char sbuf[sizeof(double) + 2 * sizeof(int)], rbuf[2 * sizeof(int) + sizeof(double)];
            double dv = rank + 0.5;
            int iv[2] = {rank * 3, rank * 3 + 1};
            memcpy(sbuf, &dv, sizeof dv);
            memcpy(sbuf + sizeof(double), iv, sizeof iv);
            CHECK_MPI(MPI_Neighbor_alltoallw(sbuf, swc, swd, st, rbuf, rwc, rwd, rt, ring));
            int from_lo[2];
            double from_hi;
            memcpy(from_lo, rbuf, sizeof from_lo);
            memcpy(&from_hi, rbuf + 2 * sizeof(int), sizeof from_hi);
            CHECK_EQ(from_lo[0], lo * 3);
            CHECK_EQ(from_lo[1], lo * 3 + 1);
            CHECK(from_hi == hi + 0.5);

            /* Nonblocking forms, all in flight at once. */
            MPI_Request nb[3];
            int ia[2], iv2[4] = {0, 0, 0, 0};
            char irbuf[sizeof rbuf];
            CHECK_MPI(MPI_Ineighbor_alltoall(s, 1, MPI_INT, ia, 1, MPI_INT, ring, &nb[0]));
            CHECK_MPI(MPI_Ineighbor_alltoallv(sv, sc, sd, MPI_INT, iv2, rc, rd, MPI_INT, ring, &nb[1]));
            CHECK_MPI(MPI_Ineighbor_alltoallw(sbuf, swc, swd, st, irbuf, rwc, rwd, rt, ring, &nb[2]));
            CHECK_MPI(MPI_Waitall(3, nb, MPI_STATUSES_IGNORE));
            CHECK(memcmp(ia, r, sizeof ia) == 0);
            CHECK(memcmp(iv2, rv, sizeof iv2) == 0);
            CHECK(memcmp(irbuf, rbuf, sizeof irbuf) == 0);
            printf("ok ring alltoall %d %d, alltoallv %d %d %d %d\n", r[0], r[1], rv[0], rv[1],
                   rv[2], rv[3]);
        }
        CHECK_MPI(MPI_Comm_free(&ring));
    }

    /* Non-periodic 2-D grid: boundary neighbours are MPI_PROC_NULL, whose slots keep -1. */
    {
        int dims[2] = {0, 0}, periods[2] = {0, 0};
        CHECK_MPI(MPI_Dims_create(t_size, 2, dims));
        MPI_Comm grid;
        CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &grid));
        int rank, coords[2];
        CHECK_MPI(MPI_Comm_rank(grid, &rank));
        CHECK_MPI(MPI_Cart_coords(grid, rank, 2, coords));
        int got[4] = {-1, -1, -1, -1};
        CHECK_MPI(MPI_Neighbor_allgather(&rank, 1, MPI_INT, got, 1, MPI_INT, grid));
        int nb[4];
        CHECK_MPI(MPI_Cart_shift(grid, 0, 1, &nb[0], &nb[1]));
        CHECK_MPI(MPI_Cart_shift(grid, 1, 1, &nb[2], &nb[3]));
        for (int k = 0; k < 4; k++)
            CHECK_EQ(got[k], nb[k] == MPI_PROC_NULL ? -1 : nb[k]);
        printf("ok grid %dx%d at (%d,%d): neighbours %d %d %d %d\n", dims[0], dims[1], coords[0],
               coords[1], got[0], got[1], got[2], got[3]);
        CHECK_MPI(MPI_Comm_free(&grid));
    }

    /* Adjacent distributed graph: an in-edge from the left neighbour and a self loop, out-edges
     * to the right neighbour and to itself, with weights. Slot 0 is the ring edge, slot 1 the
     * self loop. At 1 rank only the self loop exists (two self edges would make a multigraph,
     * whose block pairing MPICH 4.0 and 5 do not agree on). */
    {
        const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
        const int ring = t_size > 1, nd = ring ? 2 : 1, off = 2 - nd;
        int srcs[2] = {left, t_rank}, dsts[2] = {right, t_rank};
        int sw[2] = {1, 5}, dw[2] = {1, 5};
        MPI_Comm g;
        CHECK_MPI(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, nd, srcs + off, sw + off, nd,
                                                 dsts + off, dw + off, MPI_INFO_NULL, 0, &g));
        int indeg, outdeg, weighted;
        CHECK_MPI(MPI_Dist_graph_neighbors_count(g, &indeg, &outdeg, &weighted));
        CHECK_EQ(indeg, nd);
        CHECK_EQ(outdeg, nd);
        CHECK(weighted);
        int s[2] = {10 * t_rank + 1, 10 * t_rank + 2}, r[2] = {-1, -1};
        CHECK_MPI(MPI_Neighbor_alltoall(s + off, 1, MPI_INT, r + off, 1, MPI_INT, g));
        if (ring)
            CHECK_EQ(r[0], 10 * left + 1); /* left's slot 0 goes to its right: me */
        CHECK_EQ(r[1], 10 * t_rank + 2);   /* my own slot 1 goes to me */
        MPI_Request req;
        int ag[2] = {-1, -1};
        CHECK_MPI(MPI_Ineighbor_allgather(&t_rank, 1, MPI_INT, ag + off, 1, MPI_INT, g, &req));
        CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
        if (ring)
            CHECK_EQ(ag[0], left);
        CHECK_EQ(ag[1], t_rank);
        /* alltoallv: 1 int along the ring edge, 2 along the self loop */
        int sc[2] = {1, 2}, sd[2] = {0, 1}, sv[3] = {t_rank, 50 + t_rank, 60 + t_rank};
        int rv[3] = {-1, -1, -1};
        CHECK_MPI(MPI_Neighbor_alltoallv(sv, sc + off, sd + off, MPI_INT, rv, sc + off, sd + off,
                                         MPI_INT, g));
        if (ring)
            CHECK_EQ(rv[0], left);
        CHECK_EQ(rv[1], 50 + t_rank);
        CHECK_EQ(rv[2], 60 + t_rank);
        /* alltoallw: a double along the ring edge, a short along the self loop */
        MPI_Aint wd[2] = {0, sizeof(double)};
        MPI_Datatype wt[2] = {MPI_DOUBLE, MPI_SHORT};
        int wc[2] = {1, 1};
        char wsb[sizeof(double) + sizeof(short)], wrb[sizeof wsb];
        double dv = t_rank * 0.25;
        short sh = (short)(300 + t_rank);
        memcpy(wsb, &dv, sizeof dv);
        memcpy(wsb + sizeof(double), &sh, sizeof sh);
        memset(wrb, 0, sizeof wrb);
        MPI_Request wreq;
        CHECK_MPI(MPI_Ineighbor_alltoallw(wsb, wc + off, wd + off, wt + off, wrb, wc + off,
                                          wd + off, wt + off, g, &wreq));
        CHECK_MPI(MPI_Wait(&wreq, MPI_STATUS_IGNORE));
        memcpy(&dv, wrb, sizeof dv);
        memcpy(&sh, wrb + sizeof(double), sizeof sh);
        if (ring)
            CHECK(dv == left * 0.25);
        CHECK_EQ(sh, 300 + t_rank);
        printf("ok dist graph (%d edges): alltoall %d %d allgather %d %d alltoallv %d %d "
               "alltoallw %.2f %d\n", nd, r[0], r[1], ag[0], ag[1], rv[0], rv[1], dv, sh);
        CHECK_MPI(MPI_Comm_free(&g));
    }

    return t_finish();
}
