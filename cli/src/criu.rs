//! Running CRIU: dump of the program (sockets to the keeper declared external) and restore
//! (`restore -d`, new sockets and pipes substituted with `--inherit-fd`). CRIU's log stays in the
//! rank's image directory; its last lines are part of every failure message.

use anyhow::{bail, Context, Result};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Unlinked-but-open files up to this size are kept in the image (MPICH keeps a 2 MiB file in
/// /dev/shm; a released lower half may still leave some behind).
pub const GHOST_LIMIT: &str = "64M";

pub struct Criu {
    pub bin: PathBuf,
}

/// What a dump of the program is started with, but the descriptors handed to CRIU: equal specs
/// start the same `criu dump`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpSpec {
    /// The CRIU binary (the write tracker's own build for `--incremental`).
    pub bin: PathBuf,
    /// The root of the dumped tree.
    pub pid: i32,
    /// The program (the root, or its child under a PID namespace): a dump whose root or program
    /// ends is stopped (CRIU may wait for good on a tree that dies under it).
    pub program: i32,
    /// The image directory (log: `dump.log` in it).
    pub dir: PathBuf,
    /// Inodes of unix sockets whose peers stay outside the image (the keeper's ends).
    pub external_unix: Vec<u64>,
    /// The tree stays stopped after the dump (`checkpoint --stop`: nothing the program does
    /// after the dump may happen twice once it is restarted; SIGCONT undoes it on an abort).
    pub leave_stopped: bool,
    /// More options (`incremental`'s `--track-mem`, `--prev-images-dir`).
    pub extra: Vec<String>,
    /// More environment (the write tracker's).
    pub env: Vec<(String, String)>,
}

impl DumpSpec {
    /// Whether a dump started with this spec does what `now` asks: the same but for the
    /// keeper's sockets that closed since (an external socket that is gone is never looked up).
    pub fn same_start(&self, now: &DumpSpec) -> bool {
        let DumpSpec { bin, pid, program, dir, external_unix, leave_stopped, extra, env } = now;
        self.bin == *bin
            && self.pid == *pid
            && self.program == *program
            && self.dir == *dir
            && self.leave_stopped == *leave_stopped
            && self.extra == *extra
            && self.env == *env
            && external_unix.iter().all(|i| self.external_unix.contains(i))
    }

    fn command(&self) -> Result<(Command, PathBuf)> {
        let dir = &self.dir.canonicalize().with_context(|| format!("resolving {}", self.dir.display()))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("dump").arg("-t").arg(self.pid.to_string()).arg("-D").arg(dir).arg("-o").arg("dump.log").arg(log_level("-v3")?);
        cmd.args(dump_flags(&self.external_unix, self.leave_stopped, unprivileged()));
        cmd.args(&self.extra);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        Ok((cmd, dir.join("dump.log")))
    }
}

/// A `criu dump` started ahead, waiting at its gate before it seizes the program.
pub struct PendingDump {
    spec: DumpSpec,
    started: Started,
    gate: crate::dump_gate::Gate,
}

impl PendingDump {
    /// What this dump was started with.
    pub fn spec(&self) -> &DumpSpec {
        &self.spec
    }

    /// Whether its CRIU has ended (it cannot dump any more).
    pub fn ended(&self) -> bool {
        self.started.ended()
    }

    /// Lets the dump seize the program and waits for it to end, as `Criu::dump` does. Failures
    /// name CRIU's log as `shown` (where the caller moves it).
    pub fn go(self, shown: &Path) -> Result<()> {
        let PendingDump { mut started, gate, .. } = self;
        started.shown = shown.to_path_buf();
        // CRIU waits at the gate once it is past its start-up, which takes well under a second.
        match gate.open(started.pid, || started.ended(), GATE_LIMIT) {
            Ok(()) => started.finish(),
            // What CRIU says of itself tells more than the gate.
            Err(crate::dump_gate::NotOpened::CriuEnded) => started.finish().and_then(|()| bail!("criu dump ended before it dumped anything")),
            Err(e) => {
                kill_running(started.pid);
                Err(e).context("starting the dump")
            }
        }
    }

    /// Calls the dump off before it touched the program, and waits (bounded) for CRIU to end,
    /// so that another dump into the same directory finds nothing of this one's running.
    pub fn cancel(self) {
        let PendingDump { started, gate, .. } = self;
        drop(gate);
        end_within(started.pid, &started.status, Duration::from_secs(10));
    }
}

/// How long a dump started ahead may take to reach its gate once it is due.
const GATE_LIMIT: Duration = Duration::from_secs(60);

/// CRIU's log level: `MPICR_CRIU_LOG_LEVEL` (0-4), else `default`. Dumps default to `-v3` (each
/// step, warnings, errors): `-v4` writes a line per run of pages (95,000 for a dump of 512 MiB
/// whose every tenth page changed), ~75 ms more while the program stands still. Restores and
/// the lazy-pages daemon keep `-v4` (a restore's log is what explains a failed restart; at
/// 4 x 512 MiB the restart took as long at `-v2`). `-v4` once also made a race rarer (a keeper
/// killed while CRIU traced the restored tree left both behind), which `restore_guard`'s
/// watcher has closed since.
fn log_level(default: &'static str) -> Result<&'static str> {
    match std::env::var("MPICR_CRIU_LOG_LEVEL").as_deref() {
        Err(_) | Ok("") => Ok(default),
        Ok("0") => Ok("-v0"),
        Ok("1") => Ok("-v1"),
        Ok("2") => Ok("-v2"),
        Ok("3") => Ok("-v3"),
        Ok("4") => Ok("-v4"),
        Ok(v) => bail!("MPICR_CRIU_LOG_LEVEL={v}: CRIU's log levels are 0 to 4"),
    }
}

impl Criu {
    /// `$MPICR_CRIU`, else the install prefix's (`PREFIX/libexec/mpicr/criu` for
    /// `PREFIX/bin/mpicr`), else `.deps/criu/criu` of the source tree the mpicr binary was
    /// built in (`target/release/../../.deps/criu/criu`), else `criu` on PATH.
    pub fn locate() -> Result<Criu> {
        if let Some(p) = std::env::var_os("MPICR_CRIU").filter(|v| !v.is_empty()) {
            let p = PathBuf::from(p);
            if !crate::sys::is_executable(&p) {
                bail!("MPICR_CRIU names {}, which is not an executable file", p.display());
            }
            return Ok(Criu { bin: p });
        }
        if let Some(c) = crate::paths::installed_criu().filter(|c| crate::sys::is_executable(c)) {
            return Ok(Criu { bin: c.canonicalize().unwrap_or(c) });
        }
        if let Some(c) = crate::paths::source_tree_dep("criu/criu") {
            return Ok(Criu { bin: c.canonicalize().unwrap_or(c) });
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        for d in std::env::split_paths(&path) {
            let c = d.join("criu");
            if crate::sys::is_executable(&c) {
                return Ok(Criu { bin: c });
            }
        }
        bail!("criu not found: set MPICR_CRIU, or install it (scripts/deps.sh puts one in .deps/criu, `make install` one in PREFIX/libexec/mpicr)")
    }

    /// Dumps the program as `spec` says, handing CRIU `fds` (descriptor, number in CRIU).
    pub fn dump(spec: &DumpSpec, fds: Vec<(OwnedFd, RawFd)>, timeout: Duration) -> Result<()> {
        let (cmd, log) = spec.command()?;
        Started::spawn(cmd, "dump", &log, timeout, fds, Lifetime::EndsWithKeeper)?.watching(&[spec.pid, spec.program]).finish()
    }

    /// Starts the dump `spec` describes, held before it seizes the program until
    /// `PendingDump::go` (see `dump_gate`).
    pub fn start_dump(spec: &DumpSpec, fds: Vec<(OwnedFd, RawFd)>, timeout: Duration) -> Result<PendingDump> {
        let exe = crate::paths::runnable_exe().context("this binary cannot be run as CRIU's action script")?;
        let gate = crate::dump_gate::Gate::listen()?;
        let (mut cmd, log) = spec.command()?;
        let (k, v) = gate.env();
        cmd.arg("--action-script").arg(exe).env(k, v);
        let started = Started::spawn(cmd, "dump", &log, timeout, fds, Lifetime::EndsWithKeeper)?.watching(&[spec.pid, spec.program]);
        Ok(PendingDump { spec: spec.clone(), started, gate })
    }

    /// Restores the image in `dir` detached (`restore -d`); `inherit` maps resources of the image
    /// (`socket:[INO]`, `pipe:[INO]`) to descriptors of the keeper. Returns the restored pid.
    /// `leave_stopped`: the restored tree stays stopped (SIGCONT lets it run).
    /// `lazy`: the memory is not written in by CRIU but served afterwards through userfaultfd by
    /// the `criu lazy-pages` daemon of `dir` (`start_lazy_pages`), which must be listening.
    pub fn restore(&self, dir: &Path, inherit: Vec<(OwnedFd, String)>, leave_stopped: bool, lazy: bool, timeout: Duration) -> Result<i32> {
        // CRIU changes directory: every path it gets must be absolute.
        let dir = &dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?;
        let pidfile = dir.join("restore.pid");
        let _ = std::fs::remove_file(&pidfile);
        crate::timens::settle_before_restore(dir);
        let mut cmd = Command::new(&self.bin);
        // --restore-sibling: the restored program becomes the keeper's child directly (not
        // CRIU's), so its parent-death signal refers to the keeper and CRIU's exit is harmless.
        cmd.arg("restore").arg("-d").arg("--restore-sibling").arg("-D").arg(dir).arg("-o").arg("restore.log").arg(log_level("-v4")?);
        cmd.arg("--pidfile").arg(&pidfile);
        let mut fds = Vec::new();
        for (next, (fd, res)) in (10..).zip(inherit) {
            cmd.args(restore_inherit_flag(next, &res));
            fds.push((fd, next));
        }
        cmd.args(restore_flags(unprivileged()));
        if leave_stopped {
            cmd.arg("--leave-stopped");
        }
        if lazy {
            cmd.arg("--lazy-pages");
        }
        let lifetime = match crate::restore_guard::criu_options() {
            Some((args, (k, v))) => {
                cmd.args(args).env(k, v);
                Lifetime::FinishesRestore
            }
            None => Lifetime::EndsWithKeeper,
        };
        run(cmd, "restore", &dir.join("restore.log"), timeout, fds, lifetime)?;
        let text = std::fs::read_to_string(&pidfile).with_context(|| format!("criu restore wrote no {}", pidfile.display()))?;
        let _ = std::fs::remove_file(&pidfile);
        text.trim().parse().with_context(|| format!("criu restore wrote a bad pid file: {text:?}"))
    }
}

/// Why lazy pages cannot serve a restore here (one line), or `None`: CRIU must support
/// non-cooperative userfaultfd, and a non-root user needs `vm.unprivileged_userfaultfd=1`.
pub fn lazy_pages_unavailable(criu: &Criu) -> Option<String> {
    if unprivileged() && std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd").is_ok_and(|v| v.trim() == "0") {
        return Some("userfaultfd is for root only here (sysctl vm.unprivileged_userfaultfd=0)".into());
    }
    let mut cmd = Command::new(&criu.bin);
    cmd.args(["check", "--feature", "uffd-noncoop"]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let Ok(mut child) = cmd.spawn() else { return Some(format!("cannot run {}", criu.bin.display())) };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return None,
            Ok(Some(_)) => {
                let out = child.wait_with_output().map(|o| String::from_utf8_lossy(&[o.stdout, o.stderr].concat()).trim().to_string()).unwrap_or_default();
                let line = out.lines().last().unwrap_or("").to_string();
                return Some(format!("criu check --feature uffd-noncoop failed: {line}"));
            }
            Ok(None) if std::time::Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Some("criu check --feature uffd-noncoop did not answer within 10s".into());
            }
        }
    }
}

/// The socket a `criu lazy-pages` daemon listens on, in its image (work) directory.
pub const LAZY_SOCKET: &str = "lazy-pages.socket";
pub const LAZY_LOG: &str = "lazy-pages.log";

/// A `criu lazy-pages` daemon serving the memory of one image directory to the restored tree.
/// It ends by itself once every page is in (or the tree ended); `wait` reaps it, bounded.
pub struct LazyPages {
    pid: i32,
    dir: PathBuf,
    done: std::sync::mpsc::Receiver<std::io::Result<std::process::ExitStatus>>,
}

impl Criu {
    /// Starts the daemon for `dir` and waits (at most `limit`) until it listens.
    pub fn start_lazy_pages(&self, dir: &Path, limit: Duration) -> Result<LazyPages> {
        let dir = dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?;
        let _ = std::fs::remove_file(dir.join(LAZY_SOCKET));
        let mut cmd = Command::new(&self.bin);
        cmd.arg("lazy-pages").arg("-D").arg(&dir).arg("-o").arg(LAZY_LOG).arg(log_level("-v4")?);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let keeper = std::process::id() as libc::pid_t;
        // SAFETY: only prctl, getppid and umask (async-signal-safe) on integers computed before fork.
        unsafe {
            cmd.pre_exec(move || {
                crate::sys::child_set_pdeathsig(keeper)?;
                crate::sys::child_umask(0o077)?;
                Ok(())
            });
        }
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        let mut child = cmd.spawn().with_context(|| format!("starting {} lazy-pages", self.bin.display()))?;
        let pid = child.id() as i32;
        running.push(pid);
        drop(running);
        let (tx, done) = std::sync::mpsc::channel();
        std::thread::Builder::new().name("lazy-pages".into()).spawn(move || {
            crate::sys::wait_exited_no_reap(pid);
            let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
            running.retain(|&p| p != pid);
            let _ = tx.send(child.wait());
        })?;
        let d = LazyPages { pid, dir, done };
        let until = std::time::Instant::now() + limit;
        while !d.dir.join(LAZY_SOCKET).exists() {
            if let Ok(st) = d.done.try_recv() {
                let log = d.dir.join(LAZY_LOG);
                bail!("criu lazy-pages ended before it listened ({}){}", st.map(|s| s.to_string()).unwrap_or_default(), describe_failure("", &log, &log));
            }
            if std::time::Instant::now() >= until {
                d.kill();
                bail!("criu lazy-pages did not listen on {} within {}s", LAZY_SOCKET, limit.as_secs());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(d)
    }
}

impl LazyPages {
    /// Waits (at most `limit`) until the daemon has served every page and exited; its socket
    /// and log are removed then (the log stays after a failure, which the error quotes).
    pub fn wait(self, limit: Duration) -> Result<()> {
        let log = self.dir.join(LAZY_LOG);
        let r = match self.done.recv_timeout(limit) {
            Ok(Ok(st)) if st.success() => Ok(()),
            Ok(st) => Err(anyhow::anyhow!(
                "criu lazy-pages failed ({}){}",
                st.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()),
                describe_failure("", &log, &log)
            )),
            Err(_) => {
                kill_running(self.pid);
                let _ = self.done.recv_timeout(Duration::from_secs(10));
                Err(anyhow::anyhow!("criu lazy-pages had not served every page after {}s and was killed", limit.as_secs()))
            }
        };
        let _ = std::fs::remove_file(self.dir.join(LAZY_SOCKET));
        if r.is_ok() {
            let _ = std::fs::remove_file(&log);
        }
        r
    }

    /// Ends the daemon (a restore that did not happen) and removes its socket.
    pub fn kill(&self) {
        kill_running(self.pid);
        let _ = self.done.recv_timeout(Duration::from_secs(10));
        let _ = std::fs::remove_file(self.dir.join(LAZY_SOCKET));
    }
}

pub fn dump_flags(external_unix: &[u64], leave_stopped: bool, unprivileged: bool) -> Vec<String> {
    let mut v = vec!["--shell-job".to_string(), "--ghost-limit".into(), GHOST_LIMIT.into(), "--file-locks".into()];
    if unprivileged {
        v.push("--unprivileged".into());
    }
    v.push(if leave_stopped { "--leave-stopped" } else { "--leave-running" }.into());
    for ino in external_unix {
        v.push("--external".into());
        v.push(format!("unix[{ino}]"));
    }
    v
}

pub fn restore_flags(unprivileged: bool) -> Vec<String> {
    let mut v = vec!["--shell-job".to_string(), "--file-locks".into()];
    if unprivileged {
        v.push("--unprivileged".into());
    }
    v
}

/// Whether CRIU runs as a non-root user, in its `--unprivileged` mode: it then needs
/// CAP_CHECKPOINT_RESTORE from its file capabilities (`make deps` grants them), traces the
/// program with the user's own ptrace rights, and cannot restore a PID namespace (the program
/// has none: `pidns::available()` is false without CAP_SYS_ADMIN).
pub fn unprivileged() -> bool {
    crate::sys::euid() != 0
}

const CAP_SETPCAP: u32 = 8;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_CHECKPOINT_RESTORE: u32 = 40;

/// What keeps a non-root user's CRIU from working, judged from the file capabilities of the
/// binary (`caps`: permitted set and effective bit, `None` for none), this process's bounding
/// set and `no_new_privs`, or `None` when nothing is missing.
pub fn missing_privilege(bin: &Path, caps: Option<(u64, bool)>, bounding: u64, last_cap: u32, no_new_privs: bool) -> Option<String> {
    let has = |set: u64, c: u32| set & (1u64 << c) != 0;
    let fix = |caps: &str| format!("run `make deps` as root, or `setcap {caps}+ep {}`", bin.display());
    if no_new_privs {
        return Some(format!("this process has no_new_privs set, so the file capabilities of {} (CAP_CHECKPOINT_RESTORE) do not apply: run mpicr outside the sandbox that sets it, or as root", bin.display()));
    }
    let (prm, eff) = caps.unwrap_or((0, false));
    if !(eff && (has(prm, CAP_CHECKPOINT_RESTORE) || has(prm, CAP_SYS_ADMIN))) {
        return Some(format!("{} lacks CAP_CHECKPOINT_RESTORE, which checkpoints by a non-root user need: {}", bin.display(), fix("cap_checkpoint_restore")));
    }
    if !has(bounding, CAP_CHECKPOINT_RESTORE) && !has(bounding, CAP_SYS_ADMIN) {
        return Some(format!(
            "CAP_CHECKPOINT_RESTORE is outside this process's capability bounding set, so {} cannot get it: run the job where it is allowed, or as root",
            bin.display()
        ));
    }
    let full = if last_cap >= 63 { u64::MAX } else { (1u64 << (last_cap + 1)) - 1 };
    if bounding & full != full && !has(prm, CAP_SETPCAP) {
        return Some(format!(
            "{} lacks CAP_SETPCAP, which its restore needs as a non-root user where the capability bounding set is not full (here {:#x}): {}",
            bin.display(),
            bounding,
            fix("cap_checkpoint_restore,cap_setpcap")
        ));
    }
    None
}

/// Checks once per process, before any job state depends on it, that a non-root user's CRIU
/// can dump and restore; the error is one line naming what is missing. Nothing to check as root.
pub fn preflight() -> Result<()> {
    static CHECKED: std::sync::OnceLock<std::result::Result<(), PreflightError>> = std::sync::OnceLock::new();
    if !unprivileged() {
        return Ok(());
    }
    Ok(CHECKED.get_or_init(|| check_unprivileged().map_err(|e| PreflightError(format!("{e:#}")))).clone()?)
}

/// What keeps a non-root user's CRIU from working (one line), kept for the process's later
/// checks.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct PreflightError(String);

fn check_unprivileged() -> Result<()> {
    let criu = Criu::locate()?;
    let status = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let bounding = field("CapBnd:").and_then(|v| u64::from_str_radix(v, 16).ok()).unwrap_or(u64::MAX);
    let no_new_privs = field("NoNewPrivs:").is_some_and(|v| v == "1");
    let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(40);
    // A binary without file capabilities may be a wrapper of a capable one: CRIU's own check
    // says then. With them, what is missing can be named exactly.
    if let Some(caps) = crate::sys::file_caps(&criu.bin).with_context(|| format!("reading the capabilities of {}", criu.bin.display()))? {
        if let Some(why) = missing_privilege(&criu.bin, Some(caps), bounding, last_cap, no_new_privs) {
            bail!("{why}");
        }
    } else if no_new_privs {
        bail!("{}", missing_privilege(&criu.bin, None, bounding, last_cap, true).unwrap_or_default());
    }
    let out =
        Command::new(&criu.bin).args(["check", "--unprivileged"]).stdin(Stdio::null()).output().with_context(|| format!("starting {}", criu.bin.display()))?;
    if !out.status.success() {
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if text.contains("CAP_CHECKPOINT_RESTORE") {
            bail!("{}", missing_privilege(&criu.bin, None, bounding, last_cap, false).unwrap_or_default());
        }
        let first = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with("Warn")).unwrap_or("no output");
        bail!("`{} check --unprivileged` fails ({}): {first}", criu.bin.display(), out.status);
    }
    Ok(())
}

pub fn restore_inherit_flag(fd: RawFd, resource: &str) -> Vec<String> {
    vec!["--inherit-fd".into(), format!("fd[{fd}]:{resource}")]
}

/// Runs CRIU with `fds` placed at the given numbers, bounded by `timeout`.
/// Whether a CRIU may outlive the keeper that started it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lifetime {
    /// Killed with the keeper (parent-death signal, the keeper's process group): a dump.
    EndsWithKeeper,
    /// A guarded restore (`restore_guard`): it runs to its end in a process group of its own,
    /// and its action script ends the restored tree if the keeper is gone by then.
    FinishesRestore,
}

fn run(cmd: Command, what: &'static str, log: &Path, timeout: Duration, fds: Vec<(OwnedFd, RawFd)>, lifetime: Lifetime) -> Result<()> {
    Started::spawn(cmd, what, log, timeout, fds, lifetime)?.finish()
}

/// A CRIU started by `Started::spawn` and not yet waited for.
struct Started {
    pid: i32,
    what: &'static str,
    log: PathBuf,
    timeout: Duration,
    lifetime: Lifetime,
    watcher: Option<i32>,
    children_before: Vec<i32>,
    status: std::sync::mpsc::Receiver<std::io::Result<std::process::ExitStatus>>,
    exited: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stderr: std::sync::mpsc::Receiver<String>,
    /// A dump's: pidfds of the dumped tree's root and program, whose end ends the wait for CRIU.
    watched: Vec<OwnedFd>,
    /// The log as failures name it (where it will be: see `PendingDump::go`).
    shown: PathBuf,
}

impl Started {
    fn spawn(mut cmd: Command, what: &'static str, log: &Path, timeout: Duration, fds: Vec<(OwnedFd, RawFd)>, lifetime: Lifetime) -> Result<Started> {
        let pairs: Vec<(RawFd, RawFd)> = fds.iter().map(|(fd, n)| (fd.as_raw_fd(), *n)).collect();
        // Park sources above the target numbers first.
        let parked: Vec<OwnedFd> = fds
            .iter()
            .map(|(fd, _)| crate::sys::dup_at_least(std::os::fd::AsFd::as_fd(fd), 300))
            .collect::<std::io::Result<_>>()
            .context("duplicating descriptors for criu")?;
        let parked_pairs: Vec<(RawFd, RawFd)> = parked.iter().map(|p| p.as_raw_fd()).zip(pairs.iter().map(|p| p.1)).collect();
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let keeper = std::process::id() as libc::pid_t;
        if lifetime == Lifetime::FinishesRestore {
            cmd.process_group(0);
        }
        // The keeper's children before the restore: a restored root is another (`--restore-sibling`).
        let children_before = if lifetime == Lifetime::FinishesRestore { crate::sys::own_children() } else { Vec::new() };
        // SAFETY: only umask, prctl, getppid and dup2 (async-signal-safe) on integers computed before fork.
        unsafe {
            cmd.pre_exec(move || {
                // A SIGKILLed keeper cannot run `end_running`: a dump must not outlive it.
                if lifetime == Lifetime::EndsWithKeeper {
                    crate::sys::child_set_pdeathsig(keeper)?;
                }
                // Images hold the program's memory: nothing CRIU creates may be readable by others.
                crate::sys::child_umask(0o077)?;
                for &(from, to) in &parked_pairs {
                    crate::sys::child_dup2(from, to)?;
                }
                Ok(())
            });
        }
        // Registered before another thread can end the keeper (see `end_running`).
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        let mut child = cmd.spawn().with_context(|| format!("starting {}", cmd.get_program().to_string_lossy()))?;
        let pid = child.id() as i32;
        running.push(pid);
        drop(running);
        // Started while CRIU is unreaped (the reaping thread below is not yet running).
        let watcher = if lifetime == Lifetime::FinishesRestore { crate::restore_guard::start_watcher(pid, timeout) } else { None };
        drop(fds);
        drop(parked);
        let stderr = child.stderr.take().context("criu: no stderr pipe")?;
        let (tx, status) = std::sync::mpsc::channel();
        let exited = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let exited_set = exited.clone();
        std::thread::spawn(move || {
            // Waited for without reaping, then reaped under the lock: `end_running` never signals
            // a pid that was reaped (and could be reused) meanwhile.
            crate::sys::wait_exited_no_reap(pid);
            exited_set.store(true, std::sync::atomic::Ordering::Release);
            let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
            running.retain(|&p| p != pid);
            let _ = tx.send(child.wait());
        });
        let (etx, erx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut s = String::new();
            let _ = { stderr }.read_to_string(&mut s);
            let _ = etx.send(s);
        });
        Ok(Started {
            pid,
            what,
            log: log.to_path_buf(),
            timeout,
            lifetime,
            watcher,
            children_before,
            status,
            exited,
            stderr: erx,
            watched: Vec::new(),
            shown: log.to_path_buf(),
        })
    }

    /// Waits for CRIU (at most its time limit, counted from now; killed after it): `Ok` when it
    /// succeeded, else what it said and the end of its log.
    fn finish(self) -> Result<()> {
        let Started { pid, what, log, timeout, lifetime, watcher, children_before, status, stderr, watched, shown, .. } = self;
        let until = std::time::Instant::now() + timeout;
        let describe = |err_text: &str| describe_failure(err_text, &log, &shown);
        let got = loop {
            // In short waits while a dumped tree lives: a program killed while CRIU held it
            // left CRIU waiting for good (measured: 1 dump in ~10 with the program SIGKILLed).
            let left = until.saturating_duration_since(std::time::Instant::now());
            let step = if watched.is_empty() { left } else { left.min(Duration::from_millis(50)) };
            match status.recv_timeout(step) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if !left.is_zero() => {
                    let fds: Vec<_> = watched.iter().map(|f| f.as_fd()).collect();
                    if !fds.is_empty() && crate::sys::poll_readable(&fds, Some(Duration::ZERO)).ok().flatten().is_some() {
                        end_within(pid, &status, Duration::ZERO);
                        let err_text = stderr.recv_timeout(Duration::from_secs(1)).unwrap_or_default();
                        bail!("the program ended while criu dumped it; criu was stopped{}", describe(&err_text));
                    }
                }
                r => break r,
            }
        };
        match got {
            Ok(st) => {
                let err_text = stderr.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
                let st = st.context("waiting for criu")?;
                if st.success() {
                    return Ok(());
                }
                bail!("criu {what} failed ({st}){}", describe(&err_text));
            }
            Err(_) => {
                end_within(pid, &status, Duration::ZERO);
                let err_text = stderr.recv_timeout(Duration::from_secs(1)).unwrap_or_default();
                if lifetime == Lifetime::FinishesRestore {
                    // What CRIU had restored is no descendant of CRIU's: end it too.
                    for c in crate::sys::own_children().into_iter().filter(|c| *c != pid && Some(*c) != watcher && !children_before.contains(c)) {
                        crate::keeper::kill_program(c);
                    }
                }
                bail!("criu {what} did not finish within {}s and was killed{}", timeout.as_secs(), describe(&err_text));
            }
        }
    }

    /// Its wait (`finish`) also ends when one of `pids` ends (a dumped tree's root, its program).
    fn watching(mut self, pids: &[i32]) -> Started {
        self.watched = pids.iter().filter_map(|&p| crate::sys::pidfd_open(p).ok()).collect();
        self
    }

    /// Whether CRIU has ended (not yet reaped, perhaps: `finish` says how).
    fn ended(&self) -> bool {
        self.exited.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// CRIU processes started and not yet reaped.
static RUNNING: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// Ends every CRIU this process started that still runs, with the helpers it forked. Called
/// before the keeper exits, on every path: a dump still running when its program died (or its
/// job ended) would otherwise outlive the keeper and the launcher.
pub fn end_running() {
    let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    for &pid in running.iter() {
        crate::sys::kill_tree(pid);
    }
}

/// Lets CRIU `pid` end by itself within `grace`, else ends it (`kill_running`) and waits for
/// its status (10 s at most).
fn end_within(pid: i32, status: &std::sync::mpsc::Receiver<std::io::Result<std::process::ExitStatus>>, grace: Duration) {
    if status.recv_timeout(grace).is_err() {
        kill_running(pid);
        let _ = status.recv_timeout(Duration::from_secs(10));
    }
}

/// Ends one CRIU (a deadline passed) and its helpers, if it was not reaped yet.
fn kill_running(pid: i32) {
    let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    if running.contains(&pid) {
        crate::sys::kill_tree(pid);
    }
}

/// What CRIU said on stderr and the end of its `log`, which is named as `shown` (where it is
/// moved to after a dump started ahead).
fn describe_failure(stderr: &str, log: &Path, shown: &Path) -> String {
    let mut s = String::new();
    let stderr = stderr.trim();
    if !stderr.is_empty() {
        s.push_str(&format!("; criu said: {}", stderr.lines().last().unwrap_or("")));
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail = tail_of(&text, 12);
    if !tail.is_empty() {
        s.push_str(&format!("\n  last lines of {}:\n{}", shown.display(), tail));
    }
    if let Some(hint) = changed_file_hint(&text) {
        s.push_str(&format!("\n  {hint}"));
    }
    s
}

/// What a restore that failed because a file the image maps is no longer the one it mapped
/// means for the user (CRIU checks each file's size, and its build-ID when told to; whatever it
/// did not dump is read from the file itself), from the restore's log.
fn changed_file_hint(log: &str) -> Option<String> {
    const MARKERS: [&str; 3] = [" has bad size ", " has bad build-ID", " has bad mode "];
    let line = log.lines().find(|l| l.contains("Error") && MARKERS.iter().any(|m| l.contains(m)))?;
    let path = line.split_once("): File ")?.1;
    let path = MARKERS.iter().find_map(|m| path.split_once(m)).map(|(p, _)| p)?;
    Some(format!(
        "/{path} changed since the checkpoint: a restart needs the same program, libraries and mpicr \
         as the job that was checkpointed (a rebuild or reinstall in between prevents it; put the \
         file back, or restart with the build that took the checkpoint)"
    ))
}

/// The last `n` lines of a CRIU log's text, errors first when there are any, indented.
fn tail_of(text: &str, n: usize) -> String {
    // CRIU always logs this one as an error (it cannot raise its own descriptor limit); noise.
    let lines: Vec<&str> = text.lines().filter(|l| !l.contains("Can't setup RLIMIT_NOFILE")).collect();
    let errors: Vec<&str> = lines.iter().copied().filter(|l| l.contains("Error") || l.contains("error")).collect();
    let pick: Vec<&str> =
        if errors.is_empty() { lines.iter().rev().take(n).rev().copied().collect() } else { errors.iter().rev().take(n).rev().copied().collect() };
    pick.iter().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapped_file_that_changed_is_named_with_what_to_do() {
        let log = "(00.03) 1: Error (criu/files-reg.c:2175): File opt/app/bin/mpicr has bad size 32650096 (expect 33664032)\n\
                   (00.03) 1: Error (criu/mem.c:1424): `- Can't open vma\n";
        let hint = changed_file_hint(log).unwrap();
        assert!(hint.starts_with("/opt/app/bin/mpicr changed since the checkpoint:"), "{hint}");
        let log = "(00.03) 1: Error (criu/files-reg.c:2153): File usr/lib/libx.so has bad build-ID\n";
        assert!(changed_file_hint(log).unwrap().starts_with("/usr/lib/libx.so changed"));
        assert_eq!(changed_file_hint("(00.03) Error (criu/cr-restore.c:2320): Restoring FAILED.\n"), None);
    }

    #[test]
    fn flags() {
        let f = dump_flags(&[11, 12], false, false);
        assert!(f.windows(2).any(|w| w[0] == "--external" && w[1] == "unix[11]"));
        assert!(f.windows(2).any(|w| w[0] == "--external" && w[1] == "unix[12]"));
        assert!(f.contains(&"--leave-running".to_string()));
        assert!(f.contains(&"--shell-job".to_string()));
        assert!(dump_flags(&[], true, false).contains(&"--leave-stopped".to_string()));
        assert!(!dump_flags(&[], true, false).contains(&"--leave-running".to_string()));
        assert!(!f.contains(&"--unprivileged".to_string()));
        assert!(dump_flags(&[], false, true).contains(&"--unprivileged".to_string()));
        assert!(restore_flags(true).contains(&"--unprivileged".to_string()));
        assert!(!restore_flags(false).contains(&"--unprivileged".to_string()));
        assert_eq!(restore_inherit_flag(10, "socket:[5]"), vec!["--inherit-fd", "fd[10]:socket:[5]"]);
    }

    #[test]
    fn missing_privilege_names_one_thing() {
        let bin = Path::new("criu");
        let full = (1u64 << 41) - 1;
        let cr = 1u64 << CAP_CHECKPOINT_RESTORE;
        let sp = 1u64 << CAP_SETPCAP;
        assert_eq!(missing_privilege(bin, Some((cr, true)), full, 40, false), None);
        let m = missing_privilege(bin, None, full, 40, false).unwrap();
        assert!(m.contains("lacks CAP_CHECKPOINT_RESTORE") && m.contains("make deps") && !m.contains('\n'), "{m}");
        assert!(missing_privilege(bin, Some((cr, false)), full, 40, false).unwrap().contains("CAP_CHECKPOINT_RESTORE"));
        let partial = full & !(1 << 24);
        assert!(missing_privilege(bin, Some((cr, true)), partial, 40, false).unwrap().contains("CAP_SETPCAP"));
        assert_eq!(missing_privilege(bin, Some((cr | sp, true)), partial, 40, false), None);
        assert!(missing_privilege(bin, Some((cr, true)), full & !cr, 40, false).unwrap().contains("bounding set"));
        assert!(missing_privilege(bin, Some((cr, true)), full, 40, true).unwrap().contains("no_new_privs"));
    }

    #[test]
    fn file_caps_decode() {
        // cap_checkpoint_restore,cap_setpcap=ep, revision 2 (as setcap writes it).
        let mut b = vec![];
        for w in [0x0200_0001u32, 1 << 8, 0, 1 << 8, 0] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        assert_eq!(crate::sys::parse_file_caps(&b), Some(((1 << 40) | (1 << 8), true)));
        assert_eq!(crate::sys::parse_file_caps(&b[..3]), None);
    }

    #[test]
    fn log_tail_prefers_errors() {
        let t = tail_of("a\nb\n(00.1) Error (criu/sk-unix.c:1): boom\nc\n", 5);
        assert!(t.contains("boom") && !t.contains(" a"), "{t}");
    }
}
