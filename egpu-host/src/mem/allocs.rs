//! Attribution of device accesses to the allocations they fall in (issue 25; the probes, the
//! table and their check on the CPU VM so far): per kernel and allocation, the accesses and
//! bytes read, written and reached by atomics.
//!
//! The host keeps the program's live device allocations as a table sorted by address
//! ([`AllocTable`], from the allocations the far tier's recorder sees:
//! [`crate::cxl::allocation_recorder`], [`crate::cxl::Tracker`]), each with its id: its ordinal
//! among the program's allocations, from 1. A probe at every load, store and atomic searches it
//! (twelve halvings, written out, over at most [`MAX_ALLOCS`] entries) and adds to the value of
//! (kernel, allocation) in `ALLOC_TRAFFIC`; an address in no allocation adds to allocation 0.
//! The table is written entries first, then their number; an access made while it is rewritten
//! may be attributed to allocation 0.
//!
//! Managed memory (`cuMemAllocManaged`, [`AllocRange::MANAGED`]): the probes also keep, per
//! 4 KiB page of it, the first launch whose access reached the page (`FIRST_TOUCH`: the launch's
//! `%gridid`, which grows with each launch of a context, and its kernel), read back as
//! [`super::managed::FirstTouch`] lines. Within one launch the lanes that race for a page's
//! entry all carry the same launch; launches running concurrently on different streams may
//! each claim the pages they share.

use bytemuck::{Pod, Zeroable};
use egpu_ebpf::{MemAccessCtx, MemcpyCtx};
use egpu_macros::{helper, probe};
use egpu_maps::{Array, HashMap, MapError, RawMap};
use egpu_probe::Probe;
use serde::{Deserialize, Serialize};

use crate::cxl::Allocation;

/// The live allocations the table holds (twelve halvings of one more leave none).
pub const MAX_ALLOCS: u32 = 4095;
const _: () = assert!(MAX_ALLOCS < 1 << 12);
/// (kernel, allocation) pairs `ALLOC_TRAFFIC` holds (its slots take 576 KiB, its per-SM copies
/// under the preloaded library 16 times that).
pub const ALLOC_KEYS: u32 = 1 << 12;
/// Pages of managed memory whose first touch `FIRST_TOUCH` holds (512 MiB of 4 KiB pages;
/// pages past it are counted as refused).
pub const TOUCH_PAGES: u32 = 1 << 17;
/// The pages of first touches: 4 KiB (`1 << TOUCH_SHIFT`).
pub const TOUCH_SHIFT: u32 = 12;

/// A live allocation: its addresses `start..end` and its id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct AllocRange {
    /// Its first byte's address.
    pub start: u64,
    /// Past its last byte.
    pub end: u64,
    /// Its ordinal among the program's allocations, from 1.
    pub id: u64,
    /// What kind of memory: [`AllocRange::MANAGED`] or 0.
    pub flags: u64,
}

impl AllocRange {
    /// Managed memory (`cuMemAllocManaged`, `cudaMallocManaged`).
    pub const MANAGED: u64 = 1;
}

/// How many entries of the table are live (slot 0 of `ALLOC_COUNT`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct AllocCount {
    /// The first this many entries.
    pub live: u64,
}

/// A kernel and an allocation (0: an address in none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct AllocKey {
    /// The kernel's id.
    pub kernel: u64,
    /// The allocation's id.
    pub alloc: u64,
}

/// What a kernel's accesses to an allocation came to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable, Serialize, Deserialize)]
pub struct AllocTraffic {
    /// Loads (every class: plain, asynchronous, bulk and tensor copies), per thread.
    pub loads: u64,
    /// Their bytes.
    pub loaded: u64,
    /// Stores.
    pub stores: u64,
    /// Their bytes.
    pub stored: u64,
    /// Atomics.
    pub atomics: u64,
    /// Their operands' bytes.
    pub atomic: u64,
}

/// The live allocations, sorted by address: the first `ALLOC_COUNT[0]`.
pub(super) static ALLOC_RANGES: Array<AllocRange> = Array::with_len(MAX_ALLOCS);
/// How many entries of `ALLOC_RANGES` are live.
pub(super) static ALLOC_COUNT: Array<AllocCount> = Array::with_len(1);
/// Accesses per kernel and allocation.
pub(super) static ALLOC_TRAFFIC: HashMap<AllocKey, AllocTraffic> =
    HashMap::with_capacity(ALLOC_KEYS);

/// The first launch that reached a page of managed memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Touch {
    /// The launch (`%gridid` on the GPU, 0 on the CPU VM).
    pub launch: u64,
    /// Its kernel's id.
    pub kernel: u64,
}

/// Per 4 KiB page of managed memory (the address over 4 KiB), its first touch.
pub(super) static FIRST_TOUCH: HashMap<u64, Touch> = HashMap::with_capacity(TOUCH_PAGES);

/// One halving of the search for the first entry of `ALLOC_RANGES` that ends past `addr`:
/// `state` holds the first candidate (high half) and how many are left (low half). (The far
/// tier's `search_step` over its own table: a Probe Rust helper names the maps it uses, it
/// cannot take one as an argument.)
#[helper(crate = crate::egpu_root)]
fn alloc_step(state: u64, addr: u64) -> u64 {
    let n = state & 0xffff_ffff;
    let mid = (state >> 32) + (n >> 1);
    let end = if n == 0 {
        0
    } else if let Ok(r) = ALLOC_RANGES.get(mid as u32) {
        r.end
    } else {
        0
    };
    if n == 0 {
        state
    } else if end <= addr {
        ((mid + 1) << 32) | (n - (n >> 1) - 1)
    } else {
        ((state >> 32) << 32) | (n >> 1)
    }
}

/// The allocation `addr` falls in: its id in the low 32 bits (0 for none), its flags above.
#[helper(crate = crate::egpu_root)]
fn allocation(addr: u64) -> u64 {
    let count = if let Ok(c) = ALLOC_COUNT.get(0) { c.live } else { 0 };
    let total = if count > MAX_ALLOCS as u64 { MAX_ALLOCS as u64 } else { count };
    let s = alloc_step(total, addr);
    let s = alloc_step(s, addr);
    let s = alloc_step(s, addr);
    let s = alloc_step(s, addr);
    let s = alloc_step(s, addr);
    let s = alloc_step(s, addr);
    let s = alloc_step(s, addr);
    let s = alloc_step(s, addr);
    let s = alloc_step(s, addr);
    let s = alloc_step(s, addr);
    let s = alloc_step(s, addr);
    let s = alloc_step(s, addr);
    let lo = s >> 32;
    if lo < total {
        if let Ok(r) = ALLOC_RANGES.get(lo as u32) {
            if r.start <= addr { r.id | (r.flags << 32) } else { 0 }
        } else {
            0
        }
    } else {
        0
    }
}

/// An access to `addr` by `launch` of `kernel` in the allocation `found` ([`allocation`]'s
/// answer): in managed memory, its page's first touch, if the page has none yet.
#[helper(crate = crate::egpu_root)]
fn first_touch(found: u64, addr: u64, launch: u64, kernel: u64) {
    let page = addr >> TOUCH_SHIFT;
    if found >> 32 == 0 {
    } else if let Some(_t) = FIRST_TOUCH.get(&page) {
    } else {
        FIRST_TOUCH.insert(&page, &Touch { launch, kernel });
    }
}

/// Every read of global memory: its count and bytes to its kernel and allocation (and, in
/// managed memory, its page's first touch).
#[probe(device::global_load, crate = crate::egpu_root)]
fn alloc_loads(ctx: &MemAccessCtx) {
    let found = allocation(ctx.addr);
    let key = AllocKey { kernel: ctx.kernel_id, alloc: found & 0xffff_ffff };
    ALLOC_TRAFFIC.fetch_add_field(&key, |t| &t.loads, 1);
    ALLOC_TRAFFIC.fetch_add_field(&key, |t| &t.loaded, ctx.size as u64);
    first_touch(found, ctx.addr, ctx.launch_id, ctx.kernel_id);
}

/// Every write of global memory but atomics.
#[probe(device::global_store, crate = crate::egpu_root)]
fn alloc_stores(ctx: &MemAccessCtx) {
    let found = allocation(ctx.addr);
    let key = AllocKey { kernel: ctx.kernel_id, alloc: found & 0xffff_ffff };
    ALLOC_TRAFFIC.fetch_add_field(&key, |t| &t.stores, 1);
    ALLOC_TRAFFIC.fetch_add_field(&key, |t| &t.stored, ctx.size as u64);
    first_touch(found, ctx.addr, ctx.launch_id, ctx.kernel_id);
}

/// Every atomic.
#[probe(device::global_atomic, crate = crate::egpu_root)]
fn alloc_atomics(ctx: &MemAccessCtx) {
    let found = allocation(ctx.addr);
    let key = AllocKey { kernel: ctx.kernel_id, alloc: found & 0xffff_ffff };
    ALLOC_TRAFFIC.fetch_add_field(&key, |t| &t.atomics, 1);
    ALLOC_TRAFFIC.fetch_add_field(&key, |t| &t.atomic, ctx.size as u64);
    first_touch(found, ctx.addr, ctx.launch_id, ctx.kernel_id);
}

/// Nothing: its being attached has the preloaded library observe copies' exits, where it adds
/// their bytes to the allocations they reach.
#[probe(host::memcpy::exit, crate = crate::egpu_root)]
fn copies_seen(_ctx: &MemcpyCtx) {}

/// The attribution's device probes: loads, stores, atomics.
pub fn probes() -> [&'static Probe; 3] {
    [alloc_loads::probe(), alloc_stores::probe(), alloc_atomics::probe()]
}

/// The host probe at copies' exits that the `allocs` set's pack carries (it does nothing).
pub fn copy_watcher() -> &'static Probe {
    copies_seen::probe()
}

/// The live allocations as the probes search them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocTable {
    entries: Vec<AllocRange>,
    /// Live allocations left out, the table being full (the latest kept).
    pub left_out: usize,
}

impl AllocTable {
    /// The table of `allocations` (in the order made, a freed one with size 0, as
    /// [`crate::cxl::Tracker::allocations`] gives them): the live ones, each with its ordinal
    /// from 1, sorted by address; the latest [`MAX_ALLOCS`] when more are live.
    pub fn of(allocations: &[Allocation]) -> AllocTable {
        let live: Vec<AllocRange> = (allocations.iter().enumerate())
            .filter(|(_, a)| a.size > 0)
            .map(|(i, a)| AllocRange {
                start: a.addr,
                end: a.addr.saturating_add(a.size),
                id: i as u64 + 1,
                flags: 0,
            })
            .collect();
        AllocTable::sorted(live)
    }

    /// The table of the allocations a recording keeps (each with its id), the freed ones left
    /// out; the latest [`MAX_ALLOCS`] when more are live.
    pub fn of_records(records: &[AllocationRecord]) -> AllocTable {
        let live: Vec<AllocRange> = (records.iter())
            .filter(|a| !a.freed && a.bytes > 0)
            .map(|a| AllocRange {
                start: a.addr,
                end: a.addr.saturating_add(a.bytes),
                id: a.id,
                flags: if a.managed { AllocRange::MANAGED } else { 0 },
            })
            .collect();
        AllocTable::sorted(live)
    }

    /// The table of the `live` ranges (in the order made), the latest [`MAX_ALLOCS`] kept,
    /// sorted by address.
    pub fn sorted(live: Vec<AllocRange>) -> AllocTable {
        let left_out = live.len().saturating_sub(MAX_ALLOCS as usize);
        let mut entries = live[left_out..].to_vec();
        entries.sort_unstable_by_key(|r| r.start);
        AllocTable { entries, left_out }
    }

    /// The entries, sorted by address.
    pub fn entries(&self) -> &[AllocRange] {
        &self.entries
    }

    /// The id of the allocation `addr` falls in (what the probes find), 0 for none.
    pub fn find(&self, addr: u64) -> u64 {
        let i = self.entries.partition_point(|r| r.end <= addr);
        self.entries.get(i).filter(|r| r.start <= addr).map_or(0, |r| r.id)
    }

    /// Writes the table into this process's maps, which the probes search.
    pub fn write(&self) -> Result<(), MapError> {
        self.write_into(&ALLOC_RANGES, &ALLOC_COUNT)
    }

    /// Writes the table into `ranges` and `count` (another process's, opened in shared memory):
    /// the entries first, then their number.
    pub fn write_into(
        &self,
        ranges: &Array<AllocRange>,
        count: &Array<AllocCount>,
    ) -> Result<(), MapError> {
        for (i, r) in self.entries.iter().enumerate() {
            ranges.set(i as u32, r)?;
        }
        count.set(0, &AllocCount { live: self.entries.len() as u64 })
    }
}

/// What `ALLOC_TRAFFIC` holds in this process: per (kernel, allocation), the traffic.
pub fn traffic() -> Vec<(AllocKey, AllocTraffic)> {
    let mut all: Vec<_> = ALLOC_TRAFFIC.iter().collect();
    all.sort_unstable_by_key(|(k, _)| (k.kernel, k.alloc));
    all
}

/// An allocation the program made (`"type":"allocation"`), as the preloaded library kept it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationRecord {
    /// Its ordinal among the program's device allocations, from 1 (the `alloc` of
    /// [`AllocUse`]).
    pub id: u64,
    /// Its device address.
    pub addr: u64,
    /// Its bytes.
    pub bytes: u64,
    /// Whether the program freed it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub freed: bool,
    /// Bytes the program's copies moved into it from host memory.
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub copied_in: u64,
    /// Of those, from pinned host memory (`cuMemAllocHost`, `cudaMallocHost`, `cudaHostAlloc`;
    /// memory registered with `cudaHostRegister` counts as pageable).
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub copied_in_pinned: u64,
    /// Bytes copied out of it to host memory.
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub copied_out: u64,
    /// Of those, to pinned host memory.
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub copied_out_pinned: u64,
    /// Bytes copied into or out of it from or to other device memory.
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub copied_device: u64,
    /// Whether it is managed memory (`cuMemAllocManaged`, `cudaMallocManaged`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub managed: bool,
    /// Of managed memory, the bytes the program prefetched to a device (`cuMemPrefetchAsync`).
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub prefetched_to_device: u64,
    /// The bytes it prefetched to host memory.
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub prefetched_to_host: u64,
    /// The advice the program gave on it (`cuMemAdvise`), in order, repeats left out:
    /// `read mostly`, `not read mostly`, `preferred device 0`, `preferred host`, `no preferred
    /// location`, `accessed by device 0`, `not accessed by device 0`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advice: Vec<String>,
    /// The driver's unified-memory reports (CUPTI), of addresses in it: bytes migrated to a
    /// device.
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub migrated_in: u64,
    /// Bytes migrated to host memory.
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub migrated_out: u64,
    /// GPU page faults.
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub gpu_faults: u64,
    /// CPU page faults.
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub cpu_faults: u64,
    /// Thrashing reports.
    #[serde(default, skip_serializing_if = "super::record::is_zero")]
    pub thrashing: u64,
}

/// A kernel's accesses to an allocation (`"type":"alloc_traffic"`), every launch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocUse {
    /// The kernel's id, in hexadecimal.
    pub kernel: String,
    /// The allocation's id; 0: addresses in no allocation the table held.
    pub alloc: u64,
    /// What the kernel's accesses there came to.
    #[serde(flatten)]
    pub traffic: AllocTraffic,
}

/// The `allocs` set's map as `egpu mem` reads it back (`ALLOC_TRAFFIC`), by kernel, then
/// allocation.
pub(super) fn uses(traffic: RawMap) -> Vec<AllocUse> {
    let Ok(map) = HashMap::<AllocKey, AllocTraffic>::from_raw(traffic) else { return Vec::new() };
    let mut all: Vec<AllocUse> = map
        .iter()
        .map(|(k, traffic)| AllocUse {
            kernel: super::record::kernel_hex(k.kernel),
            alloc: k.alloc,
            traffic,
        })
        .collect();
    all.sort_by(|a, b| (&a.kernel, a.alloc).cmp(&(&b.kernel, b.alloc)));
    all
}

/// The allocations that matter to the table `egpu mem` prints (the `allocs` set): each the
/// kernels' accesses reached, most bytes first, with its size and whether the program freed it,
/// then the allocations made that no access reached and the bytes no allocation held.
pub(super) fn render(recording: &super::Recording) -> String {
    use std::fmt::Write as _;
    let uses = &recording.alloc_traffic;
    if uses.is_empty() && recording.allocations.is_empty() {
        return String::new();
    }
    // Per allocation: read, written, atomic bytes, and the kernels that reached it.
    let mut by: std::collections::BTreeMap<u64, ([u64; 3], usize)> = Default::default();
    for u in uses {
        let (b, kernels) = by.entry(u.alloc).or_default();
        b[0] = b[0].saturating_add(u.traffic.loaded);
        b[1] = b[1].saturating_add(u.traffic.stored);
        b[2] = b[2].saturating_add(u.traffic.atomic);
        *kernels += 1;
    }
    let bytes = super::table::bytes;
    let mut text = format!(
        "allocations: {} made, {} reached by the kernels' accesses\n",
        recording.allocations.len(),
        by.keys().filter(|&&id| id > 0).count()
    );
    let _ = writeln!(
        text,
        "  {:>6} {:>15} {:>12} {:>12} {:>12} {:>8} {:>12} {:>12}",
        "id", "size", "read", "written", "atomic", "kernels", "copied in", "copied out"
    );
    let mut rows: Vec<(&u64, &([u64; 3], usize))> = by.iter().collect();
    rows.sort_by_key(|(id, (b, _))| (std::cmp::Reverse(b[0] + b[1] + b[2]), **id));
    for (&id, &(b, kernels)) in rows {
        let made = recording.allocations.iter().find(|a| a.id == id);
        let size = match (id, made) {
            (0, _) => "(none)".to_owned(),
            (_, Some(a)) if a.freed => format!("{} freed", bytes(a.bytes)),
            (_, Some(a)) => bytes(a.bytes),
            (_, None) => "?".to_owned(),
        };
        let (copied_in, copied_out) = match made {
            Some(a) => (bytes(a.copied_in), bytes(a.copied_out)),
            None => ("-".to_owned(), "-".to_owned()),
        };
        let _ = writeln!(
            text,
            "  {id:>6} {size:>15} {:>12} {:>12} {:>12} {kernels:>8} {copied_in:>12} {copied_out:>12}",
            bytes(b[0]),
            bytes(b[1]),
            bytes(b[2]),
        );
    }
    let untouched: Vec<String> = (recording.allocations.iter())
        .filter(|a| !by.contains_key(&a.id))
        .map(|a| match a.copied_in {
            0 => format!("{} ({})", a.id, bytes(a.bytes)),
            n => format!("{} ({}, {} copied in)", a.id, bytes(a.bytes), bytes(n)),
        })
        .collect();
    if !untouched.is_empty() {
        let _ = writeln!(text, "  never reached: {}", untouched.join(", "));
    }
    text
}
