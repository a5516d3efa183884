//! Groups: every group is recorded as the world ranks it contains, in order (`GroupRecipe`).

use super::{check, RebuildError, Renewable};
use crate::core::state::{OBJ, WORLD_INDEX};
use crate::lower;
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::calls::object::Kind;
use crate::lower::handles::RealGroup;
use mpicr_virtid::table::Full;
use mpicr_virtid::{GroupRecipe, VGroup};
use parking_lot::Mutex;
use std::os::raw::c_int;

/// Registers a real group the library made (its recipe: the world ranks it holds); the
/// library's predefined groups are the core's own. `Err` when the table is full.
pub fn register(real: RealGroup) -> Result<VGroup, Full> {
    match real.raw() {
        MPI_GROUP_NULL => return Ok(VGroup::NULL),
        MPI_GROUP_EMPTY => return Ok(VGroup::EMPTY),
        _ => {}
    }
    let recipe = GroupRecipe { world_ranks: world_ranks_of_group(real.raw()) };
    OBJ.groups.insert(real, recipe).map(VGroup::virtual_at)
}

/// Forgets a group the program freed.
pub fn forget(v: VGroup) {
    if let Some(i) = v.index() {
        OBJ.groups.remove(i);
    }
}

/// The real group of MPI_COMM_WORLD, per lower-half generation.
static WORLD_GROUP: Mutex<Option<(u32, c_int)>> = Mutex::new(None);

fn real_world_group() -> Option<c_int> {
    if !crate::core::state::lower_up() {
        // No world model underneath (an app-mode rank's session before MPI_Init): no world to
        // translate to.
        return None;
    }
    let gen = lower::current().number;
    let mut cached = WORLD_GROUP.lock();
    if let Some((g, h)) = *cached {
        if g == gen {
            return Some(h);
        }
    }
    let world = OBJ.comms.real(WORLD_INDEX)?.raw();
    let mut h = MPI_GROUP_NULL;
    let rc = calls::comm::comm_group(world, &mut h)?;
    (rc == MPI_SUCCESS).then(|| {
        *cached = Some((gen, h));
        h
    })
}

/// World ranks of the members of a real group, in group order (the recipe of a new group).
pub fn world_ranks_of_group(real_group: c_int) -> Vec<i32> {
    let mut n = 0;
    let Some(rc) = calls::comm::group_size(real_group, &mut n) else { return Vec::new() };
    if rc != MPI_SUCCESS || n <= 0 {
        return Vec::new();
    }
    let Some(world) = real_world_group() else {
        // No world model underneath: no world to translate to.
        super::session::note_group_without_world();
        return (0..n).collect();
    };
    let ranks: Vec<c_int> = (0..n).collect();
    let mut out = vec![MPI_UNDEFINED; n as usize];
    calls::comm::group_translate_ranks(real_group, &ranks, world, &mut out);
    out
}

/// The group kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    /// The cached world group belongs to the released generation.
    fn forget(&self) {
        *WORLD_GROUP.lock() = None;
    }

    fn free_real(&self) {
        for (_, r, _) in OBJ.groups.snapshot() {
            let mut r = r.raw();
            // A live real group of the current generation, freed once.
            calls::object::free(Kind::Group, &mut r);
        }
    }

    fn rebuild(&self) -> Result<(), RebuildError> {
        let wg = super::comm::world_group()?;
        for (idx, _, g) in OBJ.groups.snapshot() {
            let mut out = MPI_GROUP_NULL;
            check(calls::comm::group_incl(wg, &g.world_ranks, &mut out).unwrap_or(MPI_ERR_OTHER), "MPI_Group_incl")?;
            OBJ.groups.set_real(idx, RealGroup(out));
        }
        // Freeing the group made above.
        calls::object::free(Kind::Group, &mut { wg });
        Ok(())
    }
}
