//! A probe pack that measures how kernels access global memory, per kernel and site (the
//! access's index among the kernel's observed accesses): the warp-level requests made there, the
//! 32-byte sectors those requests touched, and the fewest sectors their bytes could have taken
//! (the lanes' bytes, contiguous and aligned). `sectors / minimum` is how far from coalesced the
//! site is: 1 for 32 lanes reading consecutive floats (4 sectors each), 8 for 32 lanes reading
//! floats 128 bytes apart (32 sectors where 4 would do).
//!
//! ```text
//! cargo build --release -p egpu --example access_pattern
//! egpu run --probes target/release/examples/libaccess_pattern.so --summary /tmp/s -- ./app
//! egpu maps PID          # while it runs: SITES, one entry per kernel and site
//! ```
//!
//! Each lane of a request runs the probe; all of them take part in the warp helpers (which work
//! over the lanes running together: `egpu::helpers::warp_lanes`, `warp_sectors`), and the lowest
//! (`warp_leader`) records the request. On the CPU a thread is a warp of one lane.

use bytemuck::{Pod, Zeroable};
use egpu::ebpf::MemAccessCtx;
use egpu::maps::HashMap;

/// A site of a kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub(crate) struct Site {
    /// The kernel's id (the FNV-1a hash of its name).
    pub(crate) kernel: u64,
    /// The access's index among the kernel's observed accesses.
    pub(crate) site: u32,
    /// Its class ([`MemAccessCtx::class`]).
    pub(crate) class: u32,
}

/// What the requests at a site did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub(crate) struct Requests {
    /// Warp-level requests.
    pub(crate) requests: u64,
    /// Lanes taking part, summed over the requests.
    pub(crate) lanes: u64,
    /// 32-byte sectors the requests touched.
    pub(crate) sectors: u64,
    /// The fewest sectors their bytes could have taken.
    pub(crate) minimum: u64,
    /// Bytes the lanes moved.
    pub(crate) bytes: u64,
}

/// The requests per kernel and site.
pub(crate) static SITES: HashMap<Site, Requests> = HashMap::with_capacity(4096);

/// Records the request a lane takes part in (`size` bytes at `addr`, at `site` of class `class`
/// of kernel `kernel`): every lane computes the warp's figures, the leader adds them.
#[egpu::helper]
fn request(kernel: u64, site: u32, class: u32, addr: u64, size: u32) {
    let lanes = egpu::helpers::warp_lanes();
    let sectors = egpu::helpers::warp_sectors(addr, size);
    let bytes = lanes as u64 * size as u64;
    if egpu::helpers::warp_leader() {
        let key = Site { kernel, site, class };
        SITES.fetch_add_field(&key, |r| &r.requests, 1);
        SITES.fetch_add_field(&key, |r| &r.lanes, lanes as u64);
        SITES.fetch_add_field(&key, |r| &r.sectors, sectors as u64);
        SITES.fetch_add_field(&key, |r| &r.minimum, (bytes + 31) / 32);
        SITES.fetch_add_field(&key, |r| &r.bytes, bytes);
    }
}

/// Every read of global memory.
#[egpu::probe(device::global_load)]
pub(crate) fn loads(ctx: &MemAccessCtx) {
    request(ctx.kernel_id, ctx.site, ctx.class, ctx.addr, ctx.size);
}

/// Every write of global memory.
#[egpu::probe(device::global_store)]
pub(crate) fn stores(ctx: &MemAccessCtx) {
    request(ctx.kernel_id, ctx.site, ctx.class, ctx.addr, ctx.size);
}

/// Every atomic on global memory.
#[egpu::probe(device::global_atomic)]
pub(crate) fn atomics(ctx: &MemAccessCtx) {
    request(ctx.kernel_id, ctx.site, ctx.class, ctx.addr, ctx.size);
}

egpu::export_probes!(loads, stores, atomics);
