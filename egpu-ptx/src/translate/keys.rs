//! Which hash maps a probe reaches by a key that stays the same at one site: the kernel's id, or
//! a constant. A thread's successive adds at such a site hit one value, so they can be combined
//! in the thread's registers ([`combines`](super::combines)), as adds to array elements are.
//!
//! It is a heuristic on the program's text, for speed only: whatever it says, combined adds are
//! exact, since a thread flushes its sum whenever the address it adds to changes.

use std::mem::offset_of;

use egpu_ebpf::helpers::id;
use egpu_ebpf::verifier::{AccessRegion, Verified};
use egpu_ebpf::{
    AluOp, AttachPoint, CallTarget, DeviceEvent, Imm64, Instruction, KernelCtx, MemAccessCtx,
    Operand, Reg, Size,
};

/// Whether every lookup of map `m` in the program takes an 8-byte key that the program last
/// stored, before the lookup in program order, from the context's kernel id or a constant.
pub(crate) fn site_keyed(verified: &Verified, m: u32) -> bool {
    keyed(verified, m, Keyed::Site)
}

/// Whether every lookup of map `m` in the program takes an 8-byte key that the program last
/// stored, before the lookup in program order, from the context's kernel id (a lookup cache
/// then remembers that key's value only: [`CacheKey::Constant`](super::CacheKey::Constant)).
pub fn kernel_keyed(verified: &Verified, m: u32) -> bool {
    keyed(verified, m, Keyed::Kernel)
}

/// Whether every lookup of map `m` in the program takes a key of two words (9 to 16 bytes) whose
/// first the program last stored, before the lookup in program order, from the context's
/// kernel id: the `pages` set's (kernel, page). A lookup cache then remembers the second word
/// only ([`CacheKey::Second`](super::CacheKey::Second)).
pub fn kernel_first(verified: &Verified, m: u32) -> bool {
    keyed(verified, m, Keyed::KernelFirst)
}

/// What [`keyed`] checks of a key's first word.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keyed {
    /// A key of one word: the kernel id or a constant.
    Site,
    /// A key of one word: the kernel id.
    Kernel,
    /// A key of two words, the first the kernel id.
    KernelFirst,
}

/// [`site_keyed`], [`kernel_keyed`] or [`kernel_first`], as `what` says.
fn keyed(verified: &Verified, m: u32, what: Keyed) -> bool {
    let program = verified.program();
    let constants = what == Keyed::Site;
    // A key's words past the first are not looked at below.
    let words = |d: &egpu_ebpf::MapDef| d.key_size.div_ceil(8);
    let fits = program.maps().get(m as usize).is_some_and(|d| match what {
        Keyed::KernelFirst => words(d) == 2,
        _ => d.key_size <= 8,
    });
    if !fits {
        return false;
    }
    let kernel_id = match program.attach_point() {
        AttachPoint::Device(DeviceEvent::KernelEntry | DeviceEvent::KernelExit) => {
            offset_of!(KernelCtx, kernel_id)
        }
        AttachPoint::Device(_) => offset_of!(MemAccessCtx, kernel_id),
        _ => return false,
    } as i64;
    let decoded = program.decoded();
    let mut lookups = 0;
    for (i, d) in decoded.iter().enumerate() {
        if d.insn != Instruction::Call(CallTarget::Helper(id::MAP_LOOKUP_ELEM)) {
            continue;
        }
        let Some(facts) = verified.call(d.pc) else { continue };
        match facts.map {
            Some(map) if map == m => {}
            Some(_) => continue,
            None => return false,
        }
        let key = match facts.args[1] {
            Some(a) if a.region == AccessRegion::OwnStack => a.offset,
            _ => None,
        };
        let Some(key) = key else { return false };
        // The last store to the key's slot before the lookup.
        let store = decoded[..i].iter().rposition(|s| {
            matches!(s.insn, Instruction::Store { .. })
                && verified.access(s.pc).is_some_and(|a| {
                    a.region == AccessRegion::OwnStack
                        && a.offset.is_none_or(|o| o < key + 8 && key < o + 8)
                })
        });
        let constant = store.is_some_and(|j| match decoded[j].insn {
            Instruction::Store { size: Size::DW, src: Operand::Imm(_), .. } => constants,
            Instruction::Store { size: Size::DW, src: Operand::Reg(r), .. } => {
                verified.access(decoded[j].pc).is_some_and(|a| a.offset == Some(key))
                    && holds_site_constant(verified, &decoded[..j], r, kernel_id, constants)
            }
            _ => false,
        });
        if !constant {
            return false;
        }
        lookups += 1;
    }
    lookups > 0
}

/// Whether the last write of `reg` in `before` (in program order) loads the context's kernel id
/// (or, with `constants`, a constant).
fn holds_site_constant(
    verified: &Verified,
    before: &[egpu_ebpf::Decoded],
    reg: Reg,
    kernel_id: i64,
    constants: bool,
) -> bool {
    let clobbers = |d: &egpu_ebpf::Decoded| {
        d.insn.written_reg() == Some(reg)
            || matches!(d.insn, Instruction::Call(_)) && reg.index() <= 5
    };
    let Some(w) = before.iter().rev().find(|d| clobbers(d)) else {
        return false;
    };
    match w.insn {
        Instruction::Load { size: Size::DW, signed: false, .. } => verified
            .access(w.pc)
            .is_some_and(|a| a.region == AccessRegion::Context && a.offset == Some(kernel_id)),
        Instruction::Alu { op: AluOp::Mov, src: Operand::Imm(_), .. } => constants,
        Instruction::LoadImm64 { imm: Imm64::Value(_), .. } => constants,
        _ => false,
    }
}
