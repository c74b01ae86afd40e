//! The typed form to slots: each [`Instruction`] to its one canonical encoding.

use super::{
    AluOp, AtomicOp, ByteOrder, CallTarget, Imm64, Instruction, JmpCond, Operand, Size, Width,
};
use crate::insn::{Insn, Reg, opcode as op};

impl Size {
    const fn field(self) -> u8 {
        match self {
            Size::B => op::B,
            Size::H => op::H,
            Size::W => op::W,
            Size::DW => op::DW,
        }
    }
}

impl AluOp {
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

impl JmpCond {
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
}

impl Instruction {
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
                    Imm64::MapValue { map, offset } => {
                        (op::PSEUDO_MAP_IDX_VALUE, map as i32, offset as i32)
                    }
                    Imm64::Func(off) => (op::PSEUDO_FUNC, off, 0),
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
