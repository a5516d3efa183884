//! One checkpoint, as run by the agent on this rank (DESIGN.md section 4):
//! refuse early what cannot be restored, align collectives, close the gate, drain in-flight
//! messages, release the lower half, write `shim.state`, and after the dump renew and resume.
//!
//! Invariants of the drain:
//! - A message is drained (taken into the shim's buffer) only when no posted receive of the
//!   program matched it: the library matches posted receives on arrival, before a probe sees it.
//! - The cut is complete when, for every (communicator, source), the messages this rank has
//!   received equal what the source reports having sent to it.
//! - Pending sends then complete (their receivers drained them); pending receives are cancelled
//!   and posted again after the renewal.

use crate::core::agent::{self, AgentError, Budget, Event, Inbox};
use crate::core::kinds::comm::{count_recv, peers, world_rank, world_size, CommEntry};
use crate::core::kinds::library::{user_errors, UserError};
use crate::core::kinds::{create_group, message, part, request, win, REFUSAL_ORDER, RENEWAL_ORDER};
use crate::core::state::OBJ;
use crate::core::{app, drained, gate, handles, renew};
use crate::lower;
use crate::lower::abi::*;
use crate::lower::calls;
use mpicr_drain::{Counts, Message, Progress};
use mpicr_proto::{FromAgent, Timings, ToAgent};
use mpicr_virtid::RealHandle;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::raw::c_int;
use std::time::{Duration, Instant};

/// Why a checkpoint failed: the one line the keeper hears (`FromAgent::Failed`) and the
/// coordinator reports.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The control connection ended or failed.
    #[error(transparent)]
    Connection(#[from] AgentError),
    /// Sending to the keeper failed.
    #[error("{0}")]
    Send(#[from] std::io::Error),
    #[error("no {what} from the coordinator within {secs} s")]
    NoReply { what: &'static str, secs: u64 },
    #[error("aborted by the coordinator: {0}")]
    Aborted(String),
    #[error("unexpected message {when}: {msg:?}")]
    Unexpected { when: &'static str, msg: Box<ToAgent> },
    #[error("the program is finalizing MPI")]
    Finalizing,
    #[error("a thread stayed inside the MPI library (a blocking collective whose peers never arrived?)")]
    StayedInside,
    #[error("collectives not aligned: communicator from {made_by} is at collective {at} of {target}")]
    NotAligned { made_by: String, at: u64, target: u64 },
    #[error("{0} (waited {1} s)")]
    Waited(Box<CheckpointError>, u64),
    #[error("{in_flight} in-flight messages never arrived (waited {secs} s)")]
    InFlight { in_flight: u64, secs: u64 },
    #[error("{waiting} pending sends or collectives did not complete (waited {secs} s)")]
    PendingSends { waiting: usize, secs: u64 },
    #[error("receiving an in-flight message failed: {0}")]
    DrainRecv(String),
    #[error("not every rank drained within {0} s")]
    NotDrained(u64),
    #[error("{0}; {1}")]
    NotDrainedThen(Box<CheckpointError>, Box<CheckpointError>),
    #[error("{0}, and the coordinator never answered")]
    NoVerdict(Box<CheckpointError>),
    #[error("internal error in the checkpoint agent: {0}")]
    Panic(String),
    #[error("encoding shim.state: {0}")]
    Encode(postcard::Error),
    #[error("writing {path}: {err}")]
    Write { path: String, err: std::io::Error },
    #[error(transparent)]
    Renew(#[from] renew::RenewError),
    /// Cancelling the pending receives or receiving the matched-probe messages failed.
    #[error("{0}")]
    Kind(#[from] crate::core::kinds::RebuildError),
    /// The drain's bookkeeping: more messages received from a peer than it sent.
    #[error("{0}")]
    Drain(#[from] mpicr_drain::TooManyReceived),
    /// The program made something a checkpoint cannot carry (a kind's or app mode's refusal).
    #[error("{0}")]
    Refused(String),
    /// An app-mode rank's own save function failed.
    #[error("app-mode rank {rank}: {err}")]
    AppSave { rank: i32, err: app::AppError },
    /// An app-mode rank did not reach its safe point (why, with the collectives it still owes).
    #[error("{0}")]
    AppNotReached(String),
    /// A one-sided epoch stayed open past the alignment's limit.
    #[error("{why}: it did not end within {secs} s")]
    EpochOpen { why: String, secs: u64 },
    /// Persistent collectives or group creations not at their targets after the gate closed.
    #[error("{0}")]
    PartNotAligned(String),
}

/// The coordinator's abort, with what this rank still waited for when it came (`state`): the
/// coordinator knows only whose message is missing, the rank knows why (the keeper logs it).
fn aborted_while(e: CheckpointError, state: impl FnOnce() -> Option<String>) -> CheckpointError {
    match e {
        CheckpointError::Aborted(reason) => match state() {
            Some(why) => CheckpointError::Aborted(format!("{reason}; {why}")),
            None => CheckpointError::Aborted(reason),
        },
        e => e,
    }
}

/// A message of the keeper where none was expected: the coordinator's abort, or out of
/// sequence.
fn unexpected(m: ToAgent, when: &'static str) -> CheckpointError {
    match m {
        ToAgent::Abort { reason } => CheckpointError::Aborted(reason),
        msg => CheckpointError::Unexpected { when, msg: Box::new(msg) },
    }
}

fn timeout(var: &str, default_s: u64) -> Duration {
    Duration::from_secs(std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default_s))
}

/// A peer's own deadline `limit`, plus slack for messages to cross the keepers and the
/// coordinator (as long again, at most 30 s: short limits make short tests).
fn with_grace(limit: Duration) -> Duration {
    limit + limit.min(Duration::from_secs(30))
}
/// After giving up on `Release` (and saying `Failed`), how long to wait for the coordinator's
/// verdict: it answers at once when it is alive; when it is not, the keeper says so sooner.
const VERDICT_WAIT: Duration = Duration::from_secs(60);

/// Every wait of one checkpoint (seconds in the environment of the program).
struct Limits {
    /// `MPICR_ALIGN_TIMEOUT`: for the targets, for this rank's collectives to reach them, for
    /// its threads to leave the library; twice that (every rank's) for the expected receives.
    align: Duration,
    /// `MPICR_DRAIN_TIMEOUT`: for in-flight messages; with grace, for every rank's drain.
    drain: Duration,
    /// `MPICR_RESUME_TIMEOUT` (default 1800): from `ReadyToDump` to `Resume`, covering the other
    /// ranks' release and every dump. Time frozen by CRIU does not count (`agent::recv_within`).
    resume: Duration,
    /// `MPICR_SAFE_POINT_TIMEOUT` (app mode; default that of the alignment): for the program to
    /// reach `mpicr_safe_point()`.
    safe_point: Duration,
}

impl Limits {
    fn from_env() -> Limits {
        let align = timeout("MPICR_ALIGN_TIMEOUT", 120);
        Limits {
            safe_point: timeout("MPICR_SAFE_POINT_TIMEOUT", align.as_secs()),
            align,
            drain: timeout("MPICR_DRAIN_TIMEOUT", 120),
            resume: timeout("MPICR_RESUME_TIMEOUT", 1800),
        }
    }
}

/// Waits for the keeper's next message of a checkpoint: `Abort` and a deadline become errors.
fn expect(inbox: &mut Inbox, limit: Duration, what: &'static str) -> Result<ToAgent, CheckpointError> {
    match inbox.recv_within(limit)? {
        None => Err(CheckpointError::NoReply { what, secs: limit.as_secs() }),
        Some(ToAgent::Abort { reason }) => Err(CheckpointError::Aborted(reason)),
        Some(m) => Ok(m),
    }
}

/// Test hook: `MPICR_TEST_AGENT_PANIC=PHASE:RANK` panics once in this process at `PHASE`
/// (`align`: gate closed; `drain`: drained, not released; `release`: released) on world rank
/// `RANK`, to exercise the panic boundary of [`run`].
fn test_panic(phase: &str) {
    static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Ok(v) = std::env::var("MPICR_TEST_AGENT_PANIC") else { return };
    let Some((p, r)) = v.split_once(':') else { return };
    if p == phase && r.parse() == Ok(world_rank()) && !FIRED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        panic!("injected panic at {phase}");
    }
}

/// Phase timings, in protocol order.
struct Clock {
    start: Instant,
    last: Instant,
    phases: Vec<(String, u64)>,
}

impl Clock {
    fn new() -> Self {
        let now = Instant::now();
        Clock { start: now, last: now, phases: Vec::new() }
    }
    fn lap(&mut self, name: &str) {
        let now = Instant::now();
        self.phases.push((name.to_string(), (now - self.last).as_micros() as u64));
        self.last = now;
    }
    fn timings(&self) -> Timings {
        let mut p = self.phases.clone();
        p.push(("total".into(), self.start.elapsed().as_micros() as u64));
        Timings { phases_us: p }
    }
}

/// How far a failed checkpoint got, to undo exactly that.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
enum Stage {
    Aligning,
    GateClosed,
    /// `Drained` sent: only the coordinator's verdict decides whether to release.
    Drained,
    Released,
    /// The renewal after `Resume` started: a failure there cannot be undone.
    Renewing,
    Done,
}

/// Runs one checkpoint. The panic boundary of the agent's checkpoint work: whatever happens in
/// it (an error, a deadline, a panic), the keeper hears one line, the library is renewed when it
/// was released (on every rank alike: see `mpicr_proto`), the gate reopens and collectives run.
pub(crate) fn run(inbox: &mut Inbox, epoch: u64, stop: bool, state_path: &str) {
    crate::lower::prepare_thread();
    let mut stage = Stage::Aligning;
    let mut clock = Clock::new();
    let limits = Limits::from_env();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| phases(inbox, epoch, stop, state_path, &limits, &mut stage, &mut clock)))
        .unwrap_or_else(|p| Err(CheckpointError::Panic(agent::panic_message(&*p))));
    let Err(reason) = result else {
        app::release();
        agent::clear_pending_sigpipe();
        return;
    };
    let reason = reason.to_string();
    tracing::debug!(target: "agent", epoch, stage = ?stage, %reason, "checkpoint failed");
    let _ = agent::send(&FromAgent::Failed { reason: reason.clone() });
    if stage == Stage::Renewing {
        lower::fatal(&format!("cannot renew the MPI library: {reason}"));
    }
    if stage == Stage::Released {
        let renewed = std::panic::catch_unwind(|| renew::renew(false, None).map_err(|e| e.to_string()))
            .unwrap_or_else(|p| Err(format!("internal error: {}", agent::panic_message(&*p))));
        agent::clear_pending_sigpipe();
        if let Err(e) = renewed {
            lower::fatal(&format!("checkpoint failed ({reason}) and the MPI library could not be restarted: {e}"));
        }
    }
    // The drain may have cancelled pending receives; unreleased, the library still runs them.
    if matches!(stage, Stage::GateClosed | Stage::Drained) {
        let reposted = std::panic::catch_unwind(|| request::repost_cancelled().map_err(|e| e.to_string()))
            .unwrap_or_else(|p| Err(format!("internal error: {}", agent::panic_message(&*p))));
        if let Err(e) = reposted {
            lower::fatal(&format!("checkpoint failed ({reason}) and a receive it had cancelled could not be posted again: {e}"));
        }
    }
    if stage >= Stage::GateClosed {
        gate::open();
    }
    agent::end_alignment();
    app::release();
}

fn phases(inbox: &mut Inbox, epoch: u64, _stop: bool, state_path: &str, limits: &Limits, stage: &mut Stage, clock: &mut Clock) -> Result<(), CheckpointError> {
    if agent::finalizing() {
        return Err(CheckpointError::Finalizing);
    }
    if let Some(why) = refusal() {
        return Err(CheckpointError::Refused(why));
    }
    renew::check_renewal()?;
    // An app-mode rank is taken only at a safe point: its program runs on until it parks there,
    // aligned (see `core::app`); its collectives past the targets are asked for as on any rank,
    // so the transparent ranks, held at their targets, never keep it from its safe point.
    let align_limit = if app::enabled() {
        app::want();
        limits.safe_point
    } else {
        limits.align
    };
    let app_deadline = app::enabled().then(|| Instant::now() + align_limit);
    // 1. Align collectives, and 2. exchange send counts: each round of targets ends with this
    //    rank's gate closed and its counts sent, unless a later round (another rank needed a
    //    target raised) reopens the gate first.
    agent::begin_alignment();
    let mut counters: Vec<(u64, u64)> = OBJ.comms.snapshot().into_iter().map(|(_, _, c)| (c.recipe.gid, c.coll_seq)).collect();
    counters.extend(part::start_counts());
    let (group_counts, groups) = create_group::in_progress();
    counters.extend(group_counts);
    agent::send(&FromAgent::Counters { comms: counters, groups })?;
    let mut round =
        match expect(inbox, limits.align, "collective targets").map_err(|e| aborted_while(e, || Some("this rank was waiting for its targets".into())))? {
            ToAgent::Targets { round, comms, groups } => {
                agent::set_targets(comms.into_iter().collect::<HashMap<_, _>>(), &groups);
                round
            }
            other => return Err(unexpected(other, "while aligning")),
        };
    let aligning_since = Instant::now();
    let expected = loop {
        tracing::debug!(target: "agent", epoch, round, "aligning collectives");
        // One deadline for an app-mode rank's safe point, across rounds: its wants raise the
        // targets round after round while it runs on without ever reaching one.
        let limit = match app_deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => align_limit,
        };
        if let Some(r) = wait_aligned(inbox, limit).map_err(|e| match (app_deadline, e) {
            (Some(_), CheckpointError::Waited(inner, _)) => CheckpointError::Waited(inner, align_limit.as_secs()),
            (_, e) => e,
        })? {
            round = r;
            continue;
        }
        if let Some(r) = close_gate(inbox, limits.align)? {
            round = r;
            continue;
        }
        *stage = Stage::GateClosed;
        // A thread still inside the gate while it closed may have made a communicator (the
        // private one of MPI_File_open, or MPI_Dist_graph_create_adjacent's) that its peers had
        // already reported and used: its target is beyond it, and the thread can reach it only
        // with the gate open. Likewise a partitioned start counted but not yet recorded as
        // started when this rank looked aligned (its send's partitions not all ready). Align
        // again, within the alignment's limit.
        if let Err(e) = check_aligned() {
            if aligning_since.elapsed() > limits.align {
                return Err(e);
            }
            tracing::debug!(target: "agent", epoch, %e, "not aligned once the gate closed: aligning again");
            gate::open();
            *stage = Stage::Aligning;
            continue;
        }
        // Asked again now that no program thread runs: aligning let this rank run on into
        // the collectives other ranks had entered, and those may have made what cannot be
        // carried, which the first asking could not see.
        if let Some(why) = refusal() {
            return Err(CheckpointError::Refused(why));
        }
        test_panic("align");
        let comms = CommIndex::build();
        agent::send(&FromAgent::SendCounts { round, sent: comms.sent_counts(), untold: untold_counts() })?;
        // Every rank aligns and closes its gate within its own deadlines (twice `align`).
        match expect_progressing(inbox, with_grace(2 * limits.align), "expected receives")? {
            ToAgent::ExpectedRecvs { expect } => break (comms, expect),
            ToAgent::Targets { round: r, comms, groups } => {
                gate::open();
                *stage = Stage::Aligning;
                agent::raise_targets(&comms, &groups);
                round = r;
            }
            other => return Err(unexpected(other, "while draining")),
        }
    };
    clock.lap("align");
    let (comms, expected) = expected;
    tracing::debug!(target: "agent", epoch, peers = expected.len(), "draining");
    drain(&comms, &expected, limits.drain, inbox)?;
    test_panic("drain");
    clock.lap("drain");

    // 3. Job-wide barrier: release only once every rank drained (releasing and renewing are
    //    collective, so a rank that fails before this point must find nobody released).
    agent::send(&FromAgent::Drained)?;
    *stage = Stage::Drained;
    await_release(inbox, with_grace(limits.drain))?;

    // 4. Release the lower half and write the state file.
    for kind in RENEWAL_ORDER {
        kind.snapshot();
    }
    // Counted as released even if finalizing fails: the other ranks released, and a renewal
    // with them is the only way on (a library that failed to finalize is of no use either).
    *stage = Stage::Released;
    renew::release()?;
    test_panic("release");
    clock.lap("release");
    let mut state_bytes = write_state(state_path, epoch)?;
    if app::enabled() {
        let rank_dir = std::path::Path::new(state_path).parent().unwrap_or(std::path::Path::new("."));
        let dir = app::data_dir(rank_dir);
        app::save(dir.clone(), limits.resume).map_err(|err| CheckpointError::AppSave { rank: world_rank(), err })?;
        state_bytes += dir_bytes(&dir);
        clock.lap("save");
    }
    let (msgs, bytes) = drained::stats();
    tracing::debug!(target: "agent", epoch, drained_msgs = msgs, drained_bytes = bytes, state_bytes, "ready to dump");
    agent::send(&FromAgent::ReadyToDump { drained_msgs: msgs, drained_bytes: bytes, state_bytes, timings: clock.timings() })?;

    // 5. The keeper dumps us. When we run again it is either right after the dump (continue)
    //    or in a restored process (restart).
    let (restarted, size) = match expect(inbox, limits.resume, "resume")? {
        ToAgent::Resume { restarted, size, env, .. } => {
            // The library reads its settings at load, and the renewal below loads it anew.
            // (glibc never frees a replaced environment string, so a program thread reading
            // the environment meanwhile sees the old or the new value.)
            for (k, v) in env {
                match v {
                    Some(v) => std::env::set_var(k, v),
                    None => std::env::remove_var(k),
                }
            }
            (restarted, size)
        }
        other => return Err(unexpected(other, "while waiting to resume")),
    };
    let mut clock = Clock::new();
    *stage = Stage::Renewing;
    if let Err(e) = renew::renew(restarted, Some(size)) {
        lower::fatal(&format!("cannot renew the MPI library: {e}"));
    }
    *stage = Stage::Done;
    clock.lap("renew");
    tracing::debug!(target: "agent", epoch, restarted, "resumed");
    gate::open();
    agent::end_alignment();
    if restarted {
        // A new address space: the keeper's write tracker (if any) is of the old one.
        agent::send_write_tracker();
    }
    let _ = agent::send(&FromAgent::Resumed { timings: clock.timings() });
    let _ = agent::send_hello();
    crate::core::resume::resumed(restarted);
    Ok(())
}

/// One turn of the real library's progress engine (a probe on the world communicator), by the
/// agent while this rank's gate is closed and empty, or by a program thread inside the gate
/// that waits for its collective targets. A rank that waits in a checkpoint keeps its library
/// progressing: MPICH moves a large (rendezvous) message only while both ends progress, so a
/// peer's drain, or a peer's program on its way to its targets, may be receiving from this rank
/// a message whose send is still pending here or completed long ago (a persistent
/// `MPI_Bsend_init`, sent by the library from its attached buffer); and one-sided operations
/// that target this rank complete only when it progresses.
pub(crate) fn progress() {
    let Some(world) = OBJ.comms.real(crate::core::state::WORLD_INDEX) else { return };
    let (mut flag, mut st) = (0, MPI_Status::default());
    // By the only thread in the library (the callers' contract).
    calls::p2p::iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, world.raw(), &mut flag, &mut st);
}

/// [`expect`], making the library progress meanwhile (see [`progress`]): this rank's gate is
/// closed and empty.
fn expect_progressing(inbox: &mut Inbox, limit: Duration, what: &'static str) -> Result<ToAgent, CheckpointError> {
    match recv_progressing(inbox, limit)? {
        None => Err(CheckpointError::NoReply { what, secs: limit.as_secs() }),
        Some(ToAgent::Abort { reason }) => Err(CheckpointError::Aborted(reason)),
        Some(m) => Ok(m),
    }
}

/// [`Inbox::recv_within`], making the library progress meanwhile, round after round (see
/// [`pause`]: a peer may be receiving a large message from this rank).
fn recv_progressing(inbox: &mut Inbox, limit: Duration) -> Result<Option<ToAgent>, CheckpointError> {
    let deadline = Instant::now() + limit;
    loop {
        progress();
        match inbox.poll()? {
            Some(Event::Keeper(m)) => return Ok(Some(m)),
            Some(_) => {}
            None if Instant::now() > deadline => return Ok(None),
            None => std::thread::yield_now(),
        }
    }
}

/// State that cannot be carried through a checkpoint, with the error the user sees.
fn refusal() -> Option<String> {
    REFUSAL_ORDER.iter().find_map(|kind| kind.refusal()).or_else(app_refusal)
}

/// What an app-mode rank cannot carry: a restarted process has none of the old one's memory,
/// so nothing that points into it may be pending (receive buffers, an attached buffer).
fn app_refusal() -> Option<String> {
    if !app::enabled() {
        return None;
    }
    let rank = world_rank();
    if !app::registered() {
        return Some(format!(
            "rank {rank} runs in app mode (mpicr run --mode app) but registered no save and restore functions: call mpicr_app_register() before MPI_Init"
        ));
    }
    // Checked once parked (the second asking, gate closed): the program's own state then.
    if !app::parked() {
        return None;
    }
    let pending = OBJ.requests.len();
    if pending > 0 {
        return Some(format!(
            "app-mode rank {rank} holds {pending} MPI request(s) at its safe point: complete or free them before mpicr_safe_point() (their buffers are not in the saved data)"
        ));
    }
    if crate::core::kinds::library::any_buffer_attached() {
        return Some(format!("app-mode rank {rank} has a buffer attached for buffered sends at its safe point: detach it first"));
    }
    // The memory of an MPI_Win_create or dynamic window is the program's, made again by its
    // `restore` after the restarted process's MPI_Init has to make the window; a shared
    // window's segment is not carried for app-mode ranks. MPI_Win_allocate memory is mpicr's:
    // saved in shim.state and mapped back (`win::map_saved`).
    let wins = OBJ.wins.snapshot().into_iter().filter(|(_, _, w)| w.flavor != crate::core::kinds::win::Flavor::Allocate).count();
    if wins > 0 {
        return Some(format!(
            "app-mode rank {rank} holds {wins} RMA window(s) at its safe point that app-mode ranks cannot carry (MPI_Win_create, _create_dynamic or _allocate_shared: their memory is not in the saved data); use MPI_Win_allocate, free them before mpicr_safe_point(), or run the rank without --mode app"
        ));
    }
    None
}

/// The error of an app-mode rank that never reached a safe point, saying where its program
/// was: it never came back to one, came back only behind its targets, waits to start a
/// collective past them, or is finalizing.
fn not_at_safe_point() -> CheckpointError {
    let targets = agent::targets();
    let comms = OBJ.comms.snapshot();
    let waiting: Vec<(String, u64, u64)> = agent::wants_past_targets()
        .into_iter()
        .map(|(g, n)| {
            let made_by = comms.iter().find(|(_, _, c)| c.recipe.gid == g).map_or_else(|| "?".to_string(), |(_, _, c)| c.recipe.made_by.to_string());
            (made_by, n, targets.get(&g).copied().unwrap_or(0))
        })
        .collect();
    CheckpointError::AppNotReached(app::not_reached(world_rank(), app::calls_since_wanted(), &waiting, app::is_finishing()))
}

/// Does this rank still have collectives to run before the current targets? (An app-mode rank
/// parks at a safe point only when it has none.)
pub(crate) fn behind_targets() -> bool {
    check_aligned().is_err()
}

/// Bytes of the files under `dir` (the program's saved data, for the epoch's statistics).
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

/// Waits until every communicator reached its collective target (or the coordinator aborts).
/// Woken by each collective counted meanwhile (`agent::try_start_collective`), by program
/// threads that wait to start one past its target, and by the keeper's messages. While not
/// aligned, collectives program threads wait for past their targets are asked for (`Wants`):
/// this rank cannot get further without them. Returns `Some(round)` when the coordinator
/// raised targets meanwhile (a round that may have come from another rank's wants).
fn wait_aligned(inbox: &mut Inbox, limit: Duration) -> Result<Option<u32>, CheckpointError> {
    let mut budget = Budget::new(limit);
    let mut asked: Vec<(u64, u64)> = Vec::new();
    loop {
        // MPI_Finalize is counted as a collective on MPI_COMM_WORLD: a thread that got into it
        // releases the library with the other ranks, so this checkpoint cannot be taken.
        if agent::finalizing() {
            return Err(CheckpointError::Finalizing);
        }
        // An app-mode rank whose program went on to MPI_Finalize without being taken at a safe
        // point has none left: say so now (raising the targets for its finalize would only
        // take every rank there, and this checkpoint fails all the same).
        if app::enabled() && app::is_finishing() && !app::parked() {
            return Err(not_at_safe_point());
        }
        // Only what this rank needs: when it is aligned, a start past a known target just waits
        // (asking would have every rank chase the next one, e.g. in MPI_Startall). An app-mode
        // rank is not done before it parks at its safe point: until then it needs every
        // collective on its way there.
        let aligned = check_aligned().is_ok() && (!app::enabled() || app::parked());
        let known = agent::targets();
        let wants: Vec<(u64, u64)> =
            agent::wants_past_targets().into_iter().filter(|w| !asked.contains(w) && (!aligned || !known.contains_key(&w.0))).collect();
        if !wants.is_empty() {
            tracing::debug!(target: "agent", ?wants, "asking for collective targets to rise");
            agent::send(&FromAgent::Wants { comms: wants.clone(), groups: create_group::members_of(&wants) })?;
            asked.extend(wants);
        }
        // Aligned, unless a program thread waits for a target this rank does not know: of a
        // communicator it made after reporting its counters, which its peers may have reported
        // and already be using (the coordinator answers with a round that tells it).
        if asked.is_empty() && check_aligned().is_ok() && (!app::enabled() || app::parked()) {
            return Ok(None);
        }
        let woke = wait_aligning(inbox, &mut budget).map_err(|e| {
            aborted_while(e, || match check_aligned() {
                Err(why) => Some(format!("this rank was still aligning: {why}")),
                Ok(()) if !asked.is_empty() => Some(format!("this rank had asked for {} target(s) to rise and waited for them", asked.len())),
                Ok(()) => Some("this rank was aligning".into()),
            })
        })?;
        match woke {
            Woke::Raised(round) => return Ok(Some(round)),
            Woke::Progress => {}
            // Checked again: the collectives may have arrived since the check above.
            // An app-mode rank that never parked is named for that first: its collectives are
            // behind only because its program runs on towards a safe point.
            Woke::TimedOut => {
                if app::enabled() && !app::parked() {
                    return Err(CheckpointError::Waited(Box::new(not_at_safe_point()), limit.as_secs()));
                }
                check_aligned().map_err(|e| CheckpointError::Waited(Box::new(e), limit.as_secs()))?;
                return Ok(None);
            }
        }
    }
}

/// What one wait of the alignment (for counters to reach their targets, or for the gate to
/// empty) brought.
enum Woke {
    /// The coordinator raised targets (another rank's wants): align again, in this round.
    Raised(u32),
    /// A program thread moved on, or a slice passed unwoken: check again.
    Progress,
    TimedOut,
}

/// One wait of the alignment: at most one `agent::SLICE` of `budget`. Program threads wake the
/// agent when they move on (`agent::notify_progress`); looking again after a slice unwoken
/// guards against a change that wakes nobody, which would otherwise cost the whole alignment
/// limit (seen while wake-ups asked for before the agent's channel existed were lost: see
/// `notify_progress`).
fn wait_aligning(inbox: &mut Inbox, budget: &mut Budget) -> Result<Woke, CheckpointError> {
    match inbox.next_in_slice(budget)? {
        Some(Event::Keeper(ToAgent::Targets { round, comms, groups })) => {
            agent::raise_targets(&comms, &groups);
            Ok(Woke::Raised(round))
        }
        Some(Event::Keeper(m)) => Err(unexpected(m, "during the checkpoint")),
        Some(_) => Ok(Woke::Progress),
        None if budget.left().is_zero() => Ok(Woke::TimedOut),
        None => Ok(Woke::Progress),
    }
}

/// Closes the gate and waits until no thread is inside (woken by the last one out), for at most
/// `limit` or until the coordinator aborts; on failure the gate opens again. Targets raised
/// meanwhile (another rank's wants) open it again too: `Some(round)`, align once more.
/// While an RMA epoch other than a fence's is open on this rank (`kinds::win::open_epoch`), the
/// gate opens again for it to end, new epochs held where none is open.
fn close_gate(inbox: &mut Inbox, limit: Duration) -> Result<Option<u32>, CheckpointError> {
    let deadline = Instant::now() + limit;
    let r = 'close: loop {
        match close_gate_once(inbox, limit) {
            Ok(None) => match win::open_epoch() {
                None => break Ok(None),
                Some(why) if Instant::now() > deadline => {
                    gate::open();
                    break Err(CheckpointError::EpochOpen { why, secs: limit.as_secs() });
                }
                Some(_) => {
                    gate::open();
                    win::hold_epochs(true);
                    // Open until the epochs end: a thread on its way to MPI_Win_unlock may wait
                    // at the gate, and on a busy node it may not get through a short opening
                    // (closed again too soon, every time, it never ends its epoch, and ranks
                    // waiting for its lock stay inside the library).
                    while win::open_epoch().is_some() && Instant::now() <= deadline {
                        let mut pause = Budget::new(Duration::from_millis(1));
                        match wait_aligning(inbox, &mut pause) {
                            Ok(Woke::Raised(round)) => break 'close Ok(Some(round)),
                            Err(e) => break 'close Err(e),
                            Ok(_) => {}
                        }
                    }
                }
            },
            other => break other,
        }
    };
    win::hold_epochs(false);
    r
}

fn close_gate_once(inbox: &mut Inbox, limit: Duration) -> Result<Option<u32>, CheckpointError> {
    gate::close();
    let mut budget = Budget::new(limit);
    let mut wait = || -> Result<Option<u32>, CheckpointError> {
        while !gate::empty() {
            if agent::finalizing() {
                return Err(CheckpointError::Finalizing);
            }
            match wait_aligning(inbox, &mut budget)? {
                Woke::Raised(round) => return Ok(Some(round)),
                Woke::Progress => {}
                Woke::TimedOut if gate::empty() => return Ok(None),
                Woke::TimedOut => return Err(CheckpointError::StayedInside),
            }
        }
        Ok(None)
    };
    let r = wait().map_err(|e| aborted_while(e, || (!gate::empty()).then(|| "a program thread of this rank was still inside the MPI library".into())));
    if !matches!(r, Ok(None)) {
        gate::open();
    }
    r
}

/// Has the coordinator aborted the checkpoint meanwhile (while the agent drains, another rank
/// may have failed)? Takes what is queued, without waiting.
fn interrupted(inbox: &mut Inbox) -> Result<(), CheckpointError> {
    while let Some(ev) = inbox.poll()? {
        if let Event::Keeper(m) = ev {
            return Err(unexpected(m, "during the checkpoint"));
        }
    }
    Ok(())
}

/// Paces the drain's progress loops: a yield between rounds, never a sleep. A large message
/// moves between ranks of a node in chunks through shared memory, each needing the sender's
/// progress as well as the receiver's (MPICH 5 without CMA, UCX without rendezvous in a PID
/// namespace), and neither side sees it move until it is whole: a sleep between rounds makes
/// every chunk wait for it (measured: 6 s to drain 229 MiB with rounds up to 1 ms apart), and a
/// 2 GiB message takes minutes. MPICH's own blocking waits spin likewise.
fn pause(inbox: &mut Inbox) -> Result<(), CheckpointError> {
    std::thread::yield_now();
    interrupted(inbox)
}

/// Waits for the coordinator's verdict after `Drained`: `Release` (every rank drained) or
/// `Abort`. Never decides alone while the coordinator may still send `Release` to the others:
/// past `limit` it says `Failed` (the coordinator then aborts, unless its `Release` is already on
/// the way, which arrives first) and waits for the verdict a while longer; only a silent
/// coordinator (gone, without the keeper noticing) leaves this rank to abort unreleased.
fn await_release(inbox: &mut Inbox, limit: Duration) -> Result<(), CheckpointError> {
    let verdict = |m: ToAgent| match m {
        ToAgent::Release => Ok(()),
        other => Err(unexpected(other, "while waiting to release")),
    };
    // Peers may still be draining messages from this rank (see `progress`).
    if let Some(m) = recv_progressing(inbox, limit)? {
        return verdict(m);
    }
    let why = CheckpointError::NotDrained(limit.as_secs());
    agent::send(&FromAgent::Failed { reason: why.to_string() })?;
    match inbox.recv_within(VERDICT_WAIT)? {
        Some(m) => verdict(m).map_err(|e| CheckpointError::NotDrainedThen(Box::new(why), Box::new(e))),
        None => Err(CheckpointError::NoVerdict(Box::new(why))),
    }
}

fn check_aligned() -> Result<(), CheckpointError> {
    let targets = agent::targets();
    for (_, _, c) in OBJ.comms.snapshot() {
        let t = targets.get(&c.recipe.gid).copied().unwrap_or(0);
        if c.coll_seq < t {
            return Err(CheckpointError::NotAligned { made_by: c.recipe.made_by.to_string(), at: c.coll_seq, target: t });
        }
    }
    part::not_aligned(&targets).or_else(|| create_group::not_aligned(&targets)).map_or(Ok(()), |why| Err(CheckpointError::PartNotAligned(why)))
}

/// The collective counts of the communicators this rank has no target for: made after it
/// reported its counters. Its program may have made one just before the gate closed and be
/// held at the gate on its way into the first collective on it, before it could ask for a
/// target, while its peers, further on, wait inside that collective; the coordinator compares
/// these counts with what its peers reported or asked for.
fn untold_counts() -> Vec<(u64, u64)> {
    let targets = agent::targets();
    OBJ.comms.snapshot().into_iter().filter(|(_, _, c)| !targets.contains_key(&c.recipe.gid)).map(|(_, _, c)| (c.recipe.gid, c.coll_seq)).collect()
}

/// Communicators by table index, with their real handles and peers as world ranks.
struct CommIndex {
    by_idx: HashMap<u32, (u64, c_int, Vec<i32>)>,
    by_gid: HashMap<u64, u32>,
}

impl CommIndex {
    fn build() -> Self {
        let mut by_idx = HashMap::new();
        let mut by_gid = HashMap::new();
        for (i, real, c) in OBJ.comms.snapshot() {
            by_gid.insert(c.recipe.gid, i);
            by_idx.insert(i, (c.recipe.gid, real.raw(), peers(&c)));
        }
        CommIndex { by_idx, by_gid }
    }

    fn sent_counts(&self) -> Vec<(u64, i32, u64)> {
        let mut out = Vec::new();
        for (_, _, c) in OBJ.comms.snapshot() {
            let p = peers(&c);
            for (k, &n) in c.sent.iter().enumerate() {
                if n > 0 {
                    out.push((c.recipe.gid, p.get(k).copied().unwrap_or(-1), n));
                }
            }
        }
        out
    }

    fn world_of(&self, comm: mpicr_virtid::VComm, local: c_int) -> Option<(u64, i32)> {
        let idx = handles::comm_index(comm)?;
        let (gid, _, peers) = self.by_idx.get(&idx)?;
        Some((*gid, *peers.get(local as usize)?))
    }
}

fn received_counts() -> Counts {
    let mut out = Counts::new();
    for (_, _, c) in OBJ.comms.snapshot() {
        let p = peers(&c);
        for (k, &n) in c.recvd.iter().enumerate() {
            if n > 0 {
                *out.entry((c.recipe.gid, p.get(k).copied().unwrap_or(-1))).or_insert(0) += n;
            }
        }
    }
    out
}

/// Tests every pending request once and counts the messages they received for the drain.
fn test_pending(comms: &CommIndex, progress: &mut Progress) -> usize {
    request::test_pending(|comm, source| {
        if let Some((gid, w)) = comms.world_of(comm, source) {
            progress.received(gid, w);
        }
    })
}

/// The drain has to make the real library progress (test the pending requests, probe for
/// messages): a loop, paced by [`pause`]. Another rank may fail meanwhile: the coordinator's
/// abort, queued on the agent's channel, ends the drain early.
fn drain(comms: &CommIndex, expected: &[(u64, i32, u64)], limit: Duration, inbox: &mut Inbox) -> Result<(), CheckpointError> {
    let deadline = Instant::now() + limit;
    let mut progress = Progress::new(expected, &received_counts())?;
    // Messages in flight: received by the program's own receives, or drained.
    interrupted(inbox)?;
    while !progress.done() {
        test_pending(comms, &mut progress);
        for gid in progress.comms() {
            let Some(idx) = comms.by_gid.get(&gid) else { continue };
            let (_, real, _) = &comms.by_idx[idx];
            loop {
                let (mut flag, mut st) = (0, MPI_Status::default());
                calls::p2p::iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, *real, &mut flag, &mut st);
                if flag == 0 {
                    break;
                }
                let n = st.bytes();
                let mut data = vec![0u8; n.max(0) as usize];
                let mut st2 = MPI_Status::default();
                // `data` holds the probed message's bytes.
                let rc = calls::p2p::recv_bytes(&mut data, n, st.MPI_SOURCE, st.MPI_TAG, *real, &mut st2).unwrap_or(MPI_ERR_OTHER);
                if rc != MPI_SUCCESS {
                    return Err(CheckpointError::DrainRecv(lower::error_string(rc)));
                }
                let comm_handle = handles::comm_handle(*idx);
                count_recv(comm_handle, st.MPI_SOURCE);
                if let Some((g, w)) = comms.world_of(comm_handle, st.MPI_SOURCE) {
                    progress.received(g, w);
                }
                drained::push(Message { comm: gid, source: st.MPI_SOURCE, tag: st.MPI_TAG, data });
            }
        }
        if Instant::now() > deadline {
            return Err(CheckpointError::InFlight { in_flight: progress.outstanding(), secs: limit.as_secs() });
        }
        if !progress.done() {
            pause(inbox)?;
        }
    }
    // Sends and nonblocking collectives complete now that every receiver drained.
    loop {
        test_pending(comms, &mut progress);
        // (A failed test leaves its message counted: the wait goes on to its deadline.)
        let waiting = request::pending_sends() + crate::core::bsend::in_flight().unwrap_or(1);
        if waiting == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(CheckpointError::PendingSends { waiting, secs: limit.as_secs() });
        }
        pause(inbox)?;
    }
    // Receives still pending are cancelled and posted again after the renewal.
    request::cancel_receives(deadline)?;
    // Matched-probe messages still in the library move to the drained buffer.
    Ok(message::drain_matched()?)
}

/// Everything the shim knows, saved beside the CRIU images (`mpicr inspect`, self-restart).
/// `D` is the drained messages: owned when read, borrowed when written (they may be GiBs: a
/// copy would double the memory and time of the write).
#[derive(Serialize, Deserialize)]
pub struct StateFile<D = mpicr_drain::Buffer> {
    pub format: u32,
    pub epoch: u64,
    pub world_rank: i32,
    pub world_size: i32,
    pub generation: u32,
    pub comms: Vec<(u32, u64, CommEntry)>,
    pub groups: Vec<(u32, u64, mpicr_virtid::GroupRecipe)>,
    pub datatypes: Vec<(u32, u64, crate::core::kinds::datatype::TypeEntry)>,
    pub ops: Vec<(u32, u64, crate::core::kinds::op::OpEntry)>,
    pub infos: Vec<(u32, u64, mpicr_virtid::InfoRecipe)>,
    pub requests: Vec<(u32, u64, crate::core::kinds::request::RequestEntry)>,
    pub keyvals: Vec<(u32, u64, crate::core::kinds::keyval::KeyvalEntry)>,
    pub errhandlers: Vec<(u32, u64, mpicr_virtid::ErrhandlerRecipe)>,
    pub files: Vec<(u32, u64, crate::core::kinds::file::FileEntry)>,
    pub wins: Vec<(u32, u64, crate::core::kinds::win::WinEntry)>,
    pub drained: D,
    pub user_errors: Vec<UserError>,
    /// A foreign face's own state (`core::app::FaceState`), for a restarted app-mode process.
    pub face: Vec<u8>,
}

/// The version of [`StateFile`]'s layout this build writes and reads.
pub const STATE_FORMAT: u32 = 9;

/// A table's snapshot with its real handles as the state file keeps them (untyped bits).
fn bits<R: RealHandle, E>(items: Vec<(u32, R, E)>) -> Vec<(u32, u64, E)> {
    items.into_iter().map(|(i, r, e)| (i, r.to_bits(), e)).collect()
}

fn write_state(path: &str, epoch: u64) -> Result<u64, CheckpointError> {
    drained::with_buffer(|drained| {
        let s = StateFile {
            format: STATE_FORMAT,
            epoch,
            world_rank: world_rank(),
            world_size: world_size(),
            generation: lower::current().number,
            comms: bits(OBJ.comms.snapshot()),
            groups: bits(OBJ.groups.snapshot()),
            datatypes: bits(OBJ.datatypes.snapshot()),
            ops: bits(OBJ.ops.snapshot()),
            infos: bits(OBJ.infos.snapshot()),
            requests: bits(OBJ.requests.snapshot()),
            keyvals: bits(OBJ.keyvals.snapshot()),
            errhandlers: bits(OBJ.errhandlers.snapshot()),
            files: bits(OBJ.files.snapshot()),
            wins: bits(OBJ.wins.snapshot()),
            drained,
            user_errors: user_errors(),
            face: crate::core::app::face_state(),
        };
        if path.is_empty() {
            return postcard::to_io(&s, Counter(0)).map(|c| c.0).map_err(CheckpointError::Encode);
        }
        let tmp = format!("{path}.tmp");
        let write_err = |err| CheckpointError::Write { path: path.to_string(), err };
        let file = std::fs::File::create(&tmp).map_err(write_err)?;
        // Streamed into the file: no copy of the encoding in memory either.
        let mut out = Counter(0).around(std::io::BufWriter::with_capacity(1 << 20, file));
        if let Err(e) = postcard::to_io(&s, &mut out) {
            return Err(out.err.take().map_or(CheckpointError::Encode(e), write_err));
        }
        let (n, w) = out.into_parts();
        w.into_inner().map_err(|e| write_err(e.into_error()))?;
        std::fs::rename(&tmp, path).map_err(write_err)?;
        Ok(n)
    })
}

/// Counts the bytes written through it (the state file's size for the epoch's statistics).
struct Counter(u64);

impl Counter {
    fn around<W: std::io::Write>(self, w: W) -> Counted<W> {
        Counted { n: self.0, w, err: None }
    }
}

impl std::io::Write for Counter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Counted<W> {
    n: u64,
    w: W,
    /// The first failure of `w` (postcard's error does not keep it).
    err: Option<std::io::Error>,
}

impl<W> Counted<W> {
    fn into_parts(self) -> (u64, W) {
        (self.n, self.w)
    }
}

impl<W: std::io::Write> std::io::Write for Counted<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self.w.write(b) {
            Ok(k) => {
                self.n += k as u64;
                Ok(k)
            }
            Err(e) => {
                let copy = std::io::Error::new(e.kind(), e.to_string());
                self.err.get_or_insert(copy);
                Err(e)
            }
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}
