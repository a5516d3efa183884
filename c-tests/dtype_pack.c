/* Packing and addresses: Pack/Unpack of mixed data into one buffer with a running position,
 * Pack_size, sending MPI_PACKED and unpacking on the other side, Pack_external/
 * Unpack_external/Pack_external_size ("external32": big-endian, checked byte by byte),
 * Get_address + a struct type with absolute addresses sent from MPI_BOTTOM, Get_elements on
 * a partially filled derived type, and Type_match_size.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "dtype_pack");
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;

    /* Pack an int count, that many doubles, a vector-typed section of an int array and a
     * string; send as MPI_PACKED; the receiver unpacks in the same order. */
    {
        int n = 3 + t_rank;
        double d[8];
        int grid[20];
        char word[8] = "mpicr-0";
        word[6] = (char)('0' + t_rank);
        for (int i = 0; i < 8; i++)
            d[i] = t_rank + i / 4.0;
        for (int i = 0; i < 20; i++)
            grid[i] = 10 * t_rank + i;
        MPI_Datatype col; /* column 1 of a 5x4 row-major array */
        CHECK_MPI(MPI_Type_vector(5, 1, 4, MPI_INT, &col));
        CHECK_MPI(MPI_Type_commit(&col));

        int s1, s2, s3, s4;
        CHECK_MPI(MPI_Pack_size(1, MPI_INT, MPI_COMM_WORLD, &s1));
        CHECK_MPI(MPI_Pack_size(8, MPI_DOUBLE, MPI_COMM_WORLD, &s2));
        CHECK_MPI(MPI_Pack_size(1, col, MPI_COMM_WORLD, &s3));
        CHECK_MPI(MPI_Pack_size(8, MPI_CHAR, MPI_COMM_WORLD, &s4));
        const int cap = s1 + s2 + s3 + s4;
        char *buf = malloc(cap), *rbuf = malloc(cap);
        int pos = 0;
        CHECK_MPI(MPI_Pack(&n, 1, MPI_INT, buf, cap, &pos, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Pack(d, n, MPI_DOUBLE, buf, cap, &pos, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Pack(grid + 1, 1, col, buf, cap, &pos, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Pack(word, 8, MPI_CHAR, buf, cap, &pos, MPI_COMM_WORLD));
        CHECK(pos <= cap);

        MPI_Status st;
        CHECK_MPI(MPI_Sendrecv(buf, pos, MPI_PACKED, right, 1, rbuf, cap, MPI_PACKED, left, 1,
                               MPI_COMM_WORLD, &st));
        int got_bytes;
        CHECK_MPI(MPI_Get_count(&st, MPI_PACKED, &got_bytes));
        int rpos = 0, rn;
        double rd[8];
        int rcol[20];
        char rword[8];
        memset(rcol, 0, sizeof rcol);
        CHECK_MPI(MPI_Unpack(rbuf, got_bytes, &rpos, &rn, 1, MPI_INT, MPI_COMM_WORLD));
        CHECK_EQ(rn, 3 + left);
        CHECK_MPI(MPI_Unpack(rbuf, got_bytes, &rpos, rd, rn, MPI_DOUBLE, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Unpack(rbuf, got_bytes, &rpos, rcol, 1, col, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Unpack(rbuf, got_bytes, &rpos, rword, 8, MPI_CHAR, MPI_COMM_WORLD));
        CHECK_EQ(rpos, got_bytes);
        for (int i = 0; i < rn; i++)
            CHECK(rd[i] == left + i / 4.0);
        for (int r = 0; r < 5; r++)
            CHECK_EQ(rcol[4 * r], 10 * left + 4 * r + 1);
        CHECK(strncmp(rword, "mpicr-", 6) == 0 && rword[6] == '0' + left);
        printf("ok packed: %d doubles, column %d..%d, word %s\n", rn, rcol[0], rcol[16], rword);
        free(buf);
        free(rbuf);
        CHECK_MPI(MPI_Type_free(&col));
    }

    /* external32: big-endian, fixed sizes, so the bytes are known exactly */
    {
        int iv[2] = {0x01020304, -2};
        double dv = 1.0;
        MPI_Aint need, pos = 0, rpos = 0;
        CHECK_MPI(MPI_Pack_external_size("external32", 2, MPI_INT, &need));
        CHECK_EQ(need, 8);
        unsigned char ext[16];
        CHECK_MPI(MPI_Pack_external("external32", iv, 2, MPI_INT, ext, sizeof ext, &pos));
        CHECK_MPI(MPI_Pack_external("external32", &dv, 1, MPI_DOUBLE, ext, sizeof ext, &pos));
        CHECK_EQ(pos, 16);
        printf("external32 bytes:");
        for (int i = 0; i < 16; i++)
            printf(" %02x", ext[i]);
        printf("\n");
        CHECK(ext[0] == 1 && ext[3] == 4 && ext[4] == 0xff && ext[7] == 0xfe && ext[8] == 0x3f &&
              ext[9] == 0xf0);
        int biv[2];
        double bdv;
        CHECK_MPI(MPI_Unpack_external("external32", ext, 16, &rpos, biv, 2, MPI_INT));
        CHECK_MPI(MPI_Unpack_external("external32", ext, 16, &rpos, &bdv, 1, MPI_DOUBLE));
        CHECK(biv[0] == iv[0] && biv[1] == iv[1] && bdv == dv);
        t_ok("external32 round trip");
    }

    /* absolute addresses: a struct type over three separate variables, sent from MPI_BOTTOM */
    {
        static int a;
        static double b[2];
        static short c;
        a = 7 + t_rank;
        b[0] = t_rank * 1.5;
        b[1] = -1;
        c = (short)(t_rank - 5);
        MPI_Aint addr[3];
        CHECK_MPI(MPI_Get_address(&a, &addr[0]));
        CHECK_MPI(MPI_Get_address(b, &addr[1]));
        CHECK_MPI(MPI_Get_address(&c, &addr[2]));
        int bl[3] = {1, 2, 1};
        MPI_Datatype ty[3] = {MPI_INT, MPI_DOUBLE, MPI_SHORT}, abs_t;
        CHECK_MPI(MPI_Type_create_struct(3, bl, addr, ty, &abs_t));
        CHECK_MPI(MPI_Type_commit(&abs_t));
        /* received as MPI_PACKED (which matches any type signature), then unpacked */
        int pos = 0;
        char pk[64];
        MPI_Status st;
        CHECK_MPI(MPI_Sendrecv(MPI_BOTTOM, 1, abs_t, right, 2, pk, sizeof pk, MPI_PACKED, left, 2,
                               MPI_COMM_WORLD, &st));
        int nbytes;
        CHECK_MPI(MPI_Get_count(&st, MPI_PACKED, &nbytes));
        int ra;
        double rb[2];
        short rc;
        CHECK_MPI(MPI_Unpack(pk, nbytes, &pos, &ra, 1, MPI_INT, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Unpack(pk, nbytes, &pos, rb, 2, MPI_DOUBLE, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Unpack(pk, nbytes, &pos, &rc, 1, MPI_SHORT, MPI_COMM_WORLD));
        CHECK_EQ(ra, 7 + left);
        CHECK(rb[0] == left * 1.5 && rb[1] == -1);
        CHECK_EQ(rc, left - 5);
        /* and the other way round: receive into the variables through MPI_BOTTOM */
        a = 0;
        b[0] = b[1] = 0;
        c = 0;
        int sa = 1000 + t_rank;
        double sb[2] = {2.5, 3.5};
        short sc = 12;
        pos = 0;
        CHECK_MPI(MPI_Pack(&sa, 1, MPI_INT, pk, sizeof pk, &pos, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Pack(sb, 2, MPI_DOUBLE, pk, sizeof pk, &pos, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Pack(&sc, 1, MPI_SHORT, pk, sizeof pk, &pos, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Sendrecv(pk, pos, MPI_PACKED, right, 3, MPI_BOTTOM, 1, abs_t, left, 3,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_EQ(a, 1000 + left);
        CHECK(b[0] == 2.5 && b[1] == 3.5);
        CHECK_EQ(c, 12);
        CHECK_MPI(MPI_Type_free(&abs_t));
        t_ok("mpi_bottom struct: got %d %.1f %d, then %d", ra, rb[0], rc, a);
    }

    /* Get_elements/Get_count on a partially filled derived type: 7 ints into 3 x (2 ints) */
    {
        MPI_Datatype pair;
        CHECK_MPI(MPI_Type_contiguous(2, MPI_INT, &pair));
        CHECK_MPI(MPI_Type_commit(&pair));
        int s[7] = {1, 2, 3, 4, 5, 6, 7}, r[8] = {0};
        MPI_Status st;
        CHECK_MPI(MPI_Sendrecv(s, 7, MPI_INT, t_rank, 4, r, 4, pair, t_rank, 4, MPI_COMM_WORLD, &st));
        int count, elems;
        MPI_Count elems_x;
        CHECK_MPI(MPI_Get_count(&st, pair, &count));
        CHECK_MPI(MPI_Get_elements(&st, pair, &elems));
        CHECK_MPI(MPI_Get_elements_x(&st, pair, &elems_x));
        CHECK_EQ(count, MPI_UNDEFINED);
        CHECK_EQ(elems, 7);
        CHECK_EQ(elems_x, 7);
        CHECK_EQ(r[6], 7);
        CHECK_EQ(r[7], 0);
        CHECK_MPI(MPI_Type_free(&pair));
        t_ok("get_elements %d of a partial pair type", elems);
    }

    /* Type_match_size: the predefined type of a given size */
    {
        MPI_Datatype t;
        int size;
        CHECK_MPI(MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &t));
        CHECK_MPI(MPI_Type_size(t, &size));
        CHECK_EQ(size, 8);
        CHECK_MPI(MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 4, &t));
        CHECK_MPI(MPI_Type_size(t, &size));
        CHECK_EQ(size, 4);
        t_ok("type_match_size");
    }

    return t_finish();
}
