//! The verifier: one safety check for every program, before any engine runs it.
//!
//! rbpf's JIT checks no memory access and the GPU has no memory protection at all, so egpu runs
//! only programs [`verify`] accepts. It proves, for the attach point and maps the [`Program`]
//! declares, that every run:
//!
//! - reads only registers and stack bytes it wrote before;
//! - touches memory only inside its stack frames, the context (read-only for CUDA events) and map
//!   values it looked up and checked for null, never through a number;
//! - calls only helpers of the table, with arguments of the kinds each declares;
//! - never lets an address escape: no pointer is returned, stored outside the stack, compared
//!   with a number, or turned into one;
//! - ends: every path reaches `exit` within the verifier's budget.
//!
//! # How
//!
//! As Linux does, by abstract interpretation of every path, depth first. The state of a path maps
//! each register and stack slot to what it may hold: uninitialised, a number (an unsigned and a
//! signed interval and known bits), a pointer (to the context, a stack frame or a map value, at an
//! offset that is itself such a number), a map reference, or a lookup's result not yet checked
//! for null. Branches on numbers narrow them on each side and drop the side that cannot happen,
//! which is how a bounded loop is followed to its end, iteration by iteration.
//!
//! Paths are cut where they join: at every jump target, the state is compared with states
//! already seen there. When one whose every continuation was verified holds the new one, the new
//! path is safe and stops. When the new state equals one still being explored on the same path,
//! the program loops forever. After [`JOIN_AFTER`] different states at one instruction, the next
//! is widened to hold the earlier ones that agree with it on every constant number, which keeps
//! chains of branches from doubling the work without forgetting a loop's counter.
//! Registers that are dead at a join are forgotten first (by a liveness pass), so they do not
//! keep states apart. Programs whose exploration takes more than [`INSN_BUDGET`] steps are
//! refused.
//!
//! ```
//! use egpu_ebpf::verifier::{Violation, verify};
//! use egpu_ebpf::{AttachPoint, Program, assemble};
//!
//! let program = |text| Program::new(assemble(text).unwrap(), vec![], AttachPoint::User { ctx_size: 8 });
//! assert!(verify(&program("ldxw %r0, [%r1+4]\nexit")?).is_ok());
//!
//! let error = verify(&program("ldxw %r0, [%r1+6]\nexit")?).unwrap_err();
//! assert_eq!(error.violation, Violation::ContextBounds);
//! assert_eq!(error.pc, 0);
//! # Ok::<(), egpu_ebpf::ProgramError>(())
//! ```

mod error;
mod expand;
mod explore;
mod facts;
mod liveness;
mod scalar;
mod state;
mod transfer;

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Program;
use explore::Explorer;

pub use error::{VerifyError, Violation};
pub use facts::{Access, AccessRegion, CallFacts, Verified};

/// Most instructions the verifier follows, over all paths, before it gives up (as in Linux).
pub const INSN_BUDGET: usize = 1_000_000;

/// Different states kept at one instruction before new ones are widened to hold them.
pub const JOIN_AFTER: usize = 8;

/// Calls of [`verify`] so far in this process.
static RUNS: AtomicU64 = AtomicU64::new(0);

/// How many times [`verify`] has run in this process; tests use it to check that a program is
/// verified once.
pub fn runs() -> u64 {
    RUNS.load(Ordering::Relaxed)
}

/// Verifies `program` against its attach point's context and its map table.
pub fn verify(program: &Program) -> Result<Verified, VerifyError> {
    RUNS.fetch_add(1, Ordering::Relaxed);
    let mut explorer = Explorer::new(program);
    explorer.run()?;
    explorer.check_stack_chains()?;
    let sites: Vec<(usize, usize)> = explorer
        .loop_callbacks
        .iter()
        .enumerate()
        .filter_map(|(pc, cb)| cb.map(|cb| (pc, cb)))
        .collect();
    let mut verified = Verified {
        program: program.clone(),
        context_bytes: explorer.context_bytes,
        stack_bytes: explorer.stack_bytes,
        insns_processed: explorer.processed,
        accesses: explorer.accesses,
        callx: explorer.callx,
        calls: explorer.calls,
        reached: explorer.reached,
        runnable: None,
    };
    match expand::expand(&verified, &sites) {
        Ok(runnable) => verified.runnable = runnable.map(Box::new),
        Err(e) => {
            let pc = sites.first().map_or(0, |s| s.0);
            return Err(VerifyError {
                pc,
                insn: program
                    .decoded()
                    .iter()
                    .find(|d| d.pc == pc)
                    .map_or_else(String::new, |d| d.insn.to_string()),
                violation: Violation::TooComplex,
                detail: format!("the program with its bpf_loop calls made loops is not valid: {e}"),
                registers: Vec::new(),
            });
        }
    }
    Ok(verified)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttachPoint, assemble};

    #[test]
    fn runs_counts_every_verification() {
        let program = |text| {
            Program::new(assemble(text).unwrap(), vec![], AttachPoint::User { ctx_size: 8 })
                .unwrap()
        };
        let (good, bad) = (program("mov %r0, 0\nexit"), program("exit"));
        let before = runs();
        assert!(verify(&good).is_ok());
        // Other tests may verify programs at the same time, so the count only has a floor.
        assert!(runs() > before);
        let before = runs();
        assert_eq!(verify(&bad).unwrap_err().violation, Violation::UninitRegister);
        assert!(runs() > before, "a refused program counts too");
    }
}
