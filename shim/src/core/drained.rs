//! Messages the drain took out of the network, waiting for the program's receives.

use mpicr_drain::{Buffer, Message};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

static BUFFER: Mutex<Buffer> = Mutex::new(Buffer::new_const());
/// Number of buffered messages: lets receives skip the lock when there are none (always,
/// except right after a checkpoint).
static LEN: AtomicUsize = AtomicUsize::new(0);

#[inline(always)]
pub fn is_empty() -> bool {
    LEN.load(Ordering::Acquire) == 0
}

pub fn push(m: Message) {
    let mut b = BUFFER.lock();
    b.push(m);
    LEN.store(b.len(), Ordering::Release);
}

pub fn take(comm: u64, source: i32, tag: i32) -> Option<Message> {
    if is_empty() {
        return None;
    }
    let mut b = BUFFER.lock();
    let m = b.take(comm, source, tag);
    LEN.store(b.len(), Ordering::Release);
    m
}

/// Source, tag and size of the earliest matching message.
pub fn peek(comm: u64, source: i32, tag: i32) -> Option<(i32, i32, usize)> {
    if is_empty() {
        return None;
    }
    BUFFER.lock().peek(comm, source, tag).map(|m| (m.source, m.tag, m.data.len()))
}

/// Runs `f` on the buffer, without copying it (the state file is written from it).
pub fn with_buffer<R>(f: impl FnOnce(&Buffer) -> R) -> R {
    f(&BUFFER.lock())
}

pub fn replace(b: Buffer) {
    let mut cur = BUFFER.lock();
    *cur = b;
    LEN.store(cur.len(), Ordering::Release);
}

pub fn stats() -> (u64, u64) {
    let b = BUFFER.lock();
    (b.len() as u64, b.bytes())
}
