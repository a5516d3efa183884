#!/usr/bin/env bash
# Everything `make test` runs, in order of increasing cost. Each part can also be run alone.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }

step "unit tests (virtid, drain, proto, cli, shim header)"
cargo test --release --workspace --exclude mpicr-tests

step "export check"
scripts/check-exports.sh

step "C programs: native vs libmpicr, both MPICH builds, 1/2/4 ranks"
scripts/test-c.sh

step "mpicr CLI: PMI relay, CRIU, checkpoint protocol, errors, hangs, security, PID namespaces, non-root (64 cases)"
cargo build --release -q -p mpicr-cli --bin mpicr --example fake_agent
cargo test --release -p mpicr-tests --test cli

if [ -x scripts/test-ckpt.sh ]; then
    step "checkpoint/restart under Hydra, and the faults"
    scripts/test-ckpt.sh
    step "renewals: 25 checkpoints of one job, a restart, 10 more (flat images)"
    MPICR_TEST_MODES=renewals SKIP_BUILD=1 scripts/test-ckpt.sh
fi

step "mpi4py's test suite: native vs libmpicr"
scripts/mpi4py-tests.sh
