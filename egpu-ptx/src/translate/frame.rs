//! The stack frame of a function. When its address never escapes (every access at a constant
//! offset of its own frame, or read by an inlined helper), it lives in registers, one 64-bit
//! register per 8-byte slot, read and written with `bfe`/`bfi` (see [`stack_in_registers`]);
//! otherwise it is a `.local` array, and `r10` its generic address.

use egpu_ebpf::MapKind;
use egpu_ebpf::helpers::id as helper_id;
use egpu_ebpf::verifier::{Access, AccessRegion, Verified};
use egpu_ebpf::{CallTarget, Instruction, Reg};

use super::emit::Emitter;
use super::maps;

/// Whether function `f`'s frame can live in registers: every access to it is at a constant,
/// naturally aligned offset of its own frame, and its address reaches nothing the translation
/// does not read directly (an inlined helper's key). Then the frame's address is never needed,
/// and ptxas sees plain registers instead of local memory.
pub(super) fn stack_in_registers(verified: &Verified, f: usize) -> bool {
    let program = verified.program();
    let escapes = |a: Option<Access>| matches!(a, Some(a) if matches!(a.region, AccessRegion::CallerStack | AccessRegion::Mixed));
    // A pointer into some caller's frame, anywhere, means frames' addresses are passed around.
    let passed_down = program.decoded().iter().any(|d| {
        escapes(verified.access(d.pc))
            || verified.call(d.pc).is_some_and(|c| c.args.iter().any(|&a| escapes(a)))
    });
    if passed_down {
        return false;
    }
    let range = program.functions()[f].start..program.functions()[f].end;
    let direct = |a: Access, bytes: i64| {
        a.offset.is_some_and(|o| o.rem_euclid(8) + bytes <= 8 && o.rem_euclid(bytes) == 0)
    };
    program.decoded().iter().filter(|d| range.contains(&d.pc)).all(|d| match d.insn {
        Instruction::Load { size, .. }
        | Instruction::Store { size, .. }
        | Instruction::Atomic { size, .. } => match verified.access(d.pc) {
            Some(a) if a.region == AccessRegion::OwnStack => direct(a, i64::from(size.bytes())),
            _ => true,
        },
        Instruction::Call(CallTarget::Helper(_) | CallTarget::Reg(_)) => {
            let Some(facts) = verified.call(d.pc) else { return true };
            let id = match d.insn {
                Instruction::Call(CallTarget::Helper(id)) => Some(id),
                _ => verified.callx_helper(d.pc),
            };
            let def = facts.map.and_then(|m| program.maps().get(m as usize));
            let map_helper = matches!(
                id,
                Some(
                    helper_id::MAP_LOOKUP_ELEM
                        | helper_id::MAP_UPDATE_ELEM
                        | helper_id::MAP_DELETE_ELEM
                )
            );
            facts.args.iter().enumerate().all(|(i, a)| match (a, def) {
                (Some(a), Some(def)) if a.region == AccessRegion::OwnStack => {
                    // Map helpers read their key (r2) and value (r3) themselves, from the
                    // frame's slot registers.
                    let array = matches!(def.kind, MapKind::Array | MapKind::PerCpuArray);
                    match i {
                        1 if map_helper && array => direct(*a, 4),
                        1 if map_helper => maps::words_direct(*a, def.key_size),
                        2 if id == Some(helper_id::MAP_UPDATE_ELEM) => {
                            maps::words_direct(*a, def.value_size)
                        }
                        1 if matches!(
                            id,
                            Some(helper_id::RINGBUF_OUTPUT | helper_id::RINGBUF_OUTPUT_WARP)
                        ) =>
                        {
                            maps::words_direct(*a, maps::ring_bytes(facts.max_size, def.value_size))
                        }
                        _ => false,
                    }
                }
                (Some(a), None) => a.region != AccessRegion::OwnStack,
                _ => true,
            })
        }
        _ => true,
    })
}

impl Emitter<'_> {
    /// Declares the frame and sets `r10`: its slot registers, cleared, with `r10` 0 (never
    /// used), or its `.local` array, with `r10` the generic address of its end.
    pub(super) fn frame_prologue(&mut self) {
        if self.in_registers {
            let n = self.frame / 8;
            self.declare_slots(n);
            for i in 0..n {
                let slot = self.slot_reg(i64::from(i));
                self.line(format!("mov.b64 {slot}, 0;"));
            }
            // The frame's address is never used: every access names its slot.
            let r10 = self.reg(Reg::R10);
            self.line(format!("mov.b64 {r10}, 0;"));
        } else if self.frame > 0 {
            let (stack, frame) = (self.local_frame(), self.frame);
            self.line(format!(".local .align 8 .b8 {stack}[{frame}];"));
            let r10 = self.reg(Reg::R10);
            self.line(format!("mov.u64 {r10}, {stack};"));
            self.line(format!("cvta.local.u64 {r10}, {r10};"));
            self.line(format!("add.s64 {r10}, {r10}, {frame};"));
        }
    }

    /// The register of the frame slot holding the first byte an access reaches, and the byte's
    /// place in it, when the frame lives in registers and the verifier proved the access is to
    /// this function's frame at a constant offset.
    pub(super) fn frame_slot(&self, access: Option<Access>) -> Option<(String, u32)> {
        if !self.in_registers {
            return None;
        }
        let a = access.filter(|a| a.region == AccessRegion::OwnStack)?;
        let at = i64::from(self.frame) + a.offset?;
        Some((self.slot_reg(at / 8), (at % 8) as u32))
    }
}
