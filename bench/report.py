#!/usr/bin/env python3
"""Turns the raw measurements of scripts/bench.sh into the tables it prints.

usage: report.py RAW_FILE

RAW_FILE holds one measurement per line (whitespace-separated; written by scripts/bench.sh):
  meta KEY VALUE...                        e.g. "meta flavor mpich4 MPICH 4.0.2 (Debian)"
  s1 FLAVOR MODE REP lat|bw|call|coll KEY VALUE  MODE is native or shim; one line per mpibench result
  s2 WHO MIB REP FIELD VALUE               WHO is "criu" (bare CRIU) or "mpicr-FLAVOR";
                                           FIELD: stop_ms dump_ms bytes restore_ms ckpt_ms
  s2na WHO MIB TEXT...                     a row that could not be measured, and why
                                           (s2 FIELDs also: init_ms init_mpicr_ms restore_criu_ms
                                           restore_verify_ms lazy_restore_ms lazy_done_ms;
                                           mpicr-FLAVOR's lazy_restore_ms: `restart --lazy-pages`)
  s2i MODE MIB REP FIELD VALUE             section 2's incremental measurement: MODE full or
                                           incremental; FIELD stop_ms bytes back_ms (epoch 2,
                                           continue), stopx_ms bytesx (epoch 3, --stop)
  s2ina MODE MIB TEXT...                   why it could not be measured (or ran full dumps)
  s3 WHO NxMIB REP FIELD VALUE, s3na ...   section 3 (scaling): N processes of MIB MiB

Every value in a table is the median over repetitions. Nothing here judges speed by failing:
the goal column only says whether the stated goal is met.
"""
import statistics
import sys
from collections import defaultdict

SMALL_LAT_GOAL = 1.03   # small messages within 3% of native
CHEAP_CALLS = ("iprobe", "comm_rank")   # the calls the 40 ns goal is about
CALL_GOAL_NS = 40.0     # cheap calls: under 40 ns added per call
RESTART_GOAL = 1.2      # mpicr restart within 1.2x bare CRIU restore + one MPI_Init
INCR_GOAL = 0.2         # incremental stop time <= 0.2x a full dump's with 10% of memory changed
COLL_GOAL = 1.05        # the Allreduce loop on split communicators within 5% of native
CALL_NAMES = {"iprobe": "MPI_Iprobe (empty)", "comm_rank": "MPI_Comm_rank",
              "send_self": "MPI_Send+Recv to self", "isend_self": "Irecv+Isend+2 Wait self",
              "barrier_self": "MPI_Barrier(SELF)",
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


def med(table, *key):
    v = table.get(key)
    return statistics.median(v) if v else None


def restart_table(s2, rows, na, ranks):
    """Restart: mpicr next to bare CRIU's restore of the same memory plus one MPI_Init."""
    out = ["", f"  Restart, {ranks} ranks: reference = bare CRIU restore (above) + one MPI_Init of the same job "
               f"(launch to initialized); goal mpicr/reference <= {RESTART_GOAL}",
           "  keepers' CRIU = slowest `restored epoch ... in` of `mpicr restart -v` (CRIU restore and "
           "rejoining the coordinator);",
           "  verify = slowest 'verified the images ... in' (what the checksums (BLAKE3; SHA-256 for images of earlier versions) of the rank's images add: the metadata "
           "before the restore, the page files while CRIU restores); "
           "rest = mpicr - verify - keepers CRIU (launch, keepers, MPI library renewal);",
           "  Init via mpicr = the same MPI_Init job launched under `mpicr run` (what any mpicr start pays)",
           f"  {'who':<14}{'MiB/proc':>9}{'CRIU rst':>10}{'MPI_Init':>10}{'reference':>11}{'mpicr':>9}"
           f"{'ratio':>7}{'verify':>8}{'keepers CRIU':>14}{'rest':>8}{'Init via mpicr':>16}  goal"]
    lazy = []
    for who, mib in rows:
        if who == "criu":
            lr, ld, r = med(s2, who, mib, "lazy_restore_ms"), med(s2, who, mib, "lazy_done_ms"), med(s2, who, mib, "restore_ms")
            if lr is not None:
                lazy.append(f"  {'bare CRIU':<14}{mib:>9}{fmt(r):>10}{fmt(lr):>12}{fmt(ld):>14}"
                            f"{(lr / r if r else 0):>10.2f}{(ld / r if r else 0):>10.2f}")
            continue
        if (who, mib) in na:
            continue
        lr, r = med(s2, who, mib, "lazy_restore_ms"), med(s2, who, mib, "restore_ms")
        if lr is not None:
            # mpicr's launch to running (renewal included); "all in" is not measured for it.
            lazy.append(f"  {who:<14}{mib:>9}{fmt(r):>10}{fmt(lr):>12}{'-':>14}"
                        f"{(lr / r if r else 0):>10.2f}{'-':>10}")
        crst, init = med(s2, "criu", mib, "restore_ms"), med(s2, who, mib, "init_ms")
        mp, part = med(s2, who, mib, "restore_ms"), med(s2, who, mib, "restore_criu_ms")
        ver = med(s2, who, mib, "restore_verify_ms")
        ref = crst + init if crst is not None and init is not None else None
        ratio = mp / ref if ref and mp is not None else None
        goal = "" if ratio is None else f"{'met' if ratio <= RESTART_GOAL else 'MISSED'} (<={RESTART_GOAL})"
        out.append(f"  {who:<14}{mib:>9}{fmt(crst):>10}{fmt(init):>10}{fmt(ref):>11}{fmt(mp):>9}"
                   f"{(f'{ratio:.2f}' if ratio is not None else '-'):>7}"
                   f"{fmt(ver):>8}{fmt(part):>14}"
                   f"{fmt(mp - part - (ver or 0) if mp is not None and part is not None else None):>8}"
                   f"{fmt(med(s2, who, mib, 'init_mpicr_ms')):>16}  {goal}")
    if lazy:
        out += ["", "  CRIU lazy pages (bare CRIU, same images): `criu restore --lazy-pages -d` with a `criu "
                    "lazy-pages` daemon per process;", "  running = all restores returned; all in = all daemons "
                    "done (every page copied in); ratios to the plain restore;",
                "  mpicr-FLAVOR: `mpicr restart --lazy-pages` of the same epoch (launch to the program running, "
                "as the restart table), ratio to its plain restart",
                f"  {'who':<14}{'MiB/proc':>9}{'plain ms':>10}{'running ms':>12}{'all in ms':>14}"
                f"{'running/':>10}{'all in/':>10}"] + lazy
    return out


def incremental_table(s2i, mibs, na):
    """Full dumps next to incremental ones of the same workload, and their ratio."""
    out = ["", "  incremental checkpoints: 2 ranks of dirty (the same contiguous tenth of each rank's memory "
           "rewritten every 50 ms),",
           "  under `mpicr run` (full) and `mpicr run --incremental`; epoch 2 continues, epoch 3 is --stop "
           "(epoch 1, full in both, not shown);",
           "  MPI back: the renewed library (MPI calls waited until then); ratio: incremental/full stop time",
           f"  {'MiB/proc':>10}{'epoch':>7}{'full stop':>11}{'incr stop':>11}{'ratio':>7}{'full MiB':>10}"
           f"{'incr MiB':>10}{'MPI back f/i ms':>17}  goal"]
    for mib in mibs:
        if mib in na:
            out.append(f"  {mib:>10}  {na[mib]}")
        for epoch, stop, nbytes in (("2", "stop_ms", "bytes"), ("3 stop", "stopx_ms", "bytesx")):
            full, incr = med(s2i, "full", mib, stop), med(s2i, "incremental", mib, stop)
            if full is None and incr is None:
                continue
            fb, ib = med(s2i, "full", mib, nbytes), med(s2i, "incremental", mib, nbytes)
            ratio = incr / full if full and incr is not None else None
            back = ""
            if epoch == "2":
                back = f"{fmt(med(s2i, 'full', mib, 'back_ms'))}/{fmt(med(s2i, 'incremental', mib, 'back_ms'))}"
            goal = f"{'met' if ratio <= INCR_GOAL else 'MISSED'} (<={INCR_GOAL})" if ratio is not None else ""
            out.append(f"  {mib:>10}{epoch:>7}{fmt(full):>11}{fmt(incr):>11}"
                       f"{(f'{ratio:.2f}' if ratio is not None else '-'):>7}"
                       f"{fmt(fb / 2**20 if fb else None):>10}{fmt(ib / 2**20 if ib else None):>10}{back:>17}  {goal}")
    return out


def fit(xs, ys):
    """Least-squares slope and intercept; None when fewer than 2 distinct x."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return b, my - b * mx


def scaling_tables(s3, keys, na, meta):
    reps = meta["scale_reps"][0][0] if meta.get("scale_reps") else "?"
    out = [f"Section 3: scaling of the checkpoint (median of {reps} runs); bare CRIU dumps N plain processes "
           "at once, mpicr checkpoints N ranks (continue)",
           "  stop: longest frozen time (CRIU) / stop time printed by `mpicr checkpoint`; dump: wall time; "
           "ms/GiB = dump ms per GiB written",
           f"  {'who':<14}{'ranks':>6}{'MiB/proc':>9}{'stop ms':>9}{'dump ms':>9}{'MiB written':>12}"
           f"{'ms/GiB':>8}{'stop/CRIU':>10}{'dump/CRIU':>10}"]
    series = {}
    for who in sorted(keys, key=lambda w: (w != "criu", w)):
        for key in sorted(keys[who], key=lambda k: tuple(int(x) for x in k.split("x"))):
            n, mib = (int(x) for x in key.split("x"))
            label = "bare CRIU" if who == "criu" else who
            if (who, key) in na:
                out.append(f"  {label:<14}{n:>6}{mib:>9}  {na[(who, key)]}")
                continue
            stop, dump, nb = med(s3, who, key, "stop_ms"), med(s3, who, key, "dump_ms"), med(s3, who, key, "bytes")
            cs, cd = med(s3, "criu", key, "stop_ms"), med(s3, "criu", key, "dump_ms")
            per_gib = dump / (nb / 2**30) if dump and nb else None
            r1 = stop / cs if who != "criu" and stop and cs else None
            r2 = dump / cd if who != "criu" and dump and cd else None
            out.append(f"  {label:<14}{n:>6}{mib:>9}{fmt(stop):>9}{fmt(dump):>9}"
                       f"{fmt(nb / 2**20 if nb else None):>12}{fmt(per_gib):>8}"
                       f"{(f'{r1:.2f}' if r1 else '-'):>10}{(f'{r2:.2f}' if r2 else '-'):>10}")
            series.setdefault(who, []).append((n, mib, stop, dump, nb))
    out += ["", "  slopes (least squares): per rank at 64 MiB/proc; per GiB/proc at 2 ranks; "
                "per GiB written over all points"]
    for who, pts in series.items():
        label = "bare CRIU" if who == "criu" else who
        parts = []
        for what, idx in (("stop", 2), ("dump", 3)):
            r = [(p[0], p[idx]) for p in pts if p[1] == 64 and p[idx] is not None]
            m = [(p[1] / 1024, p[idx]) for p in pts if p[0] == 2 and p[idx] is not None]
            w = [(p[4] / 2**30, p[idx]) for p in pts if p[4] and p[idx] is not None]
            fr, fm, fw = fit(*zip(*r)) if r else None, fit(*zip(*m)) if m else None, fit(*zip(*w)) if w else None
            parts.append(f"{what} {fmt(fr[0]) if fr else '-'} ms/rank, {fmt(fm[0]) if fm else '-'} ms/GiB, "
                         f"{fmt(fw[0]) if fw else '-'} ms/GiB written")
        out.append(f"  {label:<14}" + "; ".join(parts))
    for who, pts in series.items():
        w = [(p[4] / 2**30, p[3]) for p in pts if p[4] and p[3] is not None]
        c = [(p[4] / 2**30, p[3]) for p in series.get("criu", []) if p[4] and p[3] is not None]
        fw, fc = (fit(*zip(*w)) if w else None), (fit(*zip(*c)) if c else None)
        if who != "criu" and fw and fc and fc[0]:
            out.append(f"  {who}: dump per GiB written {fw[0] / fc[0]:.2f}x bare CRIU's; fixed part "
                       f"{fmt(fw[1])} ms vs {fmt(fc[1])} ms (intercepts)")
    out += ["", "  faster than the bytes? dump ms per GiB written, smallest -> largest point of each series "
                "(rising: something grows faster than the bytes)"]
    for who, pts in series.items():
        label = "bare CRIU" if who == "criu" else who
        parts = []
        for name, sel, order in (("ranks", lambda p: p[1] == 64, 0), ("memory", lambda p: p[0] == 2, 1)):
            q = sorted((p for p in pts if sel(p) and p[3] and p[4]), key=lambda p: p[order])
            if len(q) < 2:
                continue
            a, b = (p[3] / (p[4] / 2**30) for p in (q[0], q[-1]))
            verdict = "yes" if b > 1.1 * a else "no"
            parts.append(f"{name} {fmt(a)} -> {fmt(b)} ({verdict})")
        out.append(f"  {label:<14}" + "; ".join(parts))
    return out


def main(path):
    meta = defaultdict(list)
    s1 = defaultdict(dict)            # (flavor, kind, key, mode) -> {rep: value}
    s1_order = []                     # (flavor, kind, key) in first-seen order
    s2 = defaultdict(list)            # (who, mib, field) -> [values]
    s2_rows = []                      # (who, mib) in first-seen order
    s2_na = {}
    s2i = defaultdict(list)           # (mode, mib, field) -> [values]
    s2i_mibs = []
    s2i_na = {}
    s3 = defaultdict(list)            # (who, "NxMIB", field) -> [values]
    s3_keys = {}                      # who -> ["NxMIB", ...] in first-seen order
    s3_na = {}
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
            elif p[0] == "s2i":
                _, mode, mib, _rep, field, value = p
                if mib not in s2i_mibs:
                    s2i_mibs.append(mib)
                s2i[(mode, mib, field)].append(float(value))
            elif p[0] == "s2ina":
                if p[2] not in s2i_mibs:
                    s2i_mibs.append(p[2])
                s2i_na[p[2]] = " ".join(p[3:])
            elif p[0] == "s3":
                _, who, key, _rep, field, value = p
                s3[(who, key, field)].append(float(value))
                s3_keys.setdefault(who, [])
                if key not in s3_keys[who]:
                    s3_keys[who].append(key)
            elif p[0] == "s3na":
                s3_na[(p[1], p[2])] = " ".join(p[3:])
                s3_keys.setdefault(p[1], [])
                if p[2] not in s3_keys[p[1]]:
                    s3_keys[p[1]].append(p[2])

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
        out.append("  the same (adjacent) run pair, [min..max] its spread; best: shim/native of the best run of")
        out.append("  each mode (robust against other load); added: shim - native medians.")
        hdr = (f"  {'measurement':<24}{'unit':<8}{'native':>9}{'shim':>9}{'ratio':>8}  {'[min..max]':<14}"
               f"{'best':>6}{'added':>10}  goal")
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
                pick = max if kind == "bw" else min  # the best run: lowest time, highest bandwidth
                best = pick(shm.values()) / pick(nat.values()) if nat and shm and pick(nat.values()) else None
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
                           f"{(f'{ratio:.3f}' if ratio is not None else '-'):>8}  {rng:<14}"
                           f"{(f'{best:.2f}' if best is not None else '-'):>6}{added_s:>10}  {goal}")
        if meta.get("shim"):
            out.append("")
            out.append("  shim: " + " ".join(meta["shim"][0]))

    if s2_rows:
        if out:
            out.append("")
        reps = meta["ckpt_reps"][0][0] if meta.get("ckpt_reps") else "?"
        ranks = meta["ckpt_ranks"][0][0] if meta.get("ckpt_ranks") else "4"
        out.append(f"Section 2: checkpoint cost, {ranks} processes dumped concurrently; median of {reps} runs")
        out.append(f"  bare CRIU: stop = longest 'Frozen time' of the {ranks} dumps; dump = wall time until every "
                   f"image was written; restore = wall time of {ranks} concurrent `criu restore -d`")
        out.append("  mpicr: stop and MiB as printed by `mpicr checkpoint`; dump = wall time of that command; "
                   "restore = `mpiexec mpicr restart` launch until the program runs again")
        out.append("  MB/s = bytes written / dump")
        if meta.get("warm"):
            out.append("  free memory warmed before each dump (BENCH_WARM=1: this VM hands free pages back to its host, "
                       "whose first write costs ~10x)" if meta["warm"][0][0] == "1" else
                       "  free memory NOT warmed (BENCH_WARM=0): a dump meeting pages the VM handed back to its host pays ~10x per page")
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
        out.extend(restart_table(s2, s2_rows, s2_na, ranks))
    if s2i_mibs:
        out.extend(incremental_table(s2i, s2i_mibs, s2i_na))
    if s3_keys:
        if out:
            out.append("")
        out.extend(scaling_tables(s3, s3_keys, s3_na, meta))
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
