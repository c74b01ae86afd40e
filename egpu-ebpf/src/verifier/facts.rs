//! What the verifier learned about an accepted program: the [`Verified`] program, and the
//! [`Access`] and [`CallFacts`] that engines read from it to choose how to run each instruction.

use crate::Program;

/// A program the verifier accepted, with what it learned about it.
#[derive(Clone, Debug)]
pub struct Verified {
    pub(super) program: Program,
    pub(super) context_bytes: usize,
    pub(super) stack_bytes: Vec<u32>,
    pub(super) insns_processed: usize,
    pub(super) accesses: Vec<Option<Access>>,
    pub(super) callx: Vec<Option<u32>>,
    pub(super) calls: Vec<Option<CallFacts>>,
    /// Per slot: whether some path reaches the instruction that starts there.
    pub(super) reached: Vec<bool>,
    /// What engines run, when it differs from the program: see [`Verified::runnable`].
    pub(super) runnable: Option<Box<Verified>>,
}

/// What the verifier learned about a helper call, over every path that reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallFacts {
    /// The map passed (the index in the program's map table), when it is the same on every
    /// path; `None` for helpers without a map and when paths pass different maps.
    pub map: Option<u32>,
    /// For each argument register `r1`–`r5` that points at memory the helper reads: where.
    pub args: [Option<Access>; 5],
    /// The largest size passed with a memory argument (`bpf_ringbuf_output`'s `r3`), over every
    /// path.
    pub max_size: Option<u64>,
    /// The smallest such size, over every path.
    pub min_size: Option<u64>,
}

/// Marks a `callx` whose helper number differs between paths.
pub(super) const CALLX_VARIES: u32 = u32::MAX;

/// The memory a load, store or atomic reaches, over every path the verifier followed to it.
///
/// Engines use it to choose how to address memory: the GPU translation turns a context load at
/// a constant offset into the register that holds the field, and a stack access at a constant
/// offset of the function's own frame into a direct local access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    /// The region reached.
    pub region: AccessRegion,
    /// The offset from the region's start (for the stack, from the frame's `r10`, so negative),
    /// when it is the same constant on every path.
    pub offset: Option<i64>,
    /// Whether the access is naturally aligned on every path (relative to the region's start,
    /// which is 8-byte aligned in every engine).
    pub aligned: bool,
}

/// The region an [`Access`] reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessRegion {
    /// The context.
    Context,
    /// The stack frame of the function the instruction is in.
    OwnStack,
    /// The stack frame of a caller, through a pointer passed down.
    CallerStack,
    /// A value of this map (its index in the program's map table).
    MapValue(u32),
    /// Different regions on different paths.
    Mixed,
}

impl Access {
    pub(super) fn join(self, other: Access) -> Access {
        Access {
            region: if self.region == other.region { self.region } else { AccessRegion::Mixed },
            offset: if self.offset == other.offset { self.offset } else { None },
            aligned: self.aligned && other.aligned,
        }
    }
}

impl Verified {
    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// What engines run: this program, or, when it calls `bpf_loop`, the program with each
    /// such call made a local call of a loop function egpu appends (shown in
    /// `egpu-ebpf/src/verifier/expand.rs`), with the same facts at the same slots. Its program is not the one verified, and
    /// would not pass the verifier (its loops are bounded by a number the verifier does not
    /// know): engines run it, packs and listings keep [`Verified::program`].
    pub fn runnable(&self) -> &Verified {
        self.runnable.as_deref().unwrap_or(self)
    }

    /// Bytes at the start of the context that the program may access.
    pub fn context_bytes(&self) -> usize {
        self.context_bytes
    }

    /// Stack bytes each function (in [`Program::functions`] order) may use below its `r10`.
    pub fn stack_bytes(&self) -> &[u32] {
        &self.stack_bytes
    }

    /// Instructions the verifier followed, over all paths.
    pub fn insns_processed(&self) -> usize {
        self.insns_processed
    }

    /// Whether some path reaches the instruction at slot `pc`: one no path reaches is never
    /// run, and the verifier learned nothing about it (engines may leave it out).
    pub fn reached(&self, pc: usize) -> bool {
        self.reached.get(pc).copied().unwrap_or(false)
    }

    /// What the load, store or atomic at slot `pc` reaches; `None` for other instructions and
    /// for instructions no path reaches.
    pub fn access(&self, pc: usize) -> Option<Access> {
        self.accesses.get(pc).copied().flatten()
    }

    /// What the helper call at slot `pc` is passed; `None` for other instructions and for
    /// instructions no path reaches.
    pub fn call(&self, pc: usize) -> Option<&CallFacts> {
        self.calls.get(pc).and_then(Option::as_ref)
    }

    /// The helper that the `callx` at slot `pc` calls, when it is the same on every path.
    pub fn callx_helper(&self, pc: usize) -> Option<u32> {
        self.callx.get(pc).copied().flatten().filter(|&id| id != CALLX_VARIES)
    }

    /// Whether the program calls helper `id`, by `call` or by a `callx` that reaches it.
    pub fn calls_helper(&self, id: u32) -> bool {
        use crate::{CallTarget, Instruction};
        self.program().decoded().iter().any(|d| match d.insn {
            Instruction::Call(CallTarget::Helper(h)) => h == id,
            Instruction::Call(CallTarget::Reg(_)) => self
                .callx
                .get(d.pc)
                .copied()
                .flatten()
                .is_some_and(|h| h == id || h == CALLX_VARIES),
            _ => false,
        })
    }
}
