//! The whole checkpoint protocol with a stand-in agent (`cli/examples/fake_agent.rs`, the
//! keeper run with `MPICR_SHIM=none`): targets, transposition, PMI generations and key prefixes,
//! PmiConnect, the restart handshake; aborted and timed-out checkpoints; the drain/release
//! barrier; a lost coordinator (test hook `MPICR_TEST_COORD_FAULT`); programs that end while
//! their images are sealed (test hook `MPICR_TEST_SEAL_DELAY`).

use super::{cat, complete, grep, grep_c, tail, CaseFn, LIMIT, T};
use crate::error::Error;

pub fn cases() -> Vec<CaseFn> {
    vec![
        CaseFn { name: "agent-mpich4-n2", cases: &["agent-mpich4-n2"], run: |t| agent(t, 4, 2, false) },
        CaseFn { name: "agent-mpich4-n2-close-pmi", cases: &["agent-mpich4-n2-close-pmi"], run: |t| agent(t, 4, 2, true) },
        CaseFn { name: "agent-mpich5-n3", cases: &["agent-mpich5-n3"], run: |t| agent(t, 5, 3, false) },
        CaseFn { name: "agent-mpich5-n3-close-pmi", cases: &["agent-mpich5-n3-close-pmi"], run: |t| agent(t, 5, 3, true) },
        CaseFn { name: "agent-failures", cases: &["agent-failure-aborts", "agent-timeout-aborts", "agent-job-survives-aborts"], run: failures },
        CaseFn { name: "agent-barrier", cases: &["agent-barrier-no-release-on-failure"], run: barrier },
        CaseFn { name: "agent-late-init", cases: &["agent-late-init-waits", "agent-late-init-times-out"], run: late_init },
        CaseFn { name: "agent-exit-while-sealing", cases: &["agent-exit-while-sealing-commits", "agent-exit-while-sealing-restarts"], run: exit_while_sealing },
        CaseFn { name: "agent-coord-lost-before-release", cases: &["agent-coord-lost-before-release"], run: |t| coord_lost(t, "release", "not released", 0) },
        CaseFn { name: "agent-coord-lost-before-dump", cases: &["agent-coord-lost-before-dump"], run: |t| coord_lost(t, "dump", "released: renewing", 1) },
    ]
}

fn tails(t: &T, files: &[&str]) -> String {
    files.iter().map(|f| format!("\n==> {f} <==\n{}", tail(&t.p(f), 5))).collect()
}

/// Three checkpoints (the last --stop), a restart checkpointed with --stop again, a second
/// restart: every tick printed once, generation 4 reached, four complete epochs.
fn agent(t: &mut T, ver: u32, n: u32, close_pmi: bool) {
    let name = format!("agent-mpich{ver}-n{n}{}", if close_pmi { "-close-pmi" } else { "" });
    if !t.env.have(ver) {
        return t.skip(&name, format!("MPICH {ver} not installed"));
    }
    if !t.env.criu_ok {
        return t.skip(&name, "no criu");
    }
    let d = t.p("agent");
    t.export("MPICR_SHIM", "none");
    let mut c = fake_job(t, ver, n, &d, &["60"]);
    if close_pmi {
        c.arg("--close-pmi");
    }
    let mut job = t.spawn(c, Some(&t.p("a1.out")), Some(&t.p("a1.err")));
    let mut rcs = t.ckpt(&d, &[]).0;
    if rcs == 0 {
        rcs = t.ckpt(&d, &[]).0;
    }
    if rcs == 0 {
        rcs = t.ckpt(&d, &["--stop"]).0;
    }
    let rc = job.wait(LIMIT);
    let mut c = t.mpi(ver, n);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let mut job = t.spawn(c, Some(&t.p("a2.out")), Some(&t.p("a2.err")));
    let rcs2 = t.ckpt(&d, &["--stop"]).0;
    let rc2 = job.wait(LIMIT);
    let mut c = t.mpi(ver, n);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let rc3 = t.to(c, Some(&t.p("a3.out")), Some(&t.p("a3.err")), LIMIT);
    let all = cat(&[&t.p("a1.out"), &t.p("a2.out"), &t.p("a3.out")]);
    let msg = if [rcs, rc, rcs2, rc2, rc3].iter().all(|&r| r == 0) { complete(&all, n, 60) } else { Err(Error::Check(String::new())) };
    let good = msg.is_ok() && cat(&[&t.p("a3.out")]).contains("gen 4") && t.epochs_complete(&d) == 4;
    t.check(&name, good, |t| {
        format!(
            "rc={rcs}/{rc}/{rcs2}/{rc2}/{rc3} {}{}",
            msg.as_ref().err().map(ToString::to_string).unwrap_or_default(),
            tails(t, &["a1.err", "a2.err", "a3.err"])
        )
    });
}

/// Rank 1 fails epoch 1 and ignores epoch 2: both abort (FAILED note, no manifest; a timeout
/// naming the rank) and the job goes on to epoch 3.
fn failures(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4], "needs MPICH 4 and criu") {
        return;
    }
    let d = t.p("fail");
    t.export("MPICR_SHIM", "none");
    let c = fake_job(t, 4, 2, &d, &["100", "--fail-at", "1", "--ignore-at", "2"]);
    let mut job = t.spawn(c, Some(&t.p("f.out")), Some(&t.p("f.err")));
    let (r1, o1) = t.ckpt(&d, &[]);
    let mut c = t.m(["checkpoint", "--timeout", "2s"]);
    c.arg(&d);
    let (r2, o2) = t.out(c, LIMIT);
    let (r3, o3) = t.ckpt(&d, &[]);
    let rc = job.wait(LIMIT);
    let good = r1 != 0
        && o1.contains("checkpoint 1 aborted: rank 1: injected failure")
        && d.join("epoch-000001/FAILED").is_file()
        && !d.join("epoch-000001/MANIFEST.json").is_file();
    t.check("agent-failure-aborts", good, |_| format!("r1={r1}: {o1}"));
    let good = r2 != 0 && grep("timed out .* waiting for rank(s) 1", &o2);
    t.check("agent-timeout-aborts", good, |_| format!("r2={r2}: {o2}"));
    let good = r3 == 0 && grep("^epoch: *3", &o3) && rc == 0 && complete(&cat(&[&t.p("f.out")]), 2, 100).is_ok();
    t.check("agent-job-survives-aborts", good, |_| format!("r3={r3} rc={rc}: {o3}"));
}

/// A rank fails after the others drained: nobody may release (their renewal, a PMI barrier,
/// would hang without it); the next checkpoint works.
fn barrier(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4], "needs MPICH 4 and criu") {
        return;
    }
    let d = t.p("barrier");
    t.export("MPICR_SHIM", "none");
    let c = fake_job(t, 4, 2, &d, &["80", "--fail-drain-at", "1"]);
    let mut job = t.spawn(c, Some(&t.p("b.out")), Some(&t.p("b.err")));
    let (r1, o1) = t.ckpt(&d, &[]);
    let (r2, o2) = t.ckpt(&d, &[]);
    let rc = job.wait(LIMIT);
    let out = cat(&[&t.p("b.out")]);
    let good = r1 != 0
        && o1.contains("checkpoint 1 aborted: rank 1: injected drain failure")
        && grep("fake_agent\\[0\\]: checkpoint aborted (not released)", &cat(&[&t.p("b.err")]))
        && r2 == 0
        && rc == 0
        && complete(&out, 2, 80).is_ok()
        && out.contains("rank 0 tick 80 gen 1");
    t.check("agent-barrier-no-release-on-failure", good, |t| format!("r1={r1} r2={r2} rc={rc}: {o1} {o2}{}", tails(t, &["b.err"])));
}

/// The coordinator vanishes before Release (nobody released) or before Dump (released: every
/// rank renews); the job goes on.
fn coord_lost(t: &mut T, at: &str, want: &str, gen: u32) {
    let name = format!("agent-coord-lost-before-{at}");
    if !t.require(&[t.env.criu_ok, t.env.have4], "needs MPICH 4 and criu") {
        return;
    }
    let d = t.p("lost");
    t.export("MPICR_SHIM", "none");
    t.export("MPICR_TEST_COORD_FAULT", &format!("vanish:{at}"));
    let c = fake_job(t, 4, 2, &d, &["60"]);
    let mut job = t.spawn(c, Some(&t.p("c.out")), Some(&t.p("c.err")));
    let (r1, o1) = t.ckpt(&d, &[]);
    let rc = job.wait(LIMIT);
    let out = cat(&[&t.p("c.out")]);
    let err = cat(&[&t.p("c.err")]);
    let good = r1 != 0
        && rc == 0
        && grep_c(&format!("checkpoint aborted ({want}): lost the coordinator"), &err) == 2
        && complete(&out, 2, 60).is_ok()
        && out.contains(&format!("rank 1 tick 60 gen {gen}"));
    t.check(&name, good, |t| format!("r1={r1} rc={rc}: {o1}{}", tails(t, &["c.err"])));
}

/// `mpiexec -n N mpicr run --ckpt-dir D -- fake_agent ARGS` on MPICH `ver` (with
/// `MPICR_SHIM=none` exported by the caller: the stand-in agent speaks the protocol itself).
fn fake_job(t: &T, ver: u32, n: u32, d: &std::path::Path, args: &[&str]) -> std::process::Command {
    let mut c = t.mpi(ver, n);
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(d).arg("--").arg(&t.env.fake).args(args);
    c
}

/// Every program exits as soon as it runs again after its dump, while its keeper still seals
/// the images (slowed by the test-only `MPICR_TEST_SEAL_DELAY`): the keepers report their
/// sealed parts, the rank-0 keeper (the coordinator's host) waits for the commit, and
/// `mpicr checkpoint` reports the epoch committed; a restart of it runs the job to its end.
fn exit_while_sealing(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4], "needs MPICH 4 and criu") {
        return;
    }
    let d = t.p("sealing");
    t.export("MPICR_SHIM", "none");
    t.export("MPICR_TEST_SEAL_DELAY", "1:1500");
    let c = fake_job(t, 4, 2, &d, &["40", "--exit-after-dump"]);
    let mut job = t.spawn(c, Some(&t.p("s1.out")), Some(&t.p("s1.err")));
    let (r1, o1) = t.ckpt(&d, &[]);
    let rc = job.wait(LIMIT);
    let good =
        r1 == 0 && grep("^epoch: *1", &o1) && rc == 0 && t.epochs_complete(&d) == 1 && grep("exiting right after the dump of epoch 1", &cat(&[&t.p("s1.err")]));
    t.check("agent-exit-while-sealing-commits", good, |t| format!("r1={r1} rc={rc}: {o1}{}", tails(t, &["s1.err"])));
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let rc2 = t.to(c, Some(&t.p("s2.out")), Some(&t.p("s2.err")), LIMIT);
    let all = cat(&[&t.p("s1.out"), &t.p("s2.out")]);
    let msg = if rc2 == 0 { complete(&all, 2, 40) } else { Err(Error::Check(String::new())) };
    t.check("agent-exit-while-sealing-restarts", msg.is_ok(), |t| {
        format!("rc={rc2} {}{}", msg.as_ref().err().map(ToString::to_string).unwrap_or_default(), tails(t, &["s2.err"]))
    });
}

/// `mpicr checkpoint` asked before a rank's program initialised MPI under mpicr (its agent says
/// hello 3 s late; the stand-in programs do not wait for each other, so each runs longer than
/// the delay): the request waits for it and the checkpoint is taken; with a timeout shorter than
/// the delay it fails saying what it waited for, and the job goes on.
fn late_init(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4], "needs MPICH 4 and criu") {
        return;
    }
    t.export("MPICR_SHIM", "none");
    // Asks until the job's coordinator answers at all (the job may not have started yet).
    let first_answer = |t: &T, d: &std::path::Path, extra: &[&str]| -> (i32, String) {
        let mut last = (1, String::new());
        for _ in 0..300 {
            let mut c = t.m(["checkpoint"]);
            c.args(extra).arg(d);
            last = t.out(c, LIMIT);
            let not_up = ["does not exist", "no job is running", "does not answer", "has no coordinator.json"];
            if !not_up.iter().any(|s| last.1.contains(s)) {
                return last;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        last
    };
    let d = t.p("late");
    let c = fake_job(t, 4, 2, &d, &["120", "--hello-after-ms", "3000", "--hello-rank", "1"]);
    let mut job = t.spawn(c, Some(&t.p("l.out")), Some(&t.p("l.err")));
    let (r1, o1) = first_answer(t, &d, &[]);
    let rc = job.wait(LIMIT);
    let good = r1 == 0 && grep("^epoch: *1", &o1) && rc == 0 && complete(&cat(&[&t.p("l.out")]), 2, 120).is_ok();
    t.check("agent-late-init-waits", good, |t| format!("r1={r1} rc={rc}: {o1}{}", tails(t, &["l.err"])));

    let d = t.p("late2");
    let c = fake_job(t, 4, 2, &d, &["160", "--hello-after-ms", "5000", "--hello-rank", "1"]);
    let mut job = t.spawn(c, Some(&t.p("m.out")), Some(&t.p("m.err")));
    let (r2, o2) = first_answer(t, &d, &["--timeout", "2s"]);
    let rc = job.wait(LIMIT);
    let good = r2 != 0
        && o2.contains("has not initialised MPI under mpicr on rank(s) 1 (no agent) after waiting 2s")
        && rc == 0
        && complete(&cat(&[&t.p("m.out")]), 2, 160).is_ok();
    t.check("agent-late-init-times-out", good, |t| format!("r2={r2} rc={rc}: {o2}{}", tails(t, &["m.err"])));
}
