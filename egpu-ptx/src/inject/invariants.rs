//! Words of map values that stay the same while a kernel runs: the words probes read from a
//! one-slot array that no probe of the kernel writes (a configuration, such as the far tier's
//! mode and Δ), each loaded into a register of the kernel when it starts
//! ([`Options::invariants`](crate::translate::Options::invariants)). A probe at every access
//! then tests its configuration with no load: its branch waits for nothing, and the kernel's
//! own loads issue as they would without it. (On the H200, the far tier's probes with nothing
//! far: a grid-stride saxpy 1.82× slower with a load of the mode at each access, 1.07× and
//! 1.14× with the mode in a register and tested first; the two changes not measured apart.)
//! Only in kernels with loops: in one without, each probe runs at most once per thread, so a
//! load at the start would save nothing and load words a thread may not use (`mem_timing.cu`'s
//! one-element-per-thread saxpy, nothing far: 1.52× before the words were loaded at its start,
//! 1.75× after, other changes between; 1.12× later, with the far path of `egpu-host`'s
//! `cxl/tiers.rs` shortened).
//! [`for_kernel`] is the injector's to call only for those kernels.

use std::collections::{BTreeMap, BTreeSet};

use egpu_ebpf::verifier::AccessRegion;
use egpu_ebpf::{DeviceEvent, Instruction, MapKind};

use super::DeviceProbe;
use crate::translate::{DeviceMap, reads_only};

/// The most words a kernel keeps in registers (16 registers; a kernel's other registers are
/// its own): those the probes read first (by instruction), the rest read where used. The far
/// tier's configuration has 16 words: with all of them in registers `ptxas` gave saxpy 38
/// registers and the matmul of `examples/cxl_kernels.cu` 56, with 8 32 and 45 (6: 32 and 39);
/// fewer registers, more blocks per SM.
const MAX_WORDS: usize = 8;

/// A word of a map value that stays the same while the kernel runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Word {
    /// The map's device address.
    map: u64,
    /// The word's offset in the value (a multiple of 8).
    offset: u32,
    /// The kernel's register that holds it.
    register: String,
    /// Its device address.
    address: u64,
}

/// Whether every value of the map bound as `b` is one value, which the kernel may read once.
fn one_value(b: &DeviceMap) -> bool {
    let g = b.geometry;
    g.kind == MapKind::Array && g.capacity == 1 && b.spread == 0
}

/// The words the probes `selected` for a kernel read from maps that hold one value no probe of
/// theirs writes, with registers named from `stem`.
pub(super) fn for_kernel(
    selected: &[(usize, &DeviceProbe<'_>, DeviceEvent)],
    stem: &str,
) -> Vec<Word> {
    let mut written = BTreeSet::new();
    // Each word with the first instruction that reads it (the least over the probes).
    let mut read = BTreeMap::new();
    for (_, p, _) in selected {
        let only_read = reads_only(p.program);
        for (m, b) in p.maps.iter().enumerate() {
            if !only_read.get(m).copied().unwrap_or(false) {
                written.insert(b.addr);
            }
        }
        let verified = p.program.runnable();
        for d in verified.program().decoded() {
            let Instruction::Load { .. } = d.insn else { continue };
            let Some(a) = verified.access(d.pc) else { continue };
            let (AccessRegion::MapValue(m), Some(o)) = (a.region, a.offset) else { continue };
            let (Some(b), Ok(o)) = (p.maps.get(m as usize), u32::try_from(o)) else { continue };
            if one_value(b) {
                let value = b.addr.wrapping_add(b.geometry.slot_offset(0, 0) as u64);
                let first = read.entry((b.addr, o - o % 8, value)).or_insert(d.pc);
                *first = (*first).min(d.pc);
            }
        }
    }
    let mut words: Vec<_> =
        read.into_iter().filter(|((map, ..), _)| !written.contains(map)).collect();
    // The words read first are those of the path every access takes (a mode tested first).
    words.sort_by_key(|&(word, pc)| (pc, word));
    words.truncate(MAX_WORDS);
    words.sort_unstable();
    (words.into_iter().enumerate())
        .map(|(i, ((map, offset, value), _))| Word {
            map,
            offset,
            register: format!("%{stem}_iv{i}"),
            address: value.wrapping_add(u64::from(offset)),
        })
        .collect()
}

/// Probe `p`'s part of `words`: `(map index, offset, register)` for its options.
pub(super) fn of(p: &DeviceProbe<'_>, words: &[Word]) -> Vec<(u32, u32, String)> {
    let mut out = Vec::new();
    for (m, b) in (0u32..).zip(p.maps) {
        for w in words.iter().filter(|w| w.map == b.addr) {
            out.push((m, w.offset, w.register.clone()));
        }
    }
    out
}

/// The kernel's code when it starts: each word's register, declared and loaded.
pub(super) fn loads(words: &[Word]) -> String {
    let mut code = String::new();
    for w in words {
        code.push_str(&format!(
            "\t.reg .b64 {r};\n\tmov.b64 {r}, {at};\n\tld.global.u64 {r}, [{r}];\n",
            r = w.register,
            at = w.address as i64
        ));
    }
    code
}
