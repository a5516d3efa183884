#!/usr/bin/env bash
# mpicr benchmarks; `make bench` runs this. Prints tables; never fails because something is slow,
# but fails (non-zero, with the reason and the log tail) when a run fails or a needed file is
# missing.
#
#   Section 1, interposition overhead: bench/mpibench.c on 2 ranks bound to cores (ping-pong
#     latency 0 B..1 MiB, windowed Isend/Irecv bandwidth, an MPI_Allreduce loop on split
#     communicators, ns per cheap call), natively and with LD_PRELOAD=target/release/libmpicr.so
#     on every rank, on Debian's MPICH 4 and the MPICH 5 wheel. Native and shim runs alternate
#     (ABBA order); ratios are medians of the per-pair ratios, with their min..max.
#   Section 2, checkpoint cost: 4 processes (BENCH_CKPT_RANKS) holding 64 MiB and 512 MiB each.
#     - reference: bench/mem_hold.c (no MPI) dumped by bare CRIU, 4 dumps at once
#       (ckpt_reference_criu);
#     - mpicr: bench/ckpt_mem.c under `mpicr run`, `mpicr checkpoint`, `--stop`, `mpicr restart`
#       (ckpt_mpicr), skipped with "not available yet" while target/release/mpicr has no
#       `checkpoint` subcommand. A failing mpicr step is shown, marked FAILED in the table, and
#       makes the script exit 1 after the tables are printed.
#     - restart: `mpicr restart` (launch to running) next to bare CRIU's restore of the same
#       memory plus one MPI_Init of the same job (bench/init_time.c), and the ratio; the bare
#       images are also restored with CRIU lazy pages (`criu lazy-pages` daemons, userfaultfd),
#       and mpicr's epoch again with `mpicr restart --lazy-pages` (BENCH_LAZY=0 skips both).
#     - incremental: 2 ranks of tests/cli-programs/dirty.c rewriting one contiguous tenth of
#       their memory every 50 ms, under `mpicr run` and under `mpicr run --incremental` (one
#       MPI flavor): three checkpoints 2 s apart (the third `--stop`); the stop time and bytes of
#       the second and third, and the ratio incremental/full (goal 0.2; ckpt_incremental).
#   Section 3, scaling: checkpoint cost at 1, 2, 4, 8 ranks (64 MiB each; 8 oversubscribes) and
#     at 64..512 MiB per process (2 ranks), bare CRIU next to mpicr (one MPI flavor), with the
#     fitted slopes (ms per rank, ms per GiB) and ms per GiB written at each point.
#
# usage: scripts/bench.sh [--quick] [--native-only] [--section 1|2|3]
#   --quick        small and fast (1 repetition, short blocks, 64 MiB only; section 3 at 1 and 2
#                  ranks, 64 and 128 MiB): for tests, not numbers (about a minute)
#   --native-only  section 1 without the shim (libmpicr.so is otherwise required)
#   --section N    run only section N
# environment (optional):
#   BENCH_REPS=8          section 1 runs per flavor and mode (an even number: ABBA pairs)
#   BENCH_BIND=core       section 1 rank binding (mpiexec -bind-to; "none": unbound)
#   BENCH_SCALE=1         section 1 block length factor (mpibench SCALE)
#   BENCH_FLAVORS="mpich4 mpich5"
#   BENCH_CKPT_SIZES="64 512"   MiB per process
#   BENCH_CKPT_REPS=3     section 2 repetitions
#   BENCH_CKPT_RANKS=4    section 2 processes (bare CRIU and mpicr alike; 2 leaves a core per rank)
#   BENCH_CKPT_FLAVORS="mpich4 mpich5"   MPI libraries for the mpicr measurement
#   BENCH_INCR=1          section 2 also measures incremental checkpoints (ckpt_incremental)
#   BENCH_INCR_FLAVOR=mpich4   MPI library for it
#   BENCH_WARM=1          sections 2 and 3 warm the machine's free memory before each measured
#                         dump (warm_memory; 0: dumps meet whatever memory the VM has)
#   BENCH_LAZY=1          section 2 also restores the bare-CRIU images with lazy pages, and
#                         mpicr's with `mpicr restart --lazy-pages`
#   BENCH_SCALE_RANKS="1 2 4 8"  BENCH_SCALE_MIBS="64 256 512"  BENCH_SCALE_REPS=2
#   BENCH_SCALE_BIG="1024 2048"  opt-in: larger sizes appended to the memory series (2 ranks hold
#                         2 x 2 GiB, and as much goes to disk per dump: mind the machine)
#   BENCH_SCALE_FLAVOR=mpich4    MPI library for section 3
#   MPICR_SO, MPICR       other paths for libmpicr.so and the mpicr CLI (MPICR_SO is also
#                         handed to mpicr as MPICR_SHIM)
# output: the tables on stdout and in target/bench/results.txt; raw numbers in target/bench/raw.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
t_start=$(date +%s.%N)

quick=0 native_only=0 only_section=""
while [ $# -gt 0 ]; do
    case $1 in
        --quick) quick=1 ;;
        --native-only) native_only=1 ;;
        --section) only_section=${2:-}; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done
case $only_section in ""|1|2|3) ;; *) echo "bench: --section takes 1, 2 or 3" >&2; exit 2 ;; esac

if [ $quick = 1 ]; then
    reps=${BENCH_REPS:-1} scale=${BENCH_SCALE:-0.1}
    ckpt_sizes=${BENCH_CKPT_SIZES:-64} ckpt_reps=${BENCH_CKPT_REPS:-1}
    scale_ranks=${BENCH_SCALE_RANKS:-"1 2"} scale_mibs=${BENCH_SCALE_MIBS:-"64 128"}
    scale_reps=${BENCH_SCALE_REPS:-1}
else
    reps=${BENCH_REPS:-8} scale=${BENCH_SCALE:-1}
    ckpt_sizes=${BENCH_CKPT_SIZES:-"64 512"} ckpt_reps=${BENCH_CKPT_REPS:-3}
    scale_ranks=${BENCH_SCALE_RANKS:-"1 2 4 8"} scale_mibs=${BENCH_SCALE_MIBS:-"64 256 512"}
    scale_reps=${BENCH_SCALE_REPS:-2}
fi
scale_rank_mib=64
scale_mibs="$scale_mibs ${BENCH_SCALE_BIG:-}"
scale_flavor=${BENCH_SCALE_FLAVOR:-mpich4}
lazy=${BENCH_LAZY:-1}
warm=${BENCH_WARM:-1}
incr=${BENCH_INCR:-1}
incr_flavor=${BENCH_INCR_FLAVOR:-mpich4}
flavors=${BENCH_FLAVORS:-"mpich4 mpich5"}
bind=${BENCH_BIND:-core}
ckpt_flavors=${BENCH_CKPT_FLAVORS:-"mpich4 mpich5"}
ckpt_ranks=${BENCH_CKPT_RANKS:-4}
shim_so=${MPICR_SO:-$root/target/release/libmpicr.so}
mpicr=${MPICR:-$root/target/release/mpicr}
if [ -n "${MPICR_SO:-}" ]; then export MPICR_SHIM=$MPICR_SO; fi
criu=$root/.deps/criu/criu
out=$root/target/bench
raw=$out/raw.txt
results=$out/results.txt

# Bounds on every wait (seconds).
T_MPIBENCH=180      # one mpibench run
T_READY=120         # processes allocating and touching their memory
T_CRIU=300          # one criu dump or restore
T_MPICR=300         # one mpicr command
T_RESUME=60         # from `mpicr restart` to the program running again

say() { echo "bench: $*" >&2; }
die() { echo "bench: error: $*" >&2; exit 1; }
now() { date +%s.%N; }
ms_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", (b - a) * 1000 }'; }
# tail_log FILE: shows the last lines of a log on stderr.
tail_log() {
    if [ -f "$1" ]; then
        { echo "---- last lines of $(basename "$1") ----"; tail -n 30 "$1"; echo "----"; } >&2
    fi
}

failures=()
mkdir -p "$out"
scratch=$(mktemp -d "$out/scratch.XXXXXX")
: > "$raw"
rm -f "$results"
load0=$(cut -d' ' -f1-3 /proc/loadavg)

# --- processes we started ----------------------------------------------------------------------
# Every process (or process group made by `timeout`) this script starts is tracked by PID while
# it may be alive, and untracked once it is known to be gone, so that cleanup never signals a
# PID that has since been reused by someone else.
declare -A own_pids=() own_groups=()
track() { own_pids[$1]=1; }
track_group() { own_groups[$1]=1; }
# alive PID: the process exists and is not a zombie.
alive() { kill -0 "$1" 2>/dev/null && [ "$(sed -n 's/^.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
# stop_pid PID: TERM, then KILL, each with a bounded wait; reaps our own children; untracks.
# A zombie (a restored process, whose parent is init) counts as gone. Only a process whose
# command line carries this run's scratch path is signalled (all of ours do), so a PID that
# was freed and reused by someone else is left alone.
stop_pid() {
    local pid=$1 i sig
    if alive "$pid" && ! grep -qaF -- "$scratch/" "/proc/$pid/cmdline" 2>/dev/null; then
        unset "own_pids[$pid]"
        return 0
    fi
    for sig in TERM KILL; do
        alive "$pid" && { kill -s "$sig" "$pid" 2>/dev/null || true; }
        for i in $(seq 50); do
            alive "$pid" || break
            sleep 0.1
        done
        if ! alive "$pid"; then
            wait "$pid" 2>/dev/null || true
            unset "own_pids[$pid]"
            return 0
        fi
    done
    say "warning: process $pid did not exit"
}
# stop_programs_with TOKEN: stops (TERM, then KILL) every process whose command line contains
# TOKEN, a path inside this run's mktemp scratch directory that only processes started by this
# script carry. It catches ranks that outlive their keeper or launcher, e.g. ranks CRIU restored
# before the restore of another rank failed (they are reparented to init, and a rank frozen
# mid-checkpoint blocks SIGTERM). Each is signalled by its PID.
stop_programs_with() {
    local token=$1 d pid
    for d in /proc/[0-9]*; do
        pid=${d#/proc/}
        [ "$pid" != $$ ] || continue
        grep -qaF -- "$token" "$d/cmdline" 2>/dev/null || continue
        say "stopping leftover process $pid: $(tr '\0' ' ' <"$d/cmdline" 2>/dev/null | cut -c1-120)"
        stop_pid "$pid"
    done
}
# start_job SECONDS OUTFILE CMD...: runs CMD in the background under `timeout` (which gives it a
# process group of its own), stdin from /dev/null, stdout+stderr to OUTFILE; sets $job.
start_job() {
    local secs=$1 log=$2
    shift 2
    : >"$log"   # exists before the job starts, for the callers that poll it
    env -u LD_PRELOAD timeout -k 5 "$secs" "$@" </dev/null >>"$log" 2>&1 &
    job=$!
    track_group "$job"
}
# wait_line LOG PATTERN SECONDS WHAT: waits until the job of start_job writes a line matching
# PATTERN to LOG; dies (with the log's tail) when the job ends first or after SECONDS.
wait_line() {
    local log=$1 pat=$2 secs=$3 what=$4 waited=0
    until grep -q "$pat" "$log"; do
        alive "$job" || { tail_log "$log"; die "$what ended before a line '$pat'"; }
        [ $waited -lt $((secs * 10)) ] || { tail_log "$log"; die "$what: no line '$pat' after ${secs}s"; }
        sleep 0.1; waited=$((waited + 1))
    done
}
# wait_group PID: waits for a job of start_job (bounded by its timeout) and untracks it.
# Returns the job's exit status (124: timed out).
wait_group() {
    local rc=0
    wait "$1" || rc=$?
    unset "own_groups[$1]"
    return $rc
}
# stop_group PID: ends a job of start_job. TERM goes to its whole group (timeout and, e.g.,
# mpiexec, which then ends its proxies and ranks: Hydra puts those in sessions of their own);
# KILL follows after a bounded wait.
stop_group() {
    local p=$1 i
    kill -s TERM -- "-$p" 2>/dev/null || true
    for i in $(seq 100); do alive "$p" || break; sleep 0.1; done
    kill -s KILL -- "-$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
    unset "own_groups[$p]"
}
cleanup() {
    local rc=$? p
    trap - EXIT INT TERM
    for p in "${!own_groups[@]}"; do stop_group "$p"; done
    for p in "${!own_pids[@]}"; do stop_pid "$p"; done
    # Everything this run started carries its scratch path in its arguments: a safety net.
    stop_programs_with "$scratch/"
    [ -n "${in_subshell:-}" ] || rm -rf "$scratch"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- MPI flavors ---------------------------------------------------------------------------
flavor_cc() { case $1 in mpich4) echo mpicc.mpich ;; mpich5) echo "$root/.deps/mpich5/bin/mpicc" ;; *) die "unknown MPI flavor '$1'" ;; esac; }
flavor_mpiexec() { case $1 in mpich4) echo mpiexec.mpich ;; mpich5) echo "$root/.deps/mpich5/bin/mpiexec" ;; *) die "unknown MPI flavor '$1'" ;; esac; }
flavor_version() {
    local v
    case $1 in mpich4) v=$(mpichversion 2>/dev/null) ;; mpich5) v=$("$root/.deps/mpich5/bin/mpichversion" 2>/dev/null) ;; esac
    awk '/^MPICH Version:/ { print $3; exit }' <<<"$v"
}
flavor_name() {
    case $1 in
        mpich4) echo "MPICH $(flavor_version mpich4) (Debian: mpicc.mpich, mpiexec.mpich)" ;;
        mpich5) echo "MPICH $(flavor_version mpich5) (PyPI wheel in .deps/mpich5)" ;;
    esac
}

# build_flavor FLAVOR: compiles the MPI benchmarks into target/bench/FLAVOR/ (once per run).
declare -A built=()
build_flavor() {
    local f=$1 cc
    [ -z "${built[$f]:-}" ] || return 0
    built[$f]=1
    cc=$(flavor_cc "$f")
    command -v "$cc" >/dev/null 2>&1 || die "$f: compiler '$cc' not found (run: make deps)"
    command -v "$(flavor_mpiexec "$f")" >/dev/null 2>&1 || die "$f: launcher $(flavor_mpiexec "$f") not found (run: make deps)"
    mkdir -p "$out/$f"
    "$cc" -O2 -Wall -o "$out/$f/mpibench" bench/mpibench.c || die "$f: building bench/mpibench.c failed"
    "$cc" -O2 -Wall -o "$out/$f/ckpt_mem" bench/ckpt_mem.c || die "$f: building bench/ckpt_mem.c failed"
    "$cc" -O2 -Wall -o "$out/$f/init_time" bench/init_time.c || die "$f: building bench/init_time.c failed"
}

# ============================== Section 1: interposition overhead ===========================

# run_mpibench FLAVOR MODE REP: one 2-rank run; appends its results to the raw file.
run_mpibench() {
    local f=$1 mode=$2 rep=$3 log rc t0 preload=()
    log=$scratch/mpibench-$f-$mode-$rep.log
    [ "$mode" = shim ] && preload=(-genv LD_PRELOAD "$shim_so")
    [ "$bind" = none ] || preload+=(-bind-to "$bind")
    t0=$(now)
    rc=0
    start_job "$T_MPIBENCH" "$log" "$(flavor_mpiexec "$f")" -n 2 "${preload[@]}" "$out/$f/mpibench" "$scale"
    wait_group "$job" || rc=$?
    if [ $rc -ne 0 ] || ! grep -q '^mpibench done$' "$log"; then
        tail_log "$log"
        [ $rc -eq 124 ] && die "section 1: $f $mode run $rep timed out after ${T_MPIBENCH}s"
        die "section 1: $f $mode run $rep failed (exit status $rc)"
    fi
    local want=no
    [ "$mode" = shim ] && want=yes
    grep -q "^mpibench shim $want\$" "$log" || {
        tail_log "$log"
        die "section 1: $f $mode run $rep: libmpicr mapped into the ranks should be '$want' but is not"
    }
    awk -v f="$f" -v m="$mode" -v r="$rep" '$1 == "mpibench" && NF == 4 { print "s1", f, m, r, $2, $3, $4 }' "$log" >> "$raw"
    say "section 1: $f $mode run $rep/$reps ok ($(ms_since "$t0") ms)"
}

section1() {
    local f rep
    if [ $native_only = 1 ]; then
        say "section 1: --native-only: the shim is not measured"
    else
        echo "meta shim ${shim_so#"$root"/} ($(stat -c %s "$shim_so") bytes, $(date -r "$shim_so" '+%F %T'))" >> "$raw"
    fi
    echo "meta reps $reps" >> "$raw"
    echo "meta bind $bind" >> "$raw"
    for rep in $(seq "$reps"); do
        for f in $flavors; do
            # ABBA: odd runs measure native first, even runs the shim first.
            if [ $native_only = 1 ]; then
                run_mpibench "$f" native "$rep"
            elif [ $((rep % 2)) = 1 ]; then
                run_mpibench "$f" native "$rep"; run_mpibench "$f" shim "$rep"
            else
                run_mpibench "$f" shim "$rep"; run_mpibench "$f" native "$rep"
            fi
        done
    done
}

# ============================== Section 2: checkpoint cost ===================================

# ckpt_reference_criu MIB REP [NPROC]: one repetition of the bare-CRIU reference. Starts NPROC
# (default 4) plain processes holding MIB MiB each, dumps them all at once with
# --leave-running, kills them, restores them all at once with `criu restore -d`, checks they
# live, kills them. Appends stop_ms (longest "Frozen time" of the dumps), dump_ms (wall time of
# the concurrent dumps), bytes (pages written x page size) and restore_ms (wall time of the
# concurrent restores) to the raw file. Restored processes keep their PIDs, hence the kill
# first.
ckpt_reference_criu() {
    local mib=$1 rep=$2 n=${3:-4} tag=${4:-s2} i pid t0 dump_ms restore_ms stop bytes pagesz key
    pagesz=$(getconf PAGESIZE)
    key=$mib
    [ "$tag" = s2 ] || key=${n}x$mib
    local dir=$scratch/criu-$tag-$key-$rep pids=() dpids=() waited fr pg lazy_ms="" lazy_done_ms=""
    mkdir -p "$dir"
    for i in $(seq 0 $((n - 1))); do
        mkdir -p "$dir/img$i"
        # Its own session (no --shell-job needed); no tty, stdio on files that outlive it.
        setsid "$out/mem_hold" "$mib" 600 "$dir/ready$i" </dev/null >/dev/null 2>"$dir/err$i" &
        track "$!"
    done
    for i in $(seq 0 $((n - 1))); do
        waited=0
        while [ ! -s "$dir/ready$i" ]; do
            [ $waited -lt $((T_READY * 10)) ] || { tail_log "$dir/err$i"; die "$tag: mem_hold $i ($mib MiB) not ready after ${T_READY}s"; }
            sleep 0.1; waited=$((waited + 1))
        done
        pid=$(awk '{print $2}' "$dir/ready$i")
        pids+=("$pid")
        track "$pid"
    done

    # Dump all at once, as the keepers of a 4-rank job would.
    warm_memory $((n * mib * 11 / 10))
    t0=$(now)
    for i in $(seq 0 $((n - 1))); do
        start_job "$T_CRIU" "$dir/dstats$i" "$criu" dump -t "${pids[$i]}" -D "$dir/img$i" \
            --leave-running --display-stats -o dump.log
        dpids+=("$job")
    done
    for i in $(seq 0 $((n - 1))); do
        wait_group "${dpids[$i]}" || { tail_log "$dir/img$i/dump.log"; die "$tag: criu dump of mem_hold $i ($mib MiB) failed"; }
    done
    dump_ms=$(ms_since "$t0")
    stop=0 bytes=0
    for i in $(seq 0 $((n - 1))); do
        fr=$(awk -F': *' '/^Frozen time/ { print $2 + 0 }' "$dir/dstats$i")
        pg=$(awk -F': *' '/^Memory pages written/ { print $2 + 0 }' "$dir/dstats$i")
        [ -n "$fr" ] && [ -n "$pg" ] || { cat "$dir/dstats$i" >&2; die "$tag: no dump statistics from criu"; }
        stop=$(awk -v a="$stop" -v b="$fr" 'BEGIN { print (b / 1000 > a) ? b / 1000 : a }')
        bytes=$((bytes + pg * pagesz))
    done

    # The originals must be gone (and reaped) before their PIDs can be restored; the
    # restored processes will carry the same PIDs, tracked again at once.
    for pid in "${pids[@]}"; do stop_pid "$pid"; done
    for pid in "${pids[@]}"; do track "$pid"; done
    t0=$(now)
    dpids=()
    for i in $(seq 0 $((n - 1))); do
        start_job "$T_CRIU" "$dir/rstats$i" "$criu" restore -d -D "$dir/img$i" --display-stats -o restore.log
        dpids+=("$job")
    done
    for i in $(seq 0 $((n - 1))); do
        wait_group "${dpids[$i]}" || { tail_log "$dir/img$i/restore.log"; die "$tag: criu restore of mem_hold $i ($mib MiB) failed"; }
    done
    restore_ms=$(ms_since "$t0")
    for pid in "${pids[@]}"; do
        alive "$pid" || die "$tag: restored mem_hold $pid is not running"
    done
    for pid in "${pids[@]}"; do stop_pid "$pid"; done
    for pid in "${pids[@]}"; do track "$pid"; done
    if [ "$tag" = s2 ] && [ "$lazy" = 1 ]; then ckpt_reference_lazy; fi
    for pid in "${pids[@]}"; do stop_pid "$pid"; done
    rm -rf "$dir"
    {
        echo "$tag criu $key $rep stop_ms $stop"
        echo "$tag criu $key $rep dump_ms $dump_ms"
        echo "$tag criu $key $rep bytes $bytes"
        echo "$tag criu $key $rep restore_ms $restore_ms"
        [ -z "$lazy_ms" ] || echo "$tag criu $key $rep lazy_restore_ms $lazy_ms"
        [ -z "$lazy_done_ms" ] || echo "$tag criu $key $rep lazy_done_ms $lazy_done_ms"
    } >> "$raw"
    say "$tag: bare CRIU $n x $mib MiB run $rep/$(reps_of "$tag"): stop ${stop} ms, dump ${dump_ms} ms, $((bytes >> 20)) MiB, restore ${restore_ms} ms${lazy_ms:+, lazy restore $lazy_ms ms (all pages in after $lazy_done_ms ms)}"
}

# ckpt_reference_lazy: (inside ckpt_reference_criu, whose variables it uses) restores the same
# images again with CRIU lazy pages: one `criu lazy-pages` daemon per image directory serves the
# memory through userfaultfd while the process runs. Sets lazy_ms (wall time until every
# `criu restore --lazy-pages -d` returned: the processes run) and lazy_done_ms (until every
# daemon exited: all pages are in). A failure is reported and leaves both empty, since lazy
# pages are a measurement here, not something mpicr depends on.
ckpt_reference_lazy() {
    local i lpids=() rpids=() ok=1 t0
    # The killed restored processes are init's children: their PIDs are free only once init has
    # reaped them (a zombie still holds its PID, and CRIU restores the same PIDs).
    for pid in "${pids[@]}"; do
        for _ in $(seq 200); do [ -e "/proc/$pid" ] || break; sleep 0.05; done
    done
    for i in $(seq 0 $((n - 1))); do
        start_job "$T_CRIU" "$dir/lazyd$i" "$criu" lazy-pages -D "$dir/img$i" -o lazy-pages.log
        lpids+=("$job")
    done
    # The daemons listen on a socket in their image directories; wait until each exists.
    for i in $(seq 0 $((n - 1))); do
        for _ in $(seq 100); do
            ls "$dir/img$i" | grep -q 'lazy-pages.socket' && break
            sleep 0.05
        done
    done
    t0=$(now)
    for i in $(seq 0 $((n - 1))); do
        start_job "$T_CRIU" "$dir/lrstats$i" "$criu" restore -d --lazy-pages -D "$dir/img$i" -o restore-lazy.log
        rpids+=("$job")
    done
    for i in $(seq 0 $((n - 1))); do
        wait_group "${rpids[$i]}" || { ok=0; tail_log "$dir/img$i/restore-lazy.log"; }
    done
    [ $ok = 1 ] && lazy_ms=$(ms_since "$t0")
    for i in $(seq 0 $((n - 1))); do
        if [ $ok = 1 ]; then
            wait_group "${lpids[$i]}" || { ok=0; tail_log "$dir/img$i/lazy-pages.log"; }
        else
            stop_group "${lpids[$i]}"
        fi
    done
    if [ $ok = 1 ]; then
        lazy_done_ms=$(ms_since "$t0")
        for pid in "${pids[@]}"; do alive "$pid" || { ok=0; say "lazy: restored mem_hold $pid is not running"; }; done
    fi
    [ $ok = 1 ] || { lazy_ms="" lazy_done_ms=""; say "section 2: CRIU lazy-pages restore failed (shown above); not measured"; }
}

# reps_of TAG: the number of repetitions of section TAG (s2 or s3), for progress messages.
reps_of() { if [ "$1" = s2 ]; then echo "$ckpt_reps"; else echo "$scale_reps"; fi; }

# mpicr_has_checkpoint: whether the mpicr CLI exists and knows `checkpoint`.
mpicr_has_checkpoint() {
    [ -x "$mpicr" ] || return 1
    timeout 10 "$mpicr" checkpoint --help >/dev/null 2>&1 && return 0
    grep -qw checkpoint <<<"$(timeout 10 "$mpicr" --help 2>&1)"
}

# to_ms: the first duration on stdin -> milliseconds; empty when it cannot tell. Understands
# mpicr's format_duration ("0.123s", "2m05s", "1h02m") and "12.5 ms", "800us".
to_ms() {
    awk '{ if (match($0, /[0-9]+h[0-9]+m/)) { t = substr($0, RSTART, RLENGTH); split(t, a, "h");
               printf "%.1f", (a[1] * 3600 + (a[2] + 0) * 60) * 1000; exit }
           if (match($0, /[0-9]+m[0-9]+s/)) { t = substr($0, RSTART, RLENGTH); split(t, a, "m");
               printf "%.1f", (a[1] * 60 + (a[2] + 0)) * 1000; exit }
           if (match($0, /[0-9.]+ *(us|µs|ms|s)/)) { t = substr($0, RSTART, RLENGTH); v = t + 0;
               if (t ~ /us|µs/) v /= 1000; else if (t ~ /ms/) v += 0; else v *= 1000; printf "%.1f", v; exit } }'
}
# to_bytes "268435456 bytes" | "256 MiB" | "1.5 GiB" -> bytes; empty when it cannot tell.
to_bytes() {
    awk '{ if (match($0, /[0-9.]+ *(GiB|MiB|KiB|GB|MB|kB|B|bytes)/)) { t = substr($0, RSTART, RLENGTH); v = t + 0;
           if (t ~ /GiB/) v *= 2^30; else if (t ~ /MiB/) v *= 2^20; else if (t ~ /KiB/) v *= 1024;
           else if (t ~ /GB/) v *= 1e9; else if (t ~ /MB/) v *= 1e6; else if (t ~ /kB/) v *= 1e3;
           printf "%.0f", v } }'
}

# ---------------------------------------------------------------------------------------------
# HOOK for the mpicr CLI: ckpt_mpicr FLAVOR MIB REP
# The same workload as the reference, through mpicr: 4 ranks of bench/ckpt_mem holding MIB MiB,
#   mpiexec -n 4 mpicr run --ckpt-dir D -- ckpt_mem MIB SECONDS STOP_FILE
#   mpicr checkpoint D          (continue; prints epoch, stop time, bytes written)
#   mpicr checkpoint --stop D   (the job ends)
#   mpiexec -n 4 mpicr restart D; restore time = ckpt_mem's first "resumed ... at=T" minus the
#   launch time of the restart; then STOP_FILE ends the job and ckpt_mem verifies its memory.
# Records stop_ms and bytes as printed by `mpicr checkpoint` ("stop time:     0.123s",
# "bytes written: 268435456 (256.0 MiB)"; other spellings of a duration or a size are parsed
# leniently), dump_ms (wall time of the `mpicr checkpoint` command) and restore_ms. A failing
# step fails the benchmark.
# ---------------------------------------------------------------------------------------------
declare -A mpicr_failed=()
ckpt_mpicr() {
    local f=$1 mib=$2 rep=$3 n=${4:-4} tag=${5:-s2} who=mpicr-$1 key=$2
    [ "$tag" = s2 ] || key=${n}x$mib
    if ! mpicr_has_checkpoint; then
        if [ "$rep" = 1 ]; then
            echo "${tag}na $who $key not available yet (${mpicr#"$root"/} has no 'checkpoint' subcommand)" >> "$raw"
            say "section 2: mpicr with $f: not available yet (no '${mpicr#"$root"/} checkpoint')"
        fi
        return 0
    fi
    guarded "$tag-$f-$key" "${tag}na $who $key" "$tag: mpicr with $f, $n x $mib MiB, run $rep" \
        ckpt_mpicr_once "$f" "$mib" "$rep" "$n" "$tag"
}

# guarded KEY NA_PREFIX LABEL CMD...: runs one repetition CMD in a subshell with its own cleanup:
# when it fails, its processes end, "NA_PREFIX FAILED ..." goes to the raw file, LABEL to the
# failures, the other measurements still run, and the script exits non-zero after printing the
# tables. After a failure, the later repetitions of the same KEY are skipped.
guarded() {
    local key=$1 na=$2 label=$3 rc=0
    shift 3
    [ -z "${mpicr_failed[$key]:-}" ] || return 0
    set +e
    (
        set -e
        in_subshell=1
        declare -A own_pids=() own_groups=()
        trap cleanup EXIT
        "$@"
    )
    rc=$?
    set -e
    if [ $rc -ne 0 ]; then
        mpicr_failed[$key]=1
        echo "$na FAILED (${label##*, }; the error is printed above the tables)" >> "$raw"
        failures+=("$label")
    fi
}

# restart_resumed LOG WHAT ARGS...: (inside ckpt_mpicr_once, whose variables it uses) restarts the
# epoch with `mpicr restart ARGS...` and waits for ckpt_mem's "resumed" line; sets resumed_ms
# (launch to running again) and job.
restart_resumed() {
    local log=$1 what=$2 t0 at
    shift 2
    t0=$(now)
    start_job "$T_MPICR" "$log" "$mpiexec" -n "$n" "$mpicr" restart "$@" "$ck"
    wait_line "$log" '^ckpt_mem: resumed' "$T_RESUME" "$tag: $what ($f, $mib MiB)"
    at=$(sed -n 's/^ckpt_mem: resumed .*at=\([0-9.]*\).*/\1/p' "$log" | tail -n 1)
    resumed_ms=$(awk -v a="$t0" -v b="$at" 'BEGIN { printf "%.1f", (b - a) * 1000 }')
}
# finish_restarted LOG WHAT: ends the restarted job (its stop file) and checks that it verified its
# memory and exited 0.
finish_restarted() {
    local log=$1 what=$2 rc=0
    touch "$stopf"
    wait_group "$job" || rc=$?
    grep -q '^ckpt_mem: done .*verify=ok' "$log" && [ $rc -eq 0 ] || {
        tail_log "$log"; die "$tag: $what ($f, $mib MiB) did not finish cleanly (exit status $rc)"; }
}

# ckpt_mpicr_once FLAVOR MIB REP: one repetition of the mpicr measurement (see ckpt_mpicr).
ckpt_mpicr_once() {
    local f=$1 mib=$2 rep=$3 n=$4 tag=$5 who=mpicr-$1 mpiexec key=$2
    [ "$tag" = s2 ] || key=${n}x$mib
    mpiexec=$(flavor_mpiexec "$f")
    local dir=$scratch/mpicr-$tag-$f-$key-$rep init_ms="" init_mpicr_ms="" criu_ms="" verify_ms=""
    local ck=$dir/ckpt stopf=$dir/stop runlog=$dir/run.log rstlog=$dir/restart.log
    local rc t0 line stop bytes dump_ms restore_ms at tries
    mkdir -p "$dir"
    # `timeout` puts the job in a process group of its own: cleanup can end all of it.
    start_job "$T_MPICR" "$runlog" "$mpiexec" -n "$n" "$mpicr" run --ckpt-dir "$ck" -- \
        "$out/$f/ckpt_mem" "$mib" 120 "$stopf"
    wait_line "$runlog" '^ckpt_mem: ready' "$T_READY" "$tag: mpicr run ($f, $mib MiB)"

    # checkpoint, job continues
    warm_memory $((n * mib * 11 / 10))
    checkpoint_line "$ck" || { tail_log "$runlog"; die "$tag: mpicr checkpoint ($f, $mib MiB) failed"; }
    line=$ck_line stop=$ck_stop bytes=$ck_bytes dump_ms=$ck_ms
    [ -n "$bytes" ] || bytes=$(grep -iE 'bytes|[KMG]i?B|written' <<<"$line" | head -n 1 | to_bytes)
    say "$tag: mpicr checkpoint ($f, $n x $mib MiB): $(tr '\n' ' ' <<<"$line")"

    # checkpoint and stop
    warm_memory $((n * mib * 11 / 10))
    rc=0
    timeout -k 5 "$T_MPICR" "$mpicr" checkpoint --stop "$ck" >"$dir/stop.out" 2>&1 || rc=$?
    [ $rc -eq 0 ] || { tail_log "$dir/stop.out"; die "$tag: mpicr checkpoint --stop ($f, $mib MiB) failed (exit status $rc)"; }
    rc=0
    wait_group "$job" || rc=$?
    [ $rc -ne 124 ] || { tail_log "$runlog"; die "$tag: the job did not end after 'mpicr checkpoint --stop' ($f, $mib MiB)"; }
    [ $rc -eq 0 ] || { tail_log "$runlog"; die "$tag: the job stopped by 'mpicr checkpoint --stop' exited with status $rc, not 0 ($f, $mib MiB)"; }

    # restart, once `mpicr status` no longer reports the job as running (bounded; a job that
    # is still reported running after that is left for `mpicr restart` to complain about)
    for tries in $(seq 50); do
        grep -q '^running: *no' <<<"$(timeout 10 "$mpicr" status "$ck" 2>/dev/null)" && break
        sleep 0.2
    done
    # The reference for the restart: one MPI_Init of the same job shape, launched the same way.
    if [ "$tag" = s2 ]; then
        t0=$(now)
        start_job "$T_MPICR" "$dir/init.log" "$mpiexec" -n "$n" "$out/$f/init_time"
        rc=0
        wait_group "$job" || rc=$?
        at=$(sed -n 's/^init_time: at=\([0-9.]*\).*/\1/p' "$dir/init.log" | tail -n 1)
        [ $rc -eq 0 ] && [ -n "$at" ] || { tail_log "$dir/init.log"; die "$tag: init_time ($f) failed (exit status $rc)"; }
        init_ms=$(awk -v a="$t0" -v b="$at" 'BEGIN { printf "%.1f", (b - a) * 1000 }')
        # The same under `mpicr run` (keepers, coordinator, the lower half): what any job
        # started through mpicr pays, restarted or not.
        t0=$(now)
        start_job "$T_MPICR" "$dir/init-mpicr.log" "$mpiexec" -n "$n" "$mpicr" run --ckpt-dir "$dir/init-ckpt" -- "$out/$f/init_time"
        rc=0
        wait_group "$job" || rc=$?
        at=$(sed -n 's/^init_time: at=\([0-9.]*\).*/\1/p' "$dir/init-mpicr.log" | tail -n 1)
        [ $rc -eq 0 ] && [ -n "$at" ] || { tail_log "$dir/init-mpicr.log"; die "$tag: init_time under mpicr run ($f) failed (exit status $rc)"; }
        init_mpicr_ms=$(awk -v a="$t0" -v b="$at" 'BEGIN { printf "%.1f", (b - a) * 1000 }')
    fi
    t0=$(now)
    # -v: each keeper prints "verified the images of epoch K in DURATION" (the checksums of its
    # images) and "restored epoch K as pid P in DURATION" (its CRIU restore and rejoining the
    # coordinator), the parts of the restart measured inside mpicr.
    restart_resumed "$rstlog" "mpicr restart" -v
    restore_ms=$resumed_ms
    criu_ms=$(grep -o 'restored epoch [0-9]* as pid [0-9]* in .*' "$rstlog" | sed 's/.* in //' |
        while read -r d; do to_ms <<<"$d"; echo; done | sort -n | tail -n 1)
    verify_ms=$(grep -o 'verified the images of epoch [0-9]* in .*' "$rstlog" | sed 's/.* in //' |
        while read -r d; do to_ms <<<"$d"; echo; done | sort -n | tail -n 1)
    finish_restarted "$rstlog" "restarted job"
    # The same epoch restarted again with lazy pages (BENCH_LAZY): launch to running, next to
    # bare CRIU lazy; ckpt_mem then checks every page of its memory (served by the daemons).
    local lazy_restore_ms="" lazylog=$dir/restart-lazy.log
    if [ "$tag" = s2 ] && [ "$lazy" = 1 ]; then
        rm -f "$stopf"
        restart_resumed "$lazylog" "mpicr restart --lazy-pages" --lazy-pages -v
        lazy_restore_ms=$resumed_ms
        finish_restarted "$lazylog" "job restarted with --lazy-pages"
        if grep -q 'lazy pages unavailable' "$lazylog"; then
            say "$tag: mpicr restart --lazy-pages fell back to a full restore: $(grep -m1 'lazy pages unavailable' "$lazylog")"
            lazy_restore_ms=""
        fi
    fi
    rm -rf "$dir"
    {
        [ -n "$stop" ] && echo "$tag $who $key $rep stop_ms $stop"
        [ -n "$bytes" ] && echo "$tag $who $key $rep bytes $bytes"
        echo "$tag $who $key $rep dump_ms $dump_ms"
        echo "$tag $who $key $rep restore_ms $restore_ms"
        [ -z "$init_ms" ] || echo "$tag $who $key $rep init_ms $init_ms"
        [ -z "$init_mpicr_ms" ] || echo "$tag $who $key $rep init_mpicr_ms $init_mpicr_ms"
        [ -z "$criu_ms" ] || echo "$tag $who $key $rep restore_criu_ms $criu_ms"
        [ -z "$verify_ms" ] || echo "$tag $who $key $rep restore_verify_ms $verify_ms"
        [ -z "$lazy_restore_ms" ] || echo "$tag $who $key $rep lazy_restore_ms $lazy_restore_ms"
    } >> "$raw"
    say "$tag: mpicr ($f) $n x $mib MiB run $rep/$(reps_of "$tag"): stop ${stop:-?} ms, checkpoint ${dump_ms} ms, restore ${restore_ms} ms (keepers' image checks ${verify_ms:-?} ms, CRIU part ${criu_ms:-?} ms; MPI_Init alone ${init_ms:--} ms, under mpicr run ${init_mpicr_ms:--} ms)${lazy_restore_ms:+, restore --lazy-pages $lazy_restore_ms ms}"
}

# warm_memory MIB: writes MIB MiB to a scratch file and deletes it, before a measured dump
# (BENCH_WARM=1, the default). This machine is a VM that hands free memory back to its host: the
# first write to such a page cost about ten times a warm one (CRIU's log of one dump: 2.5 ms per
# MiB of pages written instead of 0.25), so a dump that met cold pages looked 5-10 times slower
# than the same dump a minute later. The pages the deletion frees serve the dump that follows.
warm_memory() {
    [ "$warm" = 1 ] || return 0
    dd if=/dev/zero of="$scratch/warm" bs=1M count="$1" status=none || true
    rm -f "$scratch/warm"
}

# checkpoint_line DIR [--stop]: `mpicr checkpoint [--stop] DIR` (bounded; "try again later", a
# checkpoint asked before the agents are up, is retried); sets ck_line (its output), ck_ms (the
# command's wall time), ck_stop (ms), ck_bytes and ck_back (MPI back, ms). Fails, with the
# output shown, when the command does.
checkpoint_line() {
    local d=$1 rc tries t0
    shift
    for tries in $(seq 20); do
        rc=0
        t0=$(now)
        ck_line=$(timeout -k 5 "$T_MPICR" "$mpicr" checkpoint "$@" "$d" 2>&1) || rc=$?
        ck_ms=$(ms_since "$t0")
        [ $rc -ne 0 ] && grep -q 'try again later' <<<"$ck_line" && [ "$tries" -lt 20 ] || break
        sleep 0.5
    done
    [ $rc -eq 0 ] || { echo "$ck_line" >&2; echo "bench: mpicr checkpoint: exit status $rc" >&2; return 1; }
    # (--stop prints no "MPI back": a missing line leaves its value empty)
    ck_stop=$(grep -i 'stop' <<<"$ck_line" | head -n 1 | to_ms || true)
    ck_bytes=$(sed -n 's/^bytes written: *\([0-9][0-9]*\).*/\1/p' <<<"$ck_line" | head -n 1)
    ck_back=$(grep '^MPI back' <<<"$ck_line" | head -n 1 | to_ms || true)
}

# ckpt_incremental MIB REP: ckpt_incremental_once, guarded (see guarded).
ckpt_incremental() {
    guarded "incr-$1" "s2ina incremental $1" "incremental: $incr_flavor, 2 x $1 MiB, run $2" ckpt_incremental_once "$@"
}

# ckpt_incremental_once MIB REP: 2 ranks of dirty (MIB MiB each, the same contiguous tenth rewritten
# every 50 ms) under `mpicr run` (mode full) and `mpicr run --incremental`, three checkpoints 2 s
# apart, the last with --stop. Epoch 1 is a full dump in both; the raw file gets epochs 2
# (continue: stop_ms, bytes) and 3 (--stop: stopx_ms, bytesx) of each mode.
ckpt_incremental_once() {
    local mib=$1 rep=$2 f=$incr_flavor mode dir ck log waited rc e
    local mpiexec
    mpiexec=$(flavor_mpiexec "$f")
    for mode in full incremental; do
        dir=$scratch/incr-$mode-$mib-$rep ck=$dir/ckpt log=$dir/run.log
        mkdir -p "$dir"
        start_job "$T_MPICR" "$log" "$mpiexec" -n 2 "$mpicr" run $([ $mode = incremental ] && echo --incremental) \
            --ckpt-dir "$ck" -- "$out/$f/dirty" "$mib" 100000 100000 block
        wait_line "$log" '^rank 0 tick 1$' "$T_READY" "incremental: dirty ($mode, $mib MiB)"
        for e in 1 2 3; do
            sleep 2
            # Both modes alike, as much as a full dump writes.
            warm_memory $((2 * mib * 11 / 10))
            checkpoint_line "$ck" $([ $e = 3 ] && echo --stop) || { tail_log "$log"; die "incremental: checkpoint $e ($mode, $mib MiB) failed"; }
            say "incremental ($mode, 2 x $mib MiB) epoch $e: $(tr '\n' ' ' <<<"$ck_line")"
            case $e in
                2) echo "s2i $mode $mib $rep stop_ms $ck_stop"; echo "s2i $mode $mib $rep bytes $ck_bytes"
                   [ -z "$ck_back" ] || echo "s2i $mode $mib $rep back_ms $ck_back" ;;
                3) echo "s2i $mode $mib $rep stopx_ms $ck_stop"; echo "s2i $mode $mib $rep bytesx $ck_bytes" ;;
            esac >> "$raw"
        done
        rc=0
        wait_group "$job" || rc=$?
        [ $rc -eq 0 ] || { tail_log "$log"; die "incremental: the job stopped by 'mpicr checkpoint --stop' ($mode, $mib MiB) exited with status $rc"; }
        if [ $mode = incremental ] && grep -q ': full dumps' "$log"; then
            echo "s2ina incremental $mib $(grep -m1 ': full dumps' "$log" | sed 's/.*--incremental: //')" >> "$raw"
        fi
        rm -rf "$dir"
    done
}

section2_prereq() {
    [ -x "$criu" ] || die "CRIU wrapper .deps/criu/criu is missing (run: make deps)"
    [ "$(id -u)" = 0 ] || die "sections 2 and 3 need root (CRIU)"
    cc -O2 -Wall -o "$out/mem_hold" bench/mem_hold.c || die "building bench/mem_hold.c failed"
}

section2() {
    section2_prereq
    echo "meta ckpt_reps $ckpt_reps" >> "$raw"
    echo "meta ckpt_ranks $ckpt_ranks" >> "$raw"
    echo "meta warm $warm" >> "$raw"
    local mib f rep
    # Reference and mpicr repetitions alternate, so that both meet the same machine load.
    for mib in $ckpt_sizes; do
        for rep in $(seq "$ckpt_reps"); do
            ckpt_reference_criu "$mib" "$rep" "$ckpt_ranks"
            for f in $ckpt_flavors; do ckpt_mpicr "$f" "$mib" "$rep" "$ckpt_ranks"; done
            [ "$incr" = 0 ] || ckpt_incremental "$mib" "$rep"
        done
    done
}

# ============================== Section 3: scaling ==========================================

# Checkpoint cost as ranks per node grow (64 MiB each; 8 ranks oversubscribe 2 cores) and as
# memory per process grows (2 ranks), bare CRIU next to mpicr in each repetition. report.py
# fits the slopes (ms per rank, ms per GiB) and prints ms per GiB written per point, which
# stays flat when nothing grows faster than the bytes written.
section3() {
    local n mib rep f=$scale_flavor
    for rep in $(seq "$scale_reps"); do
        for n in $scale_ranks; do
            ckpt_reference_criu "$scale_rank_mib" "$rep" "$n" s3
            ckpt_mpicr "$f" "$scale_rank_mib" "$rep" "$n" s3
        done
        for mib in $scale_mibs; do
            # the memory series shares its 2-rank point with the rank series
            if [ "$mib" = "$scale_rank_mib" ] && grep -qw 2 <<<"$scale_ranks"; then continue; fi
            ckpt_reference_criu "$mib" "$rep" 2 s3
            ckpt_mpicr "$f" "$mib" "$rep" 2 s3
        done
    done
}

# ============================== main =========================================================
run1=1 run2=1 run3=1
[ -n "$only_section" ] && { run1=0 run2=0 run3=0; eval "run$only_section=1"; }
if [ $run1 = 1 ] && [ $native_only = 0 ] && [ ! -f "$shim_so" ]; then
    die "${shim_so#"$root"/} is missing: build it first (make build), or run scripts/bench.sh --native-only"
fi
for f in $flavors; do
    echo "meta flavor $f $(flavor_name "$f")" >> "$raw"
    if [ $run1 = 1 ]; then build_flavor "$f"; fi
done
if [ $run2 = 1 ]; then
    for f in $ckpt_flavors; do build_flavor "$f"; done
    if [ "$incr" = 1 ]; then
        build_flavor "$incr_flavor"
        "$(flavor_cc "$incr_flavor")" -O2 -Wall -o "$out/$incr_flavor/dirty" tests/cli-programs/dirty.c ||
            die "$incr_flavor: building tests/cli-programs/dirty.c failed"
    fi
fi
if [ $run3 = 1 ]; then build_flavor "$scale_flavor"; fi
if [ $run1 = 1 ]; then section1; fi
if [ $run2 = 1 ]; then section2; fi
if [ $run3 = 1 ]; then
    [ $run2 = 1 ] || section2_prereq
    echo "meta scale_reps $scale_reps" >> "$raw"
    section3
fi

echo "meta load_start $load0" >> "$raw"
echo "meta load_end $(cut -d' ' -f1-3 /proc/loadavg)" >> "$raw"
python3 bench/report.py "$raw" > "$results"
total=$(awk -v a="$t_start" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }')
echo "" >> "$results"
echo "(scripts/bench.sh$([ $quick = 1 ] && echo " --quick")$([ $native_only = 1 ] && echo " --native-only"): ${total} s on $(nproc) cores, $(date '+%F %T'))" >> "$results"
echo
cat "$results"
if [ ${#failures[@]} -gt 0 ]; then
    printf 'bench: error: failed: %s\n' "${failures[@]}" >&2
    exit 1
fi
