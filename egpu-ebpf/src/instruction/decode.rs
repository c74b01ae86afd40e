//! Slots to the typed form, refusing every encoding that is not canonical: reserved fields set,
//! unknown opcodes, register numbers above 10.

use super::{
    AluOp, AtomicOp, ByteOrder, CallTarget, Decoded, Imm64, Instruction, JmpCond, Operand, Size,
    Width,
};
use crate::DecodeError;
use crate::insn::{Insn, Reg, opcode as op};

impl Size {
    const fn from_field(opcode: u8) -> Size {
        match opcode & 0x18 {
            op::B => Size::B,
            op::H => Size::H,
            op::W => Size::W,
            _ => Size::DW,
        }
    }
}

impl JmpCond {
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
                op::PSEUDO_MAP_IDX_VALUE => {
                    Imm64::MapValue { map: s.imm as u32, offset: next.imm as u32 }
                }
                op::PSEUDO_FUNC => {
                    if next.imm != 0 {
                        return Err(DecodeError::ReservedField {
                            pc: pc + 1,
                            field: "imm",
                            value: next.imm.into(),
                        });
                    }
                    Imm64::Func(s.imm)
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
