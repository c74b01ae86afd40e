//! The map helpers on the GPU, inlined with the map's geometry as constants.
//!
//! - Arrays and per-CPU arrays: a bounds check and a multiply (the shard of a per-CPU array is
//!   the SM's, `cpu_shards + %smid % sm_shards`).
//! - Hash maps and per-CPU hash maps (`hash.rs`): the key's bytes become 64-bit words in registers, hashed
//!   as [`egpu_maps::layout::hash_key`] does, and the shard's slots are probed from the key's
//!   home slot as the layout defines. Device inserts follow a protocol for device writers only
//!   (one writing side per word: while a kernel runs, the device copy of a map is written by its
//!   threads alone): claim an EMPTY slot by compare-and-swap to BUSY (owner
//!   [`DEVICE_OWNER`](egpu_maps::layout::DEVICE_OWNER)), write the key and value, count the
//!   entry against the capacity, then publish it as FULL. A thread that meets a slot being inserted under its own key's tag waits for it to be
//!   published, so racing inserts of one key make one entry. Tombstones are not reused by device
//!   inserts. A slot left pending by a host writer that died is waited for a bounded time, then
//!   passed over.
//! - Lookups: every lane probes for its own key (lanes with the same key load the same words,
//!   which the memory system serves once); a live entry under the key's tag is recognised by
//!   one compare of its state word. A thread remembers its last hit per map when the kernel
//!   gives it registers for that ([`Options::lookup_cache`](super::Options::lookup_cache)), in
//!   maps that no probe of the kernel removes entries from ([`lookups_and_removals`]).
//! - Ring buffers: a ticket per record from one atomic add per warp, then the record alone (the
//!   host publishes device-written records when it reads the ring after the kernel).

use std::collections::BTreeSet;

use egpu_ebpf::helpers::id as helper_id;
use egpu_ebpf::verifier::{Access, Verified};
use egpu_ebpf::{CallTarget, Instruction, MapKind, Reg};
use egpu_maps::layout::{Geometry, SHARD_HEADER_BYTES, ring_state, shard};

use super::emit::Emitter;
use super::{DeviceMap, TranslateError};

/// Values and keys longer than this are refused on the GPU (they live in registers).
pub(super) const MAX_WORDS: u32 = 32;

/// Whether the bytes at a frame offset can be read as words straight from the frame's slot
/// registers: 8-byte aligned, or within one slot.
pub(super) fn words_direct(a: Access, bytes: u32) -> bool {
    a.offset.is_some_and(|o| {
        let within = o.rem_euclid(8);
        within == 0 || within + i64::from(bytes) <= 8
    })
}

/// Bytes a ring record copies from the data: the record size, or less when the verifier bounds
/// the size passed below it.
pub(super) fn ring_bytes(max_size: Option<u64>, record: u32) -> u32 {
    max_size.map_or(record, |m| m.min(u64::from(record)) as u32)
}

/// The maps (indices into the program's map table) whose entries the program looks up by
/// `bpf_map_lookup_elem`, and those it removes entries from by `bpf_map_delete_elem` (`None`
/// when a removal's map is not the same on every path).
pub fn lookups_and_removals(verified: &Verified) -> (BTreeSet<u32>, Option<BTreeSet<u32>>) {
    let mut lookups = BTreeSet::new();
    let mut removals = Some(BTreeSet::new());
    for d in verified.program().decoded() {
        let Instruction::Call(CallTarget::Helper(id)) = d.insn else { continue };
        let map = verified.call(d.pc).and_then(|c| c.map);
        match id {
            helper_id::MAP_LOOKUP_ELEM => lookups.extend(map),
            helper_id::MAP_DELETE_ELEM => match (map, removals.as_mut()) {
                (Some(m), Some(r)) => {
                    r.insert(m);
                }
                _ => removals = None,
            },
            _ => {}
        }
    }
    (lookups, removals)
}

impl Emitter<'_> {
    /// The device binding of map `m` (`None`: the paths disagree on the map).
    pub(super) fn map(&self, pc: usize, m: Option<u32>) -> Result<DeviceMap, TranslateError> {
        let m = m.ok_or(TranslateError::MapUse {
            pc,
            name: String::new(),
            why: "different paths pass different maps".into(),
        })?;
        let name = self.map_name(m);
        self.options.maps.get(m as usize).copied().ok_or(TranslateError::Map { pc, name })
    }

    fn map_name(&self, m: u32) -> String {
        self.program.maps().get(m as usize).map(|d| d.name.clone()).unwrap_or_default()
    }

    /// `bpf_map_lookup_elem`, `bpf_map_update_elem` and `bpf_map_delete_elem`.
    pub(super) fn map_helper(&mut self, pc: usize, id: u32) -> Result<(), TranslateError> {
        let facts = self.verified.call(pc).copied();
        let m = facts.and_then(|f| f.map);
        let map = self.map(pc, m)?;
        let args = facts.map(|f| f.args).unwrap_or_default();
        let r0 = self.reg(Reg::R0);
        let w0 = self.tmp32(0);
        match (map.geometry.kind, id) {
            (MapKind::Array | MapKind::PerCpuArray, helper_id::MAP_DELETE_ELEM) => {
                // Array entries cannot be removed (as in Linux).
                self.line(format!("mov.b64 {r0}, -22;"));
            }
            (MapKind::Array | MapKind::PerCpuArray, helper_id::MAP_LOOKUP_ELEM) => {
                self.read_u32(Reg::R2, args[1], &w0);
                self.array_slot(pc, m.unwrap_or(0), map, &w0, &r0)?;
            }
            (MapKind::Array | MapKind::PerCpuArray, _) => self.array_update(pc, m, map, args)?,
            (MapKind::Hash | MapKind::PerCpuHash, _) => self.hash(pc, id, m, map, args)?,
            _ => return self.unsupported(pc, id),
        }
        Ok(())
    }

    /// Loads the `u32` that `reg` points at into `into`, as directly as the verifier allows.
    pub(super) fn read_u32(&mut self, reg: Reg, at: Option<Access>, into: &str) {
        if let Some((slot, byte)) = self.frame_slot(at) {
            let t3 = self.tmp64(3);
            self.line(format!("bfe.u64 {t3}, {slot}, {}, 32;", byte * 8));
            self.line(format!("cvt.u32.u64 {into}, {t3};"));
            return;
        }
        match at {
            Some(Access { aligned: true, .. }) => {
                let r = self.reg(reg);
                self.line(format!("ld.u32 {into}, [{r}];"));
            }
            _ => {
                let (r, w3) = (self.reg(reg), self.tmp32(3));
                self.line(format!("mov.b32 {into}, 0;"));
                for i in (0..4).rev() {
                    self.line(format!("ld.u8 {w3}, [{r}+{i}];"));
                    self.line(format!("shl.b32 {into}, {into}, 8;"));
                    self.line(format!("or.b32 {into}, {into}, {w3};"));
                }
            }
        }
    }

    /// The `bytes` bytes that `reg` points at, as 64-bit words (the last one zero-padded) in
    /// the registers `k{first}`, `k{first + 1}`, …, whose names are returned.
    pub(super) fn read_words(
        &mut self,
        reg: Reg,
        at: Option<Access>,
        bytes: u32,
        first: u32,
    ) -> Vec<String> {
        let n = bytes.div_ceil(8);
        self.words = self.words.max(first + n);
        let names: Vec<String> = (first..first + n).map(|i| self.map_word(i)).collect();
        let tail = bytes % 8;
        if let Some((slot, byte)) = self.frame_slot(at)
            && at.is_some_and(|a| words_direct(a, bytes))
        {
            let at = at.and_then(|a| a.offset).unwrap_or(0) + i64::from(self.frame);
            for (w, name) in names.iter().enumerate() {
                let len = if w as u32 == n - 1 && tail != 0 { tail } else { 8 };
                let slot_name =
                    if w == 0 { slot.clone() } else { self.slot_reg(at / 8 + w as i64) };
                if len == 8 && byte == 0 {
                    self.line(format!("mov.b64 {name}, {slot_name};"));
                } else {
                    self.line(format!("bfe.u64 {name}, {slot_name}, {}, {};", byte * 8, len * 8));
                }
            }
            return names;
        }
        let r = self.reg(reg);
        let aligned = at.is_some_and(|a| a.aligned);
        let (t0, w3) = (self.tmp64(0), self.tmp32(3));
        for (w, name) in names.iter().enumerate() {
            let len = if w as u32 == n - 1 && tail != 0 { tail } else { 8 };
            let base = w * 8;
            if aligned && len == 8 {
                self.line(format!("ld.u64 {name}, [{r}+{base}];"));
                continue;
            }
            self.line(format!("mov.b64 {name}, 0;"));
            for i in (0..len).rev() {
                self.line(format!("ld.u8 {w3}, [{r}+{}];", base as u32 + i));
                self.line(format!("cvt.u64.u32 {t0}, {w3};"));
                self.line(format!("shl.b64 {name}, {name}, 8;"));
                self.line(format!("or.b64 {name}, {name}, {t0};"));
            }
        }
        names
    }

    /// `into` = the device address of shard 0's first slot, or of this SM's shard for a per-CPU
    /// map; `shard` (when given) = the shard's header. Uses `w2` and `t2` (and `t7` when no
    /// `shard` register is given).
    pub(super) fn shard_base(
        &mut self,
        pc: usize,
        m: u32,
        map: DeviceMap,
        into: &str,
        shard: Option<&str>,
    ) -> Result<(), TranslateError> {
        let g = map.geometry;
        let first = map.addr.wrapping_add(g.shard_offset(0) as u64);
        let per_sm = matches!(g.kind, MapKind::PerCpuArray | MapKind::PerCpuHash)
            || (g.kind == MapKind::RingBuf && g.sm_shards > 0);
        let header = shard.map_or_else(|| self.tmp64(7), str::to_owned);
        self.line(format!("mov.b64 {header}, {};", first as i64));
        if per_sm {
            if g.sm_shards == 0 {
                return Err(TranslateError::MapUse {
                    pc,
                    name: self.map_name(m),
                    why: "a per-CPU map used on the GPU needs device (SM) shards".into(),
                });
            }
            let (w2, t1) = (self.tmp32(2), self.tmp64(2));
            // The shard of this SM: host shards first, then one per SM.
            let smid = self.smid();
            self.line(format!("mov.u32 {w2}, {smid};"));
            if g.sm_shards.is_power_of_two() {
                self.line(format!("and.b32 {w2}, {w2}, {};", g.sm_shards - 1));
            } else {
                self.line(format!("rem.u32 {w2}, {w2}, {};", g.sm_shards));
            }
            self.line(format!("add.s32 {w2}, {w2}, {};", g.cpu_shards));
            self.line(format!("mul.wide.u32 {t1}, {w2}, {};", g.shard_stride));
            self.line(format!("add.s64 {header}, {header}, {t1};"));
        }
        self.line(format!("add.s64 {into}, {header}, {SHARD_HEADER_BYTES};"));
        Ok(())
    }

    /// `into` = the address of element `index` of an array map (this SM's shard of a per-CPU
    /// array), or 0 when the index is out of range.
    pub(super) fn array_slot(
        &mut self,
        pc: usize,
        m: u32,
        map: DeviceMap,
        index: &str,
        into: &str,
    ) -> Result<(), TranslateError> {
        let g = map.geometry;
        let [t0, t6] = [self.tmp64(0), self.tmp64(6)];
        let q0 = self.pred(0);
        self.shard_base(pc, m, map, &t6, None)?;
        self.line(format!("setp.lt.u32 {q0}, {index}, {};", g.capacity));
        self.line(format!("mul.wide.u32 {t0}, {index}, {};", g.slot_stride));
        self.line(format!("add.s64 {t0}, {t0}, {t6};"));
        self.line(format!("selp.b64 {into}, {t0}, 0, {q0};"));
        Ok(())
    }

    /// `bpf_map_update_elem` on an array: 0, -E2BIG out of range, -EEXIST with `BPF_NOEXIST`.
    fn array_update(
        &mut self,
        pc: usize,
        m: Option<u32>,
        map: DeviceMap,
        args: [Option<Access>; 5],
    ) -> Result<(), TranslateError> {
        let g = map.geometry;
        if g.value_size.div_ceil(8) > MAX_WORDS {
            return Err(self.too_big(pc, m));
        }
        let (r0, w0, t5) = (self.reg(Reg::R0), self.tmp32(0), self.tmp64(5));
        let (q0, r4) = (self.pred(0), self.reg(Reg::R4));
        self.read_u32(Reg::R2, args[1], &w0);
        let value = self.read_words(Reg::R3, args[2], g.value_size, 0);
        self.array_slot(pc, m.unwrap_or(0), map, &w0, &t5)?;
        let done = self.local_label('U', pc);
        // As the CPU checks: the flags first (all 64 bits), then the index, then BPF_NOEXIST.
        self.line(format!("mov.b64 {r0}, -22;"));
        self.line(format!("setp.gt.u64 {q0}, {r4}, 2;"));
        self.line(format!("@{q0} bra {done};"));
        self.line(format!("mov.b64 {r0}, -7;"));
        self.line(format!("setp.eq.u64 {q0}, {t5}, 0;"));
        self.line(format!("@{q0} bra {done};"));
        self.line(format!("mov.b64 {r0}, -17;"));
        self.line(format!("setp.eq.u64 {q0}, {r4}, 1;"));
        self.line(format!("@{q0} bra {done};"));
        for (w, v) in value.iter().enumerate() {
            self.line(format!("st.global.u64 [{t5}+{}], {v};", w * 8));
        }
        self.line(format!("mov.b64 {r0}, 0;"));
        self.place(&done);
        Ok(())
    }

    pub(super) fn too_big(&self, pc: usize, m: Option<u32>) -> TranslateError {
        TranslateError::MapUse {
            pc,
            name: self.map_name(m.unwrap_or(0)),
            why: format!("keys and values on the GPU are at most {} bytes", MAX_WORDS * 8),
        }
    }

    /// `bpf_ringbuf_output(ring, data, size, flags)`: one fixed-size record (the data, zero-padded)
    /// into the ring's shard of this SM (or its only shard), by a group of lanes at a time (a
    /// warp's active lanes, which all write the same shard; a lane alone before `sm_70`). The
    /// group's leader takes the group's tickets by one atomic add on `head`; a ticket is dropped
    /// and counted (`-EAGAIN`), never waited for, when the ring is full. A ring in GPU memory
    /// read after the kernel ([`DeviceMap::drained`] false): tickets at or past the consumer's
    /// `tail` plus the capacity are dropped, `head` is brought back to that limit, and only the
    /// record is written (the host publishes it after the kernel), which is sound while nobody
    /// consumes. A ring drained while kernels run: the leader first claims room for the group in
    /// the shard's `CLAIMED` word (taken back, and the group's records dropped, when the claim
    /// ends past `tail` plus the capacity), so every ticket's slot was consumed whoever consumes
    /// meanwhile, and after the lanes' records it publishes the group by the sequence word of
    /// its first slot, with release ordering: committed, in the first ticket's lap, the group's
    /// size in the owner field (see egpu_maps' `ring` module). 0, or `-E2BIG` when `size`
    /// exceeds the record size.
    pub(super) fn ring_output(&mut self, pc: usize) -> Result<(), TranslateError> {
        let facts = self.verified.call(pc).copied();
        let m = facts.and_then(|f| f.map);
        let map = self.map(pc, m)?;
        let g = map.geometry;
        if g.kind != MapKind::RingBuf {
            return self.unsupported(pc, helper_id::RINGBUF_OUTPUT);
        }
        if map.live {
            // A host consumer of mapped memory reads committed slots one by one, and device
            // producers publish groups.
            return Err(TranslateError::MapUse {
                pc,
                name: self.map_name(m.unwrap_or(0)),
                why: "a ring buffer read live (mapped host memory) cannot be written by GPU \
                      probes yet; place it in GPU memory (DeviceMapBuffer)"
                    .into(),
            });
        }
        let ring = self.local_label('R', pc);
        let r0 = self.reg(Reg::R0);
        let [t0, t1, t2, _, t4, _, t6, t7] = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| self.tmp64(i));
        let q0 = self.pred(0);
        let l = |what: &str| format!("{ring}_{what}");
        let (drop, done) = (l("drop"), l("done"));
        let words = self.record_words(pc, m, &g, &done)?;
        self.shard_base(pc, m.unwrap_or(0), map, &t7, Some(&t6))?;
        self.ring_group();
        // The lane's batch of tickets: the kernel's registers, which a local function cannot
        // name (and `st.release`, sm_70 and later).
        let batch = match m {
            Some(m) if map.drained && self.function == 0 && self.options.sm >= 70 => {
                self.options.ring_batches.get(m as usize).cloned().flatten()
            }
            _ => None,
        };
        if let Some(regs) = &batch {
            self.ring_take(&g, regs, &l("got"));
        } else if map.drained {
            let t0 = self.tmp64(0);
            self.ring_claim(g.capacity, None, &t0);
        } else {
            self.line(format!(
                "@{q0} atom.global.add.u64 {t0}, [{t6}+{}], {t0};",
                shard::LEN_OR_HEAD
            ));
        }
        self.ring_ticket(map.drained.then_some(drop.as_str()));
        if !map.drained {
            // The limit: the consumer's tail, plus the capacity.
            self.line(format!("ld.global.u64 {t1}, [{t6}+{}];", shard::TAIL));
            self.line(format!("add.s64 {t1}, {t1}, {};", g.capacity));
            self.line(format!("setp.ge.u64 {q0}, {t0}, {t1};"));
            self.line(format!("@{q0} bra {drop};"));
        }
        self.line(by_capacity(Quotient::Rem, &t2, &t0, g.capacity));
        self.line(format!("mul.lo.u64 {t4}, {t2}, {};", g.slot_stride));
        self.line(format!("add.s64 {t4}, {t4}, {t7};"));
        self.store_record(map, words, &t4);
        if let Some(regs) = &batch {
            self.ring_batch_full(&g, regs, &l("published"));
        } else if map.drained {
            self.ring_publish(&g, &l("published"));
        }
        self.line(format!("mov.b64 {r0}, 0;"));
        self.line(format!("bra {done};"));
        self.place(&drop);
        if !map.drained {
            // Counted per lane; `head` back to the limit, so the ring stays consistent.
            self.line(format!("red.global.add.u64 [{t6}+{}], 1;", shard::REFUSED));
            self.line(format!("red.global.min.u64 [{t6}+{}], {t1};", shard::LEN_OR_HEAD));
        }
        self.line(format!("mov.b64 {r0}, -11;"));
        self.place(&done);
        Ok(())
    }

    /// The words of the record `bpf_ringbuf_output` (or its warp form) at `pc` writes, from the
    /// data (`r2`) of `size` (`r3`) bytes, zero past `size`, as many as the ring's records
    /// hold: 0 in `r0` and a jump to `done` (-7, `-E2BIG`, in `r0`) when `size` exceeds them.
    fn record_words(
        &mut self,
        pc: usize,
        m: Option<u32>,
        g: &Geometry,
        done: &str,
    ) -> Result<Vec<String>, TranslateError> {
        let facts = self.verified.call(pc).copied();
        let bytes = ring_bytes(facts.and_then(|f| f.max_size), g.value_size);
        if bytes.div_ceil(8) > MAX_WORDS {
            return Err(self.too_big(pc, m));
        }
        let args = facts.map(|f| f.args).unwrap_or_default();
        let (r0, r3) = (self.reg(Reg::R0), self.reg(Reg::R3));
        let (t1, t2, w0, q0) = (self.tmp64(1), self.tmp64(2), self.tmp32(0), self.pred(0));
        self.line(format!("mov.b64 {r0}, -7;"));
        self.line(format!("setp.gt.u64 {q0}, {r3}, {};", g.value_size));
        self.line(format!("@{q0} bra {done};"));
        let mut words = self.read_words(Reg::R2, args[1], bytes, 0);
        // Bytes past `size` are zero in the record; nothing to clear when the verifier knows
        // the size is the whole record on every path.
        let whole = facts.and_then(|f| f.min_size).is_some_and(|m| m >= u64::from(bytes));
        for (w, k) in words.iter().enumerate().filter(|_| !whole) {
            self.line(format!("sub.s64 {t1}, {r3}, {};", w * 8));
            self.line(format!("min.s64 {t1}, {t1}, 8;"));
            self.line(format!("max.s64 {t1}, {t1}, 0;"));
            self.line(format!("shl.b64 {t1}, {t1}, 3;"));
            self.line(format!("cvt.u32.u64 {w0}, {t1};"));
            self.line(format!("mov.b64 {t2}, 1;"));
            self.line(format!("shl.b64 {t2}, {t2}, {w0};"));
            self.line(format!("sub.s64 {t2}, {t2}, 1;"));
            self.line(format!("and.b64 {k}, {k}, {t2};"));
        }
        words.extend((words.len() as u32..g.value_size.div_ceil(8)).map(|_| "0".to_string()));
        Ok(words)
    }

    /// The record's `words` stored at its slot (`slot`, an address) of ring `map`.
    fn store_record(&mut self, map: DeviceMap, words: Vec<String>, slot: &str) {
        let g = map.geometry;
        // The record. A group's records are consecutive, so its stores fill whole sectors; in
        // pairs of words when every record starts 16-byte aligned.
        let records = map.addr.wrapping_add(g.slot_offset(0, 0) as u64);
        let paired = g.slot_stride.is_multiple_of(16)
            && g.shard_stride.is_multiple_of(16)
            && records.is_multiple_of(16);
        let mut w = 0;
        while w < words.len() {
            let at = g.value_offset as usize + 8 * w;
            if paired && w + 1 < words.len() {
                let (a, b) = (&words[w], &words[w + 1]);
                self.line(format!("st.global.v2.u64 [{slot}+{at}], {{{a}, {b}}};"));
                w += 2;
            } else {
                self.line(format!("st.global.u64 [{slot}+{at}], {};", words[w]));
                w += 1;
            }
        }
    }

    /// `egpu_ringbuf_output_warp(ring, data, size, flags)`: one record for the lanes that run
    /// the call together, the lowest lane's, written by it alone. From a ring drained while
    /// kernels run, at an access of a kernel (its lane's batch of tickets in registers), the
    /// leader takes one ticket from its batch and stores the record: no group of lanes to
    /// count, no ticket to pass, no barrier of the warp's lanes. Elsewhere the leader runs
    /// [`Emitter::ring_output`] as a group of one (before `sm_70`, which has no `activemask`,
    /// every lane writes its own).
    pub(super) fn ring_output_warp(&mut self, pc: usize) -> Result<(), TranslateError> {
        let facts = self.verified.call(pc).copied();
        let m = facts.and_then(|f| f.map);
        let map = self.map(pc, m)?;
        let g = map.geometry;
        if g.kind != MapKind::RingBuf {
            return self.unsupported(pc, helper_id::RINGBUF_OUTPUT_WARP);
        }
        if map.live || self.options.sm < 70 {
            return self.ring_output(pc);
        }
        let ring = self.local_label('W', pc);
        let l = |what: &str| format!("{ring}_{what}");
        let (drop, done) = (l("drop"), l("done"));
        let r0 = self.reg(Reg::R0);
        let [t0, t2, t4, t6, t7] = [0, 2, 4, 6, 7].map(|i| self.tmp64(i));
        let [w1, w3] = [1, 3].map(|i| self.tmp32(i));
        let [q0, q1, q2] = [0, 1, 2].map(|i| self.pred(i));
        let batch = match m {
            Some(m) if map.drained && self.function == 0 => {
                self.options.ring_batches.get(m as usize).cloned().flatten()
            }
            _ => None,
        };
        let leader = |e: &mut Self| {
            e.line(format!("activemask.b32 {w1};"));
            e.line(format!("mov.u32 {w3}, %lanemask_lt;"));
            e.line(format!("and.b32 {w3}, {w3}, {w1};"));
            e.line(format!("setp.eq.u32 {q0}, {w3}, 0;"));
        };
        let Some(regs) = batch else {
            leader(self);
            self.line(format!("mov.b64 {r0}, 0;"));
            self.line(format!("@!{q0} bra {done};"));
            self.ring_output(pc)?;
            self.place(&done);
            return Ok(());
        };
        let words = self.record_words(pc, m, &g, &done)?;
        leader(self);
        self.line(format!("mov.b64 {r0}, 0;"));
        self.line(format!("@!{q0} bra {done};"));
        self.shard_base(pc, m.unwrap_or(0), map, &t7, Some(&t6))?;
        // A group of one: the leader's ticket from its batch (a new batch when it is spent).
        self.line(format!("mov.b64 {t0}, 1;"));
        self.ring_take(&g, &regs, &l("got"));
        self.line(format!("setp.eq.s64 {q2}, {t0}, -1;"));
        self.line(format!("@{q2} bra {drop};"));
        self.line(by_capacity(Quotient::Rem, &t2, &t0, g.capacity));
        self.line(format!("mul.lo.u64 {t4}, {t2}, {};", g.slot_stride));
        self.line(format!("add.s64 {t4}, {t4}, {t7};"));
        self.store_record(map, words, &t4);
        // The batch published when spent: the stores are the leader's own, before its release.
        let [next, end, _] = &regs;
        self.line(format!("setp.ne.u64 {q1}, {next}, {end};"));
        self.line(format!("@{q1} bra {done};"));
        let temps = [1, 2, 3, 4].map(|i| self.tmp64(i));
        let published = l("published");
        self.out.push_str(&close_ring_batch(
            &g,
            [&regs[0], &regs[1], &regs[2]],
            &temps,
            &q1,
            &published,
        ));
        self.place(&published);
        self.line(format!("bra {done};"));
        self.place(&drop);
        self.line(format!("mov.b64 {r0}, -11;"));
        self.place(&done);
        Ok(())
    }

    /// The group of lanes that writes a ring record together: its lanes in the 32-bit temporary
    /// 1, its size in 2 (and in the 64-bit temporary 0) in its leader, this lane's rank in it in
    /// 3; predicate 0 says the lane leads it (rank 0).
    fn ring_group(&mut self) {
        let t0 = self.tmp64(0);
        let [w1, w2, w3] = [1, 2, 3].map(|i| self.tmp32(i));
        let q0 = self.pred(0);
        if self.options.sm >= 70 {
            // Every lane of a warp writes the same shard: the ring's only one, or its SM's (a
            // warp never spans SMs), so the group is the active lanes.
            self.line(format!("activemask.b32 {w1};"));
            self.line(format!("popc.b32 {w2}, {w1};"));
            self.line(format!("mov.u32 {w3}, %lanemask_lt;"));
            self.line(format!("and.b32 {w3}, {w3}, {w1};"));
            self.line(format!("popc.b32 {w3}, {w3};"));
            // The leader's size plus its rank (0), which `ptxas` cannot take for the same in
            // every lane: the leader's atomics of it are not aggregated across groups (see
            // `warp_add`).
            self.line(format!("add.u32 {w2}, {w2}, {w3};"));
        } else {
            self.line(format!("mov.b32 {w2}, 1;"));
            self.line(format!("mov.b32 {w3}, 0;"));
        }
        self.line(format!("setp.eq.u32 {q0}, {w3}, 0;"));
        self.line(format!("cvt.u64.u32 {t0}, {w2};"));
    }

    /// A drained ring's group published, once every lane has written its record (the warp's
    /// barrier orders the lanes' stores before the leader's release): the leader stores the
    /// sequence word of the group's first slot (its ticket in the 64-bit temporary 0, the slot
    /// in 2), committed in its lap, with the group's size as the owner.
    fn ring_publish(&mut self, g: &Geometry, published: &str) {
        let [t0, t1, t2, t3, t6] = [0, 1, 2, 3, 6].map(|i| self.tmp64(i));
        let [w1, w2] = [1, 2].map(|i| self.tmp32(i));
        let q0 = self.pred(0);
        let warp = self.options.sm >= 70;
        if warp {
            self.line(format!("bar.warp.sync {w1};"));
        }
        self.line(format!("@!{q0} bra {published};"));
        self.line(by_capacity(Quotient::Div, &t1, &t0, g.capacity));
        self.line(format!("shl.b64 {t1}, {t1}, 32;"));
        self.line(format!("or.b64 {t1}, {t1}, {};", ring_state::COMMITTED << ring_state::SHIFT));
        self.line(format!("cvt.u64.u32 {t3}, {w2};"));
        self.line(format!("or.b64 {t1}, {t1}, {t3};"));
        let seq = g.seq_offset(0, 0) - g.shard_offset(0);
        self.line(format!("mad.lo.u64 {t3}, {t2}, 8, {t6};"));
        if warp {
            self.line(format!("st.release.gpu.global.u64 [{t3}+{seq}], {t1};"));
        } else {
            self.line("membar.gl;");
            self.line(format!("st.volatile.global.u64 [{t3}+{seq}], {t1};"));
        }
        self.place(published);
    }

    /// The leader's claim of room in a drained ring whose shard header is at the 64-bit
    /// temporary 6, for the group (its size in the 64-bit temporary 0) or, with `batch`, for
    /// that many tickets: `tail` read first (an older `tail` only refuses more), then the claim;
    /// over the limit, the claim is taken back, the group's records counted as dropped, the
    /// temporary 0 set to all ones and predicate 2 set; within it, the tickets are taken, the
    /// first into `into`.
    fn ring_claim(&mut self, capacity: u32, batch: Option<u32>, into: &str) {
        let [t0, t1, t2, t4, t6] = [0, 1, 2, 4, 6].map(|i| self.tmp64(i));
        let [q0, q1, q2] = [0, 1, 2].map(|i| self.pred(i));
        let (tail, claimed) = (shard::TAIL, shard::CLAIMED);
        let amount = batch.map_or_else(|| t0.clone(), |n| n.to_string());
        let fresh = if self.options.sm >= 70 { "ld.relaxed.gpu" } else { "ld.volatile" };
        self.line(format!("@{q0} {fresh}.global.u64 {t1}, [{t6}+{tail}];"));
        self.line(format!("@{q0} atom.global.add.u64 {t2}, [{t6}+{claimed}], {amount};"));
        self.line(format!("add.s64 {t1}, {t1}, {capacity};"));
        self.line(format!("add.s64 {t2}, {t2}, {amount};"));
        self.line(format!("setp.gt.u64 {q1}, {t2}, {t1};"));
        self.line(format!("and.pred {q2}, {q0}, {q1};"));
        self.line(format!("not.pred {q1}, {q1};"));
        self.line(format!("and.pred {q1}, {q1}, {q0};"));
        let back = match batch {
            Some(n) => format!("-{n}"),
            None => {
                self.line(format!("neg.s64 {t4}, {t0};"));
                t4
            }
        };
        self.line(format!("@{q2} red.global.add.u64 [{t6}+{claimed}], {back};"));
        self.line(format!("@{q2} red.global.add.u64 [{t6}+{}], {t0};", shard::REFUSED));
        self.line(format!("@{q2} mov.b64 {t0}, -1;"));
        let head = shard::LEN_OR_HEAD;
        self.line(format!("@{q1} atom.global.add.u64 {into}, [{t6}+{head}], {amount};"));
    }

    /// The group's first ticket from its leader's batch (`[next, end, shard]`, the kernel's
    /// registers), into the 64-bit temporary 0 (the group's size there before): when fewer
    /// tickets than the group's lanes are left, the leader closes its batch ([`close_ring_batch`])
    /// and claims a new one of [`RING_BATCH`] tickets ([`Emitter::ring_claim`]); refused, the
    /// group's first ticket is all ones and the leader drops the next [`RING_BATCH`] records'
    /// groups without claiming (`end` all ones). Every lane goes on at `got`.
    fn ring_take(&mut self, g: &Geometry, [next, end, shard]: &[String; 3], got: &str) {
        let [t0, t1, t6] = [0, 1, 6].map(|i| self.tmp64(i));
        let [q0, q1, q2] = [0, 1, 2].map(|i| self.pred(i));
        let (take, claim) = (format!("{got}_take"), format!("{got}_claim"));
        self.line(format!("@!{q0} bra {got};"));
        // Dropping (`end` all ones, after a refused claim): the group's records are dropped and
        // counted, with no atomic waited for, until RING_BATCH of them; then a claim again. A
        // full ring (its reader behind: a kernel recording faster than it is drained) costs a
        // record one `red`, not two atomics' round trips (which, at every record of a sampled
        // warp, made a grid-stride saxpy 2.8× as long on the H200).
        let refused = shard::REFUSED;
        self.line(format!("setp.ne.s64 {q1}, {end}, -1;"));
        self.line(format!("@{q1} bra {claim};"));
        self.line(format!("red.global.add.u64 [{shard}+{refused}], {t0};"));
        self.line(format!("add.s64 {next}, {next}, {t0};"));
        self.line(format!("setp.ge.u64 {q1}, {next}, {RING_BATCH};"));
        self.line(format!("@{q1} mov.b64 {end}, 0;"));
        self.line(format!("@{q1} mov.b64 {next}, 0;"));
        self.line(format!("mov.b64 {t0}, -1;"));
        self.line(format!("bra {got};"));
        self.place(&claim);
        self.line(format!("sub.s64 {t1}, {end}, {next};"));
        self.line(format!("setp.ge.u64 {q1}, {t1}, {t0};"));
        self.line(format!("@{q1} bra {take};"));
        let temps = [1, 2, 3, 4].map(|i| self.tmp64(i));
        self.out.push_str(&close_ring_batch(g, [next, end, shard], &temps, &q1, got));
        self.ring_claim(g.capacity, Some(RING_BATCH), next);
        // Refused (counted by the claim): the group's first ticket all ones, and the leader
        // dropping from here.
        self.line(format!("@{q2} mov.b64 {end}, -1;"));
        self.line(format!("@{q2} mov.b64 {shard}, {t6};"));
        self.line(format!("@{q2} bra {got};"));
        self.line(format!("add.s64 {end}, {next}, {RING_BATCH};"));
        self.line(format!("mov.b64 {shard}, {t6};"));
        self.place(&take);
        self.line(format!("mov.b64 {t1}, {t0};"));
        self.line(format!("mov.b64 {t0}, {next};"));
        self.line(format!("add.s64 {next}, {next}, {t1};"));
        self.place(got);
    }

    /// After the group's records: the lanes' stores ordered before the leader's (the warp's
    /// barrier), and the leader's batch published when it is full (its records committed);
    /// it then has none.
    fn ring_batch_full(&mut self, g: &Geometry, [next, end, shard]: &[String; 3], done: &str) {
        let w1 = self.tmp32(1);
        let [q0, q1] = [0, 1].map(|i| self.pred(i));
        if self.options.sm >= 70 {
            self.line(format!("bar.warp.sync {w1};"));
        }
        self.line(format!("@!{q0} bra {done};"));
        self.line(format!("setp.ne.u64 {q1}, {next}, {end};"));
        self.line(format!("@{q1} bra {done};"));
        let temps = [1, 2, 3, 4].map(|i| self.tmp64(i));
        self.out.push_str(&close_ring_batch(g, [next, end, shard], &temps, &q1, done));
        self.place(done);
    }

    /// The leader's first ticket (the 64-bit temporary 0) to every lane of the group, plus the
    /// lane's rank; with `refused`, a drained ring's refused group (all ones) goes there.
    fn ring_ticket(&mut self, refused: Option<&str>) {
        let [t0, t1] = [0, 1].map(|i| self.tmp64(i));
        let [w1, w3, w4, w5, w6] = [1, 3, 4, 5, 6].map(|i| self.tmp32(i));
        let q2 = self.pred(2);
        if self.options.sm >= 70 {
            // The leader's lane is the lowest active one.
            self.line(format!("neg.s32 {w4}, {w1};"));
            self.line(format!("and.b32 {w4}, {w4}, {w1};"));
            self.line(format!("sub.u32 {w4}, {w4}, 1;"));
            self.line(format!("popc.b32 {w4}, {w4};"));
            self.line(format!("mov.b64 {{{w5}, {w6}}}, {t0};"));
            self.line(format!("shfl.sync.idx.b32 {w5}, {w5}, {w4}, 31, {w1};"));
            self.line(format!("shfl.sync.idx.b32 {w6}, {w6}, {w4}, 31, {w1};"));
            self.line(format!("mov.b64 {t0}, {{{w5}, {w6}}};"));
        }
        if let Some(drop) = refused {
            self.line(format!("setp.eq.s64 {q2}, {t0}, -1;"));
            self.line(format!("@{q2} bra {drop};"));
        }
        self.line(format!("cvt.u64.u32 {t1}, {w3};"));
        self.line(format!("add.s64 {t0}, {t0}, {t1};"));
    }
}

/// Which half of a ticket's division by a ring's capacity [`by_capacity`] computes.
enum Quotient {
    /// The lap.
    Div,
    /// The slot.
    Rem,
}

/// `dst` = `ticket` divided by `capacity`, or its remainder: a shift or a mask when the capacity
/// is a power of two. (`ptxas` calls a 64-bit division routine even for a constant power of
/// two: a call whose arguments and return sit in fixed registers, which raised an instrumented
/// grid-stride saxpy from 53 registers to 60.)
fn by_capacity(what: Quotient, dst: &str, ticket: &str, capacity: u32) -> String {
    match (what, capacity.is_power_of_two()) {
        (Quotient::Div, true) => format!("shr.b64 {dst}, {ticket}, {};", capacity.trailing_zeros()),
        (Quotient::Rem, true) => format!("and.b64 {dst}, {ticket}, {};", capacity - 1),
        (Quotient::Div, false) => format!("div.u64 {dst}, {ticket}, {capacity};"),
        (Quotient::Rem, false) => format!("rem.u64 {dst}, {ticket}, {capacity};"),
    }
}

/// Tickets a lane takes at a time from a ring drained while kernels run, where the kernel has
/// registers for its batch ([`Options::ring_batches`](super::Options::ring_batches)): a warp's
/// worth, so a group of a whole warp fits.
pub const RING_BATCH: u32 = 32;

/// The code that closes a lane's batch of tickets of a drained ring of geometry `g` (the
/// registers `[next, end, shard]`, [`Options::ring_batches`](super::Options::ring_batches)),
/// when it has one (`end` not 0): the records written, from the batch's first ticket (`end`
/// less [`RING_BATCH`]) to `next`, committed by the sequence word of the first one's slot
/// with release ordering (the group's size in its owner field, as a drained ring's groups
/// are), and the tickets left, from `next` to `end`, discarded by the sequence word of
/// `next`'s slot; then the lane has no batch. `temps` are four 64-bit registers and `pred` a
/// predicate it may use; `label`, unique in the module, starts its labels. The kernel runs it
/// when a thread exits, and the ring's output before claiming a new batch.
pub fn close_ring_batch(
    g: &Geometry,
    [next, end, shard]: [&String; 3],
    temps: &[String; 4],
    pred: &str,
    label: &str,
) -> String {
    let [t1, t2, t3, t4] = temps;
    let cap = g.capacity;
    let seq = g.seq_offset(0, 0) - g.shard_offset(0);
    let (closed, discarded) = (format!("{label}_closed"), format!("{label}_full"));
    let word = |ticket: &str, state: u64, size: &str| {
        // (lap << 32) | state | size, at the ticket's slot's sequence word.
        format!(
            "\t{}\n\tshl.b64 {t3}, {t3}, 32;\n\
             \tor.b64 {t3}, {t3}, {state_bits};\n\tor.b64 {t3}, {t3}, {size};\n\
             \t{}\n\tmad.lo.u64 {t4}, {t4}, 8, {shard};\n",
            by_capacity(Quotient::Div, t3, ticket, cap),
            by_capacity(Quotient::Rem, t4, ticket, cap),
            state_bits = state << ring_state::SHIFT
        )
    };
    // `end` 0: no batch; all ones: dropping (`Emitter::ring_take`), nothing to publish.
    let mut code = format!(
        "\tsetp.eq.u64 {pred}, {end}, 0;\n\tsetp.eq.or.u64 {pred}, {end}, -1, {pred};\n\
         \t@{pred} bra {closed};\n\
         \tsub.s64 {t1}, {end}, {RING_BATCH};\n\tsub.s64 {t2}, {next}, {t1};\n"
    );
    code.push_str(&word(t1, ring_state::COMMITTED, t2));
    code.push_str(&format!("\tst.release.gpu.global.u64 [{t4}+{seq}], {t3};\n"));
    code.push_str(&format!(
        "\tsub.s64 {t2}, {end}, {next};\n\tsetp.eq.u64 {pred}, {t2}, 0;\n\
         \t@{pred} bra {discarded};\n"
    ));
    code.push_str(&word(next, ring_state::DISCARDED, t2));
    code.push_str(&format!("\tst.relaxed.gpu.global.u64 [{t4}+{seq}], {t3};\n"));
    code.push_str(&format!("{discarded}:\n\tmov.b64 {next}, 0;\n\tmov.b64 {end}, 0;\n{closed}:\n"));
    code
}
