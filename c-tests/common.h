/* Shared helpers for the mpicr C tests.
 *
 * Protocol (after CRIU's zdtm): a program sets up state, computes, verifies what it computed and
 * prints deterministic lines. The runner (tests/, crate mpicr-tests) starts the ranks with
 * Hydra's -outfile-pattern, so every rank writes its own file, and compares those files byte
 * for byte between the native run (the oracle) and runs under the shim or checkpointed and
 * restarted mid-way. Hence nothing printed may depend on timing, PIDs, host names, addresses,
 * the wall clock or message arrival order: print values, checksums and decisions only.
 *
 * Every rank's last line is "PASS <name>", printed after MPI_Finalize returned (t_finish); the
 * runner requires it in the native run, so a run that stopped early never becomes the oracle.
 * A failed check prints "FAIL ..." with file and line on stdout and stderr, then MPI_Abort.
 *
 * Per-test metadata sits in the first comment of each test, one line, parsed by the runner:
 *   mpicr-test: ranks=1,2,4 args=A,B long-args=A,B long-args.4=A,B timeout=S
 * args are passed to every rank ({tmpdir} becomes a per-job scratch directory, also exported
 * as MPICR_TEST_TMPDIR); long-args are for modes that need the program to run a few seconds
 * (checkpoints), long-args.N overrides them for N ranks (4 ranks on 2 cores run much slower).
 * All keys but ranks are optional.
 */
#ifndef MPICR_CTESTS_COMMON_H
#define MPICR_CTESTS_COMMON_H

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int t_rank = -1, t_size = -1;
static const char *t_name = "?";

/* Line-buffered stdout: a check that aborts must not lose the lines printed before it, and a
 * checkpoint must not depend on when stdio happens to flush. */
static inline void t_init(int *argc, char ***argv, const char *name)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    t_name = name;
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "FAIL %s: MPI_Init failed\n", name);
        exit(2);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_size);
    printf("%s: rank %d of %d\n", name, t_rank, t_size);
}

/* Variant for programs that ask for a thread level; prints only whether it was granted, as a
 * library (or the shim) may legitimately grant more than asked. */
static inline void t_init_thread(int *argc, char ***argv, const char *name, int required)
{
    int provided = -1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    t_name = name;
    if (MPI_Init_thread(argc, argv, required, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "FAIL %s: MPI_Init_thread failed\n", name);
        exit(2);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_size);
    printf("%s: rank %d of %d, thread level granted: %s\n", name, t_rank, t_size,
           provided >= required ? "yes" : "no");
}

static inline void t_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("FAIL %s rank %d %s:%d: %s\n", t_name, t_rank, file, line, msg);
    fflush(stdout);
    fprintf(stderr, "FAIL %s rank %d %s:%d: %s\n", t_name, t_rank, file, line, msg);
    fflush(stderr);
    /* Give the launcher a moment to forward these lines: MPI_Abort kills every rank at once
     * and output still in flight is lost. */
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2); /* MPI_Abort should not return; make sure anyway */
}

#define CHECK(cond)                                                                               \
    do {                                                                                          \
        if (!(cond))                                                                              \
            t_fail(__FILE__, __LINE__, "check failed: %s", #cond);                               \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                      \
    do {                                                                                          \
        if (!(cond))                                                                              \
            t_fail(__FILE__, __LINE__, __VA_ARGS__);                                             \
    } while (0)

/* Integer equality with both values in the message. */
#define CHECK_EQ(a, b)                                                                            \
    do {                                                                                          \
        long long a_ = (long long)(a), b_ = (long long)(b);                                       \
        if (a_ != b_)                                                                             \
            t_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_);                \
    } while (0)

/* An MPI call that must succeed. Under MPI_ERRORS_ARE_FATAL it aborts by itself; under
 * MPI_ERRORS_RETURN this reports the call and the error class. */
#define CHECK_MPI(call)                                                                           \
    do {                                                                                          \
        int rc_ = (call);                                                                         \
        if (rc_ != MPI_SUCCESS) {                                                                 \
            int cls_ = -1;                                                                        \
            MPI_Error_class(rc_, &cls_);                                                          \
            t_fail(__FILE__, __LINE__, "%s returned error class %d", #call, cls_);               \
        }                                                                                         \
    } while (0)

/* Doubles compared with a tolerance: used only where the order of a floating-point reduction
 * is not fixed by the standard. */
#define CHECK_NEAR(a, b, tol)                                                                     \
    do {                                                                                          \
        double a_ = (double)(a), b_ = (double)(b);                                                \
        if (!(a_ - b_ <= (tol) && b_ - a_ <= (tol)))                                              \
            t_fail(__FILE__, __LINE__, "%s ~= %s: %.17g != %.17g", #a, #b, a_, b_);              \
    } while (0)

/* "ok <what>" (or any message) for the oracle. */
static inline void t_ok(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ok ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
}

/* A sub-test that does not apply at this rank count; the line is deterministic. */
static inline void t_skip(const char *what, const char *why)
{
    printf("skip %s: %s\n", what, why);
}

/* FNV-1a, 64 bit: a short, platform-independent checksum of a buffer for the oracle. */
static inline uint64_t t_fnv(const void *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf;
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* Folds LEN bytes at BUF into the running DIGEST that a test prints for the oracle. */
static inline void t_fold(uint64_t *digest, const void *buf, size_t len)
{
    *digest = (*digest ^ t_fnv(buf, len)) * 1099511628211ULL;
}

/* One step of the session tests on COMM at iteration IT: an allreduce checked against its closed
 * form and a token passed to the right around the ring, both folded into DIGEST. */
static inline void t_ring_step(MPI_Comm comm, long it, uint64_t *digest)
{
    const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    long in[2] = {t_rank + it, (long)t_rank * it}, out[2];
    CHECK_MPI(MPI_Allreduce(in, out, 2, MPI_LONG, MPI_SUM, comm));
    CHECK_EQ(out[0], (long)t_size * (t_size - 1) / 2 + t_size * it);
    CHECK_EQ(out[1], (long)t_size * (t_size - 1) / 2 * it);
    t_fold(digest, out, sizeof out);

    long token = it * 1000 + t_rank, got = -1;
    CHECK_MPI(MPI_Sendrecv(&token, 1, MPI_LONG, right, 3, &got, 1, MPI_LONG, left, 3, comm, MPI_STATUS_IGNORE));
    CHECK_EQ(got, it * 1000 + left);
    t_fold(digest, &got, sizeof got);
}

/* Word i of message m that `sender` sends in iteration `it` (the point-to-point checkpoint
 * programs check every word received against it). */
static inline long t_msg_word(int sender, long it, int m, long i)
{
    return (long)sender * 1000003L + it * 1009 + m * 101 + i;
}

/* Positional integer argument with a default. */
static inline long t_arg_long(int argc, char **argv, int idx, long dflt)
{
    if (idx < argc && argv[idx][0] != '\0') {
        char *end = NULL;
        long v = strtol(argv[idx], &end, 10);
        if (end && *end == '\0')
            return v;
        t_fail(__FILE__, __LINE__, "argument %d is not an integer: %s", idx, argv[idx]);
    }
    return dflt;
}

/* Scratch directory: positional argument, else $MPICR_TEST_TMPDIR, else $TMPDIR, else /tmp. */
static inline const char *t_tmpdir(int argc, char **argv, int idx)
{
    const char *d = NULL;
    if (idx < argc && argv[idx][0] != '\0')
        d = argv[idx];
    if (!d)
        d = getenv("MPICR_TEST_TMPDIR");
    if (!d)
        d = getenv("TMPDIR");
    if (!d)
        d = "/tmp";
    return d;
}

/* Symbolic name of an error class, so the output does not depend on library message text. */
static inline const char *t_errclass_name(int cls)
{
    switch (cls) {
#define T_EC(x)                                                                                   \
    case x:                                                                                       \
        return #x;
        T_EC(MPI_SUCCESS)
        T_EC(MPI_ERR_BUFFER)
        T_EC(MPI_ERR_COUNT)
        T_EC(MPI_ERR_TYPE)
        T_EC(MPI_ERR_TAG)
        T_EC(MPI_ERR_COMM)
        T_EC(MPI_ERR_RANK)
        T_EC(MPI_ERR_REQUEST)
        T_EC(MPI_ERR_ROOT)
        T_EC(MPI_ERR_GROUP)
        T_EC(MPI_ERR_OP)
        T_EC(MPI_ERR_TOPOLOGY)
        T_EC(MPI_ERR_DIMS)
        T_EC(MPI_ERR_ARG)
        T_EC(MPI_ERR_UNKNOWN)
        T_EC(MPI_ERR_TRUNCATE)
        T_EC(MPI_ERR_OTHER)
        T_EC(MPI_ERR_INTERN)
        T_EC(MPI_ERR_IN_STATUS)
        T_EC(MPI_ERR_PENDING)
        T_EC(MPI_ERR_KEYVAL)
        T_EC(MPI_ERR_INFO)
        T_EC(MPI_ERR_INFO_KEY)
        T_EC(MPI_ERR_INFO_VALUE)
        T_EC(MPI_ERR_INFO_NOKEY)
        T_EC(MPI_ERR_WIN)
        T_EC(MPI_ERR_FILE)
        T_EC(MPI_ERR_NO_SUCH_FILE)
        T_EC(MPI_ERR_AMODE)
        T_EC(MPI_ERR_RMA_SYNC)
        T_EC(MPI_ERR_DISP)
        T_EC(MPI_ERR_BASE)
        T_EC(MPI_ERR_SIZE)
        T_EC(MPI_ERR_ACCESS)
        T_EC(MPI_ERR_IO)
        T_EC(MPI_ERR_UNSUPPORTED_OPERATION)
#ifdef MPI_ERR_ERRHANDLER /* MPI 4.1 */
        T_EC(MPI_ERR_ERRHANDLER)
#endif
#undef T_EC
    default:
        return NULL;
    }
}

/* Prints "<what>: <CLASS>" for the return code of a call expected to fail. Classes above
 * MPI_ERR_LASTCODE come from MPI_Add_error_class and are printed relative to it. */
static inline int t_print_error(const char *what, int rc)
{
    int cls = -1;
    if (rc == MPI_SUCCESS) {
        printf("%s: MPI_SUCCESS\n", what);
        return MPI_SUCCESS;
    }
    MPI_Error_class(rc, &cls);
    const char *name = t_errclass_name(cls);
    if (name)
        printf("%s: %s\n", what, name);
    else
        printf("%s: class %d\n", what, cls);
    return cls;
}

/* Pacing for checkpoint tests: with $MPICR_TEST_PACE_US=<us>, every t_pause_point call with a
 * new step sleeps that long (outside MPI) before going on. A checkpointed run must last long
 * enough to be caught mid-way at a random instant, however fast the machine and whatever the
 * rank count and MPI build (4 busy-polling ranks on 2 cores run some loops 10x slower than 2):
 * paced, a run lasts about steps x pace. Output is the same with or without it. */
static inline void t_pace(long step)
{
    static long pace_us = -2, last = -1;
    if (pace_us == -2) {
        const char *s = getenv("MPICR_TEST_PACE_US");
        pace_us = (s && *s) ? atol(s) : 0;
    }
    if (pace_us <= 0 || step == last)
        return;
    last = step;
    struct timespec nap = {pace_us / 1000000, (pace_us % 1000000) * 1000};
    nanosleep(&nap, NULL);
}

/* A checkpoint point, zdtm's "ready, wait, verify" for MPI programs. $MPICR_TEST_PAUSE_AT is a
 * comma-separated list of steps; the first time t_pause_point is called with one of them, all
 * ranks of `comm` meet in a barrier (on a private duplicate of `comm`), then rank 0 creates
 * $MPICR_TEST_TMPDIR/mpicr-test-paused and waits, outside MPI, until mpicr-test-resume appears
 * next to it, while the other ranks wait in a blocking receive from rank 0; rank 0 then removes
 * both files (the flag first, so that once the resume file is gone the pause is over) and
 * releases the others. While paused every rank has printed exactly what it prints before
 * `step`, and no collective is half-started, so a checkpoint taken then cuts every rank's output
 * at a known place. A harness can so take a checkpoint while the job is known to be mid-way,
 * however fast the machine is. Without the variable it does nothing (but pace, see t_pace),
 * and the output is the same either way. */
static inline void t_pause_point(MPI_Comm comm, long step)
{
    enum { MAX_PAUSES = 16 };
    static long at[MAX_PAUSES];
    static int n_at = -1, done[MAX_PAUSES];
    t_pace(step);
    if (n_at < 0) {
        n_at = 0;
        const char *s = getenv("MPICR_TEST_PAUSE_AT");
        while (s && *s && n_at < MAX_PAUSES) {
            char *end;
            long v = strtol(s, &end, 10);
            if (end == s)
                break;
            at[n_at++] = v;
            s = *end == ',' ? end + 1 : end;
        }
    }
    int k = 0;
    while (k < n_at && (at[k] != step || done[k]))
        k++;
    if (k == n_at)
        return;
    done[k] = 1;
    MPI_Comm pc;
    CHECK_MPI(MPI_Comm_dup(comm, &pc));
    CHECK_MPI(MPI_Barrier(pc)); /* everybody has arrived */
    int rank, size;
    CHECK_MPI(MPI_Comm_rank(pc, &rank));
    CHECK_MPI(MPI_Comm_size(pc, &size));
    if (rank == 0) {
        const char *dir = getenv("MPICR_TEST_TMPDIR");
        char flag[4096], resume[4096];
        snprintf(flag, sizeof flag, "%s/mpicr-test-paused", dir ? dir : ".");
        snprintf(resume, sizeof resume, "%s/mpicr-test-resume", dir ? dir : ".");
        FILE *f = fopen(flag, "w");
        CHECK_MSG(f != NULL, "cannot create %s", flag);
        fclose(f);
        struct timespec nap = {0, 10 * 1000 * 1000};
        while (access(resume, F_OK) != 0)
            nanosleep(&nap, NULL);
        unlink(flag);
        unlink(resume);
        for (int r = 1; r < size; r++)
            CHECK_MPI(MPI_Send(NULL, 0, MPI_BYTE, r, 0, pc));
    } else {
        CHECK_MPI(MPI_Recv(NULL, 0, MPI_BYTE, 0, 0, pc, MPI_STATUS_IGNORE));
    }
    CHECK_MPI(MPI_Comm_free(&pc));
}

/* Prints PASS after a successful MPI_Finalize; returns the exit status for main. */
static inline int t_finish(void)
{
    CHECK_MPI(MPI_Finalize());
    printf("PASS %s\n", t_name);
    fflush(stdout);
    return 0;
}

#endif /* MPICR_CTESTS_COMMON_H */
