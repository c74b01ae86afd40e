//! Copies, sets, allocations and frees: their contexts ([`MemcpyCtx`], [`AllocCtx`]), from the
//! arguments of the driver's entry points and the runtime's, and the parameter blocks some take.

use std::ffi::{c_int, c_void};

use egpu::ebpf::{AllocCtx, MemcpyCtx};

use super::DevicePtr;
use crate::real::Hook;
use crate::{CuResult, Handle};

pub(super) fn copy(
    dst: u64,
    src: u64,
    bytes: u64,
    stream: Handle,
    kind: u32,
    flags: u32,
) -> MemcpyCtx {
    let kind = if kind == MemcpyCtx::DEFAULT { direction(dst, src) } else { kind };
    MemcpyCtx { dst, src, bytes, stream: stream as u64, kind, flags, ..MemcpyCtx::default() }
}

pub(super) fn set(dst: u64, bytes: u64, stream: Handle, flags: u32) -> MemcpyCtx {
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
pub(super) fn runtime_copy(
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

pub(super) fn runtime_copy_3d(p: *const Copy3d, stream: Handle, flags: u32) -> MemcpyCtx {
    if p.is_null() {
        return MemcpyCtx::default();
    }
    // SAFETY: the caller's parameters, which the runtime reads too.
    let p = unsafe { &*p };
    let e = p.extent;
    let bytes = e.width * e.height.max(1) * e.depth.max(1);
    runtime_copy(p.dst.ptr, p.src.ptr, bytes, p.kind, stream, flags)
}

/// A set through the runtime of `e` (an extent of linear memory) at `p`.
pub(super) fn runtime_set_3d(p: PitchedPtr, e: Extent, stream: Handle, flags: u32) -> MemcpyCtx {
    set(p.ptr as u64, (e.width * e.height * e.depth) as u64, stream, flags)
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

pub(super) fn driver_copy_2d(p: *const Copy2dDriver, stream: Handle, flags: u32) -> MemcpyCtx {
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

pub(super) fn driver_copy_3d(p: *const Copy3dDriver, stream: Handle, flags: u32) -> MemcpyCtx {
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

pub(super) fn alloc(bytes: usize, kind: u32) -> AllocCtx {
    AllocCtx { bytes: bytes as u64, kind, op: AllocCtx::ALLOC, ..AllocCtx::default() }
}

/// A managed allocation's context, before the call: the `allocs` set's CUPTI reports started
/// first ([`crate::device::allocs::managed_coming`]).
pub(super) fn managed(bytes: usize) -> AllocCtx {
    crate::device::allocs::managed_coming();
    alloc(bytes, AllocCtx::MANAGED)
}

pub(super) fn free(ptr: u64, kind: u32) -> AllocCtx {
    AllocCtx { ptr, kind, op: AllocCtx::FREE, ..AllocCtx::default() }
}

/// After an allocation: the address it wrote to `out`; a device allocation goes into the
/// `allocs` set's table ([`crate::device::allocs`]).
pub(super) fn allocated<P: Copy + Into<u64>>(out: *mut P) -> impl FnOnce(&mut AllocCtx, CuResult) {
    move |ctx, result| {
        if result == 0 && !out.is_null() {
            // SAFETY: the driver wrote the address to the caller's pointer.
            ctx.ptr = unsafe { out.read() }.into();
            match ctx.kind {
                AllocCtx::DEVICE => crate::device::allocs::made(ctx.ptr, ctx.bytes, false),
                AllocCtx::MANAGED => crate::device::allocs::made(ctx.ptr, ctx.bytes, true),
                AllocCtx::HOST_PINNED => crate::device::allocs::pinned(ctx.ptr, ctx.bytes, false),
                _ => {}
            }
        }
    }
}

/// After a free: a device allocation leaves the `allocs` set's table.
pub(super) fn released(ctx: &mut AllocCtx, result: CuResult) {
    if result == 0 {
        match ctx.kind {
            // `cuMemFree` frees managed memory too.
            AllocCtx::DEVICE | AllocCtx::MANAGED => crate::device::allocs::freed(ctx.ptr),
            AllocCtx::HOST_PINNED => crate::device::allocs::pinned(ctx.ptr, 0, true),
            _ => {}
        }
    }
}

/// After a copy (not a set): its bytes to the allocations it reached, for the `allocs` set.
pub(super) fn copied(ctx: &mut MemcpyCtx, result: CuResult) {
    if result == 0 && ctx.flags & MemcpyCtx::MEMSET == 0 {
        crate::device::allocs::copied(ctx.dst, ctx.src, ctx.bytes);
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

/// `CUmemLocation`: where memory is to be, by kind (1 a device, 2 the host, 3 a host NUMA node,
/// 4 the calling thread's NUMA node) and id.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct MemLocation {
    kind: c_int,
    id: c_int,
}

/// Where a steering call sends managed memory: a device's ordinal, or `None` for host memory.
pub(super) trait Place: Copy {
    fn device(self) -> Option<c_int>;
}

/// `CUdevice`, where `CU_DEVICE_CPU` (-1) is host memory.
impl Place for c_int {
    fn device(self) -> Option<c_int> {
        (self >= 0).then_some(self)
    }
}

impl Place for MemLocation {
    fn device(self) -> Option<c_int> {
        (self.kind == 1).then_some(self.id)
    }
}

/// After `cuMemPrefetchAsync` of `count` bytes at `ptr` to `to`: the bytes to the allocations
/// they fall in, for the `allocs` set.
pub(super) fn prefetched(ptr: DevicePtr, count: usize, to: impl Place) {
    crate::device::allocs::prefetched(ptr, count as u64, to.device().is_some());
}

/// After `cuMemAdvise` of `count` bytes at `ptr`: the advice (`CUmem_advise`, 1 to 6) to the
/// allocations they fall in, in words.
pub(super) fn advised(ptr: DevicePtr, count: usize, advice: c_int, place: impl Place) {
    let place = match place.device() {
        Some(d) => format!("device {d}"),
        None => "host".to_owned(),
    };
    let words = match advice {
        1 => "read mostly".to_owned(),
        2 => "not read mostly".to_owned(),
        3 => format!("preferred {place}"),
        4 => "no preferred location".to_owned(),
        5 => format!("accessed by {place}"),
        6 => format!("not accessed by {place}"),
        n => format!("advice {n}"),
    };
    crate::device::allocs::advised(ptr, count as u64, words);
}
