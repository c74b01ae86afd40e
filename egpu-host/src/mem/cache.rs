//! Cache what-ifs: how a GPU memory of a given size, holding pages of a larger memory (host
//! memory behind it, as in a serving system that keeps part of a model's state on the CPU), would
//! have served a program's page accesses under a replacement policy: its hit rate, and the bytes
//! it would have moved in and out.
//!
//! The input is a sequence of page accesses in the order they happened ([`Access`]: a page
//! number and whether it wrote), one per warp-level request and page. [`what_if`] runs it
//! through LRU and LFU ([`Policy`]) at 25%, 50% and 75% of its working set (the distinct pages
//! it touched, [`WhatIf::working_set`]). Every page starts out of the cache, so each first
//! touch misses (a cold miss); a page brought in on a miss moves its bytes in, and a page that
//! was written while resident moves its bytes out when it is evicted (pages still resident at
//! the end move nothing). Each access costs `O(log capacity)`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

use super::windows::Sample;

/// A replacement policy: which resident page makes room for a page brought in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Policy {
    /// The page used least recently.
    Lru,
    /// The page used least often since it was brought in (its count starts again if it comes
    /// back); among those, the one used least recently.
    Lfu,
}

impl Policy {
    /// Both policies.
    pub const ALL: [Policy; 2] = [Policy::Lru, Policy::Lfu];

    /// The policy's name: `LRU` or `LFU`.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Lru => "LRU",
            Policy::Lfu => "LFU",
        }
    }
}

/// One access to a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    /// The page's number (its address over the page size).
    pub page: u64,
    /// Whether the access wrote to the page (it is then written back when evicted).
    pub write: bool,
}

impl Access {
    /// A read of `page`.
    pub fn read(page: u64) -> Access {
        Access { page, write: false }
    }

    /// A write to `page`.
    pub fn write(page: u64) -> Access {
        Access { page, write: true }
    }
}

/// A cache of `capacity` pages under a [`Policy`], fed one access at a time.
#[derive(Clone, Debug)]
pub struct Cache {
    policy: Policy,
    capacity: u64,
    /// The accesses so far: each resident page's last use is one of them.
    clock: u64,
    /// Resident pages: uses since brought in, last use, written since brought in.
    resident: HashMap<u64, Resident>,
    /// Resident pages in eviction order, the first evicted first.
    order: BTreeSet<(u64, u64, u64)>,
    /// Pages ever touched: a miss on one of them is not a cold miss.
    touched: HashSet<u64>,
    outcome: Outcome,
}

#[derive(Clone, Copy, Debug)]
struct Resident {
    uses: u64,
    last: u64,
    dirty: bool,
}

impl Cache {
    /// An empty cache of `capacity` pages (at least one) of `page_bytes` bytes each.
    pub fn new(policy: Policy, capacity: u64, page_bytes: u64) -> Cache {
        let capacity = capacity.max(1);
        Cache {
            policy,
            capacity,
            clock: 0,
            resident: HashMap::new(),
            order: BTreeSet::new(),
            touched: HashSet::new(),
            outcome: Outcome { policy: Some(policy), capacity, page_bytes, ..Outcome::default() },
        }
    }

    /// The eviction order's key of a resident page: the least recently used first (LRU), or
    /// the least used, then the least recently (LFU).
    fn key(&self, page: u64, r: Resident) -> (u64, u64, u64) {
        match self.policy {
            Policy::Lru => (r.last, 0, page),
            Policy::Lfu => (r.uses, r.last, page),
        }
    }

    /// Serves one access; true on a hit.
    pub fn access(&mut self, a: Access) -> bool {
        self.clock += 1;
        self.outcome.accesses += 1;
        if let Some(&r) = self.resident.get(&a.page) {
            self.order.remove(&self.key(a.page, r));
            let r = Resident { uses: r.uses + 1, last: self.clock, dirty: r.dirty || a.write };
            self.order.insert(self.key(a.page, r));
            self.resident.insert(a.page, r);
            self.outcome.hits += 1;
            return true;
        }
        if !self.touched.insert(a.page) {
            self.outcome.capacity_misses += 1;
        } else {
            self.outcome.cold_misses += 1;
        }
        if self.resident.len() as u64 >= self.capacity
            && let Some(first) = self.order.pop_first()
        {
            let page = first.2;
            if let Some(evicted) = self.resident.remove(&page) {
                self.outcome.evictions += 1;
                self.outcome.written_back += u64::from(evicted.dirty);
            }
        }
        let r = Resident { uses: 1, last: self.clock, dirty: a.write };
        self.order.insert(self.key(a.page, r));
        self.resident.insert(a.page, r);
        false
    }

    /// What the accesses so far came to.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }
}

/// What a cache made of a sequence of accesses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The policy (`None` only in [`Outcome::default`]).
    pub policy: Option<Policy>,
    /// Pages the cache held.
    pub capacity: u64,
    /// Bytes per page.
    pub page_bytes: u64,
    /// Accesses served.
    pub accesses: u64,
    /// Accesses to a resident page.
    pub hits: u64,
    /// Misses on a page's first touch.
    pub cold_misses: u64,
    /// Misses on a page touched before and evicted since.
    pub capacity_misses: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Evicted pages that had been written while resident.
    pub written_back: u64,
}

impl Outcome {
    /// Misses of either kind: pages brought in.
    pub fn misses(&self) -> u64 {
        self.cold_misses + self.capacity_misses
    }

    /// Hits over accesses (0 for none).
    pub fn hit_rate(&self) -> f64 {
        if self.accesses == 0 { 0.0 } else { self.hits as f64 / self.accesses as f64 }
    }

    /// Bytes moved into the cache: a page per miss.
    pub fn bytes_in(&self) -> u64 {
        self.misses() * self.page_bytes
    }

    /// Bytes moved out: a page per written page evicted.
    pub fn bytes_out(&self) -> u64 {
        self.written_back * self.page_bytes
    }
}

/// Runs `accesses` through a cache of `capacity` pages of `page_bytes` under `policy`.
pub fn simulate(
    accesses: impl IntoIterator<Item = Access>,
    policy: Policy,
    capacity: u64,
    page_bytes: u64,
) -> Outcome {
    let mut cache = Cache::new(policy, capacity, page_bytes);
    for a in accesses {
        cache.access(a);
    }
    cache.outcome()
}

/// The page accesses of a recording's `timeline` samples (`egpu mem run --sets timeline`), in
/// device-time order: each request's leader address over `page_bytes` (a power of two), a
/// write for a store or an atomic. The samples are the requests of one warp in N (and, past
/// `--max-records`, a uniform sample of those): a what-if over them is one over the sampled
/// warps' requests, not the program's.
pub fn accesses_of_samples(samples: &[Sample], page_bytes: u64) -> Vec<Access> {
    let shift = page_bytes.max(1).ilog2();
    let mut ordered: Vec<&Sample> = samples.iter().collect();
    ordered.sort_by_key(|s| (s.time_ns, s.sm, s.launch));
    ordered.iter().map(|s| Access { page: s.addr >> shift, write: s.access != "load" }).collect()
}

/// The capacities [`what_if`] tries, as percentages of the working set.
pub const SHARES: [u64; 3] = [25, 50, 75];

/// LRU and LFU at 25%, 50% and 75% of a sequence's working set.
#[derive(Clone, Debug, PartialEq)]
pub struct WhatIf {
    /// The distinct pages the sequence touched.
    pub working_set: u64,
    /// Its accesses.
    pub accesses: u64,
    /// Bytes per page.
    pub page_bytes: u64,
    /// One outcome per share of the working set and policy, the shares in [`SHARES`]' order,
    /// LRU before LFU.
    pub outcomes: Vec<(u64, Outcome)>,
}

/// What LRU and LFU caches of 25%, 50% and 75% of the working set of `accesses` (rounded down,
/// at least one page) would have made of them.
pub fn what_if(accesses: &[Access], page_bytes: u64) -> WhatIf {
    let working_set = accesses.iter().map(|a| a.page).collect::<HashSet<_>>().len() as u64;
    let mut outcomes = Vec::new();
    for share in SHARES {
        let capacity = (working_set * share / 100).max(1);
        for policy in Policy::ALL {
            outcomes
                .push((share, simulate(accesses.iter().copied(), policy, capacity, page_bytes)));
        }
    }
    WhatIf { working_set, accesses: accesses.len() as u64, page_bytes, outcomes }
}

impl fmt::Display for WhatIf {
    /// A table: per capacity and policy, the hit rate, the misses (cold ones apart) and the
    /// bytes each way.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "cache what-if: {} accesses, working set {} pages of {} bytes ({})",
            self.accesses,
            self.working_set,
            self.page_bytes,
            super::table::bytes(self.working_set * self.page_bytes)
        )?;
        writeln!(
            f,
            "{:>9} {:>6} {:>6} {:>9} {:>12} {:>12} {:>14} {:>14}",
            "capacity", "pages", "policy", "hit rate", "misses", "cold", "bytes in", "bytes out"
        )?;
        for (share, o) in &self.outcomes {
            writeln!(
                f,
                "{:>8}% {:>6} {:>6} {:>8.2}% {:>12} {:>12} {:>14} {:>14}",
                share,
                o.capacity,
                o.policy.map_or("", Policy::name),
                100.0 * o.hit_rate(),
                o.misses(),
                o.cold_misses,
                super::table::bytes(o.bytes_in()),
                super::table::bytes(o.bytes_out())
            )?;
        }
        Ok(())
    }
}
