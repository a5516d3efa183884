#!/usr/bin/env python3
"""Turns the raw measurements of scripts/bench.sh into the tables it prints.

usage: report.py RAW_FILE

RAW_FILE holds one measurement per line (whitespace-separated; written by scripts/bench.sh):
  meta KEY VALUE...                        e.g. "meta flavor mpich4 MPICH 4.0.2 (Debian)"
  s1 FLAVOR MODE REP lat|bw|call|coll KEY VALUE  MODE is native or shim; one line per mpibench result
  s2 WHO MIB REP FIELD VALUE               WHO is "criu" (bare CRIU) or "mpicr-FLAVOR";
                                           FIELD: stop_ms dump_ms bytes restore_ms ckpt_ms
  s2na WHO MIB TEXT...                     a row that could not be measured, and why

Every value in a table is the median over repetitions. Nothing here judges speed by failing:
the goal column only says whether the stated goal is met.
"""
import statistics
import sys
from collections import defaultdict

SMALL_LAT_GOAL = 1.03   # small messages within 3% of native
CHEAP_CALLS = ("iprobe", "comm_rank")   # the calls the 40 ns goal is about
CALL_GOAL_NS = 40.0     # cheap calls: under 40 ns added per call
COLL_GOAL = 1.05        # the Allreduce loop on split communicators within 5% of native
CALL_NAMES = {"iprobe": "MPI_Iprobe (empty)", "comm_rank": "MPI_Comm_rank",
              "send_self": "MPI_Send+Recv to self", "barrier_self": "MPI_Barrier(SELF)",
              "test_null": "MPI_Test(REQUEST_NULL)", "allreduce_self": "MPI_Allreduce(SELF,1)"}


def size_name(n):
    n = int(n)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def fmt(v, digits=3):
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:.0f}"
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:.{digits}g}" if abs(v) < 1 else f"{v:.2f}"


def main(path):
    meta = defaultdict(list)
    s1 = defaultdict(dict)            # (flavor, kind, key, mode) -> {rep: value}
    s1_order = []                     # (flavor, kind, key) in first-seen order
    s2 = defaultdict(list)            # (who, mib, field) -> [values]
    s2_rows = []                      # (who, mib) in first-seen order
    s2_na = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if not p:
                continue
            if p[0] == "meta":
                meta[p[1]].append(p[2:])
            elif p[0] == "s1":
                _, flavor, mode, rep, kind, key, value = p
                k = (flavor, kind, key)
                if k not in s1_order:
                    s1_order.append(k)
                s1[k + (mode,)][rep] = float(value)
            elif p[0] == "s2":
                _, who, mib, _rep, field, value = p
                if (who, mib) not in s2_rows:
                    s2_rows.append((who, mib))
                s2[(who, mib, field)].append(float(value))
            elif p[0] == "s2na":
                who, mib = p[1], p[2]
                if (who, mib) not in s2_rows:
                    s2_rows.append((who, mib))
                s2_na[(who, mib)] = " ".join(p[3:])

    out = []
    names = {m[0]: " ".join(m[1:]) for m in meta.get("flavor", [])}
    if s1_order:
        reps = meta["reps"][0][0] if meta.get("reps") else "?"
        bind = " ".join(meta["bind"][0]) if meta.get("bind") else "none"
        if meta.get("shim"):
            how = f"{reps} runs per mode, native and shim runs interleaved (ABBA), ranks bound: {bind}"
        else:
            how = f"{reps} runs, NATIVE ONLY (--native-only: the shim was not measured)"
        out.append(f"Section 1: interposition overhead, 2 ranks; {how}")
        out.append("  goals: latency <= 1 KiB shim/native <= 1.03; Allreduce on split comms <= 1.05; cheap calls")
        out.append("  < 40 ns added. native, shim: medians over runs. ratio: median over runs of shim/native of")
        out.append("  the same (adjacent) run pair, [min..max] its spread; added: shim - native medians.")
        hdr = (f"  {'measurement':<24}{'unit':<8}{'native':>9}{'shim':>9}{'ratio':>8}  {'[min..max]':<14}"
               f"{'added':>10}  goal")
        flavor_seen = []
        for flavor, _, _ in s1_order:
            if flavor not in flavor_seen:
                flavor_seen.append(flavor)
        for flavor in flavor_seen:
            out.append("")
            out.append(f"  {flavor}: {names.get(flavor, '')}")
            out.append(hdr)
            for fl, kind, key in s1_order:
                if fl != flavor:
                    continue
                nat = s1.get((fl, kind, key, "native"), {})
                shm = s1.get((fl, kind, key, "shim"), {})
                n = statistics.median(nat.values()) if nat else None
                s = statistics.median(shm.values()) if shm else None
                pairs = [shm[r] / nat[r] for r in nat if r in shm and nat[r]]
                ratio = statistics.median(pairs) if pairs else None
                rng = f"[{min(pairs):.2f}..{max(pairs):.2f}]" if len(pairs) > 1 else ""
                if kind == "lat":
                    label, unit = f"latency {size_name(key)}", "us"
                elif kind == "bw":
                    label, unit = f"bandwidth {size_name(key)}", "MB/s"
                elif kind == "coll":
                    label, unit = {"allreduce_split": "Allreduce, split comms"}.get(key, key), "us/call"
                else:
                    label = CALL_NAMES.get(key, key)
                    unit = "ns/call"
                added, goal = None, ""
                if kind in ("lat", "coll") and (kind == "coll" or int(key) <= 1024):
                    added = (s - n) * 1000.0 if n is not None and s is not None else None  # ns
                    lim = SMALL_LAT_GOAL if kind == "lat" else COLL_GOAL
                    if ratio is not None:
                        goal = f"{'met' if ratio <= lim else 'MISSED'} (<={lim})"
                elif kind == "call":
                    added = s - n if n is not None and s is not None else None
                    if added is not None and key in CHEAP_CALLS:
                        goal = f"{'met' if added < CALL_GOAL_NS else 'MISSED'} (<40 ns)"
                if added is None:
                    added_s = "-"
                elif abs(added) >= 1000:
                    added_s = f"{added / 1000:+.2f}us"
                else:
                    added_s = f"{added:+.1f}ns"
                out.append(f"  {label:<24}{unit:<8}{fmt(n):>9}{fmt(s):>9}"
                           f"{(f'{ratio:.3f}' if ratio is not None else '-'):>8}  {rng:<14}{added_s:>10}  {goal}")
        if meta.get("shim"):
            out.append("")
            out.append("  shim: " + " ".join(meta["shim"][0]))

    if s2_rows:
        if out:
            out.append("")
        reps = meta["ckpt_reps"][0][0] if meta.get("ckpt_reps") else "?"
        out.append(f"Section 2: checkpoint cost, 4 processes dumped concurrently; median of {reps} runs")
        out.append("  bare CRIU: stop = longest 'Frozen time' of the 4 dumps; dump = wall time until every "
                   "image was written; restore = wall time of 4 concurrent `criu restore -d`")
        out.append("  mpicr: stop and MiB as printed by `mpicr checkpoint`; dump = wall time of that command; "
                   "restore = `mpiexec mpicr restart` launch until the program runs again")
        out.append("  MB/s = bytes written / dump")
        out.append(f"  {'who':<22}{'MiB/proc':>9}{'stop ms':>10}{'dump ms':>10}{'MiB written':>13}"
                   f"{'MB/s':>9}{'restore ms':>12}")
        for who, mib in s2_rows:
            label = "bare CRIU, no MPI" if who == "criu" else who
            if (who, mib) in s2_na:
                out.append(f"  {label:<22}{mib:>9}  {s2_na[(who, mib)]}")
                continue

            def med(field):
                v = s2.get((who, mib, field))
                return statistics.median(v) if v else None

            stop, dump, nbytes, restore = med("stop_ms"), med("dump_ms"), med("bytes"), med("restore_ms")
            mbps = nbytes / (dump / 1000.0) / 1e6 if nbytes and dump else None
            out.append(f"  {label:<22}{mib:>9}{fmt(stop):>10}{fmt(dump):>10}"
                       f"{fmt(nbytes / 2**20 if nbytes else None):>13}{fmt(mbps):>9}{fmt(restore):>12}")
    if meta.get("load_start"):
        out.append("")
        start, end = " ".join(meta["load_start"][0]), " ".join(meta.get("load_end", [["?"]])[0])
        out.append(f"Load average at the start: {start}; at the end: {end} (the benchmark itself adds ~2)")
        try:
            busy = float(meta["load_start"][0][0]) > 1.5
        except ValueError:
            busy = False
        if busy:
            out.append("WARNING: other work was running when this started (1-minute load above 1.5): "
                       "timings, section 1 above all, are unreliable; rerun on an idle machine.")
    print("\n".join(out))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: report.py RAW_FILE")
    main(sys.argv[1])
