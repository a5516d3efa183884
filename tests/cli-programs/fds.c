/* Prints its descriptor table (number=kind), then MPI_Init/Finalize; exits 3 on rank argv[1]. */
#include <mpi.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char line[2048] = "", path[64], tgt[256];
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int fds[64], n = 0;
    while ((e = readdir(d)) && n < 64)
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d)) fds[n++] = atoi(e->d_name);
    closedir(d);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (fds[j] < fds[i]) { int t = fds[i]; fds[i] = fds[j]; fds[j] = t; }
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/proc/self/fd/%d", fds[i]);
        ssize_t k = readlink(path, tgt, sizeof tgt - 1);
        tgt[k > 0 ? k : 0] = 0;
        char *c = strchr(tgt, ':');
        if (c) *c = 0;
        snprintf(line + strlen(line), sizeof line - strlen(line), " %d=%s", fds[i], tgt);
    }
    printf("fds:%s\n", line);
    fflush(stdout);
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Finalize();
    return (argc > 1 && rank == atoi(argv[1])) ? 3 : 0;
}
