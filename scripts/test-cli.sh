#!/usr/bin/env bash
# Integration tests of the mpicr CLI not yet ported to the Rust runner (tests/src/cli/, run by
# `cargo test --release -p mpicr-tests --test cli`; the two together are the 64 cases):
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
    [ $have4 = 1 ] && mpicc.mpich -o "$T/loop4" "$ROOT/tests/cli-programs/loop.c" && cp "$T/loop4" "$NR_DIR/"
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
