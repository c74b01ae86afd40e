//! The `pages` set: per kernel, the accesses to each page of global memory (of 4 KiB, 64 KiB or
//! 2 MiB, chosen when the pack is made), and the atomics per 8-byte address, where threads
//! contend. A probe per page size, each adding 1 to its access's page: a thread remembers the
//! page of its last lookup and where its value is (the kernel's id, the key's first word, is a
//! constant of the kernel: `CacheKey::Second`), so a lookup of that page again is a compare;
//! another page's search reads its home slot from the SM's L1 cache first (a (kernel, page)
//! entry never moves); and the lanes of a warp on one page make one add of their number (the
//! translator's warp-level add of a constant). (Calling `egpu::helpers::warp_peers` for that count in the probe was
//! measured slower on the H200: 5.8× against 3.8× on the grid-stride saxpy.)

use bytemuck::{Pod, Zeroable};
use egpu_ebpf::MemAccessCtx;
use egpu_macros::probe;
use egpu_maps::HashMap;
use egpu_probe::Probe;

/// Pages the `pages` map holds, every kernel's (a GPU part of the map has 16 copies, one per
/// group of SMs: 17 MB with these; accesses past it are refused and counted). 2 MiB pages cover
/// 32 GiB with it.
pub const PAGE_KEYS: u32 = 1 << 14;
/// Addresses the atomics map holds.
pub const ADDRESS_KEYS: u32 = 1 << 12;

/// A page of a kernel: its number (the address over the page size).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Page {
    /// The kernel's id.
    pub kernel: u64,
    /// The page's number.
    pub page: u64,
}

/// An 8-byte aligned address a kernel's atomics reach.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Address {
    /// The kernel's id.
    pub kernel: u64,
    /// The address, its low 3 bits cleared.
    pub addr: u64,
}

/// Accesses per kernel and page.
pub(super) static PAGES: HashMap<Page, u64> = HashMap::with_capacity(PAGE_KEYS);
/// Atomics per kernel and 8-byte address.
pub(super) static CONTENDED: HashMap<Address, u64> = HashMap::with_capacity(ADDRESS_KEYS);

/// The page sizes the set counts by, as shifts: 4 KiB, 64 KiB, 2 MiB.
pub const PAGE_SHIFTS: [u32; 3] = [12, 16, 21];

macro_rules! page_probes {
    ($($shift:literal: $loads:ident, $stores:ident, $atomics:ident;)*) => {
        $(
            /// Every read of global memory: 1 to its page.
            #[probe(device::global_load, crate = crate::egpu_root)]
            fn $loads(ctx: &MemAccessCtx) {
                PAGES.fetch_add(&Page { kernel: ctx.kernel_id, page: ctx.addr >> $shift }, 1);
            }

            /// Every write of global memory: 1 to its page.
            #[probe(device::global_store, crate = crate::egpu_root)]
            fn $stores(ctx: &MemAccessCtx) {
                PAGES.fetch_add(&Page { kernel: ctx.kernel_id, page: ctx.addr >> $shift }, 1);
            }

            /// Every atomic: 1 to its page and 1 to its address.
            #[probe(device::global_atomic, crate = crate::egpu_root)]
            fn $atomics(ctx: &MemAccessCtx) {
                PAGES.fetch_add(&Page { kernel: ctx.kernel_id, page: ctx.addr >> $shift }, 1);
                CONTENDED.fetch_add(&Address { kernel: ctx.kernel_id, addr: ctx.addr & !7 }, 1);
            }
        )*

        /// The `pages` probes for pages of `1 << shift` bytes (one of [`PAGE_SHIFTS`]).
        pub(super) fn pages(shift: u32) -> Option<[&'static Probe; 3]> {
            match shift {
                $($shift => Some([$loads::probe(), $stores::probe(), $atomics::probe()]),)*
                _ => None,
            }
        }
    };
}

page_probes! {
    12: pages_4k_loads, pages_4k_stores, pages_4k_atomics;
    16: pages_64k_loads, pages_64k_stores, pages_64k_atomics;
    21: pages_2m_loads, pages_2m_stores, pages_2m_atomics;
}
