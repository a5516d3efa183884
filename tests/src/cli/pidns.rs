//! With the shim in PID namespaces (the default; the MPI library settings that go with them are
//! in cli/src/pidns.rs): a stopped job restarts while a process of ours holds rank 0's original
//! pid.

use super::hangs::tails;
use super::{cat, complete, rank_pid, CaseFn, LIMIT, T};
use crate::error::Error;

pub fn cases() -> Vec<CaseFn> {
    vec![CaseFn { name: "shim-mpich4-pidns", cases: &["shim-mpich4-pidns-restart-held-pid"], run: held_pid }]
}

fn held_pid(t: &mut T) {
    let name = "shim-mpich4-pidns-restart-held-pid";
    if !t.require(&[t.env.criu_ok, t.env.have4, t.env.is_root], "needs MPICH 4, criu and root") {
        return;
    }
    if !t.env.shim_built {
        return t.skip(name, "libmpicr.so not built");
    }
    let d = t.p("shimns");
    let mut c = t.mpi(4, 2);
    c.env_remove("MPICR_PIDNS").arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("loop4")).arg("60");
    let mut job = t.spawn(c, Some(&t.p("n1.out")), Some(&t.p("n1.err")));
    let mut rcs = t.ckpt(&d, &[]).0;
    if rcs == 0 {
        rcs = t.ckpt(&d, &["--stop"]).0;
    }
    let rc = job.wait(LIMIT);
    let rank_json = d.join("epoch-000002/rank-0/rank.json");
    let orig = rank_pid(&rank_json).unwrap_or(0);
    // The next pid the kernel hands out is orig (unless something else takes it first).
    let _ = std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}\n", orig - 1));
    let mut holder_cmd = t.cmd("sleep");
    holder_cmd.arg("120");
    let mut holder = t.spawn(holder_cmd, None, None);
    let held = holder.pid();
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let rc2 = t.to(c, Some(&t.p("n2.out")), Some(&t.p("n2.err")), LIMIT);
    holder.signal(libc::SIGTERM);
    holder.wait(LIMIT);
    if held as i32 != orig {
        return t.skip(name, format!("could not take pid {orig} (got {held})"));
    }
    let msg = if rcs == 0 && rc == 0 && rc2 == 0 && cat(&[&rank_json]).contains("\"pidns\": true") {
        complete(&cat(&[&t.p("n1.out"), &t.p("n2.out")]), 2, 60)
    } else {
        Err(Error::Check(String::new()))
    };
    t.check(name, msg.is_ok(), |t| {
        format!("rc={rcs}/{rc}/{rc2} {}{}", msg.as_ref().err().map(ToString::to_string).unwrap_or_default(), tails(t, &["n1.err", "n2.err"], 5))
    });
}
