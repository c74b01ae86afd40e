//! `egpu mem`: how much memory each kernel of a program moves, how fast, and how long it runs
//! on the GPU, measured by built-in device probe sets.
//!
//! A set is a group of probes written in Probe Rust ([`sets`]); [`pack`] puts the sets asked
//! for into a probe pack, which `egpu mem run` hands to the preloaded library as it would a
//! user's. When the program ends, the library reads the sets' maps into a [`Recording`] (a
//! versioned JSON lines format) beside the kernels it saw launched, and [`table::render`] prints
//! it.
//!
//! | set | what it measures | cost |
//! |---|---|---|
//! | `counts` | per kernel, accesses and bytes by class (load, store, atomic, async copy, tensor copy) | two adds per access, combined in the thread's registers until it exits |
//! | `timing` | per launch (`%gridid`), the device clock at block 0's start and at each block's end | a compare per thread at entry and exit; one map write per block |
//! | `pattern` | per kernel and site, the warp-level requests, the 32-byte sectors they touched and the fewest they could have | per access, the warp's lanes and sectors (`match.any`, `redux`), and a hash map update by the lowest lane |

pub mod record;
pub mod sets;
pub mod table;

use std::fmt;
use std::str::FromStr;

pub use record::{
    Coalescing, Header, Kernel, Launch, Recording, RecordingError, Seen, SiteRecord, Traffic,
};

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
}

impl Set {
    /// Every set, in the order `egpu mem` lists them.
    pub const ALL: [Set; 3] = [Set::Counts, Set::Timing, Set::Pattern];
    /// The sets `egpu mem run` runs unless told otherwise.
    pub const DEFAULT: [Set; 2] = [Set::Counts, Set::Timing];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Set::Counts => "counts",
            Set::Timing => "timing",
            Set::Pattern => "pattern",
        }
    }

    fn probes(self) -> Vec<&'static egpu_probe::Probe> {
        match self {
            Set::Counts => sets::counts().to_vec(),
            Set::Timing => sets::timing().to_vec(),
            Set::Pattern => sets::pattern().to_vec(),
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
#[error("no set is named `{0}`: the sets are counts, timing, pattern")]
pub struct UnknownSet(pub String);

impl FromStr for Set {
    type Err = UnknownSet;
    fn from_str(s: &str) -> Result<Set, UnknownSet> {
        Set::ALL.into_iter().find(|set| set.name() == s).ok_or_else(|| UnknownSet(s.to_owned()))
    }
}

/// The pack of `sets`' probes (each set once).
pub fn pack(sets: &[Set]) -> Result<Pack, PackError> {
    let mut pack = Pack::new();
    let mut seen = Vec::new();
    for &set in sets {
        if seen.contains(&set) {
            continue;
        }
        seen.push(set);
        for probe in set.probes() {
            pack.add(probe)?;
        }
    }
    Ok(pack)
}

#[cfg(test)]
mod tests;
