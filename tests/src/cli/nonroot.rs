//! Without root: a dedicated user runs, checkpoints and restarts (CRIU `--unprivileged`), with
//! no MPI and with MPICH 4 and the shim; a CRIU without CAP_CHECKPOINT_RESTORE is named in one
//! line before the program runs. As root only: the user `mpicr-tPID` is created, and removed at
//! the end (its processes killed by PID first) with its directory, panics included. The program
//! has no PID namespace of its own then: the restart needs its old ids free.

use super::{cat, grep, CaseFn, LIMIT, T};
use crate::job::scan_procs;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub fn cases() -> Vec<CaseFn> {
    vec![CaseFn {
        name: "nonroot",
        cases: &["nonroot-missing-capability-named", "nonroot-no-mpi-checkpoint-restart", "nonroot-images-private", "nonroot-mpich4-checkpoint-restart"],
        run: nonroot,
    }]
}

/// The test user and its directory; dropping it kills the user's processes (by PID), deletes
/// the user and removes the directory.
struct TestUser {
    name: String,
    uid: u32,
    created: bool,
    dir: Option<PathBuf>,
}

impl TestUser {
    fn kill_processes(&self) {
        for _ in 0..100 {
            let mine: Vec<u32> = scan_procs().into_iter().filter(|p| !p.dead && real_uid(p.pid) == Some(self.uid)).map(|p| p.pid).collect();
            if mine.is_empty() {
                return;
            }
            for pid in mine {
                // SAFETY: plain syscall on a process of the test's own user, created above.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        if self.created {
            self.kill_processes();
            std::thread::sleep(Duration::from_millis(200));
            let _ = Command::new("userdel").arg(&self.name).stderr(std::process::Stdio::null()).status();
        }
        if let Some(d) = &self.dir {
            let _ = fs::remove_dir_all(d);
        }
    }
}

/// The real uid of a process (what `pkill -U` matches).
fn real_uid(pid: u32) -> Option<u32> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn have(cmd: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

/// Files under `dir` (symlinks aside) not owned by `uid` or open to group or others.
fn not_private(dir: &Path, uid: u32, out: &mut Vec<String>) {
    let Ok(md) = fs::symlink_metadata(dir) else {
        return;
    };
    if md.file_type().is_symlink() {
        return;
    }
    if md.uid() != uid || md.mode() & 0o077 != 0 {
        out.push(dir.display().to_string());
    }
    if md.is_dir() {
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.flatten() {
                not_private(&e.path(), uid, out);
            }
        }
    }
}

fn sorted_lines(s: &str) -> Vec<&str> {
    let mut v: Vec<&str> = s.lines().collect();
    v.sort_unstable();
    v
}

fn nonroot(t: &mut T) {
    if !t.env.is_root {
        return t.skip_rest("not root: cannot create the test user");
    }
    if !(have("useradd") && have("setpriv")) {
        return t.skip_rest("useradd or setpriv missing");
    }
    if !t.env.criu_ok {
        return t.skip_rest("no criu");
    }
    let name = format!("mpicr-t{}", std::process::id());
    let mut user = TestUser { name: name.clone(), uid: 0, created: false, dir: None };
    let ok = Command::new("useradd").args(["-r", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin"]).arg(&name).status().is_ok_and(|s| s.success());
    if !ok {
        for c in t.cases_left() {
            t.bad(&c, format!("useradd {name} failed"));
        }
        return;
    }
    user.created = true;
    let Some((uid, gid)) = super::security::user_id(&name) else {
        return t.skip_rest("the test user has no uid");
    };
    user.uid = uid;
    let nr = std::env::temp_dir().join(format!("mpicr-nonroot.{}", std::process::id()));
    let _ = fs::create_dir(&nr);
    user.dir = Some(nr.clone());
    let _ = std::os::unix::fs::chown(&nr, Some(uid), Some(gid));
    let as_u = |t: &T, args: &[&dyn AsRef<std::ffi::OsStr>]| {
        let mut c = t.cmd("setpriv");
        c.arg(format!("--reuid={uid}")).arg(format!("--regid={gid}")).arg("--init-groups").arg("env").arg({
            let mut h = std::ffi::OsString::from("HOME=");
            h.push(&nr);
            h
        });
        for a in args {
            c.arg(a.as_ref());
        }
        c.current_dir(&nr);
        c
    };
    let m = t.env.m.clone();
    if t.to(as_u(t, &[&"test", &"-x", &m]), None, None, LIMIT) != 0 {
        return t.skip_rest(format!("{} is not reachable by other users", m.display()));
    }
    let _ = fs::copy(t.env.bin("counter"), nr.join("counter"));
    if t.env.have4 && t.env.bin("loop4").is_file() {
        let _ = fs::copy(t.env.bin("loop4"), nr.join("loop4"));
    }
    if let Ok(criu) = fs::canonicalize(t.env.root.join(".deps/criu/criu")) {
        let _ = fs::copy(criu, nr.join("criu-nocap"));
    }
    let mut chown = t.cmd("chown");
    chown.arg("-R").arg(format!("{uid}:{gid}")).arg(&nr);
    t.to(chown, None, None, LIMIT);

    // ckpt as the user, retried while the job is not ready yet.
    let nr_ckpt = |t: &T, args: &[&str], dir: &Path| -> (i32, String) {
        t.ckpt_with(|| {
            let mut c = as_u(t, &[&m, &"checkpoint"]);
            c.args(args).arg(dir);
            c
        })
    };

    // The one line naming what is missing, before the program runs.
    let nocap = nr.join("criu-nocap");
    if nocap.is_file() {
        let mut c = as_u(t, &[&m, &"run", &"--no-mpi", &"--ckpt-dir", &nr.join("nocap"), &"--", &"./counter", &"3"]);
        c.env("MPICR_CRIU", &nocap);
        let (rc, out) = t.out(c, LIMIT);
        let good = rc != 0 && out.lines().count() == 1 && grep("lacks CAP_CHECKPOINT_RESTORE.*make deps", &out);
        t.check("nonroot-missing-capability-named", good, |_| format!("rc={rc}: {out}"));
    } else {
        t.skip("nonroot-missing-capability-named", "no criu binary to copy without its capabilities");
    }
    let c = as_u(t, &[&m, &"run", &"--no-mpi", &"--ckpt-dir", &nr.join("probe"), &"--", &"true"]);
    let (_, out) = t.out(c, LIMIT);
    if ["lacks", "no_new_privs", "check --unprivileged"].iter().any(|s| out.contains(s)) {
        return t.skip_rest(format!("this machine's CRIU cannot serve a non-root user: {out}"));
    }

    // No MPI: checkpoint, checkpoint --stop, restart; output equal to the uninterrupted run.
    let p = |f: &str| nr.join(f);
    t.to(as_u(t, &[&"./counter", &"60"]), Some(&p("ref.out")), None, LIMIT);
    let single = p("single");
    let c = as_u(t, &[&m, &"run", &"--no-mpi", &"--ckpt-dir", &single, &"--", &"./counter", &"60"]);
    let mut job = t.spawn(c, Some(&p("s1.out")), Some(&p("s1.err")));
    let (mut rc, mut r) = nr_ckpt(t, &[], &single);
    if rc == 0 {
        let (rc2, r2) = nr_ckpt(t, &["--stop"], &single);
        rc = rc2;
        r = format!("{r}\n{r2}");
    }
    let rc1 = job.wait(LIMIT);
    let rc2 = t.to(as_u(t, &[&m, &"restart", &single]), Some(&p("s2.out")), Some(&p("s2.err")), LIMIT);
    let good = rc == 0 && rc1 == 0 && rc2 == 4 && r.contains("job stopped") && cat(&[&p("s1.out"), &p("s2.out")]) == cat(&[&p("ref.out")]);
    t.check("nonroot-no-mpi-checkpoint-restart", good, |_| {
        format!("ckpt rc={rc} run rc={rc1} restart rc={rc2} (want 4): {r} {}\n{}", super::tail(&p("s1.err"), 3), super::tail(&p("s2.err"), 3))
    });
    // What the user's images are: the user's own, private.
    let mut loose = Vec::new();
    not_private(&single, uid, &mut loose);
    loose.truncate(3);
    t.check("nonroot-images-private", loose.is_empty(), |_| loose.join("\n"));

    // MPICH 4, 2 ranks, with the shim.
    if !(t.env.have4 && t.env.shim_built) {
        return t.skip("nonroot-mpich4-checkpoint-restart", "needs MPICH 4 and libmpicr.so");
    }
    t.to(as_u(t, &[&"mpiexec.mpich", &"-n", &"2", &"./loop4", &"60"]), Some(&p("lref.unsorted")), None, LIMIT);
    let shim4 = p("shim4");
    let c = as_u(t, &[&"mpiexec.mpich", &"-n", &"2", &m, &"run", &"--ckpt-dir", &shim4, &"--", &"./loop4", &"60"]);
    let mut job = t.spawn(c, Some(&p("l1.out")), Some(&p("l1.err")));
    let (mut rc, mut r) = nr_ckpt(t, &[], &shim4);
    if rc == 0 {
        let (rc2, r2) = nr_ckpt(t, &["--stop"], &shim4);
        rc = rc2;
        r = format!("{r}\n{r2}");
    }
    let rc1 = job.wait(LIMIT);
    let rc2 = t.to(as_u(t, &[&"mpiexec.mpich", &"-n", &"2", &m, &"restart", &shim4]), Some(&p("l2.out")), Some(&p("l2.err")), LIMIT);
    let reference = cat(&[&p("lref.unsorted")]);
    let got = cat(&[&p("l1.out"), &p("l2.out")]);
    let good = rc == 0 && rc1 == 0 && rc2 == 0 && !reference.is_empty() && sorted_lines(&got) == sorted_lines(&reference);
    t.check("nonroot-mpich4-checkpoint-restart", good, |_| {
        format!("ckpt rc={rc} run rc={rc1} restart rc={rc2}: {r} {}\n{}", super::tail(&p("l1.err"), 3), super::tail(&p("l2.err"), 3))
    });
    drop(user);
}
