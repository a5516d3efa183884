//! The `mpicr` CLI's integration tests (see `src/cli/mod.rs`), one line per case and a count.
//!
//! `cargo test --release -p mpicr-tests --test cli [-- PATTERN...] [--skip PATTERN] [--list]`, or
//! `MPICR_TEST_CLI=PATTERN[,PATTERN...]`: runs the groups of cases whose name, or one of whose
//! cases' names, contains a pattern. Needs `target/release/mpicr` and
//! `target/release/examples/fake_agent` built; cases needing MPICH 4 or 5, CRIU, root or
//! `libmpicr.so` are skipped (and say so) where they are missing.

use mpicr_tests::cli::{self, Verdict};
use mpicr_tests::Harness;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let mut filters: Vec<String> =
        std::env::var("MPICR_TEST_CLI").unwrap_or_default().split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
    let mut list = false;
    let mut skips: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--list" => list = true,
            "--skip" => skips.extend(args.next()),
            // libtest flags that cargo or a user may pass and that take a value
            "--color" | "--format" | "--logfile" | "-Z" | "--test-threads" => {
                args.next();
            }
            f if f.starts_with('-') => {}
            _ => filters.push(a),
        }
    }
    let fns: Vec<_> = cli::all().into_iter().filter(|f| cli::selected(f, &filters) && (skips.is_empty() || !cli::selected(f, &skips))).collect();
    if list {
        for f in &fns {
            for c in f.cases {
                println!("{c}: test");
            }
        }
        return ExitCode::SUCCESS;
    }
    mpicr_tests::job::install_interrupt_handler();
    let start = Instant::now();
    let env = match cli::setup(Harness::workspace_root()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let (mut pass, mut fail, mut skip) = (0, 0, 0);
    for f in &fns {
        if mpicr_tests::job::interrupted() {
            eprintln!("interrupted");
            break;
        }
        for (_, v, _) in cli::run_fn(&env, f) {
            match v {
                Verdict::Ok => pass += 1,
                Verdict::Fail => fail += 1,
                Verdict::Skip => skip += 1,
            }
        }
    }
    drop(env);
    println!();
    println!("test-cli: {pass} passed, {fail} failed, {skip} skipped ({} cases, {:.0} s)", pass + fail + skip, start.elapsed().as_secs_f64());
    if fail == 0 && !mpicr_tests::job::interrupted() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
