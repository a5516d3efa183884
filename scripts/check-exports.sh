#!/usr/bin/env bash
# The export check: every MPI_/PMPI_ name that Debian's libmpich.so.12 exports must be exported
# by libmpicr.so (functions and data symbols alike).
set -euo pipefail
cd "$(dirname "$0")/.."
shim=target/release/libmpicr.so
[ -f "$shim" ] || { echo "check-exports: $shim is missing (run make build)" >&2; exit 1; }
mpich=$(gcc -print-file-name=libmpich.so.12)
[ -f "$mpich" ] || mpich=$(ldconfig -p | awk '/libmpich.so.12 /{print $NF; exit}')
[ -f "$mpich" ] || { echo "check-exports: Debian's libmpich.so.12 not found (run make deps)" >&2; exit 1; }
theirs=$(nm -D --defined-only "$mpich" | awk '{print $3}' | grep -E '^P?MPI_' | sort -u)
ours=$(nm -D --defined-only "$shim" | awk '{print $3}' | sort -u)
missing=$(comm -23 <(echo "$theirs") <(echo "$ours"))
if [ -n "$missing" ]; then
    echo "check-exports: libmpicr.so lacks $(echo "$missing" | wc -l) names of libmpich:" >&2
    echo "$missing" | head -20 >&2
    exit 1
fi
echo "check-exports: all $(echo "$theirs" | wc -l) MPI_/PMPI_ names of libmpich.so.12 are exported by libmpicr.so"
