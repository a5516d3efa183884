"""Summarise runs of mpi4py's test suite made by scripts/mpi4py-tests.sh.

    report.py check RUNDIR RANKS
        exit 0 if the run in RUNDIR finished on every rank (used to decide whether a native
        run may be cached), 1 otherwise.
    report.py stopped RUNDIR RANKS
        print the tests in which ranks of an unfinished run stopped (crash or hang).
    report.py seen RUNDIR RANKS
        print every test that started on some rank of the run or of its retries.
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
import re
import sys

COUNT_KEYS = ("run", "passed", "failed", "errors", "skipped")
BAD = ("failed", "error")


def read_status(rundir):
    try:
        rc, seconds, limit = open(os.path.join(rundir, "status.txt")).read().split()[:3]
        return int(rc), float(seconds), int(limit)
    except (OSError, ValueError):
        return None, None, None


TEST_LINE = re.compile(r"^\w+ \([\w.]+\) \.\.\. ?")


def tail(path, n=10):
    """What a rank that never finished wrote to stderr in its last test: the messages of the
    MPI library or the shim, then, when Python's faulthandler wrote there (a fatal signal, or
    the per-test watchdog), the innermost frames of every thread, without the unittest
    machinery."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().rstrip("\n").splitlines()
    except OSError:
        return []
    fatal = None
    for i in range(len(lines) - 1, -1, -1):
        if "Fatal Python error" in lines[i] or lines[i].startswith("Timeout ("):
            fatal = i
            break
    end = len(lines) if fatal is None else fatal
    start = next((j for j in range(end - 1, -1, -1) if TEST_LINE.match(lines[j])), None)
    if start is None:
        out = lines[max(0, end - n):end]
    else:
        out = [TEST_LINE.sub("", lines[start])] + lines[start + 1:end]
        out = [ln for ln in out if ln.strip()]
        if len(out) > 16:
            out = out[:12] + ["..."] + out[-3:]
    if fatal is not None:
        line = lines[fatal]
        line = TEST_LINE.sub("", line)
        out.append(line)
        frames = 0
        for ln in lines[fatal + 1:]:
            if not ln.strip() or ln.startswith("Extension modules"):
                continue
            if "most recent call first" in ln:
                out.append(ln)
                frames = 0
            elif frames < 6 and "/unittest/" not in ln and "threading.py" not in ln:
                out.append(ln)
                frames += 1
    return out[:44]


def load_rank(rundir, rank):
    """The outcome of one rank: from rank-R.json when the suite finished there, else rebuilt
    from rank-R.jsonl. Also counts from the events (same rules as unittest's counts: one per
    failing subtest), so that runs cut short can be added up."""
    tests, order, current, last_done = {}, [], None, None
    info = {"shim_loaded": None, "mpi_libs": None, "started": False}
    ev_counts = {"run": 0, "failed": 0, "errors": 0, "skipped": 0, "other": 0}
    for ev in iter_events(rundir, rank):
        kind = ev.get("ev")
        if kind == "begin":
            info["started"] = True
        elif kind == "mpi":
            info["shim_loaded"], info["mpi_libs"] = ev.get("shim_loaded"), ev.get("mpi_libs")
        elif kind == "start":
            current = ev["id"]
            ev_counts["run"] += 1
        elif kind == "outcome":
            tid, out = ev["id"], ev["outcome"]
            key = {"failed": "failed", "error": "errors", "skipped": "skipped",
                   "expected_failure": "other", "unexpected_success": "other"}.get(out)
            if key:
                ev_counts[key] += 1
            entry = tests.get(tid)
            if entry is None:
                order.append(tid)
                entry = tests[tid] = {"outcome": out}
            elif out in BAD or entry["outcome"] == "passed":
                entry["outcome"] = out
            if ev.get("subtest") is not None:
                if out in BAD:
                    entry["failed_subtests"] = entry.get("failed_subtests", 0) + 1
                    if ev.get("detail"):
                        entry.setdefault("detail", []).extend(
                            [f"[subtest] {ev['subtest']}"] + ev["detail"])
                continue  # the test itself goes on
            if ev.get("detail"):
                entry.setdefault("detail", []).extend(ev["detail"])
            if current == tid:
                current, last_done = None, tid
    ev_counts["passed"] = (ev_counts["run"] - ev_counts["failed"] - ev_counts["errors"]
                           - ev_counts["skipped"] - ev_counts["other"])
    path = os.path.join(rundir, f"rank-{rank}.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        data.update(info, complete=True, in_test=None, last_done=last_done,
                    event_counts=ev_counts)
        return data
    return dict(info, rank=rank, complete=False, in_test=current, last_done=last_done,
                tests={tid: tests[tid] for tid in order}, event_counts=ev_counts,
                err_tail=tail(os.path.join(rundir, f"err.{rank}")))


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


def load_single(rundir, ranks):
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


def stops_of(attempt):
    """Where the ranks of an attempt that did not finish stopped: [(rank, test, what, tail)].
    A rank found between two tests is left out when another rank stopped inside a test (it
    was ended by mpiexec because of that one)."""
    what = "TIMEOUT/HANG" if attempt["timed_out"] else f"CRASH/ABORT (rc={attempt['rc']})"
    cut = [r for r in attempt["ranks"] if not r["complete"]]
    if any(ln.startswith("Timeout (") for r in cut for ln in r.get("err_tail", [])):
        what = "HANG (ended by the per-test watchdog)"
    inside = [r for r in cut if r.get("in_test")]
    stops = []
    for r in inside or cut:
        if r.get("in_test"):
            where = r["in_test"]
        elif r.get("last_done"):
            where = f"<between tests, after {r['last_done']}>"
        else:
            where = "<startup: before the first test>"
        stops.append((r["rank"], where, what, r.get("err_tail", [])))
    return stops


def load_run(rundir, ranks):
    """A run, with the retries the driver made after a crash or hang (RUNDIR/retry-K/, each
    run with the tests that never finished before excluded)."""
    attempts = [load_single(rundir, ranks)]
    k = 2
    while os.path.isdir(os.path.join(rundir, f"retry-{k}")):
        attempts.append(load_single(os.path.join(rundir, f"retry-{k}"), ranks))
        k += 1
    run = dict(attempts[-1])
    run["dir"] = rundir
    run["attempts"] = attempts
    run["seconds"] = sum(a["seconds"] or 0 for a in attempts)
    run["stops"] = [st for a in attempts for st in stops_of(a)]
    # the outcome of every test on each rank, later attempts overriding earlier ones
    merged = []
    for rank in range(ranks):
        tests = {}
        for a in attempts:
            tests.update(a["ranks"][rank]["tests"])
        merged.append(tests)
    run["merged"] = merged
    run["skipped_classes"] = set()
    for a in attempts[1:]:
        try:
            with open(os.path.join(a["dir"], "skip.txt"), encoding="utf-8") as f:
                run["skipped_classes"].update(ln.strip() for ln in f if ln.strip().endswith(".*"))
        except OSError:
            pass
    # counts added up over the attempts (a test that never finished counts as an error)
    totals = []
    for rank in range(ranks):
        t = dict.fromkeys(COUNT_KEYS, 0)
        for a in attempts:
            c = a["ranks"][rank]["event_counts"]
            for k in COUNT_KEYS:
                t[k] += c[k]
        for st in run["stops"]:
            if st[0] == rank and not st[1].startswith("<"):
                t["errors"] += 1
                t["passed"] -= 1  # its start event counted it as run, so as passed
        totals.append(tuple(t[k] for k in COUNT_KEYS))
    run["totals"] = totals
    return run


def counts_of(rank_data):
    if rank_data["complete"]:
        c = rank_data["counts"]
        return tuple(c[k] for k in COUNT_KEYS)
    return None


def fmt_counts(run):
    if run is None:
        return "-"
    secs = f" {run['seconds']:.0f}s" if run["seconds"] is not None else ""
    if run["stops"]:
        # cut short at least once: the counts added up over the attempts
        n = len({st[1] for st in run["stops"]})
        text = "/".join(str(x) for x in run["totals"][0])
        end = "" if run["complete"] else ", last one cut short too"
        return f"{text}{secs} ({n} test(s) crashed/hung, {len(run['attempts'])} attempts{end})"
    all_counts = {counts_of(r) for r in run["ranks"]}
    text = "/".join(str(x) for x in counts_of(run["ranks"][0])) + secs
    if len(all_counts) > 1:
        text += " (ranks differ)"
    return text


def compare(native, shim):
    """List of (rank, test id, native outcome, shim outcome, detail) that differ."""
    diffs = []
    stopped = {(rank, tid) for rank, tid, _, _ in shim["stops"]}
    for rank, (n, stests) in enumerate(zip(native["ranks"], shim["merged"])):
        ntests = n["tests"]
        for tid, st in stests.items():
            if (rank, tid) in stopped:
                continue
            nt = ntests.get(tid)
            nout = nt["outcome"] if nt else "absent"
            if st["outcome"] != nout:
                detail = list(st.get("detail", []))
                if st.get("failed_subtests"):
                    detail.insert(0, f"({st['failed_subtests']} subtest(s) failed, "
                                     f"{st.get('passed_subtests', 0)} passed; first ones:)")
                diffs.append((rank, tid, nout, st["outcome"], detail))
        if shim["complete"]:
            left_out = {}
            for tid, nt in ntests.items():
                if tid not in stests and (rank, tid) not in stopped:
                    prefix = next((p for p in shim["skipped_classes"]
                                   if tid.startswith(p[:-1])), None)
                    if prefix:
                        left_out.setdefault(prefix, []).append(tid)
                    else:
                        diffs.append((rank, tid, nt["outcome"], "absent", []))
            for prefix, tids in left_out.items():
                diffs.append((rank, prefix, "ran", f"{len(tids)} test(s) not run under the "
                              "shim (the class crashed/hung twice in a row)", []))
    for rank, tid, what, tail_lines in shim["stops"]:
        nout = native["ranks"][rank]["tests"].get(tid, {}).get("outcome", "-")
        diffs.append((rank, tid, nout, f"{what}, test never finished",
                      ["stderr of the rank ends with:"] + tail_lines))
    return diffs


def verdict(native, shim):
    if shim is None:
        return "native only"
    if not native["complete"]:
        return "NATIVE INCOMPLETE"
    if shim["stops"]:
        return "FAIL (crash/hang)"
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
                            [(rank, tid, "-", what, tail_lines)
                             for rank, tid, what, tail_lines in native["stops"]]))
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
        # At 2 ranks the same test usually differs on every rank: print it once, with the
        # details of the lowest rank.
        ntests = len({d[1] for d in diffs})
        print(f"== {flavor} at {ranks} rank(s): {ntests} test(s) {title}")
        seen = {}
        for rank, tid, nout, sout, detail in diffs:
            key = (tid, nout, sout)
            if key in seen:
                seen[key][0].append(rank)
                continue
            seen[key] = ([rank], detail)
        for (tid, nout, sout), (rks, detail) in seen.items():
            print(f"  {tid}  [rank {','.join(map(str, rks))}]  native={nout}  shim={sout}")
            for d in detail[:24]:
                print(f"      {d}")
    return status


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "check":
        run = load_single(args[0], int(args[1]))
        return 0 if run["complete"] else 1
    if cmd == "stopped":
        for tid in sorted({st[1] for st in stops_of(load_single(args[0], int(args[1])))}):
            if not tid.startswith("<"):
                print(tid)
        return 0
    if cmd == "seen":
        # every test that started or finished on some rank of the run and its retries
        run = load_run(args[0], int(args[1]))
        seen = set()
        for tests in run["merged"]:
            seen.update(tests)
        stopped = [st[1] for st in run["stops"] if not st[1].startswith("<")]
        seen.update(stopped)
        # the same class stopped twice in a row: leave the rest of the class out
        classes = [tid.rsplit(".", 1)[0] for tid in stopped]
        if len(classes) >= 2 and classes[-1] == classes[-2]:
            seen.add(classes[-1] + ".*")
        for tid in sorted(seen):
            print(tid)
        return 0
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
