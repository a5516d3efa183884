//! The command line around a running job (issue 11, item 6), on one plain-CRIU job (`run
//! --no-mpi` of the counter, no MPI needed): `checkpoint`'s exit codes (4 refused while another
//! checkpoint is in progress, 5 timed out, with the coordinator's test hook stalling the first
//! dump; 3, no job, is in `errors`), its progress line on a terminal (script(1) gives it one),
//! `--no-wait` (returns once begun) and `--wait`, `mpicr list` (text and JSON), `status
//! --json`, `prune --keep 1` (the latest complete epoch stays, the failed one goes; `--keep 0`
//! is a usage error), `checkpoint --stop --wait` (returns once the job has ended).

use super::{grep, json_num, CaseFn, LIMIT, T};
use std::time::{Duration, Instant};

pub fn cases() -> Vec<CaseFn> {
    vec![CaseFn {
        name: "commands",
        cases: &[
            "checkpoint-exit-refused",
            "checkpoint-exit-timed-out",
            "checkpoint-progress-on-terminal",
            "checkpoint-no-wait",
            "checkpoint-wait",
            "list-running-job",
            "status-json",
            "prune-keep-1",
            "checkpoint-stop-wait-job-ended",
        ],
        run: commands,
    }]
}

fn commands(t: &mut T) {
    if !t.require(&[t.env.criu_ok], "no criu") {
        return;
    }
    let d = t.p("ck");

    // The first checkpoint's dump is never asked for (test hook): it times out; a second
    // request meanwhile is refused.
    let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
    c.env("MPICR_TEST_COORD_FAULT", "stall:dump").arg(&d).arg("--").arg(t.env.bin("counter")).arg("600");
    let (o, e) = (t.p("job.out"), t.p("job.err"));
    let mut job = t.spawn(c, Some(&o), Some(&e));
    t.wait_coordinator(&d, true);
    // On a terminal (script(1) gives it one) it shows its progress meanwhile.
    let tty = super::find_in_path("script");
    let line = format!("{} checkpoint --timeout 3s {}", t.env.m.display(), d.display());
    let c = if tty {
        let mut c = t.cmd("script");
        c.args(["-qec", &line, "/dev/null"]);
        c
    } else {
        let mut c = t.m(["checkpoint", "--timeout", "3s"]);
        c.arg(&d);
        c
    };
    let (po, pe) = (t.p("first.out"), t.p("first.err"));
    let mut first = t.spawn(c, Some(&po), Some(&pe));
    let began = super::xlib::wait_for(|| d.join("epoch-000001").exists(), Duration::from_secs(10));
    let mut c = t.m(["checkpoint"]);
    c.arg(&d);
    let (rc2, out2) = t.out(c, LIMIT);
    t.check("checkpoint-exit-refused", began && rc2 == 4 && out2.contains("already in progress"), |_| format!("began: {began}; rc={rc2}: {out2}"));
    let rc1 = first.wait(Duration::from_secs(40));
    let err1 = super::cat(&[&po, &pe]);
    t.check("checkpoint-exit-timed-out", rc1 == 5 && err1.contains("timed out"), |_| format!("rc={rc1}: {err1}"));
    if tty {
        t.check("checkpoint-progress-on-terminal", err1.contains("\r\x1b[Kmpicr: checkpoint 1: ") && err1.contains(" written, "), |_| format!("{err1:?}"));
    } else {
        t.skip("checkpoint-progress-on-terminal", "no script(1) to give the command a terminal");
    }

    let mut c = t.m(["checkpoint", "--no-wait"]);
    c.arg(&d);
    let t0 = Instant::now();
    let (rc, out) = t.out(c, LIMIT);
    let committed = super::xlib::wait_for(|| t.epochs_complete(&d) >= 1, Duration::from_secs(30));
    t.check("checkpoint-no-wait", rc == 0 && grep("^epoch: *2 (begun", &out) && committed, |_| {
        format!("rc={rc} after {:?}: {out}; committed later: {committed}", t0.elapsed())
    });
    let (rc, out) = t.ckpt(&d, &["--wait"]);
    t.check("checkpoint-wait", rc == 0 && grep("^epoch: *3", &out) && t.epochs_complete(&d) == 2, |_| format!("rc={rc}: {out}"));

    let canon = std::fs::canonicalize(&d).unwrap_or(d.clone());
    let (rc, list) = t.out(t.m(["list"]), LIMIT);
    let (rcj, json) = t.out(t.m(["list", "--json"]), LIMIT);
    let dir_json = format!("\"directory\": \"{}\"", canon.display());
    t.check(
        "list-running-job",
        rc == 0 && list.contains(&canon.display().to_string()) && list.contains("running") && rcj == 0 && json.contains(&dir_json),
        |_| format!("rc={rc}: {list}\njson rc={rcj}: {json}"),
    );

    let mut c = t.m(["status", "--json"]);
    c.arg(&d);
    let (rc, st) = t.out(c, LIMIT);
    t.check(
        "status-json",
        rc == 0 && json_num(&st, "restart_epoch") == Some(3) && st.contains("\"state\": \"yes\"") && st.contains("\"state\": \"incomplete\""),
        |_| format!("rc={rc}: {st}"),
    );

    let mut c = t.m(["prune", "--keep", "1"]);
    c.arg(&d);
    let (rc, out) = t.out(c, LIMIT);
    let left: Vec<bool> = (1..=3).map(|e| d.join(format!("epoch-{e:06}")).exists()).collect();
    let mut c = t.m(["prune", "--keep", "0"]);
    c.arg(&d);
    let (rc0, _) = t.out(c, LIMIT);
    t.check("prune-keep-1", rc == 0 && left == [false, false, true] && rc0 == 2 && d.join("latest").exists(), |_| {
        format!("rc={rc} (--keep 0: {rc0}), epochs 1..3 left: {left:?}: {out}")
    });

    let (rc, out) = t.ckpt(&d, &["--stop", "--wait"]);
    let ended = (0..50).any(|_| {
        let done = job.try_status().is_some();
        if !done {
            std::thread::sleep(Duration::from_millis(20));
        }
        done
    });
    let rcj = job.wait(LIMIT);
    t.check("checkpoint-stop-wait-job-ended", rc == 0 && out.contains("job ended") && ended && rcj == 0, |_| {
        format!("rc={rc}: {out}; job ended by then: {ended}, its status {rcj}")
    });
}
