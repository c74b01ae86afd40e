//! The typed form of eBPF instructions, and the decoder and encoder between it and slots.
//!
//! Every valid encoding decodes to exactly one [`Instruction`] and encodes back to the same
//! slots; encodings with reserved fields set, unknown opcodes or register numbers above 10 are
//! refused with a [`DecodeError`](crate::DecodeError) naming the slot. That makes bytes →
//! [`Instruction`] → bytes the identity on every program the decoder accepts, which the assembler
//! and disassembler rely on.
//!
//! [`AluOp::eval`] and [`JmpCond::holds`] give the operations their meaning as RFC 9669 defines
//! it: the reference model the verifier folds constants with and tests hold engines to.

mod decode;
mod encode;
mod semantics;

pub use decode::{decode, decode_one};
pub use encode::encode;

use crate::insn::Reg;

/// Operand width of ALU and jump instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Width {
    /// 32-bit: operands are the low halves, results are zero-extended (`ALU`, `JMP32`).
    W32,
    /// 64-bit (`ALU64`, `JMP`).
    W64,
}

/// Size of a memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Size {
    /// 1 byte.
    B,
    /// 2 bytes.
    H,
    /// 4 bytes.
    W,
    /// 8 bytes.
    DW,
}

impl Size {
    /// The access size in bytes.
    pub const fn bytes(self) -> u32 {
        match self {
            Size::B => 1,
            Size::H => 2,
            Size::W => 4,
            Size::DW => 8,
        }
    }

    /// The mnemonic suffix: `b`, `h`, `w` or `dw`.
    pub const fn suffix(self) -> &'static str {
        match self {
            Size::B => "b",
            Size::H => "h",
            Size::W => "w",
            Size::DW => "dw",
        }
    }
}

/// The second operand of ALU, jump and store instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// A register.
    Reg(Reg),
    /// The 32-bit immediate (sign-extended where the operation is 64-bit).
    Imm(i32),
}

/// A two-operand ALU operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AluOp {
    /// `dst += src`.
    Add,
    /// `dst -= src`.
    Sub,
    /// `dst *= src`.
    Mul,
    /// Unsigned division; `x / 0 = 0`.
    Div,
    /// Signed division (offset 1); `x / 0 = 0`, `MIN / -1 = MIN`.
    SDiv,
    /// `dst |= src`.
    Or,
    /// `dst &= src`.
    And,
    /// Left shift by `src` masked to the width.
    Lsh,
    /// Logical right shift.
    Rsh,
    /// Unsigned remainder; `x % 0 = x`.
    Mod,
    /// Signed remainder (offset 1), with the sign of the dividend; `x % 0 = x`.
    SMod,
    /// `dst ^= src`.
    Xor,
    /// `dst = src`.
    Mov,
    /// `dst = sign_extend(low bits of src)` (offset 8, 16 or 32; register source only).
    MovSx(u8),
    /// Arithmetic right shift.
    Arsh,
}

impl AluOp {
    /// Every operation but the sign-extending moves (which carry their source width).
    pub const PLAIN: [AluOp; 14] = [
        AluOp::Add,
        AluOp::Sub,
        AluOp::Mul,
        AluOp::Div,
        AluOp::SDiv,
        AluOp::Or,
        AluOp::And,
        AluOp::Lsh,
        AluOp::Rsh,
        AluOp::Mod,
        AluOp::SMod,
        AluOp::Xor,
        AluOp::Mov,
        AluOp::Arsh,
    ];

    /// The assembler mnemonic without width suffix (`movsx` carries its source bits).
    pub fn mnemonic(self) -> String {
        match self {
            AluOp::Add => "add".into(),
            AluOp::Sub => "sub".into(),
            AluOp::Mul => "mul".into(),
            AluOp::Div => "div".into(),
            AluOp::SDiv => "sdiv".into(),
            AluOp::Or => "or".into(),
            AluOp::And => "and".into(),
            AluOp::Lsh => "lsh".into(),
            AluOp::Rsh => "rsh".into(),
            AluOp::Mod => "mod".into(),
            AluOp::SMod => "smod".into(),
            AluOp::Xor => "xor".into(),
            AluOp::Mov => "mov".into(),
            AluOp::MovSx(bits) => format!("movsx{bits}"),
            AluOp::Arsh => "arsh".into(),
        }
    }
}

/// The condition of a conditional jump.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JmpCond {
    /// `==`.
    Eq,
    /// Unsigned `>`.
    Gt,
    /// Unsigned `>=`.
    Ge,
    /// `dst & src != 0`.
    Set,
    /// `!=`.
    Ne,
    /// Signed `>`.
    Sgt,
    /// Signed `>=`.
    Sge,
    /// Unsigned `<`.
    Lt,
    /// Unsigned `<=`.
    Le,
    /// Signed `<`.
    Slt,
    /// Signed `<=`.
    Sle,
}

impl JmpCond {
    /// All conditions.
    pub const ALL: [JmpCond; 11] = [
        JmpCond::Eq,
        JmpCond::Gt,
        JmpCond::Ge,
        JmpCond::Set,
        JmpCond::Ne,
        JmpCond::Sgt,
        JmpCond::Sge,
        JmpCond::Lt,
        JmpCond::Le,
        JmpCond::Slt,
        JmpCond::Sle,
    ];

    /// The assembler mnemonic without width suffix, e.g. `jsgt`.
    pub const fn mnemonic(self) -> &'static str {
        match self {
            JmpCond::Eq => "jeq",
            JmpCond::Gt => "jgt",
            JmpCond::Ge => "jge",
            JmpCond::Set => "jset",
            JmpCond::Ne => "jne",
            JmpCond::Sgt => "jsgt",
            JmpCond::Sge => "jsge",
            JmpCond::Lt => "jlt",
            JmpCond::Le => "jle",
            JmpCond::Slt => "jslt",
            JmpCond::Sle => "jsle",
        }
    }
}

/// Byte order conversion of an `END` instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// `le16`/`le32`/`le64`: to little endian (truncation only, on a little-endian machine).
    Le,
    /// `be16`/`be32`/`be64`: to big endian.
    Be,
    /// `bswap16`/`bswap32`/`bswap64`: unconditional byte swap (`ALU64` class).
    Swap,
}

/// The operation of an atomic instruction (`STX | ATOMIC`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// `*addr += src`.
    Add,
    /// `*addr |= src`.
    Or,
    /// `*addr &= src`.
    And,
    /// `*addr ^= src`.
    Xor,
    /// `src = xchg(*addr, src)` (always fetches).
    Xchg,
    /// `r0 = cmpxchg(*addr, r0, src)` (always fetches, into `r0`).
    CmpXchg,
}

impl AtomicOp {
    /// The assembler mnemonic without width suffix.
    pub const fn mnemonic(self) -> &'static str {
        match self {
            AtomicOp::Add => "add",
            AtomicOp::Or => "or",
            AtomicOp::And => "and",
            AtomicOp::Xor => "xor",
            AtomicOp::Xchg => "xchg",
            AtomicOp::CmpXchg => "cmpxchg",
        }
    }
}

/// What a call instruction calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallTarget {
    /// A helper by number (`call 5`), see [`crate::helpers`].
    Helper(u32),
    /// A local function at `pc + 1 + offset` (`call local`).
    Local(i32),
    /// A helper whose number is in a register (`callx`, `call %r2`).
    Reg(Reg),
}

/// The 64-bit immediate of `lddw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Imm64 {
    /// A plain value (`src = 0`).
    Value(u64),
    /// The address of map number `n` of the program's map table (`src = 5`).
    Map(u32),
    /// The address of byte `offset` of the value of map number `map`, an array of one entry
    /// (`src = 6`, Linux's `BPF_PSEUDO_MAP_IDX_VALUE`): global data (`.rodata`, `.data`,
    /// `.bss`), read and written in place, with no lookup.
    MapValue {
        /// The map's index in the program's map table.
        map: u32,
        /// The offset in its value.
        offset: u32,
    },
    /// A reference to the local function at `pc + 1 + offset` (`src = 4`, Linux's
    /// `BPF_PSEUDO_FUNC`), for a helper that calls back into the program (`bpf_loop`).
    Func(i32),
}

/// One decoded eBPF instruction.
///
/// Jump and call offsets are in slots, relative to the slot after the instruction, as encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Instruction {
    /// `dst = dst op src`.
    Alu {
        /// The operation.
        op: AluOp,
        /// 32 or 64 bits.
        width: Width,
        /// Destination and first operand.
        dst: Reg,
        /// Second operand.
        src: Operand,
    },
    /// `dst = -dst`.
    Neg {
        /// 32 or 64 bits.
        width: Width,
        /// The register negated.
        dst: Reg,
    },
    /// Byte order conversion of the low `bits` of `dst`, zero-extending the result.
    Endian {
        /// Conversion kind.
        order: ByteOrder,
        /// 16, 32 or 64.
        bits: u8,
        /// The register converted.
        dst: Reg,
    },
    /// `lddw dst, imm` (two slots).
    LoadImm64 {
        /// Destination.
        dst: Reg,
        /// The value or map reference.
        imm: Imm64,
    },
    /// `dst = *(size *)(base + off)`, sign-extended when `signed` (`ldxs*`).
    Load {
        /// Access size.
        size: Size,
        /// Sign-extending load (`MEMSX` mode).
        signed: bool,
        /// Destination.
        dst: Reg,
        /// Address register.
        base: Reg,
        /// Address offset.
        off: i16,
    },
    /// `*(size *)(base + off) = src` (`st` with an immediate, `stx` with a register).
    Store {
        /// Access size.
        size: Size,
        /// Address register.
        base: Reg,
        /// Address offset.
        off: i16,
        /// The value stored.
        src: Operand,
    },
    /// An atomic read-modify-write of `*(size *)(base + off)` with `src`.
    Atomic {
        /// The operation.
        op: AtomicOp,
        /// Whether the old value is returned in `src` (always for `Xchg` and `CmpXchg`).
        fetch: bool,
        /// `W` or `DW`.
        size: Size,
        /// Address register.
        base: Reg,
        /// Address offset.
        off: i16,
        /// Operand register.
        src: Reg,
    },
    /// Unconditional jump to `pc + 1 + off` (`ja`, or `ja32` with a 32-bit offset when `long`).
    Jump {
        /// Offset in slots.
        off: i32,
        /// Encoded as `JMP32 | JA` with the offset in the immediate.
        long: bool,
    },
    /// Conditional jump to `pc + 1 + off` when `dst cond src`.
    Branch {
        /// The condition.
        cond: JmpCond,
        /// 32 (`JMP32`) or 64 bits.
        width: Width,
        /// First operand.
        dst: Reg,
        /// Second operand (an immediate is sign-extended for 64-bit jumps).
        src: Operand,
        /// Offset in slots.
        off: i16,
    },
    /// A call.
    Call(CallTarget),
    /// Return from the current function (from the program when at depth 0).
    Exit,
}

/// A decoded instruction and the slot it starts at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Slot index (program counter) of the instruction.
    pub pc: usize,
    /// The instruction.
    pub insn: Instruction,
}

impl Instruction {
    /// Number of slots the instruction takes (2 for `lddw`, else 1).
    pub const fn slots(&self) -> usize {
        match self {
            Instruction::LoadImm64 { .. } => 2,
            _ => 1,
        }
    }

    /// The register the instruction writes, if any (calls write `r0`–`r5`; not reported here).
    pub fn written_reg(&self) -> Option<Reg> {
        match *self {
            Instruction::Alu { dst, .. }
            | Instruction::Neg { dst, .. }
            | Instruction::Endian { dst, .. }
            | Instruction::LoadImm64 { dst, .. }
            | Instruction::Load { dst, .. } => Some(dst),
            Instruction::Atomic { op: AtomicOp::CmpXchg, .. } => Some(Reg::R0),
            Instruction::Atomic { fetch: true, src, .. } => Some(src),
            _ => None,
        }
    }

    /// The jump target of a jump or branch at `pc`, as a signed slot index.
    pub fn jump_target(&self, pc: usize) -> Option<i64> {
        match *self {
            Instruction::Jump { off, .. } => Some(pc as i64 + 1 + off as i64),
            Instruction::Branch { off, .. } => Some(pc as i64 + 1 + off as i64),
            _ => None,
        }
    }

    /// The function a local call at `pc` calls, or that a function reference (`lddw rX, func
    /// f`) at `pc` names, as a signed slot index.
    pub fn call_target(&self, pc: usize) -> Option<i64> {
        match *self {
            Instruction::Call(CallTarget::Local(off))
            | Instruction::LoadImm64 { imm: Imm64::Func(off), .. } => {
                Some(pc as i64 + 1 + off as i64)
            }
            _ => None,
        }
    }

    /// Whether control never falls through to the next slot (`exit`, unconditional jumps).
    pub const fn ends_block(&self) -> bool {
        matches!(self, Instruction::Exit | Instruction::Jump { .. })
    }
}
