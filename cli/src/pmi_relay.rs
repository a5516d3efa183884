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
            v.with_context(|| format!("PMI_FD is set but {k} is not"))?
                .trim()
                .parse()
                .with_context(|| format!("{k} is not a number"))
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
    /// The launcher's answer to the keeper's own `init` (PMI 1.1).
    init_reply: Msg,
}

impl Launcher {
    /// Takes over the launcher's PMI fd and initialises PMI-1 on it.
    pub fn connect(env: PmiEnv) -> Result<Launcher> {
        // SAFETY: PMI_FD names a descriptor the launcher opened for this process; nothing else
        // in the keeper owns it, so the keeper takes ownership here, once.
        let fd = unsafe { OwnedFd::from_raw_fd(env.fd) };
        let sock = UnixStream::from(fd);
        let mut up = Upstream { sock, buf: Vec::new() };
        let tag = format!("mpicr[{}] pmi", env.rank);
        let init = Msg::new(Wire::V1, "init").with("pmi_version", 1).with("pmi_subversion", 1);
        let init_reply = up.exchange(&init, true).context("PMI init with the launcher")?.unwrap();
        check_rc(&init_reply, "init")?;
        let r = up.exchange(&Msg::new(Wire::V1, "get_my_kvsname"), true).context("PMI get_my_kvsname")?.unwrap();
        check_rc(&r, "get_my_kvsname")?;
        let kvsname = r.get("kvsname").context("the launcher's my_kvsname reply has no kvsname")?.to_string();
        tracing::debug!(target: "pmi", "{tag}: launcher session {kvsname}, rank {} of {}", env.rank, env.size);
        Ok(Launcher { up: Mutex::new(up), kvsname, finalized: AtomicBool::new(false), tag, init_reply })
    }

    /// The answer to a program's `init`, when it asks for the version the keeper initialised
    /// with: the launcher's own answer to the keeper. A PMI server takes one `init` per
    /// connection: Slurm's pmi2 plugin reads the first message of a task's `PMI_FD` as its
    /// `init` and rejects any later one without answering; Hydra answers every one alike.
    /// `None`: another version, for the launcher to answer.
    fn init_answer(&self, req: &Msg) -> Option<Msg> {
        let asks = |k: &str| req.get(k).and_then(|v| v.trim().parse::<u32>().ok());
        (matches!(req, Msg::Cmd { wire: Wire::V1, .. }) && asks("pmi_version") == Some(1) && asks("pmi_subversion") == Some(1))
            .then(|| self.init_reply.clone())
    }

    fn call(&self, req: &Msg) -> Result<Msg> {
        let mut up = self.up.lock();
        let r = up.exchange(req, true).with_context(|| format!("PMI {} with the launcher", req.cmd()))?.unwrap();
        check_rc(&r, req.cmd())?;
        Ok(r)
    }

    pub fn put(&self, key: &str, value: &str) -> Result<()> {
        let req = Msg::new(Wire::V1, "put").with("kvsname", &self.kvsname).with("key", key).with("value", value);
        self.call(&req).map(drop)
    }

    pub fn get(&self, key: &str) -> Result<String> {
        let req = Msg::new(Wire::V1, "get").with("kvsname", &self.kvsname).with("key", key);
        let r = self.call(&req)?;
        Ok(r.get("value").with_context(|| format!("PMI get {key}: no value"))?.to_string())
    }

    /// A barrier over every rank of the job.
    pub fn barrier(&self) -> Result<()> {
        self.call(&Msg::new(Wire::V1, "barrier_in")).map(drop)
    }

    /// Tells the launcher this rank ends cleanly. Gives up (returns false) when the connection is
    /// busy for longer than `wait` (a relay thread blocked in a barrier of a killed program).
    pub fn finalize(&self, wait: Duration) -> bool {
        if self.finalized.swap(true, Ordering::SeqCst) {
            return true;
        }
        let Some(mut up) = self.up.try_lock_for(wait) else { return false };
        let ok = up.exchange(&Msg::new(Wire::V1, "finalize"), true).is_ok();
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
            if msg.cmd() == "init" {
                let mut g = self.gens.lock();
                generation = match announced.take() {
                    Some(a) => a,
                    None => g.next,
                };
                g.next = g.next.max(generation + 1);
                g.finalized = false;
                g.releasing = false;
            }
            let action = match (msg.cmd(), self.launcher.init_answer(&msg)) {
                ("init", Some(r)) => Action::Reply(r),
                _ => self.rules.request(&msg, generation),
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
        Launcher::connect(PmiEnv { fd, rank: 0, size: 1 }).unwrap()
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
