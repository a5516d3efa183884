//! The keeper's PMI connection to the launcher (it is a PMI client of Hydra itself) and the
//! relay that serves the program's PMI connections through it. Rewriting rules: `pmi::Rules`.

use crate::pmi::{self, Action, Msg, Rules, Wire};
use anyhow::{bail, Context, Result};
use parking_lot::Mutex;
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Where the launcher told this rank to find PMI (Hydra's `PMI_FD`, `PMI_RANK`, `PMI_SIZE`).
#[derive(Debug, Clone, Copy)]
pub struct PmiEnv {
    pub fd: RawFd,
    pub rank: i32,
    pub size: i32,
}

/// The PMI wire protocol the program's library will speak, from its environment (the keeper's,
/// which the program inherits): MPICH >= 4.1 reads `MPIR_CVAR_PMI_VERSION` (and its aliases),
/// Intel MPI `I_MPI_PMI` and `I_MPI_PMI_LIBRARY` (Slurm's `libpmi2.so` speaks PMI-2 on
/// `PMI_FD`). The keeper must initialise the launcher in that version before the program
/// starts: Slurm's pmi2 plugin fixes a task's version by the first `init` it reads.
pub fn program_wire() -> Wire {
    wire_from(|k| std::env::var(k).ok())
}

/// `program_wire` over the variables `get` finds.
fn wire_from(get: impl Fn(&str) -> Option<String>) -> Wire {
    let var = |k: &str| get(k).map(|v| v.trim().to_ascii_lowercase()).filter(|v| !v.is_empty());
    let mpich = ["MPIR_CVAR_PMI_VERSION", "MPIR_PARAM_PMI_VERSION", "MPICH_PMI_VERSION"].iter().find_map(|k| var(k));
    if let Some(v) = mpich {
        return if v == "2" { Wire::V2 } else { Wire::V1 };
    }
    let lib_is_pmi2 = var("I_MPI_PMI_LIBRARY").is_some_and(|l| l.rsplit('/').next().is_some_and(|f| f.contains("pmi2")));
    match var("I_MPI_PMI").as_deref() {
        Some("pmi2") => Wire::V2,
        Some("pmi1") => Wire::V1,
        _ if lib_is_pmi2 => Wire::V2,
        _ => Wire::V1,
    }
}

/// The PMI version number of a wire.
/// A program's `init` asks for another PMI version than the keeper's (`asked`: None when it
/// names none readable): it cannot be relayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the program asks for PMI-{} but the keeper initialised PMI-{keeper} with the launcher, as its environment says (MPIR_CVAR_PMI_VERSION, I_MPI_PMI, I_MPI_PMI_LIBRARY; job.json at a restart): refused",
    asked.map_or_else(|| "?".to_string(), |v| v.to_string())
)]
pub struct VersionMismatch {
    pub asked: Option<u32>,
    pub keeper: u32,
}

pub fn wire_version(w: Wire) -> u32 {
    match w {
        Wire::V1 => 1,
        Wire::V2 => 2,
    }
}

pub fn wire_of_version(v: u32) -> Option<Wire> {
    match v {
        1 => Some(Wire::V1),
        2 => Some(Wire::V2),
        _ => None,
    }
}

impl PmiEnv {
    /// `None` when not started by a PMI launcher.
    pub fn from_env() -> Result<Option<PmiEnv>> {
        let get = |k: &str| std::env::var(k).ok();
        let Some(fd) = get("PMI_FD") else {
            if get("PMI_PORT").is_some() {
                bail!("PMI_PORT is set but PMI_FD is not: this launcher's PMI mode is not supported (use Hydra's mpiexec, or srun --mpi=pmi2)");
            }
            return Ok(None);
        };
        let num = |k: &str, v: Option<String>| -> Result<i32> {
            v.with_context(|| format!("PMI_FD is set but {k} is not"))?.trim().parse().with_context(|| format!("{k} is not a number"))
        };
        let fd = num("PMI_FD", Some(fd))?;
        let rank = num("PMI_RANK", get("PMI_RANK"))?;
        let size = num("PMI_SIZE", get("PMI_SIZE"))?;
        if size < 1 || rank < 0 || rank >= size {
            bail!("PMI_RANK={rank} and PMI_SIZE={size} are inconsistent");
        }
        Ok(Some(PmiEnv { fd, rank, size }))
    }
}

/// The connection to the launcher; one request/response at a time.
struct Upstream {
    sock: UnixStream,
    buf: Vec<u8>,
}

impl Upstream {
    fn read_msg(&mut self) -> io::Result<Msg> {
        loop {
            match pmi::split(&self.buf) {
                Ok(Some((m, n))) => {
                    self.buf.drain(..n);
                    return Ok(m);
                }
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, format!("launcher sent {e}"))),
            }
            let mut chunk = [0u8; 4096];
            let n = self.sock.read(&mut chunk)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the launcher closed the PMI connection"));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn exchange(&mut self, req: &Msg, await_reply: bool) -> io::Result<Option<Msg>> {
        self.sock.write_all(&req.encode())?;
        if !await_reply {
            return Ok(None);
        }
        self.read_msg().map(Some)
    }
}

/// This rank's PMI session with the launcher.
pub struct Launcher {
    up: Mutex<Upstream>,
    /// The launcher's kvsname for this job.
    pub kvsname: String,
    finalized: AtomicBool,
    tag: String,
    /// The launcher's answer to the keeper's own `init` (PMI 1.1, or 2.0).
    init_reply: Msg,
    /// The wire the keeper speaks with the launcher (and relays).
    pub wire: Wire,
    /// PMI-2: the launcher's answer to the keeper's `fullinit`.
    fullinit_reply: Option<Msg>,
}

impl Launcher {
    /// Takes over the launcher's PMI fd and initialises PMI in `wire`'s version on it.
    pub fn connect(env: PmiEnv, wire: Wire) -> Result<Launcher> {
        // SAFETY: PMI_FD names a descriptor the launcher opened for this process; nothing else
        // in the keeper owns it, so the keeper takes ownership here, once.
        let fd = unsafe { OwnedFd::from_raw_fd(env.fd) };
        let sock = UnixStream::from(fd);
        let mut up = Upstream { sock, buf: Vec::new() };
        let tag = format!("mpicr[{}] pmi", env.rank);
        // Both versions start with a PMI-1 `init` line (PMI-2 then continues in its own wire).
        let (v, sub) = match wire {
            Wire::V1 => (1, 1),
            Wire::V2 => (2, 0),
        };
        let init = Msg::new(Wire::V1, "init").with("pmi_version", v).with("pmi_subversion", sub);
        let init_reply = up.exchange(&init, true).context("PMI init with the launcher")?.unwrap();
        check_rc(&init_reply, "init")?;
        let (kvsname, fullinit_reply) = match wire {
            Wire::V1 => {
                let r = up.exchange(&Msg::new(Wire::V1, "get_my_kvsname"), true).context("PMI get_my_kvsname")?.unwrap();
                check_rc(&r, "get_my_kvsname")?;
                (r.get("kvsname").context("the launcher's my_kvsname reply has no kvsname")?.to_string(), None)
            }
            Wire::V2 => {
                let mut full = Msg::new(Wire::V2, "fullinit");
                if let Ok(j) = std::env::var("PMI_JOBID") {
                    full = full.with("pmijobid", j);
                }
                let full = full.with("pmirank", env.rank).with("threaded", "FALSE");
                let fr = up.exchange(&full, true).context("PMI-2 fullinit with the launcher")?.unwrap();
                check_rc(&fr, "fullinit")?;
                let r = up.exchange(&Msg::new(Wire::V2, "job-getid"), true).context("PMI-2 job-getid")?.unwrap();
                check_rc(&r, "job-getid")?;
                (r.get("jobid").context("the launcher's job-getid reply has no jobid")?.to_string(), Some(fr))
            }
        };
        tracing::debug!(target: "pmi", "{tag}: launcher session {kvsname} (PMI-{v}), rank {} of {}", env.rank, env.size);
        Ok(Launcher { up: Mutex::new(up), kvsname, finalized: AtomicBool::new(false), tag, init_reply, wire, fullinit_reply })
    }

    /// The answer to a program's `init` (and PMI-2 `fullinit`), when it asks for the version the
    /// keeper initialised with: the launcher's own answer to the keeper. A PMI server takes one
    /// `init` per connection: Slurm's pmi2 plugin reads the first message of a task's `PMI_FD` as
    /// its `init` and rejects any later one without answering; Hydra answers every one alike.
    /// `Err`: the program asks for another version than the keeper's (it cannot be relayed).
    fn init_answer(&self, req: &Msg) -> Option<Result<Msg, VersionMismatch>> {
        match req.cmd() {
            "init" => {
                let asks = req.get("pmi_version").and_then(|v| v.trim().parse::<u32>().ok());
                Some(if asks == Some(wire_version(self.wire)) {
                    Ok(self.init_reply.clone())
                } else {
                    Err(VersionMismatch { asked: asks, keeper: wire_version(self.wire) })
                })
            }
            "fullinit" => self.fullinit_reply.clone().map(Ok),
            _ => None,
        }
    }

    fn call(&self, req: &Msg) -> Result<Msg> {
        let mut up = self.up.lock();
        let r = up.exchange(req, true).with_context(|| format!("PMI {} with the launcher", req.cmd()))?.unwrap();
        check_rc(&r, req.cmd())?;
        Ok(r)
    }

    pub fn put(&self, key: &str, value: &str) -> Result<()> {
        let req = match self.wire {
            Wire::V1 => Msg::new(Wire::V1, "put").with("kvsname", &self.kvsname).with("key", key).with("value", value),
            Wire::V2 => Msg::new(Wire::V2, "kvs-put").with("key", key).with("value", value),
        };
        self.call(&req).map(drop)
    }

    /// A value of the job's key-value space; under PMI-2 the launcher's `PMI_*` attributes are
    /// job attributes.
    pub fn get(&self, key: &str) -> Result<String> {
        let req = match self.wire {
            Wire::V1 => Msg::new(Wire::V1, "get").with("kvsname", &self.kvsname).with("key", key),
            Wire::V2 if key.starts_with("PMI_") => Msg::new(Wire::V2, "info-getjobattr").with("key", key),
            Wire::V2 => Msg::new(Wire::V2, "kvs-get").with("jobid", &self.kvsname).with("srcid", -1).with("key", key),
        };
        let r = self.call(&req)?;
        if r.get("found").is_some_and(|f| !f.eq_ignore_ascii_case("true")) {
            bail!("PMI get {key}: not found");
        }
        Ok(r.get("value").with_context(|| format!("PMI get {key}: no value"))?.to_string())
    }

    /// A barrier over every rank of the job (PMI-2: a fence, which also commits the puts).
    pub fn barrier(&self) -> Result<()> {
        let req = match self.wire {
            Wire::V1 => Msg::new(Wire::V1, "barrier_in"),
            Wire::V2 => Msg::new(Wire::V2, "kvs-fence"),
        };
        self.call(&req).map(drop)
    }

    /// Tells the launcher this rank ends cleanly. Gives up (returns false) when the connection is
    /// busy for longer than `wait` (a relay thread blocked in a barrier of a killed program).
    pub fn finalize(&self, wait: Duration) -> bool {
        if self.finalized.swap(true, Ordering::SeqCst) {
            return true;
        }
        let Some(mut up) = self.up.try_lock_for(wait) else { return false };
        let ok = up.exchange(&Msg::new(self.wire, "finalize"), true).is_ok();
        tracing::debug!(target: "pmi", "{}: finalize with the launcher: {}", self.tag, if ok { "ok" } else { "failed" });
        ok
    }

    /// Relays one request of the program.
    fn relay(&self, req: &Msg, await_reply: bool) -> io::Result<Option<Msg>> {
        self.up.lock().exchange(req, await_reply)
    }
}

fn check_rc(m: &Msg, what: &str) -> Result<()> {
    match m.get("rc") {
        Some(rc) if rc != "0" => {
            let msg = m.get("msg").or(m.get("errmsg")).unwrap_or("");
            bail!("the launcher answered PMI {what} with rc={rc} {msg}");
        }
        _ => Ok(()),
    }
}

/// Generation bookkeeping shared by all of the program's PMI connections.
#[derive(Debug, Default)]
struct GenState {
    /// The generation the next `init` starts.
    next: u32,
    /// Whether the program finalized its latest generation.
    finalized: bool,
    /// A checkpoint asked the program to release its library: the next `finalize` ends a
    /// generation, not the program (until the next `init`).
    releasing: bool,
}

/// Serves the program's PMI connections.
pub struct Relay {
    launcher: Arc<Launcher>,
    rules: Rules,
    gens: Mutex<GenState>,
}

impl Relay {
    /// `presented_kvsname`: the first launcher's kvsname (differs from the current one after a
    /// restart); `next_generation`: the generation the next `init` of the program starts.
    pub fn new(launcher: Arc<Launcher>, presented_kvsname: String, next_generation: u32) -> Arc<Relay> {
        let rules = Rules { presented_kvsname, real_kvsname: launcher.kvsname.clone() };
        Arc::new(Relay { launcher, rules, gens: Mutex::new(GenState { next: next_generation, finalized: false, releasing: false }) })
    }

    /// The generation the next lower half will be (what a restart continues from).
    pub fn next_generation(&self) -> u32 {
        self.gens.lock().next
    }

    /// Whether the program's latest lower half called `PMI_Finalize` to end the program (not to
    /// release the library for a checkpoint).
    pub fn program_finalized(&self) -> bool {
        self.gens.lock().finalized
    }

    /// The program is about to release its library for a checkpoint: its `finalize` until the
    /// next `init` is not the program's end. A program that dies in between (a failed
    /// checkpoint, a kill) did not end cleanly, and the launcher must hear so: Intel MPI's
    /// Hydra, told `finalize`, neither reaps that rank nor ends the job when it dies (measured:
    /// the job hung until killed), where MPICH's Hydra still tears it down.
    pub fn expect_release(&self) {
        self.gens.lock().releasing = true;
    }

    /// Serves one program connection on a thread until the program closes it. `announced`: the
    /// generation the agent declared for this connection (`PmiConnect`), if any.
    pub fn serve(self: &Arc<Self>, conn: UnixStream, announced: Option<u32>) -> io::Result<std::thread::JoinHandle<()>> {
        let me = Arc::clone(self);
        std::thread::Builder::new().name("pmi-relay".into()).spawn(move || {
            if let Err(e) = me.serve_conn(conn, announced) {
                tracing::warn!(target: "pmi", "{}: relay stopped: {e}", me.launcher.tag);
            }
        })
    }

    fn serve_conn(&self, mut conn: UnixStream, mut announced: Option<u32>) -> io::Result<()> {
        let mut buf = Vec::new();
        let mut generation = announced.unwrap_or_else(|| self.gens.lock().next.saturating_sub(1));
        let mut after_init = false;
        loop {
            let (msg, n) = loop {
                match pmi::split(&buf) {
                    Ok(Some(x)) => break x,
                    Ok(None) => {}
                    Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, format!("program sent {e}"))),
                }
                let mut chunk = [0u8; 4096];
                let n = match conn.read(&mut chunk) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::ConnectionReset => 0,
                    Err(e) => return Err(e),
                };
                if n == 0 {
                    return Ok(());
                }
                buf.extend_from_slice(&chunk[..n]);
            };
            buf.drain(..n);
            // A PMI-2 client's `fullinit` follows its `init`; one without an `init` before it
            // starts a generation itself.
            let starts = msg.cmd() == "init" || (msg.cmd() == "fullinit" && !after_init);
            after_init = msg.cmd() == "init";
            if starts {
                let mut g = self.gens.lock();
                generation = match announced.take() {
                    Some(a) => a,
                    None => g.next,
                };
                g.next = g.next.max(generation + 1);
                g.finalized = false;
                g.releasing = false;
            }
            let action = match self.launcher.init_answer(&msg) {
                Some(Ok(r)) => Action::Reply(r),
                Some(Err(why)) => {
                    crate::elog!("{}: {why}", self.launcher.tag);
                    let refuse = Msg::new(Wire::V1, "response_to_init").with("rc", -1).with("msg", "mpicr:PMI_version_mismatch");
                    // Said once above; the program's MPI_Init fails on the refusal.
                    return conn.write_all(&refuse.encode());
                }
                None => self.rules.request(&msg, generation),
            };
            let reply = match action {
                Action::Reply(r) => {
                    if msg.cmd() == "finalize" {
                        let mut g = self.gens.lock();
                        g.finalized = !g.releasing;
                    }
                    Some(r)
                }
                Action::Forward { msg: fwd, await_reply } => {
                    let resp = self.launcher.relay(&fwd, await_reply)?;
                    if tracing::enabled!(target: "pmi", tracing::Level::TRACE) {
                        tracing::trace!(target: "pmi", "{}: g{generation} {} -> {}", self.launcher.tag, fwd, resp.as_ref().map(|r| r.to_string()).unwrap_or_default());
                    }
                    resp.map(|r| self.rules.response(&msg, r))
                }
            };
            if let Some(r) = reply {
                if msg.cmd() == "finalize" {
                    tracing::trace!(target: "pmi", "{}: g{generation} finalize answered by the keeper", self.launcher.tag);
                }
                conn.write_all(&r.encode())?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// A launcher that answers each line the keeper sends with `answer(line)` (nothing for
    /// `None`), for as long as the keeper talks.
    fn scripted_launcher(answer: impl Fn(&str) -> Option<&'static str> + Send + 'static) -> Launcher {
        let (ours, theirs) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let mut w = theirs.try_clone().unwrap();
            for line in io::BufReader::new(theirs).lines() {
                let Ok(line) = line else { break };
                let Some(reply) = answer(&line) else { continue };
                if w.write_all(reply.as_bytes()).is_err() {
                    break;
                }
            }
        });
        let fd = std::os::fd::IntoRawFd::into_raw_fd(ours);
        Launcher::connect(PmiEnv { fd, rank: 0, size: 1 }, Wire::V1).unwrap()
    }

    /// Like Slurm's pmi2 plugin in PMI-2 mode: one `init` line, then length-prefixed PMI-2;
    /// records every command it reads.
    fn pmi2_launcher(seen: Arc<Mutex<Vec<String>>>) -> Launcher {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            loop {
                let (m, n) = match pmi::split(&buf) {
                    Ok(Some(x)) => x,
                    Ok(None) => {
                        let mut chunk = [0u8; 4096];
                        match theirs.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    }
                    Err(_) => return,
                };
                buf.drain(..n);
                seen.lock().push(m.to_string());
                let r = match m.cmd() {
                    "init" => Msg::new(Wire::V1, "response_to_init").with("rc", 0).with("pmi_version", 2).with("pmi_subversion", 0),
                    "fullinit" => Msg::new(Wire::V2, "fullinit-response").with("rc", 0).with("rank", 0).with("size", 1),
                    "job-getid" => Msg::new(Wire::V2, "job-getid-response").with("rc", 0).with("jobid", "18.0"),
                    "kvs-get" => Msg::new(Wire::V2, "kvs-get-response").with("rc", 0).with("found", "TRUE").with("value", "v"),
                    c => Msg::new(Wire::V2, &format!("{c}-response")).with("rc", 0),
                };
                if theirs.write_all(&r.encode()).is_err() {
                    return;
                }
            }
        });
        let fd = std::os::fd::IntoRawFd::into_raw_fd(ours);
        Launcher::connect(PmiEnv { fd, rank: 0, size: 1 }, Wire::V2).unwrap()
    }

    fn v2(body: &str) -> String {
        format!("{:>6}{body}", body.len())
    }

    /// A PMI-2 program after a restart under a new job: its `init` and `fullinit` are answered
    /// by the keeper, its job id is the first one, requests naming it reach the launcher with
    /// the new one, and keys of a later generation are prefixed.
    #[test]
    fn pmi2_is_relayed_with_the_first_job_id() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let l = pmi2_launcher(Arc::clone(&seen));
        assert_eq!(l.kvsname, "18.0");
        let relay = Relay::new(Arc::new(l), "7.0".into(), 1);
        let (mut prog, end) = UnixStream::pair().unwrap();
        prog.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        relay.serve(end, None).unwrap();
        assert!(ask(&mut prog, "cmd=init pmi_version=2 pmi_subversion=0\n").contains("response_to_init"));
        assert!(ask(&mut prog, &v2("cmd=fullinit;pmijobid=7.0;pmirank=0;threaded=FALSE;")).contains("fullinit-response;rc=0"));
        assert!(ask(&mut prog, &v2("cmd=job-getid;")).contains("jobid=7.0;"));
        assert!(ask(&mut prog, &v2("cmd=kvs-put;key=k;value=v;")).contains("kvs-put-response"));
        assert!(ask(&mut prog, &v2("cmd=kvs-get;jobid=7.0;srcid=-1;key=k;")).contains("value=v;"));
        assert!(ask(&mut prog, &v2("cmd=finalize;")).contains("finalize-response;rc=0"));
        let seen = seen.lock().clone();
        assert_eq!(seen.iter().filter(|m| m.contains("init")).count(), 2, "the keeper's init and fullinit only: {seen:?}");
        assert!(seen.iter().any(|m| m.contains("cmd=kvs-get;jobid=18.0;srcid=-1;key=g1-k;")), "{seen:?}");
        assert!(!seen.iter().any(|m| m.contains("finalize")), "{seen:?}");
    }

    #[test]
    fn the_wire_follows_the_programs_pmi_settings() {
        let with = |pairs: &'static [(&'static str, &'static str)]| wire_from(move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()));
        assert_eq!(with(&[]), Wire::V1);
        assert_eq!(with(&[("MPIR_CVAR_PMI_VERSION", "2")]), Wire::V2);
        assert_eq!(with(&[("MPICH_PMI_VERSION", " 2 ")]), Wire::V2);
        assert_eq!(with(&[("MPIR_CVAR_PMI_VERSION", "1"), ("I_MPI_PMI", "pmi2")]), Wire::V1);
        assert_eq!(with(&[("I_MPI_PMI", "PMI2")]), Wire::V2);
        assert_eq!(with(&[("I_MPI_PMI_LIBRARY", "/usr/lib/libpmi2.so.0")]), Wire::V2);
        assert_eq!(with(&[("I_MPI_PMI_LIBRARY", "/opt/pmi2/lib/libpmi.so")]), Wire::V1);
        assert_eq!(with(&[("I_MPI_PMI", "pmi1"), ("I_MPI_PMI_LIBRARY", "/usr/lib/libpmi2.so.0")]), Wire::V1);
    }

    /// A program that asks for another PMI version than the keeper's is refused at its `init`.
    #[test]
    fn another_pmi_version_is_refused() {
        let relay = Relay::new(Arc::new(fake_launcher()), "kvs_1_0".into(), 0);
        let (mut prog, end) = UnixStream::pair().unwrap();
        prog.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        relay.serve(end, None).unwrap();
        assert!(ask(&mut prog, "cmd=init pmi_version=2 pmi_subversion=0\n").contains("rc=-1"));
    }

    /// A launcher that answers `init` and `get_my_kvsname`, for as long as the keeper talks.
    fn fake_launcher() -> Launcher {
        scripted_launcher(|line| {
            Some(if line.contains("cmd=init") {
                "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"
            } else if line.contains("cmd=get_my_kvsname") {
                "cmd=my_kvsname kvsname=kvs_1_0 rc=0\n"
            } else {
                "cmd=finalize_ack rc=0\n"
            })
        })
    }

    /// Sends `line` on the program's connection and waits for the answer.
    fn ask(conn: &mut UnixStream, line: &str) -> String {
        conn.write_all(line.as_bytes()).unwrap();
        let mut buf = [0u8; 512];
        let n = conn.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// Like Slurm's pmi2 plugin: `init` only as the first message of the connection; any later
    /// one is refused without an answer (it would hang the program).
    #[test]
    fn the_programs_init_is_answered_by_the_keeper() {
        let inits = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let seen = Arc::clone(&inits);
        let l = scripted_launcher(move |line| {
            if line.starts_with("cmd=init") {
                (seen.fetch_add(1, Ordering::SeqCst) == 0).then_some("cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n")
            } else if line.contains("cmd=get_my_kvsname") {
                Some("cmd=my_kvsname rc=0 kvsname=17.0\n")
            } else {
                Some("cmd=barrier_out rc=0\n")
            }
        });
        let relay = Relay::new(Arc::new(l), "kvs_9_0".into(), 0);
        let (mut prog, end) = UnixStream::pair().unwrap();
        prog.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        relay.serve(end, None).unwrap();
        for _ in 0..2 {
            assert!(ask(&mut prog, "cmd=init pmi_version=1 pmi_subversion=1\n").contains("response_to_init rc=0"));
            assert!(ask(&mut prog, "cmd=get_my_kvsname\n").contains("kvsname=kvs_9_0"));
            assert!(ask(&mut prog, "cmd=barrier_in\n").contains("barrier_out"));
        }
        assert_eq!(inits.load(Ordering::SeqCst), 1, "the launcher saw the keeper's init only");
    }

    #[test]
    fn a_release_is_not_the_programs_end() {
        let relay = Relay::new(Arc::new(fake_launcher()), "kvs_1_0".into(), 0);
        let (mut prog, end) = UnixStream::pair().unwrap();
        relay.serve(end, None).unwrap();
        assert!(ask(&mut prog, "cmd=init pmi_version=1 pmi_subversion=1\n").contains("response_to_init"));
        // A checkpoint releases the library: its finalize does not end the program.
        relay.expect_release();
        assert!(ask(&mut prog, "cmd=finalize\n").contains("finalize_ack"));
        assert!(!relay.program_finalized());
        // The renewed library's init, then the program's own MPI_Finalize: its end.
        assert!(ask(&mut prog, "cmd=init pmi_version=1 pmi_subversion=1\n").contains("response_to_init"));
        assert!(ask(&mut prog, "cmd=finalize\n").contains("finalize_ack"));
        assert!(relay.program_finalized());
    }
}
