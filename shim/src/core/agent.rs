//! The agent thread: talks to the keeper over the control socket and runs the checkpoint
//! protocol (see `mpicr_proto` for the message sequence). Without a keeper (plain LD_PRELOAD)
//! it never starts and the shim is pure interposition.
//!
//! Alignment state lives here because every collective consults it: while a checkpoint is in
//! progress (`ALIGNING`), a collective may start only if the coordinator's target for its
//! communicator allows it; the others try again, driving the library in between
//! (`face::api::coll`), until the checkpoint ends or the targets rise, and note what they wait for (`WANTS`): a rank that cannot reach its targets
//! without those collectives asks the coordinator to raise them.
//!
//! The agent does not poll: it waits on one channel ([`Inbox`]), fed by a reader thread on the
//! control socket (the keeper's messages, an abort included, and the end of the connection) and
//! by program threads while a checkpoint waits for them ([`notify_progress`]: a collective
//! counted during the alignment, the last thread out of a closing gate). Deadlines are waits on
//! that channel, counted so that time frozen by CRIU does not count ([`Budget`]).

use crate::core::{checkpoint, renew};
use mpicr_proto::{FromAgent, Hello, ToAgent, CTL_FD_ENV};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static ALIGNING: AtomicBool = AtomicBool::new(false);
/// Targets per communicator id; `None` until the coordinator sent them.
static TARGETS: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);
/// Collectives program threads wait to start past their targets: per communicator id, the
/// highest number waited for, while aligning.
static WANTS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// Notes that a program thread waits to start collective number `n` on communicator `gid`; a
/// new one wakes the agent (it may have to ask for the target to rise).
fn note_want(gid: u64, n: u64) {
    let mut w = WANTS.lock();
    match w.iter_mut().find(|(g, _)| *g == gid) {
        Some((_, m)) if *m >= n => return,
        Some((_, m)) => *m = n,
        None => w.push((gid, n)),
    }
    drop(w);
    notify_progress();
}

/// What program threads wait for past the current targets (see [`note_want`]).
pub(crate) fn wants_past_targets() -> Vec<(u64, u64)> {
    let t = TARGETS.lock();
    let Some(t) = t.as_ref() else { return Vec::new() };
    WANTS.lock().iter().copied().filter(|&(g, n)| n > t.get(&g).copied().unwrap_or(0)).collect()
}

/// May a collective numbered `next` start on communicator `gid`? (`try_start_collective`
/// counts it only if so.)
#[inline(always)]
pub fn may_start_collective(gid: u64, next: u64) -> bool {
    if !ALIGNING.load(Ordering::SeqCst) {
        return true;
    }
    let t = TARGETS.lock();
    match t.as_ref() {
        None => false,
        Some(m) => next <= m.get(&gid).copied().unwrap_or(0),
    }
}

/// Is a checkpoint aligning collectives on this rank?
pub(crate) fn aligning() -> bool {
    ALIGNING.load(Ordering::SeqCst)
}

/// Program threads between reading `ALIGNING` as false and counting their collective.
static STARTING: AtomicUsize = AtomicUsize::new(0);

/// Counts a collective on a communicator with counters `c` and returns its number, or `None`
/// (nothing counted) while a checkpoint's alignment does not allow it yet. No lock unless
/// aligning: the count is an atomic, and `begin_alignment` waits for the threads that saw
/// "not aligning" to finish counting, so the agent's read of the counters that follows
/// includes every collective started without a target, and none that had to wait.
#[inline]
pub fn try_start_collective(c: &mpicr_virtid::CommCounters) -> Option<u64> {
    // A communicator of one process involves no other rank: its collectives can never
    // hold another rank back, so they run on (a rank may need them to reach a target).
    if c.alone() {
        let n = c.start_collective();
        if ALIGNING.load(Ordering::Relaxed) {
            notify_progress();
        }
        return Some(n);
    }
    STARTING.fetch_add(1, Ordering::SeqCst);
    if !ALIGNING.load(Ordering::SeqCst) {
        let n = c.start_collective();
        STARTING.fetch_sub(1, Ordering::Release);
        return Some(n);
    }
    STARTING.fetch_sub(1, Ordering::Release);
    let gid = c.gid();
    let n = c.start_collective_if(|next| may_start_collective(gid, next));
    match n {
        // The agent waits for counters to reach their targets.
        Some(_) => notify_progress(),
        None => note_want(gid, c.collectives() + 1),
    }
    n
}

/// Starts aligning: from now on collectives need a target. Returns once no thread is still
/// counting a collective it started without one (see `try_start_collective`).
pub(crate) fn begin_alignment() {
    *TARGETS.lock() = None;
    crate::core::kinds::create_group::clear_owed();
    WANTS.lock().clear();
    ALIGNING.store(true, Ordering::SeqCst);
    while STARTING.load(Ordering::SeqCst) != 0 {
        std::hint::spin_loop();
        std::thread::yield_now();
    }
}

/// The first round of targets: per communicator, and per `MPI_Comm_create_group` key this rank
/// is a member of (`groups`).
pub(crate) fn set_targets(mut t: HashMap<u64, u64>, groups: &[(u64, u64)]) {
    crate::core::kinds::create_group::owe(groups.iter().map(|&(g, _)| g));
    for &(g, n) in groups {
        let cur = t.entry(g).or_insert(0);
        *cur = (*cur).max(n);
    }
    *TARGETS.lock() = Some(t);
    crate::core::app::poke();
}

/// A later round: targets the coordinator raised because some rank needed them (`groups`: of
/// the `MPI_Comm_create_group` keys this rank is a member of).
pub(crate) fn raise_targets(raised: &[(u64, u64)], groups: &[(u64, u64)]) {
    crate::core::kinds::create_group::owe(groups.iter().map(|&(g, _)| g));
    let mut t = TARGETS.lock();
    let t = t.get_or_insert_with(HashMap::new);
    for &(g, n) in raised.iter().chain(groups) {
        let cur = t.entry(g).or_insert(0);
        *cur = (*cur).max(n);
    }
    crate::core::app::poke();
}

pub(crate) fn targets() -> HashMap<u64, u64> {
    TARGETS.lock().clone().unwrap_or_default()
}

pub(crate) fn end_alignment() {
    ALIGNING.store(false, Ordering::SeqCst);
    crate::core::kinds::create_group::clear_owed();
    *TARGETS.lock() = None;
    WANTS.lock().clear();
}

/// The writing half of the control connection (the C API sends requests on it too).
static CTL: OnceLock<Mutex<UnixStream>> = OnceLock::new();

pub(crate) fn send(msg: &FromAgent) -> std::io::Result<()> {
    let Some(ctl) = CTL.get() else { return Err(std::io::Error::other("not running under mpicr run")) };
    let w = ctl.lock();
    // MSG_NOSIGNAL: program threads send here too (the C API), and the program may not ignore
    // SIGPIPE; a keeper that went away must be an error, not the end of the program.
    mpicr_proto::send_on(&w, msg)
}

/// Is this process supervised by a keeper (so that checkpoints are possible)?
pub fn supervised() -> bool {
    CTL.get().is_some()
}

/// Starts the agent when the program runs under `mpicr run` (a control fd in the environment).
pub fn start_if_supervised() {
    let Some(reader) = connect() else { return };
    if let Err(e) = send_hello() {
        eprintln!("mpicr: cannot reach the keeper: {e}; checkpoints are disabled");
        return;
    }
    send_write_tracker();
    start_thread(reader);
}

/// Takes the control connection the keeper passed (`CTL_FD_ENV`): its writing half becomes
/// `CTL`, the reading half is returned (`None`: not supervised, or unusable).
fn connect() -> Option<UnixStream> {
    let fd = std::env::var(CTL_FD_ENV).ok().and_then(|v| v.parse::<i32>().ok())?;
    if CTL.get().is_some() {
        return None;
    }
    // The control socket is for this process only: the program's children must inherit neither
    // the descriptor nor its number. (Removing the variable races only with a program thread
    // calling setenv/getenv during MPI_Init, which nothing sane does.)
    std::env::remove_var(CTL_FD_ENV);
    // Close-on-exec; a number that is not open fails below, when the socket is used.
    let sock = crate::lower::fds::adopt_socket(fd);
    let reader = match sock.try_clone() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mpicr: control socket (fd {fd}) unusable: {e}; checkpoints are disabled");
            return None;
        }
    };
    CTL.set(Mutex::new(sock)).ok()?;
    Some(reader)
}

fn start_thread(reader: UnixStream) {
    quiet_agent_panics();
    let spawned = std::thread::Builder::new().name(AGENT_THREAD.into()).spawn(move || serve(reader));
    if let Err(e) = spawned {
        eprintln!("mpicr: cannot start the agent thread: {e}; checkpoints are disabled");
    }
}

/// A restarted app-mode process (`core::app`), in its `MPI_Init`: takes the control connection
/// and waits for the keeper's `Resume` (every rank restored), applying its settings; returns the
/// job's size. The agent thread starts later ([`start_after_restart`]).
pub(crate) fn await_restart() -> Result<i32, AgentError> {
    let mut reader = connect().ok_or(AgentError::NotRestarted)?;
    loop {
        match mpicr_proto::recv(&mut reader) {
            Ok(Some(ToAgent::Resume { restarted: true, size, env, .. })) => {
                for (k, v) in env {
                    match v {
                        Some(v) => std::env::set_var(k, v),
                        None => std::env::remove_var(k),
                    }
                }
                *RESTART_READER.lock() = Some(reader);
                return Ok(size);
            }
            Ok(Some(ToAgent::Abort { reason })) => return Err(AgentError::Aborted(reason)),
            Ok(Some(_)) => {}
            Ok(None) => return Err(AgentError::Closed),
            Err(e) => return Err(AgentError::Connection(e.to_string())),
        }
    }
}

static RESTART_READER: Mutex<Option<UnixStream>> = Mutex::new(None);

/// Tells the keeper why this process cannot go on (a restart that failed), if it listens.
pub fn report_failure(reason: &str) {
    let _ = send(&FromAgent::Failed { reason: reason.to_string() });
}

/// After [`await_restart`] and the rebuild: hello, `Resumed`, and the agent thread.
pub(crate) fn start_after_restart(timings: mpicr_proto::Timings) {
    let Some(reader) = RESTART_READER.lock().take() else { return };
    let _ = send_hello();
    send_write_tracker();
    let _ = send(&FromAgent::Resumed { timings });
    start_thread(reader);
}

/// Tells the keeper who this rank is and how many renewals it has left (again after each one).
pub(crate) fn send_hello() -> std::io::Result<()> {
    let hello = Hello {
        rank: crate::core::kinds::comm::world_rank(),
        size: crate::core::kinds::comm::world_size(),
        pid: std::process::id(),
        library: crate::lower::current().path.display().to_string(),
        renew_strategy: renew::strategy().name().to_string(),
        renewals_left: renew::renewals_left(),
    };
    send(&FromAgent::Hello(hello))
}

fn serve(reader: UnixStream) {
    block_sigpipe();
    let Some(mut inbox) = Inbox::start(reader) else { return };
    // The keeper went away (`None`): the job is ending.
    while let Some(msg) = inbox.next_message() {
        match msg {
            ToAgent::Checkpoint { epoch, stop, state_path } => checkpoint::run(&mut inbox, epoch, stop, &state_path),
            ToAgent::Abort { .. } | ToAgent::Resume { .. } | ToAgent::Targets { .. } | ToAgent::ExpectedRecvs { .. } | ToAgent::Release => {
                // Out of sequence: nothing in progress.
            }
        }
    }
}

/// Blocks SIGPIPE on the calling thread (the agent's): a write into a socket whose peer is gone
/// then fails with EPIPE instead of killing the program. That covers the agent's own sockets and
/// the renewed library's PMI client, whose `MPI_Init` runs on this thread (a PMI connection the
/// keeper never got makes the renewal fail with a message, not the rank die of a signal), and
/// the threads the library starts from it, which inherit the mask. Program threads keep theirs.
fn block_sigpipe() {
    crate::lower::signals::block_sigpipe();
}

/// Takes a SIGPIPE left pending on the agent thread by a write that failed with EPIPE (see
/// [`block_sigpipe`]), so that it is not carried along (nor into an image) for nothing.
pub(crate) fn clear_pending_sigpipe() {
    crate::lower::signals::clear_pending_sigpipe();
}

/// What went wrong on the control connection, as the keeper hears it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgentError {
    #[error("the keeper closed the control connection")]
    Closed,
    #[error("control connection: {0}")]
    Connection(String),
    #[error("not running under `mpicr run`")]
    NotSupervised,
    /// A restarted app-mode process found no control connection.
    #[error("not running under `mpicr restart` (no control connection)")]
    NotRestarted,
    /// The keeper aborted the restart (its reason).
    #[error("{0}")]
    Aborted(String),
}

/// Why there is no write tracker (`FromAgent::WriteTracker`'s error).
#[derive(Debug, thiserror::Error)]
pub enum WriteTrackerError {
    #[error("userfaultfd: {0}")]
    Userfaultfd(std::io::Error),
    #[error("userfaultfd asynchronous write-protect mode (Linux 6.7+): {0}")]
    WriteProtect(std::io::Error),
}

/// What drives the agent: one channel, fed by the control-socket reader thread (messages from
/// the keeper, and the end of the connection) and by program threads (progress while a
/// checkpoint waits for them).
#[derive(Debug)]
pub(crate) enum Event {
    /// A message from the keeper.
    Keeper(ToAgent),
    /// The control connection ended; the reader thread is gone.
    Gone(AgentError),
    /// A program thread moved on: it counted a collective while collectives are aligned, or it
    /// was the last to leave a closing gate. The agent checks again what it waits for.
    Progress,
}

/// The sending half of the agent's channel (program threads and the reader thread).
static EVENTS: OnceLock<Sender<Event>> = OnceLock::new();
/// A `Progress` event is queued and the agent has not taken it yet: program threads do not
/// queue another (one wake-up covers every change before the agent looks).
static PROGRESS_QUEUED: AtomicBool = AtomicBool::new(false);

/// Tells the agent that a program thread moved on (see [`Event::Progress`]). Called only while
/// a checkpoint waits for program threads (aligning, or the gate closing): the normal paths
/// never get here. Nothing is marked queued before the agent's channel exists: a program that
/// called `MPI_Pready` (which then woke the agent always) before the agent thread had started
/// left the mark set with no event behind it, and every later wake-up of the process was
/// dropped (its checkpoints then waited for the agent's recheck).
#[cold]
pub(crate) fn notify_progress() {
    let Some(tx) = EVENTS.get() else { return };
    if PROGRESS_QUEUED.swap(true, Ordering::AcqRel) {
        return;
    }
    if tx.send(Event::Progress).is_err() {
        PROGRESS_QUEUED.store(false, Ordering::Release);
    }
}

/// How long one wait of [`Inbox`] sleeps before it counts the time it waited. A slice never
/// counts more than its own length, so the time CRIU keeps the process frozen for a dump, or
/// the time between a dump and a restore (even on a host whose clock is far ahead), is not
/// taken from a deadline. The alignment also looks again after each slice unwoken
/// (`checkpoint::wait_aligning`).
const SLICE: Duration = Duration::from_millis(250);

/// A deadline that counts only time this process ran (see [`SLICE`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    limit: Duration,
    waited: Duration,
}

impl Budget {
    pub(crate) fn new(limit: Duration) -> Self {
        Budget { limit, waited: Duration::ZERO }
    }
    pub(crate) fn left(&self) -> Duration {
        self.limit.saturating_sub(self.waited)
    }
    #[cfg(test)]
    fn spent(&self) -> bool {
        self.waited >= self.limit
    }
}

/// The agent's end of its channel. The end of the control connection is remembered: every
/// later wait reports it again.
pub(crate) struct Inbox {
    rx: Receiver<Event>,
    gone: Option<AgentError>,
}

/// The control-socket reader's thread name.
const READER_THREAD: &str = "mpicr-ctl";

impl Inbox {
    /// Starts the reader thread on `reader` and returns the channel it feeds. Called on the
    /// agent thread, so the reader inherits its signal mask (SIGPIPE blocked).
    fn start(reader: UnixStream) -> Option<Inbox> {
        let (tx, rx) = mpsc::channel();
        let _ = EVENTS.set(tx.clone());
        let spawned = std::thread::Builder::new().name(READER_THREAD.into()).spawn(move || read_control(reader, tx));
        if let Err(e) = spawned {
            eprintln!("mpicr: cannot start the agent thread: {e}; checkpoints are disabled");
            return None;
        }
        Some(Inbox { rx, gone: None })
    }

    /// An inbox fed by `tx` only (tests).
    #[cfg(test)]
    fn with_channel() -> (Sender<Event>, Inbox) {
        let (tx, rx) = mpsc::channel();
        (tx, Inbox { rx, gone: None })
    }

    fn take(&mut self, ev: Event) -> Result<Event, AgentError> {
        match ev {
            Event::Gone(e) => {
                self.gone = Some(e.clone());
                Err(e)
            }
            Event::Progress => {
                // Taken: the next change queues a new one. (Acquire: what the program thread did
                // before queueing is visible to the check that follows.)
                PROGRESS_QUEUED.swap(false, Ordering::AcqRel);
                Ok(Event::Progress)
            }
            ev => Ok(ev),
        }
    }

    /// The next event without waiting, if one is queued.
    pub(crate) fn poll(&mut self) -> Result<Option<Event>, AgentError> {
        if let Some(e) = &self.gone {
            return Err(e.clone());
        }
        match self.rx.try_recv() {
            Ok(ev) => self.take(ev).map(Some),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(self.disconnected()),
        }
    }

    fn disconnected(&mut self) -> AgentError {
        let e = AgentError::Closed;
        self.gone = Some(e.clone());
        e
    }

    /// The next event, waiting at most one [`SLICE`] of what is left of `budget`; `Ok(None)`
    /// when that passed without one.
    pub(crate) fn next_in_slice(&mut self, budget: &mut Budget) -> Result<Option<Event>, AgentError> {
        if let Some(ev) = self.poll()? {
            return Ok(Some(ev));
        }
        let slice = SLICE.min(budget.left());
        if slice.is_zero() {
            return Ok(None);
        }
        let t = Instant::now();
        let got = self.rx.recv_timeout(slice);
        budget.waited += Instant::now().saturating_duration_since(t).min(slice);
        match got {
            Ok(ev) => self.take(ev).map(Some),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(self.disconnected()),
        }
    }

    /// The next event, waiting at most what is left of `budget` (see [`SLICE`]); `Ok(None)`
    /// when it ran out.
    pub(crate) fn next_within(&mut self, budget: &mut Budget) -> Result<Option<Event>, AgentError> {
        loop {
            if let Some(ev) = self.next_in_slice(budget)? {
                return Ok(Some(ev));
            }
            if budget.left().is_zero() {
                return Ok(None);
            }
        }
    }

    /// The keeper's next message, waiting at most `limit` of running time; `Ok(None)` when it
    /// ran out. Progress events are skipped.
    pub(crate) fn recv_within(&mut self, limit: Duration) -> Result<Option<ToAgent>, AgentError> {
        let mut budget = Budget::new(limit);
        loop {
            match self.next_within(&mut budget)? {
                Some(Event::Keeper(m)) => return Ok(Some(m)),
                Some(_) => {}
                None => return Ok(None),
            }
        }
    }

    /// The keeper's next message, however long it takes; `None` once the connection ended.
    fn next_message(&mut self) -> Option<ToAgent> {
        if self.gone.is_some() {
            return None;
        }
        loop {
            match self.rx.recv() {
                Ok(ev) => match self.take(ev) {
                    Ok(Event::Keeper(m)) => return Some(m),
                    Ok(_) => {}
                    Err(_) => return None,
                },
                Err(_) => return None,
            }
        }
    }
}

/// The reader thread: every message of the keeper into the agent's channel, then how the
/// connection ended.
fn read_control(mut reader: UnixStream, tx: Sender<Event>) {
    loop {
        let ev = match mpicr_proto::recv(&mut reader) {
            Ok(Some(m)) => Event::Keeper(m),
            Ok(None) => Event::Gone(AgentError::Closed),
            Err(e) => Event::Gone(AgentError::Connection(e.to_string())),
        };
        let last = matches!(ev, Event::Gone(_));
        if tx.send(ev).is_err() || last {
            return;
        }
    }
}

/// The agent thread's name (its panics are reported to the keeper, not printed).
pub(crate) const AGENT_THREAD: &str = "mpicr-agent";

thread_local! {
    /// Where the agent thread last panicked (set by the hook, read by the panic boundary).
    static PANIC_AT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Panics of the agent thread are caught by its panic boundary (`checkpoint::run`), which
/// reports them to the keeper in one line: the default hook's lines on the program's stderr would
/// only add noise. Every other thread keeps the previous hook.
fn quiet_agent_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(AGENT_THREAD) {
                let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
                PANIC_AT.with(|p| *p.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// One line saying what a caught panic said, and where (when the hook saw it).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let msg =
        payload.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| payload.downcast_ref::<String>().cloned()).unwrap_or_else(|| "unknown panic".into());
    let at = PANIC_AT.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let line = if at.is_empty() { msg } else { format!("{msg} (at {at})") };
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Set once the program entered MPI_Finalize: no checkpoint may start after that.
static FINALIZING: AtomicBool = AtomicBool::new(false);

/// Called by MPI_Finalize from inside the gate (so after any checkpoint in progress ended).
pub fn stop() {
    FINALIZING.store(true, Ordering::SeqCst);
    // A checkpoint aligning meanwhile gives up (see `checkpoint::wait_aligned`).
    notify_progress();
}

pub(crate) fn finalizing() -> bool {
    FINALIZING.load(Ordering::SeqCst)
}

/// The program asks for a checkpoint (C API).
pub fn request_checkpoint(stop: bool) -> Result<(), AgentError> {
    if !supervised() {
        return Err(AgentError::NotSupervised);
    }
    send(&FromAgent::Request { stop }).map_err(|e| AgentError::Connection(e.to_string()))
}

/// `--incremental` where the kernel has no soft-dirty bits (the keeper set `WRITE_TRACK_ENV`):
/// hands the keeper a userfaultfd of this process in asynchronous write-protect mode, which its
/// CRIU registers on the program's private memory and arms after each dump (a write then just
/// clears a page's write-protect bit, nothing blocks). Sent at the start and after each restore
/// (a new address space). Our copy is closed once sent: the images hold no userfaultfd.
pub(crate) fn send_write_tracker() {
    if std::env::var_os(mpicr_proto::WRITE_TRACK_ENV).is_none() {
        return;
    }
    let Some(ctl) = CTL.get() else { return };
    let w = ctl.lock();
    let sent = match write_tracker() {
        Ok(fd) => mpicr_proto::send_with_fd(&w, &FromAgent::WriteTracker { error: None }, std::os::fd::AsFd::as_fd(&fd)),
        Err(e) => mpicr_proto::send_on(&w, &FromAgent::WriteTracker { error: Some(e.to_string()) }),
    };
    if let Err(e) = sent {
        tracing::debug!(target: "agent", "cannot send the write tracker: {e}");
    }
}

/// A userfaultfd with `UFFD_FEATURE_WP_ASYNC` (Linux 6.7+), user-mode faults only (allowed
/// without privilege whatever `vm.unprivileged_userfaultfd` says).
fn write_tracker() -> Result<std::os::fd::OwnedFd, WriteTrackerError> {
    crate::lower::fds::write_tracker().map_err(|(step, e)| match step {
        crate::lower::fds::UffdStep::Create => WriteTrackerError::Userfaultfd(e),
        crate::lower::fds::UffdStep::Api => WriteTrackerError::WriteProtect(e),
    })
}

/// Hands the keeper its end of a fresh PMI socketpair for lower-half generation `generation`.
pub(crate) fn send_pmi_connect(generation: u32, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    let Some(ctl) = CTL.get() else { return Err(std::io::Error::other("not running under mpicr run")) };
    let w = ctl.lock();
    mpicr_proto::send_with_fd(&w, &FromAgent::PmiConnect { generation }, fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recv_within_runs_out_then_delivers() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let (tx, mut inbox) = Inbox::with_channel();
        std::thread::spawn(move || read_control(a, tx));
        let t = Instant::now();
        assert!(inbox.recv_within(Duration::from_millis(300)).unwrap().is_none());
        assert!(t.elapsed() >= Duration::from_millis(300) && t.elapsed() < Duration::from_secs(5));
        assert!(inbox.recv_within(Duration::ZERO).unwrap().is_none());
        mpicr_proto::send(&mut b, &ToAgent::Release).unwrap();
        assert_eq!(inbox.recv_within(Duration::from_secs(5)).unwrap(), Some(ToAgent::Release));
        drop(b);
        let e = inbox.recv_within(Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("closed"), "{e}");
        // The end is remembered.
        assert_eq!(inbox.poll().unwrap_err(), AgentError::Closed);
        assert!(inbox.next_message().is_none());
    }

    #[test]
    fn waits_spend_the_budget_and_events_end_them() {
        let (tx, mut inbox) = Inbox::with_channel();
        let mut budget = Budget::new(Duration::from_millis(600));
        let t = Instant::now();
        assert!(inbox.next_within(&mut budget).unwrap().is_none());
        assert!(budget.spent() && t.elapsed() >= Duration::from_millis(600));
        let mut budget = Budget::new(Duration::from_secs(60));
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            tx.send(Event::Progress).unwrap();
            tx
        });
        let t = Instant::now();
        assert!(matches!(inbox.next_within(&mut budget).unwrap(), Some(Event::Progress)));
        assert!(t.elapsed() < Duration::from_secs(5) && !budget.spent());
        let tx = waker.join().unwrap();
        // A queued event is delivered even with nothing left to wait.
        tx.send(Event::Keeper(ToAgent::Release)).unwrap();
        let mut none = Budget::new(Duration::ZERO);
        assert!(matches!(inbox.next_within(&mut none).unwrap(), Some(Event::Keeper(ToAgent::Release))));
        assert!(inbox.next_within(&mut none).unwrap().is_none());
    }

    #[test]
    fn one_slice_ends_unwoken_and_counts_no_more_than_itself() {
        let (_tx, mut inbox) = Inbox::with_channel();
        let mut budget = Budget::new(Duration::from_secs(60));
        let t = Instant::now();
        assert!(inbox.next_in_slice(&mut budget).unwrap().is_none());
        assert!(t.elapsed() >= SLICE);
        assert!(budget.left() >= Duration::from_secs(60) - SLICE && budget.left() < Duration::from_secs(60));
        // The last part of a budget is a shorter slice.
        let mut budget = Budget::new(Duration::from_millis(20));
        assert!(inbox.next_in_slice(&mut budget).unwrap().is_none());
        assert!(budget.spent());
    }

    #[test]
    fn panic_messages_are_one_line() {
        let p = std::panic::catch_unwind(|| panic!("two\nlines {}", 1)).unwrap_err();
        assert_eq!(panic_message(&*p), "two lines 1");
        let p = std::panic::catch_unwind(|| std::panic::panic_any(7u8)).unwrap_err();
        assert_eq!(panic_message(&*p), "unknown panic");
    }
}
