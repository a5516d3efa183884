#!/usr/bin/env bash
# `make demo`: a 4-rank 2-D heat diffusion runs under mpicr, is checkpointed mid-run and
# stopped, then restarted in a new mpiexec; its output is compared with an uninterrupted run.
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
cleanup() {
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
