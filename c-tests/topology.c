/* Process topologies: Dims_create, Cart_create (periodic and not, with reorder), Cartdim_get,
 * Cart_get, Cart_coords, Cart_rank (with periodic wrap-around), Cart_shift, Cart_sub,
 * Cart_map, Graph_create, Graphdims_get, Graph_get, Graph_neighbors_count/neighbors,
 * Graph_map, Dist_graph_create (edges given by other ranks), Dist_graph_create_adjacent,
 * Dist_graph_neighbors(_count), Topo_test, and Comm_dup keeping the topology.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

static const char *topo_name(int t)
{
    return t == MPI_CART ? "cart" : t == MPI_GRAPH ? "graph" : t == MPI_DIST_GRAPH ? "dist_graph"
           : t == MPI_UNDEFINED ? "undefined" : "?";
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "topology");
    int topo;
    CHECK_MPI(MPI_Topo_test(MPI_COMM_WORLD, &topo));
    printf("world topology: %s\n", topo_name(topo));

    /* Dims_create with and without constraints */
    {
        int d2[2] = {0, 0}, d3[3] = {0, 0, 0}, dc[2] = {0, 1};
        CHECK_MPI(MPI_Dims_create(t_size, 2, d2));
        CHECK_MPI(MPI_Dims_create(t_size, 3, d3));
        CHECK_MPI(MPI_Dims_create(t_size, 2, dc));
        CHECK_EQ(d2[0] * d2[1], t_size);
        CHECK(d2[0] >= d2[1]);
        printf("dims_create: %dx%d, %dx%dx%d, constrained %dx%d\n", d2[0], d2[1], d3[0], d3[1],
               d3[2], dc[0], dc[1]);
    }

    /* 2-D torus in one dimension, open in the other; reorder allowed (ranks may change) */
    {
        int dims[2] = {0, 0}, periods[2] = {1, 0};
        CHECK_MPI(MPI_Dims_create(t_size, 2, dims));
        MPI_Comm cart;
        CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 1, &cart));
        int rank, nd, gd[2], gp[2], gc[2], coords[2];
        CHECK_MPI(MPI_Comm_rank(cart, &rank));
        CHECK_MPI(MPI_Topo_test(cart, &topo));
        CHECK_EQ(topo, MPI_CART);
        CHECK_MPI(MPI_Cartdim_get(cart, &nd));
        CHECK_EQ(nd, 2);
        CHECK_MPI(MPI_Cart_get(cart, 2, gd, gp, gc));
        CHECK_MPI(MPI_Cart_coords(cart, rank, 2, coords));
        CHECK(gd[0] == dims[0] && gd[1] == dims[1] && gp[0] == 1 && gp[1] == 0);
        CHECK(gc[0] == coords[0] && gc[1] == coords[1]);
        int back;
        CHECK_MPI(MPI_Cart_rank(cart, coords, &back));
        CHECK_EQ(back, rank);
        /* wrap-around in the periodic dimension */
        int wrapped[2] = {coords[0] + dims[0], coords[1]};
        CHECK_MPI(MPI_Cart_rank(cart, wrapped, &back));
        CHECK_EQ(back, rank);
        int src0, dst0, src1, dst1;
        CHECK_MPI(MPI_Cart_shift(cart, 0, 1, &src0, &dst0));
        CHECK_MPI(MPI_Cart_shift(cart, 1, -1, &src1, &dst1));
        printf("cart %dx%d: rank %d at (%d,%d); shift0 %d->%d; shift1(-1) %s->%s\n", dims[0],
               dims[1], rank, coords[0], coords[1], src0, dst0,
               src1 == MPI_PROC_NULL ? "null" : "peer", dst1 == MPI_PROC_NULL ? "null" : "peer");
        /* a message along dimension 0 shows the topology communicator works */
        int got = -1;
        CHECK_MPI(MPI_Sendrecv(&rank, 1, MPI_INT, dst0, 0, &got, 1, MPI_INT, src0, 0, cart,
                               MPI_STATUS_IGNORE));
        CHECK_EQ(got, src0);

        /* Cart_sub keeping each dimension in turn */
        for (int keepdim = 0; keepdim < 2; keepdim++) {
            int remain[2] = {keepdim == 0, keepdim == 1};
            MPI_Comm sub;
            CHECK_MPI(MPI_Cart_sub(cart, remain, &sub));
            int sr, sn, sdims[1], sper[1], scoords[1];
            MPI_Comm_rank(sub, &sr);
            MPI_Comm_size(sub, &sn);
            CHECK_EQ(sn, dims[keepdim]);
            CHECK_MPI(MPI_Cart_get(sub, 1, sdims, sper, scoords));
            CHECK_EQ(scoords[0], coords[keepdim]);
            CHECK_EQ(sper[0], periods[keepdim]);
            int sum;
            CHECK_MPI(MPI_Allreduce(&sr, &sum, 1, MPI_INT, MPI_SUM, sub));
            CHECK_EQ(sum, sn * (sn - 1) / 2);
            printf("cart_sub keep %d: rank %d of %d\n", keepdim, sr, sn);
            CHECK_MPI(MPI_Comm_free(&sub));
        }
        /* dup keeps the topology */
        MPI_Comm d;
        CHECK_MPI(MPI_Comm_dup(cart, &d));
        CHECK_MPI(MPI_Topo_test(d, &topo));
        CHECK_EQ(topo, MPI_CART);
        CHECK_MPI(MPI_Comm_free(&d));
        /* Cart_map: where this rank would go in a 1-D ring of all ranks */
        int newrank, one[1] = {t_size}, per1[1] = {1};
        CHECK_MPI(MPI_Cart_map(MPI_COMM_WORLD, 1, one, per1, &newrank));
        CHECK(newrank >= 0 && newrank < t_size);
        CHECK_MPI(MPI_Comm_free(&cart));
        t_ok("cart");
    }

    /* Graph: a ring plus a link from every rank to rank 0 (edges listed in both directions) */
    {
        int nnodes = t_size, index[4], edges[16], ne = 0;
        for (int v = 0; v < nnodes; v++) {
            int nb[3], k = 0;
            if (nnodes > 1) {
                nb[k++] = (v + 1) % nnodes;
                if (nnodes > 2)
                    nb[k++] = (v + nnodes - 1) % nnodes;
                if (v != 0 && (v + 1) % nnodes != 0 && (v + nnodes - 1) % nnodes != 0)
                    nb[k++] = 0;
                if (v == 0)
                    for (int w = 2; w < nnodes - 1; w++)
                        edges[ne++] = w; /* 0's links to the non-adjacent ranks */
            }
            for (int i = 0; i < k; i++)
                edges[ne++] = nb[i];
            index[v] = ne;
        }
        MPI_Comm graph;
        CHECK_MPI(MPI_Graph_create(MPI_COMM_WORLD, nnodes, index, edges, 0, &graph));
        CHECK_MPI(MPI_Topo_test(graph, &topo));
        CHECK_EQ(topo, MPI_GRAPH);
        int gn, gne;
        CHECK_MPI(MPI_Graphdims_get(graph, &gn, &gne));
        CHECK_EQ(gn, nnodes);
        CHECK_EQ(gne, ne);
        int gi[4], ge[16];
        CHECK_MPI(MPI_Graph_get(graph, 4, 16, gi, ge));
        CHECK(memcmp(gi, index, sizeof(int) * nnodes) == 0);
        CHECK(memcmp(ge, edges, sizeof(int) * ne) == 0);
        int rank, count, nbs[8];
        CHECK_MPI(MPI_Comm_rank(graph, &rank));
        CHECK_MPI(MPI_Graph_neighbors_count(graph, rank, &count));
        CHECK_MPI(MPI_Graph_neighbors(graph, rank, 8, nbs));
        printf("graph: %d nodes %d edges; rank %d neighbours:", gn, gne, rank);
        for (int i = 0; i < count; i++)
            printf(" %d", nbs[i]);
        printf("\n");
        /* every neighbour gets a message from us, and we get one from each */
        MPI_Request reqs[16];
        int in[8];
        for (int i = 0; i < count; i++) {
            CHECK_MPI(MPI_Irecv(&in[i], 1, MPI_INT, nbs[i], 3, graph, &reqs[i]));
            CHECK_MPI(MPI_Isend(&rank, 1, MPI_INT, nbs[i], 3, graph, &reqs[count + i]));
        }
        CHECK_MPI(MPI_Waitall(2 * count, reqs, MPI_STATUSES_IGNORE));
        for (int i = 0; i < count; i++)
            CHECK_EQ(in[i], nbs[i]);
        int newrank;
        CHECK_MPI(MPI_Graph_map(MPI_COMM_WORLD, nnodes, index, edges, &newrank));
        CHECK(newrank >= 0 && newrank < t_size);
        CHECK_MPI(MPI_Comm_free(&graph));
        t_ok("graph");
    }

    /* Dist_graph_create: every rank declares the edge (rank -> rank+1) and, on rank 0, also
     * (last -> 0) twice-removed edges; neighbour order is implementation-defined, so it is
     * printed sorted */
    {
        int sources[2], degrees[2], dests[4], nsrc = 0, nd = 0;
        sources[nsrc] = t_rank;
        degrees[nsrc] = 1;
        dests[nd++] = (t_rank + 1) % t_size;
        nsrc++;
        if (t_rank == 0 && t_size > 2) {
            sources[nsrc] = t_size - 1;
            degrees[nsrc] = 1;
            dests[nd++] = 1; /* an edge last -> 1, declared by rank 0 */
            nsrc++;
        }
        MPI_Comm dg;
        CHECK_MPI(MPI_Dist_graph_create(MPI_COMM_WORLD, nsrc, sources, degrees, dests,
                                        MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &dg));
        CHECK_MPI(MPI_Topo_test(dg, &topo));
        CHECK_EQ(topo, MPI_DIST_GRAPH);
        int indeg, outdeg, weighted;
        CHECK_MPI(MPI_Dist_graph_neighbors_count(dg, &indeg, &outdeg, &weighted));
        CHECK(!weighted);
        int ins[4], outs[4];
        CHECK_MPI(MPI_Dist_graph_neighbors(dg, 4, ins, MPI_UNWEIGHTED, 4, outs, MPI_UNWEIGHTED));
        qsort(ins, indeg, sizeof(int), cmp_int);
        qsort(outs, outdeg, sizeof(int), cmp_int);
        printf("dist_graph: in [");
        for (int i = 0; i < indeg; i++)
            printf("%s%d", i ? " " : "", ins[i]);
        printf("] out [");
        for (int i = 0; i < outdeg; i++)
            printf("%s%d", i ? " " : "", outs[i]);
        printf("]\n");
        CHECK_MPI(MPI_Comm_free(&dg));

        /* adjacent form: in from left, out to right, weighted */
        const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
        int w = 3;
        CHECK_MPI(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &left, &w, 1, &right, &w,
                                                 MPI_INFO_NULL, 1, &dg));
        int in1, out1, wt1, wout;
        CHECK_MPI(MPI_Dist_graph_neighbors(dg, 1, &in1, &wt1, 1, &out1, &wout));
        CHECK_EQ(in1, left);
        CHECK_EQ(out1, right);
        CHECK_EQ(wt1, 3);
        CHECK_MPI(MPI_Comm_free(&dg));
        t_ok("dist_graph");
    }

    return t_finish();
}
