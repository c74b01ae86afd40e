//! Backward dataflow over each function, run once before the search: which registers are live,
//! which numbers must stay precise, and which stack slots may still be read, before each
//! instruction. At join points the search forgets the rest, so it does not keep states apart.

use crate::helpers::{ArgKind, helper};
use crate::instruction::{AluOp, CallTarget, Instruction, Operand};
use crate::{Program, Reg};

/// Registers an instruction reads, as a bit set.
pub(super) fn reads(insn: &Instruction) -> u16 {
    let bit = |r: Reg| 1u16 << r.index();
    let op = |o: &Operand| match o {
        Operand::Reg(r) => bit(*r),
        Operand::Imm(_) => 0,
    };
    match insn {
        Instruction::Alu { op: AluOp::Mov | AluOp::MovSx(_), src, .. } => op(src),
        Instruction::Alu { dst, src, .. } => bit(*dst) | op(src),
        Instruction::Neg { dst, .. } | Instruction::Endian { dst, .. } => bit(*dst),
        Instruction::LoadImm64 { .. } | Instruction::Jump { .. } => 0,
        Instruction::Load { base, .. } => bit(*base),
        Instruction::Store { base, src, .. } => bit(*base) | op(src),
        Instruction::Atomic { op: crate::AtomicOp::CmpXchg, base, src, .. } => {
            bit(*base) | bit(*src) | 1
        }
        Instruction::Atomic { base, src, .. } => bit(*base) | bit(*src),
        Instruction::Branch { dst, src, .. } => bit(*dst) | op(src),
        Instruction::Call(CallTarget::Helper(id)) => {
            helper(*id).map_or(0, |h| ((1u16 << h.args.len()) - 1) << 1)
        }
        Instruction::Call(CallTarget::Reg(r)) => bit(*r) | 0x3e,
        Instruction::Call(CallTarget::Local(_)) => 0x3e,
        Instruction::Exit => 1,
    }
}

/// Registers an instruction writes, as a bit set (calls clobber `r0`–`r5`).
fn writes(insn: &Instruction) -> u16 {
    match insn {
        Instruction::Call(_) => 0x3f,
        Instruction::Atomic { op: crate::AtomicOp::CmpXchg, .. } => 1,
        Instruction::Atomic { fetch: true, src, .. }
        | Instruction::Atomic { op: crate::AtomicOp::Xchg, src, .. } => 1 << src.index(),
        i => i.written_reg().map_or(0, |r| 1 << r.index()),
    }
}

/// The registers live before each instruction: read on some path before being written.
pub(super) fn liveness(program: &Program, insns: &[Option<Instruction>]) -> Vec<u16> {
    backward(program, insns, |_, insn, out| reads(insn) | (out & !writes(insn)))
}

/// The registers whose numbers matter before each instruction: on some path, before being
/// written, they decide a branch, an address, a helper's pointer or size argument, a value
/// stored to memory or passed to a local function, directly or through the arithmetic that
/// computes one of those. A number that only feeds the program's result, say, does not matter:
/// at join points the verifier forgets it (any number then fits), so states that differ only in
/// such numbers do not keep paths apart. Forgetting is always sound; this analysis only keeps the
/// verifier from forgetting what it needs.
pub(super) fn precision(program: &Program, insns: &[Option<Instruction>]) -> Vec<u16> {
    let bit = |r: Reg| 1u16 << r.index();
    let op = |o: &Operand| match o {
        Operand::Reg(r) => bit(*r),
        Operand::Imm(_) => 0,
    };
    backward(program, insns, |main, insn, out| {
        let used = match insn {
            Instruction::Alu { op: AluOp::Mov | AluOp::MovSx(_), dst, src, .. } => {
                if out & bit(*dst) != 0 { op(src) } else { 0 }
            }
            Instruction::Alu { dst, src, .. } => {
                if out & bit(*dst) != 0 {
                    bit(*dst) | op(src)
                } else {
                    0
                }
            }
            Instruction::Neg { dst, .. } | Instruction::Endian { dst, .. } => out & bit(*dst),
            Instruction::LoadImm64 { .. } | Instruction::Jump { .. } => 0,
            Instruction::Load { base, .. } => bit(*base),
            Instruction::Call(CallTarget::Helper(id)) => helper(*id).map_or(0, |h| {
                h.args
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| {
                        // bpf_loop's flags must be the constant 0, so all its arguments count.
                        *id == crate::helpers::id::LOOP
                            || !matches!(
                                a.kind,
                                ArgKind::Scalar | ArgKind::MapRef | ArgKind::RingBuf
                            )
                    })
                    .fold(0, |m, (i, _)| m | 1 << (i + 1))
            }),
            Instruction::Exit if main => 0,
            other => reads(other),
        };
        used | (out & !writes(insn))
    })
}

/// The slots of the current frame that may be read before being overwritten, before each
/// instruction, as a bit set (bit `i` is the slot at `r10 - 8 * (i + 1)`). Only for functions
/// that address their stack through `r10` and constant offsets alone: when `r10` is copied (to
/// pass a key to a helper, say), accesses through the copy are unknown here, and every slot of the
/// function counts as live. At join points the verifier forgets dead slots.
pub(super) fn stack_liveness(program: &Program, insns: &[Option<Instruction>]) -> Vec<u64> {
    let len = insns.len();
    let mut live = vec![u64::MAX; len];
    let slots = |off: i16, size: u32| -> u64 {
        // Slots overlapping [r10 + off, r10 + off + size).
        let (lo, hi) = (i64::from(off), i64::from(off) + i64::from(size));
        (0..64)
            .filter(|i| {
                let (s_lo, s_hi) = (-8 * (i + 1), -8 * i);
                lo < s_hi && s_lo < hi
            })
            .fold(0u64, |m, i| m | 1 << i)
    };
    for f in program.functions() {
        let pcs: Vec<usize> = (f.start..f.end).filter(|&pc| insns[pc].is_some()).collect();
        let direct_only = pcs.iter().all(|&pc| match insns[pc].expect("filtered") {
            Instruction::Load { .. } | Instruction::Store { src: Operand::Imm(_), .. } => true,
            Instruction::Store { src: Operand::Reg(r), .. } => r != Reg::R10,
            Instruction::Atomic { src, .. } => src != Reg::R10,
            insn => reads(&insn) & (1 << 10) == 0,
        });
        if !direct_only {
            continue;
        }
        let mut changed = true;
        while changed {
            changed = false;
            for &pc in pcs.iter().rev() {
                let insn = insns[pc].expect("filtered");
                let after = |t: usize| if t < len { live[t] } else { 0 };
                let out = match insn {
                    Instruction::Exit => 0,
                    Instruction::Jump { .. } => after(insn.jump_target(pc).unwrap_or(0) as usize),
                    Instruction::Branch { .. } => {
                        after(pc + 1) | after(insn.jump_target(pc).unwrap_or(0) as usize)
                    }
                    _ => after(pc + insn.slots()),
                };
                let new =
                    match insn {
                        Instruction::Load { base: Reg::R10, off, size, .. }
                        | Instruction::Atomic { base: Reg::R10, off, size, .. } => {
                            out | slots(off, size.bytes())
                        }
                        Instruction::Store {
                            base: Reg::R10, off, size: crate::Size::DW, ..
                        } if off % 8 == 0 => out & !slots(off, 8),
                        _ => out,
                    };
                if new != live[pc] {
                    live[pc] = new;
                    changed = true;
                }
            }
        }
    }
    live
}

/// A backward dataflow over each function's instructions, to a fixed point: `transfer` gives the
/// set before an instruction from the set after it (and whether the function is the main one).
fn backward(
    program: &Program,
    insns: &[Option<Instruction>],
    transfer: impl Fn(bool, &Instruction, u16) -> u16,
) -> Vec<u16> {
    let len = insns.len();
    let mut live = vec![0u16; len];
    for (index, f) in program.functions().iter().enumerate() {
        let pcs: Vec<usize> = (f.start..f.end).filter(|&pc| insns[pc].is_some()).collect();
        let mut changed = true;
        while changed {
            changed = false;
            for &pc in pcs.iter().rev() {
                let insn = insns[pc].expect("filtered");
                let after = |t: usize| if t < len { live[t] } else { 0 };
                let out = match insn {
                    Instruction::Exit => 0,
                    Instruction::Jump { .. } => after(insn.jump_target(pc).unwrap_or(0) as usize),
                    Instruction::Branch { .. } => {
                        after(pc + 1) | after(insn.jump_target(pc).unwrap_or(0) as usize)
                    }
                    _ => after(pc + insn.slots()),
                };
                let new = transfer(index == 0, &insn, out);
                if new != live[pc] {
                    live[pc] = new;
                    changed = true;
                }
            }
        }
    }
    live
}
