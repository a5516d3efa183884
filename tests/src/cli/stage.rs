//! Staged checkpoints (`--stage-dir`), incremental ones (`--incremental`) and retention
//! (`--keep N`) on a 2-rank MPI program under the shim: an epoch commits only once its copy
//! from the stage directory is done, `status` shows it staged meanwhile, a job killed during
//! the copy restarts from the previous epoch, `--keep 2` prunes but keeps every parent a kept
//! incremental epoch needs, and a staged epoch restarts like any other; `--compress` pages
//! (zstd) restart too. Where CRIU has no dirty-memory tracking (neither soft-dirty bits nor the
//! write-tracking CRIU of `make deps-incremental`), `--incremental` says so in one line and
//! dumps in full. `incremental-chain-restores`: a program rewriting a tenth of its pages between
//! incremental checkpoints, stopped and restarted from the chain, ends as the uninterrupted run.

use super::{cat, CaseFn, LIMIT, T};
use crate::error::Error;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const TICKS: u32 = 400;

pub fn cases() -> Vec<CaseFn> {
    vec![
        CaseFn {
            name: "stage",
            cases: &[
                "stage-epoch-committed-after-copy",
                "stage-status-shows-staged",
                "stage-interrupted-copy-keeps-previous",
                "incremental-fallback-or-chain",
                "stage-keep-prunes-with-chains",
                "stage-restart-from-staged-epoch",
                "stage-compress-restart",
            ],
            run: stage,
        },
        CaseFn { name: "incremental", cases: &["incremental-chain-restores"], run: incremental_chain },
        CaseFn { name: "lazy-restart", cases: &["lazy-restart", "lazy-restart-fallback"], run: lazy_restart },
    ]
}

/// `mpicr restart --lazy-pages`: a 2-rank MPI program stopped by a checkpoint runs again while
/// CRIU's lazy-pages daemons serve its memory (its MPI library renewed over it); the output of
/// both runs is the uninterrupted run's, and each daemon is reaped with its socket and log
/// removed. Where userfaultfd is not available the restart says so in one line and restores
/// every page up front (the output must still be right).
fn lazy_restart(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4, t.env.shim_built], "needs MPICH 4, criu and the shim") {
        return;
    }
    const N: u32 = 200;
    let d = t.p("ckl");
    let m = t.env.m.clone();
    let mut c = t.mpi(4, 2);
    c.arg(&m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("loop4")).arg(N.to_string());
    let mut job = t.spawn(c, Some(&t.p("l1.out")), Some(&t.p("l1.err")));
    t.wait_coordinator(&d, true);
    let (rc, out) = t.ckpt(&d, &["--stop"]);
    let rc_a = job.wait(LIMIT);
    let mut c = t.mpi(4, 2);
    c.arg(&m).args(["restart", "--lazy-pages", "-v"]).arg(&d);
    let rc_b = t.to(c, Some(&t.p("l2.out")), Some(&t.p("l2.err")), LIMIT);
    let err = cat(&[&t.p("l2.err")]);
    let fell_back = err.lines().filter(|l| l.contains("lazy pages unavailable")).count();
    let served = err.lines().filter(|l| l.contains("lazy pages: every page in after")).count();
    let left: Vec<String> = (0..2)
        .flat_map(|r| ["lazy-pages.socket", "lazy-pages.log"].map(|f| d.join(format!("epoch-000001/rank-{r}")).join(f)))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
    let msg = continuous(&cat(&[&t.p("l1.out"), &t.p("l2.out")]), 2, N);
    let first = ticks(&cat(&[&t.p("l1.out")])).keys().filter(|k| k.1 == 1).count();
    let lazy_ok = (served == 2 && fell_back == 0) || (fell_back == 2 && served == 0);
    let good = rc == 0 && rc_a == 0 && rc_b == 0 && msg.is_ok() && first == 2 && lazy_ok && left.is_empty();
    t.check("lazy-restart", good, |t| {
        format!(
            "ckpt rc={rc} {out}; run {rc_a}, restart {rc_b}; {served} served, {fell_back} fell back; left {left:?}; {} {}",
            msg.as_ref().err().map(ToString::to_string).unwrap_or_default(),
            cat(&[&t.p("l1.err"), &t.p("l2.err")])
        )
    });

    // The same epoch again, with a CRIU whose lazy-pages daemon cannot start: one line, and
    // every page restored up front.
    let wrapper = t.p("criu-no-lazy");
    let real = t.env.root.join(".deps/criu/criu");
    let script = format!("#!/bin/sh\n[ \"$1\" = lazy-pages ] && {{ echo 'no lazy pages here' >&2; exit 1; }}\nexec '{}' \"$@\"\n", real.display());
    let made = std::fs::write(&wrapper, script).is_ok() && std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).is_ok();
    let mut c = t.mpi(4, 2);
    c.env("MPICR_CRIU", &wrapper).env("MPICR_LAZY_PAGES", "1").arg(&m).arg("restart").arg(&d);
    let rc_c = t.to(c, Some(&t.p("l3.out")), Some(&t.p("l3.err")), LIMIT);
    let err = cat(&[&t.p("l3.err")]);
    let fell_back = err.lines().filter(|l| l.contains("lazy pages unavailable: criu lazy-pages ended before it listened")).count();
    let same = ticks(&cat(&[&t.p("l3.out")])) == ticks(&cat(&[&t.p("l2.out")])) && msg.is_ok();
    t.check("lazy-restart-fallback", made && rc_c == 0 && fell_back == 2 && same, |_t| {
        format!("rc={rc_c}, {fell_back} fallback line(s), output as the first restart: {same}; {err}")
    });
}

/// Per rank, how often each tick was printed.
fn ticks(text: &str) -> BTreeMap<(u32, u32), u32> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let [_, r, _, i] = w[..] {
            if let (Ok(r), Ok(i)) = (r.parse(), i.parse()) {
                *m.entry((r, i)).or_insert(0) += 1;
            }
        }
    }
    m
}

/// Every rank printed each tick from its first one here to `last` exactly once.
fn continuous(text: &str, ranks: u32, last: u32) -> Result<(), Error> {
    let m = ticks(text);
    for r in 0..ranks {
        let first = m.keys().filter(|k| k.0 == r).map(|k| k.1).min().ok_or_else(|| Error::Check(format!("rank {r} printed nothing")))?;
        for i in first..=last {
            let n = m.get(&(r, i)).copied().unwrap_or(0);
            if n != 1 {
                return Err(Error::Check(format!("rank {r} tick {i}: {n} times (from tick {first})")));
            }
        }
    }
    Ok(())
}

fn epoch_dirs(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("epoch-")).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Every `parent` link of the remaining epochs leads to a rank directory that exists.
fn broken_parent_links(d: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for e in epoch_dirs(d) {
        for r in 0..2 {
            let rd = d.join(&e).join(format!("rank-{r}"));
            if std::fs::symlink_metadata(rd.join("parent")).is_ok() && !rd.join("parent").join("rank.json").is_file() {
                bad.push(format!("{e}/rank-{r}"));
            }
        }
    }
    bad
}

fn stage(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4, t.env.shim_built], "needs MPICH 4, criu and the shim") {
        return;
    }
    let d = t.p("ck");
    let s = t.p("stage");
    let _ = std::fs::create_dir_all(&s);
    let m = t.env.m.clone();
    let flags = ["--stage-dir", "stage", "--keep", "2", "--incremental"];
    // The copy of epoch 2 waits: the job is killed while it does.
    t.export("MPICR_TEST_STAGE_DELAY", "2:60");
    let mut c = t.mpi(4, 2);
    c.arg(&m).arg("run").args(flags).arg("--ckpt-dir").arg(&d).arg("--").arg(t.env.bin("loop4")).arg(TICKS.to_string());
    let mut job = t.spawn(c, Some(&t.p("a.out")), Some(&t.p("a.err")));
    t.wait_coordinator(&d, true);

    let (rc, out) = t.ckpt(&d, &[]);
    // `.next-dump` is the next dump, started ahead and waiting (README): not a leftover.
    let leftover: Vec<_> = std::fs::read_dir(&s)
        .map(|rd| {
            rd.flatten()
                .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
                .map(|e| e.path())
                .filter(|p| !p.ends_with(".next-dump"))
                .collect()
        })
        .unwrap_or_default();
    let marker = d.join("epoch-000001/rank-0/STAGED").exists() || d.join("epoch-000001/rank-1/STAGED").exists();
    let good = rc == 0 && t.epochs_complete(&d) == 1 && leftover.is_empty() && !marker;
    t.check("stage-epoch-committed-after-copy", good, |t| {
        format!("rc={rc} {out}; left in the stage directory: {leftover:?}; marker {marker}; {}", cat(&[&t.p("a.err")]))
    });

    let (rc, out) = t.ckpt(&d, &["--no-wait"]);
    let until = Instant::now() + Duration::from_secs(20);
    let mut status = String::new();
    while Instant::now() < until {
        let mut c = t.m(["status"]);
        c.arg(&d);
        status = t.stdout_of(c);
        if status.lines().any(|l| l.contains(" staged ") && l.contains("in progress")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let staged = status.lines().any(|l| l.contains(" staged ") && l.contains("in progress"));
    t.check("stage-status-shows-staged", rc == 0 && staged, |_t| format!("rc={rc} {out}; status: {status}"));

    // Killed during the copy: epoch 2 never commits, epoch 1 restarts.
    drop(job);
    // Every process of the job (the keepers outlive mpiexec's process group for a while).
    super::kill_marked(&t.marker);
    let coord = std::fs::read_to_string(d.join("coordinator.json")).unwrap_or_default();
    let cpid = super::json_num(&coord, "pid").unwrap_or(0);
    let gone_by = Instant::now() + Duration::from_secs(10);
    while cpid != 0 && Path::new(&format!("/proc/{cpid}")).exists() && Instant::now() < gone_by {
        std::thread::sleep(Duration::from_millis(100));
    }
    let still = std::fs::read_to_string(format!("/proc/{cpid}/status")).unwrap_or_default().lines().take(3).collect::<Vec<_>>().join("; ");
    let mut c = t.m(["status"]);
    c.arg(&d);
    let status = t.stdout_of(c);
    let mut c = t.mpi(4, 2);
    c.arg(&m).arg("restart").args(flags).arg(&d);
    job = t.spawn(c, Some(&t.p("b.out")), Some(&t.p("b.err")));
    t.wait_coordinator(&d, true);
    let good = status.contains("resumes epoch 1") && !status.lines().any(|l| l.trim_start().starts_with("2 ") && l.contains("complete"));
    t.check("stage-interrupted-copy-keeps-previous", good && still.is_empty(), |_t| format!("coordinator still there: {still}; {status}"));

    let tracking = dirty_tracking(t);
    let err = cat(&[&t.p("a.err")]);
    let lines = err.lines().filter(|l| l.contains("--incremental") && l.contains("full dump")).count();
    let good = if tracking { lines == 0 } else { lines == 1 };
    t.check("incremental-fallback-or-chain", good, |_t| format!("dirty tracking {tracking}, {lines} fallback line(s): {err}"));

    let mut rcs = Vec::new();
    for a in [&[][..], &[][..], &["--stop"][..]] {
        rcs.push(t.ckpt(&d, a).0);
    }
    let rc_b = job.wait(LIMIT);
    let dirs = epoch_dirs(&d);
    let broken = broken_parent_links(&d);
    // 4 and 5 kept; older ones only as parents (never with dirty tracking off).
    let good = rcs == [0, 0, 0]
        && rc_b == 0
        && t.epochs_complete(&d) >= 2
        && dirs.iter().any(|e| e == "epoch-000005")
        && dirs.iter().any(|e| e == "epoch-000004")
        && broken.is_empty()
        && (tracking || dirs.len() == 2);
    t.check("stage-keep-prunes-with-chains", good, |t| {
        format!("checkpoints {rcs:?}, job {rc_b}, epochs {dirs:?}, broken links {broken:?}: {}", cat(&[&t.p("b.err")]))
    });

    // Restarted without the flags: a staged epoch is an epoch like any other.
    let mut c = t.mpi(4, 2);
    c.arg(&m).arg("restart").arg(&d);
    let rc = t.to(c, Some(&t.p("c.out")), Some(&t.p("c.err")), LIMIT);
    let both = cat(&[&t.p("b.out"), &t.p("c.out")]);
    let msg = continuous(&both, 2, TICKS);
    t.check("stage-restart-from-staged-epoch", rc == 0 && msg.is_ok(), |t| {
        format!("rc={rc} {} {}", msg.as_ref().err().map(ToString::to_string).unwrap_or_default(), cat(&[&t.p("c.err")]))
    });

    if std::process::Command::new("zstd").arg("--version").stdout(std::process::Stdio::null()).status().is_ok_and(|s| s.success()) {
        compressed(t, 200);
    } else {
        t.skip("stage-compress-restart", "no zstd tool");
    }
}

/// Soft-dirty bits, or the write-tracking CRIU (this kernel: `make deps-incremental`).
fn dirty_tracking(t: &T) -> bool {
    t.env.root.join(".deps/criu-wt/criu").is_file()
        || std::process::Command::new(t.env.root.join(".deps/criu/criu"))
            .args(["check", "--feature", "mem_dirty_track"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// `dirty` (tests/cli-programs/dirty.c) at 16 MiB a rank: two incremental checkpoints and a
/// third that stops the job, then a restart of that chain; every page is checked and the final
/// sums equal an uninterrupted run's. With dirty tracking, the later epochs link to their parent
/// and write less than the first.
fn incremental_chain(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4, t.env.shim_built], "needs MPICH 4, criu and the shim") {
        return;
    }
    const MIB: &str = "16";
    const N: &str = "80";
    let dirty = t.env.bin("dirty4");
    let mut c = t.mpi(4, 2);
    c.arg(&dirty).args([MIB, N]);
    let rc_n = t.to(c, Some(&t.p("i0.out")), Some(&t.p("i0.err")), LIMIT);
    let sums = |f: &str| -> Vec<String> {
        let mut v: Vec<String> = cat(&[&t.p(f)]).lines().filter(|l| l.contains("verify=")).map(str::to_string).collect();
        v.sort();
        v
    };
    let native = sums("i0.out");
    let d = t.p("cki");
    let m = t.env.m.clone();
    let mut c = t.mpi(4, 2);
    c.arg(&m).args(["run", "--incremental", "--ckpt-dir"]).arg(&d).arg("--").arg(&dirty).args([MIB, N]);
    let mut job = t.spawn(c, Some(&t.p("i1.out")), Some(&t.p("i1.err")));
    t.wait_coordinator(&d, true);
    let mut rcs = Vec::new();
    for a in [&[][..], &[][..], &["--stop"][..]] {
        rcs.push(t.ckpt(&d, a).0);
    }
    let rc_a = job.wait(LIMIT);
    let mut c = t.mpi(4, 2);
    c.arg(&m).arg("restart").arg(&d);
    let rc_b = t.to(c, Some(&t.p("i2.out")), Some(&t.p("i2.err")), LIMIT);
    let restarted = sums("i2.out");
    let pages = |e: u32| -> u64 {
        std::fs::read_dir(d.join(format!("epoch-{e:06}/rank-0")))
            .map(|rd| rd.flatten().filter(|f| f.file_name().to_string_lossy().starts_with("pages-")).filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum())
            .unwrap_or(0)
    };
    let (p1, p3) = (pages(1), pages(3));
    let linked = d.join("epoch-000003/rank-0/parent").exists();
    let tracked = !dirty_tracking(t) || (linked && p3 < p1);
    let good = rc_n == 0
        && native.len() == 2
        && native.iter().all(|l| l.contains("verify=ok"))
        && rcs == [0, 0, 0]
        && rc_a == 0
        && rc_b == 0
        && restarted == native
        && tracked;
    t.check("incremental-chain-restores", good, |t| {
        format!(
            "native {rc_n} {native:?}; checkpoints {rcs:?}, run {rc_a}, restart {rc_b} {restarted:?}; pages of epoch 1: {p1} bytes, epoch 3: {p3} (parent link {linked}); {}",
            cat(&[&t.p("i1.err"), &t.p("i2.err")])
        )
    });
}

/// `--compress`: the pages reach the checkpoint directory as `pages-*.img.zst`; a restart
/// expands them for CRIU and leaves only the compressed ones.
pub(super) fn compressed(t: &mut T, tick_count: u32) {
    let d = t.p("ckz");
    let m = t.env.m.clone();
    let mut c = t.mpi(4, 2);
    c.arg(&m).args(["run", "--stage-dir", "stage", "--compress", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("loop4")).arg(tick_count.to_string());
    let mut job = t.spawn(c, Some(&t.p("z1.out")), Some(&t.p("z1.err")));
    t.wait_coordinator(&d, true);
    let (rc, out) = t.ckpt(&d, &["--stop", "--wait"]);
    let rc_a = job.wait(LIMIT);
    let names = |e: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d.join(e).join("rank-0"))
            .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("pages-")).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    let before = names("epoch-000001");
    let mut c = t.mpi(4, 2);
    c.arg(&m).arg("restart").arg(&d);
    let rc_b = t.to(c, Some(&t.p("z2.out")), Some(&t.p("z2.err")), LIMIT);
    let after = names("epoch-000001");
    let msg = continuous(&cat(&[&t.p("z2.out")]), 2, tick_count);
    let zst = !before.is_empty() && before.iter().all(|n| n.ends_with(".img.zst"));
    let good = rc == 0 && rc_a == 0 && rc_b == 0 && zst && after == before && msg.is_ok();
    t.check("stage-compress-restart", good, |t| {
        format!(
            "ckpt rc={rc} {out}; run {rc_a}, restart {rc_b}; pages {before:?} then {after:?}; {} {}",
            msg.as_ref().err().map(ToString::to_string).unwrap_or_default(),
            cat(&[&t.p("z1.err"), &t.p("z2.err")])
        )
    });
}
