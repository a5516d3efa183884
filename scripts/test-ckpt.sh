#!/usr/bin/env bash
# Checkpoint/restart tests under Hydra: the C programs that opt in (`ckpt-ranks` in their
# metadata line: a ring of Sendrecv, the 2-D halo exchange, the master/worker farm, collectives
# on split communicators, derived datatypes, persistent requests, persistent collectives,
# partitioned requests, MPI-IO files, RMA windows, threads inside MPI, and the overlapped
# nonblocking collectives at 4 ranks) x {mpich4, mpich5, impi, ompi-on-mpich4, abi-on-mpich4; on
# request ompi5 and ompi4, under Open MPI's own mpirun, and abi-on-mpich5} x their checkpoint
# rank counts x the checkpoint modes of the harness (tests/src/ckpt.rs):
#   continue        `mpicr checkpoint` at a random instant; the job goes on; output = native
#   stop-restart    `mpicr checkpoint --stop` at a random instant, `mpicr restart` in a new
#                   mpiexec; output before + after = native
#   older-epoch     a checkpoint at one pause point, --stop at a later one, `restart --epoch 1`:
#                   its output = the native output after the first cut
#   restart-twice   --stop at a pause point, two restarts from it, each = native after the cut
#   restart-errors  restarts with the wrong rank count, a missing epoch, a missing or foreign
#                   directory, and (ckpt_mpiio) an MPI file of the program removed or truncated
#                   fail fast with a clear message; a good restart still works
#   faults          (ckpt_ring at 2 ranks; MPICH 5: kill-program only) a good epoch 1, then the
#                   program, a keeper, the coordinator SIGKILLed mid-checkpoint, ENOSPC on a
#                   tmpfs, another user's `mpicr status`, a directory owned by nobody, a held
#                   PID, a truncated manifest, a corrupt image byte: each gives its one-line
#                   message, and epoch 1 restarts with the native output (MPICR_TEST_FAULTS=a,b
#                   selects; the tmpfs, chown and PID faults need root)
# Not in the default set (MPICR_TEST_MODES=checkpoint):
#   renewals        one job checkpointed MPICR_TEST_RENEWALS=BEFORE,AFTER times (25,10) around
#                   a restart: every renewal works, images do not grow
#   soak            MPICR_SOAK_COUNT (1000) or MPICR_SOAK_SECONDS runs drawn at random from the
#                   continue and stop-restart cases (filters apply), a summary of checkpoints,
#                   restarts, mismatches, hangs, failures and the seeds of failed runs
# Every launch and command is bounded in time; processes, files in the working directory and
# in /dev/shm left behind fail a case. A failure shows the diff, the keepers' stderr,
# `mpicr status` and the tails of CRIU's dump.log/restore.log, and the seed that repeats it.
#
# Usage: scripts/test-ckpt.sh [FILTER...] [--skip S] [--exact] [--list]
#   scripts/test-ckpt.sh                         everything
#   scripts/test-ckpt.sh app_halo2d/mpich5/np4    cases whose name (test/flavor/npN/mode) contains it
#   MPICR_TEST_FLAVORS=mpich4 MPICR_TEST_MODES=continue,stop-restart scripts/test-ckpt.sh
#   MPICR_TEST_SEED=123 scripts/test-ckpt.sh ...  repeat the random choices of a failed run
#   MPICR_TEST_MODES=soak MPICR_SOAK_COUNT=1000 scripts/test-ckpt.sh   the soak (make soak)
#   MPICR_TEST_VERBOSE=1                          say what each case did, also when it passes
#   MPICR_TEST_KEEP=1                             keep the scratch directories (images, logs)
# SKIP_BUILD=1 uses the existing target/release/{mpicr,libmpicr.so,libmpicr_ompi.so}.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    # (two commands: `--bin` would restrict the first to the CLI, leaving the faces unbuilt)
    cargo build --release -q -p mpicr-face-mpich -p mpicr-face-ompi -p mpicr-face-abi
    cargo build --release -q -p mpicr-cli --bin mpicr
fi
if [ -z "${MPICR_CRIU:-}" ] && [ ! -x .deps/criu/criu ] && ! command -v criu >/dev/null; then
    echo "test-ckpt: no criu (run scripts/deps.sh, or set MPICR_CRIU)" >&2
    exit 1
fi

export MPICR_TEST_MODES=${MPICR_TEST_MODES:-checkpoint}
# Jobs one at a time: MPICH ranks busy-poll, and 4 ranks already oversubscribe 2 cores.
exec cargo test --release -p mpicr-tests --test ctests -- "$@"
