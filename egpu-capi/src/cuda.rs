//! CUDA events of this process, when the preloaded library (`libegpu_preload.so`) is loaded:
//! it interposes the CUDA driver and runtime and fires its own probe set on every launch,
//! copy, allocation, synchronisation and module load.
//!
//! That library carries its own copy of egpu, whose probe set and VMs are not this library's,
//! so a program reaches it as a pack's text through a C entry point the preloaded library
//! exports (`egpu_preload_attach`, found with `dlsym(RTLD_DEFAULT, …)`), with its maps named by
//! their shared-memory objects: the preloaded library opens the same maps by name, and the
//! caller reads them through its own handles.

use std::ffi::{CStr, c_char, c_int, c_void};

use egpu_host::pack::Pack;

use crate::error::{
    EGPU_BAD_ARGUMENT, EGPU_LOAD, EGPU_NOT_FOUND, EGPU_NULL_ARGUMENT, EGPU_UNAVAILABLE, Failure,
    Result, egpu_status, fail, guard,
};
use crate::ffi;
use crate::host::host_maps;
use crate::maps::{MapHandle, egpu_map};
use crate::program::{ProgramHandle, egpu_program};

/// `egpu_preload_attach(pack, pack_length, names, names_length, error, error_length)`: an id
/// above 0, or -1 with a message in `error`.
type AttachFn =
    unsafe extern "C" fn(*const c_char, usize, *const c_char, usize, *mut c_char, usize) -> i64;
/// `egpu_preload_detach(id)`: 0, or -1 when it was not attached.
type DetachFn = extern "C" fn(i64) -> c_int;
/// `egpu_preload_flush()`: 0, or -1 when the library's probes could not be set up.
type FlushFn = extern "C" fn() -> c_int;

/// The preloaded library's entry point `name`, when the library is in this process.
fn preload(name: &CStr) -> Result<*mut c_void> {
    // SAFETY: dlsym with the default handle and a C string.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if f.is_null() {
        return fail(
            EGPU_UNAVAILABLE,
            "the preloaded library is not in this process: run the program under `egpu run` or \
             with LD_PRELOAD=libegpu_preload.so for CUDA events",
        );
    }
    Ok(f)
}

/// 1 when the preloaded library is in this process (CUDA events can be attached to), else 0.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_cuda_available() -> i32 {
    crate::error::guard_value(0, || Ok(i32::from(preload(c"egpu_preload_attach").is_ok())))
}

/// Attaches `program` (a host program) to the CUDA events of this process, through the
/// preloaded library: its launches, copies, allocations, synchronisations and module loads,
/// whichever way the program reaches the driver. Every map of `maps` (`map_count`, the table's
/// length) must be in shared memory (`egpu_map_desc::shared_name`): the preloaded library opens
/// them by name. The attachment's id through `id`. `EGPU_UNAVAILABLE` without the preloaded
/// library. The library runs launch probes on a worker thread shortly after the call:
/// `egpu_cuda_flush` waits for the events so far.
///
/// # Safety
/// `program` is null or a live program handle; `maps` is null or valid for `map_count`
/// pointers, each null or a live map handle; `id` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_cuda_attach(
    program: *const egpu_program,
    maps: *const *const egpu_map,
    map_count: usize,
    id: *mut u64,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises.
        let (p, bound) = unsafe {
            (
                ffi::handle::<ProgramHandle>(program, "program")?,
                ffi::handles::<MapHandle>(maps, map_count, "maps")?,
            )
        };
        if id.is_null() {
            return fail(EGPU_NULL_ARGUMENT, "`id` is null");
        }
        let raw = host_maps(p, &bound)?;
        let mut names = Vec::new();
        for (i, m) in raw.iter().enumerate() {
            let Some(name) = m.shared_name() else {
                return fail(
                    EGPU_BAD_ARGUMENT,
                    format!(
                        "maps[{i}] is in process memory: the preloaded library opens a probe's \
                         maps by name (make them with egpu_map_desc::shared_name)"
                    ),
                );
            };
            names.extend_from_slice(name.as_bytes());
            names.push(0);
        }
        let verified = p.verified()?;
        let mut pack = Pack::new();
        let name = p.name().replace(char::is_whitespace, "_");
        let layouts = raw.iter().map(|m| *m.geometry()).collect();
        pack.push(&name, (*verified).clone(), layouts)
            .map_err(|e| Failure::new(EGPU_LOAD, e.to_string()))?;
        let text = pack.to_text();
        // SAFETY: the preloaded library exports it with this signature.
        let attach: AttachFn = unsafe { std::mem::transmute(preload(c"egpu_preload_attach")?) };
        let mut error = [0 as c_char; 1024];
        // SAFETY: our own buffers, with their lengths.
        let got = unsafe {
            attach(
                text.as_ptr().cast(),
                text.len(),
                names.as_ptr().cast(),
                names.len(),
                error.as_mut_ptr(),
                error.len(),
            )
        };
        if got <= 0 {
            // SAFETY: the library NUL-terminates what it writes into the buffer, which starts
            // zeroed and keeps its last byte 0.
            let why = unsafe { CStr::from_ptr(error.as_ptr()) }.to_string_lossy().into_owned();
            return fail(
                EGPU_LOAD,
                format!("{}: the preloaded library refused it: {why}", p.name()),
            );
        }
        // SAFETY: checked not null; the caller's promise that it is writable.
        unsafe { ffi::put(id, got as u64, "id") }
    })
}

/// Detaches attachment `id` of `egpu_cuda_attach`: calls that begin after this returns do not
/// run it. `EGPU_NOT_FOUND` when it is not attached.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_cuda_detach(id: u64) -> egpu_status {
    guard(|| {
        // SAFETY: the preloaded library exports it with this signature.
        let detach: DetachFn = unsafe { std::mem::transmute(preload(c"egpu_preload_detach")?) };
        match detach(i64::try_from(id).unwrap_or(-1)) {
            0 => Ok(()),
            _ => fail(EGPU_NOT_FOUND, format!("no CUDA attachment {id}")),
        }
    })
}

/// Runs the probes of every CUDA event posted so far (the preloaded library runs them on a
/// worker thread, shortly after each call): when it returns, the maps hold them.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_cuda_flush() -> egpu_status {
    guard(|| {
        // SAFETY: the preloaded library exports it with this signature.
        let flush: FlushFn = unsafe { std::mem::transmute(preload(c"egpu_preload_flush")?) };
        match flush() {
            0 => Ok(()),
            _ => fail(EGPU_UNAVAILABLE, "the preloaded library's probes could not be set up"),
        }
    })
}
