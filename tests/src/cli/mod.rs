//! Integration tests of the `mpicr` command line that need no C test matrix: the PMI relay and
//! stdio under Hydra, exit statuses, plain CRIU checkpoint/restart of non-MPI programs, the
//! checkpoint protocol with a stand-in agent (`cli/examples/fake_agent.rs`), restart and
//! checkpoint errors, hangs and deadlines (test hooks `MPICR_TEST_COORD_FAULT`,
//! `MPICR_TEST_AGENT_PANIC`, `MPICR_TEST_SEAL_DELAY`), periodic and SIGUSR1 checkpoints, security, PID namespaces and a
//! non-root user. Run by `tests/cli.rs` (`cargo test --release -p mpicr-tests --test cli`).
//!
//! Each group of cases is a function (`CaseFn`) that reports one or more named cases (`ok NAME`,
//! `FAIL NAME: why`, `skip NAME: why`); cases of one function run in order and may build on each
//! other (a checkpoint, then restarts of it). A function runs when its name or one of its
//! cases' names contains a filter (`MPICR_TEST_CLI=PATTERN[,PATTERN...]` or the test binary's
//! arguments).
//!
//! Every process a function starts carries a marker in its environment (like `job.rs`), so
//! that whatever outlives it (a rank restored by CRIU, a Hydra proxy) is found and killed by PID
//! when the function ends, panics included; every wait is bounded; each function works in a
//! scratch directory of its own, removed at the end (`MPICR_TEST_KEEP=1` keeps them). Processes
//! still alive 5 s after the end of a function (a `criu restore` whose keeper was killed ends on
//! its own within that) are reported, with the function, by the last case, `no-stray-processes`.

mod app;
mod commands;
mod criu;
mod errors;
mod hangs;
mod install;
mod lower;
mod nonroot;
mod ompi_run;
mod paused;
mod pidns;
mod pmi2;
mod protocol;
mod relay;
mod security;
mod slurm;
mod slurm_pmix;
mod stage;
mod xlib;

use crate::error::Error;
use crate::job::{kill_each, scan_procs, MARKER_VAR};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `timeout -k 5 LIMIT` of the bash version: the default bound of one command.
pub const LIMIT: Duration = Duration::from_secs(60);
const KILL_AFTER: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);

/// What the cases need, found once.
pub struct Env {
    pub root: PathBuf,
    /// `target/release/mpicr` (or `MPICR_TEST_MPICR`).
    pub m: PathBuf,
    /// `target/release/examples/fake_agent`.
    pub fake: PathBuf,
    pub mpich5: PathBuf,
    pub have4: bool,
    pub have5: bool,
    pub criu_ok: bool,
    pub is_root: bool,
    pub shim_built: bool,
    /// The run's scratch directory (`T` of the bash version): programs in `bin/`, one
    /// directory per function.
    pub top: PathBuf,
    pub keep: bool,
}

impl Env {
    pub fn bin(&self, name: &str) -> PathBuf {
        self.top.join("bin").join(name)
    }

    /// Whether MPICH `ver` (4 or 5) is installed and its test programs built.
    pub fn have(&self, ver: u32) -> bool {
        if ver == 4 {
            self.have4
        } else {
            self.have5
        }
    }
}

/// One group of cases.
pub struct CaseFn {
    /// What filters match (with the case names): the bash version's selector.
    pub name: &'static str,
    /// Every case it reports, in order.
    pub cases: &'static [&'static str],
    pub run: fn(&mut T),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Fail,
    Skip,
}

/// Every function, in the bash version's order.
pub fn all() -> Vec<CaseFn> {
    let mut v = Vec::new();
    v.extend(relay::cases());
    v.extend(criu::cases_first());
    v.extend(security::cases());
    v.extend(criu::cases_mpiexec());
    v.extend(protocol::cases());
    v.extend(errors::cases());
    v.extend(criu::cases_periodic());
    v.extend(hangs::cases_shim());
    v.extend(pidns::cases());
    v.extend(hangs::cases_faults());
    v.extend(nonroot::cases());
    v.extend(xlib::cases());
    v.extend(lower::cases());
    v.extend(ompi_run::cases());
    v.extend(app::cases());
    v.extend(install::cases());
    v.extend(commands::cases());
    v.extend(stage::cases());
    v.extend(slurm::cases());
    v.extend(pmi2::cases());
    v.extend(slurm_pmix::cases());
    v.push(CaseFn { name: "no-strays", cases: &["no-stray-processes"], run: no_strays });
    v
}

/// Processes killed at the end of a function because they outlived it.
static STRAYS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The context of one function: its results, scratch directory and process marker.
pub struct T<'a> {
    pub env: &'a Env,
    pub dir: PathBuf,
    pub marker: String,
    pub results: Vec<(String, Verdict, String)>,
    /// Set for every command this function starts (the bash version's `export`).
    pub exported: Vec<(String, String)>,
    cases: &'static [&'static str],
}

impl<'a> T<'a> {
    fn report(&mut self, name: &str, v: Verdict, why: String) {
        match v {
            Verdict::Ok => println!("ok   {name}"),
            Verdict::Fail => println!("FAIL {name}: {why}"),
            Verdict::Skip => println!("skip {name}: {why}"),
        }
        self.results.push((name.to_string(), v, why));
    }
    pub fn ok(&mut self, name: &str) {
        self.report(name, Verdict::Ok, String::new());
    }
    pub fn bad(&mut self, name: &str, why: impl std::fmt::Display) {
        self.report(name, Verdict::Fail, why.to_string());
    }
    pub fn skip(&mut self, name: &str, why: impl std::fmt::Display) {
        self.report(name, Verdict::Skip, why.to_string());
    }
    /// `ok` if `good`, else `bad` with `why`.
    pub fn check(&mut self, name: &str, good: bool, why: impl FnOnce(&Self) -> String) {
        if good {
            self.ok(name)
        } else {
            let why = why(self);
            self.bad(name, why)
        }
    }
    /// The cases of this function not reported yet.
    pub fn cases_left(&self) -> Vec<String> {
        self.cases.iter().filter(|c| !self.results.iter().any(|r| r.0 == **c)).map(|c| c.to_string()).collect()
    }
    /// Skips every case of this function not reported yet.
    pub fn skip_rest(&mut self, why: impl std::fmt::Display) {
        let why = why.to_string();
        for c in self.cases {
            if !self.results.iter().any(|r| r.0 == *c) {
                self.skip(c, &why);
            }
        }
    }
    /// Checks prerequisites; when one is missing, skips the rest with the bash version's reason.
    pub fn require(&mut self, needs: &[bool], why: &str) -> bool {
        if needs.iter().all(|&b| b) {
            true
        } else {
            self.skip_rest(why);
            false
        }
    }

    /// `export K=V` for the commands this function starts from now on.
    pub fn export(&mut self, k: &str, v: &str) {
        self.exported.push((k.to_string(), v.to_string()));
    }

    /// A path in this function's scratch directory.
    pub fn p(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A command that carries this function's marker and runs in its scratch directory.
    pub fn cmd(&self, prog: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new(prog);
        c.envs(self.exported.iter().map(|(k, v)| (k, v)));
        c.env(MARKER_VAR, &self.marker).current_dir(&self.dir).stdin(Stdio::null());
        c
    }
    /// `mpicr ARGS...`
    pub fn m<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut c = self.cmd(&self.env.m);
        c.args(args);
        c
    }
    /// `mpiexec -n N` of MPICH `ver` (MPICH 5's bin first on PATH, as its wrappers need).
    pub fn mpi(&self, ver: u32, n: u32) -> Command {
        let mut c = if ver == 4 {
            self.cmd("mpiexec.mpich")
        } else {
            let mut c = self.cmd(self.env.mpich5.join("mpiexec"));
            let path = std::env::var_os("PATH").unwrap_or_default();
            let mut p = self.env.mpich5.clone().into_os_string();
            p.push(":");
            p.push(path);
            c.env("PATH", p);
            c
        };
        c.arg("-n").arg(n.to_string());
        c
    }

    /// Runs `cmd` to its end (at most `limit`), stdout and stderr together: `$(cmd 2>&1)`.
    pub fn out(&self, cmd: Command, limit: Duration) -> (i32, String) {
        let path = self.fresh("out");
        let f = File::create(&path).expect("scratch file");
        let f2 = f.try_clone().expect("dup");
        let rc = self.status(cmd, Stdio::from(f), Stdio::from(f2), limit);
        let s = fs::read(&path).unwrap_or_default();
        let _ = fs::remove_file(&path);
        let mut s = String::from_utf8_lossy(&s).into_owned();
        while s.ends_with('\n') {
            s.pop(); // as $(...) does
        }
        (rc, s)
    }
    /// Runs `cmd` to its end (at most `limit`): (status, stdout, stderr).
    pub fn out2(&self, cmd: Command, limit: Duration) -> (i32, String, String) {
        let (po, pe) = (self.fresh("stdout"), self.fresh("stderr"));
        let rc = self.to(cmd, Some(&po), Some(&pe), limit);
        let read = |p: &Path| {
            let s = String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned();
            let _ = fs::remove_file(p);
            s
        };
        (rc, read(&po), read(&pe))
    }
    /// Runs `cmd` to its end (at most `LIMIT`): its stdout (`$(cmd)`, stderr to /dev/null).
    pub fn stdout_of(&self, cmd: Command) -> String {
        let path = self.fresh("stdout");
        self.to(cmd, Some(&path), None, LIMIT);
        let s = String::from_utf8_lossy(&fs::read(&path).unwrap_or_default()).into_owned();
        let _ = fs::remove_file(&path);
        s
    }
    /// Runs `cmd` with stdout and stderr to files (None: /dev/null); its exit status.
    pub fn to(&self, cmd: Command, stdout: Option<&Path>, stderr: Option<&Path>, limit: Duration) -> i32 {
        self.status(cmd, sink(stdout), sink(stderr), limit)
    }
    fn status(&self, cmd: Command, o: Stdio, e: Stdio, limit: Duration) -> i32 {
        match self.spawn_io(cmd, o, e) {
            Ok(mut bg) => bg.wait(limit),
            Err(e) => {
                eprintln!("     {e}");
                127
            }
        }
    }
    /// Starts `cmd` in the background (`bg` of the bash version) in a process group of its own;
    /// it is killed when the returned guard is dropped.
    pub fn spawn(&self, cmd: Command, stdout: Option<&Path>, stderr: Option<&Path>) -> Bg {
        self.spawn_io(cmd, sink(stdout), sink(stderr)).unwrap_or_else(|e| panic!("{e}"))
    }
    fn spawn_io(&self, mut cmd: Command, o: Stdio, e: Stdio) -> Result<Bg, Error> {
        cmd.stdout(o).stderr(e).process_group(0);
        let program = format!("{:?}", cmd.get_program());
        let child = cmd.spawn().map_err(Error::spawn(program))?;
        Ok(Bg { child, status: None, started: Instant::now() })
    }

    fn fresh(&self, what: &str) -> PathBuf {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        self.dir.join(format!(".{what}.{}", SEQ.fetch_add(1, Ordering::Relaxed)))
    }

    /// "pid (comm)" of every live process that carries this function's marker.
    pub fn marked_alive(&self) -> Vec<String> {
        let needle = crate::job::marker_needle(&self.marker);
        let me = std::process::id();
        scan_procs().into_iter().filter(|p| !p.dead && p.pid != me && crate::job::carries(p.pid, &needle)).map(|p| format!("{} ({})", p.pid, p.comm)).collect()
    }

    /// `mpicr checkpoint ARGS DIR`, retried while the job is not ready yet: (status, output).
    pub fn ckpt(&self, dir: &Path, args: &[&str]) -> (i32, String) {
        self.ckpt_with(|| {
            let mut c = self.m(["checkpoint"]);
            c.args(args).arg(dir);
            c
        })
    }

    /// `ckpt` with the checkpoint command made by `make` (e.g. run as another user).
    pub fn ckpt_with(&self, make: impl Fn() -> Command) -> (i32, String) {
        let mut last = (1, String::new());
        for _ in 0..100 {
            let (rc, out) = self.out(make(), Duration::from_secs(120));
            if rc == 0 {
                return (0, out);
            }
            let retry = ["cannot checkpoint", "no job is running", "does not answer", "does not exist"].iter().any(|s| out.contains(s));
            if !retry {
                return (rc, out);
            }
            last = (1, out);
            std::thread::sleep(Duration::from_millis(100));
        }
        last
    }

    /// `mpicr status DIR | grep -c ' complete '`
    pub fn epochs_complete(&self, dir: &Path) -> usize {
        let mut c = self.m(["status"]);
        c.arg(dir);
        let s = self.stdout_of(c);
        s.lines().filter(|l| l.contains(" complete ")).count()
    }

    /// Waits (at most 5 s) for the job's `coordinator.json`, then half a second more: the
    /// bash version's `for i in $(seq 50); do [ -f ...] && break; sleep 0.1; done; sleep 0.5`.
    pub fn wait_coordinator(&self, dir: &Path, settle: bool) {
        for _ in 0..50 {
            if dir.join("coordinator.json").exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if settle {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

fn sink(p: Option<&Path>) -> Stdio {
    match p {
        Some(p) => Stdio::from(File::create(p).unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()))),
        None => Stdio::null(),
    }
}

/// A started command (in a process group of its own). Dropping it kills the group.
pub struct Bg {
    child: Child,
    status: Option<i32>,
    started: Instant,
}

impl Bg {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    /// Its exit status like the shell gives it (128 + signal), once it ran `limit` at most
    /// (counted from its start, as `timeout -k 5 LIMIT cmd &` of the bash version does): then
    /// SIGTERM to its group, and SIGKILL 5 s later (`timeout -k 5`), status 124 (also when the
    /// run is interrupted).
    pub fn wait(&mut self, limit: Duration) -> i32 {
        if let Some(s) = self.status {
            return s;
        }
        let start = self.started;
        let s = loop {
            match self.child.try_wait() {
                Ok(Some(st)) => break shell_status(st),
                Ok(None) => {}
                Err(_) => break 127,
            }
            if start.elapsed() >= limit || crate::job::interrupted() {
                self.signal_group(libc::SIGTERM);
                let t = Instant::now();
                while t.elapsed() < KILL_AFTER {
                    if let Ok(Some(_)) = self.child.try_wait() {
                        break;
                    }
                    std::thread::sleep(POLL);
                }
                if !matches!(self.child.try_wait(), Ok(Some(_))) {
                    self.signal_group(libc::SIGKILL);
                    let _ = self.child.wait();
                }
                break 124;
            }
            std::thread::sleep(POLL);
        };
        self.status = Some(s);
        s
    }
    /// Its exit status if it has ended, without waiting.
    pub fn try_status(&mut self) -> Option<i32> {
        if self.status.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.status = Some(shell_status(st));
            }
        }
        self.status
    }
    /// SIGKILL to its whole process group, as a launcher ends a rank.
    pub fn kill_group(&mut self) {
        self.signal_group(libc::SIGKILL);
    }
    /// Signals the process itself (`kill -SIG $pid`), while it is not reaped.
    pub fn signal(&mut self, sig: libc::c_int) {
        if self.status.is_none() && matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: plain syscall; the child is not reaped, so its PID is still its own.
            unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        }
    }
    fn signal_group(&mut self, sig: libc::c_int) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: plain syscall; the group is the child's own (process_group(0)) and the
            // child is not reaped, so its group cannot have been reused.
            unsafe { libc::kill(-(self.child.id() as libc::pid_t), sig) };
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.signal_group(libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

fn shell_status(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// Kills (SIGKILL, by PID) every process whose environment holds `marker`, until none is left.
/// Returns "pid (comm)" of each.
pub fn kill_marked(marker: &str) -> Vec<String> {
    let needle = crate::job::marker_needle(marker);
    let marked = |pid: u32| crate::job::carries(pid, &needle);
    let me = std::process::id();
    let mut killed = Vec::new();
    for _ in 0..250 {
        let alive: Vec<_> = scan_procs().into_iter().filter(|p| !p.dead && p.pid != me && marked(p.pid)).collect();
        if alive.is_empty() {
            break;
        }
        kill_each(&alive, &mut killed);
        std::thread::sleep(POLL);
    }
    killed
}

/// Ends a function: kills what it left running, removes its scratch directory (also on panic).
struct Guard {
    /// The function's name, to say who left the processes it kills.
    name: &'static str,
    marker: String,
    dir: PathBuf,
    keep: bool,
}

/// How long what a function started may take to end by itself after it: a `criu restore` whose
/// keeper the launcher killed finishes (and ends the tree it made) on its own.
const SETTLE: Duration = Duration::from_secs(5);

impl Drop for Guard {
    fn drop(&mut self) {
        let needle = crate::job::marker_needle(&self.marker);
        let me = std::process::id();
        let settled = Instant::now();
        while settled.elapsed() < SETTLE && scan_procs().iter().any(|p| !p.dead && p.pid != me && crate::job::carries(p.pid, &needle)) {
            std::thread::sleep(POLL);
        }
        let killed = kill_marked(&self.marker);
        if !killed.is_empty() {
            let name = self.name;
            STRAYS.lock().unwrap_or_else(|e| e.into_inner()).extend(killed.into_iter().map(|k| format!("{k} left by {name}")));
        }
        if self.keep {
            eprintln!("kept {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs one function; a panic fails the cases it had not reported yet.
pub fn run_fn(env: &Env, f: &CaseFn) -> Vec<(String, Verdict, String)> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = env.top.join(f.name);
    let _ = fs::create_dir_all(&dir);
    let marker = format!("cli.{}.{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
    let guard = Guard { name: f.name, marker: marker.clone(), dir: dir.clone(), keep: env.keep };
    let mut t = T { env, dir, marker, results: Vec::new(), exported: Vec::new(), cases: f.cases };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (f.run)(&mut t)));
    if let Err(p) = r {
        let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
        for c in f.cases {
            if !t.results.iter().any(|r| r.0 == *c) {
                t.bad(c, format!("the test panicked: {msg}"));
            }
        }
    } else {
        t.skip_rest("not reached");
    }
    let results = std::mem::take(&mut t.results);
    drop(t);
    drop(guard);
    results
}

/// The last case: nothing this run started outlived its function (they were killed then and
/// are named here), and nothing runs from the run's scratch directory.
fn no_strays(t: &mut T) {
    std::thread::sleep(Duration::from_millis(300));
    let mut strays = STRAYS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let top = t.env.top.to_string_lossy().into_owned().into_bytes();
    let me = std::process::id();
    for p in scan_procs() {
        if p.dead || p.pid == me {
            continue;
        }
        if let Ok(cmdline) = fs::read(format!("/proc/{}/cmdline", p.pid)) {
            if cmdline.windows(top.len()).any(|w| w == top.as_slice()) {
                strays.push(format!("{} ({})", p.pid, p.comm));
            }
        }
    }
    t.check("no-stray-processes", strays.is_empty(), |_| strays.join(", "));
}

/// Matches `pattern`, a basic regular expression as grep takes it (`^`, `$`, `.`, `*`, `\`
/// escapes; everything else literal), against each line of `text`.
pub fn grep(pattern: &str, text: &str) -> bool {
    text.lines().any(|l| re_match(pattern, l))
}

/// The number of lines of `text` that match `pattern` (`grep -c`).
pub fn grep_c(pattern: &str, text: &str) -> usize {
    text.lines().filter(|l| re_match(pattern, l)).count()
}

#[derive(Clone, Copy, PartialEq)]
enum Atom {
    Any,
    Ch(char),
}

fn re_match(pattern: &str, line: &str) -> bool {
    let mut atoms: Vec<(Atom, bool)> = Vec::new(); // (atom, starred)
    let mut chars = pattern.chars().peekable();
    let anchored = pattern.starts_with('^');
    if anchored {
        chars.next();
    }
    let mut end = false;
    while let Some(c) = chars.next() {
        let atom = match c {
            '\\' => Atom::Ch(chars.next().unwrap_or('\\')),
            '.' => Atom::Any,
            '$' if chars.peek().is_none() => {
                end = true;
                break;
            }
            '*' if !atoms.is_empty() => {
                if let Some(last) = atoms.last_mut() {
                    last.1 = true;
                }
                continue;
            }
            c => Atom::Ch(c),
        };
        atoms.push((atom, false));
    }
    let text: Vec<char> = line.chars().collect();
    let starts = if anchored { 0..=0 } else { 0..=text.len() };
    starts.into_iter().any(|s| match_here(&atoms, &text[s..], end))
}

fn match_here(atoms: &[(Atom, bool)], text: &[char], end: bool) -> bool {
    let Some(&(atom, star)) = atoms.first() else {
        return !end || text.is_empty();
    };
    let fits = |c: char| atom == Atom::Any || atom == Atom::Ch(c);
    if star {
        let mut i = 0;
        loop {
            if match_here(&atoms[1..], &text[i..], end) {
                return true;
            }
            if i < text.len() && fits(text[i]) {
                i += 1;
            } else {
                return false;
            }
        }
    }
    !text.is_empty() && fits(text[0]) && match_here(&atoms[1..], &text[1..], end)
}

/// `complete FILE RANKS TICKS` of the bash version: every rank printed ticks 1..TICKS exactly
/// once (lines `rank R tick I ...`). Err names the first that did not.
pub fn complete(text: &str, ranks: u32, ticks: u32) -> Result<(), Error> {
    let mut seen = std::collections::HashMap::<(String, String), u32>::new();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() >= 4 && w[0] == "rank" && w[2] == "tick" {
            *seen.entry((w[1].to_string(), w[3].to_string())).or_default() += 1;
        }
    }
    for r in 0..ranks {
        for i in 1..=ticks {
            let n = seen.get(&(r.to_string(), i.to_string())).copied().unwrap_or(0);
            if n != 1 {
                return Err(Error::Check(format!("rank {r} tick {i}: {n} times")));
            }
        }
    }
    Ok(())
}

/// Reads files and concatenates them (`cat A B`), missing ones as empty.
pub fn cat(paths: &[&Path]) -> String {
    paths.iter().map(|p| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned()).collect()
}

/// The last `n` lines of a file (`tail -n`), for messages.
pub fn tail(path: &Path, n: usize) -> String {
    let s = cat(&[path]);
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The first `"KEY": N` of a JSON text.
pub fn json_num(text: &str, key: &str) -> Option<u64> {
    let pat = format!("\"{key}\":");
    let i = text.find(&pat)?;
    text[i + pat.len()..].trim_start().split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// The first `"pid": N` of a rank's `rank.json`.
pub fn rank_pid(rank_json: &Path) -> Option<i32> {
    let s = fs::read_to_string(rank_json).ok()?;
    json_num(&s, "pid").and_then(|p| i32::try_from(p).ok())
}

/// Compiles `tests/cli-programs/NAME.c` with `cc` into `bin/OUT`.
fn compile(env: &Env, cc: &OsStr, extra_env: Option<(&str, &OsStr)>, src: &str, out: &str) -> bool {
    let mut c = Command::new(cc);
    if let Some((k, v)) = extra_env {
        c.env(k, v);
    }
    if out == "counter" {
        c.arg("-O1");
    }
    c.arg("-o").arg(env.bin(out)).arg(env.root.join("tests/cli-programs").join(format!("{src}.c")));
    match c.output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            eprintln!("{:?} {src}.c failed: {}", cc, String::from_utf8_lossy(&o.stderr));
            false
        }
        Err(e) => {
            eprintln!("{:?}: {e}", cc);
            false
        }
    }
}

pub(super) fn find_in_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// Finds the tools, creates the scratch directory and compiles the test programs. Err when
/// nothing can run (no `cc`).
pub fn setup(root: PathBuf) -> Result<Env, Error> {
    let flag = |v: &str| std::env::var(v).is_ok_and(|s| !s.is_empty() && s != "0");
    let m = std::env::var_os("MPICR_TEST_MPICR").map(PathBuf::from).unwrap_or_else(|| root.join("target/release/mpicr"));
    let fake = root.join("target/release/examples/fake_agent");
    for p in [&m, &fake] {
        if !p.is_file() {
            return Err(Error::Missing(format!("{} is missing: cargo build --release -p mpicr-cli --bin mpicr --example fake_agent", p.display())));
        }
    }
    let mpich5 = root.join(".deps/mpich5/bin");
    let tmp = std::env::temp_dir();
    let top = tmp.join(format!("mpicr-test-cli.{}", std::process::id()));
    let bin = top.join("bin");
    fs::create_dir_all(&bin).map_err(Error::io("create", &bin))?;
    let mut env = Env {
        have4: find_in_path("mpiexec.mpich") && find_in_path("mpicc.mpich"),
        have5: mpich5.join("mpiexec").is_file() && mpich5.join("mpicc").is_file(),
        criu_ok: root.join(".deps/criu/criu").is_file() || std::env::var_os("MPICR_CRIU").is_some(),
        // SAFETY: plain syscall.
        is_root: unsafe { libc::geteuid() } == 0,
        shim_built: root.join("target/release/libmpicr.so").is_file(),
        root,
        m,
        fake,
        mpich5,
        top,
        keep: flag("MPICR_TEST_KEEP"),
    };
    if !compile(&env, OsStr::new("cc"), None, "counter", "counter") {
        return Err(Error::Command("cc failed to build the helper program counter".into()));
    }
    if env.have4 {
        let cc = OsStr::new("mpicc.mpich");
        env.have4 = compile(&env, cc, None, "hello", "hello4") && compile(&env, cc, None, "fds", "fds4");
        if env.have4 {
            // built on demand in the bash version; its failure shows in the cases using them
            compile(&env, cc, None, "loop", "loop4");
            compile(&env, cc, None, "ctlfd", "ctlfd4");
            compile(&env, cc, None, "dirty", "dirty4");
        }
    }
    if env.have5 {
        let cc = env.mpich5.join("mpicc");
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut p = env.mpich5.clone().into_os_string();
        p.push(":");
        p.push(path);
        let e = Some(("PATH", p.as_os_str()));
        env.have5 = compile(&env, cc.as_os_str(), e, "hello", "hello5") && compile(&env, cc.as_os_str(), e, "fds", "fds5");
        if env.have5 {
            // MPI 4.1 (MPICH 4.0.2 lacks it); its failure shows in the case using it
            compile(&env, cc.as_os_str(), e, "commbuf", "commbuf5");
        }
    }
    Ok(env)
}

/// Whether `f` runs under `filters` (none: everything).
pub fn selected(f: &CaseFn, filters: &[String]) -> bool {
    filters.is_empty() || filters.iter().any(|p| f.name.contains(p.as_str()) || f.cases.iter().any(|c| c.contains(p.as_str())))
}

impl Drop for Env {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.top);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grep_takes_the_basic_regular_expressions_the_cases_use() {
        assert!(grep("^epoch: *2", "x\nepoch:   2 (1.2 s)\n"));
        assert!(grep("^epoch: *2", "epoch:2"));
        assert!(!grep("^epoch: *2", " epoch: 2"));
        assert!(!grep("^epoch: *3", "epoch: 2"));
        assert!(grep("manifest of epoch 2 .*signature does not match", "error: the manifest of epoch 2 (x) signature does not match"));
        assert!(grep("fake_agent\\[0\\]: checkpoint aborted (not released)", "fake_agent[0]: checkpoint aborted (not released): lost"));
        assert!(!grep("fake_agent\\[0\\]: checkpoint aborted (not released)", "fake_agent[1]: checkpoint aborted (not released)"));
        assert!(grep("timed out .* waiting for rank(s) 1", "timed out after 2 s waiting for rank(s) 1"));
        assert_eq!(grep_c("of 2: sum 3$", "rank 0 of 2: sum 3\nrank 1 of 2: sum 3\nof 2: sum 33"), 2);
        assert!(grep("rc=0 .*closed=80 .*epoch: *1", "rc=0 took=4.0 closed=80 epoch: 1"));
        assert!(!grep("rc=0 .*closed=80 .*epoch: *1", "rc=0 took=4.0 closed=8 epoch: 1"));
    }

    #[test]
    fn complete_wants_every_tick_of_every_rank_once() {
        let two = "rank 0 tick 1\nrank 1 tick 1 gen 0\nrank 0 tick 2\nrank 1 tick 2\n";
        assert!(complete(two, 2, 2).is_ok());
        assert_eq!(complete(two, 2, 3).unwrap_err().to_string(), "rank 0 tick 3: 0 times");
        let twice = format!("{two}rank 1 tick 2 gen 1\n");
        assert_eq!(complete(&twice, 2, 2).unwrap_err().to_string(), "rank 1 tick 2: 2 times");
    }

    #[test]
    fn json_numbers() {
        assert_eq!(json_num("{\n  \"pid\": 123,\n  \"port\": 4567\n}", "port"), Some(4567));
        assert_eq!(json_num("{\"pid\":9}", "pid"), Some(9));
        assert_eq!(json_num("{}", "pid"), None);
    }
}
