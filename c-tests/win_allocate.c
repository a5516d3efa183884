/* MPI_Win_allocate windows only (no MPI_Win_create, which Debian's Open MPI 4.1.4 refuses at
 * 1 rank here while it serves MPI_Win_allocate there with its osc/sm component): fence epochs
 * with Put, Get and Accumulate between neighbours (to oneself at 1 rank), a zero-byte window,
 * a window on MPI_COMM_SELF, the window's attributes (flavor, base, size, displacement unit),
 * Win_get_group, Win_set_name/get_name, and the program's stores into its base read by others.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

#define N 8

static void attrs(MPI_Win w, void *base, MPI_Aint size, int du)
{
    int flag = 0, *flavor = NULL, *disp = NULL;
    void *b = NULL;
    MPI_Aint *sz = NULL;
    CHECK_MPI(MPI_Win_get_attr(w, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag);
    printf("flavor is MPI_WIN_FLAVOR_ALLOCATE: %s\n", *flavor == MPI_WIN_FLAVOR_ALLOCATE ? "yes" : "no");
    CHECK_MPI(MPI_Win_get_attr(w, MPI_WIN_BASE, &b, &flag));
    CHECK(flag);
    printf("MPI_WIN_BASE is the base given: %s\n", (size == 0 || b == base) ? "yes" : "no");
    CHECK_MPI(MPI_Win_get_attr(w, MPI_WIN_SIZE, &sz, &flag));
    CHECK(flag);
    CHECK_MPI(MPI_Win_get_attr(w, MPI_WIN_DISP_UNIT, &disp, &flag));
    CHECK(flag);
    printf("MPI_WIN_SIZE %ld, MPI_WIN_DISP_UNIT %d\n", (long)*sz, *disp);
    CHECK_EQ((long)*sz, (long)size);
    CHECK_EQ(*disp, du);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "win_allocate");
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    MPI_Win w;
    long *mem = NULL;
    int rc = MPI_Win_allocate(N * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &w);
    CHECK_MPI(rc);
    CHECK(mem != NULL);
    attrs(w, mem, N * sizeof(long), sizeof(long));
    for (int i = 0; i < N; i++)
        mem[i] = 1000 * t_rank + i;
    CHECK_MPI(MPI_Win_set_name(w, "mpicr allocated"));
    {
        char name[MPI_MAX_OBJECT_NAME];
        int len;
        CHECK_MPI(MPI_Win_get_name(w, name, &len));
        printf("name: %s\n", name);
        MPI_Group g, wg;
        int cmp;
        CHECK_MPI(MPI_Win_get_group(w, &g));
        CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
        CHECK_MPI(MPI_Group_compare(g, wg, &cmp));
        printf("group is the world's: %s\n", cmp == MPI_IDENT ? "yes" : "no");
        CHECK_MPI(MPI_Group_free(&g));
        CHECK_MPI(MPI_Group_free(&wg));
    }

    /* the program's stores, read by the left neighbour; then a Put into the right one */
    long got[N], v[2] = {7 + t_rank, 70 + t_rank};
    CHECK_MPI(MPI_Win_fence(0, w));
    CHECK_MPI(MPI_Get(got, N, MPI_LONG, right, 0, N, MPI_LONG, w));
    CHECK_MPI(MPI_Win_fence(0, w));
    for (int i = 0; i < N; i++)
        CHECK_EQ(got[i], 1000L * right + i);
    CHECK_MPI(MPI_Put(v, 2, MPI_LONG, right, 2, 2, MPI_LONG, w));
    CHECK_MPI(MPI_Win_fence(0, w));
    CHECK_EQ(mem[2], 7L + left);
    CHECK_EQ(mem[3], 70L + left);
    /* every rank adds into rank 0's first word */
    long one = t_rank + 1;
    CHECK_MPI(MPI_Accumulate(&one, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, w));
    CHECK_MPI(MPI_Win_fence(MPI_MODE_NOSUCCEED, w));
    if (t_rank == 0)
        printf("sum at rank 0: %ld\n", mem[0]);
    long sum = 0;
    for (int i = 0; i < N; i++)
        sum += mem[i];
    printf("checksum of my window: %ld\n", sum);
    CHECK_MPI(MPI_Win_free(&w));
    CHECK(w == MPI_WIN_NULL);

    /* zero bytes, and a window of one process */
    void *zero = NULL;
    CHECK_MPI(MPI_Win_allocate(0, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &zero, &w));
    attrs(w, zero, 0, 1);
    CHECK_MPI(MPI_Win_fence(0, w));
    CHECK_MPI(MPI_Win_fence(0, w));
    CHECK_MPI(MPI_Win_free(&w));
    int *self = NULL;
    CHECK_MPI(MPI_Win_allocate(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_SELF, &self, &w));
    attrs(w, self, 4 * sizeof(int), sizeof(int));
    int four[4] = {1, 2, 3, 4 + t_rank};
    CHECK_MPI(MPI_Win_fence(0, w));
    CHECK_MPI(MPI_Put(four, 4, MPI_INT, 0, 0, 4, MPI_INT, w));
    CHECK_MPI(MPI_Win_fence(0, w));
    printf("self window: %d %d %d %d\n", self[0], self[1], self[2], self[3]);
    CHECK_MPI(MPI_Win_free(&w));
    t_ok("MPI_Win_allocate windows");
    return t_finish();
}
