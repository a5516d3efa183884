//! The soak (`MPICR_TEST_MODES=soak`, run by `make soak`): many runs, one at a time, each a
//! random draw from the checkpoint programs x MPICH builds x checkpoint rank counts x {continue,
//! stop-restart} (the cases given, see `tests/ctests.rs`), checkpointed at a random instant and
//! compared with the native run byte for byte, as the `continue` and `stop-restart` modes do.
//!
//! - Length: `MPICR_SOAK_COUNT` runs (default 1000), or `MPICR_SOAK_SECONDS` of them (no
//!   count unless both are given; then whichever comes first). Ctrl-C ends it early, with the
//!   summary of what ran.
//! - Run k draws from its own seed, made from `MPICR_TEST_SEED` and k: the same seed repeats the
//!   whole soak, and a failure prints the command that repeats that one run alone.
//! - The summary counts checkpoints committed, restarts that ended well, mismatches (output
//!   that differs from the native run), hangs (a launch or a command past its time limit) and
//!   other failures, and lists the seeds of the runs that failed.

use super::{run_case_seeded, splitmix, Rng};
use crate::error::{Context as _, Error};
use crate::{job, Case, Harness};
use std::time::{Duration, Instant};

/// Runs the soak over `pool`; Ok(true) if no run failed.
pub fn soak(h: &Harness, pool: &[Case]) -> Result<bool, Error> {
    if pool.is_empty() {
        return Err(Error::Invalid("soak: no checkpoint case to draw from (check the filters)".into()));
    }
    let num = |var: &str| -> Result<Option<u64>, Error> {
        match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => v.trim().parse().map(Some).map_err(|_| Error::Invalid(format!("{var}={v}: expected a whole number"))),
            _ => Ok(None),
        }
    };
    let seconds = num("MPICR_SOAK_SECONDS")?;
    let count = match (num("MPICR_SOAK_COUNT")?, seconds) {
        (Some(n), _) => n,
        (None, Some(_)) => u64::MAX,
        (None, None) => 1000,
    };
    let limit = seconds.map(Duration::from_secs);
    let shown = if count == u64::MAX { "?".to_string() } else { count.to_string() };
    println!(
        "\nsoak: {} runs{} drawn from {} cases (MPICR_TEST_SEED={})",
        shown,
        limit.map_or(String::new(), |l| format!(" or {} s", l.as_secs())),
        pool.len(),
        h.seed()
    );
    let started = Instant::now();
    let mut t = Tally::default();
    for k in 0..count {
        if job::interrupted() || limit.is_some_and(|l| started.elapsed() >= l) {
            break;
        }
        let seed = splitmix(h.seed().wrapping_add(k)) % 1_000_000_000;
        let mut rng = Rng(splitmix(seed ^ 0x736f616b));
        let case = &pool[rng.between(0, pool.len() as u64 - 1) as usize];
        let at = Instant::now();
        let (verdict, checkpoints, restarts) = match h.build(&case.test, case.flavor).and_then(|program| {
            let args = case.args(h.long);
            let oracle = h.oracle(case, &program, args).context("the native run (the oracle) failed")?;
            Ok((program, args.to_vec(), oracle))
        }) {
            Ok((program, args, oracle)) => {
                let r = run_case_seeded(h, case, &program, &args, &oracle, seed);
                (r.verdict, r.checkpoints, r.restarts)
            }
            Err(e) => (Err(e), 0, 0),
        };
        t.runs += 1;
        t.checkpoints += checkpoints;
        t.restarts += restarts;
        let word = match &verdict {
            Ok(()) => "ok",
            Err(e) => match classify(&e.to_string()) {
                Outcome::Mismatch => {
                    t.mismatches += 1;
                    "MISMATCH"
                }
                Outcome::Hang => {
                    t.hangs += 1;
                    "HANG"
                }
                Outcome::Failure => {
                    t.failures += 1;
                    "FAILED"
                }
            },
        };
        println!("soak {}/{shown} {} seed {seed} ... {word} ({:.2} s)", k + 1, case.id(), at.elapsed().as_secs_f64());
        if let Err(e) = verdict {
            println!("---- {} (seed {seed}) ----\n{}", case.id(), e.to_string().trim_end());
            println!(
                "  repeat: MPICR_TEST_SEED={seed} MPICR_TEST_MODES={} MPICR_TEST_FLAVORS={} scripts/test-ckpt.sh --exact {}\n",
                case.mode,
                case.flavor,
                case.id()
            );
            t.failed.push(format!("{seed} ({})", case.id()));
        }
    }
    println!(
        "\nsoak: {} runs in {:.1} s: {} checkpoints, {} restarts, {} mismatches, {} hangs, {} failures",
        t.runs,
        started.elapsed().as_secs_f64(),
        t.checkpoints,
        t.restarts,
        t.mismatches,
        t.hangs,
        t.failures
    );
    println!("soak: seeds of failed runs: {}", if t.failed.is_empty() { "none".to_string() } else { t.failed.join(", ") });
    if job::interrupted() {
        println!("soak: interrupted");
    }
    Ok(t.failed.is_empty() && !job::interrupted())
}

#[derive(Default)]
struct Tally {
    runs: u64,
    checkpoints: u64,
    restarts: u64,
    mismatches: u64,
    hangs: u64,
    failures: u64,
    failed: Vec<String>,
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Mismatch,
    Hang,
    Failure,
}

/// What kind of failure a case's message (its first line) tells.
fn classify(message: &str) -> Outcome {
    let head = message.lines().next().unwrap_or("");
    if ["timed out after", "did not finish"].iter().any(|m| head.contains(m)) {
        Outcome::Hang
    } else if ["differs from the native", "is not the start of its native output", "printed all of its native output"].iter().any(|m| head.contains(m)) {
        Outcome::Mismatch
    } else {
        Outcome::Failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_classified_by_their_first_line() {
        assert_eq!(classify("restart: timed out after 60 s; stopped mpiexec\n..."), Outcome::Hang);
        assert_eq!(classify("run: `mpicr checkpoint` did not finish within 50 s (killed)"), Outcome::Hang);
        assert_eq!(classify("output before the stop + output after the restart differs from the native run: rank 0 line 3"), Outcome::Mismatch);
        assert_eq!(classify("run: rank 1's output before the stop is not the start of its native output"), Outcome::Mismatch);
        assert_eq!(classify("run: `mpicr checkpoint` failed (exit status: 1): x\ndiffers from the native"), Outcome::Failure);
    }
}
