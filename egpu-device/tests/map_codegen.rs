//! What the device maps' code does on the paths that decide its speed, read from the PTX the
//! injector writes (no GPU needed; `tests/gpu.rs` and the GPU benchmark check the counts on one):
//!
//! - a thread remembers its last hash-map hit only in maps whose entries stay where they are
//!   while the kernel runs, and looks the remembered key up before hashing;
//! - an add of a constant makes no vote and no `redux.sync`;
//! - adds to a hash map value found by the kernel's id (the same at every access of a site)
//!   are combined in the thread's registers until the kernel exits (counted by the warp where
//!   the kernel has no loop); those by a key that changes from access to access (a page) are
//!   not;
//! - a ring record is stored alone, in pairs of words, with no sequence word; in a ring drained
//!   while kernels run, a group of lanes claims room, takes tickets and publishes its records
//!   by one atomic add each and one sequence word.

use egpu_device::inject::{DeviceProbe, InjectOptions, Kernels, inject, inject_with};
use egpu_device::translate::{DeviceMap, adds_only, reads_only};
use egpu_ebpf::verifier::{Verified, verify};
use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
use egpu_maps::layout::{Geometry, shard};
use egpu_test_support::read_workspace_file;

const PAGE_COUNT: &str = include_str!("../../tests/probes/page_count.s");
const TRACE: &str = include_str!("../../tests/probes/trace.s");

fn saxpy() -> String {
    read_workspace_file("tests/ptx/saxpy.ptx")
}

fn program(text: &str, maps: Vec<MapDef>, event: DeviceEvent) -> Verified {
    let slots = assemble(text).unwrap_or_else(|e| panic!("assembling {text:?}: {e}"));
    let program = Program::new(slots, maps, AttachPoint::Device(event)).expect("a program");
    verify(&program).unwrap_or_else(|e| panic!("verifying {text:?}: {e}"))
}

fn hash_def(key_size: u32) -> Vec<MapDef> {
    vec![MapDef {
        name: "pages".into(),
        kind: MapKind::Hash,
        key_size,
        value_size: 8,
        capacity: 1024,
    }]
}

fn hash_binding(key_size: u32, live: bool) -> DeviceMap {
    let geometry = Geometry::new(MapKind::Hash, key_size, 8, 1024, 1, 0).expect("geometry");
    DeviceMap { addr: 0x7f00_0000_0000, geometry, live, spread: 0, drained: false }
}

/// Saxpy with `probes` (program, event) bound to `maps`.
fn instrument(probes: &[(&Verified, DeviceEvent)], maps: &[DeviceMap]) -> String {
    let probes: Vec<DeviceProbe<'_>> = probes
        .iter()
        .map(|(p, _)| DeviceProbe { program: p, kernels: Kernels::All, maps })
        .collect();
    inject(&saxpy(), &probes).expect("instruments").ptx
}

fn page_counts(live: bool) -> String {
    let load = program(PAGE_COUNT, hash_def(8), DeviceEvent::GlobalLoad);
    let store = program(PAGE_COUNT, hash_def(8), DeviceEvent::GlobalStore);
    let maps = [hash_binding(8, live)];
    instrument(&[(&load, DeviceEvent::GlobalLoad), (&store, DeviceEvent::GlobalStore)], &maps)
}

#[test]
fn a_thread_remembers_its_last_hit_where_entries_stay_put() {
    let ptx = page_counts(false);
    // Declared and cleared once, at the kernel's entry; checked by every lookup of every site.
    assert_eq!(ptx.matches(".reg .b64 %egpu_hk0, %egpu_hp0;").count(), 1, "{ptx}");
    assert!(ptx.contains("mov.b64 %egpu_hp0, 0;"));
    // Two lookups per site (before and after the insert), three sites.
    assert_eq!(ptx.matches(", %egpu_hk0;").count(), 6, "the key compared with the last hit");
    // Remembered after each lookup that found it (in the key's home slot, read first without
    // ordering, or by the search).
    assert_eq!(ptx.matches("mov.b64 %egpu_hk0, ").count(), 6 + 1, "a hit remembered");
    let fast = ptx.lines().filter(|l| l.contains("ld.global.u64 %egpu") && l.ends_with("_t4];"));
    assert_eq!(fast.count(), 6, "the home slot's state word, from L1, before the search");
    assert_eq!(ptx.matches("ld.global.acquire.gpu.u64").count(), 6 + 3, "the searches");
    // The remembered key is compared before the key is hashed.
    let site = &ptx[ptx.find("setp.eq.u64 %egpu0_q0, %egpu0_k0, %egpu_hk0;").expect("a check")..];
    let hash = site.find("mul.hi.u64").expect("the hash");
    assert!(site[..hash].contains("bra $egpu0_H"), "a hit skips the hash");

    // Not in a map the host reads and writes live, whose entries it may move.
    assert!(!page_counts(true).contains("_hk0"));
    // Not in a map one of the kernel's probes deletes from: a device insert never reuses a
    // removed entry's slot, but the remembered address would still point at it.
    let delete = "ldxdw %r6, [%r1+0]\nstxdw [%r10-8], %r6\nlddw %r1, map[0]\nmov %r2, %r10\n\
                  add %r2, -8\ncall 3\nmov %r0, 0\nexit";
    let remover = program(delete, hash_def(8), DeviceEvent::GlobalStore);
    let counter = program(PAGE_COUNT, hash_def(8), DeviceEvent::GlobalLoad);
    let maps = [hash_binding(8, false)];
    let ptx = instrument(
        &[(&counter, DeviceEvent::GlobalLoad), (&remover, DeviceEvent::GlobalStore)],
        &maps,
    );
    assert!(!ptx.contains("_hk0"), "a map entries are removed from is searched every time");
    // Keys longer than a word are not remembered (their registers would cost the kernel more),
    // but the entries stay put: the home slot is read from L1 first, both words compared.
    let long_key = "ldxdw %r6, [%r1+0]\nstxdw [%r10-16], %r6\nstxdw [%r10-8], %r6\n\
                    lddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -16\ncall 1\nmov %r0, 0\nexit";
    let p = program(long_key, hash_def(16), DeviceEvent::GlobalLoad);
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[hash_binding(16, false)]);
    assert!(!ptx.contains("_hk0") && !ptx.contains("_hp0"), "{ptx}");
    let fast = ptx.find("ld.global.u64 %egpu0_t5, [%egpu0_t4];").expect("the home slot first");
    let search = ptx.find("ld.global.acquire.gpu.u64").expect("the search");
    let words = ["[%egpu0_t4+8];", "[%egpu0_t4+16];"].map(|w| ptx[fast..search].contains(w));
    assert_eq!(words, [true, true], "both words of the key compared:\n{ptx}");
    // Not for a map the host reads and writes live.
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[hash_binding(16, true)]);
    assert!(!ptx.contains("ld.global.u64 %egpu0_t5, [%egpu0_t4];"), "{ptx}");

    // A key of two words whose first is the kernel's id (the `pages` set's (kernel, page)):
    // the second word is remembered in a register, the first compared with the id, a constant;
    // and the hit before the last too (a loop's pages of `x` and `y` alternate).
    let ptx = kernel_pages();
    let id = egpu_ebpf::kernel_id("saxpy") as i64;
    let declared = ".reg .b64 %egpu_hk0, %egpu_hp0, %egpu_hq0, %egpu_hv0;";
    assert_eq!(ptx.matches(declared).count(), 1, "{ptx}");
    let count = |what: &dyn Fn(&str) -> bool| ptx.lines().filter(|l| what(l)).count();
    let first = format!("_k0, {id};");
    let checks = count(&|l| l.contains("setp.eq.u64 %egpu") && l.ends_with(&first));
    assert_eq!(checks, 2 * 2 * 3, "two entries, two lookups per site, three sites: {ptx}");
    assert_eq!(count(&|l| l.contains("_k1, %egpu_hk0, %egpu")), 2 * 3, "{ptx}");
    assert_eq!(count(&|l| l.contains("mov.b64 %egpu_hk0, %egpu")), 2 * 3, "remembered");
    // The entry before the last: compared after the last misses, before the hash, and given
    // the last's when a search finds another.
    assert_eq!(count(&|l| l.contains("_k1, %egpu_hq0, %egpu")), 2 * 3, "{ptx}");
    assert_eq!(count(&|l| l.ends_with("mov.b64 %egpu_hq0, %egpu_hk0;")), 2 * 3, "{ptx}");
    assert_eq!(count(&|l| l.ends_with("mov.b64 %egpu_hv0, %egpu_hp0;")), 2 * 3, "{ptx}");
    let check = format!("setp.eq.u64 %egpu0_q0, %egpu0_k0, {id};");
    let site = &ptx[ptx.find(&check).expect("a check")..];
    let hash = site.find("mul.hi.u64").expect("the hash");
    let hits = site[..hash].matches("bra $egpu0_H").count();
    assert_eq!(hits, 2, "a hit of either entry skips the hash:\n{}", &site[..hash]);
    let (last, before) =
        (site.find("%egpu_hk0, %egpu").unwrap(), site.find("%egpu_hq0, %egpu").unwrap());
    assert!(last < before && before < hash, "the last first, then the one before");
}

/// Saxpy whose loads and stores count per (kernel, 2 MiB page), as the `pages` set does: a key
/// of two words, the kernel's id first.
fn kernel_pages() -> String {
    let text = PAGE_COUNT
        .replace("rsh %r6, 12", "rsh %r6, 21")
        .replace(
            "stxdw [%r10-8], %r6",
            "ldxdw %r7, [%r1+8]\n stxdw [%r10-16], %r7\n stxdw [%r10-8], %r6",
        )
        .replace("add %r2, -8", "add %r2, -16")
        .replace("stdw [%r10-16], 0", "stdw [%r10-24], 0")
        .replace("add %r3, -16", "add %r3, -24");
    let load = program(&text, hash_def(16), DeviceEvent::GlobalLoad);
    let store = program(&text, hash_def(16), DeviceEvent::GlobalStore);
    let maps = [hash_binding(16, false)];
    instrument(&[(&load, DeviceEvent::GlobalLoad), (&store, DeviceEvent::GlobalStore)], &maps)
}

#[test]
fn an_add_of_a_constant_needs_no_vote_and_no_redux() {
    let ptx = page_counts(false);
    let body = &ptx[ptx.find("$L__BB0_2:").expect("the loop")..];
    assert!(!body.contains("redux.sync"), "a count of 1 adds the group's size");
    assert!(!body.contains("vote.sync"));
    assert!(body.contains("popc.b32"));

    let add = |delta: &str| {
        let text =
            PAGE_COUNT.replace("mov %r1, 1\n    lock add", &format!("{delta}\n    lock add"));
        let p = program(&text, hash_def(8), DeviceEvent::GlobalLoad);
        instrument(&[(&p, DeviceEvent::GlobalLoad)], &[hash_binding(8, false)])
    };
    // Another constant: the group's size times it.
    let ptx = add("mov %r1, 5");
    assert!(ptx.contains(", 5;") && !ptx.contains("redux.sync"), "{ptx}");
    // A value only known at run time (the page number, from the stack): summed across the group
    // when small.
    let ptx = add("ldxdw %r1, [%r10-8]");
    assert!(ptx.contains("redux.sync.add.u32"), "{ptx}");
}

#[test]
fn a_ring_record_is_stored_alone_in_pairs_of_words() {
    let (p, geometry) = trace();
    let maps =
        [DeviceMap { addr: 0x7f00_0000_0000, geometry, live: false, spread: 0, drained: false }];
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &maps);
    assert_eq!(ptx.matches("st.global.v2.u64").count(), 2, "one pair per record, two loads");
    assert!(!ptx.contains(".release"), "no sequence word is written: {ptx}");
    assert!(!ptx.contains(&format!("+{}]", shard::CLAIMED)), "no claim: {ptx}");
    // A map that does not start 16-byte aligned gets single words.
    let maps =
        [DeviceMap { addr: 0x7f00_0000_0008, geometry, live: false, spread: 0, drained: false }];
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &maps);
    assert!(!ptx.contains("st.global.v2") && ptx.contains("st.global.u64"));
}

/// A ring drained while kernels run: the group's leader takes its tickets from a batch of its
/// own, in registers of the kernel, claimed (room, then tickets: two atomics, the claim taken
/// back and the drops counted when the ring is full) 32 at a time; the batch is published by
/// one sequence word with release ordering, after the warp's barrier, when it is full or the
/// thread exits, its unused tickets discarded.
#[test]
fn a_drained_ring_group_claims_takes_tickets_and_publishes_once() {
    let (p, geometry) = trace();
    let maps =
        [DeviceMap { addr: 0x7f00_0000_0000, geometry, live: false, spread: 0, drained: true }];
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &maps);
    assert_eq!(ptx.matches("st.global.v2.u64").count(), 2, "one pair per record, two loads");
    let lines = |op: &str, off: usize| {
        ptx.lines().filter(|l| l.contains(op) && l.contains(&format!("+{off}]"))).count()
    };
    let batch = egpu_device::translate::RING_BATCH;
    let claims = ptx.lines().filter(|l| l.ends_with(&format!("], {batch};"))).count();
    assert_eq!(claims, 2 * 2, "room and tickets, by the batch: {ptx}");
    assert_eq!(lines("atom.global.add", shard::CLAIMED), 2, "{ptx}");
    assert_eq!(lines("atom.global.add", shard::LEN_OR_HEAD), 2, "{ptx}");
    assert_eq!(lines("red.global.add", shard::CLAIMED), 2, "{ptx}");
    assert_eq!(lines("red.global.min", shard::LEN_OR_HEAD), 0, "head never goes back: {ptx}");
    assert_eq!(ptx.matches(".reg .b64 %egpu_rn0, %egpu_re0, %egpu_rs0;").count(), 1, "{ptx}");
    // Refused (the ring full), the lane drops a batch's worth without claiming: its batch's
    // end all ones, each record counted in the refused word by an add nothing waits for;
    // closing a batch passes over that state.
    assert_eq!(ptx.matches("mov.b64 %egpu_re0, -1;").count(), 2, "{ptx}");
    assert_eq!(ptx.matches(", %egpu_re0, -1;").count(), 2, "the test of dropping: {ptx}");
    assert_eq!(lines("red.global.add.u64 [%egpu_rs0", shard::REFUSED), 2, "{ptx}");
    let dropping = ptx.find(", %egpu_re0, -1;").expect("dropping");
    let claimed = ptx[dropping..].find("_claim:").expect("the claim after it");
    assert!(!ptx[dropping..dropping + claimed].contains("atom."), "no atomic waited for: {ptx}");
    assert_eq!(ptx.matches("%egpu_re0, -1, ").count(), 2 * 2 + 1, "each close: {ptx}");
    // The rings' own, and one after each of the two probes (its lanes run on together).
    assert_eq!(ptx.matches("bar.warp.sync").count(), 4, "{ptx}");
    let seq = geometry.seq_offset(0, 0) - geometry.shard_offset(0);
    // A batch closed: before a new one is claimed, when full, at the thread's exit.
    let closes = 2 * 2 + 1;
    assert_eq!(ptx.matches("st.release.gpu.global.u64 [").count(), closes, "{ptx}");
    assert_eq!(ptx.matches("st.relaxed.gpu.global.u64 [").count(), closes, "{ptx}");
    assert!(ptx.contains(&format!("+{seq}], ")), "the sequence words' array: {ptx}");
    // Laps and slots of a power-of-two capacity by shifts and masks: `ptxas` would call a
    // 64-bit division routine.
    assert!(geometry.capacity.is_power_of_two());
    assert!(!ptx.contains("div.u64") && !ptx.contains("rem.u64"), "{ptx}");
    // Any other capacity divides.
    let odd = Geometry::new(MapKind::RingBuf, 0, 16, 1000, 0, 132).expect("geometry");
    let ring = [DeviceMap { geometry: odd, ..maps[0] }];
    let divided = instrument(&[(&p, DeviceEvent::GlobalLoad)], &ring);
    assert!(divided.contains("div.u64") && divided.contains(", 1000;"), "{divided}");
    let exit = ptx.rfind("st.global.f32").expect("saxpy's store");
    assert!(ptx[exit..].contains("st.release.gpu.global.u64 ["), "closed at the exit: {ptx}");
    // A ring of fewer than 8 batches' tickets is claimed per group.
    let small = Geometry::new(MapKind::RingBuf, 0, 16, 64, 0, 132).expect("geometry");
    let ring = [DeviceMap { geometry: small, ..maps[0] }];
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &ring);
    assert!(!ptx.contains("_rn0") && ptx.contains("st.release.gpu.global.u64 ["), "{ptx}");
    // A probe at the kernel's exit that writes the ring too (per record: it runs once per
    // thread): the lane's batch is closed after it.
    let record = "stdw [%r10-16], 1\nstdw [%r10-8], 2\nlddw %r1, map[0]\nmov %r2, %r10\n\
                  add %r2, -16\nmov %r3, 16\nmov %r4, 0\ncall 130\nmov %r0, 0\nexit";
    let at_exit = program(record, p.program().maps().to_vec(), DeviceEvent::KernelExit);
    let both = [(&p, DeviceEvent::GlobalLoad), (&at_exit, DeviceEvent::KernelExit)];
    let ptx = instrument(&both, &maps);
    let (written, closed) = (ptx.rfind("st.global.v2.u64"), ptx.rfind("$egpu_rb"));
    assert!(written < closed, "the exit's record, then the batch closed: {ptx}");
    // Only a ring in GPU memory is drained.
    let hash = DeviceMap { drained: true, ..hash_binding(8, false) };
    let counter = program(PAGE_COUNT, hash_def(8), DeviceEvent::GlobalLoad);
    let probes = [DeviceProbe { program: &counter, kernels: Kernels::All, maps: &[hash] }];
    assert!(inject(&saxpy(), &probes).is_err());
}

/// The trace probe (a 16-byte record per access) and a ring for it.
fn trace() -> (Verified, Geometry) {
    let def = vec![MapDef {
        name: "trace".into(),
        kind: MapKind::RingBuf,
        key_size: 0,
        value_size: 16,
        capacity: 1024,
    }];
    let geometry = Geometry::new(MapKind::RingBuf, 0, 16, 1024, 0, 132).expect("geometry");
    (program(TRACE, def, DeviceEvent::GlobalLoad), geometry)
}

#[test]
fn adds_to_a_spread_map_go_to_the_copy_of_the_threads_sm() {
    // Probe Rust's `fetch_add`: looks up, adds, inserts with BPF_NOEXIST; nothing reads a value.
    let counter = program(PAGE_COUNT, hash_def(8), DeviceEvent::GlobalLoad);
    assert_eq!(adds_only(&counter), [true]);
    assert_eq!(reads_only(&counter), [false], "it adds and inserts");
    let spread = DeviceMap { spread: 16, ..hash_binding(8, false) };
    let g = spread.geometry;
    let ptx = instrument(&[(&counter, DeviceEvent::GlobalLoad)], &[spread]);
    // Each add: the SM's copy (%smid modulo 16), past the map, at the value's place in it.
    let slots_bytes = u64::from(g.slots) * u64::from(g.slot_stride);
    let shift = g.total_bytes - g.slot_offset(0, 0) as u64;
    let copy = format!(", {slots_bytes};");
    let sites = ptx.lines().filter(|l| l.contains("mul.wide.u32") && l.ends_with(&copy)).count();
    assert_eq!(sites, 2 * 2, "two adds per site, two loads: {ptx}");
    assert!(ptx.lines().any(|l| l.contains("add.s64") && l.ends_with(&format!(", {shift};"))));
    assert!(ptx.contains("%smid"));
    // Not spread: no copy.
    let plain = instrument(&[(&counter, DeviceEvent::GlobalLoad)], &[hash_binding(8, false)]);
    assert!(!plain.contains(&format!(", {slots_bytes};")));

    // A probe that reads a value, or replaces one, does not only add: refused when spread.
    let reads = "ldxdw %r6, [%r1+0]\nstxdw [%r10-8], %r6\nlddw %r1, map[0]\nmov %r2, %r10\n\
                 add %r2, -8\ncall 1\njeq %r0, 0, out\nldxdw %r1, [%r0+0]\nout:\nmov %r0, 0\nexit";
    let replaces = "ldxdw %r6, [%r1+0]\nstxdw [%r10-8], %r6\nlddw %r1, map[0]\nmov %r2, %r10\n\
                    add %r2, -8\nmov %r3, %r10\nadd %r3, -8\nmov %r4, 0\ncall 2\nmov %r0, 0\nexit";
    for text in [reads, replaces] {
        let p = program(text, hash_def(8), DeviceEvent::GlobalLoad);
        assert_eq!(adds_only(&p), [false], "{text}");
        // Only the one that reads only reads: its device copy may mirror the host's.
        assert_eq!(reads_only(&p), [text == reads], "{text}");
        let probes = [DeviceProbe { program: &p, kernels: Kernels::All, maps: &[spread] }];
        assert!(inject(&saxpy(), &probes).is_err(), "{text}");
    }
    // A count of copies that is not a power of two is refused.
    let odd = DeviceMap { spread: 12, ..spread };
    let probes = [DeviceProbe { program: &counter, kernels: Kernels::All, maps: &[odd] }];
    assert!(inject(&saxpy(), &probes).is_err());
}

#[test]
fn adds_by_the_kernels_id_are_combined_per_thread_and_adds_by_page_are_not() {
    // bytes[kernel_id] += size, as examples/kernel_bytes.rs does with `fetch_add`.
    let by_kernel = "mov %r9, %r1\nldxdw %r0, [%r9+8]\nstxdw [%r10-8], %r0\nlddw %r1, map[0]\n\
                     mov %r2, %r10\nadd %r2, -8\ncall 1\njeq %r0, 0, out\n\
                     ldxw %r1, [%r9+16]\nlock add [%r0], %r1\nout:\nmov %r0, 0\nexit";
    let p = program(by_kernel, hash_def(8), DeviceEvent::GlobalLoad);
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[hash_binding(8, false)]);
    // Combined per thread in a sum of the map's own (one value: the kernel id's), which the
    // kernel adds to the value it found (its lookup cache's) when it exits; every lane that
    // adds has the same address (one key, one value): no `match.any`.
    assert_eq!(ptx.matches("add.s64 %egpu_hs0_0, %egpu_hs0_0, ").count(), 2, "saxpy's two loads");
    assert!(ptx.contains("setp.eq.or.u64 %egpu_fq, %egpu_hs0_0, 0, %egpu_fq;"), "{ptx}");
    let flush = &ptx[ptx.find("setp.eq.or.u64 %egpu_fq, %egpu_hs0_0").expect("the flush")..];
    let flush = &flush[..flush.find("_done:").expect("its end")];
    assert!(!flush.contains("match.any") && flush.contains("redux.sync.add.u32"), "{flush}");
    // Not when the map is read and written live by the host (its values may move).
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[hash_binding(8, true)]);
    assert!(!ptx.contains("_sum_addr") && !ptx.contains("_hs0"));
    // Nor when the probe reads the value it adds to: it must see its adds (a token bucket's
    // time, the far tier's `LINKS`).
    let reads_back = "mov %r9, %r1\nldxdw %r0, [%r9+8]\nstxdw [%r10-8], %r0\nlddw %r1, map[0]\n\
                      mov %r2, %r10\nadd %r2, -8\ncall 1\njeq %r0, 0, out\n\
                      ldxw %r1, [%r9+16]\nlock add [%r0], %r1\nldxdw %r1, [%r0+0]\nout:\n\
                      mov %r0, 0\nexit";
    let back = program(reads_back, hash_def(8), DeviceEvent::GlobalLoad);
    let ptx = instrument(&[(&back, DeviceEvent::GlobalLoad)], &[hash_binding(8, false)]);
    assert!(!ptx.contains("_sum_addr") && !ptx.contains("_hs0"), "{ptx}");
    assert!(ptx.contains("red.global.add.u64") || ptx.contains("red.add.u64"), "{ptx}");
    // And its read goes past the SM's L1, which atomics and other SMs' writes leave stale.
    assert!(ptx.contains("ld.relaxed.gpu.global.u64"), "{ptx}");
    let plain = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[hash_binding(8, false)]);
    assert!(!plain.contains("ld.relaxed.gpu"), "a probe that only adds reads nothing: {plain}");
    // Not by page alone: the key changes from access to access.
    let pages = page_counts(false);
    assert!(!pages.contains("_sum_addr") && !pages.contains("_hs0"));
    // Nor by the kernel's id and a page (the `pages` set's key), whose lookups the thread
    // remembers: one add per access, aggregated across the warp (combined per thread, measured
    // slower on the grid-stride saxpy).
    let pages = kernel_pages();
    assert!(!pages.contains("_sum_addr") && pages.contains("popc.b32"), "{pages}");
    assert!(!pages.contains("_hs0"), "no sum of one value's own: {pages}");
    // At a kernel's entry, which a thread runs once: one add, aggregated across the warp, not a
    // sum held through the kernel.
    let entry = program(by_kernel, hash_def(8), DeviceEvent::KernelEntry);
    let ptx = instrument(&[(&entry, DeviceEvent::KernelEntry)], &[hash_binding(8, false)]);
    let body = &ptx[..ptx.find("ld.global.f32").expect("saxpy's first load")];
    assert!(body.contains("red.global.add.u64") && !ptx.contains("add.s64 %egpu_hs0"), "{ptx}");
    // Spread over per-SM copies: the same sum of the map's own, added when the kernel exits to
    // the copy of the thread's SM.
    let mut spread = hash_binding(8, false);
    spread.spread = 4;
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[spread]);
    assert_eq!(ptx.matches("add.s64 %egpu_hs0_0, %egpu_hs0_0, ").count(), 2, "{ptx}");
    assert!(ptx.contains("and.b32 %egpu_fw0, %egpu_smid, 3;") && !ptx.contains("bra $egpu0_C"));
}

#[test]
fn a_map_looked_up_by_the_kernels_id_remembers_that_key_only_and_a_hit_skips_the_null_check() {
    // bytes[kernel_id] += size and count[kernel_id] += 1, as examples/kernel_bytes.rs does for
    // tensor copies: two values per access, both combined.
    let twice = "mov %r9, %r1\nldxdw %r0, [%r9+8]\nstxdw [%r10-8], %r0\nlddw %r1, map[0]\n\
                 mov %r2, %r10\nadd %r2, -8\ncall 1\njeq %r0, 0, next\n\
                 ldxw %r1, [%r9+16]\nlock add [%r0], %r1\nnext:\nldxdw %r0, [%r9+8]\n\
                 stxdw [%r10-8], %r0\nlddw %r1, map[1]\nmov %r2, %r10\nadd %r2, -8\ncall 1\n\
                 jeq %r0, 0, out\nmov %r1, 1\nlock add [%r0], %r1\nout:\nmov %r0, 0\nexit";
    let mut defs = hash_def(8);
    defs.push(MapDef { name: "count".into(), ..defs[0].clone() });
    let p = program(twice, defs, DeviceEvent::GlobalLoad);
    let mut count = hash_binding(8, false);
    count.addr += 1 << 20;
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[hash_binding(8, false), count]);
    // No key register: the key compared with the kernel's id, a constant.
    assert!(!ptx.contains("_hk"), "{ptx}");
    let id = egpu_ebpf::kernel_id("saxpy") as i64;
    // Saxpy's two loads, two lookups each.
    let lookups = 2 * 2;
    let compared = ptx.lines().filter(|l| l.contains(&format!("_k0, {id}"))).count();
    assert_eq!(compared, 2 * lookups, "compared, then remembered");
    // A hit goes on past the test for null that follows the lookup.
    let hit = ptx.lines().filter(|l| l.contains(" bra ") && l.ends_with("_nonnull;")).count();
    assert_eq!(hit, lookups, "{ptx}");
    assert_eq!(ptx.matches("_nonnull:").count(), lookups);
    // Both values are combined, each in a sum of its own: no compare, no flush but at the exit.
    for sum in ["%egpu_hs0_0", "%egpu_hs1_0"] {
        assert_eq!(ptx.matches(&format!("add.s64 {sum}, {sum}, ")).count(), 2, "{ptx}");
    }
    let last_load = ptx.rfind("ld.global.f32").expect("saxpy's last load");
    assert!(!ptx.contains("bra $egpu0_C") && ptx.find("match.any").unwrap() > last_load);
}

#[test]
fn each_field_a_probe_adds_to_has_a_sum_of_its_own() {
    // value[kernel_id] = { count, bytes }: count += 1 at offset 0, bytes += size at offset 8.
    let fields = "mov %r9, %r1\nldxdw %r0, [%r9+8]\nstxdw [%r10-8], %r0\nlddw %r1, map[0]\n\
                  mov %r2, %r10\nadd %r2, -8\ncall 1\njeq %r0, 0, out\nmov %r1, 1\n\
                  lock add [%r0], %r1\nldxw %r1, [%r9+16]\nlock add [%r0+8], %r1\nout:\n\
                  mov %r0, 0\nexit";
    let def = vec![MapDef {
        name: "traffic".into(),
        kind: MapKind::Hash,
        key_size: 8,
        value_size: 16,
        capacity: 64,
    }];
    let p = program(fields, def, DeviceEvent::GlobalLoad);
    let geometry = Geometry::new(MapKind::Hash, 8, 16, 64, 1, 0).expect("a geometry");
    let mut map =
        DeviceMap { addr: 0x7f00_0000_0000, geometry, live: false, spread: 16, drained: false };
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[map]);
    for sum in ["%egpu_hs0_0", "%egpu_hs0_8"] {
        assert_eq!(ptx.matches(&format!("add.s64 {sum}, {sum}, ")).count(), 2, "{ptx}");
        assert!(ptx.contains(&format!("setp.eq.or.u64 %egpu_fq, {sum}, 0, %egpu_fq;")), "{ptx}");
    }
    assert!(!ptx.contains("bra $egpu0_C"), "no combining slot: {ptx}");
    // Flushed to its field in the copy of the thread's SM.
    assert!(ptx.contains("and.b32 %egpu_fw0, %egpu_smid, 15;"), "{ptx}");
    map.spread = 0;
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[map]);
    assert!(ptx.contains("add.s64 %egpu_fa, %egpu_hp0, 8;"), "{ptx}");
    if let Some(ptxas) = egpu_device::testing::require_ptxas() {
        ptxas.check(&ptx, "sm_90").expect("ptxas takes it");
    }
}

#[test]
fn a_large_kernels_hash_searches_are_functions_it_shares() {
    let load = program(PAGE_COUNT, hash_def(8), DeviceEvent::GlobalLoad);
    let store = program(PAGE_COUNT, hash_def(8), DeviceEvent::GlobalStore);
    let maps = [hash_binding(8, false)];
    let probes = [
        DeviceProbe { program: &load, kernels: Kernels::All, maps: &maps },
        DeviceProbe { program: &store, kernels: Kernels::All, maps: &maps },
    ];
    // Saxpy's three sites keep their searches inline.
    let small = inject(&saxpy(), &probes).expect("instruments").ptx;
    assert!(!small.contains(".func") && !small.contains("\tcall "), "{small}");
    // A Triton matmul's 80: one function per map and helper (the lookup, the insert), defined
    // once before the kernel, called past the thread's last hit.
    let matmul = read_workspace_file("tests/ptx/triton/triton_matmul_cp_async.ptx");
    let injection = inject(&matmul, &probes).expect("instruments");
    let ptx = &injection.ptx;
    let accesses = [DeviceEvent::GlobalLoad, DeviceEvent::GlobalStore];
    let sites = injection.sites.iter().filter(|s| accesses.contains(&s.event)).count();
    assert!(sites > 16, "{sites} sites");
    let defined: Vec<&str> = ptx.lines().filter(|l| l.starts_with(".func ")).collect();
    assert_eq!(defined.len(), 2, "{defined:?}");
    let kernel = ptx.find(".entry").expect("the kernel");
    for f in &defined {
        let name = f.split(") ").nth(1).and_then(|r| r.split('(').next()).expect("a name");
        assert!(ptx.find(f).expect("defined") < kernel, "{name} defined before its callers");
        let calls = ptx.matches(&format!("), {name}, (")).count();
        assert!(calls >= sites, "{name}: {calls} calls for {sites} sites");
    }
    assert_eq!(ptx.matches("ld.global.acquire.gpu.u64").count(), 2, "one search of each kind");
    assert!(ptx.len() < 20 * matmul.len(), "{} bytes from {}", ptx.len(), matmul.len());
}

#[test]
fn a_run_of_copies_adds_up_its_bytes_and_runs_an_additive_probe_once() {
    // bytes[block] += size, by Probe Rust's fetch_add: additive in the size. (By the kernel's
    // id, the probe runs as register adds of each copy's `src-size`, below.)
    let by_kernel = include_str!("../../tests/probes/kernel_bytes.s");
    let bytes = &by_kernel.replace("ldxdw %r0, [%r9+8]", "ldxw %r0, [%r9+36]");
    let matmul = read_workspace_file("tests/ptx/triton/triton_matmul_cp_async.ptx");
    let maps = [hash_binding(8, false)];
    let inject_one = |text: &str| {
        let p = program(text, hash_def(8), DeviceEvent::GlobalLoad);
        let probes = [DeviceProbe { program: &p, kernels: Kernels::All, maps: &maps }];
        inject(&matmul, &probes).expect("instruments")
    };
    let injection = inject_one(bytes);
    let copies = matmul.lines().filter(|l| l.trim_start().starts_with("cp.async.cg")).count();
    let ptx = &injection.ptx;
    let added = ptx.lines().filter(|l| l.contains("add.u32 %egpu1x_run, %egpu1x_run")).count();
    let runs = ptx.matches("mov.u32 %egpu1x_run, 0;").count() - 1; // and its declaration
    assert_eq!(added, copies, "every copy's bytes added up");
    assert!(runs >= 2 && runs * 8 <= copies, "{runs} runs of {copies} copies");
    assert_eq!((injection.runs, injection.in_runs), (runs, copies), "as the injection says");
    // The probe runs once per run, with the run's total as its size.
    let probe_copies = ptx.matches("mov.u32 %egpu1x_size").count();
    assert_eq!(probe_copies, runs, "one probe per run, its size the total");
    // Every copy is still a site of the probe, in the module's order.
    let lines: Vec<usize> = injection.sites.iter().map(|s| s.line).collect();
    assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{lines:?}");
    assert_eq!(injection.sites.len(), copies);
    // A count (+= 1 per access) is not additive in the size: a probe per copy.
    let count = bytes.replace("ldxw %r1, [%r9+16]", "mov %r1, 1");
    assert!(!inject_one(&count).ptx.contains("_run"));
    // By the kernel's id, no probe runs at the copies: each adds its `src-size` register to
    // the thread's sum.
    let summed = inject_one(by_kernel);
    assert_eq!((summed.summarized, summed.runs), (copies, 0));
    let widened = summed.ptx.matches("cvt.u64.u32 %egpu1x_zd").count();
    assert_eq!(widened, copies, "each copy's size register, widened and added");
    assert!(!summed.ptx.contains("%egpu1x_size"), "no probe at a copy");
}

#[test]
fn a_kernel_without_loops_counts_by_the_warp() {
    // Each access runs once per thread: the lowest of the lanes running it adds the count for
    // all of them, and at the exit each lane adds its own sum (in a warp that ran together,
    // one lane), with no vote and no reduction.
    let count = include_str!("../../tests/probes/kernel_bytes.s")
        .replace("ldxw %r1, [%r9+16]", "mov %r1, 1");
    let p = program(&count, hash_def(8), DeviceEvent::GlobalLoad);
    let maps = [hash_binding(8, false)];
    let probes = [DeviceProbe { program: &p, kernels: Kernels::All, maps: &maps }];
    let flat = saxpy().replace("\t@%p2 bra \t$L__BB0_2;\n", "");
    assert_ne!(flat, saxpy(), "the loop's jump back removed");
    let ptx = inject(&flat, &probes).expect("instruments").ptx;
    assert_eq!(ptx.matches("activemask.b32 %egpu_zm").count(), 2, "two loads: {ptx}");
    assert_eq!(ptx.matches("popc.b32 %egpu_zm").count(), 2, "{ptx}");
    let led = ptx.matches(" add.u64 %egpu_hs0_0, %egpu_hs0_0, %egpu_zc").count();
    assert_eq!(led, 2, "the leader adds the lanes' count: {ptx}");
    assert!(!ptx.contains("add.u64 %egpu_hs0_0, %egpu_hs0_0, 1;"), "{ptx}");
    let flush = &ptx[ptx.find("setp.eq.or.u64 %egpu_fq, %egpu_hs0_0").expect("the flush")..];
    let flush = &flush[..flush.find("_done:").expect("its end")];
    assert!(!flush.contains("redux.sync") && !flush.contains("vote.sync"), "{flush}");
    assert!(flush.contains("red.global.add.u64"), "{flush}");
    // Bytes: the size times the lanes.
    let bytes = include_str!("../../tests/probes/kernel_bytes.s");
    let b = program(bytes, hash_def(8), DeviceEvent::GlobalLoad);
    let probes = [DeviceProbe { program: &b, kernels: Kernels::All, maps: &maps }];
    let ptx = inject(&flat, &probes).expect("instruments").ptx;
    let times = ptx.matches(" mad.lo.u64 %egpu_hs0_0, %egpu_zc").count();
    assert_eq!(times, 2, "{ptx}");
    // With its loop the kernel keeps a register add per access and the warp's reduction at
    // the exit, paid once for many accesses.
    let probes = [DeviceProbe { program: &p, kernels: Kernels::All, maps: &maps }];
    let ptx = inject(&saxpy(), &probes).expect("instruments").ptx;
    assert!(!ptx.contains("activemask.b32 %egpu_zm"), "{ptx}");
    assert_eq!(ptx.matches("add.u64 %egpu_hs0_0, %egpu_hs0_0, 1;").count(), 2, "{ptx}");
    let flush = &ptx[ptx.find("setp.eq.or.u64 %egpu_fq, %egpu_hs0_0").expect("the flush")..];
    assert!(flush.contains("redux.sync.add.u32"), "{flush}");
}

#[test]
fn a_tensor_copys_probe_runs_just_after_the_copy() {
    // So the copy stays next to the `elect.sync` that guards it (ptxas's uniform issue).
    let copy = read_workspace_file("tests/ptx/tensor_copy.ptx");
    let bytes = include_str!("../../tests/probes/kernel_bytes.s");
    let maps = [hash_binding(8, false)];
    let probes: Vec<_> = [DeviceEvent::GlobalLoad, DeviceEvent::GlobalStore]
        .map(|event| program(bytes, hash_def(8), event))
        .into_iter()
        .collect();
    let probes: Vec<DeviceProbe<'_>> = probes
        .iter()
        .map(|p| DeviceProbe { program: p, kernels: Kernels::All, maps: &maps })
        .collect();
    // With a table of boxes, so that a copy's size is known at run time only (else it is 0,
    // and the probe, adding it, runs as nothing: `summaries.rs`).
    let options = InjectOptions { tensor_boxes: Some(0x7e00_0000_0000), ..Default::default() };
    let ptx = inject_with(&copy, &probes, &options).expect("instruments").ptx;
    for copy in ["cp.async.bulk.tensor.2d.shared::cluster.global", "cp.async.bulk.tensor.2d.global"]
    {
        let at = ptx.find(copy).expect("the copy");
        let next = ptx[at..].find(";\n").expect("its end") + at;
        let after = &ptx[next..];
        let probe = after.find(".reg .b64 %egpu_addr").expect("a probe after the copy");
        let original = after.find("\n\t// end inline asm").unwrap_or(after.len());
        assert!(probe < original, "the probe follows the copy at once:\n{ptx}");
    }
    assert_eq!(ptx.matches(".reg .b64 %egpu_addr").count(), 2, "one probe each");
}

#[test]
fn a_probe_that_only_adds_numbers_known_at_the_site_runs_as_register_adds() {
    // bytes[kernel_id] += size, inserting the value when missing (Probe Rust's `fetch_add`):
    // at a 4-byte load its only effect is `+= 4` to the kernel's value. No probe at the loads:
    // an add of 4 to the thread's sum; when the thread exits, it finds the value's address in
    // a variable of the module's, or looks the value up (or inserts it) itself, and adds its
    // sum.
    let bytes = include_str!("../../tests/probes/kernel_bytes.s");
    let p = program(bytes, hash_def(8), DeviceEvent::GlobalLoad);
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[hash_binding(8, false)]);
    assert_eq!(ptx.matches("add.u64 %egpu_hs0_0, %egpu_hs0_0, 4;").count(), 2, "two loads: {ptx}");
    assert!(ptx.contains(".global .align 8 .u64 egpu_vp"), "{ptx}");
    let exit = ptx.find("ld.global.u64 %egpu_vp").expect("the exit reads the variable first");
    assert!(!ptx[..exit].contains("%egpu_hp0, 0;\n\tsetp") && !ptx[..exit].contains("atom."));
    let search = ptx[exit..].find(".cas.b64").expect("the search");
    assert!(ptx[exit..].contains("st.global.u64 [egpu_vp"), "{ptx}");
    // Each lane on its own (sm_70 and later): no lane searches for a group of others, whose
    // lanes may not have come together again at the exit.
    let lookup = &ptx[exit..exit + ptx[exit..].find("$egpu_flush").expect("the flush")];
    assert!(!lookup.contains("shfl.sync") && !lookup.contains("vote.sync"), "{lookup}");
    assert!(ptx.contains("setp.eq.or.u64 %egpu_fq, %egpu_hs0_0, 0, %egpu_fq;"), "{ptx}");
    // A lane whose search found nothing (the map full) counts a refused insert in the shard
    // header.
    let g = hash_binding(8, false);
    let refused = g.addr + (g.geometry.shard_offset(0) + egpu_maps::layout::shard::REFUSED) as u64;
    // (Its address in a register: `ptxas` takes no immediate address but a local one.)
    let counted = ptx[exit..].find(&format!("_r, {refused};")).expect("counted");
    assert!(search < counted, "{ptx}");
    assert!(ptx[exit..][counted..].contains("red.global.add.u64 [%egpu_vp"), "{ptx}");
    // A count (`+= 1`) too; at a generic access (global only at run time) the probe runs.
    let count = bytes.replace("ldxw %r1, [%r9+16]", "mov %r1, 1");
    let p = program(&count, hash_def(8), DeviceEvent::GlobalLoad);
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[hash_binding(8, false)]);
    assert_eq!(ptx.matches("add.u64 %egpu_hs0_0, %egpu_hs0_0, 1;").count(), 2, "{ptx}");
    let generic = saxpy().replace("ld.global.f32", "ld.f32");
    let maps = [hash_binding(8, false)];
    let ptx = inject(&generic, &[DeviceProbe { program: &p, kernels: Kernels::All, maps: &maps }])
        .expect("instruments")
        .ptx;
    assert_eq!(ptx.matches("add.u64 %egpu_hs0_0, %egpu_hs0_0, 1;").count(), 1, "{ptx}");
    // The probe's two paths to its add (found; inserted, then found).
    assert_eq!(ptx.matches("add.s64 %egpu_hs0_0, %egpu_hs0_0, ").count(), 2, "{ptx}");
    // By the address: not a number known at the site.
    let by_address = bytes.replace("ldxdw %r0, [%r9+8]", "ldxdw %r0, [%r9+0]");
    let p = program(&by_address, hash_def(8), DeviceEvent::GlobalLoad);
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[hash_binding(8, false)]);
    assert!(!ptx.contains("vote.sync.any.pred") && !ptx.contains("_hs0"), "{ptx}");
}

/// A probe that reads the mode (offset 0) and Δ (offset 8) of a one-slot array, as the far
/// tier's probes read their configuration; `write` stores to the mode as well.
fn configured(write: bool) -> Verified {
    let store = if write { "stxdw [%r0+0], %r2\n" } else { "" };
    let text = format!(
        "mov %r1, 0\nstxw [%r10-4], %r1\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -4\n\
         call 1\njeq %r0, 0, out\nldxdw %r1, [%r0+8]\nldxdw %r2, [%r0+0]\n{store}\
         jne %r2, 1, out\nmov %r0, %r1\nexit\nout:\nmov %r0, 0\nexit"
    );
    let def = MapDef {
        name: "tier".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 16,
        capacity: 1,
    };
    program(&text, vec![def], DeviceEvent::GlobalLoad)
}

fn array_binding(len: u32) -> DeviceMap {
    let geometry = Geometry::new(MapKind::Array, 4, 16, len, 1, 0).expect("geometry");
    DeviceMap { addr: 0x7f00_0000_0000, geometry, live: false, spread: 0, drained: false }
}

#[test]
fn a_configuration_no_probe_writes_is_read_once_per_thread() {
    // Its two words are loaded when the kernel starts; each access reads the registers, with
    // no load before the probe's branch.
    let reader = configured(false);
    let maps = [array_binding(1)];
    let ptx = instrument(&[(&reader, DeviceEvent::GlobalLoad)], &maps);
    let value = 0x7f00_0000_0000u64 + maps[0].geometry.slot_offset(0, 0) as u64;
    for (word, at) in [(0, value), (1, value + 8)] {
        let load = format!("mov.b64 %egpu_iv{word}, {at};\n\tld.global.u64 %egpu_iv{word}");
        assert_eq!(ptx.matches(&load).count(), 1, "{load}: {ptx}");
    }
    assert_eq!(ptx.matches("ld.global.u64").count(), 2, "only the kernel's start loads: {ptx}");
    assert_eq!(ptx.matches(", %egpu_iv0;").count(), 2, "the mode at both loads: {ptx}");
    // A probe that writes it, or an array of two values, reads memory at each access.
    let writer = configured(true);
    let ptx = instrument(
        &[(&reader, DeviceEvent::GlobalLoad), (&writer, DeviceEvent::GlobalLoad)],
        &maps,
    );
    assert!(!ptx.contains("%egpu_iv"), "{ptx}");
    let ptx = instrument(&[(&reader, DeviceEvent::GlobalLoad)], &[array_binding(2)]);
    assert!(!ptx.contains("%egpu_iv") && ptx.contains("ld.global.u64"), "{ptx}");
    // Nor in a kernel without loops, where each probe runs at most once per thread.
    let flat = saxpy().replace("\t@%p2 bra \t$L__BB0_2;\n", "");
    let probes = [DeviceProbe { program: &reader, kernels: Kernels::All, maps: &maps }];
    let ptx = inject(&flat, &probes).expect("instruments").ptx;
    assert!(!ptx.contains("%egpu_iv") && ptx.contains("ld.global.u64"), "{ptx}");
    let Some(ptxas) = egpu_device::testing::require_ptxas() else { return };
    let ptx = instrument(&[(&reader, DeviceEvent::GlobalLoad)], &maps);
    ptxas.check(&ptx, "sm_90").unwrap_or_else(|e| panic!("{e}\n{ptx}"));
}

#[test]
fn instructions_no_path_reaches_are_left_out() {
    // r6 is 0 on every path: the verifier never follows the branch, so it learned nothing about
    // the store to the frame and the lookup in another map there. Translated, they would be a
    // store at no known slot and a call whose map the verifier never saw: left out, an exit
    // in their place.
    let text = "mov %r6, 0\nstxdw [%r10-8], %r6\njne %r6, 0, dead\nlddw %r1, map[0]\n\
                mov %r2, %r10\nadd %r2, -8\ncall 1\nmov %r0, 0\nexit\n\
                dead:\nstdw [%r10-16], 7\nlddw %r1, map[1]\nmov %r2, %r10\nadd %r2, -16\n\
                call 1\nmov %r0, 0\nexit";
    let mut defs = hash_def(8);
    defs.push(MapDef { name: "count".into(), ..defs[0].clone() });
    let p = program(text, defs, DeviceEvent::GlobalLoad);
    let reached: Vec<bool> = (0..p.program().insns().len()).map(|pc| p.reached(pc)).collect();
    assert!(reached[0] && !reached[reached.len() - 1], "{reached:?}");
    let mut count = hash_binding(8, false);
    count.addr += 1 << 20;
    let ptx = instrument(&[(&p, DeviceEvent::GlobalLoad)], &[hash_binding(8, false), count]);
    // No byte-wise store to an unknown frame, no second map's address, and no trap.
    assert!(!ptx.contains("st.u8") && !ptx.contains("trap"), "{ptx}");
    assert!(!ptx.contains(&(count.addr as i64).to_string()), "{ptx}");
}
