//! The `allocs` set's table of the program's live device allocations
//! (`egpu::host::mem::allocs`), kept here at each device allocation and free that succeeds (on
//! the calling thread, when the event's exit is observed: the set's pack has a host probe there),
//! written into the set's maps and copied to their device parts before the call returns, so that
//! a kernel launched after an allocation finds it in the table its probes search. During a stream
//! capture nothing is copied (a copy could invalidate it): the parts follow at the next merge.

use std::sync::Mutex;

use egpu::host::mem::allocs::{AllocCount, AllocRange, AllocTable, AllocationRecord};
use egpu::maps::Array;

/// Every device allocation the program made, in order.
static ALLOCATIONS: Mutex<Vec<AllocationRecord>> = Mutex::new(Vec::new());

/// The names of the set's table maps in a pack.
const RANGES: &str = "ALLOC_RANGES";
const COUNT: &str = "ALLOC_COUNT";

/// After a device allocation of `bytes` at `addr` succeeded.
pub(crate) fn made(addr: u64, bytes: u64) {
    update(|all| {
        let id = all.len() as u64 + 1;
        all.push(AllocationRecord { id, addr, bytes, freed: false });
        true
    });
}

/// After the device allocation at `addr` was freed.
pub(crate) fn freed(addr: u64) {
    update(|all| match all.iter_mut().rev().find(|a| a.addr == addr && !a.freed) {
        Some(a) => {
            a.freed = true;
            true
        }
        None => false,
    });
}

/// The allocations so far, for the recording.
pub(crate) fn records() -> Vec<AllocationRecord> {
    ALLOCATIONS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Applies `change` to the list when this process runs the set; when it changed something, the
/// table is written and the device parts refreshed.
fn update(change: impl FnOnce(&mut Vec<AllocationRecord>) -> bool) {
    let Some(user) = crate::defaults::user() else { return };
    let (Some(ranges), Some(count)) = (user.map(RANGES), user.map(COUNT)) else { return };
    let mut all = ALLOCATIONS.lock().unwrap_or_else(|p| p.into_inner());
    if !change(&mut all) {
        return;
    }
    let table = AllocTable::of_records(&all);
    let maps = (
        Array::<AllocRange>::from_raw(ranges.clone()),
        Array::<AllocCount>::from_raw(count.clone()),
    );
    let written = match maps {
        (Ok(ranges), Ok(count)) => table.write_into(&ranges, &count).map_err(|e| e.to_string()),
        _ => Err("the table's maps are not the set's".to_owned()),
    };
    drop(all);
    match written {
        Ok(()) => super::parts::refresh_mirrors(),
        Err(e) if crate::log_enabled("maps") => eprintln!("egpu: the allocations' table: {e}"),
        Err(_) => {}
    }
}
