//! The job coordinator, hosted by the rank-0 keeper. Every keeper (rank 0's too) and every
//! `mpicr checkpoint` client connects over TCP and authenticates (see `coord_wire`).
//!
//! One checkpoint of epoch E (phases; any failure or timeout aborts on every rank):
//! 1. `Begin` to every keeper; each asks its agent (`Checkpoint`) and forwards its `Counters`.
//! 2. `Targets`: per communicator, the maximum counter over the ranks that reported it. A rank
//!    that cannot reach its targets without starting a collective past one (another rank ran
//!    ahead through collectives it could finish alone) says `Wants`: those targets are raised and
//!    sent to every rank as the next round, whose send counts replace the earlier ones.
//!    `MPI_Comm_create_group` keys (collective over a group, not a communicator) come with
//!    their members; each member gets the key's target, also one that never reported it.
//! 3. `SendCounts` of the last round from all; each rank gets `Expected`, the transposition
//!    (what every peer sent it).
//! 4. `Drained` from all, then `Release`: a job-wide barrier, since releasing the library (and
//!    renewing it after an abort) is collective: either every rank releases or none does.
//! 5. `ReadyToDump` from all, then `Dump`: each keeper runs CRIU (`--leave-running`), lets the
//!    program run on and says `Running`. Once every rank of a node has, `NodeDumped` to them:
//!    they seal their images now, no longer taking CPU from that node's dumps still running.
//! 6. `Dumped` from all (each keeper sends it once its images are sealed, after the copy from
//!    its `--stage-dir`): MANIFEST.json (atomic rename), then `latest`. The epoch now exists;
//!    `--keep N` then removes older epochs (never a parent a kept incremental epoch needs).
//! 7. `Resume` (or, for `--stop`, `Stop`: the keepers end their programs and exit 0).
//!
//! A rank whose program ends after its part is sealed (`Dumped`, then `Exiting`) no longer
//! counts against the checkpoint: it counts as resumed. The rank-0 keeper, whose process hosts
//! this coordinator, waits in [`settle`] for the commit (or a clean failure) before it exits.
//!
//! Keepers started with `--no-mpi` have no agent: they answer `Begin` with `ReadyToDump` at once.

use crate::coord_wire::{self, AgentInfo, CkptResult, ClientRequest, FromCoord, Hello, KeeperHello, LiveStatus, Mode, ToClient, ToCoord};
use crate::images::{self, CkptDir, JobInfo, Manifest, RankManifest};
use anyhow::{bail, Context, Result};
use coord_wire::SecureTx;
use mpicr_proto::CommGid;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const DEFAULT_CKPT_TIMEOUT: Duration = Duration::from_secs(600);
const RESTART_TIMEOUT: Duration = Duration::from_secs(600);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once before they authenticate; while this many are in their handshake,
/// the next ones wait in the listen backlog (each handshake ends within `UNAUTHENTICATED_DEADLINE`).
const MAX_UNAUTHENTICATED: usize = 64;

/// `(communicator, peer world rank, message count)` per rank.
pub type PeerCounts = BTreeMap<i32, Vec<(CommGid, i32, u64)>>;

/// Per communicator, the maximum counter over the ranks reporting it.
pub fn max_targets(counters: &BTreeMap<i32, Vec<(CommGid, u64)>>) -> HashMap<CommGid, u64> {
    let mut max: HashMap<CommGid, u64> = HashMap::new();
    for list in counters.values() {
        for &(g, c) in list {
            let m = max.entry(g).or_insert(0);
            *m = (*m).max(c);
        }
    }
    max
}

/// The first round of targets: each rank receives those of the communicators it reported, in
/// its own order.
pub fn targets_per_rank(counters: &BTreeMap<i32, Vec<(CommGid, u64)>>, max: &HashMap<CommGid, u64>) -> BTreeMap<i32, Vec<(CommGid, u64)>> {
    counters.iter().map(|(&r, list)| (r, list.iter().map(|&(g, _)| (g, max[&g])).collect())).collect()
}

/// Raises `targets` to what a rank wants; returns the targets that grew (a communicator the
/// coordinator did not know yet counts from 0), in a stable order.
pub fn raise_targets(targets: &mut HashMap<CommGid, u64>, wants: &[(CommGid, u64)]) -> Vec<(CommGid, u64)> {
    let mut raised = BTreeMap::new();
    for &(g, n) in wants {
        let t = targets.entry(g).or_insert(0);
        if n > *t {
            *t = n;
            raised.insert(g, n);
        }
    }
    raised.into_iter().collect()
}

/// The targets a rank waits for without knowing them: of communicators it made after reporting
/// its counters (`known` is false), which other ranks' counts already set as far as it wants to
/// go. It waits at the first collective of one (MPI_File_open's communicator, say, followed at
/// once by MPI_File_set_view), and its peers may already be inside that collective.
pub fn untold_targets(targets: &HashMap<CommGid, u64>, wants: &[(CommGid, u64)], known: impl Fn(CommGid) -> bool) -> Vec<(CommGid, u64)> {
    wants.iter().filter_map(|&(g, n)| targets.get(&g).filter(|&&t| t >= n && !known(g)).map(|&t| (g, t))).collect()
}

/// Of the communicators a rank made without being given a target (`untold`: its counts), those
/// it is behind on, with their targets: other ranks reported or asked for more collectives on
/// them than it started.
pub fn behind_targets(targets: &HashMap<CommGid, u64>, untold: &[(CommGid, u64)]) -> Vec<(CommGid, u64)> {
    untold.iter().filter_map(|&(g, n)| targets.get(&g).filter(|&&t| t > n).map(|&t| (g, t))).collect()
}

/// The members (world ranks) of each `MPI_Comm_create_group` key reported so far.
pub type GroupMembers = HashMap<CommGid, Vec<i32>>;

/// Per rank, the targets of the `MPI_Comm_create_group` keys among `keys` that it is a member
/// of (reported or not: a member that has not called it yet must run on until it did; one
/// blocked in the call waits for it). Every rank gets an entry, possibly empty.
pub fn group_targets(
    members: &GroupMembers,
    targets: &HashMap<CommGid, u64>,
    keys: impl Iterator<Item = CommGid>,
    size: i32,
) -> BTreeMap<i32, Vec<(CommGid, u64)>> {
    let mut out: BTreeMap<i32, BTreeMap<CommGid, u64>> = (0..size).map(|r| (r, BTreeMap::new())).collect();
    for g in keys {
        let (Some(m), Some(&t)) = (members.get(&g), targets.get(&g)) else { continue };
        for r in m {
            if let Some(per) = out.get_mut(r) {
                per.insert(g, t);
            }
        }
    }
    out.into_iter().map(|(r, m)| (r, m.into_iter().collect())).collect()
}

/// Transposes per-sender `(comm, destination, count)` into per-receiver `(comm, source, count)`.
/// Every rank of `0..size` gets an entry (possibly empty).
pub fn transpose(sent: &PeerCounts, size: i32) -> Result<PeerCounts> {
    let mut acc: BTreeMap<i32, BTreeMap<(CommGid, i32), u64>> = (0..size).map(|r| (r, BTreeMap::new())).collect();
    for (&src, list) in sent {
        for &(g, dst, n) in list {
            let Some(per) = acc.get_mut(&dst) else {
                bail!("rank {src} reported messages to rank {dst}, which is not in this {size}-rank job");
            };
            *per.entry((g, src)).or_insert(0) += n;
        }
    }
    Ok(acc.into_iter().map(|(r, m)| (r, m.into_iter().map(|((g, s), n)| (g, s, n)).collect())).collect())
}

pub struct Config {
    pub dir: CkptDir,
    pub job: JobInfo,
    pub interval: Option<Duration>,
    /// `mpicr restart`: the epoch every rank must restore before anyone resumes.
    pub restart_epoch: Option<u64>,
    pub verbose: bool,
    /// The job's key (`job.key`): signs every manifest.
    pub key: Vec<u8>,
    /// The address to listen on (see `keeper::coordinator_bind`).
    pub bind: String,
    /// `--stop-before`: when to checkpoint and stop the job (its time limit comes).
    pub stop_at: Option<Instant>,
    /// `--keep N`: complete epochs kept after each commit.
    pub keep: Option<u64>,
}

/// Binds the coordinator's port and starts its threads. Returns what keepers need to connect.
pub fn start(cfg: Config, secret: Vec<u8>) -> Result<coord_wire::CoordInfo> {
    let bind = cfg.bind.clone();
    let listener = TcpListener::bind((bind.as_str(), 0)).with_context(|| format!("binding the coordinator to {bind}"))?;
    let port = listener.local_addr()?.port();
    let info = coord_wire::CoordInfo {
        job_id: cfg.job.job_id.clone(),
        host: crate::sys::hostname(),
        port,
        secret: images::hex(&secret),
        pid: std::process::id(),
        bind: Some(bind),
    };
    let (tx, rx) = mpsc::channel();
    {
        let tx = tx.clone();
        std::thread::Builder::new().name("coord-accept".into()).spawn(move || accept_loop(listener, secret, tx))?;
    }
    if let Some(every) = cfg.interval {
        let tx = tx.clone();
        std::thread::Builder::new().name("coord-timer".into()).spawn(move || loop {
            std::thread::sleep(every);
            if tx.send(Event::Tick).is_err() {
                return;
            }
        })?;
    }
    if let Some(at) = cfg.stop_at {
        let tx = tx.clone();
        // Until the stop begins: a checkpoint in progress at that instant delays it.
        std::thread::Builder::new().name("coord-limit".into()).spawn(move || {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            while tx.send(Event::TimeLimit).is_ok() {
                std::thread::sleep(Duration::from_secs(1));
            }
        })?;
    }
    let _ = EVENTS.set(Mutex::new(tx));
    std::thread::Builder::new().name("coordinator".into()).spawn(move || Coordinator::new(cfg).run(rx))?;
    Ok(info)
}

/// The events of this process's coordinator (one per process: the rank-0 keeper's).
static EVENTS: OnceLock<Mutex<Sender<Event>>> = OnceLock::new();

/// How the checkpoint in progress when the hosting keeper's program ended came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// No checkpoint was in progress (or this process hosts no coordinator).
    Idle,
    Committed(u64),
    /// Failed (no manifest: the previous epoch is the one to restart), with the reason.
    Failed(u64, String),
}

/// The hosting keeper's program ended cleanly: waits (at most `limit`) until every rank has
/// joined, so that a rank whose keeper started late (a short program: `mpicr run --no-mpi --
/// echo`, whose rank 0 ended before rank 1 connected) does not find the coordinator gone and fail.
/// `true` when they all joined.
pub fn all_joined(limit: Duration) -> bool {
    let Some(tx) = EVENTS.get() else { return true };
    let (reply, rx) = mpsc::channel();
    let sent = tx.lock().is_ok_and(|t| t.send(Event::AllJoined { reply }).is_ok());
    sent && rx.recv_timeout(limit).is_ok()
}

/// The hosting keeper's program ended: a checkpoint in progress (its images dumped, their
/// sealing or the other ranks' still running) must be committed, or failed cleanly, before
/// this process and the coordinator with it end. Waits for that at most `limit`; the
/// coordinator fails the checkpoint itself when the limit comes.
pub fn settle(limit: Duration) -> Settled {
    let Some(tx) = EVENTS.get() else { return Settled::Idle };
    let (reply, rx) = mpsc::channel();
    let until = Instant::now() + limit;
    // A coordinator that is gone (its channel closed, or poisoned) has nothing to settle.
    let sent = tx.lock().is_ok_and(|t| t.send(Event::Settle { until, reply }).is_ok());
    if !sent {
        return Settled::Idle;
    }
    // The coordinator answers at `until` at the latest; the margin covers its abort.
    rx.recv_timeout(limit + Duration::from_secs(5)).unwrap_or(Settled::Idle)
}

enum Event {
    KeeperJoined {
        conn: u64,
        hello: KeeperHello,
        writer: SecureTx,
    },
    FromKeeper {
        conn: u64,
        msg: ToCoord,
    },
    KeeperGone {
        conn: u64,
    },
    Client {
        req: ClientRequest,
        stream: SecureTx,
    },
    Tick,
    /// `--stop-before`: the job's time limit is near.
    TimeLimit,
    /// The hosting keeper's program ended cleanly (see [`all_joined`]).
    AllJoined {
        reply: Sender<()>,
    },
    /// The hosting keeper's program ended (see [`settle`]).
    Settle {
        until: Instant,
        reply: Sender<Settled>,
    },
}

/// Counts a connection that has not authenticated yet, until dropped.
struct Unauthenticated(Arc<AtomicUsize>);

impl Drop for Unauthenticated {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(listener: TcpListener, secret: Vec<u8>, tx: Sender<Event>) {
    let mut next_conn = 0u64;
    let pending = Arc::new(AtomicUsize::new(0));
    loop {
        // Strangers cannot make the coordinator start unbounded threads: past the cap, the
        // next connection is accepted only once a handshake in progress ends.
        while pending.load(Ordering::SeqCst) >= MAX_UNAUTHENTICATED {
            std::thread::sleep(Duration::from_millis(5));
        }
        let Ok((stream, _)) = listener.accept() else { continue };
        pending.fetch_add(1, Ordering::SeqCst);
        let guard = Unauthenticated(Arc::clone(&pending));
        next_conn += 1;
        let conn = next_conn;
        let tx = tx.clone();
        let secret = secret.clone();
        let _ = std::thread::Builder::new().name("coord-conn".into()).spawn(move || serve_conn(conn, stream, &secret, tx, guard));
    }
}

fn serve_conn(conn: u64, s: std::net::TcpStream, secret: &[u8], tx: Sender<Event>, guard: Unauthenticated) {
    s.set_nodelay(true).ok();
    // The handshake and the Hello, together, within one deadline.
    let deadline = Instant::now() + coord_wire::UNAUTHENTICATED_DEADLINE;
    let Ok((writer, mut reader)) = coord_wire::accept_handshake(s, secret, deadline) else { return };
    let hello: Hello = match coord_wire::recv(&mut reader) {
        Ok(Some(h)) => h,
        _ => return,
    };
    drop(guard);
    reader.stream().set_read_timeout(None).ok();
    writer.stream().set_write_timeout(Some(WRITE_TIMEOUT)).ok();
    match hello {
        Hello::Client(req) => {
            let _ = tx.send(Event::Client { req, stream: writer });
        }
        Hello::Keeper(hello) => {
            if tx.send(Event::KeeperJoined { conn, hello, writer }).is_err() {
                return;
            }
            loop {
                match coord_wire::recv::<ToCoord>(&mut reader) {
                    Ok(Some(msg)) => {
                        if tx.send(Event::FromKeeper { conn, msg }).is_err() {
                            return;
                        }
                    }
                    _ => {
                        let _ = tx.send(Event::KeeperGone { conn });
                        return;
                    }
                }
            }
        }
    }
}

struct Rank {
    conn: u64,
    writer: SecureTx,
    hello: KeeperHello,
    agent: Option<AgentInfo>,
    restored: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Counters,
    SendCounts,
    Drain,
    Ready,
    Dumping,
    Resuming,
}

/// Who asked for a checkpoint.
enum Requester {
    Client(SecureTx),
    Internal(&'static str),
}

struct ReadyInfo {
    drained_msgs: u64,
    drained_bytes: u64,
    state_bytes: u64,
    timings: Vec<(String, u64)>,
}

struct Ckpt {
    epoch: u64,
    stop: bool,
    requester: Requester,
    t0: Instant,
    deadline: Instant,
    phase: Phase,
    counters: BTreeMap<i32, Vec<(CommGid, u64)>>,
    /// The collective targets sent so far (every round's), and the current round.
    targets: HashMap<CommGid, u64>,
    round: u32,
    /// Communicators whose targets went to every rank in a later round.
    told: BTreeSet<CommGid>,
    /// The members of the `MPI_Comm_create_group` keys reported (counters or wants).
    groups: GroupMembers,
    /// Send counts of the current round.
    sent: BTreeMap<i32, Vec<(CommGid, i32, u64)>>,
    drained: BTreeSet<i32>,
    ready: BTreeMap<i32, ReadyInfo>,
    dumped: BTreeMap<i32, RankManifest>,
    resumed: BTreeSet<i32>,
    /// When the last rank reported its MPI library renewed (`Manifest::mpi_back_us`).
    last_resumed: Option<Instant>,
    /// Each rank's renewal (microseconds), from its `Resumed`.
    renew_us: BTreeMap<i32, u64>,
    /// Ranks whose program runs again after their dump (checkpoint-and-continue).
    running: BTreeSet<i32>,
    /// When the last of them did: the stop time the program saw ends there.
    last_running: Option<Instant>,
    marks: Vec<(String, u64)>,
    last_mark: Instant,
    manifest: Option<Manifest>,
}

impl Ckpt {
    fn mark(&mut self, name: &str) {
        let now = Instant::now();
        self.marks.push((name.to_string(), (now - self.last_mark).as_micros() as u64));
        self.last_mark = now;
    }
}

struct Coordinator {
    cfg: Config,
    ranks: BTreeMap<i32, Rank>,
    ckpt: Option<Ckpt>,
    /// Restart handshake still pending.
    restart_pending: Option<(u64, Instant)>,
    job_updated: bool,
    /// Test hook (`MPICR_TEST_COORD_FAULT`), used once; see [`Fault`].
    fault: Option<Fault>,
    /// The hook made the coordinator vanish: the event loop ends.
    vanished: bool,
    /// A checkpoint asked for before every rank's program initialised MPI under mpicr: it starts
    /// as soon as they have, within its own timeout.
    waiting: Option<WaitingRequest>,
    /// Ranks that joined at some time: a rank missing now that had joined has ended, and a
    /// request does not wait for it.
    ever_joined: BTreeSet<i32>,
    /// The `--stop-before` checkpoint was asked for (once).
    limit_stop: bool,
    /// Told how the checkpoint in progress ends (see [`settle`]).
    settle: Vec<Sender<Settled>>,
    /// Told once every rank has joined (see [`all_joined`]).
    all_joined: Vec<Sender<()>>,
}

/// A checkpoint request parked until every rank has an agent (see [`Coordinator::waiting`]).
struct WaitingRequest {
    stop: bool,
    requester: Requester,
    /// The request's deadline: the wait and the checkpoint together stay within its timeout.
    until: Instant,
    timeout: Duration,
}

/// A fault the tests inject (`MPICR_TEST_COORD_FAULT=stall:MSG` or `vanish:MSG`, MSG one of
/// `targets`, `expected`, `release`, `dump`): at the first checkpoint, instead of sending MSG the
/// coordinator sends nothing (the agents' deadlines must end the checkpoint) or drops every
/// keeper connection and stops (a lost coordinator).
struct Fault {
    vanish: bool,
    at: String,
}

impl Fault {
    fn from_env() -> Option<Fault> {
        let v = std::env::var("MPICR_TEST_COORD_FAULT").ok()?;
        let (kind, at) = v.split_once(':')?;
        Some(Fault { vanish: kind == "vanish", at: at.to_string() })
    }
}

impl Coordinator {
    fn new(cfg: Config) -> Coordinator {
        let restart_pending = cfg.restart_epoch.map(|e| (e, Instant::now() + RESTART_TIMEOUT));
        Coordinator {
            cfg,
            ranks: BTreeMap::new(),
            ckpt: None,
            restart_pending,
            job_updated: false,
            fault: Fault::from_env(),
            vanished: false,
            waiting: None,
            ever_joined: BTreeSet::new(),
            limit_stop: false,
            settle: Vec::new(),
            all_joined: Vec::new(),
        }
    }

    fn size(&self) -> i32 {
        self.cfg.job.ranks
    }

    fn log(&self, msg: &str) {
        crate::elog!("mpicr: {msg}");
    }

    fn run(mut self, rx: Receiver<Event>) {
        loop {
            let deadline = [self.ckpt.as_ref().map(|c| c.deadline), self.restart_pending.map(|(_, d)| d), self.waiting.as_ref().map(|w| w.until)]
                .into_iter()
                .flatten()
                .min();
            let ev = match deadline {
                Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                    Ok(ev) => ev,
                    Err(RecvTimeoutError::Timeout) => {
                        self.on_timeout();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                },
                None => match rx.recv() {
                    Ok(ev) => ev,
                    Err(_) => return,
                },
            };
            self.handle(ev);
            if self.vanished {
                return;
            }
        }
    }

    /// Whether the test hook replaces sending `msg` (see [`Fault`]).
    fn injected_fault(&mut self, msg: &str) -> bool {
        let Some(f) = self.fault.take_if(|f| f.at == msg) else { return false };
        self.log(&format!("test fault: {} instead of sending {msg}", if f.vanish { "vanishing" } else { "stalling" }));
        if f.vanish {
            for k in self.ranks.values() {
                let _ = k.writer.stream().shutdown(std::net::Shutdown::Both);
            }
            self.ranks.clear();
            self.ckpt = None;
            self.vanished = true;
        }
        true
    }

    fn on_timeout(&mut self) {
        let now = Instant::now();
        if let Some((epoch, d)) = self.restart_pending {
            if now >= d {
                let missing: Vec<String> = (0..self.size()).filter(|r| !self.ranks.get(r).is_some_and(|k| k.restored)).map(|r| r.to_string()).collect();
                let reason = format!("restart of epoch {epoch} timed out waiting for rank(s) {}", missing.join(", "));
                self.log(&reason);
                self.broadcast(&FromCoord::Abort { epoch, reason });
                self.restart_pending = None;
            }
        }
        if self.waiting.as_ref().is_some_and(|w| now >= w.until) {
            if let Some(w) = self.waiting.take() {
                let reason = self.not_ready().unwrap_or_default();
                let msg = format!("cannot checkpoint: {reason} after waiting {}s", w.timeout.as_secs());
                self.answer_error(w.requester, msg);
            }
        }
        if let Some(c) = &self.ckpt {
            if now >= c.deadline {
                let waiting = self.waiting_for();
                let phase = c.phase;
                self.abort(format!("timed out in phase {phase:?} waiting for rank(s) {waiting}"));
            }
        }
    }

    fn waiting_for(&self) -> String {
        let Some(c) = &self.ckpt else { return String::new() };
        let done: BTreeSet<i32> = match c.phase {
            Phase::Counters => c.counters.keys().copied().collect(),
            Phase::SendCounts => c.sent.keys().copied().collect(),
            Phase::Drain => c.drained.clone(),
            Phase::Ready => c.ready.keys().copied().collect(),
            Phase::Dumping => c.dumped.keys().copied().collect(),
            Phase::Resuming => c.resumed.clone(),
        };
        (0..self.size()).filter(|r| !done.contains(r)).map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
    }

    fn rank_of(&self, conn: u64) -> Option<i32> {
        self.ranks.iter().find(|(_, k)| k.conn == conn).map(|(&r, _)| r)
    }

    fn send_to(&mut self, rank: i32, msg: &FromCoord) -> bool {
        let Some(k) = self.ranks.get_mut(&rank) else { return false };
        coord_wire::send(&mut k.writer, msg).is_ok()
    }

    fn broadcast(&mut self, msg: &FromCoord) {
        let ranks: Vec<i32> = self.ranks.keys().copied().collect();
        for r in ranks {
            self.send_to(r, msg);
        }
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::KeeperJoined { conn, hello, writer } => self.on_join(conn, hello, writer),
            Event::KeeperGone { conn } => {
                if let Some(r) = self.rank_of(conn) {
                    self.ranks.remove(&r);
                    // A waiting request no longer waits for a rank that ended: it fails now.
                    self.start_waiting();
                    if self.ckpt.is_some() && !self.rank_ended(r) {
                        self.abort(format!("rank {r} left the job"));
                    }
                    if let Some((epoch, _)) = self.restart_pending {
                        let reason = format!("rank {r} left the job during the restart handshake");
                        self.broadcast(&FromCoord::Abort { epoch, reason });
                        self.restart_pending = None;
                    }
                }
            }
            Event::FromKeeper { conn, msg } => {
                if let Some(r) = self.rank_of(conn) {
                    self.on_keeper(r, msg);
                }
            }
            Event::Client { req, mut stream } => match req {
                ClientRequest::Status => {
                    let st = self.live_status();
                    let _ = coord_wire::send(&mut stream, &ToClient::Status(st));
                }
                ClientRequest::Checkpoint { stop, timeout_ms } => {
                    let timeout = Duration::from_millis(timeout_ms.max(1000)).min(crate::args::MAX_TIMEOUT);
                    self.request(stop, Requester::Client(stream), timeout);
                }
            },
            Event::Tick => {
                if self.ckpt.is_none() && self.waiting.is_none() {
                    self.request(false, Requester::Internal("periodic"), DEFAULT_CKPT_TIMEOUT);
                }
            }
            Event::AllJoined { reply } => {
                if self.ever_joined.len() as i32 == self.size() {
                    let _ = reply.send(());
                } else {
                    self.all_joined.push(reply);
                }
            }
            Event::Settle { until, reply } => match self.ckpt.as_mut() {
                None => {
                    let _ = reply.send(Settled::Idle);
                }
                Some(c) => {
                    c.deadline = c.deadline.min(until);
                    self.settle.push(reply);
                }
            },
            Event::TimeLimit => {
                if !self.limit_stop && self.ckpt.is_none() && self.waiting.is_none() && self.restart_pending.is_none() {
                    self.log("the job's time limit is near (--stop-before): checkpoint and stop");
                    self.limit_stop = true;
                    self.request(true, Requester::Internal("time-limit"), DEFAULT_CKPT_TIMEOUT);
                }
            }
        }
    }

    /// Rank `r`'s program ended (its keeper said `Exiting`, or left) during the checkpoint in
    /// progress. `true` when the checkpoint goes on without it: its images are dumped and
    /// sealed (`Dumped`, which its keeper sends before it exits), so the epoch can still be
    /// committed; the rank then counts as resumed.
    fn rank_ended(&mut self, r: i32) -> bool {
        let size = self.size();
        let verbose = self.cfg.verbose;
        let Some(c) = self.ckpt.as_mut() else { return true };
        if !c.dumped.contains_key(&r) || !matches!(c.phase, Phase::Dumping | Phase::Resuming) {
            return false;
        }
        let epoch = c.epoch;
        let mut done = false;
        if c.resumed.insert(r) && c.resumed.len() as i32 == size {
            c.last_resumed.get_or_insert_with(Instant::now);
            if c.phase == Phase::Resuming {
                c.mark("resume");
                done = true;
            }
        }
        if verbose {
            self.log(&format!("coordinator: the program of rank {r} ended after its part of checkpoint {epoch} was sealed"));
        }
        if done {
            self.finish();
        }
        true
    }

    /// Tells whoever waits in [`settle`] how the checkpoint ended.
    fn settled(&mut self, how: Settled) {
        for tx in self.settle.drain(..) {
            let _ = tx.send(how.clone());
        }
    }

    fn live_status(&self) -> LiveStatus {
        LiveStatus {
            job_id: self.cfg.job.job_id.clone(),
            size: self.size(),
            registered: self.ranks.keys().copied().collect(),
            agents: self.ranks.iter().filter_map(|(&r, k)| k.agent.clone().map(|a| (r, a))).collect(),
            in_progress: self.ckpt.as_ref().map(|c| c.epoch),
            restart_pending: self.restart_pending.map(|(e, _)| e),
        }
    }

    fn on_join(&mut self, conn: u64, hello: KeeperHello, mut writer: SecureTx) {
        let refuse = |w: &mut SecureTx, reason: String| {
            let _ = coord_wire::send(w, &FromCoord::Refused { reason });
        };
        if hello.job_id != self.cfg.job.job_id {
            return refuse(&mut writer, format!("this coordinator serves job {}, not {}", self.cfg.job.job_id, hello.job_id));
        }
        if hello.size != self.size() || hello.rank < 0 || hello.rank >= self.size() {
            return refuse(&mut writer, format!("rank {} of {} does not fit this {}-rank job", hello.rank, hello.size, self.size()));
        }
        if self.ranks.contains_key(&hello.rank) {
            return refuse(&mut writer, format!("rank {} is already connected", hello.rank));
        }
        if hello.restart_epoch != self.cfg.restart_epoch {
            let show = |e: Option<u64>| e.map_or("a fresh run".to_string(), |e| format!("epoch {e}"));
            return refuse(
                &mut writer,
                format!("rank {} restores {} but rank 0 restores {}", hello.rank, show(hello.restart_epoch), show(self.cfg.restart_epoch)),
            );
        }
        if coord_wire::send(&mut writer, &FromCoord::Welcome { job_id: self.cfg.job.job_id.clone() }).is_err() {
            return;
        }
        if self.cfg.verbose {
            self.log(&format!("coordinator: rank {} joined (host {}, program pid {})", hello.rank, hello.host, hello.program_pid));
        }
        let rank = hello.rank;
        self.ranks.insert(rank, Rank { conn, writer, hello, agent: None, restored: false });
        self.ever_joined.insert(rank);
        if self.ever_joined.len() as i32 == self.size() {
            for w in self.all_joined.drain(..) {
                let _ = w.send(());
            }
        }
        self.start_waiting();
    }

    fn on_keeper(&mut self, r: i32, msg: ToCoord) {
        tracing::debug!(target: "coordinator", "rank {r} -> {msg:?}");
        match msg {
            ToCoord::AgentHello(info) => {
                self.note_agent(&info);
                if let Some(k) = self.ranks.get_mut(&r) {
                    k.agent = Some(info);
                }
                self.start_waiting();
            }
            ToCoord::Request { stop } => {
                let why = if stop { "requested (stop)" } else { "requested" };
                if self.ckpt.is_none() && self.waiting.is_none() {
                    self.request(stop, Requester::Internal(why), DEFAULT_CKPT_TIMEOUT);
                }
            }
            ToCoord::Restored { epoch } => {
                if let Some(k) = self.ranks.get_mut(&r) {
                    k.restored = true;
                }
                if let Some((e, _)) = self.restart_pending {
                    if e == epoch && self.ranks.len() as i32 == self.size() && self.ranks.values().all(|k| k.restored) {
                        self.restart_pending = None;
                        if self.cfg.verbose {
                            self.log(&format!("coordinator: all {} ranks restored epoch {epoch}; resuming", self.size()));
                        }
                        self.broadcast(&FromCoord::Go { epoch });
                    }
                }
            }
            ToCoord::Exiting { .. } => {
                if self.ckpt.is_some() && !self.rank_ended(r) {
                    self.abort(format!("the program of rank {r} ended during the checkpoint"));
                }
            }
            ToCoord::Failed { epoch, reason } => {
                if let Some((e, _)) = self.restart_pending {
                    if e == epoch {
                        let reason = format!("rank {r}: {reason}");
                        self.broadcast(&FromCoord::Abort { epoch, reason });
                        self.restart_pending = None;
                        return;
                    }
                }
                if self.ckpt.as_ref().is_some_and(|c| c.epoch == epoch) {
                    self.abort(format!("rank {r}: {reason}"));
                }
            }
            other => self.on_phase_msg(r, other),
        }
    }

    /// Records the MPI library and renewal strategy in job.json the first time an agent says them.
    fn note_agent(&mut self, info: &AgentInfo) {
        if self.job_updated {
            return;
        }
        self.job_updated = true;
        let mut job = self.cfg.job.clone();
        job.mpi_library = Some(info.library.clone());
        job.renew_strategy = Some(info.renew_strategy.clone());
        if let Ok(on_disk) = self.cfg.dir.read_job() {
            if on_disk.job_id == job.job_id {
                job.kvsname = on_disk.kvsname.or(job.kvsname);
            }
        }
        if let Err(e) = self.cfg.dir.write_job(&job) {
            self.log(&format!("warning: cannot update job.json: {e:#}"));
        }
        self.cfg.job = job;
    }

    /// Starts a checkpoint, or tells the requester why not. Before every rank's program has
    /// initialised MPI under mpicr (a checkpoint asked for right after the job started), the
    /// request waits for them, within its timeout.
    fn request(&mut self, stop: bool, requester: Requester, timeout: Duration) {
        if self.ckpt.is_none() && self.restart_pending.is_none() && self.not_ready().is_some() {
            if self.waiting.is_some() {
                let msg = "cannot checkpoint: another checkpoint request is already waiting for the program to initialise MPI".to_string();
                return self.answer_error(requester, msg);
            }
            let why = self.not_ready().unwrap_or_default();
            if self.cfg.verbose {
                self.log(&format!("coordinator: checkpoint request waits: {why}"));
            }
            let mut requester = requester;
            if let Requester::Client(s) = &mut requester {
                let _ = coord_wire::send(s, &ToClient::Queued(why));
            }
            let until = Instant::now().checked_add(timeout).unwrap_or(Instant::now() + crate::args::MAX_TIMEOUT);
            self.waiting = Some(WaitingRequest { stop, requester, until, timeout });
            return;
        }
        self.start(stop, requester, timeout);
    }

    /// Starts the waiting request once nothing is missing any more.
    fn start_waiting(&mut self) {
        if self.waiting.is_none() || self.not_ready().is_some() || self.ckpt.is_some() {
            return;
        }
        if let Some(w) = self.waiting.take() {
            let left = w.until.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
            self.start(w.stop, w.requester, left);
        }
    }

    /// Why a checkpoint cannot start yet although it may soon: a rank that has not joined yet,
    /// or a program that has not initialised MPI under mpicr yet. `None` when nothing is
    /// missing, or when what is missing will not come (a rank that ended).
    fn not_ready(&self) -> Option<String> {
        let missing: Vec<i32> = (0..self.size()).filter(|r| !self.ranks.contains_key(r)).collect();
        if missing.iter().any(|r| self.ever_joined.contains(r)) {
            return None;
        }
        if !missing.is_empty() {
            let list: Vec<String> = missing.iter().map(|r| r.to_string()).collect();
            return Some(format!("rank(s) {} of the job have not joined yet", list.join(", ")));
        }
        if self.ranks.values().all(|k| k.hello.mode == Mode::NoMpi) || self.ranks.values().any(|k| k.hello.mode == Mode::NoShim) {
            return None;
        }
        let no_agent: Vec<String> = self.ranks.iter().filter(|(_, k)| k.agent.is_none()).map(|(r, _)| r.to_string()).collect();
        if no_agent.is_empty() {
            return None;
        }
        Some(format!("the program has not initialised MPI under mpicr on rank(s) {} (no agent)", no_agent.join(", ")))
    }

    fn answer_error(&self, requester: Requester, msg: String) {
        match requester {
            Requester::Client(mut s) => {
                let _ = coord_wire::send(&mut s, &ToClient::Error(msg));
            }
            Requester::Internal(why) => self.log(&format!("{why} checkpoint: {msg}")),
        }
    }

    fn start(&mut self, stop: bool, mut requester: Requester, timeout: Duration) {
        match self.begin(stop, timeout) {
            Ok(epoch) => {
                if let Requester::Client(s) = &mut requester {
                    let _ = coord_wire::send(s, &ToClient::Started { epoch });
                }
                if let Some(c) = self.ckpt.as_mut() {
                    c.requester = requester;
                }
                if self.cfg.verbose {
                    self.log(&format!("coordinator: checkpoint {epoch} started"));
                }
            }
            Err(e) => self.answer_error(requester, format!("cannot checkpoint: {e:#}")),
        }
    }

    fn begin(&mut self, stop: bool, timeout: Duration) -> Result<u64> {
        if let Some(c) = &self.ckpt {
            bail!("checkpoint {} is already in progress", c.epoch);
        }
        if let Some((e, _)) = self.restart_pending {
            bail!("the job is still restarting from epoch {e}");
        }
        let missing: Vec<String> = (0..self.size()).filter(|r| !self.ranks.contains_key(r)).map(|r| r.to_string()).collect();
        if !missing.is_empty() {
            bail!("rank(s) {} of the job are not connected (not started yet, or already ended)", missing.join(", "));
        }
        let modes: BTreeSet<String> = self.ranks.values().map(|k| format!("{:?}", k.hello.mode)).collect();
        let agentless = self.ranks.values().all(|k| k.hello.mode == Mode::NoMpi);
        if !agentless {
            if let Some((r, _)) = self.ranks.iter().find(|(_, k)| k.hello.mode == Mode::NoShim) {
                bail!("rank {r} runs without the shim (--no-shim): MPI programs can only be checkpointed under libmpicr.so");
            }
            if modes.len() > 1 {
                bail!("ranks run in different modes ({}); cannot checkpoint", modes.into_iter().collect::<Vec<_>>().join(", "));
            }
            let no_agent: Vec<String> = self.ranks.iter().filter(|(_, k)| k.agent.is_none()).map(|(r, _)| r.to_string()).collect();
            if !no_agent.is_empty() {
                bail!("the program has not initialised MPI under mpicr yet on rank(s) {} (no agent); try again later", no_agent.join(", "));
            }
        }
        if let Err(e) = self.cfg.dir.prune_incomplete() {
            self.log(&format!("warning: cannot remove the images of failed epochs: {e:#}"));
        }
        let epoch = self.cfg.dir.next_epoch()?;
        let edir = self.cfg.dir.epoch_dir(epoch);
        images::private_dir_all(&edir)?;
        let now = Instant::now();
        self.ckpt = Some(Ckpt {
            epoch,
            stop,
            requester: Requester::Internal("requested"),
            t0: now,
            deadline: now.checked_add(timeout).unwrap_or(now + crate::args::MAX_TIMEOUT),
            phase: if agentless { Phase::Ready } else { Phase::Counters },
            counters: BTreeMap::new(),
            targets: HashMap::new(),
            round: 0,
            told: BTreeSet::new(),
            groups: HashMap::new(),
            sent: BTreeMap::new(),
            drained: BTreeSet::new(),
            ready: BTreeMap::new(),
            dumped: BTreeMap::new(),
            resumed: BTreeSet::new(),
            last_resumed: None,
            renew_us: BTreeMap::new(),
            running: BTreeSet::new(),
            last_running: None,
            marks: Vec::new(),
            last_mark: now,
            manifest: None,
        });
        self.broadcast(&FromCoord::Begin { epoch, stop });
        Ok(epoch)
    }

    fn on_phase_msg(&mut self, r: i32, msg: ToCoord) {
        enum Next {
            Nothing,
            /// Per rank: its communicators' targets, its create_group keys' targets.
            Targets(BTreeMap<i32, Vec<(CommGid, u64)>>, BTreeMap<i32, Vec<(CommGid, u64)>>),
            /// A later round: the same raised targets for every rank, and per rank those of
            /// its create_group keys among them.
            Raised(u32, Vec<(CommGid, u64)>, BTreeMap<i32, Vec<(CommGid, u64)>>),
            Expected(BTreeMap<i32, Vec<(CommGid, i32, u64)>>),
            Release,
            Dump,
            /// This rank dumped: its node's ranks seal once all of them have.
            NodeDumped(i32),
            Commit,
            Finish,
            Abort(String),
        }
        let size = self.size() as usize;
        let Some(c) = self.ckpt.as_mut() else { return };
        let (epoch, expected_phase) = match &msg {
            ToCoord::Counters { epoch, .. } => (*epoch, Phase::Counters),
            ToCoord::SendCounts { epoch, .. } | ToCoord::Wants { epoch, .. } => (*epoch, Phase::SendCounts),
            ToCoord::Drained { epoch } => (*epoch, Phase::Drain),
            ToCoord::ReadyToDump { epoch, .. } => (*epoch, Phase::Ready),
            ToCoord::Dumped { epoch, .. } => (*epoch, Phase::Dumping),
            ToCoord::Resumed { epoch, .. } => (*epoch, Phase::Resuming),
            ToCoord::Running { epoch } => (*epoch, Phase::Dumping),
            _ => return,
        };
        if epoch != c.epoch {
            return;
        }
        // Keepers resume their program right after their own dump (checksums and the commit
        // come after), so `Resumed` may arrive while the others still dump.
        let early_resume = matches!(msg, ToCoord::Resumed { .. }) && c.phase == Phase::Dumping;
        let next = if c.phase != expected_phase && !early_resume {
            Next::Abort(format!("rank {r} sent {:?}-phase data during phase {:?}", expected_phase, c.phase))
        } else {
            match msg {
                ToCoord::Counters { comms, groups, .. } => {
                    c.counters.insert(r, comms);
                    c.groups.extend(groups);
                    if c.counters.len() == size {
                        c.mark("counters");
                        c.phase = Phase::SendCounts;
                        c.targets = max_targets(&c.counters);
                        let groups = group_targets(&c.groups, &c.targets, c.groups.keys().copied(), size as i32);
                        Next::Targets(targets_per_rank(&c.counters, &c.targets), groups)
                    } else {
                        Next::Nothing
                    }
                }
                ToCoord::Wants { comms, groups, .. } => {
                    c.groups.extend(groups);
                    let mut raised: BTreeMap<CommGid, u64> = raise_targets(&mut c.targets, &comms).into_iter().collect();
                    let reported = c.counters.get(&r);
                    let known = |g: CommGid| c.told.contains(&g) || reported.is_some_and(|l| l.iter().any(|&(x, _)| x == g));
                    raised.extend(untold_targets(&c.targets, &comms, known));
                    let raised: Vec<(CommGid, u64)> = raised.into_iter().collect();
                    c.told.extend(raised.iter().map(|&(g, _)| g));
                    if raised.is_empty() {
                        Next::Nothing
                    } else {
                        // Every rank aligns again (one that had closed its gate reopens it).
                        c.round += 1;
                        c.sent.clear();
                        let groups = group_targets(&c.groups, &c.targets, raised.iter().map(|&(g, _)| g), size as i32);
                        Next::Raised(c.round, raised, groups)
                    }
                }
                // Counts of an earlier round come from a rank that has not seen the raise yet.
                ToCoord::SendCounts { round, .. } if round != c.round => Next::Nothing,
                ToCoord::SendCounts { sent, untold, .. } => {
                    let behind = behind_targets(&c.targets, &untold);
                    if !behind.is_empty() {
                        // This rank closed its gate on a communicator it was given no target
                        // for, and its peers are further on it: every rank aligns again.
                        c.told.extend(behind.iter().map(|&(g, _)| g));
                        c.round += 1;
                        c.sent.clear();
                        let groups = group_targets(&c.groups, &c.targets, behind.iter().map(|&(g, _)| g), size as i32);
                        Next::Raised(c.round, behind, groups)
                    } else {
                        c.sent.insert(r, sent);
                        if c.sent.len() == size {
                            c.mark("align");
                            match transpose(&c.sent, size as i32) {
                                Ok(exp) => {
                                    c.phase = Phase::Drain;
                                    Next::Expected(exp)
                                }
                                Err(e) => Next::Abort(format!("{e:#}")),
                            }
                        } else {
                            Next::Nothing
                        }
                    }
                }
                ToCoord::Drained { .. } => {
                    c.drained.insert(r);
                    if c.drained.len() == size {
                        c.mark("drain");
                        c.phase = Phase::Ready;
                        Next::Release
                    } else {
                        Next::Nothing
                    }
                }
                ToCoord::ReadyToDump { drained_msgs, drained_bytes, state_bytes, timings, .. } => {
                    c.ready.insert(r, ReadyInfo { drained_msgs, drained_bytes, state_bytes, timings });
                    if c.ready.len() == size {
                        c.mark("release");
                        c.phase = Phase::Dumping;
                        Next::Dump
                    } else {
                        Next::Nothing
                    }
                }
                ToCoord::Dumped { info, .. } => {
                    c.dumped.insert(r, info);
                    if c.dumped.len() == size {
                        c.mark("dump");
                        Next::Commit
                    } else {
                        Next::Nothing
                    }
                }
                ToCoord::Running { .. } => {
                    c.running.insert(r);
                    if c.running.len() == size {
                        c.last_running = Some(Instant::now());
                        c.mark("running");
                    }
                    Next::NodeDumped(r)
                }
                ToCoord::Resumed { timings, .. } => {
                    if let Some(&(_, us)) = timings.iter().find(|(n, _)| n == "renew") {
                        c.renew_us.insert(r, us);
                    }
                    c.resumed.insert(r);
                    if c.resumed.len() == size {
                        c.last_resumed = Some(Instant::now());
                    }
                    if c.resumed.len() == size && c.phase == Phase::Resuming {
                        c.mark("resume");
                        Next::Finish
                    } else {
                        Next::Nothing
                    }
                }
                _ => Next::Nothing,
            }
        };
        let hook = match &next {
            Next::Targets(..) => "targets",
            Next::Expected(_) => "expected",
            Next::Release => "release",
            Next::Dump => "dump",
            _ => "",
        };
        if !hook.is_empty() && self.injected_fault(hook) {
            return;
        }
        match next {
            Next::Nothing => {}
            Next::Targets(t, mut groups) => {
                for (rank, comms) in t {
                    let groups = groups.remove(&rank).unwrap_or_default();
                    self.send_to(rank, &FromCoord::Targets { epoch, round: 0, comms, groups });
                }
            }
            Next::Raised(round, comms, mut groups) => {
                tracing::debug!(target: "coordinator", epoch, round, raised = comms.len(), "collective targets raised");
                for rank in 0..size as i32 {
                    let groups = groups.remove(&rank).unwrap_or_default();
                    self.send_to(rank, &FromCoord::Targets { epoch, round, comms: comms.clone(), groups });
                }
            }
            Next::Expected(e) => {
                for (rank, expect) in e {
                    self.send_to(rank, &FromCoord::Expected { epoch, expect });
                }
            }
            Next::Release => self.broadcast(&FromCoord::Release { epoch }),
            Next::Dump => self.broadcast(&FromCoord::Dump { epoch }),
            Next::NodeDumped(r) => self.seal_node_when_dumped(epoch, r),
            Next::Commit => self.commit(),
            Next::Finish => self.finish(),
            Next::Abort(reason) => self.abort(reason),
        }
    }

    /// Tells the ranks on `r`'s node to seal their images of `epoch` once every one of them has
    /// dumped (`FromCoord::NodeDumped`): until then their checksums would slow the dumps left.
    fn seal_node_when_dumped(&mut self, epoch: u64, r: i32) {
        let Some(c) = self.ckpt.as_ref() else { return };
        let hosts = self.ranks.iter().map(|(&q, k)| (q, k.hello.host.as_str()));
        for q in node_all_dumped(hosts, r, &c.running) {
            self.send_to(q, &FromCoord::NodeDumped { epoch });
        }
    }

    fn manifest(&self, c: &Ckpt) -> Manifest {
        let mut rank_info: Vec<RankManifest> = c.dumped.values().cloned().collect();
        for ri in &mut rank_info {
            if let Some(ready) = c.ready.get(&ri.rank) {
                ri.drained_msgs = ready.drained_msgs;
                ri.drained_bytes = ready.drained_bytes;
                ri.state_bytes = ready.state_bytes;
                ri.agent_timings = ready.timings.clone();
            }
            if let Some(a) = self.ranks.get(&ri.rank).and_then(|k| k.agent.as_ref()) {
                ri.renewals_left = a.renewals_left;
            }
        }
        Manifest {
            format: images::FORMAT,
            job_id: self.cfg.job.job_id.clone(),
            epoch: c.epoch,
            ranks: self.size(),
            created_unix: images::now_unix(),
            stop: c.stop,
            total_bytes: rank_info.iter().map(|r| r.bytes).sum(),
            stop_time_us: c.t0.elapsed().as_micros() as u64,
            mpi_back_us: None,
            timings: c.marks.clone(),
            rank_info,
            mac: None,
        }
    }

    fn commit(&mut self) {
        let Some(c) = self.ckpt.as_ref() else { return };
        let m = self.manifest(c);
        if let Err(e) = self.cfg.dir.commit(&m, &self.cfg.key) {
            self.abort(format!("writing the manifest: {e:#}"));
            return;
        }
        let m_ranks = m.ranks;
        let c = self.ckpt.as_mut().unwrap();
        c.mark("commit");
        c.manifest = Some(m);
        let epoch = c.epoch;
        if c.stop {
            // Rank 0 last: its keeper hosts this coordinator and exits once told.
            let ranks: Vec<i32> = self.ranks.keys().rev().copied().collect();
            self.finish();
            for r in ranks {
                self.send_to(r, &FromCoord::Stop);
            }
        } else {
            c.phase = Phase::Resuming;
            let all_resumed = c.resumed.len() as i32 == m_ranks;
            self.broadcast(&FromCoord::Resume { epoch });
            if all_resumed {
                // Every rank resumed early, during the dump phase.
                if let Some(c) = self.ckpt.as_mut() {
                    c.mark("resume");
                }
                self.finish();
            }
        }
    }

    /// All done: final timings into the manifest, answer the requester.
    fn finish(&mut self) {
        let Some(mut c) = self.ckpt.take() else { return };
        let Some(mut m) = c.manifest.take() else { return };
        let t0 = c.t0;
        let since = move |t: Instant| t.duration_since(t0).as_micros() as u64;
        // The program computes again once every rank's dump is done; its MPI calls wait for the
        // renewal (reported apart). A job that stopped stood still until now.
        let stood_until = c.last_running.or(c.last_resumed).unwrap_or_else(Instant::now);
        m.stop_time_us = since(stood_until);
        m.mpi_back_us = if c.stop { None } else { c.last_resumed.map(since) };
        for ri in &mut m.rank_info {
            if let Some(&us) = c.renew_us.get(&ri.rank) {
                ri.agent_timings.push(("renew".into(), us));
            }
        }
        m.timings = c.marks.clone();
        if let Err(e) = self.cfg.dir.write_manifest(&m, &self.cfg.key) {
            self.log(&format!("warning: cannot add the final timings to the manifest of epoch {}: {e:#}", m.epoch));
        }
        if let Some(keep) = self.cfg.keep {
            if let Err(e) = crate::jobs::retain(&self.cfg.dir, keep) {
                self.log(&format!("warning: --keep {keep}: {e:#}"));
            }
        }
        self.settled(Settled::Committed(m.epoch));
        let res =
            CkptResult { epoch: m.epoch, stop_time_us: m.stop_time_us, mpi_back_us: m.mpi_back_us, bytes: m.total_bytes, ranks: m.ranks, stopped: c.stop };
        match c.requester {
            Requester::Client(mut s) => {
                let _ = coord_wire::send(&mut s, &ToClient::Done(res));
            }
            Requester::Internal(why) => self.log(&format!(
                "{why} checkpoint: epoch {} committed, {} written, program stopped for {}",
                m.epoch,
                images::human_bytes(m.total_bytes),
                crate::args::format_duration(Duration::from_micros(m.stop_time_us))
            )),
        }
    }

    /// Abandons the checkpoint in progress on every rank; the epoch keeps no manifest.
    fn abort(&mut self, reason: String) {
        let Some(c) = self.ckpt.take() else { return };
        let epoch = c.epoch;
        let committed = c.manifest.is_some();
        let msg =
            if committed { format!("checkpoint {epoch} was committed but resuming failed: {reason}") } else { format!("checkpoint {epoch} aborted: {reason}") };
        if !committed {
            self.cfg.dir.mark_failed(epoch, &reason);
        }
        self.settled(if committed { Settled::Committed(epoch) } else { Settled::Failed(epoch, reason.clone()) });
        self.broadcast(&FromCoord::Abort { epoch, reason: reason.clone() });
        match c.requester {
            Requester::Client(mut s) => {
                let _ = coord_wire::send(&mut s, &ToClient::Error(msg));
            }
            Requester::Internal(why) => {
                self.log(&msg);
                // The time limit still comes: try again (`Event::TimeLimit` repeats).
                if why == "time-limit" {
                    self.limit_stop = false;
                }
            }
        }
    }
}

/// The ranks on `r`'s host (`hosts`: rank and host of each connected rank) when every one of
/// them is in `dumped`, else none.
fn node_all_dumped<'a>(hosts: impl Iterator<Item = (i32, &'a str)> + Clone, r: i32, dumped: &BTreeSet<i32>) -> Vec<i32> {
    let Some((_, host)) = hosts.clone().find(|&(q, _)| q == r) else { return Vec::new() };
    let node: Vec<i32> = hosts.filter(|&(_, h)| h == host).map(|(q, _)| q).collect();
    if node.iter().all(|q| dumped.contains(q)) {
        node
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_maxima_over_members() {
        let mut c = BTreeMap::new();
        c.insert(0, vec![(10, 3), (20, 1)]);
        c.insert(1, vec![(10, 5)]);
        c.insert(2, vec![(20, 4), (10, 0)]);
        let max = max_targets(&c);
        let t = targets_per_rank(&c, &max);
        assert_eq!(t[&0], vec![(10, 5), (20, 4)]);
        assert_eq!(t[&1], vec![(10, 5)]);
        assert_eq!(t[&2], vec![(20, 4), (10, 5)]);
    }

    #[test]
    fn targets_rise_only_where_wanted_beyond_them() {
        let mut t: HashMap<CommGid, u64> = [(10, 5), (20, 4)].into_iter().collect();
        assert_eq!(raise_targets(&mut t, &[(10, 5), (20, 3)]), vec![], "nothing past a target");
        assert_eq!(raise_targets(&mut t, &[(20, 6), (30, 1), (10, 4)]), vec![(20, 6), (30, 1)]);
        assert_eq!(t[&20], 6);
        assert_eq!(t[&30], 1, "a communicator made during the alignment starts from 0");
        assert_eq!(t[&10], 5);
    }

    #[test]
    fn targets_reach_a_rank_that_made_the_communicator_after_its_counters() {
        let t: HashMap<CommGid, u64> = [(10, 5), (20, 4)].into_iter().collect();
        let reported = |g: CommGid| g == 10;
        assert_eq!(untold_targets(&t, &[(10, 6), (20, 1), (30, 1)], reported), vec![(20, 4)]);
        assert_eq!(untold_targets(&t, &[(20, 5)], reported), vec![], "past the target: raised instead");
        assert_eq!(untold_targets(&t, &[(10, 5)], reported), vec![], "a reported target is known");
    }

    #[test]
    fn a_rank_that_closed_its_gate_behind_on_an_untold_communicator_gets_its_target() {
        let t: HashMap<CommGid, u64> = [(10, 5), (20, 1)].into_iter().collect();
        assert_eq!(behind_targets(&t, &[(20, 0), (30, 0)]), vec![(20, 1)], "peers are inside collective 1 of 20");
        assert_eq!(behind_targets(&t, &[(20, 1)]), vec![], "as far as its peers");
        assert_eq!(behind_targets(&t, &[(30, 2)]), vec![], "nobody else reported it");
    }

    /// MPI_Comm_create_group key 50 over world ranks 0, 1 and 3: rank 0 is blocked in its
    /// third call, rank 1 finished two, rank 3 has never called it (it has no counter for the
    /// key, and reports nothing), rank 2 is no member. Every member is told the target of 3.
    #[test]
    fn a_create_group_member_that_has_not_called_it_gets_its_target() {
        let mut c = BTreeMap::new();
        c.insert(0, vec![(10, 4), (50, 3)]);
        c.insert(1, vec![(10, 4), (50, 2)]);
        c.insert(2, vec![(10, 4)]);
        c.insert(3, vec![(10, 4)]);
        let members: GroupMembers = [(50, vec![0, 1, 3])].into_iter().collect();
        let max = max_targets(&c);
        let g = group_targets(&members, &max, members.keys().copied(), 4);
        assert_eq!(g[&0], vec![(50, 3)]);
        assert_eq!(g[&1], vec![(50, 3)]);
        assert_eq!(g[&2], vec![], "not a member");
        assert_eq!(g[&3], vec![(50, 3)], "a member that never called it runs on to it");
        assert_eq!(targets_per_rank(&c, &max)[&3], vec![(10, 4)], "its communicators' targets as before");
    }

    /// A create_group key first seen in a rank's wants (it started a call during the
    /// alignment): the raise reaches every rank, the key's target its members only.
    #[test]
    fn a_create_group_key_raised_by_wants_reaches_its_members() {
        let mut t: HashMap<CommGid, u64> = [(10, 5)].into_iter().collect();
        let members: GroupMembers = [(60, vec![2, 1]), (70, vec![0, 2])].into_iter().collect();
        let raised = raise_targets(&mut t, &[(60, 1), (10, 5)]);
        assert_eq!(raised, vec![(60, 1)]);
        let g = group_targets(&members, &t, raised.iter().map(|&(k, _)| k), 3);
        assert_eq!(g[&0], vec![], "a member of 70 only, which was not raised");
        assert_eq!(g[&1], vec![(60, 1)]);
        assert_eq!(g[&2], vec![(60, 1)]);
        assert_eq!(group_targets(&members, &t, [99].into_iter(), 3)[&1], vec![], "unknown key: nobody");
    }

    #[test]
    fn a_node_seals_once_its_last_rank_has_dumped() {
        let hosts = [(0, "a"), (1, "b"), (2, "a"), (3, "b")];
        let dumped = |rs: &[i32]| rs.iter().copied().collect::<BTreeSet<i32>>();
        assert_eq!(node_all_dumped(hosts.into_iter(), 0, &dumped(&[0, 1])), Vec::<i32>::new(), "rank 2 on a still dumps");
        assert_eq!(node_all_dumped(hosts.into_iter(), 2, &dumped(&[0, 1, 2])), vec![0, 2]);
        assert_eq!(node_all_dumped(hosts.into_iter(), 3, &dumped(&[1, 3])), vec![1, 3], "b does not wait for a");
        assert_eq!(node_all_dumped(hosts.into_iter(), 9, &dumped(&[9])), Vec::<i32>::new(), "a rank that left names no node");
    }

    #[test]
    fn transposition() {
        let mut s = BTreeMap::new();
        s.insert(0, vec![(7, 1, 2), (7, 2, 1)]);
        s.insert(1, vec![(7, 0, 4), (9, 0, 1)]);
        s.insert(2, vec![]);
        let e = transpose(&s, 3).unwrap();
        assert_eq!(e[&0], vec![(7, 1, 4), (9, 1, 1)]);
        assert_eq!(e[&1], vec![(7, 0, 2)]);
        assert_eq!(e[&2], vec![(7, 0, 1)]);
    }

    #[test]
    fn transposition_rejects_unknown_ranks() {
        let mut s = BTreeMap::new();
        s.insert(0, vec![(7, 5, 1)]);
        assert!(transpose(&s, 2).unwrap_err().to_string().contains("rank 5"));
    }

    #[test]
    fn every_rank_gets_an_expectation() {
        let e = transpose(&BTreeMap::new(), 2).unwrap();
        assert_eq!(e.len(), 2);
        assert!(e[&1].is_empty());
    }
}
