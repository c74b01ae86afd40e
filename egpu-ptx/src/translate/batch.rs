//! Which probes may run once for a run of accesses rather than once per access.
//!
//! A kernel's main loop issues its copies in runs: a Triton matmul's 16 `cp.async` per K step
//! follow one another with nothing but address arithmetic between them. A probe that counts
//! their bytes costs the loop a dozen instructions per copy; run once at the last copy of the
//! run with `size` the run's total, it costs one add per copy. That is the same to the maps only
//! for a probe whose every effect adds `size` to map values that are the same at every access
//! of the run. [`batchable`] decides it, on the verified program with the site's constants
//! (the kernel's id, the class, the operation, whether it writes) folded in:
//!
//! - every path (the branches on site constants decided, the others both taken, loops bounded)
//!   reads from the context neither the address nor the site (which change from access to
//!   access), and uses `size` only as what an atomic add adds;
//! - its only effects are 64-bit atomic adds of `size` (`lock add`, the old value not read) to
//!   values it looked up by keys made of constants and context fields other than those, and
//!   inserts of zeros under such keys that only insert (`BPF_NOEXIST`): adding `size` at each
//!   access then sums to adding the total once;
//! - every path makes the same adds to the same keys, but a path where a lookup made right
//!   after inserting its key finds nothing (the map is full, the insert refused): there the
//!   run's adds are refused together, where one by one they would each be;
//! - it calls no helper but the map lookup and update and `bpf_get_smp_processor_id`, and no
//!   local function.
//!
//! The same walk gives [`summary`]: where each add adds `size` or a number known now (as a
//! count's one) and its keys are constants, the probe's whole effect at the site is a list of
//! numbers (or the access's size, from its register) to add to fields of values, which the
//! injector adds to registers instead of running the probe (`inject/summaries.rs`).

use std::collections::BTreeMap;
use std::mem::offset_of;

use egpu_ebpf::helpers::id as helper_id;
use egpu_ebpf::verifier::{AccessRegion, Verified};
use egpu_ebpf::{
    AluOp, AtomicOp, CallTarget, Imm64, Instruction, JmpCond, MemAccessCtx, Operand, Reg, Size,
    Width,
};

/// The constants of an access site a probe may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteConstants {
    /// [`MemAccessCtx::kernel_id`].
    pub kernel_id: u64,
    /// [`MemAccessCtx::class`].
    pub class: u32,
    /// [`MemAccessCtx::op`].
    pub op: u32,
    /// [`MemAccessCtx::fetch`].
    pub fetch: bool,
    /// [`MemAccessCtx::is_store`].
    pub is_store: bool,
}

/// Instructions followed over all paths before giving up.
const STEPS: usize = 4096;

/// What a register or stack slot holds, as far as batching is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Value {
    /// A number known when translating.
    Const(u64),
    /// The same at every access of a run, not known when translating: a context field (at
    /// this offset, of this many bytes), or something computed.
    Same(Option<(i64, u8)>),
    /// The access's `size`.
    Size,
    /// The context's address.
    Context,
    /// The address of the frame's byte at this offset from `r10`.
    Stack(i64),
    /// A map (the index in the program's map table).
    Map(u32),
    /// What a lookup of this map by this key found (a value's address, or null).
    Found(u32, Key),
}

/// A key: a constant, or a context field (offset, bytes) the same at every access of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Const(u64),
    Field(i64, u8),
}

/// An add a path makes: the map, the key, the offset in the value, what it adds.
type Add = (u32, Key, i16, Addend);

/// One path's state.
#[derive(Clone, Debug)]
struct State {
    pc: usize,
    regs: [Option<Value>; 11],
    stack: BTreeMap<i64, Value>,
    /// Keys inserted on this path, by map.
    inserted: Vec<(u32, Key)>,
    adds: Vec<Add>,
}

/// Whether `verified`, at a site of `site`'s constants, may run once per run of accesses with
/// `size` the run's total (see the module's documentation).
pub fn batchable(verified: &Verified, site: &SiteConstants) -> bool {
    paths(verified, site).is_some_and(|adds| adds.iter().all(|a| a.3 == Addend::Size))
}

/// An add of a probe's [`summary`]: to the 8-byte field at `offset` of map `map`'s value under
/// key `key`, `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SummaryAdd {
    /// The map (its index in the program's map table).
    pub map: u32,
    /// The key, a constant (the kernel's id, for example).
    pub key: u64,
    /// The field's offset in the value.
    pub offset: i16,
    /// What the probe adds to it at the site.
    pub value: Addend,
}

/// What a [`SummaryAdd`] adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Addend {
    /// The access's `size`, known at run time only (a `cp.async`'s `src-size` register).
    Size,
    /// A number known when translating (a count's 1, or a size known then).
    Const(u64),
}

/// What `verified` does at an access site of `site`'s constants whose size is `size` (`None`:
/// known at run time only): adds of numbers known now, or of the size, to fields of map values
/// under constant keys (looked up, and inserted as zeros when missing, as [`batchable`]'s
/// probes do), the same on every path. The injector then adds them to registers of the
/// thread's and the values get the sums once, when the thread exits, with no probe at the
/// access at all. `None` when the probe does anything else (reads the address, the site or a
/// map value, calls another helper, keys by a context field, adds something else known at run
/// time only).
pub fn summary(
    verified: &Verified,
    site: &SiteConstants,
    size: Option<u32>,
) -> Option<Vec<SummaryAdd>> {
    let adds = paths(verified, site)?;
    adds.into_iter()
        .map(|(map, key, offset, addend)| {
            let Key::Const(key) = key else { return None };
            let value = match (addend, size) {
                (Addend::Size, Some(size)) => Addend::Const(u64::from(size)),
                (addend, _) => addend,
            };
            Some(SummaryAdd { map, key, offset, value })
        })
        .collect()
}

/// The adds every path of `verified` makes at a site of `site`'s constants (sorted), when they
/// are the same on every path and the program does nothing else (see the module's
/// documentation); `None` otherwise.
fn paths(verified: &Verified, site: &SiteConstants) -> Option<Vec<Add>> {
    let program = verified.program();
    if program.functions().len() > 1 {
        return None;
    }
    let decoded = program.decoded();
    let at = |pc: usize| decoded.iter().find(|d| d.pc == pc).map(|d| d.insn);
    let mut regs = [None; 11];
    regs[1] = Some(Value::Context);
    regs[10] = Some(Value::Stack(0));
    let start =
        State { pc: 0, regs, stack: BTreeMap::new(), inserted: Vec::new(), adds: Vec::new() };
    let mut pending = vec![start];
    let mut ends: Vec<Vec<Add>> = Vec::new();
    let mut steps = 0;
    while let Some(mut s) = pending.pop() {
        loop {
            steps += 1;
            let insn = at(s.pc).filter(|_| steps <= STEPS)?;
            match step(verified, site, insn, &mut s, &mut pending)? {
                Step::Next => s.pc += insn.slots(),
                Step::Jumped => {}
                Step::End => {
                    s.adds.sort_unstable();
                    ends.push(std::mem::take(&mut s.adds));
                    break;
                }
            }
        }
    }
    if !ends.windows(2).all(|w| w[0] == w[1]) {
        return None;
    }
    Some(ends.pop().unwrap_or_default())
}

enum Step {
    Next,
    Jumped,
    End,
}

/// A load of `bytes` bytes of the access's context at byte `offset`; `None` when it reads
/// what changes from access to access (the address, the site, part of the size).
fn context_field(site: &SiteConstants, offset: i64, bytes: u8) -> Option<Value> {
    let field = |at: usize, len: u8| (at as i64, len);
    let exactly = |(at, len): (i64, u8)| offset == at && bytes == len;
    let overlaps =
        |(at, len): (i64, u8)| offset < at + i64::from(len) && at < offset + i64::from(bytes);
    let size = field(offset_of!(MemAccessCtx, size), 4);
    if exactly(size) {
        return Some(Value::Size);
    }
    let varying =
        [field(offset_of!(MemAccessCtx, addr), 8), size, field(offset_of!(MemAccessCtx, site), 4)];
    if varying.into_iter().any(overlaps) {
        return None;
    }
    let constants = [
        (field(offset_of!(MemAccessCtx, kernel_id), 8), site.kernel_id),
        (field(offset_of!(MemAccessCtx, class), 4), u64::from(site.class)),
        (field(offset_of!(MemAccessCtx, op), 4), u64::from(site.op)),
        (field(offset_of!(MemAccessCtx, fetch), 4), u64::from(site.fetch)),
        (field(offset_of!(MemAccessCtx, is_store), 4), u64::from(site.is_store)),
    ];
    Some(match constants.into_iter().find(|(f, _)| exactly(*f)) {
        Some((_, value)) => Value::Const(value),
        None => Value::Same(Some((offset, bytes))),
    })
}

/// Whether map `m`'s keys are one word at most (the word [`key`] reads is the whole key).
fn one_word_key(verified: &Verified, m: u32) -> bool {
    verified.program().maps().get(m as usize).is_some_and(|d| d.key_size <= 8)
}

/// The key at the stack address `at` holds (a word written whole).
fn key(s: &State, at: Option<Value>) -> Option<Key> {
    let Some(Value::Stack(o)) = at else { return None };
    match s.stack.get(&o)? {
        Value::Const(c) => Some(Key::Const(*c)),
        Value::Same(Some((offset, bytes))) => Some(Key::Field(*offset, *bytes)),
        _ => None,
    }
}

/// One instruction of path `s`; `None`: the program cannot be batched.
fn step(
    verified: &Verified,
    site: &SiteConstants,
    insn: Instruction,
    s: &mut State,
    pending: &mut Vec<State>,
) -> Option<Step> {
    let pc = s.pc;
    let get = |s: &State, r: Reg| s.regs[r.index() as usize];
    let operand = |s: &State, o: Operand| match o {
        Operand::Reg(r) => get(s, r),
        Operand::Imm(i) => Some(Value::Const(i as i64 as u64)),
    };
    let same = |v: Option<Value>| matches!(v, Some(Value::Const(_) | Value::Same(_)));
    match insn {
        Instruction::Alu { op, width, dst, src } => {
            let (a, b) = (get(s, dst), operand(s, src));
            let v = match (op, width, a, b) {
                (AluOp::Mov, Width::W64, _, Some(v)) => v,
                (AluOp::Mov, Width::W32, _, Some(Value::Const(c))) => Value::Const(c & 0xffff_ffff),
                (AluOp::Mov, Width::W32, _, Some(v @ (Value::Size | Value::Same(_)))) => v,
                (AluOp::Add, Width::W64, Some(Value::Stack(o)), Some(Value::Const(c))) => {
                    Value::Stack(o.wrapping_add(c as i64))
                }
                (_, _, Some(Value::Const(x)), Some(Value::Const(y))) => {
                    Value::Const(op.eval(width, x, y))
                }
                _ if same(a) && same(b) => Value::Same(None),
                _ => return None,
            };
            s.regs[dst.index() as usize] = Some(v);
        }
        Instruction::Neg { dst, .. } | Instruction::Endian { dst, .. } => {
            if !same(get(s, dst)) {
                return None;
            }
            s.regs[dst.index() as usize] = Some(Value::Same(None));
        }
        Instruction::LoadImm64 { dst, imm } => {
            s.regs[dst.index() as usize] = Some(match imm {
                Imm64::Value(v) => Value::Const(v),
                Imm64::Map(m) => Value::Map(m),
                Imm64::MapValue { .. } | Imm64::Func(_) => return None,
            });
        }
        Instruction::Load { size, dst, .. } => {
            let a = verified.access(pc)?;
            let v = match (a.region, a.offset) {
                (AccessRegion::Context, Some(o)) => context_field(site, o, size.bytes() as u8)?,
                (AccessRegion::OwnStack, Some(o)) if size == Size::DW => {
                    s.stack.get(&o).copied().unwrap_or(Value::Same(None))
                }
                (AccessRegion::OwnStack, Some(_)) => Value::Same(None),
                _ => return None,
            };
            s.regs[dst.index() as usize] = Some(v);
        }
        Instruction::Store { size, src, .. } => {
            let a = verified.access(pc)?;
            let (AccessRegion::OwnStack, Some(o)) = (a.region, a.offset) else { return None };
            let v = operand(s, src).filter(|v| same(Some(*v)))?;
            // A part of a word makes the word opaque, but still the same at every access.
            let whole = size == Size::DW && o.rem_euclid(8) == 0;
            s.stack.insert(o - o.rem_euclid(8), if whole { v } else { Value::Same(None) });
        }
        Instruction::Atomic { op: AtomicOp::Add, fetch: false, size: Size::DW, base, off, src } => {
            let Some(Value::Found(m, key)) = get(s, base) else { return None };
            let addend = match get(s, src) {
                Some(Value::Size) => Addend::Size,
                Some(Value::Const(c)) => Addend::Const(c),
                _ => return None,
            };
            s.adds.push((m, key, off, addend));
        }
        Instruction::Atomic { .. } => return None,
        Instruction::Jump { .. } => {
            s.pc = insn.jump_target(pc)? as usize;
            return Some(Step::Jumped);
        }
        Instruction::Branch { cond, width, dst, src, .. } => {
            let target = insn.jump_target(pc)? as usize;
            let (a, b) = (get(s, dst), operand(s, src));
            match (a, b) {
                (Some(Value::Const(x)), Some(Value::Const(y))) => {
                    s.pc = if cond.holds(width, x, y) { target } else { pc + 1 };
                }
                (Some(Value::Found(m, key)), Some(Value::Const(0)))
                    if width == Width::W64 && matches!(cond, JmpCond::Eq | JmpCond::Ne) =>
                {
                    // A lookup's null test: both ways, but null right after the key's insert is
                    // a refused insert, a path not compared.
                    let (null_pc, found_pc) =
                        if cond == JmpCond::Eq { (target, pc + 1) } else { (pc + 1, target) };
                    if !s.inserted.contains(&(m, key)) {
                        let mut null = s.clone();
                        null.pc = null_pc;
                        null.regs[dst.index() as usize] = Some(Value::Const(0));
                        pending.push(null);
                    }
                    s.pc = found_pc;
                }
                _ if same(a) && same(b) => {
                    let mut other = s.clone();
                    other.pc = target;
                    pending.push(other);
                    s.pc = pc + 1;
                }
                _ => return None,
            }
            return Some(Step::Jumped);
        }
        Instruction::Call(CallTarget::Helper(id)) => {
            let r0 = match id {
                helper_id::MAP_LOOKUP_ELEM => match (get(s, Reg::R1), key(s, get(s, Reg::R2))) {
                    (Some(Value::Map(m)), Some(k)) if one_word_key(verified, m) => {
                        Value::Found(m, k)
                    }
                    _ => return None,
                },
                helper_id::MAP_UPDATE_ELEM => {
                    let (Some(Value::Map(m)), Some(k), Some(Value::Const(1))) =
                        (get(s, Reg::R1), key(s, get(s, Reg::R2)), get(s, Reg::R4))
                    else {
                        return None;
                    };
                    if !one_word_key(verified, m) {
                        return None;
                    }
                    // Only zeros, only inserted.
                    let Some(Value::Stack(o)) = get(s, Reg::R3) else { return None };
                    let words = verified.program().maps().get(m as usize)?.value_size.div_ceil(8);
                    let zeros = (0..i64::from(words))
                        .all(|w| s.stack.get(&(o + 8 * w)) == Some(&Value::Const(0)));
                    if !zeros {
                        return None;
                    }
                    s.inserted.push((m, k));
                    Value::Same(None)
                }
                helper_id::GET_SMP_PROCESSOR_ID => Value::Same(None),
                _ => return None,
            };
            for r in 1..=5 {
                s.regs[r] = None;
            }
            s.regs[0] = Some(r0);
        }
        Instruction::Call(_) => return None,
        Instruction::Exit => return Some(Step::End),
    }
    Some(Step::Next)
}

#[cfg(test)]
mod tests {
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};

    use super::*;

    const ASYNC: SiteConstants = SiteConstants {
        kernel_id: 7,
        class: MemAccessCtx::ASYNC_COPY,
        op: 0,
        fetch: false,
        is_store: false,
    };

    /// `bytes[kernel_id] += size` as Probe Rust's `fetch_add` makes it (look up; when missing,
    /// insert a zero and look up again; add), behind a test of the class: the tensor copies'
    /// branch counts (`+= 1`).
    const BYTES: &str = "mov %r9, %r1\nldxw %r0, [%r9+76]\njne %r0, 4, bytes\n\
        ldxdw %r0, [%r9+8]\nstxdw [%r10-8], %r0\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -8\n\
        call 1\njeq %r0, 0, out\nmov %r1, 1\nlock add [%r0], %r1\nja out\n\
        bytes:\nldxdw %r0, [%r9+8]\nstxdw [%r10-8], %r0\nlddw %r1, map[0]\nmov %r2, %r10\n\
        add %r2, -8\ncall 1\njeq %r0, 0, missing\nldxw %r1, [%r9+16]\nlock add [%r0], %r1\n\
        ja out\nmissing:\nstdw [%r10-16], 0\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -8\n\
        mov %r3, %r10\nadd %r3, -16\nmov %r4, 1\ncall 2\nlddw %r1, map[0]\nmov %r2, %r10\n\
        add %r2, -8\ncall 1\njeq %r0, 0, out\nldxw %r1, [%r9+16]\nlock add [%r0], %r1\n\
        out:\nmov %r0, 0\nexit";

    fn verified(text: &str) -> Verified {
        let def = MapDef {
            name: "m".into(),
            kind: MapKind::Hash,
            key_size: 8,
            value_size: 8,
            capacity: 64,
        };
        let program = Program::new(
            assemble(text).expect("assembles"),
            vec![def],
            AttachPoint::Device(DeviceEvent::GlobalLoad),
        )
        .expect("a program");
        verify(&program).expect("verified")
    }

    #[test]
    fn adding_the_size_by_the_kernels_id_is_batchable_a_count_is_not() {
        let p = verified(BYTES);
        assert!(batchable(&p, &ASYNC), "bytes of a cp.async");
        let tensor = SiteConstants { class: MemAccessCtx::TENSOR_COPY, ..ASYNC };
        assert!(!batchable(&p, &tensor), "a count: += 1 per access");
        assert!(batchable(&verified("mov %r0, 0\nexit"), &ASYNC), "no effect at all");
    }

    #[test]
    fn a_summary_adds_the_size_known_now_or_from_its_register() {
        let p = verified(BYTES);
        let add = |value| SummaryAdd { map: 0, key: 7, offset: 0, value };
        assert_eq!(summary(&p, &ASYNC, Some(16)), Some(vec![add(Addend::Const(16))]));
        assert_eq!(summary(&p, &ASYNC, None), Some(vec![add(Addend::Size)]), "src-size");
        // The tensor copies' count adds nothing where its key is missing: not every path adds.
        let tensor = SiteConstants { class: MemAccessCtx::TENSOR_COPY, ..ASYNC };
        assert_eq!(summary(&p, &tensor, Some(16)), None);
        // Keyed by the thread: a key not known now.
        let by_thread = BYTES.replace("ldxdw %r0, [%r9+8]", "ldxw %r0, [%r9+24]");
        assert_eq!(summary(&verified(&by_thread), &ASYNC, None), None);
        // Twice the size: not the size, and not known now.
        let double = BYTES.replace("ldxw %r1, [%r9+16]", "ldxw %r1, [%r9+16]\nadd %r1, %r1");
        assert_eq!(summary(&verified(&double), &ASYNC, None), None);
    }

    #[test]
    fn what_changes_from_access_to_access_or_is_not_an_add_of_the_size_is_not_batchable() {
        let by = |key: &str| BYTES.replace("ldxdw %r0, [%r9+8]", key);
        // Keyed by the address, or by the site.
        assert!(!batchable(&verified(&by("ldxdw %r0, [%r9+0]")), &ASYNC));
        assert!(!batchable(&verified(&by("ldxw %r0, [%r9+20]")), &ASYNC));
        // Keyed by the thread (the same at every access of a run): fine.
        assert!(batchable(&verified(&by("ldxw %r0, [%r9+24]")), &ASYNC));
        // Twice the size, or a branch on it.
        let double = BYTES.replace("ldxw %r1, [%r9+16]", "ldxw %r1, [%r9+16]\nadd %r1, %r1");
        assert!(!batchable(&verified(&double), &ASYNC));
        let branch =
            BYTES.replace("jne %r0, 4, bytes", "ldxw %r2, [%r9+16]\njgt %r2, 8, out\nja bytes");
        assert!(!batchable(&verified(&branch), &ASYNC));
        // A counter that adds nothing when its key was missing: the run's first batch would
        // be dropped whole.
        let drops = BYTES.replace(
            "call 2\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -8\ncall 1\njeq %r0, 0, out\n\
             ldxw %r1, [%r9+16]\nlock add [%r0], %r1\n",
            "call 2\n",
        );
        assert_ne!(drops, BYTES);
        assert!(!batchable(&verified(&drops), &ASYNC));
        // An insert of something other than zeros.
        let seeded = BYTES.replace("stdw [%r10-16], 0", "stdw [%r10-16], 5");
        assert!(!batchable(&verified(&seeded), &ASYNC));
        // Another helper (a clock reads differently at every access).
        let clock = BYTES.replace("mov %r9, %r1\n", "mov %r9, %r1\ncall 5\n");
        assert!(!batchable(&verified(&clock), &ASYNC));
        // Eight bytes at the size's offset (the size and the site), or a byte of the size as
        // the key.
        let wide = BYTES.replace("ldxw %r1, [%r9+16]", "ldxdw %r1, [%r9+16]");
        assert!(!batchable(&verified(&wide), &ASYNC));
        assert!(!batchable(&verified(&by("ldxb %r0, [%r9+17]")), &ASYNC));
        // The class read together with the device as one word: not a constant, so both ways
        // of its test are taken, and the count's is not additive.
        let both = BYTES.replace("ldxw %r0, [%r9+76]", "ldxdw %r0, [%r9+72]");
        assert!(!batchable(&verified(&both), &ASYNC));
    }
}
