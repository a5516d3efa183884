#!/usr/bin/env bash
# Everything `make test` runs, in order of increasing cost. Each part can also be run alone.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }

step "unit tests (virtid, drain, proto, cli, shim header)"
cargo test --release --workspace --exclude mpicr-tests

step "export check"
scripts/check-exports.sh

step "C programs: native vs libmpicr, MPICH 4.0.2, MPICH 5 and Intel MPI, 1/2/4 ranks"
scripts/test-c.sh

step "mpicr CLI: PMI relay, CRIU, checkpoint protocol, errors, hangs, security, PID namespaces, non-root, restart on another library (76 cases)"
cargo build --release -q -p mpicr-cli --bin mpicr --example fake_agent
cargo test --release -p mpicr-tests --test cli

if [ -x scripts/test-ckpt.sh ]; then
    step "checkpoint/restart under Hydra, and the faults (both MPICH builds)"
    MPICR_TEST_FLAVORS=mpich4,mpich5 scripts/test-ckpt.sh
    # Intel MPI at 2 ranks only (about 2.5 minutes here; 4 ranks pass too and double that).
    step "checkpoint/restart under Intel MPI's Hydra, 2 ranks, and the kill-program fault"
    MPICR_TEST_FLAVORS=impi SKIP_BUILD=1 scripts/test-ckpt.sh /impi/np2/
    # Not Intel MPI: a restart of an epoch taken after a renewal is refused there (README).
    step "renewals: 25 checkpoints of one job, a restart, 10 more (flat images)"
    MPICR_TEST_FLAVORS=mpich4,mpich5 MPICR_TEST_MODES=renewals SKIP_BUILD=1 scripts/test-ckpt.sh
fi

step "mpi4py's test suite: native vs libmpicr"
scripts/mpi4py-tests.sh
