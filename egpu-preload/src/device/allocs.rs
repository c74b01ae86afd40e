//! The `allocs` set's table of the program's live device allocations
//! (`egpu::host::mem::allocs`), kept here at each device allocation and free that succeeds (on
//! the calling thread, when the event's exit is observed: the set's pack has a host probe there),
//! written into the set's maps and copied to their device parts before the call returns, so that
//! a kernel launched after an allocation finds it in the table its probes search. During a stream
//! capture nothing is copied (a copy could invalidate it): the parts follow at the next merge.

use std::collections::BTreeMap;
use std::sync::Mutex;

use egpu::host::mem::allocs::{AllocCount, AllocRange, AllocTable, AllocationRecord};
use egpu::maps::Array;

/// The program's device allocations: every one in order, and the live ones by address (each
/// update costs the live allocations, not all the program made).
struct Kept {
    all: Vec<AllocationRecord>,
    live: BTreeMap<u64, u64>,
}

static KEPT: Mutex<Kept> = Mutex::new(Kept { all: Vec::new(), live: BTreeMap::new() });

/// The names of the set's table maps in a pack.
const RANGES: &str = "ALLOC_RANGES";
const COUNT: &str = "ALLOC_COUNT";

/// After a device allocation of `bytes` at `addr` succeeded.
pub(crate) fn made(addr: u64, bytes: u64) {
    update(|k| {
        let id = k.all.len() as u64 + 1;
        k.all.push(AllocationRecord { id, addr, bytes, freed: false });
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
