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

use egpu::ebpf::{AllocCtx, LaunchCtx, MemcpyCtx, ModuleLoadCtx, Phase, SyncCtx};
use egpu::host::HostContext;

use crate::real::{Hook, Keep};
use crate::{CuResult, Handle, LOCAL, defaults};

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
/// read, [`egpu::host::HostProbes::context_words`]), posted before the call; `after` fills what the call produced, and the context is
/// posted again after it. When nothing is attached to the event, or the thread is already inside
/// an interposed call, `call` is all that runs.
pub(crate) fn observe<C: Event>(
    build: impl FnOnce(u16, &crate::Local) -> C,
    call: impl FnOnce() -> CuResult,
    after: impl FnOnce(&mut C, CuResult),
) -> CuResult {
    // Nothing attached: straight to the driver, before touching any thread-local.
    let Some(probes) = defaults::probes() else { return call() };
    let (enter, exit) = (probes.armed(C::EVENT, Phase::Enter), probes.armed(C::EVENT, Phase::Exit));
    if !enter && !exit {
        return call();
    }
    let Ok(local) = LOCAL.try_with(|l| l as *const crate::Local) else { return call() };
    // SAFETY: the thread's own thread-local, alive while the thread runs this call.
    let local = unsafe { &*local };
    if local.inside.get() {
        return call();
    }
    // The fields the probes read, and no more: a clock read or a system call costs more than a
    // probe's run.
    let words = probes.context_words(C::EVENT, Phase::Enter)
        | if exit { probes.context_words(C::EVENT, Phase::Exit) } else { 0 };
    let reads = |offset: usize| words & (1 << (offset / 8)) != 0;
    local.inside.set(true);
    let mut ctx = build(words, local);
    let timed = reads(C::TIMESTAMP) || (exit && reads(C::DURATION));
    if timed {
        *ctx.timestamp() = egpu::host::now_ns();
    }
    if reads(C::TID) {
        *ctx.tid() = egpu::host::thread_id();
    }
    if enter {
        local.post(probes, Phase::Enter, &ctx);
    }
    let result = call();
    if exit {
        after(&mut ctx, result);
        if timed {
            *ctx.duration() = egpu::host::now_ns().saturating_sub(*ctx.timestamp());
        }
        *ctx.result() = result;
        local.post(probes, Phase::Exit, &ctx);
    }
    local.inside.set(false);
    result
}

/// Defines interposed entry points: for each, a [`Hook`] named `$hook` and an exported function
/// with the driver's name and signature that makes one event of the call.
macro_rules! entries {
    ($(
        $hook:ident $name:ident ($($arg:ident : $ty:ty),* $(,)?)
            => $build:expr, $after:expr;
    )*) => {$(
        pub(crate) static $hook: Hook<unsafe extern "C" fn($($ty),*) -> CuResult> = Hook::new(
            match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(name) => name,
                Err(_) => panic!("a name without NUL"),
            },
            || $name as *mut c_void,
        );

        #[doc = concat!("The driver's `", stringify!($name), "`, interposed.")]
        ///
        /// # Safety
        ///
        /// As the driver's.
        #[unsafe(no_mangle)]
        pub(crate) unsafe extern "C" fn $name($($arg: $ty),*) -> CuResult {
            let Some(real) = $hook.get() else { return NOT_FOUND };
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let call = || unsafe { real($($arg),*) };
            observe($build, call, $after)
        }
    )*};
}

fn copy(dst: u64, src: u64, bytes: u64, stream: Handle, kind: u32, flags: u32) -> MemcpyCtx {
    MemcpyCtx { dst, src, bytes, stream: stream as u64, kind, flags, ..MemcpyCtx::default() }
}

fn set(dst: u64, bytes: u64, stream: Handle, flags: u32) -> MemcpyCtx {
    copy(dst, 0, bytes, stream, MemcpyCtx::DEFAULT, flags | MemcpyCtx::MEMSET)
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

/// A module load: the image's size when it is PTX text (which egpu could instrument).
fn module(image: *const c_void) -> ModuleLoadCtx {
    let mut ctx = ModuleLoadCtx::default();
    if image.is_null() {
        return ctx;
    }
    // The first 4 bytes, or fewer when a NUL ends a (PTX) string sooner.
    let mut head = [0u8; 4];
    for (i, b) in head.iter_mut().enumerate() {
        // SAFETY: the caller's image: readable up to its NUL (text) or its header (binary).
        *b = unsafe { image.cast::<u8>().add(i).read() };
        if *b == 0 {
            break;
        }
    }
    let elf_or_fatbin = &head == b"\x7fELF" || head == 0xba55_ed50_u32.to_le_bytes();
    if !elf_or_fatbin {
        // PTX is NUL-terminated text.
        // SAFETY: as above: a PTX image is a C string.
        ctx.image_bytes = unsafe { CStr::from_ptr(image.cast()) }.to_bytes().len() as u64;
        ctx.has_ptx = 1;
    }
    ctx
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
        ..LaunchCtx::default()
    };
    if words & 1 != 0 {
        ctx.kernel_id = kernel_id(local, f);
    }
    ctx
}

/// The kernel id of `f`, remembered for the thread's last function (most loops launch one).
fn kernel_id(local: &crate::Local, f: Handle) -> u64 {
    let key = f as usize;
    match local.last.get() {
        (last, id) if last == key && key != 0 => id,
        _ => {
            let id = defaults::kernel_id(f);
            local.last.set((key, id));
            id
        }
    }
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

    MODULE_LOAD_DATA cuModuleLoadData(out: *mut Handle, image: *const c_void)
        => |_, _| module(image), loaded(out);
    MODULE_LOAD_DATA_EX cuModuleLoadDataEx(out: *mut Handle, image: *const c_void, n: c_uint, options: *mut c_int, values: *mut *mut c_void)
        => |_, _| module(image), loaded(out);
    MODULE_LOAD_FATBIN cuModuleLoadFatBinary(out: *mut Handle, image: *const c_void)
        => |_, _| module(image), loaded(out);
    LIBRARY_LOAD_DATA cuLibraryLoadData(out: *mut Handle, code: *const c_void, jit_options: *mut c_int, jit_values: *mut *mut c_void, jit_n: c_uint, library_options: *mut c_int, library_values: *mut *mut c_void, library_n: c_uint)
        => |_, _| module(code), loaded(out);
}

/// An entry point for lookups: its exact name (what `dlsym` and linking use), the base name
/// `cuGetProcAddress` takes, whether it is the per-thread-default-stream flavour, and its hook.
pub(crate) struct Entry {
    pub(crate) exact: &'static [u8],
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

use crate::real::{LAUNCH, LAUNCH_PTSZ};

table! {
    LAUNCH b"cuLaunchKernel" b"cuLaunchKernel" false;
    LAUNCH_PTSZ b"cuLaunchKernel_ptsz" b"cuLaunchKernel" true;
    LAUNCH_EX b"cuLaunchKernelEx" b"cuLaunchKernelEx" false;
    LAUNCH_EX_PTSZ b"cuLaunchKernelEx_ptsz" b"cuLaunchKernelEx" true;
    GRAPH_LAUNCH b"cuGraphLaunch" b"cuGraphLaunch" false;
    GRAPH_LAUNCH_PTSZ b"cuGraphLaunch_ptsz" b"cuGraphLaunch" true;
    MEMCPY b"cuMemcpy" b"cuMemcpy" false;
    MEMCPY_PTDS b"cuMemcpy_ptds" b"cuMemcpy" true;
    MEMCPY_ASYNC b"cuMemcpyAsync" b"cuMemcpyAsync" false;
    MEMCPY_ASYNC_PTSZ b"cuMemcpyAsync_ptsz" b"cuMemcpyAsync" true;
    HTOD b"cuMemcpyHtoD_v2" b"cuMemcpyHtoD" false;
    HTOD_PTDS b"cuMemcpyHtoD_v2_ptds" b"cuMemcpyHtoD" true;
    DTOH b"cuMemcpyDtoH_v2" b"cuMemcpyDtoH" false;
    DTOH_PTDS b"cuMemcpyDtoH_v2_ptds" b"cuMemcpyDtoH" true;
    DTOD b"cuMemcpyDtoD_v2" b"cuMemcpyDtoD" false;
    DTOD_PTDS b"cuMemcpyDtoD_v2_ptds" b"cuMemcpyDtoD" true;
    HTOD_ASYNC b"cuMemcpyHtoDAsync_v2" b"cuMemcpyHtoDAsync" false;
    HTOD_ASYNC_PTSZ b"cuMemcpyHtoDAsync_v2_ptsz" b"cuMemcpyHtoDAsync" true;
    DTOH_ASYNC b"cuMemcpyDtoHAsync_v2" b"cuMemcpyDtoHAsync" false;
    DTOH_ASYNC_PTSZ b"cuMemcpyDtoHAsync_v2_ptsz" b"cuMemcpyDtoHAsync" true;
    DTOD_ASYNC b"cuMemcpyDtoDAsync_v2" b"cuMemcpyDtoDAsync" false;
    DTOD_ASYNC_PTSZ b"cuMemcpyDtoDAsync_v2_ptsz" b"cuMemcpyDtoDAsync" true;
    PEER b"cuMemcpyPeer" b"cuMemcpyPeer" false;
    PEER_PTDS b"cuMemcpyPeer_ptds" b"cuMemcpyPeer" true;
    PEER_ASYNC b"cuMemcpyPeerAsync" b"cuMemcpyPeerAsync" false;
    PEER_ASYNC_PTSZ b"cuMemcpyPeerAsync_ptsz" b"cuMemcpyPeerAsync" true;
    SET8 b"cuMemsetD8_v2" b"cuMemsetD8" false;
    SET8_PTDS b"cuMemsetD8_v2_ptds" b"cuMemsetD8" true;
    SET16 b"cuMemsetD16_v2" b"cuMemsetD16" false;
    SET16_PTDS b"cuMemsetD16_v2_ptds" b"cuMemsetD16" true;
    SET32 b"cuMemsetD32_v2" b"cuMemsetD32" false;
    SET32_PTDS b"cuMemsetD32_v2_ptds" b"cuMemsetD32" true;
    SET8_ASYNC b"cuMemsetD8Async" b"cuMemsetD8Async" false;
    SET8_ASYNC_PTSZ b"cuMemsetD8Async_ptsz" b"cuMemsetD8Async" true;
    SET16_ASYNC b"cuMemsetD16Async" b"cuMemsetD16Async" false;
    SET16_ASYNC_PTSZ b"cuMemsetD16Async_ptsz" b"cuMemsetD16Async" true;
    SET32_ASYNC b"cuMemsetD32Async" b"cuMemsetD32Async" false;
    SET32_ASYNC_PTSZ b"cuMemsetD32Async_ptsz" b"cuMemsetD32Async" true;
    ALLOC b"cuMemAlloc_v2" b"cuMemAlloc" false;
    ALLOC_PITCH b"cuMemAllocPitch_v2" b"cuMemAllocPitch" false;
    ALLOC_ASYNC b"cuMemAllocAsync" b"cuMemAllocAsync" false;
    ALLOC_ASYNC_PTSZ b"cuMemAllocAsync_ptsz" b"cuMemAllocAsync" true;
    ALLOC_HOST b"cuMemAllocHost_v2" b"cuMemAllocHost" false;
    HOST_ALLOC b"cuMemHostAlloc" b"cuMemHostAlloc" false;
    ALLOC_MANAGED b"cuMemAllocManaged" b"cuMemAllocManaged" false;
    FREE b"cuMemFree_v2" b"cuMemFree" false;
    FREE_ASYNC b"cuMemFreeAsync" b"cuMemFreeAsync" false;
    FREE_ASYNC_PTSZ b"cuMemFreeAsync_ptsz" b"cuMemFreeAsync" true;
    FREE_HOST b"cuMemFreeHost" b"cuMemFreeHost" false;
    STREAM_SYNC b"cuStreamSynchronize" b"cuStreamSynchronize" false;
    STREAM_SYNC_PTSZ b"cuStreamSynchronize_ptsz" b"cuStreamSynchronize" true;
    EVENT_SYNC b"cuEventSynchronize" b"cuEventSynchronize" false;
    CTX_SYNC b"cuCtxSynchronize" b"cuCtxSynchronize" false;
    MODULE_LOAD_DATA b"cuModuleLoadData" b"cuModuleLoadData" false;
    MODULE_LOAD_DATA_EX b"cuModuleLoadDataEx" b"cuModuleLoadDataEx" false;
    MODULE_LOAD_FATBIN b"cuModuleLoadFatBinary" b"cuModuleLoadFatBinary" false;
    LIBRARY_LOAD_DATA b"cuLibraryLoadData" b"cuLibraryLoadData" false;
}

/// The entry point for a lookup of `symbol`: by exact name (`version` `None`), or as
/// `cuGetProcAddress` names it (the base name, the flavour from its flags; versions before
/// CUDA 4.0 asked for entry points of other signatures, which are left alone).
pub(crate) fn entry(
    symbol: &[u8],
    version: Option<c_int>,
    per_thread: bool,
) -> Option<&'static Entry> {
    match version {
        None => ENTRIES.iter().find(|e| e.exact == symbol),
        Some(v) if v < 4000 => None,
        Some(_) => ENTRIES
            .iter()
            .find(|e| e.base == symbol && e.per_thread == per_thread)
            .or_else(|| ENTRIES.iter().find(|e| e.base == symbol && !e.per_thread)),
    }
}
