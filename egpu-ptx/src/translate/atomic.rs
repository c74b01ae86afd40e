//! Atomic instructions. An atomic on the stack (which only its thread sees) is a plain
//! read-modify-write, of a slot register's bits when the frame lives in registers; one on a map
//! value is a PTX `atom`, or a `red` when the old value is not read; one whose region differs
//! between paths decides at run time. A 64-bit add to a map value whose old value is not read
//! is aggregated across the warp ([`warp_add`]), or combined per thread in the kernel's
//! registers when the value is an array's, or a hash map's found by a key the same at every
//! access of a site ([`combines`]).

use egpu_ebpf::MapKind;
use egpu_ebpf::verifier::{Access, AccessRegion, Verified};
use egpu_ebpf::{AluOp, AtomicOp, Instruction, Operand, Program, Reg, Size, Width};

use super::DeviceMap;
use super::emit::Emitter;
use super::memory::ptx_bits;
use super::spread::lands_at;

/// PTX that adds the `u64` in `val` to the `u64` at `addr`, aggregated
/// across the warp: the lanes that add to the same address (`match.any.sync`) make one atomic,
/// from their lowest lane, with their sum (`redux.sync`), when every value of the group is below
/// 2^26 (so the 32-bit sum is exact); otherwise each lane adds its own. `space` is the address's
/// state space (`.global`, or empty for a generic address: measured, the per-thread flush takes 6
/// more registers with `.global`, the hash map's adds are faster with it). `tmp32` are four
/// 32-bit registers, `pred` a predicate, `tmp64` a 64-bit register, all free; `label` is a unique
/// label stem.
/// When `known` holds the value every lane adds (a constant), the group's sum is its size times
/// that value, with no vote and no `redux.sync`. With `uniform`, the caller knows every active
/// lane has the same `addr`: the group is the active lanes, with no `match.any.sync`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn warp_add(
    uniform: bool,
    addr: &str,
    val: &str,
    known: Option<i64>,
    space: &str,
    tmp32: [&str; 4],
    pred: &str,
    tmp64: &str,
    label: &str,
) -> String {
    let [w0, w1, w2, w3] = tmp32;
    let group = if uniform {
        format!("\tactivemask.b32 {w0};\n\tmov.b32 {w1}, {w0};\n")
    } else {
        format!(
            "\tactivemask.b32 {w0};\n\
             \tmatch.any.sync.b64 {w1}, {addr}, {w0};\n"
        )
    };
    // The leader adds its group's sum plus its own lanes below it in the group (none): a
    // value `ptxas` cannot take for the same in every lane. Where the address is the same in
    // every lane, `ptxas` otherwise takes the sum (a `redux.sync`'s or a `popc`'s, of a
    // group it assumes is every active lane) for uniform and aggregates the leaders' adds
    // itself, the first active leader adding its own sum times their number; but leaders of
    // different groups may run together there (its convergence barriers join groups that
    // parted before), and then every other group's sum would be lost. (Found in the SASS of
    // `counts`' exit flush while looking for counts lost on the H200; those were lost
    // elsewhere, `inject/summaries.rs`'s `exit_lookup` says where.)
    let leader = format!(
        "\tmov.u32 {w0}, %lanemask_lt;\n\
         \tand.b32 {w3}, {w0}, {w1};\n\
         \tsetp.ne.u32 {pred}, {w3}, 0;\n\
         \t@{pred} bra {label}_done;\n"
    );
    let own = format!("\tadd.u32 {w2}, {w2}, {w3};\n");
    if let Some(c) = known {
        let times =
            if c == 1 { String::new() } else { format!("\tmul.lo.u64 {tmp64}, {tmp64}, {c};\n") };
        return format!(
            "{group}{leader}\
             \tpopc.b32 {w2}, {w1};\n\
             {own}\
             \tcvt.u64.u32 {tmp64}, {w2};\n\
             {times}\
             \tred{space}.add.u64 [{addr}], {tmp64};\n\
             {label}_done:\n"
        );
    }
    format!(
        "{group}\
         \tsetp.lt.u64 {pred}, {val}, 67108864;\n\
         \tvote.sync.all.pred {pred}, {pred}, {w1};\n\
         \t@!{pred} bra {label}_single;\n\
         \tcvt.u32.u64 {w2}, {val};\n\
         \tredux.sync.add.u32 {w2}, {w2}, {w1};\n\
         {leader}{own}\
         \tcvt.u64.u32 {tmp64}, {w2};\n\
         \tred{space}.add.u64 [{addr}], {tmp64};\n\
         \tbra {label}_done;\n\
         {label}_single:\n\
         \tred{space}.add.u64 [{addr}], {val};\n\
         {label}_done:\n"
    )
}

/// Whether the program makes 64-bit atomic adds to map values whose old value it does not read,
/// which a kernel can combine per thread ([`Options::combine`](super::Options::combine)):
/// successive adds to one address become one register add, and the sum reaches memory once, when
/// the address changes or the kernel exits. Device updates are then all visible when the kernel
/// completes, as the map contract requires, but not to the probe itself before that. `stable`
/// says which of the program's hash maps keep their values where they are while the kernel runs
/// (those with a lookup cache, [`Options::lookup_cache`](super::Options::lookup_cache)).
pub fn combines(verified: &Verified, stable: &dyn Fn(u32) -> bool) -> bool {
    verified.program().decoded().iter().any(|d| {
        matches!(
            d.insn,
            Instruction::Atomic { op: AtomicOp::Add, fetch: false, size: Size::DW, .. }
        ) && combinable(verified, verified.access(d.pc), stable)
    })
}

/// Whether an access reaches a value that a thread's successive adds tend to hit again: an
/// element of an array or per-CPU array (a counter by index, by SM), or the value of a stable
/// hash map found by a key the same at every access of a site (the kernel's id, a constant:
/// `keys::site_keyed`). Adds to other hash maps' values go straight to memory, aggregated across
/// the warp: their addresses follow keys that change from access to access, and holding a sum
/// would only cost the kernel registers (measured with the `pages` set's (kernel, page) keys,
/// 2 MiB pages, its adds combined: the grid-stride saxpy 4.42× against 3.71×, the model 3.36×
/// against 4.10×).
///
/// A map whose values the program also loads or stores is not combined: the probe reads what it
/// added (a token bucket's time, say) and must see its adds.
fn combinable(verified: &Verified, access: Option<Access>, stable: &dyn Fn(u32) -> bool) -> bool {
    let program: &Program = verified.program();
    match access {
        Some(Access { region: AccessRegion::MapValue(m), .. }) if !read_or_stored(verified, m) => {
            program.maps().get(m as usize).is_some_and(|d| match d.kind {
                MapKind::Array | MapKind::PerCpuArray => true,
                MapKind::Hash | MapKind::PerCpuHash => {
                    stable(m) && super::keys::site_keyed(verified, m)
                }
                _ => false,
            })
        }
        _ => false,
    }
}

/// Whether the program loads or stores (other than by an atomic) a value of map `m`.
fn read_or_stored(verified: &Verified, m: u32) -> bool {
    touches(verified, m, |insn| {
        matches!(insn, Instruction::Load { .. } | Instruction::Store { .. })
    })
}

/// Whether the program writes a value of map `m` itself (a store or an atomic): its loads of
/// them then read past the SM's L1, which is not coherent with the other SMs' writes nor with
/// atomics (`ld.relaxed.gpu`); otherwise a thread reads back the line its SM cached first.
pub(super) fn writes_values(verified: &Verified, m: u32) -> bool {
    touches(verified, m, |insn| {
        matches!(insn, Instruction::Store { .. } | Instruction::Atomic { .. })
    })
}

/// Whether an instruction `which` picks reaches a value of map `m`.
fn touches(verified: &Verified, m: u32, which: impl Fn(&Instruction) -> bool) -> bool {
    verified.program().decoded().iter().any(|d| {
        which(&d.insn)
            && matches!(
                verified.access(d.pc),
                Some(Access { region: AccessRegion::MapValue(v), .. }) if v == m
            )
    })
}

impl Emitter<'_> {
    /// The constant `reg` holds at `pc`, when the instruction just before, with no jump or call
    /// landing in between, loads it (`mov rX, imm`, as a count's `+= 1` compiles).
    fn constant_before(&self, pc: usize, reg: Reg) -> Option<i64> {
        let decoded = self.program.decoded();
        let i = decoded.iter().position(|d| d.pc == pc)?;
        let before = decoded.get(i.checked_sub(1)?)?;
        let lands = lands_at(self.program, pc);
        match before.insn {
            Instruction::Alu { op: AluOp::Mov, width: Width::W64, dst, src: Operand::Imm(c) }
                if dst == reg && !lands =>
            {
                Some(i64::from(c))
            }
            _ => None,
        }
    }

    /// An atomic `op` of `src` on the `size` bytes at `base + off`. The old value goes back into
    /// `src` when `fetch` (always for `xchg`), into `r0` for `cmpxchg` (which compares with it).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn atomic(
        &mut self,
        pc: usize,
        op: AtomicOp,
        fetch: bool,
        size: Size,
        base: Reg,
        off: i16,
        src: Reg,
    ) {
        let region = self.verified.access(pc).map(|a| a.region);
        let on_stack = matches!(region, Some(AccessRegion::OwnStack | AccessRegion::CallerStack));
        let bits = ptx_bits(size);
        if let Some((slot, byte)) = self.frame_slot(self.verified.access(pc)) {
            self.slot_atomic(op, fetch, bits, &slot, byte * 8, src);
            return;
        }
        let s = self.reg(src);
        let r0 = self.reg(Reg::R0);
        let (old, new, cmp) = if bits == 64 {
            (self.tmp64(0), s.clone(), r0.clone())
        } else {
            let [w0, w1, w2] = [self.tmp32(0), self.tmp32(1), self.tmp32(2)];
            self.line(format!("cvt.u32.u64 {w1}, {s};"));
            if op == AtomicOp::CmpXchg {
                self.line(format!("cvt.u32.u64 {w2}, {r0};"));
            }
            (w0, w1, w2)
        };
        let b = self.reg(base);
        let counted = self.counted(pc, region, (op, fetch, bits), off, &b, &s);
        // An add to a map spread over per-SM copies: to the copy of this thread's SM.
        let (b, off) = match region {
            Some(AccessRegion::MapValue(m)) if op == AtomicOp::Add && !fetch => {
                match self.options.maps.get(m as usize).filter(|map| map.spread > 0).copied() {
                    Some(map) => (self.spread_address(map, &b, off), 0),
                    None => (b, off),
                }
            }
            _ => (b, off),
        };
        let (u, bt) = (format!("u{bits}"), format!("b{bits}"));
        let name = match op {
            AtomicOp::Add => "add",
            AtomicOp::Or => "or",
            AtomicOp::And => "and",
            AtomicOp::Xor => "xor",
            AtomicOp::Xchg => "exch",
            AtomicOp::CmpXchg => "cas",
        };
        let ty = if op == AtomicOp::Add { &u } else { &bt };
        let plain = |e: &mut Self| {
            // The thread's own memory: a read-modify-write nobody else can see in between.
            e.line(format!("ld.{u} {old}, [{b}+{off}];"));
            let t1 = if bits == 64 { e.tmp64(1) } else { e.tmp32(3) };
            match op {
                AtomicOp::Xchg => e.line(format!("mov.{bt} {t1}, {new};")),
                AtomicOp::CmpXchg => {
                    let q0 = e.pred(0);
                    e.line(format!("setp.eq.{u} {q0}, {old}, {cmp};"));
                    e.line(format!("selp.{bt} {t1}, {new}, {old}, {q0};"));
                }
                _ => e.line(format!("{name}.{ty} {t1}, {old}, {new};")),
            }
            e.line(format!("st.{u} [{b}+{off}], {t1};"));
        };
        let space = if matches!(region, Some(AccessRegion::MapValue(_))) { ".global" } else { "" };
        let atom = |e: &mut Self| {
            if op == AtomicOp::CmpXchg {
                e.line(format!("atom{space}.cas.{bt} {old}, [{b}+{off}], {cmp}, {new};"));
            } else if fetch || op == AtomicOp::Xchg {
                e.line(format!("atom{space}.{name}.{ty} {old}, [{b}+{off}], {new};"));
            } else {
                e.line(format!("red{space}.{name}.{ty} [{b}+{off}], {new};"));
            }
        };
        // The combining registers are the kernel's, which a local function cannot name.
        let add = op == AtomicOp::Add && !fetch && bits == 64 && self.function == 0;
        let stable =
            |m: u32| self.options.lookup_cache.get(m as usize).is_some_and(Option::is_some);
        // (An add a lookup cache counts went to its sums above: its label ends this function.)
        let combined = add
            && counted.is_none()
            && combinable(self.verified, self.verified.access(pc), &stable);
        if let (Some(slots), true) = (&self.options.combine, combined) {
            if let Some(Access { region: AccessRegion::MapValue(m), offset: Some(at), .. }) =
                self.verified.access(pc)
            {
                let cache = self.options.lookup_cache.get(m as usize).cloned().flatten();
                let sum = cache.and_then(|c| {
                    c.sums.into_iter().find(|(o, _)| i64::from(*o) == at).map(|(_, r)| r)
                });
                if let Some(sum) = sum {
                    // A field of the kernel id's value: where this thread's sum goes when it
                    // exits.
                    self.line(format!("add.s64 {sum}, {sum}, {s};"));
                    return;
                }
            }
            self.combined_add(pc, &b, off, &s, slots);
            return;
        }
        match region {
            _ if on_stack => plain(self),
            Some(AccessRegion::MapValue(_)) if add && self.options.sm >= 80 => {
                // One atomic per group of lanes adding to the same value.
                let [w0, w1, w2, w3] = [0, 1, 2, 3].map(|i| self.tmp32(i));
                let (t3, q2, t2) = (self.tmp64(3), self.pred(2), self.tmp64(2));
                self.line(format!("add.s64 {t3}, {b}, {off};"));
                let label = self.local_label('W', pc);
                let known = self.constant_before(pc, src);
                let w = [&*w0, &w1, &w2, &w3];
                let code = warp_add(false, &t3, &s, known, ".global", w, &q2, &t2, &label);
                self.out.push_str(&code);
            }
            Some(AccessRegion::Context | AccessRegion::MapValue(_)) => atom(self),
            _ => {
                // Different regions on different paths: the stack is local memory, where PTX
                // has no atomics, so decide at run time.
                let (t3, q0) = (self.tmp64(3), self.pred(0));
                self.line(format!("add.s64 {t3}, {b}, {off};"));
                self.line(format!("isspacep.local {q0}, {t3};"));
                let (atomic, after) = (self.local_label('A', pc), self.local_label('B', pc));
                self.line(format!("@!{q0} bra {atomic};"));
                plain(self);
                self.line(format!("bra {after};"));
                self.place(&atomic);
                atom(self);
                self.place(&after);
            }
        }
        let fetches = fetch || matches!(op, AtomicOp::Xchg | AtomicOp::CmpXchg);
        if fetches {
            let into = if op == AtomicOp::CmpXchg { r0 } else { s };
            if bits == 64 {
                self.line(format!("mov.b64 {into}, {old};"));
            } else {
                self.line(format!("cvt.u64.u32 {into}, {old};"));
            }
        }
        if let Some(done) = counted {
            self.place(&done);
        }
    }

    /// An add of `src` to field `off` of the value at `base` that a lookup cache with
    /// [`Counts`](super::Counts) remembers (the last hit's or the one before): to that entry's
    /// sum, then to the label returned, which the caller places after its atomic.
    fn counted(
        &mut self,
        pc: usize,
        region: Option<AccessRegion>,
        (op, fetch, bits): (AtomicOp, bool, u32),
        off: i16,
        base: &str,
        src: &str,
    ) -> Option<String> {
        let Some(AccessRegion::MapValue(m)) = region else { return None };
        if op != AtomicOp::Add || fetch || bits != 64 || self.function != 0 {
            return None;
        }
        let c = self.options.lookup_cache.get(m as usize).cloned().flatten()?;
        let (k, (_, before)) = (c.counts?, c.previous?);
        if i64::from(k.field) != i64::from(off) {
            return None;
        }
        let (q0, q1, done) = (self.pred(0), self.pred(1), self.local_label('D', pc));
        self.line(format!("setp.eq.u64 {q0}, {base}, {};", c.value));
        self.line(format!("setp.eq.u64 {q1}, {base}, {before};"));
        self.line(format!("@{q0} add.s64 {0}, {0}, {src};", k.last));
        self.line(format!("@{q1} add.s64 {0}, {0}, {src};", k.previous));
        self.line(format!("or.pred {q0}, {q0}, {q1};"));
        self.line(format!("@{q0} bra {done};"));
        Some(done)
    }

    /// The address in the copy of this thread's SM ([`DeviceMap::spread`]) of `base + off`, an
    /// address in `map`'s slots: `base + off + total_bytes - first slot + copy × slots' bytes`,
    /// in `tmp64(3)` (which the adds take as their address).
    pub(super) fn spread_address(&mut self, map: DeviceMap, base: &str, off: i16) -> String {
        let g = map.geometry;
        let (w0, t2, t3) = (self.tmp32(0), self.tmp64(2), self.tmp64(3));
        let smid = self.smid();
        let slots_bytes = u64::from(g.slots) * u64::from(g.slot_stride);
        let shift = g.total_bytes - g.slot_offset(0, 0) as u64;
        self.line(format!("mov.u32 {w0}, {smid};"));
        // A power of two, as the binding's check requires.
        self.line(format!("and.b32 {w0}, {w0}, {};", map.spread - 1));
        self.line(format!("mul.wide.u32 {t2}, {w0}, {slots_bytes};"));
        self.line(format!("add.s64 {t3}, {base}, {};", i64::from(off) + shift as i64));
        self.line(format!("add.s64 {t3}, {t3}, {t2};"));
        t3
    }

    /// A 64-bit add of `src` to the address `base + off`, combined per thread in the kernel's
    /// two slots of registers (`[a0, s0, a1, s1]`: an address and the sum not yet in memory,
    /// the newer slot first): the address of either slot adds to its sum; another address
    /// flushes the older slot's sum to its address (aggregated across the warp on sm_80 and
    /// later), moves the newer slot to the older, and starts a new sum in the newer. A probe
    /// that adds to two values per access (a count and bytes) keeps both in registers.
    fn combined_add(&mut self, pc: usize, base: &str, off: i16, src: &str, slots: &[String; 4]) {
        let [a0, s0, a1, s1] = slots;
        let (t3, q0, q1) = (self.tmp64(3), self.pred(0), self.pred(1));
        let (newer, flush) = (self.local_label('C', pc), self.local_label('F', pc));
        let (older, done) = (format!("{newer}_older"), format!("{newer}_done"));
        self.line(format!("add.s64 {t3}, {base}, {off};"));
        self.line(format!("setp.eq.u64 {q0}, {t3}, {a0};"));
        self.line(format!("@{q0} bra {newer};"));
        self.line(format!("setp.eq.u64 {q0}, {t3}, {a1};"));
        self.line(format!("@{q0} bra {older};"));
        self.line(format!("setp.eq.u64 {q1}, {a1}, 0;"));
        self.line(format!("@{q1} bra {flush}_done;"));
        if self.options.sm >= 80 {
            let [w0, w1, w2, w3] = [0, 1, 2, 3].map(|i| self.tmp32(i));
            let (q2, t2) = (self.pred(2), self.tmp64(2));
            // A map value: global memory (GPU memory, or host memory mapped into it).
            let code =
                warp_add(false, a1, s1, None, ".global", [&w0, &w1, &w2, &w3], &q2, &t2, &flush);
            self.out.push_str(&code);
        } else {
            self.line(format!("red.global.add.u64 [{a1}], {s1};"));
            self.place(&format!("{flush}_done"));
        }
        self.line(format!("mov.b64 {a1}, {a0};"));
        self.line(format!("mov.b64 {s1}, {s0};"));
        self.line(format!("mov.b64 {a0}, {t3};"));
        self.line(format!("mov.b64 {s0}, 0;"));
        self.line(format!("bra {newer};"));
        self.place(&older);
        self.line(format!("add.s64 {s1}, {s1}, {src};"));
        self.line(format!("bra {done};"));
        self.place(&newer);
        self.line(format!("add.s64 {s0}, {s0}, {src};"));
        self.place(&done);
    }

    /// An atomic on a frame slot held in a register: only this thread sees it, so it is a plain
    /// read-modify-write of the slot's bits.
    fn slot_atomic(&mut self, op: AtomicOp, fetch: bool, bits: u32, slot: &str, at: u32, src: Reg) {
        let [t0, t1, t2] = [self.tmp64(0), self.tmp64(1), self.tmp64(2)];
        let (s, r0, q0) = (self.reg(src), self.reg(Reg::R0), self.pred(0));
        let field = |e: &mut Self, into: &str, from: &str| {
            if bits == 64 {
                e.line(format!("mov.b64 {into}, {from};"));
            } else {
                e.line(format!("bfe.u64 {into}, {from}, {at}, {bits};"));
            }
        };
        field(self, &t0, slot);
        match op {
            AtomicOp::Add => self.line(format!("add.s64 {t1}, {t0}, {s};")),
            AtomicOp::Or => self.line(format!("or.b64 {t1}, {t0}, {s};")),
            AtomicOp::And => self.line(format!("and.b64 {t1}, {t0}, {s};")),
            AtomicOp::Xor => self.line(format!("xor.b64 {t1}, {t0}, {s};")),
            AtomicOp::Xchg => self.line(format!("mov.b64 {t1}, {s};")),
            AtomicOp::CmpXchg => {
                if bits == 64 {
                    self.line(format!("mov.b64 {t2}, {r0};"));
                } else {
                    self.line(format!("bfe.u64 {t2}, {r0}, 0, {bits};"));
                }
                self.line(format!("setp.eq.u64 {q0}, {t0}, {t2};"));
                self.line(format!("selp.b64 {t1}, {s}, {t0}, {q0};"));
            }
        }
        if bits == 64 {
            self.line(format!("mov.b64 {slot}, {t1};"));
        } else {
            self.line(format!("bfi.b64 {slot}, {t1}, {slot}, {at}, {bits};"));
        }
        match op {
            AtomicOp::CmpXchg => self.line(format!("mov.b64 {r0}, {t0};")),
            AtomicOp::Xchg => self.line(format!("mov.b64 {s}, {t0};")),
            _ if fetch => self.line(format!("mov.b64 {s}, {t0};")),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::warp_add;
    use crate::testing::{disassemble, require_nvdisasm, require_ptxas};

    /// A kernel whose lanes add `v` (a parameter plus the thread's index) to the address in a
    /// module variable (the same in every lane, as `ptxas` sees it: the exit flush's case)
    /// through [`warp_add`].
    fn kernel(uniform: bool, known: Option<i64>) -> String {
        let add = warp_add(
            uniform,
            "%a",
            "%v",
            known,
            ".global",
            ["%w0", "%w1", "%w2", "%w3"],
            "%q",
            "%t",
            "$L",
        );
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.global .align 8 .u64 at;\n\
             .visible .entry k(.param .u64 p)\n{{\n\t.reg .b32 %w<4>;\n\t.reg .pred %q;\n\
             \t.reg .b64 %a, %t, %v;\n\tld.param.u64 %v, [p];\n\tmov.u32 %w0, %tid.x;\n\
             \tcvt.u64.u32 %t, %w0;\n\tadd.u64 %v, %v, %t;\n\tld.global.u64 %a, [at];\n\
             {add}\tret;\n}}\n"
        )
    }

    /// `ptxas` leaves the leaders' adds alone: had it taken a group's sum for the same in every
    /// lane, it would aggregate the leaders' adds again (the first active leader, found with
    /// `FLO`, adding its own sum times their number), losing the sums of other groups whose
    /// leaders run with it.
    #[test]
    fn leaders_adds_are_not_aggregated_again_by_ptxas() {
        let Some(ptxas) = require_ptxas() else { return };
        let Some(nvdisasm) = require_nvdisasm() else { return };
        for uniform in [true, false] {
            for known in [None, Some(1), Some(3)] {
                let ptx = kernel(uniform, known);
                let (_, cubin) = ptxas.compile(&ptx, "sm_90").expect("ptxas takes it");
                let sass = disassemble(&nvdisasm, &cubin);
                let adds = sass.lines().filter(|l| l.contains("REDG.E.ADD.64")).count();
                assert!(adds >= 1, "uniform {uniform}, known {known:?}: no add in\n{sass}");
                assert!(
                    !sass.contains("FLO"),
                    "uniform {uniform}, known {known:?}: ptxas elects a leader of the leaders:\n{sass}"
                );
            }
        }
    }
}
