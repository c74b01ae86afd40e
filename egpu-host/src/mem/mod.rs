//! `egpu mem`: how much memory each kernel of a program moves, how fast, and how long it runs
//! on the GPU, measured by built-in device probe sets.
//!
//! A set is a group of probes written in Probe Rust ([`sets`]); [`pack`] puts the sets asked
//! for into a probe pack, which `egpu mem run` hands to the preloaded library as it would a
//! user's. When the program ends, the library reads the sets' maps into a [`Recording`] (a
//! versioned JSON lines format) beside the kernels it saw launched, and [`table::render`] prints
//! it. A program that loads its own PTX through egpu does the same in process with a
//! [`MemSession`] ([`session`]), without the preloaded library.
//!
//! | set | what it measures | cost |
//! |---|---|---|
//! | `counts` | per kernel, accesses and bytes by class (load, store, atomic, async copy, tensor copy) | two adds per access, combined in the thread's registers until it exits |
//! | `timing` | per launch (`%gridid`), the device clock at block 0's start and at each block's end | a compare per thread at entry and exit; one map write per block |
//! | `pattern` | per kernel and site, the warp-level requests, the 32-byte sectors they touched and the fewest they could have | per access, the warp's lanes and sectors (`match.any`, `redux`), and a hash map update by the lowest lane |
//! | `pages` | per kernel, accesses per page (4 KiB, 64 KiB or 2 MiB: [`PageSize`]); atomics per 8-byte address | per access, an add to its page's count, one per group of lanes on a page; the page's value remembered from the thread's last lookup, a search otherwise |
//! | `timeline` | one warp in N, or one line in N of each warp's ([`timeline`], [`SampleBy`]): each request's device time, SM, address, size and lanes in a ring per SM; bandwidth over time windows ([`windows`]) | by warps, nothing in a warp not sampled (the kernel runs a copy of its body without the probes: egpu-ptx's `WarpSampling`); by lines, two multiplies and a compare per access; for a sampled request, the lanes and a ring record by their leader, its tickets taken 32 at a time |
//! | `allocs` | per kernel and device allocation, the accesses and bytes that fell in it ([`allocs`]: the preloaded library keeps the table of live allocations) | per access, a search of the table (twelve halvings) and an add to the (kernel, allocation) value |

pub mod allocs;
pub mod cache;
pub mod managed;
pub mod pages;
pub mod record;
pub mod session;
pub mod sets;
pub mod table;
pub mod timeline;
pub mod windows;

use std::fmt;
use std::str::FromStr;

pub use record::{
    Coalescing, Count, DeviceTraffic, EventTiming, Header, Kernel, Launch, PageUse, Recording,
    RecordingError, Seen, SiteRecord, Stride, Traffic,
};
pub use session::{MemError, MemSession, site_lines};
pub use timeline::{SampleBy, Sampling, UnknownSampling};
pub use windows::{Sample, Timeline, TimelineSummary, Window};

use egpu_device::inject::Sample as Warps;
use egpu_probe::Probe;

use crate::pack::{Pack, PackError};

/// egpu's version and the commit it was built from, as `EGPU_COMMIT` named it at build time
/// (`scripts/gpu-bundle` sets it): `0.1.0 8fef15e1a2b3`, or `0.1.0` alone.
pub fn egpu_build() -> String {
    match option_env!("EGPU_COMMIT") {
        Some(commit) if !commit.is_empty() => format!("{} {commit}", env!("CARGO_PKG_VERSION")),
        _ => env!("CARGO_PKG_VERSION").to_owned(),
    }
}

/// A built-in device probe set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Set {
    /// Accesses and bytes per kernel and class.
    Counts,
    /// GPU time per launch.
    Timing,
    /// Sectors per warp-level request against the fewest, per kernel and site.
    Pattern,
    /// Accesses per page, per kernel; atomics per address.
    Pages,
    /// Sampled requests with the device clock: bandwidth over time.
    Timeline,
    /// Accesses and bytes per kernel and allocation.
    Allocs,
}

impl Set {
    /// Every set, in the order `egpu mem` lists them.
    pub const ALL: [Set; 6] =
        [Set::Counts, Set::Timing, Set::Pattern, Set::Pages, Set::Timeline, Set::Allocs];
    /// The sets `egpu mem run` runs unless told otherwise.
    pub const DEFAULT: [Set; 2] = [Set::Counts, Set::Timing];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Set::Counts => "counts",
            Set::Timing => "timing",
            Set::Pattern => "pattern",
            Set::Pages => "pages",
            Set::Timeline => "timeline",
            Set::Allocs => "allocs",
        }
    }

    /// The map of the set's pack whose presence in a process says the set ran there.
    pub fn map(self) -> &'static str {
        match self {
            Set::Counts => "READS",
            Set::Timing => "STARTS",
            Set::Pattern => "SITES",
            Set::Pages => "PAGES",
            Set::Timeline => "TIMELINE",
            Set::Allocs => "ALLOC_TRAFFIC",
        }
    }

    /// The set's probes, each with the warps it runs in: one in `1 << shift`.
    fn probes(self, page: PageSize, sampling: Sampling) -> Vec<(&'static Probe, Warps)> {
        let every = |probes: &[&'static Probe]| probes.iter().map(|&p| (p, Warps::EVERY)).collect();
        match self {
            Set::Counts => every(&sets::counts()),
            Set::Timing => every(&sets::timing()),
            Set::Pattern => every(&sets::pattern()),
            Set::Pages => pages::pages(page.shift()).map(|p| every(&p)).unwrap_or_default(),
            Set::Timeline => {
                let lines = sampling.by() == SampleBy::Lines;
                // By warps or blocks, the probes run in the sampled warps only; by lines, they
                // test.
                let warps = match sampling.by() {
                    SampleBy::Warps => Warps::warps(sampling.shift()),
                    SampleBy::Blocks => Warps::blocks(sampling.shift()),
                    SampleBy::Turns => Warps::turns(sampling.shift()),
                    SampleBy::Lines => Warps::EVERY,
                };
                let probes = timeline::timeline(sampling.shift(), lines).map(|p| p.to_vec());
                probes.unwrap_or_default().into_iter().map(|p| (p, warps)).collect()
            }
            // The host probes at allocations' and copies' exits have the preloaded library keep
            // the table and count the copies.
            Set::Allocs => {
                let mut probes = allocs::probes().to_vec();
                probes.push(crate::cxl::allocation_recorder());
                probes.push(allocs::copy_watcher());
                every(&probes)
            }
        }
    }
}

impl fmt::Display for Set {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no set is named `{0}`: the sets are counts, timing, pattern, pages, timeline, allocs")]
pub struct UnknownSet(pub String);

impl FromStr for Set {
    type Err = UnknownSet;
    fn from_str(s: &str) -> Result<Set, UnknownSet> {
        Set::ALL.into_iter().find(|set| set.name() == s).ok_or_else(|| UnknownSet(s.to_owned()))
    }
}

/// The size of the pages the `pages` set counts accesses by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PageSize {
    /// 4 KiB.
    Kib4,
    /// 64 KiB.
    Kib64,
    /// 2 MiB: the default, the page of the GPU's large allocations.
    #[default]
    Mib2,
}

impl PageSize {
    /// log2 of its bytes.
    pub fn shift(self) -> u32 {
        match self {
            PageSize::Kib4 => pages::PAGE_SHIFTS[0],
            PageSize::Kib64 => pages::PAGE_SHIFTS[1],
            PageSize::Mib2 => pages::PAGE_SHIFTS[2],
        }
    }

    /// Its bytes.
    pub fn bytes(self) -> u64 {
        1 << self.shift()
    }
}

/// A page size that is none of egpu's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no page size `{0}`: 4k, 64k or 2m")]
pub struct UnknownPageSize(pub String);

impl FromStr for PageSize {
    type Err = UnknownPageSize;
    fn from_str(s: &str) -> Result<PageSize, UnknownPageSize> {
        match s.to_ascii_lowercase().trim_end_matches('b').trim_end_matches('i') {
            "4k" => Ok(PageSize::Kib4),
            "64k" => Ok(PageSize::Kib64),
            "2m" => Ok(PageSize::Mib2),
            _ => Err(UnknownPageSize(s.to_owned())),
        }
    }
}

/// The pack of `sets`' probes (each set once); the `pages` set counts by pages of `page`, the
/// `timeline` set samples one warp in 32.
pub fn pack(sets: &[Set], page: PageSize) -> Result<Pack, PackError> {
    pack_sampled(sets, page, Sampling::DEFAULT)
}

/// [`pack`], the `timeline` set sampling as `sampling` says.
pub fn pack_sampled(sets: &[Set], page: PageSize, sampling: Sampling) -> Result<Pack, PackError> {
    let mut pack = Pack::new();
    let mut seen = Vec::new();
    for &set in sets {
        if seen.contains(&set) {
            continue;
        }
        seen.push(set);
        for (probe, sample) in set.probes(page, sampling) {
            pack.add_sampled(probe, sample)?;
        }
    }
    Ok(pack)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_session;
#[cfg(test)]
mod tests_timeline;
