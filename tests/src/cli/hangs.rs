//! With the real shim (`libmpicr.so`, MPICH 4.0.2: the namespace renewal): a checkpoint, a stop
//! and a restart; every failure of a checkpoint (a panic in the agent, each deadline, a lost
//! coordinator; test hooks `MPICR_TEST_AGENT_PANIC`, `MPICR_TEST_COORD_FAULT`) leaves the job
//! running, and the next checkpoint works; the control socket is hidden from the program.

use super::{cat, complete, grep, json_num, tail, CaseFn, LIMIT, T};
use crate::error::Error;
use std::time::Duration;

pub fn cases_shim() -> Vec<CaseFn> {
    vec![
        CaseFn { name: "shim-mpich4", cases: &["shim-mpich4-checkpoint-restart"], run: shim_mpich4 },
        CaseFn { name: "shim-renew", cases: &["shim-renew-after-running"], run: renew_after_running },
    ]
}

/// Checkpoint-and-continue: the stop time ends when every rank's program runs again, before
/// the renewed MPI library is back (`mpi_back_us`), which the manifest, `mpicr checkpoint` and
/// `mpicr status` report apart, with each rank's renewal. Order only, never speed.
fn renew_after_running(t: &mut T) {
    let name = "shim-renew-after-running";
    if !(t.env.criu_ok && t.env.have4 && t.env.shim_built) {
        return t.skip(name, "needs MPICH 4, criu and libmpicr.so");
    }
    let d = t.p("renew");
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("loop4")).arg("100");
    let mut job = t.spawn(c, Some(&t.p("r.out")), Some(&t.p("r.err")));
    let (r1, o1) = t.ckpt(&d, &[]);
    let (r2, o2) = t.ckpt(&d, &[]);
    let rc = job.wait(LIMIT);
    let manifest = std::fs::read_to_string(d.join("epoch-000001/MANIFEST.json")).unwrap_or_default();
    let mut st = t.m(["status", "--json"]);
    st.arg(&d);
    let (rcs, status) = t.out(st, LIMIT);
    let stop = json_num(&manifest, "stop_time_us");
    let back = json_num(&manifest, "mpi_back_us");
    let good = r1 == 0
        && r2 == 0
        && rc == 0
        && complete(&cat(&[&t.p("r.out")]), 2, 100).is_ok()
        && o1.contains("MPI back:")
        && matches!((stop, back), (Some(s), Some(b)) if s <= b)
        && manifest.contains("\"running\"")
        && manifest.matches("\"renew\"").count() == 2
        && rcs == 0
        && json_num(&status, "mpi_back_us").is_some()
        && json_num(&status, "renew_us").is_some();
    t.check(name, good, |t| format!("r={r1}/{r2} rc={rc} stop={stop:?} back={back:?}: {o1} / {o2}\n{manifest}\n{status}{}", tails(t, &["r.err"], 8)));
}

/// (name, environment of the job, what the first checkpoint must report, whether a second
/// checkpoint must succeed: not when the coordinator is gone)
const FAULTS: [(&str, &str, &str, bool); 7] = [
    ("shim-panic-before-release", "MPICR_TEST_AGENT_PANIC=drain:1", "rank 1: internal error in the checkpoint agent: injected panic at drain (at ", true),
    ("shim-panic-after-release", "MPICR_TEST_AGENT_PANIC=release:1", "rank 1: internal error in the checkpoint agent: injected panic at release", true),
    ("shim-deadline-targets", "MPICR_TEST_COORD_FAULT=stall:targets MPICR_ALIGN_TIMEOUT=2", "no collective targets from the coordinator within 2 s", true),
    ("shim-deadline-expected", "MPICR_TEST_COORD_FAULT=stall:expected MPICR_ALIGN_TIMEOUT=1", "no expected receives from the coordinator within 4 s", true),
    (
        "shim-deadline-release",
        "MPICR_TEST_COORD_FAULT=stall:release MPICR_DRAIN_TIMEOUT=1",
        "not every rank drained within 2 s; aborted by the coordinator",
        true,
    ),
    ("shim-deadline-resume", "MPICR_TEST_COORD_FAULT=stall:dump MPICR_RESUME_TIMEOUT=2", "no resume from the coordinator within 2 s", true),
    ("shim-coord-lost-released", "MPICR_TEST_COORD_FAULT=vanish:dump", "closed the connection before answering", false),
];

pub fn cases_faults() -> Vec<CaseFn> {
    vec![
        CaseFn { name: FAULTS[0].0, cases: &[FAULTS[0].0], run: |t| shim_fault(t, 0) },
        CaseFn { name: FAULTS[1].0, cases: &[FAULTS[1].0], run: |t| shim_fault(t, 1) },
        CaseFn { name: FAULTS[2].0, cases: &[FAULTS[2].0], run: |t| shim_fault(t, 2) },
        CaseFn { name: FAULTS[3].0, cases: &[FAULTS[3].0], run: |t| shim_fault(t, 3) },
        CaseFn { name: FAULTS[4].0, cases: &[FAULTS[4].0], run: |t| shim_fault(t, 4) },
        CaseFn { name: FAULTS[5].0, cases: &[FAULTS[5].0], run: |t| shim_fault(t, 5) },
        CaseFn { name: FAULTS[6].0, cases: &[FAULTS[6].0], run: |t| shim_fault(t, 6) },
        CaseFn { name: "shim-ctl-fd", cases: &["shim-ctl-fd-not-inherited"], run: ctl_fd },
    ]
}

pub(super) fn tails(t: &T, files: &[&str], n: usize) -> String {
    files.iter().map(|f| format!("\n==> {f} <==\n{}", tail(&t.p(f), n))).collect()
}

fn shim_mpich4(t: &mut T) {
    if !t.env.criu_ok || !t.env.have4 {
        return t.skip_rest("needs MPICH 4 and criu");
    }
    if !t.env.shim_built {
        return t.skip_rest("libmpicr.so not built");
    }
    let d = t.p("shim4");
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("loop4")).arg("60");
    let mut job = t.spawn(c, Some(&t.p("l1.out")), Some(&t.p("l1.err")));
    let mut rcs = t.ckpt(&d, &[]).0;
    if rcs == 0 {
        rcs = t.ckpt(&d, &["--stop"]).0;
    }
    let rc = job.wait(LIMIT);
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let rc2 = t.to(c, Some(&t.p("l2.out")), Some(&t.p("l2.err")), LIMIT);
    let msg = if rcs == 0 && rc == 0 && rc2 == 0 { complete(&cat(&[&t.p("l1.out"), &t.p("l2.out")]), 2, 60) } else { Err(Error::Check(String::new())) };
    t.check("shim-mpich4-checkpoint-restart", msg.is_ok(), |t| {
        format!("rc={rcs}/{rc}/{rc2} {}{}", msg.as_ref().err().map(ToString::to_string).unwrap_or_default(), tails(t, &["l1.err", "l2.err"], 5))
    });
}

fn shim_fault(t: &mut T, i: usize) {
    let (name, env, want, again) = FAULTS[i];
    if !(t.env.criu_ok && t.env.have4 && t.env.shim_built) {
        return t.skip(name, "needs MPICH 4, criu and libmpicr.so");
    }
    let d = t.p(name);
    let mut c = t.mpi(4, 2);
    for kv in env.split_whitespace() {
        let (k, v) = kv.split_once('=').expect("K=V");
        c.env(k, v);
    }
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("loop4")).arg("200");
    let mut job = t.spawn(c, Some(&t.p("s1.out")), Some(&t.p("s1.err")));
    let (r1, o1) = t.ckpt(&d, &[]);
    let (mut r2, mut o2) = (0, String::new());
    if again {
        (r2, o2) = t.ckpt(&d, &[]);
    }
    let rc = job.wait(Duration::from_secs(90));
    let good = r1 != 0 && grep(want, &format!("{o1}{}", cat(&[&t.p("s1.err")]))) && r2 == 0 && rc == 0 && complete(&cat(&[&t.p("s1.out")]), 2, 200).is_ok();
    t.check(name, good, |t| format!("r1={r1} r2={r2} rc={rc}: {o1} / {o2}{}", tails(t, &["s1.err"], 8)));
}

/// After MPI_Init under the shim, the control socket is close-on-exec and its variable gone.
fn ctl_fd(t: &mut T) {
    if !t.env.have4 {
        return t.skip_rest("MPICH 4 not installed");
    }
    if !t.env.shim_built {
        return t.skip_rest("libmpicr.so not built");
    }
    let mut c = t.mpi(4, 1);
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(t.p("ctlfd")).arg("--").arg(t.env.bin("ctlfd4"));
    let (rc, out) = t.out(c, LIMIT);
    let good = rc == 0 && out.lines().any(|l| l == "env=unset cloexec=1");
    t.check("shim-ctl-fd-not-inherited", good, |_| format!("rc={rc}: {out}"));
}
