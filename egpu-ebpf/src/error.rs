//! Errors of the eBPF core. Every error names the slot (program counter) it is about.

use thiserror::Error;

/// A slot that is not a valid eBPF instruction.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The byte length is not a multiple of 8.
    #[error("program of {len} bytes is not a whole number of 8-byte instructions")]
    TruncatedSlot {
        /// Length in bytes.
        len: usize,
    },
    /// The opcode byte names no instruction.
    #[error("instruction {pc}: unknown opcode {opcode:#04x}")]
    UnknownOpcode {
        /// Slot index.
        pc: usize,
        /// The opcode byte.
        opcode: u8,
    },
    /// A register field above 10.
    #[error("instruction {pc}: `{field}` register r{value} does not exist")]
    InvalidRegister {
        /// Slot index.
        pc: usize,
        /// `dst` or `src`.
        field: &'static str,
        /// The field's value.
        value: u8,
    },
    /// A field the instruction does not use is not zero (or has a value with no meaning).
    #[error("instruction {pc}: reserved field `{field}` is {value}, must be 0")]
    ReservedField {
        /// Slot index.
        pc: usize,
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// A byte-order instruction with a width other than 16, 32 or 64.
    #[error("instruction {pc}: byte swap width {imm} is not 16, 32 or 64")]
    InvalidEndianWidth {
        /// Slot index.
        pc: usize,
        /// The immediate.
        imm: i32,
    },
    /// An atomic instruction whose immediate names no operation.
    #[error("instruction {pc}: atomic operation {imm:#x} does not exist")]
    InvalidAtomicOp {
        /// Slot index.
        pc: usize,
        /// The immediate.
        imm: i32,
    },
    /// `lddw` in the last slot, or followed by a slot that is not its second half.
    #[error("instruction {pc}: `lddw` is missing its second half")]
    LddwMissingSecondHalf {
        /// Slot index of the `lddw`.
        pc: usize,
    },
    /// `lddw` with a source kind egpu does not load (only 0 and 5, map index, are).
    #[error("instruction {pc}: `lddw` with src={src} is not supported (0: value, 5: map index)")]
    UnsupportedLddwSource {
        /// Slot index.
        pc: usize,
        /// The source field.
        src: u8,
    },
    /// A valid eBPF instruction that egpu does not support.
    #[error("instruction {pc}: {what} are not supported")]
    Unsupported {
        /// Slot index.
        pc: usize,
        /// What is not supported.
        what: &'static str,
    },
}

/// A program that decodes but is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProgramError {
    /// A program with no instructions.
    #[error("program is empty")]
    Empty,
    /// More slots than [`Program::MAX_INSNS`](crate::Program::MAX_INSNS).
    #[error("program has {len} instructions, more than the limit of {max}")]
    TooLarge {
        /// Number of slots.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An instruction that does not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A jump whose target is outside the program.
    #[error("instruction {pc}: jump target {target} is outside the program (0..{len})")]
    JumpOutOfRange {
        /// Slot index of the jump.
        pc: usize,
        /// The target.
        target: i64,
        /// Program length in slots.
        len: usize,
    },
    /// A jump or call into the second slot of `lddw`.
    #[error("instruction {pc}: jump target {target} is the middle of an `lddw`")]
    JumpIntoLddw {
        /// Slot index of the jump.
        pc: usize,
        /// The target.
        target: usize,
    },
    /// A jump from one function into another.
    #[error("instruction {pc}: jump to {target} leaves the function starting at {function}")]
    JumpAcrossFunctions {
        /// Slot index of the jump.
        pc: usize,
        /// The target.
        target: usize,
        /// Start of the function holding the jump.
        function: usize,
    },
    /// A local call or function reference whose target is outside the program or not an
    /// instruction start.
    #[error("instruction {pc}: local call target {target} is not an instruction of the program")]
    CallOutOfRange {
        /// Slot index of the call.
        pc: usize,
        /// The target.
        target: i64,
    },
    /// The last instruction of a function lets control run past its end.
    #[error(
        "instruction {pc}: the function starting at {function} can run past its end \
         (its last instruction must be `exit` or `ja`)"
    )]
    FallsOffEnd {
        /// Slot index of the function's last instruction.
        pc: usize,
        /// Start of the function.
        function: usize,
    },
    /// An instruction that writes the read-only frame pointer.
    #[error("instruction {pc}: writes r10, the read-only frame pointer")]
    WritesFramePointer {
        /// Slot index.
        pc: usize,
    },
    /// A local function that calls itself, directly or through others.
    #[error("instruction {pc}: recursive call to the function starting at {function}")]
    Recursion {
        /// Slot index of the call closing the cycle.
        pc: usize,
        /// The function called recursively.
        function: usize,
    },
    /// Local calls nested deeper than [`Program::MAX_CALL_DEPTH`](crate::Program::MAX_CALL_DEPTH).
    #[error("instruction {pc}: call nesting reaches {depth} frames, more than the limit of {max}")]
    CallTooDeep {
        /// Slot index of the call that goes too deep.
        pc: usize,
        /// Frames on that path, the main function included.
        depth: usize,
        /// The limit.
        max: usize,
    },
    /// `lddw map[n]` with `n` beyond the program's map table.
    #[error("instruction {pc}: map index {index} is not in the program's map table of {len} maps")]
    UnknownMap {
        /// Slot index.
        pc: usize,
        /// The index.
        index: u32,
        /// Size of the map table.
        len: usize,
    },
}

/// A syntax error in eBPF assembly text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line} (instruction {pc}): {message}")]
pub struct AsmError {
    /// 1-based line number in the source text.
    pub line: usize,
    /// Index of the instruction the line would have become.
    pub pc: usize,
    /// What is wrong.
    pub message: String,
}

impl DecodeError {
    /// The instruction (slot index) the error is about; `None` for a byte length that is not a
    /// whole number of slots.
    pub fn pc(&self) -> Option<usize> {
        match *self {
            DecodeError::TruncatedSlot { .. } => None,
            DecodeError::UnknownOpcode { pc, .. }
            | DecodeError::InvalidRegister { pc, .. }
            | DecodeError::ReservedField { pc, .. }
            | DecodeError::InvalidEndianWidth { pc, .. }
            | DecodeError::InvalidAtomicOp { pc, .. }
            | DecodeError::LddwMissingSecondHalf { pc }
            | DecodeError::UnsupportedLddwSource { pc, .. }
            | DecodeError::Unsupported { pc, .. } => Some(pc),
        }
    }
}

impl ProgramError {
    /// The instruction (slot index) the error is about, when it is about one.
    pub fn pc(&self) -> Option<usize> {
        match self {
            ProgramError::Empty | ProgramError::TooLarge { .. } => None,
            ProgramError::Decode(e) => e.pc(),
            ProgramError::JumpOutOfRange { pc, .. }
            | ProgramError::JumpIntoLddw { pc, .. }
            | ProgramError::JumpAcrossFunctions { pc, .. }
            | ProgramError::CallOutOfRange { pc, .. }
            | ProgramError::FallsOffEnd { pc, .. }
            | ProgramError::WritesFramePointer { pc }
            | ProgramError::Recursion { pc, .. }
            | ProgramError::CallTooDeep { pc, .. }
            | ProgramError::UnknownMap { pc, .. } => Some(*pc),
        }
    }
}

impl ProgramError {
    /// A short stable name, e.g. `falls-off-end`, in the style of
    /// [`Violation::code`](crate::verifier::Violation::code).
    pub const fn code(&self) -> &'static str {
        match self {
            ProgramError::Empty => "empty",
            ProgramError::TooLarge { .. } => "too-large",
            ProgramError::Decode(_) => "decode",
            ProgramError::JumpOutOfRange { .. } => "jump-out-of-range",
            ProgramError::JumpIntoLddw { .. } => "jump-into-lddw",
            ProgramError::JumpAcrossFunctions { .. } => "jump-across-functions",
            ProgramError::CallOutOfRange { .. } => "call-out-of-range",
            ProgramError::FallsOffEnd { .. } => "falls-off-end",
            ProgramError::WritesFramePointer { .. } => "writes-frame-pointer",
            ProgramError::Recursion { .. } => "recursion",
            ProgramError::CallTooDeep { .. } => "call-depth",
            ProgramError::UnknownMap { .. } => "unknown-map",
        }
    }
}
