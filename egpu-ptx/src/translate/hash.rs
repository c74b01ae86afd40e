//! The hash map helpers on the GPU: `bpf_map_lookup_elem`, `bpf_map_update_elem` and
//! `bpf_map_delete_elem` on hash maps and per-CPU hash maps (the protocol is in the docs of
//! `maps.rs`).
//!
//! A helper call is written in two parts. At the call, the key's (and value's) bytes become
//! 64-bit words in registers and, for a lookup with a lookup cache, the thread's last hit is
//! tried. The search that follows (the hash, the probe sequence, an insert's or a removal's
//! protocol) is written either inline or, when [`Options::outline`](super::Options::outline)
//! names a prefix, once per module as a `.func` of its own, shared by every call of the same
//! helper on the same map ([`Translation::shared`](super::Translation::shared)): the call site
//! keeps only the cache check and a `call`. A search is a few hundred instructions, most of
//! them on paths a kernel seldom takes (an insert, a full shard, a slot held by another
//! writer); written inline at each of a large kernel's access sites they make its code
//! megabytes long, slow to compile and too long for the instruction cache, which then
//! misses on the kernel's own hot loop.

use egpu_ebpf::helpers::id as helper_id;
use egpu_ebpf::verifier::Access;
use egpu_ebpf::{AluOp, AtomicOp, Instruction, JmpCond, Operand, Reg, Size, Width};
use egpu_maps::layout::{DEVICE_OWNER, HASH_MULTIPLIER, HASH_SEED, hash_state as hs, shard};

use super::atomic::warp_add;
use super::emit::Emitter;
use super::maps::MAX_WORDS;
use super::spread::lands_at;
use super::{CacheKey, Context, DeviceMap, Options, TranslateError};

/// How many times a device insert re-reads a slot that another writer holds before passing it.
const SPIN_LIMIT: u32 = 1 << 20;

/// One hash map helper's search, with the registers it works on.
struct Search<'s> {
    /// The helper (`helper_id::MAP_LOOKUP_ELEM`, …).
    id: u32,
    map: DeviceMap,
    /// The key's words, then (an update) the value's.
    key: &'s [String],
    value: &'s [String],
    /// Receives the helper's result.
    r0: &'s str,
    /// An update's flags.
    flags: &'s str,
    /// Whether the map has a lookup cache: its entries stay put while the kernel runs, so a
    /// lookup first reads the key's home slot from the SM's L1 cache.
    cached: bool,
}

impl Emitter<'_> {
    /// Lookup, update and delete on a hash map (see the module docs).
    pub(super) fn hash(
        &mut self,
        pc: usize,
        id: u32,
        m: Option<u32>,
        map: DeviceMap,
        args: [Option<Access>; 5],
    ) -> Result<(), TranslateError> {
        let g = map.geometry;
        if g.key_size.div_ceil(8) > MAX_WORDS || g.value_size.div_ceil(8) > MAX_WORDS {
            return Err(self.too_big(pc, m));
        }
        let hash = self.local_label('H', pc);
        let (r0, r4) = (self.reg(Reg::R0), self.reg(Reg::R4));
        let q0 = self.pred(0);
        let key = self.read_words(Reg::R2, args[1], g.key_size, 0);
        let value = if id == helper_id::MAP_UPDATE_ELEM {
            self.read_words(Reg::R3, args[2], g.value_size, key.len() as u32)
        } else {
            Vec::new()
        };
        // The cache's registers are the kernel's, which a local function cannot name.
        let cache = if id == helper_id::MAP_LOOKUP_ELEM && self.function == 0 {
            self.options.lookup_cache.get(m.unwrap_or(0) as usize).cloned().flatten()
        } else {
            None
        };
        let done = format!("{hash}_done");
        // The key the cache remembers, word by word: registers, or constants.
        let remembered: Option<Vec<String>> =
            cache.as_ref().and_then(|c| match (&c.key, key.as_slice()) {
                (CacheKey::Register(reg), [_]) => Some(vec![reg.clone()]),
                (CacheKey::Constant(k), [_]) => Some(vec![(*k as i64).to_string()]),
                (CacheKey::Second { first, second }, [_, _]) => {
                    Some(vec![(*first as i64).to_string(), second.clone()])
                }
                _ => None,
            });
        // The entry before the last, when the cache keeps one: the last's key words with the
        // last word its own.
        let previous: Option<(Vec<String>, &String)> =
            cache.as_ref().and_then(|c| c.previous.as_ref()).zip(remembered.as_ref()).map(
                |((pk, pv), ck)| {
                    let mut words = ck.clone();
                    *words.last_mut().expect("a key word") = pk.clone();
                    (words, pv)
                },
            );
        let counted = cache.as_ref().zip(previous.as_ref()).zip(remembered.as_ref());
        let counted = counted.and_then(|((c, p), ck)| Some((c.counts.as_ref()?, ck, p)));
        if let Some((k, ck, (pk, pv))) = counted
            && let Some((dst, add, past, add_pc)) = self.counted_add(pc, k.field)
        {
            // A count: either entry's key adds the number to its sum, and goes on past the add.
            let c = cache.as_ref().expect("a cache");
            let (q1, q2, w0) = (self.pred(1), self.pred(2), self.tmp32(0));
            for (q, ck, cp, sum) in [(&q0, ck, &c.value, &k.last), (&q1, pk, *pv, &k.previous)] {
                self.entry_test(q, &key, ck, cp);
                self.line(format!("@{q} add.s64 {sum}, {sum}, {add};"));
                self.line(format!("@{q} mov.b64 {r0}, {cp};"));
            }
            self.line(format!("or.pred {q0}, {q0}, {q1};"));
            // What the add's `mov` would have left (unless no path reads it, ptxas drops it).
            self.line(format!("@{q0} mov.b64 {}, {add};", self.reg(dst)));
            if let (Some(d), Context::Access { addr, .. }) =
                (&self.options.defer, &self.options.context)
                && self.deferrable(pc, add_pc)
            {
                // A miss is kept for later (`defer.rs`): no branch but the one past the add.
                let (slot, mask, bit) = (&d.slot, &d.mask, 1u64 << d.bit);
                self.line(format!("@!{q0} st.local.u64 [{slot}], {addr};"));
                self.line(format!("@!{q0} or.b64 {mask}, {mask}, {bit};"));
                self.line(format!("bra {past};"));
                self.deferred = true;
                self.away = self.deferred_away(pc, add_pc);
                self.place(&done);
                return Ok(());
            }
            // The warp's lanes all found theirs (most accesses): a branch ptxas knows is uniform.
            self.line(format!("activemask.b32 {w0};"));
            self.line(format!("vote.sync.all.pred {q2}, {q0}, {w0};"));
            self.line(format!("@{q2} bra.uni {past};"));
            self.line(format!("@{q0} bra {past};"));
        } else if let (Some(c), Some(ck)) = (&cache, &remembered) {
            // This thread's last hit in this map (and the one before), when it was this key:
            // before the hash, which a hit does not need.
            let hit = self.past_null_check(pc).unwrap_or_else(|| done.clone());
            let entries =
                std::iter::once((ck, &c.value)).chain(previous.iter().map(|(k, v)| (k, *v)));
            for (ck, cp) in entries {
                self.entry_test(&q0, &key, ck, cp);
                self.line(format!("mov.b64 {r0}, {cp};"));
                self.line(format!("@{q0} bra {hit};"));
            }
        }
        let search = Search {
            id,
            map,
            key: &key,
            value: &value,
            r0: &r0,
            flags: &r4,
            cached: cache.is_some(),
        };
        match self.options.outline.clone() {
            Some(shared) => self.call_search(pc, m, &search, &shared)?,
            None => self.search(pc, m, &search, &format!("{hash}_s"))?,
        }
        if let (Some(c), Some(ck)) = (&cache, &remembered) {
            // A hit is remembered (only of a key whose constant words are the constants').
            self.line(format!("setp.ne.u64 {q0}, {r0}, 0;"));
            let constants = match c.key {
                CacheKey::Constant(_) | CacheKey::Second { .. } => 1,
                _ => 0,
            };
            for (k, r) in key.iter().zip(ck).take(constants) {
                self.line(format!("setp.eq.and.u64 {q0}, {k}, {r}, {q0};"));
            }
            // The sum of the hit before the last goes to memory; the last's becomes it.
            if let (Some(k), Some((_, pv))) = (&c.counts, &c.previous) {
                self.flush_count(pc, map, (pv, k.field), (&k.previous, &k.last));
            }
            // The last hit becomes the one before.
            if let Some((pk, pv)) = &c.previous {
                let last = ck.last().expect("a key word");
                self.line(format!("@{q0} mov.b64 {pk}, {last};"));
                self.line(format!("@{q0} mov.b64 {pv}, {};", c.value));
            }
            for (k, r) in key.iter().zip(ck).skip(constants) {
                self.line(format!("@{q0} mov.b64 {r}, {k};"));
            }
            self.line(format!("@{q0} mov.b64 {}, {r0};", c.value));
        }
        self.place(&done);
        Ok(())
    }

    /// Sets `q` when the lookup cache's entry of key words `remembered` and value `value` holds
    /// `key` (a value remembered: not null).
    fn entry_test(&mut self, q: &str, key: &[String], remembered: &[String], value: &str) {
        self.line(format!("setp.eq.u64 {q}, {}, {};", key[0], remembered[0]));
        for (k, r) in key.iter().zip(remembered).skip(1) {
            self.line(format!("setp.eq.and.u64 {q}, {k}, {r}, {q};"));
        }
        self.line(format!("setp.ne.and.u64 {q}, {value}, 0, {q};"));
    }

    /// When the lookup at `pc` is followed by a null test of its result (`jeq r0, 0`), a `mov`
    /// of a number and a 64-bit add of it to field `field` of the value found (no jump landing
    /// on either): the `mov`'s register and number, the label after the add, placed here, and
    /// the add's pc.
    fn counted_add(&mut self, pc: usize, field: u32) -> Option<(Reg, i64, String, usize)> {
        let decoded = self.program.decoded();
        let i = decoded.iter().position(|d| d.pc == pc)?;
        let [test, mov, add] = [1, 2, 3].map(|k| decoded.get(i + k).map(|d| d.insn));
        let Some(Instruction::Branch {
            cond: JmpCond::Eq,
            width: Width::W64,
            dst: Reg::R0,
            src: Operand::Imm(0),
            ..
        }) = test
        else {
            return None;
        };
        let Some(Instruction::Alu { op: AluOp::Mov, width: Width::W64, dst, src: Operand::Imm(n) }) =
            mov
        else {
            return None;
        };
        let Some(Instruction::Atomic {
            op: AtomicOp::Add,
            fetch: false,
            size: Size::DW,
            base: Reg::R0,
            off,
            src,
        }) = add
        else {
            return None;
        };
        let (mov_pc, add_pc) = (decoded[i + 2].pc, decoded[i + 3].pc);
        let lands = lands_at(self.program, mov_pc) || lands_at(self.program, add_pc);
        if src != dst || i64::from(off) != i64::from(field) || lands {
            return None;
        }
        let label = self.local_label('C', pc);
        let past = self.after.entry(add_pc).or_insert(label).clone();
        Some((dst, i64::from(n), past, add_pc))
    }

    /// On a search's hit that a cache with [`Counts`](super::Counts) remembers: `sum` (that of
    /// the entry before the last) added to field `field` of the value at `value`, in the copy of
    /// the thread's SM where the map is spread, aggregated across the warp, when both are
    /// nonzero; then `last`'s sum becomes it and `last` starts again. Under the predicate `q0`
    /// (a hit remembered).
    fn flush_count(
        &mut self,
        pc: usize,
        map: DeviceMap,
        (value, field): (&str, u32),
        (sum, last): (&str, &str),
    ) {
        let (q0, q2, t2, t3) = (self.pred(0), self.pred(2), self.tmp64(2), self.tmp64(3));
        let skip = self.local_label('K', pc);
        self.line(format!("@!{q0} bra {skip};"));
        self.line(format!("setp.eq.u64 {q2}, {value}, 0;"));
        self.line(format!("setp.eq.or.u64 {q2}, {sum}, 0, {q2};"));
        self.line(format!("@{q2} bra {skip}_moved;"));
        let at = match map.spread {
            0 => {
                self.line(format!("add.s64 {t3}, {value}, {field};"));
                t3.clone()
            }
            _ => self.spread_address(map, value, field as i16),
        };
        let [w0, w1, w2, w3] = [0, 1, 2, 3].map(|i| self.tmp32(i));
        let w = [&*w0, &w1, &w2, &w3];
        let code = warp_add(false, &at, sum, None, ".global", w, &q2, &t2, &format!("{skip}_f"));
        self.out.push_str(&code);
        self.place(&format!("{skip}_moved"));
        self.line(format!("mov.b64 {sum}, {last};"));
        self.line(format!("mov.b64 {last}, 0;"));
        self.place(&skip);
    }

    /// Where a lookup at `pc` that found its value (not null) goes on when the next instruction
    /// tests the result for null, as a lookup's caller does: past the test (`jeq r0, 0`), or
    /// to its target (`jne r0, 0`). `None` for another instruction.
    fn past_null_check(&mut self, pc: usize) -> Option<String> {
        let f = self.program.functions().get(self.function)?;
        let next = self.program.decoded().iter().find(|d| d.pc == pc + 1 && d.pc < f.end)?;
        let Instruction::Branch {
            cond, width: Width::W64, dst: Reg::R0, src: Operand::Imm(0), ..
        } = next.insn
        else {
            return None;
        };
        match cond {
            JmpCond::Eq => {
                let label = format!("{}_nonnull", self.local_label('H', pc));
                self.after.insert(next.pc, label.clone());
                Some(label)
            }
            JmpCond::Ne => Some(self.label(next.insn.jump_target(next.pc)? as usize)),
            _ => None,
        }
    }

    /// The search as a call of the module's shared `.func` for it, written the first time.
    fn call_search(
        &mut self,
        pc: usize,
        m: Option<u32>,
        s: &Search<'_>,
        shared: &str,
    ) -> Result<(), TranslateError> {
        // Everything the function's text depends on is in its name.
        let what = format!("{:?}/{}/{}", s.map, s.id, s.cached);
        let name = format!("{shared}_h{:016x}", egpu_ebpf::kernel_id(&what));
        let update = s.id == helper_id::MAP_UPDATE_ELEM;
        let mut args: Vec<String> = s.key.iter().chain(s.value).cloned().collect();
        if update {
            args.push(s.flags.to_owned());
        }
        if !self.shared.contains_key(&name) {
            let mut options = Options::new(name.clone(), Context::Memory(String::new()));
            options.maps = self.options.maps.clone();
            options.sm = self.options.sm;
            // Not the kernel's main function: `%smid` is read where needed.
            let mut f = Emitter::new(self.verified, &options, usize::MAX);
            let params: Vec<String> = (0..args.len()).map(|i| format!("%{name}_x{i}")).collect();
            let (key, rest) = params.split_at(s.key.len());
            let (value, flags) = rest.split_at(s.value.len());
            let flags = flags.first().cloned().unwrap_or_default();
            let (ret, r0) = (format!("%{name}_ret"), f.reg(Reg::R0));
            let declared: Vec<String> = params.iter().map(|p| format!(".reg .b64 {p}")).collect();
            f.out.push_str(&format!(
                ".func (.reg .b64 {ret}) {name}({})\n{{\n",
                declared.join(", ")
            ));
            f.declare_registers();
            let search = Search { key, value, r0: &r0, flags: &flags, ..*s };
            let label = f.local_label('H', 0);
            f.search(pc, m, &search, &label)?;
            f.line(format!("mov.b64 {ret}, {r0};"));
            f.line("ret;");
            f.out.push_str("}\n");
            self.shared.insert(name.clone(), f.out);
        }
        self.line(format!("call ({}), {name}, ({});", s.r0, args.join(", ")));
        Ok(())
    }

    /// The search for the key, then what the helper does with what it found, ending at
    /// `{label}_done` with the result in `s.r0`.
    fn search(
        &mut self,
        pc: usize,
        m: Option<u32>,
        s: &Search<'_>,
        label: &str,
    ) -> Result<(), TranslateError> {
        let (id, g, key, r0) = (s.id, s.map.geometry, s.key, s.r0);
        // A map read live by the host (mapped memory) orders its entries at system scope.
        let scope = if s.map.live { "sys" } else { "gpu" };
        let [t0, t1, t2, t3, t4, t5, t6, t7] = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| self.tmp64(i));
        let [w4, w5, w6, w7] = [4, 5, 6, 7].map(|i| self.tmp32(i));
        let [q0, q1] = [self.pred(0), self.pred(1)];
        let lookup = id == helper_id::MAP_LOOKUP_ELEM;
        // The hash, as egpu_maps::layout::hash_key computes it: a folded multiply per word.
        let seed = HASH_SEED ^ u64::from(g.key_size);
        self.line(format!("mov.b64 {t0}, {};", seed as i64));
        for k in key {
            self.line(format!("xor.b64 {t0}, {t0}, {k};"));
            self.line(format!("mul.hi.u64 {t1}, {t0}, {};", HASH_MULTIPLIER as i64));
            self.line(format!("mul.lo.u64 {t0}, {t0}, {};", HASH_MULTIPLIER as i64));
            self.line(format!("xor.b64 {t0}, {t0}, {t1};"));
        }
        self.line(format!("shr.u64 {t1}, {t0}, 32;"));
        self.line(format!("xor.b64 {t0}, {t0}, {t1};"));
        let mask = g.slots - 1;
        self.line(format!("cvt.u32.u64 {w4}, {t0};"));
        self.line(format!("and.b32 {w4}, {w4}, {mask};"));
        self.line(format!("shr.u64 {t1}, {t0}, 32;")); // the tag
        self.line(format!("mov.u32 {w5}, 0;")); // slots looked at
        self.line(format!("mov.u32 {w7}, 0;")); // re-reads of a held slot
        self.shard_base(pc, m.unwrap_or(0), s.map, &t7, Some(&t6))?;
        let l = |what: &str| format!("{label}_{what}");
        let (lp, next, done) = (l("loop"), l("next"), l("done"));
        if id == helper_id::MAP_UPDATE_ELEM {
            // Flags other than 0, 1 and 2 (all 64 bits) are refused first, as on the CPU.
            let flags = s.flags;
            self.line(format!("cvt.u32.u64 {w6}, {flags};"));
            self.line(format!("mov.b64 {r0}, -22;"));
            self.line(format!("setp.gt.u64 {q0}, {flags}, 2;"));
            self.line(format!("@{q0} bra {done};"));
        }
        let state = |e: &mut Self, s: u64, target: &str| {
            e.line(format!("setp.eq.u64 {q0}, {t2}, {s};"));
            e.line(format!("@{q0} bra {target};"));
        };
        let result = |e: &mut Self, v: i64| {
            e.line(format!("mov.b64 {r0}, {v};"));
            e.line(format!("bra {done};"));
        };
        self.line(format!("mov.b64 {r0}, 0;"));
        // A live entry under this key's tag, as a whole word (FULL with no owner): the common
        // case of a lookup, tested first.
        let full_word = hs::FULL << hs::SHIFT;
        if lookup {
            self.line(format!("or.b64 {t0}, {t1}, {};", full_word as i64));
        }
        if s.cached {
            // Where entries stay put (what lets a thread remember its last hit), the key's home
            // slot is read first without ordering, from the SM's L1 cache: a live entry there
            // under the key's tag, with the key, is the key's for the kernel's whole run (an
            // older copy of the line can only lack the entry, and then the search below runs).
            // Most lookups of a kernel's threads are of a few keys, each in its home slot.
            self.line(format!("mul.wide.u32 {t4}, {w4}, {};", g.slot_stride));
            self.line(format!("add.s64 {t4}, {t4}, {t7};"));
            self.line(format!("ld.global.u64 {t5}, [{t4}];"));
            self.line(format!("setp.ne.u64 {q0}, {t5}, {t0};"));
            self.line(format!("@{q0} bra {lp};"));
            self.compare_key(&t4, key, g.key_size, &lp);
            self.line(format!("add.s64 {r0}, {t4}, {};", g.value_offset));
            self.line(format!("bra {done};"));
        }
        self.place(&lp);
        self.line(format!("mul.wide.u32 {t4}, {w4}, {};", g.slot_stride));
        self.line(format!("add.s64 {t4}, {t4}, {t7};"));
        self.line(format!("ld.global.acquire.{scope}.u64 {t5}, [{t4}];"));
        if lookup {
            self.line(format!("setp.eq.u64 {q0}, {t5}, {t0};"));
            self.line(format!("@{q0} bra {};", l("key")));
        }
        self.line(format!("shr.u64 {t2}, {t5}, {};", hs::SHIFT));
        // The key compared only when the slot is live or held under the key's tag.
        self.line(format!("and.b64 {t3}, {t5}, 4294967295;"));
        self.line(format!("setp.ne.u64 {q1}, {t3}, {t1};"));
        match id {
            helper_id::MAP_LOOKUP_ELEM => state(self, hs::EMPTY, &done),
            helper_id::MAP_UPDATE_ELEM => state(self, hs::EMPTY, &l("empty")),
            _ => state(self, hs::EMPTY, &l("absent")),
        }
        self.line(format!("@{q1} bra {next};"));
        if !lookup {
            // Held by another writer under this tag: read it again, a bounded number of times.
            for st in [hs::BUSY, hs::KEYED, hs::COUNTED, hs::WRITING] {
                state(self, st, &l("held"));
            }
        }
        self.line(format!("setp.ne.u64 {q0}, {t2}, {};", hs::FULL));
        if lookup {
            self.line(format!("setp.ne.and.u64 {q0}, {t2}, {}, {q0};", hs::WRITING));
        }
        self.line(format!("@{q0} bra {next};"));
        if lookup {
            self.place(&l("key"));
        }
        self.compare_key(&t4, key, g.key_size, &next);
        // Found: the entry is at slot t4, its state word is t5.
        match id {
            helper_id::MAP_LOOKUP_ELEM => {
                self.line(format!("add.s64 {r0}, {t4}, {};", g.value_offset));
                self.line(format!("bra {done};"));
            }
            helper_id::MAP_UPDATE_ELEM => {
                self.line(format!("setp.eq.u32 {q0}, {w6}, 1;"));
                self.line(format!("@{q0} mov.b64 {r0}, -17;"));
                self.line(format!("@{q0} bra {done};"));
                if let [v] = s.value {
                    // One word: a store replaces it whole, so no reader sees half of it and no
                    // writer need hold the slot (writers of one key would queue on its state
                    // word: a block's end written by every block of a launch, say).
                    let at = g.value_offset;
                    self.line(format!("st.global.relaxed.{scope}.u64 [{t4}+{at}], {v};"));
                } else {
                    let writing =
                        hs::WRITING << hs::SHIFT | u64::from(DEVICE_OWNER) << hs::OWNER_SHIFT;
                    self.swap_state(writing, scope, &lp);
                    for (w, v) in s.value.iter().enumerate() {
                        self.line(format!(
                            "st.global.u64 [{t4}+{}], {v};",
                            g.value_offset as usize + w * 8
                        ));
                    }
                    self.line(format!("st.global.release.{scope}.u64 [{t4}], {t5};"));
                }
                result(self, 0);
            }
            _ => {
                let tomb = hs::TOMB << hs::SHIFT;
                self.swap_state(tomb, scope, &lp);
                self.line(format!("red.global.add.u64 [{t6}+{}], -1;", shard::LEN_OR_HEAD));
                result(self, 0);
            }
        }
        if !lookup {
            self.place(&l("held"));
            self.line(format!("add.u32 {w7}, {w7}, 1;"));
            self.line(format!("setp.lt.u32 {q0}, {w7}, {SPIN_LIMIT};"));
            self.line(format!("@{q0} bra {lp};"));
        }
        self.place(&next);
        self.line(format!("add.u32 {w4}, {w4}, 1;"));
        self.line(format!("and.b32 {w4}, {w4}, {mask};"));
        self.line(format!("add.u32 {w5}, {w5}, 1;"));
        self.line(format!("setp.lt.u32 {q0}, {w5}, {};", g.slots));
        self.line(format!("@{q0} bra {lp};"));
        match id {
            helper_id::MAP_LOOKUP_ELEM => {}
            helper_id::MAP_UPDATE_ELEM => self.insert(s, label, scope),
            _ => {
                self.place(&l("absent"));
                result(self, -2);
            }
        }
        self.place(&done);
        Ok(())
    }

    /// An update's ends: no empty slot on the whole probe sequence (the map is full), and an
    /// empty slot claimed for a new entry.
    fn insert(&mut self, s: &Search<'_>, label: &str, scope: &str) {
        let (g, r0) = (s.map.geometry, s.r0);
        let [t1, t2, t3, t4, t6] = [1, 2, 3, 4, 6].map(|i| self.tmp64(i));
        let (w6, q0) = (self.tmp32(6), self.pred(0));
        let l = |what: &str| format!("{label}_{what}");
        let (lp, done) = (l("loop"), l("done"));
        let result = |e: &mut Self, v: i64| {
            e.line(format!("mov.b64 {r0}, {v};"));
            e.line(format!("bra {done};"));
        };
        self.line(format!("setp.eq.u32 {q0}, {w6}, 2;"));
        self.line(format!("@{q0} mov.b64 {r0}, -2;"));
        self.line(format!("@{q0} bra {done};"));
        self.line(format!("red.global.add.u64 [{t6}+{}], 1;", shard::REFUSED));
        result(self, -7);
        self.place(&l("empty"));
        self.line(format!("setp.eq.u32 {q0}, {w6}, 2;"));
        self.line(format!("@{q0} mov.b64 {r0}, -2;"));
        self.line(format!("@{q0} bra {done};"));
        self.line(format!("setp.gt.u32 {q0}, {w6}, 2;"));
        self.line(format!("@{q0} mov.b64 {r0}, -22;"));
        self.line(format!("@{q0} bra {done};"));
        let busy = hs::BUSY << hs::SHIFT | u64::from(DEVICE_OWNER) << hs::OWNER_SHIFT;
        self.swap_state(busy, scope, &lp);
        for (w, k) in s.key.iter().enumerate() {
            self.line(format!("st.global.u64 [{t4}+{}], {k};", 8 + w * 8));
        }
        for (w, v) in s.value.iter().enumerate() {
            self.line(format!("st.global.u64 [{t4}+{}], {v};", g.value_offset as usize + w * 8));
        }
        self.line(format!("atom.global.add.u64 {t2}, [{t6}+{}], 1;", shard::LEN_OR_HEAD));
        self.line(format!("setp.ge.u64 {q0}, {t2}, {};", g.capacity));
        let refused = l("refused");
        self.line(format!("@{q0} bra {refused};"));
        let full = hs::FULL << hs::SHIFT;
        self.line(format!("or.b64 {t3}, {t1}, {};", full as i64));
        self.line(format!("st.global.release.{scope}.u64 [{t4}], {t3};"));
        result(self, 0);
        self.place(&refused);
        self.line(format!("red.global.add.u64 [{t6}+{}], -1;", shard::LEN_OR_HEAD));
        let tomb = hs::TOMB << hs::SHIFT;
        self.line(format!("or.b64 {t3}, {t1}, {};", tomb as i64));
        self.line(format!("st.global.release.{scope}.u64 [{t4}], {t3};"));
        self.line(format!("red.global.add.u64 [{t6}+{}], 1;", shard::REFUSED));
        result(self, -7);
    }

    /// Swaps the state word of slot `t4`, read as `t5`, for `state` with the key's tag (`t1`) by
    /// compare-and-swap; when another writer changed it first, the search goes on at `retry`.
    fn swap_state(&mut self, state: u64, scope: &str, retry: &str) {
        let [t1, t2, t3, t4, t5] = [1, 2, 3, 4, 5].map(|i| self.tmp64(i));
        let q0 = self.pred(0);
        self.line(format!("or.b64 {t3}, {t1}, {};", state as i64));
        self.line(format!("atom.global.acq_rel.{scope}.cas.b64 {t2}, [{t4}], {t5}, {t3};"));
        self.line(format!("setp.ne.u64 {q0}, {t2}, {t5};"));
        self.line(format!("@{q0} bra {retry};"));
    }

    /// Branches to `differ` unless the key at slot `slot` equals the words `key`.
    fn compare_key(&mut self, slot: &str, key: &[String], bytes: u32, differ: &str) {
        let (t3, q0) = (self.tmp64(3), self.pred(0));
        let tail = bytes % 8;
        for (w, k) in key.iter().enumerate() {
            self.line(format!("ld.global.u64 {t3}, [{slot}+{}];", 8 + w * 8));
            if w == key.len() - 1 && tail != 0 {
                let mask = (1u64 << (tail * 8)) - 1;
                self.line(format!("and.b64 {t3}, {t3}, {};", mask as i64));
            }
            self.line(format!("setp.ne.u64 {q0}, {t3}, {k};"));
            self.line(format!("@{q0} bra {differ};"));
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
    use egpu_maps::layout::Geometry;

    use super::super::{CacheKey, Context, Counts, DeviceMap, LookupCache, Options, translate};

    /// `PAGES.fetch_add(&(kernel id, addr >> 21), N)` as Probe Rust makes it: look up; when
    /// missing, insert a zero and look up again; add.
    pub(in crate::translate) const PAGES: &str = "mov %r9, %r1\nldxdw %r0, [%r9+8]\nstxdw [%r10-16], %r0\n\
        ldxdw %r0, [%r9+0]\nrsh %r0, 21\nstxdw [%r10-8], %r0\nlddw %r1, map[0]\nmov %r2, %r10\n\
        add %r2, -16\ncall 1\njeq %r0, 0, missing\nmov %r1, N\nlock add [%r0], %r1\nja out\n\
        missing:\nstdw [%r10-24], 0\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -16\n\
        mov %r3, %r10\nadd %r3, -24\nmov %r4, 1\ncall 2\nlddw %r1, map[0]\nmov %r2, %r10\n\
        add %r2, -16\ncall 1\njeq %r0, 0, out\nmov %r1, N\nlock add [%r0], %r1\n\
        out:\nmov %r0, 0\nexit";

    /// The probe's body translated with a lookup cache that counts (`Counts`).
    fn translated(text: &str) -> String {
        translated_with(text, None).body
    }

    /// The probe translated with a lookup cache that counts (`Counts`), its misses deferred to
    /// `defer` where it allows.
    pub(in crate::translate) fn translated_with(
        text: &str,
        defer: Option<super::super::Defer>,
    ) -> super::super::Translation {
        let def = MapDef {
            name: "pages".into(),
            kind: MapKind::Hash,
            key_size: 16,
            value_size: 8,
            capacity: 64,
        };
        let attach = AttachPoint::Device(DeviceEvent::GlobalLoad);
        let program = Program::new(assemble(text).expect("assembles"), vec![def], attach);
        let verified = verify(&program.expect("a program")).expect("verified");
        let context = Context::load_store(7, "%addr".into(), 4, 0, false);
        let mut options = Options::new("t", context);
        options.maps = vec![DeviceMap {
            addr: 0x7f00_0000_0000,
            geometry: Geometry::new(MapKind::Hash, 16, 8, 64, 1, 0).expect("a geometry"),
            live: false,
            spread: 0,
            drained: false,
        }];
        options.lookup_cache = vec![Some(LookupCache {
            key: CacheKey::Second { first: 7, second: "%hk".into() },
            value: "%hp".into(),
            sums: Vec::new(),
            previous: Some(("%hq".into(), "%hv".into())),
            counts: Some(Counts { field: 0, last: "%hc".into(), previous: "%hd".into() }),
        })];
        options.defer = defer;
        translate(&verified, &options).expect("translates")
    }

    /// A count found in either entry is a register add and goes on past the add, the warp by a
    /// uniform branch when all its lanes hit; a search's hit sends the evicted entry's sum to
    /// memory first; an add the lookup does not lead straight to still adds to the sums.
    #[test]
    fn counts_by_page_are_register_adds() {
        let body = translated(&PAGES.replace('N', "3"));
        for hit in ["@%t_q0 add.s64 %hc, %hc, 3;", "@%t_q1 add.s64 %hd, %hd, 3;"] {
            assert!(body.contains(hit), "{hit}\n{body}");
        }
        // Both lookups (the first, and the one after an insert) take the shortcut.
        let shortcut = "vote.sync.all.pred %t_q2, %t_q0, %t_w0;\n\t@%t_q2 bra.uni";
        assert_eq!(body.matches(shortcut).count(), 2, "{body}");
        // The evicted entry's sum to its value, then the last's becomes it.
        let evicted = body.find("match.any.sync.b64").expect("a warp-aggregated flush");
        let moved = body.find("mov.b64 %hd, %hc;\n\tmov.b64 %hc, 0;").expect("the sums move");
        assert!(evicted < moved && body[moved..].contains("mov.b64 %hv, %hp;"), "{body}");
        // The adds after the search: to the sums when the value is an entry's.
        assert!(body.contains("setp.eq.u64 %t_q1, %t_r0, %hv;"), "{body}");
        // Something between the first lookup's `mov` and add, or a jump landing on the add: no
        // shortcut there, but still counted in registers.
        let between = PAGES.replacen("mov %r1, N\n", "mov %r1, N\nmov %r3, 1\n", 1);
        // (The insert's path ends by a jump to the first add: neither lookup takes it.)
        let landing = PAGES.replacen("mov %r1, N\nlock", "mov %r1, N\nfirst:\nlock", 1);
        let landing = landing.replace(
            "jeq %r0, 0, out\nmov %r1, N\nlock add [%r0], %r1\nout:",
            "jeq %r0, 0, out\nmov %r1, N\nja first\nout:",
        );
        assert!(landing.contains("ja first"), "{landing}");
        for (text, shortcuts) in [(between, 1), (landing, 0)] {
            let body = translated(&text.replace('N', "1"));
            assert_eq!(body.matches(shortcut).count(), shortcuts, "{text}\n{body}");
            assert!(body.contains("add.s64 %hc, %hc, %t_r1;"), "{text}\n{body}");
        }
    }
}
