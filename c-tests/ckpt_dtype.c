/* Checkpoint workload: derived datatypes in use across a checkpoint. Made once at the start and
 * used every iteration in a ring exchange (MPI_Sendrecv to the right, from the left): a vector,
 * an indexed type and its MPI_Type_dup, a resized struct {int; double[2]; char} in a contiguous
 * type of 3, a subarray of a 2-D array, and an hvector of the vector. Each is sent typed and
 * received as plain elements (or the other way round), so both the type map and the data are
 * checked. Every 8th iteration a new hindexed type (displacements depend on the iteration) is
 * made, committed, used in a Bcast from a rotating root and freed; every 16th a struct array is
 * packed with MPI_Pack and unpacked by the receiver. A digest of everything received is printed
 * every twentieth of the run. And a user error class, code and string made at the start (with
 * MPI 4.1, one more class made and removed), which must still be the library's after the run:
 * a renewal makes them again with the same values. Argument: the iteration count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<iteration> (common.h).
 * mpicr-test: ranks=1,2,4 args=64 long-args=2000 long-args.4=200 ckpt-ranks=2,4 ckpt-pace.4=10000
 */
#include "common.h"
#include <stddef.h>

struct rec {
    int a;
    double b[2];
    char c;
};

static int ival(int rank, long it, int i)
{
    return (int)((rank + 1) * 10007 + it * 13 + i);
}

static void fill_rec(struct rec *r, int rank, long it, int k)
{
    memset(r, 0, sizeof *r);
    r->a = ival(rank, it, k);
    r->b[0] = rank + it * 0.5 + k;
    r->b[1] = -(double)k - it;
    r->c = (char)('a' + (rank + it + k) % 26);
}

static int rec_eq(const struct rec *x, const struct rec *y)
{
    return x->a == y->a && x->b[0] == y->b[0] && x->b[1] == y->b[1] && x->c == y->c;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_dtype");
    const long iters = t_arg_long(argc, argv, 1, 64);
    printf("iterations %ld\n", iters);
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    const long report = iters >= 20 ? iters / 20 : 1;

    /* vector: 4 blocks of 2 ints, stride 5 */
    MPI_Datatype vec;
    CHECK_MPI(MPI_Type_vector(4, 2, 5, MPI_INT, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));
    /* indexed: blocks of 1, 2, 3 doubles at 0, 3, 7; and a duplicate of it */
    int ibl[3] = {1, 2, 3}, idi[3] = {0, 3, 7};
    MPI_Datatype idx, idx_dup;
    CHECK_MPI(MPI_Type_indexed(3, ibl, idi, MPI_DOUBLE, &idx));
    CHECK_MPI(MPI_Type_commit(&idx));
    CHECK_MPI(MPI_Type_dup(idx, &idx_dup));
    /* struct rec, resized to its C size, then 3 of them */
    int sbl[3] = {1, 2, 1};
    MPI_Aint sdi[3] = {offsetof(struct rec, a), offsetof(struct rec, b), offsetof(struct rec, c)};
    MPI_Datatype sty[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR}, rec_raw, rec_t, rec3;
    CHECK_MPI(MPI_Type_create_struct(3, sbl, sdi, sty, &rec_raw));
    CHECK_MPI(MPI_Type_create_resized(rec_raw, 0, sizeof(struct rec), &rec_t));
    CHECK_MPI(MPI_Type_contiguous(3, rec_t, &rec3));
    CHECK_MPI(MPI_Type_commit(&rec_t));
    CHECK_MPI(MPI_Type_commit(&rec3));
    CHECK_MPI(MPI_Type_free(&rec_raw)); /* the derived types keep what they need */
    /* subarray: 3x4 block at (2,1) of an 8x8 array of shorts */
    int gsz[2] = {8, 8}, bsz[2] = {3, 4}, st0[2] = {2, 1};
    MPI_Datatype sub;
    CHECK_MPI(MPI_Type_create_subarray(2, gsz, bsz, st0, MPI_ORDER_C, MPI_SHORT, &sub));
    CHECK_MPI(MPI_Type_commit(&sub));
    /* hvector: 2 of the vector type, 100 ints apart */
    MPI_Datatype hv;
    CHECK_MPI(MPI_Type_create_hvector(2, 1, 100 * sizeof(int), vec, &hv));
    CHECK_MPI(MPI_Type_commit(&hv));
    int sz;
    CHECK_MPI(MPI_Type_size(hv, &sz));
    printf("types made; hvector size %d, rec size %d\n", sz, (int)sizeof(struct rec));

    /* user errors: replayed by every renewal, each class and code with its value */
    int uclass, ucode;
    static const char ustring[] = "ckpt_dtype's own error";
    CHECK_MPI(MPI_Add_error_class(&uclass));
    CHECK_MPI(MPI_Add_error_code(uclass, &ucode));
    CHECK_MPI(MPI_Add_error_string(ucode, ustring));
#if MPI_VERSION > 4 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
    {
        int gone;
        CHECK_MPI(MPI_Add_error_class(&gone));
        CHECK_MPI(MPI_Remove_error_class(gone));
    }
#endif

    uint64_t digest = 14695981039346656037ULL;
#define FOLD(p, n) (digest = (digest ^ t_fnv((p), (n))) * 1099511628211ULL)
    long made = 0, packed = 0;
    for (long it = 1; it <= iters; it++) {
        t_pause_point(MPI_COMM_WORLD, it); /* for checkpoint tests: see common.h */
        MPI_Status stt;

        /* vector out, 8 plain ints in */
        int vout[20], vin[8];
        for (int i = 0; i < 20; i++)
            vout[i] = ival(t_rank, it, i);
        CHECK_MPI(MPI_Sendrecv(vout, 1, vec, right, 1, vin, 8, MPI_INT, left, 1, MPI_COMM_WORLD, &stt));
        for (int blk = 0; blk < 4; blk++)
            for (int j = 0; j < 2; j++)
                CHECK_EQ(vin[blk * 2 + j], ival(left, it, blk * 5 + j));
        FOLD(vin, sizeof vin);

        /* 6 plain doubles out, indexed in (through the duplicate every other iteration) */
        double dout[6], din[10];
        for (int i = 0; i < 6; i++)
            dout[i] = t_rank * 100.0 + it + i * 0.25;
        for (int i = 0; i < 10; i++)
            din[i] = -1;
        CHECK_MPI(MPI_Sendrecv(dout, 6, MPI_DOUBLE, right, 2, din, 1, it % 2 ? idx : idx_dup, left, 2,
                               MPI_COMM_WORLD, &stt));
        const int at[6] = {0, 3, 4, 7, 8, 9};
        for (int i = 0; i < 6; i++)
            CHECK(din[at[i]] == left * 100.0 + it + i * 0.25);
        CHECK(din[1] == -1 && din[2] == -1 && din[5] == -1 && din[6] == -1);
        FOLD(din, sizeof din);

        /* 3 records as a contiguous-of-struct type, 3 single records in */
        struct rec rout[3], rin[3], want;
        for (int k = 0; k < 3; k++)
            fill_rec(&rout[k], t_rank, it, k);
        memset(rin, 0, sizeof rin);
        CHECK_MPI(MPI_Sendrecv(rout, 1, rec3, right, 3, rin, 3, rec_t, left, 3, MPI_COMM_WORLD, &stt));
        int n;
        CHECK_MPI(MPI_Get_count(&stt, rec_t, &n));
        CHECK_EQ(n, 3);
        for (int k = 0; k < 3; k++) {
            fill_rec(&want, left, it, k);
            CHECK(rec_eq(&rin[k], &want));
            FOLD(&rin[k].a, sizeof rin[k].a);
            FOLD(rin[k].b, sizeof rin[k].b);
        }

        /* subarray of an 8x8 array out, 12 plain shorts in */
        short grid[64], sin_[12];
        for (int i = 0; i < 64; i++)
            grid[i] = (short)(t_rank * 1000 + (it % 50) * 17 + i);
        CHECK_MPI(MPI_Sendrecv(grid, 1, sub, right, 4, sin_, 12, MPI_SHORT, left, 4, MPI_COMM_WORLD, &stt));
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                CHECK_EQ(sin_[i * 4 + j], (short)(left * 1000 + (it % 50) * 17 + (2 + i) * 8 + 1 + j));
        FOLD(sin_, sizeof sin_);

        /* 16 plain ints out, hvector in */
        int hout[16], hin[120];
        for (int i = 0; i < 16; i++)
            hout[i] = ival(t_rank, it, 40 + i);
        for (int i = 0; i < 120; i++)
            hin[i] = -7;
        CHECK_MPI(MPI_Sendrecv(hout, 16, MPI_INT, right, 5, hin, 1, hv, left, 5, MPI_COMM_WORLD, &stt));
        for (int c = 0, h = 0; h < 2; h++)
            for (int blk = 0; blk < 4; blk++)
                for (int j = 0; j < 2; j++, c++)
                    CHECK_EQ(hin[h * 100 + blk * 5 + j], ival(left, it, 40 + c));
        CHECK_EQ(hin[2], -7);
        FOLD(hin, sizeof hin);

        if (it % 8 == 0) { /* a short-lived type */
            int bl[3] = {1, 2, 1};
            MPI_Aint di[3] = {0, (MPI_Aint)((2 + it % 3) * sizeof(long)), (MPI_Aint)(7 * sizeof(long))};
            MPI_Datatype hi;
            CHECK_MPI(MPI_Type_create_hindexed(3, bl, di, MPI_LONG, &hi));
            CHECK_MPI(MPI_Type_commit(&hi));
            const int root = (int)((it / 8) % t_size);
            long buf[8];
            for (int i = 0; i < 8; i++)
                buf[i] = t_rank == root ? root * 1000L + it + i : -1;
            CHECK_MPI(MPI_Bcast(buf, 1, hi, root, MPI_COMM_WORLD));
            const int d = 2 + (int)(it % 3);
            for (int i = 0; i < 8; i++) {
                const int in_type = i == 0 || i == d || i == d + 1 || i == 7;
                CHECK_EQ(buf[i], in_type || t_rank == root ? root * 1000L + it + i : -1);
            }
            FOLD(buf, sizeof buf);
            CHECK_MPI(MPI_Type_free(&hi));
            made++;
        }
        if (it % 16 == 0) { /* Pack / Unpack of records */
            int psz;
            CHECK_MPI(MPI_Pack_size(3, rec_t, MPI_COMM_WORLD, &psz));
            char *pout = malloc(psz), *pin = malloc(psz);
            int pos = 0;
            CHECK_MPI(MPI_Pack(rout, 3, rec_t, pout, psz, &pos, MPI_COMM_WORLD));
            MPI_Status ps;
            CHECK_MPI(MPI_Sendrecv(pout, pos, MPI_PACKED, right, 6, pin, psz, MPI_PACKED, left, 6,
                                   MPI_COMM_WORLD, &ps));
            int got;
            CHECK_MPI(MPI_Get_count(&ps, MPI_PACKED, &got));
            struct rec un[3];
            memset(un, 0, sizeof un);
            int upos = 0;
            CHECK_MPI(MPI_Unpack(pin, got, &upos, un, 3, rec_t, MPI_COMM_WORLD));
            for (int k = 0; k < 3; k++) {
                fill_rec(&want, left, it, k);
                CHECK(rec_eq(&un[k], &want));
            }
            FOLD(&got, sizeof got);
            free(pout);
            free(pin);
            packed++;
        }
        if (it % report == 0 || it == iters)
            printf("iteration %ld digest %016llx\n", it, (unsigned long long)digest);
    }
    printf("short-lived types %ld, packed exchanges %ld\n", made, packed);
    {
        int cls, len;
        char text[MPI_MAX_ERROR_STRING];
        CHECK_MPI(MPI_Error_class(ucode, &cls));
        CHECK_EQ(cls, uclass);
        CHECK_MPI(MPI_Error_string(ucode, text, &len));
        CHECK_MSG(strcmp(text, ustring) == 0, "user error string: %s", text);
        printf("user error class, code and string kept\n");
    }
    CHECK_MPI(MPI_Type_free(&vec));
    CHECK_MPI(MPI_Type_free(&idx));
    CHECK_MPI(MPI_Type_free(&idx_dup));
    CHECK_MPI(MPI_Type_free(&rec_t));
    CHECK_MPI(MPI_Type_free(&rec3));
    CHECK_MPI(MPI_Type_free(&sub));
    CHECK_MPI(MPI_Type_free(&hv));
    return t_finish();
}
