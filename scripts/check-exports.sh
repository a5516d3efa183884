#!/usr/bin/env bash
# The export check: every MPI_/PMPI_ name that Debian's libmpich.so.12 exports, and every one
# the MPICH 5 wheel's libmpi.so.12 exports, must be exported by libmpicr.so (functions and data
# symbols alike): a name missing from the shim would bypass it into the uninitialised library.
set -euo pipefail
cd "$(dirname "$0")/.."
shim=target/release/libmpicr.so
[ -f "$shim" ] || { echo "check-exports: $shim is missing (run make build)" >&2; exit 1; }
mpich=$(gcc -print-file-name=libmpich.so.12)
[ -f "$mpich" ] || mpich=$(ldconfig -p | awk '/libmpich.so.12 /{print $NF; exit}')
[ -f "$mpich" ] || { echo "check-exports: Debian's libmpich.so.12 not found (run make deps)" >&2; exit 1; }
wheel=.deps/mpich5/lib/libmpi.so.12
[ -f "$wheel" ] || { echo "check-exports: $wheel not found (run make deps)" >&2; exit 1; }
ours=$(nm -D --defined-only "$shim" | awk '{print $3}' | sort -u)
status=0
for lib in "$mpich" "$wheel"; do
    theirs=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -E '^P?MPI_' | sort -u)
    missing=$(comm -23 <(echo "$theirs") <(echo "$ours"))
    if [ -n "$missing" ]; then
        echo "check-exports: libmpicr.so lacks $(echo "$missing" | wc -l) names of $lib:" >&2
        echo "$missing" | head -20 >&2
        status=1
    else
        echo "check-exports: all $(echo "$theirs" | wc -l) MPI_/PMPI_ names of $(basename "$(dirname "$lib")")/$(basename "$lib") are exported by libmpicr.so"
    fi
done
exit $status
