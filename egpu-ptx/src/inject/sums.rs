//! The registers a kernel keeps for its probes' hash maps, and what it does with them when a
//! thread ends: each map with a lookup cache ([`lookup_caches`]) remembers where its last lookup
//! found a key; a map looked up only by the kernel's id keeps, besides, a sum per 8-byte field
//! its probes add to ([`Cached::fields`]), which the thread adds to the value when it exits
//! ([`flush`]), aggregated across the warp. A lane takes its tickets of each ring drained
//! while kernels run by the batch, in registers too, and closes its batch when it exits
//! ([`drained_rings`]). And every probe's lanes run on together after it ([`converged`]).

use std::collections::{BTreeMap, BTreeSet};

use egpu_ebpf::verifier::AccessRegion;
use egpu_ebpf::{AtomicOp, DeviceEvent, Instruction, MapDef, MapKind, Size};

use super::{DeviceProbe, Names};
use crate::translate::{
    Counts, DeviceMap, adds_only, close_ring_batch, kernel_first, kernel_keyed,
    lookups_and_removals, warp_add,
};

/// A hash map with a lookup cache ([`lookup_caches`]).
#[derive(Clone, Debug)]
pub(super) struct Cached {
    /// Its number among the kernel's.
    pub(super) index: usize,
    /// Every lookup of it is by the kernel's id.
    pub(super) by_kernel: bool,
    /// Every lookup of it is by a key of two words, the first the kernel's id
    /// ([`kernel_first`]): the cache remembers the second.
    pub(super) kernel_first: bool,
    /// Besides, every probe binds it alike: the probes reach one value of it (or, spread over
    /// per-SM copies, that value's copy of the thread's SM).
    pub(super) one_value: bool,
    /// Every probe only adds to its values ([`adds_only`]).
    pub(super) adds_only: bool,
    /// Its binding.
    pub(super) map: DeviceMap,
    /// Its declaration (of the first probe that names it).
    pub(super) def: MapDef,
    /// The offsets in the value of the 8-byte fields the probes at accesses add to (64-bit
    /// adds whose old value is not read): with `one_value`, each gets a sum of the thread's.
    pub(super) fields: BTreeSet<u32>,
}

/// The hash maps (by device address, numbered) whose entries stay where they are while a kernel
/// with these probes runs, so a thread may remember where its last lookup found a key: in GPU
/// memory (nobody else writes it meanwhile), with keys of at most 16 bytes, and removed from by
/// none of the probes (device inserts never reuse a removed entry's slot). A key of two words
/// is remembered when its first is the kernel's id ([`kernel_first`]: its second word in a
/// register), else not (`CacheKey::Nothing`): its searches still read the key's home slot
/// from L1 first.
///
/// Each is numbered, and says whether every lookup of it is by the kernel's id
/// ([`kernel_keyed`]): its cache then remembers that key only, with no key register; and
/// whether, besides, every probe binds it alike: then a thread's combined adds to each field of
/// that one value can be a sum of their own ([`LookupCache::sums`](crate::translate::LookupCache::sums)).
pub(super) fn lookup_caches(
    selected: &[(usize, &DeviceProbe<'_>, DeviceEvent)],
) -> BTreeMap<u64, Cached> {
    let mut removed = BTreeSet::new();
    let mut looked_up: Vec<(DeviceMap, &MapDef, bool, bool)> = Vec::new();
    for (_, p, _) in selected {
        let (lookups, removals) = lookups_and_removals(p.program);
        let Some(removals) = removals else { return BTreeMap::new() };
        removed.extend(removals.iter().filter_map(|&m| p.maps.get(m as usize)).map(|b| b.addr));
        let defs = p.program.program().maps();
        looked_up.extend(lookups.iter().filter_map(|&m| {
            let (b, def) = (p.maps.get(m as usize)?, defs.get(m as usize)?);
            Some((*b, def, kernel_keyed(p.program, m), kernel_first(p.program, m)))
        }));
    }
    let mut caches: BTreeMap<u64, Cached> = BTreeMap::new();
    for (b, def, by_kernel, first) in looked_up {
        let g = b.geometry;
        if matches!(g.kind, MapKind::Hash | MapKind::PerCpuHash)
            && g.key_size <= 16
            && !b.live
            && !removed.contains(&b.addr)
        {
            let next = caches.len();
            let entry = caches.entry(b.addr).or_insert(Cached {
                index: next,
                by_kernel,
                kernel_first: first,
                one_value: true,
                adds_only: true,
                map: b,
                def: def.clone(),
                fields: BTreeSet::new(),
            });
            entry.by_kernel &= by_kernel;
            entry.kernel_first &= first;
            entry.one_value &= entry.by_kernel && b.spread == entry.map.spread;
        }
    }
    // Whether every probe that binds it only adds to its values (one that binds it without a
    // lookup may still update its entries).
    for (_, p, _) in selected {
        let added = adds_only(p.program);
        for (b, adds) in p.maps.iter().zip(added) {
            if let Some(c) = caches.get_mut(&b.addr) {
                c.adds_only &= adds;
            }
        }
    }
    // The fields the probes at accesses add to (a kernel's entry and exit run once per thread:
    // their adds are not combined).
    for (_, p, event) in selected {
        if matches!(event, DeviceEvent::KernelEntry | DeviceEvent::KernelExit) {
            continue;
        }
        for d in p.program.program().decoded() {
            let Instruction::Atomic { op: AtomicOp::Add, fetch: false, size: Size::DW, .. } =
                d.insn
            else {
                continue;
            };
            let Some(a) = p.program.access(d.pc) else { continue };
            let (AccessRegion::MapValue(m), Some(offset)) = (a.region, a.offset) else { continue };
            let cached = p.maps.get(m as usize).and_then(|b| caches.get_mut(&b.addr));
            if let (Some(c), Ok(offset)) = (cached, u32::try_from(offset))
                && offset % 8 == 0
            {
                c.fields.insert(offset);
            }
        }
    }
    caches
}

/// The registers per thread that counts by page ([`Counts`]) are taken to cost a kernel: their
/// two 64-bit sums, and what holding them through a loop costs (measured: nvcc's grid-stride
/// saxpy went from 40 to 48 registers with the `pages` set).
pub(super) const COUNT_REGISTERS: u32 = 8;

/// The registers of cached map `c`'s [`Counts`], when its probes only add to its values, one
/// field of them, and look it up by (kernel, word), and the kernel combines adds (`combine`).
pub(super) fn counts(names: &Names, c: &Cached, combine: bool) -> Option<Counts> {
    let field = match c.fields.iter().collect::<Vec<_>>()[..] {
        [&field] => field,
        _ => return None,
    };
    let pair = c.kernel_first && !c.by_kernel && c.map.geometry.key_size > 8;
    (combine && pair && c.adds_only).then(|| Counts {
        field,
        last: format!("%{}_hc{}", names.stem, c.index),
        previous: format!("%{}_hd{}", names.stem, c.index),
    })
}

/// The sum register of field `offset` of cached map `c`.
pub(super) fn sum_register(names: &Names, c: &Cached, offset: u32) -> String {
    format!("%{}_hs{}_{offset}", names.stem, c.index)
}

/// At a kernel's exit: the per-thread `sum` of combined atomic adds to the value at `addr` +
/// `offset` (a combining slot's, [`Options::combine`](crate::translate::Options::combine), or a
/// map field's), added to memory when both are nonzero, aggregated across the warp where the
/// target allows, unless `by_lane` (sums counted by the warp: each lane adds its own); `label`,
/// unique in the module, starts the labels. With `spread` (the map's binding, spread over
/// per-SM copies), the sum goes to the copy of the thread's SM, as the probes' own adds do.
/// With `uniform`, every lane that flushes has the same `addr` (a value found by the kernel's
/// id): the lanes are not matched by address.
pub(super) fn flush(
    n: &Names,
    (addr, offset): (&str, u32),
    sum: &str,
    label: &str,
    sm: u32,
    (spread, by_lane, uniform): (Option<DeviceMap>, bool, bool),
) -> String {
    let r = |what: &str| format!("%{}_f{what}", n.stem);
    let (fq, ft, fa) = (r("q"), r("t"), r("a"));
    let w = [r("w0"), r("w1"), r("w2"), r("w3")];
    let (to, at) = match spread.filter(|m| m.spread > 0) {
        Some(m) => {
            let g = m.geometry;
            let slots_bytes = u64::from(g.slots) * u64::from(g.slot_stride);
            let shift = g.total_bytes - g.slot_offset(0, 0) as u64 + u64::from(offset);
            let code = format!(
                "\t.reg .b64 {fa};\n\tand.b32 {w0}, {smid}, {mask};\n\
                 \tmul.wide.u32 {ft}, {w0}, {slots_bytes};\n\tadd.s64 {fa}, {addr}, {shift};\n\
                 \tadd.s64 {fa}, {fa}, {ft};\n",
                w0 = w[0],
                smid = n.smid,
                mask = m.spread - 1,
            );
            (fa.clone(), code)
        }
        None if offset != 0 => {
            (fa.clone(), format!("\t.reg .b64 {fa};\n\tadd.s64 {fa}, {addr}, {offset};\n"))
        }
        None => (addr.to_owned(), String::new()),
    };
    let add = if sm >= 80 && !by_lane {
        // The sum's address is a map value's: global memory.
        warp_add(uniform, &to, sum, None, ".global", [&w[0], &w[1], &w[2], &w[3]], &fq, &ft, label)
    } else {
        format!("\tred.global.add.u64 [{to}], {sum};\n{label}_done:\n")
    };
    format!(
        "\t{{\n\t.reg .b32 {w0}, {w1}, {w2}, {w3};\n\t.reg .pred {fq};\n\t.reg .b64 {ft};\n\
         \tsetp.eq.u64 {fq}, {addr}, 0;\n\tsetp.eq.or.u64 {fq}, {sum}, 0, {fq};\n\
         \t@{fq} bra {label}_done;\n{at}{add}\t}}\n",
        w0 = w[0],
        w1 = w[1],
        w2 = w[2],
        w3 = w[3],
    )
}

/// A probe's `body` between a note of the lanes that run it and, on sm_70 and later, a
/// `bar.warp.sync` of them: the lanes that took different paths in the probe (one lane of a
/// warp that inserts, the others that find) run on together after it. Without it `ptxas` may
/// leave them apart for the rest of the kernel, which then runs the kernel's own code once per
/// group (measured on the H200: a probe at kernel entry whose first thread took its slow path
/// made a grid-stride saxpy 1.41× slower, every other thread having skipped it).
pub(super) fn converged(prefix: &str, body: String, sm: u32) -> String {
    if sm < 70 {
        return body;
    }
    let mask = format!("%{prefix}_lanes");
    format!(
        "\t{{\n\t.reg .b32 {mask};\n\tactivemask.b32 {mask};\n{body}\tbar.warp.sync {mask};\n\t}}\n"
    )
}

/// The rings drained while kernels run that the probes of a kernel write (by device address,
/// numbered, with their binding), on `sm_70` and later, of at least 8 batches' tickets
/// ([`RING_BATCH`](crate::translate::RING_BATCH)): a lane takes its tickets of each by the
/// batch, in registers of the kernel ([`ring_registers`],
/// [`Options::ring_batches`](crate::translate::Options::ring_batches)), and closes its batch when
/// it exits ([`close_batches`]).
pub(super) fn drained_rings(
    selected: &[(usize, &DeviceProbe<'_>, DeviceEvent)],
    sm: u32,
) -> BTreeMap<u64, (usize, DeviceMap)> {
    let mut rings = BTreeMap::new();
    if sm < 70 {
        return rings;
    }
    // Probes at accesses only (`inject_with` gives the registers to those): a kernel's entry
    // and exit run once per thread.
    let at_accesses = selected
        .iter()
        .filter(|(_, _, e)| !matches!(e, DeviceEvent::KernelEntry | DeviceEvent::KernelExit));
    for (_, p, _) in at_accesses {
        // A ring of fewer than 8 batches' tickets keeps claiming per group: batches would
        // leave it room for too few lanes.
        let batched = |b: &&DeviceMap| {
            b.drained
                && b.geometry.kind == MapKind::RingBuf
                && b.geometry.capacity >= 8 * crate::translate::RING_BATCH
        };
        for b in p.maps.iter().filter(batched) {
            let next = rings.len();
            rings.entry(b.addr).or_insert((next, *b));
        }
    }
    rings
}

/// The registers of ring `index`'s batch ([`drained_rings`]): the next ticket, the batch's end,
/// the shard's header.
pub(super) fn ring_registers(names: &Names, index: usize) -> [String; 3] {
    ["rn", "re", "rs"].map(|r| format!("%{}_{r}{index}", names.stem))
}

/// At a thread's exit: its batch of each ring closed (its records committed, its tickets left
/// discarded); `label`, unique in the module, starts the labels.
pub(super) fn close_batches(
    names: &Names,
    rings: &BTreeMap<u64, (usize, DeviceMap)>,
    label: &str,
) -> String {
    let mut code = String::new();
    for (index, map) in rings.values() {
        let regs = ring_registers(names, *index);
        let temps = [0, 1, 2, 3].map(|i| format!("%{}_rt{i}", names.stem));
        let pred = format!("%{}_rq", names.stem);
        code.push_str(&format!("\t{{\n\t.reg .b64 {};\n\t.reg .pred {pred};\n", temps.join(", ")));
        let [next, end, shard] = &regs;
        let label = format!("{label}_{index}");
        code.push_str(&close_ring_batch(&map.geometry, [next, end, shard], &temps, &pred, &label));
        code.push_str("\t}\n");
    }
    code
}
