//! Attribute caching lives entirely in the shim: keyvals, values and the program's copy and
//! delete callbacks. Nothing to rebuild after a restore, and callbacks see virtual handles.
//! Predefined attributes (MPI_TAG_UB, MPI_WIN_BASE, ...) are answered by the real library.

use crate::core::gate;
use crate::core::kinds::{keyval, win};
use crate::core::state::{Attrs, OBJ, SELF_INDEX};
use crate::face::abi::*;
use crate::face::api::put;
use crate::face::{conv, errors};
use mpicr_virtid::{KeyvalObject, KeyvalRecipe, VKeyval, VWin};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::Ordering;

type CopyFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
type DeleteFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;

/// An object that carries attributes.
#[derive(Clone, Copy)]
enum Obj {
    Comm(MPI_Comm, u32),
    Type(MPI_Datatype, u32),
    /// A predefined datatype (MPI allows attributes on those too).
    PredefinedType(MPI_Datatype),
    Win(MPI_Win, VWin),
}

/// Attributes of predefined datatypes, by handle.
static PREDEFINED_TYPE_ATTRS: parking_lot::Mutex<Vec<(MPI_Datatype, Attrs)>> = parking_lot::Mutex::new(Vec::new());

impl Obj {
    fn comm(h: MPI_Comm) -> Option<Obj> {
        conv::comm_index(h).filter(|&i| OBJ.comms.real(i).is_some()).map(|i| Obj::Comm(h, i))
    }
    fn datatype(h: MPI_Datatype) -> Option<Obj> {
        match conv::vdatatype(h).index() {
            Some(i) => OBJ.datatypes.real(i).map(|_| Obj::Type(h, i)),
            None if h != MPI_DATATYPE_NULL => Some(Obj::PredefinedType(h)),
            None => None,
        }
    }
    fn win(h: MPI_Win) -> Option<Obj> {
        let v = conv::vwin(h);
        win::with(v, |_| Obj::Win(h, v))
    }
    fn handle(self) -> c_int {
        match self {
            Obj::Comm(h, _) | Obj::Type(h, _) | Obj::PredefinedType(h) | Obj::Win(h, _) => h,
        }
    }
    fn attrs<R>(self, f: impl FnOnce(&mut Attrs) -> R) -> Option<R> {
        match self {
            Obj::Comm(_, i) => OBJ.comms.with(i, |c| f(&mut c.attrs)),
            Obj::Type(_, i) => OBJ.datatypes.with(i, |t| f(&mut t.attrs)),
            Obj::PredefinedType(h) => {
                let mut all = PREDEFINED_TYPE_ATTRS.lock();
                let pos = match all.iter().position(|(t, _)| *t == h) {
                    Some(p) => p,
                    None => {
                        all.push((h, Vec::new()));
                        all.len() - 1
                    }
                };
                Some(f(&mut all[pos].1))
            }
            Obj::Win(_, v) => win::with(v, |w| f(&mut w.attrs)),
        }
    }
    fn raise(self, rc: c_int, name: &str) -> c_int {
        match self {
            Obj::Comm(h, _) => errors::raise_comm(h, rc, name),
            Obj::Win(h, _) => errors::raise_win(h, rc, name),
            Obj::Type(..) | Obj::PredefinedType(_) => errors::raise_default(rc, name),
        }
    }
}

fn lookup_keyval(k: VKeyval) -> Option<(u32, KeyvalRecipe)> {
    keyval::lookup(k)
}

fn release_keyval(i: u32) {
    keyval::release(i)
}

/// # Safety
/// `out` must be null or valid for a write.
unsafe fn create_keyval(object: KeyvalObject, copy: *mut c_void, delete: *mut c_void, out: *mut c_int, extra: *mut c_void, legacy: bool) -> c_int {
    let recipe = KeyvalRecipe { object, copy_fn: copy as u64, delete_fn: delete as u64, extra_state: extra as u64, legacy };
    match keyval::register(recipe) {
        Ok(v) => {
            // SAFETY: `out` is null or valid for a write (this function's contract).
            unsafe { put(out, conv::keyval_abi(v)) };
            MPI_SUCCESS
        }
        Err(_) => errors::raise_default(MPI_ERR_OTHER, "MPI_Comm_create_keyval"),
    }
}

/// # Safety
/// `k` must be null or valid for a read and a write.
unsafe fn free_keyval(k: *mut c_int, name: &str) -> c_int {
    if k.is_null() {
        return errors::raise_default(MPI_ERR_ARG, name);
    }
    // SAFETY: `k` is non-null (checked above), so readable (this function's contract).
    match lookup_keyval(conv::vkeyval(unsafe { *k })) {
        Some((i, _)) => {
            // Only the first free drops the program's reference; the others (through copies of
            // the handle, while attributes still hold the keyval) change nothing.
            let first = OBJ.keyvals.with(i, |e| !std::mem::replace(&mut e.freed, true)).unwrap_or(false);
            if first {
                release_keyval(i);
            }
            // SAFETY: `k` is non-null (checked above), so writable (this function's contract).
            unsafe { *k = MPI_KEYVAL_INVALID };
            MPI_SUCCESS
        }
        None => errors::raise_default(MPI_ERR_KEYVAL, name),
    }
}

/// Calls the delete callback of one attribute value.
fn call_delete(obj: Obj, k: VKeyval, r: &KeyvalRecipe, value: usize) -> c_int {
    if r.delete_fn == 0 {
        return MPI_SUCCESS;
    }
    // SAFETY: the program registered this function with the delete-callback signature.
    unsafe { std::mem::transmute::<u64, DeleteFn>(r.delete_fn)(obj.handle(), conv::keyval_abi(k), value as *mut c_void, r.extra_state as *mut c_void) }
}

fn set_attr(obj: Option<Obj>, k: c_int, value: usize, name: &str, bad_obj: c_int) -> c_int {
    let Some(obj) = obj else { return errors::raise_default(bad_obj, name) };
    let k = conv::vkeyval(k);
    let Some((ki, r)) = lookup_keyval(k) else { return obj.raise(MPI_ERR_KEYVAL, name) };
    let old = obj.attrs(|a| a.iter().position(|(key, _)| *key == k).map(|p| a[p].1)).flatten();
    if let Some(old) = old {
        let rc = call_delete(obj, k, &r, old);
        if rc != MPI_SUCCESS {
            return obj.raise(rc, name);
        }
    }
    let added = obj
        .attrs(|a| match a.iter_mut().find(|(key, _)| *key == k) {
            Some(slot) => {
                slot.1 = value;
                false
            }
            None => {
                a.push((k, value));
                true
            }
        })
        .unwrap_or(false);
    if added {
        OBJ.keyvals.with(ki, |e| e.refs += 1);
    }
    MPI_SUCCESS
}

fn delete_attr(obj: Option<Obj>, k: c_int, name: &str, bad_obj: c_int) -> c_int {
    let Some(obj) = obj else { return errors::raise_default(bad_obj, name) };
    let k = conv::vkeyval(k);
    let Some((ki, r)) = lookup_keyval(k) else { return obj.raise(MPI_ERR_KEYVAL, name) };
    let Some(Some(value)) = obj.attrs(|a| a.iter().find(|(key, _)| *key == k).map(|x| x.1)) else {
        return obj.raise(MPI_ERR_KEYVAL, name);
    };
    let rc = call_delete(obj, k, &r, value);
    if rc != MPI_SUCCESS {
        return obj.raise(rc, name);
    }
    obj.attrs(|a| a.retain(|(key, _)| *key != k));
    release_keyval(ki);
    MPI_SUCCESS
}

/// # Safety
/// `flag` must be null or valid for a write of an int, `out` null or valid for a write of a
/// pointer-sized value.
unsafe fn get_attr(obj: Option<Obj>, k: c_int, out: *mut c_void, flag: *mut c_int, name: &str, bad_obj: c_int) -> c_int {
    let Some(obj) = obj else { return errors::raise_default(bad_obj, name) };
    let k = conv::vkeyval(k);
    if lookup_keyval(k).is_none() {
        return obj.raise(MPI_ERR_KEYVAL, name);
    }
    let v = obj.attrs(|a| a.iter().find(|(key, _)| *key == k).map(|x| x.1)).flatten();
    // SAFETY: `flag` and `out` are null or writable for an int and a pointer-sized value (this
    // function's contract); `put` skips null.
    unsafe {
        put(flag, v.is_some() as c_int);
        if let Some(v) = v {
            put(out as *mut usize, v);
        }
    }
    MPI_SUCCESS
}

impl Obj {
    /// MPICH keeps a communicator's attributes newest first and those of datatypes and windows
    /// in order of setting; copy and delete callbacks run in that order (MPI 4.1, section 11.2.4,
    /// requires newest first for MPI_COMM_SELF at MPI_Finalize). `Attrs` is in order of setting.
    fn newest_first(self) -> bool {
        matches!(self, Obj::Comm(..))
    }
}

/// Deletes every attribute of an object being freed, in the order MPICH does; all are removed
/// even if a delete callback fails, whose error is returned (the first one).
fn delete_all(obj: Obj) -> c_int {
    let mut attrs = obj.attrs(std::mem::take).unwrap_or_default();
    if obj.newest_first() {
        attrs.reverse();
    }
    let mut rc = MPI_SUCCESS;
    for (k, v) in attrs {
        if let Some((ki, r)) = lookup_keyval(k) {
            let this = call_delete(obj, k, &r, v);
            if rc == MPI_SUCCESS {
                rc = this;
            }
            release_keyval(ki);
        }
    }
    rc
}

/// Removes the attributes of an object that is discarded before the program saw it (a
/// duplicate whose copy callback failed): no delete callbacks, as MPICH never made them.
fn discard_all(obj: Obj) {
    for (k, _) in obj.attrs(std::mem::take).unwrap_or_default() {
        if let Some((ki, _)) = lookup_keyval(k) {
            release_keyval(ki);
        }
    }
}

/// Copies attributes to a duplicate through the program's copy callbacks, in the order MPICH
/// does; the duplicate's attributes keep the original's order. On a failing callback its error
/// is returned and the attributes copied so far stay on `to` (see [`discard_all`]).
fn copy_all(from: Obj, to: Obj) -> c_int {
    let mut attrs = from.attrs(|a| a.clone()).unwrap_or_default();
    if from.newest_first() {
        attrs.reverse();
    }
    let mut copied = Vec::new();
    let mut rc = MPI_SUCCESS;
    for (k, v) in attrs {
        let Some((ki, r)) = lookup_keyval(k) else { continue };
        if r.copy_fn == 0 {
            continue;
        }
        let mut out: usize = 0;
        let mut flag: c_int = 0;
        // SAFETY: the program registered this function with the copy-callback signature.
        rc = unsafe {
            std::mem::transmute::<u64, CopyFn>(r.copy_fn)(
                from.handle(),
                conv::keyval_abi(k),
                r.extra_state as *mut c_void,
                v as *mut c_void,
                &mut out as *mut usize as *mut c_void,
                &mut flag,
            )
        };
        if rc != MPI_SUCCESS {
            break;
        }
        if flag != 0 {
            copied.push((k, out));
            OBJ.keyvals.with(ki, |e| e.refs += 1);
        }
    }
    if to.newest_first() {
        copied.reverse();
    }
    to.attrs(|a| a.extend(copied));
    rc
}

pub fn copy_comm_attrs(from: MPI_Comm, to: MPI_Comm) -> c_int {
    match (Obj::comm(from), Obj::comm(to)) {
        (Some(f), Some(t)) => copy_all(f, t),
        _ => MPI_SUCCESS,
    }
}

pub fn copy_type_attrs(from: MPI_Datatype, to: MPI_Datatype) -> c_int {
    match (Obj::datatype(from), Obj::datatype(to)) {
        (Some(f), Some(t)) => copy_all(f, t),
        _ => MPI_SUCCESS,
    }
}

/// Drops the attributes of a duplicate being discarded, without callbacks.
pub fn discard_comm_attrs(c: MPI_Comm) {
    if let Some(o) = Obj::comm(c) {
        discard_all(o);
    }
}

/// Drops the attributes of a duplicate being discarded, without callbacks.
pub fn discard_type_attrs(t: MPI_Datatype) {
    if let Some(o) = Obj::datatype(t) {
        discard_all(o);
    }
}

pub fn delete_all_comm_attrs(c: MPI_Comm) -> c_int {
    Obj::comm(c).map_or(MPI_SUCCESS, delete_all)
}

pub fn delete_all_type_attrs(t: MPI_Datatype) -> c_int {
    Obj::datatype(t).map_or(MPI_SUCCESS, delete_all)
}

pub fn delete_all_win_attrs(w: MPI_Win) -> c_int {
    Obj::win(w).map_or(MPI_SUCCESS, delete_all)
}

/// MPI_Finalize first deletes the attributes of MPI_COMM_SELF, newest first, while MPI is
/// still usable (MPI 4.1, section 11.2.4).
pub fn delete_self_attrs_at_finalize() {
    if OBJ.comms.real(SELF_INDEX).is_some() {
        let _ = delete_all(Obj::Comm(MPI_COMM_SELF, SELF_INDEX));
    }
}

/// Predefined attribute values live in the library's memory, which a renewal unmaps; the
/// program gets a pointer to the shim's copy instead, which stays valid (and current: each
/// query refreshes it) across checkpoints.
fn stable_predefined_value(keyval: c_int, value: c_int) -> *mut c_int {
    use std::sync::atomic::AtomicI32;
    const KEYS: [c_int; 7] = [MPI_TAG_UB, MPI_HOST, MPI_IO, MPI_WTIME_IS_GLOBAL, MPI_UNIVERSE_SIZE, MPI_LASTUSEDCODE, MPI_APPNUM];
    static SLOTS: [AtomicI32; 7] = [const { AtomicI32::new(0) }; 7];
    let i = KEYS.iter().position(|&k| k == keyval).unwrap_or(0);
    SLOTS[i].store(value, Ordering::Relaxed);
    SLOTS[i].as_ptr()
}

fn is_predefined_comm_key(k: c_int) -> bool {
    matches!(k, MPI_TAG_UB | MPI_HOST | MPI_IO | MPI_WTIME_IS_GLOBAL | MPI_UNIVERSE_SIZE | MPI_LASTUSEDCODE | MPI_APPNUM)
}

fn is_predefined_win_key(k: c_int) -> bool {
    matches!(k, MPI_WIN_BASE | MPI_WIN_SIZE | MPI_WIN_DISP_UNIT | MPI_WIN_CREATE_FLAVOR | MPI_WIN_MODEL)
}

pub unsafe fn MPI_Comm_create_keyval(copy: *mut c_void, delete: *mut c_void, keyval: *mut c_int, extra: *mut c_void) -> c_int {
    // SAFETY: `keyval` is the program's out-pointer, null or writable (MPI's contract of this call).
    unsafe { create_keyval(KeyvalObject::Comm, copy, delete, keyval, extra, false) }
}
pub unsafe fn MPI_Keyval_create(copy: *mut c_void, delete: *mut c_void, keyval: *mut c_int, extra: *mut c_void) -> c_int {
    // SAFETY: `keyval` is the program's out-pointer, null or writable (MPI's contract of this call).
    unsafe { create_keyval(KeyvalObject::Comm, copy, delete, keyval, extra, true) }
}
pub unsafe fn MPI_Type_create_keyval(copy: *mut c_void, delete: *mut c_void, keyval: *mut c_int, extra: *mut c_void) -> c_int {
    // SAFETY: `keyval` is the program's out-pointer, null or writable (MPI's contract of this call).
    unsafe { create_keyval(KeyvalObject::Datatype, copy, delete, keyval, extra, false) }
}
pub unsafe fn MPI_Win_create_keyval(copy: *mut c_void, delete: *mut c_void, keyval: *mut c_int, extra: *mut c_void) -> c_int {
    // SAFETY: `keyval` is the program's out-pointer, null or writable (MPI's contract of this call).
    unsafe { create_keyval(KeyvalObject::Win, copy, delete, keyval, extra, false) }
}
pub unsafe fn MPI_Comm_free_keyval(keyval: *mut c_int) -> c_int {
    // SAFETY: `keyval` is the program's pointer, null or readable and writable (MPI's contract of this call).
    unsafe { free_keyval(keyval, "MPI_Comm_free_keyval") }
}
pub unsafe fn MPI_Keyval_free(keyval: *mut c_int) -> c_int {
    // SAFETY: `keyval` is the program's pointer, null or readable and writable (MPI's contract of this call).
    unsafe { free_keyval(keyval, "MPI_Keyval_free") }
}
pub unsafe fn MPI_Type_free_keyval(keyval: *mut c_int) -> c_int {
    // SAFETY: `keyval` is the program's pointer, null or readable and writable (MPI's contract of this call).
    unsafe { free_keyval(keyval, "MPI_Type_free_keyval") }
}
pub unsafe fn MPI_Win_free_keyval(keyval: *mut c_int) -> c_int {
    // SAFETY: `keyval` is the program's pointer, null or readable and writable (MPI's contract of this call).
    unsafe { free_keyval(keyval, "MPI_Win_free_keyval") }
}

pub unsafe fn MPI_Comm_set_attr(comm: MPI_Comm, keyval: c_int, value: *mut c_void) -> c_int {
    if is_predefined_comm_key(keyval) {
        return errors::raise_comm(comm, MPI_ERR_KEYVAL, "MPI_Comm_set_attr");
    }
    set_attr(Obj::comm(comm), keyval, value as usize, "MPI_Comm_set_attr", MPI_ERR_COMM)
}
pub unsafe fn MPI_Attr_put(comm: MPI_Comm, keyval: c_int, value: *mut c_void) -> c_int {
    // SAFETY: the same arguments and contract as MPI_Comm_set_attr, of which this is the deprecated name.
    unsafe { MPI_Comm_set_attr(comm, keyval, value) }
}

pub unsafe fn MPI_Comm_get_attr(comm: MPI_Comm, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
    if is_predefined_comm_key(keyval) {
        let g = gate::enter();
        let rc = real!(MPI_Comm_get_attr(conv::comm(comm), keyval, value, flag));
        drop(g);
        check_comm!(comm, rc, "MPI_Comm_get_attr");
        // SAFETY: on success the library wrote the flag and, when set, a pointer to its int.
        unsafe {
            if !flag.is_null() && *flag != 0 {
                let slot = value as *mut *mut c_int;
                *slot = stable_predefined_value(keyval, **slot);
            }
        }
        return MPI_SUCCESS;
    }
    // SAFETY: `value` (room for a pointer-sized attribute) and `flag` are the program's
    // out-pointers, null or writable (MPI's contract of this call).
    unsafe { get_attr(Obj::comm(comm), keyval, value, flag, "MPI_Comm_get_attr", MPI_ERR_COMM) }
}
pub unsafe fn MPI_Attr_get(comm: MPI_Comm, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
    // SAFETY: the same arguments and contract as MPI_Comm_get_attr, of which this is the deprecated name.
    unsafe { MPI_Comm_get_attr(comm, keyval, value, flag) }
}

pub unsafe fn MPI_Comm_delete_attr(comm: MPI_Comm, keyval: c_int) -> c_int {
    delete_attr(Obj::comm(comm), keyval, "MPI_Comm_delete_attr", MPI_ERR_COMM)
}
pub unsafe fn MPI_Attr_delete(comm: MPI_Comm, keyval: c_int) -> c_int {
    delete_attr(Obj::comm(comm), keyval, "MPI_Attr_delete", MPI_ERR_COMM)
}

pub unsafe fn MPI_Type_set_attr(t: MPI_Datatype, keyval: c_int, value: *mut c_void) -> c_int {
    set_attr(Obj::datatype(t), keyval, value as usize, "MPI_Type_set_attr", MPI_ERR_TYPE)
}
pub unsafe fn MPI_Type_get_attr(t: MPI_Datatype, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
    // SAFETY: `value` (room for a pointer-sized attribute) and `flag` are the program's
    // out-pointers, null or writable (MPI's contract of this call).
    unsafe { get_attr(Obj::datatype(t), keyval, value, flag, "MPI_Type_get_attr", MPI_ERR_TYPE) }
}
pub unsafe fn MPI_Type_delete_attr(t: MPI_Datatype, keyval: c_int) -> c_int {
    delete_attr(Obj::datatype(t), keyval, "MPI_Type_delete_attr", MPI_ERR_TYPE)
}

pub unsafe fn MPI_Win_set_attr(win: MPI_Win, keyval: c_int, value: *mut c_void) -> c_int {
    if is_predefined_win_key(keyval) {
        return errors::raise_win(win, MPI_ERR_KEYVAL, "MPI_Win_set_attr");
    }
    set_attr(Obj::win(win), keyval, value as usize, "MPI_Win_set_attr", MPI_ERR_WIN)
}
pub unsafe fn MPI_Win_get_attr(win: MPI_Win, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
    if is_predefined_win_key(keyval) {
        if let Some(v) = crate::face::api::rma::predefined_attr(win, keyval) {
            // SAFETY: `value` and `flag` are the caller's out-pointers (a `void *` and an int),
            // null or valid for a write as MPI requires.
            unsafe {
                put(value as *mut usize, v);
                put(flag, 1);
            }
            return MPI_SUCCESS;
        }
        let g = gate::enter();
        let rc = real!(MPI_Win_get_attr(conv::win(win), keyval, value, flag));
        drop(g);
        if rc != MPI_SUCCESS {
            return errors::raise_win(win, rc, "MPI_Win_get_attr");
        }
        return MPI_SUCCESS;
    }
    // SAFETY: `value` (room for a pointer-sized attribute) and `flag` are the program's
    // out-pointers, null or writable (MPI's contract of this call).
    unsafe { get_attr(Obj::win(win), keyval, value, flag, "MPI_Win_get_attr", MPI_ERR_WIN) }
}
pub unsafe fn MPI_Win_delete_attr(win: MPI_Win, keyval: c_int) -> c_int {
    delete_attr(Obj::win(win), keyval, "MPI_Win_delete_attr", MPI_ERR_WIN)
}
