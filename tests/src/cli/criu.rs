//! Plain CRIU checkpoint/restart of non-MPI programs (`run --no-mpi`), alone and under mpiexec,
//! restored PIDs (with and without a PID namespace), the restart errors, periodic and SIGUSR1
//! checkpoints.

use super::xlib::wait_for;
use super::{cat, complete, grep, grep_c, json_num, rank_pid, tail, CaseFn, LIMIT, T};
use std::time::Duration;

/// Bound of a background job's wait (the bash version waited without one).
const BG_LIMIT: Duration = Duration::from_secs(120);

pub fn cases_first() -> Vec<CaseFn> {
    vec![
        CaseFn {
            name: "criu-single",
            cases: &["criu-single-dump-ahead", "criu-single-stop", "criu-single-dump-ahead-gone", "criu-single-restart", "criu-single-restart-epoch1"],
            run: single,
        },
        CaseFn { name: "criu-pid-clash", cases: &["criu-pid-clash-pidns-restarts", "criu-pid-clash-named"], run: pid_clash },
        CaseFn { name: "criu-restart-killed", cases: &["restart-killed-while-restoring-leaves-nothing", "restart-after-killed-restore"], run: killed_restore },
    ]
}

pub fn cases_mpiexec() -> Vec<CaseFn> {
    vec![
        CaseFn {
            name: "criu-mpiexec",
            cases: &[
                "criu-mpiexec-stop-exit-0",
                "restart-wrong-rank-count",
                "criu-mpiexec-restart",
                "restart-missing-epoch",
                "restart-corrupt-manifest",
                "status-skips-corrupt-epoch",
                "run-refuses-used-dir",
            ],
            run: mpiexec,
        },
        CaseFn { name: "criu-program-replaced", cases: &["criu-program-replaced-restart"], run: program_replaced },
    ]
}

pub fn cases_periodic() -> Vec<CaseFn> {
    vec![CaseFn { name: "periodic", cases: &["periodic-interval"], run: periodic }, CaseFn { name: "sigusr1", cases: &["sigusr1-checkpoint"], run: sigusr1 }]
}

/// checkpoint, checkpoint --stop, restart (exit status 60 % 7), restart of epoch 1 again.
fn single(t: &mut T) {
    if !t.require(&[t.env.criu_ok], "no criu") {
        return;
    }
    let d = t.p("single");
    t.export("MPICR_DUMP_AHEAD", "1");
    let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
    c.arg(&d).arg("--").arg(t.env.bin("counter")).arg("60");
    let mut job = t.spawn(c, Some(&t.p("s1.out")), Some(&t.p("s1.err")));
    // The keeper starts the next dump's CRIU ahead, waiting at its gate before it seizes
    // anything: once the job runs, and again after each checkpoint (the first went to epoch 1).
    let ahead = d.join(".next-dump").join("rank-0");
    let waiting = || criu_waiting_in(&ahead);
    let before = wait_for(waiting, Duration::from_secs(20));
    let (mut rcs, r1) = t.ckpt(&d, &[]);
    let after = rcs == 0 && wait_for(waiting, Duration::from_secs(20));
    let dumped = grep_c("Seized task", &cat(&[&d.join("epoch-000001/rank-0/dump.log")])) > 0;
    t.check("criu-single-dump-ahead", before && after && dumped, |_t| {
        format!("a CRIU waiting in {}: before the checkpoint {before}, after it {after}; epoch 1's dump.log names the seize: {dumped}", ahead.display())
    });
    let mut r2 = String::new();
    if rcs == 0 {
        (rcs, r2) = t.ckpt(&d, &["--stop"]);
    }
    let rc = job.wait(BG_LIMIT);
    let good = rcs == 0 && rc == 0 && grep("^epoch: *2", &r2) && r2.contains("job stopped");
    t.check("criu-single-stop", good, |t| format!("ckpt rc={rcs} run rc={rc}: {r1} {r2} {}", cat(&[&t.p("s1.err")])));
    // Nothing of it outlives the job: its directory, its CRIU.
    let gone = !d.join(".next-dump").exists() && !criu_waiting_in(&ahead);
    t.check("criu-single-dump-ahead-gone", gone, |_t| format!("{} or its CRIU is left after the job ended", ahead.display()));

    let mut c = t.m(["restart"]);
    c.arg(&d);
    let rc = t.to(c, Some(&t.p("s2.out")), Some(&t.p("s2.err")), LIMIT);
    let all = cat(&[&t.p("s1.out"), &t.p("s2.out")]);
    let msg = complete(&all, 1, 60);
    t.check("criu-single-restart", rc == 4 && msg.is_ok(), |t| {
        format!("rc={rc} (want 4) {} {}", msg.as_ref().err().map(ToString::to_string).unwrap_or_default(), cat(&[&t.p("s2.err")]))
    });

    // The image can be restored again, and an older epoch too.
    let mut c = t.m(["restart", "--epoch", "1"]);
    c.arg(&d);
    let rc = t.to(c, Some(&t.p("s3.out")), None, LIMIT);
    let last = tail(&t.p("s3.out"), 1);
    t.check("criu-single-restart-epoch1", rc == 4 && last.contains("tick 60"), |_t| format!("rc={rc}"));
}

/// Whether a `criu dump` into `dir` runs (by its command line, whose path CRIU got resolved:
/// compared by its last three components).
fn criu_waiting_in(dir: &std::path::Path) -> bool {
    let tail: Vec<_> = dir.components().rev().take(3).collect();
    let want = tail.iter().rev().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
    crate::job::scan_procs().iter().filter(|p| p.comm == "criu" && !p.dead).any(|p| {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", p.pid)).unwrap_or_default();
        let args: Vec<String> = cmdline.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        args.iter().any(|a| a == "dump") && args.iter().any(|a| a.ends_with(&format!("/{want}")))
    })
}

/// Restored processes keep their ids. In the program's own PID namespace (the default; MPICR_PIDNS=0 turns it off) those
/// are the namespace's, so a restart succeeds while the checkpointed job itself still runs and
/// holds every original id on the node; without one the clash is named.
fn pid_clash(t: &mut T) {
    if !t.require(&[t.env.criu_ok], "no criu") {
        return;
    }
    for ns in [1, 0] {
        let d = t.p(&format!("clash{ns}"));
        let copy = t.p(&format!("clash{ns}-copy"));
        let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
        c.env("MPICR_PIDNS", ns.to_string()).arg(&d).arg("--").arg(t.env.bin("counter")).arg("200");
        let mut job = t.spawn(c, None, None);
        t.ckpt(&d, &[]);
        let mut cp = t.cmd("cp");
        cp.arg("-a").arg(&d).arg(&copy);
        t.to(cp, None, None, LIMIT);
        let _ = std::fs::remove_file(copy.join("coordinator.json"));
        let held = rank_pid(&d.join("epoch-000001/rank-0/rank.json"));
        // SAFETY: signal 0 only checks that the process exists.
        let alive = held.is_some_and(|p| unsafe { libc::kill(p, 0) } == 0);
        let mut c = t.m(["restart"]);
        c.arg(&copy);
        let (rc, out) = t.out(c, LIMIT);
        job.signal(libc::SIGTERM);
        job.wait(BG_LIMIT);
        if ns == 1 {
            let good = rc == 4 && alive && out.contains("tick 200");
            t.check("criu-pid-clash-pidns-restarts", good, |_t| {
                let last: Vec<&str> = out.lines().collect();
                format!(
                    "rc={rc} (original pid {} alive: {}): {}",
                    held.map(|p| p.to_string()).unwrap_or_default(),
                    if alive { "yes" } else { "no" },
                    last[last.len().saturating_sub(3)..].join("\n")
                )
            });
        } else {
            let good = rc != 0 && out.contains("in use by live processes");
            t.check("criu-pid-clash-named", good, |_t| format!("rc={rc}: {out}"));
        }
    }
}

/// Two ranks under mpiexec: stop, bad restarts (rank count, epoch, corrupt manifest), a good
/// restart, and `run` refusing a used directory.
fn mpiexec(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4], "needs MPICH 4 and criu") {
        return;
    }
    let d = t.p("multi");
    let m = &t.env.m;
    // 63 ticks: exit status 0 (a rank ending non-zero makes Hydra kill the others, as without
    // mpicr)
    let mut c = t.mpi(4, 2);
    c.arg(m).args(["run", "--no-mpi", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("counter")).arg("63");
    let mut job = t.spawn(c, Some(&t.p("m1.out")), Some(&t.p("m1.err")));
    let (mut rcs, _) = t.ckpt(&d, &[]);
    if rcs == 0 {
        rcs = t.ckpt(&d, &["--stop"]).0;
    }
    let rc = job.wait(LIMIT);
    t.check("criu-mpiexec-stop-exit-0", rcs == 0 && rc == 0, |t| format!("ckpt rc={rcs} run rc={rc} {}", cat(&[&t.p("m1.err")])));

    let mut c = t.mpi(4, 3);
    c.arg(m).arg("restart").arg(&d);
    let (rc, out) = t.out(c, Duration::from_secs(30));
    let good = rc != 0 && grep_c("has 2 rank(s), but the launcher started 3", &out) == 3;
    t.check("restart-wrong-rank-count", good, |_t| format!("rc={rc}: {out}"));

    let mut c = t.mpi(4, 2);
    c.arg(m).arg("restart").arg(&d);
    let rc = t.to(c, Some(&t.p("m2.out")), Some(&t.p("m2.err")), LIMIT);
    let msg = complete(&cat(&[&t.p("m1.out"), &t.p("m2.out")]), 2, 63);
    t.check("criu-mpiexec-restart", rc == 0 && msg.is_ok(), |t| {
        format!("rc={rc} {} {}", msg.as_ref().err().map(ToString::to_string).unwrap_or_default(), cat(&[&t.p("m2.err")]))
    });

    let mut c = t.mpi(4, 2);
    c.arg(m).args(["restart", "--epoch", "9"]).arg(&d);
    let (rc, out) = t.out(c, LIMIT);
    let good = rc != 0 && out.contains("epoch 9 does not exist");
    t.check("restart-missing-epoch", good, |_t| format!("rc={rc}: {out}"));

    let _ = std::fs::write(d.join("epoch-000002/MANIFEST.json"), "{ \"format\": 1, \"broken\n");
    let mut c = t.mpi(4, 2);
    c.arg(m).args(["restart", "--epoch", "2"]).arg(&d);
    let (rc, out) = t.out(c, LIMIT);
    let good = rc != 0 && grep("manifest of epoch 2 .* is corrupt", &out);
    t.check("restart-corrupt-manifest", good, |_t| format!("rc={rc}: {out}"));

    let mut c = t.m(["status"]);
    c.arg(&d);
    let status = t.stdout_of(c);
    t.check("status-skips-corrupt-epoch", status.contains("resumes epoch 1"), |_t| status.clone());

    let mut c = t.mpi(4, 2);
    c.arg(m).args(["run", "--no-mpi", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("counter")).arg("7");
    let (rc, out) = t.out(c, LIMIT);
    let good = rc != 0 && out.contains("already holds checkpoints");
    t.check("run-refuses-used-dir", good, |_t| format!("rc={rc}: {out}"));
}

/// The program's binary replaced (a rebuild renamed over it) while two ranks of it run on this
/// node: both images carry the deleted binary as a ghost file of the same name, and the restart,
/// whose ranks restore side by side, brings back every tick.
fn program_replaced(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4], "needs MPICH 4 and criu") {
        return;
    }
    let d = t.p("replaced");
    let bin = t.p("replaced-bin");
    let prog = bin.join("counter");
    let copied = std::fs::create_dir_all(&bin).and_then(|_| std::fs::copy(t.env.bin("counter"), &prog));
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m).args(["run", "--no-mpi", "--ckpt-dir"]).arg(&d).arg("--").arg(&prog).arg("63");
    let mut job = t.spawn(c, Some(&t.p("r1.out")), Some(&t.p("r1.err")));
    t.wait_coordinator(&d, true);
    let fresh = bin.join(".counter.new");
    let replaced = copied.and_then(|_| std::fs::copy(&prog, &fresh)).and_then(|_| std::fs::rename(&fresh, &prog));
    let (rcs, ck) = t.ckpt(&d, &["--stop"]);
    let rc1 = job.wait(LIMIT);
    let ghosts = (0..2).all(|r| d.join(format!("epoch-000001/rank-{r}/ghost-file-1.img")).exists());
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m).args(["restart", "-v"]).arg(&d);
    let rc2 = t.to(c, Some(&t.p("r2.out")), Some(&t.p("r2.err")), LIMIT);
    let msg = complete(&cat(&[&t.p("r1.out"), &t.p("r2.out")]), 2, 63);
    t.check("criu-program-replaced-restart", replaced.is_ok() && rcs == 0 && rc1 == 0 && ghosts && rc2 == 0 && msg.is_ok(), |t| {
        format!(
            "replaced: {replaced:?}; checkpoint --stop rc={rcs} {ck}; job rc={rc1}; ghost files in both images: {ghosts}; restart rc={rc2} {} {}",
            msg.as_ref().err().map(ToString::to_string).unwrap_or_default(),
            tail(&t.p("r2.err"), 8)
        )
    });
}

fn periodic(t: &mut T) {
    if !t.require(&[t.env.criu_ok], "no criu") {
        return;
    }
    let d = t.p("periodic");
    let mut c = t.m(["run", "--no-mpi", "--interval", "1s", "--ckpt-dir"]);
    c.arg(&d).arg("--").arg(t.env.bin("counter")).arg("70");
    t.to(c, None, Some(&t.p("p.err")), LIMIT);
    let n = t.epochs_complete(&d);
    t.check("periodic-interval", n >= 2, |t| format!("{n} complete epochs: {}", cat(&[&t.p("p.err")])));
}

/// SIGUSR1 to rank 0's keeper (the coordinator) checkpoints the job.
fn sigusr1(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4], "needs MPICH 4 and criu") {
        return;
    }
    let d = t.p("sig");
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m).args(["run", "--no-mpi", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("counter")).arg("49");
    let mut job = t.spawn(c, None, Some(&t.p("u.err")));
    t.wait_coordinator(&d, true);
    let coord = std::fs::read_to_string(d.join("coordinator.json")).unwrap_or_default();
    if let Some(kpid) = json_num(&coord, "pid") {
        // SAFETY: plain syscall; the keeper of the job started above.
        unsafe { libc::kill(kpid as libc::pid_t, libc::SIGUSR1) };
    }
    job.wait(LIMIT);
    let n = t.epochs_complete(&d);
    let err = cat(&[&t.p("u.err")]);
    let good = n == 1 && err.contains("checkpoint: epoch 1 committed");
    t.check("sigusr1-checkpoint", good, |_t| format!("{n} epochs: {err}"));
}

/// A launcher may end a rank while CRIU restores it (Hydra kills each rank's process group when
/// another rank fails). The restart's process group is killed as soon as the restored root
/// exists (memory still being restored: 192 MiB), and (the second of three times) once CRIU
/// ptraces the root, near the restore's end, where the root's parent-death signal is set: nothing
/// of the restore may be left (it was: the half-restored tree slept for good; and CRIU with the
/// PID namespace's init, each waiting for the other), and the image restores to the end after.
fn killed_restore(t: &mut T) {
    if !t.require(&[t.env.criu_ok], "no criu") {
        return;
    }
    let d = t.p("killed");
    let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
    c.arg(&d).arg("--").arg(t.env.bin("counter")).args(["40", "192"]);
    let o1 = t.p("k1.out");
    let mut job = t.spawn(c, Some(&o1), Some(&t.p("k1.err")));
    let started = wait_for(|| std::fs::read_to_string(&o1).is_ok_and(|s| s.lines().count() >= 3), LIMIT);
    let ck = if started { t.ckpt(&d, &["--stop"]) } else { (1, "never started".into()) };
    let rc = job.wait(BG_LIMIT);
    if ck.0 != 0 || rc != 0 {
        return t.skip_rest(format!("the checkpoint failed: {ck:?}, rc {rc}"));
    }
    let mut seen_root = 0;
    let mut seen_traced = false;
    let mut left = Vec::new();
    for round in 0..3 {
        let mut c = t.m(["restart"]);
        c.arg(&d);
        let mut r = t.spawn(c, None, Some(&t.p("kill.err")));
        let keeper = r.pid();
        // The restored root is the keeper's child beside CRIU (`--restore-sibling`) and the
        // restore's watcher (`mpicr`); it is named `criu` until CRIU names it again. Its
        // environment is not readable while CRIU replaces its memory: it is followed by pid
        // and start time instead of the test's marker.
        let mut roots = Vec::new();
        wait_for_mut(|| {
            roots = crate::job::scan_procs()
                .into_iter()
                .filter(|p| !p.dead && p.ppid == keeper && p.comm != "criu" && p.comm != "mpicr")
                .map(|p| (p.pid, p.start))
                .collect();
            !roots.is_empty()
        });
        seen_root += usize::from(!roots.is_empty());
        if round == 1 {
            // Until CRIU traces the root, or the root or CRIU is gone (a window of milliseconds:
            // missed, the round is one more like the others).
            let traced = |pid: u32| {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                status.lines().find_map(|l| l.strip_prefix("TracerPid:")).is_some_and(|v| v.trim() != "0")
            };
            let criu = crate::job::scan_procs().into_iter().find(|p| !p.dead && p.ppid == keeper && p.comm == "criu").map(|p| p.pid);
            let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
            seen_traced = roots.first().zip(criu).is_some_and(|(&(pid, _), criu)| {
                let t = std::time::Instant::now();
                while alive(pid) && alive(criu) && t.elapsed() < LIMIT {
                    if traced(pid) {
                        return true;
                    }
                    std::thread::yield_now();
                }
                false
            });
        }
        r.kill_group();
        let _ = r.wait(LIMIT);
        let alive = || {
            crate::job::scan_procs()
                .into_iter()
                .filter(|p| !p.dead && roots.contains(&(p.pid, p.start)))
                .map(|p| format!("{} ({})", p.pid, p.comm))
                .collect::<Vec<_>>()
        };
        if !wait_for(|| alive().is_empty(), Duration::from_secs(20)) {
            left = alive();
            for (pid, _) in &roots {
                // SAFETY: plain syscall on the pid of the root seen just now, still alive.
                unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
            }
            break;
        }
    }
    t.check("restart-killed-while-restoring-leaves-nothing", seen_root > 0 && left.is_empty(), |_| {
        format!("the restored root was seen {seen_root} time(s) of 3 (killed while CRIU traced it: {seen_traced}); left alive: {}", left.join(", "))
    });
    let mut c = t.m(["restart"]);
    c.arg(&d);
    let o2 = t.p("k2.out");
    let rc = t.to(c, Some(&o2), Some(&t.p("k2.err")), LIMIT);
    let msg = complete(&cat(&[&o1, &o2]), 1, 40);
    t.check("restart-after-killed-restore", rc == 40 % 7 && msg.is_ok(), |t| {
        format!("rc={rc} (want {}) {} {}", 40 % 7, msg.as_ref().err().map(ToString::to_string).unwrap_or_default(), cat(&[&t.p("k2.err")]))
    });
}

/// Polls `cond` each millisecond for at most `LIMIT`.
fn wait_for_mut(mut cond: impl FnMut() -> bool) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < LIMIT {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}
