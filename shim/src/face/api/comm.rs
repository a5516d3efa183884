//! Communicators: constructors record a recipe (the group as world ranks, the topology, a
//! job-wide id); destructors run attribute delete callbacks and free the virtual handle.

use crate::core::gate;
use crate::core::kinds::comm::CommEntry;
use crate::core::kinds::create_group;
use crate::core::kinds::group::world_ranks_of_group;
use crate::core::state::{OBJ, SELF_INDEX, WORLD_INDEX};
use crate::face::abi::*;
use crate::face::api::coll::{begin_collective, begin_counted};
use crate::face::api::{attr, put};
use crate::face::call::{self, On, ToReal};
use crate::face::{conv, errors};
use crate::lower;
use crate::lower::handles::RealComm;
use mpicr_virtid::{child_gid, mix, self_gid, CommRecipe, Topology, VComm, VErrhandler, WORLD_GID};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::raw::{c_char, c_int};

const MPI_CART: c_int = 2;
const MPI_GRAPH: c_int = 1;
const MPI_DIST_GRAPH: c_int = 3;

/// Registers the real world and self communicators at their fixed table indices.
pub fn register_world_and_self(world: c_int, selfc: c_int) -> c_int {
    let f = lower::fns();
    let (mut rank, mut size) = (0, 0);
    // SAFETY: valid out-pointers; the library is initialised.
    unsafe {
        if let (Some(r), Some(s)) = (f.MPI_Comm_rank, f.MPI_Comm_size) {
            r(world, &mut rank);
            s(world, &mut size);
        }
    }
    crate::core::kinds::comm::errors_return_on(world);
    crate::core::kinds::comm::errors_return_on(selfc);
    let world_recipe = CommRecipe {
        gid: WORLD_GID,
        world_ranks: (0..size).collect(),
        remote_world_ranks: None,
        topology: Topology::None,
        made_by: "MPI_Init".into(),
        parent: None,
    };
    let self_recipe = CommRecipe {
        gid: self_gid(rank),
        world_ranks: vec![rank],
        remote_world_ranks: None,
        topology: Topology::None,
        made_by: "MPI_Init".into(),
        parent: None,
    };
    if !OBJ.comms.is_empty() {
        return MPI_ERR_OTHER;
    }
    let w = OBJ.comms.insert(RealComm(world), CommEntry::new(world_recipe, VErrhandler::ERRORS_ARE_FATAL));
    let s = OBJ.comms.insert(RealComm(selfc), CommEntry::new(self_recipe, VErrhandler::ERRORS_ARE_FATAL));
    debug_assert_eq!((w, s), (Ok(WORLD_INDEX), Ok(SELF_INDEX)));
    MPI_SUCCESS
}

/// World ranks of the local (or remote) group of a real communicator.
pub fn world_ranks_of_comm(real_comm: c_int, remote: bool) -> Vec<i32> {
    let f = lower::fns();
    let mut g = MPI_GROUP_NULL;
    // SAFETY: valid out-pointers, live real communicator.
    unsafe {
        let get = if remote { f.MPI_Comm_remote_group } else { f.MPI_Comm_group };
        if let Some(get) = get {
            if get(real_comm, &mut g) != MPI_SUCCESS {
                return Vec::new();
            }
        }
    }
    let ranks = world_ranks_of_group(g);
    if let Some(free) = f.MPI_Group_free {
        // SAFETY: the group was just created above.
        unsafe { free(&mut g) };
    }
    ranks
}

/// Reads the topology attached to a real communicator.
pub fn topology_of(real_comm: c_int) -> Topology {
    let f = lower::fns();
    let mut kind = MPI_UNDEFINED;
    // SAFETY: all calls below write into locals sized from the library's own answers.
    unsafe {
        let Some(tt) = f.MPI_Topo_test else { return Topology::None };
        tt(real_comm, &mut kind);
        match kind {
            MPI_CART => {
                let mut nd = 0;
                f.MPI_Cartdim_get.map(|g| g(real_comm, &mut nd));
                let (mut dims, mut periods, mut coords) = (vec![0; nd as usize], vec![0; nd as usize], vec![0; nd as usize]);
                f.MPI_Cart_get.map(|g| g(real_comm, nd, dims.as_mut_ptr(), periods.as_mut_ptr(), coords.as_mut_ptr()));
                Topology::Cart { dims, periods }
            }
            MPI_GRAPH => {
                let (mut nn, mut ne) = (0, 0);
                f.MPI_Graphdims_get.map(|g| g(real_comm, &mut nn, &mut ne));
                let (mut index, mut edges) = (vec![0; nn as usize], vec![0; ne as usize]);
                f.MPI_Graph_get.map(|g| g(real_comm, nn, ne, index.as_mut_ptr(), edges.as_mut_ptr()));
                Topology::Graph { index, edges }
            }
            MPI_DIST_GRAPH => {
                let (mut indeg, mut outdeg, mut weighted) = (0, 0, 0);
                f.MPI_Dist_graph_neighbors_count.map(|g| g(real_comm, &mut indeg, &mut outdeg, &mut weighted));
                let (mut src, mut sw, mut dst, mut dw) = (vec![0; indeg as usize], vec![0; indeg as usize], vec![0; outdeg as usize], vec![0; outdeg as usize]);
                // MPI_UNWEIGHTED must be the real library's sentinel when the graph has no weights.
                let unweighted = crate::lower::real_unweighted();
                let (swp, dwp) = if weighted != 0 { (sw.as_mut_ptr(), dw.as_mut_ptr()) } else { (unweighted, unweighted) };
                f.MPI_Dist_graph_neighbors.map(|g| g(real_comm, indeg, src.as_mut_ptr(), swp, outdeg, dst.as_mut_ptr(), dwp));
                if weighted == 0 {
                    sw.clear();
                    dw.clear();
                }
                Topology::DistGraph {
                    sources: src,
                    source_weights: (weighted != 0).then_some(sw),
                    destinations: dst,
                    dest_weights: (weighted != 0).then_some(dw),
                }
            }
            _ => Topology::None,
        }
    }
}

/// Registers a new real communicator under a virtual handle.
pub fn register_comm(real: c_int, made_by: &str, parent: Option<u64>, errhandler: MPI_Errhandler, gid: impl FnOnce(&[i32], Option<&[i32]>) -> u64) -> MPI_Comm {
    let inter = crate::face::api::is_inter(real);
    let world_ranks = world_ranks_of_comm(real, false);
    let remote = inter.then(|| world_ranks_of_comm(real, true));
    let recipe = CommRecipe {
        gid: gid(&world_ranks, remote.as_deref()),
        world_ranks,
        remote_world_ranks: remote,
        topology: topology_of(real),
        made_by: made_by.trim_start_matches('P').to_string(),
        parent,
    };
    match OBJ.comms.insert(RealComm(real), CommEntry::new(recipe, conv::verrhandler(errhandler))) {
        Ok(i) => conv::comm_abi(VComm::virtual_at(i)),
        Err(_) => errors::fatal("too many live communicators"),
    }
}

fn parent_info(parent: MPI_Comm) -> (u64, MPI_Errhandler) {
    conv::comm_index(parent).and_then(|i| OBJ.comms.with(i, |c| (c.recipe.gid, conv::errhandler_abi(c.errhandler)))).unwrap_or((0, MPI_ERRORS_ARE_FATAL))
}

/// Registers the communicator `real` (or hands out MPI_COMM_NULL) made by `name`, a collective
/// on `parent` counted as its `seq`-th: the constructors of the create bucket (generated).
pub fn register_derived(real: c_int, name: &str, parent: MPI_Comm, seq: u64) -> MPI_Comm {
    if real == MPI_COMM_NULL {
        return MPI_COMM_NULL;
    }
    let (pgid, eh) = parent_info(parent);
    register_comm(real, name, Some(pgid), eh, |l, r| child_gid(pgid, seq, l, r))
}

/// Copies the attributes of `parent` to its duplicate `v`, after the gate is left (copy
/// callbacks may call MPI). When a copy callback fails, the duplicate is freed again (the
/// program gets MPI_COMM_NULL, as from MPICH, which copies before it creates) and the
/// callback's error is raised on `parent`.
pub fn derived_attrs(parent: MPI_Comm, v: MPI_Comm, name: &str) -> Result<(), c_int> {
    if v == MPI_COMM_NULL {
        return Ok(());
    }
    match attr::copy_comm_attrs(parent, v) {
        MPI_SUCCESS => Ok(()),
        rc => {
            discard_comm(v);
            Err(errors::raise_comm(parent, rc, name))
        }
    }
}

/// Frees a communicator the program never saw, without running delete callbacks.
fn discard_comm(v: MPI_Comm) {
    attr::discard_comm_attrs(v);
    let Some(idx) = conv::vcomm(v).index() else { return };
    let g = gate::enter();
    let mut real = conv::comm(v);
    if let Some(free) = lower::fns().MPI_Comm_free {
        // SAFETY: the real library's MPI_Comm_free on the live real communicator made for `v`,
        // translated inside the gate. A failure would leave a real communicator behind, nothing
        // the program could act on.
        let _ = unsafe { free(&mut real) };
    }
    OBJ.comms.remove(idx);
    drop(g);
}

/// Per-process counters that make ids of repeated, otherwise identical creations differ.
static REPEATS: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);

fn nth(key: u64) -> u64 {
    let mut m = REPEATS.lock();
    let c = m.get_or_insert_with(HashMap::new).entry(key).or_insert(0);
    *c += 1;
    *c
}

fn hash_ranks(mut h: u64, ranks: &[i32]) -> u64 {
    for &r in ranks {
        h = mix(h, r as u64);
    }
    h
}

/// Id of an intercommunicator: the same on both sides (the two groups are hashed in a
/// canonical order), distinct for repeated creations between the same groups.
fn intercomm_gid(tag: u64, local: &[i32], remote: Option<&[i32]>) -> u64 {
    let remote = remote.unwrap_or(&[]);
    let (a, b) = if local <= remote { (local, remote) } else { (remote, local) };
    let key = hash_ranks(hash_ranks(mix(7, tag), a), b);
    mix(key, nth(key)).max(3)
}

pub unsafe fn MPI_Intercomm_create(
    local_comm: MPI_Comm,
    local_leader: c_int,
    peer_comm: MPI_Comm,
    remote_leader: c_int,
    tag: c_int,
    newintercomm: *mut MPI_Comm,
) -> c_int {
    let (g, _) = begin_collective(local_comm);
    call::run_in(g, "MPI_Intercomm_create", On::Comm(local_comm), || {
        let (l, p) = (call::Comm(local_comm).to_real()?, call::Comm(peer_comm).to_real()?);
        let mut rn = MPI_COMM_NULL;
        call::ok(real!(MPI_Intercomm_create(l, local_leader, p, remote_leader, tag, &mut rn)))?;
        let (pgid, eh) = parent_info(local_comm);
        let v = register_comm(rn, "MPI_Intercomm_create", Some(pgid), eh, |lr, rr| intercomm_gid(tag as u64, lr, rr));
        // SAFETY: `newintercomm` is the caller's out-pointer, null or valid for a write as MPI
        // requires (this function's safety contract).
        unsafe { put(newintercomm, v) };
        Ok(())
    })
}

pub unsafe fn MPI_Intercomm_create_from_groups(
    local_group: MPI_Group,
    local_leader: c_int,
    remote_group: MPI_Group,
    remote_leader: c_int,
    stringtag: *const c_char,
    info: MPI_Info,
    errhandler: MPI_Errhandler,
    newintercomm: *mut MPI_Comm,
) -> c_int {
    call::run("MPI_Intercomm_create_from_groups", On::Default, || {
        // SAFETY: `stringtag` is the caller's NUL-terminated string (this function's safety contract).
        let tag = unsafe { crate::face::api::cstr(stringtag) };
        let (lg, rg) = (call::Group(local_group).to_real()?, call::Group(remote_group).to_real()?);
        let i = call::Info(info).to_real()?;
        let mut rn = MPI_COMM_NULL;
        call::ok(real!(MPI_Intercomm_create_from_groups(lg, local_leader, rg, remote_leader, stringtag, i, MPI_ERRORS_RETURN, &mut rn)))?;
        let taghash = tag.bytes().fold(11u64, |h, b| mix(h, b as u64));
        let v = register_comm(rn, "MPI_Intercomm_create_from_groups", None, errhandler, |lr, rr| intercomm_gid(taghash, lr, rr));
        // SAFETY: `newintercomm` is the caller's out-pointer, null or valid for a write as MPI
        // requires (this function's safety contract).
        unsafe { put(newintercomm, v) };
        Ok(())
    })
}

pub unsafe fn MPI_Comm_create_group(comm: MPI_Comm, group: MPI_Group, tag: c_int, newcomm: *mut MPI_Comm) -> c_int {
    // Collective over the group only: the parent's collective counter is not involved; the
    // call is counted per key (parent, tag, group) for checkpoints (`kinds::create_group`).
    let (pgid, eh) = parent_info(comm);
    let members = conv::vgroup(group).index().and_then(|i| OBJ.groups.get(i)).map(|r| r.world_ranks).unwrap_or_default();
    let key = create_group::key(pgid, tag, &members);
    let g = match &key {
        Some(k) => begin_counted(k.counters()),
        None => gate::enter(),
    };
    call::run_in(g, "MPI_Comm_create_group", On::Comm(comm), || {
        let made = (|| {
            let (c, gr) = (call::Comm(comm).to_real()?, call::Group(group).to_real()?);
            let mut rn = MPI_COMM_NULL;
            call::ok(real!(MPI_Comm_create_group(c, gr, tag, &mut rn)))?;
            Ok(rn)
        })();
        // Returned, whatever the outcome: no call of this key is in progress here any more.
        if let Some(k) = &key {
            k.returned();
        }
        let rn = made?;
        let v = if rn == MPI_COMM_NULL {
            MPI_COMM_NULL
        } else {
            register_comm(rn, "MPI_Comm_create_group", Some(pgid), eh, |l, _| {
                let key = hash_ranks(mix(mix(pgid, 0xC6), tag as u64), l);
                mix(key, nth(key)).max(3)
            })
        };
        // SAFETY: `newcomm` is the caller's out-pointer, null or valid for a write as MPI requires
        // (this function's safety contract).
        unsafe { put(newcomm, v) };
        Ok(())
    })
}

pub unsafe fn MPI_Comm_create_from_group(
    group: MPI_Group,
    stringtag: *const c_char,
    info: MPI_Info,
    errhandler: MPI_Errhandler,
    newcomm: *mut MPI_Comm,
) -> c_int {
    call::run("MPI_Comm_create_from_group", On::Default, || {
        // SAFETY: `stringtag` is the caller's NUL-terminated string (this function's safety contract).
        let tag = unsafe { crate::face::api::cstr(stringtag) };
        let (gr, i) = (call::Group(group).to_real()?, call::Info(info).to_real()?);
        let mut rn = MPI_COMM_NULL;
        call::ok(real!(MPI_Comm_create_from_group(gr, stringtag, i, MPI_ERRORS_RETURN, &mut rn)))?;
        let v = register_comm(rn, "MPI_Comm_create_from_group", None, errhandler, |l, _| {
            let key = hash_ranks(tag.bytes().fold(13u64, |h, b| mix(h, b as u64)), l);
            mix(key, nth(key)).max(3)
        });
        // SAFETY: `newcomm` is the caller's out-pointer, null or valid for a write as MPI requires
        // (this function's safety contract).
        unsafe { put(newcomm, v) };
        Ok(())
    })
}

pub unsafe fn MPI_Comm_idup(comm: MPI_Comm, newcomm: *mut MPI_Comm, request: *mut MPI_Request) -> c_int {
    // SAFETY: `newcomm` and `request` are the caller's out-pointers, passed through under MPI's contract of
    // MPI_Comm_idup.
    unsafe { idup(comm, MPI_INFO_NULL, newcomm, request, "MPI_Comm_idup") }
}

pub unsafe fn MPI_Comm_idup_with_info(comm: MPI_Comm, info: MPI_Info, newcomm: *mut MPI_Comm, request: *mut MPI_Request) -> c_int {
    // SAFETY: `newcomm` and `request` are the caller's out-pointers, passed through under MPI's contract of
    // MPI_Comm_idup_with_info.
    unsafe { idup(comm, info, newcomm, request, "MPI_Comm_idup_with_info") }
}

unsafe fn idup(comm: MPI_Comm, info: MPI_Info, newcomm: *mut MPI_Comm, request: *mut MPI_Request, name: &'static str) -> c_int {
    let (g, seq) = begin_collective(comm);
    let c = conv::comm(comm);
    let mut rn = MPI_COMM_NULL;
    let mut rr = MPI_REQUEST_NULL;
    let rc = if info == MPI_INFO_NULL {
        real!(MPI_Comm_idup(c, &mut rn, &mut rr))
    } else {
        let i = conv::info(info);
        real!(MPI_Comm_idup_with_info(c, i, &mut rn, &mut rr))
    };
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_comm(comm, rc, name);
    }
    // The new communicator may not be used before the request completes, so its recipe is
    // taken from the parent (a duplicate has the same group).
    let idx = conv::comm_index(comm);
    let Some(mut entry) = idx.and_then(|i| OBJ.comms.get(i)) else {
        drop(g);
        return errors::raise_comm(comm, MPI_ERR_COMM, name);
    };
    let pgid = entry.recipe.gid;
    entry.recipe.gid = child_gid(pgid, seq, &entry.recipe.world_ranks, entry.recipe.remote_world_ranks.as_deref());
    entry.recipe.parent = Some(pgid);
    entry.recipe.made_by = name.to_string();
    let fresh = CommEntry { attrs: Vec::new(), ..CommEntry::new(entry.recipe, entry.errhandler) };
    let v = match OBJ.comms.insert(RealComm(rn), fresh) {
        Ok(i) => conv::comm_abi(VComm::virtual_at(i)),
        Err(_) => errors::fatal("too many live communicators"),
    };
    let vr = crate::face::api::request::register_collective(rr, comm, name, false);
    drop(g);
    let rc = attr::copy_comm_attrs(comm, v);
    // SAFETY: `newcomm` and `request` are the caller's out-pointers, null or valid for a write (MPI's
    // contract of the idup calls).
    unsafe {
        put(newcomm, v);
        put(request, vr);
    }
    if rc != MPI_SUCCESS {
        return errors::raise_comm(comm, rc, name);
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Comm_free(comm: *mut MPI_Comm) -> c_int {
    // SAFETY: `comm` is the caller's pointer, passed through; `free_comm` handles null.
    unsafe { free_comm(comm, "MPI_Comm_free") }
}

pub unsafe fn MPI_Comm_disconnect(comm: *mut MPI_Comm) -> c_int {
    // SAFETY: `comm` is the caller's pointer, passed through; `free_comm` handles null.
    unsafe { free_comm(comm, "MPI_Comm_disconnect") }
}

unsafe fn free_comm(comm: *mut MPI_Comm, name: &'static str) -> c_int {
    if comm.is_null() {
        let _g = gate::enter();
        let rc = if name == "MPI_Comm_free" { real!(MPI_Comm_free(comm)) } else { real!(MPI_Comm_disconnect(comm)) };
        return errors::raise_default(rc, name);
    }
    // SAFETY: `comm` is non-null (checked above) and points to the program's communicator (MPI's contract of
    // the free calls).
    let v = unsafe { *comm };
    let idx = conv::vcomm(v).index().filter(|&i| OBJ.comms.real(i).is_some());
    let Some(idx) = idx else {
        // Predefined, null, freed or invented: the real library gives the native error.
        let g = gate::enter();
        let mut raw = conv::comm(v);
        let rc = if name == "MPI_Comm_free" { real!(MPI_Comm_free(&mut raw)) } else { real!(MPI_Comm_disconnect(&mut raw)) };
        drop(g);
        return if rc != MPI_SUCCESS { errors::raise_comm(v, rc, name) } else { rc };
    };
    let rc = attr::delete_all_comm_attrs(v);
    if rc != MPI_SUCCESS {
        return errors::raise_comm(v, rc, name);
    }
    let g = gate::enter();
    let mut real = conv::comm(v);
    let rc = if name == "MPI_Comm_free" { real!(MPI_Comm_free(&mut real)) } else { real!(MPI_Comm_disconnect(&mut real)) };
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_comm(v, rc, name);
    }
    if let Some(e) = OBJ.comms.remove(idx) {
        // other members may still hold it at a checkpoint: its rebuild needs this rank too
        crate::core::kinds::comm::note_freed(&e);
    }
    crate::core::kinds::request::note_comm_freed(conv::vcomm(v));
    drop(g);
    // SAFETY: `comm` is non-null (checked at entry) and writable (MPI's contract of the free calls).
    unsafe { *comm = MPI_COMM_NULL };
    MPI_SUCCESS
}
