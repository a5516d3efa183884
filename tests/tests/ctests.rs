//! The C test matrix: every program in `c-tests/` × MPI flavor × its rank counts × mode.
//!
//! `cargo test --release -p mpicr-tests --test ctests [-- FILTER... ] [--skip S] [--exact]
//! [--list] [--jobs N]`. Case names are `test/flavor/npN/mode`; a filter selects the cases
//! whose name contains it. Environment knobs are documented in the crate (src/lib.rs).
//!
//! Jobs run one at a time by default: the machines this runs on have 2 cores and MPICH ranks
//! busy-poll, so parallel jobs mostly slow each other down.

use mpicr_tests::Error;
use mpicr_tests::{job, matrix, spec, Case, Flavor, Harness, Mode};
use std::collections::{BTreeMap, VecDeque};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A finished case: its index in the matrix, the case, its wall time, its verdict.
type Outcome = (usize, Case, Duration, Result<(), Error>);

struct Options {
    filters: Vec<String>,
    skips: Vec<String>,
    exact: bool,
    list: bool,
    jobs: usize,
    /// libtest's `--ignored`: this suite has no ignored cases, so it runs nothing.
    ignored_only: bool,
}

fn parse_options() -> Result<Options, Error> {
    let mut o = Options {
        filters: Vec::new(),
        skips: Vec::new(),
        exact: false,
        list: false,
        jobs: env_list("MPICR_TEST_JOBS").first().and_then(|s| s.parse().ok()).unwrap_or(1),
        ignored_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value =
            |what: &str| -> Result<String, Error> { inline.clone().or_else(|| args.next()).ok_or_else(|| Error::Invalid(format!("{what} needs a value"))) };
        match flag.as_str() {
            "--list" => o.list = true,
            "--exact" => o.exact = true,
            "--skip" => o.skips.push(value("--skip")?),
            "--jobs" | "-j" | "--test-threads" => o.jobs = value(&flag)?.parse().map_err(|_| Error::Invalid(format!("bad {flag}")))?,
            "--ignored" => o.ignored_only = true,
            // libtest flags that cargo or a user may pass and that do not apply here.
            "--color" | "--format" | "--logfile" | "-Z" => {
                value(&flag)?;
            }
            f if f.starts_with('-') => {}
            _ => o.filters.push(a),
        }
    }
    o.jobs = o.jobs.max(1);
    Ok(o)
}

fn env_list(var: &str) -> Vec<String> {
    std::env::var(var).unwrap_or_default().split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

fn selected<T: Copy>(var: &str, all: &[T], parse: fn(&str) -> Option<T>) -> Result<Vec<T>, Error> {
    let names = env_list(var);
    if names.is_empty() {
        return Ok(all.to_vec());
    }
    names.iter().map(|n| parse(n).ok_or_else(|| Error::Invalid(format!("{var}: unknown `{n}`")))).collect()
}

/// `MPICR_TEST_FLAVORS`: flavor names, or `all`; unset: `Flavor::DEFAULT`. A default flavor
/// whose compiler wrapper is missing is skipped with a line saying so; a named one is not
/// (its cases fail, saying what is missing).
fn selected_flavors(root: &std::path::Path) -> Result<Vec<Flavor>, Error> {
    let names = env_list("MPICR_TEST_FLAVORS");
    if names.iter().any(|n| n == "all") {
        return Ok(Flavor::ALL.to_vec());
    }
    if !names.is_empty() {
        return selected("MPICR_TEST_FLAVORS", &Flavor::ALL, Flavor::parse);
    }
    let mut flavors = Vec::new();
    for f in Flavor::DEFAULT {
        match f.mpicc(root) {
            Ok(_) => flavors.push(f),
            Err(e) => println!("skipping the {f} flavor: {e}"),
        }
    }
    Ok(flavors)
}

/// `MPICR_TEST_MODES`: mode names, or `checkpoint` for every checkpoint mode, or `all`;
/// unset: `Mode::DEFAULT` (native and shim). `soak` (not a mode of the matrix) asks for the
/// soak (`mpicr_tests::ckpt::soak`), run after the modes' cases: the flag that comes back.
fn selected_modes() -> Result<(Vec<Mode>, bool), Error> {
    let names = env_list("MPICR_TEST_MODES");
    if names.is_empty() {
        return Ok((Mode::DEFAULT.to_vec(), false));
    }
    let mut modes = Vec::new();
    let mut soak = false;
    for n in &names {
        match n.as_str() {
            "soak" => soak = true,
            "checkpoint" => modes.extend(Mode::CHECKPOINT),
            "all" => modes.extend(Mode::ALL),
            _ => modes.push(Mode::parse(n).ok_or_else(|| {
                Error::Invalid(format!(
                    "MPICR_TEST_MODES: unknown `{n}` (modes: {}; or checkpoint, all, soak)",
                    Mode::ALL.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
                ))
            })?),
        }
    }
    modes.sort();
    modes.dedup();
    Ok((modes, soak))
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ctests: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool, Error> {
    let opts = parse_options()?;
    let root = Harness::workspace_root();
    let harness = Harness::from_env(root);
    let tests = spec::discover(&harness.tests_dir())?;
    if tests.is_empty() {
        return Err(Error::Missing(format!("no tests in {}", harness.tests_dir().display())));
    }
    mpicr_tests::validate(&tests)?;
    let flavors = selected_flavors(&Harness::workspace_root())?;
    let (modes, soak) = selected_modes()?;
    let all = matrix(&tests, &flavors, &modes);
    for f in &flavors {
        for t in &tests {
            let mut said: Vec<(&str, Vec<String>)> = Vec::new();
            for &n in &t.ranks {
                if let Some(why) = f.excluded(&t.name, n) {
                    match said.iter_mut().find(|(w, _)| *w == why) {
                        Some((_, ns)) => ns.push(n.to_string()),
                        None => said.push((why, vec![n.to_string()])),
                    }
                }
            }
            for (why, ns) in said {
                println!("not run on {f} at {} rank(s): {}: {why}", ns.join(","), t.name);
            }
        }
    }
    let total = all.len();
    let wanted = |c: &Case| {
        let id = c.id();
        let hit = |f: &String| {
            if opts.exact {
                id == *f
            } else {
                id.contains(f.as_str())
            }
        };
        (opts.filters.is_empty() || opts.filters.iter().any(hit)) && !opts.skips.iter().any(|s| id.contains(s.as_str())) && !opts.ignored_only
    };
    let cases: Vec<Case> = all.into_iter().filter(|c| wanted(c)).collect();
    let filtered_out = total - cases.len();
    // The soak draws from the continue and stop-restart cases the filters let through.
    let soak_pool: Vec<Case> =
        if soak { matrix(&tests, &flavors, &[Mode::CheckpointContinue, Mode::StopRestart]).into_iter().filter(|c| wanted(c)).collect() } else { Vec::new() };

    if opts.list {
        for c in &cases {
            println!("{}: test", c.id());
        }
        for c in &soak_pool {
            println!("{} (soak): test", c.id());
        }
        return Ok(true);
    }

    job::install_interrupt_handler();
    if modes.is_empty() && soak {
        return mpicr_tests::ckpt::soak(&harness, &soak_pool);
    }
    println!("\nrunning {} C test cases ({} job(s) at a time)", cases.len(), opts.jobs);
    if modes.iter().any(|m| m.is_checkpoint()) {
        println!("checkpoint modes: random choices from MPICR_TEST_SEED={}", harness.seed());
    }
    let started = Instant::now();
    let queue = Mutex::new(cases.into_iter().enumerate().collect::<VecDeque<_>>());
    let results: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..opts.jobs {
            s.spawn(|| loop {
                if job::interrupted() {
                    break;
                }
                let Some((index, case)) = queue.lock().unwrap().pop_front() else {
                    break;
                };
                let t = Instant::now();
                let verdict = harness.run_case(&case);
                let took = t.elapsed();
                let word = if verdict.is_ok() { "ok" } else { "FAILED" };
                println!("test {} ... {word} ({:.2} s)", case.id(), took.as_secs_f64());
                results.lock().unwrap().push((index, case, took, verdict));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);
    let elapsed = started.elapsed();

    let failures: Vec<_> = results.iter().filter(|r| r.3.is_err()).collect();
    if !failures.is_empty() {
        println!("\nfailures:\n");
        for (_, case, _, verdict) in &failures {
            println!("---- {} ----\n{}\n", case.id(), verdict.as_ref().unwrap_err().to_string().trim_end());
        }
        println!("failures:");
        for (_, case, _, verdict) in &failures {
            let e = verdict.as_ref().unwrap_err().to_string();
            let first = e.lines().next().unwrap_or("");
            println!("    {}: {first}", case.id());
        }
    }
    print_timings(&results);

    let passed = results.len() - failures.len();
    let ok = failures.is_empty() && !job::interrupted();
    println!(
        "\ntest result: {}. {passed} passed; {} failed; 0 ignored; 0 measured; {filtered_out} filtered out; finished in {:.2}s",
        if ok { "ok" } else { "FAILED" },
        failures.len(),
        elapsed.as_secs_f64()
    );
    println!("ctests: {passed} passed, {} failed\n", failures.len());
    if job::interrupted() {
        println!("interrupted: remaining cases were not run");
        return Ok(false);
    }
    if soak {
        let soaked = mpicr_tests::ckpt::soak(&harness, &soak_pool)?;
        return Ok(ok && soaked);
    }
    Ok(ok)
}

/// Wall time per test and mode (summed over flavors and rank counts), slowest tests first, and
/// per mode the number of cases passed and failed.
fn print_timings(results: &[Outcome]) {
    if results.is_empty() {
        return;
    }
    let mut per_test: BTreeMap<&str, BTreeMap<Mode, Duration>> = BTreeMap::new();
    let mut per_mode: BTreeMap<Mode, (Duration, usize, usize)> = BTreeMap::new();
    for (_, case, took, verdict) in results {
        *per_test.entry(&case.test.name).or_default().entry(case.mode).or_default() += *took;
        let m = per_mode.entry(case.mode).or_default();
        m.0 += *took;
        if verdict.is_ok() {
            m.1 += 1;
        } else {
            m.2 += 1;
        }
    }
    let modes: Vec<Mode> = per_mode.keys().copied().collect();
    let width = |m: &Mode| m.name().len().max(7) + 2;
    let mut rows: Vec<_> = per_test.into_iter().collect();
    rows.sort_by_key(|(_, m)| std::cmp::Reverse(m.values().sum::<Duration>()));
    println!("\ntimings (seconds, all flavors and rank counts):");
    let header: String = modes.iter().map(|m| format!("{:>w$}", m.name(), w = width(m))).collect();
    println!("    {:<24}{header}", "test");
    for (name, by_mode) in rows {
        let cols: String = modes
            .iter()
            .map(|m| match by_mode.get(m) {
                Some(d) => format!("{:>w$.2}", d.as_secs_f64(), w = width(m)),
                None => format!("{:>w$}", "-", w = width(m)),
            })
            .collect();
        println!("    {name:<24}{cols}");
    }
    let cols: String = modes.iter().map(|m| format!("{:>w$.2}", per_mode[m].0.as_secs_f64(), w = width(m))).collect();
    println!("    {:<24}{cols}", "total");
    let cols: String = modes.iter().map(|m| format!("{:>w$}", per_mode[m].1, w = width(m))).collect();
    println!("    {:<24}{cols}", "cases passed");
    let cols: String = modes.iter().map(|m| format!("{:>w$}", per_mode[m].2, w = width(m))).collect();
    println!("    {:<24}{cols}", "cases failed");
}
