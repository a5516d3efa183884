//! Groups: every group is recorded as the world ranks it contains, in order.

use crate::abi::*;
use crate::api::put;
use crate::state::OBJ;
use crate::{conv, errors, gate, lower};
use mpicr_virtid::{GroupRecipe, Kind};
use parking_lot::Mutex;
use std::os::raw::{c_char, c_int};

/// The real group of MPI_COMM_WORLD, per lower-half generation.
static WORLD_GROUP: Mutex<Option<(u32, c_int)>> = Mutex::new(None);

fn real_world_group() -> Option<c_int> {
    if crate::api::init::program_finalized() {
        // Sessions used after MPI_Finalize: there is no world to translate to.
        return None;
    }
    let gen = lower::current().number;
    let mut cached = WORLD_GROUP.lock();
    if let Some((g, h)) = *cached {
        if g == gen {
            return Some(h);
        }
    }
    let world = OBJ.comms.real(crate::state::WORLD_INDEX)? as c_int;
    let mut h = MPI_GROUP_NULL;
    // SAFETY: valid out-pointer, live communicator.
    let rc = unsafe { lower::fns().MPI_Comm_group?(world, &mut h) };
    (rc == MPI_SUCCESS).then(|| {
        *cached = Some((gen, h));
        h
    })
}

/// Forgets the cached world group (the lower half is being released).
pub fn forget_world_group() {
    *WORLD_GROUP.lock() = None;
}

/// World ranks of the members of a real group, in group order.
pub fn world_ranks_of_group(real_group: c_int) -> Vec<i32> {
    let f = lower::fns();
    let mut n = 0;
    // SAFETY: valid out-pointers; arrays sized by the group size.
    unsafe {
        let Some(size) = f.MPI_Group_size else { return Vec::new() };
        if size(real_group, &mut n) != MPI_SUCCESS || n <= 0 {
            return Vec::new();
        }
        let Some(world) = real_world_group() else { return (0..n).collect() };
        let ranks: Vec<c_int> = (0..n).collect();
        let mut out = vec![MPI_UNDEFINED; n as usize];
        if let Some(tr) = f.MPI_Group_translate_ranks {
            tr(real_group, n, ranks.as_ptr(), world, out.as_mut_ptr());
        }
        out
    }
}

/// Registers a real group under a virtual handle (predefined and null groups pass through).
pub fn register_group(real: c_int) -> MPI_Group {
    if real == MPI_GROUP_NULL || real == MPI_GROUP_EMPTY {
        return real;
    }
    let recipe = GroupRecipe { world_ranks: world_ranks_of_group(real) };
    match OBJ.groups.insert(real as u32 as u64, recipe) {
        Ok(i) => conv::handle(Kind::Group, i),
        Err(_) => errors::fatal("too many live groups"),
    }
}

/// Runs a group constructor on real handles and registers its result.
unsafe fn make(name: &'static str, newgroup: *mut MPI_Group, call: impl FnOnce(&mut c_int) -> c_int) -> c_int {
    let g = gate::enter();
    let mut rg = MPI_GROUP_NULL;
    let rc = call(&mut rg);
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_default(rc, name);
    }
    let v = register_group(rg);
    drop(g);
    unsafe { put(newgroup, v) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Group_incl(group: MPI_Group, n: c_int, ranks: *const c_int, newgroup: *mut MPI_Group) -> c_int {
    unsafe { make("MPI_Group_incl", newgroup, |o| real!(MPI_Group_incl(conv::group(group), n, ranks, o))) }
}

pub unsafe fn MPI_Group_excl(group: MPI_Group, n: c_int, ranks: *const c_int, newgroup: *mut MPI_Group) -> c_int {
    unsafe { make("MPI_Group_excl", newgroup, |o| real!(MPI_Group_excl(conv::group(group), n, ranks, o))) }
}

pub unsafe fn MPI_Group_range_incl(group: MPI_Group, n: c_int, ranges: *mut c_int, newgroup: *mut MPI_Group) -> c_int {
    unsafe { make("MPI_Group_range_incl", newgroup, |o| real!(MPI_Group_range_incl(conv::group(group), n, ranges, o))) }
}

pub unsafe fn MPI_Group_range_excl(group: MPI_Group, n: c_int, ranges: *mut c_int, newgroup: *mut MPI_Group) -> c_int {
    unsafe { make("MPI_Group_range_excl", newgroup, |o| real!(MPI_Group_range_excl(conv::group(group), n, ranges, o))) }
}

pub unsafe fn MPI_Group_union(a: MPI_Group, b: MPI_Group, newgroup: *mut MPI_Group) -> c_int {
    unsafe { make("MPI_Group_union", newgroup, |o| real!(MPI_Group_union(conv::group(a), conv::group(b), o))) }
}

pub unsafe fn MPI_Group_intersection(a: MPI_Group, b: MPI_Group, newgroup: *mut MPI_Group) -> c_int {
    unsafe { make("MPI_Group_intersection", newgroup, |o| real!(MPI_Group_intersection(conv::group(a), conv::group(b), o))) }
}

pub unsafe fn MPI_Group_difference(a: MPI_Group, b: MPI_Group, newgroup: *mut MPI_Group) -> c_int {
    unsafe { make("MPI_Group_difference", newgroup, |o| real!(MPI_Group_difference(conv::group(a), conv::group(b), o))) }
}

pub unsafe fn MPI_Group_from_session_pset(session: MPI_Session, pset_name: *const c_char, newgroup: *mut MPI_Group) -> c_int {
    let g = gate::enter();
    let mut rg = MPI_GROUP_NULL;
    let rc = real!(MPI_Group_from_session_pset(conv::session(session), pset_name, &mut rg));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_session(session, rc, "MPI_Group_from_session_pset");
    }
    let _g = gate::enter();
    unsafe { put(newgroup, register_group(rg)) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Group_free(group: *mut MPI_Group) -> c_int {
    let _g = gate::enter();
    if group.is_null() {
        return errors::raise_default(real!(MPI_Group_free(group)), "MPI_Group_free");
    }
    let v = unsafe { *group };
    let mut real = conv::group(v);
    let rc = real!(MPI_Group_free(&mut real));
    if rc != MPI_SUCCESS {
        drop(_g);
        return errors::raise_default(rc, "MPI_Group_free");
    }
    if let Some(i) = conv::index(v, Kind::Group) {
        OBJ.groups.remove(i);
    }
    unsafe { *group = MPI_GROUP_NULL };
    MPI_SUCCESS
}
