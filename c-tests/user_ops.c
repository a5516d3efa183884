/* User-defined reduction operations: MPI_Op_create commutative and non-commutative (2x2
 * matrix product modulo a prime: the standard fixes the order of operands to rank order),
 * Op_commutative, ops on a derived datatype (the callback checks it is handed the very
 * datatype handle the program used), Reduce, Allreduce, Reduce_scatter_block, Scan, Exscan,
 * Iallreduce and Reduce_local with user ops, then Op_free.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"
#include <stddef.h>

#define P 1000003L

static MPI_Datatype mat_type; /* 4 longs: a 2x2 matrix, row-major */
static int mat_calls, pair_calls, bad_type;

/* inout = in * inout (MPI: the result of op(in, inout) is stored in inout, in comes first) */
static void mat_mul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    if (*dt != mat_type)
        bad_type = 1;
    long *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        long c[4] = {(a[0] * b[0] + a[1] * b[2]) % P, (a[0] * b[1] + a[1] * b[3]) % P,
                     (a[2] * b[0] + a[3] * b[2]) % P, (a[2] * b[1] + a[3] * b[3]) % P};
        memcpy(b, c, sizeof c);
    }
    mat_calls++;
}

struct pair {
    double sum;
    int count;
};
static MPI_Datatype pair_type;

/* commutative: sums both fields */
static void pair_add(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    if (*dt != pair_type)
        bad_type = 1;
    struct pair *a = in, *b = inout;
    for (int k = 0; k < *len; k++) {
        b[k].sum += a[k].sum;
        b[k].count += a[k].count;
    }
    pair_calls++;
}

/* commutative on a predefined type: keeps the value with the largest absolute value */
static void absmax(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    if (*dt != MPI_LONG)
        bad_type = 1;
    long *a = in, *b = inout;
    for (int k = 0; k < *len; k++) {
        long x = a[k] < 0 ? -a[k] : a[k], y = b[k] < 0 ? -b[k] : b[k];
        if (x > y || (x == y && a[k] > b[k]))
            b[k] = a[k];
    }
}

static void mat_of(int r, long m[4])
{
    /* distinct, non-commuting matrices */
    m[0] = r + 1;
    m[1] = 2 * r + 1;
    m[2] = r % 3;
    m[3] = 1;
}

static void mat_prod(long acc[4], const long m[4])
{
    long c[4] = {(acc[0] * m[0] + acc[1] * m[2]) % P, (acc[0] * m[1] + acc[1] * m[3]) % P,
                 (acc[2] * m[0] + acc[3] * m[2]) % P, (acc[2] * m[1] + acc[3] * m[3]) % P};
    memcpy(acc, c, sizeof c);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "user_ops");
    MPI_Op matop, pairop, absop;
    int commute;
    CHECK_MPI(MPI_Type_contiguous(4, MPI_LONG, &mat_type));
    CHECK_MPI(MPI_Type_commit(&mat_type));
    {
        int bl[2] = {1, 1};
        MPI_Aint d[2] = {offsetof(struct pair, sum), offsetof(struct pair, count)};
        MPI_Datatype t[2] = {MPI_DOUBLE, MPI_INT}, tmp;
        CHECK_MPI(MPI_Type_create_struct(2, bl, d, t, &tmp));
        CHECK_MPI(MPI_Type_create_resized(tmp, 0, sizeof(struct pair), &pair_type));
        CHECK_MPI(MPI_Type_free(&tmp));
        CHECK_MPI(MPI_Type_commit(&pair_type));
    }
    CHECK_MPI(MPI_Op_create(mat_mul, 0, &matop));
    CHECK_MPI(MPI_Op_create(pair_add, 1, &pairop));
    CHECK_MPI(MPI_Op_create(absmax, 1, &absop));
    CHECK_MPI(MPI_Op_commutative(matop, &commute));
    CHECK(!commute);
    CHECK_MPI(MPI_Op_commutative(pairop, &commute));
    CHECK(commute);
    CHECK_MPI(MPI_Op_commutative(MPI_SUM, &commute));
    CHECK(commute);

    /* expected products in rank order */
    long expect[4] = {1, 0, 0, 1}, prefix[4] = {1, 0, 0, 1}, exprefix[4] = {1, 0, 0, 1};
    for (int r = 0; r < t_size; r++) {
        long m[4];
        mat_of(r, m);
        if (r < t_rank)
            mat_prod(exprefix, m);
        if (r <= t_rank)
            mat_prod(prefix, m);
        mat_prod(expect, m);
    }

    /* non-commutative: Allreduce, Reduce to a non-zero root, Scan, Exscan, Iallreduce; two
     * matrices per call (the second one is the transpose-like variant) */
    {
        long mine[8], out[8];
        mat_of(t_rank, mine);
        mat_of(t_rank, mine + 4);
        CHECK_MPI(MPI_Allreduce(mine, out, 2, mat_type, matop, MPI_COMM_WORLD));
        CHECK(memcmp(out, expect, sizeof expect) == 0);
        CHECK(memcmp(out + 4, expect, sizeof expect) == 0);
        printf("ok allreduce matmul: [%ld %ld; %ld %ld]\n", out[0], out[1], out[2], out[3]);
        long red[4] = {0, 0, 0, 0};
        const int root = t_size - 1;
        CHECK_MPI(MPI_Reduce(mine, red, 1, mat_type, matop, root, MPI_COMM_WORLD));
        if (t_rank == root)
            CHECK(memcmp(red, expect, sizeof expect) == 0);
        CHECK_MPI(MPI_Scan(mine, out, 1, mat_type, matop, MPI_COMM_WORLD));
        CHECK(memcmp(out, prefix, sizeof prefix) == 0);
        printf("ok scan matmul: [%ld %ld; %ld %ld]\n", out[0], out[1], out[2], out[3]);
        CHECK_MPI(MPI_Exscan(mine, out, 1, mat_type, matop, MPI_COMM_WORLD));
        if (t_rank > 0)
            CHECK(memcmp(out, exprefix, sizeof exprefix) == 0);
        MPI_Request req;
        CHECK_MPI(MPI_Iallreduce(mine, out, 1, mat_type, matop, MPI_COMM_WORLD, &req));
        CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
        CHECK(memcmp(out, expect, sizeof expect) == 0);
        t_ok("reduce/exscan/iallreduce matmul");
    }

    /* commutative on a struct type: Allreduce and Reduce_scatter_block */
    {
        struct pair mine[8], out[8];
        for (int i = 0; i < 2 * t_size; i++) {
            mine[i].sum = t_rank * 0.5 + i;
            mine[i].count = 1;
        }
        CHECK_MPI(MPI_Allreduce(mine, out, 2, pair_type, pairop, MPI_COMM_WORLD));
        CHECK(out[0].sum == 0.25 * t_size * (t_size - 1));
        CHECK_EQ(out[1].count, t_size);
        struct pair blk[2];
        CHECK_MPI(MPI_Reduce_scatter_block(mine, blk, 2, pair_type, pairop, MPI_COMM_WORLD));
        CHECK(blk[1].sum == 0.25 * t_size * (t_size - 1) + t_size * (2.0 * t_rank + 1));
        CHECK_EQ(blk[0].count, t_size);
        printf("ok pair allreduce: sum %.2f count %d; block %.2f\n", out[0].sum, out[1].count,
               blk[1].sum);
    }

    /* commutative on MPI_LONG, in place */
    {
        long v[2] = {(t_rank % 2) ? -(long)t_rank * 10 : t_rank * 10, 3};
        CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_LONG, absop, MPI_COMM_WORLD));
        long want = (t_size - 1) * 10L * (((t_size - 1) % 2) ? -1 : 1);
        CHECK_EQ(v[0], want);
        CHECK_EQ(v[1], 3);
        printf("ok absmax %ld\n", v[0]);
    }

    /* Reduce_local: purely local application of an op, predefined and user-defined */
    {
        long a[4], b[4];
        mat_of(1, a);
        mat_of(2, b);
        CHECK_MPI(MPI_Reduce_local(a, b, 1, mat_type, matop)); /* b = a * b */
        long m1[4], m2[4], want[4] = {1, 0, 0, 1};
        mat_of(1, m1);
        mat_of(2, m2);
        mat_prod(want, m1);
        mat_prod(want, m2);
        CHECK(memcmp(b, want, sizeof want) == 0);
        int x[3] = {1, 2, 3}, y[3] = {10, 20, 30};
        CHECK_MPI(MPI_Reduce_local(x, y, 3, MPI_INT, MPI_SUM));
        CHECK(y[0] == 11 && y[1] == 22 && y[2] == 33);
        printf("ok reduce_local: [%ld %ld; %ld %ld], %d %d %d\n", b[0], b[1], b[2], b[3], y[0], y[1],
               y[2]);
    }

    CHECK(!bad_type);
    CHECK(mat_calls > 0);
    (void)pair_calls; /* how often the library calls an op is its own business */
    CHECK_MPI(MPI_Op_free(&matop));
    CHECK_MPI(MPI_Op_free(&pairop));
    CHECK_MPI(MPI_Op_free(&absop));
    CHECK(matop == MPI_OP_NULL);
    CHECK_MPI(MPI_Type_free(&mat_type));
    CHECK_MPI(MPI_Type_free(&pair_type));
    t_ok("ops freed; callbacks always saw the program's datatype handles");
    return t_finish();
}
