//! Dynamic processes (spawn, connect/accept, join): the resulting communicators are wrapped so
//! the program runs unchanged, but they reach processes outside the job and cannot be rebuilt
//! after a restore; a checkpoint while one is live is refused with a clear error.

use crate::core::gate;
use crate::core::state::OBJ;
use crate::face::abi::*;
use crate::face::api::comm::register_comm;
use crate::face::api::put;
use crate::face::{conv, errors};
use parking_lot::Mutex;
use std::os::raw::{c_char, c_int};

fn wrap(real: c_int, name: &str) -> MPI_Comm {
    if real == MPI_COMM_NULL {
        return real;
    }
    let v = register_comm(real, name, None, MPI_ERRORS_ARE_FATAL, |_, _| 0);
    if let Some(i) = conv::comm_index(v) {
        OBJ.comms.with(i, |c| c.restorable = false);
    }
    v
}

pub unsafe fn MPI_Comm_spawn(
    command: *const c_char,
    argv: *mut *mut c_char,
    maxprocs: c_int,
    info: MPI_Info,
    root: c_int,
    comm: MPI_Comm,
    intercomm: *mut MPI_Comm,
    errcodes: *mut c_int,
) -> c_int {
    let g = gate::enter();
    let mut r = MPI_COMM_NULL;
    let rc = real!(MPI_Comm_spawn(command, argv, maxprocs, conv::info(info), root, conv::comm(comm), &mut r, errcodes));
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_comm(comm, rc, "MPI_Comm_spawn");
    }
    // SAFETY: `intercomm` is the caller's out-pointer, null or valid for a write (MPI's contract of this
    // call).
    unsafe { put(intercomm, wrap(r, "MPI_Comm_spawn")) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Comm_spawn_multiple(
    count: c_int,
    commands: *mut *mut c_char,
    argvs: *mut *mut *mut c_char,
    maxprocs: *const c_int,
    infos: *const MPI_Info,
    root: c_int,
    comm: MPI_Comm,
    intercomm: *mut MPI_Comm,
    errcodes: *mut c_int,
) -> c_int {
    let g = gate::enter();
    // SAFETY: `infos` is null or the program's array of `count` info handles (MPI's contract of this call);
    // `slice` handles null.
    let real_infos: Vec<MPI_Info> = unsafe { crate::face::api::slice(infos, count as i64) }.into_iter().map(conv::info).collect();
    let ip = if infos.is_null() { infos } else { real_infos.as_ptr() };
    let mut r = MPI_COMM_NULL;
    let rc = real!(MPI_Comm_spawn_multiple(count, commands, argvs, maxprocs, ip, root, conv::comm(comm), &mut r, errcodes));
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_comm(comm, rc, "MPI_Comm_spawn_multiple");
    }
    // SAFETY: `intercomm` is the caller's out-pointer, null or valid for a write (MPI's contract of this
    // call).
    unsafe { put(intercomm, wrap(r, "MPI_Comm_spawn_multiple")) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Comm_accept(port: *const c_char, info: MPI_Info, root: c_int, comm: MPI_Comm, newcomm: *mut MPI_Comm) -> c_int {
    let g = gate::enter();
    let mut r = MPI_COMM_NULL;
    let rc = real!(MPI_Comm_accept(port, conv::info(info), root, conv::comm(comm), &mut r));
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_comm(comm, rc, "MPI_Comm_accept");
    }
    // SAFETY: `newcomm` is the caller's out-pointer, null or valid for a write (MPI's contract of this call).
    unsafe { put(newcomm, wrap(r, "MPI_Comm_accept")) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Comm_connect(port: *const c_char, info: MPI_Info, root: c_int, comm: MPI_Comm, newcomm: *mut MPI_Comm) -> c_int {
    let g = gate::enter();
    let mut r = MPI_COMM_NULL;
    let rc = real!(MPI_Comm_connect(port, conv::info(info), root, conv::comm(comm), &mut r));
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_comm(comm, rc, "MPI_Comm_connect");
    }
    // SAFETY: `newcomm` is the caller's out-pointer, null or valid for a write (MPI's contract of this call).
    unsafe { put(newcomm, wrap(r, "MPI_Comm_connect")) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Comm_join(fd: c_int, intercomm: *mut MPI_Comm) -> c_int {
    let g = gate::enter();
    let mut r = MPI_COMM_NULL;
    let rc = real!(MPI_Comm_join(fd, &mut r));
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_default(rc, "MPI_Comm_join");
    }
    // SAFETY: `intercomm` is the caller's out-pointer, null or valid for a write (MPI's contract of this
    // call).
    unsafe { put(intercomm, wrap(r, "MPI_Comm_join")) };
    MPI_SUCCESS
}

/// The parent intercommunicator is wrapped once and the same handle returned every time.
static PARENT: Mutex<Option<MPI_Comm>> = Mutex::new(None);

pub unsafe fn MPI_Comm_get_parent(parent: *mut MPI_Comm) -> c_int {
    let g = gate::enter();
    let mut r = MPI_COMM_NULL;
    let rc = real!(MPI_Comm_get_parent(&mut r));
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_default(rc, "MPI_Comm_get_parent");
    }
    let v = if r == MPI_COMM_NULL {
        MPI_COMM_NULL
    } else {
        let mut p = PARENT.lock();
        match *p {
            Some(v) if conv::comm(v) == r => v,
            _ => {
                let v = wrap(r, "MPI_Comm_get_parent");
                *p = Some(v);
                v
            }
        }
    };
    // SAFETY: `parent` is the caller's out-pointer, null or valid for a write (MPI's contract of this call).
    unsafe { put(parent, v) };
    MPI_SUCCESS
}
