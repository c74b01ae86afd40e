//! A slower memory tier, emulated by latency injection (the eGPU paper's CXL.mem use case):
//! some of a program's memory is called far, and each warp-level request that touches it waits
//! Δ = far latency − local latency (`egpu_delay_ns`) before it goes on.
//!
//! Which memory is far is a [`Policy`], chosen by allocation (every allocation, those of at
//! least a size, the Nth ones, ranges the program marks) or by page (a fraction of pages chosen
//! by hash). A policy is resolved over the program's allocations into a [`Tier`]: what the
//! device probe reads, in maps of one layout that host code rewrites while the program runs
//! ([`Tier::write`]):
//!
//! - `TIER` (an array of one [`TierConfig`]): the mode, Δ, and each mode's figures;
//! - `FAR_RANGES` ([`FarRange`]s, sorted and disjoint, at most [`MAX_RANGES`]): searched in
//!   at most 9 steps (a binary search of a small sorted table) when there are more than
//!   [`INLINE_RANGES`], which the configuration holds itself;
//! - `FAR_PAGES` (a bitmap of pages from a base address, at most [`BITMAP_WORDS`] words):
//!   one lookup.
//!
//! Up to four ranges cost compares; more cost up to nine dependent lookups per access; a bitmap
//! costs one and holds a window of [`BITMAP_WORDS`] × 64 pages. The probes are in `tiers.rs`;
//! [`CxlSession`] attaches them in process.

mod session;
mod tiers;

use std::fmt;
use std::str::FromStr;

use bytemuck::{Pod, Zeroable};
use egpu_ebpf::helpers::MAX_DELAY_NS;
use egpu_maps::{Array, RingBuf};
use egpu_probe::Probe;

pub use session::{CxlError, CxlSession};
pub use tiers::{
    Address, Request, allocation_recorder, far_access, far_access_capped, far_counter,
    far_resolver, link_queue,
};

/// Far ranges the range table holds.
pub const MAX_RANGES: u32 = 256;
/// Words of the page bitmap: 2^21 pages (128 GiB at 64 KiB pages).
pub const BITMAP_WORDS: u32 = 32768;

/// [`TierConfig::mode`]: no memory is far.
pub const MODE_NONE: u64 = 0;
/// Far memory is the ranges of `FAR_RANGES`.
pub const MODE_RANGES: u64 = 1;
/// Far memory is the pages set in `FAR_PAGES`.
pub const MODE_BITMAP: u64 = 2;
/// A page is far when its hash is below [`TierConfig::threshold`].
pub const MODE_HASHED: u64 = 3;
/// All memory is far.
pub const MODE_ALL: u64 = 4;

/// The multiplier of a page's hash (Fibonacci hashing: the page number times 2^64 / φ).
pub const PAGE_HASH: u64 = 0x9E37_79B9_7F4A_7C15;

/// What the device probe reads of the far tier: slot 0 of `TIER`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct TierConfig {
    /// How far memory is found: [`MODE_NONE`], [`MODE_RANGES`], [`MODE_BITMAP`],
    /// [`MODE_HASHED`] or [`MODE_ALL`].
    pub mode: u64,
    /// Δ: what a request to far memory waits, in nanoseconds (at most [`MAX_DELAY_NS`]).
    pub delay_ns: u64,
    /// Ranges in `FAR_RANGES` (ranges).
    pub ranges: u64,
    /// The address of the bitmap's page 0 (bitmap); the first far byte (ranges).
    pub base: u64,
    /// Pages the bitmap covers (bitmap).
    pub pages: u64,
    /// log2 of the page size (bitmap, hashed).
    pub page_shift: u64,
    /// A page whose number times [`PAGE_HASH`] is below this is far (hashed).
    pub threshold: u64,
    /// The address past the last far byte (ranges): an access outside `base..end` is not
    /// searched for.
    pub end: u64,
    /// The first [`INLINE_RANGES`] far ranges (ranges), tested in turn when there are no more
    /// than that: the probe reads them once per thread, with the rest of this configuration
    /// (words of a one-slot array no probe writes), so a few ranges cost no lookup.
    pub first: [FarRange; INLINE_RANGES],
    /// The bandwidth cap: nanoseconds per byte of far requests through each SM's link, in fixed
    /// point with 16 fraction bits (0: no cap). See [`Tier::with_bandwidth`].
    pub link_ns_per_byte: u64,
}

/// Far ranges [`TierConfig::first`] holds.
pub const INLINE_RANGES: usize = 4;

/// Far memory from `start` up to `end` (excluded).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct FarRange {
    /// Its first byte's address.
    pub start: u64,
    /// The address past its last byte.
    pub end: u64,
}

/// An allocation of the program's: where, how large (in the order the program made them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Its device address.
    pub addr: u64,
    /// Its bytes.
    pub size: u64,
}

/// Which memory is far.
#[derive(Clone, Debug, PartialEq)]
pub enum Policy {
    /// None: the emulation's probes run, nothing waits (what they cost alone).
    None,
    /// Every allocation (all memory).
    All,
    /// Allocations of at least this many bytes.
    AtLeast(u64),
    /// The allocations with these ordinals (1: the program's first).
    Nth(Vec<u64>),
    /// This fraction of pages (0 to 1), chosen by a hash of the page number: pages of the
    /// bitmap's size with [`Lookup::Bitmap`], of 64 KiB with [`Lookup::Ranges`] (no table is
    /// searched either way).
    Pages(f64),
    /// These ranges, `[start, end)`.
    Ranges(Vec<(u64, u64)>),
    /// The ranges the program marks itself (`egpu_cxl_mark` of the preloaded library), which a
    /// [`Tracker`] reads from its records; with no tracker, none.
    Marked,
}

/// How far memory is looked up, where a policy gives ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A sorted table of ranges, searched.
    Ranges,
    /// A bitmap of pages of `1 << page_shift` bytes.
    Bitmap {
        /// log2 of the page size: 12 (4 KiB) to 30 (1 GiB).
        page_shift: u32,
    },
}

/// Why a policy cannot be read or resolved.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TierError {
    /// The text names no policy, or names one wrongly.
    #[error(
        "`{0}` is not a far-memory policy: all, none, size:BYTES (allocations of at least \
         that many bytes, K/M/G suffixes), nth:N[,N..] (the Nth allocations, from 1), \
         pages:FRACTION (0 to 1, pages chosen by hash), ranges:START-END[,START-END..] \
         (hex or decimal addresses) or marked (the ranges the program marks with \
         egpu_cxl_mark)"
    )]
    Syntax(String),
    /// More ranges than the table holds.
    #[error("{0} far ranges, over the {MAX_RANGES} the range table holds: use the bitmap")]
    TooManyRanges(usize),
    /// The ranges span more pages than the bitmap holds.
    #[error(
        "the far ranges span {pages} pages of {page} bytes, over the {} the bitmap holds: use \
         larger pages or the range table",
        BITMAP_WORDS as u64 * 64
    )]
    BitmapTooSmall {
        /// Pages the ranges span.
        pages: u64,
        /// The page size.
        page: u64,
    },
    /// A page size out of the bitmap's range.
    #[error("pages of 2^{0} bytes: the bitmap takes 2^12 (4 KiB) to 2^30 (1 GiB)")]
    PageSize(u32),
    /// Δ over what one wait may be.
    #[error(
        "a far latency of {0} ns over local memory's is over the {MAX_DELAY_NS} ns one wait may take"
    )]
    Delay(u64),
    /// A map of the tier could not be written.
    #[error("the tier's map `{0}` could not be written: {1}")]
    Map(&'static str, String),
}

impl FromStr for Policy {
    type Err = TierError;

    fn from_str(text: &str) -> Result<Policy, TierError> {
        let wrong = || TierError::Syntax(text.to_owned());
        let t = text.trim();
        let (kind, arg) = t.split_once(':').unwrap_or((t, ""));
        let list = |arg: &str| -> Result<Vec<u64>, TierError> {
            arg.split(',').map(|w| number(w.trim()).ok_or_else(wrong)).collect()
        };
        Ok(match (kind, arg.is_empty()) {
            ("none", true) => Policy::None,
            ("all", true) => Policy::All,
            ("marked", true) => Policy::Marked,
            ("size", false) => Policy::AtLeast(number(arg).ok_or_else(wrong)?),
            ("nth", false) => {
                let ns = list(arg)?;
                if ns.contains(&0) {
                    return Err(wrong());
                }
                Policy::Nth(ns)
            }
            ("pages", false) => match arg.parse::<f64>() {
                Ok(f) if (0.0..=1.0).contains(&f) => Policy::Pages(f),
                _ => return Err(wrong()),
            },
            ("ranges", false) => Policy::Ranges(
                arg.split(',')
                    .map(|r| {
                        let (a, b) = r.trim().split_once('-').ok_or_else(wrong)?;
                        let (a, b) = (number(a).ok_or_else(wrong)?, number(b).ok_or_else(wrong)?);
                        if a < b { Ok((a, b)) } else { Err(wrong()) }
                    })
                    .collect::<Result<_, _>>()?,
            ),
            _ => return Err(wrong()),
        })
    }
}

/// A number of bytes or an address as policies and `egpu cxl` write them: decimal, `0x` hex, or
/// decimal with a K, M, G or T suffix (powers of 1024).
pub fn number(w: &str) -> Option<u64> {
    let w = w.trim();
    if let Some(hex) = w.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok();
    }
    let (digits, shift) = match w.char_indices().last()? {
        (i, 'K' | 'k') => (&w[..i], 10),
        (i, 'M' | 'm') => (&w[..i], 20),
        (i, 'G' | 'g') => (&w[..i], 30),
        (i, 'T' | 't') => (&w[..i], 40),
        _ => (w, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::None => write!(f, "none"),
            Policy::All => write!(f, "all"),
            Policy::Marked => write!(f, "marked"),
            Policy::AtLeast(n) => write!(f, "size:{n}"),
            Policy::Nth(ns) => {
                let ns: Vec<String> = ns.iter().map(u64::to_string).collect();
                write!(f, "nth:{}", ns.join(","))
            }
            Policy::Pages(p) => write!(f, "pages:{p}"),
            Policy::Ranges(rs) => {
                let rs: Vec<String> = rs.iter().map(|(a, b)| format!("{a:#x}-{b:#x}")).collect();
                write!(f, "ranges:{}", rs.join(","))
            }
        }
    }
}

/// A policy resolved: what the tier's maps are to hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tier {
    /// Slot 0 of `TIER`.
    pub config: TierConfig,
    /// `FAR_RANGES`' first `config.ranges` entries.
    pub ranges: Vec<FarRange>,
    /// `FAR_PAGES`' first words (the others 0).
    pub bitmap: Vec<u64>,
}

impl Tier {
    /// `policy` over `allocations` (in the order the program made them), looked up as `lookup`
    /// says where the policy gives ranges, each far request waiting `delay_ns`.
    pub fn resolve(
        policy: &Policy,
        allocations: &[Allocation],
        lookup: Lookup,
        delay_ns: u64,
    ) -> Result<Tier, TierError> {
        if delay_ns > MAX_DELAY_NS {
            return Err(TierError::Delay(delay_ns));
        }
        let config = TierConfig { delay_ns, ..TierConfig::default() };
        let plain = |mode| Tier::plain(config, mode);
        let ranges: Vec<(u64, u64)> = match policy {
            Policy::None | Policy::Marked => return Ok(plain(MODE_NONE)),
            Policy::All => return Ok(plain(MODE_ALL)),
            Policy::Pages(fraction) => {
                let Lookup::Bitmap { page_shift } = lookup else {
                    // The hash needs a page size: the bitmap's, or 64 KiB.
                    return Ok(hashed(config, 16, *fraction));
                };
                check_page(page_shift)?;
                return Ok(hashed(config, page_shift, *fraction));
            }
            Policy::AtLeast(n) => allocations
                .iter()
                .filter(|a| a.size >= *n)
                .map(|a| (a.addr, a.addr.saturating_add(a.size)))
                .collect(),
            Policy::Nth(ns) => (allocations.iter().enumerate())
                .filter(|(i, _)| ns.contains(&(*i as u64 + 1)))
                .map(|(_, a)| (a.addr, a.addr.saturating_add(a.size)))
                .collect(),
            Policy::Ranges(rs) => rs.clone(),
        };
        let ranges = merged(ranges);
        match lookup {
            Lookup::Ranges => {
                if ranges.len() > MAX_RANGES as usize {
                    return Err(TierError::TooManyRanges(ranges.len()));
                }
                let (Some(first), Some(last)) = (ranges.first(), ranges.last()) else {
                    return Ok(plain(MODE_NONE));
                };
                let mut inline = [FarRange::default(); INLINE_RANGES];
                for (slot, r) in inline.iter_mut().zip(&ranges) {
                    *slot = *r;
                }
                let config = TierConfig {
                    mode: MODE_RANGES,
                    ranges: ranges.len() as u64,
                    base: first.start,
                    end: last.end,
                    first: inline,
                    ..config
                };
                Ok(Tier { config, ranges, bitmap: vec![] })
            }
            Lookup::Bitmap { page_shift } => bitmap(config, &ranges, page_shift),
        }
    }

    /// This tier with far requests capped at `bytes_per_second` per SM (0: no cap): a token
    /// bucket per SM. Each warp-level request to far memory takes its lanes' bytes' time on its
    /// SM's link (`LINKS`, when the link is next free, by `%globaltimer`); one that finds the
    /// link busy waits the time until it is free on top of Δ. A link of `B` bytes/s shared by
    /// `S` SMs is `B / S` per SM.
    pub fn with_bandwidth(mut self, bytes_per_second: u64) -> Tier {
        self.config.link_ns_per_byte = match bytes_per_second {
            0 => 0,
            // 10^9 ns × 2^16 per second, at least 1 (16 fraction bits: 2^-16 ns per byte).
            rate => {
                ((1_000_000_000u128 << 16) / u128::from(rate)).clamp(1, u128::from(u32::MAX)) as u64
            }
        };
        self
    }

    /// A tier of `config` in `mode`, with no table.
    fn plain(config: TierConfig, mode: u64) -> Tier {
        Tier { config: TierConfig { mode, ..config }, ranges: vec![], bitmap: vec![] }
    }

    /// Whether `addr` is far, as the tier says: what the device probe computes, written again
    /// here for host code (a report of what is far) and the tests.
    pub fn is_far(&self, addr: u64) -> bool {
        let c = &self.config;
        match c.mode {
            MODE_ALL => true,
            MODE_RANGES => self.ranges.iter().any(|r| r.start <= addr && addr < r.end),
            MODE_BITMAP => {
                let page = addr.wrapping_sub(c.base) >> c.page_shift;
                addr >= c.base
                    && page < c.pages
                    && self
                        .bitmap
                        .get((page >> 6) as usize)
                        .is_some_and(|w| w >> (page & 63) & 1 == 1)
            }
            MODE_HASHED => (addr >> c.page_shift).wrapping_mul(PAGE_HASH) < c.threshold,
            _ => false,
        }
    }

    /// How many of the `bytes` at `addr` are far, as [`is_far`](Self::is_far) says of each
    /// (by range where the tier has ranges, by page where it has pages).
    pub fn far_bytes(&self, addr: u64, bytes: u64) -> u64 {
        let end = addr.saturating_add(bytes);
        let c = &self.config;
        match c.mode {
            MODE_ALL => bytes,
            MODE_RANGES => {
                (self.ranges.iter()).map(|r| end.min(r.end).saturating_sub(addr.max(r.start))).sum()
            }
            MODE_BITMAP | MODE_HASHED => {
                let page = 1u64 << c.page_shift.min(63);
                let mut far = 0;
                let mut at = addr;
                while at < end {
                    let next = ((at / page) + 1).saturating_mul(page).min(end);
                    if self.is_far(at) {
                        far += next - at;
                    }
                    at = next;
                }
                far
            }
            _ => 0,
        }
    }

    /// Writes the tier into its maps in this process, where the probes read it: the ranges and
    /// bitmap words first, the configuration last (a probe that reads the new configuration
    /// finds its tables written).
    pub fn write(&self) -> Result<(), TierError> {
        self.write_into(&tiers::TIER, &tiers::FAR_RANGES, &tiers::FAR_PAGES)
    }

    /// [`write`](Self::write) into another process's maps (opened in shared memory:
    /// [`TierMaps::open`]).
    pub fn write_to(&self, maps: &TierMaps) -> Result<(), TierError> {
        self.write_into(&maps.tier, &maps.ranges, &maps.pages)
    }

    fn write_into(
        &self,
        tier: &Array<TierConfig>,
        ranges: &Array<FarRange>,
        pages: &Array<u64>,
    ) -> Result<(), TierError> {
        let map =
            |name: &'static str| move |e: egpu_maps::MapError| TierError::Map(name, e.to_string());
        for (i, r) in self.ranges.iter().enumerate() {
            ranges.set(i as u32, r).map_err(map("FAR_RANGES"))?;
        }
        for i in 0..BITMAP_WORDS {
            let word = self.bitmap.get(i as usize).copied().unwrap_or(0);
            pages.set(i, &word).map_err(map("FAR_PAGES"))?;
        }
        tier.set(0, &self.config).map_err(map("TIER"))
    }
}

/// The name of the ring of allocation records (`[address, bytes]`) in the far tier's pack.
pub const ALLOCS_MAP: &str = "ALLOCS";

/// The bit of a record's bytes that makes it a range the program marked (`Policy::Marked`), not
/// an allocation.
pub const MARKED: u64 = 1 << 63;

/// The record of a range the program marks far (0 bytes: the mark at `addr` taken back), as
/// the preloaded library's `egpu_cxl_mark` writes it into the `ALLOCS` ring: `[addr, bytes |
/// MARKED]`, in the ring's byte order.
pub fn marked_record(addr: u64, bytes: u64) -> [u8; 16] {
    let mut record = [0u8; 16];
    record[..8].copy_from_slice(&addr.to_ne_bytes());
    record[8..].copy_from_slice(&(bytes | MARKED).to_ne_bytes());
    record
}

/// A process's far-tier maps, opened in shared memory (where the preloaded library made them,
/// `egpu-PID-u-NAME`), to write its tier from outside it.
#[derive(Debug)]
pub struct TierMaps {
    tier: Array<TierConfig>,
    ranges: Array<FarRange>,
    pages: Array<u64>,
    allocs: RingBuf<[u64; 2]>,
}

impl TierMaps {
    /// The maps of process `pid`.
    pub fn open(pid: u32) -> Result<TierMaps, TierError> {
        let name = |map: &str| crate::builtin::user_map_name(pid, map);
        let err =
            |map: &'static str| move |e: egpu_maps::MapError| TierError::Map(map, e.to_string());
        Ok(TierMaps {
            tier: Array::open_shared(&name("TIER")).map_err(err("TIER"))?,
            ranges: Array::open_shared(&name("FAR_RANGES")).map_err(err("FAR_RANGES"))?,
            pages: Array::open_shared(&name("FAR_PAGES")).map_err(err("FAR_PAGES"))?,
            allocs: RingBuf::open_shared(&name(ALLOCS_MAP)).map_err(err("ALLOCS"))?,
        })
    }

    /// The process's allocation records (`[address, bytes]`, 0 bytes for a free).
    pub fn allocations(&self) -> &RingBuf<[u64; 2]> {
        &self.allocs
    }
}

/// A program's allocations as they come, resolved into its tier by a policy: what `egpu cxl`
/// keeps for each process it runs (the allocations from its `ALLOCS` ring, the tier written
/// into its maps, which the preloaded library copies to the GPU at its next merge).
#[derive(Clone, Debug)]
pub struct Tracker {
    policy: Policy,
    lookup: Lookup,
    delay_ns: u64,
    /// The bandwidth cap per SM, bytes per second (0: none).
    bandwidth: u64,
    /// Every allocation in the order made; a freed one's size is 0 (its ordinal stays).
    allocations: Vec<Allocation>,
    /// The ranges the program marked far, in the order marked.
    marked: Vec<(u64, u64)>,
}

impl Tracker {
    /// A tracker of `policy`, looked up as `lookup` says, far requests waiting `delay_ns`.
    pub fn new(policy: Policy, lookup: Lookup, delay_ns: u64) -> Result<Tracker, TierError> {
        Tier::resolve(&policy, &[], lookup, delay_ns)?;
        Ok(Tracker {
            policy,
            lookup,
            delay_ns,
            bandwidth: 0,
            allocations: Vec::new(),
            marked: Vec::new(),
        })
    }

    /// This tracker with far requests capped at `bytes_per_second` per SM
    /// ([`Tier::with_bandwidth`]).
    pub fn with_bandwidth(mut self, bytes_per_second: u64) -> Tracker {
        self.bandwidth = bytes_per_second;
        self
    }

    /// Takes the records `[address, bytes]` (0 bytes: a free; with [`MARKED`], a range the
    /// program marked, 0 bytes taking the mark at that address back); whether the policy's far
    /// memory may have changed.
    pub fn record(&mut self, records: impl IntoIterator<Item = [u64; 2]>) -> bool {
        let mut changed = false;
        for [addr, size] in records {
            if size & MARKED != 0 {
                let bytes = size & !MARKED;
                let before = self.marked.len();
                self.marked.retain(|&(start, _)| start != addr);
                if bytes > 0 {
                    self.marked.push((addr, addr.saturating_add(bytes)));
                }
                changed |= matches!(self.policy, Policy::Marked)
                    && (bytes > 0 || self.marked.len() != before);
                continue;
            }
            if size > 0 {
                self.allocations.push(Allocation { addr, size });
            } else if let Some(a) =
                self.allocations.iter_mut().rev().find(|a| a.addr == addr && a.size > 0)
            {
                a.size = 0;
            } else {
                continue;
            }
            changed = true;
        }
        changed && !matches!(self.policy, Policy::None | Policy::All | Policy::Pages(_))
    }

    /// The allocations recorded, in order (a freed one with size 0).
    pub fn allocations(&self) -> &[Allocation] {
        &self.allocations
    }

    /// The ranges the program marked far, in the order marked.
    pub fn marked(&self) -> &[(u64, u64)] {
        &self.marked
    }

    /// The tier of the allocations (or, `Policy::Marked`, the marks) recorded.
    pub fn tier(&self) -> Result<Tier, TierError> {
        let policy = match &self.policy {
            Policy::Marked => &Policy::Ranges(self.marked.clone()),
            other => other,
        };
        Ok(Tier::resolve(policy, &self.allocations, self.lookup, self.delay_ns)?
            .with_bandwidth(self.bandwidth))
    }
}

/// The probes of the far tier in a pack for the preloaded library (`EGPU_PROBES`): the device
/// probes at every load, store and atomic, and the host probe recording allocations.
pub fn pack() -> Result<crate::pack::Pack, crate::pack::PackError> {
    packed(far_access())
}

/// [`pack`] with the bandwidth cap's probes ([`far_access_capped`]).
pub fn pack_capped() -> Result<crate::pack::Pack, crate::pack::PackError> {
    packed(far_access_capped())
}

/// `probes` and the host probe recording allocations, in a pack.
fn packed(probes: [&'static Probe; 3]) -> Result<crate::pack::Pack, crate::pack::PackError> {
    let mut pack = crate::pack::Pack::new();
    for probe in probes {
        pack.add(probe)?;
    }
    pack.add(allocation_recorder())?;
    Ok(pack)
}

/// The pack of `egpu cxl`'s count run: the device probes that count each kernel's accesses
/// and those to far memory ([`far_counter`]), and the host probe recording allocations.
pub fn count_pack() -> Result<crate::pack::Pack, crate::pack::PackError> {
    packed(far_counter())
}

/// Pages of `2^page_shift` bytes, `fraction` of them far by hash (every page from 1 on, none
/// from 0 down: exactly).
fn hashed(config: TierConfig, page_shift: u32, fraction: f64) -> Tier {
    if fraction >= 1.0 {
        return Tier::plain(config, MODE_ALL);
    }
    if fraction <= 0.0 || fraction.is_nan() {
        return Tier::plain(config, MODE_NONE);
    }
    // 2^64 × fraction, below 2^64.
    let threshold = (fraction * 18_446_744_073_709_551_616.0) as u64;
    let config =
        TierConfig { mode: MODE_HASHED, page_shift: u64::from(page_shift), threshold, ..config };
    Tier { config, ranges: vec![], bitmap: vec![] }
}

fn check_page(page_shift: u32) -> Result<(), TierError> {
    if (12..=30).contains(&page_shift) { Ok(()) } else { Err(TierError::PageSize(page_shift)) }
}

/// `ranges` sorted, empty ones dropped, overlapping or touching ones merged.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<FarRange> {
    ranges.retain(|(a, b)| a < b);
    ranges.sort_unstable();
    let mut out: Vec<FarRange> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match out.last_mut() {
            Some(last) if start <= last.end => last.end = last.end.max(end),
            _ => out.push(FarRange { start, end }),
        }
    }
    out
}

/// The pages of `2^page_shift` bytes that `ranges` touch, as a bitmap from the first one's.
fn bitmap(config: TierConfig, ranges: &[FarRange], page_shift: u32) -> Result<Tier, TierError> {
    check_page(page_shift)?;
    let page = 1u64 << page_shift;
    let Some(first) = ranges.first() else { return Ok(Tier::plain(config, MODE_NONE)) };
    let base = first.start & !(page - 1);
    let last = ranges.last().map_or(base, |r| r.end - 1);
    let pages = ((last - base) >> page_shift) + 1;
    if pages > u64::from(BITMAP_WORDS) * 64 {
        return Err(TierError::BitmapTooSmall { pages, page });
    }
    let mut words = vec![0u64; pages.div_ceil(64) as usize];
    for r in ranges {
        for p in (r.start - base) >> page_shift..=((r.end - 1 - base) >> page_shift) {
            words[(p >> 6) as usize] |= 1 << (p & 63);
        }
    }
    let config =
        TierConfig { mode: MODE_BITMAP, base, pages, page_shift: u64::from(page_shift), ..config };
    Ok(Tier { config, ranges: vec![], bitmap: words })
}

#[cfg(test)]
mod tests;
