//! Where a probe's instructions come from in its Rust source: the [`SourceMap`] the code
//! generator makes from the IR's [`Stmt::At`](crate::ir::Stmt::At) marks, and the [`Refusal`]
//! it turns a verifier's error into, which names the Rust line instead of an eBPF instruction.

use std::fmt;

use egpu_ebpf::verifier::{VerifyError, Violation};

use crate::ir::SourceLoc;

/// No location: the IR had no [`Stmt::At`](crate::ir::Stmt::At) there.
const NONE: u32 = u32::MAX;

/// For each instruction slot of a compiled probe, the statement of the Rust source that emitted
/// it and the innermost loop around it. Made once, with the program, by
/// [`compile_mapped`](crate::compile_mapped); two `u32`s per slot, and each location once.
///
/// Instructions that no statement emits (the prologue, the final `exit`) belong to the probe's
/// first location, which `#[egpu::probe]` makes the function's. A probe built from IR without
/// [`Stmt::At`](crate::ir::Stmt::At) marks has no locations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceMap {
    /// The locations of the marks, in the order the code generator met them.
    locs: Vec<SourceLoc>,
    /// For each slot, the index in `locs` of its statement and of its innermost loop.
    slots: Vec<(u32, u32)>,
}

impl SourceMap {
    /// A map of `locs`, with `slots` giving each slot's statement and loop (indices in `locs`,
    /// `u32::MAX` for none); a slot without a statement gets the first location.
    pub(crate) fn new(locs: Vec<SourceLoc>, mut slots: Vec<(u32, u32)>) -> SourceMap {
        if !locs.is_empty() {
            for (statement, _) in &mut slots {
                if *statement == NONE {
                    *statement = 0;
                }
            }
        }
        SourceMap { locs, slots }
    }

    fn loc(&self, index: u32) -> Option<SourceLoc> {
        self.locs.get(index as usize).copied()
    }

    /// How many instruction slots the map covers: the program's length.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the map covers no instruction.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The statement that emitted the instruction at slot `pc`.
    pub fn statement(&self, pc: usize) -> Option<SourceLoc> {
        self.slots.get(pc).and_then(|&(s, _)| self.loc(s))
    }

    /// The innermost loop around the instruction at slot `pc` (the loop statement's location).
    pub fn enclosing_loop(&self, pc: usize) -> Option<SourceLoc> {
        self.slots.get(pc).and_then(|&(_, l)| self.loc(l))
    }

    /// The loops of the probe, each once, in the order of their code.
    pub fn loops(&self) -> Vec<SourceLoc> {
        let mut seen = Vec::new();
        for &(_, l) in &self.slots {
            if l != NONE && !seen.contains(&l) {
                seen.push(l);
            }
        }
        seen.into_iter().filter_map(|l| self.loc(l)).collect()
    }

    /// The loop a loop-related refusal at `pc` is about: the innermost loop around it, or else
    /// the last loop whose code comes before it (whose paths reach it).
    fn loop_for(&self, pc: usize) -> Option<SourceLoc> {
        let end = (pc + 1).min(self.slots.len());
        self.slots[..end].iter().rev().find(|&&(_, l)| l != NONE).and_then(|&(_, l)| self.loc(l))
    }
}

/// The verifier refused the program compiled from a probe: its error, and where in the Rust
/// source it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The probe's name.
    pub probe: String,
    /// The verifier's error, about an eBPF instruction.
    pub error: VerifyError,
    /// The statement that emitted that instruction.
    pub statement: Option<SourceLoc>,
    /// For a refusal about loops (`too-complex`, `infinite-loop`), the loop responsible: the
    /// innermost loop around the instruction, or the last loop before it.
    pub in_loop: Option<SourceLoc>,
}

impl Refusal {
    /// `error`, about the program `map` was made with, located in the probe `probe`'s source.
    pub fn new(probe: &str, error: VerifyError, map: &SourceMap) -> Refusal {
        let loops = matches!(error.violation, Violation::TooComplex | Violation::InfiniteLoop);
        Refusal {
            probe: probe.to_owned(),
            statement: map.statement(error.pc),
            in_loop: if loops { map.loop_for(error.pc) } else { None },
            error,
        }
    }

    /// What the user can change, in words.
    fn help(&self) -> &'static str {
        match self.error.violation {
            Violation::TooComplex if self.in_loop.is_some() => {
                "the verifier follows every iteration of a plain loop one by one (a loop whose \
                 body branches is a `bpf_loop` callback instead, checked in a few rounds, unless \
                 it uses a map value found before it or is the fourth nested one): lower the \
                 loop's bound (`#[bound(N)]` or the range)"
            }
            Violation::TooComplex => {
                "the verifier follows both sides of every branch: merge conditions, or compute \
                 values with arithmetic instead of `if`"
            }
            Violation::InfiniteLoop => {
                "an iteration of the loop comes back to the state it started from: make each \
                 iteration change what its condition reads"
            }
            _ => {
                "Probe Rust should not generate a program the verifier refuses for this: please \
                 report it with the probe"
            }
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (e, code) = (&self.error, self.error.violation.code());
        write!(f, "the verifier refused probe `{}`", self.probe)?;
        match (self.in_loop, self.statement) {
            (Some(l), _) => write!(f, " because of the loop at {l} [{code}]: {}", self.help())?,
            (None, Some(s)) => write!(f, " at {s} [{code}]: {}", self.help())?,
            (None, None) => write!(f, " [{code}]: {}", self.help())?,
        }
        write!(f, "\n    instruction {} `{}`", e.pc, e.insn)?;
        if let Some(s) = self.statement {
            write!(f, " (from {s})")?;
        }
        write!(f, ": {}", e.detail)?;
        for r in &e.registers {
            write!(f, "\n        {r}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Refusal {}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(line: u32) -> SourceLoc {
        SourceLoc { file: "p.rs", line, column: 5 }
    }

    fn refused(violation: Violation, pc: usize) -> VerifyError {
        VerifyError {
            pc,
            insn: "add %r6, 1".into(),
            violation,
            detail: "what the verifier says".into(),
            registers: vec!["%r6 = scalar 3".into()],
        }
    }

    #[test]
    fn slots_without_a_statement_belong_to_the_first_location() {
        let map = SourceMap::new(vec![loc(1), loc(2)], vec![(NONE, NONE), (1, 1), (NONE, NONE)]);
        assert_eq!(map.statement(0), Some(loc(1)));
        assert_eq!(map.statement(1), Some(loc(2)));
        assert_eq!(map.statement(2), Some(loc(1)));
        assert_eq!(map.enclosing_loop(0), None);
        assert_eq!(map.enclosing_loop(1), Some(loc(2)));
        assert_eq!(map.statement(3), None, "past the end");
        assert_eq!(map.loops(), vec![loc(2)]);
        assert!(SourceMap::new(vec![], vec![(NONE, NONE)]).statement(0).is_none());
    }

    #[test]
    fn a_loop_refusal_names_the_loop_and_another_the_statement() {
        let map = SourceMap::new(vec![loc(1), loc(3), loc(4)], vec![(0, NONE), (2, 1), (0, NONE)]);
        let r = Refusal::new("p", refused(Violation::TooComplex, 1), &map);
        let text = r.to_string();
        assert!(text.contains("because of the loop at p.rs:3:5 [too-complex]"), "{text}");
        assert!(text.contains("lower the loop's bound"), "{text}");
        assert!(text.contains("instruction 1 `add %r6, 1` (from p.rs:4:5)"), "{text}");
        assert!(text.contains("%r6 = scalar 3"), "{text}");
        // After the loop, the loop is still the one to change.
        let after = Refusal::new("p", refused(Violation::TooComplex, 2), &map);
        assert_eq!(after.in_loop, Some(loc(3)));
        let other = Refusal::new("p", refused(Violation::MaybeNull, 1), &map);
        assert_eq!(other.in_loop, None);
        assert!(other.to_string().contains("at p.rs:4:5 [maybe-null]"), "{other}");
        // A pc past the program's end (never given by the verifier) is not a panic.
        let past = Refusal::new("p", refused(Violation::TooComplex, 99), &map);
        assert_eq!(past.statement, None);
    }
}
