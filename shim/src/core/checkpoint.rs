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

use crate::core::kinds::comm::{count_recv, peers, world_rank, world_size, CommEntry};
use crate::core::kinds::library::{user_errors, UserError};
use crate::core::kinds::{message, request, REFUSAL_ORDER, RENEWAL_ORDER};
use crate::core::state::OBJ;
use crate::core::{agent, drained, gate, handles, renew};
use crate::lower;
use crate::lower::abi::*;
use mpicr_drain::{Counts, Message, Progress};
use mpicr_virtid::RealHandle;
use mpicr_proto::{FromAgent, Timings, ToAgent};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::raw::c_int;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

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
}

impl Limits {
    fn from_env() -> Limits {
        Limits {
            align: timeout("MPICR_ALIGN_TIMEOUT", 120),
            drain: timeout("MPICR_DRAIN_TIMEOUT", 120),
            resume: timeout("MPICR_RESUME_TIMEOUT", 1800),
        }
    }
}

/// Waits for the keeper's next message of a checkpoint: `Abort` and a deadline become errors.
fn expect(reader: &mut UnixStream, limit: Duration, what: &str) -> Result<ToAgent, String> {
    match agent::recv_within(reader, limit)? {
        None => Err(format!("no {what} from the coordinator within {} s", limit.as_secs())),
        Some(ToAgent::Abort { reason }) => Err(format!("aborted by the coordinator: {reason}")),
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
#[derive(Clone, Copy, PartialEq, PartialOrd)]
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
pub fn run(reader: &mut UnixStream, epoch: u64, stop: bool, state_path: &str) {
    crate::lower::prepare_thread();
    let mut stage = Stage::Aligning;
    let mut clock = Clock::new();
    let limits = Limits::from_env();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        phases(reader, epoch, stop, state_path, &limits, &mut stage, &mut clock)
    }))
    .unwrap_or_else(|p| Err(format!("internal error in the checkpoint agent: {}", agent::panic_message(&*p))));
    let Err(reason) = result else {
        agent::clear_pending_sigpipe();
        return;
    };
    let _ = agent::send(&FromAgent::Failed { reason: reason.clone() });
    if stage == Stage::Renewing {
        lower::fatal(&format!("cannot renew the MPI library: {reason}"));
    }
    if stage == Stage::Released {
        let renewed = std::panic::catch_unwind(|| renew::renew(false, None))
            .unwrap_or_else(|p| Err(format!("internal error: {}", agent::panic_message(&*p))));
        agent::clear_pending_sigpipe();
        if let Err(e) = renewed {
            lower::fatal(&format!("checkpoint failed ({reason}) and the MPI library could not be restarted: {e}"));
        }
    }
    if stage >= Stage::GateClosed {
        gate::open();
    }
    agent::end_alignment();
}

fn phases(
    reader: &mut UnixStream,
    epoch: u64,
    _stop: bool,
    state_path: &str,
    limits: &Limits,
    stage: &mut Stage,
    clock: &mut Clock,
) -> Result<(), String> {
    if agent::finalizing() {
        return Err("the program is finalizing MPI".into());
    }
    if let Some(why) = refusal() {
        return Err(why);
    }
    renew::check_renewal()?;
    // 1. Align collectives.
    agent::begin_alignment();
    let counters: Vec<(u64, u64)> = OBJ.comms.snapshot().into_iter().map(|(_, _, c)| (c.recipe.gid, c.coll_seq)).collect();
    agent::send(&FromAgent::Counters { comms: counters }).map_err(|e| e.to_string())?;
    let targets = match expect(reader, limits.align, "collective targets")? {
        ToAgent::Targets { comms } => comms.into_iter().collect::<HashMap<_, _>>(),
        other => return Err(format!("unexpected message while aligning: {other:?}")),
    };
    agent::set_targets(targets);
    wait_aligned(reader, limits.align)?;
    let mut abort_reason = None;
    if !gate::close(limits.align, || {
        abort_reason = aborted(reader);
        abort_reason.is_some()
    }) {
        return Err(abort_reason
            .unwrap_or_else(|| "a thread stayed inside the MPI library (a blocking collective whose peers never arrived?)".into()));
    }
    *stage = Stage::GateClosed;
    check_aligned()?;
    test_panic("align");
    clock.lap("align");

    // 2. Exchange send counts, drain.
    let comms = CommIndex::build();
    agent::send(&FromAgent::SendCounts { sent: comms.sent_counts() }).map_err(|e| e.to_string())?;
    // Every rank aligns and closes its gate within its own deadlines (twice `align`).
    let expected = match expect(reader, with_grace(2 * limits.align), "expected receives")? {
        ToAgent::ExpectedRecvs { expect } => expect,
        other => return Err(format!("unexpected message while draining: {other:?}")),
    };
    drain(&comms, &expected, limits.drain, &mut || aborted(reader))?;
    test_panic("drain");
    clock.lap("drain");

    // 3. Job-wide barrier: release only once every rank drained (releasing and renewing are
    //    collective, so a rank that fails before this point must find nobody released).
    agent::send(&FromAgent::Drained).map_err(|e| e.to_string())?;
    *stage = Stage::Drained;
    await_release(reader, with_grace(limits.drain))?;

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
    let state_bytes = write_state(state_path, epoch)?;
    let (msgs, bytes) = drained::stats();
    agent::send(&FromAgent::ReadyToDump { drained_msgs: msgs, drained_bytes: bytes, state_bytes, timings: clock.timings() })
        .map_err(|e| e.to_string())?;

    // 5. The keeper dumps us. When we run again it is either right after the dump (continue)
    //    or in a restored process (restart).
    let (restarted, size) = match expect(reader, limits.resume, "resume")? {
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
        other => return Err(format!("unexpected message while waiting to resume: {other:?}")),
    };
    let mut clock = Clock::new();
    *stage = Stage::Renewing;
    if let Err(e) = renew::renew(restarted, Some(size)) {
        lower::fatal(&format!("cannot renew the MPI library: {e}"));
    }
    *stage = Stage::Done;
    clock.lap("renew");
    gate::open();
    agent::end_alignment();
    let _ = agent::send(&FromAgent::Resumed { timings: clock.timings() });
    let _ = agent::send_hello();
    crate::core::resume::resumed(restarted);
    Ok(())
}

/// State that cannot be carried through a checkpoint, with the error the user sees.
fn refusal() -> Option<String> {
    REFUSAL_ORDER.iter().find_map(|kind| kind.refusal())
}

/// Waits until every communicator reached its collective target (or the coordinator aborts).
fn wait_aligned(reader: &mut UnixStream, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        if check_aligned().is_ok() {
            return Ok(());
        }
        if let Some(reason) = aborted(reader) {
            return Err(reason);
        }
        if Instant::now() > deadline {
            // Checked again: the collectives may have arrived since the check above.
            return match check_aligned() {
                Ok(()) => Ok(()),
                Err(e) => Err(format!("{e} (waited {} s)", limit.as_secs())),
            };
        }
        agent::wait_for_progress(Duration::from_millis(20));
    }
}

/// Has the coordinator aborted the checkpoint meanwhile? Looks at the control socket without
/// blocking (while the agent waits for this rank's threads, another rank may have failed).
fn aborted(reader: &mut UnixStream) -> Option<String> {
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    // SAFETY: a one-byte peek into a local on our own socket; never blocks.
    let n = unsafe { libc::recv(reader.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    if n < 0 {
        return None;
    }
    // n == 0: the keeper hung up, which the read reports.
    match agent::recv(reader) {
        Ok(ToAgent::Abort { reason }) => Some(format!("aborted by the coordinator: {reason}")),
        Ok(other) => Some(format!("unexpected message during the checkpoint: {other:?}")),
        Err(e) => Some(e),
    }
}

/// Waits for the coordinator's verdict after `Drained`: `Release` (every rank drained) or
/// `Abort`. Never decides alone while the coordinator may still send `Release` to the others:
/// past `limit` it says `Failed` (the coordinator then aborts, unless its `Release` is already on
/// the way, which arrives first) and waits for the verdict a while longer; only a silent
/// coordinator (gone, without the keeper noticing) leaves this rank to abort unreleased.
fn await_release(reader: &mut UnixStream, limit: Duration) -> Result<(), String> {
    let verdict = |m: ToAgent| match m {
        ToAgent::Release => Ok(()),
        ToAgent::Abort { reason } => Err(format!("aborted by the coordinator: {reason}")),
        other => Err(format!("unexpected message while waiting to release: {other:?}")),
    };
    if let Some(m) = agent::recv_within(reader, limit)? {
        return verdict(m);
    }
    let why = format!("not every rank drained within {} s", limit.as_secs());
    agent::send(&FromAgent::Failed { reason: why.clone() }).map_err(|e| e.to_string())?;
    match agent::recv_within(reader, VERDICT_WAIT)? {
        Some(m) => verdict(m).map_err(|e| format!("{why}; {e}")),
        None => Err(format!("{why}, and the coordinator never answered")),
    }
}

fn check_aligned() -> Result<(), String> {
    let targets = agent::targets();
    for (_, _, c) in OBJ.comms.snapshot() {
        let t = targets.get(&c.recipe.gid).copied().unwrap_or(0);
        if c.coll_seq < t {
            return Err(format!(
                "collectives not aligned: communicator from {} is at collective {} of {}",
                c.recipe.made_by, c.coll_seq, t
            ));
        }
    }
    Ok(())
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

    fn world_of(&self, comm: MPI_Comm, local: c_int) -> Option<(u64, i32)> {
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

fn drain(comms: &CommIndex, expected: &[(u64, i32, u64)], limit: Duration, aborted: &mut dyn FnMut() -> Option<String>) -> Result<(), String> {
    let f = lower::fns();
    let deadline = Instant::now() + limit;
    let mut progress = Progress::new(expected, &received_counts())?;
    // Another rank may fail meanwhile: the coordinator's abort ends the drain early.
    let mut next_look = Instant::now();
    let mut check_abort = || -> Result<(), String> {
        if Instant::now() >= next_look {
            next_look = Instant::now() + Duration::from_millis(20);
            if let Some(reason) = aborted() {
                return Err(reason);
            }
        }
        Ok(())
    };
    // Messages in flight: received by the program's own receives, or drained.
    while !progress.done() {
        check_abort()?;
        test_pending(comms, &mut progress);
        for gid in progress.comms() {
            let Some(idx) = comms.by_gid.get(&gid) else { continue };
            let (_, real, _) = &comms.by_idx[idx];
            loop {
                let (mut flag, mut st) = (0, MPI_Status::default());
                // SAFETY: probing a live real communicator into locals.
                unsafe { f.MPI_Iprobe.map(|p| p(MPI_ANY_SOURCE, MPI_ANY_TAG, *real, &mut flag, &mut st)) };
                if flag == 0 {
                    break;
                }
                let n = st.bytes();
                let mut data = vec![0u8; n.max(0) as usize];
                let mut st2 = MPI_Status::default();
                // SAFETY: `data` holds the probed message's bytes.
                let rc = unsafe {
                    f.MPI_Recv_c.map_or(MPI_ERR_OTHER, |r| {
                        r(data.as_mut_ptr().cast(), n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, *real, &mut st2)
                    })
                };
                if rc != MPI_SUCCESS {
                    return Err(format!("receiving an in-flight message failed: {}", lower::error_string(rc)));
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
            return Err(format!("{} in-flight messages never arrived (waited {} s)", progress.outstanding(), limit.as_secs()));
        }
    }
    // Sends and nonblocking collectives complete now that every receiver drained.
    loop {
        test_pending(comms, &mut progress);
        let waiting = request::pending_sends();
        if waiting == 0 {
            break;
        }
        check_abort()?;
        if Instant::now() > deadline {
            return Err(format!("{waiting} pending sends or collectives did not complete (waited {} s)", limit.as_secs()));
        }
        std::thread::yield_now();
    }
    // Receives still pending are cancelled and posted again after the renewal.
    request::cancel_receives(deadline)?;
    // Matched-probe messages still in the library move to the drained buffer.
    message::drain_matched()
}

/// Everything the shim knows, saved beside the CRIU images (`mpicr inspect`, self-restart).
#[derive(Serialize, Deserialize)]
pub struct StateFile {
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
    pub drained: mpicr_drain::Buffer,
    pub user_errors: Vec<UserError>,
}

/// A table's snapshot with its real handles as the state file keeps them (untyped bits).
fn bits<R: RealHandle, E>(items: Vec<(u32, R, E)>) -> Vec<(u32, u64, E)> {
    items.into_iter().map(|(i, r, e)| (i, r.to_bits(), e)).collect()
}

fn write_state(path: &str, epoch: u64) -> Result<u64, String> {
    let s = StateFile {
        format: 1,
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
        drained: drained::snapshot(),
        user_errors: user_errors(),
    };
    let bytes = postcard::to_stdvec(&s).map_err(|e| format!("encoding shim.state: {e}"))?;
    if path.is_empty() {
        return Ok(bytes.len() as u64);
    }
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, &bytes).and_then(|_| std::fs::rename(&tmp, path)).map_err(|e| format!("writing {path}: {e}"))?;
    Ok(bytes.len() as u64)
}
