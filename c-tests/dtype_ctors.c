/* Derived datatypes: contiguous, vector, hvector, indexed, hindexed, indexed_block,
 * hindexed_block, struct, subarray, darray, resized, dup; Type_size/get_extent/
 * get_true_extent, Type_get_envelope/get_contents (checked against the constructor's
 * arguments, recursively), Type_set_name/get_name, types built from derived types, and every
 * type used for a real message (sent to the right neighbour, compared element by element).
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"
#include <stddef.h>

static const char *combiner_name(int c)
{
    switch (c) {
    case MPI_COMBINER_NAMED: return "named";
    case MPI_COMBINER_DUP: return "dup";
    case MPI_COMBINER_CONTIGUOUS: return "contiguous";
    case MPI_COMBINER_VECTOR: return "vector";
    case MPI_COMBINER_HVECTOR: return "hvector";
    case MPI_COMBINER_INDEXED: return "indexed";
    case MPI_COMBINER_HINDEXED: return "hindexed";
    case MPI_COMBINER_INDEXED_BLOCK: return "indexed_block";
    case MPI_COMBINER_HINDEXED_BLOCK: return "hindexed_block";
    case MPI_COMBINER_STRUCT: return "struct";
    case MPI_COMBINER_SUBARRAY: return "subarray";
    case MPI_COMBINER_DARRAY: return "darray";
    case MPI_COMBINER_RESIZED: return "resized";
    }
    return "other";
}

/* Prints the constructor tree of a type: combiner and integer arguments, recursing into the
 * datatypes it was built from (freeing those that are not predefined, as required). */
static void describe(MPI_Datatype t, int depth)
{
    int ni, na, nd, comb;
    CHECK_MPI(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
    printf("%*s%s", 2 * depth, "", combiner_name(comb));
    if (comb == MPI_COMBINER_NAMED) {
        int size;
        MPI_Type_size(t, &size);
        printf(" (size %d)\n", size);
        return;
    }
    int *ints = malloc(sizeof(int) * (ni + 1));
    MPI_Aint *addrs = malloc(sizeof(MPI_Aint) * (na + 1));
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * (nd + 1));
    CHECK_MPI(MPI_Type_get_contents(t, ni, na, nd, ints, addrs, types));
    printf(" ints [");
    for (int i = 0; i < ni; i++)
        printf("%s%d", i ? " " : "", ints[i]);
    printf("] addrs [");
    for (int i = 0; i < na; i++)
        printf("%s%ld", i ? " " : "", (long)addrs[i]);
    printf("]\n");
    for (int i = 0; i < nd; i++) {
        describe(types[i], depth + 1);
        int ni2, na2, nd2, comb2;
        MPI_Type_get_envelope(types[i], &ni2, &na2, &nd2, &comb2);
        if (comb2 != MPI_COMBINER_NAMED)
            CHECK_MPI(MPI_Type_free(&types[i]));
    }
    free(ints);
    free(addrs);
    free(types);
}

/* Sends `count` of `t` from `sbuf` to the right neighbour and receives into `rbuf` from the
 * left; the buffers are `bytes` long. Returns a checksum of the received buffer. */
static unsigned long long ring(MPI_Datatype t, int count, void *sbuf, void *rbuf, size_t bytes)
{
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    memset(rbuf, 0, bytes);
    CHECK_MPI(MPI_Sendrecv(sbuf, count, t, right, 0, rbuf, count, t, left, 0, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    return (unsigned long long)t_fnv(rbuf, bytes);
}

static void sizes(const char *name, MPI_Datatype t)
{
    int size;
    MPI_Aint lb, extent, tlb, textent;
    CHECK_MPI(MPI_Type_size(t, &size));
    CHECK_MPI(MPI_Type_get_extent(t, &lb, &extent));
    CHECK_MPI(MPI_Type_get_true_extent(t, &tlb, &textent));
    printf("%s: size %d lb %ld extent %ld true_lb %ld true_extent %ld\n", name, size, (long)lb,
           (long)extent, (long)tlb, (long)textent);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "dtype_ctors");
    const int left = (t_rank + t_size - 1) % t_size;
    double dsend[64], drecv[64];
    int isend[64], irecv[64];
    for (int i = 0; i < 64; i++) {
        dsend[i] = t_rank * 100 + i;
        isend[i] = t_rank * 100 + i;
    }

    /* contiguous */
    MPI_Datatype contig;
    CHECK_MPI(MPI_Type_contiguous(5, MPI_DOUBLE, &contig));
    CHECK_MPI(MPI_Type_commit(&contig));
    sizes("contiguous", contig);
    ring(contig, 2, dsend, drecv, sizeof drecv);
    for (int i = 0; i < 10; i++)
        CHECK(drecv[i] == left * 100 + i);
    CHECK(drecv[10] == 0);

    /* vector: 4 blocks of 3 ints, stride 5 */
    MPI_Datatype vec;
    CHECK_MPI(MPI_Type_vector(4, 3, 5, MPI_INT, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));
    sizes("vector", vec);
    ring(vec, 1, isend, irecv, sizeof irecv);
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < 5; i++)
            CHECK_EQ(irecv[b * 5 + i], i < 3 ? left * 100 + b * 5 + i : 0);

    /* hvector: 3 blocks of 2 doubles, stride 40 bytes */
    MPI_Datatype hvec;
    CHECK_MPI(MPI_Type_create_hvector(3, 2, 40, MPI_DOUBLE, &hvec));
    CHECK_MPI(MPI_Type_commit(&hvec));
    sizes("hvector", hvec);
    printf("hvector ring checksum %016llx\n", ring(hvec, 1, dsend, drecv, sizeof drecv));
    CHECK(drecv[6] == left * 100 + 6 && drecv[7] == 0); /* blocks at doubles 0, 5, 10 */

    /* indexed: blocks (2 at 0), (1 at 7), (3 at 10) */
    int bl[3] = {2, 1, 3}, disp[3] = {0, 7, 10};
    MPI_Datatype idx;
    CHECK_MPI(MPI_Type_indexed(3, bl, disp, MPI_INT, &idx));
    CHECK_MPI(MPI_Type_commit(&idx));
    sizes("indexed", idx);
    ring(idx, 1, isend, irecv, sizeof irecv);
    CHECK_EQ(irecv[7], left * 100 + 7);
    CHECK_EQ(irecv[12], left * 100 + 12);
    CHECK_EQ(irecv[2], 0);

    /* hindexed of the vector type: two vectors, the second 200 bytes in */
    int hbl[2] = {1, 1};
    MPI_Aint hdisp[2] = {0, 200};
    MPI_Datatype hidx;
    CHECK_MPI(MPI_Type_create_hindexed(2, hbl, hdisp, vec, &hidx));
    CHECK_MPI(MPI_Type_commit(&hidx));
    sizes("hindexed(vector)", hidx);
    ring(hidx, 1, isend, irecv, sizeof irecv);
    CHECK_EQ(irecv[50], left * 100 + 50); /* 200 bytes = 50 ints */
    CHECK_EQ(irecv[53], 0);

    /* indexed_block and hindexed_block */
    int ibd[3] = {1, 4, 9};
    MPI_Aint hbd[3] = {8, 64, 128};
    MPI_Datatype iblk, hblk;
    CHECK_MPI(MPI_Type_create_indexed_block(3, 2, ibd, MPI_INT, &iblk));
    CHECK_MPI(MPI_Type_create_hindexed_block(3, 1, hbd, MPI_DOUBLE, &hblk));
    CHECK_MPI(MPI_Type_commit(&iblk));
    CHECK_MPI(MPI_Type_commit(&hblk));
    sizes("indexed_block", iblk);
    sizes("hindexed_block", hblk);
    ring(iblk, 1, isend, irecv, sizeof irecv);
    CHECK_EQ(irecv[10], left * 100 + 10);
    CHECK_EQ(irecv[11], 0);
    ring(hblk, 1, dsend, drecv, sizeof drecv);
    CHECK(drecv[16] == left * 100 + 16 && drecv[2] == 0);

    /* struct: {char c; double d[2]; int i;} with the real offsets */
    struct rec {
        char c;
        double d[2];
        int i;
    } rs[3], rr[3];
    int sbl[3] = {1, 2, 1};
    MPI_Aint sdisp[3] = {offsetof(struct rec, c), offsetof(struct rec, d), offsetof(struct rec, i)};
    MPI_Datatype stypes[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT}, srec, srec_r;
    CHECK_MPI(MPI_Type_create_struct(3, sbl, sdisp, stypes, &srec));
    /* resized to sizeof(struct rec) so that arrays of records work whatever the padding */
    CHECK_MPI(MPI_Type_create_resized(srec, 0, sizeof(struct rec), &srec_r));
    CHECK_MPI(MPI_Type_commit(&srec_r));
    sizes("struct", srec);
    sizes("resized(struct)", srec_r);
    for (int k = 0; k < 3; k++) {
        memset(&rs[k], 0, sizeof rs[k]);
        rs[k].c = (char)('a' + t_rank + k);
        rs[k].d[0] = t_rank + k * 0.5;
        rs[k].d[1] = -rs[k].d[0];
        rs[k].i = 1000 * t_rank + k;
    }
    ring(srec_r, 3, rs, rr, sizeof rr);
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(rr[k].c, 'a' + left + k);
        CHECK(rr[k].d[1] == -(left + k * 0.5));
        CHECK_EQ(rr[k].i, 1000 * left + k);
    }

    /* subarray: the 2x3 block at (1,2) of a 4x6 row-major int array */
    int gsz[2] = {4, 6}, ssz[2] = {2, 3}, st[2] = {1, 2};
    MPI_Datatype sub;
    CHECK_MPI(MPI_Type_create_subarray(2, gsz, ssz, st, MPI_ORDER_C, MPI_INT, &sub));
    CHECK_MPI(MPI_Type_commit(&sub));
    sizes("subarray", sub);
    ring(sub, 1, isend, irecv, sizeof irecv);
    CHECK_EQ(irecv[1 * 6 + 2], left * 100 + 8);
    CHECK_EQ(irecv[2 * 6 + 4], left * 100 + 16);
    CHECK_EQ(irecv[0], 0);

    /* darray: an 8x8 array block-distributed over a 2x2 process grid (as if 4 processes),
     * this rank's piece is that of process (t_rank % 4) */
    int dg[2] = {8, 8}, dd[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
    int da[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, dp[2] = {2, 2};
    MPI_Datatype dar;
    CHECK_MPI(MPI_Type_create_darray(4, t_rank % 4, 2, dg, dd, da, dp, MPI_ORDER_C, MPI_INT, &dar));
    CHECK_MPI(MPI_Type_commit(&dar));
    sizes("darray", dar);
    printf("darray ring checksum %016llx\n", ring(dar, 1, isend, irecv, sizeof irecv));

    /* dup */
    MPI_Datatype vdup;
    CHECK_MPI(MPI_Type_dup(vec, &vdup));
    sizes("dup(vector)", vdup);
    ring(vdup, 1, isend, irecv, sizeof irecv);
    CHECK_EQ(irecv[5], left * 100 + 5);

    /* names */
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    CHECK_MPI(MPI_Type_set_name(vdup, "my-vector"));
    CHECK_MPI(MPI_Type_get_name(vdup, name, &len));
    CHECK(strcmp(name, "my-vector") == 0);
    CHECK_MPI(MPI_Type_get_name(MPI_DOUBLE, name, &len));
    printf("names: my-vector, %s\n", name);

    /* envelope/contents trees */
    MPI_Datatype all[] = {contig, vec, hvec, idx, hidx, iblk, hblk, srec_r, sub, dar, vdup};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        describe(all[k], 0);

    /* free (an in-use-by-another-type type may be freed: hidx still works) */
    CHECK_MPI(MPI_Type_free(&vec));
    CHECK(vec == MPI_DATATYPE_NULL);
    ring(hidx, 1, isend, irecv, sizeof irecv);
    CHECK_EQ(irecv[50], left * 100 + 50);
    MPI_Datatype *frees[] = {&contig, &hvec, &idx, &hidx, &iblk, &hblk, &srec, &srec_r, &sub, &dar, &vdup};
    for (size_t k = 0; k < sizeof frees / sizeof frees[0]; k++)
        CHECK_MPI(MPI_Type_free(frees[k]));
    t_ok("all types freed");
    return t_finish();
}
