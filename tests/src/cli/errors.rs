//! `checkpoint` and `status` errors: a missing directory, no running job, a job without the
//! shim.

use super::{CaseFn, LIMIT, T};

pub fn cases() -> Vec<CaseFn> {
    vec![CaseFn {
        name: "ckpt-errors",
        cases: &[
            "ckpt-missing-dir",
            "ckpt-no-job",
            "ckpt-no-shim-refused",
            "status-missing-dir",
        ],
        run: ckpt_errors,
    }]
}

fn ckpt_errors(t: &mut T) {
    if !t.require(&[t.env.have4], "MPICH 4 not installed") {
        return;
    }
    let mut c = t.m(["checkpoint"]);
    c.arg(t.p("nowhere"));
    let (rc, out) = t.out(c, LIMIT);
    // exit 3: no job runs on DIR (mpicr-checkpoint(1))
    t.check(
        "ckpt-missing-dir",
        rc == 3 && out.contains("does not exist"),
        |_| out.clone(),
    );

    let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
    c.arg(t.p("ended")).args(["--", "true"]);
    t.to(c, None, None, LIMIT);
    let mut c = t.m(["checkpoint"]);
    c.arg(t.p("ended"));
    let (rc, out) = t.out(c, LIMIT);
    t.check(
        "ckpt-no-job",
        rc == 3 && out.contains("no job is running"),
        |_| out.clone(),
    );

    let d = t.p("noshim");
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m)
        .args(["run", "--no-shim", "--ckpt-dir"])
        .arg(&d)
        .arg("--")
        .arg(t.env.bin("counter"))
        .arg("42");
    let mut job = t.spawn(c, None, None);
    t.wait_coordinator(&d, true);
    let mut c = t.m(["checkpoint"]);
    c.arg(&d);
    let (_, out) = t.out(c, LIMIT);
    job.wait(LIMIT);
    t.check(
        "ckpt-no-shim-refused",
        out.contains("without the shim"),
        |_| out.clone(),
    );

    let mut c = t.m(["status"]);
    c.arg(t.p("nowhere"));
    let (rc, out) = t.out(c, LIMIT);
    t.check(
        "status-missing-dir",
        rc == 1 && out.contains("does not exist"),
        |_| out.clone(),
    );
}
