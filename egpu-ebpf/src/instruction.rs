//! The typed form of eBPF instructions, and the decoder and encoder between it and slots.
//!
//! Every valid encoding decodes to exactly one [`Instruction`] and encodes back to the same
//! slots; encodings with reserved fields set, unknown opcodes or register numbers above 10 are
//! refused with a [`DecodeError`] naming the slot. That makes bytes → [`Instruction`] → bytes the
//! identity on every program the decoder accepts, which the assembler and disassembler rely on.

use crate::DecodeError;
use crate::insn::{Insn, Reg, opcode as op};

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

    const fn field(self) -> u8 {
        match self {
            Size::B => op::B,
            Size::H => op::H,
            Size::W => op::W,
            Size::DW => op::DW,
        }
    }

    const fn from_field(opcode: u8) -> Size {
        match opcode & 0x18 {
            op::B => Size::B,
            op::H => Size::H,
            op::W => Size::W,
            _ => Size::DW,
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

    /// The result of `a op b` at `width`, as RFC 9669 defines it: 32-bit operations use the low
    /// halves and zero-extend the result, shift amounts are masked to the width, `x / 0 = 0`,
    /// `x % 0 = x`, and signed division of the minimum by -1 wraps. `b` is the second operand
    /// as the instruction sees it (an immediate sign-extended to 64 bits).
    pub fn eval(self, width: Width, a: u64, b: u64) -> u64 {
        match width {
            Width::W64 => match self {
                AluOp::Add => a.wrapping_add(b),
                AluOp::Sub => a.wrapping_sub(b),
                AluOp::Mul => a.wrapping_mul(b),
                AluOp::Div => a.checked_div(b).unwrap_or(0),
                AluOp::SDiv if b == 0 => 0,
                AluOp::SDiv => (a as i64).wrapping_div(b as i64) as u64,
                AluOp::Or => a | b,
                AluOp::And => a & b,
                AluOp::Lsh => a << (b & 63),
                AluOp::Rsh => a >> (b & 63),
                AluOp::Mod => a.checked_rem(b).unwrap_or(a),
                AluOp::SMod if b == 0 => a,
                AluOp::SMod => (a as i64).wrapping_rem(b as i64) as u64,
                AluOp::Xor => a ^ b,
                AluOp::Mov => b,
                AluOp::MovSx(8) => b as i8 as u64,
                AluOp::MovSx(16) => b as i16 as u64,
                AluOp::MovSx(_) => b as i32 as u64,
                AluOp::Arsh => ((a as i64) >> (b & 63)) as u64,
            },
            Width::W32 => {
                let (a, b) = (a as u32, b as u32);
                u64::from(match self {
                    AluOp::Add => a.wrapping_add(b),
                    AluOp::Sub => a.wrapping_sub(b),
                    AluOp::Mul => a.wrapping_mul(b),
                    AluOp::Div => a.checked_div(b).unwrap_or(0),
                    AluOp::SDiv if b == 0 => 0,
                    AluOp::SDiv => (a as i32).wrapping_div(b as i32) as u32,
                    AluOp::Or => a | b,
                    AluOp::And => a & b,
                    AluOp::Lsh => a << (b & 31),
                    AluOp::Rsh => a >> (b & 31),
                    AluOp::Mod => a.checked_rem(b).unwrap_or(a),
                    AluOp::SMod if b == 0 => a,
                    AluOp::SMod => (a as i32).wrapping_rem(b as i32) as u32,
                    AluOp::Xor => a ^ b,
                    AluOp::Mov => b,
                    AluOp::MovSx(8) => b as i8 as u32,
                    AluOp::MovSx(_) => b as i16 as u32,
                    AluOp::Arsh => ((a as i32) >> (b & 31)) as u32,
                })
            }
        }
    }

    const fn code(self) -> u8 {
        match self {
            AluOp::Add => op::ADD,
            AluOp::Sub => op::SUB,
            AluOp::Mul => op::MUL,
            AluOp::Div | AluOp::SDiv => op::DIV,
            AluOp::Or => op::OR,
            AluOp::And => op::AND,
            AluOp::Lsh => op::LSH,
            AluOp::Rsh => op::RSH,
            AluOp::Mod | AluOp::SMod => op::MOD,
            AluOp::Xor => op::XOR,
            AluOp::Mov | AluOp::MovSx(_) => op::MOV,
            AluOp::Arsh => op::ARSH,
        }
    }

    const fn offset(self) -> i16 {
        match self {
            AluOp::SDiv | AluOp::SMod => 1,
            AluOp::MovSx(bits) => bits as i16,
            _ => 0,
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

    const fn code(self) -> u8 {
        match self {
            JmpCond::Eq => op::JEQ,
            JmpCond::Gt => op::JGT,
            JmpCond::Ge => op::JGE,
            JmpCond::Set => op::JSET,
            JmpCond::Ne => op::JNE,
            JmpCond::Sgt => op::JSGT,
            JmpCond::Sge => op::JSGE,
            JmpCond::Lt => op::JLT,
            JmpCond::Le => op::JLE,
            JmpCond::Slt => op::JSLT,
            JmpCond::Sle => op::JSLE,
        }
    }

    const fn from_code(code: u8) -> Option<JmpCond> {
        Some(match code {
            op::JEQ => JmpCond::Eq,
            op::JGT => JmpCond::Gt,
            op::JGE => JmpCond::Ge,
            op::JSET => JmpCond::Set,
            op::JNE => JmpCond::Ne,
            op::JSGT => JmpCond::Sgt,
            op::JSGE => JmpCond::Sge,
            op::JLT => JmpCond::Lt,
            op::JLE => JmpCond::Le,
            op::JSLT => JmpCond::Slt,
            op::JSLE => JmpCond::Sle,
            _ => return None,
        })
    }

    /// Evaluates the condition on two 64-bit values at the given width.
    pub fn holds(self, width: Width, a: u64, b: u64) -> bool {
        let (ua, ub, sa, sb) = match width {
            Width::W64 => (a, b, a as i64, b as i64),
            Width::W32 => (a as u32 as u64, b as u32 as u64, a as i32 as i64, b as i32 as i64),
        };
        match self {
            JmpCond::Eq => ua == ub,
            JmpCond::Ne => ua != ub,
            JmpCond::Gt => ua > ub,
            JmpCond::Ge => ua >= ub,
            JmpCond::Lt => ua < ub,
            JmpCond::Le => ua <= ub,
            JmpCond::Set => ua & ub != 0,
            JmpCond::Sgt => sa > sb,
            JmpCond::Sge => sa >= sb,
            JmpCond::Slt => sa < sb,
            JmpCond::Sle => sa <= sb,
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

    /// The callee of a local call at `pc`, as a signed slot index.
    pub fn call_target(&self, pc: usize) -> Option<i64> {
        match *self {
            Instruction::Call(CallTarget::Local(off)) => Some(pc as i64 + 1 + off as i64),
            _ => None,
        }
    }

    /// Whether control never falls through to the next slot (`exit`, unconditional jumps).
    pub const fn ends_block(&self) -> bool {
        matches!(self, Instruction::Exit | Instruction::Jump { .. })
    }

    /// Appends the instruction's slots to `out`.
    pub fn encode_into(&self, out: &mut Vec<Insn>) {
        let (a, b) = self.encode();
        out.push(a);
        if let Some(b) = b {
            out.push(b);
        }
    }

    /// Encodes the instruction: one slot, and a second for `lddw`.
    pub fn encode(&self) -> (Insn, Option<Insn>) {
        let r = |r: Reg| r.index();
        let one = |insn| (insn, None);
        match *self {
            Instruction::Alu { op: alu, width, dst, src } => {
                let class = width_alu_class(width);
                let (source, src_reg, imm) = match src {
                    Operand::Reg(s) => (op::X, r(s), 0),
                    Operand::Imm(i) => (op::K, 0, i),
                };
                one(Insn::new(class | source | alu.code(), r(dst), src_reg, alu.offset(), imm))
            }
            Instruction::Neg { width, dst } => {
                one(Insn::new(width_alu_class(width) | op::NEG, r(dst), 0, 0, 0))
            }
            Instruction::Endian { order, bits, dst } => {
                let opcode = match order {
                    ByteOrder::Le => op::ALU | op::END | op::K,
                    ByteOrder::Be => op::ALU | op::END | op::X,
                    ByteOrder::Swap => op::ALU64 | op::END | op::K,
                };
                one(Insn::new(opcode, r(dst), 0, 0, bits as i32))
            }
            Instruction::LoadImm64 { dst, imm } => {
                let (src, lo, hi) = match imm {
                    Imm64::Value(v) => (0, v as u32 as i32, (v >> 32) as u32 as i32),
                    Imm64::Map(idx) => (op::PSEUDO_MAP_IDX, idx as i32, 0),
                };
                (Insn::new(op::LDDW, r(dst), src, 0, lo), Some(Insn::new(0, 0, 0, 0, hi)))
            }
            Instruction::Load { size, signed, dst, base, off } => {
                let mode = if signed { op::MEMSX } else { op::MEM };
                one(Insn::new(op::LDX | mode | size.field(), r(dst), r(base), off, 0))
            }
            Instruction::Store { size, base, off, src } => match src {
                Operand::Reg(s) => {
                    one(Insn::new(op::STX | op::MEM | size.field(), r(base), r(s), off, 0))
                }
                Operand::Imm(i) => {
                    one(Insn::new(op::ST | op::MEM | size.field(), r(base), 0, off, i))
                }
            },
            Instruction::Atomic { op: aop, fetch, size, base, off, src } => {
                let imm = match aop {
                    AtomicOp::Add => op::ADD as i32,
                    AtomicOp::Or => op::OR as i32,
                    AtomicOp::And => op::AND as i32,
                    AtomicOp::Xor => op::XOR as i32,
                    AtomicOp::Xchg => op::XCHG,
                    AtomicOp::CmpXchg => op::CMPXCHG,
                } | if fetch { op::FETCH } else { 0 };
                one(Insn::new(op::STX | op::ATOMIC | size.field(), r(base), r(src), off, imm))
            }
            Instruction::Jump { off, long: false } => {
                one(Insn::new(op::JMP | op::JA, 0, 0, off as i16, 0))
            }
            Instruction::Jump { off, long: true } => {
                one(Insn::new(op::JMP32 | op::JA, 0, 0, 0, off))
            }
            Instruction::Branch { cond, width, dst, src, off } => {
                let class = match width {
                    Width::W32 => op::JMP32,
                    Width::W64 => op::JMP,
                };
                let (source, src_reg, imm) = match src {
                    Operand::Reg(s) => (op::X, r(s), 0),
                    Operand::Imm(i) => (op::K, 0, i),
                };
                one(Insn::new(class | source | cond.code(), r(dst), src_reg, off, imm))
            }
            Instruction::Call(CallTarget::Helper(id)) => {
                one(Insn::new(op::CALL_OP, 0, op::CALL_HELPER, 0, id as i32))
            }
            Instruction::Call(CallTarget::Local(off)) => {
                one(Insn::new(op::CALL_OP, 0, op::CALL_LOCAL, 0, off))
            }
            Instruction::Call(CallTarget::Reg(reg)) => {
                one(Insn::new(op::JMP | op::CALL | op::X, r(reg), 0, 0, 0))
            }
            Instruction::Exit => one(Insn::new(op::EXIT_OP, 0, 0, 0, 0)),
        }
    }
}

const fn width_alu_class(width: Width) -> u8 {
    match width {
        Width::W32 => op::ALU,
        Width::W64 => op::ALU64,
    }
}

/// Encodes instructions into slots.
pub fn encode(insns: &[Instruction]) -> Vec<Insn> {
    let mut out = Vec::with_capacity(insns.len());
    for insn in insns {
        insn.encode_into(&mut out);
    }
    out
}

/// Decodes every instruction of a program.
///
/// Fails at the first slot that is not a valid, canonical encoding.
pub fn decode(slots: &[Insn]) -> Result<Vec<Decoded>, DecodeError> {
    let mut out = Vec::with_capacity(slots.len());
    let mut pc = 0;
    while pc < slots.len() {
        let insn = decode_one(slots, pc)?;
        out.push(Decoded { pc, insn });
        pc += insn.slots();
    }
    Ok(out)
}

/// Decodes the instruction starting at slot `pc`.
pub fn decode_one(slots: &[Insn], pc: usize) -> Result<Instruction, DecodeError> {
    let s = slots[pc];
    let reserved =
        |field: &'static str, value: i64| DecodeError::ReservedField { pc, field, value };
    let reg = |field: &'static str, n: u8| {
        Reg::new(n).ok_or(DecodeError::InvalidRegister { pc, field, value: n })
    };
    let zero = |field: &'static str, value: i64| -> Result<(), DecodeError> {
        if value == 0 { Ok(()) } else { Err(reserved(field, value)) }
    };
    let unknown = DecodeError::UnknownOpcode { pc, opcode: s.opcode };
    let opcode = s.opcode;
    match s.class() {
        op::ALU | op::ALU64 => {
            let width = if s.class() == op::ALU { Width::W32 } else { Width::W64 };
            let dst = reg("dst", s.dst)?;
            let code = opcode & 0xf0;
            let is_reg = opcode & op::X != 0;
            if code == op::END {
                zero("src", s.src.into())?;
                zero("off", s.off.into())?;
                let order = match (width, is_reg) {
                    (Width::W32, false) => ByteOrder::Le,
                    (Width::W32, true) => ByteOrder::Be,
                    (Width::W64, false) => ByteOrder::Swap,
                    (Width::W64, true) => return Err(unknown),
                };
                if !matches!(s.imm, 16 | 32 | 64) {
                    return Err(DecodeError::InvalidEndianWidth { pc, imm: s.imm });
                }
                return Ok(Instruction::Endian { order, bits: s.imm as u8, dst });
            }
            if code == op::NEG {
                if is_reg {
                    return Err(unknown);
                }
                zero("src", s.src.into())?;
                zero("off", s.off.into())?;
                zero("imm", s.imm.into())?;
                return Ok(Instruction::Neg { width, dst });
            }
            let alu = match (code, s.off) {
                (op::ADD, 0) => AluOp::Add,
                (op::SUB, 0) => AluOp::Sub,
                (op::MUL, 0) => AluOp::Mul,
                (op::DIV, 0) => AluOp::Div,
                (op::DIV, 1) => AluOp::SDiv,
                (op::OR, 0) => AluOp::Or,
                (op::AND, 0) => AluOp::And,
                (op::LSH, 0) => AluOp::Lsh,
                (op::RSH, 0) => AluOp::Rsh,
                (op::MOD, 0) => AluOp::Mod,
                (op::MOD, 1) => AluOp::SMod,
                (op::XOR, 0) => AluOp::Xor,
                (op::MOV, 0) => AluOp::Mov,
                (op::MOV, 8 | 16) if is_reg => AluOp::MovSx(s.off as u8),
                (op::MOV, 32) if is_reg && width == Width::W64 => AluOp::MovSx(32),
                (op::ARSH, 0) => AluOp::Arsh,
                (op::ADD..=op::ARSH, off) => return Err(reserved("off", off.into())),
                _ => return Err(unknown),
            };
            let src = if is_reg {
                zero("imm", s.imm.into())?;
                Operand::Reg(reg("src", s.src)?)
            } else {
                zero("src", s.src.into())?;
                Operand::Imm(s.imm)
            };
            Ok(Instruction::Alu { op: alu, width, dst, src })
        }
        op::JMP | op::JMP32 => {
            let width = if s.class() == op::JMP32 { Width::W32 } else { Width::W64 };
            let code = opcode & 0xf0;
            let is_reg = opcode & op::X != 0;
            match (code, width) {
                (op::JA, _) => {
                    if is_reg {
                        return Err(unknown);
                    }
                    zero("dst", s.dst.into())?;
                    zero("src", s.src.into())?;
                    match width {
                        Width::W64 => {
                            zero("imm", s.imm.into())?;
                            Ok(Instruction::Jump { off: s.off.into(), long: false })
                        }
                        Width::W32 => {
                            zero("off", s.off.into())?;
                            Ok(Instruction::Jump { off: s.imm, long: true })
                        }
                    }
                }
                (op::EXIT, Width::W64) => {
                    if is_reg {
                        return Err(unknown);
                    }
                    zero("dst", s.dst.into())?;
                    zero("src", s.src.into())?;
                    zero("off", s.off.into())?;
                    zero("imm", s.imm.into())?;
                    Ok(Instruction::Exit)
                }
                (op::CALL, Width::W64) => {
                    zero("off", s.off.into())?;
                    if is_reg {
                        zero("src", s.src.into())?;
                        zero("imm", s.imm.into())?;
                        return Ok(Instruction::Call(CallTarget::Reg(reg("dst", s.dst)?)));
                    }
                    zero("dst", s.dst.into())?;
                    match s.src {
                        op::CALL_HELPER => Ok(Instruction::Call(CallTarget::Helper(s.imm as u32))),
                        op::CALL_LOCAL => Ok(Instruction::Call(CallTarget::Local(s.imm))),
                        op::CALL_KFUNC => Err(DecodeError::Unsupported {
                            pc,
                            what: "calls to kernel functions (kfuncs)",
                        }),
                        other => Err(reserved("src", other.into())),
                    }
                }
                _ => {
                    let cond = JmpCond::from_code(code).ok_or(unknown)?;
                    let dst = reg("dst", s.dst)?;
                    let src = if is_reg {
                        zero("imm", s.imm.into())?;
                        Operand::Reg(reg("src", s.src)?)
                    } else {
                        zero("src", s.src.into())?;
                        Operand::Imm(s.imm)
                    };
                    Ok(Instruction::Branch { cond, width, dst, src, off: s.off })
                }
            }
        }
        op::LD => {
            if opcode != op::LDDW {
                if opcode & 0xe0 == op::ABS || opcode & 0xe0 == op::IND {
                    return Err(DecodeError::Unsupported {
                        pc,
                        what: "legacy packet loads (LD_ABS, LD_IND)",
                    });
                }
                return Err(unknown);
            }
            let dst = reg("dst", s.dst)?;
            zero("off", s.off.into())?;
            let Some(next) = slots.get(pc + 1) else {
                return Err(DecodeError::LddwMissingSecondHalf { pc });
            };
            if next.opcode != 0 || next.dst != 0 || next.src != 0 || next.off != 0 {
                return Err(DecodeError::LddwMissingSecondHalf { pc });
            }
            let imm = match s.src {
                0 => Imm64::Value((s.imm as u32 as u64) | ((next.imm as u32 as u64) << 32)),
                op::PSEUDO_MAP_IDX => {
                    if next.imm != 0 {
                        return Err(DecodeError::ReservedField {
                            pc: pc + 1,
                            field: "imm",
                            value: next.imm.into(),
                        });
                    }
                    Imm64::Map(s.imm as u32)
                }
                other => return Err(DecodeError::UnsupportedLddwSource { pc, src: other }),
            };
            Ok(Instruction::LoadImm64 { dst, imm })
        }
        op::LDX => {
            let mode = opcode & 0xe0;
            let size = Size::from_field(opcode);
            let signed = match mode {
                op::MEM => false,
                op::MEMSX if size != Size::DW => true,
                _ => return Err(unknown),
            };
            zero("imm", s.imm.into())?;
            Ok(Instruction::Load {
                size,
                signed,
                dst: reg("dst", s.dst)?,
                base: reg("src", s.src)?,
                off: s.off,
            })
        }
        op::ST => {
            if opcode & 0xe0 != op::MEM {
                return Err(unknown);
            }
            zero("src", s.src.into())?;
            Ok(Instruction::Store {
                size: Size::from_field(opcode),
                base: reg("dst", s.dst)?,
                off: s.off,
                src: Operand::Imm(s.imm),
            })
        }
        op::STX => {
            let size = Size::from_field(opcode);
            let base = reg("dst", s.dst)?;
            let src = reg("src", s.src)?;
            match opcode & 0xe0 {
                op::MEM => {
                    zero("imm", s.imm.into())?;
                    Ok(Instruction::Store { size, base, off: s.off, src: Operand::Reg(src) })
                }
                op::ATOMIC if matches!(size, Size::W | Size::DW) => {
                    let fetch = s.imm & op::FETCH != 0;
                    let aop = match s.imm & !op::FETCH {
                        0x00 => AtomicOp::Add,
                        0x40 => AtomicOp::Or,
                        0x50 => AtomicOp::And,
                        0xa0 => AtomicOp::Xor,
                        0xe0 if fetch => AtomicOp::Xchg,
                        0xf0 if fetch => AtomicOp::CmpXchg,
                        _ => return Err(DecodeError::InvalidAtomicOp { pc, imm: s.imm }),
                    };
                    Ok(Instruction::Atomic { op: aop, fetch, size, base, off: s.off, src })
                }
                _ => Err(unknown),
            }
        }
        _ => Err(unknown),
    }
}
