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
//! One launch is one event: a thread inside an interposed runtime call does not fire again for
//! the driver calls it makes, nor does a call the driver makes to itself (on x86-64 Linux, known
//! by its return address, in the driver's code: see `events::trampoline`).
//!
//! The probes are the built-in set (the `defaults` module): launches counted per kernel, in a hash map
//! keyed by the kernel's id (the 64-bit hash of its mangled name, [`egpu::ebpf::kernel_id`]),
//! with the names kept beside it. When `EGPU_SUMMARY` names a path, each process writes what it
//! counted to `<EGPU_SUMMARY>.<pid>` when it exits. A child made by `fork` starts from zero.
//!
//! Nothing here may take the program down: when something is missing (the driver lacks
//! `cuFuncGetName`, the probes cannot be set up), the call goes straight to the driver.

#![allow(non_snake_case)] // the CUDA API's names

mod attach;
mod attribution;
mod defaults;
mod device;
mod events;
mod kernel_times;
mod nccl;
mod real;

use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
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

/// What a thread keeps, in one block of thread-local storage that is all zeros at first.
///
/// The block is reached without a call: on x86-64 Linux it sits in the static TLS block
/// (initial-exec model), one load from `%fs` away, where Rust's `thread_local!` in a shared
/// library costs a call to `__tls_get_addr` and the loader's lines it reads, all cold after a
/// driver call. (This makes the library loadable by `LD_PRELOAD`, or by `dlopen` while the
/// static TLS surplus has room for its 192 bytes.) Elsewhere it is a `thread_local!`.
#[repr(C, align(64))]
struct Local {
    /// Whether this thread is inside an interposed call: calls the driver makes meanwhile are
    /// not events of their own. Also what keeps [`Local::post`] from being re-entered.
    inside: Cell<bool>,
    /// 0 (no poster made yet), [`POSTER`] (`poster` is initialised), [`STALE`] or [`EXITING`].
    posting: Cell<u8>,
    /// The last function this thread launched, and its kernel id: most loops launch one kernel.
    last: Cell<(usize, u64)>,
    /// This thread's queue to egpu's worker thread, dropped when the thread exits ([`Owner`]).
    poster: UnsafeCell<MaybeUninit<egpu::host::Poster>>,
    /// Its tags and what its launch sites need (issue 28).
    attr: attribution::Attr,
}

/// [`Local::posting`]: `poster` holds this thread's.
const POSTER: u8 = 1;
/// [`Local::posting`]: the thread's thread-locals are being destroyed; its poster is gone.
const EXITING: u8 = 2;
/// [`Local::posting`]: `poster` is initialised, and belongs to the parent of a fork.
const STALE: u8 = 3;

/// In a child made by `fork`, on the one thread it has: its poster posts to the parent's queue,
/// to be replaced at the next event.
fn forked_child() {
    let local = local();
    // The child's site table is its own: its sites are interned again.
    local.attr.last_site.set(0);
    if local.posting.get() == POSTER {
        local.posting.set(STALE);
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
std::arch::global_asm!(
    ".pushsection .tbss.egpu_preload_local,\"awT\",@nobits",
    ".globl egpu_preload_local",
    ".hidden egpu_preload_local",
    ".type egpu_preload_local,@object",
    ".size egpu_preload_local,{size}",
    ".p2align 6",
    "egpu_preload_local:",
    ".zero {size}",
    ".popsection",
    size = const size_of::<Local>(),
);

/// The calling thread's [`Local`].
#[inline(always)]
fn local() -> &'static Local {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let p: *const Local;
        // SAFETY: the initial-exec sequence: the thread pointer (`%fs:0`, which the thread's
        // control block holds) plus the block's offset from it, which the loader writes to the
        // GOT. Reads nothing else.
        unsafe {
            std::arch::asm!(
                "mov {p}, qword ptr fs:[0]",
                "add {p}, qword ptr [rip + egpu_preload_local@GOTTPOFF]",
                p = out(reg) p,
                options(pure, readonly, nostack),
            );
        }
        // SAFETY: the thread's own block, all zeros at first (a valid `Local`), alive as long as
        // the thread and used by it alone.
        unsafe { &*p }
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        thread_local! {
            // SAFETY: all zeros is a valid `Local` (false, NO_POSTER, (0, 0), uninitialised).
            static LOCAL: Local = const { unsafe { std::mem::zeroed() } };
        }
        // SAFETY: the thread's own value (without a destructor, so always there), used on this
        // thread only while it runs.
        LOCAL.with(|l| unsafe { &*(l as *const Local) })
    }
}

/// Drops the thread's poster when its thread-locals are destroyed (registered with the first).
struct Owner;

impl Drop for Owner {
    fn drop(&mut self) {
        let local = local();
        if matches!(local.posting.replace(EXITING), POSTER | STALE) {
            // SAFETY: POSTER and STALE say it was initialised, and EXITING that it is never read
            // again.
            unsafe { (*local.poster.get()).assume_init_drop() };
        }
    }
}

impl Local {
    /// The thread's poster, when it has one of its own.
    #[inline(always)]
    fn poster(&self) -> Option<&egpu::host::Poster> {
        // SAFETY: POSTER says it is initialised; only this thread touches it.
        (self.posting.get() == POSTER).then(|| unsafe { (*self.poster.get()).assume_init_ref() })
    }

    /// Queues the event for egpu's worker thread: after the driver's call the caches are cold,
    /// and running the probes here would cost the caller several times more (see
    /// `egpu::host::HostProbes::post`). Called only inside an interposed call (`inside` set),
    /// so never re-entered.
    #[inline(always)]
    fn post<C: egpu::host::HostContext>(&self, probes: &'static HostProbes, phase: Phase, ctx: &C) {
        if let Some(poster) = self.poster() {
            poster.post(phase, ctx);
        } else {
            self.post_without_poster(probes, phase, ctx);
        }
    }

    /// [`post`](Self::post) for a thread without a poster of its own: makes one (the first
    /// time, or after a fork), or posts through the set while the thread exits.
    #[cold]
    #[inline(never)]
    fn post_without_poster<C: egpu::host::HostContext>(
        &self,
        probes: &'static HostProbes,
        phase: Phase,
        ctx: &C,
    ) {
        thread_local! {
            static OWNER: Owner = const { Owner };
        }
        if self.posting.get() == EXITING || OWNER.try_with(|_| ()).is_err() {
            self.posting.set(EXITING);
            return probes.post(phase, ctx);
        }
        let poster = probes.poster();
        if self.posting.replace(POSTER) == STALE {
            // SAFETY: STALE said it was initialised; it is replaced below.
            unsafe { (*self.poster.get()).assume_init_drop() };
        }
        // SAFETY: only this thread touches its poster.
        unsafe { (*self.poster.get()).write(poster) }.post(phase, ctx);
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
            // A function the driver exports under a form's name is that form, whatever version
            // was asked for: the static runtime asks for `cuMemAlloc` at 3020, the version
            // that brought `cuMemAlloc_v2`, and gets the exported `cuMemAlloc_v2`.
            Some(v) => events::by_base(name, v.max(4000), per_thread)
                .find(|e| exported_as(found, e.exact))
                .or_else(|| only_form(name, v, per_thread))
                .or_else(|| graph_form(name, v))
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

/// The CUDA version whose entry points the table knows every form of (13.0).
const KNOWN_VERSION: c_int = 13000;

/// The one entry point `cuGetProcAddress` can mean by base name `name` at `version`, when the
/// table has a single form of it, unversioned, and the version asked for is one the table knows:
/// the driver may hand out a function other than the one it exports under that name (CUDA 13's
/// `cuModuleLoadData`, `cuModuleLoad`, `cuModuleLoadFatBinary`), of the same signature.
fn only_form(name: &[u8], version: c_int, per_thread: bool) -> Option<&'static events::Entry> {
    if version > KNOWN_VERSION {
        return None;
    }
    let mut forms = events::by_base(name, version, per_thread);
    let first = forms.next()?;
    (forms.next().is_none() && first.exact.to_bytes() == name).then_some(first)
}

/// The graph entry point of several forms (a kernel node's, `events::graphs`) that
/// `cuGetProcAddress` means by base name `name` at `version`, as the CUDA headers' versions
/// say, for a version the table knows: a function the driver exports under no name handed out
/// untouched would give an instrumented kernel's node one argument too few.
fn graph_form(name: &[u8], version: c_int) -> Option<&'static events::Entry> {
    if version > KNOWN_VERSION {
        return None;
    }
    events::exact(events::form_at(name, version)?.to_bytes())
}

/// Whether `EGPU_LOG` (a comma-separated list) names `what`: `lookups` prints every lookup of a
/// `cu*` entry point, with whether it was interposed; `modules` every module loaded without the
/// device probes, with why; `mem` why a kernel's registers could not be asked for.
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

/// Marks `bytes` of memory at `addr` far, for `egpu cxl --far marked` (0 bytes: unmarks the
/// range marked at `addr`): 0 when recorded, -1 when this process runs without the far tier's
/// probes (not under `egpu cxl`), -2 when the record could not be written (its ring full). A
/// program finds it with `dlsym(RTLD_DEFAULT, "egpu_cxl_mark")`, so it runs without egpu too.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_cxl_mark(addr: u64, bytes: u64) -> c_int {
    let Some(user) = defaults::user() else { return -1 };
    let Some(ring) = user.map(egpu::host::cxl::ALLOCS_MAP) else { return -1 };
    match ring.output(&egpu::host::cxl::marked_record(addr, bytes)) {
        Ok(()) => 0,
        Err(_) => -2,
    }
}

/// Captures the launch sites of one call in `every` per thread from now on (0: none), as
/// `EGPU_SITES` does at start, for programs that measure what they cost (`benches/launch.rs`):
/// the previous setting, or -1 when the probes could not be set up.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_preload_sites(every: c_int) -> c_int {
    if defaults::probes().is_none() {
        return -1;
    }
    attribution::sites::set_every(every.max(0) as u32) as c_int
}

/// The driver's own `cuLaunchKernel`, which this library's calls (null when not found): what a
/// launch costs without this library, measured in the same process.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_preload_real_launch() -> *mut c_void {
    events::LAUNCH.get().map_or(std::ptr::null_mut(), |f| f as *mut c_void)
}
