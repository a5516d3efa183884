//! Groups: every group is recorded as the world ranks it contains, in order.

use crate::lower::handles::RealGroup;
use crate::face::abi::*;
use crate::face::api::put;
use crate::core::kinds::group::world_ranks_of_group;
use crate::core::state::OBJ;
use crate::face::{conv, errors};
use crate::core::gate;
use mpicr_virtid::{GroupRecipe, Kind};
use std::os::raw::{c_char, c_int};

/// Registers a real group under a virtual handle (predefined and null groups pass through).
pub fn register_group(real: c_int) -> MPI_Group {
    if real == MPI_GROUP_NULL || real == MPI_GROUP_EMPTY {
        return real;
    }
    let recipe = GroupRecipe { world_ranks: world_ranks_of_group(real) };
    match OBJ.groups.insert(RealGroup(real), recipe) {
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
