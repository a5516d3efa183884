//! The gate every wrapper passes before touching the real library.
//!
//! Open (the normal case), entering costs one atomic add and one load. The agent closes it to
//! take a checkpoint: new entrants wait, and `close` returns once no thread is inside the real
//! library. Blocking MPI calls are built from nonblocking ones and test loops that re-enter the
//! gate on every iteration, so a rank waiting for a message can always be stopped.
//!
//! Re-entry: user callbacks (reduction ops, generalized-request callbacks) run *inside* a real
//! call and may call MPI; they run under [`in_callback`], which lets them through a closed gate
//! (the thread already holds it).

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static INSIDE: AtomicUsize = AtomicUsize::new(0);
static CLOSED: AtomicBool = AtomicBool::new(false);
static LOCK: Mutex<()> = Mutex::new(());
static OPENED: Condvar = Condvar::new();

thread_local! {
    static CALLBACK_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Proof that the calling thread is inside the gate; leaving happens on drop.
#[must_use]
pub struct Guard(());

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        leave();
    }
}

/// Leaves the gate. The last thread out of a closing gate wakes the agent waiting in
/// [`close`]; when the gate is open this is one atomic subtraction and one load. (Both SeqCst,
/// as `close`'s store and load: either the leaving thread sees the gate closed, or `close`
/// sees it gone.)
#[inline(always)]
fn leave() {
    if INSIDE.fetch_sub(1, Ordering::SeqCst) == 1 && CLOSED.load(Ordering::SeqCst) {
        crate::core::agent::notify_progress();
    }
}

#[inline(always)]
pub fn enter() -> Guard {
    crate::lower::prepare_thread();
    INSIDE.fetch_add(1, Ordering::SeqCst);
    if !CLOSED.load(Ordering::SeqCst) {
        return Guard(());
    }
    enter_slow()
}

#[cold]
fn enter_slow() -> Guard {
    loop {
        if CALLBACK_DEPTH.with(|d| d.get()) > 0 {
            return Guard(());
        }
        leave();
        {
            let mut l = LOCK.lock();
            while CLOSED.load(Ordering::SeqCst) {
                OPENED.wait(&mut l);
            }
        }
        INSIDE.fetch_add(1, Ordering::SeqCst);
        if !CLOSED.load(Ordering::SeqCst) {
            return Guard(());
        }
    }
}

/// Is the gate closed (a checkpoint holds the lower half)?
#[inline(always)]
pub fn is_closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Closes the gate: threads that enter from now on wait until it opens again. The caller waits
/// for [`empty`] (the last thread out notifies the agent), and calls [`open`] if it gives up.
pub fn close() {
    CLOSED.store(true, Ordering::SeqCst);
}

/// Is no thread inside the gate?
pub fn empty() -> bool {
    INSIDE.load(Ordering::SeqCst) == 0
}

/// Reopens the gate and wakes every waiting thread.
pub fn open() {
    let _l = LOCK.lock();
    CLOSED.store(false, Ordering::SeqCst);
    OPENED.notify_all();
}

/// Runs a user callback that may call MPI while this thread is inside the gate.
pub fn in_callback<R>(f: impl FnOnce() -> R) -> R {
    CALLBACK_DEPTH.with(|d| d.set(d.get() + 1));
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            CALLBACK_DEPTH.with(|d| d.set(d.get() - 1));
        }
    }
    let _leave = Leave;
    f()
}
