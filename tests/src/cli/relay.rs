//! The PMI relay and stdio under Hydra (`run --no-shim`), a clean descriptor table in the
//! program, exit statuses, command-line usage.

use super::{grep, grep_c, CaseFn, LIMIT, T};

pub fn cases() -> Vec<CaseFn> {
    vec![
        CaseFn { name: "relay-mpich4-n2", cases: &["relay-mpich4-n2"], run: |t| relay(t, 4, 2) },
        CaseFn { name: "relay-mpich4-n4", cases: &["relay-mpich4-n4"], run: |t| relay(t, 4, 4) },
        CaseFn { name: "relay-mpich5-n2", cases: &["relay-mpich5-n2"], run: |t| relay(t, 5, 2) },
        CaseFn { name: "relay-mpich5-n4", cases: &["relay-mpich5-n4"], run: |t| relay(t, 5, 4) },
        CaseFn { name: "clean-fd-table-mpich4", cases: &["clean-fd-table-mpich4"], run: |t| fd_table(t, 4) },
        CaseFn { name: "clean-fd-table-mpich5", cases: &["clean-fd-table-mpich5"], run: |t| fd_table(t, 5) },
        CaseFn { name: "exit-status", cases: &["exit-status-propagates", "exit-status-not-found", "exit-status-not-executable"], run: exit_status },
        CaseFn { name: "cli-usage", cases: &["cli-usage-bad-duration", "cli-usage-help"], run: cli_usage },
    ]
}

/// Every rank of `hello` prints the sum of an allreduce, through the keeper's PMI relay.
fn relay(t: &mut T, ver: u32, n: u32) {
    let name = format!("relay-mpich{ver}-n{n}");
    if !t.env.have(ver) {
        return t.skip(&name, format!("MPICH {ver} not installed"));
    }
    let mut c = t.mpi(ver, n);
    c.arg(&t.env.m).args(["run", "--no-shim", "--ckpt-dir"]).arg(t.p(&format!("relay{ver}{n}"))).arg("--").arg(t.env.bin(&format!("hello{ver}")));
    let (rc, out) = t.out(c, LIMIT);
    let want = n * (n + 1) / 2;
    let good = rc == 0 && grep_c(&format!("of {n}: sum {want}$"), &out) == n as usize;
    t.check(&name, good, |_t| format!("rc={rc}: {out}"));
}

/// The program's descriptors: stdio from Hydra, the PMI socket, and the keeper's at 100.
fn fd_table(t: &mut T, ver: u32) {
    let name = format!("clean-fd-table-mpich{ver}");
    if !t.env.have(ver) {
        return t.skip(&name, format!("MPICH {ver} not installed"));
    }
    let mut c = t.mpi(ver, 2);
    c.arg(&t.env.m).args(["run", "--no-shim", "--ckpt-dir"]).arg(t.p(&format!("fd{ver}"))).arg("--").arg(t.env.bin(&format!("fds{ver}")));
    let (rc, out) = t.out(c, LIMIT);
    let want = "fds: 0=/dev/null 1=pipe 2=pipe 3=socket 100=socket";
    let good = rc == 0 && out.lines().filter(|l| *l == want).count() == 2;
    t.check(&name, good, |_t| out.clone());
}

fn exit_status(t: &mut T) {
    if !t.require(&[t.env.have4], "MPICH 4 not installed") {
        return;
    }
    let ex = t.p("ex");
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m).args(["run", "--no-shim", "--ckpt-dir"]).arg(&ex).arg("--").arg(t.env.bin("fds4")).arg("1");
    let rc = t.to(c, None, None, LIMIT);
    t.check("exit-status-propagates", rc == 3, |_t| format!("rc={rc}, expected 3"));

    let mut c = t.mpi(4, 1);
    c.arg(&t.env.m).args(["run", "--no-shim", "--ckpt-dir"]).arg(&ex).arg("--").arg(t.p("nonexistent"));
    let (rc, out) = t.out(c, LIMIT);
    let good = rc == 127 && out.contains("program not found");
    t.check("exit-status-not-found", good, |_t| format!("rc={rc}: {out}"));

    // a file that is not executable: the C source, copied as the bash version had it
    let src = t.p("counter.c");
    let _ = std::fs::copy(t.env.root.join("tests/cli-programs/counter.c"), &src);
    let _ = std::fs::set_permissions(&src, std::os::unix::fs::PermissionsExt::from_mode(0o644));
    let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
    c.arg(t.p("ex2")).arg("--").arg(src);
    let (rc, out) = t.out(c, LIMIT);
    t.check("exit-status-not-executable", rc == 126, |_t| format!("rc={rc}: {out}"));
}

fn cli_usage(t: &mut T) {
    let (rc, out) = t.out(t.m(["run", "--interval", "5x", "--", "true"]), LIMIT);
    let good = rc == 2 && out.contains("unknown unit");
    t.check("cli-usage-bad-duration", good, |_t| format!("rc={rc}: {out}"));
    let help = t.stdout_of(t.m(["--help"]));
    t.check("cli-usage-help", grep("MPICR_CKPT_DIR", &help), |_t| "no MPICR_CKPT_DIR in --help".into());
}
