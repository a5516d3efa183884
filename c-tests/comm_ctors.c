/* Communicator constructors: Comm_dup, Comm_dup_with_info, Comm_idup, Comm_split (with
 * MPI_UNDEFINED and key ordering), Comm_split_type (MPI_COMM_TYPE_SHARED), Comm_create,
 * Comm_create_group (only the members call it), Comm_compare for IDENT/CONGRUENT/SIMILAR/
 * UNEQUAL, names (Comm_set_name/get_name, predefined names), Comm_test_inter, info hints
 * (Comm_set_info/get_info for a user key), and traffic on every new communicator to show it
 * works and is isolated from its parent. Several generations deep: a dup of a split of a dup.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

static const char *cmp_name(int r)
{
    switch (r) {
    case MPI_IDENT:
        return "ident";
    case MPI_CONGRUENT:
        return "congruent";
    case MPI_SIMILAR:
        return "similar";
    case MPI_UNEQUAL:
        return "unequal";
    }
    return "?";
}

/* Allreduce of the world ranks of the members: identifies a communicator's membership. */
static int members_sum(MPI_Comm c)
{
    int s;
    CHECK_MPI(MPI_Allreduce(&t_rank, &s, 1, MPI_INT, MPI_SUM, c));
    return s;
}

/* A ring message on c, tag 0, to show point-to-point works on it. */
static int ring_ok(MPI_Comm c)
{
    int r, n, got = -1;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &n);
    CHECK_MPI(MPI_Sendrecv(&r, 1, MPI_INT, (r + 1) % n, 0, &got, 1, MPI_INT, (r + n - 1) % n, 0, c,
                           MPI_STATUS_IGNORE));
    CHECK_EQ(got, (r + n - 1) % n);
    return got;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "comm_ctors");
    int res;
    char name[MPI_MAX_OBJECT_NAME];
    int len;

    CHECK_MPI(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    printf("world name: %s\n", name);
    CHECK_MPI(MPI_Comm_get_name(MPI_COMM_SELF, name, &len));
    printf("self name: %s\n", name);

    /* dup: congruent, named independently, isolated: a message sent on the dup before one on
     * world is still received second on world */
    MPI_Comm dup;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    CHECK_MPI(MPI_Comm_compare(MPI_COMM_WORLD, dup, &res));
    printf("compare(world, dup) = %s\n", cmp_name(res));
    CHECK_MPI(MPI_Comm_compare(dup, dup, &res));
    CHECK_EQ(res, MPI_IDENT);
    CHECK_MPI(MPI_Comm_set_name(dup, "my-dup"));
    CHECK_MPI(MPI_Comm_get_name(dup, name, &len));
    CHECK(strcmp(name, "my-dup") == 0);
    CHECK_EQ(len, 6);
    {
        int a = 1, b = 2, x, y;
        MPI_Request s[2];
        CHECK_MPI(MPI_Isend(&a, 1, MPI_INT, t_rank, 0, dup, &s[0]));
        CHECK_MPI(MPI_Isend(&b, 1, MPI_INT, t_rank, 0, MPI_COMM_WORLD, &s[1]));
        CHECK_MPI(MPI_Recv(&x, 1, MPI_INT, t_rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Recv(&y, 1, MPI_INT, t_rank, 0, dup, MPI_STATUS_IGNORE));
        CHECK_EQ(x, 2);
        CHECK_EQ(y, 1);
        CHECK_MPI(MPI_Waitall(2, s, MPI_STATUSES_IGNORE));
    }
    t_ok("dup named %s, ring %d", name, ring_ok(dup));

    /* dup_with_info carrying a user hint; the hint may or may not be kept, so only its
     * presence and value, if present, are checked */
    {
        MPI_Info info;
        CHECK_MPI(MPI_Info_create(&info));
        CHECK_MPI(MPI_Info_set(info, "mpicr_test_hint", "42"));
        MPI_Comm d2;
        CHECK_MPI(MPI_Comm_dup_with_info(dup, info, &d2));
        CHECK_MPI(MPI_Info_free(&info));
        CHECK_MPI(MPI_Comm_compare(dup, d2, &res));
        CHECK_EQ(res, MPI_CONGRUENT);
        CHECK_MPI(MPI_Comm_get_name(d2, name, &len));
        CHECK_EQ(len, 0); /* names are not inherited */
        MPI_Info got;
        CHECK_MPI(MPI_Comm_get_info(d2, &got));
        char val[16];
        int flag;
        CHECK_MPI(MPI_Info_get(got, "mpicr_test_hint", sizeof val - 1, val, &flag));
        if (flag)
            CHECK(strcmp(val, "42") == 0);
        CHECK_MPI(MPI_Info_free(&got));
        t_ok("dup_with_info, sum %d", members_sum(d2));
        CHECK_MPI(MPI_Comm_free(&d2));
        CHECK(d2 == MPI_COMM_NULL);
    }

    /* idup: usable once the request completes; two in flight at once */
    {
        MPI_Comm i1, i2;
        MPI_Request r[2];
        CHECK_MPI(MPI_Comm_idup(MPI_COMM_WORLD, &i1, &r[0]));
        CHECK_MPI(MPI_Comm_idup(dup, &i2, &r[1]));
        CHECK_MPI(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        CHECK_MPI(MPI_Comm_compare(i1, i2, &res));
        CHECK_EQ(res, MPI_CONGRUENT);
        t_ok("idup x2, rings %d %d", ring_ok(i1), ring_ok(i2));
        CHECK_MPI(MPI_Comm_free(&i1));
        CHECK_MPI(MPI_Comm_free(&i2));
    }

    /* split: color = rank % 2, key reverses the order; rank 3 opts out with MPI_UNDEFINED */
    {
        const int color = (t_rank == 3) ? MPI_UNDEFINED : t_rank % 2;
        MPI_Comm s;
        CHECK_MPI(MPI_Comm_split(dup, color, t_size - t_rank, &s));
        if (color == MPI_UNDEFINED) {
            CHECK(s == MPI_COMM_NULL);
            printf("split: not a member\n");
        } else {
            int r, n;
            MPI_Comm_rank(s, &r);
            MPI_Comm_size(s, &n);
            CHECK_MPI(MPI_Comm_compare(dup, s, &res));
            printf("split color %d: rank %d of %d, compare(dup, split) = %s, sum %d\n", color, r,
                   n, cmp_name(res), members_sum(s));
            /* a second generation: dup of the split, then a split of that */
            MPI_Comm sd, ss;
            CHECK_MPI(MPI_Comm_dup(s, &sd));
            CHECK_MPI(MPI_Comm_split(sd, 0, r, &ss));
            CHECK_MPI(MPI_Comm_compare(s, ss, &res));
            CHECK_EQ(res, MPI_CONGRUENT);
            t_ok("split of dup of split: ring %d", ring_ok(ss));
            CHECK_MPI(MPI_Comm_free(&ss));
            CHECK_MPI(MPI_Comm_free(&sd));
            CHECK_MPI(MPI_Comm_free(&s));
        }
    }

    /* split_type SHARED: all ranks share a node here; the result is congruent with world */
    {
        MPI_Comm node;
        CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
        int n;
        MPI_Comm_size(node, &n);
        CHECK_MPI(MPI_Comm_compare(MPI_COMM_WORLD, node, &res));
        printf("split_type shared: size %d, compare(world, node) = %s\n", n, cmp_name(res));
        MPI_Comm none;
        CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_UNDEFINED, 0, MPI_INFO_NULL, &none));
        CHECK(none == MPI_COMM_NULL);
        CHECK_MPI(MPI_Comm_free(&node));
    }

    /* create from a group: the upper half of the ranks, in reverse order; everyone calls it */
    {
        MPI_Group world_g, upper;
        CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world_g));
        const int n = (t_size + 1) / 2;
        int ranks[4];
        for (int i = 0; i < n; i++)
            ranks[i] = t_size - 1 - i;
        CHECK_MPI(MPI_Group_incl(world_g, n, ranks, &upper));
        MPI_Comm c;
        CHECK_MPI(MPI_Comm_create(MPI_COMM_WORLD, upper, &c));
        if (c == MPI_COMM_NULL) {
            printf("create: not a member\n");
        } else {
            int r;
            MPI_Comm_rank(c, &r);
            CHECK_EQ(r, t_size - 1 - t_rank);
            CHECK_MPI(MPI_Comm_compare(MPI_COMM_WORLD, c, &res));
            printf("create: rank %d, compare(world, c) = %s, sum %d\n", r, cmp_name(res),
                   members_sum(c));
            CHECK_MPI(MPI_Comm_free(&c));
        }
        /* the empty group gives MPI_COMM_NULL everywhere */
        CHECK_MPI(MPI_Comm_create(MPI_COMM_WORLD, MPI_GROUP_EMPTY, &c));
        CHECK(c == MPI_COMM_NULL);

        /* create_group: collective over the group only; non-members do not call it */
        int member = 0;
        for (int i = 0; i < n; i++)
            member |= (ranks[i] == t_rank);
        if (member) {
            CHECK_MPI(MPI_Comm_create_group(MPI_COMM_WORLD, upper, 17, &c));
            int r;
            MPI_Comm_rank(c, &r);
            t_ok("create_group: rank %d, ring %d, sum %d", r, ring_ok(c), members_sum(c));
            CHECK_MPI(MPI_Comm_free(&c));
        } else {
            printf("create_group: not a member\n");
        }
        CHECK_MPI(MPI_Group_free(&upper));
        CHECK_MPI(MPI_Group_free(&world_g));
    }

    /* compare: SELF vs WORLD (unequal unless 1 rank, where they are congruent) */
    CHECK_MPI(MPI_Comm_compare(MPI_COMM_SELF, MPI_COMM_WORLD, &res));
    printf("compare(self, world) = %s\n", cmp_name(res));
    /* similar: same members, different order */
    {
        MPI_Comm rev;
        CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, -t_rank, &rev));
        CHECK_MPI(MPI_Comm_compare(MPI_COMM_WORLD, rev, &res));
        printf("compare(world, reversed) = %s\n", cmp_name(res));
        int inter;
        CHECK_MPI(MPI_Comm_test_inter(rev, &inter));
        CHECK(!inter);
        CHECK_MPI(MPI_Comm_free(&rev));
    }

    /* many communicators alive at once, freed in creation order */
    {
        enum { K = 16 };
        MPI_Comm cs[K];
        for (int k = 0; k < K; k++)
            CHECK_MPI(MPI_Comm_dup(k == 0 ? MPI_COMM_WORLD : cs[k - 1], &cs[k]));
        int sum = 0;
        for (int k = 0; k < K; k++)
            sum += members_sum(cs[K - 1 - k]);
        for (int k = 0; k < K; k++)
            CHECK_MPI(MPI_Comm_free(&cs[k]));
        t_ok("%d chained dups, sum %d", K, sum);
    }

    CHECK_MPI(MPI_Comm_free(&dup));
    return t_finish();
}
