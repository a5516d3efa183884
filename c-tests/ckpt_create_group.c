/* Checkpoint workload: MPI_Comm_create_group, collective over its group only, every step over
 * varying subgroups and tags, with one rank lagging: each step, rank (step % size) sleeps half
 * the pace before its calls, so that the other members wait inside MPI_Comm_create_group for
 * it when a checkpoint comes (alignment must make the lagging member run on into the call,
 * although the parent communicator's collectives are all aligned). Per step: a subgroup of
 * MPI_COMM_WORLD's ranks (tag step % 3), its complement on a duplicate of the
 * world (tag 7), and the whole world on the duplicate (tag 9, the same key every step); on each
 * new communicator the rank is checked and an allreduce of world ranks and the step; all
 * communicators are freed. A digest is printed every twentieth of the run.
 * Argument: the step count.
 * Pause point for checkpoint tests: $MPICR_TEST_PAUSE_AT=<step> (common.h).
 * mpicr-test: ranks=1,2,4 args=30 long-args=400 long-args.4=150 ckpt-ranks=2,4 ckpt-modes=continue,stop-restart ckpt-pace=5000 ckpt-pace.4=15000
 */
#include "common.h"

/* Half of the pace (MPICR_TEST_PACE_US), outside MPI. */
static void half_pace(void)
{
    const char *s = getenv("MPICR_TEST_PACE_US");
    long us = (s && *s) ? atol(s) / 2 : 0;
    if (us > 0) {
        struct timespec nap = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&nap, NULL);
    }
}

/* Makes a communicator of `members` (world ranks, in that order) from `parent` with `tag` if
 * this rank is one of them (the group made from the parent's own group: MPICH 4.0.2 crashes,
 * natively, given a group of MPI_COMM_WORLD's with a duplicate of it as the parent), checks it and folds an allreduce over it into the digest.
 * Returns the new communicator's size (0: not a member). */
static int use_group(MPI_Comm parent, MPI_Group parent_group, const int *members, int n, int tag, long s, uint64_t *digest)
{
    int me = -1;
    for (int i = 0; i < n; i++)
        if (members[i] == t_rank)
            me = i;
    if (me < 0 || n == 0)
        return 0;
    MPI_Group g;
    CHECK_MPI(MPI_Group_incl(parent_group, n, members, &g));
    MPI_Comm c;
    CHECK_MPI(MPI_Comm_create_group(parent, g, tag, &c));
    CHECK_MPI(MPI_Group_free(&g));
    CHECK(c != MPI_COMM_NULL);
    int rank = -1, size = -1;
    CHECK_MPI(MPI_Comm_rank(c, &rank));
    CHECK_MPI(MPI_Comm_size(c, &size));
    CHECK_EQ(rank, me);
    CHECK_EQ(size, n);
    long in[2] = {t_rank * 10 + s, 1}, out[2] = {0, 0};
    CHECK_MPI(MPI_Allreduce(in, out, 2, MPI_LONG, MPI_SUM, c));
    long want = 0;
    for (int i = 0; i < n; i++)
        want += members[i] * 10 + s;
    CHECK_EQ(out[0], want);
    CHECK_EQ(out[1], (long)n);
    t_fold(digest, out, sizeof out);
    t_fold(digest, &tag, sizeof tag);
    CHECK_MPI(MPI_Comm_free(&c));
    return n;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv, "ckpt_create_group");
    const long steps = t_arg_long(argc, argv, 1, 30);
    const long report = steps >= 20 ? steps / 20 : 1;
    MPI_Group world_group;
    CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    MPI_Comm dup;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_Group dup_group;
    CHECK_MPI(MPI_Comm_group(dup, &dup_group));
    int *sub = malloc(sizeof(int) * t_size), *rest = malloc(sizeof(int) * t_size), *all = malloc(sizeof(int) * t_size);
    CHECK(sub && rest && all);
    for (int r = 0; r < t_size; r++)
        all[r] = r;

    uint64_t digest = 14695981039346656037ULL;
    long made = 0, member_of = 0;
    for (long s = 1; s <= steps; s++) {
        t_pause_point(MPI_COMM_WORLD, s);
        if (t_rank == s % t_size)
            half_pace();
        /* A subgroup that varies with the step (never empty), and its complement. (In
         * ascending order: MPICH 4.0.2 crashes in MPI_Comm_create_group on a group in another
         * order of MPI_COMM_WORLD's ranks, natively.) */
        int ns = 0, nr = 0;
        for (int r = 0; r < t_size; r++) {
            if ((r * 7 + s) % 3 != 0 || r == s % t_size)
                sub[ns++] = r;
            else
                rest[nr++] = r;
        }
        int n;
        if ((n = use_group(MPI_COMM_WORLD, world_group, sub, ns, (int)(s % 3), s, &digest)))
            made++, member_of += n;
        if ((n = use_group(dup, dup_group, rest, nr, 7, s, &digest)))
            made++, member_of += n;
        if ((n = use_group(dup, dup_group, all, t_size, 9, s, &digest)))
            made++, member_of += n;
        if (s % report == 0 || s == steps)
            printf("step %ld: %ld communicators made, %ld members in all, digest %016llx\n", s, made, member_of,
                   (unsigned long long)digest);
    }
    free(sub);
    free(rest);
    free(all);
    CHECK_MPI(MPI_Group_free(&dup_group));
    CHECK_MPI(MPI_Comm_free(&dup));
    CHECK_MPI(MPI_Group_free(&world_group));
    return t_finish();
}
