//! GPU time per call site and per tag (issue 28): the GPU nanoseconds of each timed launch
//! (`EGPU_KERNEL_TIMES`: the CUDA events around it) added, where its events are harvested, to
//! two hash maps in shared memory, `egpu-<pid>-gpu_time_sites` (by `site_id`, 0 for a launch
//! without a site) and `egpu-<pid>-gpu_time_tags` (by `tag_id`, 0 for none), each value a
//! [`GpuTime`] (nanoseconds and launches).
//!
//! Bounded: each map holds [`CAPACITY`] keys; a launch whose key finds its map full is added to
//! the one [`OTHER`] entry (kept free for it), so the totals stay whole and the overflow is
//! counted (its `launches`).

use bytemuck::{Pod, Zeroable};
use egpu_maps::{HashMap, MapError, Placement};

/// The shared objects' names (see [`crate::builtin::shared_name`]): by site, by tag.
pub const MAPS: [&str; 2] = ["gpu_time_sites", "gpu_time_tags"];

/// Keys each map holds, [`OTHER`] included.
pub const CAPACITY: u32 = 1024;

/// The key of the launches whose own key found its map full.
pub const OTHER: u64 = u64::MAX;

/// A key's GPU time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GpuTime {
    /// GPU nanoseconds, summed.
    pub ns: u64,
    /// Launches timed.
    pub launches: u64,
}

/// A map's entries: key and time, by key.
pub type Entries = Vec<(u64, GpuTime)>;

/// A process's GPU time by site and by tag.
#[derive(Debug)]
pub struct GpuTimes {
    sites: HashMap<u64, GpuTime>,
    tags: HashMap<u64, GpuTime>,
}

impl GpuTimes {
    /// Creates process `pid`'s maps, in shared memory when `shared` (else, or when shared
    /// memory cannot be had, in process memory).
    pub fn create(pid: u32, shared: bool) -> Result<GpuTimes, MapError> {
        fn make(pid: u32, name: &str, shared: bool) -> Result<HashMap<u64, GpuTime>, MapError> {
            let map = 'made: {
                if shared {
                    let name = crate::builtin::shared_name(pid, name);
                    let _ = egpu_maps::unlink_shared(&name);
                    if let Ok(m) = HashMap::create(CAPACITY, Placement::Shared(name.into())) {
                        break 'made m;
                    }
                }
                HashMap::create(CAPACITY, Placement::Process)?
            };
            // The overflow's entry first, so that a full map always has it.
            map.insert(&OTHER, &GpuTime::default())?;
            Ok(map)
        }
        Ok(GpuTimes { sites: make(pid, MAPS[0], shared)?, tags: make(pid, MAPS[1], shared)? })
    }

    /// Opens process `pid`'s maps, in shared memory.
    pub fn open(pid: u32) -> Result<GpuTimes, MapError> {
        let name = |m| crate::builtin::shared_name(pid, m);
        Ok(GpuTimes {
            sites: HashMap::open_shared(&name(MAPS[0]))?,
            tags: HashMap::open_shared(&name(MAPS[1]))?,
        })
    }

    /// Adds one launch of `ns` GPU nanoseconds, at `site` (0: none) under `tag` (0: none).
    pub fn add(&self, site: u64, tag: u64, ns: u64) {
        for (map, key) in [(&self.sites, site), (&self.tags, tag)] {
            let added = |key: u64| {
                map.fetch_add_field(&key, |t| &t.ns, ns)?;
                map.fetch_add_field(&key, |t| &t.launches, 1)
            };
            if added(key).is_err() {
                let _ = added(OTHER);
            }
        }
    }

    /// The entries by site, then by tag, those with launches only.
    pub fn entries(&self) -> (Entries, Entries) {
        let read = |m: &HashMap<u64, GpuTime>| {
            let mut all: Vec<_> = m.iter().filter(|(_, t)| t.launches > 0).collect();
            all.sort_by_key(|&(k, _)| k);
            all
        };
        (read(&self.sites), read(&self.tags))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_map_sends_its_launches_to_other() {
        let times = GpuTimes::create(std::process::id(), false).expect("the maps");
        for key in 1..=u64::from(CAPACITY) + 9 {
            times.add(key, 7, 1000);
        }
        let (sites, tags) = times.entries();
        assert_eq!(sites.len(), CAPACITY as usize);
        let other = sites.iter().find(|(k, _)| *k == OTHER).expect("other").1;
        assert_eq!(other, GpuTime { ns: 10 * 1000, launches: 10 });
        let total: u64 = sites.iter().map(|(_, t)| t.ns).sum();
        assert_eq!(total, (u64::from(CAPACITY) + 9) * 1000);
        assert_eq!(tags, vec![(7, GpuTime { ns: total, launches: u64::from(CAPACITY) + 9 })]);
    }
}
