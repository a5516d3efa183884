#!/usr/bin/env bash
# `make demo`: a 4-rank 2-D heat diffusion runs under mpicr, is checkpointed mid-run and
# stopped, then restarted in a new mpiexec; its output is compared with an uninterrupted run.
# Second act: one job of two kinds of ranks (c-tests/app_mixed.c): two app-mode ranks that save
# and restore their own data at mpicr_safe_point() and one rank that CRIU dumps, exchanging
# point-to-point messages (in flight at the checkpoint) and collectives, stopped by a
# checkpoint and restarted, again compared with an uninterrupted run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mpicr=$root/target/release/mpicr
ranks=${DEMO_RANKS:-4}
n=${DEMO_N:-320}
steps=${DEMO_STEPS:-6000}
every=${DEMO_EVERY:-250}

work=$(mktemp -d "${TMPDIR:-/tmp}/mpicr-demo.XXXXXX")
job_pid=
job2_pid=
cleanup() {
    [ -n "$job2_pid" ] && kill -- "-$job2_pid" 2>/dev/null || true
    [ -n "$job_pid" ] && kill -- "-$job_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

mpicc.mpich -O2 -Wno-stringop-overflow -o "$work/heat2d" demo/heat2d.c
prog=("$work/heat2d" "$n" "$steps" "$every")

say "1. Uninterrupted run (the reference): mpiexec -n $ranks heat2d $n $steps"
t0=$(now)
timeout 600 mpiexec.mpich -n "$ranks" "${prog[@]}" > "$work/reference.txt"
t1=$(now)
echo "   $(wc -l < "$work/reference.txt") lines in $(secs "$t0" "$t1") s; last: $(tail -n 1 "$work/reference.txt")"

say "2. The same job under mpicr: mpiexec -n $ranks mpicr run --ckpt-dir CKPT -- heat2d ..."
ckpt=$work/ckpt
setsid timeout 600 mpiexec.mpich -n "$ranks" "$mpicr" run --ckpt-dir "$ckpt" -- "${prog[@]}" > "$work/before.txt" 2> "$work/before.err" &
job_pid=$!
# Let it run for a while: until it has printed a third of its report lines.
want=$(( steps / every / 3 ))
for _ in $(seq 1 600); do
    [ "$(wc -l < "$work/before.txt")" -ge "$want" ] && break
    kill -0 "$job_pid" 2>/dev/null || break
    sleep 0.1
done
echo "   running; it has printed $(wc -l < "$work/before.txt") lines"

say "3. mpicr checkpoint --stop CKPT   (checkpoint, then end the job)"
"$mpicr" checkpoint --stop --timeout 5m "$ckpt"
wait "$job_pid" || { echo "the job under mpicr failed:"; cat "$work/before.err"; exit 1; }
job_pid=
echo "   the job ended after printing $(wc -l < "$work/before.txt") lines"
"$mpicr" status "$ckpt"

say "4. mpiexec -n $ranks mpicr restart CKPT   (a new mpiexec, from the images)"
t0=$(now)
timeout 600 mpiexec.mpich -n "$ranks" "$mpicr" restart "$ckpt" > "$work/after.txt" 2> "$work/after.err" || {
    echo "restart failed:"; cat "$work/after.err"; exit 1; }
t1=$(now)
echo "   restarted job finished in $(secs "$t0" "$t1") s, printing $(wc -l < "$work/after.txt") more lines"

say "5. Output before the stop + after the restart vs the uninterrupted run"
cat "$work/before.txt" "$work/after.txt" > "$work/combined.txt"
if cmp -s "$work/combined.txt" "$work/reference.txt"; then
    echo "   IDENTICAL ($(wc -l < "$work/reference.txt") lines, byte for byte): $(tail -n 1 "$work/combined.txt")"
else
    echo "   DIFFERENT:"
    diff "$work/reference.txt" "$work/combined.txt" | head -20
    exit 1
fi

# ---- Second act: application-level ranks beside a transparent one --------------------------
iters=${DEMO_APP_ITERS:-300}
pace=${DEMO_APP_PACE_US:-20000}
mpicc.mpich -O2 -I c-tests -o "$work/app_mixed" c-tests/app_mixed.c
app=("$work/app_mixed" "$iters")

say "6. Second act: one job, two kinds of ranks (c-tests/app_mixed.c, 3 ranks)"
echo "   Ranks 0 and 1 run in app mode: the program saves and restores its own data (mpicr_app_register)"
echo "   and says where it may be stopped (mpicr_safe_point, the top of its loop). Rank 2 is an ordinary"
echo "   rank that CRIU dumps wherever it is. Every iteration each rank receives the message its left"
echo "   neighbour sent two iterations earlier (so messages are always in flight), and all take part in"
echo "   an allreduce with a user op, a broadcast and collectives on a split communicator."
timeout 600 mpiexec.mpich -n 3 "${app[@]}" 0 2 > "$work/app-reference.txt"
echo "   uninterrupted run (the reference): $(wc -l < "$work/app-reference.txt") lines"

say "7. mpiexec -n 2 mpicr run --mode app ... : -n 1 mpicr run ...   (one mpiexec, two modes)"
ckpt2=$work/ckpt-app
setsid timeout 600 mpiexec.mpich -n 2 "$mpicr" run --mode app --ckpt-dir "$ckpt2" -- "${app[@]}" "$pace" 2 \
    : -n 1 "$mpicr" run --ckpt-dir "$ckpt2" -- "${app[@]}" "$pace" 2 > "$work/app-before.txt" 2> "$work/app-before.err" &
job2_pid=$!
want=$(( $(wc -l < "$work/app-reference.txt") / 3 ))
for _ in $(seq 1 600); do
    [ "$(wc -l < "$work/app-before.txt")" -ge "$want" ] && break
    kill -0 "$job2_pid" 2>/dev/null || break
    sleep 0.1
done
echo "   running; it has printed $(wc -l < "$work/app-before.txt") lines"

say "8. mpicr checkpoint --stop   (the app-mode ranks are taken at their next safe point)"
"$mpicr" checkpoint --stop --timeout 5m "$ckpt2"
wait "$job2_pid" || { echo "the mixed job failed:"; cat "$work/app-before.err"; exit 1; }
job2_pid=
latest=$(readlink -f "$ckpt2/latest")
echo "   the job ended after printing $(wc -l < "$work/app-before.txt") lines. In the epoch:"
for r in 0 1 2; do
    d=$latest/rank-$r
    if [ -d "$d/app" ]; then
        echo "   rank $r: the program's own files ($(ls "$d/app" | paste -sd ' ')), $(du -sk "$d" | cut -f1) KiB with mpicr's record of its MPI objects and messages"
    else
        echo "   rank $r: a CRIU image of the whole process, $(du -sk "$d" | cut -f1) KiB"
    fi
done

say "9. mpiexec -n 3 mpicr restart   (CRIU restores rank 2; ranks 0 and 1 start afresh and restore)"
echo "   In the new app-mode processes MPI_Init rebuilds every communicator, datatype and op under its"
echo "   old handle, hands over the messages that were in flight to them, and calls the program's restore."
timeout 600 mpiexec.mpich -n 3 "$mpicr" restart "$ckpt2" > "$work/app-after.txt" 2> "$work/app-after.err" || {
    echo "restart failed:"; cat "$work/app-after.err"; exit 1; }
echo "   the restarted job finished, printing $(wc -l < "$work/app-after.txt") more lines"

say "10. Output before the stop + after the restart vs the uninterrupted run (lines sorted: ranks interleave)"
if cmp -s <(sort "$work/app-before.txt" "$work/app-after.txt") <(sort "$work/app-reference.txt"); then
    echo "   IDENTICAL ($(wc -l < "$work/app-reference.txt") lines): $(grep -m1 ' final ' "$work/app-reference.txt")"
else
    echo "   DIFFERENT:"
    diff <(sort "$work/app-reference.txt") <(sort "$work/app-before.txt" "$work/app-after.txt") | head -20
    exit 1
fi
