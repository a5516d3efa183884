"""Run mpi4py's own test suite (the sdist's test/main.py, or test/runtests.py of mpi4py 3.x)
on one rank and record the outcome.

Started once per rank by scripts/mpi4py-tests.sh under mpiexec:

    python runner.py --testdir SDIST/test --results DIR [--test-timeout S] [--skip-file F]
                     [--] [main.py options...]

Writes DIR/rank-<R>.jsonl while the suite runs (one line per test start and per outcome,
flushed at once, so that a rank that hangs or crashes still shows which test it was in) and
DIR/rank-<R>.json at the end (counts and the outcome of every test). The usual verbose
unittest output still goes to stderr.
"""

import argparse
import faulthandler
import fnmatch
import json
import os
import sys
import time
import unittest


def rank_from_env():
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID"):
        val = os.environ.get(var)
        if val is not None and val.isdigit():
            return int(val)
    return 0


def process_info():
    shm, preloaded, mpi_libs = set(), [], set()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6:
                    continue
                path = parts[5].strip()
                if path.startswith("/dev/shm/") and not path.endswith("(deleted)"):
                    shm.add(path)
                base = os.path.basename(path)
                if base.startswith("libmpicr"):
                    preloaded.append(path)
                if base.startswith(("libmpi.so", "libmpich.so")):
                    mpi_libs.add(path)
    except OSError:
        pass
    return {"shm": sorted(shm), "shim_loaded": bool(preloaded),
            "mpi_libs": sorted(mpi_libs)}


def first_lines(text, limit=12):
    """Head of a traceback plus its last lines (where the exception message is)."""
    lines = text.rstrip("\n").splitlines()
    if len(lines) <= limit:
        return lines
    return lines[:4] + ["..."] + lines[-(limit - 5):]


class Recorder:
    def __init__(self, results_dir, rank):
        self.rank = rank
        self.jsonl_path = os.path.join(results_dir, f"rank-{rank}.jsonl")
        self.json_path = os.path.join(results_dir, f"rank-{rank}.json")
        self.stream = open(self.jsonl_path, "w", encoding="utf-8")
        self.tests = {}
        self.order = []
        self.t0 = time.monotonic()
        self.subtests_passed = {}

    def event(self, **kw):
        kw["t"] = round(time.monotonic() - self.t0, 3)
        self.stream.write(json.dumps(kw) + "\n")
        self.stream.flush()

    def outcome(self, test_id, kind, detail=None, duration=None, subtest=None):
        entry = self.tests.get(test_id)
        if entry is None:
            entry = {"outcome": kind}
            self.tests[test_id] = entry
            self.order.append(test_id)
        # A test whose subtest failed is reported once more as passed by unittest: keep the
        # worst outcome.
        rank_of = {"passed": 0, "skipped": 1, "expected_failure": 1,
                   "unexpected_success": 2, "failed": 3, "error": 4}
        if rank_of.get(kind, 0) >= rank_of.get(entry["outcome"], 0):
            entry["outcome"] = kind
        if detail and subtest is None:
            entry.setdefault("detail", []).extend(detail)
        elif detail:
            # keep the first few failing subtests in full, count the rest
            entry["failed_subtests"] = entry.get("failed_subtests", 0) + 1
            if entry["failed_subtests"] <= 3:
                entry.setdefault("detail", []).extend([f"[subtest] {subtest}"] + detail)
        if duration is not None:
            entry["seconds"] = round(duration, 3)
        if subtest is not None and entry.get("failed_subtests", 0) > 3:
            detail = None  # the event log need not hold hundreds of tracebacks either
        self.event(ev="outcome", id=test_id, outcome=kind, detail=detail, subtest=subtest)

    def count_subtest(self, test_id):
        self.subtests_passed[test_id] = self.subtests_passed.get(test_id, 0) + 1

    def finish(self, result, seconds):
        for tid, n in self.subtests_passed.items():
            if tid in self.tests and self.tests[tid].get("failed_subtests"):
                self.tests[tid]["passed_subtests"] = n
        counts = {
            "run": result.testsRun,
            "failed": len(result.failures),
            "errors": len(result.errors),
            "skipped": len(result.skipped),
            "expected_failures": len(result.expectedFailures),
            "unexpected_successes": len(result.unexpectedSuccesses),
        }
        counts["passed"] = (counts["run"] - counts["failed"] - counts["errors"]
                            - counts["skipped"] - counts["expected_failures"]
                            - counts["unexpected_successes"])
        # Failures of subtests are counted once per subtest by unittest; passed above may
        # then go below the number of tests that passed. Count tests by their worst outcome.
        by_test = {}
        for entry in self.tests.values():
            by_test[entry["outcome"]] = by_test.get(entry["outcome"], 0) + 1
        data = {
            "rank": self.rank,
            "seconds": round(seconds, 2),
            "counts": counts,
            "tests_by_outcome": by_test,
            "tests": {tid: self.tests[tid] for tid in self.order},
        }
        tmp = self.json_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, self.json_path)
        self.event(ev="done", counts=counts)
        self.stream.close()


def drop_tests(suite, skip):
    """A copy of the suite without the tests whose id is in skip (an entry "Class.*" drops a
    whole class)."""
    prefixes = tuple(s[:-1] for s in skip if s.endswith(".*"))
    kept = unittest.TestSuite()
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            kept.addTest(drop_tests(item, skip))
        elif item.id() not in skip and not (prefixes and item.id().startswith(prefixes)):
            kept.addTest(item)
    return kept


def make_result_class(recorder, test_timeout):
    class RecordingResult(unittest.TextTestResult):
        def startTest(self, test):
            self._t0 = time.monotonic()
            recorder.event(ev="start", id=test.id())
            if test_timeout > 0:
                # a test that hangs: dump every thread's Python stack to stderr and end this
                # rank (mpiexec then ends the others), so the driver can go on without it
                faulthandler.dump_traceback_later(test_timeout, exit=True)
            super().startTest(test)

        def stopTest(self, test):
            if test_timeout > 0:
                faulthandler.cancel_dump_traceback_later()
            super().stopTest(test)

        def _dt(self):
            return time.monotonic() - getattr(self, "_t0", time.monotonic())

        def addSuccess(self, test):
            super().addSuccess(test)
            recorder.outcome(test.id(), "passed", duration=self._dt())

        def addFailure(self, test, err):
            super().addFailure(test, err)
            recorder.outcome(test.id(), "failed", first_lines(self.failures[-1][1]), self._dt())

        def addError(self, test, err):
            super().addError(test, err)
            recorder.outcome(test.id(), "error", first_lines(self.errors[-1][1]), self._dt())

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            recorder.outcome(test.id(), "skipped", [str(reason)], self._dt())

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            recorder.outcome(test.id(), "expected_failure", duration=self._dt())

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            recorder.outcome(test.id(), "unexpected_success", duration=self._dt())

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None:
                kind = "failed" if issubclass(err[0], test.failureException) else "error"
                text = self._exc_info_to_string(err, test)
                desc = subtest._subDescription()
                recorder.outcome(test.id(), kind, first_lines(text), subtest=desc)
            else:
                recorder.count_subtest(test.id())

    return RecordingResult


def split_exclusions(args):
    """main.py's -x PATTERN options (test ids, fnmatch, substring when without '*') out of
    args: mpi4py 3.x's runtests.py has no such option."""
    patterns, left = [], []
    it = iter(args)
    for arg in it:
        if arg == "-x":
            pat = next(it, "")
            patterns.append(pat if "*" in pat else f"*{pat}*")
        elif arg == "-e":
            # main.py matches -e against the file name, runtests.py against the module name
            pat = next(it, "")
            if pat.endswith(r"\.py"):
                pat = pat[: -len(r"\.py")] + "$"
            left += ["-e", pat]
        else:
            left.append(arg)
    return patterns, left


def drop_matching(suite, patterns):
    kept = unittest.TestSuite()
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            kept.addTest(drop_matching(item, patterns))
        elif not any(fnmatch.fnmatchcase(item.id(), p) for p in patterns):
            kept.addTest(item)
    return kept


def run_legacy(testdir, args, recorder, resultclass, skip):
    """mpi4py 3.x (Debian bookworm's python3-mpi4py): test/runtests.py, whose main() makes
    its own TextTestRunner; its steps are taken here with the recording runner. Its -e REGEX
    leaves test modules out as main.py's does. Exit status as runtests.py's."""
    patterns, args = split_exclusions(args)
    import runtests  # noqa: E402  (the suite's own entry point)

    options, args = runtests.getoptionparser().parse_args(args)
    # (runtests.setup_python only adds an in-tree build folder, and needs distutils)
    runtests.setup_unittest(options)
    package = runtests.import_package(options, "mpi4py")
    runtests.print_banner(options, package)
    suite = runtests.load_tests(options, args)
    if patterns:
        suite = drop_matching(suite, patterns)
    if skip:
        suite = drop_tests(suite, skip)
    recorder.event(ev="mpi", **process_info())
    runner = unittest.TextTestRunner(verbosity=options.verbose, resultclass=resultclass)
    t0 = time.monotonic()
    result = runner.run(suite)
    recorder.finish(result, time.monotonic() - t0)
    sys.exit(0 if result.wasSuccessful() else 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--testdir", required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--skip-file",
                        help="file of test ids (one a line) to leave out, uncounted")
    parser.add_argument("--test-timeout", type=float, default=0,
                        help="end the rank when one test runs longer (seconds; 0: never)")
    opts, rest = parser.parse_known_args()
    if rest and rest[0] == "--":
        rest = rest[1:]

    # a crash (SIGSEGV, SIGABRT, ...) prints the Python stack of every thread to stderr
    faulthandler.enable(all_threads=True)
    rank = rank_from_env()
    os.makedirs(opts.results, exist_ok=True)
    recorder = Recorder(opts.results, rank)
    recorder.event(ev="begin", pid=os.getpid(), argv=rest)

    sys.dont_write_bytecode = True
    testdir = os.path.abspath(opts.testdir)
    sys.path.insert(0, testdir)

    resultclass = make_result_class(recorder, opts.test_timeout)
    skip = set()
    if opts.skip_file:
        with open(opts.skip_file, encoding="utf-8") as f:
            skip = {line.strip() for line in f if line.strip()}

    if not os.path.exists(os.path.join(testdir, "main.py")):
        run_legacy(testdir, rest, recorder, resultclass, skip)
        return
    import main as mpi4py_main  # noqa: E402  (the suite's own entry point)

    class Runner(unittest.TextTestRunner):
        def __init__(self, **kw):
            kw["resultclass"] = resultclass
            super().__init__(**kw)

        def run(self, test):
            if skip:
                test = drop_tests(test, skip)
            # MPI is initialised by now (main.py imported mpi4py.MPI): note what the driver
            # may have to clean up if this rank dies, and whether the shim is really loaded.
            recorder.event(ev="mpi", **process_info())
            t0 = time.monotonic()
            result = super().run(test)
            recorder.finish(result, time.monotonic() - t0)
            return result

    # main.TestProgram discovers test_*.py in its own folder and exits with the usual status.
    sys.argv = [os.path.join(testdir, "main.py")] + rest
    mpi4py_main.main(module=None, testRunner=Runner)


if __name__ == "__main__":
    main()
