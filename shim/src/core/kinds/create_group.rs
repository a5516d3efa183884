//! `MPI_Comm_create_group` through a checkpoint.
//!
//! The call is collective over its group only, not over the parent communicator, so the
//! parent's collective counter cannot align it: a member blocked in the call (inside the
//! library, its peers not all there) would keep its gate from emptying while another member,
//! aligned on every communicator it has, closed its gate before calling it. So each key
//! (parent's id, tag, group as world ranks, in order) has a start counter of its own, aligned
//! like a communicator's collectives whose members are the group's:
//! - a rank reports, with its counters, the keys it has a call in progress on and their members
//!   (a key whose calls all returned here needs no target: every member started as many);
//! - the coordinator gives every member of a reported key its target, also a member that never
//!   called it (it has no counter: its count is 0): such a rank is not aligned until it started
//!   as many ([`not_aligned`]), so its program runs on into the call, which then completes;
//! - a start past the target waits, as a collective's does (`face::api::coll::begin_counted`),
//!   and is asked for with the key's members (`FromAgent::Wants`).
//!
//! The counters live as long as the process (a few words per distinct key).

use crate::core::kinds::comm::world_rank;
use mpicr_virtid::{mix, CommCounters};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Marks create_group keys apart from communicators' ids.
const KEY_SALT: u64 = 0x4347_5250; // "CGRP"

/// One create_group key of this process.
pub struct Key {
    counters: CommCounters,
    /// World ranks of the group, in group order.
    members: Vec<i32>,
    /// Calls with this key that returned here.
    done: AtomicU64,
}

impl Key {
    /// The start counter (`face::api::coll::begin_counted` counts a call on it).
    pub fn counters(&self) -> &CommCounters {
        &self.counters
    }

    /// A call with this key returned (successfully or not).
    pub fn returned(&self) {
        self.done.fetch_add(1, Ordering::SeqCst);
    }
}

/// Per key, the world ranks of its group (what a report names the members with).
pub type Members = Vec<(u64, Vec<i32>)>;

static KEYS: Mutex<Option<HashMap<u64, Arc<Key>>>> = Mutex::new(None);
/// Keys the coordinator gave this rank targets for, as a member, during the checkpoint in
/// progress (some perhaps not called here yet).
static OWED: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

/// The job-wide key of a create_group call: the same on every member.
pub fn key_of(parent_gid: u64, tag: c_int, members: &[i32]) -> u64 {
    let h = members.iter().fold(mix(mix(KEY_SALT, parent_gid), tag as u32 as u64), |h, &r| mix(h, r as u64));
    h.max(3)
}

/// The counter of the key of a call by this process (`None`: this process is not in the group,
/// or the group is empty: nothing to align).
pub fn key(parent_gid: u64, tag: c_int, members: &[i32]) -> Option<Arc<Key>> {
    if !members.contains(&world_rank()) {
        return None;
    }
    let id = key_of(parent_gid, tag, members);
    let mut keys = KEYS.lock();
    let k = keys
        .get_or_insert_with(HashMap::new)
        .entry(id)
        .or_insert_with(|| Arc::new(Key { counters: CommCounters::detached(id, members.len() == 1), members: members.to_vec(), done: AtomicU64::new(0) }));
    Some(k.clone())
}

/// What this rank reports with its counters: the starts of the keys with a call in progress
/// here, and their members.
pub fn in_progress() -> (Vec<(u64, u64)>, Members) {
    let keys = KEYS.lock();
    let Some(keys) = keys.as_ref() else { return (Vec::new(), Vec::new()) };
    let mut counts = Vec::new();
    let mut members = Vec::new();
    for (&id, k) in keys {
        let started = k.counters.collectives();
        if started > k.done.load(Ordering::SeqCst) && !k.counters.alone() {
            counts.push((id, started));
            members.push((id, k.members.clone()));
        }
    }
    (counts, members)
}

/// The members of the keys among `ids` (what a rank asking for their targets sends along).
pub fn members_of(ids: &[(u64, u64)]) -> Members {
    let keys = KEYS.lock();
    let Some(keys) = keys.as_ref() else { return Vec::new() };
    ids.iter().filter_map(|(id, _)| keys.get(id).map(|k| (*id, k.members.clone()))).collect()
}

/// Records the keys the coordinator gave this rank targets for as a member.
pub fn owe(ids: impl Iterator<Item = u64>) {
    OWED.lock().get_or_insert_with(HashSet::new).extend(ids);
}

/// The checkpoint's alignment ended (or begins): no key is owed.
pub fn clear_owed() {
    *OWED.lock() = None;
}

/// Why this rank is not aligned as far as create_group goes: a key it is a member of was
/// started fewer times here than its target (another member started it more often, and may
/// be blocked in it until this one calls it).
pub fn not_aligned(targets: &HashMap<u64, u64>) -> Option<String> {
    let owed: Vec<u64> = OWED.lock().as_ref().map(|o| o.iter().copied().collect()).unwrap_or_default();
    let keys = KEYS.lock();
    let count = |id: u64| keys.as_ref().and_then(|k| k.get(&id)).map_or(0, |k| k.counters.collectives());
    let ids = owed.into_iter().chain(keys.as_ref().map(|k| k.keys().copied().collect::<Vec<_>>()).unwrap_or_default());
    for id in ids {
        let t = targets.get(&id).copied().unwrap_or(0);
        let n = count(id);
        if n < t {
            return Some(format!("an MPI_Comm_create_group was started {n} times here and {t} times by another member of its group"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_parent_tag_and_group_order() {
        let k = key_of(1, 0, &[0, 1, 2]);
        assert_eq!(k, key_of(1, 0, &[0, 1, 2]), "the same on every member");
        assert_ne!(k, key_of(2, 0, &[0, 1, 2]));
        assert_ne!(k, key_of(1, 1, &[0, 1, 2]));
        assert_ne!(k, key_of(1, 0, &[0, 2, 1]));
        assert_ne!(k, key_of(1, 0, &[0, 1]));
    }
}
