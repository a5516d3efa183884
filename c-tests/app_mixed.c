/* Application-level ranks beside transparent ones (`mpicr run --mode app`, include/mpicr.h).
 * The first NAPPLES ranks are "apples": they register their own save and restore
 * (mpicr_app_register) and offer a checkpoint at the top of every iteration (mpicr_safe_point);
 * run under `mpicr run --mode app`, they are never dumped by CRIU but started afresh by a restart,
 * which gives back their MPI objects under the same handles and calls restore. The others
 * ("oranges") are plain programs, checkpointed transparently.
 * Every iteration: each rank receives from its left neighbour the message the neighbour sent
 * two iterations earlier (so messages are in flight at every safe point), mixes it into its
 * state, sends the message for two iterations ahead to its right, takes part in an MPI_Allreduce
 * with a user op over world, in an MPI_Bcast from the last rank (an orange, which runs ahead of
 * apples), and in an MPI_Allreduce and an MPI_Bcast of a derived datatype on its fruit's communicator
 * (MPI_Comm_split). Checksums every 8 iterations and at the end; nothing depends on timing.
 * Arguments: ITERS PACE_US NAPPLES [HOOK]. Test hooks of the error cases: HOOK `nosafe` (apples
 * never reach a safe point), `noreg` (nothing registered); a file `app-save-fail` in the working
 * directory makes the next save fail (once), `app-restore-fail` every restore. HOOK `file`: every
 * rank also writes its checksum of each iteration into a shared MPI file (`app_mixed.dat` in
 * the working directory, MPI_File_write_at_all, the file open across every safe point) and
 * prints a checksum of the whole file at the end; HOOK `win`: an RMA window over the state,
 * fenced every iteration (app-mode ranks cannot carry MPI_Win_create windows: a checkpoint
 * refuses it); HOOK `winalloc`: an MPI_Win_allocate window of K words, into which every rank
 * puts a word of its state on its right neighbour each iteration (fenced), mixing in the word
 * put K-1 iterations earlier (mpicr carries the window's memory for app-mode ranks).
 * The mpicr_* calls are weak: natively they are absent and the program runs as a plain MPI
 * program.
 * mpicr-test: ranks=2,4 args=24,0,1
 */
#include "common.h"

#include <unistd.h>

/* The application-level API of include/mpicr.h, weak so the native run needs no libmpicr. */
typedef int (*mpicr_save_fn)(const char *dir, void *arg);
typedef int (*mpicr_restore_fn)(const char *dir, void *arg);
int mpicr_app_register(mpicr_save_fn save, mpicr_restore_fn restore, void *arg) __attribute__((weak));
int mpicr_safe_point(void) __attribute__((weak));
int mpicr_restarted(void) __attribute__((weak));

#define K 16
#define AHEAD 2

/* Everything an apple needs to continue, MPI handles included (they keep their values). */
struct saved {
    long it, iters, pace_us;
    int napples;
    uint64_t s[K];
    MPI_Comm fruit;
    MPI_Datatype pair;
    MPI_Op op;
    MPI_File fh;
    MPI_Win win;
    uint64_t *wbase;
};
static struct saved st;

static uint64_t mix(uint64_t a, uint64_t b, long it)
{
    uint64_t h = a ^ (b + 0x9e3779b97f4a7c15ULL + (uint64_t)it);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
    return h;
}

/* Wrapping addition: associative and commutative, so the result does not depend on the order
 * in which a library reduces (MPICH 4.0.2 and 5 order 4 ranks differently). */
static void add_op(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    uint64_t *a = in, *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] += a[i];
}

static int save(const char *dir, void *arg)
{
    (void)arg;
    if (unlink("app-save-fail") == 0)
        return 5;
    char path[4096];
    snprintf(path, sizeof path, "%s/state.bin", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 1;
    int ok = fwrite(&st, sizeof st, 1, f) == 1;
    return (fclose(f) == 0 && ok) ? 0 : 2;
}

static int restore(const char *dir, void *arg)
{
    (void)arg;
    if (access("app-restore-fail", F_OK) == 0)
        return 7;
    char path[4096];
    snprintf(path, sizeof path, "%s/state.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 1;
    int ok = fread(&st, sizeof st, 1, f) == 1;
    fclose(f);
    return ok ? 0 : 2;
}

static uint64_t sum(const uint64_t *s)
{
    uint64_t h = 0;
    for (int i = 0; i < K; i++)
        h = mix(h, s[i], i);
    return h;
}

static uint64_t msg_word(int sender, long it, int i, uint64_t salt)
{
    return mix((uint64_t)sender << 32 ^ (uint64_t)it, (uint64_t)i, (long)salt);
}

int main(int argc, char **argv)
{
    t_name = "app_mixed";
    setvbuf(stdout, NULL, _IOLBF, 0);
    const long iters = t_arg_long(argc, argv, 1, 24);
    const long pace = t_arg_long(argc, argv, 2, 0);
    const int napples = (int)t_arg_long(argc, argv, 3, 1);
    const char *hook = argc > 4 ? argv[4] : "";
    if (mpicr_app_register && strcmp(hook, "noreg") != 0)
        mpicr_app_register(save, restore, NULL);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_size);
    const int apple = t_rank < napples;
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    const int restarted = mpicr_restarted && mpicr_restarted();
    if (restarted) {
        CHECK(apple && st.iters == iters && st.napples == napples);
    } else {
        printf("app_mixed: rank %d of %d, %s\n", t_rank, t_size, apple ? "apple" : "orange");
        st.iters = iters;
        st.pace_us = pace;
        st.napples = napples;
        for (int i = 0; i < K; i++)
            st.s[i] = mix((uint64_t)t_rank * 1000003u, (uint64_t)i, 0);
        CHECK(MPI_Comm_split(MPI_COMM_WORLD, apple, t_rank, &st.fruit) == MPI_SUCCESS);
        CHECK(MPI_Type_contiguous(2, MPI_UINT64_T, &st.pair) == MPI_SUCCESS);
        CHECK(MPI_Type_commit(&st.pair) == MPI_SUCCESS);
        CHECK(MPI_Op_create(add_op, 1, &st.op) == MPI_SUCCESS);
        if (strcmp(hook, "file") == 0)
            CHECK(MPI_File_open(MPI_COMM_WORLD, "app_mixed.dat", MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &st.fh) == MPI_SUCCESS);
        if (strcmp(hook, "win") == 0)
            CHECK(MPI_Win_create(st.s, sizeof st.s, sizeof st.s[0], MPI_INFO_NULL, MPI_COMM_WORLD, &st.win) == MPI_SUCCESS);
        if (strcmp(hook, "winalloc") == 0) {
            CHECK(MPI_Win_allocate(K * sizeof(uint64_t), sizeof(uint64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &st.wbase, &st.win) == MPI_SUCCESS);
            for (int i = 0; i < K; i++)
                st.wbase[i] = (uint64_t)t_rank + (uint64_t)i;
            CHECK(MPI_Win_fence(0, st.win) == MPI_SUCCESS);
        }
        /* The first AHEAD messages. */
        for (long a = 0; a < AHEAD && a < iters; a++) {
            uint64_t m[K];
            for (int i = 0; i < K; i++)
                m[i] = msg_word(t_rank, a, i, st.s[i] & 0xff);
            MPI_Send(m, K, MPI_UINT64_T, right, (int)a, MPI_COMM_WORLD);
        }
        st.it = 0;
    }
    int fruit_rank, fruit_size;
    MPI_Comm_rank(st.fruit, &fruit_rank);
    MPI_Comm_size(st.fruit, &fruit_size);

    for (; st.it < iters; st.it++) {
        const long it = st.it;
        if (apple && mpicr_safe_point && strcmp(hook, "nosafe") != 0)
            mpicr_safe_point();
        if (pace > 0)
            usleep((useconds_t)pace);
        /* point-to-point: the message the left neighbour sent AHEAD iterations ago */
        uint64_t m[K];
        MPI_Status stt;
        MPI_Recv(m, K, MPI_UINT64_T, left, (int)it, MPI_COMM_WORLD, &stt);
        CHECK(stt.MPI_SOURCE == left && stt.MPI_TAG == (int)it);
        for (int i = 0; i < K; i++)
            st.s[i] = mix(st.s[i], m[i], it);
        /* collectives: a user op on world, a broadcast from an orange, a derived type per fruit */
        uint64_t x[2] = {st.s[0], st.s[1]}, y[2];
        MPI_Allreduce(x, y, 2, MPI_UINT64_T, st.op, MPI_COMM_WORLD);
        uint64_t b = sum(st.s);
        MPI_Bcast(&b, 1, MPI_UINT64_T, t_size - 1, MPI_COMM_WORLD);
        uint64_t p[2] = {st.s[2], st.s[3]}, q[2];
        MPI_Allreduce(p, q, 2, MPI_UINT64_T, MPI_BXOR, st.fruit);
        MPI_Bcast(p, 1, st.pair, 0, st.fruit);
        q[1] ^= p[0] + p[1];
        st.s[4] ^= y[0] + y[1];
        st.s[5] = mix(st.s[5], b, it);
        st.s[6] ^= q[0] ^ (q[1] << 1) ^ (uint64_t)fruit_size;
        /* the message for AHEAD iterations on */
        if (it + AHEAD < iters) {
            for (int i = 0; i < K; i++)
                m[i] = msg_word(t_rank, it + AHEAD, i, st.s[i] & 0xff);
            MPI_Send(m, K, MPI_UINT64_T, right, (int)(it + AHEAD), MPI_COMM_WORLD);
        }
        if (strcmp(hook, "file") == 0) {
            uint64_t c = sum(st.s);
            MPI_Offset at = (MPI_Offset)((it * t_size + t_rank) * (long)sizeof c);
            CHECK(MPI_File_write_at_all(st.fh, at, &c, 1, MPI_UINT64_T, MPI_STATUS_IGNORE) == MPI_SUCCESS);
        }
        if (strcmp(hook, "win") == 0)
            CHECK(MPI_Win_fence(0, st.win) == MPI_SUCCESS);
        if (strcmp(hook, "winalloc") == 0) {
            CHECK(MPI_Put(&st.s[7], 1, MPI_UINT64_T, right, (MPI_Aint)(it % K), 1, MPI_UINT64_T, st.win) == MPI_SUCCESS);
            CHECK(MPI_Win_fence(0, st.win) == MPI_SUCCESS);
            st.s[8] = mix(st.s[8], st.wbase[(it + 1) % K], it);
        }
        if (it % 8 == 7)
            printf("app_mixed: rank %d iteration %ld checksum %016llx\n", t_rank, it, (unsigned long long)sum(st.s));
    }
    uint64_t mine = sum(st.s), all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
    printf("app_mixed: rank %d final %016llx job %016llx\n", t_rank, (unsigned long long)mine, (unsigned long long)all);
    if (strcmp(hook, "file") == 0) {
        /* every rank reads the whole file: all ranks' checksums of every iteration */
        const long n = iters * t_size;
        uint64_t *all_c = calloc((size_t)n, sizeof *all_c), h = 0;
        CHECK(all_c != NULL);
        CHECK(MPI_File_read_at_all(st.fh, 0, all_c, (int)n, MPI_UINT64_T, MPI_STATUS_IGNORE) == MPI_SUCCESS);
        for (long i = 0; i < n; i++)
            h = mix(h, all_c[i], i);
        printf("app_mixed: rank %d file %016llx\n", t_rank, (unsigned long long)h);
        free(all_c);
        CHECK(MPI_File_close(&st.fh) == MPI_SUCCESS);
    }
    if (strcmp(hook, "win") == 0 || strcmp(hook, "winalloc") == 0)
        CHECK(MPI_Win_free(&st.win) == MPI_SUCCESS);
    MPI_Op_free(&st.op);
    MPI_Type_free(&st.pair);
    MPI_Comm_free(&st.fruit);
    t_finish();
    return 0;
}
