"""Summarise runs of mpi4py's test suite made by scripts/mpi4py-tests.sh.

    report.py check RUNDIR RANKS
        exit 0 if the run in RUNDIR finished on every rank (used to decide whether a native
        run may be cached), 1 otherwise.
    report.py shm RUNDIR
        print the /dev/shm files that the ranks of RUNDIR had mapped (to remove leftovers).
    report.py pids MARKER
        print the ids of the processes whose environment has MPI4PY_TESTS_RUNID=MARKER.
    report.py table [--native-only] CASE...
        CASE is FLAVOR:RANKS:NATIVE_DIR[:SHIM_DIR]. Prints the table and, for each case, the
        tests whose outcome under the shim differs from the native one (with the first lines of
        their traceback). Exit status 1 if any shim run differs from its native run (counts or
        outcome of any test) or did not finish, 2 if a native run did not finish.

A run directory holds, per rank R, rank-R.jsonl (events written as the suite runs),
rank-R.json (written when the suite finished on that rank), out.R / err.R (the rank's stdout
and stderr), and status.txt ("rc seconds timeout_s") written by the driver.
"""

import glob
import json
import os
import sys

COUNT_KEYS = ("run", "passed", "failed", "errors", "skipped")
BAD = ("failed", "error")


def read_status(rundir):
    try:
        rc, seconds, limit = open(os.path.join(rundir, "status.txt")).read().split()[:3]
        return int(rc), float(seconds), int(limit)
    except (OSError, ValueError):
        return None, None, None


def tail(path, n=8):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().rstrip("\n").splitlines()
    except OSError:
        return []
    return lines[-n:]


def load_rank(rundir, rank):
    """The outcome of one rank: from rank-R.json, or rebuilt from rank-R.jsonl if it died."""
    path = os.path.join(rundir, f"rank-{rank}.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        data["complete"] = True
        data.setdefault("shim_loaded", None)
        for ev in iter_events(rundir, rank):
            if ev.get("ev") == "mpi":
                data["shim_loaded"] = ev.get("shim_loaded")
                data["mpi_libs"] = ev.get("mpi_libs")
        return data
    tests, order, current, shim_loaded, mpi_libs, started = {}, [], None, None, None, False
    for ev in iter_events(rundir, rank):
        kind = ev.get("ev")
        if kind == "begin":
            started = True
        elif kind == "mpi":
            shim_loaded, mpi_libs = ev.get("shim_loaded"), ev.get("mpi_libs")
        elif kind == "start":
            current = ev["id"]
        elif kind == "outcome":
            tid = ev["id"]
            if tid not in tests:
                order.append(tid)
                tests[tid] = {"outcome": ev["outcome"]}
            elif ev["outcome"] in BAD:
                tests[tid]["outcome"] = ev["outcome"]
            if ev.get("detail"):
                tests[tid].setdefault("detail", []).extend(ev["detail"])
            if current == tid:
                current = None
    if current is not None and current in tests:
        current = None
    return {
        "rank": rank,
        "complete": False,
        "started": started,
        "in_test": current,
        "tests": {tid: tests[tid] for tid in order},
        "shim_loaded": shim_loaded,
        "mpi_libs": mpi_libs,
        "err_tail": tail(os.path.join(rundir, f"err.{rank}")),
    }


def iter_events(rundir, rank):
    try:
        with open(os.path.join(rundir, f"rank-{rank}.jsonl"), encoding="utf-8") as f:
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    pass  # a line cut short by a crash
    except OSError:
        return


def load_run(rundir, ranks):
    rc, seconds, limit = read_status(rundir)
    per_rank = [load_rank(rundir, r) for r in range(ranks)]
    return {
        "dir": rundir,
        "rc": rc,
        "seconds": seconds,
        "timeout": limit,
        "timed_out": rc in (124, 137),
        "ranks": per_rank,
        "complete": all(r["complete"] for r in per_rank),
    }


def counts_of(rank_data):
    if rank_data["complete"]:
        c = rank_data["counts"]
        return tuple(c[k] for k in COUNT_KEYS)
    return None


def fmt_counts(run):
    if run is None:
        return "-"
    r0 = run["ranks"][0]
    secs = f" {run['seconds']:.0f}s" if run["seconds"] is not None else ""
    if not run["complete"]:
        why = "TIMEOUT" if run["timed_out"] else f"rc={run['rc']}"
        done = sum(len(r["tests"]) for r in run["ranks"] if not r["complete"])
        return f"INCOMPLETE ({why}, {done} outcomes){secs}"
    all_counts = {counts_of(r) for r in run["ranks"]}
    text = "/".join(str(x) for x in counts_of(r0)) + secs
    if len(all_counts) > 1:
        text += " (ranks differ)"
    return text


def compare(native, shim):
    """List of (rank, test id, native outcome, shim outcome, detail) that differ."""
    diffs = []
    for rank, (n, s) in enumerate(zip(native["ranks"], shim["ranks"])):
        ntests, stests = n["tests"], s["tests"]
        for tid, st in stests.items():
            nt = ntests.get(tid)
            nout = nt["outcome"] if nt else "absent"
            if st["outcome"] != nout:
                diffs.append((rank, tid, nout, st["outcome"], st.get("detail", [])))
        if s["complete"]:
            for tid, nt in ntests.items():
                if tid not in stests:
                    diffs.append((rank, tid, nt["outcome"], "absent", []))
        else:
            where = s.get("in_test")
            if where:
                what = "TIMEOUT/HANG" if shim["timed_out"] else "CRASH/ABORT"
                diffs.append((rank, where, ntests.get(where, {}).get("outcome", "absent"),
                              f"{what} (test never finished)", s.get("err_tail", [])))
            elif not s.get("started", True) or not stests:
                diffs.append((rank, "<startup>", "-", f"no test ran (rc={shim['rc']})",
                              s.get("err_tail", [])))
    return diffs


def verdict(native, shim):
    if shim is None:
        return "native only"
    if not native["complete"]:
        return "NATIVE INCOMPLETE"
    if not shim["complete"]:
        return "FAIL (shim run incomplete)"
    if any(r.get("shim_loaded") is False for r in shim["ranks"]):
        return "FAIL (libmpicr.so not loaded in ranks)"
    for n, s in zip(native["ranks"], shim["ranks"]):
        if counts_of(n) != counts_of(s):
            return "FAIL (counts differ)"
    if compare(native, shim):
        return "FAIL (same counts, other tests)"
    return "PASS"


def cmd_table(args):
    native_only = False
    if args and args[0] == "--native-only":
        native_only, args = True, args[1:]
    rows, details, status = [], [], 0
    for case in args:
        parts = case.split(":")
        flavor, ranks, ndir = parts[0], int(parts[1]), parts[2]
        sdir = parts[3] if len(parts) > 3 and parts[3] else None
        native = load_run(ndir, ranks)
        shim = load_run(sdir, ranks) if sdir and not native_only else None
        v = verdict(native, shim)
        if not native["complete"]:
            status = max(status, 2)
        elif shim is not None and v != "PASS":
            status = max(status, 1)
        rows.append((flavor, str(ranks), fmt_counts(native), fmt_counts(shim), v))
        if not native["complete"]:
            details.append((flavor, ranks, "native run did not finish",
                            [(r["rank"], r.get("in_test") or "<startup>", "-", "never finished",
                              r.get("err_tail", []))
                             for r in native["ranks"] if not r["complete"]]))
        if shim is not None and native["complete"]:
            diffs = compare(native, shim)
            if diffs:
                details.append((flavor, ranks, "under the shim, not natively", diffs))
    header = ("flavor", "ranks", "native run/pass/fail/err/skip",
              "shim run/pass/fail/err/skip", "verdict")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    for flavor, ranks, title, diffs in details:
        print()
        # At 2 ranks the same test usually differs on every rank: print it once per rank
        # only when the details differ.
        print(f"== {flavor} at {ranks} rank(s): {len(diffs)} test outcome(s) {title}")
        seen = {}
        for rank, tid, nout, sout, detail in diffs:
            key = (tid, nout, sout, tuple(detail))
            if key in seen:
                seen[key].append(rank)
                continue
            seen[key] = [rank]
        for (tid, nout, sout, detail), rks in seen.items():
            print(f"  {tid}  [rank {','.join(map(str, rks))}]  native={nout}  shim={sout}")
            for d in detail[:14]:
                print(f"      {d}")
    return status


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "check":
        run = load_run(args[0], int(args[1]))
        return 0 if run["complete"] else 1
    if cmd == "shm":
        files = set()
        for path in glob.glob(os.path.join(args[0], "rank-*.jsonl")):
            rank = int(os.path.basename(path)[5:-6])
            for ev in iter_events(args[0], rank):
                if ev.get("ev") == "mpi":
                    files.update(ev.get("shm") or [])
        for f in sorted(files):
            print(f)
        return 0
    if cmd == "pids":
        want = f"MPI4PY_TESTS_RUNID={args[0]}".encode()
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if want in env:
                print(entry)
        return 0
    if cmd == "table":
        return cmd_table(args)
    print(f"unknown command {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
