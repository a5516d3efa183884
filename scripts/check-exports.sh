#!/usr/bin/env bash
# The export check: every MPI_/PMPI_ name that Debian's libmpich.so.12 exports, and every one
# the MPICH 5 wheel's libmpi.so.12 exports, must be exported by libmpicr.so (functions and data
# symbols alike): a name missing from the shim would bypass it into the uninitialised library.
# Likewise every MPI_/PMPI_ name of Open MPI's libmpi.so.40 must be exported by
# libmpicr_ompi.so, and every data symbol of its table (shim/api/ompi-abi.json: the predefined
# handles and sentinels mpi.h names) with the very size libmpi.so.40 gives it: a non-PIE program
# copy-relocates those, and a smaller one would be cut. And every MPI_/PMPI_ name of the MPICH 5
# wheel's libmpi_abi.so.1 must be exported by libmpicr_abi.so.
set -euo pipefail
cd "$(dirname "$0")/.."
shim=target/release/libmpicr.so
[ -f "$shim" ] || { echo "check-exports: $shim is missing (run make build)" >&2; exit 1; }
mpich=$(gcc -print-file-name=libmpich.so.12)
# ldconfig_path NAME: the path ldconfig's cache gives NAME. (The cache is read whole first: awk
# leaving early would kill ldconfig -p with SIGPIPE, which pipefail turns into exit 141.)
ldconfig_path() { awk -v n="$1" '$1 == n {print $NF; exit}' <<<"$(ldconfig -p)"; }
[ -f "$mpich" ] || mpich=$(ldconfig_path libmpich.so.12)
[ -f "$mpich" ] || { echo "check-exports: Debian's libmpich.so.12 not found (run make deps)" >&2; exit 1; }
wheel=.deps/mpich5/lib/libmpi.so.12
[ -f "$wheel" ] || { echo "check-exports: $wheel not found (run make deps)" >&2; exit 1; }
# covers SHIM LIB LABEL [REGEX WHAT]: does SHIM export every MPI_/PMPI_ name (or every name
# matching REGEX) LIB exports?
covers() {
    local ours theirs missing re=${4:-'^P?MPI_'} what=${5:-MPI_/PMPI_}
    ours=$(nm -D --defined-only "$1" | awk '{print $3}' | sort -u)
    theirs=$(nm -D --defined-only "$2" | awk '{print $3}' | grep -E "$re" | sort -u)
    missing=$(comm -23 <(echo "$theirs") <(echo "$ours"))
    if [ -n "$missing" ]; then
        echo "check-exports: $(basename "$1") lacks $(echo "$missing" | wc -l) names of $2:" >&2
        echo "$missing" | head -20 >&2
        return 1
    fi
    echo "check-exports: all $(echo "$theirs" | grep -c .) $what names of $3 are exported by $(basename "$1")"
}
status=0
# (ULFM: the MPIX_Comm_* functions MPICH's mpi.h declares, which take handles)
ulfm='^P?MPIX_Comm_(revoke|shrink|agree|failure_ack|failure_get_acked|get_failed)$'
for lib in "$mpich" "$wheel"; do
    covers "$shim" "$lib" "$(basename "$(dirname "$lib")")/$(basename "$lib")" || status=1
    covers "$shim" "$lib" "$(basename "$(dirname "$lib")")/$(basename "$lib")" "$ulfm" "ULFM MPIX_Comm_*" || status=1
done
ompi_shim=target/release/libmpicr_ompi.so
ompi=$(ldconfig_path libmpi.so.40)
if [ ! -f "$ompi_shim" ]; then
    echo "check-exports: $ompi_shim is missing (run make build)" >&2
    status=1
elif [ -z "$ompi" ] || [ ! -f "$ompi" ]; then
    echo "check-exports: Open MPI's libmpi.so.40 not found (run make deps)" >&2
    status=1
else
    covers "$ompi_shim" "$ompi" libmpi.so.40 || status=1
    # The table is the union of Open MPI 4.1 (Debian's) and 5.0 (the wheel's, when installed).
    ompi5=.deps/openmpi5/lib/libmpi.so.40
    libs=("$ompi")
    if [ -f "$ompi5" ]; then
        covers "$ompi_shim" "$ompi5" openmpi5/libmpi.so.40 || status=1
        libs+=("$ompi5")
    fi
    # name size, for the data symbols of the table: each must be in some library, and ours as
    # large as the largest (a non-PIE program copy-relocates the size it was linked against)
    sizes() { readelf -W --dyn-syms "$1" | awk '$4 == "OBJECT" && $7 != "UND" {sub(/@.*/, "", $8); print $8, $3}' | sort -u; }
    wanted=$(python3 -c 'import json,sys; [print(d["name"]) for d in json.load(open(sys.argv[1]))["data"]]' shim/api/ompi-abi.json | sort -u)
    theirs=$(for l in "${libs[@]}"; do sizes "$l"; done | sort -k1,1 -k2,2n | awk '{m[$1] = $2} END {for (n in m) print n, m[n]}' | sort)
    rows=$(join <(echo "$wanted") <(echo "$theirs") | join -a1 -e missing -o 0,1.2,2.2 - <(sizes "$ompi_shim"))
    differ=$(echo "$rows" | awk '$2 != $3')
    if [ "$(echo "$rows" | grep -c .)" -ne "$(echo "$wanted" | grep -c .)" ]; then
        echo "check-exports: not every data symbol of shim/api/ompi-abi.json is in ${libs[*]} (rerun tools/gen_ompi.py --extract)" >&2
        status=1
    elif [ -n "$differ" ]; then
        echo "check-exports: data symbols of libmpicr_ompi.so missing or sized unlike libmpi.so.40's (name, theirs, ours):" >&2
        echo "$differ" | head -20 >&2
        status=1
    else
        echo "check-exports: all $(echo "$wanted" | wc -l) data symbols of Open MPI's mpi.h are exported by libmpicr_ompi.so with the larger of the libmpi.so.40 sizes (${#libs[@]} libraries)"
    fi
fi
# The standard-ABI face: every MPI_/PMPI_ name of the MPICH 5 wheel's libmpi_abi.so.1 (it has no
# data symbols: its predefined handles are integer constants).
abi_shim=target/release/libmpicr_abi.so
abi=.deps/mpich5/lib/libmpi_abi.so.1
if [ ! -f "$abi_shim" ]; then
    echo "check-exports: $abi_shim is missing (run make build)" >&2
    status=1
elif [ ! -f "$abi" ]; then
    echo "check-exports: $abi not found (run make deps)" >&2
    status=1
else
    covers "$abi_shim" "$abi" libmpi_abi.so.1 || status=1
fi
exit $status
