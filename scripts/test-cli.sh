#!/usr/bin/env bash
# Integration tests of the mpicr CLI not yet ported to the Rust runner (tests/src/cli/, run by
# `cargo test --release -p mpicr-tests --test cli`; the two together are the 64 cases):
#   - with the shim: checkpoint and restart, PID namespaces, the agent's deadlines and panic
#     boundary (test hooks MPICR_TEST_COORD_FAULT, MPICR_TEST_AGENT_PANIC), the control socket
#   - without root (as root only: a test user is created and removed): run, checkpoint, stop and
#     restart with CRIU --unprivileged, no MPI and MPICH 4 with the shim; a CRIU without
#     CAP_CHECKPOINT_RESTORE named in one line before the program runs
# Usage: scripts/test-cli.sh [-k PATTERN]   (from anywhere; SKIP_BUILD=1 to use existing binaries)
# Every run is bounded by a timeout; everything started here is killed and removed at exit.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PATTERN=""
[ "${1:-}" = "-k" ] && PATTERN=${2:-}

M=$ROOT/target/release/mpicr
FAKE=$ROOT/target/release/examples/fake_agent
MPICH5=$ROOT/.deps/mpich5/bin
T=$(mktemp -d "${TMPDIR:-/tmp}/mpicr-test-cli.XXXXXX")
BG=()
cleanup() {
    for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null; done
    [ "$(type -t nr_cleanup)" = function ] && nr_cleanup
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

pass=0 fail=0 skipped=0
note() { echo "     $*"; }
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1: $2"; fail=$((fail + 1)); }
skip() { echo "skip $1: $2"; skipped=$((skipped + 1)); }
selected() { [ -z "$PATTERN" ] || [[ $1 == *$PATTERN* ]]; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release -q -p mpicr-cli --bin mpicr --example fake_agent || { echo "build failed"; exit 1; }
fi

have4=0 have5=0
command -v mpiexec.mpich >/dev/null && command -v mpicc.mpich >/dev/null && have4=1
[ -x "$MPICH5/mpiexec" ] && [ -x "$MPICH5/mpicc" ] && have5=1
criu_ok=0
if [ -x "$ROOT/.deps/criu/criu" ] || [ -n "${MPICR_CRIU:-}" ]; then criu_ok=1; fi

mpi4() { timeout -k 5 "${LIMIT:-60}" mpiexec.mpich "$@"; }
mpi5() { PATH="$MPICH5:$PATH" timeout -k 5 "${LIMIT:-60}" "$MPICH5/mpiexec" "$@"; }

# --- test programs ------------------------------------------------------------------------------
cc -O1 -o "$T/counter" tests/cli-programs/counter.c || { echo "cc failed"; exit 1; }

# --- helpers ------------------------------------------------------------------------------------
# ckpt DIR [ARGS...]: `mpicr checkpoint`, retried while the job is not ready yet.
ckpt() {
    local dir=$1 out rc i
    shift
    for i in $(seq 100); do
        out=$("$M" checkpoint "$@" "$dir" 2>&1)
        rc=$?
        if [ $rc = 0 ]; then
            echo "$out"
            return 0
        fi
        case $out in
        *"cannot checkpoint"* | *"no job is running"* | *"does not answer"* | *"does not exist"*) sleep 0.1 ;;
        *) echo "$out"; return $rc ;;
        esac
    done
    echo "$out"
    return 1
}
# complete FILE RANKS TICKS: every rank printed ticks 1..TICKS exactly once.
complete() {
    local f=$1 ranks=$2 ticks=$3
    awk -v R="$ranks" -v N="$ticks" '$1 == "rank" && $3 == "tick" { seen[$2 " " $4]++ }
        END { for (r = 0; r < R; r++) for (i = 1; i <= N; i++) if (seen[r " " i] != 1) { print "rank " r " tick " i ": " seen[r " " i] + 0 " times"; exit 1 } }' "$f"
}
bg() { "$@" & BG+=($!); }
epochs_complete() { "$M" status "$1" 2>/dev/null | grep -c ' complete '; }

# --- with the real shim, when it is built (MPICH 4.0.2: the namespace renewal) --------------------
build_loop4() {
    [ -x "$T/loop4" ] && return
    cat >"$T/loop.c" <<'EOF2'
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int n = atoi(argv[1]), rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i <= n; i++) {
        int v = rank + i, sum;
        MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (sum != size * i + size * (size - 1) / 2) { printf("rank %d tick %d BAD\n", rank, i); return 1; }
        printf("rank %d tick %d\n", rank, i);
        fflush(stdout);
        usleep(50000);
    }
    MPI_Finalize();
    return 0;
}
EOF2
    mpicc.mpich -o "$T/loop4" "$T/loop.c"
}
if [ $criu_ok = 1 ] && [ $have4 = 1 ] && selected shim-mpich4; then
    if [ -f "$ROOT/target/release/libmpicr.so" ]; then
        build_loop4
        d=$T/shim4
        bg mpi4 -n 2 "$M" run --ckpt-dir "$d" -- "$T/loop4" 60 >"$T/l1.out" 2>"$T/l1.err"
        pid=$!
        ckpt "$d" >/dev/null && ckpt "$d" --stop >/dev/null
        rcs=$?
        wait "$pid"
        rc=$?
        mpi4 -n 2 "$M" restart "$d" >"$T/l2.out" 2>"$T/l2.err"
        rc2=$?
        cat "$T/l1.out" "$T/l2.out" >"$T/l.all"
        if [ $rcs = 0 ] && [ $rc = 0 ] && [ $rc2 = 0 ] && msg=$(complete "$T/l.all" 2 60); then
            ok "shim-mpich4-checkpoint-restart"
        else
            bad "shim-mpich4-checkpoint-restart" "rc=$rcs/$rc/$rc2 $msg"
            tail -5 "$T/l1.err" "$T/l2.err"
        fi
    else
        skip "shim-mpich4-checkpoint-restart" "libmpicr.so not built"
    fi
fi

# With the shim in PID namespaces (MPICR_PIDNS=1; UCX without TCP, see cli/src/pidns.rs): a
# stopped job restarts while a process of ours holds rank 0's original pid.
if [ $criu_ok = 1 ] && [ $have4 = 1 ] && [ "$(id -u)" = 0 ] && selected shim-mpich4-pidns; then
    if [ -f "$ROOT/target/release/libmpicr.so" ]; then
        build_loop4
        d=$T/shimns
        MPICR_PIDNS=1 UCX_TLS=^tcp bg mpi4 -n 2 "$M" run --ckpt-dir "$d" -- "$T/loop4" 60 >"$T/n1.out" 2>"$T/n1.err"
        pid=$!
        ckpt "$d" >/dev/null && ckpt "$d" --stop >/dev/null
        rcs=$?
        wait "$pid"
        rc=$?
        orig=$(grep -o '"pid": [0-9]*' "$d"/epoch-000002/rank-0/rank.json | head -1 | grep -o '[0-9]*$')
        # The next pid the kernel hands out is orig (unless something else takes it first).
        echo $((orig - 1)) >/proc/sys/kernel/ns_last_pid
        sleep 120 &
        holder=$!
        BG+=($holder)
        mpi4 -n 2 "$M" restart "$d" >"$T/n2.out" 2>"$T/n2.err"
        rc2=$?
        kill "$holder" 2>/dev/null
        cat "$T/n1.out" "$T/n2.out" >"$T/n.all"
        if [ "$holder" != "$orig" ]; then
            skip "shim-mpich4-pidns-restart-held-pid" "could not take pid $orig (got $holder)"
        elif [ $rcs = 0 ] && [ $rc = 0 ] && [ $rc2 = 0 ] && grep -q '"pidns": true' "$d"/epoch-000002/rank-0/rank.json &&
            msg=$(complete "$T/n.all" 2 60); then
            ok "shim-mpich4-pidns-restart-held-pid"
        else
            bad "shim-mpich4-pidns-restart-held-pid" "rc=$rcs/$rc/$rc2 $msg"
            tail -5 "$T/n1.err" "$T/n2.err"
        fi
    else
        skip "shim-mpich4-pidns-restart-held-pid" "libmpicr.so not built"
    fi
fi

# With the shim: every failure of a checkpoint leaves the job running with its library renewed
# consistently, and the next checkpoint works. Each case: ENV for the job, the error the first
# checkpoint must report, and whether a second checkpoint must succeed (0 when the coordinator
# is gone).
shim_fault_test() {
    local name=$1 env=$2 want=$3 again=$4 d
    selected "$name" || return
    [ $criu_ok = 1 ] && [ $have4 = 1 ] && [ -f "$ROOT/target/release/libmpicr.so" ] || { skip "$name" "needs MPICH 4, criu and libmpicr.so"; return; }
    build_loop4
    d=$T/$name
    # shellcheck disable=SC2086 # ENV is a list of assignments
    bg env $env timeout -k 5 90 mpiexec.mpich -n 2 "$M" run --ckpt-dir "$d" -- "$T/loop4" 200 >"$T/s1.out" 2>"$T/s1.err"
    local pid=$! o1 r1 o2="" r2=0 rc
    o1=$(ckpt "$d")
    r1=$?
    if [ "$again" = 1 ]; then
        o2=$(ckpt "$d")
        r2=$?
    fi
    wait "$pid"
    rc=$?
    if [ $r1 != 0 ] && grep -q -- "$want" <<<"$o1$(cat "$T/s1.err")" && [ $r2 = 0 ] && [ $rc = 0 ] && complete "$T/s1.out" 2 200 >/dev/null; then
        ok "$name"
    else
        bad "$name" "r1=$r1 r2=$r2 rc=$rc: $o1 / $o2"
        tail -8 "$T/s1.err"
    fi
}
shim_fault_test shim-panic-before-release "MPICR_TEST_AGENT_PANIC=drain:1" "rank 1: internal error in the checkpoint agent: injected panic at drain (at " 1
shim_fault_test shim-panic-after-release "MPICR_TEST_AGENT_PANIC=release:1" "rank 1: internal error in the checkpoint agent: injected panic at release" 1
shim_fault_test shim-deadline-targets "MPICR_TEST_COORD_FAULT=stall:targets MPICR_ALIGN_TIMEOUT=2" "no collective targets from the coordinator within 2 s" 1
shim_fault_test shim-deadline-expected "MPICR_TEST_COORD_FAULT=stall:expected MPICR_ALIGN_TIMEOUT=1" "no expected receives from the coordinator within 4 s" 1
shim_fault_test shim-deadline-release "MPICR_TEST_COORD_FAULT=stall:release MPICR_DRAIN_TIMEOUT=1" "not every rank drained within 2 s; aborted by the coordinator" 1
shim_fault_test shim-deadline-resume "MPICR_TEST_COORD_FAULT=stall:dump MPICR_RESUME_TIMEOUT=2" "no resume from the coordinator within 2 s" 1
shim_fault_test shim-coord-lost-released "MPICR_TEST_COORD_FAULT=vanish:dump" "closed the connection before answering" 0

if [ $have4 = 1 ] && selected shim-ctl-fd; then
    if [ -f "$ROOT/target/release/libmpicr.so" ]; then
        cat >"$T/ctlfd.c" <<'EOF2'
/* After MPI_Init under the shim: is the control socket hidden from the program's children? */
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int flags = fcntl(3, F_GETFD);
    printf("env=%s cloexec=%d\n", getenv("MPICR_CTL_FD") ? "set" : "unset", flags >= 0 && (flags & FD_CLOEXEC) ? 1 : 0);
    MPI_Finalize();
    return 0;
}
EOF2
        mpicc.mpich -o "$T/ctlfd4" "$T/ctlfd.c"
        out=$(mpi4 -n 1 "$M" run --ckpt-dir "$T/ctlfd" -- "$T/ctlfd4" 2>&1)
        rc=$?
        [ $rc = 0 ] && grep -qx "env=unset cloexec=1" <<<"$out" && ok "shim-ctl-fd-not-inherited" || bad "shim-ctl-fd-not-inherited" "rc=$rc: $out"
    else
        skip "shim-ctl-fd-not-inherited" "libmpicr.so not built"
    fi
fi

# --- without root: a dedicated user runs, checkpoints and restarts (CRIU --unprivileged) -----------
# As root only (it creates the user mpicr-tPID, removed at exit with its files and processes).
# The program has no PID namespace of its own then: the restart needs its old ids free.
NR_USER="" NR_DIR=""
nr_cleanup() {
    if [ -n "$NR_USER" ]; then
        # Only the test's own user, created above, runs these.
        pkill -KILL -U "$NR_USER" 2>/dev/null
        sleep 0.2
        userdel "$NR_USER" 2>/dev/null
    fi
    [ -n "$NR_DIR" ] && rm -rf "$NR_DIR"
}
nonroot_test() {
    local u uid gid out rc rc1 rc2 r pid i
    if [ "$(id -u)" != 0 ]; then skip "nonroot" "not root: cannot create the test user"; return; fi
    command -v useradd >/dev/null && command -v setpriv >/dev/null || { skip "nonroot" "useradd or setpriv missing"; return; }
    [ $criu_ok = 1 ] || { skip "nonroot" "no criu"; return; }
    u=mpicr-t$$
    useradd -r -M -d /nonexistent -s /usr/sbin/nologin "$u" || { bad "nonroot" "useradd $u failed"; return; }
    NR_USER=$u
    uid=$(id -u "$u") gid=$(id -g "$u")
    NR_DIR=$(mktemp -d "${TMPDIR:-/tmp}/mpicr-nonroot.XXXXXX")
    chown "$uid:$gid" "$NR_DIR"
    as_u() { timeout -k 5 "${LIMIT:-60}" setpriv --reuid="$uid" --regid="$gid" --init-groups env HOME="$NR_DIR" "$@"; }
    if ! as_u test -x "$M"; then skip "nonroot" "$M is not reachable by other users"; return; fi
    cp "$T/counter" "$NR_DIR/"
    [ $have4 = 1 ] && build_loop4 && cp "$T/loop4" "$NR_DIR/"
    cp "$(readlink -f "$ROOT/.deps/criu/criu" 2>/dev/null || echo /dev/null)" "$NR_DIR/criu-nocap" 2>/dev/null
    chown -R "$uid:$gid" "$NR_DIR"
    cd "$NR_DIR" || return
    # ckpt as the user, retried while the job is not ready yet.
    nr_ckpt() {
        for i in $(seq 100); do
            out=$(as_u "$M" checkpoint "$@" 2>&1) && { echo "$out"; return 0; }
            case $out in *"cannot checkpoint"* | *"no job is running"* | *"does not answer"* | *"does not exist"*) sleep 0.1 ;; *) echo "$out"; return 1 ;; esac
        done
        echo "$out"; return 1
    }

    # The one line naming what is missing, before the program runs.
    if [ -x "$NR_DIR/criu-nocap" ]; then
        out=$(MPICR_CRIU=$NR_DIR/criu-nocap as_u "$M" run --no-mpi --ckpt-dir "$NR_DIR/nocap" -- ./counter 3 2>&1)
        rc=$?
        if [ $rc != 0 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "lacks CAP_CHECKPOINT_RESTORE.*make deps" <<<"$out"; then
            ok "nonroot-missing-capability-named"
        else bad "nonroot-missing-capability-named" "rc=$rc: $out"; fi
    fi
    out=$(as_u "$M" run --no-mpi --ckpt-dir "$NR_DIR/probe" -- true 2>&1)
    if grep -q "lacks\|no_new_privs\|check --unprivileged" <<<"$out"; then
        skip "nonroot-checkpoint-restart" "this machine's CRIU cannot serve a non-root user: $out"
        cd "$ROOT" || return
        return
    fi

    # No MPI: checkpoint, checkpoint --stop, restart; output equal to the uninterrupted run.
    as_u ./counter 60 >"$NR_DIR/ref.out" 2>/dev/null
    as_u "$M" run --no-mpi --ckpt-dir "$NR_DIR/single" -- ./counter 60 >"$NR_DIR/s1.out" 2>"$NR_DIR/s1.err" &
    pid=$!
    BG+=($pid)
    r=$(nr_ckpt "$NR_DIR/single" && nr_ckpt --stop "$NR_DIR/single")
    rc=$?
    wait "$pid"
    rc1=$?
    as_u "$M" restart "$NR_DIR/single" >"$NR_DIR/s2.out" 2>"$NR_DIR/s2.err"
    rc2=$?
    if [ $rc = 0 ] && [ $rc1 = 0 ] && [ $rc2 = 4 ] && grep -q "job stopped" <<<"$r" && cat "$NR_DIR/s1.out" "$NR_DIR/s2.out" | cmp -s - "$NR_DIR/ref.out"; then
        ok "nonroot-no-mpi-checkpoint-restart"
    else bad "nonroot-no-mpi-checkpoint-restart" "ckpt rc=$rc run rc=$rc1 restart rc=$rc2 (want 4): $r $(tail -3 "$NR_DIR/s1.err" "$NR_DIR/s2.err")"; fi
    # What the user's images are: the user's own, private.
    out=$(find "$NR_DIR/single" ! -type l \( ! -user "$uid" -o -perm /077 \) -print | head -3)
    [ -z "$out" ] && ok "nonroot-images-private" || bad "nonroot-images-private" "$out"

    # MPICH 4, 2 ranks, with the shim.
    if [ $have4 = 1 ] && [ -f "$ROOT/target/release/libmpicr.so" ]; then
        as_u mpiexec.mpich -n 2 ./loop4 60 2>/dev/null | sort >"$NR_DIR/lref.out"
        as_u mpiexec.mpich -n 2 "$M" run --ckpt-dir "$NR_DIR/shim4" -- ./loop4 60 >"$NR_DIR/l1.out" 2>"$NR_DIR/l1.err" &
        pid=$!
        BG+=($pid)
        r=$(nr_ckpt "$NR_DIR/shim4" && nr_ckpt --stop "$NR_DIR/shim4")
        rc=$?
        wait "$pid"
        rc1=$?
        as_u mpiexec.mpich -n 2 "$M" restart "$NR_DIR/shim4" >"$NR_DIR/l2.out" 2>"$NR_DIR/l2.err"
        rc2=$?
        if [ $rc = 0 ] && [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ -s "$NR_DIR/lref.out" ] && cat "$NR_DIR/l1.out" "$NR_DIR/l2.out" | sort | cmp -s - "$NR_DIR/lref.out"; then
            ok "nonroot-mpich4-checkpoint-restart"
        else bad "nonroot-mpich4-checkpoint-restart" "ckpt rc=$rc run rc=$rc1 restart rc=$rc2: $r $(tail -3 "$NR_DIR/l1.err" "$NR_DIR/l2.err")"; fi
    else
        skip "nonroot-mpich4-checkpoint-restart" "needs MPICH 4 and libmpicr.so"
    fi
    cd "$ROOT" || return
}
if selected nonroot; then
    nonroot_test
    nr_cleanup
fi

if selected no-strays; then
    sleep 0.3
    strays=$(pgrep -af "$T" | grep -v pgrep)
    [ -z "$strays" ] && ok "no-stray-processes" || bad "no-stray-processes" "$strays"
fi

echo
echo "test-cli: $pass passed, $fail failed, $skipped skipped"
[ $fail = 0 ]
