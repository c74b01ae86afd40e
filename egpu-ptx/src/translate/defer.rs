//! Deferred misses ([`Options::defer`]): at an access whose probe is a count by a key the
//! lookup cache remembers (the `pages` set's), a thread whose key is in neither cached entry
//! does not search the map there: it keeps the access's address in a `.local` slot and sets its
//! bit in a mask register of the kernel, and goes on. The injector runs the probe again for
//! each bit set, from the slot, where the straight line of code the access is in ends (before a
//! label, a branch, a call, a return). So the access's own code has no branch at all (ptxas
//! schedules the kernel's instructions across it), and a run of such accesses costs one
//! branch, at its end.
//!
//! Only a probe that may run later in the same thread with the same outcome is deferred
//! ([`Emitter::deferrable`]): one function, no loop, nothing before the lookup but ALU, stack
//! and context reads (no helper, no map read or write), nothing after the counted add but ALU
//! and its exit, and no read of a `size` that is known at run time only (the slot keeps the
//! address).

use std::collections::BTreeSet;

use egpu_ebpf::verifier::AccessRegion;
use egpu_ebpf::{Instruction, MemAccessCtx};

use super::Context;
use super::emit::Emitter;

/// Where a deferred miss is kept until the injector runs the probe again ([`Options::defer`]).
///
/// [`Options::defer`]: super::Options::defer
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Defer {
    /// The `.local` address of the 8 bytes that keep the access's address (`%slots+16`).
    pub slot: String,
    /// A 64-bit register of the kernel: the bits of the deferred accesses of the run.
    pub mask: String,
    /// This access's bit in `mask` (below 64).
    pub bit: u32,
}

impl Emitter<'_> {
    /// Whether the probe may run again later in the thread in place of its lookup at `pc`,
    /// whose counted add is at `add_pc` (see the module's comment).
    pub(super) fn deferrable(&self, pc: usize, add_pc: usize) -> bool {
        let Context::Access { size_reg, .. } = &self.options.context else { return false };
        if self.function != 0 || self.program.functions().len() != 1 || self.options.defer.is_none()
        {
            return false;
        }
        let size = std::mem::offset_of!(MemAccessCtx, size) as i64;
        let decoded = self.program.decoded();
        let reads_size = |d: &egpu_ebpf::Decoded| {
            let a = self.verified.access(d.pc);
            a.is_some_and(|a| {
                a.region == AccessRegion::Context
                    && a.offset.is_none_or(|o| o < size + 4 && o + 8 > size)
            })
        };
        // A loop could reach the lookup twice in one run of the probe.
        let backward = decoded.iter().any(|d| match d.insn {
            Instruction::Jump { off, .. } => off < 0,
            Instruction::Branch { off, .. } => off < 0,
            _ => false,
        });
        if backward || (size_reg.is_some() && decoded.iter().any(reads_size)) {
            return false;
        }
        let region = |pc: usize| self.verified.access(pc).map(|a| a.region);
        let before = decoded.iter().take_while(|d| d.pc < pc).all(|d| match d.insn {
            Instruction::Alu { .. }
            | Instruction::Neg { .. }
            | Instruction::Endian { .. }
            | Instruction::LoadImm64 { .. }
            | Instruction::Jump { .. }
            | Instruction::Branch { .. } => true,
            Instruction::Load { .. } => {
                matches!(region(d.pc), None | Some(AccessRegion::OwnStack | AccessRegion::Context))
            }
            Instruction::Store { .. } => {
                matches!(region(d.pc), None | Some(AccessRegion::OwnStack))
            }
            _ => false,
        });
        if !before {
            return false;
        }
        // After the add: ALU, jumps forward, and the exit.
        let mut at = match decoded.iter().position(|d| d.pc == add_pc) {
            Some(i) => i + 1,
            None => return false,
        };
        while let Some(d) = decoded.get(at) {
            match d.insn {
                Instruction::Alu { .. } | Instruction::Neg { .. } | Instruction::Endian { .. } => {
                    at += 1
                }
                Instruction::Jump { off, .. } => {
                    let target = (d.pc as i64 + 1 + i64::from(off)) as usize;
                    match decoded.iter().position(|d| d.pc == target) {
                        Some(i) => at = i,
                        None => return false,
                    }
                }
                Instruction::Exit => return true,
                _ => return false,
            }
        }
        false
    }
}

impl Emitter<'_> {
    /// The instructions no path reaches once the lookup at `pc` goes on past its counted add at
    /// `add_pc` (the null test, the add, and the insert's path, which only the stub runs): left
    /// out of the translation.
    pub(super) fn deferred_away(&self, pc: usize, add_pc: usize) -> BTreeSet<usize> {
        let decoded = self.program.decoded();
        let next = |i: usize| decoded.get(i + 1).map(|d| d.pc);
        let index = |pc: usize| decoded.iter().position(|d| d.pc == pc);
        let mut reached = BTreeSet::new();
        let mut todo = vec![decoded.first().map_or(0, |d| d.pc)];
        while let Some(at) = todo.pop() {
            let Some(i) = index(at) else { continue };
            if !reached.insert(at) {
                continue;
            }
            let d = decoded[i];
            let target = |off: i64| (d.pc as i64 + 1 + off) as usize;
            match d.insn {
                _ if d.pc == pc => todo.extend(index(add_pc).and_then(next)),
                Instruction::Exit => {}
                Instruction::Jump { off, .. } => todo.push(target(i64::from(off))),
                Instruction::Branch { off, .. } => {
                    todo.push(target(i64::from(off)));
                    todo.extend(next(i));
                }
                _ => todo.extend(next(i)),
            }
        }
        decoded.iter().map(|d| d.pc).filter(|at| *at > pc && !reached.contains(at)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Defer;
    use crate::translate::hash::tests::{PAGES, translated_with};

    fn defer() -> Option<Defer> {
        Some(Defer { slot: "%ds+8".into(), mask: "%dm".into(), bit: 1 })
    }

    /// The shortcut of a lookup whose lanes all hit (`hash.rs`).
    const SHORTCUT: &str = "vote.sync.all.pred %t_q2, %t_q0, %t_w0;";

    /// A count by page whose page is in neither cached entry keeps the access's address in its
    /// slot and sets its bit, then goes on past the add: no vote, no search, no insert at the
    /// access (the run's stub runs the probe again for them).
    #[test]
    fn a_miss_is_kept_and_the_access_goes_on() {
        let t = translated_with(&PAGES.replace('N', "1"), defer());
        assert!(t.deferred, "{}", t.body);
        let kept =
            "@!%t_q0 st.local.u64 [%ds+8], %addr;\n\t@!%t_q0 or.b64 %dm, %dm, 2;\n\tbra $t_C";
        assert!(t.body.contains(kept), "{}", t.body);
        let at = t.body.find(kept).expect("kept");
        assert!(!t.body[..at].contains("bra"), "a branch before the miss is kept:\n{}", t.body);
        assert_eq!(t.body.matches(SHORTCUT).count(), 0, "{}", t.body);
        assert!(!t.body.contains("atom.global") && !t.body.contains("ld.global"), "{}", t.body);
        // Without a place for it, the lookup searches as before.
        let t = translated_with(&PAGES.replace('N', "1"), None);
        assert!(!t.deferred && !t.body.contains("st.local.u64 [%ds"), "{}", t.body);
        assert_eq!(t.body.matches(SHORTCUT).count(), 2, "{}", t.body);
    }

    /// A probe that could not run again later with the same outcome searches where it is: a
    /// helper before the lookup (the clock), a store to a map value after the add.
    #[test]
    fn a_probe_with_effects_is_not_deferred() {
        let pages = PAGES.replace('N', "1");
        let clock = pages.replacen("mov %r9, %r1\n", "mov %r9, %r1\ncall 5\n", 1);
        let after = pages.replacen(
            "lock add [%r0], %r1\nja out",
            "lock add [%r0], %r1\nstxdw [%r0+0], %r1\nja out",
            1,
        );
        for (what, text) in [("a helper before", clock), ("a store after", after)] {
            assert!(text != pages, "{what}");
            let t = translated_with(&text, defer());
            assert!(!t.deferred, "{what}:\n{}", t.body);
            assert!(!t.body.contains("st.local.u64 [%ds"), "{what}:\n{}", t.body);
        }
    }
}
