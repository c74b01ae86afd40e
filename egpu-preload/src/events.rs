//! Every interposed entry point but the lookups: one event per call, built by [`observe`].
//!
//! Each entry point is the driver's signature, a [`Hook`] for the driver's own function, and the
//! context it makes: launches ([`LaunchCtx`]), copies and sets ([`MemcpyCtx`]), allocations and
//! frees ([`AllocCtx`]), synchronisation ([`SyncCtx`]) and module loads ([`ModuleLoadCtx`]). The
//! per-thread-default-stream forms (`_ptds`, `_ptsz`) are entry points of their own, with the
//! same signature. [`ENTRIES`] lists them for `dlsym` (exact names) and `cuGetProcAddress`
//! (base names, the flavour chosen by its flags).

use std::ffi::{CStr, c_int, c_uint, c_void};
use std::mem::offset_of;
use std::sync::atomic::Ordering;

use egpu::ebpf::{AllocCtx, LaunchCtx, MemcpyCtx, ModuleLoadCtx, Phase, SyncCtx};
use egpu::host::{HostContext, HostProbes};

use crate::real::{Hook, Keep};
use crate::{CuResult, Handle, defaults};

/// `CUdeviceptr`.
type DevicePtr = u64;

/// `CUDA_ERROR_NOT_FOUND`: what a driver without the function amounts to.
const NOT_FOUND: CuResult = 500;

/// A host event's context: where its common fields are.
pub(crate) trait Event: HostContext {
    const TIMESTAMP: usize;
    const DURATION: usize;
    const TID: usize;
    fn timestamp(&mut self) -> &mut u64;
    fn duration(&mut self) -> &mut u64;
    fn tid(&mut self) -> &mut u32;
    fn result(&mut self) -> &mut i32;
}

macro_rules! event {
    ($($t:ty),*) => {$(
        impl Event for $t {
            const TIMESTAMP: usize = offset_of!($t, timestamp_ns);
            const DURATION: usize = offset_of!($t, duration_ns);
            const TID: usize = offset_of!($t, host_tid);
            fn timestamp(&mut self) -> &mut u64 { &mut self.timestamp_ns }
            fn duration(&mut self) -> &mut u64 { &mut self.duration_ns }
            fn tid(&mut self) -> &mut u32 { &mut self.host_tid }
            fn result(&mut self) -> &mut i32 { &mut self.result }
        }
    )*};
}
event!(LaunchCtx, MemcpyCtx, AllocCtx, SyncCtx, ModuleLoadCtx);

/// Runs `call` as one event: the context `build` makes (given the context words the probes
/// read, [`egpu::host::HostProbes::context_words`]), posted before the call; `after` fills what
/// the call produced, and the context is posted again after it. When nothing is attached to the
/// event, or the thread is already inside an interposed call, `call` is all that runs.
///
/// Laid out for a launch right after another: the driver's call leaves the branch predictor
/// cold as well as the caches, and a cold predictor takes each branch as not taken. So in the
/// common case (probes at the entry only, reading neither clock nor thread id) no branch here
/// is taken; the rest is out of line.
pub(crate) fn observe<C: Event>(
    build: impl FnOnce(u16, &crate::Local) -> C,
    call: impl FnOnce() -> CuResult,
    after: impl FnOnce(&mut C, CuResult),
) -> CuResult {
    // Nothing attached, paused, or a call the driver makes inside another interposed call:
    // straight to the driver, before touching any thread-local where it can be.
    let Some(probes) = defaults::active() else { return call() };
    let (enter, exit) = (probes.armed(C::EVENT, Phase::Enter), probes.armed(C::EVENT, Phase::Exit));
    if !enter && !exit {
        rare();
        return call();
    }
    let local = crate::local();
    if local.inside.get() {
        rare();
        return call();
    }
    local.inside.set(true);
    let (ctx, timed) = begin(probes, local, enter, exit, build);
    let result = call();
    if exit {
        finish(probes, local, ctx, result, timed, after);
    }
    local.inside.set(false);
    result
}

/// The first half of an event, before the call (the thread is inside it): the context `build`
/// makes with the fields the probes at its entry and exit read, stamped, and posted to those at
/// its entry. Returns it, and whether it was timed.
#[inline(always)]
fn begin<C: Event>(
    probes: &'static HostProbes,
    local: &crate::Local,
    enter: bool,
    exit: bool,
    build: impl FnOnce(u16, &crate::Local) -> C,
) -> (C, bool) {
    // The fields the probes read, and no more: a clock read or a system call costs more than a
    // probe's run. (Nothing attached at a phase reads nothing.)
    let words =
        probes.context_words(C::EVENT, Phase::Enter) | probes.context_words(C::EVENT, Phase::Exit);
    let reads = |offset: usize| words & (1 << (offset / 8)) != 0;
    let mut ctx = build(words, local);
    let timed = reads(C::TIMESTAMP) | (exit & reads(C::DURATION));
    if timed | reads(C::TID) {
        stamp(&mut ctx, timed, reads(C::TID));
    }
    if enter {
        local.post(probes, Phase::Enter, &ctx);
    }
    (ctx, timed)
}

/// The probes' part of a call entered through a trampoline ([`trampolined`]), before the
/// driver's function, to which the trampoline then jumps: the event posted to the probes at its
/// entry, in the common case. `false` leaves the whole call to [`observe`], having done nothing:
/// when probes are attached to its exit (they wait for the call's result), read the clock or
/// the thread id, or the thread has no poster of its own or no room in its queue.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
fn enter_only<C: Event>(build: impl FnOnce(u16, &crate::Local) -> C) -> bool {
    let Some(probes) = defaults::active() else { return true };
    let (enter, exit) = (probes.armed(C::EVENT, Phase::Enter), probes.armed(C::EVENT, Phase::Exit));
    let local = crate::local();
    if !enter & !exit || local.inside.get() {
        rare();
        return true;
    }
    let words = probes.context_words(C::EVENT, Phase::Enter);
    let stamped = words & (1 << (C::TIMESTAMP / 8) | 1 << (C::TID / 8)) != 0;
    let Some(poster) = local.poster() else { return false };
    if exit | stamped {
        return false;
    }
    local.inside.set(true);
    let posted = poster.post_line(Phase::Enter, || build(words, local));
    local.inside.set(false);
    posted
}

/// Fills the context's timestamp (when `timed`) and thread id (when `tid`).
#[cold]
#[inline(never)]
fn stamp<C: Event>(ctx: &mut C, timed: bool, tid: bool) {
    if timed {
        *ctx.timestamp() = egpu::host::now_ns();
    }
    if tid {
        *ctx.tid() = egpu::host::thread_id();
    }
}

/// After the call, for probes at its exit: what the call produced, the time it took (when
/// `timed`) and its result, posted.
#[cold]
#[inline(never)]
fn finish<C: Event>(
    probes: &'static HostProbes,
    local: &crate::Local,
    mut ctx: C,
    result: CuResult,
    timed: bool,
    after: impl FnOnce(&mut C, CuResult),
) {
    after(&mut ctx, result);
    if timed {
        *ctx.duration() = egpu::host::now_ns().saturating_sub(*ctx.timestamp());
    }
    *ctx.result() = result;
    local.post(probes, Phase::Exit, &ctx);
}

/// Marks the branch that calls it as the rare one, so that the common path runs straight through
/// (see [`observe`]); `std::hint::cold_path` does this from Rust 1.95 on.
#[cold]
#[inline(never)]
fn rare() {
    // Opaque, so that the call is kept, and with it the hint.
    std::hint::black_box(());
}

/// Defines the [`Hook`] named `$hook` for the real function of the entry point `$name`, whose
/// signature takes `$ty`s.
macro_rules! hook {
    ($hook:ident $name:ident ($($ty:ty),*)) => {
        pub(crate) static $hook: Hook<unsafe extern "C" fn($($ty),*) -> CuResult> = Hook::new(
            match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(name) => name,
                Err(_) => panic!("a name without NUL"),
            },
            || $name as *mut c_void,
        );
    };
}

/// Defines one interposed entry point: a [`Hook`] named `$hook` for the real function, and an
/// exported function with the entry point's name and signature, whose body runs with `$real`
/// bound to the real function.
macro_rules! interposed {
    ($hook:ident $name:ident ($($arg:ident : $ty:ty),*) |$real:ident| $body:block) => {
        hook!($hook $name($($ty),*));

        #[doc = concat!("The driver's `", stringify!($name), "`, interposed.")]
        ///
        /// # Safety
        ///
        /// As the driver's.
        #[unsafe(no_mangle)]
        pub(crate) unsafe extern "C" fn $name($($arg: $ty),*) -> CuResult {
            let Some($real) = $hook.get() else { return NOT_FOUND };
            $body
        }
    };
}

/// Defines interposed entry points that make one event of each call ([`observe`]): the CUDA
/// runtime's (`runtime;`), which call the driver's, and the driver's own (`driver;`), which call
/// no other interposed function and so, on x86-64 Linux, are entered through a trampoline
/// ([`trampolined`]).
macro_rules! entries {
    (runtime; $(
        $hook:ident $name:ident ($($arg:ident : $ty:ty),* $(,)?)
            => $build:expr, $after:expr;
    )*) => {$(
        interposed!($hook $name($($arg: $ty),*) |real| {
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let call = move || unsafe { real($($arg),*) };
            observe($build, call, $after)
        });
    )*};
    (driver; $(
        $hook:ident $name:ident ($($arg:ident : $ty:ty),* $(,)?)
            => $build:expr, $after:expr;
    )*) => {$(
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        entries!(runtime; $hook $name($($arg: $ty),*) => $build, $after;);
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        trampolined!($hook $name($($arg: $ty),*) => $build, $after);
    )*};
}

/// Defines an interposed entry point of the driver entered through a trampoline: the exported
/// function is a few instructions of assembly that jump to the driver's function (the real one,
/// `$hook`'s) with the caller's registers and stack untouched, so that the driver returns
/// straight to the caller. When the probes are paused that is all it does. When they run, it
/// first calls `$name::enter` with the argument registers it saved, which lets a call from the
/// driver's own code through and posts the event to the probes at its entry ([`enter_only`]),
/// and restores them. What it does not handle (the probes not set up yet, a fork, probes at the
/// call's exit, a real function not found yet) it leaves to `$name::full`, the entry point as
/// [`entries`] makes it for the runtime, to which it jumps instead.
///
/// What a call costs here is mostly cache lines, cold after the driver's previous call: so the
/// trampoline is one line of code (its way to the driver, up to `jmp rax`, within 64 bytes, and
/// each trampoline 64-byte aligned), reads the hook's line and [`defaults::HOT`]'s, and neither
/// copies the arguments nor calls the driver itself (a C function cannot hand its caller's stack
/// arguments on without copying them).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
macro_rules! trampolined {
    ($hook:ident $name:ident ($($arg:ident : $ty:ty),*) => $build:expr, $after:expr) => {
        hook!($hook $name($($ty),*));

        /// The Rust half of the entry point's trampoline.
        mod $name {
            use super::*;

            /// The words of the save area that hold the arguments (see [`Saved`]).
            const SAVED: usize = match <[&str]>::len(&[$(stringify!($arg)),*]) {
                n if n > 6 => n + 2,
                _ => 8,
            };

            /// The whole call as one event, where the trampoline does not handle it.
            ///
            /// # Safety
            ///
            /// As the driver's function.
            pub(super) unsafe extern "C" fn full($($arg: $ty),*) -> CuResult {
                let Some(real) = $hook.get() else { return NOT_FOUND };
                // SAFETY: the driver's function, with the caller's arguments unchanged.
                let call = move || unsafe { real($($arg),*) };
                observe($build, call, $after)
            }

            /// The event posted before the call ([`enter_only`]), from the arguments as the
            /// trampoline saved them.
            ///
            /// # Safety
            ///
            /// `saved` is the trampoline's save area, as [`Saved`] describes it.
            #[allow(unused_variables, unused_mut)] // arguments the event does not read, or none
            pub(super) unsafe extern "C" fn enter(saved: &[u64; SAVED]) -> bool {
                let mut saved = Saved { at: saved, next: 0 };
                // A call from the driver's own code: the driver calling itself, part of the
                // call the program made, which is its event.
                if $hook.holds_code_at(saved.return_address()) {
                    rare();
                    return true;
                }
                $(let $arg: $ty = saved.take();)*
                enter_only($build)
            }
        }

        #[doc = concat!("The driver's `", stringify!($name), "`, interposed.")]
        ///
        /// # Safety
        ///
        /// As the driver's.
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        #[unsafe(link_section = ".text.egpu_trampolines")]
        pub(crate) unsafe extern "C" fn $name($($arg: $ty),*) -> CuResult {
            std::arch::naked_asm!(
                ".cfi_startproc",
                // The real function, and the gate.
                "mov rax, qword ptr [rip + {hook} + {real}]",
                "movzx r11d, byte ptr [rip + {hot} + {gate}]",
                "test rax, rax",
                "jz 2f",
                // Paused: straight to the driver.
                "cmp r11d, {paused}",
                "je 3f",
                "cmp r11d, {ready}",
                "jne 2f",
                // Probes running: the argument registers and the real function saved (which
                // leaves the stack aligned for a call), `enter` called with their address.
                "push rax", ".cfi_adjust_cfa_offset 8",
                "push r9", ".cfi_adjust_cfa_offset 8",
                "push r8", ".cfi_adjust_cfa_offset 8",
                "push rcx", ".cfi_adjust_cfa_offset 8",
                "push rdx", ".cfi_adjust_cfa_offset 8",
                "push rsi", ".cfi_adjust_cfa_offset 8",
                "push rdi", ".cfi_adjust_cfa_offset 8",
                "mov rdi, rsp",
                "call {enter}",
                "test al, al",
                "pop rdi", ".cfi_adjust_cfa_offset -8",
                "pop rsi", ".cfi_adjust_cfa_offset -8",
                "pop rdx", ".cfi_adjust_cfa_offset -8",
                "pop rcx", ".cfi_adjust_cfa_offset -8",
                "pop r8", ".cfi_adjust_cfa_offset -8",
                "pop r9", ".cfi_adjust_cfa_offset -8",
                "pop rax", ".cfi_adjust_cfa_offset -8",
                "jz 2f",
                "3:",
                "jmp rax",
                // Anything else: the whole way.
                "2:",
                "jmp {full}",
                ".cfi_endproc",
                // The next trampoline on a line of its own: each one's way to the driver, up
                // to its `jmp rax`, fits in its first 64 bytes.
                ".p2align 6",
                hook = sym $hook,
                real = const Hook::<()>::REAL,
                hot = sym defaults::HOT,
                gate = const defaults::Hot::GATE,
                ready = const defaults::READY,
                paused = const defaults::READY | defaults::PAUSED,
                enter = sym $name::enter,
                full = sym $name::full,
            )
        }
    };
}

/// The arguments of a call as a trampoline ([`trampolined`]) saved them: the six argument
/// registers in order, the real function, the return address, then the caller's stack
/// arguments, one 8-byte word each (the System V ABI's, for arguments of integer class).
/// (`N` words: as far as the entry point's arguments reach.)
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
struct Saved<'a, const N: usize> {
    at: &'a [u64; N],
    next: usize,
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
impl<const N: usize> Saved<'_, N> {
    /// Where the trampoline returns to: the caller.
    #[inline(always)]
    fn return_address(&self) -> usize {
        self.at[7] as usize
    }

    /// The next argument, as a `T` (its type).
    #[inline(always)]
    fn take<T: Word>(&mut self) -> T {
        let slot = if self.next < 6 { self.next } else { self.next + 2 };
        self.next += 1;
        T::from_word(self.at[slot])
    }
}

/// An argument of integer class, passed in one word (of which it reads the low bits only: the
/// rest is undefined).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
trait Word {
    fn from_word(word: u64) -> Self;
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
macro_rules! words {
    ($($t:ty),*) => {$(
        impl Word for $t {
            #[inline(always)]
            fn from_word(word: u64) -> $t {
                word as $t
            }
        }
    )*};
}
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
words!(u8, u16, u32, i32, u64, usize);

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
impl<T> Word for *mut T {
    #[inline(always)]
    fn from_word(word: u64) -> *mut T {
        word as usize as *mut T
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
impl<T> Word for *const T {
    #[inline(always)]
    fn from_word(word: u64) -> *const T {
        word as usize as *const T
    }
}

fn copy(dst: u64, src: u64, bytes: u64, stream: Handle, kind: u32, flags: u32) -> MemcpyCtx {
    let kind = if kind == MemcpyCtx::DEFAULT { direction(dst, src) } else { kind };
    MemcpyCtx { dst, src, bytes, stream: stream as u64, kind, flags, ..MemcpyCtx::default() }
}

fn set(dst: u64, bytes: u64, stream: Handle, flags: u32) -> MemcpyCtx {
    let flags = flags | MemcpyCtx::MEMSET;
    MemcpyCtx { dst, bytes, stream: stream as u64, flags, ..MemcpyCtx::default() }
}

/// `cuPointerGetAttribute`'s signature.
type PointerAttributeFn = unsafe extern "C" fn(*mut c_void, c_int, DevicePtr) -> CuResult;
static POINTER_ATTRIBUTE: Hook<PointerAttributeFn> =
    Hook::new(c"cuPointerGetAttribute", std::ptr::null_mut);

/// The direction of a copy between unified addresses (`cuMemcpy`, `cudaMemcpyDefault`), from
/// where the driver says each side lives: memory it does not know is the host's (pageable).
fn direction(dst: u64, src: u64) -> u32 {
    /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`, and the `CU_MEMORYTYPE_HOST` it answers.
    const MEMORY_TYPE: c_int = 2;
    const HOST: u32 = 1;
    let Some(attribute) = POINTER_ATTRIBUTE.get_or_ask() else { return MemcpyCtx::DEFAULT };
    let on_device = |p: u64| {
        let mut kind: u32 = HOST;
        // SAFETY: the driver's function, writing one `CUmemorytype` to `kind`.
        let known = unsafe { attribute((&raw mut kind).cast(), MEMORY_TYPE, p) } == 0;
        known && kind != HOST
    };
    match (on_device(dst), on_device(src)) {
        (true, true) => MemcpyCtx::DEVICE_TO_DEVICE,
        (true, false) => MemcpyCtx::HOST_TO_DEVICE,
        (false, true) => MemcpyCtx::DEVICE_TO_HOST,
        (false, false) => MemcpyCtx::HOST_TO_HOST,
    }
}

/// A copy through the runtime: `cudaMemcpyKind` (0 host to host … 4 default) as egpu's kind.
fn runtime_copy(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: c_int,
    stream: Handle,
    flags: u32,
) -> MemcpyCtx {
    let kind = match kind {
        0 => MemcpyCtx::HOST_TO_HOST,
        1 => MemcpyCtx::HOST_TO_DEVICE,
        2 => MemcpyCtx::DEVICE_TO_HOST,
        3 => MemcpyCtx::DEVICE_TO_DEVICE,
        _ => MemcpyCtx::DEFAULT,
    };
    copy(dst as u64, src as u64, bytes as u64, stream, kind, flags)
}

/// `cudaPitchedPtr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct PitchedPtr {
    ptr: *mut c_void,
    pitch: usize,
    xsize: usize,
    ysize: usize,
}

/// `cudaExtent`: width (in bytes for linear memory), height, depth.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Extent {
    width: usize,
    height: usize,
    depth: usize,
}

/// `cudaMemcpy3DParms`'s fields egpu reads.
#[repr(C)]
pub(crate) struct Copy3d {
    src_array: *mut c_void,
    src_pos: [usize; 3],
    src: PitchedPtr,
    dst_array: *mut c_void,
    dst_pos: [usize; 3],
    dst: PitchedPtr,
    extent: Extent,
    kind: c_int,
}

fn runtime_copy_3d(p: *const Copy3d, stream: Handle, flags: u32) -> MemcpyCtx {
    if p.is_null() {
        return MemcpyCtx::default();
    }
    // SAFETY: the caller's parameters, which the runtime reads too.
    let p = unsafe { &*p };
    let e = p.extent;
    let bytes = e.width * e.height.max(1) * e.depth.max(1);
    runtime_copy(p.dst.ptr, p.src.ptr, bytes, p.kind, stream, flags)
}

/// `CUDA_MEMCPY2D`'s fields egpu reads: the memory types (1 host, 2 device, 3 array,
/// 4 unified) and addresses of each side, and the width in bytes and height.
#[repr(C)]
pub(crate) struct Copy2dDriver {
    src_x: usize,
    src_y: usize,
    src_type: c_int,
    src_host: *const c_void,
    src_device: DevicePtr,
    src_array: *mut c_void,
    src_pitch: usize,
    dst_x: usize,
    dst_y: usize,
    dst_type: c_int,
    dst_host: *mut c_void,
    dst_device: DevicePtr,
    dst_array: *mut c_void,
    dst_pitch: usize,
    width: usize,
    height: usize,
}

fn driver_copy_2d(p: *const Copy2dDriver, stream: Handle, flags: u32) -> MemcpyCtx {
    if p.is_null() {
        return MemcpyCtx::default();
    }
    // SAFETY: the caller's parameters, which the driver reads too.
    let p = unsafe { &*p };
    let side = |kind: c_int, host: u64, device: u64| match kind {
        1 => (false, host),
        4 => (true, device),
        _ => (true, device),
    };
    let (dst_dev, dst) = side(p.dst_type, p.dst_host as u64, p.dst_device);
    let (src_dev, src) = side(p.src_type, p.src_host as u64, p.src_device);
    let kind = match (dst_dev, src_dev) {
        _ if p.dst_type == 4 || p.src_type == 4 => MemcpyCtx::DEFAULT,
        (true, true) => MemcpyCtx::DEVICE_TO_DEVICE,
        (true, false) => MemcpyCtx::HOST_TO_DEVICE,
        (false, true) => MemcpyCtx::DEVICE_TO_HOST,
        (false, false) => MemcpyCtx::HOST_TO_HOST,
    };
    copy(dst, src, (p.width * p.height) as u64, stream, kind, flags)
}

/// `CUDA_MEMCPY3D`'s fields egpu reads (as [`Copy2dDriver`], with depth).
#[repr(C)]
pub(crate) struct Copy3dDriver {
    src_x: usize,
    src_y: usize,
    src_z: usize,
    src_lod: usize,
    src_type: c_int,
    src_host: *const c_void,
    src_device: DevicePtr,
    src_array: *mut c_void,
    reserved0: *mut c_void,
    src_pitch: usize,
    src_height: usize,
    dst_x: usize,
    dst_y: usize,
    dst_z: usize,
    dst_lod: usize,
    dst_type: c_int,
    dst_host: *mut c_void,
    dst_device: DevicePtr,
    dst_array: *mut c_void,
    reserved1: *mut c_void,
    dst_pitch: usize,
    dst_height: usize,
    width: usize,
    height: usize,
    depth: usize,
}

fn driver_copy_3d(p: *const Copy3dDriver, stream: Handle, flags: u32) -> MemcpyCtx {
    if p.is_null() {
        return MemcpyCtx::default();
    }
    // SAFETY: the caller's parameters, which the driver reads too.
    let p = unsafe { &*p };
    let flat = Copy2dDriver {
        src_x: 0,
        src_y: 0,
        src_type: p.src_type,
        src_host: p.src_host,
        src_device: p.src_device,
        src_array: p.src_array,
        src_pitch: p.src_pitch,
        dst_x: 0,
        dst_y: 0,
        dst_type: p.dst_type,
        dst_host: p.dst_host,
        dst_device: p.dst_device,
        dst_array: p.dst_array,
        dst_pitch: p.dst_pitch,
        width: p.width,
        height: p.height * p.depth.max(1),
    };
    driver_copy_2d(&flat, stream, flags)
}

// Launches captured into graphs are not run when launched: `defaults::HOT.captures` counts the
// stream captures begun and not yet ended in this process. While there are none, a launch need
// not ask the driver whether its stream is capturing.

/// `cuStreamIsCapturing`'s signature.
type IsCapturingFn = unsafe extern "C" fn(Handle, *mut c_int) -> CuResult;
static IS_CAPTURING: Hook<IsCapturingFn> = Hook::new(c"cuStreamIsCapturing", std::ptr::null_mut);

/// [`LaunchCtx::CAPTURED`] when `stream` is capturing.
#[inline(always)]
fn captured(stream: Handle) -> u32 {
    if defaults::HOT.captures.load(Ordering::Relaxed) <= 0 { 0 } else { ask_captured(stream) }
}

#[cold]
#[inline(never)]
fn ask_captured(stream: Handle) -> u32 {
    /// `CU_STREAM_CAPTURE_STATUS_ACTIVE`.
    const ACTIVE: c_int = 1;
    let Some(is_capturing) = IS_CAPTURING.get_or_ask() else { return 0 };
    let mut status = 0;
    // SAFETY: the driver's function, writing one status.
    let asked = unsafe { is_capturing(stream, &mut status) };
    if asked == 0 && status == ACTIVE { LaunchCtx::CAPTURED } else { 0 }
}

/// Defines entry points that begin (`+1`) or end (`-1`) a stream capture: counted in
/// `defaults::HOT.captures`, no event.
macro_rules! captures {
    ($($hook:ident $name:ident ($($arg:ident : $ty:ty),* $(,)?) => $delta:expr;)*) => {$(
        interposed!($hook $name($($arg: $ty),*) |real| {
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let result = unsafe { real($($arg),*) };
            let delta: i64 = $delta;
            // An end counts even when it fails (an invalidated capture ends too); the count is
            // a hint, the driver's answer in `captured` is what counts.
            if result == 0 || delta < 0 {
                let _ = defaults::HOT.captures.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    Some((n + delta).max(0))
                });
            }
            result
        });
    )*};
}

captures! {
    BEGIN_CAPTURE cuStreamBeginCapture(stream: Handle) => 1;
    BEGIN_CAPTURE_PTSZ cuStreamBeginCapture_ptsz(stream: Handle) => 1;
    BEGIN_CAPTURE_V2 cuStreamBeginCapture_v2(stream: Handle, mode: c_int) => 1;
    BEGIN_CAPTURE_V2_PTSZ cuStreamBeginCapture_v2_ptsz(stream: Handle, mode: c_int) => 1;
    BEGIN_CAPTURE_TO_GRAPH cuStreamBeginCaptureToGraph(stream: Handle, graph: Handle, dependencies: *const Handle, data: *const c_void, n: usize, mode: c_int) => 1;
    BEGIN_CAPTURE_TO_GRAPH_PTSZ cuStreamBeginCaptureToGraph_ptsz(stream: Handle, graph: Handle, dependencies: *const Handle, data: *const c_void, n: usize, mode: c_int) => 1;
    END_CAPTURE cuStreamEndCapture(stream: Handle, graph: *mut Handle) => -1;
    END_CAPTURE_PTSZ cuStreamEndCapture_ptsz(stream: Handle, graph: *mut Handle) => -1;
}

fn alloc(bytes: usize, kind: u32) -> AllocCtx {
    AllocCtx { bytes: bytes as u64, kind, op: AllocCtx::ALLOC, ..AllocCtx::default() }
}

fn free(ptr: u64, kind: u32) -> AllocCtx {
    AllocCtx { ptr, kind, op: AllocCtx::FREE, ..AllocCtx::default() }
}

fn sync(handle: Handle, kind: u32) -> SyncCtx {
    SyncCtx { handle: handle as u64, kind, ..SyncCtx::default() }
}

/// After an allocation: the address it wrote to `out`.
fn allocated<P: Copy + Into<u64>>(out: *mut P) -> impl FnOnce(&mut AllocCtx, CuResult) {
    move |ctx, result| {
        if result == 0 && !out.is_null() {
            // SAFETY: the driver wrote the address to the caller's pointer.
            ctx.ptr = unsafe { out.read() }.into();
        }
    }
}

/// `*mut c_void` as an address, for [`allocated`].
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct HostPtr(*mut c_void);

impl From<HostPtr> for u64 {
    fn from(p: HostPtr) -> u64 {
        p.0 as u64
    }
}

/// A module load: whether the image carries PTX egpu could instrument (PTX text, or a cubin that
/// keeps its PTX), and the PTX's size.
fn module(image: *const c_void) -> ModuleLoadCtx {
    module_with(ptx(image).ok().flatten().as_deref())
}

fn module_with(ptx: Option<&str>) -> ModuleLoadCtx {
    let mut ctx = ModuleLoadCtx::default();
    if let Some(ptx) = ptx {
        ctx.image_bytes = ptx.len() as u64;
        ctx.has_ptx = 1;
    }
    ctx
}

/// The PTX of the caller's module image (see [`crate::device::ptx_of`]).
fn ptx(image: *const c_void) -> Result<Option<String>, String> {
    if image.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's image, which the driver is about to read.
    unsafe { crate::device::ptx_of(image) }
}

/// After a module load: the handle it wrote to `out`.
fn loaded(out: *mut Handle) -> impl FnOnce(&mut ModuleLoadCtx, CuResult) {
    move |ctx, result| {
        if result == 0 && !out.is_null() {
            // SAFETY: the driver wrote the handle to the caller's pointer.
            ctx.module = unsafe { out.read() } as u64;
        }
    }
}

fn nothing<C>(_: &mut C, _: CuResult) {}

/// `CUlaunchConfig`'s fields egpu reads.
#[repr(C)]
pub(crate) struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem_bytes: c_uint,
    stream: Handle,
}

/// The context of a launch of `f` (its kernel id only when the probes read it: `words` bit 0).
pub(crate) fn launch_ctx(
    words: u16,
    local: &crate::Local,
    f: Handle,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    stream: Handle,
) -> LaunchCtx {
    let mut ctx = LaunchCtx {
        function: f as u64,
        stream: stream as u64,
        grid,
        block,
        shared_mem_bytes,
        flags: captured(stream),
        ..LaunchCtx::default()
    };
    ctx.kernel_id = if words & 1 != 0 {
        kernel_id(local, f)
    } else {
        rare();
        0
    };
    ctx
}

/// The kernel id of `f`, remembered for the thread's last function (most loops launch one).
#[inline(always)]
fn kernel_id(local: &crate::Local, f: Handle) -> u64 {
    match local.last.get() {
        (last, id) if last == f as usize && last != 0 => id,
        _ => new_kernel_id(local, f),
    }
}

#[cold]
#[inline(never)]
fn new_kernel_id(local: &crate::Local, f: Handle) -> u64 {
    let id = defaults::kernel_id(f);
    local.last.set((f as usize, id));
    id
}

fn launch_ex(
    words: u16,
    local: &crate::Local,
    config: *const LaunchConfig,
    f: Handle,
) -> LaunchCtx {
    if config.is_null() {
        return launch_ctx(words, local, f, [0; 3], [0; 3], 0, std::ptr::null_mut());
    }
    // SAFETY: the caller's launch configuration, which the driver reads too.
    let c = unsafe { &*config };
    launch_ctx(words, local, f, c.grid, c.block, c.shared_mem_bytes, c.stream)
}

/// A graph launch: no one kernel, so the id is `u64::MAX`.
fn graph(stream: Handle) -> LaunchCtx {
    let (stream, flags) = (stream as u64, LaunchCtx::GRAPH);
    LaunchCtx { kernel_id: u64::MAX, stream, flags, ..LaunchCtx::default() }
}

use MemcpyCtx as M;
const ASYNC: u32 = MemcpyCtx::ASYNC;

entries! {
    driver;
    LAUNCH cuLaunchKernel(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Handle, params: *mut *mut c_void, extra: *mut *mut c_void)
        => |n, l| launch_ctx(n, l, f, [gx, gy, gz], [bx, by, bz], shared, stream), nothing;
    LAUNCH_PTSZ cuLaunchKernel_ptsz(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Handle, params: *mut *mut c_void, extra: *mut *mut c_void)
        => |n, l| launch_ctx(n, l, f, [gx, gy, gz], [bx, by, bz], shared, stream), nothing;
    LAUNCH_EX cuLaunchKernelEx(config: *const LaunchConfig, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void)
        => |n, l| launch_ex(n, l, config, f), nothing;
    LAUNCH_EX_PTSZ cuLaunchKernelEx_ptsz(config: *const LaunchConfig, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void)
        => |n, l| launch_ex(n, l, config, f), nothing;
    GRAPH_LAUNCH cuGraphLaunch(exec: Handle, stream: Handle) => |_, _| graph(stream), nothing;
    GRAPH_LAUNCH_PTSZ cuGraphLaunch_ptsz(exec: Handle, stream: Handle) => |_, _| graph(stream), nothing;

    MEMCPY cuMemcpy(dst: DevicePtr, src: DevicePtr, bytes: usize)
        => |_, _| copy(dst, src, bytes as u64, std::ptr::null_mut(), M::DEFAULT, 0), nothing;
    MEMCPY_PTDS cuMemcpy_ptds(dst: DevicePtr, src: DevicePtr, bytes: usize)
        => |_, _| copy(dst, src, bytes as u64, std::ptr::null_mut(), M::DEFAULT, 0), nothing;
    MEMCPY_ASYNC cuMemcpyAsync(dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Handle)
        => |_, _| copy(dst, src, bytes as u64, stream, M::DEFAULT, ASYNC), nothing;
    MEMCPY_ASYNC_PTSZ cuMemcpyAsync_ptsz(dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Handle)
        => |_, _| copy(dst, src, bytes as u64, stream, M::DEFAULT, ASYNC), nothing;
    HTOD cuMemcpyHtoD_v2(dst: DevicePtr, src: *const c_void, bytes: usize)
        => |_, _| copy(dst, src as u64, bytes as u64, std::ptr::null_mut(), M::HOST_TO_DEVICE, 0), nothing;
    HTOD_PTDS cuMemcpyHtoD_v2_ptds(dst: DevicePtr, src: *const c_void, bytes: usize)
        => |_, _| copy(dst, src as u64, bytes as u64, std::ptr::null_mut(), M::HOST_TO_DEVICE, 0), nothing;
    DTOH cuMemcpyDtoH_v2(dst: *mut c_void, src: DevicePtr, bytes: usize)
        => |_, _| copy(dst as u64, src, bytes as u64, std::ptr::null_mut(), M::DEVICE_TO_HOST, 0), nothing;
    DTOH_PTDS cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: DevicePtr, bytes: usize)
        => |_, _| copy(dst as u64, src, bytes as u64, std::ptr::null_mut(), M::DEVICE_TO_HOST, 0), nothing;
    DTOD cuMemcpyDtoD_v2(dst: DevicePtr, src: DevicePtr, bytes: usize)
        => |_, _| copy(dst, src, bytes as u64, std::ptr::null_mut(), M::DEVICE_TO_DEVICE, 0), nothing;
    DTOD_PTDS cuMemcpyDtoD_v2_ptds(dst: DevicePtr, src: DevicePtr, bytes: usize)
        => |_, _| copy(dst, src, bytes as u64, std::ptr::null_mut(), M::DEVICE_TO_DEVICE, 0), nothing;
    HTOD_ASYNC cuMemcpyHtoDAsync_v2(dst: DevicePtr, src: *const c_void, bytes: usize, stream: Handle)
        => |_, _| copy(dst, src as u64, bytes as u64, stream, M::HOST_TO_DEVICE, ASYNC), nothing;
    HTOD_ASYNC_PTSZ cuMemcpyHtoDAsync_v2_ptsz(dst: DevicePtr, src: *const c_void, bytes: usize, stream: Handle)
        => |_, _| copy(dst, src as u64, bytes as u64, stream, M::HOST_TO_DEVICE, ASYNC), nothing;
    DTOH_ASYNC cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: DevicePtr, bytes: usize, stream: Handle)
        => |_, _| copy(dst as u64, src, bytes as u64, stream, M::DEVICE_TO_HOST, ASYNC), nothing;
    DTOH_ASYNC_PTSZ cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: DevicePtr, bytes: usize, stream: Handle)
        => |_, _| copy(dst as u64, src, bytes as u64, stream, M::DEVICE_TO_HOST, ASYNC), nothing;
    DTOD_ASYNC cuMemcpyDtoDAsync_v2(dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Handle)
        => |_, _| copy(dst, src, bytes as u64, stream, M::DEVICE_TO_DEVICE, ASYNC), nothing;
    DTOD_ASYNC_PTSZ cuMemcpyDtoDAsync_v2_ptsz(dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Handle)
        => |_, _| copy(dst, src, bytes as u64, stream, M::DEVICE_TO_DEVICE, ASYNC), nothing;
    PEER cuMemcpyPeer(dst: DevicePtr, dst_ctx: Handle, src: DevicePtr, src_ctx: Handle, bytes: usize)
        => |_, _| copy(dst, src, bytes as u64, std::ptr::null_mut(), M::PEER, 0), nothing;
    PEER_PTDS cuMemcpyPeer_ptds(dst: DevicePtr, dst_ctx: Handle, src: DevicePtr, src_ctx: Handle, bytes: usize)
        => |_, _| copy(dst, src, bytes as u64, std::ptr::null_mut(), M::PEER, 0), nothing;
    PEER_ASYNC cuMemcpyPeerAsync(dst: DevicePtr, dst_ctx: Handle, src: DevicePtr, src_ctx: Handle, bytes: usize, stream: Handle)
        => |_, _| copy(dst, src, bytes as u64, stream, M::PEER, ASYNC), nothing;
    PEER_ASYNC_PTSZ cuMemcpyPeerAsync_ptsz(dst: DevicePtr, dst_ctx: Handle, src: DevicePtr, src_ctx: Handle, bytes: usize, stream: Handle)
        => |_, _| copy(dst, src, bytes as u64, stream, M::PEER, ASYNC), nothing;

    SET8 cuMemsetD8_v2(dst: DevicePtr, value: u8, n: usize)
        => |_, _| set(dst, n as u64, std::ptr::null_mut(), 0), nothing;
    SET8_PTDS cuMemsetD8_v2_ptds(dst: DevicePtr, value: u8, n: usize)
        => |_, _| set(dst, n as u64, std::ptr::null_mut(), 0), nothing;
    SET16 cuMemsetD16_v2(dst: DevicePtr, value: u16, n: usize)
        => |_, _| set(dst, 2 * n as u64, std::ptr::null_mut(), 0), nothing;
    SET16_PTDS cuMemsetD16_v2_ptds(dst: DevicePtr, value: u16, n: usize)
        => |_, _| set(dst, 2 * n as u64, std::ptr::null_mut(), 0), nothing;
    SET32 cuMemsetD32_v2(dst: DevicePtr, value: c_uint, n: usize)
        => |_, _| set(dst, 4 * n as u64, std::ptr::null_mut(), 0), nothing;
    SET32_PTDS cuMemsetD32_v2_ptds(dst: DevicePtr, value: c_uint, n: usize)
        => |_, _| set(dst, 4 * n as u64, std::ptr::null_mut(), 0), nothing;
    SET8_ASYNC cuMemsetD8Async(dst: DevicePtr, value: u8, n: usize, stream: Handle)
        => |_, _| set(dst, n as u64, stream, ASYNC), nothing;
    SET8_ASYNC_PTSZ cuMemsetD8Async_ptsz(dst: DevicePtr, value: u8, n: usize, stream: Handle)
        => |_, _| set(dst, n as u64, stream, ASYNC), nothing;
    SET16_ASYNC cuMemsetD16Async(dst: DevicePtr, value: u16, n: usize, stream: Handle)
        => |_, _| set(dst, 2 * n as u64, stream, ASYNC), nothing;
    SET16_ASYNC_PTSZ cuMemsetD16Async_ptsz(dst: DevicePtr, value: u16, n: usize, stream: Handle)
        => |_, _| set(dst, 2 * n as u64, stream, ASYNC), nothing;
    SET32_ASYNC cuMemsetD32Async(dst: DevicePtr, value: c_uint, n: usize, stream: Handle)
        => |_, _| set(dst, 4 * n as u64, stream, ASYNC), nothing;
    SET32_ASYNC_PTSZ cuMemsetD32Async_ptsz(dst: DevicePtr, value: c_uint, n: usize, stream: Handle)
        => |_, _| set(dst, 4 * n as u64, stream, ASYNC), nothing;

    COPY_2D cuMemcpy2D_v2(p: *const Copy2dDriver) => |_, _| driver_copy_2d(p, std::ptr::null_mut(), 0), nothing;
    COPY_2D_PTDS cuMemcpy2D_v2_ptds(p: *const Copy2dDriver) => |_, _| driver_copy_2d(p, std::ptr::null_mut(), 0), nothing;
    COPY_2D_UNALIGNED cuMemcpy2DUnaligned_v2(p: *const Copy2dDriver) => |_, _| driver_copy_2d(p, std::ptr::null_mut(), 0), nothing;
    COPY_2D_UNALIGNED_PTDS cuMemcpy2DUnaligned_v2_ptds(p: *const Copy2dDriver) => |_, _| driver_copy_2d(p, std::ptr::null_mut(), 0), nothing;
    COPY_2D_ASYNC cuMemcpy2DAsync_v2(p: *const Copy2dDriver, stream: Handle) => |_, _| driver_copy_2d(p, stream, ASYNC), nothing;
    COPY_2D_ASYNC_PTSZ cuMemcpy2DAsync_v2_ptsz(p: *const Copy2dDriver, stream: Handle) => |_, _| driver_copy_2d(p, stream, ASYNC), nothing;
    COPY_3D cuMemcpy3D_v2(p: *const Copy3dDriver) => |_, _| driver_copy_3d(p, std::ptr::null_mut(), 0), nothing;
    COPY_3D_PTDS cuMemcpy3D_v2_ptds(p: *const Copy3dDriver) => |_, _| driver_copy_3d(p, std::ptr::null_mut(), 0), nothing;
    COPY_3D_ASYNC cuMemcpy3DAsync_v2(p: *const Copy3dDriver, stream: Handle) => |_, _| driver_copy_3d(p, stream, ASYNC), nothing;
    COPY_3D_ASYNC_PTSZ cuMemcpy3DAsync_v2_ptsz(p: *const Copy3dDriver, stream: Handle) => |_, _| driver_copy_3d(p, stream, ASYNC), nothing;
    SET_2D8 cuMemsetD2D8_v2(dst: DevicePtr, pitch: usize, value: u8, width: usize, height: usize)
        => |_, _| set(dst, (width * height) as u64, std::ptr::null_mut(), 0), nothing;
    SET_2D8_PTDS cuMemsetD2D8_v2_ptds(dst: DevicePtr, pitch: usize, value: u8, width: usize, height: usize)
        => |_, _| set(dst, (width * height) as u64, std::ptr::null_mut(), 0), nothing;
    SET_2D16 cuMemsetD2D16_v2(dst: DevicePtr, pitch: usize, value: u16, width: usize, height: usize)
        => |_, _| set(dst, (2 * width * height) as u64, std::ptr::null_mut(), 0), nothing;
    SET_2D16_PTDS cuMemsetD2D16_v2_ptds(dst: DevicePtr, pitch: usize, value: u16, width: usize, height: usize)
        => |_, _| set(dst, (2 * width * height) as u64, std::ptr::null_mut(), 0), nothing;
    SET_2D32 cuMemsetD2D32_v2(dst: DevicePtr, pitch: usize, value: c_uint, width: usize, height: usize)
        => |_, _| set(dst, (4 * width * height) as u64, std::ptr::null_mut(), 0), nothing;
    SET_2D32_PTDS cuMemsetD2D32_v2_ptds(dst: DevicePtr, pitch: usize, value: c_uint, width: usize, height: usize)
        => |_, _| set(dst, (4 * width * height) as u64, std::ptr::null_mut(), 0), nothing;
    SET_2D8_ASYNC cuMemsetD2D8Async(dst: DevicePtr, pitch: usize, value: u8, width: usize, height: usize, stream: Handle)
        => |_, _| set(dst, (width * height) as u64, stream, ASYNC), nothing;
    SET_2D8_ASYNC_PTSZ cuMemsetD2D8Async_ptsz(dst: DevicePtr, pitch: usize, value: u8, width: usize, height: usize, stream: Handle)
        => |_, _| set(dst, (width * height) as u64, stream, ASYNC), nothing;
    SET_2D16_ASYNC cuMemsetD2D16Async(dst: DevicePtr, pitch: usize, value: u16, width: usize, height: usize, stream: Handle)
        => |_, _| set(dst, (2 * width * height) as u64, stream, ASYNC), nothing;
    SET_2D16_ASYNC_PTSZ cuMemsetD2D16Async_ptsz(dst: DevicePtr, pitch: usize, value: u16, width: usize, height: usize, stream: Handle)
        => |_, _| set(dst, (2 * width * height) as u64, stream, ASYNC), nothing;
    SET_2D32_ASYNC cuMemsetD2D32Async(dst: DevicePtr, pitch: usize, value: c_uint, width: usize, height: usize, stream: Handle)
        => |_, _| set(dst, (4 * width * height) as u64, stream, ASYNC), nothing;
    SET_2D32_ASYNC_PTSZ cuMemsetD2D32Async_ptsz(dst: DevicePtr, pitch: usize, value: c_uint, width: usize, height: usize, stream: Handle)
        => |_, _| set(dst, (4 * width * height) as u64, stream, ASYNC), nothing;

    ALLOC cuMemAlloc_v2(out: *mut DevicePtr, bytes: usize)
        => |_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out);
    ALLOC_PITCH cuMemAllocPitch_v2(out: *mut DevicePtr, pitch: *mut usize, width: usize, height: usize, element: c_uint)
        => |_, _| alloc(width * height, AllocCtx::DEVICE), allocated(out);
    ALLOC_ASYNC cuMemAllocAsync(out: *mut DevicePtr, bytes: usize, stream: Handle)
        => |_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out);
    ALLOC_ASYNC_PTSZ cuMemAllocAsync_ptsz(out: *mut DevicePtr, bytes: usize, stream: Handle)
        => |_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out);
    ALLOC_HOST cuMemAllocHost_v2(out: *mut HostPtr, bytes: usize)
        => |_, _| alloc(bytes, AllocCtx::HOST_PINNED), allocated(out);
    HOST_ALLOC cuMemHostAlloc(out: *mut HostPtr, bytes: usize, flags: c_uint)
        => |_, _| alloc(bytes, AllocCtx::HOST_PINNED), allocated(out);
    ALLOC_MANAGED cuMemAllocManaged(out: *mut DevicePtr, bytes: usize, flags: c_uint)
        => |_, _| alloc(bytes, AllocCtx::MANAGED), allocated(out);
    FREE cuMemFree_v2(ptr: DevicePtr) => |_, _| free(ptr, AllocCtx::DEVICE), nothing;
    FREE_ASYNC cuMemFreeAsync(ptr: DevicePtr, stream: Handle) => |_, _| free(ptr, AllocCtx::DEVICE), nothing;
    FREE_ASYNC_PTSZ cuMemFreeAsync_ptsz(ptr: DevicePtr, stream: Handle) => |_, _| free(ptr, AllocCtx::DEVICE), nothing;
    FREE_HOST cuMemFreeHost(ptr: *mut c_void) => |_, _| free(ptr as u64, AllocCtx::HOST_PINNED), nothing;

    STREAM_SYNC cuStreamSynchronize(stream: Handle) => |_, _| sync(stream, SyncCtx::STREAM), nothing;
    STREAM_SYNC_PTSZ cuStreamSynchronize_ptsz(stream: Handle) => |_, _| sync(stream, SyncCtx::STREAM), nothing;
    EVENT_SYNC cuEventSynchronize(event: Handle) => |_, _| sync(event, SyncCtx::EVENT), nothing;
    CTX_SYNC cuCtxSynchronize() => |_, _| sync(std::ptr::null_mut(), SyncCtx::CONTEXT), nothing;
    CTX_SYNC_V2 cuCtxSynchronize_v2(context: Handle) => |_, _| sync(context, SyncCtx::CONTEXT), nothing;

    MODULE_LOAD_FATBIN cuModuleLoadFatBinary(out: *mut Handle, image: *const c_void)
        => |_, _| module(image), loaded(out);
    LIBRARY_LOAD_DATA cuLibraryLoadData(out: *mut Handle, code: *const c_void, jit_options: *mut c_int, jit_values: *mut *mut c_void, jit_n: c_uint, library_options: *mut c_int, library_values: *mut *mut c_void, library_n: c_uint)
        => |_, _| module(code), loaded(out);
}

/// A module load through `load` (the driver's, given an image): with the user's device probes,
/// the image's PTX instrumented is loaded in its place (the original when the driver refuses
/// it), as one event.
fn load_module(
    out: *mut Handle,
    image: *const c_void,
    load: impl Fn(*const c_void) -> CuResult,
) -> CuResult {
    let ptx = ptx(image);
    let user = defaults::user().filter(|u| u.on_device());
    let instrumented = match (&user, &ptx) {
        (Some(user), Ok(Some(text))) => user.instrument(text),
        (Some(_), Err(reason)) => {
            crate::device::refused(reason.clone());
            None
        }
        _ => None,
    };
    let call = || {
        if let (Some(user), Some(ptx)) = (&user, &instrumented) {
            let result = load(ptx.as_ptr().cast());
            user.loaded(result);
            if result == 0 {
                return 0;
            }
        }
        load(image)
    };
    let mut build = module_with(ptx.ok().flatten().as_deref());
    build.instrumented = u32::from(instrumented.is_some());
    observe(
        |_, _| build,
        call,
        move |ctx: &mut ModuleLoadCtx, result| {
            loaded(out)(ctx, result);
        },
    )
}

// Module loads: with the user's device probes, the image's PTX instrumented is loaded instead.
interposed!(MODULE_LOAD_DATA cuModuleLoadData(out: *mut Handle, image: *const c_void) |real| {
    // SAFETY: the driver's function, with the caller's arguments (or the instrumented image).
    load_module(out, image, |image| unsafe { real(out, image) })
});
interposed!(MODULE_LOAD_DATA_EX cuModuleLoadDataEx(
    out: *mut Handle,
    image: *const c_void,
    n: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void
) |real| {
    // SAFETY: as above; the JIT options pass through.
    load_module(out, image, |image| unsafe { real(out, image, n, options, values) })
});

/// `cudaStream_t`'s null: the runtime's default stream.
const NULL: Handle = std::ptr::null_mut();

// The CUDA runtime's copies, sets and allocations (`libcudart.so`, the shared runtime): it
// reaches the driver through private entry points, not the public ones above, so these are
// interposed by name (a runtime linked statically into a program cannot be). `cudaError_t` is an
// `int` as `CUresult` is; `cudaMemcpyKind` too.
entries! {
    runtime;
    RT_MEMCPY cudaMemcpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int)
        => |_, _| runtime_copy(dst, src, bytes, kind, NULL, 0), nothing;
    RT_MEMCPY_PTDS cudaMemcpy_ptds(dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int)
        => |_, _| runtime_copy(dst, src, bytes, kind, NULL, 0), nothing;
    RT_MEMCPY_ASYNC cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int, stream: Handle)
        => |_, _| runtime_copy(dst, src, bytes, kind, stream, ASYNC), nothing;
    RT_MEMCPY_ASYNC_PTSZ cudaMemcpyAsync_ptsz(dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int, stream: Handle)
        => |_, _| runtime_copy(dst, src, bytes, kind, stream, ASYNC), nothing;
    RT_MEMCPY_2D cudaMemcpy2D(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int)
        => |_, _| runtime_copy(dst, src, width * height, kind, NULL, 0), nothing;
    RT_MEMCPY_2D_PTDS cudaMemcpy2D_ptds(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int)
        => |_, _| runtime_copy(dst, src, width * height, kind, NULL, 0), nothing;
    RT_MEMCPY_2D_ASYNC cudaMemcpy2DAsync(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int, stream: Handle)
        => |_, _| runtime_copy(dst, src, width * height, kind, stream, ASYNC), nothing;
    RT_MEMCPY_2D_ASYNC_PTSZ cudaMemcpy2DAsync_ptsz(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int, stream: Handle)
        => |_, _| runtime_copy(dst, src, width * height, kind, stream, ASYNC), nothing;
    RT_MEMCPY_3D cudaMemcpy3D(p: *const Copy3d) => |_, _| runtime_copy_3d(p, NULL, 0), nothing;
    RT_MEMCPY_3D_PTDS cudaMemcpy3D_ptds(p: *const Copy3d) => |_, _| runtime_copy_3d(p, NULL, 0), nothing;
    RT_MEMCPY_3D_ASYNC cudaMemcpy3DAsync(p: *const Copy3d, stream: Handle) => |_, _| runtime_copy_3d(p, stream, ASYNC), nothing;
    RT_MEMCPY_3D_ASYNC_PTSZ cudaMemcpy3DAsync_ptsz(p: *const Copy3d, stream: Handle) => |_, _| runtime_copy_3d(p, stream, ASYNC), nothing;
    RT_MEMCPY_PEER cudaMemcpyPeer(dst: *mut c_void, dst_device: c_int, src: *const c_void, src_device: c_int, bytes: usize)
        => |_, _| copy(dst as u64, src as u64, bytes as u64, NULL, M::PEER, 0), nothing;
    RT_MEMCPY_PEER_ASYNC cudaMemcpyPeerAsync(dst: *mut c_void, dst_device: c_int, src: *const c_void, src_device: c_int, bytes: usize, stream: Handle)
        => |_, _| copy(dst as u64, src as u64, bytes as u64, stream, M::PEER, ASYNC), nothing;
    RT_TO_SYMBOL cudaMemcpyToSymbol(symbol: *const c_void, src: *const c_void, bytes: usize, offset: usize, kind: c_int)
        => |_, _| runtime_copy(symbol.cast_mut(), src, bytes, kind, NULL, 0), nothing;
    RT_TO_SYMBOL_PTDS cudaMemcpyToSymbol_ptds(symbol: *const c_void, src: *const c_void, bytes: usize, offset: usize, kind: c_int)
        => |_, _| runtime_copy(symbol.cast_mut(), src, bytes, kind, NULL, 0), nothing;
    RT_TO_SYMBOL_ASYNC cudaMemcpyToSymbolAsync(symbol: *const c_void, src: *const c_void, bytes: usize, offset: usize, kind: c_int, stream: Handle)
        => |_, _| runtime_copy(symbol.cast_mut(), src, bytes, kind, stream, ASYNC), nothing;
    RT_TO_SYMBOL_ASYNC_PTSZ cudaMemcpyToSymbolAsync_ptsz(symbol: *const c_void, src: *const c_void, bytes: usize, offset: usize, kind: c_int, stream: Handle)
        => |_, _| runtime_copy(symbol.cast_mut(), src, bytes, kind, stream, ASYNC), nothing;
    RT_FROM_SYMBOL cudaMemcpyFromSymbol(dst: *mut c_void, symbol: *const c_void, bytes: usize, offset: usize, kind: c_int)
        => |_, _| runtime_copy(dst, symbol, bytes, kind, NULL, 0), nothing;
    RT_FROM_SYMBOL_PTDS cudaMemcpyFromSymbol_ptds(dst: *mut c_void, symbol: *const c_void, bytes: usize, offset: usize, kind: c_int)
        => |_, _| runtime_copy(dst, symbol, bytes, kind, NULL, 0), nothing;
    RT_FROM_SYMBOL_ASYNC cudaMemcpyFromSymbolAsync(dst: *mut c_void, symbol: *const c_void, bytes: usize, offset: usize, kind: c_int, stream: Handle)
        => |_, _| runtime_copy(dst, symbol, bytes, kind, stream, ASYNC), nothing;
    RT_FROM_SYMBOL_ASYNC_PTSZ cudaMemcpyFromSymbolAsync_ptsz(dst: *mut c_void, symbol: *const c_void, bytes: usize, offset: usize, kind: c_int, stream: Handle)
        => |_, _| runtime_copy(dst, symbol, bytes, kind, stream, ASYNC), nothing;

    RT_MEMSET cudaMemset(dst: *mut c_void, value: c_int, bytes: usize)
        => |_, _| set(dst as u64, bytes as u64, NULL, 0), nothing;
    RT_MEMSET_PTDS cudaMemset_ptds(dst: *mut c_void, value: c_int, bytes: usize)
        => |_, _| set(dst as u64, bytes as u64, NULL, 0), nothing;
    RT_MEMSET_ASYNC cudaMemsetAsync(dst: *mut c_void, value: c_int, bytes: usize, stream: Handle)
        => |_, _| set(dst as u64, bytes as u64, stream, ASYNC), nothing;
    RT_MEMSET_ASYNC_PTSZ cudaMemsetAsync_ptsz(dst: *mut c_void, value: c_int, bytes: usize, stream: Handle)
        => |_, _| set(dst as u64, bytes as u64, stream, ASYNC), nothing;
    RT_MEMSET_2D cudaMemset2D(dst: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize)
        => |_, _| set(dst as u64, (width * height) as u64, NULL, 0), nothing;
    RT_MEMSET_2D_PTDS cudaMemset2D_ptds(dst: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize)
        => |_, _| set(dst as u64, (width * height) as u64, NULL, 0), nothing;
    RT_MEMSET_2D_ASYNC cudaMemset2DAsync(dst: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize, stream: Handle)
        => |_, _| set(dst as u64, (width * height) as u64, stream, ASYNC), nothing;
    RT_MEMSET_2D_ASYNC_PTSZ cudaMemset2DAsync_ptsz(dst: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize, stream: Handle)
        => |_, _| set(dst as u64, (width * height) as u64, stream, ASYNC), nothing;
    RT_MEMSET_3D cudaMemset3D(p: PitchedPtr, value: c_int, e: Extent)
        => |_, _| set(p.ptr as u64, (e.width * e.height * e.depth) as u64, NULL, 0), nothing;
    RT_MEMSET_3D_PTDS cudaMemset3D_ptds(p: PitchedPtr, value: c_int, e: Extent)
        => |_, _| set(p.ptr as u64, (e.width * e.height * e.depth) as u64, NULL, 0), nothing;
    RT_MEMSET_3D_ASYNC cudaMemset3DAsync(p: PitchedPtr, value: c_int, e: Extent, stream: Handle)
        => |_, _| set(p.ptr as u64, (e.width * e.height * e.depth) as u64, stream, ASYNC), nothing;
    RT_MEMSET_3D_ASYNC_PTSZ cudaMemset3DAsync_ptsz(p: PitchedPtr, value: c_int, e: Extent, stream: Handle)
        => |_, _| set(p.ptr as u64, (e.width * e.height * e.depth) as u64, stream, ASYNC), nothing;

    RT_MALLOC cudaMalloc(out: *mut HostPtr, bytes: usize)
        => |_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out);
    RT_MALLOC_PITCH cudaMallocPitch(out: *mut HostPtr, pitch: *mut usize, width: usize, height: usize)
        => |_, _| alloc(width * height, AllocCtx::DEVICE), allocated(out);
    RT_MALLOC_ASYNC cudaMallocAsync(out: *mut HostPtr, bytes: usize, stream: Handle)
        => |_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out);
    RT_MALLOC_ASYNC_PTSZ cudaMallocAsync_ptsz(out: *mut HostPtr, bytes: usize, stream: Handle)
        => |_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out);
    RT_MALLOC_FROM_POOL cudaMallocFromPoolAsync(out: *mut HostPtr, bytes: usize, pool: Handle, stream: Handle)
        => |_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out);
    RT_MALLOC_FROM_POOL_PTSZ cudaMallocFromPoolAsync_ptsz(out: *mut HostPtr, bytes: usize, pool: Handle, stream: Handle)
        => |_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out);
    RT_MALLOC_HOST cudaMallocHost(out: *mut HostPtr, bytes: usize)
        => |_, _| alloc(bytes, AllocCtx::HOST_PINNED), allocated(out);
    RT_HOST_ALLOC cudaHostAlloc(out: *mut HostPtr, bytes: usize, flags: c_uint)
        => |_, _| alloc(bytes, AllocCtx::HOST_PINNED), allocated(out);
    RT_MALLOC_MANAGED cudaMallocManaged(out: *mut HostPtr, bytes: usize, flags: c_uint)
        => |_, _| alloc(bytes, AllocCtx::MANAGED), allocated(out);
    RT_FREE cudaFree(ptr: *mut c_void) => |_, _| free(ptr as u64, AllocCtx::DEVICE), nothing;
    RT_FREE_ASYNC cudaFreeAsync(ptr: *mut c_void, stream: Handle) => |_, _| free(ptr as u64, AllocCtx::DEVICE), nothing;
    RT_FREE_ASYNC_PTSZ cudaFreeAsync_ptsz(ptr: *mut c_void, stream: Handle) => |_, _| free(ptr as u64, AllocCtx::DEVICE), nothing;
    RT_FREE_HOST cudaFreeHost(ptr: *mut c_void) => |_, _| free(ptr as u64, AllocCtx::HOST_PINNED), nothing;
}

/// An entry point for lookups: its exact name (what `dlsym` and linking use), the base name
/// `cuGetProcAddress` takes, whether it is the per-thread-default-stream flavour, and its hook.
pub(crate) struct Entry {
    pub(crate) exact: &'static CStr,
    pub(crate) base: &'static [u8],
    pub(crate) per_thread: bool,
    pub(crate) hook: &'static dyn Keep,
}

macro_rules! table {
    ($($hook:ident $exact:literal $base:literal $per_thread:literal;)*) => {
        /// Every interposed entry point.
        pub(crate) static ENTRIES: &[Entry] = &[$(
            Entry { exact: $exact, base: $base, per_thread: $per_thread, hook: &$hook },
        )*];
    };
}

table! {
    LAUNCH c"cuLaunchKernel" b"cuLaunchKernel" false;
    LAUNCH_PTSZ c"cuLaunchKernel_ptsz" b"cuLaunchKernel" true;
    LAUNCH_EX c"cuLaunchKernelEx" b"cuLaunchKernelEx" false;
    LAUNCH_EX_PTSZ c"cuLaunchKernelEx_ptsz" b"cuLaunchKernelEx" true;
    GRAPH_LAUNCH c"cuGraphLaunch" b"cuGraphLaunch" false;
    GRAPH_LAUNCH_PTSZ c"cuGraphLaunch_ptsz" b"cuGraphLaunch" true;
    MEMCPY c"cuMemcpy" b"cuMemcpy" false;
    MEMCPY_PTDS c"cuMemcpy_ptds" b"cuMemcpy" true;
    MEMCPY_ASYNC c"cuMemcpyAsync" b"cuMemcpyAsync" false;
    MEMCPY_ASYNC_PTSZ c"cuMemcpyAsync_ptsz" b"cuMemcpyAsync" true;
    HTOD c"cuMemcpyHtoD_v2" b"cuMemcpyHtoD" false;
    HTOD_PTDS c"cuMemcpyHtoD_v2_ptds" b"cuMemcpyHtoD" true;
    DTOH c"cuMemcpyDtoH_v2" b"cuMemcpyDtoH" false;
    DTOH_PTDS c"cuMemcpyDtoH_v2_ptds" b"cuMemcpyDtoH" true;
    DTOD c"cuMemcpyDtoD_v2" b"cuMemcpyDtoD" false;
    DTOD_PTDS c"cuMemcpyDtoD_v2_ptds" b"cuMemcpyDtoD" true;
    HTOD_ASYNC c"cuMemcpyHtoDAsync_v2" b"cuMemcpyHtoDAsync" false;
    HTOD_ASYNC_PTSZ c"cuMemcpyHtoDAsync_v2_ptsz" b"cuMemcpyHtoDAsync" true;
    DTOH_ASYNC c"cuMemcpyDtoHAsync_v2" b"cuMemcpyDtoHAsync" false;
    DTOH_ASYNC_PTSZ c"cuMemcpyDtoHAsync_v2_ptsz" b"cuMemcpyDtoHAsync" true;
    DTOD_ASYNC c"cuMemcpyDtoDAsync_v2" b"cuMemcpyDtoDAsync" false;
    DTOD_ASYNC_PTSZ c"cuMemcpyDtoDAsync_v2_ptsz" b"cuMemcpyDtoDAsync" true;
    PEER c"cuMemcpyPeer" b"cuMemcpyPeer" false;
    PEER_PTDS c"cuMemcpyPeer_ptds" b"cuMemcpyPeer" true;
    PEER_ASYNC c"cuMemcpyPeerAsync" b"cuMemcpyPeerAsync" false;
    PEER_ASYNC_PTSZ c"cuMemcpyPeerAsync_ptsz" b"cuMemcpyPeerAsync" true;
    SET8 c"cuMemsetD8_v2" b"cuMemsetD8" false;
    SET8_PTDS c"cuMemsetD8_v2_ptds" b"cuMemsetD8" true;
    SET16 c"cuMemsetD16_v2" b"cuMemsetD16" false;
    SET16_PTDS c"cuMemsetD16_v2_ptds" b"cuMemsetD16" true;
    SET32 c"cuMemsetD32_v2" b"cuMemsetD32" false;
    SET32_PTDS c"cuMemsetD32_v2_ptds" b"cuMemsetD32" true;
    SET8_ASYNC c"cuMemsetD8Async" b"cuMemsetD8Async" false;
    SET8_ASYNC_PTSZ c"cuMemsetD8Async_ptsz" b"cuMemsetD8Async" true;
    SET16_ASYNC c"cuMemsetD16Async" b"cuMemsetD16Async" false;
    SET16_ASYNC_PTSZ c"cuMemsetD16Async_ptsz" b"cuMemsetD16Async" true;
    SET32_ASYNC c"cuMemsetD32Async" b"cuMemsetD32Async" false;
    SET32_ASYNC_PTSZ c"cuMemsetD32Async_ptsz" b"cuMemsetD32Async" true;
    COPY_2D c"cuMemcpy2D_v2" b"cuMemcpy2D" false;
    COPY_2D_PTDS c"cuMemcpy2D_v2_ptds" b"cuMemcpy2D" true;
    COPY_2D_UNALIGNED c"cuMemcpy2DUnaligned_v2" b"cuMemcpy2DUnaligned" false;
    COPY_2D_UNALIGNED_PTDS c"cuMemcpy2DUnaligned_v2_ptds" b"cuMemcpy2DUnaligned" true;
    COPY_2D_ASYNC c"cuMemcpy2DAsync_v2" b"cuMemcpy2DAsync" false;
    COPY_2D_ASYNC_PTSZ c"cuMemcpy2DAsync_v2_ptsz" b"cuMemcpy2DAsync" true;
    COPY_3D c"cuMemcpy3D_v2" b"cuMemcpy3D" false;
    COPY_3D_PTDS c"cuMemcpy3D_v2_ptds" b"cuMemcpy3D" true;
    COPY_3D_ASYNC c"cuMemcpy3DAsync_v2" b"cuMemcpy3DAsync" false;
    COPY_3D_ASYNC_PTSZ c"cuMemcpy3DAsync_v2_ptsz" b"cuMemcpy3DAsync" true;
    SET_2D8 c"cuMemsetD2D8_v2" b"cuMemsetD2D8" false;
    SET_2D8_PTDS c"cuMemsetD2D8_v2_ptds" b"cuMemsetD2D8" true;
    SET_2D16 c"cuMemsetD2D16_v2" b"cuMemsetD2D16" false;
    SET_2D16_PTDS c"cuMemsetD2D16_v2_ptds" b"cuMemsetD2D16" true;
    SET_2D32 c"cuMemsetD2D32_v2" b"cuMemsetD2D32" false;
    SET_2D32_PTDS c"cuMemsetD2D32_v2_ptds" b"cuMemsetD2D32" true;
    SET_2D8_ASYNC c"cuMemsetD2D8Async" b"cuMemsetD2D8Async" false;
    SET_2D8_ASYNC_PTSZ c"cuMemsetD2D8Async_ptsz" b"cuMemsetD2D8Async" true;
    SET_2D16_ASYNC c"cuMemsetD2D16Async" b"cuMemsetD2D16Async" false;
    SET_2D16_ASYNC_PTSZ c"cuMemsetD2D16Async_ptsz" b"cuMemsetD2D16Async" true;
    SET_2D32_ASYNC c"cuMemsetD2D32Async" b"cuMemsetD2D32Async" false;
    SET_2D32_ASYNC_PTSZ c"cuMemsetD2D32Async_ptsz" b"cuMemsetD2D32Async" true;
    BEGIN_CAPTURE c"cuStreamBeginCapture" b"cuStreamBeginCapture" false;
    BEGIN_CAPTURE_PTSZ c"cuStreamBeginCapture_ptsz" b"cuStreamBeginCapture" true;
    BEGIN_CAPTURE_V2 c"cuStreamBeginCapture_v2" b"cuStreamBeginCapture" false;
    BEGIN_CAPTURE_V2_PTSZ c"cuStreamBeginCapture_v2_ptsz" b"cuStreamBeginCapture" true;
    BEGIN_CAPTURE_TO_GRAPH c"cuStreamBeginCaptureToGraph" b"cuStreamBeginCaptureToGraph" false;
    BEGIN_CAPTURE_TO_GRAPH_PTSZ c"cuStreamBeginCaptureToGraph_ptsz" b"cuStreamBeginCaptureToGraph" true;
    END_CAPTURE c"cuStreamEndCapture" b"cuStreamEndCapture" false;
    END_CAPTURE_PTSZ c"cuStreamEndCapture_ptsz" b"cuStreamEndCapture" true;
    ALLOC c"cuMemAlloc_v2" b"cuMemAlloc" false;
    ALLOC_PITCH c"cuMemAllocPitch_v2" b"cuMemAllocPitch" false;
    ALLOC_ASYNC c"cuMemAllocAsync" b"cuMemAllocAsync" false;
    ALLOC_ASYNC_PTSZ c"cuMemAllocAsync_ptsz" b"cuMemAllocAsync" true;
    ALLOC_HOST c"cuMemAllocHost_v2" b"cuMemAllocHost" false;
    HOST_ALLOC c"cuMemHostAlloc" b"cuMemHostAlloc" false;
    ALLOC_MANAGED c"cuMemAllocManaged" b"cuMemAllocManaged" false;
    FREE c"cuMemFree_v2" b"cuMemFree" false;
    FREE_ASYNC c"cuMemFreeAsync" b"cuMemFreeAsync" false;
    FREE_ASYNC_PTSZ c"cuMemFreeAsync_ptsz" b"cuMemFreeAsync" true;
    FREE_HOST c"cuMemFreeHost" b"cuMemFreeHost" false;
    STREAM_SYNC c"cuStreamSynchronize" b"cuStreamSynchronize" false;
    STREAM_SYNC_PTSZ c"cuStreamSynchronize_ptsz" b"cuStreamSynchronize" true;
    EVENT_SYNC c"cuEventSynchronize" b"cuEventSynchronize" false;
    CTX_SYNC c"cuCtxSynchronize" b"cuCtxSynchronize" false;
    CTX_SYNC_V2 c"cuCtxSynchronize_v2" b"cuCtxSynchronize" false;
    MODULE_LOAD_DATA c"cuModuleLoadData" b"cuModuleLoadData" false;
    MODULE_LOAD_DATA_EX c"cuModuleLoadDataEx" b"cuModuleLoadDataEx" false;
    MODULE_LOAD_FATBIN c"cuModuleLoadFatBinary" b"cuModuleLoadFatBinary" false;
    LIBRARY_LOAD_DATA c"cuLibraryLoadData" b"cuLibraryLoadData" false;
    // The runtime's: found by dlsym only (an empty base name matches no cuGetProcAddress).
    RT_MEMCPY c"cudaMemcpy" b"" false;
    RT_MEMCPY_PTDS c"cudaMemcpy_ptds" b"" false;
    RT_MEMCPY_ASYNC c"cudaMemcpyAsync" b"" false;
    RT_MEMCPY_ASYNC_PTSZ c"cudaMemcpyAsync_ptsz" b"" false;
    RT_MEMCPY_2D c"cudaMemcpy2D" b"" false;
    RT_MEMCPY_2D_PTDS c"cudaMemcpy2D_ptds" b"" false;
    RT_MEMCPY_2D_ASYNC c"cudaMemcpy2DAsync" b"" false;
    RT_MEMCPY_2D_ASYNC_PTSZ c"cudaMemcpy2DAsync_ptsz" b"" false;
    RT_MEMCPY_3D c"cudaMemcpy3D" b"" false;
    RT_MEMCPY_3D_PTDS c"cudaMemcpy3D_ptds" b"" false;
    RT_MEMCPY_3D_ASYNC c"cudaMemcpy3DAsync" b"" false;
    RT_MEMCPY_3D_ASYNC_PTSZ c"cudaMemcpy3DAsync_ptsz" b"" false;
    RT_MEMCPY_PEER c"cudaMemcpyPeer" b"" false;
    RT_MEMCPY_PEER_ASYNC c"cudaMemcpyPeerAsync" b"" false;
    RT_TO_SYMBOL c"cudaMemcpyToSymbol" b"" false;
    RT_TO_SYMBOL_PTDS c"cudaMemcpyToSymbol_ptds" b"" false;
    RT_TO_SYMBOL_ASYNC c"cudaMemcpyToSymbolAsync" b"" false;
    RT_TO_SYMBOL_ASYNC_PTSZ c"cudaMemcpyToSymbolAsync_ptsz" b"" false;
    RT_FROM_SYMBOL c"cudaMemcpyFromSymbol" b"" false;
    RT_FROM_SYMBOL_PTDS c"cudaMemcpyFromSymbol_ptds" b"" false;
    RT_FROM_SYMBOL_ASYNC c"cudaMemcpyFromSymbolAsync" b"" false;
    RT_FROM_SYMBOL_ASYNC_PTSZ c"cudaMemcpyFromSymbolAsync_ptsz" b"" false;
    RT_MEMSET c"cudaMemset" b"" false;
    RT_MEMSET_PTDS c"cudaMemset_ptds" b"" false;
    RT_MEMSET_ASYNC c"cudaMemsetAsync" b"" false;
    RT_MEMSET_ASYNC_PTSZ c"cudaMemsetAsync_ptsz" b"" false;
    RT_MEMSET_2D c"cudaMemset2D" b"" false;
    RT_MEMSET_2D_PTDS c"cudaMemset2D_ptds" b"" false;
    RT_MEMSET_2D_ASYNC c"cudaMemset2DAsync" b"" false;
    RT_MEMSET_2D_ASYNC_PTSZ c"cudaMemset2DAsync_ptsz" b"" false;
    RT_MEMSET_3D c"cudaMemset3D" b"" false;
    RT_MEMSET_3D_PTDS c"cudaMemset3D_ptds" b"" false;
    RT_MEMSET_3D_ASYNC c"cudaMemset3DAsync" b"" false;
    RT_MEMSET_3D_ASYNC_PTSZ c"cudaMemset3DAsync_ptsz" b"" false;
    RT_MALLOC c"cudaMalloc" b"" false;
    RT_MALLOC_PITCH c"cudaMallocPitch" b"" false;
    RT_MALLOC_ASYNC c"cudaMallocAsync" b"" false;
    RT_MALLOC_ASYNC_PTSZ c"cudaMallocAsync_ptsz" b"" false;
    RT_MALLOC_FROM_POOL c"cudaMallocFromPoolAsync" b"" false;
    RT_MALLOC_FROM_POOL_PTSZ c"cudaMallocFromPoolAsync_ptsz" b"" false;
    RT_MALLOC_HOST c"cudaMallocHost" b"" false;
    RT_HOST_ALLOC c"cudaHostAlloc" b"" false;
    RT_MALLOC_MANAGED c"cudaMallocManaged" b"" false;
    RT_FREE c"cudaFree" b"" false;
    RT_FREE_ASYNC c"cudaFreeAsync" b"" false;
    RT_FREE_ASYNC_PTSZ c"cudaFreeAsync_ptsz" b"" false;
    RT_FREE_HOST c"cudaFreeHost" b"" false;
}

/// The entry point `dlsym` finds under its exact name `symbol`.
pub(crate) fn exact(symbol: &[u8]) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.exact.to_bytes() == symbol)
}

/// The entry points `cuGetProcAddress` may mean by the base name `symbol` (the flavour its flags
/// ask for first; versions before CUDA 4.0 asked for entry points of other signatures, which are
/// left alone).
pub(crate) fn by_base(
    symbol: &[u8],
    version: c_int,
    per_thread: bool,
) -> impl Iterator<Item = &'static Entry> {
    let matching = move |flavour: bool| {
        ENTRIES
            .iter()
            .filter(move |e| version >= 4000 && e.base == symbol && e.per_thread == flavour)
    };
    matching(per_thread).chain(matching(false).filter(move |_| per_thread))
}
