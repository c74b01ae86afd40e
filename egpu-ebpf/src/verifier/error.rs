//! Why a program is refused: the [`Violation`] codes, the [`VerifyError`] a refusal reports,
//! and the words it describes abstract values with.

use std::fmt;

use super::explore::Explorer;
use super::liveness::reads;
use super::scalar::Scalar;
use super::state::{Region, State, Value};
use crate::Reg;

/// Why a program is refused. Each has a stable short [`code`](Violation::code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Violation {
    /// Reads a register that holds nothing yet.
    UninitRegister,
    /// Reads stack bytes that were never written.
    UninitStack,
    /// Accesses the stack outside its 512-byte frame.
    StackBounds,
    /// Writes to a read-only context.
    ContextWrite,
    /// Accesses the context outside its size.
    ContextBounds,
    /// Accesses a device context at an offset that is not a constant.
    ContextOffset,
    /// Uses a lookup's result before checking it for null.
    MaybeNull,
    /// Accesses a map value outside its size.
    MapValueBounds,
    /// Moves a pointer by a number without known bounds.
    UnboundedOffset,
    /// Loads or stores through something that is not a pointer.
    NotAPointer,
    /// Calls a helper with an argument of the wrong kind.
    HelperArg,
    /// Calls a helper that does not exist.
    UnknownHelper,
    /// Lets an address escape: returned, stored outside the stack, compared with a number.
    PointerLeak,
    /// Arithmetic on a pointer other than adding or subtracting a number.
    PointerArithmetic,
    /// A loop that comes back to the same state: it never ends.
    InfiniteLoop,
    /// The paths could not all be followed to their end within
    /// [`INSN_BUDGET`](super::INSN_BUDGET) steps.
    TooComplex,
    /// The frames of a chain of local calls use more than 512 bytes of stack together.
    StackLimit,
    /// A misaligned access where alignment is required (atomics; every access on the GPU).
    Misaligned,
    /// A `bpf_loop` callback returns something other than 0 (go on) or 1 (stop).
    CallbackReturn,
    /// Asks `egpu_delay_ns` to wait for a number not known to be at most
    /// [`MAX_DELAY_NS`](crate::helpers::MAX_DELAY_NS).
    UnboundedDelay,
}

impl Violation {
    /// A short stable name, e.g. `uninit-register`.
    pub const fn code(self) -> &'static str {
        match self {
            Violation::UninitRegister => "uninit-register",
            Violation::UninitStack => "uninit-stack",
            Violation::StackBounds => "stack-bounds",
            Violation::ContextWrite => "context-write",
            Violation::ContextBounds => "context-bounds",
            Violation::ContextOffset => "context-offset",
            Violation::MaybeNull => "maybe-null",
            Violation::MapValueBounds => "map-value-bounds",
            Violation::UnboundedOffset => "unbounded-offset",
            Violation::NotAPointer => "not-a-pointer",
            Violation::HelperArg => "helper-arg",
            Violation::UnknownHelper => "unknown-helper",
            Violation::PointerLeak => "pointer-leak",
            Violation::PointerArithmetic => "pointer-arithmetic",
            Violation::InfiniteLoop => "infinite-loop",
            Violation::TooComplex => "too-complex",
            Violation::StackLimit => "stack-limit",
            Violation::Misaligned => "misaligned",
            Violation::CallbackReturn => "callback-return",
            Violation::UnboundedDelay => "unbounded-delay",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A refused program: the instruction, why, and the registers it involves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// The instruction (slot index).
    pub pc: usize,
    /// Its disassembly.
    pub insn: String,
    /// The rule it breaks.
    pub violation: Violation,
    /// What happened, in words.
    pub detail: String,
    /// The registers the instruction reads, as `r2 = scalar u[0x0, 0xff]`, on the failing path.
    pub registers: Vec<String>,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "instruction {} `{}`: {} [{}]", self.pc, self.insn, self.detail, self.violation)?;
        for r in &self.registers {
            write!(f, "\n    {r}")?;
        }
        Ok(())
    }
}

impl std::error::Error for VerifyError {}

/// A rule broken at the current instruction, before the registers are attached.
pub(super) struct Fail(pub(super) Violation, pub(super) String);

pub(super) fn fail<T>(violation: Violation, detail: impl Into<String>) -> Result<T, Fail> {
    Err(Fail(violation, detail.into()))
}

impl Explorer<'_> {
    pub(super) fn error(
        &self,
        pc: usize,
        state: &State,
        violation: Violation,
        detail: impl Into<String>,
    ) -> VerifyError {
        let insn = self.insns[pc].expect("errors are at instruction starts");
        let registers = Reg::all()
            .filter(|r| reads(&insn) & (1 << r.index()) != 0)
            .map(|r| format!("{r} = {}", self.describe(state.regs[usize::from(r.index())])))
            .collect();
        VerifyError { pc, insn: insn.to_string(), violation, detail: detail.into(), registers }
    }

    fn map_name(&self, map: u32) -> &str {
        &self.program.maps()[map as usize].name
    }

    pub(super) fn describe(&self, v: Value) -> String {
        let off = |o: Scalar| match o.as_constant() {
            Some(c) => format!("{:+}", c as i64),
            None => format!(" + [{}, {}]", o.smin, o.smax),
        };
        match v {
            Value::Uninit => "uninitialised".into(),
            Value::Scalar(s) => s.to_string(),
            Value::Pointer { region: Region::Context, off: o } => format!("context{}", off(o)),
            Value::Pointer { region: Region::Stack(d), off: o } => {
                format!("stack of frame {d}, r10{}", off(o))
            }
            Value::Pointer { region: Region::MapValue(m), off: o } => {
                format!("value of map `{}`{}", self.map_name(m), off(o))
            }
            Value::MapRef(m) => format!("map `{}`", self.map_name(m)),
            Value::FuncRef(f) => {
                format!("function at {}", self.program.functions()[f as usize].start)
            }
            Value::MaybeNull { map, .. } => {
                format!("value of map `{}` or null (not checked yet)", self.map_name(map))
            }
        }
    }
}
