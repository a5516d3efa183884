/* Environment and info objects: Init_thread (FUNNELED), Query_thread, Is_thread_main,
 * Initialized/Finalized, Get_version, Get_library_version and Get_processor_name (checked,
 * not printed: they name the machine and the build), Wtime/Wtick (monotonic, positive),
 * Alloc_mem/Free_mem used as a message buffer, Info_create/set/get/get_valuelen/get_nkeys/
 * get_nthkey/delete/dup/free and Info_get_string, Comm_set_info/get_info, MPI_INFO_ENV, and
 * Finalized after MPI_Finalize.
 * mpicr-test: ranks=1,2,4
 */
#include "common.h"

int main(int argc, char **argv)
{
    int flag;
    CHECK_MPI(MPI_Initialized(&flag));
    CHECK(!flag);
    t_init_thread(&argc, &argv, "env_info", MPI_THREAD_FUNNELED);
    CHECK_MPI(MPI_Initialized(&flag));
    CHECK(flag);
    CHECK_MPI(MPI_Finalized(&flag));
    CHECK(!flag);
    int level;
    CHECK_MPI(MPI_Query_thread(&level));
    CHECK(level >= MPI_THREAD_FUNNELED);
    CHECK_MPI(MPI_Is_thread_main(&flag));
    CHECK(flag);

    int ver, sub;
    CHECK_MPI(MPI_Get_version(&ver, &sub));
    CHECK(ver == MPI_VERSION && sub == MPI_SUBVERSION);
    printf("MPI version matches mpi.h: %s\n", ver >= 3 ? "3 or later" : "older");
    char lib[MPI_MAX_LIBRARY_VERSION_STRING], host[MPI_MAX_PROCESSOR_NAME];
    int len;
    CHECK_MPI(MPI_Get_library_version(lib, &len));
    CHECK(len > 0 && (int)strlen(lib) == len);
    CHECK_MPI(MPI_Get_processor_name(host, &len));
    CHECK(len > 0 && (int)strlen(host) == len);

    double t0 = MPI_Wtime(), t1 = MPI_Wtime(), tick = MPI_Wtick();
    CHECK(t1 >= t0);
    CHECK(tick > 0 && tick < 1);
    t_ok("wtime monotonic, wtick positive");

    /* Alloc_mem: use the memory as both ends of a message */
    {
        int *buf;
        CHECK_MPI(MPI_Alloc_mem(64 * sizeof(int), MPI_INFO_NULL, &buf));
        for (int i = 0; i < 32; i++)
            buf[i] = t_rank * 32 + i;
        const int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
        CHECK_MPI(MPI_Sendrecv(buf, 32, MPI_INT, right, 0, buf + 32, 32, MPI_INT, left, 0,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int i = 0; i < 32; i++)
            CHECK_EQ(buf[32 + i], left * 32 + i);
        CHECK_MPI(MPI_Free_mem(buf));
        t_ok("alloc_mem buffer");
    }

    /* Info objects */
    {
        MPI_Info info, dup;
        char val[64], key[MPI_MAX_INFO_KEY];
        int nkeys, vlen;
        CHECK_MPI(MPI_Info_create(&info));
        CHECK_MPI(MPI_Info_set(info, "alpha", "1"));
        CHECK_MPI(MPI_Info_set(info, "beta", "two"));
        CHECK_MPI(MPI_Info_set(info, "gamma", "3.0"));
        CHECK_MPI(MPI_Info_set(info, "beta", "second")); /* overwrite */
        CHECK_MPI(MPI_Info_get_nkeys(info, &nkeys));
        CHECK_EQ(nkeys, 3);
        printf("info keys:");
        for (int k = 0; k < nkeys; k++) {
            CHECK_MPI(MPI_Info_get_nthkey(info, k, key));
            CHECK_MPI(MPI_Info_get_valuelen(info, key, &vlen, &flag));
            CHECK(flag);
            CHECK_MPI(MPI_Info_get(info, key, sizeof val - 1, val, &flag));
            CHECK((int)strlen(val) == vlen);
            printf(" %s=%s", key, val);
        }
        printf("\n");
        int buflen = sizeof val;
        CHECK_MPI(MPI_Info_get_string(info, "beta", &buflen, val, &flag));
        CHECK(flag && strcmp(val, "second") == 0);
        CHECK_MPI(MPI_Info_get(info, "delta", sizeof val - 1, val, &flag));
        CHECK(!flag);
        CHECK_MPI(MPI_Info_dup(info, &dup));
        CHECK_MPI(MPI_Info_delete(info, "alpha"));
        CHECK_MPI(MPI_Info_get_nkeys(info, &nkeys));
        CHECK_EQ(nkeys, 2);
        CHECK_MPI(MPI_Info_get_nkeys(dup, &nkeys));
        CHECK_EQ(nkeys, 3); /* the dup is independent */
        CHECK_MPI(MPI_Info_free(&dup));
        CHECK(dup == MPI_INFO_NULL);

        /* Comm_set_info/get_info: a user key may be dropped by the library, so only check
         * the value when it is kept */
        MPI_Comm c;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        CHECK_MPI(MPI_Comm_set_info(c, info));
        MPI_Info got;
        CHECK_MPI(MPI_Comm_get_info(c, &got));
        CHECK_MPI(MPI_Info_get(got, "beta", sizeof val - 1, val, &flag));
        if (flag)
            CHECK(strcmp(val, "second") == 0);
        CHECK_MPI(MPI_Info_free(&got));
        CHECK_MPI(MPI_Comm_free(&c));
        CHECK_MPI(MPI_Info_free(&info));
        t_ok("info objects");
    }

    /* MPI_INFO_ENV exists and can be queried (its contents describe the launch) */
    CHECK_MPI(MPI_Info_get_nkeys(MPI_INFO_ENV, &flag));
    CHECK(flag >= 0);

    CHECK_MPI(MPI_Finalize());
    CHECK_MPI(MPI_Finalized(&flag));
    CHECK(flag);
    printf("PASS env_info\n");
    return 0;
}
