/* Blocking collectives on MPI_COMM_WORLD and on a split communicator: Barrier, Bcast, Reduce
 * and Allreduce with the predefined ops (SUM PROD MAX MIN LAND LOR LXOR BAND BOR BXOR MAXLOC
 * MINLOC) and MPI_IN_PLACE, Gather(v), Scatter(v), Allgather(v), Alltoall(v,w),
 * Reduce_scatter, Reduce_scatter_block, Scan, Exscan. Data are integers (or doubles holding
 * small integers), so results are exact whatever the reduction order.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

static void print_ints(const char *what, const int *v, int n)
{
    printf("ok %s:", what);
    for (int i = 0; i < n; i++)
        printf(" %d", v[i]);
    printf("\n");
}

static void run_on(MPI_Comm comm, const char *label)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    printf("--- %s: rank %d of %d\n", label, rank, size);
    const int root = size - 1; /* not always 0 */
    CHECK_MPI(MPI_Barrier(comm));

    /* Bcast of a struct-like mixed buffer (ints then doubles), from a non-zero root. */
    {
        int iv[5];
        double dv[3];
        for (int i = 0; i < 5; i++)
            iv[i] = (rank == root) ? 10 * i + 1 : -1;
        for (int i = 0; i < 3; i++)
            dv[i] = (rank == root) ? i + 0.5 : -1;
        CHECK_MPI(MPI_Bcast(iv, 5, MPI_INT, root, comm));
        CHECK_MPI(MPI_Bcast(dv, 3, MPI_DOUBLE, root, comm));
        for (int i = 0; i < 5; i++)
            CHECK_EQ(iv[i], 10 * i + 1);
        for (int i = 0; i < 3; i++)
            CHECK(dv[i] == i + 0.5);
        t_ok("bcast");
    }

    /* Reduce/Allreduce with every predefined arithmetic/logical/bitwise op. */
    {
        const MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND,
                              MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
        const char *names[] = {"sum", "prod", "max", "min", "land",
                               "lor", "lxor", "band", "bor", "bxor"};
        for (int k = 0; k < 10; k++) {
            int in[2] = {rank + 1, (rank % 3) == 0 ? 6 : 3}, all[2], red[2] = {-7, -7};
            CHECK_MPI(MPI_Allreduce(in, all, 2, MPI_INT, ops[k], comm));
            CHECK_MPI(MPI_Reduce(in, red, 2, MPI_INT, ops[k], root, comm));
            if (rank == root) {
                CHECK_EQ(red[0], all[0]);
                CHECK_EQ(red[1], all[1]);
            } else {
                CHECK_EQ(red[0], -7); /* recvbuf is not significant off the root */
            }
            printf("ok allreduce %s: %d %d\n", names[k], all[0], all[1]);
        }
        /* Known values for SUM and MAX. */
        int s = rank + 1, sum, mx;
        CHECK_MPI(MPI_Allreduce(&s, &sum, 1, MPI_INT, MPI_SUM, comm));
        CHECK_MPI(MPI_Allreduce(&s, &mx, 1, MPI_INT, MPI_MAX, comm));
        CHECK_EQ(sum, size * (size + 1) / 2);
        CHECK_EQ(mx, size);
        /* MPI_IN_PLACE, doubles and long longs. */
        double d[2] = {rank * 2.0, 1.0};
        CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, d, 2, MPI_DOUBLE, MPI_SUM, comm));
        CHECK(d[0] == size * (size - 1.0));
        CHECK(d[1] == size);
        long long ll = (long long)rank << 33;
        CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &ll, 1, MPI_LONG_LONG, MPI_BOR, comm));
        long long ll_red = 1LL << 40;
        if (rank == root)
            CHECK_MPI(MPI_Reduce(MPI_IN_PLACE, &ll_red, 1, MPI_LONG_LONG, MPI_MAX, root, comm));
        else
            CHECK_MPI(MPI_Reduce(&ll_red, NULL, 1, MPI_LONG_LONG, MPI_MAX, root, comm));
        CHECK_EQ(ll_red, 1LL << 40);
        printf("ok in_place: %.1f %.1f %llx\n", d[0], d[1], (unsigned long long)ll);
    }

    /* MAXLOC / MINLOC on (double, int) and (int, int) pairs. */
    {
        struct {
            double v;
            int i;
        } din = {(double)((rank * 7) % 5), rank}, dmax, dmin;
        CHECK_MPI(MPI_Allreduce(&din, &dmax, 1, MPI_DOUBLE_INT, MPI_MAXLOC, comm));
        CHECK_MPI(MPI_Allreduce(&din, &dmin, 1, MPI_DOUBLE_INT, MPI_MINLOC, comm));
        int iin[2] = {rank % 2, rank}, imax[2];
        CHECK_MPI(MPI_Allreduce(iin, imax, 1, MPI_2INT, MPI_MAXLOC, comm));
        printf("ok maxloc %.0f@%d minloc %.0f@%d 2int maxloc %d@%d\n", dmax.v, dmax.i, dmin.v,
               dmin.i, imax[0], imax[1]);
    }

    /* Gather / Gatherv (rank r contributes r+1 ints) / Scatter / Scatterv. */
    {
        int *all = malloc(sizeof(int) * size * 2);
        int mine[2] = {rank, rank * rank};
        CHECK_MPI(MPI_Gather(mine, 2, MPI_INT, all, 2, MPI_INT, root, comm));
        if (rank == root) {
            for (int p = 0; p < size; p++)
                CHECK(all[2 * p] == p && all[2 * p + 1] == p * p);
            print_ints("gather", all, 2 * size);
        }
        int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
        int total = 0;
        for (int p = 0; p < size; p++) {
            counts[p] = p + 1;
            displs[p] = total;
            total += p + 1;
        }
        int *vin = malloc(sizeof(int) * (rank + 1)), *vall = malloc(sizeof(int) * total);
        for (int i = 0; i <= rank; i++)
            vin[i] = 100 * rank + i;
        CHECK_MPI(MPI_Gatherv(vin, rank + 1, MPI_INT, vall, counts, displs, MPI_INT, root, comm));
        if (rank == root) {
            for (int p = 0; p < size; p++)
                for (int i = 0; i <= p; i++)
                    CHECK_EQ(vall[displs[p] + i], 100 * p + i);
            print_ints("gatherv", vall, total);
        }
        /* Scatter back what was gathered, then the v-form with the same layout. */
        int back[2] = {-1, -1};
        CHECK_MPI(MPI_Scatter(all, 2, MPI_INT, back, 2, MPI_INT, root, comm));
        CHECK(back[0] == rank && back[1] == rank * rank);
        int *vback = malloc(sizeof(int) * (rank + 1));
        CHECK_MPI(MPI_Scatterv(vall, counts, displs, MPI_INT, vback, rank + 1, MPI_INT, root, comm));
        for (int i = 0; i <= rank; i++)
            CHECK_EQ(vback[i], 100 * rank + i);
        /* Gather with MPI_IN_PLACE at the root. */
        if (rank == root) {
            all[2 * root] = mine[0];
            all[2 * root + 1] = mine[1];
            CHECK_MPI(MPI_Gather(MPI_IN_PLACE, 2, MPI_INT, all, 2, MPI_INT, root, comm));
        } else {
            CHECK_MPI(MPI_Gather(mine, 2, MPI_INT, NULL, 0, MPI_INT, root, comm));
        }
        t_ok("scatter/scatterv/in-place gather");
        free(all);
        free(vin);
        free(vall);
        free(vback);

        /* Allgather / Allgatherv (same layout as gatherv). */
        int *ag = malloc(sizeof(int) * size);
        CHECK_MPI(MPI_Allgather(&rank, 1, MPI_INT, ag, 1, MPI_INT, comm));
        for (int p = 0; p < size; p++)
            CHECK_EQ(ag[p], p);
        vin = malloc(sizeof(int) * (rank + 1));
        vall = malloc(sizeof(int) * total);
        for (int i = 0; i <= rank; i++)
            vin[i] = 7 * rank + i;
        CHECK_MPI(MPI_Allgatherv(vin, rank + 1, MPI_INT, vall, counts, displs, MPI_INT, comm));
        for (int p = 0; p < size; p++)
            for (int i = 0; i <= p; i++)
                CHECK_EQ(vall[displs[p] + i], 7 * p + i);
        print_ints("allgatherv", vall, total);
        free(ag);
        free(vin);
        free(vall);
        free(counts);
        free(displs);
    }

    /* Alltoall / Alltoallv (rank r sends p+1 ints to rank p) / Alltoallw (ints to even ranks,
     * doubles to odd ranks, each block one element more than the peer's rank). */
    {
        int *sb = malloc(sizeof(int) * size * 2), *rb = malloc(sizeof(int) * size * 2);
        for (int p = 0; p < size; p++) {
            sb[2 * p] = rank * 100 + p;
            sb[2 * p + 1] = -rank;
        }
        CHECK_MPI(MPI_Alltoall(sb, 2, MPI_INT, rb, 2, MPI_INT, comm));
        for (int p = 0; p < size; p++) {
            CHECK_EQ(rb[2 * p], p * 100 + rank);
            CHECK_EQ(rb[2 * p + 1], -p);
        }
        free(sb);
        free(rb);

        int *scounts = malloc(sizeof(int) * size), *sdispls = malloc(sizeof(int) * size);
        int *rcounts = malloc(sizeof(int) * size), *rdispls = malloc(sizeof(int) * size);
        int stot = 0, rtot = 0;
        for (int p = 0; p < size; p++) {
            scounts[p] = p + 1;
            sdispls[p] = stot;
            stot += p + 1;
            rcounts[p] = rank + 1;
            rdispls[p] = rtot;
            rtot += rank + 1;
        }
        int *vs = malloc(sizeof(int) * stot), *vr = malloc(sizeof(int) * rtot);
        for (int p = 0; p < size; p++)
            for (int i = 0; i <= p; i++)
                vs[sdispls[p] + i] = 1000 * rank + 10 * p + i;
        CHECK_MPI(MPI_Alltoallv(vs, scounts, sdispls, MPI_INT, vr, rcounts, rdispls, MPI_INT, comm));
        for (int p = 0; p < size; p++)
            for (int i = 0; i <= rank; i++)
                CHECK_EQ(vr[rdispls[p] + i], 1000 * p + 10 * rank + i);
        print_ints("alltoallv", vr, rtot);
        free(vs);
        free(vr);

        /* Alltoallw: byte displacements, a datatype per peer. What rank r sends to p: p+1
         * elements of (p even ? int : double); what it receives from p: r+1 elements of
         * (r even ? int : double). */
        MPI_Datatype *stypes = malloc(sizeof(MPI_Datatype) * size), *rtypes = malloc(sizeof(MPI_Datatype) * size);
        int sbytes = 0, rbytes = 0;
        for (int p = 0; p < size; p++) {
            stypes[p] = (p % 2 == 0) ? MPI_INT : MPI_DOUBLE;
            sdispls[p] = sbytes;
            sbytes += (p + 1) * ((p % 2 == 0) ? sizeof(int) : sizeof(double));
            rtypes[p] = (rank % 2 == 0) ? MPI_INT : MPI_DOUBLE;
            rdispls[p] = rbytes;
            rbytes += (rank + 1) * ((rank % 2 == 0) ? sizeof(int) : sizeof(double));
        }
        char *ws = malloc(sbytes), *wr = malloc(rbytes);
        for (int p = 0; p < size; p++)
            for (int i = 0; i <= p; i++) {
                if (p % 2 == 0)
                    ((int *)(ws + sdispls[p]))[i] = 100 * rank + i;
                else
                    ((double *)(ws + sdispls[p]))[i] = 100 * rank + i + 0.5;
            }
        CHECK_MPI(MPI_Alltoallw(ws, scounts, sdispls, stypes, wr, rcounts, rdispls, rtypes, comm));
        long wsum = 0;
        for (int p = 0; p < size; p++)
            for (int i = 0; i <= rank; i++) {
                if (rank % 2 == 0) {
                    CHECK_EQ(((int *)(wr + rdispls[p]))[i], 100 * p + i);
                    wsum += ((int *)(wr + rdispls[p]))[i];
                } else {
                    CHECK(((double *)(wr + rdispls[p]))[i] == 100 * p + i + 0.5);
                    wsum += (long)((double *)(wr + rdispls[p]))[i];
                }
            }
        printf("ok alltoallw: sum %ld\n", wsum);
        free(ws);
        free(wr);
        free(stypes);
        free(rtypes);
        free(scounts);
        free(sdispls);
        free(rcounts);
        free(rdispls);
    }

    /* Reduce_scatter (rank p gets p+1 elements) and Reduce_scatter_block (2 each). */
    {
        int total = size * (size + 1) / 2;
        int *in = malloc(sizeof(int) * total), *counts = malloc(sizeof(int) * size);
        for (int i = 0; i < total; i++)
            in[i] = i + rank;
        for (int p = 0; p < size; p++)
            counts[p] = p + 1;
        int *out = malloc(sizeof(int) * (rank + 1));
        CHECK_MPI(MPI_Reduce_scatter(in, out, counts, MPI_INT, MPI_SUM, comm));
        int first = rank * (rank + 1) / 2;
        for (int i = 0; i <= rank; i++)
            CHECK_EQ(out[i], size * (first + i) + size * (size - 1) / 2);
        print_ints("reduce_scatter", out, rank + 1);
        int *bin = malloc(sizeof(int) * 2 * size), bout[2];
        for (int i = 0; i < 2 * size; i++)
            bin[i] = (i + 1) * (rank + 1);
        CHECK_MPI(MPI_Reduce_scatter_block(bin, bout, 2, MPI_INT, MPI_MAX, comm));
        CHECK_EQ(bout[0], (2 * rank + 1) * size);
        CHECK_EQ(bout[1], (2 * rank + 2) * size);
        print_ints("reduce_scatter_block", bout, 2);
        free(in);
        free(counts);
        free(out);
        free(bin);
    }

    /* Scan / Exscan (Exscan's result on rank 0 is undefined, so it is not looked at). */
    {
        int v = rank + 1, scan, exscan = -99;
        CHECK_MPI(MPI_Scan(&v, &scan, 1, MPI_INT, MPI_SUM, comm));
        CHECK_EQ(scan, (rank + 1) * (rank + 2) / 2);
        CHECK_MPI(MPI_Exscan(&v, &exscan, 1, MPI_INT, MPI_SUM, comm));
        if (rank > 0)
            CHECK_EQ(exscan, rank * (rank + 1) / 2);
        int prod = rank + 2;
        CHECK_MPI(MPI_Scan(MPI_IN_PLACE, &prod, 1, MPI_INT, MPI_PROD, comm));
        printf("ok scan %d exscan %d scan-prod %d\n", scan, rank > 0 ? exscan : 0, prod);
    }
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "coll_blocking");
    run_on(MPI_COMM_WORLD, "world");
    /* Odd and even world ranks in separate communicators, ordered in reverse. */
    MPI_Comm half;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, -t_rank, &half));
    run_on(half, "split by parity, reversed");
    CHECK_MPI(MPI_Comm_free(&half));
    return t_finish();
}
