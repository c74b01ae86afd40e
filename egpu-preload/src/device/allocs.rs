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

    /// The latest allocation made, live or freed, that `addr` falls in: its index in `all` (the
    /// driver's reports come after the program may have freed it).
    fn made_at(&self, addr: u64) -> Option<usize> {
        if let Some(i) = self.holding(addr) {
            return Some(i);
        }
        self.all.iter().rposition(|a| a.addr <= addr && addr < a.addr.saturating_add(a.bytes))
    }

    /// `change` applied to each live allocation that `bytes` at `addr` overlap, with the bytes
    /// of the overlap.
    fn overlapping(
        &mut self,
        addr: u64,
        bytes: u64,
        change: &mut impl FnMut(&mut AllocationRecord, u64),
    ) {
        let end = addr.saturating_add(bytes);
        // The allocation holding `addr`, then those starting before `end`.
        let first = self.live.range(..=addr).next_back().map_or(addr, |(&s, _)| s);
        let ids: Vec<u64> = self.live.range(first..end).map(|(_, &id)| id).collect();
        for id in ids {
            let Some(a) = self.all.get_mut(id as usize - 1) else { continue };
            let overlap = end.min(a.addr.saturating_add(a.bytes)).saturating_sub(addr.max(a.addr));
            if overlap > 0 {
                change(a, overlap);
            }
        }
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

/// After a device allocation of `bytes` at `addr` succeeded (`managed`: managed memory). The
/// runtime's allocation and the driver's it calls are one: an allocation already live at the
/// address with the size is not made again.
pub(crate) fn made(addr: u64, bytes: u64, managed: bool) {
    update(|k| {
        let again =
            k.holding(addr).is_some_and(|i| k.all[i].addr == addr && k.all[i].bytes == bytes);
        if again {
            return false;
        }
        let id = k.all.len() as u64 + 1;
        k.all.push(AllocationRecord { id, addr, bytes, managed, ..AllocationRecord::default() });
        k.live.insert(addr, id);
        true
    });
}

/// Whether the driver's unified-memory reports are collected (`"collected"`), or why not;
/// empty until the program made managed memory.
static UM_REPORTS: Mutex<String> = Mutex::new(String::new());

/// Before the program's first managed allocation, when this process runs the set: CUPTI asked
/// for the driver's unified-memory reports (before the allocation: CUPTI reports on memory
/// allocated after it started), unless `EGPU_MEM_CUPTI=0`.
pub(crate) fn managed_coming() {
    if active() {
        watch_managed_memory();
    }
}

fn watch_managed_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let said = match std::env::var("EGPU_MEM_CUPTI").as_deref() {
            Ok("0") => "not asked for (EGPU_MEM_CUPTI=0)".to_owned(),
            _ => match super::cupti::start() {
                Ok(()) => "collected".to_owned(),
                Err(why) => why,
            },
        };
        *UM_REPORTS.lock().unwrap_or_else(|p| p.into_inner()) = said;
    });
}

/// What [`watch_managed_memory`] found: `"collected"`, why not, or empty.
pub(crate) fn um_reports() -> String {
    UM_REPORTS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// After a prefetch of `bytes` at `addr` to a device (`to_device`) or host memory.
pub(crate) fn prefetched(addr: u64, bytes: u64, to_device: bool) {
    steered(addr, bytes, |a, n| match to_device {
        true => a.prefetched_to_device += n,
        false => a.prefetched_to_host += n,
    });
}

/// After advice (`words`) on `bytes` at `addr`: kept by each allocation they reach, a repeat
/// of its last advice left out, at most [`ADVICE_KEPT`].
pub(crate) fn advised(addr: u64, bytes: u64, words: String) {
    steered(addr, bytes, |a, _| {
        if a.advice.last() != Some(&words) && a.advice.len() < ADVICE_KEPT {
            a.advice.push(words.clone());
        }
    });
}

/// Pieces of advice an allocation keeps.
const ADVICE_KEPT: usize = 16;

/// `change` applied to each live allocation that `bytes` at `addr` overlap, with the bytes of
/// the overlap, when this process runs the set.
fn steered(addr: u64, bytes: u64, mut change: impl FnMut(&mut AllocationRecord, u64)) {
    if !active() {
        return;
    }
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    kept.overlapping(addr, bytes, &mut change);
}

/// The driver's unified-memory reports (CUPTI's), each added to the allocation its address
/// falls in: bytes migrated, faults, thrashing. Then what [`um_reports`] says gets their
/// number, by kind, and how many fell in no allocation.
pub(crate) fn reported(events: &[super::cupti::UmEvent]) {
    use super::cupti::UmKind;
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    let mut kinds: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut outside = 0;
    for e in events {
        *kinds.entry(e.kind.name()).or_default() += 1;
        let Some(i) = kept.made_at(e.address) else {
            outside += 1;
            continue;
        };
        let a = &mut kept.all[i];
        let n = e.value;
        match e.kind {
            UmKind::HostToDevice => a.migrated_in = a.migrated_in.saturating_add(n),
            UmKind::DeviceToHost => a.migrated_out = a.migrated_out.saturating_add(n),
            UmKind::GpuPageFault => a.gpu_faults = a.gpu_faults.saturating_add(n),
            // A CPU fault's value is the faulting instruction's address: one fault a record.
            UmKind::CpuPageFault => a.cpu_faults = a.cpu_faults.saturating_add(1),
            UmKind::Thrashing => a.thrashing = a.thrashing.saturating_add(n),
            _ => {}
        }
    }
    let mut said = UM_REPORTS.lock().unwrap_or_else(|p| p.into_inner());
    if *said == "collected" {
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let mut more = vec![format!("{} records", events.len())];
        more.extend(kinds);
        if outside > 0 {
            more.push(format!("{outside} in no allocation"));
        }
        let dropped = super::cupti::dropped();
        if dropped > 0 {
            more.push(format!("{dropped} dropped"));
        }
        more.extend(super::cupti::notes());
        said.push_str(&format!(" ({})", more.join(", ")));
    }
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
            let flags = if a.managed { AllocRange::MANAGED } else { 0 };
            Some(AllocRange { start, end: start.saturating_add(a.bytes), id, flags })
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

    /// A steering call reaches every allocation it overlaps, by the bytes of the overlap.
    #[test]
    fn steering_reaches_the_allocations_it_overlaps() {
        let mut k = Kept::default();
        for (id, addr) in [(1u64, 0x1000u64), (2, 0x2000), (3, 0x3000)] {
            k.all.push(AllocationRecord { id, addr, bytes: 0x100, ..Default::default() });
            k.live.insert(addr, id);
        }
        let mut seen = Vec::new();
        k.overlapping(0x1080, 0x1000, &mut |a, n| seen.push((a.id, n)));
        assert_eq!(seen, [(1, 0x80), (2, 0x80)]);
        seen.clear();
        k.overlapping(0x3100, 0x100, &mut |a, n| seen.push((a.id, n)));
        assert_eq!(seen, []);
        assert_eq!(k.made_at(0x30ff), Some(2));
        assert_eq!(k.made_at(0x3100), None);
    }
}
