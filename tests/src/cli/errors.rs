//! `checkpoint` and `status` errors: a missing directory, no running job, a job without the
//! shim; and a checkpoint taken while a buffer is attached to a communicator (MPICH 5), which
//! was refused until mpicr carried such buffers.

use super::xlib::wait_for;
use super::{CaseFn, LIMIT, T};

pub fn cases() -> Vec<CaseFn> {
    vec![
        CaseFn {
            name: "ckpt-errors",
            cases: &["ckpt-missing-dir", "ckpt-no-job", "status-reader-gone", "ckpt-no-shim-refused", "status-missing-dir"],
            run: ckpt_errors,
        },
        CaseFn { name: "ckpt-comm-buffer", cases: &["ckpt-comm-buffer"], run: ckpt_comm_buffer },
    ]
}

/// A buffer attached to a communicator is carried: the checkpoint commits an epoch, and the job
/// goes on to its end, its buffered sends on that communicator still fitting the buffer.
fn ckpt_comm_buffer(t: &mut T) {
    if !t.require(&[t.env.have5, t.env.shim_built], "MPICH 5 or the shim missing") {
        return;
    }
    let (d, o) = (t.p("ck-commbuf"), t.p("commbuf.out"));
    let mut c = t.mpi(5, 2);
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("commbuf5"));
    let mut job = t.spawn(c, Some(&o), Some(&t.p("commbuf.err")));
    let up = wait_for(|| std::fs::read_to_string(&o).is_ok_and(|s| s.matches(" started").count() == 2), LIMIT);
    let ck = if up { t.ckpt(&d, &[]) } else { (1, "never started".into()) };
    let rc = job.wait(LIMIT * 2);
    let out = std::fs::read_to_string(&o).unwrap_or_default();
    let good = ck.0 == 0 && rc == 0 && out.matches("done: sum 44850").count() == 2 && d.join("latest").exists();
    t.check("ckpt-comm-buffer", good, |_| format!("checkpoint {ck:?}, job rc {rc}, output {out:?}"));
}

fn ckpt_errors(t: &mut T) {
    if !t.require(&[t.env.have4], "MPICH 4 not installed") {
        return;
    }
    let mut c = t.m(["checkpoint"]);
    c.arg(t.p("nowhere"));
    let (rc, out) = t.out(c, LIMIT);
    // exit 3: no job runs on DIR (mpicr-checkpoint(1))
    t.check("ckpt-missing-dir", rc == 3 && out.contains("does not exist"), |_| out.clone());

    let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
    c.arg(t.p("ended")).args(["--", "true"]);
    t.to(c, None, None, LIMIT);
    let mut c = t.m(["checkpoint"]);
    c.arg(t.p("ended"));
    let (rc, out) = t.out(c, LIMIT);
    t.check("ckpt-no-job", rc == 3 && out.contains("no job is running"), |_| out.clone());

    // Its output into a pipe nobody reads any more (`mpicr status D | head -1`): ended by SIGPIPE
    // as a C tool is, nothing on stderr (no panic).
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let mut c = t.m(["status"]);
    c.arg(t.p("ended")).stdout(writer).stderr(std::process::Stdio::piped());
    let r = c.output().expect("mpicr status");
    let sig = std::os::unix::process::ExitStatusExt::signal(&r.status);
    let err = String::from_utf8_lossy(&r.stderr).into_owned();
    t.check("status-reader-gone", sig == Some(libc::SIGPIPE) && err.is_empty(), |_| format!("{:?}, stderr: {err}", r.status));

    let d = t.p("noshim");
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m).args(["run", "--no-shim", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("counter")).arg("42");
    let mut job = t.spawn(c, None, None);
    t.wait_coordinator(&d, true);
    let mut c = t.m(["checkpoint"]);
    c.arg(&d);
    let (_, out) = t.out(c, LIMIT);
    job.wait(LIMIT);
    t.check("ckpt-no-shim-refused", out.contains("without the shim"), |_| out.clone());

    let mut c = t.m(["status"]);
    c.arg(t.p("nowhere"));
    let (rc, out) = t.out(c, LIMIT);
    t.check("status-missing-dir", rc == 1 && out.contains("does not exist"), |_| out.clone());
}
