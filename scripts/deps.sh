#!/usr/bin/env bash
# Installs everything mpicr needs, idempotently and without prompts:
#   - Debian's MPICH 4.0.2 and Open MPI 4.1.4 (runtime + headers)
#   - the PyPI `mpich` 5.x wheel into a venv at .deps/mpich5
#   - Intel MPI 2021.x, the PyPI `impi-rt` and `impi-devel` wheels, into a venv at .deps/impi
#     (MPICH ABI: libmpi.so.12, its own Hydra `mpiexec` and libfabric; `mpicc` needs
#     I_MPI_ROOT=.deps/impi)
#   - a private CRIU 4.1 from Debian 13 (trixie), unpacked under .deps/criu, never installed
#     system-wide (it needs glibc 2.38; the host keeps its own libc), with the file capabilities
#     a non-root user's checkpoints need (setcap from libcap2-bin; patchelf makes it exec'able)
# Usage: scripts/deps.sh            (run from the repository root; `make deps` calls it)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
deps=$root/.deps
mkdir -p "$deps"
export DEBIAN_FRONTEND=noninteractive

need_apt=()
for p in mpich libmpich-dev openmpi-bin libopenmpi-dev python3-venv pkg-config libcap2-bin patchelf; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "deps: apt-get install ${need_apt[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# --- MPICH 5.x wheel in a venv -----------------------------------------------------------
if [ ! -x "$deps/mpich5/bin/mpicc" ]; then
    echo "deps: MPICH 5.x wheel into .deps/mpich5"
    python3 -m venv "$deps/mpich5"
    "$deps/mpich5/bin/pip" install -q 'mpich>=5,<6'
fi

# --- Intel MPI 2021.x wheels in a venv ----------------------------------------------------
# Pinned: 2021.18.1 is the newest that installs from PyPI alone (2021.19.0's impi-rt requires a
# separate `libfabric>=2.6` distribution that PyPI does not have). A venv of another version
# is replaced.
impi_version=2021.18.1
if [ ! -x "$deps/impi/bin/mpicc" ] || [ ! -e "$deps/impi/lib/libmpi.so.12" ] \
    || ! compgen -G "$deps/impi/lib/python3*/site-packages/impi_rt-$impi_version.dist-info" >/dev/null; then
    echo "deps: Intel MPI $impi_version wheels into .deps/impi"
    rm -rf "$deps/impi"
    python3 -m venv "$deps/impi"
    "$deps/impi/bin/python" -m pip install -q "impi-rt==$impi_version" "impi-devel==$impi_version"
fi

# --- private CRIU 4.1 ------------------------------------------------------------------------
"$root/scripts/install-criu.sh"
echo "deps: all present"
