//! The CPU VM: a verified program loaded into rbpf (its JIT where it applies, else its
//! interpreter) with its maps bound, run over a context buffer.

use std::cell::RefCell;
use std::thread::ThreadId;

use ::egpu_vm::{EngineChoice, Vm};
use egpu_maps::RawMap;

use crate::error::{
    EGPU_LOAD, EGPU_NOT_FOUND, EGPU_NULL_ARGUMENT, EGPU_RUN, EGPU_WRONG_THREAD, Failure, Result,
    egpu_status, fail, guard,
};
use crate::ffi::{self, Kind};
use crate::maps::{MapHandle, egpu_map, put_map};
use crate::program::{ProgramHandle, egpu_program};

/// A program loaded into the CPU VM. rbpf's VMs belong to one thread: a VM handle is used, and
/// freed, on the thread that made it (`egpu_vm_new`); a call on another thread is
/// `EGPU_WRONG_THREAD` (and `egpu_vm_free` there leaves it allocated rather than drop it on a
/// thread it does not belong to). Make one VM per thread; they share maps.
#[derive(Debug)]
pub struct egpu_vm {
    _opaque: [u8; 0],
}

pub(crate) struct VmHandle {
    thread: ThreadId,
    vm: RefCell<Vm>,
}

impl Kind for VmHandle {
    type Opaque = egpu_vm;
    const NAME: &'static str = "egpu_vm";
    const MAGIC: u64 = ffi::KINDS[2].0;
}

/// The VM behind `vm`, on its own thread.
///
/// # Safety
/// `vm` is null or a live VM handle.
unsafe fn own<'a>(vm: *const egpu_vm) -> Result<&'a VmHandle> {
    // SAFETY: the caller's promise.
    let v = unsafe { ffi::handle::<VmHandle>(vm, "vm") }?;
    if v.thread != std::thread::current().id() {
        return fail(
            EGPU_WRONG_THREAD,
            "this VM belongs to the thread that made it (rbpf's VMs are per thread): make one \
             VM per thread, sharing maps",
        );
    }
    Ok(v)
}

/// Loads `program` into a VM for this thread, verifying it first if it was not. With `maps`
/// null and `map_count` 0, each entry of its map table gets a new, empty map in process memory
/// (`egpu_vm_map` hands them out; global data's start with its contents); otherwise `map_count` is the table's length and entry `n`
/// is bound to `maps[n]`, which must be of its kind, key and value size (`EGPU_LOAD` names the
/// entry that is not). `EGPU_VERIFY` when the verifier refuses it, `EGPU_LOAD` when the CPU
/// cannot run it (a device-only helper).
///
/// # Safety
/// `program` is null or a live program handle; `maps` is null or valid for `map_count`
/// pointers, each null or a live map handle; `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_vm_new(
    program: *const egpu_program,
    maps: *const *const egpu_map,
    map_count: usize,
    out: *mut *mut egpu_vm,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises.
        let (p, bound) = unsafe {
            (
                ffi::handle::<ProgramHandle>(program, "program")?,
                ffi::handles::<MapHandle>(maps, map_count, "maps")?,
            )
        };
        if out.is_null() {
            return fail(EGPU_NULL_ARGUMENT, "`out` is null");
        }
        let verified = p.verified()?;
        let name = p.name();
        let loaded = |e: ::egpu_vm::LoadError| Failure::new(EGPU_LOAD, format!("{name}: {e}"));
        let vm = if maps.is_null() && map_count == 0 {
            let vm = Vm::new(&verified).map_err(loaded)?;
            for (index, map) in vm.maps().iter().enumerate() {
                p.fill(index, map)?;
            }
            vm
        } else {
            let raw: Vec<RawMap> = bound.iter().map(|m| m.raw().clone()).collect();
            Vm::with_maps(&verified, &raw, EngineChoice::Auto).map_err(loaded)?
        };
        let handle = VmHandle { thread: std::thread::current().id(), vm: RefCell::new(vm) };
        // SAFETY: checked not null; the caller's promise that it is writable.
        unsafe { ffi::put(out, ffi::new_handle(handle), "out") }
    })
}

/// Runs the program with the `ctx_length` bytes at `ctx` as its context (`r1` points at them),
/// its return value (`r0`) through `result`. The context is the caller's: a program attached to
/// `user(N)` may write it; `ctx_length` must cover what the program reads (`EGPU_RUN`
/// otherwise). A fault the VM catches is `EGPU_RUN` with what happened; the maps keep what the
/// run wrote before it.
///
/// # Safety
/// `vm` is null or a live VM handle; `ctx` is null or valid for reads and writes of
/// `ctx_length` bytes; `result` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_vm_run(
    vm: *const egpu_vm,
    ctx: *mut u8,
    ctx_length: usize,
    result: *mut u64,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises.
        let (v, ctx) = unsafe { (own(vm)?, ffi::bytes_mut(ctx, ctx_length, "ctx")?) };
        if result.is_null() {
            return fail(EGPU_NULL_ARGUMENT, "`result` is null");
        }
        let Ok(mut vm) = v.vm.try_borrow_mut() else {
            return fail(EGPU_RUN, "the VM is running already (a call from inside its run)");
        };
        let r0 = vm.run(ctx).map_err(|e| Failure::new(EGPU_RUN, e.to_string()))?;
        // SAFETY: checked not null; the caller's promise that it is writable.
        unsafe { ffi::put(result, r0, "result") }
    })
}

/// A new handle of the map bound to entry `index` of the VM's map table (the map it made, when
/// it was given none), to read what runs wrote; free it with `egpu_map_free`.
///
/// # Safety
/// `vm` is null or a live VM handle; `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_vm_map(
    vm: *const egpu_vm,
    index: usize,
    out: *mut *mut egpu_map,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let v = unsafe { own(vm) }?;
        let Ok(vm) = v.vm.try_borrow() else {
            return fail(EGPU_RUN, "the VM is running");
        };
        let Some(raw) = vm.maps().get(index) else {
            return fail(
                EGPU_NOT_FOUND,
                format!("the VM has {} maps, no {index}", vm.maps().len()),
            );
        };
        // SAFETY: the caller's promise.
        unsafe { put_map(raw.clone(), out) }
    })
}

/// Frees a VM (null: nothing), on the thread that made it; on another thread it is left
/// allocated, with `EGPU_WRONG_THREAD` as the thread's last error.
///
/// # Safety
/// `vm` is null or a live VM handle, not used after (when freed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_vm_free(vm: *mut egpu_vm) {
    guard(|| {
        if vm.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's promise; checks kind and thread.
        unsafe { own(vm) }?;
        // SAFETY: a live VM handle of this thread, checked above.
        drop(unsafe { ffi::take_handle::<VmHandle>(vm) });
        Ok(())
    });
}
