//! Security: images private under any umask, signed manifests, foreign-owned or open
//! directories refused, unreadable jobs reported as such, strangers' connections bounded.

use super::{cat, grep, json_num, tail, CaseFn, LIMIT, T};
use std::fs;
use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

pub fn cases() -> Vec<CaseFn> {
    vec![
        CaseFn {
            name: "security-images",
            cases: &["security-images-private", "security-modified-manifest-refused", "security-corrupt-newest-reported", "security-restart-foreign-dir"],
            run: images,
        },
        CaseFn {
            name: "security-dirs",
            cases: &[
                "security-run-foreign-dir",
                "security-checkpoint-foreign-dir",
                "security-run-open-dir",
                "security-status-unreadable-dir",
                "security-status-unreadable-coordinator",
            ],
            run: dirs,
        },
        CaseFn { name: "coord-strangers", cases: &["coord-strangers-bounded"], run: strangers },
    ]
}

/// Every file under `dir` but symlinks with a group or other permission bit
/// (`find DIR ! -type l -perm /077`).
fn loose_files(dir: &Path, out: &mut Vec<String>) {
    let Ok(md) = fs::symlink_metadata(dir) else {
        return;
    };
    if md.file_type().is_symlink() {
        return;
    }
    if md.mode() & 0o077 != 0 {
        out.push(dir.display().to_string());
    }
    if md.is_dir() {
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.flatten() {
                loose_files(&e.path(), out);
            }
        }
    }
}

fn count_named(dir: &Path, pred: &dyn Fn(&str) -> bool) -> usize {
    let mut n = 0;
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                n += count_named(&p, pred);
            } else if pred(&e.file_name().to_string_lossy()) {
                n += 1;
            }
        }
    }
    n
}

/// `chown -R UID PATH`
fn chown_r(path: &Path, uid: u32) {
    let _ = std::os::unix::fs::lchown(path, Some(uid), None);
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        if let Ok(rd) = fs::read_dir(path) {
            for e in rd.flatten() {
                chown_r(&e.path(), uid);
            }
        }
    }
}

/// The uid and gid of a user or group name (`id -u nobody`, `nogroup`).
pub fn user_id(name: &str) -> Option<(u32, u32)> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getpwnam returns a pointer to static storage or null; read at once.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: non-null, just returned.
    Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

fn my_uid() -> u32 {
    // SAFETY: plain syscall.
    unsafe { libc::getuid() }
}

fn images(t: &mut T) {
    if !t.require(&[t.env.criu_ok], "no criu") {
        return;
    }
    let d = t.p("sec");
    // Under umask 000 every file would be world-readable unless mpicr (and CRIU under it) says
    // otherwise.
    let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
    c.arg(&d).arg("--").arg(t.env.bin("counter")).arg("60");
    // SAFETY: umask is async-signal-safe; it only affects the child.
    unsafe {
        c.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let mut job = t.spawn(c, Some(&t.p("sec1.out")), Some(&t.p("sec1.err")));
    let (mut rcs, r1) = t.ckpt(&d, &["--timeout", "18446744073709551615s"]);
    let mut r2 = String::new();
    if rcs == 0 {
        (rcs, r2) = t.ckpt(&d, &["--stop"]);
    }
    job.wait(Duration::from_secs(120));
    let mut loose = Vec::new();
    loose_files(&d, &mut loose);
    let nimg = count_named(&d, &|n| n.starts_with("pages-") && n.ends_with(".img"));
    let good = rcs == 0 && loose.is_empty() && nimg >= 2 && d.join("job.key").is_file();
    t.check("security-images-private", good, |_t| format!("rc={rcs} {r1} {r2}; group/other-accessible: {} ({nimg} images)", loose.join("\n")));

    // A modified manifest is refused by name; without --epoch the older epoch is used, with a
    // warning.
    let manifest = d.join("epoch-000002/MANIFEST.json");
    let backup = fs::read(&manifest).unwrap_or_default();
    let text = String::from_utf8_lossy(&backup).into_owned();
    let modified = match text.find("\"total_bytes\": ") {
        Some(i) => {
            let at = i + "\"total_bytes\": ".len();
            format!("{}1{}", &text[..at], &text[at..])
        }
        None => text.clone(),
    };
    let _ = fs::write(&manifest, modified);
    let mut c = t.m(["restart", "--epoch", "2"]);
    c.arg(&d);
    let (rc, out) = t.out(c, LIMIT);
    let good = rc != 0 && grep("manifest of epoch 2 .*signature does not match", &out);
    t.check("security-modified-manifest-refused", good, |_t| format!("rc={rc}: {out}"));
    let mut c = t.m(["restart"]);
    c.arg(&d);
    let rc = t.to(c, Some(&t.p("sec2.out")), Some(&t.p("sec2.err")), LIMIT);
    let err = cat(&[&t.p("sec2.err")]);
    let good = rc == 4 && grep("warning: skipping epoch 2: its manifest .* is corrupt", &err) && tail(&t.p("sec2.out"), 1).contains("tick 60");
    t.check("security-corrupt-newest-reported", good, |_t| format!("rc={rc}: {err}"));
    let _ = fs::write(&manifest, &backup);

    // Another user's directory (the images could be swapped under root's feet) is refused.
    let Some((nobody, _)) = user_id("nobody") else {
        return t.bad("security-restart-foreign-dir", "no user nobody");
    };
    chown_r(&d, nobody);
    let mut c = t.m(["restart"]);
    c.arg(&d);
    let (rc, out) = t.out(c, LIMIT);
    chown_r(&d, my_uid());
    let want = format!("checkpoint directory {} is owned by uid {nobody}, not by you", d.display());
    let good = rc == 125 && out.contains(&want) && out.lines().count() == 1;
    t.check("security-restart-foreign-dir", good, |_t| format!("rc={rc}: {out}"));
    let _ = fs::remove_dir_all(&d);
}

fn dirs(t: &mut T) {
    let Some((nobody, _)) = user_id("nobody") else {
        return t.skip_rest("no user nobody");
    };
    let nogroup = user_id("nogroup").map(|g| g.1);
    let foreign = t.p("foreign");
    let _ = fs::create_dir(&foreign);
    let _ = std::os::unix::fs::chown(&foreign, Some(nobody), None);
    let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
    c.arg(&foreign).args(["--", "true"]);
    let (rc, out) = t.out(c, LIMIT);
    let empty = fs::read_dir(&foreign).is_ok_and(|mut d| d.next().is_none());
    let good = rc == 125 && out.contains(&format!("owned by uid {nobody}, not by you")) && empty;
    t.check("security-run-foreign-dir", good, |_t| format!("rc={rc}: {out}"));

    let mut c = t.m(["checkpoint"]);
    c.arg(&foreign);
    let (rc, out) = t.out(c, LIMIT);
    t.check("security-checkpoint-foreign-dir", rc == 1 && out.contains("owned by uid"), |_t| out.clone());

    let open = t.p("open");
    let _ = fs::create_dir(&open);
    let _ = fs::set_permissions(&open, fs::Permissions::from_mode(0o777));
    let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
    c.arg(&open).args(["--", "true"]);
    let (rc, out) = t.out(c, LIMIT);
    let want = format!("{} is writable by group or others (mode 0777)", open.display());
    t.check("security-run-open-dir", rc == 125 && out.contains(&want), |_t| format!("rc={rc}: {out}"));

    // status by a user who cannot read the job says so (instead of "running: no").
    let p = t.p("pub");
    let _ = fs::create_dir(&p);
    let _ = fs::set_permissions(&p, fs::Permissions::from_mode(0o711));
    // the function's scratch directory must let nobody through to it
    let _ = fs::set_permissions(&t.dir, fs::Permissions::from_mode(0o711));
    let _ = fs::set_permissions(&t.env.top, fs::Permissions::from_mode(0o711));
    let ck = p.join("ck");
    let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
    c.arg(&ck).args(["--", "true"]);
    t.to(c, None, None, LIMIT);
    let as_nobody = |t: &T| {
        let mut c = t.cmd("setpriv");
        c.arg(format!("--reuid={nobody}"));
        if let Some(g) = nogroup {
            c.arg(format!("--regid={g}"));
        } else {
            c.arg("--regid=nogroup");
        }
        c.arg("--clear-groups").arg(&t.env.m).arg("status").arg(&ck);
        t.out(c, LIMIT)
    };
    let (rc, out) = as_nobody(t);
    let want = format!("cannot read the job in {}: permission denied", ck.display());
    t.check("security-status-unreadable-dir", rc == 1 && out.contains(&want), |_t| format!("rc={rc}: {out}"));
    // An old-style directory: the job is readable, the coordinator file is not.
    let _ = fs::set_permissions(&ck, fs::Permissions::from_mode(0o755));
    let _ = fs::set_permissions(ck.join("job.json"), fs::Permissions::from_mode(0o644));
    let _ = fs::write(ck.join("coordinator.json"), "{}\n");
    let _ = fs::set_permissions(ck.join("coordinator.json"), fs::Permissions::from_mode(0o600));
    let (rc, out) = as_nobody(t);
    let good = rc == 0 && grep("running: *unknown: cannot read the job's coordinator file", &out);
    t.check("security-status-unreadable-coordinator", good, |_t| format!("rc={rc}: {out}"));
    let _ = fs::remove_dir_all(&p);
}

/// Strangers holding connections open cannot lock the job out: each gets the handshake
/// deadline, and past the cap of unauthenticated connections the next ones wait; a real client
/// gets through.
fn strangers(t: &mut T) {
    if !t.require(&[t.env.criu_ok], "no criu") {
        return;
    }
    let d = t.p("strangers");
    let mut c = t.m(["run", "--no-mpi", "--ckpt-dir"]);
    c.arg(&d).arg("--").arg(t.env.bin("counter")).arg("600");
    let mut job = t.spawn(c, None, Some(&t.p("st.err")));
    t.wait_coordinator(&d, false);
    let coord = fs::read_to_string(d.join("coordinator.json")).unwrap_or_default();
    let port = json_num(&coord, "port").unwrap_or(0) as u16;
    let mut idle = Vec::new();
    let mut out = String::new();
    for _ in 0..80 {
        match TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(30)) {
            Ok(s) => idle.push(s),
            Err(e) => {
                out = format!("connect: {e}");
                break;
            }
        }
    }
    if out.is_empty() {
        let start = Instant::now();
        let mut c = t.m(["checkpoint", "--stop"]);
        c.arg(&d);
        let (rc, so, se) = t.out2(c, Duration::from_secs(50));
        let took = start.elapsed().as_secs_f64();
        let mut closed = 0;
        for s in &mut idle {
            let _ = s.set_read_timeout(Some(Duration::from_secs(15)));
            let mut buf = [0u8; 100];
            loop {
                match s.read(&mut buf) {
                    Ok(0) => {
                        closed += 1;
                        break;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
        // as the bash version's python printed it
        out = format!("rc={rc} took={took:.1} closed={closed} {} {}", so.trim(), se.trim());
    }
    drop(idle);
    let rc = job.wait(Duration::from_secs(120));
    let good = grep("rc=0 .*closed=80 .*epoch: *1", &out) && rc == 0;
    t.check("coord-strangers-bounded", good, |t| format!("rc={rc} {out} {}", cat(&[&t.p("st.err")])));
}
