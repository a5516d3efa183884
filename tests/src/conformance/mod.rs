//! MPICH's own test suite (`test/mpi` of Debian's `mpich` 4.0.2 source package) natively,
//! under the shim and through one checkpoint, with per-test results compared.
//!
//! `scripts/conformance.sh` fetches nothing (`scripts/deps.sh` unpacks the source into
//! `.deps/mpich-src/`), configures the suite once per MPICH build into
//! `.deps/mpich-tests/<flavor>/` and runs `tests/conformance.rs`, which drives this module:
//!
//! 1. The entries of each directory's `testlist` (see `testlist.rs`), less MPICH's own
//!    expected failures (`xfail=`) and those over `max_ranks` ranks, less `exclude.txt`
//!    (tests that fail natively, each with its reason: `lists.rs`), or only those that the CI
//!    selection `ci.txt` names.
//! 2. Each is built when missing (`make PROGRAM` in its directory of the build tree, as
//!    MPICH's `runtests` does) and run natively; its verdict follows the suite's rules
//!    (`verdict.rs`: one " No Errors" line and exit status 0, unless the list asks for a
//!    non-zero status).
//! 3. A test that passed natively runs again under the shim (`LD_PRELOAD`), and (for programs that run long
//!    enough natively to be caught mid-way, or that `ci.txt` marks) under `mpicr run` with one
//!    checkpoint at a random instant, once going on and once stopped and restarted
//!    (`ckpt::checkpoint_foreign`); the output over every launch is judged by the same rules.
//! 4. A test that passes natively and fails in another mode is a difference; one listed in
//!    `known-issue14.txt` is reported as known, any other fails the run.
//!
//! Every run is bounded (the entry's `timeLimit`, at most `timeout_cap`), its processes are
//! ended, and files it leaves in /dev/shm are removed.

pub mod lists;
pub mod testlist;
pub mod verdict;

use crate::ckpt::{self, Foreign, ForeignRun};
use crate::error::Error;
use crate::{job, Flavor, Harness, Job, JobOutput, Scratch};
use lists::{Listed, Selected};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use testlist::{Entry, Judge};

/// The directories of `test/mpi` that are run by default (those issue 14 names).
pub const DIRS: [&str; 13] = ["attr", "coll", "comm", "datatype", "errhan", "group", "info", "init", "io", "pt2pt", "rma", "threads", "topo"];

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub flavors: Vec<Flavor>,
    pub dirs: Vec<String>,
    pub shim: bool,
    pub checkpoint: bool,
    /// `ci.txt`'s selection instead of every entry.
    pub selection: Option<Vec<Selected>>,
    /// Substrings of test ids; empty: every test.
    pub filters: Vec<String>,
    pub max_ranks: u32,
    /// No run lasts longer than this, whatever the entry's `timeLimit`.
    pub timeout_cap: Duration,
    /// Without a selection, programs whose native run lasted at least this long also run
    /// through checkpoints.
    pub ckpt_min: Duration,
    pub exclude: Vec<Listed>,
    pub known: Vec<Listed>,
    /// Where each flavor's configured build tree is: `<builds>/<flavor>`.
    pub builds: PathBuf,
    /// MPICH's `test/mpi` sources.
    pub source: PathBuf,
    /// Where the per-run results (TSV) and the failures' full reports are written.
    pub out_dir: PathBuf,
    /// Run nothing: take the results of these `results.tsv` files of earlier runs (a run in
    /// chunks, then reruns: a later file's result of a test and mode replaces an earlier one's),
    /// judge them against the current lists and print the summary (tests they lack count as
    /// not run). Empty: run the tests.
    pub rejudge: Vec<PathBuf>,
}

/// The outcome of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// The first line that says why.
    Fail(String),
    /// A checkpoint mode whose program ended by itself, with status 0 and output that passes,
    /// before the checkpoint was committed (else it is a `Fail`, with the status or output).
    Missed,
    /// A checkpoint mpicr refused with its message for what it cannot checkpoint yet (an open
    /// MPI file or window, a session, a pending request of some kinds; see `REFUSALS`), after
    /// which the job ended well: no checkpoint was taken, nothing to compare; the message.
    Refused(String),
}

/// What mpicr says when a checkpoint meets state it does not handle yet: the refusals of the
/// shim's object kinds (`shim/src/core/kinds/*.rs`, `Renewable::refusal`).
pub const REFUSALS: [&str; 5] = [
    "cannot be checkpointed yet",
    "cannot be checkpointed with MPICR_RENEW=sessions",
    "a generalized request (MPI_Grequest_start) is pending",
    "free it before checkpointing",
    "cannot be restored",
];
pub use crate::ckpt::FINALIZING;
/// How a checkpoint failure goes on when the job then failed as well (`ckpt::launch`).
const THEN_THE_JOB: &str = "; then the job";

/// The verdict of a checkpoint mode that failed with `first` (the report's first line).
fn checkpoint_failure(first: &str) -> Verdict {
    let job_ended_well = !first.contains(THEN_THE_JOB);
    if job_ended_well && first.contains(FINALIZING) {
        Verdict::Missed
    } else if job_ended_well && REFUSALS.iter().any(|r| first.contains(r)) {
        Verdict::Refused(first.to_string())
    } else {
        Verdict::Fail(first.to_string())
    }
}

impl Verdict {
    fn word(&self) -> &str {
        match self {
            Verdict::Pass => "ok",
            Verdict::Fail(_) => "FAIL",
            Verdict::Missed => "missed",
            Verdict::Refused(_) => "refused",
        }
    }
}

/// The modes of one test, in order.
#[derive(Debug, Clone, Default)]
pub struct Results {
    pub native: Option<(Verdict, Duration)>,
    pub shim: Option<(Verdict, Duration)>,
    pub cont: Option<(Verdict, Duration)>,
    pub stop: Option<(Verdict, Duration)>,
}

/// One test of one flavor.
#[derive(Debug, Clone)]
pub struct Tested {
    pub flavor: Flavor,
    pub entry: Entry,
    /// Why it was not run (`exclude.txt`), if so.
    pub excluded: Option<String>,
    pub results: Results,
}

/// A mode of a test that passed natively and failed in that mode.
#[derive(Debug, Clone)]
pub struct Difference {
    pub flavor: Flavor,
    pub id: String,
    pub mode: &'static str,
    pub why: String,
    /// The reason `known-issue14.txt` gives, when listed there.
    pub known: Option<String>,
}

/// Runs the suite; true when no new difference was found.
pub fn run(h: &Harness, o: &Options) -> Result<bool, Error> {
    let earlier = match o.rejudge.is_empty() {
        true => None,
        false => {
            let mut all = Recorded::new();
            for p in &o.rejudge {
                merge(&mut all, read_results(p)?);
            }
            Some(all)
        }
    };
    let out_dir = if earlier.is_some() {
        // nothing is written over the results being judged
        std::env::temp_dir().join(format!("mpicr-conformance-rejudge-{}", std::process::id()))
    } else {
        o.out_dir.clone()
    };
    fs::create_dir_all(&out_dir).map_err(Error::io("create", &out_dir))?;
    let tsv_path = out_dir.join("results.tsv");
    let reports_path = out_dir.join("failures.txt");
    let mut not_run = 0;
    let mut tsv = String::from("flavor\ttest\tmode\tverdict\tseconds\tfirst line\n");
    let mut reports = String::new();
    let started = Instant::now();
    let mut all: Vec<Tested> = Vec::new();
    let mut skipped_note: Vec<String> = Vec::new();
    for &flavor in &o.flavors {
        if job::interrupted() {
            break;
        }
        let build = o.builds.join(flavor.name());
        if !build.join("config.status").is_file() {
            return Err(Error::Missing(format!("{} is not a configured build of MPICH's test suite (scripts/conformance.sh configures it)", build.display())));
        }
        let mut entries = Vec::new();
        for d in &o.dirs {
            entries.extend(testlist::read_dir(&build, &o.source, d)?);
        }
        let xfail = entries.iter().filter(|e| e.xfail.is_some()).count();
        let over = entries.iter().filter(|e| e.xfail.is_none() && e.ranks > o.max_ranks).count();
        skipped_note.push(format!("{flavor}: {xfail} entries MPICH marks xfail and {over} entries of more than {} ranks not run", o.max_ranks));
        entries.retain(|e| e.xfail.is_none() && e.ranks <= o.max_ranks);
        let chosen: Vec<(Entry, bool)> = match &o.selection {
            Some(sel) => lists::apply_selection(&entries, sel)?,
            None => entries.into_iter().map(|e| (e, false)).collect(),
        };
        let chosen: Vec<(Entry, bool)> = chosen
            .into_iter()
            .filter(|(e, _)| {
                let id = e.id();
                o.filters.is_empty() || o.filters.iter().any(|f| id.contains(f.as_str()))
            })
            .collect();
        println!("\n{flavor}: {} tests of {} (build tree {})", chosen.len(), o.dirs.join(" "), build.display());
        if earlier.is_none() {
            prebuild(&build, chosen.iter().map(|c| &c.0), &out_dir.join(format!("make-{flavor}.log")));
        }
        for (entry, ckpt_selected) in chosen {
            if job::interrupted() {
                break;
            }
            let t = match &earlier {
                None => run_one(h, o, flavor, &build, entry, ckpt_selected, &mut reports),
                Some(results) => match recorded(o, results, flavor, entry) {
                    Some(t) => t,
                    None => {
                        not_run += 1;
                        continue;
                    }
                },
            };
            let mut line = format!("{flavor} {}:", t.entry.id());
            if let Some(why) = &t.excluded {
                let _ = write!(line, " excluded ({why})");
            }
            for (mode, r) in modes_of(&t.results) {
                let _ = write!(line, " {mode} {} {:.1}s", r.0.word(), r.1.as_secs_f64());
                let first = match &r.0 {
                    Verdict::Fail(w) | Verdict::Refused(w) => w.as_str(),
                    _ => "",
                };
                let _ = writeln!(tsv, "{flavor}\t{}\t{mode}\t{}\t{:.2}\t{first}", t.entry.id(), r.0.word(), r.1.as_secs_f64());
            }
            println!("{line}");
            all.push(t);
            // written as it goes: a long run that is stopped still leaves what it did
            let _ = fs::write(&tsv_path, &tsv);
            let _ = fs::write(&reports_path, &reports);
        }
    }
    if earlier.is_some() {
        let _ = fs::remove_dir_all(&out_dir);
        skipped_note.push(format!(
            "judged again from {} ({not_run} tests of the lists have no result there)",
            o.rejudge.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    let diffs = differences(&all, &o.known);
    print_summary(o, &all, &diffs, &skipped_note);
    if o.rejudge.is_empty() {
        println!(
            "\nper-run results: {}\nfull reports of failures: {}\ntotal {:.0} s",
            tsv_path.display(),
            reports_path.display(),
            started.elapsed().as_secs_f64()
        );
    }
    let new = diffs.iter().filter(|d| d.known.is_none()).count();
    let known = diffs.len() - new;
    let compared = all.iter().filter(|t| passed(&t.results.native)).count();
    println!("conformance: {} passed, {new} failed, {known} skipped", compared.saturating_sub(new + known));
    if job::interrupted() {
        println!("interrupted: the remaining tests were not run");
        return Ok(false);
    }
    nothing_compared(&all)?;
    Ok(new == 0)
}

/// An error when the run compared nothing: no test was run (the filters or the selection
/// chose none, or all were excluded), or none passed natively (none built, say): a run
/// that checked nothing must not pass.
fn nothing_compared(all: &[Tested]) -> Result<(), Error> {
    let ran: Vec<&Tested> = all.iter().filter(|t| t.excluded.is_none()).collect();
    if all.is_empty() {
        return Err(Error::Invalid("no test was chosen: check the filters, --dirs and --select".into()));
    }
    if ran.is_empty() {
        return Err(Error::Invalid(format!("no test was run: the {} chosen are all excluded (exclude.txt)", all.len())));
    }
    if ran.iter().any(|t| passed(&t.results.native)) {
        return Ok(());
    }
    let unbuilt = ran.iter().filter(|t| matches!(&t.results.native, Some((Verdict::Fail(w), _)) if w.starts_with(DOES_NOT_BUILD))).count();
    Err(Error::Check(if unbuilt == ran.len() {
        format!("none of the {} tests built (see failures.txt and make-FLAVOR.log): nothing was compared", ran.len())
    } else {
        format!("none of the {} tests passed natively ({unbuilt} did not build): nothing was compared", ran.len())
    }))
}

fn passed(r: &Option<(Verdict, Duration)>) -> bool {
    matches!(r, Some((Verdict::Pass, _)))
}

fn modes_of(r: &Results) -> Vec<(&'static str, &(Verdict, Duration))> {
    [("native", &r.native), ("shim", &r.shim), ("continue", &r.cont), ("stop-restart", &r.stop)]
        .into_iter()
        .filter_map(|(m, v)| v.as_ref().map(|v| (m, v)))
        .collect()
}

type Recorded = BTreeMap<(String, String), Results>;

/// The per-mode verdicts of a `results.tsv`, by (flavor, test id).
fn read_results(path: &Path) -> Result<Recorded, Error> {
    let text = fs::read_to_string(path).map_err(Error::io("read", &path))?;
    let mut out: Recorded = BTreeMap::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.splitn(6, '\t').collect();
        let [flavor, id, mode, word, secs, first] = f[..] else {
            return Err(Error::Invalid(format!("{}:{}: not 6 columns", path.display(), n + 1)));
        };
        let took = Duration::from_secs_f64(secs.parse().unwrap_or(0.0));
        let v = match word {
            "ok" => Verdict::Pass,
            "missed" => Verdict::Missed,
            "refused" => Verdict::Refused(first.to_string()),
            // (judged again: the classification of checkpoint failures may have changed)
            _ if mode != "native" && mode != "shim" => checkpoint_failure(first),
            _ => Verdict::Fail(first.to_string()),
        };
        let r = out.entry((flavor.to_string(), id.to_string())).or_default();
        let slot = match mode {
            "native" => &mut r.native,
            "shim" => &mut r.shim,
            "continue" => &mut r.cont,
            "stop-restart" => &mut r.stop,
            m => return Err(Error::Invalid(format!("{}:{}: unknown mode `{m}`", path.display(), n + 1))),
        };
        *slot = Some((v, took));
    }
    Ok(out)
}

/// Takes `later`'s result of each test and mode over `into`'s (a rerun's over the first run's).
fn merge(into: &mut Recorded, later: Recorded) {
    for (key, r) in later {
        let e = into.entry(key).or_default();
        for (slot, new) in [(&mut e.native, r.native), (&mut e.shim, r.shim), (&mut e.cont, r.cont), (&mut e.stop, r.stop)] {
            if new.is_some() {
                *slot = new;
            }
        }
    }
}

/// `entry` as an earlier run recorded it, under the current exclusions; None when that run
/// has no result for it (it was cut short, or the entry was excluded then).
fn recorded(o: &Options, results: &Recorded, flavor: Flavor, entry: Entry) -> Option<Tested> {
    let id = entry.id();
    let excluded = o.exclude.iter().find(|l| l.applies(flavor, &id)).map(|l| l.reason.clone());
    if excluded.is_some() {
        return Some(Tested { flavor, entry, excluded, results: Results::default() });
    }
    let results = results.get(&(flavor.name().to_string(), id))?.clone();
    Some(Tested { flavor, entry, excluded: None, results })
}

/// Builds and runs one entry in every mode it is due for.
fn run_one(h: &Harness, o: &Options, flavor: Flavor, build: &Path, entry: Entry, ckpt_selected: bool, reports: &mut String) -> Tested {
    let id = entry.id();
    let mut t = Tested { flavor, excluded: o.exclude.iter().find(|l| l.applies(flavor, &id)).map(|l| l.reason.clone()), entry, results: Results::default() };
    if t.excluded.is_some() {
        return t;
    }
    let mut note = |mode: &str, report: &str| {
        let _ = writeln!(reports, "==== {flavor} {mode} {id}\n{}\n", report.trim_end());
    };
    let program = match make(build, &t.entry) {
        Ok(p) => p,
        Err(e) => {
            let e = e.to_string();
            note("build", &e);
            t.results.native = Some((Verdict::Fail(first_line(&e)), Duration::ZERO));
            return t;
        }
    };
    let timeout = t.entry.time_limit.min(o.timeout_cap);
    let env: Vec<(String, OsString)> = t.entry.env.iter().map(|(k, v)| (k.clone(), OsString::from(v))).collect();
    let job = Job {
        mpiexec: match flavor.mpiexec(&h.root) {
            Ok(m) => m,
            Err(e) => {
                t.results.native = Some((Verdict::Fail(e.to_string()), Duration::ZERO));
                return t;
            }
        },
        ranks: t.entry.ranks,
        launcher: job::Launcher::Hydra,
        wrapper: Vec::new(),
        program: program.clone(),
        args: t.entry.args.clone(),
        rank_env: env.clone(),
        timeout,
    };
    let (native, took) = launch(h, &format!("{flavor}-{id}-native"), &job);
    let (native_verdict, native_out) = judged(t.entry.judge, &native, &mut |r| note("native", r));
    t.results.native = Some((native_verdict.clone(), took));
    // A test that failed natively stays out of the comparison: its shim run would only cost
    // time (up to the limit again for one that timed out).
    if o.shim && native_verdict == Verdict::Pass {
        let shim = match h.shim_library(flavor) {
            Ok(s) => s,
            Err(e) => {
                t.results.shim = Some((Verdict::Fail(e.to_string()), Duration::ZERO));
                return t;
            }
        };
        let mut shim_env = env.clone();
        shim_env.push(("LD_PRELOAD".into(), shim));
        let job = Job { rank_env: shim_env, ..job.clone() };
        let (out, took) = launch(h, &format!("{flavor}-{id}-shim"), &job);
        let (v, _) = judged(t.entry.judge, &out, &mut |r| note("shim", r));
        t.results.shim = Some((v, took));
    }
    let native_ok = native_verdict == Verdict::Pass;
    let long_enough = native_out.as_ref().is_some_and(|n| n.elapsed >= o.ckpt_min);
    let due = match o.selection {
        Some(_) => ckpt_selected,
        None => long_enough,
    };
    if o.checkpoint && due && native_ok && t.entry.judge == Judge::NoErrors {
        let native_out = native_out.expect("a native run that passed has output");
        for stop in [false, true] {
            let mode = if stop { "stop-restart" } else { "continue" };
            let f = Foreign {
                id: format!("{flavor}/{id}/{mode}"),
                flavor,
                ranks: t.entry.ranks,
                program: program.clone(),
                args: t.entry.args.clone(),
                env: env.clone(),
                timeout,
                window: native_out.elapsed.mul_f64(0.8),
                stop,
            };
            let began = Instant::now();
            let v = match ckpt::checkpoint_foreign(h, &f, &native_out) {
                ForeignRun::Done(out) => judge_checkpointed(t.entry.judge, &out, Verdict::Pass, "", &mut |r| note(mode, r)),
                // ended well by itself before the checkpoint: its output must still pass
                ForeignRun::Missed(out) => {
                    judge_checkpointed(t.entry.judge, &out, Verdict::Missed, "the job ended before the checkpoint, and ", &mut |r| note(mode, r))
                }
                ForeignRun::Failed(report) => {
                    let report = report.to_string();
                    let v = checkpoint_failure(&first_line(&report));
                    if matches!(v, Verdict::Fail(_)) {
                        note(mode, &report);
                    }
                    v
                }
            };
            let r = Some((v, began.elapsed()));
            if stop {
                t.results.stop = r;
            } else {
                t.results.cont = r;
            }
        }
    }
    t
}

/// The verdict of a run through a checkpoint whose job ended: `ok` when its output passes the
/// program's rules, otherwise a failure (prefixed with `why`) noted with the job's output.
fn judge_checkpointed(judge: Judge, out: &JobOutput, ok: Verdict, why: &str, note: &mut dyn FnMut(&str)) -> Verdict {
    match verdict::judge(judge, out) {
        Ok(()) => ok,
        Err(e) => {
            let e = format!("{why}{e}");
            note(&format!("{e}\n{}", job::tails(&out.stdout, &out.stderr, &out.launcher)));
            Verdict::Fail(e)
        }
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

/// Runs `job` in a scratch directory of its own, and says how long it ran (also when it
/// timed out); what it left in /dev/shm is removed.
fn launch(h: &Harness, label: &str, job: &Job) -> (Result<JobOutput, Error>, Duration) {
    let t = Instant::now();
    let scratch = match Scratch::new(label, h.keep) {
        Ok(s) => s,
        Err(e) => return (Err(e), Duration::ZERO),
    };
    let before = ckpt::shm_entries();
    let out = job::run(job, &scratch);
    for o in ckpt::shm_orphans(&before) {
        let _ = fs::remove_file(Path::new("/dev/shm").join(o));
    }
    (out, t.elapsed())
}

/// The verdict of a launch, and its output when it ended by itself. `report` receives the
/// whole story of a failure.
fn judged(how: Judge, r: &Result<JobOutput, Error>, report: &mut dyn FnMut(&str)) -> (Verdict, Option<JobOutput>) {
    match r {
        Err(e) => {
            let e = e.to_string();
            report(&e);
            (Verdict::Fail(first_line(&e)), None)
        }
        Ok(out) => {
            let v = if !out.stray.is_empty() {
                Err(Error::Check(format!("processes outlived mpiexec (killed): {}", out.stray.join(", "))))
            } else {
                verdict::judge(how, out)
            };
            match v {
                Ok(()) => (Verdict::Pass, Some(out.clone())),
                Err(e) => {
                    report(&format!("{e}\n{}", job::tails(&out.stdout, &out.stderr, &out.launcher)));
                    (Verdict::Fail(e.to_string()), Some(out.clone()))
                }
            }
        }
    }
}

/// Builds the programs of `entries`, two compilers at a time, a directory after another
/// (what fails to build fails again, with its message, in `make` before its run).
fn prebuild<'a>(build: &Path, entries: impl Iterator<Item = &'a Entry>, log: &Path) {
    let mut by_dir: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in entries {
        let programs = by_dir.entry(e.dir.as_str()).or_default();
        if !programs.contains(&e.program.as_str()) {
            programs.push(&e.program);
        }
    }
    let t = Instant::now();
    let mut text = String::new();
    for (dir, programs) in &by_dir {
        let out = Command::new("make").args(["-k", "-j2", "-s"]).args(programs).current_dir(build.join(dir)).output();
        if let Ok(out) = out {
            text += &String::from_utf8_lossy(&out.stdout);
            text += &String::from_utf8_lossy(&out.stderr);
        }
    }
    let _ = fs::write(log, text);
    println!("built {} programs in {:.0} s (log: {})", by_dir.values().map(Vec::len).sum::<usize>(), t.elapsed().as_secs_f64(), log.display());
}

/// How the failure of a program that did not build begins.
const DOES_NOT_BUILD: &str = "does not build";

/// `make PROGRAM` in the entry's directory of the build tree (quick when it is built).
fn make(build: &Path, e: &Entry) -> Result<PathBuf, Error> {
    let dir = build.join(&e.dir);
    let program = dir.join(&e.program);
    let out = Command::new("make").arg("-s").arg(&e.program).current_dir(&dir).output().map_err(Error::spawn(format!("make in {}", dir.display())))?;
    if !out.status.success() || !program.is_file() {
        let text = String::from_utf8_lossy(&out.stderr);
        let first = text.lines().find(|l| l.contains("error")).unwrap_or_else(|| text.lines().next().unwrap_or(""));
        return Err(Error::Command(format!("{DOES_NOT_BUILD}: {first}\n{}", text.lines().take(30).collect::<Vec<_>>().join("\n"))));
    }
    Ok(program)
}

/// Every mode where a test that passed natively did not pass; `Missed` is no difference.
pub fn differences(all: &[Tested], known: &[Listed]) -> Vec<Difference> {
    let mut out = Vec::new();
    for t in all {
        if !passed(&t.results.native) {
            continue;
        }
        let id = t.entry.id();
        for (mode, (v, _)) in modes_of(&t.results) {
            if let Verdict::Fail(why) = v {
                out.push(Difference {
                    flavor: t.flavor,
                    id: id.clone(),
                    mode,
                    why: why.clone(),
                    known: known.iter().find(|l| l.applies_in(t.flavor, mode, &id)).map(|l| l.reason.clone()),
                });
            }
        }
    }
    out
}

#[derive(Default)]
struct Row {
    tests: usize,
    excluded: usize,
    native: usize,
    shim_run: usize,
    shim: usize,
    ckpt_run: usize,
    cont: usize,
    stop: usize,
    missed: usize,
    refused: usize,
}

fn print_summary(o: &Options, all: &[Tested], diffs: &[Difference], notes: &[String]) {
    println!("\n=== MPICH test suite (test/mpi of Debian's mpich 4.0.2 source), per directory");
    println!("    tests: entries run; native: passed natively; shim: passed under the shim, of those");
    println!("    that passed natively; checkpoint: of those that passed natively and ran long enough");
    println!("    (or ci.txt marks), passed through a checkpoint that goes on / stop + restart;");
    println!("    (checkpoint modes) missed: the program ended well (status 0, output passing) before the checkpoint was committed;");
    println!("    refused: mpicr refused the checkpoint, saying what it cannot checkpoint yet");
    for note in notes {
        println!("    {note}");
    }
    for &flavor in &o.flavors {
        let mut rows: BTreeMap<String, Row> = BTreeMap::new();
        for t in all.iter().filter(|t| t.flavor == flavor) {
            let r = rows.entry(t.entry.top_dir().to_string()).or_default();
            if t.excluded.is_some() {
                r.excluded += 1;
                continue;
            }
            r.tests += 1;
            if !passed(&t.results.native) {
                continue;
            }
            r.native += 1;
            if let Some((v, _)) = &t.results.shim {
                r.shim_run += 1;
                r.shim += usize::from(*v == Verdict::Pass);
            }
            for (res, count) in [(&t.results.cont, &mut r.cont), (&t.results.stop, &mut r.stop)] {
                if let Some((v, _)) = res {
                    *count += usize::from(*v == Verdict::Pass);
                }
            }
            let ran: Vec<&(Verdict, Duration)> = [&t.results.cont, &t.results.stop].into_iter().flatten().collect();
            if !ran.is_empty() {
                r.ckpt_run += 1;
                r.missed += ran.iter().filter(|v| v.0 == Verdict::Missed).count();
                r.refused += ran.iter().filter(|v| matches!(v.0, Verdict::Refused(_))).count();
            }
        }
        println!("\n{flavor}:");
        println!(
            "    {:<10}{:>7}{:>10}{:>8}{:>10}{:>13}{:>10}{:>14}{:>8}{:>9}",
            "dir", "tests", "excluded", "native", "shim", "checkpointed", "continue", "stop-restart", "missed", "refused"
        );
        let mut total = Row::default();
        for (dir, r) in &rows {
            print_row(dir, r);
            total.tests += r.tests;
            total.excluded += r.excluded;
            total.native += r.native;
            total.shim_run += r.shim_run;
            total.shim += r.shim;
            total.ckpt_run += r.ckpt_run;
            total.cont += r.cont;
            total.stop += r.stop;
            total.missed += r.missed;
            total.refused += r.refused;
        }
        print_row("total", &total);
    }
    let native_failures: Vec<&Tested> = all.iter().filter(|t| t.excluded.is_none() && !passed(&t.results.native)).collect();
    if !native_failures.is_empty() {
        println!("\nfailing natively, not in scripts/conformance/exclude.txt (left out of the comparison):");
        for t in native_failures {
            if let Some((Verdict::Fail(why), _)) = &t.results.native {
                println!("    {} {}: {why}", t.flavor, t.entry.id());
            }
        }
    }
    let excluded: Vec<&Tested> = all.iter().filter(|t| t.excluded.is_some()).collect();
    if !excluded.is_empty() {
        println!("\nexcluded (scripts/conformance/exclude.txt):");
        for t in excluded {
            println!("    {} {}: {}", t.flavor, t.entry.id(), t.excluded.as_deref().unwrap_or(""));
        }
    }
    let (known, new): (Vec<&Difference>, Vec<&Difference>) = diffs.iter().partition(|d| d.known.is_some());
    println!("\ndifferences (passed natively, failed in another mode): {} new, {} known", new.len(), known.len());
    for d in &new {
        println!("    NEW   {} {} {}: {}", d.flavor, d.mode, d.id, d.why);
    }
    for d in &known {
        println!("    known {} {} {}: {} [issue 14: {}]", d.flavor, d.mode, d.id, d.why, d.known.as_deref().unwrap_or(""));
    }
    // known failures that passed: their lines can go
    let mut fixed = Vec::new();
    for t in all.iter().filter(|t| passed(&t.results.native)) {
        let id = t.entry.id();
        for (mode, (v, _)) in modes_of(&t.results) {
            if *v == Verdict::Pass && mode != "native" && o.known.iter().any(|l| l.applies_in(t.flavor, mode, &id)) {
                fixed.push(format!("{} {mode} {id}", t.flavor));
            }
        }
    }
    if !fixed.is_empty() {
        println!("\nlisted in scripts/conformance/known-issue14.txt but passed this time (the line can go once it passes reliably):");
        for f in fixed {
            println!("    {f}");
        }
    }
}

fn print_row(dir: &str, r: &Row) {
    println!(
        "    {:<10}{:>7}{:>10}{:>8}{:>10}{:>13}{:>10}{:>14}{:>8}{:>9}",
        dir,
        r.tests,
        r.excluded,
        r.native,
        format!("{}/{}", r.shim, r.shim_run),
        r.ckpt_run,
        r.cont,
        r.stop,
        r.missed,
        r.refused
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_failures() {
        let refused = "run: `mpicr checkpoint` failed (exit status: 1): mpicr: checkpoint 1 aborted: rank 0: an MPI window is open (MPI_Win_create): one-sided communication cannot be checkpointed yet; free windows first";
        assert!(matches!(checkpoint_failure(refused), Verdict::Refused(_)));
        let then = format!("{refused}; then the job timed out after 60 s; stopped mpiexec");
        assert!(matches!(checkpoint_failure(&then), Verdict::Fail(_)));
        let greq = "run: ...: rank 0: a generalized request (MPI_Grequest_start) is pending";
        assert!(matches!(checkpoint_failure(greq), Verdict::Refused(_)));
        let late = "run: ...: checkpoint 1 aborted: rank 1: the program is finalizing MPI";
        assert_eq!(checkpoint_failure(late), Verdict::Missed);
        // a job that then failed by itself (`ckpt::launch` appends its status) is no miss
        let crashed = format!("{late}; then the job ended with exit status: 1");
        assert!(matches!(checkpoint_failure(&crashed), Verdict::Fail(_)));
        let refused_then_crashed = format!("{refused}; then the job ended with signal: 11 (SIGSEGV)");
        assert!(matches!(checkpoint_failure(&refused_then_crashed), Verdict::Fail(_)));
        let timeout = "run: ...: timed out in phase SendCounts waiting for rank(s) 0";
        assert!(matches!(checkpoint_failure(timeout), Verdict::Fail(_)));
    }

    #[test]
    fn a_run_that_compared_nothing_fails() {
        let tested = |native: Option<Verdict>, excluded: bool| Tested {
            flavor: Flavor::Mpich4,
            entry: testlist::parse_line("attr", "attrt 2").unwrap(),
            excluded: excluded.then(|| "slow".to_string()),
            results: Results { native: native.map(|v| (v, Duration::ZERO)), ..Results::default() },
        };
        let unbuilt = || Some(Verdict::Fail(format!("{DOES_NOT_BUILD}: attrt.c:1: error")));
        // nothing chosen, or everything excluded
        assert!(nothing_compared(&[]).unwrap_err().to_string().contains("no test was chosen"));
        let e = nothing_compared(&[tested(None, true)]);
        assert!(e.unwrap_err().to_string().contains("all excluded"));
        // nothing built
        let e = nothing_compared(&[tested(unbuilt(), false), tested(unbuilt(), false)]);
        assert!(e.unwrap_err().to_string().contains("none of the 2 tests built"));
        // built, but nothing passed natively
        let e = nothing_compared(&[tested(unbuilt(), false), tested(Some(Verdict::Fail("x".into())), false)]);
        assert!(e.unwrap_err().to_string().contains("(1 did not build)"));
        // one native pass is enough
        assert!(nothing_compared(&[tested(unbuilt(), false), tested(Some(Verdict::Pass), false)]).is_ok());
    }
}
