#!/usr/bin/env bash
# MPICH's own test suite (test/mpi of Debian's mpich 4.0.2 source package, unpacked into
# .deps/mpich-src by scripts/deps.sh) against both MPICH builds, natively, under the shim and
# through one checkpoint at a random instant (continue, and stop + restart), with per-test
# results compared (tests/src/conformance/, run by `cargo test --test conformance`):
#   mpich4  Debian's MPICH 4.0.2 (mpicc.mpich / mpiexec.mpich)
#   mpich5  the MPICH 5.x wheel in .deps/mpich5
# The suite is configured once per build into .deps/mpich-tests/<flavor>/ with MPICH's own
# configure (C only: no Fortran or C++; MPI_THREAD_MULTIPLE tests; no spawn tests), and each
# program is built there before it runs (`make PROGRAM`, as MPICH's runtests does).
#
# Usage: scripts/conformance.sh [--select ci] [FILTER...] [--dirs attr,coll,...]
#            [--modes native,shim,checkpoint] [--max-ranks N] [--timeout S] [--ckpt-min S]
#            [--out DIR]   (results: DIR/results.tsv, DIR/failures.txt; default target/conformance)
#   scripts/conformance.sh                  the whole suite (`make conformance`): the
#                                           directories of issue 14, entries of at most 4
#                                           ranks, both builds, checkpoints for the programs
#                                           that run at least 3 s natively
#   scripts/conformance.sh --select ci      the selection of scripts/conformance/ci.txt
#                                           (`make test`)
#   scripts/conformance.sh rma/win          the tests whose id contains rma/win
#   MPICR_TEST_FLAVORS=mpich5 scripts/conformance.sh --modes native,shim
# Lists (scripts/conformance/): exclude.txt (tests that fail natively, not run, each with its
# reason), known-issue14.txt (shim and checkpoint failures issue 14 lists: reported, not
# failing the run), ci.txt (the selection). Results: target/conformance/results.tsv (every
# run) and failures.txt (the full report of every failure).
# Exit status: 0 when no test that passes natively fails under the shim or through a
# checkpoint (beyond known-issue14.txt), 1 when one does, 2 on a setup problem and when
# nothing was compared (no test chosen, or none built or passed natively).
# SKIP_BUILD=1 uses the existing target/release/{mpicr,libmpicr.so}.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

src=$root/.deps/mpich-src/mpich-4.0.2/test/mpi
if [ ! -x "$src/configure" ]; then
    echo "conformance: MPICH's test suite is not in .deps/mpich-src: run scripts/deps.sh (make deps)" >&2
    exit 2
fi
# (its real path: worktrees that share .deps through a link then agree on the build's stamp
# below, instead of configuring the shared build tree again for each other)
src=$(readlink -f "$src")
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    # (two commands: `--bin` would restrict the first to the CLI, leaving the face unbuilt)
    cargo build --release -q -p mpicr-face-mpich
    cargo build --release -q -p mpicr-cli --bin mpicr
fi

# Configure the suite for each build (once; again when the compiler wrapper or the source's path
# changes).
flavors=${MPICR_TEST_FLAVORS:-mpich4,mpich5}
for flavor in ${flavors//,/ }; do
    case $flavor in
        mpich4) cc=$(command -v mpicc.mpich || true); mpiexec=$(command -v mpiexec.mpich || true) ;;
        mpich5) cc=$root/.deps/mpich5/bin/mpicc; mpiexec=$root/.deps/mpich5/bin/mpiexec ;;
        *) echo "conformance: MPICR_TEST_FLAVORS: \`$flavor\` is not mpich4 or mpich5" >&2; exit 2 ;;
    esac
    if [ -z "$cc" ] || [ ! -x "$cc" ]; then
        echo "conformance: no compiler wrapper for $flavor: run scripts/deps.sh (make deps)" >&2
        exit 2
    fi
    # (through the real path, so that every worktree sharing .deps agrees on the stamp)
    cc=$(readlink -f "$cc"); mpiexec=$(readlink -f "$mpiexec")
    build=$root/.deps/mpich-tests/$flavor
    # (the source's path too: configure writes it into every Makefile)
    want="mpich-src $(cat "$root/.deps/mpich-src/VERSION") at $src cc $cc: $("$cc" -show)"
    if [ "$(cat "$build/.configured" 2>/dev/null)" != "$want" ]; then
        echo "conformance: configuring MPICH's test suite for $flavor in .deps/mpich-tests/$flavor (about a minute)"
        rm -rf "$build"
        mkdir -p "$build"
        if ! (cd "$build" && CC=$cc MPICC=$cc MPIEXEC=$mpiexec "$src/configure" \
                --disable-fortran --disable-cxx --disable-spawn --enable-threads=multiple \
                > configure.log 2>&1); then
            tail -n 20 "$build/configure.log" >&2
            echo "conformance: configuring for $flavor failed (log: .deps/mpich-tests/$flavor/configure.log)" >&2
            exit 2
        fi
        echo "$want" > "$build/.configured"
    fi
done

export MPICR_TEST_FLAVORS=$flavors
exec cargo test --release -q -p mpicr-tests --test conformance -- "$@"
