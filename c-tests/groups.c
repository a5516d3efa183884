/* Groups: Comm_group, Group_size/rank, incl, excl, range_incl, range_excl, union,
 * intersection, difference, translate_ranks (with MPI_PROC_NULL and MPI_UNDEFINED results),
 * compare (IDENT/SIMILAR/UNEQUAL), MPI_GROUP_EMPTY, Group_free, and a communicator made from
 * a computed group. Purely local except the last part, so every rank prints the same lines.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

static const char *cmp_name(int r)
{
    return r == MPI_IDENT ? "ident" : r == MPI_SIMILAR ? "similar" : r == MPI_UNEQUAL ? "unequal" : "?";
}

/* Prints a group as the world ranks of its members, in group order. */
static void show(const char *label, MPI_Group g, MPI_Group world)
{
    int n, r;
    CHECK_MPI(MPI_Group_size(g, &n));
    CHECK_MPI(MPI_Group_rank(g, &r));
    int *in = malloc(sizeof(int) * (n + 1)), *out = malloc(sizeof(int) * (n + 1));
    for (int i = 0; i < n; i++)
        in[i] = i;
    if (n > 0)
        CHECK_MPI(MPI_Group_translate_ranks(g, n, in, world, out));
    printf("%s: size %d, my rank ", label, n);
    if (r == MPI_UNDEFINED)
        printf("undefined");
    else
        printf("%d", r);
    printf(", members [");
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? " " : "", out[i]);
    printf("]\n");
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "groups");
    MPI_Group world, g;
    int res, n, r;
    CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
    CHECK_MPI(MPI_Group_size(world, &n));
    CHECK_MPI(MPI_Group_rank(world, &r));
    CHECK_EQ(n, t_size);
    CHECK_EQ(r, t_rank);
    show("world", world, world);

    /* incl: reversed order */
    int rev[4];
    for (int i = 0; i < t_size; i++)
        rev[i] = t_size - 1 - i;
    MPI_Group reversed;
    CHECK_MPI(MPI_Group_incl(world, t_size, rev, &reversed));
    show("incl reversed", reversed, world);
    CHECK_MPI(MPI_Group_compare(world, reversed, &res));
    printf("compare(world, reversed) = %s\n", cmp_name(res));

    /* excl rank 0 */
    int zero = 0;
    MPI_Group no0;
    CHECK_MPI(MPI_Group_excl(world, 1, &zero, &no0));
    show("excl 0", no0, world);

    /* range_incl: every second rank from the last down to 0 ("last, 0, -2") */
    int ranges[1][3] = {{t_size - 1, 0, -2}};
    MPI_Group strided;
    CHECK_MPI(MPI_Group_range_incl(world, 1, ranges, &strided));
    show("range_incl last..0 step -2", strided, world);

    /* range_excl: drop 0..n/2-1 */
    MPI_Group upper;
    if (t_size >= 2) {
        int er[1][3] = {{0, t_size / 2 - 1, 1}};
        CHECK_MPI(MPI_Group_range_excl(world, 1, er, &upper));
    } else {
        CHECK_MPI(MPI_Group_incl(world, 1, &zero, &upper));
    }
    show("range_excl lower half", upper, world);

    /* set operations */
    CHECK_MPI(MPI_Group_union(strided, no0, &g));
    show("union(strided, excl 0)", g, world);
    CHECK_MPI(MPI_Group_free(&g));
    CHECK_MPI(MPI_Group_intersection(strided, no0, &g));
    show("intersection(strided, excl 0)", g, world);
    CHECK_MPI(MPI_Group_free(&g));
    CHECK_MPI(MPI_Group_difference(world, strided, &g));
    show("difference(world, strided)", g, world);
    CHECK_MPI(MPI_Group_free(&g));
    CHECK_MPI(MPI_Group_difference(strided, world, &g));
    CHECK_MPI(MPI_Group_compare(g, MPI_GROUP_EMPTY, &res));
    CHECK_EQ(res, MPI_IDENT);
    CHECK_MPI(MPI_Group_size(g, &n));
    CHECK_EQ(n, 0);
    printf("difference(strided, world) is empty: %s\n", cmp_name(res));
    if (g != MPI_GROUP_EMPTY)
        CHECK_MPI(MPI_Group_free(&g));

    /* translate_ranks: world -> reversed, and into a group that lacks some ranks; a
     * MPI_PROC_NULL input stays MPI_PROC_NULL */
    {
        int in[5], out[5];
        for (int i = 0; i < t_size; i++)
            in[i] = i;
        in[t_size] = MPI_PROC_NULL;
        CHECK_MPI(MPI_Group_translate_ranks(world, t_size + 1, in, reversed, out));
        printf("translate world->reversed:");
        for (int i = 0; i <= t_size; i++) {
            if (out[i] == MPI_PROC_NULL)
                printf(" procnull");
            else
                printf(" %d", out[i]);
        }
        printf("\n");
        for (int i = 0; i < t_size; i++)
            CHECK_EQ(out[i], t_size - 1 - i);
        CHECK_EQ(out[t_size], MPI_PROC_NULL);
        CHECK_MPI(MPI_Group_translate_ranks(world, t_size, in, no0, out));
        printf("translate world->excl 0:");
        for (int i = 0; i < t_size; i++) {
            if (out[i] == MPI_UNDEFINED)
                printf(" undefined");
            else
                printf(" %d", out[i]);
        }
        printf("\n");
    }

    /* compare: ident with itself, similar with the same members reordered, unequal */
    CHECK_MPI(MPI_Group_compare(world, world, &res));
    CHECK_EQ(res, MPI_IDENT);
    CHECK_MPI(MPI_Group_compare(no0, world, &res));
    printf("compare(excl 0, world) = %s\n", cmp_name(res));

    /* a communicator of the strided group, reached by Comm_create; a message around it */
    {
        MPI_Comm c;
        CHECK_MPI(MPI_Comm_create(MPI_COMM_WORLD, strided, &c));
        if (c != MPI_COMM_NULL) {
            MPI_Group cg;
            CHECK_MPI(MPI_Comm_group(c, &cg));
            CHECK_MPI(MPI_Group_compare(cg, strided, &res));
            CHECK_EQ(res, MPI_IDENT);
            CHECK_MPI(MPI_Group_free(&cg));
            int cr, cn, got;
            MPI_Comm_rank(c, &cr);
            MPI_Comm_size(c, &cn);
            CHECK_MPI(MPI_Sendrecv(&t_rank, 1, MPI_INT, (cr + 1) % cn, 0, &got, 1, MPI_INT,
                                   (cr + cn - 1) % cn, 0, c, MPI_STATUS_IGNORE));
            printf("ok strided comm: rank %d of %d got world rank %d\n", cr, cn, got);
            CHECK_MPI(MPI_Comm_free(&c));
        } else {
            printf("strided comm: not a member\n");
        }
    }

    CHECK_MPI(MPI_Group_free(&upper));
    CHECK(upper == MPI_GROUP_NULL);
    CHECK_MPI(MPI_Group_free(&strided));
    CHECK_MPI(MPI_Group_free(&no0));
    CHECK_MPI(MPI_Group_free(&reversed));
    CHECK_MPI(MPI_Group_free(&world));
    return t_finish();
}
