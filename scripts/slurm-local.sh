#!/usr/bin/env bash
# A real Slurm on this one machine, for the tests and for trying mpicr under srun and sbatch:
# Debian's slurm-wlm (slurmctld, slurmd) and munge, installed by `make deps`, each started
# here with a private configuration, state and socket under one directory, as root.
#
#   scripts/slurm-local.sh up        start munged, slurmctld and slurmd; wait until the node
#                                    takes jobs; print the `export SLURM_CONF=...` line to use
#   scripts/slurm-local.sh down      stop them (by their pid files) and keep the logs
#   scripts/slurm-local.sh status    say whether it runs (exit 0) or not (exit 1)
#   scripts/slurm-local.sh env       print the `export SLURM_CONF=...` line
#
# Then, with SLURM_CONF exported:
#   srun --mpi=pmi2 -n 2 mpicr run --ckpt-dir ckpt -- ./prog
#   srun --mpi=pmi2 -n 2 mpicr restart ckpt
#   srun --mpi=pmix -n 2 mpicr run --ckpt-dir ckpt -- ./prog    # a program linked to Open MPI
#
# The node: one node named after this host (NodeAddr 127.0.0.1) with 4 CPUs whatever the
# machine has (SlurmdParameters=config_overrides), so 4 tasks run on a 2-core machine.
# Works without systemd and without a writable cgroup hierarchy: processes are tracked by
# their parent chain (ProctrackType=proctrack/linuxproc), tasks are not bound (TaskPlugin=
# task/none), no accounting, no job containers. Authentication is munge with a key and a socket
# of its own (the system's munged, if any, is left alone).
#
# Settings: MPICR_SLURM_DIR (default /tmp/mpicr-slurm), MPICR_SLURM_PORT (slurmctld's port;
# slurmd uses the next one; default 16817). `up` is idempotent; every wait is bounded
# (MPICR_SLURM_WAIT seconds, default 60).
set -euo pipefail

dir=${MPICR_SLURM_DIR:-/tmp/mpicr-slurm}
port=${MPICR_SLURM_PORT:-16817}
wait_s=${MPICR_SLURM_WAIT:-60}
conf=$dir/slurm.conf
node=$(hostname -s)

say() { echo "slurm-local: $*"; }
die() { echo "slurm-local: $*" >&2; exit 1; }

alive() { # pidfile
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# Waits (bounded) until a daemon that forked into the background has written its pid file and
# runs; a daemon's pid file may appear a moment after the command that started it returned.
wait_pidfile() { # pidfile name log
    local i
    for i in $(seq $((wait_s * 10))); do
        alive "$1" && return 0
        sleep 0.1
    done
    down quiet
    die "$2 did not start (no live pid in $1 after ${wait_s} s): $(tail -n 5 "$3" 2>/dev/null)"
}

stop_pidfile() { # pidfile name
    local pid i
    pid=$(cat "$1" 2>/dev/null) || return 0
    [ -n "$pid" ] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            say "$2 (pid $pid) did not stop in 10 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$1"
}

write_conf() {
    local plugindir
    plugindir=$(dirname "$(dpkg -L slurm-wlm-basic-plugins 2>/dev/null | grep '/proctrack_linuxproc.so$' | head -n 1)")
    cat > "$conf" <<CONF
# Written by scripts/slurm-local.sh: one node, 4 CPUs, no systemd, no cgroups.
ClusterName=mpicr-local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
PluginDir=$plugindir
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/slurmd
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobContainerType=job_container/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
# Short timers: a test's job ends quickly, a requeued job may start again at once.
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=30
KillWait=5
OverTimeLimit=0
MessageTimeout=10
# Requeued batch jobs (sbatch --requeue, scontrol requeue) start again without delay.
JobRequeue=1
NodeName=$node NodeAddr=127.0.0.1 CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
    : > "$dir/cgroup.conf"
}

up() {
    for b in munged slurmctld slurmd srun sinfo scontrol; do
        command -v "$b" >/dev/null || die "$b is not installed (make deps installs slurm-wlm and munge)"
    done
    [ "$(id -u)" -eq 0 ] || die "needs root (slurmd runs jobs as their users)"
    mkdir -p "$dir"/{munge,ctld,slurmd}
    chmod 700 "$dir/munge"
    if alive "$dir/slurmctld.pid" && alive "$dir/slurmd.pid" && alive "$dir/munge/munged.pid"; then
        if SLURM_CONF=$conf timeout 10 sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
            say "already up ($conf)"
            echo "export SLURM_CONF=$conf"
            return 0
        fi
    fi
    down quiet
    write_conf
    # munge: a key of its own, its socket in $dir/munge, run as root (--force: no munge user
    # owning the directories needed).
    if [ ! -s "$dir/munge/munge.key" ]; then
        dd if=/dev/urandom of="$dir/munge/munge.key" bs=1 count=1024 status=none
        chmod 400 "$dir/munge/munge.key"
    fi
    munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
        --seed-file="$dir/munge/munged.seed" 2>"$dir/munge/start.err" \
        || { down quiet; die "munged did not start: $(tail -n 3 "$dir/munge/start.err" "$dir/munge/munged.log" 2>/dev/null)"; }
    wait_pidfile "$dir/munge/munged.pid" munged "$dir/munge/munged.log"
    # slurmctld and slurmd daemonise and write their pid files.
    SLURM_CONF=$conf slurmctld -f "$conf" 2>"$dir/slurmctld.start.err" \
        || { down quiet; die "slurmctld did not start: $(tail -n 5 "$dir/slurmctld.start.err" "$dir/slurmctld.log" 2>/dev/null)"; }
    wait_pidfile "$dir/slurmctld.pid" slurmctld "$dir/slurmctld.log"
    SLURM_CONF=$conf slurmd -f "$conf" -N "$node" 2>"$dir/slurmd.start.err" \
        || { down quiet; die "slurmd did not start: $(tail -n 5 "$dir/slurmd.start.err" "$dir/slurmd.log" 2>/dev/null)"; }
    wait_pidfile "$dir/slurmd.pid" slurmd "$dir/slurmd.log"
    local i state=""
    for i in $(seq $((wait_s * 2))); do
        state=$(SLURM_CONF=$conf timeout 10 sinfo -h -n "$node" -o %T 2>/dev/null || true)
        case $state in
            idle*|mixed*|allocated*) break ;;
            drain*|down*) SLURM_CONF=$conf scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true ;;
        esac
        alive "$dir/slurmctld.pid" || { down quiet; die "slurmctld died: $(tail -n 5 "$dir/slurmctld.log" 2>/dev/null)"; }
        alive "$dir/slurmd.pid" || { down quiet; die "slurmd died: $(tail -n 5 "$dir/slurmd.log" 2>/dev/null)"; }
        sleep 0.5
    done
    case $state in
        idle*|mixed*|allocated*) ;;
        *)
            local why
            why=$(SLURM_CONF=$conf timeout 10 scontrol show node "$node" 2>/dev/null | grep -o 'Reason=.*' || true)
            down quiet
            die "the node did not become idle within ${wait_s} s (state '${state:-none}' $why); logs in $dir"
            ;;
    esac
    say "up: node $node, 4 CPUs, partition local ($conf)"
    echo "export SLURM_CONF=$conf"
}

down() {
    stop_pidfile "$dir/slurmd.pid" slurmd
    stop_pidfile "$dir/slurmctld.pid" slurmctld
    stop_pidfile "$dir/munge/munged.pid" munged
    [ "${1:-}" = quiet ] || say "down (logs kept in $dir)"
}

status() {
    if alive "$dir/slurmctld.pid" && alive "$dir/slurmd.pid" && alive "$dir/munge/munged.pid"; then
        say "running ($conf)"
        SLURM_CONF=$conf timeout 10 sinfo || true
        return 0
    fi
    say "not running"
    return 1
}

case ${1:-} in
    up) up ;;
    down) down ;;
    status) status ;;
    env) echo "export SLURM_CONF=$conf" ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
