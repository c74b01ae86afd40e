//! The `allocs` set's table of the program's live device allocations
//! (`egpu::host::mem::allocs`), kept here at each device allocation and free that succeeds (on
//! the calling thread, when the event's exit is observed: the set's pack has a host probe there),
//! written into the set's maps and copied to their device parts before the call returns, so that
//! a kernel launched after an allocation finds it in the table its probes search. During a stream
//! capture nothing is copied (a copy could invalidate it): the parts follow at the next merge.
//! The program's copies that succeed add their bytes to the allocations on their device side
//! (in from host memory, pinned or not, out to it, or device to device).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use egpu::host::mem::allocs::{AllocCount, AllocRange, AllocTable, AllocationRecord};
use egpu::maps::Array;

/// The program's device allocations: every one in order, and the live ones by address (each
/// update costs the live allocations, not all the program made).
#[derive(Default)]
struct Kept {
    all: Vec<AllocationRecord>,
    live: BTreeMap<u64, u64>,
    /// Pinned host allocations: address, bytes.
    pinned: BTreeMap<u64, u64>,
}

static KEPT: Mutex<Kept> =
    Mutex::new(Kept { all: Vec::new(), live: BTreeMap::new(), pinned: BTreeMap::new() });

/// Whether this process runs the set: 0 not known yet, [`NO`] or [`YES`].
static ACTIVE: AtomicU8 = AtomicU8::new(0);
const NO: u8 = 1;
const YES: u8 = 2;

impl Kept {
    /// The live device allocation `addr` falls in: its index in `all`.
    fn holding(&self, addr: u64) -> Option<usize> {
        let (&start, &id) = self.live.range(..=addr).next_back()?;
        let a = self.all.get(id as usize - 1)?;
        (addr < start.saturating_add(a.bytes)).then_some(id as usize - 1)
    }

    /// Whether `addr` is in pinned host memory.
    fn is_pinned(&self, addr: u64) -> bool {
        self.pinned.range(..=addr).next_back().is_some_and(|(&s, &n)| addr < s.saturating_add(n))
    }

    /// A copy of `bytes` from `src` to `dst`, to the allocations on its device side.
    fn copied(&mut self, dst: u64, src: u64, bytes: u64) {
        match (self.holding(dst), self.holding(src)) {
            (Some(d), Some(s)) => {
                self.all[d].copied_device += bytes;
                if s != d {
                    self.all[s].copied_device += bytes;
                }
            }
            (Some(d), None) => {
                let pinned = self.is_pinned(src);
                let a = &mut self.all[d];
                a.copied_in += bytes;
                a.copied_in_pinned += if pinned { bytes } else { 0 };
            }
            (None, Some(s)) => {
                let pinned = self.is_pinned(dst);
                let a = &mut self.all[s];
                a.copied_out += bytes;
                a.copied_out_pinned += if pinned { bytes } else { 0 };
            }
            (None, None) => {}
        }
    }
}

/// Whether this process runs the set (its pack has the table's maps).
fn active() -> bool {
    match ACTIVE.load(Ordering::Relaxed) {
        YES => return true,
        NO => return false,
        _ => {}
    }
    // Events reach here once the probes are set up: the answer stays.
    let yes = crate::defaults::user().is_some_and(|u| u.map(RANGES).is_some());
    ACTIVE.store(if yes { YES } else { NO }, Ordering::Relaxed);
    yes
}

/// After a copy of `bytes` from `src` to `dst` succeeded.
pub(crate) fn copied(dst: u64, src: u64, bytes: u64) {
    if active() {
        KEPT.lock().unwrap_or_else(|p| p.into_inner()).copied(dst, src, bytes);
    }
}

/// After a pinned host allocation of `bytes` at `addr` (`gone`: its free).
pub(crate) fn pinned(addr: u64, bytes: u64, gone: bool) {
    if active() {
        let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
        if gone {
            kept.pinned.remove(&addr);
        } else {
            kept.pinned.insert(addr, bytes);
        }
    }
}

/// The names of the set's table maps in a pack.
const RANGES: &str = "ALLOC_RANGES";
const COUNT: &str = "ALLOC_COUNT";

/// After a device allocation of `bytes` at `addr` succeeded.
pub(crate) fn made(addr: u64, bytes: u64) {
    update(|k| {
        let id = k.all.len() as u64 + 1;
        k.all.push(AllocationRecord { id, addr, bytes, ..AllocationRecord::default() });
        k.live.insert(addr, id);
        true
    });
}

/// After the device allocation at `addr` was freed.
pub(crate) fn freed(addr: u64) {
    update(|k| match k.live.remove(&addr) {
        Some(id) => {
            if let Some(a) = k.all.get_mut(id as usize - 1) {
                a.freed = true;
            }
            true
        }
        None => false,
    });
}

/// The allocations so far, for the recording.
pub(crate) fn records() -> Vec<AllocationRecord> {
    KEPT.lock().unwrap_or_else(|p| p.into_inner()).all.clone()
}

/// Applies `change` when this process runs the set; when it changed something, the table is
/// written and the device parts refreshed.
fn update(change: impl FnOnce(&mut Kept) -> bool) {
    if !active() {
        return;
    }
    let Some(user) = crate::defaults::user() else { return };
    let (Some(ranges), Some(count)) = (user.map(RANGES), user.map(COUNT)) else { return };
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    if !change(&mut kept) {
        return;
    }
    let mut live: Vec<AllocRange> = (kept.live.iter())
        .filter_map(|(&start, &id)| {
            let a = kept.all.get(id as usize - 1)?;
            Some(AllocRange { start, end: start.saturating_add(a.bytes), id })
        })
        .collect();
    live.sort_unstable_by_key(|r| r.id);
    let table = AllocTable::sorted(live);
    let maps = (
        Array::<AllocRange>::from_raw(ranges.clone()),
        Array::<AllocCount>::from_raw(count.clone()),
    );
    let written = match maps {
        (Ok(ranges), Ok(count)) => table.write_into(&ranges, &count).map_err(|e| e.to_string()),
        _ => Err("the table's maps are not the set's".to_owned()),
    };
    drop(kept);
    match written {
        Ok(()) => super::parts::refresh_mirrors(),
        Err(e) if crate::log_enabled("maps") => eprintln!("egpu: the allocations' table: {e}"),
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies add to the allocation on their device side, by direction; pinned host memory is
    /// told apart; memory in no allocation is the host's.
    #[test]
    fn copies_add_to_the_allocations_they_reach() {
        let mut k = Kept::default();
        for (id, addr) in [(1u64, 0x1000u64), (2, 0x2000)] {
            k.all.push(AllocationRecord { id, addr, bytes: 0x100, ..Default::default() });
            k.live.insert(addr, id);
        }
        k.pinned.insert(0x9000, 0x1000);
        k.copied(0x1010, 0x5000, 64); // from pageable host memory
        k.copied(0x1000, 0x9800, 32); // from pinned
        k.copied(0x5000, 0x10ff, 16); // out, to pageable
        k.copied(0x2000, 0x1000, 8); // device to device
        k.copied(0x1100, 0x5000, 4); // just past the first: host to host
        let a = &k.all[0];
        assert_eq!(
            (a.copied_in, a.copied_in_pinned, a.copied_out, a.copied_device),
            (96, 32, 16, 8)
        );
        assert_eq!((k.all[1].copied_device, k.all[1].copied_in), (8, 0));
    }
}
