//! Managed memory in the `allocs` set's recording: per allocation of it, the pages each launch
//! touched first ([`FirstTouch`], from the probes' `FIRST_TOUCH`: see [`super::allocs`]), and
//! the table's section that puts them beside what the program did to steer the memory
//! (prefetches, advice) and what the driver reported moving (migrations, faults: CUPTI's
//! unified-memory records, when the preloaded library could load CUPTI).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use egpu_maps::{HashMap, RawMap};
use serde::{Deserialize, Serialize};

use super::allocs::{AllocationRecord, TOUCH_SHIFT, Touch};

/// The pages of a managed allocation that one launch touched first (`"type":"first_touch"`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstTouch {
    /// The allocation's id (0: a page in none the program still knew of).
    pub alloc: u64,
    /// The kernel's id, in hexadecimal.
    pub kernel: String,
    /// The launch (`%gridid`: grows with each launch of a context).
    pub launch: u64,
    /// Pages of 4 KiB it touched first.
    pub pages: u64,
    /// The first of them, as a page index in the allocation.
    pub first: u64,
    /// The last of them.
    pub last: u64,
}

/// The first touches `FIRST_TOUCH` holds (`map`), by allocation (of `allocations`, the latest
/// made holding each page: an address freed and allocated again belongs to the later one),
/// then launch.
pub fn first_touches(map: RawMap, allocations: &[AllocationRecord]) -> Vec<FirstTouch> {
    let Ok(map) = HashMap::<u64, Touch>::from_raw(map) else { return Vec::new() };
    let managed: Vec<&AllocationRecord> = allocations.iter().filter(|a| a.managed).collect();
    let mut by: BTreeMap<(u64, u64, u64), FirstTouch> = BTreeMap::new();
    for (page, touch) in map.iter() {
        let addr = page << TOUCH_SHIFT;
        let holder = (managed.iter().rev())
            .find(|a| a.addr <= addr && addr < a.addr.saturating_add(a.bytes));
        let (alloc, index) = holder.map_or((0, page), |a| (a.id, (addr - a.addr) >> TOUCH_SHIFT));
        let t = by.entry((alloc, touch.launch, touch.kernel)).or_insert_with(|| FirstTouch {
            alloc,
            kernel: super::record::kernel_hex(touch.kernel),
            launch: touch.launch,
            first: index,
            last: index,
            pages: 0,
        });
        t.pages += 1;
        t.first = t.first.min(index);
        t.last = t.last.max(index);
    }
    by.into_values().collect()
}

/// The first touches this process's `FIRST_TOUCH` holds (the CPU VM's probes'), by allocation of
/// `allocations`.
pub fn first_touches_here(allocations: &[AllocationRecord]) -> Vec<FirstTouch> {
    match super::allocs::FIRST_TOUCH.try_raw() {
        Ok(raw) => first_touches(raw.clone(), allocations),
        Err(_) => Vec::new(),
    }
}

/// The table's section on managed memory: per managed allocation, its size, the launches that
/// touched its pages first (in launch order, with the kernel's name), its prefetches, advice,
/// migrations and faults.
pub(super) fn render(recording: &super::Recording) -> String {
    let managed: Vec<&AllocationRecord> =
        recording.allocations.iter().filter(|a| a.managed).collect();
    if managed.is_empty() {
        return String::new();
    }
    let bytes = super::table::bytes;
    let name = |hex: &str| {
        let found = recording.kernels.iter().find(|k| k.id == hex);
        found.map_or_else(|| hex.to_owned(), |k| super::table::cut(&k.name, 40))
    };
    let said = recording.header.um_reports.as_str();
    let reports = match said.strip_prefix("collected") {
        _ if said.is_empty() => String::new(),
        Some(more) => format!(", the driver's migrations and faults from CUPTI{more}"),
        None => format!(", no migrations or faults from the driver: {said}"),
    };
    let mut text = format!("managed memory: {} allocations{reports}\n", managed.len());
    for a in managed {
        let pages = a.bytes.div_ceil(1 << TOUCH_SHIFT);
        let touches: Vec<&FirstTouch> =
            recording.first_touches.iter().filter(|t| t.alloc == a.id).collect();
        let touched: u64 = touches.iter().map(|t| t.pages).sum();
        let _ = writeln!(
            text,
            "  {:>6} {:>15}  {touched} of {pages} pages of 4 KiB touched by kernels",
            a.id,
            bytes(a.bytes)
        );
        for t in &touches {
            let _ = writeln!(
                text,
                "         first touched by {} (launch {}): {} pages ({}..={})",
                name(&t.kernel),
                t.launch,
                t.pages,
                t.first,
                t.last
            );
        }
        let mut steered = Vec::new();
        if a.prefetched_to_device > 0 {
            steered.push(format!("prefetched to a device {}", bytes(a.prefetched_to_device)));
        }
        if a.prefetched_to_host > 0 {
            steered.push(format!("prefetched to host {}", bytes(a.prefetched_to_host)));
        }
        if !a.advice.is_empty() {
            steered.push(format!("advice: {}", a.advice.join(", ")));
        }
        let driver = [
            ("migrated to a device", a.migrated_in, true),
            ("migrated to host", a.migrated_out, true),
            ("GPU page faults", a.gpu_faults, false),
            ("CPU page faults", a.cpu_faults, false),
            ("thrashing", a.thrashing, false),
        ];
        for (what, n, is_bytes) in driver.into_iter().filter(|d| d.1 > 0) {
            steered.push(match is_bytes {
                true => format!("{what} {}", bytes(n)),
                false => format!("{what} {n}"),
            });
        }
        if !steered.is_empty() {
            let _ = writeln!(text, "         {}", steered.join("; "));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages group by allocation and launch; a page of memory freed and allocated again is the
    /// later allocation's; one in no managed allocation is allocation 0's.
    #[test]
    fn first_touches_group_by_allocation_and_launch() {
        let map = HashMap::<u64, Touch>::create(64, egpu_maps::Placement::Process).unwrap();
        let base = 0x10_0000u64;
        let touch = |launch| Touch { launch, kernel: 7 };
        for page in 0..4 {
            map.insert(&((base >> 12) + page), &touch(1)).unwrap();
        }
        map.insert(&((base >> 12) + 9), &touch(2)).unwrap();
        map.insert(&(0x90_0000 >> 12), &touch(2)).unwrap();
        let made = |id, addr, freed| AllocationRecord {
            id,
            addr,
            bytes: 0x10000,
            freed,
            managed: true,
            ..AllocationRecord::default()
        };
        let got = first_touches(map.raw().clone(), &[made(1, base, true), made(2, base, false)]);
        let short: Vec<_> =
            got.iter().map(|t| (t.alloc, t.launch, t.pages, t.first, t.last)).collect();
        assert_eq!(short, [(0, 2, 1, 0x900, 0x900), (2, 1, 4, 0, 3), (2, 2, 1, 9, 9)]);
        assert_eq!(got[1].kernel, "0000000000000007");
    }
}
