//! egpu's preloaded library: host probes for unmodified CUDA programs.
//!
//! Loaded with `LD_PRELOAD=libegpu_preload.so`, it interposes the CUDA driver API's kernel
//! launches and fires egpu's host probes ([`egpu::host::global`]) around each, whichever way the
//! program reached the driver:
//!
//! - by linking against `libcuda.so.1`: this library's exported `cuLaunchKernel` comes first in
//!   symbol lookup and calls the next one (`dlsym(RTLD_NEXT, …)`);
//! - by `dlsym(handle, "cuLaunchKernel")`, as Triton and other loaders do: the exported `dlsym`
//!   hands back this library's function and keeps the driver's;
//! - by `cuGetProcAddress` (both the CUDA 11 form and `cuGetProcAddress_v2`), as the CUDA runtime
//!   (dynamic or static) does for every driver entry point: the driver's answer is kept and this
//!   library's function handed back, the per-thread-default-stream flavour (`_ptsz`) included.
//!
//! One launch is one event: a thread inside an interposed call does not fire again for a call
//! the driver makes to itself.
//!
//! The probes are the built-in set (the `defaults` module): launches counted per kernel, in a hash map
//! keyed by the kernel's id (the 64-bit hash of its mangled name, [`egpu::ebpf::kernel_id`]),
//! with the names kept beside it. When `EGPU_SUMMARY` names a path, each process writes what it
//! counted to `<EGPU_SUMMARY>.<pid>` when it exits. A child made by `fork` starts from zero.
//!
//! Nothing here may take the program down: when something is missing (the driver lacks
//! `cuFuncGetName`, the probes cannot be set up), the call goes straight to the driver.

#![allow(non_snake_case)] // the CUDA API's names

mod defaults;
mod device;
mod events;
mod real;

use std::cell::{Cell, RefCell};
use std::sync::OnceLock;

use egpu::host::HostProbes;
use std::ffi::{CStr, c_char, c_int, c_void};

use egpu::ebpf::Phase;

/// `CUresult`.
type CuResult = c_int;
/// `CUfunction`, `CUstream` and the like: opaque handles.
type Handle = *mut c_void;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// What a thread keeps, in one thread-local (each costs a lookup in a shared library).
struct Local {
    /// Whether this thread is inside an interposed call: calls the driver makes meanwhile are
    /// not events of their own.
    inside: Cell<bool>,
    /// The last function this thread launched, and its kernel id: most loops launch one kernel.
    last: Cell<(usize, u64)>,
    /// This thread's queue to egpu's worker thread.
    poster: RefCell<Option<egpu::host::Poster>>,
}

impl Local {
    const fn new() -> Local {
        Local { inside: Cell::new(false), last: Cell::new((0, 0)), poster: RefCell::new(None) }
    }
}

/// The calling thread's [`Local`], or `None` while its thread-locals are being destroyed.
#[inline]
fn local() -> Option<&'static Local> {
    thread_local! {
        static LOCAL: Local = const { Local::new() };
    }
    // SAFETY: the thread's own value, used on this thread only while it runs.
    LOCAL.try_with(|l| unsafe { &*(l as *const Local) }).ok()
}

impl Local {
    /// Queues the event for egpu's worker thread: after the driver's call the caches are cold,
    /// and running the probes here would cost the caller several times more (see
    /// `egpu::host::HostProbes::post`).
    #[inline(always)]
    fn post<C: egpu::host::HostContext>(&self, probes: &'static HostProbes, phase: Phase, ctx: &C) {
        let Ok(mut poster) = self.poster.try_borrow_mut() else {
            return probes.post(phase, ctx);
        };
        match poster.as_ref() {
            Some(p) if !p.stale() => p.post(phase, ctx),
            _ => {
                let p = probes.poster();
                p.post(phase, ctx);
                *poster = Some(p);
            }
        }
    }
}

/// The function this library hands out for `symbol`, found as `found` (kept as the real one):
/// by `dlsym` (`version` `None`, exact names) or by `cuGetProcAddress` (base names, the flavour
/// chosen by `flags`); `found` itself for entry points not interposed.
///
/// A base name stands for several functions of different signatures (CUDA 13's
/// `cuCtxSynchronize` is `cuCtxSynchronize_v2(CUcontext)`), so what `cuGetProcAddress` found is
/// handed over only to the entry point whose exact name the driver exports at that address.
fn hand_out(symbol: &CStr, version: Option<c_int>, flags: u64, found: *mut c_void) -> *mut c_void {
    let per_thread = flags & PER_THREAD_DEFAULT_STREAM != 0;
    let given = match symbol.to_bytes() {
        b"cuGetProcAddress" if version.is_none() => real::GET_PROC.keep(found),
        b"cuGetProcAddress_v2" if version.is_none() => real::GET_PROC_V2.keep(found),
        b"cuGetProcAddress" if exported_as(found, c"cuGetProcAddress_v2") => {
            real::GET_PROC_V2.keep(found)
        }
        b"cuGetProcAddress" if exported_as(found, c"cuGetProcAddress") => {
            real::GET_PROC.keep(found)
        }
        b"cuFuncGetName" => real::FUNC_GET_NAME.keep(found),
        b"cuKernelGetName" => real::KERNEL_GET_NAME.keep(found),
        name => match version {
            None => events::exact(name).map_or(found, |e| e.hook.keep(found)),
            Some(v) => events::by_base(name, v, per_thread)
                .find(|e| exported_as(found, e.exact))
                .map_or(found, |e| e.hook.keep(found)),
        },
    };
    if log_enabled("lookups") {
        let how = match version {
            None => "dlsym".to_owned(),
            Some(v) => format!("cuGetProcAddress {v} flags {flags}"),
        };
        let what = if given == found { "left alone" } else { "interposed" };
        eprintln!("egpu: {how}: {}: {what}", symbol.to_string_lossy());
    }
    given
}

/// Whether `EGPU_LOG` (a comma-separated list) names `what`: `lookups` prints every lookup of a
/// `cu*` entry point, with whether it was interposed; `modules` every module loaded without the
/// device probes, with why.
pub(crate) fn log_enabled(what: &str) -> bool {
    static LOG: OnceLock<String> = OnceLock::new();
    LOG.get_or_init(|| std::env::var("EGPU_LOG").unwrap_or_default()).split(',').any(|w| w == what)
}

/// Whether `f` is the function that the library containing it exports as `exact`.
fn exported_as(f: *mut c_void, exact: &CStr) -> bool {
    if f.is_null() {
        return false;
    }
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr writes `info` for any address.
    if unsafe { libc::dladdr(f, info.as_mut_ptr()) } == 0 {
        return false;
    }
    // SAFETY: written by dladdr, which returned non-zero.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: the file name dladdr gave, of a library already loaded (NOLOAD: no new load).
    let handle = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return false;
    }
    let Some(lookup) = real::dlsym() else { return false };
    // SAFETY: the real dlsym with a handle dlopen gave and a C string.
    let exported = unsafe { lookup(handle, exact.as_ptr()) };
    // SAFETY: the handle dlopen gave (its reference is dropped; the library stays loaded).
    unsafe { libc::dlclose(handle) };
    exported == f
}

/// The driver's `cuGetProcAddress` (CUDA 11's form), interposed: entry points this library
/// interposes come back as its own.
///
/// # Safety
///
/// As the driver's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    const NOT_FOUND: CuResult = 500; // CUDA_ERROR_NOT_FOUND
    let Some(real) = real::GET_PROC.get() else { return NOT_FOUND };
    // SAFETY: the driver's function with the caller's arguments.
    let result = unsafe { real(symbol, pfn, version, flags) };
    // SAFETY: on success the driver wrote `*pfn`, and `symbol` is the caller's C string.
    unsafe { replace_found(result, symbol, pfn, version, flags) };
    result
}

/// The driver's `cuGetProcAddress_v2` (CUDA 12's), interposed as [`cuGetProcAddress`] is.
///
/// # Safety
///
/// As the driver's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    const NOT_FOUND: CuResult = 500;
    let Some(real) = real::GET_PROC_V2.get() else { return NOT_FOUND };
    // SAFETY: the driver's function with the caller's arguments.
    let result = unsafe { real(symbol, pfn, version, flags, status) };
    // SAFETY: as in `cuGetProcAddress`.
    unsafe { replace_found(result, symbol, pfn, version, flags) };
    result
}

/// After a successful `cuGetProcAddress`: the driver's function for `symbol` kept, this
/// library's written to `*pfn` in its place.
///
/// # Safety
///
/// `symbol` is null or a C string; `pfn` is null or was written by the driver when `result` is 0.
unsafe fn replace_found(
    result: CuResult,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) {
    if result != 0 || symbol.is_null() || pfn.is_null() {
        return;
    }
    // SAFETY: the caller's C string; the driver wrote `*pfn`.
    unsafe {
        let symbol = CStr::from_ptr(symbol);
        *pfn = hand_out(symbol, Some(version), flags, *pfn);
    }
}

/// `dlsym`, interposed: a lookup of an entry point this library interposes (from any handle:
/// `libcuda.so.1`'s, `RTLD_DEFAULT`, …) returns this library's function, and the one found is
/// kept as the real one. Everything else is the real `dlsym`'s answer.
///
/// # Safety
///
/// As `dlsym`'s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let Some(real) = real::dlsym() else { return std::ptr::null_mut() };
    // SAFETY: the real dlsym with the caller's arguments.
    let found = unsafe { real(handle, symbol) };
    if found.is_null() || symbol.is_null() {
        return found;
    }
    // SAFETY: dlsym's caller passes a C string.
    let symbol = unsafe { CStr::from_ptr(symbol) };
    if !symbol.to_bytes().starts_with(b"cu") {
        return found;
    }
    hand_out(symbol, None, 0, found)
}

/// Resumes the probes (`on` not 0) or pauses them, for programs that measure what they cost
/// (`benches/launch.rs`): 1 when they were running, 0 when paused, -1 when they could not be
/// set up.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_preload_probes(on: c_int) -> c_int {
    match defaults::set_enabled(on != 0) {
        Some(was) => c_int::from(was),
        None => -1,
    }
}

/// The driver's own `cuLaunchKernel`, which this library's calls (null when not found): what a
/// launch costs without this library, measured in the same process.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_preload_real_launch() -> *mut c_void {
    events::LAUNCH.get().map_or(std::ptr::null_mut(), |f| f as *mut c_void)
}
