//! The faults mode: a good epoch 1, then one fault at a time, each of which must give its
//! one-line message and leave epoch 1 restartable with the native output after its cut.
//!
//! - `kill-program`, `kill-keeper`, `kill-coordinator`: a second checkpoint is asked for, and
//!   as soon as CRIU runs under one of the keepers the program of the last rank, the keeper of
//!   the last rank, or the keeper of rank 0 (which hosts the coordinator) is SIGKILLed.
//! - `enospc`: the checkpoint directory is on a tmpfs of its own (mounted and unmounted here),
//!   filled to 256 KiB before the second checkpoint. The job must go on and end as the native
//!   run does (the checkpoint failed after the library was released: it is renewed).
//! - on one stopped job with epochs 1 (continue) and 2 (`--stop`), each undone before the next:
//!   `other-user` (`mpicr status` as nobody), `foreign-dir` (the directory chowned to nobody),
//!   `pid-held` (a process of ours holding the last rank's PID), `truncated-manifest` (epoch
//!   2's MANIFEST.json cut in half), `corrupt-image` (one byte of an image of epoch 2 flipped).
//!
//! Mounting, chown and taking a given PID need root; without it those faults are skipped (and
//! said so). `MPICR_TEST_FAULTS=a,b` runs only the named faults; by default MPICH 4 runs all
//! of them and MPICH 5 `FAULTS_MPICH5`.

use super::{bounded, indent, out_lengths, Ctx, Fault, Launched, Planned, Resume, Trigger, Victim, CMD_GRACE};
use crate::error::Error;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Every fault, in the order they run.
pub(crate) const FAULTS: [&str; 9] =
    ["kill-program", "kill-keeper", "kill-coordinator", "enospc", "other-user", "foreign-dir", "pid-held", "truncated-manifest", "corrupt-image"];

/// What MPICH 5 runs by default: the fault that most depends on the MPI library (the job is
/// torn down while its library is released).
const FAULTS_MPICH5: [&str; 1] = ["kill-program"];

/// What `mpicr checkpoint` says today when a process of the job is SIGKILLed while CRIU dumps:
/// one of these, depending on a race. Either the coordinator hears of the failed dump first
/// (`checkpoint 2 aborted: rank R: criu dump failed ...`, seen with the program killed), or the
/// job is torn down first and the coordinator goes away without an answer (seen for all three
/// victims).
const KILLED: [&str; 2] = ["the coordinator closed the connection before answering", "checkpoint 2 aborted: rank "];

/// Size of the tmpfs of the `enospc` fault (only what is written uses memory).
const TMPFS_SIZE: &str = "256m";

fn selected(flavor: crate::Flavor) -> Result<Vec<&'static str>, Error> {
    let list = std::env::var("MPICR_TEST_FAULTS").unwrap_or_default();
    let names: Vec<&str> = list.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if names.is_empty() {
        return Ok(match flavor {
            crate::Flavor::Mpich4 => FAULTS.to_vec(),
            crate::Flavor::Mpich5
            | crate::Flavor::Impi
            | crate::Flavor::OmpiOnMpich4
            | crate::Flavor::AbiOnMpich4
            | crate::Flavor::AbiOnMpich5
            | crate::Flavor::Ompi5
            | crate::Flavor::Ompi4 => FAULTS_MPICH5.to_vec(),
        });
    }
    for n in &names {
        if !FAULTS.contains(n) {
            return Err(Error::Invalid(format!("MPICR_TEST_FAULTS: unknown fault `{n}` (faults: {})", FAULTS.join(", "))));
        }
    }
    Ok(FAULTS.iter().copied().filter(|f| names.contains(f)).collect())
}

fn is_root() -> bool {
    // SAFETY: plain syscall.
    unsafe { libc::geteuid() == 0 }
}

/// A fault and its verdict: the line that said it, or what went wrong.
type Checked = (&'static str, Result<String, Error>);

const NEEDS_ROOT: [&str; 4] = ["enospc", "foreign-dir", "other-user", "pid-held"];
const ON_STOPPED_JOB: [&str; 5] = ["other-user", "foreign-dir", "pid-held", "truncated-manifest", "corrupt-image"];

impl Ctx<'_> {
    pub(super) fn faults(&mut self) -> Result<(), Error> {
        let mut want = selected(self.case.flavor)?;
        if !is_root() {
            let skipped: Vec<&str> = want.iter().copied().filter(|f| NEEDS_ROOT.contains(f)).collect();
            if !skipped.is_empty() {
                println!("  {}: skipped (they need root): {}", self.case.id(), skipped.join(", "));
            }
            want.retain(|f| !NEEDS_ROOT.contains(f));
        }
        let mut results: Vec<Checked> = Vec::new();
        for (name, victim) in [("kill-program", Victim::Program), ("kill-keeper", Victim::Keeper), ("kill-coordinator", Victim::Coordinator)] {
            if want.contains(&name) {
                let r = self.kill_fault(name, victim);
                results.push((name, r));
            }
        }
        if want.contains(&"enospc") {
            let r = self.enospc_fault();
            results.push(("enospc", r));
        }
        let on_stopped: Vec<&'static str> = want.iter().copied().filter(|f| ON_STOPPED_JOB.contains(f)).collect();
        if !on_stopped.is_empty() {
            match self.stopped_job_faults(&on_stopped) {
                Ok(rs) => results.extend(rs),
                Err(e) => results.push(("stopped job", Err(e))),
            }
        }
        for (name, r) in &results {
            match r {
                Ok(line) => self.story.push(format!("fault {name}: ok: `{line}`")),
                Err(e) => self.story.push(format!("fault {name}: FAILED: {}", e.to_string().lines().next().unwrap_or(""))),
            }
        }
        let failed: Vec<&Checked> = results.iter().filter(|r| r.1.is_err()).collect();
        if failed.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = failed.iter().map(|r| r.0).collect();
        let mut s = format!("{} of {} faults failed: {}", failed.len(), results.len(), names.join(", "));
        for (name, r) in failed {
            s += &format!("\n  {name}: {}", r.as_ref().unwrap_err().to_string().trim_end());
        }
        Err(Error::Check(s))
    }

    /// A job that takes epoch 1 at a pause, goes on, and meets `fault` in its second checkpoint:
    /// the launch, the cut of epoch 1, and what `mpicr checkpoint` said of the second.
    fn faulted_second_checkpoint(&mut self, label: &str, fault: Fault) -> Result<(Launched, Vec<u64>, String), Error> {
        let pause = self.pause_steps(1);
        let mut second = Planned::new(Trigger::After(Duration::ZERO), false);
        second.fault = fault;
        let mut job = self.run_job(&pause);
        if matches!(fault, Fault::Kill(_)) {
            // Struck as CRIU appears: that is as the dump begins only when each dump's CRIU
            // starts when due. Started ahead (README), it waits long before, and a kill then lands
            // anywhere in the checkpoint, a dump that already finished included.
            job.rank_env.push(("MPICR_DUMP_AHEAD".into(), "0".into()));
        }
        let l = self.launch(label, job, vec![Planned::new(Trigger::Pause, false), second], Resume::Pauses)?;
        let cut = l.taken.first().and_then(|t| t.cut.clone()).ok_or_else(|| Error::Check("epoch 1 was not taken".into()))?;
        let said = l.answers.first().cloned().ok_or_else(|| Error::Check("the checkpoint with the fault was not asked for".into()))?;
        Ok((l, cut, said))
    }

    /// A checkpoint after epoch 1 during which `victim` is SIGKILLed once CRIU runs.
    fn kill_fault(&mut self, name: &str, victim: Victim) -> Result<String, Error> {
        self.ckdir = self.scratch.root().join(format!("ckpt-{name}"));
        let (l, cut, said) = self.faulted_second_checkpoint(&format!("{name}-run"), Fault::Kill(victim))?;
        let said = &said;
        let line = expect_line(said, KILLED[0]).or_else(|_| expect_line(said, KILLED[1]))?;
        self.story.push(format!("{name}-run: the job ended with {}", l.out.status));
        self.check_started(&format!("{name}-run"), &l.out)?;
        self.check_epochs(&[1])?;
        let after = self.restart(&format!("{name}-restart"), None, Resume::First)?;
        self.check_remainder(&format!("restart after {name}"), &cut, &after)?;
        Ok(line)
    }

    /// The checkpoint directory on a small tmpfs, full at the second checkpoint.
    fn enospc_fault(&mut self) -> Result<String, Error> {
        let mnt = self.scratch.root().join("tmpfs");
        let mount = Tmpfs::mount(&mnt, TMPFS_SIZE)?;
        self.fill_dir = Some(mnt.clone());
        self.ckdir = mnt.join("ckpt");
        let r = (|| {
            let (l, cut, said) = self.faulted_second_checkpoint("enospc-run", Fault::Fill)?;
            let said = &said;
            let line = expect_line(said, "checkpoint 2 aborted: rank ")?;
            if !said.contains("No space left on device") {
                return Err(Error::Check(format!("the aborted checkpoint does not say `No space left on device`:\n{}", indent(said))));
            }
            // A failed checkpoint leaves the job running: it must end as the native run does.
            self.story.push(format!("enospc-run: the job ended with {}", l.out.status));
            if !l.out.status.success() {
                self.check_started("enospc-run", &l.out)?;
                return Err(Error::Check(format!("the job did not go on after the aborted checkpoint: it ended with {}", l.out.status)));
            }
            if let Some(d) = crate::compare(self.oracle, &l.out) {
                return Err(Error::Mismatch(format!("the job went on after the aborted checkpoint, but its output differs from the native run: {d}")));
            }
            self.check_epochs(&[1])?;
            let after = self.restart("enospc-restart", None, Resume::First)?;
            self.check_remainder("restart after ENOSPC", &cut, &after)?;
            Ok(line)
        })();
        self.fill_dir = None;
        let unmounted = mount.unmount();
        let line = r?;
        unmounted?;
        Ok(line)
    }

    /// One job with epoch 1 at a pause (the job goes on) and epoch 2 at a later one (--stop);
    /// each fault is applied, checked, undone, and followed by a restart of epoch 1.
    fn stopped_job_faults(&mut self, faults: &[&'static str]) -> Result<Vec<Checked>, Error> {
        self.ckdir = self.scratch.root().join("ckpt-stopped");
        let pauses = self.pause_steps(2);
        let l = self.first_run(&pauses, vec![Planned::new(Trigger::Pause, false), Planned::new(Trigger::Pause, true)])?;
        self.check_prefix("run", &l.out)?;
        let cut1 = l.taken.first().and_then(|t| t.cut.clone()).ok_or_else(|| Error::Check("epoch 1 has no recorded cut".into()))?;
        let cut2 = out_lengths(&l.out);
        self.check_epochs(&[1, 2])?;
        let mut results = Vec::new();
        for &f in faults {
            let r = self.stopped_job_fault(f, &cut1, &cut2);
            let broken = r.is_err();
            results.push((f, r));
            if broken && self.check_epochs(&[1, 2]).is_err() {
                // a fault that could not be undone: the others would not mean anything
                break;
            }
        }
        Ok(results)
    }

    fn stopped_job_fault(&mut self, fault: &str, cut1: &[u64], cut2: &[u64]) -> Result<String, Error> {
        let ckdir = self.ckdir.clone();
        let last = self.ranks() - 1;
        let epoch2 = ckdir.join("epoch-000002");
        let line = match fault {
            "other-user" => {
                let (ok, text) = bounded(
                    Command::new("setpriv").args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]).arg(&self.mpicr).arg("status").arg(&ckdir),
                    CMD_GRACE,
                );
                let want = format!("cannot read the job in {}: permission denied", ckdir.display());
                if ok {
                    return Err(Error::Check(format!("`mpicr status` as nobody succeeded:\n{}", indent(&text))));
                }
                let line = expect_line(&text, &want)?;
                self.story.push(format!("other-user: `mpicr status` as nobody said `{line}`"));
                line
            }
            "foreign-dir" => {
                let nobody = uid_of("nobody")?;
                chown_r(&ckdir, &nobody.to_string())?;
                let want = format!("checkpoint directory {} is owned by uid {nobody}, not by you", ckdir.display());
                let r = self.bad_restart("foreign-dir", self.ranks(), &ckdir, None, &want);
                // SAFETY: plain syscall.
                let me = unsafe { libc::geteuid() };
                chown_r(&ckdir, &me.to_string())?;
                r?
            }
            "pid-held" => {
                let rank_json = epoch2.join(format!("rank-{last}")).join("rank.json");
                let text = fs::read_to_string(&rank_json).map_err(Error::io("read", &rank_json))?;
                let pid = json_number(&text, "pid").ok_or_else(|| Error::Check(format!("{} has no pid", rank_json.display())))?;
                let holder = PidHolder::take(pid as libc::pid_t)?;
                self.story.push(format!("pid-held: process {} holds rank {last}'s PID", holder.0));
                let r = if in_pid_namespace(&text) {
                    // Restored in a PID namespace of its own, the rank's PIDs do not clash
                    // with ours: the restart of the latest epoch must succeed.
                    self.restart("pid-held-restart", None, Resume::First)
                        .and_then(|after| self.check_remainder("restart despite the held PID", cut2, &after))
                        .map(|()| format!("restarted epoch 2 although PID {pid} is held (pid namespace)"))
                } else {
                    // Without a PID namespace (MPICR_PIDNS=0, or no right to create one) the
                    // clash is refused clearly.
                    let want = format!("cannot restore rank {last}: its process ids are in use by live processes: {pid} (");
                    self.bad_restart("pid-held", self.ranks(), &ckdir, None, &want)
                };
                drop(holder);
                r?
            }
            "truncated-manifest" => {
                let m = epoch2.join("MANIFEST.json");
                let orig = fs::read(&m).map_err(Error::io("read", &m))?;
                fs::write(&m, &orig[..orig.len() / 2]).map_err(Error::io("truncate", &m))?;
                let want = "the manifest of epoch 2 (";
                let r = self.bad_restart("truncated-manifest-epoch2", self.ranks(), &ckdir, Some(2), want).and_then(|line| {
                    if line.contains("is corrupt") {
                        Ok(line)
                    } else {
                        Err(Error::Check(format!("`restart --epoch 2` does not say the manifest is corrupt: `{line}`")))
                    }
                });
                // without --epoch: a warning, and epoch 1 restarts
                let r = r.and_then(|line| {
                    let after = self.restart("truncated-manifest-restart", None, Resume::First)?;
                    let said: String = after.stderr.iter().map(|e| String::from_utf8_lossy(e).into_owned()).collect();
                    let warning = "warning: skipping epoch 2: its manifest (";
                    let w = said.lines().find(|l| l.contains(warning) && l.contains("using epoch 1"));
                    let Some(w) = w else {
                        return Err(Error::Check(format!("the restart without --epoch did not warn `{warning}... using epoch 1`; stderr:\n{}", indent(&said))));
                    };
                    self.story.push(format!("truncated-manifest-restart: `{}`", w.trim()));
                    self.check_remainder("restart past the truncated manifest", cut1, &after)?;
                    Ok(line)
                });
                fs::write(&m, &orig).map_err(Error::io("put back", &m))?;
                return r;
            }
            "corrupt-image" => {
                let rdir = epoch2.join(format!("rank-{last}"));
                let file = largest_file(&rdir)?;
                let mut bytes = fs::read(&file).map_err(Error::io("read", &file))?;
                let at = bytes.len() / 2;
                bytes[at] ^= 0xff;
                fs::write(&file, &bytes).map_err(Error::io("write", &file))?;
                self.story.push(format!("corrupt-image: flipped byte {at} of {}", file.display()));
                let want = format!("image file {} is corrupt (checksum mismatch)", file.display());
                let r = self.bad_restart("corrupt-image", self.ranks(), &ckdir, None, &want);
                bytes[at] ^= 0xff;
                fs::write(&file, &bytes).map_err(Error::io("write", &file))?;
                r?
            }
            f => return Err(Error::Check(format!("unknown fault {f}"))),
        };
        let after = self.restart(&format!("{fault}-epoch1"), Some(1), Resume::First)?;
        self.check_remainder(&format!("restart --epoch 1 after {fault}"), cut1, &after)?;
        Ok(line)
    }

    /// Each rank's output of a launch that ended early is a start of its native output.
    fn check_started(&self, label: &str, out: &crate::JobOutput) -> Result<(), Error> {
        for (r, (native, got)) in self.oracle.stdout.iter().zip(&out.stdout).enumerate() {
            if !native.starts_with(got) {
                let end = native.len().min(got.len());
                let d = crate::diff::line_diff(&native[..end], got).unwrap_or_default();
                return Err(Error::Mismatch(format!(
                    "{label}: rank {r}'s output is not the start of its native output\nrank {r} stdout (- native, + {label}):\n{d}"
                )));
            }
        }
        Ok(())
    }
}

/// The first line of `said`, which must contain `want`.
fn expect_line(said: &str, want: &str) -> Result<String, Error> {
    let first = said.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    if first.contains(want) {
        Ok(first.to_string())
    } else {
        Err(Error::Check(format!("expected a message containing `{want}`, got:\n{}", indent(said))))
    }
}

/// The number after `"key":` in a JSON text (the first one).
fn json_number(text: &str, key: &str) -> Option<u64> {
    let at = text.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// Whether a rank.json says the program ran in a PID namespace of its own (`"pidns": true`):
/// its restore then makes a new namespace and needs none of its old ids free.
fn in_pid_namespace(text: &str) -> bool {
    let Some(at) = text.find("\"pidns\"") else {
        return false;
    };
    text[at + "\"pidns\"".len()..].trim_start().strip_prefix(':').is_some_and(|v| v.trim_start().starts_with("true"))
}

fn uid_of(user: &str) -> Result<u32, Error> {
    let c = std::ffi::CString::new(user).map_err(|e| Error::Invalid(format!("user {user:?}: {e}")))?;
    // SAFETY: getpwnam returns a pointer to static storage or null; read at once.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return Err(Error::Missing(format!("no user {user}")));
    }
    // SAFETY: non-null, just returned.
    Ok(unsafe { (*pw).pw_uid })
}

fn chown_r(dir: &Path, owner: &str) -> Result<(), Error> {
    let out = Command::new("chown").arg("-R").arg(owner).arg(dir).output().map_err(Error::spawn("chown"))?;
    if !out.status.success() {
        return Err(Error::Command(format!("chown -R {owner} {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(())
}

fn largest_file(dir: &Path) -> Result<PathBuf, Error> {
    fs::read_dir(dir)
        .map_err(Error::io("read", &dir))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| e.file_name().to_string_lossy().ends_with(".img"))
        .max_by_key(|e| e.metadata().map_or(0, |m| m.len()))
        .map(|e| e.path())
        .ok_or_else(|| Error::Check(format!("no image file in {}", dir.display())))
}

/// A tmpfs mounted for one fault; unmounted (and its mount point removed) by `unmount` or on
/// drop.
struct Tmpfs {
    path: PathBuf,
    mounted: bool,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Result<Tmpfs, Error> {
        fs::create_dir_all(path).map_err(Error::io("create", &path))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},mode=0700"))
            .arg("mpicr-test")
            .arg(path)
            .output()
            .map_err(Error::spawn("mount"))?;
        if !out.status.success() {
            let _ = fs::remove_dir(path);
            return Err(Error::Command(format!("mount -t tmpfs on {} failed: {}", path.display(), String::from_utf8_lossy(&out.stderr).trim())));
        }
        Ok(Tmpfs { path: path.to_path_buf(), mounted: true })
    }

    fn unmount(mut self) -> Result<(), Error> {
        self.release()
    }

    fn release(&mut self) -> Result<(), Error> {
        if !self.mounted {
            return Ok(());
        }
        self.mounted = false;
        let mut last = String::new();
        for _ in 0..50 {
            match Command::new("umount").arg(&self.path).output() {
                Ok(o) if o.status.success() => {
                    let _ = fs::remove_dir(&self.path);
                    return Ok(());
                }
                Ok(o) => last = String::from_utf8_lossy(&o.stderr).trim().to_string(),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // still busy: detach it so that nothing stays mounted, and say so
        let _ = Command::new("umount").arg("-l").arg(&self.path).output();
        let _ = fs::remove_dir(&self.path);
        Err(Error::Command(format!("umount {} failed ({last}); detached it lazily", self.path.display())))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// A child process of ours created with a given PID (clone3 with `set_tid`, which needs
/// CAP_SYS_ADMIN), doing nothing until it is killed on drop.
struct PidHolder(libc::pid_t);

impl PidHolder {
    fn take(pid: libc::pid_t) -> Result<PidHolder, Error> {
        #[repr(C)]
        #[derive(Default)]
        struct CloneArgs {
            flags: u64,
            pidfd: u64,
            child_tid: u64,
            parent_tid: u64,
            exit_signal: u64,
            stack: u64,
            stack_size: u64,
            tls: u64,
            set_tid: u64,
            set_tid_size: u64,
            cgroup: u64,
        }
        let tid = [pid];
        let args = CloneArgs { exit_signal: libc::SIGCHLD as u64, set_tid: tid.as_ptr() as u64, set_tid_size: 1, ..Default::default() };
        // SAFETY: clone3 without CLONE_VM is a fork: the child gets a copy of this process
        // and only makes raw system calls (no allocation, no locks) until it is killed.
        let r = unsafe { libc::syscall(libc::SYS_clone3, &args as *const CloneArgs, std::mem::size_of::<CloneArgs>()) };
        if r == 0 {
            // SAFETY: raw system calls in the child.
            unsafe {
                libc::syscall(libc::SYS_prctl, libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                loop {
                    libc::syscall(libc::SYS_pause);
                }
            }
        }
        if r < 0 {
            return Err(Error::Check(format!("cannot create a process with PID {pid}: {}", std::io::Error::last_os_error())));
        }
        Ok(PidHolder(r as libc::pid_t))
    }
}

impl Drop for PidHolder {
    fn drop(&mut self) {
        // SAFETY: our own unreaped child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_json_fields() {
        let t = r#"{ "format": 1, "pid": 4242, "tids": [4242, 4243] }"#;
        assert_eq!(json_number(t, "pid"), Some(4242));
        assert!(!in_pid_namespace(t));
        assert!(in_pid_namespace(r#"{ "pid": 1, "pidns": true }"#));
        assert!(!in_pid_namespace(r#"{ "pid": 1, "pidns": false }"#));
    }

    #[test]
    fn fault_selection() {
        if std::env::var_os("MPICR_TEST_FAULTS").is_none() {
            assert_eq!(selected(crate::Flavor::Mpich4).unwrap(), FAULTS.to_vec());
        }
        assert_eq!(expect_line("\n mpicr: x y\nmore", "x y").unwrap(), "mpicr: x y");
        assert!(expect_line("mpicr: a\nx y", "x y").is_err());
    }
}
