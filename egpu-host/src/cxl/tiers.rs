//! The far tier's maps and probes, in Probe Rust: [`far_access`] at every global memory access
//! (loads, stores, atomics) makes a request to far memory wait Δ, once per warp-level request;
//! [`far_resolver`] says whether an address is far, for the CPU VM (the tests, the host).

use bytemuck::{Pod, Zeroable};
use egpu_ebpf::helpers::MAX_DELAY_NS;
use egpu_ebpf::{AllocCtx, MemAccessCtx};
use egpu_macros::{helper, probe};
use egpu_maps::{Array, HashMap, RingBuf};
use egpu_probe::Probe;

use super::{BITMAP_WORDS, FarRange, INLINE_RANGES, MAX_RANGES, TierConfig};
use super::{MODE_ALL, MODE_BITMAP, MODE_HASHED, MODE_NONE, MODE_RANGES, PAGE_HASH};

/// The tier's configuration, slot 0.
pub(super) static TIER: Array<TierConfig> = Array::with_len(1);
/// The far ranges, sorted and disjoint: the first `TierConfig::ranges`.
pub(super) static FAR_RANGES: Array<FarRange> = Array::with_len(MAX_RANGES);
/// The far pages' bitmap: page `p` (from `TierConfig::base`) is bit `p % 64` of word `p / 64`.
pub(super) static FAR_PAGES: Array<u64> = Array::with_len(BITMAP_WORDS);
/// The program's device allocations and frees as they succeed: `[address, bytes]`, 0 bytes for
/// a free ([`super::Tracker`] reads them and resolves the policy).
pub(super) static ALLOCS: RingBuf<[u64; 2]> = RingBuf::with_capacity(4096);

/// Each device allocation and free that succeeds, into `ALLOCS`.
#[probe(host::alloc::exit, crate = crate::egpu_root)]
fn allocations(ctx: &AllocCtx) {
    if ctx.result == 0 && ctx.kind == 0 {
        let bytes = if ctx.op == 0 { ctx.bytes } else { 0 };
        ALLOCS.output(&[ctx.ptr, bytes]);
    }
}

/// The host probe that records the program's allocations for the policy
/// ([`super::Tracker`]).
pub fn allocation_recorder() -> &'static Probe {
    allocations::probe()
}

// Nine halvings of MAX_RANGES + 1 candidates leave none.
const _: () = assert!(MAX_RANGES < 1 << 9);

/// One step of the binary search for the first range of `FAR_RANGES` that ends past `addr`:
/// `state` holds the first candidate (high half) and how many candidates are left (low half).
#[helper(crate = crate::egpu_root)]
fn search_step(state: u64, addr: u64) -> u64 {
    let n = state & 0xffff_ffff;
    let mid = (state >> 32) + (n >> 1);
    // `mid` is below the table's length: a lookup cannot fail.
    let end = if n == 0 {
        0
    } else if let Ok(r) = FAR_RANGES.get(mid as u32) {
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

/// Whether `addr` is among the first `count` ranges of `FAR_RANGES`: a binary search for the
/// first range that ends past it, then whether it starts at or before it. Nine steps cover
/// [`MAX_RANGES`], written out rather than looped: a loop whose body branches this much would
/// become a `bpf_loop` callback, whose pointer into the probe's frame keeps that frame in local
/// memory on the GPU (the translation keeps a frame in registers only when no pointer to it
/// is passed down).
#[helper(crate = crate::egpu_root)]
fn in_ranges(addr: u64, count: u64) -> bool {
    let total = if count > MAX_RANGES as u64 { MAX_RANGES as u64 } else { count };
    let s = search_step(total, addr);
    let s = search_step(s, addr);
    let s = search_step(s, addr);
    let s = search_step(s, addr);
    let s = search_step(s, addr);
    let s = search_step(s, addr);
    let s = search_step(s, addr);
    let s = search_step(s, addr);
    let s = search_step(s, addr);
    let lo = s >> 32;
    if lo < total {
        if let Ok(r) = FAR_RANGES.get(lo as u32) { r.start <= addr } else { false }
    } else {
        false
    }
}

/// Whether `addr`'s page is set in `FAR_PAGES`.
#[helper(crate = crate::egpu_root)]
fn in_bitmap(addr: u64, base: u64, pages: u64, shift: u64) -> bool {
    let page = (addr - base) >> shift;
    if addr >= base && page < pages {
        let word = (page >> 6) as u32;
        if let Ok(w) = FAR_PAGES.get(word) { (w >> (page & 63)) & 1 == 1 } else { false }
    } else {
        false
    }
}

/// Whether `addr` is far. The range table is tested for first, the mode of most policies
/// (each test is on the far path's time); `none`, tested by the caller, is among the others.
#[helper(crate = crate::egpu_root)]
fn far(addr: u64) -> bool {
    if let Ok(c) = TIER.get(0) {
        let mode = c.mode;
        if mode == MODE_RANGES {
            // Outside the far ranges' span nothing is far; up to four ranges are tested in
            // place, from the configuration's registers; more are searched for.
            if addr < c.base || addr >= c.end {
                false
            } else if c.ranges <= INLINE_RANGES as u64 {
                // Unused slots are empty (start = end = 0).
                (addr >= c.first[0].start && addr < c.first[0].end)
                    || (addr >= c.first[1].start && addr < c.first[1].end)
                    || (addr >= c.first[2].start && addr < c.first[2].end)
                    || (addr >= c.first[3].start && addr < c.first[3].end)
            } else {
                in_ranges(addr, c.ranges)
            }
        } else if mode == MODE_ALL {
            true
        } else if mode == MODE_BITMAP {
            in_bitmap(addr, c.base, c.pages, c.page_shift)
        } else if mode == MODE_HASHED {
            (addr >> c.page_shift) * PAGE_HASH < c.threshold
        } else {
            false
        }
    } else {
        false
    }
}

/// SMs `LINKS` has a link for, by `%smid` (the H200 has 132).
const LINK_SLOTS: u32 = 256;
/// Words from one SM's link to the next: one 128-byte line each. Links side by side, 16 to a
/// line, made every SM's requests contend with 15 other SMs' at one L2 line: on the H200 saxpy
/// with all of its memory far moved 15.5 GB/s under caps of 35 and 142 GB/s alike.
const LINK_STRIDE: u32 = 16;
/// Per SM (by `%smid`, a word every [`LINK_STRIDE`]), when its link to far memory is next free
/// (`bpf_ktime_get_ns`: on the GPU `%globaltimer`, one clock for all SMs), with a bandwidth cap.
pub(super) static LINKS: Array<u64> = Array::with_len(LINK_SLOTS * LINK_STRIDE);

/// How far a link's time may fall behind the clock before it starts again from now: the
/// bucket's depth, what a link idle that long may carry at once (10 µs of its rate).
const LINK_DEPTH_NS: u64 = 10_000;

/// The time a far request of `size` bytes per lane waits for its SM's link, with the bandwidth
/// cap `per_byte` (`TierConfig::link_ns_per_byte`; 0: none, no wait): its lanes' bytes take
/// their time on the link from when it is free (a token bucket per SM, kept as the time the
/// link is next free). The lowest lane charges the request: an add, then a read, so another
/// warp's request added between them counts in this one's wait too (it waits the longer). A
/// link whose time fell more than [`LINK_DEPTH_NS`] behind starts again from now, by a plain
/// store, which can lose requests added meanwhile: only after that long idle, as restarting
/// whenever a link looked free let the stores of warps that read it free undo the others'
/// adds, and no cap held (on the H200 saxpy moved 75 GB/s under caps of 35 and 142).
#[helper(crate = crate::egpu_root)]
fn queued(size: u64, per_byte: u64) -> u64 {
    let mut wait = 0;
    // The request's lanes, counted before the lowest one goes on alone.
    let lanes = egpu_vm::native::warp_lanes() as u64;
    if per_byte != 0 && egpu_vm::native::warp_leader() {
        let bytes = lanes * size;
        let cost = (bytes * per_byte) >> 16;
        let sm = (egpu_vm::native::cpu_id() & (LINK_SLOTS - 1)) * LINK_STRIDE;
        let now = egpu_vm::native::ktime_ns();
        LINKS.fetch_add(sm, cost);
        if let Ok(free) = LINKS.get(sm) {
            // This request's turn on the link starts at `free - cost`.
            if free + LINK_DEPTH_NS < now + cost {
                LINKS.set(sm, &(now + cost));
            } else if free > now + cost {
                wait = free - cost - now;
            }
        }
    }
    wait
}

/// A request to far memory waits Δ: the lanes of a warp-level request whose addresses are far
/// spin until Δ past the probe's start (`delay_ns_since` a clock read past the mode test) and
/// the others wait for them where the warp's lanes meet again, at the probe's end, so the
/// request waits Δ once. The lookup's own time is part of Δ, so a far request takes Δ longer
/// than a near one (when the lookup is shorter than Δ). Every test that finds the address far
/// calls the wait itself, with no boolean carried out of the lookup: each merge of such a
/// value is a branch on the far path, whose length is what the wait cannot hide. With nothing
/// far, the probe is a test of the mode, in a register, and no clock read: one at every probe's
/// start kept `ptxas` from moving kernels' loads across it (on the H200, saxpy with nothing far
/// 1.46x in process against 1.06x).
#[helper(crate = crate::egpu_root)]
fn wait_if_far(addr: u64) {
    if let Ok(c) = TIER.get(0) {
        // Read first, so that they are among the configuration's words kept in registers.
        let mode = c.mode;
        let delta = c.delay_ns;
        if mode != MODE_NONE {
            let start = egpu_vm::native::clock();
            // A few ranges (the common case), tested in place, within their span (one test
            // for most near addresses); an unused range is empty.
            if mode == MODE_RANGES && c.ranges <= INLINE_RANGES as u64 {
                if addr >= c.base
                    && addr < c.end
                    && ((addr >= c.first[0].start && addr < c.first[0].end)
                        || (addr >= c.first[1].start && addr < c.first[1].end)
                        || (addr >= c.first[2].start && addr < c.first[2].end)
                        || (addr >= c.first[3].start && addr < c.first[3].end))
                {
                    // Tier::resolve keeps Δ at most MAX_DELAY_NS: the mask changes nothing.
                    let _since = egpu_vm::native::delay_ns_since(start, delta & MAX_DELAY_NS);
                }
            } else if far(addr) {
                let _since = egpu_vm::native::delay_ns_since(start, delta & MAX_DELAY_NS);
            }
        }
    }
}

/// [`wait_if_far`] with the bandwidth cap: a far request waits Δ, then the time it waits for
/// its SM's link ([`queued`]). Apart, with the plain lookup ([`far`]): the link's code in the
/// probe above took saxpy's instrumented kernel from 32 registers to 52, and its far path
/// longer, with no cap.
#[helper(crate = crate::egpu_root)]
fn wait_if_far_capped(addr: u64, size: u64) {
    if let Ok(c) = TIER.get(0) {
        let mode = c.mode;
        let delta = c.delay_ns;
        let per_byte = c.link_ns_per_byte;
        if mode != MODE_NONE {
            let start = egpu_vm::native::clock();
            if far(addr) {
                let _since = egpu_vm::native::delay_ns_since(start, delta + queued(size, per_byte));
            }
        }
    }
}

#[probe(device::global_load, crate = crate::egpu_root)]
fn far_load(ctx: &MemAccessCtx) {
    wait_if_far(ctx.addr);
}

#[probe(device::global_store, crate = crate::egpu_root)]
fn far_store(ctx: &MemAccessCtx) {
    wait_if_far(ctx.addr);
}

#[probe(device::global_atomic, crate = crate::egpu_root)]
fn far_atomic(ctx: &MemAccessCtx) {
    wait_if_far(ctx.addr);
}

#[probe(device::global_load, crate = crate::egpu_root)]
fn capped_load(ctx: &MemAccessCtx) {
    wait_if_far_capped(ctx.addr, ctx.size as u64);
}

#[probe(device::global_store, crate = crate::egpu_root)]
fn capped_store(ctx: &MemAccessCtx) {
    wait_if_far_capped(ctx.addr, ctx.size as u64);
}

#[probe(device::global_atomic, crate = crate::egpu_root)]
fn capped_atomic(ctx: &MemAccessCtx) {
    wait_if_far_capped(ctx.addr, ctx.size as u64);
}

/// The emulation's device probes: loads, stores and atomics to far memory wait Δ (a tier's
/// bandwidth cap, [`super::Tier::with_bandwidth`], is left alone: [`far_access_capped`]).
pub fn far_access() -> [&'static Probe; 3] {
    [far_load::probe(), far_store::probe(), far_atomic::probe()]
}

/// The emulation's device probes with the bandwidth cap: far requests wait Δ, then for their
/// SM's link when the tier caps it.
pub fn far_access_capped() -> [&'static Probe; 3] {
    [capped_load::probe(), capped_store::probe(), capped_atomic::probe()]
}

/// Kernels the count run counts accesses of.
const COUNTED_KERNELS: u32 = 4096;

/// The count run's accesses per kernel (by `kernel_id`): every load, store and atomic lane.
pub(super) static CXL_ACCESSES: HashMap<u64, u64> = HashMap::with_capacity(COUNTED_KERNELS);
/// The count run's accesses to far memory per kernel.
pub(super) static CXL_FAR: HashMap<u64, u64> = HashMap::with_capacity(COUNTED_KERNELS);

/// Counts an access of `kernel`'s, and whether it was far, by the device probe's own lookup
/// (the translation adds a warp's lanes up before the atomic add).
#[helper(crate = crate::egpu_root)]
fn count_access(kernel: u64, addr: u64) {
    CXL_ACCESSES.fetch_add(&kernel, 1);
    if far(addr) {
        CXL_FAR.fetch_add(&kernel, 1);
    }
}

#[probe(device::global_load, crate = crate::egpu_root)]
fn count_load(ctx: &MemAccessCtx) {
    count_access(ctx.kernel_id, ctx.addr);
}

#[probe(device::global_store, crate = crate::egpu_root)]
fn count_store(ctx: &MemAccessCtx) {
    count_access(ctx.kernel_id, ctx.addr);
}

#[probe(device::global_atomic, crate = crate::egpu_root)]
fn count_atomic(ctx: &MemAccessCtx) {
    count_access(ctx.kernel_id, ctx.addr);
}

/// The count run's device probes: each kernel's accesses, and those to far memory, counted
/// (`CXL_ACCESSES`, `CXL_FAR`) with no wait: what `egpu cxl` runs a third time for the share
/// of far accesses, apart from the timed runs, whose times counting would change.
pub fn far_counter() -> [&'static Probe; 3] {
    [count_load::probe(), count_store::probe(), count_atomic::probe()]
}

/// An address to resolve ([`far_resolver`]'s context).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Address {
    /// The address.
    pub addr: u64,
}

/// A far request, for [`link_queue`]: its bytes per lane.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Request {
    /// Its bytes (one lane on the CPU).
    pub size: u64,
}

/// Returns what a far request of `ctx.size` bytes waits for its link, by the device probe's own
/// token bucket (on the CPU VM, the link of the CPU the call runs on).
#[probe(user, crate = crate::egpu_root)]
fn queue(ctx: &mut Request) -> u64 {
    let per_byte = if let Ok(c) = TIER.get(0) { c.link_ns_per_byte } else { 0 };
    queued(ctx.size, per_byte)
}

/// The probe that charges a far request to its link as the device probe does, for the CPU VM:
/// it returns the time the request waits for the link (0: it was free, or no cap).
pub fn link_queue() -> &'static Probe {
    queue::probe()
}

/// Returns the wait of a request to `ctx.addr` (0: not far), by the device probe's own lookup.
#[probe(user, crate = crate::egpu_root)]
fn resolve(ctx: &mut Address) -> u64 {
    let delta = if let Ok(c) = TIER.get(0) { c.delay_ns } else { 0 };
    if far(ctx.addr) { delta } else { 0 }
}

/// The probe that resolves an address as the device probe does, for the CPU VM: it returns the
/// wait of a request there, 0 when the address is not far.
pub fn far_resolver() -> &'static Probe {
    resolve::probe()
}
