//! MPICH's own test suite natively, under the shim and through checkpoints (see
//! `src/conformance/mod.rs`; `scripts/conformance.sh` prepares the build trees and runs this).
//!
//! `cargo test --release -p mpicr-tests --test conformance -- [FILTER...] [--select ci]
//! [--dirs attr,coll,...] [--flavors mpich4,mpich5] [--modes native,shim,checkpoint]
//! [--max-ranks N] [--timeout S] [--ckpt-min S] [--out DIR] [--rejudge RESULTS.tsv[,RESULTS.tsv...]]`. A filter keeps the tests whose id
//! (`dir/program/npN[/args]`) contains it. Exit status: 0 when no test that passes natively
//! fails under the shim or through a checkpoint (unless `known-issue14.txt` lists it), 1 when
//! one does, 2 on a setup problem. `MPICR_TEST_SEED`, `MPICR_TEST_KEEP`, `MPICR_SHIM` and
//! `MPICR_TEST_MPICR` apply as for the C tests (src/lib.rs).

use mpicr_tests::conformance::{self, lists, Options, DIRS};
use mpicr_tests::Error;
use mpicr_tests::{job, Flavor, Harness};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("conformance: {e}");
            ExitCode::from(2)
        }
    }
}

fn list(s: &str) -> Vec<String> {
    s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

fn run() -> Result<bool, Error> {
    let root = Harness::workspace_root();
    let lists_dir = root.join("scripts/conformance");
    let mut o = Options {
        flavors: vec![Flavor::Mpich4, Flavor::Mpich5],
        dirs: DIRS.map(String::from).to_vec(),
        shim: true,
        checkpoint: true,
        selection: None,
        filters: Vec::new(),
        max_ranks: 4,
        timeout_cap: Duration::from_secs(90),
        ckpt_min: Duration::from_secs(3),
        exclude: lists::read_exclude(&lists_dir.join("exclude.txt"))?,
        known: lists::read_known(&lists_dir.join("known-issue14.txt"))?,
        builds: root.join(".deps/mpich-tests"),
        source: root.join(".deps/mpich-src/mpich-4.0.2/test/mpi"),
        out_dir: root.join("target/conformance"),
        rejudge: Vec::new(),
    };
    if let Ok(f) = std::env::var("MPICR_TEST_FLAVORS") {
        if !f.is_empty() {
            o.flavors = parse_flavors(&f)?;
        }
    }
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next()).ok_or_else(|| Error::Invalid(format!("{flag} needs a value")));
        let secs = |v: String| -> Result<Duration, Error> {
            v.parse().map(Duration::from_secs_f64).map_err(|_| Error::Invalid(format!("{flag}: `{v}` is not seconds")))
        };
        match flag.as_str() {
            "--select" => match value()?.as_str() {
                "ci" => o.selection = Some(lists::read_selection(&lists_dir.join("ci.txt"))?),
                "all" => o.selection = None,
                s => return Err(Error::Invalid(format!("--select: `{s}` is not ci or all"))),
            },
            "--dirs" => o.dirs = list(&value()?),
            "--flavors" => o.flavors = parse_flavors(&value()?)?,
            "--modes" => {
                let m = list(&value()?);
                for x in &m {
                    if !["native", "shim", "checkpoint"].contains(&x.as_str()) {
                        return Err(Error::Invalid(format!("--modes: `{x}` is not native, shim or checkpoint")));
                    }
                }
                o.shim = m.iter().any(|x| x == "shim");
                o.checkpoint = m.iter().any(|x| x == "checkpoint");
            }
            "--max-ranks" => o.max_ranks = value()?.parse().map_err(|_| Error::Invalid("--max-ranks wants a number".into()))?,
            "--timeout" => o.timeout_cap = secs(value()?)?,
            "--ckpt-min" => o.ckpt_min = secs(value()?)?,
            // (relative to the workspace root: cargo runs this from the package's directory)
            "--out" => o.out_dir = root.join(value()?),
            // (several, comma-separated: later files' results replace earlier ones')
            "--rejudge" => o.rejudge.extend(value()?.split(',').map(|p| root.join(p))),
            // what cargo or libtest may pass
            "--color" | "--format" | "--logfile" | "--test-threads" => {
                value()?;
            }
            f if f.starts_with('-') => {}
            _ => o.filters.push(a),
        }
    }
    if !o.source.join("runtests.in").is_file() {
        return Err(Error::Missing(format!("{} does not hold MPICH's test suite: run scripts/deps.sh (or scripts/conformance.sh)", o.source.display())));
    }
    job::install_interrupt_handler();
    conformance::run(&Harness::from_env(root), &o)
}

fn parse_flavors(s: &str) -> Result<Vec<Flavor>, Error> {
    list(s)
        .iter()
        .map(|n| match Flavor::parse(n) {
            Some(f @ (Flavor::Mpich4 | Flavor::Mpich5)) => Ok(f),
            _ => Err(Error::Invalid(format!("`{n}`: the MPICH test suite runs on mpich4 and mpich5"))),
        })
        .collect()
}
